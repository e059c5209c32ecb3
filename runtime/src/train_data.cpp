// dsrt: the training runners' data: .npy batches read, checked and copied
// into the input slots micro-batch by micro-batch (train_common.h).
#include "train_common.h"

#include "dsrt/backend.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <omp.h>
#include <sys/stat.h>

namespace dsrt {
namespace runner {

//===--- data --------------------------------------------------------------------===//

namespace {

// A global batch holds `ranks` * accumulation_steps micro-batches (rank r's
// are r*k .. r*k+k-1).
std::string expected_layout(const ValueInfo &input, int64_t accumulation_steps, int64_t ranks) {
  std::string dims = "n";
  if (input.shape.rank > 0) {
    dims += ", " + std::to_string(ranks * accumulation_steps * input.shape[0]);
    for (int d = 1; d < input.shape.rank; ++d) dims += ", " + std::to_string(input.shape[d]);
  }
  std::string text = std::string(dtype_name(input.dtype)) + " [" + dims + "]";
  if (input.shape.rank > 0)
    text += " (n >= 1 batches of " +
            (ranks > 1 ? std::to_string(ranks) + " ranks x " : std::string()) +
            std::to_string(accumulation_steps) + " micro-batches of " + input.shape.str() + ")";
  else
    text += " (one value per batch)";
  return text;
}

// The first value of `item` outside its input's range (set_input_range) in
// the micro-batches rank `rank` reads (every one when rank < 0), as an
// error naming the file, the element and where it falls; "" when all fit.
std::string check_range(const InputData &item, int64_t accumulation_steps, int64_t ranks,
                        int64_t rank) {
  const ValueInfo &input = *item.input;
  if (!input.has_range) return "";
  const int64_t micro = input.shape.numel();
  const int64_t per_batch = item.per_batch_scalar ? 1 : micro * ranks * accumulation_steps;
  const int64_t count = item.array.numel();
  const void *bytes = item.array.bytes.data();
  auto value_at = [&](int64_t i) -> int64_t {
    return input.dtype == DType::I64 ? static_cast<const int64_t *>(bytes)[i]
                                     : static_cast<const int32_t *>(bytes)[i];
  };
  auto fits = [&](int64_t v) {
    return (v >= input.range_lo && v < input.range_hi) || (input.has_ignore && v == input.ignore);
  };
  // This rank's micro-batches are one run of rank * k .. rank * k + k - 1
  // per global batch.
  const bool all = rank < 0 || item.per_batch_scalar;
  const int64_t run_begin = all ? 0 : rank * accumulation_steps * micro;
  const int64_t run_end = all ? per_batch : run_begin + accumulation_steps * micro;
  for (int64_t batch = 0; batch * per_batch < count; ++batch)
    for (int64_t i = batch * per_batch + run_begin; i < batch * per_batch + run_end; ++i) {
      const int64_t v = value_at(i);
      if (fits(v)) continue;
      std::string where = "global batch " + std::to_string(batch);
      if (!item.per_batch_scalar)
        where += ", micro-batch " + std::to_string((i % per_batch) / micro) + ", element " +
                 std::to_string(i % micro) + " of it";
      return "input '" + input.name + "': '" + item.array.path + "' element " +
             std::to_string(i) + " (" + where + ") is " + std::to_string(v) + ", outside [" +
             std::to_string(input.range_lo) + ", " + std::to_string(input.range_hi) + ")" +
             (input.has_ignore ? " and not the ignored value " + std::to_string(input.ignore)
                               : std::string()) +
             ", the values the model takes there";
    }
  return "";
}

}  // namespace

std::vector<InputData> load_data(const std::vector<const ValueInfo *> &inputs,
                                 const std::string &dir, int64_t accumulation_steps,
                                 int64_t ranks, int64_t rank) {
  struct stat st;
  if (stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    throw Error("--data '" + dir + "' is not a directory");
  std::vector<InputData> data;
  for (const ValueInfo *input_info : inputs) {
    const ValueInfo &input = *input_info;
    std::string path = dir + "/" + file_name_for(input.name) + ".npy";
    std::string expected = expected_layout(input, accumulation_steps, ranks);
    if (stat(path.c_str(), &st) != 0)
      throw Error("input '" + input.name + "': missing file '" + path + "'; expected " +
                  expected);
    InputData item;
    item.input = &input;
    try {
      item.array = read_npy(path);
    } catch (const Error &error) {
      throw Error("input '" + input.name + "': " + error.what() + "; expected " + expected);
    }
    const Shape &shape = item.array.shape;
    bool matches = item.array.dtype == input.dtype && shape.rank == input.shape.rank + 1 &&
                   shape[0] >= 1;
    if (matches && input.shape.rank > 0)
      matches = shape[1] == ranks * accumulation_steps * input.shape[0];
    for (int d = 1; matches && d < input.shape.rank; ++d)
      matches = shape[d + 1] == input.shape[d];
    if (!matches)
      throw Error("input '" + input.name + "': '" + path + "' holds " +
                  dtype_name(item.array.dtype) + " " + shape.str() + ", expected " + expected);
    item.batches = shape[0];
    item.micro_bytes = Tensor{nullptr, input.dtype, input.shape}.nbytes();
    item.per_batch_scalar = input.shape.rank == 0;
    item.batch_bytes = item.per_batch_scalar
                           ? item.micro_bytes
                           : item.micro_bytes * static_cast<size_t>(ranks * accumulation_steps);
    if (!data.empty() && item.batches != data.front().batches)
      throw Error("input '" + input.name + "': '" + path + "' holds " +
                  std::to_string(item.batches) + " batches but input '" +
                  data.front().input->name + "' ('" + data.front().array.path + "') holds " +
                  std::to_string(data.front().batches) +
                  "; every data file needs the same number of batches");
    std::string out_of_range = check_range(item, accumulation_steps, ranks, rank);
    if (!out_of_range.empty()) throw Error(out_of_range);
    data.push_back(std::move(item));
  }
  return data;
}

void load_micro_batch(Program &program, const InputData &item, const ValueInfo &slot,
                      int64_t batch, int64_t global_micro) {
  program.memory.acquire(slot.offset, slot_size(*program.info, item.micro_bytes));
  size_t offset = static_cast<size_t>(batch) * item.batch_bytes;
  if (!item.per_batch_scalar) offset += static_cast<size_t>(global_micro) * item.micro_bytes;
  write_from_host(program.stream, program.arena + slot.offset, item.array.bytes.data() + offset,
                  item.micro_bytes);
}

}  // namespace runner
}  // namespace dsrt

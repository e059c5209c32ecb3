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

}  // namespace

std::vector<InputData> load_data(const std::vector<const ValueInfo *> &inputs,
                                 const std::string &dir, int64_t accumulation_steps,
                                 int64_t ranks) {
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
    data.push_back(std::move(item));
  }
  return data;
}

void load_micro_batch(Program &program, const InputData &item, const ValueInfo &slot,
                      int64_t batch, int64_t global_micro) {
  program.memory.acquire(slot.offset, slot_size(*program.info, item.micro_bytes));
  size_t offset = static_cast<size_t>(batch) * item.batch_bytes;
  if (!item.per_batch_scalar) offset += static_cast<size_t>(global_micro) * item.micro_bytes;
  backend(program.stream)
      .copy(program.stream, program.arena + slot.offset, item.array.bytes.data() + offset,
            item.micro_bytes);
}

}  // namespace runner
}  // namespace dsrt

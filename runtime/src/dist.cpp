// dsrt: the kernels and describe calls of data-parallel programs.
#include "dsrt/dist.h"

#include "dsrt/comm.h"
#include "dsrt/program.h"
#include "internal.h"

#include <cstring>
#include <set>
#include <string>

namespace dsrt {

namespace {

std::string text(const Tensor &t) { return std::string(dtype_name(t.dtype)) + " " + t.shape.str(); }

// The communicator of grid axis `axis`.
Communicator &axis_comm(const char *op, int64_t axis) {
  if (axis != 0)
    throw Error(std::string("dsrt::") + op + ": grid axis " + std::to_string(axis) +
                " does not exist (only axis 0, \"dp\", is supported)");
  return Communicator::world();
}

void check_same_type(const char *op, const Tensor &in, const Tensor &out) {
  if (in.dtype != out.dtype)
    throw Error(std::string("dsrt::") + op + ": in " + text(in) + " and out " + text(out) +
                " have different element types");
}

void check_reducible(const char *op, const Tensor &in, const Tensor &out) {
  check_same_type(op, in, out);
  if (in.dtype == DType::Bool)
    throw Error(std::string("dsrt::") + op + ": cannot reduce " + text(in) +
                " (f32, f16, bf16, i64 and i32 can)");
}

// `whole` must hold `ranks` times the elements of `part`.
void check_chunks(const char *op, const char *whole_name, const Tensor &whole,
                  const char *part_name, const Tensor &part, int ranks) {
  if (whole.numel() != static_cast<int64_t>(ranks) * part.numel())
    throw Error(std::string("dsrt::") + op + ": " + whole_name + " " + text(whole) + " holds " +
                std::to_string(whole.numel()) + " elements but must hold " +
                std::to_string(ranks) + " ranks x " + part_name + " " + text(part) + " = " +
                std::to_string(static_cast<int64_t>(ranks) * part.numel()));
}

}  // namespace

//===--- collectives ---------------------------------------------------------===//

void all_reduce(Stream &s, const Tensor &in, const Tensor &out, ReduceOp op, int64_t axis) {
  Communicator &comm = axis_comm("all_reduce", axis);
  check_reducible("all_reduce", in, out);
  if (in.numel() != out.numel())
    throw Error("dsrt::all_reduce: in " + text(in) + " and out " + text(out) +
                " differ in element count");
  comm.all_reduce(s, in, out, op);
}

void all_gather(Stream &s, const Tensor &in, const Tensor &out, int64_t axis) {
  Communicator &comm = axis_comm("all_gather", axis);
  check_same_type("all_gather", in, out);
  check_chunks("all_gather", "out", out, "in", in, comm.size());
  // With out.numel() a multiple of the size, the ring chunks are the equal
  // chunks [r * in.numel(), (r + 1) * in.numel()).
  comm.all_gather(s, in, out);
}

void reduce_scatter(Stream &s, const Tensor &in, const Tensor &out, ReduceOp op,
                    int64_t axis) {
  Communicator &comm = axis_comm("reduce_scatter", axis);
  check_reducible("reduce_scatter", in, out);
  check_chunks("reduce_scatter", "in", in, "out", out, comm.size());
  comm.reduce_scatter(s, in, out, op);
}

void all_slice(Stream &s, const Tensor &in, const Tensor &out, int64_t axis) {
  Communicator &comm = axis_comm("all_slice", axis);
  check_same_type("all_slice", in, out);
  check_chunks("all_slice", "in", in, "out", out, comm.size());
  detail::begin_kernel(s);
  const size_t bytes = out.nbytes();
  const uint8_t *src = static_cast<const uint8_t *>(in.data) + comm.rank() * bytes;
  if (bytes > 0 && src != out.data) std::memmove(out.data, src, bytes);
}

void flat_pad(Stream &s, const Tensor &in, const Tensor &out) {
  check_same_type("flat_pad", in, out);
  if (out.shape.rank != 1 || out.numel() < in.numel())
    throw Error("dsrt::flat_pad: out " + text(out) + " must be 1-D with at least the " +
                std::to_string(in.numel()) + " elements of in " + text(in));
  detail::begin_kernel(s);
  const size_t n = in.nbytes(), m = out.nbytes();
  if (n > 0 && in.data != out.data) std::memmove(out.data, in.data, n);
  if (m > n) std::memset(static_cast<uint8_t *>(out.data) + n, 0, m - n);
}

//===--- describe -------------------------------------------------------------===//

void set_grid(ProgramInfo &info, const char *axis_names, const int64_t *sizes,
              int64_t axis_count) {
  std::vector<std::string> names;
  std::string all = axis_names ? axis_names : "";
  for (size_t begin = 0;;) {
    size_t comma = all.find(',', begin);
    names.push_back(all.substr(begin, comma == std::string::npos ? std::string::npos
                                                                  : comma - begin));
    if (comma == std::string::npos) break;
    begin = comma + 1;
  }
  if (axis_count < 1 || static_cast<int64_t>(names.size()) != axis_count)
    throw Error("set_grid: axis names '" + all + "' name " + std::to_string(names.size()) +
                " axes but the grid has " + std::to_string(axis_count));
  std::set<std::string> seen;
  int64_t world = 1;
  for (int64_t i = 0; i < axis_count; ++i) {
    if (names[i].empty() || !seen.insert(names[i]).second)
      throw Error("set_grid: axis names '" + all + "' must be distinct and non-empty");
    if (sizes[i] < 1)
      throw Error("set_grid: axis '" + names[i] + "' has size " + std::to_string(sizes[i]) +
                  "; sizes must be at least 1");
    world *= sizes[i];
  }
  info.grid_names = names;
  info.grid_sizes.assign(sizes, sizes + axis_count);
  info.world = world;
}

void set_param_shard(ProgramInfo &info, int64_t total_numel, Shape full_shape) {
  if (info.params.empty()) throw Error("set_param_shard: no parameter was added before it");
  ParamInfo &param = info.params.back();
  const std::string what = "set_param_shard: parameter '" + param.name + "'";
  if (total_numel < 1 || full_shape.numel() != total_numel)
    throw Error(what + ": total_numel " + std::to_string(total_numel) + " does not match " +
                full_shape.str());
  const int64_t dp = info.dp_size();
  if (param.data.data) {
    if (param.data.numel() != total_numel)
      throw Error(what + ": its data holds " + std::to_string(param.data.numel()) +
                  " elements, not the whole tensor " + full_shape.str());
    param.shape = Shape{(total_numel + dp - 1) / dp};
  }
  if (param.shape.rank != 1 || param.shape[0] * dp < total_numel)
    throw Error(what + ": its slot " + param.shape.str() + " is not a 1-D shard that " +
                std::to_string(dp) + " ranks can cover " + full_shape.str() + " with");
  param.shard_total = total_numel;
  param.full_shape = full_shape;
}

}  // namespace dsrt

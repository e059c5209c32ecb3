// Backend-neutral pieces of the kernels: storage types of f16/bf16,
// argument checks, dtype dispatch, workspace slices and broadcasting plans.
// The cpu (internal.h) and cuda (cuda/common.cuh) backends build on it; its
// functions are in kernel_checks.cpp. Not installed.
#ifndef DSRT_SRC_KERNEL_COMMON_H
#define DSRT_SRC_KERNEL_COMMON_H

#include "dsrt/kernels.h"
#include "workspace_shapes.h"

#include <cstdint>
#include <string>

namespace dsrt {
namespace detail {

//===----------------------------------------------------------------------===//
// 16-bit float storage and conversions
//===----------------------------------------------------------------------===//

// Distinct storage types so that templates can tell f16 from bf16.
struct half_t {
  uint16_t bits;
};
struct bfloat_t {
  uint16_t bits;
};

template <typename T> struct TypeTag {
  using type = T;
};


//===----------------------------------------------------------------------===//
// Errors and argument checks
//===----------------------------------------------------------------------===//

[[noreturn]] void fail(const char *kernel, const std::string &message);
void check_dtype(const char *kernel, const char *name, const Tensor &t, DType expected);
void check_float(const char *kernel, const char *name, const Tensor &t);
void check_shape(const char *kernel, const char *name, const Tensor &t, const Shape &expected);
void check_same_dtype(const char *kernel, const char *name_a, const Tensor &a, const char *name_b,
                      const Tensor &b);
// A tensor with elements needs memory.
void check_data(const char *kernel, const char *name, const Tensor &t);
void check_axis(const char *kernel, int axis, int rank);

// Calls f(TypeTag<T>{}) with T the storage type of a float dtype.
template <typename F> void dispatch_float(const char *kernel, DType dtype, F &&f) {
  switch (dtype) {
  case DType::F32: f(TypeTag<float>{}); return;
  case DType::F16: f(TypeTag<half_t>{}); return;
  case DType::BF16: f(TypeTag<bfloat_t>{}); return;
  default: fail(kernel, std::string("needs a float tensor (f32, f16, bf16), got ") + dtype_name(dtype));
  }
}
// Float and integer types (ds "numeric").
template <typename F> void dispatch_numeric(const char *kernel, DType dtype, F &&f) {
  switch (dtype) {
  case DType::F32: f(TypeTag<float>{}); return;
  case DType::F16: f(TypeTag<half_t>{}); return;
  case DType::BF16: f(TypeTag<bfloat_t>{}); return;
  case DType::I64: f(TypeTag<int64_t>{}); return;
  case DType::I32: f(TypeTag<int32_t>{}); return;
  default: fail(kernel, std::string("needs a numeric tensor (f32, f16, bf16, i64, i32), got ") +
                            dtype_name(dtype));
  }
}
// Every dtype; bool is stored as one byte, 0 or 1.
template <typename F> void dispatch_all(const char *kernel, DType dtype, F &&f) {
  switch (dtype) {
  case DType::F32: f(TypeTag<float>{}); return;
  case DType::F16: f(TypeTag<half_t>{}); return;
  case DType::BF16: f(TypeTag<bfloat_t>{}); return;
  case DType::I64: f(TypeTag<int64_t>{}); return;
  case DType::I32: f(TypeTag<int32_t>{}); return;
  case DType::Bool: f(TypeTag<uint8_t>{}); return;
  }
  fail(kernel, "unknown element type");
}
// Data movement only needs the element size.
template <typename F> void dispatch_bytes(size_t size, F &&f) {
  switch (size) {
  case 1: f(TypeTag<uint8_t>{}); return;
  case 2: f(TypeTag<uint16_t>{}); return;
  case 4: f(TypeTag<uint32_t>{}); return;
  default: f(TypeTag<uint64_t>{}); return;
  }
}

void check_index_tensor(const char *kernel, const char *name, const Tensor &t);

// A kernel's workspace handed out as consecutive f32 arrays. The constructor
// throws unless `ws` holds at least `need` bytes (the kernel's size function).
class WorkspaceFloats {
public:
  WorkspaceFloats(const char *kernel, const Workspace &ws, int64_t need);
  float *take(int64_t count) {
    float *p = next_;
    next_ += count;
    return p;
  }

private:
  float *next_;
};


//===----------------------------------------------------------------------===//
// Broadcasting plans
//===----------------------------------------------------------------------===//

// Up to 3 operands (where) broadcast against an output shape. Size-1 axes of
// the output are dropped and neighbouring axes that are contiguous for every
// operand are merged, so the common cases collapse to one or two axes and the
// inner loop sees per-operand strides of 0 or 1.
struct BroadcastPlan {
  int rank = 0;  // at least 1 after planning
  int64_t dims[kMaxRank] = {};
  int64_t strides[3][kMaxRank] = {};  // elements; 0 where an operand broadcasts
  int num_operands = 0;
};

// Returns false if some operand does not broadcast to `out`.
bool plan_broadcast(const Shape &out, const Shape *operands, int num_operands, BroadcastPlan &plan);
// The plan of operands broadcast to y; throws naming the shapes otherwise.
BroadcastPlan plan_for(const char *kernel, const Tensor &y, const Tensor *operands, int count);

// Kernel names in messages: "unary(sqrt)", "binary(add)", "compare(eq)".
const char *unary_name(UnaryOp op);
const char *binary_name(BinaryOp op);
const char *compare_name(ComparePredicate pred);

}  // namespace detail
}  // namespace dsrt

#endif  // DSRT_SRC_KERNEL_COMMON_H

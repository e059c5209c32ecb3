// The argument checks, broadcasting plans and workspace slices of
// kernel_common.h, shared by every backend's kernels.
#include "kernel_common.h"

namespace dsrt {
namespace detail {

void fail(const char *kernel, const std::string &message) {
  throw Error(std::string("dsrt::") + kernel + ": " + message);
}

void check_dtype(const char *kernel, const char *name, const Tensor &t, DType expected) {
  if (t.dtype != expected)
    fail(kernel, std::string(name) + " must be " + dtype_name(expected) + ", got " +
                     dtype_name(t.dtype));
}

void check_float(const char *kernel, const char *name, const Tensor &t) {
  if (!is_float(t.dtype))
    fail(kernel, std::string(name) + " must be f32, f16 or bf16, got " + dtype_name(t.dtype));
}

void check_shape(const char *kernel, const char *name, const Tensor &t, const Shape &expected) {
  if (t.shape != expected)
    fail(kernel, std::string(name) + " has shape " + t.shape.str() + ", expected " +
                     expected.str());
}

void check_same_dtype(const char *kernel, const char *name_a, const Tensor &a, const char *name_b,
                      const Tensor &b) {
  if (a.dtype != b.dtype)
    fail(kernel, std::string(name_a) + " is " + dtype_name(a.dtype) + " but " + name_b + " is " +
                     dtype_name(b.dtype));
}

void check_data(const char *kernel, const char *name, const Tensor &t) {
  if (t.shape.rank < 0 || t.shape.rank > kMaxRank)
    fail(kernel, std::string(name) + " has invalid rank " + std::to_string(t.shape.rank));
  for (int d = 0; d < t.shape.rank; ++d)
    if (t.shape.dims[d] < 0)
      fail(kernel, std::string(name) + " has a negative dimension in " + t.shape.str());
  if (t.data == nullptr && t.numel() > 0)
    fail(kernel, std::string(name) + " has no data (null pointer) for shape " + t.shape.str());
}

void check_axis(const char *kernel, int axis, int rank) {
  if (axis < 0 || axis >= rank)
    fail(kernel, "axis " + std::to_string(axis) + " is out of range for rank " +
                     std::to_string(rank));
}

void check_index_tensor(const char *kernel, const char *name, const Tensor &t) {
  if (t.dtype != DType::I64 && t.dtype != DType::I32)
    fail(kernel, std::string(name) + " must be i64 or i32, got " + dtype_name(t.dtype));
  check_data(kernel, name, t);
}

bool plan_broadcast(const Shape &out, const Shape *operands, int num_operands,
                    BroadcastPlan &plan) {
  const int rank = out.rank;
  int64_t full[3][kMaxRank] = {};
  for (int k = 0; k < num_operands; ++k) {
    const Shape &s = operands[k];
    if (s.rank > rank)
      return false;
    int64_t stride = 1;
    for (int d = rank - 1; d >= 0; --d) {
      int sd = d - (rank - s.rank);
      if (sd < 0) {
        full[k][d] = 0;
        continue;
      }
      int64_t dim = s.dims[sd];
      if (dim == out.dims[d])
        full[k][d] = dim == 1 ? 0 : stride;
      else if (dim == 1)
        full[k][d] = 0;
      else
        return false;
      stride *= dim;
    }
  }
  plan = BroadcastPlan();
  plan.num_operands = num_operands;
  int r = 0;
  for (int d = 0; d < rank; ++d) {
    if (out.dims[d] == 1)
      continue;
    bool merge = r > 0;
    for (int k = 0; k < num_operands && merge; ++k)
      merge = plan.strides[k][r - 1] == full[k][d] * out.dims[d];
    if (merge) {
      plan.dims[r - 1] *= out.dims[d];
      for (int k = 0; k < num_operands; ++k)
        plan.strides[k][r - 1] = full[k][d];
    } else {
      plan.dims[r] = out.dims[d];
      for (int k = 0; k < num_operands; ++k)
        plan.strides[k][r] = full[k][d];
      ++r;
    }
  }
  if (r == 0) {
    plan.dims[0] = 1;
    r = 1;
  }
  plan.rank = r;
  return true;
}

WorkspaceFloats::WorkspaceFloats(const char *kernel, const Workspace &ws, int64_t need)
    : next_(static_cast<float *>(ws.data)) {
  if (ws.bytes < need)
    fail(kernel, "workspace of " + std::to_string(ws.bytes) + " bytes is smaller than the " +
                     std::to_string(need) + " bytes the kernel needs");
  if (need > 0 && ws.data == nullptr)
    fail(kernel, "workspace of " + std::to_string(ws.bytes) + " bytes has no data (null pointer)");
}

BroadcastPlan plan_for(const char *kernel, const Tensor &y, const Tensor *operands, int count) {
  Shape shapes[3];
  for (int k = 0; k < count; ++k)
    shapes[k] = operands[k].shape;
  BroadcastPlan plan;
  if (!plan_broadcast(y.shape, shapes, count, plan)) {
    std::string message = "operand shapes";
    for (int k = 0; k < count; ++k)
      message += " " + shapes[k].str();
    fail(kernel, message + " do not broadcast to the output shape " + y.shape.str());
  }
  return plan;
}

const char *unary_name(UnaryOp op) {
  switch (op) {
  case UnaryOp::Sqrt: return "unary(sqrt)";
  case UnaryOp::Reciprocal: return "unary(reciprocal)";
  case UnaryOp::Exp: return "unary(exp)";
  case UnaryOp::Log: return "unary(log)";
  case UnaryOp::Tanh: return "unary(tanh)";
  case UnaryOp::Erf: return "unary(erf)";
  case UnaryOp::Sigmoid: return "unary(sigmoid)";
  case UnaryOp::Neg: return "unary(neg)";
  case UnaryOp::Relu: return "unary(relu)";
  case UnaryOp::LeakyRelu: return "unary(leaky_relu)";
  case UnaryOp::Gelu: return "unary(gelu)";
  case UnaryOp::GeluTanh: return "unary(gelu_tanh)";
  case UnaryOp::Not: return "unary(not)";
  case UnaryOp::Softplus: return "unary(softplus)";
  case UnaryOp::Elu: return "unary(elu)";
  case UnaryOp::Celu: return "unary(celu)";
  case UnaryOp::Sin: return "unary(sin)";
  case UnaryOp::Cos: return "unary(cos)";
  case UnaryOp::Floor: return "unary(floor)";
  case UnaryOp::Ceil: return "unary(ceil)";
  case UnaryOp::Round: return "unary(round)";
  }
  return "unary";
}

const char *binary_name(BinaryOp op) {
  switch (op) {
  case BinaryOp::Add: return "binary(add)";
  case BinaryOp::Sub: return "binary(sub)";
  case BinaryOp::Mul: return "binary(mul)";
  case BinaryOp::Div: return "binary(div)";
  case BinaryOp::Pow: return "binary(pow)";
  case BinaryOp::Mod: return "binary(mod)";
  case BinaryOp::Fmod: return "binary(fmod)";
  }
  return "binary";
}

const char *compare_name(ComparePredicate pred) {
  switch (pred) {
  case ComparePredicate::Eq: return "compare(eq)";
  case ComparePredicate::Lt: return "compare(lt)";
  case ComparePredicate::Le: return "compare(le)";
  case ComparePredicate::Gt: return "compare(gt)";
  case ComparePredicate::Ge: return "compare(ge)";
  }
  return "compare";
}

}  // namespace detail
}  // namespace dsrt

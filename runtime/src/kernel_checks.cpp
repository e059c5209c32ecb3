// The argument checks, broadcasting plans and workspace slices of
// kernel_common.h, shared by every backend's kernels.
#include "kernel_common.h"
#include "window.h"

#include <limits>

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
  check_workspace(kernel, ws, need);
}

void check_workspace(const char *kernel, const Workspace &ws, int64_t need) {
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

MatmulPlan plan_matmul(const char *kernel, const Tensor &a, const Tensor &b, const Tensor &y,
                       bool transpose_a, bool transpose_b) {
  const int ra = a.shape.rank, rb = b.shape.rank;
  if (ra < 1 || rb < 1)
    fail(kernel, "operands must have rank >= 1, got " + a.shape.str() + " and " + b.shape.str());
  MatmulPlan p;
  p.a_vector = ra == 1;
  const bool b_vector = rb == 1;
  const bool ta = transpose_a && ra >= 2, tb = transpose_b && rb >= 2;
  // Stored matrix shapes (rows, cols) of each operand.
  int64_t a_rows = p.a_vector ? 1 : a.shape.dims[ra - 2], a_cols = a.shape.dims[ra - 1];
  int64_t b_rows = b_vector ? b.shape.dims[0] : b.shape.dims[rb - 2],
          b_cols = b_vector ? 1 : b.shape.dims[rb - 1];
  p.m = ta ? a_cols : a_rows;
  p.k = ta ? a_rows : a_cols;
  int64_t kb = tb ? b_cols : b_rows;
  p.n = tb ? b_rows : b_cols;
  if (p.k != kb)
    fail(kernel, "contraction sizes differ: " + a.shape.str() + (ta ? "^T" : "") + " x " +
                     b.shape.str() + (tb ? "^T" : "") + " (" + std::to_string(p.k) + " vs " +
                     std::to_string(kb) + ")");
  p.trans_a = ta;
  p.trans_b = tb;
  p.lda = std::max<int64_t>(1, a_cols);
  p.ldb = std::max<int64_t>(1, b_cols);
  p.a_rs = ta ? 1 : a_cols;
  p.a_cs = ta ? a_cols : 1;
  p.b_rs = tb ? 1 : b_cols;
  p.b_cs = tb ? b_cols : 1;
  // Batch axes broadcast like NumPy's.
  const int na = p.a_vector ? 0 : ra - 2, nb = b_vector ? 0 : rb - 2;
  p.batch_rank = std::max(na, nb);
  int64_t a_stride = a_rows * a_cols, b_stride = b_rows * b_cols;
  for (int d = p.batch_rank - 1; d >= 0; --d) {
    int da = d - (p.batch_rank - na), db = d - (p.batch_rank - nb);
    int64_t dim_a = da >= 0 ? a.shape.dims[da] : 1, dim_b = db >= 0 ? b.shape.dims[db] : 1;
    if (dim_a != dim_b && dim_a != 1 && dim_b != 1)
      fail(kernel, "batch axes of " + a.shape.str() + " and " + b.shape.str() +
                       " do not broadcast");
    int64_t dim = std::max(dim_a, dim_b);
    if (dim_a == 0 || dim_b == 0)
      dim = 0;
    p.batch_dims[d] = dim;
    p.a_batch_stride[d] = dim_a == 1 ? 0 : a_stride;
    p.b_batch_stride[d] = dim_b == 1 ? 0 : b_stride;
    if (dim_b != 1)
      p.b_has_batch = true;
    a_stride *= dim_a;
    b_stride *= dim_b;
    p.batch *= dim;
  }
  Shape expected;
  for (int d = 0; d < p.batch_rank; ++d)
    expected.dims[expected.rank++] = p.batch_dims[d];
  if (!p.a_vector)
    expected.dims[expected.rank++] = p.m;
  if (!b_vector)
    expected.dims[expected.rank++] = p.n;
  check_shape(kernel, "y", y, expected);
  return p;
}

void contiguous_strides(const Shape &shape, int64_t *strides) {
  int64_t stride = 1;
  for (int d = shape.rank - 1; d >= 0; --d) {
    strides[d] = stride;
    stride *= shape.dims[d];
  }
}

Permuted collapse_permutation(const Shape &y_shape, const int64_t *x_strides,
                              const int64_t *perm) {
  Permuted p;
  for (int i = 0; i < y_shape.rank; ++i) {
    int64_t dim = y_shape.dims[i], stride = x_strides[perm[i]];
    if (dim == 1)
      continue;
    if (p.rank > 0 && p.in_strides[p.rank - 1] == stride * dim) {
      p.dims[p.rank - 1] *= dim;
      p.in_strides[p.rank - 1] = stride;
    } else {
      p.dims[p.rank] = dim;
      p.in_strides[p.rank] = stride;
      ++p.rank;
    }
  }
  if (p.rank == 0) {
    p.rank = 1;
    p.dims[0] = 1;
    p.in_strides[0] = 1;
  }
  return p;
}

Permuted plan_transpose(const char *kernel, const Tensor &x, const Tensor &y,
                        const int64_t *perm) {
  const int rank = x.shape.rank;
  if (y.shape.rank != rank)
    fail(kernel, "y has rank " + std::to_string(y.shape.rank) + ", x has rank " +
                     std::to_string(rank));
  bool seen[kMaxRank] = {};
  Shape expected;
  expected.rank = rank;
  for (int i = 0; i < rank; ++i) {
    if (perm[i] < 0 || perm[i] >= rank || seen[perm[i]])
      fail(kernel, "perm is not a permutation of [0, " + std::to_string(rank) + ")");
    seen[perm[i]] = true;
    expected.dims[i] = x.shape.dims[perm[i]];
  }
  check_shape(kernel, "y", y, expected);
  int64_t x_strides[kMaxRank];
  contiguous_strides(x.shape, x_strides);
  return collapse_permutation(y.shape, x_strides, perm);
}

int64_t check_stacking(const char *kernel, const Tensor &whole, const Tensor *parts, int count,
                       int axis) {
  if (count < 1)
    fail(kernel, "needs at least one part");
  check_data(kernel, "the whole tensor", whole);
  check_axis(kernel, axis, whole.shape.rank);
  int64_t total = 0;
  for (int k = 0; k < count; ++k) {
    const Tensor &part = parts[k];
    std::string name = "part " + std::to_string(k);
    check_data(kernel, name.c_str(), part);
    check_same_dtype(kernel, name.c_str(), part, "the whole tensor", whole);
    bool ok = part.shape.rank == whole.shape.rank;
    for (int d = 0; ok && d < whole.shape.rank; ++d)
      ok = d == axis || part.shape.dims[d] == whole.shape.dims[d];
    if (!ok)
      fail(kernel, name + " has shape " + part.shape.str() + ", which differs from " +
                       whole.shape.str() + " outside axis " + std::to_string(axis));
    total += part.shape.dims[axis];
  }
  if (total != whole.shape.dims[axis])
    fail(kernel, "parts sum to " + std::to_string(total) + " along axis " + std::to_string(axis) +
                     " but the whole tensor has " + std::to_string(whole.shape.dims[axis]));
  int64_t outer = 1;
  for (int d = 0; d < axis; ++d)
    outer *= whole.shape.dims[d];
  return outer;
}

SliceWalk plan_slice(const char *kernel, const Tensor &whole, const Tensor &part,
                     const int64_t *offsets, const int64_t *strides, const char *verb) {
  const int rank = whole.shape.rank;
  int64_t whole_strides[kMaxRank];
  contiguous_strides(whole.shape, whole_strides);
  SliceWalk w;
  for (int d = 0; d < rank; ++d) {
    int64_t size = part.shape.dims[d], dim = whole.shape.dims[d];
    if (strides[d] == 0)
      fail(kernel, "stride of axis " + std::to_string(d) + " is 0");
    int64_t last = offsets[d] + (size - 1) * strides[d];
    if (offsets[d] < 0 || offsets[d] >= dim || last < 0 || last >= dim)
      fail(kernel, "axis " + std::to_string(d) + " " + verb + " out of bounds: offset " +
                       std::to_string(offsets[d]) + ", stride " + std::to_string(strides[d]) +
                       ", size " + std::to_string(size) + ", input size " + std::to_string(dim));
    w.base += offsets[d] * whole_strides[d];
    w.step[d] = strides[d] * whole_strides[d];
  }
  return w;
}

Shape gather_shape(const char *kernel, const Tensor &data, const Tensor &indices, int axis) {
  check_axis(kernel, axis, data.shape.rank);
  if (axis + indices.shape.rank + (data.shape.rank - axis - 1) > kMaxRank)
    fail(kernel, "result rank exceeds the maximum rank " + std::to_string(kMaxRank));
  Shape shape;
  for (int d = 0; d < axis; ++d)
    shape.dims[shape.rank++] = data.shape.dims[d];
  for (int d = 0; d < indices.shape.rank; ++d)
    shape.dims[shape.rank++] = indices.shape.dims[d];
  for (int d = axis + 1; d < data.shape.rank; ++d)
    shape.dims[shape.rank++] = data.shape.dims[d];
  return shape;
}

bool check_param(const char *kernel, const char *name, const Tensor &param, const Tensor &x,
                 const Shape &normalized) {
  check_data(kernel, name, param);
  check_same_dtype(kernel, "x", x, name, param);
  BroadcastPlan plan;
  if (param.shape.rank > normalized.rank || !plan_broadcast(normalized, &param.shape, 1, plan))
    fail(kernel, std::string(name) + " " + param.shape.str() +
                     " does not broadcast to the normalized shape " + normalized.str());
  return param.numel() < normalized.numel();
}

Channels check_channels(const char *kernel, const Tensor &x, const Tensor &y,
                        const char *y_name) {
  check_data(kernel, "x", x);
  check_data(kernel, y_name, y);
  check_float(kernel, "x", x);
  check_same_dtype(kernel, "x", x, y_name, y);
  check_shape(kernel, y_name, y, x.shape);
  if (x.shape.rank < 2)
    fail(kernel, "x must be [N, C, ...], got " + x.shape.str());
  Channels ch;
  ch.n = x.shape.dims[0];
  ch.c = x.shape.dims[1];
  for (int d = 2; d < x.shape.rank; ++d)
    ch.spatial *= x.shape.dims[d];
  return ch;
}

void check_per_channel(const char *kernel, const char *name, const Tensor &t, int64_t c) {
  check_data(kernel, name, t);
  check_float(kernel, name, t);
  check_shape(kernel, name, t, Shape{c});
}

void check_optimizer_args(const char *kernel, const Tensor &lr, const Tensor *step,
                          const Tensor &param, const Tensor *const *states,
                          const char *const *names, int count) {
  check_data(kernel, "lr", lr);
  check_float(kernel, "lr", lr);
  if (lr.numel() != 1 || lr.shape.rank > 1)
    fail(kernel, "lr must be a scalar, got " + lr.shape.str());
  if (step) {
    check_data(kernel, "step", *step);
    check_dtype(kernel, "step", *step, DType::I64);
    if (step->numel() != 1 || step->shape.rank > 1)
      fail(kernel, "step must be a scalar, got " + step->shape.str());
  }
  check_data(kernel, "param", param);
  check_float(kernel, "param", param);
  for (int i = 0; i < count; ++i) {
    check_data(kernel, names[i], *states[i]);
    // states[0], the gradient, may be the bf16/f16 gradient of an f32
    // parameter (mixed precision: converted an element at a time).
    const bool mixed_grad = i == 0 && param.dtype == DType::F32 &&
                            (states[i]->dtype == DType::BF16 || states[i]->dtype == DType::F16);
    if (!mixed_grad)
      check_same_dtype(kernel, "param", param, names[i], *states[i]);
    check_shape(kernel, names[i], *states[i], param.shape);
  }
}

void check_grad_scale(const char *kernel, const Tensor *grad_scale) {
  if (!grad_scale)
    return;
  check_data(kernel, "grad_scale", *grad_scale);
  check_dtype(kernel, "grad_scale", *grad_scale, DType::F32);
  if (grad_scale->numel() != 1 || grad_scale->shape.rank > 1)
    fail(kernel, "grad_scale must be a scalar, got " + grad_scale->shape.str());
}

void check_param_copy(const char *kernel, const Tensor &param, const Tensor *copy) {
  if (!copy)
    return;
  check_data(kernel, "param_copy", *copy);
  if (param.dtype != DType::F32 || (copy->dtype != DType::BF16 && copy->dtype != DType::F16))
    fail(kernel, "param_copy is the 16-bit (bf16 or f16) copy of an f32 param, got " +
                     std::string(dtype_name(copy->dtype)) + " for a " +
                     std::string(dtype_name(param.dtype)) + " param");
  check_shape(kernel, "param_copy", *copy, param.shape);
}

void check_adamw_multi_args(const char *kernel, const Tensor &lr, const Tensor &step, int count,
                            const Tensor *params, const Tensor *grads, const Tensor *ms,
                            const Tensor *vs, const Tensor *params_out, const Tensor *ms_out,
                            const Tensor *vs_out) {
  if (count < 0)
    fail(kernel, "needs a list of tensors, got a count of " + std::to_string(count));
  const Tensor *const lists[] = {params, grads, ms, vs, params_out, ms_out, vs_out};
  if (count > 0)
    for (const Tensor *list : lists)
      if (list == nullptr)
        fail(kernel, "a list of " + std::to_string(count) + " tensors is null");
  for (int i = 0; i < count; ++i) {
    const std::string at = "[" + std::to_string(i) + "]";
    const std::string names[] = {"grads" + at, "ms" + at,      "vs" + at,
                                 "params_out" + at, "ms_out" + at, "vs_out" + at};
    const char *name_ptrs[] = {names[0].c_str(), names[1].c_str(), names[2].c_str(),
                               names[3].c_str(), names[4].c_str(), names[5].c_str()};
    const Tensor *states[] = {&grads[i], &ms[i], &vs[i], &params_out[i], &ms_out[i], &vs_out[i]};
    check_optimizer_args(kernel, lr, &step, params[i], states, name_ptrs, 6);
    if (i > 0)
      check_same_dtype(kernel, "params[0]", params[0], ("params" + at).c_str(), params[i]);
  }
}

void check_sum_of_squares(const char *kernel, const Tensor *tensors, int num_tensors,
                          const Tensor &out) {
  check_data(kernel, "out", out);
  check_dtype(kernel, "out", out, DType::F32);
  if (out.numel() != 1 || out.shape.rank > 1)
    fail(kernel, "out must be a scalar, got " + out.shape.str());
  if (num_tensors < 0 || (num_tensors > 0 && tensors == nullptr))
    fail(kernel, "needs a list of tensors, got " + std::to_string(num_tensors));
  for (int k = 0; k < num_tensors; ++k) {
    const std::string name = "tensor " + std::to_string(k);
    check_data(kernel, name.c_str(), tensors[k]);
    check_float(kernel, name.c_str(), tensors[k]);
  }
}

void check_dropout(const char *kernel, const Tensor &x, const Tensor &y, const Tensor &mask,
                   float ratio) {
  check_data(kernel, "x", x);
  check_data(kernel, "y", y);
  check_data(kernel, "mask", mask);
  check_float(kernel, "x", x);
  check_same_dtype(kernel, "x", x, "y", y);
  check_shape(kernel, "y", y, x.shape);
  check_dtype(kernel, "mask", mask, DType::Bool);
  check_shape(kernel, "mask", mask, x.shape);
  if (!(ratio >= 0.0f && ratio < 1.0f))
    fail(kernel, "ratio " + std::to_string(ratio) + " must be in [0, 1)");
}

int64_t check_reduce(const char *kernel, const Tensor &x, const Tensor &y, const int64_t *axes,
                     int num_axes, bool *reduced) {
  const int rank = x.shape.rank;
  for (int i = 0; i < num_axes; ++i) {
    if (axes[i] < 0 || axes[i] >= rank)
      fail(kernel, "axis " + std::to_string(axes[i]) + " is out of range for rank " +
                       std::to_string(rank));
    if (i > 0 && axes[i - 1] >= axes[i])
      fail(kernel, "axes must be sorted and unique");
    reduced[axes[i]] = true;
  }
  Shape kept, dropped;
  int64_t count = 1;
  for (int d = 0; d < rank; ++d) {
    kept.dims[kept.rank++] = reduced[d] ? 1 : x.shape.dims[d];
    if (!reduced[d])
      dropped.dims[dropped.rank++] = x.shape.dims[d];
    else
      count *= x.shape.dims[d];
  }
  kept.rank = rank;
  if (y.shape != kept && y.shape != dropped)
    fail(kernel, "y has shape " + y.shape.str() + ", expected " + kept.str() + " or " +
                     dropped.str());
  return count;
}

void check_reduce_dtypes(const char *kernel, ReduceOp op, const Tensor &x, const Tensor &y) {
  if (op == ReduceOp::Sum && is_16bit(x.dtype) && y.dtype == DType::F32)
    return;
  check_same_dtype(kernel, "x", x, "y", y);
}

const char *reduce_name(ReduceOp op) {
  switch (op) {
  case ReduceOp::Sum: return "reduce(sum)";
  case ReduceOp::Mean: return "reduce(mean)";
  case ReduceOp::Max: return "reduce(max)";
  case ReduceOp::Prod: return "reduce(prod)";
  }
  return "reduce";
}

LossShape check_loss_shapes(const char *kernel, const Tensor &scores, const Tensor &labels,
                            const Tensor *weights, const Tensor &loss, Reduction reduction,
                            const char *scores_name, const char *loss_name) {
  check_data(kernel, scores_name, scores);
  check_float(kernel, scores_name, scores);
  check_index_tensor(kernel, "labels", labels);
  check_data(kernel, loss_name, loss);
  // The loss (or its gradient) has the scores' type, or f32 with 16-bit
  // scores (the loss of bf16/fp16 scores is computed and kept in f32).
  if (loss.dtype != scores.dtype && loss.dtype != DType::F32)
    check_same_dtype(kernel, scores_name, scores, loss_name, loss);
  if (scores.shape.rank < 2)
    fail(kernel, std::string(scores_name) + " must be [N, C, d...], got " + scores.shape.str());
  LossShape ls;
  ls.n = scores.shape.dims[0];
  ls.c = scores.shape.dims[1];
  Shape label_shape;
  label_shape.dims[label_shape.rank++] = ls.n;
  for (int i = 2; i < scores.shape.rank; ++i) {
    label_shape.dims[label_shape.rank++] = scores.shape.dims[i];
    ls.d *= scores.shape.dims[i];
  }
  check_shape(kernel, "labels", labels, label_shape);
  if (weights) {
    check_data(kernel, "weights", *weights);
    check_float(kernel, "weights", *weights);
    check_shape(kernel, "weights", *weights, Shape{ls.c});
  }
  if (reduction == Reduction::None)
    check_shape(kernel, loss_name, loss, label_shape);
  else if (loss.numel() != 1 || loss.shape.rank > 1)
    fail(kernel, std::string(loss_name) + " must be a scalar for a sum or mean reduction, got " +
                     loss.shape.str());
  return ls;
}

namespace {

int64_t window_out(int64_t in, int64_t k, int64_t st, int64_t pb, int64_t pe, int64_t dil,
                   bool ceil_mode) {
  int64_t span = in + pb + pe - dil * (k - 1) - 1;
  if (span < 0)
    return 0;
  int64_t out = (ceil_mode ? (span + st - 1) / st : span / st) + 1;
  if (ceil_mode && (out - 1) * st >= in + pb)
    --out;  // the last window may not start inside the end padding
  return out;
}

}  // namespace

Window make_window(const char *kernel_name, const Tensor &x, const Tensor &y,
                   const int64_t *kernel, const int64_t *strides, const int64_t *pads,
                   const int64_t *dilations, bool allow_ceil, const char *x_name,
                   const char *y_name) {
  const std::string xn = x_name, yn = y_name;
  Window w;
  w.spatial = x.shape.rank - 2;
  if (w.spatial < 1)
    fail(kernel_name, xn + " must be [N, C, D...] with at least one spatial axis, got " +
                          x.shape.str());
  if (y.shape.rank != x.shape.rank)
    fail(kernel_name, yn + " " + y.shape.str() + " must have the rank of " + xn + " " +
                          x.shape.str());
  for (int a = 0; a < w.spatial; ++a) {
    w.in[a] = x.shape.dims[a + 2];
    w.kernel[a] = kernel[a];
    w.stride[a] = strides[a];
    w.pad_begin[a] = pads[a];
    w.pad_end[a] = pads[a + w.spatial];
    w.dilation[a] = dilations ? dilations[a] : 1;
    if (w.kernel[a] < 1 || w.stride[a] < 1 || w.dilation[a] < 1)
      fail(kernel_name, "kernel, strides and dilations must be positive on spatial axis " +
                            std::to_string(a));
    if (w.pad_begin[a] < 0 || w.pad_end[a] < 0)
      fail(kernel_name, "pads must be non-negative on spatial axis " + std::to_string(a));
    int64_t floor_out = window_out(w.in[a], w.kernel[a], w.stride[a], w.pad_begin[a],
                                   w.pad_end[a], w.dilation[a], false);
    int64_t ceil_out = window_out(w.in[a], w.kernel[a], w.stride[a], w.pad_begin[a],
                                  w.pad_end[a], w.dilation[a], true);
    w.out[a] = y.shape.dims[a + 2];
    if (w.out[a] != floor_out && !(allow_ceil && w.out[a] == ceil_out))
      fail(kernel_name, yn + " " + y.shape.str() + " has " + std::to_string(w.out[a]) +
                            " positions on spatial axis " + std::to_string(a) + ", expected " +
                            std::to_string(floor_out) +
                            (allow_ceil && ceil_out != floor_out
                                 ? " (or " + std::to_string(ceil_out) + " with ceil_mode)"
                                 : std::string()));
    w.in_size *= w.in[a];
    w.out_size *= w.out[a];
    w.kernel_size *= w.kernel[a];
  }
  return w;
}

void check_pool(const char *kernel, const Tensor &x, const Tensor &y, const char *x_name,
                const char *y_name) {
  check_data(kernel, x_name, x);
  check_data(kernel, y_name, y);
  check_float(kernel, x_name, x);
  check_same_dtype(kernel, x_name, x, y_name, y);
  if (x.shape.rank < 3 || y.shape.rank != x.shape.rank || y.shape.dims[0] != x.shape.dims[0] ||
      y.shape.dims[1] != x.shape.dims[1])
    fail(kernel, std::string(x_name) + " " + x.shape.str() + " and " + y_name + " " +
                     y.shape.str() + " must both be [N, C, D...] with the same N and C");
}

void check_param_grad(const char *kernel, const char *name, const Tensor &out,
                      const Shape &normalized) {
  check_data(kernel, name, out);
  BroadcastPlan plan;
  if (out.shape.rank > normalized.rank || !plan_broadcast(normalized, &out.shape, 1, plan))
    fail(kernel, std::string(name) + " " + out.shape.str() +
                     " does not broadcast to the normalized shape " + normalized.str());
}

Window check_conv(const char *kernel, const Tensor &x, const Tensor &w, const Tensor *bias,
                  const Tensor &y, const int64_t *strides, const int64_t *pads,
                  const int64_t *dilations, int64_t group) {
  check_data(kernel, "x", x);
  check_data(kernel, "w", w);
  check_data(kernel, "y", y);
  check_float(kernel, "x", x);
  check_same_dtype(kernel, "x", x, "w", w);
  check_same_dtype(kernel, "x", x, "y", y);
  if (w.shape.rank != x.shape.rank || x.shape.rank < 3)
    fail(kernel, "x " + x.shape.str() + " and w " + w.shape.str() +
                     " must have the same rank >= 3");
  const int64_t n = x.shape.dims[0], c = x.shape.dims[1], m = w.shape.dims[0];
  if (group < 1 || c % group != 0 || m % group != 0)
    fail(kernel, "group " + std::to_string(group) + " must divide the input channels (" +
                     std::to_string(c) + ") and output channels (" + std::to_string(m) + ")");
  if (w.shape.dims[1] != c / group)
    fail(kernel, "w " + w.shape.str() + " needs " + std::to_string(c / group) +
                     " input channels per group");
  if (y.shape.dims[0] != n || y.shape.dims[1] != m)
    fail(kernel, "y " + y.shape.str() + " must be [" + std::to_string(n) + ", " +
                     std::to_string(m) + ", ...]");
  if (bias) {
    check_data(kernel, "bias", *bias);
    check_same_dtype(kernel, "x", x, "bias", *bias);
    check_shape(kernel, "bias", *bias, Shape{m});
  }
  Window win = make_window(kernel, x, y, w.shape.dims + 2, strides, pads, dilations, false);
  const int64_t limit = std::numeric_limits<int>::max();
  if (win.out_size > limit || (c / group) * win.kernel_size > limit)
    fail(kernel, "convolution too large for the BLAS integer range");
  return win;
}

Window check_conv_grad(const char *kernel, const Tensor &x, const char *x_name, const Tensor &w,
                       const char *w_name, const Tensor &dy, const int64_t *strides,
                       const int64_t *pads, const int64_t *dilations, int64_t group) {
  check_data(kernel, x_name, x);
  check_data(kernel, w_name, w);
  check_data(kernel, "dy", dy);
  check_float(kernel, "dy", dy);
  check_same_dtype(kernel, "dy", dy, x_name, x);
  check_same_dtype(kernel, "dy", dy, w_name, w);
  const std::string xn = x_name, wn = w_name;
  if (w.shape.rank != x.shape.rank || x.shape.rank < 3)
    fail(kernel, xn + " " + x.shape.str() + " and " + wn + " " + w.shape.str() +
                     " must have the same rank >= 3");
  const int64_t n = x.shape.dims[0], c = x.shape.dims[1], m = w.shape.dims[0];
  if (group < 1 || c % group != 0 || m % group != 0)
    fail(kernel, "group " + std::to_string(group) + " must divide the input channels (" +
                     std::to_string(c) + ") and output channels (" + std::to_string(m) + ")");
  if (w.shape.dims[1] != c / group)
    fail(kernel, wn + " " + w.shape.str() + " needs " + std::to_string(c / group) +
                     " input channels per group");
  if (dy.shape.rank != x.shape.rank || dy.shape.dims[0] != n || dy.shape.dims[1] != m)
    fail(kernel, "dy " + dy.shape.str() + " must be [" + std::to_string(n) + ", " +
                     std::to_string(m) + ", ...]");
  Window win = make_window(kernel, x, dy, w.shape.dims + 2, strides, pads, dilations, false,
                           x_name, "dy");
  const int64_t limit = std::numeric_limits<int>::max();
  if (win.out_size > limit || win.in_size > limit || (c / group) * win.kernel_size > limit ||
      m > limit)
    fail(kernel, "convolution too large for the BLAS integer range");
  return win;
}

namespace {

// The rows and normalized shape of a layer norm over axes [axis, rank) of
// x, after checking its f32 mean and inverse standard deviation.
NormRows check_norm_stats(const char *kernel, const Tensor &x, const Tensor &mean,
                          const Tensor &inv_std_dev, int axis) {
  check_axis(kernel, axis, x.shape.rank);
  check_float(kernel, "x", x);
  Shape stat_shape = x.shape;
  for (int d = axis; d < x.shape.rank; ++d)
    stat_shape.dims[d] = 1;
  check_data(kernel, "mean", mean);
  check_data(kernel, "inv_std_dev", inv_std_dev);
  check_dtype(kernel, "mean", mean, DType::F32);
  check_dtype(kernel, "inv_std_dev", inv_std_dev, DType::F32);
  check_shape(kernel, "mean", mean, stat_shape);
  check_shape(kernel, "inv_std_dev", inv_std_dev, stat_shape);
  NormRows nr;
  nr.normalized = Shape::of(x.shape.dims + axis, x.shape.rank - axis);
  nr.rows = stat_shape.numel();
  nr.n = nr.normalized.numel();
  return nr;
}

}  // namespace

NormRows check_layer_norm(const char *kernel, const Tensor &x, const Tensor &scale,
                          const Tensor *bias, const Tensor &y, const Tensor &mean,
                          const Tensor &inv_std_dev, int axis) {
  check_data(kernel, "x", x);
  check_data(kernel, "y", y);
  check_same_dtype(kernel, "x", x, "y", y);
  check_shape(kernel, "y", y, x.shape);
  NormRows nr = check_norm_stats(kernel, x, mean, inv_std_dev, axis);
  nr.expand_scale = check_param(kernel, "scale", scale, x, nr.normalized);
  nr.expand_bias = bias && check_param(kernel, "bias", *bias, x, nr.normalized);
  return nr;
}

NormRows check_layer_norm_grad(const char *kernel, const Tensor &dy, const Tensor &x,
                               const Tensor &scale, const Tensor &mean,
                               const Tensor &inv_std_dev, const Tensor &dx, const Tensor &dscale,
                               const Tensor *dbias, int axis) {
  check_data(kernel, "x", x);
  check_data(kernel, "dy", dy);
  check_data(kernel, "dx", dx);
  check_float(kernel, "x", x);
  check_same_dtype(kernel, "x", x, "dy", dy);
  check_same_dtype(kernel, "x", x, "dx", dx);
  check_shape(kernel, "dy", dy, x.shape);
  check_shape(kernel, "dx", dx, x.shape);
  NormRows nr = check_norm_stats(kernel, x, mean, inv_std_dev, axis);
  nr.expand_scale = check_param(kernel, "scale", scale, x, nr.normalized);
  // dscale and dbias: the scale's type, or f32 (sums over every row that
  // an f32 accumulator reads unrounded).
  check_data(kernel, "dscale", dscale);
  if (dscale.dtype != DType::F32)
    check_same_dtype(kernel, "scale", scale, "dscale", dscale);
  check_shape(kernel, "dscale", dscale, scale.shape);
  if (dbias) {
    check_data(kernel, "dbias", *dbias);
    if (dbias->dtype != DType::F32)
      check_same_dtype(kernel, "x", x, "dbias", *dbias);
    check_param_grad(kernel, "dbias", *dbias, nr.normalized);
  }
  return nr;
}

void check_layer_norm_grad_addend(const char *kernel, const Tensor *addend, const Tensor &x) {
  if (!addend)
    return;
  check_data(kernel, "addend", *addend);
  check_same_dtype(kernel, "x", x, "addend", *addend);
  check_shape(kernel, "addend", *addend, x.shape);
}

Channels check_batch_norm(const char *kernel, const Tensor &x, const Tensor &scale,
                          const Tensor &bias, const Tensor &mean, const Tensor &var,
                          const Tensor &y) {
  Channels ch = check_channels(kernel, x, y);
  check_per_channel(kernel, "scale", scale, ch.c);
  check_per_channel(kernel, "bias", bias, ch.c);
  check_per_channel(kernel, "mean", mean, ch.c);
  check_per_channel(kernel, "var", var, ch.c);
  return ch;
}

Channels check_batch_norm_train(const char *kernel, const Tensor &x, const Tensor &scale,
                                const Tensor &bias, const Tensor &running_mean,
                                const Tensor &running_var, const Tensor &y,
                                const Tensor &running_mean_out, const Tensor &running_var_out,
                                const Tensor &saved_mean, const Tensor &saved_inv_std) {
  Channels ch = check_channels(kernel, x, y);
  check_per_channel(kernel, "scale", scale, ch.c);
  check_per_channel(kernel, "bias", bias, ch.c);
  check_per_channel(kernel, "running_mean", running_mean, ch.c);
  check_per_channel(kernel, "running_var", running_var, ch.c);
  check_per_channel(kernel, "running_mean_out", running_mean_out, ch.c);
  check_per_channel(kernel, "running_var_out", running_var_out, ch.c);
  check_per_channel(kernel, "saved_mean", saved_mean, ch.c);
  check_per_channel(kernel, "saved_inv_std", saved_inv_std, ch.c);
  check_dtype(kernel, "saved_mean", saved_mean, DType::F32);
  check_dtype(kernel, "saved_inv_std", saved_inv_std, DType::F32);
  if (ch.n * ch.spatial == 0)
    fail(kernel, "batch statistics of an empty batch " + x.shape.str() + " are undefined");
  return ch;
}

float running_var_factor(int64_t count, bool unbiased) {
  if (!unbiased)
    return 1.0f;
  if (count < 2)
    fail("batch_norm_train", "the unbiased variance of " + std::to_string(count) +
                                 " value per channel is undefined (PyTorch refuses to train "
                                 "BatchNorm on one value per channel)");
  return static_cast<float>(static_cast<double>(count) / static_cast<double>(count - 1));
}

Channels check_batch_norm_grad(const char *kernel, const Tensor &dy, const Tensor &x,
                               const Tensor &scale, const Tensor &saved_mean,
                               const Tensor &saved_inv_std, const Tensor &dx,
                               const Tensor &dscale, const Tensor &dbias) {
  Channels ch = check_channels(kernel, x, dx, "dx");
  check_data(kernel, "dy", dy);
  check_same_dtype(kernel, "x", x, "dy", dy);
  check_shape(kernel, "dy", dy, x.shape);
  check_per_channel(kernel, "scale", scale, ch.c);
  check_per_channel(kernel, "saved_mean", saved_mean, ch.c);
  check_per_channel(kernel, "saved_inv_std", saved_inv_std, ch.c);
  check_dtype(kernel, "saved_mean", saved_mean, DType::F32);
  check_dtype(kernel, "saved_inv_std", saved_inv_std, DType::F32);
  check_per_channel(kernel, "dscale", dscale, ch.c);
  check_per_channel(kernel, "dbias", dbias, ch.c);
  return ch;
}

void check_softmax(const char *kernel, const Tensor &x, const Tensor &y, int axis) {
  check_data(kernel, "x", x);
  check_data(kernel, "y", y);
  check_same_dtype(kernel, "x", x, "y", y);
  check_shape(kernel, "y", y, x.shape);
  check_axis(kernel, axis, x.shape.rank);
}

void check_softmax_grad(const char *kernel, const Tensor &y, const Tensor &dy, const Tensor &dx,
                        int axis) {
  check_data(kernel, "y", y);
  check_data(kernel, "dy", dy);
  check_data(kernel, "dx", dx);
  check_float(kernel, "y", y);
  check_same_dtype(kernel, "y", y, "dy", dy);
  check_same_dtype(kernel, "y", y, "dx", dx);
  check_shape(kernel, "dy", dy, y.shape);
  check_shape(kernel, "dx", dx, y.shape);
  check_axis(kernel, axis, y.shape.rank);
}

int64_t check_attention(const char *kernel, const Tensor &q, const Tensor &k, const Tensor &v,
                        const Tensor &o, const Tensor &lse, const Tensor *do_, const Tensor *dq,
                        const Tensor *dk, const Tensor *dv, bool tokens_major, int64_t &t,
                        int64_t &heads, int64_t &dh) {
  check_data(kernel, "q", q);
  check_float(kernel, "q", q);
  const int rank = q.shape.rank;
  if (tokens_major && rank < 3)
    fail(kernel,
         "tokens-major q must have rank >= 3 ([..., T, H, Dh]), got rank " + std::to_string(rank));
  if (rank < 2)
    fail(kernel, "q must have rank >= 2 ([..., T, Dh]), got rank " + std::to_string(rank));
  t = q.shape.dims[rank - (tokens_major ? 3 : 2)];
  heads = tokens_major ? q.shape.dims[rank - 2] : 1;
  dh = q.shape.dims[rank - 1];
  if (dh > kMaxAttentionHead)
    fail(kernel, "head dimension " + std::to_string(dh) + " exceeds the supported " +
                     std::to_string(kMaxAttentionHead));
  const std::pair<const char *, const Tensor *> same[] = {
      {"k", &k}, {"v", &v}, {"o", &o}, {"do", do_}, {"dq", dq}, {"dk", dk}, {"dv", dv}};
  for (const auto &[name, tensor] : same) {
    if (!tensor)
      continue;
    check_data(kernel, name, *tensor);
    check_same_dtype(kernel, "q", q, name, *tensor);
    check_shape(kernel, name, *tensor, q.shape);
  }
  check_data(kernel, "lse", lse);
  if (lse.dtype != DType::F32)
    fail(kernel, std::string("lse must be f32, got ") + dtype_name(lse.dtype));
  Shape rows_shape = q.shape;
  rows_shape.rank -= 1;
  rows_shape.dims[rows_shape.rank] = 0;
  check_shape(kernel, "lse", lse, rows_shape);
  return dh > 0 ? q.numel() / dh : 0;
}

int64_t check_attention_packed(const char *kernel, const Tensor &qkv, const Tensor &o,
                               const Tensor &lse, const Tensor *do_, const Tensor *dqkv,
                               int64_t &t, int64_t &heads, int64_t &dh) {
  check_data(kernel, "qkv", qkv);
  check_float(kernel, "qkv", qkv);
  const int rank = qkv.shape.rank;
  if (rank < 4 || qkv.shape.dims[rank - 3] != 3)
    fail(kernel, "qkv must be [..., T, 3, H, Dh] (q, k, v packed on axis -3), got " +
                     qkv.shape.str());
  t = qkv.shape.dims[rank - 4];
  heads = qkv.shape.dims[rank - 2];
  dh = qkv.shape.dims[rank - 1];
  if (dh > kMaxAttentionHead)
    fail(kernel, "head dimension " + std::to_string(dh) + " exceeds the supported " +
                     std::to_string(kMaxAttentionHead));
  // o: qkv's shape without the packing axis.
  Shape o_shape;
  o_shape.rank = rank - 1;
  for (int i = 0, j = 0; i < rank; ++i)
    if (i != rank - 3)
      o_shape.dims[j++] = qkv.shape.dims[i];
  const std::pair<const char *, const Tensor *> like_o[] = {{"o", &o}, {"do", do_}};
  for (const auto &[name, tensor] : like_o) {
    if (!tensor)
      continue;
    check_data(kernel, name, *tensor);
    check_same_dtype(kernel, "qkv", qkv, name, *tensor);
    check_shape(kernel, name, *tensor, o_shape);
  }
  if (dqkv) {
    check_data(kernel, "dqkv", *dqkv);
    check_same_dtype(kernel, "qkv", qkv, "dqkv", *dqkv);
    check_shape(kernel, "dqkv", *dqkv, qkv.shape);
  }
  check_data(kernel, "lse", lse);
  if (lse.dtype != DType::F32)
    fail(kernel, std::string("lse must be f32, got ") + dtype_name(lse.dtype));
  Shape rows_shape = o_shape;
  rows_shape.rank -= 1;
  rows_shape.dims[rows_shape.rank] = 0;
  check_shape(kernel, "lse", lse, rows_shape);
  return dh > 0 ? o.numel() / dh : 0;
}

MatmulPlan check_matmul(const char *kernel, const Tensor &a, const Tensor &b, const Tensor &y,
                        bool transpose_a, bool transpose_b) {
  check_data(kernel, "a", a);
  check_data(kernel, "b", b);
  check_data(kernel, "y", y);
  check_same_dtype(kernel, "a", a, "b", b);
  check_same_dtype(kernel, "a", a, "y", y);
  return plan_matmul(kernel, a, b, y, transpose_a, transpose_b);
}

MatmulPlan check_gemm(const char *kernel, const Tensor &a, const Tensor &b, const Tensor *c,
                      const Tensor &y, bool transpose_a, bool transpose_b,
                      BroadcastPlan &c_plan) {
  check_data(kernel, "a", a);
  check_data(kernel, "b", b);
  check_data(kernel, "y", y);
  check_float(kernel, "a", a);
  check_same_dtype(kernel, "a", a, "b", b);
  check_same_dtype(kernel, "a", a, "y", y);
  if (a.shape.rank != 2 || b.shape.rank != 2)
    fail(kernel, "a and b must be 2-D, got " + a.shape.str() + " and " + b.shape.str());
  MatmulPlan p = plan_matmul(kernel, a, b, y, transpose_a, transpose_b);
  if (c != nullptr) {
    check_data(kernel, "c", *c);
    check_same_dtype(kernel, "a", a, "c", *c);
    if (c->shape.rank > 2 || !plan_broadcast(y.shape, &c->shape, 1, c_plan))
      fail(kernel, "c " + c->shape.str() + " does not broadcast to " + y.shape.str());
  }
  return p;
}

// A bias (or its gradient): [n] of `like`'s element type.
static void check_row_vector(const char *kernel, const char *name, const Tensor &v,
                             const char *like_name, const Tensor &like, int64_t n) {
  check_data(kernel, name, v);
  check_same_dtype(kernel, like_name, like, name, v);
  check_shape(kernel, name, v, Shape{n});
}

// A float a [..., M, K] times a 2-D b as one product of batch * M rows.
static MatmulPlan check_rows_product(const char *kernel, const Tensor &a, const Tensor &b,
                                     const Tensor &y, bool transpose_b) {
  check_data(kernel, "a", a);
  check_float(kernel, "a", a);
  if (a.shape.rank < 2 || b.shape.rank != 2)
    fail(kernel, "a must be [..., M, K] and b 2-D, got " + a.shape.str() + " and " +
                     b.shape.str());
  MatmulPlan p = check_matmul(kernel, a, b, y, false, transpose_b);
  p.m *= p.batch;
  p.batch = 1;
  p.batch_rank = 0;
  return p;
}

MatmulPlan check_matmul_bias(const char *kernel, const Tensor &a, const Tensor &b,
                             const Tensor &bias, const Tensor *addend, const Tensor &y,
                             bool transpose_b) {
  MatmulPlan p = check_rows_product(kernel, a, b, y, transpose_b);
  check_row_vector(kernel, "bias", bias, "a", a, p.n);
  if (addend != nullptr) {
    check_data(kernel, "addend", *addend);
    check_same_dtype(kernel, "a", a, "addend", *addend);
    check_shape(kernel, "addend", *addend, y.shape);
  }
  return p;
}

MatmulPlan check_matmul_gelu(const char *kernel, const Tensor &a, const Tensor &b,
                             const Tensor *bias, const Tensor &aux, const Tensor &y,
                             bool transpose_b) {
  MatmulPlan p = check_rows_product(kernel, a, b, y, transpose_b);
  if (bias != nullptr)
    check_row_vector(kernel, "bias", *bias, "a", a, p.n);
  check_data(kernel, "pre", aux);
  check_same_dtype(kernel, "a", a, "pre", aux);
  check_shape(kernel, "pre", aux, y.shape);
  return p;
}

// The operands of a weight gradient with its bias gradient: 2-D floats.
static void check_bias_grad_operands(const char *kernel, const Tensor &a, const Tensor &b) {
  check_data(kernel, "a", a);
  check_float(kernel, "a", a);
  if (a.shape.rank != 2 || b.shape.rank != 2)
    fail(kernel, "a and b must be 2-D, got " + a.shape.str() + " and " + b.shape.str());
}

MatmulPlan check_matmul_bias_grad(const char *kernel, const Tensor &a, const Tensor &b,
                                  const Tensor &y, const Tensor &bias_grad, bool transpose_a) {
  check_bias_grad_operands(kernel, a, b);
  MatmulPlan p = check_matmul(kernel, a, b, y, transpose_a, false);
  check_row_vector(kernel, "bias_grad", bias_grad, "b", b, p.n);
  return p;
}

MatmulPlan check_matmul_lhs_bias_grad(const char *kernel, const Tensor &a, const Tensor &b,
                                      const Tensor &y, const Tensor &bias_grad) {
  check_bias_grad_operands(kernel, a, b);
  MatmulPlan p = check_matmul(kernel, a, b, y, true, false);
  check_row_vector(kernel, "bias_grad", bias_grad, "a", a, p.m);
  return p;
}

void check_copy(const char *kernel, const Tensor &x, const Tensor &y) {
  check_data(kernel, "x", x);
  check_data(kernel, "y", y);
  if (x.nbytes() != y.nbytes())
    fail(kernel, "x has " + std::to_string(x.nbytes()) + " bytes (" + dtype_name(x.dtype) + " " +
                     x.shape.str() + ") but y has " + std::to_string(y.nbytes()) + " bytes (" +
                     dtype_name(y.dtype) + " " + y.shape.str() + ")");
}

void check_gather(const char *kernel, const Tensor &data, const Tensor &indices, const Tensor &y,
                  int axis) {
  check_data(kernel, "data", data);
  check_index_tensor(kernel, "indices", indices);
  check_data(kernel, "y", y);
  check_same_dtype(kernel, "data", data, "y", y);
  check_shape(kernel, "y", y, gather_shape(kernel, data, indices, axis));
}

void check_gather_grad(const char *kernel, const Tensor &dy, const Tensor &indices,
                       const Tensor &ddata, int axis) {
  check_data(kernel, "dy", dy);
  check_index_tensor(kernel, "indices", indices);
  check_data(kernel, "ddata", ddata);
  check_same_dtype(kernel, "ddata", ddata, "dy", dy);
  check_shape(kernel, "dy", dy, gather_shape(kernel, ddata, indices, axis));
  if (ddata.dtype == DType::Bool)
    fail(kernel, "needs a numeric tensor (f32, f16, bf16, i64, i32), got bool");
}

AxisLines axis_lines(const Shape &shape, int axis) {
  AxisLines lines;
  for (int d = 0; d < shape.rank; ++d)
    (d < axis ? lines.outer : d == axis ? lines.extent : lines.inner) *= shape.dims[d];
  return lines;
}

void check_scatter(const char *kernel, const Tensor &data, const Tensor &positions,
                   const Tensor &updates, const Tensor &y, int axis, int reduction) {
  check_data(kernel, "data", data);
  check_index_tensor(kernel, "positions", positions);
  check_data(kernel, "positions", positions);
  check_data(kernel, "updates", updates);
  check_data(kernel, "y", y);
  check_same_dtype(kernel, "data", data, "updates", updates);
  check_same_dtype(kernel, "data", data, "y", y);
  check_shape(kernel, "y", y, data.shape);
  check_shape(kernel, "updates", updates, positions.shape);
  if (positions.shape.rank > 0)
    check_axis(kernel, axis, positions.shape.rank);
  else if (axis != 0)
    fail(kernel, "axis " + std::to_string(axis) + " of 0-d positions must be 0");
  if (reduction < 0 || reduction > 4)
    fail(kernel, "reduction " + std::to_string(reduction) +
                     " is not 0 (none), 1 (add), 2 (mul), 3 (max) or 4 (min)");
  if (reduction != 0 && data.dtype == DType::Bool)
    fail(kernel, "a reduction needs a numeric tensor (f32, f16, bf16, i64, i32), got bool");
}

void check_top_k(const char *kernel, const Tensor &x, const Tensor &indices, int axis) {
  check_data(kernel, "x", x);
  check_data(kernel, "indices", indices);
  check_dtype(kernel, "indices", indices, DType::I64);
  if (x.dtype == DType::Bool)
    fail(kernel, "needs a numeric tensor (f32, f16, bf16, i64, i32), got bool");
  check_axis(kernel, axis, x.shape.rank);
  Shape expected = x.shape;
  expected.dims[axis] = indices.shape.rank == x.shape.rank ? indices.shape.dims[axis] : 0;
  check_shape(kernel, "indices", indices, expected);
  if (expected.dims[axis] > x.shape.dims[axis])
    fail(kernel, "k " + std::to_string(expected.dims[axis]) + " exceeds the extent " +
                     std::to_string(x.shape.dims[axis]) + " of axis " + std::to_string(axis));
}

BroadcastPlan check_binary(const char *kernel, const Tensor &a, const Tensor &b, const Tensor &y) {
  check_data(kernel, "a", a);
  check_data(kernel, "b", b);
  check_data(kernel, "y", y);
  check_same_dtype(kernel, "a", a, "b", b);
  check_same_dtype(kernel, "a", a, "y", y);
  Tensor operands[2] = {a, b};
  return plan_for(kernel, y, operands, 2);
}

BroadcastPlan check_compare(const char *kernel, const Tensor &a, const Tensor &b,
                            const Tensor &y) {
  check_data(kernel, "a", a);
  check_data(kernel, "b", b);
  check_data(kernel, "y", y);
  check_same_dtype(kernel, "a", a, "b", b);
  check_dtype(kernel, "y", y, DType::Bool);
  Tensor operands[2] = {a, b};
  return plan_for(kernel, y, operands, 2);
}

BroadcastPlan check_where(const char *kernel, const Tensor &cond, const Tensor &a,
                          const Tensor &b, const Tensor &y) {
  check_data(kernel, "cond", cond);
  check_data(kernel, "a", a);
  check_data(kernel, "b", b);
  check_data(kernel, "y", y);
  check_dtype(kernel, "cond", cond, DType::Bool);
  check_same_dtype(kernel, "a", a, "b", b);
  check_same_dtype(kernel, "a", a, "y", y);
  Tensor operands[3] = {cond, a, b};
  return plan_for(kernel, y, operands, 3);
}

void check_sgd_modes(const char *kernel, float momentum, float dampening, bool nesterov) {
  if (nesterov && (momentum <= 0.0f || dampening != 0.0f))
    fail(kernel, "nesterov needs a positive momentum and zero dampening (as torch.optim.SGD), "
                 "got momentum " + std::to_string(momentum) + ", dampening " +
                     std::to_string(dampening));
}

}  // namespace detail
}  // namespace dsrt

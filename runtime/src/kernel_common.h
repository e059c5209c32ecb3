// Backend-neutral pieces of the kernels: storage types of f16/bf16,
// argument checks, dtype dispatch, workspace slices and broadcasting plans.
// The cpu (internal.h) and cuda (cuda/common.cuh) backends build on it; its
// functions are in kernel_checks.cpp. Not installed.
#ifndef DSRT_SRC_KERNEL_COMMON_H
#define DSRT_SRC_KERNEL_COMMON_H

#include "dsrt/kernels.h"
#include "workspace_shapes.h"

#include <algorithm>
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

// Throws unless `ws` holds at least `need` bytes (the kernel's size
// function) and, when it must hold any, points somewhere.
void check_workspace(const char *kernel, const Workspace &ws, int64_t need);

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
// The operands of binary (a, b and y of one type), compare (y bool) and
// where (cond bool), and their broadcasting plan.
BroadcastPlan check_binary(const char *kernel, const Tensor &a, const Tensor &b, const Tensor &y);
BroadcastPlan check_compare(const char *kernel, const Tensor &a, const Tensor &b,
                            const Tensor &y);
BroadcastPlan check_where(const char *kernel, const Tensor &cond, const Tensor &a,
                          const Tensor &b, const Tensor &y);

// Checks reduce's sorted axes and y's shape (x's with the reduced axes kept
// as 1 or dropped); sets reduced[d] for every reduced axis and returns the
// number of elements each output reduces.
int64_t check_reduce(const char *kernel, const Tensor &x, const Tensor &y, const int64_t *axes,
                     int num_axes, bool *reduced);

// Kernel names in messages: "unary(sqrt)", "binary(add)", "compare(eq)",
// "reduce(sum)".
const char *reduce_name(ReduceOp op);
// y's type is x's; or, for a sum of f16/bf16 x, f32 (mixed precision's sums
// over many 16-bit rows, accumulated wider and written unrounded).
void check_reduce_dtypes(const char *kernel, ReduceOp op, const Tensor &x, const Tensor &y);
const char *unary_name(UnaryOp op);
const char *binary_name(BinaryOp op);
const char *compare_name(ComparePredicate pred);

//===----------------------------------------------------------------------===//
// Data movement plans
//===----------------------------------------------------------------------===//

// Row-major strides in elements.
void contiguous_strides(const Shape &shape, int64_t *strides);

// A permutation collapsed to its essential axes: output dims and the input
// stride of each output axis.
struct Permuted {
  int rank = 0;
  int64_t dims[kMaxRank];
  int64_t in_strides[kMaxRank];
};

Permuted collapse_permutation(const Shape &y_shape, const int64_t *x_strides,
                              const int64_t *perm);
// Checks that y is x permuted by perm and returns the collapsed permutation.
Permuted plan_transpose(const char *kernel, const Tensor &x, const Tensor &y,
                        const int64_t *perm);

// Checks that `parts` stack to `whole` along `axis` and returns the product
// of the axes before it.
int64_t check_stacking(const char *kernel, const Tensor &whole, const Tensor *parts, int count,
                       int axis);

// Where a slice takes its elements from: the offset in the sliced tensor of
// its first element, and the offset step per index along every axis.
struct SliceWalk {
  int64_t base = 0;
  int64_t step[kMaxRank] = {};
};

// Checks that every index of the slice `part` of `whole` is inside `whole`
// (both ends of every axis) and returns the walk.
SliceWalk plan_slice(const char *kernel, const Tensor &whole, const Tensor &part,
                     const int64_t *offsets, const int64_t *strides, const char *verb);

// data.shape[:axis] + indices.shape + data.shape[axis + 1:], after the checks
// gather and its gradient share.
Shape gather_shape(const char *kernel, const Tensor &data, const Tensor &indices, int axis);
// gather's and gather_grad's operands (not the indices' values).
void check_gather(const char *kernel, const Tensor &data, const Tensor &indices, const Tensor &y,
                  int axis);
void check_gather_grad(const char *kernel, const Tensor &dy, const Tensor &indices,
                       const Tensor &ddata, int axis);
// A shape seen as [outer, extent, inner] around `axis` (0-d: all 1).
struct AxisLines {
  int64_t outer = 1, extent = 1, inner = 1;
};
AxisLines axis_lines(const Shape &shape, int axis);
// scatter's and top_k's operands (not the positions' values).
void check_scatter(const char *kernel, const Tensor &data, const Tensor &positions,
                   const Tensor &updates, const Tensor &y, int axis, int reduction);
void check_top_k(const char *kernel, const Tensor &x, const Tensor &indices, int axis);
// copy's operands: the same number of bytes.
void check_copy(const char *kernel, const Tensor &x, const Tensor &y);

//===----------------------------------------------------------------------===//
// Normalization checks
//===----------------------------------------------------------------------===//

// Checks a scale or bias against x and the normalized shape (axes [axis,
// rank) of x). Returns whether it has fewer elements than the normalized
// shape, so that the kernel expands it (in f32, into its workspace) rather
// than reading it in place.
bool check_param(const char *kernel, const char *name, const Tensor &param, const Tensor &x,
                 const Shape &normalized);

// Checks that a gradient of a parameter broadcasts to the normalized shape.
void check_param_grad(const char *kernel, const char *name, const Tensor &out,
                      const Shape &normalized);

// softmax's and log_softmax's operands, and those of their gradients.
void check_softmax(const char *kernel, const Tensor &x, const Tensor &y, int axis);
void check_softmax_grad(const char *kernel, const Tensor &y, const Tensor &dy, const Tensor &dx,
                        int axis);

// attention's operands: q, k, v, o of one float type and shape [..., T, Dh]
// (heads-major) or [..., T, H, Dh] (tokens_major) (Dh at most
// kMaxAttentionHead), lse f32 of q's shape without Dh; the gradients (when
// given) of q's type and shape. Returns the rows (q's elements / Dh) and
// sets t, heads (H, or 1 heads-major: the heads are then among the leading
// axes) and dh.
constexpr int64_t kMaxAttentionHead = 128;
int64_t check_attention(const char *kernel, const Tensor &q, const Tensor &k, const Tensor &v,
                        const Tensor &o, const Tensor &lse, const Tensor *do_, const Tensor *dq,
                        const Tensor *dk, const Tensor *dv, bool tokens_major, int64_t &t,
                        int64_t &heads, int64_t &dh);
// packed attention's operands: qkv [..., T, 3, H, Dh] of a float type
// (Dh at most kMaxAttentionHead), o (and do) [..., T, H, Dh] of its type,
// lse f32 [..., T, H], dqkv (when given) of qkv's type and shape. Returns
// the rows (o's elements / Dh) and sets t, heads and dh.
int64_t check_attention_packed(const char *kernel, const Tensor &qkv, const Tensor &o,
                               const Tensor &lse, const Tensor *do_, const Tensor *dqkv,
                               int64_t &t, int64_t &heads, int64_t &dh);

#ifdef __CUDACC__
#define DSRT_ATTENTION_HD __host__ __device__
#else
#define DSRT_ATTENTION_HD
#endif
// Where the attention kernels' rows lie: row i (a position of the
// sequence) of batch-head bh = b * heads + h starts at element
// at(bh, i) = b * batch + h * head + i * row of its tensor (a base pointer
// and a row stride per batch-head, as the kernels address their tiles).
struct AttentionLayout {
  int64_t heads, batch, head, row;
  DSRT_ATTENTION_HD int64_t at(int64_t bh, int64_t i) const {
    return bh / heads * batch + bh % heads * head + i * row;
  }
};
// The layout of rows of `width` elements (Dh for q, k, v, o and their
// gradients, 1 for lse): heads-major [..., T, width], the heads among the
// leading axes (heads 1); tokens-major [..., T, H, width], each position's
// heads side by side as the projections write them.
inline AttentionLayout attention_layout(int64_t t, int64_t heads, int64_t width,
                                        bool tokens_major) {
  if (!tokens_major)
    return {1, t * width, 0, width};
  return {heads, t * heads * width, width, heads * width};
}
// Where the rows of q, k, v and their gradients (qkv), of o and its
// gradient (o) and of lse lie, and the first elements of q, k and v in
// their tensors (q_at, k_at, v_at). Unpacked, q, k and v are tensors of
// o's layout, each from element 0; packed, they are one tokens-major
// [..., T, 3, H, Dh] tensor (the q, k, v projection as it writes them),
// rows 3 H Dh apart, q, k and v from elements 0, H Dh and 2 H Dh.
struct AttentionLayouts {
  AttentionLayout qkv, o, lse;
  int64_t q_at, k_at, v_at;
};
inline AttentionLayouts attention_layouts(int64_t t, int64_t heads, int64_t dh,
                                          bool tokens_major, bool packed) {
  AttentionLayouts l{attention_layout(t, heads, dh, tokens_major),
                     attention_layout(t, heads, dh, tokens_major),
                     attention_layout(t, heads, 1, tokens_major), 0, 0, 0};
  if (packed) {
    l.qkv = {heads, t * 3 * heads * dh, dh, 3 * heads * dh};
    l.k_at = heads * dh;
    l.v_at = 2 * heads * dh;
  }
  return l;
}

// A layer norm's rows and normalized shape (axes [axis, rank) of x), and
// whether scale and bias broadcast (fewer elements than the shape).
struct NormRows {
  Shape normalized;
  int64_t rows = 0, n = 0;
  bool expand_scale = false, expand_bias = false;
};
// layer_norm's operands (x, y, the f32 statistics, scale, bias or null).
NormRows check_layer_norm(const char *kernel, const Tensor &x, const Tensor &scale,
                          const Tensor *bias, const Tensor &y, const Tensor &mean,
                          const Tensor &inv_std_dev, int axis);
// layer_norm_grad's operands (dbias may be null).
NormRows check_layer_norm_grad(const char *kernel, const Tensor &dy, const Tensor &x,
                               const Tensor &scale, const Tensor &mean,
                               const Tensor &inv_std_dev, const Tensor &dx, const Tensor &dscale,
                               const Tensor *dbias, int axis);
// layer_norm_grad's addend (may be null): x's type and shape.
void check_layer_norm_grad_addend(const char *kernel, const Tensor *addend, const Tensor &x);

struct Channels {
  int64_t n = 0, c = 0, spatial = 1;
};

// x is [N, C, ...] and y (named y_name) has its type and shape.
Channels check_channels(const char *kernel, const Tensor &x, const Tensor &y,
                        const char *y_name = "y");

// A per-channel float tensor of shape [c].
void check_per_channel(const char *kernel, const char *name, const Tensor &t, int64_t c);

// The operands of batch_norm, batch_norm_train (which also refuses an
// empty batch) and batch_norm_grad.
Channels check_batch_norm(const char *kernel, const Tensor &x, const Tensor &scale,
                          const Tensor &bias, const Tensor &mean, const Tensor &var,
                          const Tensor &y);
Channels check_batch_norm_train(const char *kernel, const Tensor &x, const Tensor &scale,
                                const Tensor &bias, const Tensor &running_mean,
                                const Tensor &running_var, const Tensor &y,
                                const Tensor &running_mean_out, const Tensor &running_var_out,
                                const Tensor &saved_mean, const Tensor &saved_inv_std);
// What batch_norm_train multiplies the biased batch variance by for the
// running variance: 1, or count / (count - 1) for the unbiased variance
// (refused for a single value per channel, as PyTorch refuses it).
float running_var_factor(int64_t count, bool unbiased);
Channels check_batch_norm_grad(const char *kernel, const Tensor &dy, const Tensor &x,
                               const Tensor &scale, const Tensor &saved_mean,
                               const Tensor &saved_inv_std, const Tensor &dx,
                               const Tensor &dscale, const Tensor &dbias);

//===----------------------------------------------------------------------===//
// Loss checks
//===----------------------------------------------------------------------===//

struct LossShape {
  int64_t n = 0, c = 0, d = 1;  // scores viewed as [N, C, D]
};

// Checks the shapes and types of a loss or of its gradient: `scores` (named
// scores_name) is [N, C, d...], labels [N, d...] i64/i32, weights [C],
// `loss` (named loss_name; the loss or its gradient) a scalar or [N, d...]
// by reduction. The labels' values are the kernel's to check.
LossShape check_loss_shapes(const char *kernel, const Tensor &scores, const Tensor &labels,
                            const Tensor *weights, const Tensor &loss, Reduction reduction,
                            const char *scores_name, const char *loss_name);

//===----------------------------------------------------------------------===//
// Optimizer checks
//===----------------------------------------------------------------------===//

// lr an f32/f16/bf16 scalar, step (may be null: an optimizer without a step
// count) an i64 scalar, param float, and every state tensor of param's type
// and shape; states[0], the gradient, may instead be bf16/f16 when param is
// f32.
void check_optimizer_args(const char *kernel, const Tensor &lr, const Tensor *step,
                          const Tensor &param, const Tensor *const *states,
                          const char *const *names, int count);
// An optimizer's grad_scale, when present: an f32 scalar.
void check_grad_scale(const char *kernel, const Tensor *grad_scale);
// An optimizer's 16-bit parameter copy, when present: bf16 or f16, of an
// f32 param's shape.
void check_param_copy(const char *kernel, const Tensor &param, const Tensor *copy);
// sgd's nesterov needs a positive momentum and no dampening.
void check_sgd_modes(const char *kernel, float momentum, float dampening, bool nesterov);
// adamw_multi's list: a count >= 0, the arrays present, every tensor i as
// check_optimizer_args checks adamw's (named "grads[i]" and so on), all of
// params[0]'s type.
void check_adamw_multi_args(const char *kernel, const Tensor &lr, const Tensor &step, int count,
                            const Tensor *params, const Tensor *grads, const Tensor *ms,
                            const Tensor *vs, const Tensor *params_out, const Tensor *ms_out,
                            const Tensor *vs_out);
// x float, y like x, mask bool of x's shape, ratio in [0, 1).
void check_dropout(const char *kernel, const Tensor &x, const Tensor &y, const Tensor &mask,
                   float ratio);
// out an f32 scalar, every tensor a float tensor.
void check_sum_of_squares(const char *kernel, const Tensor *tensors, int num_tensors,
                          const Tensor &out);

//===----------------------------------------------------------------------===//
// Matmul plans
//===----------------------------------------------------------------------===//

// Shapes and strides of a matmul, after transposes and vector promotion.
struct MatmulPlan {
  int64_t m = 0, n = 0, k = 0;
  // Storage layout of one matrix of each operand, in BLAS terms.
  bool trans_a = false, trans_b = false;
  int64_t lda = 0, ldb = 0;
  // Element strides of a(i, kk) and b(kk, j), for the integer loop.
  int64_t a_rs = 0, a_cs = 0, b_rs = 0, b_cs = 0;
  // Batch axes of the result and each operand's stride along them (0 where
  // the operand broadcasts).
  int batch_rank = 0;
  int64_t batch_dims[kMaxRank] = {};
  int64_t a_batch_stride[kMaxRank] = {}, b_batch_stride[kMaxRank] = {};
  int64_t batch = 1;
  bool b_has_batch = false;
  bool a_vector = false;
};

// The plan of y = op(a) op(b) (NumPy matmul); throws on shapes that do
// not multiply or broadcast, or a y of the wrong shape.
MatmulPlan plan_matmul(const char *kernel, const Tensor &a, const Tensor &b, const Tensor &y,
                       bool transpose_a, bool transpose_b);

// Calls f(batch_index, a_offset, b_offset) for every matrix of the batch.
// matmul's and gemm's operands; gemm's c (may be null) broadcast to y as
// c_plan.
MatmulPlan check_matmul(const char *kernel, const Tensor &a, const Tensor &b, const Tensor &y,
                        bool transpose_a, bool transpose_b);
MatmulPlan check_gemm(const char *kernel, const Tensor &a, const Tensor &b, const Tensor *c,
                      const Tensor &y, bool transpose_a, bool transpose_b,
                      BroadcastPlan &c_plan);

// matmul_bias: a [..., M, K] (folded into M rows), b 2-D, bias [N],
// addend (may be null) of y's shape, one float type.
MatmulPlan check_matmul_bias(const char *kernel, const Tensor &a, const Tensor &b,
                             const Tensor &bias, const Tensor *addend, const Tensor &y,
                             bool transpose_b);
// matmul_bias_gelu and matmul_dgelu: a [..., M, K] (folded into M rows), b
// 2-D, `aux` (the pre-activation) of y's shape and a's type; bias [N] of
// a's type when given.
MatmulPlan check_matmul_gelu(const char *kernel, const Tensor &a, const Tensor &b,
                             const Tensor *bias, const Tensor &aux, const Tensor &y,
                             bool transpose_b);
// matmul_bias_grad: 2-D a and b, bias_grad [N] of b's type.
MatmulPlan check_matmul_bias_grad(const char *kernel, const Tensor &a, const Tensor &b,
                                  const Tensor &y, const Tensor &bias_grad, bool transpose_a);
// matmul_lhs_bias_grad: 2-D a [K, M] and b, bias_grad [M] of a's type.
MatmulPlan check_matmul_lhs_bias_grad(const char *kernel, const Tensor &a, const Tensor &b,
                                      const Tensor &y, const Tensor &bias_grad);

template <typename F> void for_each_batch(const MatmulPlan &p, F &&f) {
  int64_t index[kMaxRank] = {};
  int64_t a_off = 0, b_off = 0;
  for (int64_t i = 0; i < p.batch; ++i) {
    f(i, a_off, b_off);
    for (int d = p.batch_rank - 1; d >= 0; --d) {
      ++index[d];
      a_off += p.a_batch_stride[d];
      b_off += p.b_batch_stride[d];
      if (index[d] < p.batch_dims[d])
        break;
      a_off -= index[d] * p.a_batch_stride[d];
      b_off -= index[d] * p.b_batch_stride[d];
      index[d] = 0;
    }
  }
}

}  // namespace detail
}  // namespace dsrt

#endif  // DSRT_SRC_KERNEL_COMMON_H

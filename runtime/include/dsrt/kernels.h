// dsrt: one kernel per ds op.
//
// Every kernel takes the stream it runs on, its inputs as const Tensor views
// and writes its outputs into caller-provided Tensor views (destination
// passing: the memory planner decides where every output lives). Shapes are
// the ds op's static shapes; kernels check what they cannot assume (shapes
// that disagree, an index out of range in the data) and throw dsrt::Error.
// A kernel runs after the work enqueued before it on its stream: on the cpu
// backend it first waits for asynchronous work (a collective, a file read)
// still pending there, and reports such work's failure.
//
// Float tensors may be f32, f16 or bf16; kernels compute in f32 and round the
// result to the output's type. Semantics are those of the ds op of the same
// name (dialects/ds/IR/DsOps.td), which are ONNX's.
//
// Kernels allocate no memory of their own. One that needs scratch memory (an
// im2col matrix, 16-bit operands converted to f32 for the f32 GEMM) takes a
// Workspace, a slice of the arena the memory plan gives the op while it
// runs, and has a size function (`<kernel>_workspace_bytes`) saying how many
// bytes it needs for given shapes; the compiler computes the same number
// (KernelOpInterface::getWorkspaceBytes). A kernel given fewer bytes than it
// needs throws dsrt::Error naming itself and both sizes.
#ifndef DSRT_KERNELS_H
#define DSRT_KERNELS_H

#include "dsrt/stream.h"
#include "dsrt/tensor.h"

namespace dsrt {

enum class UnaryOp {
  Sqrt, Reciprocal, Exp, Log, Tanh, Erf, Sigmoid, Neg, Relu, LeakyRelu,
  Gelu, GeluTanh, Not, Softplus, Elu, Celu, Sin, Cos, Floor, Ceil, Round,
};
enum class BinaryOp { Add, Sub, Mul, Div, Pow, Mod, Fmod };
enum class ComparePredicate { Eq, Lt, Le, Gt, Ge };
enum class ReduceOp { Sum, Mean, Max, Prod };
enum class Reduction { None, Sum, Mean };
enum class MomentumMode { Standard, Nesterov };

// Scratch memory of one kernel call: `bytes` bytes at `data` (float-aligned).
struct Workspace {
  void *data = nullptr;
  int64_t bytes = 0;
};

// y = op(x); `alpha` is LeakyRelu's slope and Elu's and Celu's alpha. Neg and Relu also take integers;
// Not takes bool.
void unary(Stream &s, UnaryOp op, const Tensor &x, const Tensor &y, float alpha = 0.0f);

// y = a op b with multidirectional broadcasting; integer Div truncates. Mod's
// remainder has the sign of b (Python's %), Fmod's that of a (C's fmod).
void binary(Stream &s, BinaryOp op, const Tensor &a, const Tensor &b, const Tensor &y);

// y (bool) = a pred b, broadcasting.
void compare(Stream &s, ComparePredicate pred, const Tensor &a, const Tensor &b,
             const Tensor &y);

// y = cond ? a : b, broadcasting all three.
void where(Stream &s, const Tensor &cond, const Tensor &a, const Tensor &b, const Tensor &y);

// Element type conversion, same shape. Float to integer truncates toward
// zero; anything to bool is != 0.
void cast(Stream &s, const Tensor &x, const Tensor &y);

// Byte copy of x into y (same number of bytes): reshape when not in place.
void copy(Stream &s, const Tensor &x, const Tensor &y);

// NumPy matmul: last two axes multiply, leading axes broadcast, 1-D operands
// are vectors. transpose_a / transpose_b swap the last two axes of an operand
// of rank >= 2 first. f16/bf16 convert a, b and y to f32 in the workspace.
void matmul(Stream &s, const Tensor &a, const Tensor &b, const Tensor &y, bool transpose_a,
            bool transpose_b, const Workspace &ws);

// y = alpha * op(a) * op(b) + beta * c; c (may be null) broadcasts to [M, N].
// f16/bf16 convert a, b and y to f32 in the workspace.
void gemm(Stream &s, const Tensor &a, const Tensor &b, const Tensor *c, const Tensor &y,
          float alpha, float beta, bool transpose_a, bool transpose_b, const Workspace &ws);

// y = a op(b) + bias + addend: a [..., M, K], b [K, N] (transpose_b:
// [N, K]), bias [N] broadcast along the rows, addend (may be null) of y's
// shape, one float type. f16/bf16 sum the product, bias and addend in f32
// and round once into y. Workspace: matmul_workspace_bytes. The cuda
// backend runs it as one cuBLASLt call (CUBLASLT_EPILOGUE_BIAS, the addend
// as C with beta 1).
void matmul_bias(Stream &s, const Tensor &a, const Tensor &b, const Tensor &bias,
                 const Tensor *addend, const Tensor &y, bool transpose_b, const Workspace &ws);

// y = op(a) b for 2-D a ([M, K], transpose_a: [K, M]) and b [K, N], and
// bias_grad [N] = b's column sums (over K), as reduce(Sum) over axis 0.
// The cuda backend runs it as one cuBLASLt call (CUBLASLT_EPILOGUE_BGRADA).
void matmul_bias_grad(Stream &s, const Tensor &a, const Tensor &b, const Tensor &y,
                      const Tensor &bias_grad, bool transpose_a, const Workspace &ws);
// max(matmul_workspace_bytes, reduce_workspace_bytes of b's axis-0 sum).
int64_t matmul_bias_grad_workspace_bytes(DType dtype, const Shape &a, const Shape &b,
                                         const Shape &y);
// The gradients of a weight stored [out, in] (nn.Linear): y = aᵀ b for 2-D
// a [K, M] (the output gradient) and b [K, N], and bias_grad [M] = a's
// column sums (over K), as reduce(Sum) over axis 0. The cuda backend runs
// it as one cuBLASLt call (CUBLASLT_EPILOGUE_BGRADB).
void matmul_lhs_bias_grad(Stream &s, const Tensor &a, const Tensor &b, const Tensor &y,
                          const Tensor &bias_grad, const Workspace &ws);
// max(matmul_workspace_bytes, reduce_workspace_bytes of a's axis-0 sum).
int64_t matmul_lhs_bias_grad_workspace_bytes(DType dtype, const Shape &a, const Shape &b,
                                             const Shape &y);

// pre = a op(b) + bias and y = gelu_tanh(pre) (the tanh approximation,
// never the erf GELU): a [..., M, K], b [K, N] (transpose_b: [N, K]), bias
// [N], y and pre of one shape and float type. The cpu reference runs
// matmul_bias into pre and the GELU of the stored pre into y; the cuda
// backend one cuBLASLt call (CUBLASLT_EPILOGUE_GELU_AUX_BIAS, pre as the aux
// matrix), the GELU taken of the f32 sum. Workspace: matmul_workspace_bytes.
void matmul_bias_gelu(Stream &s, const Tensor &a, const Tensor &b, const Tensor &bias,
                      const Tensor &y, const Tensor &pre, bool transpose_b, const Workspace &ws);

// y = (a op(b)) * gelu_tanh'(pre), elementwise: the gradient of a tanh
// GELU's input from its output's gradient a op(b). a [..., M, K], b [K, N]
// (transpose_b: [N, K]), pre and y of one shape and float type. The cpu
// reference runs matmul into y and multiplies in f32; the cuda backend one
// cuBLASLt call (CUBLASLT_EPILOGUE_DGELU, pre as the aux input).
// Workspace: matmul_workspace_bytes.
void matmul_dgelu(Stream &s, const Tensor &a, const Tensor &b, const Tensor &pre,
                  const Tensor &y, bool transpose_b, const Workspace &ws);

// Workspace bytes of matmul and gemm: 4 * (|a| + |b| + |y|) elements for f16
// and bf16, 0 otherwise.
int64_t matmul_workspace_bytes(DType dtype, const Shape &a, const Shape &b, const Shape &y);
int64_t gemm_workspace_bytes(DType dtype, const Shape &a, const Shape &b, const Shape &y);

// f16/bf16 rows along a unit-stride axis are converted to f32 in the
// workspace, at most 64 rows at a time (softmax_workspace_bytes).
void softmax(Stream &s, const Tensor &x, const Tensor &y, int axis, const Workspace &ws);
void log_softmax(Stream &s, const Tensor &x, const Tensor &y, int axis, const Workspace &ws);
int64_t softmax_workspace_bytes(DType dtype, const Shape &x, int axis);

// Normalizes over axes [axis, rank). mean and inv_std_dev are f32 with the
// input's leading axes and ones for the normalized axes. bias may be null.
// f16/bf16 rows are converted to f32 in the workspace, at most 64 at a time.
// scale and bias are read in place when they have the normalized shape's
// element count; one that broadcasts (fewer elements) is expanded to f32 in
// the workspace (layer_norm_workspace_bytes counts it).
void layer_norm(Stream &s, const Tensor &x, const Tensor &scale, const Tensor *bias,
                const Tensor &y, const Tensor &mean, const Tensor &inv_std_dev, int axis,
                float epsilon, const Workspace &ws);
int64_t layer_norm_workspace_bytes(DType dtype, const Shape &x, const Shape &scale,
                                   const Shape *bias, int axis);

// Inference batch norm over axis 1 with running statistics.
void batch_norm(Stream &s, const Tensor &x, const Tensor &scale, const Tensor &bias,
                const Tensor &mean, const Tensor &var, const Tensor &y, float epsilon);

// Training batch norm: batch statistics (biased variance), updated running
// statistics running * momentum + batch * (1 - momentum), and the saved batch
// mean and inverse standard deviation (f32) for backward. The running
// variance takes the biased batch variance (ONNX's reference), or with
// unbiased_running_var the unbiased one, times count / (count - 1) with count
// = N * spatial (PyTorch's BatchNorm in train()).
void batch_norm_train(Stream &s, const Tensor &x, const Tensor &scale, const Tensor &bias,
                      const Tensor &running_mean, const Tensor &running_var, const Tensor &y,
                      const Tensor &running_mean_out, const Tensor &running_var_out,
                      const Tensor &saved_mean, const Tensor &saved_inv_std, float epsilon,
                      float momentum, bool unbiased_running_var);

// Reduces x over the sorted axes[0..num_axes) into y (y's shape keeps or drops
// the reduced axes; both layouts are the same elements in the same order).
// The workspace holds the accumulators of the passes (one per reduced group
// of axes, last first): f64 for float sums, means and products, f32 for a
// float max, 64-bit integers for integers.
void reduce(Stream &s, ReduceOp op, const Tensor &x, const Tensor &y, const int64_t *axes,
            int num_axes, const Workspace &ws);
int64_t reduce_workspace_bytes(ReduceOp op, DType dtype, const Shape &x, const int64_t *axes,
                               int num_axes);

// y axis i = x axis perm[i].
void transpose(Stream &s, const Tensor &x, const Tensor &y, const int64_t *perm);

// Broadcasts x to y's shape (ONNX Expand).
void broadcast_to(Stream &s, const Tensor &x, const Tensor &y);

void concat(Stream &s, const Tensor *inputs, int num_inputs, const Tensor &y, int axis);
void split(Stream &s, const Tensor &x, const Tensor *outputs, int num_outputs, int axis);

// y[i...] = x[offsets + i * strides] per axis (strides may be negative).
void slice(Stream &s, const Tensor &x, const Tensor &y, const int64_t *offsets,
           const int64_t *strides);

// ONNX Gather; negative indices count from the end, others out of range throw.
void gather(Stream &s, const Tensor &data, const Tensor &indices, const Tensor &y, int axis);

// Keeps the upper (j - i >= k) or lower (j - i <= k) triangle of the last two
// axes, zeroes the rest.
void trilu(Stream &s, const Tensor &x, const Tensor &y, bool upper, int64_t k);

// ONNX ScatterElements / ScatterND by flat position: y = data, then for every
// element u of `updates` in order, y.flat[positions[u]] = combine(that, u),
// with `reduction` 0 none (replace), 1 add, 2 mul, 3 max, 4 min (f16/bf16
// combine in f32 and round each time; integers wrap). `positions` (i64 or
// i32) has the shape of `updates`; positions outside [0, numel(data)) throw.
// Positions that differ other than along `axis` must address distinct
// elements: lines along `axis` run in parallel, each in order.
void scatter(Stream &s, const Tensor &data, const Tensor &positions, const Tensor &updates,
             const Tensor &y, int axis, int reduction);

// ONNX TopK's indices (i64): along `axis`, the k = indices.shape[axis] largest
// (or smallest) elements of x, best first; equal values lower index first,
// NaN larger than every number (as PyTorch).
void top_k(Stream &s, const Tensor &x, const Tensor &indices, int axis, bool largest);

// Training dropout: mask = uniform(seed, counter) >= ratio; y = x * mask /
// (1 - ratio). The random stream is counter-based (Philox 4x32-10), so a
// (seed, counter) pair always draws the same mask on every backend.
void dropout(Stream &s, const Tensor &x, const Tensor &y, const Tensor &mask, float ratio,
             uint64_t seed, uint64_t counter);

// Softmax cross-entropy (ONNX SoftmaxCrossEntropyLoss): scores [N, C, d...],
// labels [N, d...], weights [C] or null. log_prob receives the log-softmax
// over C. Labels equal to ignore_index (when has_ignore_index) contribute 0
// and are not counted by the mean; other labels outside [0, C) throw.
// Unless scores is f32 [N, C] (rows read in place), each of the at most 64
// blocks of samples converts its row of the class axis to f32 in the
// workspace (softmax_cross_entropy_workspace_bytes).
void softmax_cross_entropy(Stream &s, const Tensor &scores, const Tensor &labels,
                           const Tensor *weights, const Tensor &loss, const Tensor &log_prob,
                           Reduction reduction, bool has_ignore_index, int64_t ignore_index,
                           const Workspace &ws);
int64_t softmax_cross_entropy_workspace_bytes(DType dtype, const Shape &scores);

void nll_loss(Stream &s, const Tensor &log_prob, const Tensor &labels, const Tensor *weights,
              const Tensor &loss, Reduction reduction, bool has_ignore_index,
              int64_t ignore_index);

// softmax_cross_entropy and softmax_cross_entropy_grad of its loss in one
// pass over the scores: loss as the former computes it, dscores as the
// latter does from dloss (the gradient's seed, the loss's shape) but with
// each row's softmax recomputed in f32 instead of read from a stored
// log_prob. dscores may be scores (each element is read before it is
// written). The workspace (softmax_cross_entropy_with_grad_workspace_bytes)
// is the larger of softmax_cross_entropy's (the cpu's) and one f64 loss per
// row (cuda's).
void softmax_cross_entropy_with_grad(Stream &s, const Tensor &scores, const Tensor &labels,
                                     const Tensor &dloss, const Tensor *weights,
                                     const Tensor &loss, const Tensor &dscores,
                                     Reduction reduction, bool has_ignore_index,
                                     int64_t ignore_index, const Workspace &ws);
int64_t softmax_cross_entropy_with_grad_workspace_bytes(DType dtype, const Shape &scores);

// N-d grouped convolution, NC... layout. pads: begins of every spatial axis,
// then ends. bias may be null. The workspace holds one group's im2col matrix
// (none for a 1x1, stride-1, unpadded window) and, for f16/bf16, x, w, y and
// bias as f32.
void conv(Stream &s, const Tensor &x, const Tensor &w, const Tensor *bias, const Tensor &y,
          const int64_t *strides, const int64_t *pads, const int64_t *dilations, int64_t group,
          const Workspace &ws);

// Workspace bytes of conv, conv_grad_input and conv_grad_weight for these
// shapes (x or dx, w or dw, y or dy) and attributes (rank - 2 spatial axes).
int64_t conv_workspace_bytes(DType dtype, const Shape &x, const Shape &w, const Shape &y,
                             bool has_bias, const int64_t *strides, const int64_t *pads,
                             int64_t group);
int64_t conv_grad_input_workspace_bytes(DType dtype, const Shape &dy, const Shape &w,
                                        const Shape &dx, const int64_t *strides,
                                        const int64_t *pads, int64_t group);
int64_t conv_grad_weight_workspace_bytes(DType dtype, const Shape &dy, const Shape &x,
                                         const Shape &dw, const int64_t *strides,
                                         const int64_t *pads, int64_t group);

// Padding never wins a max; ceil_mode is already reflected in y's shape.
void max_pool(Stream &s, const Tensor &x, const Tensor &y, const int64_t *kernel,
              const int64_t *strides, const int64_t *pads, const int64_t *dilations);
void avg_pool(Stream &s, const Tensor &x, const Tensor &y, const int64_t *kernel,
              const int64_t *strides, const int64_t *pads, bool count_include_pad);

// ONNX ai.onnx.preview.training updates of one tensor (see DsOps.td).
void adam(Stream &s, const Tensor &lr, const Tensor &step, const Tensor &param,
          const Tensor &grad, const Tensor &m, const Tensor &v, const Tensor &param_out,
          const Tensor &m_out, const Tensor &v_out, float alpha, float beta, float epsilon,
          float norm_coefficient, float norm_coefficient_post);
void momentum(Stream &s, const Tensor &lr, const Tensor &step, const Tensor &param,
              const Tensor &grad, const Tensor &velocity, const Tensor &param_out,
              const Tensor &velocity_out, float alpha, float beta, MomentumMode mode,
              float norm_coefficient);
void adagrad(Stream &s, const Tensor &lr, const Tensor &step, const Tensor &param,
             const Tensor &grad, const Tensor &accumulator, const Tensor &param_out,
             const Tensor &accumulator_out, float decay_factor, float epsilon,
             float norm_coefficient);

//===----------------------------------------------------------------------===//
// Backward kernels: the vector-Jacobian products that need their own kernel.
// Each takes the gradient of the op's result(s) (dy) and what the forward
// saved, and writes the gradient of the operand(s). Gradients have the
// forward operand's shape and element type (f16/bf16 computed in f32).
//===----------------------------------------------------------------------===//

// dx = y * (dy - sum(dy * y)) along `axis`, y the softmax's output.
void softmax_grad(Stream &s, const Tensor &y, const Tensor &dy, const Tensor &dx, int axis,
                  const Workspace &ws);

// dx = dy - exp(y) * sum(dy) along `axis`, y the log-softmax's output.
void log_softmax_grad(Stream &s, const Tensor &y, const Tensor &dy, const Tensor &dx, int axis,
                      const Workspace &ws);
// f16/bf16: y and dy rows in f32, at most 64 of each (twice softmax's).
int64_t softmax_grad_workspace_bytes(DType dtype, const Shape &y, int axis);

// Scaled-dot-product attention, fused: o = softmax(scale * q kᵀ [+ causal
// mask]) v over the sequence, without the [..., T, T] scores: each query
// row streams the keys with an online softmax in f32. q, k, v and o have
// one shape, any float type, Dh at most 128: [..., T, Dh] (the heads among
// the leading axes) or, tokens_major, [..., T, H, Dh] (each position's
// heads side by side, as the projections write them: no transposes around
// the kernel). lse (f32, q's shape without its last axis) receives each
// row's log-sum-exp of the scaled scores, which attention_grad reads to
// recompute the probabilities. causal: key j is seen by query i only when
// j <= i.
void attention(Stream &s, const Tensor &q, const Tensor &k, const Tensor &v, const Tensor &o,
               const Tensor &lse, float scale, bool causal, bool tokens_major);
// dq, dk, dv of attention from its operands, its output o, its lse and do_
// (the output's gradient), all in attention's layout, FlashAttention-2
// style: the probabilities are recomputed from lse, nothing [T, T] is
// stored; each row's rowsum(do_ * o) in the workspace.
void attention_grad(Stream &s, const Tensor &q, const Tensor &k, const Tensor &v, const Tensor &o,
                    const Tensor &lse, const Tensor &do_, const Tensor &dq, const Tensor &dk,
                    const Tensor &dv, float scale, bool causal, bool tokens_major,
                    const Workspace &ws);
// The least workspace any backend needs: one f32 per query row (q's
// elements over its last axis).
int64_t attention_grad_workspace_bytes(DType dtype, const Shape &q);
// What a --target cuda program plans: that, and for f16 and bf16 with Dh a
// multiple of 16 also, from the next multiple of 256 bytes, rows x Dh f32
// (the cuda backend's dq accumulator under DSRT_ATTENTION_GRAD=atomic,
// which refuses a workspace without it; unused otherwise).
int64_t attention_grad_cuda_workspace_bytes(DType dtype, const Shape &q);
// attention with q, k and v packed in one tokens-major tensor
// qkv [..., T, 3, H, Dh] (the q, k, v projection's [..., T, 3 H Dh] as it
// writes them; q, k, v at index 0, 1, 2 of axis -3), read where they lie:
// rows 3 H Dh elements apart. o is [..., T, H, Dh], lse [..., T, H].
void attention_packed(Stream &s, const Tensor &qkv, const Tensor &o, const Tensor &lse,
                      float scale, bool causal);
// Its gradient: dq, dk, dv written into one dqkv of qkv's shape (packed
// like qkv), o, lse and do_ as attention_packed's; the workspace is
// attention_grad_workspace_bytes(dtype, o's shape).
void attention_packed_grad(Stream &s, const Tensor &qkv, const Tensor &o, const Tensor &lse,
                           const Tensor &do_, const Tensor &dqkv, float scale, bool causal,
                           const Workspace &ws);

// Layer norm over axes [axis, rank) with the forward's f32 mean and
// inv_std_dev. dx has x's shape; dscale has scale's shape and dbias the
// forward bias's shape, which may differ (each the gradient reduced over the
// leading axes and over the axes that parameter broadcasts along); dbias may
// be null when the forward had no bias.
void layer_norm_grad(Stream &s, const Tensor &dy, const Tensor &x, const Tensor &scale,
                     const Tensor &mean, const Tensor &inv_std_dev, const Tensor &dx,
                     const Tensor &dscale, const Tensor *dbias, int axis, const Workspace &ws);
// The same with `addend` (x's type and shape; null: none) added to the input
// gradient: dx = addend + the layer norm's dx, summed in f32 and rounded
// once (a residual stream's gradient, which the backward adds it to). dx may
// be the addend's storage (each element is read before it is written).
void layer_norm_grad_add(Stream &s, const Tensor &dy, const Tensor &x, const Tensor &scale,
                     const Tensor &mean, const Tensor &inv_std_dev, const Tensor *addend,
                     const Tensor &dx, const Tensor &dscale, const Tensor *dbias, int axis,
                     const Workspace &ws);
// Workspace: f64 totals and per-block f32 partial sums of dscale/dbias, f16/bf16
// x/dy/dx rows per block (at most 64 blocks), a broadcast scale in f32; past 32
// blocks, the f64 sums of each of 32 lanes of blocks (the cuda kernel's).
int64_t layer_norm_grad_workspace_bytes(DType dtype, const Shape &x, const Shape &scale,
                                        int axis);

// Training batch norm over axis 1 with the forward's saved batch mean and
// inverse standard deviation (f32, [C]); dscale and dbias are [C].
void batch_norm_grad(Stream &s, const Tensor &dy, const Tensor &x, const Tensor &scale,
                     const Tensor &saved_mean, const Tensor &saved_inv_std, const Tensor &dx,
                     const Tensor &dscale, const Tensor &dbias);

// Gradient of softmax cross-entropy w.r.t. the scores: dloss (the loss's
// gradient: a scalar for sum/mean, [N, d...] for none) times
// (softmax - onehot(label)), weighted, zero for ignored labels; for mean the
// divisor is the (weighted) count of counted labels, as in the forward.
void softmax_cross_entropy_grad(Stream &s, const Tensor &dloss, const Tensor &log_prob,
                                const Tensor &labels, const Tensor *weights,
                                const Tensor &dscores, Reduction reduction,
                                bool has_ignore_index, int64_t ignore_index);

// Gradient of NLL w.r.t. log_prob: -dloss * weight at the label, 0 elsewhere.
void nll_loss_grad(Stream &s, const Tensor &dloss, const Tensor &labels, const Tensor *weights,
                   const Tensor &dlog_prob, Reduction reduction, bool has_ignore_index,
                   int64_t ignore_index);

// Gather's gradient: ddata = 0, then ddata[.., indices[j], ..] += dy[.., j, ..]
// along `axis` (scatter-add; repeated indices accumulate, in index order so
// the result is deterministic). Negative indices count from the end. Float
// (f16/bf16 summed in f32, rounded once) and integer (wrapping) types.
// The workspace: the cpu's f32 sums of f16/bf16 (4 bytes per element of
// ddata) or the cuda's sort of the positions by row and partial sums of
// long rows, whichever is larger (src/workspace_shapes.h).
void gather_grad(Stream &s, const Tensor &dy, const Tensor &indices, const Tensor &ddata,
                 int axis, const Workspace &ws);
int64_t gather_grad_workspace_bytes(DType dtype, const Shape &ddata, const Shape &indices,
                                    int axis);

// Slice's gradient: dx = 0 except dx[offsets + i * strides] = dy[i]. Any
// element type (bool: false).
void slice_grad(Stream &s, const Tensor &dy, const Tensor &dx, const int64_t *offsets,
                const int64_t *strides);

// Convolution gradients (same attributes as conv): w.r.t. the input (dx has
// x's shape) and w.r.t. the weight (dw has w's shape). The bias gradient is a
// reduction the compiler emits itself. The workspace holds the im2col
// matrix (every group's for the input's gradient, one group's for the
// weight's) and, for f16/bf16, the operands and result as f32.
void conv_grad_input(Stream &s, const Tensor &dy, const Tensor &w, const Tensor &dx,
                     const int64_t *strides, const int64_t *pads, const int64_t *dilations,
                     int64_t group, const Workspace &ws);
void conv_grad_weight(Stream &s, const Tensor &dy, const Tensor &x, const Tensor &dw,
                      const int64_t *strides, const int64_t *pads, const int64_t *dilations,
                      int64_t group, const Workspace &ws);

// Pooling gradients. Max pooling routes each window's gradient to the first
// position holding the window's maximum (PyTorch's choice on ties); as in
// PyTorch's cpu kernel, a window with NaNs routes to its last NaN and a
// window of -inf to its first in-bounds position.
void max_pool_grad(Stream &s, const Tensor &dy, const Tensor &x, const Tensor &dx,
                   const int64_t *kernel, const int64_t *strides, const int64_t *pads,
                   const int64_t *dilations, const Workspace &ws);
void avg_pool_grad(Stream &s, const Tensor &dy, const Tensor &dx, const int64_t *kernel,
                   const int64_t *strides, const int64_t *pads, bool count_include_pad,
                   const Workspace &ws);
// f16/bf16 pooling gradients sum in f32 planes of the workspace: at most 64
// planes of dx's spatial size (0 bytes for f32).
int64_t pool_grad_workspace_bytes(DType dtype, const Shape &dx);

//===----------------------------------------------------------------------===//
// Optimizer steps of the training step, one parameter tensor each, in place
// allowed (param_out may be param, and so on). lr is an f32 scalar tensor
// (the schedule's value for this step), step an i64 scalar (1 for the first
// update; adamw and sgd throw for a step below 1). Semantics are PyTorch's
// (torch.optim), which DeepSpeed follows. The gradient has the parameter's
// type, or is the bf16/f16 gradient of an f32 parameter (mixed precision's
// f32 master weights), converted to f32 an element at a time.
//
// grad_scale (adamw, adamw_multi, sgd, lion): null, or an f32 scalar s in
// the backend's memory; the update then reads g * s (one f32 product per
// element) wherever it reads g. The training step passes the gradient
// clipping coefficient, 1/k of accumulation and fp16's 1/loss-scale this
// way, so no scaled copy of a gradient is ever made.
//
// param_copy (adamw, sgd, lion; params_copy, an array of num_tensors, for
// adamw_multi): null, or a bf16/f16 tensor of an f32 parameter's shape; the
// update then also writes the updated parameter rounded to its type (as
// cast rounds it: to nearest, ties to even) from the same loop over the
// elements. Mixed precision's 16-bit working copy is made this way, without
// a second pass over the f32 master.
//===----------------------------------------------------------------------===//

// Adam / AdamW: m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2;
// m^ = m / (1 - b1^t); v^ = v / (1 - b2^t); p -= lr * m^ / (sqrt(v^) + eps).
// decoupled (AdamW): p *= 1 - lr * weight_decay first; otherwise (Adam)
// g += weight_decay * p first.
void adamw(Stream &s, const Tensor &lr, const Tensor &step, const Tensor &param,
           const Tensor &grad, const Tensor &m, const Tensor &v, const Tensor &param_out,
           const Tensor &m_out, const Tensor &v_out, float beta1, float beta2, float epsilon,
           float weight_decay, bool decoupled, const Tensor *grad_scale = nullptr,
           const Tensor *param_copy = nullptr);

// adamw over a list of tensors in one call: tensor i (params[i], grads[i],
// ms[i], vs[i] -> params_out[i], ms_out[i], vs_out[i]) is updated exactly
// as adamw would update it, every tensor with the same lr, step and
// settings, all of one float type. Both backends balance the work by
// elements, whatever the tensors' sizes: the cuda backend cuts the
// concatenation of the tensors into chunks of 64Ki elements, one per block,
// launching up to 320 chunks of up to 32 tensors at a time (the chunk table
// of a list is built on its first call and kept); the cpu backend runs one
// parallel region over all the tensors' elements. Both use adamw's element
// code (adamw's bits, for any thread or block count). Every tensor is
// checked before any is written.
void adamw_multi(Stream &s, const Tensor &lr, const Tensor &step, int num_tensors,
                 const Tensor *params, const Tensor *grads, const Tensor *ms, const Tensor *vs,
                 const Tensor *params_out, const Tensor *ms_out, const Tensor *vs_out,
                 float beta1, float beta2, float epsilon, float weight_decay, bool decoupled,
                 const Tensor *grad_scale = nullptr, const Tensor *params_copy = nullptr);

// SGD as torch.optim.SGD: g += weight_decay * p; with momentum:
// buf = g at step 1 (the velocity input is not read), else
// momentum * buf + (1 - dampening) * g; g = nesterov ? g + momentum * buf : buf;
// p -= lr * g. Without momentum (0) velocity_out is velocity, unchanged.
// nesterov needs momentum > 0 and dampening 0, as in torch.optim.SGD.
void sgd(Stream &s, const Tensor &lr, const Tensor &step, const Tensor &param,
         const Tensor &grad, const Tensor &velocity, const Tensor &param_out,
         const Tensor &velocity_out, float momentum, float dampening, float weight_decay,
         bool nesterov, const Tensor *grad_scale = nullptr, const Tensor *param_copy = nullptr);

// Lion (Chen et al. 2023, "Symbolic Discovery of Optimization Algorithms"):
// c = b1 m + (1 - b1) g; p = p * (1 - lr * weight_decay) - lr * sign(c);
// m = b2 m + (1 - b2) g; sign(0) = 0.
void lion(Stream &s, const Tensor &lr, const Tensor &param, const Tensor &grad, const Tensor &m,
          const Tensor &param_out, const Tensor &m_out, float beta1, float beta2,
          float weight_decay, const Tensor *grad_scale = nullptr,
          const Tensor *param_copy = nullptr);

// sum over all tensors (any float types) of sum(g^2), accumulated in double
// and written as an f32 scalar: the global gradient norm is its square root.
// The summation order does not depend on the thread count.
void sum_of_squares(Stream &s, const Tensor *tensors, int num_tensors, const Tensor &out);

}  // namespace dsrt

#endif  // DSRT_KERNELS_H

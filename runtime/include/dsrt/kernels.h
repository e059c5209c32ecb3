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
#ifndef DSRT_KERNELS_H
#define DSRT_KERNELS_H

#include "dsrt/stream.h"
#include "dsrt/tensor.h"

namespace dsrt {

enum class UnaryOp {
  Sqrt, Reciprocal, Exp, Log, Tanh, Erf, Sigmoid, Neg, Relu, LeakyRelu,
  Gelu, GeluTanh, Not,
};
enum class BinaryOp { Add, Sub, Mul, Div, Pow };
enum class ComparePredicate { Eq, Lt, Le, Gt, Ge };
enum class ReduceOp { Sum, Mean, Max };
enum class Reduction { None, Sum, Mean };
enum class MomentumMode { Standard, Nesterov };

// y = op(x); `alpha` is LeakyRelu's slope. Neg and Relu also take integers;
// Not takes bool.
void unary(Stream &s, UnaryOp op, const Tensor &x, const Tensor &y, float alpha = 0.0f);

// y = a op b with multidirectional broadcasting; integer Div truncates.
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
// of rank >= 2 first.
void matmul(Stream &s, const Tensor &a, const Tensor &b, const Tensor &y, bool transpose_a,
            bool transpose_b);

// y = alpha * op(a) * op(b) + beta * c; c (may be null) broadcasts to [M, N].
void gemm(Stream &s, const Tensor &a, const Tensor &b, const Tensor *c, const Tensor &y,
          float alpha, float beta, bool transpose_a, bool transpose_b);

void softmax(Stream &s, const Tensor &x, const Tensor &y, int axis);
void log_softmax(Stream &s, const Tensor &x, const Tensor &y, int axis);

// Normalizes over axes [axis, rank). mean and inv_std_dev are f32 with the
// input's leading axes and ones for the normalized axes. bias may be null.
void layer_norm(Stream &s, const Tensor &x, const Tensor &scale, const Tensor *bias,
                const Tensor &y, const Tensor &mean, const Tensor &inv_std_dev, int axis,
                float epsilon);

// Inference batch norm over axis 1 with running statistics.
void batch_norm(Stream &s, const Tensor &x, const Tensor &scale, const Tensor &bias,
                const Tensor &mean, const Tensor &var, const Tensor &y, float epsilon);

// Training batch norm: batch statistics (biased variance), updated running
// statistics running * momentum + batch * (1 - momentum), and the saved batch
// mean and inverse standard deviation (f32) for backward.
void batch_norm_train(Stream &s, const Tensor &x, const Tensor &scale, const Tensor &bias,
                      const Tensor &running_mean, const Tensor &running_var, const Tensor &y,
                      const Tensor &running_mean_out, const Tensor &running_var_out,
                      const Tensor &saved_mean, const Tensor &saved_inv_std, float epsilon,
                      float momentum);

// Reduces x over the sorted axes[0..num_axes) into y (y's shape keeps or drops
// the reduced axes; both layouts are the same elements in the same order).
void reduce(Stream &s, ReduceOp op, const Tensor &x, const Tensor &y, const int64_t *axes,
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

// Training dropout: mask = uniform(seed, counter) >= ratio; y = x * mask /
// (1 - ratio). The random stream is counter-based (Philox 4x32-10), so a
// (seed, counter) pair always draws the same mask on every backend.
void dropout(Stream &s, const Tensor &x, const Tensor &y, const Tensor &mask, float ratio,
             uint64_t seed, uint64_t counter);

// Softmax cross-entropy (ONNX SoftmaxCrossEntropyLoss): scores [N, C, d...],
// labels [N, d...], weights [C] or null. log_prob receives the log-softmax
// over C. Labels equal to ignore_index (when has_ignore_index) contribute 0
// and are not counted by the mean; other labels outside [0, C) throw.
void softmax_cross_entropy(Stream &s, const Tensor &scores, const Tensor &labels,
                           const Tensor *weights, const Tensor &loss, const Tensor &log_prob,
                           Reduction reduction, bool has_ignore_index, int64_t ignore_index);

void nll_loss(Stream &s, const Tensor &log_prob, const Tensor &labels, const Tensor *weights,
              const Tensor &loss, Reduction reduction, bool has_ignore_index,
              int64_t ignore_index);

// N-d grouped convolution, NC... layout. pads: begins of every spatial axis,
// then ends. bias may be null.
void conv(Stream &s, const Tensor &x, const Tensor &w, const Tensor *bias, const Tensor &y,
          const int64_t *strides, const int64_t *pads, const int64_t *dilations, int64_t group);

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

}  // namespace dsrt

#endif  // DSRT_KERNELS_H

// Elementwise kernels on the cuda backend: unary, binary, compare, where,
// cast. One thread per output element (grid-stride); float types compute in
// f32 and round once to the output type; broadcasting follows the same
// BroadcastPlan as the cpu kernels, each thread finding its operands'
// offsets from its output index; binary's operands of y's shape, scalars
// and broadcasts along leading axes go 16-byte vectors at a time without
// division (binary_fast_kernel).
#include "cuda/common.cuh"
#include "dsrt/math.h"
#include "elementwise_ops.h"

#include <algorithm>
#include <cstdint>
#include <limits>

namespace dsrt {

using namespace detail;

namespace {

//===----------------------------------------------------------------------===//
// unary
//===----------------------------------------------------------------------===//

__device__ inline float unary_f32(UnaryOp op, float v, float alpha) {
  switch (op) {
  case UnaryOp::Sqrt: return sqrtf(v);
  case UnaryOp::Reciprocal: return 1.0f / v;
  case UnaryOp::Exp: return expf(v);
  case UnaryOp::Log: return logf(v);
  case UnaryOp::Tanh: return tanhf(v);
  case UnaryOp::Erf: return erff(v);
  case UnaryOp::Sigmoid: return 1.0f / (1.0f + expf(-v));
  case UnaryOp::Neg: return -v;
  case UnaryOp::Relu: return v < 0.0f ? 0.0f : v;  // NaN stays NaN, as in PyTorch
  case UnaryOp::LeakyRelu: return v >= 0.0f ? v : alpha * v;
  case UnaryOp::Gelu: return 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
  case UnaryOp::GeluTanh: {
    // x * 0.5 * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 x^3)))
    const float inner = 0.7978845608028654f * (v + 0.044715f * v * v * v);
    return 0.5f * v * (1.0f + tanhf(inner));
  }
  // PyTorch's threshold: beyond 20, log(1 + exp(x)) rounds to x.
  case UnaryOp::Softplus: return v > 20.0f ? v : log1pf(expf(v));
  case UnaryOp::Elu: return v > 0.0f ? v : alpha * expm1f(v);
  case UnaryOp::Celu: return v > 0.0f ? v : alpha * expm1f(v * (1.0f / alpha));
  case UnaryOp::Sin: return sinf(v);
  case UnaryOp::Cos: return cosf(v);
  case UnaryOp::Floor: return floorf(v);
  case UnaryOp::Ceil: return ceilf(v);
  case UnaryOp::Round: return rintf(v);  // halves to even, as ONNX Round
  case UnaryOp::Not: break;
  }
  return v;
}

template <typename T>
__global__ void unary_float_kernel(UnaryOp op, const T *x, T *y, int64_t n, float alpha) {
  DSRT_GRID_STRIDE(i, n) y[i] = st<T>(unary_f32(op, ld(x[i]), alpha));
}

template <typename T> __global__ void unary_int_kernel(bool neg, const T *x, T *y, int64_t n) {
  DSRT_GRID_STRIDE(i, n) {
    const T v = x[i];
    y[i] = neg ? wrap_neg(v) : (v < 0 ? T(0) : v);
  }
}

__global__ void not_kernel(const uint8_t *x, uint8_t *y, int64_t n) {
  DSRT_GRID_STRIDE(i, n) y[i] = x[i] == 0;
}

}  // namespace

void unary(Stream &s, UnaryOp op, const Tensor &x, const Tensor &y, float alpha) {
  cudaStream_t stream = begin_kernel(s);
  const char *kernel = unary_name(op);
  check_data(kernel, "x", x);
  check_data(kernel, "y", y);
  check_same_dtype(kernel, "x", x, "y", y);
  check_shape(kernel, "y", y, x.shape);
  const int64_t n = x.numel();
  if (op == UnaryOp::Not) {
    check_dtype(kernel, "x", x, DType::Bool);
    if (n > 0)
      not_kernel<<<blocks_for(n), kThreads, 0, stream>>>(x.as<uint8_t>(), y.as<uint8_t>(), n);
    check_launch(kernel);
    return;
  }
  if (op == UnaryOp::Neg || op == UnaryOp::Relu) {
    dispatch_numeric(kernel, x.dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      if (n == 0)
        return;
      if constexpr (std::is_integral_v<T>)
        unary_int_kernel<T><<<blocks_for(n), kThreads, 0, stream>>>(op == UnaryOp::Neg,
                                                                     x.as<T>(), y.as<T>(), n);
      else
        unary_float_kernel<T><<<blocks_for(n), kThreads, 0, stream>>>(op, x.as<T>(), y.as<T>(),
                                                                       n, alpha);
    });
    check_launch(kernel);
    return;
  }
  dispatch_float(kernel, x.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (n > 0)
      unary_float_kernel<T><<<blocks_for(n), kThreads, 0, stream>>>(op, x.as<T>(), y.as<T>(), n,
                                                                     alpha);
  });
  check_launch(kernel);
}

//===----------------------------------------------------------------------===//
// binary, compare, where
//===----------------------------------------------------------------------===//

namespace {

// One element of a binary op: integers wrap (a division by zero is
// reported, with ib the divisor's offset in b, and gives 0); floats compute
// in f32 and round once.
template <typename T>
__device__ inline T binary_value(BinaryOp op, T x, T z, DeviceErrorWord *err, int32_t kid,
                                 int64_t ib) {
  if constexpr (std::is_integral_v<T>) {
    T r = 0;
    const bool divides = op == BinaryOp::Div || op == BinaryOp::Mod || op == BinaryOp::Fmod;
    if (divides && z == 0) {
      report_fault(err, DeviceFault::IntegerDivByZero, kid, ib, 0);
      return 0;
    }
    switch (op) {
    case BinaryOp::Add: r = wrap_add(x, z); break;
    case BinaryOp::Sub: r = wrap_sub(x, z); break;
    case BinaryOp::Mul: r = wrap_mul(x, z); break;
    case BinaryOp::Div: r = trunc_div(x, z); break;
    case BinaryOp::Mod: r = floor_rem(x, z); break;
    case BinaryOp::Fmod: r = trunc_rem(x, z); break;
    case BinaryOp::Pow: break;  // rejected on the host
    }
    return r;
  } else {
    const float u = ld(x), w = ld(z);
    float r = 0.0f;
    switch (op) {
    case BinaryOp::Add: r = u + w; break;
    case BinaryOp::Sub: r = u - w; break;
    case BinaryOp::Mul: r = u * w; break;
    case BinaryOp::Div: r = u / w; break;
    case BinaryOp::Pow: r = powf(u, w); break;
    case BinaryOp::Mod: r = floor_remf(u, w); break;
    case BinaryOp::Fmod: r = fmodf(u, w); break;
    }
    return st<T>(r);
  }
}

template <typename T>
__global__ void binary_kernel(BinaryOp op, BroadcastPlan plan, const T *a, const T *b, T *y,
                              int64_t n, DeviceErrorWord *err, int32_t kid) {
  DSRT_GRID_STRIDE(i, n) {
    const int64_t ia = plan_offset(plan, 0, i), ib = plan_offset(plan, 1, i);
    y[i] = binary_value(op, a[ia], b[ib], err, kid, ib);
  }
}

// The fast path of binary: each operand is y's shape (Flat: offset i), a
// scalar (offset 0) or broadcast along leading axes only (Row: offset
// i mod L, L the size of its trailing axes, the same L for both operands
// where both are rows). A thread takes V consecutive elements (a unit: one
// 16-byte vector where every pointer is aligned and L is a multiple of V,
// else V = 1), grid-stride over the n / V units, two at a time; a row operand's unit
// column is found with one division when the thread starts and then moved
// on by the stride modulo the row (one compare and subtract a unit), so the
// loop has no division. The n % V elements after the last whole vector
// (flat operands only) go one to a thread. The same binary_value per
// element as binary_kernel: the same bytes.
enum class Operand : int { Flat, Row, Scalar };

template <typename T, int V>
__device__ inline math::Vector<T, V> load_unit(const T *p, Operand kind, int64_t unit,
                                               int64_t column) {
  math::Vector<T, V> v;
  if (kind == Operand::Scalar) {
    for (int j = 0; j < V; ++j)
      v.lane[j] = p[0];
  } else {
    v = reinterpret_cast<const math::Vector<T, V> *>(p)[kind == Operand::Row ? column : unit];
  }
  return v;
}

template <typename T, int V>
__global__ void binary_fast_kernel(BinaryOp op, const T *a, const T *b, T *y, Operand ka,
                                   Operand kb, int64_t units, int64_t row_units, int64_t n,
                                   DeviceErrorWord *err, int32_t kid) {
  const int64_t first = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  // Where there is no row operand, row_units is 0 and the column unused.
  int64_t column = row_units > 0 ? first % row_units : 0;
  const int64_t column_step = row_units > 0 ? stride % row_units : 0;
  // Two units an iteration (u and u + stride), both loaded before either
  // is computed, so that each thread has two of each operand in flight.
  auto put = [&](int64_t u, int64_t col, const math::Vector<T, V> &x,
                 const math::Vector<T, V> &z) {
    const int64_t ib = (kb == Operand::Row ? col : u) * V;
    math::Vector<T, V> r;
    for (int j = 0; j < V; ++j)
      r.lane[j] = binary_value(op, x.lane[j], z.lane[j], err, kid,
                               kb == Operand::Scalar ? 0 : ib + j);
    reinterpret_cast<math::Vector<T, V> *>(y)[u] = r;
  };
  for (int64_t u0 = first; u0 < units; u0 += 2 * stride) {
    const int64_t u1 = u0 + stride;
    int64_t col1 = column + column_step;
    if (col1 >= row_units)
      col1 -= row_units;
    const math::Vector<T, V> x0 = load_unit<T, V>(a, ka, u0, column);
    const math::Vector<T, V> z0 = load_unit<T, V>(b, kb, u0, column);
    math::Vector<T, V> x1 = x0, z1 = z0;
    if (u1 < units) {
      x1 = load_unit<T, V>(a, ka, u1, col1);
      z1 = load_unit<T, V>(b, kb, u1, col1);
    }
    put(u0, column, x0, z0);
    if (u1 < units)
      put(u1, col1, x1, z1);
    column = col1 + column_step;
    if (column >= row_units)
      column -= row_units;
  }
  // The elements past the last whole vector (no row operand then).
  const int64_t e = units * V + first;
  if (e < n) {
    const int64_t ia = ka == Operand::Scalar ? 0 : e, ib = kb == Operand::Scalar ? 0 : e;
    y[e] = binary_value(op, a[ia], b[ib], err, kid, ib);
  }
}

template <typename T>
__global__ void compare_kernel(ComparePredicate pred, BroadcastPlan plan, const T *a, const T *b,
                               uint8_t *y, int64_t n) {
  DSRT_GRID_STRIDE(i, n) {
    const auto x = Dev<T>::load(a[plan_offset(plan, 0, i)]);
    const auto z = Dev<T>::load(b[plan_offset(plan, 1, i)]);
    bool r = false;
    switch (pred) {
    case ComparePredicate::Eq: r = x == z; break;
    case ComparePredicate::Lt: r = x < z; break;
    case ComparePredicate::Le: r = x <= z; break;
    case ComparePredicate::Gt: r = x > z; break;
    case ComparePredicate::Ge: r = x >= z; break;
    }
    y[i] = r;
  }
}

template <typename T>
__global__ void where_kernel(BroadcastPlan plan, const uint8_t *c, const T *a, const T *b, T *y,
                             int64_t n) {
  DSRT_GRID_STRIDE(i, n) {
    y[i] = c[plan_offset(plan, 0, i)] ? a[plan_offset(plan, 1, i)] : b[plan_offset(plan, 2, i)];
  }
}

}  // namespace

namespace {

// How operand k of a broadcast plan is read (binary_fast_kernel): Flat
// where its strides are y's, Scalar where all are 0, Row where the leading
// s > 0 axes have stride 0 and the rest y's (`row` its size); false
// otherwise.
bool classify_operand(const BroadcastPlan &plan, int k, Operand &kind, int64_t &row) {
  int64_t size = 1;
  int d = plan.rank - 1;
  for (; d >= 0 && plan.strides[k][d] == size; --d)
    size *= plan.dims[d];
  const int split = d + 1;  // axes [split, rank) contiguous
  for (; d >= 0; --d)
    if (plan.strides[k][d] != 0)
      return false;
  if (split == 0) {
    kind = Operand::Flat;
  } else if (split == plan.rank) {
    kind = Operand::Scalar;
  } else {
    kind = Operand::Row;
    row = size;
  }
  return true;
}

template <typename T>
bool launch_binary_fast(cudaStream_t stream, BinaryOp op, const BroadcastPlan &plan, const T *a,
                        const T *b, T *y, int64_t n, DeviceErrorWord *err, int32_t kid) {
  Operand ka, kb;
  int64_t row_a = 0, row_b = 0;
  if (!classify_operand(plan, 0, ka, row_a) || !classify_operand(plan, 1, kb, row_b))
    return false;
  if (row_a > 0 && row_b > 0 && row_a != row_b)
    return false;
  const int64_t row = std::max(row_a, row_b);  // 0: no row operand
  constexpr int V = 16 / sizeof(T);
  auto aligned = [](const void *p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  const bool vector = aligned(y) && (ka == Operand::Scalar || aligned(a)) &&
                      (kb == Operand::Scalar || aligned(b)) && row % V == 0;
  if (vector) {
    const int64_t units = n / V;
    binary_fast_kernel<T, V><<<stream_blocks(units), kThreads, 0, stream>>>(
        op, a, b, y, ka, kb, units, row / V, n, err, kid);
  } else {
    binary_fast_kernel<T, 1><<<stream_blocks(n), kThreads, 0, stream>>>(op, a, b, y, ka, kb, n,
                                                                         row, n, err, kid);
  }
  return true;
}

}  // namespace

void binary(Stream &s, BinaryOp op, const Tensor &a, const Tensor &b, const Tensor &y) {
  cudaStream_t stream = begin_kernel(s);
  const char *kernel = binary_name(op);
  BroadcastPlan plan = check_binary(kernel, a, b, y);
  const int64_t n = y.numel();
  dispatch_numeric(kernel, a.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_integral_v<T>)
      if (op == BinaryOp::Pow)
        fail(kernel, std::string("needs float operands, got ") + dtype_name(a.dtype));
    if (n == 0)
      return;
    if (launch_binary_fast<T>(stream, op, plan, a.as<T>(), b.as<T>(), y.as<T>(), n,
                              device_error_word(), kernel_id(kernel)))
      return;
    binary_kernel<T><<<blocks_for(n), kThreads, 0, stream>>>(
        op, plan, a.as<T>(), b.as<T>(), y.as<T>(), n, device_error_word(), kernel_id(kernel));
  });
  check_launch(kernel);
}

void compare(Stream &s, ComparePredicate pred, const Tensor &a, const Tensor &b, const Tensor &y) {
  cudaStream_t stream = begin_kernel(s);
  const char *kernel = compare_name(pred);
  BroadcastPlan plan = check_compare(kernel, a, b, y);
  const int64_t n = y.numel();
  if (n == 0)
    return;
  dispatch_all(kernel, a.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    compare_kernel<T><<<blocks_for(n), kThreads, 0, stream>>>(pred, plan, a.as<T>(), b.as<T>(),
                                                               y.as<uint8_t>(), n);
  });
  check_launch(kernel);
}

void where(Stream &s, const Tensor &cond, const Tensor &a, const Tensor &b, const Tensor &y) {
  cudaStream_t stream = begin_kernel(s);
  const char *kernel = "where";
  BroadcastPlan plan = check_where(kernel, cond, a, b, y);
  const int64_t n = y.numel();
  if (n == 0)
    return;
  // Selection moves bits, so only the element size matters.
  dispatch_bytes(dtype_size(a.dtype), [&](auto tag) {
    using T = typename decltype(tag)::type;
    where_kernel<T><<<blocks_for(n), kThreads, 0, stream>>>(plan, cond.as<uint8_t>(), a.as<T>(),
                                                            b.as<T>(), y.as<T>(), n);
  });
  check_launch(kernel);
}

//===----------------------------------------------------------------------===//
// cast
//===----------------------------------------------------------------------===//

namespace {

// Float to integer truncates toward zero; NaN becomes 0 and values outside
// the integer's range saturate (math.h's float_to_int, on the device).
template <typename I> __device__ I saturate_to_int(float v) {
  const float lo = static_cast<float>(std::numeric_limits<I>::min());
  const float hi = static_cast<float>(std::numeric_limits<I>::max());
  if (isnan(v))
    return 0;
  return v <= lo ? std::numeric_limits<I>::min()
                 : v >= hi ? std::numeric_limits<I>::max() : static_cast<I>(v);
}

template <typename From, typename To> __device__ To convert(From v) {
  constexpr bool from_float = std::is_same_v<typename Dev<From>::compute, float>;
  constexpr bool to_float_type = std::is_same_v<typename Dev<To>::compute, float>;
  if constexpr (std::is_same_v<From, uint8_t>) {  // bool: any non-zero byte is true
    return convert<int32_t, To>(v != 0 ? 1 : 0);
  } else if constexpr (std::is_same_v<To, uint8_t>) {  // to bool: != 0 (NaN is true)
    if constexpr (from_float)
      return ld(v) != 0.0f;
    else
      return v != 0;
  } else if constexpr (from_float && to_float_type) {
    return st<To>(ld(v));
  } else if constexpr (from_float) {
    return saturate_to_int<To>(ld(v));
  } else if constexpr (to_float_type) {
    return st<To>(static_cast<float>(v));
  } else {
    return static_cast<To>(v);  // integer narrowing wraps
  }
}

template <typename From, typename To>
__global__ void cast_kernel(const From *x, To *y, int64_t n) {
  DSRT_GRID_STRIDE(i, n) y[i] = convert<From, To>(x[i]);
}

}  // namespace

void cast(Stream &s, const Tensor &x, const Tensor &y) {
  cudaStream_t stream = begin_kernel(s);
  const char *kernel = "cast";
  check_data(kernel, "x", x);
  check_data(kernel, "y", y);
  check_shape(kernel, "y", y, x.shape);
  const int64_t n = x.numel();
  if (n == 0)
    return;
  if (x.dtype == y.dtype) {
    if (x.data != y.data)
      check_cuda(cudaMemcpyAsync(y.data, x.data, x.nbytes(), cudaMemcpyDefault, stream), kernel,
                 "cudaMemcpyAsync");
    return;
  }
  dispatch_all(kernel, x.dtype, [&](auto from_tag) {
    using From = typename decltype(from_tag)::type;
    dispatch_all(kernel, y.dtype, [&](auto to_tag) {
      using To = typename decltype(to_tag)::type;
      cast_kernel<From, To><<<blocks_for(n), kThreads, 0, stream>>>(x.as<From>(), y.as<To>(), n);
    });
  });
  check_launch(kernel);
}

}  // namespace dsrt

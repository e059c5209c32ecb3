// Internals of the cpu backend (on kernel_common.h): element conversions,
// argument checks, thread counts and parallel loops, vectorizable math and
// broadcasting plans. Not installed.
#ifndef DSRT_SRC_INTERNAL_H
#define DSRT_SRC_INTERNAL_H

#include "dsrt/kernels.h"
#include "dsrt/math.h"
#include "kernel_common.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

namespace dsrt {
namespace detail {

using namespace ::dsrt::math;

//===----------------------------------------------------------------------===//
// Element traits: what a storage type computes in
//===----------------------------------------------------------------------===//

template <typename T> struct Elem {
  using compute = T;  // integers compute in their own type
  static T load(T v) { return v; }
  static T store(T v) { return v; }
};
template <> struct Elem<float> {
  using compute = float;
  static float load(float v) { return v; }
  static float store(float v) { return v; }
};
template <> struct Elem<half_t> {
  using compute = float;
  static float load(half_t v) { return half_to_float(v.bits); }
  static half_t store(float v) { return half_t{float_to_half(v)}; }
};
template <> struct Elem<bfloat_t> {
  using compute = float;
  static float load(bfloat_t v) { return bfloat_to_float(v.bits); }
  static bfloat_t store(float v) { return bfloat_t{float_to_bfloat(v)}; }
};

template <typename T> inline float to_float(T v) { return static_cast<float>(Elem<T>::load(v)); }
template <typename T> inline T from_float(float v) {
  if constexpr (std::is_same_v<T, half_t> || std::is_same_v<T, bfloat_t> ||
                std::is_same_v<T, float>)
    return Elem<T>::store(v);
  else
    return static_cast<T>(v);
}

// Index of a label-like integer tensor element (i64 or i32 indices).
inline int64_t index_at(const Tensor &t, int64_t i) {
  return t.dtype == DType::I64 ? t.as<int64_t>()[i] : t.as<int32_t>()[i];
}

// Element 0 of a float tensor (a scalar such as lr) as f32.
float float_value(const char *kernel, const char *name, const Tensor &t);
// f32 values written into a float tensor, rounding to its type.
void store_floats(const char *kernel, const char *name, const Tensor &t, const float *values);

//===----------------------------------------------------------------------===//
// Threads
//===----------------------------------------------------------------------===//

// Every kernel starts here: it runs on the calling thread, so work still
// pending on its stream (a collective, a file read) must complete first for
// the kernel to run after it, as on an in-order device stream.
inline void begin_kernel(Stream &s) { s.synchronize(); }

inline int num_threads(const Stream &s) {
  return s.threads() > 0 ? s.threads() : omp_get_max_threads();
}

// Elements a thread should at least get before a loop is split: below this
// the fork/join costs more than it saves.
constexpr int64_t kGrainElementwise = 1 << 15;

// Runs f(begin, end) over [0, n) split into contiguous ranges, one per
// thread, using at most num_threads(s) threads and giving each at least
// `grain` units of work. f must not throw: an exception cannot leave an
// OpenMP region.
template <typename F> void parallel_for(const Stream &s, int64_t n, int64_t grain, F &&f) {
  if (n <= 0)
    return;
  int64_t threads = std::min<int64_t>(num_threads(s), n / std::max<int64_t>(grain, 1));
  if (threads <= 1 || omp_in_parallel()) {
    f(int64_t(0), n);
    return;
  }
#pragma omp parallel num_threads(static_cast<int>(threads))
  {
    int64_t t = omp_get_thread_num(), nt = omp_get_num_threads();
    int64_t begin = n * t / nt, end = n * (t + 1) / nt;
    if (begin < end)
      f(begin, end);
  }
}

// OpenBLAS (pthread build) keeps its own thread pool; dsrt never calls BLAS
// inside an OpenMP region, and sizes the pool to the stream's threads.
void set_blas_threads(const Stream &s);

// Row kernels on f16/bf16 convert rows to f32 in lanes of their workspace
// (workspace_shapes.h: kRowLanes, row_lanes).

// Runs f(begin, end, buffer) over the rows [0, rows) in parallel: with
// `lanes` null (f32 rows, read in place) as parallel_for, buffer null; else
// lane by lane, buffer the lane's `lane_floats` floats of `lanes`.
template <typename F>
void for_each_row_range(const Stream &s, int64_t rows, int64_t grain, float *lanes,
                        int64_t lane_floats, F &&f) {
  if (!lanes) {
    parallel_for(s, rows, grain, [&](int64_t begin, int64_t end) { f(begin, end, nullptr); });
    return;
  }
  const int64_t count = row_lanes(rows);
  if (count <= 0)
    return;
  const int64_t per_lane = (rows + count - 1) / count;
  parallel_for(s, count, std::max<int64_t>(1, grain / per_lane), [&](int64_t begin, int64_t end) {
    for (int64_t lane = begin; lane < end; ++lane)
      f(lane * rows / count, (lane + 1) * rows / count, lanes + lane * lane_floats);
  });
}

// Whole-buffer conversions between a float storage type and f32, in parallel
// (the f16/bf16 paths of matmul, gemm and conv).
template <typename T> void to_f32(const Stream &s, const T *in, float *out, int64_t n) {
  parallel_for(s, n, kGrainElementwise, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i)
      out[i] = Elem<T>::load(in[i]);
  });
}
template <typename T> void from_f32(const Stream &s, const float *in, T *out, int64_t n) {
  parallel_for(s, n, kGrainElementwise, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i)
      out[i] = Elem<T>::store(in[i]);
  });
}


// Walks the output elements [begin, end) of a plan row by row: calls
// row(out_offset, offsets[k], length) for runs along the innermost axis, with
// the operand offsets at the start of the run. Offsets are tracked
// incrementally; the only division happens once at `begin`.
template <typename Row>
void for_each_row(const BroadcastPlan &plan, int64_t begin, int64_t end, Row &&row) {
  const int r = plan.rank;
  const int64_t inner = plan.dims[r - 1];
  int64_t index[kMaxRank] = {};
  int64_t offset[3] = {0, 0, 0};
  // Decompose `begin` into an index once.
  int64_t rest = begin;
  for (int d = r - 1; d >= 0; --d) {
    index[d] = rest % plan.dims[d];
    rest /= plan.dims[d];
    for (int k = 0; k < plan.num_operands; ++k)
      offset[k] += index[d] * plan.strides[k][d];
  }
  int64_t pos = begin;
  while (pos < end) {
    int64_t length = std::min(inner - index[r - 1], end - pos);
    row(pos, offset, length);
    pos += length;
    // Advance the index by `length` along the innermost axis, carrying.
    for (int k = 0; k < plan.num_operands; ++k)
      offset[k] += length * plan.strides[k][r - 1];
    index[r - 1] += length;
    for (int d = r - 1; d > 0 && index[d] == plan.dims[d]; --d) {
      for (int k = 0; k < plan.num_operands; ++k)
        offset[k] += plan.strides[k][d - 1] - plan.dims[d] * plan.strides[k][d];
      index[d] = 0;
      ++index[d - 1];
    }
  }
}

}  // namespace detail
}  // namespace dsrt

#endif  // DSRT_SRC_INTERNAL_H

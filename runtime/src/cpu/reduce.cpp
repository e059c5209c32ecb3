// reduce: sum, mean, max and product over a sorted set of axes.
//
// Axes are collapsed into alternating kept / reduced groups, and each reduced
// group is one [outer, reduced, inner] pass, last group first. Float sums
// (and products) accumulate in f64 (one rounding at the end, independent of the thread
// count); integer sums wrap; max propagates NaN like PyTorch's amax.
#include "internal.h"
#include "workspace_shapes.h"

#include <limits>
#include <type_traits>
#include <utility>

namespace dsrt {

using namespace detail;

namespace {


template <typename A> struct SumOp {
  static A init() { return A(0); }
  static A apply(A acc, A v) { return acc + v; }
};
template <typename A> struct ProdOp {
  static A init() { return A(1); }
  static A apply(A acc, A v) { return acc * v; }
};
template <typename A> struct MaxOp {
  static A init() {
    if constexpr (std::is_floating_point_v<A>)
      return -std::numeric_limits<A>::infinity();
    else
      return std::numeric_limits<A>::min();
  }
  static A apply(A acc, A v) {
    if constexpr (std::is_floating_point_v<A>)
      return (v > acc || v != v) ? v : acc;
    else
      return v > acc ? v : acc;
  }
};

// dst[o, i] = reduce_r src[o, r, i], converting src elements with `load`.
template <typename Op, typename A, typename S, typename Load>
void reduce_pass(const Stream &s, const S *src, A *dst, int64_t outer, int64_t r, int64_t inner,
                 Load load) {
  if (inner == 1) {
    parallel_for(s, outer, std::max<int64_t>(1, kGrainElementwise / std::max<int64_t>(r, 1)),
                 [&](int64_t begin, int64_t end) {
                   for (int64_t o = begin; o < end; ++o) {
                     const S *row = src + o * r;
                     A acc = Op::init();
                     for (int64_t k = 0; k < r; ++k)
                       acc = Op::apply(acc, load(row[k]));
                     dst[o] = acc;
                   }
                 });
    return;
  }
  // Strided reduction: accumulate whole rows of `inner`, in chunks so a
  // few threads can share a small `outer`.
  constexpr int64_t kChunk = 1024;
  const int64_t chunks = (inner + kChunk - 1) / kChunk;
  parallel_for(s, outer * chunks,
               std::max<int64_t>(1, kGrainElementwise / std::max<int64_t>(r * kChunk, 1)),
               [&](int64_t begin, int64_t end) {
                 for (int64_t t = begin; t < end; ++t) {
                   int64_t o = t / chunks, i0 = (t % chunks) * kChunk;
                   int64_t w = std::min(kChunk, inner - i0);
                   A *out = dst + o * inner + i0;
                   for (int64_t i = 0; i < w; ++i)
                     out[i] = Op::init();
                   for (int64_t k = 0; k < r; ++k) {
                     const S *row = src + (o * r + k) * inner + i0;
                     for (int64_t i = 0; i < w; ++i)
                       out[i] = Op::apply(out[i], load(row[i]));
                   }
                 }
               });
}

// Y is T, or f32 for a sum of 16-bit x (check_reduce_dtypes).
template <typename T, typename A, typename Op, typename Y = T>
void reduce_typed(const Stream &s, const ReduceGroups &groups, const T *x, Y *y,
                  int64_t out_count, int64_t count, bool mean, A *current, A *next) {
  // Passes from the last reduced group to the first; `dims` tracks the shape
  // of the intermediate result, which alternates between the workspace's two
  // buffers (reduce_intermediate_sizes).
  ReduceGroups dims = groups;
  bool from_input = true;
  for (int g = dims.count - 1; g >= 0; --g) {
    if (!dims.group[g].reduced)
      continue;
    int64_t outer = 1, inner = 1;
    for (int d = 0; d < g; ++d)
      outer *= dims.group[d].size;
    for (int d = g + 1; d < dims.count; ++d)
      inner *= dims.group[d].size;
    if (from_input) {
      reduce_pass<Op, A>(s, x, current, outer, dims.group[g].size, inner,
                         [](T v) { return static_cast<A>(Elem<T>::load(v)); });
    } else {
      reduce_pass<Op, A>(s, current, next, outer, dims.group[g].size, inner,
                         [](A v) { return v; });
      std::swap(current, next);
    }
    from_input = false;
    dims.remove(g);
  }
  if (from_input) {  // every reduced axis has size 1: the values pass through
    for (int64_t i = 0; i < out_count; ++i)
      current[i] = static_cast<A>(Elem<T>::load(x[i]));
  }
  for (int64_t i = 0; i < out_count; ++i) {
    A v = current[i];
    if constexpr (std::is_integral_v<T>) {
      int64_t value = static_cast<int64_t>(v);
      if (mean)
        value /= count;  // truncates toward zero
      y[i] = static_cast<Y>(value);
    } else {
      double value = static_cast<double>(v);
      if (mean)
        value /= static_cast<double>(count);
      y[i] = from_float<Y>(static_cast<float>(value));
    }
  }
}

}  // namespace

void reduce(Stream &s, ReduceOp op, const Tensor &x, const Tensor &y, const int64_t *axes,
            int num_axes, const Workspace &ws) {
  begin_kernel(s);
  const char *kernel = reduce_name(op);
  check_data(kernel, "x", x);
  check_data(kernel, "y", y);
  check_reduce_dtypes(kernel, op, x, y);
  bool reduced[kMaxRank] = {};
  const int64_t count = check_reduce(kernel, x, y, axes, num_axes, reduced);
  const int64_t out_count = y.numel();
  if (out_count == 0)
    return;
  if (count == 0) {
    if (op == ReduceOp::Max || (op == ReduceOp::Mean && !is_float(x.dtype)))
      fail(kernel, "reduces over an empty axis of " + x.shape.str());
  }
  const ReduceGroups groups = collapse_reduce_groups(x.shape, reduced);
  int64_t first = 0, second = 0;
  reduce_intermediate_sizes(groups, out_count, first, second);
  const int64_t acc = reduce_accumulator_bytes(op, x.dtype);
  check_workspace(kernel, ws, (first + second) * acc);
  char *base = static_cast<char *>(ws.data);
  auto buffers = [&](auto *type_tag) {
    using A = std::remove_pointer_t<decltype(type_tag)>;
    return std::pair<A *, A *>(reinterpret_cast<A *>(base),
                               reinterpret_cast<A *>(base + first * acc));
  };
  const bool mean = op == ReduceOp::Mean;
  dispatch_numeric(kernel, x.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T *px = x.as<T>();
    if constexpr (!std::is_integral_v<T> && !std::is_same_v<T, float>) {
      if (y.dtype == DType::F32) {  // a sum of 16-bit x written in f32
        auto [a, b] = buffers(static_cast<double *>(nullptr));
        reduce_typed<T, double, SumOp<double>, float>(s, groups, px, y.as<float>(), out_count,
                                                      count, false, a, b);
        return;
      }
    }
    T *py = y.as<T>();
    if constexpr (std::is_integral_v<T>) {
      if (op == ReduceOp::Max) {
        auto [a, b] = buffers(static_cast<int64_t *>(nullptr));
        reduce_typed<T, int64_t, MaxOp<int64_t>>(s, groups, px, py, out_count, count, false, a, b);
      } else {
        auto [a, b] = buffers(static_cast<uint64_t *>(nullptr));
        if (op == ReduceOp::Prod)  // wraps, like integer sums
          reduce_typed<T, uint64_t, ProdOp<uint64_t>>(s, groups, px, py, out_count, count, false,
                                                      a, b);
        else
          reduce_typed<T, uint64_t, SumOp<uint64_t>>(s, groups, px, py, out_count, count, mean,
                                                     a, b);
      }
    } else {
      if (op == ReduceOp::Max) {
        auto [a, b] = buffers(static_cast<float *>(nullptr));
        reduce_typed<T, float, MaxOp<float>>(s, groups, px, py, out_count, count, false, a, b);
      } else {
        auto [a, b] = buffers(static_cast<double *>(nullptr));
        if (op == ReduceOp::Prod)
          reduce_typed<T, double, ProdOp<double>>(s, groups, px, py, out_count, count, false, a,
                                                  b);
        else
          reduce_typed<T, double, SumOp<double>>(s, groups, px, py, out_count, count, mean, a, b);
      }
    }
  });
}

}  // namespace dsrt

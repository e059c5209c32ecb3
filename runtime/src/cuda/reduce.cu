// reduce and sum_of_squares on the cuda backend.
//
// reduce: one thread block per output element; its threads stride over the
// reduced elements and combine in a fixed tree, so results do not depend on
// scheduling. Over leading axes with the kept ones innermost (x a matrix
// [rows, columns] reduced over its rows, as the bias gradients' sums), a
// block per tile of consecutive columns, so that a warp's loads coalesce,
// combining each column in the same order as the block per output does
// (the same bytes), for every op; a sum over at most 256 such rows in a
// thread's registers and its warp's shuffles (the same bytes again). Float
// sums and products accumulate in f64 (one rounding at the end), max
// propagates NaN like PyTorch's amax, integer sums and products wrap.
// sum_of_squares: a block per chunk of 65536 elements of the tensors'
// concatenation (chunk_table.h, as adamw_multi), each summed in f64; the
// last block of a launch adds the blocks' sums in a fixed tree and the
// launches' totals in order.
#include "cuda/chunk_table.h"
#include "cuda/common.cuh"
#include "dsrt/math.h"
#include "workspace_shapes.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

namespace dsrt {

using namespace detail;

namespace {

constexpr int kReduceThreads = 256;

// x's axes split into the kept ones (in order: an output index decomposes
// over them) and the reduced ones, each with its stride in x.
struct ReduceAxes {
  int kept = 0, reduced = 0;
  int64_t kept_dims[kMaxRank], kept_strides[kMaxRank];
  int64_t red_dims[kMaxRank], red_strides[kMaxRank];
};

__device__ inline int64_t decompose(int64_t i, int rank, const int64_t *dims,
                                    const int64_t *strides) {
  int64_t off = 0;
  for (int d = rank - 1; d >= 0; --d) {
    const int64_t q = i / dims[d];
    off += (i - q * dims[d]) * strides[d];
    i = q;
  }
  return off;
}

enum class Combine { Sum, Prod, Max };

template <typename A, Combine C> __device__ inline A combine_init() {
  if constexpr (C == Combine::Sum)
    return A(0);
  else if constexpr (C == Combine::Prod)
    return A(1);
  else if constexpr (std::is_floating_point_v<A>)
    return -std::numeric_limits<A>::infinity();
  else
    return std::numeric_limits<A>::min();
}

template <typename A, Combine C> __device__ inline A combine(A acc, A v) {
  if constexpr (C == Combine::Sum)
    return acc + v;
  else if constexpr (C == Combine::Prod)
    return acc * v;
  else if constexpr (std::is_floating_point_v<A>)
    return (v > acc || v != v) ? v : acc;
  else
    return v > acc ? v : acc;
}

// The final value of an output from its accumulator: integer means
// truncate, float results are rounded once to Y.
template <typename T, typename A, typename Y>
__device__ inline void store_result(Y *y, int64_t o, A v, int64_t count, bool mean) {
  if constexpr (std::is_integral_v<T>) {
    int64_t value = static_cast<int64_t>(v);
    if (mean)
      value /= count;  // truncates toward zero
    y[o] = static_cast<Y>(value);
  } else {
    double value = static_cast<double>(v);
    if (mean)
      value /= static_cast<double>(count);
    y[o] = st<Y>(static_cast<float>(value));
  }
}

// Y is T, or f32 for a sum of 16-bit x (check_reduce_dtypes).
template <typename T, typename A, Combine C, typename Y = T>
__global__ void reduce_kernel(const T *x, Y *y, ReduceAxes ax, int64_t outputs, int64_t count,
                              bool mean) {
  __shared__ A partial[kReduceThreads];
  for (int64_t o = blockIdx.x; o < outputs; o += gridDim.x) {
    const int64_t base = decompose(o, ax.kept, ax.kept_dims, ax.kept_strides);
    A acc = combine_init<A, C>();
    for (int64_t k = threadIdx.x; k < count; k += blockDim.x)
      acc = combine<A, C>(acc, static_cast<A>(Dev<T>::load(
                                   x[base + decompose(k, ax.reduced, ax.red_dims,
                                                      ax.red_strides)])));
    partial[threadIdx.x] = acc;
    __syncthreads();
    for (int half = blockDim.x / 2; half > 0; half /= 2) {
      if (threadIdx.x < half)
        partial[threadIdx.x] = combine<A, C>(partial[threadIdx.x], partial[threadIdx.x + half]);
      __syncthreads();
    }
    if (threadIdx.x == 0)
      store_result<T, A, Y>(y, o, partial[0], count, mean);
    __syncthreads();
  }
}

// The column case: x is [rows, columns] (contiguous), y[c] combines column
// c. A block covers kColumnLanes * V consecutive columns, V per lane
// (threadIdx.x) read in one access (two 16-bit elements: 4 bytes, as one
// f32), so a warp reads kColumnLanes * 4 = 32 consecutive bytes of each of
// 4 rows. Each column is combined in exactly the order of reduce_kernel
// with kReduceThreads threads: slice k (< kReduceThreads) takes rows k,
// k + kReduceThreads, ..., and a tree halves the slices. Thread y
// (kColumnSlices of them) holds slices y and y + kColumnSlices, whose sum is
// the tree's first level; the rest of the tree runs in shared memory.
//
// Split into P parts (reduce_column_parts: P > 1 where the tiles alone
// would leave SMs idle), block b of a tile takes the slices k = b mod P, its
// kColumnSlices / P threads y holding slices b + P y and b + P y +
// kColumnSlices: its own tree (halves kColumnSlices / (2 P), ..., 1) runs the
// 256-slice tree's levels down to half P for the slices = b mod P, leaving
// the tree's value of slice b, which it writes to row b of the P x columns
// workspace; reduce_column_parts_kernel then runs the last log2 P levels
// (halves P / 2, ..., 1) per column. The same combines in the same order,
// so the same bytes.
constexpr int kColumnLanes = static_cast<int>(kColumnTileLanes), kColumnSlices = kReduceThreads / 2,
              kColumnUnroll = 4;

template <typename T> constexpr int column_vector() { return sizeof(T) == 2 ? 2 : 1; }

// V consecutive elements of a row from `row` on (`left` of them in the
// row): one access when `vector` (x's columns a multiple of V, aligned),
// else one at a time, zeros past the row's end (never stored).
template <typename T, int V>
__device__ inline math::Vector<T, V> load_columns(const T *row, int64_t left, bool vector) {
  if (vector)
    return *reinterpret_cast<const math::Vector<T, V> *>(row);
  math::Vector<T, V> pack = {};
  for (int j = 0; j < V && j < left; ++j)
    pack.lane[j] = row[j];
  return pack;
}

// With parts > 1, `part` is the P x columns workspace (else unused).
template <typename T, typename A, Combine C, typename Y = T>
__global__ void __launch_bounds__(kColumnLanes * kColumnSlices)
    reduce_columns_kernel(const T *x, Y *y, A *part, int64_t rows, int64_t columns, int parts,
                          bool vector, bool mean) {
  constexpr int V = column_vector<T>(), kTile = kColumnLanes * V;
  __shared__ A partial[kColumnSlices][kTile];
  const int lane = threadIdx.x, t = threadIdx.y;
  const int64_t tiles = (columns + kTile - 1) / kTile;
  for (int64_t work = blockIdx.x; work < tiles * parts; work += gridDim.x) {
    const int64_t tile = work / parts;
    const int b = static_cast<int>(work - tile * parts), slice = b + parts * t;
    const int64_t c0 = tile * kTile + static_cast<int64_t>(lane) * V;
    A acc[2][V];
    for (int h = 0; h < 2; ++h)
      for (int j = 0; j < V; ++j)
        acc[h][j] = combine_init<A, C>();
    if (c0 < columns) {
      // kColumnUnroll rows of each slice at a time: their loads first, so
      // that several are in flight, then the combines in row order.
      for (int64_t r0 = slice; r0 < rows; r0 += kColumnUnroll * kReduceThreads) {
        math::Vector<T, V> pack[kColumnUnroll][2] = {};
        for (int u = 0; u < kColumnUnroll; ++u)
          for (int h = 0; h < 2; ++h) {
            const int64_t r = r0 + u * kReduceThreads + h * kColumnSlices;
            if (r < rows)
              pack[u][h] = load_columns<T, V>(x + r * columns + c0, columns - c0, vector);
          }
        for (int h = 0; h < 2; ++h)
          for (int u = 0; u < kColumnUnroll; ++u)
            if (r0 + u * kReduceThreads + h * kColumnSlices < rows)
              for (int j = 0; j < V; ++j)
                acc[h][j] =
                    combine<A, C>(acc[h][j], static_cast<A>(Dev<T>::load(pack[u][h].lane[j])));
      }
    }
    for (int j = 0; j < V; ++j)
      partial[t][lane * V + j] = combine<A, C>(acc[0][j], acc[1][j]);
    __syncthreads();
    for (int half = blockDim.y / 2; half > 0; half /= 2) {
      if (t < half)
        for (int j = 0; j < V; ++j)
          partial[t][lane * V + j] =
              combine<A, C>(partial[t][lane * V + j], partial[t + half][lane * V + j]);
      __syncthreads();
    }
    if (t == 0)
      for (int j = 0; j < V && c0 + j < columns; ++j) {
        if (parts == 1)
          store_result<T, A, Y>(y, c0 + j, partial[0][lane * V + j], rows, mean);
        else
          part[b * columns + c0 + j] = partial[0][lane * V + j];
      }
    __syncthreads();
  }
}

// The last log2 P levels of each column's tree over the parts' values
// (reduce_columns_kernel with parts > 1), then the result.
template <typename T, typename A, Combine C, typename Y = T>
__global__ void reduce_column_parts_kernel(const A *part, Y *y, int64_t rows, int64_t columns,
                                           int parts, bool mean) {
  DSRT_GRID_STRIDE(c, columns) {
    A value[kMaxColumnParts];
    for (int b = 0; b < parts; ++b)
      value[b] = part[b * columns + c];
    for (int half = parts / 2; half > 0; half /= 2)
      for (int b = 0; b < half; ++b)
        value[b] = combine<A, C>(value[b], value[b + half]);
    store_result<T, A, Y>(y, c, value[0], rows, mean);
  }
}

// The column case's sums over at most kFewRows rows (GPT-2's position
// embedding gradient: [64, 1024·768] summed over its 64 rows), in registers
// instead of a block's shared tree. With R rows and P the power of two at
// or above R, slice k of the block per output holds row k alone (k < R) or
// nothing (the sum's 0, +0.0: no slice is ever -0.0, so adding it changes
// no value), and the tree's levels above P/2 only add such empty slices:
// the result is the halving tree over P leaves (level h: leaf k += leaf
// k + h, h = P/2, ..., 1). A thread of a group of G = max(1, P/32) lanes
// takes the leaves k = g + G m (m < 32, g its place in the group; empty
// past R) of V columns: its 32 loads in flight at once, it runs the tree's
// levels h >= G on them in registers (a depth-first recursion over m, 6
// partial sums live), and warp shuffles run the levels h < G across the
// group (lane g < h adds lane g + h's value to its own, in that order).
// The same additions in the same order as reduce_kernel's: the same bytes.
constexpr int64_t kFewRows = 256;
constexpr int kFewLeaves = 32;

// Node (M, Q) of a thread's tree over its kFewLeaves leaves: leaves m = M
// mod Q combined, as the halving tree has them once its half reaches Q. A
// leaf is its row's value added to the sum's 0 (`live`: bit m set where
// leaf m has a row), or 0.
template <int Q, int M, typename T, typename A, int V>
__device__ inline void few_rows_node(const math::Vector<T, V> (&pack)[kFewLeaves], uint32_t live,
                                     A (&out)[V]) {
  if constexpr (Q == kFewLeaves) {
    for (int j = 0; j < V; ++j)
      out[j] = (live >> M) & 1u ? combine<A, Combine::Sum>(combine_init<A, Combine::Sum>(),
                                                          static_cast<A>(Dev<T>::load(pack[M].lane[j])))
                                : combine_init<A, Combine::Sum>();
  } else {
    A left[V], right[V];
    few_rows_node<2 * Q, M>(pack, live, left);
    few_rows_node<2 * Q, M + Q>(pack, live, right);
    for (int j = 0; j < V; ++j)
      out[j] = combine<A, Combine::Sum>(left[j], right[j]);
  }
}

template <typename T, typename A, typename Y>
__global__ void __launch_bounds__(kReduceThreads)
    reduce_few_rows_kernel(const T *x, Y *y, int64_t rows, int64_t columns, int group,
                           bool vector, bool mean) {
  constexpr int V = column_vector<T>();
  const int lanes = 32 / group;  // column groups a warp
  const int lane = threadIdx.x & 31, g = lane / lanes;
  const int64_t column_group = (blockIdx.x * static_cast<int64_t>(blockDim.x / 32) +
                                (threadIdx.x >> 5)) * lanes + lane % lanes;
  const int64_t c0 = column_group * V;
  const bool active = c0 < columns;  // others still take part in the shuffles
  math::Vector<T, V> pack[kFewLeaves];
  uint32_t live = 0;
  for (int m = 0; m < kFewLeaves; ++m) {
    const int64_t r = g + static_cast<int64_t>(group) * m;
    pack[m] = math::Vector<T, V>{};
    if (active && r < rows) {
      pack[m] = load_columns<T, V>(x + r * columns + c0, columns - c0, vector);
      live |= 1u << m;
    }
  }
  A acc[V];
  few_rows_node<1, 0>(pack, live, acc);
  for (int h = group / 2; h > 0; h /= 2)
    for (int j = 0; j < V; ++j)
      acc[j] = combine<A, Combine::Sum>(acc[j], __shfl_xor_sync(0xffffffffu, acc[j], h * lanes));
  if (g == 0 && active)
    for (int j = 0; j < V && c0 + j < columns; ++j)
      store_result<T, A, Y>(y, c0 + j, acc[j], rows, mean);
}

template <typename T, typename A, Combine C, typename Y = T>
void launch_reduce(const char *kernel, cudaStream_t stream, const Tensor &x, const Tensor &y,
                   const ReduceAxes &ax, const bool *reduced, int64_t count, bool mean,
                   const Workspace &ws) {
  const int64_t outputs = y.numel();
  int64_t rows = 0, columns = 0;
  if (reduce_column_case(collapse_reduce_groups(x.shape, reduced), rows, columns)) {
    constexpr int V = column_vector<T>();
    const bool vector =
        columns % V == 0 && reinterpret_cast<uintptr_t>(x.data) % (sizeof(T) * V) == 0;
    const int64_t tiles = (columns + kColumnLanes * V - 1) / (kColumnLanes * V);
    if constexpr (C == Combine::Sum) {
      if (rows <= kFewRows) {
        int group = 1;
        while (group * kFewLeaves < rows)
          group *= 2;
        const int64_t threads = (columns + V - 1) / V * group;
        reduce_few_rows_kernel<T, A, Y>
            <<<static_cast<unsigned>((threads + kReduceThreads - 1) / kReduceThreads),
               kReduceThreads, 0, stream>>>(x.as<T>(), y.as<Y>(), rows, columns, group, vector,
                                            mean);
        return;
      }
    }
    const int parts = static_cast<int>(reduce_column_parts(x.dtype, rows, columns));
    // The parts' values: the start of the plan's workspace (reduce_workspace_bytes).
    if (parts > 1)
      check_workspace(kernel, ws, parts * columns * static_cast<int64_t>(sizeof(A)));
    A *part = parts > 1 ? static_cast<A *>(ws.data) : nullptr;
    reduce_columns_kernel<T, A, C, Y>
        <<<static_cast<unsigned>(std::min<int64_t>(tiles * parts, 65535)),
           dim3(kColumnLanes, kColumnSlices / parts), 0, stream>>>(
            x.as<T>(), y.as<Y>(), part, rows, columns, parts, vector, mean);
    if (parts > 1)
      reduce_column_parts_kernel<T, A, C, Y><<<blocks_for(columns), kThreads, 0, stream>>>(
          part, y.as<Y>(), rows, columns, parts, mean);
    return;
  }
  reduce_kernel<T, A, C, Y>
      <<<static_cast<unsigned>(std::min<int64_t>(outputs, 65535 * 32)), kReduceThreads, 0,
         stream>>>(x.as<T>(), y.as<Y>(), ax, outputs, count, mean);
}

}  // namespace

// Each output is reduced by one block straight from x; of the workspace the
// plan gives (reduce_workspace_bytes) only the column case split into parts
// uses any.
void reduce(Stream &s, ReduceOp op, const Tensor &x, const Tensor &y, const int64_t *axes,
            int num_axes, const Workspace &ws) {
  cudaStream_t stream = begin_kernel(s);
  const char *kernel = reduce_name(op);
  check_data(kernel, "x", x);
  check_data(kernel, "y", y);
  check_reduce_dtypes(kernel, op, x, y);
  bool reduced[kMaxRank] = {};
  const int64_t count = check_reduce(kernel, x, y, axes, num_axes, reduced);
  if (y.numel() == 0)
    return;
  if (count == 0 && (op == ReduceOp::Max || (op == ReduceOp::Mean && !is_float(x.dtype))))
    fail(kernel, "reduces over an empty axis of " + x.shape.str());
  ReduceAxes ax;
  int64_t strides[kMaxRank];
  contiguous_strides(x.shape, strides);
  for (int d = 0; d < x.shape.rank; ++d) {
    if (reduced[d]) {
      ax.red_dims[ax.reduced] = x.shape.dims[d];
      ax.red_strides[ax.reduced++] = strides[d];
    } else {
      ax.kept_dims[ax.kept] = x.shape.dims[d];
      ax.kept_strides[ax.kept++] = strides[d];
    }
  }
  const bool mean = op == ReduceOp::Mean;
  dispatch_numeric(kernel, x.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_integral_v<T>) {
      if (op == ReduceOp::Max)
        launch_reduce<T, int64_t, Combine::Max>(kernel, stream, x, y, ax, reduced, count, false, ws);
      else if (op == ReduceOp::Prod)  // wraps, like integer sums
        launch_reduce<T, uint64_t, Combine::Prod>(kernel, stream, x, y, ax, reduced, count, false, ws);
      else
        launch_reduce<T, uint64_t, Combine::Sum>(kernel, stream, x, y, ax, reduced, count, mean, ws);
    } else if (y.dtype != x.dtype) {  // a sum of 16-bit x written in f32
      launch_reduce<T, double, Combine::Sum, float>(kernel, stream, x, y, ax, reduced, count, false, ws);
    } else {
      if (op == ReduceOp::Max)
        launch_reduce<T, float, Combine::Max>(kernel, stream, x, y, ax, reduced, count, false, ws);
      else if (op == ReduceOp::Prod)
        launch_reduce<T, double, Combine::Prod>(kernel, stream, x, y, ax, reduced, count, false, ws);
      else
        launch_reduce<T, double, Combine::Sum>(kernel, stream, x, y, ax, reduced, count, mean, ws);
    }
  });
  check_launch(kernel);
}

//===----------------------------------------------------------------------===//
// sum_of_squares
//===----------------------------------------------------------------------===//

namespace {

// A launch of sum_of_squares: one chunk table of the list (chunk_table.h)
// and its tensors' addresses and types, by value in the kernel's
// parameters (about 7 KiB).
struct SquareLaunch {
  const void *data[kChunkTensors];
  DType dtype[kChunkTensors];
  int first_piece[kChunkBlocks + 1];
  ChunkPiece piece[kChunkPieces];
};
static_assert(sizeof(SquareLaunch) < 32000, "kernel parameters are limited to 32 KiB");

constexpr int kSquareThreads = 512;
// The stream scratch as sum_of_squares uses it: a launch's blocks' partial
// sums, the running total of the launches so far, and the launch's counter
// of finished blocks (an unsigned; 0 between launches).
constexpr int kSquareTotalSlot = kSquareScratchSlot + kChunkBlocks;
constexpr int kSquareCounterSlot = kSquareTotalSlot + 1;
static_assert(kSquareScratchSlot >= 49 && kSquareCounterSlot < kStreamScratchDoubles - 1,
              "the stream scratch holds sum_of_squares' partial sums after layer_norm_grad's "
              "counters and before the loss counter");

// Adds the squares of p[0, len) to acc in f64 (exact: a 24-bit significand
// squared fits in 53 bits): thread t takes the elements before the first
// 16-byte boundary with index t, t + blockDim.x, ..., then the 16-byte
// vectors, then the tail, the same way. A fixed order for fixed addresses.
template <typename T> __device__ inline void add_squares(const T *p, int64_t len, double &acc) {
  constexpr int V = 16 / sizeof(T);
  const uintptr_t addr = reinterpret_cast<uintptr_t>(p);
  const int64_t head =
      addr % sizeof(T) ? len
                       : std::min<int64_t>(len, static_cast<int64_t>((16 - addr % 16) % 16 / sizeof(T)));
  for (int64_t i = threadIdx.x; i < head; i += blockDim.x) {
    const double v = ld(p[i]);
    acc += v * v;
  }
  const int64_t vectors = (len - head) / V;
  const auto *vp = reinterpret_cast<const math::Vector<T, V> *>(p + head);
#pragma unroll 4
  for (int64_t i = threadIdx.x; i < vectors; i += blockDim.x) {
    const math::Vector<T, V> pack = vp[i];
    for (int k = 0; k < V; ++k) {
      const double v = ld(pack.lane[k]);
      acc += v * v;
    }
  }
  for (int64_t i = head + vectors * V + threadIdx.x; i < len; i += blockDim.x) {
    const double v = ld(p[i]);
    acc += v * v;
  }
}

// Sums the kSquareThreads doubles of `sums` (shared memory; unused ones
// set to 0) in a fixed halving tree; the result in sums[0].
__device__ inline void tree_sum(double *sums) {
  for (int half = kSquareThreads / 2; half > 0; half /= 2) {
    if (threadIdx.x < half)
      sums[threadIdx.x] += sums[threadIdx.x + half];
    __syncthreads();
  }
}

// One block per chunk of the launch: the chunk's squares summed in f64 by
// its threads (add_squares, piece by piece), the threads' sums by a fixed
// tree; the block's sum goes to its slot of the scratch. The last block to
// finish adds the launch's block sums by the same tree (block order), adds
// that to the running total of the earlier launches (`first`: none) and,
// in the last launch, writes the total to `out`; it leaves the counter at 0.
// The chunks are fixed by the tensors' sizes alone, so the sum does not
// depend on the scheduling.
__global__ void sum_of_squares_kernel(SquareLaunch launch, int blocks, double *scratch, bool first,
                                      float *out) {
  __shared__ double sums[kSquareThreads];
  __shared__ bool last;
  double acc = 0.0;
  for (int p = launch.first_piece[blockIdx.x]; p < launch.first_piece[blockIdx.x + 1]; ++p) {
    const ChunkPiece piece = launch.piece[p];
    const void *data = launch.data[piece.tensor];
    switch (launch.dtype[piece.tensor]) {  // float types only (check_sum_of_squares)
    case DType::F32: add_squares(static_cast<const float *>(data) + piece.start, piece.len, acc); break;
    case DType::F16: add_squares(static_cast<const half_t *>(data) + piece.start, piece.len, acc); break;
    default: add_squares(static_cast<const bfloat_t *>(data) + piece.start, piece.len, acc); break;
    }
  }
  sums[threadIdx.x] = acc;
  __syncthreads();
  tree_sum(sums);
  unsigned *counter = reinterpret_cast<unsigned *>(scratch + kSquareCounterSlot);
  if (threadIdx.x == 0) {
    scratch[kSquareScratchSlot + blockIdx.x] = sums[0];
    __threadfence();  // the block's sum is seen before it counts itself
    last = atomicAdd(counter, 1u) == static_cast<unsigned>(blocks) - 1;
  }
  __syncthreads();
  if (!last)
    return;
  __threadfence();
  const volatile double *partial = scratch + kSquareScratchSlot;
  sums[threadIdx.x] = threadIdx.x < blocks ? partial[threadIdx.x] : 0.0;
  __syncthreads();
  tree_sum(sums);
  if (threadIdx.x == 0) {
    const double total = (first ? 0.0 : scratch[kSquareTotalSlot]) + sums[0];
    if (out)
      *out = static_cast<float>(total);
    else
      scratch[kSquareTotalSlot] = total;
    *counter = 0;
  }
}
static_assert(kChunkBlocks <= kSquareThreads, "the last block adds one block sum per thread");

}  // namespace

void sum_of_squares(Stream &s, const Tensor *tensors, int num_tensors, const Tensor &out) {
  cudaStream_t stream = begin_kernel(s);
  const char *kernel = "sum_of_squares";
  check_sum_of_squares(kernel, tensors, num_tensors, out);
  std::vector<int64_t> sizes(static_cast<size_t>(num_tensors));
  for (int k = 0; k < num_tensors; ++k)
    sizes[k] = tensors[k].numel();
  const std::vector<ChunkTable> tables = chunk_tables(sizes.data(), num_tensors);
  if (tables.empty()) {
    check_cuda(cudaMemsetAsync(out.data, 0, sizeof(float), stream), kernel, "cudaMemsetAsync");
    return;
  }
  double *scratch = stream_scratch(s);
  for (size_t l = 0; l < tables.size(); ++l) {
    const ChunkTable &table = tables[l];
    SquareLaunch launch{};
    for (int k = 0; k < table.num_tensors; ++k) {
      launch.data[k] = tensors[table.tensor[k]].data;
      launch.dtype[k] = tensors[table.tensor[k]].dtype;
    }
    std::copy(table.first_piece, table.first_piece + table.num_blocks + 1, launch.first_piece);
    std::copy(table.piece, table.piece + table.num_pieces, launch.piece);
    sum_of_squares_kernel<<<table.num_blocks, kSquareThreads, 0, stream>>>(
        launch, table.num_blocks, scratch, l == 0,
        l + 1 == tables.size() ? out.as<float>() : nullptr);
    check_launch(kernel);
  }
}

}  // namespace dsrt

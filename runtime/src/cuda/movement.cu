// Data movement on the cuda backend: copy, transpose, broadcast_to, concat,
// split, slice, gather, scatter, top_k, trilu, and the gradients of slice and gather. The
// shape checks and plans are the cpu kernels' (kernel_common.h); moving
// elements only needs their size, so most kernels dispatch on it. Indices
// are checked on the device: one out of range is reported through the
// device error word and thrown by the next synchronize. gather copies
// rows of 32 elements and more a warp per row, 16 bytes at a time where
// aligned (gather_rows_kernel).
#include "cuda/common.cuh"
#include "dsrt/math.h"
#include "elementwise_ops.h"
#include "workspace_shapes.h"

namespace dsrt {

using namespace detail;

namespace {

void copy_bytes(cudaStream_t stream, const char *kernel, void *dst, const void *src,
                size_t bytes) {
  if (dst == src || bytes == 0)
    return;
  check_cuda(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream), kernel,
             "cudaMemcpyAsync");
}

}  // namespace

void copy(Stream &s, const Tensor &x, const Tensor &y) {
  cudaStream_t stream = begin_kernel(s);
  const char *kernel = "copy";
  check_copy(kernel, x, y);
  copy_bytes(stream, kernel, y.data, x.data, x.nbytes());
}

//===----------------------------------------------------------------------===//
// transpose
//===----------------------------------------------------------------------===//

namespace {

// One thread per output element: its input offset from the collapsed
// permutation's dims and strides.
template <typename T> __global__ void transpose_kernel(Permuted p, const T *x, T *y, int64_t n) {
  DSRT_GRID_STRIDE(i, n) {
    int64_t rest = i, off = 0;
    for (int d = p.rank - 1; d >= 0; --d) {
      const int64_t q = rest / p.dims[d];
      off += (rest - q * p.dims[d]) * p.in_strides[d];
      rest = q;
    }
    y[i] = x[off];
  }
}

// Batched 2-D transpose through a shared-memory tile (reads and writes both
// coalesced): y[b][i][j] = x[base(b) + i + j * cols_stride], where the
// permutation's last two output axes are (rows: input stride 1, cols).
constexpr int kTile = 32;
template <typename T>
__global__ void transpose_tiled_kernel(Permuted p, const T *x, T *y, int64_t rows, int64_t cols,
                                       int64_t batch) {
  __shared__ T tile[kTile][kTile + 1];
  const int r = p.rank;
  const int64_t col_stride = p.in_strides[r - 1];
  const int64_t row_tiles = (rows + kTile - 1) / kTile, col_tiles = (cols + kTile - 1) / kTile;
  for (int64_t t = blockIdx.x; t < batch * row_tiles * col_tiles; t += gridDim.x) {
    const int64_t b = t / (row_tiles * col_tiles), rt = (t / col_tiles) % row_tiles,
                  ct = t % col_tiles;
    int64_t base = 0, rest = b;
    for (int d = r - 3; d >= 0; --d) {
      const int64_t q = rest / p.dims[d];
      base += (rest - q * p.dims[d]) * p.in_strides[d];
      rest = q;
    }
    // Read: consecutive threads take consecutive input rows (stride 1).
    for (int jj = threadIdx.y; jj < kTile; jj += blockDim.y) {
      const int64_t i = rt * kTile + threadIdx.x, j = ct * kTile + jj;
      if (i < rows && j < cols)
        tile[jj][threadIdx.x] = x[base + i + j * col_stride];
    }
    __syncthreads();
    // Write: consecutive threads take consecutive output columns.
    for (int ii = threadIdx.y; ii < kTile; ii += blockDim.y) {
      const int64_t i = rt * kTile + ii, j = ct * kTile + threadIdx.x;
      if (i < rows && j < cols)
        y[(b * rows + i) * cols + j] = tile[threadIdx.x][ii];
    }
    __syncthreads();
  }
}

}  // namespace

void transpose(Stream &s, const Tensor &x, const Tensor &y, const int64_t *perm) {
  cudaStream_t stream = begin_kernel(s);
  const char *kernel = "transpose";
  check_data(kernel, "x", x);
  check_data(kernel, "y", y);
  check_same_dtype(kernel, "x", x, "y", y);
  const Permuted p = plan_transpose(kernel, x, y, perm);
  const int64_t n = y.numel();
  if (n == 0)
    return;
  if (p.rank == 1) {  // the identity on memory
    copy_bytes(stream, kernel, y.data, x.data, x.nbytes());
    return;
  }
  if (x.data == y.data)
    fail(kernel, "cannot permute in place (x and y share memory)");
  dispatch_bytes(dtype_size(x.dtype), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const int r = p.rank;
    if (r >= 2 && p.in_strides[r - 2] == 1) {
      const int64_t rows = p.dims[r - 2], cols = p.dims[r - 1], batch = n / (rows * cols);
      const int64_t tiles = batch * ((rows + kTile - 1) / kTile) * ((cols + kTile - 1) / kTile);
      transpose_tiled_kernel<T><<<static_cast<unsigned>(std::min<int64_t>(tiles, 65535 * 16)),
                                  dim3(kTile, 8), 0, stream>>>(p, x.as<T>(), y.as<T>(), rows, cols,
                                                               batch);
    } else {
      transpose_kernel<T><<<blocks_for(n), kThreads, 0, stream>>>(p, x.as<T>(), y.as<T>(), n);
    }
  });
  check_launch(kernel);
}

//===----------------------------------------------------------------------===//
// broadcast_to
//===----------------------------------------------------------------------===//

namespace {

template <typename T>
__global__ void broadcast_kernel(BroadcastPlan plan, const T *x, T *y, int64_t n) {
  DSRT_GRID_STRIDE(i, n) y[i] = x[plan_offset(plan, 0, i)];
}

}  // namespace

void broadcast_to(Stream &s, const Tensor &x, const Tensor &y) {
  cudaStream_t stream = begin_kernel(s);
  const char *kernel = "broadcast_to";
  check_data(kernel, "x", x);
  check_data(kernel, "y", y);
  check_same_dtype(kernel, "x", x, "y", y);
  BroadcastPlan plan;
  if (!plan_broadcast(y.shape, &x.shape, 1, plan))
    fail(kernel, "cannot broadcast " + x.shape.str() + " to " + y.shape.str());
  const int64_t n = y.numel();
  if (n == 0)
    return;
  dispatch_bytes(dtype_size(x.dtype), [&](auto tag) {
    using T = typename decltype(tag)::type;
    broadcast_kernel<T><<<blocks_for(n), kThreads, 0, stream>>>(plan, x.as<T>(), y.as<T>(), n);
  });
  check_launch(kernel);
}

//===----------------------------------------------------------------------===//
// concat and split: one strided 2-D copy per part
//===----------------------------------------------------------------------===//

namespace {

void stack_copy(cudaStream_t stream, const char *kernel, const Tensor &whole,
                const Tensor *parts, int count, int64_t outer, bool to_whole) {
  const int64_t whole_row = outer > 0 ? static_cast<int64_t>(whole.nbytes()) / outer : 0;
  if (whole_row == 0)
    return;
  char *w = static_cast<char *>(whole.data);
  int64_t start = 0;
  for (int k = 0; k < count; ++k) {
    const int64_t bytes = static_cast<int64_t>(parts[k].nbytes()) / outer;
    char *p = static_cast<char *>(parts[k].data);
    if (bytes > 0) {
      if (to_whole)
        check_cuda(cudaMemcpy2DAsync(w + start, whole_row, p, bytes, bytes, outer,
                                     cudaMemcpyDefault, stream),
                   kernel, "cudaMemcpy2DAsync");
      else
        check_cuda(cudaMemcpy2DAsync(p, bytes, w + start, whole_row, bytes, outer,
                                     cudaMemcpyDefault, stream),
                   kernel, "cudaMemcpy2DAsync");
    }
    start += bytes;
  }
}

}  // namespace

void concat(Stream &s, const Tensor *inputs, int num_inputs, const Tensor &y, int axis) {
  cudaStream_t stream = begin_kernel(s);
  int64_t outer = check_stacking("concat", y, inputs, num_inputs, axis);
  stack_copy(stream, "concat", y, inputs, num_inputs, outer, /*to_whole=*/true);
}

void split(Stream &s, const Tensor &x, const Tensor *outputs, int num_outputs, int axis) {
  cudaStream_t stream = begin_kernel(s);
  int64_t outer = check_stacking("split", x, outputs, num_outputs, axis);
  stack_copy(stream, "split", x, outputs, num_outputs, outer, /*to_whole=*/false);
}

//===----------------------------------------------------------------------===//
// slice and slice_grad
//===----------------------------------------------------------------------===//

namespace {

// Offset in the whole tensor of element i of the slice `part`.
__device__ inline int64_t slice_offset(const SliceWalk &w, const Shape &part, int64_t i) {
  int64_t off = w.base;
  for (int d = part.rank - 1; d >= 0; --d) {
    const int64_t q = i / part.dims[d];
    off += (i - q * part.dims[d]) * w.step[d];
    i = q;
  }
  return off;
}

template <typename T>
__global__ void slice_kernel(SliceWalk w, Shape part, const T *x, T *y, int64_t n) {
  DSRT_GRID_STRIDE(i, n) y[i] = x[slice_offset(w, part, i)];
}

// Nonzero strides make the slice one-to-one, so threads never collide.
template <typename T>
__global__ void slice_grad_kernel(SliceWalk w, Shape part, const T *dy, T *dx, int64_t n) {
  DSRT_GRID_STRIDE(i, n) dx[slice_offset(w, part, i)] = dy[i];
}

void check_ranks(const char *kernel, const char *a, const Tensor &ta, const char *b,
                 const Tensor &tb) {
  if (ta.shape.rank != tb.shape.rank)
    fail(kernel, std::string(a) + " has rank " + std::to_string(ta.shape.rank) + ", " + b +
                     " has rank " + std::to_string(tb.shape.rank));
}

}  // namespace

void slice(Stream &s, const Tensor &x, const Tensor &y, const int64_t *offsets,
           const int64_t *strides) {
  cudaStream_t stream = begin_kernel(s);
  const char *kernel = "slice";
  check_data(kernel, "x", x);
  check_data(kernel, "y", y);
  check_same_dtype(kernel, "x", x, "y", y);
  check_ranks(kernel, "y", y, "x", x);
  const int64_t n = y.numel();
  if (n == 0)
    return;
  if (x.shape.rank == 0) {
    copy_bytes(stream, kernel, y.data, x.data, x.nbytes());
    return;
  }
  const SliceWalk walk = plan_slice(kernel, x, y, offsets, strides, "reads");
  // A slice whose elements are one contiguous range of x (unit strides;
  // leading axes of size 1 in y, then one partial axis, then whole axes:
  // the rows of a padded matrix) is one device copy at copy bandwidth
  // (the element kernel's index arithmetic ran the LM head's [50264, 768]
  // -> [50257, 768] bf16 slice at 132 GB/s on an H200).
  {
    // p: the last axis y does not take whole (0 if none); every axis after
    // it is whole (so its offset is 0), every axis before it of size 1 in y.
    const int rank = x.shape.rank;
    int p = 0;
    bool contiguous = true;
    for (int d = 0; d < rank; ++d) {
      contiguous = contiguous && strides[d] == 1;
      if (y.shape.dims[d] != x.shape.dims[d])
        p = d;
    }
    for (int d = 0; contiguous && d < p; ++d)
      contiguous = y.shape.dims[d] == 1;
    if (contiguous) {  // the range starts at the walk's base
      const size_t e = dtype_size(x.dtype);
      copy_bytes(stream, kernel, y.data, static_cast<const uint8_t *>(x.data) + walk.base * e,
                 static_cast<size_t>(n) * e);
      return;
    }
  }
  dispatch_bytes(dtype_size(x.dtype), [&](auto tag) {
    using T = typename decltype(tag)::type;
    slice_kernel<T><<<blocks_for(n), kThreads, 0, stream>>>(walk, y.shape, x.as<T>(), y.as<T>(),
                                                            n);
  });
  check_launch(kernel);
}

void slice_grad(Stream &s, const Tensor &dy, const Tensor &dx, const int64_t *offsets,
                const int64_t *strides) {
  cudaStream_t stream = begin_kernel(s);
  const char *kernel = "slice_grad";
  check_data(kernel, "dy", dy);
  check_data(kernel, "dx", dx);
  check_same_dtype(kernel, "dy", dy, "dx", dx);
  check_ranks(kernel, "dy", dy, "dx", dx);
  const int rank = dx.shape.rank;
  SliceWalk walk;
  if (dy.numel() > 0 && rank > 0)
    walk = plan_slice(kernel, dx, dy, offsets, strides, "writes");
  // Zero bytes are zero in every element type (and false for bool).
  if (dx.nbytes() > 0)
    check_cuda(cudaMemsetAsync(dx.data, 0, dx.nbytes(), stream), kernel, "cudaMemsetAsync");
  const int64_t n = dy.numel();
  if (n == 0)
    return;
  if (rank == 0) {
    copy_bytes(stream, kernel, dx.data, dy.data, dy.nbytes());
    return;
  }
  dispatch_bytes(dtype_size(dy.dtype), [&](auto tag) {
    using T = typename decltype(tag)::type;
    slice_grad_kernel<T><<<blocks_for(n), kThreads, 0, stream>>>(walk, dy.shape, dy.as<T>(),
                                                                 dx.as<T>(), n);
  });
  check_launch(kernel);
}

//===----------------------------------------------------------------------===//
// gather and gather_grad
//===----------------------------------------------------------------------===//

namespace {

// Index j of an i64 or i32 index tensor, made non-negative; an index
// outside [-extent, extent) is reported and read as 0.
template <typename I>
__device__ inline int64_t checked_index(const I *indices, int64_t j, int64_t extent,
                                        DeviceErrorWord *err, int32_t kid) {
  int64_t v = static_cast<int64_t>(indices[j]);
  if (v < -extent || v >= extent) {
    report_fault(err, DeviceFault::IndexOutOfRange, kid, v, extent);
    return 0;
  }
  return v < 0 ? v + extent : v;
}

// One thread per element of y = [outer, count, inner].
template <typename T, typename I>
__global__ void gather_kernel(const T *data, const I *indices, T *y, int64_t outer,
                              int64_t count, int64_t inner, int64_t extent, DeviceErrorWord *err,
                              int32_t kid) {
  DSRT_GRID_STRIDE(e, outer * count * inner) {
    const int64_t i = e % inner, r = e / inner, j = r % count, o = r / count;
    const int64_t v = checked_index(indices, j, extent, err, kid);
    y[e] = data[(o * extent + v) * inner + i];
  }
}

// Rows of at least kGatherRowMin elements (an embedding's rows): a warp per
// row of y = [outer * count, inner] (grid-stride over the rows), its index
// read and its (o, j) found once, the row copied in units U (16-byte
// vectors where inner's bytes are a multiple of 16 and data and y are
// aligned, else elements), each lane four units in flight: no division per
// element. The same bytes as gather_kernel (a copy), the same report of an
// index out of range (each lane of the warp reports it; the first wins).
constexpr int64_t kGatherRowMin = 32;

template <typename T, typename U, typename I>
__global__ void gather_rows_kernel(const T *data, const I *indices, T *y, int64_t rows,
                                   int64_t count, int64_t inner, int64_t extent,
                                   DeviceErrorWord *err, int32_t kid) {
  const int64_t units = inner * static_cast<int64_t>(sizeof(T)) / static_cast<int64_t>(sizeof(U));
  const int lane = threadIdx.x & 31;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (blockDim.x >> 5);
  for (int64_t r = blockIdx.x * static_cast<int64_t>(blockDim.x >> 5) + (threadIdx.x >> 5);
       r < rows; r += warps) {
    const int64_t o = r / count, j = r - o * count;
    const int64_t v = checked_index(indices, j, extent, err, kid);
    const U *src = reinterpret_cast<const U *>(data + (o * extent + v) * inner);
    U *dst = reinterpret_cast<U *>(y + r * inner);
    for (int64_t c = lane; c < units; c += 4 * 32) {
      U pack[4];
      for (int u = 0; u < 4; ++u)
        if (c + u * 32 < units)
          pack[u] = src[c + u * 32];
      for (int u = 0; u < 4; ++u)
        if (c + u * 32 < units)
          dst[c + u * 32] = pack[u];
    }
  }
}

// gather_grad: a stable counting sort of the positions j of the indices by
// their row v (normalized, an out-of-range index reported and read as 0),
// then each row's sum over its positions in ascending j, the cpu backend's
// order (so f32 rows of at most kGatherSegment positions are the cpu's bits).
//
// The sort: an LSD radix sort of kGatherRadixBits-bit digits of v, as many
// passes as v's bits need (at least one: its counts check the indices). A pass histograms each tile
// of kGatherSortTile positions (integer counts: exact), scans the counts
// digit-major (so a digit's positions follow the smaller digits' and, per
// digit, the tiles are in order), and each tile places its positions, each
// thread those of one digit in tile order: stable. Then row v's positions
// are sorted[start[v], start[v + 1]).
//
// The sum: a block per tile of kGatherWalkTile sorted positions and column
// range (16 bytes of dy per thread where aligned) walks the "units" that
// start in its tile, in order: a row of at most kGatherSegment positions
// whole (the sum goes to ddata, rounded once), or one segment of
// kGatherSegment positions of a longer row, cut at fixed places from the
// row's start (its sum goes to a partial slot: 2 per kGatherSegment sorted
// positions, for the row's first segment or a later one, never two
// segments in one). A unit is at most kGatherSegment positions, so a block
// reads at most kGatherWalkTile + kGatherSegment positions however skewed
// the rows are. gather_grad_finish_kernel writes the rows that have no
// positions (zeros) and adds the long rows' segment sums in order.

constexpr int kGatherDigits = 1 << kGatherRadixBits;
constexpr int kGatherSortThreads = kGatherDigits;  // one per digit in the scatter
constexpr int kGatherScanThreads = 1024;
constexpr int kGatherWalkThreads = 128;
// Sorted positions whose units one block of the sum walks (any size up to
// kGatherSegment: the partial slots depend on kGatherSegment alone).
constexpr int kGatherWalkTile = 32;

// Position p of the sorted order so far (null: identity, before any pass).
__device__ inline int32_t sorted_at(const int32_t *perm, int64_t p) {
  return perm ? perm[p] : static_cast<int32_t>(p);
}

// Per tile: the counts of its positions' digits, at hist[digit * tiles + tile].
template <typename I>
__global__ void gather_sort_count_kernel(const I *indices, int64_t count, int64_t extent,
                                         const int32_t *perm, int shift, int32_t *hist,
                                         int64_t tiles, DeviceErrorWord *err, int32_t kid) {
  __shared__ int32_t counts[kGatherDigits];
  const int64_t tile = blockIdx.x, begin = tile * kGatherSortTile,
                end = begin + kGatherSortTile < count ? begin + kGatherSortTile : count;
  counts[threadIdx.x] = 0;
  __syncthreads();
  for (int64_t p = begin + threadIdx.x; p < end; p += blockDim.x) {
    const int64_t v = checked_index(indices, sorted_at(perm, p), extent, err, kid);
    atomicAdd(&counts[(v >> shift) & (kGatherDigits - 1)], 1);
  }
  __syncthreads();
  hist[threadIdx.x * tiles + tile] = counts[threadIdx.x];
}

// In-place exclusive scan of n ints in one block: thread t sums its range
// of consecutive elements, a scan of the threads' sums in shared memory,
// then each thread writes its range's prefixes.
__global__ void gather_sort_scan_kernel(int32_t *a, int64_t n) {
  __shared__ int32_t sums[kGatherScanThreads];
  const int64_t per = (n + kGatherScanThreads - 1) / kGatherScanThreads;
  const int64_t begin = threadIdx.x * per, end = begin + per < n ? begin + per : n;
  int32_t sum = 0;
  for (int64_t i = begin; i < end; ++i)
    sum += a[i];
  sums[threadIdx.x] = sum;
  __syncthreads();
  for (int step = 1; step < kGatherScanThreads; step *= 2) {
    const int32_t add = threadIdx.x >= step ? sums[threadIdx.x - step] : 0;
    __syncthreads();
    sums[threadIdx.x] += add;
    __syncthreads();
  }
  int32_t run = sums[threadIdx.x] - sum;  // exclusive
  for (int64_t i = begin; i < end; ++i) {
    const int32_t here = a[i];
    a[i] = run;
    run += here;
  }
}

// Per tile: thread d places the tile's positions of digit d, in tile order,
// from the digit's scanned offset on.
template <typename I>
__global__ void gather_sort_place_kernel(const I *indices, int64_t count, int64_t extent,
                                         const int32_t *perm, int shift, const int32_t *hist,
                                         int64_t tiles, int32_t *out, DeviceErrorWord *err,
                                         int32_t kid) {
  __shared__ int32_t pos[kGatherSortTile];
  __shared__ uint8_t digit[kGatherSortTile];
  static_assert(kGatherDigits <= 256, "a digit is stored in a byte");
  const int64_t tile = blockIdx.x, begin = tile * kGatherSortTile,
                end = begin + kGatherSortTile < count ? begin + kGatherSortTile : count;
  const int n = static_cast<int>(end - begin);
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    const int32_t j = sorted_at(perm, begin + i);
    pos[i] = j;
    digit[i] = static_cast<uint8_t>((checked_index(indices, j, extent, err, kid) >> shift) &
                                    (kGatherDigits - 1));
  }
  __syncthreads();
  int32_t next = hist[threadIdx.x * tiles + tile];
  for (int i = 0; i < n; ++i)
    if (digit[i] == threadIdx.x)
      out[next++] = pos[i];
}

// Row of index j, normalized; an out-of-range index (reported by the sort's
// first pass) reads as 0.
template <typename I> __device__ inline int64_t row_of(const I *indices, int64_t j, int64_t extent) {
  const int64_t v = static_cast<int64_t>(indices[j]);
  return v < -extent || v >= extent ? 0 : (v < 0 ? v + extent : v);
}

// start[v] = the first sorted position of row v or a later row (so
// start[extent] = count): a binary search per row, whatever the gaps
// between the rows that occur.
template <typename I>
__global__ void gather_row_starts_kernel(const I *indices, int64_t count, int64_t extent,
                                         const int32_t *perm, int32_t *start) {
  DSRT_GRID_STRIDE(v, extent + 1) {
    int64_t lo = 0, hi = count;
    while (lo < hi) {
      const int64_t mid = lo + (hi - lo) / 2;
      if (row_of(indices, sorted_at(perm, mid), extent) < v)
        lo = mid + 1;
      else
        hi = mid;
    }
    start[v] = static_cast<int32_t>(lo);
  }
}

// Floats sum in f32, integers wrap in their unsigned type.
template <typename T, bool = std::is_integral_v<T>> struct GatherAcc {
  using type = float;
};
template <typename T> struct GatherAcc<T, true> {
  using type = std::make_unsigned_t<T>;
};
template <typename T> __device__ inline typename GatherAcc<T>::type gather_load(T v) {
  if constexpr (std::is_integral_v<T>)
    return static_cast<typename GatherAcc<T>::type>(v);
  else
    return ld(v);
}
template <typename T> __device__ inline T gather_store(typename GatherAcc<T>::type v) {
  if constexpr (std::is_integral_v<T>)
    return static_cast<T>(v);
  else
    return st<T>(v);
}

// The partial slot of the long row's segment that starts at sorted position
// p (`first`: the row's first segment).
__device__ inline int64_t segment_slot(int64_t p, bool first) {
  return 2 * (p / kGatherSegment) + (first ? 1 : 0);
}

// dy [outer, count, inner], ddata [outer, extent, inner]; V elements per
// thread (V > 1: inner a multiple of V, dy and ddata aligned to V
// elements). blockIdx.x: the walk tile of kGatherWalkTile sorted positions;
// blockIdx.y strides over (o, column range). The tile's positions and those
// a unit starting in it may reach are staged in shared memory with each
// unit's end, found by the threads at once, so the walk waits on no index.
template <typename T, typename I, int V>
__global__ void gather_grad_sum_kernel(const T *dy, const I *indices, const int32_t *perm,
                                       const int32_t *start, int64_t count, int64_t extent,
                                       int64_t outer, int64_t inner, int64_t ranges, T *ddata,
                                       typename GatherAcc<T>::type *partial) {
  using A = typename GatherAcc<T>::type;
  using Pack = math::Vector<T, V>;
  constexpr int kStaged = kGatherWalkTile + kGatherSegment;
  __shared__ int32_t pos[kStaged];
  __shared__ int32_t row[kStaged];
  // Per position of the tile: the end of the unit it starts (0: none), and
  // the unit's kind: a whole row (0), a long row's first segment (1) or a
  // later one (2).
  __shared__ int32_t unit_end[kGatherWalkTile];
  __shared__ uint8_t unit_kind[kGatherWalkTile];
  const int64_t tile_begin = blockIdx.x * static_cast<int64_t>(kGatherWalkTile);
  const int tile_len = static_cast<int>(count - tile_begin < kGatherWalkTile ? count - tile_begin
                                                                             : kGatherWalkTile);
  const int staged = static_cast<int>(count - tile_begin < kStaged ? count - tile_begin : kStaged);
  for (int i = threadIdx.x; i < staged; i += blockDim.x) {
    const int32_t j = sorted_at(perm, tile_begin + i);
    pos[i] = j;
    row[i] = static_cast<int32_t>(row_of(indices, j, extent));
  }
  __syncthreads();
  for (int i = threadIdx.x; i < tile_len; i += blockDim.x) {
    const int64_t p = tile_begin + i, v = row[i], s = start[v], c = start[v + 1] - s;
    const bool whole = c <= kGatherSegment;
    const bool starts = p == s || (!whole && (p - s) % kGatherSegment == 0);
    const int64_t end = whole ? s + c : (p + kGatherSegment < s + c ? p + kGatherSegment : s + c);
    unit_end[i] = starts ? static_cast<int32_t>(end) : 0;
    unit_kind[i] = whole ? 0 : (p == s ? 1 : 2);
  }
  __syncthreads();
  for (int64_t w = blockIdx.y; w < outer * ranges; w += gridDim.y) {
    const int64_t o = w / ranges, col = ((w % ranges) * blockDim.x + threadIdx.x) * V;
    if (col >= inner)
      continue;
    const T *src = dy + o * count * inner + col;
    for (int i = 0; i < tile_len; ++i) {
      const int64_t end = unit_end[i];
      if (end == 0)
        continue;
      const int64_t p = tile_begin + i, v = row[i];
      A acc[V];
      for (int k = 0; k < V; ++k)
        acc[k] = A(0);
      int64_t q = p;
      // Four rows' loads in flight, added in order.
      for (; q + 4 <= end; q += 4) {
        Pack pack[4];
        for (int u = 0; u < 4; ++u)
          pack[u] = *reinterpret_cast<const Pack *>(src + pos[q + u - tile_begin] * inner);
        for (int u = 0; u < 4; ++u)
          for (int k = 0; k < V; ++k)
            acc[k] += gather_load(pack[u].lane[k]);
      }
      for (; q < end; ++q) {
        const Pack pack = *reinterpret_cast<const Pack *>(src + pos[q - tile_begin] * inner);
        for (int k = 0; k < V; ++k)
          acc[k] += gather_load(pack.lane[k]);
      }
      if (unit_kind[i] == 0) {
        Pack out;
        for (int k = 0; k < V; ++k)
          out.lane[k] = gather_store<T>(acc[k]);
        *reinterpret_cast<Pack *>(ddata + (o * extent + v) * inner + col) = out;
      } else {
        A *dst = partial + (segment_slot(p, unit_kind[i] == 1) * outer + o) * inner + col;
        for (int k = 0; k < V; ++k)
          dst[k] = acc[k];
      }
    }
  }
}

// One thread per (o, row, V columns): zeros for a row without positions,
// the segment sums in order for a long row; other rows are written already.
template <typename T, int V>
__global__ void gather_grad_finish_kernel(const int32_t *start, int64_t extent, int64_t outer,
                                          int64_t inner, T *ddata,
                                          const typename GatherAcc<T>::type *partial) {
  using A = typename GatherAcc<T>::type;
  using Pack = math::Vector<T, V>;
  const int64_t vectors = inner / V;
  DSRT_GRID_STRIDE(e, outer * extent * vectors) {
    const int64_t col = (e % vectors) * V, r = e / vectors, v = r % extent, o = r / extent;
    const int64_t s = start[v], c = start[v + 1] - s;
    if (c > 0 && c <= kGatherSegment)
      continue;
    A acc[V];
    for (int k = 0; k < V; ++k)
      acc[k] = A(0);
    for (int64_t p = s; p < s + c; p += kGatherSegment) {
      const A *src = partial + (segment_slot(p, p == s) * outer + o) * inner + col;
      for (int k = 0; k < V; ++k)
        acc[k] += src[k];
    }
    Pack out;
    for (int k = 0; k < V; ++k)
      out.lane[k] = gather_store<T>(acc[k]);
    *reinterpret_cast<Pack *>(ddata + r * inner + col) = out;
  }
}

void outer_inner(const Shape &shape, int axis, int64_t &outer, int64_t &inner) {
  outer = 1;
  inner = 1;
  for (int d = 0; d < axis; ++d)
    outer *= shape.dims[d];
  for (int d = axis + 1; d < shape.rank; ++d)
    inner *= shape.dims[d];
}

// Calls f(TypeTag<I>) for the index tensor's element type.
template <typename F> void dispatch_index(const Tensor &indices, F &&f) {
  if (indices.dtype == DType::I64)
    f(TypeTag<int64_t>{});
  else
    f(TypeTag<int32_t>{});
}

}  // namespace

void gather(Stream &s, const Tensor &data, const Tensor &indices, const Tensor &y, int axis) {
  cudaStream_t stream = begin_kernel(s);
  const char *kernel = "gather";
  check_gather(kernel, data, indices, y, axis);
  const int64_t extent = data.shape.dims[axis], count = indices.numel();
  if (y.numel() == 0)
    return;
  int64_t outer, inner;
  outer_inner(data.shape, axis, outer, inner);
  dispatch_bytes(dtype_size(data.dtype), [&](auto tag) {
    using T = typename decltype(tag)::type;
    dispatch_index(indices, [&](auto itag) {
      using I = typename decltype(itag)::type;
      if (inner >= kGatherRowMin) {
        const int64_t rows = outer * count;
        const unsigned blocks = stream_blocks(rows, kThreads / 32);
        const bool vector = inner * sizeof(T) % 16 == 0 &&
                            reinterpret_cast<uintptr_t>(data.data) % 16 == 0 &&
                            reinterpret_cast<uintptr_t>(y.data) % 16 == 0;
        if (vector)
          gather_rows_kernel<T, uint4, I><<<blocks, kThreads, 0, stream>>>(
              data.as<T>(), indices.as<I>(), y.as<T>(), rows, count, inner, extent,
              device_error_word(), kernel_id(kernel));
        else
          gather_rows_kernel<T, T, I><<<blocks, kThreads, 0, stream>>>(
              data.as<T>(), indices.as<I>(), y.as<T>(), rows, count, inner, extent,
              device_error_word(), kernel_id(kernel));
        return;
      }
      gather_kernel<T, I><<<blocks_for(y.numel()), kThreads, 0, stream>>>(
          data.as<T>(), indices.as<I>(), y.as<T>(), outer, count, inner, extent,
          device_error_word(), kernel_id(kernel));
    });
  });
  check_launch(kernel);
}

void gather_grad(Stream &s, const Tensor &dy, const Tensor &indices, const Tensor &ddata,
                 int axis, const Workspace &ws) {
  cudaStream_t stream = begin_kernel(s);
  const char *kernel = "gather_grad";
  check_gather_grad(kernel, dy, indices, ddata, axis);
  const int64_t extent = ddata.shape.dims[axis], count = indices.numel();
  WorkspaceFloats scratch(
      kernel, ws, gather_grad_workspace_bytes(ddata.dtype, ddata.shape, indices.shape, axis));
  if (ddata.numel() == 0)
    return;
  if (count == 0) {
    check_cuda(cudaMemsetAsync(ddata.data, 0, ddata.nbytes(), stream), kernel, "cudaMemsetAsync");
    return;
  }
  if (count > INT32_MAX || extent >= INT32_MAX)
    fail(kernel, "sorts at most 2^31 - 1 indices into at most 2^31 - 2 rows, got " +
                     std::to_string(count) + " indices and " + std::to_string(extent) + " rows");
  int64_t outer, inner;
  outer_inner(ddata.shape, axis, outer, inner);
  const int64_t sort_tiles = (count + kGatherSortTile - 1) / kGatherSortTile;
  const int64_t segment_tiles = (count + kGatherSegment - 1) / kGatherSegment;
  const int64_t partial_bytes = std::max<int64_t>(4, dtype_size(ddata.dtype));
  // The workspace (gather_grad_cuda_bytes): partial sums first (8-byte
  // aligned), then the sort's int32 arrays.
  void *partial = scratch.take(2 * segment_tiles * outer * inner * partial_bytes / 4);
  int32_t *perm_a = reinterpret_cast<int32_t *>(scratch.take(count));
  int32_t *perm_b = reinterpret_cast<int32_t *>(scratch.take(count));
  int32_t *hist = reinterpret_cast<int32_t *>(scratch.take(kGatherDigits * sort_tiles));
  int32_t *start = reinterpret_cast<int32_t *>(scratch.take(extent + 1));
  int bits = 0;
  while (bits < 63 && ((extent - 1) >> bits) != 0)
    ++bits;
  // At least one pass: its counts check every index.
  const int passes = std::max(1, (bits + static_cast<int>(kGatherRadixBits) - 1) /
                                     static_cast<int>(kGatherRadixBits));
  DeviceErrorWord *err = device_error_word();
  const int32_t kid = kernel_id(kernel);
  dispatch_index(indices, [&](auto itag) {
    using I = typename decltype(itag)::type;
    const I *idx = indices.as<I>();
    const int32_t *perm = nullptr;  // identity
    for (int pass = 0; pass < passes; ++pass) {
      int32_t *out = pass % 2 == 0 ? perm_a : perm_b;
      const int shift = pass * static_cast<int>(kGatherRadixBits);
      gather_sort_count_kernel<I><<<static_cast<unsigned>(sort_tiles), kGatherSortThreads, 0,
                                    stream>>>(idx, count, extent, perm, shift, hist, sort_tiles,
                                              err, kid);
      gather_sort_scan_kernel<<<1, kGatherScanThreads, 0, stream>>>(hist,
                                                                   kGatherDigits * sort_tiles);
      gather_sort_place_kernel<I><<<static_cast<unsigned>(sort_tiles), kGatherSortThreads, 0,
                                    stream>>>(idx, count, extent, perm, shift, hist, sort_tiles,
                                              out, err, kid);
      perm = out;
    }
    gather_row_starts_kernel<I><<<blocks_for(extent + 1), kThreads, 0, stream>>>(
        idx, count, extent, perm, start);
    dispatch_numeric(kernel, ddata.dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      using A = typename GatherAcc<T>::type;
      constexpr int kV = 16 / sizeof(T);
      const bool vector = inner % kV == 0 &&
                          reinterpret_cast<uintptr_t>(dy.data) % 16 == 0 &&
                          reinterpret_cast<uintptr_t>(ddata.data) % 16 == 0;
      auto launch = [&](auto vtag) {
        constexpr int V = decltype(vtag)::value;
        const int64_t vectors = inner / V;
        const int threads = static_cast<int>(
            std::min<int64_t>(kGatherWalkThreads, (vectors + 31) / 32 * 32));
        const int64_t ranges = (vectors + threads - 1) / threads;
        const unsigned grid_y = static_cast<unsigned>(std::min<int64_t>(65535, outer * ranges));
        gather_grad_sum_kernel<T, I, V>
            <<<dim3(static_cast<unsigned>((count + kGatherWalkTile - 1) / kGatherWalkTile), grid_y),
                threads, 0, stream>>>(
                dy.as<T>(), idx, perm, start, count, extent, outer, inner, ranges, ddata.as<T>(),
                static_cast<A *>(partial));
        gather_grad_finish_kernel<T, V><<<blocks_for(outer * extent * vectors), kThreads, 0,
                                          stream>>>(start, extent, outer, inner, ddata.as<T>(),
                                                    static_cast<const A *>(partial));
      };
      if (vector)
        launch(std::integral_constant<int, kV>{});
      else
        launch(std::integral_constant<int, 1>{});
    });
  });
  check_launch(kernel);
}

//===----------------------------------------------------------------------===//
// scatter and top_k
//===----------------------------------------------------------------------===//

namespace {

// One thread per line of positions along `axis` (lines address distinct
// elements of y): it combines its updates in order, so repeated positions
// combine in update order and no two threads share an element.
template <typename T, typename I>
__global__ void scatter_kernel(const I *positions, const T *updates, T *y, AxisLines lines,
                               int64_t total, int reduction, DeviceErrorWord *err, int32_t kid) {
  using C = typename Dev<T>::compute;
  DSRT_GRID_STRIDE(line, lines.outer * lines.inner) {
    const int64_t o = line / lines.inner, i = line % lines.inner;
    for (int64_t j = 0; j < lines.extent; ++j) {
      const int64_t e = (o * lines.extent + j) * lines.inner + i;
      const int64_t p = static_cast<int64_t>(positions[e]);
      if (p < 0 || p >= total) {
        report_fault(err, DeviceFault::PositionOutOfRange, kid, p, total);
        continue;
      }
      y[p] = Dev<T>::store(scatter_combine<C>(reduction, Dev<T>::load(y[p]),
                                              Dev<T>::load(updates[e])));
    }
  }
}

// One thread per line along `axis`: pick r is the first element, in top_k's
// order, that comes after pick r - 1 (the order is total, ties by index).
template <typename T>
__global__ void top_k_kernel(const T *x, int64_t *indices, AxisLines lines, int64_t k,
                             bool largest) {
  using C = typename Dev<T>::compute;
  DSRT_GRID_STRIDE(line, lines.outer * lines.inner) {
    const int64_t o = line / lines.inner, i = line % lines.inner;
    const T *in = x + o * lines.extent * lines.inner + i;
    int64_t prev = -1;
    C prev_value{};
    for (int64_t r = 0; r < k; ++r) {
      int64_t best = -1;
      C best_value{};
      for (int64_t j = 0; j < lines.extent; ++j) {
        const C v = Dev<T>::load(in[j * lines.inner]);
        if (prev >= 0 && !top_k_before(prev_value, prev, v, j, largest))
          continue;
        if (best < 0 || top_k_before(v, j, best_value, best, largest)) {
          best = j;
          best_value = v;
        }
      }
      indices[(o * k + r) * lines.inner + i] = best;
      prev = best;
      prev_value = best_value;
    }
  }
}

}  // namespace

void scatter(Stream &s, const Tensor &data, const Tensor &positions, const Tensor &updates,
             const Tensor &y, int axis, int reduction) {
  cudaStream_t stream = begin_kernel(s);
  const char *kernel = "scatter";
  check_scatter(kernel, data, positions, updates, y, axis, reduction);
  copy_bytes(stream, kernel, y.data, data.data, data.nbytes());
  const AxisLines lines = axis_lines(positions.shape, axis);
  if (positions.numel() == 0)
    return;
  auto run = [&](auto tag) {
    using T = typename decltype(tag)::type;
    dispatch_index(positions, [&](auto itag) {
      using I = typename decltype(itag)::type;
      scatter_kernel<T, I><<<blocks_for(lines.outer * lines.inner), kThreads, 0, stream>>>(
          positions.as<I>(), updates.as<T>(), y.as<T>(), lines, data.numel(), reduction,
          device_error_word(), kernel_id(kernel));
    });
  };
  if (reduction == 0)
    dispatch_bytes(dtype_size(data.dtype), run);
  else
    dispatch_numeric(kernel, data.dtype, run);
  check_launch(kernel);
}

void top_k(Stream &s, const Tensor &x, const Tensor &indices, int axis, bool largest) {
  cudaStream_t stream = begin_kernel(s);
  const char *kernel = "top_k";
  check_top_k(kernel, x, indices, axis);
  const AxisLines lines = axis_lines(x.shape, axis);
  if (indices.numel() == 0)
    return;
  dispatch_numeric(kernel, x.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    top_k_kernel<T><<<blocks_for(lines.outer * lines.inner), kThreads, 0, stream>>>(
        x.as<T>(), indices.as<int64_t>(), lines, indices.shape.dims[axis], largest);
  });
  check_launch(kernel);
}

//===----------------------------------------------------------------------===//
// trilu
//===----------------------------------------------------------------------===//

namespace {

template <typename T>
__global__ void trilu_kernel(const T *x, T *y, int64_t n, int64_t rows, int64_t cols, bool upper,
                             int64_t k) {
  DSRT_GRID_STRIDE(e, n) {
    const int64_t j = e % cols, i = (e / cols) % rows;
    const bool keep = upper ? j - i >= k : j - i <= k;
    y[e] = keep ? x[e] : T(0);  // all-zero bits are zero for every type
  }
}

}  // namespace

void trilu(Stream &s, const Tensor &x, const Tensor &y, bool upper, int64_t k) {
  cudaStream_t stream = begin_kernel(s);
  const char *kernel = "trilu";
  check_data(kernel, "x", x);
  check_data(kernel, "y", y);
  check_same_dtype(kernel, "x", x, "y", y);
  check_shape(kernel, "y", y, x.shape);
  if (x.shape.rank < 2)
    fail(kernel, "needs rank >= 2, got " + x.shape.str());
  const int64_t n = y.numel();
  if (n == 0)
    return;
  const int64_t rows = x.shape.dims[x.shape.rank - 2], cols = x.shape.dims[x.shape.rank - 1];
  dispatch_bytes(dtype_size(x.dtype), [&](auto tag) {
    using T = typename decltype(tag)::type;
    trilu_kernel<T><<<blocks_for(n), kThreads, 0, stream>>>(x.as<T>(), y.as<T>(), n, rows, cols,
                                                            upper, k);
  });
  check_launch(kernel);
}

}  // namespace dsrt

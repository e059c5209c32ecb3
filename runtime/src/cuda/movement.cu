// Data movement on the cuda backend: copy, transpose, broadcast_to, concat,
// split, slice, gather, scatter, top_k, trilu, and the gradients of slice and gather. The
// shape checks and plans are the cpu kernels' (kernel_common.h); moving
// elements only needs their size, so most kernels dispatch on it. Indices
// are checked on the device: one out of range is reported through the
// device error word and thrown by the next synchronize.
#include "cuda/common.cuh"
#include "elementwise_ops.h"

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

// One thread per (outer, inner column): zeroes its column of ddata, then
// adds dy's rows in index order, so sums are deterministic and no two
// threads share an element. f16/bf16 sum in f32 in `acc` and round once.
template <typename T, typename I>
__global__ void gather_grad_kernel(const T *dy, const I *indices, T *ddata, float *acc,
                                   int64_t outer, int64_t count, int64_t inner, int64_t extent,
                                   DeviceErrorWord *err, int32_t kid) {
  DSRT_GRID_STRIDE(e, outer * inner) {
    const int64_t i = e % inner, o = e / inner;
    const T *src = dy + o * count * inner + i;
    const int64_t base = o * extent * inner + i;
    if constexpr (std::is_integral_v<T>) {
      using U = std::make_unsigned_t<T>;  // sums wrap
      for (int64_t v = 0; v < extent; ++v)
        ddata[base + v * inner] = 0;
      for (int64_t j = 0; j < count; ++j) {
        T &d = ddata[base + checked_index(indices, j, extent, err, kid) * inner];
        d = static_cast<T>(static_cast<U>(d) + static_cast<U>(src[j * inner]));
      }
    } else {
      float *sum = std::is_same_v<T, float> ? reinterpret_cast<float *>(ddata) : acc;
      for (int64_t v = 0; v < extent; ++v)
        sum[base + v * inner] = 0.0f;
      for (int64_t j = 0; j < count; ++j)
        sum[base + checked_index(indices, j, extent, err, kid) * inner] += ld(src[j * inner]);
      if constexpr (!std::is_same_v<T, float>)
        for (int64_t v = 0; v < extent; ++v)
          ddata[base + v * inner] = st<T>(sum[base + v * inner]);
    }
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
  WorkspaceFloats scratch(kernel, ws, gather_grad_workspace_bytes(ddata.dtype, ddata.shape));
  if (ddata.numel() == 0)
    return;
  float *acc = scratch.take(is_16bit(ddata.dtype) ? ddata.numel() : 0);
  int64_t outer, inner;
  outer_inner(ddata.shape, axis, outer, inner);
  dispatch_numeric(kernel, ddata.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    dispatch_index(indices, [&](auto itag) {
      using I = typename decltype(itag)::type;
      gather_grad_kernel<T, I><<<blocks_for(outer * inner), kThreads, 0, stream>>>(
          dy.as<T>(), indices.as<I>(), ddata.as<T>(), acc, outer, count, inner, extent,
          device_error_word(), kernel_id(kernel));
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

// Data movement: copy, transpose, broadcast_to, concat, split, slice, gather,
// scatter, top_k, trilu, and the gradients of slice and gather. Moving elements only needs
// their size, so most dispatch on it; gather_grad adds, so it dispatches on
// the element type.
#include "elementwise_ops.h"
#include "internal.h"

#include <vector>

namespace dsrt {

using namespace detail;

namespace {


// memcpy split across threads when it is large enough to pay for them.
void parallel_memcpy(const Stream &s, void *dst, const void *src, size_t bytes) {
  if (dst == src || bytes == 0)
    return;
  char *d = static_cast<char *>(dst);
  const char *p = static_cast<const char *>(src);
  parallel_for(s, static_cast<int64_t>(bytes), 1 << 20, [&](int64_t begin, int64_t end) {
    std::memcpy(d + begin, p + begin, static_cast<size_t>(end - begin));
  });
}

}  // namespace

void copy(Stream &s, const Tensor &x, const Tensor &y) {
  begin_kernel(s);
  const char *kernel = "copy";
  check_copy(kernel, x, y);
  parallel_memcpy(s, y.data, x.data, x.nbytes());
}

//===----------------------------------------------------------------------===//
// transpose
//===----------------------------------------------------------------------===//

namespace {



// Input offset of output row `row` (all axes but the last), by decomposing
// the row index once.
int64_t row_offset(const Permuted &p, int64_t row, int64_t *index) {
  int64_t offset = 0;
  for (int d = p.rank - 2; d >= 0; --d) {
    index[d] = row % p.dims[d];
    row /= p.dims[d];
    offset += index[d] * p.in_strides[d];
  }
  return offset;
}

// Steps the row index (axes [0, rank-1)) by one, updating the offset.
void next_row(const Permuted &p, int64_t *index, int64_t &offset) {
  for (int d = p.rank - 2; d >= 0; --d) {
    ++index[d];
    offset += p.in_strides[d];
    if (index[d] < p.dims[d])
      return;
    offset -= index[d] * p.in_strides[d];
    index[d] = 0;
  }
}

template <typename T>
void transpose_typed(const Stream &s, const Permuted &p, const T *x, T *y, int64_t numel) {
  const int r = p.rank;
  const int64_t inner = p.dims[r - 1], inner_stride = p.in_strides[r - 1];
  if (r >= 2 && p.in_strides[r - 2] == 1) {
    // Batched 2-D transpose of the last two output axes: tile so that both
    // the reads and the writes stay in cache lines.
    const int64_t rows = p.dims[r - 2], cols = inner, batch = numel / (rows * cols);
    constexpr int64_t kTile = 32;
    const int64_t row_tiles = (rows + kTile - 1) / kTile;
    parallel_for(s, batch * row_tiles, std::max<int64_t>(1, kGrainElementwise / (kTile * cols)),
                 [&](int64_t begin, int64_t end) {
                   int64_t index[kMaxRank] = {};
                   for (int64_t t = begin; t < end; ++t) {
                     int64_t b = t / row_tiles, i0 = (t % row_tiles) * kTile;
                     int64_t i1 = std::min(rows, i0 + kTile);
                     // Input offset of batch b: decompose over axes [0, r-2).
                     int64_t base = 0, rest = b;
                     for (int d = r - 3; d >= 0; --d) {
                       index[d] = rest % p.dims[d];
                       rest /= p.dims[d];
                       base += index[d] * p.in_strides[d];
                     }
                     T *out = y + b * rows * cols;
                     for (int64_t j0 = 0; j0 < cols; j0 += kTile) {
                       int64_t j1 = std::min(cols, j0 + kTile);
                       for (int64_t i = i0; i < i1; ++i)
                         for (int64_t j = j0; j < j1; ++j)
                           out[i * cols + j] = x[base + i + j * inner_stride];
                     }
                   }
                 });
    return;
  }
  const int64_t rows = numel / inner;
  parallel_for(s, rows, std::max<int64_t>(1, kGrainElementwise / inner),
               [&](int64_t begin, int64_t end) {
                 int64_t index[kMaxRank] = {};
                 int64_t offset = row_offset(p, begin, index);
                 for (int64_t row = begin; row < end; ++row) {
                   T *out = y + row * inner;
                   const T *in = x + offset;
                   if (inner_stride == 1)
                     std::memcpy(out, in, static_cast<size_t>(inner) * sizeof(T));
                   else
                     for (int64_t j = 0; j < inner; ++j)
                       out[j] = in[j * inner_stride];
                   next_row(p, index, offset);
                 }
               });
}

}  // namespace

void transpose(Stream &s, const Tensor &x, const Tensor &y, const int64_t *perm) {
  begin_kernel(s);
  const char *kernel = "transpose";
  check_data(kernel, "x", x);
  check_data(kernel, "y", y);
  check_same_dtype(kernel, "x", x, "y", y);
  const Permuted p = plan_transpose(kernel, x, y, perm);
  if (y.numel() == 0)
    return;
  if (p.rank == 1) {  // the identity on memory
    parallel_memcpy(s, y.data, x.data, x.nbytes());
    return;
  }
  if (x.data == y.data)
    fail(kernel, "cannot permute in place (x and y share memory)");
  dispatch_bytes(dtype_size(x.dtype), [&](auto tag) {
    using T = typename decltype(tag)::type;
    transpose_typed<T>(s, p, x.as<T>(), y.as<T>(), y.numel());
  });
}

//===----------------------------------------------------------------------===//
// broadcast_to
//===----------------------------------------------------------------------===//

void broadcast_to(Stream &s, const Tensor &x, const Tensor &y) {
  begin_kernel(s);
  const char *kernel = "broadcast_to";
  check_data(kernel, "x", x);
  check_data(kernel, "y", y);
  check_same_dtype(kernel, "x", x, "y", y);
  BroadcastPlan plan;
  if (!plan_broadcast(y.shape, &x.shape, 1, plan))
    fail(kernel, "cannot broadcast " + x.shape.str() + " to " + y.shape.str());
  if (y.numel() == 0)
    return;
  const int64_t stride = plan.strides[0][plan.rank - 1];
  dispatch_bytes(dtype_size(x.dtype), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T *in = x.as<T>();
    T *out = y.as<T>();
    parallel_for(s, y.numel(), kGrainElementwise, [&](int64_t begin, int64_t end) {
      for_each_row(plan, begin, end, [&](int64_t o, const int64_t *off, int64_t n) {
        if (stride == 1) {
          std::memcpy(out + o, in + off[0], static_cast<size_t>(n) * sizeof(T));
        } else {
          const T v = in[off[0]];
          for (int64_t i = 0; i < n; ++i)
            out[o + i] = v;
        }
      });
    });
  });
}

//===----------------------------------------------------------------------===//
// concat and split
//===----------------------------------------------------------------------===//

namespace {


// Copies between the whole tensor and its parts, block by block: for each
// outer index, part k owns a contiguous run of the whole tensor's row.
void stack_copy(const Stream &s, const Tensor &whole, const Tensor *parts, int count,
                int64_t outer, bool to_whole) {
  const int64_t whole_row = outer > 0 ? static_cast<int64_t>(whole.nbytes()) / outer : 0;
  if (whole_row == 0)
    return;
  char *w = static_cast<char *>(whole.data);
  parallel_for(s, outer, std::max<int64_t>(1, (int64_t(1) << 18) / whole_row),
               [&](int64_t begin, int64_t end) {
                 for (int64_t o = begin; o < end; ++o)
                   for (int64_t k = 0, start = 0; k < count; ++k) {
                     int64_t bytes = static_cast<int64_t>(parts[k].nbytes()) / outer;
                     char *p = static_cast<char *>(parts[k].data) + o * bytes;
                     char *q = w + o * whole_row + start;
                     start += bytes;
                     if (bytes > 0) {
                       if (to_whole)
                         std::memcpy(q, p, static_cast<size_t>(bytes));
                       else
                         std::memcpy(p, q, static_cast<size_t>(bytes));
                     }
                   }
               });
}

}  // namespace

void concat(Stream &s, const Tensor *inputs, int num_inputs, const Tensor &y, int axis) {
  begin_kernel(s);
  int64_t outer = check_stacking("concat", y, inputs, num_inputs, axis);
  stack_copy(s, y, inputs, num_inputs, outer, /*to_whole=*/true);
}

void split(Stream &s, const Tensor &x, const Tensor *outputs, int num_outputs, int axis) {
  begin_kernel(s);
  int64_t outer = check_stacking("split", x, outputs, num_outputs, axis);
  stack_copy(s, x, outputs, num_outputs, outer, /*to_whole=*/false);
}

//===----------------------------------------------------------------------===//
// slice and slice_grad
//===----------------------------------------------------------------------===//

namespace {



// Calls f(row, offset) for the rows [begin, end) of `part` (every axis but
// the last), with the offset in the whole tensor of the row's first element.
template <typename F>
void for_each_slice_row(const SliceWalk &w, const Shape &part, int64_t begin, int64_t end, F &&f) {
  const int rank = part.rank;
  int64_t index[kMaxRank] = {};
  int64_t offset = w.base, rest = begin;
  for (int d = rank - 2; d >= 0; --d) {
    index[d] = rest % part.dims[d];
    rest /= part.dims[d];
    offset += index[d] * w.step[d];
  }
  for (int64_t row = begin; row < end; ++row) {
    f(row, offset);
    for (int d = rank - 2; d >= 0; --d) {
      ++index[d];
      offset += w.step[d];
      if (index[d] < part.dims[d])
        break;
      offset -= index[d] * w.step[d];
      index[d] = 0;
    }
  }
}

}  // namespace

void slice(Stream &s, const Tensor &x, const Tensor &y, const int64_t *offsets,
           const int64_t *strides) {
  begin_kernel(s);
  const char *kernel = "slice";
  check_data(kernel, "x", x);
  check_data(kernel, "y", y);
  check_same_dtype(kernel, "x", x, "y", y);
  const int rank = x.shape.rank;
  if (y.shape.rank != rank)
    fail(kernel, "y has rank " + std::to_string(y.shape.rank) + ", x has rank " +
                     std::to_string(rank));
  if (y.numel() == 0)
    return;
  if (rank == 0) {
    std::memcpy(y.data, x.data, x.nbytes());
    return;
  }
  const SliceWalk walk = plan_slice(kernel, x, y, offsets, strides, "reads");
  const int64_t inner = y.shape.dims[rank - 1], inner_step = walk.step[rank - 1];
  const int64_t rows = y.numel() / inner;
  dispatch_bytes(dtype_size(x.dtype), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T *in = x.as<T>();
    T *out = y.as<T>();
    parallel_for(s, rows, std::max<int64_t>(1, kGrainElementwise / inner),
                 [&](int64_t begin, int64_t end) {
                   for_each_slice_row(walk, y.shape, begin, end, [&](int64_t row, int64_t offset) {
                     const T *src = in + offset;
                     T *dst = out + row * inner;
                     if (inner_step == 1)
                       std::memcpy(dst, src, static_cast<size_t>(inner) * sizeof(T));
                     else
                       for (int64_t j = 0; j < inner; ++j)
                         dst[j] = src[j * inner_step];
                   });
                 });
  });
}

void slice_grad(Stream &s, const Tensor &dy, const Tensor &dx, const int64_t *offsets,
                const int64_t *strides) {
  begin_kernel(s);
  const char *kernel = "slice_grad";
  check_data(kernel, "dy", dy);
  check_data(kernel, "dx", dx);
  check_same_dtype(kernel, "dy", dy, "dx", dx);
  const int rank = dx.shape.rank;
  if (dy.shape.rank != rank)
    fail(kernel, "dy has rank " + std::to_string(dy.shape.rank) + ", dx has rank " +
                     std::to_string(rank));
  SliceWalk walk;
  if (dy.numel() > 0 && rank > 0)
    walk = plan_slice(kernel, dx, dy, offsets, strides, "writes");
  // Zero bytes are zero in every element type (and false for bool).
  char *zero = static_cast<char *>(dx.data);
  parallel_for(s, static_cast<int64_t>(dx.nbytes()), int64_t(1) << 20,
               [&](int64_t begin, int64_t end) {
                 std::memset(zero + begin, 0, static_cast<size_t>(end - begin));
               });
  if (dy.numel() == 0)
    return;
  if (rank == 0) {
    std::memcpy(dx.data, dy.data, dy.nbytes());
    return;
  }
  // Nonzero strides make the slice one-to-one, so rows never collide.
  const int64_t inner = dy.shape.dims[rank - 1], inner_step = walk.step[rank - 1];
  const int64_t rows = dy.numel() / inner;
  dispatch_bytes(dtype_size(dy.dtype), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T *in = dy.as<T>();
    T *out = dx.as<T>();
    parallel_for(s, rows, std::max<int64_t>(1, kGrainElementwise / inner),
                 [&](int64_t begin, int64_t end) {
                   for_each_slice_row(walk, dy.shape, begin, end, [&](int64_t row, int64_t offset) {
                     const T *src = in + row * inner;
                     T *dst = out + offset;
                     if (inner_step == 1)
                       std::memcpy(dst, src, static_cast<size_t>(inner) * sizeof(T));
                     else
                       for (int64_t j = 0; j < inner; ++j)
                         dst[j * inner_step] = src[j];
                   });
                 });
  });
}

//===----------------------------------------------------------------------===//
// gather and gather_grad
//===----------------------------------------------------------------------===//

namespace {


// Checks every index against [-extent, extent) before anything is written.
void check_indices(const char *kernel, const Tensor &indices, int axis, int64_t extent) {
  for (int64_t j = 0, count = indices.numel(); j < count; ++j) {
    int64_t v = index_at(indices, j);
    if (v < -extent || v >= extent)
      fail(kernel, "index " + std::to_string(v) + " (indices element " + std::to_string(j) +
                       ") is out of range for axis " + std::to_string(axis) + " of size " +
                       std::to_string(extent));
  }
}

// Index j, checked already, made non-negative.
inline int64_t normalized_index(const Tensor &indices, int64_t j, int64_t extent) {
  int64_t v = index_at(indices, j);
  return v < 0 ? v + extent : v;
}

}  // namespace

void gather(Stream &s, const Tensor &data, const Tensor &indices, const Tensor &y, int axis) {
  begin_kernel(s);
  const char *kernel = "gather";
  check_gather(kernel, data, indices, y, axis);
  const int64_t extent = data.shape.dims[axis];
  const int64_t count = indices.numel();
  check_indices(kernel, indices, axis, extent);
  if (y.numel() == 0)
    return;
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < axis; ++d)
    outer *= data.shape.dims[d];
  for (int d = axis + 1; d < data.shape.rank; ++d)
    inner *= data.shape.dims[d];
  const size_t row_bytes = static_cast<size_t>(inner) * dtype_size(data.dtype);
  const char *src = static_cast<const char *>(data.data);
  char *dst = static_cast<char *>(y.data);
  parallel_for(s, outer * count, std::max<int64_t>(1, kGrainElementwise / inner),
               [&](int64_t begin, int64_t end) {
                 for (int64_t r = begin; r < end; ++r) {
                   int64_t o = r / count, j = r % count;
                   std::memcpy(dst + r * row_bytes,
                               src + (o * extent + normalized_index(indices, j, extent)) *
                                         row_bytes,
                               row_bytes);
                 }
               });
}


void gather_grad(Stream &s, const Tensor &dy, const Tensor &indices, const Tensor &ddata,
                 int axis, const Workspace &ws) {
  begin_kernel(s);
  const char *kernel = "gather_grad";
  check_gather_grad(kernel, dy, indices, ddata, axis);
  const int64_t extent = ddata.shape.dims[axis];
  const int64_t count = indices.numel();
  check_indices(kernel, indices, axis, extent);
  WorkspaceFloats scratch(
      kernel, ws, gather_grad_workspace_bytes(ddata.dtype, ddata.shape, indices.shape, axis));
  if (ddata.numel() == 0)
    return;
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < axis; ++d)
    outer *= ddata.shape.dims[d];
  for (int d = axis + 1; d < ddata.shape.rank; ++d)
    inner *= ddata.shape.dims[d];
  // Threads split the inner axis; each walks every index in order and adds
  // dy's row j into ddata's row indices[j]. So every element is summed in
  // index order whatever the thread count, threads never share an element,
  // and no sorted copy of the indices is needed. f16 / bf16 sum in f32 (the
  // workspace) and round once.
  // Columns go to threads in blocks of 16 (a cache line of f32), so that
  // threads do not write the same lines.
  float *acc = scratch.take(ddata.numel());
  constexpr int64_t kColumns = 16;
  const int64_t column_blocks = (inner + kColumns - 1) / kColumns;
  const int64_t work_per_block = outer * (extent + count) * kColumns;
  dispatch_numeric(kernel, ddata.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T *in = dy.as<T>();
    T *out = ddata.as<T>();
    parallel_for(s, column_blocks, std::max<int64_t>(1, kGrainElementwise / work_per_block),
                 [&](int64_t block_begin, int64_t block_end) {
                   const int64_t begin = block_begin * kColumns;
                   const int64_t width = std::min(inner, block_end * kColumns) - begin;
                   for (int64_t o = 0; o < outer; ++o) {
                     const T *src = in + o * count * inner + begin;
                     if constexpr (std::is_same_v<T, float>) {
                       float *dst = out + o * extent * inner + begin;
                       for (int64_t v = 0; v < extent; ++v)
                         std::fill(dst + v * inner, dst + v * inner + width, 0.0f);
                       for (int64_t j = 0; j < count; ++j) {
                         float *d = dst + normalized_index(indices, j, extent) * inner;
                         const float *g = src + j * inner;
#pragma omp simd
                         for (int64_t i = 0; i < width; ++i)
                           d[i] += g[i];
                       }
                     } else if constexpr (std::is_integral_v<T>) {
                       using U = std::make_unsigned_t<T>;  // sums wrap
                       T *dst = out + o * extent * inner + begin;
                       for (int64_t v = 0; v < extent; ++v)
                         std::fill(dst + v * inner, dst + v * inner + width, T(0));
                       for (int64_t j = 0; j < count; ++j) {
                         T *d = dst + normalized_index(indices, j, extent) * inner;
                         const T *g = src + j * inner;
                         for (int64_t i = 0; i < width; ++i)
                           d[i] = static_cast<T>(static_cast<U>(d[i]) + static_cast<U>(g[i]));
                       }
                     } else {
                       float *dst = acc + o * extent * inner + begin;
                       for (int64_t v = 0; v < extent; ++v)
                         std::fill(dst + v * inner, dst + v * inner + width, 0.0f);
                       for (int64_t j = 0; j < count; ++j) {
                         float *d = dst + normalized_index(indices, j, extent) * inner;
                         const T *g = src + j * inner;
                         for (int64_t i = 0; i < width; ++i)
                           d[i] += Elem<T>::load(g[i]);
                       }
                       T *rounded = out + o * extent * inner + begin;
                       for (int64_t v = 0; v < extent; ++v)
                         for (int64_t i = 0; i < width; ++i)
                           rounded[v * inner + i] = Elem<T>::store(dst[v * inner + i]);
                     }
                   }
                 });
  });
}

//===----------------------------------------------------------------------===//
// scatter and top_k
//===----------------------------------------------------------------------===//

namespace {
// Runs body(begin, end) over ranges of the lines of LINES (the elements
// along the axis at one outer and inner coordinate; line l is at
// o = l / inner, i = l % inner), in parallel, about kGrainElementwise
// elements to a unit.
template <typename F>
void parallel_lines(Stream &s, const AxisLines &lines, F &&body) {
  parallel_for(s, lines.outer * lines.inner,
               std::max<int64_t>(1, kGrainElementwise / std::max<int64_t>(1, lines.extent)),
               body);
}
}  // namespace

void scatter(Stream &s, const Tensor &data, const Tensor &positions, const Tensor &updates,
             const Tensor &y, int axis, int reduction) {
  begin_kernel(s);
  const char *kernel = "scatter";
  check_scatter(kernel, data, positions, updates, y, axis, reduction);
  const int64_t total = data.numel();
  for (int64_t j = 0, count = positions.numel(); j < count; ++j) {
    int64_t p = index_at(positions, j);
    if (p < 0 || p >= total)
      fail(kernel, "position " + std::to_string(p) + " (positions element " + std::to_string(j) +
                       ") is out of range for data of " + std::to_string(total) + " elements");
  }
  if (y.data != data.data && total > 0)
    std::memcpy(y.data, data.data, static_cast<size_t>(total) * dtype_size(data.dtype));
  const AxisLines lines = axis_lines(positions.shape, axis);
  // One line (all positions along `axis` at one outer and inner coordinate)
  // per unit: lines address distinct elements, and each walks its own in
  // order, so repeated positions combine in update order.
  auto run = [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = typename Elem<T>::compute;
    const T *u = updates.as<T>();
    T *out = y.as<T>();
    parallel_lines(s, lines, [&](int64_t begin, int64_t end) {
      for (int64_t line = begin; line < end; ++line) {
        const int64_t o = line / lines.inner, i = line % lines.inner;
        for (int64_t j = 0; j < lines.extent; ++j) {
          const int64_t e = (o * lines.extent + j) * lines.inner + i;
          T &target = out[index_at(positions, e)];
          target = Elem<T>::store(scatter_combine<C>(
              reduction, Elem<T>::load(target), Elem<T>::load(u[e])));
        }
      }
    });
  };
  if (reduction == 0)
    dispatch_bytes(dtype_size(data.dtype), run);
  else
    dispatch_numeric(kernel, data.dtype, run);
}

void top_k(Stream &s, const Tensor &x, const Tensor &indices, int axis, bool largest) {
  begin_kernel(s);
  const char *kernel = "top_k";
  check_top_k(kernel, x, indices, axis);
  const AxisLines lines = axis_lines(x.shape, axis);
  const int64_t k = indices.shape.dims[axis];
  if (indices.numel() == 0)
    return;
  dispatch_numeric(kernel, x.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = typename Elem<T>::compute;
    const T *in = x.as<T>();
    int64_t *out = indices.as<int64_t>();
    parallel_lines(s, lines, [&](int64_t begin, int64_t end) {
      std::vector<int64_t> order(lines.extent);
      std::vector<C> values(lines.extent);
      for (int64_t line = begin; line < end; ++line) {
        const int64_t o = line / lines.inner, i = line % lines.inner;
        for (int64_t j = 0; j < lines.extent; ++j) {
          order[j] = j;
          values[j] = Elem<T>::load(in[(o * lines.extent + j) * lines.inner + i]);
        }
        std::partial_sort(order.begin(), order.begin() + k, order.end(),
                          [&](int64_t a, int64_t b) {
                            return top_k_before(values[a], a, values[b], b, largest);
                          });
        for (int64_t j = 0; j < k; ++j)
          out[(o * k + j) * lines.inner + i] = order[j];
      }
    });
  });
}

//===----------------------------------------------------------------------===//
// trilu
//===----------------------------------------------------------------------===//

void trilu(Stream &s, const Tensor &x, const Tensor &y, bool upper, int64_t k) {
  begin_kernel(s);
  const char *kernel = "trilu";
  check_data(kernel, "x", x);
  check_data(kernel, "y", y);
  check_same_dtype(kernel, "x", x, "y", y);
  check_shape(kernel, "y", y, x.shape);
  if (x.shape.rank < 2)
    fail(kernel, "needs rank >= 2, got " + x.shape.str());
  if (y.numel() == 0)
    return;
  const int64_t rows = x.shape.dims[x.shape.rank - 2], cols = x.shape.dims[x.shape.rank - 1];
  const size_t esize = dtype_size(x.dtype);
  const char *in = static_cast<const char *>(x.data);
  char *out = static_cast<char *>(y.data);
  const bool in_place = x.data == y.data;
  // Row i keeps columns [keep_begin, keep_end); all-zero bytes are zero for
  // every element type.
  parallel_for(s, y.numel() / cols, std::max<int64_t>(1, kGrainElementwise / cols),
               [&](int64_t begin, int64_t end) {
                 for (int64_t r = begin; r < end; ++r) {
                   int64_t i = r % rows;
                   int64_t lo = upper ? i + k : 0, hi = upper ? cols : i + k + 1;
                   lo = std::min(std::max<int64_t>(lo, 0), cols);
                   hi = std::min(std::max<int64_t>(hi, lo), cols);
                   char *dst = out + r * cols * esize;
                   const char *src = in + r * cols * esize;
                   std::memset(dst, 0, static_cast<size_t>(lo) * esize);
                   if (!in_place && hi > lo)
                     std::memcpy(dst + lo * esize, src + lo * esize,
                                 static_cast<size_t>(hi - lo) * esize);
                   std::memset(dst + hi * esize, 0, static_cast<size_t>(cols - hi) * esize);
                 }
               });
}

}  // namespace dsrt

// The workspace size functions of kernels.h: one number per op and shape
// whatever the backend (the compiler computes the same one), so that a
// plan is valid on the cpu and the cuda backend alike.
#include "dsrt/kernels.h"

#include "workspace_shapes.h"

namespace dsrt {
namespace detail {

// Rows [outer] of n along `axis` with unit stride (inner 1), or 0 rows.
int64_t unit_stride_rows(const Shape &x, int axis, int64_t &n) {
  n = 0;
  if (axis < 0 || axis >= x.rank || x.numel() == 0)
    return 0;
  int64_t outer = 1;
  for (int d = 0; d < axis; ++d)
    outer *= x.dims[d];
  for (int d = axis + 1; d < x.rank; ++d)
    if (x.dims[d] != 1)
      return 0;
  n = x.dims[axis];
  return outer;
}

void layer_norm_grad_blocks(int64_t rows, int64_t n, int64_t &blocks, int64_t &block_rows) {
  blocks = 0;
  block_rows = 0;
  if (rows > 0 && n > 0) {
    blocks = std::min<int64_t>({rows, std::max<int64_t>(64, rows / 32), 1024,
                                std::max<int64_t>(1, (int64_t(1) << 22) / n)});
    block_rows = (rows + blocks - 1) / blocks;
    blocks = (rows + block_rows - 1) / block_rows;
  }
}

int64_t im2col_floats(const Shape &x, const Shape &w, const Shape &y, const int64_t *strides,
                      const int64_t *pads, int64_t channels) {
  const int spatial = x.rank - 2;
  if (spatial < 1 || w.rank != x.rank || y.rank != x.rank)
    return 0;
  int64_t kernel_size = 1, out_size = 1;
  bool pointwise = true;
  for (int a = 0; a < spatial; ++a) {
    kernel_size *= w.dims[a + 2];
    out_size *= y.dims[a + 2];
    pointwise = pointwise && w.dims[a + 2] == 1 && strides[a] == 1 && pads[a] == 0 &&
                pads[a + spatial] == 0;
  }
  return pointwise ? 0 : channels * kernel_size * out_size;
}

}  // namespace detail

using namespace detail;

int64_t matmul_workspace_bytes(DType dtype, const Shape &a, const Shape &b, const Shape &y) {
  if (!is_16bit(dtype) || a.rank < 1 || b.rank < 1)
    return 0;
  // m and n from y's matrix (a vector operand contributes no axis), k from
  // a's matrix of m x k elements: the transpose flags are not needed.
  const bool a_vector = a.rank == 1, b_vector = b.rank == 1;
  int64_t m = 1, n = 1;
  if (!b_vector)
    n = y.rank >= 1 ? y.dims[y.rank - 1] : 1;
  if (!a_vector)
    m = y.rank >= (b_vector ? 1 : 2) ? y.dims[y.rank - (b_vector ? 1 : 2)] : 1;
  const int64_t a_matrix = a_vector ? a.dims[0] : a.dims[a.rank - 2] * a.dims[a.rank - 1];
  const int64_t k = m > 0 ? a_matrix / m : 0;
  const int64_t m_total = n > 0 && !a_vector && !b_vector ? y.numel() / n : 0;
  const MatmulStage stage = matmul_stage(m_total, m, n, k);
  return static_cast<int64_t>(sizeof(float)) * matmul_tile_floats(m, n, k) + stage.bytes();
}

int64_t matmul_bias_grad_workspace_bytes(DType dtype, const Shape &a, const Shape &b,
                                         const Shape &y) {
  const int64_t axis0 = 0;
  return std::max(matmul_workspace_bytes(dtype, a, b, y),
                  reduce_workspace_bytes(ReduceOp::Sum, dtype, b, &axis0, 1));
}

int64_t matmul_lhs_bias_grad_workspace_bytes(DType dtype, const Shape &a, const Shape &b,
                                             const Shape &y) {
  const int64_t axis0 = 0;
  return std::max(matmul_workspace_bytes(dtype, a, b, y),
                  reduce_workspace_bytes(ReduceOp::Sum, dtype, a, &axis0, 1));
}

int64_t gemm_workspace_bytes(DType dtype, const Shape &a, const Shape &b, const Shape &y) {
  return matmul_workspace_bytes(dtype, a, b, y);
}

int64_t softmax_workspace_bytes(DType dtype, const Shape &x, int axis) {
  int64_t n = 0, rows = unit_stride_rows(x, axis, n);
  if (!is_16bit(dtype) || rows == 0)
    return 0;
  return static_cast<int64_t>(sizeof(float)) * row_lanes(rows) * n;
}

int64_t softmax_grad_workspace_bytes(DType dtype, const Shape &y, int axis) {
  return 2 * softmax_workspace_bytes(dtype, y, axis);
}

int64_t attention_grad_workspace_bytes(DType, const Shape &q) {
  if (q.rank < 2 || q.dims[q.rank - 1] == 0)
    return 0;
  return static_cast<int64_t>(sizeof(float)) * (q.numel() / q.dims[q.rank - 1]);
}

int64_t attention_grad_cuda_workspace_bytes(DType dtype, const Shape &q) {
  if (q.rank < 2 || q.dims[q.rank - 1] == 0)
    return 0;
  const int64_t dh = q.dims[q.rank - 1], rows = q.numel() / dh;
  if (rows == 0 || !attention_grad_has_dq_acc(dtype, dh))
    return static_cast<int64_t>(sizeof(float)) * rows;
  return attention_grad_dq_acc_offset(rows) + static_cast<int64_t>(sizeof(float)) * rows * dh;
}

int64_t layer_norm_workspace_bytes(DType dtype, const Shape &x, const Shape &scale,
                                   const Shape *bias, int axis) {
  if (axis < 0 || axis >= x.rank || x.numel() == 0)
    return 0;
  int64_t rows = 1, n = 1;
  for (int d = 0; d < x.rank; ++d)
    (d < axis ? rows : n) *= x.dims[d];
  int64_t floats = is_16bit(dtype) ? row_lanes(rows) * n : 0;
  floats += param_floats(scale, n) + (bias ? param_floats(*bias, n) : 0);
  return static_cast<int64_t>(sizeof(float)) * floats;
}

int64_t layer_norm_grad_workspace_bytes(DType dtype, const Shape &x, const Shape &scale,
                                        int axis) {
  if (axis < 0 || axis >= x.rank || x.numel() == 0)
    return 0;
  int64_t rows = 1, n = 1, blocks = 0, block_rows = 0;
  for (int d = 0; d < x.rank; ++d)
    (d < axis ? rows : n) *= x.dims[d];
  layer_norm_grad_blocks(rows, n, blocks, block_rows);
  // The f64 totals of dscale and dbias per normalized element and the
  // accumulator of one broadcast parameter (3 n doubles, first, so they are
  // aligned); each block's f32 partial sums of both (2 n per block);
  // f16/bf16: x, dy and dx rows in f32, one set per block; a broadcast
  // scale expanded to the normalized shape in f32; past 32 blocks, the f64
  // sums of the lanes of blocks (layer_norm_grad_lane_floats).
  int64_t floats = 2 * 3 * n + 2 * blocks * n + layer_norm_grad_lane_floats(blocks, n);
  floats += is_16bit(dtype) ? 3 * blocks * n : 0;
  floats += param_floats(scale, n);
  return static_cast<int64_t>(sizeof(float)) * floats;
}

int64_t softmax_cross_entropy_workspace_bytes(DType dtype, const Shape &scores) {
  if (scores.rank < 2 || scores.numel() == 0)
    return 0;
  const int64_t c = scores.dims[1], rows = scores.numel() / c;
  if (dtype == DType::F32 && rows == scores.dims[0])
    return 0;  // f32 rows with unit stride are read in place
  return static_cast<int64_t>(sizeof(float)) * loss_blocks(rows) * c;
}

int64_t softmax_cross_entropy_with_grad_workspace_bytes(DType dtype, const Shape &scores) {
  if (scores.rank < 2 || scores.numel() == 0)
    return 0;
  const int64_t rows = scores.numel() / scores.dims[1];
  return std::max<int64_t>(softmax_cross_entropy_workspace_bytes(dtype, scores),
                           static_cast<int64_t>(sizeof(double)) * rows);
}

int64_t gather_grad_workspace_bytes(DType dtype, const Shape &ddata, const Shape &indices,
                                    int axis) {
  const int64_t cpu = is_16bit(dtype) ? static_cast<int64_t>(sizeof(float)) * ddata.numel() : 0;
  if (axis < 0 || axis >= ddata.rank || ddata.dims[axis] <= 0)
    return cpu;
  const int64_t extent = ddata.dims[axis];
  return std::max(cpu, gather_grad_cuda_bytes(dtype, indices.numel(), extent,
                                              ddata.numel() / extent));
}

int64_t conv_workspace_bytes(DType dtype, const Shape &x, const Shape &w, const Shape &y,
                             bool has_bias, const int64_t *strides, const int64_t *pads,
                             int64_t group) {
  if (x.rank < 3 || group < 1)
    return 0;
  int64_t floats = im2col_floats(x, w, y, strides, pads, x.dims[1] / group);
  if (is_16bit(dtype))
    floats += x.numel() + w.numel() + y.numel() + (has_bias ? w.dims[0] : 0);
  return floats * static_cast<int64_t>(sizeof(float));
}

int64_t conv_grad_input_workspace_bytes(DType dtype, const Shape &dy, const Shape &w,
                                        const Shape &dx, const int64_t *strides,
                                        const int64_t *pads, int64_t group) {
  if (dx.rank < 3 || group < 1)
    return 0;
  int64_t floats = im2col_floats(dx, w, dy, strides, pads, dx.dims[1]);
  if (is_16bit(dtype))
    floats += dy.numel() + w.numel() + dx.numel();
  return floats * static_cast<int64_t>(sizeof(float));
}

int64_t conv_grad_weight_workspace_bytes(DType dtype, const Shape &dy, const Shape &x,
                                         const Shape &dw, const int64_t *strides,
                                         const int64_t *pads, int64_t group) {
  if (x.rank < 3 || group < 1)
    return 0;
  int64_t floats = im2col_floats(x, dw, dy, strides, pads, x.dims[1] / group);
  if (is_16bit(dtype))
    floats += dy.numel() + x.numel() + dw.numel();
  return floats * static_cast<int64_t>(sizeof(float));
}

int64_t pool_grad_workspace_bytes(DType dtype, const Shape &dx) {
  if (!is_16bit(dtype) || dx.rank < 3 || dx.numel() == 0)
    return 0;
  const int64_t planes = dx.dims[0] * dx.dims[1];
  return static_cast<int64_t>(sizeof(float)) * std::min(planes, kPoolGradLanes) *
         (dx.numel() / planes);
}
namespace detail {

ReduceGroups collapse_reduce_groups(const Shape &x, const bool *reduced) {
  ReduceGroups groups;
  for (int d = 0; d < x.rank; ++d) {
    const int64_t dim = x.dims[d];
    if (dim == 1)
      continue;
    if (groups.count > 0 && groups.group[groups.count - 1].reduced == reduced[d])
      groups.group[groups.count - 1].size *= dim;
    else
      groups.group[groups.count++] = {dim, reduced[d]};
  }
  return groups;
}

void reduce_intermediate_sizes(const ReduceGroups &groups, int64_t out_count, int64_t &first,
                               int64_t &second) {
  first = second = 0;
  ReduceGroups dims = groups;
  int pass = 0;
  for (int g = dims.count - 1; g >= 0 && pass < 2; --g) {
    if (!dims.group[g].reduced)
      continue;
    int64_t n = 1;
    for (int d = 0; d < dims.count; ++d)
      if (d != g)
        n *= dims.group[d].size;
    (pass++ == 0 ? first : second) = n;
    dims.remove(g);
  }
  if (pass == 0)
    first = out_count;
}

}  // namespace detail

int64_t reduce_workspace_bytes(ReduceOp op, DType dtype, const Shape &x, const int64_t *axes,
                               int num_axes) {
  bool reduced[kMaxRank] = {};
  for (int i = 0; i < num_axes; ++i) {
    if (axes[i] < 0 || axes[i] >= x.rank || (i > 0 && axes[i - 1] >= axes[i]))
      throw Error("dsrt::reduce_workspace_bytes: axes must be sorted, unique and within rank " +
                  std::to_string(x.rank));
    reduced[axes[i]] = true;
  }
  int64_t out_count = 1;
  for (int d = 0; d < x.rank; ++d)
    if (!reduced[d])
      out_count *= x.dims[d];
  if (out_count == 0)
    return 0;
  int64_t first = 0, second = 0;
  const ReduceGroups groups = collapse_reduce_groups(x, reduced);
  reduce_intermediate_sizes(groups, out_count, first, second);
  // The cpu kernel's pass buffers, or the cuda column case's parts.
  int64_t accumulators = first + second, rows = 0, columns = 0;
  if (reduce_column_case(groups, rows, columns)) {
    const int64_t parts = reduce_column_parts(dtype, rows, columns);
    if (parts > 1)
      accumulators = std::max(accumulators, parts * columns);
  }
  return accumulators * reduce_accumulator_bytes(op, dtype);
}

}  // namespace dsrt

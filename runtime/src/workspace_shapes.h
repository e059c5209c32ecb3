// The shapes of kernel workspaces and of the fixed blocks kernels sum in,
// shared by every backend: the workspace size functions of kernels.h
// (workspace.cpp) return one number per op whatever the backend, and the
// kernels split their work the same way. Not installed.
#ifndef DSRT_SRC_WORKSPACE_SHAPES_H
#define DSRT_SRC_WORKSPACE_SHAPES_H

#include "dsrt/tensor.h"

#include <algorithm>
#include <cstdint>

namespace dsrt {
namespace detail {

inline bool is_16bit(DType dtype) { return dtype == DType::F16 || dtype == DType::BF16; }

// Row kernels on f16/bf16 convert each row to f32 in a "lane" of their
// workspace: at most kRowLanes lanes, lane l taking the fixed rows
// [l * rows / lanes, (l + 1) * rows / lanes), so the workspace is bounded
// and no row's result depends on the thread count.
constexpr int64_t kRowLanes = 64;
inline int64_t row_lanes(int64_t rows) { return std::min(rows, kRowLanes); }

// Rows [outer] of n along `axis` with unit stride (inner 1), or 0 rows.
int64_t unit_stride_rows(const Shape &x, int axis, int64_t &n);

// The f32 elements of a layer norm scale or bias expanded to the normalized
// shape: none when it has the normalized shape's element count already.
inline int64_t param_floats(const Shape &param, int64_t n) { return param.numel() < n ? n : 0; }

// Blocks of rows whose dscale/dbias partial sums layer_norm_grad keeps, and
// their size: up to 64 blocks, more (at least 32 rows each, at most 1024
// blocks) for many rows, so that the cuda kernel's blocks fill a GPU (a
// GPT-2 step's 65536 rows: 1024 blocks of 64); fewer when their partial
// sums would pass 2^22 values per parameter. Depends on the shape only.
void layer_norm_grad_blocks(int64_t rows, int64_t n, int64_t &blocks, int64_t &block_rows);

// The lanes of blocks whose dscale/dbias partial sums layer_norm_grad adds
// separately in f64 (lane l: blocks l, l + lanes, ... in order), then adds
// in lane order. Past kLayerNormGradLanes blocks the cuda kernel keeps each
// lane's sums (dscale's and dbias's: 2 n doubles per lane) in the
// workspace: the floats this returns, after the partial sums.
constexpr int64_t kLayerNormGradLanes = 32;
inline int64_t layer_norm_grad_lane_floats(int64_t blocks, int64_t n) {
  return blocks > kLayerNormGradLanes ? 2 * 2 * kLayerNormGradLanes * n : 0;
}

// Per-sample losses are summed in blocks fixed by the number of rows alone
// (each block in order, then the blocks in order), so the total does not
// depend on the thread count and needs no per-sample storage.
constexpr int64_t kLossBlocks = 64;

// Blocks of samples a loss over `rows` samples sums separately.
inline int64_t loss_blocks(int64_t rows) { return std::min<int64_t>(kLossBlocks, std::max<int64_t>(rows, 1)); }

// Floats of an im2col matrix of `channels` channels of x (kernel sizes from
// w, positions from y), or 0 when the window is 1x1, stride 1, unpadded.
int64_t im2col_floats(const Shape &x, const Shape &w, const Shape &y, const int64_t *strides,
                      const int64_t *pads, int64_t channels);

// f16/bf16 matmul and gemm convert tile by tile: each tile of the output,
// at most kMatmulTileM x kMatmulTileN, accumulates in f32 over blocks of at
// most kMatmulTileK of the contraction, each block's operand panels
// converted to f32 (op(a): tile_m x tile_k, op(b): tile_k x tile_n); the
// output is rounded once. The workspace holds one set of the three panels.
constexpr int64_t kMatmulTileM = 512, kMatmulTileN = 512, kMatmulTileK = 512;
inline int64_t matmul_tile_floats(int64_t m, int64_t n, int64_t k) {
  if (m <= 0 || n <= 0)
    return 0;
  const int64_t tm = std::min(m, kMatmulTileM), tn = std::min(n, kMatmulTileN),
                tk = std::min(std::max<int64_t>(k, 0), kMatmulTileK);
  return tm * tk + tk * tn + tm * tn;
}

// The cuda backend gives cuBLASLt whatever a product's planned workspace
// holds past its staging buffers (below). These functions give the least
// a kernel needs on any backend; for --target cuda the compiler plans more
// for the large products (dialects/ds/IR/DsKernels.cpp, matmulLtBytes: 32
// MiB, the cuBLAS reference's recommendation on Hopper, from 2^30
// multiply-adds), room for the split-k partial sums of the weight
// gradients' few output tiles.

// f16/bf16 products on cuda whose leading dimensions are not multiples of
// 8 elements (16 bytes: GPT-2's 50257-word vocabulary) reach only cuBLASLt's
// unaligned kernels, several times slower than its tensor-core ones. Above
// kMatmulStageMinMacs multiply-adds (over every batch) the cuda backend
// stages such a product through aligned copies (runtime/src/cuda/linalg.cu):
// - y [m, n] with n % 8 != 0: chunks of y's rows are computed with rows
//   padded to 8 and copied out; b transposed [n, k] is copied whole with
//   zero rows up to n rounded to 8, so that every dimension of the product
//   but k is a multiple of 8;
// - a transposed [k, m] with m % 8 != 0: blocks of its columns are copied
//   in, each a chunk of y's rows;
// - a [m, k] with k % 8 != 0: the contraction is split instead, so that
//   every product keeps many output tiles and a moderate k (a chunk of rows
//   over the whole of k left a few tiles each summing 50257 terms: 109
//   TFLOP/s on an H200). Blocks of a_rows rows of y (their f32 sums, y32,
//   rows padded to 8, at most kMatmulStageSumBytes; at least 128 rows)
//   take a's columns a_cols at a time (a multiple of 64), copied in with
//   zero columns up to 8; each block of b's
//   rows is read in place but the last, copied with zero rows up to 8
//   (b_last rows); the products add into y32 in f32 (beta 1 after the
//   first), which is rounded once into y.
// A staged chunk of a or y holds an eighth of its whole padded matrix, at
// least kMatmulStageMinBytes and at most kMatmulStageMaxBytes (and at least
// 8 rows), so that chunks stay large enough for the tensor cores and the
// workspace small beside the matrix. The workspace holds the buffers
// whichever transposes the call has, each 256-byte aligned; the cpu
// backend leaves them unused.
constexpr int64_t kMatmulStageMinMacs = int64_t(1) << 27;
constexpr int64_t kMatmulStageMinBytes = int64_t(16) << 20;
constexpr int64_t kMatmulStageMaxBytes = int64_t(256) << 20;
constexpr int64_t kMatmulStageSumBytes = int64_t(32) << 20;
inline int64_t round_up8(int64_t v) { return (v + 7) / 8 * 8; }
// The budget of a staged buffer for a padded [rows, row] 16-bit matrix.
inline int64_t matmul_stage_budget(int64_t row, int64_t rows) {
  const int64_t whole = 2 * std::max<int64_t>(row, 1) * round_up8(rows);
  return std::min(kMatmulStageMaxBytes, std::max(kMatmulStageMinBytes, whole / 8));
}
// Rows of a chunk of a staged [rows, row] 16-bit matrix (row already padded).
inline int64_t matmul_stage_rows(int64_t row, int64_t rows) {
  row = std::max<int64_t>(row, 1);
  const int64_t fit = std::max<int64_t>(8, matmul_stage_budget(row, rows) / 2 / row / 8 * 8);
  return std::min(fit, round_up8(rows));
}
struct MatmulStage {
  int64_t y_rows = 0;   // rows of a y chunk, 0: y not staged (n % 8 == 0)
  int64_t at_cols = 0;  // columns of a transposed a [k, m] chunk, 0: m % 8 == 0
  // a [m, k] with k % 8 != 0 (0: k % 8 == 0): rows of y per block, columns
  // of a per chunk of the contraction, rows of b's last chunk (padded).
  int64_t a_rows = 0, a_cols = 0, b_last = 0;
  int64_t y_bytes = 0, a_bytes = 0, y32_bytes = 0;
  // b [n, k] with zero rows up to n rounded to 8 (b transposed, n % 8 != 0),
  // or b's last chunk [b_last, n] (a [m, k], k % 8 != 0): the larger.
  int64_t b_bytes = 0;
  int64_t bytes() const { return y_bytes + a_bytes + y32_bytes + b_bytes; }
};
// m_total: y's rows over every batch (its elements / n); m: one matrix's.
inline MatmulStage matmul_stage(int64_t m_total, int64_t m, int64_t n, int64_t k) {
  MatmulStage st;
  if (m_total <= 0 || n <= 0 || k <= 0 ||
      static_cast<double>(m_total) * static_cast<double>(n) * static_cast<double>(k) <
          static_cast<double>(kMatmulStageMinMacs))
    return st;
  auto aligned = [](int64_t bytes) { return (bytes + 255) / 256 * 256; };
  if (n % 8 != 0) {
    st.y_rows = matmul_stage_rows(round_up8(n), m_total);
    st.y_bytes = aligned(2 * st.y_rows * round_up8(n));
    st.b_bytes = aligned(2 * round_up8(n) * k);
  }
  if (k % 8 != 0) {
    const int64_t k8 = round_up8(k);
    st.a_rows = std::min(round_up8(m_total), std::max<int64_t>(128, kMatmulStageSumBytes /
                                                                         (4 * round_up8(n)) /
                                                                         128 * 128));
    st.a_cols = std::min(
        k8, std::max<int64_t>(64, matmul_stage_budget(k8, m_total) / 2 / st.a_rows / 64 * 64));
    st.b_last = k8 - (k8 - 1) / st.a_cols * st.a_cols;
    st.y32_bytes = aligned(4 * st.a_rows * round_up8(n));
    st.b_bytes = std::max(st.b_bytes, aligned(2 * st.b_last * n));
  }
  if (m % 8 != 0)
    st.at_cols = matmul_stage_rows(k, m);
  st.a_bytes = aligned(2 * std::max(st.a_rows * st.a_cols, k * st.at_cols));
  return st;
}

// gather_grad on the cuda backend sorts the positions j of the indices by
// their row (a stable LSD radix sort of kGatherRadixBits-bit digits over
// tiles of kGatherSortTile positions: two arrays of positions, a digit
// count per digit and tile, and each row's first sorted position), then
// sums each row's dy rows in ascending j. A row of at most kGatherSegment
// positions is summed whole by one block; a longer one in segments of
// kGatherSegment positions, whose partial sums (at most 2 per tile of
// kGatherSegment sorted positions, one per column of [outer, inner]) a
// second kernel adds in order. The cpu backend sums f16/bf16 in f32, one
// per element of ddata. The workspace is the larger of the two.
constexpr int64_t kGatherRadixBits = 8, kGatherSortTile = 1024, kGatherSegment = 256;
inline int64_t gather_grad_cuda_bytes(DType dtype, int64_t count, int64_t extent, int64_t columns) {
  if (count <= 0 || extent <= 0 || columns <= 0)
    return 0;
  const int64_t sort_tiles = (count + kGatherSortTile - 1) / kGatherSortTile;
  const int64_t segment_tiles = (count + kGatherSegment - 1) / kGatherSegment;
  const int64_t partial_bytes = std::max<int64_t>(4, dtype_size(dtype));
  return 2 * segment_tiles * columns * partial_bytes +
         4 * (2 * count + (int64_t(1) << kGatherRadixBits) * sort_tiles + extent + 1);
}

// f16/bf16 pooling gradients sum each plane in f32 in one of at most this
// many planes of the workspace ("lanes"), each lane taking a fixed range of
// planes: the workspace is bounded, and the sums do not depend on threads.
constexpr int64_t kPoolGradLanes = 64;

// reduce collapses x's axes into alternating kept / reduced groups (size-1
// axes dropped, neighbours of the same kind merged) and reduces each reduced
// group in one pass, last first.
struct ReduceGroup {
  int64_t size;
  bool reduced;
};
struct ReduceGroups {
  ReduceGroup group[kMaxRank];
  int count = 0;
  void remove(int g) {
    for (int d = g + 1; d < count; ++d)
      group[d - 1] = group[d];
    --count;
  }
};
ReduceGroups collapse_reduce_groups(const Shape &x, const bool *reduced);

// Elements of the two buffers reduce's passes alternate between: the first
// holds the first pass's result (or, when every reduced axis has size 1,
// the values passed through: `out_count`), the second the second pass's;
// later passes are smaller and reuse them.
void reduce_intermediate_sizes(const ReduceGroups &groups, int64_t out_count, int64_t &first,
                               int64_t &second);

// Bytes of one accumulator: f64 for float sums, means and products, f32 for
// a float max, 64-bit integers for integers.
inline int64_t reduce_accumulator_bytes(ReduceOp op, DType dtype) {
  return is_float(dtype) && op == ReduceOp::Max ? 4 : 8;
}

// reduce's column case: x [rows, columns] reduced over its rows (the
// reduced axes lead, the kept ones are innermost; size-1 axes ignored).
inline bool reduce_column_case(const ReduceGroups &groups, int64_t &rows, int64_t &columns) {
  if (groups.count != 2 || !groups.group[0].reduced)
    return false;
  rows = groups.group[0].size;
  columns = groups.group[1].size;
  return true;
}

// The cuda backend reduces the column case by tiles of kColumnTileLanes
// columns (twice that for 2-byte elements), a tile's 256 slices of rows in
// one block, or split among P "parts" (blocks; slices k = b mod P to block
// b) whose results a second pass combines from a P x columns workspace of
// accumulators (src/cuda/reduce.cu). P doubles, up to kMaxColumnParts, while
// the grid has fewer than kColumnPartsBlocks blocks and x has at least
// kColumnPartsMinRows rows. The compiler sizes the plan's workspace by the
// same rule (reduceWorkspaceBytes in dialects/ds/IR/DsKernels.cpp).
constexpr int64_t kColumnTileLanes = 8, kMaxColumnParts = 32, kColumnPartsBlocks = 128,
                  kColumnPartsMinRows = 2048;
inline int64_t reduce_column_parts(DType dtype, int64_t rows, int64_t columns) {
  const int64_t tile = kColumnTileLanes * (dtype_size(dtype) == 2 ? 2 : 1);
  const int64_t tiles = (columns + tile - 1) / tile;
  int64_t parts = 1;
  if (rows >= kColumnPartsMinRows)
    while (parts < kMaxColumnParts && tiles * parts < kColumnPartsBlocks)
      parts *= 2;
  return parts;
}

// attention_grad's workspace: delta, one f32 per query row; then, in a
// --target cuda plan where the cuda backend runs the tensor-core kernels
// (f16 and bf16 with a head width Dh a multiple of 16), the f32 dq
// accumulator of its one-pass backward (DSRT_ATTENTION_GRAD=atomic: rows x
// Dh, heads-major) from the first multiple of 256 bytes after delta,
// whichever backward runs, so that one plan serves both
// (attention_grad_cuda_workspace_bytes). The compiler sizes it by the same
// rule (AttentionGradOp::getWorkspaceBytes in dialects/ds/IR/DsKernels.cpp,
// on a module marked ds.target = "cuda").
inline bool attention_grad_has_dq_acc(DType dtype, int64_t dh) {
  return is_16bit(dtype) && dh > 0 && dh % 16 == 0;
}
inline int64_t attention_grad_dq_acc_offset(int64_t rows) { return (4 * rows + 255) / 256 * 256; }

}  // namespace detail
}  // namespace dsrt

#endif  // DSRT_SRC_WORKSPACE_SHAPES_H

// Fused scaled-dot-product attention and its gradient on the cuda backend:
// no [T, T] scores. Two implementations, chosen at launch:
//
// Tensor cores (f16 and bf16 with a head width Dh a multiple of 16,
// FlashAttention-2's organisation): a block of 4 warps per (batch-head,
// tile of 64 query rows), each warp owning 16 of the rows. The warp holds
// its rows of q as mma A fragments; the block stages tiles of 64 keys and
// values in shared memory in 16 bits, two stages of each (the next tile's
// copy overlapping this one's products; dynamic shared memory at Dh 128,
// one stage where the device cannot give it); per key tile the warp computes its
// 16x64 scores S = q k^T with mma_16x8x16 (cuda/mma.cuh), keeps an online
// softmax in registers (f32 row maximum and sum), rounds P = exp(S - max)
// to 16 bits as the A operand of P v and accumulates the output in f32
// accumulator fragments. Causal blocks stop at the diagonal tile, and
// only the tiles that have a masked element for some row of the warp (the
// diagonal tile, the last tile when T is not a multiple of 64) test each
// element (tile_masked, with_mask); the exponentials are exp2_ftz of the
// scores scaled by scale log2(e) (a multiply-add and the hardware's ex2,
// the saved lse converted back to natural log). A causal forward (and dQ)
// launches a head's last, heaviest tile of queries first. The
// backward recomputes P from the saved log-sum-exp: one kernel computes
// each row's delta = rowsum(do * o) (the workspace); one per (batch-head,
// tile of 64 keys), each warp owning 16 keys, computes S^T = k q^T and
// dP^T = v do^T per tile of 64 queries and accumulates dv += P^T do and
// dk += dS^T q; one per (batch-head, tile of 64 queries) computes S and dP
// again per key tile and accumulates dq += dS k. dS = P (dP - delta) is
// rounded to 16 bits as an mma operand, as P is. With
// DSRT_ATTENTION_KERNEL=rows32 (read once; the default rows16 is the
// above) the forward and dQ kernels at Dh <= 64 hold 32 rows a warp, two
// blocks of 16 (a block of 128 query rows), each B fragment read from a
// shared tile feeding both blocks' products, and dK·dV runs 8 warps of 16
// key rows a block (128 keys a staged Q/dO tile): the same products summed
// in the same order, so the same bytes as rows16. With
// DSRT_ATTENTION_GRAD=atomic (read once; the default split is the above)
// the tensor-core backward is one kernel after delta's, FlashAttention-2's:
// dK·dV's blocks of 64 keys also add each query tile's dq += dS k over
// their keys to an f32 accumulator in the workspace by atomics, S^T and
// dP^T computed once; a last kernel rounds scale * the accumulator into dq.
//
// Scalar (f32, and a head width that is not a multiple of 16): a thread
// per query row: the block loads tiles of kTile keys and values into
// shared memory (f32), each thread scores its row against them and keeps
// an online softmax and an f32 accumulator of its output row. The backward
// has the same three kernels with a thread per key (dk, dv) or query (dq)
// row.
//
// Neither uses atomics but for DSRT_ATTENTION_GRAD=atomic's dq: every
// other sum runs in a fixed order, so the result is the same on every run
// (under atomic dk and dv still are; dq's additions from a head's key
// blocks land in the order the GPU runs them). Both address a head's rows
// as (the head's first row, a row stride) from the operands' layouts
// (kernel_common.h's AttentionLayouts): heads-major [..., T, Dh] or
// tokens-major [..., T, H, Dh] operands, or q, k, v packed in one
// [..., T, 3, H, Dh] (rows 3 H Dh apart, q, k, v and their gradients from
// offsets 0, H Dh, 2 H Dh), are read and written where they lie. The
// backward's delta and dq accumulator workspaces are heads-major whatever
// the operands' layout.
#include "cuda/common.cuh"
#include "cuda/mma.cuh"

#include <cstdlib>

namespace dsrt {

using namespace detail;

namespace {

constexpr int kRows = 64;  // query (or key) rows per block, one per thread
constexpr int kTile = 32;  // keys (or queries) per shared-memory tile
constexpr int kHead = static_cast<int>(kMaxAttentionHead);

unsigned tile_blocks(int64_t heads, int64_t t) {
  return static_cast<unsigned>(heads * ((t + kRows - 1) / kRows));
}

// Where the rows of q, k, v and their gradients (qkv), of o and do (o) and
// of lse lie; q, k and v are passed at their offsets.
using Layouts = AttentionLayouts;

// Loads rows [row0, row0 + kTile) of a [t, dh] matrix (rows `stride`
// elements apart) into dst as f32 (rows past t as zeros).
template <typename T>
__device__ void load_tile(float *dst, const T *src, int64_t row0, int64_t t, int dh,
                          int64_t stride) {
  for (int e = threadIdx.x; e < kTile * dh; e += blockDim.x) {
    const int64_t row = row0 + e / dh;
    dst[e] = row < t ? ld(src[row * stride + e % dh]) : 0.0f;
  }
}

// The block's rows (blockIdx.x is a head and a tile of kRows rows of it)
// and this thread's.
struct Rows {
  int64_t head, row0, row;
  int64_t offset, stride;          // the head's first row of a [t, dh] matrix, the row stride
  int64_t o_offset, o_stride;      // the same in o and do
  int64_t lse_offset, lse_stride;  // the same in lse
  bool active;
  // These rows addressed as o's (for o and do).
  __device__ Rows of_o() const {
    Rows r = *this;
    r.offset = o_offset;
    r.stride = o_stride;
    return r;
  }
};
__device__ inline Rows block_rows(int64_t t, const Layouts &l) {
  const int64_t tiles = (t + kRows - 1) / kRows;
  Rows r;
  r.head = blockIdx.x / tiles;
  r.row0 = (blockIdx.x % tiles) * kRows;
  r.row = r.row0 + threadIdx.x;
  r.offset = l.qkv.at(r.head, 0);
  r.stride = l.qkv.row;
  r.o_offset = l.o.at(r.head, 0);
  r.o_stride = l.o.row;
  r.lse_offset = l.lse.at(r.head, 0);
  r.lse_stride = l.lse.row;
  r.active = r.row < t;
  return r;
}

// Row `r.row` of a [t, dh] matrix of the block's head as f32 (zeros for a
// thread past t).
template <typename T>
__device__ void load_row(float *dst, const T *src, const Rows &r, int dh) {
  for (int d = 0; d < dh; ++d)
    dst[d] = r.active ? ld(src[r.offset + r.row * r.stride + d]) : 0.0f;
}

// The key tiles a block of query rows sees: each loaded, keys into ks and
// values into vs (f32); then, on the threads of real rows, f(n) with the
// tile's first n keys, those the thread's row sees.
template <typename T, typename F>
__device__ void for_key_tiles(const Rows &r, const T *k, const T *v, float *ks, float *vs,
                              int64_t t, int dh, bool causal, F &&f) {
  const int64_t keys = causal ? std::min<int64_t>(t, r.row0 + kRows) : t;
  for (int64_t j0 = 0; j0 < keys; j0 += kTile) {
    __syncthreads();
    load_tile(ks, k + r.offset, j0, t, dh, r.stride);
    load_tile(vs, v + r.offset, j0, t, dh, r.stride);
    __syncthreads();
    if (r.active)
      f(std::min<int64_t>(kTile, (causal ? r.row + 1 : t) - j0));
  }
}

template <typename T>
__global__ void attention_kernel(const T *q, const T *k, const T *v, T *o, float *lse,
                                 Layouts layout, int64_t t, int dh, float scale, bool causal) {
  __shared__ float ks[kTile * kHead];
  __shared__ float vs[kTile * kHead];
  const Rows r = block_rows(t, layout);
  float qi[kHead], acc[kHead];
  load_row(qi, q, r, dh);
  for (int d = 0; d < dh; ++d)
    acc[d] = 0.0f;
  float m = -INFINITY, l = 0.0f;
  for_key_tiles(r, k, v, ks, vs, t, dh, causal, [&](int64_t n) {
    for (int64_t j = 0; j < n; ++j) {
      float sc = 0.0f;
      for (int d = 0; d < dh; ++d)
        sc += qi[d] * ks[j * dh + d];
      sc *= scale;
      const float m_new = fmaxf(m, sc);
      const float rescale = m == m_new ? 1.0f : expf(m - m_new);
      const float p = expf(sc - m_new);
      l = l * rescale + p;
      for (int d = 0; d < dh; ++d)
        acc[d] = acc[d] * rescale + p * vs[j * dh + d];
      m = m_new;
    }
  });
  if (!r.active)
    return;
  const float inv = 1.0f / l;
  for (int d = 0; d < dh; ++d)
    o[r.o_offset + r.row * r.o_stride + d] = st<T>(acc[d] * inv);
  lse[r.lse_offset + r.row * r.lse_stride] = m + logf(l);
}

template <typename T>
__global__ void attention_delta_kernel(const T *o, const T *do_, float *delta, int64_t rows,
                                       AttentionLayout at, int64_t t, int dh) {
  // 16-bit rows whose every start is 16-byte aligned are read 16 bytes (8
  // elements) a load instead of one element a load; the sum runs over d in
  // order either way.
  constexpr bool k16 = sizeof(T) == 2;
  const bool vector = k16 && dh % 8 == 0 && at.row % 8 == 0 &&
                      (reinterpret_cast<uintptr_t>(o) | reinterpret_cast<uintptr_t>(do_)) % 16 == 0;
  DSRT_GRID_STRIDE(r, rows) {
    const int64_t offset = at.at(r / t, r % t);
    float sum = 0.0f;
    bool done = false;
    if constexpr (k16) {
      if (vector && offset % 8 == 0) {
        done = true;
        for (int d = 0; d < dh; d += 8) {
          const uint4 a = *reinterpret_cast<const uint4 *>(do_ + offset + d);
          const uint4 b = *reinterpret_cast<const uint4 *>(o + offset + d);
          const uint32_t x[4] = {a.x, a.y, a.z, a.w}, y[4] = {b.x, b.y, b.z, b.w};
          for (int j = 0; j < 8; ++j) {  // element j: the low (even j) or high half of word j / 2
            const int shift = 16 * (j % 2);
            sum += ld(T{static_cast<uint16_t>(x[j / 2] >> shift)}) *
                   ld(T{static_cast<uint16_t>(y[j / 2] >> shift)});
          }
        }
      }
    }
    if (!done)
      for (int d = 0; d < dh; ++d)
        sum += ld(do_[offset + d]) * ld(o[offset + d]);
    delta[r] = sum;
  }
}

// dk_j = scale sum_i ds_ij q_i and dv_j = sum_i p_ij do_i for the key rows
// of the block, over tiles of query rows.
template <typename T>
__global__ void attention_dkv_kernel(const T *q, const T *k, const T *v, const T *do_,
                                     const float *lse, const float *delta, T *dk, T *dv,
                                     Layouts layout, int64_t t, int dh, float scale, bool causal) {
  __shared__ float qs[kTile * kHead];
  __shared__ float dos[kTile * kHead];
  const Rows r = block_rows(t, layout);  // key rows
  const int64_t head = r.head, row0 = r.row0, j = r.row, offset = r.offset, stride = r.stride;
  const bool active = r.active;
  float kj[kHead], vj[kHead], acc_k[kHead], acc_v[kHead];
  load_row(kj, k, r, dh);
  load_row(vj, v, r, dh);
  for (int d = 0; d < dh; ++d)
    acc_k[d] = acc_v[d] = 0.0f;
  for (int64_t i0 = causal ? row0 / kTile * kTile : 0; i0 < t; i0 += kTile) {
    __syncthreads();
    load_tile(qs, q + offset, i0, t, dh, stride);
    load_tile(dos, do_ + r.o_offset, i0, t, dh, r.o_stride);
    __syncthreads();
    if (!active)
      continue;
    const int64_t last = std::min<int64_t>(kTile, t - i0);
    for (int64_t ii = causal ? std::max<int64_t>(0, j - i0) : 0; ii < last; ++ii) {
      const int64_t i = i0 + ii;
      float sc = 0.0f, dp = 0.0f;
      for (int d = 0; d < dh; ++d) {
        sc += qs[ii * dh + d] * kj[d];
        dp += dos[ii * dh + d] * vj[d];
      }
      const float p = expf(scale * sc - lse[r.lse_offset + i * r.lse_stride]);
      const float g = p * (dp - delta[head * t + i]);
      for (int d = 0; d < dh; ++d) {
        acc_k[d] += g * qs[ii * dh + d];
        acc_v[d] += p * dos[ii * dh + d];
      }
    }
  }
  if (!active)
    return;
  for (int d = 0; d < dh; ++d) {
    dk[offset + j * stride + d] = st<T>(scale * acc_k[d]);
    dv[offset + j * stride + d] = st<T>(acc_v[d]);
  }
}

// dq_i = scale sum_j ds_ij k_j for the query rows of the block, over tiles
// of key rows.
template <typename T>
__global__ void attention_dq_kernel(const T *q, const T *k, const T *v, const T *do_,
                                    const float *lse, const float *delta, T *dq, Layouts layout,
                                    int64_t t, int dh, float scale, bool causal) {
  __shared__ float ks[kTile * kHead];
  __shared__ float vs[kTile * kHead];
  const Rows r = block_rows(t, layout);
  float qi[kHead], doi[kHead], acc[kHead];
  load_row(qi, q, r, dh);
  load_row(doi, do_, r.of_o(), dh);
  for (int d = 0; d < dh; ++d)
    acc[d] = 0.0f;
  const float lse_i = r.active ? lse[r.lse_offset + r.row * r.lse_stride] : 0.0f;
  const float delta_i = r.active ? delta[r.head * t + r.row] : 0.0f;
  for_key_tiles(r, k, v, ks, vs, t, dh, causal, [&](int64_t n) {
    for (int64_t j = 0; j < n; ++j) {
      float sc = 0.0f, dp = 0.0f;
      for (int d = 0; d < dh; ++d) {
        sc += qi[d] * ks[j * dh + d];
        dp += doi[d] * vs[j * dh + d];
      }
      const float p = expf(scale * sc - lse_i);
      const float g = p * (dp - delta_i);
      for (int d = 0; d < dh; ++d)
        acc[d] += g * ks[j * dh + d];
    }
  });
  if (!r.active)
    return;
  for (int d = 0; d < dh; ++d)
    dq[r.offset + r.row * r.stride + d] = st<T>(scale * acc[d]);
}

//===----------------------------------------------------------------------===//
// Tensor cores (f16, bf16; Dh a multiple of 16)
//===----------------------------------------------------------------------===//

constexpr int kMmaWarps = 4;
constexpr int kMmaThreads = 32 * kMmaWarps;
constexpr int kMmaTile = 64;         // keys (or queries) per shared-memory tile
constexpr int kMmaN = kMmaTile / 8;  // accumulator tiles across a tile's keys
// A warp holds M blocks of 16 query (or key) rows, the A fragments of each
// product: M = 1 (rows16) or, in the forward and dQ kernels at Dh <= 64
// when DSRT_ATTENTION_KERNEL=rows32, M = 2, each B fragment loaded from a
// shared tile then feeding both row blocks' products. A block has W warps:
// kMmaWarps, or with rows32 at Dh <= 64 8 in dK·dV (whose warps keep one
// row block: the key rows' A fragments and two accumulators leave no
// registers for a second), so that each Q and dO tile staged serves 128
// keys. The block's rows:
template <int M, int W = kMmaWarps> constexpr int mma_block_rows() { return 16 * M * W; }
static_assert(mma_block_rows<1>() % kMmaTile == 0 && mma_block_rows<2>() % kMmaTile == 0 &&
                  mma_block_rows<1, 8>() % kMmaTile == 0,
              "the causal loops start and stop at block boundaries");
template <int M, int W = kMmaWarps> unsigned mma_blocks(int64_t heads, int64_t t) {
  constexpr int kRowsPerBlock = mma_block_rows<M, W>();
  return static_cast<unsigned>(heads * ((t + kRowsPerBlock - 1) / kRowsPerBlock));
}

// DSRT_ATTENTION_KERNEL, read once: rows16 (unset or empty: the default)
// or rows32, the row blocks a warp of the forward and dQ kernels holds at
// Dh <= 64 (1 or 2); anything else is an error.
int mma_warp_blocks() {
  static const int m = env_second("DSRT_ATTENTION_KERNEL", "rows16", "rows32") ? 2 : 1;
  return m;
}
// f(std::integral_constant<int, M>{}) with M the row blocks a warp of the
// forward and dQ kernels holds at head width D: DSRT_ATTENTION_KERNEL's at
// D = 64, one at 128 (two would not fit the registers).
template <int D, typename F> void with_mma_warp_blocks(F &&f) {
  if constexpr (D == 64) {
    if (mma_warp_blocks() == 2) {
      f(std::integral_constant<int, 2>{});
      return;
    }
  }
  f(std::integral_constant<int, 1>{});
}

// DSRT_ATTENTION_FORWARD_BLOCKS, read once: 4 (unset or empty: the
// default) or 3, the blocks of 4 warps a multiprocessor holds in the
// rows16 forward at Dh <= 64. With 4 the kernel is compiled for 4
// (__launch_bounds__: at most 128 registers a thread, where the compiler
// takes 139 and gets 3; ptxas: two values spilled, reloaded from L1 about
// twice a key tile): 16 warps to hide the waits between a tile's products
// and its softmax, where 3 blocks give 12 (docs/benchmarks.md: with 8,
// rows32, the forward was slower). 3: the compiler's registers. Anything
// else is an error.
int forward_blocks() {
  static const int b = env_second("DSRT_ATTENTION_FORWARD_BLOCKS", "4", "3") ? 3 : 4;
  return b;
}

// DSRT_ATTENTION_DQ_BLOCKS, read once: 3 (unset or empty: the default)
// or 2, the blocks of 4 warps a multiprocessor holds in the split
// backward's rows16 dQ kernel at Dh <= 64, as DSRT_ATTENTION_FORWARD_BLOCKS
// for the forward: 3 compiles it for 3 (at most 168 registers a thread,
// where the compiler takes 174 and gets 2; ptxas: five values spilled,
// about ten local loads and stores a key tile, from L1), 12 warps where 2
// blocks give 8; 2: the compiler's registers. (dK·dV capped so would
// spill 0.5 KB.) Anything else is an error.
int dq_blocks() {
  static const int b = env_second("DSRT_ATTENTION_DQ_BLOCKS", "3", "2") ? 2 : 3;
  return b;
}

// DSRT_ATTENTION_GRAD, read once: split (unset or empty: the default;
// attention_dkv_kernel then attention_dq_kernel) or atomic
// (attention_dkvq_kernel, dq by f32 atomics: not the same bytes every run
// on a GPU), the tensor-core backward; anything else is an error.
bool attention_grad_atomic() {
  static const bool atomic = env_second("DSRT_ATTENTION_GRAD", "split", "atomic");
  return atomic;
}

bool use_mma(DType dtype, int64_t dh) {
  return (dtype == DType::F16 || dtype == DType::BF16) && dh % 16 == 0;
}

// Calls f(std::integral_constant<int, D>{}) with D the head width the mma
// kernels are instantiated for that covers dh (64 or 128).
template <typename F> void with_mma_width(int64_t dh, F &&f) {
  if (dh <= 64)
    f(std::integral_constant<int, 64>{});
  else
    f(std::integral_constant<int, 128>{});
}

// Shared-memory tiles hold kMmaTile rows of D (the head width rounded up to
// 64 or 128) 16-bit elements, each row padded by 8 elements (16 bytes): a
// row is D + 8 elements, 16 (mod 128) bytes, so the 8 rows an ldmatrix
// phase reads (16 bytes each, at the same column) start 4 banks apart and
// cover the 32 banks once (no bank conflict), and every row and every
// 8-column block of it starts 16-byte aligned, as ldmatrix's row addresses
// and cp.async's 16-byte copies need. Padding, not an XOR swizzle, keeps
// the tile a plain (pointer, row stride) matrix for the fragment loads.
template <int D> constexpr int mma_ld() { return D + 8; }
// A kernel streams its two tiles through S shared-memory stages each: two
// (double buffering: the copy of the next tile overlaps the products of
// this one) wherever the device gives the room, else one. At D = 64 two
// stages of the two tiles are 36 KiB, static shared memory (at most 48 KiB
// a block); at D = 128 they are 68 KiB (70 KiB with dK·dV's lse and
// delta), dynamic shared memory that the kernel opts in to
// (opt_in_dynamic_shared: once per kernel, up to the device's per-block
// opt-in limit, 227 KiB on sm_90); a device whose limit is lower gets the
// one-stage form (34 KiB, static).
template <int D, int S> using MmaStages = uint16_t[S][kMmaTile * mma_ld<D>()];
// The shared memory of the forward and dQ kernels (K and V tiles) ...
template <int D, int S> struct MmaKeyTiles {
  MmaStages<D, S> a, b;
};
// ... and of dK·dV's (Q and dO tiles, and the lse and delta of their rows).
template <int D, int S> struct MmaQueryTiles {
  MmaStages<D, S> a, b;
  float lse[S][kMmaTile], delta[S][kMmaTile];
};
// ... and of the one-pass dK·dV·dQ's (DSRT_ATTENTION_GRAD=atomic):
// dK·dV's, the block's tile of keys (staged once: the B operand of dS k)
// and the block's dS^T (its 64 keys x a tile's 64 queries, rounded to 16
// bits: the A operand of dS k, each warp writing its 16 keys' rows).
constexpr int kDsLd = mma_ld<kMmaTile>();  // dS^T's row: 64 queries and the padding
template <int D, int S> struct MmaQueryKeyTiles {
  MmaQueryTiles<D, S> query;
  uint16_t k[kMmaTile * mma_ld<D>()];
  uint16_t ds[kMmaTile * kDsLd];
};
// Whether a kernel's shared memory `Shared` is dynamic: more than a block's
// static shared memory may be.
template <typename Shared> constexpr bool in_dynamic_shared() {
  return sizeof(Shared) > kStaticSharedBytes;
}
// The kernel's shared memory: dynamic (extern, the launch's third
// argument, launch_shared_bytes) or static.
template <typename Shared> __device__ inline Shared &mma_shared() {
  if constexpr (in_dynamic_shared<Shared>()) {
    extern __shared__ __align__(16) uint16_t mma_dynamic_shared[];
    return *reinterpret_cast<Shared *>(mma_dynamic_shared);
  } else {
    __shared__ __align__(16) Shared shared;
    return shared;
  }
}
template <typename Shared> constexpr size_t launch_shared_bytes() {
  return in_dynamic_shared<Shared>() ? sizeof(Shared) : 0;
}

// Starts copying rows [row0, row0 + kMmaTile) of N matrices with `cols`
// columns (a multiple of 16) and the same row stride, row r of matrix i
// at src[i] + r * ld, into dst[i], as their 16 bits (rows past t as
// zeros): cp.async, 16 bytes a copy, where every src[i] and ld keep the
// rows 16-byte aligned, else element by element. The copies are complete
// after cp_async_commit, cp_async_wait and a barrier. N = 2 stages a K and
// a V tile with one thread's index arithmetic for both.
template <typename T, int D, int Threads = kMmaThreads, int N = 1>
__device__ void stage_tiles(uint16_t *const (&dst)[N], const T *const (&src)[N], int64_t ld,
                            int64_t row0, int64_t t, int cols) {
  const uint16_t *from[N];
  uintptr_t bits = static_cast<uintptr_t>(ld) * 2;
#pragma unroll
  for (int i = 0; i < N; ++i) {
    from[i] = reinterpret_cast<const uint16_t *>(src[i]);
    bits |= reinterpret_cast<uintptr_t>(from[i]);
  }
  if (bits % 16 == 0) {
    // D / 8 chunks a row; thread x copies chunk x % (D / 8) of rows
    // x / (D / 8) + i kRowStep: one column for all its copies, so a thread
    // whose chunk lies past cols has none (those are never read), and the
    // source advances by a constant. Each copy is one cp.async, zero-filled
    // for rows past t (src-size 0, from the tile's first row: a real one),
    // with no branch. Not unrolled: unrolled, the copies' addresses are
    // hoisted out of the tile loop into registers (ptxas: the D = 128
    // forward 55 registers more, dK·dV and dQ spilling). Each copy costs
    // about ten instructions; the form before this one, a chunk index
    // divided into row and column per copy, about 34 (sm_90 SASS).
    constexpr int kChunks = D / 8;
    constexpr int kRowStep = Threads / kChunks;
    static_assert(Threads % kChunks == 0 && kMmaTile % kRowStep == 0,
                  "whole rounds of the block's threads");
    const int rows = static_cast<int>(std::min<int64_t>(kMmaTile, t - row0));
    if constexpr (D > 64) {
      // At D = 128 the kernels have no registers for the thread's hoisted
      // column and source (ptxas: dQ's spill loads 24 -> 80 bytes, dK·dV's
      // 60 -> 76), so each copy divides its chunk index again.
#pragma unroll 1
      for (int e0 = 0; e0 < kMmaTile * kChunks; e0 += Threads) {
        const int e = e0 + static_cast<int>(threadIdx.x);
        const int r = e / kChunks, d = e % kChunks * 8;
        if (d >= cols)
          continue;
        const int64_t at = (row0 + (r < rows ? r : 0)) * ld + d;
#pragma unroll
        for (int i = 0; i < N; ++i)
          cp_async_zfill<16>(dst[i] + r * mma_ld<D>() + d, from[i] + at, r < rows);
      }
      return;
    }
    const int r0 = static_cast<int>(threadIdx.x) / kChunks;
    const int d = static_cast<int>(threadIdx.x) % kChunks * 8;
    if (d >= cols)
      return;
    const int64_t first = row0 * ld + d;  // row0 < t: a real row
    const int64_t step = kRowStep * ld;
    int64_t at = first + r0 * ld;
    int to = r0 * mma_ld<D>() + d;
#pragma unroll 1
    for (int r = r0; r < kMmaTile; r += kRowStep) {
      const bool real = r < rows;
      const int64_t from_at = real ? at : first;
#pragma unroll
      for (int i = 0; i < N; ++i)
        cp_async_zfill<16>(dst[i] + to, from[i] + from_at, real);
      at += step;
      to += kRowStep * mma_ld<D>();
    }
    return;
  }
  for (int e = threadIdx.x; e < kMmaTile * cols; e += blockDim.x) {
    const int r = e / cols, d = e % cols;
#pragma unroll
    for (int i = 0; i < N; ++i)
      dst[i][r * mma_ld<D>() + d] = row0 + r < t ? from[i][(row0 + r) * ld + d] : uint16_t(0);
  }
}
// One matrix.
template <typename T, int D, int Threads = kMmaThreads>
__device__ void stage_tile(uint16_t *dst, const T *src, int64_t ld, int64_t row0, int64_t t,
                           int cols) {
  uint16_t *const dsts[1] = {dst};
  const T *const srcs[1] = {src};
  stage_tiles<T, D, Threads, 1>(dsts, srcs, ld, row0, t, cols);
}

// f(first row, stage) for the tiles of kMmaTile rows from `first` before
// `end`, stage(first row, s) having started the copies of the tile into
// stage s (stage_tile). With two stages the next tile's copies are started
// before this tile is waited for and used; with one, after it is used.
template <int Stages, typename S, typename F>
__device__ void for_staged_tiles(int64_t first, int64_t end, S &&stage, F &&f) {
  static_assert(Stages == 1 || Stages == 2, "one or two stages");
  if (first >= end)
    return;
  stage(first, 0);
  cp_async_commit();
  int s = 0;
  for (int64_t j0 = first; j0 < end; j0 += kMmaTile) {
    const bool next = j0 + kMmaTile < end;
    if constexpr (Stages == 2) {
      if (next)  // into the other stage, free since the barrier ending the last tile
        stage(j0 + kMmaTile, s ^ 1);
      cp_async_commit();
      cp_async_wait<1>();  // all but the group just committed: this tile
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    f(j0, s);
    __syncthreads();
    if constexpr (Stages == 2) {
      s ^= 1;
    } else if (next) {
      stage(j0 + kMmaTile, 0);
      cp_async_commit();
    }
  }
}

// The block (a head and a tile of mma_block_rows<M>() rows of it) and the
// warp's 16 M rows: M row blocks of 16, block mb from wrow0 + 16 mb.
struct WarpRows {
  int64_t head, row0, end;         // the block's head, first row and end (row0 + its rows)
  int64_t offset, stride;          // the head's first row of a [t, dh] matrix, the row stride
  int64_t o_offset, o_stride;      // the same in o and do
  int64_t lse_offset, lse_stride;  // the same in lse
  int64_t wrow0;                   // the warp's first row
  int span;                        // the warp's rows, 16 M
  int rows;                        // of those, the ones before t
  int g, c;                        // the lane's group (row) and column pair in a fragment
  // These rows addressed as o's (for o and do).
  __device__ WarpRows of_o() const {
    WarpRows w = *this;
    w.offset = o_offset;
    w.stride = o_stride;
    return w;
  }
};
// last_first: the block order takes a head's last tile of rows first (a
// causal forward's or dQ's heaviest: it sees the most keys), so that the
// light tiles fill the grid's tail; otherwise the first (dK·dV's heaviest).
template <int M, int W = kMmaWarps>
__device__ inline WarpRows warp_rows(int64_t t, const Layouts &l, bool last_first) {
  constexpr int kRowsPerBlock = mma_block_rows<M, W>();
  const int64_t tiles = (t + kRowsPerBlock - 1) / kRowsPerBlock;
  WarpRows w;
  w.head = blockIdx.x / tiles;
  const int64_t tile = blockIdx.x % tiles;
  w.row0 = (last_first ? tiles - 1 - tile : tile) * kRowsPerBlock;
  w.end = w.row0 + kRowsPerBlock;
  w.offset = l.qkv.at(w.head, 0);
  w.stride = l.qkv.row;
  w.o_offset = l.o.at(w.head, 0);
  w.o_stride = l.o.row;
  w.lse_offset = l.lse.at(w.head, 0);
  w.lse_stride = l.lse.row;
  w.span = 16 * M;
  w.wrow0 = w.row0 + w.span * (threadIdx.x / 32);
  w.rows = static_cast<int>(std::max<int64_t>(0, std::min<int64_t>(w.span, t - w.wrow0)));
  w.g = threadIdx.x % 32 / 4;
  w.c = threadIdx.x % 4;
  return w;
}

// The warp's row block mb (16 rows) of a [t, dh] matrix of the block's
// head, columns [16 kk, 16 kk + 16), as an A fragment (rows past t as zeros).
template <typename T>
__device__ inline FragA row_frag(const T *m, const WarpRows &w, int dh, int kk, int mb = 0) {
  const uint16_t *base =
      reinterpret_cast<const uint16_t *>(m + w.offset) + (w.wrow0 + 16 * mb) * w.stride;
  return load_frag_a(base + 16 * kk, w.stride, 1, w.rows - 16 * mb);
}
// All of them, held in registers.
template <typename T, int D, int M>
__device__ void load_rows(FragA (&a)[M][D / 16], const T *m, const WarpRows &w, int dh) {
#pragma unroll
  for (int mb = 0; mb < M; ++mb)
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk)
      if (16 * kk < dh)
        a[mb][kk] = row_frag(m, w, dh, kk, mb);
}

template <int M, int N> __device__ inline void zero(FragC (&f)[M][N]) {
#pragma unroll
  for (int mb = 0; mb < M; ++mb)
#pragma unroll
    for (int n = 0; n < N; ++n)
      f[mb][n] = FragC{{0.0f, 0.0f, 0.0f, 0.0f}};
}

// f(std::true_type{}) when the head width dh is the kernel's D (every
// column block taken: the products' loops without a test per block, the
// common case), else f(std::false_type{}) (the loops stop at dh).
template <int D, typename F> __device__ inline void with_width(int dh, F &&f) {
  if (dh == D)
    f(std::true_type{});
  else
    f(std::false_type{});
}

// s[mb][n] += a b^T for the N rows of a shared tile from `tile` (b^T's
// columns): scores of the warp's row blocks against those rows; a(mb, kk)
// is the A fragment of row block mb's columns [16 kk, 16 kk + 16). Each B
// fragment, loaded once, feeds the M row blocks' products.
template <typename T, int D, int M, int N, typename A>
__device__ void mma_rows_tile(FragC (&s)[M][N / 8], A &&a, const uint16_t *tile, int dh) {
  const uint16_t *lane_tile = tile + frag_b_nk_offset(mma_ld<D>());
  with_width<D>(dh, [&](auto full) {
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      if (!full && 16 * kk >= dh)
        break;
      FragA frag[M];
#pragma unroll
      for (int mb = 0; mb < M; ++mb)
        frag[mb] = a(mb, kk);
#pragma unroll
      for (int n = 0; n < N / 8; n += 2) {
        FragB b[2];
        load_frag_b_at<false>(b, lane_tile + 8 * n * mma_ld<D>() + 16 * kk);
#pragma unroll
        for (int mb = 0; mb < M; ++mb) {
          mma_16x8x16<T>(s[mb][n], frag[mb], b[0]);
          mma_16x8x16<T>(s[mb][n + 1], frag[mb], b[1]);
        }
      }
    }
  });
}

// acc[mb][n] += p[mb] tile: p (the warp's rows x N, accumulator tiles
// rounded to 16 bits) times the shared tile's N rows from `tile` (N x dh),
// each B fragment feeding the M row blocks' products.
template <typename T, int D, int M, int N>
__device__ void mma_p_tile(FragC (&acc)[M][D / 8], const FragC (&p)[M][N / 8],
                           const uint16_t *tile, int dh) {
  const uint16_t *lane_tile = tile + frag_b_kn_offset(mma_ld<D>());
  with_width<D>(dh, [&](auto full) {
#pragma unroll
    for (int kk = 0; kk < N / 16; ++kk) {
      FragA a[M];
#pragma unroll
      for (int mb = 0; mb < M; ++mb)
        a[mb] = frag_a_of<T>(p[mb][2 * kk], p[mb][2 * kk + 1]);
#pragma unroll
      for (int n = 0; n < D / 8; n += 2)
        if (full || 8 * n < dh) {  // and 8 (n + 1) < dh: dh is a multiple of 16
          FragB b[2];
          load_frag_b_at<true>(b, lane_tile + 16 * kk * mma_ld<D>() + 8 * n);
#pragma unroll
          for (int mb = 0; mb < M; ++mb) {
            mma_16x8x16<T>(acc[mb][n], a[mb], b[0]);
            mma_16x8x16<T>(acc[mb][n + 1], a[mb], b[1]);
          }
        }
    }
  });
}

// Stores the warp's rows of acc * factor(mb, h) (mb: the row block; h: the
// lane's row g or g + 8 of it) into a [t, dh] matrix of the block's head.
template <typename T, int D, int M, typename F>
__device__ void store_rows(T *dst, const FragC (&acc)[M][D / 8], const WarpRows &w, int dh,
                           F &&factor) {
#pragma unroll
  for (int mb = 0; mb < M; ++mb)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = 16 * mb + w.g + 8 * h;
      if (r >= w.rows)
        continue;
      const float f = factor(mb, h);
      T *row = dst + w.offset + (w.wrow0 + r) * w.stride;
#pragma unroll
      for (int n = 0; n < D / 8; ++n)
        if (8 * n < dh) {
          row[8 * n + 2 * w.c] = st<T>(acc[mb][n].x[2 * h] * f);
          row[8 * n + 2 * w.c + 1] = st<T>(acc[mb][n].x[2 * h + 1] * f);
        }
    }
}

// Whether element i of accumulator tile n (rows of the warp's row block mb,
// columns of a tile from col0) is a real, unmasked pair: row and column
// before t, and for causal attention the key (column or row,
// `keys_are_rows`) not after the query.
__device__ inline bool visible(const WarpRows &w, int mb, int n, int i, int64_t col0, int64_t t,
                               bool causal, bool keys_are_rows) {
  const int64_t row = w.wrow0 + 16 * mb + w.g + 8 * (i / 2);
  const int64_t col = col0 + 8 * n + 2 * w.c + i % 2;
  if (row >= t || col >= t)
    return false;
  return !causal || (keys_are_rows ? row <= col : col <= row);
}

// Whether the `cols` columns from col0 have, for some real row of the
// warp, a masked element (visible false): a column past t, or for causal
// attention one the row does not see. Rows past t need no mask (their
// results are not stored, and their operands are zeros). Warp-uniform: the
// tiles that need none (all but the diagonal ones and the last) skip
// visible's per-element test.
__device__ inline bool tile_masked(const WarpRows &w, int64_t col0, int cols, int64_t t,
                                   bool causal, bool keys_are_rows) {
  if (col0 + cols > t)
    return true;
  if (!causal)
    return false;
  // Rows wrow0 .. wrow0 + span - 1 against columns col0 .. col0 + cols - 1.
  return keys_are_rows ? w.wrow0 + w.span - 1 > col0 : col0 + cols - 1 > w.wrow0;
}

// Whether no real query row of the warp (rows are queries, columns keys)
// sees a key from col0 on: the warp has none before t, or the keys lie
// past t or, causal, after all its rows. Warp-uniform: the warp skips
// those keys' products (every probability would be zero). Tested with two
// row blocks a warp only: a causal block's first warps see none of its
// last tile, and dQ's halves of 32 keys may lie past t. With one, every
// tile a block streams has a key each warp with a real row sees, and the
// test cost the kernels registers (ptxas: the one-stage Dh 128 forward 19
// more).
__device__ inline bool warp_sees_none(const WarpRows &w, int64_t col0, int64_t t, bool causal) {
  return w.rows == 0 || col0 >= t || (causal && col0 > w.wrow0 + w.span - 1);
}

// f(std::true_type{}) where a tile needs its masks (tile_masked), else
// f(std::false_type{}): two copies of the tile's elementwise work, the
// per-element test compiled only into the first.
template <typename F> __device__ inline void with_mask(bool masked, F &&f) {
  if (masked)
    f(std::true_type{});
  else
    f(std::false_type{});
}

// log2(e): the kernels' exponentials are exp2_ftz (cuda/common.cuh) of
// scores scaled by scale * log2(e) (one multiply-add and the hardware's
// ex2), their maximum and the saved lse (natural log) converted at the
// ends.
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// The key tiles the block's query rows see (causal: up to the diagonal
// tile), each staged, keys into ks and values into vs, then f(first key,
// key tile, value tile).
template <typename T, int D, int S, typename F>
__device__ void for_mma_key_tiles(const WarpRows &w, const T *k, const T *v, MmaStages<D, S> &ks,
                                  MmaStages<D, S> &vs, int64_t t, int dh, bool causal, F &&f) {
  const int64_t keys = causal ? std::min<int64_t>(t, w.end) : t;
  for_staged_tiles<S>(
      0, keys,
      [&](int64_t j0, int s) {
        uint16_t *const dst[2] = {ks[s], vs[s]};
        const T *const src[2] = {k + w.offset, v + w.offset};
        stage_tiles<T, D, kMmaThreads, 2>(dst, src, w.stride, j0, t, dh);
      },
      [&](int64_t j0, int s) { f(j0, ks[s], vs[s]); });
}

// The forward's body, in two kernels: attention_kernel (the compiler's
// registers) and attention_capped_kernel (B blocks a multiprocessor:
// __launch_bounds__'s minimum caps a thread's registers at 65536 / (128 B);
// forward_blocks). A minimum of 1 is not the same as none: ptxas then
// takes more registers (the D = 64 kernel 166 where it took 141 without).
template <typename T, int D, int S, int M>
__device__ __forceinline__ void attention_body(const T *q, const T *k, const T *v, T *o,
                                               float *lse, const Layouts &layout, int64_t t,
                                               int dh, float scale, bool causal) {
  MmaKeyTiles<D, S> &tiles = mma_shared<MmaKeyTiles<D, S>>();
  MmaStages<D, S> &ks = tiles.a, &vs = tiles.b;
  const WarpRows w = warp_rows<M>(t, layout, causal);
  FragA qa[M][D / 16];
  load_rows<T, D, M>(qa, q, w, dh);
  FragC acc[M][D / 8];
  zero(acc);
  // Row g (h = 0) and g + 8 (h = 1) of each row block mb of the warp:
  // running maximum (of the scores times scale log2(e)), and this lane's
  // part of the running sum (its columns; the 4 lanes of a row add theirs
  // at the end).
  float m[M][2], l[M][2];
#pragma unroll
  for (int mb = 0; mb < M; ++mb)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      m[mb][h] = -INFINITY;
      l[mb][h] = 0.0f;
    }
  const float scale2 = scale * kLog2e;
  for_mma_key_tiles<T, D, S>(w, k, v, ks, vs, t, dh, causal,
                             [&](int64_t j0, const uint16_t *kt, const uint16_t *vt) {
    if (M > 1 && warp_sees_none(w, j0, t, causal))
      return;
    FragC s[M][kMmaN];
    zero(s);
    mma_rows_tile<T, D, M, kMmaTile>(s, [&](int mb, int kk) { return qa[mb][kk]; }, kt, dh);
    with_mask(tile_masked(w, j0, kMmaTile, t, causal, false), [&](auto masked) {
#pragma unroll
      for (int mb = 0; mb < M; ++mb)
#pragma unroll
        for (int n = 0; n < kMmaN; ++n)
#pragma unroll
          for (int i = 0; i < 4; ++i)
            s[mb][n].x[i] = !masked || visible(w, mb, n, i, j0, t, causal, false)
                                ? scale2 * s[mb][n].x[i]
                                : -INFINITY;
    });
#pragma unroll
    for (int mb = 0; mb < M; ++mb) {
      float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
      for (int n = 0; n < kMmaN; ++n)
#pragma unroll
        for (int i = 0; i < 4; ++i)
          mx[i / 2] = fmaxf(mx[i / 2], s[mb][n].x[i]);
      float base[2], rescale[2];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 1));
        mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 2));
        const float m_new = fmaxf(m[mb][h], mx[h]);
        // A row with no key yet keeps zeros (exp(-inf) = 0, never inf - inf).
        base[h] = m_new == -INFINITY ? 0.0f : m_new;
        rescale[h] = exp2_ftz(m[mb][h] - base[h]);
        m[mb][h] = m_new;
        l[mb][h] *= rescale[h];
      }
      // Where no row of the warp's block has a new maximum every factor is
      // exp2(0) = 1 and the warp skips the D / 2 multiplies (after a
      // block's first key tiles, most tiles); the results are the same.
      if (__any_sync(0xffffffffu, rescale[0] != 1.0f || rescale[1] != 1.0f)) {
#pragma unroll
        for (int n = 0; n < D / 8; ++n)
#pragma unroll
          for (int i = 0; i < 4; ++i)
            acc[mb][n].x[i] *= rescale[i / 2];
      }
#pragma unroll
      for (int n = 0; n < kMmaN; ++n)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          s[mb][n].x[i] = exp2_ftz(s[mb][n].x[i] - base[i / 2]);
          l[mb][i / 2] += s[mb][n].x[i];
        }
    }
    mma_p_tile<T, D, M, kMmaTile>(acc, s, vt, dh);
  });
#pragma unroll
  for (int mb = 0; mb < M; ++mb)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      l[mb][h] += __shfl_xor_sync(0xffffffffu, l[mb][h], 1);
      l[mb][h] += __shfl_xor_sync(0xffffffffu, l[mb][h], 2);
    }
  store_rows<T, D, M>(o, acc, w.of_o(), dh, [&](int mb, int h) { return 1.0f / l[mb][h]; });
#pragma unroll
  for (int mb = 0; mb < M; ++mb)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = 16 * mb + w.g + 8 * h;
      if (w.c == 0 && r < w.rows)
        lse[w.lse_offset + (w.wrow0 + r) * w.lse_stride] = m[mb][h] * kLn2 + logf(l[mb][h]);
    }
}

template <typename T, int D, int S, int M>
__global__ void __launch_bounds__(kMmaThreads)
    attention_kernel(const T *q, const T *k, const T *v, T *o, float *lse, Layouts layout,
                     int64_t t, int dh, float scale, bool causal) {
  attention_body<T, D, S, M>(q, k, v, o, lse, layout, t, dh, scale, causal);
}
template <typename T, int D, int S, int M, int B>
__global__ void __launch_bounds__(kMmaThreads, B)
    attention_capped_kernel(const T *q, const T *k, const T *v, T *o, float *lse,
                            Layouts layout, int64_t t, int dh, float scale, bool causal) {
  attention_body<T, D, S, M>(q, k, v, o, lse, layout, t, dh, scale, causal);
}

// The warp's rows of k (or v) in dK·dV's products as mma_rows_tile takes
// them, f(row block, kk): A fragments held in registers (`held`, loaded
// here) up to D = 64; at 128 there is no room beside the two accumulators
// (ptxas spills), so each query tile loads them again (from L1 or L2).
template <typename T, int D>
__device__ inline auto key_row_frags(FragA (&held)[1][D / 16], const T *m, const WarpRows &w,
                                     int dh) {
  if constexpr (D <= 64)
    load_rows<T, D, 1>(held, m, w, dh);
  return [&held, m, &w, dh](int, int kk) {
    if constexpr (D <= 64)
      return held[0][kk];
    else
      return row_frag(m, w, dh, kk);
  };
}

// Starts staging dK·dV's query tile from i0 into stage st: its rows of q
// and do (stage_tile, Threads a block) and their lse and delta (zeros past
// t), these too by cp.async (4 bytes a copy): loaded into registers and
// stored, each store waited for its load, so that the warps staging them
// came late to the tile's barrier by a load's latency every tile, and the
// others waited for them (sm_90 SASS: LDG, then STS of its register).
template <typename T, int D, int S, int Threads>
__device__ void stage_query_tile(MmaQueryTiles<D, S> &tiles, int st, int64_t i0, const T *q,
                                 const T *do_, const float *lse, const float *delta,
                                 const WarpRows &w, int64_t t, int dh) {
  stage_tile<T, D, Threads>(tiles.a[st], q + w.offset, w.stride, i0, t, dh);
  stage_tile<T, D, Threads>(tiles.b[st], do_ + w.o_offset, w.o_stride, i0, t, dh);
  for (int r = threadIdx.x; r < kMmaTile; r += blockDim.x) {
    const bool real = i0 + r < t;
    const int64_t i = real ? i0 + r : i0;  // a real row's address either way
    cp_async_zfill<4>(&tiles.lse[st][r], lse + w.lse_offset + i * w.lse_stride, real);
    cp_async_zfill<4>(&tiles.delta[st][r], delta + w.head * t + i, real);
  }
}

// dK·dV's products with stage st's query tile (from i0) for the warp's 16
// keys: S^T = k q^T and dP^T = v do^T, then P^T into s1 and dS^T into dp1
// (the warp's keys x the tile's queries, f32).
template <typename T, int D, typename KF, typename VF>
__device__ inline void dkv_tile(FragC (&s1)[1][kMmaN], FragC (&dp1)[1][kMmaN], KF &&k_frag,
                                VF &&v_frag, const uint16_t *qt, const uint16_t *dot,
                                const float *lse_t, const float *delta_t, const WarpRows &w,
                                int64_t i0, int64_t t, int dh, float scale2, bool causal) {
  FragC(&s)[kMmaN] = s1[0];
  FragC(&dp)[kMmaN] = dp1[0];
  zero(s1);
  zero(dp1);
  mma_rows_tile<T, D, 1, kMmaTile>(s1, k_frag, qt, dh);
  mma_rows_tile<T, D, 1, kMmaTile>(dp1, v_frag, dot, dh);
  // P^T = exp2(S^T scale log2(e) - lse log2(e)), masked to zeros where
  // the tile needs it.
  with_mask(tile_masked(w, i0, kMmaTile, t, causal, true), [&](auto masked) {
#pragma unroll
    for (int n = 0; n < kMmaN; ++n) {
      const float2 lse2 = *reinterpret_cast<const float2 *>(lse_t + 8 * n + 2 * w.c);
      const float lse_x = lse2.x * kLog2e, lse_y = lse2.y * kLog2e;
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float p = exp2_ftz(fmaf(scale2, s[n].x[i], -(i % 2 ? lse_y : lse_x)));
        s[n].x[i] = !masked || visible(w, 0, n, i, i0, t, causal, true) ? p : 0.0f;
      }
    }
  });
#pragma unroll
  for (int n = 0; n < kMmaN; ++n) {
    const float2 delta2 = *reinterpret_cast<const float2 *>(delta_t + 8 * n + 2 * w.c);
#pragma unroll
    for (int i = 0; i < 4; ++i)
      dp[n].x[i] = s[n].x[i] * (dp[n].x[i] - (i % 2 ? delta2.y : delta2.x));
  }
}

// dk = scale dS^T q and dv = P^T do for the warp's 16 key rows, over tiles
// of kMmaTile queries; W warps a block.
template <typename T, int D, int S, int W>
__global__ void __launch_bounds__(32 * W)
    attention_dkv_kernel(const T *q, const T *k, const T *v, const T *do_, const float *lse,
                         const float *delta, T *dk, T *dv, Layouts layout, int64_t t, int dh,
                         float scale, bool causal) {
  MmaQueryTiles<D, S> &tiles = mma_shared<MmaQueryTiles<D, S>>();
  const WarpRows w = warp_rows<1, W>(t, layout, false);  // key rows
  const float scale2 = scale * kLog2e;
  // The warp's rows of k and v as A fragments, as key_row_frags gives them
  // (held up to D = 64, loaded again per query tile at 128), written out:
  // through the helper ptxas spilled more at D = 128 (60 -> 72 bytes of
  // spill loads in the two-stage form).
  constexpr bool kHold = D <= 64;
  FragA ka[1][D / 16], va[1][D / 16];
  if constexpr (kHold) {
    load_rows<T, D, 1>(ka, k, w, dh);
    load_rows<T, D, 1>(va, v, w, dh);
  }
  auto k_frag = [&](int, int kk) {
    if constexpr (kHold)
      return ka[0][kk];
    else
      return row_frag(k, w, dh, kk);
  };
  auto v_frag = [&](int, int kk) {
    if constexpr (kHold)
      return va[0][kk];
    else
      return row_frag(v, w, dh, kk);
  };
  FragC acc_k[1][D / 8], acc_v[1][D / 8];
  zero(acc_k);
  zero(acc_v);
  auto stage = [&](int64_t i0, int st) {
    stage_query_tile<T, D, S, 32 * W>(tiles, st, i0, q, do_, lse, delta, w, t, dh);
  };
  for_staged_tiles<S>(causal ? w.row0 : 0, t, stage, [&](int64_t i0, int st) {
    // With 8 warps (128 keys) a causal block's first query tile lies
    // before the last 4 warps' keys: they skip it (every probability
    // zero), as warps with no key before t skip every tile. With 4, every
    // warp with a real key sees some query of every tile.
    if (W > kMmaWarps && (w.rows == 0 || (causal && i0 + kMmaTile - 1 < w.wrow0)))
      return;
    const uint16_t *qt = tiles.a[st], *dot = tiles.b[st];
    FragC s1[1][kMmaN], dp1[1][kMmaN];  // P^T and dS^T: the warp's keys x the tile's queries
    dkv_tile<T, D>(s1, dp1, k_frag, v_frag, qt, dot, tiles.lse[st], tiles.delta[st], w, i0, t,
                   dh, scale2, causal);
    mma_p_tile<T, D, 1, kMmaTile>(acc_v, s1, dot, dh);
    mma_p_tile<T, D, 1, kMmaTile>(acc_k, dp1, qt, dh);
  });
  store_rows<T, D, 1>(dk, acc_k, w, dh, [&](int, int) { return scale; });
  store_rows<T, D, 1>(dv, acc_v, w, dh, [](int, int) { return 1.0f; });
}

// dq = scale dS k for the warp's 16 M query rows, over tiles of kMmaTile
// keys. With one row block a tile's products take its 64 keys at once; with
// two, the scores and dP of two row blocks across 64 keys would not fit the
// registers beside the A fragments of q and do and the accumulator, so each
// tile is taken in two halves of 32 keys: every accumulator still sums the
// tile's keys in order, the same sums as in one. In two kernels, as the
// forward's body: attention_dq_kernel (the compiler's registers) and
// attention_dq_capped_kernel (B blocks a multiprocessor; dq_blocks).
template <typename T, int D, int S, int M>
__device__ __forceinline__ void attention_dq_body(const T *q, const T *k, const T *v,
                                                  const T *do_, const float *lse,
                                                  const float *delta, T *dq,
                                                  const Layouts &layout, int64_t t, int dh,
                                                  float scale, bool causal) {
  MmaKeyTiles<D, S> &tiles = mma_shared<MmaKeyTiles<D, S>>();
  MmaStages<D, S> &ks = tiles.a, &vs = tiles.b;
  const WarpRows w = warp_rows<M>(t, layout, causal);
  const float scale2 = scale * kLog2e;
  constexpr int N = M == 1 ? kMmaTile : kMmaTile / 2;  // keys per product
  FragA qa[M][D / 16], da[M][D / 16];
  load_rows<T, D, M>(qa, q, w, dh);
  load_rows<T, D, M>(da, do_, w.of_o(), dh);
  FragC acc[M][D / 8];
  zero(acc);
  float lse_i[M][2], delta_i[M][2];
#pragma unroll
  for (int mb = 0; mb < M; ++mb)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = 16 * mb + w.g + 8 * h;
      const bool real = r < w.rows;
      const int64_t i = w.wrow0 + r;
      lse_i[mb][h] = real ? lse[w.lse_offset + i * w.lse_stride] * kLog2e : 0.0f;
      delta_i[mb][h] = real ? delta[w.head * t + i] : 0.0f;
    }
  for_mma_key_tiles<T, D, S>(w, k, v, ks, vs, t, dh, causal,
                             [&](int64_t j0, const uint16_t *kt, const uint16_t *vt) {
#pragma unroll
    for (int c0 = 0; c0 < kMmaTile; c0 += N) {
      const int64_t col0 = j0 + c0;
      if (M > 1 && warp_sees_none(w, col0, t, causal))
        break;  // nor the keys after these
      const uint16_t *kc = kt + c0 * mma_ld<D>(), *vc = vt + c0 * mma_ld<D>();
      FragC s[M][N / 8], dp[M][N / 8];
      zero(s);
      zero(dp);
      mma_rows_tile<T, D, M, N>(s, [&](int mb, int kk) { return qa[mb][kk]; }, kc, dh);
      mma_rows_tile<T, D, M, N>(dp, [&](int mb, int kk) { return da[mb][kk]; }, vc, dh);
      with_mask(tile_masked(w, col0, N, t, causal, false), [&](auto masked) {
#pragma unroll
        for (int mb = 0; mb < M; ++mb)
#pragma unroll
          for (int n = 0; n < N / 8; ++n)
#pragma unroll
            for (int i = 0; i < 4; ++i) {
              const float p = exp2_ftz(fmaf(scale2, s[mb][n].x[i], -lse_i[mb][i / 2]));
              s[mb][n].x[i] =
                  !masked || visible(w, mb, n, i, col0, t, causal, false) ? p : 0.0f;
            }
      });
#pragma unroll
      for (int mb = 0; mb < M; ++mb)
#pragma unroll
        for (int n = 0; n < N / 8; ++n)
#pragma unroll
          for (int i = 0; i < 4; ++i)
            s[mb][n].x[i] *= dp[mb][n].x[i] - delta_i[mb][i / 2];
      mma_p_tile<T, D, M, N>(acc, s, kc, dh);
    }
  });
  store_rows<T, D, M>(dq, acc, w, dh, [&](int, int) { return scale; });
}

template <typename T, int D, int S, int M>
__global__ void __launch_bounds__(kMmaThreads)
    attention_dq_kernel(const T *q, const T *k, const T *v, const T *do_, const float *lse,
                        const float *delta, T *dq, Layouts layout, int64_t t, int dh, float scale,
                        bool causal) {
  attention_dq_body<T, D, S, M>(q, k, v, do_, lse, delta, dq, layout, t, dh, scale, causal);
}
template <typename T, int D, int S, int M, int B>
__global__ void __launch_bounds__(kMmaThreads, B)
    attention_dq_capped_kernel(const T *q, const T *k, const T *v, const T *do_,
                               const float *lse, const float *delta, T *dq, Layouts layout,
                               int64_t t, int dh, float scale, bool causal) {
  attention_dq_body<T, D, S, M>(q, k, v, do_, lse, delta, dq, layout, t, dh, scale, causal);
}

// p[0] += x, p[1] += y atomically: one vector atomic (red.global.add.v2.f32)
// on sm_90 and in the CUDA emulation (its prelude's), two elsewhere. p is
// global memory, 8-byte aligned.
__device__ inline void atomic_add2(float *p, float x, float y) {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900
  atomicAdd(reinterpret_cast<float2 *>(p), make_float2(x, y));
#else
  atomicAdd(p, x);
  atomicAdd(p + 1, y);
#endif
}

// dk = scale dS^T q, dv = P^T do and the block's part of dq = scale dS k in
// one pass (FlashAttention-2's backward): attention_dkv_kernel's blocks of
// 64 keys, 4 warps of 16 keys, over the tiles of 64 queries, each warp
// also writing its rows of dS^T (rounded to T, as the dK product rounds
// them) to shared memory; after a barrier warp w takes the tile's queries
// 16 w .. 16 w + 15 and computes their dS k over the block's 64 keys (A
// fragments from dS^T by ldmatrix.trans, B from the block's K tile staged
// once) 64 columns at a time, adding the f32 results to dq_acc (heads-major
// [rows, dh], zeroed before the launch) by atomics: the blocks of a head's
// keys add to the same rows in an order a GPU does not fix, so dq is not
// the same bytes every run. dq_acc is scaled and rounded into dq by
// attention_dq_store_kernel. S^T and dP^T are computed once (5 tile
// products where the split kernels take 7).
template <typename T, int D, int S>
__global__ void __launch_bounds__(kMmaThreads)
    attention_dkvq_kernel(const T *q, const T *k, const T *v, const T *do_, const float *lse,
                          const float *delta, T *dk, T *dv, float *dq_acc, Layouts layout,
                          int64_t t, int dh, float scale, bool causal) {
  MmaQueryKeyTiles<D, S> &tiles = mma_shared<MmaQueryKeyTiles<D, S>>();
  uint16_t *ks = tiles.k, *ds = tiles.ds;
  const WarpRows w = warp_rows<1>(t, layout, false);  // key rows
  const int warp = static_cast<int>(threadIdx.x / 32);
  const float scale2 = scale * kLog2e;
  FragA ka[1][D / 16], va[1][D / 16];
  // k's rows held up to D = 64 as in dK·dV; at 128 read from the block's K
  // tile (ldmatrix: the warp's 16 rows, 8x8 blocks as an A fragment takes
  // them) rather than again from global memory.
  if constexpr (D <= 64)
    load_rows<T, D, 1>(ka, k, w, dh);
  auto k_frag = [&](int, int kk) {
    if constexpr (D <= 64) {
      return ka[0][kk];
    } else {
      FragA a;
      ldmatrix_x4<false>(a.x, ks + frag_b_kn_offset(mma_ld<D>()) + 16 * warp * mma_ld<D>() +
                                  16 * kk);
      return a;
    }
  };
  auto v_frag = key_row_frags<T, D>(va, v, w, dh);
  FragC acc_k[1][D / 8], acc_v[1][D / 8];
  zero(acc_k);
  zero(acc_v);
  // The block's keys, a group of copies of their own (complete with the
  // first query tile's).
  stage_tile<T, D>(ks, k + w.offset, w.stride, w.row0, t, dh);
  cp_async_commit();
  auto stage = [&](int64_t i0, int st) {
    stage_query_tile<T, D, S, kMmaThreads>(tiles.query, st, i0, q, do_, lse, delta, w, t, dh);
  };
  // The lane's row addresses of dS^T (A fragments: ldmatrix.trans of the
  // 8x8 blocks (keys, queries), the warp's 16 queries from column 16 warp)
  // and of the K tile (B fragments, keys along rows).
  const uint16_t *ds_lane = ds + frag_b_nk_offset(kDsLd) + 16 * warp;
  const uint16_t *k_lane = ks + frag_b_kn_offset(mma_ld<D>());
  for_staged_tiles<S>(causal ? w.row0 : 0, t, stage, [&](int64_t i0, int st) {
    const uint16_t *qt = tiles.query.a[st], *dot = tiles.query.b[st];
    FragC s1[1][kMmaN], dp1[1][kMmaN];  // P^T and dS^T: the warp's keys x the tile's queries
    FragC(&dp)[kMmaN] = dp1[0];
    dkv_tile<T, D>(s1, dp1, k_frag, v_frag, qt, dot, tiles.query.lse[st], tiles.query.delta[st],
                   w, i0, t, dh, scale2, causal);
    // The warp's rows of dS^T, rounded as frag_a_of rounds them for dK;
    // keys past t as zeros: their k and v rows are zeros, so their
    // "probabilities" exp2(-lse) need not be finite (dK never stores those
    // rows; here they would meet the K tile's zero rows, inf times 0).
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = w.g + 8 * h;
      uint16_t *row = ds + (16 * warp + r) * kDsLd + 2 * w.c;
#pragma unroll
      for (int n = 0; n < kMmaN; ++n)
        *reinterpret_cast<uint32_t *>(row + 8 * n) =
            r < w.rows ? pack_rn<T>(dp[n].x[2 * h], dp[n].x[2 * h + 1]) : 0u;
    }
    mma_p_tile<T, D, 1, kMmaTile>(acc_v, s1, dot, dh);
    mma_p_tile<T, D, 1, kMmaTile>(acc_k, dp1, qt, dh);
    __syncthreads();  // every warp's dS^T written
    // The warp's 16 queries of the tile: their dS k over the block's keys,
    // 64 columns of dq at a time (the accumulator is the only live one).
    const int64_t qrow0 = i0 + 16 * warp;
    const int qrows = static_cast<int>(std::min<int64_t>(16, t - qrow0));
    if (qrows <= 0)
      return;
    with_width<D>(dh, [&](auto full) {
#pragma unroll
      for (int c0 = 0; c0 < D; c0 += 64) {
        if (!full && c0 >= dh)
          break;
        FragC acc[kMmaN];
#pragma unroll
        for (int n = 0; n < kMmaN; ++n)
          acc[n] = FragC{{0.0f, 0.0f, 0.0f, 0.0f}};
#pragma unroll
        for (int kk = 0; kk < kMmaTile / 16; ++kk) {
          FragA a;
          ldmatrix_x4<true>(a.x, ds_lane + 16 * kk * kDsLd);
#pragma unroll
          for (int n = 0; n < kMmaN; n += 2)
            if (full || c0 + 8 * n < dh) {
              FragB b[2];
              load_frag_b_at<true>(b, k_lane + 16 * kk * mma_ld<D>() + c0 + 8 * n);
              mma_16x8x16<T>(acc[n], a, b[0]);
              mma_16x8x16<T>(acc[n + 1], a, b[1]);
            }
        }
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int r = w.g + 8 * h;
          if (r >= qrows)
            continue;
          float *row = dq_acc + (w.head * t + qrow0 + r) * dh + c0 + 2 * w.c;
#pragma unroll
          for (int n = 0; n < kMmaN; ++n)
            if (full || c0 + 8 * n < dh)
              atomic_add2(row + 8 * n, acc[n].x[2 * h], acc[n].x[2 * h + 1]);
        }
      }
    });
  });
  store_rows<T, D, 1>(dk, acc_k, w, dh, [&](int, int) { return scale; });
  store_rows<T, D, 1>(dv, acc_v, w, dh, [](int, int) { return 1.0f; });
}

// dq = scale dq_acc rounded to T, dq_acc heads-major [rows, dh] f32
// (16-byte aligned, dh a multiple of 8) and dq at the layout `at`: a thread
// per 8 elements of a row, 16-byte stores where dq's rows allow them.
template <typename T>
__global__ void attention_dq_store_kernel(const float *dq_acc, T *dq, int64_t rows,
                                          AttentionLayout at, int64_t t, int dh, float scale) {
  const int chunks = dh / 8;
  const bool vector = (reinterpret_cast<uintptr_t>(dq) % 16 == 0 && at.row % 8 == 0 &&
                       at.head % 8 == 0 && at.batch % 8 == 0);
  DSRT_GRID_STRIDE(e, rows * chunks) {
    const int64_t r = e / chunks;
    const int d = static_cast<int>(e % chunks) * 8;
    const float4 lo = *reinterpret_cast<const float4 *>(dq_acc + r * dh + d);
    const float4 hi = *reinterpret_cast<const float4 *>(dq_acc + r * dh + d + 4);
    const float x[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
    T *out = dq + at.at(r / t, r % t) + d;
    if (vector) {
      uint32_t u[4];
#pragma unroll
      for (int j = 0; j < 4; ++j)
        u[j] = pack16(bits16<T>(scale * x[2 * j]), bits16<T>(scale * x[2 * j + 1]));
      *reinterpret_cast<uint4 *>(out) = uint4{u[0], u[1], u[2], u[3]};
    } else {
#pragma unroll
      for (int j = 0; j < 8; ++j)
        out[j] = st<T>(scale * x[j]);
    }
  }
}

// Calls launch(std::integral_constant<int, S>{}, dynamic shared bytes)
// with S the stages a tensor-core kernel at head width D runs with: two
// where its two-stage form (the kernel Kernel2, shared memory
// Shared<D, 2>) has static shared memory or the device gives it the
// dynamic shared memory it opts in to, else one (static shared memory).
// `op` and `name` (the kernel's) name the failing call, if one does.
template <template <int, int> class Shared, int D, auto Kernel2, typename F>
void with_mma_stages(const char *op, const char *name, F &&launch) {
  if constexpr (in_dynamic_shared<Shared<D, 2>>()) {
    static_assert(!in_dynamic_shared<Shared<D, 1>>(), "one stage fits static shared memory");
    if (!opt_in_dynamic_shared<Kernel2>(op, name, sizeof(Shared<D, 2>))) {
      launch(std::integral_constant<int, 1>{}, launch_shared_bytes<Shared<D, 1>>());
      return;
    }
  }
  launch(std::integral_constant<int, 2>{}, launch_shared_bytes<Shared<D, 2>>());
}

// run(std::true_type{}) for the register-capped kernel where `capped` asks
// for it and the kernel is the rows16 one at D = 64, else
// run(std::false_type{}): rows32 and D = 128 keep the compiler's
// registers (a cap spills them: ptxas 0.6-3.3 KB a thread in the forward,
// 1.6 KB in rows32's dQ). The forward's and dQ's launches.
template <int D, int M, typename F> void with_register_cap(bool capped, F &&run) {
  if constexpr (D == 64 && M == 1) {
    if (capped) {
      run(std::true_type{});
      return;
    }
  }
  run(std::false_type{});
}
// The dQ kernel with S stages: attention_dq_capped_kernel for 3 blocks a
// multiprocessor, or attention_dq_kernel.
template <typename T, int D, int S, int M, bool Capped> constexpr auto dq_kernel() {
  if constexpr (Capped)
    return &attention_dq_capped_kernel<T, D, S, M, 3>;
  else
    return &attention_dq_kernel<T, D, S, M>;
}
// The forward kernel with S stages: attention_capped_kernel for 4 blocks
// a multiprocessor, or attention_kernel.
template <typename T, int D, int S, int M, bool Capped> constexpr auto forward_kernel() {
  if constexpr (Capped)
    return &attention_capped_kernel<T, D, S, M, 4>;
  else
    return &attention_kernel<T, D, S, M>;
}

// The launches on q, k, v (and dq, dk, dv) at the layouts' offsets of
// their tensors (one packed tensor thrice, or three).
void launch_attention(cudaStream_t stream, const char *kernel, const Tensor &q, const Tensor &k,
                      const Tensor &v, const Tensor &o, const Tensor &lse, float scale,
                      bool causal, int64_t rows, int64_t t, int64_t dh, const Layouts &layout) {
  const unsigned blocks = tile_blocks(rows / t, t);
  const int head_dim = static_cast<int>(dh);
  dispatch_float(kernel, q.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T *pq = q.as<T>() + layout.q_at, *pk = k.as<T>() + layout.k_at,
            *pv = v.as<T>() + layout.v_at;
    if constexpr (MmaType<T>::value) {
      if (use_mma(q.dtype, dh)) {
        auto launch = [&](auto width) {
          constexpr int D = decltype(width)::value;
          with_mma_warp_blocks<D>([&](auto warp_blocks) {
            constexpr int M = decltype(warp_blocks)::value;
            auto run = [&](auto capped) {
              constexpr bool kCapped = decltype(capped)::value;
              with_mma_stages<MmaKeyTiles, D, forward_kernel<T, D, 2, M, kCapped>()>(
                  kernel, "attention_kernel", [&](auto stages, size_t shared) {
                constexpr int S = decltype(stages)::value;
                const unsigned grid = mma_blocks<M>(rows / t, t);
                if constexpr (kCapped)
                  attention_capped_kernel<T, D, S, M, 4><<<grid, kMmaThreads, shared, stream>>>(
                      pq, pk, pv, o.as<T>(), lse.as<float>(), layout, t, head_dim, scale,
                      causal);
                else
                  attention_kernel<T, D, S, M><<<grid, kMmaThreads, shared, stream>>>(
                      pq, pk, pv, o.as<T>(), lse.as<float>(), layout, t, head_dim, scale,
                      causal);
              });
            };
            with_register_cap<D, M>(forward_blocks() == 4, run);
          });
        };
        with_mma_width(dh, launch);
        return;
      }
    }
    attention_kernel<T><<<blocks, kRows, 0, stream>>>(pq, pk, pv, o.as<T>(), lse.as<float>(),
                                                      layout, t, head_dim, scale, causal);
  });
  check_launch(kernel);
}

// The one-pass tensor-core backward at head width D after the delta
// kernel: dq_acc zeroed, attention_dkvq_kernel, attention_dq_store_kernel.
// False, launching nothing, where it cannot run: the device does not give
// its two-stage shared memory (55 KiB at D = 64, 95 KiB at 128; it has no
// one-stage form) or dq_acc is not 16-byte aligned (a plan's workspace
// always is).
template <typename T, int D>
bool launch_attention_dkvq(cudaStream_t stream, const char *kernel, const T *q, const T *k,
                           const T *v, const T *o_grad, const float *lse, const float *delta,
                           T *dq, T *dk, T *dv, float *dq_acc, float scale, bool causal,
                           int64_t rows, int64_t t, int head_dim, const Layouts &layout) {
  using Shared = MmaQueryKeyTiles<D, 2>;
  if (reinterpret_cast<uintptr_t>(dq_acc) % 16 != 0 ||
      !opt_in_dynamic_shared<attention_dkvq_kernel<T, D, 2>>(kernel, "attention_dkvq_kernel",
                                                             sizeof(Shared)))
    return false;
  check_cuda(cudaMemsetAsync(dq_acc, 0, sizeof(float) * rows * head_dim, stream), kernel,
             "cudaMemsetAsync");
  attention_dkvq_kernel<T, D, 2><<<mma_blocks<1>(rows / t, t), kMmaThreads,
                                   launch_shared_bytes<Shared>(), stream>>>(
      q, k, v, o_grad, lse, delta, dk, dv, dq_acc, layout, t, head_dim, scale, causal);
  attention_dq_store_kernel<T><<<blocks_for(rows * (head_dim / 8)), kThreads, 0, stream>>>(
      dq_acc, dq, rows, layout.qkv, t, head_dim, scale);
  return true;
}

// dq_acc: the workspace's dq accumulator (null where it has none: not the
// tensor-core path).
void launch_attention_grad(cudaStream_t stream, const char *kernel, const Tensor &q,
                           const Tensor &k, const Tensor &v, const Tensor &o, const Tensor &lse,
                           const Tensor &do_, const Tensor &dq, const Tensor &dk, const Tensor &dv,
                           float scale, bool causal, int64_t rows, int64_t t, int64_t dh,
                           const Layouts &layout, float *delta, float *dq_acc) {
  const int head_dim = static_cast<int>(dh);
  dispatch_float(kernel, q.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T *pq = q.as<T>() + layout.q_at, *pk = k.as<T>() + layout.k_at,
            *pv = v.as<T>() + layout.v_at;
    T *pdq = dq.as<T>() + layout.q_at, *pdk = dk.as<T>() + layout.k_at,
      *pdv = dv.as<T>() + layout.v_at;
    attention_delta_kernel<T><<<blocks_for(rows), kThreads, 0, stream>>>(
        o.as<T>(), do_.as<T>(), delta, rows, layout.o, t, head_dim);
    const unsigned blocks = tile_blocks(rows / t, t);
    if constexpr (MmaType<T>::value) {
      if (use_mma(q.dtype, dh)) {
        auto launch = [&](auto width) {
          constexpr int D = decltype(width)::value;
          if (attention_grad_atomic() && dq_acc &&
              launch_attention_dkvq<T, D>(stream, kernel, pq, pk, pv, do_.as<T>(),
                                          lse.as<float>(), delta, pdq, pdk, pdv, dq_acc, scale,
                                          causal, rows, t, head_dim, layout))
            return;
          with_mma_warp_blocks<D>([&](auto warp_blocks) {
            constexpr int M = decltype(warp_blocks)::value;
            constexpr int W = M == 1 ? kMmaWarps : 8;  // dK·dV's warps
            with_mma_stages<MmaQueryTiles, D, attention_dkv_kernel<T, D, 2, W>>(
                kernel, "attention_dkv_kernel", [&](auto stages, size_t shared) {
              constexpr int S = decltype(stages)::value;
              attention_dkv_kernel<T, D, S, W><<<mma_blocks<1, W>(rows / t, t), 32 * W, shared,
                                                 stream>>>(pq, pk, pv, do_.as<T>(),
                                                           lse.as<float>(), delta, pdk, pdv,
                                                           layout, t, head_dim, scale, causal);
            });
            auto run_dq = [&](auto capped) {
              constexpr bool kCapped = decltype(capped)::value;
              with_mma_stages<MmaKeyTiles, D, dq_kernel<T, D, 2, M, kCapped>()>(
                  kernel, "attention_dq_kernel", [&](auto stages, size_t shared) {
                constexpr int S = decltype(stages)::value;
                const unsigned grid = mma_blocks<M>(rows / t, t);
                if constexpr (kCapped)
                  attention_dq_capped_kernel<T, D, S, M, 3><<<grid, kMmaThreads, shared,
                                                              stream>>>(
                      pq, pk, pv, do_.as<T>(), lse.as<float>(), delta, pdq, layout, t,
                      head_dim, scale, causal);
                else
                  attention_dq_kernel<T, D, S, M><<<grid, kMmaThreads, shared, stream>>>(
                      pq, pk, pv, do_.as<T>(), lse.as<float>(), delta, pdq, layout, t,
                      head_dim, scale, causal);
              });
            };
            with_register_cap<D, M>(dq_blocks() == 3, run_dq);
          });
        };
        with_mma_width(dh, launch);
        return;
      }
    }
    attention_dkv_kernel<T><<<blocks, kRows, 0, stream>>>(pq, pk, pv, do_.as<T>(),
                                                          lse.as<float>(), delta, pdk, pdv,
                                                          layout, t, head_dim, scale, causal);
    attention_dq_kernel<T><<<blocks, kRows, 0, stream>>>(pq, pk, pv, do_.as<T>(), lse.as<float>(),
                                                         delta, pdq, layout, t, head_dim, scale,
                                                         causal);
  });
  check_launch(kernel);
}

// The workspace's dq accumulator (attention_grad_cuda_workspace_bytes:
// what a --target cuda plan gives), or null where the kernels have none.
// DSRT_ATTENTION_GRAD=atomic refuses a workspace without it (a plan made
// for the cpu, a caller's own workspace of the least size).
float *dq_accumulator(const char *kernel, const Workspace &ws, DType dtype, const Shape &q,
                      int64_t rows, int64_t dh) {
  if (!attention_grad_has_dq_acc(dtype, dh))
    return nullptr;
  const int64_t need = attention_grad_cuda_workspace_bytes(dtype, q);
  if (ws.bytes < need) {
    if (attention_grad_atomic())
      throw Error(std::string("dsrt::") + kernel +
                  ": DSRT_ATTENTION_GRAD=atomic needs the dq accumulator in the workspace, " +
                  std::to_string(need) + " bytes, and was given " + std::to_string(ws.bytes) +
                  " (a --target cuda program plans them)");
    return nullptr;
  }
  return reinterpret_cast<float *>(static_cast<char *>(ws.data) +
                                   attention_grad_dq_acc_offset(rows));
}

} // namespace

void attention(Stream &s, const Tensor &q, const Tensor &k, const Tensor &v, const Tensor &o,
               const Tensor &lse, float scale, bool causal, bool tokens_major) {
  cudaStream_t stream = begin_kernel(s);
  const char *kernel = "attention";
  int64_t t = 0, heads = 0, dh = 0;
  const int64_t rows = check_attention(kernel, q, k, v, o, lse, nullptr, nullptr, nullptr, nullptr,
                                       tokens_major, t, heads, dh);
  if (rows == 0)
    return;
  launch_attention(stream, kernel, q, k, v, o, lse, scale, causal, rows, t, dh,
                   attention_layouts(t, heads, dh, tokens_major, false));
}

void attention_packed(Stream &s, const Tensor &qkv, const Tensor &o, const Tensor &lse,
                      float scale, bool causal) {
  cudaStream_t stream = begin_kernel(s);
  const char *kernel = "attention_packed";
  int64_t t = 0, heads = 0, dh = 0;
  const int64_t rows =
      check_attention_packed(kernel, qkv, o, lse, nullptr, nullptr, t, heads, dh);
  if (rows == 0)
    return;
  launch_attention(stream, kernel, qkv, qkv, qkv, o, lse, scale, causal, rows, t, dh,
                   attention_layouts(t, heads, dh, true, true));
}

void attention_grad(Stream &s, const Tensor &q, const Tensor &k, const Tensor &v, const Tensor &o,
                    const Tensor &lse, const Tensor &do_, const Tensor &dq, const Tensor &dk,
                    const Tensor &dv, float scale, bool causal, bool tokens_major,
                    const Workspace &ws) {
  cudaStream_t stream = begin_kernel(s);
  const char *kernel = "attention_grad";
  int64_t t = 0, heads = 0, dh = 0;
  const int64_t rows =
      check_attention(kernel, q, k, v, o, lse, &do_, &dq, &dk, &dv, tokens_major, t, heads, dh);
  WorkspaceFloats scratch(kernel, ws, attention_grad_workspace_bytes(q.dtype, q.shape));
  if (rows == 0)
    return;
  launch_attention_grad(stream, kernel, q, k, v, o, lse, do_, dq, dk, dv, scale, causal, rows, t,
                        dh, attention_layouts(t, heads, dh, tokens_major, false),
                        scratch.take(rows), dq_accumulator(kernel, ws, q.dtype, q.shape, rows, dh));
}

void attention_packed_grad(Stream &s, const Tensor &qkv, const Tensor &o, const Tensor &lse,
                           const Tensor &do_, const Tensor &dqkv, float scale, bool causal,
                           const Workspace &ws) {
  cudaStream_t stream = begin_kernel(s);
  const char *kernel = "attention_packed_grad";
  int64_t t = 0, heads = 0, dh = 0;
  const int64_t rows = check_attention_packed(kernel, qkv, o, lse, &do_, &dqkv, t, heads, dh);
  WorkspaceFloats scratch(kernel, ws, attention_grad_workspace_bytes(o.dtype, o.shape));
  if (rows == 0)
    return;
  launch_attention_grad(stream, kernel, qkv, qkv, qkv, o, lse, do_, dqkv, dqkv, dqkv, scale,
                        causal, rows, t, dh, attention_layouts(t, heads, dh, true, true),
                        scratch.take(rows), dq_accumulator(kernel, ws, o.dtype, o.shape, rows, dh));
}

} // namespace dsrt

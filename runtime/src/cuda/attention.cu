// Fused scaled-dot-product attention and its gradient on the cuda backend:
// no [T, T] scores. The forward is one block per (batch-head, tile of
// kRows query rows), a thread per query row: the block loads tiles of
// kTile keys and values into shared memory (f32), each thread scores its
// row against them and keeps an online softmax (running maximum and sum)
// and an f32 accumulator of its output row, then writes the row and its
// log-sum-exp. The backward recomputes the probabilities from the
// log-sum-exp (FlashAttention-2): one kernel computes each row's
// delta = rowsum(do * o) (the workspace), one per (batch-head, key tile)
// accumulates dk and dv over tiles of queries, and one per (batch-head,
// query tile) accumulates dq over tiles of keys; no atomics, so the result
// is the same on every run.
#include "cuda/common.cuh"

namespace dsrt {

using namespace detail;

namespace {

constexpr int kRows = 64;  // query (or key) rows per block, one per thread
constexpr int kTile = 32;  // keys (or queries) per shared-memory tile
constexpr int kHead = static_cast<int>(kMaxAttentionHead);

unsigned tile_blocks(int64_t heads, int64_t t) {
  return static_cast<unsigned>(heads * ((t + kRows - 1) / kRows));
}

// Loads rows [row0, row0 + kTile) of a [t, dh] matrix into dst as f32
// (rows past t as zeros).
template <typename T>
__device__ void load_tile(float *dst, const T *src, int64_t row0, int64_t t, int dh) {
  for (int e = threadIdx.x; e < kTile * dh; e += blockDim.x) {
    const int64_t row = row0 + e / dh;
    dst[e] = row < t ? ld(src[row * dh + e % dh]) : 0.0f;
  }
}

// The block's rows (blockIdx.x is a head and a tile of kRows rows of it)
// and this thread's.
struct Rows {
  int64_t head, row0, row, offset;
  bool active;
};
__device__ inline Rows block_rows(int64_t t, int dh) {
  const int64_t tiles = (t + kRows - 1) / kRows;
  Rows r;
  r.head = blockIdx.x / tiles;
  r.row0 = (blockIdx.x % tiles) * kRows;
  r.row = r.row0 + threadIdx.x;
  r.offset = r.head * t * dh;
  r.active = r.row < t;
  return r;
}

// Row `r.row` of a [t, dh] matrix of the block's head as f32 (zeros for a
// thread past t).
template <typename T>
__device__ void load_row(float *dst, const T *src, const Rows &r, int dh) {
  for (int d = 0; d < dh; ++d)
    dst[d] = r.active ? ld(src[r.offset + r.row * dh + d]) : 0.0f;
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
    load_tile(ks, k + r.offset, j0, t, dh);
    load_tile(vs, v + r.offset, j0, t, dh);
    __syncthreads();
    if (r.active)
      f(std::min<int64_t>(kTile, (causal ? r.row + 1 : t) - j0));
  }
}

template <typename T>
__global__ void attention_kernel(const T *q, const T *k, const T *v, T *o, float *lse,
                                 int64_t t, int dh, float scale, bool causal) {
  __shared__ float ks[kTile * kHead];
  __shared__ float vs[kTile * kHead];
  const Rows r = block_rows(t, dh);
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
    o[r.offset + r.row * dh + d] = st<T>(acc[d] * inv);
  lse[r.head * t + r.row] = m + logf(l);
}

template <typename T>
__global__ void attention_delta_kernel(const T *o, const T *do_, float *delta, int64_t rows,
                                       int dh) {
  DSRT_GRID_STRIDE(r, rows) {
    float sum = 0.0f;
    for (int d = 0; d < dh; ++d)
      sum += ld(do_[r * dh + d]) * ld(o[r * dh + d]);
    delta[r] = sum;
  }
}

// dk_j = scale sum_i ds_ij q_i and dv_j = sum_i p_ij do_i for the key rows
// of the block, over tiles of query rows.
template <typename T>
__global__ void attention_dkv_kernel(const T *q, const T *k, const T *v, const T *do_,
                                     const float *lse, const float *delta, T *dk, T *dv,
                                     int64_t t, int dh, float scale, bool causal) {
  __shared__ float qs[kTile * kHead];
  __shared__ float dos[kTile * kHead];
  const Rows r = block_rows(t, dh);  // key rows
  const int64_t head = r.head, row0 = r.row0, j = r.row, offset = r.offset;
  const bool active = r.active;
  float kj[kHead], vj[kHead], acc_k[kHead], acc_v[kHead];
  load_row(kj, k, r, dh);
  load_row(vj, v, r, dh);
  for (int d = 0; d < dh; ++d)
    acc_k[d] = acc_v[d] = 0.0f;
  for (int64_t i0 = causal ? row0 / kTile * kTile : 0; i0 < t; i0 += kTile) {
    __syncthreads();
    load_tile(qs, q + offset, i0, t, dh);
    load_tile(dos, do_ + offset, i0, t, dh);
    __syncthreads();
    if (!active)
      continue;
    const int64_t last = std::min<int64_t>(kTile, t - i0);
    for (int64_t ii = causal ? std::max<int64_t>(0, j - i0) : 0; ii < last; ++ii) {
      const int64_t i = head * t + i0 + ii;
      float sc = 0.0f, dp = 0.0f;
      for (int d = 0; d < dh; ++d) {
        sc += qs[ii * dh + d] * kj[d];
        dp += dos[ii * dh + d] * vj[d];
      }
      const float p = expf(scale * sc - lse[i]);
      const float g = p * (dp - delta[i]);
      for (int d = 0; d < dh; ++d) {
        acc_k[d] += g * qs[ii * dh + d];
        acc_v[d] += p * dos[ii * dh + d];
      }
    }
  }
  if (!active)
    return;
  for (int d = 0; d < dh; ++d) {
    dk[offset + j * dh + d] = st<T>(scale * acc_k[d]);
    dv[offset + j * dh + d] = st<T>(acc_v[d]);
  }
}

// dq_i = scale sum_j ds_ij k_j for the query rows of the block, over tiles
// of key rows.
template <typename T>
__global__ void attention_dq_kernel(const T *q, const T *k, const T *v, const T *do_,
                                    const float *lse, const float *delta, T *dq, int64_t t,
                                    int dh, float scale, bool causal) {
  __shared__ float ks[kTile * kHead];
  __shared__ float vs[kTile * kHead];
  const Rows r = block_rows(t, dh);
  float qi[kHead], doi[kHead], acc[kHead];
  load_row(qi, q, r, dh);
  load_row(doi, do_, r, dh);
  for (int d = 0; d < dh; ++d)
    acc[d] = 0.0f;
  const float lse_i = r.active ? lse[r.head * t + r.row] : 0.0f;
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
    dq[r.offset + r.row * dh + d] = st<T>(scale * acc[d]);
}

} // namespace

void attention(Stream &s, const Tensor &q, const Tensor &k, const Tensor &v, const Tensor &o,
               const Tensor &lse, float scale, bool causal) {
  cudaStream_t stream = begin_kernel(s);
  const char *kernel = "attention";
  int64_t t = 0, dh = 0;
  const int64_t rows = check_attention(kernel, q, k, v, o, lse, nullptr, nullptr, nullptr,
                                       nullptr, t, dh);
  if (rows == 0)
    return;
  dispatch_float(kernel, q.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    attention_kernel<T><<<tile_blocks(rows / t, t), kRows, 0, stream>>>(
        q.as<T>(), k.as<T>(), v.as<T>(), o.as<T>(), lse.as<float>(), t, static_cast<int>(dh),
        scale, causal);
  });
  check_launch(kernel);
}

void attention_grad(Stream &s, const Tensor &q, const Tensor &k, const Tensor &v,
                    const Tensor &o, const Tensor &lse, const Tensor &do_, const Tensor &dq,
                    const Tensor &dk, const Tensor &dv, float scale, bool causal,
                    const Workspace &ws) {
  cudaStream_t stream = begin_kernel(s);
  const char *kernel = "attention_grad";
  int64_t t = 0, dh = 0;
  const int64_t rows = check_attention(kernel, q, k, v, o, lse, &do_, &dq, &dk, &dv, t, dh);
  WorkspaceFloats scratch(kernel, ws, attention_grad_workspace_bytes(q.dtype, q.shape));
  if (rows == 0)
    return;
  float *delta = scratch.take(rows);
  const int head_dim = static_cast<int>(dh);
  dispatch_float(kernel, q.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    attention_delta_kernel<T><<<blocks_for(rows), kThreads, 0, stream>>>(
        o.as<T>(), do_.as<T>(), delta, rows, head_dim);
    attention_dkv_kernel<T><<<tile_blocks(rows / t, t), kRows, 0, stream>>>(
        q.as<T>(), k.as<T>(), v.as<T>(), do_.as<T>(), lse.as<float>(), delta, dk.as<T>(),
        dv.as<T>(), t, head_dim, scale, causal);
    attention_dq_kernel<T><<<tile_blocks(rows / t, t), kRows, 0, stream>>>(
        q.as<T>(), k.as<T>(), v.as<T>(), do_.as<T>(), lse.as<float>(), delta, dq.as<T>(), t,
        head_dim, scale, causal);
  });
  check_launch(kernel);
}

} // namespace dsrt

// Fused scaled-dot-product attention and its gradient on the cpu: no
// [T, T] scores. The forward streams each query row over tiles of keys
// with an online softmax (running maximum and sum, f32 accumulator of the
// output row) and saves the row's log-sum-exp; the backward recomputes each
// probability from it (FlashAttention-2): dq row by row over the keys, dk
// and dv key by key over the queries, each sum in one thread in a fixed
// order, so the result does not depend on the thread count. Rows are
// numbered heads-major (r = batch-head * T + position) and found through
// the layouts (kernel_common.h's AttentionLayouts), so [..., T, H, Dh]
// operands, and q, k, v packed in one [..., T, 3, H, Dh] (and their
// gradients in one such dqkv), are read and written where they lie.
#include "internal.h"

#include <cmath>
#include <limits>

namespace dsrt {

using namespace detail;

namespace {

constexpr int64_t kKeyTile = 64;

template <typename T> inline float dot(const T *a, const T *b, int64_t n) {
  float sum = 0.0f;
  for (int64_t d = 0; d < n; ++d)
    sum += to_float(a[d]) * to_float(b[d]);
  return sum;
}

// Key rows [first, last) that query row i sees.
inline int64_t keys_end(int64_t i, int64_t t, bool causal) { return causal ? i + 1 : t; }

// q, k, v within their tensors (one packed tensor thrice, or three) at
// the layouts' offsets, rows where the layouts say.
void attention_rows(Stream &s, const char *kernel, const Tensor &q, const Tensor &k,
                    const Tensor &v, const Tensor &o, const Tensor &lse, float scale, bool causal,
                    int64_t rows, int64_t t, int64_t dh, const AttentionLayouts &layouts) {
  const AttentionLayout &at = layouts.qkv, &at_o = layouts.o, &at_lse = layouts.lse;
  dispatch_float(kernel, q.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T *pq = q.as<T>() + layouts.q_at, *pk = k.as<T>() + layouts.k_at,
            *pv = v.as<T>() + layouts.v_at;
    T *po = o.as<T>();
    float *plse = lse.as<float>();
    parallel_for(s, rows, std::max<int64_t>(1, kGrainElementwise / (t * dh)),
                 [&](int64_t begin, int64_t end) {
                   float acc[kMaxAttentionHead], scores[kKeyTile];
                   for (int64_t r = begin; r < end; ++r) {
                     const int64_t bh = r / t, i = r % t;
                     const T *qi = pq + at.at(bh, i);
                     float m = -std::numeric_limits<float>::infinity(), l = 0.0f;
                     for (int64_t d = 0; d < dh; ++d)
                       acc[d] = 0.0f;
                     const int64_t last = keys_end(i, t, causal);
                     for (int64_t j0 = 0; j0 < last; j0 += kKeyTile) {
                       const int64_t n = std::min(kKeyTile, last - j0);
                       float tile_max = -std::numeric_limits<float>::infinity();
                       for (int64_t j = 0; j < n; ++j) {
                         scores[j] = scale * dot(qi, pk + at.at(bh, j0 + j), dh);
                         tile_max = std::max(tile_max, scores[j]);
                       }
                       const float m_new = std::max(m, tile_max);
                       const float rescale = m == m_new ? 1.0f : std::exp(m - m_new);
                       l *= rescale;
                       for (int64_t d = 0; d < dh; ++d)
                         acc[d] *= rescale;
                       for (int64_t j = 0; j < n; ++j) {
                         const float p = std::exp(scores[j] - m_new);
                         l += p;
                         const T *vj = pv + at.at(bh, j0 + j);
                         for (int64_t d = 0; d < dh; ++d)
                           acc[d] += p * to_float(vj[d]);
                       }
                       m = m_new;
                     }
                     const float inv = 1.0f / l;
                     T *oi = po + at_o.at(bh, i);
                     for (int64_t d = 0; d < dh; ++d)
                       oi[d] = from_float<T>(acc[d] * inv);
                     plse[at_lse.at(bh, i)] = m + std::log(l);
                   }
                 });
  });
}

void attention_grad_rows(Stream &s, const char *kernel, const Tensor &q, const Tensor &k,
                         const Tensor &v, const Tensor &o, const Tensor &lse, const Tensor &do_,
                         const Tensor &dq, const Tensor &dk, const Tensor &dv, float scale,
                         bool causal, int64_t rows, int64_t t, int64_t dh,
                         const AttentionLayouts &l, float *delta) {
  // Row r's offset in q, k, v and their gradients, in o and do, and in lse.
  auto row = [&](int64_t r) { return l.qkv.at(r / t, r % t); };
  auto o_row = [&](int64_t r) { return l.o.at(r / t, r % t); };
  auto lse_row = [&](int64_t r) { return l.lse.at(r / t, r % t); };
  const int64_t grain = std::max<int64_t>(1, kGrainElementwise / (t * dh));
  dispatch_float(kernel, q.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T *pq = q.as<T>() + l.q_at, *pk = k.as<T>() + l.k_at, *pv = v.as<T>() + l.v_at,
            *po = o.as<T>(), *pdo = do_.as<T>();
    const float *plse = lse.as<float>();
    // delta_i = rowsum(do_i * o_i).
    parallel_for(s, rows, std::max<int64_t>(1, kGrainElementwise / dh),
                 [&](int64_t begin, int64_t end) {
                   for (int64_t r = begin; r < end; ++r)
                     delta[r] = dot(pdo + o_row(r), po + o_row(r), dh);
                 });
    // ds_ij = p_ij (do_i . v_j - delta_i), p_ij = exp(scale q_i . k_j - lse_i).
    auto ds = [&](int64_t qi, int64_t kj, float &p) {
      p = std::exp(scale * dot(pq + row(qi), pk + row(kj), dh) - plse[lse_row(qi)]);
      return p * (dot(pdo + o_row(qi), pv + row(kj), dh) - delta[qi]);
    };
    // dq_i = scale sum_j ds_ij k_j.
    T *pdq = dq.as<T>() + l.q_at;
    parallel_for(s, rows, grain, [&](int64_t begin, int64_t end) {
      float acc[kMaxAttentionHead];
      for (int64_t r = begin; r < end; ++r) {
        const int64_t i = r % t, base = r - i;
        for (int64_t d = 0; d < dh; ++d)
          acc[d] = 0.0f;
        const int64_t last = keys_end(i, t, causal);
        for (int64_t j = 0; j < last; ++j) {
          float p;
          const float g = ds(r, base + j, p);
          const T *kj = pk + row(base + j);
          for (int64_t d = 0; d < dh; ++d)
            acc[d] += g * to_float(kj[d]);
        }
        T *dqi = pdq + row(r);
        for (int64_t d = 0; d < dh; ++d)
          dqi[d] = from_float<T>(scale * acc[d]);
      }
    });
    // dk_j = scale sum_i ds_ij q_i, dv_j = sum_i p_ij do_i.
    T *pdk = dk.as<T>() + l.k_at, *pdv = dv.as<T>() + l.v_at;
    parallel_for(s, rows, grain, [&](int64_t begin, int64_t end) {
      float acc_k[kMaxAttentionHead], acc_v[kMaxAttentionHead];
      for (int64_t r = begin; r < end; ++r) {
        const int64_t j = r % t, base = r - j;
        for (int64_t d = 0; d < dh; ++d)
          acc_k[d] = acc_v[d] = 0.0f;
        for (int64_t i = causal ? j : 0; i < t; ++i) {
          float p;
          const float g = ds(base + i, r, p);
          const T *qi = pq + row(base + i), *doi = pdo + o_row(base + i);
          for (int64_t d = 0; d < dh; ++d) {
            acc_k[d] += g * to_float(qi[d]);
            acc_v[d] += p * to_float(doi[d]);
          }
        }
        T *dkj = pdk + row(r), *dvj = pdv + row(r);
        for (int64_t d = 0; d < dh; ++d) {
          dkj[d] = from_float<T>(scale * acc_k[d]);
          dvj[d] = from_float<T>(acc_v[d]);
        }
      }
    });
  });
}

} // namespace

void attention(Stream &s, const Tensor &q, const Tensor &k, const Tensor &v, const Tensor &o,
               const Tensor &lse, float scale, bool causal, bool tokens_major) {
  begin_kernel(s);
  const char *kernel = "attention";
  int64_t t = 0, heads = 0, dh = 0;
  const int64_t rows = check_attention(kernel, q, k, v, o, lse, nullptr, nullptr, nullptr, nullptr,
                                       tokens_major, t, heads, dh);
  if (rows == 0)
    return;
  attention_rows(s, kernel, q, k, v, o, lse, scale, causal, rows, t, dh,
                 attention_layouts(t, heads, dh, tokens_major, false));
}

void attention_packed(Stream &s, const Tensor &qkv, const Tensor &o, const Tensor &lse,
                      float scale, bool causal) {
  begin_kernel(s);
  const char *kernel = "attention_packed";
  int64_t t = 0, heads = 0, dh = 0;
  const int64_t rows =
      check_attention_packed(kernel, qkv, o, lse, nullptr, nullptr, t, heads, dh);
  if (rows == 0)
    return;
  attention_rows(s, kernel, qkv, qkv, qkv, o, lse, scale, causal, rows, t, dh,
                 attention_layouts(t, heads, dh, true, true));
}

void attention_grad(Stream &s, const Tensor &q, const Tensor &k, const Tensor &v, const Tensor &o,
                    const Tensor &lse, const Tensor &do_, const Tensor &dq, const Tensor &dk,
                    const Tensor &dv, float scale, bool causal, bool tokens_major,
                    const Workspace &ws) {
  begin_kernel(s);
  const char *kernel = "attention_grad";
  int64_t t = 0, heads = 0, dh = 0;
  const int64_t rows =
      check_attention(kernel, q, k, v, o, lse, &do_, &dq, &dk, &dv, tokens_major, t, heads, dh);
  WorkspaceFloats scratch(kernel, ws, attention_grad_workspace_bytes(q.dtype, q.shape));
  if (rows == 0)
    return;
  attention_grad_rows(s, kernel, q, k, v, o, lse, do_, dq, dk, dv, scale, causal, rows, t, dh,
                      attention_layouts(t, heads, dh, tokens_major, false), scratch.take(rows));
}

void attention_packed_grad(Stream &s, const Tensor &qkv, const Tensor &o, const Tensor &lse,
                           const Tensor &do_, const Tensor &dqkv, float scale, bool causal,
                           const Workspace &ws) {
  begin_kernel(s);
  const char *kernel = "attention_packed_grad";
  int64_t t = 0, heads = 0, dh = 0;
  const int64_t rows = check_attention_packed(kernel, qkv, o, lse, &do_, &dqkv, t, heads, dh);
  WorkspaceFloats scratch(kernel, ws, attention_grad_workspace_bytes(o.dtype, o.shape));
  if (rows == 0)
    return;
  attention_grad_rows(s, kernel, qkv, qkv, qkv, o, lse, do_, dqkv, dqkv, dqkv, scale, causal,
                      rows, t, dh, attention_layouts(t, heads, dh, true, true),
                      scratch.take(rows));
}

} // namespace dsrt

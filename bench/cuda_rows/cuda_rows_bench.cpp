// Times the cuda row kernels at GPT-2 124M's training shapes (micro-batch
// 64 x 1024 tokens, bf16): layer_norm and layer_norm_grad (with its
// addend) over [65536, 768], softmax_cross_entropy_with_grad over
// [65536, 50257] (mean, ignore_index -100), each the median of 20 calls
// timed by cudaEvents around a stream synchronize, with a sanity check of
// its output against a host computation of a few rows.
#include "dsrt/kernels.h"
#include "dsrt/stream.h"
#include "dsrt/tensor.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

using namespace dsrt;

namespace {

void check(cudaError_t e, const char *what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

Tensor device(DType dt, Shape s) {
  Tensor t;
  t.dtype = dt;
  t.shape = s;
  check(cudaMalloc(&t.data, std::max<size_t>(t.nbytes(), 16)), "cudaMalloc");
  return t;
}

uint16_t to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return static_cast<uint16_t>((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}
float from_bf16(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Uniform bf16 in [lo, hi) into t (a [rows, n] bf16 tensor), returned.
std::vector<uint16_t> fill(const Tensor &t, float lo, float hi, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<uint16_t> h(t.numel());
  for (auto &v : h)
    v = to_bf16(d(rng));
  check(cudaMemcpy(t.data, h.data(), h.size() * 2, cudaMemcpyHostToDevice), "upload");
  return h;
}

Workspace workspace(int64_t bytes) {
  Workspace ws;
  ws.bytes = bytes;
  if (bytes)
    check(cudaMalloc(&ws.data, bytes), "cudaMalloc workspace");
  return ws;
}

template <typename F> double median_us(Stream &s, F f) {
  f();
  s.synchronize();
  std::vector<double> t;
  for (int i = 0; i < 20; ++i) {
    const auto a = std::chrono::steady_clock::now();
    f();
    s.synchronize();
    t.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - a)
                    .count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace

int main() {
  Stream s(Backend::Cuda);
  const int64_t R = 65536, n = 768, C = 50257;
  const float eps = 1e-5f;
  // layer_norm
  Tensor x = device(DType::BF16, {R, n}), g = device(DType::BF16, {n}), b = device(DType::BF16, {n});
  Tensor y = device(DType::BF16, {R, n}), mean = device(DType::F32, {R, 1}),
         inv = device(DType::F32, {R, 1});
  auto hx = fill(x, -2, 2, 1), hg = fill(g, 0.5, 1.5, 2), hb = fill(b, -0.5, 0.5, 3);
  Workspace ws_ln = workspace(layer_norm_workspace_bytes(DType::BF16, x.shape, g.shape, &b.shape, 1));
  const double ln_us = median_us(s, [&] { layer_norm(s, x, g, &b, y, mean, inv, 1, eps, ws_ln); });
  std::vector<uint16_t> hy(4 * n);
  check(cudaMemcpy(hy.data(), y.data, 4 * n * 2, cudaMemcpyDeviceToHost), "download");
  double ln_err = 0;
  for (int r = 0; r < 4; ++r) {
    double m = 0, v = 0;
    for (int i = 0; i < n; ++i)
      m += from_bf16(hx[r * n + i]);
    m /= n;
    for (int i = 0; i < n; ++i)
      v += std::pow(from_bf16(hx[r * n + i]) - m, 2);
    const double is = 1 / std::sqrt(v / n + eps);
    for (int i = 0; i < n; ++i) {
      const double ref = (from_bf16(hx[r * n + i]) - m) * is * from_bf16(hg[i]) + from_bf16(hb[i]);
      ln_err = std::max(ln_err, std::fabs(ref - from_bf16(hy[r * n + i])));
    }
  }
  const double ln_bytes = 2.0 * R * n * 2 + 2.0 * R * 4;
  std::printf("| layer_norm [65536, 768] bf16 | %.1f us | %.0f GB/s | max |err| of 4 rows %.3g |\n",
              ln_us, ln_bytes / ln_us / 1e3, ln_err);

  // layer_norm_grad with an addend
  Tensor dy = device(DType::BF16, {R, n}), add = device(DType::BF16, {R, n}),
         dx = device(DType::BF16, {R, n}), dg = device(DType::BF16, {n}),
         db = device(DType::BF16, {n});
  fill(dy, -1, 1, 4);
  fill(add, -1, 1, 5);
  Workspace ws_g =
      workspace(layer_norm_grad_workspace_bytes(DType::BF16, x.shape, g.shape, 1));
  const double lng_us = median_us(s, [&] {
    layer_norm_grad_add(s, dy, x, g, mean, inv, &add, dx, dg, &db, 1, ws_g);
  });
  std::vector<float> hdb_dev(n);
  {
    std::vector<uint16_t> t(n);
    check(cudaMemcpy(t.data(), db.data, n * 2, cudaMemcpyDeviceToHost), "download");
    for (int i = 0; i < n; ++i)
      hdb_dev[i] = from_bf16(t[i]);
  }
  // dbias[0..3] against the host sum over all rows of dy.
  std::vector<uint16_t> hdy(R * n);
  check(cudaMemcpy(hdy.data(), dy.data, R * n * 2, cudaMemcpyDeviceToHost), "download");
  double db_err = 0;
  for (int i = 0; i < 4; ++i) {
    double sum = 0;
    for (int64_t r = 0; r < R; ++r)
      sum += from_bf16(hdy[r * n + i]);
    db_err = std::max(db_err, std::fabs(sum - hdb_dev[i]) / std::max(1.0, std::fabs(sum)));
  }
  const double lng_bytes = 4.0 * R * n * 2;
  std::printf("| layer_norm_grad + addend [65536, 768] bf16 | %.1f us | %.0f GB/s | dbias rel err %.3g |\n",
              lng_us, lng_bytes / lng_us / 1e3, db_err);
  cudaFree(y.data);
  cudaFree(dx.data);
  cudaFree(add.data);

  // softmax_cross_entropy_with_grad
  Tensor sc = device(DType::BF16, {R, C}), ds = device(DType::BF16, {R, C}),
         lab = device(DType::I64, {R}), dl = device(DType::F32, {}), loss = device(DType::F32, {});
  {
    // Scores uniform in [-4, 4) generated on the host a row block at a time.
    std::mt19937 rng(6);
    std::uniform_real_distribution<float> d(-4, 4);
    std::vector<uint16_t> h(1024 * C);
    for (int64_t r0 = 0; r0 < R; r0 += 1024) {
      for (auto &v : h)
        v = to_bf16(d(rng));
      check(cudaMemcpy(static_cast<uint16_t *>(sc.data) + r0 * C, h.data(), h.size() * 2,
                       cudaMemcpyHostToDevice),
            "upload");
    }
    std::vector<int64_t> hl(R);
    for (int64_t r = 0; r < R; ++r)
      hl[r] = r % 17 == 0 ? -100 : static_cast<int64_t>(rng() % C);
    check(cudaMemcpy(lab.data, hl.data(), R * 8, cudaMemcpyHostToDevice), "upload");
    const float one = 1.0f;
    check(cudaMemcpy(dl.data, &one, 4, cudaMemcpyHostToDevice), "upload");
  }
  Workspace ws_ce =
      workspace(softmax_cross_entropy_with_grad_workspace_bytes(DType::BF16, sc.shape));
  // dscores over the scores' own storage after the timed calls would
  // change them: a separate output, as the unfused plan has.
  const double ce_us = median_us(s, [&] {
    softmax_cross_entropy_with_grad(s, sc, lab, dl, nullptr, loss, ds, Reduction::Mean, true, -100,
                                    ws_ce);
  });
  float hloss = 0;
  check(cudaMemcpy(&hloss, loss.data, 4, cudaMemcpyDeviceToHost), "download");
  // Row 1's gradient sums to 0 (softmax minus one-hot, times a coefficient).
  std::vector<uint16_t> hd(C);
  check(cudaMemcpy(hd.data(), static_cast<uint16_t *>(ds.data) + C, C * 2, cudaMemcpyDeviceToHost),
        "download");
  double gsum = 0, gabs = 0;
  for (int64_t k = 0; k < C; ++k) {
    gsum += from_bf16(hd[k]);
    gabs += std::fabs(from_bf16(hd[k]));
  }
  const double ce_bytes = 2.0 * R * C * 2;
  std::printf("| softmax_cross_entropy_with_grad [65536, 50257] bf16 | %.1f us | %.0f GB/s | loss %.4f (uniform scores: about %.4f), row 1 grad sum %.3g of |grad| %.3g |\n",
              ce_us, ce_bytes / ce_us / 1e3, hloss, std::log(static_cast<double>(C)) + std::log(std::sinh(4.0) / 4.0), gsum,
              gabs);
  return 0;
}

// dsrt_bench [threads] [repeats]: times dsrt kernels on GPT-2-small shapes
// (d = 768, T = 256, B = 4) and one GPT-2 block forward made of the kernel
// calls a generated program makes. runtime/bench/torch_bench.py times the
// same work in PyTorch eager; compare the two on the same thread count.
#include "dsrt/kernels.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <string>
#include <vector>

using namespace dsrt;

namespace {

struct Buffer {
  std::vector<float> data;
  Tensor t;
  explicit Buffer(Shape shape, float scale = 0.02f, unsigned seed = 1) : data(shape.numel()) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> dist(0.0f, scale);
    for (float &v : data)
      v = dist(rng);
    t = Tensor{data.data(), DType::F32, shape};
  }
  Tensor view(Shape shape) const { return Tensor{t.data, DType::F32, shape}; }
  operator const Tensor &() const { return t; }
};

double median_ms(int repeats, const std::function<void()> &f) {
  f();  // warm up: page in buffers, start thread pools
  std::vector<double> times;
  for (int i = 0; i < repeats; ++i) {
    auto start = std::chrono::steady_clock::now();
    f();
    auto end = std::chrono::steady_clock::now();
    times.push_back(std::chrono::duration<double, std::milli>(end - start).count());
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

}  // namespace

int main(int argc, char **argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 2;
  const int repeats = argc > 2 ? std::atoi(argv[2]) : 20;
  Stream s(Backend::Cpu, threads);
  const int64_t B = 4, T = 256, D = 768, H = 12, Dh = 64, F = 3072;
  const int64_t BT = B * T;

  Buffer a({1024, 768}, 1.0f), w({768, 3072}), y({1024, 3072});
  std::printf("matmul [1024,768]x[768,3072]     %8.3f ms\n",
              median_ms(repeats, [&] { matmul(s, a, w, y, false, false, {}); }));

  Buffer att({B, H, T, T}, 1.0f), probs({B, H, T, T});
  std::printf("softmax [4,12,256,256]           %8.3f ms\n",
              median_ms(repeats, [&] { softmax(s, att, probs, 3, {}); }));

  Buffer x({BT, D}, 1.0f), g({D}, 1.0f), bias({D}), ln({BT, D}), mean({BT, 1}), inv({BT, 1});
  std::printf("layer_norm [1024,768]            %8.3f ms\n",
              median_ms(repeats, [&] { layer_norm(s, x, g, &bias.t, ln, mean, inv, 1, 1e-5f, {}); }));

  Buffer h({BT, F}, 1.0f), hg({BT, F});
  std::printf("gelu_tanh [1024,3072]            %8.3f ms\n",
              median_ms(repeats, [&] { unary(s, UnaryOp::GeluTanh, h, hg); }));
  std::printf("gelu (erf) [1024,3072]           %8.3f ms\n",
              median_ms(repeats, [&] { unary(s, UnaryOp::Gelu, h, hg); }));
  Buffer fb({F});
  std::printf("add bias [1024,3072]+[3072]      %8.3f ms\n",
              median_ms(repeats, [&] { binary(s, BinaryOp::Add, h, fb, hg); }));

  Buffer q4({B, T, H, Dh}, 1.0f), qt({B, H, T, Dh});
  std::printf("transpose [4,256,12,64]->0213    %8.3f ms\n", median_ms(repeats, [&] {
                const int64_t perm[] = {0, 2, 1, 3};
                transpose(s, q4, qt, perm);
              }));

  Buffer k4({B, H, T, Dh}, 1.0f);
  std::printf("matmul q k^T [4,12,256,64]       %8.3f ms\n",
              median_ms(repeats, [&] { matmul(s, qt, k4, att, false, true, {}); }));

  // The loss over GPT-2's vocabulary: log-softmax over 50257 classes.
  {
    const int64_t V = 50257;
    Buffer logits({BT, V}, 1.0f), log_prob({BT, V}), loss({});
    std::vector<int64_t> labels(BT);
    for (int64_t i = 0; i < BT; ++i)
      labels[i] = (i * 7919) % V;
    Tensor tl{labels.data(), DType::I64, Shape{BT}};
    std::printf("cross_entropy [1024,50257]       %8.3f ms\n", median_ms(std::max(3, repeats / 4), [&] {
                  softmax_cross_entropy(s, logits, tl, nullptr, loss, log_prob, Reduction::Mean,
                                        false, 0, {});
                }));
  }

  // One GPT-2 block forward (pre-norm), as a generated program calls it.
  Buffer w_attn({D, 3 * D}), b_attn({3 * D}), w_proj({D, D}), b_proj({D});
  Buffer w_fc({D, F}), b_fc({F}), w_fc2({F, D}), b_fc2({D});
  Buffer g1({D}, 1.0f), be1({D}), g2({D}, 1.0f), be2({D});
  Buffer resid({BT, D}, 1.0f), h1({BT, D}), qkv({BT, 3 * D});
  Buffer q({B, T, D}), k({B, T, D}), v({B, T, D});
  Buffer qh({B, H, T, Dh}), kh({B, H, T, Dh}), vh({B, H, T, Dh});
  Buffer scores({B, H, T, T}), masked({B, H, T, T}), p({B, H, T, T}), ctx({B, H, T, Dh});
  Buffer ctx_t({B, T, H, Dh}), proj({BT, D}), resid2({BT, D}), h2({BT, D}), fc({BT, F}),
      act({BT, F}), fc2({BT, D}), out({BT, D});
  Buffer scale({}, 0.0f);
  scale.data[0] = 1.0f / std::sqrt(static_cast<float>(Dh));
  std::vector<uint8_t> causal(T * T);
  for (int64_t i = 0; i < T; ++i)
    for (int64_t j = 0; j < T; ++j)
      causal[i * T + j] = j <= i;
  Tensor mask{causal.data(), DType::Bool, Shape{T, T}};
  Buffer neg_inf({}, 0.0f);
  neg_inf.data[0] = -INFINITY;
  auto block = [&] {
    layer_norm(s, resid, g1, &be1.t, h1, mean, inv, 1, 1e-5f, {});
    gemm(s, h1, w_attn, &b_attn.t, qkv, 1.0f, 1.0f, false, false, {});
    Tensor parts[3] = {q.t, k.t, v.t};
    split(s, qkv.view({B, T, 3 * D}), parts, 3, 2);
    const int64_t perm[] = {0, 2, 1, 3};
    transpose(s, q.view({B, T, H, Dh}), qh, perm);
    transpose(s, k.view({B, T, H, Dh}), kh, perm);
    transpose(s, v.view({B, T, H, Dh}), vh, perm);
    matmul(s, qh, kh, scores, false, true, {});
    binary(s, BinaryOp::Mul, scores, scale, scores);
    where(s, mask, scores, neg_inf, masked);
    softmax(s, masked, p, 3, {});
    matmul(s, p, vh, ctx, false, false, {});
    transpose(s, ctx, ctx_t, perm);
    gemm(s, ctx_t.view({BT, D}), w_proj, &b_proj.t, proj, 1.0f, 1.0f, false, false, {});
    binary(s, BinaryOp::Add, resid, proj, resid2);
    layer_norm(s, resid2, g2, &be2.t, h2, mean, inv, 1, 1e-5f, {});
    gemm(s, h2, w_fc, &b_fc.t, fc, 1.0f, 1.0f, false, false, {});
    unary(s, UnaryOp::GeluTanh, fc, act);
    gemm(s, act, w_fc2, &b_fc2.t, fc2, 1.0f, 1.0f, false, false, {});
    binary(s, BinaryOp::Add, resid2, fc2, out);
  };
  double ms = median_ms(repeats, block);
  std::printf("gpt2 block forward (B=4, T=256)  %8.3f ms  (x12 layers: %.1f ms)\n", ms, 12 * ms);

  // Backward kernels and optimizer steps on the same shapes.
  Buffer dy_ln({BT, D}, 1.0f), dx_ln({BT, D}), dg({D}), db({D});
  layer_norm(s, x, g, &bias.t, ln, mean, inv, 1, 1e-5f, {});
  std::vector<float> ln_ws(static_cast<size_t>(
      layer_norm_grad_workspace_bytes(DType::F32, Shape{BT, D}, Shape{D}, 1) / 4));
  std::printf("layer_norm_grad [1024,768]       %8.3f ms\n", median_ms(repeats, [&] {
                layer_norm_grad(s, dy_ln, x, g, mean, inv, dx_ln, dg, &db.t, 1,
                                {ln_ws.data(), static_cast<int64_t>(ln_ws.size() * 4)});
              }));
  Buffer dprobs({B, H, T, T}, 1.0f), dscores({B, H, T, T});
  softmax(s, att, probs, 3, {});
  std::printf("softmax_grad [4,12,256,256]      %8.3f ms\n",
              median_ms(repeats, [&] { softmax_grad(s, probs, dprobs, dscores, 3, {}); }));
  {
    const int64_t V = 50257;
    Buffer logits({BT, V}, 1.0f), log_prob({BT, V}), loss({}), dlogits({BT, V});
    Buffer dloss({}, 0.0f);
    dloss.data[0] = 1.0f;
    std::vector<int64_t> labels(BT);
    for (int64_t i = 0; i < BT; ++i)
      labels[i] = (i * 7919) % V;
    Tensor tl{labels.data(), DType::I64, Shape{BT}};
    softmax_cross_entropy(s, logits, tl, nullptr, loss, log_prob, Reduction::Mean, false, 0, {});
    std::printf("cross_entropy_grad [1024,50257]  %8.3f ms\n",
                median_ms(std::max(3, repeats / 4), [&] {
                  softmax_cross_entropy_grad(s, dloss, log_prob, tl, nullptr, dlogits,
                                             Reduction::Mean, false, 0);
                }));
    // Token embedding backward: 1024 tokens into the [50257, 768] table.
    Buffer demb({V, D}), dtok({BT, D}, 1.0f);
    std::printf("gather_grad [1024] -> [50257,768]%8.3f ms\n",
                median_ms(std::max(3, repeats / 4), [&] { gather_grad(s, dtok, tl, demb, 0, {}); }));
  }
  // GPT-2's c_attn as a 1x1 convolution: x [4, 768, 256], w [2304, 768, 1].
  {
    Buffer cx({B, D, T}, 1.0f), cw({3 * D, D, 1}), cdy({B, 3 * D, T}, 1.0f);
    Buffer cdw({3 * D, D, 1}), cdx({B, D, T});
    const int64_t st[] = {1}, pads[] = {0, 0}, dil[] = {1};
    std::printf("conv_grad_weight 1x1 c_attn      %8.3f ms\n", median_ms(repeats, [&] {
                  conv_grad_weight(s, cdy, cx, cdw, st, pads, dil, 1, {});
                }));
    std::printf("conv_grad_input 1x1 c_attn       %8.3f ms\n", median_ms(repeats, [&] {
                  conv_grad_input(s, cdy, cw, cdx, st, pads, dil, 1, {});
                }));
  }
  // A 3x3 convolution: x [8, 64, 56, 56], w [64, 64, 3, 3], pad 1.
  {
    Buffer cx({8, 64, 56, 56}, 1.0f), cw({64, 64, 3, 3}), cdy({8, 64, 56, 56}, 1.0f);
    Buffer cdw({64, 64, 3, 3}), cdx({8, 64, 56, 56});
    const int64_t st[] = {1, 1}, pads[] = {1, 1, 1, 1}, dil[] = {1, 1};
    std::vector<float> scratch(static_cast<size_t>(
        conv_grad_input_workspace_bytes(DType::F32, Shape{8, 64, 56, 56}, Shape{64, 64, 3, 3},
                                        Shape{8, 64, 56, 56}, st, pads, 1) /
        4));
    const Workspace ws{scratch.data(), static_cast<int64_t>(scratch.size() * 4)};
    std::printf("conv_grad_weight 3x3 [8,64,56,56]%8.3f ms\n",
                median_ms(std::max(3, repeats / 4),
                          [&] { conv_grad_weight(s, cdy, cx, cdw, st, pads, dil, 1, ws); }));
    std::printf("conv_grad_input 3x3 [8,64,56,56] %8.3f ms\n",
                median_ms(std::max(3, repeats / 4),
                          [&] { conv_grad_input(s, cdy, cw, cdx, st, pads, dil, 1, ws); }));
  }
  {
    Buffer p({D, F}), gr({D, F}), m1({D, F}), v1({D, F}), lr({}, 0.0f), total({});
    lr.data[0] = 1e-4f;
    for (float &e : v1.data)
      e = e * e;
    int64_t t = 10;
    Tensor step{&t, DType::I64, Shape{}};
    std::printf("adamw [768,3072] in place        %8.3f ms\n", median_ms(repeats, [&] {
                  adamw(s, lr, step, p, gr, m1, v1, p, m1, v1, 0.9f, 0.999f, 1e-8f, 0.01f, true);
                }));
    std::printf("sum_of_squares [768,3072]        %8.3f ms\n",
                median_ms(repeats, [&] { sum_of_squares(s, &gr.t, 1, total); }));
  }
  return 0;
}

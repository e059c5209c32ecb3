// Times the cuda backend's fused attention on one GPU: attention_packed and
// attention_packed_grad on a bf16 qkv [B, T, 3, H, Dh] (GPT-2's layout), as
// FLOP/s counted as the runtime's trace counts them (bench/gpu_roofline.py:
// (4 Dh + 3) per (query, key) pair forward, (10 Dh + 5) backward, causal
// pairs T (T + 1) / 2 per head).
//
//   attention_bench [B H T Dh [iterations [causal]]]   (default 64 12 1024 64 20 1)
//
// Built against a build of the runtime with CUDA (build/lib/libdsrt_cuda.a)
// and the libraries it was configured with (docs/benchmarks.md, "The fused
// attention kernels on an H200"):
//   c++ -O2 -std=c++20 -Iruntime/include -I/usr/local/cuda/include bench/attention_bench.cpp \
//       build/lib/libdsrt_cuda.a -L/usr/local/cuda/lib64 -lcublasLt -lnccl -lcudart_static \
//       -lrt -lpthread -ldl -fopenmp -o attention_bench   # plus -luring -lmpi where used
#include "dsrt/kernels.h"
#include "dsrt/stream.h"

#include <cuda_runtime.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <random>
#include <vector>

namespace {

void check(cudaError_t e, const char *what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "attention_bench: %s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

void *device_bytes(size_t bytes) {
  void *p = nullptr;
  check(cudaMalloc(&p, bytes), "cudaMalloc");
  return p;
}

// Random bf16 in [-1, 1) into a device buffer of n elements.
void fill(void *dst, int64_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<uint16_t> host(static_cast<size_t>(n));
  for (auto &x : host)
    x = dsrt::f32_to_bf16(dist(gen));
  check(cudaMemcpy(dst, host.data(), host.size() * 2, cudaMemcpyHostToDevice), "cudaMemcpy");
}

template <typename F> double time_ms(dsrt::Stream &s, int iterations, F &&f) {
  f();  // warm-up (and the one-time opt-ins)
  s.synchronize();
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < iterations; ++i)
    f();
  s.synchronize();
  const std::chrono::duration<double, std::milli> d = std::chrono::steady_clock::now() - start;
  return d.count() / iterations;
}

} // namespace

int run(int argc, char **argv) {
  const int64_t b = argc > 4 ? std::atoll(argv[1]) : 64, h = argc > 4 ? std::atoll(argv[2]) : 12,
                t = argc > 4 ? std::atoll(argv[3]) : 1024, dh = argc > 4 ? std::atoll(argv[4]) : 64;
  const int iterations = argc > 5 ? std::atoi(argv[5]) : 20;
  const bool causal = argc > 6 ? std::atoi(argv[6]) != 0 : true;
  using dsrt::DType;
  using dsrt::Shape;
  using dsrt::Tensor;
  dsrt::Stream s(dsrt::Backend::Cuda);
  const Shape qkv_shape{b, t, 3, h, dh}, o_shape{b, t, h, dh}, lse_shape{b, t, h};
  Tensor qkv{device_bytes(qkv_shape.numel() * 2), DType::BF16, qkv_shape};
  Tensor dqkv{device_bytes(qkv_shape.numel() * 2), DType::BF16, qkv_shape};
  Tensor o{device_bytes(o_shape.numel() * 2), DType::BF16, o_shape};
  Tensor d_o{device_bytes(o_shape.numel() * 2), DType::BF16, o_shape};
  Tensor lse{device_bytes(lse_shape.numel() * 4), DType::F32, lse_shape};
  const int64_t ws_bytes = dsrt::attention_grad_workspace_bytes(DType::BF16, o_shape);
  dsrt::Workspace ws{device_bytes(static_cast<size_t>(ws_bytes)), ws_bytes};
  fill(qkv.data, qkv_shape.numel(), 1);
  fill(d_o.data, o_shape.numel(), 2);
  const float scale = 1.0f / std::sqrt(static_cast<float>(dh));
  const double fwd = time_ms(s, iterations, [&] { dsrt::attention_packed(s, qkv, o, lse, scale, causal); });
  const double bwd = time_ms(s, iterations, [&] {
    dsrt::attention_packed_grad(s, qkv, o, lse, d_o, dqkv, scale, causal, ws);
  });
  const double pairs = static_cast<double>(b * h) * (causal ? t * (t + 1) / 2 : t * t);
  std::printf("attention_packed B %lld H %lld T %lld Dh %lld %s bf16: forward %.3f ms (%.1f TFLOP/s), "
              "backward %.3f ms (%.1f TFLOP/s)\n",
              static_cast<long long>(b), static_cast<long long>(h), static_cast<long long>(t),
              static_cast<long long>(dh), causal ? "causal" : "full", fwd,
              pairs * (4 * dh + 3) / fwd * 1e-9, bwd, pairs * (10 * dh + 5) / bwd * 1e-9);
  return 0;
}

int main(int argc, char **argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception &e) {  // no GPU, a kernel's failure
    std::fprintf(stderr, "attention_bench: %s\n", e.what());
    return 2;
  }
}

// dsrt_host_adam_bench [threads] [repeats] [--flat]: times the host
// optimizer (dsrt::adamw on the cpu backend, in place, fp32 states) over
// GPT-2 small's 124M parameters, tensor by tensor as a generated program
// updates them (--flat: one tensor of the same size), and the machine's copy
// bandwidth (an in-place add) on the same threads. Prints one JSON object;
// bench/host_adam_bench.py compares it with torch.optim.AdamW.
#include "dsrt/kernels.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

using namespace dsrt;

namespace {

// GPT-2 small (124,439,808 parameters): the sizes of its tensors.
std::vector<int64_t> gpt2_small() {
  const int64_t d = 768;
  std::vector<int64_t> sizes = {50257 * d, 1024 * d};
  for (int layer = 0; layer < 12; ++layer)
    for (int64_t n : {d, d, d * 3 * d, 3 * d, d * d, d, d, d, d * 4 * d, 4 * d, 4 * d * d, d})
      sizes.push_back(n);
  sizes.push_back(d);
  sizes.push_back(d);
  return sizes;
}

double median_s(int repeats, const std::function<void()> &f) {
  f();  // warm up: pages, thread pool
  std::vector<double> times;
  for (int i = 0; i < repeats; ++i) {
    auto start = std::chrono::steady_clock::now();
    f();
    times.push_back(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

}  // namespace

int main(int argc, char **argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 2;
  const int repeats = argc > 2 ? std::atoi(argv[2]) : 5;
  const bool flat = argc > 3 && std::strcmp(argv[3], "--flat") == 0;
  if (threads < 1 || repeats < 1) {
    std::fprintf(stderr, "usage: dsrt_host_adam_bench [threads >= 1] [repeats >= 1] [--flat]\n");
    return 2;
  }
  omp_set_num_threads(threads);
  std::vector<int64_t> sizes = gpt2_small();
  int64_t n = 0;
  for (int64_t s : sizes) n += s;
  if (flat) sizes = {n};
  // Four fp32 arrays: parameters, gradients, m, v (first-touched by the
  // threads that update them).
  std::vector<float *> arrays(4);
  for (float *&a : arrays) {
    a = static_cast<float *>(std::aligned_alloc(64, static_cast<size_t>(n) * 4));
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) a[i] = 0.001f * static_cast<float>(i % 1000);
  }
  Stream s(Backend::Cpu, threads);
  float lr_value = 1e-4f;
  int64_t t = 10;
  Tensor lr{&lr_value, DType::F32, Shape{}}, step{&t, DType::I64, Shape{}};
  const double adam_s = median_s(repeats, [&] {
    int64_t at = 0;
    for (int64_t size : sizes) {
      Tensor v[4];
      for (int k = 0; k < 4; ++k) v[k] = Tensor{arrays[k] + at, DType::F32, Shape{size}};
      adamw(s, lr, step, v[0], v[1], v[2], v[3], v[0], v[2], v[3], 0.9f, 0.999f, 1e-8f, 0.01f,
            true);
      at += size;
    }
    s.synchronize();
  });
  // Memory bandwidth as the update uses memory: x += y in place (two
  // arrays read, one written back where it was read, so no write-allocate
  // traffic, as adamw's in-place outputs), on the same threads; bytes read
  // plus bytes written per second.
  const double copy_s = median_s(repeats, [&] {
    float *x = arrays[0];
    const float *y = arrays[1];
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) x[i] += y[i];
  });
  // adamw reads p, g, m, v and writes p, m, v: 28 bytes per parameter.
  std::printf("{\"parameters\": %lld, \"tensors\": %zu, \"threads\": %d, \"adamw_s\": %.6f, "
              "\"copy_bytes_per_s\": %.6e, \"bytes_per_step\": %lld}\n",
              static_cast<long long>(n), sizes.size(), threads, adam_s,
              3.0 * 4.0 * static_cast<double>(n) / copy_s, static_cast<long long>(28 * n));
  for (float *a : arrays) std::free(a);
  return 0;
}

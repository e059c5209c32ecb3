// Training dropout on the cuda backend: one thread per block of four
// elements runs the Philox4x32-10 call of dsrt/philox.h (the same code as
// the cpu kernel, compiled for the device), so masks match the cpu's bit
// for bit for the same (seed, counter).
#include "dsrt/philox.h"

#include "cuda/common.cuh"

namespace dsrt {

using namespace detail;

namespace {

template <typename T>
__global__ void dropout_kernel(const T *x, T *y, uint8_t *mask, int64_t n, float ratio,
                               float scale, uint64_t seed, uint64_t counter) {
  const uint32_t key0 = static_cast<uint32_t>(seed), key1 = static_cast<uint32_t>(seed >> 32);
  const uint32_t c0 = static_cast<uint32_t>(counter), c1 = static_cast<uint32_t>(counter >> 32);
  DSRT_GRID_STRIDE(b, (n + 3) / 4) {
    const uint64_t block = static_cast<uint64_t>(b);
    const Philox4x32 r = philox4x32_10(
        {{static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32), c0, c1}}, key0, key1);
    const int64_t first = b * 4, last = first + 4 < n ? first + 4 : n;
    for (int64_t i = first; i < last; ++i) {
      const bool keep = philox_uniform_bits(r.v[i - first]) >= ratio;
      mask[i] = keep;
      y[i] = keep ? st<T>(ld(x[i]) * scale) : st<T>(0.0f);
    }
  }
}

}  // namespace

void dropout(Stream &s, const Tensor &x, const Tensor &y, const Tensor &mask, float ratio,
             uint64_t seed, uint64_t counter) {
  cudaStream_t stream = begin_kernel(s);
  const char *kernel = "dropout";
  check_dropout(kernel, x, y, mask, ratio);
  const int64_t n = x.numel();
  if (n == 0)
    return;
  const float scale = 1.0f / (1.0f - ratio);
  dispatch_float(kernel, x.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    dropout_kernel<T><<<blocks_for((n + 3) / 4), kThreads, 0, stream>>>(
        x.as<T>(), y.as<T>(), mask.as<uint8_t>(), n, ratio, scale, seed, counter);
  });
  check_launch(kernel);
}

}  // namespace dsrt

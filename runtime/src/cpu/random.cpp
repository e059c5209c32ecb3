// Training dropout with the counter-based Philox4x32-10 stream of
// dsrt/philox.h: element i is kept when philox_uniform(seed, counter, i) >=
// ratio. One Philox call covers four consecutive elements, and threads split
// the tensor on multiples of four, so the mask is independent of the thread
// count and identical on every backend.
#include "dsrt/philox.h"

#include "internal.h"

namespace dsrt {

using namespace detail;

void dropout(Stream &s, const Tensor &x, const Tensor &y, const Tensor &mask, float ratio,
             uint64_t seed, uint64_t counter) {
  begin_kernel(s);
  const char *kernel = "dropout";
  check_dropout(kernel, x, y, mask, ratio);
  const int64_t n = x.numel();
  const int64_t blocks = (n + 3) / 4;
  const float scale = 1.0f / (1.0f - ratio);
  const uint32_t key0 = static_cast<uint32_t>(seed), key1 = static_cast<uint32_t>(seed >> 32);
  const uint32_t c0 = static_cast<uint32_t>(counter), c1 = static_cast<uint32_t>(counter >> 32);
  uint8_t *m = mask.as<uint8_t>();
  dispatch_float(kernel, x.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T *in = x.as<T>();
    T *out = y.as<T>();
    parallel_for(s, blocks, kGrainElementwise / 4, [&](int64_t begin, int64_t end) {
      for (int64_t b = begin; b < end; ++b) {
        const uint64_t block = static_cast<uint64_t>(b);
        Philox4x32 r = philox4x32_10(
            {{static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32), c0, c1}}, key0,
            key1);
        const int64_t first = b * 4, last = std::min(n, first + 4);
        for (int64_t i = first; i < last; ++i) {
          const bool keep = philox_uniform_bits(r.v[i - first]) >= ratio;
          m[i] = keep;
          out[i] = keep ? from_float<T>(to_float(in[i]) * scale) : from_float<T>(0.0f);
        }
      }
    });
  });
}

}  // namespace dsrt

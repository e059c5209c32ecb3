// dsrt: the Philox4x32-10 counter-based random number generator and the
// uniform draw that dropout uses.
//
// Philox4x32-10 is the generator of Salmon, Moraes, Dror and Shaw, "Parallel
// random numbers: as easy as 1, 2, 3" (SC 2011), as in their Random123
// library and in cuRAND: a 128-bit counter and a 64-bit key map to 128
// random bits in 10 rounds. It is stateless, so every backend (and every
// thread) draws the same numbers for the same (key, counter).
#ifndef DSRT_PHILOX_H
#define DSRT_PHILOX_H

#include <cstdint>

// Compiled for the device too by the cuda backend, so that both backends
// run this very code.
#ifdef __CUDACC__
#define DSRT_PHILOX_HD __host__ __device__
#else
#define DSRT_PHILOX_HD
#endif

namespace dsrt {

struct Philox4x32 {
  uint32_t v[4];
};

// Philox4x32 with 10 rounds: out = philox(counter, key).
DSRT_PHILOX_HD inline Philox4x32 philox4x32_10(Philox4x32 counter, uint32_t key0, uint32_t key1) {
  const uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;  // round multipliers
  const uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;  // key schedule (Weyl)
  uint32_t *c = counter.v;
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      key0 += kW0;
      key1 += kW1;
    }
    uint64_t p0 = static_cast<uint64_t>(kM0) * c[0];
    uint64_t p1 = static_cast<uint64_t>(kM1) * c[2];
    uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
    uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
    Philox4x32 next = {{hi1 ^ c[1] ^ key0, lo1, hi0 ^ c[3] ^ key1, lo0}};
    counter = next;
  }
  return counter;
}

// The uniform float of element `index` of the draw (seed, counter), as used
// by dropout. The exact mapping, which every backend must reproduce:
//
//   key     = (seed & 0xffffffff, seed >> 32)
//   block   = index / 4, lane = index % 4
//   ctr     = (block & 0xffffffff, block >> 32,
//              counter & 0xffffffff, counter >> 32)
//   bits    = philox4x32_10(ctr, key).v[lane]
//   uniform = (bits >> 8) * 2^-24            (exact in f32, in [0, 1))
//
// so one Philox call yields the uniforms of four consecutive elements.
DSRT_PHILOX_HD inline float philox_uniform_bits(uint32_t bits) {
  return static_cast<float>(bits >> 8) * 5.9604644775390625e-8f;  // 2^-24
}

DSRT_PHILOX_HD inline float philox_uniform(uint64_t seed, uint64_t counter, uint64_t index) {
  uint64_t block = index / 4;
  Philox4x32 ctr = {{static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32),
                     static_cast<uint32_t>(counter), static_cast<uint32_t>(counter >> 32)}};
  Philox4x32 r =
      philox4x32_10(ctr, static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
  return philox_uniform_bits(r.v[index % 4]);
}

}  // namespace dsrt

#endif  // DSRT_PHILOX_H

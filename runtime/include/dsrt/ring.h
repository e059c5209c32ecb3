// dsrt: the payload bytes of the ring collectives, header-only, so that the
// compiler's plan (dsopt's lib/Analysis/Plan.cpp) counts exactly what
// libdsrt's Communicator sends and receives (docs/runtime.md, "Traffic").
// No dependency beyond <cstdint>.
#ifndef DSRT_RING_H
#define DSRT_RING_H

#include <cstdint>

namespace dsrt {
namespace ring {

// The ring partition of `total` elements among `ranks`: chunk j (taken
// modulo ranks) has total / ranks elements, one more for the first
// total % ranks chunks.
inline int64_t chunk_size(int64_t total, int64_t ranks, int64_t j) {
  j = ((j % ranks) + ranks) % ranks;
  return total / ranks + (j < total % ranks ? 1 : 0);
}

struct Bytes {
  int64_t sent = 0, received = 0;
};

// Rank `rank` of `ranks` in one collective over `total` elements of
// `element` bytes each. Reductions send their partials in the element type
// (16-bit floats too, as NCCL does), so every collective moves `element`
// bytes per element on the wire.
inline Bytes all_reduce(int64_t element, int64_t total, int64_t ranks, int64_t rank) {
  if (ranks == 1) return {};
  auto c = [&](int64_t j) { return chunk_size(total, ranks, j); };
  return {element * (2 * total - c(rank) - c(rank + 1)),
          element * (2 * total - c(rank - 1) - c(rank))};
}
inline Bytes reduce_scatter(int64_t element, int64_t total, int64_t ranks, int64_t rank) {
  if (ranks == 1) return {};
  auto c = [&](int64_t j) { return chunk_size(total, ranks, j); };
  return {element * (total - c(rank)), element * (total - c(rank - 1))};
}
inline Bytes all_gather(int64_t element, int64_t total, int64_t ranks, int64_t rank) {
  if (ranks == 1) return {};
  auto c = [&](int64_t j) { return chunk_size(total, ranks, j); };
  return {element * (total - c(rank + 1)), element * (total - c(rank))};
}

}  // namespace ring
}  // namespace dsrt

#endif  // DSRT_RING_H

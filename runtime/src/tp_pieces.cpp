// dsrt: a tensor-parallel piece between the whole tensor's bytes and the
// piece's, both in host buffers (loading, --save-onnx).
#include "dsrt/dist.h"
#include "dsrt/tensor.h"

#include <cstdint>
#include <algorithm>
#include <cstring>
#include <string>

namespace dsrt {

int64_t tp_padded_piece(int64_t extent, int64_t ranks) {
  if (ranks < 1) return extent;
  const int64_t piece = (extent + ranks - 1) / ranks;
  return (piece + kTpPadMultiple - 1) / kTpPadMultiple * kTpPadMultiple;
}

bool tp_piece_run_ok(int64_t extent, int64_t ranks, int64_t run) {
  return ranks >= 1 && extent >= 1 && run >= (extent + ranks - 1) / ranks &&
         run <= tp_padded_piece(extent, ranks);
}

namespace {
// Along the split axis: each piece's run per block, equal pieces (run 0)
// or a padded split's `run`.
int64_t piece_run(const Shape &whole, int64_t dim, int64_t blocks, int64_t ranks, int64_t rank,
                  int64_t run, const char *what) {
  if (dim < 0 || dim >= whole.rank || blocks < 1 || ranks < 1 || rank < 0 || rank >= ranks ||
      (run == 0 && whole[dim] % (blocks * ranks) != 0) ||
      (run != 0 && (blocks != 1 || !tp_piece_run_ok(whole[dim], ranks, run))))
    throw Error(std::string(what) + ": piece " + std::to_string(rank) + " of " +
                std::to_string(ranks) + " of " + whole.str() + " along axis " +
                std::to_string(dim) + " in " + std::to_string(blocks) + " blocks" +
                (run != 0 ? " padded to " + std::to_string(run) + " entries" : ""));
  return run != 0 ? run : whole[dim] / (blocks * ranks);
}
}  // namespace

Shape tp_piece_shape(const Shape &whole, int64_t dim, int64_t blocks, int64_t ranks,
                     int64_t run) {
  Shape piece = whole;
  piece.dims[dim] = blocks * piece_run(whole, dim, blocks, ranks, 0, run, "tp_piece_shape");
  return piece;
}

void tp_piece_copy(void *whole_bytes, void *piece_bytes, const Shape &whole, int64_t dim,
                   int64_t blocks, int64_t ranks, int64_t rank, size_t elem_size, bool to_piece,
                   int64_t padded_run) {
  const int64_t run = piece_run(whole, dim, blocks, ranks, rank, padded_run, "tp_piece_copy");
  int64_t outer = 1, inner = 1;
  for (int64_t a = 0; a < dim; ++a) outer *= whole[a];
  for (int64_t a = dim + 1; a < whole.rank; ++a) inner *= whole[a];
  // Per outer index and block, one run of the piece's rows along `dim`, of
  // which the rows past a padded whole's end are not the whole's.
  const int64_t block = whole[dim] / blocks;
  const int64_t held = std::max<int64_t>(0, std::min(run, block - rank * run));
  const size_t run_bytes = static_cast<size_t>(run * inner) * elem_size;
  const size_t held_bytes = static_cast<size_t>(held * inner) * elem_size;
  auto *w = static_cast<uint8_t *>(whole_bytes);
  auto *p = static_cast<uint8_t *>(piece_bytes);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t b = 0; b < blocks; ++b) {
      uint8_t *at = w + static_cast<size_t>((o * whole[dim] + b * block + rank * run) * inner) *
                            elem_size;
      if (to_piece) {
        if (held_bytes) std::memcpy(p, at, held_bytes);
        std::memset(p + held_bytes, 0, run_bytes - held_bytes);
      } else if (held_bytes) {
        std::memcpy(at, p, held_bytes);
      }
      p += run_bytes;
    }
}

}  // namespace dsrt

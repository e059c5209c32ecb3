// dsrt: a tensor-parallel piece between the whole tensor's bytes and the
// piece's, both in host buffers (loading, --save-onnx).
#include "dsrt/dist.h"
#include "dsrt/tensor.h"

#include <cstdint>
#include <cstring>
#include <string>

namespace dsrt {

void tp_piece_copy(void *whole_bytes, void *piece_bytes, const Shape &whole, int64_t dim,
                   int64_t blocks, int64_t ranks, int64_t rank, size_t elem_size, bool to_piece) {
  if (dim < 0 || dim >= whole.rank || blocks < 1 || ranks < 1 || rank < 0 || rank >= ranks ||
      whole[dim] % (blocks * ranks) != 0)
    throw Error("tp_piece_copy: piece " + std::to_string(rank) + " of " + std::to_string(ranks) +
                " of " + whole.str() + " along axis " + std::to_string(dim) + " in " +
                std::to_string(blocks) + " blocks");
  int64_t outer = 1, inner = 1;
  for (int64_t a = 0; a < dim; ++a) outer *= whole[a];
  for (int64_t a = dim + 1; a < whole.rank; ++a) inner *= whole[a];
  // Per outer index and block, one run of the piece's rows along `dim`.
  const int64_t block = whole[dim] / blocks, run = block / ranks;
  const size_t run_bytes = static_cast<size_t>(run * inner) * elem_size;
  auto *w = static_cast<uint8_t *>(whole_bytes);
  auto *p = static_cast<uint8_t *>(piece_bytes);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t b = 0; b < blocks; ++b) {
      uint8_t *at = w + static_cast<size_t>((o * whole[dim] + b * block + rank * run) * inner) *
                            elem_size;
      if (to_piece)
        std::memcpy(p, at, run_bytes);
      else
        std::memcpy(at, p, run_bytes);
      p += run_bytes;
    }
}

}  // namespace dsrt

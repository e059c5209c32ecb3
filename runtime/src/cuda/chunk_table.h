// The chunk tables of the cuda backend's adamw_multi (host code, no CUDA, so
// that a test without a GPU checks them). The concatenation of a list's
// tensors is cut into chunks of kChunkElements elements, cut across tensors,
// one block each: every block does the same work whatever the tensors' sizes
// (a bias of 768 elements and a matrix of 2.4M), as apex's
// multi_tensor_apply and llm.c's multi-tensor AdamW balance it. A chunk is a
// run of pieces (tensor slot, start, len); one launch takes up to
// kChunkTensors tensors and kChunkBlocks chunks. Not installed.
#ifndef DSRT_SRC_CUDA_CHUNK_TABLE_H
#define DSRT_SRC_CUDA_CHUNK_TABLE_H

#include <algorithm>
#include <cstdint>
#include <vector>

namespace dsrt {
namespace detail {

constexpr int kChunkTensors = 32;
constexpr int kChunkBlocks = 320;
constexpr int64_t kChunkElements = 65536;
// Each piece starts at a chunk boundary or a tensor boundary.
constexpr int kChunkPieces = kChunkBlocks + kChunkTensors;

struct ChunkPiece {
  int64_t start;   // in the tensor
  int32_t len;     // at most kChunkElements
  int32_t tensor;  // slot in the launch's tensor table
};

// One launch: its tensors (indices into the call's list) and its chunks.
struct ChunkTable {
  int num_tensors = 0, num_blocks = 0, num_pieces = 0;
  int tensor[kChunkTensors];          // the list's index of slot k
  int first_piece[kChunkBlocks + 1];  // block b: pieces [first_piece[b], first_piece[b + 1])
  ChunkPiece piece[kChunkPieces];
};

// The launches of a list of tensors of `sizes` elements: every element of
// every tensor in exactly one piece, in list order; every chunk but the
// last of a launch holds kChunkElements elements.
inline std::vector<ChunkTable> chunk_tables(const int64_t *sizes, int num_tensors) {
  std::vector<ChunkTable> tables(1);
  int64_t in_block = 0;  // elements given to the current block so far
  auto open_block = [&]() {
    ChunkTable &t = tables.back();
    t.first_piece[t.num_blocks] = t.num_pieces;
    ++t.num_blocks;
    in_block = 0;
  };
  auto close_table = [&]() {
    ChunkTable &t = tables.back();
    t.first_piece[t.num_blocks] = t.num_pieces;
  };
  for (int i = 0; i < num_tensors; ++i) {
    const int64_t n = sizes[i];
    for (int64_t start = 0; start < n;) {
      ChunkTable *t = &tables.back();
      const bool block_full = t->num_blocks == 0 || in_block == kChunkElements;
      const bool new_tensor = t->num_tensors == 0 || t->tensor[t->num_tensors - 1] != i;
      if ((block_full && t->num_blocks == kChunkBlocks) ||
          (new_tensor && t->num_tensors == kChunkTensors) || t->num_pieces == kChunkPieces) {
        close_table();
        tables.emplace_back();
        t = &tables.back();
        open_block();
      } else if (block_full) {
        open_block();
      }
      if (t->num_tensors == 0 || t->tensor[t->num_tensors - 1] != i)
        t->tensor[t->num_tensors++] = i;
      const int64_t len = std::min(n - start, kChunkElements - in_block);
      t->piece[t->num_pieces++] = ChunkPiece{start, static_cast<int32_t>(len), t->num_tensors - 1};
      in_block += len;
      start += len;
    }
  }
  close_table();
  if (tables.back().num_blocks == 0)
    tables.pop_back();
  return tables;
}

}  // namespace detail
}  // namespace dsrt

#endif  // DSRT_SRC_CUDA_CHUNK_TABLE_H

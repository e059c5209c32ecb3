// The cuda backend's adamw_multi chunk tables (src/cuda/chunk_table.h), on
// the host: every element of every tensor in exactly one piece, every block
// of a launch full but its last, no launch over its limits. The kernel that
// walks them runs only on a GPU (dsrt_cuda_kernel_test's adamw_multi cases).
#include "cuda/chunk_table.h"

#include <gtest/gtest.h>

#include <vector>

namespace {

using namespace dsrt::detail;

void check_covers(const std::vector<int64_t> &sizes) {
  const std::vector<ChunkTable> tables = chunk_tables(sizes.data(), static_cast<int>(sizes.size()));
  std::vector<int64_t> next(sizes.size(), 0);  // the next element expected of tensor i
  for (const ChunkTable &t : tables) {
    ASSERT_GT(t.num_blocks, 0);
    ASSERT_LE(t.num_blocks, kChunkBlocks);
    ASSERT_LE(t.num_tensors, kChunkTensors);
    ASSERT_LE(t.num_pieces, kChunkPieces);
    ASSERT_EQ(t.first_piece[0], 0);
    ASSERT_EQ(t.first_piece[t.num_blocks], t.num_pieces);
    for (int b = 0; b < t.num_blocks; ++b) {
      int64_t work = 0;
      ASSERT_LT(t.first_piece[b], t.first_piece[b + 1]) << "block " << b << " is empty";
      for (int p = t.first_piece[b]; p < t.first_piece[b + 1]; ++p) {
        const ChunkPiece &piece = t.piece[p];
        ASSERT_GE(piece.tensor, 0);
        ASSERT_LT(piece.tensor, t.num_tensors);
        const int i = t.tensor[piece.tensor];
        ASSERT_EQ(piece.start, next[i]) << "tensor " << i << " out of order or overlapping";
        ASSERT_GT(piece.len, 0);
        next[i] += piece.len;
        work += piece.len;
      }
      ASSERT_LE(work, kChunkElements);
      if (b + 1 < t.num_blocks)
        EXPECT_EQ(work, kChunkElements) << "block " << b << " of " << t.num_blocks;
    }
  }
  for (size_t i = 0; i < sizes.size(); ++i)
    EXPECT_EQ(next[i], sizes[i]) << "tensor " << i;
}

TEST(ChunkTable, SmallTensorsShareOneBlock) {
  const std::vector<int64_t> sizes = {4, 5, 1, 300};
  check_covers(sizes);
  const std::vector<ChunkTable> tables = chunk_tables(sizes.data(), 4);
  ASSERT_EQ(tables.size(), 1u);
  EXPECT_EQ(tables[0].num_blocks, 1);
  EXPECT_EQ(tables[0].num_pieces, 4);
}

TEST(ChunkTable, LargeTensorsAreCutAcrossBlocks) {
  // Chunks cut across tensor boundaries: 70000 + 3 + 140000 elements make
  // four blocks, the first three full.
  const std::vector<int64_t> sizes = {70000, 3, 140000};
  check_covers(sizes);
  const std::vector<ChunkTable> tables = chunk_tables(sizes.data(), 3);
  ASSERT_EQ(tables.size(), 1u);
  EXPECT_EQ(tables[0].num_blocks, 4);
}

TEST(ChunkTable, ManyTensorsAndBlocksNeedSeveralLaunches) {
  std::vector<int64_t> fifty;
  for (int k = 1; k <= 50; ++k)
    fifty.push_back(k);
  check_covers(fifty);
  EXPECT_EQ(chunk_tables(fifty.data(), 50).size(), 2u);  // 32 tensors a launch
  // GPT-2 124M's shapes, roughly: more chunks than one launch's 320.
  std::vector<int64_t> gpt;
  gpt.push_back(50257 * 768);
  for (int layer = 0; layer < 12; ++layer)
    for (int64_t n : {768, 768, 768 * 2304, 2304, 768 * 768, 768, 768, 768, 768 * 3072, 3072,
                      3072 * 768, 768})
      gpt.push_back(n);
  check_covers(gpt);
  EXPECT_GT(chunk_tables(gpt.data(), static_cast<int>(gpt.size())).size(), 1u);
}

TEST(ChunkTable, EmptyTensorsAndLists) {
  const std::vector<int64_t> sizes = {0, 7, 0};
  check_covers(sizes);
  EXPECT_TRUE(chunk_tables(nullptr, 0).empty());
}

}  // namespace

// The checkpoint format (dsrt/checkpoint.h): CRC32C against the standard's
// check value, a checkpoint of two shard files read back across their
// pieces, and the refusals (a hole, a tensor of another shape, a corrupt
// byte, a truncated file, a manifest changed or cut short).
#include "dsrt/checkpoint.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <unistd.h>

namespace {

namespace ck = dsrt::checkpoint;
namespace fs = std::filesystem;
using dsrt::DType;
using dsrt::Shape;

class Checkpoint : public testing::Test {
protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("dsrt_checkpoint_test_" + std::to_string(getpid()));
    fs::create_directories(dir_ / "step_2");
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string step_dir() const { return (dir_ / "step_2").string(); }

  // Two [2, 2] f32 pieces of "param:w", one per rank file, committed and
  // opened.
  ck::Checkpoint commit_pieces(const ck::TpPiece &piece0, const float *p0,
                               const ck::TpPiece &piece1, const float *p1) {
    ck::ShardWriter first, second;
    first.add(ck::tp_piece_key(piece0), DType::F32, Shape{2, 2}, 0, 4, p0);
    second.add(ck::tp_piece_key(piece1), DType::F32, Shape{2, 2}, 0, 4, p1);
    commit({&first, &second});
    return ck::open_checkpoint(step_dir());
  }

  // "param:w", the checkpoint's only whole tensor, read whole: `shape`,
  // holding 0, 1, 2, ... in order.
  static ck::WholeTensor read_whole_w(const ck::Checkpoint &c, const Shape &shape) {
    const std::vector<ck::Record> wholes = ck::whole_tensors(c);
    EXPECT_EQ(wholes.size(), 1u);
    if (!wholes.empty()) {
      EXPECT_EQ(wholes[0].key, "param:w");
      EXPECT_EQ(wholes[0].shape, shape);
    }
    ck::WholeTensor whole = ck::read_whole(c, "param:w");
    EXPECT_EQ(whole.shape, shape);
    const auto *values = reinterpret_cast<const float *>(whole.bytes.data());
    const size_t n = whole.bytes.size() / sizeof(float);
    EXPECT_EQ(static_cast<int64_t>(n), shape.numel());
    for (size_t i = 0; i < n; ++i) EXPECT_EQ(values[i], static_cast<float>(i)) << i;
    return whole;
  }

  // Tensor "w" [2, 3] = 0..5 split over two files ([0, 4) and [4, 6)), and
  // "b" [3] whole in the first; `holes` leaves element 5 out.
  void write(bool hole = false) {
    const float w[6] = {0, 1, 2, 3, 4, 5}, b[3] = {7, 8, 9};
    ck::ShardWriter first, second;
    first.add("param:w", DType::F32, Shape{2, 3}, 0, 4, w);
    first.add("param:b", DType::F32, Shape{3}, 0, 3, b);
    second.add("param:w", DType::F32, Shape{2, 3}, 4, hole ? 1 : 2, w + 4);
    commit({&first, &second});
  }

  // The shard files of `writers` (rank_0.bin, ...), their manifest and
  // `latest`.
  void commit(std::initializer_list<ck::ShardWriter *> writers) {
    ck::Manifest m;
    m.step = 2;
    m.applied = 2;
    m.model = "0123456789abcdef";
    m.layout = "dp=2";
    m.world = static_cast<int64_t>(writers.size());
    int rank = 0;
    for (ck::ShardWriter *writer : writers) {
      uint32_t crc = 0;
      const std::vector<uint8_t> bytes = writer->finish(2, rank, m.model, crc);
      const std::string name = "rank_" + std::to_string(rank++) + ".bin";
      ck::write_durable(step_dir() + "/" + name, bytes.data(), bytes.size());
      m.files.push_back({name, bytes.size(), crc});
    }
    const std::string text = ck::manifest_text(m);
    ck::write_durable(step_dir() + "/manifest", text.data(), text.size());
    const std::string latest = "step_2\n";
    ck::write_durable((dir_ / "latest").string(), latest.data(), latest.size());
  }

  std::string error_of(const std::function<void()> &f) {
    try {
      f();
    } catch (const dsrt::Error &e) {
      return e.what();
    }
    return "(no error)";
  }

  fs::path dir_;
};

TEST(Crc32c, CheckValue) {
  // RFC 3720, B.4: CRC32C of "123456789".
  EXPECT_EQ(ck::crc32c("123456789", 9), 0xE3069283u);
  EXPECT_EQ(ck::crc32c("12345", 5, 0) , ck::crc32c("12345", 5));
  EXPECT_EQ(ck::crc32c("6789", 4, ck::crc32c("12345", 5)), 0xE3069283u);
}

TEST_F(Checkpoint, ReadsRangesAcrossFiles) {
  write();
  const ck::Checkpoint c = ck::open_checkpoint(dir_.string());  // through `latest`
  EXPECT_EQ(c.manifest.step, 2);
  ASSERT_EQ(c.files.size(), 2u);
  for (const auto &f : c.manifest.files) ck::verify_shard(c.dir, f);
  // Elements 3..6 of w, then past its end: padding zeros.
  std::vector<uint8_t> bytes = ck::read_range(c, "param:w", DType::F32, Shape{2, 3}, 3, 4);
  const float *v = reinterpret_cast<const float *>(bytes.data());
  EXPECT_EQ(v[0], 3);
  EXPECT_EQ(v[1], 4);
  EXPECT_EQ(v[2], 5);
  EXPECT_EQ(v[3], 0);
  const std::vector<ck::Record> all = ck::tensors(c);
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].key, "param:b");
  EXPECT_EQ(all[1].count, 6);
}

TEST_F(Checkpoint, Refusals) {
  write(/*hole=*/true);
  ck::Checkpoint c = ck::open_checkpoint(step_dir());
  EXPECT_NE(error_of([&] { ck::read_range(c, "param:w", DType::F32, Shape{2, 3}, 0, 6); })
                .find("lacks element 5 of tensor 'param:w'"),
            std::string::npos);
  EXPECT_NE(error_of([&] { ck::read_range(c, "param:w", DType::F32, Shape{6}, 0, 6); })
                .find("rank_0.bin': tensor 'param:w' is f32 [2, 3]"),
            std::string::npos);
  EXPECT_NE(error_of([&] { ck::read_range(c, "param:x", DType::F32, Shape{6}, 0, 6); })
                .find("holds no tensor 'param:x'"),
            std::string::npos);

  // A byte of b's data flipped: the file's CRC and b's own.
  write();
  const std::string file = step_dir() + "/rank_0.bin";
  c = ck::open_checkpoint(step_dir());
  const uint64_t at = c.files[0].data_start + c.files[0].records[1].offset;
  {
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(at));
    f.put('\x55');
  }
  EXPECT_NE(error_of([&] { ck::verify_shard(c.dir, c.manifest.files[0]); }).find("is corrupt"),
            std::string::npos);
  EXPECT_NE(error_of([&] { ck::read_range(c, "param:b", DType::F32, Shape{3}, 0, 3); })
                .find("tensor 'param:b' has CRC32C"),
            std::string::npos);

  // Truncated.
  fs::resize_file(file, 40);
  EXPECT_NE(error_of([&] { ck::open_checkpoint(step_dir()); }).find("(truncated)"),
            std::string::npos);

  // The manifest edited, then cut short.
  write();
  std::string text;
  {
    std::ifstream in(step_dir() + "/manifest");
    text.assign(std::istreambuf_iterator<char>(in), {});
  }
  std::string edited = text;
  edited.replace(edited.find("applied 2"), 9, "applied 3");
  ck::write_durable(step_dir() + "/manifest", edited.data(), edited.size());
  EXPECT_NE(error_of([&] { ck::read_manifest(step_dir()); }).find("checksum does not match"),
            std::string::npos);
  ck::write_durable(step_dir() + "/manifest", text.data(), text.size() / 2);
  EXPECT_NE(error_of([&] { ck::read_manifest(step_dir()); }).find("is corrupt"),
            std::string::npos);
}

// Tensor-parallel pieces: "w" [2, 4] = 0..7 cut along axis 1 in 2 blocks
// over 2 ranks (rank r holds columns r and 2 + r), one piece per file.
TEST_F(Checkpoint, TensorParallelPiecesReadWhole) {
  const ck::TpPiece piece0{"param:w", 0, 2, 1, 2}, piece1{"param:w", 1, 2, 1, 2};
  EXPECT_EQ(ck::tp_piece_key(piece1), "param:w@tp1/2,dim=1,blocks=2");
  const std::optional<ck::TpPiece> parsed = ck::parse_tp_piece_key(ck::tp_piece_key(piece1));
  ASSERT_TRUE(parsed);
  EXPECT_EQ(parsed->base, "param:w");
  EXPECT_EQ(parsed->rank, 1);
  EXPECT_EQ(parsed->ranks, 2);
  EXPECT_EQ(parsed->dim, 1);
  EXPECT_EQ(parsed->blocks, 2);
  for (const char *key : {"param:w", "param:w@tp2/2,dim=1,blocks=2", "param:w@tp0/2",
                          "param:w@tp0/2,dim=1,blocks=0", "param:w@tp0/2,dim=1,blocks=2x"})
    EXPECT_FALSE(ck::parse_tp_piece_key(key)) << key;

  const float p0[4] = {0, 2, 4, 6}, p1[4] = {1, 3, 5, 7};
  const ck::Checkpoint c = commit_pieces(piece0, p0, piece1, p1);
  read_whole_w(c, Shape{2, 4});
  EXPECT_NE(error_of([&] { ck::read_whole(c, "param:v"); }).find("holds no tensor 'param:v'"),
            std::string::npos);
}

// A padded piece as runtimes before the multiple of 8 wrote it: "w" [3, 2]
// = 0..5 along axis 0 over 2 ranks, ceil(3 / 2) = 2 rows each (rank 1's
// second row padding): the key says the model's 3 rows, and the whole
// tensor read back has them, without the padding. Cut again, the pieces
// are this runtime's: 8 rows each.
TEST_F(Checkpoint, TensorParallelPaddedPieces) {
  const ck::TpPiece piece0{"param:w", 0, 2, 0, 1, 3}, piece1{"param:w", 1, 2, 0, 1, 3};
  EXPECT_EQ(ck::tp_piece_key(piece1), "param:w@tp1/2,dim=0,blocks=1,whole=3");
  const std::optional<ck::TpPiece> parsed = ck::parse_tp_piece_key(ck::tp_piece_key(piece1));
  ASSERT_TRUE(parsed);
  EXPECT_EQ(parsed->whole, 3);
  // whole=16 over 2 pads nothing (8 a piece), whole=0 nothing at all.
  EXPECT_TRUE(ck::parse_tp_piece_key("param:w@tp0/2,dim=0,blocks=1,whole=4"));
  for (const char *key : {"param:w@tp0/2,dim=0,blocks=1,whole=16",
                          "param:w@tp0/2,dim=0,blocks=1,whole=0",
                          "param:w@tp0/2,dim=0,blocks=3,whole=3", "param:w@tp0/2,dim=0,blocks=1,"})
    EXPECT_FALSE(ck::parse_tp_piece_key(key)) << key;
  const float p0[4] = {0, 1, 2, 3}, p1[4] = {4, 5, 0, 0};
  const ck::Checkpoint c = commit_pieces(piece0, p0, piece1, p1);
  const ck::WholeTensor whole = read_whole_w(c, Shape{3, 2});
  // Cut again for 3 ranks (one row each, none padded) and for 2 (padded).
  const ck::TpPiece third{"param:w", 2, 3, 0, 1, 0};
  const std::vector<uint8_t> row = ck::piece_range(whole, &third, 0, 2);
  EXPECT_EQ(reinterpret_cast<const float *>(row.data())[1], 5.0f);
  const std::vector<uint8_t> padded = ck::piece_range(whole, &piece0, 0, 16);
  const auto *cut = reinterpret_cast<const float *>(padded.data());
  std::vector<float> rows(16, 0.0f);
  for (int i = 0; i < 6; ++i) rows[static_cast<size_t>(i)] = static_cast<float>(i);
  EXPECT_EQ(std::vector<float>(cut, cut + 16), rows);
}

// This runtime's padded pieces: "w" [11, 2] over 2 ranks holds 8 rows a
// piece (ceil(11 / 2) = 6 rounded up to 8), rank 1's rows 8..10 and five
// rows of zeros; read whole, they are the 11 rows. A piece whose rows are
// neither layout's (9) is refused, naming it.
TEST_F(Checkpoint, TensorParallelPaddedPiecesOfEight) {
  const ck::TpPiece piece0{"param:w", 0, 2, 0, 1, 11}, piece1{"param:w", 1, 2, 0, 1, 11};
  std::vector<float> p0(16), p1(16, 0.0f);
  for (int i = 0; i < 16; ++i) p0[static_cast<size_t>(i)] = static_cast<float>(i);
  for (int i = 0; i < 6; ++i) p1[static_cast<size_t>(i)] = static_cast<float>(16 + i);
  ck::ShardWriter first, second;
  first.add(ck::tp_piece_key(piece0), DType::F32, Shape{8, 2}, 0, 16, p0.data());
  second.add(ck::tp_piece_key(piece1), DType::F32, Shape{8, 2}, 0, 16, p1.data());
  commit({&first, &second});
  const ck::Checkpoint c = ck::open_checkpoint(step_dir());
  const ck::WholeTensor whole = read_whole_w(c, Shape{11, 2});
  const std::vector<uint8_t> again = ck::piece_range(whole, &piece1, 0, 16);
  const auto *cut = reinterpret_cast<const float *>(again.data());
  EXPECT_EQ(std::vector<float>(cut, cut + 16), p1);
  fs::remove_all(step_dir());
  fs::create_directories(step_dir());
  ck::ShardWriter odd0, odd1;
  std::vector<float> nine(18, 0.0f);
  odd0.add(ck::tp_piece_key(piece0), DType::F32, Shape{9, 2}, 0, 18, nine.data());
  odd1.add(ck::tp_piece_key(piece1), DType::F32, Shape{9, 2}, 0, 18, nine.data());
  commit({&odd0, &odd1});
  const ck::Checkpoint bad = ck::open_checkpoint(step_dir());
  EXPECT_NE(error_of([&] { ck::read_whole(bad, "param:w"); })
                .find("of shape [9, 2] is not a piece"),
            std::string::npos);
}

TEST_F(Checkpoint, TensorParallelPieceMissing) {
  const float p0[4] = {0, 2, 4, 6};
  ck::ShardWriter first;
  first.add(ck::tp_piece_key({"param:w", 0, 2, 1, 2}), DType::F32, Shape{2, 2}, 0, 4, p0);
  commit({&first});
  const ck::Checkpoint c = ck::open_checkpoint(step_dir());
  EXPECT_NE(error_of([&] { ck::read_whole(c, "param:w"); })
                .find("lacks tensor-parallel piece 1 of 2 of 'param:w'"),
            std::string::npos);
}

}  // namespace

namespace {
// A file may claim any tensor: the reader refuses what no file could hold
// and checks that the pieces cover a range before allocating it, so a
// crafted header is a dsrt::Error, never an overflow or a huge allocation.
TEST_F(Checkpoint, HugeClaimsRefused) {
  const float two[2] = {1, 2};
  {
    // 2^58 elements (2^60 bytes) claimed, 2 held.
    ck::ShardWriter first;
    first.add("param:huge", DType::F32, Shape{1 << 20, 1 << 20, 1 << 18}, 0, 2, two);
    commit({&first});
    const ck::Checkpoint c = ck::open_checkpoint(step_dir());
    EXPECT_NE(error_of([&] { ck::read_whole(c, "param:huge"); })
                  .find("lacks element 2 of tensor 'param:huge'"),
              std::string::npos);
  }
  {
    // 2^96 elements: not a shape a file can describe.
    ck::ShardWriter first;
    first.add("param:over", DType::F32, Shape{1ll << 32, 1ll << 32, 1ll << 32}, 0, 2, two);
    commit({&first});
    EXPECT_NE(error_of([&] { ck::open_checkpoint(step_dir()); }).find("bad tensor line"),
              std::string::npos);
  }
  {
    // Tensor-parallel pieces whose whole would overflow.
    ck::ShardWriter first;
    first.add(ck::tp_piece_key({"param:w", 0, 999999999999, 0, 1}), DType::F32,
              Shape{1ll << 40, 2}, 0, 2, two);
    commit({&first});
    const ck::Checkpoint c = ck::open_checkpoint(step_dir());
    EXPECT_NE(error_of([&] { ck::whole_tensors(c); }).find("too large to hold"),
              std::string::npos);
  }
}
}  // namespace

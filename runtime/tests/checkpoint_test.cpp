// The checkpoint format (dsrt/checkpoint.h): CRC32C against the standard's
// check value, a checkpoint of two shard files read back across their
// pieces, and the refusals (a hole, a tensor of another shape, a corrupt
// byte, a truncated file, a manifest changed or cut short).
#include "dsrt/checkpoint.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
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

  // Tensor "w" [2, 3] = 0..5 split over two files ([0, 4) and [4, 6)), and
  // "b" [3] whole in the first; `holes` leaves element 5 out.
  void write(bool hole = false) {
    const float w[6] = {0, 1, 2, 3, 4, 5}, b[3] = {7, 8, 9};
    ck::ShardWriter first, second;
    first.add("param:w", DType::F32, Shape{2, 3}, 0, 4, w);
    first.add("param:b", DType::F32, Shape{3}, 0, 3, b);
    second.add("param:w", DType::F32, Shape{2, 3}, 4, hole ? 1 : 2, w + 4);
    ck::Manifest m;
    m.step = 2;
    m.applied = 2;
    m.model = "0123456789abcdef";
    m.layout = "dp=2";
    m.world = 2;
    int rank = 0;
    for (ck::ShardWriter *writer : {&first, &second}) {
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

}  // namespace

// save_onnx on hand-encoded protobuf. train_e2e.py checks real models with
// onnx itself; these pin the wire-level rules: unknown fields, packed dims,
// groups and nodes are copied byte for byte, a parameter's typed data becomes
// raw_data, large tensors go to the data file, and bad bytes or external
// locations are errors.
#include "dsrt/program.h"

#include "test_util.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>
#include <vector>

namespace {

namespace fs = std::filesystem;
using dsrt::DType;

namespace pb {

std::string varint(uint64_t v) {
  std::string out;
  while (v >= 0x80) {
    out += static_cast<char>((v & 0x7f) | 0x80);
    v >>= 7;
  }
  return out + static_cast<char>(v);
}
std::string tag(uint32_t number, int wire) { return varint((uint64_t(number) << 3) | wire); }
std::string bytes(uint32_t number, const std::string &payload) {
  return tag(number, 2) + varint(payload.size()) + payload;
}
std::string number(uint32_t field, uint64_t v) { return tag(field, 0) + varint(v); }
std::string floats(std::initializer_list<float> values) {
  std::string out;
  for (float v : values) out.append(reinterpret_cast<const char *>(&v), 4);
  return out;
}

}  // namespace pb

class SaveOnnx : public testing::Test {
protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("dsrt_save_onnx_test_" + std::to_string(getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    info_.model_path = (dir_ / "model.onnx").string();
    info_.arena_bytes = 64;
    ParamOf("w", DType::F32, {2}, 0);
    std::memcpy(arena_, pb::floats({5.0f, 6.0f}).data(), 8);
  }
  void TearDown() override { fs::remove_all(dir_); }

  void ParamOf(const char *name, DType dtype, dsrt::Shape shape, int64_t offset) {
    dsrt::ParamInfo param;
    param.name = name;
    param.dtype = dtype;
    param.shape = shape;
    param.offset = offset;
    param.trainable = true;
    info_.params.push_back(param);
  }
  void write(const std::string &path, const std::string &content) {
    std::ofstream(path, std::ios::binary) << content;
  }
  std::string read(const std::string &path) {
    std::ifstream in(path, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  }

  fs::path dir_;
  dsrt::ProgramInfo info_;
  alignas(64) uint8_t arena_[64] = {};
};

TEST_F(SaveOnnx, RewritesParametersAndCopiesEverythingElse) {
  // w: packed dims [2], FLOAT, float_data [1, 2] (packed), a doc_string.
  std::string w_head = pb::bytes(1, pb::varint(2)) + pb::number(2, 1) + pb::bytes(8, "w");
  std::string w_doc = pb::bytes(12, "kept");
  std::string w = w_head + pb::bytes(4, pb::floats({1, 2})) + w_doc;
  // c: not a parameter, INT64 int64_data [7]: kept as it is.
  std::string c = pb::number(1, 1) + pb::number(2, 7) + pb::bytes(8, "c") + pb::bytes(7, pb::varint(7));
  std::string node = pb::bytes(1, "in") + pb::bytes(2, "out") + pb::bytes(4, "Identity");
  std::string group = pb::tag(30, 3) + pb::number(1, 5) + pb::tag(30, 4);
  std::string graph_head = pb::bytes(1, node) + group;
  std::string graph_tail = pb::bytes(2, "g") + pb::tag(77, 5) + std::string("\x01\x02\x03\x04", 4);
  std::string model_head = pb::number(1, 8) + pb::tag(99, 1) + std::string(8, '\x7f');
  std::string model_tail = pb::bytes(8, pb::bytes(1, "") + pb::number(2, 17));
  write(info_.model_path, model_head +
                              pb::bytes(7, graph_head + pb::bytes(5, w) + pb::bytes(5, c) + graph_tail) +
                              model_tail);

  std::string out = (dir_ / "out.onnx").string();
  dsrt::save_onnx(info_, arena_, out, "", false);
  std::string new_w = w_head + w_doc + pb::bytes(9, pb::floats({5, 6}));
  EXPECT_EQ(read(out), model_head +
                           pb::bytes(7, graph_head + pb::bytes(5, new_w) + pb::bytes(5, c) + graph_tail) +
                           model_tail);
  EXPECT_FALSE(fs::exists(out + ".data"));

  // --external-data: w (8 bytes) is under 1024 bytes and stays inline.
  dsrt::save_onnx(info_, arena_, out, "", true);
  EXPECT_NE(read(out).find(pb::bytes(9, pb::floats({5, 6}))), std::string::npos);
}

TEST_F(SaveOnnx, LargeParametersGoToTheDataFile) {
  info_.params.clear();
  ParamOf("big", DType::F32, {256}, 0);  // 1024 bytes
  std::vector<uint8_t> arena(1024);
  for (int i = 0; i < 1024; ++i) arena[i] = static_cast<uint8_t>(i * 7);
  std::string head = pb::number(1, 256) + pb::number(2, 1) + pb::bytes(8, "big");
  write(info_.model_path,
        pb::bytes(7, pb::bytes(5, head + pb::bytes(9, std::string(1024, '\0')))));
  std::string out = (dir_ / "big.onnx").string();
  dsrt::save_onnx(info_, arena.data(), out, "", true);
  auto entry = [](const std::string &k, const std::string &v) {
    return pb::bytes(13, pb::bytes(1, k) + pb::bytes(2, v));
  };
  EXPECT_EQ(read(out), pb::bytes(7, pb::bytes(5, head + entry("location", "big.onnx.data") +
                                                  entry("offset", "0") +
                                                  entry("length", "1024") + pb::number(14, 1))));
  EXPECT_EQ(read(out + ".data"), std::string(arena.begin(), arena.end()));
}

TEST_F(SaveOnnx, ShardedParametersAreSavedFromSuppliedValues) {
  // The arena holds w's shard [1] of f32 [2]; the caller supplies all of it.
  info_.params[0].shape = {1};
  info_.params[0].shard_total = 2;
  info_.params[0].full_shape = {2};
  std::string head = pb::bytes(1, pb::varint(2)) + pb::number(2, 1) + pb::bytes(8, "w");
  write(info_.model_path, pb::bytes(7, pb::bytes(5, head + pb::bytes(9, pb::floats({1, 2})))));
  std::string out = (dir_ / "out.onnx").string();
  EXPECT_DSRT_ERROR(dsrt::save_onnx(info_, arena_, out, "", false), "parameter 'w' is sharded",
                    "whole value must be supplied");
  float whole[2] = {7, 8};
  dsrt::Tensor value{whole, DType::F32, {2}};
  dsrt::save_onnx(info_, arena_, out, "", false, {{"w", value}});
  EXPECT_EQ(read(out), pb::bytes(7, pb::bytes(5, head + pb::bytes(9, pb::floats({7, 8})))));
  dsrt::Tensor shard{whole, DType::F32, {1}};
  EXPECT_DSRT_ERROR(dsrt::save_onnx(info_, arena_, out, "", false, {{"w", shard}}),
                    "supplied for parameter 'w' is f32 [1], expected f32 [2]");
  EXPECT_DSRT_ERROR(dsrt::save_onnx(info_, arena_, out, "", false, {{"w", value}, {"v", value}}),
                    "'v', which is not a parameter");
}

TEST_F(SaveOnnx, RefusesWhatItCannotWriteBack) {
  std::string out = (dir_ / "out.onnx").string();
  std::string w = pb::bytes(1, pb::varint(2)) + pb::number(2, 1) + pb::bytes(8, "w") +
                  pb::bytes(9, pb::floats({1, 2}));
  // Truncated in the middle of the initializer.
  std::string model = pb::bytes(7, pb::bytes(5, w));
  write(info_.model_path, model.substr(0, model.size() - 3));
  EXPECT_DSRT_ERROR(dsrt::save_onnx(info_, arena_, out, "", false), "model.onnx",
                    "malformed protobuf");
  // Unbounded nesting of groups.
  std::string groups;
  for (int i = 0; i < 100000; ++i) groups += pb::tag(30, 3);
  write(info_.model_path, groups);
  EXPECT_DSRT_ERROR(dsrt::save_onnx(info_, arena_, out, "", false), "malformed protobuf");
  // Another type than the program's parameter.
  std::string w16 = pb::bytes(1, pb::varint(2)) + pb::number(2, 10) + pb::bytes(8, "w") +
                    pb::bytes(9, std::string(4, '\0'));
  write(info_.model_path, pb::bytes(7, pb::bytes(5, w16)));
  EXPECT_DSRT_ERROR(dsrt::save_onnx(info_, arena_, out, "", false), "initializer 'w'",
                    "data type 10", "f32 [2]");
  // A trained parameter the model does not have.
  write(info_.model_path, pb::bytes(7, ""));
  EXPECT_DSRT_ERROR(dsrt::save_onnx(info_, arena_, out, "", false), "trained parameter 'w'");
  // No graph at all; no model file.
  write(info_.model_path, pb::number(1, 8));
  EXPECT_DSRT_ERROR(dsrt::save_onnx(info_, arena_, out, "", false), "has no graph");
  fs::remove(info_.model_path);
  EXPECT_DSRT_ERROR(dsrt::save_onnx(info_, arena_, out, "", false), "cannot open");
  EXPECT_FALSE(fs::exists(out));
}

TEST_F(SaveOnnx, ExternalDataStaysInsideTheModelsDirectory) {
  std::string out = (dir_ / "out.onnx").string();
  auto external = [](const std::string &location) {
    return pb::number(1, 2) + pb::number(2, 1) + pb::bytes(8, "t") +
           pb::bytes(13, pb::bytes(1, "location") + pb::bytes(2, location)) + pb::number(14, 1);
  };
  write(info_.model_path, pb::bytes(7, pb::bytes(5, external("../escape.bin"))));
  EXPECT_DSRT_ERROR(dsrt::save_onnx(info_, arena_, out, "", false), "tensor 't'", "'..'");
  write(info_.model_path, pb::bytes(7, pb::bytes(5, external("/etc/passwd"))));
  EXPECT_DSRT_ERROR(dsrt::save_onnx(info_, arena_, out, "", false), "absolute path");
  fs::create_directories(dir_ / "outside");
  write((dir_ / "outside/t.bin").string(), std::string(8, 'x'));
  fs::create_directories(dir_ / "m");
  fs::create_symlink(dir_ / "outside/t.bin", dir_ / "m/link.bin");
  info_.model_path = (dir_ / "m/model.onnx").string();
  write(info_.model_path, pb::bytes(7, pb::bytes(5, external("link.bin"))));
  EXPECT_DSRT_ERROR(dsrt::save_onnx(info_, arena_, out, "", false), "through a symlink");
  write((dir_ / "m/short.bin").string(), std::string(4, 'x'));
  write(info_.model_path, pb::bytes(7, pb::bytes(5, external("short.bin"))));
  EXPECT_DSRT_ERROR(dsrt::save_onnx(info_, arena_, out, "", false), "too short for 8 bytes");
  // Readable: the bytes come inline into the copy.
  write((dir_ / "m/ok.bin").string(), pb::floats({3, 4}));
  write(info_.model_path, pb::bytes(7, pb::bytes(5, external("ok.bin"))));
  info_.params.clear();
  dsrt::save_onnx(info_, arena_, out, "", false);
  EXPECT_EQ(read(out), pb::bytes(7, pb::bytes(5, pb::number(1, 2) + pb::number(2, 1) +
                                                  pb::bytes(8, "t") +
                                                  pb::bytes(9, pb::floats({3, 4})))));
}

}  // namespace

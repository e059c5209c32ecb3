// .npy reading and writing: round trips of every element type, the three
// format versions, and every class of bad file.
#include "dsrt/npy.h"

#include <sys/stat.h>

#include "test_util.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <unistd.h>

namespace {

using dsrt_test::Owned;
namespace fs = std::filesystem;

class Npy : public testing::Test {
protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("dsrt_npy_test_" + std::to_string(getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string &name) const { return (dir_ / name).string(); }

  // A .npy file with the given version, header dict and data bytes.
  std::string write_raw(const std::string &name, int major, const std::string &dict,
                        const std::string &data) {
    std::string header = dict + "\n";
    std::string bytes = std::string("\x93NUMPY", 6) + char(major) + char(0);
    if (major == 1) {
      bytes += char(header.size() & 0xFF);
      bytes += char(header.size() >> 8);
    } else {
      for (int i = 0; i < 4; ++i)
        bytes += char((header.size() >> (8 * i)) & 0xFF);
    }
    bytes += header + data;
    return write_bytes(name, bytes);
  }
  std::string write_bytes(const std::string &name, const std::string &bytes) {
    std::ofstream out(path(name), std::ios::binary);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    return path(name);
  }

  fs::path dir_;
};

TEST_F(Npy, RoundTripsEveryElementType) {
  const dsrt::DType types[] = {dsrt::DType::F32, dsrt::DType::F16, dsrt::DType::BF16,
                               dsrt::DType::I64, dsrt::DType::I32, dsrt::DType::Bool};
  const char *descrs[] = {"'<f4'", "'<f2'", "'<u2'", "'<i8'", "'<i4'", "'|b1'"};
  for (int k = 0; k < 6; ++k) {
    for (dsrt::Shape shape : {dsrt::Shape{2, 3}, dsrt::Shape{}, dsrt::Shape{5}, dsrt::Shape{0, 4}}) {
      Owned t(types[k], shape);
      for (int64_t i = 0; i < shape.numel(); ++i) {
        if (dsrt::is_float(types[k]))
          dsrt::store_float(t, i, 0.25f * static_cast<float>(i) - 1.0f);
        else
          dsrt::store_int(t, i, types[k] == dsrt::DType::Bool ? i % 2 : 3 * i - 4);
      }
      std::string file = path("t.npy");
      dsrt::write_npy(file, t);
      dsrt::NpyArray a = dsrt::read_npy(file);
      EXPECT_EQ(a.dtype, types[k]);
      EXPECT_EQ(a.shape, shape);
      EXPECT_EQ(a.bytes, t.bytes());
      EXPECT_EQ(a.path, file);
      // NumPy's layout: the header names the type, data starts 64-aligned.
      std::ifstream in(file, std::ios::binary);
      std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      EXPECT_NE(bytes.find(descrs[k]), std::string::npos);
      size_t header_len = static_cast<unsigned char>(bytes[8]) | (static_cast<unsigned char>(bytes[9]) << 8);
      EXPECT_EQ((10 + header_len) % 64, 0u);
      EXPECT_EQ(bytes[10 + header_len - 1], '\n');
      EXPECT_EQ(bytes.size(), 10 + header_len + t.bytes().size());
    }
  }
  Owned v(dsrt::DType::F32, dsrt::Shape{5});
  dsrt::write_npy(path("v.npy"), v);
  std::ifstream in(path("v.npy"), std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(bytes.find("'shape': (5,)"), std::string::npos) << "1-tuples need the comma";
}

TEST_F(Npy, ReadsVersions2And3AndPython2Longs) {
  std::string data(12, '\0');
  int32_t values[3] = {1, -2, 3};
  std::memcpy(&data[0], values, 12);
  for (int major : {1, 2, 3}) {
    std::string file = write_raw("v" + std::to_string(major) + ".npy", major,
                                 "{'descr': '<i4', 'fortran_order': False, 'shape': (3L,), }", data);
    dsrt::NpyArray a = dsrt::read_npy(file);
    ASSERT_EQ(a.dtype, dsrt::DType::I32);
    ASSERT_EQ(a.shape, dsrt::Shape{3});
    EXPECT_EQ(dsrt::load_int(a.tensor(), 1), -2);
  }
  // Keys in another order, double quotes, no trailing comma.
  std::string file = write_raw("order.npy", 1,
                               "{\"shape\": (1, 3), \"fortran_order\": False, \"descr\": \"<i4\"}", data);
  EXPECT_EQ(dsrt::read_npy(file).shape, (dsrt::Shape{1, 3}));
}

TEST_F(Npy, ReadsF64OnlyWhenAsked) {
  double values[2] = {0.1, -3.5};
  std::string data(reinterpret_cast<char *>(values), 16);
  std::string file = write_raw("f8.npy", 1, "{'descr': '<f8', 'fortran_order': False, 'shape': (2,), }", data);
  EXPECT_DSRT_ERROR(dsrt::read_npy(file), "f8.npy", "'<f8'", "f64_to_f32");
  dsrt::NpyReadOptions options;
  options.f64_to_f32 = true;
  dsrt::NpyArray a = dsrt::read_npy(file, options);
  EXPECT_EQ(a.dtype, dsrt::DType::F32);
  EXPECT_EQ(dsrt::load_float(a.tensor(), 0), 0.1f);
  EXPECT_EQ(dsrt::load_float(a.tensor(), 1), -3.5f);
}

TEST_F(Npy, RejectsBadFiles) {
  const std::string f4 = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2), }";
  std::string data(16, '\0');
  EXPECT_DSRT_ERROR(dsrt::read_npy(path("missing.npy")), "missing.npy", "cannot open");
  EXPECT_DSRT_ERROR(dsrt::read_npy(write_bytes("text.npy", "hello, this is text")), "text.npy",
                    "not a .npy file");
  EXPECT_DSRT_ERROR(dsrt::read_npy(write_bytes("short.npy", std::string("\x93NUMPY\x01", 7))),
                    "short.npy", "truncated");
  std::string good = std::string("\x93NUMPY\x01\x00", 8);
  EXPECT_DSRT_ERROR(dsrt::read_npy(write_bytes("header.npy", good + std::string("\x40\x00{'descr'", 9))),
                    "header.npy", "truncated", "header");
  EXPECT_DSRT_ERROR(dsrt::read_npy(write_raw("data.npy", 1, f4, data.substr(0, 10))), "data.npy",
                    "truncated", "needs 16 bytes", "holds 10");
  // A header claiming far more rows than the file holds is refused before
  // anything is allocated for them.
  EXPECT_DSRT_ERROR(dsrt::read_npy(write_raw("huge.npy", 1,
                                             "{'descr': '<f4', 'fortran_order': False, 'shape': (400000000000, 2), }",
                                             data)),
                    "huge.npy", "truncated", "[400000000000, 2]", "needs 3200000000000 bytes",
                    "holds 16");
  // Not a regular file: a FIFO would block the reader forever.
  const std::string fifo = path("fifo.npy");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_DSRT_ERROR(dsrt::read_npy(fifo), "fifo.npy", "not a regular file (a FIFO)");
  EXPECT_DSRT_ERROR(dsrt::read_npy(path("")), "not a regular file (a directory)");
  EXPECT_DSRT_ERROR(dsrt::read_npy(write_raw("big.npy", 1,
                                             "{'descr': '>f4', 'fortran_order': False, 'shape': (2, 2), }", data)),
                    "big.npy", "big-endian");
  EXPECT_DSRT_ERROR(dsrt::read_npy(write_raw("fortran.npy", 1,
                                             "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 2), }", data)),
                    "fortran.npy", "Fortran");
  EXPECT_DSRT_ERROR(dsrt::read_npy(write_raw("complex.npy", 1,
                                             "{'descr': '<c8', 'fortran_order': False, 'shape': (2,), }", data)),
                    "complex.npy", "unsupported element type '<c8'");
  EXPECT_DSRT_ERROR(dsrt::read_npy(write_raw("rank.npy", 1,
                                             "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 1, 1, 1, 1, 1, 1, 1, 1), }", data)),
                    "rank.npy", "rank");
  EXPECT_DSRT_ERROR(dsrt::read_npy(write_raw("version.npy", 4, f4, data)), "version.npy",
                    "version 4.0");
  EXPECT_DSRT_ERROR(dsrt::read_npy(write_raw("nodescr.npy", 1,
                                             "{'fortran_order': False, 'shape': (2, 2), }", data)),
                    "nodescr.npy", "missing");
  EXPECT_DSRT_ERROR(dsrt::read_npy(write_raw("garbage.npy", 1, "{'descr': <f4}", data)),
                    "garbage.npy", "malformed");
  // A 1-D array is the same in either order.
  dsrt::NpyArray one = dsrt::read_npy(write_raw(
      "fortran1d.npy", 1, "{'descr': '<f4', 'fortran_order': True, 'shape': (4,), }", data));
  EXPECT_EQ(one.shape, dsrt::Shape{4});
}

TEST_F(Npy, ExpectAndReadIntoCheckTypeAndShape) {
  Owned t(dsrt::DType::F32, dsrt::Shape{2, 3});
  std::string file = path("param.npy");
  dsrt::write_npy(file, t);
  dsrt::NpyArray a = dsrt::read_npy(file);
  dsrt::expect(a, dsrt::DType::F32, dsrt::Shape{2, 3}, "parameter w");
  EXPECT_DSRT_ERROR(dsrt::expect(a, dsrt::DType::F32, dsrt::Shape{3, 2}, "parameter w"),
                    "param.npy", "parameter w", "[2, 3]", "[3, 2]");
  EXPECT_DSRT_ERROR(dsrt::expect(a, dsrt::DType::F16, dsrt::Shape{2, 3}, "parameter w"), "f16");
  Owned dst(dsrt::DType::F32, dsrt::Shape{2, 3}, 0x7F);
  dsrt::read_npy_into(file, dst);
  EXPECT_EQ(dst.bytes(), t.bytes());
  Owned wrong(dsrt::DType::F32, dsrt::Shape{6});
  EXPECT_DSRT_ERROR(dsrt::read_npy_into(file, wrong), "param.npy", "[6]");
}

TEST_F(Npy, WriteFailureNamesTheFile) {
  Owned t(dsrt::DType::F32, dsrt::Shape{1});
  EXPECT_DSRT_ERROR(dsrt::write_npy(path("no/such/dir/x.npy"), t), "x.npy", "cannot open");
}

}  // namespace

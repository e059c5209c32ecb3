// NumPy .npy reading and writing (format: numpy/lib/format.py). The header
// is a Python dict literal; only the three keys NumPy writes are read.
#include "dsrt/npy.h"

#include <cctype>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>
#include <sys/stat.h>

namespace dsrt {

namespace {

[[noreturn]] void npy_fail(const std::string &path, const std::string &problem) {
  throw Error("dsrt: " + path + ": " + problem);
}

bool host_is_little_endian() {
  const uint16_t one = 1;
  unsigned char first;
  std::memcpy(&first, &one, 1);
  return first == 1;
}

const char *descr_of(DType dtype) {
  switch (dtype) {
  case DType::F32: return "<f4";
  case DType::F16: return "<f2";
  case DType::BF16: return "<u2";
  case DType::I64: return "<i8";
  case DType::I32: return "<i4";
  case DType::Bool: return "|b1";
  }
  return "?";
}

// The header's dict: {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
struct Header {
  std::string descr;
  bool fortran_order = false;
  Shape shape;
  bool has_descr = false, has_order = false, has_shape = false;
};

class HeaderParser {
public:
  HeaderParser(const std::string &path, const std::string &text) : path_(path), text_(text) {}

  Header parse() {
    Header h;
    expect('{');
    while (true) {
      skip_space();
      if (peek() == '}')
        break;
      std::string key = parse_string();
      expect(':');
      skip_space();
      if (key == "descr") {
        h.descr = parse_string();
        h.has_descr = true;
      } else if (key == "fortran_order") {
        h.fortran_order = parse_bool();
        h.has_order = true;
      } else if (key == "shape") {
        h.shape = parse_shape();
        h.has_shape = true;
      } else {
        bad("unexpected key '" + key + "'");
      }
      skip_space();
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      if (peek() != '}')
        bad("expected ',' or '}'");
    }
    if (!h.has_descr || !h.has_order || !h.has_shape)
      bad("missing 'descr', 'fortran_order' or 'shape'");
    return h;
  }

private:
  [[noreturn]] void bad(const std::string &what) {
    npy_fail(path_, "malformed .npy header (" + what + "): " + text_);
  }
  char peek() const { return pos_ < text_.size() ? text_[pos_] : '\0'; }
  void skip_space() {
    while (pos_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[pos_])))
      ++pos_;
  }
  void expect(char c) {
    skip_space();
    if (peek() != c)
      bad(std::string("expected '") + c + "'");
    ++pos_;
  }
  std::string parse_string() {
    skip_space();
    char quote = peek();
    if (quote != '\'' && quote != '"')
      bad("expected a string");
    size_t end = text_.find(quote, pos_ + 1);
    if (end == std::string::npos)
      bad("unterminated string");
    std::string s = text_.substr(pos_ + 1, end - pos_ - 1);
    pos_ = end + 1;
    return s;
  }
  bool parse_bool() {
    if (text_.compare(pos_, 4, "True") == 0) {
      pos_ += 4;
      return true;
    }
    if (text_.compare(pos_, 5, "False") == 0) {
      pos_ += 5;
      return false;
    }
    bad("expected True or False");
  }
  Shape parse_shape() {
    expect('(');
    int64_t dims[kMaxRank + 1];
    int rank = 0;
    while (true) {
      skip_space();
      if (peek() == ')') {
        ++pos_;
        break;
      }
      if (!std::isdigit(static_cast<unsigned char>(peek())))
        bad("expected a dimension");
      int64_t value = 0;
      while (std::isdigit(static_cast<unsigned char>(peek()))) {
        if (value > (std::numeric_limits<int64_t>::max() - 9) / 10)
          bad("dimension too large");
        value = value * 10 + (text_[pos_++] - '0');
      }
      if (peek() == 'L')  // Python 2 long literal
        ++pos_;
      if (rank == kMaxRank)
        npy_fail(path_, "array rank exceeds dsrt's maximum rank " + std::to_string(kMaxRank));
      dims[rank++] = value;
      skip_space();
      if (peek() == ',')
        ++pos_;
      else if (peek() != ')')
        bad("expected ',' or ')' in the shape");
    }
    return Shape::of(dims, rank);
  }

  const std::string &path_;
  const std::string &text_;
  size_t pos_ = 0;
};

// Element type and item size for a descr; `f64` is set for '<f8'.
DType dtype_of(const std::string &path, const std::string &descr, const NpyReadOptions &options,
               bool &f64) {
  f64 = false;
  if (descr == "<f4") return DType::F32;
  if (descr == "<f2") return DType::F16;
  if (descr == "<u2") return DType::BF16;
  if (descr == "<i8") return DType::I64;
  if (descr == "<i4") return DType::I32;
  if (descr == "|b1") return DType::Bool;
  if (descr == "<f8") {
    if (!options.f64_to_f32)
      npy_fail(path, "element type '<f8' (float64) is not read unless conversion to f32 is "
                     "requested (NpyReadOptions::f64_to_f32)");
    f64 = true;
    return DType::F32;
  }
  if (!descr.empty() && descr[0] == '>')
    npy_fail(path, "big-endian data ('" + descr + "') is not supported");
  npy_fail(path, "unsupported element type '" + descr +
                     "' (supported: <f4 <f2 <u2(bf16) <i8 <i4 |b1, and <f8 on request)");
}

struct Opened {
  std::ifstream in;
  Header header;
  DType dtype = DType::F32;
  bool f64 = false;
  uint64_t data_bytes = 0;  // bytes in the file
};

void open_npy(const std::string &path, const NpyReadOptions &options, Opened &f) {
  if (!host_is_little_endian())
    npy_fail(path, ".npy support needs a little-endian host");
  // Only regular files: opening a FIFO would wait for a writer forever,
  // and a device or directory holds no array.
  struct stat st;
  if (stat(path.c_str(), &st) != 0)
    npy_fail(path, std::string("cannot open the file for reading: ") + std::strerror(errno));
  if (!S_ISREG(st.st_mode))
    npy_fail(path, std::string("not a regular file (") +
                       (S_ISFIFO(st.st_mode)  ? "a FIFO"
                        : S_ISDIR(st.st_mode) ? "a directory"
                        : S_ISSOCK(st.st_mode) ? "a socket"
                                               : "a device") +
                       "); a .npy array must be a file");
  f.in.open(path, std::ios::binary);
  if (!f.in)
    npy_fail(path, "cannot open the file for reading");
  unsigned char preamble[8];
  f.in.read(reinterpret_cast<char *>(preamble), 8);
  if (f.in.gcount() < 6 || std::memcmp(preamble, "\x93NUMPY", 6) != 0)
    npy_fail(path, "not a .npy file (missing the \\x93NUMPY magic string)");
  if (f.in.gcount() < 8)
    npy_fail(path, "truncated .npy file (no format version)");
  const int major = preamble[6], minor = preamble[7];
  uint32_t header_len = 0;
  if (major == 1) {
    unsigned char len[2];
    f.in.read(reinterpret_cast<char *>(len), 2);
    if (f.in.gcount() != 2)
      npy_fail(path, "truncated .npy file (no header length)");
    header_len = len[0] | (static_cast<uint32_t>(len[1]) << 8);
  } else if (major == 2 || major == 3) {
    unsigned char len[4];
    f.in.read(reinterpret_cast<char *>(len), 4);
    if (f.in.gcount() != 4)
      npy_fail(path, "truncated .npy file (no header length)");
    header_len = len[0] | (static_cast<uint32_t>(len[1]) << 8) |
                 (static_cast<uint32_t>(len[2]) << 16) | (static_cast<uint32_t>(len[3]) << 24);
  } else {
    npy_fail(path, "unsupported .npy format version " + std::to_string(major) + "." +
                       std::to_string(minor));
  }
  if (header_len > (1u << 24))
    npy_fail(path, "implausible .npy header length " + std::to_string(header_len));
  std::string text(header_len, '\0');
  f.in.read(&text[0], header_len);
  if (static_cast<uint32_t>(f.in.gcount()) != header_len)
    npy_fail(path, "truncated .npy file (header of " + std::to_string(header_len) +
                       " bytes is incomplete)");
  f.header = HeaderParser(path, text).parse();
  if (f.header.fortran_order && f.header.shape.rank > 1)
    npy_fail(path, "Fortran-ordered (column-major) arrays are not supported");
  f.dtype = dtype_of(path, f.header.descr, options, f.f64);
  const uint64_t item = f.f64 ? 8 : dtype_size(f.dtype);
  uint64_t count = 1;
  for (int d = 0; d < f.header.shape.rank; ++d) {
    uint64_t dim = static_cast<uint64_t>(f.header.shape.dims[d]);
    if (dim != 0 && count > std::numeric_limits<uint64_t>::max() / 8 / dim)
      npy_fail(path, "array of shape " + f.header.shape.str() + " is too large");
    count *= dim;
  }
  f.data_bytes = count * item;
  // The header's shape must fit the bytes the file holds, before anything
  // is allocated for it.
  const uint64_t data_start = static_cast<uint64_t>(f.in.tellg());
  const uint64_t held = static_cast<uint64_t>(st.st_size) > data_start
                            ? static_cast<uint64_t>(st.st_size) - data_start
                            : 0;
  if (f.data_bytes > held)
    npy_fail(path, "truncated .npy file: its header's shape " + f.header.shape.str() + " needs " +
                       std::to_string(f.data_bytes) + " bytes of data, the file holds " +
                       std::to_string(held));
}

// Reads the data into `dst` (numel elements of f.dtype).
void read_data(const std::string &path, Opened &f, void *dst) {
  const uint64_t n = f.data_bytes;
  if (!f.f64) {
    f.in.read(static_cast<char *>(dst), static_cast<std::streamsize>(n));
    if (static_cast<uint64_t>(f.in.gcount()) != n)
      npy_fail(path, "truncated .npy file: expected " + std::to_string(n) +
                         " bytes of data, found " + std::to_string(f.in.gcount()));
    return;
  }
  std::vector<double> values(n / 8);
  f.in.read(reinterpret_cast<char *>(values.data()), static_cast<std::streamsize>(n));
  if (static_cast<uint64_t>(f.in.gcount()) != n)
    npy_fail(path, "truncated .npy file: expected " + std::to_string(n) +
                       " bytes of data, found " + std::to_string(f.in.gcount()));
  float *out = static_cast<float *>(dst);
  for (size_t i = 0; i < values.size(); ++i)
    out[i] = static_cast<float>(values[i]);
}

}  // namespace

NpyArray read_npy(const std::string &path, const NpyReadOptions &options) {
  Opened f;
  open_npy(path, options, f);
  NpyArray array;
  array.path = path;
  array.dtype = f.dtype;
  array.shape = f.header.shape;
  array.bytes.resize(static_cast<size_t>(array.numel()) * dtype_size(array.dtype));
  read_data(path, f, array.bytes.data());
  return array;
}

void read_npy_into(const std::string &path, const Tensor &dst, const NpyReadOptions &options) {
  Opened f;
  open_npy(path, options, f);
  if (f.dtype != dst.dtype || f.header.shape != dst.shape)
    npy_fail(path, std::string("holds ") + dtype_name(f.dtype) + " " + f.header.shape.str() +
                       ", expected " + dtype_name(dst.dtype) + " " + dst.shape.str());
  if (dst.data == nullptr && dst.numel() > 0)
    npy_fail(path, "destination tensor has no data");
  read_data(path, f, dst.data);
}

void write_npy(const std::string &path, const Tensor &tensor) {
  if (!host_is_little_endian())
    npy_fail(path, ".npy support needs a little-endian host");
  if (tensor.data == nullptr && tensor.numel() > 0)
    npy_fail(path, "cannot write a tensor without data");
  std::string shape = "(";
  for (int d = 0; d < tensor.shape.rank; ++d) {
    shape += std::to_string(tensor.shape.dims[d]);
    shape += tensor.shape.rank == 1 ? "," : (d + 1 < tensor.shape.rank ? ", " : "");
  }
  shape += ")";
  std::string header = std::string("{'descr': '") + descr_of(tensor.dtype) +
                       "', 'fortran_order': False, 'shape': " + shape + ", }";
  // Pad with spaces so that the data starts 64-byte aligned, as NumPy does;
  // the header ends with a newline.
  const size_t preamble = 10;
  size_t total = preamble + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header += '\n';
  if (header.size() > 65535)
    npy_fail(path, "header too long for .npy format 1.0");
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out)
    npy_fail(path, "cannot open the file for writing");
  const unsigned char magic[8] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0};
  out.write(reinterpret_cast<const char *>(magic), 8);
  const unsigned char len[2] = {static_cast<unsigned char>(header.size() & 0xFF),
                                static_cast<unsigned char>(header.size() >> 8)};
  out.write(reinterpret_cast<const char *>(len), 2);
  out.write(header.data(), static_cast<std::streamsize>(header.size()));
  out.write(static_cast<const char *>(tensor.data), static_cast<std::streamsize>(tensor.nbytes()));
  out.flush();
  if (!out)
    npy_fail(path, "write failed");
}

void expect(const NpyArray &array, DType dtype, const Shape &shape, const std::string &what) {
  if (array.dtype != dtype || array.shape != shape)
    throw Error("dsrt: " + (array.path.empty() ? std::string("(not read from a file)") : array.path) +
                ": " + what + " is " + dtype_name(array.dtype) + " " + array.shape.str() +
                ", expected " + dtype_name(dtype) + " " + shape.str());
}

}  // namespace dsrt

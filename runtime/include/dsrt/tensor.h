// dsrt: tensors, element types and errors.
//
// The runtime of dsopt's generated programs. C++17, no dependency on MLIR.
// Tensors are views: a pointer into a planned arena (or host memory), an
// element type and a static shape; all tensors are contiguous and row-major.
#ifndef DSRT_TENSOR_H
#define DSRT_TENSOR_H

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <stdexcept>
#include <string>

namespace dsrt {

enum class DType : uint8_t { F32 = 0, F16 = 1, BF16 = 2, I64 = 3, I32 = 4, Bool = 5 };

const char *dtype_name(DType dtype);
size_t dtype_size(DType dtype);
inline bool is_float(DType d) { return d == DType::F32 || d == DType::F16 || d == DType::BF16; }

constexpr int kMaxRank = 8;

struct Shape {
  int rank = 0;
  int64_t dims[kMaxRank] = {};

  Shape() = default;
  Shape(std::initializer_list<int64_t> values);
  static Shape of(const int64_t *values, int rank);

  int64_t operator[](int i) const { return dims[i]; }
  int64_t numel() const;
  bool operator==(const Shape &other) const;
  bool operator!=(const Shape &other) const { return !(*this == other); }
  std::string str() const;
};

struct Tensor {
  void *data = nullptr;
  DType dtype = DType::F32;
  Shape shape;

  int64_t numel() const { return shape.numel(); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype); }
  template <typename T> T *as() const { return static_cast<T *>(data); }
};

// A runtime failure a user can act on (bad data, an index out of range, a
// file that cannot be read). Generated programs report it and exit 1.
class Error : public std::runtime_error {
public:
  explicit Error(const std::string &message) : std::runtime_error(message) {}
};

// IEEE half and bfloat16 storage. Compute is f32; conversions to the 16-bit
// formats round to nearest even, as PyTorch does.
float f16_to_f32(uint16_t bits);
uint16_t f32_to_f16(float value);
float bf16_to_f32(uint16_t bits);
uint16_t f32_to_bf16(float value);

// Element i of a float tensor of any float type, as f32; and the inverse.
float load_float(const Tensor &t, int64_t i);
void store_float(const Tensor &t, int64_t i, float value);
// Converts every element of the host tensor `from` into the host tensor
// `to` of as many elements (float types; 16-bit results rounded to nearest
// even). Throws for other types or counts.
void convert_host_floats(const Tensor &from, const Tensor &to);
// Element i of an integer or bool tensor, as int64.
int64_t load_int(const Tensor &t, int64_t i);
void store_int(const Tensor &t, int64_t i, int64_t value);

}  // namespace dsrt

#endif  // DSRT_TENSOR_H

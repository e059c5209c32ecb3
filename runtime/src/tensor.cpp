// dsrt tensors: element types, shapes, 16-bit float conversions and the
// per-element load and store functions.
#include "dsrt/tensor.h"

#include "internal.h"

namespace dsrt {

const char *dtype_name(DType dtype) {
  switch (dtype) {
  case DType::F32: return "f32";
  case DType::F16: return "f16";
  case DType::BF16: return "bf16";
  case DType::I64: return "i64";
  case DType::I32: return "i32";
  case DType::Bool: return "bool";
  }
  return "unknown";
}

size_t dtype_size(DType dtype) {
  switch (dtype) {
  case DType::F32: return 4;
  case DType::F16: return 2;
  case DType::BF16: return 2;
  case DType::I64: return 8;
  case DType::I32: return 4;
  case DType::Bool: return 1;
  }
  throw Error("dsrt: unknown element type " + std::to_string(static_cast<int>(dtype)));
}

Shape::Shape(std::initializer_list<int64_t> values) {
  if (values.size() > static_cast<size_t>(kMaxRank))
    throw Error("dsrt: shape of rank " + std::to_string(values.size()) +
                " exceeds the maximum rank " + std::to_string(kMaxRank));
  for (int64_t v : values) {
    if (v < 0)
      throw Error("dsrt: negative dimension " + std::to_string(v) + " in a shape");
    dims[rank++] = v;
  }
}

Shape Shape::of(const int64_t *values, int rank) {
  if (rank < 0 || rank > kMaxRank)
    throw Error("dsrt: shape of rank " + std::to_string(rank) + " is outside [0, " +
                std::to_string(kMaxRank) + "]");
  Shape shape;
  for (int i = 0; i < rank; ++i) {
    if (values[i] < 0)
      throw Error("dsrt: negative dimension " + std::to_string(values[i]) + " in a shape");
    shape.dims[i] = values[i];
  }
  shape.rank = rank;
  return shape;
}

int64_t Shape::numel() const {
  int64_t n = 1;
  for (int i = 0; i < rank; ++i)
    n *= dims[i];
  return n;
}

bool Shape::operator==(const Shape &other) const {
  if (rank != other.rank)
    return false;
  for (int i = 0; i < rank; ++i)
    if (dims[i] != other.dims[i])
      return false;
  return true;
}

std::string Shape::str() const {
  std::string s = "[";
  for (int i = 0; i < rank; ++i) {
    if (i)
      s += ", ";
    s += std::to_string(dims[i]);
  }
  return s + "]";
}

float f16_to_f32(uint16_t bits) { return detail::half_to_float(bits); }
uint16_t f32_to_f16(float value) { return detail::float_to_half(value); }
float bf16_to_f32(uint16_t bits) { return detail::bfloat_to_float(bits); }
uint16_t f32_to_bf16(float value) { return detail::float_to_bfloat(value); }

namespace {
void check_element(const char *what, const Tensor &t, int64_t i) {
  if (i < 0 || i >= t.numel())
    throw Error(std::string("dsrt::") + what + ": element " + std::to_string(i) +
                " is outside a tensor of shape " + t.shape.str());
  if (t.data == nullptr)
    throw Error(std::string("dsrt::") + what + ": tensor has no data");
}
}  // namespace

float load_float(const Tensor &t, int64_t i) {
  check_element("load_float", t, i);
  switch (t.dtype) {
  case DType::F32: return t.as<float>()[i];
  case DType::F16: return f16_to_f32(t.as<uint16_t>()[i]);
  case DType::BF16: return bf16_to_f32(t.as<uint16_t>()[i]);
  default:
    throw Error(std::string("dsrt::load_float: tensor is ") + dtype_name(t.dtype) +
                ", not a float type");
  }
}

void store_float(const Tensor &t, int64_t i, float value) {
  check_element("store_float", t, i);
  switch (t.dtype) {
  case DType::F32: t.as<float>()[i] = value; return;
  case DType::F16: t.as<uint16_t>()[i] = f32_to_f16(value); return;
  case DType::BF16: t.as<uint16_t>()[i] = f32_to_bf16(value); return;
  default:
    throw Error(std::string("dsrt::store_float: tensor is ") + dtype_name(t.dtype) +
                ", not a float type");
  }
}

void convert_host_floats(const Tensor &from, const Tensor &to) {
  if (!is_float(from.dtype) || !is_float(to.dtype) || from.numel() != to.numel())
    throw Error(std::string("dsrt::convert_host_floats: cannot convert ") +
                dtype_name(from.dtype) + " " + from.shape.str() + " to " + dtype_name(to.dtype) +
                " " + to.shape.str());
  for (int64_t i = 0; i < from.numel(); ++i) store_float(to, i, load_float(from, i));
}

int64_t load_int(const Tensor &t, int64_t i) {
  check_element("load_int", t, i);
  switch (t.dtype) {
  case DType::I64: return t.as<int64_t>()[i];
  case DType::I32: return t.as<int32_t>()[i];
  case DType::Bool: return t.as<uint8_t>()[i] != 0;
  default:
    throw Error(std::string("dsrt::load_int: tensor is ") + dtype_name(t.dtype) +
                ", not an integer or bool type");
  }
}

void store_int(const Tensor &t, int64_t i, int64_t value) {
  check_element("store_int", t, i);
  switch (t.dtype) {
  case DType::I64: t.as<int64_t>()[i] = value; return;
  case DType::I32: t.as<int32_t>()[i] = static_cast<int32_t>(value); return;
  case DType::Bool: t.as<uint8_t>()[i] = value != 0; return;
  default:
    throw Error(std::string("dsrt::store_int: tensor is ") + dtype_name(t.dtype) +
                ", not an integer or bool type");
  }
}

}  // namespace dsrt

//===- HostTensor.cpp - constants known at import time --------------------===//

#include "HostTensor.h"

#include "mlir/IR/BuiltinTypes.h"
#include "llvm/ADT/APFloat.h"
#include "llvm/Support/Endian.h"

#include <cmath>
#include <cstring>

using namespace mlir;

namespace dsopt::onnx_import {

std::string dtypeName(int32_t dtype) {
  switch (static_cast<DType>(dtype)) {
  case DType::Float: return "FLOAT";
  case DType::UInt8: return "UINT8";
  case DType::Int8: return "INT8";
  case DType::UInt16: return "UINT16";
  case DType::Int16: return "INT16";
  case DType::Int32: return "INT32";
  case DType::Int64: return "INT64";
  case DType::String: return "STRING";
  case DType::Bool: return "BOOL";
  case DType::Float16: return "FLOAT16";
  case DType::Double: return "DOUBLE";
  case DType::UInt32: return "UINT32";
  case DType::UInt64: return "UINT64";
  case DType::Complex64: return "COMPLEX64";
  case DType::Complex128: return "COMPLEX128";
  case DType::BFloat16: return "BFLOAT16";
  case DType::Undefined: return "UNDEFINED";
  }
  // Types newer than the onnx.proto dsopt is built against (IR version 9
  // and 10): name them so that errors about them are clear.
  switch (dtype) {
  case 17: return "FLOAT8E4M3FN";
  case 18: return "FLOAT8E4M3FNUZ";
  case 19: return "FLOAT8E5M2";
  case 20: return "FLOAT8E5M2FNUZ";
  case 21: return "UINT4";
  case 22: return "INT4";
  case 23: return "FLOAT4E2M1";
  default: break;
  }
  return "type " + std::to_string(dtype);
}

bool isFloatDType(DType dtype) {
  return dtype == DType::Float || dtype == DType::Float16 ||
         dtype == DType::BFloat16 || dtype == DType::Double;
}

bool isHostFoldable(int32_t dtype) {
  switch (static_cast<DType>(dtype)) {
  case DType::Float: case DType::Float16: case DType::BFloat16:
  case DType::Double: case DType::UInt8: case DType::Int8:
  case DType::UInt16: case DType::Int16: case DType::Int32:
  case DType::Int64: case DType::Bool: case DType::UInt32:
  case DType::UInt64:
    return true;
  default:
    return false;
  }
}

int64_t dtypeByteSize(int32_t dtype) {
  switch (static_cast<DType>(dtype)) {
  case DType::Bool: case DType::UInt8: case DType::Int8: return 1;
  case DType::UInt16: case DType::Int16: case DType::Float16:
  case DType::BFloat16: return 2;
  case DType::Float: case DType::Int32: case DType::UInt32: return 4;
  case DType::Int64: case DType::UInt64: case DType::Double: return 8;
  default: return 0;
  }
}

Type toMlirElementType(MLIRContext &context, int32_t dtype) {
  switch (static_cast<DType>(dtype)) {
  case DType::Float: return Float32Type::get(&context);
  case DType::Float16: return Float16Type::get(&context);
  case DType::BFloat16: return BFloat16Type::get(&context);
  case DType::Int64: return IntegerType::get(&context, 64);
  case DType::Int32: return IntegerType::get(&context, 32);
  case DType::Bool: return IntegerType::get(&context, 1);
  default: return {};
  }
}

DType fromMlirElementType(Type type) {
  if (type.isF32()) return DType::Float;
  if (type.isF16()) return DType::Float16;
  if (type.isBF16()) return DType::BFloat16;
  if (type.isSignlessInteger(64)) return DType::Int64;
  if (type.isSignlessInteger(32)) return DType::Int32;
  if (type.isSignlessInteger(1)) return DType::Bool;
  return DType::Undefined;
}

static const llvm::fltSemantics *semanticsOf(DType dtype) {
  switch (dtype) {
  case DType::Float: return &APFloat::IEEEsingle();
  case DType::Float16: return &APFloat::IEEEhalf();
  case DType::BFloat16: return &APFloat::BFloat();
  case DType::Double: return &APFloat::IEEEdouble();
  default: return nullptr;
  }
}

double roundToFloat(DType dtype, double value) {
  if (dtype == DType::Double)
    return value;
  if (dtype == DType::Float)
    return static_cast<double>(static_cast<float>(value));
  APFloat result(value);
  bool losesInfo;
  result.convert(*semanticsOf(dtype), APFloat::rmNearestTiesToEven,
                 &losesInfo);
  result.convert(APFloat::IEEEdouble(), APFloat::rmNearestTiesToEven,
                 &losesInfo);
  return result.convertToDouble();
}

int64_t wrapToInt(DType dtype, int64_t value) {
  switch (dtype) {
  case DType::Bool: return value != 0;
  case DType::Int8: return static_cast<int8_t>(value);
  case DType::UInt8: return static_cast<uint8_t>(value);
  case DType::Int16: return static_cast<int16_t>(value);
  case DType::UInt16: return static_cast<uint16_t>(value);
  case DType::Int32: return static_cast<int32_t>(value);
  case DType::UInt32: return static_cast<uint32_t>(value);
  default: return value;
  }
}

int64_t truncateToInt(double value) {
  if (std::isnan(value))
    return 0;
  // 2^63 is exactly representable; anything at or beyond it saturates.
  if (value >= 9223372036854775808.0)
    return INT64_MAX;
  if (value < -9223372036854775808.0)
    return INT64_MIN;
  return static_cast<int64_t>(value);
}

int64_t HostTensor::numElements() const {
  int64_t count = 1;
  for (int64_t dim : shape)
    count *= dim;
  return count;
}

HostTensor HostTensor::ofInts(DType dtype, ArrayRef<int64_t> shape,
                              std::vector<int64_t> values) {
  HostTensor tensor;
  tensor.dtype = dtype;
  tensor.shape.assign(shape.begin(), shape.end());
  for (int64_t &v : values)
    v = wrapToInt(dtype, v);
  tensor.ints = std::move(values);
  return tensor;
}

HostTensor HostTensor::ofFloats(DType dtype, ArrayRef<int64_t> shape,
                                std::vector<double> values) {
  HostTensor tensor;
  tensor.dtype = dtype;
  tensor.shape.assign(shape.begin(), shape.end());
  for (double &v : values)
    v = roundToFloat(dtype, v);
  tensor.floats = std::move(values);
  return tensor;
}

HostTensor HostTensor::splatOf(DType dtype, ArrayRef<int64_t> shape,
                               double value) {
  HostTensor tensor =
      isFloatDType(dtype)
          ? ofFloats(dtype, shape, {value})
          : ofInts(dtype, shape, {truncateToInt(value)});
  tensor.splat = true;
  return tensor;
}

HostTensor HostTensor::shapeVector(ArrayRef<int64_t> values) {
  return ofInts(DType::Int64, {static_cast<int64_t>(values.size())},
                std::vector<int64_t>(values.begin(), values.end()));
}

HostTensor HostTensor::expanded() const {
  if (!splat)
    return *this;
  HostTensor result = *this;
  result.splat = false;
  int64_t n = numElements();
  if (isFloat())
    result.floats.assign(n, floats[0]);
  else
    result.ints.assign(n, ints[0]);
  return result;
}

HostTensor HostTensor::reshaped(ArrayRef<int64_t> newShape) const {
  HostTensor result = *this;
  result.shape.assign(newShape.begin(), newShape.end());
  return result;
}

HostTensor HostTensor::castTo(DType to) const {
  HostTensor result;
  result.dtype = to;
  result.shape = shape;
  result.splat = splat;
  size_t n = storedElements();
  if (isFloatDType(to)) {
    result.floats.resize(n);
    for (size_t i = 0; i < n; ++i)
      result.floats[i] = roundToFloat(to, floatAt(i));
  } else {
    result.ints.resize(n);
    for (size_t i = 0; i < n; ++i) {
      if (to == DType::Bool)
        result.ints[i] = isFloat() ? floats[i] != 0.0 : ints[i] != 0;
      else
        result.ints[i] =
            wrapToInt(to, isFloat() ? truncateToInt(floats[i]) : ints[i]);
    }
  }
  return result;
}

DenseElementsAttr HostTensor::toAttr(MLIRContext &context) const {
  Type element = toMlirElementType(context, static_cast<int32_t>(dtype));
  if (!element)
    return {};
  auto type = RankedTensorType::get(shape, element);
  auto makeFloat = [&](double v) {
    APFloat value(v);
    bool losesInfo;
    value.convert(cast<FloatType>(element).getFloatSemantics(),
                  APFloat::rmNearestTiesToEven, &losesInfo);
    return value;
  };
  auto makeInt = [&](int64_t v) {
    return APInt(element.getIntOrFloatBitWidth(), static_cast<uint64_t>(v),
                 /*isSigned=*/!element.isInteger(1));
  };
  if (splat) {
    if (isFloat())
      return DenseElementsAttr::get(type, makeFloat(floats[0]));
    if (element.isInteger(1))
      return DenseElementsAttr::get(type, ints[0] != 0);
    return DenseElementsAttr::get(type, makeInt(ints[0]));
  }
  if (isFloat()) {
    SmallVector<APFloat> values;
    values.reserve(floats.size());
    for (double v : floats)
      values.push_back(makeFloat(v));
    return DenseElementsAttr::get(type, values);
  }
  if (element.isInteger(1)) {
    SmallVector<bool> values(ints.begin(), ints.end());
    return DenseElementsAttr::get(type, ArrayRef<bool>(values));
  }
  SmallVector<APInt> values;
  values.reserve(ints.size());
  for (int64_t v : ints)
    values.push_back(makeInt(v));
  return DenseElementsAttr::get(type, values);
}

std::optional<HostTensor> HostTensor::fromAttr(DenseElementsAttr attr) {
  auto type = cast<ShapedType>(attr.getType());
  DType dtype = fromMlirElementType(type.getElementType());
  if (dtype == DType::Undefined)
    return std::nullopt;
  HostTensor tensor;
  tensor.dtype = dtype;
  tensor.shape.assign(type.getShape().begin(), type.getShape().end());
  tensor.splat = attr.isSplat();
  if (tensor.isFloat()) {
    auto toDouble = [](APFloat v) {
      bool losesInfo;
      v.convert(APFloat::IEEEdouble(), APFloat::rmNearestTiesToEven,
                &losesInfo);
      return v.convertToDouble();
    };
    if (tensor.splat)
      tensor.floats.push_back(toDouble(attr.getSplatValue<APFloat>()));
    else
      for (APFloat v : attr.getValues<APFloat>())
        tensor.floats.push_back(toDouble(v));
  } else {
    bool isBool = dtype == DType::Bool;
    auto toInt = [isBool](const APInt &v) {
      return isBool ? static_cast<int64_t>(v.getZExtValue()) : v.getSExtValue();
    };
    if (tensor.splat)
      tensor.ints.push_back(toInt(attr.getSplatValue<APInt>()));
    else
      for (APInt v : attr.getValues<APInt>())
        tensor.ints.push_back(toInt(v));
  }
  return tensor;
}

std::optional<HostTensor> HostTensor::fromBytes(DType dtype,
                                                ArrayRef<int64_t> shape,
                                                StringRef bytes) {
  int64_t size = dtypeByteSize(static_cast<int32_t>(dtype));
  if (size == 0)
    return std::nullopt;
  HostTensor tensor;
  tensor.dtype = dtype;
  tensor.shape.assign(shape.begin(), shape.end());
  int64_t n = tensor.numElements();
  if (static_cast<int64_t>(bytes.size()) != n * size)
    return std::nullopt;
  const char *p = bytes.data();
  using namespace llvm::support;
  auto readHalf = [&](int64_t i, const llvm::fltSemantics &semantics) {
    uint16_t bits = endian::read16le(p + 2 * i);
    APFloat value(semantics, APInt(16, bits));
    bool losesInfo;
    value.convert(APFloat::IEEEdouble(), APFloat::rmNearestTiesToEven,
                  &losesInfo);
    return value.convertToDouble();
  };
  if (tensor.isFloat()) {
    tensor.floats.resize(n);
    for (int64_t i = 0; i < n; ++i) {
      switch (dtype) {
      case DType::Float: {
        uint32_t bits = endian::read32le(p + 4 * i);
        float f;
        std::memcpy(&f, &bits, 4);
        tensor.floats[i] = f;
        break;
      }
      case DType::Double: {
        uint64_t bits = endian::read64le(p + 8 * i);
        double d;
        std::memcpy(&d, &bits, 8);
        tensor.floats[i] = d;
        break;
      }
      case DType::Float16:
        tensor.floats[i] = readHalf(i, APFloat::IEEEhalf());
        break;
      default:
        tensor.floats[i] = readHalf(i, APFloat::BFloat());
        break;
      }
    }
    return tensor;
  }
  tensor.ints.resize(n);
  for (int64_t i = 0; i < n; ++i) {
    int64_t v;
    switch (size) {
    case 1: v = static_cast<uint8_t>(p[i]); break;
    case 2: v = endian::read16le(p + 2 * i); break;
    case 4: v = endian::read32le(p + 4 * i); break;
    default: v = static_cast<int64_t>(endian::read64le(p + 8 * i)); break;
    }
    tensor.ints[i] = wrapToInt(dtype, v);
  }
  return tensor;
}

} // namespace dsopt::onnx_import

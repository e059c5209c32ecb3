//===- HostTensor.h - constants known at import time ------------*- C++ -*-===//
//
// A small tensor the importer knows the value of: ONNX Constant nodes,
// integer initializers and everything computed from them (Shape, shape
// arithmetic, Range, ConstantOfShape, masks). The importer evaluates ONNX ops
// on these to fold shape arithmetic away; values that reach real compute are
// materialized as `ds.constant`.
//
// Floats are held as double but rounded to their element type after every
// operation, so folding computes exactly what the runtime would in f32.
//
//===----------------------------------------------------------------------===//

#ifndef DSOPT_LIB_IMPORT_HOSTTENSOR_H
#define DSOPT_LIB_IMPORT_HOSTTENSOR_H

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/MLIRContext.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringRef.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace dsopt::onnx_import {

/// ONNX TensorProto.DataType values the importer knows by name.
enum class DType : int32_t {
  Undefined = 0,
  Float = 1,
  UInt8 = 2,
  Int8 = 3,
  UInt16 = 4,
  Int16 = 5,
  Int32 = 6,
  Int64 = 7,
  String = 8,
  Bool = 9,
  Float16 = 10,
  Double = 11,
  UInt32 = 12,
  UInt64 = 13,
  Complex64 = 14,
  Complex128 = 15,
  BFloat16 = 16,
};

/// ONNX name of a data type ("FLOAT", "INT64", ...), or "type N".
std::string dtypeName(int32_t dtype);
/// True for the types host folding handles (numbers and bool).
bool isHostFoldable(int32_t dtype);
bool isFloatDType(DType dtype);
/// Size in bytes of one element, 0 if unknown.
int64_t dtypeByteSize(int32_t dtype);
/// The MLIR element type dsopt uses for an ONNX type, or null if dsopt does
/// not support it as a tensor element type (f32, f16, bf16, i64, i32, i1).
mlir::Type toMlirElementType(mlir::MLIRContext &context, int32_t dtype);
/// Inverse of toMlirElementType.
DType fromMlirElementType(mlir::Type type);

/// Rounds `value` to what an element of `dtype` can hold.
double roundToFloat(DType dtype, double value);
int64_t wrapToInt(DType dtype, int64_t value);
/// Float to integer conversion truncating toward zero. Out-of-range values
/// saturate and NaN becomes 0 (ONNX leaves these undefined; a C++ cast
/// would be undefined behavior).
int64_t truncateToInt(double value);

struct HostTensor {
  DType dtype = DType::Undefined;
  llvm::SmallVector<int64_t> shape;
  /// Exactly one of these holds the elements, by isFloat(). A splat keeps one
  /// element regardless of the shape (ConstantOfShape of a large shape).
  std::vector<double> floats;
  std::vector<int64_t> ints;
  bool splat = false;

  bool isFloat() const { return isFloatDType(dtype); }
  int64_t numElements() const;
  int64_t rank() const { return shape.size(); }
  size_t storedElements() const { return isFloat() ? floats.size() : ints.size(); }

  double floatAt(int64_t i) const {
    size_t k = splat ? 0 : i;
    return isFloat() ? floats[k] : static_cast<double>(ints[k]);
  }
  int64_t intAt(int64_t i) const {
    size_t k = splat ? 0 : i;
    return isFloat() ? truncateToInt(floats[k]) : ints[k];
  }

  static HostTensor ofInts(DType dtype, llvm::ArrayRef<int64_t> shape,
                           std::vector<int64_t> values);
  static HostTensor ofFloats(DType dtype, llvm::ArrayRef<int64_t> shape,
                             std::vector<double> values);
  static HostTensor splatOf(DType dtype, llvm::ArrayRef<int64_t> shape,
                            double value);
  /// A 1-D i64 tensor, the form of ONNX shape values.
  static HostTensor shapeVector(llvm::ArrayRef<int64_t> values);

  /// Expands a splat into explicit elements.
  HostTensor expanded() const;
  /// Same elements under another shape (element counts must agree).
  HostTensor reshaped(llvm::ArrayRef<int64_t> newShape) const;
  /// Converts to the element type of ONNX Cast: float to int truncates,
  /// anything to bool is `!= 0`.
  HostTensor castTo(DType to) const;

  /// The value as MLIR dense elements of `type`; fails (returns null) for
  /// element types dsopt does not support.
  mlir::DenseElementsAttr toAttr(mlir::MLIRContext &context) const;
  /// Reads a ds constant back (used when a folded ds constant feeds shape
  /// arithmetic).
  static std::optional<HostTensor> fromAttr(mlir::DenseElementsAttr attr);

  /// Decodes little-endian `bytes` of `dtype` holding `count` elements.
  static std::optional<HostTensor> fromBytes(DType dtype,
                                             llvm::ArrayRef<int64_t> shape,
                                             llvm::StringRef bytes);
};

} // namespace dsopt::onnx_import

#endif // DSOPT_LIB_IMPORT_HOSTTENSOR_H

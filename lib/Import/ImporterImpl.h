//===- ImporterImpl.h - internals shared by the importer's files -*- C++ -*-===//
//
// GraphImporter walks the ONNX graph; for every node it builds a NodeContext,
// the only view an op converter or folder has of the graph: its inputs (as
// MLIR values or as constants known at import), its attributes (type
// checked), its outputs, and error reporting that names the node.
//
//===----------------------------------------------------------------------===//

#ifndef DSOPT_LIB_IMPORT_IMPORTERIMPL_H
#define DSOPT_LIB_IMPORT_IMPORTERIMPL_H

#include "HostTensor.h"
#include "onnx/onnx.pb.h"

#include "ds/IR/DsDialect.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/OperationSupport.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "llvm/ADT/StringRef.h"

#include <optional>
#include <string>

namespace dsopt::onnx_import {

class GraphImporter;

/// Constants larger than this many elements are not folded at import.
constexpr int64_t kMaxFoldElements = 1 << 16;

class NodeContext {
public:
  NodeContext(GraphImporter &importer, const onnx::NodeProto &node,
              int64_t opset, mlir::Location loc);

  const onnx::NodeProto &node;
  const int64_t opset;

  mlir::OpBuilder &builder();
  mlir::MLIRContext *context();
  mlir::Location loc() const { return location; }

  //===--- inputs ---------------------------------------------------------===//
  /// Number of inputs, not counting trailing omitted optional ones.
  unsigned numInputs() const;
  /// True if input `i` is present (listed with a non-empty name).
  bool hasInput(unsigned i) const;
  /// Input `i` as an MLIR value, materializing constants; an error if absent.
  mlir::FailureOr<mlir::Value> input(unsigned i);
  /// The tensor type of input `i` (known without materializing it).
  mlir::FailureOr<mlir::RankedTensorType> inputType(unsigned i);
  /// Input `i` if its value is known at import (constants, integer
  /// initializers, folded shape arithmetic); null otherwise. With
  /// `readParameters`, float initializers are read too: for inputs ONNX uses
  /// as attributes (a ratio, a bound).
  const HostTensor *constInput(unsigned i, bool readParameters = false);
  /// Input `i` as integers that must be known at import (shapes, axes,
  /// sizes); `what` names it in the error.
  mlir::FailureOr<llvm::SmallVector<int64_t>> constInts(unsigned i,
                                                        llvm::StringRef what);

  //===--- attributes -----------------------------------------------------===//
  const onnx::AttributeProto *findAttr(llvm::StringRef name) const;
  mlir::LogicalResult intAttr(llvm::StringRef name, int64_t &out,
                              std::optional<int64_t> fallback = std::nullopt);
  mlir::LogicalResult floatAttr(llvm::StringRef name, float &out,
                                std::optional<float> fallback = std::nullopt);
  mlir::LogicalResult
  stringAttr(llvm::StringRef name, std::string &out,
             std::optional<llvm::StringRef> fallback = std::nullopt);
  /// An INTS attribute; `out` stays empty-optional when absent.
  mlir::LogicalResult intsAttr(llvm::StringRef name,
                               std::optional<llvm::SmallVector<int64_t>> &out);
  /// A TENSOR attribute's value, or an error naming the attribute.
  mlir::FailureOr<HostTensor> tensorAttr(const onnx::AttributeProto &attr);
  /// Fails with a clear error if the node carries attribute `name` with a
  /// value other than `expected` (for attributes dsopt does not implement).
  mlir::LogicalResult requireIntAttr(llvm::StringRef name, int64_t expected,
                                     llvm::StringRef why);

  //===--- outputs --------------------------------------------------------===//
  unsigned numOutputs() const { return node.output_size(); }
  /// True if output `i` is listed with a non-empty name.
  bool hasOutput(unsigned i) const;
  void setOutput(unsigned i, mlir::Value value);
  void setOutputConst(unsigned i, HostTensor value);
  /// Defines output `i` as data too large to fold (a Constant's tensor of
  /// more than kMaxFoldElements elements): a frozen parameter referencing
  /// the tensor's bytes in the model file, as initializers do.
  mlir::LogicalResult setOutputData(unsigned i,
                                    const onnx::TensorProto &tensor);

  //===--- building -------------------------------------------------------===//
  /// Creates an op whose result types it infers; fails with the op's own
  /// diagnostic (inconsistent shapes, bad attributes) named after the node.
  template <typename OpTy>
  mlir::FailureOr<mlir::Operation *>
  create(mlir::ValueRange operands,
         llvm::ArrayRef<mlir::NamedAttribute> attributes = {}) {
    mlir::OperationState state(location, OpTy::getOperationName());
    if (mlir::failed(prepareState<OpTy>(state, operands, attributes)))
      return mlir::failure();
    llvm::SmallVector<mlir::Type> types;
    if (mlir::failed(OpTy::inferReturnTypes(
            context(), location, state.operands,
            state.attributes.getDictionary(context()),
            state.getRawProperties(), state.regions, types)))
      return failWithDiagnostics("invalid operands");
    state.addTypes(types);
    return finish(state);
  }

  /// Creates an op with the given result types (ops whose result type is
  /// not implied by the operands: reshape, slice, split, cast, broadcast).
  template <typename OpTy>
  mlir::FailureOr<mlir::Operation *>
  createTyped(mlir::TypeRange resultTypes, mlir::ValueRange operands,
              llvm::ArrayRef<mlir::NamedAttribute> attributes = {}) {
    mlir::OperationState state(location, OpTy::getOperationName());
    if (mlir::failed(prepareState<OpTy>(state, operands, attributes)))
      return mlir::failure();
    state.addTypes(resultTypes);
    return finish(state);
  }

  /// Shorthand for single-result ops: create and set output `i`.
  template <typename OpTy>
  mlir::LogicalResult emit(unsigned output, mlir::ValueRange operands,
                           llvm::ArrayRef<mlir::NamedAttribute> attributes =
                               {}) {
    mlir::FailureOr<mlir::Operation *> op = create<OpTy>(operands, attributes);
    if (mlir::failed(op))
      return mlir::failure();
    setOutput(output, (*op)->getResult(0));
    return mlir::success();
  }

  /// A constant as a ds.constant value (cached per value).
  mlir::FailureOr<mlir::Value> materialize(const HostTensor &value);

  //===--- errors ---------------------------------------------------------===//
  /// Records an error about this node and fails.
  mlir::LogicalResult error(const llvm::Twine &message);
  /// Normalizes `axis` in [-rank, rank) to [0, rank), or fails naming `what`.
  mlir::FailureOr<int64_t> normalizeAxis(int64_t axis, int64_t rank,
                                         llvm::StringRef what = "axis");

  mlir::NamedAttribute named(llvm::StringRef name, mlir::Attribute value) {
    return mlir::NamedAttribute(mlir::StringAttr::get(context(), name), value);
  }

private:
  template <typename OpTy>
  mlir::LogicalResult
  prepareState(mlir::OperationState &state, mlir::ValueRange operands,
               llvm::ArrayRef<mlir::NamedAttribute> attributes) {
    state.addOperands(operands);
    state.addAttributes(attributes);
    return mlir::success();
  }

  mlir::FailureOr<mlir::Operation *> finish(mlir::OperationState &state);
  mlir::LogicalResult failWithDiagnostics(llvm::StringRef fallback);

  GraphImporter &importer;
  mlir::Location location;
};

/// Converts a node into ds ops.
using ConvertFn = mlir::LogicalResult (*)(NodeContext &);
/// Evaluates a node whose inputs are all known at import. Returns true if it
/// set the outputs, false to decline (the result would be too large), or
/// failure on an error in the node.
using FoldFn = mlir::FailureOr<bool> (*)(NodeContext &);

struct OpHandler {
  /// May be null for ops that only exist as shape arithmetic (folded).
  ConvertFn convert = nullptr;
  FoldFn fold = nullptr;
  /// Folds even when inputs are not constant (Shape, Size need types only).
  bool foldNeedsTypesOnly = false;
  const char *note = "";
};

/// The handler for `opType` in `domain` ("" is ai.onnx), or null.
const OpHandler *lookupOpHandler(llvm::StringRef domain,
                                 llvm::StringRef opType);
/// All registered (domain, op type, handler) triples.
void forEachOpHandler(
    llvm::function_ref<void(llvm::StringRef, llvm::StringRef,
                            const OpHandler &)>
        fn);

/// ONNX's preview training domain.
inline constexpr llvm::StringLiteral kTrainingDomain =
    "ai.onnx.preview.training";

//===--- shape computations shared by converters and folders --------------===//

/// Output shape of ONNX Reshape, or an error message.
mlir::FailureOr<llvm::SmallVector<int64_t>>
reshapeTarget(NodeContext &ctx, llvm::ArrayRef<int64_t> input,
              llvm::ArrayRef<int64_t> requested, bool allowZero);

/// Normalized ONNX Slice: per axis offset, stride and size.
struct SliceSpec {
  llvm::SmallVector<int64_t> offsets, strides, sizes;
};
mlir::FailureOr<SliceSpec> sliceSpec(NodeContext &ctx,
                                     llvm::ArrayRef<int64_t> inputShape);

/// Multidirectional broadcast of two shapes, or failure.
mlir::FailureOr<llvm::SmallVector<int64_t>>
broadcastShapes(llvm::ArrayRef<int64_t> a, llvm::ArrayRef<int64_t> b);

} // namespace dsopt::onnx_import

#endif // DSOPT_LIB_IMPORT_IMPORTERIMPL_H

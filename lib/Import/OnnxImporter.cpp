//===- OnnxImporter.cpp - ONNX ModelProto to a ds function ----------------===//
//
// Walks the graph in order. Every ONNX value is known either as an MLIR value
// or as a constant computed at import (HostTensor), or both; constants are
// materialized lazily, only where real compute consumes them, so shape
// arithmetic leaves no trace in the IR. Initializers become parameters the
// first time a node consumes them as tensors.
//
//===----------------------------------------------------------------------===//

#include "dsopt/Import/OnnxImporter.h"

#include "ExternalData.h"
#include "HostTensor.h"
#include "ImporterImpl.h"
#include "OnnxFile.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/MathExtras.h"
#include "llvm/Support/Path.h"

using namespace mlir;
using llvm::StringRef;
using llvm::Twine;

namespace dsopt::onnx_import {
namespace {
constexpr int64_t kMinOpset = 13, kMaxOpset = 21;
constexpr int64_t kMinIrVersion = 3, kMaxIrVersion = 11;

llvm::Error makeError(const Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
}

std::string shapeString(ArrayRef<int64_t> shape) {
  std::string text = "[";
  for (auto [i, d] : llvm::enumerate(shape))
    text += (i ? ", " : "") + std::to_string(d);
  return text + "]";
}

/// The typed field ONNX stores values of `dtype` in, with its name.
int typedFieldSize(const onnx::TensorProto &tensor, int32_t dtype,
                   StringRef &field) {
  switch (static_cast<DType>(dtype)) {
  case DType::Float: case DType::Complex64:
    field = "float_data";
    return tensor.float_data_size();
  case DType::Double: case DType::Complex128:
    field = "double_data";
    return tensor.double_data_size();
  case DType::Int64:
    field = "int64_data";
    return tensor.int64_data_size();
  case DType::UInt32: case DType::UInt64:
    field = "uint64_data";
    return tensor.uint64_data_size();
  case DType::String:
    field = "string_data";
    return tensor.string_data_size();
  default:
    field = "int32_data";
    return tensor.int32_data_size();
  }
}

/// Why the inline payload of `tensor` (raw_data or its typed field) cannot
/// hold `count` elements of its type, or nothing if it can. Checked before
/// any decoding, so that no path reads more or fewer values than the shape
/// promises.
std::optional<std::string>
inlinePayloadProblem(const onnx::TensorProto &tensor, ArrayRef<int64_t> shape,
                     int64_t count) {
  int32_t dtype = tensor.data_type();
  struct Field {
    const char *name;
    int size;
  } typed[] = {{"float_data", tensor.float_data_size()},
               {"int32_data", tensor.int32_data_size()},
               {"string_data", tensor.string_data_size()},
               {"int64_data", tensor.int64_data_size()},
               {"double_data", tensor.double_data_size()},
               {"uint64_data", tensor.uint64_data_size()}};
  StringRef own;
  int64_t stored = typedFieldSize(tensor, dtype, own);
  // Complex types keep two numbers per element.
  int64_t perElement = dtype == static_cast<int32_t>(DType::Complex64) ||
                               dtype == static_cast<int32_t>(DType::Complex128)
                           ? 2
                           : 1;
  std::string layout = "shape " + shapeString(shape) + " of " +
                       dtypeName(dtype);
  if (tensor.has_raw_data()) {
    for (const Field &field : typed)
      if (field.size > 0)
        return "has both raw_data and " + std::string(field.name) +
               "; ONNX stores a tensor's values in exactly one of them";
    int64_t elementBytes = dtypeByteSize(dtype);
    int64_t bytes;
    if (elementBytes == 0)
      return std::nullopt; // the element type is reported by the caller
    if (llvm::MulOverflow(count, elementBytes, bytes))
      return layout + " overflows 64-bit byte sizes";
    if (static_cast<int64_t>(tensor.raw_data().size()) != bytes)
      return "raw_data holds " + std::to_string(tensor.raw_data().size()) +
             " bytes but " + layout + " needs " + std::to_string(bytes);
    return std::nullopt;
  }
  int64_t needed;
  bool overflow = llvm::MulOverflow(count, perElement, needed);
  if (overflow || stored != needed) {
    std::string message = "holds " + std::to_string(stored) + " values in " +
                          own.str() + " but " + layout + " needs " +
                          (overflow ? std::string("more than 2^63")
                                    : std::to_string(needed));
    for (const Field &field : typed)
      if (field.size > 0 && own != field.name)
        message += "; it has " + std::to_string(field.size) +
                   " values in " + field.name + ", which is not where ONNX "
                   "keeps " + dtypeName(dtype);
    return message;
  }
  return std::nullopt;
}
} // namespace

/// What the importer knows about one ONNX value.
struct ValueEntry {
  Value value;
  std::optional<HostTensor> constant;
};

class GraphImporter {
public:
  GraphImporter(MLIRContext &context, const onnx::ModelProto &model,
                const InlinePayloads &payloads, StringRef displayName,
                StringRef modelDir, const OnnxImportOptions &options)
      : builder(&context), context(context), model(model),
        graph(model.graph()), payloads(payloads), displayName(displayName),
        modelDir(modelDir), options(options),
        diagnosticHandler(&context, [this](Diagnostic &diag) {
          diagnostics.push_back(diag.str());
          // The generic form of the rejected op adds nothing for users who
          // wrote ONNX, not MLIR.
          for (const Diagnostic &note : diag.getNotes())
            if (!StringRef(note.str()).starts_with("see current operation"))
              diagnostics.push_back(note.str());
          return success();
        }) {}

  llvm::Expected<OwningOpRef<ModuleOp>> run();

  //===--- used by NodeContext ---------------------------------------------===//
  FailureOr<Value> valueOf(NodeContext &ctx, StringRef name);
  FailureOr<RankedTensorType> typeOf(NodeContext &ctx, StringRef name);
  const HostTensor *constantOf(StringRef name, bool readParameters);
  /// True if `name` is a graph input, an initializer or an earlier output.
  bool isDefined(StringRef name) const {
    return values.count(name) || initializers.count(name);
  }
  /// Returns the pending error message and clears it.
  std::string takeNodeError() {
    std::string message = std::move(nodeErrorMessage);
    nodeErrorMessage.clear();
    return message;
  }
  FailureOr<Value> materialize(NodeContext &ctx, const HostTensor &value,
                               StringRef cacheName = {});
  void define(StringRef name, Value value) { values[name].value = value; }
  void defineConstant(StringRef name, HostTensor value) {
    values[name].constant = std::move(value);
  }
  /// Defines `name`, the output of the Constant node being imported, as
  /// data: a frozen parameter whose value is `tensor`'s bytes in the model
  /// file (or its external data), never copied into the IR.
  LogicalResult defineConstantData(NodeContext &ctx, StringRef name,
                                   const onnx::TensorProto &tensor);
  LogicalResult nodeError(const onnx::NodeProto &node, int64_t opset,
                          const Twine &message);
  std::string describeNode(const onnx::NodeProto &node, int64_t opset) const;
  FailureOr<HostTensor> readTensor(const onnx::TensorProto &tensor,
                                   const Twine &what);

  OpBuilder builder;
  std::vector<std::string> diagnostics;
  /// Why an initializer could not be read as a constant, for errors that
  /// would otherwise blame the graph for not making it constant.
  llvm::StringMap<std::string> initializerErrors;

private:
  llvm::Error checkModelHeader();
  llvm::Error createInputs();
  llvm::Error importNode(int index);
  llvm::Error createOutputs();
  FailureOr<Value> parameter(NodeContext &ctx, StringRef name);
  /// A parameter argument holding `tensor` (`what` names it in errors;
  /// `payload` is its contiguous run in the model file, if any; `order`
  /// sorts the parameters).
  FailureOr<Value> dataArgument(NodeContext &ctx, StringRef name,
                                const onnx::TensorProto &tensor,
                                const std::string &what,
                                const InlinePayload *payload, bool trainable,
                                int order);
  llvm::Expected<Attribute> parameterData(const onnx::TensorProto &tensor,
                                          RankedTensorType type,
                                          const std::string &what,
                                          const InlinePayload *payload);
  llvm::Expected<RankedTensorType>
  resolveValueType(StringRef name, const onnx::TypeProto &type, bool isInput);
  llvm::Error checkDeclaredType(const onnx::NodeProto *node, int64_t opset,
                                StringRef name, Type computed);
  void removeDeadCode();
  void orderParameters();
  llvm::Error error(const Twine &message) {
    return makeError(displayName + ": " + message);
  }
  /// Warnings take the shape of the driver's errors, so that every line a
  /// user sees starts with `dsopt: error:` or `dsopt: warning:`.
  void warn(const Twine &message) {
    if (!options.warnings)
      return;
    // Warnings quote names from the model; keep its control characters off
    // the terminal.
    std::string text;
    for (unsigned char c : message.str()) {
      if (c < 0x20 || c == 0x7f)
        text += "\\x" + llvm::utohexstr(c, /*LowerCase=*/true, 2);
      else
        text += static_cast<char>(c);
    }
    *options.warnings << "dsopt: warning: " << displayName << ": " << text
                      << "\n";
  }

  MLIRContext &context;
  const onnx::ModelProto &model;
  const onnx::GraphProto &graph;
  const InlinePayloads &payloads;
  std::string displayName, modelDir;
  const OnnxImportOptions &options;
  ScopedDiagnosticHandler diagnosticHandler;

  int64_t defaultOpset = 0, trainingOpset = 0;
  llvm::StringMap<ValueEntry> values;
  llvm::StringMap<const onnx::TensorProto *> initializers;
  llvm::StringMap<int> initializerIndex;
  llvm::StringMap<const onnx::TypeProto *> declaredTypes;
  llvm::StringSet<> usedDims;
  /// The initializers ONNX's TrainingInfoProto updates (its update
  /// bindings), when the model has one: only these train.
  std::optional<llvm::StringSet<>> trainedInitializers;
  bool batchUsed = false;
  /// Pending error of the node being imported (set by nodeError).
  std::string nodeErrorMessage;
  /// Position in graph.node of the node being imported.
  int currentNode = -1;
  /// Versions of every domain in opset_import.
  llvm::StringMap<int64_t> domainVersions;

  ModuleOp module;
  func::FuncOp function;
  Block *body = nullptr;
  unsigned numInputs = 0;
  /// Per parameter argument: its initializer's position, or for a large
  /// constant the number of initializers plus its node's position.
  llvm::SmallVector<int> parameterInitializer;
  llvm::DenseMap<Value, ds::ParamAttr> paramAttrs;
  std::vector<std::string> inputNames, outputNames;
  llvm::DenseMap<Attribute, Value> constantCache;
};

//===----------------------------------------------------------------------===//
// NodeContext
//===----------------------------------------------------------------------===//

NodeContext::NodeContext(GraphImporter &importer, const onnx::NodeProto &node,
                         int64_t opset, Location loc)
    : node(node), opset(opset), importer(importer), location(loc) {}

OpBuilder &NodeContext::builder() { return importer.builder; }
MLIRContext *NodeContext::context() { return importer.builder.getContext(); }

unsigned NodeContext::numInputs() const {
  unsigned n = node.input_size();
  while (n > 0 && node.input(n - 1).empty())
    --n;
  return n;
}

bool NodeContext::hasInput(unsigned i) const {
  return i < static_cast<unsigned>(node.input_size()) && !node.input(i).empty();
}

FailureOr<Value> NodeContext::input(unsigned i) {
  if (!hasInput(i))
    return error("input " + Twine(i) + " is required but missing");
  return importer.valueOf(*this, node.input(i));
}

FailureOr<RankedTensorType> NodeContext::inputType(unsigned i) {
  if (!hasInput(i))
    return error("input " + Twine(i) + " is required but missing");
  return importer.typeOf(*this, node.input(i));
}

const HostTensor *NodeContext::constInput(unsigned i, bool readParameters) {
  if (!hasInput(i))
    return nullptr;
  return importer.constantOf(node.input(i), readParameters);
}

FailureOr<SmallVector<int64_t>> NodeContext::constInts(unsigned i,
                                                       StringRef what) {
  if (!hasInput(i))
    return error("input " + Twine(i) + " ('" + what +
                 "') is required but missing");
  const HostTensor *value = constInput(i, /*readParameters=*/true);
  if (!value) {
    // A malformed initializer is not "unknown at compile time"; say what is
    // wrong with it instead.
    auto bad = importer.initializerErrors.find(node.input(i));
    if (bad != importer.initializerErrors.end())
      return error("input " + Twine(i) + " ('" + what + "'): " +
                   bad->second);
  }
  if (!value && !importer.isDefined(node.input(i)))
    return error("input " + Twine(i) + " ('" + what + "', value '" +
                 node.input(i) +
                 "') is not defined before use (the graph must be "
                 "topologically sorted)");
  if (!value)
    return error("input " + Twine(i) + " ('" + what + "', value '" +
                 node.input(i) +
                 "') must be known at compile time; dsopt needs static "
                 "shapes (is it computed from a graph input?)");
  if (value->isFloat())
    return error("input " + Twine(i) + " ('" + what +
                 "') must hold integers, got " +
                 dtypeName(static_cast<int32_t>(value->dtype)));
  if (value->rank() > 1)
    return error("input " + Twine(i) + " ('" + what +
                 "') must be a scalar or 1-D, got shape " +
                 shapeString(value->shape));
  SmallVector<int64_t> result;
  for (int64_t k = 0, n = value->numElements(); k < n; ++k)
    result.push_back(value->intAt(k));
  return result;
}

const onnx::AttributeProto *NodeContext::findAttr(StringRef name) const {
  for (const auto &attr : node.attribute())
    if (attr.name() == name)
      return &attr;
  return nullptr;
}

namespace {
/// ONNX allows the type field to be unset in old files; then the populated
/// field tells the type.
bool attrHasType(const onnx::AttributeProto &attr,
                 onnx::AttributeProto::AttributeType type) {
  if (attr.type() == type)
    return true;
  if (attr.type() != onnx::AttributeProto::UNDEFINED)
    return false;
  switch (type) {
  case onnx::AttributeProto::INT: return attr.has_i();
  case onnx::AttributeProto::FLOAT: return attr.has_f();
  case onnx::AttributeProto::STRING: return attr.has_s();
  case onnx::AttributeProto::TENSOR: return attr.has_t();
  case onnx::AttributeProto::INTS: return attr.ints_size() > 0;
  case onnx::AttributeProto::FLOATS: return attr.floats_size() > 0;
  default: return false;
  }
}
} // namespace

LogicalResult NodeContext::intAttr(StringRef name, int64_t &out,
                                   std::optional<int64_t> fallback) {
  const onnx::AttributeProto *attr = findAttr(name);
  if (!attr) {
    if (!fallback)
      return error("required attribute '" + name + "' is missing");
    out = *fallback;
    return success();
  }
  if (!attrHasType(*attr, onnx::AttributeProto::INT))
    return error("attribute '" + name + "' must be an INT");
  out = attr->i();
  return success();
}

LogicalResult NodeContext::floatAttr(StringRef name, float &out,
                                     std::optional<float> fallback) {
  const onnx::AttributeProto *attr = findAttr(name);
  if (!attr) {
    if (!fallback)
      return error("required attribute '" + name + "' is missing");
    out = *fallback;
    return success();
  }
  if (!attrHasType(*attr, onnx::AttributeProto::FLOAT))
    return error("attribute '" + name + "' must be a FLOAT");
  out = attr->f();
  return success();
}

LogicalResult NodeContext::stringAttr(StringRef name, std::string &out,
                                      std::optional<StringRef> fallback) {
  const onnx::AttributeProto *attr = findAttr(name);
  if (!attr) {
    if (!fallback)
      return error("required attribute '" + name + "' is missing");
    out = fallback->str();
    return success();
  }
  if (!attrHasType(*attr, onnx::AttributeProto::STRING))
    return error("attribute '" + name + "' must be a STRING");
  out = attr->s();
  return success();
}

LogicalResult NodeContext::intsAttr(StringRef name,
                                    std::optional<SmallVector<int64_t>> &out) {
  out.reset();
  const onnx::AttributeProto *attr = findAttr(name);
  if (!attr)
    return success();
  if (!attrHasType(*attr, onnx::AttributeProto::INTS) &&
      !(attr->type() == onnx::AttributeProto::UNDEFINED &&
        attr->ints_size() == 0))
    return error("attribute '" + name + "' must be INTS");
  out.emplace(attr->ints().begin(), attr->ints().end());
  return success();
}

FailureOr<HostTensor> NodeContext::tensorAttr(const onnx::AttributeProto &attr) {
  if (!attrHasType(attr, onnx::AttributeProto::TENSOR))
    return error("attribute '" + attr.name() + "' must be a TENSOR");
  FailureOr<HostTensor> value =
      importer.readTensor(attr.t(), "attribute '" + attr.name() + "'");
  if (failed(value)) {
    // readTensor describes the tensor; name the node that holds it.
    std::string message = importer.takeNodeError();
    return error(message);
  }
  return value;
}

LogicalResult NodeContext::requireIntAttr(StringRef name, int64_t expected,
                                          StringRef why) {
  int64_t value = expected;
  if (failed(intAttr(name, value, expected)))
    return failure();
  if (value != expected)
    return error("attribute " + name + " = " + Twine(value) +
                 " is not supported: " + why);
  return success();
}

bool NodeContext::hasOutput(unsigned i) const {
  return i < static_cast<unsigned>(node.output_size()) &&
         !node.output(i).empty();
}

void NodeContext::setOutput(unsigned i, Value value) {
  if (hasOutput(i))
    importer.define(node.output(i), value);
}

void NodeContext::setOutputConst(unsigned i, HostTensor value) {
  if (hasOutput(i))
    importer.defineConstant(node.output(i), std::move(value));
}

LogicalResult NodeContext::setOutputData(unsigned i,
                                         const onnx::TensorProto &tensor) {
  if (!hasOutput(i))
    return success();
  return importer.defineConstantData(*this, node.output(i), tensor);
}

FailureOr<Value> NodeContext::materialize(const HostTensor &value) {
  return importer.materialize(*this, value);
}

LogicalResult NodeContext::error(const Twine &message) {
  return importer.nodeError(node, opset, message);
}

FailureOr<int64_t> NodeContext::normalizeAxis(int64_t axis, int64_t rank,
                                              StringRef what) {
  if (rank == 0)
    return error(what + " " + Twine(axis) +
                 " given for a scalar, which has no axes");
  if (axis < -rank || axis >= rank)
    return error(what + " " + Twine(axis) + " is out of range for rank " +
                 Twine(rank) + " (valid: [" + Twine(-rank) + ", " +
                 Twine(rank - 1) + "])");
  return axis < 0 ? axis + rank : axis;
}

FailureOr<Operation *> NodeContext::finish(OperationState &state) {
  Operation *op = builder().create(state);
  if (failed(mlir::verify(op, /*verifyRecursively=*/false))) {
    op->erase();
    return failWithDiagnostics("the op does not verify");
  }
  return op;
}

LogicalResult NodeContext::failWithDiagnostics(StringRef fallback) {
  std::string message;
  for (const std::string &diag : importer.diagnostics)
    message += (message.empty() ? "" : "; ") + diag;
  importer.diagnostics.clear();
  return error(message.empty() ? fallback.str() : message);
}

//===----------------------------------------------------------------------===//
// GraphImporter
//===----------------------------------------------------------------------===//

std::string GraphImporter::describeNode(const onnx::NodeProto &node,
                                        int64_t opset) const {
  std::string domain = node.domain().empty() ? "" : node.domain() + ".";
  // Exporters often leave nodes unnamed; their position is then the only
  // handle a user has on them.
  std::string who = node.name().empty()
                        ? "node #" + std::to_string(currentNode)
                        : "node '" + node.name() + "'";
  return who + " (" + domain + node.op_type() + ", opset " +
         std::to_string(opset) + ")";
}

LogicalResult GraphImporter::nodeError(const onnx::NodeProto &node,
                                       int64_t opset, const Twine &message) {
  if (!nodeErrorMessage.empty())
    return failure(); // keep the first, most specific error
  // Graph outputs are resolved through a node-less context; naming an empty
  // node there would only confuse.
  if (&node == &onnx::NodeProto::default_instance())
    nodeErrorMessage = message.str();
  else
    nodeErrorMessage = describeNode(node, opset) + ": " + message.str();
  return failure();
}

FailureOr<HostTensor> GraphImporter::readTensor(const onnx::TensorProto &tensor,
                                                const Twine &what) {
  auto fail = [&](const Twine &message) -> FailureOr<HostTensor> {
    nodeErrorMessage.empty()
        ? (void)(nodeErrorMessage = (what + ": " + message).str())
        : (void)0;
    return failure();
  };
  int32_t dtype = tensor.data_type();
  if (!isHostFoldable(dtype))
    return fail("element type " + dtypeName(dtype) + " is not supported");
  SmallVector<int64_t> shape;
  int64_t count = 1;
  for (int64_t dim : tensor.dims()) {
    if (dim < 0)
      return fail("negative dimension " + Twine(dim));
    if (llvm::MulOverflow(count, dim, count))
      return fail("shape overflows 64 bits");
    shape.push_back(dim);
  }
  if (count > kMaxFoldElements)
    return fail("has " + Twine(count) + " elements, too many to use as a "
                "compile-time constant (limit " + Twine(kMaxFoldElements) +
                ")");
  DType type = static_cast<DType>(dtype);
  int64_t elementBytes = dtypeByteSize(dtype);
  std::optional<HostTensor> result;
  if (tensor.data_location() == onnx::TensorProto::EXTERNAL) {
    auto ref = resolveExternalData(modelDir, tensor, count * elementBytes);
    if (!ref)
      return fail(llvm::toString(ref.takeError()));
    auto bytes = readExternalBytes(modelDir, *ref);
    if (!bytes)
      return fail(llvm::toString(bytes.takeError()));
    result = HostTensor::fromBytes(type, shape, *bytes);
  } else {
    if (std::optional<std::string> problem =
            inlinePayloadProblem(tensor, shape, count))
      return fail(*problem);
    if (tensor.has_raw_data()) {
      result = HostTensor::fromBytes(type, shape, tensor.raw_data());
    } else {
      switch (type) {
      case DType::Float:
        result = HostTensor::ofFloats(
            type, shape,
            std::vector<double>(tensor.float_data().begin(),
                                tensor.float_data().end()));
        break;
      case DType::Double:
        result = HostTensor::ofFloats(
            type, shape,
            std::vector<double>(tensor.double_data().begin(),
                                tensor.double_data().end()));
        break;
      case DType::Int64:
        result = HostTensor::ofInts(
            type, shape,
            std::vector<int64_t>(tensor.int64_data().begin(),
                                 tensor.int64_data().end()));
        break;
      case DType::UInt32: case DType::UInt64:
        result = HostTensor::ofInts(
            type, shape,
            std::vector<int64_t>(tensor.uint64_data().begin(),
                                 tensor.uint64_data().end()));
        break;
      case DType::Float16: case DType::BFloat16: {
        std::string bytes;
        for (int32_t bits : tensor.int32_data()) {
          bytes.push_back(static_cast<char>(bits & 0xff));
          bytes.push_back(static_cast<char>((bits >> 8) & 0xff));
        }
        result = HostTensor::fromBytes(type, shape, bytes);
        break;
      }
      default:
        result = HostTensor::ofInts(
            type, shape,
            std::vector<int64_t>(tensor.int32_data().begin(),
                                 tensor.int32_data().end()));
        break;
      }
    }
  }
  if (!result)
    return fail("cannot decode its data");
  return std::move(*result);
}

const HostTensor *GraphImporter::constantOf(StringRef name,
                                            bool readParameters) {
  auto it = values.find(name);
  if (it != values.end() && it->second.constant)
    return &*it->second.constant;
  if (it != values.end() && it->second.value) {
    // A folded ds.constant (e.g. materialized earlier) is still a constant.
    if (auto constant = it->second.value.getDefiningOp<ds::ConstantOp>())
      if (auto dense = dyn_cast<DenseElementsAttr>(constant.getValue()))
        if (dense.isSplat() || dense.getNumElements() <= kMaxFoldElements)
          if (auto host = HostTensor::fromAttr(dense)) {
            it->second.constant = std::move(*host);
            return &*it->second.constant;
          }
  }
  auto init = initializers.find(name);
  if (init == initializers.end())
    return nullptr;
  const onnx::TensorProto &tensor = *init->second;
  // Float initializers are parameters: their values are not compile-time
  // facts unless a node uses them where ONNX expects an attribute.
  bool isFloat = isFloatDType(static_cast<DType>(tensor.data_type()));
  if (isFloat && !readParameters)
    return nullptr;
  int64_t count = 1;
  for (int64_t dim : tensor.dims())
    if (dim < 0 || llvm::MulOverflow(count, dim, count))
      return nullptr;
  if (count > kMaxFoldElements)
    return nullptr;
  std::string saved = nodeErrorMessage;
  FailureOr<HostTensor> value =
      readTensor(tensor, "initializer '" + tensor.name() + "'");
  if (failed(value)) {
    // Leave the error for the caller that needs it as a tensor.
    initializerErrors[name] = nodeErrorMessage;
    nodeErrorMessage = saved;
    return nullptr;
  }
  ValueEntry &entry = values[name];
  entry.constant = std::move(*value);
  return &*entry.constant;
}

FailureOr<Value> GraphImporter::materialize(NodeContext &ctx,
                                            const HostTensor &value,
                                            StringRef cacheName) {
  DenseElementsAttr attr = value.toAttr(context);
  if (!attr)
    return ctx.error("a constant of type " +
                     dtypeName(static_cast<int32_t>(value.dtype)) +
                     " reaches computation; dsopt computes on f32, f16, bf16, "
                     "i64, i32 and bool");
  auto it = constantCache.find(attr);
  if (it != constantCache.end())
    return it->second;
  OpBuilder::InsertionGuard guard(builder);
  builder.setInsertionPointToStart(body);
  Value result =
      ds::ConstantOp::create(builder, ctx.loc(), attr).getResult();
  constantCache[attr] = result;
  return result;
}

FailureOr<Value> GraphImporter::valueOf(NodeContext &ctx, StringRef name) {
  auto it = values.find(name);
  if (it != values.end()) {
    if (it->second.value)
      return it->second.value;
    if (it->second.constant) {
      FailureOr<Value> value = materialize(ctx, *it->second.constant);
      if (succeeded(value))
        it->second.value = *value;
      return value;
    }
  }
  if (initializers.count(name))
    return parameter(ctx, name);
  return ctx.error("input '" + name +
                   "' is not defined before use (the graph must be "
                   "topologically sorted, and every input must be a graph "
                   "input, an initializer or an earlier node's output)");
}

FailureOr<RankedTensorType> GraphImporter::typeOf(NodeContext &ctx,
                                                  StringRef name) {
  auto it = values.find(name);
  if (it != values.end()) {
    if (it->second.value)
      return cast<RankedTensorType>(it->second.value.getType());
    if (it->second.constant) {
      Type element = toMlirElementType(
          context, static_cast<int32_t>(it->second.constant->dtype));
      if (element)
        return RankedTensorType::get(it->second.constant->shape, element);
    }
  }
  FailureOr<Value> value = valueOf(ctx, name);
  if (failed(value))
    return failure();
  return cast<RankedTensorType>(value->getType());
}

llvm::Expected<Attribute>
GraphImporter::parameterData(const onnx::TensorProto &tensor,
                             RankedTensorType type, const std::string &what,
                             const InlinePayload *payload) {
  int64_t bytes = *ds::getByteSize(type);
  if (tensor.data_location() == onnx::TensorProto::EXTERNAL) {
    auto ref = resolveExternalData(modelDir, tensor, bytes);
    if (!ref)
      return ref.takeError();
    if (bytes > options.maxInlineParamBytes)
      return ds::ExternalDataAttr::get(&context, ref->location, ref->offset,
                                       ref->length);
  } else {
    if (std::optional<std::string> problem =
            inlinePayloadProblem(tensor, type.getShape(),
                                 type.getNumElements()))
      return makeError(what + " " + *problem);
    bool contiguous =
        payload && payload->length == bytes &&
        (tensor.has_raw_data() ||
         static_cast<DType>(tensor.data_type()) == DType::Float);
    if (contiguous && bytes > options.maxInlineParamBytes)
      return ds::ExternalDataAttr::get(&context,
                                       llvm::sys::path::filename(displayName),
                                       payload->offset, payload->length);
    // Otherwise (small, or typed fields that are not one run of raw bytes in
    // the file) the value goes into the IR.
  }
  // Small (or non-contiguous) values are stored in the IR.
  std::string saved = nodeErrorMessage;
  nodeErrorMessage.clear();
  int64_t count = type.getNumElements();
  if (count > kMaxFoldElements)
    return makeError(what +
                     " stores its values as typed protobuf fields and is too "
                     "large to embed; store it as raw_data or external data");
  FailureOr<HostTensor> value = readTensor(tensor, what);
  if (failed(value)) {
    std::string message = nodeErrorMessage;
    nodeErrorMessage = saved;
    return makeError(message);
  }
  nodeErrorMessage = saved;
  return value->toAttr(context);
}

FailureOr<Value> GraphImporter::parameter(NodeContext &ctx, StringRef name) {
  const onnx::TensorProto &tensor = *initializers[name];
  auto payload = payloads.initializers.find(name);
  bool trainable =
      isFloatDType(static_cast<DType>(tensor.data_type())) &&
      (!trainedInitializers || trainedInitializers->contains(name));
  return dataArgument(ctx, name, tensor, "initializer '" + name.str() + "'",
                      payload == payloads.initializers.end()
                          ? nullptr
                          : &payload->second,
                      trainable, initializerIndex[name]);
}

LogicalResult
GraphImporter::defineConstantData(NodeContext &ctx, StringRef name,
                                  const onnx::TensorProto &tensor) {
  auto payload = payloads.constants.find(currentNode);
  // A constant is not trained; it sorts after every initializer.
  FailureOr<Value> arg = dataArgument(
      ctx, name, tensor, "attribute 'value'",
      payload == payloads.constants.end() ? nullptr : &payload->second,
      /*trainable=*/false,
      static_cast<int>(initializerIndex.size()) + currentNode);
  return failure(failed(arg));
}

FailureOr<Value> GraphImporter::dataArgument(NodeContext &ctx, StringRef name,
                                             const onnx::TensorProto &tensor,
                                             const std::string &what,
                                             const InlinePayload *payload,
                                             bool trainable, int order) {
  int32_t dtype = tensor.data_type();
  Type element = toMlirElementType(context, dtype);
  if (!element)
    return ctx.error(what + " has element type " + dtypeName(dtype) +
                     ", which dsopt does not support (f32, f16, bf16, i64, "
                     "i32, bool)");
  SmallVector<int64_t> shape;
  int64_t count = 1;
  for (int64_t dim : tensor.dims()) {
    if (dim < 0 || llvm::MulOverflow(count, dim, count))
      return ctx.error(what + " has shape " +
                       shapeString(SmallVector<int64_t>(tensor.dims().begin(),
                                                        tensor.dims().end())) +
                       " whose size is negative or overflows 64 bits");
    shape.push_back(dim);
  }
  auto type = RankedTensorType::get(shape, element);
  if (!ds::getByteSize(type))
    return ctx.error(what + " of type " + Twine(dtypeName(dtype)) +
                     " and shape " + shapeString(shape) +
                     " overflows 64-bit byte sizes");
  llvm::Expected<Attribute> data = parameterData(tensor, type, what, payload);
  if (!data)
    return ctx.error(llvm::toString(data.takeError()));
  Value arg = body->addArgument(type, ctx.loc());
  parameterInitializer.push_back(order);
  auto param = ds::ParamAttr::get(&context, name, trainable, *data);
  // Argument attributes are set on the function once the signature is
  // final; keep them on the side until then.
  paramAttrs[arg] = param;
  values[name].value = arg;
  return arg;
}

llvm::Expected<RankedTensorType>
GraphImporter::resolveValueType(StringRef name, const onnx::TypeProto &type,
                                bool isInput) {
  StringRef what = isInput ? "graph input" : "graph output";
  if (!type.has_tensor_type())
    return error(what + " '" + name +
                 "' is not a tensor (sequences, maps and optionals are not "
                 "supported)");
  const auto &tensorType = type.tensor_type();
  int32_t dtype = tensorType.elem_type();
  Type element = toMlirElementType(context, dtype);
  if (!element)
    return error(what + " '" + name + "' has element type " +
                 dtypeName(dtype) +
                 ", which dsopt does not support (f32, f16, bf16, i64, i32, "
                 "bool)");
  if (!tensorType.has_shape())
    return error(what + " '" + name +
                 "' has no shape; dsopt needs the rank and the size of every "
                 "axis");
  SmallVector<int64_t> shape;
  for (auto [axis, dim] : llvm::enumerate(tensorType.shape().dim())) {
    int64_t size = -1;
    if (dim.has_dim_value()) {
      size = dim.dim_value();
      if (size < 0)
        return error(what + " '" + name + "' axis " + Twine(axis) +
                     " has negative size " + Twine(size));
      if (axis == 0 && isInput && options.batch && *options.batch != size &&
          !dim.has_dim_param())
        return error("--batch " + Twine(*options.batch) +
                     " conflicts with graph input '" + name +
                     "', whose leading axis is fixed at " + Twine(size));
    } else if (dim.has_dim_param() &&
               options.dims.count(dim.dim_param())) {
      size = options.dims.lookup(dim.dim_param());
      usedDims.insert(dim.dim_param());
    } else if (axis == 0 && options.batch) {
      size = *options.batch;
      batchUsed = true;
    } else {
      if (!isInput)
        return RankedTensorType(); // outputs may leave dims open
      // An empty dim_param names nothing --dim could set.
      bool named = dim.has_dim_param() && !dim.dim_param().empty();
      std::string label = named ? "symbolic size '" + dim.dim_param() + "'"
                                : std::string("an unknown size");
      std::string hint =
          named ? "give it with --dim " + dim.dim_param() + "=<size>"
                : std::string("fix its size in the model, or name it and "
                              "give --dim NAME=<size>");
      if (axis == 0)
        hint += named ? " or --batch N" : ", or give --batch N";
      return error(what + " '" + name + "' axis " + Twine(axis) + " has " +
                   label + "; " + hint);
    }
    shape.push_back(size);
  }
  auto result = RankedTensorType::get(shape, element);
  if (!ds::getByteSize(result))
    return error(what + " '" + name + "' with shape " + shapeString(shape) +
                 " overflows 64-bit byte sizes");
  return result;
}

llvm::Error GraphImporter::checkModelHeader() {
  int64_t ir = model.ir_version();
  if (ir < kMinIrVersion || ir > kMaxIrVersion)
    return error("unsupported ONNX IR version " + Twine(ir) +
                 " (dsopt reads IR versions " + Twine(kMinIrVersion) + " to " +
                 Twine(kMaxIrVersion) + ")");
  for (const auto &opset : model.opset_import()) {
    StringRef domain = opset.domain();
    StringRef key = domain == "ai.onnx" ? "" : domain;
    auto [it, inserted] = domainVersions.try_emplace(key, opset.version());
    // Which version would win is protobuf order, not anything the author
    // meant; refuse rather than guess.
    if (!inserted && it->second != opset.version())
      return error("opset_import lists domain '" +
                   (key.empty() ? StringRef("ai.onnx") : key) +
                   "' twice, with versions " + Twine(it->second) + " and " +
                   Twine(opset.version()));
    if (domain.empty() || domain == "ai.onnx") {
      defaultOpset = opset.version();
    } else if (domain == kTrainingDomain) {
      trainingOpset = opset.version();
      if (trainingOpset != 1)
        return error("unsupported opset version " + Twine(trainingOpset) +
                     " of domain '" + domain + "' (dsopt supports 1)");
    } else {
      warn("opset_import names domain '" + domain +
           "', which dsopt does not know; nodes of that domain will be "
           "rejected");
    }
  }
  if (defaultOpset == 0) {
    // A graph of preview-training nodes alone needs no ai.onnx opset.
    for (const auto &node : graph.node())
      if (node.domain().empty() || node.domain() == "ai.onnx")
        return error("the model imports no opset of the default domain "
                     "ai.onnx, but node " +
                     (node.name().empty() ? "of type " + node.op_type()
                                          : "'" + node.name() + "'") +
                     " uses it");
  } else if (defaultOpset < kMinOpset || defaultOpset > kMaxOpset)
    return error("unsupported opset version " + Twine(defaultOpset) +
                 " of domain ai.onnx (dsopt supports " + Twine(kMinOpset) +
                 " to " + Twine(kMaxOpset) +
                 "; convert older models with onnx.version_converter)");
  if (graph.sparse_initializer_size() > 0)
    return error("sparse initializers are not supported ('" +
                 graph.sparse_initializer(0).values().name() + "')");
  return llvm::Error::success();
}

llvm::Error GraphImporter::createInputs() {
  for (auto [index, tensor] : llvm::enumerate(graph.initializer())) {
    if (tensor.name().empty())
      return error("initializer #" + Twine(index) + " has no name");
    if (!initializers.try_emplace(tensor.name(), &tensor).second)
      return error("initializer '" + tensor.name() + "' is defined twice");
    initializerIndex[tensor.name()] = initializerIndex.size();
  }
  for (const auto &info : graph.value_info())
    declaredTypes[info.name()] = &info.type();
  for (const auto &info : graph.output())
    declaredTypes[info.name()] = &info.type();

  SmallVector<Type> types;
  for (auto [index, input] : llvm::enumerate(graph.input())) {
    // Before IR version 4 initializers were also listed as inputs.
    if (initializers.count(input.name()))
      continue;
    if (input.name().empty())
      return error("graph input #" + Twine(index) + " has no name");
    if (values.count(input.name()))
      return error("graph input '" + input.name() + "' is listed twice");
    auto type = resolveValueType(input.name(), input.type(), true);
    if (!type)
      return type.takeError();
    Value arg = body->addArgument(*type, builder.getUnknownLoc());
    inputNames.push_back(input.name());
    values[input.name()].value = arg;
  }
  numInputs = body->getNumArguments();
  return llvm::Error::success();
}

llvm::Error GraphImporter::checkDeclaredType(const onnx::NodeProto *node,
                                             int64_t opset, StringRef name,
                                             Type computed) {
  auto it = declaredTypes.find(name);
  if (it == declaredTypes.end() ||
      it->second->value_case() == onnx::TypeProto::VALUE_NOT_SET)
    return llvm::Error::success();
  StringRef what = "shapes";
  auto type = cast<RankedTensorType>(computed);
  auto mismatch = [&](const Twine &detail) -> llvm::Error {
    std::string where = node ? describeNode(*node, opset) + ": " : "";
    return error(where + "inconsistent " + what + ": value '" + name + "' " +
                 detail);
  };
  if (!it->second->has_tensor_type()) {
    what = "types";
    return mismatch("is declared as a sequence, map, optional or sparse "
                    "tensor but computes to a tensor");
  }
  const auto &declared = it->second->tensor_type();
  int32_t computedType =
      static_cast<int32_t>(fromMlirElementType(type.getElementType()));
  // Compared as ONNX types: a declared type dsopt cannot represent (DOUBLE)
  // still contradicts what the graph computes.
  if (declared.elem_type() != 0 && declared.elem_type() != computedType) {
    what = "types";
    return mismatch("is declared " + dtypeName(declared.elem_type()) +
                    " but computes to " + dtypeName(computedType));
  }
  if (!declared.has_shape())
    return llvm::Error::success();
  const auto &dims = declared.shape().dim();
  if (dims.size() != type.getRank())
    return mismatch("is declared with rank " + Twine(dims.size()) +
                    " but computes to shape " +
                    shapeString(type.getShape()));
  for (auto [axis, dim] : llvm::enumerate(dims)) {
    std::optional<int64_t> expected;
    if (dim.has_dim_value())
      expected = dim.dim_value();
    else if (dim.has_dim_param() && options.dims.count(dim.dim_param()))
      expected = options.dims.lookup(dim.dim_param());
    if (expected && *expected != type.getDimSize(axis)) {
      SmallVector<std::string> parts;
      for (const auto &d : dims)
        parts.push_back(d.has_dim_value() ? std::to_string(d.dim_value())
                                          : d.dim_param());
      return mismatch("is declared [" + llvm::join(parts, ", ") +
                      "] but computes to " + shapeString(type.getShape()));
    }
  }
  return llvm::Error::success();
}

llvm::Error GraphImporter::importNode(int index) {
  const onnx::NodeProto &node = graph.node(index);
  currentNode = index;
  StringRef domain = node.domain();
  bool isDefault = domain.empty() || domain == "ai.onnx";
  int64_t opset = isDefault ? defaultOpset : domainVersions.lookup(domain);
  std::string nodeName = node.name().empty()
                             ? node.op_type() + "_" + std::to_string(index)
                             : node.name();
  Location loc = NameLoc::get(
      StringAttr::get(&context, nodeName),
      FileLineColLoc::get(&context, llvm::sys::path::filename(displayName),
                          index + 1, 0));
  auto fail = [&](const Twine &message) {
    (void)nodeError(node, opset, message);
    return error(nodeErrorMessage);
  };
  if (!isDefault && domain != kTrainingDomain)
    return fail("unsupported domain '" + domain +
                "' (dsopt supports ai.onnx and ai.onnx.preview.training)");
  if (domain == kTrainingDomain && trainingOpset == 0)
    return fail("the model does not import domain '" + domain + "'");
  if (node.op_type().empty())
    return fail("the node has no op_type");
  const OpHandler *handler =
      lookupOpHandler(isDefault ? "" : domain, node.op_type());
  if (!handler)
    return fail("unsupported op '" + node.op_type() +
                "'; `dsopt --list-ops` shows the supported operators");
  for (const std::string &output : node.output())
    if (!output.empty() &&
        (values.count(output) || initializers.count(output)))
      return fail("output '" + output + "' is already defined");

  NodeContext ctx(*this, node, opset, loc);
  builder.setInsertionPoint(body->getTerminator());
  // An empty name marks an omitted optional input, and the first input of
  // every operator dsopt imports is required; checked here because folders
  // treat an omitted input as "known".
  if (ctx.numInputs() > 0 && !ctx.hasInput(0))
    return fail("input 0 is required but missing (its name is empty)");

  bool folded = false;
  // "All inputs known" is vacuously true of a node whose inputs are all
  // missing; only a pure source (Constant, no converter) folds from nothing.
  // Anything else goes to its converter, which reports the missing input.
  if (handler->fold && (ctx.numInputs() > 0 || !handler->convert)) {
    bool allKnown = true;
    if (!handler->foldNeedsTypesOnly)
      for (unsigned i = 0, e = ctx.numInputs(); i < e; ++i)
        if (ctx.hasInput(i) && !ctx.constInput(i))
          allKnown = false;
    if (allKnown) {
      FailureOr<bool> result = handler->fold(ctx);
      if (failed(result))
        return error(nodeErrorMessage);
      folded = *result;
    }
  }
  if (!folded) {
    if (!handler->convert)
      return fail("'" + node.op_type() +
                  "' is supported only on values known at compile time "
                  "(shape arithmetic); here its inputs depend on graph "
                  "inputs or parameters");
    if (failed(handler->convert(ctx)))
      return error(nodeErrorMessage.empty()
                       ? "node '" + nodeName + "': conversion failed"
                       : nodeErrorMessage);
  }
  for (auto [i, output] : llvm::enumerate(node.output())) {
    if (output.empty())
      continue;
    auto it = values.find(output);
    if (it == values.end())
      return fail("output " + Twine(i) + " ('" + output +
                  "') is not supported by dsopt's import of " +
                  node.op_type());
    Type type;
    if (it->second.value) {
      type = it->second.value.getType();
    } else if (Type element = toMlirElementType(
                   context, static_cast<int32_t>(it->second.constant->dtype))) {
      type = RankedTensorType::get(it->second.constant->shape, element);
    }
    if (!type)
      continue;
    // Inputs and parameters are checked when they are created; a node can
    // still build an overflowing value (Expand, ConstantOfShape), whose
    // wrapped-around sizes would make every memory estimate wrong.
    auto ranked = cast<RankedTensorType>(type);
    if (!ds::getByteSize(ranked))
      return fail("output " + Twine(i) + " ('" + output + "') of shape " +
                  shapeString(ranked.getShape()) +
                  " overflows 64-bit byte sizes");
    if (llvm::Error err = checkDeclaredType(&node, opset, output, type))
      return err;
  }
  return llvm::Error::success();
}

llvm::Error GraphImporter::createOutputs() {
  SmallVector<Value> results;
  NodeContext ctx(*this, onnx::NodeProto::default_instance(), defaultOpset,
                  builder.getUnknownLoc());
  llvm::StringSet<> seen;
  for (auto [index, output] : llvm::enumerate(graph.output())) {
    StringRef name = output.name();
    if (name.empty())
      return error("graph output #" + Twine(index) + " has no name");
    // Outputs are addressed by name downstream; two with one name would be
    // indistinguishable.
    if (!seen.insert(name).second)
      return error("graph output '" + name + "' is listed twice");
    auto it = values.find(name);
    if (it == values.end() && !initializers.count(name))
      return error("graph output '" + name + "' is not computed by any node");
    builder.setInsertionPoint(body->getTerminator());
    FailureOr<Value> value = valueOf(ctx, name);
    if (failed(value))
      return error("graph output '" + name + "': " + nodeErrorMessage);
    if (llvm::Error err =
            checkDeclaredType(nullptr, defaultOpset, name, value->getType()))
      return err;
    results.push_back(*value);
    outputNames.push_back(name.str());
  }
  if (results.empty())
    return error("the graph has no outputs");
  body->getTerminator()->setOperands(results);
  return llvm::Error::success();
}

void GraphImporter::removeDeadCode() {
  // Reverse order visits users before the values they use.
  for (Operation &op :
       llvm::make_early_inc_range(llvm::reverse(body->getOperations())))
    if (isOpTriviallyDead(&op))
      op.erase();
  // Parameters no op consumes after dead code is gone.
  for (int i = body->getNumArguments() - 1; i >= static_cast<int>(numInputs);
       --i) {
    BlockArgument arg = body->getArgument(i);
    if (arg.use_empty()) {
      paramAttrs.erase(arg);
      parameterInitializer.erase(parameterInitializer.begin() +
                                 (i - numInputs));
      body->eraseArgument(i);
    }
  }
}

void GraphImporter::orderParameters() {
  unsigned numParams = body->getNumArguments() - numInputs;
  SmallVector<unsigned> order(numParams);
  for (unsigned i = 0; i < numParams; ++i)
    order[i] = i;
  llvm::stable_sort(order, [&](unsigned a, unsigned b) {
    return parameterInitializer[a] < parameterInitializer[b];
  });
  llvm::DenseMap<Value, ds::ParamAttr> reordered;
  for (unsigned i : order) {
    BlockArgument old = body->getArgument(numInputs + i);
    BlockArgument fresh = body->addArgument(old.getType(), old.getLoc());
    old.replaceAllUsesWith(fresh);
    reordered[fresh] = paramAttrs.lookup(old);
  }
  body->eraseArguments(numInputs, numParams);
  paramAttrs = std::move(reordered);
}

llvm::Expected<OwningOpRef<ModuleOp>> GraphImporter::run() {
  if (llvm::Error err = checkModelHeader())
    return err;
  Location fileLoc =
      FileLineColLoc::get(&context, llvm::sys::path::filename(displayName), 0,
                          0);
  OwningOpRef<ModuleOp> owned = ModuleOp::create(fileLoc);
  module = *owned;
  module->setAttr(ds::DsDialect::kSourceAttrName,
                  StringAttr::get(&context, displayName));
  if (!model.producer_name().empty())
    module->setAttr(
        "ds.producer",
        StringAttr::get(&context,
                        model.producer_version().empty()
                            ? model.producer_name()
                            : model.producer_name() + " " +
                                  model.producer_version()));
  if (defaultOpset)
    module->setAttr("ds.opset", builder.getI64IntegerAttr(defaultOpset));
  builder.setInsertionPointToEnd(module.getBody());
  function = func::FuncOp::create(builder, fileLoc, "main",
                                  builder.getFunctionType({}, {}));
  body = function.addEntryBlock();
  builder.setInsertionPointToEnd(body);
  func::ReturnOp::create(builder, fileLoc);

  if (model.training_info_size() > 0) {
    trainedInitializers.emplace();
    for (const onnx::TrainingInfoProto &info : model.training_info())
      for (const onnx::StringStringEntryProto &binding : info.update_binding())
        trainedInitializers->insert(binding.key());
  }
  if (llvm::Error err = createInputs())
    return err;
  for (int i = 0; i < graph.node_size(); ++i)
    if (llvm::Error err = importNode(i))
      return err;
  currentNode = -1;
  if (llvm::Error err = createOutputs())
    return err;

  removeDeadCode();
  orderParameters();

  // Initializers consumed at import (shapes, axes, constants folded into
  // attributes) are not parameters; --frozen may still name them.
  {
    llvm::StringSet<> params;
    for (BlockArgument arg : body->getArguments())
      if (auto param = paramAttrs.lookup(arg))
        params.insert(param.getName());
    SmallVector<std::pair<int, StringRef>> folded;
    for (const auto &entry : initializerIndex)
      if (!params.contains(entry.getKey()))
        folded.emplace_back(entry.getValue(), entry.getKey());
    llvm::sort(folded);
    if (!folded.empty()) {
      SmallVector<Attribute> names;
      for (auto [index, name] : folded)
        names.push_back(builder.getStringAttr(name));
      module->setAttr(ds::DsDialect::kFoldedInitializersAttrName,
                      builder.getArrayAttr(names));
    }
  }

  function.setFunctionType(builder.getFunctionType(
      body->getArgumentTypes(), body->getTerminator()->getOperandTypes()));
  // All at once: setting one argument's attribute rebuilds the array of
  // every argument's, quadratic in thousands of parameters.
  SmallVector<DictionaryAttr> argAttrs;
  argAttrs.reserve(body->getNumArguments());
  for (unsigned i = 0; i < body->getNumArguments(); ++i)
    argAttrs.push_back(builder.getDictionaryAttr(
        i < numInputs
            ? builder.getNamedAttr(ds::DsDialect::kInputAttrName,
                                   builder.getStringAttr(inputNames[i]))
            : builder.getNamedAttr(ds::DsDialect::kParamAttrName,
                                   paramAttrs.lookup(body->getArgument(i)))));
  function.setAllArgAttrs(argAttrs);
  for (auto [i, name] : llvm::enumerate(outputNames))
    function.setResultAttr(i, ds::DsDialect::kOutputAttrName,
                           builder.getStringAttr(name));

  for (const auto &entry : options.dims)
    if (!usedDims.contains(entry.getKey()))
      warn("--dim " + entry.getKey() +
           " matches no symbolic dimension of a graph input");
  if (options.batch && !batchUsed)
    warn("--batch is unused: no graph input has a symbolic leading axis");
  if (trainedInitializers) {
    SmallVector<StringRef> unknown;
    for (const auto &entry : *trainedInitializers)
      if (!initializerIndex.count(entry.getKey()))
        unknown.push_back(entry.getKey());
    llvm::sort(unknown);
    if (!unknown.empty())
      warn("the TrainingInfoProto updates '" + llvm::join(unknown, "', '") +
           "', which " + (unknown.size() == 1 ? "is" : "are") +
           " not an initializer of the graph");
    warn("the model's TrainingInfoProto decides which initializers train (" +
         Twine(trainedInitializers->size()) +
         " update bindings); its algorithm graph is not imported: dsopt "
         "builds the training step from the loss");
  }

  diagnostics.clear();
  if (failed(mlir::verify(module))) {
    std::string message = "internal error: the imported module does not "
                          "verify";
    for (const std::string &diag : diagnostics)
      message += "; " + diag;
    return error(message);
  }
  return owned;
}

} // namespace dsopt::onnx_import

//===----------------------------------------------------------------------===//
// Public API
//===----------------------------------------------------------------------===//

namespace dsopt {

void registerImportDialects(MLIRContext &context) {
  context.loadDialect<ds::DsDialect, func::FuncDialect>();
}

llvm::Expected<OwningOpRef<ModuleOp>>
importOnnxBytes(MLIRContext &context, StringRef bytes, StringRef displayName,
                StringRef modelDir, const OnnxImportOptions &options) {
  registerImportDialects(context);
  onnx::ModelProto model;
  if (llvm::Error err =
          onnx_import::parseModelBytes(displayName, bytes, model))
    return err;
  onnx_import::InlinePayloads payloads =
      onnx_import::scanInlinePayloads(bytes);
  onnx_import::GraphImporter importer(context, model, payloads, displayName,
                                      modelDir, options);
  return importer.run();
}

llvm::Expected<OwningOpRef<ModuleOp>>
importOnnxFile(MLIRContext &context, StringRef path,
               const OnnxImportOptions &options) {
  registerImportDialects(context);
  auto loaded = onnx_import::loadModelFile(path);
  if (!loaded)
    return loaded.takeError();
  StringRef dir = llvm::sys::path::parent_path(path);
  onnx_import::GraphImporter importer(context, (*loaded)->model,
                                      (*loaded)->inlinePayloads, path,
                                      dir.empty() ? "." : dir, options);
  return importer.run();
}

std::vector<SupportedOnnxOp> supportedOnnxOps() {
  std::vector<SupportedOnnxOp> ops;
  onnx_import::forEachOpHandler(
      [&](StringRef domain, StringRef name,
          const onnx_import::OpHandler &handler) {
        ops.push_back({domain.str(), name.str(), handler.note});
      });
  llvm::sort(ops, [](const SupportedOnnxOp &a, const SupportedOnnxOp &b) {
    return std::tie(a.domain, a.name) < std::tie(b.domain, b.name);
  });
  return ops;
}

} // namespace dsopt

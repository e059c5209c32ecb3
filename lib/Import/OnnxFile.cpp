//===- OnnxFile.cpp - reading ONNX model files ----------------------------===//

#include "OnnxFile.h"

#include "google/protobuf/io/coded_stream.h"
#include "llvm/Support/FileSystem.h"

#include <climits>
#include <optional>

using llvm::Error;
using llvm::StringRef;

namespace dsopt::onnx_import {

static Error fileError(StringRef path, const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                 path + ": " + message);
}

Error parseModelBytes(StringRef displayName, StringRef bytes,
                      onnx::ModelProto &model) {
  if (bytes.empty())
    return fileError(displayName, "the model file is empty");
  if (bytes.size() > static_cast<size_t>(INT_MAX))
    return fileError(displayName,
                     "the model file is " + llvm::Twine(bytes.size()) +
                         " bytes; protobuf cannot parse models of 2 GiB or "
                         "more. Store the weights as external data "
                         "(onnx.save_model(..., save_as_external_data=True))");
  google::protobuf::io::CodedInputStream input(
      reinterpret_cast<const uint8_t *>(bytes.data()),
      static_cast<int>(bytes.size()));
  input.SetTotalBytesLimit(INT_MAX);
  if (!model.ParseFromCodedStream(&input) || !input.ConsumedEntireMessage())
    return fileError(displayName,
                     "not a valid ONNX model: the file does not parse as an "
                     "ONNX ModelProto protobuf (corrupt, truncated or not an "
                     "ONNX file)");
  if (model.ir_version() == 0 && !model.has_graph())
    return fileError(displayName,
                     "not an ONNX model: no ir_version and no graph");
  if (!model.has_graph())
    return fileError(displayName, "the model has no graph (truncated file?)");
  if (model.opset_import_size() == 0)
    return fileError(displayName,
                     "the model has no opset_import (truncated file?)");
  return Error::success();
}

llvm::Expected<std::unique_ptr<LoadedModel>>
loadModelFile(StringRef path) {
  llvm::sys::fs::file_status status;
  if (std::error_code ec = llvm::sys::fs::status(path, status))
    return fileError(path, "cannot read the model file: " + ec.message());
  if (llvm::sys::fs::is_directory(status))
    return fileError(path, "is a directory, not an ONNX model file");
  // Devices and pipes have no size to check up front: /dev/zero would be
  // read until memory runs out, and a FIFO without a writer blocks forever.
  if (!llvm::sys::fs::is_regular_file(status))
    return fileError(path, "is not a regular file (a device, pipe or "
                           "socket); dsopt reads models from regular files");
  auto bufferOr = llvm::MemoryBuffer::getFile(path, /*IsText=*/false,
                                              /*RequiresNullTerminator=*/false);
  if (!bufferOr)
    return fileError(path, "cannot read the model file: " +
                               bufferOr.getError().message());
  auto loaded = std::make_unique<LoadedModel>();
  loaded->buffer = std::move(*bufferOr);
  if (Error error =
          parseModelBytes(path, loaded->buffer->getBuffer(), loaded->model))
    return error;
  loaded->inlinePayloads = scanInlinePayloads(loaded->buffer->getBuffer());
  return loaded;
}

namespace {
/// A bounds-checked reader of protobuf wire format.
class WireReader {
public:
  WireReader(const uint8_t *begin, const uint8_t *end, const uint8_t *base)
      : pos(begin), end(end), base(base) {}

  bool atEnd() const { return pos >= end; }

  bool readVarint(uint64_t &value) {
    value = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (pos >= end)
        return false;
      uint8_t byte = *pos++;
      value |= static_cast<uint64_t>(byte & 0x7f) << shift;
      if (!(byte & 0x80))
        return true;
    }
    return false;
  }

  /// Reads one field header and, for length-delimited fields, the payload
  /// bounds; skips other payloads.
  bool next(uint32_t &field, uint32_t &wireType, const uint8_t *&payload,
            uint64_t &length) {
    uint64_t key;
    if (!readVarint(key))
      return false;
    field = static_cast<uint32_t>(key >> 3);
    wireType = static_cast<uint32_t>(key & 7);
    payload = nullptr;
    length = 0;
    switch (wireType) {
    case 0: {
      uint64_t ignored;
      return readVarint(ignored);
    }
    case 1:
      return skip(8);
    case 5:
      return skip(4);
    case 2:
      if (!readVarint(length) || length > static_cast<uint64_t>(end - pos))
        return false;
      payload = pos;
      pos += length;
      return true;
    default:
      return false; // groups are not used by onnx.proto
    }
  }

  int64_t offsetOf(const uint8_t *p) const { return p - base; }

private:
  bool skip(uint64_t n) {
    if (n > static_cast<uint64_t>(end - pos))
      return false;
    pos += n;
    return true;
  }

  const uint8_t *pos, *end, *base;
};

// Field numbers from onnx.proto.
constexpr uint32_t kModelGraph = 7;
constexpr uint32_t kGraphNode = 1;
constexpr uint32_t kGraphInitializer = 5;
constexpr uint32_t kNodeAttribute = 5;
constexpr uint32_t kAttributeName = 1;
constexpr uint32_t kAttributeTensor = 5;
constexpr uint32_t kTensorFloatData = 4;
constexpr uint32_t kTensorName = 8;
constexpr uint32_t kTensorRawData = 9;

/// The payload of one TensorProto message and its name; nothing when its
/// values are not one contiguous run (unpacked or split float_data).
std::optional<InlinePayload> tensorPayload(WireReader tensor,
                                           std::string *name) {
  uint32_t field, wireType;
  const uint8_t *payload;
  uint64_t length;
  InlinePayload found;
  int runs = 0;
  while (!tensor.atEnd() && tensor.next(field, wireType, payload, length)) {
    if (wireType != 2)
      continue;
    if (field == kTensorName && name) {
      name->assign(reinterpret_cast<const char *>(payload), length);
    } else if (field == kTensorRawData || field == kTensorFloatData) {
      found = {tensor.offsetOf(payload), static_cast<int64_t>(length)};
      ++runs;
    }
  }
  if (runs != 1)
    return std::nullopt;
  return found;
}

/// The payload of a node's TENSOR attribute named 'value', if any.
std::optional<InlinePayload> constantPayload(WireReader node,
                                             const uint8_t *base) {
  uint32_t field, wireType;
  const uint8_t *payload;
  uint64_t length;
  std::optional<InlinePayload> result;
  while (!node.atEnd() && node.next(field, wireType, payload, length)) {
    if (field != kNodeAttribute || wireType != 2)
      continue;
    WireReader attribute(payload, payload + length, base);
    bool isValue = false;
    std::optional<WireReader> tensor;
    while (!attribute.atEnd() &&
           attribute.next(field, wireType, payload, length)) {
      if (wireType != 2)
        continue;
      if (field == kAttributeName)
        isValue = StringRef(reinterpret_cast<const char *>(payload), length) ==
                  "value";
      else if (field == kAttributeTensor)
        tensor.emplace(payload, payload + length, base);
    }
    if (isValue && tensor)
      result = tensorPayload(*tensor, nullptr);
  }
  return result;
}
} // namespace

InlinePayloads scanInlinePayloads(StringRef bytes) {
  InlinePayloads payloads;
  const auto *base = reinterpret_cast<const uint8_t *>(bytes.data());
  WireReader model(base, base + bytes.size(), base);
  uint32_t field, wireType;
  const uint8_t *payload;
  uint64_t length;
  // Repeated graph fields merge, so node positions run on across them.
  int nodeIndex = 0;
  while (!model.atEnd() && model.next(field, wireType, payload, length)) {
    if (field != kModelGraph || wireType != 2)
      continue;
    WireReader graph(payload, payload + length, base);
    while (!graph.atEnd() && graph.next(field, wireType, payload, length)) {
      if (wireType != 2)
        continue;
      WireReader message(payload, payload + length, base);
      if (field == kGraphNode) {
        if (std::optional<InlinePayload> found =
                constantPayload(message, base))
          payloads.constants[nodeIndex] = *found;
        ++nodeIndex;
      } else if (field == kGraphInitializer) {
        std::string name;
        std::optional<InlinePayload> found = tensorPayload(message, &name);
        if (found && !name.empty())
          payloads.initializers[name] = *found;
      }
    }
  }
  return payloads;
}

} // namespace dsopt::onnx_import

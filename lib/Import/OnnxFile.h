//===- OnnxFile.h - reading ONNX model files ---------------------*- C++ -*-===//
//
// Loads a ModelProto from disk with the checks a compiler owes its users:
// empty, truncated, oversized and non-protobuf files are clear errors, and the
// byte offsets of inline initializer payloads (and of Constant nodes' tensors)
// are recovered so parameters and large constants can reference their bytes
// in the model file instead of copying them into IR.
//
//===----------------------------------------------------------------------===//

#ifndef DSOPT_LIB_IMPORT_ONNXFILE_H
#define DSOPT_LIB_IMPORT_ONNXFILE_H

#include "onnx/onnx.pb.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/MemoryBuffer.h"

#include <memory>

namespace dsopt::onnx_import {

/// Where an initializer's payload sits inside the model file, when it is one
/// contiguous little-endian run (raw_data, or packed float_data).
struct InlinePayload {
  int64_t offset = 0;
  int64_t length = 0;
};

/// The contiguous payloads of a model file's main graph.
struct InlinePayloads {
  /// Graph initializer name -> payload position, for those stored inline as
  /// one contiguous run.
  llvm::StringMap<InlinePayload> initializers;
  /// Position in graph.node -> payload of that node's TENSOR attribute
  /// named 'value' (a Constant node's tensor), when it is one contiguous run.
  llvm::DenseMap<int, InlinePayload> constants;
};

struct LoadedModel {
  onnx::ModelProto model;
  /// The file, mapped; payload offsets point into it.
  std::unique_ptr<llvm::MemoryBuffer> buffer;
  InlinePayloads inlinePayloads;
};

/// Reads and parses `path`. Errors name the file and the problem.
llvm::Expected<std::unique_ptr<LoadedModel>> loadModelFile(llvm::StringRef path);

/// Parses `bytes` as a ModelProto (exposed for the fuzzer).
llvm::Error parseModelBytes(llvm::StringRef displayName, llvm::StringRef bytes,
                            onnx::ModelProto &model);

/// Walks the protobuf wire format of a ModelProto and records, for every
/// initializer of the main graph and every 'value' tensor attribute of its
/// nodes, the position of a contiguous payload.
InlinePayloads scanInlinePayloads(llvm::StringRef bytes);

} // namespace dsopt::onnx_import

#endif // DSOPT_LIB_IMPORT_ONNXFILE_H

//===- OnnxImporter.h - ONNX training graphs to the ds dialect --*- C++ -*-===//
//
// Imports an ONNX ModelProto into a module holding one `func.func @main`
// whose arguments are the graph inputs (`{ds.input = NAME}`) followed by the
// parameters (`{ds.param = #ds.param<...>}`, one per initializer actually
// used, in initializer order) and whose results are the graph outputs
// (`{ds.output = NAME}`). Shapes are static: symbolic dimensions take their
// values from the options, and shape arithmetic folds away during import.
//
//===----------------------------------------------------------------------===//

#ifndef DSOPT_IMPORT_ONNXIMPORTER_H
#define DSOPT_IMPORT_ONNXIMPORTER_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/raw_ostream.h"

#include <optional>
#include <string>
#include <vector>

namespace dsopt {

struct OnnxImportOptions {
  /// Values of symbolic dimensions (`--dim NAME=VALUE`).
  llvm::StringMap<int64_t> dims;
  /// Size of the leading axis of graph inputs whose leading axis is symbolic
  /// (`--batch N`).
  std::optional<int64_t> batch;
  /// Parameters of at most this many bytes carry their value in the IR;
  /// larger ones reference their bytes in the model or external-data file.
  int64_t maxInlineParamBytes = 64;
  /// Where warnings go (unused --dim names, ignored model parts); null
  /// discards them.
  llvm::raw_ostream *warnings = nullptr;
};

/// Imports the ONNX model at `path`. Errors name the file, and for problems
/// in the graph the node (name, op type, opset) and the reason.
llvm::Expected<mlir::OwningOpRef<mlir::ModuleOp>>
importOnnxFile(mlir::MLIRContext &context, llvm::StringRef path,
               const OnnxImportOptions &options);

/// Imports a model already in memory; `displayName` names it in errors and
/// `modelDir` resolves external data.
llvm::Expected<mlir::OwningOpRef<mlir::ModuleOp>>
importOnnxBytes(mlir::MLIRContext &context, llvm::StringRef bytes,
                llvm::StringRef displayName, llvm::StringRef modelDir,
                const OnnxImportOptions &options);

/// One supported ONNX operator: its domain ("" is ai.onnx), name, and a
/// short note on how it is imported.
struct SupportedOnnxOp {
  std::string domain;
  std::string name;
  std::string note;
};

/// Every operator the importer handles, sorted by domain and name.
std::vector<SupportedOnnxOp> supportedOnnxOps();

/// Registers the dialects an imported module uses.
void registerImportDialects(mlir::MLIRContext &context);

} // namespace dsopt

#endif // DSOPT_IMPORT_ONNXIMPORTER_H

//===- ExternalData.h - validated references to external tensor data -----===//
//
// ONNX tensors may keep their bytes in a file next to the model. The location
// comes from the model file, so it is untrusted: it must be relative, must
// not contain '..', must resolve (after symlinks) to a regular file inside the
// model's directory, and the byte range must exist.
//
//===----------------------------------------------------------------------===//

#ifndef DSOPT_LIB_IMPORT_EXTERNALDATA_H
#define DSOPT_LIB_IMPORT_EXTERNALDATA_H

#include "onnx/onnx.pb.h"

#include "llvm/Support/Error.h"

#include <string>

namespace dsopt::onnx_import {

struct ExternalRef {
  std::string location; // as written in the model, relative to its directory
  int64_t offset = 0;
  int64_t length = 0;
  /// The file after resolving symlinks, as validated; reads go here.
  std::string resolvedPath;
};

/// Validates the external data of `tensor`, which needs `expectedBytes`.
/// Error messages name the tensor, the location and the problem.
llvm::Expected<ExternalRef> resolveExternalData(llvm::StringRef modelDir,
                                                const onnx::TensorProto &tensor,
                                                int64_t expectedBytes);

/// Reads the bytes of a validated reference.
llvm::Expected<std::string> readExternalBytes(llvm::StringRef modelDir,
                                              const ExternalRef &ref);

} // namespace dsopt::onnx_import

#endif // DSOPT_LIB_IMPORT_EXTERNALDATA_H

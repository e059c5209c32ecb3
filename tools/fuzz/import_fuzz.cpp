// libFuzzer target: the ONNX importer from bytes (dsopt::importOnnxBytes:
// parseModelBytes, then the graph importer that builds the ds module), the
// in-process counterpart of test/Fuzz/Inputs/fuzz_import.py. Every input
// must give a module or an llvm::Error; a crash, an assertion, a sanitizer
// report or a leak is a finding. External data is confined to the model's
// directory, which is an empty one here. Seeds: the zoo's ONNX models.
#include "dsopt/Import/OnnxImporter.h"

#include "mlir/IR/MLIRContext.h"
#include "llvm/Support/Error.h"

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <unistd.h>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static const std::string dir = [] {
    std::string pattern = "/tmp/dsopt-import-fuzz-XXXXXX";
    if (!mkdtemp(&pattern[0])) std::abort();
    return pattern;
  }();
  mlir::MLIRContext context(mlir::MLIRContext::Threading::DISABLED);
  llvm::StringRef bytes(reinterpret_cast<const char *>(data), size);
  auto module = dsopt::importOnnxBytes(context, bytes, "fuzz.onnx", dir, {});
  if (!module) llvm::consumeError(module.takeError());
  return 0;
}

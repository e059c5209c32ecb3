// libFuzzer target: the ONNX importer from bytes (dsopt::importOnnxBytes:
// parseModelBytes, then the graph importer that builds the ds module, infers
// every value's type and verifies the module), the in-process counterpart
// of test/Fuzz/Inputs/fuzz_import.py. Every input must give a module or an
// llvm::Error; a crash, an assertion, a sanitizer report or a leak is a
// finding. Warnings are formatted (into a null stream), as for `dsopt`.
//
// External data resolves in the model's directory, which holds one file,
// weights.bin (kWeightsBytes of zeros): the seeds (test/Fuzz/Inputs/
// fuzz_seeds.py, from the zoo's models) keep their large float initializers
// there rather than inline, so an input is a graph of a few kilobytes, not
// its weights. Locations outside the directory, through symlinks, past the
// file's end and so on are refused as for any model.
//
// Inputs share an MLIRContext, renewed every kInputsPerContext inputs:
// creating one (registering the ds and func dialects' operations) costs
// about three times an import under the sanitizers. What an import leaves
// in the context is uniqued types and attributes, which do not change what
// a later import does; a reproducer runs alone, in a fresh context. Memory
// an input allocates and drops is still a leak: libFuzzer runs an input
// that ends with more allocations than frees a second time, when its types
// and attributes exist already, and checks for leaks if it still does.
#include "dsopt/Import/OnnxImporter.h"

#include "mlir/IR/MLIRContext.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/raw_ostream.h"

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <fcntl.h>
#include <memory>
#include <string>
#include <unistd.h>

// Must match WEIGHTS_BYTES in test/Fuzz/Inputs/fuzz_seeds.py.
static constexpr off_t kWeightsBytes = 1 << 20;
// Bounds the memory the shared context accumulates over a long campaign.
static constexpr unsigned kInputsPerContext = 10000;

namespace {
/// The model directory, removed when the fuzzer exits normally.
struct ModelDir {
  std::string path = "/tmp/dsopt-import-fuzz-XXXXXX", weights;
  ModelDir() {
    if (!mkdtemp(&path[0]))
      std::abort();
    weights = path + "/weights.bin";
    int fd = open(weights.c_str(), O_CREAT | O_WRONLY | O_TRUNC, 0600);
    if (fd < 0 || ftruncate(fd, kWeightsBytes) != 0 || close(fd) != 0)
      std::abort();
  }
  ~ModelDir() {
    unlink(weights.c_str());
    rmdir(path.c_str());
  }
};
} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static const ModelDir dir;
  static std::unique_ptr<mlir::MLIRContext> context;
  static unsigned inputs = 0;
  if (inputs++ % kInputsPerContext == 0)
    context = std::make_unique<mlir::MLIRContext>(
        mlir::MLIRContext::Threading::DISABLED);
  llvm::StringRef bytes(reinterpret_cast<const char *>(data), size);
  dsopt::OnnxImportOptions options;
  options.warnings = &llvm::nulls();
  auto module = dsopt::importOnnxBytes(*context, bytes, "fuzz.onnx", dir.path,
                                       options);
  if (!module)
    llvm::consumeError(module.takeError());
  return 0;
}

// libFuzzer target: the DeepSpeed config parser (dsopt::parseTrainConfig,
// then resolveBatch and the composition checks dsopt runs on a parsed
// config). Every input must give a config or an llvm::Error; a crash, an
// assertion or a sanitizer report is a finding. Seeds: the test suite's
// config files (test/Config/Inputs, test/Train/Inputs).
#include "dsopt/Config/TrainConfig.h"

#include "llvm/Support/Error.h"

#include <cstddef>
#include <cstdint>
#include <optional>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  llvm::StringRef json(reinterpret_cast<const char *>(data), size);
  llvm::Expected<dsopt::TrainConfig> config = dsopt::parseTrainConfig(json, "fuzz.json");
  if (!config) {
    llvm::consumeError(config.takeError());
    return 0;
  }
  for (std::optional<int64_t> modelBatch : {std::optional<int64_t>(), std::optional<int64_t>(4)}) {
    dsopt::TrainConfig copy = *config;
    llvm::consumeError(dsopt::resolveBatch(copy, modelBatch));
    llvm::consumeError(dsopt::checkOffloadComposition(copy, /*irOnly=*/true));
    llvm::consumeError(dsopt::checkOffloadComposition(copy, /*irOnly=*/false));
    llvm::consumeError(dsopt::checkPipelineSchedule(copy, true));
    (void)dsopt::toJson(copy);
  }
  return 0;
}

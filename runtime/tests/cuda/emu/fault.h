// Deliberate faults of the CUDA emulation, so that a check built on it can
// be shown to fail (scripts/gpu-check.sh --emulate, docs/runtime.md "The
// CUDA emulation"): DSRT_EMU_FAULT names one, read once per process.
//   matmul-scale  every emulated cublasLtMatmul's result times 1.01
//   nccl-drop     every NCCL reduction leaves out the last rank's
//                 contribution (with one rank, the result is zero)
// Any other value aborts naming it.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace dsemu {

inline bool fault(const char *name) {
  static const std::string chosen = [] {
    const char *v = std::getenv("DSRT_EMU_FAULT");
    std::string s = v ? v : "";
    if (!s.empty() && s != "matmul-scale" && s != "nccl-drop") {
      std::fprintf(stderr, "cuda emulation: DSRT_EMU_FAULT='%s' is no fault (matmul-scale, "
                           "nccl-drop)\n", s.c_str());
      std::abort();
    }
    if (!s.empty()) std::fprintf(stderr, "cuda emulation: injecting the fault %s\n", s.c_str());
    return s;
  }();
  return chosen == name;
}

}  // namespace dsemu

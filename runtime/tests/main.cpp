// dsrt_kernel_tests [gtest flags] [--cases DIR]
// (and dsrt_cuda_kernel_test, the same linked with the cuda backend)
//
// Without --cases only the C++ unit tests run; with it, also one test per
// case that make_cases.py wrote into DIR.
#include "kernel_cases.h"

#include "dsrt/backend.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <string>

int main(int argc, char **argv) {
  testing::InitGoogleTest(&argc, argv);
  std::string cases;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--cases" && i + 1 < argc) {
      cases = argv[++i];
    } else if (arg.rfind("--cases=", 0) == 0) {
      cases = arg.substr(8);
    } else {
      std::fprintf(stderr, "usage: %s [gtest flags] [--cases DIR]\nunknown argument: %s\n",
                   argv[0], arg.c_str());
      return 2;
    }
  }
  // The linked backend must be usable (the cuda one needs a GPU): a run
  // without one fails rather than counting its cases as passed.
  try {
    dsrt::backend();
  } catch (const dsrt::Error &e) {
    std::fprintf(stderr, "%s: %s\n", argv[0], e.what());
    return 1;
  }
  if (!cases.empty()) {
    if (dsrt_test::register_kernel_cases(cases) < 0)
      return 1;
  } else {
    std::printf("dsrt_kernel_tests: no --cases DIR given, running the unit tests only\n");
  }
  return RUN_ALL_TESTS();
}

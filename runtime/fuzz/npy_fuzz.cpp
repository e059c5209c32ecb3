// libFuzzer target: the .npy reader (dsrt::read_npy), which reads the
// runners' data files. Every input must end in an array or a dsrt::Error;
// any other exception, a crash or a sanitizer report is a finding.
#include "dsrt/npy.h"
#include "fuzz_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static const std::string path = dsrt_fuzz::work_dir() + "/input.npy";
  dsrt_fuzz::write_file(path, data, size);
  for (bool f64 : {false, true}) {
    dsrt::NpyReadOptions options;
    options.f64_to_f32 = f64;
    try {
      dsrt::NpyArray array = dsrt::read_npy(path, options);
      // What the runners do next with it.
      (void)array.numel();
      (void)array.shape.str();
    } catch (const dsrt::Error &) {
    }
  }
  return 0;
}

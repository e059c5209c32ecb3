// Runs dsrt::LossScaler over a sequence of overflow flags and prints each
// step's scale, for loss_scaler_check.py to compare with DeepSpeed's rule.
//   loss_scaler_trace STATIC POWER WINDOW HYSTERESIS CONSECUTIVE MIN FLAGS
// FLAGS is a string of 0 (clean) and 1 (overflow). Prints "step before after
// skipped" per step; an error prints "error: ..." and exits 1.
#include "dsrt/loss_scaler.h"
#include "dsrt/tensor.h"

#include <cstdio>
#include <cstdlib>
#include <string>

int main(int argc, char **argv) {
  if (argc != 8) {
    std::fprintf(stderr, "usage: %s STATIC POWER WINDOW HYSTERESIS CONSECUTIVE MIN FLAGS\n",
                 argv[0]);
    return 2;
  }
  try {
    dsrt::LossScalerOptions o;
    o.static_scale = std::atof(argv[1]);
    o.initial_scale_power = std::atoi(argv[2]);
    o.window = std::atoll(argv[3]);
    o.hysteresis = std::atoi(argv[4]);
    o.consecutive_hysteresis = std::atoi(argv[5]) != 0;
    o.min_scale = std::atof(argv[6]);
    dsrt::LossScaler scaler(o);
    const std::string flags = argv[7];
    for (size_t i = 0; i < flags.size(); ++i) {
      dsrt::LossScaler::Update u = scaler.update(flags[i] == '1', int64_t(i) + 1);
      std::printf("%zu %.17g %.17g %d\n", i + 1, u.before, u.after, u.skipped ? 1 : 0);
    }
  } catch (const dsrt::Error &e) {
    std::printf("error: %s\n", e.what());
    return 1;
  }
  return 0;
}

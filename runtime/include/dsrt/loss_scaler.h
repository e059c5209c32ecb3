// dsrt: the loss scale of fp16 training, as DeepSpeed's DynamicLossScaler.
//
// A pure state machine: the runner multiplies the loss by scale() in each
// micro step, divides the gradients by it before the optimizer, and after
// the step verdict (a non-finite gradient on any rank of the grid is an
// overflow) calls update(). The rule, DeepSpeed's to the letter
// (deepspeed/runtime/fp16/loss_scaler.py, scale_factor 2):
//
//   overflow:  if hysteresis == 1 (or the configured hysteresis is 1):
//                at the minimum scale -> error (DeepSpeed raises
//                "Current loss scale already at minimum"), else
//                scale = max(scale / 2, min_scale);
//              else hysteresis -= 1;
//              last_overflow_iter = iter; the step is skipped.
//   clean:     with consecutive_hysteresis, hysteresis is refilled;
//              if (iter - last_overflow_iter) % window == 0:
//                hysteresis is refilled (without consecutive_hysteresis)
//                and scale *= 2.
//   iter += 1 either way.
//
// A static scale (static_scale > 0) never changes; an overflow still skips
// the step. The initial scale is 2^initial_scale_power, iter starts at 0 and
// last_overflow_iter at -1, as DeepSpeed's.
#ifndef DSRT_LOSS_SCALER_H
#define DSRT_LOSS_SCALER_H

#include <cstdint>
#include <string>

namespace dsrt {

struct LossScalerOptions {
  double static_scale = 0;  // > 0: a static scale, never changes
  int initial_scale_power = 16;
  int64_t window = 1000;     // loss_scale_window, > 0
  int hysteresis = 2;        // delayed_shift, > 0
  bool consecutive_hysteresis = false;
  double min_scale = 1;      // min_loss_scale, > 0
};

class LossScaler {
public:
  // Throws dsrt::Error naming the option when one is out of range.
  explicit LossScaler(const LossScalerOptions &options);

  double scale() const { return state_.scale; }
  bool is_dynamic() const { return options_.static_scale <= 0; }
  const LossScalerOptions &options() const { return options_; }

  struct Update {
    bool skipped = false;  // the step overflowed: nothing may be applied
    double before = 0, after = 0;  // the scale the step used, the next one
    int hysteresis_before = 0, hysteresis_after = 0;
  };
  // Records one optimizer step's verdict. `step` (1-based, as logged) only
  // names the step in the error thrown when an overflow happens with the
  // scale already at its minimum and no hysteresis left.
  Update update(bool overflow, int64_t step);

  // The whole state, for checkpoints.
  struct State {
    double scale = 0;
    int hysteresis = 0;
    int64_t iter = 0, last_overflow_iter = -1;
  };
  State state() const { return state_; }
  // Throws dsrt::Error when the state cannot belong to these options.
  void restore(const State &state);

  // DeepSpeed's wording for the log: "overflow, skipping step; loss scale
  // 65536 -> 32768" or "... hysteresis 2 -> 1".
  static std::string describe(const Update &update);

private:
  LossScalerOptions options_;
  State state_;
};

}  // namespace dsrt

#endif  // DSRT_LOSS_SCALER_H

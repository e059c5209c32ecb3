// The fp16 loss scale (dsrt/loss_scaler.h).
#include "dsrt/loss_scaler.h"

#include "dsrt/tensor.h"

#include <algorithm>
#include <cmath>
#include <sstream>

namespace dsrt {
namespace {

std::string number(double v) {
  std::ostringstream os;
  os.precision(17);
  os << v;
  return os.str();
}

}  // namespace

LossScaler::LossScaler(const LossScalerOptions &options) : options_(options) {
  if (!(options.static_scale >= 0) || !std::isfinite(options.static_scale))
    throw Error("loss scaler: the static loss scale must be a finite number >= 0, got " +
                number(options.static_scale));
  if (options.window <= 0)
    throw Error("loss scaler: loss_scale_window must be > 0, got " +
                std::to_string(options.window));
  if (options.hysteresis <= 0)
    throw Error("loss scaler: hysteresis must be > 0, got " +
                std::to_string(options.hysteresis));
  if (!(options.min_scale > 0) || !std::isfinite(options.min_scale))
    throw Error("loss scaler: min_loss_scale must be a finite number > 0, got " +
                number(options.min_scale));
  if (options.initial_scale_power < -126 || options.initial_scale_power > 127)
    throw Error("loss scaler: initial_scale_power must lie in [-126, 127], got " +
                std::to_string(options.initial_scale_power));
  state_.scale = options.static_scale > 0 ? options.static_scale
                                          : std::ldexp(1.0, options.initial_scale_power);
  state_.hysteresis = options.hysteresis;
}

LossScaler::Update LossScaler::update(bool overflow, int64_t step) {
  Update u;
  u.skipped = overflow;
  u.before = state_.scale;
  u.hysteresis_before = state_.hysteresis;
  if (is_dynamic()) {
    if (overflow) {
      if (options_.hysteresis == 1 || state_.hysteresis == 1) {
        if (state_.scale == options_.min_scale)
          throw Error("overflow at step " + std::to_string(step) +
                      " with the loss scale already at its minimum " + number(options_.min_scale) +
                      " (fp16.min_loss_scale): the gradients are not finite at any scale; "
                      "Current loss scale already at minimum - cannot decrease scale anymore");
        state_.scale = std::max(state_.scale / 2, options_.min_scale);
      } else {
        state_.hysteresis -= 1;
      }
      state_.last_overflow_iter = state_.iter;
    } else {
      if (options_.consecutive_hysteresis)
        state_.hysteresis = options_.hysteresis;
      if ((state_.iter - state_.last_overflow_iter) % options_.window == 0) {
        if (!options_.consecutive_hysteresis)
          state_.hysteresis = options_.hysteresis;
        state_.scale *= 2;
      }
    }
  }
  state_.iter += 1;
  u.after = state_.scale;
  u.hysteresis_after = state_.hysteresis;
  return u;
}

void LossScaler::restore(const State &state) {
  if (!(state.scale > 0) || !std::isfinite(state.scale))
    throw Error("loss scaler: a saved scale must be a finite number > 0, got " +
                number(state.scale));
  if (!is_dynamic() && state.scale != options_.static_scale)
    throw Error("loss scaler: the saved scale " + number(state.scale) +
                " differs from the static loss scale " + number(options_.static_scale));
  if (is_dynamic() && state.scale < options_.min_scale)
    throw Error("loss scaler: the saved scale " + number(state.scale) +
                " is below min_loss_scale " + number(options_.min_scale));
  if (state.hysteresis < 1 || state.hysteresis > options_.hysteresis)
    throw Error("loss scaler: the saved hysteresis " + std::to_string(state.hysteresis) +
                " is outside [1, " + std::to_string(options_.hysteresis) + "]");
  if (state.iter < 0 || state.last_overflow_iter < -1 || state.last_overflow_iter >= state.iter)
    throw Error("loss scaler: the saved iteration " + std::to_string(state.iter) +
                " and last overflow " + std::to_string(state.last_overflow_iter) +
                " are inconsistent");
  state_ = state;
}

std::string LossScaler::describe(const Update &u) {
  std::string s = u.skipped ? "overflow, skipping step; " : "";
  if (u.before != u.after)
    return s + "loss scale " + number(u.before) + " \u2192 " + number(u.after);
  if (u.skipped && u.hysteresis_before != u.hysteresis_after)
    return s + "loss scale " + number(u.before) + ", hysteresis " +
           std::to_string(u.hysteresis_before) + " \u2192 " + std::to_string(u.hysteresis_after);
  return s + "loss scale " + number(u.after);
}

}  // namespace dsrt

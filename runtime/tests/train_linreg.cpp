// A training program written by hand the way dsopt generates one, for the
// end-to-end test of dsrt::train_main (train_e2e.py): linear regression
// pred = x W + b with a mean-squared-error loss, gradient accumulation over
// micro-batches, global-norm clipping and SGD with momentum (PyTorch's
// torch.optim.SGD(momentum=0.9)), whose velocities are zero-initialized
// states.
//
// Arena (alignment 64), persistent part first:
//   W [64, 8] f32 @0 | b [8] @2048 | gW @2112 | gb @4160 | vW @4224 | vb @6272
//   persistent_bytes = 6336
// micro_step:     x [4, 64] @6336 | y [4, 8] @7360 | pred @7488 | loss @7616
//                 | dW (x^T d) @7680 -> 9728 bytes
// optimizer_step: lr @6336 | step @6400 | grad_norm @6464 -> 6528 bytes
#include "dsrt/program.h"

#include <cmath>

#ifndef DSRT_LINREG_MODEL
#error "DSRT_LINREG_MODEL must name the source model"
#endif

namespace {

constexpr int64_t kBatch = 4, kIn = 64, kOut = 8;
constexpr int64_t kAccumulation = 2;
constexpr float kMomentum = 0.9f, kClip = 1.0f;

constexpr int64_t kW = 0, kB = 2048, kGW = 2112, kGB = 4160, kVW = 4224, kVB = 6272;
constexpr int64_t kPersistent = 6336;
constexpr int64_t kX = 6336, kY = 7360, kPred = 7488, kLoss = 7616, kDW = 7680;
constexpr int64_t kMicroArena = 9728;
constexpr int64_t kLr = 6336, kStep = 6400, kNorm = 6464, kOptimizerArena = 6528;

// Initial weights: W[i][j] = 0.05 * sin(i * 8 + j), b[j] = 0.1 * j - 0.3
// (train_e2e.py builds the same values).
float initial_w[kIn * kOut];
float initial_b[kOut];

void fill_initial() {
  for (int64_t i = 0; i < kIn * kOut; ++i)
    initial_w[i] = static_cast<float>(0.05 * std::sin(static_cast<double>(i)));
  for (int64_t j = 0; j < kOut; ++j) initial_b[j] = static_cast<float>(0.1 * j - 0.3);
}

void describe(dsrt::ProgramInfo &info) {
  using dsrt::DType;
  fill_initial();
  dsrt::set_model(info, DSRT_LINREG_MODEL);
  dsrt::set_memory_plan(info, kMicroArena, kPersistent, kMicroArena, 64);
  dsrt::add_param_data(info, "W", dsrt::view_static(initial_w, DType::F32, {kIn, kOut}), kW,
                       true);
  dsrt::add_param_data(info, "b", dsrt::view_static(initial_b, DType::F32, {kOut}), kB, true);
  dsrt::add_state(info, "W.grad", DType::F32, {kIn, kOut}, kGW, dsrt::ValueRole::Accumulator, "W");
  dsrt::add_state(info, "b.grad", DType::F32, {kOut}, kGB, dsrt::ValueRole::Accumulator, "b");
  dsrt::add_state(info, "W.momentum", DType::F32, {kIn, kOut}, kVW,
                  dsrt::ValueRole::OptimizerState, "W");
  dsrt::add_state(info, "b.momentum", DType::F32, {kOut}, kVB,
                  dsrt::ValueRole::OptimizerState, "b");
  dsrt::set_training(info, "SGD", 0.05, kClip, kAccumulation, kBatch, 3);
  dsrt::set_schedule(info, "WarmupDecayLR", 0.01, 0.05, 3, 8, true, 0, 1e-4);

  dsrt::begin_function(info, "micro_step", kMicroArena, kMicroArena);
  dsrt::add_input(info, "x", DType::F32, {kBatch, kIn}, kX);
  dsrt::add_input(info, "y", DType::F32, {kBatch, kOut}, kY);
  dsrt::add_output(info, "loss", DType::F32, {});
  dsrt::add_op(info, "ds.matmul", "pred", 2 * kBatch * kIn * kOut, 0);
  dsrt::add_op(info, "ds.add", "pred_bias", kBatch * kOut, 0);
  dsrt::add_op(info, "ds.sub", "diff", kBatch * kOut, 0);
  dsrt::add_op(info, "ds.fused", "loss", 2 * kBatch * kOut, 0);
  dsrt::add_op(info, "ds.matmul", "grad_W", 2 * kBatch * kIn * kOut, 0);
  dsrt::add_op(info, "ds.fused", "accumulate", kIn * kOut + kOut, 0);

  dsrt::begin_function(info, "optimizer_step", kOptimizerArena, kOptimizerArena);
  dsrt::add_input(info, "lr", DType::F32, {}, kLr);
  dsrt::add_input(info, "step", DType::I64, {}, kStep);
  dsrt::add_output(info, "grad_norm", DType::F32, {});
  dsrt::add_op(info, "ds.fused", "clip_sgd_momentum", 6 * (kIn * kOut + kOut), 0);
}

void micro_step(dsrt::Program &p) {
  using dsrt::DType;
  dsrt::Stream &s = dsrt::stream(p);
  uint8_t *a = dsrt::arena(p);
  dsrt::Tensor W = dsrt::view(a, kW, DType::F32, {kIn, kOut});
  dsrt::Tensor b = dsrt::view(a, kB, DType::F32, {kOut});
  dsrt::Tensor x = dsrt::view(a, kX, DType::F32, {kBatch, kIn});
  dsrt::Tensor y = dsrt::view(a, kY, DType::F32, {kBatch, kOut});
  dsrt::Tensor pred = dsrt::view(a, kPred, DType::F32, {kBatch, kOut});
  dsrt::Tensor loss = dsrt::view(a, kLoss, DType::F32, {});
  dsrt::Tensor dW = dsrt::view(a, kDW, DType::F32, {kIn, kOut});

  dsrt::begin_op(p, 0);
  dsrt::acquire(p, kPred, 128);
  dsrt::matmul(s, x, W, pred, false, false, {});
  dsrt::end_op(p, 0);
  dsrt::begin_op(p, 1);
  dsrt::binary(s, dsrt::BinaryOp::Add, pred, b, pred);
  dsrt::end_op(p, 1);
  dsrt::begin_op(p, 2);
  dsrt::binary(s, dsrt::BinaryOp::Sub, pred, y, pred);  // pred now holds d = pred - y
  dsrt::release(p, kY);
  dsrt::end_op(p, 2);

  dsrt::begin_op(p, 3);
  dsrt::acquire(p, kLoss, 64);
  const float *d = dsrt::elements<float>(pred);
  double sum = 0;
  for (int64_t i = 0; i < kBatch * kOut; ++i) sum += static_cast<double>(d[i]) * d[i];
  *dsrt::elements<float>(loss) = static_cast<float>(sum / (kBatch * kOut));
  dsrt::end_op(p, 3);

  // d(loss / accumulation_steps) / d pred = 2 d / (batch * out) / accumulation_steps.
  dsrt::begin_op(p, 4);
  dsrt::acquire(p, kDW, 2048);
  dsrt::matmul(s, x, pred, dW, true, false, {});
  dsrt::release(p, kX);
  dsrt::end_op(p, 4);
  dsrt::begin_op(p, 5);
  const float scale = 2.0f / (kBatch * kOut) / kAccumulation;
  float *gW = reinterpret_cast<float *>(a + kGW);
  float *gb = reinterpret_cast<float *>(a + kGB);
  const float *dw = dsrt::elements<float>(dW);
  for (int64_t i = 0; i < kIn * kOut; ++i) gW[i] += scale * dw[i];
  for (int64_t j = 0; j < kOut; ++j) {
    float column = 0;
    for (int64_t r = 0; r < kBatch; ++r) column += d[r * kOut + j];
    gb[j] += scale * column;
  }
  dsrt::release(p, kDW);
  dsrt::release(p, kPred);
  dsrt::end_op(p, 5);
  dsrt::set_output(p, 0, loss);
}

int64_t optimizer_steps_run = 0;

void optimizer_step(dsrt::Program &p) {
  using dsrt::DType;
  uint8_t *a = dsrt::arena(p);
  const float lr = *reinterpret_cast<const float *>(a + kLr);
  const int64_t step = *reinterpret_cast<const int64_t *>(a + kStep);
  // The runner numbers optimizer steps from 1.
  if (step != ++optimizer_steps_run)
    throw dsrt::Error("optimizer_step: step input is " + std::to_string(step) + ", expected " +
                      std::to_string(optimizer_steps_run));
  dsrt::begin_op(p, 0);
  dsrt::acquire(p, kNorm, 64);
  float *W = reinterpret_cast<float *>(a + kW), *b = reinterpret_cast<float *>(a + kB);
  float *gW = reinterpret_cast<float *>(a + kGW), *gb = reinterpret_cast<float *>(a + kGB);
  float *vW = reinterpret_cast<float *>(a + kVW), *vb = reinterpret_cast<float *>(a + kVB);
  double squares = 0;
  for (int64_t i = 0; i < kIn * kOut; ++i) squares += static_cast<double>(gW[i]) * gW[i];
  for (int64_t j = 0; j < kOut; ++j) squares += static_cast<double>(gb[j]) * gb[j];
  const float norm = static_cast<float>(std::sqrt(squares));
  // torch.nn.utils.clip_grad_norm_: scale by max_norm / (norm + 1e-6), at most 1.
  const float clip = std::fmin(1.0f, kClip / (norm + 1e-6f));
  auto update = [&](float *param, float *grad, float *velocity, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
      velocity[i] = kMomentum * velocity[i] + grad[i] * clip;
      param[i] -= lr * velocity[i];
      grad[i] = 0;
    }
  };
  update(W, gW, vW, kIn * kOut);
  update(b, gb, vb, kOut);
  *reinterpret_cast<float *>(a + kNorm) = norm;
  dsrt::end_op(p, 0);
  dsrt::set_output(p, 0, dsrt::view(a, kNorm, DType::F32, {}));
}

}  // namespace

int main(int argc, char **argv) {
  return dsrt::train_main(argc, argv, describe, micro_step, optimizer_step);
}

// The training runner: DeepSpeed's learning-rate schedules, releasing a
// function's slots, and train_main driving a tiny in-process program (data
// layout, batch cycling, the dropout counter, log output, plan checks,
// errors). train_e2e.py covers whole runs against PyTorch and --save-onnx,
// onnx_save_test.cpp the protobuf rewriting.
#include "dsrt/npy.h"
#include "dsrt/program.h"

#include "test_util.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

namespace {

namespace fs = std::filesystem;
using dsrt::DType;
using dsrt::TrainInfo;

//===--- scheduled_lr ---------------------------------------------------------===//
// Expected values worked out by hand from deepspeed/runtime/lr_schedules.py:
// step s runs with last_batch_iteration it = s - 2.

TrainInfo schedule(const char *kind, int64_t warmup, int64_t total, bool linear) {
  TrainInfo t;
  t.schedule = kind;
  t.lr = 0.01;
  t.warmup_min_lr = 1e-4;
  t.warmup_max_lr = 1e-3;
  t.warmup_num_steps = warmup;
  t.total_num_steps = total;
  t.warmup_linear = linear;
  t.warmup_min_ratio = 0.1;
  t.cos_min_ratio = 1e-4;
  return t;
}

TEST(ScheduledLr, Constant) {
  TrainInfo t;
  t.lr = 3e-4;
  EXPECT_EQ(dsrt::scheduled_lr(t, 1), 3e-4);
  EXPECT_EQ(dsrt::scheduled_lr(t, 1000000), 3e-4);
}

TEST(ScheduledLr, WarmupLrLog) {
  TrainInfo t = schedule("WarmupLR", 10, 0, false);
  EXPECT_DOUBLE_EQ(dsrt::scheduled_lr(t, 1), 1e-4);  // it = -1: the constructor's min lr
  EXPECT_DOUBLE_EQ(dsrt::scheduled_lr(t, 2), 1e-4);  // log(1) / log(10) = 0
  // it = 1: log(2) / log(10) = 0.30102999566
  EXPECT_NEAR(dsrt::scheduled_lr(t, 3), 1e-4 + 9e-4 * 0.30102999566398120, 1e-15);
  // it = 9: log(10) / log(10) = 1, the last warmup step
  EXPECT_NEAR(dsrt::scheduled_lr(t, 11), 1e-3, 1e-15);
  EXPECT_DOUBLE_EQ(dsrt::scheduled_lr(t, 12), 1e-3);  // it = 10: after warmup
  EXPECT_DOUBLE_EQ(dsrt::scheduled_lr(t, 5000), 1e-3);
}

TEST(ScheduledLr, WarmupLrLinear) {
  TrainInfo t = schedule("WarmupLR", 4, 0, true);
  EXPECT_DOUBLE_EQ(dsrt::scheduled_lr(t, 1), 1e-4);
  EXPECT_DOUBLE_EQ(dsrt::scheduled_lr(t, 2), 1e-4);                // 0 / 4
  EXPECT_NEAR(dsrt::scheduled_lr(t, 4), 1e-4 + 9e-4 * 0.5, 1e-15);  // it = 2: 2 / 4
  EXPECT_NEAR(dsrt::scheduled_lr(t, 5), 1e-4 + 9e-4 * 0.75, 1e-15);
  EXPECT_DOUBLE_EQ(dsrt::scheduled_lr(t, 6), 1e-3);  // it = 4 = warmup: gamma 1
}

TEST(ScheduledLr, WarmupOfOneStepIsTwo) {
  // DeepSpeed takes max(2, warmup_num_steps): log warmup over 2 steps.
  TrainInfo t = schedule("WarmupLR", 1, 0, false);
  EXPECT_DOUBLE_EQ(dsrt::scheduled_lr(t, 2), 1e-4);  // it = 0
  EXPECT_DOUBLE_EQ(dsrt::scheduled_lr(t, 3), 1e-3);  // it = 1: log 2 / log 2
  t.warmup_linear = true;
  EXPECT_NEAR(dsrt::scheduled_lr(t, 3), 1e-4 + 9e-4 * 0.5, 1e-15);  // it = 1: 1 / 2
}

TEST(ScheduledLr, WarmupDecayLr) {
  TrainInfo t = schedule("WarmupDecayLR", 4, 10, true);
  EXPECT_DOUBLE_EQ(dsrt::scheduled_lr(t, 1), 1e-4);
  EXPECT_NEAR(dsrt::scheduled_lr(t, 5), 1e-4 + 9e-4 * 0.75, 1e-15);  // it = 3, warmup
  // it = 4: (10 - 4) / max(1, 10 - 4) = 1
  EXPECT_DOUBLE_EQ(dsrt::scheduled_lr(t, 6), 1e-3);
  EXPECT_NEAR(dsrt::scheduled_lr(t, 9), 1e-4 + 9e-4 * 0.5, 1e-15);  // it = 7: 3 / 6
  EXPECT_DOUBLE_EQ(dsrt::scheduled_lr(t, 12), 1e-4);                // it = 10 = total: 0
  EXPECT_DOUBLE_EQ(dsrt::scheduled_lr(t, 40), 1e-4);                // beyond total: max(0, .)
  t.warmup_linear = false;
  EXPECT_NEAR(dsrt::scheduled_lr(t, 3), 1e-4 + 9e-4 * 0.5, 1e-15);  // it = 1: log 2 / log 4
  // total < warmup: after warmup the denominator is max(1, negative) = 1
  TrainInfo short_run = schedule("WarmupDecayLR", 4, 2, true);
  EXPECT_DOUBLE_EQ(dsrt::scheduled_lr(short_run, 6), 1e-4);  // it = 4: max(0, 2 - 4)
}

TEST(ScheduledLr, WarmupCosineLr) {
  TrainInfo t = schedule("WarmupCosineLR", 4, 12, true);
  EXPECT_EQ(dsrt::scheduled_lr(t, 1), 0.0);                // it = -1: DeepSpeed's 0.0
  EXPECT_NEAR(dsrt::scheduled_lr(t, 2), 0.01 * 0.1, 1e-15);  // warmup_min_ratio
  EXPECT_NEAR(dsrt::scheduled_lr(t, 4), 0.01 * (0.1 + 0.5 * 0.9), 1e-15);   // it = 2
  EXPECT_NEAR(dsrt::scheduled_lr(t, 5), 0.01 * (0.1 + 0.75 * 0.9), 1e-15);  // it = 3
  // it = 4: real step 1 of 8: (1 + cos(pi / 8)) / 2 = 0.96193976625564337
  EXPECT_NEAR(dsrt::scheduled_lr(t, 6), 0.01 * (1e-4 + 0.9999 * 0.96193976625564337), 1e-15);
  // it = 8: real step 5: (1 + cos(5 pi / 8)) / 2 = 0.30865828381745514
  EXPECT_NEAR(dsrt::scheduled_lr(t, 10), 0.01 * (1e-4 + 0.9999 * 0.30865828381745514), 1e-15);
  // it = 11: real step 8 = real total: the cosine's end, cos_min_ratio
  EXPECT_NEAR(dsrt::scheduled_lr(t, 13), 0.01 * 1e-4, 1e-15);
  // Beyond total_num_steps DeepSpeed's cosine rises again: it = 19, real
  // step 16 of 8, (1 + cos(2 pi)) / 2 = 1.
  EXPECT_NEAR(dsrt::scheduled_lr(t, 21), 0.01, 1e-15);
  t.warmup_linear = false;
  EXPECT_NEAR(dsrt::scheduled_lr(t, 3), 0.01 * (0.1 + 0.5 * 0.9), 1e-15);  // log 2 / log 4
}

TEST(ScheduledLr, UnknownScheduleThrows) {
  TrainInfo t = schedule("OneCycle", 4, 12, true);
  EXPECT_DSRT_ERROR(dsrt::scheduled_lr(t, 1), "OneCycle", "WarmupCosineLR");
}

//===--- MemoryMonitor::release_from -------------------------------------------===//

TEST(MemoryMonitor, ReleaseFrom) {
  dsrt::MemoryMonitor m;
  m.acquire(0, 64);
  m.acquire(64, 64);
  m.acquire(128, 64);
  m.acquire(256, 128);
  EXPECT_EQ(m.live_bytes(), 320);
  m.release_from(128);
  EXPECT_EQ(m.live_bytes(), 128);
  EXPECT_EQ(m.high_water_mark(), 384);
  EXPECT_EQ(m.peak_live_bytes(), 320);
  m.acquire(128, 256);  // free again
  EXPECT_DSRT_ERROR(m.acquire(64, 64), "overlaps");  // still live
  m.release_from(100);  // a boundary inside no slot: the slot at 128 goes
  EXPECT_EQ(m.live_bytes(), 128);
  m.release_from(1000);  // nothing there
  EXPECT_EQ(m.live_bytes(), 128);
  m.release_from(0);
  EXPECT_EQ(m.live_bytes(), 0);
  m.acquire(0, 64);
}

TEST(MemoryMonitor, ReleaseRangeKeepsWhatLiesAbove) {
  // A pipeline stage's transient slots go; the pools above them stay.
  dsrt::MemoryMonitor m;
  m.acquire(0, 64);      // persistent
  m.acquire(64, 64);     // transient
  m.acquire(192, 64);    // transient
  m.acquire(256, 128);   // pipeline buffer
  m.release_range(64, 256);
  EXPECT_EQ(m.live_bytes(), 192);
  EXPECT_DSRT_ERROR(m.acquire(256, 64), "overlaps");
  m.acquire(64, 192);    // the transient part is free
  m.release_range(300, 1000);  // starts inside the buffer at 256: it stays
  EXPECT_EQ(m.live_bytes(), 384);
  m.release_range(256, 257);
  EXPECT_EQ(m.live_bytes(), 256);
}

//===--- describe: functions and states ----------------------------------------===//

// The description says what each value is; nothing is read from names.
TEST(Describe, ValuesCarryTheirRoles) {
  dsrt::ProgramInfo info;
  static float w[1] = {1.0f};
  dsrt::add_param_data(info, "w", dsrt::view_static(w, DType::F32, {1}), 0, true);
  dsrt::add_state(info, "grad:w", DType::F32, {1}, 64, dsrt::ValueRole::Accumulator, "w");
  dsrt::add_state(info, "exp_avg:w", DType::F32, {1}, 128, dsrt::ValueRole::OptimizerState, "w");
  // A state named like another's accumulator is still what its role says.
  dsrt::add_state(info, "grad:v", DType::F32, {1}, 192, dsrt::ValueRole::OptimizerState, "v");
  dsrt::begin_function(info, "forward_0", 512, 448);
  dsrt::add_input(info, "x", DType::F32, {2}, 256);
  dsrt::add_input(info, "h1", DType::F32, {2}, -1, dsrt::ValueRole::Recv);
  dsrt::add_output(info, "h2", DType::F32, {2}, dsrt::ValueRole::Send);
  dsrt::add_output(info, "h1", DType::F32, {2}, dsrt::ValueRole::Stash);
  dsrt::add_output(info, "loss", DType::F32, {});
  EXPECT_EQ(info.params.at(0).role, dsrt::ValueRole::Param);
  EXPECT_EQ(info.states.at(0).role, dsrt::ValueRole::Accumulator);
  EXPECT_EQ(info.states.at(1).role, dsrt::ValueRole::OptimizerState);
  EXPECT_EQ(info.states.at(1).param, "w");
  const dsrt::FunctionInfo &f = info.functions.at(0);
  EXPECT_EQ(f.inputs.at(0).role, dsrt::ValueRole::Input);
  EXPECT_EQ(f.inputs.at(1).role, dsrt::ValueRole::Recv);
  EXPECT_TRUE(f.inputs.at(1).pipeline_bound());
  EXPECT_FALSE(f.inputs.at(0).pipeline_bound());
  EXPECT_EQ(f.outputs.at(0).role, dsrt::ValueRole::Send);
  EXPECT_EQ(f.outputs.at(1).role, dsrt::ValueRole::Stash);
  EXPECT_EQ(f.outputs.at(2).role, dsrt::ValueRole::Output);
  EXPECT_EQ(dsrt::find_accumulator(info, "w", "test"), 0);
  EXPECT_THROW(dsrt::find_accumulator(info, "v", "test"), dsrt::Error);
}

TEST(Describe, RefusesAValueInARoleItCannotHave) {
  dsrt::ProgramInfo info;
  dsrt::begin_function(info, "forward_0", 512, 448);
  EXPECT_THROW(dsrt::add_input(info, "h", DType::F32, {2}, -1, dsrt::ValueRole::Send),
               dsrt::Error);
  EXPECT_THROW(dsrt::add_output(info, "h", DType::F32, {2}, dsrt::ValueRole::Recv), dsrt::Error);
  EXPECT_THROW(
      dsrt::add_state(info, "grad:w", DType::F32, {1}, 64, dsrt::ValueRole::Param, "w"),
      dsrt::Error);
}

TEST(Describe, FunctionsCollectTheirOwnValues) {
  dsrt::ProgramInfo info;
  dsrt::add_input(info, "top", DType::F32, {2}, 0);
  dsrt::add_output(info, "top_out", DType::F32, {2});
  EXPECT_FALSE(info.is_training());
  dsrt::add_state(info, "m", DType::F32, {4}, 64, dsrt::ValueRole::OptimizerState, "w");
  dsrt::begin_function(info, "micro_step", 512, 448);
  dsrt::add_input(info, "x", DType::F32, {2}, 128);
  dsrt::add_output(info, "loss", DType::F32, {});
  dsrt::add_op(info, "ds.matmul", "n0", 10, 20);
  dsrt::begin_function(info, "optimizer_step", 256, 200);
  dsrt::add_input(info, "lr", DType::F32, {}, 128);
  dsrt::set_training(info, "Adam", 2e-3, 1.0, 4, 8, 10);
  dsrt::set_schedule(info, "WarmupCosineLR", 0, 1e-3, 100, 1000, true, 0.01, 0.001);
  EXPECT_TRUE(info.is_training());
  ASSERT_EQ(info.inputs.size(), 1u);
  ASSERT_EQ(info.outputs.size(), 1u);
  ASSERT_EQ(info.states.size(), 1u);
  ASSERT_EQ(info.functions.size(), 2u);
  EXPECT_EQ(info.functions[0].name, "micro_step");
  EXPECT_EQ(info.functions[0].arena_bytes, 512);
  EXPECT_EQ(info.functions[0].peak_live_bytes, 448);
  EXPECT_EQ(info.functions[0].inputs.at(0).name, "x");
  EXPECT_EQ(info.functions[0].outputs.at(0).name, "loss");
  EXPECT_EQ(info.functions[0].ops.size(), 1u);
  EXPECT_EQ(info.functions[1].inputs.at(0).name, "lr");
  EXPECT_TRUE(info.ops.empty());
  EXPECT_EQ(info.train.optimizer, "Adam");
  EXPECT_EQ(info.train.accumulation_steps, 4);
  EXPECT_EQ(info.train.micro_batch, 8);
  EXPECT_EQ(info.train.steps_per_print, 10);
  EXPECT_EQ(info.train.gradient_clipping, 1.0);
  EXPECT_EQ(info.train.schedule, "WarmupCosineLR");
  EXPECT_EQ(info.train.total_num_steps, 1000);
  EXPECT_TRUE(info.train.warmup_linear);
  EXPECT_EQ(info.train.warmup_min_ratio, 0.01);
  EXPECT_EQ(info.train.cos_min_ratio, 0.001);
}

//===--- train_main on a tiny program -----------------------------------------===//
// w [1] @0 (param), acc [1] @64 (state); persistent 128.
// micro_step: x f32 [2] @128, k i64 [] @192, loss @256 -> 320 bytes;
//   loss = w * (x0 + x1) + k, acc += x0 + x1.
// optimizer_step: lr @128, step @192, grad_norm @256 -> 320 bytes;
//   grad_norm = acc, w -= lr * acc, acc = 0.
namespace tiny {

float w0[1] = {2.0f};
int64_t arena_bytes = 320;
const char *lr_name = "lr";
const char *schedule_kind = "Constant";
std::vector<uint64_t> counters;
std::vector<int64_t> steps;
std::vector<float> weights;  // w seen by each optimizer step, before its update

void reset() {
  arena_bytes = 320;
  lr_name = "lr";
  schedule_kind = "Constant";
  counters.clear();
  steps.clear();
  weights.clear();
}

void describe(dsrt::ProgramInfo &info) {
  dsrt::set_memory_plan(info, arena_bytes, 128, 320, 64);
  dsrt::add_param_data(info, "w", dsrt::view_static(w0, DType::F32, {1}), 0, true);
  dsrt::add_state(info, "acc", DType::F32, {1}, 64, dsrt::ValueRole::Accumulator, "w");
  dsrt::set_training(info, "SGD", 0.5, 0, 2, 2, 2);
  dsrt::set_schedule(info, schedule_kind, 0, 1e-3, 10, 20, false, 0, 1e-4);
  dsrt::begin_function(info, "micro_step", 320, 320);
  dsrt::add_input(info, "x", DType::F32, {2}, 128);
  dsrt::add_input(info, "k", DType::I64, {}, 192);
  dsrt::add_output(info, "loss", DType::F32, {});
  dsrt::begin_function(info, "optimizer_step", 320, 320);
  dsrt::add_input(info, lr_name, DType::F32, {}, 128);
  dsrt::add_input(info, "step", DType::I64, {}, 192);
  dsrt::add_output(info, "grad_norm", DType::F32, {});
}

void micro_step(dsrt::Program &p) {
  counters.push_back(dsrt::rng_counter());
  uint8_t *a = dsrt::arena(p);
  float *w = reinterpret_cast<float *>(a), *acc = reinterpret_cast<float *>(a + 64);
  const float *x = reinterpret_cast<const float *>(a + 128);
  int64_t k = *reinterpret_cast<const int64_t *>(a + 192);
  dsrt::acquire(p, 256, 64);
  *reinterpret_cast<float *>(a + 256) = w[0] * (x[0] + x[1]) + static_cast<float>(k);
  acc[0] += x[0] + x[1];
  dsrt::set_output(p, 0, dsrt::view(a, 256, DType::F32, {}));
}

void optimizer_step(dsrt::Program &p) {
  uint8_t *a = dsrt::arena(p);
  float *w = reinterpret_cast<float *>(a), *acc = reinterpret_cast<float *>(a + 64);
  float lr = *reinterpret_cast<const float *>(a + 128);
  steps.push_back(*reinterpret_cast<const int64_t *>(a + 192));
  weights.push_back(w[0]);
  dsrt::acquire(p, 256, 64);
  *reinterpret_cast<float *>(a + 256) = acc[0];
  w[0] -= lr * acc[0];
  acc[0] = 0;
  dsrt::set_output(p, 0, dsrt::view(a, 256, DType::F32, {}));
}

}  // namespace tiny

class TrainMain : public testing::Test {
protected:
  void SetUp() override {
    tiny::reset();
    dir_ = fs::temp_directory_path() / ("dsrt_train_test_" + std::to_string(getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "data");
    // x: 3 batches of 2 micro-batches of [2]; k: one value per batch.
    dsrt_test::Owned x = dsrt_test::Owned::of(DType::F32, {3, 4}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12});
    dsrt_test::Owned k = dsrt_test::Owned::of(DType::I64, {3}, {100, 200, 300});
    dsrt::write_npy(path("data/x.npy"), x);
    dsrt::write_npy(path("data/k.npy"), k);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string &name) const { return (dir_ / name).string(); }

  // Runs train_main with the given flags after `train`; returns the exit
  // status and keeps what it printed.
  int train(std::vector<std::string> args) {
    std::vector<std::string> all = {"train"};
    all.insert(all.end(), args.begin(), args.end());
    std::vector<char *> argv;
    for (std::string &arg : all) argv.push_back(&arg[0]);
    testing::internal::CaptureStdout();
    testing::internal::CaptureStderr();
    int status = dsrt::train_main(static_cast<int>(argv.size()), argv.data(), tiny::describe,
                                  tiny::micro_step, tiny::optimizer_step);
    out_ = testing::internal::GetCapturedStdout();
    err_ = testing::internal::GetCapturedStderr();
    return status;
  }

  fs::path dir_;
  std::string out_, err_;
};

TEST_F(TrainMain, RunsMicroStepsOnBatchesInTurn) {
  ASSERT_EQ(train({"--data", path("data"), "--steps", "4", "--seed", "7", "--log-json",
                   path("log.jsonl")}),
            0)
      << err_;
  // The counter is (seed << 32) + micro steps run before.
  std::vector<uint64_t> expected;
  for (uint64_t i = 0; i < 8; ++i) expected.push_back((uint64_t(7) << 32) + i);
  EXPECT_EQ(tiny::counters, expected);
  EXPECT_EQ(tiny::steps, (std::vector<int64_t>{1, 2, 3, 4}));
  // acc of batch 0 = (1 + 2) + (3 + 4) = 10: w = 2 - 0.5 * 10 = -3, then
  // batch 1 (26): -3 - 13 = -16, batch 2 (42): -16 - 21 = -37.
  EXPECT_EQ(tiny::weights, (std::vector<float>{2, -3, -16, -37}));

  std::ifstream log(path("log.jsonl"));
  std::vector<std::string> lines;
  for (std::string line; std::getline(log, line);) lines.push_back(line);
  ASSERT_EQ(lines.size(), 4u);
  // Step 1: micro losses 2 * 3 + 100 and 2 * 7 + 100, mean 110.
  EXPECT_NE(lines[0].find("\"step\": 1, \"loss\": 110, \"lr\": 0.5, \"grad_norm\": 10,"),
            std::string::npos)
      << lines[0];
  // Step 4 cycles back to batch 0 with w = -37: (-37 * 3 + 100 - 37 * 7 + 100) / 2.
  EXPECT_NE(lines[3].find("\"step\": 4, \"loss\": -85, "), std::string::npos) << lines[3];
  EXPECT_NE(lines[3].find("\"arena_peak_bytes\": 320, \"arena_planned_bytes\": 320, "
                          "\"memory_spaces\": {\"device\": {\"peak_bytes\": 320, "
                          "\"planned_bytes\": 320}, \"host\": {\"peak_bytes\": 0, "
                          "\"planned_bytes\": 0}, \"file\": {\"peak_bytes\": 0, "
                          "\"planned_bytes\": 0}}}"),
            std::string::npos)
      << lines[3];
  // steps_per_print = 2: steps 2 and 4.
  EXPECT_EQ(out_.find("step 1/4"), std::string::npos) << out_;
  EXPECT_NE(out_.find("step 2/4 | loss "), std::string::npos) << out_;
  EXPECT_NE(out_.find("step 4/4 | loss -85.000000 | lr 5.000000e-01 | grad_norm 10.0000 | "),
            std::string::npos)
      << out_;
  EXPECT_NE(err_.find("arena: planned 320 bytes, measured high-water mark 320 bytes"),
            std::string::npos)
      << err_;
}

TEST_F(TrainMain, PrintsTheLastStepAndNothingWhenQuiet) {
  ASSERT_EQ(train({"--data", path("data"), "--steps", "3"}), 0) << err_;
  EXPECT_NE(out_.find("step 2/3"), std::string::npos) << out_;
  EXPECT_NE(out_.find("step 3/3"), std::string::npos) << out_;
  ASSERT_EQ(train({"--data", path("data"), "--steps", "3", "--quiet"}), 0) << err_;
  EXPECT_EQ(out_, "");
  EXPECT_EQ(err_, "");
}

TEST_F(TrainMain, SchedulesTheLr) {
  tiny::schedule_kind = "WarmupLR";  // log warmup from 0 to 1e-3 over 10 steps
  ASSERT_EQ(train({"--data", path("data"), "--steps", "3", "--log-json", path("log.jsonl"),
                   "--quiet"}),
            0)
      << err_;
  std::ifstream log(path("log.jsonl"));
  std::string first, second, third;
  std::getline(log, first);
  std::getline(log, second);
  std::getline(log, third);
  EXPECT_NE(first.find("\"lr\": 0,"), std::string::npos) << first;
  EXPECT_NE(second.find("\"lr\": 0,"), std::string::npos) << second;
  // log(2) / log(10) * 1e-3, at %.9g
  EXPECT_NE(third.find("\"lr\": 0.000301029996,"), std::string::npos) << third;
}

TEST_F(TrainMain, ArenaMismatchIsAnError) {
  tiny::arena_bytes = 384;  // the functions never reach the last 64 bytes
  EXPECT_EQ(train({"--data", path("data"), "--steps", "2"}), 1);
  EXPECT_NE(err_.find("high-water mark is 320 bytes but the plan is 384 bytes"),
            std::string::npos)
      << err_;
  EXPECT_EQ(tiny::steps.size(), 1u);  // found after the first step
}

TEST_F(TrainMain, OptimizerInputsAreFoundByName) {
  tiny::lr_name = "learning_rate";
  EXPECT_EQ(train({"--data", path("data"), "--steps", "1"}), 1);
  EXPECT_NE(err_.find("optimizer_step input 'lr' is missing (it has 'learning_rate', 'step')"),
            std::string::npos)
      << err_;
  EXPECT_TRUE(tiny::counters.empty());
}

TEST_F(TrainMain, RankZeroInputsHoldOneValuePerBatch) {
  dsrt_test::Owned k = dsrt_test::Owned::of(DType::I64, {3, 2}, {1, 2, 3, 4, 5, 6});
  dsrt::write_npy(path("data/k.npy"), k);
  EXPECT_EQ(train({"--data", path("data"), "--steps", "1"}), 1);
  EXPECT_NE(err_.find("input 'k': '" + path("data/k.npy") +
                      "' holds i64 [3, 2], expected i64 [n] (one value per batch)"),
            std::string::npos)
      << err_;
}

TEST_F(TrainMain, BadFlags) {
  EXPECT_EQ(train({"--data", path("data"), "--steps", "1.5"}), 1);
  EXPECT_NE(err_.find("--steps expects a positive integer, got '1.5'"), std::string::npos);
  EXPECT_EQ(train({"--data", path("data"), "--steps", "99999999999999999999999"}), 1);
  EXPECT_NE(err_.find("--steps expects a positive integer"), std::string::npos);
  EXPECT_EQ(train({"--data", path("data"), "--steps", "1", "--threads", "0"}), 1);
  EXPECT_NE(err_.find("--threads expects a positive integer, got '0'"), std::string::npos);
  EXPECT_EQ(train({"--data", path("data"), "--steps", "1", "--seed", "4294967296"}), 1);
  EXPECT_NE(err_.find("--seed expects an integer in [0, 2^32)"), std::string::npos);
  EXPECT_EQ(train({"--data", path("data"), "--steps", "1", "--log-json",
                   path("no/such/dir/log.jsonl")}),
            1);
  EXPECT_NE(err_.find("--log-json '" + path("no/such/dir/log.jsonl") + "': directory '" +
                      path("no/such/dir") + "' does not exist"),
            std::string::npos)
      << err_;
  // Outputs are refused before the first step: a directory, and a FIFO
  // (which would block the run when opened).
  EXPECT_EQ(train({"--data", path("data"), "--steps", "1", "--save-onnx", path("data")}), 1);
  EXPECT_NE(err_.find("--save-onnx '" + path("data") + "' is a directory; it must name a file"),
            std::string::npos)
      << err_;
  const std::string fifo = path("log.fifo");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_EQ(train({"--data", path("data"), "--steps", "1", "--log-json", fifo}), 1);
  EXPECT_NE(err_.find("--log-json '" + fifo + "' is a FIFO; it must name a regular file"),
            std::string::npos)
      << err_;
  unlink(fifo.c_str());
  EXPECT_EQ(train({"--help"}), 0);
  EXPECT_NE(err_.find("usage:"), std::string::npos);
  EXPECT_TRUE(tiny::counters.empty());
}

}  // namespace

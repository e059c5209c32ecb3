// dsrt: the runner of generated training programs (train_main) and
// DeepSpeed's learning-rate schedules.
#include "dsrt/backend.h"
#include "dsrt/comm.h"
#include "dsrt/program.h"
#include "health.h"
#include "runner.h"
#include "train_common.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

namespace dsrt {

using namespace runner;

//===--- learning-rate schedules -------------------------------------------===//

namespace {
constexpr double kPi = 3.14159265358979323846;
}  // namespace

double scheduled_lr(const TrainInfo &train, int64_t step) {
  const std::string &kind = train.schedule;
  if (kind == "Constant" || kind.empty()) return train.lr;
  // The scheduler's constructor sets step 1's lr with last_batch_iteration
  // -1; scheduler.step() after every optimizer step advances it.
  int64_t it = step - 2;
  // DeepSpeed takes max(2, n) so that log(warmup) is not 0.
  int64_t warmup = std::max<int64_t>(2, train.warmup_num_steps);
  auto warmup_gamma = [&]() {
    if (train.warmup_linear) return static_cast<double>(it) / static_cast<double>(warmup);
    return std::log(static_cast<double>(it + 1)) / std::log(static_cast<double>(warmup));
  };
  if (kind == "WarmupLR" || kind == "WarmupDecayLR") {
    if (it < 0) return train.warmup_min_lr;
    double gamma;
    if (it < warmup) {
      gamma = warmup_gamma();
    } else if (kind == "WarmupLR") {
      gamma = 1.0;
    } else {
      double total = static_cast<double>(train.total_num_steps);
      gamma = std::max(0.0, (total - static_cast<double>(it)) /
                                std::max(1.0, total - static_cast<double>(warmup)));
    }
    return train.warmup_min_lr + (train.warmup_max_lr - train.warmup_min_lr) * gamma;
  }
  if (kind == "WarmupCosineLR") {
    if (it < 0) return 0.0;
    double ratio;
    if (it < warmup) {
      ratio = train.warmup_min_ratio + warmup_gamma() * (1.0 - train.warmup_min_ratio);
    } else {
      double real_step = static_cast<double>(it - warmup + 1);
      double real_total = static_cast<double>(train.total_num_steps - warmup);
      // DeepSpeed divides by zero here (train_main refuses the schedule);
      // the end of the cosine is the only sensible value.
      double cosine = real_total == 0 ? 0.0 : (1.0 + std::cos(kPi * real_step / real_total)) / 2;
      ratio = std::max(0.0, train.cos_min_ratio + (1.0 - train.cos_min_ratio) * cosine);
    }
    return train.lr * ratio;
  }
  throw Error("unknown learning-rate schedule '" + kind +
              "' (expected Constant, WarmupLR, WarmupDecayLR or WarmupCosineLR)");
}

//===--- the dropout counter -------------------------------------------------===//

namespace {
uint64_t current_rng_counter = 0;
}  // namespace

uint64_t rng_counter() { return current_rng_counter; }

void runner::set_rng_counter(uint64_t counter) { current_rng_counter = counter; }

void tp_offset(Stream &s, const Tensor &out, int64_t axis, int64_t stride) {
  const std::shared_ptr<Grid> grid = current_grid();
  if (axis < 0 || axis >= grid->axis_count())
    throw Error("dsrt::tp_offset: the program's grid (" + grid->str() + ") has no axis " +
                std::to_string(axis));
  fill_async(s, out, static_cast<double>(grid->coordinate(axis) * stride));
}

uint64_t tp_rank_seed(uint64_t seed) {
  const std::shared_ptr<Grid> grid = current_grid();
  const int64_t axis = grid->axis("tp");
  return seed + 2718 + static_cast<uint64_t>(axis < 0 ? 0 : grid->coordinate(axis));
}

//===--- train_main -----------------------------------------------------------===//

namespace {

// Checks what train_main relies on before anything runs.
void check_training_program(const ProgramInfo &info) {
  check_training_basics(info);
  for (const char *name : {"micro_step", "optimizer_step"}) check_function_plan(info, name);
  const FunctionInfo &micro = find_function(info, "micro_step");
  if (micro.outputs.empty())
    throw Error("micro_step has no outputs; its output 0 must be the loss");
  if (!is_float(micro.outputs[0].dtype) || micro.outputs[0].shape.numel() != 1)
    throw Error("micro_step's output 0 '" + micro.outputs[0].name + "' is " +
                dtype_name(micro.outputs[0].dtype) + " " + micro.outputs[0].shape.str() +
                "; the loss must be a float scalar");
  check_optimizer_step(info);
}

// The program must run on as many ranks as its grid has (dp x tp), without
// pipeline stages.
void check_grid(const ProgramInfo &info, int job_ranks) {
  if (info.axis_size("pp") > 1)
    throw Error("pipeline programs are not supported by train_main (the grid has pp=" +
                std::to_string(info.axis_size("pp")) +
                "; train_main runs grids of dp and tp, where pp has size 1; "
                "a pipeline program's main calls dsrt::pipeline_main)");
  check_job_size(info, job_ranks);
}

// The runner's body; errors propagate to the caller.
int train(int argc, char **argv, DescribeFn describe, RunFn micro_step,
               RunFn optimizer_step) {
  TrainOptions options;
  if (!parse_train(argc, argv, options, Launch::DataParallel)) return 0;
  ProgramInfo info;
  describe(info);
  // Every rank reaches the same verdict on what follows up to the first
  // exchange: the flags, the description and the job's size.
  Communicator &comm = Communicator::world();
  check_grid(info, comm.size());
  check_training_program(info);
  // The kernels' axis communicators (collective: every rank got here).
  use_program_grid(info);
  const std::shared_ptr<Grid> grid = current_grid();
  const TrainInfo &train = info.train;
  const int rank = comm.rank();
  // The runner's own exchanges below (errors, losses, the summary) run on
  // the world, sharded parameters along their axes. The world is dp x tp
  // with tp fastest; the tp ranks of a dp group read the same micro-batches
  // and compute the same losses.
  const int64_t ranks = info.world;
  // Data and dropout masks follow the rank's place along dp.
  const int64_t dp = info.dp_size();
  const int64_t dp_axis = info.grid_axis("dp");
  const int64_t dp_rank = dp_axis < 0 ? 0 : grid->coordinate(dp_axis);
  // The world rank whose losses stand for dp coordinate d: its tp
  // coordinate 0.
  std::vector<int64_t> loss_ranks(static_cast<size_t>(dp), 0);
  if (dp_axis >= 0)
    for (int64_t d = 0; d < dp; ++d) {
      std::vector<int64_t> at(info.grid_sizes.size(), 0);
      at[static_cast<size_t>(dp_axis)] = d;
      loss_ranks[static_cast<size_t>(d)] = grid_rank(info, at);
    }
  const bool rank0 = rank == 0;
  const int micro_index = find_function_index(info, "micro_step");
  const FunctionInfo &micro = info.functions[micro_index];
  RunnerComm exchange(comm);

  // What can differ between ranks (files, memory) is set up on every rank
  // before they agree to start.
  std::vector<InputData> data;
  TrainOutputs outputs;
  Program program;
  init_program(program, info, options.threads);
  ProgramMemory memory;
  Tracer tracer;
  CheckpointContext checkpoint{checkpoint_model_identity({&info}), checkpoint_layout(info), dp,
                               dp_rank, 0};
  CheckpointPosition position;
  std::optional<LossScaler> scaler;
  std::string setup_error;
  try {
    std::vector<const ValueInfo *> inputs;
    for (const ValueInfo &input : micro.inputs)
      if (!is_loss_scale(info, input)) inputs.push_back(&input);
    data = load_data(inputs, options.data, train.accumulation_steps, dp, dp_rank);
    open_outputs(options, info, rank0, outputs);
    if (!options.trace.empty()) {
      program.tracer = &tracer;
      // A step runs micro_step once per micro-batch, then optimizer_step.
      tracer.prepare(program.stream,
                     train.accumulation_steps * static_cast<int64_t>(micro.ops.size()) +
                         static_cast<int64_t>(
                             info.functions[find_function_index(info, "optimizer_step")]
                                 .ops.size()));
    }
    prepare_program(program, memory, options, dp_rank, rank);
    checkpoint.data_batches = batch_count(data);
    position = start_checkpoints(program, checkpoint, options, rank, comm.size());
    scaler = start_loss_scaler(info, position);
  } catch (const std::exception &error) {
    setup_error = error.what();
  }
  exchange.agree(setup_error, "before training");
  CheckpointSaver saver(info, checkpoint, options);

  const int64_t k = train.accumulation_steps;
  const int64_t samples_per_step = train.micro_batch * k * dp;
  // The program's collectives are what the counters gain over the run less
  // what the runner's own exchanges add.
  const TrafficStart traffic = TrafficStart::now(*grid, exchange);
  uint64_t micro_steps_run = 0;
  double total_us = 0;
  // Per rank and step: a failure flag, then the k micro-batch losses.
  std::vector<float> report(static_cast<size_t>(k + 1));
  std::vector<float> reports(static_cast<size_t>(ranks * (k + 1)));
  // Updates applied: the lr schedule and the optimizer's step count advance
  // with them, not with skipped steps.
  int64_t applied = position.applied, skipped = position.skipped;
  // fp16: a non-finite gradient is an overflow, whose step is always
  // skipped; the scaler's note reports it.
  const TrainOptions judged = verdict_options(options, scaler, info);
  for (int64_t step = position.step + 1; step <= options.steps; ++step) {
    health::set_step(step);
    health::test_fail_point("compute", step);
    health::mark_step(step);
    tracer.set_step(step);
    double start = now_us();
    const int64_t batch = (step - 1) % batch_count(data);
    const double lr = scheduled_lr(train, applied + 1);
    double grad_norm = std::nan("");
    bool skip = false;
    std::string step_error;
    int32_t found = kStepClean;
    int64_t at_micro = -1;  // the micro-batch a failure happened in
    try {
      for (int64_t micro_batch = 0; micro_batch < k; ++micro_batch) {
        // This rank's micro-batches of the global batch: dp_rank * k ...
        const int64_t global_micro = dp_rank * k + micro_batch;
        at_micro = global_micro;
        for (const InputData &item : data)
          load_micro_batch(program, item, *item.input, batch, global_micro);
        // The masks of the same micro-batch in a single-rank run with
        // dp * k accumulation steps.
        set_rng_counter((options.seed << 32) +
                        static_cast<uint64_t>((step - 1) * dp * k + global_micro));
        if (scaler)
          write_scalar_input(program, micro, kLossScaleInput,
                             micro_step_loss_scale(scaler->scale(), k));
        run_function(program, micro_step, micro_index);
        ++micro_steps_run;
        if (program.outputs.empty() || !program.outputs[0].data)
          throw Error("micro_step did not produce its output 0 '" + micro.outputs[0].name +
                      "'");
        report[static_cast<size_t>(1 + micro_batch)] =
            static_cast<float>(read_scalar(program.stream, program.outputs[0]));
        program.memory.release_from(info.persistent_bytes);
      }
      found = find_nonfinite(program, report.data() + 1, k);
    } catch (const std::exception &error) {
      step_error = step_context(options, step, batch, at_micro) + error.what();
      found = kStepFailed;
    }
    // Every rank updates, or none does: a failure or a non-finite value on
    // any rank is known everywhere before the optimizer's collectives.
    const StepVerdict verdict = agree_on_step(exchange, found, step_error);
    if (settle_step(program, verdict, judged, rank, step, step_error, skip)) {
      try {
        grad_norm = run_optimizer_step(program, optimizer_step, lr, applied + 1,
                                       scaler ? scaler->scale() : 1.0);
        ++applied;
        program.memory.release_from(info.persistent_bytes);
        // Both functions have run once: the arenas reached their peaks.
        check_arena_peak(program, applied - position.applied);
      } catch (const std::exception &error) {
        step_error = error.what();
      }
    }
    // The step's last host wait (the gradient norm's readback, or the
    // non-finite check of a skipped step) followed all its ops: their trace
    // marks are reached. A failed step's ops have no times.
    if (program.tracer) {
      if (step_error.empty())
        tracer.resolve();
      else
        tracer.discard();
    }
    skipped += skip ? 1 : 0;
    StepLog entry{step, 0, lr, grad_norm, skip};
    update_loss_scaler(scaler, verdict, step, entry, step_error);
    // Every rank's verdict and losses; the step's loss is the mean over the
    // dp ranks' micro-batches (those of tp coordinate 0), summed in the order
    // of a single-rank run.
    exchange.gather_step_reports(step_error, report, reports, step);
    double loss_sum = 0;
    for (int64_t d = 0; d < dp; ++d)
      for (int64_t i = 0; i < k; ++i)
        loss_sum += reports[static_cast<size_t>(loss_ranks[static_cast<size_t>(d)] * (k + 1) +
                                                1 + i)];
    entry.loss = loss_sum / static_cast<double>(dp * k);
    total_us += log_step(options, program, rank0, outputs.log_json.get(), samples_per_step, start,
                         entry);
    if (checkpoint_due(options, step))
      saver.save(program, exchange, checkpoint_position(step, applied, skipped, scaler));
    else
      saver.poll(exchange);
  }
  // The last checkpoint is durable and committed before the run reports.
  health::mark_step(0);
  saver.finish(exchange);

  // The program's collectives over the whole run, and every rank's arena
  // peak, gathered to rank 0 for the log's summary line.
  const std::vector<int64_t> all =
      gather_summary(exchange, *grid, traffic, program);

  // The saved values (masters of 16-bit copies, sharded ones gathered
  // whole outside the arena); every rank takes part, rank 0 writes.
  std::map<std::string, Tensor> full_values;
  std::vector<std::vector<uint8_t>> gathered;
  if (!options.save_onnx.empty()) {
    const AxisGather gather = runner_axis_gather(exchange, info, *grid, program.stream);
    for (const ParamInfo &param : info.params) {
      const Tensor value = whole_saved_value(program, param, gather, gathered);
      if (rank0) full_values[param.name] = value;
    }
  }

  close_log(options, outputs, !info.grid_names.empty(), options.steps, comm.size(), all,
            skipped_json(skipped) + checkpoint_staging_json(saver, exchange));
  if (outputs.save_source)
    write_save_onnx(*outputs.save_source, info, program.arena, options.save_onnx,
                    options.external_data, full_values);
  if (program.tracer)
    tracer.write(rank0 ? options.trace : options.trace + ".rank" + std::to_string(rank), info,
                 rank);
  print_trained(options, rank0, program, options.steps - position.step,
                static_cast<int64_t>(micro_steps_run), total_us,
                skipped);
  return 0;
}

}  // namespace

int train_main(int argc, char **argv, DescribeFn describe, RunFn micro_step,
               RunFn optimizer_step) {
  return run_reporting_errors(
      [&] { return train(argc, argv, describe, micro_step, optimizer_step); });
}

}  // namespace dsrt

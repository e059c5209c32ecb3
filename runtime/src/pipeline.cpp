// dsrt: the runner of pipeline-parallel training programs (pipeline_main):
// each pp rank executes its program's static schedule of forwards,
// backwards and transfers every step, with the activations and gradients in
// flight held in the slots of pools the memory plan placed at the top of
// the arena (docs/runtime.md, "Pipeline-parallel programs"). This file is
// the runner: the describe calls, the training loop with its logs, trace
// and --save-onnx; the description checks and stage plans are in
// pipeline_plan.cpp, the pools in pipeline_pools.h, the schedule executor
// in pipeline_executor.cpp.
#include "dsrt/backend.h"
#include "dsrt/comm.h"
#include "dsrt/program.h"
#include "pipeline_executor.h"
#include "pipeline_plan.h"
#include "health.h"
#include "runner.h"
#include "train_common.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <tuple>
#include <vector>

namespace dsrt {

//===--- describe ------------------------------------------------------------===//

void set_pipeline(ProgramInfo &info, const char *schedule, int64_t stages, int64_t chunks,
                  int64_t microbatches, int64_t rank, int64_t buffers_offset,
                  int64_t buffers_bytes) {
  PipelineInfo &p = info.pipeline;
  p.schedule = schedule ? schedule : "";
  std::tie(p.stages, p.chunks, p.microbatches, p.rank, p.buffers_offset, p.buffers_bytes) =
      std::make_tuple(stages, chunks, microbatches, rank, buffers_offset, buffers_bytes);
}

void add_pipeline_stage(ProgramInfo &info, int64_t stage, const char *forward,
                        const char *backward, const char *backward_input,
                        const char *backward_weight) {
  auto text = [](const char *s) { return std::string(s ? s : ""); };
  info.pipeline.stage_functions.push_back(
      {stage, text(forward), text(backward), text(backward_input), text(backward_weight)});
}

void add_pipeline_action(ProgramInfo &info, int64_t kind, int64_t microbatch, int64_t chunk,
                         int64_t peer) {
  // Kept as given; the runner checks the kind.
  info.pipeline.actions.push_back(
      {static_cast<PipelineActionKind>(kind), microbatch, chunk, peer});
}

void add_pipeline_pool(ProgramInfo &info, const char *kind, int64_t stage, int64_t slots,
                       int64_t slot_bytes, int64_t offset) {
  info.pipeline.pools.push_back({kind ? kind : "", stage, slots, slot_bytes, offset});
}

void add_pipeline_tied(ProgramInfo &info, const char *param, const int64_t *ranks,
                       int64_t count) {
  PipelineTied tied;
  tied.param = param ? param : "";
  if (ranks)
    for (int64_t i = 0; i < count; ++i) tied.ranks.push_back(ranks[i]);
  info.pipeline.tied.push_back(std::move(tied));
}

using namespace runner;

namespace {

using namespace pipeline;

//===--- after training: the whole model for --save-onnx -------------------------===//

// For each parameter name, the lowest pp rank that holds it: the one whose
// value is saved (a tied parameter has the same value on every holder).
std::map<std::string, int64_t> parameter_owners(const std::vector<ProgramInfo> &infos) {
  std::map<std::string, int64_t> owners;
  for (size_t j = 0; j < infos.size(); ++j)
    for (const ParamInfo &param : infos[j].params)
      owners.emplace(param.name, static_cast<int64_t>(j));
  return owners;
}

// pp rank 0's description with every other rank's parameters appended
// (their offsets are in other arenas: their values come as full values).
ProgramInfo whole_model(const std::vector<ProgramInfo> &infos) {
  ProgramInfo whole = infos.front();
  const std::map<std::string, int64_t> owners = parameter_owners(infos);
  for (size_t j = 1; j < infos.size(); ++j)
    for (const ParamInfo &param : infos[j].params)
      if (owners.at(param.name) == static_cast<int64_t>(j)) whole.params.push_back(param);
  return whole;
}

//===--- the measured schedule ---------------------------------------------------===//

std::string json_text(double value) {
  char buffer[32];
  snprintf(buffer, sizeof(buffer), "%.3f", value);
  return buffer;
}

// Chrome trace JSON of every rank's actions over all steps: `times`
// holds, per world rank, begin/end pairs in nanoseconds for each step and
// action (padded to `stride` values per step); step s starts at
// step_origin_us[s].
void write_trace(const std::string &path, const std::vector<ProgramInfo> &infos,
                 const ProgramInfo &first, const std::vector<int64_t> &times, int64_t stride,
                 int64_t steps, const std::vector<double> &step_origin_us) {
  std::ofstream out(path);
  if (!out) throw Error("--trace: cannot write '" + path + "'");
  const PipelineInfo &p = first.pipeline;
  const int64_t pp_axis = first.grid_axis("pp"), dp_axis = first.grid_axis("dp");
  out << "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n";
  out << "  {\"name\": \"process_name\", \"ph\": \"M\", \"pid\": 0, \"args\": {\"name\": "
         "\"pipeline " << json_escape(p.schedule) << " (measured): p = " << p.stages
      << ", m = " << p.microbatches << ", v = " << p.chunks << "\"}}";
  // Two tracks per rank w: its computations (tid w, the program's stream)
  // and its send_recv groups (tid world + w, the transfer stream), so that
  // their overlap shows.
  for (int w = 0; w < first.world; ++w) {
    const int64_t pp = grid_coordinate(first, w, pp_axis);
    const int64_t dp = dp_axis < 0 ? 0 : grid_coordinate(first, w, dp_axis);
    for (int lane = 0; lane < 2; ++lane) {
      const int tid = lane * first.world + w;
      out << ",\n  {\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": 0, \"tid\": " << tid
          << ", \"args\": {\"name\": \"pp " << pp << " dp " << dp
          << (lane ? " transfers" : "") << "\"}}";
      out << ",\n  {\"name\": \"thread_sort_index\", \"ph\": \"M\", \"pid\": 0, \"tid\": " << tid
          << ", \"args\": {\"sort_index\": " << 2 * w + lane << "}}";
    }
  }
  static const char *const categories[kPipelineActionKinds] = {
      "forward", "backward", "backward", "weight-gradient",
      "communication", "communication", "communication", "communication"};
  for (int w = 0; w < first.world; ++w) {
    const int64_t pp = grid_coordinate(first, w, pp_axis);
    const std::vector<PipelineAction> &actions = infos[pp].pipeline.actions;
    for (int64_t step = 0; step < steps; ++step) {
      const int64_t *t = times.data() + (static_cast<size_t>(w) * steps + step) * stride;
      for (size_t i = 0; i < actions.size(); ++i) {
        const PipelineAction &a = actions[i];
        const double begin = step_origin_us[step] + t[2 * i] / 1e3;
        const double duration = (t[2 * i + 1] - t[2 * i]) / 1e3;
        const int tid = is_transfer(a.kind) ? first.world + w : w;
        out << ",\n  {\"name\": \"" << action_name(a, p.chunks) << "\", \"cat\": \""
            << categories[kind_index(a.kind)] << "\", \"ph\": \"X\", \"pid\": 0, \"tid\": " << tid
            << ", \"ts\": " << json_text(begin) << ", \"dur\": " << json_text(duration)
            << ", \"args\": {\"rank\": " << w << ", \"step\": " << step + 1 << ", \"stage\": "
            << a.chunk * p.stages + pp << ", \"chunk\": " << a.chunk
            << ", \"microbatch\": " << a.microbatch;
        if (a.peer >= 0) out << ", \"peer\": " << a.peer;
        out << "}}";
      }
    }
  }
  out << "\n]}\n";
  if (!out) throw Error("--trace: cannot write '" + path + "'");
}

//===--- pipeline_main ------------------------------------------------------------===//

// The runner's body; errors propagate to the caller.
int run_pipeline(int argc, char **argv, const PipelineRankProgram *ranks, int64_t rank_count) {
  TrainOptions options;
  if (!parse_train(argc, argv, options, Launch::Pipeline)) return 0;
  if (!ranks || rank_count < 1)
    throw Error("pipeline_main: no pp rank programs (rank_count " +
                std::to_string(rank_count) + ")");
  // Every rank describes and checks every rank's program: the same verdict
  // everywhere, and rank 0 knows the whole model.
  std::vector<ProgramInfo> infos(static_cast<size_t>(rank_count));
  for (int64_t i = 0; i < rank_count; ++i) {
    if (!ranks[i].describe)
      throw Error("pipeline_main: pp rank " + std::to_string(i) + " has no describe function");
    ranks[i].describe(infos[static_cast<size_t>(i)]);
  }
  Communicator &comm = Communicator::world();
  check_pipeline_programs(infos, ranks, comm.size());
  const int rank = comm.rank();
  const bool rank0 = rank == 0;
  const ProgramInfo &first = infos.front();
  const int64_t pp_axis = first.grid_axis("pp");
  const int64_t pp_rank = grid_coordinate(first, rank, pp_axis);
  const ProgramInfo &info = infos[static_cast<size_t>(pp_rank)];
  const PipelineRankProgram &functions = ranks[pp_rank];
  const PipelineInfo &pipeline = info.pipeline;
  // The kernels' axis communicators (collective: every rank got here).
  use_program_grid(info);
  const std::shared_ptr<Grid> grid = current_grid();
  const TrainInfo &train = info.train;
  const int64_t dp = info.dp_size();
  const int64_t dp_axis = info.grid_axis("dp");
  const int64_t dp_rank = dp_axis < 0 ? 0 : grid->coordinate(dp_axis);
  const int64_t stages = pipeline.stages;
  const int64_t k = train.accumulation_steps;
  const int world = comm.size();
  // The world rank at (pp, dp), the other axes (of size 1) at 0.
  auto world_rank = [&](int64_t pp, int64_t d) {
    std::vector<int64_t> coordinates(first.grid_names.size(), 0);
    coordinates[static_cast<size_t>(pp_axis)] = pp;
    if (dp_axis >= 0) coordinates[static_cast<size_t>(dp_axis)] = d;
    return grid_rank(first, coordinates);
  };
  RunnerComm exchange(comm);

  // The data inputs of this rank's functions, each once.
  std::vector<const ValueInfo *> inputs;
  for (const FunctionInfo &function : info.functions) {
    if (function.name == "optimizer_step") continue;
    for (const ValueInfo &input : function.inputs)
      if (is_data(input) && !is_loss_scale(info, input) &&
          std::none_of(inputs.begin(), inputs.end(),
                       [&](const ValueInfo *seen) { return seen->name == input.name; }))
        inputs.push_back(&input);
  }

  // What can differ between ranks (files, memory) is set up on every rank
  // before they agree to start.
  std::vector<InputData> data;
  ProgramInfo whole;  // rank 0: every parameter of the model
  TrainOutputs outputs;
  Program program;
  init_program(program, info, options.threads);
  ProgramMemory memory;
  std::vector<const ProgramInfo *> all_infos;
  for (const ProgramInfo &program_info : infos) all_infos.push_back(&program_info);
  CheckpointContext checkpoint{checkpoint_model_identity(all_infos), checkpoint_layout(info), dp,
                               dp_rank, 0};
  CheckpointPosition position;
  std::optional<LossScaler> scaler;
  std::string setup_error;
  try {
    data = load_data(inputs, options.data, k, dp, dp_rank);
    if (rank0 && !options.save_onnx.empty()) whole = whole_model(infos);
    open_outputs(options, whole, rank0, outputs);
    prepare_program(program, memory, options, dp_rank, rank);
    checkpoint.data_batches = batch_count(data);
    position = start_checkpoints(program, checkpoint, options, rank, world);
    scaler = start_loss_scaler(info, position);
  } catch (const std::exception &error) {
    setup_error = error.what();
  }
  exchange.agree(setup_error, "before training");
  CheckpointSaver saver(info, checkpoint, options);

  PipelineExecutor executor(program, functions, data, pp_axis);
  const int optimizer_index = find_function_index(info, "optimizer_step");
  const int64_t samples_per_step = train.micro_batch * k * dp;
  const TrafficStart traffic = TrafficStart::now(*grid, exchange);
  double total_us = 0;
  // Per rank and step: a failure flag, the k losses (ranks with the last
  // stage), the compute time, the end of the last action and of the step
  // (microseconds from the step's barrier).
  const int64_t width = k + 4;
  std::vector<float> report(static_cast<size_t>(width));
  std::vector<float> reports(static_cast<size_t>(world * width));
  std::vector<float> losses(static_cast<size_t>(k));
  // With --trace: every action's begin and end (ns), per step.
  int64_t stride = 0;
  for (const ProgramInfo &program_info : infos)
    stride = std::max<int64_t>(stride, 2 * program_info.pipeline.actions.size());
  std::vector<int64_t> trace_times;
  if (!options.trace.empty())
    trace_times.assign(static_cast<size_t>(options.steps * stride), 0);
  std::vector<double> step_origin_us(static_cast<size_t>(options.steps), 0);
  double bubble_sum = 0;
  int64_t bubble_steps = 0;
  StepTimes times;
  // Updates applied: the lr schedule and the optimizer's step count advance
  // with them, not with skipped steps.
  int64_t applied = position.applied, skipped = position.skipped;
  const TrainOptions judged = verdict_options(options, scaler, info);
  for (int64_t step = position.step + 1; step <= options.steps; ++step) {
    health::set_step(step);
    health::test_fail_point("compute", step);
    health::mark_step(step);
    // The step's times count from a barrier all ranks leave together.
    exchange.barrier();
    const double start = now_us();
    const int64_t batch = (step - 1) % batch_count(data);
    const double lr = scheduled_lr(train, applied + 1);
    double grad_norm = std::nan("");
    bool skip = false;
    std::string step_error;
    losses.assign(losses.size(), 0.0f);
    times = StepTimes();  // a failed step's stay unknown (0)
    int32_t found = kStepClean;
    try {
      // Micro-batch mb of this dp rank draws the masks of micro-batch
      // dp_rank * k + mb of a single-rank run.
      const uint64_t first_counter =
          (options.seed << 32) + static_cast<uint64_t>((step - 1) * dp * k);
      if (scaler) executor.set_loss_scale(micro_step_loss_scale(scaler->scale(), k));
      executor.run_actions(batch, first_counter, dp_rank, losses);
      executor.sum_tied();
      found = find_nonfinite(program, losses.data(), k);
      // The step's work is done (the check waited for the stream): the
      // actions' timing marks are reached.
      executor.read_times(times);
    } catch (const std::exception &error) {
      step_error = step_context(options, step, batch, -1) + error.what();
      found = kStepFailed;
      // The peers wait for this rank's transfers: issue them (the step's
      // results are lost anyway), so that every rank reaches the verdict.
      executor.finish_transfers_after_failure();
    }
    // Every rank updates, or none does: a failure or a non-finite value on
    // any rank is known everywhere before optimizer_step's collectives.
    const StepVerdict verdict = agree_on_step(exchange, found, step_error);
    if (settle_step(program, verdict, judged, rank, step, step_error, skip)) {
      try {
        grad_norm = run_optimizer_step(program, functions.functions[optimizer_index], lr,
                                       applied + 1, scaler ? scaler->scale() : 1.0);
        ++applied;
        program.memory.release_range(info.persistent_bytes, pipeline.buffers_offset);
        // Every function has run once: the arenas reached their peaks.
        check_arena_peak(program, applied - position.applied);
      } catch (const std::exception &error) {
        step_error = error.what();
      }
    }
    skipped += skip ? 1 : 0;
    StepLog entry{step, 0, lr, grad_norm, skip};
    update_loss_scaler(scaler, verdict, step, entry, step_error);
    const double step_end_us = now_us() - start;
    for (size_t i = 0; i < losses.size(); ++i) report[1 + i] = losses[i];
    report[static_cast<size_t>(k + 1)] = static_cast<float>(times.compute_us);
    report[static_cast<size_t>(k + 2)] = static_cast<float>(times.actions_end_us);
    report[static_cast<size_t>(k + 3)] = static_cast<float>(step_end_us);
    exchange.gather_step_reports(step_error, report, reports, step);
    auto field = [&](int64_t r, int64_t i) {
      return static_cast<double>(reports[static_cast<size_t>(r * width + i)]);
    };
    // The loss: the last stage's ranks' (one per dp coordinate), in dp
    // order then micro-batch order, as a single-rank run sums them.
    double loss_sum = 0;
    for (int64_t d = 0; d < dp; ++d)
      for (int64_t i = 0; i < k; ++i) loss_sum += field(world_rank(stages - 1, d), 1 + i);
    // The bubble of the pipeline of dp coordinate 0.
    double compute = 0, makespan = 0;
    for (int64_t pp = 0; pp < stages; ++pp) {
      compute += field(world_rank(pp, 0), k + 1);
      makespan = std::max(makespan, field(world_rank(pp, 0), k + 2));
    }
    if (step > 1) {
      bubble_sum += makespan > 0 ? 1.0 - compute / (static_cast<double>(stages) * makespan) : 0;
      ++bubble_steps;
    }
    // Each step as long as its slowest rank's, and no shorter than its
    // actions as the streams ran them.
    double span = 0;
    for (int r = 0; r < world; ++r) span = std::max({span, field(r, k + 2), field(r, k + 3)});
    if (step < options.steps) step_origin_us[static_cast<size_t>(step)] =
        step_origin_us[static_cast<size_t>(step - 1)] + span;
    if (!trace_times.empty())
      for (size_t i = 0; i < times.begin.size(); ++i) {
        int64_t *t = trace_times.data() + static_cast<size_t>((step - 1) * stride);
        t[2 * i] = static_cast<int64_t>(times.begin[i] * 1e3);
        t[2 * i + 1] = static_cast<int64_t>(times.end[i] * 1e3);
      }
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

  // The measured schedule of every rank, to rank 0.
  std::vector<int64_t> all_times;
  if (!trace_times.empty()) {
    all_times.resize(static_cast<size_t>(world) * trace_times.size());
    exchange.all_gather(
        Tensor{trace_times.data(), DType::I64, Shape{static_cast<int64_t>(trace_times.size())}},
        Tensor{all_times.data(), DType::I64, Shape{static_cast<int64_t>(all_times.size())}});
  }

  const std::vector<int64_t> all =
      gather_summary(exchange, *grid, traffic, program);

  // The whole model to rank 0: sharded parameters gathered along dp and
  // their tp pieces along tp, then every parameter whose lowest holder is
  // pp rank j > 0 sent along pp by its rank of dp and tp coordinate 0.
  std::map<std::string, Tensor> full_values;
  std::vector<std::vector<uint8_t>> buffers;
  if (!options.save_onnx.empty()) {
    const std::map<std::string, int64_t> owners = parameter_owners(infos);
    std::map<std::string, Tensor> mine;  // whole values of this rank's saved parameters
    const AxisGather gather = runner_axis_gather(exchange, info, *grid, program.stream);
    for (const ParamInfo &param : info.params)
      if (owners.at(param.name) == pp_rank)
        mine[param.name] = whole_saved_value(program, param, gather, buffers);
    // Whole values (ZeRO's shards and the tp pieces gathered) are the same
    // on every rank of a pp coordinate: those of dp and tp coordinate 0 send.
    if (dp_rank == 0 && own_coordinate(info, "tp") == 0) {
      Communicator &pp_comm = grid->comm(pp_axis);
      std::vector<P2POp> ops;
      if (pp_rank == 0) {
        for (const ParamInfo &param : info.params)
          full_values[param.name] = mine.at(param.name);
        for (size_t j = 1; j < infos.size(); ++j)
          for (const ParamInfo &param : infos[j].params) {
            if (owners.at(param.name) != static_cast<int64_t>(j)) continue;
            const Shape shape = param.model_shape();
            buffers.emplace_back(Tensor{nullptr, param.stored, shape}.nbytes());
            const Tensor value{buffers.back().data(), param.stored, shape};
            ops.push_back(P2POp{CommOp::Recv, value, static_cast<int>(j)});
            full_values[param.name] = value;
          }
      } else {
        for (const ParamInfo &param : info.params)
          if (owners.at(param.name) == pp_rank)
            ops.push_back(P2POp{CommOp::Send, mine.at(param.name), 0});
      }
      exchange.send_recv(pp_comm, ops);
    }
  }

  std::string summary_extra;
  const double bubble =
      bubble_steps > 0 ? bubble_sum / static_cast<double>(bubble_steps) : 0.0;
  summary_extra = "\"pipeline\": {\"schedule\": \"" + json_escape(pipeline.schedule) +
                  "\", \"stages\": " + std::to_string(stages) +
                  ", \"chunks\": " + std::to_string(pipeline.chunks) +
                  ", \"microbatches\": " + std::to_string(pipeline.microbatches) +
                  ", \"bubble_measured\": " +
                  (bubble_steps > 0 ? json_number(bubble) : std::string("null")) + "}";
  close_log(options, outputs, true, options.steps, world, all,
            skipped_json(skipped) + checkpoint_staging_json(saver, exchange) + ", " +
                summary_extra);
  if (outputs.save_source)
    write_save_onnx(*outputs.save_source, whole, program.arena, options.save_onnx,
                    options.external_data, full_values);
  if (rank0 && !all_times.empty())
    write_trace(options.trace, infos, first, all_times, stride, options.steps, step_origin_us);
  print_trained(options, rank0, program, options.steps - position.step,
                (options.steps - position.step) * k, total_us, skipped);
  if (!options.quiet && rank0) {
    char measured[96];
    if (bubble_steps > 0)
      snprintf(measured, sizeof(measured), "%.4f (mean over steps 2..%lld)", bubble,
               static_cast<long long>(options.steps));
    else
      snprintf(measured, sizeof(measured), "n/a (step 1 alone, which is not counted)");
    fprintf(stderr, "pipeline %s (p = %lld, v = %lld, m = %lld): measured bubble %s\n",
            pipeline.schedule.c_str(), static_cast<long long>(stages),
            static_cast<long long>(pipeline.chunks),
            static_cast<long long>(pipeline.microbatches), measured);
  }
  return 0;
}

}  // namespace

int pipeline_main(int argc, char **argv, const PipelineRankProgram *ranks, int64_t rank_count) {
  return run_reporting_errors([&] { return run_pipeline(argc, argv, ranks, rank_count); });
}

}  // namespace dsrt


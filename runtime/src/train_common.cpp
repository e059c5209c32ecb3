// dsrt: what train_main and pipeline_main share (train_common.h): running
// the step functions, the log, and setting up a program. Flags, checks,
// data and the runner's exchanges are in train_flags.cpp, train_checks.cpp,
// train_data.cpp and train_exchange.cpp.
#include "train_common.h"

#include "health.h"
#include "staging.h"

#include "dsrt/backend.h"
#include "dsrt/dist.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <omp.h>
#include <sys/stat.h>
#include <unistd.h>

namespace dsrt {
namespace runner {

//===--- running -----------------------------------------------------------------===//

std::string step_context(const TrainOptions &options, int64_t step, int64_t batch,
                         int64_t micro_batch) {
  std::string s = "step " + std::to_string(step) + " (global batch " + std::to_string(batch);
  if (micro_batch >= 0) s += ", micro-batch " + std::to_string(micro_batch);
  if (!options.data.empty()) s += " of the files in '" + options.data + "'";
  return s + "): ";
}

void run_function(Program &program, RunFn run, int index) {
  const FunctionInfo &function = program.info->functions[static_cast<size_t>(index)];
  health::set_phase(function.name);
  program.outputs.clear();
  program.running_function = index;
  if (program.tracer) program.tracer->set_function(index);
  int64_t before[kNumSpaces][kNumSpaces];
  for (int from = 0; from < kNumSpaces; ++from)
    for (int to = 0; to < kNumSpaces; ++to)
      before[from][to] = transferred_bytes(static_cast<Space>(from), static_cast<Space>(to));
  run_to_completion(program, run);
  // The host space's transient slots (an offloaded step's copies) end with
  // the run; its results are device values.
  program.host_memory.release_from(program.info->space(Space::Host).persistent_bytes);
  check_transfers(function, before);
}

void write_scalar_input(Program &program, const FunctionInfo &function, const std::string &name,
                        double value) {
  const ProgramInfo &info = *program.info;
  const ValueInfo &input = function.inputs[find_value(function.inputs, name, "")];
  program.memory.acquire(input.offset,
                         slot_size(info, dtype_size(input.dtype) * input.shape.numel()));
  write_scalar(program.stream, Tensor{program.arena + input.offset, input.dtype, input.shape},
               value);
}

double run_optimizer_step(Program &program, RunFn optimizer_step, double lr, int64_t step,
                          double loss_scale) {
  const ProgramInfo &info = *program.info;
  const int optimizer_index = find_function_index(info, "optimizer_step");
  const FunctionInfo &optimizer = info.functions[optimizer_index];
  const int64_t grad_norm_index = find_value(optimizer.outputs, "grad_norm", "");
  write_scalar_input(program, optimizer, "lr", static_cast<float>(lr));
  write_scalar_input(program, optimizer, "step", static_cast<double>(step));
  if (info.train.loss_scaled) write_scalar_input(program, optimizer, kLossScaleInput, loss_scale);
  run_function(program, optimizer_step, optimizer_index);
  if (static_cast<int64_t>(program.outputs.size()) <= grad_norm_index ||
      !program.outputs[grad_norm_index].data)
    throw Error("optimizer_step did not produce its output 'grad_norm'");
  return read_scalar(program.stream, program.outputs[grad_norm_index]);
}

int32_t find_nonfinite(Program &program, const float *losses, int64_t count) {
  const ProgramInfo &info = *program.info;
  std::vector<Tensor> grads;
  std::vector<int32_t> index;
  std::vector<std::vector<uint8_t>> keep;
  for (size_t i = 0; i < info.states.size(); ++i)
    if (info.states[i].role == ValueRole::Accumulator) {
      grads.push_back(persistent_tensor(program, info.states[i], keep));
      index.push_back(static_cast<int32_t>(i));
    }
  const int64_t first = backend(program.stream)
                            .first_nonfinite(program.stream, grads.data(),
                                             static_cast<int64_t>(grads.size()));
  if (first >= 0) return index[static_cast<size_t>(first)];
  for (int64_t i = 0; i < count; ++i)
    if (!std::isfinite(losses[i])) return kNonfiniteLoss;
  return kStepClean;
}

StepVerdict agree_on_step(RunnerComm &exchange, int32_t mine, const std::string &own_error) {
  std::vector<int32_t> all(static_cast<size_t>(exchange.size()));
  try {
    exchange.all_gather(Tensor{&mine, DType::I32, Shape{1}},
                        Tensor{all.data(), DType::I32, Shape{exchange.size()}});
  } catch (const std::exception &) {
    // A rank whose step failed midway issued fewer collectives than the
    // others: the exchange fails, and this rank's own error is the news.
    if (own_error.empty()) throw;
    throw Error(own_error);
  }
  StepVerdict verdict;
  for (size_t r = 0; r < all.size(); ++r) {
    if (all[r] == kStepFailed) verdict.failed = true;
    if (all[r] >= 0 && verdict.rank < 0) {
      verdict.rank = static_cast<int>(r);
      verdict.found = all[r];
    }
  }
  return verdict;
}

std::string nonfinite_message(const ProgramInfo &info, const StepVerdict &verdict,
                              int64_t step) {
  const std::string where = " (found on rank " + std::to_string(verdict.rank) + ")";
  if (verdict.found == kNonfiniteLoss || verdict.found < 0 ||
      verdict.found >= static_cast<int32_t>(info.states.size()))
    return "step " + std::to_string(step) + ": the loss is a NaN or an infinity" + where;
  return "step " + std::to_string(step) + ": the gradient of '" +
         info.states[static_cast<size_t>(verdict.found)].param +
         "' holds a NaN or an infinity" + where;
}

void drop_gradients(Program &program) {
  for (const ValueInfo &state : program.info->states)
    if (state.role == ValueRole::Accumulator) zero_persistent(program, state);
}

bool settle_step(Program &program, const StepVerdict &verdict, const TrainOptions &options,
                 int rank, int64_t step, std::string &step_error, bool &skip) {
  if (verdict.failed) return false;
  if (!verdict.nonfinite()) return true;
  // Only the finding rank knows the parameter's name (a pipeline rank
  // holds its own stages' parameters).
  const bool finder = rank == verdict.rank;
  if (!options.skip_nonfinite) {
    if (finder)
      step_error = nonfinite_message(*program.info, verdict, step) +
                   "; the run stops before it reaches the weights (train --on-nonfinite skip "
                   "skips such steps)";
    return false;
  }
  skip = true;
  if (finder && !options.quiet)
    fprintf(stderr, "%s; skipping the step: no weight, optimizer state or learning rate "
                    "changes\n",
            nonfinite_message(*program.info, verdict, step).c_str());
  try {
    drop_gradients(program);
  } catch (const std::exception &error) {
    step_error = error.what();
  }
  return false;
}

void check_transfers(const FunctionInfo &function,
                     const int64_t (&before)[kNumSpaces][kNumSpaces]) {
  for (int from = 0; from < kNumSpaces; ++from)
    for (int to = 0; to < kNumSpaces; ++to) {
      const int64_t moved =
          transferred_bytes(static_cast<Space>(from), static_cast<Space>(to)) - before[from][to];
      if (moved != function.transfer_bytes[from][to])
        throw Error("memory plan violated: " + function.name + " moved " + std::to_string(moved) +
                    " bytes from " + space_name(static_cast<Space>(from)) + " to " +
                    space_name(static_cast<Space>(to)) + " memory but the plan is " +
                    std::to_string(function.transfer_bytes[from][to]) + " bytes");
    }
}

void check_arena_peak(const Program &program, int64_t step) {
  if (step != 1) return;
  for (int s = 0; s < kNumSpaces; ++s) {
    const Space space = static_cast<Space>(s);
    const int64_t peak = program.memory_of(space).high_water_mark();
    const int64_t planned = program.info->space(space).arena_bytes;
    if (peak != planned)
      throw Error(std::string("memory plan violated: after step 1 the ") + space_name(space) +
                  " arena's measured high-water mark is " + std::to_string(peak) +
                  " bytes but the plan is " + std::to_string(planned) + " bytes");
  }
}

//===--- the log ----------------------------------------------------------------===//

std::string json_number(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "Infinity" : "-Infinity";
  char buffer[32];
  snprintf(buffer, sizeof(buffer), "%.9g", value);
  return buffer;
}

namespace {
// An output file the run writes (at its end, or as it goes): its directory
// must exist and be writable, and the path, if it exists, must be a file
// this process may replace (a FIFO would block the run, a directory fail
// it only at the end).
void check_output_path(const char *flag, const std::string &path) {
  const std::string what = std::string(flag) + " '" + path + "'";
  struct stat st;
  const std::string dir = directory_of(path);
  if (stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    throw Error(what + ": directory '" + dir + "' does not exist");
  if (access(dir.c_str(), W_OK | X_OK) != 0)
    throw Error(what + ": directory '" + dir + "' is not writable (" + strerror(errno) + ")");
  if (stat(path.c_str(), &st) != 0) return;
  if (S_ISDIR(st.st_mode)) throw Error(what + " is a directory; it must name a file");
  if (S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode))
    throw Error(what + " is a " + (S_ISFIFO(st.st_mode) ? "FIFO" : "socket") +
                "; it must name a regular file");
  if (access(path.c_str(), W_OK) != 0)
    throw Error(what + " is not writable (" + strerror(errno) + ")");
}
}  // namespace

void open_outputs(const TrainOptions &options, const ProgramInfo &save_info, bool rank0,
                  TrainOutputs &outputs) {
  if (!rank0) return;
  for (auto [flag, path] : {std::pair<const char *, const std::string &>{"--save-onnx", options.save_onnx},
                            {"--log-json", options.log_json},
                            {"--trace", options.trace}})
    if (!path.empty()) check_output_path(flag, path);
  // Refuse a model that cannot be saved before training, not after.
  if (!options.save_onnx.empty())
    outputs.save_source = prepare_save_onnx(save_info, options.weights);
  if (!options.log_json.empty()) {
    outputs.log_json.reset(fopen(options.log_json.c_str(), "w"));
    if (!outputs.log_json) throw Error("--log-json: cannot write '" + options.log_json + "'");
  }
}

AxisGather runner_axis_gather(RunnerComm &exchange, const ProgramInfo &info, Grid &grid,
                              Stream &stream) {
  return [&exchange, &info, &grid, &stream](const std::string &axis, const Tensor &in,
                                            const Tensor &out) {
    const int64_t index = info.grid_axis(axis);
    if (index < 0)
      read_to_host(stream, out.data, in);
    else
      exchange.all_gather(grid.comm(index), in, out);
  };
}

Tensor whole_saved_value(Program &program, const ParamInfo &param, const AxisGather &gather,
                         std::vector<std::vector<uint8_t>> &buffers) {
  const ProgramInfo &info = *program.info;
  const ValueInfo *value = &param;
  for (const ValueInfo &state : info.states)
    if (master_param(info, state) == &param) value = &state;
  const Shape &whole = param.rank_shape();
  Tensor slot = persistent_tensor(program, *value, buffers);
  // The host reads what it saves: device memory is copied out first.
  if (value->space == Space::Device && detail::stages_host_copies(backend(program.stream))) {
    buffers.emplace_back(slot.nbytes());
    read_to_host(program.stream, buffers.back().data(), slot);
    slot.data = buffers.back().data();
  }
  Tensor piece = slot;
  if (!(slot.shape == whole)) {
    const int64_t dp = info.dp_size();
    buffers.emplace_back(slot.nbytes() * static_cast<size_t>(dp));
    const Tensor gathered{buffers.back().data(), slot.dtype, Shape{dp * slot.numel()}};
    gather("dp", slot, gathered);
    piece = Tensor{gathered.data, slot.dtype, whole};
  }
  if (!param.tp_split()) return piece;
  // Every tp rank's piece, each put in its place in the model's tensor.
  const int64_t ranks = info.axis_size("tp");
  buffers.emplace_back(piece.nbytes() * static_cast<size_t>(ranks));
  uint8_t *pieces = buffers.back().data();
  gather("tp", Tensor{piece.data, piece.dtype, Shape{piece.numel()}},
         Tensor{pieces, piece.dtype, Shape{ranks * piece.numel()}});
  const Tensor model{nullptr, piece.dtype, param.tp_whole};
  buffers.emplace_back(model.nbytes());
  uint8_t *bytes = buffers.back().data();
  for (int64_t r = 0; r < ranks; ++r)
    tp_piece_copy(bytes, pieces + static_cast<size_t>(r) * piece.nbytes(), param.tp_whole,
                  param.tp_dim, param.tp_blocks, ranks, r, dtype_size(piece.dtype),
                  /*to_piece=*/false, param.tp_run);
  return Tensor{bytes, piece.dtype, param.tp_whole};
}

void init_program(Program &program, const ProgramInfo &info, int threads) {
  program.info = &info;
  program.stream = Stream(backend().kind(), threads);
  program.comm = Stream(backend().kind(), threads);
  program.synchronous_ops = backend().synchronous_ops();
  program.io = Stream(backend().kind(), threads);
}

void prepare_program(Program &program, ProgramMemory &memory, const TrainOptions &options,
                     int64_t dp_rank, int world_rank) {
  const ProgramInfo &info = *program.info;
  // Generated fused loops use OpenMP's default team size.
  if (options.threads > 0) omp_set_num_threads(options.threads);
  memory.device = allocate_arena(info.arena_bytes);
  program.arena = memory.device.get();
  allocate_spaces(program, memory.spaces,
                  options.nvme_path.empty() ? info.file_space_dir : options.nvme_path,
                  world_rank);
  load_params(program, options.weights, dp_rank);
  for (const ValueInfo &state : info.states) {
    acquire_persistent(program, state);
    zero_persistent(program, state);
  }
  load_masters(program, options.weights, dp_rank);
  reserve_pack_streams(info);
}

std::optional<LossScaler> start_loss_scaler(const ProgramInfo &info,
                                            const CheckpointPosition &position) {
  // A checkpoint resumes at another precision (docs/checkpoints.md): the
  // scale belongs to fp16's arithmetic, not to the model. A program that
  // does not scale its loss (fp32, bf16) drops an fp16 checkpoint's scaler;
  // an fp16 program resuming a checkpoint without one (fp32, bf16) starts
  // its scaler as a fresh run does, at 2^initial_scale_power (or the static
  // scale), and the dynamic scaler finds its level from there.
  std::optional<LossScaler> scaler;
  if (!info.train.loss_scaled)
    return scaler;
  scaler.emplace(info.train.loss_scaler);
  if (position.has_loss_scaler)
    scaler->restore({position.loss_scaler.scale, position.loss_scaler.hysteresis,
                     position.loss_scaler.iter, position.loss_scaler.last_overflow_iter});
  return scaler;
}

CheckpointPosition checkpoint_position(int64_t step, int64_t applied, int64_t skipped,
                                       const std::optional<LossScaler> &scaler) {
  CheckpointPosition position{step, applied, skipped};
  position.has_loss_scaler = scaler.has_value();
  if (!scaler) return position;
  const LossScaler::State state = scaler->state();
  position.loss_scaler = {state.scale, state.hysteresis, state.iter, state.last_overflow_iter};
  return position;
}

TrainOptions verdict_options(const TrainOptions &options, const std::optional<LossScaler> &scaler,
                             const ProgramInfo &info) {
  TrainOptions judged = options;
  if (scaler) {
    // fp16: an overflow is the scaler's business; its note reports it.
    judged.skip_nonfinite = judged.quiet = true;
  } else if (!options.nonfinite_given) {
    // bf16 (16-bit working copies, no scaler): a non-finite step is skipped
    // and reported, as DeepSpeed's bf16 optimizer skips it, never applied.
    for (const ParamInfo &param : info.params)
      if (param.dtype != param.stored) judged.skip_nonfinite = true;
  }
  return judged;
}

void update_loss_scaler(std::optional<LossScaler> &scaler, const StepVerdict &verdict,
                        int64_t step, StepLog &entry, std::string &step_error) {
  if (!scaler || verdict.failed || !step_error.empty()) return;
  try {
    const LossScaler::Update update = scaler->update(verdict.nonfinite(), step);
    entry.loss_scale = update.before;
    if (update.skipped || update.before != update.after)
      entry.scaler_note = LossScaler::describe(update);
  } catch (const std::exception &error) {
    step_error = error.what();
  }
}

bool is_loss_scale(const ProgramInfo &info, const ValueInfo &input) {
  return info.train.loss_scaled && input.name == kLossScaleInput;
}

namespace {
// A finite value with every digit (the loss scale: powers of two beyond
// what %.9g writes exactly).
std::string exact_number(double value) {
  char text[40];
  snprintf(text, sizeof(text), "%.17g", value);
  return text;
}
}  // namespace

double log_step(const TrainOptions &options, Program &program, bool rank0, FILE *log_json,
                int64_t samples, double start_us, const StepLog &entry) {
  const double step_us = now_us() - start_us;
  const double step_s = step_us / 1e6;
  const double samples_per_s = step_s > 0 ? static_cast<double>(samples) / step_s : 0.0;
  const int64_t print_every = program.info->train.steps_per_print;
  const int64_t arena_peak = program.memory.high_water_mark();
  if (!options.quiet && rank0 &&
      ((print_every > 0 && entry.step % print_every == 0) || entry.step == options.steps)) {
    char scale[64] = "";
    if (entry.loss_scale > 0) snprintf(scale, sizeof(scale), " | loss_scale %g", entry.loss_scale);
    printf("step %lld/%lld | loss %.6f | lr %.6e | grad_norm %.4f%s%s | %.2f ms | "
           "%.1f samples/s | arena peak %.1f MiB\n",
           static_cast<long long>(entry.step), static_cast<long long>(options.steps), entry.loss,
           entry.lr, entry.grad_norm, scale, entry.skipped ? " | skipped" : "",
           step_us / 1000.0, samples_per_s, arena_peak / (1024.0 * 1024.0));
    fflush(stdout);
  }
  // The scaler's changes are printed whatever steps_per_print says.
  if (!options.quiet && rank0 && !entry.scaler_note.empty()) {
    printf("step %lld: %s\n", static_cast<long long>(entry.step), entry.scaler_note.c_str());
    fflush(stdout);
  }
  if (log_json) {
    // Each space's measured high-water mark and planned arena.
    std::string spaces;
    for (int s = 0; s < kNumSpaces; ++s) {
      const Space space = static_cast<Space>(s);
      spaces += std::string(s ? ", " : "") + "\"" + space_name(space) + "\": {\"peak_bytes\": " +
                std::to_string(program.memory_of(space).high_water_mark()) +
                ", \"planned_bytes\": " +
                std::to_string(program.info->space(space).arena_bytes) + "}";
    }
    std::string file_io;
    if (program.file_arena) {
      const FileStoreStats now = program.file_arena->stats(), &last = program.file_io_logged;
      file_io = ", \"file_io\": {\"bytes_read\": " + std::to_string(now.bytes_read - last.bytes_read) +
                ", \"bytes_written\": " + std::to_string(now.bytes_written - last.bytes_written) +
                ", \"requests\": " + std::to_string(now.requests - last.requests) +
                ", \"read_busy_s\": " + json_number((now.read_busy_ns - last.read_busy_ns) / 1e9) +
                ", \"write_busy_s\": " +
                json_number((now.write_busy_ns - last.write_busy_ns) / 1e9) +
                ", \"wait_s\": " + json_number((now.wait_ns - last.wait_ns) / 1e9) + "}";
      program.file_io_logged = now;
    }
    fprintf(log_json,
            "{\"step\": %lld, \"loss\": %s, \"lr\": %s, \"grad_norm\": %s, "
            "\"step_time_s\": %s, \"samples_per_s\": %s, \"skipped\": %s, %s"
            "\"arena_peak_bytes\": %lld, \"arena_planned_bytes\": %lld, "
            "\"memory_spaces\": {%s}%s}\n",
            static_cast<long long>(entry.step), json_number(entry.loss).c_str(),
            json_number(entry.lr).c_str(), json_number(entry.grad_norm).c_str(),
            json_number(step_s).c_str(), json_number(samples_per_s).c_str(),
            entry.skipped ? "true" : "false",
            entry.loss_scale > 0
                ? ("\"loss_scale\": " + exact_number(entry.loss_scale) + ", ").c_str()
                : "",
            static_cast<long long>(arena_peak),
            static_cast<long long>(program.info->arena_bytes), spaces.c_str(), file_io.c_str());
    fflush(log_json);
    if (ferror(log_json)) throw Error("--log-json: cannot write '" + options.log_json + "'");
  }
  return step_us;
}

namespace {

// The kinds the log's summary reports: the first three always, send and
// recv when some rank used them.
constexpr CommOp kSummaryOps[kSummaryKinds] = {CommOp::AllReduce, CommOp::AllGather,
                                               CommOp::ReduceScatter, CommOp::Send, CommOp::Recv};
constexpr int kAlwaysSummarized = 3;

}  // namespace

std::vector<int64_t> gather_summary(RunnerComm &exchange, const Grid &grid,
                                    const TrafficStart &start, const Program &program) {
  const CommTally used =
      (CommTally::of(grid) - start.grid) - (exchange.own(grid) - start.runner);
  std::vector<int64_t> mine(kSummaryFields),
      all(static_cast<size_t>(exchange.size() * kSummaryFields));
  for (int s = 0; s < kNumSpaces; ++s)
    mine[s] = program.memory_of(static_cast<Space>(s)).high_water_mark();
  for (int i = 0; i < kSummaryKinds; ++i) {
    const int op = static_cast<int>(kSummaryOps[i]);
    mine[kNumSpaces + 3 * i] = used.sent[op];
    mine[kNumSpaces + 1 + 3 * i] = used.received[op];
    mine[kNumSpaces + 2 + 3 * i] = used.calls[op];
  }
  exchange.all_gather(Tensor{mine.data(), DType::I64, Shape{kSummaryFields}},
                      Tensor{all.data(), DType::I64, Shape{exchange.size() * kSummaryFields}});
  return all;
}

std::string summary_json(int64_t steps, int world, const std::vector<int64_t> &all,
                         const std::string &extra) {
  std::string out = "{\"summary\": true, \"steps\": " + std::to_string(steps) +
                    ", \"world\": " + std::to_string(world) + ", \"ranks\": [";
  int kinds = kAlwaysSummarized;
  for (int r = 0; r < world; ++r)
    for (int k = kAlwaysSummarized; k < kSummaryKinds; ++k)
      if (all[static_cast<size_t>(r) * kSummaryFields + kNumSpaces + 2 + 3 * k] > 0)
        kinds = kSummaryKinds;
  for (int r = 0; r < world; ++r) {
    const int64_t *v = all.data() + static_cast<size_t>(r) * kSummaryFields;
    out += std::string(r ? ", " : "") + "{\"rank\": " + std::to_string(r) +
           ", \"arena_peak_bytes\": " + std::to_string(v[0]) + ", \"memory_spaces\": {";
    for (int s = 0; s < kNumSpaces; ++s)
      out += std::string(s ? ", " : "") + "\"" + space_name(static_cast<Space>(s)) +
             "\": {\"peak_bytes\": " + std::to_string(v[s]) + "}";
    out += "}, \"collective_bytes\": {";
    for (int k = 0; k < kinds; ++k) {
      const int64_t *c = v + kNumSpaces + 3 * k;
      out += std::string(k ? ", " : "") + "\"" + comm_op_name(kSummaryOps[k]) +
             "\": {\"sent\": " + std::to_string(c[0]) + ", \"received\": " +
             std::to_string(c[1]) + ", \"calls\": " + std::to_string(c[2]) + "}";
    }
    out += "}}";
  }
  out += "]";
  if (!extra.empty()) out += ", " + extra;
  return out + "}";
}

void close_log(const TrainOptions &options, TrainOutputs &outputs, bool has_grid, int64_t steps,
               int world, const std::vector<int64_t> &all, const std::string &extra) {
  if (!outputs.log_json) return;
  if (has_grid)
    fprintf(outputs.log_json.get(), "%s\n", summary_json(steps, world, all, extra).c_str());
  if (fclose(outputs.log_json.release()) != 0)
    throw Error("--log-json: cannot write '" + options.log_json + "'");
}

std::string skipped_json(int64_t skipped) {
  return "\"skipped_steps\": " + std::to_string(skipped);
}

void print_trained(const TrainOptions &options, bool rank0, const Program &program,
                   int64_t steps, int64_t micro_steps, double total_us, int64_t skipped) {
  if (options.quiet || !rank0) return;
  if (skipped > 0)
    fprintf(stderr, "skipped %lld of %lld steps: their gradients or loss held a NaN or an "
                    "infinity (%s)\n",
            static_cast<long long>(skipped), static_cast<long long>(options.steps),
            program.info->train.loss_scaled ? "fp16 overflows, each lowering the loss scale or its hysteresis"
                                            : "--on-nonfinite skip");
  fprintf(stderr,
          "trained %lld steps (%lld micro steps) in %.3f s, mean step %.3f ms; arena: "
          "planned %lld bytes, measured high-water mark %lld bytes, peak live %lld bytes\n",
          static_cast<long long>(steps), static_cast<long long>(micro_steps),
          total_us / 1e6, total_us / 1000.0 / static_cast<double>(std::max<int64_t>(1, steps)),
          static_cast<long long>(program.info->arena_bytes),
          static_cast<long long>(program.memory.high_water_mark()),
          static_cast<long long>(program.memory.peak_live_bytes()));
  print_space_arenas(program);
}

}  // namespace runner
}  // namespace dsrt

// dsrt: what train_main and pipeline_main share (train_common.h).
#include "train_common.h"

#include "dsrt/backend.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <omp.h>
#include <sys/stat.h>

namespace dsrt {
namespace runner {

//===--- flags ------------------------------------------------------------------===//

namespace {

void train_usage(const char *argv0, Launch launch) {
  fprintf(stderr,
          "usage: %s --data DIR --steps N [--log-json FILE] [--save-onnx FILE]\n"
          "          [--external-data] [--seed S] [--weights DIR] [--threads N]\n"
          "          [--trace FILE] [--quiet]\n"
          "  --data DIR        one <input name>.npy per input of micro_step, holding\n"
          "                    [n, ranks * accumulation_steps * S0, S1, ...] for an\n"
          "                    input of shape [S0, S1, ...]: n global batches, used in\n"
          "                    turn; rank r takes micro-batches r*k .. r*k+k-1 of each\n"
          "                    (k = accumulation_steps; ranks = 1 without a dp grid)\n"
          "  --steps N         optimizer steps to run\n"
          "  --log-json FILE   one JSON object per step\n"
          "  --save-onnx FILE  after training, write the model with the trained weights\n"
          "  --external-data   ...with tensors of 1 KiB or more in FILE.data\n"
          "  --seed S          dropout seed (default 0)\n"
          "  --weights DIR     where the model's weight files are (default: the\n"
          "                    model's directory at compile time)\n"
          "  --threads N       threads for kernels (default: all cores)\n",
          argv0);
  if (launch == Launch::DataParallel)
    fprintf(stderr,
            "  --trace FILE      write a Chrome trace of the run (opens in Perfetto);\n"
            "                    rank r > 0 writes FILE.rank<r>\n"
            "  --quiet           print no step lines and no summary\n"
            "A program compiled for W ranks (--dp=W) runs as mpirun -np W %s ...\n",
            argv0);
  else
    fprintf(stderr,
            "  --trace FILE      rank 0 writes the measured pipeline schedule of every\n"
            "                    rank as a Chrome trace (opens in Perfetto)\n"
            "  --quiet           print no step lines and no summary\n"
            "The data inputs are those of the stages' functions; r above is the rank's\n"
            "dp coordinate. A program compiled for --pp=P and D data-parallel ranks runs\n"
            "as mpirun -np P*D %s ...\n",
            argv0);
}

// A whole decimal number without sign, so that "1e3", "-1" or "12x" are
// refused instead of read as something else.
bool parse_unsigned(const std::string &text, uint64_t &out) {
  if (text.empty() || !std::all_of(text.begin(), text.end(),
                                   [](char c) { return c >= '0' && c <= '9'; }))
    return false;
  errno = 0;
  char *end = nullptr;
  unsigned long long value = std::strtoull(text.c_str(), &end, 10);
  if (errno == ERANGE || *end) return false;
  out = value;
  return true;
}

}  // namespace

bool parse_train(int argc, char **argv, TrainOptions &options, Launch launch) {
  bool has_steps = false;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    auto value = [&](std::string &out) {
      if (i + 1 >= argc) throw Error("option " + arg + " needs a value");
      out = argv[++i];
    };
    std::string text;
    uint64_t number = 0;
    if (arg == "--data") value(options.data);
    else if (arg == "--log-json") value(options.log_json);
    else if (arg == "--save-onnx") value(options.save_onnx);
    else if (arg == "--weights") value(options.weights);
    else if (arg == "--trace") value(options.trace);
    else if (arg == "--external-data") options.external_data = true;
    else if (arg == "--quiet") options.quiet = true;
    else if (arg == "--steps") {
      value(text);
      if (!parse_unsigned(text, number) || number < 1 ||
          number > static_cast<uint64_t>(INT64_MAX))
        throw Error("--steps expects a positive integer, got '" + text + "'");
      options.steps = static_cast<int64_t>(number);
      has_steps = true;
    } else if (arg == "--seed") {
      value(text);
      if (!parse_unsigned(text, number) || number > 0xffffffffull)
        throw Error("--seed expects an integer in [0, 2^32), got '" + text + "'");
      options.seed = number;
    } else if (arg == "--threads") {
      value(text);
      if (!parse_unsigned(text, number) || number < 1 || number > 4096)
        throw Error("--threads expects a positive integer, got '" + text + "'");
      options.threads = static_cast<int>(number);
    } else if (arg == "--help" || arg == "-h") {
      train_usage(argv[0], launch);
      return false;
    } else {
      throw Error("unknown option '" + arg + "' (see --help)");
    }
  }
  if (options.data.empty() || !has_steps)
    throw Error("--data and --steps are required (see --help)");
  if (options.external_data && options.save_onnx.empty())
    throw Error("--external-data only applies to --save-onnx FILE");
  return true;
}

//===--- the description ----------------------------------------------------------===//

const FunctionInfo &find_function(const ProgramInfo &info, const std::string &name) {
  for (const FunctionInfo &function : info.functions)
    if (function.name == name) return function;
  throw Error("the program has no function '" + name + "' (is it a training program?)");
}

int find_function_index(const ProgramInfo &info, const std::string &name) {
  for (size_t i = 0; i < info.functions.size(); ++i)
    if (info.functions[i].name == name) return static_cast<int>(i);
  return -1;
}

int64_t find_value(const std::vector<ValueInfo> &values, const std::string &name,
                   const std::string &what) {
  for (size_t i = 0; i < values.size(); ++i)
    if (values[i].name == name) return static_cast<int64_t>(i);
  std::string names;
  for (const ValueInfo &value : values) names += (names.empty() ? "'" : ", '") + value.name + "'";
  throw Error(what + " '" + name + "' is missing (it has " +
              (names.empty() ? std::string("none") : names) + ")");
}

void check_in_arena(const ProgramInfo &info, const ValueInfo &value, const std::string &what) {
  int64_t bytes = static_cast<int64_t>(Tensor{nullptr, value.dtype, value.shape}.nbytes());
  if (value.offset < 0 || value.offset + bytes > info.arena_bytes)
    throw Error("memory plan: " + what + " '" + value.name + "' at offset " +
                std::to_string(value.offset) + " (" + std::to_string(bytes) +
                " bytes) is outside the " + std::to_string(info.arena_bytes) + "-byte arena");
}

void check_function_plan(const ProgramInfo &info, const std::string &name) {
  const FunctionInfo &function = find_function(info, name);
  if (function.arena_bytes > info.arena_bytes)
    throw Error(std::string("memory plan: ") + name + " plans " +
                std::to_string(function.arena_bytes) + " bytes, more than the program's " +
                std::to_string(info.arena_bytes) + "-byte arena");
  for (const ValueInfo &input : function.inputs)
    if (is_data(input))  // a pipeline stage reads the others where they are
      check_in_arena(info, input, std::string(name) + " input");
}

bool starts_with(const std::string &text, const char *prefix) {
  return text.compare(0, std::strlen(prefix), prefix) == 0;
}

bool is_data(const ValueInfo &input) {
  return !starts_with(input.name, "recv:") && !starts_with(input.name, "stash:") &&
         !starts_with(input.name, "wstash:");
}

void check_training_basics(const ProgramInfo &info) {
  const TrainInfo &train = info.train;
  if (train.accumulation_steps < 1)
    throw Error("training program: accumulation_steps is " +
                std::to_string(train.accumulation_steps) + "; it must be at least 1");
  if (train.micro_batch < 1)
    throw Error("training program: micro_batch is " + std::to_string(train.micro_batch) +
                "; it must be at least 1");
  scheduled_lr(train, 1);  // throws for an unknown schedule
  if (train.schedule == "WarmupCosineLR" &&
      train.total_num_steps == std::max<int64_t>(2, train.warmup_num_steps))
    throw Error("WarmupCosineLR: total_num_steps (" + std::to_string(train.total_num_steps) +
                ") must differ from warmup_num_steps, or the cosine has no steps");
  for (const ParamInfo &param : info.params) check_in_arena(info, param, "parameter");
  for (const ValueInfo &state : info.states) {
    check_in_arena(info, state, "state");
    if (state.offset + static_cast<int64_t>(Tensor{nullptr, state.dtype, state.shape}.nbytes()) >
        info.persistent_bytes)
      throw Error("memory plan: state '" + state.name + "' lies above persistent_bytes (" +
                  std::to_string(info.persistent_bytes) + ")");
  }
}

void check_optimizer_step(const ProgramInfo &info) {
  const FunctionInfo &optimizer = find_function(info, "optimizer_step");
  const ValueInfo &lr = optimizer.inputs[find_value(optimizer.inputs, "lr", "optimizer_step input")];
  if (!is_float(lr.dtype) || lr.shape.numel() != 1)
    throw Error("optimizer_step input 'lr' is " + std::string(dtype_name(lr.dtype)) + " " +
                lr.shape.str() + "; expected an f32 scalar");
  const ValueInfo &step =
      optimizer.inputs[find_value(optimizer.inputs, "step", "optimizer_step input")];
  if (is_float(step.dtype) || step.dtype == DType::Bool || step.shape.numel() != 1)
    throw Error("optimizer_step input 'step' is " + std::string(dtype_name(step.dtype)) + " " +
                step.shape.str() + "; expected an i64 scalar");
  const ValueInfo &norm =
      optimizer.outputs[find_value(optimizer.outputs, "grad_norm", "optimizer_step output")];
  if (!is_float(norm.dtype) || norm.shape.numel() != 1)
    throw Error("optimizer_step output 'grad_norm' is " + std::string(dtype_name(norm.dtype)) +
                " " + norm.shape.str() + "; expected a float scalar");
}

void check_job_size(const ProgramInfo &info, int job_ranks) {
  if (info.world == job_ranks) return;
  std::string grid;
  for (size_t i = 0; i < info.grid_names.size(); ++i)
    grid += (i ? " --" : "--") + info.grid_names[i] + "=" + std::to_string(info.grid_sizes[i]);
  if (grid.empty()) grid = "no grid";
  throw Error("the program was compiled for " + std::to_string(info.world) + " ranks (" + grid +
              "; world " + std::to_string(info.world) + ") but the job has " +
              std::to_string(job_ranks) + "; run it with mpirun -np " +
              std::to_string(info.world));
}

//===--- data --------------------------------------------------------------------===//

namespace {

// A global batch holds `ranks` * accumulation_steps micro-batches (rank r's
// are r*k .. r*k+k-1).
std::string expected_layout(const ValueInfo &input, int64_t accumulation_steps, int64_t ranks) {
  std::string dims = "n";
  if (input.shape.rank > 0) {
    dims += ", " + std::to_string(ranks * accumulation_steps * input.shape[0]);
    for (int d = 1; d < input.shape.rank; ++d) dims += ", " + std::to_string(input.shape[d]);
  }
  std::string text = std::string(dtype_name(input.dtype)) + " [" + dims + "]";
  if (input.shape.rank > 0)
    text += " (n >= 1 batches of " +
            (ranks > 1 ? std::to_string(ranks) + " ranks x " : std::string()) +
            std::to_string(accumulation_steps) + " micro-batches of " + input.shape.str() + ")";
  else
    text += " (one value per batch)";
  return text;
}

}  // namespace

std::vector<InputData> load_data(const std::vector<const ValueInfo *> &inputs,
                                 const std::string &dir, int64_t accumulation_steps,
                                 int64_t ranks) {
  struct stat st;
  if (stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    throw Error("--data '" + dir + "' is not a directory");
  std::vector<InputData> data;
  for (const ValueInfo *input_info : inputs) {
    const ValueInfo &input = *input_info;
    std::string path = dir + "/" + file_name_for(input.name) + ".npy";
    std::string expected = expected_layout(input, accumulation_steps, ranks);
    if (stat(path.c_str(), &st) != 0)
      throw Error("input '" + input.name + "': missing file '" + path + "'; expected " +
                  expected);
    InputData item;
    item.input = &input;
    try {
      item.array = read_npy(path);
    } catch (const Error &error) {
      throw Error("input '" + input.name + "': " + error.what() + "; expected " + expected);
    }
    const Shape &shape = item.array.shape;
    bool matches = item.array.dtype == input.dtype && shape.rank == input.shape.rank + 1 &&
                   shape[0] >= 1;
    if (matches && input.shape.rank > 0)
      matches = shape[1] == ranks * accumulation_steps * input.shape[0];
    for (int d = 1; matches && d < input.shape.rank; ++d)
      matches = shape[d + 1] == input.shape[d];
    if (!matches)
      throw Error("input '" + input.name + "': '" + path + "' holds " +
                  dtype_name(item.array.dtype) + " " + shape.str() + ", expected " + expected);
    item.batches = shape[0];
    item.micro_bytes = Tensor{nullptr, input.dtype, input.shape}.nbytes();
    item.per_batch_scalar = input.shape.rank == 0;
    item.batch_bytes = item.per_batch_scalar
                           ? item.micro_bytes
                           : item.micro_bytes * static_cast<size_t>(ranks * accumulation_steps);
    if (!data.empty() && item.batches != data.front().batches)
      throw Error("input '" + input.name + "': '" + path + "' holds " +
                  std::to_string(item.batches) + " batches but input '" +
                  data.front().input->name + "' ('" + data.front().array.path + "') holds " +
                  std::to_string(data.front().batches) +
                  "; every data file needs the same number of batches");
    data.push_back(std::move(item));
  }
  return data;
}

void load_micro_batch(Program &program, const InputData &item, const ValueInfo &slot,
                      int64_t batch, int64_t global_micro) {
  program.memory.acquire(slot.offset, slot_size(*program.info, item.micro_bytes));
  size_t offset = static_cast<size_t>(batch) * item.batch_bytes;
  if (!item.per_batch_scalar) offset += static_cast<size_t>(global_micro) * item.micro_bytes;
  backend(program.stream)
      .copy(program.stream, program.arena + slot.offset, item.array.bytes.data() + offset,
            item.micro_bytes);
}

//===--- running -----------------------------------------------------------------===//

void run_function(Program &program, RunFn run, int index) {
  program.outputs.clear();
  if (program.tracer) program.tracer->set_function(index);
  run_to_completion(program, run);
}

double run_optimizer_step(Program &program, RunFn optimizer_step, double lr, int64_t step) {
  const ProgramInfo &info = *program.info;
  const int optimizer_index = find_function_index(info, "optimizer_step");
  const FunctionInfo &optimizer = info.functions[optimizer_index];
  const ValueInfo &lr_input = optimizer.inputs[find_value(optimizer.inputs, "lr", "")];
  const ValueInfo &step_input = optimizer.inputs[find_value(optimizer.inputs, "step", "")];
  const int64_t grad_norm_index = find_value(optimizer.outputs, "grad_norm", "");
  program.memory.acquire(lr_input.offset,
                         slot_size(info, dtype_size(lr_input.dtype) * lr_input.shape.numel()));
  write_scalar(program.stream,
               Tensor{program.arena + lr_input.offset, lr_input.dtype, lr_input.shape},
               static_cast<float>(lr));
  program.memory.acquire(
      step_input.offset, slot_size(info, dtype_size(step_input.dtype) * step_input.shape.numel()));
  write_scalar(program.stream,
               Tensor{program.arena + step_input.offset, step_input.dtype, step_input.shape},
               static_cast<double>(step));
  run_function(program, optimizer_step, optimizer_index);
  if (static_cast<int64_t>(program.outputs.size()) <= grad_norm_index ||
      !program.outputs[grad_norm_index].data)
    throw Error("optimizer_step did not produce its output 'grad_norm'");
  return read_scalar(program.stream, program.outputs[grad_norm_index]);
}

void check_arena_peak(const Program &program, int64_t step) {
  const int64_t peak = program.memory.high_water_mark();
  const int64_t planned = program.info->arena_bytes;
  if (step == 1 && peak != planned)
    throw Error("memory plan violated: after step 1 the arena's measured high-water mark "
                "is " + std::to_string(peak) + " bytes but the plan is " +
                std::to_string(planned) + " bytes");
}

//===--- the runner's exchanges between ranks ------------------------------------===//

CommTally CommTally::of(const Communicator &comm) {
  CommTally t;
  for (int op = 0; op < kNumCommOps; ++op) {
    CommCounters c = comm.counters(static_cast<CommOp>(op));
    t.calls[op] = c.calls;
    t.sent[op] = c.bytes_sent;
    t.received[op] = c.bytes_received;
  }
  return t;
}

CommTally CommTally::of(const Grid &grid) {
  CommTally t;
  for (const Communicator *comm : grid.communicators()) t += of(*comm);
  return t;
}

CommTally &CommTally::operator+=(const CommTally &o) {
  for (int op = 0; op < kNumCommOps; ++op) {
    calls[op] += o.calls[op];
    sent[op] += o.sent[op];
    received[op] += o.received[op];
  }
  return *this;
}

CommTally CommTally::operator-(const CommTally &o) const {
  CommTally t = *this;
  for (int op = 0; op < kNumCommOps; ++op) {
    t.calls[op] -= o.calls[op];
    t.sent[op] -= o.sent[op];
    t.received[op] -= o.received[op];
  }
  return t;
}

int run_reporting_errors(const std::function<int()> &body) {
  try {
    return body();
  } catch (const ReportedFailure &) {
    return 1;
  } catch (const std::exception &error) {
    fprintf(stderr, "error: %s\n", error.what());
    return 1;
  }
}

void RunnerComm::all_gather(Communicator &comm, const Tensor &in, const Tensor &out) {
  if (comm.size() == 1) {
    read_to_host(stream_, out.data, in);
    return;
  }
  CommTally before = CommTally::of(comm);
  comm.all_gather(stream_, in, out).wait();
  own_ += CommTally::of(comm) - before;
}

void RunnerComm::send_recv(Communicator &comm, const std::vector<P2POp> &ops) {
  if (ops.empty()) return;
  CommTally before = CommTally::of(comm);
  comm.send_recv(stream_, ops).wait();
  own_ += CommTally::of(comm) - before;
}

void RunnerComm::barrier() {
  if (size() == 1) return;
  CommTally before = CommTally::of(comm_);
  comm_.barrier(stream_).wait();
  own_ += CommTally::of(comm_) - before;
}

void RunnerComm::agree(const std::string &error, const std::string &when) {
  int32_t mine = error.empty() ? 0 : 1;
  std::vector<int32_t> all(static_cast<size_t>(size()));
  try {
    all_gather(Tensor{&mine, DType::I32, Shape{1}}, Tensor{all.data(), DType::I32, Shape{size()}});
  } catch (const std::exception &) {
    if (error.empty()) throw;
    all.assign(all.size(), 0);  // report this rank's own error, not the exchange's
    all[static_cast<size_t>(rank())] = 1;
  }
  fail_if_any(error, all, when);
}

void RunnerComm::gather_step_reports(const std::string &error, std::vector<float> &report,
                                     std::vector<float> &reports, int64_t step) {
  const int64_t width = static_cast<int64_t>(report.size());
  report[0] = error.empty() ? 0.0f : 1.0f;
  try {
    all_gather(Tensor{report.data(), DType::F32, Shape{width}},
               Tensor{reports.data(), DType::F32, Shape{size() * width}});
  } catch (const std::exception &) {
    if (error.empty()) throw;
    reports.assign(reports.size(), 0.0f);
    reports[static_cast<size_t>(rank() * width)] = 1.0f;
  }
  std::vector<int32_t> failed(static_cast<size_t>(size()));
  for (int64_t r = 0; r < size(); ++r)
    failed[static_cast<size_t>(r)] = reports[static_cast<size_t>(r * width)] != 0.0f;
  fail_if_any(error, failed, "at step " + std::to_string(step));
}

void RunnerComm::fail_if_any(const std::string &error, const std::vector<int32_t> &failed,
                             const std::string &when) {
  std::string ranks;
  int count = 0;
  for (size_t r = 0; r < failed.size(); ++r)
    if (failed[r]) {
      ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
      ++count;
    }
  if (count == 0) return;
  if (!error.empty())
    fprintf(stderr, "error: %s\n", error.c_str());
  else
    fprintf(stderr, "error: rank %d: %s %s failed %s: see %s message\n", rank(),
            count == 1 ? "rank" : "ranks", ranks.c_str(), when.c_str(),
            count == 1 ? "its" : "their");
  throw ReportedFailure{};
}

//===--- the log ----------------------------------------------------------------===//

std::string json_number(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "Infinity" : "-Infinity";
  char buffer[32];
  snprintf(buffer, sizeof(buffer), "%.9g", value);
  return buffer;
}

void open_outputs(const TrainOptions &options, const ProgramInfo &save_info, bool rank0,
                  TrainOutputs &outputs) {
  // Refuse a model that cannot be saved before training, not after.
  if (!options.save_onnx.empty() && rank0) {
    struct stat st;
    std::string out_dir = directory_of(options.save_onnx);
    if (stat(out_dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
      throw Error("--save-onnx '" + options.save_onnx + "': directory '" + out_dir +
                  "' does not exist");
    outputs.save_source = prepare_save_onnx(save_info, options.weights);
  }
  if (!options.log_json.empty() && rank0) {
    outputs.log_json.reset(fopen(options.log_json.c_str(), "w"));
    if (!outputs.log_json) throw Error("--log-json: cannot write '" + options.log_json + "'");
  }
}

void init_program(Program &program, const ProgramInfo &info, int threads) {
  program.info = &info;
  program.stream = Stream(backend().kind(), threads);
  program.comm = Stream(backend().kind(), threads);
}

void prepare_program(Program &program, ProgramArena &arena, const TrainOptions &options,
                     int64_t dp_rank) {
  const ProgramInfo &info = *program.info;
  // Generated fused loops use OpenMP's default team size.
  if (options.threads > 0) omp_set_num_threads(options.threads);
  arena = allocate_arena(info.arena_bytes);
  program.arena = arena.get();
  load_params(program, options.weights, dp_rank);
  for (const ValueInfo &state : info.states) {
    Tensor slot{program.arena + state.offset, state.dtype, state.shape};
    program.memory.acquire(state.offset, slot_size(info, slot.nbytes()));
    fill_async(program.stream, slot, 0.0);
  }
}

double log_step(const TrainOptions &options, const Program &program, bool rank0, FILE *log_json,
                int64_t samples, double start_us, const StepLog &entry) {
  const double step_us = now_us() - start_us;
  const double step_s = step_us / 1e6;
  const double samples_per_s = step_s > 0 ? static_cast<double>(samples) / step_s : 0.0;
  const int64_t print_every = program.info->train.steps_per_print;
  const int64_t arena_peak = program.memory.high_water_mark();
  if (!options.quiet && rank0 &&
      ((print_every > 0 && entry.step % print_every == 0) || entry.step == options.steps)) {
    printf("step %lld/%lld | loss %.6f | lr %.6e | grad_norm %.4f | %.2f ms | "
           "%.1f samples/s | arena peak %.1f MiB\n",
           static_cast<long long>(entry.step), static_cast<long long>(options.steps), entry.loss,
           entry.lr, entry.grad_norm, step_us / 1000.0, samples_per_s,
           arena_peak / (1024.0 * 1024.0));
    fflush(stdout);
  }
  if (log_json) {
    fprintf(log_json,
            "{\"step\": %lld, \"loss\": %s, \"lr\": %s, \"grad_norm\": %s, "
            "\"step_time_s\": %s, \"samples_per_s\": %s, \"arena_peak_bytes\": %lld, "
            "\"arena_planned_bytes\": %lld}\n",
            static_cast<long long>(entry.step), json_number(entry.loss).c_str(),
            json_number(entry.lr).c_str(), json_number(entry.grad_norm).c_str(),
            json_number(step_s).c_str(), json_number(samples_per_s).c_str(),
            static_cast<long long>(arena_peak),
            static_cast<long long>(program.info->arena_bytes));
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
                                    const TrafficStart &start, int64_t arena_peak) {
  const CommTally used = (CommTally::of(grid) - start.grid) - (exchange.own() - start.runner);
  std::vector<int64_t> mine(kSummaryFields),
      all(static_cast<size_t>(exchange.size() * kSummaryFields));
  mine[0] = arena_peak;
  for (int i = 0; i < kSummaryKinds; ++i) {
    const int op = static_cast<int>(kSummaryOps[i]);
    mine[1 + 3 * i] = used.sent[op];
    mine[2 + 3 * i] = used.received[op];
    mine[3 + 3 * i] = used.calls[op];
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
      if (all[static_cast<size_t>(r) * kSummaryFields + 3 + 3 * k] > 0) kinds = kSummaryKinds;
  for (int r = 0; r < world; ++r) {
    const int64_t *v = all.data() + static_cast<size_t>(r) * kSummaryFields;
    out += std::string(r ? ", " : "") + "{\"rank\": " + std::to_string(r) +
           ", \"arena_peak_bytes\": " + std::to_string(v[0]) + ", \"collective_bytes\": {";
    for (int k = 0; k < kinds; ++k) {
      const int64_t *c = v + 1 + 3 * k;
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

void print_trained(const TrainOptions &options, bool rank0, const Program &program,
                   int64_t micro_steps, double total_us) {
  if (options.quiet || !rank0) return;
  fprintf(stderr,
          "trained %lld steps (%lld micro steps) in %.3f s, mean step %.3f ms; arena: "
          "planned %lld bytes, measured high-water mark %lld bytes, peak live %lld bytes\n",
          static_cast<long long>(options.steps), static_cast<long long>(micro_steps),
          total_us / 1e6, total_us / 1000.0 / static_cast<double>(options.steps),
          static_cast<long long>(program.info->arena_bytes),
          static_cast<long long>(program.memory.high_water_mark()),
          static_cast<long long>(program.memory.peak_live_bytes()));
}

}  // namespace runner
}  // namespace dsrt

// dsrt: the runner of generated training programs (train_main) and
// DeepSpeed's learning-rate schedules.
#include "dsrt/comm.h"
#include "dsrt/npy.h"
#include "dsrt/program.h"
#include "runner.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <omp.h>
#include <sys/stat.h>

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

//===--- train_main -----------------------------------------------------------===//

namespace {

struct TrainOptions {
  std::string data, log_json, save_onnx, weights, trace;
  int64_t steps = 0;
  uint64_t seed = 0;
  int threads = 0;
  bool external_data = false, quiet = false;
};

void train_usage(const char *argv0) {
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
          "  --threads N       threads for kernels (default: all cores)\n"
          "  --trace FILE      write a Chrome trace of the run (opens in Perfetto);\n"
          "                    rank r > 0 writes FILE.rank<r>\n"
          "  --quiet           print no step lines and no summary\n"
          "A program compiled for W ranks (--dp=W) runs as mpirun -np W %s ...\n",
          argv0, argv0);
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

bool parse_train(int argc, char **argv, TrainOptions &options) {
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
      train_usage(argv[0]);
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

// Checks what train_main relies on before anything runs.
void check_training_program(const ProgramInfo &info) {
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
  for (const char *name : {"micro_step", "optimizer_step"}) {
    const FunctionInfo &function = find_function(info, name);
    if (function.arena_bytes > info.arena_bytes)
      throw Error(std::string("memory plan: ") + name + " plans " +
                  std::to_string(function.arena_bytes) + " bytes, more than the program's " +
                  std::to_string(info.arena_bytes) + "-byte arena");
    for (const ValueInfo &input : function.inputs)
      check_in_arena(info, input, std::string(name) + " input");
  }
  const FunctionInfo &micro = find_function(info, "micro_step");
  if (micro.outputs.empty())
    throw Error("micro_step has no outputs; its output 0 must be the loss");
  if (!is_float(micro.outputs[0].dtype) || micro.outputs[0].shape.numel() != 1)
    throw Error("micro_step's output 0 '" + micro.outputs[0].name + "' is " +
                dtype_name(micro.outputs[0].dtype) + " " + micro.outputs[0].shape.str() +
                "; the loss must be a float scalar");
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

// One data file: `batches` global batches of one input, each holding
// accumulation_steps micro-batches.
struct InputData {
  const ValueInfo *input = nullptr;
  NpyArray array;
  int64_t batches = 0;
  size_t micro_bytes = 0;  // one micro-batch (the input's slot)
  size_t batch_bytes = 0;  // one global batch in the file
  bool per_batch_scalar = false;  // rank-0 input: one value per global batch
};

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

std::vector<InputData> load_data(const FunctionInfo &micro, const std::string &dir,
                                 int64_t accumulation_steps, int64_t ranks) {
  struct stat st;
  if (stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    throw Error("--data '" + dir + "' is not a directory");
  std::vector<InputData> data;
  for (const ValueInfo &input : micro.inputs) {
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

// Float as JSON (with full precision); NaN and infinities as Python's json
// module reads and writes them.
std::string json_number(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "Infinity" : "-Infinity";
  char buffer[32];
  snprintf(buffer, sizeof(buffer), "%.9g", value);
  return buffer;
}

struct FileCloser {
  void operator()(FILE *f) const {
    if (f) fclose(f);
  }
};

void run_function(Program &program, RunFn run, int index) {
  program.outputs.clear();
  if (program.tracer) program.tracer->set_function(index);
  run_to_completion(program, run);
}

//===--- data parallelism: what the runner exchanges between ranks ----------===//

// The program must run on as many ranks as its grid has, and be
// data-parallel: every axis but dp of size 1.
void check_grid(const ProgramInfo &info, int job_ranks) {
  if (info.axis_size("pp") > 1)
    throw Error("pipeline programs are not supported by this runtime yet (the grid has pp=" +
                std::to_string(info.axis_size("pp")) +
                "; train runs data-parallel grids, where every axis but dp has size 1)");
  if (info.axis_size("tp") > 1)
    throw Error("tensor-parallel programs are not supported by this runtime yet (the grid has "
                "tp=" + std::to_string(info.axis_size("tp")) +
                "; train runs data-parallel grids, where every axis but dp has size 1)");
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

// Payload bytes and calls of every kind of collective, as the communicator
// counts them.
struct CommTally {
  int64_t calls[kNumCommOps] = {}, sent[kNumCommOps] = {}, received[kNumCommOps] = {};

  static CommTally of(const Communicator &comm) {
    CommTally t;
    for (int op = 0; op < kNumCommOps; ++op) {
      CommCounters c = comm.counters(static_cast<CommOp>(op));
      t.calls[op] = c.calls;
      t.sent[op] = c.bytes_sent;
      t.received[op] = c.bytes_received;
    }
    return t;
  }
  // Summed over every communicator of a grid.
  static CommTally of(const Grid &grid) {
    CommTally t;
    for (const Communicator *comm : grid.communicators()) t += of(*comm);
    return t;
  }
  CommTally &operator+=(const CommTally &o) {
    for (int op = 0; op < kNumCommOps; ++op) {
      calls[op] += o.calls[op];
      sent[op] += o.sent[op];
      received[op] += o.received[op];
    }
    return *this;
  }
  CommTally operator-(const CommTally &o) const {
    CommTally t = *this;
    for (int op = 0; op < kNumCommOps; ++op) {
      t.calls[op] -= o.calls[op];
      t.sent[op] -= o.sent[op];
      t.received[op] -= o.received[op];
    }
    return t;
  }
};

// The kinds the log's summary reports: the first three always, send and
// recv when some rank used them.
constexpr CommOp kSummaryOps[] = {CommOp::AllReduce, CommOp::AllGather, CommOp::ReduceScatter,
                                  CommOp::Send, CommOp::Recv};
constexpr int kSummaryKinds = 5, kAlwaysSummarized = 3;
// Arena peak, then sent/received/calls per kind.
constexpr int kSummaryFields = 1 + 3 * kSummaryKinds;

// Thrown once a rank's failure has been reported on every rank.
struct ReportedFailure {};

// The collectives the runner itself issues (agreeing on errors, the step's
// losses, the summary, gathering sharded parameters) go through here: on a
// stream of their own, waited for at once, and their bytes kept apart so
// that the program's own traffic can be measured. A world of one rank
// exchanges nothing.
class RunnerComm {
public:
  explicit RunnerComm(Communicator &comm) : comm_(comm) {}
  int rank() const { return comm_.rank(); }
  int size() const { return comm_.size(); }
  const CommTally &own() const { return own_; }

  // out = every rank's in, in rank order (out.numel() == size * in.numel()).
  void all_gather(const Tensor &in, const Tensor &out) {
    if (size() == 1) {
      if (in.nbytes() > 0) std::memcpy(out.data, in.data, in.nbytes());
      return;
    }
    CommTally before = CommTally::of(comm_);
    comm_.all_gather(stream_, in, out).wait();
    own_ += CommTally::of(comm_) - before;
  }

  // Whether any rank failed (`error` non-empty on the ranks that did); if
  // one did, every rank reports and throws ReportedFailure. `when` says
  // what failed ("before training", "at step 3").
  void agree(const std::string &error, const std::string &when) {
    int32_t mine = error.empty() ? 0 : 1;
    std::vector<int32_t> all(static_cast<size_t>(size()));
    try {
      all_gather(Tensor{&mine, DType::I32, Shape{1}},
                 Tensor{all.data(), DType::I32, Shape{size()}});
    } catch (const std::exception &) {
      if (error.empty()) throw;
      all.assign(all.size(), 0);  // report this rank's own error, not the exchange's
      all[static_cast<size_t>(rank())] = 1;
    }
    fail_if_any(error, all, when);
  }

  // Reports `error` (this rank's) or the ranks in `failed` that did fail.
  void fail_if_any(const std::string &error, const std::vector<int32_t> &failed,
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

private:
  Communicator &comm_;
  Stream stream_{Backend::Cpu};
  CommTally own_;
};

std::string summary_json(int64_t steps, int world, const std::vector<int64_t> &all) {
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
  return out + "]}";
}

}  // namespace

int train_main(int argc, char **argv, DescribeFn describe, RunFn micro_step,
               RunFn optimizer_step) {
  try {
    TrainOptions options;
    if (!parse_train(argc, argv, options)) return 0;
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
    // check_grid leaves only dp > 1, so the world is the dp group: the
    // runner's own exchanges below (errors, losses, the summary, sharded
    // parameters) run on the world, in dp order.
    const int64_t ranks = info.world;
    // Data and dropout masks follow the rank's place along dp.
    const int64_t dp = info.dp_size();
    const int64_t dp_axis = info.grid_axis("dp");
    const int64_t dp_rank = dp_axis < 0 ? 0 : grid->coordinate(dp_axis);
    const bool rank0 = rank == 0;
    const int micro_index = find_function_index(info, "micro_step");
    const int optimizer_index = find_function_index(info, "optimizer_step");
    const FunctionInfo &micro = info.functions[micro_index];
    const FunctionInfo &optimizer = info.functions[optimizer_index];
    const ValueInfo &lr_input = optimizer.inputs[find_value(optimizer.inputs, "lr", "")];
    const ValueInfo &step_input = optimizer.inputs[find_value(optimizer.inputs, "step", "")];
    const int64_t grad_norm_index = find_value(optimizer.outputs, "grad_norm", "");
    RunnerComm exchange(comm);

    // What can differ between ranks (files, memory) is set up on every rank
    // before they agree to start.
    std::vector<InputData> data;
    int64_t batches = 1;
    std::shared_ptr<const OnnxSaveSource> save_source;
    std::unique_ptr<FILE, FileCloser> log_json;
    Program program;
    program.info = &info;
    program.stream = Stream(Backend::Cpu, options.threads);
    program.comm = Stream(Backend::Cpu, options.threads);
    Arena arena;
    Tracer tracer;
    std::string setup_error;
    try {
      data = load_data(micro, options.data, train.accumulation_steps, dp);
      batches = data.empty() ? 1 : data.front().batches;

      // Refuse a model that cannot be saved before training, not after.
      if (!options.save_onnx.empty() && rank0) {
        struct stat st;
        std::string out_dir = directory_of(options.save_onnx);
        if (stat(out_dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
          throw Error("--save-onnx '" + options.save_onnx + "': directory '" + out_dir +
                      "' does not exist");
        save_source = prepare_save_onnx(info, options.weights);
      }
      if (!options.log_json.empty() && rank0) {
        log_json.reset(fopen(options.log_json.c_str(), "w"));
        if (!log_json) throw Error("--log-json: cannot write '" + options.log_json + "'");
      }

      // Generated fused loops use OpenMP's default team size.
      if (options.threads > 0) omp_set_num_threads(options.threads);
      arena = allocate_arena(info.arena_bytes);
      program.arena = arena.get();
      if (!options.trace.empty()) program.tracer = &tracer;

      load_params(program, options.weights, dp_rank);
      for (const ValueInfo &state : info.states) {
        Tensor slot{program.arena + state.offset, state.dtype, state.shape};
        program.memory.acquire(state.offset, slot_size(info, slot.nbytes()));
        std::memset(slot.data, 0, slot.nbytes());
      }
    } catch (const std::exception &error) {
      setup_error = error.what();
    }
    exchange.agree(setup_error, "before training");

    const int64_t k = train.accumulation_steps;
    const int64_t samples_per_step = train.micro_batch * k * dp;
    const int64_t print_every = train.steps_per_print;
    // The program's collectives are what the counters gain over the run less
    // what the runner's own exchanges add.
    const CommTally comm_start = CommTally::of(*grid);
    const CommTally runner_start = exchange.own();
    uint64_t micro_steps_run = 0;
    double total_us = 0;
    // Per rank and step: a failure flag, then the k micro-batch losses.
    std::vector<float> report(static_cast<size_t>(k + 1));
    std::vector<float> reports(static_cast<size_t>(ranks * (k + 1)));
    for (int64_t step = 1; step <= options.steps; ++step) {
      double start = now_us();
      const int64_t batch = (step - 1) % batches;
      double lr = 0, grad_norm = 0;
      std::string step_error;
      try {
        for (int64_t micro_batch = 0; micro_batch < k; ++micro_batch) {
          // This rank's micro-batches of the global batch: dp_rank * k ...
          const int64_t global_micro = dp_rank * k + micro_batch;
          for (const InputData &item : data) {
            const ValueInfo &input = *item.input;
            program.memory.acquire(input.offset, slot_size(info, item.micro_bytes));
            size_t offset = static_cast<size_t>(batch) * item.batch_bytes;
            if (!item.per_batch_scalar)
              offset += static_cast<size_t>(global_micro) * item.micro_bytes;
            std::memcpy(program.arena + input.offset, item.array.bytes.data() + offset,
                        item.micro_bytes);
          }
          // The masks of the same micro-batch in a single-rank run with
          // dp * k accumulation steps.
          set_rng_counter((options.seed << 32) +
                          static_cast<uint64_t>((step - 1) * dp * k + global_micro));
          run_function(program, micro_step, micro_index);
          ++micro_steps_run;
          if (program.outputs.empty() || !program.outputs[0].data)
            throw Error("micro_step did not produce its output 0 '" + micro.outputs[0].name +
                        "'");
          report[static_cast<size_t>(1 + micro_batch)] = load_float(program.outputs[0], 0);
          program.memory.release_from(info.persistent_bytes);
        }

        lr = scheduled_lr(train, step);
        program.memory.acquire(
            lr_input.offset, slot_size(info, dtype_size(lr_input.dtype) * lr_input.shape.numel()));
        store_float(Tensor{program.arena + lr_input.offset, lr_input.dtype, lr_input.shape}, 0,
                    static_cast<float>(lr));
        program.memory.acquire(
            step_input.offset,
            slot_size(info, dtype_size(step_input.dtype) * step_input.shape.numel()));
        store_int(Tensor{program.arena + step_input.offset, step_input.dtype, step_input.shape},
                  0, step);
        run_function(program, optimizer_step, optimizer_index);
        if (static_cast<int64_t>(program.outputs.size()) <= grad_norm_index ||
            !program.outputs[grad_norm_index].data)
          throw Error("optimizer_step did not produce its output 'grad_norm'");
        grad_norm = load_float(program.outputs[grad_norm_index], 0);
        program.memory.release_from(info.persistent_bytes);

        const int64_t peak = program.memory.high_water_mark();
        if (step == 1 && peak != info.arena_bytes)
          throw Error("memory plan violated: after step 1 the arena's measured high-water mark "
                      "is " + std::to_string(peak) + " bytes but the plan is " +
                      std::to_string(info.arena_bytes) + " bytes");
      } catch (const std::exception &error) {
        step_error = error.what();
      }
      // Every rank's verdict and losses; the step's loss is the mean over all
      // ranks' micro-batches, summed in the order of a single-rank run.
      report[0] = step_error.empty() ? 0.0f : 1.0f;
      try {
        exchange.all_gather(Tensor{report.data(), DType::F32, Shape{k + 1}},
                            Tensor{reports.data(), DType::F32, Shape{ranks * (k + 1)}});
      } catch (const std::exception &) {
        if (step_error.empty()) throw;
        std::fill(reports.begin(), reports.end(), 0.0f);
        reports[static_cast<size_t>(rank * (k + 1))] = 1.0f;
      }
      std::vector<int32_t> failed(static_cast<size_t>(ranks));
      for (int64_t r = 0; r < ranks; ++r)
        failed[static_cast<size_t>(r)] = reports[static_cast<size_t>(r * (k + 1))] != 0.0f;
      exchange.fail_if_any(step_error, failed, "at step " + std::to_string(step));
      double loss_sum = 0;
      for (int64_t r = 0; r < ranks; ++r)
        for (int64_t i = 0; i < k; ++i)
          loss_sum += reports[static_cast<size_t>(r * (k + 1) + 1 + i)];
      const double step_us = now_us() - start;
      total_us += step_us;

      const int64_t peak = program.memory.high_water_mark();
      const double loss = loss_sum / static_cast<double>(ranks * k);
      const double step_s = step_us / 1e6;
      const double samples_per_s = step_s > 0 ? samples_per_step / step_s : 0.0;
      if (!options.quiet && rank0 &&
          ((print_every > 0 && step % print_every == 0) || step == options.steps)) {
        printf("step %lld/%lld | loss %.6f | lr %.6e | grad_norm %.4f | %.2f ms | "
               "%.1f samples/s | arena peak %.1f MiB\n",
               static_cast<long long>(step), static_cast<long long>(options.steps), loss, lr,
               grad_norm, step_us / 1000.0, samples_per_s, peak / (1024.0 * 1024.0));
        fflush(stdout);
      }
      if (log_json) {
        fprintf(log_json.get(),
                "{\"step\": %lld, \"loss\": %s, \"lr\": %s, \"grad_norm\": %s, "
                "\"step_time_s\": %s, \"samples_per_s\": %s, \"arena_peak_bytes\": %lld, "
                "\"arena_planned_bytes\": %lld}\n",
                static_cast<long long>(step), json_number(loss).c_str(),
                json_number(lr).c_str(), json_number(grad_norm).c_str(),
                json_number(step_s).c_str(), json_number(samples_per_s).c_str(),
                static_cast<long long>(peak), static_cast<long long>(info.arena_bytes));
        fflush(log_json.get());
        if (ferror(log_json.get()))
          throw Error("--log-json: cannot write '" + options.log_json + "'");
      }
    }

    // The program's collectives over the whole run, and every rank's arena
    // peak, gathered to rank 0 for the log's summary line.
    const CommTally used = (CommTally::of(*grid) - comm_start) - (exchange.own() - runner_start);
    std::vector<int64_t> mine(kSummaryFields), all(static_cast<size_t>(ranks * kSummaryFields));
    mine[0] = program.memory.high_water_mark();
    for (int i = 0; i < kSummaryKinds; ++i) {
      const int op = static_cast<int>(kSummaryOps[i]);
      mine[1 + 3 * i] = used.sent[op];
      mine[2 + 3 * i] = used.received[op];
      mine[3 + 3 * i] = used.calls[op];
    }
    exchange.all_gather(Tensor{mine.data(), DType::I64, Shape{kSummaryFields}},
                        Tensor{all.data(), DType::I64, Shape{ranks * kSummaryFields}});

    // Sharded parameters are gathered whole (outside the arena) for the
    // saved model; every rank takes part, rank 0 writes.
    std::map<std::string, Tensor> full_values;
    std::vector<std::vector<uint8_t>> gathered;
    if (!options.save_onnx.empty()) {
      for (const ParamInfo &param : info.params) {
        if (!param.sharded()) continue;
        Tensor shard{program.arena + param.offset, param.dtype, param.shape};
        std::vector<uint8_t> buffer(shard.nbytes() * static_cast<size_t>(ranks));
        exchange.all_gather(shard, Tensor{buffer.data(), param.dtype,
                                          Shape{ranks * param.shape.numel()}});
        if (!rank0) continue;
        gathered.push_back(std::move(buffer));
        full_values[param.name] = Tensor{gathered.back().data(), param.dtype, param.full_shape};
      }
    }

    if (log_json) {
      if (!info.grid_names.empty())
        fprintf(log_json.get(), "%s\n", summary_json(options.steps, comm.size(), all).c_str());
      if (fclose(log_json.release()) != 0)
        throw Error("--log-json: cannot write '" + options.log_json + "'");
    }
    if (save_source)
      write_save_onnx(*save_source, info, program.arena, options.save_onnx,
                      options.external_data, full_values);
    if (program.tracer)
      tracer.write(rank0 ? options.trace : options.trace + ".rank" + std::to_string(rank), info,
                   rank);
    if (!options.quiet && rank0)
      fprintf(stderr,
              "trained %lld steps (%lld micro steps) in %.3f s, mean step %.3f ms; arena: "
              "planned %lld bytes, measured high-water mark %lld bytes, peak live %lld bytes\n",
              static_cast<long long>(options.steps), static_cast<long long>(micro_steps_run),
              total_us / 1e6, total_us / 1000.0 / static_cast<double>(options.steps),
              static_cast<long long>(info.arena_bytes),
              static_cast<long long>(program.memory.high_water_mark()),
              static_cast<long long>(program.memory.peak_live_bytes()));
    return 0;
  } catch (const ReportedFailure &) {
    return 1;
  } catch (const std::exception &error) {
    fprintf(stderr, "error: %s\n", error.what());
    return 1;
  }
}

}  // namespace dsrt

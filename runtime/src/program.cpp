// dsrt: the runner of generated programs.
#include "dsrt/program.h"
#include "async.h"
#include "staging.h"
#include "dsrt/backend.h"

#include "dsrt/npy.h"
#include "health.h"
#include "runner.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <limits>
#include <fstream>
#include <iomanip>
#include <memory>
#include <mutex>
#include <set>
#include <omp.h>
#include <sstream>
#include <sys/stat.h>
#include <unistd.h>

namespace dsrt {
namespace runner {

double now_us() { return detail::steady_now_us(); }

std::string directory_of(const std::string &path) {
  size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? "." : path.substr(0, slash == 0 ? 1 : slash);
}

// Input and output files are named after the graph's values; characters that
// cannot appear in a file name become '_'.
std::string file_name_for(const std::string &name) {
  std::string out = name;
  for (char &c : out)
    if (c == '/' || c == '\0') c = '_';
  return out;
}

std::string json_escape(const std::string &text) {
  std::string out;
  for (unsigned char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      char buffer[8];
      snprintf(buffer, sizeof(buffer), "\\u%04x", c);
      out += buffer;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

void ArenaFree::operator()(uint8_t *p) const { backend().deallocate(MemoryKind::Device, p); }

ProgramArena allocate_arena(int64_t arena_bytes) {
  size_t bytes = static_cast<size_t>(std::max<int64_t>(arena_bytes, 64));
  ProgramArena arena(
      static_cast<uint8_t *>(backend().allocate(MemoryKind::Device, bytes, kArenaAlignment)));
  if (!arena) throw Error("cannot allocate the " + std::to_string(bytes) + "-byte arena");
  return arena;
}

namespace {

// With synchronous ops, an error thrown inside an op (a device fault its
// end's wait found, a kernel's launch) prefixed with the op: its index and
// name in its function's op list, its ONNX node, and the function.
std::exception_ptr naming_running_op(Program &p, std::exception_ptr error) {
  const int64_t op = p.running_op;
  p.running_op = -1;
  if (!p.synchronous_ops || op < 0 || !p.info) return error;
  const std::vector<FunctionInfo> &functions = p.info->functions;
  const bool in_function =
      p.running_function >= 0 && p.running_function < static_cast<int>(functions.size());
  const std::vector<OpInfo> &ops = in_function ? functions[p.running_function].ops : p.info->ops;
  std::string where = "op " + std::to_string(op);
  if (op < static_cast<int64_t>(ops.size())) {
    where += " '" + ops[op].name + "'";
    if (!ops[op].location.empty()) where += " (node " + ops[op].location + ")";
  }
  where += in_function ? " of function '" + functions[p.running_function].name + "'"
                       : std::string(" of the program");
  try {
    std::rethrow_exception(error);
  } catch (const std::exception &e) {
    return std::make_exception_ptr(Error(where + ": " + e.what()));
  } catch (...) {
    return error;
  }
}

}  // namespace

void run_to_completion(Program &p, RunFn run) {
  p.collectives.clear();
  std::exception_ptr first;
  try {
    run(p);
  } catch (...) {
    first = naming_running_op(p, std::current_exception());
  }
  if (!first) {
    // No host wait for the device: the host work of every stream is done,
    // and p.stream's later work (the next function, a read of an output,
    // which synchronizes) is ordered after p.comm's and p.io's.
    try {
      detail::wait_host_work(p.stream);
      detail::order_after(p.stream, p.comm);
      detail::order_after(p.stream, p.io);
      return;
    } catch (...) {
      first = std::current_exception();
    }
  }
  // Every stream, whatever happened: an abandoned function may still have
  // collectives or file reads in flight that write the arena.
  for (Stream *s : {&p.stream, &p.comm, &p.io}) {
    try {
      s->synchronize();
    } catch (...) {
      if (!first) first = std::current_exception();
    }
  }
  std::rethrow_exception(first);
}

}  // namespace runner

using namespace runner;

void synchronize_op(Program &p) { backend(p.stream).synchronize(p.stream); }

//===--- MemoryMonitor ----------------------------------------------------===//

void MemoryMonitor::acquire(int64_t offset, int64_t size) {
  if (offset < 0 || size < 0)
    throw Error("memory plan: invalid slot at offset " + std::to_string(offset));
  if (size == 0) return;
  auto next = live_.lower_bound(offset);
  if (next != live_.end() && next->first < offset + size)
    throw Error("memory plan violated: slot [" + std::to_string(offset) + ", " +
                std::to_string(offset + size) + ") overlaps the live slot at " +
                std::to_string(next->first));
  if (next != live_.begin()) {
    auto previous = std::prev(next);
    if (previous->first + previous->second > offset)
      throw Error("memory plan violated: slot at " + std::to_string(offset) +
                  " overlaps the live slot [" + std::to_string(previous->first) + ", " +
                  std::to_string(previous->first + previous->second) + ")");
  }
  live_[offset] = size;
  live_bytes_ += size;
  peak_live_bytes_ = std::max(peak_live_bytes_, live_bytes_);
  high_water_mark_ = std::max(high_water_mark_, offset + size);
}

void MemoryMonitor::release(int64_t offset) {
  auto it = live_.find(offset);
  if (it == live_.end()) {
    // A zero-size slot is never recorded; releasing it is fine.
    return;
  }
  live_bytes_ -= it->second;
  live_.erase(it);
}

void MemoryMonitor::release_from(int64_t offset) {
  for (auto it = live_.lower_bound(offset); it != live_.end(); it = live_.erase(it))
    live_bytes_ -= it->second;
}

void MemoryMonitor::release_range(int64_t from, int64_t to) {
  for (auto it = live_.lower_bound(from); it != live_.end() && it->first < to;
       it = live_.erase(it))
    live_bytes_ -= it->second;
}

//===--- Tracer ------------------------------------------------------------===//

void Tracer::prepare(Stream &stream, int64_t ops_per_step) {
  backend_ = &backend(stream);
  marks_.clear();
  for (int64_t i = 0; i < 2 * ops_per_step; ++i) marks_.push_back(backend_->timing_mark());
  for (std::shared_ptr<void> &origin : origins_) origin = backend_->timing_mark();
  pending_.clear();
  pending_.reserve(static_cast<size_t>(ops_per_step));
}

void Tracer::begin(Program &p, int64_t op) {
  if (!backend_) throw Error("dsrt: --trace: the tracer's timing marks were not made");
  if (open_)
    throw Error("dsrt: --trace: op " + std::to_string(op) + " begins before op " +
                std::to_string(pending_.back().op) + " ended");
  const size_t run = pending_.size();
  if (2 * run + 2 > marks_.size())
    throw Error("dsrt: --trace: step " + std::to_string(step_) + " ran more than the " +
                std::to_string(marks_.size() / 2) + " ops its timing marks were made for");
  // The step's origin, where its first op begins.
  if (run == 0) backend_->record_timing(p.stream, origins_[origin_]);
  // Where the op's first work would go: after the stream's pending host
  // work, which its first kernel waits for on the host anyway.
  backend_->record_timing(p.stream, marks_[2 * run]);
  pending_.push_back({op, step_, function_, 0, 0, 0});
  open_ = true;
}

void Tracer::on_lane(Program &p, Stream &stream, int lane) {
  if (!open_ || pending_.back().lane != 0) return;
  // Right after comm_stream or io_stream ordered that stream after the
  // compute so far; never waiting (a bucketed collective's unpacking on
  // the transport's thread stays pending, as without the trace).
  backend_->record_timing(stream, marks_[2 * (pending_.size() - 1)], false);
  pending_.back().lane = lane;
}

void Tracer::on_comm(Program &p) { on_lane(p, p.comm, 1); }

void Tracer::on_io(Program &p) { on_lane(p, p.io, 2); }

void Tracer::end(Program &p, int64_t op) {
  if (!open_ || pending_.back().op != op)
    throw Error("dsrt: --trace: op " + std::to_string(op) + " ends but was not begun");
  // Right after the op's device work on its stream, never waiting for host
  // work it left pending.
  Slice &slice = pending_.back();
  Stream &stream = slice.lane == 1 ? p.comm : slice.lane == 2 ? p.io : p.stream;
  backend_->record_timing(stream, marks_[2 * pending_.size() - 1], false);
  open_ = false;
}

void Tracer::resolve() {
  if (pending_.empty()) return;
  const std::shared_ptr<void> &origin = origins_[origin_];
  // Steps follow each other on the device clock: this step's origin from
  // the last one's, which has not been recorded again since.
  if (had_origin_) base_us_ += backend_->elapsed_us(origins_[1 - origin_], origin);
  for (size_t i = 0; i < pending_.size(); ++i) {
    Slice slice = pending_[i];
    if (i + 1 == pending_.size() && open_) break;  // never ended
    slice.begin_us = base_us_ + backend_->elapsed_us(origin, marks_[2 * i]);
    slice.end_us = base_us_ + backend_->elapsed_us(origin, marks_[2 * i + 1]);
    slices_.push_back(slice);
  }
  had_origin_ = true;
  origin_ = 1 - origin_;
  pending_.clear();
  open_ = false;
}

void Tracer::discard() {
  pending_.clear();
  open_ = false;
}

namespace {
// A trace entry's stream (Tracer::Slice::lane): its track's name and its
// events' category.
const char *const kLaneStream[] = {"compute stream", "communication stream", "I/O stream"};
const char *const kLaneCategory[] = {"compute", "communication", "io"};
}  // namespace

void Tracer::write(const std::string &path, const ProgramInfo &info, int rank) const {
  std::ofstream out(path);
  if (!out) throw Error("cannot write trace file '" + path + "'");
  // Microseconds to the nanosecond, however long the run.
  out << std::fixed << std::setprecision(3);
  out << "{\"traceEvents\": [\n";
  out << "  {\"name\": \"process_name\", \"ph\": \"M\", \"pid\": " << rank
      << ", \"args\": {\"name\": \"rank " << rank << "\"}}";
  // Up to three tracks per function of a training program (one for a
  // forward program): its ops on the compute stream (tid: the function's
  // index), on the communication stream (tid: the function count plus that
  // index) and on the I/O stream (tid: twice the function count plus it),
  // so that their overlap shows.
  const int functions = std::max<int>(1, static_cast<int>(info.functions.size()));
  std::set<int> tracks;
  for (const Slice &slice : slices_)
    tracks.insert(std::max(0, slice.function) + slice.lane * functions);
  for (int track : tracks) {
    const int f = track % functions;
    const std::string function = f < static_cast<int>(info.functions.size())
                                     ? info.functions[static_cast<size_t>(f)].name + ": "
                                     : std::string();
    const int lane = track / functions;
    out << ",\n  {\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": " << rank
        << ", \"tid\": " << track << ", \"args\": {\"name\": \""
        << json_escape(function + kLaneStream[lane]) << "\"}}";
    out << ",\n  {\"name\": \"thread_sort_index\", \"ph\": \"M\", \"pid\": " << rank
        << ", \"tid\": " << track << ", \"args\": {\"sort_index\": " << 3 * f + lane
        << "}}";
  }
  for (const Slice &slice : slices_) {
    const FunctionInfo *function =
        slice.function >= 0 && slice.function < static_cast<int>(info.functions.size())
            ? &info.functions[slice.function]
            : nullptr;
    const std::vector<OpInfo> &ops = function ? function->ops : info.ops;
    const OpInfo *op = slice.op >= 0 && slice.op < static_cast<int64_t>(ops.size())
                           ? &ops[slice.op]
                           : nullptr;
    const int track = std::max(0, slice.function) + slice.lane * functions;
    out << ",\n  {\"name\": \"" << json_escape(op ? op->name : "op") << "\", \"cat\": \""
        << kLaneCategory[slice.lane] << "\", \"ph\": \"X\", \"pid\": " << rank
        << ", \"tid\": " << track << ", \"ts\": " << slice.begin_us
        << ", \"dur\": " << slice.end_us - slice.begin_us << ", \"args\": {\"op\": " << slice.op
        << ", \"step\": " << slice.step;
    if (function) out << ", \"function\": \"" << json_escape(function->name) << "\"";
    if (op) {
      out << ", \"node\": \"" << json_escape(op->location) << "\", \"flops\": " << op->flops
          << ", \"bytes\": " << op->bytes;
    }
    out << "}}";
  }
  out << "\n]}\n";
}

//===--- generated-code helpers -------------------------------------------===//

void fill(const Tensor &t, double value) {
  // Outside any stream's order: on a stream of its own, which has nothing
  // pending once a fill returns. One stream, made once and never destroyed
  // (streams may outlive statics).
  static std::mutex mutex;
  static Stream *own = new Stream(backend().kind());
  std::lock_guard<std::mutex> lock(mutex);
  fill_async(*own, t, value);
  own->synchronize();
}

void fill(Stream &s, const Tensor &t, double value) { fill_async(s, t, value); }

void set_output(Program &p, int64_t index, const Tensor &value) {
  if (index >= static_cast<int64_t>(p.outputs.size())) p.outputs.resize(index + 1);
  p.outputs[index] = value;
}

void set_model(ProgramInfo &info, const char *path) { info.model_path = path; }

void set_memory_plan(ProgramInfo &info, int64_t arena_bytes, int64_t persistent_bytes,
                     int64_t peak_live_bytes, int64_t alignment) {
  info.arena_bytes = arena_bytes;
  info.persistent_bytes = persistent_bytes;
  info.peak_live_bytes = peak_live_bytes;
  info.alignment = alignment;
  info.spaces[static_cast<int>(Space::Device)] = {arena_bytes, persistent_bytes};
}

const char *space_name(Space space) {
  switch (space) {
  case Space::Device: return "device";
  case Space::Host: return "host";
  case Space::File: return "file";
  }
  return "unknown";
}

void set_space_plan(ProgramInfo &info, Space space, int64_t arena_bytes,
                    int64_t persistent_bytes) {
  const int index = static_cast<int>(space);
  if (index <= 0 || index >= kNumSpaces)
    throw Error("set_space_plan: space " + std::to_string(index) +
                " is not the host or file space (set_memory_plan gives the device arena)");
  if (arena_bytes < 0 || persistent_bytes < 0 || persistent_bytes > arena_bytes)
    throw Error(std::string("set_space_plan: the ") + space_name(space) + " arena of " +
                std::to_string(arena_bytes) + " bytes cannot hold " +
                std::to_string(persistent_bytes) + " persistent bytes");
  info.spaces[index] = {arena_bytes, persistent_bytes};
}

void set_host_space_pinned(ProgramInfo &info, bool pinned) { info.host_pinned = pinned; }

void place_in_space(ProgramInfo &info, const char *name, Space space) {
  if (static_cast<int>(space) >= kNumSpaces)
    throw Error("place_in_space: unknown space " + std::to_string(static_cast<int>(space)));
  for (ParamInfo &param : info.params)
    if (param.name == name) {
      param.space = space;
      return;
    }
  for (ValueInfo &state : info.states)
    if (state.name == name) {
      state.space = space;
      return;
    }
  throw Error(std::string("place_in_space: no parameter or state called '") + name + "'");
}

const char *value_role_name(ValueRole role) {
  switch (role) {
  case ValueRole::Input: return "input";
  case ValueRole::Output: return "output";
  case ValueRole::Param: return "parameter";
  case ValueRole::Accumulator: return "gradient accumulator";
  case ValueRole::OptimizerState: return "optimizer state";
  case ValueRole::Recv: return "received value";
  case ValueRole::Send: return "sent value";
  case ValueRole::Stash: return "stashed value";
  case ValueRole::WeightStash: return "weight-stashed value";
  case ValueRole::MasterWeights: return "master weights";
  }
  return "value of an unknown role";
}

namespace {
void check_role(const char *call, const char *name, ValueRole role,
                std::initializer_list<ValueRole> allowed) {
  for (ValueRole r : allowed)
    if (r == role) return;
  throw Error(std::string("program description: ") + call + " '" + (name ? name : "") +
              "' has the role of a " + value_role_name(role));
}
}  // namespace

void add_input(ProgramInfo &info, const char *name, DType dtype, Shape shape, int64_t offset,
               ValueRole role) {
  check_role("add_input", name, role,
             {ValueRole::Input, ValueRole::Recv, ValueRole::Stash, ValueRole::WeightStash});
  auto &inputs = info.functions.empty() ? info.inputs : info.functions.back().inputs;
  inputs.push_back({name, dtype, shape, offset, Space::Device, role});
}

void set_input_range(ProgramInfo &info, int64_t lo, int64_t hi, bool has_ignore,
                     int64_t ignore) {
  auto &inputs = info.functions.empty() ? info.inputs : info.functions.back().inputs;
  if (inputs.empty())
    throw Error("program description: set_input_range before any add_input");
  ValueInfo &input = inputs.back();
  if (input.role != ValueRole::Input || (input.dtype != DType::I64 && input.dtype != DType::I32))
    throw Error("program description: set_input_range on '" + input.name +
                "', which is not an integer input");
  if (!(lo < hi))
    throw Error("program description: set_input_range on '" + input.name + "': [" +
                std::to_string(lo) + ", " + std::to_string(hi) + ") is empty");
  input.has_range = true;
  input.range_lo = lo;
  input.range_hi = hi;
  input.has_ignore = has_ignore;
  input.ignore = ignore;
}

void add_param_file(ProgramInfo &info, const char *name, DType dtype, Shape shape,
                    int64_t offset, bool trainable, const char *file, int64_t file_offset,
                    int64_t length) {
  ParamInfo param;
  param.name = name;
  param.dtype = dtype;
  param.shape = shape;
  param.offset = offset;
  param.trainable = trainable;
  param.file = file;
  param.file_offset = file_offset;
  param.length = length;
  param.stored = dtype;
  param.role = ValueRole::Param;
  info.params.push_back(param);
}

void add_param_data(ProgramInfo &info, const char *name, const Tensor &data, int64_t offset,
                    bool trainable) {
  ParamInfo param;
  param.name = name;
  param.dtype = data.dtype;
  param.shape = data.shape;
  param.offset = offset;
  param.trainable = trainable;
  param.data = data;
  param.stored = data.dtype;
  param.role = ValueRole::Param;
  info.params.push_back(param);
}

void set_param_working_copy(ProgramInfo &info, DType dtype) {
  if (info.params.empty())
    throw Error("set_param_working_copy: no parameter was added before it");
  ParamInfo &param = info.params.back();
  if (param.dtype != DType::F32 || (dtype != DType::F16 && dtype != DType::BF16))
    throw Error("set_param_working_copy: parameter '" + param.name + "' is " +
                dtype_name(param.dtype) + "; only an f32 parameter has a 16-bit (f16 or bf16) "
                "working copy, not " + dtype_name(dtype));
  param.dtype = dtype;
}

const ParamInfo *master_param(const ProgramInfo &info, const ValueInfo &state) {
  if (state.role != ValueRole::MasterWeights) return nullptr;
  for (const ParamInfo &param : info.params)
    if (param.name == state.param) return &param;
  throw Error("master weights '" + state.name + "': the program has no parameter '" +
              state.param + "'");
}

void add_output(ProgramInfo &info, const char *name, DType dtype, Shape shape,
                ValueRole role) {
  check_role("add_output", name, role,
             {ValueRole::Output, ValueRole::Send, ValueRole::Stash, ValueRole::WeightStash});
  auto &outputs = info.functions.empty() ? info.outputs : info.functions.back().outputs;
  outputs.push_back({name, dtype, shape, -1, Space::Device, role});
}

void add_op(ProgramInfo &info, const char *name, const char *location, int64_t flops,
            int64_t bytes) {
  auto &ops = info.functions.empty() ? info.ops : info.functions.back().ops;
  ops.push_back({name, location, flops, bytes});
}

void add_state(ProgramInfo &info, const char *name, DType dtype, Shape shape, int64_t offset,
               ValueRole role, const char *param) {
  check_role("add_state", name, role,
             {ValueRole::Accumulator, ValueRole::OptimizerState, ValueRole::MasterWeights});
  info.states.push_back({name, dtype, shape, offset, Space::Device, role, param ? param : ""});
}

int64_t find_accumulator(const ProgramInfo &info, const std::string &param,
                         const std::string &what) {
  for (size_t i = 0; i < info.states.size(); ++i)
    if (info.states[i].role == ValueRole::Accumulator && info.states[i].param == param)
      return static_cast<int64_t>(i);
  throw Error(what + ": the program has no gradient accumulator of parameter '" + param + "'");
}

void begin_function(ProgramInfo &info, const char *name, int64_t arena_bytes,
                    int64_t peak_live_bytes) {
  FunctionInfo function;
  function.name = name;
  function.arena_bytes = arena_bytes;
  function.peak_live_bytes = peak_live_bytes;
  info.functions.push_back(std::move(function));
}

void set_file_space_dir(ProgramInfo &info, const char *dir) { info.file_space_dir = dir; }

void set_file_space_io(ProgramInfo &info, int64_t block_size, int64_t queue_depth,
                       int64_t intra_op_parallelism, bool single_submit, bool overlap_events) {
  // Clamped to int; check_file_io_options names what is out of range.
  auto count = [](int64_t v) {
    return static_cast<int>(std::clamp<int64_t>(v, std::numeric_limits<int>::min(),
                                                std::numeric_limits<int>::max()));
  };
  FileIOOptions io;
  io.block_size = block_size;
  io.queue_depth = count(queue_depth);
  io.intra_op_parallelism = count(intra_op_parallelism);
  io.single_submit = single_submit;
  io.overlap_events = overlap_events;
  check_file_io_options(io, "dsrt::set_file_space_io");
  info.file_io = io;
}

void set_transfer_bytes(ProgramInfo &info, Space from, Space to, int64_t bytes) {
  if (info.functions.empty())
    throw Error("dsrt::set_transfer_bytes: no function begun (begin_function)");
  if (bytes < 0 || from == to)
    throw Error(std::string("dsrt::set_transfer_bytes: ") + std::to_string(bytes) +
                " bytes from " + space_name(from) + " to " + space_name(to) +
                " memory is not a transfer");
  info.functions.back().transfer_bytes[static_cast<int>(from)][static_cast<int>(to)] = bytes;
}

void set_training(ProgramInfo &info, const char *optimizer, double lr, double gradient_clipping,
                  int64_t accumulation_steps, int64_t micro_batch, int64_t steps_per_print) {
  TrainInfo &train = info.train;
  train.optimizer = optimizer;
  train.lr = lr;
  train.gradient_clipping = gradient_clipping;
  train.accumulation_steps = accumulation_steps;
  train.micro_batch = micro_batch;
  train.steps_per_print = steps_per_print;
}

void set_schedule(ProgramInfo &info, const char *kind, double warmup_min_lr, double warmup_max_lr,
                  int64_t warmup_num_steps, int64_t total_num_steps, bool warmup_linear,
                  double warmup_min_ratio, double cos_min_ratio) {
  TrainInfo &train = info.train;
  train.schedule = kind;
  train.warmup_min_lr = warmup_min_lr;
  train.warmup_max_lr = warmup_max_lr;
  train.warmup_num_steps = warmup_num_steps;
  train.total_num_steps = total_num_steps;
  train.warmup_linear = warmup_linear;
  train.warmup_min_ratio = warmup_min_ratio;
  train.cos_min_ratio = cos_min_ratio;
}

void set_loss_scaler(ProgramInfo &info, double static_scale, int64_t initial_scale_power,
                     int64_t window, int64_t hysteresis, bool consecutive_hysteresis,
                     double min_scale) {
  TrainInfo &train = info.train;
  train.loss_scaled = true;
  train.loss_scaler.static_scale = static_scale;
  train.loss_scaler.initial_scale_power = static_cast<int>(initial_scale_power);
  train.loss_scaler.window = window;
  train.loss_scaler.hysteresis = static_cast<int>(hysteresis);
  train.loss_scaler.consecutive_hysteresis = consecutive_hysteresis;
  train.loss_scaler.min_scale = min_scale;
}

std::string resolve_weight_file(const ProgramInfo &info, const std::string &weights_dir,
                                const std::string &file) {
  std::string dir = weights_dir.empty() ? directory_of(info.model_path) : weights_dir;
  return dir + "/" + file;
}

//===--- loading -----------------------------------------------------------===//

namespace runner {

int64_t slot_size(const ProgramInfo &info, size_t bytes) {
  int64_t a = info.alignment > 0 ? info.alignment : 1;
  return (static_cast<int64_t>(bytes) + a - 1) / a * a;
}

namespace {

// Elements [begin, begin + count) of the model's tensor of a parameter (of
// param.stored, `n` elements in all) into `out` (resized to them). Only
// those bytes are read.
void read_model_range(const ProgramInfo &info, const ParamInfo &param, int64_t n, int64_t begin,
                      int64_t count, std::vector<char> &out, const std::string &weights_dir) {
  const int64_t elem = static_cast<int64_t>(dtype_size(param.stored));
  const Shape &whole = param.model_shape();
  if (param.data.data) {
    if (param.data.numel() != n)
      throw Error("parameter '" + param.name + "': its data holds " +
                  std::to_string(param.data.numel()) + " elements but the tensor " +
                  whole.str() + " has " + std::to_string(n));
    const char *from = static_cast<const char *>(param.data.data) + begin * elem;
    out.assign(from, from + count * elem);
    return;
  }
  std::string path = resolve_weight_file(info, weights_dir, param.file);
  if (param.length != n * elem)
    throw Error("parameter '" + param.name + "': " + std::to_string(param.length) +
                " bytes in '" + path + "' but " +
                (param.sharded() || param.tp_split()
                     ? "the whole tensor " + whole.str() + " (sharded, " + std::to_string(n) +
                           " elements)"
                     : std::string("its tensor")) +
                " of " + dtype_name(param.stored) + " needs " + std::to_string(n * elem));
  out.assign(static_cast<size_t>(count * elem), 0);
  if (count == 0) return;
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw Error("parameter '" + param.name + "': cannot open '" + path +
                "' (use --weights DIR if the model moved)");
  const int64_t offset = param.file_offset + begin * elem;
  in.seekg(offset);
  in.read(out.data(), count * elem);
  if (in.gcount() != count * elem)
    throw Error("parameter '" + param.name + "': '" + path + "' ends before byte " +
                std::to_string(offset + count * elem));
}

// The model's bytes (of param.stored) of a parameter's rank tensor (its tp
// piece, or the whole tensor): all of it (`s` == 0), or rank `dp_rank`'s [s]
// shard of its flat form, elements [r*s, min((r+1)*s, n)) and zeros for the
// rest. A tp piece is cut out of the whole tensor, read whole.
void read_stored(const ProgramInfo &info, const ParamInfo &param, int64_t s, int64_t dp_rank,
                 std::vector<char> &host, const std::string &weights_dir) {
  const int64_t elem = static_cast<int64_t>(dtype_size(param.stored));
  const int64_t n = param.rank_shape().numel();
  const int64_t begin = s > 0 ? std::min(dp_rank * s, n) : 0;
  const int64_t end = s > 0 ? std::min((dp_rank + 1) * s, n) : n;
  const int64_t count = end - begin;
  const size_t size = static_cast<size_t>((s > 0 ? s : n) * elem);
  if (!param.tp_split()) {
    read_model_range(info, param, n, begin, count, host, weights_dir);
    host.resize(size, 0);
    return;
  }
  const Shape &whole = param.tp_whole;
  std::vector<char> model;
  read_model_range(info, param, whole.numel(), 0, whole.numel(), model, weights_dir);
  std::vector<char> piece(static_cast<size_t>(n * elem));
  tp_piece_copy(model.data(), piece.data(), whole, param.tp_dim, param.tp_blocks,
                info.axis_size("tp"), own_coordinate(info, "tp"), static_cast<size_t>(elem),
                /*to_piece=*/true, param.tp_run);
  host.assign(piece.begin() + begin * elem, piece.begin() + end * elem);
  host.resize(size, 0);
}

// Converts `host` (elements of `from`) to `to` in place: f32 to a 16-bit
// float type rounds to nearest even, as the kernels' casts do.
void convert_host(std::vector<char> &host, DType from, DType to) {
  if (from == to) return;
  if (from != DType::F32 || (to != DType::F16 && to != DType::BF16))
    throw Error(std::string("cannot convert a parameter's ") + dtype_name(from) + " value to " +
                dtype_name(to));
  const int64_t n = static_cast<int64_t>(host.size() / dtype_size(from));
  std::vector<char> out(static_cast<size_t>(n) * dtype_size(to));
  const Tensor source{host.data(), from, Shape{n}}, converted{out.data(), to, Shape{n}};
  convert_host_floats(source, converted);
  host.swap(out);
}

// The base of the arena of a value's space (not the file space).
uint8_t *space_base(Program &p, const ValueInfo &value) {
  uint8_t *base = value.space == Space::Host ? p.host_arena : p.arena;
  if (!base)
    throw Error("'" + value.name + "' is planned in the " + space_name(value.space) +
                " space, which has no arena");
  return base;
}

}  // namespace

SpaceArenas::~SpaceArenas() {
  if (!file) return;
  try {
    file->close();
  } catch (...) {
    // The run is over; what matters now is that the file goes.
  }
  file.reset();
  std::remove(file_path.c_str());
  health::keep_on_stop(file_path);
}

void allocate_spaces(Program &p, SpaceArenas &spaces, const std::string &file_dir, int rank) {
  const ProgramInfo &info = *p.info;
  if (const int64_t host = info.space(Space::Host).arena_bytes; host > 0) {
    // On a file block: the plan aligns the host buffers of file transfers
    // to it, so direct I/O reads and writes them in place.
    spaces.host = Arena(info.host_pinned ? MemoryKind::PinnedHost : MemoryKind::Host,
                        static_cast<size_t>(host), static_cast<size_t>(kDirectAlignment));
    p.host_arena = spaces.host.data();
  }
  const int64_t bytes = info.space(Space::File).arena_bytes;
  if (bytes <= 0) return;
  std::string dir = file_dir;
  if (dir.empty()) {
    const char *tmp = std::getenv("TMPDIR");
    dir = tmp && *tmp ? tmp : "/tmp";
  }
  struct stat st;
  if (stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    throw Error("the file space's directory '" + dir + "' is not a directory (train --nvme-path, else offload_optimizer.nvme_path or offload_param.nvme_path)");
  // Every state's write-behind goes to the copy that is not current and
  // becomes current once complete: a failed write never leaves a state half
  // old, half new (FileIOOptions::versioned; the file is twice the plan's
  // file bytes).
  FileIOOptions io = info.file_io;
  io.versioned = true;
  // Before the first step, while nothing is written: the file system must
  // have room for the whole file space (posix_fallocate would fail too, but
  // only after allocating what room there is, and naming no sizes).
  check_room(dir, file_bytes_on_disk(bytes, io),
             "the file space of rank " + std::to_string(rank) +
                 " (train --nvme-path, else offload_optimizer.nvme_path or offload_param.nvme_path)");
  const std::string path = dir + "/dsrt-file-space-" + std::to_string(getpid()) + "-" +
                           std::to_string(rank) + ".bin";
  spaces.file = std::make_unique<FileStore>(backend().create_file(path, bytes, io));
  spaces.file_path = path;
  health::remove_on_stop(path);  // also when SIGTERM ends the run
  p.file_arena = spaces.file.get();
}

void acquire_persistent(Program &p, const ValueInfo &value) {
  const ProgramInfo &info = *p.info;
  int64_t slot = slot_size(info, dtype_size(value.dtype) * value.shape.numel());
  // The plan gives file slots whole direct-I/O blocks.
  if (value.space == Space::File)
    slot = (slot + kDirectAlignment - 1) / kDirectAlignment * kDirectAlignment;
  const int64_t arena = info.space(value.space).arena_bytes;
  if (value.offset < 0 || value.offset > arena - slot)
    throw Error("memory plan: '" + value.name + "' (" + std::to_string(slot) + " bytes at " +
                std::to_string(value.offset) + ") lies outside the " + space_name(value.space) +
                " arena of " + std::to_string(arena) + " bytes");
  p.memory_of(value.space).acquire(value.offset, slot);
}

void store_persistent(Program &p, const ValueInfo &value, const void *bytes, size_t size) {
  if (size == 0) return;
  if (value.space == Space::File) {
    if (!p.file_arena)
      throw Error("'" + value.name + "' is planned in the file space, which has no arena");
    p.file_arena->write_async(p.stream, value.offset, bytes, size).wait();
    return;
  }
  write_from_host(p.stream, space_base(p, value) + value.offset, bytes, size);
  p.stream.synchronize();  // before the caller's bytes go
}

Tensor persistent_tensor(Program &p, const ValueInfo &value,
                         std::vector<std::vector<uint8_t>> &keep) {
  if (value.space != Space::File)
    return Tensor{space_base(p, value) + value.offset, value.dtype, value.shape};
  if (!p.file_arena)
    throw Error("'" + value.name + "' is planned in the file space, which has no arena");
  keep.emplace_back(dtype_size(value.dtype) * static_cast<size_t>(value.shape.numel()));
  p.file_arena->read_async(p.stream, value.offset, keep.back().data(), keep.back().size()).wait();
  return Tensor{keep.back().data(), value.dtype, value.shape};
}

void zero_persistent(Program &p, const ValueInfo &value) {
  const size_t size = dtype_size(value.dtype) * static_cast<size_t>(value.shape.numel());
  if (value.space != Space::File) {
    fill_async(p.stream, Tensor{space_base(p, value) + value.offset, value.dtype, value.shape},
               0.0);
    return;
  }
  // One write of the whole state (the store is versioned: a later write
  // replaces a range written before only whole), from a small zero buffer.
  if (size == 0) return;
  if (!p.file_arena)
    throw Error("'" + value.name + "' is planned in the file space, which has no arena");
  p.file_arena->zero_async(p.stream, value.offset, size).wait();
}

void print_space_arenas(const Program &p) {
  for (Space space : {Space::Host, Space::File})
    if (p.info->space(space).arena_bytes > 0)
      fprintf(stderr, "%s arena: planned %lld bytes, measured high-water mark %lld bytes\n",
              space_name(space), static_cast<long long>(p.info->space(space).arena_bytes),
              static_cast<long long>(p.memory_of(space).high_water_mark()));
}

void load_params(Program &p, const std::string &weights_dir, int64_t dp_rank) {
  const ProgramInfo &info = *p.info;
  std::vector<char> host;
  for (const ParamInfo &param : info.params) {
    acquire_persistent(p, param);
    read_stored(info, param, param.sharded() ? param.shape.numel() : 0, dp_rank, host,
                weights_dir);
    convert_host(host, param.stored, param.dtype);
    store_persistent(p, param, host.data(), host.size());
  }
}

void load_masters(Program &p, const std::string &weights_dir, int64_t dp_rank) {
  const ProgramInfo &info = *p.info;
  std::vector<char> host;
  for (const ValueInfo &state : info.states) {
    const ParamInfo *param = master_param(info, state);
    if (!param) continue;
    const Shape &whole = param->rank_shape();
    if (state.dtype != param->stored)
      throw Error("master weights '" + state.name + "' are " + dtype_name(state.dtype) +
                  " but parameter '" + param->name + "' is " + dtype_name(param->stored) +
                  " in the model");
    // A master shaped otherwise than its parameter is this rank's ZeRO
    // shard of its flat form.
    const bool shard = !(state.shape == whole);
    read_stored(info, *param, shard ? state.shape.numel() : 0, dp_rank, host, weights_dir);
    store_persistent(p, state, host.data(), host.size());
  }
}

}  // namespace runner

namespace {

void load_inputs(Program &p, const std::string &inputs_dir) {
  const ProgramInfo &info = *p.info;
  for (const ValueInfo &input : info.inputs) {
    std::string path = inputs_dir + "/" + file_name_for(input.name) + ".npy";
    struct stat st;
    if (stat(path.c_str(), &st) != 0)
      throw Error("input '" + input.name + "': missing file '" + path + "' (expected " +
                  dtype_name(input.dtype) + " " + input.shape.str() + ")");
    NpyArray array = read_npy(path);
    expect(array, input.dtype, input.shape, "input '" + input.name + "' (" + path + ")");
    Tensor slot{p.arena + input.offset, input.dtype, input.shape};
    p.memory.acquire(input.offset, slot_size(info, slot.nbytes()));
    write_from_host(p.stream, slot.data, array.bytes.data(), slot.nbytes());
    p.stream.synchronize();  // before `array` goes
  }
}

struct Options {
  std::string inputs, outputs, weights, trace;
  int threads = 0;
  bool quiet = false;
};

void usage(const char *argv0) {
  fprintf(stderr,
          "usage: %s --inputs DIR --outputs DIR [--weights DIR] [--threads N]\n"
          "          [--trace FILE] [--quiet]\n"
          "  --inputs DIR   one <input name>.npy per graph input\n"
          "  --outputs DIR  receives one <output name>.npy per graph output\n"
          "  --weights DIR  where the model's weight files are (default: the\n"
          "                 model's directory at compile time)\n"
          "  --threads N    threads for kernels (default: all cores)\n"
          "  --trace FILE   write a Chrome trace of the run (opens in Perfetto)\n",
          argv0);
}

bool parse(int argc, char **argv, Options &options) {
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    auto value = [&](std::string &out) {
      if (i + 1 >= argc) throw Error("option " + arg + " needs a value");
      out = argv[++i];
    };
    if (arg == "--inputs") value(options.inputs);
    else if (arg == "--outputs") value(options.outputs);
    else if (arg == "--weights") value(options.weights);
    else if (arg == "--trace") value(options.trace);
    else if (arg == "--quiet") options.quiet = true;
    else if (arg == "--threads") {
      std::string text;
      value(text);
      char *end = nullptr;
      long n = std::strtol(text.c_str(), &end, 10);
      if (!end || *end || n < 1) throw Error("--threads expects a positive integer, got '" + text + "'");
      options.threads = static_cast<int>(n);
    } else if (arg == "--help" || arg == "-h") {
      usage(argv[0]);
      return false;
    } else {
      throw Error("unknown option '" + arg + "' (see --help)");
    }
  }
  if (options.inputs.empty() || options.outputs.empty())
    throw Error("--inputs and --outputs are required (see --help)");
  return true;
}

}  // namespace

int forward_main(int argc, char **argv, DescribeFn describe, RunFn run) {
  try {
    Options options;
    if (!parse(argc, argv, options)) return 0;
    ProgramInfo info;
    describe(info);
    if (info.world != 1)
      throw Error("the program was compiled for " + std::to_string(info.world) +
                  " ranks; `run` executes single-rank forward programs only");
    // The kernels' axes (all of size 1) for a program that has a grid.
    if (!info.grid_names.empty()) use_program_grid(info);

    // Found before anything runs; created when missing, as dsopt's -o.
    make_directories(options.outputs, "--outputs");

    Program program;
    program.info = &info;
    program.stream = Stream(backend().kind(), options.threads);
    program.comm = Stream(backend().kind(), options.threads);
    program.synchronous_ops = backend().synchronous_ops();
    program.io = Stream(backend().kind(), options.threads);
    // Generated fused loops use OpenMP's default team size.
    if (options.threads > 0) omp_set_num_threads(options.threads);
    ProgramArena arena = allocate_arena(info.arena_bytes);
    program.arena = arena.get();
    SpaceArenas spaces;
    allocate_spaces(program, spaces, "", 0);
    Tracer tracer;
    if (!options.trace.empty()) {
      program.tracer = &tracer;
      tracer.prepare(program.stream, static_cast<int64_t>(info.ops.size()));
    }

    load_params(program, options.weights);
    load_inputs(program, options.inputs);
    double start = now_us();
    run_to_completion(program, run);
    double elapsed = now_us() - start;

    for (size_t i = 0; i < info.outputs.size(); ++i) {
      if (i >= program.outputs.size() || !program.outputs[i].data)
        throw Error("output '" + info.outputs[i].name + "' was not produced");
      // The host writes a copy (the output may be device memory).
      const Tensor &output = program.outputs[i];
      std::vector<uint8_t> bytes(output.nbytes());
      read_to_host(program.stream, bytes.data(), output);
      write_npy(options.outputs + "/" + file_name_for(info.outputs[i].name) + ".npy",
                Tensor{bytes.data(), output.dtype, output.shape});
    }
    if (program.tracer) {
      // The outputs' reads waited for the stream: every op's marks are reached.
      tracer.resolve();
      tracer.write(options.trace, info);
    }
    if (!options.quiet)
      fprintf(stderr,
              "ran %zu ops in %.3f ms; arena: planned %lld bytes, measured high-water "
              "mark %lld bytes, peak live %lld bytes\n",
              info.ops.size(), elapsed / 1000.0, static_cast<long long>(info.arena_bytes),
              static_cast<long long>(program.memory.high_water_mark()),
              static_cast<long long>(program.memory.peak_live_bytes()));
    if (!options.quiet) print_space_arenas(program);
    return 0;
  } catch (const Error &error) {
    fprintf(stderr, "error: %s\n", error.what());
    return 1;
  } catch (const std::exception &error) {
    fprintf(stderr, "error: %s\n", error.what());
    return 1;
  }
}

namespace {
Tensor bound_view(const std::vector<Tensor> &bound, const char *what, int64_t index, DType dtype,
                  Shape shape) {
  Tensor view{nullptr, dtype, shape};
  if (index < 0 || index >= static_cast<int64_t>(bound.size()) || !bound[index].data)
    throw Error(std::string(what) + " " + std::to_string(index) +
                " without a buffer was not bound (" + std::to_string(bound.size()) + " bound)");
  if (bound[index].nbytes() < view.nbytes())
    throw Error(std::string(what) + " " + std::to_string(index) +
                " without a buffer is bound to " + std::to_string(bound[index].nbytes()) +
                " bytes, it needs " + std::to_string(view.nbytes()));
  view.data = bound[index].data;
  return view;
}
}  // namespace

Tensor bound_input(Program &p, int64_t index, DType dtype, Shape shape) {
  return bound_view(p.bound, "input", index, dtype, shape);
}

Tensor bound_output(Program &p, int64_t index, DType dtype, Shape shape) {
  return bound_view(p.bound_outputs, "output", index, dtype, shape);
}

//===--- offload ----------------------------------------------------------------===//

uint8_t *host_arena(Program &p) {
  if (!p.host_arena)
    throw Error("dsrt::host_arena: the program's plan gives the host space no bytes");
  return p.host_arena;
}

FileSlot file_slot(Program &p, int64_t offset) {
  if (!p.file_arena)
    throw Error("dsrt::file_slot: the program's plan gives the file space no bytes");
  return FileSlot{p.file_arena, offset};
}

namespace {
std::atomic<int64_t> transferred[kNumSpaces][kNumSpaces];

void count_transfer(Space from, Space to, size_t bytes) {
  transferred[static_cast<int>(from)][static_cast<int>(to)] += static_cast<int64_t>(bytes);
}

void check_transfer(Space from, Space to, Space want_from, Space want_to) {
  if (from != want_from || to != want_to)
    throw Error(std::string("dsrt::transfer: a copy from ") + space_name(from) + " to " +
                space_name(to) + " memory was given buffers of " + space_name(want_from) +
                " and " + space_name(want_to) + " memory");
}
}  // namespace

void transfer(Stream &s, const Tensor &src, const Tensor &dst, Space from, Space to) {
  if (from == to || from == Space::File || to == Space::File)
    throw Error(std::string("dsrt::transfer: cannot copy from ") + space_name(from) + " to " +
                space_name(to) + " memory between two views");
  // The host space as ordinary (pageable) host memory on a backend whose
  // memory the host cannot read (offload_param.pin_memory false on cuda): a
  // synchronous copy through pinned staging, one host wait per chunk, as
  // the plan counts them (host_syncs); an asynchronous device copy of
  // pageable memory would block the host anyway, unplanned.
  const void *host = from == Space::Host ? src.data : to == Space::Host ? dst.data : nullptr;
  if (host && detail::stages_host_copies(backend(s)) &&
      memory_kind_of(host) == MemoryKind::Host) {
    if (dst.dtype != src.dtype || dst.numel() != src.numel())
      throw Error(std::string("dsrt::transfer: destination ") + dtype_name(dst.dtype) +
                  dst.shape.str() + " and source " + dtype_name(src.dtype) + src.shape.str() +
                  " differ in element type or count");
    detail::wait_host_work(s);
    if (from == Space::Host)
      detail::transfer_staging_buffers().write(s, dst.data, src.data, src.nbytes(), true);
    else
      detail::transfer_staging_buffers().read(s, dst.data, src.data, src.nbytes());
  } else {
    copy_async(s, dst, src);
  }
  count_transfer(from, to, src.nbytes());
}

void transfer(Stream &s, const FileSlot &src, const Tensor &dst, Space from, Space to) {
  check_transfer(from, to, Space::File, Space::Host);
  src.file->read_async(s, src.offset, dst);
  count_transfer(from, to, dst.nbytes());
}

void transfer(Stream &s, const Tensor &src, const FileSlot &dst, Space from, Space to) {
  check_transfer(from, to, Space::Host, Space::File);
  dst.file->write_async(s, dst.offset, src);
  count_transfer(from, to, src.nbytes());
}

int64_t transferred_bytes(Space from, Space to) {
  return transferred[static_cast<int>(from)][static_cast<int>(to)].load();
}

}  // namespace dsrt

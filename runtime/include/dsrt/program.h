// dsrt: what a generated program is made of.
//
// dsopt emits two functions per program:
//   void dsopt_describe(dsrt::ProgramInfo&)  inputs, parameters (and where
//                                            their bytes are), outputs, the
//                                            memory plan and the op list;
//   void dsopt_run(dsrt::Program&)           one kernel call per op on views
//                                            of the arena;
// and a main() that hands both to dsrt::forward_main, which loads weights and
// inputs into the arena, runs, writes the outputs and checks the memory plan.
//
// A training program has two run functions sharing one arena, micro_step
// (forward and backward of one micro-batch, adding its gradients into
// accumulators) and optimizer_step (clip and update in place), described as
// FunctionInfo entries after begin_function; its main hands them to
// dsrt::train_main (docs/runtime.md, "Training programs"). A pipeline
// program is one such program per pipeline rank, each with a forward and a
// backward function per virtual stage it holds and its static schedule,
// linked into one executable whose main calls dsrt::pipeline_main.
#ifndef DSRT_PROGRAM_H
#define DSRT_PROGRAM_H

#include "dsrt/dist.h"
#include "dsrt/kernels.h"
#include "dsrt/math.h"
#include "dsrt/stream.h"
#include "dsrt/tensor.h"

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace dsrt {

struct ValueInfo {
  std::string name;
  DType dtype = DType::F32;
  Shape shape;
  int64_t offset = -1; // in the arena; -1 for outputs (their views tell)
};

struct ParamInfo : ValueInfo {
  bool trainable = false;
  // Bytes in a file relative to the model's directory...
  std::string file;
  int64_t file_offset = 0, length = 0;
  // ...or in the program itself (small parameters).
  Tensor data;
  // Sharded along "dp" (set_param_shard): the whole tensor has shard_total
  // elements and full_shape, `shape` is this rank's 1-D shard [s] of it,
  // flattened and zero-padded to dp * s elements. 0: not sharded. The file
  // bytes (file_offset, length) and `data` are the whole tensor's.
  int64_t shard_total = 0;
  Shape full_shape;

  bool sharded() const { return shard_total > 0; }
};

struct OpInfo {
  std::string name, location;
  int64_t flops = 0, bytes = 0;
};

// One generated function of a training program ("micro_step",
// "optimizer_step"). Its plan uses the program's arena: persistent values at
// the bottom, its own transient buffers between persistent_bytes and
// arena_bytes (<= the program's arena_bytes).
struct FunctionInfo {
  std::string name;
  int64_t arena_bytes = 0, peak_live_bytes = 0;
  std::vector<ValueInfo> inputs, outputs;  // inputs have offsets
  std::vector<OpInfo> ops;
};

// How train_main drives the two functions and logs (set_training,
// set_schedule).
struct TrainInfo {
  std::string optimizer = "AdamW";  // for the log only
  double lr = 1e-3;                 // Constant's lr, WarmupCosineLR's base lr
  double gradient_clipping = 0;     // for the log only (the generated code clips)
  int64_t accumulation_steps = 1, micro_batch = 1, steps_per_print = 1;
  std::string schedule = "Constant";  // Constant | WarmupLR | WarmupDecayLR | WarmupCosineLR
  double warmup_min_lr = 0, warmup_max_lr = 1e-3;
  int64_t warmup_num_steps = 1000, total_num_steps = 0;
  bool warmup_linear = false;  // else DeepSpeed's default log warmup
  double warmup_min_ratio = 0, cos_min_ratio = 1e-4;
};

// A pipeline-parallel program (set_pipeline): one program per rank of the
// "pp" axis, all linked into one executable (pipeline_main). See
// docs/runtime.md, "Pipeline-parallel programs".
enum class PipelineActionKind : int64_t {
  Forward = 0, Backward, BackwardInput, BackwardWeight,
  SendActivation, RecvActivation, SendGradient, RecvGradient,
};
constexpr int64_t kPipelineActionKinds = 8;

// A virtual stage the rank holds and its functions' names ("" where
// absent): forward and backward, or (zb-h1) forward, backward_input and
// backward_weight.
struct PipelineStage {
  int64_t stage = 0;
  std::string forward, backward, backward_input, backward_weight;
};

// One action of the rank's static schedule; stage = chunk * stages + rank.
struct PipelineAction {
  PipelineActionKind kind = PipelineActionKind::Forward;
  int64_t microbatch = 0, chunk = 0;
  int64_t peer = -1;  // the other pp coordinate of a transfer; -1 for compute
};

// `slots` equal slots of `slot_bytes` bytes at arena `offset` (slot i at
// offset + i * slot_bytes). kind: stash, act_in, act_out, grad_in,
// grad_out, wstash (per virtual stage) or tied (stage -1).
struct PipelinePool {
  std::string kind;
  int64_t stage = -1, slots = 0, slot_bytes = 0, offset = 0;
};

// A state (a gradient accumulator) that the pp ranks `ranks` (ascending)
// each hold a part of; summed over them before optimizer_step.
struct PipelineTied {
  std::string state;
  std::vector<int64_t> ranks;
};

struct PipelineInfo {
  std::string schedule;  // for logs: gpipe, 1f1b, interleaved, zb-h1
  int64_t stages = 0;    // pp size; 0: not a pipeline program
  int64_t chunks = 1, microbatches = 0, rank = 0;
  // [buffers_offset, buffers_offset + buffers_bytes): the pools, at the top
  // of the arena; the functions' transient buffers lie below.
  int64_t buffers_offset = 0, buffers_bytes = 0;
  std::vector<PipelineStage> stage_functions;
  std::vector<PipelineAction> actions;
  std::vector<PipelinePool> pools;
  std::vector<PipelineTied> tied;

  bool present() const { return stages > 0; }
};

struct ProgramInfo {
  std::string model_path;
  int64_t arena_bytes = 0, persistent_bytes = 0, peak_live_bytes = 0;
  int64_t alignment = 64;
  std::vector<ValueInfo> inputs, outputs;
  std::vector<ParamInfo> params;
  std::vector<OpInfo> ops;
  // Training programs only: zero-initialized persistent values (optimizer
  // moments, gradient accumulators), the functions and how to run them.
  std::vector<ValueInfo> states;
  std::vector<FunctionInfo> functions;
  TrainInfo train;
  // The device grid (set_grid): axis names and sizes, and their product, the
  // number of ranks the program runs on.
  std::vector<std::string> grid_names;
  std::vector<int64_t> grid_sizes;
  int64_t world = 1;
  // Pipeline programs only (set_pipeline and what follows it).
  PipelineInfo pipeline;

  bool is_training() const { return !functions.empty(); }
  // The index of the grid axis called `name` ("pp", "dp", "tp"), -1 when the
  // grid has none.
  int64_t grid_axis(const std::string &name) const {
    for (size_t i = 0; i < grid_names.size(); ++i)
      if (grid_names[i] == name) return static_cast<int64_t>(i);
    return -1;
  }
  // The size of the grid axis called `name`, 1 when the grid has none.
  int64_t axis_size(const std::string &name) const {
    int64_t axis = grid_axis(name);
    return axis < 0 ? 1 : grid_sizes[static_cast<size_t>(axis)];
  }
  // Ranks along the data-parallel axis "dp", 1 without one.
  int64_t dp_size() const { return axis_size("dp"); }
};

// Tracks the arena's live buffers: acquiring a slot that overlaps a live one,
// or releasing one that is not live, means the memory plan is wrong and
// throws. The high-water mark is the highest byte any live slot reached.
class MemoryMonitor {
public:
  void acquire(int64_t offset, int64_t size);
  void release(int64_t offset);
  // Releases every live slot that starts at or above `offset` (a function's
  // results stay live until its run ends; the training runner drops all
  // transient slots with release_from(persistent_bytes) after each run).
  void release_from(int64_t offset);
  // Releases every live slot that starts in [from, to) (a pipeline stage's
  // transient buffers, below the pipeline buffers that stay live).
  void release_range(int64_t from, int64_t to);
  int64_t high_water_mark() const { return high_water_mark_; }
  int64_t live_bytes() const { return live_bytes_; }
  int64_t peak_live_bytes() const { return peak_live_bytes_; }

private:
  std::map<int64_t, int64_t> live_; // offset -> size
  int64_t high_water_mark_ = 0, live_bytes_ = 0, peak_live_bytes_ = 0;
};

// Chrome trace events (chrome://tracing, ui.perfetto.dev).
// In a training program op indices are per function: the runner says which
// function runs with set_function (-1: the top-level op list).
class Tracer {
public:
  void begin(int64_t op);
  void end(int64_t op);
  void set_function(int function) { function_ = function; }
  void write(const std::string &path, const ProgramInfo &info, int rank = 0) const;

private:
  struct Slice {
    int64_t op;
    int function;
    double begin_us, end_us;
  };
  std::vector<Slice> slices_;
  double open_begin_ = 0;
  int function_ = -1;
};

struct Program {
  const ProgramInfo *info = nullptr;
  Stream stream;
  // Collectives issue here (comm_stream) so that compute on `stream` runs
  // while they progress; same backend and threads as `stream`.
  Stream comm;
  // collectives[i]: the point of `comm` right after collective i of the
  // running function was issued (collective_issued), waited for with
  // collective_wait.
  std::vector<Event> collectives;
  uint8_t *arena = nullptr;
  MemoryMonitor memory;
  Tracer *tracer = nullptr;
  std::vector<Tensor> outputs;
  // The memory of the running function's inputs that have no buffer in its
  // plan (a pipeline stage's received and stashed values, which it reads
  // where the runner keeps them), in input order; see bound_input.
  std::vector<Tensor> bound;
  // Where the running function computes its outputs named "send:", "stash:"
  // or "wstash:" (a pipeline stage's: the pool slots that keep them), in
  // the order of those outputs; see bound_output.
  std::vector<Tensor> bound_outputs;
};

//===--- called by generated code: dsopt_run ------------------------------===//

inline Stream &stream(Program &p) { return p.stream; }
inline uint8_t *arena(Program &p) { return p.arena; }

inline Tensor view(uint8_t *base, int64_t offset, DType dtype, Shape shape) {
  return Tensor{base + offset, dtype, shape};
}
// Views of the program's static constants (16-bit floats are stored as their
// bit patterns, bools as bytes).
template <typename T> Tensor view_static(T *data, DType dtype, Shape shape) {
  return Tensor{const_cast<void *>(static_cast<const void *>(data)), dtype, shape};
}
inline Tensor reshape(const Tensor &t, Shape shape) { return Tensor{t.data, t.dtype, shape}; }
// The memory bound to the running function's index-th input without a
// buffer of its own (Program::bound), viewed with this dtype and shape.
// Throws when the runner bound nothing there or fewer bytes.
Tensor bound_input(Program &p, int64_t index, DType dtype, Shape shape);
// The memory bound to the running function's index-th output named "send:",
// "stash:" or "wstash:" (Program::bound_outputs), into which it computes it.
Tensor bound_output(Program &p, int64_t index, DType dtype, Shape shape);
// Overlapping collectives with compute. A generated function issues its
// collectives on comm_stream(p) and numbers them 0, 1, ... in issue order
// (per run of the function): collective_issued(p, i) right after issuing
// collective i, collective_wait(p, i) before the first kernel that reads its
// result, collectives_done(p) at the function's end. Kernels on p.stream do
// not wait for work pending only on p.comm.
//
// The stream collectives are issued on, ordered after the work enqueued on
// p.stream so far.
Stream &comm_stream(Program &p);
// Marks the point of p.comm right after collective `index` was issued.
void collective_issued(Program &p, int64_t index);
// Makes later work on p.stream wait for collective `index` (and what was
// issued on p.comm before it), without blocking the host; the next kernel on
// p.stream blocks. Costs a few atomic loads when it has completed. Throws
// its dsrt::Error at once when it has already failed; otherwise a failure
// is thrown by the next kernel or synchronize() of p.stream. Throws when
// collective `index` was not issued in this run.
void collective_wait(Program &p, int64_t index);
// Blocks until everything issued on p.comm has completed; throws the first
// failure not reported yet.
void collectives_done(Program &p);

// Generated kernels (fused loops) start as libdsrt's do: after the work
// still pending on their stream (collectives, file I/O), whose results they
// may read.
inline void begin_generated_kernel(Stream &s) { s.synchronize(); }
// The elements of a tensor view as a typed pointer (generated fused loops).
template <typename T> T *elements(const Tensor &t) { return static_cast<T *>(t.data); }
inline const Tensor *optional(const Tensor &t) { return &t; }
template <typename... Ts> std::array<Tensor, sizeof...(Ts)> tensor_array(const Ts &...ts) {
  return {ts...};
}
template <size_t N> const Tensor *data(const std::array<Tensor, N> &tensors) {
  return tensors.data();
}
// Writes `value`, converted to the tensor's type, into every element.
void fill(const Tensor &t, double value);

inline void acquire(Program &p, int64_t offset, int64_t size) { p.memory.acquire(offset, size); }
inline void release(Program &p, int64_t offset) { p.memory.release(offset); }
inline void begin_op(Program &p, int64_t op) {
  if (p.tracer) p.tracer->begin(op);
}
inline void end_op(Program &p, int64_t op) {
  if (p.tracer) p.tracer->end(op);
}
void set_output(Program &p, int64_t index, const Tensor &value);

//===--- called by generated code: dsopt_describe -------------------------===//

void set_model(ProgramInfo &info, const char *path);
void set_memory_plan(ProgramInfo &info, int64_t arena_bytes, int64_t persistent_bytes,
                     int64_t peak_live_bytes, int64_t alignment);
void add_input(ProgramInfo &info, const char *name, DType dtype, Shape shape, int64_t offset);
void add_param_file(ProgramInfo &info, const char *name, DType dtype, Shape shape,
                    int64_t offset, bool trainable, const char *file, int64_t file_offset,
                    int64_t length);
void add_param_data(ProgramInfo &info, const char *name, const Tensor &data, int64_t offset,
                    bool trainable);
void add_output(ProgramInfo &info, const char *name, DType dtype, Shape shape);
void add_op(ProgramInfo &info, const char *name, const char *location, int64_t flops,
            int64_t bytes);

// Training programs. After begin_function, add_input / add_output / add_op
// append to that function (functions.back()) instead of the top-level lists.
void add_state(ProgramInfo &info, const char *name, DType dtype, Shape shape, int64_t offset);
void begin_function(ProgramInfo &info, const char *name, int64_t arena_bytes,
                    int64_t peak_live_bytes);
void set_training(ProgramInfo &info, const char *optimizer, double lr, double gradient_clipping,
                  int64_t accumulation_steps, int64_t micro_batch, int64_t steps_per_print);
void set_schedule(ProgramInfo &info, const char *kind, double warmup_min_lr, double warmup_max_lr,
                  int64_t warmup_num_steps, int64_t total_num_steps, bool warmup_linear,
                  double warmup_min_ratio, double cos_min_ratio);

// Pipeline programs (docs/runtime.md, "Pipeline-parallel programs"). This
// program is pp rank `rank` of a pipeline of `stages` ranks with `chunks`
// virtual stages per rank (chunk c of rank r is stage c * stages + r) and
// `microbatches` micro-batches per step (== accumulation_steps); `schedule`
// names it in logs (gpipe, 1f1b, interleaved, zb-h1). The pools occupy
// [buffers_offset, buffers_offset + buffers_bytes) at the top of the arena
// (their end is arena_bytes); the functions' transient buffers lie in
// [persistent_bytes, buffers_offset).
void set_pipeline(ProgramInfo &info, const char *schedule, int64_t stages, int64_t chunks,
                  int64_t microbatches, int64_t rank, int64_t buffers_offset,
                  int64_t buffers_bytes);
// A virtual stage this rank holds and its functions ("" where absent):
// forward and backward, or (zb-h1) forward, backward_input and
// backward_weight.
void add_pipeline_stage(ProgramInfo &info, int64_t stage, const char *forward,
                        const char *backward, const char *backward_input,
                        const char *backward_weight);
// The next action of this rank's schedule, in execution order: `kind` is a
// PipelineActionKind (0 Forward, 1 Backward, 2 BackwardInput, 3
// BackwardWeight, 4 SendActivation, 5 RecvActivation, 6 SendGradient, 7
// RecvGradient), `peer` the other pp coordinate of a transfer (-1 for
// compute).
void add_pipeline_action(ProgramInfo &info, int64_t kind, int64_t microbatch, int64_t chunk,
                         int64_t peer);
// A pool of `slots` slots of `slot_bytes` bytes at arena `offset`. kind:
// "stash", "act_in", "act_out", "grad_in", "grad_out", "wstash" (of virtual
// stage `stage`) or "tied" (stage -1).
void add_pipeline_pool(ProgramInfo &info, const char *kind, int64_t stage, int64_t slots,
                       int64_t slot_bytes, int64_t offset);
// A state (gradient accumulator "grad:<param>") that the pp ranks `ranks`
// (ascending, this rank among them) each hold; before optimizer_step each
// of them replaces it by the sum of all their copies, summed in ascending
// rank order (bitwise identical on every sharer).
void add_pipeline_tied(ProgramInfo &info, const char *state, const int64_t *ranks,
                       int64_t count);

//===--- training ----------------------------------------------------------===//

// The learning rate of optimizer step `step` (1-based) under DeepSpeed's
// schedules (deepspeed/runtime/lr_schedules.py): the scheduler's constructor
// sets the first step's lr and scheduler.step() follows every optimizer
// step, so step s sees last_batch_iteration s - 2.
double scheduled_lr(const TrainInfo &train, int64_t step);

// The dropout counter of the running micro step: (seed << 32) + the number
// of micro steps run before it. Generated dropout calls read it.
uint64_t rng_counter();

//===--- the program's main ------------------------------------------------===//

using DescribeFn = void (*)(ProgramInfo &);
using RunFn = void (*)(Program &);

// `run --inputs DIR --outputs DIR [--weights DIR] [--threads N] [--trace FILE]`:
// reads <input name>.npy for every input, writes <output name>.npy for every
// output. Returns the process exit status; errors are reported, never thrown.
int forward_main(int argc, char **argv, DescribeFn describe, RunFn run);

// `train --data DIR --steps N [--log-json FILE] [--save-onnx FILE]
//  [--external-data] [--seed S] [--weights DIR] [--threads N] [--trace FILE]
//  [--quiet]`: loads the parameters, zeroes the states, runs N optimizer
// steps of accumulation_steps micro steps each on batches from DIR, logs
// every step and optionally writes the trained model. Returns the exit
// status; errors are reported, never thrown. A program with a grid of W
// ranks (set_grid) runs under mpirun -np W, every rank on its share of each
// global batch (docs/runtime.md, "Data-parallel programs").
int train_main(int argc, char **argv, DescribeFn describe, RunFn micro_step,
               RunFn optimizer_step);

// One pp rank's program of a pipeline-parallel program.
struct PipelineRankProgram {
  DescribeFn describe;     // this pp rank's description
  const RunFn *functions;  // in the order describe lists them (begin_function)
  int64_t function_count;
};

// The same flags as train_main. A program compiled for --pp=P with dp D
// runs under mpirun -np P*D; every process runs ranks[its pp coordinate]
// (rank_count == P), executing that program's static schedule every step
// with the micro-batches of its dp coordinate (docs/runtime.md,
// "Pipeline-parallel programs"). Returns the exit status; errors are
// reported, never thrown.
int pipeline_main(int argc, char **argv, const PipelineRankProgram *ranks, int64_t rank_count);

// Writes a copy of the source model (info.model_path) whose initializers
// that are program parameters hold their current values in `arena`. Every
// other byte of the model is kept; initializers that are not parameters and
// point to external data are read (from `weights_dir`, else the model's
// directory) and stored again, so the copy needs none of the source's
// files. With `external_data`, or when the initializers exceed 1 GiB,
// tensors of 1024 bytes or more go to `<path>.data` beside `path`.
// `full_values` (by parameter name) supplies the whole value of parameters
// that the arena holds only a shard of (set_param_shard); each sharded
// parameter needs one, of its dtype and full_shape. Other entries override
// the arena.
void save_onnx(const ProgramInfo &info, const uint8_t *arena, const std::string &path,
               const std::string &weights_dir, bool external_data,
               const std::map<std::string, Tensor> &full_values = {});

// Where a parameter's bytes come from when loading: the model's directory,
// unless overridden (--weights).
std::string resolve_weight_file(const ProgramInfo &info, const std::string &weights_dir,
                                const std::string &file);

}  // namespace dsrt

#endif  // DSRT_PROGRAM_H

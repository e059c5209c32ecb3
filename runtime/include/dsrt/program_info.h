// dsrt: the description of a generated program (what dsopt_describe
// fills): its inputs, parameters and where their bytes are, outputs, memory
// plan, op list, training functions and schedule, grid and pipeline, and the
// calls that fill it. Included by program.h.
#ifndef DSRT_PROGRAM_INFO_H
#define DSRT_PROGRAM_INFO_H

#include "dsrt/file_io.h"
#include "dsrt/loss_scaler.h"
#include "dsrt/tensor.h"

#include <cstdint>
#include <string>
#include <vector>

namespace dsrt {

// What a value of a program is, as its description says (the runtime
// never reads it from the value's name).
enum class ValueRole : int64_t {
  Input = 0,       // an input the caller provides: data, lr, step
  Output,          // a result the caller reads: loss, logits, grad_norm
  Param,           // a model parameter
  Accumulator,     // a state: the gradient accumulator of a parameter
  OptimizerState,  // a state: an optimizer's state of a parameter
  // A pipeline stage function's values, which the pipeline holds in its
  // pools and binds (dsrt::bound_input, dsrt::bound_output):
  Recv,         // an input received from the neighbouring stage
  Send,         // an output sent to the neighbouring stage
  Stash,        // kept by the stage's forward for its backward
  WeightStash,  // kept by the stage's backward_input for its backward_weight
  // A state: the fp32 master weights of a parameter the program holds as a
  // 16-bit working copy (mixed precision); an optimizer state that starts
  // at the model's value, not at zero.
  MasterWeights,
};
const char *value_role_name(ValueRole role);

// The memory spaces of a plan (dsopt's #ds.space, same numbers): each has an
// arena of its own, and every buffer is (space, offset). Device: what
// kernels read and write; Host: pinned host memory (offloaded state);
// File: a file-backed arena (NVMe), read and written by transfers only.
enum class Space : uint8_t { Device = 0, Host = 1, File = 2 };
constexpr int kNumSpaces = 3;
const char *space_name(Space space);  // "device", "host", "file"

// One space's arena in the plan: its bytes (the peak) and its persistent
// part at the bottom.
struct SpacePlan {
  int64_t arena_bytes = 0, persistent_bytes = 0;
};

struct ValueInfo {
  std::string name;
  DType dtype = DType::F32;
  Shape shape;
  int64_t offset = -1; // in its space's arena; -1 for outputs (their views tell)
  Space space = Space::Device;
  ValueRole role = ValueRole::Input;
  std::string param;  // a state's (Accumulator, OptimizerState) parameter
  // An integer input's valid values (set_input_range): [range_lo, range_hi),
  // and `ignore` when has_ignore (a loss's ignore_index). The runners check
  // every data file against it before training.
  bool has_range = false, has_ignore = false;
  int64_t range_lo = 0, range_hi = 0, ignore = 0;

  // What a pipeline stage reads or writes where the pipeline keeps it.
  bool pipeline_bound() const {
    return role == ValueRole::Recv || role == ValueRole::Send || role == ValueRole::Stash ||
           role == ValueRole::WeightStash;
  }
};

struct ParamInfo : ValueInfo {
  bool trainable = false;
  // Bytes in a file relative to the model's directory...
  std::string file;
  int64_t file_offset = 0, length = 0;
  // ...or in the program itself (small parameters).
  Tensor data;
  // The dtype of those bytes (the model's). It differs from `dtype` only for
  // a 16-bit working copy of an f32 parameter (set_param_working_copy):
  // loading rounds the f32 value to nearest even, and the saved model holds
  // the f32 master weights.
  DType stored = DType::F32;
  // Sharded along "dp" (set_param_shard): the whole tensor has shard_total
  // elements and full_shape, `shape` is this rank's 1-D shard [s] of it,
  // flattened and zero-padded to dp * s elements. 0: not sharded. The file
  // bytes (file_offset, length) and `data` are the whole tensor's.
  int64_t shard_total = 0;
  Shape full_shape;
  // Split over the grid's "tp" axis (set_param_tp_split): the model's tensor
  // has shape `tp_whole`; this rank's piece (full_shape when sharded along
  // dp too, else `shape`) is, along axis `tp_dim` cut into `tp_blocks`
  // equal blocks, piece r (the rank's tp coordinate) of tp ranks of every
  // block. The file bytes and `data` are the model's whole tensor.
  // tp_blocks 0: not split. tp_run: a padded split's entries per piece
  // along tp_dim (tp_padded_piece), 0 for equal pieces.
  int64_t tp_dim = 0, tp_blocks = 0, tp_run = 0;
  Shape tp_whole;

  bool sharded() const { return shard_total > 0; }
  bool tp_split() const { return tp_blocks > 0; }
  // The rank's whole tensor (its tp piece), of which a dp shard is a part.
  const Shape &rank_shape() const { return sharded() ? full_shape : shape; }
  // The model's tensor: what the ONNX initializer, the file bytes and the
  // saved model hold.
  const Shape &model_shape() const { return tp_split() ? tp_whole : rank_shape(); }
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
  // Bytes its transfers move per run, [from][to] by Space (ds-offload's
  // copies between memory spaces); the runner checks each run against it.
  int64_t transfer_bytes[kNumSpaces][kNumSpaces] = {};
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
  // fp16 (set_loss_scaler): the loss is scaled; micro_step and
  // optimizer_step take the scale as their input "loss_scale".
  bool loss_scaled = false;
  LossScalerOptions loss_scaler;
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

// The gradient accumulator of parameter `param` (a state of role
// Accumulator), of which the pp ranks `ranks` (ascending) each hold a part;
// summed over them before optimizer_step.
struct PipelineTied {
  std::string param;
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
  // The device arena (also spaces[Device]).
  int64_t arena_bytes = 0, persistent_bytes = 0, peak_live_bytes = 0;
  int64_t alignment = 64;
  // Every space's arena (set_memory_plan, set_space_plan).
  SpacePlan spaces[kNumSpaces];
  // Whether the host space's arena is pinned host memory (cudaHostAlloc on
  // cuda) or ordinary host memory (set_host_space_pinned).
  bool host_pinned = true;
  // The directory of the file space's file (set_file_space_dir: the
  // config's nvme_path); `train --nvme-path` overrides it.
  std::string file_space_dir;
  // The file space's I/O engine (set_file_space_io: the config's `aio`).
  FileIOOptions file_io;
  std::vector<ValueInfo> inputs, outputs;
  std::vector<ParamInfo> params;
  std::vector<OpInfo> ops;
  // Training programs only: zero-initialized persistent values (optimizer
  // states, gradient accumulators: their role and parameter say which),
  // the functions and how to run them.
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
  const SpacePlan &space(Space s) const { return spaces[static_cast<int>(s)]; }
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

//===--- called by generated code: dsopt_describe -------------------------===//

void set_model(ProgramInfo &info, const char *path);
void set_memory_plan(ProgramInfo &info, int64_t arena_bytes, int64_t persistent_bytes,
                     int64_t peak_live_bytes, int64_t alignment);
// The arena of the host or file space (absent: empty). Throws for Device
// (set_memory_plan gives it) and for negative or inconsistent sizes.
void set_space_plan(ProgramInfo &info, Space space, int64_t arena_bytes,
                    int64_t persistent_bytes);
// Whether the host space's arena is pinned (the default) or ordinary host
// memory: offload_param.pin_memory when only parameters are offloaded.
void set_host_space_pinned(ProgramInfo &info, bool pinned);
// The directory where the runner creates the file space's file unless
// `train --nvme-path` names another.
void set_file_space_dir(ProgramInfo &info, const char *dir);
// The file space's I/O engine: the `aio` block's block_size, queue_depth,
// intra_op_parallelism, single_submit and overlap_events (FileIOOptions).
// Throws for values out of range.
void set_file_space_io(ProgramInfo &info, int64_t block_size, int64_t queue_depth,
                       int64_t intra_op_parallelism, bool single_submit, bool overlap_events);
// Moves the parameter or state called `name` (described before) into
// `space`: its offset is then in that space's arena. Throws when no such
// value was described.
void place_in_space(ProgramInfo &info, const char *name, Space space);
// An input: role Input, or a pipeline stage's Recv, Stash or WeightStash.
void add_input(ProgramInfo &info, const char *name, DType dtype, Shape shape, int64_t offset,
               ValueRole role = ValueRole::Input);
// The input added last holds indices: its values must lie in [lo, hi)
// (the class count of a cross-entropy, the rows of a Gather's table) or
// equal `ignore` when has_ignore. Throws unless that input is an integer
// Input and lo < hi.
void set_input_range(ProgramInfo &info, int64_t lo, int64_t hi, bool has_ignore,
                     int64_t ignore);
void add_param_file(ProgramInfo &info, const char *name, DType dtype, Shape shape,
                    int64_t offset, bool trainable, const char *file, int64_t file_offset,
                    int64_t length);
void add_param_data(ProgramInfo &info, const char *name, const Tensor &data, int64_t offset,
                    bool trainable);
// The parameter added last (its dtype there the model's, f32) is held by the
// program as a 16-bit working copy of `dtype` (F16 or BF16); its fp32 master
// is a state of role MasterWeights. Throws for other dtypes.
void set_param_working_copy(ProgramInfo &info, DType dtype);
// The parameter whose fp32 master weights `state` is (role MasterWeights),
// or null.
const ParamInfo *master_param(const ProgramInfo &info, const ValueInfo &state);
// An output: role Output, or a pipeline stage's Send, Stash or WeightStash.
void add_output(ProgramInfo &info, const char *name, DType dtype, Shape shape,
                ValueRole role = ValueRole::Output);
void add_op(ProgramInfo &info, const char *name, const char *location, int64_t flops,
            int64_t bytes);

// Training programs. After begin_function, add_input / add_output / add_op
// append to that function (functions.back()) instead of the top-level lists.
// A state: role Accumulator, OptimizerState or MasterWeights, of parameter
// `param`; `name`
// is for messages and lookups only.
void add_state(ProgramInfo &info, const char *name, DType dtype, Shape shape, int64_t offset,
               ValueRole role, const char *param);
void begin_function(ProgramInfo &info, const char *name, int64_t arena_bytes,
                    int64_t peak_live_bytes);
// The function begun last moves `bytes` from space `from` to space `to`
// each run (the sum of its transfers between those spaces).
void set_transfer_bytes(ProgramInfo &info, Space from, Space to, int64_t bytes);
void set_training(ProgramInfo &info, const char *optimizer, double lr, double gradient_clipping,
                  int64_t accumulation_steps, int64_t micro_batch, int64_t steps_per_print);
void set_schedule(ProgramInfo &info, const char *kind, double warmup_min_lr, double warmup_max_lr,
                  int64_t warmup_num_steps, int64_t total_num_steps, bool warmup_linear,
                  double warmup_min_ratio, double cos_min_ratio);
void set_loss_scaler(ProgramInfo &info, double static_scale, int64_t initial_scale_power,
                     int64_t window, int64_t hysteresis, bool consecutive_hysteresis,
                     double min_scale);

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
// The gradient accumulator of parameter `param` (the state of role
// Accumulator of it), which the pp ranks `ranks` (ascending, this rank among
// them) each hold; before optimizer_step each of them replaces it by the sum
// of all their copies, summed in ascending rank order (bitwise identical on
// every sharer).
void add_pipeline_tied(ProgramInfo &info, const char *param, const int64_t *ranks,
                       int64_t count);
// The index in info.states of the gradient accumulator of parameter
// `param`; throws naming `what` if there is none.
int64_t find_accumulator(const ProgramInfo &info, const std::string &param,
                         const std::string &what);

}  // namespace dsrt

#endif  // DSRT_PROGRAM_INFO_H

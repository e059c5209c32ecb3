// What the training runners (train_main, pipeline_main) share: their flags,
// the checks of a description, the data files, the runner's own exchanges
// between ranks, the log and the end-of-run summary. Not installed.
#ifndef DSRT_SRC_TRAIN_COMMON_H
#define DSRT_SRC_TRAIN_COMMON_H

#include "dsrt/backend.h"
#include "dsrt/checkpoint.h"
#include "dsrt/comm.h"
#include "dsrt/loss_scaler.h"
#include "dsrt/npy.h"
#include "dsrt/program.h"
#include "runner.h"

#include <cstdint>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace dsrt {
namespace runner {

//===--- flags ------------------------------------------------------------------===//

struct TrainOptions {
  std::string data, log_json, save_onnx, weights, trace;
  std::string nvme_path;  // the file space's directory ("": $TMPDIR or /tmp)
  // What a step whose gradients or loss hold a NaN or an infinity does:
  // stop the run or skip its update (--on-nonfinite; without it, a 16-bit
  // program skips and a fp32 one stops, see verdict_options).
  bool skip_nonfinite = false;
  bool nonfinite_given = false;  // --on-nonfinite was given
  int64_t steps = 0;
  uint64_t seed = 0;
  bool seed_given = false;  // --seed was given (a resume checks it)
  // Checkpoints (docs/checkpoints.md): written to save_dir every
  // save_interval steps (0: only after the last), keeping the newest `keep`
  // (0: all); `resume` is a checkpoint or a directory of them.
  std::string save_dir, resume;
  int64_t save_interval = 0, keep = 0;
  // Checkpoint writes overlap training unless --sync-save is given or the
  // snapshot exceeds --save-staging-limit bytes (-1: no limit).
  bool sync_save = false;
  int64_t save_staging_limit = -1;
  int threads = 0;
  bool external_data = false, quiet = false;
};

// Whose flags: the usage text ends with how the program is launched.
enum class Launch { DataParallel, Pipeline };

// Parses train's flags into `options`; false after --help (printed). Throws
// for bad flags.
bool parse_train(int argc, char **argv, TrainOptions &options, Launch launch);

//===--- the description ----------------------------------------------------------===//

const FunctionInfo &find_function(const ProgramInfo &info, const std::string &name);
// -1 when the program has no such function.
int find_function_index(const ProgramInfo &info, const std::string &name);
// The index of the value called `name`; throws naming `what` and the values
// there are when it is missing.
int64_t find_value(const std::vector<ValueInfo> &values, const std::string &name,
                   const std::string &what);
void check_in_arena(const ProgramInfo &info, const ValueInfo &value, const std::string &what);
// What every training program must satisfy: accumulation and micro-batch
// sizes, the lr schedule, parameters and states inside the arena.
void check_training_basics(const ProgramInfo &info);
// Function `name` exists, plans no more than the arena and has its data
// inputs inside it.
void check_function_plan(const ProgramInfo &info, const std::string &name);
// A data input (role Input, loaded from --data); a pipeline stage's other
// inputs (roles Recv, Stash, WeightStash) are values it received or kept,
// which it reads where the pipeline holds them (dsrt::bound_input).
bool is_data(const ValueInfo &input);
// optimizer_step's inputs lr and step and its output grad_norm.
void check_optimizer_step(const ProgramInfo &info);
// Throws unless the job has the program's `world` ranks.
void check_job_size(const ProgramInfo &info, int job_ranks);

//===--- data --------------------------------------------------------------------===//

// One data file: `batches` global batches of one input, each holding
// ranks * accumulation_steps micro-batches.
struct InputData {
  const ValueInfo *input = nullptr;
  NpyArray array;
  int64_t batches = 0;
  size_t micro_bytes = 0;  // one micro-batch (the input's slot)
  size_t batch_bytes = 0;  // one global batch in the file
  bool per_batch_scalar = false;  // rank-0 input: one value per global batch
};

// Reads <name>.npy from `dir` for every input and checks its layout: a
// global batch holds `ranks` * accumulation_steps micro-batches (rank r's
// are r*k .. r*k+k-1). An input with a range (ValueInfo::has_range) has
// the values of rank `rank`'s micro-batches (every rank's when rank < 0)
// checked against it.
std::vector<InputData> load_data(const std::vector<const ValueInfo *> &inputs,
                                 const std::string &dir, int64_t accumulation_steps,
                                 int64_t ranks, int64_t rank = -1);
// Global batches in the data files (1 without files).
inline int64_t batch_count(const std::vector<InputData> &data) {
  return data.empty() ? 1 : data.front().batches;
}
// Acquires `slot` (a function input of item's name and type) and copies
// micro-batch `global_micro` of global batch `batch` into it.
void load_micro_batch(Program &program, const InputData &item, const ValueInfo &slot,
                      int64_t batch, int64_t global_micro);

//===--- running -----------------------------------------------------------------===//

// "step 3 (global batch 2, micro-batch 1 of the files in 'data'): ", put
// before an error of a step's functions so that a bad value in the data
// can be found (micro_batch -1: not known).
std::string step_context(const TrainOptions &options, int64_t step, int64_t batch,
                         int64_t micro_batch);

// Runs the program's function `index`; then releases the host space's
// transient slots and checks the bytes its transfers moved against the plan
// (check_transfers).
void run_function(Program &program, RunFn run, int index);
// Throws unless the bytes transferred between each pair of spaces since
// `before` (transferred_bytes) are the function's planned transfer_bytes.
void check_transfers(const FunctionInfo &function,
                     const int64_t (&before)[kNumSpaces][kNumSpaces]);
// fp16: the input of micro_step and optimizer_step that carries the loss
// scale (TrainInfo::loss_scaled); it is not data.
constexpr const char *kLossScaleInput = "loss_scale";
// What a micro step's loss_scale input gets: the seed of its backward pass,
// the scale over the accumulation steps k, as DeepSpeed divides the loss by
// k before scaling it (overflow is judged on s times the average gradient,
// not k times that); optimizer_step gets the scale itself.
inline double micro_step_loss_scale(double scale, int64_t accumulation_steps) {
  return scale / static_cast<double>(accumulation_steps > 0 ? accumulation_steps : 1);
}
// Writes the f32 or i64 scalar input `name` of `function` into its slot.
void write_scalar_input(Program &program, const FunctionInfo &function, const std::string &name,
                        double value);
// Runs optimizer_step at learning rate `lr` and step count `step`, with
// `loss_scale` when the program's loss is scaled; returns grad_norm.
double run_optimizer_step(Program &program, RunFn optimizer_step, double lr, int64_t step,
                          double loss_scale = 1);
// After the first update this process applies (`step` counts them from 1,
// also after a resume) each space's measured high-water mark must be its
// plan's arena.
void check_arena_peak(const Program &program, int64_t step);

//===--- the runner's exchanges between ranks ------------------------------------===//

// Payload bytes and calls of every kind of collective, as the communicator
// counts them.
struct CommTally {
  int64_t calls[kNumCommOps] = {}, sent[kNumCommOps] = {}, received[kNumCommOps] = {};

  static CommTally of(const Communicator &comm);
  // Summed over every communicator of a grid.
  static CommTally of(const Grid &grid);
  CommTally &operator+=(const CommTally &o);
  CommTally operator-(const CommTally &o) const;
};

// Thrown once a rank's failure has been reported on every rank.
struct ReportedFailure {};

// A runner's exit status: `body`'s, or 1 after an error, printed as
// "error: ..." unless it was reported already (ReportedFailure).
int run_reporting_errors(const std::function<int()> &body);

// The collectives the runner itself issues (agreeing on errors, the step's
// losses, the summary, gathering parameters to save) go through here: on a
// stream of their own, waited for at once, and their bytes kept apart so
// that the program's own traffic can be measured. A world of one rank
// exchanges nothing. Every tensor given here is host memory; on a
// communicator whose transport works on device memory (NCCL) it is staged
// through device buffers allocated for the call (pinned host memory between
// them, write_from_host and read_to_host).
class RunnerComm {
public:
  explicit RunnerComm(Communicator &comm) : comm_(comm) {}
  int rank() const { return comm_.rank(); }
  int size() const { return comm_.size(); }
  // What the runner's exchanges moved on the communicators of `grid` (the
  // host-side world, Communicator::world(), is the grid's world only on
  // the cpu backend).
  CommTally own(const Grid &grid) const;

  // out = every rank's in, in rank order (out.numel() == size * in.numel()).
  void all_gather(const Tensor &in, const Tensor &out) { all_gather(comm_, in, out); }
  // The same among the ranks of `comm` (an axis communicator).
  void all_gather(Communicator &comm, const Tensor &in, const Tensor &out);
  // Point to point on `comm`, one group (Communicator::send_recv).
  void send_recv(Communicator &comm, const std::vector<P2POp> &ops);
  // Returns once every rank of the world has reached it.
  void barrier();

  // Whether any rank failed (`error` non-empty on the ranks that did); if
  // one did, every rank reports and throws ReportedFailure. `when` says
  // what failed ("before training", "at step 3").
  void agree(const std::string &error, const std::string &when);
  // Gathers every rank's step report (`report`, whose element 0 is this
  // rank's failure flag, set here from `error`) into `reports` and fails
  // as agree does when any rank failed at step `step`.
  void gather_step_reports(const std::string &error, std::vector<float> &report,
                           std::vector<float> &reports, int64_t step);
  // Reports `error` (this rank's) or the ranks in `failed` that did fail.
  void fail_if_any(const std::string &error, const std::vector<int32_t> &failed,
                   const std::string &when);

private:
  // Runs `exchange` (one collective on `comm`, waited for) and tallies it.
  void tally(Communicator &comm, const std::function<void()> &exchange);

  Communicator &comm_;
  Stream stream_{backend().kind()};
  std::map<const Communicator *, CommTally> own_;
};

//===--- non-finite steps ---------------------------------------------------------===//
//
// Before a step's update, every rank looks for a NaN or an infinity in its
// gradient accumulators and its micro-batches' losses, and the ranks agree
// on what they found: the update is applied everywhere or nowhere.

// This rank's finding: the index in info.states of the first gradient
// accumulator holding a non-finite value, else kNonfiniteLoss when one of
// `losses` is not finite, else kStepClean. kStepFailed: the step already
// failed on this rank.
constexpr int32_t kStepClean = -1, kStepFailed = -2, kNonfiniteLoss = 1 << 30;
int32_t find_nonfinite(Program &program, const float *losses, int64_t count);

// Every rank's finding (a runner all_gather): the first rank (lowest) that
// found a non-finite value and what it found, and whether any rank failed.
struct StepVerdict {
  bool failed = false;
  int rank = -1;
  int32_t found = kStepClean;
  bool nonfinite() const { return rank >= 0; }
};
// `own_error`: this rank's failure of the step, thrown in place of the
// exchange's when the exchange fails.
StepVerdict agree_on_step(RunnerComm &exchange, int32_t mine, const std::string &own_error);
// "step 4: the gradient of 'fc.weight' holds a NaN or an infinity (found
// on rank 1)"; `info` is that rank's description (this rank's when equal).
std::string nonfinite_message(const ProgramInfo &info, const StepVerdict &verdict,
                              int64_t step);
// A skipped step's gradients are dropped: every accumulator back to zero.
void drop_gradients(Program &program);
// What this rank does with a step once the ranks agreed on `verdict`:
// returns true when it runs optimizer_step. Otherwise a rank failed (the
// step's report names it), or the step stops the run (the finding rank's
// `step_error` names the parameter), or, with --on-nonfinite skip, it is
// skipped: `skip` is set, the gradients are dropped and the finding rank
// says why.
bool settle_step(Program &program, const StepVerdict &verdict, const TrainOptions &options,
                 int rank, int64_t step, std::string &step_error, bool &skip);

//===--- checkpoints (train_checkpoint.cpp) ----------------------------------------===//

// A persistent value of this rank as a checkpoint stores it: elements
// [begin, begin + count) of the flattened logical tensor `key` (of `dtype`
// and whole `shape`); count may run past the tensor's end (a ZeRO shard's
// padding, which is not stored). `sharded`: each dp coordinate holds its
// own range; otherwise every dp coordinate holds the whole tensor.
struct Placement {
  const ValueInfo *value = nullptr;
  std::string key;
  DType dtype = DType::F32;
  Shape shape;
  int64_t begin = 0, count = 0;
  bool sharded = false;
  // A tp piece: its key and shape are this rank's piece's
  // (checkpoint::tp_piece_key), which every tp rank saves; other values
  // are saved by tp coordinate 0. `tp_param` is the split parameter whose
  // layout it has.
  bool tp_piece = false;
  const ParamInfo *tp_param = nullptr;
  // The logical tensor's key ("param:NAME", "state:NAME"), without a tp
  // piece's suffix.
  std::string base;
};
// Every parameter and optimizer state of `info` on dp coordinate `dp_rank`
// of `dp` (gradient accumulators hold nothing between steps: a resumed
// run starts them from zero, as a fresh one does), on this rank's tp
// coordinate.
std::vector<Placement> checkpoint_placements(const ProgramInfo &info, int64_t dp, int64_t dp_rank);
// The model's identity over the parameters of every program of a job (a
// pipeline's pp ranks); layout-independent.
std::string checkpoint_model_identity(const std::vector<const ProgramInfo *> &infos);
// "dp=2 pp=1" from the grid.
std::string checkpoint_layout(const ProgramInfo &info);

// What a checkpoint restores besides the tensors: the step reached, the
// updates applied (the lr schedule's and the optimizer's step count), the
// steps skipped and the loss scaler of mixed-precision training (the
// "loss_scaler" manifest line; none in fp32 training).
struct CheckpointPosition {
  int64_t step = 0, applied = 0, skipped = 0;
  bool has_loss_scaler = false;
  checkpoint::LossScalerState loss_scaler;
};
struct CheckpointContext {
  std::string model, layout;
  int64_t dp = 1, dp_rank = 0, data_batches = 0;
};
// Creates --save-dir and checks that this rank can write there (before
// training starts).
void check_save_dir(const TrainOptions &options, int world_rank);
// Whether a checkpoint is written after `step`.
bool checkpoint_due(const TrainOptions &options, int64_t step);
// The checkpoints of a run (docs/checkpoints.md, "Background writes").
// save() is collective: every rank snapshots its shards into a host
// staging buffer of snapshot_bytes() (read from the device, the host or
// the file space) and a thread of its own writes, checksums and fsyncs its
// shard file into the temporary directory while training goes on. At every
// step boundary poll() (collective: one all-gather of three integers while
// a write is pending) learns whether every rank's file is durable; once it
// is, rank 0 commits — the manifest, the rename into place, `latest`, the
// pruning — and any rank's failure fails every rank. finish() (at the end
// of training, collective) waits for the pending write and commits it; a
// save while one is pending does the same first. With --sync-save, or a
// snapshot larger than --save-staging-limit, the write and the commit
// happen within save() instead (the staging buffer is then the same, freed
// at once).
class CheckpointSaver {
public:
  CheckpointSaver(const ProgramInfo &info, const CheckpointContext &context,
                  const TrainOptions &options);
  ~CheckpointSaver();
  CheckpointSaver(const CheckpointSaver &) = delete;
  CheckpointSaver &operator=(const CheckpointSaver &) = delete;
  void save(Program &program, RunnerComm &exchange, const CheckpointPosition &position);
  void poll(RunnerComm &exchange);
  void finish(RunnerComm &exchange);
  // The staging buffer's size (the bytes of this rank's shards) and its
  // measured high-water mark over the run (0 before the first save).
  int64_t snapshot_bytes() const { return snapshot_bytes_; }
  int64_t staging_peak() const { return staging_peak_; }
  // Whether writes overlap training (every rank's snapshot fits; known
  // after the first save), and whether the run saves at all.
  bool background() const { return background_; }
  bool enabled() const { return !options_.save_dir.empty(); }

private:
  void commit(RunnerComm &exchange);
  const ProgramInfo &info_;
  const CheckpointContext &context_;
  const TrainOptions &options_;
  int64_t snapshot_bytes_ = 0, staging_peak_ = 0;
  bool fits_ = false, background_ = false, decided_ = false;
  struct Pending;
  std::unique_ptr<Pending> pending_;
};
// Collective: `, "checkpoint_staging": {...}` for the log's summary
// (docs/checkpoints.md): whether writes ran in the background and each
// rank's planned staging bytes and measured high-water mark; "" without
// --save-dir.
std::string checkpoint_staging_json(const CheckpointSaver &saver, RunnerComm &exchange);
// The bytes of the shards rank `dp_rank` of `info` writes (its staging
// buffer): the placements it saves, without the padding past a tensor's end.
int64_t checkpoint_snapshot_bytes(const ProgramInfo &info, int64_t dp, int64_t dp_rank);
// Loads --resume's checkpoint into this rank's persistent values (any
// layout that wrote it) and returns where training stands; sets
// options.seed to the checkpoint's. Throws naming the file at fault.
CheckpointPosition resume_checkpoint(Program &program, const CheckpointContext &context,
                                     TrainOptions &options, int world_rank, int world);
// Before training, after prepare_program: check_save_dir, then the resume
// when --resume is given (else step 0).
CheckpointPosition start_checkpoints(Program &program, const CheckpointContext &context,
                                     TrainOptions &options, int world_rank, int world);

//===--- the log ----------------------------------------------------------------===//

// Float as JSON (with full precision); NaN and infinities as Python's json
// module reads and writes them.
std::string json_number(double value);

struct FileCloser {
  void operator()(FILE *f) const {
    if (f) fclose(f);
  }
};

// What rank 0 writes: the log file and the model to save, opened and
// checked before training so that a bad path fails before the first step.
struct TrainOutputs {
  std::unique_ptr<FILE, FileCloser> log_json;
  std::shared_ptr<const OnnxSaveSource> save_source;
};
// `save_info` lists the parameters the saved model gets.
void open_outputs(const TrainOptions &options, const ProgramInfo &save_info, bool rank0,
                  TrainOutputs &outputs);
// `gather(axis, in, out)`: out (host memory) = every rank's `in` along the
// grid axis named `axis`, in coordinate order; a copy where the grid has no
// such axis.
using AxisGather =
    std::function<void(const std::string &axis, const Tensor &in, const Tensor &out)>;
// The runner's gather along the axes of `grid` (counted as its own traffic).
AxisGather runner_axis_gather(RunnerComm &exchange, const ProgramInfo &info, Grid &grid,
                              Stream &stream);
// The whole value of `param` that --save-onnx writes: its fp32 master
// weights where the program trains a 16-bit working copy (master_param),
// else the parameter. A ZeRO shard (this rank's [s] of the flat value) is
// put together by gathering along "dp", a tp piece then by gathering along
// "tp" and putting each rank's piece in its place: every rank of those axes
// must call it alike. `buffers` own what is not a view of the arena.
Tensor whole_saved_value(Program &program, const ParamInfo &param, const AxisGather &gather,
                         std::vector<std::vector<uint8_t>> &buffers);

// A program of `info` with its streams (`threads` kernel threads; 0: all
// cores), before its arena exists.
void init_program(Program &program, const ProgramInfo &info, int threads);
// The arenas of every memory space a program's plan has.
struct ProgramMemory {
  ProgramArena device;
  SpaceArenas spaces;
};
// Allocates the arenas, loads the parameters (rank `dp_rank`'s shards),
// zeroes the states but the fp32 master weights, which get the model's
// values (load_masters), each in its space; `world_rank` names the file
// space's file.
void prepare_program(Program &program, ProgramMemory &memory, const TrainOptions &options,
                     int64_t dp_rank, int world_rank);

struct StepLog {
  int64_t step = 0;
  double loss = 0, lr = 0, grad_norm = 0;
  bool skipped = false;  // the update was not applied (non-finite values)
  double loss_scale = 0;  // fp16: the scale the step used (0: none)
  std::string scaler_note;  // fp16: the scaler's change, DeepSpeed's wording
};
// The step line on stdout (rank 0, every steps_per_print steps and the
// last) and the JSON line; `samples` per step, the arena's from `program`.
// With a file arena the JSON line has the step's file I/O ("file_io": bytes
// read and written, requests, the engine's busy time and the program's
// blocked waits since the previous line; the first line counts from the
// store's creation). Returns the step's time, from `start_us` (now_us()) to
// the call.
double log_step(const TrainOptions &options, Program &program, bool rank0, FILE *log_json,
                int64_t samples, double start_us, const StepLog &entry);

// fp16 (TrainInfo::loss_scaled): the run's loss scaler, continued from
// `position` when it carries one (a resumed fp16 run), at its initial scale
// otherwise (a fresh run, or an fp32/bf16 checkpoint); none without fp16
// (an fp16 checkpoint's scaler is dropped).
std::optional<LossScaler> start_loss_scaler(const ProgramInfo &info,
                                            const CheckpointPosition &position);
// The position of a checkpoint after `step`, with the scaler's state.
CheckpointPosition checkpoint_position(int64_t step, int64_t applied, int64_t skipped,
                                       const std::optional<LossScaler> &scaler);
// The options settle_step judges a step by: with a loss scaler a
// non-finite step is an overflow, always skipped, which the scaler's note
// reports.
TrainOptions verdict_options(const TrainOptions &options, const std::optional<LossScaler> &scaler,
                             const ProgramInfo &info);
// After the step verdict (unless it failed or `step_error` is set): the
// scaler's update (every step; an overflow is a non-finite verdict), its
// note for the log and the scale the step used. An overflow at the minimum
// scale sets `step_error`, naming the step.
void update_loss_scaler(std::optional<LossScaler> &scaler, const StepVerdict &verdict,
                        int64_t step, StepLog &entry, std::string &step_error);
// fp16: `input` is the loss scale the runner writes, not data.
bool is_loss_scale(const ProgramInfo &info, const ValueInfo &input);

// What the program's own collectives moved: the counters of the grid's
// communicators less the runner's own exchanges, since `start`.
struct TrafficStart {
  CommTally grid, runner;
  static TrafficStart now(const Grid &grid, const RunnerComm &exchange) {
    return {CommTally::of(grid), exchange.own(grid)};
  }
};

// The summary line's fields per rank: each space's arena peak (device,
// host, file), then sent, received and calls of each reported kind.
constexpr int kSummaryKinds = 5;
constexpr int kSummaryFields = kNumSpaces + 3 * kSummaryKinds;
// Every rank's arena peaks and what the program's collectives moved since
// `start`, gathered in world rank order.
std::vector<int64_t> gather_summary(RunnerComm &exchange, const Grid &grid,
                                    const TrafficStart &start, const Program &program);
// The summary line; `extra` (members, e.g. "\"pipeline\": {...}") goes
// after the ranks.
std::string summary_json(int64_t steps, int world, const std::vector<int64_t> &all,
                         const std::string &extra = "");
// "\"skipped_steps\": N" for the summary line's `extra`.
std::string skipped_json(int64_t skipped);
// The summary line ends the log (programs with a grid), and the log is
// closed.
void close_log(const TrainOptions &options, TrainOutputs &outputs, bool has_grid, int64_t steps,
               int world, const std::vector<int64_t> &all, const std::string &extra = "");
// "trained N steps ..." on stderr: `steps` run by this process (fewer
// than --steps after a resume).
void print_trained(const TrainOptions &options, bool rank0, const Program &program,
                   int64_t steps, int64_t micro_steps, double total_us, int64_t skipped = 0);

}  // namespace runner
}  // namespace dsrt

#endif  // DSRT_SRC_TRAIN_COMMON_H

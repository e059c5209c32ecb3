// dsrt: the training runners' checkpoints (train_common.h,
// docs/checkpoints.md): which logical range of which tensor each persistent
// value of a rank holds, the collective save (temporary directory, fsync,
// rename, `latest`, pruning) and the resume that reads whatever ranges a
// rank needs from the files that hold them. Persistent bytes move only
// through the backend (read_to_host, store_persistent).
#include "dsrt/backend.h"
#include "dsrt/checkpoint.h"
#include "dsrt/dist.h"
#include "health.h"
#include "runner.h"
#include "train_common.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <map>
#include <optional>
#include <stdio.h>
#include <sys/stat.h>
#include <thread>
#include <unistd.h>

namespace dsrt {
namespace runner {

namespace ck = dsrt::checkpoint;

namespace {

std::string step_name(int64_t step) { return "step_" + std::to_string(step); }

// The step of a directory called step_<N>, else -1.
int64_t step_of(const std::string &name) {
  if (name.compare(0, 5, "step_") != 0 || name.size() == 5) return -1;
  int64_t step = 0;
  for (size_t i = 5; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9' || step > (INT64_MAX - 9) / 10) return -1;
    step = step * 10 + (name[i] - '0');
  }
  return step;
}

// The complete checkpoints (step_<N> with a manifest) in `dir`, oldest first.
std::vector<std::pair<int64_t, std::string>> complete_checkpoints(const std::string &dir) {
  std::vector<std::pair<int64_t, std::string>> found;
  DIR *d = opendir(dir.c_str());
  if (!d) return found;
  while (dirent *e = readdir(d)) {
    const std::string name = e->d_name;
    const int64_t step = step_of(name);
    struct stat st;
    if (step >= 0 && stat(ck::join_path(ck::join_path(dir, name), "manifest").c_str(), &st) == 0)
      found.emplace_back(step, name);
  }
  closedir(d);
  std::sort(found.begin(), found.end());
  return found;
}

// Renames `from` to `to`, replacing a `to` that exists (an older save of
// the same step) by exchanging the two and removing the old one.
void rename_into_place(const std::string &from, const std::string &to) {
  if (std::rename(from.c_str(), to.c_str()) == 0) return;
  if (errno != ENOTEMPTY && errno != EEXIST)
    throw Error("cannot rename '" + from + "' to '" + to + "': " + strerror(errno));
  if (renameat2(AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), RENAME_EXCHANGE) != 0)
    throw Error("cannot replace '" + to + "' by '" + from + "': " + strerror(errno));
  ck::remove_tree(from);
}

// This rank's tp piece of `param`'s tensor `base` (padded: its extent).
ck::TpPiece own_piece(const ProgramInfo &info, const ParamInfo &param, const std::string &base) {
  const int64_t ranks = info.axis_size("tp"), extent = param.tp_whole[param.tp_dim];
  return {base, own_coordinate(info, "tp"), ranks, param.tp_dim, param.tp_blocks,
          param.tp_run != 0 ? extent : 0};
}

const ck::Record *find_record(const ck::Checkpoint &c, const std::string &key) {
  for (const ck::ShardFile &file : c.files)
    for (const ck::Record &record : file.records)
      if (record.key == key) return &record;
  return nullptr;
}

// The dtype of logical tensor `base` in `c` (its record's or its tp
// pieces'), if it holds it.
std::optional<DType> whole_dtype(const std::vector<ck::Record> &wholes, const std::string &base) {
  for (const ck::Record &r : wholes)
    if (r.key == base) return r.dtype;
  return std::nullopt;
}

// Placement p's elements from checkpoint `c`. A record of p's own key,
// dtype and shape (the same tp layout and precision) is read as it is. Otherwise the
// whole tensor is read (tp pieces of any tp size put back together),
// converted, cut into this rank's tp piece and its range taken, so a
// checkpoint resumes at another tp size and at another precision: the
// fp32 master weights carry over exactly. A 16-bit run's parameter is a
// rounded copy, so an fp32 parameter reads that run's master weights
// ("master:<name>"); a 16-bit program's master weights read an fp32 run's
// parameter, and its working copy is rounded from it to nearest even, as
// loading a model does. Anything else is an error naming the checkpoint
// and both dtypes.
std::vector<uint8_t> read_placement(const ck::Checkpoint &c, const ProgramInfo &info,
                                    const Placement &p) {
  // (A padded tp piece an older runtime wrote under the same key has
  // fewer entries: it is put back together and cut again.)
  if (const ck::Record *own = find_record(c, p.key);
      own && own->dtype == p.dtype && own->shape == p.shape)
    return ck::read_range(c, p.key, p.dtype, p.shape, p.begin, p.count);
  const std::vector<ck::Record> wholes = ck::whole_tensors(c);
  const std::optional<DType> own = whole_dtype(wholes, p.base);
  auto f32_tensor = [&](const std::string &key) { return whole_dtype(wholes, key) == DType::F32; };
  std::string source = p.base;
  if (!own || *own != p.dtype) {
    if (p.value->role == ValueRole::Param) {
      const std::string master = "state:master:" + p.value->name;
      if (f32_tensor(master)) source = master;
    } else if (const ParamInfo *param = master_param(info, *p.value)) {
      if (!own && f32_tensor("param:" + param->name)) source = "param:" + param->name;
    }
  }
  ck::WholeTensor whole = ck::read_whole(c, source);
  const Shape model = p.tp_param ? p.tp_param->tp_whole : p.shape;
  if (whole.shape != model)
    throw Error("checkpoint '" + c.dir + "': tensor '" + source + "' is " + whole.shape.str() +
                "; this program's is " + model.str());
  if (whole.dtype != p.dtype) {
    if (whole.dtype != DType::F32)
      throw Error("checkpoint '" + c.dir + "': tensor '" + source + "' is " +
                  dtype_name(whole.dtype) + " " + whole.shape.str() + "; this program's is " +
                  dtype_name(p.dtype) + " " + model.str());
    std::vector<uint8_t> converted(static_cast<size_t>(model.numel()) * dtype_size(p.dtype));
    convert_host_floats(Tensor{whole.bytes.data(), DType::F32, model},
                        Tensor{converted.data(), p.dtype, model});
    whole.bytes = std::move(converted);
  }
  whole.dtype = p.dtype;
  if (!p.tp_param) return ck::piece_range(whole, nullptr, p.begin, p.count);
  const ck::TpPiece piece = own_piece(info, *p.tp_param, p.base);
  return ck::piece_range(whole, &piece, p.begin, p.count);
}

// DSRT_SAVE_PAUSE_STEP=N, for fault tests: rank 0 stops inside the save of
// step N once every file of the checkpoint is written and synced and
// before it is renamed into place, says so on stderr and waits (60 s at
// most) for the kill the test sends, which then lands in the save
// deterministically.
void pause_in_save_for_tests(int64_t step) {
  const char *text = std::getenv("DSRT_SAVE_PAUSE_STEP");
  if (!text || !*text) return;
  char *end = nullptr;
  const long long at = std::strtoll(text, &end, 10);
  if (*end != '\0' || at < 1)
    throw Error(std::string("DSRT_SAVE_PAUSE_STEP=") + text + " is not a step >= 1");
  if (at != step) return;
  std::fprintf(stderr,
               "dsrt: pausing in the save of checkpoint step_%lld before its rename "
               "(DSRT_SAVE_PAUSE_STEP)\n",
               at);
  std::fflush(stderr);
  for (int i = 0; i < 600; ++i) usleep(100000);
}

}  // namespace

std::vector<Placement> checkpoint_placements(const ProgramInfo &info, int64_t dp,
                                             int64_t dp_rank) {
  std::map<std::string, const ParamInfo *> params;
  for (const ParamInfo &param : info.params) params[param.name] = &param;
  std::vector<Placement> out;
  auto whole_shape = [](const ParamInfo &p) { return p.rank_shape(); };
  // A tp piece is saved under its own key, which says how to put the
  // pieces back together (a resume at another tp size does).
  auto placement = [&](const ValueInfo &value, const ParamInfo &param, const std::string &base) {
    Placement p{&value, base, value.dtype, whole_shape(param), 0, 0, false};
    p.base = base;
    if (param.tp_split()) {
      p.tp_piece = true;
      p.tp_param = &param;
      p.key = ck::tp_piece_key(own_piece(info, param, base));
    }
    return p;
  };
  for (const ParamInfo &param : info.params) {
    Placement p = placement(param, param, "param:" + param.name);
    p.sharded = param.sharded();
    p.count = param.shape.numel();
    p.begin = p.sharded ? dp_rank * p.count : 0;
    out.push_back(p);
  }
  for (const ValueInfo &state : info.states) {
    // Between steps no gradient is pending: a run starts from zeroed
    // accumulators, and ZeRO stages 1-3 leave scratch in theirs that the
    // next micro_step overwrites. They are not part of the checkpoint.
    if (state.role == ValueRole::Accumulator) continue;
    auto it = params.find(state.param);
    if (it == params.end())
      throw Error("checkpoint: state '" + state.name + "' belongs to parameter '" + state.param +
                  "', which this program does not have");
    Placement p = placement(state, *it->second, "state:" + state.name);
    const int64_t n = p.shape.numel(), s = state.shape.numel();
    // A state in the parameter's own shape is whole; a 1-D slot of
    // ceil(n / dp) elements is this rank's shard of the flattened,
    // zero-padded tensor (ZeRO stages 1-3).
    if (state.shape == p.shape || s == n) {
      p.begin = 0;
      p.count = s;
    } else if (state.shape.rank == 1 && dp > 1 && s == (n + dp - 1) / dp) {
      p.sharded = true;
      p.begin = dp_rank * s;
      p.count = s;
    } else {
      throw Error("checkpoint: state '" + state.name + "' " + state.shape.str() +
                  " is neither its parameter's shape " + p.shape.str() + " nor a shard of it");
    }
    out.push_back(p);
  }
  return out;
}

std::string checkpoint_model_identity(const std::vector<const ProgramInfo *> &infos) {
  std::vector<std::string> entries;
  for (const ProgramInfo *info : infos)
    for (const ParamInfo &param : info->params)
      // The model's dtype (a 16-bit working copy's is f32) and shape (a
      // tp piece's is the whole tensor's): precision and layout may change
      // on resume.
      entries.push_back(param.name + " " + dtype_name(param.stored) + " " +
                        param.model_shape().str());
  return ck::model_identity(entries);
}

std::string checkpoint_layout(const ProgramInfo &info) {
  std::string text;
  for (size_t i = 0; i < info.grid_names.size(); ++i)
    text += (i ? " " : "") + info.grid_names[i] + "=" + std::to_string(info.grid_sizes[i]);
  return text.empty() ? "single" : text;
}

void check_save_dir(const TrainOptions &options, int world_rank) {
  if (options.save_dir.empty()) return;
  const std::string what = "--save-dir '" + options.save_dir + "'";
  try {
    ck::make_directories(options.save_dir);
  } catch (const Error &error) {
    throw Error(what + ": " + error.what());
  }
  // Each rank writes its shard file there: try now, not at the first save.
  const std::string probe = ck::join_path(options.save_dir, ".probe-" + std::to_string(getpid()) + "-" +
                                                       std::to_string(world_rank));
  FILE *f = fopen(probe.c_str(), "w");
  if (!f || fputs("probe\n", f) < 0 || fclose(f) != 0)
    throw Error(what + " is not writable (" + strerror(errno) + ")");
  unlink(probe.c_str());
}

bool checkpoint_due(const TrainOptions &options, int64_t step) {
  if (options.save_dir.empty()) return false;
  return step == options.steps ||
         (options.save_interval > 0 && step % options.save_interval == 0);
}

namespace {

// What rank `dp_rank` saves: the sharded values' shards, the whole values
// on dp coordinate 0 (the other coordinates hold copies), tp pieces on
// every tp coordinate and replicated values on tp coordinate 0; each with
// the number of elements it stores (the padding past the end is not).
std::vector<std::pair<Placement, int64_t>> saved_placements(const ProgramInfo &info, int64_t dp,
                                                            int64_t dp_rank) {
  std::vector<std::pair<Placement, int64_t>> out;
  const int64_t tp_rank = own_coordinate(info, "tp");
  for (const Placement &p : checkpoint_placements(info, dp, dp_rank)) {
    if (!p.sharded && dp_rank != 0) continue;
    if (!p.tp_piece && tp_rank != 0) continue;
    const int64_t count = std::min(p.count, p.shape.numel() - p.begin);
    if (count > 0) out.emplace_back(p, count);
  }
  return out;
}

// Every rank's `mine`, rank after rank.
std::vector<int64_t> gather_all(RunnerComm &exchange, std::vector<int64_t> mine) {
  const int64_t n = static_cast<int64_t>(mine.size());
  std::vector<int64_t> all(static_cast<size_t>(n * exchange.size()));
  exchange.all_gather(Tensor{mine.data(), DType::I64, Shape{n}},
                      Tensor{all.data(), DType::I64, Shape{n * exchange.size()}});
  return all;
}

}  // namespace

int64_t checkpoint_snapshot_bytes(const ProgramInfo &info, int64_t dp, int64_t dp_rank) {
  int64_t total = 0;
  for (const auto &[p, count] : saved_placements(info, dp, dp_rank))
    total += count * static_cast<int64_t>(dtype_size(p.dtype));
  return total;
}

// A save in flight: the snapshot, the thread writing it, and what the
// thread found (state: 0 writing, 1 durable, 2 failed; size, crc and error
// are set before state, which the thread stores last).
struct CheckpointSaver::Pending {
  CheckpointPosition position;
  std::string temporary;
  ck::ShardWriter writer;
  std::thread thread;
  std::atomic<int> state{0};
  uint64_t size = 0;
  uint32_t crc = 0;
  std::string error;
  void write(const std::string &path, int64_t rank, const std::string &model) {
    try {
      health::test_fail_point("save", position.step);
      writer.write(path, position.step, rank, model, size, crc);
      state.store(1, std::memory_order_release);
    } catch (const std::exception &e) {
      error = e.what();
      state.store(2, std::memory_order_release);
    }
  }
};

CheckpointSaver::CheckpointSaver(const ProgramInfo &info, const CheckpointContext &context,
                                 const TrainOptions &options)
    : info_(info), context_(context), options_(options) {
  if (options.save_dir.empty()) return;
  snapshot_bytes_ = checkpoint_snapshot_bytes(info, context.dp, context.dp_rank);
  fits_ = !options.sync_save &&
          (options.save_staging_limit < 0 || snapshot_bytes_ <= options.save_staging_limit);
}

CheckpointSaver::~CheckpointSaver() {
  // Only a failing run gets here with a write in flight: let it end (the
  // checkpoint is not committed; the previous one stays latest).
  if (pending_ && pending_->thread.joinable()) pending_->thread.join();
}

void CheckpointSaver::save(Program &program, RunnerComm &exchange,
                           const CheckpointPosition &position) {
  if (pending_) finish(exchange);
  if (!decided_) {
    // In the background only when every rank's snapshot fits: the ranks
    // take part in the same collectives.
    const std::vector<int64_t> all = gather_all(exchange, {fits_ ? 1 : 0});
    background_ = std::all_of(all.begin(), all.end(), [](int64_t fits) { return fits == 1; });
    decided_ = true;
  }
  const std::string name = step_name(position.step);
  const std::string when = "while saving checkpoint " + name;
  health::set_phase("saving checkpoint " + name);
  auto pending = std::make_unique<Pending>();
  pending->position = position;
  pending->temporary = ck::join_path(options_.save_dir, ".tmp-" + name);
  std::string error;
  try {
    if (exchange.rank() == 0) {
      ck::remove_tree(pending->temporary);  // a save of this step that died
      ck::make_directories(pending->temporary);
    }
  } catch (const std::exception &e) {
    error = e.what();
  }
  exchange.agree(error, when);

  // The snapshot: each saved slot copied into the staging buffer, which is
  // allocated once at snapshot_bytes().
  try {
    pending->writer.reserve_data(static_cast<size_t>(snapshot_bytes_));
    std::vector<std::vector<uint8_t>> keep;
    for (const auto &[p, count] : saved_placements(*program.info, context_.dp, context_.dp_rank)) {
      const Tensor slot = persistent_tensor(program, *p.value, keep);
      if (p.value->space == Space::File) {
        // Already a host copy (in `keep`).
        pending->writer.add(p.key, p.dtype, p.shape, p.begin, count, slot.data);
      } else {
        // The slot's first `count` elements: a ZeRO shard's padding past
        // the tensor's end is not stored.
        uint8_t *place =
            pending->writer.add_uninitialized(p.key, p.dtype, p.shape, p.begin, count);
        read_to_host(program.stream, place, Tensor{slot.data, p.dtype, Shape{count}});
      }
      keep.clear();
    }
    staging_peak_ = std::max(staging_peak_, static_cast<int64_t>(pending->writer.data_capacity()));
  } catch (const std::exception &e) {
    error = e.what();
  }
  exchange.agree(error, when);
  const std::string path =
      ck::join_path(pending->temporary, "rank_" + std::to_string(exchange.rank()) + ".bin");
  Pending *raw = pending.get();
  if (background_) {
    pending->thread = std::thread([raw, path, rank = exchange.rank(), model = context_.model] {
      raw->write(path, rank, model);
    });
    pending_ = std::move(pending);
    return;
  }
  raw->write(path, exchange.rank(), context_.model);
  pending_ = std::move(pending);
  finish(exchange);
}

void CheckpointSaver::poll(RunnerComm &exchange) {
  if (!pending_) return;
  const std::vector<int64_t> all =
      gather_all(exchange, {pending_->state.load(std::memory_order_acquire) != 0 ? 1 : 0});
  if (std::all_of(all.begin(), all.end(), [](int64_t done) { return done == 1; })) commit(exchange);
}

void CheckpointSaver::finish(RunnerComm &exchange) {
  if (!pending_) return;
  if (pending_->thread.joinable()) pending_->thread.join();
  commit(exchange);
}

// Every rank's write has ended: agree on failures, gather the files' sizes
// and CRC32Cs, and rank 0 commits: manifest, directory synced, renamed
// into place, the pointer replaced, then the oldest beyond --keep removed.
void CheckpointSaver::commit(RunnerComm &exchange) {
  std::unique_ptr<Pending> pending = std::move(pending_);
  if (pending->thread.joinable()) pending->thread.join();
  const CheckpointPosition position = pending->position;
  const std::string name = step_name(position.step);
  const std::string when = "while saving checkpoint " + name;
  std::string error = pending->state.load() == 2 ? pending->error : "";
  exchange.agree(error, when);
  const std::vector<int64_t> all = gather_all(
      exchange, {static_cast<int64_t>(pending->size), static_cast<int64_t>(pending->crc)});
  pending.reset();  // the staging buffer
  try {
    if (exchange.rank() == 0) {
      ck::Manifest m;
      m.step = position.step;
      m.applied = position.applied;
      m.skipped = position.skipped;
      m.seed = options_.seed;
      m.data_batches = context_.data_batches;
      m.model = context_.model;
      m.layout = context_.layout;
      m.world = exchange.size();
      m.has_loss_scaler = position.has_loss_scaler;
      m.loss_scaler = position.loss_scaler;
      for (int r = 0; r < exchange.size(); ++r)
        m.files.push_back({"rank_" + std::to_string(r) + ".bin",
                           static_cast<uint64_t>(all[static_cast<size_t>(2 * r)]),
                           static_cast<uint32_t>(all[static_cast<size_t>(2 * r + 1)])});
      const std::string temporary = ck::join_path(options_.save_dir, ".tmp-" + name);
      const std::string text = ck::manifest_text(m);
      ck::write_durable(ck::join_path(temporary, "manifest"), text.data(), text.size());
      ck::sync_directory(temporary);
      pause_in_save_for_tests(position.step);
      const std::string final_dir = ck::join_path(options_.save_dir, name);
      rename_into_place(temporary, final_dir);
      ck::sync_directory(options_.save_dir);
      const std::string pointer = ck::join_path(options_.save_dir, "latest");
      const std::string pointer_tmp = ck::join_path(options_.save_dir, ".latest.tmp");
      const std::string line = name + "\n";
      ck::write_durable(pointer_tmp, line.data(), line.size());
      if (std::rename(pointer_tmp.c_str(), pointer.c_str()) != 0)
        throw Error("cannot rename '" + pointer_tmp + "' to '" + pointer +
                    "': " + strerror(errno));
      ck::sync_directory(options_.save_dir);
      if (options_.keep > 0) {
        auto saved = complete_checkpoints(options_.save_dir);
        for (size_t i = 0; i + static_cast<size_t>(options_.keep) < saved.size(); ++i)
          if (saved[i].second != name)
            ck::remove_tree(ck::join_path(options_.save_dir, saved[i].second));
      }
    }
  } catch (const std::exception &e) {
    error = e.what();
  }
  exchange.agree(error, when);
}

std::string checkpoint_staging_json(const CheckpointSaver &saver, RunnerComm &exchange) {
  if (!saver.enabled()) return "";
  const std::vector<int64_t> all = gather_all(exchange, {saver.snapshot_bytes(), saver.staging_peak()});
  std::string text = std::string(", \"checkpoint_staging\": {\"background\": ") +
                     (saver.background() ? "true" : "false") + ", \"ranks\": [";
  for (int r = 0; r < exchange.size(); ++r)
    text += std::string(r ? ", " : "") + "{\"planned_bytes\": " +
            std::to_string(all[static_cast<size_t>(2 * r)]) + ", \"peak_bytes\": " +
            std::to_string(all[static_cast<size_t>(2 * r + 1)]) + "}";
  return text + "]}";
}

CheckpointPosition resume_checkpoint(Program &program, const CheckpointContext &context,
                                     TrainOptions &options, int world_rank, int world) {
  const ck::Checkpoint c = ck::open_checkpoint(options.resume);
  const ck::Manifest &m = c.manifest;
  if (m.model != context.model)
    throw Error("--resume: checkpoint '" + c.dir + "' is of another model (its identity " +
                m.model + ", this program's " + context.model +
                "; the identity hashes the parameters' names, dtypes and shapes)");
  if (m.data_batches != context.data_batches)
    throw Error("--resume: checkpoint '" + c.dir + "' was written training on " +
                std::to_string(m.data_batches) + " global batches; --data '" + options.data +
                "' holds " + std::to_string(context.data_batches) +
                ": the data position would not continue");
  if (options.seed_given && options.seed != m.seed)
    throw Error("--resume: checkpoint '" + c.dir + "' was written with --seed " +
                std::to_string(m.seed) + ", not " + std::to_string(options.seed) +
                " (the dropout masks continue from the checkpoint's seed)");
  if (m.step >= options.steps)
    throw Error("--resume: checkpoint '" + c.dir + "' is at step " + std::to_string(m.step) +
                "; --steps " + std::to_string(options.steps) +
                " (the total, counted from the first step) leaves nothing to run");
  options.seed = m.seed;
  // The ranks share out checking every file whole.
  for (size_t i = 0; i < m.files.size(); ++i)
    if (static_cast<int>(i % static_cast<size_t>(world)) == world_rank)
      ck::verify_shard(c.dir, m.files[i]);
  for (const Placement &p : checkpoint_placements(*program.info, context.dp, context.dp_rank)) {
    const std::vector<uint8_t> bytes = read_placement(c, *program.info, p);
    store_persistent(program, *p.value, bytes.data(), bytes.size());
  }
  CheckpointPosition position;
  position.step = m.step;
  position.applied = m.applied;
  position.skipped = m.skipped;
  position.has_loss_scaler = m.has_loss_scaler;
  position.loss_scaler = m.loss_scaler;
  return position;
}

CheckpointPosition start_checkpoints(Program &program, const CheckpointContext &context,
                                     TrainOptions &options, int world_rank, int world) {
  check_save_dir(options, world_rank);
  if (options.resume.empty()) return {};
  return resume_checkpoint(program, context, options, world_rank, world);
}

}  // namespace runner
}  // namespace dsrt

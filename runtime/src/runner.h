// What forward_main and train_main share: arena allocation, parameter
// loading, file names and small helpers. Not installed.
#ifndef DSRT_SRC_RUNNER_H
#define DSRT_SRC_RUNNER_H

#include "dsrt/memory.h"
#include "dsrt/program.h"

#include <cstdint>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace dsrt {
namespace runner {

double now_us();
std::string directory_of(const std::string &path);
// The file an input or output value is read from or written to, without
// directory and extension.
std::string file_name_for(const std::string &name);
std::string json_escape(const std::string &text);

// The program's arena is device memory of the backend.
struct ArenaFree {
  void operator()(uint8_t *p) const;
};
using ProgramArena = std::unique_ptr<uint8_t, ArenaFree>;
// 64-byte aligned, at least 64 bytes.
ProgramArena allocate_arena(int64_t arena_bytes);

// The host and file spaces' arenas of a program, at the plan's sizes:
// pinned host memory, and a file created (and allocated on disk) in a
// directory of the run's choosing, removed again when this goes.
struct SpaceArenas {
  Arena host;
  std::unique_ptr<FileStore> file;
  std::string file_path;
  SpaceArenas() = default;
  SpaceArenas(const SpaceArenas &) = delete;
  SpaceArenas &operator=(const SpaceArenas &) = delete;
  ~SpaceArenas();
};
// Allocates `spaces` for p's plan and points p at them. The file space's
// file is `file_dir`/dsrt-file-space-<pid>-<rank>.bin (file_dir empty:
// $TMPDIR, else /tmp); a directory that does not exist or has no room for
// the plan's bytes is an error naming it.
void allocate_spaces(Program &p, SpaceArenas &spaces, const std::string &file_dir, int rank);

// The bytes a slot of `bytes` takes in the plan (rounded up to the
// alignment).
int64_t slot_size(const ProgramInfo &info, size_t bytes);
// Acquires the slot of a persistent value (a parameter or state) in the
// monitor of its space.
void acquire_persistent(Program &p, const ValueInfo &value);
// Writes `bytes` of host memory into a persistent value's slot, whatever its
// space; blocks until they are there.
void store_persistent(Program &p, const ValueInfo &value, const void *bytes, size_t size);
// A tensor holding a persistent value's current bytes: a view of its slot
// in the device or host space, a copy read into a new buffer of `keep`
// for the file space.
Tensor persistent_tensor(Program &p, const ValueInfo &value,
                         std::vector<std::vector<uint8_t>> &keep);
// Zeroes a persistent value's slot, whatever its space.
void zero_persistent(Program &p, const ValueInfo &value);
// "<space> arena: planned ..., measured ..." on stderr for the host and
// file spaces the plan uses.
void print_space_arenas(const Program &p);
// Acquires every parameter's slot and fills it from the program or its file.
// A sharded parameter gets rank `dp_rank`'s shard (its elements of the whole
// tensor, zeros past its end); only those bytes are read.
// A 16-bit working copy is the model's f32 value rounded to nearest even.
void load_params(Program &p, const std::string &weights_dir, int64_t dp_rank = 0);
// Fills each fp32 master weights state (master_param) from its parameter's
// model value, or rank `dp_rank`'s ZeRO shard of it. After the states'
// slots are acquired.
void load_masters(Program &p, const std::string &weights_dir, int64_t dp_rank = 0);

// save_onnx in two halves: the source model is read and checked against the
// program before training (a model that cannot be written back fails
// early), and written with the trained values after.
struct OnnxSaveSource;
std::shared_ptr<const OnnxSaveSource> prepare_save_onnx(const ProgramInfo &info,
                                                        const std::string &weights_dir);
// `full_values` as for save_onnx: whole values of sharded parameters.
void write_save_onnx(const OnnxSaveSource &source, const ProgramInfo &info, const uint8_t *arena,
                     const std::string &path, bool external_data,
                     const std::map<std::string, Tensor> &full_values = {});

// Runs one generated function: afterwards no host work it issued is
// pending, and p.stream's later work is ordered after everything it queued
// on either stream, with no host wait for the device (reading an output,
// read_to_host, synchronizes). When it throws, both streams are
// synchronized (an abandoned function may have collectives in flight).
// Throws the first error: the function's, else one of its asynchronous
// work.
void run_to_completion(Program &p, RunFn run);

// Sets what rng_counter() returns.
void set_rng_counter(uint64_t counter);

}  // namespace runner
}  // namespace dsrt

#endif  // DSRT_SRC_RUNNER_H

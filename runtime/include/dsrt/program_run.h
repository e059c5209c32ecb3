// dsrt: a running generated program (what dsopt_run and the training
// functions receive): its arena, compute and communication streams, the
// collectives' events, memory monitor and tracer, and the calls generated
// run functions make. Included by program.h.
#ifndef DSRT_PROGRAM_RUN_H
#define DSRT_PROGRAM_RUN_H

#include "dsrt/dist.h"
#include "dsrt/file_io.h"
#include "dsrt/kernels.h"
#include "dsrt/math.h"
#include "dsrt/program_info.h"
#include "dsrt/stream.h"
#include "dsrt/tensor.h"

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace dsrt {

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

struct Program;

// Chrome trace events (chrome://tracing, ui.perfetto.dev) of every op run,
// timed by the backend's timing marks (BackendInterface::timing_mark): on
// cuda cudaEvents recorded before and after each op on the stream it ran on
// (a communication op, one that issued on comm_stream, on the communication
// stream), so the times are when the device ran the op; on cpu the host
// clock at those points. The marks are made once (prepare) and read after
// a host wait that covers them (resolve), so tracing adds no wait for the
// device. In a training program op indices are per function: the runner
// says which function runs with set_function (-1: the top-level op list).
class Tracer {
public:
  // Makes the timing marks of `ops_per_step` op runs (a step's: each
  // function's ops times its runs) on `stream`'s backend; before the first.
  void prepare(Stream &stream, int64_t ops_per_step);
  void begin(Program &p, int64_t op);
  void end(Program &p, int64_t op);
  // The open op issues on the communication stream (comm_stream): its
  // begin is re-marked there, and its end will be.
  void on_comm(Program &p);
  // The open op issues on the I/O stream (io_stream: the file space's reads
  // and writes): the same, on p.io.
  void on_io(Program &p);
  void set_function(int function) { function_ = function; }
  void set_step(int64_t step) { step_ = step; }
  // Reads the times of the ops run since the last resolve: call it after a
  // host wait for the program's stream that follows them (the step's last
  // planned one), which has then reached every mark.
  void resolve();
  // The ops run since the last resolve failed: their times stay unknown.
  void discard();
  void write(const std::string &path, const ProgramInfo &info, int rank = 0) const;

private:
  struct Slice {
    int64_t op, step;
    int function;
    int lane;  // the stream it ran on: 0 compute, 1 communication, 2 I/O
    double begin_us, end_us;
  };
  std::vector<Slice> slices_;
  // marks_[2i], marks_[2i + 1]: the begin and end of the step's i-th op
  // run; origins_: where the last two steps began (elapsed time between
  // them carries the time base from step to step).
  std::vector<std::shared_ptr<void>> marks_;  // BackendInterface's DeviceEvents
  std::shared_ptr<void> origins_[2];
  std::vector<Slice> pending_;  // the step's op runs, times not yet read
  BackendInterface *backend_ = nullptr;
  int origin_ = 0;
  bool had_origin_ = false, open_ = false;
  double base_us_ = 0;
  int function_ = -1;
  int64_t step_ = 0;
  void on_lane(Program &p, Stream &stream, int lane);
};

struct Program {
  const ProgramInfo *info = nullptr;
  Stream stream;
  // Collectives issue here (comm_stream) so that compute on `stream` runs
  // while they progress; same backend and threads as `stream`.
  Stream comm;
  // The file space's reads and writes (NVMe offload) issue here (io_stream),
  // on a stream of their own: a copy or collective issued on `comm` waits
  // for the host work pending there, so file I/O on `comm` would hold up
  // every copy issued after it until the disk is done.
  Stream io;
  // collectives[i]: the point of `comm` right after collective i of the
  // running function was issued (collective_issued), waited for with
  // collective_wait.
  std::vector<Event> collectives;
  // The device space's arena and its monitor.
  uint8_t *arena = nullptr;
  MemoryMonitor memory;
  // The host space's arena (pinned host memory) and the file space's (a
  // file; transfers read and write it), with their monitors; null while
  // the plan gives the space no bytes.
  uint8_t *host_arena = nullptr;
  FileStore *file_arena = nullptr;
  MemoryMonitor host_memory, file_memory;
  // The file arena's counters when the last step was logged (train's
  // --log-json reports each step's share).
  FileStoreStats file_io_logged;
  Tracer *tracer = nullptr;
  // The backend waits for every op when it ends
  // (BackendInterface::synchronous_ops, cuda's DSRT_CUDA_SYNC=1), and an
  // error thrown inside an op names it: the running function's index into
  // info->functions (-1: the top-level op list) and the op's index in its
  // op list, between begin_op and end_op (-1 outside an op).
  bool synchronous_ops = false;
  int running_function = -1;
  int64_t running_op = -1;
  std::vector<Tensor> outputs;
  // The memory of the running function's inputs that have no buffer in its
  // plan (a pipeline stage's received and stashed values, which it reads
  // where the runner keeps them), in input order; see bound_input.
  std::vector<Tensor> bound;
  // Where the running function computes its outputs of role Send, Stash or
  // WeightStash (a pipeline stage's: the pool slots that keep them), in the
  // order of those outputs; see bound_output.
  std::vector<Tensor> bound_outputs;

  MemoryMonitor &memory_of(Space space) {
    return space == Space::Host ? host_memory : space == Space::File ? file_memory : memory;
  }
  const MemoryMonitor &memory_of(Space space) const {
    return const_cast<Program *>(this)->memory_of(space);
  }
};

//===--- called by generated code: dsopt_run ------------------------------===//

inline Stream &stream(Program &p) { return p.stream; }
inline uint8_t *arena(Program &p) { return p.arena; }

inline Tensor view(uint8_t *base, int64_t offset, DType dtype, Shape shape) {
  return Tensor{base + offset, dtype, shape};
}
// An op's workspace: `bytes` bytes of the arena at `offset` (ds.workspace).
inline Workspace workspace(uint8_t *base, int64_t offset, int64_t bytes) {
  return Workspace{base + offset, bytes};
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
// The memory bound to the running function's index-th output of role Send,
// Stash or WeightStash (Program::bound_outputs), into which it computes it.
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
// The stream the file space's transfers are issued on (p.io), ordered after
// the work enqueued on p.stream so far, as comm_stream orders p.comm; a
// transfer issued there is numbered with the collectives and marked with
// io_issued(p, i) instead of collective_issued, then waited for by
// collective_wait like any other. Work on p.comm does not wait for p.io's,
// nor p.io's for p.comm's: an order between them goes through p.stream
// (collective_wait, then the next comm_stream or io_stream).
Stream &io_stream(Program &p);
// Marks the point of p.io right after transfer `index` was issued.
void io_issued(Program &p, int64_t index);
// Makes later work on p.stream wait for collective `index` (and what was
// issued on p.comm before it), without blocking the host; the next kernel on
// p.stream blocks. Costs a few atomic loads when it has completed. Throws
// its dsrt::Error at once when it has already failed; otherwise a failure
// is thrown by the next kernel or synchronize() of p.stream. Throws when
// collective `index` was not issued in this run.
void collective_wait(Program &p, int64_t index);
// Orders p.stream's later work (the function's closing copies, the next
// function) after everything issued on p.comm and p.io: waits for their host work
// (throwing the first failure not reported yet) and makes p.stream's queue
// wait for p.comm's, with no host wait for the device.
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
// Writes `value`, converted to the tensor's type, into every element, at
// once (the describe function's constants, before any step).
void fill(const Tensor &t, double value);
// The same in `s`'s order: how a function fills a large splat constant
// before the kernels that read it, after those queued before that may still
// read its bytes.
void fill(Stream &s, const Tensor &t, double value);

inline void acquire(Program &p, int64_t offset, int64_t size) { p.memory.acquire(offset, size); }
inline void release(Program &p, int64_t offset) { p.memory.release(offset); }
// The same for a slot of the host space's arena (an offloaded step's host
// copies and host optimizer results).
inline void acquire_host(Program &p, int64_t offset, int64_t size) {
  p.host_memory.acquire(offset, size);
}
inline void release_host(Program &p, int64_t offset) { p.host_memory.release(offset); }

//===--- offload: the host and file spaces (ds-offload) ------------------===//

// The host space's arena, where an offloaded step's host optimizer reads
// and writes; throws when the plan gives it no bytes.
uint8_t *host_arena(Program &p);
// A buffer of the file space: bytes at `offset` of the program's file arena.
// Only transfers read or write it.
struct FileSlot {
  FileStore *file = nullptr;
  int64_t offset = 0;
};
// Throws when the plan gives the file space no bytes.
FileSlot file_slot(Program &p, int64_t offset);
// ds.transfer: copies `src` (in space `from`) to `dst` (in space `to`),
// ordered on `s` (the communication stream: generated code waits for it
// with collective_wait before the first use of `dst`). Device <-> host is a
// backend copy (counted by copied_bytes), host <-> file a read or write of
// the file arena on its I/O thread (counted by the store's stats).
void transfer(Stream &s, const Tensor &src, const Tensor &dst, Space from, Space to);
void transfer(Stream &s, const FileSlot &src, const Tensor &dst, Space from, Space to);
void transfer(Stream &s, const Tensor &src, const FileSlot &dst, Space from, Space to);
// The bytes transfer() has moved from space `from` to space `to` so far in
// this process.
int64_t transferred_bytes(Space from, Space to);
// Waits for the work `p.stream` has queued (Program::synchronous_ops).
void synchronize_op(Program &p);
inline void begin_op(Program &p, int64_t op) {
  p.running_op = op;
  if (p.tracer) p.tracer->begin(p, op);
}
inline void end_op(Program &p, int64_t op) {
  if (p.synchronous_ops) synchronize_op(p);
  if (p.tracer) p.tracer->end(p, op);
  p.running_op = -1;
}
void set_output(Program &p, int64_t index, const Tensor &value);

}  // namespace dsrt

#endif  // DSRT_PROGRAM_RUN_H

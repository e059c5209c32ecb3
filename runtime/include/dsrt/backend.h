// dsrt: the backend interface.
//
// Everything that touches the memory kernels compute on goes through one
// backend: allocating memory of each kind, copying and filling it, adding
// tensors, ordering that work on streams and events, and the kernels of
// kernels.h. The rest of libdsrt (the training and pipeline runners, the
// data-parallel helpers, the program glue) is backend-neutral: it never
// reads or writes arena memory itself, it enqueues backend operations on a
// stream (runtime/tests/check_backend_neutral.py keeps it so).
//
// A backend is a library: `dsrt_cpu` (runtime/src/cpu/) is the one written
// so far; a cuda backend is a second library implementing the same
// interface and the same kernels.h. A program links exactly one, and
// `backend()` returns it. What a cuda backend adds is in docs/runtime.md.
#ifndef DSRT_BACKEND_H
#define DSRT_BACKEND_H

#include "dsrt/file_io.h"
#include "dsrt/memory.h"
#include "dsrt/stream.h"
#include "dsrt/tensor.h"
#include "dsrt/transport.h"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace dsrt {

class Communicator;

// A backend's mark of a point in a stream's queue (a cudaEvent_t on cuda).
// Null where the backend has nothing queued that the host does not already
// track (the cpu backend runs kernels and copies when they are enqueued).
using DeviceEvent = std::shared_ptr<void>;

class BackendInterface {
public:
  virtual ~BackendInterface() = default;

  virtual Backend kind() const = 0;
  virtual const char *name() const = 0;  // "cpu", "cuda"

  //===--- memory of each kind -----------------------------------------===//

  // `bytes` (> 0) of `kind`, aligned to `alignment` (a power of two >= 64);
  // nullptr when the memory cannot be had (the caller names what failed).
  virtual void *allocate(MemoryKind kind, size_t bytes, size_t alignment) = 0;
  virtual void deallocate(MemoryKind kind, void *p) = 0;
  // A file of `bytes` allocated on disk for offloaded tensors (NVMe), read
  // and written by the I/O engine `io` describes.
  virtual FileStore create_file(const std::string &path, int64_t bytes,
                                const FileIOOptions &io) = 0;

  //===--- asynchronous operations, ordered on a stream ------------------===//
  //
  // Each runs after the work enqueued on `stream` before it; its inputs must
  // not change, and its outputs must not be read by the host, before the
  // stream reaches it (Stream::synchronize, an Event). Pointers may be of
  // any kind; host memory that no arena holds is allowed on either side.

  // `bytes` from `src` to `dst`; the ranges may overlap (memmove).
  virtual void copy(Stream &stream, void *dst, const void *src, size_t bytes) = 0;
  // Every element of `dst` set to `value` (rounded to dst's type; integers
  // and bool truncate toward zero).
  virtual void fill(Stream &stream, const Tensor &dst, double value) = 0;
  // dst = srcs[0] + srcs[1] + ... + srcs[count-1], summed in that order in
  // f32 (f16/bf16 rounded once); float tensors of dst's type and count. dst
  // may be one of the sources.
  virtual void add(Stream &stream, const Tensor &dst, const Tensor *srcs, int64_t count) = 0;
  // The index of the first of `tensors` that holds a NaN or an infinity, -1
  // when every element of every one is finite (integer tensors always
  // are). Blocks until the answer is known: how the runner finds a
  // diverged step (and a loss scaler an overflow) before the optimizer.
  virtual int64_t first_nonfinite(Stream &stream, const Tensor *tensors, int64_t count) = 0;

  //===--- streams and events ---------------------------------------------===//
  //
  // Stream and Event (stream.h) track the host-side asynchronous work on a
  // stream (collectives on a transport's thread, file I/O); the backend
  // adds its own queue.

  // Blocks until the backend's work enqueued on `stream` has run.
  virtual void synchronize(Stream &stream) = 0;
  // Marks the backend's work enqueued on `stream` so far.
  virtual DeviceEvent record(Stream &stream) = 0;
  // Makes later backend work on `stream` wait for `event` (host not blocked).
  virtual void wait(Stream &stream, const DeviceEvent &event) = 0;
  // Blocks until `event` is reached.
  virtual void synchronize(const DeviceEvent &event) = 0;
  virtual bool query(const DeviceEvent &event) = 0;

  //===--- timing marks -----------------------------------------------------===//
  //
  // When a stream's work ran, not when it was queued: a timing mark is made
  // once (outside a step: it may allocate), recorded on a stream as often as
  // needed (each record replaces the last), and read once a host wait that
  // covers its last record has returned. The defaults are the host clock at
  // record time, right for a backend that runs work when it is queued (cpu);
  // cuda's are cudaEvents with timing, stamped when the stream reaches them.

  virtual DeviceEvent timing_mark();
  // `after_host_work`: the mark goes after the host work pending on the
  // stream (a collective on a transport's thread, a file read), as a kernel
  // would, waiting for it on the host; false records it at once, where the
  // stream's device work has got to, and never waits.
  virtual void record_timing(Stream &stream, const DeviceEvent &mark,
                             bool after_host_work = true);
  // Microseconds from `from`'s last record to `to`'s; throws a dsrt::Error
  // when either has not been recorded or not been reached yet.
  virtual double elapsed_us(const DeviceEvent &from, const DeviceEvent &to);

  //===--- debugging ---------------------------------------------------------===//

  // Whether every op of a program is to be waited for when it ends, so that
  // a device fault is reported by the op that caused it (cuda:
  // DSRT_CUDA_SYNC=1). The cpu backend runs ops when they are called.
  virtual bool synchronous_ops() const { return false; }

  //===--- the kernel table ---------------------------------------------===//
  //
  // The kernels are the functions of kernels.h, which every backend library
  // defines for its own streams. This says which library that is, for
  // messages and logs ("dsrt_cpu").
  virtual const char *kernel_library() const = 0;

  //===--- the transport ---------------------------------------------------===//

  // The transport the program's collectives run over (the grid's
  // communicators: program_world() in dist.h), bootstrapped over
  // `bootstrap` (the MPI world): NCCL on cuda. nullptr: `bootstrap`
  // itself serves (the cpu backend's MPI ring, which works on host memory).
  // Collective over `bootstrap`.
  virtual std::unique_ptr<Transport> world_transport(Communicator &bootstrap) {
    (void)bootstrap;
    return nullptr;
  }
};

// The backend this program was linked with; `kind` other than its own
// throws a dsrt::Error naming the missing backend library.
BackendInterface &backend();
BackendInterface &backend(Backend kind);

// The stream's backend (every Stream has one).
inline BackendInterface &backend(const Stream &stream) { return backend(stream.backend()); }

// Shorthands for backend-neutral code.
inline void fill_async(Stream &stream, const Tensor &dst, double value) {
  backend(stream).fill(stream, dst, value);
}
inline void add_async(Stream &stream, const Tensor &dst, const Tensor *srcs, int64_t count) {
  backend(stream).add(stream, dst, srcs, count);
}
// Copies a tensor's bytes to host memory and waits for them: how neutral
// code reads a value the program computed (a loss, a norm, a weight to save).
// On a backend whose memory the host cannot read (cuda) the bytes pass
// through pinned host buffers, chunk by chunk.
void read_to_host(Stream &stream, void *host, const Tensor &src);
// Copies `bytes` of host memory to `dst` (any memory of the stream's
// backend) in the stream's order: how neutral code uploads data, weights
// and checkpoints. As with BackendInterface::copy, `host` must not change
// before the stream reaches the copy (on cuda it is copied into pinned
// staging buffers at once, and the device copy from there is asynchronous).
void write_from_host(Stream &stream, void *dst, const void *host, size_t bytes);
double read_scalar(Stream &stream, const Tensor &src);
// Writes a scalar (0-d or one element) of the tensor's type from the host.
void write_scalar(Stream &stream, const Tensor &dst, double value);

}  // namespace dsrt

#endif  // DSRT_BACKEND_H

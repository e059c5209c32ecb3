// dsrt: devices, streams and events.
//
// Work (kernels, copies, collectives) is enqueued on a Stream and may complete
// asynchronously; an Event recorded on one stream orders later work on another
// stream or on the host. Generated code is written against these semantics so
// that it is correct for the asynchronous cuda backend. The cpu backend runs
// each piece of work to completion, in order, when it is enqueued, using a
// pool of OpenMP threads inside kernels.
#ifndef DSRT_STREAM_H
#define DSRT_STREAM_H

#include <cstdint>
#include <memory>

namespace dsrt {

enum class Backend { Cpu, Cuda };

class Stream {
public:
  explicit Stream(Backend backend = Backend::Cpu, int threads = 0);
  Backend backend() const { return backend_; }
  // Threads kernels may use (cpu backend); 0 means all available.
  int threads() const { return threads_; }
  // Blocks until all work enqueued so far has completed.
  void synchronize();

private:
  Backend backend_;
  int threads_;
};

class Event {
public:
  // Marks the point in `stream` reached by the work enqueued so far.
  void record(Stream &stream);
  // Makes later work on `stream` wait for the recorded point.
  void wait(Stream &stream);
  // Blocks the host until the recorded point is reached.
  void synchronize();
  bool recorded() const { return recorded_; }

private:
  bool recorded_ = false;
};

}  // namespace dsrt

#endif  // DSRT_STREAM_H

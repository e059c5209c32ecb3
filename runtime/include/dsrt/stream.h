// dsrt: devices, streams, events and requests.
//
// Work (kernels, copies, collectives, file I/O) is enqueued on a Stream and may
// complete asynchronously; an Event recorded on one stream orders later work
// on another stream or on the host, and a Request is the completion of one
// asynchronous operation. Generated code is written against these semantics
// so that it is correct for the asynchronous cuda backend.
//
// The backend interface behind streams is in backend.h.
//
// On the cpu backend kernels and copies run to completion on the calling
// thread when they are enqueued, after waiting for whatever asynchronous work
// (collectives, file I/O) is still pending on their stream; collectives run on
// their communicator's thread and file I/O on its store's thread.
#ifndef DSRT_STREAM_H
#define DSRT_STREAM_H

#include <cstdint>
#include <memory>
#include <vector>

namespace dsrt {

class BackendInterface;

namespace detail {
struct Completion;
struct StreamState;
}  // namespace detail

enum class Backend { Cpu, Cuda };

// Copies of a Stream are the same stream (they share its pending work).
class Stream {
public:
  // A stream of the backend the program was linked with (backend.h).
  Stream();
  explicit Stream(Backend backend, int threads = 0);
  Backend backend() const { return backend_; }
  // Threads kernels may use (cpu backend); 0 means all available.
  int threads() const { return threads_; }
  // Blocks until all work enqueued so far has completed. Throws the
  // dsrt::Error of an asynchronous operation on this stream that failed and
  // whose error has not been reported yet (by this or by Request::wait).
  void synchronize();

  const std::shared_ptr<detail::StreamState> &state() const { return state_; }

private:
  Backend backend_;
  int threads_;
  std::shared_ptr<detail::StreamState> state_;
};

class Event {
public:
  // Marks the point in `stream` reached by the work enqueued so far.
  void record(Stream &stream);
  // Makes later work on `stream` wait for the recorded point (the host does
  // not block here; a later kernel on `stream` does, on the cpu backend).
  void wait(Stream &stream);
  // Blocks the host until the recorded point is reached; throws the
  // dsrt::Error of recorded work that failed.
  void synchronize();
  bool recorded() const { return recorded_; }
  // True once the recorded point is reached (never throws).
  bool query() const;
  // Throws the dsrt::Error of recorded host work that has failed; waits for
  // nothing.
  void check();

private:
  bool recorded_ = false;
  std::vector<std::shared_ptr<detail::Completion>> work_;
  // The backend's own mark (backend.h); null on the cpu backend.
  BackendInterface *backend_ = nullptr;
  std::shared_ptr<void> device_;
};

// The completion of one asynchronous operation (a collective, a file read or
// write). A default-constructed Request is complete. Requests may be copied
// and waited on from any thread, any number of times.
class Request {
public:
  Request() = default;
  explicit Request(std::shared_ptr<detail::Completion> state) : state_(std::move(state)) {}

  // True once the operation has completed; throws its dsrt::Error if it failed.
  bool test() const;
  // Blocks until the operation has completed; throws its dsrt::Error if it
  // failed.
  void wait() const;
  // Makes later work on `stream` wait for the operation, without blocking
  // the host (cudaStreamWaitEvent on the cuda backend).
  void wait(Stream &stream) const;

  const std::shared_ptr<detail::Completion> &state() const { return state_; }

private:
  std::shared_ptr<detail::Completion> state_;
};

// Waits for every request, then throws the first error among them (so that
// no operation is still running when the caller sees an error).
void wait_all(const std::vector<Request> &requests);

}  // namespace dsrt

#endif  // DSRT_STREAM_H

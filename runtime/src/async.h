// Asynchronous host work, whatever the backend: completions, the pending
// work of a stream, and a worker thread that runs queued operations in
// order. Used by transports (the communication thread) and file I/O. Not
// installed.
#ifndef DSRT_SRC_ASYNC_H
#define DSRT_SRC_ASYNC_H

#include "dsrt/stream.h"

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace dsrt {
namespace detail {

// The outcome of one asynchronous operation: set once, by the thread that
// ran it; waited for by any number of threads.
struct Completion {
  // Marks the operation complete; a non-empty `error` means it failed.
  void finish(std::string error = {});
  // Blocks until finish() (never throws). With `blocked_ns` set, the time a
  // thread other than a Worker's spends blocked here is added to it (the
  // file store's exposed I/O wait).
  void wait();
  bool done() const { return done_.load(std::memory_order_acquire); }
  // Valid once done().
  bool failed() const { return done() && !error_.empty(); }
  const std::string &error() const { return error_; }
  // When finish() was called (steady_now_us); valid once done(). The cpu
  // backend's timing marks recorded after host work end no earlier.
  double finished_us() const { return finished_us_; }
  // Set when the error was thrown to someone through a stream, so that a
  // stream reports each failure once.
  std::atomic<bool> reported{false};
  // Set before the completion is shared (Worker::submit); may be null.
  std::shared_ptr<std::atomic<int64_t>> blocked_ns;

private:
  std::mutex mutex_;
  std::condition_variable cv_;
  std::atomic<bool> done_{false};
  std::string error_;
  double finished_us_ = 0;
};

using CompletionPtr = std::shared_ptr<Completion>;

// The steady clock in microseconds: the host's one clock for timing
// (runner::now_us, completions, the cpu backend's timing marks).
double steady_now_us();

// Asynchronous work enqueued on a stream and not yet known to be complete.
struct StreamState {
  std::mutex mutex;
  std::vector<CompletionPtr> pending;
  // Lets kernels skip the mutex when nothing asynchronous was enqueued.
  std::atomic<bool> has_pending{false};
  // The stream's backend, which queues its kernels and copies.
  BackendInterface *backend = nullptr;
  // The backend's own queue for this stream (a cudaStream_t on cuda),
  // created by the backend on first use; null on the cpu backend.
  std::shared_ptr<void> device;
};

// The stream's pending work (what an operation enqueued now must wait for),
// dropping what has completed successfully.
std::vector<CompletionPtr> pending_work(Stream &stream);
// Appends work that later operations on `stream` must wait for.
void add_pending(Stream &stream, const CompletionPtr &work);
// Blocks until the host-side work pending on `stream` (collectives, file
// I/O) has completed, and throws the first unreported error among it; the
// backend's queue is not waited for. Stream::synchronize is the backend's
// synchronize followed by this.
void wait_host_work(Stream &stream);
// Orders `later` after everything queued on `earlier` so far, without a
// host wait for the device: the host work pending on `earlier` is waited
// for (its first error thrown), then `later`'s backend queue waits for an
// event recorded on `earlier`'s (nothing on the cpu backend).
void order_after(Stream &later, Stream &earlier);

// One thread running queued tasks in order. A task first waits for the
// stream work it depends on; a dsrt::Error it throws fails its request.
class Worker {
public:
  // `dep_error` is the error of a failed dependency (empty if none); the
  // task decides what that means (a collective still has to tell its peers).
  using Task = std::function<void(const std::string &dep_error)>;

  // `device`: the backend whose queue tasks wait for (default: each
  // stream's own, backend(stream)); a test passes a fake one.
  explicit Worker(BackendInterface *device = nullptr);
  ~Worker();  // runs what is queued, then joins
  Worker(const Worker &) = delete;
  Worker &operator=(const Worker &) = delete;

  // Queues `task` after the work pending on `stream` (if given) and makes
  // later work on `stream` wait for it. On a backend with a queue of its
  // own (cuda) the task also waits for the work queued there before it (an
  // event recorded here), so that host work (a file write, a message from
  // pinned memory) reads what earlier device copies and kernels wrote; a
  // device error found there is the task's dependency error. A task that
  // waits for the device itself (the NCCL transport's, with its timeout)
  // passes `after_device` false. `blocked_ns`: the completion's (see
  // Completion::wait).
  Request submit(Stream *stream, Task task, bool after_device = true,
                 std::shared_ptr<std::atomic<int64_t>> blocked_ns = nullptr);
  // Blocks until everything queued so far has run.
  void drain();

private:
  struct Item {
    std::vector<CompletionPtr> deps;
    CompletionPtr completion;
    Task task;
    BackendInterface *backend = nullptr;
    std::shared_ptr<void> device;  // the stream's device work before the task
  };
  void loop();

  BackendInterface *device_;
  std::mutex mutex_;
  std::condition_variable cv_, idle_cv_;
  std::deque<Item> queue_;
  bool stop_ = false, busy_ = false;
  std::thread thread_;
};

}  // namespace detail
}  // namespace dsrt

#endif  // DSRT_SRC_ASYNC_H

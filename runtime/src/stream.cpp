// Streams, events and requests, backend-neutral: asynchronous host work
// (collectives on a transport's thread, file I/O) is tracked as the
// stream's pending work, which later work on the stream waits for; the
// stream's backend (backend.h) adds whatever it queues itself.
#include "dsrt/stream.h"

#include "async.h"
#include "dsrt/backend.h"
#include "dsrt/tensor.h"

#include <chrono>
#include <string>
#include <utility>

namespace dsrt {
namespace detail {

double steady_now_us() {
  using namespace std::chrono;
  return duration<double, std::micro>(steady_clock::now().time_since_epoch()).count();
}

void Completion::finish(std::string error) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    error_ = std::move(error);
    finished_us_ = steady_now_us();
    done_.store(true, std::memory_order_release);
  }
  cv_.notify_all();
}

namespace {
// Set on Worker threads: their waits for dependencies are not a program's.
thread_local bool on_worker = false;
}  // namespace

void Completion::wait() {
  if (done())
    return;
  const bool timed = blocked_ns && !on_worker;
  const auto start = timed ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point();
  {
    std::unique_lock<std::mutex> lock(mutex_);
    cv_.wait(lock, [&] { return done(); });
  }
  if (timed)
    *blocked_ns += std::chrono::duration_cast<std::chrono::nanoseconds>(
                       std::chrono::steady_clock::now() - start)
                       .count();
}

std::vector<CompletionPtr> pending_work(Stream &stream) {
  StreamState &state = *stream.state();
  std::lock_guard<std::mutex> lock(state.mutex);
  std::vector<CompletionPtr> kept;
  for (CompletionPtr &c : state.pending)
    if (!c->done() || (c->failed() && !c->reported.load()))
      kept.push_back(c);
  state.pending = kept;
  state.has_pending.store(!kept.empty(), std::memory_order_release);
  return kept;
}

void add_pending(Stream &stream, const CompletionPtr &work) {
  StreamState &state = *stream.state();
  std::lock_guard<std::mutex> lock(state.mutex);
  // Drop what completed successfully so the list stays short on a stream
  // that is never synchronized.
  std::vector<CompletionPtr> kept;
  for (CompletionPtr &c : state.pending)
    if (!c->done() || (c->failed() && !c->reported.load()))
      kept.push_back(std::move(c));
  kept.push_back(work);
  state.pending = std::move(kept);
  state.has_pending.store(true, std::memory_order_release);
}

void wait_host_work(Stream &stream) {
  StreamState &state = *stream.state();
  if (!state.has_pending.load(std::memory_order_acquire))
    return;
  std::vector<CompletionPtr> work;
  {
    std::lock_guard<std::mutex> lock(state.mutex);
    work.swap(state.pending);
    state.has_pending.store(false, std::memory_order_release);
  }
  std::string error;
  for (const CompletionPtr &c : work) {
    c->wait();
    if (c->failed() && !c->reported.exchange(true) && error.empty())
      error = c->error();
  }
  if (!error.empty())
    throw Error(error);
}

void order_after(Stream &later, Stream &earlier) {
  wait_host_work(earlier);
  BackendInterface &device = *earlier.state()->backend;
  if (DeviceEvent event = device.record(earlier))
    device.wait(later, event);
}

Worker::Worker(BackendInterface *device) : device_(device), thread_([this] { loop(); }) {}

Worker::~Worker() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

Request Worker::submit(Stream *stream, Task task, bool after_device,
                       std::shared_ptr<std::atomic<int64_t>> blocked_ns) {
  auto completion = std::make_shared<Completion>();
  completion->blocked_ns = std::move(blocked_ns);
  Item item{stream ? pending_work(*stream) : std::vector<CompletionPtr>{}, completion,
            std::move(task)};
  if (stream && after_device) {
    item.backend = device_ ? device_ : &backend(*stream);
    item.device = item.backend->record(*stream);  // null on the cpu backend
  }
  if (stream)
    add_pending(*stream, completion);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back(std::move(item));
  }
  cv_.notify_one();
  return Request(completion);
}

void Worker::drain() {
  std::unique_lock<std::mutex> lock(mutex_);
  idle_cv_.wait(lock, [&] { return queue_.empty() && !busy_; });
}

void Worker::loop() {
  on_worker = true;
  for (;;) {
    Item item;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) {
        idle_cv_.notify_all();
        return;  // stop_ and nothing left to run
      }
      item = std::move(queue_.front());
      queue_.pop_front();
      busy_ = true;
    }
    std::string dep_error;
    for (const CompletionPtr &dep : item.deps) {
      dep->wait();
      if (dep->failed() && dep_error.empty())
        dep_error = dep->error();
    }
    if (item.device) {
      try {
        item.backend->synchronize(item.device);
      } catch (const std::exception &e) {
        if (dep_error.empty()) dep_error = e.what();
      }
    }
    std::string error;
    try {
      item.task(dep_error);
    } catch (const std::exception &e) {
      error = e.what();
      if (error.empty())
        error = "dsrt: an asynchronous operation failed";
    } catch (...) {
      error = "dsrt: an asynchronous operation failed with an unknown exception";
    }
    item.completion->finish(std::move(error));
    {
      std::lock_guard<std::mutex> lock(mutex_);
      busy_ = false;
      if (queue_.empty())
        idle_cv_.notify_all();
    }
  }
}

}  // namespace detail

using detail::CompletionPtr;

Stream::Stream() : Stream(dsrt::backend().kind()) {}

Stream::Stream(Backend backend, int threads)
    : backend_(backend), threads_(threads), state_(std::make_shared<detail::StreamState>()) {
  try {
    state_->backend = &dsrt::backend(backend);
  } catch (const Error &e) {
    throw Error(std::string("dsrt::Stream: ") + e.what());
  }
  if (threads < 0)
    throw Error("dsrt::Stream: thread count " + std::to_string(threads) +
                " must be >= 0 (0 means all available)");
}

void Stream::synchronize() {
  state_->backend->synchronize(*this);
  detail::wait_host_work(*this);
}

void Event::record(Stream &stream) {
  recorded_ = true;
  work_ = detail::pending_work(stream);
  backend_ = stream.state()->backend;
  device_ = backend_->record(stream);
}

void Event::wait(Stream &stream) {
  for (const CompletionPtr &c : work_)
    if (!c->done() || c->failed())
      detail::add_pending(stream, c);
  if (device_)
    stream.state()->backend->wait(stream, device_);
}

void Event::synchronize() {
  if (device_)
    backend_->synchronize(device_);
  for (const CompletionPtr &c : work_)
    c->wait();
  for (const CompletionPtr &c : work_)
    if (c->failed()) {
      c->reported = true;
      throw Error(c->error());
    }
}

void Event::check() {
  for (const CompletionPtr &c : work_)
    if (c->done() && c->failed()) {
      c->reported = true;
      throw Error(c->error());
    }
}

bool Event::query() const {
  if (device_ && !backend_->query(device_))
    return false;
  for (const CompletionPtr &c : work_)
    if (!c->done())
      return false;
  return true;
}

bool Request::test() const {
  if (!state_)
    return true;
  if (!state_->done())
    return false;
  if (state_->failed()) {
    state_->reported = true;
    throw Error(state_->error());
  }
  return true;
}

void Request::wait() const {
  if (!state_)
    return;
  state_->wait();
  test();
}

void Request::wait(Stream &stream) const {
  if (state_ && (!state_->done() || state_->failed()))
    detail::add_pending(stream, state_);
}

void wait_all(const std::vector<Request> &requests) {
  for (const Request &r : requests)
    if (r.state())
      r.state()->wait();
  for (const Request &r : requests)
    r.test();
}

}  // namespace dsrt

// How the runtime moves bytes between the host and a backend whose memory
// the host cannot read (cuda), checked without a GPU:
// - PinnedStaging (src/staging.h) with a fake device backend that records
//   every copy: each one has a pinned staging buffer on one side, never
//   pageable host memory and device memory together, and the bytes arrive
//   whole across chunks;
// - the runners' exchanges (RunnerComm) on a fake transport that, like
//   NCCL, works on device memory: the caller's host buffers never reach
//   it, results come back, and the runner's own traffic is told apart
//   from the program's per grid;
// - the transport choice: with the cpu backend the program's world is the
//   MPI world itself;
// - the stream worker (src/async.h): host work queued on a stream waits
//   for the device work queued before it, with the fake's copies held in a
//   device queue until the test lets them run.
// Single process; runs in dsrt_async_tests.
#include "async.h"
#include "staging.h"
#include "train_common.h"

#include "dsrt/backend.h"
#include "dsrt/comm.h"
#include "dsrt/dist.h"

#include "test_util.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace {

using dsrt::CommOp;
using dsrt::DType;
using dsrt::MemoryKind;
using dsrt::Shape;
using dsrt::Tensor;
using dsrt_test::Owned;

// A backend of kind Cuda whose "device" is host memory it hands out, and
// that records each copy. Streams given to it are cpu streams it ignores.
class FakeDeviceBackend final : public dsrt::BackendInterface {
public:
  struct Copy {
    void *dst;
    const void *src;
    size_t bytes;
  };
  ~FakeDeviceBackend() override {
    for (auto &block : blocks_) std::free(block.base);
  }

  dsrt::Backend kind() const override { return dsrt::Backend::Cuda; }
  const char *name() const override { return "fake-cuda"; }
  const char *kernel_library() const override { return "none"; }

  void *allocate(MemoryKind kind, size_t bytes, size_t) override {
    void *p = std::calloc(1, bytes);
    blocks_.push_back({kind, p, bytes});
    return p;
  }
  void deallocate(MemoryKind, void *p) override {
    for (auto &block : blocks_)
      if (block.base == p) block.freed = true;
  }
  dsrt::FileStore create_file(const std::string &, int64_t,
                              const dsrt::FileIOOptions &) override {
    throw dsrt::Error("fake backend: no files");
  }
  void copy(dsrt::Stream &, void *dst, const void *src, size_t bytes) override {
    copies.push_back({dst, src, bytes});
    if (queued) {
      std::lock_guard<std::mutex> lock(mutex_);
      queue_.push_back({dst, src, bytes});
      return;
    }
    std::memmove(dst, src, bytes);
  }
  void fill(dsrt::Stream &, const Tensor &, double) override {}
  void add(dsrt::Stream &, const Tensor &, const Tensor *, int64_t) override {}
  int64_t first_nonfinite(dsrt::Stream &, const Tensor *, int64_t) override { return -1; }
  void synchronize(dsrt::Stream &) override {}
  dsrt::DeviceEvent record(dsrt::Stream &) override {
    ++records;
    if (queued) {
      std::lock_guard<std::mutex> lock(mutex_);
      return std::make_shared<int>(ran_ + static_cast<int>(queue_.size()));
    }
    return std::make_shared<int>(records);
  }
  void wait(dsrt::Stream &, const dsrt::DeviceEvent &) override {}
  void synchronize(const dsrt::DeviceEvent &event) override {
    ++event_waits;
    if (!queued) return;
    // The copies queued when the event was recorded, run (or a device error).
    const int needed = *static_cast<const int *>(event.get());
    std::unique_lock<std::mutex> lock(mutex_);
    ran_cv_.wait(lock, [&] { return ran_ >= needed || !device_error_.empty(); });
    if (!device_error_.empty()) throw dsrt::Error(device_error_);
  }

  // Queued mode: a copy waits in the device's queue, as a cudaMemcpyAsync
  // does until the GPU gets to it, until run_queue() runs what is queued;
  // an event stands for the copies queued when it was recorded, and
  // synchronizing on it blocks until they have run, or throws the error
  // fail_device() reports.
  bool queued = false;
  void run_queue() {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const Copy &c : queue_) std::memmove(c.dst, c.src, c.bytes);
    ran_ += static_cast<int>(queue_.size());
    queue_.clear();
    ran_cv_.notify_all();
  }
  void fail_device(const std::string &error) {
    std::lock_guard<std::mutex> lock(mutex_);
    device_error_ = error;
    ran_cv_.notify_all();
  }
  bool query(const dsrt::DeviceEvent &) override { return true; }

  // The kind of the block holding [p, p + bytes); Host for memory it did not
  // hand out (the caller's pageable memory).
  MemoryKind kind_of(const void *p, size_t bytes) const {
    const auto *q = static_cast<const uint8_t *>(p);
    for (const auto &block : blocks_) {
      const auto *b = static_cast<const uint8_t *>(block.base);
      if (q >= b && q + bytes <= b + block.bytes) return block.kind;
    }
    return MemoryKind::Host;
  }
  int allocations(MemoryKind kind) const {
    int n = 0;
    for (const auto &block : blocks_) n += block.kind == kind;
    return n;
  }
  bool all_freed() const {
    for (const auto &block : blocks_)
      if (!block.freed) return false;
    return true;
  }

  std::vector<Copy> copies;
  int records = 0, event_waits = 0;

private:
  struct Block {
    MemoryKind kind;
    void *base;
    size_t bytes;
    bool freed = false;
  };
  std::vector<Block> blocks_;
  std::mutex mutex_;
  std::condition_variable ran_cv_;
  std::vector<Copy> queue_;
  int ran_ = 0;
  std::string device_error_;
};

std::vector<uint8_t> pattern(size_t n, int seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(i * 7 + seed);
  return v;
}

TEST(PinnedStaging, OnlyTheCpuBackendCopiesDirectly) {
  FakeDeviceBackend fake;
  EXPECT_TRUE(dsrt::detail::stages_host_copies(fake));
  EXPECT_FALSE(dsrt::detail::stages_host_copies(dsrt::backend()));  // cpu
}

TEST(PinnedStaging, DeviceCopiesAlwaysHavePinnedMemoryOnOneSide) {
  FakeDeviceBackend fake;
  dsrt::Stream stream;
  void *device = fake.allocate(MemoryKind::Device, 100, 64);
  const std::vector<uint8_t> source = pattern(100, 3);
  std::vector<uint8_t> back(100, 0);
  {
    dsrt::detail::PinnedStaging staging(fake, 16);  // 7 chunks, the last of 4 bytes
    staging.write(stream, device, source.data(), source.size());
    EXPECT_EQ(std::memcmp(device, source.data(), 100), 0);
    staging.read(stream, back.data(), device, back.size());
    EXPECT_EQ(back, source);
    // Two pinned buffers, allocated once and reused.
    EXPECT_EQ(fake.allocations(MemoryKind::PinnedHost), 2);
  }
  ASSERT_EQ(fake.copies.size(), 14u);
  size_t to_device = 0, from_device = 0;
  for (const auto &c : fake.copies) {
    const MemoryKind dst = fake.kind_of(c.dst, c.bytes), src = fake.kind_of(c.src, c.bytes);
    EXPECT_LE(c.bytes, 16u);
    EXPECT_TRUE((dst == MemoryKind::Device && src == MemoryKind::PinnedHost) ||
                (dst == MemoryKind::PinnedHost && src == MemoryKind::Device))
        << "a copy from " << dsrt::memory_kind_name(src) << " to "
        << dsrt::memory_kind_name(dst);
    to_device += dst == MemoryKind::Device ? c.bytes : 0;
    from_device += src == MemoryKind::Device ? c.bytes : 0;
  }
  EXPECT_EQ(to_device, 100u);
  EXPECT_EQ(from_device, 100u);
  // Every chunk's device copy was waited for before the host touched its
  // buffer again; the staging buffers go back when it does.
  EXPECT_EQ(fake.records, 14);
  EXPECT_GE(fake.event_waits, 7 + 5);
  fake.deallocate(MemoryKind::Device, device);
  EXPECT_TRUE(fake.all_freed());
}

TEST(PinnedStaging, EmptyAndSingleChunkCopies) {
  FakeDeviceBackend fake;
  dsrt::Stream stream;
  dsrt::detail::PinnedStaging staging(fake, 64);
  void *device = fake.allocate(MemoryKind::Device, 8, 64);
  staging.write(stream, device, nullptr, 0);
  EXPECT_TRUE(fake.copies.empty());
  const std::vector<uint8_t> source = pattern(8, 9);
  staging.write(stream, device, source.data(), 8);
  std::vector<uint8_t> back(8);
  staging.read(stream, back.data(), device, 8);
  EXPECT_EQ(back, source);
  EXPECT_EQ(fake.copies.size(), 2u);
}

// A device that starts running the queued copies 200 ms after it is made,
// and keeps running them until stopped: a write that waits for a copy
// blocks until then (and is counted) instead of forever.
class LateDevice {
public:
  explicit LateDevice(FakeDeviceBackend &fake)
      : thread_([this, &fake] {
          std::this_thread::sleep_for(std::chrono::milliseconds(200));
          while (!stop_) {
            fake.run_queue();
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
          }
        }) {}
  ~LateDevice() { stop(); }
  void stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }

private:
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// Small writes on one stream (a pipeline stage's micro-batch inputs, the
// optimizer's scalars) fill a staging buffer one after another, each into
// bytes no pending copy reads: no host wait while they fit, although none
// of their copies has run; a write that fits in neither buffer waits.
TEST(PinnedStaging, SmallWritesOnOneStreamWaitForNothingWhileTheyFit) {
  FakeDeviceBackend fake;
  fake.queued = true;
  dsrt::Stream stream;
  dsrt::detail::PinnedStaging staging(fake, 256);
  void *device = fake.allocate(MemoryKind::Device, 8 * 64, 64);
  std::vector<std::vector<uint8_t>> sources;
  for (int i = 0; i < 8; ++i) sources.push_back(pattern(40, i));
  LateDevice late(fake);
  for (int i = 0; i < 8; ++i)  // 64 bytes each, aligned: 4 per buffer
    staging.write(stream, static_cast<uint8_t *>(device) + 64 * i, sources[i].data(), 40);
  EXPECT_EQ(fake.event_waits, 0);
  // The ninth finds both buffers full of copies not known done.
  const std::vector<uint8_t> last = pattern(40, 8);
  staging.write(stream, device, last.data(), 40);
  EXPECT_EQ(fake.event_waits, 1);
  late.stop();
  fake.run_queue();
  EXPECT_EQ(std::memcmp(device, last.data(), 40), 0);
  for (int i = 1; i < 8; ++i)
    EXPECT_EQ(std::memcmp(static_cast<uint8_t *>(device) + 64 * i, sources[i].data(), 40), 0)
        << "write " << i;
  EXPECT_EQ(fake.allocations(MemoryKind::PinnedHost), 2);
}

// Writes on another stream do not share a buffer with pending copies of
// the first: the buffer's last event would not stand for them.
TEST(PinnedStaging, WritesOnAnotherStreamTakeTheOtherBuffer) {
  FakeDeviceBackend fake;
  fake.queued = true;
  dsrt::Stream first, second;
  dsrt::detail::PinnedStaging staging(fake, 256);
  void *device = fake.allocate(MemoryKind::Device, 3 * 64, 64);
  const std::vector<uint8_t> a = pattern(16, 1), b = pattern(16, 2), c = pattern(16, 3);
  LateDevice late(fake);
  staging.write(first, device, a.data(), 16);
  staging.write(second, static_cast<uint8_t *>(device) + 64, b.data(), 16);
  EXPECT_EQ(fake.event_waits, 0);
  EXPECT_EQ(fake.allocations(MemoryKind::PinnedHost), 2);
  // A third on the first stream: the second's buffer is not its to fill;
  // its own buffer still has room.
  staging.write(first, static_cast<uint8_t *>(device) + 128, c.data(), 16);
  EXPECT_EQ(fake.event_waits, 0);
  late.stop();
  fake.run_queue();
  EXPECT_EQ(std::memcmp(device, a.data(), 16), 0);
  EXPECT_EQ(std::memcmp(static_cast<uint8_t *>(device) + 64, b.data(), 16), 0);
  EXPECT_EQ(std::memcmp(static_cast<uint8_t *>(device) + 128, c.data(), 16), 0);
}

// Host work queued on a stream (a file write of a state, a message from
// pinned memory) runs on the worker's thread. On a backend with a queue of
// its own it must first wait for the device copies and kernels queued on
// that stream before it: here a device-to-pinned copy that has not run yet.
struct QueuedCopy {
  FakeDeviceBackend fake;
  dsrt::Stream stream;
  void *device, *pinned;
  std::vector<uint8_t> source = pattern(64, 5);
  std::vector<uint8_t> seen;
  std::string dep_error;
  std::atomic<bool> ran{false};

  QueuedCopy() {
    fake.queued = true;
    device = fake.allocate(MemoryKind::Device, 64, 64);
    pinned = fake.allocate(MemoryKind::PinnedHost, 64, 64);
    std::memcpy(device, source.data(), 64);
    fake.copy(stream, pinned, device, 64);  // queued on the device, not run
  }
  // The host task: reads the pinned buffer the copy fills.
  dsrt::Request submit(dsrt::detail::Worker &worker, bool after_device = true) {
    return worker.submit(
        &stream,
        [this](const std::string &error) {
          dep_error = error;
          const auto *p = static_cast<const uint8_t *>(pinned);
          seen.assign(p, p + 64);
          ran = true;
        },
        after_device);
  }
};

TEST(StreamWorker, HostWorkWaitsForDeviceCopiesQueuedBeforeIt) {
  QueuedCopy t;
  dsrt::detail::Worker worker(&t.fake);
  dsrt::Request request = t.submit(worker);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(t.ran) << "the host task ran before the device copy queued before it";
  t.fake.run_queue();
  request.wait();
  ASSERT_TRUE(t.ran);
  EXPECT_EQ(t.seen, t.source);
  EXPECT_EQ(t.dep_error, "");
  EXPECT_EQ(t.fake.event_waits, 1);
}

// What the test above guards against: a task that does not wait for the
// device (as the NCCL transport's, which waits for its own event) runs at
// once and reads the pinned buffer before the copy has landed.
TEST(StreamWorker, ATaskThatOptsOutReadsBeforeTheDeviceCopy) {
  QueuedCopy t;
  dsrt::detail::Worker worker(&t.fake);
  t.submit(worker, /*after_device=*/false).wait();
  ASSERT_TRUE(t.ran);
  EXPECT_EQ(t.seen, std::vector<uint8_t>(64, 0));
  EXPECT_EQ(t.fake.event_waits, 0);
  t.fake.run_queue();
}

// A device error found while waiting is the task's dependency error.
TEST(StreamWorker, ADeviceErrorBeforeTheTaskIsItsDependencyError) {
  QueuedCopy t;
  dsrt::detail::Worker worker(&t.fake);
  dsrt::Request request = t.submit(worker);
  t.fake.fail_device("fake-cuda: an illegal memory access was encountered");
  request.wait();
  ASSERT_TRUE(t.ran);
  EXPECT_NE(t.dep_error.find("illegal memory access"), std::string::npos) << t.dep_error;
}

// A transport of two ranks (this is rank 0) that, like NCCL, takes device
// memory (unless told otherwise): it remembers every pointer it was given,
// and plays rank 1.
class DeviceOnlyTransport final : public dsrt::Transport {
public:
  explicit DeviceOnlyTransport(bool device = true) : device_(device) {}
  const char *name() const override { return "device-only"; }
  int rank() const override { return 0; }
  int size() const override { return 2; }
  bool uses_mpi() const override { return false; }
  bool device_memory() const override { return device_; }

  dsrt::Request all_gather(dsrt::Stream &, const Tensor &in, const Tensor &out,
                           const dsrt::CommHooks &) override {
    seen.push_back(in.data);
    seen.push_back(out.data);
    std::memcpy(out.data, in.data, in.nbytes());
    auto *peer = static_cast<float *>(out.data) + in.numel();
    for (int64_t i = 0; i < in.numel(); ++i) peer[i] = 100.0f + static_cast<float>(i);
    ++calls[static_cast<int>(CommOp::AllGather)];
    return {};
  }
  dsrt::Request send_recv(dsrt::Stream &, const std::vector<dsrt::P2POp> &ops) override {
    for (const dsrt::P2POp &p : ops) {
      seen.push_back(p.tensor.data);
      if (p.op == CommOp::Recv)
        for (int64_t i = 0; i < p.tensor.numel(); ++i)
          static_cast<float *>(p.tensor.data)[i] = -1.0f - static_cast<float>(i);
      else
        sent.assign(static_cast<float *>(p.tensor.data),
                    static_cast<float *>(p.tensor.data) + p.tensor.numel());
      ++calls[static_cast<int>(p.op)];
    }
    return {};
  }
  dsrt::Request all_reduce(dsrt::Stream &, const Tensor &, const Tensor &, dsrt::ReduceOp,
                           const dsrt::CommHooks &) override {
    throw dsrt::Error("not used");
  }
  dsrt::Request reduce_scatter(dsrt::Stream &, const Tensor &, const Tensor &, dsrt::ReduceOp,
                               const dsrt::CommHooks &) override {
    throw dsrt::Error("not used");
  }
  dsrt::Request broadcast(dsrt::Stream &, const Tensor &, int) override {
    throw dsrt::Error("not used");
  }
  dsrt::Request barrier(dsrt::Stream &) override { throw dsrt::Error("not used"); }
  std::unique_ptr<dsrt::Transport> split(int, int) override { throw dsrt::Error("not used"); }
  dsrt::CommCounters counters(CommOp op) const override {
    dsrt::CommCounters c;
    c.calls = calls[static_cast<int>(op)];
    return c;
  }
  void reset_counters() override {}
  void set_options(const dsrt::CommOptions &) override {}
  dsrt::CommOptions options() const override { return {}; }
  std::string failure() const override { return {}; }

  std::vector<const void *> seen;
  std::vector<float> sent;
  int64_t calls[dsrt::kNumCommOps] = {};

private:
  bool device_;
};

TEST(RunnerExchange, HostBuffersAreStagedForADeviceMemoryTransport) {
  auto owned = std::make_unique<DeviceOnlyTransport>();
  DeviceOnlyTransport &transport = *owned;
  dsrt::Communicator device_world(std::move(owned));
  dsrt::runner::RunnerComm exchange(dsrt::Communicator::world());

  Owned in = Owned::of(DType::F32, Shape{3}, {1, 2, 3});
  Owned out(DType::F32, Shape{6});
  exchange.all_gather(device_world, in, out);
  EXPECT_EQ(std::vector<double>({out.at(0), out.at(1), out.at(2), out.at(3), out.at(4),
                                 out.at(5)}),
            std::vector<double>({1, 2, 3, 100, 101, 102}));

  Owned send = Owned::of(DType::F32, Shape{2}, {7, 8});
  Owned recv(DType::F32, Shape{2});
  exchange.send_recv(device_world,
                     {{CommOp::Send, send.t(), 1}, {CommOp::Recv, recv.t(), 1}});
  EXPECT_EQ(transport.sent, std::vector<float>({7, 8}));
  EXPECT_EQ(recv.at(0), -1.0);
  EXPECT_EQ(recv.at(1), -2.0);

  ASSERT_EQ(transport.seen.size(), 4u);
  for (const void *p : transport.seen)
    for (const void *host : {in.t().data, out.t().data, send.t().data, recv.t().data})
      EXPECT_NE(p, host) << "the transport was given the caller's host buffer";

  // The runner's own traffic on a grid over the device world is what it
  // issued there; on a grid over another communicator it is none.
  dsrt::Grid grid({"dp"}, {2}, device_world);
  const dsrt::runner::CommTally own = exchange.own(grid);
  EXPECT_EQ(own.calls[static_cast<int>(CommOp::AllGather)], 1);
  EXPECT_EQ(own.calls[static_cast<int>(CommOp::Send)], 1);
  EXPECT_EQ(own.calls[static_cast<int>(CommOp::Recv)], 1);
  dsrt::Grid other({"dp"}, {1}, dsrt::Communicator::world());
  EXPECT_EQ(exchange.own(other).calls[static_cast<int>(CommOp::AllGather)], 0);
}

TEST(RunnerExchange, AHostMemoryTransportGetsTheCallersBuffers) {
  auto owned = std::make_unique<DeviceOnlyTransport>(/*device=*/false);
  DeviceOnlyTransport &transport = *owned;
  dsrt::Communicator host_world(std::move(owned));
  dsrt::runner::RunnerComm exchange(dsrt::Communicator::world());
  Owned in = Owned::of(DType::F32, Shape{2}, {5, 6});
  Owned out(DType::F32, Shape{4});
  exchange.all_gather(host_world, in, out);
  EXPECT_EQ(transport.seen, std::vector<const void *>({in.t().data, out.t().data}));
  EXPECT_EQ(out.at(1), 6.0);
  EXPECT_EQ(out.at(3), 101.0);
}

TEST(ProgramWorld, TheCpuBackendsProgramWorldIsTheMpiWorld) {
  EXPECT_EQ(&dsrt::program_world(), &dsrt::Communicator::world());
  EXPECT_EQ(dsrt::backend().world_transport(dsrt::Communicator::world()), nullptr);
}

}  // namespace

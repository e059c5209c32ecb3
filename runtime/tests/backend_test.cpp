// The backend interface (dsrt/backend.h) as the backend-neutral runtime uses
// it: memory of each kind, copy/fill/add ordered on a stream after its
// pending asynchronous work, events ordering another stream, and the scalar
// helpers. Single process; runs in dsrt_async_tests.
#include "async.h"  // detail::Worker: asynchronous work the test controls
#include "dsrt/backend.h"
#include "dsrt/math.h"

#include "test_util.h"

#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>
#include <sys/stat.h>
#include <thread>
#include <vector>

namespace {

using dsrt::DType;
using dsrt::MemoryKind;
using dsrt::Shape;
using dsrt::Tensor;
using dsrt_test::Owned;

class Gate {
public:
  void open() {
    {
      std::lock_guard<std::mutex> lock(m_);
      open_ = true;
    }
    cv_.notify_all();
  }
  void wait() {
    std::unique_lock<std::mutex> lock(m_);
    cv_.wait(lock, [&] { return open_; });
  }

private:
  std::mutex m_;
  std::condition_variable cv_;
  bool open_ = false;
};

std::thread open_later(Gate &gate, int ms) {
  return std::thread([&gate, ms] {
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    gate.open();
  });
}

TEST(Backend, IsTheCpuBackendAndRefusesOthers) {
  dsrt::BackendInterface &b = dsrt::backend();
  EXPECT_EQ(b.kind(), dsrt::Backend::Cpu);
  EXPECT_STREQ(b.name(), "cpu");
  EXPECT_STREQ(b.kernel_library(), "dsrt_cpu");
  dsrt::Stream s;
  EXPECT_EQ(&dsrt::backend(s), &b);
  EXPECT_DSRT_ERROR(dsrt::backend(dsrt::Backend::Cuda), "libdsrt_cuda.a");
}

TEST(Backend, AllocatesEveryMemoryKindAligned) {
  dsrt::BackendInterface &b = dsrt::backend();
  for (MemoryKind kind : {MemoryKind::Device, MemoryKind::PinnedHost, MemoryKind::Host})
    for (size_t alignment : {size_t(64), size_t(4096)}) {
      void *p = b.allocate(kind, 1000, alignment);
      ASSERT_NE(p, nullptr) << dsrt::memory_kind_name(kind);
      EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % alignment, 0u);
      std::memset(p, 0xab, 1000);  // the whole block is usable
      b.deallocate(kind, p);
    }
  EXPECT_EQ(b.allocate(MemoryKind::Device, 0, 64), nullptr);
  EXPECT_EQ(b.allocate(MemoryKind::Device, SIZE_MAX - 8, 64), nullptr);
}

TEST(Backend, CreatesFileBackedStorage) {
  const std::string path = "/tmp/dsrt_backend_test_" + std::to_string(::getpid()) + ".bin";
  {
    dsrt::FileStore file = dsrt::backend().create_file(path, 8192, dsrt::FileIOOptions());
    EXPECT_EQ(file.size(), 8192);
    dsrt::Stream s;
    Owned x = Owned::of(DType::F32, Shape{3}, {1, 2, 3});
    Owned y(DType::F32, Shape{3});
    file.write_async(s, 4096, x.t()).wait();
    file.read_async(s, 4096, y.t()).wait();
    for (int i = 0; i < 3; ++i)
      EXPECT_EQ(y.at(i), 1.0 + i);
  }
  struct stat st;
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_size, 8192);
  std::remove(path.c_str());
}

// Each operation must run after the asynchronous work already on its
// stream: a gated task writes the source late, so an operation that ran at
// once would see the old values.
TEST(Backend, CopyFillAndAddWaitForPendingWorkOnTheirStream) {
  dsrt::BackendInterface &b = dsrt::backend();
  dsrt::detail::Worker worker;
  {
    dsrt::Stream s;
    Owned x = Owned::of(DType::F32, Shape{4}, {0, 0, 0, 0});
    Owned y = Owned::of(DType::F32, Shape{4}, {-1, -1, -1, -1});
    Gate gate;
    worker.submit(&s, [&](const std::string &) {
      gate.wait();
      for (int i = 0; i < 4; ++i)
        dsrt::store_float(x.t(), i, 10.0f + i);
    });
    std::thread opener = open_later(gate, 50);
    b.copy(s, y.t().data, x.t().data, x.t().nbytes());
    opener.join();
    for (int i = 0; i < 4; ++i)
      EXPECT_EQ(y.at(i), 10.0 + i) << "copy ran before earlier work on its stream";
  }
  {
    dsrt::Stream s;
    Owned x = Owned::of(DType::F32, Shape{2}, {5, 5});
    Gate gate;
    worker.submit(&s, [&](const std::string &) {
      gate.wait();
      dsrt::store_float(x.t(), 0, 9.0f);
      dsrt::store_float(x.t(), 1, 9.0f);
    });
    std::thread opener = open_later(gate, 50);
    dsrt::fill_async(s, x.t(), 3.0);  // must land after the task's write
    opener.join();
    EXPECT_EQ(x.at(0), 3.0);
    EXPECT_EQ(x.at(1), 3.0);
  }
  {
    dsrt::Stream s;
    Owned a = Owned::of(DType::F32, Shape{2}, {1, 2});
    Owned c = Owned::of(DType::F32, Shape{2}, {0, 0});
    Owned out(DType::F32, Shape{2});
    Gate gate;
    worker.submit(&s, [&](const std::string &) {
      gate.wait();
      dsrt::store_float(c.t(), 0, 100.0f);
      dsrt::store_float(c.t(), 1, 200.0f);
    });
    std::thread opener = open_later(gate, 50);
    const Tensor srcs[] = {a.t(), c.t()};
    dsrt::add_async(s, out.t(), srcs, 2);
    opener.join();
    EXPECT_EQ(out.at(0), 101.0);
    EXPECT_EQ(out.at(1), 202.0);
  }
}

TEST(Backend, CopyAllowsOverlapLikeMemmove) {
  dsrt::Stream s;
  std::vector<uint8_t> bytes = {0, 1, 2, 3, 4, 5, 6, 7};
  dsrt::backend().copy(s, bytes.data() + 2, bytes.data(), 6);
  EXPECT_EQ(bytes, (std::vector<uint8_t>{0, 1, 0, 1, 2, 3, 4, 5}));
  EXPECT_DSRT_ERROR(dsrt::backend().copy(s, nullptr, bytes.data(), 4), "null destination");
}

TEST(Backend, FillRoundsToEveryElementType) {
  dsrt::Stream s;
  Owned f32(DType::F32, Shape{3}), f16(DType::F16, Shape{3}), bf16(DType::BF16, Shape{3});
  Owned i64(DType::I64, Shape{3}), i32(DType::I32, Shape{3}), flag(DType::Bool, Shape{3});
  const double value = 1.0 + 1.0 / 1024 + 1.0 / 4096;  // between two f16 values
  for (Owned *o : {&f32, &f16, &bf16})
    dsrt::fill_async(s, o->t(), value);
  dsrt::fill_async(s, i64.t(), -7.9);
  dsrt::fill_async(s, i32.t(), 3e9);  // wraps, as store_int's narrowing
  dsrt::fill_async(s, flag.t(), 0.5);  // truncates to 0, as store_int
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(f32.at(i), static_cast<float>(value));
    EXPECT_EQ(f16.at(i), dsrt::math::half_to_float(dsrt::math::float_to_half(value)));
    EXPECT_EQ(bf16.at(i), dsrt::math::bfloat_to_float(dsrt::math::float_to_bfloat(value)));
    EXPECT_EQ(i64.at(i), -7);
    EXPECT_EQ(i32.at(i), static_cast<double>(static_cast<int32_t>(int64_t(3000000000))));
    EXPECT_EQ(flag.at(i), 0);
  }
  dsrt::fill_async(s, flag.t(), 2.0);
  EXPECT_EQ(flag.at(0), 1);
}

TEST(Backend, AddSumsInSourceOrderAndRoundsOnce) {
  dsrt::Stream s;
  // f32: (1e8 + 1) - 1e8 is 0 in f32, so the order shows.
  Owned a = Owned::of(DType::F32, Shape{1}, {1e8});
  Owned c = Owned::of(DType::F32, Shape{1}, {1});
  Owned d = Owned::of(DType::F32, Shape{1}, {-1e8});
  Owned out(DType::F32, Shape{1});
  const Tensor abd[] = {a.t(), c.t(), d.t()}, adb[] = {a.t(), d.t(), c.t()};
  dsrt::add_async(s, out.t(), abd, 3);
  EXPECT_EQ(out.at(0), 0.0);
  dsrt::add_async(s, out.t(), adb, 3);
  EXPECT_EQ(out.at(0), 1.0);
  // f16: 1 + 2^-11 + 2^-11 is exact in f32 and 1 + 2^-10 in f16; rounding
  // every partial to f16 would give 1 (ties to even, twice).
  const double tiny = 1.0 / 2048;
  Owned h1 = Owned::of(DType::F16, Shape{2}, {1, 1});
  Owned h2 = Owned::of(DType::F16, Shape{2}, {tiny, tiny});
  const Tensor halves[] = {h1.t(), h2.t(), h2.t()};
  dsrt::add_async(s, h1.t(), halves, 3);  // dst is one of the sources
  EXPECT_EQ(h1.at(0), 1.0 + 2 * tiny);
  EXPECT_EQ(h1.at(1), 1.0 + 2 * tiny);
  // Mismatches are errors, not silent truncation.
  Owned short_one(DType::F32, Shape{2});
  const Tensor bad[] = {a.t(), short_one.t()};
  EXPECT_DSRT_ERROR(dsrt::add_async(s, out.t(), bad, 2), "source 1", "element type or count");
  Owned ints(DType::I64, Shape{1});
  const Tensor int_src[] = {ints.t()};
  EXPECT_DSRT_ERROR(dsrt::add_async(s, ints.t(), int_src, 1), "f32, f16 or bf16", "i64");
  EXPECT_DSRT_ERROR(dsrt::add_async(s, out.t(), abd, 0), "at least one source");
}

// An event recorded after pending work on one stream orders a backend copy
// on another stream, without blocking the host at the wait.
TEST(Backend, EventOrdersACopyOnAnotherStream) {
  dsrt::Stream producer, consumer;
  dsrt::detail::Worker worker;
  Owned x = Owned::of(DType::I64, Shape{2}, {0, 0});
  Owned y = Owned::of(DType::I64, Shape{2}, {-1, -1});
  Gate gate;
  worker.submit(&producer, [&](const std::string &) {
    gate.wait();
    dsrt::store_int(x.t(), 0, 41);
    dsrt::store_int(x.t(), 1, 42);
  });
  dsrt::Event ready;
  ready.record(producer);
  EXPECT_FALSE(ready.query());
  ready.wait(consumer);  // returns at once: the gate is still closed
  std::thread opener = open_later(gate, 50);
  dsrt::backend(consumer).copy(consumer, y.t().data, x.t().data, x.t().nbytes());
  opener.join();
  EXPECT_EQ(y.at(0), 41);
  EXPECT_EQ(y.at(1), 42);
  EXPECT_TRUE(ready.query());
}

TEST(Backend, ScalarHelpersGoThroughTheStream) {
  dsrt::Stream s;
  Owned lr(DType::F32, Shape{}), step(DType::I64, Shape{}), half(DType::F16, Shape{1});
  dsrt::write_scalar(s, lr.t(), 0.001);
  dsrt::write_scalar(s, step.t(), 12345678901.0);
  dsrt::write_scalar(s, half.t(), 0.1);
  EXPECT_EQ(lr.at(0), static_cast<double>(0.001f));
  EXPECT_EQ(step.at(0), 12345678901.0);
  EXPECT_EQ(dsrt::read_scalar(s, lr.t()), static_cast<double>(0.001f));
  EXPECT_EQ(dsrt::read_scalar(s, step.t()), 12345678901.0);
  EXPECT_EQ(dsrt::read_scalar(s, half.t()),
            dsrt::math::half_to_float(dsrt::math::float_to_half(0.1f)));
  Owned two(DType::F32, Shape{2});
  EXPECT_DSRT_ERROR(dsrt::write_scalar(s, two.t(), 1.0), "not a single value");
  Owned none(DType::F32, Shape{0});
  EXPECT_DSRT_ERROR(dsrt::read_scalar(s, none.t()), "no element");
  // read_to_host waits for the stream's pending work.
  dsrt::detail::Worker worker;
  Owned x = Owned::of(DType::F32, Shape{1}, {0});
  Gate gate;
  worker.submit(&s, [&](const std::string &) {
    gate.wait();
    dsrt::store_float(x.t(), 0, 6.5f);
  });
  std::thread opener = open_later(gate, 50);
  EXPECT_EQ(dsrt::read_scalar(s, x.t()), 6.5);
  opener.join();
}

}  // namespace

// Streams with asynchronous work, requests and events; memory kinds, arenas
// and copies; FileStore. Single process.
#include "async.h"  // detail::Worker: asynchronous work the test controls
#include "dsrt/file_io.h"
#include "dsrt/kernels.h"
#include "dsrt/memory.h"

#include "test_util.h"

#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

namespace {

using dsrt::DType;
using dsrt::MemoryKind;
using dsrt::Shape;
using dsrt::Tensor;
using dsrt_test::Owned;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// A gate that asynchronous test work waits on until the test opens it.
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

// Opens `gate` after `ms` milliseconds on another thread.
std::thread open_later(Gate &gate, int ms) {
  return std::thread([&gate, ms] {
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    gate.open();
  });
}

std::string temp_path(const std::string &name) {
  const char *dir = std::getenv("TMPDIR");
  return std::string(dir && *dir ? dir : "/tmp") + "/dsrt_async_test_" +
         std::to_string(::getpid()) + "_" + name;
}

//===--- streams, events, requests -----------------------------------------===//

TEST(Async, KernelWaitsForPendingWorkOnItsStream) {
  dsrt::Stream s;
  dsrt::detail::Worker worker;
  Owned x = Owned::of(DType::F32, Shape{4}, {0, 0, 0, 0});
  Owned y(DType::F32, Shape{4});
  Gate gate;
  // Asynchronous work on s writes x once the gate opens.
  dsrt::Request r = worker.submit(&s, [&](const std::string &) {
    gate.wait();
    for (int i = 0; i < 4; ++i)
      dsrt::store_float(x.t(), i, 10.0f + i);
  });
  EXPECT_FALSE(r.test());
  std::thread opener = open_later(gate, 100);
  auto start = Clock::now();
  dsrt::copy(s, x, y);  // must run after the pending write
  double waited = seconds_since(start);
  opener.join();
  for (int i = 0; i < 4; ++i)
    EXPECT_EQ(y.at(i), 10.0 + i) << "the kernel ran before earlier work on its stream";
  EXPECT_GE(waited, 0.05);
  EXPECT_TRUE(r.test());
}

TEST(Async, EventOrdersAnotherStreamWithoutBlockingTheHost) {
  dsrt::Stream comm_stream, compute;
  dsrt::detail::Worker worker;
  Owned x = Owned::of(DType::F32, Shape{2}, {1, 1});
  Owned y(DType::F32, Shape{2});
  Gate gate;
  worker.submit(&comm_stream, [&](const std::string &) {
    gate.wait();
    dsrt::store_float(x.t(), 0, 7.0f);
    dsrt::store_float(x.t(), 1, 8.0f);
  });
  dsrt::Event e;
  e.record(comm_stream);
  EXPECT_FALSE(e.query());
  auto start = Clock::now();
  e.wait(compute);  // must not block the host
  EXPECT_LT(seconds_since(start), 0.05);
  std::thread opener = open_later(gate, 80);
  dsrt::copy(compute, x, y);  // blocks until the event's work is done
  opener.join();
  EXPECT_EQ(y.at(0), 7.0);
  EXPECT_EQ(y.at(1), 8.0);
  EXPECT_TRUE(e.query());
  e.synchronize();
  comm_stream.synchronize();
}

TEST(Async, RequestWaitOnStreamAndStreamCopiesShareWork) {
  dsrt::Stream s;
  dsrt::Stream same = s;  // a copy is the same stream
  dsrt::detail::Worker worker;
  Gate gate;
  std::atomic<bool> ran{false};
  dsrt::Request r = worker.submit(nullptr, [&](const std::string &) {
    gate.wait();
    ran = true;
  });
  r.wait(s);  // later work on s waits for r
  std::thread opener = open_later(gate, 50);
  same.synchronize();
  opener.join();
  EXPECT_TRUE(ran.load());
}

TEST(Async, ErrorsReachTheWaiterAndTheStreamOnce) {
  dsrt::Stream s;
  dsrt::detail::Worker worker;
  dsrt::Request r = worker.submit(&s, [](const std::string &) {
    throw dsrt::Error("dsrt::test: the disk caught fire");
  });
  worker.drain();
  // A failed operation nobody waited for makes dependent work fail...
  dsrt::Request dependent = worker.submit(&s, [](const std::string &dep_error) {
    if (!dep_error.empty())
      throw dsrt::Error("dsrt::test: not run: " + dep_error);
  });
  EXPECT_DSRT_ERROR(dependent.wait(), "not run", "disk caught fire");
  // ...and is reported by the stream once.
  EXPECT_DSRT_ERROR(s.synchronize(), "disk caught fire");
  s.synchronize();
  // The request itself reports it every time.
  EXPECT_DSRT_ERROR(r.wait(), "disk caught fire");
  EXPECT_DSRT_ERROR(r.test(), "disk caught fire");
  EXPECT_DSRT_ERROR(dsrt::wait_all({dsrt::Request(), r}), "disk caught fire");
  // Work on the stream after the error was reported runs normally.
  dsrt::Request later = worker.submit(&s, [](const std::string &dep_error) {
    if (!dep_error.empty())
      throw dsrt::Error("unexpected: " + dep_error);
  });
  later.wait();
}

TEST(Async, KernelReportsAFailedOperationOnItsStream) {
  dsrt::Stream s;
  dsrt::detail::Worker worker;
  worker.submit(&s, [](const std::string &) { throw dsrt::Error("dsrt::test: lost data"); });
  Owned x(DType::F32, Shape{2}), y(DType::F32, Shape{2});
  EXPECT_DSRT_ERROR(dsrt::copy(s, x, y), "lost data");
  dsrt::copy(s, x, y);  // reported once
}

TEST(Async, DefaultRequestIsComplete) {
  dsrt::Request r;
  EXPECT_TRUE(r.test());
  r.wait();
  dsrt::Stream s;
  r.wait(s);
  s.synchronize();
}

//===--- memory --------------------------------------------------------------===//

TEST(Memory, ArenasOfEveryKindAreAlignedAndAccounted) {
  for (MemoryKind kind : {MemoryKind::Device, MemoryKind::PinnedHost, MemoryKind::Host}) {
    SCOPED_TRACE(dsrt::memory_kind_name(kind));
    dsrt::MemoryUsage before = dsrt::memory_usage(kind);
    {
      dsrt::Arena a(kind, 1000);
      EXPECT_EQ(reinterpret_cast<uintptr_t>(a.data()) % 64, 0u);
      EXPECT_EQ(a.size(), 1000u);
      EXPECT_EQ(a.kind(), kind);
      dsrt::MemoryUsage during = dsrt::memory_usage(kind);
      EXPECT_EQ(during.bytes, before.bytes + 1000);
      EXPECT_EQ(during.arenas, before.arenas + 1);
      EXPECT_GE(during.peak_bytes, during.bytes);
      EXPECT_EQ(dsrt::memory_kind_of(a.data()), kind);
      EXPECT_EQ(dsrt::memory_kind_of(a.data() + 999), kind);
      dsrt::Arena moved = std::move(a);
      EXPECT_EQ(a.data(), nullptr);
      EXPECT_EQ(dsrt::memory_kind_of(moved.data() + 500), kind);
      EXPECT_EQ(dsrt::memory_usage(kind).bytes, before.bytes + 1000);
      dsrt::Arena page(kind, 100, 4096);
      EXPECT_EQ(reinterpret_cast<uintptr_t>(page.data()) % 4096, 0u);
    }
    EXPECT_EQ(dsrt::memory_usage(kind).bytes, before.bytes);
    EXPECT_EQ(dsrt::memory_usage(kind).arenas, before.arenas);
  }
  int on_stack = 0;
  EXPECT_EQ(dsrt::memory_kind_of(&on_stack), MemoryKind::Host);
  dsrt::Arena empty(MemoryKind::Device, 0);
  EXPECT_EQ(empty.data(), nullptr);
}

TEST(Memory, ViewsStayInsideTheArena) {
  dsrt::Arena a(MemoryKind::Device, 256);
  Tensor t = a.view(64, DType::F32, Shape{2, 8});
  EXPECT_EQ(static_cast<uint8_t *>(t.data), a.data() + 64);
  EXPECT_EQ(t.nbytes(), 64u);
  a.view(192, DType::F32, Shape{16});  // ends exactly at the end
  EXPECT_DSRT_ERROR(a.view(200, DType::F32, Shape{16}), "dsrt::Arena::view", "offset 200",
                    "does not fit", "device arena of 256 bytes");
  EXPECT_DSRT_ERROR(a.view(-8, DType::F32, Shape{1}), "offset -8");
}

TEST(Memory, AllocationFailureIsAClearError) {
  EXPECT_DSRT_ERROR(dsrt::Arena(MemoryKind::Device, size_t(1) << 62), "dsrt::Arena",
                    "cannot allocate", "of device memory");
  EXPECT_DSRT_ERROR(dsrt::Arena(MemoryKind::Host, 64, 48), "alignment 48");
  // A limit emulates a device's capacity.
  dsrt::MemoryUsage before = dsrt::memory_usage(MemoryKind::Device);
  dsrt::set_memory_limit(MemoryKind::Device, before.bytes + (1 << 20));
  {
    dsrt::Arena fits(MemoryKind::Device, 512 << 10);
    EXPECT_DSRT_ERROR(dsrt::Arena(MemoryKind::Device, 600 << 10), "cannot allocate",
                      "614400 bytes", "device memory", "limit");
    dsrt::Arena host(MemoryKind::Host, 600 << 10);  // other kinds are not limited
  }
  dsrt::Arena now_fits(MemoryKind::Device, 600 << 10);
  dsrt::set_memory_limit(MemoryKind::Device, 0);
  EXPECT_EQ(dsrt::memory_usage(MemoryKind::Device).limit, 0);
}

TEST(Memory, CopiesBetweenKindsAreCountedAndChecked) {
  dsrt::Stream s;
  dsrt::Arena device(MemoryKind::Device, 1024), pinned(MemoryKind::PinnedHost, 1024);
  std::vector<uint8_t> host(1024);
  std::iota(host.begin(), host.end(), uint8_t(0));
  dsrt::reset_copied_bytes();
  dsrt::copy_async(s, pinned.data(), host.data(), 1024);
  dsrt::copy_async(s, device.data() + 100, pinned.data() + 100, 500);
  Tensor dv = device.view(100, DType::I32, Shape{125});
  Tensor hv{host.data() + 512, DType::I32, Shape{125}};
  dsrt::copy_async(s, hv, dv);
  s.synchronize();
  EXPECT_EQ(dsrt::copied_bytes(MemoryKind::Host, MemoryKind::PinnedHost), 1024);
  EXPECT_EQ(dsrt::copied_bytes(MemoryKind::PinnedHost, MemoryKind::Device), 500);
  EXPECT_EQ(dsrt::copied_bytes(MemoryKind::Device, MemoryKind::Host), 500);
  EXPECT_EQ(dsrt::copied_bytes(MemoryKind::Device, MemoryKind::Device), 0);
  for (int i = 0; i < 500; ++i)
    ASSERT_EQ(host[512 + i], uint8_t(100 + i)) << i;

  EXPECT_DSRT_ERROR(dsrt::copy_async(s, host.data(), device.data() + 1000, 100),
                    "dsrt::copy_async", "100 bytes at src", "run past the end",
                    "device arena");
  EXPECT_DSRT_ERROR(dsrt::copy_async(s, pinned.data() + 1000, host.data(), 100),
                    "at dst", "pinned host arena");
  EXPECT_DSRT_ERROR(dsrt::copy_async(s, device.data() + 10, device.data(), 100), "overlap");
  EXPECT_DSRT_ERROR(dsrt::copy_async(s, nullptr, host.data(), 4), "null destination");
  Tensor f{device.data(), DType::F32, Shape{4}}, i{pinned.data(), DType::I32, Shape{4}};
  EXPECT_DSRT_ERROR(dsrt::copy_async(s, f, i), "differ in element type");
}

TEST(Memory, CopyRunsAfterPendingWorkOnItsStream) {
  dsrt::Stream s;
  dsrt::detail::Worker worker;
  dsrt::Arena device(MemoryKind::Device, 64), pinned(MemoryKind::PinnedHost, 64);
  std::memset(pinned.data(), 0, 64);
  Gate gate;
  worker.submit(&s, [&](const std::string &) {
    gate.wait();
    std::memset(pinned.data(), 0x5a, 64);
  });
  std::thread opener = open_later(gate, 50);
  dsrt::copy_async(s, device.data(), pinned.data(), 64);
  opener.join();
  EXPECT_EQ(device.data()[0], 0x5a);
  EXPECT_EQ(device.data()[63], 0x5a);
}

//===--- FileStore -----------------------------------------------------------===//

std::vector<float> pattern(size_t n, float base) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i)
    v[i] = base + static_cast<float>(i) * 0.5f;
  return v;
}

TEST(FileStore, WritesAndReadsRangesAsynchronously) {
  const std::string path = temp_path("rw");
  dsrt::Stream s;
  {
    dsrt::FileStore store = dsrt::FileStore::create(path, 1 << 20);
    EXPECT_EQ(store.size(), 1 << 20);
    struct stat st;
    ASSERT_EQ(::stat(path.c_str(), &st), 0);
    EXPECT_EQ(st.st_size, 1 << 20);
    EXPECT_GE(static_cast<int64_t>(st.st_blocks) * 512, 1 << 20) << "not preallocated";

    std::vector<float> a = pattern(1000, 1), b = pattern(40000, -3);
    Tensor ta{a.data(), DType::F32, Shape{1000}}, tb{b.data(), DType::F32, Shape{200, 200}};
    std::vector<dsrt::Request> writes = {store.write_async(s, 0, ta),
                                         store.write_async(s, 8192, tb)};
    // Issued after the writes, without waiting: the store runs them in order.
    std::vector<float> a2(1000), b2(40000);
    dsrt::Request ra = store.read_async(s, 0, a2.data(), 4000);
    dsrt::Request rb = store.read_async(s, 8192, Tensor{b2.data(), DType::F32, Shape{40000}});
    dsrt::wait_all({writes[0], writes[1], ra, rb});
    EXPECT_EQ(a, a2);
    EXPECT_EQ(b, b2);
    dsrt::FileStoreStats st2 = store.stats();
    EXPECT_EQ(st2.writes, 2);
    EXPECT_EQ(st2.reads, 2);
    EXPECT_EQ(st2.bytes_written, 4000 + 160000);
    EXPECT_EQ(st2.bytes_read, 4000 + 160000);
    store.flush();
    EXPECT_EQ(store.stats().flushes, 1);
    store.close();
  }
  // Reopened read-only, the data is there; writing is refused.
  dsrt::FileStore again = dsrt::FileStore::open(path, /*writable=*/false);
  EXPECT_EQ(again.size(), 1 << 20);
  std::vector<float> b3(40000);
  again.read_async(s, 8192, b3.data(), 160000).wait();
  EXPECT_EQ(b3, pattern(40000, -3));
  EXPECT_DSRT_ERROR(again.write_async(s, 0, b3.data(), 4), "write_async", path.c_str(),
                    "read-only");
  again.close();
  ::unlink(path.c_str());
}

TEST(FileStore, RangesOutsideTheFileAreRefusedWhenIssued) {
  const std::string path = temp_path("range");
  dsrt::Stream s;
  dsrt::FileStore store = dsrt::FileStore::create(path, 4096);
  std::vector<char> buf(1024);
  EXPECT_DSRT_ERROR(store.read_async(s, 3584, buf.data(), 1024), "dsrt::FileStore::read_async",
                    "bytes [3584, 4608)", path.c_str(), "outside the file's 4096 bytes");
  EXPECT_DSRT_ERROR(store.write_async(s, -1, buf.data(), 1), "bytes [-1, 0)");
  EXPECT_DSRT_ERROR(store.write_async(s, 4096, buf.data(), 1), "preallocate");
  store.preallocate(8192);
  EXPECT_EQ(store.size(), 8192);
  store.write_async(s, 4096, buf.data(), 1024).wait();
  store.preallocate(100);  // never shrinks
  EXPECT_EQ(store.size(), 8192);
  EXPECT_DSRT_ERROR(store.read_async(s, 0, nullptr, 16), "no memory");
  store.close();
  EXPECT_DSRT_ERROR(store.flush(), "no open file");
  ::unlink(path.c_str());
}

TEST(FileStore, MissingFilesAndDirectoriesAreClearErrors) {
  EXPECT_DSRT_ERROR(dsrt::FileStore::open("/nonexistent/dsrt/offload.bin"),
                    "dsrt::FileStore::open", "cannot open /nonexistent/dsrt/offload.bin",
                    "No such file");
  EXPECT_DSRT_ERROR(dsrt::FileStore::create("/nonexistent/dsrt/offload.bin", 16),
                    "dsrt::FileStore::create", "/nonexistent/dsrt/offload.bin");
  EXPECT_DSRT_ERROR(dsrt::FileStore::open("/tmp", false), "/tmp is not a regular file");
  EXPECT_DSRT_ERROR(dsrt::FileStore::create(temp_path("neg"), -5), "size -5");
}

TEST(FileStore, ShortReadNamesTheFileAndRange) {
  const std::string path = temp_path("short");
  dsrt::Stream s;
  dsrt::FileStore store = dsrt::FileStore::create(path, 65536);
  // Another process truncates the file behind the store's back.
  ASSERT_EQ(::truncate(path.c_str(), 1000), 0);
  std::vector<char> buf(4096);
  dsrt::Request r = store.read_async(s, 0, buf.data(), 4096);
  const std::string range = "bytes [0, 4096) of " + path;
  // The stream reports the failure once; the request every time.
  EXPECT_DSRT_ERROR(s.synchronize(), "dsrt::FileStore::read_async", "short read", range.c_str(),
                    "1000 of 4096 bytes", "ends at byte 1000");
  s.synchronize();
  EXPECT_DSRT_ERROR(r.wait(), "short read", range.c_str());
  // An error nobody waited for is reported by close().
  store.read_async(s, 2048, buf.data(), 2048);
  EXPECT_DSRT_ERROR(store.close(), "short read", "bytes [2048, 4096)");
  ::unlink(path.c_str());
}

TEST(FileStore, IOErrorsNameTheFileAndOffset) {
  const std::string path = temp_path("efbig");
  dsrt::Stream s;
  dsrt::FileStore store = dsrt::FileStore::create(path, 4 << 20);
  // A file size limit makes pwrite fail with EFBIG past 1 MiB (and return
  // a partial count for a write that crosses it).
  struct rlimit old;
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old), 0);
  auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
  struct rlimit small = old;
  small.rlim_cur = 1 << 20;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  std::vector<char> buf(64 << 10, 'x');
  dsrt::Request crossing = store.write_async(s, (1 << 20) - 4096, buf.data(), buf.size());
  dsrt::Stream other;  // on s it would not run, after a failure
  dsrt::Request beyond = store.write_async(other, 2 << 20, buf.data(), 100);
  dsrt::Request after = store.write_async(s, 0, buf.data(), 100);
  std::string crossing_error, beyond_error;
  try {
    crossing.wait();
  } catch (const dsrt::Error &e) {
    crossing_error = e.what();
  }
  try {
    beyond.wait();
  } catch (const dsrt::Error &e) {
    beyond_error = e.what();
  }
  ::setrlimit(RLIMIT_FSIZE, &old);
  std::signal(SIGXFSZ, old_handler);
  EXPECT_NE(crossing_error.find("writing bytes [1044480, 1110016) of " + path), std::string::npos)
      << crossing_error;
  EXPECT_NE(crossing_error.find("failed at offset 1048576"), std::string::npos) << crossing_error;
  EXPECT_NE(crossing_error.find("too large"), std::string::npos) << crossing_error;
  EXPECT_NE(beyond_error.find("failed at offset 2097152"), std::string::npos) << beyond_error;
  EXPECT_DSRT_ERROR(after.wait(), "bytes [0, 100)",
                    "not run: an earlier operation on its stream failed", "File too large");
  store.close();
  ::unlink(path.c_str());
}

TEST(FileStore, WaitsForItsStreamBeforeRunning) {
  const std::string path = temp_path("order");
  dsrt::Stream s;
  dsrt::detail::Worker worker;
  dsrt::FileStore store = dsrt::FileStore::create(path, 64);
  std::vector<char> data(64, 0);
  Gate gate;
  // Earlier work on s fills the buffer; the write must see its result.
  worker.submit(&s, [&](const std::string &) {
    gate.wait();
    std::memset(data.data(), 'q', 64);
  });
  dsrt::Request w = store.write_async(s, 0, data.data(), 64);
  EXPECT_FALSE(w.test());
  gate.open();
  w.wait();
  std::vector<char> back(64);
  store.read_async(s, 0, back.data(), 64).wait();
  EXPECT_EQ(back, std::vector<char>(64, 'q'));
  store.close();
  ::unlink(path.c_str());
}

// The engine's busy time counts while its requests are in flight, not while
// an operation waits for its stream; the wait counts the time a program
// thread is blocked on the store's operations, and nothing for one already
// complete or for a wait on other work.
TEST(FileStore, CountsBusyTimeAndBlockedWaits) {
  const std::string path = temp_path("busy");
  dsrt::Stream s;
  dsrt::detail::Worker worker;
  dsrt::FileStore store = dsrt::FileStore::create(path, 1 << 20);
  std::vector<char> data(1 << 20, 'b');
  Gate gate;
  worker.submit(&s, [&](const std::string &) { gate.wait(); });
  dsrt::Request w = store.write_async(s, 0, data.data(), data.size());
  std::thread opener = open_later(gate, 200);
  const auto start = std::chrono::steady_clock::now();
  w.wait();
  const int64_t blocked = std::chrono::duration_cast<std::chrono::nanoseconds>(
                              std::chrono::steady_clock::now() - start)
                              .count();
  opener.join();
  dsrt::FileStoreStats st = store.stats();
  EXPECT_GE(st.wait_ns, 150'000'000) << "the write was waited for 200 ms";
  EXPECT_LE(st.wait_ns, blocked);
  EXPECT_GT(st.write_busy_ns, 0);
  EXPECT_EQ(st.read_busy_ns, 0);
  w.wait();  // complete: no more waiting
  EXPECT_EQ(store.stats().wait_ns, st.wait_ns);
  // Blocked on other work (the gate's), not the store's.
  Gate second;
  dsrt::Request other = worker.submit(&s, [&](const std::string &) { second.wait(); });
  std::thread opener2 = open_later(second, 50);
  other.wait();
  opener2.join();
  EXPECT_EQ(store.stats().wait_ns, st.wait_ns);
  std::vector<char> back(1 << 20);
  store.read_async(s, 0, back.data(), back.size()).wait();
  EXPECT_EQ(back, data);
  st = store.stats();
  EXPECT_GT(st.read_busy_ns, 0);
  // The engine was busy for a small part of the 200 ms the write waited
  // for its stream (1 MiB; the bound leaves room for a loaded machine).
  EXPECT_LT(st.write_busy_ns, 150'000'000);
  store.close();
  ::unlink(path.c_str());
}

//===--- the I/O engine ------------------------------------------------------===//

// Bytes that differ from offset to offset and from seed to seed.
std::vector<uint8_t> bytes_of(size_t n, unsigned seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i)
    v[i] = static_cast<uint8_t>((i * 131 + seed * 17 + (i >> 9)) & 0xff);
  return v;
}

// An aligned buffer of n bytes, and a view of it starting `skew` bytes in.
struct Aligned {
  explicit Aligned(size_t n) {
    void *p = nullptr;
    EXPECT_EQ(posix_memalign(&p, dsrt::kDirectAlignment, n + dsrt::kDirectAlignment), 0);
    base = static_cast<uint8_t *>(p);
  }
  ~Aligned() { std::free(base); }
  uint8_t *base = nullptr;
};

// What this machine allows (a seccomp profile may refuse io_uring, the
// file system of TMPDIR O_DIRECT): what a store asking for both gets.
struct Allowed {
  bool uring = false, direct = false;
  Allowed() {
    const std::string path = temp_path("probe");
    testing::internal::CaptureStderr();  // the fallback notices
    dsrt::FileStore probe = dsrt::FileStore::create(path, 4096, dsrt::FileIOOptions());
    testing::internal::GetCapturedStderr();
    const std::string engine = probe.engine();
    uring = engine.find("io_uring") != std::string::npos;
    direct = engine.find("O_DIRECT") != std::string::npos;
    probe.close();
    ::unlink(path.c_str());
  }
};

// Every engine (io_uring or pread/pwrite, O_DIRECT or the page cache) and
// every aio setting moves the same bytes: aligned and unaligned buffers,
// offsets and lengths, neighbours of a partial block left as they were,
// requests cut at block_size with at most queue_depth in flight.
TEST(FileIOEngine, RoundTripsForEveryEngineAndSetting) {
  struct Case {
    bool uring, direct;
    int64_t block;
    int depth, parallel;
    bool single, overlap;
  } cases[] = {{true, true, 8192, 4, 1, false, true},   {true, true, 4096, 2, 3, true, true},
               {true, true, 16384, 3, 1, false, false}, {true, false, 8192, 4, 2, false, true},
               {false, true, 8192, 2, 1, false, true},  {false, false, 4096, 1, 1, true, false}};
  const size_t file_bytes = 200000;  // not a multiple of the block: rounded up on disk
  const Allowed allowed;
  for (Case c : cases) {
    dsrt::FileIOOptions io;
    io.uring = c.uring;
    io.direct = c.direct;
    io.block_size = c.block;
    io.queue_depth = c.depth;
    io.intra_op_parallelism = c.parallel;
    io.single_submit = c.single;
    io.overlap_events = c.overlap;
    const std::string what = std::to_string(c.uring) + std::to_string(c.direct) + " block " +
                             std::to_string(c.block) + " depth " + std::to_string(c.depth);
    SCOPED_TRACE(what);
    c.uring = c.uring && allowed.uring;  // else the store falls back, as asked
    c.direct = c.direct && allowed.direct;
    const std::string path = temp_path("engine");
    dsrt::Stream s;
    dsrt::FileStore store = dsrt::FileStore::create(path, file_bytes, io);
    EXPECT_EQ(store.engine(), std::string(c.uring ? "io_uring" : "pread/pwrite") +
                                  (c.direct ? ", O_DIRECT" : ", page cache"));
    struct stat st;
    ASSERT_EQ(::stat(path.c_str(), &st), 0);
    EXPECT_EQ(st.st_size, 200704);  // 49 blocks of 4096
    EXPECT_EQ(store.size(), 200000);

    // Aligned: the whole file from an aligned buffer.
    std::vector<uint8_t> want = bytes_of(file_bytes, 1);
    Aligned a(file_bytes), b(file_bytes);
    std::memcpy(a.base, want.data(), file_bytes);
    store.write_async(s, 0, a.base, 196608).wait();  // 48 blocks
    dsrt::FileStoreStats st1 = store.stats();
    EXPECT_EQ(st1.requests, (196608 + c.block - 1) / c.block);
    EXPECT_LE(st1.max_in_flight, c.depth);
    EXPECT_EQ(st1.bounced, 0);
    // The rest, unaligned in length: only its last block (all of it here)
    // goes through a bounce buffer.
    store.write_async(s, 196608, a.base + 196608, file_bytes - 196608).wait();
    EXPECT_EQ(store.stats().bounced_bytes, c.direct ? 4096 : 0);
    // Aligned buffer and offset, 10000 bytes: two blocks straight from the
    // buffer, the third bounced; read back the same way.
    store.write_async(s, 8192, a.base + 8192, 10000).wait();
    EXPECT_EQ(store.stats().bounced_bytes, c.direct ? 8192 : 0);
    {
      Aligned back(12288);
      std::memset(back.base, 0xee, 12288);
      store.read_async(s, 8192, back.base, 10000).wait();
      EXPECT_EQ(std::memcmp(back.base, want.data() + 8192, 10000), 0);
      EXPECT_EQ(back.base[10000], 0xee) << "the read wrote past its length";
      EXPECT_EQ(store.stats().bounced_bytes, c.direct ? 12288 : 0);
    }
    // Unaligned offsets, lengths and buffers, inside blocks and across them.
    struct Piece {
      int64_t offset, bytes, skew;
    } pieces[] = {{5, 100, 3}, {4000, 300, 1}, {12345, 54321, 7}, {199990, 10, 0}};
    unsigned seed = 2;
    for (const Piece &p : pieces) {
      std::vector<uint8_t> patch = bytes_of(static_cast<size_t>(p.bytes), seed++);
      std::memcpy(b.base + p.skew, patch.data(), patch.size());
      store.write_async(s, p.offset, b.base + p.skew, static_cast<size_t>(p.bytes)).wait();
      std::memcpy(want.data() + p.offset, patch.data(), patch.size());
    }
    EXPECT_EQ(store.stats().bounced, c.direct ? 7 : 0);
    // Read back whole (aligned), and in the same unaligned pieces.
    std::vector<uint8_t> got(file_bytes);
    store.read_async(s, 0, b.base, file_bytes).wait();
    std::memcpy(got.data(), b.base, file_bytes);
    EXPECT_TRUE(got == want) << "the file's bytes differ";
    for (const Piece &p : pieces) {
      std::vector<uint8_t> part(static_cast<size_t>(p.bytes) + 2, 0xee);
      store.read_async(s, p.offset, part.data() + 1, static_cast<size_t>(p.bytes)).wait();
      EXPECT_EQ(part.front(), 0xee);
      EXPECT_EQ(part.back(), 0xee);
      EXPECT_TRUE(std::equal(part.begin() + 1, part.end() - 1, want.begin() + p.offset))
          << "bytes [" << p.offset << ", " << p.offset + p.bytes << ")";
    }
    dsrt::FileStoreStats end = store.stats();
    EXPECT_EQ(end.writes, 7);
    EXPECT_EQ(end.reads, 6);
    EXPECT_EQ(end.bytes_written,
              static_cast<int64_t>(file_bytes) + 10000 + 100 + 300 + 54321 + 10);
    if (c.overlap && c.depth > 1)
      EXPECT_EQ(end.max_in_flight, c.depth) << "the queue was never full";
    store.close();
    // What the page cache sees is what the engine wrote.
    dsrt::FileStore again = dsrt::FileStore::open(path, false, dsrt::FileIOOptions());
    EXPECT_EQ(again.size(), 200704);
    std::vector<uint8_t> check(file_bytes);
    again.read_async(s, 0, check.data(), file_bytes).wait();
    EXPECT_TRUE(check == want);
    again.close();
    ::unlink(path.c_str());
  }
}

// Where the file system refuses O_DIRECT, or the kernel io_uring, the store
// says so in one line and moves the same bytes through the page cache or
// pread/pwrite (DSRT_FILE_IO_REFUSE plays the refusal).
TEST(FileIOEngine, FallsBackWithANoticeWhenRefused) {
  const Allowed allowed;
  for (const char *refuse : {"direct", "uring", "direct,uring"}) {
    SCOPED_TRACE(refuse);
    ::setenv("DSRT_FILE_IO_REFUSE", refuse, 1);
    const std::string path = temp_path("refused");
    testing::internal::CaptureStderr();
    dsrt::FileStore store = dsrt::FileStore::create(path, 10000, dsrt::FileIOOptions());
    const std::string said = testing::internal::GetCapturedStderr();
    ::unsetenv("DSRT_FILE_IO_REFUSE");
    const bool no_direct = std::strstr(refuse, "direct") || !allowed.direct,
               no_uring = std::strstr(refuse, "uring") || !allowed.uring;
    EXPECT_EQ(store.engine(), std::string(no_uring ? "pread/pwrite" : "io_uring") +
                                  (no_direct ? ", page cache" : ", O_DIRECT"));
    EXPECT_EQ(said.find("dsrt: note: " + path + ": the file system refused O_DIRECT") !=
                  std::string::npos,
              no_direct)
        << said;
    EXPECT_EQ(said.find("dsrt: note: io_uring is unavailable") != std::string::npos, no_uring)
        << said;
    EXPECT_EQ(std::count(said.begin(), said.end(), '\n'), int(no_direct) + int(no_uring));
    dsrt::Stream s;
    std::vector<uint8_t> data = bytes_of(9999, 5), back(9999);
    store.write_async(s, 1, data.data(), data.size()).wait();
    store.read_async(s, 1, back.data(), back.size()).wait();
    EXPECT_TRUE(back == data);
    store.close();
    ::unlink(path.c_str());
  }
}

TEST(FileIOEngine, RefusesSettingsOutOfRange) {
  dsrt::FileIOOptions io;
  io.block_size = 1000;
  EXPECT_DSRT_ERROR(dsrt::FileStore::create(temp_path("bad"), 16, io), "aio.block_size 1000",
                    "multiple of 4096");
  io = dsrt::FileIOOptions();
  io.queue_depth = 0;
  EXPECT_DSRT_ERROR(dsrt::FileStore::create(temp_path("bad"), 16, io), "aio.queue_depth 0");
  io = dsrt::FileIOOptions();
  io.intra_op_parallelism = 65;
  EXPECT_DSRT_ERROR(dsrt::FileStore::create(temp_path("bad"), 16, io),
                    "aio.intra_op_parallelism 65");
}

// A write that fails halfway (DSRT_TEST_FAIL_WRITE: the second write writes
// its first half, then fails with EIO) leaves a versioned store's range
// entirely as it was, for every engine; an unversioned store shows the
// half-written range (which is what the injection does, and why versions
// exist).
TEST(FileIOEngine, AFailedWriteNeverLeavesAVersionedRangeHalfWritten) {
  for (bool versioned : {false, true})
    for (bool direct : {false, true}) {
      SCOPED_TRACE(std::string(versioned ? "versioned" : "in place") +
                   (direct ? ", O_DIRECT" : ", page cache"));
      dsrt::FileIOOptions io;
      io.block_size = 8192;
      io.direct = direct;
      io.versioned = versioned;
      const std::string path = temp_path("versions");
      ::setenv("DSRT_TEST_FAIL_WRITE", "2", 1);
      dsrt::FileStore store = dsrt::FileStore::create(path, 65636, io);
      ::unsetenv("DSRT_TEST_FAIL_WRITE");
      struct stat st;
      ASSERT_EQ(::stat(path.c_str(), &st), 0);
      EXPECT_EQ(st.st_size, versioned ? 2 * 69632 : 69632);
      dsrt::Stream s;
      const std::vector<uint8_t> a = bytes_of(40000, 1), b = bytes_of(40000, 2),
                                 c = bytes_of(40000, 3);
      store.write_async(s, 8190, a.data(), a.size()).wait();
      EXPECT_DSRT_ERROR(store.write_async(s, 8190, b.data(), b.size()).wait(),
                        "dsrt::FileStore::write_async", path.c_str(), "Input/output error");
      std::vector<uint8_t> got(40000);
      store.read_async(s, 8190, got.data(), got.size()).wait();
      if (versioned) {
        EXPECT_TRUE(got == a) << "the failed write changed the range";
      } else {
        EXPECT_TRUE(std::equal(got.begin(), got.begin() + 8000, b.begin()));
        EXPECT_TRUE(std::equal(got.end() - 8000, got.end(), a.end() - 8000));
      }
      if (versioned) {
        // The next write completes and is current; reads inside a range
        // see it; a write overlapping part of a range is refused.
        store.write_async(s, 8190, c.data(), c.size()).wait();
        store.read_async(s, 8190, got.data(), got.size()).wait();
        EXPECT_TRUE(got == c);
        std::vector<uint8_t> part(100);
        store.read_async(s, 8190 + 300, part.data(), part.size()).wait();
        EXPECT_TRUE(std::equal(part.begin(), part.end(), c.begin() + 300));
        EXPECT_DSRT_ERROR(store.write_async(s, 8000, c.data(), 1000).wait(),
                          "a versioned store must be a whole range written before",
                          "bytes [8190, 48190)");
        EXPECT_DSRT_ERROR(store.preallocate(1 << 20), "versioned and does not grow");
      }
      store.close();
      ::unlink(path.c_str());
    }
}

// The room check reads the file system's real free space (statvfs): no file
// system has 2^62 bytes free here, and every one has a byte; the test hook
// only lowers the figure.
TEST(FileIOEngine, NoRoomNamesTheDirectoryAndBothSizes) {
  const char *tmp = std::getenv("TMPDIR");
  const std::string dir = tmp && *tmp ? tmp : "/tmp";
  const int64_t huge = int64_t(1) << 62;
  const std::string where = "'" + dir + "', whose file system has ";
  EXPECT_DSRT_ERROR(dsrt::check_room(dir, huge, "the file space of rank 0"),
                    "the file space of rank 0 needs 4611686018427387904 bytes in '",
                    where.c_str(), "bytes free");
  dsrt::check_room(dir, 1, "one byte");
  ::setenv("DSRT_TEST_FREE_BYTES", "1000", 1);
  EXPECT_DSRT_ERROR(dsrt::check_room(dir, 4096, "the file space"),
                    "needs 4096 bytes in", "has 1000 bytes free");
  dsrt::check_room(dir, 1000, "the file space");
  ::unsetenv("DSRT_TEST_FREE_BYTES");
  EXPECT_DSRT_ERROR(dsrt::check_room("/nonexistent/dsrt", 1, "the file space"),
                    "cannot query the free space of '/nonexistent/dsrt'", "No such file");
}

}  // namespace

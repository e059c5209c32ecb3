// FileStore: one I/O thread per store runs the operations in issue order;
// each operation is cut into aligned requests run on io_uring rings with
// O_DIRECT (or, where refused, the page cache and pread/pwrite).
#include "dsrt/file_io.h"

#include "async.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#ifdef DSRT_HAVE_URING
#include <liburing.h>
#endif

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace dsrt {

using detail::CompletionPtr;

namespace {

[[noreturn]] void fail_errno(const std::string &what, int err) {
  throw Error(what + ": " + std::strerror(err));
}

// DSRT_FILE_IO_REFUSE=direct,uring makes the store act as if the file
// system refused O_DIRECT or the kernel refused io_uring, so that the
// fallbacks can be tested where both work.
bool refused_by_test(const char *what) {
  const char *v = std::getenv("DSRT_FILE_IO_REFUSE");
  return v && std::strstr(v, what);
}

void notice(const std::string &line) { std::fprintf(stderr, "dsrt: note: %s\n", line.c_str()); }

int64_t align_down(int64_t v) { return v / kDirectAlignment * kDirectAlignment; }
// The zero buffer FileStore::zero_async writes a range from, piece by piece.
constexpr int64_t kZeroChunk = 1 << 20;
int64_t align_up(int64_t v) { return align_down(v + kDirectAlignment - 1); }

// One request: `len` bytes at file offset `off` from or into `ptr`, of which
// the first `need` must move (a read's last block may end past the file).
struct Req {
  int64_t off = 0;
  char *ptr = nullptr;
  int64_t len = 0, need = 0, done = 0;
  int bounce = -1;     // the bounce buffer holding it, if any
  bool bounced = false;  // goes through a bounce buffer (not aligned for O_DIRECT)
};

// A queue of requests: an io_uring, or (where io_uring is unavailable) one
// that runs each request synchronously when it is submitted.
class Ring {
public:
  Ring() = default;
  Ring(const Ring &) = delete;
  Ring &operator=(const Ring &) = delete;
  ~Ring() {
#ifdef DSRT_HAVE_URING
    if (uring_) io_uring_queue_exit(&ring_);
#endif
    for (void *b : bounce_) std::free(b);
  }

  // Sets the ring up; on failure the ring runs requests synchronously and
  // `why` says why.
  void init(int depth, bool want_uring, std::string &why) {
    depth_ = depth;
    if (!want_uring) return;
#ifdef DSRT_HAVE_URING
    if (refused_by_test("uring")) {
      why = std::strerror(ENOSYS);
      return;
    }
    int err = io_uring_queue_init(static_cast<unsigned>(depth), &ring_, 0);
    if (err < 0) {
      why = std::strerror(-err);
      return;
    }
    uring_ = true;
#else
    why = "libdsrt was built without liburing";
#endif
  }
  bool uring() const { return uring_; }

  // Queues one request; sync rings run it now.
  void prep(int fd, bool write, char *ptr, int64_t len, int64_t off, uint64_t tag) {
#ifdef DSRT_HAVE_URING
    if (uring_) {
      io_uring_sqe *sqe = io_uring_get_sqe(&ring_);
      if (!sqe) {  // cannot happen: at most depth_ requests are queued
        io_uring_submit(&ring_);
        sqe = io_uring_get_sqe(&ring_);
      }
      if (write)
        io_uring_prep_write(sqe, fd, ptr, static_cast<unsigned>(len), static_cast<uint64_t>(off));
      else
        io_uring_prep_read(sqe, fd, ptr, static_cast<unsigned>(len), static_cast<uint64_t>(off));
      io_uring_sqe_set_data64(sqe, tag);
      return;
    }
#endif
    ssize_t got = write ? ::pwrite(fd, ptr, static_cast<size_t>(len), off)
                        : ::pread(fd, ptr, static_cast<size_t>(len), off);
    done_.emplace_back(tag, got < 0 ? -errno : static_cast<int>(got));
  }
  // Submits what prep queued; returns the system's error (0: none).
  int submit() {
#ifdef DSRT_HAVE_URING
    if (uring_) {
      for (;;) {
        int n = io_uring_submit(&ring_);
        if (n >= 0) return 0;
        if (n != -EINTR && n != -EAGAIN) return -n;
      }
    }
#endif
    return 0;
  }
  // Waits for one completion: (tag, bytes moved or -errno).
  std::pair<uint64_t, int> wait(int &err) {
    err = 0;
#ifdef DSRT_HAVE_URING
    if (uring_) {
      io_uring_cqe *cqe = nullptr;
      int r;
      do r = io_uring_wait_cqe(&ring_, &cqe);
      while (r == -EINTR);
      if (r < 0) {
        err = -r;
        return {0, 0};
      }
      std::pair<uint64_t, int> out{io_uring_cqe_get_data64(cqe), cqe->res};
      io_uring_cqe_seen(&ring_, cqe);
      return out;
    }
#endif
    std::pair<uint64_t, int> out = done_.front();
    done_.pop_front();
    return out;
  }

  // Bounce buffer `i` of `bytes` (aligned for direct I/O), allocated on
  // first use.
  char *bounce(int i, int64_t bytes) {
    if (bounce_.size() <= static_cast<size_t>(i)) bounce_.resize(static_cast<size_t>(i) + 1);
    if (!bounce_[static_cast<size_t>(i)] &&
        posix_memalign(&bounce_[static_cast<size_t>(i)], kDirectAlignment,
                       static_cast<size_t>(bytes)) != 0)
      throw Error("dsrt::FileStore: cannot allocate a bounce buffer of " + std::to_string(bytes) +
                  " bytes");
    return static_cast<char *>(bounce_[static_cast<size_t>(i)]);
  }
  int depth() const { return depth_; }

private:
  int depth_ = 1;
  bool uring_ = false;
#ifdef DSRT_HAVE_URING
  io_uring ring_{};
#endif
  std::deque<std::pair<uint64_t, int>> done_;
  std::vector<void *> bounce_;
};

}  // namespace

struct FileStore::Impl {
  std::string path;
  int fd = -1;       // the page cache's: allocation, size, flushes, fallback I/O
  int dfd = -1;      // O_DIRECT, or -1 where the file system refused it
  int64_t disk_size = 0;  // the file's size on disk (direct I/O stays inside it)
  // Versioned stores: copy 1 of byte i is at byte half + i, and each range
  // written so far (by its offset) has its bytes and current copy. Only the
  // I/O thread touches them.
  int64_t half = 0;
  struct Version {
    int64_t bytes;
    int copy;
  };
  std::map<int64_t, Version> versions;
  // DSRT_TEST_FAIL_WRITE=k: the k-th write fails with EIO halfway.
  int64_t writes_run = 0, fail_write = 0;
  bool writable = false;
  FileIOOptions io;
  std::vector<std::unique_ptr<Ring>> rings;
  std::mutex mutex;  // guards size, stats, issued
  int64_t size = 0;
  FileStoreStats stats;
  // FileStoreStats::wait_ns, added to by the waiters (Completion::wait).
  std::shared_ptr<std::atomic<int64_t>> wait_ns = std::make_shared<std::atomic<int64_t>>(0);
  // Operations whose failure nobody may have seen yet, for close().
  std::vector<CompletionPtr> issued;
  std::unique_ptr<detail::Worker> worker = std::make_unique<detail::Worker>();

  ~Impl() {
    worker.reset();  // runs what is queued
    rings.clear();
    if (dfd >= 0) ::close(dfd);
    if (fd >= 0) ::close(fd);
  }

  std::string range(int64_t offset, int64_t bytes) const {
    return "bytes [" + std::to_string(offset) + ", " + std::to_string(offset + bytes) + ") of " +
           path;
  }

  int64_t file_end() const {
    struct stat st;
    return ::fstat(fd, &st) == 0 ? static_cast<int64_t>(st.st_size) : -1;
  }

  // Opens the direct descriptor and the rings (after fd is open).
  void start_engine();

  // With `zeros` (a write of zero bytes), the range is written from that
  // buffer of kZeroChunk zero bytes, piece by piece, as one operation.
  Request issue(const char *what, Stream &stream, int64_t offset, void *buffer, size_t bytes,
                bool write, std::shared_ptr<char> zeros = nullptr);
  // A versioned range's current copy (0 for one never written), after
  // checking that [offset, offset + n) is a whole range written before or
  // overlaps none (a write), or lies inside one or none (a read).
  int current_copy(const std::string &name, int64_t offset, int64_t n, bool write) const;

  // One operation, on the calling (I/O) thread; throws its error.
  void run(const std::string &name, int64_t offset, char *buffer, int64_t n, bool write);

  struct Failure {
    int err = 0;  // the system's error, or 0 with a message
    std::string message;
    explicit operator bool() const { return err != 0 || !message.empty(); }
  };
  struct Op {
    const std::string *name;
    int64_t offset, n;
    char *buffer;
    bool write, direct, bounced;
  };
  // Runs `reqs` on `ring`; returns the first failure (after every request
  // in flight has completed: their buffers are the caller's).
  Failure run_requests(Ring &ring, const Op &op, std::vector<Req> &reqs, int64_t &max_in_flight);
  Failure fill_bounce(const Op &op, Req &r);
};

namespace {

FileStore::Impl &checked(const std::unique_ptr<FileStore::Impl> &impl, const char *what) {
  if (!impl || impl->fd < 0)
    throw Error(std::string("dsrt::FileStore::") + what + ": the store has no open file");
  return *impl;
}

}  // namespace

int64_t file_bytes_on_disk(int64_t size, const FileIOOptions &io) {
  // Direct I/O moves whole blocks: the last one lies inside the file too.
  return align_up(size) * (io.versioned ? 2 : 1);
}

void check_file_io_options(const FileIOOptions &io, const std::string &what) {
  if (io.block_size <= 0 || io.block_size % kDirectAlignment != 0 ||
      io.block_size > (int64_t(1) << 30))
    throw Error(what + ": aio.block_size " + std::to_string(io.block_size) +
                " must be a positive multiple of " + std::to_string(kDirectAlignment) +
                " of at most 1 GiB");
  if (io.queue_depth < 1 || io.queue_depth > 4096)
    throw Error(what + ": aio.queue_depth " + std::to_string(io.queue_depth) +
                " must be in [1, 4096]");
  if (io.intra_op_parallelism < 1 || io.intra_op_parallelism > 64)
    throw Error(what + ": aio.intra_op_parallelism " + std::to_string(io.intra_op_parallelism) +
                " must be in [1, 64]");
}

void FileStore::Impl::start_engine() {
  check_file_io_options(io, "dsrt::FileStore " + path);
  if (const char *k = std::getenv("DSRT_TEST_FAIL_WRITE"))
    fail_write = std::strtoll(k, nullptr, 10);
  if (io.direct) {
    int err = EINVAL;
    if (!refused_by_test("direct")) {
      dfd = ::open(path.c_str(), (writable ? O_RDWR : O_RDONLY) | O_DIRECT | O_CLOEXEC);
      err = errno;
    }
    if (dfd < 0)
      notice(path + ": the file system refused O_DIRECT (" + std::strerror(err) +
             "); its I/O goes through the page cache");
  }
  std::string why;
  for (int i = 0; i < io.intra_op_parallelism; ++i) {
    rings.push_back(std::make_unique<Ring>());
    rings.back()->init(io.queue_depth, io.uring && why.empty(), why);
  }
  if (io.uring && !why.empty())
    notice("io_uring is unavailable (" + why + "): " + path +
           " is read and written with pread/pwrite");
}

FileStore::FileStore(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
FileStore::FileStore() = default;
FileStore::FileStore(FileStore &&) noexcept = default;
FileStore &FileStore::operator=(FileStore &&) noexcept = default;
FileStore::~FileStore() = default;

FileStore FileStore::create(const std::string &path, int64_t size, const FileIOOptions &io) {
  if (size < 0)
    throw Error("dsrt::FileStore::create: size " + std::to_string(size) + " of " + path +
                " must be >= 0");
  check_file_io_options(io, "dsrt::FileStore::create " + path);
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    fail_errno("dsrt::FileStore::create: cannot create " + path, errno);
  const int64_t disk = file_bytes_on_disk(size, io);
  if (disk > 0) {
    int err = ::posix_fallocate(fd, 0, disk);  // returns the error, errno is not set
    if (err != 0) {
      ::close(fd);
      fail_errno("dsrt::FileStore::create: cannot allocate " + std::to_string(disk) +
                     " bytes for " + path,
                 err);
    }
  }
  auto impl = std::make_unique<Impl>();
  impl->path = path;
  impl->fd = fd;
  impl->writable = true;
  impl->size = size;
  impl->disk_size = disk;
  impl->io = io;
  impl->half = io.versioned ? disk / 2 : 0;
  impl->start_engine();
  return FileStore(std::move(impl));
}

FileStore FileStore::open(const std::string &path, bool writable, const FileIOOptions &io) {
  check_file_io_options(io, "dsrt::FileStore::open " + path);
  if (io.versioned)
    throw Error("dsrt::FileStore::open: " + path +
                ": a versioned store is created, not opened (which copy is current is not "
                "in the file)");
  int fd = ::open(path.c_str(), (writable ? O_RDWR : O_RDONLY) | O_CLOEXEC);
  if (fd < 0)
    fail_errno(std::string("dsrt::FileStore::open: cannot open ") + path +
                   (writable ? " for reading and writing" : " for reading"),
               errno);
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    fail_errno("dsrt::FileStore::open: cannot stat " + path, err);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw Error("dsrt::FileStore::open: " + path + " is not a regular file");
  }
  auto impl = std::make_unique<Impl>();
  impl->path = path;
  impl->fd = fd;
  impl->writable = writable;
  impl->size = static_cast<int64_t>(st.st_size);
  impl->disk_size = impl->size;
  impl->io = io;
  impl->start_engine();
  return FileStore(std::move(impl));
}

const std::string &FileStore::path() const {
  static const std::string none;
  return impl_ ? impl_->path : none;
}

int64_t FileStore::size() const {
  if (!impl_)
    return 0;
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->size;
}

bool FileStore::writable() const { return impl_ && impl_->writable; }

std::string FileStore::engine() const {
  if (!impl_ || impl_->rings.empty())
    return "none";
  return std::string(impl_->rings[0]->uring() ? "io_uring" : "pread/pwrite") +
         (impl_->dfd >= 0 ? ", O_DIRECT" : ", page cache");
}

FileStore::Impl::Failure FileStore::Impl::fill_bounce(const Op &op, Req &r) {
  // A write through a bounce buffer writes whole blocks: the bytes of the
  // edge blocks outside the operation's range are read first, so that they
  // stay what they were.
  const int64_t end = op.offset + op.n;
  // The first block when the range starts inside it, the last when the
  // range ends inside it (the same block, read twice, when both).
  for (int64_t edge : {r.off < op.offset ? r.off : int64_t(-1),
                       r.off + r.len > end ? r.off + r.len - kDirectAlignment : int64_t(-1)}) {
    if (edge < 0)
      continue;
    char *block = r.ptr + (edge - r.off);
    ssize_t got = ::pread(dfd, block, kDirectAlignment, edge);
    if (got < 0)
      return {errno, "at " + std::to_string(edge)};
    std::memset(block + got, 0, static_cast<size_t>(kDirectAlignment - got));  // past the end
  }
  const int64_t lo = std::max(r.off, op.offset), hi = std::min(r.off + r.len, end);
  std::memcpy(r.ptr + (lo - r.off), op.buffer + (lo - op.offset), static_cast<size_t>(hi - lo));
  return {};
}

FileStore::Impl::Failure FileStore::Impl::run_requests(Ring &ring, const Op &op,
                                                       std::vector<Req> &reqs,
                                                       int64_t &max_in_flight) {
  const int file = op.direct ? dfd : fd;
  const int depth = ring.depth();
  std::vector<int> free_bounce;
  for (int i = depth - 1; i >= 0; --i) free_bounce.push_back(i);
  Failure failure;
  auto fail = [&](Failure f) {
    if (!failure) failure = std::move(f);
  };
  size_t next = 0;
  int in_flight = 0;
  auto queue = [&](size_t i) {
    Req &r = reqs[i];
    ring.prep(file, op.write, r.ptr + r.done, r.len - r.done, r.off + r.done, i);
    if (io.single_submit)
      if (int err = ring.submit()) fail({err, ""});
  };
  while (in_flight > 0 || (next < reqs.size() && !failure)) {
    // overlap_events: top the queue up as requests complete; else wait for
    // the whole batch before the next.
    int room = io.overlap_events ? depth - in_flight : (in_flight == 0 ? depth : 0);
    int queued = 0;
    while (room-- > 0 && next < reqs.size() && !failure) {
      Req &r = reqs[next];
      if (r.bounced) {
        r.bounce = free_bounce.back();
        free_bounce.pop_back();
        r.ptr = ring.bounce(r.bounce, io.block_size);
        if (op.write)
          if (Failure f = fill_bounce(op, r)) {
            fail(std::move(f));
            free_bounce.push_back(r.bounce);
            break;
          }
      }
      queue(next++);
      ++in_flight;
      ++queued;
    }
    if (queued > 0 && !io.single_submit)
      if (int err = ring.submit()) {
        fail({err, ""});
        // Nothing of this batch reached the kernel on an io_uring whose
        // submit failed outright; the sync ring ran them already.
        if (ring.uring()) in_flight -= queued;
      }
    max_in_flight = std::max<int64_t>(max_in_flight, in_flight);
    if (in_flight == 0) break;
    int err = 0;
    auto [tag, res] = ring.wait(err);
    if (err) {
      fail({err, ""});
      break;  // the ring is unusable; its requests' buffers stay with it
    }
    Req &r = reqs[tag];
    --in_flight;
    if (res == -EINTR || res == -EAGAIN) {
      queue(tag);
      if (!io.single_submit) ring.submit();
      ++in_flight;
      continue;
    }
    if (res < 0) {
      fail({-res, "at " + std::to_string(std::max(op.offset, r.off + r.done))});
    } else {
      r.done += res;
      if (r.done < r.need) {
        // A short count: go on from there, unless the file ended (nothing
        // moved, or direct I/O stopped inside a block).
        if (res == 0 || (op.direct && r.done % kDirectAlignment != 0)) {
          const int64_t moved =
              std::clamp<int64_t>(r.off + r.done - op.offset, 0, op.n);
          fail({0, std::string("short ") + (op.write ? "write" : "read") + " of " +
                       range(op.offset, op.n) + ": " + std::to_string(moved) + " of " +
                       std::to_string(op.n) + " bytes transferred; the file ends at byte " +
                       std::to_string(file_end()) + " (truncated by another process?)"});
        } else if (!failure) {
          queue(tag);
          if (!io.single_submit) ring.submit();
          ++in_flight;
          continue;
        }
      } else if (r.bounced && !op.write) {
        const int64_t lo = std::max(r.off, op.offset), hi = std::min(r.off + r.len, op.offset + op.n);
        std::memcpy(op.buffer + (lo - op.offset), r.ptr + (lo - r.off), static_cast<size_t>(hi - lo));
      }
    }
    if (r.bounce >= 0) free_bounce.push_back(r.bounce);
  }
  return failure;
}

void FileStore::Impl::run(const std::string &name, int64_t offset, char *buffer, int64_t n,
                          bool write) {
  if (n == 0) return;
  Op op{&name, offset, n, buffer, write, false, false};
  // Direct I/O inside the file's blocks on disk. A buffer and offset
  // aligned to the block: straight from the buffer, but for the last block
  // when the length ends inside one (that block alone goes through a bounce
  // buffer); otherwise bounce buffers throughout.
  const int64_t lo = align_down(offset), hi = align_up(offset + n);
  op.direct = dfd >= 0 && hi <= disk_size;
  const bool aligned_start =
      lo == offset && reinterpret_cast<uintptr_t>(buffer) % kDirectAlignment == 0;
  op.bounced = op.direct && (!aligned_start || hi != offset + n);
  // [from, body) straight from the buffer, [body, to) bounced.
  const int64_t from = op.bounced ? lo : offset, to = op.bounced ? hi : offset + n;
  const int64_t body = !op.bounced ? to : aligned_start ? align_down(offset + n) : from;
  std::vector<Req> reqs;
  auto add = [&](int64_t off, int64_t len, bool bounced) {
    Req r;
    r.off = off;
    r.len = len;
    r.need = write ? r.len : std::min(r.len, offset + n - off);
    r.bounced = bounced;
    r.ptr = bounced ? nullptr : buffer + (off - offset);
    reqs.push_back(r);
  };
  for (int64_t off = from; off < body; off += io.block_size)
    add(off, std::min(io.block_size, body - off), false);
  for (int64_t off = body; off < to; off += io.block_size)
    add(off, std::min(io.block_size, to - off), true);
  // The injected failure: the first half of the requests, then EIO.
  int64_t injected_at = -1;
  if (write && fail_write > 0 && ++writes_run == fail_write) {
    if (reqs.size() == 1)
      reqs[0].len = reqs[0].need = align_down(reqs[0].len / 2);
    else
      reqs.resize(reqs.size() / 2);
    injected_at = reqs.back().off + reqs.back().len;
    if (reqs.back().len == 0)
      reqs.pop_back();
  }
  // intra_op_parallelism: consecutive shares of the requests, one per ring,
  // each on its own thread (the first on this one).
  const size_t parts = std::max<size_t>(1, std::min(rings.size(), reqs.size()));
  std::vector<std::vector<Req>> shares(parts);
  for (size_t i = 0; i < reqs.size(); ++i)
    shares[i * parts / reqs.size()].push_back(reqs[i]);
  std::vector<Failure> failures(parts);
  std::vector<int64_t> peaks(parts, 0);
  std::vector<std::thread> helpers;
  const auto busy_from = std::chrono::steady_clock::now();
  for (size_t i = 1; i < parts; ++i)
    helpers.emplace_back([&, i] { failures[i] = run_requests(*rings[i], op, shares[i], peaks[i]); });
  failures[0] = run_requests(*rings[0], op, shares[0], peaks[0]);
  for (std::thread &t : helpers) t.join();
  const int64_t busy = std::chrono::duration_cast<std::chrono::nanoseconds>(
                           std::chrono::steady_clock::now() - busy_from)
                           .count();
  Failure failure;
  for (Failure &f : failures)
    if (f && !failure) failure = std::move(f);
  if (!failure && injected_at >= 0)
    failure = {EIO, "at " + std::to_string(std::max(offset, injected_at))};
  if (failure && failure.err == EINVAL && op.direct && failure.message.rfind("at ", 0) == 0) {
    // Some file systems accept O_DIRECT when the file is opened and refuse
    // it at the first read or write: from now on, the page cache.
    notice(path + ": the file system refused O_DIRECT I/O (" + std::strerror(EINVAL) +
           "); its I/O goes through the page cache");
    ::close(dfd);
    dfd = -1;
    return run(name, offset, buffer, n, write);
  }
  {
    std::lock_guard<std::mutex> lock(mutex);
    stats.requests += static_cast<int64_t>(reqs.size());
    (write ? stats.write_busy_ns : stats.read_busy_ns) += busy;
    stats.bounced += op.bounced ? 1 : 0;
    for (const Req &r : reqs)
      stats.bounced_bytes += r.bounced ? r.len : 0;
    for (int64_t p : peaks) stats.max_in_flight = std::max(stats.max_in_flight, p);
  }
  if (failure.err != 0) {
    const std::string where = failure.message.rfind("at ", 0) == 0
                                  ? " failed at offset " + failure.message.substr(3)
                                  : " failed";
    fail_errno(name + ": " + (write ? "writing " : "reading ") + range(offset, n) + where,
               failure.err);
  }
  if (failure)
    throw Error(name + ": " + failure.message);
}

Request FileStore::Impl::issue(const char *what, Stream &stream, int64_t offset, void *buffer,
                               size_t bytes, bool write, std::shared_ptr<char> zeros) {
  const std::string name = std::string("dsrt::FileStore::") + what;
  if (write && !writable)
    throw Error(name + ": " + path + " was opened read-only");
  int64_t n = static_cast<int64_t>(bytes);
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (offset < 0 || n < 0 || offset > size || n > size - offset)
      throw Error(name + ": " + range(offset, n) + " lie outside the file's " +
                  std::to_string(size) + " bytes" +
                  (write ? " (preallocate() grows it)" : ""));
  }
  if (bytes > 0 && !buffer && !zeros)
    throw Error(name + ": " + range(offset, n) + ": the tensor has no memory");
  auto task = [this, name, offset, buffer, n, write, zeros](const std::string &dep_error) {
    if (!dep_error.empty())
      throw Error(name + ": " + range(offset, n) +
                  ": not run: an earlier operation on its stream failed: " + dep_error);
    auto run_range = [&](int64_t at) {
      if (!zeros) return run(name, at, static_cast<char *>(buffer), n, write);
      for (int64_t done = 0; done < n; done += kZeroChunk)
        run(name, at + done, zeros.get(), std::min<int64_t>(kZeroChunk, n - done), true);
    };
    if (!io.versioned) {
      run_range(offset);
    } else if (n > 0) {
      const int current = current_copy(name, offset, n, write);
      const int copy = write ? 1 - current : current;
      try {
        run_range(offset + copy * half);
      } catch (const Error &e) {
        throw Error(std::string(e.what()) + " (versioned bytes [" + std::to_string(offset) +
                    ", " + std::to_string(offset + n) + "), copy " + std::to_string(copy) +
                    " at byte " + std::to_string(offset + copy * half) +
                    (write ? "; their previous contents stay current)" : ")"));
      }
      if (write)
        versions[offset] = Version{n, copy};  // complete: now current
    }
    std::lock_guard<std::mutex> lock(mutex);
    if (write) {
      stats.writes += 1;
      stats.bytes_written += n;
    } else {
      stats.reads += 1;
      stats.bytes_read += n;
    }
  };
  Request request = worker->submit(&stream, std::move(task), true, wait_ns);
  std::lock_guard<std::mutex> lock(mutex);
  std::vector<CompletionPtr> kept;
  for (CompletionPtr &c : issued)
    if (!c->done() || (c->failed() && !c->reported))
      kept.push_back(std::move(c));
  kept.push_back(request.state());
  issued = std::move(kept);
  return request;
}

int FileStore::Impl::current_copy(const std::string &name, int64_t offset, int64_t n,
                                  bool write) const {
  auto next = versions.upper_bound(offset);
  auto clash = [&](int64_t at, int64_t bytes) {
    throw Error(name + ": " + range(offset, n) + " of a versioned store " +
                (write ? "must be a whole range written before or overlap none, and overlaps "
                       : "must lie inside one range written before, and overlaps ") +
                "bytes [" + std::to_string(at) + ", " + std::to_string(at + bytes) + ")");
  };
  if (next != versions.end() && next->first < offset + n)
    clash(next->first, next->second.bytes);
  if (next == versions.begin())
    return 0;
  const auto &[at, v] = *std::prev(next);
  if (at + v.bytes <= offset)
    return 0;  // ends before the range
  if (write ? (at != offset || v.bytes != n) : (offset + n > at + v.bytes))
    clash(at, v.bytes);
  return v.copy;
}

Request FileStore::read_async(Stream &stream, int64_t offset, void *dst, size_t bytes) {
  return checked(impl_, "read_async").issue("read_async", stream, offset, dst, bytes, false);
}

Request FileStore::write_async(Stream &stream, int64_t offset, const void *src, size_t bytes) {
  return checked(impl_, "write_async")
      .issue("write_async", stream, offset, const_cast<void *>(src), bytes, true);
}

Request FileStore::zero_async(Stream &stream, int64_t offset, size_t bytes) {
  std::shared_ptr<char> zeros(static_cast<char *>(std::aligned_alloc(kDirectAlignment, kZeroChunk)),
                              std::free);
  if (!zeros) throw Error("dsrt::FileStore::zero_async: out of memory");
  std::memset(zeros.get(), 0, kZeroChunk);
  return checked(impl_, "zero_async")
      .issue("zero_async", stream, offset, nullptr, bytes, true, std::move(zeros));
}

Request FileStore::read_async(Stream &stream, int64_t offset, const Tensor &dst) {
  return read_async(stream, offset, dst.data, dst.nbytes());
}

Request FileStore::write_async(Stream &stream, int64_t offset, const Tensor &src) {
  return write_async(stream, offset, src.data, src.nbytes());
}

void FileStore::preallocate(int64_t size) {
  Impl &impl = checked(impl_, "preallocate");
  if (!impl.writable)
    throw Error("dsrt::FileStore::preallocate: " + impl.path + " was opened read-only");
  if (size <= this->size())
    return;
  if (impl.io.versioned)
    throw Error("dsrt::FileStore::preallocate: " + impl.path + " is versioned and does not grow");
  Request r = impl.worker->submit(nullptr, [&impl, size](const std::string &) {
    const int64_t disk = std::max(impl.disk_size, align_up(size));
    int err = ::posix_fallocate(impl.fd, 0, disk);
    if (err != 0)
      fail_errno("dsrt::FileStore::preallocate: cannot allocate " + std::to_string(disk) +
                     " bytes for " + impl.path,
                 err);
    impl.disk_size = disk;  // only the I/O thread reads it
    std::lock_guard<std::mutex> lock(impl.mutex);
    impl.size = std::max(impl.size, size);
  });
  r.wait();
}

void FileStore::flush() {
  Impl &impl = checked(impl_, "flush");
  Request r = impl.worker->submit(nullptr, [&impl](const std::string &) {
    if (::fdatasync(impl.fd) != 0)
      fail_errno("dsrt::FileStore::flush: fdatasync of " + impl.path + " failed", errno);
    std::lock_guard<std::mutex> lock(impl.mutex);
    impl.stats.flushes += 1;
  });
  r.wait();
}

void FileStore::close() {
  if (!impl_)
    return;
  Impl &impl = *impl_;
  impl.worker->drain();
  std::string error;
  {
    std::lock_guard<std::mutex> lock(impl.mutex);
    for (const CompletionPtr &c : impl.issued)
      if (c->failed() && !c->reported.exchange(true) && error.empty())
        error = c->error();
    impl.issued.clear();
  }
  int fd = impl.fd;
  impl.fd = -1;
  if (fd >= 0 && ::close(fd) != 0 && error.empty())
    error = "dsrt::FileStore::close: closing " + impl.path + " failed: " + std::strerror(errno);
  impl_.reset();
  if (!error.empty())
    throw Error(error);
}

FileStoreStats FileStore::stats() const {
  if (!impl_)
    return {};
  std::lock_guard<std::mutex> lock(impl_->mutex);
  FileStoreStats stats = impl_->stats;
  stats.wait_ns = impl_->wait_ns->load();
  return stats;
}

void check_room(const std::string &dir, int64_t needed, const std::string &what) {
  struct statvfs fs;
  if (::statvfs(dir.c_str(), &fs) != 0)
    fail_errno(what + ": cannot query the free space of '" + dir + "'", errno);
  int64_t free_bytes = static_cast<int64_t>(fs.f_bavail) * static_cast<int64_t>(fs.f_frsize);
  if (const char *cap = std::getenv("DSRT_TEST_FREE_BYTES"))
    free_bytes = std::min<int64_t>(free_bytes, std::strtoll(cap, nullptr, 10));
  if (free_bytes < needed)
    throw Error(what + " needs " + std::to_string(needed) + " bytes in '" + dir +
                "', whose file system has " + std::to_string(free_bytes) + " bytes free");
}

void make_directories(const std::string &path, const std::string &what) {
  if (path.empty())
    throw Error(what + ": an empty path is not a directory");
  // Each prefix ending before a '/', then the whole path.
  for (size_t end = path.find('/', 1);; end = path.find('/', end + 1)) {
    const std::string prefix = end == std::string::npos ? path : path.substr(0, end);
    struct stat st;
    if (!prefix.empty() && prefix.back() != '/') {
      if (stat(prefix.c_str(), &st) == 0) {
        if (!S_ISDIR(st.st_mode))
          throw Error(what + " '" + path + "': '" + prefix + "' exists and is not a directory");
      } else if (mkdir(prefix.c_str(), 0777) != 0 && errno != EEXIST) {
        throw Error(what + " '" + path + "': cannot create '" + prefix + "': " +
                    std::strerror(errno));
      }
    }
    if (end == std::string::npos)
      break;
  }
}

}  // namespace dsrt

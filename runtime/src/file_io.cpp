// FileStore: pread/pwrite on one I/O thread per store, in issue order.
#include "dsrt/file_io.h"

#include "async.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace dsrt {

using detail::CompletionPtr;

struct FileStore::Impl {
  std::string path;
  int fd = -1;
  bool writable = false;
  std::mutex mutex;  // guards size, stats, issued
  int64_t size = 0;
  FileStoreStats stats;
  // Operations whose failure nobody may have seen yet, for close().
  std::vector<CompletionPtr> issued;
  std::unique_ptr<detail::Worker> worker = std::make_unique<detail::Worker>();

  ~Impl() {
    worker.reset();  // runs what is queued
    if (fd >= 0)
      ::close(fd);
  }

  std::string range(int64_t offset, int64_t bytes) const {
    return "bytes [" + std::to_string(offset) + ", " + std::to_string(offset + bytes) + ") of " +
           path;
  }

  int64_t file_end() const {
    struct stat st;
    return ::fstat(fd, &st) == 0 ? static_cast<int64_t>(st.st_size) : -1;
  }

  Request issue(const char *what, Stream &stream, int64_t offset, void *buffer, size_t bytes,
                bool write);
};

namespace {

[[noreturn]] void fail_errno(const std::string &what, int err) {
  throw Error(what + ": " + std::strerror(err));
}

FileStore::Impl &checked(const std::unique_ptr<FileStore::Impl> &impl, const char *what) {
  if (!impl || impl->fd < 0)
    throw Error(std::string("dsrt::FileStore::") + what + ": the store has no open file");
  return *impl;
}

}  // namespace

FileStore::FileStore(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
FileStore::FileStore() = default;
FileStore::FileStore(FileStore &&) noexcept = default;
FileStore &FileStore::operator=(FileStore &&) noexcept = default;
FileStore::~FileStore() = default;

FileStore FileStore::create(const std::string &path, int64_t size) {
  if (size < 0)
    throw Error("dsrt::FileStore::create: size " + std::to_string(size) + " of " + path +
                " must be >= 0");
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    fail_errno("dsrt::FileStore::create: cannot create " + path, errno);
  if (size > 0) {
    int err = ::posix_fallocate(fd, 0, size);  // returns the error, errno is not set
    if (err != 0) {
      ::close(fd);
      fail_errno("dsrt::FileStore::create: cannot allocate " + std::to_string(size) +
                     " bytes for " + path,
                 err);
    }
  }
  auto impl = std::make_unique<Impl>();
  impl->path = path;
  impl->fd = fd;
  impl->writable = true;
  impl->size = size;
  return FileStore(std::move(impl));
}

FileStore FileStore::open(const std::string &path, bool writable) {
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

Request FileStore::Impl::issue(const char *what, Stream &stream, int64_t offset, void *buffer,
                               size_t bytes, bool write) {
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
  if (bytes > 0 && !buffer)
    throw Error(name + ": " + range(offset, n) + ": the tensor has no memory");
  auto task = [this, name, offset, buffer, n, write](const std::string &dep_error) {
    if (!dep_error.empty())
      throw Error(name + ": " + range(offset, n) +
                  ": not run: an earlier operation on its stream failed: " + dep_error);
    char *p = static_cast<char *>(buffer);
    int64_t done = 0;
    while (done < n) {
      size_t chunk = static_cast<size_t>(std::min<int64_t>(n - done, int64_t(1) << 30));
      ssize_t got = write ? ::pwrite(fd, p + done, chunk, offset + done)
                          : ::pread(fd, p + done, chunk, offset + done);
      if (got < 0) {
        if (errno == EINTR)
          continue;
        fail_errno(name + ": " + (write ? "writing " : "reading ") + range(offset, n) +
                       " failed at offset " + std::to_string(offset + done),
                   errno);
      }
      if (got == 0) {
        // pwrite of a non-empty range does not return 0 for regular files;
        // pread does at the end of the file.
        throw Error(name + ": short " + (write ? "write" : "read") + " of " +
                    range(offset, n) + ": " + std::to_string(done) + " of " +
                    std::to_string(n) + " bytes transferred; the file ends at byte " +
                    std::to_string(file_end()) + " (truncated by another process?)");
      }
      done += got;
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
  Request request = worker->submit(&stream, std::move(task));
  std::lock_guard<std::mutex> lock(mutex);
  std::vector<CompletionPtr> kept;
  for (CompletionPtr &c : issued)
    if (!c->done() || (c->failed() && !c->reported))
      kept.push_back(std::move(c));
  kept.push_back(request.state());
  issued = std::move(kept);
  return request;
}

Request FileStore::read_async(Stream &stream, int64_t offset, void *dst, size_t bytes) {
  return checked(impl_, "read_async").issue("read_async", stream, offset, dst, bytes, false);
}

Request FileStore::write_async(Stream &stream, int64_t offset, const void *src, size_t bytes) {
  return checked(impl_, "write_async")
      .issue("write_async", stream, offset, const_cast<void *>(src), bytes, true);
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
  Request r = impl.worker->submit(nullptr, [&impl, size](const std::string &) {
    int err = ::posix_fallocate(impl.fd, 0, size);
    if (err != 0)
      fail_errno("dsrt::FileStore::preallocate: cannot allocate " + std::to_string(size) +
                     " bytes for " + impl.path,
                 err);
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
  return impl_->stats;
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

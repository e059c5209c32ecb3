// dsrt: asynchronous file I/O for offloading tensors to NVMe.
//
// A FileStore is one file holding offloaded tensors at planned byte offsets
// (optimizer state, parameters, activations that do not fit in memory).
// Reads and writes are queued on the store's I/O thread, run in the order
// they were issued (so a read after a write of the same range sees the
// write), and return a Request; they are also ordered on the stream they are
// issued on, like collectives. The file's size is fixed by create() or
// preallocate(): a range outside it is an error when issued, never a silent
// extension or a short read.
//
// The I/O engine (FileIOOptions, DeepSpeed's `aio` block): each operation
// is cut into requests of `block_size` bytes, up to `queue_depth` of them in
// flight on an io_uring, with O_DIRECT (no page cache) where the file system
// allows it. Direct I/O moves whole aligned blocks: an operation whose
// buffer, offset or length is not aligned to kDirectAlignment goes through
// aligned bounce buffers (the edge blocks of a write are read first), and
// the file's size on disk is rounded up to kDirectAlignment. Where the file
// system refuses O_DIRECT, or the kernel refuses io_uring (seccomp, an old
// kernel), the store says so once on stderr and falls back to the page
// cache, or to pread/pwrite on its thread.
//
// Every failure is a dsrt::Error naming the file, and for reads and writes
// the byte range: a missing file, a short read (the file was truncated
// behind the store's back), an I/O error (with the system's message).
#ifndef DSRT_FILE_IO_H
#define DSRT_FILE_IO_H

#include "dsrt/stream.h"
#include "dsrt/tensor.h"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace dsrt {

// Makes `path` a directory, creating it and any missing parents (as
// `mkdir -p`); `what` names it in the dsrt::Error thrown when a component
// exists and is not a directory or cannot be created (with the system's
// message).
void make_directories(const std::string &path, const std::string &what);

// Direct I/O's alignment of buffers, offsets and lengths (the largest
// logical block size of common devices).
constexpr int64_t kDirectAlignment = 4096;

// The `aio` block of the DeepSpeed configuration, as the engine uses it.
struct FileIOOptions {
  // Bytes per request: an operation is cut into requests of this size (a
  // positive multiple of kDirectAlignment).
  int64_t block_size = 1 << 20;
  // Requests in flight at once per ring (the io_uring's size).
  int queue_depth = 8;
  // Rings, each on its own thread, that one operation is split across.
  int intra_op_parallelism = 1;
  // Submit each request with its own system call, rather than all that are
  // ready with one.
  bool single_submit = false;
  // Submit a new request as soon as one completes, keeping the queue full;
  // false: submit queue_depth requests, wait for all of them, repeat.
  bool overlap_events = true;
  // Try O_DIRECT and io_uring (false: the page cache, pread/pwrite).
  bool direct = true;
  bool uring = true;
  // Never a half-written range: the file holds two copies of every byte; a
  // write goes to the copy its range is not current in, and becomes current
  // only once all of it is written, so a write that fails leaves the
  // range's previous contents current. A read reads the current copy. Writes
  // must then cover whole ranges written before (or none), and reads lie
  // inside one; the store does not grow (preallocate).
  bool versioned = false;
};

// Throws a dsrt::Error naming `what` when `options` are out of range.
void check_file_io_options(const FileIOOptions &options, const std::string &what);

struct FileStoreStats {
  int64_t reads = 0, writes = 0;  // completed operations
  int64_t bytes_read = 0, bytes_written = 0;
  int64_t flushes = 0;
  // Requests the engine submitted (each at most block_size bytes), and the
  // most it had in flight at once on one ring.
  int64_t requests = 0, max_in_flight = 0;
  // Operations that went through bounce buffers (not aligned for O_DIRECT),
  // and the bytes of their blocks that did: an operation whose buffer and
  // offset are aligned bounces only its last block, when its length ends
  // inside one.
  int64_t bounced = 0, bounced_bytes = 0;
  // The time the engine had requests in flight: the operations run one
  // after another on the store's I/O thread, and each counts from its first
  // submit to its last completion, so the sum is the union of the busy
  // intervals (bytes_read / read_busy_ns is the engine's read throughput,
  // bytes_written / write_busy_ns its write throughput).
  int64_t read_busy_ns = 0, write_busy_ns = 0;
  // The time other threads (the program's) spent blocked waiting for the
  // store's operations to complete: the I/O that compute did not hide.
  int64_t wait_ns = 0;
};

// The bytes a store of `size` bytes takes on disk with `io`.
int64_t file_bytes_on_disk(int64_t size, const FileIOOptions &io);

// Fails with a dsrt::Error naming `dir`, `needed` and the bytes free when the
// file system holding `dir` has fewer than `needed` bytes available to this
// user (statvfs's f_bavail). `what` says what needs them. The environment
// variable DSRT_TEST_FREE_BYTES, when set, caps the bytes free (tests).
void check_room(const std::string &dir, int64_t needed, const std::string &what);

class FileStore {
public:
  // Creates `path` (replacing an existing file) with `size` bytes allocated
  // on disk, so that writes inside it cannot fail for lack of space.
  static FileStore create(const std::string &path, int64_t size,
                          const FileIOOptions &io = FileIOOptions());
  // Opens an existing file; the store's size is the file's.
  static FileStore open(const std::string &path, bool writable = true,
                        const FileIOOptions &io = FileIOOptions());

  FileStore();  // no file; every operation throws
  FileStore(FileStore &&) noexcept;
  FileStore &operator=(FileStore &&) noexcept;
  // Waits for queued I/O and closes the file. An error nobody has waited for
  // is lost here: call close() to see it.
  ~FileStore();

  const std::string &path() const;
  int64_t size() const;
  bool writable() const;
  // How the store moves bytes: "io_uring, O_DIRECT", "io_uring, page cache",
  // "pread/pwrite, O_DIRECT" or "pread/pwrite, page cache".
  std::string engine() const;

  // Grows the file to at least `size` bytes allocated on disk (after the I/O
  // queued so far); blocks.
  void preallocate(int64_t size);

  // Reads dst.nbytes() bytes at `offset` of the file into `dst`.
  Request read_async(Stream &stream, int64_t offset, const Tensor &dst);
  // Writes src.nbytes() bytes of `src` at `offset` of the file.
  Request write_async(Stream &stream, int64_t offset, const Tensor &src);
  // The same for raw byte ranges.
  Request read_async(Stream &stream, int64_t offset, void *dst, size_t bytes);
  Request write_async(Stream &stream, int64_t offset, const void *src, size_t bytes);
  // Writes `bytes` zero bytes at `offset`: one write of the whole range (in
  // a versioned store, one range that later writes may replace whole),
  // made from a small buffer piece by piece.
  Request zero_async(Stream &stream, int64_t offset, size_t bytes);

  // Blocks until the writes issued so far are on stable storage (fdatasync).
  void flush();
  // Waits for queued I/O, then closes; throws the first error of queued
  // operations nobody waited for, or of closing.
  void close();

  FileStoreStats stats() const;

  struct Impl;

private:
  explicit FileStore(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace dsrt

#endif  // DSRT_FILE_IO_H

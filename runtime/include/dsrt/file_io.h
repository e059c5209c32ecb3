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

struct FileStoreStats {
  int64_t reads = 0, writes = 0;  // completed operations
  int64_t bytes_read = 0, bytes_written = 0;
  int64_t flushes = 0;
};

class FileStore {
public:
  // Creates `path` (replacing an existing file) with `size` bytes allocated
  // on disk, so that writes inside it cannot fail for lack of space.
  static FileStore create(const std::string &path, int64_t size);
  // Opens an existing file; the store's size is the file's.
  static FileStore open(const std::string &path, bool writable = true);

  FileStore();  // no file; every operation throws
  FileStore(FileStore &&) noexcept;
  FileStore &operator=(FileStore &&) noexcept;
  // Waits for queued I/O and closes the file. An error nobody has waited for
  // is lost here: call close() to see it.
  ~FileStore();

  const std::string &path() const;
  int64_t size() const;
  bool writable() const;

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

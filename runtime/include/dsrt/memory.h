// dsrt: memory kinds, arenas and copies between them.
//
// A program's tensors live in arenas planned at compile time: device memory
// for what kernels touch, pinned host memory for what is offloaded and copied
// back asynchronously, plain host memory for the rest. On the cpu backend all
// three are host memory (device and pinned host are not page-locked); the
// kinds still matter for accounting, for limits that emulate a device's
// capacity, and for code that must also run on the cuda backend, where
// copy_async between kinds is cudaMemcpyAsync.
#ifndef DSRT_MEMORY_H
#define DSRT_MEMORY_H

#include "dsrt/stream.h"
#include "dsrt/tensor.h"

#include <cstddef>
#include <cstdint>

namespace dsrt {

enum class MemoryKind : uint8_t { Device = 0, PinnedHost = 1, Host = 2 };
constexpr int kNumMemoryKinds = 3;
const char *memory_kind_name(MemoryKind kind);  // "device", "pinned host", "host"

// Every arena starts on a 64-byte boundary (a cache line, an AVX-512 vector;
// the memory plan's offsets are multiples of its alignment).
constexpr size_t kArenaAlignment = 64;

// One block of memory of one kind, owned, uninitialized. Move-only.
class Arena {
public:
  Arena() = default;
  // Throws dsrt::Error (naming the kind and size) when the memory cannot be
  // allocated or the kind's limit would be exceeded. `alignment` is a power
  // of two >= 64 (4096 for page-aligned buffers).
  Arena(MemoryKind kind, size_t bytes, size_t alignment = kArenaAlignment);
  ~Arena();
  Arena(Arena &&other) noexcept;
  Arena &operator=(Arena &&other) noexcept;
  Arena(const Arena &) = delete;
  Arena &operator=(const Arena &) = delete;

  MemoryKind kind() const { return kind_; }
  size_t size() const { return size_; }
  uint8_t *data() const { return data_; }
  // A view of `dtype`/`shape` at byte `offset`; throws unless it lies inside
  // the arena.
  Tensor view(int64_t offset, DType dtype, Shape shape) const;

private:
  void release();
  MemoryKind kind_ = MemoryKind::Host;
  size_t size_ = 0;
  uint8_t *data_ = nullptr;
};

struct MemoryUsage {
  int64_t bytes = 0;       // held by live arenas of the kind
  int64_t peak_bytes = 0;  // highest `bytes` so far
  int64_t arenas = 0;      // live arenas of the kind
  int64_t limit = 0;       // 0: none
};
MemoryUsage memory_usage(MemoryKind kind);
// Caps the bytes that arenas of `kind` may hold together (0 removes the cap),
// so that a cpu run fails where the planned device memory would not fit.
void set_memory_limit(MemoryKind kind, int64_t bytes);

// The kind of the arena holding `p`; Host for memory no arena holds.
MemoryKind memory_kind_of(const void *p);

// Copies `bytes` from `src` to `dst`, ordered on `stream` after the work
// enqueued before it. The source must not change, and the destination must
// not be read, before the stream reaches the copy (Event, Request::wait,
// Stream::synchronize): on the cuda backend the copy runs later. On the cpu
// backend it runs now, after the stream's pending work. A range that starts
// in an arena must end in it; the ranges must not overlap.
void copy_async(Stream &stream, void *dst, const void *src, size_t bytes);
// The same for tensors of equal element type and element count.
void copy_async(Stream &stream, const Tensor &dst, const Tensor &src);

// Bytes copied by copy_async from memory of kind `from` to kind `to`.
int64_t copied_bytes(MemoryKind from, MemoryKind to);
void reset_copied_bytes();

}  // namespace dsrt

#endif  // DSRT_MEMORY_H

// Arenas and copies, backend-neutral: the memory comes from the backend
// (backend.h); a registry of live arenas gives the kind of a pointer (for
// copy accounting and bounds checks), and per-kind usage enforces limits.
#include "dsrt/memory.h"

#include "dsrt/backend.h"
#include "async.h"

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <utility>

namespace dsrt {

namespace {

struct Registry {
  std::mutex mutex;
  // begin address -> (end address, kind) of every live arena with memory.
  std::map<uintptr_t, std::pair<uintptr_t, MemoryKind>> arenas;
  MemoryUsage usage[kNumMemoryKinds];
  int64_t copied[kNumMemoryKinds][kNumMemoryKinds] = {};
};

Registry &registry() {
  static Registry *r = new Registry;  // never destroyed: arenas may outlive statics
  return *r;
}

int index(MemoryKind kind) { return static_cast<int>(kind); }

std::string format_bytes(int64_t bytes) {
  const char *units[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 6) {
    v /= 1024;
    ++u;
  }
  if (u == 0)
    return std::to_string(bytes) + " bytes";
  char text[64];
  std::snprintf(text, sizeof text, "%lld bytes (%.1f %s)", static_cast<long long>(bytes), v,
                units[u]);
  return text;
}

// The arena containing [p, p + bytes) if p lies in one; throws if the range
// starts in an arena and leaves it.
bool find_arena(const char *what, const char *name, const void *p, size_t bytes,
                MemoryKind &kind) {
  Registry &r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  uintptr_t a = reinterpret_cast<uintptr_t>(p);
  auto it = r.arenas.upper_bound(a);
  if (it == r.arenas.begin())
    return false;
  --it;
  if (a >= it->second.first)
    return false;
  kind = it->second.second;
  if (bytes > it->second.first - a)
    throw Error(std::string("dsrt::") + what + ": " + std::to_string(bytes) + " bytes at " +
                name + " run past the end of its " + memory_kind_name(kind) + " arena (" +
                std::to_string(it->second.first - a) + " bytes left after " + name + ")");
  return true;
}

}  // namespace

const char *memory_kind_name(MemoryKind kind) {
  switch (kind) {
  case MemoryKind::Device: return "device";
  case MemoryKind::PinnedHost: return "pinned host";
  case MemoryKind::Host: return "host";
  }
  return "unknown";
}

Arena::Arena(MemoryKind kind, size_t bytes, size_t alignment) : kind_(kind) {
  if (index(kind) < 0 || index(kind) >= kNumMemoryKinds)
    throw Error("dsrt::Arena: unknown memory kind " + std::to_string(index(kind)));
  if (alignment < kArenaAlignment || (alignment & (alignment - 1)) != 0)
    throw Error("dsrt::Arena: alignment " + std::to_string(alignment) +
                " must be a power of two >= " + std::to_string(kArenaAlignment));
  if (bytes == 0)
    return;
  const std::string what = std::string("dsrt::Arena: cannot allocate ") +
                           format_bytes(static_cast<int64_t>(std::min<size_t>(bytes, INT64_MAX))) +
                           " of " + memory_kind_name(kind) + " memory";
  if (bytes > static_cast<size_t>(INT64_MAX) - alignment)
    throw Error(what + ": the size is out of range");
  Registry &r = registry();
  {
    std::lock_guard<std::mutex> lock(r.mutex);
    MemoryUsage &u = r.usage[index(kind)];
    if (u.limit > 0 && u.bytes + static_cast<int64_t>(bytes) > u.limit)
      throw Error(what + ": " + format_bytes(u.bytes) + " of the " + format_bytes(u.limit) +
                  " limit are already held by " + std::to_string(u.arenas) + " arena(s)");
    // Reserve before allocating so that concurrent allocations respect the limit.
    u.bytes += static_cast<int64_t>(bytes);
    u.arenas += 1;
  }
  errno = 0;
  void *p = backend().allocate(kind, bytes, alignment);
  if (!p) {
    int err = errno;
    std::lock_guard<std::mutex> lock(r.mutex);
    MemoryUsage &u = r.usage[index(kind)];
    u.bytes -= static_cast<int64_t>(bytes);
    u.arenas -= 1;
    throw Error(what + " (" + std::to_string(alignment) + "-byte aligned): " +
                (err ? std::strerror(err) : "out of memory"));
  }
  data_ = static_cast<uint8_t *>(p);
  size_ = bytes;
  std::lock_guard<std::mutex> lock(r.mutex);
  MemoryUsage &u = r.usage[index(kind)];
  u.peak_bytes = std::max(u.peak_bytes, u.bytes);
  uintptr_t begin = reinterpret_cast<uintptr_t>(data_);
  r.arenas[begin] = {begin + size_, kind};
}

void Arena::release() {
  if (!data_)
    return;
  Registry &r = registry();
  {
    std::lock_guard<std::mutex> lock(r.mutex);
    r.arenas.erase(reinterpret_cast<uintptr_t>(data_));
    MemoryUsage &u = r.usage[index(kind_)];
    u.bytes -= static_cast<int64_t>(size_);
    u.arenas -= 1;
  }
  backend().deallocate(kind_, data_);
  data_ = nullptr;
  size_ = 0;
}

Arena::~Arena() { release(); }

Arena::Arena(Arena &&other) noexcept
    : kind_(other.kind_), size_(other.size_), data_(other.data_) {
  other.data_ = nullptr;
  other.size_ = 0;
}

Arena &Arena::operator=(Arena &&other) noexcept {
  if (this != &other) {
    release();
    kind_ = other.kind_;
    size_ = other.size_;
    data_ = other.data_;
    other.data_ = nullptr;
    other.size_ = 0;
  }
  return *this;
}

Tensor Arena::view(int64_t offset, DType dtype, Shape shape) const {
  Tensor t{nullptr, dtype, shape};
  int64_t bytes = static_cast<int64_t>(t.nbytes());
  if (offset < 0 || bytes < 0 || offset > static_cast<int64_t>(size_) ||
      bytes > static_cast<int64_t>(size_) - offset)
    throw Error("dsrt::Arena::view: " + std::string(dtype_name(dtype)) + shape.str() + " (" +
                std::to_string(bytes) + " bytes) at offset " + std::to_string(offset) +
                " does not fit in the " + memory_kind_name(kind_) + " arena of " +
                std::to_string(size_) + " bytes");
  t.data = bytes == 0 && !data_ ? nullptr : data_ + offset;
  return t;
}

MemoryUsage memory_usage(MemoryKind kind) {
  Registry &r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  return r.usage[index(kind)];
}

void set_memory_limit(MemoryKind kind, int64_t bytes) {
  if (bytes < 0)
    throw Error("dsrt::set_memory_limit: limit " + std::to_string(bytes) + " must be >= 0");
  Registry &r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.usage[index(kind)].limit = bytes;
}

MemoryKind memory_kind_of(const void *p) {
  MemoryKind kind = MemoryKind::Host;
  find_arena("memory_kind_of", "p", p, 0, kind);
  return kind;
}

void copy_async(Stream &stream, void *dst, const void *src, size_t bytes) {
  // Runs after the stream's pending host work, as a kernel does; the
  // backend queues it after the stream's device work.
  detail::wait_host_work(stream);
  if (bytes == 0)
    return;
  if (!dst || !src)
    throw Error(std::string("dsrt::copy_async: ") + std::to_string(bytes) + " bytes " +
                (!dst ? "to a null destination" : "from a null source"));
  MemoryKind from = MemoryKind::Host, to = MemoryKind::Host;
  find_arena("copy_async", "src", src, bytes, from);
  find_arena("copy_async", "dst", dst, bytes, to);
  uintptr_t d = reinterpret_cast<uintptr_t>(dst), s = reinterpret_cast<uintptr_t>(src);
  if (d < s + bytes && s < d + bytes)
    throw Error("dsrt::copy_async: source and destination of " + std::to_string(bytes) +
                " bytes overlap");
  backend(stream).copy(stream, dst, src, bytes);
  Registry &r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.copied[index(from)][index(to)] += static_cast<int64_t>(bytes);
}

void copy_async(Stream &stream, const Tensor &dst, const Tensor &src) {
  if (dst.dtype != src.dtype || dst.numel() != src.numel())
    throw Error(std::string("dsrt::copy_async: destination ") + dtype_name(dst.dtype) +
                dst.shape.str() + " and source " + dtype_name(src.dtype) + src.shape.str() +
                " differ in element type or count");
  copy_async(stream, dst.data, src.data, src.nbytes());
}

int64_t copied_bytes(MemoryKind from, MemoryKind to) {
  Registry &r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  return r.copied[index(from)][index(to)];
}

void reset_copied_bytes() {
  Registry &r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  for (auto &row : r.copied)
    for (int64_t &v : row)
      v = 0;
}

}  // namespace dsrt

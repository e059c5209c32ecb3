// Backend-neutral helpers over the backend interface: how runtime code that
// must not touch arena memory reads and writes single values, and host
// copies through pinned staging buffers (staging.h).
#include "dsrt/backend.h"

#include "async.h"
#include "runner.h"
#include "staging.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace dsrt {
namespace detail {

bool stages_host_copies(const BackendInterface &b) { return b.kind() != Backend::Cpu; }

void copy_host_bytes(void *dst, const void *src, size_t bytes) {
  if (bytes > 0 && dst != src) std::memmove(dst, src, bytes);
}

PinnedStaging::~PinnedStaging() {
  for (size_t i = 0; i < buffers_.size(); ++i)
    if (buffers_[i]) {
      if (used_[i]) backend_.synchronize(used_[i]);
      backend_.deallocate(MemoryKind::PinnedHost, buffers_[i]);
    }
}

void *PinnedStaging::host_buffer(size_t i) {
  // Both at once: which one a copy takes depends on what the copies before
  // it left, and a training step allocates nothing after the first.
  for (size_t j = 0; j < buffers_.size(); ++j) {
    if (buffers_[j]) continue;
    buffers_[j] = backend_.allocate(MemoryKind::PinnedHost, chunk_, kArenaAlignment);
    if (!buffers_[j])
      throw Error("dsrt: cannot allocate " + std::to_string(chunk_) + " bytes of pinned host "
                  "memory to stage host copies through (" + backend_.name() + " backend)");
  }
  // Its last device copy must be done before the host touches it again.
  if (used_[i]) {
    backend_.synchronize(used_[i]);
    done(i);
  }
  return buffers_[i];
}

namespace {
// Whether two weak references name the same stream state (or both none);
// a stream destroyed since keeps its control block, so no later stream
// compares equal to it.
bool same_owner(const std::weak_ptr<StreamState> &a, const std::weak_ptr<StreamState> &b) {
  return !a.owner_before(b) && !b.owner_before(a);
}
bool same_stream(const std::weak_ptr<StreamState> &a, Stream &stream) {
  return same_owner(a, std::weak_ptr<StreamState>(stream.state()));
}
}  // namespace

void *PinnedStaging::device_buffer(Stream &stream, size_t i) {
  if (!buffers_[i]) return host_buffer(i);
  if (used_[i] && !same_stream(used_on_[i], stream)) backend_.wait(stream, used_[i]);
  return buffers_[i];
}

void PinnedStaging::used(Stream &stream, size_t i) {
  used_[i] = backend_.record(stream);
  used_on_[i] = stream.state();
  used_seq_[i] = ++seq_;
}

void PinnedStaging::done(size_t i) {
  for (size_t j = 0; j < used_.size(); ++j)
    if (j != i && used_[j] && same_owner(used_on_[j], used_on_[i]) && used_seq_[j] < used_seq_[i]) {
      used_[j].reset();
      filled_[j] = 0;
    }
  used_[i].reset();
  filled_[i] = 0;
}

size_t PinnedStaging::free_offset(Stream &stream, size_t i, size_t bytes) const {
  if (!used_[i]) return 0;
  // The buffer's last event stands for all its pending copies only when
  // they ran on one stream, the writer's.
  if (!same_stream(used_on_[i], stream)) return static_cast<size_t>(-1);
  const size_t at = (filled_[i] + kArenaAlignment - 1) / kArenaAlignment * kArenaAlignment;
  return at <= chunk_ && bytes <= chunk_ - at ? at : static_cast<size_t>(-1);
}

void PinnedStaging::read(Stream &stream, void *host, const void *src, size_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto *out = static_cast<uint8_t *>(host);
  const auto *in = static_cast<const uint8_t *>(src);
  // A chunk copied to pinned memory, waiting to be copied out by the host.
  struct Piece {
    size_t slot, at, bytes;
  };
  // The one host wait per chunk: its bytes must be in pinned memory.
  auto copy_out = [&](const Piece &p) {
    backend_.synchronize(used_[p.slot]);
    done(p.slot);
    std::memcpy(out + p.at, buffers_[p.slot], p.bytes);
  };
  // Chunk i + 1's device copy runs while the host copies chunk i out.
  std::optional<Piece> previous;
  for (size_t at = 0; at < bytes; next_ = 1 - next_) {
    const Piece piece{next_, at, std::min(chunk_, bytes - at)};
    backend_.copy(stream, device_buffer(stream, piece.slot), in + at, piece.bytes);
    used(stream, piece.slot);
    filled_[piece.slot] = std::max(filled_[piece.slot], piece.bytes);
    if (previous) copy_out(*previous);
    previous = piece;
    at += piece.bytes;
  }
  if (previous) copy_out(*previous);
}

void PinnedStaging::write(Stream &stream, void *dst, const void *host, size_t bytes,
                          bool synchronous) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto *out = static_cast<uint8_t *>(dst);
  const auto *in = static_cast<const uint8_t *>(host);
  // A chunk goes after the pending copies of the current buffer, else of
  // the other one, else the other one waits for its copies (host_buffer).
  constexpr size_t kNone = static_cast<size_t>(-1);
  for (size_t at = 0; at < bytes;) {
    const size_t n = std::min(chunk_, bytes - at);
    size_t offset = free_offset(stream, next_, n);
    if (offset == kNone) {
      next_ = 1 - next_;
      offset = free_offset(stream, next_, n);
    }
    const size_t slot = next_;
    if (offset == kNone || !buffers_[slot]) {
      host_buffer(slot);  // allocates it, or waits for its pending copies
      offset = 0;
    }
    uint8_t *pinned = static_cast<uint8_t *>(buffers_[slot]) + offset;
    std::memcpy(pinned, in + at, n);
    backend_.copy(stream, out + at, pinned, n);
    used(stream, slot);
    filled_[slot] = offset + n;
    if (synchronous) {
      backend_.synchronize(used_[slot]);
      done(slot);
    }
    at += n;
  }
}

PinnedStaging &staging_buffers() {
  // Never destroyed: streams and the backend may outlive statics.
  static PinnedStaging *staging = new PinnedStaging(backend(), kStagingChunkBytes);
  return *staging;
}

PinnedStaging &transfer_staging_buffers() {
  static PinnedStaging *staging = new PinnedStaging(backend(), kStagingChunkBytes);
  return *staging;
}

}  // namespace detail

// The default timing marks: the host clock when recorded, or, recorded
// after a stream's pending host work (a transfer on a transport's thread),
// when the last of that work finished, whichever is later: the host does
// not wait for it here, so the stream's host work overlaps what the host
// queues next, as a device stream's would.
namespace {
struct HostMark {
  double us = 0;
  bool recorded = false;
  std::vector<detail::CompletionPtr> after;
};
}  // namespace

DeviceEvent BackendInterface::timing_mark() { return std::make_shared<HostMark>(); }

void BackendInterface::record_timing(Stream &stream, const DeviceEvent &mark,
                                     bool after_host_work) {
  HostMark &m = *static_cast<HostMark *>(mark.get());
  m.us = runner::now_us();
  m.after = after_host_work ? detail::pending_work(stream) : std::vector<detail::CompletionPtr>{};
  m.recorded = true;
}

double BackendInterface::elapsed_us(const DeviceEvent &from, const DeviceEvent &to) {
  HostMark *a = static_cast<HostMark *>(from.get());
  HostMark *b = static_cast<HostMark *>(to.get());
  if (!a || !b || !a->recorded || !b->recorded)
    throw Error(std::string("dsrt: ") + name() + " backend: elapsed time of a timing mark "
                "that was never recorded");
  // Read after a host wait that covers the marks: their host work is done
  // (waited for here all the same; a failure was reported by that wait).
  for (HostMark *m : {a, b}) {
    for (const detail::CompletionPtr &work : m->after) {
      work->wait();
      m->us = std::max(m->us, work->finished_us());
    }
    m->after.clear();
  }
  return b->us - a->us;
}

void read_to_host(Stream &stream, void *host, const Tensor &src) {
  BackendInterface &b = backend(stream);
  if (detail::stages_host_copies(b) && src.nbytes() > 0) {
    detail::staging_buffers().read(stream, host, src.data, src.nbytes());
    detail::wait_host_work(stream);
    return;
  }
  b.copy(stream, host, src.data, src.nbytes());
  stream.synchronize();
}

void write_from_host(Stream &stream, void *dst, const void *host, size_t bytes) {
  BackendInterface &b = backend(stream);
  if (detail::stages_host_copies(b) && bytes > 0) {
    detail::staging_buffers().write(stream, dst, host, bytes);
    return;
  }
  b.copy(stream, dst, host, bytes);
}

double read_scalar(Stream &stream, const Tensor &src) {
  if (src.numel() < 1)
    throw Error(std::string("dsrt::read_scalar: ") + dtype_name(src.dtype) + src.shape.str() +
                " has no element");
  alignas(8) uint8_t bytes[8] = {};
  const Tensor first{src.data, src.dtype, Shape{}};
  read_to_host(stream, bytes, first);
  const Tensor host{bytes, src.dtype, Shape{}};
  return is_float(src.dtype) ? static_cast<double>(load_float(host, 0))
                             : static_cast<double>(load_int(host, 0));
}

void write_scalar(Stream &stream, const Tensor &dst, double value) {
  if (dst.numel() != 1)
    throw Error(std::string("dsrt::write_scalar: ") + dtype_name(dst.dtype) + dst.shape.str() +
                " is not a single value");
  fill_async(stream, dst, value);
}

}  // namespace dsrt

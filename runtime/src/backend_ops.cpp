// Backend-neutral helpers over the backend interface: how runtime code that
// must not touch arena memory reads and writes single values, and host
// copies through pinned staging buffers (staging.h).
#include "dsrt/backend.h"

#include "async.h"
#include "staging.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>

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

void *PinnedStaging::buffer(size_t i) {
  if (!buffers_[i]) {
    buffers_[i] = backend_.allocate(MemoryKind::PinnedHost, chunk_, kArenaAlignment);
    if (!buffers_[i])
      throw Error("dsrt: cannot allocate " + std::to_string(chunk_) + " bytes of pinned host "
                  "memory to stage host copies through (" + backend_.name() + " backend)");
  }
  // Its last device copy must be done before the host touches it again.
  if (used_[i]) {
    backend_.synchronize(used_[i]);
    used_[i].reset();
  }
  return buffers_[i];
}

void PinnedStaging::read(Stream &stream, void *host, const void *src, size_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto *out = static_cast<uint8_t *>(host);
  const auto *in = static_cast<const uint8_t *>(src);
  // A chunk copied to pinned memory, waiting to be copied out by the host.
  struct Piece {
    size_t slot, at, bytes;
  };
  auto copy_out = [&](const Piece &p) {
    backend_.synchronize(used_[p.slot]);
    used_[p.slot].reset();
    std::memcpy(out + p.at, buffers_[p.slot], p.bytes);
  };
  // Chunk i + 1's device copy runs while the host copies chunk i out.
  std::optional<Piece> previous;
  for (size_t done = 0, i = 0; done < bytes; ++i) {
    const Piece piece{i % 2, done, std::min(chunk_, bytes - done)};
    backend_.copy(stream, buffer(piece.slot), in + done, piece.bytes);
    used_[piece.slot] = backend_.record(stream);
    if (previous) copy_out(*previous);
    previous = piece;
    done += piece.bytes;
  }
  if (previous) copy_out(*previous);
}

void PinnedStaging::write(Stream &stream, void *dst, const void *host, size_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto *out = static_cast<uint8_t *>(dst);
  const auto *in = static_cast<const uint8_t *>(host);
  for (size_t done = 0, i = 0; done < bytes; ++i) {
    const size_t n = std::min(chunk_, bytes - done);
    const size_t slot = i % 2;
    void *pinned = buffer(slot);  // waits for its previous copy
    std::memcpy(pinned, in + done, n);
    backend_.copy(stream, out + done, pinned, n);
    used_[slot] = backend_.record(stream);
    done += n;
  }
}

PinnedStaging &staging_buffers() {
  // Never destroyed: streams and the backend may outlive statics.
  static PinnedStaging *staging = new PinnedStaging(backend(), size_t(4) << 20);
  return *staging;
}

}  // namespace detail

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

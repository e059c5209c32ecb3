// Host copies through pinned host memory (backend.h's read_to_host and
// write_from_host), with the backend and the staging buffers as parameters
// so that the chunking is unit-tested with a fake backend
// (runtime/tests/device_staging_test.cpp). Not installed.
//
// On a backend whose memory the host cannot read (cuda), a copy between
// pageable host memory and the backend's memory is split into chunks that
// pass through two pinned host buffers: the device copies to and from
// pinned memory run at full bandwidth and asynchronously, and pageable
// memory is only ever touched by the host (memcpy). On the cpu backend
// every byte is host memory: the copy is the backend's own.
#ifndef DSRT_SRC_STAGING_H
#define DSRT_SRC_STAGING_H

#include "dsrt/backend.h"

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>

namespace dsrt {
namespace detail {

// Whether host reads and writes of `b`'s memory go through pinned staging.
bool stages_host_copies(const BackendInterface &b);

// Copies `bytes` between two host buffers, neither of them program memory
// (the runners' host-side exchanges on a one-rank world): on the host, with
// no stream, no device copy and no synchronization on any backend.
void copy_host_bytes(void *dst, const void *src, size_t bytes);

// Two pinned host buffers of `chunk` bytes, allocated from `b` on first use,
// each with the event of the last device copy that used it. One per
// process for the linked backend (staging_buffers()); tests make their own.
// Writes on one stream fill a buffer from its start, each into bytes no
// copy still pending reads, so that a run of small writes (a pipeline
// stage's micro-batch inputs, the scalars) waits for nothing; the host
// waits for a buffer's copies only when a write needs more room than is
// left in both and those copies are not known done (a host wait on the
// stream since: a read, a synchronous write).
class PinnedStaging {
public:
  PinnedStaging(BackendInterface &b, size_t chunk) : backend_(b), chunk_(chunk) {}
  ~PinnedStaging();
  PinnedStaging(const PinnedStaging &) = delete;
  PinnedStaging &operator=(const PinnedStaging &) = delete;

  // `bytes` of `src` (any memory of the backend) to pageable `host`; blocks
  // until they are there.
  void read(Stream &stream, void *host, const void *src, size_t bytes);
  // `bytes` of pageable `host` to `dst` (any memory of the backend), in
  // `stream`'s order. `host` may change as soon as this returns; `dst` is
  // written when the stream reaches the copy, or before this returns when
  // `synchronous` (a host wait per chunk).
  void write(Stream &stream, void *dst, const void *host, size_t bytes,
             bool synchronous = false);

private:
  // Buffer i, allocated on first use, once its last device copy is done
  // (a host wait when that copy may still run) before the host writes it.
  void *host_buffer(size_t i);
  // Buffer i for a device copy into it on `stream`: its last device copy
  // is ordered before by the device (an event wait, no host wait; nothing
  // when it ran on `stream` itself).
  void *device_buffer(Stream &stream, size_t i);
  // Records the device copy just queued on `stream` with buffer i.
  void used(Stream &stream, size_t i);
  // After a host wait for buffer i's copy: every copy recorded on the same
  // stream before it is done too, so the host need not wait for it again.
  void done(size_t i);
  // Where `bytes` of a write on `stream` can go in buffer i without a host
  // wait: past the bytes its pending copies read, when those are on the
  // same stream; npos when they do not fit.
  size_t free_offset(Stream &stream, size_t i, size_t bytes) const;

  BackendInterface &backend_;
  const size_t chunk_;
  std::mutex mutex_;
  std::array<void *, 2> buffers_{};
  std::array<DeviceEvent, 2> used_{};
  // The stream (its state) and sequence number of each buffer's last copy.
  std::array<std::weak_ptr<StreamState>, 2> used_on_{};
  std::array<uint64_t, 2> used_seq_{};
  // The bytes from each buffer's start that copies not known done read or
  // write (0 once they are known done).
  std::array<size_t, 2> filled_{};
  uint64_t seq_ = 0;
  size_t next_ = 0;  // the buffer the next transfer starts with
};

// The bytes of a staging chunk: a staged copy of n bytes is ceil(n / this)
// device copies.
constexpr size_t kStagingChunkBytes = size_t(4) << 20;
// The process's staging buffers for the linked backend (4 MiB chunks).
PinnedStaging &staging_buffers();
// Those of the ds.transfer copies with ordinary (pageable) host memory on
// one side (offload_param.pin_memory false), kept apart so that each such
// copy, synchronous, waits once per chunk and for nothing else.
PinnedStaging &transfer_staging_buffers();

}  // namespace detail
}  // namespace dsrt

#endif  // DSRT_SRC_STAGING_H

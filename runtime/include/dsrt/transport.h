// dsrt: the transport interface that carries a Communicator's operations.
//
// A transport is one group of ranks and the algorithms that move tensors
// between them: all_reduce, all_gather, reduce_scatter, broadcast, send/recv
// groups and barriers, each ordered on a stream and completing a Request,
// and split into sub-groups. Communicator (comm.h) is the API programs use;
// it checks what every transport would check and forwards the rest. The MPI
// ring (runtime/src/mpi_ring*.cpp) is the transport written so far; NCCL
// will be a second one, behind the same interface and the same byte
// formulas (ring.h).
#ifndef DSRT_TRANSPORT_H
#define DSRT_TRANSPORT_H

#include "dsrt/kernels.h"
#include "dsrt/stream.h"
#include "dsrt/tensor.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace dsrt {

enum class CommOp : uint8_t {
  AllReduce = 0, AllGather, ReduceScatter, Broadcast, Send, Recv, Barrier,
};
constexpr int kNumCommOps = 7;
const char *comm_op_name(CommOp op);

// What one kind of operation moved on this rank since the last reset.
struct CommCounters {
  int64_t calls = 0;           // operations completed
  int64_t bytes_sent = 0;      // payload: what the ring formulas count
  int64_t bytes_received = 0;
  int64_t header_bytes_sent = 0;  // consistency headers, kCommHeaderBytes each
  int64_t header_bytes_received = 0;
};

constexpr int64_t kCommHeaderBytes = 128;

struct CommOptions {
  // An operation that makes no progress for this long fails, and with it
  // the communicator (a peer died, hangs, or issued other operations). The
  // environment variable DSRT_COMM_TIMEOUT (seconds) sets the default.
  double timeout_s = 600;
  // Broadcast forwards the buffer along the chain in slices of this size.
  int64_t broadcast_slice_bytes = int64_t(1) << 20;
};

// One transfer of a send_recv group.
struct P2POp {
  CommOp op = CommOp::Send;  // Send or Recv
  Tensor tensor;
  int peer = 0;
};

// The ring partition of `total` elements among `ranks`: chunk j starts at
// j * (total / ranks) + min(j, total % ranks) and the first total % ranks
// chunks have one element more. all_gather and reduce_scatter exchange
// these chunks, so their per-rank sizes may differ by one.
struct Chunk {
  int64_t begin = 0, size = 0;
};
Chunk ring_chunk(int64_t total, int ranks, int j);

// Payload bytes `rank` sends and receives in one operation on `ranks` ranks
// (the formulas of docs/runtime.md). `total` is the element count: of the
// tensor (all_reduce, broadcast, send, recv), of the gathered output
// (all_gather), of the scattered input (reduce_scatter).
struct CommVolume {
  int64_t sent = 0, received = 0;
};
CommVolume comm_volume(CommOp op, DType dtype, int64_t total, int ranks, int rank, int root = 0);

// Work a collective does on the communication thread around its ring, so
// that the issuing thread returns at once (bucketed collectives pack
// several tensors into one buffer and unpack the result). `before` runs
// before the header exchange, once the work pending on the stream is done
// and only if nothing failed so far; an exception it throws is this rank's
// local error, which fails the collective on every rank as a bad argument
// does. `after` runs once the collective completed successfully, before its
// Request completes; an exception it throws fails the Request on this rank
// only. Neither may issue operations on a communicator.
struct CommHooks {
  std::function<void()> before, after;
};

class Transport {
public:
  virtual ~Transport() = default;

  virtual const char *name() const = 0;  // "mpi-ring", "nccl"
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Whether MPI carries the messages.
  virtual bool uses_mpi() const = 0;
  // Whether the operations read and write device memory only (NCCL): a
  // caller with host buffers stages them through device memory.
  virtual bool device_memory() const { return false; }

  // The operations of Communicator (comm.h), with its semantics; arguments
  // are as given (the Communicator checked only what it documents).
  virtual Request all_reduce(Stream &stream, const Tensor &in, const Tensor &out, ReduceOp op,
                             const CommHooks &hooks) = 0;
  virtual Request all_gather(Stream &stream, const Tensor &in, const Tensor &out,
                             const CommHooks &hooks) = 0;
  virtual Request reduce_scatter(Stream &stream, const Tensor &in, const Tensor &out,
                                 ReduceOp op, const CommHooks &hooks) = 0;
  virtual Request broadcast(Stream &stream, const Tensor &buffer, int root) = 0;
  // Non-empty; every peer another rank of this transport.
  virtual Request send_recv(Stream &stream, const std::vector<P2POp> &ops) = 0;
  virtual Request barrier(Stream &stream) = 0;
  // The sub-group of this transport's ranks that pass the same `color`
  // (>= 0), ranked by `key` then rank: collective over this transport
  // (Communicator::split). Blocks until the sub-group exists.
  virtual std::unique_ptr<Transport> split(int color, int key) = 0;

  virtual CommCounters counters(CommOp op) const = 0;
  virtual void reset_counters() = 0;
  // Checked by Communicator::set_options.
  virtual void set_options(const CommOptions &options) = 0;
  virtual CommOptions options() const = 0;
  // Why the transport failed; empty while it works.
  virtual std::string failure() const = 0;
};

}  // namespace dsrt

#endif  // DSRT_TRANSPORT_H

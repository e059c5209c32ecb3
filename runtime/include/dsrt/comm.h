// dsrt: communicators and asynchronous collectives.
//
// A Communicator is a group of ranks (one process each) that run the same
// collectives in the same order, as with NCCL. Every operation returns at
// once with a Request; it runs on the communicator's communication thread,
// after the work pending on the stream it was issued on, and later work on
// that stream waits for it. Operations of one communicator run one at a
// time, in the order they were issued. The caller must not change an input,
// nor read an output, before the operation completes.
//
// A Communicator carries its operations over a Transport (transport.h):
// world() and split() use the MPI ring, the one written so far.
//
// The MPI ring's collectives are ring algorithms over MPI point-to-point
// messages, so
// the order in which values are combined is fixed: results are bit-identical
// on every rank and from run to run. Every rank sends a small header to every
// other rank before each collective, which turns disagreeing calls (sizes,
// element types, operations, order) into a dsrt::Error on every rank instead
// of a hang or corrupt data. Algorithms, reduction order and byte counts are
// in docs/runtime.md.
//
// Element types: f32, f16, bf16, i64, i32 for reductions (f16 and bf16
// add in f32 and send their partials in 16 bits, as NCCL's ring does), any
// type for all_gather, broadcast, send and recv.
#ifndef DSRT_COMM_H
#define DSRT_COMM_H

#include "dsrt/kernels.h"
#include "dsrt/stream.h"
#include "dsrt/tensor.h"
#include "dsrt/transport.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace dsrt {

class Communicator {
public:
  // All processes of the job: MPI_COMM_WORLD when launched by an MPI
  // launcher (mpirun, srun), initializing MPI with MPI_THREAD_SERIALIZED;
  // otherwise a world of one rank that needs no MPI. Created on first use,
  // finalized at exit.
  static Communicator &world();

  // The communicator of a group of `parent`'s ranks: those that pass the
  // same `color` (>= 0) form one communicator, ranked by `key` and then by
  // their rank in `parent`. Collective over `parent`: every rank of it must
  // call split, in the same order relative to its other operations (it is
  // one of them: checked by the same header exchange, so a rank that issues
  // something else fails on every rank). Blocks until the new communicator
  // exists. It has its own communication thread, issue order, counters,
  // options (copied from `parent`'s) and failure state; with MPI it uses a
  // duplicate of `parent`'s MPI communicator, so its messages never mix with
  // another communicator's. Splitting a world of one without MPI gives a
  // world of one. Destroy it only when nothing issued on it is pending.
  static std::unique_ptr<Communicator> split(Communicator &parent, int color, int key);

  ~Communicator();
  Communicator(const Communicator &) = delete;
  Communicator &operator=(const Communicator &) = delete;

  int rank() const;
  int size() const;
  // Whether MPI carries this communicator's messages.
  bool uses_mpi() const;

  // out = op over ranks of in; in and out are the same tensor or disjoint.
  Request all_reduce(Stream &stream, const Tensor &in, const Tensor &out,
                     ReduceOp op = ReduceOp::Sum, const CommHooks &hooks = {});
  // out (all ranks' chunks, in rank order) from each rank's in, which holds
  // ring_chunk(out.numel(), size, rank) elements. In place when in is that
  // chunk of out.
  Request all_gather(Stream &stream, const Tensor &in, const Tensor &out,
                     const CommHooks &hooks = {});
  // out = this rank's chunk (ring_chunk(in.numel(), size, rank)) of the
  // reduction of in over ranks. In place when out is that chunk of in.
  Request reduce_scatter(Stream &stream, const Tensor &in, const Tensor &out,
                         ReduceOp op = ReduceOp::Sum, const CommHooks &hooks = {});
  // root's buffer to every rank's buffer.
  Request broadcast(Stream &stream, const Tensor &buffer, int root);
  // Point to point: a send matches the peer's recv of the same element type
  // and count. Two ranks that send to each other must use one send_recv (as
  // with NCCL's group calls): a lone send may wait for its recv.
  Request send(Stream &stream, const Tensor &tensor, int peer);
  Request recv(Stream &stream, const Tensor &tensor, int peer);
  // Sends and receives that progress together (pipeline stages exchanging
  // activations and gradients).
  Request send_recv(Stream &stream, const std::vector<P2POp> &ops);
  // Completes once every rank has issued it.
  Request barrier(Stream &stream);

  CommCounters counters(CommOp op) const;
  void reset_counters();

  // Applies to operations issued afterwards.
  void set_options(const CommOptions &options);
  CommOptions options() const;
  // Why the communicator failed (a timeout, an MPI error); empty while it
  // works. After a failure every operation fails at once.
  std::string failure() const;

  // A communicator over another transport (NCCL, or a test's).
  explicit Communicator(std::unique_ptr<Transport> transport);
  Transport &transport() { return *transport_; }
  const Transport &transport() const { return *transport_; }

private:
  std::unique_ptr<Transport> transport_;
};

}  // namespace dsrt

#endif  // DSRT_COMM_H

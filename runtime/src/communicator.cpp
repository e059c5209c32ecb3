// Communicators, backend- and transport-neutral: the names, ring chunks and
// byte formulas every transport shares (dsrt/ring.h), and Communicator,
// which checks what any transport would refuse when issued and forwards
// the operation to its Transport. world() is the MPI ring's world.
#include "dsrt/comm.h"
#include "dsrt/ring.h"

#include <algorithm>
#include <string>
#include <utility>

namespace dsrt {

namespace detail {
// mpi_ring_transport.cpp: the world, over MPI when launched by an MPI
// launcher, else one rank.
std::unique_ptr<Transport> make_mpi_ring_world();
}  // namespace detail

namespace {

int mod(int64_t a, int n) { return static_cast<int>(((a % n) + n) % n); }

}  // namespace

const char *comm_op_name(CommOp op) {
  switch (op) {
  case CommOp::AllReduce: return "all_reduce";
  case CommOp::AllGather: return "all_gather";
  case CommOp::ReduceScatter: return "reduce_scatter";
  case CommOp::Broadcast: return "broadcast";
  case CommOp::Send: return "send";
  case CommOp::Recv: return "recv";
  case CommOp::Barrier: return "barrier";
  }
  return "unknown";
}

Chunk ring_chunk(int64_t total, int ranks, int j) {
  if (ranks < 1 || j < 0 || j >= ranks || total < 0)
    throw Error("dsrt::ring_chunk: chunk " + std::to_string(j) + " of " + std::to_string(total) +
                " elements among " + std::to_string(ranks) + " ranks does not exist");
  int64_t base = total / ranks, extra = total % ranks;
  return Chunk{j * base + std::min<int64_t>(j, extra), ring::chunk_size(total, ranks, j)};
}

CommVolume comm_volume(CommOp op, DType dtype, int64_t total, int ranks, int rank, int root) {
  if (ranks < 1 || rank < 0 || rank >= ranks || total < 0)
    throw Error("dsrt::comm_volume: rank " + std::to_string(rank) + " of " +
                std::to_string(ranks) + " with " + std::to_string(total) +
                " elements is out of range");
  const int64_t e = static_cast<int64_t>(dtype_size(dtype));
  const int64_t bytes = total * e;
  CommVolume v;
  ring::Bytes b;
  switch (op) {
  case CommOp::AllReduce:
    b = ring::all_reduce(e, total, ranks, rank);
    return {b.sent, b.received};
  case CommOp::ReduceScatter:
    b = ring::reduce_scatter(e, total, ranks, rank);
    return {b.sent, b.received};
  case CommOp::AllGather:
    b = ring::all_gather(e, total, ranks, rank);
    return {b.sent, b.received};
  case CommOp::Broadcast: {
    int pos = mod(rank - root, ranks);
    v.sent = pos < ranks - 1 ? bytes : 0;
    v.received = pos > 0 ? bytes : 0;
    return v;
  }
  case CommOp::Send: v.sent = bytes; return v;
  case CommOp::Recv: v.received = bytes; return v;
  case CommOp::Barrier: return v;
  }
  return v;
}

//===--- Communicator --------------------------------------------------------===//

Communicator::Communicator(std::unique_ptr<Transport> transport)
    : transport_(std::move(transport)) {
  if (!transport_)
    throw Error("dsrt::Communicator: no transport");
}

Communicator::~Communicator() = default;

Communicator &Communicator::world() {
  static Communicator world(detail::make_mpi_ring_world());
  return world;
}

std::unique_ptr<Communicator> Communicator::split(Communicator &parent, int color, int key) {
  return std::make_unique<Communicator>(parent.transport_->split(color, key));
}

int Communicator::rank() const { return transport_->rank(); }
int Communicator::size() const { return transport_->size(); }
bool Communicator::uses_mpi() const { return transport_->uses_mpi(); }

namespace {

// Collectives reduce by sum, average or max; a product (a kernel's
// reduction) is refused rather than summed.
void check_collective_reduction(const char *what, ReduceOp op) {
  if (op != ReduceOp::Sum && op != ReduceOp::Mean && op != ReduceOp::Max)
    throw Error(std::string("dsrt::Communicator::") + what +
                ": collectives reduce by sum, average or max; reduction " +
                std::to_string(static_cast<int>(op)) + " is not supported");
}

}  // namespace

Request Communicator::all_reduce(Stream &stream, const Tensor &in, const Tensor &out,
                                 ReduceOp op, const CommHooks &hooks) {
  check_collective_reduction("all_reduce", op);
  return transport_->all_reduce(stream, in, out, op, hooks);
}

Request Communicator::all_gather(Stream &stream, const Tensor &in, const Tensor &out,
                                 const CommHooks &hooks) {
  return transport_->all_gather(stream, in, out, hooks);
}

Request Communicator::reduce_scatter(Stream &stream, const Tensor &in, const Tensor &out,
                                     ReduceOp op, const CommHooks &hooks) {
  check_collective_reduction("reduce_scatter", op);
  return transport_->reduce_scatter(stream, in, out, op, hooks);
}

Request Communicator::broadcast(Stream &stream, const Tensor &buffer, int root) {
  return transport_->broadcast(stream, buffer, root);
}

Request Communicator::send_recv(Stream &stream, const std::vector<P2POp> &ops) {
  // A peer that does not exist has nobody to tell: it is thrown here.
  const std::string title = std::string("dsrt::Communicator::") +
                            (ops.size() == 1 ? comm_op_name(ops[0].op) : "send_recv");
  for (const P2POp &p : ops) {
    if (p.op != CommOp::Send && p.op != CommOp::Recv)
      throw Error(title + ": a transfer must be Send or Recv, not " + comm_op_name(p.op));
    if (p.peer < 0 || p.peer >= size() || p.peer == rank())
      throw Error(title + ": peer " + std::to_string(p.peer) + " is not another rank of this "
                  "communicator (rank " + std::to_string(rank()) + " of " +
                  std::to_string(size()) + ")");
  }
  if (ops.empty())
    return Request();
  return transport_->send_recv(stream, ops);
}

Request Communicator::send(Stream &stream, const Tensor &tensor, int peer) {
  return send_recv(stream, {P2POp{CommOp::Send, tensor, peer}});
}

Request Communicator::recv(Stream &stream, const Tensor &tensor, int peer) {
  return send_recv(stream, {P2POp{CommOp::Recv, tensor, peer}});
}

Request Communicator::barrier(Stream &stream) { return transport_->barrier(stream); }

CommCounters Communicator::counters(CommOp op) const { return transport_->counters(op); }
void Communicator::reset_counters() { transport_->reset_counters(); }

void Communicator::set_options(const CommOptions &options) {
  if (!(options.timeout_s > 0))
    throw Error("dsrt::Communicator::set_options: timeout_s must be > 0");
  if (options.broadcast_slice_bytes < 1)
    throw Error("dsrt::Communicator::set_options: broadcast_slice_bytes must be >= 1");
  transport_->set_options(options);
}

CommOptions Communicator::options() const { return transport_->options(); }
std::string Communicator::failure() const { return transport_->failure(); }

}  // namespace dsrt

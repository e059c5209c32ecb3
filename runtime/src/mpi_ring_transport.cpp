// The MPI ring transport behind the Transport interface: each operation is
// checked on the issuing thread (a problem travels in the header, so that
// every rank fails the same operation instead of waiting for this one) and
// queued on the engine's communication thread (mpi_ring.cpp).
#include "mpi_ring.h"

#include <utility>

namespace dsrt {
namespace detail {


class MpiRingTransport final : public Transport {
public:
  explicit MpiRingTransport(std::unique_ptr<CommEngine> engine) : engine_(std::move(engine)) {}

  const char *name() const override { return "mpi-ring"; }
  int rank() const override { return engine_->rank; }
  int size() const override { return engine_->size; }
  bool uses_mpi() const override { return engine_->mpi; }

  Request all_reduce(Stream &stream, const Tensor &in, const Tensor &out, ReduceOp op,
                     const CommHooks &hooks) override;
  Request all_gather(Stream &stream, const Tensor &in, const Tensor &out,
                     const CommHooks &hooks) override;
  Request reduce_scatter(Stream &stream, const Tensor &in, const Tensor &out, ReduceOp op,
                         const CommHooks &hooks) override;
  Request broadcast(Stream &stream, const Tensor &buffer, int root) override;
  Request send_recv(Stream &stream, const std::vector<P2POp> &ops) override;
  Request barrier(Stream &stream) override;
  std::unique_ptr<Transport> split(int color, int key) override;

  CommCounters counters(CommOp op) const override { return engine_->counters(op); }
  void reset_counters() override { engine_->reset_counters(); }
  void set_options(const CommOptions &options) override { engine_->set_options(options); }
  CommOptions options() const override { return engine_->options(); }
  std::string failure() const override { return engine_->failure(); }

private:
  std::unique_ptr<CommEngine> engine_;
};

std::unique_ptr<Transport> make_mpi_ring_world() {
  return std::make_unique<MpiRingTransport>(std::make_unique<CommEngine>());
}

namespace {

std::string tensor_text(const Tensor &t) {
  return std::string(dtype_name(t.dtype)) + t.shape.str();
}

// Argument problems are not thrown here: they travel in the header so that
// every rank fails the same operation instead of waiting for this one.
void check_data(std::string &error, const char *title, const char *name, const Tensor &t) {
  if (error.empty() && t.numel() > 0 && !t.data)
    error = std::string("dsrt::Communicator::") + title + ": " + name + " " + tensor_text(t) +
            " has no memory";
}

void check_reducible(std::string &error, const char *title, const Tensor &in, const Tensor &out) {
  if (!error.empty())
    return;
  std::string t = std::string("dsrt::Communicator::") + title + ": ";
  if (in.dtype != out.dtype)
    error = t + "in " + tensor_text(in) + " and out " + tensor_text(out) +
            " have different element types";
  else if (!is_reducible(in.dtype))
    error = t + "cannot reduce " + dtype_name(in.dtype) +
            " tensors (f32, f16, bf16, i64 and i32 can)";
}

}  // namespace

std::unique_ptr<Transport> MpiRingTransport::split(int color, int key) {
  Call c;
  c.op = CommOp::Barrier;  // for the issue order only: the header says kOpSplit
  c.split = true;
  c.root = color;
  c.count = key;
  c.split_result = std::make_shared<SplitResult>();
  if (color < 0)
    c.local_error = "dsrt::Communicator::split: color " + std::to_string(color) +
                    " is negative; every rank needs a group (color >= 0)";
  std::shared_ptr<SplitResult> result = c.split_result;
  Stream stream;
  engine_->issue(stream, std::move(c)).wait();
  if (!result->engine)
    throw Error("dsrt::Communicator::split: no communicator was made");
  return std::make_unique<MpiRingTransport>(std::move(result->engine));
}

Request MpiRingTransport::all_reduce(Stream &stream, const Tensor &in, const Tensor &out,
                                     ReduceOp op, const CommHooks &hooks) {
  Call c;
  c.hooks = hooks;
  c.op = CommOp::AllReduce;
  c.reduce = op;
  c.in = in;
  c.out = out;
  c.count = in.numel();
  const char *title = "all_reduce";
  check_reducible(c.local_error, title, in, out);
  if (c.local_error.empty() && in.numel() != out.numel())
    c.local_error = std::string("dsrt::Communicator::all_reduce: in ") + tensor_text(in) +
                    " and out " + tensor_text(out) + " differ in element count";
  if (c.local_error.empty() && in.data != out.data && overlaps(in, out))
    c.local_error = "dsrt::Communicator::all_reduce: in and out overlap without being the same "
                    "tensor";
  check_data(c.local_error, title, "in", in);
  check_data(c.local_error, title, "out", out);
  return engine_->issue(stream, std::move(c));
}

Request MpiRingTransport::all_gather(Stream &stream, const Tensor &in, const Tensor &out,
                                 const CommHooks &hooks) {
  Call c;
  c.hooks = hooks;
  c.op = CommOp::AllGather;
  c.in = in;
  c.out = out;
  c.count = out.numel();
  const std::string t = "dsrt::Communicator::all_gather: ";
  Chunk mine = ring_chunk(out.numel(), size(), rank());
  if (in.dtype != out.dtype)
    c.local_error = t + "in " + tensor_text(in) + " and out " + tensor_text(out) +
                    " have different element types";
  else if (in.numel() != mine.size)
    c.local_error = t + "in " + tensor_text(in) + " must hold rank " + std::to_string(rank()) +
                    "'s chunk of out " + tensor_text(out) + ": " + std::to_string(mine.size) +
                    " elements";
  else if (overlaps(in, out) &&
           in.data != static_cast<uint8_t *>(out.data) + mine.begin * dtype_size(out.dtype))
    c.local_error = t + "in overlaps out without being this rank's chunk of it";
  check_data(c.local_error, "all_gather", "in", in);
  check_data(c.local_error, "all_gather", "out", out);
  return engine_->issue(stream, std::move(c));
}

Request MpiRingTransport::reduce_scatter(Stream &stream, const Tensor &in, const Tensor &out,
                                         ReduceOp op, const CommHooks &hooks) {
  Call c;
  c.hooks = hooks;
  c.op = CommOp::ReduceScatter;
  c.reduce = op;
  c.in = in;
  c.out = out;
  c.count = in.numel();
  const std::string t = "dsrt::Communicator::reduce_scatter: ";
  check_reducible(c.local_error, "reduce_scatter", in, out);
  Chunk mine = ring_chunk(in.numel(), size(), rank());
  if (c.local_error.empty() && out.numel() != mine.size)
    c.local_error = t + "out " + tensor_text(out) + " must hold rank " + std::to_string(rank()) +
                    "'s chunk of in " + tensor_text(in) + ": " + std::to_string(mine.size) +
                    " elements";
  if (c.local_error.empty() && overlaps(in, out) &&
      out.data != static_cast<uint8_t *>(in.data) + mine.begin * dtype_size(in.dtype))
    c.local_error = t + "out overlaps in without being this rank's chunk of it";
  check_data(c.local_error, "reduce_scatter", "in", in);
  check_data(c.local_error, "reduce_scatter", "out", out);
  return engine_->issue(stream, std::move(c));
}

Request MpiRingTransport::broadcast(Stream &stream, const Tensor &buffer, int root) {
  Call c;
  c.op = CommOp::Broadcast;
  c.in = buffer;
  c.out = buffer;
  c.root = root;
  c.count = buffer.numel();
  if (root < 0 || root >= size())
    c.local_error = "dsrt::Communicator::broadcast: root " + std::to_string(root) +
                    " is not a rank of this communicator of " + std::to_string(size());
  check_data(c.local_error, "broadcast", "buffer", buffer);
  return engine_->issue(stream, std::move(c));
}

Request MpiRingTransport::send_recv(Stream &stream, const std::vector<P2POp> &ops) {
  Call c;
  c.p2p = true;
  c.transfers = ops;
  for (const P2POp &p : ops)
    check_data(c.local_error, comm_op_name(p.op), "tensor", p.tensor);
  return engine_->issue(stream, std::move(c));
}

Request MpiRingTransport::barrier(Stream &stream) {
  Call c;
  c.op = CommOp::Barrier;
  return engine_->issue(stream, std::move(c));
}

}  // namespace detail
}  // namespace dsrt

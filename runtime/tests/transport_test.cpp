// The transport interface (dsrt/transport.h): the world's MPI ring used
// through it on every rank, and a Communicator over a transport written
// here, which shows what Communicator checks itself and what it hands on.
// Part of dsrt_comm_tests (run alone and under mpirun on 1 to 4 ranks).
#include "dsrt/comm.h"
#include "dsrt/transport.h"

#include "test_util.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace {

using dsrt::CommOp;
using dsrt::DType;
using dsrt::ReduceOp;
using dsrt::Shape;
using dsrt::Tensor;
using dsrt_test::Owned;

TEST(Transport, TheWorldIsTheMpiRingThroughTheInterface) {
  dsrt::Communicator &world = dsrt::Communicator::world();
  dsrt::Transport &ring = world.transport();
  EXPECT_STREQ(ring.name(), "mpi-ring");
  EXPECT_EQ(ring.rank(), world.rank());
  EXPECT_EQ(ring.size(), world.size());
  EXPECT_EQ(ring.uses_mpi(), world.uses_mpi());

  // An all_reduce issued on the interface itself: the sum of 1..N, and
  // the counters of the world move by the ring formulas.
  const int n = ring.size(), r = ring.rank();
  const int64_t total = 10;
  std::vector<double> mine(total, r + 1.0);
  Owned x = Owned::of(DType::F32, Shape{total}, mine);
  ring.reset_counters();
  dsrt::Stream s;
  ring.all_reduce(s, x.t(), x.t(), ReduceOp::Sum, {}).wait();
  for (int64_t i = 0; i < total; ++i)
    EXPECT_EQ(x.at(i), n * (n + 1) / 2.0);
  const dsrt::CommCounters c = ring.counters(CommOp::AllReduce);
  const dsrt::CommVolume v = dsrt::comm_volume(CommOp::AllReduce, DType::F32, total, n, r);
  EXPECT_EQ(c.calls, 1);
  EXPECT_EQ(c.bytes_sent, v.sent);
  EXPECT_EQ(c.bytes_received, v.received);
  EXPECT_EQ(world.counters(CommOp::AllReduce).calls, 1);  // the same transport

  // A sub-group split through the interface is a transport of its own.
  std::unique_ptr<dsrt::Transport> half = ring.split(r % 2, r);
  EXPECT_EQ(half->size(), (n - r % 2 + 1) / 2);
  EXPECT_EQ(half->rank(), r / 2);
  Owned one = Owned::of(DType::I64, Shape{1}, {1});
  half->all_reduce(s, one.t(), one.t(), ReduceOp::Sum, {}).wait();
  EXPECT_EQ(one.at(0), half->size());
  EXPECT_EQ(half->counters(CommOp::AllReduce).calls, 1);
  EXPECT_EQ(ring.counters(CommOp::AllReduce).calls, 1);  // not counted on the parent
}

// A transport of one rank that records what reaches it.
class RecordingTransport final : public dsrt::Transport {
public:
  explicit RecordingTransport(std::vector<std::string> *log, int rank = 0, int size = 2)
      : log_(log), rank_(rank), size_(size) {}

  const char *name() const override { return "recording"; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  bool uses_mpi() const override { return false; }

  dsrt::Request all_reduce(dsrt::Stream &, const Tensor &in, const Tensor &out, ReduceOp op,
                           const dsrt::CommHooks &hooks) override {
    log_->push_back("all_reduce " + std::to_string(in.numel()) + (in.data == out.data ? " in place" : "") +
                    (op == ReduceOp::Max ? " max" : "") + (hooks.before ? " hooked" : ""));
    return {};
  }
  dsrt::Request all_gather(dsrt::Stream &, const Tensor &, const Tensor &out,
                           const dsrt::CommHooks &) override {
    log_->push_back("all_gather " + std::to_string(out.numel()));
    return {};
  }
  dsrt::Request reduce_scatter(dsrt::Stream &, const Tensor &in, const Tensor &, ReduceOp,
                               const dsrt::CommHooks &) override {
    log_->push_back("reduce_scatter " + std::to_string(in.numel()));
    return {};
  }
  dsrt::Request broadcast(dsrt::Stream &, const Tensor &, int root) override {
    log_->push_back("broadcast from " + std::to_string(root));
    return {};
  }
  dsrt::Request send_recv(dsrt::Stream &, const std::vector<dsrt::P2POp> &ops) override {
    std::string entry = "send_recv";
    for (const dsrt::P2POp &p : ops)
      entry += std::string(" ") + dsrt::comm_op_name(p.op) + ":" + std::to_string(p.peer);
    log_->push_back(entry);
    return {};
  }
  dsrt::Request barrier(dsrt::Stream &) override {
    log_->push_back("barrier");
    return {};
  }
  std::unique_ptr<dsrt::Transport> split(int color, int key) override {
    log_->push_back("split " + std::to_string(color) + " " + std::to_string(key));
    return std::make_unique<RecordingTransport>(log_, 0, 1);
  }
  dsrt::CommCounters counters(CommOp op) const override {
    dsrt::CommCounters c;
    c.calls = static_cast<int64_t>(op) + 100;
    return c;
  }
  void reset_counters() override { log_->push_back("reset"); }
  void set_options(const dsrt::CommOptions &o) override {
    log_->push_back("options " + std::to_string(static_cast<int>(o.timeout_s)));
  }
  dsrt::CommOptions options() const override { return {}; }
  std::string failure() const override { return "recorded"; }

private:
  std::vector<std::string> *log_;
  int rank_, size_;
};

TEST(Transport, CommunicatorForwardsToItsTransport) {
  std::vector<std::string> log;
  dsrt::Communicator comm(std::make_unique<RecordingTransport>(&log));
  EXPECT_STREQ(comm.transport().name(), "recording");
  EXPECT_EQ(comm.size(), 2);
  dsrt::Stream s;
  Owned a(DType::F32, Shape{6}), b(DType::F32, Shape{3});
  dsrt::CommHooks hooks;
  hooks.before = [] {};
  comm.all_reduce(s, a.t(), a.t(), ReduceOp::Max, hooks);
  comm.reduce_scatter(s, a.t(), b.t());
  comm.all_gather(s, b.t(), a.t());
  comm.broadcast(s, a.t(), 1);
  comm.send(s, a.t(), 1);
  comm.send_recv(s, {{CommOp::Send, a.t(), 1}, {CommOp::Recv, b.t(), 1}});
  comm.barrier(s);
  comm.reset_counters();
  dsrt::CommOptions options;
  options.timeout_s = 7;
  comm.set_options(options);
  EXPECT_EQ(comm.counters(CommOp::Broadcast).calls, 100 + static_cast<int>(CommOp::Broadcast));
  EXPECT_EQ(comm.failure(), "recorded");
  std::unique_ptr<dsrt::Communicator> sub = dsrt::Communicator::split(comm, 3, 5);
  EXPECT_EQ(sub->size(), 1);
  EXPECT_STREQ(sub->transport().name(), "recording");
  const std::vector<std::string> expected = {
      "all_reduce 6 in place max hooked", "reduce_scatter 6", "all_gather 6",
      "broadcast from 1", "send_recv send:1", "send_recv send:1 recv:1", "barrier", "reset",
      "options 7", "split 3 5"};
  EXPECT_EQ(log, expected);
}

// What no transport could carry is refused by Communicator before the
// transport sees it.
TEST(Transport, CommunicatorRefusesWhatNoTransportCanCarry) {
  std::vector<std::string> log;
  dsrt::Communicator comm(std::make_unique<RecordingTransport>(&log));
  dsrt::Stream s;
  Owned a(DType::F32, Shape{2});
  EXPECT_DSRT_ERROR(comm.send(s, a.t(), 0), "dsrt::Communicator::send", "peer 0",
                    "not another rank");
  EXPECT_DSRT_ERROR(comm.recv(s, a.t(), 2), "dsrt::Communicator::recv", "peer 2");
  EXPECT_DSRT_ERROR(comm.send_recv(s, {{CommOp::Barrier, a.t(), 1}}), "Send or Recv");
  EXPECT_TRUE(comm.send_recv(s, {}).test());  // nothing to do, nothing issued
  dsrt::CommOptions bad;
  bad.timeout_s = 0;
  EXPECT_DSRT_ERROR(comm.set_options(bad), "timeout_s");
  bad = {};
  bad.broadcast_slice_bytes = 0;
  EXPECT_DSRT_ERROR(comm.set_options(bad), "broadcast_slice_bytes");
  EXPECT_TRUE(log.empty()) << log.front();
  EXPECT_DSRT_ERROR(dsrt::Communicator(nullptr), "no transport");
}

}  // namespace

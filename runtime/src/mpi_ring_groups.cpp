// The MPI ring transport's sub-groups and point-to-point transfers:
// Communicator::split (a new engine over a duplicate of the parent's MPI
// communicator, holding the ranks of one color) and send/recv groups whose
// transfers progress together.
#include "mpi_ring.h"

#include <cstring>

namespace dsrt {
namespace detail {

void CommEngine::run_split(Call &c, const std::string &local) {
  const std::string title = "dsrt::Communicator::split";
  const std::string what = title + " (collective #" + std::to_string(c.seq) + " on rank " +
                           std::to_string(rank) + " of " + std::to_string(size) + ")";
  const int N = size, r = rank;
  // Every rank's color and key travel in its header: after the exchange
  // every rank knows every group.
  std::vector<Header> all(N);
  all[r] = make_header(c, CommOp::Barrier, DType::F32, c.count, r, local);
  all[r].op = kOpSplit;
  {
    Transfers t(*this, c, what);
    for (int p = 0; p < N; ++p)
      if (p != r) {
        t.recv(CommOp::Barrier, &all[p], kCommHeaderBytes, p, kTagCollHeader, true);
        t.send(CommOp::Barrier, &all[r], kCommHeaderBytes, p, kTagCollHeader, true);
      }
    t.wait();
  }
  check_headers(title, all, r, local);
  const int color = c.root;
  std::vector<std::pair<int64_t, int>> group;  // (key, rank) of this rank's color
  for (int p = 0; p < N; ++p)
    if (all[p].root == color)
      group.push_back({all[p].count, p});
  std::sort(group.begin(), group.end());
  std::vector<int> members;  // MPI ranks in the duplicate, which has the parent's ranks
  int new_rank = 0;
  for (size_t i = 0; i < group.size(); ++i) {
    members.push_back(mpi_peer(group[i].second));
    if (group[i].second == r)
      new_rank = static_cast<int>(i);
  }
  const int new_size = static_cast<int>(group.size());
#ifdef DSRT_HAVE_MPI
  MPI_Comm dup = MPI_COMM_NULL;
  if (mpi) {
    // MPI_Comm_idup, polled: a blocking MPI_Comm_split would hold the MPI
    // mutex while it waits for the other ranks.
    MPI_Request req = MPI_REQUEST_NULL;
    {
      std::lock_guard<std::mutex> lock(mpi_mutex());
      if (MPI_Comm_idup(comm, &dup, &req) != MPI_SUCCESS)
        fail(what + ": MPI_Comm_idup failed; the communicator is now unusable");
    }
    using Clock = std::chrono::steady_clock;
    const auto start = Clock::now();
    for (int idle = 0;; ++idle) {
      int flag = 0;
      {
        std::lock_guard<std::mutex> lock(mpi_mutex());
        if (MPI_Test(&req, &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS)
          fail(what + ": MPI_Comm_idup failed; the communicator is now unusable");
      }
      if (flag)
        break;
      if (std::chrono::duration<double>(Clock::now() - start).count() > c.options.timeout_s) {
        char seconds[32];
        std::snprintf(seconds, sizeof seconds, "%g", c.options.timeout_s);
        fail(what + ": timed out after " + seconds + " s duplicating the MPI communicator; "
             "the communicator is now unusable");
      }
      if (idle < 64)
        continue;
      std::this_thread::sleep_for(std::chrono::microseconds(idle < 256 ? 1 : 100));
    }
    std::lock_guard<std::mutex> lock(mpi_mutex());
    MPI_Comm_set_errhandler(dup, MPI_ERRORS_RETURN);
  }
  c.split_result->engine = std::make_unique<CommEngine>(new_rank, new_size, mpi,
                                                        std::move(members), c.options, dup);
#else
  c.split_result->engine =
      std::make_unique<CommEngine>(new_rank, new_size, mpi, std::move(members), c.options);
#endif
}

void CommEngine::run_p2p(Call &c, const std::string &local) {
  const std::string title = op_title(c);
  const std::string what = title + " (rank " + std::to_string(rank) + " of " +
                           std::to_string(size) + ")";
  const size_t n = c.transfers.size();
  std::vector<Header> mine(n), theirs(n);
  // Each transfer moves its data as soon as its own two headers have
  // crossed, whatever the group's other transfers wait for: a group that
  // sends to a stage and receives from it completes its send when the peer
  // has issued the matching receive, even if the peer issues the send that
  // the receive waits for only after that (rendezvous per transfer, as
  // NCCL's grouped point-to-point calls).
  std::vector<int> headers_left(n, 2);
  std::vector<bool> ok(n), data_posted(n);
  std::vector<int64_t> transfer_of;  // request index -> transfer (-1: data)
  std::string errors;
  Transfers t(*this, c, what);
  auto check_pair = [&](size_t i) {
    // Both ends of a pair hold both headers, so both skip a bad pair; the
    // good pairs of the group still move their data.
    const P2POp &p = c.transfers[i];
    const Header &a = mine[i], &b = theirs[i];
    CommOp expected = p.op == CommOp::Send ? CommOp::Recv : CommOp::Send;
    std::string peer = "rank " + std::to_string(p.peer);
    std::string problem;
    if (a.flags & kFlagLocalError)
      problem = local;
    else if (b.magic != kMagic)
      problem = peer + " sent a message that is not a dsrt header";
    else if (b.flags & kFlagLocalError)
      problem = peer + " failed: " + b.note;
    else if (b.op != static_cast<uint8_t>(expected) || b.dtype != a.dtype || b.count != a.count)
      problem = "this rank's " + describe(a) + (p.op == CommOp::Send ? " to " : " from ") + peer +
                " does not match " + peer + "'s " + describe(b) +
                ((a.flags & kFlagShape) && (b.flags & kFlagShape)
                     ? std::string(" (shapes: this rank's ") + a.note + ", " + peer + "'s " +
                           b.note + ")"
                     : std::string());
    ok[i] = problem.empty();
    if (!ok[i] && errors.find(problem) == std::string::npos)
      errors += (errors.empty() ? "" : "; ") + problem;
  };
  // Data messages between two ranks in one direction share a tag, so they
  // are posted in the transfers' order, as the peer posts its side.
  auto post_ready_data = [&]() {
    for (size_t i = 0; i < n; ++i) {
      if (data_posted[i] || headers_left[i] > 0)
        continue;
      const P2POp &p = c.transfers[i];
      bool earlier_waits = false;
      for (size_t j = 0; j < i && !earlier_waits; ++j)
        earlier_waits = !data_posted[j] && c.transfers[j].peer == p.peer &&
                        c.transfers[j].op == p.op;
      if (earlier_waits)
        continue;
      data_posted[i] = true;
      if (!ok[i] || p.tensor.nbytes() == 0)
        continue;
      int64_t bytes = static_cast<int64_t>(p.tensor.nbytes());
      if (p.op == CommOp::Send)
        t.send(p.op, p.tensor.data, bytes, p.peer, kTagP2PData);
      else
        t.recv(p.op, p.tensor.data, bytes, p.peer, kTagP2PData);
      transfer_of.resize(t.posted(), -1);
    }
  };
  for (size_t i = 0; i < n; ++i) {
    const P2POp &p = c.transfers[i];
    mine[i] = make_p2p_header(c, p, rank, local);
    // Headers from the sender travel as "forward", from the receiver as
    // "back", so a pair that sends both ways in one group cannot mix them.
    const bool send = p.op == CommOp::Send;
    const int in_tag = send ? kTagP2PHeaderBack : kTagP2PHeaderFwd;
    const int out_tag = send ? kTagP2PHeaderFwd : kTagP2PHeaderBack;
    t.recv(p.op, &theirs[i], kCommHeaderBytes, p.peer, in_tag, true);
    t.send(p.op, &mine[i], kCommHeaderBytes, p.peer, out_tag, true);
    transfer_of.resize(t.posted(), static_cast<int64_t>(i));
  }
  t.wait([&](size_t request) {
    const int64_t i = transfer_of[request];
    if (i < 0 || --headers_left[static_cast<size_t>(i)] > 0)
      return;
    check_pair(static_cast<size_t>(i));
    post_ready_data();
  });
  if (!errors.empty()) {
    if (!local.empty())
      throw Error(local);
    throw Error(title + ": " + errors);
  }
  std::lock_guard<std::mutex> lock(mutex_);
  for (const P2POp &p : c.transfers)
    counters_[static_cast<int>(p.op)].calls += 1;
}

}  // namespace detail
}  // namespace dsrt

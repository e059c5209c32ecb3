// The MPI ring transport's internals, shared by its files (not installed):
// an engine per communicator (its MPI communicator, communication thread,
// counters and failure state), the operations it queues, the 128-byte
// header every operation starts with, and the polled MPI requests.
//
// Threading: communication threads (one detail::Worker per communicator)
// and the world's heartbeat thread make the MPI calls, apart from MPI_Init_thread / MPI_Comm_dup when the
// world is created and MPI_Comm_free / MPI_Finalize when a communicator is
// destroyed. Every MPI call holds one process-wide mutex (mpi_mutex), so
// that the threads of several communicators (the world and the ones split
// from it) never call MPI at the same time: MPI_THREAD_SERIALIZED is enough.
// No call that blocks is made under that mutex: a split duplicates its
// parent's MPI communicator with MPI_Comm_idup and polls it like a message.
// Operations are queued in issue order and run one at a time; the thread
// polls its requests with MPI_Test (MPI makes progress inside those calls),
// backing off to short sleeps when nothing moves, and gives up after
// CommOptions::timeout_s without progress.
//
// Every operation starts with a header exchange: each rank sends a 128-byte
// description of its call to every other rank (collectives) or to its peer
// (point to point). All ranks see the same headers, so they reach the same
// verdict: a disagreement or a rank's local error fails the operation on
// every rank before any payload moves, and the communicator stays usable.
#ifndef DSRT_SRC_MPI_RING_H
#define DSRT_SRC_MPI_RING_H

#include "dsrt/comm.h"
#include "dsrt/ring.h"
#include "dsrt/transport.h"

#include "async.h"
#include "health.h"
#include "internal.h"

#ifdef DSRT_HAVE_MPI
// The C API only: the deprecated C++ bindings are not used.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#endif

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace dsrt {
namespace detail {

inline int mod(int64_t a, int n) { return static_cast<int>(((a % n) + n) % n); }

enum Tag : int {
  kTagCollHeader = 101,
  kTagCollData = 102,
  kTagP2PHeaderFwd = 103,   // sender to receiver
  kTagP2PHeaderBack = 104,  // receiver to sender
  kTagP2PData = 105,
  kTagHeartbeat = 106,  // on the heartbeat's own communicator
};
constexpr uint32_t kMagic = 0x44535254;                // "DSRT"
constexpr int64_t kMaxMessage = int64_t(1) << 30;      // MPI counts are int
constexpr uint8_t kFlagLocalError = 1;
constexpr uint8_t kFlagShape = 2;  // point to point: `note` holds the tensor's shape
// The header's op of Communicator::split, which is no CommOp: it is not
// counted.
constexpr uint8_t kOpSplit = 100;

// Held by every MPI call (see the top of this file).
inline std::mutex &mpi_mutex() {
  static std::mutex m;
  return m;
}

struct Header {
  uint32_t magic = kMagic;
  uint8_t op = 0, dtype = 0, reduce = 0, flags = 0;
  int32_t root = 0;
  int32_t rank = 0;
  uint64_t seq = 0;
  int64_t count = 0;
  char note[96] = {};  // the start of a rank's local error
};
static_assert(sizeof(Header) == kCommHeaderBytes, "the header is counted as kCommHeaderBytes");

inline const char *reduce_name(ReduceOp op) {
  switch (op) {
  case ReduceOp::Sum: return "sum";
  case ReduceOp::Mean: return "average";
  case ReduceOp::Max: return "max";
  case ReduceOp::Prod: return "prod";  // refused by Communicator
  }
  return "unknown";
}

inline bool is_reducible(DType d) { return d != DType::Bool; }

inline bool overlaps(const Tensor &a, const Tensor &b) {
  if (a.nbytes() == 0 || b.nbytes() == 0)
    return false;
  auto pa = reinterpret_cast<uintptr_t>(a.data), pb = reinterpret_cast<uintptr_t>(b.data);
  return pa < pb + b.nbytes() && pb < pa + a.nbytes();
}

inline double env_timeout() {
  const char *text = std::getenv("DSRT_COMM_TIMEOUT");
  if (!text || !*text)
    return CommOptions().timeout_s;
  char *end = nullptr;
  double v = std::strtod(text, &end);
  if (end == text || *end != '\0' || !(v > 0))
    throw Error(std::string("dsrt::Communicator: DSRT_COMM_TIMEOUT=") + text +
                " is not a positive number of seconds");
  return v;
}

// The process count an MPI launcher announces, or 0 when there is none.
inline int launcher_size() {
  for (const char *name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", "MV2_COMM_WORLD_SIZE"})
    if (const char *v = std::getenv(name))
      return std::max(1, std::atoi(v));
  // PMIx launchers set the rank but not always the size.
  if (std::getenv("PMIX_RANK") || std::getenv("PMI_RANK"))
    return 1;
  return 0;
}



// One operation as issued: validated on the issuing thread, run on the
// communication thread.
struct SplitResult;

struct Call {
  CommOp op = CommOp::Barrier;
  bool p2p = false;
  // Communicator::split: the header's op is kOpSplit, root the color and
  // count the key; the new engine lands in split_result.
  bool split = false;
  std::shared_ptr<SplitResult> split_result;
  ReduceOp reduce = ReduceOp::Sum;
  Tensor in, out;
  int root = 0;
  int64_t count = 0;  // the element count headers compare
  std::vector<P2POp> transfers;
  std::string local_error;
  CommHooks hooks;
  CommOptions options;
  uint64_t seq = 0;
};

#ifdef DSRT_HAVE_MPI
using MpiRequest = MPI_Request;
#else
using MpiRequest = int;
#endif

// DSRT_HEARTBEAT_TIMEOUT, seconds (default 20; 0: no heartbeat).
double env_heartbeat_timeout();
// "world rank 3 (pp=1, dp=1), last reported: step 4: micro_step; in
// all_gather ..." from the heartbeat, or "world rank 3" without one.
std::string describe_world_rank(int world_rank);

#ifdef DSRT_HAVE_MPI
// The world's heartbeat (mpi_ring_heartbeat.cpp): a thread that beats to
// every other rank and stops the job when one goes silent. Its destructor
// says goodbye and returns once every rank has (or stops the job when one
// dies meanwhile), so that MPI_Finalize does not wait on a lost rank.
class Heartbeat {
public:
  Heartbeat(MPI_Comm world, int rank, int size, double timeout_s);
  ~Heartbeat();
  std::string describe(int world_rank) const;

private:
  // `who`: its identity ("world rank 3 (pp=1, dp=1)"); `what`: what it
  // last reported doing, "" before its first beat.
  void report(int world_rank, std::string &who, std::string &what) const;
  using Clock = std::chrono::steady_clock;
  struct Message {
    uint32_t magic = 0;
    uint8_t bye = 0, failed = 0;  // failed: a goodbye after an error
    uint64_t seq = 0;
    char phase[health::kTextBytes] = {}, operation[health::kTextBytes] = {};
  };
  struct Peer {
    MPI_Request recv = MPI_REQUEST_NULL, send = MPI_REQUEST_NULL;
    Message in, out, last;
    Clock::time_point last_heard, failed_at;
    bool bye = false, bye_sent = false, failed = false;
  };
  void loop();
  void fill(Message &m, bool bye);

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_, size_;
  double timeout_s_, interval_s_, failed_grace_s_;
  std::vector<Peer> peers_;
  uint64_t sent_ = 0;
  mutable std::mutex reports_mutex_;  // peers_[*].last
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};
#endif

class CommEngine {
public:
  // The world.
  CommEngine();
  // A communicator split from another: `members[i]` is the rank, in `comm`
  // (a duplicate of the parent's MPI communicator), of this one's rank i.
  CommEngine(int rank, int size, bool mpi, std::vector<int> members, const CommOptions &options
#ifdef DSRT_HAVE_MPI
             , MPI_Comm comm
#endif
  );
  ~CommEngine();

  int rank = 0, size = 1;
  bool mpi = false;
  // The MPI rank of this communicator's rank `peer`.
  int mpi_peer(int peer) const {
    return members_.empty() ? peer : members_[static_cast<size_t>(peer)];
  }

  Request issue(Stream &stream, Call call);

  CommCounters counters(CommOp op) const {
    std::lock_guard<std::mutex> lock(mutex_);
    return counters_[static_cast<int>(op)];
  }
  void reset_counters() {
    std::lock_guard<std::mutex> lock(mutex_);
    for (CommCounters &c : counters_)
      c = CommCounters();
  }
  void set_options(const CommOptions &o) {
    std::lock_guard<std::mutex> lock(mutex_);
    options_ = o;
  }
  CommOptions options() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return options_;
  }
  std::string failure() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return failure_;
  }

  // "world rank 3 (pp=1, dp=1), last reported: ...": a peer of this
  // communicator as the messages name it.
  std::string peer_text(int peer) const;

  void account(CommOp op, bool send, bool header, int64_t bytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    CommCounters &c = counters_[static_cast<int>(op)];
    (header ? (send ? c.header_bytes_sent : c.header_bytes_received)
            : (send ? c.bytes_sent : c.bytes_received)) += bytes;
  }
  // The communicator is unusable: records why and throws it, or, unless
  // DSRT_COMM_ABORT=0, stops the whole job with it (a job whose
  // communicator failed cannot go on, and MPI_Finalize would wait for the
  // rank that failed).
  [[noreturn]] void fail(const std::string &message);

#ifdef DSRT_HAVE_MPI
  MPI_Comm comm = MPI_COMM_NULL;
#endif

private:
  void run(Call &call, const std::string &dep_error);
  void run_collective(Call &call, const std::string &local_error);
  void run_p2p(Call &call, const std::string &local_error);
  void run_split(Call &call, const std::string &local_error);

  std::vector<int> members_;  // empty: the identity
  bool initialized_mpi_ = false;
  mutable std::mutex mutex_;  // issue order, options, counters, failure
  uint64_t next_seq_ = 0;
  CommOptions options_;
  CommCounters counters_[kNumCommOps];
  std::string failure_;
  std::vector<unsigned char> stage_[2];  // reduction partials; communication thread only
  std::unique_ptr<Worker> worker_;
#ifdef DSRT_HAVE_MPI
  std::unique_ptr<Heartbeat> heartbeat_;  // the world's, on several ranks
#endif
};


inline std::string op_title(const Call &c) {
  return std::string("dsrt::Communicator::") +
         (c.p2p ? (c.transfers.size() == 1 ? comm_op_name(c.transfers[0].op) : "send_recv")
                : comm_op_name(c.op));
}

// The requests of one operation: posts them, polls them to completion with
// a timeout, counts their bytes, and on failure cancels what is left and
// fails the communicator.
class Transfers {
public:
  Transfers(CommEngine &engine, const Call &call, std::string what)
      : engine_(engine), timeout_s_(call.options.timeout_s), what_(std::move(what)),
        counted_(!call.split) {}
  ~Transfers() { abandon(); }

  void send(CommOp op, const void *p, int64_t bytes, int peer, int tag, bool header = false) {
    post(op, const_cast<void *>(p), bytes, peer, tag, header, true);
  }
  void recv(CommOp op, void *p, int64_t bytes, int peer, int tag, bool header = false) {
    post(op, p, bytes, peer, tag, header, false);
  }
  size_t posted() const { return reqs_.size(); }
  bool done(size_t i) const { return reqs_[i].done; }

  // Polls until every posted request completed. `on_complete(i)` runs as
  // request i completes and may post more.
  void wait(const std::function<void(size_t)> &on_complete = {});
  // Forgets completed requests (all of them after wait()).
  void clear() {
    std::vector<Req> left;
    for (Req &r : reqs_)
      if (!r.done)
        left.push_back(r);
    reqs_.swap(left);
  }

private:
  struct Req {
    MpiRequest req{};
    CommOp op;
    int peer;
    int64_t bytes;
    bool header, send, done;
  };

  void post(CommOp op, void *p, int64_t bytes, int peer, int tag, bool header, bool send);
  [[noreturn]] void fail(const std::string &message) {
    abandon();
    engine_.fail(message);
  }
  void abandon();

  CommEngine &engine_;
  double timeout_s_;
  std::string what_;
  bool counted_;
  std::vector<Req> reqs_;
};

// The headers of an operation and the verdict on them (mpi_ring.cpp).
Header make_header(const Call &c, CommOp op, DType dtype, int64_t count, int rank,
                   const std::string &local);
// A point-to-point header also carries the tensor's shape, for messages.
Header make_p2p_header(const Call &c, const P2POp &p, int rank, const std::string &local);
std::string describe(const Header &h);
bool same_call(const Header &a, const Header &b);
std::string rank_list(const std::vector<int> &ranks);
// The verdict on a collective's headers, identical on every rank; throws.
void check_headers(const std::string &title, const std::vector<Header> &all, int rank,
                   const std::string &local);

// What Communicator::split hands back from the communication thread.
struct SplitResult {
  std::unique_ptr<CommEngine> engine;
};

// The world's engine: MPI when launched by an MPI launcher, else one rank.
std::unique_ptr<Transport> make_mpi_ring_world();

}  // namespace detail
}  // namespace dsrt

#endif  // DSRT_SRC_MPI_RING_H

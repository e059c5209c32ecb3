// Communicators of the cpu backend: ring collectives over MPI point-to-point
// messages, run by one communication thread per communicator.
//
// Threading: communication threads (one detail::Worker per communicator)
// make the MPI calls, apart from MPI_Init_thread / MPI_Comm_dup when the
// world is created and MPI_Comm_free / MPI_Finalize when a communicator is
// destroyed. Every MPI call holds one process-wide mutex (mpi_mutex), so
// that the threads of several communicators (the world and the ones split
// from it) never call MPI at the same time: MPI_THREAD_SERIALIZED is enough.
// No call that blocks is made under that mutex: a split duplicates its
// parent's MPI communicator with MPI_Comm_idup and polls it like a message. Operations are queued
// in issue order and run one at a time; the thread polls its requests with
// MPI_Test (MPI makes progress inside those calls), backing off to short
// sleeps when nothing moves, and gives up after CommOptions::timeout_s
// without progress.
//
// Every operation starts with a header exchange: each rank sends a 128-byte
// description of its call to every other rank (collectives) or to its peer
// (point to point). All ranks see the same headers, so they reach the same
// verdict: a disagreement or a rank's local error fails the operation on
// every rank before any payload moves, and the communicator stays usable.
#include "dsrt/comm.h"
#include "dsrt/ring.h"

#include "async.h"
#include "internal.h"

#ifdef DSRT_HAVE_MPI
// The C API only: the deprecated C++ bindings are not used.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#endif

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

namespace dsrt {

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

namespace {

int mod(int64_t a, int n) { return static_cast<int>(((a % n) + n) % n); }

// Reduction partials travel in the accumulation type: f32 for the 16-bit
// floats (so that they round once, at the end), the element type otherwise.
size_t wire_size(DType dtype) {
  return dtype == DType::F16 || dtype == DType::BF16 ? 4 : dtype_size(dtype);
}

}  // namespace

CommVolume comm_volume(CommOp op, DType dtype, int64_t total, int ranks, int rank, int root) {
  if (ranks < 1 || rank < 0 || rank >= ranks || total < 0)
    throw Error("dsrt::comm_volume: rank " + std::to_string(rank) + " of " +
                std::to_string(ranks) + " with " + std::to_string(total) +
                " elements is out of range");
  const int64_t e = static_cast<int64_t>(dtype_size(dtype));
  const int64_t w = static_cast<int64_t>(wire_size(dtype));
  const int64_t bytes = total * e;
  CommVolume v;
  ring::Bytes b;
  switch (op) {
  case CommOp::AllReduce:
    b = ring::all_reduce(e, w, total, ranks, rank);
    return {b.sent, b.received};
  case CommOp::ReduceScatter:
    b = ring::reduce_scatter(w, total, ranks, rank);
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

namespace detail {

namespace {

enum Tag : int {
  kTagCollHeader = 101,
  kTagCollData = 102,
  kTagP2PHeaderFwd = 103,   // sender to receiver
  kTagP2PHeaderBack = 104,  // receiver to sender
  kTagP2PData = 105,
};
constexpr uint32_t kMagic = 0x44535254;                // "DSRT"
constexpr int64_t kMaxMessage = int64_t(1) << 30;      // MPI counts are int
constexpr uint8_t kFlagLocalError = 1;
constexpr uint8_t kFlagShape = 2;  // point to point: `note` holds the tensor's shape
// The header's op of Communicator::split, which is no CommOp: it is not
// counted.
constexpr uint8_t kOpSplit = 100;

// Held by every MPI call (see the top of this file).
std::mutex &mpi_mutex() {
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

const char *reduce_name(ReduceOp op) {
  switch (op) {
  case ReduceOp::Sum: return "sum";
  case ReduceOp::Mean: return "average";
  case ReduceOp::Max: return "max";
  }
  return "unknown";
}

bool is_reducible(DType d) { return d != DType::Bool; }

bool overlaps(const Tensor &a, const Tensor &b) {
  if (a.nbytes() == 0 || b.nbytes() == 0)
    return false;
  auto pa = reinterpret_cast<uintptr_t>(a.data), pb = reinterpret_cast<uintptr_t>(b.data);
  return pa < pb + b.nbytes() && pb < pa + a.nbytes();
}

double env_timeout() {
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
int launcher_size() {
  for (const char *name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", "MV2_COMM_WORLD_SIZE"})
    if (const char *v = std::getenv(name))
      return std::max(1, std::atoi(v));
  // PMIx launchers set the rank but not always the size.
  if (std::getenv("PMIX_RANK") || std::getenv("PMI_RANK"))
    return 1;
  return 0;
}

}  // namespace

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

  void account(CommOp op, bool send, bool header, int64_t bytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    CommCounters &c = counters_[static_cast<int>(op)];
    (header ? (send ? c.header_bytes_sent : c.header_bytes_received)
            : (send ? c.bytes_sent : c.bytes_received)) += bytes;
  }
  [[noreturn]] void fail(const std::string &message) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (failure_.empty())
        failure_ = message;
    }
    throw Error(message);
  }

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
};

namespace {

std::string op_title(const Call &c) {
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

void Transfers::post(CommOp op, void *p, int64_t bytes, int peer, int tag, bool header,
                     bool send) {
#ifdef DSRT_HAVE_MPI
  char *bytes_p = static_cast<char *>(p);
  // Messages above kMaxMessage go as several (MPI counts are int); both
  // sides split the same way, and MPI keeps their order.
  for (int64_t at = 0; at < bytes || (bytes == 0 && at == 0); at += kMaxMessage) {
    int n = static_cast<int>(std::min(kMaxMessage, bytes - at));
    Req r{MPI_REQUEST_NULL, op, peer, n, header, send, false};
    const int to = engine_.mpi_peer(peer);
    std::unique_lock<std::mutex> lock(mpi_mutex());
    int rc = send ? MPI_Isend(bytes_p + at, n, MPI_BYTE, to, tag, engine_.comm, &r.req)
                  : MPI_Irecv(bytes_p + at, n, MPI_BYTE, to, tag, engine_.comm, &r.req);
    if (rc != MPI_SUCCESS) {
      char text[MPI_MAX_ERROR_STRING];
      int len = 0;
      MPI_Error_string(rc, text, &len);
      lock.unlock();
      fail(what_ + ": posting a " + (send ? "send to" : "receive from") + " rank " +
           std::to_string(peer) + " failed: " + std::string(text, len));
    }
    reqs_.push_back(r);
    if (bytes == 0)
      break;
  }
#else
  (void)op, (void)p, (void)bytes, (void)tag, (void)header, (void)send;
  fail(what_ + ": rank " + std::to_string(peer) +
       " cannot be reached: this libdsrt was built without MPI");
#endif
}

void Transfers::wait(const std::function<void(size_t)> &on_complete) {
#ifdef DSRT_HAVE_MPI
  using Clock = std::chrono::steady_clock;
  auto last_progress = Clock::now();
  int idle = 0;
  for (;;) {
    bool progress = false;
    for (size_t i = 0; i < reqs_.size(); ++i) {
      if (reqs_[i].done)
        continue;
      int flag = 0, got = 0;
      MPI_Status status;
      std::unique_lock<std::mutex> lock(mpi_mutex());
      int rc = MPI_Test(&reqs_[i].req, &flag, &status);
      if (rc == MPI_SUCCESS && flag && !reqs_[i].send)
        MPI_Get_count(&status, MPI_BYTE, &got);
      const Req r = reqs_[i];
      if (rc != MPI_SUCCESS) {
        char text[MPI_MAX_ERROR_STRING];
        int len = 0;
        MPI_Error_string(rc, text, &len);
        lock.unlock();
        fail(what_ + ": MPI error on a " + (r.send ? "send to" : "receive from") + " rank " +
             std::to_string(r.peer) + ": " + std::string(text, len) +
             "; the communicator is now unusable");
      }
      lock.unlock();
      if (!flag)
        continue;
      if (!r.send) {
        if (got != r.bytes)
          fail(what_ + ": received " + std::to_string(got) + " bytes from rank " +
               std::to_string(r.peer) + " where " + std::to_string(r.bytes) +
               " were expected; the communicator is now unusable");
      }
      reqs_[i].done = true;
      progress = true;
      if (counted_)
        engine_.account(r.op, r.send, r.header, r.bytes);
      if (on_complete)
        on_complete(i);
    }
    bool all = std::all_of(reqs_.begin(), reqs_.end(), [](const Req &r) { return r.done; });
    if (all)
      return;
    if (progress) {
      last_progress = Clock::now();
      idle = 0;
      continue;
    }
    double idle_s = std::chrono::duration<double>(Clock::now() - last_progress).count();
    if (idle_s > timeout_s_) {
      std::map<int, std::string> waiting;  // peer -> what
      for (const Req &r : reqs_)
        if (!r.done) {
          std::string &w = waiting[r.peer];
          std::string item = std::string(r.send ? "send" : "receive") +
                             (r.header ? " of the header" : "");
          if (w.find(item) == std::string::npos)
            w += (w.empty() ? "" : ", ") + item;
        }
      std::string list;
      for (auto &[peer, w] : waiting)
        list += (list.empty() ? "" : "; ") + std::string("rank ") + std::to_string(peer) + " (" +
                w + ")";
      char seconds[32];
      std::snprintf(seconds, sizeof seconds, "%g", timeout_s_);
      fail(what_ + ": timed out: no progress for " + seconds + " s waiting for " + list +
           ". A peer has died or hangs, or the ranks issued different operations; the "
           "communicator is now unusable");
    }
    // Spin briefly (latency), then yield, then sleep up to 200 us: several
    // ranks may share few cores with the caller's compute.
    ++idle;
    if (idle < 64)
      continue;
    if (idle < 256)
      std::this_thread::yield();
    else
      std::this_thread::sleep_for(std::chrono::microseconds(std::min(200, (idle - 255) * 5)));
  }
#else
  (void)on_complete;
  if (!reqs_.empty())
    fail(what_ + ": this libdsrt was built without MPI");
#endif
}

void Transfers::abandon() {
#ifdef DSRT_HAVE_MPI
  // Receives are cancelled so they cannot match later messages; sends are
  // released to finish (or not) on their own.
  std::lock_guard<std::mutex> lock(mpi_mutex());
  for (Req &r : reqs_)
    if (!r.done && r.req != MPI_REQUEST_NULL) {
      if (!r.send)
        MPI_Cancel(&r.req);
      MPI_Request_free(&r.req);
      r.done = true;
    }
#endif
  reqs_.clear();
}

//===--- reductions --------------------------------------------------------===//

template <typename T> struct Accum {
  using type = typename Elem<T>::compute;  // f32 for floats, the integer type otherwise
};

template <typename A> inline A combine(A a, A b, ReduceOp op) {
  if (op == ReduceOp::Max) {
    if constexpr (std::is_floating_point_v<A>) {
      if (a != a)
        return a;
      if (b != b)
        return b;
    }
    return a < b ? b : a;
  }
  if constexpr (std::is_integral_v<A>) {
    using U = std::make_unsigned_t<A>;
    return static_cast<A>(static_cast<U>(a) + static_cast<U>(b));  // wraps
  } else {
    return a + b;
  }
}

// Average divides once, at the end; integer averages truncate, as
// reduce(mean) does.
template <typename A> inline A finish(A v, ReduceOp op, int ranks) {
  return op == ReduceOp::Mean ? v / static_cast<A>(ranks) : v;
}

template <typename T> inline typename Accum<T>::type load(T v) { return Elem<T>::load(v); }
template <typename T> inline T store(typename Accum<T>::type v) {
  if constexpr (std::is_integral_v<T>)
    return v;
  else
    return Elem<T>::store(v);
}

}  // namespace

//===--- the engine --------------------------------------------------------===//

CommEngine::CommEngine() {
  options_.timeout_s = env_timeout();
  int launched = launcher_size();
#ifdef DSRT_HAVE_MPI
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (launched > 0 || initialized) {
    std::lock_guard<std::mutex> lock(mpi_mutex());
    int provided = MPI_THREAD_SINGLE;
    if (!initialized) {
      if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS)
        throw Error("dsrt::Communicator::world: MPI_Init_thread failed");
      initialized_mpi_ = true;
    } else {
      MPI_Query_thread(&provided);
    }
    if (provided < MPI_THREAD_SERIALIZED) {
      const char *names[] = {"MPI_THREAD_SINGLE", "MPI_THREAD_FUNNELED"};
      std::string got = provided == MPI_THREAD_SINGLE ? names[0] : names[1];
      if (initialized_mpi_)
        MPI_Finalize();
      throw Error("dsrt::Communicator::world: MPI provides only " + got +
                  ", but dsrt needs MPI_THREAD_SERIALIZED (its communication thread makes the "
                  "MPI calls); use an MPI library built with thread support" +
                  (initialized ? std::string(", or initialize MPI with MPI_Init_thread and "
                                             "MPI_THREAD_SERIALIZED")
                               : std::string()));
    }
    MPI_Comm_dup(MPI_COMM_WORLD, &comm);
    // Errors come back as codes and become dsrt::Error on the waiting thread.
    MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    mpi = true;
  }
#else
  if (launched > 1)
    throw Error("dsrt::Communicator::world: the job has " + std::to_string(launched) +
                " processes, but this libdsrt was built without MPI (configure it with MPI "
                "installed and DSRT_WITH_MPI=ON)");
#endif
  worker_ = std::make_unique<Worker>();
}

CommEngine::CommEngine(int rank_, int size_, bool mpi_, std::vector<int> members,
                       const CommOptions &options
#ifdef DSRT_HAVE_MPI
                       , MPI_Comm comm_
#endif
                       )
    : rank(rank_), size(size_), mpi(mpi_), members_(std::move(members)), options_(options) {
#ifdef DSRT_HAVE_MPI
  comm = comm_;
#endif
  worker_ = std::make_unique<Worker>();
}

CommEngine::~CommEngine() {
  worker_.reset();  // runs what is queued and joins the communication thread
#ifdef DSRT_HAVE_MPI
  if (!mpi)
    return;
  std::lock_guard<std::mutex> lock(mpi_mutex());
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized)
    return;
  // After a failure, abandoned requests may still reference the communicator.
  if (failure_.empty())
    MPI_Comm_free(&comm);
  if (initialized_mpi_)
    MPI_Finalize();
#endif
}

Request CommEngine::issue(Stream &stream, Call call) {
  std::lock_guard<std::mutex> lock(mutex_);
  call.options = options_;
  if (!call.p2p)
    call.seq = next_seq_++;
  // Queued under the lock, so that queue order is sequence order.
  auto task = [this, call = std::move(call)](const std::string &dep_error) mutable {
    run(call, dep_error);
  };
  return worker_->submit(&stream, std::move(task));
}

void CommEngine::run(Call &call, const std::string &dep_error) {
  const std::string title = op_title(call);
  std::string failed = failure();
  if (!failed.empty())
    throw Error(title + ": not run: the communicator failed earlier: " + failed);
  std::string local = call.local_error;
  if (local.empty() && !dep_error.empty())
    local = title + ": not run: an earlier operation on its stream failed: " + dep_error;
  // A failing `before` is reported like a bad argument: in the header, so
  // that every rank fails the collective instead of waiting for this one.
  if (local.empty() && call.hooks.before) {
    try {
      call.hooks.before();
    } catch (const std::exception &e) {
      local = e.what();
      if (local.compare(0, 5, "dsrt:") != 0)
        local = title + ": " + local;
    }
  }
  if (call.split)
    run_split(call, local);
  else if (call.p2p)
    run_p2p(call, local);
  else
    run_collective(call, local);
  if (call.hooks.after)
    call.hooks.after();
}

namespace {

Header make_header(const Call &c, CommOp op, DType dtype, int64_t count, int rank,
                   const std::string &local) {
  Header h;
  h.op = static_cast<uint8_t>(op);
  h.dtype = static_cast<uint8_t>(dtype);
  h.reduce = static_cast<uint8_t>(c.reduce);
  h.root = c.root;
  h.rank = rank;
  h.seq = c.seq;
  h.count = count;
  if (!local.empty()) {
    h.flags = kFlagLocalError;
    // Keep what follows the operation's name: the part that says what is wrong.
    std::string note = local;
    size_t colon = note.find(": ");
    if (colon != std::string::npos && note.compare(0, 5, "dsrt:") == 0)
      note = note.substr(colon + 2);
    std::strncpy(h.note, note.c_str(), sizeof h.note - 1);
  }
  return h;
}

// A point-to-point header also carries the tensor's shape, for messages.
Header make_p2p_header(const Call &c, const P2POp &p, int rank, const std::string &local) {
  Header h = make_header(c, p.op, p.tensor.dtype, p.tensor.numel(), rank, local);
  if (local.empty()) {
    h.flags = kFlagShape;
    std::strncpy(h.note, p.tensor.shape.str().c_str(), sizeof h.note - 1);
  }
  return h;
}

std::string describe(const Header &h) {
  if (h.magic != kMagic)
    return "a message that is not a dsrt header";
  if (h.op == kOpSplit)
    return "split (collective #" + std::to_string(h.seq) + ")";
  CommOp op = static_cast<CommOp>(h.op);
  if (h.op >= kNumCommOps)
    return "an unknown operation";
  std::string s = comm_op_name(op);
  if (op == CommOp::AllReduce || op == CommOp::ReduceScatter)
    s += std::string("(") + reduce_name(static_cast<ReduceOp>(h.reduce)) + ")";
  if (op != CommOp::Barrier)
    s += " of " + std::to_string(h.count) + " x " +
         dtype_name(static_cast<DType>(h.dtype));
  if (op == CommOp::Broadcast)
    s += " from rank " + std::to_string(h.root);
  if (op != CommOp::Send && op != CommOp::Recv)
    s += " (collective #" + std::to_string(h.seq) + ")";
  return s;
}

bool same_call(const Header &a, const Header &b) {
  if (a.magic != kMagic || b.magic != kMagic)
    return false;
  if (a.op != b.op || a.seq != b.seq)
    return false;
  CommOp op = static_cast<CommOp>(a.op);
  if (op == CommOp::Barrier || a.op == kOpSplit)
    return true;
  if (a.dtype != b.dtype || a.count != b.count)
    return false;
  if ((op == CommOp::AllReduce || op == CommOp::ReduceScatter) && a.reduce != b.reduce)
    return false;
  if (op == CommOp::Broadcast && a.root != b.root)
    return false;
  return true;
}

std::string rank_list(const std::vector<int> &ranks) {
  std::string s = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i)
    s += (i ? ", " : "") + std::to_string(ranks[i]);
  return s;
}

// The verdict on a collective's headers, identical on every rank; throws.
void check_headers(const std::string &title, const std::vector<Header> &all, int rank,
                   const std::string &local) {
  std::vector<int> flagged;
  for (size_t r = 0; r < all.size(); ++r)
    if (all[r].magic == kMagic && (all[r].flags & kFlagLocalError))
      flagged.push_back(static_cast<int>(r));
  if (!flagged.empty()) {
    if (!local.empty()) {
      std::vector<int> others;
      for (int r : flagged)
        if (r != rank)
          others.push_back(r);
      throw Error(local + (others.empty() ? "" : " (it also failed on " + rank_list(others) + ")"));
    }
    std::string s = title + ": failed on another rank:";
    for (int r : flagged)
      s += " rank " + std::to_string(r) + ": " + all[r].note + ";";
    s.pop_back();
    throw Error(s);
  }
  bool agree = true;
  for (const Header &h : all)
    agree = agree && same_call(h, all[0]);
  if (agree)
    return;
  // Group the ranks by what they issued.
  std::vector<std::pair<std::string, std::vector<int>>> groups;
  for (size_t r = 0; r < all.size(); ++r) {
    std::string d = describe(all[r]);
    auto it = std::find_if(groups.begin(), groups.end(), [&](auto &g) { return g.first == d; });
    if (it == groups.end())
      groups.push_back({d, {static_cast<int>(r)}});
    else
      it->second.push_back(static_cast<int>(r));
  }
  std::string s = title + ": the ranks issued different operations:";
  for (auto &[d, ranks] : groups)
    s += " " + rank_list(ranks) + ": " + d + ";";
  s.pop_back();
  throw Error(s);
}

}  // namespace

void CommEngine::run_collective(Call &c, const std::string &local) {
  const std::string title = op_title(c);
  const std::string what = title + " (collective #" + std::to_string(c.seq) + " on rank " +
                           std::to_string(rank) + " of " + std::to_string(size) + ")";
  const int N = size, r = rank;
  const DType dtype = c.op == CommOp::Barrier ? DType::F32 : c.in.dtype;

  // Header exchange with every other rank.
  std::vector<Header> all(N);
  all[r] = make_header(c, c.op, dtype, c.count, r, local);
  {
    Transfers t(*this, c, what);
    for (int p = 0; p < N; ++p)
      if (p != r) {
        t.recv(c.op, &all[p], kCommHeaderBytes, p, kTagCollHeader, true);
        t.send(c.op, &all[r], kCommHeaderBytes, p, kTagCollHeader, true);
      }
    t.wait();
  }
  check_headers(title, all, r, local);

  const int next = mod(r + 1, N), prev = mod(r - 1, N);
  auto chunk = [&](int64_t j) { return ring_chunk(c.count, N, mod(j, N)); };
  Transfers t(*this, c, what);

  // Reduce-scatter: at step k rank r sends its partial of chunk r-1-k to
  // r+1 and receives r-1's partial of chunk r-2-k, adding its own value. So
  // chunk j is summed along the ring starting at rank j+1 and ending at rank
  // j, which holds the result after N-1 steps. Returns this rank's result.
  auto reduce_scatter = [&](auto tag) -> void * {
    using T = typename decltype(tag)::type;
    using A = typename Accum<T>::type;
    const T *in = static_cast<const T *>(c.in.data);
    const size_t max_chunk = static_cast<size_t>(chunk(0).size);
    for (auto &s : stage_)
      if (s.size() < max_chunk * sizeof(A))
        s.resize(max_chunk * sizeof(A));
    A *send = reinterpret_cast<A *>(stage_[0].data());
    A *recv = reinterpret_cast<A *>(stage_[1].data());
    Chunk first = chunk(r - 1);
    for (int64_t i = 0; i < first.size; ++i)
      send[i] = load(in[first.begin + i]);
    for (int k = 0; k < N - 1; ++k) {
      Chunk cs = chunk(r - 1 - k), cr = chunk(r - 2 - k);
      if (cr.size)
        t.recv(c.op, recv, cr.size * int64_t(sizeof(A)), prev, kTagCollData);
      if (cs.size)
        t.send(c.op, send, cs.size * int64_t(sizeof(A)), next, kTagCollData);
      t.wait();
      t.clear();
      for (int64_t i = 0; i < cr.size; ++i)
        recv[i] = combine(recv[i], load(in[cr.begin + i]), c.reduce);
      std::swap(send, recv);
    }
    return send;
  };
  // Rounds this rank's reduced chunk (f32 for 16-bit floats) into `out`.
  auto store_result = [&](auto tag, const void *acc, void *out) {
    using T = typename decltype(tag)::type;
    using A = typename Accum<T>::type;
    const A *a = static_cast<const A *>(acc);
    T *o = static_cast<T *>(out);
    for (int64_t i = 0, n = chunk(r).size; i < n; ++i)
      o[i] = store<T>(finish(a[i], c.reduce, N));
  };
  // All-gather in place: at step k rank r sends chunk r-k to r+1 and
  // receives chunk r-1-k from r-1.
  auto all_gather = [&](uint8_t *out, size_t esize) {
    for (int k = 0; k < N - 1; ++k) {
      Chunk cs = chunk(r - k), cr = chunk(r - 1 - k);
      if (cr.size)
        t.recv(c.op, out + cr.begin * esize, cr.size * int64_t(esize), prev, kTagCollData);
      if (cs.size)
        t.send(c.op, out + cs.begin * esize, cs.size * int64_t(esize), next, kTagCollData);
      t.wait();
      t.clear();
    }
  };

  switch (c.op) {
  case CommOp::AllReduce:
    dispatch_numeric("all_reduce", dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      const void *acc = reduce_scatter(tag);
      store_result(tag, acc, static_cast<T *>(c.out.data) + chunk(r).begin);
      all_gather(static_cast<uint8_t *>(c.out.data), sizeof(T));
    });
    break;
  case CommOp::ReduceScatter:
    dispatch_numeric("reduce_scatter", dtype, [&](auto tag) {
      const void *acc = reduce_scatter(tag);
      store_result(tag, acc, c.out.data);
    });
    break;
  case CommOp::AllGather: {
    size_t esize = dtype_size(dtype);
    uint8_t *out = static_cast<uint8_t *>(c.out.data);
    uint8_t *mine = out + chunk(r).begin * esize;
    if (mine != c.in.data && c.in.nbytes())
      std::memcpy(mine, c.in.data, c.in.nbytes());
    all_gather(out, esize);
    break;
  }
  case CommOp::Broadcast: {
    // A pipelined chain root, root+1, ..., root-1: each rank forwards a
    // slice as soon as it has received it.
    const int pos = mod(r - c.root, N);
    if (N == 1)
      break;
    uint8_t *buf = static_cast<uint8_t *>(c.in.data);
    const int64_t bytes = static_cast<int64_t>(c.in.nbytes());
    const int64_t slice = std::clamp<int64_t>(c.options.broadcast_slice_bytes, 1, kMaxMessage);
    const int64_t slices = (bytes + slice - 1) / slice;
    auto slice_size = [&](int64_t s) { return std::min(slice, bytes - s * slice); };
    if (pos == 0) {
      for (int64_t s = 0; s < slices; ++s)
        t.send(c.op, buf + s * slice, slice_size(s), next, kTagCollData);
      t.wait();
    } else {
      for (int64_t s = 0; s < slices; ++s)
        t.recv(c.op, buf + s * slice, slice_size(s), prev, kTagCollData);
      const bool forward = pos < N - 1;
      int64_t forwarded = 0;  // slices go on in order, whatever order MPI reports
      t.wait([&](size_t) {
        while (forward && forwarded < slices && t.done(static_cast<size_t>(forwarded))) {
          t.send(c.op, buf + forwarded * slice, slice_size(forwarded), next, kTagCollData);
          ++forwarded;
        }
      });
    }
    break;
  }
  case CommOp::Barrier:
    break;  // the header exchange was the barrier
  default:
    throw Error(title + ": not a collective");
  }
  std::lock_guard<std::mutex> lock(mutex_);
  counters_[static_cast<int>(c.op)].calls += 1;
}

struct SplitResult {
  std::unique_ptr<CommEngine> engine;
};

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

//===--- the public API: validation on the issuing thread ------------------===//

using detail::Call;

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
  else if (!detail::is_reducible(in.dtype))
    error = t + "cannot reduce " + dtype_name(in.dtype) +
            " tensors (f32, f16, bf16, i64 and i32 can)";
}

}  // namespace

Communicator::Communicator() : engine_(std::make_unique<detail::CommEngine>()) {}
Communicator::Communicator(std::unique_ptr<detail::CommEngine> engine)
    : engine_(std::move(engine)) {}
Communicator::~Communicator() = default;

std::unique_ptr<Communicator> Communicator::split(Communicator &parent, int color, int key) {
  Call c;
  c.op = CommOp::Barrier;  // for the issue order only: the header says kOpSplit
  c.split = true;
  c.root = color;
  c.count = key;
  c.split_result = std::make_shared<detail::SplitResult>();
  if (color < 0)
    c.local_error = "dsrt::Communicator::split: color " + std::to_string(color) +
                    " is negative; every rank needs a group (color >= 0)";
  std::shared_ptr<detail::SplitResult> result = c.split_result;
  Stream stream;
  parent.engine_->issue(stream, std::move(c)).wait();
  if (!result->engine)
    throw Error("dsrt::Communicator::split: no communicator was made");
  return std::unique_ptr<Communicator>(new Communicator(std::move(result->engine)));
}

Communicator &Communicator::world() {
  static Communicator world;
  return world;
}

int Communicator::rank() const { return engine_->rank; }
int Communicator::size() const { return engine_->size; }
bool Communicator::uses_mpi() const { return engine_->mpi; }

Request Communicator::all_reduce(Stream &stream, const Tensor &in, const Tensor &out,
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
  if (c.local_error.empty() && in.data != out.data && detail::overlaps(in, out))
    c.local_error = "dsrt::Communicator::all_reduce: in and out overlap without being the same "
                    "tensor";
  check_data(c.local_error, title, "in", in);
  check_data(c.local_error, title, "out", out);
  return engine_->issue(stream, std::move(c));
}

Request Communicator::all_gather(Stream &stream, const Tensor &in, const Tensor &out,
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
  else if (detail::overlaps(in, out) &&
           in.data != static_cast<uint8_t *>(out.data) + mine.begin * dtype_size(out.dtype))
    c.local_error = t + "in overlaps out without being this rank's chunk of it";
  check_data(c.local_error, "all_gather", "in", in);
  check_data(c.local_error, "all_gather", "out", out);
  return engine_->issue(stream, std::move(c));
}

Request Communicator::reduce_scatter(Stream &stream, const Tensor &in, const Tensor &out,
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
  if (c.local_error.empty() && detail::overlaps(in, out) &&
      out.data != static_cast<uint8_t *>(in.data) + mine.begin * dtype_size(in.dtype))
    c.local_error = t + "out overlaps in without being this rank's chunk of it";
  check_data(c.local_error, "reduce_scatter", "in", in);
  check_data(c.local_error, "reduce_scatter", "out", out);
  return engine_->issue(stream, std::move(c));
}

Request Communicator::broadcast(Stream &stream, const Tensor &buffer, int root) {
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

Request Communicator::send_recv(Stream &stream, const std::vector<P2POp> &ops) {
  Call c;
  c.p2p = true;
  c.transfers = ops;
  const std::string title = detail::op_title(c);
  // A peer that does not exist has nobody to tell: this one is thrown here.
  for (const P2POp &p : ops) {
    if (p.op != CommOp::Send && p.op != CommOp::Recv)
      throw Error(title + ": a transfer must be Send or Recv, not " + comm_op_name(p.op));
    if (p.peer < 0 || p.peer >= size() || p.peer == rank())
      throw Error(title + ": peer " + std::to_string(p.peer) + " is not another rank of this "
                  "communicator (rank " + std::to_string(rank()) + " of " +
                  std::to_string(size()) + ")");
    check_data(c.local_error, comm_op_name(p.op), "tensor", p.tensor);
  }
  if (ops.empty())
    return Request();
  return engine_->issue(stream, std::move(c));
}

Request Communicator::send(Stream &stream, const Tensor &tensor, int peer) {
  return send_recv(stream, {P2POp{CommOp::Send, tensor, peer}});
}

Request Communicator::recv(Stream &stream, const Tensor &tensor, int peer) {
  return send_recv(stream, {P2POp{CommOp::Recv, tensor, peer}});
}

Request Communicator::barrier(Stream &stream) {
  Call c;
  c.op = CommOp::Barrier;
  return engine_->issue(stream, std::move(c));
}

CommCounters Communicator::counters(CommOp op) const { return engine_->counters(op); }
void Communicator::reset_counters() { engine_->reset_counters(); }

void Communicator::set_options(const CommOptions &options) {
  if (!(options.timeout_s > 0))
    throw Error("dsrt::Communicator::set_options: timeout_s must be > 0");
  if (options.broadcast_slice_bytes < 1)
    throw Error("dsrt::Communicator::set_options: broadcast_slice_bytes must be >= 1");
  engine_->set_options(options);
}

CommOptions Communicator::options() const { return engine_->options(); }
std::string Communicator::failure() const { return engine_->failure(); }

}  // namespace dsrt

// The MPI ring transport's engine: MPI start-up and shutdown, the
// communication thread's queue, the polled requests with their timeout and
// byte counts, and the header exchange every operation starts with (see
// mpi_ring.h). The algorithms are in mpi_ring_collectives.cpp and
// mpi_ring_groups.cpp.
#include "mpi_ring.h"

#include <chrono>
#include <map>
#include <cstring>
#include <thread>
#include <unistd.h>

namespace dsrt {
namespace detail {

//===--- polled requests ---------------------------------------------------===//

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
                w + "; it is " + engine_.peer_text(peer) + ")";
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

//===--- the engine --------------------------------------------------------===//

namespace {
#ifdef DSRT_HAVE_MPI
// The job abort of an MPI job: the launcher ends every rank.
void mpi_abort(int status) {
  // Another thread may hold the MPI mutex for a moment (no call blocks
  // under it); a failure reported while holding it must not wait forever.
  std::unique_lock<std::mutex> lock(mpi_mutex(), std::defer_lock);
  for (int i = 0; i < 2000 && !lock.try_lock(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  MPI_Abort(MPI_COMM_WORLD, status);
  _exit(status);
}
#endif
}  // namespace

std::string CommEngine::peer_text(int peer) const { return describe_world_rank(mpi_peer(peer)); }

void CommEngine::fail(const std::string &message) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (failure_.empty())
      failure_ = message;
  }
  if (mpi && health::abort_on_comm_failure())
    health::abort_job(message + "; stopping the job");
  throw Error(message);
}

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
    health::set_world_rank(rank);
    health::set_identity("world rank " + std::to_string(rank));
    health::set_job_abort(mpi_abort);
    const double heartbeat = env_heartbeat_timeout();
    if (size > 1 && heartbeat > 0)
      heartbeat_ = std::make_unique<Heartbeat>(comm, rank, size, heartbeat);
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
  // Returns once every rank is leaving too: MPI_Finalize then waits for
  // no one who will not come.
  heartbeat_.reset();
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
  health::set_operation(title.substr(title.rfind(':') + 1) +
                        (call.p2p ? std::string() : " (collective #" + std::to_string(call.seq) +
                                                        " of " + std::to_string(size) +
                                                        " ranks)"));
  struct ClearOperation {
    ~ClearOperation() { health::set_operation(""); }
  } clear;
  if (call.split)
    run_split(call, local);
  else if (call.p2p)
    run_p2p(call, local);
  else
    run_collective(call, local);
  if (call.hooks.after)
    call.hooks.after();
}

//===--- headers -----------------------------------------------------------===//

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

}  // namespace detail
}  // namespace dsrt

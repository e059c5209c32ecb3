// The MPI ring transport's heartbeat: a thread of the world's engine that
// tells every other rank, once per interval, that this process is alive
// and what it is doing, and watches that every other rank does the same.
// A rank silent for longer than DSRT_HEARTBEAT_TIMEOUT (a process killed,
// stopped, or on a node that is gone) stops the job at once, with a message
// naming it, its grid coordinates and what it last reported. The heartbeat
// runs beside the compute and the collectives, so a long step is not
// silence; a rank that is alive but stuck inside a step is caught by the
// collectives' own timeout (DSRT_COMM_TIMEOUT). See docs/runtime.md, "A
// failed rank stops the job".
#include "health.h"
#include "mpi_ring.h"

#include <chrono>
#include <cstring>
#include <thread>

namespace dsrt {
namespace detail {

#ifdef DSRT_HAVE_MPI
namespace {

constexpr uint32_t kHeartbeatMagic = 0x44534842;  // "DSHB"

std::atomic<Heartbeat *> &world_heartbeat() {
  static std::atomic<Heartbeat *> h{nullptr};
  return h;
}

}  // namespace
#endif

double env_heartbeat_timeout() {
  const char *text = std::getenv("DSRT_HEARTBEAT_TIMEOUT");
  if (!text || !*text) return 20;
  char *end = nullptr;
  double v = std::strtod(text, &end);
  if (end == text || *end != '\0' || !(v >= 0))
    throw Error(std::string("dsrt::Communicator: DSRT_HEARTBEAT_TIMEOUT=") + text +
                " is not a number of seconds >= 0 (0 turns the heartbeat off)");
  return v;
}

std::string describe_world_rank(int world_rank) {
#ifdef DSRT_HAVE_MPI
  if (Heartbeat *h = world_heartbeat().load()) return h->describe(world_rank);
#endif
  return health::identity_of(world_rank);
}

#ifdef DSRT_HAVE_MPI

Heartbeat::Heartbeat(MPI_Comm world, int rank, int size, double timeout_s)
    : rank_(rank), size_(size), timeout_s_(timeout_s),
      interval_s_(std::min(1.0, std::max(0.02, timeout_s / 10))),
      failed_grace_s_(std::min(5.0, timeout_s / 2)), peers_(size) {
  MPI_Comm_dup(world, &comm_);
  MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
  const auto now = Clock::now();
  for (int p = 0; p < size_; ++p) {
    Peer &peer = peers_[p];
    peer.last_heard = now;
    if (p == rank_) continue;
    MPI_Irecv(&peer.in, sizeof(Message), MPI_BYTE, p, kTagHeartbeat, comm_, &peer.recv);
  }
  world_heartbeat().store(this);
  thread_ = std::thread([this] { loop(); });
}

Heartbeat::~Heartbeat() {
  stopping_.store(true);
  if (thread_.joinable()) thread_.join();
  world_heartbeat().store(nullptr);
  std::lock_guard<std::mutex> lock(mpi_mutex());
  for (Peer &peer : peers_) {
    if (peer.recv != MPI_REQUEST_NULL) {
      MPI_Cancel(&peer.recv);
      MPI_Request_free(&peer.recv);
    }
    if (peer.send != MPI_REQUEST_NULL) MPI_Request_free(&peer.send);
  }
  MPI_Comm_free(&comm_);
}

std::string Heartbeat::describe(int world_rank) const {
  std::string who, what;
  report(world_rank, who, what);
  return what.empty() ? who : who + ", last reported: " + what;
}

void Heartbeat::report(int world_rank, std::string &who, std::string &what) const {
  who = health::identity_of(world_rank);
  what.clear();
  if (world_rank < 0 || world_rank >= size_) return;
  std::lock_guard<std::mutex> lock(reports_mutex_);
  const Message &m = peers_[static_cast<size_t>(world_rank)].last;
  if (m.magic != kHeartbeatMagic) return;
  what = m.phase;
  if (m.operation[0]) what += std::string(what.empty() ? "in " : "; in ") + m.operation;
}

void Heartbeat::fill(Message &m, bool bye) {
  m.magic = kHeartbeatMagic;
  m.bye = bye ? 1 : 0;
  m.seq = ++sent_;
  char identity[health::kTextBytes];  // peers know it from the layout
  health::snapshot(identity, m.phase, m.operation);
  // A failed rank's goodbye carries its error in place of the operation.
  m.failed = bye && health::failure(m.operation) ? 1 : 0;
}

void Heartbeat::loop() {
  auto last_beat = Clock::now() - std::chrono::hours(1);
  for (;;) {
    const bool stopping = stopping_.load();
    const auto now = Clock::now();
    const bool beat = std::chrono::duration<double>(now - last_beat).count() >= interval_s_;
    bool said_bye = true;  // to every peer
    std::string lost;  // an MPI error about a peer
    int lost_peer = -1;
    bool all_bye = true, sends_done = true;
    {
      std::lock_guard<std::mutex> lock(mpi_mutex());
      for (int p = 0; p < size_; ++p) {
        if (p == rank_) continue;
        Peer &peer = peers_[p];
        if (peer.recv != MPI_REQUEST_NULL) {
          int flag = 0;
          int rc = MPI_Test(&peer.recv, &flag, MPI_STATUS_IGNORE);
          if (rc != MPI_SUCCESS && lost.empty()) {
            char text[MPI_MAX_ERROR_STRING];
            int len = 0;
            MPI_Error_string(rc, text, &len);
            lost = std::string(text, static_cast<size_t>(len));
            lost_peer = p;
          } else if (flag) {
            {
              std::lock_guard<std::mutex> reports(reports_mutex_);
              if (peer.in.magic == kHeartbeatMagic) peer.last = peer.in;
            }
            peer.last_heard = now;
            peer.bye = peer.in.bye != 0;
            if (peer.bye && peer.in.failed) {
              peer.failed = true;
              peer.failed_at = now;
            }
            if (!peer.bye)
              MPI_Irecv(&peer.in, sizeof(Message), MPI_BYTE, p, kTagHeartbeat, comm_, &peer.recv);
          }
        }
        all_bye = all_bye && peer.bye;
        if (peer.send != MPI_REQUEST_NULL) {
          int flag = 0;
          MPI_Test(&peer.send, &flag, MPI_STATUS_IGNORE);
        }
        // One beat in flight per peer: a peer that does not take them
        // (stopped) does not pile them up. Beats go to every peer until
        // this rank's goodbye, also to peers that left: they wait for it.
        if (!peer.bye_sent && peer.send == MPI_REQUEST_NULL && (beat || stopping)) {
          fill(peer.out, stopping);
          MPI_Isend(&peer.out, sizeof(Message), MPI_BYTE, p, kTagHeartbeat, comm_, &peer.send);
          peer.bye_sent = stopping;
        }
        said_bye = said_bye && peer.bye_sent;
        sends_done = sends_done && peer.send == MPI_REQUEST_NULL;
      }
    }
    if (beat) last_beat = now;
    if (lost_peer >= 0)
      health::abort_job("dsrt: lost " + describe(lost_peer) + " (MPI error on its heartbeat: " +
                        lost + "; noticed by " + health::identity() + "); stopping the job");
    for (int p = 0; p < size_; ++p) {
      if (p == rank_ || peers_[p].bye) continue;
      const double silent = std::chrono::duration<double>(now - peers_[p].last_heard).count();
      if (silent > timeout_s_) {
        char seconds[64];
        std::snprintf(seconds, sizeof seconds, "%.1f s (DSRT_HEARTBEAT_TIMEOUT=%g)", silent,
                      timeout_s_);
        std::string who, what;
        report(p, who, what);
        health::abort_job("dsrt: " + who + " has sent no heartbeat for " + seconds +
                          ": it died, was stopped or hangs" +
                          (what.empty() ? std::string() : "; it last reported " + what) +
                          " (noticed by " + health::identity() + "); stopping the job");
      }
    }
    // A rank that left after an error while this one goes on: the job
    // cannot finish (its collectives would wait for that rank). A grace
    // period lets a rank that failed the same operation leave by itself.
    for (int p = 0; p < size_ && !stopping; ++p) {
      const Peer &peer = peers_[p];
      if (p == rank_ || !peer.failed) continue;
      if (std::chrono::duration<double>(now - peer.failed_at).count() < failed_grace_s_) continue;
      health::abort_job("dsrt: " + health::identity_of(p) + " failed: " + peer.last.operation +
                        " (noticed by " + health::identity() + ", still running); stopping the job");
    }
    // Leaving: after every peer left too (a peer still working keeps
    // beating, and one that dies is caught above), so that MPI_Finalize
    // never waits for a rank that will not come.
    if (stopping && said_bye && all_bye && sends_done) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(stopping ? 2 : 20));
  }
}

#endif  // DSRT_HAVE_MPI

}  // namespace detail
}  // namespace dsrt

// The job's health, process-wide: this rank's identity and activity, the
// job abort and the stop signals (health.h).
#include "health.h"

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <mutex>
#include <unistd.h>

namespace dsrt {
namespace health {

namespace {

// A text that a signal handler or another thread can read while it is
// rewritten: writers (serialized by a mutex) make the counter odd while
// they copy; a reader retries until it read the same even counter before
// and after.
class Text {
public:
  void set(const std::string &text) {
    std::lock_guard<std::mutex> lock(writers_);
    const size_t n = std::min(text.size(), kTextBytes - 1);
    seq_.fetch_add(1, std::memory_order_acq_rel);
    for (size_t i = 0; i < kTextBytes; ++i)
      chars_[i].store(i < n ? text[i] : '\0', std::memory_order_relaxed);
    seq_.fetch_add(1, std::memory_order_release);
  }
  // Copies into `out` (kTextBytes); after a few failed tries, whatever it
  // read (a text being rewritten at that very moment).
  void read(char *out) const {
    for (int attempt = 0; attempt < 64; ++attempt) {
      const uint32_t before = seq_.load(std::memory_order_acquire);
      for (size_t i = 0; i < kTextBytes; ++i) out[i] = chars_[i].load(std::memory_order_relaxed);
      std::atomic_thread_fence(std::memory_order_acquire);
      if (!(before & 1) && seq_.load(std::memory_order_relaxed) == before) break;
    }
    out[kTextBytes - 1] = '\0';
  }
  std::string get() const {
    char buffer[kTextBytes];
    read(buffer);
    return buffer;
  }

private:
  std::mutex writers_;
  std::atomic<uint32_t> seq_{0};
  std::atomic<char> chars_[kTextBytes] = {};
};

Text &identity_text() {
  static Text t;
  return t;
}
Text &phase_text() {
  static Text t;
  return t;
}
Text &operation_text() {
  static Text t;
  return t;
}
Text &failure_text() {
  static Text t;
  return t;
}
std::atomic<bool> has_failed{false};

std::atomic<AbortFn> job_abort{nullptr};
// Set once abort_job runs: the launcher's SIGTERM that follows is no news.
std::atomic<bool> aborting{false};
std::atomic<int64_t> current_step{0};

// The files a stop signal removes: fixed slots, read by the handler.
constexpr int kStopFiles = 8;
constexpr size_t kPathBytes = 4096;
struct StopFile {
  std::atomic<bool> used{false};
  char path[kPathBytes] = {};
};
StopFile stop_files[kStopFiles];
std::mutex stop_files_mutex;

void write_all(const char *text) {
  size_t n = std::strlen(text);
  while (n > 0) {
    ssize_t w = ::write(STDERR_FILENO, text, n);
    if (w <= 0) return;
    text += w;
    n -= static_cast<size_t>(w);
  }
}

void remove_stop_files() {
  for (StopFile &f : stop_files)
    if (f.used.load(std::memory_order_acquire)) ::unlink(f.path);
}

extern "C" void on_stop_signal(int signal) {
  // Async-signal-safe only: fixed buffers, write(2), unlink(2), _exit(2).
  // After an abort, or after this rank failed and said so, the launcher's
  // SIGTERM is no news.
  if (aborting.load() || has_failed.load()) {
    remove_stop_files();
    _exit(1);
  }
  char identity_now[kTextBytes], phase_now[kTextBytes], operation_now[kTextBytes];
  snapshot(identity_now, phase_now, operation_now);
  write_all("error: dsrt: ");
  write_all(identity_now[0] ? identity_now : "this rank");
  write_all(signal == SIGINT ? ": stopped by SIGINT" : ": stopped by SIGTERM");
  if (phase_now[0]) {
    write_all(" at ");
    write_all(phase_now);
  }
  if (operation_now[0]) {
    write_all(phase_now[0] ? ", in " : " in ");
    write_all(operation_now);
  }
  write_all("; a checkpoint being written is abandoned, the committed ones are intact\n");
  remove_stop_files();
  _exit(128 + signal);
}

}  // namespace

void set_identity(const std::string &text) { identity_text().set(text); }
std::string identity() { return identity_text().get(); }
namespace {
struct Layout {
  std::mutex mutex;
  std::vector<std::string> names;
  std::vector<int64_t> sizes;
};
Layout &layout() {
  static Layout l;
  return l;
}
}  // namespace

void set_layout(const std::vector<std::string> &names, const std::vector<int64_t> &sizes,
                int world_rank) {
  {
    Layout &l = layout();
    std::lock_guard<std::mutex> lock(l.mutex);
    l.names = names;
    l.sizes = sizes;
  }
  set_world_rank(world_rank);
  set_identity(identity_of(world_rank));
}

std::string identity_of(int world_rank) {
  std::string s = "world rank " + std::to_string(world_rank);
  Layout &l = layout();
  std::lock_guard<std::mutex> lock(l.mutex);
  if (l.names.empty()) return s;
  std::string coordinates;
  int64_t stride = 1;
  std::vector<int64_t> coordinate(l.sizes.size());
  for (size_t a = l.sizes.size(); a-- > 0;) {
    coordinate[a] = (world_rank / stride) % std::max<int64_t>(1, l.sizes[a]);
    stride *= std::max<int64_t>(1, l.sizes[a]);
  }
  for (size_t a = 0; a < l.names.size(); ++a)
    coordinates += (a ? ", " : "") + l.names[a] + "=" + std::to_string(coordinate[a]);
  return s + " (" + coordinates + ")";
}

namespace {
std::atomic<int> own_world_rank{0};

struct FailPoint {
  bool set = false;
  int rank = -1;
  int64_t step = -1;
  std::string point;
};

// DSRT_TEST_FAIL_RANK, parsed once.
const FailPoint &fail_point() {
  static const FailPoint parsed = [] {
    FailPoint f;
    const char *text = std::getenv("DSRT_TEST_FAIL_RANK");
    if (!text || !*text) return f;
    char point[32] = {0};
    long long rank = -1, step = -1;
    int used = 0;
    if (std::sscanf(text, "%lld:%lld:%31[a-z]%n", &rank, &step, point, &used) != 3 ||
        text[used] != '\0' || rank < 0 || step < 1 ||
        (std::strcmp(point, "compute") != 0 && std::strcmp(point, "collective") != 0 &&
         std::strcmp(point, "save") != 0)) {
      std::fprintf(stderr,
                   "error: DSRT_TEST_FAIL_RANK='%s' is not RANK:STEP:POINT (a world rank, a "
                   "step >= 1, and compute, collective or save)\n",
                   text);
      std::_Exit(2);
    }
    f.set = true;
    f.rank = static_cast<int>(rank);
    f.step = step;
    f.point = point;
    return f;
  }();
  return parsed;
}
}  // namespace

void set_world_rank(int world_rank) { own_world_rank.store(world_rank); }
int world_rank() { return own_world_rank.load(); }

void test_fail_point(const char *point, int64_t step) {
  const FailPoint &f = fail_point();
  if (!f.set || f.rank != own_world_rank.load() || f.step != step || f.point != point) return;
  std::fprintf(stderr, "dsrt: world rank %d killing itself at %s of step %lld (DSRT_TEST_FAIL_RANK)\n",
               f.rank, point, static_cast<long long>(step));
  std::fflush(stderr);
  raise(SIGKILL);
}

void mark_step(int64_t step) {
  using MarkFn = void (*)(long long);
  static const MarkFn mark =
      reinterpret_cast<MarkFn>(dlsym(RTLD_DEFAULT, "dsrt_fake_cuda_step"));
  if (mark) mark(static_cast<long long>(step));
}

void set_step(int64_t step) { current_step.store(step); }
void set_phase(const std::string &text) {
  const int64_t step = current_step.load();
  phase_text().set(step > 0 ? "step " + std::to_string(step) + ": " + text : text);
}
std::string phase() { return phase_text().get(); }
void set_operation(const std::string &text) {
  operation_text().set(text);
  if (!text.empty()) test_fail_point("collective", current_step.load());
}
std::string operation() { return operation_text().get(); }

std::string activity() {
  const std::string p = phase(), o = operation();
  if (p.empty()) return o.empty() ? "" : "in " + o;
  return o.empty() ? p : p + "; in " + o;
}

void snapshot(char *identity_out, char *phase_out, char *operation_out) {
  identity_text().read(identity_out);
  phase_text().read(phase_out);
  operation_text().read(operation_out);
}

void set_failed(const std::string &why) {
  failure_text().set(why.empty() ? "failed" : why);
  has_failed.store(true);
}

bool failure(char *out) {
  if (!has_failed.load()) return false;
  failure_text().read(out);
  return true;
}

void set_job_abort(AbortFn abort) { job_abort.store(abort); }

bool abort_on_comm_failure() {
  const char *v = std::getenv("DSRT_COMM_ABORT");
  return !(v && std::strcmp(v, "0") == 0);
}

void abort_job(const std::string &message) {
  // One message per process, even when several threads find the failure.
  if (aborting.exchange(true)) {
    for (;;) pause();  // the first caller ends the process
  }
  std::string line = "error: " + message + "\n";
  write_all(line.c_str());
  remove_stop_files();
  if (AbortFn abort = job_abort.load()) abort(1);
  _exit(1);
}

void install_stop_handlers() {
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  sigaddset(&action.sa_mask, SIGINT);
  sigaddset(&action.sa_mask, SIGTERM);
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
}

void remove_on_stop(const std::string &path) {
  if (path.empty() || path.size() >= kPathBytes) return;
  std::lock_guard<std::mutex> lock(stop_files_mutex);
  for (StopFile &f : stop_files)
    if (!f.used.load(std::memory_order_acquire)) {
      f.path[path.copy(f.path, path.size())] = '\0';
      f.used.store(true, std::memory_order_release);
      return;
    }
}

void keep_on_stop(const std::string &path) {
  std::lock_guard<std::mutex> lock(stop_files_mutex);
  for (StopFile &f : stop_files)
    if (f.used.load(std::memory_order_acquire) && path == f.path)
      f.used.store(false, std::memory_order_release);
}

}  // namespace health
}  // namespace dsrt

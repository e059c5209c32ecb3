// The job's health, process-wide (not installed): what this rank is doing
// (for the heartbeat its peers watch and for the messages that name a
// failed rank), how the whole job is stopped when one rank fails, and the
// stop signals (docs/runtime.md, "A failed rank stops the job").
//
// Everything here may be read from a signal handler or another thread: the
// texts live in fixed buffers written under a sequence counter, never
// allocated.
#ifndef DSRT_SRC_HEALTH_H
#define DSRT_SRC_HEALTH_H

#include <cstdint>
#include <string>
#include <vector>

namespace dsrt {
namespace health {

// Longest text a rank reports about itself (identity, phase, operation);
// longer ones are cut.
constexpr size_t kTextBytes = 256;

// "world rank 3 (pp=1, dp=1)": set when the world, then a grid, is made.
void set_identity(const std::string &text);
std::string identity();
// The grid's axes (names and sizes, the last axis fastest): sets this
// rank's identity, and lets identity_of name any rank of the job.
void set_layout(const std::vector<std::string> &names, const std::vector<int64_t> &sizes,
                int world_rank);
// This process's rank in the world (0 until the transport sets it).
void set_world_rank(int world_rank);
int world_rank();
// "world rank 3 (pp=1, dp=1)" for any rank ("world rank 3" before a grid).
std::string identity_of(int world_rank);
// What the rank's main thread does: "step 4: micro_step", "step 6: saving
// checkpoint step_6". The runners set the step (0: before the first) and
// the phase within it, which is prefixed with "step N: ".
void set_step(int64_t step);
void set_phase(const std::string &text);
std::string phase();
// The operation its communication thread is in ("" between operations):
// "all_reduce(sum) of 4096 x f32 (collective #12)".
void set_operation(const std::string &text);
std::string operation();
// Phase and operation in one line: "step 4: micro_step; in all_gather ...".
std::string activity();

// Copies the three texts into `out` (kTextBytes each, NUL-terminated),
// without allocating: for the heartbeat's payload.
void snapshot(char *identity_out, char *phase_out, char *operation_out);

// This rank failed (the runner caught `why`): its heartbeat's goodbye
// says so, and the other ranks stop the job unless they are leaving too.
void set_failed(const std::string &why);
// Copies the failure into `out` (kTextBytes); false when there is none.
bool failure(char *out);

// How the job is stopped after a failure that leaves it unable to go on (a
// peer that died or hangs, a transport error): the transport that can stop
// every rank (MPI_Abort) installs it. Without one, the process exits.
using AbortFn = void (*)(int status);
void set_job_abort(AbortFn abort);
// Whether a communicator's failure stops the job (DSRT_COMM_ABORT, default
// 1; 0 leaves the failure to the caller, as a thrown dsrt::Error, for
// programs that handle it themselves).
bool abort_on_comm_failure();
// Prints "error: <message>" on stderr and stops the job: every rank exits
// with a non-zero status. Never returns.
[[noreturn]] void abort_job(const std::string &message);

// The fault hook of the tests (docs/runtime.md, "The fault hook"):
// DSRT_TEST_FAIL_RANK=R:S:POINT makes world rank R kill itself (SIGKILL,
// as kill -9 would) when it reaches POINT of step S: "compute" (before
// the step's first micro_step), "collective" (its communication thread
// entering the step's first collective) or "save" (the write of step S's
// checkpoint, before its file is complete). It says so on stderr first.
// A malformed value is an error at the first call. Costs one load when
// the variable is unset.
void test_fail_point(const char *point, int64_t step);
// The step marks of a tool that counts per training step: the runners call
// it at the start of step S (>= 1) and with 0 after the last step. When the
// process has a symbol dsrt_fake_cuda_step (the fake CUDA runtime of the
// tests, preloaded: docs/runtime.md, "The fake CUDA runtime") it is called
// with the step; otherwise nothing happens. Looked up once.
void mark_step(int64_t step);

// SIGINT and SIGTERM (which mpirun forwards to every rank) end the process
// at once with status 128 + signal, after "error: <identity>: stopped by
// SIGTERM while <activity>" and after removing the files registered below.
// A checkpoint being written is abandoned in its temporary directory; the
// committed ones are untouched.
void install_stop_handlers();
// Files removed when a stop signal ends the process (the file space's
// backing file); at most a few.
void remove_on_stop(const std::string &path);
void keep_on_stop(const std::string &path);

}  // namespace health
}  // namespace dsrt

#endif  // DSRT_SRC_HEALTH_H

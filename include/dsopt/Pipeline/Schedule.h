//===- Schedule.h - pipeline-parallel schedules and their simulator -*- C++
//-*-===//
//
// The static schedules of pipeline parallelism: for each of p ranks, the list
// of actions it executes for one training step of m micro-batches (forward,
// backward and weight-gradient passes of its stages, and the sends and
// receives between them), and an event-driven simulator that runs all ranks
// against per-stage costs, rejects schedules that cannot run, and measures
// the makespan, the bubble and the activation memory.
//
//   auto schedule = buildSchedule(ScheduleKind::OneFOneB, /*stages=*/4,
//                                 /*microbatches=*/8, /*chunks=*/1);
//   auto sim = simulate(*schedule, Costs::uniform(4, 1, 2, 1));
//   sim->bubbleFraction;           // 3/11 = (p-1)/(m+p-1)
//   writeChromeTrace(*sim, os);    // one track per rank
//
// docs/pipeline.md describes the schedules, the execution semantics assumed
// here and the bubble definitions.
//
//===----------------------------------------------------------------------===//

#ifndef DSOPT_PIPELINE_SCHEDULE_H
#define DSOPT_PIPELINE_SCHEDULE_H

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace dsopt {
namespace pipeline {

enum class ScheduleKind {
  GPipe,       // all forwards, then all backwards
  OneFOneB,    // PipeDream-flush / Megatron 1F1B
  Interleaved, // Megatron's interleaved 1F1B, v model chunks per rank
  ZeroBubbleH1 // Qi et al. 2023: backward split into B and W, W's fill bubbles
};

/// `gpipe`, `1f1b`, `interleaved`, `zb-h1`.
llvm::StringRef getScheduleKindName(ScheduleKind kind);
std::optional<ScheduleKind> parseScheduleKind(llvm::StringRef name);

enum class ActionKind {
  Forward,
  Backward,       // the whole backward: input and weight gradients
  BackwardInput,  // zb-h1's B: the gradient of the stage's input only
  BackwardWeight, // zb-h1's W: the gradient of the stage's weights
  SendActivation, // the stage's forward output to the next stage's rank
  RecvActivation, // the stage's forward input from the previous stage's rank
  SendGradient,   // the gradient of the stage's input to the previous stage
  RecvGradient    // the gradient of the stage's output from the next stage
};

bool isCompute(ActionKind kind);
bool isSend(ActionKind kind);
bool isRecv(ActionKind kind);

/// One step of one rank. The stage of the action is `chunk * p + rank`
/// (Megatron's placement of virtual stages: rank r holds stages r, r + p,
/// r + 2p, ...). A send or receive names the stage of the rank that executes
/// it: SendActivation{mb 3, chunk 0} on rank 1 sends stage 1's output of
/// micro-batch 3 to `peer`, the rank of stage 2.
///
/// Under rendezvous semantics (SendSemantics) each run of consecutive sends
/// and receives of a rank is one group, issued together (one
/// dsrt::send_recv). `newGroup` on a send or receive that follows another
/// one starts a second group there instead; the builders never set it.
struct Action {
  ActionKind kind;
  int microbatch = 0;
  int chunk = 0;
  int peer = -1; // the other rank of a send or receive; -1 for compute
  bool newGroup = false;

  bool operator==(const Action &other) const {
    return kind == other.kind && microbatch == other.microbatch &&
           chunk == other.chunk && peer == other.peer &&
           newGroup == other.newGroup;
  }
};

struct Schedule {
  ScheduleKind kind = ScheduleKind::OneFOneB;
  int stages = 1;       // p: ranks of the pipeline
  int microbatches = 1; // m
  int chunks = 1;       // v: model chunks (virtual stages) per rank
  /// ranks[r] is what rank r executes, in order.
  std::vector<std::vector<Action>> ranks;

  int numVirtualStages() const { return stages * chunks; }
  int stageOf(int rank, int chunk) const { return chunk * stages + rank; }
  int rankOf(int stage) const { return stage % stages; }
  int chunkOf(int stage) const { return stage / stages; }
};

/// The largest p * v * m that buildSchedule and simulate accept.
constexpr int64_t kMaxStageMicrobatches = int64_t(1) << 20;

/// The schedule of `kind` for p stages, m micro-batches and v chunks per
/// rank. Errors (with the rule broken): p < 1, m < 1, v < 1; v != 1 for a
/// schedule other than interleaved; interleaved with v < 2, p < 2 or m not a
/// multiple of p (Megatron's rule); p * v * m above kMaxStageMicrobatches.
llvm::Expected<Schedule> buildSchedule(ScheduleKind kind, int stages,
                                       int microbatches, int chunks = 1);

/// Per virtual stage costs of one micro-batch, in any time unit.
/// `backward[s]` is the whole backward pass (what an Action::Backward
/// takes); `weight[s]` is the weight-gradient part of it, so that a
/// BackwardInput takes backward[s] - weight[s] and a BackwardWeight
/// weight[s]. `latency` is the time from a send to the moment its data is
/// available to the receiving rank.
struct Costs {
  std::vector<double> forward, backward, weight;
  double latency = 0;

  /// The same costs for each of `virtualStages` stages.
  static Costs uniform(int virtualStages, double forward, double backward,
                       double weight, double latency = 0);
};

/// How point-to-point transfers complete (docs/pipeline.md).
enum class SendSemantics {
  /// A send takes no time and never blocks; a receive waits for its
  /// message.
  Buffered,
  /// NCCL's and dsrt::send_recv's: each run of consecutive sends and
  /// receives of a rank is one group, started when the rank reaches it and
  /// complete, all of its transfers together, once every peer has started
  /// the group holding the matching transfer (plus the latency).
  Rendezvous,
  /// The runtime's (libdsrt's pipeline executor): rendezvous groups, run in
  /// order on a transfer stream of the rank's own. The rank queues a group
  /// and goes on at once; the stream starts it once the computations
  /// queued before it have ended and its previous group has, and ends it
  /// as a rendezvous group ends, when every peer's stream has started the
  /// matching group (plus the latency). A computation waits only for the
  /// receive of its own input.
  Streamed
};

/// `buffered`, `rendezvous`, `streamed`.
llvm::StringRef getSendSemanticsName(SendSemantics semantics);
std::optional<SendSemantics> parseSendSemantics(llvm::StringRef name);

/// An action as it ran: on its rank from `start` to `end`. Buffered: a send
/// takes no time on its rank; a receive lasts from the moment its rank
/// reaches it until its message has arrived (the wait). Rendezvous: every
/// transfer of a group lasts from the moment its rank reaches the group
/// until the group completes. Streamed: from the moment the rank's
/// transfer stream starts the group until it completes, overlapping the
/// rank's computations.
struct TimedAction {
  Action action;
  double start = 0, end = 0;
};

struct Simulation {
  ScheduleKind kind = ScheduleKind::OneFOneB;
  SendSemantics semantics = SendSemantics::Buffered;
  int stages = 1, microbatches = 1, chunks = 1;
  /// timeline[r]: rank r's actions in program order with their times.
  std::vector<std::vector<TimedAction>> timeline;
  /// The end of the last action of any rank; every rank starts at 0.
  double makespan = 0;
  /// busy[r]: the time rank r spends computing (F, B, Bi and W; sends and
  /// receives are not compute).
  std::vector<double> busy;
  double totalCompute = 0; // the sum of busy
  /// The bubble: the fraction of the p ranks' time from 0 to the makespan
  /// in which they do not compute,
  ///   bubbleFraction = 1 - totalCompute / (p * makespan).
  double bubbleFraction = 0;
  /// peakInFlight[s]: the largest number of micro-batches whose forward on
  /// virtual stage s has run and whose backward has not finished (for a
  /// split backward: whose W has not run, since W still reads the stashed
  /// activations). The activation memory of the stage is proportional.
  std::vector<int> peakInFlight;
  /// peakInFlightPerRank[r]: the same count over all chunks of rank r (in
  /// chunk-sized units: each holds the activations of 1/v of the rank's
  /// layers).
  std::vector<int> peakInFlightPerRank;
};

/// Runs every rank's actions in order, under these semantics (with
/// SendSemantics::Buffered; Rendezvous and Streamed replace the third and
/// fourth):
///  - a rank executes one action at a time, in its program order;
///  - compute takes its cost; a compute of (stage s, micro-batch i) needs
///    its input: for a forward of s > 0, the activation of i received
///    earlier on the rank (or computed by the rank, when stage s - 1 is its
///    own); for a backward of s < last, the gradient likewise; and a
///    backward needs the forward of (s, i), a W its B, on the same rank;
///  - sends are buffered: they take no time and never block;
///  - receives block until the matching message has arrived (send time +
///    latency). Messages from rank a to rank b are matched in the order they
///    are sent: the n-th receive on b from a takes the n-th message a sent
///    to b, and it must be that message (kind, micro-batch and stage).
/// Errors name the ranks, actions and micro-batches: a deadlock (ranks
/// blocked in receives that no rank will satisfy), a wrongly paired send
/// and receive, a compute without its input, a backward before its forward,
/// a forward or backward of some (stage, micro-batch) missing, run twice or
/// on the wrong rank, and a message nobody receives. Under Rendezvous a
/// deadlock is a cycle of groups each waiting for a peer to reach the next
/// group; the error names each rank, group and waiting transfer of it.
/// Under Streamed it names each transfer stream's waiting group and each
/// rank's computation waiting for a receive.
llvm::Expected<Simulation>
simulate(const Schedule &schedule, const Costs &costs,
         SendSemantics semantics = SendSemantics::Buffered);

/// The bubble fraction the literature gives for `kind` with uniform stages,
/// converted to this file's definition (idle time over p * makespan), or
/// none where there is no closed form for the costs:
///   gpipe, 1f1b:  (p - 1) / (m + p - 1)
///   interleaved:  (p - 1) / (v * m + p - 1)
///   zb-h1:        (p - 1)(F + Bi - W) / ((p - 1)(F + Bi - W) + m(F + Bi + W))
///                 where Bi = B - W: the paper's (p - 1)(T_F + T_B - T_W)
///                 idle time per rank, which holds for m >= p and
///                 W <= min(F, Bi).
/// The costs are those of one virtual stage.
std::optional<double> textbookBubbleFraction(ScheduleKind kind, int stages,
                                             int microbatches, int chunks,
                                             double forward, double backward,
                                             double weight);

/// `F3`, `B3`, `Bi3`, `W3`, `send-act3>2`, `recv-grad3<2`; with `chunks` > 1
/// the chunk follows the micro-batch: `F3.1`.
std::string formatAction(const Action &action, int chunks = 1);

/// Chrome trace JSON (chrome://tracing, Perfetto): one "ph":"X" slice per
/// action on one track per rank (Streamed: the transfers on a second track
/// per rank, p + rank), one cost unit shown as one millisecond.
void writeChromeTrace(const Simulation &simulation, llvm::raw_ostream &os);

} // namespace pipeline
} // namespace dsopt

#endif // DSOPT_PIPELINE_SCHEDULE_H

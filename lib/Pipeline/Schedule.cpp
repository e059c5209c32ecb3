//===- Schedule.cpp - pipeline-parallel schedules and their simulator -----===//
//
// The builders follow the published schedules step for step (GPipe,
// Megatron's 1F1B and interleaved 1F1B, Zero Bubble's ZB-H1); the simulator
// trusts none of them and checks every dependence as it runs the ranks.
//
//===----------------------------------------------------------------------===//

#include "dsopt/Pipeline/Schedule.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/Twine.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <map>
#include <optional>

using namespace dsopt::pipeline;
using llvm::Twine;

namespace {

llvm::Error makeError(const Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
}

std::string number(double value) {
  return llvm::formatv("{0}", llvm::format("%.10g", value)).str();
}

} // namespace

llvm::StringRef dsopt::pipeline::getScheduleKindName(ScheduleKind kind) {
  switch (kind) {
  case ScheduleKind::GPipe:
    return "gpipe";
  case ScheduleKind::OneFOneB:
    return "1f1b";
  case ScheduleKind::Interleaved:
    return "interleaved";
  case ScheduleKind::ZeroBubbleH1:
    return "zb-h1";
  }
  llvm_unreachable("unknown schedule kind");
}

std::optional<ScheduleKind>
dsopt::pipeline::parseScheduleKind(llvm::StringRef name) {
  for (ScheduleKind kind :
       {ScheduleKind::GPipe, ScheduleKind::OneFOneB, ScheduleKind::Interleaved,
        ScheduleKind::ZeroBubbleH1})
    if (name == getScheduleKindName(kind))
      return kind;
  return std::nullopt;
}

llvm::StringRef dsopt::pipeline::getSendSemanticsName(SendSemantics semantics) {
  switch (semantics) {
  case SendSemantics::Buffered:
    return "buffered";
  case SendSemantics::Rendezvous:
    return "rendezvous";
  case SendSemantics::Streamed:
    return "streamed";
  }
  llvm_unreachable("unknown send semantics");
}

std::optional<SendSemantics>
dsopt::pipeline::parseSendSemantics(llvm::StringRef name) {
  for (SendSemantics semantics :
       {SendSemantics::Buffered, SendSemantics::Rendezvous,
        SendSemantics::Streamed})
    if (name == getSendSemanticsName(semantics))
      return semantics;
  return std::nullopt;
}

bool dsopt::pipeline::isCompute(ActionKind kind) {
  return kind == ActionKind::Forward || kind == ActionKind::Backward ||
         kind == ActionKind::BackwardInput ||
         kind == ActionKind::BackwardWeight;
}

bool dsopt::pipeline::isSend(ActionKind kind) {
  return kind == ActionKind::SendActivation ||
         kind == ActionKind::SendGradient;
}

bool dsopt::pipeline::isRecv(ActionKind kind) {
  return kind == ActionKind::RecvActivation ||
         kind == ActionKind::RecvGradient;
}

std::string dsopt::pipeline::formatAction(const Action &action, int chunks) {
  std::string text;
  switch (action.kind) {
  case ActionKind::Forward:
    text = "F";
    break;
  case ActionKind::Backward:
    text = "B";
    break;
  case ActionKind::BackwardInput:
    text = "Bi";
    break;
  case ActionKind::BackwardWeight:
    text = "W";
    break;
  case ActionKind::SendActivation:
    text = "send-act";
    break;
  case ActionKind::RecvActivation:
    text = "recv-act";
    break;
  case ActionKind::SendGradient:
    text = "send-grad";
    break;
  case ActionKind::RecvGradient:
    text = "recv-grad";
    break;
  }
  text += std::to_string(action.microbatch);
  if (chunks > 1)
    text += "." + std::to_string(action.chunk);
  if (isSend(action.kind))
    text += ">" + std::to_string(action.peer);
  else if (isRecv(action.kind))
    text += "<" + std::to_string(action.peer);
  return text;
}

//===----------------------------------------------------------------------===//
// Building schedules
//===----------------------------------------------------------------------===//

namespace {

/// Appends the actions of one rank: each compute with the communication it
/// needs. A receive goes right before the compute that reads it and a send
/// right after the compute that produces it, so that no rank waits for data
/// longer than the dependence requires. Under rendezvous semantics the send
/// after one compute and the receive before the next form one group: in
/// 1F1B's steady state Megatron's send_forward_recv_backward and
/// send_backward_recv_forward.
class RankBuilder {
public:
  RankBuilder(Schedule &schedule, int rank)
      : schedule(schedule), rank(rank), actions(schedule.ranks[rank]) {}

  void forward(int chunk, int microbatch) {
    int stage = schedule.stageOf(rank, chunk);
    if (stage > 0 && schedule.rankOf(stage - 1) != rank)
      actions.push_back({ActionKind::RecvActivation, microbatch, chunk,
                         schedule.rankOf(stage - 1)});
    actions.push_back({ActionKind::Forward, microbatch, chunk});
    if (stage + 1 < schedule.numVirtualStages() &&
        schedule.rankOf(stage + 1) != rank)
      actions.push_back({ActionKind::SendActivation, microbatch, chunk,
                         schedule.rankOf(stage + 1)});
  }

  /// A whole backward, or zb-h1's input-gradient part of it.
  void backward(int chunk, int microbatch,
                ActionKind kind = ActionKind::Backward) {
    int stage = schedule.stageOf(rank, chunk);
    if (stage + 1 < schedule.numVirtualStages() &&
        schedule.rankOf(stage + 1) != rank)
      actions.push_back({ActionKind::RecvGradient, microbatch, chunk,
                         schedule.rankOf(stage + 1)});
    actions.push_back({kind, microbatch, chunk});
    if (stage > 0 && schedule.rankOf(stage - 1) != rank)
      actions.push_back({ActionKind::SendGradient, microbatch, chunk,
                         schedule.rankOf(stage - 1)});
  }

  void weight(int chunk, int microbatch) {
    actions.push_back({ActionKind::BackwardWeight, microbatch, chunk});
  }

private:
  Schedule &schedule;
  int rank;
  std::vector<Action> &actions;
};

void buildGPipe(Schedule &schedule) {
  for (int rank = 0; rank < schedule.stages; ++rank) {
    RankBuilder builder(schedule, rank);
    for (int i = 0; i < schedule.microbatches; ++i)
      builder.forward(0, i);
    for (int i = 0; i < schedule.microbatches; ++i)
      builder.backward(0, i);
  }
}

/// PipeDream-flush as in Megatron's forward_backward_pipelining_without_
/// interleaving: rank r runs p - 1 - r forwards to fill the pipeline, then
/// alternates one forward and one backward, then drains the backwards.
void buildOneFOneB(Schedule &schedule) {
  int p = schedule.stages, m = schedule.microbatches;
  for (int rank = 0; rank < p; ++rank) {
    RankBuilder builder(schedule, rank);
    int warmup = std::min(p - 1 - rank, m);
    int steady = m - warmup;
    for (int i = 0; i < warmup; ++i)
      builder.forward(0, i);
    for (int i = 0; i < steady; ++i) {
      builder.forward(0, warmup + i);
      builder.backward(0, i);
    }
    for (int i = steady; i < m; ++i)
      builder.backward(0, i);
  }
}

/// Megatron's forward_backward_pipelining_with_interleaving. The k-th forward
/// of every rank is micro-batch (k / pv) p + k % p of chunk (k / p) % v: the
/// ranks go through groups of p micro-batches chunk by chunk. Backwards run
/// the chunks in reverse. Rank r fills the pipeline with 2(p - 1 - r) +
/// (v - 1) p forwards, or all of them when m == p. The transfers go as
/// Megatron issues them: one group between two steps (a forward in the
/// warmup, a forward and a backward in the steady state, a backward in the
/// drain) with the sends of the step before and the receives of the step
/// after (send_forward_backward_recv_forward_backward). With the transfers
/// right at their computes instead, the ring from the last rank's chunk c
/// to the first rank's chunk c + 1 deadlocks under rendezvous semantics.
void buildInterleaved(Schedule &schedule) {
  int p = schedule.stages, m = schedule.microbatches, v = schedule.chunks;
  int total = m * v;
  auto chunkOf = [&](int k, bool forward) {
    int chunk = (k % (p * v)) / p;
    return forward ? chunk : v - 1 - chunk;
  };
  auto microbatchOf = [&](int k) { return (k / (p * v)) * p + k % p; };
  for (int rank = 0; rank < p; ++rank) {
    int warmup =
        m == p ? total : std::min((p - 1 - rank) * 2 + (v - 1) * p, total);
    int steady = total - warmup;
    // Megatron's steps: a forward each in the warmup, a forward and a
    // backward in the steady state, a backward each in the drain.
    std::vector<std::vector<Action>> steps;
    for (int k = 0; k < warmup; ++k)
      steps.push_back(
          {{ActionKind::Forward, microbatchOf(k), chunkOf(k, true)}});
    for (int k = 0; k < steady; ++k)
      steps.push_back(
          {{ActionKind::Forward, microbatchOf(warmup + k),
            chunkOf(warmup + k, true)},
           {ActionKind::Backward, microbatchOf(k), chunkOf(k, false)}});
    for (int k = steady; k < total; ++k)
      steps.push_back(
          {{ActionKind::Backward, microbatchOf(k), chunkOf(k, false)}});
    // The transfers of a compute: what it receives before and sends after.
    int last = schedule.numVirtualStages() - 1;
    auto transfers = [&](const Action &compute, bool receives,
                         std::vector<Action> &out) {
      int stage = schedule.stageOf(rank, compute.chunk);
      bool forward = compute.kind == ActionKind::Forward;
      // A receive reads from the stage before (forward) or after; a send
      // goes to the stage after (forward) or before.
      int other = forward == receives ? stage - 1 : stage + 1;
      if (other < 0 || other > last || schedule.rankOf(other) == rank)
        return;
      ActionKind kind = receives ? (forward ? ActionKind::RecvActivation
                                            : ActionKind::RecvGradient)
                                 : (forward ? ActionKind::SendActivation
                                            : ActionKind::SendGradient);
      out.push_back(
          {kind, compute.microbatch, compute.chunk, schedule.rankOf(other)});
    };
    // One group between two steps: the sends of the step before and the
    // receives of the step after: sends first (buffered sends then never
    // wait behind a receive), gradients before activations among the sends
    // and among the receives, so that two ranks that exchange both (p = 2)
    // list a channel's transfers in the same order.
    std::vector<Action> &actions = schedule.ranks[rank];
    auto group = [&](const std::vector<Action> *before,
                     const std::vector<Action> *after) {
      std::vector<Action> out;
      if (before)
        for (const Action &compute : *before)
          transfers(compute, false, out);
      if (after)
        for (const Action &compute : *after)
          transfers(compute, true, out);
      auto rankOf = [](const Action &action) {
        bool gradient = action.kind == ActionKind::SendGradient ||
                        action.kind == ActionKind::RecvGradient;
        return (isSend(action.kind) ? 0 : 2) + (gradient ? 0 : 1);
      };
      std::stable_sort(out.begin(), out.end(),
                       [&](const Action &a, const Action &b) {
                         return rankOf(a) < rankOf(b);
                       });
      actions.insert(actions.end(), out.begin(), out.end());
    };
    group(nullptr, &steps.front());
    for (size_t s = 0; s < steps.size(); ++s) {
      actions.insert(actions.end(), steps[s].begin(), steps[s].end());
      group(&steps[s], s + 1 < steps.size() ? &steps[s + 1] : nullptr);
    }
  }
}

/// ZB-H1's steady state, Bi(i) send-grad(i) W(j) recv-act(i+1) F(i+1):
/// the W goes before the send, so that the send joins the receive in one
/// group (send_backward_recv_forward). Under rendezvous semantics the send
/// alone would hold the W until the previous rank reaches its receive,
/// which it does only with that same group. In the drain (the next
/// transfer receives a gradient) the W's stay after the send: the
/// gradient is on the critical path there, and the W's fill the wait.
void groupSendsAfterWeights(Schedule &schedule) {
  for (std::vector<Action> &actions : schedule.ranks) {
    for (size_t i = 0; i < actions.size(); ++i) {
      if (!isSend(actions[i].kind) ||
          (i + 1 < actions.size() && !isCompute(actions[i + 1].kind)))
        continue;
      size_t j = i + 1;
      while (j < actions.size() &&
             actions[j].kind == ActionKind::BackwardWeight)
        ++j;
      if (j == i + 1 || j == actions.size() ||
          actions[j].kind != ActionKind::RecvActivation)
        continue;
      // actions[i] is the last transfer of its run: move the run of
      // transfers ending at i behind the W's.
      size_t begin = i;
      while (begin > 0 && !isCompute(actions[begin - 1].kind))
        --begin;
      std::rotate(actions.begin() + begin, actions.begin() + i + 1,
                  actions.begin() + j);
      i = j - 1;
    }
  }
}

/// ZB-H1 (Qi et al. 2023, as in the authors' DeepSpeed schedule with exact
/// semantics): the warmup of 1F1B, then r steps of F B whose W's wait,
/// then steps of F B W, then the remaining B W, and last the r postponed W's,
/// which fill the drain's bubbles. Each rank holds at most p micro-batches'
/// activations (1F1B's peak, on its first rank).
void buildZeroBubbleH1(Schedule &schedule) {
  int p = schedule.stages, m = schedule.microbatches;
  for (int rank = 0; rank < p; ++rank) {
    RankBuilder builder(schedule, rank);
    int warmup = std::min(p - 1 - rank, m);
    int postponed = std::min(rank, m - warmup);
    int forwards = 0, backwards = 0, weights = 0;
    for (int i = 0; i < warmup; ++i)
      builder.forward(0, forwards++);
    for (int i = 0; i < postponed; ++i) {
      builder.forward(0, forwards++);
      builder.backward(0, backwards++, ActionKind::BackwardInput);
    }
    while (forwards < m) {
      builder.forward(0, forwards++);
      builder.backward(0, backwards++, ActionKind::BackwardInput);
      builder.weight(0, weights++);
    }
    while (backwards < m) {
      builder.backward(0, backwards++, ActionKind::BackwardInput);
      builder.weight(0, weights++);
    }
    while (weights < m)
      builder.weight(0, weights++);
  }
  groupSendsAfterWeights(schedule);
}

} // namespace

llvm::Expected<Schedule> dsopt::pipeline::buildSchedule(ScheduleKind kind,
                                                        int stages,
                                                        int microbatches,
                                                        int chunks) {
  llvm::StringRef name = getScheduleKindName(kind);
  if (stages < 1)
    return makeError("a pipeline needs at least 1 stage, got " +
                     Twine(stages));
  if (microbatches < 1)
    return makeError("a pipeline needs at least 1 micro-batch, got " +
                     Twine(microbatches));
  if (chunks < 1)
    return makeError("a rank needs at least 1 model chunk, got " +
                     Twine(chunks));
  if (kind == ScheduleKind::Interleaved) {
    if (chunks < 2)
      return makeError("the interleaved schedule needs at least 2 model "
                       "chunks per rank, got " +
                       Twine(chunks) + " (with 1 it is 1f1b)");
    if (stages < 2)
      return makeError("the interleaved schedule needs at least 2 stages, "
                       "got " +
                       Twine(stages));
    if (microbatches % stages != 0)
      return makeError("the interleaved schedule needs the micro-batches to "
                       "be a multiple of the stages (Megatron's rule), got " +
                       Twine(microbatches) + " micro-batches for " +
                       Twine(stages) + " stages");
  } else if (chunks != 1) {
    return makeError("the " + name +
                     " schedule places 1 model chunk per rank, got " +
                     Twine(chunks) + " (only interleaved takes more)");
  }

  // Each (virtual stage, micro-batch) takes a handful of actions; a step is
  // never near this large, a typo in a flag may be.
  int64_t work = int64_t(stages) * chunks * microbatches;
  if (work > kMaxStageMicrobatches)
    return makeError("the schedule is too large: " + Twine(stages) +
                     " stages x " + Twine(chunks) + " chunks x " +
                     Twine(microbatches) + " micro-batches = " + Twine(work) +
                     " stage micro-batches, at most " +
                     Twine(kMaxStageMicrobatches));

  Schedule schedule;
  schedule.kind = kind;
  schedule.stages = stages;
  schedule.microbatches = microbatches;
  schedule.chunks = chunks;
  schedule.ranks.resize(stages);
  switch (kind) {
  case ScheduleKind::GPipe:
    buildGPipe(schedule);
    break;
  case ScheduleKind::OneFOneB:
    buildOneFOneB(schedule);
    break;
  case ScheduleKind::Interleaved:
    buildInterleaved(schedule);
    break;
  case ScheduleKind::ZeroBubbleH1:
    buildZeroBubbleH1(schedule);
    break;
  }
  return schedule;
}

Costs Costs::uniform(int virtualStages, double forward, double backward,
                     double weight, double latency) {
  Costs costs;
  costs.forward.assign(virtualStages, forward);
  costs.backward.assign(virtualStages, backward);
  costs.weight.assign(virtualStages, weight);
  costs.latency = latency;
  return costs;
}

std::optional<double> dsopt::pipeline::textbookBubbleFraction(
    ScheduleKind kind, int stages, int microbatches, int chunks,
    double forward, double backward, double weight) {
  double p = stages, m = microbatches, v = chunks;
  switch (kind) {
  case ScheduleKind::GPipe:
  case ScheduleKind::OneFOneB:
    return (p - 1) / (m + p - 1);
  case ScheduleKind::Interleaved:
    return (p - 1) / (v * m + p - 1);
  case ScheduleKind::ZeroBubbleH1: {
    // The postponed W's fill the drain only when there are at least p of
    // them to spread and each fits the gaps an F or a B leaves.
    double input = backward - weight;
    double idle = (p - 1) * (forward + input - weight);
    double work = m * (forward + backward);
    if (microbatches < stages || weight > forward || weight > input ||
        idle + work <= 0)
      return std::nullopt;
    return idle / (idle + work);
  }
  }
  return std::nullopt;
}

//===----------------------------------------------------------------------===//
// Simulation
//===----------------------------------------------------------------------===//

namespace {

/// A send that has happened: what it was, who ran it and when.
struct Message {
  Action action;
  int rank;
  int index; // in the sender's program
  double time;
};

/// What happened so far to one (stage, micro-batch).
struct StageMicrobatch {
  bool forward = false;
  bool backward = false;       // a whole Backward
  bool backwardInput = false;  // a BackwardInput
  bool backwardWeight = false; // a BackwardWeight
  bool input = false;          // the forward's input is on the rank
  bool outputGradient = false; // the backward's input is on the rank
  // When the input and the output gradient arrived (their receive ended).
  double inputAt = 0, outputGradientAt = 0;
  // Streamed: the receive of the input, of the output gradient, is queued
  // on the rank's transfer stream (and may not have ended yet).
  bool inputQueued = false, outputGradientQueued = false;
};

class Simulator {
public:
  Simulator(const Schedule &schedule, const Costs &costs,
            SendSemantics semantics)
      : schedule(schedule), costs(costs), semantics(semantics),
        p(schedule.stages), m(schedule.microbatches), v(schedule.chunks),
        stages(schedule.numVirtualStages()) {}

  llvm::Expected<Simulation> run();

private:
  /// A transfer's counterpart on its peer under rendezvous: the n-th send
  /// from a to b and the n-th receive on b from a.
  struct Partner {
    int rank = -1, index = -1;
    int ordinal = 0; // n, from 0
  };
  /// A run of consecutive transfers of one rank: actions [begin, end).
  struct Group {
    size_t begin, end;
    double start = -1; // when its rank reached it; -1 before
    // Streamed: when the computations queued before it end (its transfer
    // stream waits for them). Its start is the later of that and the end
    // of the group before it on the stream.
    double ready = 0;
  };

  llvm::Error checkShape();
  void buildGroups();
  llvm::Error step(int rank, bool &blocked);
  llvm::Error stepGroup(int rank, bool &blocked);
  llvm::Error transferCompleted(int rank, int index, double end);
  std::optional<double> groupEnd(int rank, const Group &group) const;
  llvm::Error completeGroup(int rank, const Group &group, double end);
  void queueGroup(int rank);
  llvm::Error advanceStream(int rank, bool &progressed);
  llvm::Error reportStreamedDeadlock();
  void record(int rank, int index, double start, double end);
  llvm::Error checkComplete();
  llvm::Error reportRendezvousDeadlock();
  std::string describeGroup(int rank, int group) const;

  /// `rank 1 action 7 F3 (stage 1, micro-batch 3)`
  std::string describe(int rank, int index) const {
    const Action &action = schedule.ranks[rank][index];
    return llvm::formatv("rank {0} action {1} {2} (stage {3}, micro-batch {4})",
                         rank, index, formatAction(action, v),
                         schedule.stageOf(rank, action.chunk),
                         action.microbatch)
        .str();
  }
  std::string name(ActionKind kind, int microbatch, int chunk,
                   int peer = -1) const {
    return formatAction({kind, microbatch, chunk, peer}, v);
  }
  StageMicrobatch &state(int stage, int microbatch) {
    return states[stage * m + microbatch];
  }
  double computeCost(const Action &action, int stage) const {
    switch (action.kind) {
    case ActionKind::Forward:
      return costs.forward[stage];
    case ActionKind::Backward:
      return costs.backward[stage];
    case ActionKind::BackwardInput:
      return costs.backward[stage] - costs.weight[stage];
    case ActionKind::BackwardWeight:
      return costs.weight[stage];
    default:
      return 0;
    }
  }

  const Schedule &schedule;
  const Costs &costs;
  SendSemantics semantics;
  int p, m, v, stages;
  // Rendezvous only: per rank, its groups, each action's group (-1 for
  // compute) and each transfer's partner.
  std::vector<std::vector<Group>> groups;
  std::vector<std::vector<int>> groupOf;
  std::vector<std::vector<Partner>> partners;
  bool startedGroup = false;
  // Streamed only: per rank, the groups queued on its transfer stream and
  // not ended yet, in order, and when the last one that ended ended.
  std::vector<std::deque<int>> queued;
  std::vector<double> streamClock;
  std::vector<StageMicrobatch> states;
  std::vector<size_t> next;   // per rank: the next action
  std::vector<double> clock;  // per rank: when its next action may start
  std::map<std::pair<int, int>, std::vector<Message>> channels; // (from, to)
  std::map<std::pair<int, int>, size_t> received;               // (from, to)
  std::vector<int> inFlight, inFlightPerRank;
  Simulation result;
};

llvm::Error Simulator::checkShape() {
  if (p < 1 || m < 1 || v < 1)
    return makeError(llvm::formatv("a schedule needs at least 1 stage, "
                                   "micro-batch and chunk, got p = {0}, "
                                   "m = {1}, v = {2}",
                                   p, m, v)
                         .str());
  if (int64_t(p) * v * m > kMaxStageMicrobatches)
    return makeError("the schedule is too large to simulate: p * v * m = " +
                     Twine(int64_t(p) * v * m) + ", at most " +
                     Twine(kMaxStageMicrobatches));
  if (schedule.ranks.size() != static_cast<size_t>(p))
    return makeError("the schedule has " + Twine(schedule.ranks.size()) +
                     " action lists for " + Twine(p) + " ranks");
  auto checkCosts = [&](const std::vector<double> &values,
                        llvm::StringRef what) -> llvm::Error {
    if (values.size() != static_cast<size_t>(stages))
      return makeError("the costs give " + Twine(values.size()) + " " + what +
                       " times for " + Twine(stages) + " stages");
    for (auto [stage, value] : llvm::enumerate(values))
      if (!std::isfinite(value) || value < 0)
        return makeError("the " + what + " time of stage " + Twine(stage) +
                         " is " + number(value) +
                         "; costs must be finite and not negative");
    return llvm::Error::success();
  };
  if (llvm::Error error = checkCosts(costs.forward, "forward"))
    return error;
  if (llvm::Error error = checkCosts(costs.backward, "backward"))
    return error;
  if (llvm::Error error = checkCosts(costs.weight, "weight-gradient"))
    return error;
  for (int stage = 0; stage < stages; ++stage)
    if (costs.weight[stage] > costs.backward[stage])
      return makeError("the weight-gradient time of stage " + Twine(stage) +
                       " (" + number(costs.weight[stage]) +
                       ") exceeds its whole backward time (" +
                       number(costs.backward[stage]) + ")");
  if (!std::isfinite(costs.latency) || costs.latency < 0)
    return makeError("the transfer latency is " + number(costs.latency) +
                     "; it must be finite and not negative");

  // Every action names a micro-batch, chunk and peer that exist.
  for (int rank = 0; rank < p; ++rank) {
    for (auto [index, action] : llvm::enumerate(schedule.ranks[rank])) {
      if (action.microbatch < 0 || action.microbatch >= m ||
          action.chunk < 0 || action.chunk >= v)
        return makeError(llvm::formatv("rank {0} action {1} {2} names "
                                       "micro-batch {3} of chunk {4}; the "
                                       "schedule has {5} micro-batches and "
                                       "{6} chunks",
                                       rank, index, formatAction(action, v),
                                       action.microbatch, action.chunk, m, v)
                             .str());
      if (isCompute(action.kind))
        continue;
      int stage = schedule.stageOf(rank, action.chunk);
      bool towardsNext = action.kind == ActionKind::SendActivation ||
                         action.kind == ActionKind::RecvGradient;
      int other = towardsNext ? stage + 1 : stage - 1;
      if (other < 0 || other >= stages)
        return makeError(describe(rank, index) + " talks to stage " +
                         Twine(other) + ", which does not exist");
      if (schedule.rankOf(other) == rank)
        return makeError(describe(rank, index) + " talks to stage " +
                         Twine(other) + ", which is on the same rank");
      if (action.peer != schedule.rankOf(other))
        return makeError(describe(rank, index) + " talks to rank " +
                         Twine(action.peer) + ", but stage " + Twine(other) +
                         " is on rank " + Twine(schedule.rankOf(other)));
    }
  }
  return llvm::Error::success();
}

/// Runs the next action of `rank`, or sets `blocked` when it is a receive
/// whose message has not been sent yet.
llvm::Error Simulator::step(int rank, bool &blocked) {
  blocked = false;
  int index = next[rank];
  const Action &action = schedule.ranks[rank][index];
  if (semantics == SendSemantics::Rendezvous && !isCompute(action.kind))
    return stepGroup(rank, blocked);
  if (semantics == SendSemantics::Streamed && !isCompute(action.kind)) {
    queueGroup(rank);
    return llvm::Error::success();
  }
  int stage = schedule.stageOf(rank, action.chunk);
  int mb = action.microbatch;
  StageMicrobatch &here = state(stage, mb);
  double start = clock[rank], end = start;
  bool lastStage = stage + 1 == stages;

  switch (action.kind) {
  case ActionKind::Forward: {
    if (here.forward)
      return makeError(describe(rank, index) +
                       " runs a second time: the forward of micro-batch " +
                       Twine(mb) + " on stage " + Twine(stage) +
                       " already ran");
    if (stage > 0 && !here.input && here.inputQueued) {
      blocked = true; // its receive has not ended
      return llvm::Error::success();
    }
    if (stage > 0 && !here.input)
      return makeError(
          describe(rank, index) + " has no input: " +
          (schedule.rankOf(stage - 1) == rank
               ? "the forward of stage " + Twine(stage - 1) + " (" +
                     name(ActionKind::Forward, mb, action.chunk - 1) +
                     ") has not run before it on rank " + Twine(rank)
               : "no " +
                     Twine(name(ActionKind::RecvActivation, mb, action.chunk,
                                schedule.rankOf(stage - 1))) +
                     " before it on rank " + Twine(rank)));
    start = std::max(start, here.inputAt);
    here.forward = true;
    if (!lastStage && schedule.rankOf(stage + 1) == rank)
      state(stage + 1, mb).input = true;
    ++inFlight[stage];
    ++inFlightPerRank[rank];
    result.peakInFlight[stage] =
        std::max(result.peakInFlight[stage], inFlight[stage]);
    result.peakInFlightPerRank[rank] =
        std::max(result.peakInFlightPerRank[rank], inFlightPerRank[rank]);
    break;
  }
  case ActionKind::Backward:
  case ActionKind::BackwardInput: {
    if (here.backward || here.backwardInput)
      return makeError(describe(rank, index) +
                       " runs a second time: the backward of micro-batch " +
                       Twine(mb) + " on stage " + Twine(stage) +
                       " already ran");
    if (!here.forward)
      return makeError(describe(rank, index) +
                       " runs before its forward " +
                       name(ActionKind::Forward, mb, action.chunk) +
                       " on rank " + Twine(rank));
    if (!lastStage && !here.outputGradient && here.outputGradientQueued) {
      blocked = true; // its receive has not ended
      return llvm::Error::success();
    }
    if (!lastStage && !here.outputGradient)
      return makeError(
          describe(rank, index) + " has no output gradient: " +
          (schedule.rankOf(stage + 1) == rank
               ? "the backward of stage " + Twine(stage + 1) +
                     " has not run before it on rank " + Twine(rank)
               : "no " +
                     Twine(name(ActionKind::RecvGradient, mb, action.chunk,
                                schedule.rankOf(stage + 1))) +
                     " before it on rank " + Twine(rank)));
    start = std::max(start, here.outputGradientAt);
    (action.kind == ActionKind::Backward ? here.backward
                                         : here.backwardInput) = true;
    if (stage > 0 && schedule.rankOf(stage - 1) == rank)
      state(stage - 1, mb).outputGradient = true;
    if (action.kind == ActionKind::Backward) {
      --inFlight[stage];
      --inFlightPerRank[rank];
    }
    break;
  }
  case ActionKind::BackwardWeight: {
    if (here.backwardWeight || here.backward)
      return makeError(describe(rank, index) +
                       " runs a second time: the weight gradient of "
                       "micro-batch " +
                       Twine(mb) + " on stage " + Twine(stage) +
                       " already ran");
    if (!here.backwardInput)
      return makeError(describe(rank, index) +
                       " runs before its input gradient " +
                       name(ActionKind::BackwardInput, mb, action.chunk) +
                       " on rank " + Twine(rank));
    here.backwardWeight = true;
    --inFlight[stage];
    --inFlightPerRank[rank];
    break;
  }
  case ActionKind::SendActivation:
  case ActionKind::SendGradient: {
    bool activation = action.kind == ActionKind::SendActivation;
    if (activation ? !here.forward : !(here.backward || here.backwardInput))
      return makeError(describe(rank, index) + " sends before " +
                       (activation ? "the forward " : "the backward ") +
                       name(activation ? ActionKind::Forward
                                       : ActionKind::Backward,
                            mb, action.chunk) +
                       " of micro-batch " + Twine(mb) + " on stage " +
                       Twine(stage) + " computed it");
    channels[{rank, action.peer}].push_back({action, rank, index, start});
    break;
  }
  case ActionKind::RecvActivation:
  case ActionKind::RecvGradient: {
    auto channel = std::make_pair(action.peer, rank);
    const std::vector<Message> &sent = channels[channel];
    size_t &count = received[channel];
    if (count >= sent.size()) {
      blocked = true;
      return llvm::Error::success();
    }
    const Message &message = sent[count];
    const Action &send = message.action;
    bool activation = action.kind == ActionKind::RecvActivation;
    int sentStage = schedule.stageOf(message.rank, send.chunk);
    bool matches =
        send.kind == (activation ? ActionKind::SendActivation
                                 : ActionKind::SendGradient) &&
        send.microbatch == mb && sentStage == (activation ? stage - 1
                                                          : stage + 1);
    if (!matches)
      return makeError(llvm::formatv(
                           "wrong pairing: {0} receives message {1} from rank "
                           "{2}, which is {3} (messages between two ranks "
                           "arrive in the order they are sent)",
                           describe(rank, index), count + 1, message.rank,
                           describe(message.rank, message.index))
                           .str());
    ++count;
    end = std::max(start, message.time + costs.latency);
    (activation ? here.input : here.outputGradient) = true;
    (activation ? here.inputAt : here.outputGradientAt) = end;
    break;
  }
  }

  if (isCompute(action.kind)) {
    end = start + computeCost(action, stage);
    result.busy[rank] += end - start;
  }
  record(rank, index, start, end);
  clock[rank] = end;
  ++next[rank];
  return llvm::Error::success();
}

void Simulator::record(int rank, int index, double start, double end) {
  const Action &action = schedule.ranks[rank][index];
  // Streamed: transfers end after computations that follow them; the
  // timeline was sized up front and stays in program order.
  if (semantics == SendSemantics::Streamed)
    result.timeline[rank][index] = {action, start, end};
  else
    result.timeline[rank].push_back({action, start, end});
}

/// Streamed: queues the group at the rank's next action on its transfer
/// stream, behind the computations so far, and goes on at once.
void Simulator::queueGroup(int rank) {
  int index = groupOf[rank][next[rank]];
  Group &group = groups[rank][index];
  group.ready = clock[rank];
  queued[rank].push_back(index);
  for (size_t i = group.begin; i < group.end; ++i) {
    const Action &action = schedule.ranks[rank][i];
    if (isSend(action.kind))
      continue;
    StageMicrobatch &here =
        state(schedule.stageOf(rank, action.chunk), action.microbatch);
    (action.kind == ActionKind::RecvActivation ? here.inputQueued
                                               : here.outputGradientQueued) =
        true;
  }
  next[rank] = group.end;
}

/// Streamed: runs the rank's transfer stream as far as it can. The group at
/// its head starts once the stream reaches it and ends, as a rendezvous
/// group does, once every peer's stream has started the matching group
/// (plus the latency).
llvm::Error Simulator::advanceStream(int rank, bool &progressed) {
  while (!queued[rank].empty()) {
    Group &group = groups[rank][queued[rank].front()];
    if (group.start < 0) {
      group.start = std::max(group.ready, streamClock[rank]);
      progressed = true;
    }
    std::optional<double> end = groupEnd(rank, group);
    if (!end)
      return llvm::Error::success();
    if (llvm::Error error = completeGroup(rank, group, *end))
      return error;
    streamClock[rank] = *end;
    queued[rank].pop_front();
    progressed = true;
  }
  return llvm::Error::success();
}

/// Streamed: nothing moves. Each rank's stream waits at its head group for
/// a peer's stream, or its computations wait for a receive.
llvm::Error Simulator::reportStreamedDeadlock() {
  std::vector<std::string> waiting;
  for (int rank = 0; rank < p; ++rank) {
    if (!queued[rank].empty()) {
      int index = queued[rank].front();
      const Group &group = groups[rank][index];
      for (size_t i = group.begin; i < group.end; ++i) {
        const Partner &partner = partners[rank][i];
        if (partner.rank < 0) {
          waiting.push_back(describe(rank, i) + " has no counterpart on rank " +
                            Twine(schedule.ranks[rank][i].peer).str());
          break;
        }
        int other = groupOf[partner.rank][partner.index];
        if (groups[partner.rank][other].start < 0) {
          waiting.push_back(
              describeGroup(rank, index) + " on its transfer stream: its " +
              formatAction(schedule.ranks[rank][i], v) + " waits for " +
              describe(partner.rank, partner.index) + " in rank " +
              Twine(partner.rank).str() + "'s group " + Twine(other).str());
          break;
        }
      }
    }
    if (next[rank] < schedule.ranks[rank].size())
      waiting.push_back(describe(rank, next[rank]) +
                        " waits for its receive from t = " +
                        number(clock[rank]));
  }
  std::string list;
  for (auto [i, line] : llvm::enumerate(waiting))
    list += (i ? "; " : "") + line;
  return makeError("deadlock: no rank or transfer stream can progress: " +
                   list);
}

void Simulator::buildGroups() {
  groups.assign(p, {});
  groupOf.assign(p, {});
  partners.assign(p, {});
  // (from, to) -> the indices of the sends on `from`, of the receives on `to`.
  std::map<std::pair<int, int>, std::vector<int>> sends, recvs;
  for (int rank = 0; rank < p; ++rank) {
    const std::vector<Action> &actions = schedule.ranks[rank];
    groupOf[rank].assign(actions.size(), -1);
    partners[rank].assign(actions.size(), {});
    for (size_t i = 0; i < actions.size(); ++i) {
      const Action &action = actions[i];
      if (isCompute(action.kind))
        continue;
      bool continues =
          i > 0 && !isCompute(actions[i - 1].kind) && !action.newGroup;
      if (!continues)
        groups[rank].push_back({i, i});
      groups[rank].back().end = i + 1;
      groupOf[rank][i] = groups[rank].size() - 1;
      if (isSend(action.kind))
        sends[{rank, action.peer}].push_back(i);
      else
        recvs[{action.peer, rank}].push_back(i);
    }
  }
  for (auto &[channel, sent] : sends) {
    const std::vector<int> &received = recvs[channel];
    for (size_t n = 0; n < std::min(sent.size(), received.size()); ++n) {
      partners[channel.first][sent[n]] = {channel.second, received[n],
                                          static_cast<int>(n)};
      partners[channel.second][received[n]] = {channel.first, sent[n],
                                               static_cast<int>(n)};
    }
  }
}

std::string Simulator::describeGroup(int rank, int group) const {
  const Group &g = groups[rank][group];
  std::string text =
      llvm::formatv("rank {0} group {1} (action{2} {3}", rank, group,
                    g.end - g.begin > 1 ? "s" : "", g.begin)
          .str();
  if (g.end - g.begin > 1)
    text += "-" + std::to_string(g.end - 1);
  text += ":";
  for (size_t i = g.begin; i < g.end; ++i)
    text += " " + formatAction(schedule.ranks[rank][i], v);
  return text + ")";
}

/// The data of a transfer whose group has completed: a send must follow its
/// compute, a receive must pair with the send it meets.
llvm::Error Simulator::transferCompleted(int rank, int index, double end) {
  const Action &action = schedule.ranks[rank][index];
  const Partner &partner = partners[rank][index];
  int stage = schedule.stageOf(rank, action.chunk);
  int mb = action.microbatch;
  StageMicrobatch &here = state(stage, mb);
  bool send = isSend(action.kind);
  // Checked from the receiving end, with buffered semantics' words.
  int recvRank = send ? partner.rank : rank;
  int recvIndex = send ? partner.index : index;
  int sendRank = send ? rank : partner.rank;
  int sendIndex = send ? index : partner.index;
  const Action &recv = schedule.ranks[recvRank][recvIndex];
  const Action &sent = schedule.ranks[sendRank][sendIndex];
  bool activation = recv.kind == ActionKind::RecvActivation;
  int recvStage = schedule.stageOf(recvRank, recv.chunk);
  bool matches = sent.kind == (activation ? ActionKind::SendActivation
                                          : ActionKind::SendGradient) &&
                 sent.microbatch == recv.microbatch &&
                 schedule.stageOf(sendRank, sent.chunk) ==
                     (activation ? recvStage - 1 : recvStage + 1);
  if (!matches)
    return makeError(
        llvm::formatv("wrong pairing: {0} receives message {1} from rank "
                      "{2}, which is {3} (messages between two ranks "
                      "arrive in the order they are sent)",
                      describe(recvRank, recvIndex), partner.ordinal + 1,
                      sendRank, describe(sendRank, sendIndex))
            .str());
  if (send) {
    bool act = action.kind == ActionKind::SendActivation;
    if (act ? !here.forward : !(here.backward || here.backwardInput))
      return makeError(describe(rank, index) + " sends before " +
                       (act ? "the forward " : "the backward ") +
                       name(act ? ActionKind::Forward : ActionKind::Backward,
                            mb, action.chunk) +
                       " of micro-batch " + Twine(mb) + " on stage " +
                       Twine(stage) + " computed it");
  } else {
    (activation ? here.input : here.outputGradient) = true;
    (activation ? here.inputAt : here.outputGradientAt) = end;
  }
  return llvm::Error::success();
}

/// Rendezvous: starts the group at the rank's next action, and completes
/// it when every transfer's partner group has started too.
llvm::Error Simulator::stepGroup(int rank, bool &blocked) {
  Group &group = groups[rank][groupOf[rank][next[rank]]];
  if (group.start < 0) {
    group.start = clock[rank];
    startedGroup = true; // peers blocked on it may go on
  }
  std::optional<double> end = groupEnd(rank, group);
  if (!end) {
    blocked = true;
    return llvm::Error::success();
  }
  if (llvm::Error error = completeGroup(rank, group, *end))
    return error;
  clock[rank] = *end;
  next[rank] = group.end;
  return llvm::Error::success();
}

/// When a started group completes: once every transfer's partner group has
/// started, at the latest start plus the latency; none before that.
std::optional<double> Simulator::groupEnd(int rank, const Group &group) const {
  double ready = group.start;
  for (size_t i = group.begin; i < group.end; ++i) {
    const Partner &partner = partners[rank][i];
    if (partner.rank < 0)
      return std::nullopt;
    const Group &other =
        groups[partner.rank][groupOf[partner.rank][partner.index]];
    if (other.start < 0)
      return std::nullopt;
    ready = std::max(ready, other.start);
  }
  return ready + costs.latency;
}

/// Completes every transfer of the group at `end`.
llvm::Error Simulator::completeGroup(int rank, const Group &group,
                                     double end) {
  for (size_t i = group.begin; i < group.end; ++i) {
    if (llvm::Error error = transferCompleted(rank, i, end))
      return error;
    record(rank, i, group.start, end);
  }
  return llvm::Error::success();
}

/// Rendezvous: no rank moves. Either a transfer has no counterpart at all,
/// or the waiting groups form a cycle: each waits for a peer to reach a
/// group that comes after the one the peer is waiting in.
llvm::Error Simulator::reportRendezvousDeadlock() {
  auto counts = [&](int from, int to) {
    int sent = 0, received = 0;
    for (const Action &action : schedule.ranks[from])
      sent += isSend(action.kind) && action.peer == to;
    for (const Action &action : schedule.ranks[to])
      received += isRecv(action.kind) && action.peer == from;
    return std::make_pair(sent, received);
  };
  for (int rank = 0; rank < p; ++rank) {
    if (next[rank] >= schedule.ranks[rank].size())
      continue;
    const Group &group = groups[rank][groupOf[rank][next[rank]]];
    for (size_t i = group.begin; i < group.end; ++i) {
      if (partners[rank][i].rank >= 0)
        continue;
      const Action &action = schedule.ranks[rank][i];
      if (isSend(action.kind)) {
        auto [sent, received] = counts(rank, action.peer);
        return makeError(llvm::formatv("{0} is never received: rank {1} "
                                       "receives {2} messages from rank {3} "
                                       "and rank {3} sends {4}",
                                       describe(rank, i), action.peer, received,
                                       rank, sent)
                             .str());
      }
      auto [sent, received] = counts(action.peer, rank);
      return makeError(llvm::formatv("{0} is never sent: rank {1} sends {2} "
                                     "messages to rank {3} and rank {3} "
                                     "receives {4}",
                                     describe(rank, i), action.peer, sent, rank,
                                     received)
                           .str());
    }
  }
  // Every blocked rank waits for another blocked one: follow the first
  // wait of each until a rank repeats.
  auto waitOf = [&](int rank) -> std::pair<size_t, Partner> {
    const Group &group = groups[rank][groupOf[rank][next[rank]]];
    for (size_t i = group.begin; i < group.end; ++i) {
      const Partner &partner = partners[rank][i];
      if (groups[partner.rank][groupOf[partner.rank][partner.index]].start < 0)
        return {i, partner};
    }
    llvm_unreachable("a blocked group waits for nothing");
  };
  int rank = 0;
  while (next[rank] >= schedule.ranks[rank].size())
    ++rank;
  std::vector<int> seen(p, -1), order;
  while (seen[rank] < 0) {
    seen[rank] = order.size();
    order.push_back(rank);
    rank = waitOf(rank).second.rank;
  }
  std::string text =
      "deadlock: transfer groups wait for each other in a cycle: ";
  for (size_t k = seen[rank]; k < order.size(); ++k) {
    int r = order[k];
    auto [index, partner] = waitOf(r);
    int group = groupOf[r][next[r]];
    if (k > size_t(seen[rank]))
      text += "; ";
    text +=
        llvm::formatv("{0} from t = {1}: its {2} waits for {4} in rank {3}'s "
                      "group {5}, and rank {3} is still in its group {6}",
                      describeGroup(r, group), number(groups[r][group].start),
                      formatAction(schedule.ranks[r][index], v), partner.rank,
                      describe(partner.rank, partner.index),
                      groupOf[partner.rank][partner.index],
                      groupOf[partner.rank][next[partner.rank]])
            .str();
  }
  return makeError(text);
}

llvm::Error Simulator::checkComplete() {
  std::vector<std::string> problems;
  for (int stage = 0; stage < stages; ++stage) {
    for (int mb = 0; mb < m; ++mb) {
      StageMicrobatch &here = state(stage, mb);
      int rank = schedule.rankOf(stage), chunk = schedule.chunkOf(stage);
      auto missing = [&](ActionKind kind, llvm::StringRef what) {
        problems.push_back(llvm::formatv("{0} {1} of micro-batch {2} on "
                                         "stage {3} (rank {4})",
                                         what, name(kind, mb, chunk), mb,
                                         stage, rank)
                               .str());
      };
      if (!here.forward)
        missing(ActionKind::Forward, "the forward");
      if (!here.backward && !here.backwardInput)
        missing(ActionKind::Backward, "the backward");
      if (here.backwardInput && !here.backwardWeight)
        missing(ActionKind::BackwardWeight, "the weight gradient");
    }
  }
  if (!problems.empty()) {
    std::string list;
    for (auto [i, problem] : llvm::enumerate(problems)) {
      if (i == 4) {
        list += "; and " + std::to_string(problems.size() - 4) + " more";
        break;
      }
      list += (i ? "; " : "") + problem;
    }
    return makeError("the schedule never runs " + list);
  }
  for (auto &[channel, sent] : channels) {
    size_t count = received[channel];
    if (count < sent.size()) {
      const Message &message = sent[count];
      return makeError(llvm::formatv("{0} is never received: rank {1} "
                                     "receives {2} messages from rank {3} "
                                     "and rank {3} sends {4}",
                                     describe(message.rank, message.index),
                                     channel.second, count, channel.first,
                                     sent.size())
                           .str());
    }
  }
  return llvm::Error::success();
}

llvm::Expected<Simulation> Simulator::run() {
  if (llvm::Error error = checkShape())
    return error;
  states.assign(static_cast<size_t>(stages) * m, {});
  next.assign(p, 0);
  clock.assign(p, 0);
  inFlight.assign(stages, 0);
  inFlightPerRank.assign(p, 0);
  if (semantics != SendSemantics::Buffered)
    buildGroups();
  queued.assign(p, {});
  streamClock.assign(p, 0);
  result.kind = schedule.kind;
  result.semantics = semantics;
  result.stages = p;
  result.microbatches = m;
  result.chunks = v;
  result.timeline.resize(p);
  if (semantics == SendSemantics::Streamed)
    for (int rank = 0; rank < p; ++rank)
      result.timeline[rank].resize(schedule.ranks[rank].size());
  result.busy.assign(p, 0);
  result.peakInFlight.assign(stages, 0);
  result.peakInFlightPerRank.assign(p, 0);

  // A rank's times depend only on its own program order and on when its
  // messages were sent (with rendezvous: when its peers reached their
  // groups; streamed: when its peers' transfer streams started them), so
  // running each rank, and its transfer stream, as far as it can, round
  // after round, computes the same times as a global event queue. A round
  // in which nothing moves and no group starts is a deadlock.
  for (bool moved = true; moved;) {
    moved = false;
    for (int rank = 0; rank < p; ++rank) {
      while (next[rank] < schedule.ranks[rank].size()) {
        bool blocked;
        startedGroup = false;
        if (llvm::Error error = step(rank, blocked))
          return error;
        moved |= startedGroup;
        if (blocked)
          break;
        moved = true;
      }
      if (semantics == SendSemantics::Streamed)
        if (llvm::Error error = advanceStream(rank, moved))
          return error;
    }
  }

  bool stuck = false;
  for (int rank = 0; rank < p; ++rank)
    stuck |= next[rank] < schedule.ranks[rank].size() || !queued[rank].empty();
  if (stuck && semantics == SendSemantics::Rendezvous)
    return reportRendezvousDeadlock();
  if (stuck && semantics == SendSemantics::Streamed)
    return reportStreamedDeadlock();
  std::vector<std::string> waiting;
  for (int rank = 0; rank < p; ++rank)
    if (next[rank] < schedule.ranks[rank].size())
      waiting.push_back(
          describe(rank, next[rank]) + " waits for rank " +
          Twine(schedule.ranks[rank][next[rank]].peer).str() + " from t = " +
          number(clock[rank]));
  if (!waiting.empty()) {
    std::string list;
    for (auto [i, line] : llvm::enumerate(waiting))
      list += (i ? "; " : "") + line;
    return makeError("deadlock: no rank can progress: " + list);
  }
  if (llvm::Error error = checkComplete())
    return error;

  for (int rank = 0; rank < p; ++rank) {
    // Streamed: a rank's last transfer may end after its last computation.
    for (const TimedAction &timed : result.timeline[rank])
      result.makespan = std::max(result.makespan, timed.end);
    result.totalCompute += result.busy[rank];
  }
  result.bubbleFraction =
      result.makespan > 0 ? 1 - result.totalCompute / (p * result.makespan)
                          : 0;
  return std::move(result);
}

} // namespace

llvm::Expected<Simulation> dsopt::pipeline::simulate(const Schedule &schedule,
                                                     const Costs &costs,
                                                     SendSemantics semantics) {
  return Simulator(schedule, costs, semantics).run();
}

//===----------------------------------------------------------------------===//
// Chrome trace
//===----------------------------------------------------------------------===//

void dsopt::pipeline::writeChromeTrace(const Simulation &simulation,
                                       llvm::raw_ostream &os) {
  llvm::json::OStream json(os, /*IndentSize=*/0);
  // One cost unit is shown as one millisecond (trace times are in us).
  constexpr double scale = 1000;
  json.object([&] {
    json.attribute("displayTimeUnit", "ms");
    json.attributeArray("traceEvents", [&] {
      json.object([&] {
        json.attribute("name", "process_name");
        json.attribute("ph", "M");
        json.attribute("pid", 0);
        json.attributeObject("args", [&] {
          json.attribute(
              "name",
              llvm::formatv("pipeline {0}: p = {1}, m = {2}, v = {3}",
                            getScheduleKindName(simulation.kind),
                            simulation.stages, simulation.microbatches,
                            simulation.chunks)
                  .str());
        });
      });
      // Streamed: each rank's transfers on a track of their own.
      const bool streamed = simulation.semantics == SendSemantics::Streamed;
      const int lanes = streamed ? 2 : 1;
      // A track's metadata entry `name` with its one argument.
      auto metadata = [&](llvm::StringRef name, int tid, llvm::StringRef key,
                          llvm::json::Value value) {
        json.object([&] {
          json.attribute("name", name);
          json.attribute("ph", "M");
          json.attribute("pid", 0);
          json.attribute("tid", tid);
          json.attributeObject("args",
                               [&] { json.attribute(key, std::move(value)); });
        });
      };
      for (int rank = 0; rank < simulation.stages; ++rank) {
        for (int lane = 0; lane < lanes; ++lane) {
          const int tid = lane * simulation.stages + rank;
          metadata("thread_name", tid, "name",
                   "rank " + std::to_string(rank) + (lane ? " transfers" : ""));
          metadata("thread_sort_index", tid, "sort_index",
                   lanes * rank + lane);
        }
      }
      for (int rank = 0; rank < simulation.stages; ++rank) {
        for (const TimedAction &timed : simulation.timeline[rank]) {
          const Action &action = timed.action;
          std::string mb = std::to_string(action.microbatch);
          std::string name, category = "communication";
          switch (action.kind) {
          case ActionKind::Forward:
            name = "F" + mb, category = "forward";
            break;
          case ActionKind::Backward:
          case ActionKind::BackwardInput:
            name = "B" + mb, category = "backward";
            break;
          case ActionKind::BackwardWeight:
            name = "W" + mb, category = "weight-gradient";
            break;
          case ActionKind::SendActivation:
            name = "send act " + mb;
            break;
          case ActionKind::RecvActivation:
            name = "recv act " + mb;
            break;
          case ActionKind::SendGradient:
            name = "send grad " + mb;
            break;
          case ActionKind::RecvGradient:
            name = "recv grad " + mb;
            break;
          }
          json.object([&] {
            json.attribute("name", name);
            json.attribute("cat", category);
            json.attribute("ph", "X");
            json.attribute("pid", 0);
            json.attribute("tid", streamed && !isCompute(action.kind)
                                      ? simulation.stages + rank
                                      : rank);
            json.attribute("ts", timed.start * scale);
            json.attribute("dur", (timed.end - timed.start) * scale);
            json.attributeObject("args", [&] {
              json.attribute("rank", rank);
              json.attribute("action", formatAction(action, simulation.chunks));
              json.attribute("stage",
                             action.chunk * simulation.stages + rank);
              json.attribute("chunk", action.chunk);
              json.attribute("microbatch", action.microbatch);
              if (action.peer >= 0)
                json.attribute("peer", action.peer);
              if (action.kind == ActionKind::Backward)
                json.attribute("backward", "input and weight gradients");
              else if (action.kind == ActionKind::BackwardInput)
                json.attribute("backward", "input gradient");
            });
          });
        }
      }
    });
  });
  os << "\n";
}

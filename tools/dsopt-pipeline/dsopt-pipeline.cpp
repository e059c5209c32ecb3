//===- dsopt-pipeline.cpp - build and simulate a pipeline schedule --------===//
//
//   dsopt-pipeline --schedule 1f1b --stages 4 --microbatches 8
//       [--chunks V] [--forward F --backward B --weight W --latency L]
//       [--semantics streamed|rendezvous|buffered]
//       [--trace trace.json] [--print-actions] [--json]
//
// Builds the schedule, runs it in the simulator and prints the makespan, the
// bubble next to the textbook value and the peak number of micro-batches in
// flight per stage. docs/pipeline.md explains the numbers.
//
//===----------------------------------------------------------------------===//

#include "dsopt/Pipeline/Schedule.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/WithColor.h"
#include "llvm/Support/raw_ostream.h"

#include <cmath>
#include <optional>

namespace cl = llvm::cl;
using namespace dsopt::pipeline;

namespace {

cl::OptionCategory category("dsopt-pipeline options");

// Numbers are read as text so that every bad value gets dsopt's message.
cl::opt<std::string> scheduleFlag(
    "schedule", cl::desc("gpipe, 1f1b, interleaved or zb-h1"),
    cl::value_desc("S"), cl::cat(category));
cl::opt<std::string> stagesFlag("stages",
                                cl::desc("Pipeline stages (ranks), p"),
                                cl::value_desc("P"), cl::cat(category));
cl::opt<std::string> microbatchesFlag("microbatches",
                                      cl::desc("Micro-batches per step, m"),
                                      cl::value_desc("M"), cl::cat(category));
cl::opt<std::string> chunksFlag(
    "chunks",
    cl::desc("Model chunks per rank, v (interleaved only; default 1, or 2 "
             "for interleaved)"),
    cl::value_desc("V"), cl::cat(category));
cl::opt<std::string> forwardFlag(
    "forward",
    cl::desc("Forward time of one micro-batch on one rank's layers "
             "(default 1); each of v chunks takes 1/v of it"),
    cl::value_desc("F"), cl::init("1"), cl::cat(category));
cl::opt<std::string> backwardFlag(
    "backward",
    cl::desc("Whole backward time (input and weight gradients) of one "
             "micro-batch on one rank's layers (default 2)"),
    cl::value_desc("B"), cl::init("2"), cl::cat(category));
cl::opt<std::string> weightFlag(
    "weight",
    cl::desc("The weight-gradient part of --backward, which zb-h1 runs "
             "separately (default: half of --backward)"),
    cl::value_desc("W"), cl::cat(category));
cl::opt<std::string>
    latencyFlag("latency",
                cl::desc("Time from a send to its data on the receiver "
                         "(default 0)"),
                cl::value_desc("L"), cl::init("0"), cl::cat(category));
cl::opt<std::string> semanticsFlag(
    "semantics",
    cl::desc("How sends complete: streamed (default; rendezvous groups on "
             "a transfer stream of the rank's own, as the runtime's pipeline "
             "executor runs them), rendezvous (each run of consecutive "
             "transfers is one group that the rank waits in for its peers, "
             "as one dsrt::send_recv) or buffered (a send never blocks)"),
    cl::value_desc("S"), cl::init("streamed"), cl::cat(category));
cl::opt<std::string>
    traceFlag("trace",
              cl::desc("Write the simulated timeline as Chrome trace JSON"),
              cl::value_desc("FILE"), cl::cat(category));
cl::opt<bool> printActionsFlag("print-actions",
                               cl::desc("Print each rank's actions"),
                               cl::cat(category));
cl::opt<bool> jsonFlag("json",
                       cl::desc("Print the summary as one JSON object"),
                       cl::cat(category));
// Corrupts the built schedule, to show that the simulator rejects it.
cl::opt<std::string> breakFlag("break", cl::Hidden, cl::value_desc("HOW"),
                               cl::cat(category));

int fail(const llvm::Twine &message) {
  llvm::WithColor::error(llvm::errs(), "dsopt-pipeline") << message << "\n";
  return 1;
}

std::optional<int> parseCount(llvm::StringRef text) {
  int value;
  if (text.trim() != text || text.getAsInteger(10, value))
    return std::nullopt;
  return value;
}

std::optional<double> parseTime(llvm::StringRef text) {
  double value;
  if (text.trim() != text || text.getAsDouble(value) || !std::isfinite(value) ||
      value < 0)
    return std::nullopt;
  return value;
}

std::string formatNumber(double value) {
  return llvm::formatv("{0}", llvm::format("%.10g", value)).str();
}

/// The schedule made wrong on purpose, in one of a few ways the simulator
/// must catch. Returns an error message when the schedule is too small for
/// the corruption.
std::optional<std::string> corrupt(Schedule &schedule, llvm::StringRef how) {
  int p = schedule.stages;
  auto find = [](std::vector<Action> &actions, ActionKind kind,
                 int skip = 0) -> std::optional<size_t> {
    for (size_t i = 0; i < actions.size(); ++i)
      if (actions[i].kind == kind && skip-- == 0)
        return i;
    return std::nullopt;
  };
  auto tooSmall = [&](llvm::StringRef needs) {
    return ("--break=" + how + " needs " + needs).str();
  };
  if (how == "swap-sends") {
    // Rank 0 computes and sends its first two micro-batches in the other
    // order: its sends no longer pair with rank 1's receives.
    if (p < 2 || schedule.microbatches < 2)
      return tooSmall("2 stages and 2 micro-batches");
    std::vector<Action> &actions = schedule.ranks[0];
    int a = actions[*find(actions, ActionKind::Forward, 0)].microbatch;
    int b = actions[*find(actions, ActionKind::Forward, 1)].microbatch;
    for (Action &action : actions)
      if (action.kind == ActionKind::Forward ||
          action.kind == ActionKind::SendActivation)
        if (action.microbatch == a || action.microbatch == b)
          action.microbatch = action.microbatch == a ? b : a;
    return std::nullopt;
  }
  if (how == "swap-recvs") {
    // The last rank receives its first two activations the other way round.
    std::vector<Action> &actions = schedule.ranks[p - 1];
    auto first = find(actions, ActionKind::RecvActivation, 0);
    auto second = find(actions, ActionKind::RecvActivation, 1);
    if (!first || !second)
      return tooSmall("2 stages and 2 micro-batches");
    std::swap(actions[*first], actions[*second]);
    return std::nullopt;
  }
  if (how == "split-group") {
    // 1F1B's steady state done as separate rendezvous transfers, sends
    // first: rank 0 sends an activation, then receives a gradient; rank 1
    // sends that gradient, then receives the activation. Each send waits
    // for a receive its peer issues only after its own send.
    if (p < 2)
      return tooSmall("2 stages");
    std::vector<Action> &first = schedule.ranks[0];
    std::vector<Action> &second = schedule.ranks[1];
    for (size_t i = 0; i + 1 < first.size(); ++i) {
      if (first[i].kind != ActionKind::SendActivation || first[i].peer != 1 ||
          first[i + 1].kind != ActionKind::RecvGradient ||
          first[i + 1].peer != 1)
        continue;
      for (size_t j = 0; j + 1 < second.size(); ++j) {
        if (second[j].kind == ActionKind::SendGradient && second[j].peer == 0 &&
            second[j].microbatch == first[i + 1].microbatch &&
            second[j + 1].kind == ActionKind::RecvActivation &&
            second[j + 1].peer == 0 &&
            second[j + 1].microbatch == first[i].microbatch) {
          first[i + 1].newGroup = true;
          second[j + 1].newGroup = true;
          return std::nullopt;
        }
      }
    }
    return tooSmall("a steady state in which rank 0 sends an activation "
                    "and then receives a gradient (1f1b with m >= p)");
  }
  if (how == "drop-recv") {
    // Rank 1 forgets to receive its first activation.
    if (p < 2)
      return tooSmall("2 stages");
    std::vector<Action> &actions = schedule.ranks[1];
    actions.erase(actions.begin() + *find(actions, ActionKind::RecvActivation));
    return std::nullopt;
  }
  if (how == "drop-backward") {
    // Rank 0 never runs the backward of its last micro-batch.
    std::vector<Action> &actions = schedule.ranks[0];
    for (size_t i = actions.size(); i-- > 0;)
      if (actions[i].kind == ActionKind::Backward ||
          actions[i].kind == ActionKind::BackwardInput) {
        actions.erase(actions.begin() + i);
        break;
      }
    return std::nullopt;
  }
  if (how == "duplicate-forward") {
    std::vector<Action> &actions = schedule.ranks[0];
    size_t at = *find(actions, ActionKind::Forward);
    actions.insert(actions.begin() + at + 1, actions[at]);
    return std::nullopt;
  }
  if (how == "backward-first") {
    // The last rank starts with a backward whose forward has not run.
    std::vector<Action> &actions = schedule.ranks[p - 1];
    for (size_t i = 0; i < actions.size(); ++i)
      if (actions[i].kind == ActionKind::Backward ||
          actions[i].kind == ActionKind::BackwardInput) {
        Action backward = actions[i];
        actions.erase(actions.begin() + i);
        actions.insert(actions.begin(), backward);
        break;
      }
    return std::nullopt;
  }
  if (how == "early-recv") {
    // Rank 0 waits for its first gradient before it sends anything: rank 1
    // waits for rank 0's activation, rank 0 for rank 1's gradient.
    if (p < 2)
      return tooSmall("2 stages");
    std::vector<Action> &actions = schedule.ranks[0];
    size_t at = *find(actions, ActionKind::RecvGradient);
    Action recv = actions[at];
    actions.erase(actions.begin() + at);
    actions.insert(actions.begin(), recv);
    return std::nullopt;
  }
  return "--break expects swap-sends, swap-recvs, split-group, drop-recv, "
         "drop-backward, duplicate-forward, backward-first or early-recv, "
         "got '" +
         how.str() + "'";
}

} // namespace

int main(int argc, char **argv) {
  llvm::InitLLVM initLLVM(argc, argv);
  cl::HideUnrelatedOptions(category);
  std::string parseErrors;
  llvm::raw_string_ostream parseStream(parseErrors);
  if (!cl::ParseCommandLineOptions(
          argc, argv,
          "dsopt-pipeline: build and simulate a pipeline-parallel schedule\n",
          &parseStream)) {
    llvm::StringRef first = llvm::StringRef(parseErrors).trim();
    first = first.take_until([](char c) { return c == '\n'; });
    first.consume_front("dsopt-pipeline: ");
    return fail(first.empty() ? "invalid command line (see --help)" : first);
  }

  if (scheduleFlag.empty())
    return fail("--schedule is required: gpipe, 1f1b, interleaved or zb-h1");
  std::optional<ScheduleKind> kind = parseScheduleKind(scheduleFlag);
  if (!kind)
    return fail("--schedule expects gpipe, 1f1b, interleaved or zb-h1, got '" +
                scheduleFlag + "'");
  if (stagesFlag.empty())
    return fail("--stages is required");
  if (microbatchesFlag.empty())
    return fail("--microbatches is required");
  std::optional<int> stages = parseCount(stagesFlag);
  if (!stages)
    return fail("--stages expects an integer, got '" + stagesFlag + "'");
  std::optional<int> microbatches = parseCount(microbatchesFlag);
  if (!microbatches)
    return fail("--microbatches expects an integer, got '" + microbatchesFlag +
                "'");
  std::optional<int> chunks =
      chunksFlag.empty() ? std::optional<int>(
                               *kind == ScheduleKind::Interleaved ? 2 : 1)
                         : parseCount(chunksFlag);
  if (!chunks)
    return fail("--chunks expects an integer, got '" + chunksFlag + "'");

  std::optional<double> forward = parseTime(forwardFlag);
  std::optional<double> backward = parseTime(backwardFlag);
  std::optional<double> latency = parseTime(latencyFlag);
  for (auto [flag, value] :
       {std::make_pair(&forwardFlag, forward),
        std::make_pair(&backwardFlag, backward),
        std::make_pair(&latencyFlag, latency)})
    if (!value)
      return fail("--" + flag->ArgStr +
                  " expects a finite time that is not negative, got '" +
                  *flag + "'");
  std::optional<double> weight =
      weightFlag.empty() ? std::optional<double>(*backward / 2)
                         : parseTime(weightFlag);
  if (!weight)
    return fail("--weight expects a finite time that is not negative, got '" +
                weightFlag + "'");
  if (*weight > *backward)
    return fail("--weight " + formatNumber(*weight) +
                " exceeds --backward " + formatNumber(*backward) +
                ": it is the weight-gradient part of the backward");

  std::optional<SendSemantics> semantics = parseSendSemantics(semanticsFlag);
  if (!semantics)
    return fail("--semantics expects streamed, rendezvous or buffered, got '" +
                semanticsFlag + "'");

  llvm::Expected<Schedule> schedule =
      buildSchedule(*kind, *stages, *microbatches, *chunks);
  if (!schedule)
    return fail(llvm::toString(schedule.takeError()));
  if (!breakFlag.empty())
    if (std::optional<std::string> error = corrupt(*schedule, breakFlag))
      return fail(*error);

  int p = schedule->stages, m = schedule->microbatches, v = schedule->chunks;
  // The flags are per rank; each of a rank's v chunks is 1/v of its layers.
  Costs costs =
      Costs::uniform(p * v, *forward / v, *backward / v, *weight / v, *latency);
  llvm::Expected<Simulation> simulation =
      simulate(*schedule, costs, *semantics);
  if (!simulation)
    return fail("the " + getScheduleKindName(*kind) +
                " schedule cannot run with " +
                getSendSemanticsName(*semantics) +
                " sends: " + llvm::toString(simulation.takeError()));

  if (!traceFlag.empty()) {
    std::error_code ec;
    llvm::raw_fd_ostream trace(traceFlag, ec, llvm::sys::fs::OF_Text);
    if (ec)
      return fail("cannot write " + traceFlag + ": " + ec.message());
    writeChromeTrace(*simulation, trace);
  }

  std::optional<double> textbook = textbookBubbleFraction(
      *kind, p, m, v, *forward / v, *backward / v, *weight / v);
  llvm::StringRef formula;
  switch (*kind) {
  case ScheduleKind::GPipe:
  case ScheduleKind::OneFOneB:
    formula = "(p-1)/(m+p-1)";
    break;
  case ScheduleKind::Interleaved:
    formula = "(p-1)/(v*m+p-1)";
    break;
  case ScheduleKind::ZeroBubbleH1:
    formula = "(p-1)(F+Bi-W)/((p-1)(F+Bi-W)+m(F+Bi+W))";
    break;
  }
  double idle = simulation->makespan * p - simulation->totalCompute;
  llvm::raw_ostream &os = llvm::outs();

  if (jsonFlag) {
    llvm::json::OStream json(os, 2);
    json.object([&] {
      json.attribute("schedule", getScheduleKindName(*kind));
      json.attribute("stages", p);
      json.attribute("microbatches", m);
      json.attribute("chunks", v);
      json.attribute("forward", *forward);
      json.attribute("backward", *backward);
      json.attribute("weight", *weight);
      json.attribute("latency", *latency);
      json.attribute("semantics", getSendSemanticsName(*semantics));
      json.attribute("makespan", simulation->makespan);
      json.attribute("total_compute", simulation->totalCompute);
      json.attribute("idle", idle);
      json.attribute("bubble_fraction", simulation->bubbleFraction);
      if (textbook)
        json.attribute("textbook_bubble_fraction", *textbook);
      else
        json.attribute("textbook_bubble_fraction", nullptr);
      json.attributeArray("busy", [&] {
        for (double busy : simulation->busy)
          json.value(busy);
      });
      json.attributeArray("peak_in_flight", [&] {
        for (int peak : simulation->peakInFlight)
          json.value(peak);
      });
      json.attributeArray("peak_in_flight_per_rank", [&] {
        for (int peak : simulation->peakInFlightPerRank)
          json.value(peak);
      });
    });
    os << "\n";
  } else {
    os << llvm::formatv("schedule: {0}, p = {1} stages, m = {2} "
                        "micro-batches, v = {3} chunk{4} per rank\n",
                        getScheduleKindName(*kind), p, m, v,
                        v == 1 ? "" : "s");
    os << "costs per micro-batch and rank: forward " << formatNumber(*forward)
       << ", backward " << formatNumber(*backward) << " (weight gradient "
       << formatNumber(*weight) << "), latency " << formatNumber(*latency)
       << "\n";
    const char *how = " (a send never blocks)";
    if (*semantics == SendSemantics::Rendezvous)
      how = " (each run of consecutive transfers is one group that completes "
            "when its peers have reached theirs)";
    else if (*semantics == SendSemantics::Streamed)
      how = " (each run of consecutive transfers is one group, run in order "
            "on the rank's transfer stream while the rank computes; it "
            "completes when its peers' streams have reached theirs)";
    os << "sends: " << getSendSemanticsName(*semantics) << how << "\n";
    os << "makespan: " << formatNumber(simulation->makespan) << "\n";
    os << "compute per rank: " << formatNumber(simulation->totalCompute / p)
       << "\n";
    os << "idle time: " << formatNumber(idle) << " (" << formatNumber(idle / p)
       << " per rank)\n";
    os << llvm::formatv("bubble fraction: {0:F6} (idle / (p * makespan))\n",
                        simulation->bubbleFraction);
    if (textbook)
      os << llvm::formatv("textbook bubble fraction: {0:F6} ({1}{2})\n",
                          *textbook, formula,
                          *latency > 0 ? ", without latency" : "");
    os << "peak in-flight micro-batches per stage:";
    for (int peak : simulation->peakInFlight)
      os << " " << peak;
    os << "\n";
    if (v > 1) {
      os << "peak in-flight chunk activations per rank:";
      for (int peak : simulation->peakInFlightPerRank)
        os << " " << peak;
      os << "\n";
    }
  }

  if (printActionsFlag) {
    for (auto [rank, actions] : llvm::enumerate(schedule->ranks)) {
      os << "rank " << rank << ":";
      for (const Action &action : actions)
        os << " " << formatAction(action, v);
      os << "\n";
    }
  }
  return 0;
}

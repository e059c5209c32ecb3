// The pipeline runner's schedule executor (not installed): runs one pp
// rank's static action list every step (forwards, backwards, weight
// gradients, send/recv groups along pp), keeping in-flight values in the
// pools' slots, then sums the tied gradients (pipeline_executor.cpp).
//
// Computations run on the program's stream, send/recv groups in action
// order on a transfer stream of their own, each after the computations
// queued before it. A computation waits (on the device, not the host) only
// for the group that received what it reads and for the one that last sent
// from the slot it writes; so a send overlaps the computations after it,
// and a receive those before the one that reads it.
#ifndef DSRT_SRC_PIPELINE_EXECUTOR_H
#define DSRT_SRC_PIPELINE_EXECUTOR_H

#include "pipeline_plan.h"
#include "pipeline_pools.h"

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace dsrt {
namespace pipeline {

struct StageRun {
  StagePlan plan;
  std::unique_ptr<SlotPool> pools[kPoolKindCount];
};

// One step's measurements of one rank's actions: when the program's stream
// ran them, in microseconds from the point it reached when the step began
// (BackendInterface's timing marks: the host clock on cpu, cudaEvents on
// cuda).
struct StepTimes {
  std::vector<double> begin, end;
  double compute_us = 0, actions_end_us = 0;
};

// The transfers of one send_recv group.
struct TransferGroup {
  std::vector<Tensor> sends, recvs;
  std::vector<int64_t> send_peers, recv_peers;

  void add(bool send, const Tensor &tensor, int64_t peer) {
    (send ? sends : recvs).push_back(tensor);
    (send ? send_peers : recv_peers).push_back(peer);
  }
};

class PipelineExecutor {
public:
  PipelineExecutor(Program &program, const PipelineRankProgram &functions,
                   const std::vector<InputData> &data, int64_t pp_axis);

  // Runs the action list of step `step` on global batch `batch`; losses[mb]
  // gets the loss of micro-batch mb where this rank has the last stage.
  void run_actions(int64_t batch, uint64_t first_counter, int64_t dp_rank,
                   std::vector<float> &losses);

  // The times of the actions run_actions ran, read from the timing marks
  // recorded around them on the program's stream: call it after a host
  // wait for that stream (the step's non-finite check), which adds none.
  void read_times(StepTimes &times) const;

  // Each tied state becomes the sum of its sharers' copies, in ascending
  // rank order.
  void sum_tied();

  // fp16: the loss scale the next steps' stage functions bind (their
  // input "loss_scale": the last stage's forward, whose loss-and-gradient
  // op it seeds, or its backward with --no-fuse-loss-grad).
  void set_loss_scale(double scale) { loss_scale_ = scale; }

private:
  StageRun &stage_run(int64_t stage);
  StageRun &stage_of(const PipelineAction &action);

  // Records `first` on the program's stream once it has waited for the
  // transfers the computation needs.
  void run_compute(const PipelineAction &action, int64_t batch, uint64_t counter,
                   int64_t global_micro, std::vector<float> &losses, const DeviceEvent &first);

  void issue(const TransferGroup &group, Stream &stream);

  // Actions [begin, end): one send_recv group along pp, queued on the
  // transfer stream after the computations queued so far, between timing
  // marks `first` and `last` recorded there; the host does not wait for it.
  // Every tensor of a slot is one transfer, in slot order.
  void run_transfers(size_t begin, size_t end, const DeviceEvent &first,
                     const DeviceEvent &last);
  // Frees the slots the last group sent from (sending_).
  void release_sending();

public:
  // After this rank failed during the step: issues the step's transfers it
  // has not issued yet (the rest of the action list, then the tied sums),
  // sending zeros from scratch memory and receiving into it, so that its
  // peers finish the step and reach the exchange where every rank learns
  // of the failure, instead of waiting for the communicator's timeout.
  // Gives up at the first error.
  void finish_transfers_after_failure();

private:
  Program &program_;
  const ProgramInfo &info_;
  const PipelineInfo &pipeline_;
  const PipelineRankProgram &functions_;
  const int64_t pp_axis_;
  // The send_recv groups', in action order.
  Stream transfers_;
  // The slots the last group sends from: held until the next group is
  // queued (or the step's actions end), so that the computations between
  // write other slots while the sends are in flight. The compiler's pool
  // sizes count them so (ds-pipeline-split).
  std::vector<std::pair<SlotPool *, int64_t>> sending_;
  std::vector<StageRun> stages_;
  std::unique_ptr<SlotPool> tied_;
  std::map<std::string, const InputData *> data_;
  // What the running step has issued: actions before next_action_, and
  // the tied sums.
  size_t next_action_ = 0;
  bool tied_issued_ = false;
  double loss_scale_ = 1;
  // The timing marks, made once: marks_[0] where the step began, then a
  // begin and an end mark per group of actions (one computation, on the
  // program's stream, or one send_recv group, on transfers_), in action order; group_starts_ the groups' first
  // actions, and the action count last.
  std::vector<DeviceEvent> marks_;
  std::vector<size_t> group_starts_;
};

}  // namespace pipeline
}  // namespace dsrt

#endif  // DSRT_SRC_PIPELINE_EXECUTOR_H

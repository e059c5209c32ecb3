// The pipeline runner's schedule executor: see pipeline_executor.h.
#include "pipeline_executor.h"

#include "dsrt/backend.h"
#include "dsrt/comm.h"
#include "async.h"

#include <algorithm>
#include <string>
#include <vector>

namespace dsrt {
namespace pipeline {

namespace {

// The pool a transfer action's tensors are in.
int transfer_pool(Kind kind) {
  switch (kind) {
  case Kind::SendActivation: return ActOut;
  case Kind::RecvActivation: return ActIn;
  case Kind::SendGradient: return GradOut;
  default: return GradIn;
  }
}

}  // namespace

PipelineExecutor::PipelineExecutor(Program &program, const PipelineRankProgram &functions,
                                   const std::vector<InputData> &data, int64_t pp_axis)
    : program_(program), info_(*program.info), pipeline_(info_.pipeline),
      functions_(functions), pp_axis_(pp_axis),
      transfers_(program.stream.backend(), program.stream.threads()) {
  for (StagePlan &plan : stage_plans(info_)) {
    StageRun run;
    run.plan = std::move(plan);
    stages_.push_back(std::move(run));
  }
  for (const PipelinePool &pool : pipeline_.pools) {
    const int kind = pool_kind(pool.kind);
    if (kind == Tied) {
      tied_ = std::make_unique<SlotPool>(pool, tied_layout(info_), "tied pool");
      continue;
    }
    StageRun &stage = stage_run(pool.stage);
    stage.pools[kind] = std::make_unique<SlotPool>(
        pool, stage.plan.layouts[kind],
        std::string(kPoolKinds[kind]) + " pool of stage " + std::to_string(pool.stage));
  }
  for (const InputData &item : data) data_[item.input->name] = &item;
  const std::vector<PipelineAction> &actions = pipeline_.actions;
  for (size_t i = 0; i < actions.size(); ++i)
    if (i == 0 || !is_transfer(actions[i].kind) || !is_transfer(actions[i - 1].kind))
      group_starts_.push_back(i);
  group_starts_.push_back(actions.size());
  BackendInterface &b = backend(program_.stream);
  for (size_t i = 0; i < 2 * group_starts_.size() - 1; ++i) marks_.push_back(b.timing_mark());
}

void PipelineExecutor::run_actions(int64_t batch, uint64_t first_counter, int64_t dp_rank,
                                   std::vector<float> &losses) {
  const std::vector<PipelineAction> &actions = pipeline_.actions;
  BackendInterface &b = backend(program_.stream);
  next_action_ = 0;
  tied_issued_ = false;
  release_sending();  // what a failed step left
  b.record_timing(program_.stream, marks_[0]);
  for (size_t g = 0; g + 1 < group_starts_.size(); ++g) {
    const size_t i = group_starts_[g], end = group_starts_[g + 1];
    if (is_transfer(actions[i].kind)) {
      run_transfers(i, end, marks_[2 * g + 1], marks_[2 * g + 2]);
      continue;
    }
    next_action_ = end;
    const int64_t k = pipeline_.microbatches;
    const int64_t mb = actions[i].microbatch;
    run_compute(actions[i], batch, first_counter + static_cast<uint64_t>(dp_rank * k + mb),
                dp_rank * k + mb, losses, marks_[2 * g + 1]);
    b.record_timing(program_.stream, marks_[2 * g + 2]);
  }
  // What follows the actions (the tied sums, the non-finite check, the
  // optimizer step) runs after the last transfer; no host wait for the
  // device.
  release_sending();
  detail::order_after(program_.stream, transfers_);
  for (const StageRun &stage : stages_)
    for (const auto &pool : stage.pools)
      if (pool && !pool->held().empty())
        throw Error("pipeline schedule: after the step's last action the " + pool->name() +
                    " still holds micro-batches " + pool->held());
}

void PipelineExecutor::read_times(StepTimes &times) const {
  const std::vector<PipelineAction> &actions = pipeline_.actions;
  BackendInterface &b = backend(program_.stream);
  times.begin.assign(actions.size(), 0);
  times.end.assign(actions.size(), 0);
  times.compute_us = times.actions_end_us = 0;
  for (size_t g = 0; g + 1 < group_starts_.size(); ++g) {
    const double begin_us = b.elapsed_us(marks_[0], marks_[2 * g + 1]);
    const double end_us = b.elapsed_us(marks_[0], marks_[2 * g + 2]);
    for (size_t j = group_starts_[g]; j < group_starts_[g + 1]; ++j) {
      times.begin[j] = begin_us;
      times.end[j] = end_us;
    }
    if (!is_transfer(actions[group_starts_[g]].kind)) times.compute_us += end_us - begin_us;
    // The two streams' last actions may end in either order.
    times.actions_end_us = std::max(times.actions_end_us, end_us);
  }
}

void PipelineExecutor::sum_tied() {
  if (pipeline_.tied.empty()) return;
  uint8_t *arena = program_.arena;
  const int64_t slot = tied_ ? tied_->allocate(program_.memory, 0) : -1;
  TransferGroup group;
  size_t buffer = 0;
  for (const PipelineTied &tied : pipeline_.tied) {
    const ValueInfo &state = info_.states[find_accumulator(info_, tied.param, "tied")];
    const Tensor own{arena + state.offset, state.dtype, state.shape};
    for (int64_t r : tied.ranks) {
      if (r == pipeline_.rank) continue;
      group.add(true, own, r);
      group.add(false, tied_->tensor(arena, slot, buffer++), r);
    }
  }
  issue(group, program_.stream);
  tied_issued_ = true;
  // The transfers' host work is done (on the cpu backend, the transfers
  // themselves); no host wait for the device: the sums below run on the
  // stream after them.
  detail::wait_host_work(program_.stream);
  buffer = 0;
  for (const PipelineTied &tied : pipeline_.tied) {
    const ValueInfo &state = info_.states[find_accumulator(info_, tied.param, "tied")];
    const Tensor own{arena + state.offset, state.dtype, state.shape};
    std::vector<Tensor> copies;  // in ascending rank order, this rank's at its place
    for (int64_t r : tied.ranks)
      copies.push_back(r == pipeline_.rank ? own : tied_->tensor(arena, slot, buffer++));
    // Summed in f32 in rank order (16-bit floats rounded once).
    add_async(program_.stream, own, copies.data(), static_cast<int64_t>(copies.size()));
  }
  if (tied_) tied_->release(program_.memory, slot);
}

StageRun &PipelineExecutor::stage_run(int64_t stage) {
  for (StageRun &run : stages_)
    if (run.plan.stage == stage) return run;
  throw Error("pipeline: no stage " + std::to_string(stage));  // checked before
}

StageRun &PipelineExecutor::stage_of(const PipelineAction &action) {
  return stage_run(action.chunk * pipeline_.stages + pipeline_.rank);
}

void PipelineExecutor::run_compute(const PipelineAction &action, int64_t batch,
                                   uint64_t counter, int64_t global_micro,
                                   std::vector<float> &losses, const DeviceEvent &first) {
  StageRun &stage = stage_of(action);
  const StagePlan &plan = stage.plan;
  const int64_t mb = action.microbatch;
  const std::string name = action_name(action, pipeline_.chunks);
  const int index = action.kind == Kind::Forward         ? plan.forward
                    : action.kind == Kind::Backward      ? plan.backward
                    : action.kind == Kind::BackwardInput ? plan.backward_input
                                                         : plan.backward_weight;
  const FunctionInfo &function = info_.functions[index];
  uint8_t *arena = program_.arena;

  // The slots this computation reads, and which of them it frees.
  const bool forward = action.kind == Kind::Forward;
  SlotPool *received = stage.pools[forward ? ActIn : GradIn].get();
  SlotPool *stash = forward ? nullptr : stage.pools[Stash].get();
  SlotPool *wstash = action.kind == Kind::BackwardWeight ? stage.pools[WStash].get() : nullptr;
  const bool reads_received = action.kind != Kind::BackwardWeight && received &&
                              !received->layout().empty();
  const std::string why = name + " of stage " + std::to_string(plan.stage) + " needs it";
  const int64_t received_slot = reads_received ? received->find(mb, why) : -1;
  const int64_t stash_slot = stash ? stash->find(mb, why) : -1;
  const int64_t wstash_slot = wstash ? wstash->find(mb, why) : -1;
  // The slots of what the computation sends and keeps, taken before it
  // runs: it computes those outputs straight into them
  // (dsrt::bound_output), in the order of its sent, stashed and
  // weight-stashed outputs. Only pools with something to hold get a slot (an empty one
  // would never be sent or read, so never freed).
  auto holding = [&](int kind, bool applies) {
    SlotPool *pool = applies ? stage.pools[kind].get() : nullptr;
    return pool && !pool->layout().empty() ? pool : nullptr;
  };
  SlotPool *sent = holding(forward ? ActOut : GradOut, action.kind != Kind::BackwardWeight);
  SlotPool *kept = holding(Stash, forward);
  SlotPool *wkept = holding(WStash, action.kind == Kind::BackwardInput);
  const int64_t sent_slot = sent ? sent->allocate(program_.memory, mb) : -1;
  const int64_t kept_slot = kept ? kept->allocate(program_.memory, mb) : -1;
  const int64_t wkept_slot = wkept ? wkept->allocate(program_.memory, mb) : -1;
  // The device waits for the transfer that received what the computation
  // reads, and for the send that last read the slot it sends from; then
  // the computation begins.
  if (reads_received) received->wait_transfer(received_slot, program_.stream);
  if (sent) sent->wait_transfer(sent_slot, program_.stream);
  backend(program_.stream).record_timing(program_.stream, first);

  // Data inputs are copied into their buffers; what the stage received or
  // stashed is read in place (dsrt::bound_input), in input order.
  size_t next_received = 0;
  program_.bound.clear();
  for (const ValueInfo &input : function.inputs) {
    if (is_loss_scale(info_, input)) {
      write_scalar_input(program_, function, input.name, loss_scale_);
    } else if (is_data(input)) {
      load_micro_batch(program_, *data_.at(input.name), input, batch, global_micro);
    } else if (input.role == ValueRole::Recv) {
      program_.bound.push_back(received->tensor(arena, received_slot, next_received++));
    } else if (input.role == ValueRole::Stash) {
      program_.bound.push_back(
          stash->tensor(arena, stash_slot, stash->layout().find(input.name)));
    } else {
      program_.bound.push_back(
          wstash->tensor(arena, wstash_slot, wstash->layout().find(input.name)));
    }
  }

  std::vector<Tensor> targets(function.outputs.size());
  program_.bound_outputs.clear();
  {
    size_t next_sent = 0, next_kept = 0, next_wkept = 0;
    for (size_t o = 0; o < function.outputs.size(); ++o) {
      const ValueRole role = function.outputs[o].role;
      if (role == ValueRole::Send)
        targets[o] = sent->tensor(arena, sent_slot, next_sent++);
      else if (role == ValueRole::Stash)
        targets[o] = kept->tensor(arena, kept_slot, next_kept++);
      else if (role == ValueRole::WeightStash)
        targets[o] = wkept->tensor(arena, wkept_slot, next_wkept++);
      else
        continue;
      program_.bound_outputs.push_back(targets[o]);
    }
  }

  set_rng_counter(counter);
  run_function(program_, functions_.functions[index], index);

  // Outputs not computed in their slot (values passed on, views, a value
  // sent and also kept) are copied there; the loss is recorded.
  for (size_t o = 0; o < function.outputs.size(); ++o) {
    const ValueInfo &output = function.outputs[o];
    if (o >= program_.outputs.size() || !program_.outputs[o].data)
      throw Error(name + ": '" + function.name + "' did not produce its output " +
                  std::to_string(o) + " '" + output.name + "'");
    const Tensor &value = program_.outputs[o];
    if (value.dtype != output.dtype || value.numel() != output.shape.numel())
      throw Error(name + ": '" + function.name + "' produced " + dtype_name(value.dtype) + " " +
                  value.shape.str() + " for its output " + value_text(output));
    if (!targets[o].data) {
      losses[static_cast<size_t>(mb)] =
          static_cast<float>(read_scalar(program_.stream, value));
      continue;
    }
    backend(program_.stream).copy(program_.stream, targets[o].data, value.data, value.nbytes());
  }
  program_.bound_outputs.clear();
  // The slots read in place are given back once the outputs, which may
  // be views of them (a value passed on), are copied.
  program_.bound.clear();
  if (reads_received) received->release(program_.memory, received_slot);
  // The stash lives until the stage's last backward computation of mb.
  if (stash && action.kind != Kind::BackwardInput) stash->release(program_.memory, stash_slot);
  if (wstash) wstash->release(program_.memory, wstash_slot);
  program_.memory.release_range(info_.persistent_bytes, pipeline_.buffers_offset);
}

void PipelineExecutor::issue(const TransferGroup &group, Stream &stream) {
  send_recv(stream, group.sends.data(), group.send_peers.data(),
            static_cast<int64_t>(group.sends.size()), group.recvs.data(),
            group.recv_peers.data(), static_cast<int64_t>(group.recvs.size()), pp_axis_);
}

void PipelineExecutor::run_transfers(size_t begin, size_t end, const DeviceEvent &first,
                                     const DeviceEvent &last) {
  uint8_t *arena = program_.arena;
  TransferGroup group;
  std::vector<std::pair<SlotPool *, int64_t>> slots;
  // The previous group's sent slots are free from here on (a computation
  // that takes one waits for that group on the device).
  release_sending();
  for (size_t i = begin; i < end; ++i) {
    const PipelineAction &action = pipeline_.actions[i];
    SlotPool &pool = *stage_of(action).pools[transfer_pool(action.kind)];
    const bool send = is_send(action.kind);
    const int64_t slot =
        send ? pool.find(action.microbatch, action_name(action, pipeline_.chunks) + " sends it")
             : pool.allocate(program_.memory, action.microbatch);
    for (size_t t = 0; t < pool.layout().tensors.size(); ++t)
      group.add(send, pool.tensor(arena, slot, t), action.peer);
    if (send) sending_.push_back({&pool, slot});
    slots.push_back({&pool, slot});
  }
  // After the computations queued so far: the sends read what they
  // computed, the receives overwrite slots they have read. Earlier groups
  // are ahead on the same stream.
  Event computed;
  computed.record(program_.stream);
  computed.wait(transfers_);
  BackendInterface &b = backend(transfers_);
  b.record_timing(transfers_, first);
  issue(group, transfers_);
  next_action_ = end;
  b.record_timing(transfers_, last);
  Event done;
  done.record(transfers_);
  for (const auto &slot : slots) slot.first->transferred(slot.second, done);
}

void PipelineExecutor::release_sending() {
  for (const auto &slot : sending_) slot.first->release(program_.memory, slot.second);
  sending_.clear();
}

void PipelineExecutor::finish_transfers_after_failure() {
  try {
    const std::vector<PipelineAction> &actions = pipeline_.actions;
    std::vector<std::vector<uint8_t>> scratch;
    auto scratch_tensor = [&](const ValueInfo &value) {
      scratch.emplace_back(value_bytes(value));
      return Tensor{scratch.back().data(), value.dtype, value.shape};
    };
    for (size_t i = next_action_; i < actions.size();) {
      if (!is_transfer(actions[i].kind)) {
        ++i;
        continue;
      }
      TransferGroup group;
      for (; i < actions.size() && is_transfer(actions[i].kind); ++i) {
        const PipelineAction &action = actions[i];
        const SlotLayout &layout = stage_of(action).plan.layouts[transfer_pool(action.kind)];
        for (const SlotTensor &t : layout.tensors)
          group.add(is_send(action.kind), scratch_tensor(t.value), action.peer);
      }
      issue(group, transfers_);
      transfers_.synchronize();
      scratch.clear();
    }
    if (tied_issued_ || pipeline_.tied.empty()) return;
    TransferGroup group;
    for (const PipelineTied &tied : pipeline_.tied) {
      const ValueInfo &state = info_.states[find_accumulator(info_, tied.param, "tied")];
      for (int64_t r : tied.ranks) {
        if (r == pipeline_.rank) continue;
        group.add(true, scratch_tensor(state), r);
        group.add(false, scratch_tensor(state), r);
      }
    }
    issue(group, transfers_);
    transfers_.synchronize();
  } catch (const std::exception &) {
    // The step has failed already; its error is the one reported.
  }
}

}  // namespace pipeline
}  // namespace dsrt

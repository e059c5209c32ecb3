// dsrt: the runner of pipeline-parallel training programs (pipeline_main):
// each pp rank executes its program's static schedule of forwards,
// backwards and transfers every step, with the activations and gradients in
// flight held in the slots of pools the memory plan placed at the top of
// the arena (docs/runtime.md, "Pipeline-parallel programs").
#include "dsrt/backend.h"
#include "dsrt/comm.h"
#include "dsrt/program.h"
#include "runner.h"
#include "train_common.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <tuple>
#include <vector>

namespace dsrt {

//===--- describe ------------------------------------------------------------===//

void set_pipeline(ProgramInfo &info, const char *schedule, int64_t stages, int64_t chunks,
                  int64_t microbatches, int64_t rank, int64_t buffers_offset,
                  int64_t buffers_bytes) {
  PipelineInfo &p = info.pipeline;
  p.schedule = schedule ? schedule : "";
  std::tie(p.stages, p.chunks, p.microbatches, p.rank, p.buffers_offset, p.buffers_bytes) =
      std::make_tuple(stages, chunks, microbatches, rank, buffers_offset, buffers_bytes);
}

void add_pipeline_stage(ProgramInfo &info, int64_t stage, const char *forward,
                        const char *backward, const char *backward_input,
                        const char *backward_weight) {
  auto text = [](const char *s) { return std::string(s ? s : ""); };
  info.pipeline.stage_functions.push_back(
      {stage, text(forward), text(backward), text(backward_input), text(backward_weight)});
}

void add_pipeline_action(ProgramInfo &info, int64_t kind, int64_t microbatch, int64_t chunk,
                         int64_t peer) {
  // Kept as given; the runner checks the kind.
  info.pipeline.actions.push_back(
      {static_cast<PipelineActionKind>(kind), microbatch, chunk, peer});
}

void add_pipeline_pool(ProgramInfo &info, const char *kind, int64_t stage, int64_t slots,
                       int64_t slot_bytes, int64_t offset) {
  info.pipeline.pools.push_back({kind ? kind : "", stage, slots, slot_bytes, offset});
}

void add_pipeline_tied(ProgramInfo &info, const char *state, const int64_t *ranks,
                       int64_t count) {
  PipelineTied tied;
  tied.state = state ? state : "";
  if (ranks)
    for (int64_t i = 0; i < count; ++i) tied.ranks.push_back(ranks[i]);
  info.pipeline.tied.push_back(std::move(tied));
}

using namespace runner;

namespace {

using Kind = PipelineActionKind;

int64_t kind_index(Kind kind) { return static_cast<int64_t>(kind); }
bool is_transfer(Kind kind) { return kind_index(kind) >= kind_index(Kind::SendActivation); }
bool is_send(Kind kind) { return kind == Kind::SendActivation || kind == Kind::SendGradient; }

// As the compiler prints and traces them: F3, B3, Bi3, W3, send-act3>2,
// recv-grad3<2; with chunks, the chunk after the micro-batch (F3.1).
std::string action_name(const PipelineAction &action, int64_t chunks) {
  static const char *const prefixes[kPipelineActionKinds] = {
      "F", "B", "Bi", "W", "send-act", "recv-act", "send-grad", "recv-grad"};
  std::string name = prefixes[kind_index(action.kind)] + std::to_string(action.microbatch);
  if (chunks > 1) name += "." + std::to_string(action.chunk);
  if (is_transfer(action.kind))
    name += (is_send(action.kind) ? ">" : "<") + std::to_string(action.peer);
  return name;
}


std::string value_text(const ValueInfo &value) {
  return "'" + value.name + "' " + dtype_name(value.dtype) + " " + value.shape.str();
}

size_t value_bytes(const ValueInfo &value) {
  return Tensor{nullptr, value.dtype, value.shape}.nbytes();
}

//===--- slots -------------------------------------------------------------------===//

// A tensor of a slot: where in the slot, and what.
struct SlotTensor {
  ValueInfo value;  // offset: within the slot
  size_t bytes = 0;
};

// The tensors of a slot, one after another at the plan's alignment.
struct SlotLayout {
  std::vector<SlotTensor> tensors;
  int64_t bytes = 0;

  void add(const ProgramInfo &info, const ValueInfo &value) {
    SlotTensor t{value, value_bytes(value)};
    t.value.offset = bytes;
    bytes += slot_size(info, t.bytes);
    tensors.push_back(std::move(t));
  }
  // The values of `values` whose name starts with `prefix`, in order.
  static SlotLayout of(const ProgramInfo &info, const std::vector<ValueInfo> &values,
                       const char *prefix) {
    SlotLayout layout;
    for (const ValueInfo &value : values)
      if (starts_with(value.name, prefix)) layout.add(info, value);
    return layout;
  }
  bool empty() const { return tensors.empty(); }
  // The index of the tensor called `name`, -1 if none.
  int64_t find(const std::string &name) const {
    for (size_t i = 0; i < tensors.size(); ++i)
      if (tensors[i].value.name == name) return static_cast<int64_t>(i);
    return -1;
  }
  std::string text() const {
    std::string out;
    for (const SlotTensor &t : tensors) out += (out.empty() ? "" : ", ") + value_text(t.value);
    return out.empty() ? "no tensors" : out;
  }
};

const char *const kPoolKinds[] = {"stash", "act_in", "act_out", "grad_in", "grad_out", "wstash",
                                  "tied"};
enum PoolKind { Stash = 0, ActIn, ActOut, GradIn, GradOut, WStash, Tied, kPoolKindCount };

int pool_kind(const std::string &name) {
  for (int k = 0; k < kPoolKindCount; ++k)
    if (name == kPoolKinds[k]) return k;
  return -1;
}

// A virtual stage the rank holds: its functions (indices into
// info.functions, -1 where absent) and the slot layouts of its pools.
struct StagePlan {
  int64_t stage = 0;
  int forward = -1, backward = -1, backward_input = -1, backward_weight = -1;
  SlotLayout layouts[kPoolKindCount];

  // The function that produces the input gradient: B, or Bi under zb-h1.
  int input_gradient() const { return backward >= 0 ? backward : backward_input; }
};

// The tied slot: for each tied entry, a receive buffer per other sharer.
SlotLayout tied_layout(const ProgramInfo &info) {
  SlotLayout layout;
  for (const PipelineTied &tied : info.pipeline.tied) {
    const ValueInfo &state = info.states[find_value(info.states, tied.state, "state")];
    for (int64_t r : tied.ranks) {
      if (r == info.pipeline.rank) continue;
      ValueInfo buffer = state;
      buffer.name = tied.state + " from pp " + std::to_string(r);
      layout.add(info, buffer);
    }
  }
  return layout;
}

// The stages of a checked program, with their layouts.
std::vector<StagePlan> stage_plans(const ProgramInfo &info) {
  std::vector<StagePlan> plans;
  for (const PipelineStage &stage : info.pipeline.stage_functions) {
    StagePlan plan;
    plan.stage = stage.stage;
    plan.forward = find_function_index(info, stage.forward);
    if (!stage.backward.empty()) plan.backward = find_function_index(info, stage.backward);
    if (!stage.backward_input.empty())
      plan.backward_input = find_function_index(info, stage.backward_input);
    if (!stage.backward_weight.empty())
      plan.backward_weight = find_function_index(info, stage.backward_weight);
    const FunctionInfo &forward = info.functions[plan.forward];
    plan.layouts[Stash] = SlotLayout::of(info, forward.outputs, "stash:");
    plan.layouts[ActIn] = SlotLayout::of(info, forward.inputs, "recv:");
    plan.layouts[ActOut] = SlotLayout::of(info, forward.outputs, "send:");
    if (plan.input_gradient() >= 0) {
      const FunctionInfo &backward = info.functions[plan.input_gradient()];
      plan.layouts[GradIn] = SlotLayout::of(info, backward.inputs, "recv:");
      plan.layouts[GradOut] = SlotLayout::of(info, backward.outputs, "send:");
    }
    if (plan.backward_input >= 0)
      plan.layouts[WStash] =
          SlotLayout::of(info, info.functions[plan.backward_input].outputs, "wstash:");
    plans.push_back(std::move(plan));
  }
  return plans;
}

//===--- checking the description ---------------------------------------------------===//

void check_function_role(const ProgramInfo &info, const StagePlan &plan, int index,
                         const char *role, bool last_stage, bool &has_loss) {
  const PipelineInfo &pipeline = info.pipeline;
  const FunctionInfo &f = info.functions[index];
  const std::string what = "stage " + std::to_string(plan.stage) + "'s " + role + " '" + f.name +
                           "'";
  if (f.arena_bytes > pipeline.buffers_offset)
    throw Error("memory plan: " + what + " plans " + std::to_string(f.arena_bytes) +
                " bytes, into the pipeline buffers at " + std::to_string(pipeline.buffers_offset));
  const bool forward = index == plan.forward;
  const bool weight = index == plan.backward_weight;
  for (const ValueInfo &input : f.inputs) {
    // What the stage received or stashed is read in place, in its slot.
    if (!is_data(input) && input.offset != -1)
      throw Error("memory plan: " + what + " input " + value_text(input) + " has a buffer at " +
                  std::to_string(input.offset) + "; it is read where the pipeline keeps it");
    if (is_data(input) &&
        (input.offset < 0 ||
         input.offset + static_cast<int64_t>(value_bytes(input)) > pipeline.buffers_offset))
      throw Error("memory plan: " + what + " input " + value_text(input) + " at offset " +
                  std::to_string(input.offset) + " is not below the pipeline buffers at " +
                  std::to_string(pipeline.buffers_offset));
    const SlotLayout *source = nullptr;
    if (starts_with(input.name, "stash:")) {
      if (forward) throw Error("training program: " + what + " reads a stash (" + input.name + ")");
      source = &plan.layouts[Stash];
    } else if (starts_with(input.name, "wstash:")) {
      if (!weight)
        throw Error("training program: " + what + " reads " + input.name +
                    "; only a backward_weight function reads wstash: values");
      source = &plan.layouts[WStash];
    } else if (starts_with(input.name, "recv:") && weight) {
      throw Error("training program: " + what + " receives " + input.name +
                  "; a backward_weight function receives nothing");
    }
    if (!source) continue;
    const int64_t at = source->find(input.name);
    if (at < 0 || source->tensors[at].value.dtype != input.dtype ||
        source->tensors[at].value.shape != input.shape)
      throw Error("training program: " + what + " input " + value_text(input) +
                  " is not among the values its stage keeps for it (" + source->text() + ")");
  }
  for (const ValueInfo &output : f.outputs) {
    const std::string &name = output.name;
    bool ok = false;
    if (forward) {
      ok = starts_with(name, "send:") || starts_with(name, "stash:");
      if (!ok && last_stage && !has_loss && is_float(output.dtype) &&
          output.shape.numel() == 1)
        ok = has_loss = true;
    } else if (index == plan.backward) {
      ok = starts_with(name, "send:");
    } else if (index == plan.backward_input) {
      ok = starts_with(name, "send:") || starts_with(name, "wstash:");
    }
    if (!ok) {
      std::string allowed;
      if (forward)
        allowed = last_stage ? "a forward's outputs are send:, stash: and one float scalar loss"
                             : "a forward's outputs are send: and stash: (only the last stage "
                               "has a loss)";
      else
        allowed = weight ? "it outputs nothing"
                  : index == plan.backward ? "it outputs send: values"
                                           : "it outputs send: and wstash: values";
      throw Error("training program: " + what + " has output " + value_text(output) + "; " +
                  allowed);
    }
  }
}

// Everything pipeline_main relies on in pp rank `rank`'s program, before
// anything runs.
void check_pipeline_program(const ProgramInfo &info, int64_t rank, const ProgramInfo &first,
                            const PipelineRankProgram &functions) {
  const PipelineInfo &pipeline = info.pipeline;
  const std::string t = "training program: ";
  if (!info.is_training())
    throw Error(t + "it describes no functions (is it a training program?)");
  if (!pipeline.present())
    throw Error(t + "it does not describe a pipeline (no set_pipeline)");
  if (info.grid_names != first.grid_names || info.grid_sizes != first.grid_sizes)
    throw Error(t + "its grid differs from pp rank 0's");
  const int64_t pp = info.axis_size("pp");
  if (pipeline.stages != pp)
    throw Error(t + "its pipeline has " + std::to_string(pipeline.stages) +
                " stages but the grid has pp=" + std::to_string(pp));
  if (pipeline.rank != rank)
    throw Error(t + "it describes pp rank " + std::to_string(pipeline.rank) +
                " but pipeline_main was given it as pp rank " + std::to_string(rank));
  if (pipeline.chunks < 1)
    throw Error(t + "chunks is " + std::to_string(pipeline.chunks) + "; it must be at least 1");
  if (pipeline.microbatches != info.train.accumulation_steps)
    throw Error(t + "the pipeline runs " + std::to_string(pipeline.microbatches) +
                " micro-batches per step but accumulation_steps is " +
                std::to_string(info.train.accumulation_steps) + "; they must be equal");
  const PipelineInfo &p0 = first.pipeline;
  if (pipeline.schedule != p0.schedule || pipeline.chunks != p0.chunks ||
      pipeline.microbatches != p0.microbatches)
    throw Error(t + "its pipeline (" + pipeline.schedule + ", " +
                std::to_string(pipeline.chunks) + " chunks, " +
                std::to_string(pipeline.microbatches) +
                " micro-batches) differs from pp rank 0's (" +
                p0.schedule + ", " + std::to_string(p0.chunks) + " chunks, " +
                std::to_string(p0.microbatches) + " micro-batches)");
  if (functions.function_count != static_cast<int64_t>(info.functions.size()) ||
      (functions.function_count > 0 && !functions.functions))
    throw Error(t + "it describes " + std::to_string(info.functions.size()) +
                " functions but pipeline_main was given " +
                std::to_string(functions.function_count) + " run functions for it");
  for (int64_t i = 0; i < functions.function_count; ++i)
    if (!functions.functions[i])
      throw Error(t + "no run function for '" + info.functions[i].name + "'");
  if (pipeline.buffers_offset < info.persistent_bytes || pipeline.buffers_bytes < 0 ||
      pipeline.buffers_offset + pipeline.buffers_bytes != info.arena_bytes)
    throw Error("memory plan: the pipeline buffers [" + std::to_string(pipeline.buffers_offset) +
                ", " + std::to_string(pipeline.buffers_offset + pipeline.buffers_bytes) +
                ") must lie above persistent_bytes (" + std::to_string(info.persistent_bytes) +
                ") and end at the arena's end (" + std::to_string(info.arena_bytes) + ")");
  check_training_basics(info);
  check_function_plan(info, "optimizer_step");
  check_optimizer_step(info);
  if (find_function(info, "optimizer_step").arena_bytes > pipeline.buffers_offset)
    throw Error("memory plan: optimizer_step plans " +
                std::to_string(find_function(info, "optimizer_step").arena_bytes) +
                " bytes, into the pipeline buffers at " + std::to_string(pipeline.buffers_offset));

  // The stages: one per chunk, each with its functions.
  const int64_t virtual_stages = pipeline.stages * pipeline.chunks;
  std::set<int64_t> held;
  for (const PipelineStage &stage : pipeline.stage_functions) {
    const std::string what = "stage " + std::to_string(stage.stage);
    if (stage.stage < 0 || stage.stage >= virtual_stages || stage.stage % pipeline.stages != rank)
      throw Error(t + what + " is not a stage of pp rank " + std::to_string(rank) + " (of " +
                  std::to_string(virtual_stages) + " virtual stages, chunk c of rank r is c*" +
                  std::to_string(pipeline.stages) + " + r)");
    if (!held.insert(stage.stage).second) throw Error(t + what + " is described twice");
    const bool whole = !stage.backward.empty();
    const bool split = !stage.backward_input.empty() || !stage.backward_weight.empty();
    if (stage.forward.empty() || whole == split ||
        (split && (stage.backward_input.empty() || stage.backward_weight.empty())))
      throw Error(t + what + " needs a forward and either a backward or a backward_input and "
                  "a backward_weight function");
    for (const std::string *name : {&stage.forward, &stage.backward, &stage.backward_input,
                                    &stage.backward_weight})
      if (!name->empty()) check_function_plan(info, *name);
  }
  for (int64_t chunk = 0; chunk < pipeline.chunks; ++chunk)
    if (!held.count(chunk * pipeline.stages + rank))
      throw Error(t + "stage " + std::to_string(chunk * pipeline.stages + rank) + " (chunk " +
                  std::to_string(chunk) + ") has no functions (add_pipeline_stage)");

  // Each function's inputs and outputs, and the same data inputs everywhere.
  std::vector<StagePlan> plans = stage_plans(info);
  std::map<std::string, const ValueInfo *> data_inputs;
  for (const StagePlan &plan : plans) {
    const bool last = plan.stage == virtual_stages - 1;
    bool has_loss = false;
    const std::pair<int, const char *> roles[] = {{plan.forward, "forward"},
                                                  {plan.backward, "backward"},
                                                  {plan.backward_input, "backward_input"},
                                                  {plan.backward_weight, "backward_weight"}};
    for (const auto &role : roles) {
      if (role.first < 0) continue;
      check_function_role(info, plan, role.first, role.second, last, has_loss);
      for (const ValueInfo &input : info.functions[role.first].inputs) {
        if (!is_data(input)) continue;
        auto seen = data_inputs.emplace(input.name, &input);
        if (!seen.second && (seen.first->second->dtype != input.dtype ||
                             seen.first->second->shape != input.shape))
          throw Error(t + "data input '" + input.name + "' is " + dtype_name(input.dtype) + " " +
                      input.shape.str() + " in '" + info.functions[role.first].name +
                      "' but " + dtype_name(seen.first->second->dtype) + " " +
                      seen.first->second->shape.str() + " elsewhere");
      }
    }
    if (last && !has_loss)
      throw Error(t + "stage " + std::to_string(plan.stage) +
                  " is the last; its forward must output the loss (a float scalar)");
  }

  // The pools: known kinds of held stages, inside the pipeline buffers,
  // disjoint, and exactly as large as the tensors they hold.
  std::map<std::pair<int, int64_t>, const PipelinePool *> pools;
  std::vector<std::pair<int64_t, int64_t>> extents;
  const int64_t buffers_end = pipeline.buffers_offset + pipeline.buffers_bytes;
  for (const PipelinePool &pool : pipeline.pools) {
    const int kind = pool_kind(pool.kind);
    const std::string what =
        "pool '" + pool.kind + "'" +
        (kind == Tied ? std::string() : " of stage " + std::to_string(pool.stage));
    if (kind < 0)
      throw Error(t + what + ": unknown kind (stash, act_in, act_out, grad_in, grad_out, "
                  "wstash, tied)");
    if (kind == Tied ? pool.stage != -1 : !held.count(pool.stage))
      throw Error(t + what + ": " +
                  (kind == Tied ? std::string("the tied pool has stage -1")
                                : "the rank holds no such stage"));
    if (!pools.emplace(std::make_pair(kind, pool.stage), &pool).second)
      throw Error(t + what + " is described twice");
    if (pool.slots < 1 || pool.slot_bytes < 0 || (kind == Tied && pool.slots != 1))
      throw Error("memory plan: " + what + " has " + std::to_string(pool.slots) + " slots of " +
                  std::to_string(pool.slot_bytes) + " bytes" +
                  (kind == Tied ? " (it needs exactly one slot)" : ""));
    const int64_t end = pool.offset + pool.slots * pool.slot_bytes;
    if (pool.offset < pipeline.buffers_offset || end > buffers_end)
      throw Error("memory plan: " + what + " [" + std::to_string(pool.offset) + ", " +
                  std::to_string(end) + ") is outside the pipeline buffers [" +
                  std::to_string(pipeline.buffers_offset) + ", " + std::to_string(buffers_end) +
                  ")");
    extents.push_back({pool.offset, end});
    SlotLayout layout;
    if (kind == Tied) {
      layout = tied_layout(info);
    } else {
      for (const StagePlan &plan : plans)
        if (plan.stage == pool.stage) layout = plan.layouts[kind];
    }
    if (pool.slot_bytes != layout.bytes)
      throw Error("memory plan: " + what + " has slots of " + std::to_string(pool.slot_bytes) +
                  " bytes but what a slot holds takes " + std::to_string(layout.bytes) +
                  " bytes at alignment " + std::to_string(info.alignment) + " (" +
                  layout.text() + ")");
  }
  std::sort(extents.begin(), extents.end());
  for (size_t i = 1; i < extents.size(); ++i)
    if (extents[i].first < extents[i - 1].second && extents[i].first < extents[i].second)
      throw Error("memory plan: the pools at " + std::to_string(extents[i - 1].first) + " and " +
                  std::to_string(extents[i].first) + " overlap");
  for (const StagePlan &plan : plans)
    for (int kind = 0; kind < Tied; ++kind)
      if (!plan.layouts[kind].empty() && !pools.count({kind, plan.stage}))
        throw Error("memory plan: stage " + std::to_string(plan.stage) + " needs a '" +
                    kPoolKinds[kind] + "' pool (for " + plan.layouts[kind].text() +
                    ") but the program describes none");

  // Tied states: held by this rank, float, and summed with the same ranks
  // in the same order on every sharer (checked across programs in
  // check_pipeline_programs).
  for (const PipelineTied &tied : pipeline.tied) {
    const std::string what = "tied state '" + tied.state + "'";
    const int64_t at = find_value(info.states, tied.state, "training program: " + what + ": state");
    if (!is_float(info.states[at].dtype))
      throw Error(t + what + " is " + dtype_name(info.states[at].dtype) + "; tied sums are of "
                  "float gradients");
    bool ascending = true, mine = false;
    for (size_t i = 0; i < tied.ranks.size(); ++i) {
      ascending = ascending && tied.ranks[i] >= 0 && tied.ranks[i] < pipeline.stages &&
                  (i == 0 || tied.ranks[i] > tied.ranks[i - 1]);
      mine = mine || tied.ranks[i] == rank;
    }
    if (!ascending || !mine)
      throw Error(t + what + ": its ranks must be distinct pp ranks in ascending order, this "
                  "rank (" + std::to_string(rank) + ") among them");
  }
  if (!tied_layout(info).empty() && !pools.count({Tied, -1}))
    throw Error("memory plan: the tied states need a 'tied' pool (for " +
                tied_layout(info).text() + ") but the program describes none");

  // The actions: valid kinds, micro-batches, chunks and peers; each
  // computation of each micro-batch exactly once; transfers of what exists.
  std::map<std::pair<int64_t, int64_t>, int> runs[4];
  for (size_t i = 0; i < pipeline.actions.size(); ++i) {
    const PipelineAction &action = pipeline.actions[i];
    const int64_t kind = kind_index(action.kind);
    const std::string what = "action " + std::to_string(i);
    if (kind < 0 || kind >= kPipelineActionKinds)
      throw Error(t + what + " has kind " + std::to_string(kind) + " (0 to 7)");
    const std::string name = what + " (" + action_name(action, pipeline.chunks) + ")";
    if (action.microbatch < 0 || action.microbatch >= pipeline.microbatches ||
        action.chunk < 0 || action.chunk >= pipeline.chunks)
      throw Error(t + name + ": micro-batch or chunk out of range (" +
                  std::to_string(pipeline.microbatches) + " micro-batches, " +
                  std::to_string(pipeline.chunks) + " chunks)");
    if (is_transfer(action.kind)
            ? (action.peer < 0 || action.peer >= pipeline.stages || action.peer == rank)
            : action.peer != -1)
      throw Error(t + name + ": peer " + std::to_string(action.peer) +
                  (is_transfer(action.kind) ? " is not another pp rank"
                                            : "; a computation has peer -1"));
    const int64_t stage = action.chunk * pipeline.stages + rank;
    const StagePlan &plan = *std::find_if(plans.begin(), plans.end(),
                                          [&](const StagePlan &p) { return p.stage == stage; });
    if (!is_transfer(action.kind)) {
      const int function[] = {plan.forward, plan.backward, plan.backward_input,
                              plan.backward_weight};
      if (function[kind] < 0)
        throw Error(t + name + ": stage " + std::to_string(stage) + " has no such function");
      ++runs[kind][{stage, action.microbatch}];
      continue;
    }
    const int pool = action.kind == Kind::SendActivation   ? ActOut
                     : action.kind == Kind::RecvActivation ? ActIn
                     : action.kind == Kind::SendGradient   ? GradOut
                                                           : GradIn;
    if (plan.layouts[pool].empty())
      throw Error(t + name + ": stage " + std::to_string(stage) + "'s functions have no " +
                  (pool == ActOut ? "send: outputs in its forward"
                   : pool == ActIn ? "recv: inputs in its forward"
                   : pool == GradOut ? "send: outputs in its backward"
                                     : "recv: inputs in its backward"));
  }
  for (const StagePlan &plan : plans)
    for (int64_t mb = 0; mb < pipeline.microbatches; ++mb) {
      const int function[] = {plan.forward, plan.backward, plan.backward_input,
                              plan.backward_weight};
      for (int kind = 0; kind < 4; ++kind) {
        if (function[kind] < 0) continue;
        auto it = runs[kind].find({plan.stage, mb});
        const int count = it == runs[kind].end() ? 0 : it->second;
        if (count != 1) {
          PipelineAction action{static_cast<Kind>(kind), mb, plan.stage / pipeline.stages, -1};
          throw Error(t + "the schedule runs " + action_name(action, pipeline.chunks) +
                      " of stage " + std::to_string(plan.stage) + " " + std::to_string(count) +
                      " times; every computation of every micro-batch runs once");
        }
      }
    }
}

// Every rank checks every rank's program, so that all of them reach the
// same verdict before the first exchange.
void check_pipeline_programs(const std::vector<ProgramInfo> &infos,
                             const PipelineRankProgram *ranks, int job_ranks) {
  const ProgramInfo &first = infos.front();
  const int64_t pp = first.axis_size("pp");
  if (first.grid_axis("pp") < 0 || pp != static_cast<int64_t>(infos.size()))
    throw Error("training program: pipeline_main was given " + std::to_string(infos.size()) +
                " pp rank programs but pp rank 0's grid has " +
                (first.grid_axis("pp") < 0 ? std::string("no pp axis")
                                           : "pp=" + std::to_string(pp)) +
                "; it needs one program per pp rank");
  if (first.axis_size("tp") > 1)
    throw Error("tensor-parallel programs are not supported by this runtime yet (the grid has "
                "tp=" + std::to_string(first.axis_size("tp")) + ")");
  check_job_size(first, job_ranks);
  for (size_t i = 0; i < infos.size(); ++i) {
    try {
      check_pipeline_program(infos[i], static_cast<int64_t>(i), first, ranks[i]);
    } catch (const Error &error) {
      throw Error("pp rank " + std::to_string(i) + ": " + error.what());
    }
  }
  // Tied states pair up: between two sharers, the same states in the same
  // order, of the same type and shape.
  auto shared = [&](size_t a, size_t b) {
    std::vector<const ValueInfo *> states;
    for (const PipelineTied &tied : infos[a].pipeline.tied)
      if (std::count(tied.ranks.begin(), tied.ranks.end(), static_cast<int64_t>(b)))
        states.push_back(&infos[a].states[find_value(infos[a].states, tied.state, "state")]);
    return states;
  };
  for (size_t a = 0; a < infos.size(); ++a)
    for (size_t b = a + 1; b < infos.size(); ++b) {
      std::vector<const ValueInfo *> x = shared(a, b), y = shared(b, a);
      bool same = x.size() == y.size();
      for (size_t i = 0; same && i < x.size(); ++i)
        same = x[i]->name == y[i]->name && x[i]->dtype == y[i]->dtype &&
               x[i]->shape == y[i]->shape;
      if (!same) {
        auto text = [](const std::vector<const ValueInfo *> &states) {
          std::string out;
          for (const ValueInfo *s : states) out += (out.empty() ? "" : ", ") + value_text(*s);
          return out.empty() ? std::string("none") : out;
        };
        throw Error("training program: the tied states of pp ranks " + std::to_string(a) +
                    " and " + std::to_string(b) + " differ: pp rank " + std::to_string(a) +
                    " sums " + text(x) + " with pp rank " + std::to_string(b) +
                    ", which sums " + text(y) + " with it");
      }
    }
}

//===--- the executor ---------------------------------------------------------------===//

// The slots of one pool: which micro-batch holds each.
class SlotPool {
public:
  SlotPool(const PipelinePool &plan, SlotLayout layout, std::string name)
      : plan_(plan), layout_(std::move(layout)), name_(std::move(name)),
        owner_(static_cast<size_t>(plan.slots), -1) {}

  const SlotLayout &layout() const { return layout_; }
  int64_t offset(int64_t slot) const { return plan_.offset + slot * plan_.slot_bytes; }

  // The lowest free slot, for micro-batch `mb`.
  int64_t allocate(MemoryMonitor &memory, int64_t mb) {
    std::string held;
    for (size_t i = 0; i < owner_.size(); ++i) {
      if (owner_[i] == mb)
        throw Error("pipeline schedule: the " + name_ + " already holds micro-batch " +
                    std::to_string(mb));
      held += (held.empty() ? "" : ", ") + std::to_string(owner_[i]);
    }
    for (size_t i = 0; i < owner_.size(); ++i) {
      if (owner_[i] >= 0) continue;
      owner_[i] = mb;
      memory.acquire(offset(static_cast<int64_t>(i)), plan_.slot_bytes);
      return static_cast<int64_t>(i);
    }
    throw Error("memory plan violated: the " + name_ + " has " + std::to_string(plan_.slots) +
                " slots, all in use (micro-batches " + held + "), when micro-batch " +
                std::to_string(mb) + " needs one");
  }
  // The slot micro-batch `mb` holds; throws naming `why` when none.
  int64_t find(int64_t mb, const std::string &why) const {
    for (size_t i = 0; i < owner_.size(); ++i)
      if (owner_[i] == mb) return static_cast<int64_t>(i);
    throw Error("pipeline schedule: " + why + ", but the " + name_ +
                " holds nothing of micro-batch " + std::to_string(mb));
  }
  void release(MemoryMonitor &memory, int64_t slot) {
    owner_[static_cast<size_t>(slot)] = -1;
    memory.release(offset(slot));
  }
  Tensor tensor(uint8_t *arena, int64_t slot, size_t i) const {
    const ValueInfo &value = layout_.tensors[i].value;
    return Tensor{arena + offset(slot) + value.offset, value.dtype, value.shape};
  }
  // Micro-batches still held (none at the end of a step).
  std::string held() const {
    std::string out;
    for (int64_t mb : owner_)
      if (mb >= 0) out += (out.empty() ? "" : ", ") + std::to_string(mb);
    return out;
  }
  const std::string &name() const { return name_; }

private:
  const PipelinePool &plan_;
  SlotLayout layout_;
  std::string name_;
  std::vector<int64_t> owner_;
};

struct StageRun {
  StagePlan plan;
  std::unique_ptr<SlotPool> pools[kPoolKindCount];
};

// One step's measurements of one rank's actions (microseconds from the
// barrier that starts the step).
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

// The pool a transfer action's tensors are in.
int transfer_pool(Kind kind) {
  switch (kind) {
  case Kind::SendActivation: return ActOut;
  case Kind::RecvActivation: return ActIn;
  case Kind::SendGradient: return GradOut;
  default: return GradIn;
  }
}

class PipelineExecutor {
public:
  PipelineExecutor(Program &program, const PipelineRankProgram &functions,
                   const std::vector<InputData> &data, int64_t pp_axis)
      : program_(program), info_(*program.info), pipeline_(info_.pipeline),
        functions_(functions), pp_axis_(pp_axis) {
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
  }

  // Runs the action list of step `step` on global batch `batch`; losses[mb]
  // gets the loss of micro-batch mb where this rank has the last stage.
  void run_actions(int64_t batch, uint64_t first_counter, int64_t dp_rank,
                   std::vector<float> &losses, StepTimes &times, double origin_us) {
    const std::vector<PipelineAction> &actions = pipeline_.actions;
    times.begin.assign(actions.size(), 0);
    times.end.assign(actions.size(), 0);
    times.compute_us = times.actions_end_us = 0;
    next_action_ = 0;
    tied_issued_ = false;
    for (size_t i = 0; i < actions.size();) {
      size_t end = i + 1;
      const double begin_us = now_us();
      if (is_transfer(actions[i].kind)) {
        while (end < actions.size() && is_transfer(actions[end].kind)) ++end;
        run_transfers(i, end);
      } else {
        next_action_ = end;
        const int64_t k = pipeline_.microbatches;
        const int64_t mb = actions[i].microbatch;
        run_compute(actions[i], batch, first_counter + static_cast<uint64_t>(dp_rank * k + mb),
                    dp_rank * k + mb, losses);
      }
      const double end_us = now_us();
      for (size_t j = i; j < end; ++j) {
        times.begin[j] = begin_us - origin_us;
        times.end[j] = end_us - origin_us;
      }
      if (!is_transfer(actions[i].kind)) times.compute_us += end_us - begin_us;
      times.actions_end_us = end_us - origin_us;
      i = end;
    }
    for (const StageRun &stage : stages_)
      for (const auto &pool : stage.pools)
        if (pool && !pool->held().empty())
          throw Error("pipeline schedule: after the step's last action the " + pool->name() +
                      " still holds micro-batches " + pool->held());
  }

  // Each tied state becomes the sum of its sharers' copies, in ascending
  // rank order.
  void sum_tied() {
    if (pipeline_.tied.empty()) return;
    uint8_t *arena = program_.arena;
    const int64_t slot = tied_ ? tied_->allocate(program_.memory, 0) : -1;
    TransferGroup group;
    size_t buffer = 0;
    for (const PipelineTied &tied : pipeline_.tied) {
      const ValueInfo &state = info_.states[find_value(info_.states, tied.state, "state")];
      const Tensor own{arena + state.offset, state.dtype, state.shape};
      for (int64_t r : tied.ranks) {
        if (r == pipeline_.rank) continue;
        group.add(true, own, r);
        group.add(false, tied_->tensor(arena, slot, buffer++), r);
      }
    }
    issue(group);
    tied_issued_ = true;
    program_.stream.synchronize();
    buffer = 0;
    for (const PipelineTied &tied : pipeline_.tied) {
      const ValueInfo &state = info_.states[find_value(info_.states, tied.state, "state")];
      const Tensor own{arena + state.offset, state.dtype, state.shape};
      std::vector<Tensor> copies;  // in ascending rank order, this rank's at its place
      for (int64_t r : tied.ranks)
        copies.push_back(r == pipeline_.rank ? own : tied_->tensor(arena, slot, buffer++));
      // Summed in f32 in rank order (16-bit floats rounded once).
      add_async(program_.stream, own, copies.data(), static_cast<int64_t>(copies.size()));
    }
    if (tied_) tied_->release(program_.memory, slot);
  }

private:
  StageRun &stage_run(int64_t stage) {
    for (StageRun &run : stages_)
      if (run.plan.stage == stage) return run;
    throw Error("pipeline: no stage " + std::to_string(stage));  // checked before
  }
  StageRun &stage_of(const PipelineAction &action) {
    return stage_run(action.chunk * pipeline_.stages + pipeline_.rank);
  }

  void run_compute(const PipelineAction &action, int64_t batch, uint64_t counter,
                   int64_t global_micro, std::vector<float> &losses) {
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
    // Data inputs are copied into their buffers; what the stage received or
    // stashed is read in place (dsrt::bound_input), in input order.
    size_t next_received = 0;
    program_.bound.clear();
    for (const ValueInfo &input : function.inputs) {
      if (is_data(input)) {
        load_micro_batch(program_, *data_.at(input.name), input, batch, global_micro);
      } else if (starts_with(input.name, "recv:")) {
        program_.bound.push_back(received->tensor(arena, received_slot, next_received++));
      } else if (starts_with(input.name, "stash:")) {
        program_.bound.push_back(
            stash->tensor(arena, stash_slot, stash->layout().find(input.name)));
      } else {
        program_.bound.push_back(
            wstash->tensor(arena, wstash_slot, wstash->layout().find(input.name)));
      }
    }

    // The slots of what the computation sends and keeps, taken before it
    // runs: it computes those outputs straight into them
    // (dsrt::bound_output), in the order of its send:, stash: and wstash:
    // outputs. Only pools with something to hold get a slot (an empty one
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
    std::vector<Tensor> targets(function.outputs.size());
    program_.bound_outputs.clear();
    {
      size_t next_sent = 0, next_kept = 0, next_wkept = 0;
      for (size_t o = 0; o < function.outputs.size(); ++o) {
        const std::string &output = function.outputs[o].name;
        if (starts_with(output, "send:"))
          targets[o] = sent->tensor(arena, sent_slot, next_sent++);
        else if (starts_with(output, "stash:"))
          targets[o] = kept->tensor(arena, kept_slot, next_kept++);
        else if (starts_with(output, "wstash:"))
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

  void issue(const TransferGroup &group) {
    send_recv(program_.stream, group.sends.data(), group.send_peers.data(),
              static_cast<int64_t>(group.sends.size()), group.recvs.data(),
              group.recv_peers.data(), static_cast<int64_t>(group.recvs.size()), pp_axis_);
  }

  // Actions [begin, end): one send_recv group along pp, waited for. Every
  // tensor of a slot is one transfer, in slot order.
  void run_transfers(size_t begin, size_t end) {
    uint8_t *arena = program_.arena;
    TransferGroup group;
    std::vector<std::pair<SlotPool *, int64_t>> sent;
    for (size_t i = begin; i < end; ++i) {
      const PipelineAction &action = pipeline_.actions[i];
      SlotPool &pool = *stage_of(action).pools[transfer_pool(action.kind)];
      const bool send = is_send(action.kind);
      const int64_t slot =
          send ? pool.find(action.microbatch, action_name(action, pipeline_.chunks) + " sends it")
               : pool.allocate(program_.memory, action.microbatch);
      for (size_t t = 0; t < pool.layout().tensors.size(); ++t)
        group.add(send, pool.tensor(arena, slot, t), action.peer);
      if (send) sent.push_back({&pool, slot});
    }
    issue(group);
    next_action_ = end;
    program_.stream.synchronize();
    for (const auto &slot : sent) slot.first->release(program_.memory, slot.second);
  }

public:
  // After this rank failed during the step: issues the step's transfers it
  // has not issued yet (the rest of the action list, then the tied sums),
  // sending zeros from scratch memory and receiving into it, so that its
  // peers finish the step and reach the exchange where every rank learns
  // of the failure, instead of waiting for the communicator's timeout.
  // Gives up at the first error.
  void finish_transfers_after_failure() {
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
        issue(group);
        program_.stream.synchronize();
        scratch.clear();
      }
      if (tied_issued_ || pipeline_.tied.empty()) return;
      TransferGroup group;
      for (const PipelineTied &tied : pipeline_.tied) {
        const ValueInfo &state = info_.states[find_value(info_.states, tied.state, "state")];
        for (int64_t r : tied.ranks) {
          if (r == pipeline_.rank) continue;
          group.add(true, scratch_tensor(state), r);
          group.add(false, scratch_tensor(state), r);
        }
      }
      issue(group);
      program_.stream.synchronize();
    } catch (const std::exception &) {
      // The step has failed already; its error is the one reported.
    }
  }

private:
  Program &program_;
  const ProgramInfo &info_;
  const PipelineInfo &pipeline_;
  const PipelineRankProgram &functions_;
  const int64_t pp_axis_;
  std::vector<StageRun> stages_;
  std::unique_ptr<SlotPool> tied_;
  std::map<std::string, const InputData *> data_;
  // What the running step has issued: actions before next_action_, and
  // the tied sums.
  size_t next_action_ = 0;
  bool tied_issued_ = false;
};

//===--- after training: the whole model for --save-onnx -------------------------===//

// For each parameter name, the lowest pp rank that holds it: the one whose
// value is saved (a tied parameter has the same value on every holder).
std::map<std::string, int64_t> parameter_owners(const std::vector<ProgramInfo> &infos) {
  std::map<std::string, int64_t> owners;
  for (size_t j = 0; j < infos.size(); ++j)
    for (const ParamInfo &param : infos[j].params)
      owners.emplace(param.name, static_cast<int64_t>(j));
  return owners;
}

// pp rank 0's description with every other rank's parameters appended
// (their offsets are in other arenas: their values come as full values).
ProgramInfo whole_model(const std::vector<ProgramInfo> &infos) {
  ProgramInfo whole = infos.front();
  const std::map<std::string, int64_t> owners = parameter_owners(infos);
  for (size_t j = 1; j < infos.size(); ++j)
    for (const ParamInfo &param : infos[j].params)
      if (owners.at(param.name) == static_cast<int64_t>(j)) whole.params.push_back(param);
  return whole;
}

Shape whole_shape(const ParamInfo &param) {
  return param.sharded() ? param.full_shape : param.shape;
}

//===--- the measured schedule ---------------------------------------------------===//

std::string json_text(double value) {
  char buffer[32];
  snprintf(buffer, sizeof(buffer), "%.3f", value);
  return buffer;
}

// Chrome trace JSON of every rank's actions over all steps: `times`
// holds, per world rank, begin/end pairs in nanoseconds for each step and
// action (padded to `stride` values per step); step s starts at
// step_origin_us[s].
void write_trace(const std::string &path, const std::vector<ProgramInfo> &infos,
                 const ProgramInfo &first, const std::vector<int64_t> &times, int64_t stride,
                 int64_t steps, const std::vector<double> &step_origin_us) {
  std::ofstream out(path);
  if (!out) throw Error("--trace: cannot write '" + path + "'");
  const PipelineInfo &p = first.pipeline;
  const int64_t pp_axis = first.grid_axis("pp"), dp_axis = first.grid_axis("dp");
  out << "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n";
  out << "  {\"name\": \"process_name\", \"ph\": \"M\", \"pid\": 0, \"args\": {\"name\": "
         "\"pipeline " << json_escape(p.schedule) << " (measured): p = " << p.stages
      << ", m = " << p.microbatches << ", v = " << p.chunks << "\"}}";
  for (int w = 0; w < first.world; ++w) {
    const int64_t pp = grid_coordinate(first, w, pp_axis);
    const int64_t dp = dp_axis < 0 ? 0 : grid_coordinate(first, w, dp_axis);
    out << ",\n  {\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": 0, \"tid\": " << w
        << ", \"args\": {\"name\": \"pp " << pp << " dp " << dp << "\"}}";
    out << ",\n  {\"name\": \"thread_sort_index\", \"ph\": \"M\", \"pid\": 0, \"tid\": " << w
        << ", \"args\": {\"sort_index\": " << w << "}}";
  }
  static const char *const categories[kPipelineActionKinds] = {
      "forward", "backward", "backward", "weight-gradient",
      "communication", "communication", "communication", "communication"};
  for (int w = 0; w < first.world; ++w) {
    const int64_t pp = grid_coordinate(first, w, pp_axis);
    const std::vector<PipelineAction> &actions = infos[pp].pipeline.actions;
    for (int64_t step = 0; step < steps; ++step) {
      const int64_t *t = times.data() + (static_cast<size_t>(w) * steps + step) * stride;
      for (size_t i = 0; i < actions.size(); ++i) {
        const PipelineAction &a = actions[i];
        const double begin = step_origin_us[step] + t[2 * i] / 1e3;
        const double duration = (t[2 * i + 1] - t[2 * i]) / 1e3;
        out << ",\n  {\"name\": \"" << action_name(a, p.chunks) << "\", \"cat\": \""
            << categories[kind_index(a.kind)] << "\", \"ph\": \"X\", \"pid\": 0, \"tid\": " << w
            << ", \"ts\": " << json_text(begin) << ", \"dur\": " << json_text(duration)
            << ", \"args\": {\"step\": " << step + 1 << ", \"stage\": "
            << a.chunk * p.stages + pp << ", \"chunk\": " << a.chunk
            << ", \"microbatch\": " << a.microbatch;
        if (a.peer >= 0) out << ", \"peer\": " << a.peer;
        out << "}}";
      }
    }
  }
  out << "\n]}\n";
  if (!out) throw Error("--trace: cannot write '" + path + "'");
}

//===--- pipeline_main ------------------------------------------------------------===//

// The runner's body; errors propagate to the caller.
int run_pipeline(int argc, char **argv, const PipelineRankProgram *ranks, int64_t rank_count) {
  TrainOptions options;
  if (!parse_train(argc, argv, options, Launch::Pipeline)) return 0;
  if (!ranks || rank_count < 1)
    throw Error("pipeline_main: no pp rank programs (rank_count " +
                std::to_string(rank_count) + ")");
  // Every rank describes and checks every rank's program: the same verdict
  // everywhere, and rank 0 knows the whole model.
  std::vector<ProgramInfo> infos(static_cast<size_t>(rank_count));
  for (int64_t i = 0; i < rank_count; ++i) {
    if (!ranks[i].describe)
      throw Error("pipeline_main: pp rank " + std::to_string(i) + " has no describe function");
    ranks[i].describe(infos[static_cast<size_t>(i)]);
  }
  Communicator &comm = Communicator::world();
  check_pipeline_programs(infos, ranks, comm.size());
  const int rank = comm.rank();
  const bool rank0 = rank == 0;
  const ProgramInfo &first = infos.front();
  const int64_t pp_axis = first.grid_axis("pp");
  const int64_t pp_rank = grid_coordinate(first, rank, pp_axis);
  const ProgramInfo &info = infos[static_cast<size_t>(pp_rank)];
  const PipelineRankProgram &functions = ranks[pp_rank];
  const PipelineInfo &pipeline = info.pipeline;
  // The kernels' axis communicators (collective: every rank got here).
  use_program_grid(info);
  const std::shared_ptr<Grid> grid = current_grid();
  const TrainInfo &train = info.train;
  const int64_t dp = info.dp_size();
  const int64_t dp_axis = info.grid_axis("dp");
  const int64_t dp_rank = dp_axis < 0 ? 0 : grid->coordinate(dp_axis);
  const int64_t stages = pipeline.stages;
  const int64_t k = train.accumulation_steps;
  const int world = comm.size();
  // The world rank at (pp, dp), the other axes (of size 1) at 0.
  auto world_rank = [&](int64_t pp, int64_t d) {
    std::vector<int64_t> coordinates(first.grid_names.size(), 0);
    coordinates[static_cast<size_t>(pp_axis)] = pp;
    if (dp_axis >= 0) coordinates[static_cast<size_t>(dp_axis)] = d;
    return grid_rank(first, coordinates);
  };
  RunnerComm exchange(comm);

  // The data inputs of this rank's functions, each once.
  std::vector<const ValueInfo *> inputs;
  for (const FunctionInfo &function : info.functions) {
    if (function.name == "optimizer_step") continue;
    for (const ValueInfo &input : function.inputs)
      if (is_data(input) &&
          std::none_of(inputs.begin(), inputs.end(),
                       [&](const ValueInfo *seen) { return seen->name == input.name; }))
        inputs.push_back(&input);
  }

  // What can differ between ranks (files, memory) is set up on every rank
  // before they agree to start.
  std::vector<InputData> data;
  ProgramInfo whole;  // rank 0: every parameter of the model
  TrainOutputs outputs;
  Program program;
  init_program(program, info, options.threads);
  ProgramArena arena;
  std::string setup_error;
  try {
    data = load_data(inputs, options.data, k, dp);
    if (rank0 && !options.save_onnx.empty()) whole = whole_model(infos);
    open_outputs(options, whole, rank0, outputs);
    prepare_program(program, arena, options, dp_rank);
  } catch (const std::exception &error) {
    setup_error = error.what();
  }
  exchange.agree(setup_error, "before training");

  PipelineExecutor executor(program, functions, data, pp_axis);
  const int optimizer_index = find_function_index(info, "optimizer_step");
  const int64_t samples_per_step = train.micro_batch * k * dp;
  const TrafficStart traffic = TrafficStart::now(*grid, exchange);
  double total_us = 0;
  // Per rank and step: a failure flag, the k losses (ranks with the last
  // stage), the compute time, the end of the last action and of the step
  // (microseconds from the step's barrier).
  const int64_t width = k + 4;
  std::vector<float> report(static_cast<size_t>(width));
  std::vector<float> reports(static_cast<size_t>(world * width));
  std::vector<float> losses(static_cast<size_t>(k));
  // With --trace: every action's begin and end (ns), per step.
  int64_t stride = 0;
  for (const ProgramInfo &program_info : infos)
    stride = std::max<int64_t>(stride, 2 * program_info.pipeline.actions.size());
  std::vector<int64_t> trace_times;
  if (!options.trace.empty())
    trace_times.assign(static_cast<size_t>(options.steps * stride), 0);
  std::vector<double> step_origin_us(static_cast<size_t>(options.steps), 0);
  double bubble_sum = 0;
  int64_t bubble_steps = 0;
  StepTimes times;
  for (int64_t step = 1; step <= options.steps; ++step) {
    // The step's times count from a barrier all ranks leave together.
    exchange.barrier();
    const double start = now_us();
    const int64_t batch = (step - 1) % batch_count(data);
    double lr = 0, grad_norm = 0;
    std::string step_error;
    losses.assign(losses.size(), 0.0f);
    bool optimizer_started = false;
    try {
      // Micro-batch mb of this dp rank draws the masks of micro-batch
      // dp_rank * k + mb of a single-rank run.
      const uint64_t first_counter =
          (options.seed << 32) + static_cast<uint64_t>((step - 1) * dp * k);
      executor.run_actions(batch, first_counter, dp_rank, losses, times, start);
      executor.sum_tied();
      lr = scheduled_lr(train, step);
      optimizer_started = true;
      grad_norm =
          run_optimizer_step(program, functions.functions[optimizer_index], lr, step);
      program.memory.release_range(info.persistent_bytes, pipeline.buffers_offset);
      check_arena_peak(program, step);
    } catch (const std::exception &error) {
      step_error = error.what();
      // The peers wait for this rank's transfers and for the collectives
      // of its optimizer_step: issue them (the step's results are lost
      // anyway), so that every rank reaches the report below.
      executor.finish_transfers_after_failure();
      if (!optimizer_started) {
        try {
          program.memory.release_range(info.persistent_bytes, pipeline.buffers_offset);
          run_optimizer_step(program, functions.functions[optimizer_index],
                             scheduled_lr(train, step), step);
        } catch (const std::exception &) {
        }
      }
    }
    const double step_end_us = now_us() - start;
    for (size_t i = 0; i < losses.size(); ++i) report[1 + i] = losses[i];
    report[static_cast<size_t>(k + 1)] = static_cast<float>(times.compute_us);
    report[static_cast<size_t>(k + 2)] = static_cast<float>(times.actions_end_us);
    report[static_cast<size_t>(k + 3)] = static_cast<float>(step_end_us);
    exchange.gather_step_reports(step_error, report, reports, step);
    auto field = [&](int64_t r, int64_t i) {
      return static_cast<double>(reports[static_cast<size_t>(r * width + i)]);
    };
    // The loss: the last stage's ranks' (one per dp coordinate), in dp
    // order then micro-batch order, as a single-rank run sums them.
    double loss_sum = 0;
    for (int64_t d = 0; d < dp; ++d)
      for (int64_t i = 0; i < k; ++i) loss_sum += field(world_rank(stages - 1, d), 1 + i);
    // The bubble of the pipeline of dp coordinate 0.
    double compute = 0, makespan = 0;
    for (int64_t pp = 0; pp < stages; ++pp) {
      compute += field(world_rank(pp, 0), k + 1);
      makespan = std::max(makespan, field(world_rank(pp, 0), k + 2));
    }
    if (step > 1) {
      bubble_sum += makespan > 0 ? 1.0 - compute / (static_cast<double>(stages) * makespan) : 0;
      ++bubble_steps;
    }
    double span = 0;
    for (int r = 0; r < world; ++r) span = std::max(span, field(r, k + 3));
    if (step < options.steps) step_origin_us[static_cast<size_t>(step)] =
        step_origin_us[static_cast<size_t>(step - 1)] + span;
    if (!trace_times.empty())
      for (size_t i = 0; i < times.begin.size(); ++i) {
        int64_t *t = trace_times.data() + static_cast<size_t>((step - 1) * stride);
        t[2 * i] = static_cast<int64_t>(times.begin[i] * 1e3);
        t[2 * i + 1] = static_cast<int64_t>(times.end[i] * 1e3);
      }
    total_us += log_step(options, program, rank0, outputs.log_json.get(), samples_per_step, start,
                         {step, loss_sum / static_cast<double>(dp * k), lr, grad_norm});
  }

  // The measured schedule of every rank, to rank 0.
  std::vector<int64_t> all_times;
  if (!trace_times.empty()) {
    all_times.resize(static_cast<size_t>(world) * trace_times.size());
    exchange.all_gather(
        Tensor{trace_times.data(), DType::I64, Shape{static_cast<int64_t>(trace_times.size())}},
        Tensor{all_times.data(), DType::I64, Shape{static_cast<int64_t>(all_times.size())}});
  }

  const std::vector<int64_t> all =
      gather_summary(exchange, *grid, traffic, program.memory.high_water_mark());

  // The whole model to rank 0: sharded parameters gathered along dp, then
  // every parameter whose lowest holder is pp rank j > 0 sent along pp by
  // its dp-coordinate-0 rank.
  std::map<std::string, Tensor> full_values;
  std::vector<std::vector<uint8_t>> buffers;
  if (!options.save_onnx.empty()) {
    const std::map<std::string, int64_t> owners = parameter_owners(infos);
    std::map<std::string, Tensor> mine;  // whole values of this rank's saved parameters
    for (const ParamInfo &param : info.params) {
      if (owners.at(param.name) != pp_rank) continue;
      const Tensor slot{program.arena + param.offset, param.dtype, param.shape};
      if (!param.sharded()) {
        mine[param.name] = slot;
        continue;
      }
      buffers.emplace_back(slot.nbytes() * static_cast<size_t>(dp));
      const Tensor gathered{buffers.back().data(), param.dtype, Shape{dp * param.shape.numel()}};
      if (dp_axis < 0)
        read_to_host(program.stream, gathered.data, slot);
      else
        exchange.all_gather(grid->comm(dp_axis), slot, gathered);
      mine[param.name] = Tensor{gathered.data, param.dtype, param.full_shape};
    }
    if (dp_rank == 0) {
      Communicator &pp_comm = grid->comm(pp_axis);
      std::vector<P2POp> ops;
      if (pp_rank == 0) {
        // Its unsharded parameters are read from its arena.
        for (const ParamInfo &param : info.params)
          if (param.sharded()) full_values[param.name] = mine.at(param.name);
        for (size_t j = 1; j < infos.size(); ++j)
          for (const ParamInfo &param : infos[j].params) {
            if (owners.at(param.name) != static_cast<int64_t>(j)) continue;
            const Shape shape = whole_shape(param);
            buffers.emplace_back(Tensor{nullptr, param.dtype, shape}.nbytes());
            const Tensor value{buffers.back().data(), param.dtype, shape};
            ops.push_back(P2POp{CommOp::Recv, value, static_cast<int>(j)});
            full_values[param.name] = value;
          }
      } else {
        for (const ParamInfo &param : info.params)
          if (owners.at(param.name) == pp_rank)
            ops.push_back(P2POp{CommOp::Send, mine.at(param.name), 0});
      }
      exchange.send_recv(pp_comm, ops);
    }
  }

  std::string summary_extra;
  const double bubble =
      bubble_steps > 0 ? bubble_sum / static_cast<double>(bubble_steps) : 0.0;
  summary_extra = "\"pipeline\": {\"schedule\": \"" + json_escape(pipeline.schedule) +
                  "\", \"stages\": " + std::to_string(stages) +
                  ", \"chunks\": " + std::to_string(pipeline.chunks) +
                  ", \"microbatches\": " + std::to_string(pipeline.microbatches) +
                  ", \"bubble_measured\": " +
                  (bubble_steps > 0 ? json_number(bubble) : std::string("null")) + "}";
  close_log(options, outputs, true, options.steps, world, all, summary_extra);
  if (outputs.save_source)
    write_save_onnx(*outputs.save_source, whole, program.arena, options.save_onnx,
                    options.external_data, full_values);
  if (rank0 && !all_times.empty())
    write_trace(options.trace, infos, first, all_times, stride, options.steps, step_origin_us);
  print_trained(options, rank0, program, options.steps * k, total_us);
  if (!options.quiet && rank0) {
    char measured[96];
    if (bubble_steps > 0)
      snprintf(measured, sizeof(measured), "%.4f (mean over steps 2..%lld)", bubble,
               static_cast<long long>(options.steps));
    else
      snprintf(measured, sizeof(measured), "n/a (step 1 alone, which is not counted)");
    fprintf(stderr, "pipeline %s (p = %lld, v = %lld, m = %lld): measured bubble %s\n",
            pipeline.schedule.c_str(), static_cast<long long>(stages),
            static_cast<long long>(pipeline.chunks),
            static_cast<long long>(pipeline.microbatches), measured);
  }
  return 0;
}

}  // namespace

int pipeline_main(int argc, char **argv, const PipelineRankProgram *ranks, int64_t rank_count) {
  return run_reporting_errors([&] { return run_pipeline(argc, argv, ranks, rank_count); });
}

}  // namespace dsrt

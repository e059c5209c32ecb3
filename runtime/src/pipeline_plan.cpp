// The pipeline runner's reading of a program's description: action names,
// slot layouts and stage plans, and the checks of every rank's program
// (what pipeline_main relies on, refused with a message before anything
// runs).
#include "pipeline_plan.h"

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace dsrt {
namespace pipeline {

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

int pool_kind(const std::string &name) {
  for (int k = 0; k < kPoolKindCount; ++k)
    if (name == kPoolKinds[k]) return k;
  return -1;
}

SlotLayout tied_layout(const ProgramInfo &info) {
  SlotLayout layout;
  for (const PipelineTied &tied : info.pipeline.tied) {
    const ValueInfo &state = info.states[find_accumulator(info, tied.param, "tied")];
    for (int64_t r : tied.ranks) {
      if (r == info.pipeline.rank) continue;
      ValueInfo buffer = state;
      buffer.name = state.name + " from pp " + std::to_string(r);
      layout.add(info, buffer);
    }
  }
  return layout;
}

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
    plan.layouts[Stash] = SlotLayout::of(info, forward.outputs, ValueRole::Stash);
    plan.layouts[ActIn] = SlotLayout::of(info, forward.inputs, ValueRole::Recv);
    plan.layouts[ActOut] = SlotLayout::of(info, forward.outputs, ValueRole::Send);
    if (plan.input_gradient() >= 0) {
      const FunctionInfo &backward = info.functions[plan.input_gradient()];
      plan.layouts[GradIn] = SlotLayout::of(info, backward.inputs, ValueRole::Recv);
      plan.layouts[GradOut] = SlotLayout::of(info, backward.outputs, ValueRole::Send);
    }
    if (plan.backward_input >= 0)
      plan.layouts[WStash] = SlotLayout::of(info, info.functions[plan.backward_input].outputs,
                                            ValueRole::WeightStash);
    plans.push_back(std::move(plan));
  }
  return plans;
}

namespace {

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
    if (input.role == ValueRole::Stash) {
      if (forward) throw Error("training program: " + what + " reads a stash (" + input.name + ")");
      source = &plan.layouts[Stash];
    } else if (input.role == ValueRole::WeightStash) {
      if (!weight)
        throw Error("training program: " + what + " reads " + input.name +
                    "; only a backward_weight function reads weight-stashed values");
      source = &plan.layouts[WStash];
    } else if (input.role == ValueRole::Recv && weight) {
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
    const ValueRole role = output.role;
    bool ok = false;
    if (forward) {
      ok = role == ValueRole::Send || role == ValueRole::Stash;
      if (!ok && role == ValueRole::Output && last_stage && !has_loss &&
          is_float(output.dtype) && output.shape.numel() == 1)
        ok = has_loss = true;
    } else if (index == plan.backward) {
      ok = role == ValueRole::Send;
    } else if (index == plan.backward_input) {
      ok = role == ValueRole::Send || role == ValueRole::WeightStash;
    }
    if (!ok) {
      std::string allowed;
      if (forward)
        allowed = last_stage ? "a forward's outputs are sent, stashed and one float scalar loss"
                             : "a forward's outputs are sent and stashed (only the last stage "
                               "has a loss)";
      else
        allowed = weight ? "it outputs nothing"
                  : index == plan.backward ? "it outputs sent values"
                                           : "it outputs sent and weight-stashed values";
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
    const std::string what = "tied accumulator of '" + tied.param + "'";
    const int64_t at = find_accumulator(info, tied.param, "training program: " + what);
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
                  (pool == ActOut ? "sent outputs in its forward"
                   : pool == ActIn ? "received inputs in its forward"
                   : pool == GradOut ? "sent outputs in its backward"
                                     : "received inputs in its backward"));
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

}  // namespace

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
        states.push_back(&infos[a].states[find_accumulator(infos[a], tied.param, "tied")]);
    return states;
  };
  for (size_t a = 0; a < infos.size(); ++a)
    for (size_t b = a + 1; b < infos.size(); ++b) {
      std::vector<const ValueInfo *> x = shared(a, b), y = shared(b, a);
      bool same = x.size() == y.size();
      for (size_t i = 0; same && i < x.size(); ++i)
        same = x[i]->param == y[i]->param && x[i]->dtype == y[i]->dtype &&
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

}  // namespace pipeline
}  // namespace dsrt

// The pipeline runner's reading of a program's description (not
// installed): its actions, the slot layouts of its pools, its virtual stages,
// and the checks pipeline_main runs on every rank's program before anything
// runs (pipeline_plan.cpp).
#ifndef DSRT_SRC_PIPELINE_PLAN_H
#define DSRT_SRC_PIPELINE_PLAN_H

#include "dsrt/program.h"
#include "runner.h"
#include "train_common.h"

#include <cstdint>
#include <string>
#include <vector>

namespace dsrt {
namespace pipeline {

using namespace runner;

using Kind = PipelineActionKind;

inline int64_t kind_index(Kind kind) { return static_cast<int64_t>(kind); }
inline bool is_transfer(Kind kind) { return kind_index(kind) >= kind_index(Kind::SendActivation); }
inline bool is_send(Kind kind) { return kind == Kind::SendActivation || kind == Kind::SendGradient; }

// As the compiler prints and traces them: F3, B3, Bi3, W3, send-act3>2,
// recv-grad3<2; with chunks, the chunk after the micro-batch (F3.1).
std::string action_name(const PipelineAction &action, int64_t chunks);
std::string value_text(const ValueInfo &value);
size_t value_bytes(const ValueInfo &value);

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
  // The values of `values` of role `role`, in order.
  static SlotLayout of(const ProgramInfo &info, const std::vector<ValueInfo> &values,
                       ValueRole role) {
    SlotLayout layout;
    for (const ValueInfo &value : values)
      if (value.role == role) layout.add(info, value);
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

inline const char *const kPoolKinds[] = {"stash", "act_in", "act_out", "grad_in", "grad_out", "wstash",
                                  "tied"};
enum PoolKind { Stash = 0, ActIn, ActOut, GradIn, GradOut, WStash, Tied, kPoolKindCount };

// The pool kind called `name` ("stash", ...); -1 if none.
int pool_kind(const std::string &name);

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
SlotLayout tied_layout(const ProgramInfo &info);
// The stages of a checked program, with their layouts.
std::vector<StagePlan> stage_plans(const ProgramInfo &info);

// Every rank checks every rank's program, so that all of them reach the
// same verdict before the first exchange.
void check_pipeline_programs(const std::vector<ProgramInfo> &infos,
                             const PipelineRankProgram *ranks, int job_ranks);

}  // namespace pipeline
}  // namespace dsrt

#endif  // DSRT_SRC_PIPELINE_PLAN_H

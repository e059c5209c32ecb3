//===- ScheduleAttrs.h - schedules and actions as ds enums ------*- C++ -*-===//
//
// The pipeline library (Schedule.h) knows no MLIR; the ds dialect spells its
// schedules and actions as enums of #ds.pipeline and #ds.pipeline_rank.
// These map one to the other (the same values, checked here).
//
//===----------------------------------------------------------------------===//

#ifndef DSOPT_PIPELINE_SCHEDULEATTRS_H
#define DSOPT_PIPELINE_SCHEDULEATTRS_H

#include "dsopt/Pipeline/Schedule.h"

#include "ds/IR/DsDialect.h"

namespace dsopt::pipeline {

#define DSOPT_SAME(A, B) static_assert(static_cast<int>(A) == static_cast<int>(B))
DSOPT_SAME(ScheduleKind::GPipe, ds::PipelineSchedule::gpipe);
DSOPT_SAME(ScheduleKind::OneFOneB, ds::PipelineSchedule::one_f_one_b);
DSOPT_SAME(ScheduleKind::Interleaved, ds::PipelineSchedule::interleaved);
DSOPT_SAME(ScheduleKind::ZeroBubbleH1, ds::PipelineSchedule::zb_h1);
DSOPT_SAME(ActionKind::Forward, ds::PipelineActionKind::forward);
DSOPT_SAME(ActionKind::Backward, ds::PipelineActionKind::backward);
DSOPT_SAME(ActionKind::BackwardInput, ds::PipelineActionKind::backward_input);
DSOPT_SAME(ActionKind::BackwardWeight, ds::PipelineActionKind::backward_weight);
DSOPT_SAME(ActionKind::SendActivation, ds::PipelineActionKind::send_activation);
DSOPT_SAME(ActionKind::RecvActivation, ds::PipelineActionKind::recv_activation);
DSOPT_SAME(ActionKind::SendGradient, ds::PipelineActionKind::send_gradient);
DSOPT_SAME(ActionKind::RecvGradient, ds::PipelineActionKind::recv_gradient);
#undef DSOPT_SAME

inline ds::PipelineSchedule toAttr(ScheduleKind kind) {
  return static_cast<ds::PipelineSchedule>(kind);
}
inline ScheduleKind fromAttr(ds::PipelineSchedule kind) {
  return static_cast<ScheduleKind>(kind);
}
inline ds::PipelineActionKind toAttr(ActionKind kind) {
  return static_cast<ds::PipelineActionKind>(kind);
}
inline ActionKind fromAttr(ds::PipelineActionKind kind) {
  return static_cast<ActionKind>(kind);
}

} // namespace dsopt::pipeline

#endif // DSOPT_PIPELINE_SCHEDULEATTRS_H

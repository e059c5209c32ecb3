// dsrt: what the training runners check in a program's description before
// anything runs (train_common.h).
#include "train_common.h"

#include "dsrt/backend.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <omp.h>
#include <sys/stat.h>

namespace dsrt {
namespace runner {

//===--- the description ----------------------------------------------------------===//

const FunctionInfo &find_function(const ProgramInfo &info, const std::string &name) {
  for (const FunctionInfo &function : info.functions)
    if (function.name == name) return function;
  throw Error("the program has no function '" + name + "' (is it a training program?)");
}

int find_function_index(const ProgramInfo &info, const std::string &name) {
  for (size_t i = 0; i < info.functions.size(); ++i)
    if (info.functions[i].name == name) return static_cast<int>(i);
  return -1;
}

int64_t find_value(const std::vector<ValueInfo> &values, const std::string &name,
                   const std::string &what) {
  for (size_t i = 0; i < values.size(); ++i)
    if (values[i].name == name) return static_cast<int64_t>(i);
  std::string names;
  for (const ValueInfo &value : values) names += (names.empty() ? "'" : ", '") + value.name + "'";
  throw Error(what + " '" + name + "' is missing (it has " +
              (names.empty() ? std::string("none") : names) + ")");
}

void check_in_arena(const ProgramInfo &info, const ValueInfo &value, const std::string &what) {
  int64_t bytes = static_cast<int64_t>(Tensor{nullptr, value.dtype, value.shape}.nbytes());
  const int64_t arena = info.space(value.space).arena_bytes;
  if (value.offset < 0 || value.offset + bytes > arena)
    throw Error("memory plan: " + what + " '" + value.name + "' at offset " +
                std::to_string(value.offset) + " (" + std::to_string(bytes) +
                " bytes) is outside the " + std::to_string(arena) + "-byte " +
                (value.space == Space::Device ? std::string("arena")
                                              : std::string(space_name(value.space)) + " arena"));
}

void check_function_plan(const ProgramInfo &info, const std::string &name) {
  const FunctionInfo &function = find_function(info, name);
  if (function.arena_bytes > info.arena_bytes)
    throw Error(std::string("memory plan: ") + name + " plans " +
                std::to_string(function.arena_bytes) + " bytes, more than the program's " +
                std::to_string(info.arena_bytes) + "-byte arena");
  for (const ValueInfo &input : function.inputs)
    if (is_data(input))  // a pipeline stage reads the others where they are
      check_in_arena(info, input, std::string(name) + " input");
}

bool is_data(const ValueInfo &input) { return input.role == ValueRole::Input; }

void check_training_basics(const ProgramInfo &info) {
  const TrainInfo &train = info.train;
  if (train.accumulation_steps < 1)
    throw Error("training program: accumulation_steps is " +
                std::to_string(train.accumulation_steps) + "; it must be at least 1");
  if (train.micro_batch < 1)
    throw Error("training program: micro_batch is " + std::to_string(train.micro_batch) +
                "; it must be at least 1");
  scheduled_lr(train, 1);  // throws for an unknown schedule
  if (train.schedule == "WarmupCosineLR" &&
      train.total_num_steps == std::max<int64_t>(2, train.warmup_num_steps))
    throw Error("WarmupCosineLR: total_num_steps (" + std::to_string(train.total_num_steps) +
                ") must differ from warmup_num_steps, or the cosine has no steps");
  for (const ParamInfo &param : info.params) check_in_arena(info, param, "parameter");
  for (const ValueInfo &state : info.states) {
    check_in_arena(info, state, "state");
    const int64_t persistent = info.space(state.space).persistent_bytes;
    if (state.offset + static_cast<int64_t>(Tensor{nullptr, state.dtype, state.shape}.nbytes()) >
        persistent)
      throw Error("memory plan: state '" + state.name + "' lies above the " +
                  space_name(state.space) + " space's persistent_bytes (" +
                  std::to_string(persistent) + ")");
  }
}

void check_optimizer_step(const ProgramInfo &info) {
  const FunctionInfo &optimizer = find_function(info, "optimizer_step");
  const ValueInfo &lr = optimizer.inputs[find_value(optimizer.inputs, "lr", "optimizer_step input")];
  if (!is_float(lr.dtype) || lr.shape.numel() != 1)
    throw Error("optimizer_step input 'lr' is " + std::string(dtype_name(lr.dtype)) + " " +
                lr.shape.str() + "; expected an f32 scalar");
  const ValueInfo &step =
      optimizer.inputs[find_value(optimizer.inputs, "step", "optimizer_step input")];
  if (is_float(step.dtype) || step.dtype == DType::Bool || step.shape.numel() != 1)
    throw Error("optimizer_step input 'step' is " + std::string(dtype_name(step.dtype)) + " " +
                step.shape.str() + "; expected an i64 scalar");
  const ValueInfo &norm =
      optimizer.outputs[find_value(optimizer.outputs, "grad_norm", "optimizer_step output")];
  if (!is_float(norm.dtype) || norm.shape.numel() != 1)
    throw Error("optimizer_step output 'grad_norm' is " + std::string(dtype_name(norm.dtype)) +
                " " + norm.shape.str() + "; expected a float scalar");
}

void check_job_size(const ProgramInfo &info, int job_ranks) {
  if (info.world == job_ranks) return;
  std::string grid;
  for (size_t i = 0; i < info.grid_names.size(); ++i)
    grid += (i ? " --" : "--") + info.grid_names[i] + "=" + std::to_string(info.grid_sizes[i]);
  if (grid.empty()) grid = "no grid";
  throw Error("the program was compiled for " + std::to_string(info.world) + " ranks (" + grid +
              "; world " + std::to_string(info.world) + ") but the job has " +
              std::to_string(job_ranks) + "; run it with mpirun -np " +
              std::to_string(info.world));
}

}  // namespace runner
}  // namespace dsrt

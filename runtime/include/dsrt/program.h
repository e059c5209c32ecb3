// dsrt: what a generated program is made of.
//
// dsopt emits two functions per program:
//   void dsopt_describe(dsrt::ProgramInfo&)  inputs, parameters (and where
//                                            their bytes are), outputs, the
//                                            memory plan and the op list;
//   void dsopt_run(dsrt::Program&)           one kernel call per op on views
//                                            of the arena;
// and a main() that hands both to dsrt::forward_main, which loads weights and
// inputs into the arena, runs, writes the outputs and checks the memory plan.
//
// A training program has two run functions sharing one arena, micro_step
// (forward and backward of one micro-batch, adding its gradients into
// accumulators) and optimizer_step (clip and update in place), described as
// FunctionInfo entries after begin_function; its main hands them to
// dsrt::train_main (docs/runtime.md, "Training programs"). A pipeline
// program is one such program per pipeline rank, each with a forward and a
// backward function per virtual stage it holds and its static schedule,
// linked into one executable whose main calls dsrt::pipeline_main.
//
// The description is in program_info.h, the running program in
// program_run.h; this header adds the mains and what they share.
#ifndef DSRT_PROGRAM_H
#define DSRT_PROGRAM_H

#include "dsrt/dist.h"
#include "dsrt/kernels.h"
#include "dsrt/math.h"
#include "dsrt/program_info.h"
#include "dsrt/program_run.h"
#include "dsrt/stream.h"
#include "dsrt/tensor.h"

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace dsrt {

//===--- training ----------------------------------------------------------===//

// The learning rate of optimizer step `step` (1-based) under DeepSpeed's
// schedules (deepspeed/runtime/lr_schedules.py): the scheduler's constructor
// sets the first step's lr and scheduler.step() follows every optimizer
// step, so step s sees last_batch_iteration s - 2.
double scheduled_lr(const TrainInfo &train, int64_t step);

// The dropout counter of the running micro step: (seed << 32) + the number
// of micro steps run before it. Generated dropout calls read it.
uint64_t rng_counter();
// The seed of a dropout whose activation is split over the grid's "tp" axis
// (Megatron's model-parallel RNG): `seed` + 2718 + this rank's tp
// coordinate, so each tp rank draws its own mask for its own piece; a
// dropout of a replicated activation keeps `seed` and draws the same mask on
// every tp rank.
uint64_t tp_rank_seed(uint64_t seed);
// ds.tp_offset: writes into the scalar `out`, in stream order, this rank's
// coordinate along axis `axis` of the program's grid times `stride` (the
// first vocabulary row a tensor-parallel rank holds: its tp coordinate
// times its rows).
void tp_offset(Stream &s, const Tensor &out, int64_t axis, int64_t stride);

//===--- the program's main ------------------------------------------------===//

using DescribeFn = void (*)(ProgramInfo &);
using RunFn = void (*)(Program &);

// `run --inputs DIR --outputs DIR [--weights DIR] [--threads N] [--trace FILE]`:
// reads <input name>.npy for every input, writes <output name>.npy for every
// output. Returns the process exit status; errors are reported, never thrown.
int forward_main(int argc, char **argv, DescribeFn describe, RunFn run);

// `train --data DIR --steps N [--log-json FILE] [--save-onnx FILE]
//  [--external-data] [--seed S] [--weights DIR] [--threads N] [--trace FILE]
//  [--quiet]`: loads the parameters, zeroes the states, runs N optimizer
// steps of accumulation_steps micro steps each on batches from DIR, logs
// every step and optionally writes the trained model. Returns the exit
// status; errors are reported, never thrown. A program with a grid of W
// ranks (set_grid) runs under mpirun -np W, every rank on its share of each
// global batch (docs/runtime.md, "Data-parallel programs").
int train_main(int argc, char **argv, DescribeFn describe, RunFn micro_step,
               RunFn optimizer_step);

// One pp rank's program of a pipeline-parallel program.
struct PipelineRankProgram {
  DescribeFn describe;     // this pp rank's description
  const RunFn *functions;  // in the order describe lists them (begin_function)
  int64_t function_count;
};

// The same flags as train_main. A program compiled for --pp=P with dp D
// runs under mpirun -np P*D; every process runs ranks[its pp coordinate]
// (rank_count == P), executing that program's static schedule every step
// with the micro-batches of its dp coordinate (docs/runtime.md,
// "Pipeline-parallel programs"). Returns the exit status; errors are
// reported, never thrown.
int pipeline_main(int argc, char **argv, const PipelineRankProgram *ranks, int64_t rank_count);

// Writes a copy of the source model (info.model_path) whose initializers
// that are program parameters hold their current values in `arena`. Every
// other byte of the model is kept; initializers that are not parameters and
// point to external data are read (from `weights_dir`, else the model's
// directory) and stored again, so the copy needs none of the source's
// files. With `external_data`, or when the initializers exceed 1 GiB,
// tensors of 1024 bytes or more go to `<path>.data` beside `path`.
// `full_values` (by parameter name) supplies the whole value of parameters
// that the arena holds only a shard of (set_param_shard); each sharded
// parameter needs one, of its dtype and full_shape. Other entries override
// the arena.
void save_onnx(const ProgramInfo &info, const uint8_t *arena, const std::string &path,
               const std::string &weights_dir, bool external_data,
               const std::map<std::string, Tensor> &full_values = {});

// Where a parameter's bytes come from when loading: the model's directory,
// unless overridden (--weights).
std::string resolve_weight_file(const ProgramInfo &info, const std::string &weights_dir,
                                const std::string &file);

}  // namespace dsrt

#endif  // DSRT_PROGRAM_H

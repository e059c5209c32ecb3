// dsrt: data-parallel programs (SPMD over the ranks of a device grid).
//
// A program compiled for data parallelism runs as one process per rank
// (mpirun -np W). Every rank runs the same generated code; the kernels below
// exchange values along one axis of the program's grid, which for now has a
// single axis "dp" as large as the job. ZeRO stages shard optimizer state,
// gradients and parameters along that axis: a sharded tensor is flattened,
// zero-padded to W * s elements and rank r holds elements [r*s, (r+1)*s).
//
// The collective kernels issue on Communicator::world() and return at once;
// they complete asynchronously on the stream, like the Communicator API, and
// later kernels on the stream wait for them. Arguments are checked when the
// kernel is issued (a dsrt::Error naming the op and the shapes); errors that
// arise while the collective runs fail it on every rank and are reported by
// the stream's next kernel or synchronize(). See docs/runtime.md,
// "Data-parallel programs".
#ifndef DSRT_DIST_H
#define DSRT_DIST_H

#include "dsrt/kernels.h"
#include "dsrt/stream.h"
#include "dsrt/tensor.h"

#include <cstdint>

namespace dsrt {

struct ProgramInfo;

//===--- kernels called by generated code -----------------------------------===//
// `axis` is the grid axis the collective runs along; only axis 0 ("dp", the
// whole world) exists for now, any other throws.

// out = op over ranks of in (Sum, Mean: the average, Max). Same element count;
// in and out are the same tensor (in place) or disjoint. f32, f16, bf16, i64,
// i32.
void all_reduce(Stream &s, const Tensor &in, const Tensor &out, ReduceOp op, int64_t axis);

// Flat gather: out.numel() == size * in.numel(); rank r's in lands at elements
// [r * in.numel(), (r + 1) * in.numel()) of out. In place when in is that
// chunk of out. Any element type.
void all_gather(Stream &s, const Tensor &in, const Tensor &out, int64_t axis);

// Flat reduce-scatter: in.numel() == size * out.numel(); out = elements
// [r * out.numel(), (r + 1) * out.numel()) of op over ranks of in. In place
// when out is that chunk of in. Element types as all_reduce.
void reduce_scatter(Stream &s, const Tensor &in, const Tensor &out, ReduceOp op, int64_t axis);

// No communication: out = elements [r * out.numel(), (r + 1) * out.numel())
// of in (in.numel() == size * out.numel()). Any element type.
void all_slice(Stream &s, const Tensor &in, const Tensor &out, int64_t axis);

// out (1-D, m >= n elements) = the n elements of in, flattened, then zeros
// up to m. Any element type (in and out the same).
void flat_pad(Stream &s, const Tensor &in, const Tensor &out);

// The inverse of flat_pad: out = the first out.numel() elements of the 1-D
// in (in.numel() >= out.numel()), in out's shape. Nothing to copy when out
// is a view of in's front (ds.flat_unpad is normally such a view). Any
// element type (in and out the same).
void copy_prefix(Stream &s, const Tensor &in, const Tensor &out);

//===--- bucketed collectives --------------------------------------------------===//
// Several tensors in ONE ring operation of the communicator over `staging`, a
// 1-D buffer the caller plans (in the arena) and must not touch until the
// collective completes. `ins` and `outs` are arrays of n_ins and n_outs
// tensor views (n_ins == n_outs); every tensor, and staging, has one element
// type. Packing into staging and unpacking from it run on the communication
// thread, around the ring: the call returns at once. The counters count one
// call of the underlying operation over staging.numel() elements. Arguments
// are checked when issued (a dsrt::Error naming the op and the shapes).
// staging must not overlap any of ins or outs, nor outs each other.

// staging.numel() == sum of ins[i].numel(); outs[i] has ins[i]'s element
// count (outs[i] may be ins[i]: in place). ins are packed in order, staging
// is all-reduced in place, and unpacked into outs. Element types as
// all_reduce.
void all_reduce_bucket(Stream &s, const Tensor *ins, int64_t n_ins, const Tensor *outs,
                       int64_t n_outs, const Tensor &staging, ReduceOp op, int64_t axis);

// ZeRO layout, W ranks: ins[i] holds m_i = W * s_i elements, outs[i] s_i.
// staging.numel() == sum of m_i, packed rank-major: for r in 0..W-1, for
// each i, elements [r*s_i, (r+1)*s_i) of ins[i]. Staging is reduce-scattered
// in place (its equal ring chunks are sum of s_i each), and this rank's
// chunk unpacked: outs[i] = elements [rank*s_i, (rank+1)*s_i) of the
// reduction of ins[i], as reduce_scatter(ins[i], outs[i]) gives.
void reduce_scatter_bucket(Stream &s, const Tensor *ins, int64_t n_ins, const Tensor *outs,
                           int64_t n_outs, const Tensor &staging, ReduceOp op, int64_t axis);

// The inverse: ins[i] are shards of s_i elements, outs[i] hold m_i = W * s_i;
// staging (sum of m_i) is rank-major as above. This rank's shards are
// packed into its chunk of staging, staging is all-gathered in place, and
// every rank's chunk unpacked: outs[i] = all_gather(ins[i]). Any element
// type.
void all_gather_bucket(Stream &s, const Tensor *ins, int64_t n_ins, const Tensor *outs,
                       int64_t n_outs, const Tensor &staging, int64_t axis);

//===--- called by generated code: dsopt_describe ---------------------------===//

// The program's device grid: `axis_count` axes named by the comma-separated
// `axis_names` ("dp") with `sizes`; ProgramInfo::world is their product.
// Programs that never call it run on one rank.
void set_grid(ProgramInfo &info, const char *axis_names, const int64_t *sizes,
              int64_t axis_count);

// Marks the last added parameter as sharded along "dp": its arena slot (its
// ParamInfo::shape, 1-D [s]) holds this rank's s elements of the flattened
// tensor of `full_shape` (`total_numel` elements) zero-padded to dp * s.
// A file parameter's bytes in the file (add_param_file's file_offset and
// length) are the whole tensor's; in-program data (add_param_data) must hold
// the whole tensor, and the shard is then ceil(total_numel / dp) elements
// (call set_grid first).
void set_param_shard(ProgramInfo &info, int64_t total_numel, Shape full_shape);

}  // namespace dsrt

#endif  // DSRT_DIST_H

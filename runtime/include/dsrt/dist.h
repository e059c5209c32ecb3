// dsrt: data-parallel programs (SPMD over the ranks of a device grid).
//
// A program compiled for W ranks runs as one process per rank (mpirun -np
// W). Its device grid has named axes among "pp", "dp" and "tp" whose sizes
// multiply to W; ranks are laid out row-major over the axes in the order
// set_grid names them (grid_coordinate). Every rank runs the same generated
// code; the kernels below exchange values along one axis of the grid, among
// the ranks that differ only in their coordinate on that axis. ZeRO stages
// shard optimizer state, gradients and parameters along "dp": a sharded
// tensor is flattened, zero-padded to dp * s elements and the rank with dp
// coordinate d holds elements [d*s, (d+1)*s).
//
// The collective kernels issue on the axis' communicator of the current
// grid (current_grid: the program's, installed by train_main and
// forward_main, or one axis "dp" as large as the job) and return at once;
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
#include <memory>
#include <string>
#include <vector>

namespace dsrt {

struct ProgramInfo;
class Communicator;

//===--- the grid ----------------------------------------------------------------===//
// Layout: rank = sum over axes a of coordinate[a] * stride[a], where
// stride[a] is the product of the sizes of the axes after a: the last axis
// varies fastest. For "pp,dp" with sizes {P, D}: rank = pp * D + dp, so the
// ranks of one pipeline stage are consecutive. A program without a grid has
// no axes and one rank.

// The coordinate of `rank` (0 <= rank < info.world) along grid axis `axis`
// (an index into info.grid_names).
int64_t grid_coordinate(const ProgramInfo &info, int rank, int64_t axis);
// The inverse: the rank at `coordinates`, one per axis in info.grid_names
// order.
int grid_rank(const ProgramInfo &info, const std::vector<int64_t> &coordinates);
// This process's coordinate (its rank in the world communicator) along the
// grid's axis named `name`; 0 when the grid has no such axis.
int64_t own_coordinate(const ProgramInfo &info, const std::string &name);

// A grid over the ranks of a communicator (the job's world), with one
// communicator per axis: the ranks that differ only in that axis'
// coordinate, ranked by it (the axis communicator's rank is this rank's
// coordinate). An axis as large as the world uses the world communicator
// itself (a one-axis "dp" grid collects exactly as the world does: same
// counters, same bytes); every other axis gets a communicator split from it.
class Grid {
public:
  // Collective over `world`: every rank of it constructs the same grid at
  // the same point of its operations (the splits are world operations).
  // Throws when the sizes do not multiply to world.size() or the names are
  // not distinct axes among "pp", "dp", "tp".
  Grid(std::vector<std::string> names, std::vector<int64_t> sizes, Communicator &world);
  ~Grid();
  Grid(const Grid &) = delete;
  Grid &operator=(const Grid &) = delete;

  int64_t axis_count() const { return static_cast<int64_t>(names_.size()); }
  const std::vector<std::string> &names() const { return names_; }
  const std::vector<int64_t> &sizes() const { return sizes_; }
  // The index of the axis called `name`, -1 when the grid has none.
  int64_t axis(const std::string &name) const;
  int64_t size(int64_t axis) const;
  // This rank's coordinate along `axis`.
  int64_t coordinate(int64_t axis) const;
  Communicator &world() const { return world_; }
  Communicator &comm(int64_t axis) const;
  // Every distinct communicator of the grid, the world first (for counting
  // what the program's collectives moved).
  std::vector<Communicator *> communicators() const;
  // "pp=2, dp=2"
  std::string str() const;

private:
  std::vector<std::string> names_;
  std::vector<int64_t> sizes_;
  Communicator &world_;
  std::vector<std::unique_ptr<Communicator>> owned_;
  std::vector<Communicator *> comms_;
};

// The communicator of every rank of the job that the program's collectives
// run over: the backend's world transport (BackendInterface::world_transport,
// NCCL on cuda) bootstrapped over Communicator::world(), or
// Communicator::world() itself where the backend has none (cpu). Made on
// first use (collective over Communicator::world() when it bootstraps a
// transport) and never destroyed. Communicator::world() stays the runners'
// host-side channel (agreeing on errors, step reports, the summary).
Communicator &program_world();

// The grid the kernels below run on. Process-wide state, since the kernels
// only get a stream and an axis index: train_main and forward_main install
// the program's grid before running it (use_program_grid). Until then, and
// after set_current_grid(nullptr), it is one axis "dp" as large as the
// job's world (program_world()), made on first use.
std::shared_ptr<Grid> current_grid();
// Installs `grid` (nullptr: the default). Set it between runs, not while
// kernels are being issued on other threads.
void set_current_grid(std::shared_ptr<Grid> grid);
// Installs the grid of info (one axis "dp" of size 1 for a program without
// a grid), unless the current grid already has its axes and sizes.
// Collective over Communicator::world() when it makes a grid that needs
// split communicators (or program_world() a transport). The grid spans
// program_world().
void use_program_grid(const ProgramInfo &info);

//===--- kernels called by generated code -----------------------------------===//
// `axis` is the index of the current grid's axis the collective runs along
// (among the ranks that differ only in that coordinate; "ranks" and "size"
// below are that axis' ranks and size, rank r is the coordinate r); an axis
// the grid does not have throws.

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

// Makes, before a program's first step, the pack streams its bucketed
// collectives (the *_bucket ops of `info`'s functions) will take: on cuda a
// stream is a cudaStream_t, which no step may create. A bucket holds its
// stream until the transport's thread has unpacked it, which may be after
// the next bucket is issued, so twice the program's count.
void reserve_pack_streams(const ProgramInfo &info);

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

//===--- point to point ----------------------------------------------------------===//

// Pipeline transfers along `axis`: sends[i] goes to the rank whose
// coordinate on `axis` is send_peers[i] (other coordinates equal to this
// rank's), recvs[i] is filled from recv_peers[i]. All of them form one
// Communicator::send_recv group on the axis' communicator: issued at once,
// they progress together (two stages may send to each other), complete
// asynchronously on the stream, and count as send and recv calls. A peer
// must be another coordinate of the axis, and no receive buffer may overlap
// another transfer's (thrown when issued, naming the op, the peer and the
// shapes). Each send must match the peer's receive of the same element
// type and count, in the same order among the transfers between the two;
// a mismatch fails the transfer on both ends (a dsrt::Error naming both
// ranks' operations and shapes, from the stream's next kernel or
// synchronize()) while the group's other transfers complete.
void send_recv(Stream &s, const Tensor *sends, const int64_t *send_peers, int64_t n_sends,
               const Tensor *recvs, const int64_t *recv_peers, int64_t n_recvs, int64_t axis);

//===--- called by generated code: dsopt_describe ---------------------------===//

// The program's device grid: `axis_count` axes named by the comma-separated
// `axis_names` ("dp", "pp,dp", "pp,dp,tp": distinct axes among pp, dp and
// tp, in any order, which fixes the rank layout: see grid_coordinate) with
// `sizes`; ProgramInfo::world is their product. Programs that never call it
// run on one rank.
void set_grid(ProgramInfo &info, const char *axis_names, const int64_t *sizes,
              int64_t axis_count);

// Marks the last added parameter as sharded along "dp": its arena slot (its
// ParamInfo::shape, 1-D [s]) holds this rank's s elements of the flattened
// tensor of `full_shape` (`total_numel` elements) zero-padded to dp * s.
// A file parameter's bytes in the file (add_param_file's file_offset and
// length) are the whole tensor's; in-program data (add_param_data) must hold
// the whole tensor, and the shard is then ceil(total_numel / dp) elements
// (call set_grid first). dp is the size of the grid's "dp" axis (1 without
// one).
void set_param_shard(ProgramInfo &info, int64_t total_numel, Shape full_shape);

// Marks the last added parameter as split over the grid's "tp" axis (of
// size N; call set_grid first): the model's tensor is `whole`, and the
// rank's piece cuts axis `dim` into `blocks` equal blocks, each into N
// pieces, the rank holding piece r (its tp coordinate) of every block
// (#ds.tp_split). The parameter's shape (add_param_file) is the piece's;
// the file bytes and in-program data (add_param_data) are the whole
// tensor's. Call it before set_param_shard, whose full_shape is then the
// piece's. Unless `padded`, the N pieces of each block are equal. A padded
// split (a vocabulary, #ds.tp_split's `whole`; blocks 1) has pieces of
// P = tp_padded_piece(whole[dim], N) entries along the axis, piece r those
// from r * P on, zeros past the end.
void set_param_tp_split(ProgramInfo &info, int64_t dim, int64_t blocks, Shape whole,
                        bool padded = false);

// The entries each of `ranks` pieces of a padded axis of `extent` holds:
// ceil(extent / ranks) rounded up to a multiple of kTpPadMultiple, so that
// a 16-bit piece's rows stay 16-byte aligned for the GPU's matrix products
// (the compiler's ds::TensorSplitAttr::paddedPiece is the same rule).
constexpr int64_t kTpPadMultiple = 8;
int64_t tp_padded_piece(int64_t extent, int64_t ranks);
// Whether padded pieces of `run` entries are a layout of an axis of
// `extent` over `ranks`: any run from ceil(extent / ranks) to
// tp_padded_piece's (checkpoints written before the multiple of 8 hold
// ceil(extent / ranks)).
bool tp_piece_run_ok(int64_t extent, int64_t ranks, int64_t run);

// The shape of one of `ranks` pieces of `whole` split along `dim` in
// `blocks` equal blocks, each into `ranks` equal pieces (run 0), or padded
// (blocks 1) into pieces of `run` entries along `dim` (tp_piece_run_ok);
// throws naming the split when it is none.
Shape tp_piece_shape(const Shape &whole, int64_t dim, int64_t blocks, int64_t ranks,
                     int64_t run = 0);

// Piece `rank` of `ranks` of a tensor split as set_param_tp_split says
// (axis `dim` of `whole` in `blocks` blocks), between the whole tensor's
// bytes and the piece's (both dense, row-major, `elem_size` bytes per
// element): to_piece copies the piece out of `whole_bytes`, otherwise it
// writes the piece into its place there (a padded piece: its entries
// past the whole's end are zeros, and are not written back). `run` is
// tp_piece_shape's: 0 for equal pieces, a padded piece's entries else.
void tp_piece_copy(void *whole_bytes, void *piece_bytes, const Shape &whole, int64_t dim,
                   int64_t blocks, int64_t ranks, int64_t rank, size_t elem_size, bool to_piece,
                   int64_t run = 0);

}  // namespace dsrt

#endif  // DSRT_DIST_H

// dsrt: the kernels and describe calls of data-parallel programs.
#include "dsrt/dist.h"

#include "async.h"

#include "dsrt/backend.h"
#include "dsrt/comm.h"
#include "dsrt/program.h"
#include "health.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

namespace dsrt {

namespace {

std::string text(const Tensor &t) { return std::string(dtype_name(t.dtype)) + " " + t.shape.str(); }

// The axes set_grid accepts.
bool known_axis(const std::string &name) { return name == "pp" || name == "dp" || name == "tp"; }

// The stride of `axis`: the product of the sizes of the axes after it.
int64_t stride_of(const std::vector<int64_t> &sizes, int64_t axis) {
  int64_t stride = 1;
  for (size_t a = static_cast<size_t>(axis) + 1; a < sizes.size(); ++a) stride *= sizes[a];
  return stride;
}

std::string grid_text(const std::vector<std::string> &names, const std::vector<int64_t> &sizes) {
  std::string text;
  for (size_t a = 0; a < names.size(); ++a)
    text += (a ? ", " : "") + names[a] + "=" + std::to_string(sizes[a]);
  return text.empty() ? "no axes" : text;
}

// The communicator of the current grid's axis `axis`; `grid` keeps it alive.
Communicator &axis_comm(const char *op, int64_t axis, std::shared_ptr<Grid> &grid) {
  grid = current_grid();
  if (axis < 0 || axis >= grid->axis_count())
    throw Error(std::string("dsrt::") + op + ": grid axis " + std::to_string(axis) +
                " does not exist (the grid has " + std::to_string(grid->axis_count()) +
                (grid->axis_count() == 1 ? " axis: " : " axes: ") + grid->str() + ")");
  return grid->comm(axis);
}

void check_same_type(const char *op, const Tensor &in, const Tensor &out) {
  if (in.dtype != out.dtype)
    throw Error(std::string("dsrt::") + op + ": in " + text(in) + " and out " + text(out) +
                " have different element types");
}

void check_reducible(const char *op, const Tensor &in, const Tensor &out) {
  check_same_type(op, in, out);
  if (in.dtype == DType::Bool)
    throw Error(std::string("dsrt::") + op + ": cannot reduce " + text(in) +
                " (f32, f16, bf16, i64 and i32 can)");
}

// `whole` must hold `ranks` times the elements of `part`.
void check_chunks(const char *op, const char *whole_name, const Tensor &whole,
                  const char *part_name, const Tensor &part, int ranks) {
  if (whole.numel() != static_cast<int64_t>(ranks) * part.numel())
    throw Error(std::string("dsrt::") + op + ": " + whole_name + " " + text(whole) + " holds " +
                std::to_string(whole.numel()) + " elements but must hold " +
                std::to_string(ranks) + " ranks x " + part_name + " " + text(part) + " = " +
                std::to_string(static_cast<int64_t>(ranks) * part.numel()));
}

}  // namespace

//===--- collectives ---------------------------------------------------------===//

void all_reduce(Stream &s, const Tensor &in, const Tensor &out, ReduceOp op, int64_t axis) {
  std::shared_ptr<Grid> grid;
  Communicator &comm = axis_comm("all_reduce", axis, grid);
  check_reducible("all_reduce", in, out);
  if (in.numel() != out.numel())
    throw Error("dsrt::all_reduce: in " + text(in) + " and out " + text(out) +
                " differ in element count");
  comm.all_reduce(s, in, out, op);
}

void all_gather(Stream &s, const Tensor &in, const Tensor &out, int64_t axis) {
  std::shared_ptr<Grid> grid;
  Communicator &comm = axis_comm("all_gather", axis, grid);
  check_same_type("all_gather", in, out);
  check_chunks("all_gather", "out", out, "in", in, comm.size());
  // With out.numel() a multiple of the size, the ring chunks are the equal
  // chunks [r * in.numel(), (r + 1) * in.numel()).
  comm.all_gather(s, in, out);
}

void reduce_scatter(Stream &s, const Tensor &in, const Tensor &out, ReduceOp op,
                    int64_t axis) {
  std::shared_ptr<Grid> grid;
  Communicator &comm = axis_comm("reduce_scatter", axis, grid);
  check_reducible("reduce_scatter", in, out);
  check_chunks("reduce_scatter", "in", in, "out", out, comm.size());
  comm.reduce_scatter(s, in, out, op);
}

void all_slice(Stream &s, const Tensor &in, const Tensor &out, int64_t axis) {
  std::shared_ptr<Grid> grid;
  Communicator &comm = axis_comm("all_slice", axis, grid);
  check_same_type("all_slice", in, out);
  check_chunks("all_slice", "in", in, "out", out, comm.size());
  const size_t bytes = out.nbytes();
  const uint8_t *src = static_cast<const uint8_t *>(in.data) + comm.rank() * bytes;
  backend(s).copy(s, out.data, src, bytes);
}

void flat_pad(Stream &s, const Tensor &in, const Tensor &out) {
  check_same_type("flat_pad", in, out);
  if (out.shape.rank != 1 || out.numel() < in.numel())
    throw Error("dsrt::flat_pad: out " + text(out) + " must be 1-D with at least the " +
                std::to_string(in.numel()) + " elements of in " + text(in));
  const int64_t n = in.numel(), m = out.numel();
  backend(s).copy(s, out.data, in.data, in.nbytes());
  if (m > n)
    fill_async(s, Tensor{static_cast<uint8_t *>(out.data) + in.nbytes(), out.dtype, Shape{m - n}},
               0.0);
}

void copy_prefix(Stream &s, const Tensor &in, const Tensor &out) {
  check_same_type("copy_prefix", in, out);
  if (in.shape.rank != 1 || in.numel() < out.numel())
    throw Error("dsrt::copy_prefix: in " + text(in) + " must be 1-D with at least the " +
                std::to_string(out.numel()) + " elements of out " + text(out));
  backend(s).copy(s, out.data, in.data, out.nbytes());
}

//===--- bucketed collectives --------------------------------------------------===//

namespace {

enum class BucketKind { AllReduce, ReduceScatter, AllGather };

// The buckets' pack streams, reused: on cuda a Stream is a cudaStream_t,
// which a step must not create or destroy (one per bucketed collective
// would be two per ZeRO-3 step). A stream taken back may still have work
// queued; the next bucket's copies are ordered after it. Never destroyed:
// streams may outlive statics.
struct PackStreams {
  std::mutex mutex;
  std::vector<Stream> idle;
};
PackStreams &pack_streams() {
  static PackStreams *pool = new PackStreams;
  return *pool;
}
Stream take_pack_stream() {
  PackStreams &pool = pack_streams();
  std::lock_guard<std::mutex> lock(pool.mutex);
  if (pool.idle.empty()) return Stream(backend().kind());
  Stream s = pool.idle.back();
  pool.idle.pop_back();
  return s;
}
}  // namespace

void reserve_pack_streams(const ProgramInfo &info) {
  size_t buckets = 0;
  auto bucketed = [](const std::string &name) {
    static const std::string suffix = "_bucket";
    return name.size() > suffix.size() &&
           name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  for (const FunctionInfo &function : info.functions)
    for (const OpInfo &op : function.ops) buckets += bucketed(op.name);
  for (const OpInfo &op : info.ops) buckets += bucketed(op.name);
  PackStreams &pool = pack_streams();
  std::lock_guard<std::mutex> lock(pool.mutex);
  while (pool.idle.size() < 2 * buckets) {
    Stream s(backend().kind());
    // A timing mark recorded where the stream's device work is: the one
    // call that makes its device stream (cudaStream_t) now, not in a step.
    BackendInterface &b = backend(s);
    b.record_timing(s, b.timing_mark(), false);
    pool.idle.push_back(s);
  }
}

namespace {
void give_back_pack_stream(const Stream &s) {
  PackStreams &pool = pack_streams();
  std::lock_guard<std::mutex> lock(pool.mutex);
  pool.idle.push_back(s);
}

// The checked arguments of a bucketed collective, shared with the hooks that
// pack and unpack on the communication thread. sizes[i] is ins[i]'s element
// count (all_reduce) or the shard size s_i; offsets[i] is tensor i's first
// element in a packed chunk, `chunk` the chunk's size (the sum of sizes).
struct Bucket {
  std::vector<Tensor> ins, outs;
  std::vector<int64_t> sizes, offsets;
  int64_t chunk = 0;
  size_t esize = 1;
  uint8_t *staging = nullptr;
  // Packing and unpacking run on the communication thread, inside the
  // collective that the issuing stream waits for: on a stream of their own.
  Stream pack = take_pack_stream();
  // The stream that issued the collective. On a device backend nothing but
  // these orders the pack stream's copies with the rest: packing (`before`,
  // on the issuing thread) starts after the issuing stream's work so far,
  // which wrote the inputs, and the issuing stream's later work, the
  // collective itself, waits for it; unpacking (`after`, on the transport's
  // thread once the collective is done) is complete before the collective's
  // request is, which is what every reader of the outputs waits for (the
  // issuing stream, or another one through an Event). No-ops on the cpu,
  // whose copies are done when they return.
  Stream issuing;
  void start() { backend(pack).wait(pack, backend(issuing).record(issuing)); }
  void packed() { backend(issuing).wait(issuing, backend(pack).record(pack)); }
  void unpacked() { pack.synchronize(); }
  Bucket() = default;
  Bucket(const Bucket &) = delete;
  Bucket &operator=(const Bucket &) = delete;
  ~Bucket() { give_back_pack_stream(pack); }
  void copy(void *dst, const void *src, size_t bytes) { backend(pack).copy(pack, dst, src, bytes); }
};

bool overlap(const Tensor &a, const Tensor &b) {
  if (a.nbytes() == 0 || b.nbytes() == 0) return false;
  auto pa = reinterpret_cast<uintptr_t>(a.data), pb = reinterpret_cast<uintptr_t>(b.data);
  return pa < pb + b.nbytes() && pb < pa + a.nbytes();
}

std::string indexed(const char *name, int64_t i, const Tensor &t) {
  return std::string(name) + "[" + std::to_string(i) + "] " + text(t);
}

std::shared_ptr<Bucket> check_bucket(const char *op, BucketKind kind, const Tensor *ins,
                                     int64_t n_ins, const Tensor *outs, int64_t n_outs,
                                     const Tensor &staging, bool reduces, int ranks) {
  const std::string t = std::string("dsrt::") + op + ": ";
  if (n_ins < 0 || n_ins != n_outs)
    throw Error(t + std::to_string(n_ins) + " ins but " + std::to_string(n_outs) +
                " outs; every input needs one output");
  if (n_ins > 0 && (!ins || !outs)) throw Error(t + "ins or outs is a null array");
  if (staging.shape.rank != 1)
    throw Error(t + "staging " + text(staging) + " must be 1-D");
  if (staging.numel() > 0 && !staging.data)
    throw Error(t + "staging " + text(staging) + " has no memory");
  if (reduces && staging.dtype == DType::Bool)
    throw Error(t + "cannot reduce " + text(staging) + " (f32, f16, bf16, i64 and i32 can)");
  auto b = std::make_shared<Bucket>();
  b->esize = dtype_size(staging.dtype);
  b->staging = static_cast<uint8_t *>(staging.data);
  for (int64_t i = 0; i < n_ins; ++i) {
    const Tensor &in = ins[i], &out = outs[i];
    auto check = [&](const char *name, const Tensor &x) {
      if (x.dtype != staging.dtype)
        throw Error(t + indexed(name, i, x) + " and staging " + text(staging) +
                    " have different element types");
      if (x.numel() > 0 && !x.data) throw Error(t + indexed(name, i, x) + " has no memory");
      if (overlap(x, staging))
        throw Error(t + indexed(name, i, x) + " overlaps staging " + text(staging));
    };
    check("ins", in);
    check("outs", out);
    int64_t size = 0;
    switch (kind) {
    case BucketKind::AllReduce:
      if (in.numel() != out.numel())
        throw Error(t + indexed("ins", i, in) + " and " + indexed("outs", i, out) +
                    " differ in element count");
      size = in.numel();
      break;
    case BucketKind::ReduceScatter:
      if (in.numel() != static_cast<int64_t>(ranks) * out.numel())
        throw Error(t + indexed("ins", i, in) + " holds " + std::to_string(in.numel()) +
                    " elements but must hold " + std::to_string(ranks) + " ranks x " +
                    indexed("outs", i, out) + " = " +
                    std::to_string(static_cast<int64_t>(ranks) * out.numel()));
      size = out.numel();
      break;
    case BucketKind::AllGather:
      if (out.numel() != static_cast<int64_t>(ranks) * in.numel())
        throw Error(t + indexed("outs", i, out) + " holds " + std::to_string(out.numel()) +
                    " elements but must hold " + std::to_string(ranks) + " ranks x " +
                    indexed("ins", i, in) + " = " +
                    std::to_string(static_cast<int64_t>(ranks) * in.numel()));
      size = in.numel();
      break;
    }
    b->offsets.push_back(b->chunk);
    b->sizes.push_back(size);
    b->chunk += size;
    b->ins.push_back(in);
    b->outs.push_back(out);
  }
  const int64_t want = kind == BucketKind::AllReduce ? b->chunk : ranks * b->chunk;
  if (staging.numel() != want)
    throw Error(t + "staging " + text(staging) + " holds " + std::to_string(staging.numel()) +
                " elements but the " + std::to_string(n_ins) + " tensors need " +
                std::to_string(want) +
                (kind == BucketKind::AllReduce ? std::string(" (the sum of their element counts)")
                                               : " (" + std::to_string(ranks) +
                                                     " ranks x " + std::to_string(b->chunk) +
                                                     ", the sum of the shard sizes)"));
  // Unpacking writes every output: they must be disjoint.
  std::vector<std::pair<uintptr_t, int64_t>> spans;  // (address, index)
  for (int64_t i = 0; i < n_ins; ++i)
    if (outs[i].nbytes() > 0) spans.push_back({reinterpret_cast<uintptr_t>(outs[i].data), i});
  std::sort(spans.begin(), spans.end());
  for (size_t k = 1; k < spans.size(); ++k) {
    const Tensor &a = outs[spans[k - 1].second], &c = outs[spans[k].second];
    if (overlap(a, c))
      throw Error(t + indexed("outs", spans[k - 1].second, a) + " and " +
                  indexed("outs", spans[k].second, c) + " overlap");
  }
  return b;
}

}  // namespace

void all_reduce_bucket(Stream &s, const Tensor *ins, int64_t n_ins, const Tensor *outs,
                       int64_t n_outs, const Tensor &staging, ReduceOp op, int64_t axis) {
  std::shared_ptr<Grid> grid;
  Communicator &comm = axis_comm("all_reduce_bucket", axis, grid);
  std::shared_ptr<Bucket> b = check_bucket("all_reduce_bucket", BucketKind::AllReduce, ins,
                                           n_ins, outs, n_outs, staging, true, comm.size());
  b->issuing = s;
  CommHooks hooks;
  hooks.before = [b] {
    b->start();
    for (size_t i = 0; i < b->ins.size(); ++i)
      b->copy(b->staging + b->offsets[i] * b->esize, b->ins[i].data, b->ins[i].nbytes());
    b->packed();
  };
  hooks.after = [b] {
    for (size_t i = 0; i < b->outs.size(); ++i)
      b->copy(b->outs[i].data, b->staging + b->offsets[i] * b->esize, b->outs[i].nbytes());
    b->unpacked();
  };
  comm.all_reduce(s, staging, staging, op, hooks);
}

void reduce_scatter_bucket(Stream &s, const Tensor *ins, int64_t n_ins, const Tensor *outs,
                           int64_t n_outs, const Tensor &staging, ReduceOp op, int64_t axis) {
  std::shared_ptr<Grid> grid;
  Communicator &comm = axis_comm("reduce_scatter_bucket", axis, grid);
  const int ranks = comm.size(), rank = comm.rank();
  std::shared_ptr<Bucket> b = check_bucket("reduce_scatter_bucket", BucketKind::ReduceScatter,
                                           ins, n_ins, outs, n_outs, staging, true, ranks);
  b->issuing = s;
  CommHooks hooks;
  hooks.before = [b, ranks] {
    b->start();
    const size_t e = b->esize;
    for (int r = 0; r < ranks; ++r)
      for (size_t i = 0; i < b->ins.size(); ++i)
        b->copy(b->staging + (r * b->chunk + b->offsets[i]) * e,
                   static_cast<const uint8_t *>(b->ins[i].data) + r * b->sizes[i] * e,
                   b->sizes[i] * e);
    b->packed();
  };
  hooks.after = [b, rank] {
    for (size_t i = 0; i < b->outs.size(); ++i)
      b->copy(b->outs[i].data, b->staging + (rank * b->chunk + b->offsets[i]) * b->esize,
                 b->outs[i].nbytes());
    b->unpacked();
  };
  // In place: the ring chunks of ranks * chunk elements are the equal chunks,
  // and this rank's reduced chunk lands on its own chunk of staging.
  Tensor mine{b->staging + rank * b->chunk * b->esize, staging.dtype, Shape{b->chunk}};
  comm.reduce_scatter(s, staging, mine, op, hooks);
}

void all_gather_bucket(Stream &s, const Tensor *ins, int64_t n_ins, const Tensor *outs,
                       int64_t n_outs, const Tensor &staging, int64_t axis) {
  std::shared_ptr<Grid> grid;
  Communicator &comm = axis_comm("all_gather_bucket", axis, grid);
  const int ranks = comm.size(), rank = comm.rank();
  std::shared_ptr<Bucket> b = check_bucket("all_gather_bucket", BucketKind::AllGather, ins,
                                           n_ins, outs, n_outs, staging, false, ranks);
  b->issuing = s;
  CommHooks hooks;
  hooks.before = [b, rank] {
    b->start();
    for (size_t i = 0; i < b->ins.size(); ++i)
      b->copy(b->staging + (rank * b->chunk + b->offsets[i]) * b->esize, b->ins[i].data,
                 b->ins[i].nbytes());
    b->packed();
  };
  hooks.after = [b, ranks] {
    const size_t e = b->esize;
    for (int r = 0; r < ranks; ++r)
      for (size_t i = 0; i < b->outs.size(); ++i)
        b->copy(static_cast<uint8_t *>(b->outs[i].data) + r * b->sizes[i] * e,
                   b->staging + (r * b->chunk + b->offsets[i]) * e, b->sizes[i] * e);
    b->unpacked();
  };
  Tensor mine{b->staging + rank * b->chunk * b->esize, staging.dtype, Shape{b->chunk}};
  comm.all_gather(s, mine, staging, hooks);
}

//===--- point to point ----------------------------------------------------------===//

void send_recv(Stream &s, const Tensor *sends, const int64_t *send_peers, int64_t n_sends,
               const Tensor *recvs, const int64_t *recv_peers, int64_t n_recvs, int64_t axis) {
  std::shared_ptr<Grid> grid;
  Communicator &comm = axis_comm("send_recv", axis, grid);
  const std::string t = "dsrt::send_recv: ";
  const std::string axis_name = grid->names()[static_cast<size_t>(axis)];
  if (n_sends < 0 || n_recvs < 0)
    throw Error(t + std::to_string(n_sends) + " sends and " + std::to_string(n_recvs) +
                " receives: counts cannot be negative");
  if ((n_sends > 0 && (!sends || !send_peers)) || (n_recvs > 0 && (!recvs || !recv_peers)))
    throw Error(t + "a tensor or peer array is null");
  std::vector<P2POp> ops;
  auto add = [&](CommOp op, const Tensor &x, int64_t peer, int64_t i) {
    const char *kind = op == CommOp::Send ? "send" : "recv";
    const std::string what = std::string(kind) + "[" + std::to_string(i) + "] " + text(x) +
                             (op == CommOp::Send ? " to " : " from ") + axis_name + " " +
                             std::to_string(peer);
    if (peer < 0 || peer >= comm.size() || peer == comm.rank())
      throw Error(t + what + ": the peer must be another coordinate of axis " +
                  std::to_string(axis) + " (" + axis_name + ", size " +
                  std::to_string(comm.size()) + "); this rank is " + axis_name + " " +
                  std::to_string(comm.rank()));
    if (x.numel() > 0 && !x.data) throw Error(t + what + ": the tensor has no memory");
    ops.push_back(P2POp{op, x, static_cast<int>(peer)});
  };
  for (int64_t i = 0; i < n_sends; ++i) add(CommOp::Send, sends[i], send_peers[i], i);
  for (int64_t i = 0; i < n_recvs; ++i) add(CommOp::Recv, recvs[i], recv_peers[i], i);
  // A receive writes its buffer while the others are read or written.
  for (int64_t i = 0; i < n_recvs; ++i) {
    for (int64_t j = 0; j < n_sends; ++j)
      if (overlap(recvs[i], sends[j]))
        throw Error(t + "recv[" + std::to_string(i) + "] " + text(recvs[i]) + " from " +
                    axis_name + " " + std::to_string(recv_peers[i]) + " overlaps send[" +
                    std::to_string(j) + "] " + text(sends[j]));
    for (int64_t j = i + 1; j < n_recvs; ++j)
      if (overlap(recvs[i], recvs[j]))
        throw Error(t + "recv[" + std::to_string(i) + "] " + text(recvs[i]) + " and recv[" +
                    std::to_string(j) + "] " + text(recvs[j]) + " overlap");
  }
  comm.send_recv(s, ops);
}

//===--- overlapping collectives with compute --------------------------------===//

namespace {
// Orders `side` (p.comm or p.io) after the work issued on p.stream so far.
// On the cpu backend compute kernels have completed when they return, so
// this orders it only after asynchronous work pending on p.stream (a file
// read, a collective issued there); on cuda it is a stream wait.
Stream &after_compute(Program &p, Stream &side) {
  Event compute;
  compute.record(p.stream);
  compute.wait(side);
  return side;
}
}  // namespace

Stream &comm_stream(Program &p) {
  after_compute(p, p.comm);
  // The running op communicates: its trace entry is timed on p.comm.
  if (p.tracer) p.tracer->on_comm(p);
  return p.comm;
}

Stream &io_stream(Program &p) {
  after_compute(p, p.io);
  // The running op reads or writes the file space: its trace entry is
  // timed on p.io.
  if (p.tracer) p.tracer->on_io(p);
  return p.io;
}

namespace {
void mark_issued(Program &p, Stream &stream, const char *what, int64_t index) {
  if (index < 0)
    throw Error(std::string("dsrt::") + what + ": collective index " + std::to_string(index) +
                " is negative");
  if (static_cast<int64_t>(p.collectives.size()) <= index)
    p.collectives.resize(static_cast<size_t>(index) + 1);
  p.collectives[static_cast<size_t>(index)].record(stream);
}
}  // namespace

void collective_issued(Program &p, int64_t index) {
  mark_issued(p, p.comm, "collective_issued", index);
}

void io_issued(Program &p, int64_t index) { mark_issued(p, p.io, "io_issued", index); }

void collective_wait(Program &p, int64_t index) {
  if (index < 0 || index >= static_cast<int64_t>(p.collectives.size()) ||
      !p.collectives[static_cast<size_t>(index)].recorded())
    throw Error("dsrt::collective_wait: collective " + std::to_string(index) +
                " was not issued in this run (no collective_issued for it)");
  Event &event = p.collectives[static_cast<size_t>(index)];
  // No host wait either way: a collective already done needs no order
  // (its failure is thrown now), one in flight is waited for by p.stream.
  if (event.query())
    event.check();
  else
    event.wait(p.stream);
}

void collectives_done(Program &p) {
  detail::order_after(p.stream, p.comm);
  detail::order_after(p.stream, p.io);
}

//===--- the grid ---------------------------------------------------------------===//

int64_t grid_coordinate(const ProgramInfo &info, int rank, int64_t axis) {
  const int64_t axes = static_cast<int64_t>(info.grid_sizes.size());
  if (axis < 0 || axis >= axes)
    throw Error("dsrt::grid_coordinate: grid axis " + std::to_string(axis) +
                " does not exist (the grid has " + grid_text(info.grid_names, info.grid_sizes) +
                ")");
  if (rank < 0 || rank >= info.world)
    throw Error("dsrt::grid_coordinate: rank " + std::to_string(rank) + " is not one of the " +
                std::to_string(info.world) + " ranks of the grid");
  return (rank / stride_of(info.grid_sizes, axis)) % info.grid_sizes[static_cast<size_t>(axis)];
}

int64_t own_coordinate(const ProgramInfo &info, const std::string &name) {
  const int64_t axis = info.grid_axis(name);
  return axis < 0 ? 0 : grid_coordinate(info, Communicator::world().rank(), axis);
}

int grid_rank(const ProgramInfo &info, const std::vector<int64_t> &coordinates) {
  if (coordinates.size() != info.grid_sizes.size())
    throw Error("dsrt::grid_rank: " + std::to_string(coordinates.size()) +
                " coordinates for a grid of " + std::to_string(info.grid_sizes.size()) +
                " axes (" + grid_text(info.grid_names, info.grid_sizes) + ")");
  int64_t rank = 0;
  for (size_t a = 0; a < coordinates.size(); ++a) {
    if (coordinates[a] < 0 || coordinates[a] >= info.grid_sizes[a])
      throw Error("dsrt::grid_rank: coordinate " + std::to_string(coordinates[a]) + " of axis " +
                  info.grid_names[a] + " is outside 0.." +
                  std::to_string(info.grid_sizes[a] - 1));
    rank = rank * info.grid_sizes[a] + coordinates[a];
  }
  return static_cast<int>(rank);
}

Grid::Grid(std::vector<std::string> names, std::vector<int64_t> sizes, Communicator &world)
    : names_(std::move(names)), sizes_(std::move(sizes)), world_(world) {
  const std::string t = "dsrt::Grid: ";
  if (names_.size() != sizes_.size() || names_.empty())
    throw Error(t + std::to_string(names_.size()) + " axis names for " +
                std::to_string(sizes_.size()) + " sizes; a grid has at least one axis");
  std::set<std::string> seen;
  int64_t product = 1;
  for (size_t a = 0; a < names_.size(); ++a) {
    if (!known_axis(names_[a]) || !seen.insert(names_[a]).second)
      throw Error(t + "axes " + grid_text(names_, sizes_) +
                  ": the names must be distinct axes among pp, dp and tp");
    if (sizes_[a] < 1)
      throw Error(t + "axis " + names_[a] + " has size " + std::to_string(sizes_[a]));
    product *= sizes_[a];
  }
  if (product != world.size())
    throw Error(t + "axes " + grid_text(names_, sizes_) + " make " + std::to_string(product) +
                " ranks but the communicator has " + std::to_string(world.size()));
  const int rank = world.rank();
  for (int64_t a = 0; a < axis_count(); ++a) {
    if (sizes_[static_cast<size_t>(a)] == world.size()) {
      comms_.push_back(&world);  // the axis is the world, in the world's order
      continue;
    }
    // The axis' group: the ranks with this rank's other coordinates, which
    // share the rank less its term along the axis.
    const int64_t stride = stride_of(sizes_, a);
    const int64_t coordinate = (rank / stride) % sizes_[static_cast<size_t>(a)];
    const int color = static_cast<int>(rank - coordinate * stride);
    owned_.push_back(Communicator::split(world, color, static_cast<int>(coordinate)));
    comms_.push_back(owned_.back().get());
  }
  // What the heartbeat and the failure messages call this rank and others.
  health::set_layout(names_, sizes_, rank);
}

Grid::~Grid() = default;

int64_t Grid::axis(const std::string &name) const {
  for (size_t a = 0; a < names_.size(); ++a)
    if (names_[a] == name) return static_cast<int64_t>(a);
  return -1;
}

namespace {
void check_axis(const Grid &grid, const char *what, int64_t axis) {
  if (axis < 0 || axis >= grid.axis_count())
    throw Error(std::string("dsrt::Grid::") + what + ": grid axis " + std::to_string(axis) +
                " does not exist (the grid has " + grid.str() + ")");
}
}  // namespace

int64_t Grid::size(int64_t axis) const {
  check_axis(*this, "size", axis);
  return sizes_[static_cast<size_t>(axis)];
}

int64_t Grid::coordinate(int64_t axis) const {
  check_axis(*this, "coordinate", axis);
  return comms_[static_cast<size_t>(axis)]->rank();
}

Communicator &Grid::comm(int64_t axis) const {
  check_axis(*this, "comm", axis);
  return *comms_[static_cast<size_t>(axis)];
}

std::vector<Communicator *> Grid::communicators() const {
  std::vector<Communicator *> all{&world_};
  for (const auto &owned : owned_) all.push_back(owned.get());
  return all;
}

std::string Grid::str() const { return grid_text(names_, sizes_); }

namespace {
struct CurrentGrid {
  std::mutex mutex;
  std::shared_ptr<Grid> grid;
};
CurrentGrid &current() {
  // The worlds first, so that they outlive the grids held here (the MPI
  // world's destructor finalizes MPI).
  program_world();
  static CurrentGrid state;
  return state;
}
}  // namespace

Communicator &program_world() {
  // Never destroyed: an NCCL communicator is best left to the process' end
  // (its streams and the CUDA runtime go with it), and it must not outlive
  // the MPI world it was bootstrapped over.
  static Communicator *world = [] {
    Communicator &bootstrap = Communicator::world();
    std::unique_ptr<Transport> transport = backend().world_transport(bootstrap);
    return transport ? new Communicator(std::move(transport)) : &bootstrap;
  }();
  return *world;
}

std::shared_ptr<Grid> current_grid() {
  CurrentGrid &state = current();
  std::lock_guard<std::mutex> lock(state.mutex);
  if (!state.grid) {
    Communicator &world = program_world();
    state.grid = std::make_shared<Grid>(std::vector<std::string>{"dp"},
                                        std::vector<int64_t>{world.size()}, world);
  }
  return state.grid;
}

void set_current_grid(std::shared_ptr<Grid> grid) {
  CurrentGrid &state = current();
  std::lock_guard<std::mutex> lock(state.mutex);
  state.grid = std::move(grid);
}

void use_program_grid(const ProgramInfo &info) {
  std::vector<std::string> names = info.grid_names;
  std::vector<int64_t> sizes = info.grid_sizes;
  if (names.empty()) {
    names = {"dp"};
    sizes = {1};
  }
  {
    CurrentGrid &state = current();
    std::lock_guard<std::mutex> lock(state.mutex);
    if (state.grid && state.grid->names() == names && state.grid->sizes() == sizes) return;
  }
  set_current_grid(std::make_shared<Grid>(names, sizes, program_world()));
}

//===--- describe -------------------------------------------------------------===//

void set_grid(ProgramInfo &info, const char *axis_names, const int64_t *sizes,
              int64_t axis_count) {
  std::vector<std::string> names;
  std::string all = axis_names ? axis_names : "";
  for (size_t begin = 0;;) {
    size_t comma = all.find(',', begin);
    names.push_back(all.substr(begin, comma == std::string::npos ? std::string::npos
                                                                  : comma - begin));
    if (comma == std::string::npos) break;
    begin = comma + 1;
  }
  if (axis_count < 1 || static_cast<int64_t>(names.size()) != axis_count)
    throw Error("set_grid: axis names '" + all + "' name " + std::to_string(names.size()) +
                " axes but the grid has " + std::to_string(axis_count));
  std::set<std::string> seen;
  int64_t world = 1;
  for (int64_t i = 0; i < axis_count; ++i) {
    if (!known_axis(names[i]) || !seen.insert(names[i]).second)
      throw Error("set_grid: axis names '" + all + "' must be distinct axes among pp, dp and "
                  "tp");
    if (sizes[i] < 1)
      throw Error("set_grid: axis '" + names[i] + "' has size " + std::to_string(sizes[i]) +
                  "; sizes must be at least 1");
    world *= sizes[i];
  }
  info.grid_names = names;
  info.grid_sizes.assign(sizes, sizes + axis_count);
  info.world = world;
}

void set_param_shard(ProgramInfo &info, int64_t total_numel, Shape full_shape) {
  if (info.params.empty()) throw Error("set_param_shard: no parameter was added before it");
  ParamInfo &param = info.params.back();
  const std::string what = "set_param_shard: parameter '" + param.name + "'";
  if (total_numel < 1 || full_shape.numel() != total_numel)
    throw Error(what + ": total_numel " + std::to_string(total_numel) + " does not match " +
                full_shape.str());
  if (param.tp_split()) {
    const Shape piece = tp_piece_shape(param.tp_whole, param.tp_dim, param.tp_blocks,
                                       info.axis_size("tp"), param.tp_run);
    if (!(piece == full_shape))
      throw Error(what + ": full_shape " + full_shape.str() + " is not its tp piece " +
                  piece.str() + " of " + param.tp_whole.str());
  }
  const int64_t dp = info.dp_size();
  if (param.data.data) {
    // The data hold the model's tensor, of which a tp piece is sharded.
    const int64_t model_numel = param.tp_split() ? param.tp_whole.numel() : total_numel;
    if (param.data.numel() != model_numel ||
        (param.tp_split() && !(param.shape == full_shape)))
      throw Error(what + ": its data holds " + std::to_string(param.data.numel()) +
                  " elements, not the whole tensor " + full_shape.str());
    param.shape = Shape{(total_numel + dp - 1) / dp};
  }
  if (param.shape.rank != 1 || param.shape[0] * dp < total_numel)
    throw Error(what + ": its slot " + param.shape.str() + " is not a 1-D shard that " +
                std::to_string(dp) + " ranks can cover " + full_shape.str() + " with");
  param.shard_total = total_numel;
  param.full_shape = full_shape;
}

void set_param_tp_split(ProgramInfo &info, int64_t dim, int64_t blocks, Shape whole,
                        bool padded) {
  if (info.params.empty()) throw Error("set_param_tp_split: no parameter was added before it");
  ParamInfo &param = info.params.back();
  const std::string what = "set_param_tp_split: parameter '" + param.name + "'";
  const int64_t ranks = info.axis_size("tp");
  if (param.sharded())
    throw Error(what + ": call it before set_param_shard");
  if (ranks < 2)
    throw Error(what + ": the grid has no tp axis of 2 or more ranks (call set_grid first)");
  // A padded split (a vocabulary) is a plain one whose padding is real;
  // any other splits evenly.
  const bool axis_ok = dim >= 0 && dim < whole.rank;
  const int64_t run = padded && axis_ok ? tp_padded_piece(whole[dim], ranks) : 0;
  if (padded && (!axis_ok || blocks != 1 || run * ranks == whole[dim]))
    throw Error(what + ": axis " + std::to_string(dim) + " of " + whole.str() +
                " is not padded when split in " + std::to_string(blocks) + " block(s) over " +
                std::to_string(ranks) + " ranks");
  if (!padded && (!axis_ok || blocks < 1 || whole[dim] % (blocks * ranks) != 0))
    throw Error(what + ": axis " + std::to_string(dim) + " of " + whole.str() +
                " does not split into " + std::to_string(blocks) + " x " +
                std::to_string(ranks) + " equal pieces");
  const Shape piece = tp_piece_shape(whole, dim, blocks, ranks, run);
  if (param.data.data) {
    if (param.data.numel() != whole.numel())
      throw Error(what + ": its data holds " + std::to_string(param.data.numel()) +
                  " elements, not the whole tensor " + whole.str());
    param.shape = piece;
  }
  // A 1-D slot may be the dp shard of the piece (set_param_shard checks).
  if (!(param.shape == piece) && param.shape.rank != 1)
    throw Error(what + ": its slot " + param.shape.str() + " is not the piece " + piece.str() +
                " of " + whole.str() + " split along axis " + std::to_string(dim) + " over " +
                std::to_string(ranks) + " ranks");
  param.tp_dim = dim;
  param.tp_blocks = blocks;
  param.tp_run = run;
  param.tp_whole = whole;
}

}  // namespace dsrt

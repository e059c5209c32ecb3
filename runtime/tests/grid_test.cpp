// Multi-axis grids on the world communicator (1 to 4 ranks, or a world of
// one without MPI): the rank layout, split communicators, the kernels along
// one axis of a grid, and send_recv along a pipeline axis.
//
// Every test that builds grids builds every grid the job's size allows
// (every factorization of the world into the axes' sizes), so that each job
// size checks what it can; 4 ranks give the 2 x 2 grids. Every rank knows
// every rank's inputs (they are generated from the rank number) and checks
// its results against the ranks the layout says are in its group.
#include "dsrt/comm.h"
#include "dsrt/dist.h"
#include "dsrt/program.h"

#include "test_util.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace {

using dsrt::CommOp;
using dsrt::DType;
using dsrt::ReduceOp;
using dsrt::Shape;
using dsrt::Tensor;
using dsrt_test::Owned;

dsrt::Communicator &world() { return dsrt::Communicator::world(); }
int N() { return world().size(); }
int R() { return world().rank(); }

// Rank r's element i of test input `seed`: a small integer, so that every
// sum is exact whatever the order.
double value(int r, int64_t i, int seed) { return (r + 1) * 100 + i * 3 + seed; }

Owned input(DType d, int64_t n, int r, int seed) {
  std::vector<double> v;
  for (int64_t i = 0; i < n; ++i) v.push_back(value(r, i, seed));
  return Owned::of(d, Shape{n}, v);
}

void expect_elements(const Tensor &t, const std::vector<double> &want, const std::string &what) {
  ASSERT_EQ(t.numel(), static_cast<int64_t>(want.size())) << what;
  for (int64_t i = 0; i < t.numel(); ++i) {
    double got = dsrt::is_float(t.dtype) ? dsrt::load_float(t, i)
                                         : static_cast<double>(dsrt::load_int(t, i));
    EXPECT_EQ(got, want[static_cast<size_t>(i)]) << what << " element " << i << " on rank " << R();
  }
}

dsrt::ProgramInfo grid_info(const char *names, const std::vector<int64_t> &sizes) {
  dsrt::ProgramInfo info;
  dsrt::set_grid(info, names, sizes.data(), static_cast<int64_t>(sizes.size()));
  return info;
}

// Every way to write n as a product of `axes` sizes.
std::vector<std::vector<int64_t>> factorizations(int64_t n, int axes) {
  if (axes == 1) return {{n}};
  std::vector<std::vector<int64_t>> all;
  for (int64_t first = 1; first <= n; ++first)
    if (n % first == 0)
      for (std::vector<int64_t> rest : factorizations(n / first, axes - 1)) {
        rest.insert(rest.begin(), first);
        all.push_back(rest);
      }
  return all;
}

std::string text(const std::vector<int64_t> &sizes) {
  std::string s;
  for (int64_t v : sizes) s += (s.empty() ? "" : "x") + std::to_string(v);
  return s;
}

// The ranks whose coordinates other than `axis` are this rank's, in the
// order of their coordinate along `axis`.
std::vector<int> group_of(const dsrt::ProgramInfo &info, int rank, int64_t axis) {
  std::vector<int> group;
  std::vector<int64_t> at;
  for (size_t a = 0; a < info.grid_sizes.size(); ++a)
    at.push_back(dsrt::grid_coordinate(info, rank, static_cast<int64_t>(a)));
  for (int64_t c = 0; c < info.grid_sizes[static_cast<size_t>(axis)]; ++c) {
    at[static_cast<size_t>(axis)] = c;
    group.push_back(dsrt::grid_rank(info, at));
  }
  return group;
}

// Installs a grid for the kernels, and the default grid again at the end.
struct UseGrid {
  explicit UseGrid(std::shared_ptr<dsrt::Grid> grid) { dsrt::set_current_grid(std::move(grid)); }
  ~UseGrid() { dsrt::set_current_grid(nullptr); }
};

//===--- the layout ----------------------------------------------------------------===//

TEST(GridLayout, RanksAreRowMajorInTheNamedOrder) {
  // "pp,dp" {2, 3}: rank = pp * 3 + dp.
  dsrt::ProgramInfo info = grid_info("pp,dp", {2, 3});
  EXPECT_EQ(info.world, 6);
  EXPECT_EQ(info.dp_size(), 3);
  EXPECT_EQ(info.axis_size("pp"), 2);
  EXPECT_EQ(info.axis_size("tp"), 1);
  for (int r = 0; r < 6; ++r) {
    EXPECT_EQ(dsrt::grid_coordinate(info, r, 0), r / 3) << r;
    EXPECT_EQ(dsrt::grid_coordinate(info, r, 1), r % 3) << r;
    EXPECT_EQ(dsrt::grid_rank(info, {r / 3, r % 3}), r);
  }
  // The other order: "dp,pp" {3, 2}: rank = dp * 2 + pp.
  info = grid_info("dp,pp", {3, 2});
  EXPECT_EQ(info.dp_size(), 3);
  for (int r = 0; r < 6; ++r) {
    EXPECT_EQ(dsrt::grid_coordinate(info, r, 0), r / 2) << r;
    EXPECT_EQ(dsrt::grid_coordinate(info, r, 1), r % 2) << r;
  }
  // Three axes: the last varies fastest.
  info = grid_info("pp,dp,tp", {2, 3, 4});
  EXPECT_EQ(info.world, 24);
  for (int r = 0; r < 24; ++r) {
    int64_t pp = r / 12, dp = (r / 4) % 3, tp = r % 4;
    EXPECT_EQ(dsrt::grid_coordinate(info, r, 0), pp) << r;
    EXPECT_EQ(dsrt::grid_coordinate(info, r, 1), dp) << r;
    EXPECT_EQ(dsrt::grid_coordinate(info, r, 2), tp) << r;
    EXPECT_EQ(dsrt::grid_rank(info, {pp, dp, tp}), r);
  }
  // A grid without dp has dp size 1.
  EXPECT_EQ(grid_info("pp", {4}).dp_size(), 1);
  EXPECT_EQ(dsrt::ProgramInfo().dp_size(), 1);
}

TEST(GridLayout, Errors) {
  dsrt::ProgramInfo info;
  const int64_t sizes[2] = {2, 2};
  EXPECT_DSRT_ERROR(dsrt::set_grid(info, "pp,xp", sizes, 2), "set_grid",
                    "distinct axes among pp, dp and tp");
  EXPECT_DSRT_ERROR(dsrt::set_grid(info, "dp,dp", sizes, 2), "distinct axes");
  info = grid_info("pp,dp", {2, 2});
  EXPECT_DSRT_ERROR(dsrt::grid_coordinate(info, 0, 2), "grid_coordinate", "grid axis 2",
                    "pp=2, dp=2");
  EXPECT_DSRT_ERROR(dsrt::grid_coordinate(info, 4, 0), "grid_coordinate", "rank 4",
                    "4 ranks");
  EXPECT_DSRT_ERROR(dsrt::grid_rank(info, {1}), "grid_rank", "1 coordinates", "2 axes");
  EXPECT_DSRT_ERROR(dsrt::grid_rank(info, {0, 2}), "grid_rank", "coordinate 2 of axis dp",
                    "0..1");
  // A grid that is not the world's size fails on every rank alike, before
  // any communication.
  EXPECT_DSRT_ERROR(dsrt::Grid({"pp", "dp"}, {2, N()}, world()), "dsrt::Grid",
                    "pp=2", "the communicator has");
  EXPECT_DSRT_ERROR(dsrt::Grid({"dp", "ep"}, {N(), 1}, world()), "distinct axes");
}

//===--- split communicators -------------------------------------------------------===//

TEST(GridComm, SplitGroupsRanksByColorAndKey) {
  dsrt::Stream s;
  world().reset_counters();
  // Even and odd ranks, each group in reverse rank order.
  const int color = R() % 2;
  std::unique_ptr<dsrt::Communicator> sub = dsrt::Communicator::split(world(), color, -R());
  std::vector<int> group;
  for (int r = N() - 1; r >= 0; --r)
    if (r % 2 == color) group.push_back(r);
  ASSERT_EQ(sub->size(), static_cast<int>(group.size()));
  int index = -1;
  for (size_t i = 0; i < group.size(); ++i)
    if (group[i] == R()) index = static_cast<int>(i);
  EXPECT_EQ(sub->rank(), index);
  EXPECT_EQ(sub->uses_mpi(), world().uses_mpi());
  // The split itself is not counted.
  for (int op = 0; op < dsrt::kNumCommOps; ++op) {
    dsrt::CommCounters c = world().counters(static_cast<CommOp>(op));
    EXPECT_EQ(c.calls + c.bytes_sent + c.header_bytes_sent + c.header_bytes_received, 0)
        << dsrt::comm_op_name(static_cast<CommOp>(op));
  }

  // A reduction over the group sums its ranks only.
  Owned x = input(DType::F32, 5, R(), 1), y(DType::F32, Shape{5});
  sub->all_reduce(s, x, y).wait();
  std::vector<double> want(5, 0.0);
  for (int r : group)
    for (int64_t i = 0; i < 5; ++i) want[static_cast<size_t>(i)] += value(r, i, 1);
  expect_elements(y, want, "all_reduce over ranks of color " + std::to_string(color));
  dsrt::CommVolume v =
      dsrt::comm_volume(CommOp::AllReduce, DType::F32, 5, sub->size(), sub->rank());
  EXPECT_EQ(sub->counters(CommOp::AllReduce).calls, 1);
  EXPECT_EQ(sub->counters(CommOp::AllReduce).bytes_sent, v.sent);
  EXPECT_EQ(sub->counters(CommOp::AllReduce).bytes_received, v.received);
  EXPECT_EQ(world().counters(CommOp::AllReduce).calls, 0);

  // A gather in the group's order (its ranks' keys).
  Owned mine = input(DType::I64, 2, R(), 2), all(DType::I64, Shape{2 * sub->size()});
  sub->all_gather(s, mine, all).wait();
  want.clear();
  for (int r : group)
    for (int64_t i = 0; i < 2; ++i) want.push_back(value(r, i, 2));
  expect_elements(all, want, "all_gather in key order");

  // Splitting a split: one group, ranked as before.
  std::unique_ptr<dsrt::Communicator> again = dsrt::Communicator::split(*sub, 7, sub->rank());
  EXPECT_EQ(again->size(), sub->size());
  EXPECT_EQ(again->rank(), sub->rank());
  again->all_reduce(s, x, y).wait();
  expect_elements(y, [&] {
    std::vector<double> w(5, 0.0);
    for (int r : group)
      for (int64_t i = 0; i < 5; ++i) w[static_cast<size_t>(i)] += value(r, i, 1);
    return w;
  }(), "all_reduce over a split of a split");
}

TEST(GridComm, ASplitIsCheckedLikeEveryCollective) {
  if (N() < 2) GTEST_SKIP() << "needs 2 ranks";
  dsrt::Stream s;
  // Rank 0 splits while the others wait at a barrier: a verdict, not a hang.
  if (R() == 0)
    EXPECT_DSRT_ERROR(dsrt::Communicator::split(world(), 0, 0), "dsrt::Communicator::split",
                      "the ranks issued different operations", "rank 0: split", "barrier");
  else
    EXPECT_DSRT_ERROR(world().barrier(s).wait(), "dsrt::Communicator::barrier",
                      "the ranks issued different operations", "rank 0: split");
  // A negative color on the last rank fails the split on every rank.
  const int last = N() - 1;
  if (R() == last)
    EXPECT_DSRT_ERROR(dsrt::Communicator::split(world(), -1, 0), "color -1 is negative");
  else {
    const std::string who = "rank " + std::to_string(last);
    EXPECT_DSRT_ERROR(dsrt::Communicator::split(world(), 0, 0), "failed on another rank",
                      who.c_str(), "color -1 is negative");
  }
  // The world still works.
  Owned x = input(DType::F32, 3, R(), 3), y(DType::F32, Shape{3});
  world().all_reduce(s, x, y).wait();
  EXPECT_TRUE(world().failure().empty());
}

//===--- axis communicators ------------------------------------------------------===//

// For every grid of the job's size (two and three axes, in several orders):
// each axis' communicator holds the ranks that differ only in that axis,
// ranked by their coordinate, and a kernel along the axis reduces over them
// only.
TEST(GridComm, EachAxisReducesOverTheRanksThatDifferInItsCoordinateOnly) {
  struct Layout {
    const char *names;
    std::vector<std::string> list;
    int axes;
  } layouts[] = {{"pp,dp", {"pp", "dp"}, 2},
                 {"dp,pp", {"dp", "pp"}, 2},
                 {"pp,dp,tp", {"pp", "dp", "tp"}, 3}};
  dsrt::Stream s;
  for (const Layout &layout : layouts)
    for (const std::vector<int64_t> &sizes : factorizations(N(), layout.axes)) {
      const std::string what = std::string(layout.names) + " " + text(sizes);
      dsrt::ProgramInfo info = grid_info(layout.names, sizes);
      auto grid = std::make_shared<dsrt::Grid>(layout.list, sizes, world());
      UseGrid use(grid);
      EXPECT_EQ(grid->str().find(layout.list[0] + "=" + std::to_string(sizes[0])), 0u) << what;
      for (int64_t a = 0; a < layout.axes; ++a) {
        const std::string on = what + " axis " + std::to_string(a);
        dsrt::Communicator &comm = grid->comm(a);
        EXPECT_EQ(comm.size(), sizes[static_cast<size_t>(a)]) << on;
        EXPECT_EQ(grid->coordinate(a), dsrt::grid_coordinate(info, R(), a)) << on;
        EXPECT_EQ(comm.rank(), grid->coordinate(a)) << on;
        if (sizes[static_cast<size_t>(a)] == N()) EXPECT_EQ(&comm, &world()) << on;
        else EXPECT_NE(&comm, &world()) << on;

        const std::vector<int> group = group_of(info, R(), a);
        world().reset_counters();
        comm.reset_counters();
        Owned x = input(DType::F32, 4, R(), static_cast<int>(a)), y(DType::F32, Shape{4});
        dsrt::all_reduce(s, x, y, ReduceOp::Sum, a);
        s.synchronize();
        std::vector<double> want(4, 0.0);
        for (int r : group)
          for (int64_t i = 0; i < 4; ++i) want[static_cast<size_t>(i)] += value(r, i, a);
        expect_elements(y, want, "all_reduce along " + on);
        dsrt::CommVolume v = dsrt::comm_volume(CommOp::AllReduce, DType::F32, 4, comm.size(),
                                               comm.rank());
        EXPECT_EQ(comm.counters(CommOp::AllReduce).calls, 1) << on;
        EXPECT_EQ(comm.counters(CommOp::AllReduce).bytes_sent, v.sent) << on;
        if (&comm != &world()) EXPECT_EQ(world().counters(CommOp::AllReduce).calls, 0) << on;
      }
      const std::string missing = "grid axis " + std::to_string(layout.axes);
      EXPECT_DSRT_ERROR(dsrt::all_reduce(s, Owned(DType::F32, Shape{1}),
                                         Owned(DType::F32, Shape{1}), ReduceOp::Sum,
                                         layout.axes),
                        "all_reduce", missing.c_str(), "does not exist");
    }
}

TEST(GridComm, TheDefaultGridIsTheWorldAlongDp) {
  dsrt::set_current_grid(nullptr);  // whatever an earlier train_main installed
  std::shared_ptr<dsrt::Grid> grid = dsrt::current_grid();
  ASSERT_EQ(grid->axis_count(), 1);
  EXPECT_EQ(grid->names()[0], "dp");
  EXPECT_EQ(grid->size(0), N());
  EXPECT_EQ(&grid->comm(0), &world());
  // A program's one-axis dp grid is that grid: nothing is made again.
  dsrt::ProgramInfo info = grid_info("dp", {N()});
  dsrt::use_program_grid(info);
  EXPECT_EQ(dsrt::current_grid(), grid);
}

//===--- ZeRO kernels along dp of a pp x dp grid ---------------------------------===//

TEST(GridZero, ShardedKernelsAlongDpAreDpSized) {
  dsrt::Stream s;
  for (const std::vector<int64_t> &sizes : factorizations(N(), 2)) {
    const std::string what = "pp,dp " + text(sizes);
    dsrt::ProgramInfo info = grid_info("pp,dp", sizes);
    auto grid = std::make_shared<dsrt::Grid>(std::vector<std::string>{"pp", "dp"}, sizes,
                                             world());
    UseGrid use(grid);
    const int64_t axis = 1, d = sizes[1], dc = grid->coordinate(axis);
    dsrt::Communicator &comm = grid->comm(axis);
    const std::vector<int> group = group_of(info, R(), axis);
    ASSERT_EQ(static_cast<int64_t>(group.size()), d);
    auto sum_over_group = [&](int64_t n, int seed, int64_t begin) {
      std::vector<double> want(static_cast<size_t>(n), 0.0);
      for (int r : group)
        for (int64_t i = 0; i < n; ++i) want[static_cast<size_t>(i)] += value(r, begin + i, seed);
      return want;
    };

    // reduce_scatter: dp chunks of 3, this rank's is its dp coordinate's.
    world().reset_counters();
    comm.reset_counters();
    Owned in = input(DType::F32, d * 3, R(), 10), out(DType::F32, Shape{3});
    dsrt::reduce_scatter(s, in, out, ReduceOp::Sum, axis);
    s.synchronize();
    expect_elements(out, sum_over_group(3, 10, dc * 3), "reduce_scatter along dp of " + what);
    dsrt::CommVolume v =
        dsrt::comm_volume(CommOp::ReduceScatter, DType::F32, d * 3, int(d), int(dc));
    EXPECT_EQ(comm.counters(CommOp::ReduceScatter).calls, 1) << what;
    EXPECT_EQ(comm.counters(CommOp::ReduceScatter).bytes_sent, v.sent) << what;
    EXPECT_EQ(comm.counters(CommOp::ReduceScatter).bytes_received, v.received) << what;
    if (d != N()) {
      EXPECT_EQ(world().counters(CommOp::ReduceScatter).calls, 0) << what;
      // A world-sized shard layout is not this axis' layout.
      Owned world_sized(DType::F32, Shape{int64_t(N()) * 3});
      const std::string layout = std::to_string(d) + " ranks x out f32 [3]";
      EXPECT_DSRT_ERROR(dsrt::reduce_scatter(s, world_sized, out, ReduceOp::Sum, axis),
                        "reduce_scatter", layout.c_str());
    }

    // all_gather: the dp group's shards in dp order.
    Owned shard = input(DType::F32, 2, R(), 11), full(DType::F32, Shape{d * 2});
    dsrt::all_gather(s, shard, full, axis);
    s.synchronize();
    std::vector<double> want;
    for (int r : group)
      for (int64_t i = 0; i < 2; ++i) want.push_back(value(r, i, 11));
    expect_elements(full, want, "all_gather along dp of " + what);

    // all_slice: this rank's dp chunk, no communication.
    Owned whole = input(DType::F32, d * 2, R(), 12), part(DType::F32, Shape{2});
    dsrt::all_slice(s, whole, part, axis);
    expect_elements(part, {value(R(), dc * 2, 12), value(R(), dc * 2 + 1, 12)},
                    "all_slice along dp of " + what);

    // Buckets: a [d*2] and b [d*1] in one reduce-scatter over staging [d*3],
    // then the shards gathered back.
    Owned a = input(DType::F32, d * 2, R(), 13), b = input(DType::F32, d, R(), 14);
    Owned a_out(DType::F32, Shape{2}), b_out(DType::F32, Shape{1});
    Owned staging(DType::F32, Shape{d * 3});
    Tensor ins[2] = {a, b}, outs[2] = {a_out, b_out};
    comm.reset_counters();
    dsrt::reduce_scatter_bucket(s, ins, 2, outs, 2, staging, ReduceOp::Sum, axis);
    s.synchronize();
    expect_elements(a_out, sum_over_group(2, 13, dc * 2), "reduce_scatter_bucket a, " + what);
    expect_elements(b_out, sum_over_group(1, 14, dc), "reduce_scatter_bucket b, " + what);
    EXPECT_EQ(comm.counters(CommOp::ReduceScatter).calls, 1) << what;

    Owned a_full(DType::F32, Shape{d * 2}), b_full(DType::F32, Shape{d});
    Tensor shards[2] = {a_out, b_out}, fulls[2] = {a_full, b_full};
    dsrt::all_gather_bucket(s, shards, 2, fulls, 2, staging, axis);
    s.synchronize();
    std::vector<double> want_a, want_b;
    for (size_t c = 0; c < group.size(); ++c) {
      std::vector<double> part_a = sum_over_group(2, 13, int64_t(c) * 2);
      want_a.insert(want_a.end(), part_a.begin(), part_a.end());
      want_b.push_back(sum_over_group(1, 14, int64_t(c))[0]);
    }
    expect_elements(a_full, want_a, "all_gather_bucket a, " + what);
    expect_elements(b_full, want_b, "all_gather_bucket b, " + what);

    // all_reduce_bucket along dp.
    Owned c1 = input(DType::F32, 3, R(), 15), c2 = input(DType::F32, 2, R(), 16);
    Owned bucket(DType::F32, Shape{5});
    Tensor cs[2] = {c1, c2};
    dsrt::all_reduce_bucket(s, cs, 2, cs, 2, bucket, ReduceOp::Sum, axis);
    s.synchronize();
    expect_elements(c1, sum_over_group(3, 15, 0), "all_reduce_bucket, " + what);
    expect_elements(c2, sum_over_group(2, 16, 0), "all_reduce_bucket, " + what);
  }
}

//===--- send_recv along pp ----------------------------------------------------------===//

TEST(GridSendRecv, ARingAlongPpInBothDirections) {
  dsrt::Stream s;
  bool ran = false;
  for (const std::vector<int64_t> &sizes : factorizations(N(), 2)) {
    const int64_t p = sizes[0];
    if (p < 2) continue;
    ran = true;
    const std::string what = "pp,dp " + text(sizes);
    dsrt::ProgramInfo info = grid_info("pp,dp", sizes);
    auto grid = std::make_shared<dsrt::Grid>(std::vector<std::string>{"pp", "dp"}, sizes,
                                             world());
    UseGrid use(grid);
    const int64_t pp = grid->coordinate(0), dpc = grid->coordinate(1);
    const int64_t next = (pp + 1) % p, prev = (pp + p - 1) % p;
    dsrt::Communicator &comm = grid->comm(0);
    comm.reset_counters();
    world().reset_counters();
    // Activations forward, gradients backward, in one group.
    Owned act = input(DType::F32, 5, R(), 20), grad = input(DType::I64, 3, R(), 21);
    Owned act_in(DType::F32, Shape{5}), grad_in(DType::I64, Shape{3});
    Tensor sends[2] = {act, grad}, recvs[2] = {act_in, grad_in};
    int64_t send_peers[2] = {next, prev}, recv_peers[2] = {prev, next};
    dsrt::send_recv(s, sends, send_peers, 2, recvs, recv_peers, 2, 0);
    s.synchronize();
    const int from_prev = dsrt::grid_rank(info, {prev, dpc});
    const int from_next = dsrt::grid_rank(info, {next, dpc});
    std::vector<double> want_act, want_grad;
    for (int64_t i = 0; i < 5; ++i) want_act.push_back(value(from_prev, i, 20));
    for (int64_t i = 0; i < 3; ++i) want_grad.push_back(value(from_next, i, 21));
    expect_elements(act_in, want_act, "activation from the previous stage, " + what);
    expect_elements(grad_in, want_grad, "gradient from the next stage, " + what);
    const int64_t bytes = 5 * 4 + 3 * 8;
    EXPECT_EQ(comm.counters(CommOp::Send).calls, 2) << what;
    EXPECT_EQ(comm.counters(CommOp::Send).bytes_sent, bytes) << what;
    EXPECT_EQ(comm.counters(CommOp::Recv).calls, 2) << what;
    EXPECT_EQ(comm.counters(CommOp::Recv).bytes_received, bytes) << what;
    if (&comm != &world()) EXPECT_EQ(world().counters(CommOp::Send).calls, 0) << what;

    // Mismatches between stages 0 and 1 (size, then element type) fail both
    // ends with both shapes; the other stages issue nothing.
    Owned ten(DType::F32, Shape{10}), twelve(DType::F32, Shape{3, 4});
    Owned six_f(DType::F32, Shape{6}), six_i(DType::I32, Shape{2, 3});
    if (pp == 0) {
      int64_t peer = 1;
      Tensor t[1] = {ten};
      dsrt::send_recv(s, t, &peer, 1, nullptr, nullptr, 0, 0);
      EXPECT_DSRT_ERROR(s.synchronize(), "dsrt::Communicator::send",
                        "send of 10 x f32 to rank 1", "does not match rank 1's recv of 12 x f32",
                        "this rank's [10], rank 1's [3, 4]");
      Tensor f[1] = {six_f};
      dsrt::send_recv(s, f, &peer, 1, nullptr, nullptr, 0, 0);
      EXPECT_DSRT_ERROR(s.synchronize(), "send of 6 x f32 to rank 1",
                        "rank 1's recv of 6 x i32", "rank 1's [2, 3]");
    } else if (pp == 1) {
      int64_t peer = 0;
      Tensor t[1] = {twelve};
      dsrt::send_recv(s, nullptr, nullptr, 0, t, &peer, 1, 0);
      EXPECT_DSRT_ERROR(s.synchronize(), "dsrt::Communicator::recv",
                        "recv of 12 x f32 from rank 0", "does not match rank 0's send of 10 x f32",
                        "this rank's [3, 4], rank 0's [10]");
      Tensor i[1] = {six_i};
      dsrt::send_recv(s, nullptr, nullptr, 0, i, &peer, 1, 0);
      EXPECT_DSRT_ERROR(s.synchronize(), "recv of 6 x i32 from rank 0",
                        "rank 0's send of 6 x f32");
    }
    // The ring still works.
    dsrt::send_recv(s, sends, send_peers, 2, recvs, recv_peers, 2, 0);
    s.synchronize();
    expect_elements(act_in, want_act, "the ring after the mismatches, " + what);
    EXPECT_TRUE(comm.failure().empty()) << what;
  }
  if (!ran) GTEST_SKIP() << "needs 2 ranks for a pipeline axis";
}

TEST(GridSendRecv, BadArgumentsAreThrownWhenIssued) {
  // On the default grid: axis 0 is dp, as large as the world.
  dsrt::Stream s;
  Owned x(DType::F32, Shape{2, 3}), y(DType::F32, Shape{6});
  Tensor xs[1] = {x}, two[2] = {y, y};
  int64_t self = R(), outside = N(), negative = -1;
  const std::string to_self = "send[0] f32 [2, 3] to dp " + std::to_string(R());
  const std::string from_outside = "recv[0] f32 [2, 3] from dp " + std::to_string(N());
  EXPECT_DSRT_ERROR(dsrt::send_recv(s, xs, &self, 1, nullptr, nullptr, 0, 0), "dsrt::send_recv",
                    to_self.c_str(), "the peer must be another coordinate of axis 0 (dp, size");
  EXPECT_DSRT_ERROR(dsrt::send_recv(s, nullptr, nullptr, 0, xs, &outside, 1, 0),
                    from_outside.c_str());
  EXPECT_DSRT_ERROR(dsrt::send_recv(s, xs, &negative, 1, nullptr, nullptr, 0, 0),
                    "to dp -1");
  EXPECT_DSRT_ERROR(dsrt::send_recv(s, xs, &self, 1, nullptr, nullptr, 0, 1), "send_recv",
                    "grid axis 1 does not exist");
  EXPECT_DSRT_ERROR(dsrt::send_recv(s, xs, nullptr, 1, nullptr, nullptr, 0, 0), "null");
  if (N() >= 2) {
    int64_t other[2] = {(R() + 1) % N(), (R() + 1) % N()};
    EXPECT_DSRT_ERROR(dsrt::send_recv(s, nullptr, nullptr, 0, two, other, 2, 0),
                      "recv[0] f32 [6] and recv[1] f32 [6] overlap");
    EXPECT_DSRT_ERROR(dsrt::send_recv(s, xs, other, 1, xs, other, 1, 0),
                      "recv[0] f32 [2, 3] from dp", "overlaps send[0] f32 [2, 3]");
  }
  // Nothing was issued: the world still works.
  Owned a(DType::F32, Shape{1});
  dsrt::all_reduce(s, a, a, ReduceOp::Sum, 0);
  s.synchronize();
}

}  // namespace

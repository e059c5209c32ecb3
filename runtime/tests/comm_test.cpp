// Collectives on the world communicator, checked on every rank against a
// reference that each rank computes from every rank's inputs (which are
// generated from the rank number, so every rank knows them all).
//
// The reference combines values in the documented ring order, so results
// are compared bit for bit; float sums are also checked against a double
// sum, so that the reference itself is a sum. Byte counters are compared
// with the ring formulas exactly.
#include "comm_test.h"

#include "dsrt/comm.h"
#include "dsrt/file_io.h"
#include "dsrt/kernels.h"

#include "test_util.h"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <thread>
#include <vector>

namespace {

using dsrt::CommOp;
using dsrt::DType;
using dsrt::ReduceOp;
using dsrt::Shape;
using dsrt::Tensor;
using dsrt_test::Owned;
using Clock = std::chrono::steady_clock;

dsrt::Communicator &world() { return dsrt::Communicator::world(); }
int N() { return world().size(); }
int R() { return world().rank(); }

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}
void sleep_ms(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

const DType kReducible[] = {DType::F32, DType::F16, DType::BF16, DType::I64, DType::I32};
const ReduceOp kOps[] = {ReduceOp::Sum, ReduceOp::Mean, ReduceOp::Max};

uint64_t mix(uint64_t x) {  // splitmix64
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Rank `rank`'s input for a test `seed`: floats in [-1, 1) scaled by 2^-6..2^5
// (so that the summation order shows in the rounding), one NaN in larger
// inputs; integers over the whole range (so that sums wrap).
Owned make_input(DType d, int64_t n, int rank, uint64_t seed) {
  Owned o(d, Shape{n});
  for (int64_t i = 0; i < n; ++i) {
    uint64_t h = mix(mix(seed) ^ mix(static_cast<uint64_t>(rank) + 1000) ^
                     static_cast<uint64_t>(i));
    if (dsrt::is_float(d)) {
      double u = static_cast<double>(h >> 11) * 0x1.0p-53 * 2 - 1;
      float v = static_cast<float>(std::ldexp(u, static_cast<int>(h % 12) - 6));
      if (n > 100 && i == 17 && rank == 0)
        v = std::numeric_limits<float>::quiet_NaN();
      dsrt::store_float(o.t(), i, v);
    } else if (d == DType::Bool) {
      dsrt::store_int(o.t(), i, static_cast<int64_t>(h & 1));
    } else {
      dsrt::store_int(o.t(), i, static_cast<int64_t>(h));
    }
  }
  return o;
}

// The ring partition, written out again here.
int64_t chunk_begin(int64_t n, int ranks, int j) {
  return j * (n / ranks) + std::min<int64_t>(j, n % ranks);
}
int64_t chunk_size(int64_t n, int ranks, int j) {
  return n / ranks + (j < n % ranks ? 1 : 0);
}
int chunk_of(int64_t i, int64_t n, int ranks) {
  int j = 0;
  while (!(i < chunk_begin(n, ranks, j) + chunk_size(n, ranks, j)))
    ++j;
  return j;
}

float fmax_nan(float a, float b) {
  if (a != a)
    return a;
  if (b != b)
    return b;
  return a < b ? b : a;
}

// How the reference combines values: the documented ring order, or two
// wrong ones that the bitwise checks must be able to tell apart from it
// (the ranks in rank order; 16-bit partials kept in f32 from hop to hop).
enum class Order { Ring, RankOrder, F32Partials };

// Elements [begin, begin + count) of the reduction of every rank's input,
// combined in the documented order: element i of chunk j is the fold of
// ranks j+1, j+2, ..., j+N (mod N), left to right, in f32 for the float
// types and with wrap-around for the integers. The partial sums travel in
// the element type, as NCCL's do: every hop but the last rounds its f32
// sum to it before sending on (which changes 16-bit results from 3 ranks
// on); the chunk's owner divides an average and rounds once.
Owned reference(DType d, ReduceOp op, int64_t n, uint64_t seed, int64_t begin, int64_t count,
                Order order = Order::Ring) {
  const int ranks = N();
  std::vector<Owned> xs;
  for (int r = 0; r < ranks; ++r)
    xs.push_back(make_input(d, n, r, seed));
  Owned out(d, Shape{count});
  for (int64_t i = begin; i < begin + count; ++i) {
    // RankOrder folds ranks 0, 1, ..., N-1.
    int j = order == Order::RankOrder ? ranks - 1 : chunk_of(i, n, ranks);
    auto x = [&](int k) -> const Tensor & { return xs[(j + k) % ranks].t(); };
    if (dsrt::is_float(d)) {
      float acc = dsrt::load_float(x(1), i);
      for (int k = 2; k <= ranks; ++k) {
        float v = dsrt::load_float(x(k), i);
        acc = op == ReduceOp::Max ? fmax_nan(acc, v) : acc + v;
        if (order != Order::F32Partials && k < ranks) {  // sent on in the element type
          dsrt::store_float(out.t(), i - begin, acc);
          acc = dsrt::load_float(out.t(), i - begin);
        }
      }
      if (op == ReduceOp::Mean)
        acc = acc / static_cast<float>(ranks);
      dsrt::store_float(out.t(), i - begin, acc);
    } else if (d == DType::I64) {
      uint64_t acc = static_cast<uint64_t>(dsrt::load_int(x(1), i));
      for (int k = 2; k <= ranks; ++k) {
        uint64_t v = static_cast<uint64_t>(dsrt::load_int(x(k), i));
        acc = op == ReduceOp::Max
                  ? (static_cast<int64_t>(acc) < static_cast<int64_t>(v) ? v : acc)
                  : acc + v;
      }
      int64_t result = static_cast<int64_t>(acc);
      if (op == ReduceOp::Mean)
        result /= ranks;
      dsrt::store_int(out.t(), i - begin, result);
    } else {
      uint32_t acc = static_cast<uint32_t>(dsrt::load_int(x(1), i));
      for (int k = 2; k <= ranks; ++k) {
        uint32_t v = static_cast<uint32_t>(dsrt::load_int(x(k), i));
        acc = op == ReduceOp::Max
                  ? (static_cast<int32_t>(acc) < static_cast<int32_t>(v) ? v : acc)
                  : acc + v;
      }
      int32_t result = static_cast<int32_t>(acc);
      if (op == ReduceOp::Mean)
        result /= ranks;
      dsrt::store_int(out.t(), i - begin, result);
    }
  }
  return out;
}

// "" when the bytes agree, else the first element that differs.
std::string diff(const Owned &got, const Owned &want) {
  const Tensor &t = got.t();
  size_t es = dsrt::dtype_size(t.dtype);
  if (got.bytes().size() != want.bytes().size())
    return "sizes differ";
  for (int64_t i = 0; i < t.numel(); ++i)
    if (std::memcmp(got.bytes().data() + i * es, want.bytes().data() + i * es, es) != 0)
      return "element " + std::to_string(i) + " of " + std::to_string(t.numel()) + ": got " +
             std::to_string(got.at(i)) + ", want " + std::to_string(want.at(i));
  return "";
}

// Float sums against a double sum of the same inputs (not bit for bit).
void expect_close_to_double_sum(const Owned &got, ReduceOp op, int64_t n, uint64_t seed,
                                int64_t begin) {
  DType d = got.t().dtype;
  if (!dsrt::is_float(d) || op == ReduceOp::Max)
    return;
  std::vector<Owned> xs;
  for (int r = 0; r < N(); ++r)
    xs.push_back(make_input(d, n, r, seed));
  double eps = d == DType::F32 ? 1e-6 : d == DType::F16 ? 1e-3 : 8e-3;
  for (int64_t i = 0; i < got.t().numel(); ++i) {
    double sum = 0, mag = 0;
    for (auto &x : xs) {
      sum += dsrt::load_float(x.t(), begin + i);
      mag += std::fabs(dsrt::load_float(x.t(), begin + i));
    }
    if (op == ReduceOp::Mean) {
      sum /= N();
      mag /= N();
    }
    if (std::isnan(sum)) {
      EXPECT_TRUE(std::isnan(got.at(i))) << i;
      continue;
    }
    ASSERT_NEAR(got.at(i), sum, 4 * eps * mag + 1e-30) << "element " << begin + i;
  }
}

// The ring formulas of docs/runtime.md, written out again: per-rank payload
// bytes in terms of the chunk sizes c(j); partials travel in the element
// type, 16-bit floats too.
dsrt::CommVolume formula(CommOp op, DType d, int64_t n, int root = 0) {
  const int ranks = N(), r = R();
  const int64_t e = static_cast<int64_t>(dsrt::dtype_size(d));
  auto c = [&](int j) { return chunk_size(n, ranks, ((j % ranks) + ranks) % ranks); };
  dsrt::CommVolume v;
  if (ranks == 1)
    return v;
  switch (op) {
  case CommOp::AllReduce:
    v.sent = e * (n - c(r)) + e * (n - c(r + 1));
    v.received = e * (n - c(r - 1)) + e * (n - c(r));
    break;
  case CommOp::ReduceScatter:
    v.sent = e * (n - c(r));
    v.received = e * (n - c(r - 1));
    break;
  case CommOp::AllGather:
    v.sent = e * (n - c(r + 1));
    v.received = e * (n - c(r));
    break;
  case CommOp::Broadcast: {
    int pos = ((r - root) % ranks + ranks) % ranks;
    v.sent = pos == ranks - 1 ? 0 : n * e;
    v.received = pos == 0 ? 0 : n * e;
    break;
  }
  default: break;
  }
  return v;
}

void expect_counters(CommOp op, dsrt::CommVolume want, int64_t calls = 1) {
  dsrt::CommCounters c = world().counters(op);
  EXPECT_EQ(c.bytes_sent, want.sent) << dsrt::comm_op_name(op) << " bytes sent";
  EXPECT_EQ(c.bytes_received, want.received) << dsrt::comm_op_name(op) << " bytes received";
  EXPECT_EQ(c.calls, calls) << dsrt::comm_op_name(op) << " calls";
}

//===--- the world -----------------------------------------------------------===//

TEST(Comm, WorldMatchesTheLauncher) {
  const char *size = std::getenv("OMPI_COMM_WORLD_SIZE");
  const char *rank = std::getenv("OMPI_COMM_WORLD_RANK");
  EXPECT_EQ(N(), size ? std::atoi(size) : 1);
  EXPECT_EQ(R(), rank ? std::atoi(rank) : 0);
  EXPECT_EQ(world().uses_mpi(), size != nullptr);
  EXPECT_EQ(&world(), &dsrt::Communicator::world());
  if (const char *timeout = std::getenv("DSRT_COMM_TIMEOUT")) {
    EXPECT_EQ(world().options().timeout_s, std::atof(timeout));
  }
  EXPECT_TRUE(world().failure().empty());
}

TEST(Comm, PartitionAndVolumesFollowTheFormulas) {
  EXPECT_EQ(dsrt::ring_chunk(10, 3, 0).begin, 0);
  EXPECT_EQ(dsrt::ring_chunk(10, 3, 0).size, 4);
  EXPECT_EQ(dsrt::ring_chunk(10, 3, 1).begin, 4);
  EXPECT_EQ(dsrt::ring_chunk(10, 3, 2).begin, 7);
  EXPECT_EQ(dsrt::ring_chunk(10, 3, 2).size, 3);
  EXPECT_EQ(dsrt::ring_chunk(2, 3, 2).size, 0);
  EXPECT_DSRT_ERROR(dsrt::ring_chunk(10, 3, 3), "chunk 3");
  // The library's formulas agree with the ones written out here.
  for (DType d : {DType::F32, DType::F16, DType::BF16, DType::I64})
    for (int64_t n : {0, 1, 7, 960, 10001})
      for (CommOp op : {CommOp::AllReduce, CommOp::ReduceScatter, CommOp::AllGather,
                        CommOp::Broadcast}) {
        dsrt::CommVolume a = dsrt::comm_volume(op, d, n, N(), R(), 0), b = formula(op, d, n);
        EXPECT_EQ(a.sent, b.sent) << dsrt::comm_op_name(op) << " " << n;
        EXPECT_EQ(a.received, b.received) << dsrt::comm_op_name(op) << " " << n;
      }
}

//===--- collectives against the reference -------------------------------------===//

TEST(Comm, AllReduceMatchesTheReferenceBitForBit) {
  dsrt::Stream s;
  uint64_t seed = 100;
  for (DType d : kReducible)
    for (ReduceOp op : kOps)
      for (int64_t n : {0, 1, 2, 7, 960, 100003}) {
        SCOPED_TRACE(std::string(dsrt::dtype_name(d)) + " op " +
                     std::to_string(static_cast<int>(op)) + " n " + std::to_string(n));
        ++seed;
        Owned in = make_input(d, n, R(), seed);
        Owned out(d, Shape{n}, 0xAB);
        world().reset_counters();
        world().all_reduce(s, in, out, op).wait();
        Owned want = reference(d, op, n, seed, 0, n);
        EXPECT_EQ(diff(out, want), "");
        if (n < 1000)
          expect_close_to_double_sum(out, op, n, seed, 0);
        expect_counters(CommOp::AllReduce, formula(CommOp::AllReduce, d, n));
        // The textbook volume where the chunks are equal: 2(N-1)/N of the
        // tensor each way, for 16-bit floats too (NCCL's figure).
        if (n == 960) {
          int64_t S = n * static_cast<int64_t>(dsrt::dtype_size(d));
          int64_t textbook = 2 * (N() - 1) * S / N();
          EXPECT_EQ(world().counters(CommOp::AllReduce).bytes_sent, textbook);
          EXPECT_EQ(world().counters(CommOp::AllReduce).bytes_received, textbook);
        }
        dsrt::CommCounters c = world().counters(CommOp::AllReduce);
        EXPECT_EQ(c.header_bytes_sent, (N() - 1) * dsrt::kCommHeaderBytes);
        EXPECT_EQ(c.header_bytes_received, (N() - 1) * dsrt::kCommHeaderBytes);
      }
}

TEST(Comm, AllReduceInPlace) {
  dsrt::Stream s;
  for (DType d : {DType::F32, DType::BF16, DType::I32}) {
    Owned x = make_input(d, 1001, R(), 7);
    world().all_reduce(s, x, x, ReduceOp::Mean).wait();
    EXPECT_EQ(diff(x, reference(d, ReduceOp::Mean, 1001, 7, 0, 1001)), "") << dsrt::dtype_name(d);
  }
}

TEST(Comm, ReduceScatterGivesEachRankItsChunk) {
  dsrt::Stream s;
  uint64_t seed = 300;
  for (DType d : kReducible)
    for (ReduceOp op : kOps)
      for (int64_t n : {0, 1, 7, 960, 10001}) {
        SCOPED_TRACE(std::string(dsrt::dtype_name(d)) + " n " + std::to_string(n));
        ++seed;
        int64_t begin = chunk_begin(n, N(), R()), count = chunk_size(n, N(), R());
        Owned in = make_input(d, n, R(), seed);
        Owned out(d, Shape{count}, 0xCD);
        world().reset_counters();
        world().reduce_scatter(s, in, out, op).wait();
        EXPECT_EQ(diff(out, reference(d, op, n, seed, begin, count)), "");
        expect_counters(CommOp::ReduceScatter, formula(CommOp::ReduceScatter, d, n));
        if (n == 960 && dsrt::dtype_size(d) == 4) {  // textbook: (N-1)/N of the input
          EXPECT_EQ(world().counters(CommOp::ReduceScatter).bytes_sent, (N() - 1) * 3840 / N());
        }
      }
  // In place: out is this rank's chunk of in.
  Owned x = make_input(DType::F32, 10001, R(), 77);
  Tensor mine{static_cast<float *>(x.t().data) + chunk_begin(10001, N(), R()), DType::F32,
              Shape{chunk_size(10001, N(), R())}};
  world().reduce_scatter(s, x, mine, ReduceOp::Sum).wait();
  Owned want = reference(DType::F32, ReduceOp::Sum, 10001, 77, chunk_begin(10001, N(), R()),
                         chunk_size(10001, N(), R()));
  EXPECT_EQ(std::memcmp(mine.data, want.t().data, want.t().nbytes()), 0);
}

TEST(Comm, AllGatherCollectsUnevenChunks) {
  dsrt::Stream s;
  uint64_t seed = 500;
  for (DType d : {DType::F32, DType::F16, DType::I64, DType::Bool})
    for (int64_t n : {0, 1, 7, 960, 10001}) {
      SCOPED_TRACE(std::string(dsrt::dtype_name(d)) + " n " + std::to_string(n));
      ++seed;
      // Everyone's full input; rank r contributes its chunk of it.
      std::vector<Owned> full;
      for (int r = 0; r < N(); ++r)
        full.push_back(make_input(d, n, r, seed));
      Owned want(d, Shape{n});
      size_t es = dsrt::dtype_size(d);
      for (int r = 0; r < N(); ++r)
        std::memcpy(static_cast<char *>(want.t().data) + chunk_begin(n, N(), r) * es,
                    static_cast<char *>(full[r].t().data) + chunk_begin(n, N(), r) * es,
                    chunk_size(n, N(), r) * es);
      Owned in(d, Shape{chunk_size(n, N(), R())});
      if (in.t().nbytes())
        std::memcpy(in.t().data,
                    static_cast<char *>(full[R()].t().data) + chunk_begin(n, N(), R()) * es,
                    in.t().nbytes());
      Owned out(d, Shape{n}, 0xEE);
      world().reset_counters();
      world().all_gather(s, in, out).wait();
      EXPECT_EQ(diff(out, want), "");
      expect_counters(CommOp::AllGather, formula(CommOp::AllGather, d, n));
      if (n == 960) {  // textbook: (N-1)/N of the output
        EXPECT_EQ(world().counters(CommOp::AllGather).bytes_received,
                  (N() - 1) * 960 * static_cast<int64_t>(es) / N());
      }
      // In place: in is this rank's chunk of out.
      Owned io(d, Shape{n}, 0x11);
      Tensor slot{static_cast<char *>(io.t().data) + chunk_begin(n, N(), R()) * es, d,
                  Shape{chunk_size(n, N(), R())}};
      if (slot.nbytes())
        std::memcpy(slot.data, in.t().data, slot.nbytes());
      world().all_gather(s, slot, io).wait();
      EXPECT_EQ(diff(io, want), "") << "in place";
    }
}

TEST(Comm, BroadcastFromEveryRootInSlices) {
  dsrt::Stream s;
  dsrt::CommOptions saved = world().options();
  dsrt::CommOptions small = saved;
  small.broadcast_slice_bytes = 4096;  // many slices in flight along the chain
  world().set_options(small);
  for (int root = 0; root < N(); ++root)
    for (int64_t n : {0, 5, 75000}) {
      SCOPED_TRACE("root " + std::to_string(root) + " n " + std::to_string(n));
      Owned want = make_input(DType::F32, n, root, 900 + root);
      Owned buf = R() == root ? Owned(want) : Owned(DType::F32, Shape{n}, 0x77);
      world().reset_counters();
      world().broadcast(s, buf, root).wait();
      EXPECT_EQ(diff(buf, want), "");
      expect_counters(CommOp::Broadcast, formula(CommOp::Broadcast, DType::F32, n, root));
    }
  world().set_options(saved);
}

TEST(Comm, SendRecvAlongAPipelineAndAroundARing) {
  if (N() < 2)
    GTEST_SKIP() << "needs 2 ranks";
  dsrt::Stream s;
  const int64_t n = 3001;
  world().reset_counters();
  // A pipeline: rank 0 sends, each stage adds its rank and passes it on.
  Owned act = make_input(DType::F32, n, 0, 42);
  if (R() > 0) {
    world().recv(s, act, R() - 1).wait();
    for (int64_t i = 0; i < n; ++i)
      dsrt::store_float(act.t(), i, dsrt::load_float(act.t(), i) + static_cast<float>(R()));
  }
  if (R() < N() - 1)
    world().send(s, act, R() + 1).wait();
  Owned expected = make_input(DType::F32, n, 0, 42);
  for (int64_t i = 0; i < n; ++i) {
    float v = dsrt::load_float(expected.t(), i);
    for (int r = 1; r <= R(); ++r)
      v += static_cast<float>(r);
    dsrt::store_float(expected.t(), i, v);
  }
  EXPECT_EQ(diff(act, expected), "");
  int64_t bytes = n * 4;
  expect_counters(CommOp::Send, {R() < N() - 1 ? bytes : 0, 0}, R() < N() - 1 ? 1 : 0);
  expect_counters(CommOp::Recv, {0, R() > 0 ? bytes : 0}, R() > 0 ? 1 : 0);

  // A ring shift in one send_recv: everyone sends to the next rank and
  // receives from the previous one, which lone sends could not do.
  world().reset_counters();
  Owned mine = make_input(DType::I64, 100, R(), 43), got(DType::I64, Shape{100});
  world()
      .send_recv(s, {{CommOp::Send, mine, (R() + 1) % N()},
                     {CommOp::Recv, got, (R() + N() - 1) % N()}})
      .wait();
  EXPECT_EQ(diff(got, make_input(DType::I64, 100, (R() + N() - 1) % N(), 43)), "");
  expect_counters(CommOp::Send, {800, 0});
  expect_counters(CommOp::Recv, {0, 800});
  EXPECT_EQ(world().counters(CommOp::Send).header_bytes_sent, dsrt::kCommHeaderBytes);
}

TEST(Comm, ATransferOfAGroupCompletesWhenItsPeerIssuedItsMatch) {
  // GPipe's turn from forwards to backwards on two stages: rank 0's group
  // sends the last activation and receives the first gradient; rank 1
  // receives that activation alone, computes, and only then sends the
  // gradient. The send must not wait for the gradient's headers.
  if (N() < 2)
    GTEST_SKIP() << "needs 2 ranks";
  dsrt::Stream s;
  const int64_t n = 5000;  // above the eager limits of small messages
  Owned act = make_input(DType::F32, n, 0, 44), act_got(DType::F32, Shape{n});
  Owned grad = make_input(DType::F32, 7, 1, 45), grad_got(DType::F32, Shape{7});
  Owned second = make_input(DType::F32, 3, 0, 46), second_got(DType::F32, Shape{3});
  dsrt::CommOptions saved = world().options();
  dsrt::CommOptions quick = saved;
  quick.timeout_s = 5;
  world().set_options(quick);
  if (R() == 0) {
    // Two sends to rank 1 in one group go in order, each as soon as it can.
    world()
        .send_recv(s, {{CommOp::Send, act, 1}, {CommOp::Recv, grad_got, 1},
                       {CommOp::Send, second, 1}})
        .wait();
    EXPECT_EQ(diff(grad_got, grad), "");
  } else if (R() == 1) {
    world().send_recv(s, {{CommOp::Recv, act_got, 0}}).wait();
    EXPECT_EQ(diff(act_got, act), "");
    world().send_recv(s, {{CommOp::Send, grad, 0}, {CommOp::Recv, second_got, 0}}).wait();
    EXPECT_EQ(diff(second_got, second), "");
  }
  world().set_options(saved);
  world().barrier(s).wait();
}

TEST(Comm, BarrierWaitsForEveryRank) {
  dsrt::Stream s;
  world().barrier(s).wait();  // start together
  world().reset_counters();
  auto start = Clock::now();
  if (R() == 0)
    sleep_ms(300);
  world().barrier(s).wait();
  if (R() != 0) {
    EXPECT_GE(seconds_since(start), 0.2) << "the barrier did not wait for rank 0";
  }
  expect_counters(CommOp::Barrier, {0, 0});
  EXPECT_EQ(world().counters(CommOp::Barrier).header_bytes_sent,
            (N() - 1) * dsrt::kCommHeaderBytes);
}

//===--- asynchrony, streams, order ----------------------------------------------===//

TEST(Comm, IssuingDoesNotWaitForPeers) {
  if (N() < 2)
    GTEST_SKIP() << "needs 2 ranks";
  dsrt::Stream s;
  Owned in = make_input(DType::F32, 4096, R(), 11), out(DType::F32, Shape{4096});
  if (R() != 0)
    sleep_ms(500);  // rank 0's collective cannot complete before this
  auto start = Clock::now();
  dsrt::Request r = world().all_reduce(s, in, out);
  double issue_s = seconds_since(start);
  bool done_at_once = r.test();
  if (R() == 0) {
    EXPECT_LT(issue_s, 0.25) << "issuing blocked";
    EXPECT_FALSE(done_at_once) << "completed before the peers issued";
  }
  // The caller's compute proceeds meanwhile.
  Owned a = make_input(DType::F32, 128 * 128, R(), 12), c(DType::F32, Shape{128, 128});
  Tensor a2{a.t().data, DType::F32, Shape{128, 128}};
  dsrt::Stream compute(dsrt::Backend::Cpu, 1);
  dsrt::matmul(compute, a2, a2, c, false, false, {});
  r.wait();
  EXPECT_EQ(diff(out, reference(DType::F32, ReduceOp::Sum, 4096, 11, 0, 4096)), "");
}

TEST(Comm, ManySmallCollectivesBackToBackWhileComputing) {
  dsrt::Stream comm_stream, compute(dsrt::Backend::Cpu, 1);
  const int count = 200;
  struct Op {
    CommOp kind;
    DType dtype;
    ReduceOp reduce;
    int64_t n;
    uint64_t seed;
  };
  std::vector<Op> ops;
  for (int k = 0; k < count; ++k) {
    switch (k % 4) {
    case 0: ops.push_back({CommOp::AllReduce, DType::F32, ReduceOp::Sum, 64, 2000u + k}); break;
    case 1: ops.push_back({CommOp::AllReduce, DType::BF16, ReduceOp::Max, 33, 2000u + k}); break;
    case 2: ops.push_back({CommOp::AllGather, DType::I32, ReduceOp::Sum, 50, 2000u + k}); break;
    default:
      ops.push_back({CommOp::ReduceScatter, DType::F16, ReduceOp::Mean, 64, 2000u + k});
    }
  }
  std::vector<Owned> ins, outs;
  for (const Op &op : ops) {
    if (op.kind == CommOp::AllGather) {
      Owned full = make_input(op.dtype, op.n, R(), op.seed);
      Owned in(op.dtype, Shape{chunk_size(op.n, N(), R())});
      std::memcpy(in.t().data, static_cast<char *>(full.t().data) + chunk_begin(op.n, N(), R()) * 4,
                  in.t().nbytes());
      ins.push_back(in);
      outs.emplace_back(op.dtype, Shape{op.n});
    } else {
      ins.push_back(make_input(op.dtype, op.n, R(), op.seed));
      int64_t out_n = op.kind == CommOp::ReduceScatter ? chunk_size(op.n, N(), R()) : op.n;
      outs.emplace_back(op.dtype, Shape{out_n});
    }
  }
  world().reset_counters();
  std::vector<dsrt::Request> requests;
  auto start = Clock::now();
  for (size_t k = 0; k < ops.size(); ++k) {
    const Op &op = ops[k];
    if (op.kind == CommOp::AllReduce)
      requests.push_back(world().all_reduce(comm_stream, ins[k], outs[k], op.reduce));
    else if (op.kind == CommOp::AllGather)
      requests.push_back(world().all_gather(comm_stream, ins[k], outs[k]));
    else
      requests.push_back(world().reduce_scatter(comm_stream, ins[k], outs[k], op.reduce));
  }
  double issue_s = seconds_since(start);
  // Compute on another stream while the collectives run.
  Owned a = make_input(DType::F32, 96 * 96, R(), 13), c(DType::F32, Shape{96, 96});
  Tensor a2{a.t().data, DType::F32, Shape{96, 96}};
  for (int i = 0; i < 20; ++i)
    dsrt::matmul(compute, a2, a2, c, false, false, {});
  // They complete in issue order.
  for (size_t k = 0; k < requests.size(); ++k) {
    requests[k].wait();
    if (k > 0) {
      EXPECT_TRUE(requests[k - 1].test());
    }
  }
  comm_stream.synchronize();
  EXPECT_LT(issue_s, 1.0) << "issuing " << count << " collectives blocked";
  dsrt::CommVolume all_reduce{0, 0}, all_gather{0, 0}, reduce_scatter{0, 0};
  for (size_t k = 0; k < ops.size(); ++k) {
    const Op &op = ops[k];
    SCOPED_TRACE("collective " + std::to_string(k));
    Owned want = op.kind == CommOp::AllGather
                     ? Owned(op.dtype, Shape{op.n})
                     : reference(op.dtype, op.reduce, op.n, op.seed,
                                 op.kind == CommOp::ReduceScatter ? chunk_begin(op.n, N(), R()) : 0,
                                 outs[k].t().numel());
    if (op.kind == CommOp::AllGather)
      for (int r = 0; r < N(); ++r) {
        Owned full = make_input(op.dtype, op.n, r, op.seed);
        std::memcpy(static_cast<char *>(want.t().data) + chunk_begin(op.n, N(), r) * 4,
                    static_cast<char *>(full.t().data) + chunk_begin(op.n, N(), r) * 4,
                    chunk_size(op.n, N(), r) * 4);
      }
    EXPECT_EQ(diff(outs[k], want), "");
    dsrt::CommVolume v = formula(op.kind, op.dtype, op.n);
    dsrt::CommVolume &sum = op.kind == CommOp::AllReduce   ? all_reduce
                            : op.kind == CommOp::AllGather ? all_gather
                                                           : reduce_scatter;
    sum.sent += v.sent;
    sum.received += v.received;
  }
  expect_counters(CommOp::AllReduce, all_reduce, count / 2);
  expect_counters(CommOp::AllGather, all_gather, count / 4);
  expect_counters(CommOp::ReduceScatter, reduce_scatter, count / 4);
}

TEST(Comm, LaterWorkOnTheStreamWaitsForTheCollective) {
  dsrt::Stream s;
  const int64_t n = 2048;
  Owned in = make_input(DType::F32, n, R(), 21), out(DType::F32, Shape{n}, 0);
  Owned one = Owned::of(DType::F32, Shape{1}, {1.0});
  Owned y(DType::F32, Shape{n});
  if (R() != 0)
    sleep_ms(100);  // so that rank 0's collective is still running below
  world().all_reduce(s, in, out);
  // Same stream, no explicit wait: the kernel runs after the collective.
  dsrt::binary(s, dsrt::BinaryOp::Add, out, one, y);
  Owned want = reference(DType::F32, ReduceOp::Sum, n, 21, 0, n);
  for (int64_t i = 0; i < n; ++i)
    dsrt::store_float(want.t(), i, dsrt::load_float(want.t(), i) + 1.0f);
  EXPECT_EQ(diff(y, want), "");

  // Another stream, ordered by an event.
  dsrt::Stream comm_stream, compute;
  Owned out2(DType::F32, Shape{n}, 0), y2(DType::F32, Shape{n});
  if (R() != 0)
    sleep_ms(100);
  world().all_reduce(comm_stream, in, out2, ReduceOp::Max);
  dsrt::Event ready;
  ready.record(comm_stream);
  ready.wait(compute);
  dsrt::binary(compute, dsrt::BinaryOp::Add, out2, one, y2);
  Owned want2 = reference(DType::F32, ReduceOp::Max, n, 21, 0, n);
  for (int64_t i = 0; i < n; ++i)
    dsrt::store_float(want2.t(), i, dsrt::load_float(want2.t(), i) + 1.0f);
  EXPECT_EQ(diff(y2, want2), "");
  EXPECT_TRUE(ready.query());
}

TEST(Comm, ResultsAreDeterministicAndIdenticalOnEveryRank) {
  dsrt::Stream s;
  const int64_t n = 50000;
  Owned in = make_input(DType::F32, n, R(), 31);
  Owned first(DType::F32, Shape{n}), second(DType::F32, Shape{n});
  world().all_reduce(s, in, first).wait();
  world().all_reduce(s, in, second).wait();
  EXPECT_EQ(first.bytes(), second.bytes()) << "two runs differ";
  // Every rank's result hashes the same.
  uint64_t h = 1469598103934665603ull;
  for (unsigned char b : first.bytes())
    h = (h ^ b) * 1099511628211ull;
  Owned mine = Owned::of(DType::I64, Shape{1}, {0});
  *mine.t().as<int64_t>() = static_cast<int64_t>(h);
  Owned hashes(DType::I64, Shape{N()});
  world().all_gather(s, mine, hashes).wait();
  for (int r = 0; r < N(); ++r)
    EXPECT_EQ(hashes.t().as<int64_t>()[r], static_cast<int64_t>(h)) << "rank " << r << " differs";
}

TEST(Comm, TheBitwiseCheckCanFail) {
  // A one-ulp change is caught...
  Owned want = reference(DType::F32, ReduceOp::Sum, 1000, 41, 0, 1000);
  Owned got(want);
  uint32_t bits;
  std::memcpy(&bits, static_cast<char *>(got.t().data) + 4 * 500, 4);
  bits ^= 1;
  std::memcpy(static_cast<char *>(got.t().data) + 4 * 500, &bits, 4);
  EXPECT_NE(diff(got, want), "");
  // ...and on 3 or more ranks the order of the sum changes results, so the
  // bitwise comparison does check the documented order.
  if (N() >= 3) {
    Owned rank_order = reference(DType::F32, ReduceOp::Sum, 1000, 41, 0, 1000, Order::RankOrder);
    EXPECT_NE(diff(rank_order, want), "");
    // 16-bit partials kept in f32 from hop to hop (rounded once, at the
    // end) instead of sent in the element type change results too.
    for (DType d : {DType::F16, DType::BF16})
      for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Mean}) {
        Owned each_hop = reference(d, op, 1000, 41, 0, 1000);
        Owned f32_partials = reference(d, op, 1000, 41, 0, 1000, Order::F32Partials);
        EXPECT_NE(diff(f32_partials, each_hop), "") << dsrt::dtype_name(d);
      }
  } else {
    // On 2 ranks the one partial sent is an input: nothing rounds on the way.
    for (DType d : {DType::F16, DType::BF16})
      EXPECT_EQ(diff(reference(d, ReduceOp::Mean, 1000, 41, 0, 1000, Order::F32Partials),
                     reference(d, ReduceOp::Mean, 1000, 41, 0, 1000)),
                "")
          << dsrt::dtype_name(d);
  }
}

//===--- errors ----------------------------------------------------------------===//

// Runs `issue` and expects its request to fail on this rank, quickly (a
// header verdict, not a timeout), with every fragment in the message.
template <typename F>
void expect_fails_fast(F issue, std::vector<std::string> fragments) {
  auto start = Clock::now();
  dsrt::Request r = issue();
  std::string message;
  try {
    r.wait();
  } catch (const dsrt::Error &e) {
    message = e.what();
  }
  EXPECT_FALSE(message.empty()) << "no error";
  for (const std::string &f : fragments)
    EXPECT_NE(message.find(f), std::string::npos) << "\"" << message << "\" lacks \"" << f << "\"";
  EXPECT_LT(seconds_since(start), 5.0) << "took a timeout, not a verdict";
}

void expect_still_works() {
  dsrt::Stream s;
  Owned x = make_input(DType::F32, 10, R(), 5), y(DType::F32, Shape{10});
  world().all_reduce(s, x, y).wait();
  EXPECT_EQ(diff(y, reference(DType::F32, ReduceOp::Sum, 10, 5, 0, 10)), "");
  EXPECT_TRUE(world().failure().empty());
}

TEST(CommErrors, MismatchedSizesFailOnEveryRank) {
  if (N() < 2)
    GTEST_SKIP() << "needs 2 ranks";
  dsrt::Stream s;
  int64_t n = R() == 0 ? 10 : 11;
  Owned x(DType::F32, Shape{n}), y(DType::F32, Shape{n});
  expect_fails_fast([&] { return world().all_reduce(s, x, y); },
                    {"dsrt::Communicator::all_reduce", "the ranks issued different operations",
                     "rank 0: all_reduce(sum) of 10 x f32", "all_reduce(sum) of 11 x f32"});
  expect_still_works();
}

TEST(CommErrors, MismatchedTypesOperationsAndOrderFailOnEveryRank) {
  if (N() < 2)
    GTEST_SKIP() << "needs 2 ranks";
  dsrt::Stream s;
  // Element types.
  Owned h(DType::F16, Shape{6}), f(DType::F32, Shape{6}), f2(DType::F32, Shape{6});
  expect_fails_fast(
      [&] { return R() == 0 ? world().all_reduce(s, h, h) : world().all_reduce(s, f, f); },
      {"of 6 x f16", "of 6 x f32"});
  // Operations.
  Owned part(DType::F32, Shape{chunk_size(6, N(), R())});
  expect_fails_fast(
      [&] { return R() == 0 ? world().all_gather(s, part, f2) : world().all_reduce(s, f, f2); },
      {"all_gather of 6 x f32", "all_reduce(sum) of 6 x f32"});
  // Reduction operators and broadcast roots.
  expect_fails_fast(
      [&] { return world().all_reduce(s, f, f2, R() == 0 ? ReduceOp::Max : ReduceOp::Sum); },
      {"all_reduce(max)", "all_reduce(sum)"});
  expect_fails_fast([&] { return world().broadcast(s, f, R() == 0 ? 0 : 1); },
                    {"broadcast of 6 x f32 from rank 0", "from rank 1"});
  // Order: rank 0 issues broadcast then barrier, the others the reverse.
  dsrt::Request a = R() == 0 ? world().broadcast(s, f, 0) : world().barrier(s);
  dsrt::Request b = R() == 0 ? world().barrier(s) : world().broadcast(s, f, 0);
  EXPECT_DSRT_ERROR(a.wait(), "different operations", "broadcast", "barrier");
  EXPECT_DSRT_ERROR(b.wait(), "different operations", "broadcast", "barrier");
  expect_still_works();
}

TEST(CommErrors, OneRanksBadArgumentsFailEveryRank) {
  dsrt::Stream s;
  const int last = N() - 1;
  // A bool tensor cannot be reduced; only the last rank passes one.
  Owned b(DType::Bool, Shape{8}), f(DType::F32, Shape{8});
  if (R() == last)
    expect_fails_fast([&] { return world().all_reduce(s, b, b); },
                      {"dsrt::Communicator::all_reduce: cannot reduce bool tensors"});
  else
    expect_fails_fast([&] { return world().all_reduce(s, f, f); },
                      {"dsrt::Communicator::all_reduce: failed on another rank: rank " +
                           std::to_string(last) + ": cannot reduce bool tensors"});
  // Every rank passing bad arguments: each reports its own.
  Owned wrong(DType::F32, Shape{chunk_size(12, N(), R()) + 1}), out(DType::F32, Shape{12});
  expect_fails_fast([&] { return world().all_gather(s, wrong, out); },
                    {"all_gather: in f32[", "must hold rank " + std::to_string(R()) + "'s chunk"});
  Owned i32(DType::I32, Shape{12});
  expect_fails_fast([&] { return world().all_reduce(s, out, i32); },
                    {"different element types"});
  Tensor shifted{static_cast<float *>(out.t().data) + 1, DType::F32, Shape{11}};
  Tensor head{out.t().data, DType::F32, Shape{11}};
  expect_fails_fast([&] { return world().all_reduce(s, head, shifted); },
                    {"overlap without being the same tensor"});
  Owned scattered(DType::F32, Shape{100});
  expect_fails_fast([&] { return world().reduce_scatter(s, out, scattered); },
                    {"reduce_scatter: out f32[100] must hold"});
  expect_fails_fast([&] { return world().broadcast(s, out, N()); },
                    {"root " + std::to_string(N()) + " is not a rank"});
  Tensor nothing{nullptr, DType::F32, Shape{4}};
  expect_fails_fast([&] { return world().all_reduce(s, nothing, nothing); }, {"has no memory"});
  // A peer that does not exist is refused when issued.
  EXPECT_DSRT_ERROR(world().send(s, out, N()), "dsrt::Communicator::send", "peer",
                    "is not another rank");
  EXPECT_DSRT_ERROR(world().recv(s, out, R()), "dsrt::Communicator::recv",
                    "is not another rank");
  EXPECT_DSRT_ERROR(world().send_recv(s, {{CommOp::Barrier, out, 0}}), "must be Send or Recv");
  // A product is a kernel's reduction, never silently a collective's sum.
  EXPECT_DSRT_ERROR(world().all_reduce(s, out, out, dsrt::ReduceOp::Prod),
                    "Communicator::all_reduce", "sum, average or max");
  EXPECT_DSRT_ERROR(world().reduce_scatter(s, out, out, dsrt::ReduceOp::Prod),
                    "Communicator::reduce_scatter", "sum, average or max");
  expect_still_works();
}

TEST(CommErrors, MismatchedSendAndRecvFailOnBothEnds) {
  if (N() < 2)
    GTEST_SKIP() << "needs 2 ranks";
  dsrt::Stream s;
  Owned ten(DType::F32, Shape{10}), twelve(DType::F32, Shape{12});
  if (R() == 0)
    expect_fails_fast([&] { return world().send(s, ten, 1); },
                      {"dsrt::Communicator::send", "send of 10 x f32 to rank 1",
                       "does not match rank 1's recv of 12 x f32"});
  else if (R() == 1)
    expect_fails_fast([&] { return world().recv(s, twelve, 0); },
                      {"dsrt::Communicator::recv", "recv of 12 x f32 from rank 0",
                       "does not match rank 0's send of 10 x f32"});
  // The pair still works afterwards.
  Owned x = make_input(DType::F32, 10, 0, 8);
  if (R() == 0)
    world().send(s, x, 1).wait();
  else if (R() == 1) {
    world().recv(s, ten, 0).wait();
    EXPECT_EQ(diff(ten, x), "");
  }
  expect_still_works();
}

TEST(CommErrors, AFailedOperationEarlierOnTheStreamFailsEveryRank) {
  dsrt::Stream s;
  std::vector<char> buf(4096);
  std::string path;
  dsrt::FileStore store;
  if (R() == 0) {
    // A read that fails (the file shrank), enqueued before the collective.
    path = "/tmp/dsrt_comm_test_" + std::to_string(::getpid());
    store = dsrt::FileStore::create(path, 4096);
    ASSERT_EQ(::truncate(path.c_str(), 0), 0);
    store.read_async(s, 0, buf.data(), 4096);
  }
  Owned x(DType::F32, Shape{4});
  if (R() == 0)
    expect_fails_fast([&] { return world().all_reduce(s, x, x); },
                      {"all_reduce: not run: an earlier operation on its stream failed",
                       "short read"});
  else
    expect_fails_fast([&] { return world().all_reduce(s, x, x); },
                      {"failed on another rank: rank 0: not run: an earlier operation"});
  if (R() == 0) {
    EXPECT_DSRT_ERROR(s.synchronize(), "short read");
    store = dsrt::FileStore();
    ::unlink(path.c_str());
  }
  expect_still_works();
}

// Leaves the communicator failed, so it runs only in a job of its own
// (--dead-peer). The last rank stops taking part; the others time out with
// a message naming it, and later operations fail at once.
TEST(CommFailure, ASilentPeerTimesOutOnEveryLiveRank) {
  if (!dsrt_test::dead_peer_enabled)
    GTEST_SKIP() << "runs with --dead-peer, in a job of its own";
  if (N() < 2)
    GTEST_SKIP() << "needs 2 ranks";
  dsrt::Stream s;
  dsrt::CommOptions o = world().options();
  o.timeout_s = 1;
  world().set_options(o);
  const int last = N() - 1;
  if (R() == last) {
    sleep_ms(3000);  // gone quiet while the others wait
    return;
  }
  Owned x(DType::F32, Shape{1000});
  auto start = Clock::now();
  dsrt::Request r = world().all_reduce(s, x, x);
  std::string message;
  try {
    r.wait();
  } catch (const dsrt::Error &e) {
    message = e.what();
  }
  double waited = seconds_since(start);
  EXPECT_NE(message.find("all_reduce (collective #0 on rank " + std::to_string(R())),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("timed out: no progress for 1 s waiting for rank " +
                         std::to_string(last) + " (receive of the header"),
            std::string::npos)
      << message;
  // The peer is named as the job knows it, from its heartbeat.
  EXPECT_NE(message.find("it is world rank " + std::to_string(last)), std::string::npos)
      << message;
  EXPECT_GE(waited, 0.9);
  EXPECT_LT(waited, 10.0);
  EXPECT_NE(world().failure().find("timed out"), std::string::npos);
  auto again = Clock::now();
  EXPECT_DSRT_ERROR(world().barrier(s).wait(), "barrier: not run: the communicator failed earlier",
                    "timed out");
  EXPECT_LT(seconds_since(again), 0.5);
}

}  // namespace

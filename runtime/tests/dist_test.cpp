// Data-parallel programs on the world communicator (1, 2 or 3 ranks): the
// kernels generated code calls, sharded parameter loading, and train_main
// driving a small ZeRO-style program written the way dsopt generates one.
//
// Every rank computes the expected values from every rank's inputs, which
// are generated from the rank number. Values are small integers (or sums of
// quarters) so that every result is exact in f32 whatever the summation
// order. Files are written by each rank into a directory of its own.
#include "dsrt/comm.h"
#include "dsrt/dist.h"
#include "dsrt/npy.h"
#include "dsrt/program.h"

#include "async.h"  // detail::Worker: work on a stream that the test holds back
#include "json.h"
#include "runner.h"
#include "test_util.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace {

namespace fs = std::filesystem;
using dsrt::CommOp;
using dsrt::DType;
using dsrt::ReduceOp;
using dsrt::Shape;
using dsrt::Tensor;
using dsrt_test::Owned;

dsrt::Communicator &world() { return dsrt::Communicator::world(); }
int N() { return world().size(); }
int R() { return world().rank(); }

// Rank r's element i of a test's input: a small integer.
double value(int r, int64_t i, int seed) {
  return static_cast<double>(((r + 1) * 7 + i * 3 + seed * 5) % 11) - 5;
}

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

//===--- the kernels ----------------------------------------------------------===//

TEST(DistKernels, AllReduceSumMeanMaxInPlaceAndOutOfPlace) {
  dsrt::Stream s;
  const int64_t n = 37;
  for (DType d : {DType::F32, DType::I64}) {
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Mean, ReduceOp::Max}) {
      if (d == DType::I64 && op == ReduceOp::Mean) continue;
      std::vector<double> want(n);
      for (int64_t i = 0; i < n; ++i) {
        double acc = op == ReduceOp::Max ? -1e9 : 0;
        for (int r = 0; r < N(); ++r)
          acc = op == ReduceOp::Max ? std::max(acc, value(r, i, 1)) : acc + value(r, i, 1);
        // The average rounds once in f32, as the communicator does.
        want[i] = op == ReduceOp::Mean ? static_cast<float>(acc) / static_cast<float>(N()) : acc;
      }
      const std::string what = std::string(dsrt::dtype_name(d)) + " op " +
                               std::to_string(static_cast<int>(op));
      Owned in = input(d, n, R(), 1), out(d, Shape{n});
      dsrt::all_reduce(s, in, out, op, 0);
      s.synchronize();
      expect_elements(out, want, what + " out of place");
      expect_elements(in, [&] {
        std::vector<double> mine;
        for (int64_t i = 0; i < n; ++i) mine.push_back(value(R(), i, 1));
        return mine;
      }(), what + " input kept");
      dsrt::all_reduce(s, in, in, op, 0);
      s.synchronize();
      expect_elements(in, want, what + " in place");
    }
  }
}

TEST(DistKernels, AllGatherInPlaceAndOutOfPlace) {
  dsrt::Stream s;
  const int64_t m = 5;  // elements per rank
  for (DType d : {DType::F32, DType::I64, DType::Bool}) {
    std::vector<double> want;
    for (int r = 0; r < N(); ++r)
      for (int64_t i = 0; i < m; ++i)
        want.push_back(d == DType::Bool ? value(r, i, 2) != 0 : value(r, i, 2));
    Owned mine(d, Shape{m});
    for (int64_t i = 0; i < m; ++i) {
      if (dsrt::is_float(d)) dsrt::store_float(mine.t(), i, static_cast<float>(value(R(), i, 2)));
      else dsrt::store_int(mine.t(), i, static_cast<int64_t>(value(R(), i, 2)));
    }
    Owned out(d, Shape{N(), m});  // any shape with size * m elements
    dsrt::all_gather(s, mine, out, 0);
    s.synchronize();
    expect_elements(Tensor{out.t().data, d, Shape{N() * m}}, want,
                    std::string("out of place ") + dsrt::dtype_name(d));

    // In place: this rank's chunk of out is the input.
    Owned whole(d, Shape{N() * m}, 0xAB);
    size_t elem = dsrt::dtype_size(d);
    uint8_t *chunk = static_cast<uint8_t *>(whole.t().data) + R() * m * elem;
    std::memcpy(chunk, mine.t().data, m * elem);
    dsrt::all_gather(s, Tensor{chunk, d, Shape{m}}, whole, 0);
    s.synchronize();
    expect_elements(whole, want, std::string("in place ") + dsrt::dtype_name(d));
  }
}

TEST(DistKernels, ReduceScatterInPlaceAndOutOfPlace) {
  dsrt::Stream s;
  const int64_t m = 4;
  for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Mean, ReduceOp::Max}) {
    std::vector<double> want;
    for (int64_t i = R() * m; i < (R() + 1) * m; ++i) {
      double acc = op == ReduceOp::Max ? -1e9 : 0;
      for (int r = 0; r < N(); ++r)
        acc = op == ReduceOp::Max ? std::max(acc, value(r, i, 3)) : acc + value(r, i, 3);
      want.push_back(op == ReduceOp::Mean ? static_cast<float>(acc) / static_cast<float>(N())
                                          : acc);
    }
    Owned in = input(DType::F32, N() * m, R(), 3), out(DType::F32, Shape{m});
    dsrt::reduce_scatter(s, in, out, op, 0);
    s.synchronize();
    expect_elements(out, want, "out of place");
    float *chunk = static_cast<float *>(in.t().data) + R() * m;
    dsrt::reduce_scatter(s, in, Tensor{chunk, DType::F32, Shape{m}}, op, 0);
    s.synchronize();
    expect_elements(Tensor{chunk, DType::F32, Shape{m}}, want, "in place");
  }
}

TEST(DistKernels, CountsTheRingVolumes) {
  dsrt::Stream s;
  const int64_t m = 6;
  world().reset_counters();
  Owned a = input(DType::F32, N() * m, R(), 4), b(DType::F32, Shape{m}), c(DType::F32, Shape{N() * m});
  dsrt::all_reduce(s, a, a, ReduceOp::Sum, 0);
  dsrt::reduce_scatter(s, a, b, ReduceOp::Sum, 0);
  dsrt::all_gather(s, b, c, 0);
  s.synchronize();
  for (CommOp op : {CommOp::AllReduce, CommOp::ReduceScatter, CommOp::AllGather}) {
    dsrt::CommVolume v = dsrt::comm_volume(op, DType::F32, N() * m, N(), R());
    dsrt::CommCounters got = world().counters(op);
    EXPECT_EQ(got.calls, 1) << dsrt::comm_op_name(op);
    EXPECT_EQ(got.bytes_sent, v.sent) << dsrt::comm_op_name(op);
    EXPECT_EQ(got.bytes_received, v.received) << dsrt::comm_op_name(op);
  }
}

TEST(DistKernels, AllSliceTakesThisRanksChunkWithoutCommunicating) {
  dsrt::Stream s;
  const int64_t m = 3;
  world().reset_counters();
  Owned in = input(DType::I64, N() * m, 0, 5), out(DType::I64, Shape{m});
  dsrt::all_slice(s, in, out, 0);
  std::vector<double> want;
  for (int64_t i = R() * m; i < (R() + 1) * m; ++i) want.push_back(value(0, i, 5));
  expect_elements(out, want, "all_slice");
  // In place: out is the chunk itself.
  int64_t *chunk = static_cast<int64_t *>(in.t().data) + R() * m;
  dsrt::all_slice(s, in, Tensor{chunk, DType::I64, Shape{m}}, 0);
  expect_elements(Tensor{chunk, DType::I64, Shape{m}}, want, "all_slice in place");
  for (int op = 0; op < dsrt::kNumCommOps; ++op)
    EXPECT_EQ(world().counters(static_cast<CommOp>(op)).calls, 0);
}

TEST(DistKernels, FlatPadFlattensThenZeroes) {
  dsrt::Stream s;
  Owned in = Owned::of(DType::F32, Shape{2, 3}, {1, 2, 3, 4, 5, 6});
  Owned out(DType::F32, Shape{8}, 0xFF);
  dsrt::flat_pad(s, in, out);
  expect_elements(out, {1, 2, 3, 4, 5, 6, 0, 0}, "flat_pad f32");
  Owned same(DType::F32, Shape{6}, 0xFF);
  dsrt::flat_pad(s, in, same);
  expect_elements(same, {1, 2, 3, 4, 5, 6}, "flat_pad without padding");
  Owned bf = Owned::of(DType::BF16, Shape{3}, {1.5, -2, 3});
  Owned bf_out(DType::BF16, Shape{5}, 0x7F);
  dsrt::flat_pad(s, bf, bf_out);
  expect_elements(bf_out, {1.5, -2, 3, 0, 0}, "flat_pad bf16");
}

TEST(DistKernels, CopyPrefixUndoesFlatPad) {
  dsrt::Stream s;
  Owned padded = Owned::of(DType::F32, Shape{8}, {1, 2, 3, 4, 5, 6, 0, 0});
  Owned out(DType::F32, Shape{2, 3}, 0xFF);
  dsrt::copy_prefix(s, padded, out);
  expect_elements(out, {1, 2, 3, 4, 5, 6}, "copy_prefix");
  // A view of the front: nothing moves.
  dsrt::copy_prefix(s, padded, Tensor{padded.t().data, DType::F32, Shape{3, 2}});
  expect_elements(padded, {1, 2, 3, 4, 5, 6, 0, 0}, "copy_prefix in place");
  Owned big(DType::F32, Shape{3, 3}), i64(DType::I64, Shape{2});
  EXPECT_DSRT_ERROR(dsrt::copy_prefix(s, padded, big), "copy_prefix", "in f32 [8]",
                    "at least the 9 elements", "out f32 [3, 3]");
  EXPECT_DSRT_ERROR(dsrt::copy_prefix(s, out, i64), "copy_prefix", "different element types");
  EXPECT_DSRT_ERROR(dsrt::copy_prefix(s, out, Tensor{padded.t().data, DType::F32, Shape{2}}),
                    "copy_prefix", "1-D");
}

TEST(DistKernels, SizeTypeAndAxisErrors) {
  dsrt::Stream s;
  const int n = N();
  Owned a(DType::F32, Shape{4}), b(DType::F32, Shape{5}), i(DType::I64, Shape{4});
  Owned big(DType::F32, Shape{4 * n + 1}), flat(DType::F32, Shape{4 * n});
  EXPECT_DSRT_ERROR(dsrt::all_reduce(s, a, b, ReduceOp::Sum, 0), "all_reduce", "f32 [4]",
                    "f32 [5]", "element count");
  EXPECT_DSRT_ERROR(dsrt::all_reduce(s, a, i, ReduceOp::Sum, 0), "all_reduce",
                    "different element types");
  EXPECT_DSRT_ERROR(dsrt::all_reduce(s, a, a, ReduceOp::Sum, 1), "all_reduce", "grid axis 1");
  EXPECT_DSRT_ERROR(dsrt::all_gather(s, a, big, 0), "all_gather", "out f32 [",
                    " ranks x in f32 [4]");
  EXPECT_DSRT_ERROR(dsrt::reduce_scatter(s, big, a, ReduceOp::Sum, 0), "reduce_scatter",
                    "in f32 [", " ranks x out f32 [4]");
  EXPECT_DSRT_ERROR(dsrt::reduce_scatter(s, flat, a, ReduceOp::Sum, -1), "grid axis -1");
  EXPECT_DSRT_ERROR(dsrt::all_slice(s, big, a, 0), "all_slice", "ranks x out f32 [4]");
  EXPECT_DSRT_ERROR(dsrt::all_slice(s, flat, i, 0), "all_slice", "different element types");
  Owned bools(DType::Bool, Shape{4 * n}), bool_out(DType::Bool, Shape{4});
  EXPECT_DSRT_ERROR(dsrt::reduce_scatter(s, bools, bool_out, ReduceOp::Sum, 0),
                    "reduce_scatter", "cannot reduce bool");
  EXPECT_DSRT_ERROR(dsrt::flat_pad(s, b, a), "flat_pad", "out f32 [4]", "in f32 [5]");
  Owned matrix(DType::F32, Shape{2, 4});
  EXPECT_DSRT_ERROR(dsrt::flat_pad(s, a, matrix), "flat_pad", "1-D");
  // Nothing was issued: the communicator still works on every rank.
  dsrt::all_reduce(s, a, a, ReduceOp::Sum, 0);
  s.synchronize();
}

//===--- bucketed collectives -------------------------------------------------===//
// Inputs are multiples of 1/997, so that f32 sums round and their order
// matters: the bucket's results are compared bit for bit with the per-tensor
// collectives where the ring adds in the same order, and with the ring's
// order written out where it does not.

float noisy(int r, int64_t i, int t) {
  uint32_t h = static_cast<uint32_t>(r * 7919 + i * 104729 + t * 1299709 + 17);
  h ^= h >> 13;
  h *= 0x5bd1e995u;
  h ^= h >> 15;
  return static_cast<float>(static_cast<int>(h % 20001) - 10000) / 997.0f;
}

// Tensor t of rank r: n elements of `noisy` (integers and bools: small values).
Owned bucket_input(DType d, int64_t n, int r, int t) {
  std::vector<double> v;
  for (int64_t i = 0; i < n; ++i) {
    float x = noisy(r, i, t);
    v.push_back(dsrt::is_float(d) ? x : d == DType::Bool ? (std::fmod(std::fabs(x), 2.0) > 1)
                                                          : std::round(x));
  }
  return Owned::of(d, Shape{n}, v);
}

std::string bits(const Tensor &a, const Tensor &b) {
  if (a.dtype != b.dtype || a.numel() != b.numel()) return "different shapes";
  const size_t e = dsrt::dtype_size(a.dtype);
  for (int64_t i = 0; i < a.numel(); ++i)
    if (std::memcmp(static_cast<const uint8_t *>(a.data) + i * e,
                    static_cast<const uint8_t *>(b.data) + i * e, e) != 0) {
      double x = dsrt::is_float(a.dtype) ? dsrt::load_float(a, i) : dsrt::load_int(a, i);
      double y = dsrt::is_float(b.dtype) ? dsrt::load_float(b, i) : dsrt::load_int(b, i);
      return "element " + std::to_string(i) + ": " + std::to_string(x) + " vs " +
             std::to_string(y) + " on rank " + std::to_string(R());
    }
  return "";
}

// What the ring computes for an element of its chunk j: the partial starts
// at rank j+1 and travels around the ring in the element type `d`, each hop
// adding in f32 and rounding before it sends on, ending at rank j, which
// rounds once.
float ring_order(const std::vector<float> &per_rank, int j, ReduceOp op, DType d) {
  const int n = static_cast<int>(per_rank.size());
  Owned wire(d, Shape{1});
  float acc = per_rank[(j + 1) % n];
  for (int k = 2; k <= n; ++k) {
    float x = per_rank[(j + k) % n];
    acc = op == ReduceOp::Max ? std::max(acc, x) : acc + x;
    if (k < n) {
      dsrt::store_float(wire.t(), 0, acc);
      acc = dsrt::load_float(wire.t(), 0);
    }
  }
  return op == ReduceOp::Mean ? acc / static_cast<float>(n) : acc;
}

int ring_chunk_of(int64_t total, int64_t position) {
  for (int j = 0;; ++j) {
    dsrt::Chunk c = dsrt::ring_chunk(total, N(), j);
    if (position < c.begin + c.size) return j;
  }
}

std::vector<Tensor> tensors(const std::vector<Owned> &owned) {
  std::vector<Tensor> t;
  for (const Owned &o : owned) t.push_back(o.t());
  return t;
}

void expect_one_call(CommOp op, DType d, int64_t total) {
  dsrt::CommVolume v = dsrt::comm_volume(op, d, total, N(), R());
  dsrt::CommCounters got = world().counters(op);
  EXPECT_EQ(got.calls, 1) << dsrt::comm_op_name(op);
  EXPECT_EQ(got.bytes_sent, v.sent) << dsrt::comm_op_name(op);
  EXPECT_EQ(got.bytes_received, v.received) << dsrt::comm_op_name(op);
  for (int other = 0; other < dsrt::kNumCommOps; ++other)
    if (static_cast<CommOp>(other) != op) {
      EXPECT_EQ(world().counters(static_cast<CommOp>(other)).calls, 0);
    }
}

TEST(DistBuckets, AllReduceBucketMatchesThePerTensorResults) {
  dsrt::Stream s;
  const std::vector<int64_t> sizes = {5, 1, 0, 17, 3 * N() + 1};
  int64_t total = 0;
  for (int64_t n : sizes) total += n;
  struct Case {
    DType d;
    ReduceOp op;
  } cases[] = {{DType::F32, ReduceOp::Sum}, {DType::F32, ReduceOp::Mean},
               {DType::F32, ReduceOp::Max}, {DType::BF16, ReduceOp::Sum},
               {DType::I64, ReduceOp::Sum}, {DType::I32, ReduceOp::Max}};
  for (const Case &c : cases) {
    for (bool in_place : {false, true}) {
      SCOPED_TRACE(std::string(dsrt::dtype_name(c.d)) + " op " +
                   std::to_string(static_cast<int>(c.op)) + (in_place ? " in place" : ""));
      std::vector<Owned> ins, outs, per_tensor;
      // Collectives are issued while the vectors fill: no reallocation.
      ins.reserve(8), outs.reserve(8), per_tensor.reserve(8);
      for (size_t t = 0; t < sizes.size(); ++t) {
        ins.push_back(bucket_input(c.d, sizes[t], R(), static_cast<int>(t)));
        outs.emplace_back(c.d, Shape{sizes[t]}, 0xAB);
        per_tensor.emplace_back(c.d, Shape{sizes[t]});
        dsrt::all_reduce(s, ins.back(), per_tensor.back(), c.op, 0);
      }
      s.synchronize();
      std::vector<Tensor> in_views = tensors(ins);
      std::vector<Tensor> out_views = in_place ? in_views : tensors(outs);
      Owned staging(c.d, Shape{total}, 0xCD);
      world().reset_counters();
      dsrt::all_reduce_bucket(s, in_views.data(), static_cast<int64_t>(in_views.size()),
                              out_views.data(), static_cast<int64_t>(out_views.size()), staging,
                              c.op, 0);
      s.synchronize();
      expect_one_call(CommOp::AllReduce, c.d, total);
      // The sums of floats follow the ring chunks of the whole bucket, not of
      // each tensor: the same order on one or two ranks (a + b == b + a),
      // another on three.
      const bool same_order = !dsrt::is_float(c.d) || c.op == ReduceOp::Max || N() <= 2;
      int64_t at = 0;
      for (size_t t = 0; t < sizes.size(); ++t) {
        SCOPED_TRACE("tensor " + std::to_string(t));
        const Tensor &got = out_views[t];
        if (same_order) {
          EXPECT_EQ(bits(got, per_tensor[t]), "");
        } else {
          Owned want(c.d, Shape{sizes[t]}), want_alone(c.d, Shape{sizes[t]});
          for (int64_t i = 0; i < sizes[t]; ++i) {
            std::vector<float> x;
            for (int r = 0; r < N(); ++r)
              x.push_back(static_cast<float>(
                  bucket_input(c.d, sizes[t], r, static_cast<int>(t)).at(i)));
            dsrt::store_float(want.t(), i,
                              ring_order(x, ring_chunk_of(total, at + i), c.op, c.d));
            dsrt::store_float(want_alone.t(), i,
                              ring_order(x, ring_chunk_of(sizes[t], i), c.op, c.d));
            // Another order rounds otherwise: an f32 sum in its last bits,
            // a 16-bit one at each of its N - 1 roundings.
            float magnitude = 1;
            for (float v : x) magnitude += std::fabs(v);
            EXPECT_NEAR(dsrt::load_float(got, i), per_tensor[t].at(i),
                        c.d == DType::BF16 ? 0x1p-8 * (N() - 1) * magnitude
                                           : 1e-5 * (1 + std::fabs(per_tensor[t].at(i))));
          }
          EXPECT_EQ(bits(got, want), "");
          // The written-out order is the communicator's: it also gives the
          // per-tensor results.
          EXPECT_EQ(bits(per_tensor[t], want_alone), "");
        }
        at += sizes[t];
      }
    }
  }
}

TEST(DistBuckets, ReduceScatterBucketMatchesThePerTensorResultsBitForBit) {
  // Staging's chunk r holds exactly rank r's shards, so every element is
  // reduced in the same ring order as by reduce_scatter on its own tensor.
  dsrt::Stream s;
  const std::vector<int64_t> shards = {3, 1, 0, 5, 2};
  int64_t chunk = 0;
  for (int64_t n : shards) chunk += n;
  struct Case {
    DType d;
    ReduceOp op;
  } cases[] = {{DType::F32, ReduceOp::Sum}, {DType::F32, ReduceOp::Mean},
               {DType::F32, ReduceOp::Max}, {DType::BF16, ReduceOp::Sum},
               {DType::I32, ReduceOp::Sum}};
  for (const Case &c : cases) {
    for (bool in_place : {false, true}) {
      SCOPED_TRACE(std::string(dsrt::dtype_name(c.d)) + " op " +
                   std::to_string(static_cast<int>(c.op)) + (in_place ? " in place" : ""));
      const size_t e = dsrt::dtype_size(c.d);
      std::vector<Owned> ins, outs, per_tensor;
      // Collectives are issued while the vectors fill: no reallocation.
      ins.reserve(8), outs.reserve(8), per_tensor.reserve(8);
      for (size_t t = 0; t < shards.size(); ++t) {
        ins.push_back(bucket_input(c.d, N() * shards[t], R(), 10 + static_cast<int>(t)));
        outs.emplace_back(c.d, Shape{shards[t]}, 0xAB);
        per_tensor.emplace_back(c.d, Shape{shards[t]});
        dsrt::reduce_scatter(s, ins.back(), per_tensor.back(), c.op, 0);
      }
      s.synchronize();
      std::vector<Tensor> in_views = tensors(ins), out_views = tensors(outs);
      if (in_place)  // outs[i] is this rank's chunk of ins[i]
        for (size_t t = 0; t < shards.size(); ++t)
          out_views[t] = Tensor{static_cast<uint8_t *>(in_views[t].data) + R() * shards[t] * e,
                                c.d, Shape{shards[t]}};
      Owned staging(c.d, Shape{N() * chunk}, 0xCD);
      world().reset_counters();
      dsrt::reduce_scatter_bucket(s, in_views.data(), static_cast<int64_t>(in_views.size()),
                                  out_views.data(), static_cast<int64_t>(out_views.size()),
                                  staging, c.op, 0);
      s.synchronize();
      expect_one_call(CommOp::ReduceScatter, c.d, N() * chunk);
      for (size_t t = 0; t < shards.size(); ++t)
        EXPECT_EQ(bits(out_views[t], per_tensor[t]), "") << "tensor " << t;
    }
  }
}

TEST(DistBuckets, AllGatherBucketMatchesThePerTensorResults) {
  dsrt::Stream s;
  const std::vector<int64_t> shards = {2, 0, 7, 1};
  int64_t chunk = 0;
  for (int64_t n : shards) chunk += n;
  for (DType d : {DType::F32, DType::BF16, DType::I64, DType::Bool}) {
    for (bool in_place : {false, true}) {
      SCOPED_TRACE(std::string(dsrt::dtype_name(d)) + (in_place ? " in place" : ""));
      const size_t e = dsrt::dtype_size(d);
      std::vector<Owned> ins, outs, per_tensor;
      // Collectives are issued while the vectors fill: no reallocation.
      ins.reserve(8), outs.reserve(8), per_tensor.reserve(8);
      for (size_t t = 0; t < shards.size(); ++t) {
        ins.push_back(bucket_input(d, shards[t], R(), 20 + static_cast<int>(t)));
        outs.emplace_back(d, Shape{N() * shards[t]}, 0xAB);
        per_tensor.emplace_back(d, Shape{N() * shards[t]});
        dsrt::all_gather(s, ins.back(), per_tensor.back(), 0);
      }
      s.synchronize();
      std::vector<Tensor> in_views = tensors(ins), out_views = tensors(outs);
      if (in_place)  // ins[i] is this rank's chunk of outs[i]
        for (size_t t = 0; t < shards.size(); ++t) {
          uint8_t *mine = static_cast<uint8_t *>(out_views[t].data) + R() * shards[t] * e;
          if (shards[t]) std::memcpy(mine, ins[t].t().data, shards[t] * e);
          in_views[t] = Tensor{mine, d, Shape{shards[t]}};
        }
      Owned staging(d, Shape{N() * chunk}, 0xCD);
      world().reset_counters();
      dsrt::all_gather_bucket(s, in_views.data(), static_cast<int64_t>(in_views.size()),
                              out_views.data(), static_cast<int64_t>(out_views.size()), staging,
                              0);
      s.synchronize();
      expect_one_call(CommOp::AllGather, d, N() * chunk);
      for (size_t t = 0; t < shards.size(); ++t)
        EXPECT_EQ(bits(out_views[t], per_tensor[t]), "") << "tensor " << t;
    }
  }
}

TEST(DistBuckets, ArgumentErrorsAreThrownWhenIssued) {
  dsrt::Stream s;
  const int n = N();
  Owned a(DType::F32, Shape{4}), b(DType::F32, Shape{3}), i64(DType::I64, Shape{4});
  Owned staging(DType::F32, Shape{7}), matrix(DType::F32, Shape{7, 1});
  Tensor ins[] = {a.t(), b.t()}, outs[] = {a.t(), b.t()};
  EXPECT_DSRT_ERROR(dsrt::all_reduce_bucket(s, ins, 2, outs, 1, staging, ReduceOp::Sum, 0),
                    "all_reduce_bucket", "2 ins but 1 outs");
  EXPECT_DSRT_ERROR(dsrt::all_reduce_bucket(s, ins, 2, outs, 2, matrix, ReduceOp::Sum, 0),
                    "all_reduce_bucket", "staging f32 [7, 1]", "1-D");
  EXPECT_DSRT_ERROR(dsrt::all_reduce_bucket(s, ins, 2, outs, 2, staging, ReduceOp::Sum, 1),
                    "all_reduce_bucket", "grid axis 1");
  Owned small(DType::F32, Shape{6});
  EXPECT_DSRT_ERROR(dsrt::all_reduce_bucket(s, ins, 2, outs, 2, small, ReduceOp::Sum, 0),
                    "all_reduce_bucket", "staging f32 [6] holds 6 elements", "need 7");
  Tensor mixed_outs[] = {i64.t(), b.t()};
  EXPECT_DSRT_ERROR(dsrt::all_reduce_bucket(s, ins, 2, mixed_outs, 2, staging, ReduceOp::Sum, 0),
                    "all_reduce_bucket", "outs[0] i64 [4]", "different element types");
  Tensor short_outs[] = {b.t(), b.t()};
  EXPECT_DSRT_ERROR(dsrt::all_reduce_bucket(s, ins, 2, short_outs, 2, staging, ReduceOp::Sum, 0),
                    "all_reduce_bucket", "ins[0] f32 [4]", "outs[0] f32 [3]", "element count");
  Tensor inside = Tensor{staging.t().data, DType::F32, Shape{4}};
  Tensor overlapping[] = {inside, b.t()};
  EXPECT_DSRT_ERROR(
      dsrt::all_reduce_bucket(s, ins, 2, overlapping, 2, staging, ReduceOp::Sum, 0),
      "all_reduce_bucket", "outs[0] f32 [4] overlaps staging f32 [7]");
  Owned big(DType::F32, Shape{8});
  Tensor twice[] = {Tensor{big.t().data, DType::F32, Shape{4}},
                    Tensor{static_cast<float *>(big.t().data) + 1, DType::F32, Shape{3}}};
  EXPECT_DSRT_ERROR(dsrt::all_reduce_bucket(s, ins, 2, twice, 2, staging, ReduceOp::Sum, 0),
                    "all_reduce_bucket", "outs[0] f32 [4] and outs[1] f32 [3] overlap");
  Owned bools(DType::Bool, Shape{4}), bool_staging(DType::Bool, Shape{4});
  Tensor bool_ins[] = {bools.t()};
  EXPECT_DSRT_ERROR(
      dsrt::all_reduce_bucket(s, bool_ins, 1, bool_ins, 1, bool_staging, ReduceOp::Sum, 0),
      "all_reduce_bucket", "cannot reduce bool");

  // ZeRO layout: ins of W * s_i for reduce-scatter, outs of W * s_i for
  // all-gather; staging W * sum(s_i).
  Owned whole(DType::F32, Shape{n * 4}), whole_b(DType::F32, Shape{n * 3 + 1});
  Owned zstaging(DType::F32, Shape{n * 7});
  Tensor rs_ins[] = {whole.t(), whole_b.t()}, shard_outs[] = {a.t(), b.t()};
  EXPECT_DSRT_ERROR(dsrt::reduce_scatter_bucket(s, rs_ins, 2, shard_outs, 2, zstaging,
                                                ReduceOp::Sum, 0),
                    "reduce_scatter_bucket", "ins[1] f32 [", " ranks x outs[1] f32 [3]");
  Tensor rs_ok[] = {whole.t(), Tensor{whole_b.t().data, DType::F32, Shape{n * 3}}};
  Owned zsmall(DType::F32, Shape{n * 7 - 1});
  EXPECT_DSRT_ERROR(dsrt::reduce_scatter_bucket(s, rs_ok, 2, shard_outs, 2, zsmall,
                                                ReduceOp::Sum, 0),
                    "reduce_scatter_bucket", "the sum of the shard sizes");
  EXPECT_DSRT_ERROR(dsrt::all_gather_bucket(s, shard_outs, 2, rs_ins, 2, zstaging, 0),
                    "all_gather_bucket", "outs[1] f32 [", " ranks x ins[1] f32 [3]");
  EXPECT_DSRT_ERROR(dsrt::all_gather_bucket(s, shard_outs, 2, rs_ok, 2, zstaging, -1),
                    "all_gather_bucket", "grid axis -1");
  // Nothing was issued: the communicator still works on every rank.
  world().reset_counters();
  dsrt::all_gather_bucket(s, shard_outs, 2, rs_ok, 2, zstaging, 0);
  s.synchronize();
  EXPECT_EQ(world().counters(CommOp::AllGather).calls, 1);
}

TEST(DistBuckets, RanksThatDisagreeOnTheBucketFailOnEveryRankAndLeaveOutsAlone) {
  if (N() == 1) GTEST_SKIP() << "needs two ranks";
  dsrt::Stream s;
  // The last rank packs one element more.
  const int64_t n = R() == N() - 1 ? 6 : 5;
  Owned x = bucket_input(DType::F32, n, R(), 30), out(DType::F32, Shape{n}, 0xAB);
  Owned staging(DType::F32, Shape{n});
  Tensor ins[] = {x.t()}, outs[] = {out.t()};
  dsrt::all_reduce_bucket(s, ins, 1, outs, 1, staging, ReduceOp::Sum, 0);
  EXPECT_DSRT_ERROR(s.synchronize(), "dsrt::Communicator::all_reduce",
                    "the ranks issued different operations", "of 5 x f32", "of 6 x f32");
  EXPECT_EQ(out.bytes(), std::vector<unsigned char>(out.bytes().size(), 0xAB));
  // The communicator is still usable.
  dsrt::all_reduce_bucket(s, ins, 1, ins, 1, staging, ReduceOp::Sum, 0);
  EXPECT_DSRT_ERROR(s.synchronize(), "the ranks issued different operations");
  Owned y = bucket_input(DType::F32, 5, R(), 31);
  Owned ok_staging(DType::F32, Shape{5});
  Tensor y_views[] = {y.t()};
  dsrt::all_reduce_bucket(s, y_views, 1, y_views, 1, ok_staging, ReduceOp::Max, 0);
  s.synchronize();
}

TEST(DistBuckets, AFailingPackFailsTheCollectiveOnEveryRank) {
  // What the communication thread does before the ring (CommHooks::before)
  // is this rank's local error, told to every rank in the header.
  dsrt::Stream s;
  Owned x(DType::F32, Shape{4});
  bool after_ran = false;
  dsrt::CommHooks hooks;
  hooks.before = [] {
    if (R() == 0) throw dsrt::Error("packing went wrong");
  };
  hooks.after = [&] { after_ran = true; };
  dsrt::Request r = world().all_reduce(s, x, x, ReduceOp::Sum, hooks);
  if (R() == 0) {
    EXPECT_DSRT_ERROR(r.wait(), "dsrt::Communicator::all_reduce: packing went wrong");
  } else {
    EXPECT_DSRT_ERROR(r.wait(), "failed on another rank: rank 0: packing went wrong");
  }
  EXPECT_FALSE(after_ran);
  s.synchronize();  // the request reported the error
  EXPECT_TRUE(world().failure().empty());
  hooks.before = nullptr;
  world().all_reduce(s, x, x, ReduceOp::Sum, hooks).wait();
  EXPECT_TRUE(after_ran);
}

//===--- overlapping collectives with compute ---------------------------------===//

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// Holds back the work after it on a stream until opened (or 5 s passed, so
// that a test that fails cannot hang).
class Gate {
public:
  void open() {
    {
      std::lock_guard<std::mutex> lock(m_);
      open_ = true;
    }
    cv_.notify_all();
  }
  void wait() {
    std::unique_lock<std::mutex> lock(m_);
    cv_.wait_for(lock, std::chrono::seconds(5), [&] { return open_; });
  }

private:
  std::mutex m_;
  std::condition_variable cv_;
  bool open_ = false;
};

// A small copy on `stream` runs at once, while `pending` (held back) has
// not completed: the copy did not wait for it.
void expect_copy_runs_at_once(dsrt::Stream &stream, const dsrt::Event &pending,
                              const char *what) {
  Owned a = Owned::of(DType::F32, Shape{3}, {1, 2, 3}), b(DType::F32, Shape{3});
  auto start = Clock::now();
  dsrt::copy(stream, a, b);
  EXPECT_LT(seconds_since(start), 1.0);
  EXPECT_EQ(b.at(2), 3.0);
  EXPECT_FALSE(pending.query()) << what;
}

dsrt::Program program_with_streams() {
  dsrt::Program p;
  p.stream = dsrt::Stream(dsrt::Backend::Cpu, 1);
  p.comm = dsrt::Stream(dsrt::Backend::Cpu, 1);
  p.io = dsrt::Stream(dsrt::Backend::Cpu, 1);
  return p;
}

TEST(IoStream, CopiesOnTheCommunicationStreamDoNotWaitForFileIoUntilCollectiveWait) {
  dsrt::Program p = program_with_streams();
  dsrt::detail::Worker worker;
  Gate gate;
  // A file read still in flight on the I/O stream (held back by a gate).
  worker.submit(&dsrt::io_stream(p), [&](const std::string &) { gate.wait(); });
  dsrt::io_issued(p, 0);
  EXPECT_FALSE(p.collectives[0].query());

  // A copy on the communication stream runs at once.
  expect_copy_runs_at_once(dsrt::comm_stream(p), p.collectives[0],
                           "the copy waited for the file read");

  // Once an op waits for the read (collective_wait), the next copy on the
  // communication stream is ordered after it.
  dsrt::collective_wait(p, 0);
  std::thread opener([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    gate.open();
  });
  Owned a = Owned::of(DType::F32, Shape{3}, {1, 2, 3}), c(DType::F32, Shape{3});
  dsrt::copy(dsrt::comm_stream(p), a, c);
  opener.join();
  EXPECT_TRUE(p.collectives[0].query()) << "the copy did not wait for the file read";
  EXPECT_EQ(c.at(2), 3.0);
  dsrt::collectives_done(p);
  EXPECT_DSRT_ERROR(dsrt::io_issued(p, -1), "io_issued", "negative");
}

TEST(CommStream, ComputeDoesNotWaitForCollectivesUntilCollectiveWait) {
  dsrt::Program p = program_with_streams();
  dsrt::detail::Worker worker;
  Gate gate;
  // Earlier work on the communication stream holds the collective back.
  worker.submit(&dsrt::comm_stream(p), [&](const std::string &) { gate.wait(); });
  Owned g = bucket_input(DType::F32, 64, R(), 40), staging(DType::F32, Shape{64});
  Tensor views[] = {g.t()};
  dsrt::all_reduce_bucket(dsrt::comm_stream(p), views, 1, views, 1, staging, ReduceOp::Sum, 0);
  dsrt::collective_issued(p, 0);
  EXPECT_FALSE(p.collectives[0].query());

  // A kernel on the compute stream runs at once.
  expect_copy_runs_at_once(dsrt::stream(p), p.collectives[0],
                           "the kernel waited for the collective");

  // collective_wait does not block the host; the next kernel waits.
  auto start = Clock::now();
  dsrt::collective_wait(p, 0);
  EXPECT_LT(seconds_since(start), 1.0);
  EXPECT_FALSE(p.collectives[0].query());
  std::thread opener([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    gate.open();
  });
  Owned seen(DType::F32, Shape{64});
  dsrt::copy(dsrt::stream(p), g, seen);
  opener.join();
  EXPECT_TRUE(p.collectives[0].query());
  Owned per_tensor = bucket_input(DType::F32, 64, R(), 40), reduced(DType::F32, Shape{64});
  dsrt::all_reduce(dsrt::stream(p), per_tensor, reduced, ReduceOp::Sum, 0);
  p.stream.synchronize();
  if (N() <= 2) {
    EXPECT_EQ(bits(seen, reduced), "");
  }
  for (int64_t i = 0; i < 64; ++i)
    EXPECT_NEAR(seen.at(i), reduced.at(i), 1e-5 * (1 + std::fabs(reduced.at(i))));
  dsrt::collectives_done(p);

  // Waiting again, once complete, costs nothing and throws nothing.
  dsrt::collective_wait(p, 0);
  EXPECT_DSRT_ERROR(dsrt::collective_wait(p, 1), "collective_wait", "collective 1",
                    "not issued");
}

TEST(CommStream, TheCommunicationStreamWaitsForTheComputeStream) {
  // Asynchronous work pending on the compute stream (here held back by a
  // gate) comes before collectives issued on comm_stream.
  dsrt::Program p = program_with_streams();
  dsrt::detail::Worker worker;
  Gate gate;
  Owned x = Owned::of(DType::F32, Shape{2}, {0, 0});
  worker.submit(&dsrt::stream(p), [&](const std::string &) {
    gate.wait();
    dsrt::store_float(x.t(), 0, 1.0f);
    dsrt::store_float(x.t(), 1, 2.0f);
  });
  dsrt::all_reduce(dsrt::comm_stream(p), x, x, ReduceOp::Sum, 0);
  dsrt::collective_issued(p, 0);
  std::thread opener([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    gate.open();
  });
  dsrt::collectives_done(p);
  opener.join();
  EXPECT_EQ(x.at(0), 1.0 * N());
  EXPECT_EQ(x.at(1), 2.0 * N());
}

TEST(CommStream, ASlowPeerDelaysOnlyWhatWaitsForTheCollective) {
  if (N() == 1) GTEST_SKIP() << "needs two ranks";
  dsrt::Stream s;
  world().barrier(s).wait();
  dsrt::Program p = program_with_streams();
  const int64_t n = 1 << 18;
  Owned g = bucket_input(DType::F32, n, R(), 50), reduced(DType::F32, Shape{n});
  Owned a = bucket_input(DType::F32, n, R(), 51), b(DType::F32, Shape{n});
  // Rank 1 issues its part late.
  if (R() == 1) std::this_thread::sleep_for(std::chrono::milliseconds(600));
  auto start = Clock::now();
  dsrt::all_reduce(dsrt::comm_stream(p), g, reduced, ReduceOp::Sum, 0);
  dsrt::collective_issued(p, 0);
  dsrt::binary(dsrt::stream(p), dsrt::BinaryOp::Add, a, a, b);  // compute meanwhile
  const double computed = seconds_since(start);
  const bool pending = !p.collectives[0].query();
  dsrt::collective_wait(p, 0);
  Owned seen(DType::F32, Shape{n});
  dsrt::copy(dsrt::stream(p), reduced, seen);  // waits for the collective
  const double waited = seconds_since(start);
  dsrt::collectives_done(p);
  EXPECT_EQ(b.at(7), 2 * a.at(7));
  if (R() != 1) {
    EXPECT_TRUE(pending) << "the compute kernel waited for the collective";
    EXPECT_LT(computed, 0.3);
    EXPECT_GT(waited, 0.3) << "the kernel after collective_wait did not wait";
  }
  // The copy saw the result: the sum over ranks.
  EXPECT_EQ(bits(seen, reduced), "");
  for (int64_t i : {int64_t(0), int64_t(12345), n - 1}) {
    double want = 0;
    for (int r = 0; r < N(); ++r) want += noisy(r, i, 50);
    EXPECT_NEAR(seen.at(i), want, 1e-4 * (1 + std::fabs(want))) << "element " << i;
  }
}

TEST(CommStream, AFailedCollectiveIsThrownByTheWaitOrTheNextKernel) {
  dsrt::Program p = program_with_streams();
  Owned x(DType::F32, Shape{4}), y(DType::F32, Shape{4});
  dsrt::CommHooks fail_to_pack;
  fail_to_pack.before = [] { throw dsrt::Error("cannot pack"); };

  // Complete when waited for: collective_wait throws.
  world().all_reduce(dsrt::comm_stream(p), x, x, ReduceOp::Sum, fail_to_pack);
  dsrt::collective_issued(p, 0);
  for (auto start = Clock::now(); !p.collectives[0].query() && seconds_since(start) < 5;)
    std::this_thread::yield();
  EXPECT_DSRT_ERROR(dsrt::collective_wait(p, 0), "cannot pack");
  dsrt::collectives_done(p);  // reported once

  // Still running when waited for: the next kernel on the compute stream throws.
  dsrt::detail::Worker worker;
  Gate gate;
  worker.submit(&dsrt::comm_stream(p), [&](const std::string &) { gate.wait(); });
  world().all_reduce(dsrt::comm_stream(p), x, x, ReduceOp::Sum, fail_to_pack);
  dsrt::collective_issued(p, 1);
  dsrt::collective_wait(p, 1);
  gate.open();
  EXPECT_DSRT_ERROR(dsrt::copy(dsrt::stream(p), x, y), "cannot pack");
  dsrt::collectives_done(p);

  // Not waited for: collectives_done throws.
  world().all_reduce(dsrt::comm_stream(p), x, x, ReduceOp::Sum, fail_to_pack);
  dsrt::collective_issued(p, 2);
  EXPECT_DSRT_ERROR(dsrt::collectives_done(p), "cannot pack");
  dsrt::copy(dsrt::stream(p), x, y);
  dsrt::collectives_done(p);
}

//===--- sharded parameters ---------------------------------------------------===//

class RankDir : public testing::Test {
protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("dsrt_dist_test_" + std::to_string(getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string &name) const { return (dir_ / name).string(); }
  fs::path dir_;
};

using ShardLoading = RankDir;

TEST_F(ShardLoading, EachRankLoadsItsShardAndZeroPadding) {
  // w: 7 f32 values [1, 7] behind a 16-byte header in the file; its shard
  // is ceil(7 / N) elements. b: 5 i64 values in the program, sharded too.
  const int64_t n = 7, s = (n + N() - 1) / N();
  std::vector<float> whole(n);
  for (int64_t i = 0; i < n; ++i) whole[i] = static_cast<float>(10 + i);
  {
    std::ofstream out(path("w.bin"), std::ios::binary);
    out << std::string(16, 'x');
    out.write(reinterpret_cast<const char *>(whole.data()), n * 4);
  }
  static int64_t b_data[5] = {-1, -2, -3, -4, -5};
  dsrt::ProgramInfo info;
  info.model_path = path("model.onnx");
  dsrt::set_memory_plan(info, 128, 128, 128, 64);
  const int64_t sizes[] = {N()};
  dsrt::set_grid(info, "dp", sizes, 1);
  EXPECT_EQ(info.world, N());
  dsrt::add_param_file(info, "w", DType::F32, {s}, 0, true, "w.bin", 16, n * 4);
  dsrt::set_param_shard(info, n, {1, n});
  dsrt::add_param_data(info, "b", dsrt::view_static(b_data, DType::I64, {5}), 64, true);
  dsrt::set_param_shard(info, 5, {5});
  const int64_t sb = (5 + N() - 1) / N();
  EXPECT_EQ(info.params[1].shape, Shape{sb});
  EXPECT_EQ(info.params[0].full_shape, (Shape{1, n}));

  alignas(64) uint8_t arena[128];
  std::memset(arena, 0xEE, sizeof(arena));
  dsrt::Program p;
  p.info = &info;
  p.arena = arena;
  dsrt::runner::load_params(p, "", R());
  std::vector<double> want_w, want_b;
  for (int64_t i = R() * s; i < (R() + 1) * s; ++i) want_w.push_back(i < n ? whole[i] : 0.0);
  for (int64_t i = R() * sb; i < (R() + 1) * sb; ++i) want_b.push_back(i < 5 ? b_data[i] : 0);
  expect_elements(Tensor{arena, DType::F32, Shape{s}}, want_w, "w shard");
  expect_elements(Tensor{arena + 64, DType::I64, Shape{sb}}, want_b, "b shard");

  // The file must hold the whole tensor.
  dsrt::ProgramInfo bad = info;
  bad.params.resize(1);
  bad.params[0].length = s * 4;
  dsrt::Program q;
  q.info = &bad;
  q.arena = arena;
  if (s != n)
    EXPECT_DSRT_ERROR(dsrt::runner::load_params(q, "", R()), "parameter 'w'",
                      "the whole tensor [1, 7]");
}

TEST(ShardDescribe, Errors) {
  dsrt::ProgramInfo info;
  const int64_t two[] = {2, 3};
  EXPECT_DSRT_ERROR(dsrt::set_grid(info, "dp,tp", two, 1), "set_grid", "2 axes");
  const int64_t zero[] = {0};
  EXPECT_DSRT_ERROR(dsrt::set_grid(info, "dp", zero, 1), "size 0");
  EXPECT_DSRT_ERROR(dsrt::set_param_shard(info, 4, {4}), "no parameter");
  dsrt::set_grid(info, "dp", two, 1);
  dsrt::add_param_file(info, "w", DType::F32, {1}, 0, true, "w.bin", 0, 16);
  EXPECT_DSRT_ERROR(dsrt::set_param_shard(info, 4, {4}), "parameter 'w'", "[1]", "2 ranks");
  EXPECT_DSRT_ERROR(dsrt::set_param_shard(info, 5, {4}), "total_numel 5");
}

// Megatron's pieces of a [4, 6] tensor split along axis 1 in 3 blocks (a
// fused Q/K/V) over 2 ranks: rank r holds columns {2b + r}, b = 0..2 of
// every row; putting both pieces back gives the tensor.
TEST(TpPiece, BlocksAndInverse) {
  std::vector<float> whole(24), back(24, -1.0f);
  for (int i = 0; i < 24; ++i) whole[static_cast<size_t>(i)] = static_cast<float>(i);
  for (int64_t r = 0; r < 2; ++r) {
    std::vector<float> piece(12);
    dsrt::tp_piece_copy(whole.data(), piece.data(), {4, 6}, 1, 3, 2, r, sizeof(float), true);
    for (int64_t row = 0; row < 4; ++row)
      for (int64_t b = 0; b < 3; ++b)
        EXPECT_EQ(piece[static_cast<size_t>(row * 3 + b)],
                  whole[static_cast<size_t>(row * 6 + 2 * b + r)])
            << "rank " << r << " row " << row << " block " << b;
    dsrt::tp_piece_copy(back.data(), piece.data(), {4, 6}, 1, 3, 2, r, sizeof(float), false);
  }
  EXPECT_EQ(back, whole);
  // Along axis 0 in one block: rows [2r, 2r + 2).
  std::vector<float> rows(12);
  dsrt::tp_piece_copy(whole.data(), rows.data(), {4, 6}, 0, 1, 2, 1, sizeof(float), true);
  EXPECT_EQ(rows, std::vector<float>(whole.begin() + 12, whole.end()));
  EXPECT_DSRT_ERROR(dsrt::tp_piece_copy(whole.data(), rows.data(), {4, 6}, 1, 2, 2, 0,
                                        sizeof(float), true),
                    "tp_piece_copy", "[4, 6]", "2 blocks");
}

// A padded vocabulary: [20, 2] over 3 ranks along axis 0 holds ceil(20/3)
// = 7 rows rounded up to 8 per rank, rank 2 rows 16..19 and 4 rows of
// zeros; putting the pieces back writes only the 20 rows (the padding is
// dropped). A checkpoint written before the multiple of 8 holds pieces of
// 7 rows: tp_piece_copy takes that run too. An axis the ranks divide may
// be padded as well ([2, 12] over 2: 6 columns rounded up to 8).
TEST(TpPiece, PaddedRows) {
  std::vector<float> whole(40), back(40, -1.0f), legacy(40, -1.0f);
  for (int i = 0; i < 40; ++i) whole[static_cast<size_t>(i)] = static_cast<float>(i);
  EXPECT_EQ(dsrt::tp_padded_piece(20, 3), 8);
  EXPECT_EQ(dsrt::tp_padded_piece(24, 3), 8);
  EXPECT_EQ(dsrt::tp_padded_piece(50257, 2), 25136);
  EXPECT_EQ(dsrt::tp_padded_piece(30522, 2), 15264);
  EXPECT_EQ(dsrt::tp_piece_shape({20, 2}, 0, 1, 3, 8), (dsrt::Shape{8, 2}));
  EXPECT_EQ(dsrt::tp_piece_shape({2, 13}, 1, 1, 2, 8), (dsrt::Shape{2, 8}));
  EXPECT_EQ(dsrt::tp_piece_shape({2, 12}, 1, 1, 2), (dsrt::Shape{2, 6}));
  EXPECT_EQ(dsrt::tp_piece_shape({2, 12}, 1, 1, 2, 8), (dsrt::Shape{2, 8}));
  for (int64_t r = 0; r < 3; ++r) {
    std::vector<float> piece(16, -7.0f);
    dsrt::tp_piece_copy(whole.data(), piece.data(), {20, 2}, 0, 1, 3, r, sizeof(float), true, 8);
    for (int64_t k = 0; k < 16; ++k) {
      const int64_t at = r * 16 + k;
      EXPECT_EQ(piece[static_cast<size_t>(k)], at < 40 ? static_cast<float>(at) : 0.0f)
          << "rank " << r << " element " << k;
    }
    // Padding never reaches the whole.
    if (r == 2) std::fill(piece.begin() + 8, piece.end(), 99.0f);
    dsrt::tp_piece_copy(back.data(), piece.data(), {20, 2}, 0, 1, 3, r, sizeof(float), false, 8);
    // The older layout: 7 rows per piece, rank r's from 7 r.
    std::vector<float> old(14, 99.0f);
    for (int64_t k = 0; k < 14 && r * 14 + k < 40; ++k)
      old[static_cast<size_t>(k)] = static_cast<float>(r * 14 + k);
    dsrt::tp_piece_copy(legacy.data(), old.data(), {20, 2}, 0, 1, 3, r, sizeof(float), false, 7);
  }
  EXPECT_EQ(back, whole);
  EXPECT_EQ(legacy, whole);
  // Padded runs lie between ceil and the rule's; equal pieces need a
  // divisor.
  EXPECT_TRUE(dsrt::tp_piece_run_ok(20, 3, 7));
  EXPECT_TRUE(dsrt::tp_piece_run_ok(20, 3, 8));
  EXPECT_FALSE(dsrt::tp_piece_run_ok(20, 3, 6));
  EXPECT_FALSE(dsrt::tp_piece_run_ok(20, 3, 9));
  EXPECT_TRUE(dsrt::tp_piece_run_ok(12, 2, 8));
  EXPECT_DSRT_ERROR(dsrt::tp_piece_copy(whole.data(), back.data(), {20, 2}, 0, 1, 3, 0,
                                        sizeof(float), true, 6),
                    "tp_piece_copy", "[20, 2]", "padded to 6 entries");
  EXPECT_DSRT_ERROR(dsrt::tp_piece_shape({20, 2}, 0, 1, 3), "tp_piece_shape", "[20, 2]");
  // Padded columns: [2, 13] along axis 1 over 2 ranks, 8 columns each.
  std::vector<float> cols(16);
  dsrt::tp_piece_copy(whole.data(), cols.data(), {2, 13}, 1, 1, 2, 1, sizeof(float), true, 8);
  EXPECT_EQ(cols, (std::vector<float>{8, 9, 10, 11, 12, 0, 0, 0, 21, 22, 23, 24, 25, 0, 0, 0}));
  // A small axis leaves a rank nothing but padding: [5, 2] over 3 ranks,
  // 8 rows each, ranks 1 and 2 all zeros, and nothing of theirs written back.
  std::vector<float> empty(16, -7.0f), small(10, -1.0f);
  dsrt::tp_piece_copy(whole.data(), empty.data(), {5, 2}, 0, 1, 3, 2, sizeof(float), true, 8);
  EXPECT_EQ(empty, std::vector<float>(16, 0.0f));
  std::fill(empty.begin(), empty.end(), 99.0f);
  dsrt::tp_piece_copy(small.data(), empty.data(), {5, 2}, 0, 1, 3, 2, sizeof(float), false, 8);
  EXPECT_EQ(small, std::vector<float>(10, -1.0f));
  // Blocks are never padded.
  EXPECT_DSRT_ERROR(dsrt::tp_piece_shape({2, 6}, 1, 3, 4), "tp_piece_shape", "3 blocks");
  EXPECT_DSRT_ERROR(dsrt::tp_piece_shape({2, 6}, 1, 3, 2, 8), "tp_piece_shape", "3 blocks");
}

TEST(TpPiece, DescribeErrors) {
  dsrt::ProgramInfo info;
  const int64_t sizes[] = {1, 2};
  dsrt::add_param_file(info, "w", DType::F32, {4, 3}, 0, true, "w.bin", 0, 96);
  EXPECT_DSRT_ERROR(dsrt::set_param_tp_split(info, 1, 1, {4, 6}), "parameter 'w'", "no tp axis");
  dsrt::set_grid(info, "dp,tp", sizes, 2);
  EXPECT_DSRT_ERROR(dsrt::set_param_tp_split(info, 1, 2, {4, 6}), "axis 1 of [4, 6]",
                    "2 x 2 equal pieces");
  EXPECT_DSRT_ERROR(dsrt::set_param_tp_split(info, 0, 1, {8, 6}), "its slot [4, 3]",
                    "is not the piece [4, 6] of [8, 6]");
  // A padded split: [4, 5] gives pieces [4, 8] (ceil(5 / 2) rounded up to
  // 8), not the older layout's [4, 3]; unpadded, 5 is no split.
  EXPECT_DSRT_ERROR(dsrt::set_param_tp_split(info, 1, 1, {4, 5}, true), "its slot [4, 3]",
                    "is not the piece [4, 8] of [4, 5]");
  EXPECT_DSRT_ERROR(dsrt::set_param_tp_split(info, 1, 1, {4, 5}), "axis 1 of [4, 5]",
                    "1 x 2 equal pieces");
  // Padding that pads nothing (16 over 2: 8 each) is refused.
  EXPECT_DSRT_ERROR(dsrt::set_param_tp_split(info, 1, 1, {4, 16}, true), "axis 1 of [4, 16]",
                    "is not padded");
  dsrt::set_param_tp_split(info, 1, 1, {4, 6});
  EXPECT_TRUE(info.params[0].tp_split());
  EXPECT_EQ(info.params[0].model_shape(), (dsrt::Shape{4, 6}));
  EXPECT_EQ(info.params[0].rank_shape(), (dsrt::Shape{4, 3}));
  dsrt::add_param_file(info, "v", DType::F32, {4, 8}, 64, true, "v.bin", 0, 208);
  dsrt::set_param_tp_split(info, 1, 1, {4, 13}, true);
  EXPECT_EQ(info.params[1].model_shape(), (dsrt::Shape{4, 13}));
  EXPECT_EQ(info.params[1].rank_shape(), (dsrt::Shape{4, 8}));
  EXPECT_EQ(info.params[1].tp_run, 8);
}

//===--- train_main on a data-parallel program -----------------------------------===//
// ZeRO-style: the parameter w (3 f32) is sharded, s = ceil(3 / N) per rank;
// the gradient accumulator is whole on every rank.
//   persistent: w shard @0, acc [3] @64; persistent_bytes 128
//   micro_step: x [3] @128, wfull [N*s] @192, loss @256 -> 320
//     wfull = all_gather(w); loss = wfull . x; acc += x
//   optimizer_step: lr @128, step @192, padded [N*s] @256, g [s] @320,
//                   sq @384, grad_norm @448 -> 512
//     padded = flat_pad(acc); g = reduce_scatter(padded, Sum);
//     grad_norm = sqrt(all_reduce(sum(g^2), Sum)); w -= lr * g; acc = 0
namespace dp {

float w0[3] = {1.0f, -2.0f, 0.5f};
int64_t grid_size = 1;
// The grid "pp,dp" with pp_size stages instead of "dp" (pp_size 1: the same
// data-parallel program; more: a pipeline grid train refuses).
bool pp_grid = false;
int64_t pp_size = 1;
int64_t dp_axis = 0;
// The optimizer step also passes a value around the dp ring with send_recv
// (on 2 ranks or more), so that the summary reports send and recv.
bool ring = false;
// The same program with its collectives on the communication stream, the
// gather and the reduce-scatter bucketed through staging slots (as dsopt
// generates them for overlap).
bool overlap = false;
std::string model;
std::vector<uint64_t> counters;

int64_t shard() { return (3 + grid_size - 1) / grid_size; }

void describe(dsrt::ProgramInfo &info) {
  dsrt::set_model(info, model.c_str());
  if (pp_grid) {
    const int64_t sizes[2] = {pp_size, grid_size};
    dsrt::set_grid(info, "pp,dp", sizes, 2);
  } else {
    dsrt::set_grid(info, "dp", &grid_size, 1);
  }
  dsrt::set_memory_plan(info, 512, 128, 512, 64);
  dsrt::add_param_data(info, "w", dsrt::view_static(w0, DType::F32, {3}), 0, true);
  dsrt::set_param_shard(info, 3, {3});
  dsrt::add_state(info, "acc", DType::F32, {3}, 64, dsrt::ValueRole::Accumulator, "w");
  dsrt::set_training(info, "SGD", 0.25, 0, 2, 1, 1);
  dsrt::begin_function(info, "micro_step", 320, 320);
  dsrt::add_input(info, "x", DType::F32, {3}, 128);
  dsrt::add_output(info, "loss", DType::F32, {});
  dsrt::begin_function(info, "optimizer_step", 512, 512);
  dsrt::add_input(info, "lr", DType::F32, {}, 128);
  dsrt::add_input(info, "step", DType::I64, {}, 192);
  dsrt::add_output(info, "grad_norm", DType::F32, {});
}

void micro_step(dsrt::Program &p) {
  counters.push_back(dsrt::rng_counter());
  uint8_t *a = dsrt::arena(p);
  const int64_t s = shard(), n = grid_size;
  dsrt::acquire(p, 192, 64);
  if (overlap) {
    dsrt::acquire(p, 256, 64);  // staging, until the loss takes the slot
    auto ins = dsrt::tensor_array(dsrt::view(a, 0, DType::F32, {s}));
    auto outs = dsrt::tensor_array(dsrt::view(a, 192, DType::F32, {n * s}));
    dsrt::all_gather_bucket(dsrt::comm_stream(p), dsrt::data(ins), 1, dsrt::data(outs), 1,
                            dsrt::view(a, 256, DType::F32, {n * s}), dp_axis);
    dsrt::collective_issued(p, 0);
    dsrt::collective_wait(p, 0);
    dsrt::begin_generated_kernel(dsrt::stream(p));
    dsrt::release(p, 256);
  } else {
    dsrt::all_gather(dsrt::stream(p), dsrt::view(a, 0, DType::F32, {s}),
                     dsrt::view(a, 192, DType::F32, {n * s}), dp_axis);
    dsrt::stream(p).synchronize();
  }
  const float *wfull = reinterpret_cast<const float *>(a + 192);
  const float *x = reinterpret_cast<const float *>(a + 128);
  float *acc = reinterpret_cast<float *>(a + 64);
  dsrt::acquire(p, 256, 64);
  float loss = 0;
  for (int i = 0; i < 3; ++i) {
    loss += wfull[i] * x[i];
    acc[i] += x[i];
  }
  *reinterpret_cast<float *>(a + 256) = loss;
  dsrt::release(p, 192);
  dsrt::set_output(p, 0, dsrt::view(a, 256, DType::F32, {}));
  if (overlap) dsrt::collectives_done(p);
}

void optimizer_step(dsrt::Program &p) {
  uint8_t *a = dsrt::arena(p);
  dsrt::Stream &st = dsrt::stream(p);
  const int64_t s = shard(), n = grid_size;
  dsrt::acquire(p, 256, 64);
  dsrt::flat_pad(st, dsrt::view(a, 64, DType::F32, {3}), dsrt::view(a, 256, DType::F32, {n * s}));
  dsrt::acquire(p, 320, 64);
  if (overlap) {
    dsrt::acquire(p, 384, 64);  // staging, until sq takes the slot
    auto ins = dsrt::tensor_array(dsrt::view(a, 256, DType::F32, {n * s}));
    auto outs = dsrt::tensor_array(dsrt::view(a, 320, DType::F32, {s}));
    dsrt::reduce_scatter_bucket(dsrt::comm_stream(p), dsrt::data(ins), 1, dsrt::data(outs), 1,
                                dsrt::view(a, 384, DType::F32, {n * s}), ReduceOp::Sum, dp_axis);
    dsrt::collective_issued(p, 0);
    dsrt::collective_wait(p, 0);
    dsrt::begin_generated_kernel(st);
    dsrt::release(p, 384);
  } else {
    dsrt::reduce_scatter(st, dsrt::view(a, 256, DType::F32, {n * s}),
                         dsrt::view(a, 320, DType::F32, {s}), ReduceOp::Sum, dp_axis);
    st.synchronize();
  }
  const float *g = reinterpret_cast<const float *>(a + 320);
  float *sq = reinterpret_cast<float *>(a + 384);
  dsrt::acquire(p, 384, 64);
  *sq = 0;
  for (int64_t i = 0; i < s; ++i) *sq += g[i] * g[i];
  if (overlap) {
    dsrt::all_reduce(dsrt::comm_stream(p), dsrt::view(a, 384, DType::F32, {1}),
                     dsrt::view(a, 384, DType::F32, {1}), ReduceOp::Sum, dp_axis);
    dsrt::collective_issued(p, 1);
    dsrt::collective_wait(p, 1);
    dsrt::begin_generated_kernel(st);
  } else {
    dsrt::all_reduce(st, dsrt::view(a, 384, DType::F32, {1}),
                     dsrt::view(a, 384, DType::F32, {1}), ReduceOp::Sum, dp_axis);
    st.synchronize();
  }
  if (ring && n > 1) {
    const int64_t me = dsrt::current_grid()->coordinate(dp_axis);
    float mine = static_cast<float>(me), got = -1;
    Tensor send{&mine, DType::F32, Shape{1}}, recv{&got, DType::F32, Shape{1}};
    const int64_t next = (me + 1) % n, prev = (me + n - 1) % n;
    dsrt::send_recv(st, &send, &next, 1, &recv, &prev, 1, dp_axis);
    st.synchronize();
    if (got != static_cast<float>(prev)) throw dsrt::Error("the ring passed the wrong value");
  }
  const float lr = *reinterpret_cast<const float *>(a + 128);
  float *w = reinterpret_cast<float *>(a);
  for (int64_t i = 0; i < s; ++i) w[i] -= lr * g[i];
  std::memset(a + 64, 0, 12);
  dsrt::acquire(p, 448, 64);
  *reinterpret_cast<float *>(a + 448) = std::sqrt(*sq);
  dsrt::set_output(p, 0, dsrt::view(a, 448, DType::F32, {}));
  if (overlap) dsrt::collectives_done(p);
}

}  // namespace dp

namespace pb {
std::string varint(uint64_t v) {
  std::string out;
  while (v >= 0x80) {
    out += static_cast<char>((v & 0x7f) | 0x80);
    v >>= 7;
  }
  return out + static_cast<char>(v);
}
std::string bytes(uint32_t number, const std::string &payload) {
  return varint((uint64_t(number) << 3) | 2) + varint(payload.size()) + payload;
}
std::string number(uint32_t field, uint64_t v) { return varint(uint64_t(field) << 3) + varint(v); }
std::string floats(const std::vector<float> &values) {
  return std::string(reinterpret_cast<const char *>(values.data()), values.size() * 4);
}
// A model whose graph has one f32 [3] initializer "w".
std::string model_with_w(const std::vector<float> &w) {
  std::string head = pb::number(1, 3) + pb::number(2, 1) + pb::bytes(8, "w");
  return pb::bytes(7, pb::bytes(5, head + pb::bytes(9, floats(w))));
}
}  // namespace pb

class DataParallelTrain : public RankDir {
protected:
  void SetUp() override {
    RankDir::SetUp();
    dp::grid_size = N();
    dp::pp_grid = false;
    dp::pp_size = 1;
    dp::dp_axis = 0;
    dp::ring = false;
    dp::overlap = false;
    dp::counters.clear();
    dp::model = path("model.onnx");
    std::ofstream(dp::model, std::ios::binary) << pb::model_with_w({1, -2, 0.5f});
    fs::create_directories(dir_ / "data");
    // 2 global batches of N ranks x 2 micro-batches of [3].
    std::vector<double> x;
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t m = 0; m < N() * 2; ++m)
        for (int64_t i = 0; i < 3; ++i) x.push_back(((b * 7 + m * 3 + i * 5) % 9) - 4);
    dsrt::write_npy(path("data/x.npy"), Owned::of(DType::F32, {2, N() * 2 * 3}, x));
    x_ = x;
  }

  int train(std::vector<std::string> args) {
    std::vector<std::string> all = {"train"};
    all.insert(all.end(), args.begin(), args.end());
    std::vector<char *> argv;
    for (std::string &arg : all) argv.push_back(&arg[0]);
    testing::internal::CaptureStdout();
    testing::internal::CaptureStderr();
    int status = dsrt::train_main(static_cast<int>(argv.size()), argv.data(), dp::describe,
                                  dp::micro_step, dp::optimizer_step);
    out_ = testing::internal::GetCapturedStdout();
    err_ = testing::internal::GetCapturedStderr();
    return status;
  }

  void expect_the_single_rank_run();

  std::vector<double> x_;
  std::string out_, err_;
};

void DataParallelTrain::expect_the_single_rank_run() {
  const int64_t steps = 3, k = 2, n = N();
  ASSERT_EQ(train({"--data", path("data"), "--steps", std::to_string(steps), "--seed", "5",
                   "--log-json", path("log.jsonl"), "--save-onnx", path("trained.onnx"),
                   "--trace", path("trace.json")}),
            0)
      << err_;

  // The single-rank run with N * k accumulation steps, by hand: exact in f32.
  float w[3] = {1.0f, -2.0f, 0.5f};
  std::vector<double> losses, norms;
  for (int64_t step = 1; step <= steps; ++step) {
    const int64_t b = (step - 1) % 2;
    double loss_sum = 0;
    float g[3] = {0, 0, 0};
    for (int64_t m = 0; m < n * k; ++m) {
      const double *x = &x_[static_cast<size_t>((b * n * k + m) * 3)];
      float loss = 0;
      for (int i = 0; i < 3; ++i) {
        loss += w[i] * static_cast<float>(x[i]);
        g[i] += static_cast<float>(x[i]);
      }
      loss_sum += loss;
    }
    losses.push_back(loss_sum / static_cast<double>(n * k));
    norms.push_back(std::sqrt(g[0] * g[0] + g[1] * g[1] + g[2] * g[2]));
    for (int i = 0; i < 3; ++i) w[i] -= 0.25f * g[i];
  }

  // Dropout counters: the single-rank run's for this rank's micro-batches.
  std::vector<uint64_t> want_counters;
  for (int64_t step = 1; step <= steps; ++step)
    for (int64_t i = 0; i < k; ++i)
      want_counters.push_back((uint64_t(5) << 32) + (step - 1) * n * k + R() * k + i);
  EXPECT_EQ(dp::counters, want_counters);

  if (R() != 0) {
    EXPECT_EQ(out_, "");
    EXPECT_FALSE(fs::exists(path("log.jsonl")));
    EXPECT_FALSE(fs::exists(path("trained.onnx")));
    EXPECT_TRUE(fs::exists(path("trace.json.rank" + std::to_string(R()))));
    EXPECT_FALSE(fs::exists(path("trace.json")));
    return;
  }
  EXPECT_TRUE(fs::exists(path("trace.json")));
  EXPECT_NE(out_.find("step 3/3 | loss "), std::string::npos) << out_;

  std::ifstream log(path("log.jsonl"));
  std::vector<std::string> lines;
  for (std::string line; std::getline(log, line);) lines.push_back(line);
  ASSERT_EQ(lines.size(), static_cast<size_t>(steps + 1));
  for (int64_t step = 1; step <= steps; ++step) {
    dsrt_test::Json entry = dsrt_test::Json::parse(lines[step - 1]);
    EXPECT_EQ(entry.at("step").as_int(), step);
    char loss[32];  // as the log writes it
    snprintf(loss, sizeof(loss), "%.9g", losses[step - 1]);
    EXPECT_EQ(entry.at("loss").as_double(), std::stod(loss)) << lines[step - 1];
    EXPECT_FLOAT_EQ(entry.at("grad_norm").as_double(), norms[step - 1]) << lines[step - 1];
    EXPECT_EQ(entry.at("arena_peak_bytes").as_int(), 512);
    EXPECT_EQ(entry.at("samples_per_s").kind(), dsrt_test::Json::Kind::Number);
  }

  // The summary: every rank's own measurement of the program's collectives
  // (one all_gather per micro step, one reduce_scatter and one all_reduce
  // per optimizer step), none of the runner's exchanges.
  dsrt_test::Json summary = dsrt_test::Json::parse(lines.back());
  EXPECT_TRUE(summary.at("summary").as_bool());
  EXPECT_EQ(summary.at("steps").as_int(), steps);
  EXPECT_EQ(summary.at("world").as_int(), n);
  const auto &ranks = summary.at("ranks").items();
  ASSERT_EQ(ranks.size(), static_cast<size_t>(n));
  const int64_t s = dp::shard();
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(ranks[r].at("rank").as_int(), r);
    EXPECT_EQ(ranks[r].at("arena_peak_bytes").as_int(), 512);
    const dsrt_test::Json &bytes = ranks[r].at("collective_bytes");
    struct Want {
      const char *name;
      CommOp op;
      int64_t total, calls;
    } wants[] = {{"all_gather", CommOp::AllGather, n * s, steps * k},
                 {"reduce_scatter", CommOp::ReduceScatter, n * s, steps},
                 {"all_reduce", CommOp::AllReduce, 1, steps}};
    // send and recv only when the program used them.
    if (dp::ring && n > 1) {
      for (CommOp op : {CommOp::Send, CommOp::Recv}) {
        const dsrt_test::Json &got = bytes.at(dsrt::comm_op_name(op));
        EXPECT_EQ(got.at("calls").as_int(), steps) << dsrt::comm_op_name(op) << " rank " << r;
        EXPECT_EQ(got.at("sent").as_int(), op == CommOp::Send ? 4 * steps : 0);
        EXPECT_EQ(got.at("received").as_int(), op == CommOp::Recv ? 4 * steps : 0);
      }
    } else {
      EXPECT_EQ(bytes.find("send"), nullptr) << "rank " << r;
      EXPECT_EQ(bytes.find("recv"), nullptr) << "rank " << r;
    }
    for (const Want &want : wants) {
      dsrt::CommVolume v = dsrt::comm_volume(want.op, DType::F32, want.total, n, r);
      const dsrt_test::Json &got = bytes.at(want.name);
      EXPECT_EQ(got.at("calls").as_int(), want.calls) << want.name << " rank " << r;
      EXPECT_EQ(got.at("sent").as_int(), v.sent * want.calls) << want.name << " rank " << r;
      EXPECT_EQ(got.at("received").as_int(), v.received * want.calls) << want.name << " rank " << r;
    }
  }

  // The saved model holds the whole trained w, gathered from the shards.
  std::ifstream saved(path("trained.onnx"), std::ios::binary);
  std::string got((std::istreambuf_iterator<char>(saved)), std::istreambuf_iterator<char>());
  EXPECT_EQ(got, pb::model_with_w({w[0], w[1], w[2]}));
}

TEST_F(DataParallelTrain, MatchesTheSingleRankRunAndCountsTheProgramsCollectives) {
  expect_the_single_rank_run();
}

TEST_F(DataParallelTrain, CollectivesOnTheCommunicationStreamInBucketsGiveTheSameRun) {
  // One bucket per collective: the same calls and bytes as unbucketed.
  dp::overlap = true;
  expect_the_single_rank_run();
}

TEST_F(DataParallelTrain, APpDpGridWithOneStageGivesTheSameRun) {
  // dp is axis 1 of "pp,dp"; pp = 1 puts every rank in one stage.
  dp::pp_grid = true;
  dp::dp_axis = 1;
  expect_the_single_rank_run();
}

TEST_F(DataParallelTrain, TheSummaryCountsSendAndRecvWhenTheProgramUsesThem) {
  dp::ring = true;
  expect_the_single_rank_run();
}

TEST_F(DataParallelTrain, PipelineGridsAreRefusedClearly) {
  dp::pp_grid = true;
  dp::pp_size = 2;
  dp::dp_axis = 1;
  EXPECT_EQ(train({"--data", path("data"), "--steps", "1"}), 1);
  EXPECT_NE(err_.find("error: pipeline programs are not supported by train_main (the grid "
                      "has pp=2"),
            std::string::npos)
      << err_;
  EXPECT_TRUE(dp::counters.empty());
}

TEST_F(DataParallelTrain, TheJobMustHaveTheProgramsRanks) {
  dp::grid_size = N() + 1;
  EXPECT_EQ(train({"--data", path("data"), "--steps", "1"}), 1);
  const std::string want = "error: the program was compiled for " + std::to_string(N() + 1) +
                           " ranks (--dp=" + std::to_string(N() + 1) + "; world " +
                           std::to_string(N() + 1) + ") but the job has " + std::to_string(N()) +
                           "; run it with mpirun -np " + std::to_string(N() + 1);
  EXPECT_NE(err_.find(want), std::string::npos) << err_;
  EXPECT_TRUE(dp::counters.empty());
}

TEST_F(DataParallelTrain, AFailureOnOneRankStopsEveryRankBeforeTraining) {
  // The last rank has no data file.
  if (R() == N() - 1) fs::remove(path("data/x.npy"));
  EXPECT_EQ(train({"--data", path("data"), "--steps", "1"}), 1);
  if (R() == N() - 1)
    EXPECT_NE(err_.find("error: input 'x': missing file"), std::string::npos) << err_;
  else
    EXPECT_NE(err_.find("rank " + std::to_string(N() - 1) + " failed before training: see its "
                        "message"),
              std::string::npos)
        << err_;
  EXPECT_TRUE(dp::counters.empty());
}

TEST_F(DataParallelTrain, DataLayoutNamesTheRanks) {
  // One rank's share of each batch: right for one rank only.
  dsrt::write_npy(path("data/x.npy"), Owned(DType::F32, {2, 2 * 3}));
  if (N() == 1) {
    EXPECT_EQ(train({"--data", path("data"), "--steps", "1"}), 0) << err_;
    return;
  }
  EXPECT_EQ(train({"--data", path("data"), "--steps", "1"}), 1);
  EXPECT_NE(err_.find("expected f32 [n, " + std::to_string(N() * 2 * 3) +
                      "] (n >= 1 batches of " + std::to_string(N()) +
                      " ranks x 2 micro-batches of [3])"),
            std::string::npos)
      << err_;
}

}  // namespace

// Properties of the backward kernels and optimizer steps that the PyTorch
// cases do not show: updates in place give the same bits as out of place,
// and results on inputs large enough to split do not depend on the thread
// count (the cases only compare 1 and 2 threads, on small inputs).
#include "dsrt/kernels.h"

#include "test_util.h"

#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <random>

namespace {

using dsrt::DType;
using dsrt::Shape;
using dsrt::Stream;
using dsrt::Tensor;
using dsrt_test::Owned;

Owned random(DType dtype, Shape shape, unsigned seed, double lo = -1.0, double hi = 1.0) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> values(static_cast<size_t>(shape.numel()));
  for (double &v : values)
    v = dist(rng);
  return Owned::of(dtype, shape, values);
}

Owned random_indices(DType dtype, Shape shape, unsigned seed, int64_t lo, int64_t hi) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int64_t> dist(lo, hi - 1);
  std::vector<double> values(static_cast<size_t>(shape.numel()));
  for (double &v : values)
    v = static_cast<double>(dist(rng));
  return Owned::of(dtype, shape, values);
}

//===----------------------------------------------------------------------===//
// Optimizer steps in place
//===----------------------------------------------------------------------===//

class InPlace : public testing::TestWithParam<DType> {};

// Runs `step(param_out, state_out...)` once into fresh outputs and once over
// copies of the inputs, and compares the bytes.
TEST_P(InPlace, OptimizerStepsMatchOutOfPlace) {
  const DType dt = GetParam();
  const Shape shape{37, 1500}; // above the parallel grain
  Stream s(dsrt::Backend::Cpu, 2);
  Owned lr = Owned::of(DType::F32, Shape{}, {1e-2});
  Owned step = Owned::of(DType::I64, Shape{}, {3});
  Owned p = random(dt, shape, 1), g = random(dt, shape, 2), m = random(dt, shape, 3, -0.1, 0.1),
        v = random(dt, shape, 4, 0.0, 0.01);
  for (bool decoupled : {true, false}) {
    Owned po(dt, shape), mo(dt, shape), vo(dt, shape);
    dsrt::adamw(s, lr, step, p, g, m, v, po, mo, vo, 0.9f, 0.999f, 1e-8f, 0.1f, decoupled);
    Owned pi = p, mi = m, vi = v;
    dsrt::adamw(s, lr, step, pi, g, mi, vi, pi, mi, vi, 0.9f, 0.999f, 1e-8f, 0.1f, decoupled);
    EXPECT_EQ(pi.bytes(), po.bytes()) << "adamw decoupled=" << decoupled;
    EXPECT_EQ(mi.bytes(), mo.bytes());
    EXPECT_EQ(vi.bytes(), vo.bytes());
    EXPECT_NE(po.bytes(), p.bytes());
  }
  for (float momentum : {0.0f, 0.9f}) {
    for (bool nesterov : {false, true}) {
      if (nesterov && momentum == 0.0f)
        continue;
      Owned po(dt, shape), vo(dt, shape);
      dsrt::sgd(s, lr, step, p, g, m, po, vo, momentum, 0.0f, 0.01f, nesterov);
      Owned pi = p, vi = m;
      dsrt::sgd(s, lr, step, pi, g, vi, pi, vi, momentum, 0.0f, 0.01f, nesterov);
      EXPECT_EQ(pi.bytes(), po.bytes()) << "sgd momentum=" << momentum << " nesterov=" << nesterov;
      EXPECT_EQ(vi.bytes(), vo.bytes());
    }
  }
  Owned po(dt, shape), mo(dt, shape);
  dsrt::lion(s, lr, p, g, m, po, mo, 0.9f, 0.99f, 0.1f);
  Owned pi = p, mi = m;
  dsrt::lion(s, lr, pi, g, mi, pi, mi, 0.9f, 0.99f, 0.1f);
  EXPECT_EQ(pi.bytes(), po.bytes()) << "lion";
  EXPECT_EQ(mi.bytes(), mo.bytes());
}

// adamw_multi updates each tensor of its list with adamw's bits, whatever
// the thread count: its one parallel region cuts the concatenated elements
// across tensors. With and without a grad_scale; a gradient scaled by 1 is
// the gradient.
TEST_P(InPlace, AdamWMultiMatchesPerTensorUpdates) {
  const DType dt = GetParam();
  const std::vector<Shape> shapes{{3}, {41000}, {5, 7}, {70000}, {1}, {300, 11}};
  Owned lr = Owned::of(DType::F32, Shape{}, {1e-2});
  Owned step = Owned::of(DType::I64, Shape{}, {2});
  Owned scale = Owned::of(DType::F32, Shape{}, {0.3});
  Owned one = Owned::of(DType::F32, Shape{}, {1.0});
  for (const Owned *gs : std::initializer_list<const Owned *>{nullptr, &scale, &one}) {
    const Tensor *grad_scale = gs ? &gs->t() : nullptr;
    std::vector<Owned> ps, g, ms, vs, po, mo, vo;
    for (size_t i = 0; i < shapes.size(); ++i) {
      const unsigned seed = static_cast<unsigned>(10 * i);
      ps.push_back(random(dt, shapes[i], seed + 1));
      // An f32 parameter's gradient may be bf16 (mixed precision); a 16-bit
      // parameter's has its type.
      g.push_back(random(dt == DType::F32 && i % 2 ? DType::BF16 : dt, shapes[i], seed + 2));
      ms.push_back(random(dt, shapes[i], seed + 3, -0.1, 0.1));
      vs.push_back(random(dt, shapes[i], seed + 4, 0.0, 0.01));
    }
    // The reference: adamw on each tensor.
    std::vector<Owned> pr, mr, vr;
    Stream one_thread(dsrt::Backend::Cpu, 1);
    for (size_t i = 0; i < shapes.size(); ++i) {
      pr.emplace_back(dt, shapes[i]);
      mr.emplace_back(dt, shapes[i]);
      vr.emplace_back(dt, shapes[i]);
      dsrt::adamw(one_thread, lr, step, ps[i], g[i], ms[i], vs[i], pr[i], mr[i], vr[i], 0.9f,
                  0.999f, 1e-8f, 0.1f, true, grad_scale);
    }
    if (gs == &one)
      for (size_t i = 0; i < shapes.size(); ++i) {
        Owned plain(dt, shapes[i]), pm(dt, shapes[i]), pv(dt, shapes[i]);
        dsrt::adamw(one_thread, lr, step, ps[i], g[i], ms[i], vs[i], plain, pm, pv, 0.9f, 0.999f,
                    1e-8f, 0.1f, true);
        EXPECT_EQ(plain.bytes(), pr[i].bytes()) << "grad_scale 1, tensor " << i;
      }
    for (int threads : {1, 2, 3}) {
      Stream s(dsrt::Backend::Cpu, threads);
      std::vector<Tensor> tp, tg, tm, tv, tpo, tmo, tvo;
      std::vector<Owned> outs;
      outs.reserve(3 * shapes.size());
      for (size_t i = 0; i < shapes.size(); ++i) {
        tp.push_back(ps[i]);
        tg.push_back(g[i]);
        tm.push_back(ms[i]);
        tv.push_back(vs[i]);
        outs.emplace_back(dt, shapes[i]);
        tpo.push_back(outs.back());
        outs.emplace_back(dt, shapes[i]);
        tmo.push_back(outs.back());
        outs.emplace_back(dt, shapes[i]);
        tvo.push_back(outs.back());
      }
      dsrt::adamw_multi(s, lr, step, static_cast<int>(shapes.size()), tp.data(), tg.data(),
                        tm.data(), tv.data(), tpo.data(), tmo.data(), tvo.data(), 0.9f, 0.999f,
                        1e-8f, 0.1f, true, grad_scale);
      for (size_t i = 0; i < shapes.size(); ++i) {
        EXPECT_EQ(outs[3 * i].bytes(), pr[i].bytes())
            << "param " << i << ", " << threads << " threads, scale " << (gs ? "yes" : "no");
        EXPECT_EQ(outs[3 * i + 1].bytes(), mr[i].bytes()) << "m " << i;
        EXPECT_EQ(outs[3 * i + 2].bytes(), vr[i].bytes()) << "v " << i;
      }
    }
    if (gs == &scale) {  // the scale is applied: not the unscaled update
      Owned plain(dt, shapes[1]), pm(dt, shapes[1]), pv(dt, shapes[1]);
      dsrt::adamw(one_thread, lr, step, ps[1], g[1], ms[1], vs[1], plain, pm, pv, 0.9f, 0.999f,
                  1e-8f, 0.1f, true);
      EXPECT_NE(plain.bytes(), pr[1].bytes());
    }
  }
}

// Mixed precision's 16-bit copy written by the update itself (param_copy)
// is the updated f32 parameter rounded as dsrt::cast (ds.cast) rounds it,
// and the update's other outputs are the bits of the update without a copy.
// bf16's copy is also checked against round-to-nearest-even computed here
// from the f32 bits, and the data has elements where truncating would give
// another value, so a copy rounded by truncation fails.
uint16_t bf16_nearest_even(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  if ((bits & 0x7fffffffu) > 0x7f800000u)
    return static_cast<uint16_t>((bits >> 16) | 0x40);  // NaN stays NaN
  return static_cast<uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

TEST(ParamCopy, UpdateWritesTheRoundedParameterInItsLoop) {
  const Shape shape{37, 1500}; // above the parallel grain
  Stream s(dsrt::Backend::Cpu, 2);
  Owned lr = Owned::of(DType::F32, Shape{}, {1e-2});
  Owned step = Owned::of(DType::I64, Shape{}, {3});
  Owned scale = Owned::of(DType::F32, Shape{}, {0.5});
  Owned p = random(DType::F32, shape, 1), g = random(DType::BF16, shape, 2),
        m = random(DType::F32, shape, 3, -0.1, 0.1), v = random(DType::F32, shape, 4, 0.0, 0.01);
  // Each optimizer: run(param_out, state outputs, copy or null).
  using Run = std::function<void(const Tensor &, const Tensor &, const Tensor &, const Tensor *)>;
  const std::vector<std::pair<const char *, Run>> updates = {
      {"adamw",
       [&](const Tensor &po, const Tensor &o1, const Tensor &o2, const Tensor *copy) {
         dsrt::adamw(s, lr, step, p, g, m, v, po, o1, o2, 0.9f, 0.999f, 1e-8f, 0.1f, true,
                     &scale.t(), copy);
       }},
      {"adamw_multi",
       [&](const Tensor &po, const Tensor &o1, const Tensor &o2, const Tensor *copy) {
         const Tensor ps[] = {p}, gs[] = {g}, ms[] = {m}, vs[] = {v}, pos[] = {po}, mos[] = {o1},
                      vos[] = {o2};
         dsrt::adamw_multi(s, lr, step, 1, ps, gs, ms, vs, pos, mos, vos, 0.9f, 0.999f, 1e-8f,
                           0.1f, true, &scale.t(), copy);
       }},
      {"sgd",
       [&](const Tensor &po, const Tensor &o1, const Tensor &, const Tensor *copy) {
         dsrt::sgd(s, lr, step, p, g, m, po, o1, 0.9f, 0.0f, 0.01f, true, &scale.t(), copy);
       }},
      {"lion",
       [&](const Tensor &po, const Tensor &o1, const Tensor &, const Tensor *copy) {
         dsrt::lion(s, lr, p, g, m, po, o1, 0.9f, 0.99f, 0.1f, &scale.t(), copy);
       }},
  };
  for (const auto &[name, run] : updates) {
    for (DType low : {DType::BF16, DType::F16}) {
      SCOPED_TRACE(std::string(name) + " -> " + dsrt::dtype_name(low));
      Owned po(DType::F32, shape), o1(DType::F32, shape), o2(DType::F32, shape);
      run(po, o1, o2, nullptr);
      Owned fo(DType::F32, shape), f1(DType::F32, shape), f2(DType::F32, shape);
      Owned copy(low, shape);
      run(fo, f1, f2, &copy.t());
      EXPECT_EQ(fo.bytes(), po.bytes());
      EXPECT_EQ(f1.bytes(), o1.bytes());
      EXPECT_EQ(f2.bytes(), o2.bytes());
      Owned cast(low, shape);
      dsrt::cast(s, po, cast);
      EXPECT_EQ(copy.bytes(), cast.bytes()) << "not the bits of cast";
      if (low != DType::BF16)
        continue;
      const float *updated = po.t().as<float>();
      const uint16_t *bits = copy.t().as<uint16_t>();
      int64_t truncation_differs = 0, wrong = 0;
      for (int64_t i = 0; i < shape.numel(); ++i) {
        uint32_t f;
        std::memcpy(&f, &updated[i], sizeof f);
        truncation_differs += static_cast<uint16_t>(f >> 16) != bf16_nearest_even(updated[i]);
        wrong += bits[i] != bf16_nearest_even(updated[i]);
      }
      EXPECT_EQ(wrong, 0) << "elements not rounded to nearest even";
      EXPECT_GT(truncation_differs, shape.numel() / 4) << "the data cannot tell rounding modes";
    }
  }
  // A copy that is not 16 bits, or not of the parameter's shape, is refused.
  Owned po(DType::F32, shape), o1(DType::F32, shape), o2(DType::F32, shape);
  Owned wide(DType::F32, shape), small(DType::BF16, Shape{37});
  EXPECT_DSRT_ERROR(updates[0].second(po, o1, o2, &wide.t()), "dsrt::adamw", "param_copy");
  EXPECT_DSRT_ERROR(updates[2].second(po, o1, o2, &small.t()), "dsrt::sgd", "param_copy");
}

INSTANTIATE_TEST_SUITE_P(Types, InPlace, testing::Values(DType::F32, DType::BF16),
                         [](const testing::TestParamInfo<DType> &info) {
                           return std::string(dsrt::dtype_name(info.param));
                         });

//===----------------------------------------------------------------------===//
// Thread-count independence
//===----------------------------------------------------------------------===//

// Runs `kernel(stream, outputs)` on 1 thread and on several other counts
// (more than the machine has is fine) and requires identical output bytes.
void expect_same_bits(const char *what, const std::vector<Owned *> &outputs,
                      const std::function<void(Stream &)> &kernel) {
  Stream one(dsrt::Backend::Cpu, 1);
  kernel(one);
  std::vector<std::vector<unsigned char>> reference;
  for (Owned *o : outputs)
    reference.push_back(o->bytes());
  for (int threads : {2, 3, 4, 7}) {
    Stream s(dsrt::Backend::Cpu, threads);
    for (Owned *o : outputs)
      std::memset(const_cast<void *>(o->t().data), 0xFF, o->bytes().size());
    kernel(s);
    for (size_t k = 0; k < outputs.size(); ++k)
      EXPECT_TRUE(outputs[k]->bytes() == reference[k])
          << what << ": output " << k << " differs between 1 and " << threads << " threads";
  }
}

TEST(SameBits, GatherGradWithManyRepeatedIndices) {
  // An embedding backward: 6000 tokens into 500 rows, negative ids too.
  Owned idx = random_indices(DType::I64, Shape{6000}, 5, -500, 500);
  Owned dy = random(DType::F32, Shape{6000, 64}, 6);
  Owned dd(DType::F32, Shape{500, 64});
  std::vector<float> ws0(dsrt::gather_grad_workspace_bytes(DType::F32, dd.t().shape,
                                                           idx.t().shape, 0) / 4);
  expect_same_bits("gather_grad axis 0", {&dd}, [&](Stream &s) {
    dsrt::gather_grad(s, dy, idx, dd, 0, {ws0.data(), static_cast<int64_t>(ws0.size() * 4)});
  });
  Owned idx1 = random_indices(DType::I32, Shape{40}, 7, 0, 9);
  Owned dy1 = random(DType::BF16, Shape{300, 40, 30}, 8);
  Owned dd1(DType::BF16, Shape{300, 9, 30});
  const int64_t bytes =
      dsrt::gather_grad_workspace_bytes(DType::BF16, dd1.t().shape, idx1.t().shape, 1);
  std::vector<float> acc(bytes / 4);
  const dsrt::Workspace ws{acc.data(), bytes};
  expect_same_bits("gather_grad axis 1", {&dd1},
                   [&](Stream &s) { dsrt::gather_grad(s, dy1, idx1, dd1, 1, ws); });
}

TEST(SameBits, NormalizationGradients) {
  Owned x = random(DType::F32, Shape{2000, 96}, 9, -2, 2),
        dy = random(DType::F32, Shape{2000, 96}, 10);
  Owned g = random(DType::F32, Shape{96}, 11, 0.5, 1.5), b = random(DType::F32, Shape{96}, 12);
  Owned y(DType::F32, Shape{2000, 96}), mean(DType::F32, Shape{2000, 1}),
      inv(DType::F32, Shape{2000, 1});
  Stream s(dsrt::Backend::Cpu, 1);
  dsrt::layer_norm(s, x, g, &b.t(), y, mean, inv, 1, 1e-5f, {});
  Owned dx(DType::F32, Shape{2000, 96}), dg(DType::F32, Shape{96}), db(DType::F32, Shape{96});
  std::vector<float> ln_ws(static_cast<size_t>(
      dsrt::layer_norm_grad_workspace_bytes(DType::F32, Shape{2000, 96}, Shape{96}, 1) / 4));
  const dsrt::Workspace lws{ln_ws.data(), static_cast<int64_t>(ln_ws.size() * 4)};
  expect_same_bits("layer_norm_grad", {&dx, &dg, &db}, [&](Stream &st) {
    dsrt::layer_norm_grad(st, dy, x, g, mean, inv, dx, dg, &db.t(), 1, lws);
  });

  const Shape bn{8, 6, 40, 40};
  Owned bx = random(DType::F32, bn, 13), bdy = random(DType::F32, bn, 14);
  Owned bg = random(DType::F32, Shape{6}, 15, 0.5, 1.5), sm = random(DType::F32, Shape{6}, 16),
        si = random(DType::F32, Shape{6}, 17, 0.5, 2.0);
  Owned bdx(DType::F32, bn), bdg(DType::F32, Shape{6}), bdb(DType::F32, Shape{6});
  expect_same_bits("batch_norm_grad", {&bdx, &bdg, &bdb}, [&](Stream &st) {
    dsrt::batch_norm_grad(st, bdy, bx, bg, sm, si, bdx, bdg, bdb);
  });

  Owned sy = random(DType::F32, Shape{300, 500}, 18, 0, 0.01),
        sdy = random(DType::F32, Shape{300, 500}, 19);
  Owned sdx(DType::F32, Shape{300, 500});
  for (int axis : {0, 1})
    expect_same_bits("softmax_grad", {&sdx},
                     [&](Stream &st) { dsrt::softmax_grad(st, sy, sdy, sdx, axis, {}); });
}

TEST(SameBits, LossPoolingAndSumOfSquares) {
  Owned lp = random(DType::F32, Shape{512, 1000}, 20, -9, -5);
  Owned labels = random_indices(DType::I64, Shape{512}, 21, 0, 1000);
  Owned dloss = Owned::of(DType::F32, Shape{}, {1.0});
  Owned ds(DType::F32, Shape{512, 1000});
  expect_same_bits("softmax_cross_entropy_grad", {&ds}, [&](Stream &s) {
    dsrt::softmax_cross_entropy_grad(s, dloss, lp, labels, nullptr, ds, dsrt::Reduction::Mean,
                                     false, 0);
  });

  const Shape xs{8, 16, 40, 40};
  Owned x = random(DType::F32, xs, 22), dy = random(DType::F32, xs, 23), dx(DType::F32, xs);
  const int64_t k[] = {3, 3}, st[] = {1, 1}, pads[] = {1, 1, 1, 1}, dil[] = {1, 1};
  expect_same_bits("max_pool_grad", {&dx},
                   [&](Stream &s) { dsrt::max_pool_grad(s, dy, x, dx, k, st, pads, dil, {}); });
  expect_same_bits("avg_pool_grad", {&dx},
                   [&](Stream &s) { dsrt::avg_pool_grad(s, dy, dx, k, st, pads, false, {}); });
  // bf16 sums 128 planes in 64 f32 lanes of the workspace.
  Owned xh = random(DType::BF16, xs, 22), dyh = random(DType::BF16, xs, 23), dxh(DType::BF16, xs);
  std::vector<float> lanes(64 * 40 * 40);
  const dsrt::Workspace ws{lanes.data(), dsrt::pool_grad_workspace_bytes(DType::BF16, xs)};
  ASSERT_EQ(ws.bytes, static_cast<int64_t>(lanes.size() * sizeof(float)));
  expect_same_bits("max_pool_grad bf16", {&dxh},
                   [&](Stream &s) { dsrt::max_pool_grad(s, dyh, xh, dxh, k, st, pads, dil, ws); });
  expect_same_bits("avg_pool_grad bf16", {&dxh},
                   [&](Stream &s) { dsrt::avg_pool_grad(s, dyh, dxh, k, st, pads, false, ws); });

  Owned a = random(DType::F32, Shape{1 << 20}, 24), b = random(DType::BF16, Shape{300001}, 25);
  Tensor list[] = {a, b};
  Owned out(DType::F32, Shape{});
  expect_same_bits("sum_of_squares", {&out},
                   [&](Stream &s) { dsrt::sum_of_squares(s, list, 2, out); });
}

} // namespace

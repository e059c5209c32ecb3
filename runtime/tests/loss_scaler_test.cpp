// dsrt::LossScaler: option checks, the log wording and the checkpoint state.
// The update rule itself is checked against DeepSpeed's by loss_scaler_check.py.
#include "dsrt/loss_scaler.h"
#include "dsrt/tensor.h"

#include <gtest/gtest.h>

#include <string>

namespace {

std::string error_of(const dsrt::LossScalerOptions &o) {
  try {
    dsrt::LossScaler s(o);
  } catch (const dsrt::Error &e) {
    return e.what();
  }
  return "";
}

TEST(LossScaler, RefusesOptionsOutOfRange) {
  dsrt::LossScalerOptions o;
  o.window = 0;
  EXPECT_NE(error_of(o).find("loss_scale_window must be > 0"), std::string::npos);
  o = {};
  o.hysteresis = 0;
  EXPECT_NE(error_of(o).find("hysteresis must be > 0"), std::string::npos);
  o = {};
  o.min_scale = 0;
  EXPECT_NE(error_of(o).find("min_loss_scale"), std::string::npos);
  o = {};
  o.static_scale = -1;
  EXPECT_NE(error_of(o).find("static loss scale"), std::string::npos);
  EXPECT_EQ(error_of({}), "");
}

TEST(LossScaler, DefaultsAreDeepSpeeds) {
  dsrt::LossScaler s({});
  EXPECT_EQ(s.scale(), 65536.0);
  EXPECT_TRUE(s.is_dynamic());
  dsrt::LossScaler::State st = s.state();
  EXPECT_EQ(st.hysteresis, 2);
  EXPECT_EQ(st.iter, 0);
  EXPECT_EQ(st.last_overflow_iter, -1);
}

TEST(LossScaler, DescribesInDeepSpeedsWords) {
  dsrt::LossScalerOptions o;
  o.hysteresis = 2;
  dsrt::LossScaler s(o);
  dsrt::LossScaler::Update first = s.update(true, 1);
  EXPECT_EQ(dsrt::LossScaler::describe(first),
            "overflow, skipping step; loss scale 65536, hysteresis 2 \u2192 1");
  dsrt::LossScaler::Update second = s.update(true, 2);
  EXPECT_EQ(dsrt::LossScaler::describe(second),
            "overflow, skipping step; loss scale 65536 \u2192 32768");
  EXPECT_TRUE(second.skipped);
  EXPECT_EQ(s.scale(), 32768.0);
}

TEST(LossScaler, StateRoundTripsAndBadStateIsRefused) {
  dsrt::LossScalerOptions o;
  o.window = 2;
  dsrt::LossScaler a(o), b(o);
  for (bool overflow : {true, false, true, true, false, false})
    a.update(overflow, 1);
  b.restore(a.state());
  for (bool overflow : {false, false, true, false, false}) {
    EXPECT_EQ(a.update(overflow, 1).after, b.update(overflow, 1).after);
  }
  dsrt::LossScaler::State bad = a.state();
  bad.hysteresis = 7;
  EXPECT_THROW(b.restore(bad), dsrt::Error);
  bad = a.state();
  bad.scale = 0.5;  // below min_loss_scale
  EXPECT_THROW(b.restore(bad), dsrt::Error);
  bad = a.state();
  bad.last_overflow_iter = bad.iter;
  EXPECT_THROW(b.restore(bad), dsrt::Error);
}

TEST(LossScaler, StaticScaleNeverChangesButSkips) {
  dsrt::LossScalerOptions o;
  o.static_scale = 128;
  dsrt::LossScaler s(o);
  dsrt::LossScaler::Update u = s.update(true, 1);
  EXPECT_TRUE(u.skipped);
  EXPECT_EQ(u.after, 128.0);
  for (int i = 0; i < 3000; ++i)
    s.update(false, i + 2);
  EXPECT_EQ(s.scale(), 128.0);
}

}  // namespace

// Comparison of a kernel's output with an expected tensor, with tolerances.
#ifndef DSRT_TESTS_COMPARE_H
#define DSRT_TESTS_COMPARE_H

#include "dsrt/tensor.h"

#include <string>

namespace dsrt_test {

struct Comparison {
  bool ok = true;
  int64_t mismatches = 0;
  double max_abs_diff = 0.0;
  std::string message;  // the first few mismatches, when !ok
};

// Float elements match when |actual - expected| <= atol + rtol * |expected|,
// NaN matches NaN and infinities match exactly; integer and bool elements
// must be equal. Element type and shape must agree.
Comparison compare_tensors(const dsrt::Tensor &actual, const dsrt::Tensor &expected, double rtol,
                           double atol, int max_report = 6);

}  // namespace dsrt_test

#endif  // DSRT_TESTS_COMPARE_H

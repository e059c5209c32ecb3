#include "compare.h"

#include <cmath>
#include <cstring>
#include <sstream>

namespace dsrt_test {

Comparison compare_tensors(const dsrt::Tensor &actual, const dsrt::Tensor &expected, double rtol,
                           double atol, int max_report) {
  Comparison c;
  std::ostringstream os;
  if (actual.dtype != expected.dtype || actual.shape != expected.shape) {
    c.ok = false;
    os << "got " << dsrt::dtype_name(actual.dtype) << " " << actual.shape.str() << ", expected "
       << dsrt::dtype_name(expected.dtype) << " " << expected.shape.str();
    c.message = os.str();
    return c;
  }
  const int64_t n = expected.numel();
  const bool is_float = dsrt::is_float(expected.dtype);
  for (int64_t i = 0; i < n; ++i) {
    bool match;
    double a, e;
    if (is_float) {
      a = dsrt::load_float(actual, i);
      e = dsrt::load_float(expected, i);
      if (std::isnan(e) || std::isnan(a)) {
        match = std::isnan(e) && std::isnan(a);
      } else if (std::isinf(e) || std::isinf(a)) {
        match = a == e;
      } else {
        double diff = std::fabs(a - e);
        c.max_abs_diff = std::max(c.max_abs_diff, diff);
        match = diff <= atol + rtol * std::fabs(e);
      }
    } else if (expected.dtype == dsrt::DType::Bool) {
      // Exactly 0 or 1: a kernel that leaves other bytes is wrong.
      a = static_cast<const uint8_t *>(actual.data)[i];
      e = static_cast<const uint8_t *>(expected.data)[i] != 0;
      match = a == e;
    } else {
      int64_t ai = dsrt::load_int(actual, i), ei = dsrt::load_int(expected, i);
      a = static_cast<double>(ai);
      e = static_cast<double>(ei);
      match = ai == ei;
    }
    if (!match) {
      if (c.mismatches < max_report) {
        os.precision(9);
        os << "\n  element " << i << ": got " << a << ", expected " << e;
        if (is_float && std::isfinite(a) && std::isfinite(e))
          os << " (|diff| " << std::fabs(a - e) << ", allowed " << atol + rtol * std::fabs(e)
             << ")";
      }
      ++c.mismatches;
    }
  }
  if (c.mismatches > 0) {
    c.ok = false;
    std::ostringstream head;
    head << c.mismatches << " of " << n << " elements differ (rtol " << rtol << ", atol " << atol
         << ")";
    c.message = head.str() + os.str();
  }
  return c;
}

}  // namespace dsrt_test

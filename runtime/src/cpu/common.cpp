// Shared pieces of the cpu backend: scalar reads and writes of tensors and
// BLAS threads (the neutral checks are in kernel_checks.cpp).
#include "internal.h"

#include <cblas.h>

namespace dsrt {
namespace detail {

float float_value(const char *kernel, const char *name, const Tensor &t) {
  check_data(kernel, name, t);
  if (t.numel() < 1)
    fail(kernel, std::string(name) + " has no element");
  float value = 0.0f;
  dispatch_float(kernel, t.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    value = Elem<T>::load(t.as<T>()[0]);
  });
  return value;
}

void store_floats(const char *kernel, const char *name, const Tensor &t, const float *values) {
  check_data(kernel, name, t);
  dispatch_float(kernel, t.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    T *p = t.as<T>();
    for (int64_t i = 0, n = t.numel(); i < n; ++i)
      p[i] = Elem<T>::store(values[i]);
  });
}

void set_blas_threads(const Stream &s) {
  int n = num_threads(s);
  if (openblas_get_num_threads() != n)
    openblas_set_num_threads(n);
}

}  // namespace detail
}  // namespace dsrt

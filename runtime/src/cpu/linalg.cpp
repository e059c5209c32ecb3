// Linear algebra: matmul (NumPy semantics, batch broadcasting, transpose
// flags) and gemm. f32 goes straight to OpenBLAS sgemm with the transpose
// flags (no copies); f16 and bf16 convert to f32 in the op's workspace
// around the same path; integers use a plain triple loop with wrapping
// arithmetic.
#include "internal.h"

#include <cblas.h>

#include <limits>

namespace dsrt {

using namespace detail;

namespace {

void sgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float *a,
           int64_t lda, const float *b, int64_t ldb, float beta, float *c, int64_t ldc) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
              static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), alpha, a,
              static_cast<int>(lda), b, static_cast<int>(ldb), beta, c, static_cast<int>(ldc));
}

void check_blas_size(const char *kernel, const MatmulPlan &p) {
  const int64_t limit = std::numeric_limits<int>::max();
  if (p.m * std::max<int64_t>(1, p.batch) > limit || p.n > limit || p.k > limit)
    fail(kernel, "matrix dimensions exceed the BLAS integer range");
}

void matmul_f32(const Stream &s, const MatmulPlan &p, const float *a, const float *b, float *y) {
  const int64_t mn = p.m * p.n;
  if (p.k == 0) {
    std::fill(y, y + p.batch * mn, 0.0f);
    return;
  }
  set_blas_threads(s);
  // [B..., M, K] x [K, N]: the batch folds into M, one call.
  if (!p.b_has_batch && !p.trans_a && !p.a_vector) {
    bool a_contiguous = true;
    for (int d = 0; d < p.batch_rank; ++d)
      a_contiguous = a_contiguous && (p.batch_dims[d] == 1 || p.a_batch_stride[d] != 0);
    if (a_contiguous) {
      sgemm(false, p.trans_b, p.batch * p.m, p.n, p.k, 1.0f, a, p.lda, b, p.ldb, 0.0f, y,
            p.n);
      return;
    }
  }
  for_each_batch(p, [&](int64_t i, int64_t a_off, int64_t b_off) {
    sgemm(p.trans_a, p.trans_b, p.m, p.n, p.k, 1.0f, a + a_off, p.lda, b + b_off, p.ldb, 0.0f,
          y + i * mn, p.n);
  });
}

template <typename T>
void matmul_int(const Stream &s, const MatmulPlan &p, const T *a, const T *b, T *y) {
  using U = std::make_unsigned_t<T>;  // wrapping products and sums
  parallel_for(s, p.batch * p.m, std::max<int64_t>(1, 4096 / std::max<int64_t>(1, p.n * p.k)),
               [&](int64_t begin, int64_t end) {
                 for (int64_t r = begin; r < end; ++r) {
                   int64_t bi = r / p.m, i = r % p.m;
                   // The operands' offsets of matrix bi of the batch.
                   int64_t a_off = 0, b_off = 0;
                   for (int d = p.batch_rank - 1; d >= 0; --d) {
                     int64_t at = bi % p.batch_dims[d];
                     bi /= p.batch_dims[d];
                     a_off += at * p.a_batch_stride[d];
                     b_off += at * p.b_batch_stride[d];
                   }
                   const T *pa = a + a_off + i * p.a_rs;
                   const T *pb = b + b_off;
                   // Accumulated in y's row itself: wrapping sums are the
                   // same in any order.
                   T *out = y + r * p.n;
                   std::fill(out, out + p.n, T(0));
                   for (int64_t kk = 0; kk < p.k; ++kk) {
                     U av = static_cast<U>(pa[kk * p.a_cs]);
                     const T *row = pb + kk * p.b_rs;
                     for (int64_t j = 0; j < p.n; ++j)
                       out[j] = static_cast<T>(static_cast<U>(out[j]) +
                                               av * static_cast<U>(row[j * p.b_cs]));
                   }
                 }
               });
}

}  // namespace



void matmul(Stream &s, const Tensor &a, const Tensor &b, const Tensor &y, bool transpose_a,
            bool transpose_b, const Workspace &ws) {
  begin_kernel(s);
  const char *kernel = "matmul";
  MatmulPlan p = check_matmul(kernel, a, b, y, transpose_a, transpose_b);
  WorkspaceFloats scratch(kernel, ws, matmul_workspace_bytes(a.dtype, a.shape, b.shape, y.shape));
  if (y.numel() == 0)
    return;
  check_blas_size(kernel, p);
  dispatch_numeric(kernel, a.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same_v<T, float>) {
      matmul_f32(s, p, a.as<float>(), b.as<float>(), y.as<float>());
    } else if constexpr (std::is_integral_v<T>) {
      matmul_int<T>(s, p, a.as<T>(), b.as<T>(), y.as<T>());
    } else {
      float *fa = scratch.take(a.numel()), *fb = scratch.take(b.numel()),
            *fy = scratch.take(y.numel());
      to_f32(s, a.as<T>(), fa, a.numel());
      to_f32(s, b.as<T>(), fb, b.numel());
      matmul_f32(s, p, fa, fb, fy);
      from_f32(s, fy, y.as<T>(), y.numel());
    }
  });
}

void gemm(Stream &s, const Tensor &a, const Tensor &b, const Tensor *c, const Tensor &y,
          float alpha, float beta, bool transpose_a, bool transpose_b, const Workspace &ws) {
  begin_kernel(s);
  const char *kernel = "gemm";
  BroadcastPlan c_plan;
  MatmulPlan p = check_gemm(kernel, a, b, c, y, transpose_a, transpose_b, c_plan);
  const bool use_c = c != nullptr && beta != 0.0f;
  WorkspaceFloats scratch(kernel, ws, gemm_workspace_bytes(a.dtype, a.shape, b.shape, y.shape));
  if (y.numel() == 0)
    return;
  check_blas_size(kernel, p);
  // y (as f32) = beta * c, then sgemm accumulates alpha * op(a) op(b) on top.
  auto run = [&](const float *fa, const float *fb, const float *fc, float *fy) {
    if (p.k == 0) {
      for (int64_t i = 0, n = y.numel(); i < n; ++i)
        fy[i] = use_c ? beta * fc[i] : 0.0f;
      return;
    }
    if (use_c && fc != fy)
      std::memcpy(fy, fc, static_cast<size_t>(y.numel()) * sizeof(float));
    set_blas_threads(s);
    sgemm(p.trans_a, p.trans_b, p.m, p.n, p.k, alpha, fa, p.lda, fb, p.ldb,
          use_c ? beta : 0.0f, fy, p.n);
  };
  // c broadcast to [M, N] in f32.
  auto expand_c = [&](float *dst) {
    dispatch_float(kernel, c->dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T *fc = c->as<T>();
      const int64_t stride = c_plan.strides[0][c_plan.rank - 1];
      for_each_row(c_plan, 0, y.numel(), [&](int64_t o, const int64_t *off, int64_t n) {
        for (int64_t i = 0; i < n; ++i)
          dst[o + i] = Elem<T>::load(fc[off[0] + i * stride]);
      });
    });
  };
  dispatch_float(kernel, a.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same_v<T, float>) {
      float *fy = y.as<float>();
      const float *fc = fy;
      if (use_c && !(c->data == y.data && c->shape == y.shape)) {
        if (c->data == y.data)
          fail(kernel, "c aliases y but does not have y's shape");
        if (c->shape == y.shape)
          fc = c->as<float>();
        else
          expand_c(fy);
      }
      run(a.as<float>(), b.as<float>(), fc, fy);
    } else {
      float *fa = scratch.take(a.numel()), *fb = scratch.take(b.numel()),
            *fy = scratch.take(y.numel());
      to_f32(s, a.as<T>(), fa, a.numel());
      to_f32(s, b.as<T>(), fb, b.numel());
      if (use_c)
        expand_c(fy);
      run(fa, fb, fy, fy);
      from_f32(s, fy, y.as<T>(), y.numel());
    }
  });
}

}  // namespace dsrt

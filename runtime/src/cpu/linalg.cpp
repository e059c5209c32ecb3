// Linear algebra: matmul (NumPy semantics, batch broadcasting, transpose
// flags) and gemm. f32 goes straight to OpenBLAS sgemm with the transpose
// flags (no copies); f16 and bf16 convert tile by tile to f32 panels in the
// op's workspace (workspace_shapes.h: kMatmulTile*), sgemm accumulating each
// output tile in f32 and rounding it once; integers use a plain triple loop
// with wrapping arithmetic.
#include "elementwise_ops.h"
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

// dst[r * cols + c] = src[r * ld + c] in f32, for a rows x cols block. On
// the calling thread: a panel is small next to its sgemm, and an OpenMP
// region between two OpenBLAS calls leaves OpenMP's threads spinning
// against OpenBLAS's, which costs more than the conversion.
template <typename T>
void convert_panel(const T *src, int64_t ld, int64_t rows, int64_t cols, float *dst) {
  for (int64_t r = 0; r < rows; ++r) {
    const T *in = src + r * ld;
    float *out = dst + r * cols;
    for (int64_t c = 0; c < cols; ++c)
      out[c] = Elem<T>::load(in[c]);
  }
}

// y = alpha op(a) op(b) (+ the tile's initial values) for 16-bit a, b and y:
// each output tile of at most kMatmulTileM x kMatmulTileN accumulates in f32
// over contraction blocks of at most kMatmulTileK, converting just that
// block's panels of a and b, and is rounded to y once. `init(i0, j0, rows,
// cols, tile)` fills a tile (leading dimension cols) with the values sgemm
// adds to and returns true, or returns false for a zero start. The
// workspace holds the three panels: matmul_tile_floats(m, n, k) floats.
template <typename T, typename Init>
void matmul_tiled(const Stream &s, const MatmulPlan &p, const T *a, const T *b, T *y,
                  WorkspaceFloats &scratch, float alpha, Init &&init) {
  const int64_t tm = std::min(p.m, kMatmulTileM), tn = std::min(p.n, kMatmulTileN),
                tk = std::min(p.k, kMatmulTileK);
  float *pa = scratch.take(tm * tk), *pb = scratch.take(tk * tn), *pc = scratch.take(tm * tn);
  const int64_t mn = p.m * p.n;
  for_each_batch(p, [&](int64_t batch, int64_t a_off, int64_t b_off) {
    for (int64_t i0 = 0; i0 < p.m; i0 += tm) {
      const int64_t rows = std::min(tm, p.m - i0);
      for (int64_t j0 = 0; j0 < p.n; j0 += tn) {
        const int64_t cols = std::min(tn, p.n - j0);
        float beta = init(i0, j0, rows, cols, pc) ? 1.0f : 0.0f;
        if (p.k == 0 && beta == 0.0f)
          std::fill(pc, pc + rows * cols, 0.0f);
        for (int64_t k0 = 0; k0 < p.k; k0 += tk) {
          const int64_t depth = std::min(tk, p.k - k0);
          // Each panel keeps its operand's storage order, so sgemm applies
          // the transpose flags: op(a) rows [i0, +rows) x [k0, +depth),
          // op(b) [k0, +depth) x columns [j0, +cols).
          if (p.trans_a)
            convert_panel(a + a_off + k0 * p.lda + i0, p.lda, depth, rows, pa);
          else
            convert_panel(a + a_off + i0 * p.lda + k0, p.lda, rows, depth, pa);
          if (p.trans_b)
            convert_panel(b + b_off + j0 * p.ldb + k0, p.ldb, cols, depth, pb);
          else
            convert_panel(b + b_off + k0 * p.ldb + j0, p.ldb, depth, cols, pb);
          set_blas_threads(s);
          sgemm(p.trans_a, p.trans_b, rows, cols, depth, alpha, pa, p.trans_a ? rows : depth, pb,
                p.trans_b ? depth : cols, beta, pc, cols);
          beta = 1.0f;
        }
        T *out = y + batch * mn + i0 * p.n + j0;
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t c = 0; c < cols; ++c)
            out[r * p.n + c] = Elem<T>::store(pc[r * cols + c]);
      }
    }
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
      matmul_tiled(s, p, a.as<T>(), b.as<T>(), y.as<T>(), scratch, 1.0f,
                   [](int64_t, int64_t, int64_t, int64_t, float *) { return false; });
    }
  });
}

// y[i] = f(pre[i]) (scale null) or scale[i] * f(pre[i]), in f32 and
// rounded once: the GELU epilogues' pointwise step.
template <typename F>
void map_gelu(Stream &s, const Tensor &pre, const Tensor *scale, const Tensor &y, F f) {
  dispatch_float("matmul_gelu", y.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T *in = pre.as<T>();
    const T *by = scale ? scale->as<T>() : nullptr;
    T *out = y.as<T>();
    parallel_for(s, y.numel(), kGrainElementwise, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        float v = f(Elem<T>::load(in[i]));
        out[i] = Elem<T>::store(by ? Elem<T>::load(by[i]) * v : v);
      }
    });
  });
}

void matmul_bias(Stream &s, const Tensor &a, const Tensor &b, const Tensor &bias,
                 const Tensor *addend, const Tensor &y, bool transpose_b, const Workspace &ws) {
  begin_kernel(s);
  const char *kernel = "matmul_bias";
  MatmulPlan p = check_matmul_bias(kernel, a, b, bias, addend, y, transpose_b);
  WorkspaceFloats scratch(kernel, ws, matmul_workspace_bytes(a.dtype, a.shape, b.shape, y.shape));
  if (y.numel() == 0)
    return;
  check_blas_size(kernel, p);
  dispatch_float(kernel, a.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T *fb = bias.as<T>();
    const T *fr = addend ? addend->as<T>() : nullptr;
    if constexpr (std::is_same_v<T, float>) {
      // The product, then (product + bias) + addend in f32: the unfused
      // adds' order, so the f32 result is theirs bit for bit.
      matmul_f32(s, p, a.as<float>(), b.as<float>(), y.as<float>());
      float *fy = y.as<float>();
      parallel_for(s, p.m, std::max<int64_t>(1, 4096 / std::max<int64_t>(1, p.n)),
                   [&](int64_t begin, int64_t end) {
                     for (int64_t i = begin; i < end; ++i)
                       for (int64_t j = 0; j < p.n; ++j) {
                         float v = fy[i * p.n + j] + fb[j];
                         fy[i * p.n + j] = fr ? v + fr[i * p.n + j] : v;
                       }
                   });
    } else {
      // Each f32 tile starts at bias + addend; sgemm adds the product on
      // top and the tile is rounded once. One matrix of the batch at a
      // time: the workspace holds the panels of one matrix's tiles, as
      // matmul's does.
      MatmulPlan one = p;
      one.m = y.shape.dims[y.shape.rank - 2];
      for (int64_t m0 = 0; m0 < p.m; m0 += one.m) {
        WorkspaceFloats panels(kernel, ws,
                               matmul_workspace_bytes(a.dtype, a.shape, b.shape, y.shape));
        const T *fr0 = fr ? fr + m0 * p.n : nullptr;
        matmul_tiled(s, one, a.as<T>() + m0 * p.k, b.as<T>(), y.as<T>() + m0 * p.n, panels, 1.0f,
                     [&](int64_t i0, int64_t j0, int64_t rows, int64_t cols, float *tile) {
                       for (int64_t r = 0; r < rows; ++r)
                         for (int64_t c = 0; c < cols; ++c) {
                           float v = Elem<T>::load(fb[j0 + c]);
                           if (fr0)
                             v += Elem<T>::load(fr0[(i0 + r) * p.n + j0 + c]);
                           tile[r * cols + c] = v;
                         }
                       return true;
                     });
      }
    }
  });
}

void matmul_bias_grad(Stream &s, const Tensor &a, const Tensor &b, const Tensor &y,
                      const Tensor &bias_grad, bool transpose_a, const Workspace &ws) {
  const char *kernel = "matmul_bias_grad";
  check_matmul_bias_grad(kernel, a, b, y, bias_grad, transpose_a);
  WorkspaceFloats scratch(kernel, ws,
                          matmul_bias_grad_workspace_bytes(a.dtype, a.shape, b.shape, y.shape));
  // The reference: the product, then the column sums as reduce_sum over
  // axis 0 computes them (both use the workspace, one after the other).
  matmul(s, a, b, y, transpose_a, false, ws);
  const int64_t axis0 = 0;
  reduce(s, ReduceOp::Sum, b, bias_grad, &axis0, 1, ws);
}

void matmul_bias_gelu(Stream &s, const Tensor &a, const Tensor &b, const Tensor &bias,
                      const Tensor &y, const Tensor &pre, bool transpose_b, const Workspace &ws) {
  const char *kernel = "matmul_bias_gelu";
  check_matmul_gelu(kernel, a, b, &bias, pre, y, transpose_b);
  // The reference: the biased product into pre, then the GELU of pre as
  // stored, rounded once into y.
  matmul_bias(s, a, b, bias, nullptr, pre, transpose_b, ws);
  map_gelu(s, pre, nullptr, y, [](float v) { return detail::gelu_tanh_f32(v); });
}

void matmul_dgelu(Stream &s, const Tensor &a, const Tensor &b, const Tensor &pre,
                  const Tensor &y, bool transpose_b, const Workspace &ws) {
  const char *kernel = "matmul_dgelu";
  check_matmul_gelu(kernel, a, b, nullptr, pre, y, transpose_b);
  // The reference: the product into y, then y * gelu'(pre) in f32.
  matmul(s, a, b, y, false, transpose_b, ws);
  map_gelu(s, pre, &y, y, [](float v) { return detail::gelu_tanh_grad_f32(v); });
}

void matmul_lhs_bias_grad(Stream &s, const Tensor &a, const Tensor &b, const Tensor &y,
                          const Tensor &bias_grad, const Workspace &ws) {
  const char *kernel = "matmul_lhs_bias_grad";
  check_matmul_lhs_bias_grad(kernel, a, b, y, bias_grad);
  WorkspaceFloats scratch(
      kernel, ws, matmul_lhs_bias_grad_workspace_bytes(a.dtype, a.shape, b.shape, y.shape));
  // The reference: the product, then a's column sums as reduce_sum over
  // axis 0 computes them (both use the workspace, one after the other).
  matmul(s, a, b, y, true, false, ws);
  const int64_t axis0 = 0;
  reduce(s, ReduceOp::Sum, a, bias_grad, &axis0, 1, ws);
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
      // c(i, j) of c broadcast to [M, N] (c has rank <= 2, aligned right).
      int64_t c_row = 0, c_col = 0;
      if (use_c && c->shape.rank >= 1) {
        c_col = c->shape.dims[c->shape.rank - 1] != 1 ? 1 : 0;
        c_row = c->shape.rank == 2 && c->shape.dims[0] != 1 ? c->shape.dims[1] : 0;
      }
      matmul_tiled(s, p, a.as<T>(), b.as<T>(), y.as<T>(), scratch, alpha,
                   [&](int64_t i0, int64_t j0, int64_t rows, int64_t cols, float *tile) {
                     if (!use_c)
                       return false;
                     dispatch_float(kernel, c->dtype, [&](auto ctag) {
                       using C = typename decltype(ctag)::type;
                       const C *fc = c->as<C>();
                       for (int64_t r = 0; r < rows; ++r)
                         for (int64_t j = 0; j < cols; ++j)
                           tile[r * cols + j] = beta * Elem<C>::load(
                                                           fc[(i0 + r) * c_row + (j0 + j) * c_col]);
                     });
                     return true;
                   });
    }
  });
}

}  // namespace dsrt

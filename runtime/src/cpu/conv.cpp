// Convolution (N-d, grouped, strided, dilated, padded) as im2col + sgemm, and
// max / average pooling, with their gradients (col2im for the input's). f16
// and bf16 convert to f32 around the f32 path; the im2col matrix and the f32
// copies lie in the op's workspace.
#include "internal.h"
#include "window.h"

#include <cblas.h>

#include <limits>

namespace dsrt {

using namespace detail;

namespace {

// col[(c, k...), o...] = x[c, o * stride - pad + k * dilation] or 0 in the
// padding; rows [row_begin, row_end) of the [C * K, O] matrix.
void im2col(const Window &w, const float *x, float *col, int64_t row_begin, int64_t row_end) {
  const int s = w.spatial;
  const int last = s - 1;
  const int64_t o_last = w.out[last];
  for (int64_t r = row_begin; r < row_end; ++r) {
    int64_t c = r / w.kernel_size, kr = r % w.kernel_size;
    int64_t koff[kMaxRank];
    for (int a = s - 1; a >= 0; --a) {
      koff[a] = kr % w.kernel[a];
      kr /= w.kernel[a];
    }
    const float *xc = x + c * w.in_size;
    float *dst = col + r * w.out_size;
    // Valid output range of the last axis for this kernel offset.
    const int64_t shift = koff[last] * w.dilation[last] - w.pad_begin[last];
    const int64_t st = w.stride[last];
    int64_t lo = std::min(o_last, std::max<int64_t>(0, ceil_div(-shift, st)));
    int64_t hi = std::min(o_last, std::max<int64_t>(lo, ceil_div(w.in[last] - shift, st)));
    int64_t idx[kMaxRank] = {};
    for (int64_t outer = 0, count = w.out_size / o_last; outer < count; ++outer) {
      float *seg = dst + outer * o_last;
      int64_t base = 0;
      bool valid = true;
      for (int a = 0; a < last; ++a) {
        int64_t i = idx[a] * w.stride[a] - w.pad_begin[a] + koff[a] * w.dilation[a];
        valid = valid && i >= 0 && i < w.in[a];
        base = base * w.in[a] + i;
      }
      if (!valid) {
        std::fill(seg, seg + o_last, 0.0f);
      } else {
        const float *src = xc + base * w.in[last] + shift;
        std::fill(seg, seg + lo, 0.0f);
        if (st == 1)
          std::memcpy(seg + lo, src + lo, static_cast<size_t>(hi - lo) * sizeof(float));
        else
          for (int64_t o = lo; o < hi; ++o)
            seg[o] = src[o * st];
        std::fill(seg + hi, seg + o_last, 0.0f);
      }
      for (int a = last - 1; a >= 0; --a) {
        if (++idx[a] < w.out[a])
          break;
        idx[a] = 0;
      }
    }
  }
}


void conv_f32(const Stream &s, const Window &win, int64_t n, int64_t c, int64_t m, int64_t group,
              const float *x, const float *w, const float *bias, float *y, float *col) {
  const int64_t cg = c / group, mg = m / group;
  const int64_t rows = cg * win.kernel_size, cols = win.out_size;
  const bool pointwise = is_pointwise(win);
  for (int64_t b = 0; b < n; ++b) {
    for (int64_t g = 0; g < group; ++g) {
      const float *xg = x + (b * c + g * cg) * win.in_size;
      const float *colp = xg;  // a 1x1 stride-1 convolution reads x as is
      if (!pointwise) {
        parallel_for(s, rows, std::max<int64_t>(1, kGrainElementwise / cols),
                     [&](int64_t begin, int64_t end) { im2col(win, xg, col, begin, end); });
        colp = col;
      }
      if (rows == 0) {
        std::fill(y + (b * m + g * mg) * cols, y + (b * m + (g + 1) * mg) * cols, 0.0f);
        continue;
      }
      set_blas_threads(s);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(mg),
                  static_cast<int>(cols), static_cast<int>(rows), 1.0f, w + g * mg * rows,
                  static_cast<int>(rows), colp, static_cast<int>(cols), 0.0f,
                  y + (b * m + g * mg) * cols, static_cast<int>(cols));
    }
  }
  if (bias) {
    parallel_for(s, n * m, std::max<int64_t>(1, kGrainElementwise / cols),
                 [&](int64_t begin, int64_t end) {
                   for (int64_t p = begin; p < end; ++p) {
                     const float v = bias[p % m];
                     float *out = y + p * cols;
                     for (int64_t i = 0; i < cols; ++i)
                       out[i] += v;
                   }
                 });
  }
}

}  // namespace

void conv(Stream &s, const Tensor &x, const Tensor &w, const Tensor *bias, const Tensor &y,
          const int64_t *strides, const int64_t *pads, const int64_t *dilations, int64_t group,
          const Workspace &ws) {
  begin_kernel(s);
  const char *kernel = "conv";
  Window win = check_conv(kernel, x, w, bias, y, strides, pads, dilations, group);
  const int64_t n = x.shape.dims[0], c = x.shape.dims[1], m = w.shape.dims[0];
  WorkspaceFloats scratch(kernel, ws,
                          conv_workspace_bytes(x.dtype, x.shape, w.shape, y.shape,
                                               bias != nullptr, strides, pads, group));
  if (y.numel() == 0)
    return;
  float *col = scratch.take(im2col_floats(x.shape, w.shape, y.shape, strides, pads, c / group));
  dispatch_float(kernel, x.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same_v<T, float>) {
      conv_f32(s, win, n, c, m, group, x.as<float>(), w.as<float>(),
               bias ? bias->as<float>() : nullptr, y.as<float>(), col);
    } else {
      float *fx = scratch.take(x.numel()), *fw = scratch.take(w.numel()),
            *fy = scratch.take(y.numel()), *fb = bias ? scratch.take(m) : nullptr;
      to_f32(s, x.as<T>(), fx, x.numel());
      to_f32(s, w.as<T>(), fw, w.numel());
      if (bias)
        to_f32(s, bias->as<T>(), fb, m);
      conv_f32(s, win, n, c, m, group, fx, fw, fb, fy, col);
      from_f32(s, fy, y.as<T>(), y.numel());
    }
  });
}

//===----------------------------------------------------------------------===//
// conv_grad_input, conv_grad_weight
//===----------------------------------------------------------------------===//

namespace {

// col2im of one channel: the transpose of im2col's rows [c K, (c + 1) K),
// which sums every column entry back into the input position it was read
// from (padding taps are dropped). dx_c, one input plane, is overwritten.
// The kernel offsets are visited in order, so the sums do not depend on how
// channels are split between threads.
void col2im_channel(const Window &w, const float *col_c, float *dx_c) {
  const int s = w.spatial;
  const int last = s - 1;
  const int64_t o_last = w.out[last];
  std::fill(dx_c, dx_c + w.in_size, 0.0f);
  for (int64_t kr = 0; kr < w.kernel_size; ++kr) {
    int64_t koff[kMaxRank];
    int64_t rest = kr;
    for (int a = s - 1; a >= 0; --a) {
      koff[a] = rest % w.kernel[a];
      rest /= w.kernel[a];
    }
    const float *row = col_c + kr * w.out_size;
    const int64_t shift = koff[last] * w.dilation[last] - w.pad_begin[last];
    const int64_t st = w.stride[last];
    const int64_t lo = std::min(o_last, std::max<int64_t>(0, ceil_div(-shift, st)));
    const int64_t hi = std::min(o_last, std::max<int64_t>(lo, ceil_div(w.in[last] - shift, st)));
    int64_t idx[kMaxRank] = {};
    for (int64_t outer = 0, count = w.out_size / o_last; outer < count; ++outer) {
      int64_t base = 0;
      bool valid = true;
      for (int a = 0; a < last; ++a) {
        int64_t i = idx[a] * w.stride[a] - w.pad_begin[a] + koff[a] * w.dilation[a];
        valid = valid && i >= 0 && i < w.in[a];
        base = base * w.in[a] + i;
      }
      if (valid && hi > lo) {
        const float *seg = row + outer * o_last;
        // Input position of output o on the last axis: start + o * st.
        float *dst = dx_c + (base * w.in[last] + shift + lo * st);
        const float *src = seg + lo;
        const int64_t len = hi - lo;
        if (st == 1) {
#pragma omp simd
          for (int64_t o = 0; o < len; ++o)
            dst[o] += src[o];
        } else {
          for (int64_t o = 0; o < len; ++o)
            dst[o * st] += src[o];
        }
      }
      for (int a = last - 1; a >= 0; --a) {
        if (++idx[a] < w.out[a])
          break;
        idx[a] = 0;
      }
    }
  }
}

// dx = conv^T(dy): per image, col = W_g^T dy_g for every group (sgemm), then
// col2im in parallel over the channels.
void conv_grad_input_f32(const Stream &s, const Window &win, int64_t n, int64_t c, int64_t m,
                         int64_t group, const float *dy, const float *w, float *dx, float *col) {
  const int64_t cg = c / group, mg = m / group;
  const int64_t rows = cg * win.kernel_size, cols = win.out_size;
  if (mg == 0 || cols == 0) {  // no output channel or position reads x
    std::fill(dx, dx + n * c * win.in_size, 0.0f);
    return;
  }
  if (is_pointwise(win)) {  // dx_g = W_g^T dy_g directly
    for (int64_t b = 0; b < n; ++b)
      for (int64_t g = 0; g < group; ++g) {
        set_blas_threads(s);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, static_cast<int>(cg),
                    static_cast<int>(cols), static_cast<int>(mg), 1.0f, w + g * mg * cg,
                    static_cast<int>(cg), dy + (b * m + g * mg) * cols, static_cast<int>(cols),
                    0.0f, dx + (b * c + g * cg) * cols, static_cast<int>(cols));
      }
    return;
  }
  // Channel cc of the image owns rows [cc K, (cc + 1) K) of col, whatever its
  // group.
  for (int64_t b = 0; b < n; ++b) {
    for (int64_t g = 0; g < group; ++g) {
      set_blas_threads(s);
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, static_cast<int>(rows),
                  static_cast<int>(cols), static_cast<int>(mg), 1.0f, w + g * mg * rows,
                  static_cast<int>(rows), dy + (b * m + g * mg) * cols, static_cast<int>(cols),
                  0.0f, col + g * rows * cols, static_cast<int>(cols));
    }
    const int64_t per_channel = win.kernel_size * cols;
    parallel_for(s, c, std::max<int64_t>(1, kGrainElementwise / per_channel),
                 [&](int64_t begin, int64_t end) {
                   for (int64_t cc = begin; cc < end; ++cc)
                     col2im_channel(win, col + cc * per_channel,
                                    dx + (b * c + cc) * win.in_size);
                 });
  }
}

// dw_g = sum over images of dy_g im2col(x_g)^T, accumulated by sgemm.
void conv_grad_weight_f32(const Stream &s, const Window &win, int64_t n, int64_t c, int64_t m,
                          int64_t group, const float *dy, const float *x, float *dw, float *col) {
  const int64_t cg = c / group, mg = m / group;
  const int64_t rows = cg * win.kernel_size, cols = win.out_size;
  if (n == 0 || cols == 0 || rows == 0) {
    std::fill(dw, dw + m * rows, 0.0f);
    return;
  }
  const bool pointwise = is_pointwise(win);
  for (int64_t b = 0; b < n; ++b) {
    for (int64_t g = 0; g < group; ++g) {
      const float *xg = x + (b * c + g * cg) * win.in_size;
      const float *colp = xg;
      if (!pointwise) {
        parallel_for(s, rows, std::max<int64_t>(1, kGrainElementwise / cols),
                     [&](int64_t begin, int64_t end) { im2col(win, xg, col, begin, end); });
        colp = col;
      }
      set_blas_threads(s);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(mg),
                  static_cast<int>(rows), static_cast<int>(cols), 1.0f,
                  dy + (b * m + g * mg) * cols, static_cast<int>(cols), colp,
                  static_cast<int>(cols), b == 0 ? 0.0f : 1.0f, dw + g * mg * rows,
                  static_cast<int>(rows));
    }
  }
}


}  // namespace

void conv_grad_input(Stream &s, const Tensor &dy, const Tensor &w, const Tensor &dx,
                     const int64_t *strides, const int64_t *pads, const int64_t *dilations,
                     int64_t group, const Workspace &ws) {
  begin_kernel(s);
  const char *kernel = "conv_grad_input";
  Window win = check_conv_grad(kernel, dx, "dx", w, "w", dy, strides, pads, dilations, group);
  WorkspaceFloats scratch(kernel, ws,
                          conv_grad_input_workspace_bytes(dx.dtype, dy.shape, w.shape, dx.shape,
                                                          strides, pads, group));
  if (dx.numel() == 0)
    return;
  const int64_t n = dx.shape.dims[0], c = dx.shape.dims[1], m = w.shape.dims[0];
  float *col = scratch.take(im2col_floats(dx.shape, w.shape, dy.shape, strides, pads, c));
  dispatch_float(kernel, dx.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same_v<T, float>) {
      conv_grad_input_f32(s, win, n, c, m, group, dy.as<float>(), w.as<float>(), dx.as<float>(),
                          col);
    } else {
      float *fdy = scratch.take(dy.numel()), *fw = scratch.take(w.numel()),
            *fdx = scratch.take(dx.numel());
      to_f32(s, dy.as<T>(), fdy, dy.numel());
      to_f32(s, w.as<T>(), fw, w.numel());
      conv_grad_input_f32(s, win, n, c, m, group, fdy, fw, fdx, col);
      from_f32(s, fdx, dx.as<T>(), dx.numel());
    }
  });
}

void conv_grad_weight(Stream &s, const Tensor &dy, const Tensor &x, const Tensor &dw,
                      const int64_t *strides, const int64_t *pads, const int64_t *dilations,
                      int64_t group, const Workspace &ws) {
  begin_kernel(s);
  const char *kernel = "conv_grad_weight";
  Window win = check_conv_grad(kernel, x, "x", dw, "dw", dy, strides, pads, dilations, group);
  WorkspaceFloats scratch(kernel, ws,
                          conv_grad_weight_workspace_bytes(dw.dtype, dy.shape, x.shape, dw.shape,
                                                           strides, pads, group));
  if (dw.numel() == 0)
    return;
  const int64_t n = x.shape.dims[0], c = x.shape.dims[1], m = dw.shape.dims[0];
  float *col = scratch.take(im2col_floats(x.shape, dw.shape, dy.shape, strides, pads, c / group));
  dispatch_float(kernel, dw.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same_v<T, float>) {
      conv_grad_weight_f32(s, win, n, c, m, group, dy.as<float>(), x.as<float>(), dw.as<float>(),
                           col);
    } else {
      float *fdy = scratch.take(dy.numel()), *fx = scratch.take(x.numel()),
            *fdw = scratch.take(dw.numel());
      to_f32(s, dy.as<T>(), fdy, dy.numel());
      to_f32(s, x.as<T>(), fx, x.numel());
      conv_grad_weight_f32(s, win, n, c, m, group, fdy, fx, fdw, col);
      from_f32(s, fdw, dw.as<T>(), dw.numel());
    }
  });
}

//===----------------------------------------------------------------------===//
// Pooling
//===----------------------------------------------------------------------===//

namespace {

// Calls f(out_index, idx[], begin[], count[]) per output position of one
// plane (window_taps gives begin and count).
template <typename F> void for_each_window(const Window &w, F &&f) {
  int64_t idx[kMaxRank] = {};
  int64_t kbegin[kMaxRank], kcount[kMaxRank];
  for (int64_t o = 0; o < w.out_size; ++o) {
    window_taps(w, idx, kbegin, kcount);
    f(o, idx, kbegin, kcount);
    for (int a = w.spatial - 1; a >= 0; --a) {
      if (++idx[a] < w.out[a])
        break;
      idx[a] = 0;
    }
  }
}

}  // namespace

void max_pool(Stream &s, const Tensor &x, const Tensor &y, const int64_t *kernel,
              const int64_t *strides, const int64_t *pads, const int64_t *dilations) {
  begin_kernel(s);
  const char *name = "max_pool";
  check_pool(name, x, y);
  Window win = make_window(name, x, y, kernel, strides, pads, dilations, true);
  const int64_t planes = x.shape.dims[0] * x.shape.dims[1];
  if (y.numel() == 0)
    return;
  dispatch_float(name, x.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T *px = x.as<T>();
    T *py = y.as<T>();
    parallel_for(s, planes, std::max<int64_t>(1, kGrainElementwise / (win.out_size * win.kernel_size)),
                 [&](int64_t begin, int64_t end) {
                   for (int64_t p = begin; p < end; ++p) {
                     const T *in = px + p * win.in_size;
                     T *out = py + p * win.out_size;
                     for_each_window(win, [&](int64_t o, const int64_t *idx, const int64_t *kb,
                                              const int64_t *kc) {
                       // Padding never wins; a NaN does, as in PyTorch.
                       float m = -std::numeric_limits<float>::infinity();
                       for_each_tap(win, idx, kb, kc, [&](int64_t off) {
                         float v = to_float(in[off]);
                         if (m == m && (v > m || v != v))
                           m = v;
                       });
                       out[o] = from_float<T>(m);
                     });
                   }
                 });
  });
}

void avg_pool(Stream &s, const Tensor &x, const Tensor &y, const int64_t *kernel,
              const int64_t *strides, const int64_t *pads, bool count_include_pad) {
  begin_kernel(s);
  const char *name = "avg_pool";
  check_pool(name, x, y);
  Window win = make_window(name, x, y, kernel, strides, pads, nullptr, true);
  const int64_t planes = x.shape.dims[0] * x.shape.dims[1];
  if (y.numel() == 0)
    return;
  dispatch_float(name, x.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T *px = x.as<T>();
    T *py = y.as<T>();
    parallel_for(s, planes, std::max<int64_t>(1, kGrainElementwise / (win.out_size * win.kernel_size)),
                 [&](int64_t begin, int64_t end) {
                   for (int64_t p = begin; p < end; ++p) {
                     const T *in = px + p * win.in_size;
                     T *out = py + p * win.out_size;
                     for_each_window(win, [&](int64_t o, const int64_t *idx, const int64_t *kb,
                                              const int64_t *kc) {
                       float sum = 0.0f;
                       for_each_tap(win, idx, kb, kc, [&](int64_t off) { sum += to_float(in[off]); });
                       const int64_t divisor = avg_divisor(win, idx, kc, count_include_pad);
                       out[o] = from_float<T>(sum / static_cast<float>(divisor));
                     });
                   }
                 });
  });
}

//===----------------------------------------------------------------------===//
// max_pool_grad, avg_pool_grad
//===----------------------------------------------------------------------===//

namespace {

// Runs plane(p, acc) for every [N, C] plane in parallel, with acc the plane
// of dx as f32 (dx itself for f32, else a lane of the workspace, `lanes`,
// rounded into dx afterwards), zeroed. Each plane's windows only touch that
// plane, so the sums are the same for every thread count.
template <typename T, typename F>
void for_each_grad_plane(const Stream &s, const Window &win, int64_t planes, T *dx,
                         float *lanes, F &&plane) {
  const int64_t work = std::max<int64_t>(1, win.out_size * win.kernel_size + win.in_size);
  if constexpr (std::is_same_v<T, float>) {
    (void)lanes;
    parallel_for(s, planes, std::max<int64_t>(1, kGrainElementwise / work),
                 [&](int64_t begin, int64_t end) {
                   for (int64_t p = begin; p < end; ++p) {
                     float *acc = dx + p * win.in_size;
                     std::fill(acc, acc + win.in_size, 0.0f);
                     plane(p, acc);
                   }
                 });
  } else {
    const int64_t count = std::min(planes, kPoolGradLanes);
    const int64_t per_lane = (planes + count - 1) / count;
    parallel_for(s, count, std::max<int64_t>(1, kGrainElementwise / (work * per_lane)),
                 [&](int64_t begin, int64_t end) {
                   for (int64_t lane = begin; lane < end; ++lane) {
                     float *acc = lanes + lane * win.in_size;
                     for (int64_t p = lane * planes / count; p < (lane + 1) * planes / count;
                          ++p) {
                       std::fill(acc, acc + win.in_size, 0.0f);
                       plane(p, acc);
                       for (int64_t i = 0; i < win.in_size; ++i)
                         dx[p * win.in_size + i] = Elem<T>::store(acc[i]);
                     }
                   }
                 });
  }
}

}  // namespace

void max_pool_grad(Stream &s, const Tensor &dy, const Tensor &x, const Tensor &dx,
                   const int64_t *kernel, const int64_t *strides, const int64_t *pads,
                   const int64_t *dilations, const Workspace &ws) {
  begin_kernel(s);
  const char *name = "max_pool_grad";
  check_pool(name, x, dy, "x", "dy");
  check_data(name, "dx", dx);
  check_same_dtype(name, "x", x, "dx", dx);
  check_shape(name, "dx", dx, x.shape);
  Window win = make_window(name, x, dy, kernel, strides, pads, dilations, true, "x", "dy");
  WorkspaceFloats scratch(name, ws, pool_grad_workspace_bytes(dx.dtype, dx.shape));
  const int64_t planes = x.shape.dims[0] * x.shape.dims[1];
  if (dx.numel() == 0)
    return;
  float *lanes = scratch.take(pool_grad_workspace_bytes(dx.dtype, dx.shape) / 4);
  dispatch_float(name, x.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T *px = x.as<T>(), *pdy = dy.as<T>();
    for_each_grad_plane<T>(s, win, planes, dx.as<T>(), lanes, [&](int64_t p, float *acc) {
      const T *in = px + p * win.in_size;
      const T *grad = pdy + p * win.out_size;
      for_each_window(win, [&](int64_t o, const int64_t *idx, const int64_t *kb,
                               const int64_t *kc) {
        // PyTorch's choice (its CPU kernel's test, val > max || isnan(val)):
        // the first in-bounds tap holding the maximum in scan order, the
        // last NaN if there is one, the first tap of a window of -inf.
        int64_t arg = -1;
        float m = 0.0f;
        for_each_tap(win, idx, kb, kc, [&](int64_t off) {
          float v = to_float(in[off]);
          if (arg < 0 || v > m || v != v) {
            m = v;
            arg = off;
          }
        });
        if (arg >= 0)
          acc[arg] += to_float(grad[o]);
      });
    });
  });
}

void avg_pool_grad(Stream &s, const Tensor &dy, const Tensor &dx, const int64_t *kernel,
                   const int64_t *strides, const int64_t *pads, bool count_include_pad,
                   const Workspace &ws) {
  begin_kernel(s);
  const char *name = "avg_pool_grad";
  check_pool(name, dx, dy, "dx", "dy");
  Window win = make_window(name, dx, dy, kernel, strides, pads, nullptr, true, "dx", "dy");
  WorkspaceFloats scratch(name, ws, pool_grad_workspace_bytes(dx.dtype, dx.shape));
  const int64_t planes = dx.shape.dims[0] * dx.shape.dims[1];
  if (dx.numel() == 0)
    return;
  float *lanes = scratch.take(pool_grad_workspace_bytes(dx.dtype, dx.shape) / 4);
  dispatch_float(name, dx.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T *pdy = dy.as<T>();
    for_each_grad_plane<T>(s, win, planes, dx.as<T>(), lanes, [&](int64_t p, float *acc) {
      const T *grad = pdy + p * win.out_size;
      for_each_window(win, [&](int64_t o, const int64_t *idx, const int64_t *kb,
                               const int64_t *kc) {
        const float v =
            to_float(grad[o]) / static_cast<float>(avg_divisor(win, idx, kc, count_include_pad));
        for_each_tap(win, idx, kb, kc, [&](int64_t off) { acc[off] += v; });
      });
    });
  });
}

}  // namespace dsrt

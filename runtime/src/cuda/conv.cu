// Convolution and pooling on the cuda backend, with the cpu kernels' window
// geometry (window.h, the same code on host and device).
//
// Convolution is the cpu kernel's algorithm on the device: per image and
// group an im2col kernel (none for a 1x1, stride-1, unpadded window) and an
// f32 cuBLASLt GEMM, the im2col matrix and the f16/bf16 operands' f32
// copies in the planned workspace (same layout, same size as the cpu's).
// The input's gradient is W^T dy per group, then col2im, one thread per
// input element summing over the kernel offsets in order (no atomics); the
// weight's gradient accumulates dy im2col(x)^T over the images.
//
// Pooling forward: one thread per output element. Gradients: one thread
// per [N, C] plane (f32, summing into dx) or per workspace lane of planes
// (f16/bf16, summing in f32 and rounding once), walking the windows in the
// cpu kernels' order, so the sums are the same bits as the cpu's.
#include "cuda/common.cuh"
#include "window.h"

namespace dsrt {

using namespace detail;

//===----------------------------------------------------------------------===//
// conv, conv_grad_input, conv_grad_weight: im2col + cuBLASLt (f32)
//===----------------------------------------------------------------------===//

namespace {

// Kernel offset kr (row-major over the kernel's axes) as per-axis offsets.
__device__ inline void kernel_offsets(const Window &w, int64_t kr, int64_t *koff) {
  for (int a = w.spatial - 1; a >= 0; --a) {
    koff[a] = kr % w.kernel[a];
    kr /= w.kernel[a];
  }
}

// col[(c, k...), o...] = x[c, o * stride - pad + k * dilation], 0 in the
// padding: the [channels * K, O] matrix of one image's channels.
__global__ void im2col_kernel(Window w, const float *x, float *col, int64_t total) {
  DSRT_GRID_STRIDE(e, total) {
    const int64_t r = e / w.out_size, o = e % w.out_size;
    const int64_t c = r / w.kernel_size;
    int64_t koff[kMaxRank], idx[kMaxRank];
    kernel_offsets(w, r % w.kernel_size, koff);
    int64_t rest = o;
    for (int a = w.spatial - 1; a >= 0; --a) {
      idx[a] = rest % w.out[a];
      rest /= w.out[a];
    }
    int64_t off = 0;
    bool valid = true;
    for (int a = 0; a < w.spatial; ++a) {
      const int64_t i = idx[a] * w.stride[a] - w.pad_begin[a] + koff[a] * w.dilation[a];
      valid = valid && i >= 0 && i < w.in[a];
      off = off * w.in[a] + i;
    }
    col[e] = valid ? x[c * w.in_size + off] : 0.0f;
  }
}

// col2im: dx[c, i...] = the sum, over kernel offsets in order, of the col
// entry read from input position i (0 when none): the transpose of im2col,
// one thread per input element, in the cpu kernel's order.
__global__ void col2im_kernel(Window w, const float *col, float *dx, int64_t total) {
  DSRT_GRID_STRIDE(e, total) {
    const int64_t c = e / w.in_size;
    int64_t pos[kMaxRank], rest = e % w.in_size;
    for (int a = w.spatial - 1; a >= 0; --a) {
      pos[a] = rest % w.in[a];
      rest /= w.in[a];
    }
    float sum = 0.0f;
    for (int64_t kr = 0; kr < w.kernel_size; ++kr) {
      int64_t koff[kMaxRank];
      kernel_offsets(w, kr, koff);
      int64_t o = 0;
      bool hit = true;
      for (int a = 0; a < w.spatial && hit; ++a) {
        const int64_t t = pos[a] + w.pad_begin[a] - koff[a] * w.dilation[a];
        hit = t >= 0 && t % w.stride[a] == 0 && t / w.stride[a] < w.out[a];
        o = o * w.out[a] + (hit ? t / w.stride[a] : 0);
      }
      if (hit)
        sum += col[(c * w.kernel_size + kr) * w.out_size + o];
    }
    dx[e] = sum;
  }
}

__global__ void bias_kernel(float *y, const float *bias, int64_t m, int64_t cols, int64_t total) {
  DSRT_GRID_STRIDE(e, total) y[e] += bias[(e / cols) % m];
}

template <typename T> __global__ void to_f32_kernel(const T *in, float *out, int64_t n) {
  DSRT_GRID_STRIDE(i, n) out[i] = ld(in[i]);
}
template <typename T> __global__ void from_f32_kernel(const float *in, T *out, int64_t n) {
  DSRT_GRID_STRIDE(i, n) out[i] = st<T>(in[i]);
}

// f32 views of float tensors: the tensor itself for f32, else a copy in
// the workspace (converted now for an operand, afterwards for a result).
template <typename T> struct F32View {
  cudaStream_t stream;
  WorkspaceFloats &scratch;
  float *operand(const Tensor &t) {
    if constexpr (std::is_same_v<T, float>) {
      return t.as<float>();
    } else {
      float *f = scratch.take(t.numel());
      if (t.numel() > 0)
        to_f32_kernel<T><<<blocks_for(t.numel()), kThreads, 0, stream>>>(t.as<T>(), f,
                                                                          t.numel());
      return f;
    }
  }
  float *result(const Tensor &t) {
    if constexpr (std::is_same_v<T, float>)
      return t.as<float>();
    else
      return scratch.take(t.numel());
  }
  void finish(const float *f, const Tensor &t) {
    if constexpr (!std::is_same_v<T, float>)
      if (t.numel() > 0)
        from_f32_kernel<T><<<blocks_for(t.numel()), kThreads, 0, stream>>>(f, t.as<T>(),
                                                                            t.numel());
  }
};

void zero(cudaStream_t stream, const char *kernel, float *p, int64_t n) {
  if (n > 0)
    check_cuda(cudaMemsetAsync(p, 0, n * sizeof(float), stream), kernel, "cudaMemsetAsync");
}

void conv_f32(cudaStream_t stream, const char *kernel, const Window &win, int64_t n, int64_t c,
              int64_t m, int64_t group, const float *x, const float *w, const float *bias,
              float *y, float *col) {
  const int64_t cg = c / group, mg = m / group;
  const int64_t rows = cg * win.kernel_size, cols = win.out_size;
  const bool pointwise = is_pointwise(win);
  for (int64_t b = 0; b < n; ++b)
    for (int64_t g = 0; g < group; ++g) {
      float *yg = y + (b * m + g * mg) * cols;
      if (rows == 0) {
        zero(stream, kernel, yg, mg * cols);
        continue;
      }
      const float *xg = x + (b * c + g * cg) * win.in_size;
      const float *colp = xg;  // a 1x1 stride-1 convolution reads x as is
      if (!pointwise) {
        im2col_kernel<<<blocks_for(rows * cols), kThreads, 0, stream>>>(win, xg, col,
                                                                        rows * cols);
        colp = col;
      }
      if (mg > 0 && cols > 0)
        lt_gemm_f32(stream, kernel, false, false, mg, cols, rows, 1.0f, w + g * mg * rows, colp,
                    0.0f, yg);
    }
  if (bias && n * m * cols > 0)
    bias_kernel<<<blocks_for(n * m * cols), kThreads, 0, stream>>>(y, bias, m, cols,
                                                                   n * m * cols);
}

void conv_grad_input_f32(cudaStream_t stream, const char *kernel, const Window &win, int64_t n,
                         int64_t c, int64_t m, int64_t group, const float *dy, const float *w,
                         float *dx, float *col) {
  const int64_t cg = c / group, mg = m / group;
  const int64_t rows = cg * win.kernel_size, cols = win.out_size;
  if (mg == 0 || cols == 0) {  // no output channel or position reads x
    zero(stream, kernel, dx, n * c * win.in_size);
    return;
  }
  const bool pointwise = is_pointwise(win);
  for (int64_t b = 0; b < n; ++b) {
    for (int64_t g = 0; g < group; ++g) {
      // dx_g = W_g^T dy_g directly for a pointwise window, else into col.
      float *out = pointwise ? dx + (b * c + g * cg) * cols : col + g * rows * cols;
      lt_gemm_f32(stream, kernel, true, false, rows, cols, mg, 1.0f, w + g * mg * rows,
                  dy + (b * m + g * mg) * cols, 0.0f, out);
    }
    if (!pointwise && c * win.in_size > 0)
      col2im_kernel<<<blocks_for(c * win.in_size), kThreads, 0, stream>>>(
          win, col, dx + b * c * win.in_size, c * win.in_size);
  }
}

void conv_grad_weight_f32(cudaStream_t stream, const char *kernel, const Window &win, int64_t n,
                          int64_t c, int64_t m, int64_t group, const float *dy, const float *x,
                          float *dw, float *col) {
  const int64_t cg = c / group, mg = m / group;
  const int64_t rows = cg * win.kernel_size, cols = win.out_size;
  if (n == 0 || cols == 0 || rows == 0) {
    zero(stream, kernel, dw, m * rows);
    return;
  }
  const bool pointwise = is_pointwise(win);
  for (int64_t b = 0; b < n; ++b)
    for (int64_t g = 0; g < group; ++g) {
      const float *xg = x + (b * c + g * cg) * win.in_size;
      const float *colp = xg;
      if (!pointwise) {
        im2col_kernel<<<blocks_for(rows * cols), kThreads, 0, stream>>>(win, xg, col,
                                                                        rows * cols);
        colp = col;
      }
      // dw_g (+)= dy_g im2col(x_g)^T, accumulated over the images.
      if (mg > 0)
        lt_gemm_f32(stream, kernel, false, true, mg, rows, cols, 1.0f, dy + (b * m + g * mg) * cols,
                    colp, b == 0 ? 0.0f : 1.0f, dw + g * mg * rows);
    }
}

}  // namespace

void conv(Stream &s, const Tensor &x, const Tensor &w, const Tensor *bias, const Tensor &y,
          const int64_t *strides, const int64_t *pads, const int64_t *dilations, int64_t group,
          const Workspace &ws) {
  cudaStream_t stream = begin_kernel(s);
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
    F32View<T> f{stream, scratch};
    float *fx = f.operand(x), *fw = f.operand(w);
    float *fy = f.result(y);
    float *fb = bias ? f.operand(*bias) : nullptr;
    conv_f32(stream, kernel, win, n, c, m, group, fx, fw, fb, fy, col);
    f.finish(fy, y);
  });
  check_launch(kernel);
}

void conv_grad_input(Stream &s, const Tensor &dy, const Tensor &w, const Tensor &dx,
                     const int64_t *strides, const int64_t *pads, const int64_t *dilations,
                     int64_t group, const Workspace &ws) {
  cudaStream_t stream = begin_kernel(s);
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
    F32View<T> f{stream, scratch};
    float *fdy = f.operand(dy), *fw = f.operand(w);
    float *fdx = f.result(dx);
    conv_grad_input_f32(stream, kernel, win, n, c, m, group, fdy, fw, fdx, col);
    f.finish(fdx, dx);
  });
  check_launch(kernel);
}

void conv_grad_weight(Stream &s, const Tensor &dy, const Tensor &x, const Tensor &dw,
                      const int64_t *strides, const int64_t *pads, const int64_t *dilations,
                      int64_t group, const Workspace &ws) {
  cudaStream_t stream = begin_kernel(s);
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
    F32View<T> f{stream, scratch};
    float *fdy = f.operand(dy), *fx = f.operand(x);
    float *fdw = f.result(dw);
    conv_grad_weight_f32(stream, kernel, win, n, c, m, group, fdy, fx, fdw, col);
    f.finish(fdw, dw);
  });
  check_launch(kernel);
}

//===----------------------------------------------------------------------===//
// Pooling
//===----------------------------------------------------------------------===//

namespace {

// The spatial index of output position o of a plane.
__device__ inline void window_index(const Window &w, int64_t o, int64_t *idx) {
  for (int a = w.spatial - 1; a >= 0; --a) {
    idx[a] = o % w.out[a];
    o /= w.out[a];
  }
}

template <typename T>
__global__ void max_pool_kernel(Window w, const T *x, T *y, int64_t total) {
  DSRT_GRID_STRIDE(e, total) {
    const int64_t p = e / w.out_size, o = e % w.out_size;
    int64_t idx[kMaxRank], kb[kMaxRank], kc[kMaxRank];
    window_index(w, o, idx);
    window_taps(w, idx, kb, kc);
    const T *in = x + p * w.in_size;
    // Padding never wins; a NaN does, as in PyTorch.
    float m = -INFINITY;
    for_each_tap(w, idx, kb, kc, [&](int64_t off) {
      const float v = ld(in[off]);
      if (m == m && (v > m || v != v))
        m = v;
    });
    y[e] = st<T>(m);
  }
}

template <typename T>
__global__ void avg_pool_kernel(Window w, const T *x, T *y, int64_t total,
                                bool count_include_pad) {
  DSRT_GRID_STRIDE(e, total) {
    const int64_t p = e / w.out_size, o = e % w.out_size;
    int64_t idx[kMaxRank], kb[kMaxRank], kc[kMaxRank];
    window_index(w, o, idx);
    window_taps(w, idx, kb, kc);
    const T *in = x + p * w.in_size;
    float sum = 0.0f;
    for_each_tap(w, idx, kb, kc, [&](int64_t off) { sum += ld(in[off]); });
    y[e] = st<T>(sum / static_cast<float>(avg_divisor(w, idx, kc, count_include_pad)));
  }
}

// The planes of one thread's work: plane p alone (f32, accumulating in dx)
// or the planes of lane l (f16/bf16, accumulating in the lane's f32 plane
// of the workspace and rounding into dx).
template <typename T> struct GradPlanes {
  T *dx;
  float *lanes;  // null for f32
  int64_t planes, count;  // count: threads (planes, or lanes)
  __device__ int64_t begin(int64_t t) const { return lanes ? t * planes / count : t; }
  __device__ int64_t end(int64_t t) const { return lanes ? (t + 1) * planes / count : t + 1; }
};

// Calls plane(p, acc) for the planes of thread t with acc zeroed, then
// rounds acc into dx where it is not dx itself.
template <typename T, typename F>
__device__ void grad_planes(const GradPlanes<T> &g, const Window &w, int64_t t, F &&plane) {
  for (int64_t p = g.begin(t); p < g.end(t); ++p) {
    float *acc = g.lanes ? g.lanes + t * w.in_size
                         : reinterpret_cast<float *>(g.dx) + p * w.in_size;
    for (int64_t i = 0; i < w.in_size; ++i)
      acc[i] = 0.0f;
    plane(p, acc);
    if (g.lanes)
      for (int64_t i = 0; i < w.in_size; ++i)
        g.dx[p * w.in_size + i] = st<T>(acc[i]);
  }
}

template <typename T>
__global__ void max_pool_grad_kernel(Window w, const T *x, const T *dy, GradPlanes<T> g) {
  DSRT_GRID_STRIDE(t, g.count) {
    grad_planes(g, w, t, [&](int64_t p, float *acc) {
      const T *in = x + p * w.in_size;
      const T *grad = dy + p * w.out_size;
      int64_t idx[kMaxRank], kb[kMaxRank], kc[kMaxRank];
      for (int64_t o = 0; o < w.out_size; ++o) {
        window_index(w, o, idx);
        window_taps(w, idx, kb, kc);
        // PyTorch's choice: the first in-bounds tap holding the maximum in
        // scan order, the last NaN if there is one, the first tap of a
        // window of -inf.
        int64_t arg = -1;
        float m = 0.0f;
        for_each_tap(w, idx, kb, kc, [&](int64_t off) {
          const float v = ld(in[off]);
          if (arg < 0 || v > m || v != v) {
            m = v;
            arg = off;
          }
        });
        if (arg >= 0)
          acc[arg] += ld(grad[o]);
      }
    });
  }
}

template <typename T>
__global__ void avg_pool_grad_kernel(Window w, const T *dy, GradPlanes<T> g,
                                     bool count_include_pad) {
  DSRT_GRID_STRIDE(t, g.count) {
    grad_planes(g, w, t, [&](int64_t p, float *acc) {
      const T *grad = dy + p * w.out_size;
      int64_t idx[kMaxRank], kb[kMaxRank], kc[kMaxRank];
      for (int64_t o = 0; o < w.out_size; ++o) {
        window_index(w, o, idx);
        window_taps(w, idx, kb, kc);
        const float v =
            ld(grad[o]) / static_cast<float>(avg_divisor(w, idx, kc, count_include_pad));
        for_each_tap(w, idx, kb, kc, [&](int64_t off) { acc[off] += v; });
      }
    });
  }
}

template <typename T>
GradPlanes<T> grad_planes_of(const Tensor &dx, const Workspace &ws, const char *name) {
  const int64_t bytes = pool_grad_workspace_bytes(dx.dtype, dx.shape);
  WorkspaceFloats scratch(name, ws, bytes);
  const int64_t planes = dx.shape.dims[0] * dx.shape.dims[1];
  GradPlanes<T> g{dx.as<T>(), nullptr, planes, planes};
  if (bytes > 0) {
    g.lanes = scratch.take(bytes / 4);
    g.count = std::min(planes, kPoolGradLanes);
  }
  return g;
}

}  // namespace

void max_pool(Stream &s, const Tensor &x, const Tensor &y, const int64_t *kernel,
              const int64_t *strides, const int64_t *pads, const int64_t *dilations) {
  cudaStream_t stream = begin_kernel(s);
  const char *name = "max_pool";
  check_pool(name, x, y);
  Window win = make_window(name, x, y, kernel, strides, pads, dilations, true);
  const int64_t total = y.numel();
  if (total == 0)
    return;
  dispatch_float(name, x.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    max_pool_kernel<T><<<blocks_for(total), kThreads, 0, stream>>>(win, x.as<T>(), y.as<T>(),
                                                                   total);
  });
  check_launch(name);
}

void avg_pool(Stream &s, const Tensor &x, const Tensor &y, const int64_t *kernel,
              const int64_t *strides, const int64_t *pads, bool count_include_pad) {
  cudaStream_t stream = begin_kernel(s);
  const char *name = "avg_pool";
  check_pool(name, x, y);
  Window win = make_window(name, x, y, kernel, strides, pads, nullptr, true);
  const int64_t total = y.numel();
  if (total == 0)
    return;
  dispatch_float(name, x.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    avg_pool_kernel<T><<<blocks_for(total), kThreads, 0, stream>>>(win, x.as<T>(), y.as<T>(),
                                                                   total, count_include_pad);
  });
  check_launch(name);
}

void max_pool_grad(Stream &s, const Tensor &dy, const Tensor &x, const Tensor &dx,
                   const int64_t *kernel, const int64_t *strides, const int64_t *pads,
                   const int64_t *dilations, const Workspace &ws) {
  cudaStream_t stream = begin_kernel(s);
  const char *name = "max_pool_grad";
  check_pool(name, x, dy, "x", "dy");
  check_data(name, "dx", dx);
  check_same_dtype(name, "x", x, "dx", dx);
  check_shape(name, "dx", dx, x.shape);
  Window win = make_window(name, x, dy, kernel, strides, pads, dilations, true, "x", "dy");
  dispatch_float(name, x.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const GradPlanes<T> g = grad_planes_of<T>(dx, ws, name);
    if (dx.numel() > 0)
      max_pool_grad_kernel<T><<<blocks_for(g.count, 64), 64, 0, stream>>>(win, x.as<T>(),
                                                                          dy.as<T>(), g);
  });
  check_launch(name);
}

void avg_pool_grad(Stream &s, const Tensor &dy, const Tensor &dx, const int64_t *kernel,
                   const int64_t *strides, const int64_t *pads, bool count_include_pad,
                   const Workspace &ws) {
  cudaStream_t stream = begin_kernel(s);
  const char *name = "avg_pool_grad";
  check_pool(name, dx, dy, "dx", "dy");
  Window win = make_window(name, dx, dy, kernel, strides, pads, nullptr, true, "dx", "dy");
  dispatch_float(name, dx.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const GradPlanes<T> g = grad_planes_of<T>(dx, ws, name);
    if (dx.numel() > 0)
      avg_pool_grad_kernel<T><<<blocks_for(g.count, 64), 64, 0, stream>>>(win, dy.as<T>(), g,
                                                                          count_include_pad);
  });
  check_launch(name);
}

}  // namespace dsrt

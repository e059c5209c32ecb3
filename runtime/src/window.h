// The window geometry of convolution and pooling, shared by the cpu and
// cuda backends (the device walks windows with the same code). Not
// installed.
#ifndef DSRT_SRC_WINDOW_H
#define DSRT_SRC_WINDOW_H

#include "elementwise_ops.h"
#include "kernel_common.h"

namespace dsrt {
namespace detail {

// ceil(a / b) for b > 0 and any sign of a.
DSRT_HD inline int64_t ceil_div(int64_t a, int64_t b) {
  return a >= 0 ? (a + b - 1) / b : -((-a) / b);
}

// Spatial geometry shared by conv and pooling.
struct Window {
  int spatial = 0;
  int64_t in[kMaxRank] = {}, out[kMaxRank] = {}, kernel[kMaxRank] = {};
  int64_t stride[kMaxRank] = {}, pad_begin[kMaxRank] = {}, pad_end[kMaxRank] = {},
          dilation[kMaxRank] = {};
  int64_t in_size = 1, out_size = 1, kernel_size = 1;
};

// The geometry of x (the input side, named x_name) and y (the output side,
// named y_name), checking y's spatial sizes; ceil_mode sizes are accepted
// when allow_ceil.
Window make_window(const char *kernel_name, const Tensor &x, const Tensor &y,
                   const int64_t *kernel, const int64_t *strides, const int64_t *pads,
                   const int64_t *dilations, bool allow_ceil, const char *x_name = "x",
                   const char *y_name = "y");

// x and y both [N, C, D...] float tensors of one type, with the same N and C.
void check_pool(const char *kernel, const Tensor &x, const Tensor &y, const char *x_name = "x",
                const char *y_name = "y");

// The operands of conv: x [N, C, D...], w [M, C / group, K...], y
// [N, M, O...], bias [M] or null; returns the window.
Window check_conv(const char *kernel, const Tensor &x, const Tensor &w, const Tensor *bias,
                  const Tensor &y, const int64_t *strides, const int64_t *pads,
                  const int64_t *dilations, int64_t group);
// The operands of conv's gradients: x (or dx) [N, C, D...], w (or dw)
// [M, C / group, K...], dy [N, M, O...]; returns the window.
Window check_conv_grad(const char *kernel, const Tensor &x, const char *x_name, const Tensor &w,
                       const char *w_name, const Tensor &dy, const int64_t *strides,
                       const int64_t *pads, const int64_t *dilations, int64_t group);

// A 1x1, stride-1, unpadded window: the im2col matrix is the input itself.
DSRT_HD inline bool is_pointwise(const Window &win) {
  bool pointwise = true;
  for (int a = 0; a < win.spatial; ++a)
    pointwise = pointwise && win.kernel[a] == 1 && win.stride[a] == 1 && win.pad_begin[a] == 0 &&
                win.pad_end[a] == 0;
  return pointwise;
}

// The window of output position `idx`: per axis, the first in-bounds kernel
// offset and the number of in-bounds offsets (in steps of the dilation).
DSRT_HD inline void window_taps(const Window &w, const int64_t *idx, int64_t *kbegin,
                                int64_t *kcount) {
  for (int a = 0; a < w.spatial; ++a) {
    const int64_t start = idx[a] * w.stride[a] - w.pad_begin[a];
    const int64_t lo0 = ceil_div(-start, w.dilation[a]);
    const int64_t lo = lo0 > 0 ? lo0 : 0;
    const int64_t hi0 = ceil_div(w.in[a] - start, w.dilation[a]);
    const int64_t hi = w.kernel[a] < hi0 ? w.kernel[a] : hi0;
    kbegin[a] = lo;
    kcount[a] = hi - lo > 0 ? hi - lo : 0;
  }
}

// Visits the in-bounds input offsets of one window.
template <typename F>
DSRT_HD void for_each_tap(const Window &w, const int64_t *idx, const int64_t *kbegin,
                  const int64_t *kcount, F &&f) {
  for (int a = 0; a < w.spatial; ++a)
    if (kcount[a] == 0)
      return;
  int64_t k[kMaxRank];
  for (int a = 0; a < w.spatial; ++a)
    k[a] = 0;
  while (true) {
    int64_t offset = 0;
    for (int a = 0; a < w.spatial; ++a) {
      int64_t i = idx[a] * w.stride[a] - w.pad_begin[a] + (kbegin[a] + k[a]) * w.dilation[a];
      offset = offset * w.in[a] + i;
    }
    f(offset);
    int a = w.spatial - 1;
    for (; a >= 0; --a) {
      if (++k[a] < kcount[a])
        break;
      k[a] = 0;
    }
    if (a < 0)
      return;
  }
}

// PyTorch's average-pooling divisor: with count_include_pad the window
// clipped to the padded input, else the in-bounds taps.
DSRT_HD inline int64_t avg_divisor(const Window &win, const int64_t *idx, const int64_t *kc,
                    bool count_include_pad) {
  int64_t divisor = 1;
  for (int a = 0; a < win.spatial; ++a) {
    if (count_include_pad) {
      int64_t start = idx[a] * win.stride[a] - win.pad_begin[a];
      int64_t stop = start + win.kernel[a] < win.in[a] + win.pad_end[a] ? start + win.kernel[a]
                                                                : win.in[a] + win.pad_end[a];
      divisor *= stop - start;
    } else {
      divisor *= kc[a];
    }
  }
  return divisor;
}

}  // namespace detail
}  // namespace dsrt

#endif  // DSRT_SRC_WINDOW_H

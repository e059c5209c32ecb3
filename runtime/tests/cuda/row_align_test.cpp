// layer_norm and layer_norm_grad on rows whose tensors do not start on a
// 16-byte boundary: the cuda backend's warp-per-row kernels load whole
// 16-byte vectors, so such rows must take the block-per-row kernels
// (src/cuda/norm.cu, warp_rows). The same bf16 rows, one element past an
// aligned allocation, must give what the aligned ones give (the warp
// kernels) up to the sums' order; under the emulation's alignment check
// (dsrt_cuda_emu_align_kernel_test) a vector load from a misaligned row
// would abort the test. Last, attention_grad given only the least workspace
// (CudaAttentionWorkspace).
#include "dsrt/backend.h"
#include "dsrt/kernels.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

using namespace dsrt;

uint16_t bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return static_cast<uint16_t>((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}
float from_bf16(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Deterministic bf16 values in [lo, hi).
std::vector<uint16_t> values(size_t n, float lo, float hi, uint64_t seed) {
  std::vector<uint16_t> v(n);
  for (auto &e : v) {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    e = bf16(lo + (hi - lo) * static_cast<float>(seed >> 40) / static_cast<float>(1 << 24));
  }
  return v;
}

// Device copies of host bf16 arrays, each `shift` bytes past a 256-byte
// aligned allocation.
struct Rows {
  Stream stream{backend().kind(), 1};
  BackendInterface &b = backend(stream);
  std::vector<void *> allocations;
  void *put(const std::vector<uint16_t> &host, size_t shift) {
    void *p = b.allocate(MemoryKind::Device, host.size() * 2 + 256, 256);
    allocations.push_back(p);
    char *at = static_cast<char *>(p) + shift;
    b.copy(stream, at, host.data(), host.size() * 2);
    return at;
  }
  void *zeros(size_t bytes, size_t shift) {
    return put(std::vector<uint16_t>((bytes + 1) / 2), shift);
  }
  template <typename T> std::vector<T> get(const void *p, size_t n) {
    std::vector<T> host(n);
    b.copy(stream, host.data(), p, n * sizeof(T));
    stream.synchronize();
    return host;
  }
  ~Rows() {
    stream.synchronize();
    for (void *p : allocations)
      b.deallocate(MemoryKind::Device, p);
  }
};

constexpr int64_t kRows = 70, kN = 256;

struct Forward {
  std::vector<uint16_t> y;
  std::vector<float> mean, inv;
};

Forward forward(size_t shift) {
  Rows r;
  const Shape xs{kRows, kN}, ps{kN}, ss{kRows, 1};
  Tensor x{r.put(values(kRows * kN, -2, 2, 1), shift), DType::BF16, xs};
  Tensor g{r.put(values(kN, 0.5, 1.5, 2), 0), DType::BF16, ps};
  Tensor bias{r.put(values(kN, -0.5, 0.5, 3), 0), DType::BF16, ps};
  Tensor y{r.zeros(kRows * kN * 2, shift), DType::BF16, xs};
  Tensor mean{r.zeros(kRows * 4, 0), DType::F32, ss}, inv{r.zeros(kRows * 4, 0), DType::F32, ss};
  const int64_t ws_bytes = layer_norm_workspace_bytes(DType::BF16, xs, ps, &ps, 1);
  void *ws = r.b.allocate(MemoryKind::Device, static_cast<size_t>(ws_bytes), 256);
  r.allocations.push_back(ws);
  layer_norm(r.stream, x, g, &bias, y, mean, inv, 1, 1e-5f, Workspace{ws, ws_bytes});
  return Forward{r.get<uint16_t>(y.data, kRows * kN), r.get<float>(mean.data, kRows),
                 r.get<float>(inv.data, kRows)};
}

struct Backward {
  std::vector<uint16_t> dx, dscale, dbias;
};

Backward backward(size_t shift) {
  Rows r;
  const Shape xs{kRows, kN}, ps{kN}, ss{kRows, 1};
  const Forward f = forward(0);
  std::vector<uint16_t> mean_bits(kRows * 2), inv_bits(kRows * 2);
  std::memcpy(mean_bits.data(), f.mean.data(), kRows * 4);
  std::memcpy(inv_bits.data(), f.inv.data(), kRows * 4);
  Tensor x{r.put(values(kRows * kN, -2, 2, 1), shift), DType::BF16, xs};
  Tensor dy{r.put(values(kRows * kN, -1, 1, 4), shift), DType::BF16, xs};
  Tensor add{r.put(values(kRows * kN, -4, 4, 5), shift), DType::BF16, xs};
  Tensor g{r.put(values(kN, 0.5, 1.5, 2), 0), DType::BF16, ps};
  Tensor mean{r.put(mean_bits, 0), DType::F32, ss}, inv{r.put(inv_bits, 0), DType::F32, ss};
  Tensor dx{r.zeros(kRows * kN * 2, shift), DType::BF16, xs};
  Tensor dg{r.zeros(kN * 2, 0), DType::BF16, ps}, db{r.zeros(kN * 2, 0), DType::BF16, ps};
  const int64_t ws_bytes = layer_norm_grad_workspace_bytes(DType::BF16, xs, ps, 1);
  void *ws = r.b.allocate(MemoryKind::Device, static_cast<size_t>(ws_bytes), 256);
  r.allocations.push_back(ws);
  layer_norm_grad_add(r.stream, dy, x, g, mean, inv, &add, dx, dg, &db, 1,
                      Workspace{ws, ws_bytes});
  return Backward{r.get<uint16_t>(dx.data, kRows * kN), r.get<uint16_t>(dg.data, kN),
                  r.get<uint16_t>(db.data, kN)};
}

// Every element within `tol` (relative, and absolute below 1).
void expect_close(const std::vector<uint16_t> &a, const std::vector<uint16_t> &b, float tol,
                  const char *what) {
  ASSERT_EQ(a.size(), b.size());
  int bad = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const float x = from_bf16(a[i]), y = from_bf16(b[i]);
    if (!(std::fabs(x - y) <= tol * std::fmax(1.0f, std::fabs(y))) && bad++ < 5)
      ADD_FAILURE() << what << "[" << i << "]: " << x << " (misaligned) vs " << y << " (aligned)";
  }
  EXPECT_EQ(bad, 0) << what;
}

TEST(CudaRowAlign, LayerNormMisalignedRowsMatchAligned) {
  const Forward aligned = forward(0), shifted = forward(2);
  expect_close(shifted.y, aligned.y, 1.0f / 64, "y");
  for (int64_t r = 0; r < kRows; ++r) {
    EXPECT_NEAR(shifted.mean[r], aligned.mean[r], 1e-6f) << r;
    EXPECT_NEAR(shifted.inv[r], aligned.inv[r], 1e-5f * aligned.inv[r]) << r;
  }
}

TEST(CudaRowAlign, LayerNormGradMisalignedRowsMatchAligned) {
  const Backward aligned = backward(0), shifted = backward(2);
  expect_close(shifted.dx, aligned.dx, 1.0f / 64, "dx");
  expect_close(shifted.dscale, aligned.dscale, 1.0f / 64, "dscale");
  expect_close(shifted.dbias, aligned.dbias, 1.0f / 64, "dbias");
}

// attention_grad given only the least workspace (delta, one f32 per query
// row: attention_grad_workspace_bytes), as a plan made for the cpu gives:
// the split backward (the default) needs no more and runs; under
// DSRT_ATTENTION_GRAD=atomic (the dsrt_cuda_emu_attention_grad_atomic
// test) the one-pass backward has no room for its dq accumulator
// (attention_grad_cuda_workspace_bytes) and refuses, naming both sizes.
TEST(CudaAttentionWorkspace, LeastWorkspaceRunsSplitOrRefusesAtomic) {
  Rows r;
  const Shape qs{1, 2, 64, 16}, ls{1, 2, 64};
  const size_t n = 2 * 64 * 16;
  Tensor q{r.put(values(n, -1, 1, 11), 0), DType::BF16, qs};
  Tensor k{r.put(values(n, -1, 1, 12), 0), DType::BF16, qs};
  Tensor v{r.put(values(n, -1, 1, 13), 0), DType::BF16, qs};
  Tensor o{r.put(values(n, -1, 1, 14), 0), DType::BF16, qs};
  Tensor d{r.put(values(n, -1, 1, 15), 0), DType::BF16, qs};
  Tensor lse{r.put(std::vector<uint16_t>(2 * 64 * 2, 0), 0), DType::F32, ls};
  Tensor dq{r.zeros(n * 2, 0), DType::BF16, qs}, dk{r.zeros(n * 2, 0), DType::BF16, qs},
      dv{r.zeros(n * 2, 0), DType::BF16, qs};
  const int64_t least = attention_grad_workspace_bytes(DType::BF16, qs);
  ASSERT_EQ(least, 4 * 2 * 64);
  ASSERT_GT(attention_grad_cuda_workspace_bytes(DType::BF16, qs), least);
  void *ws = r.b.allocate(MemoryKind::Device, static_cast<size_t>(least), 256);
  r.allocations.push_back(ws);
  const char *grad = std::getenv("DSRT_ATTENTION_GRAD");
  auto run = [&] {
    attention_grad(r.stream, q, k, v, o, lse, d, dq, dk, dv, 0.25f, true, false,
                   Workspace{ws, least});
    r.stream.synchronize();
  };
  if (grad && std::strcmp(grad, "atomic") == 0) {
    try {
      run();
      ADD_FAILURE() << "DSRT_ATTENTION_GRAD=atomic ran without room for dq's accumulator";
    } catch (const Error &e) {
      EXPECT_NE(std::string(e.what()).find("DSRT_ATTENTION_GRAD=atomic needs the dq "
                                           "accumulator in the workspace, 8704 bytes, and was "
                                           "given 512"),
                std::string::npos)
          << e.what();
    }
  } else {
    run();
    for (uint16_t x : r.get<uint16_t>(dk.data, n))
      ASSERT_TRUE(std::isfinite(from_bf16(x)));
  }
}

}  // namespace

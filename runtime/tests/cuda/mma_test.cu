// mma_16x8x16 (src/cuda/mma.cuh) by itself: one warp computes D = A B + C
// for known 16x16, 16x8 and 16x8 matrices, against the product in double.
// The fragments are built here from the PTX ISA's formulas for the
// m16n8k16 .f16/.bf16 layouts, written per element (a_i, b_i, c_i) rather
// than as the loaders in mma.cuh write them, so that a layout error in the
// product (its portable body in the CUDA emulation, the instruction on a
// GPU) fails this test by itself; a second test checks the loaders
// (load_frag_a, load_frag_b, frag_a_of) against the same layouts. The
// ldmatrix tests check ldmatrix_x4 (and .trans) against the PTX ISA's
// per-lane formulas for ldmatrix.sync.aligned.m8n8.x4 on scrambled row
// addresses, and the B-fragment loaders built on it against the m16n8k16
// layout, on a tile staged in shared memory by cp_async_16. DynamicShared
// checks the rule the tensor-core attention kernels' two-stage tiles at
// head width 128 rely on: a launch with more than 48 KiB of dynamic shared
// memory fails until its kernel opts in with cudaFuncSetAttribute, which
// takes no more than the device's per-block opt-in limit.
#include "cuda/mma.cuh"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

namespace {

using namespace dsrt;
using namespace dsrt::detail;

// PTX ISA, "Matrix Fragments for mma.m16n8k16 with floating point type":
// groupID = lane >> 2, threadID_in_group = lane % 4.
__device__ int a_row(int lane, int i) { return lane / 4 + ((i < 2 || (i >= 4 && i < 6)) ? 0 : 8); }
__device__ int a_col(int lane, int i) { return lane % 4 * 2 + (i & 1) + (i >= 4 ? 8 : 0); }
__host__ __device__ int b_row(int lane, int i) {
  return lane % 4 * 2 + (i & 1) + (i >= 2 ? 8 : 0);
}
__host__ __device__ int b_col(int lane, int) { return lane / 4; }
__device__ int c_row(int lane, int i) { return lane / 4 + (i >= 2 ? 8 : 0); }
__device__ int c_col(int lane, int i) { return lane % 4 * 2 + (i & 1); }

// a: 16x16 row-major, b: 16x8 row-major (k, n), c and d: 16x8 row-major.
// by_loaders: the fragments from mma.cuh's loaders instead of the formulas.
template <typename T>
__global__ void mma_once(const uint16_t *a, const uint16_t *b, const float *c, float *d,
                         bool by_loaders) {
  const int lane = threadIdx.x;
  FragA fa;
  FragB fb;
  FragC fc;
  if (by_loaders) {
    fa = load_frag_a(a, 16, 1);
    fb = load_frag_b(b, 8, 1);
  } else {
    uint16_t ea[8], eb[4];
    for (int i = 0; i < 8; ++i)
      ea[i] = a[a_row(lane, i) * 16 + a_col(lane, i)];
    for (int i = 0; i < 4; ++i)
      eb[i] = b[b_row(lane, i) * 8 + b_col(lane, i)];
    // Elements low to high: a0 in the low half of the first register.
    for (int r = 0; r < 4; ++r)
      fa.x[r] = static_cast<uint32_t>(ea[2 * r]) | static_cast<uint32_t>(ea[2 * r + 1]) << 16;
    for (int r = 0; r < 2; ++r)
      fb.x[r] = static_cast<uint32_t>(eb[2 * r]) | static_cast<uint32_t>(eb[2 * r + 1]) << 16;
  }
  for (int i = 0; i < 4; ++i)
    fc.x[i] = c[c_row(lane, i) * 8 + c_col(lane, i)];
  if (by_loaders) {
    // A 16x16 A operand made of two accumulator tiles: D += (C | C) B,
    // C's columns as A's k 0..7 and again as k 8..15, rounded to T.
    const FragA cc = frag_a_of<T>(fc, fc);
    mma_16x8x16<T>(fc, cc, fb);
  }
  mma_16x8x16<T>(fc, fa, fb);
  for (int i = 0; i < 4; ++i)
    d[c_row(lane, i) * 8 + c_col(lane, i)] = fc.x[i];
}

template <typename T> struct Bits;
template <> struct Bits<half_t> {
  static uint16_t of(float v) { return __half_as_ushort(__float2half_rn(v)); }
  static float value(uint16_t b) { return __half2float(__ushort_as_half(b)); }
};
template <> struct Bits<bfloat_t> {
  static uint16_t of(float v) { return __bfloat16_as_ushort(__float2bfloat16_rn(v)); }
  static float value(uint16_t b) { return __bfloat162float(__ushort_as_bfloat16(b)); }
};

template <typename T> void check_mma(bool by_loaders) {
  // Distinct values everywhere (a misplaced element changes the sums):
  // small integers and halves, exact in both 16-bit types, so that every
  // product and sum is exact in f32 and the reference is exact.
  std::vector<uint16_t> a(16 * 16), b(16 * 8);
  std::vector<float> c(16 * 8), d(16 * 8, NAN);
  for (int r = 0; r < 16; ++r)
    for (int k = 0; k < 16; ++k)
      a[r * 16 + k] = Bits<T>::of(static_cast<float>((r * 7 + k * 3) % 17 - 8));
  for (int k = 0; k < 16; ++k)
    for (int n = 0; n < 8; ++n)
      b[k * 8 + n] = Bits<T>::of(0.5f * static_cast<float>((k * 5 + n * 11) % 13 - 6));
  for (int r = 0; r < 16; ++r)
    for (int n = 0; n < 8; ++n)
      c[r * 8 + n] = static_cast<float>(r * 8 + n) - 60.0f;
  std::vector<double> want(16 * 8);
  for (int r = 0; r < 16; ++r)
    for (int n = 0; n < 8; ++n) {
      double sum = c[r * 8 + n];
      for (int k = 0; k < 16; ++k)
        sum += static_cast<double>(Bits<T>::value(a[r * 16 + k])) * Bits<T>::value(b[k * 8 + n]);
      if (by_loaders)
        for (int k = 0; k < 16; ++k)  // (C | C) B, C rounded to T (exact: small integers)
          sum += static_cast<double>(Bits<T>::value(Bits<T>::of(c[r * 8 + k % 8]))) *
                 Bits<T>::value(b[k * 8 + n]);
      want[r * 8 + n] = sum;
    }

  uint16_t *da = nullptr, *db = nullptr;
  float *dc = nullptr, *dd = nullptr;
  ASSERT_EQ(cudaMalloc(&da, a.size() * 2), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&db, b.size() * 2), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&dc, c.size() * 4), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&dd, d.size() * 4), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(da, a.data(), a.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(db, b.data(), b.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(dc, c.data(), c.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
  mma_once<T><<<1, 32>>>(da, db, dc, dd, by_loaders);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(d.data(), dd, d.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
  cudaFree(da);
  cudaFree(db);
  cudaFree(dc);
  cudaFree(dd);
  for (int r = 0; r < 16; ++r)
    for (int n = 0; n < 8; ++n)
      EXPECT_EQ(d[r * 8 + n], want[r * 8 + n]) << "D(" << r << ", " << n << ")";
}

TEST(Mma16x8x16, Bf16FromPtxLayout) { check_mma<bfloat_t>(false); }
TEST(Mma16x8x16, F16FromPtxLayout) { check_mma<half_t>(false); }
TEST(Mma16x8x16, Bf16Loaders) { check_mma<bfloat_t>(true); }
TEST(Mma16x8x16, F16Loaders) { check_mma<half_t>(true); }

// ldmatrix on a 32 x kLd tile of 16-bit values (element e is e, all
// distinct): lane l supplies the address of row ld_row(l), columns
// ld_col(l) .. ld_col(l) + 7 (a scrambled row and 8-column block, each
// 16-byte aligned).
constexpr int kLd = 24;
constexpr int kLdRows = 32;
int ld_row(int lane) { return (lane * 7 + 3) % kLdRows; }
int ld_col(int lane) { return 8 * (lane % 3); }
// Where the loaders' 16x16 blocks start in the tile: nk (n along rows) at
// row 3, column 8; kn (k along rows) at row 5, column 0.
constexpr int kNkAt = 3 * kLd + 8;
constexpr int kKnAt = 5 * kLd;

// out[(v * 32 + lane) * 4 + i]: v = 0 ldmatrix_x4, 1 ldmatrix_x4 .trans,
// 2 load_frag_b_nk and 3 load_frag_b_kn (b[0].x[0], b[0].x[1], b[1].x[0],
// b[1].x[1]).
__global__ void ldmatrix_once(const uint16_t *m, const int *rows, const int *cols,
                              uint32_t *out) {
  __shared__ __align__(16) uint16_t tile[kLdRows * kLd];
  const int lane = threadIdx.x;
  for (int e = lane; e < kLdRows * kLd / 8; e += 32)
    cp_async_16(tile + 8 * e, m + 8 * e);
  cp_async_commit();
  cp_async_wait<0>();
  __syncthreads();
  uint32_t r[4];
  const uint16_t *row = tile + rows[lane] * kLd + cols[lane];
  ldmatrix_x4<false>(r, row);
  for (int i = 0; i < 4; ++i)
    out[(0 * 32 + lane) * 4 + i] = r[i];
  ldmatrix_x4<true>(r, row);
  for (int i = 0; i < 4; ++i)
    out[(1 * 32 + lane) * 4 + i] = r[i];
  FragB b[2];
  for (int v = 2; v < 4; ++v) {
    if (v == 2)
      load_frag_b_nk(b, tile + kNkAt, kLd);
    else
      load_frag_b_kn(b, tile + kKnAt, kLd);
    const uint32_t x[4] = {b[0].x[0], b[0].x[1], b[1].x[0], b[1].x[1]};
    for (int i = 0; i < 4; ++i)
      out[(v * 32 + lane) * 4 + i] = x[i];
  }
}

uint32_t pack(int lo, int hi) {
  return static_cast<uint32_t>(lo) | static_cast<uint32_t>(hi) << 16;
}

TEST(Ldmatrix, X4FromPtxLayout) {
  std::vector<uint16_t> m(kLdRows * kLd);
  for (size_t e = 0; e < m.size(); ++e)
    m[e] = static_cast<uint16_t>(e);
  std::vector<int> rows(32), cols(32);
  for (int l = 0; l < 32; ++l) {
    rows[l] = ld_row(l);
    cols[l] = ld_col(l);
  }
  std::vector<uint32_t> out(4 * 32 * 4, 0xdeadbeefu);
  uint16_t *dm = nullptr;
  int *drows = nullptr, *dcols = nullptr;
  uint32_t *dout = nullptr;
  ASSERT_EQ(cudaMalloc(&dm, m.size() * 2), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&drows, 32 * sizeof(int)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&dcols, 32 * sizeof(int)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&dout, out.size() * 4), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(dm, m.data(), m.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(drows, rows.data(), 32 * sizeof(int), cudaMemcpyHostToDevice),
            cudaSuccess);
  ASSERT_EQ(cudaMemcpy(dcols, cols.data(), 32 * sizeof(int), cudaMemcpyHostToDevice),
            cudaSuccess);
  ldmatrix_once<<<1, 32>>>(dm, drows, dcols, dout);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(out.data(), dout, out.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
  cudaFree(dm);
  cudaFree(drows);
  cudaFree(dcols);
  cudaFree(dout);
  // PTX ISA, ldmatrix: threads 8 i .. 8 i + 7 give addr of rows 0..7 of
  // matrix i; in register i, lane l holds row l / 4, elements 2 (l % 4)
  // and 2 (l % 4) + 1 (.trans: the matrix column-major, so column l / 4,
  // rows 2 (l % 4) and 2 (l % 4) + 1).
  auto at = [&](int addr_lane, int col) { return m[rows[addr_lane] * kLd + cols[addr_lane] + col]; };
  for (int l = 0; l < 32; ++l)
    for (int i = 0; i < 4; ++i) {
      const int g = l / 4, c = l % 4;
      EXPECT_EQ(out[(0 * 32 + l) * 4 + i], pack(at(8 * i + g, 2 * c), at(8 * i + g, 2 * c + 1)))
          << "x4, lane " << l << ", register " << i;
      EXPECT_EQ(out[(1 * 32 + l) * 4 + i], pack(at(8 * i + 2 * c, g), at(8 * i + 2 * c + 1, g)))
          << "x4.trans, lane " << l << ", register " << i;
    }
  // The loaders against the m16n8k16 B layout: register x[r] of the
  // fragment of columns 8 j.. holds b(b_row(l, 2 r), 8 j + b_col) low and
  // b(b_row(l, 2 r + 1), ..) high.
  auto nk = [&](int k, int n) { return m[kNkAt + n * kLd + k]; };
  auto kn = [&](int k, int n) { return m[kKnAt + k * kLd + n]; };
  for (int l = 0; l < 32; ++l)
    for (int j = 0; j < 2; ++j)
      for (int r = 0; r < 2; ++r) {
        const int n = 8 * j + b_col(l, 0), k0 = b_row(l, 2 * r), k1 = b_row(l, 2 * r + 1);
        EXPECT_EQ(out[(2 * 32 + l) * 4 + 2 * j + r], pack(nk(k0, n), nk(k1, n)))
            << "load_frag_b_nk, lane " << l << ", fragment " << j << ", register " << r;
        EXPECT_EQ(out[(3 * 32 + l) * 4 + 2 * j + r], pack(kn(k0, n), kn(k1, n)))
            << "load_frag_b_kn, lane " << l << ", fragment " << j << ", register " << r;
      }
}

// Block b writes 2^14 floats (64 KiB) of dynamic shared memory, each
// thread its own, then each reads another thread's back: out[i] =
// (b, i reversed) as written.
constexpr int kSharedFloats = 16 * 1024;
__global__ void dynamic_shared_reverse(float *out) {
  extern __shared__ __align__(16) float dynamic_floats[];
  for (int i = threadIdx.x; i < kSharedFloats; i += blockDim.x)
    dynamic_floats[i] = static_cast<float>(blockIdx.x * kSharedFloats + i);
  __syncthreads();
  for (int i = threadIdx.x; i < kSharedFloats; i += blockDim.x)
    out[blockIdx.x * kSharedFloats + i] = dynamic_floats[kSharedFloats - 1 - i];
}

TEST(DynamicShared, OptInBeyond48KiB) {
  const size_t bytes = kSharedFloats * sizeof(float);
  float *dout = nullptr;
  ASSERT_EQ(cudaMalloc(&dout, 2 * bytes), cudaSuccess);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  // Without the attribute a launch past 48 KiB is refused.
  dynamic_shared_reverse<<<2, 128, bytes>>>(dout);
  EXPECT_NE(cudaGetLastError(), cudaSuccess);
  // The attribute may not pass the device's opt-in limit.
  int device = 0, limit = 0;
  ASSERT_EQ(cudaGetDevice(&device), cudaSuccess);
  ASSERT_EQ(cudaDeviceGetAttribute(&limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, device),
            cudaSuccess);
  ASSERT_GE(static_cast<size_t>(limit), bytes);
  EXPECT_NE(cudaFuncSetAttribute(reinterpret_cast<const void *>(&dynamic_shared_reverse),
                                 cudaFuncAttributeMaxDynamicSharedMemorySize, limit + 1),
            cudaSuccess);
  cudaGetLastError();
  ASSERT_EQ(cudaFuncSetAttribute(reinterpret_cast<const void *>(&dynamic_shared_reverse),
                                 cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 static_cast<int>(bytes)),
            cudaSuccess);
  dynamic_shared_reverse<<<2, 128, bytes>>>(dout);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  std::vector<float> out(2 * kSharedFloats);
  ASSERT_EQ(cudaMemcpy(out.data(), dout, 2 * bytes, cudaMemcpyDeviceToHost), cudaSuccess);
  cudaFree(dout);
  for (int b = 0; b < 2; ++b)
    for (int i = 0; i < kSharedFloats; ++i)
      ASSERT_EQ(out[b * kSharedFloats + i],
                static_cast<float>(b * kSharedFloats + kSharedFloats - 1 - i))
          << "block " << b << ", element " << i;
}

} // namespace

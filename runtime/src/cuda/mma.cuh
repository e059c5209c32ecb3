// Warp-level tensor-core products for the cuda backend's kernels: one
// mma.sync.aligned.m16n8k16.row.col.f32.{bf16,f16}.{bf16,f16}.f32, D = A B + C
// with A 16x16 and B 16x8 in 16 bits and C, D 16x8 in f32, and the loads of
// its fragments. The fragment layouts are the PTX ISA's ("Matrix Fragments
// for mma.m16n8k16 with floating point type"): with g = lane / 4 and
// c = lane % 4 a lane holds
//   A: a[0] = (g, 2c..2c+1), a[1] = (g+8, 2c..), a[2] = (g, 2c+8..),
//      a[3] = (g+8, 2c+8..), each register two 16-bit elements, the lower
//      column in the low half;
//   B: b[0] = (2c..2c+1, g), b[1] = (2c+8..2c+9, g) as (k, n), the lower k
//      in the low half;
//   C, D: d[0], d[1] = (g, 2c), (g, 2c+1); d[2], d[3] = (g+8, 2c), (g+8, 2c+1).
// On sm_80 and later the product is the instruction (inline PTX); elsewhere
// (the host pass, older devices and the CUDA emulation, which cannot run
// PTX) it is the same product computed by warp shuffles over that layout,
// so the emulation runs the very kernels a GPU does, fragment loads and
// stores included.
//
// The B fragments of shared-memory tiles are loaded by
// ldmatrix.sync.aligned.m8n8.x4{.trans}.shared.b16 (PTX ISA, "Warp-level
// matrix load instruction: ldmatrix"): lanes 8 i .. 8 i + 7 supply the
// addresses of rows 0..7 of 8x8 matrix i (16 bytes each, 16-byte aligned),
// and register i of lane l receives two elements of matrix i: without
// .trans row l / 4, columns 2 (l % 4) and 2 (l % 4) + 1; with .trans (the
// matrix read column-major) rows 2 (l % 4) and 2 (l % 4) + 1 of column
// l / 4; the lower column (row) in the low half. Tiles reach shared memory
// by cp.async.cg.shared.global (16 bytes a thread) with commit_group and
// wait_group. Elsewhere ldmatrix is warp shuffles of the row addresses
// from the lanes that supply them, each lane then reading its elements,
// and cp.async is a synchronous copy. Not installed.
#ifndef DSRT_SRC_CUDA_MMA_CUH
#define DSRT_SRC_CUDA_MMA_CUH

#include "cuda/common.cuh"

#include <cstdint>
#include <cstring>

namespace dsrt {
namespace detail {

// The 16-bit element types the instruction takes (f16 and bf16).
template <typename T> struct MmaType : std::false_type {};
template <> struct MmaType<half_t> : std::true_type {};
template <> struct MmaType<bfloat_t> : std::true_type {};

struct FragA {
  uint32_t x[4];
};
struct FragB {
  uint32_t x[2];
};
// An f32 accumulator tile of 16x8.
struct FragC {
  float x[4];
};

__device__ inline uint32_t pack16(uint16_t lo, uint16_t hi) {
  return static_cast<uint32_t>(lo) | static_cast<uint32_t>(hi) << 16;
}
// The 16 bits of v rounded to T.
template <typename T> __device__ inline uint16_t bits16(float v) { return st<T>(v).bits; }
// lo and hi rounded to T (to nearest even) in one register, lo in the low
// half: one cvt.rn.{bf16x2,f16x2}.f32 on sm_80 and later.
template <typename T> __device__ inline uint32_t pack_rn(float lo, float hi) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  if constexpr (std::is_same_v<T, bfloat_t>) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t *>(&v);
  } else {
    const __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const uint32_t *>(&v);
  }
#else
  return pack16(bits16<T>(lo), bits16<T>(hi));
#endif
}
// The value of 16 bits of type T.
template <typename T> __device__ inline float value16(uint16_t bits) { return ld(T{bits}); }

// The A fragment of the 16x16 matrix whose element (r, k) is
// m[r * row_stride + k * col_stride], rows from `rows` on read as zeros.
__device__ inline FragA load_frag_a(const uint16_t *m, int64_t row_stride, int64_t col_stride,
                                    int rows = 16) {
  const int g = threadIdx.x % 32 / 4, c = threadIdx.x % 4;
  auto at = [&](int r, int k) -> uint16_t {
    return r < rows ? m[r * row_stride + k * col_stride] : uint16_t(0);
  };
  FragA a;
  a.x[0] = pack16(at(g, 2 * c), at(g, 2 * c + 1));
  a.x[1] = pack16(at(g + 8, 2 * c), at(g + 8, 2 * c + 1));
  a.x[2] = pack16(at(g, 2 * c + 8), at(g, 2 * c + 9));
  a.x[3] = pack16(at(g + 8, 2 * c + 8), at(g + 8, 2 * c + 9));
  return a;
}

// The B fragment of the 16x8 matrix whose element (k, n) is
// m[k * k_stride + n * n_stride].
__device__ inline FragB load_frag_b(const uint16_t *m, int64_t k_stride, int64_t n_stride) {
  const int g = threadIdx.x % 32 / 4, c = threadIdx.x % 4;
  auto at = [&](int k, int n) { return m[k * k_stride + n * n_stride]; };
  FragB b;
  b.x[0] = pack16(at(2 * c, g), at(2 * c + 1, g));
  b.x[1] = pack16(at(2 * c + 8, g), at(2 * c + 9, g));
  return b;
}

// The four 32-bit registers ldmatrix.sync.aligned.m8n8.x4.shared.b16
// (Trans: .trans) gives the calling lane, `row` being the address this
// lane supplies (row lane % 8 of matrix lane / 8, in shared memory, 16-byte
// aligned); every lane of the warp takes part.
template <bool Trans> __device__ inline void ldmatrix_x4(uint32_t (&r)[4], const uint16_t *row) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(row));
  if constexpr (Trans)
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
  else
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
#else
  // Register i of lane (g, c) (g = lane / 4, c = lane % 4) is row g of
  // matrix i, whose address lane 8 i + g supplies, elements 2 c and 2 c + 1;
  // transposed, element g of rows 2 c and 2 c + 1, from lanes 8 i + 2 c and
  // 8 i + 2 c + 1.
#ifdef DSEMU_ALIGNED
  DSEMU_ALIGNED(row, 16, "ldmatrix row address");
#endif
  const unsigned all = 0xffffffffu;
  const int g = threadIdx.x % 32 / 4, c = threadIdx.x % 4;
  const unsigned long long mine = reinterpret_cast<uintptr_t>(row);
  auto from = [&](int lane) {
    return reinterpret_cast<const uint16_t *>(
        static_cast<uintptr_t>(__shfl_sync(all, mine, lane)));
  };
  for (int i = 0; i < 4; ++i) {
    if constexpr (Trans) {
      const uint16_t *r0 = from(8 * i + 2 * c), *r1 = from(8 * i + 2 * c + 1);
      r[i] = pack16(r0[g], r1[g]);
    } else {
      const uint16_t *p = from(8 * i + g);
      r[i] = pack16(p[2 * c], p[2 * c + 1]);
    }
  }
#endif
}

// The B fragments of two adjacent 16x8 blocks (n from 0 and from 8) of a
// (k, n) matrix held in shared memory with its n index along rows:
// element (k, n) is m[n * ld + k] (k, v^T or q^T as a tile of keys or
// queries by head columns). One ldmatrix.x4: matrices (n 0..7, k 0..7),
// (n 0..7, k 8..15), (n 8..15, k 0..7), (n 8..15, k 8..15), each row n
// holding b's columns 2 c, 2 c + 1 at lane (n % 8) * 4 + c. m and ld * 2
// bytes must be multiples of 16.
__device__ inline int frag_b_nk_offset(int ld) {
  const int lane = threadIdx.x % 32, i = lane / 8;
  return (8 * (i / 2) + lane % 8) * ld + 8 * (i % 2);
}
// The two fragments from `row`, the calling lane's row address: m plus
// frag_b_nk_offset(ld) (Trans false) or frag_b_kn_offset(ld) (Trans true).
// A loop over a tile computes the lane's offset once and adds constants.
template <bool Trans> __device__ inline void load_frag_b_at(FragB (&b)[2], const uint16_t *row) {
  uint32_t r[4];
  ldmatrix_x4<Trans>(r, row);
  b[0] = FragB{{r[0], r[1]}};
  b[1] = FragB{{r[2], r[3]}};
}
__device__ inline void load_frag_b_nk(FragB (&b)[2], const uint16_t *m, int ld) {
  load_frag_b_at<false>(b, m + frag_b_nk_offset(ld));
}

// The same for a (k, n) matrix with its k index along rows: element (k, n)
// is m[k * ld + n] (v or q as the right operand of P v or dS^T q). One
// ldmatrix.x4.trans: matrices (k 0..7, n 0..7), (k 8..15, n 0..7),
// (k 0..7, n 8..15), (k 8..15, n 8..15), read column-major.
__device__ inline int frag_b_kn_offset(int ld) {
  const int lane = threadIdx.x % 32, i = lane / 8;
  return (8 * (i % 2) + lane % 8) * ld + 8 * (i / 2);
}
__device__ inline void load_frag_b_kn(FragB (&b)[2], const uint16_t *m, int ld) {
  load_frag_b_at<true>(b, m + frag_b_kn_offset(ld));
}

// cp.async of Bytes (4, 8 or 16) from src (global) to dst (shared), both
// Bytes-aligned, when `real`, else Bytes zeros into dst and nothing read
// (the src-size operand 0: the copy fills the bytes past src-size with
// zeros), so that a tile's rows past the matrix are staged without a
// branch; src must still be a valid address. 16 bytes go by
// cp.async.cg (L2 only), fewer by cp.async.ca, the only form with them.
// Completed by cp_async_wait after a cp_async_commit; elsewhere a
// synchronous copy.
template <int Bytes>
__device__ inline void cp_async_zfill(void *dst, const void *src, bool real) {
  static_assert(Bytes == 4 || Bytes == 8 || Bytes == 16, "cp.async copies 4, 8 or 16 bytes");
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  const unsigned bytes = real ? Bytes : 0u;
  if constexpr (Bytes == 16)
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(addr), "l"(src),
                 "r"(bytes)
                 : "memory");
  else
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;\n" ::"r"(addr), "l"(src),
                 "n"(Bytes), "r"(bytes)
                 : "memory");
#else
#ifdef DSEMU_ALIGNED
  DSEMU_ALIGNED(dst, Bytes, "cp.async destination");
  DSEMU_ALIGNED(src, Bytes, "cp.async source");
#endif
  if (real)
    std::memcpy(dst, src, Bytes);
  else
    std::memset(dst, 0, Bytes);
#endif
}
// The copy of 16 bytes that always reads src.
__device__ inline void cp_async_16(void *dst, const void *src) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(addr), "l"(src) : "memory");
#else
  cp_async_zfill<16>(dst, src, true);
#endif
}
// Closes the thread's group of cp.async copies issued since the last.
__device__ inline void cp_async_commit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}
// Waits until at most N of the thread's committed groups are pending (the
// other threads' copies are seen after a barrier).
template <int N> __device__ inline void cp_async_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
#endif
}

// The A fragment of a 16x16 block of columns [16 j, 16 j + 16) held as two
// accumulator tiles (columns 16 j.. and 16 j + 8..), rounded to T: a row of
// products fed into the next product (FlashAttention's P V).
template <typename T> __device__ inline FragA frag_a_of(const FragC &lo, const FragC &hi) {
  FragA a;
  a.x[0] = pack_rn<T>(lo.x[0], lo.x[1]);
  a.x[1] = pack_rn<T>(lo.x[2], lo.x[3]);
  a.x[2] = pack_rn<T>(hi.x[0], hi.x[1]);
  a.x[3] = pack_rn<T>(hi.x[2], hi.x[3]);
  return a;
}

// d += a b on the warp's tensor cores, every lane of the warp taking part.
template <typename T> __device__ inline void mma_16x8x16(FragC &d, const FragA &a, const FragB &b) {
  static_assert(MmaType<T>::value, "mma_16x8x16 takes f16 or bf16");
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  if constexpr (std::is_same_v<T, bfloat_t>) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(d.x[0]), "+f"(d.x[1]), "+f"(d.x[2]), "+f"(d.x[3])
                 : "r"(a.x[0]), "r"(a.x[1]), "r"(a.x[2]), "r"(a.x[3]), "r"(b.x[0]),
                   "r"(b.x[1]));
  } else {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(d.x[0]), "+f"(d.x[1]), "+f"(d.x[2]), "+f"(d.x[3])
                 : "r"(a.x[0]), "r"(a.x[1]), "r"(a.x[2]), "r"(a.x[3]), "r"(b.x[0]),
                   "r"(b.x[1]));
  }
#else
  // Lane (g, c) needs rows g and g + 8 of A, which lanes 4 g .. 4 g + 3 hold
  // (each columns 2 q, 2 q + 1, 2 q + 8, 2 q + 9), and columns 2 c and
  // 2 c + 1 of B, which lanes 4 (2 c) + q and 4 (2 c + 1) + q hold (rows
  // 2 q, 2 q + 1, 2 q + 8, 2 q + 9). Products of 16-bit values are exact in
  // f32; the sum runs over k in order.
  const unsigned all = 0xffffffffu;
  const int g = threadIdx.x % 32 / 4, c = threadIdx.x % 4;
  float arow[2][16], bcol[2][16];
  for (int q = 0; q < 4; ++q) {
    const uint64_t a01 = a.x[0] | static_cast<uint64_t>(a.x[1]) << 32;
    const uint64_t a23 = a.x[2] | static_cast<uint64_t>(a.x[3]) << 32;
    const uint64_t bb = b.x[0] | static_cast<uint64_t>(b.x[1]) << 32;
    const uint64_t s01 = __shfl_sync(all, a01, 4 * g + q);
    const uint64_t s23 = __shfl_sync(all, a23, 4 * g + q);
    const uint64_t b0 = __shfl_sync(all, bb, 4 * (2 * c) + q);
    const uint64_t b1 = __shfl_sync(all, bb, 4 * (2 * c + 1) + q);
    for (int h = 0; h < 2; ++h) {  // the element in the low (0) or high (1) half
      const int shift = 16 * h;
      // (a.x[0], a.x[1]) are rows g and g + 8 at k = 2 q + h; a.x[2], a.x[3] at k + 8.
      arow[0][2 * q + h] = value16<T>(static_cast<uint16_t>(s01 >> shift));
      arow[1][2 * q + h] = value16<T>(static_cast<uint16_t>(s01 >> (32 + shift)));
      arow[0][2 * q + h + 8] = value16<T>(static_cast<uint16_t>(s23 >> shift));
      arow[1][2 * q + h + 8] = value16<T>(static_cast<uint16_t>(s23 >> (32 + shift)));
      // b.x[0] is k = 2 q + h of the lane's column, b.x[1] k + 8.
      bcol[0][2 * q + h] = value16<T>(static_cast<uint16_t>(b0 >> shift));
      bcol[0][2 * q + h + 8] = value16<T>(static_cast<uint16_t>(b0 >> (32 + shift)));
      bcol[1][2 * q + h] = value16<T>(static_cast<uint16_t>(b1 >> shift));
      bcol[1][2 * q + h + 8] = value16<T>(static_cast<uint16_t>(b1 >> (32 + shift)));
    }
  }
  for (int i = 0; i < 4; ++i) {
    float sum = d.x[i];
    for (int k = 0; k < 16; ++k)
      sum += arow[i / 2][k] * bcol[i % 2][k];
    d.x[i] = sum;
  }
#endif
}

} // namespace detail
} // namespace dsrt

#endif // DSRT_SRC_CUDA_MMA_CUH

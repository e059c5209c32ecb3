// The CUDA emulation's own checks (docs/runtime.md, "The CUDA emulation"),
// in dsrt_cuda_emu_kernel_test only: they need the emulation's switches,
// and on a GPU the racy kernels below would give any answer.
//
// EmuSchedule: the thread orders of $DSRT_EMU_SCHEDULE (set here through
// dsemu::set_schedule) make a missing __syncthreads show. Threads switch
// only at barriers and warp operations, so without a barrier between a
// shared-memory write and another thread's read the reader sees the write
// only if the writer ran first: in the ascending order a thread reading
// what a lower one wrote reads it (the race goes unseen), in the reverse
// order it reads the block's fresh shared memory (all-ones bytes: NaN) or
// the value before the write. With the barrier every order gives the
// right answer. The same for blocks: a block reading what the block before
// it wrote (no grid-wide barrier) sees it only when blocks run in order.
//
// EmuFill: fresh device and pinned memory is zeros, or all-ones bytes under
// $DSRT_FAKE_CUDA_FILL=nan (set here through dsrt_fake_cuda_set_fill).
//
// EmuAlign: an access a GPU faults on as a misaligned address stops the
// kernel: cp.async's 16 bytes and ldmatrix's row addresses in every
// emulated build (mma.cuh's emulated bodies check them), a uint4 load in
// the alignment variant (DSEMU_ALIGNMENT_CHECK: UBSan's alignment check,
// dsrt_cuda_emu_align_kernel_test), where the plain emulation does what the
// host compiler made of it (a fault without a location, or a load).
#include "cuda/mma.cuh"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <vector>

extern "C" bool dsrt_fake_cuda_set_fill(const char *fill);

namespace {

constexpr int kThreads = 64;

// Each thread writes its slot, then reads the slot of thread t + d (its
// own past the ends): the lower thread's with d = -1, the higher one's with
// d = 1. ZeroFirst: the slots zeroed before a first barrier that every
// thread passes, so that a reader that runs before its writer reads 0.
__host__ __device__ int neighbour(int t, int d) {
  return t + d >= 0 && t + d < kThreads ? t + d : t;
}
template <bool Barrier, bool ZeroFirst = false> __global__ void read_neighbour(float *out, int d) {
  __shared__ float s[kThreads];
  const int t = threadIdx.x;
  if (ZeroFirst) {
    s[t] = 0.0f;
    __syncthreads();
  }
  s[t] = t + 1.0f;
  if (Barrier)
    __syncthreads();
  out[t] = s[neighbour(t, d)];
}

// Block b sets flags[b], then reads the flag of block b - 1 (block 0 its
// own): a race between blocks.
__global__ void read_previous_block(int *flags, int *out) {
  if (threadIdx.x == 0) {
    flags[blockIdx.x] = 1;
    out[blockIdx.x] = flags[blockIdx.x == 0 ? 0 : blockIdx.x - 1];
  }
}

// Restores the environment's order when a test ends.
struct ScheduleGuard {
  ~ScheduleGuard() { dsemu::set_schedule(std::getenv("DSRT_EMU_SCHEDULE")); }
};

// One block of `kernel(out, d)` in the given order.
template <typename Kernel>
std::vector<float> run_threads(const char *order, Kernel kernel, int d) {
  EXPECT_TRUE(dsemu::set_schedule(order)) << order;
  float *dout = nullptr;
  EXPECT_EQ(cudaMalloc(&dout, kThreads * sizeof(float)), cudaSuccess);
  kernel<<<1, kThreads>>>(dout, d);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  std::vector<float> out(kThreads);
  EXPECT_EQ(cudaMemcpy(out.data(), dout, kThreads * sizeof(float), cudaMemcpyDeviceToHost),
            cudaSuccess);
  cudaFree(dout);
  return out;
}

// The threads whose result is not their neighbour's slot; those reading
// NaN in *nan.
int wrong(const std::vector<float> &out, int d, int *nan = nullptr) {
  int n = 0, nans = 0;
  for (int t = 0; t < kThreads; ++t) {
    n += out[t] != neighbour(t, d) + 1.0f;
    nans += std::isnan(out[t]);
  }
  if (nan)
    *nan = nans;
  return n;
}

const char *const kOrders[] = {"ascending", "reverse", "random:1", "random:2"};

TEST(EmuSchedule, MissingBarrierShowsInReverse) {
  ScheduleGuard guard;
  // The ascending order cannot see this race.
  EXPECT_EQ(wrong(run_threads("ascending", read_neighbour<false>, -1), -1), 0);
  // Reversed, every reader runs before its writer: NaN.
  int nan = 0;
  EXPECT_EQ(wrong(run_threads("reverse", read_neighbour<false>, -1), -1, &nan), kThreads - 1);
  EXPECT_EQ(nan, kThreads - 1);
  for (const char *order : kOrders)
    EXPECT_EQ(wrong(run_threads(order, read_neighbour<true>, -1), -1), 0) << order;
}

TEST(EmuSchedule, MissingBarrierShowsInAscendingAndRandom) {
  ScheduleGuard guard;
  int nan = 0;
  EXPECT_EQ(wrong(run_threads("ascending", read_neighbour<false>, 1), 1, &nan), kThreads - 1);
  EXPECT_EQ(nan, kThreads - 1);
  EXPECT_EQ(wrong(run_threads("reverse", read_neighbour<false>, 1), 1), 0);
  // A random order puts some readers before their writers, either way.
  EXPECT_GT(wrong(run_threads("random:1", read_neighbour<false>, 1), 1), 0);
  EXPECT_GT(wrong(run_threads("random:1", read_neighbour<false>, -1), -1), 0);
  for (const char *order : kOrders)
    EXPECT_EQ(wrong(run_threads(order, read_neighbour<true>, 1), 1), 0) << order;
}

// After a barrier: in the ascending order the thread that completes it
// (the last, 63) goes on first, and only it reads the 0 of the first
// phase; in the reverse order the thread that completes it (0) waits its
// turn, so every reader runs before its writer again.
TEST(EmuSchedule, MissingBarrierAfterABarrier) {
  ScheduleGuard guard;
  std::vector<float> out = run_threads("ascending", read_neighbour<false, true>, -1);
  EXPECT_EQ(wrong(out, -1), 1);
  EXPECT_EQ(out[kThreads - 1], 0.0f);
  out = run_threads("reverse", read_neighbour<false, true>, -1);
  EXPECT_EQ(wrong(out, -1), kThreads - 1);
  EXPECT_EQ(out[1], 0.0f);
  for (const char *order : kOrders)
    EXPECT_EQ(wrong(run_threads(order, read_neighbour<true, true>, -1), -1), 0) << order;
}

TEST(EmuSchedule, BlockOrder) {
  ScheduleGuard guard;
  constexpr int kBlocks = 8;
  int *flags = nullptr, *dout = nullptr;
  ASSERT_EQ(cudaMalloc(&flags, kBlocks * sizeof(int)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&dout, kBlocks * sizeof(int)), cudaSuccess);
  auto unset = [&](const char *order) {
    EXPECT_TRUE(dsemu::set_schedule(order));
    EXPECT_EQ(cudaMemset(flags, 0, kBlocks * sizeof(int)), cudaSuccess);
    read_previous_block<<<kBlocks, 32>>>(flags, dout);
    EXPECT_EQ(cudaGetLastError(), cudaSuccess);
    int out[kBlocks];
    EXPECT_EQ(cudaMemcpy(out, dout, sizeof out, cudaMemcpyDeviceToHost), cudaSuccess);
    int n = 0;
    for (int b = 0; b < kBlocks; ++b)
      n += out[b] != 1;
    return n;
  };
  EXPECT_EQ(unset("ascending"), 0);
  EXPECT_EQ(unset("reverse"), kBlocks - 1);
  EXPECT_GT(unset("random:1"), 0);
  cudaFree(flags);
  cudaFree(dout);
}

TEST(EmuSchedule, RejectsOtherOrders) {
  ScheduleGuard guard;
  for (const char *bad : {"descending", "random:", "random:x", "random:1x", "random:-1", "random: 1", "reverse "})
    EXPECT_FALSE(dsemu::set_schedule(bad)) << bad;
  EXPECT_TRUE(dsemu::set_schedule(""));
  EXPECT_TRUE(dsemu::set_schedule(nullptr));
}

// The bytes of fresh device and pinned memory under a fill.
std::vector<unsigned char> fresh(bool device) {
  constexpr size_t kBytes = 1000;
  void *p = nullptr;
  EXPECT_EQ(device ? cudaMalloc(&p, kBytes) : cudaHostAlloc(&p, kBytes, cudaHostAllocMapped),
            cudaSuccess);
  std::vector<unsigned char> bytes(kBytes);
  EXPECT_EQ(cudaMemcpy(bytes.data(), p, kBytes, cudaMemcpyDefault), cudaSuccess);
  device ? cudaFree(p) : cudaFreeHost(p);
  return bytes;
}

TEST(EmuFill, FreshMemory) {
  struct Restore {
    ~Restore() { dsrt_fake_cuda_set_fill(nullptr); }
  } restore;
  for (bool device : {true, false}) {
    ASSERT_TRUE(dsrt_fake_cuda_set_fill("nan"));
    for (unsigned char b : fresh(device))
      ASSERT_EQ(b, 0xff) << (device ? "cudaMalloc" : "cudaHostAlloc");
    ASSERT_TRUE(dsrt_fake_cuda_set_fill("zero"));
    for (unsigned char b : fresh(device))
      ASSERT_EQ(b, 0) << (device ? "cudaMalloc" : "cudaHostAlloc");
  }
  EXPECT_FALSE(dsrt_fake_cuda_set_fill("ones"));
}

__global__ void load_uint4(const unsigned char *p, uint4 *out) {
  *out = *reinterpret_cast<const uint4 *>(p);
}
__global__ void copy_async(unsigned char *dst, const unsigned char *src) {
  dsrt::detail::cp_async_16(dst, src);
  dsrt::detail::cp_async_commit();
  dsrt::detail::cp_async_wait<0>();
}
// Every lane supplies the row address base + 16 lane + offset.
__global__ void ldmatrix_rows(const uint16_t *base, int offset, uint32_t *out) {
  uint32_t r[4];
  dsrt::detail::ldmatrix_x4<false>(r, base + 8 * threadIdx.x + offset);
  out[threadIdx.x] = r[0];
}

// 1 KiB of device memory, 256-byte aligned as cudaMalloc's.
struct DeviceBytes {
  unsigned char *p = nullptr;
  DeviceBytes() {
    EXPECT_EQ(cudaMalloc(&p, 1024), cudaSuccess);
    EXPECT_EQ(cudaMemset(p, 0, 1024), cudaSuccess);
  }
  ~DeviceBytes() { cudaFree(p); }
};

TEST(EmuAlign, CpAsyncAndLdmatrix) {
  DeviceBytes a, b;
  copy_async<<<1, 1>>>(b.p + 16, a.p + 32);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_DEATH(copy_async<<<1, 1>>>(b.p + 16, a.p + 40),
               "copy_async.*cp\\.async source 0x[0-9a-f]+ is not 16-byte aligned");
  EXPECT_DEATH(copy_async<<<1, 1>>>(b.p + 4, a.p + 32),
               "cp\\.async destination 0x[0-9a-f]+ is not 16-byte aligned");
  const uint16_t *rows = reinterpret_cast<const uint16_t *>(a.p);
  uint32_t *out = reinterpret_cast<uint32_t *>(b.p);
  ldmatrix_rows<<<1, 32>>>(rows, 0, out);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_DEATH(ldmatrix_rows<<<1, 32>>>(rows, 4, out),
               "ldmatrix_rows.*ldmatrix row address 0x[0-9a-f]+ is not 16-byte aligned");
}

TEST(EmuAlign, Uint4Load) {
  DeviceBytes a, b;
  uint4 *out = reinterpret_cast<uint4 *>(b.p);
  load_uint4<<<1, 1>>>(a.p + 16, out);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
#if DSEMU_ALIGNMENT_CHECK
  EXPECT_DEATH(load_uint4<<<1, 1>>>(a.p + 8, out),
               "emu_test\\.cu:[0-9]+:.*misaligned address 0x[0-9a-f]+ for type 'const (struct )?uint4'");
#else
  // Without the check the load is what the host compiler made of it: an
  // aligned SSE load faults with no location, an unaligned one succeeds.
  GTEST_SKIP() << "the misaligned load is checked by dsrt_cuda_emu_align_kernel_test";
#endif
}

}  // namespace

// dsrt_cuda_fake_clock: the fake CUDA runtime's device clocks (run with
// LD_PRELOAD=libdsrt_fake_cudart.so; fake_cudart.cpp). Each piece of work
// takes 1 ms of its stream's clock, from when that stream's earlier work
// ended, an event it waits on was reached and the host last waited: so
// work on two streams nothing orders overlaps, as on a GPU, and the
// traces of programs run behind the fake show what their schedule
// overlaps (test/Compile/cuda-fake-run.test). Exits 1 naming the first
// check that fails.
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>

namespace {

int failures = 0;

void expect_ms(const char *what, cudaEvent_t from, cudaEvent_t to, float want) {
  float ms = -1;
  if (cudaEventElapsedTime(&ms, from, to) != cudaSuccess || ms != want) {
    std::fprintf(stderr, "fake clock: %s: %g ms, expected %g\n", what, ms, want);
    ++failures;
  }
}

}  // namespace

int main() {
  cudaStream_t a, b;
  cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking);
  cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking);
  cudaEvent_t e[8];
  for (cudaEvent_t &event : e) cudaEventCreate(&event);
  void *p = nullptr;
  cudaMalloc(&p, 64);
  // Two streams, nothing ordering them: both pieces run in the same 1 ms.
  cudaEventRecord(e[0], a);
  cudaMemsetAsync(p, 0, 64, a);
  cudaMemsetAsync(p, 0, 64, b);
  cudaEventRecord(e[1], a);
  cudaEventRecord(e[2], b);
  expect_ms("a's piece", e[0], e[1], 1);
  expect_ms("b's piece beside a's", e[0], e[2], 1);
  // b waits for a's next piece: its own starts after it.
  cudaMemsetAsync(p, 0, 64, a);
  cudaEventRecord(e[3], a);
  cudaStreamWaitEvent(b, e[3], 0);
  cudaMemsetAsync(p, 0, 64, b);
  cudaEventRecord(e[4], b);
  expect_ms("b after waiting for a", e[0], e[4], 3);
  // The host waits for b; a's next piece starts no earlier.
  cudaStreamSynchronize(b);
  cudaMemsetAsync(p, 0, 64, a);
  cudaEventRecord(e[5], a);
  expect_ms("a after the host waited for b", e[0], e[5], 4);
  // The legacy default stream waits for blocking streams only: a and b are
  // non-blocking, so a memset there starts at the host's time.
  cudaEventRecord(e[6], nullptr);
  cudaMemsetAsync(p, 0, 64, nullptr);
  cudaEventRecord(e[7], nullptr);
  expect_ms("the legacy stream's piece", e[6], e[7], 1);
  cudaFree(p);
  if (failures) return 1;
  std::printf("fake clock: ok\n");
  return 0;
}

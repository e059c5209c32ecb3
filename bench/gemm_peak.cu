// The bf16 GEMM peak of this GPU, measured: what bench/gpu_bench.py takes
// MFU against. A square bf16 x bf16 -> bf16 GEMM with fp32 accumulation
// (what a bf16 training step's matmuls are) through cuBLASLt, its best
// heuristic algorithm, timed with cudaEvents after a warm-up of 20 calls:
// the fastest of 5 batches of ITERATIONS calls (on an H200 the mean of one
// batch of 50 after 5 warm-up calls read 807 and 882 TFLOP/s in two runs a
// minute apart; a peak is the best the clocks sustain for a batch).
//
//   gemm_peak [SIZE [ITERATIONS]]      default 8192, 20
//
// Prints "bf16 gemm SIZE: X TFLOP/s" (2 * SIZE^3 flops per GEMM). Exits 2
// when there is no CUDA device, 1 on any other CUDA or cuBLASLt error.
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

#define CUDA_OK(call)                                                              \
  do {                                                                             \
    cudaError_t status_ = (call);                                                  \
    if (status_ != cudaSuccess) {                                                  \
      std::fprintf(stderr, "gemm_peak: %s: %s\n", #call, cudaGetErrorString(status_)); \
      std::exit(1);                                                                \
    }                                                                              \
  } while (0)
#define LT_OK(call)                                                                \
  do {                                                                             \
    cublasStatus_t status_ = (call);                                               \
    if (status_ != CUBLAS_STATUS_SUCCESS) {                                        \
      std::fprintf(stderr, "gemm_peak: %s: cuBLAS status %d\n", #call, (int)status_); \
      std::exit(1);                                                                \
    }                                                                              \
  } while (0)

// Small values, so that the sums stay finite (the timing does not care).
__global__ void fill(__nv_bfloat16 *p, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x)
    p[i] = __float2bfloat16(((i * 2654435761u) % 1024) / 1024.0f - 0.5f);
}

int main(int argc, char **argv) {
  const long n = argc > 1 ? std::atol(argv[1]) : 8192;
  const int iterations = argc > 2 ? std::atoi(argv[2]) : 20;
  if (n < 256 || iterations < 1) {
    std::fprintf(stderr, "usage: gemm_peak [SIZE >= 256 [ITERATIONS >= 1]]\n");
    return 1;
  }
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::fprintf(stderr, "gemm_peak: no CUDA device\n");
    return 2;
  }
  const size_t elements = (size_t)n * n;
  __nv_bfloat16 *a, *b, *c;
  CUDA_OK(cudaMalloc(&a, elements * sizeof *a));
  CUDA_OK(cudaMalloc(&b, elements * sizeof *b));
  CUDA_OK(cudaMalloc(&c, elements * sizeof *c));
  fill<<<1024, 256>>>(a, elements);
  fill<<<1024, 256>>>(b, elements);
  CUDA_OK(cudaGetLastError());
  const size_t workspace_bytes = 64u << 20;
  void *workspace;
  CUDA_OK(cudaMalloc(&workspace, workspace_bytes));

  cublasLtHandle_t lt;
  LT_OK(cublasLtCreate(&lt));
  cublasLtMatmulDesc_t op;
  LT_OK(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  // C = A^T B with column-major operands: the layout cuBLAS is fastest in.
  cublasOperation_t transpose = CUBLAS_OP_T;
  LT_OK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &transpose,
                                       sizeof transpose));
  cublasLtMatrixLayout_t la, lb, lc;
  LT_OK(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, n, n, n));
  LT_OK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, n, n, n));
  LT_OK(cublasLtMatrixLayoutCreate(&lc, CUDA_R_16BF, n, n, n));
  cublasLtMatmulPreference_t preference;
  LT_OK(cublasLtMatmulPreferenceCreate(&preference));
  LT_OK(cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                             &workspace_bytes, sizeof workspace_bytes));
  cublasLtMatmulHeuristicResult_t heuristic;
  int found = 0;
  LT_OK(cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, lc, lc, preference, 1, &heuristic, &found));
  if (found == 0) {
    std::fprintf(stderr, "gemm_peak: cuBLASLt has no algorithm for a bf16 GEMM of %ld\n", n);
    return 1;
  }
  const float alpha = 1.0f, beta = 0.0f;
  cudaStream_t stream;
  CUDA_OK(cudaStreamCreate(&stream));
  auto gemm = [&] {
    LT_OK(cublasLtMatmul(lt, op, &alpha, a, la, b, lb, &beta, c, lc, c, lc, &heuristic.algo,
                         workspace, workspace_bytes, stream));
  };
  for (int i = 0; i < 20; ++i)
    gemm();
  cudaEvent_t start, stop;
  CUDA_OK(cudaEventCreate(&start));
  CUDA_OK(cudaEventCreate(&stop));
  float ms = 0;
  for (int batch = 0; batch < 5; ++batch) {
    CUDA_OK(cudaEventRecord(start, stream));
    for (int i = 0; i < iterations; ++i)
      gemm();
    CUDA_OK(cudaEventRecord(stop, stream));
    CUDA_OK(cudaEventSynchronize(stop));
    float batch_ms = 0;
    CUDA_OK(cudaEventElapsedTime(&batch_ms, start, stop));
    if (batch == 0 || batch_ms < ms)
      ms = batch_ms;
  }
  const double flops = 2.0 * n * n * n * iterations;
  std::printf("bf16 gemm %ld: %.1f TFLOP/s\n", n, flops / (ms * 1e-3) / 1e12);
  return 0;
}

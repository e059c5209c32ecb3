// Linear algebra on the cuda backend: matmul and gemm on cuBLASLt.
//
// Row-major y = op(a) op(b) is column-major y^T = op(b)^T op(a)^T, so each
// call hands cuBLASLt b's storage as its A and a's as its B, no copies.
// f16/bf16 operands go to the tensor cores as they are, accumulating in
// f32 (CUBLAS_COMPUTE_32F) and rounding once into y; f32 uses
// CUBLAS_COMPUTE_32F too, which excludes TF32, unless DSRT_ALLOW_TF32=1
// (CUBLAS_COMPUTE_32F_FAST_TF32). The planned workspace (kernels.h: f16/bf16
// only) is cuBLASLt's; f32 calls run with none. Batches whose operands are
// either whole-batch contiguous or broadcast run as one strided-batched
// call, others one call per matrix. Integers use an explicit kernel with
// wrapping arithmetic.
//
// matmul_bias and matmul_bias_grad are one call each with a cuBLASLt
// epilogue: CUBLASLT_EPILOGUE_BIAS adds the bias vector (y's type, one
// value per row of cuBLASLt's column-major D, i.e. per column of y) and the
// addend comes in as C with beta 1; CUBLASLT_EPILOGUE_BGRADA writes the sums
// of cuBLASLt's A (b's storage, the output gradient) over k, one per row of
// D, in y's type; CUBLASLT_EPILOGUE_BGRADB (matmul_lhs_bias_grad, y = aᵀ b)
// writes the sums of cuBLASLt's B (a's storage, the output gradient) over
// k, one per column of D. When cuBLASLt's heuristic has no algorithm for
// an epilogue (NOT_SUPPORTED, or no result), the plan remembers it and
// every call runs the plain product (the addend as C with beta 1) and then
// the bias add or the column sums with the kernels of their own (the
// reduce's workspace is the planned one): two launches instead of one, and
// under mixed precision the bias added to the rounded product.
// DSRT_BIAS_GRAD=separate runs the bias gradients so always (the product
// may then take cuBLASLt's split-k algorithms, which the epilogues may not).
// cuBLASLt gets the planned workspace past the staging buffers: for
// --target cuda at least 32 MiB for a large product (DsKernels.cpp,
// matmulLtBytes); DSRT_CUBLASLT_WORKSPACE caps it, to compare.
// cuBLASLt's GELU epilogues compute the tanh approximation,
// so only matmul_bias_gelu and matmul_dgelu (formed from ds.gelu {approximate
// = tanh}) use them: CUBLASLT_EPILOGUE_GELU_AUX_BIAS writes the biased
// product before the GELU as the aux matrix, which CUBLASLT_EPILOGUE_DGELU
// reads back to multiply the product by the GELU's derivative. The aux
// matrix is laid out like D (column-major, ld n); cuBLASLt needs its ld
// divisible by 8, so a product with n % 8 != 0 runs as the plain product
// and a pointwise kernel instead. The exact erf GELU never uses them.
#include "cuda/common.cuh"
#include "elementwise_ops.h"

#include <cstdlib>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <vector>

namespace dsrt {

using namespace detail;

namespace {

cudaDataType_t cuda_type(DType dtype) {
  switch (dtype) {
  case DType::F16: return CUDA_R_16F;
  case DType::BF16: return CUDA_R_16BF;
  default: return CUDA_R_32F;
  }
}

cublasLtMatrixLayout_t layout(const char *kernel, cudaDataType_t type, int64_t rows,
                              int64_t cols, int64_t ld, int64_t batch, int64_t stride) {
  cublasLtMatrixLayout_t l = nullptr;
  check_cublas(cublasLtMatrixLayoutCreate(&l, type, rows, cols, ld), kernel,
               "cublasLtMatrixLayoutCreate");
  if (batch > 1) {
    int32_t count = static_cast<int32_t>(batch);
    check_cublas(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count,
                                                  sizeof(count)),
                 kernel, "batch count");
    check_cublas(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                                  &stride, sizeof(stride)),
                 kernel, "batch stride");
  }
  return l;
}

// One (possibly strided-batched) row-major product:
// y[i] = alpha * op(a[i]) op(b[i]) + beta * c[i] for i < batch, the
// operands advancing by their strides (0: the same matrix every time).
struct Gemm {
  const char *kernel;
  DType dtype;
  bool trans_a, trans_b;
  int64_t m, n, k, lda, ldb;
  int64_t batch = 1, a_stride = 0, b_stride = 0, y_stride = 0;
  // y's leading dimension: n unless y is a staged buffer (run_staged).
  int64_t ldy = 0;
  // y (C and D) in f32 whatever a's and b's type: run_split_k's sums.
  bool y_f32 = false;
  // CUBLASLT_EPILOGUE_BIAS / BGRADA with their vector, or the default.
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  void *bias = nullptr;
  // GELU_AUX_BIAS / DGELU: the aux matrix (D's layout and type), or none.
  void *aux = nullptr;
};

// The cuBLASLt descriptors, layouts and algorithm of one kind of product:
// made on a product's first call and kept for the process's life, so that
// the steps after the first create none and ask no heuristic (a program
// runs the same products, on the same workspaces, every step).
struct LtPlan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr, d = nullptr;
  cublasLtMatmulAlgo_t algo{};
  // The bias pointer is an attribute of `op`, set before each call.
  std::mutex bias_mutex;
  // False when the heuristic found no algorithm for the epilogue: the
  // caller runs the fallback.
  bool has_algo = true;
  // With DSRT_CUBLASLT_TUNE=N: the heuristic's first N algorithms, timed
  // on the first call (tune_algo), which sets `algo` to the fastest.
  std::vector<cublasLtMatmulAlgo_t> candidates;
  std::mutex tune_mutex;
  bool tuned = false;
  ~LtPlan() {
    if (d) cublasLtMatrixLayoutDestroy(d);
    if (c) cublasLtMatrixLayoutDestroy(c);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

// What an LtPlan depends on: the shapes, strides, types, transposes,
// compute type, workspace bytes, epilogue and the bias vector's alignment
// (which the heuristic reads from the pointer: 16 bytes or less).
using LtKey = std::tuple<int, int, bool, bool, int64_t, int64_t, int64_t, int64_t, int64_t,
                         int64_t, int64_t, int64_t, int64_t, size_t, int, bool, bool,
                         int64_t, bool>;

bool aligned16(const void *p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

struct PreferenceHolder {
  cublasLtMatmulPreference_t pref = nullptr;
  ~PreferenceHolder() {
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
  }
};

// The GELU epilogues' aux matrix: D's type, D's leading dimension (n, a
// multiple of 8 as cuBLASLt requires), its pointer (set again per call).
void set_aux(cublasLtMatmulDesc_t op, const Gemm &g, cudaDataType_t type) {
  if (!g.aux)
    return;
  const int64_t ld = g.n;
  const int32_t aux_type = type;
  check_cublas(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER,
                                              &g.aux, sizeof(g.aux)),
               g.kernel, "aux pointer");
  check_cublas(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld,
                                              sizeof(ld)),
               g.kernel, "aux ld");
  check_cublas(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE,
                                              &aux_type, sizeof(aux_type)),
               g.kernel, "aux type");
}

std::unique_ptr<LtPlan> make_plan(const Gemm &g, cudaDataType_t type,
                                  cublasComputeType_t compute, size_t ws_bytes) {
  auto plan = std::make_unique<LtPlan>();
  check_cublas(cublasLtMatmulDescCreate(&plan->op, compute, CUDA_R_32F), g.kernel,
               "cublasLtMatmulDescCreate");
  // cuBLASLt's A is b's storage (op: trans_b), its B is a's (op: trans_a).
  const cublasOperation_t op_a = g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  check_cublas(cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_TRANSA, &op_a,
                                              sizeof(op_a)),
               g.kernel, "transa");
  check_cublas(cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_TRANSB, &op_b,
                                              sizeof(op_b)),
               g.kernel, "transb");
  if (g.epilogue != CUBLASLT_EPILOGUE_DEFAULT) {
    const int32_t bias_type = type;
    check_cublas(cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_EPILOGUE,
                                                &g.epilogue, sizeof(g.epilogue)),
                 g.kernel, "epilogue");
    check_cublas(cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
                                                &bias_type, sizeof(bias_type)),
                 g.kernel, "bias type");
    check_cublas(cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                &g.bias, sizeof(g.bias)),
                 g.kernel, "bias pointer");
  }
  set_aux(plan->op, g, type);
  // Stored column-major shapes: b is (ldb x rows of b), a is (lda x rows of a).
  const int64_t b_rows = g.trans_b ? g.k : g.n, b_cols = g.trans_b ? g.n : g.k;
  const int64_t a_rows = g.trans_a ? g.m : g.k, a_cols = g.trans_a ? g.k : g.m;
  plan->a = layout(g.kernel, type, b_rows, b_cols, g.ldb, g.batch, g.b_stride);
  plan->b = layout(g.kernel, type, a_rows, a_cols, g.lda, g.batch, g.a_stride);
  const int64_t ldy = g.ldy ? g.ldy : g.n;
  const cudaDataType_t y_type = g.y_f32 ? CUDA_R_32F : type;
  plan->c = layout(g.kernel, y_type, g.n, g.m, ldy, g.batch, g.y_stride);
  plan->d = layout(g.kernel, y_type, g.n, g.m, ldy, g.batch, g.y_stride);
  PreferenceHolder pref;
  check_cublas(cublasLtMatmulPreferenceCreate(&pref.pref), g.kernel,
               "cublasLtMatmulPreferenceCreate");
  check_cublas(cublasLtMatmulPreferenceSetAttribute(pref.pref,
                                                    CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                    &ws_bytes, sizeof(ws_bytes)),
               g.kernel, "workspace preference");
  // The heuristic's best, or with DSRT_CUBLASLT_TUNE=N its first N to time.
  const int requested = std::max(1, cublaslt_tune());
  std::vector<cublasLtMatmulHeuristicResult_t> results(static_cast<size_t>(requested));
  int found = 0;
  const cublasStatus_t status =
      cublasLtMatmulAlgoGetHeuristic(cublaslt(), plan->op, plan->a, plan->b, plan->c, plan->d,
                                     pref.pref, requested, results.data(), &found);
  // An epilogue cuBLASLt has no algorithm for on this shape and type.
  if (g.epilogue != CUBLASLT_EPILOGUE_DEFAULT &&
      (status == CUBLAS_STATUS_NOT_SUPPORTED || (status == CUBLAS_STATUS_SUCCESS && found < 1))) {
    plan->has_algo = false;
    return plan;
  }
  check_cublas(status, g.kernel, "cublasLtMatmulAlgoGetHeuristic");
  if (found < 1)
    fail(g.kernel, "cuBLASLt has no algorithm for this product (m " + std::to_string(g.m) +
                       ", n " + std::to_string(g.n) + ", k " + std::to_string(g.k) + ", " +
                       dtype_name(g.dtype) + ", epilogue " + std::to_string(g.epilogue) + ")");
  plan->algo = results[0].algo;
  for (int i = 0; i < found && requested > 1; ++i)
    if (results[static_cast<size_t>(i)].state == CUBLAS_STATUS_SUCCESS)
      plan->candidates.push_back(results[static_cast<size_t>(i)].algo);
  return plan;
}

// One cublasLtMatmul of `plan`'s product with `algo` (C = y where c is
// null, as cuBLASLt takes it for beta 0).
cublasStatus_t lt_matmul(cudaStream_t stream, const LtPlan &plan,
                         const cublasLtMatmulAlgo_t &algo, float alpha, const void *a,
                         const void *b, float beta, const void *c, void *y, void *ws_data,
                         size_t ws_bytes) {
  return cublasLtMatmul(cublaslt(), plan.op, &alpha, b, plan.a, a, plan.b, &beta, c ? c : y,
                        plan.c, y, plan.d, &algo, ws_data, ws_bytes, stream);
}

// DSRT_CUBLASLT_TUNE: times each candidate algorithm of `plan` on this
// call's operands (one call to warm it, then kTuneCalls between two
// events, the host waiting for the second) and keeps the fastest in
// plan.algo; a candidate cuBLASLt refuses is skipped. Only where running
// the product again gives the same y (beta 0, or C not y): else the
// heuristic's first stays. Once per plan, on its first call (the first
// step); the results may then differ by the algorithm chosen, run to run.
void tune_algo(cudaStream_t stream, LtPlan &plan, const Gemm &g, float alpha, const void *a,
               const void *b, float beta, const void *c, void *y, void *ws_data,
               size_t ws_bytes) {
  plan.tuned = true;
  if (beta != 0.0f && (c == nullptr || c == y))
    return;
  constexpr int kTuneCalls = 3;
  cudaEvent_t start = nullptr, stop = nullptr;
  check_cuda(cudaEventCreate(&start), g.kernel, "cudaEventCreate");
  check_cuda(cudaEventCreate(&stop), g.kernel, "cudaEventCreate");
  float best = std::numeric_limits<float>::infinity();
  size_t chosen = 0;
  for (size_t i = 0; i < plan.candidates.size(); ++i) {
    auto call = [&] {
      return lt_matmul(stream, plan, plan.candidates[i], alpha, a, b, beta, c, y, ws_data,
                       ws_bytes);
    };
    if (call() != CUBLAS_STATUS_SUCCESS)
      continue;
    check_cuda(cudaEventRecord(start, stream), g.kernel, "cudaEventRecord");
    bool ok = true;
    for (int r = 0; r < kTuneCalls && ok; ++r)
      ok = call() == CUBLAS_STATUS_SUCCESS;
    check_cuda(cudaEventRecord(stop, stream), g.kernel, "cudaEventRecord");
    check_cuda(cudaEventSynchronize(stop), g.kernel, "cudaEventSynchronize");
    float ms = 0.0f;
    check_cuda(cudaEventElapsedTime(&ms, start, stop), g.kernel, "cudaEventElapsedTime");
    if (ok && ms < best) {
      best = ms;
      chosen = i;
    }
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  plan.algo = plan.candidates[chosen];
}

// The plan of `g`'s kind of product, made on its first call.
LtPlan &lt_plan(const Gemm &g, cudaDataType_t type, cublasComputeType_t compute,
                      size_t ws_bytes) {
  // Never destroyed: products may run while statics are destroyed.
  static std::mutex *mutex = new std::mutex;
  static auto *plans = new std::map<LtKey, std::unique_ptr<LtPlan>>;
  const LtKey key{static_cast<int>(type), static_cast<int>(compute), g.trans_a, g.trans_b,
                  g.m, g.n, g.k, g.lda, g.ldb, g.batch, g.a_stride, g.b_stride, g.y_stride,
                  ws_bytes, static_cast<int>(g.epilogue), aligned16(g.bias), aligned16(g.aux),
                  g.ldy, g.y_f32};
  std::lock_guard<std::mutex> lock(*mutex);
  auto it = plans->find(key);
  if (it == plans->end())
    it = plans->emplace(key, make_plan(g, type, compute, ws_bytes)).first;
  return *it->second;
}

// False (and nothing run) when `g` has an epilogue cuBLASLt has no
// algorithm for: the caller falls back.
bool run_lt(cudaStream_t stream, const Gemm &g, float alpha, const void *a, const void *b,
            float beta, const void *c, void *y, const Workspace &ws) {
  const cudaDataType_t type = cuda_type(g.dtype);
  const cublasComputeType_t compute =
      g.dtype == DType::F32 && allow_tf32() ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  // The workspace, aligned to 256 bytes as cuBLASLt prefers.
  uintptr_t base = reinterpret_cast<uintptr_t>(ws.data);
  uintptr_t aligned = (base + 255) & ~uintptr_t(255);
  size_t ws_bytes = ws.data && ws.bytes > int64_t(aligned - base)
                        ? static_cast<size_t>(std::min(ws.bytes - int64_t(aligned - base),
                                                       cublaslt_workspace_cap()))
                        : 0;
  void *ws_data = ws_bytes ? reinterpret_cast<void *>(aligned) : nullptr;
  LtPlan &plan = lt_plan(g, type, compute, ws_bytes);
  if (!plan.has_algo)
    return false;
  std::unique_lock<std::mutex> bias_lock;
  if (g.epilogue != CUBLASLT_EPILOGUE_DEFAULT) {
    // This call's vector; held until cuBLASLt has read the descriptor.
    bias_lock = std::unique_lock<std::mutex>(plan.bias_mutex);
    check_cublas(cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                &g.bias, sizeof(g.bias)),
                 g.kernel, "bias pointer");
    if (g.aux)
      check_cublas(cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER,
                                                  &g.aux, sizeof(g.aux)),
                   g.kernel, "aux pointer");
  }
  if (plan.candidates.size() > 1) {
    std::lock_guard<std::mutex> tune_lock(plan.tune_mutex);
    if (!plan.tuned)
      tune_algo(stream, plan, g, alpha, a, b, beta, c, y, ws_data, ws_bytes);
  }
  check_cublas(lt_matmul(stream, plan, plan.algo, alpha, a, b, beta, c, y, ws_data, ws_bytes),
               g.kernel, "cublasLtMatmul");
  return true;
}

// The uniform stride of an operand over the flattened batch, or -1: 0 when
// it broadcasts along every batch axis, one matrix when it is contiguous
// along all of them.
int64_t uniform_stride(const MatmulPlan &p, const int64_t *strides, int64_t matrix) {
  bool all_zero = true, contiguous = true;
  int64_t expect = matrix;
  for (int d = p.batch_rank - 1; d >= 0; --d) {
    if (p.batch_dims[d] == 1)
      continue;
    all_zero = all_zero && strides[d] == 0;
    contiguous = contiguous && strides[d] == expect;
    expect *= p.batch_dims[d];
  }
  return all_zero ? 0 : contiguous ? matrix : -1;
}

// DSRT_MATMUL_STAGE_ROWS=N (tests): chunks of at most N rows (a multiple of
// 8), so that a small staged product runs several chunks.
int64_t stage_rows_cap() {
  static const int64_t cap = [] {
    const char *v = std::getenv("DSRT_MATMUL_STAGE_ROWS");
    const long long n = v ? std::atoll(v) : 0;
    return n >= 8 ? static_cast<int64_t>(n / 8 * 8) : std::numeric_limits<int64_t>::max();
  }();
  return cap;
}

// Copies `rows` rows of `width` 16-bit elements from src to dst (pitches in
// elements), 4 bytes at a time whatever each row's alignment, and writes
// `pad` zeros after each dst row's width: a block per row. A dst row
// starting between two 4-byte words takes its first element alone; a src
// row then starting between words is read as aligned words, each output
// pair the high half of one and the low half of the next (the last pair of
// an even row reads its last element alone, never past the row).
__global__ void copy_rows16_kernel(const uint16_t *src, int64_t spitch, uint16_t *dst,
                                   int64_t dpitch, int64_t width, int64_t rows, int64_t pad) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const uint16_t *s = src + r * spitch;
    uint16_t *d = dst + r * dpitch;
    for (int64_t j = threadIdx.x; j < pad; j += blockDim.x)
      d[width + j] = 0;
    int64_t w = width;
    if (w > 0 && (reinterpret_cast<uintptr_t>(d) & 2) != 0) {
      if (threadIdx.x == 0)
        d[0] = s[0];
      ++d;
      ++s;
      --w;
    }
    const int64_t pairs = w / 2;
    uint32_t *d32 = reinterpret_cast<uint32_t *>(d);
    if ((reinterpret_cast<uintptr_t>(s) & 2) == 0) {
      const uint32_t *s32 = reinterpret_cast<const uint32_t *>(s);
      for (int64_t j = threadIdx.x; j < pairs; j += blockDim.x)
        d32[j] = s32[j];
    } else {
      const uint32_t *base = reinterpret_cast<const uint32_t *>(s - 1);
      for (int64_t j = threadIdx.x; j < pairs; j += blockDim.x) {
        const uint32_t lo = base[j];
        const uint32_t hi = j + 1 < pairs || (w & 1) ? base[j + 1] : uint32_t(s[w - 1]);
        d32[j] = (lo >> 16) | (hi << 16);
      }
    }
    if ((w & 1) != 0 && threadIdx.x == 0)
      d[w - 1] = s[w - 1];
  }
}

void copy_rows16(cudaStream_t stream, const char *kernel, const void *src, int64_t spitch,
                 void *dst, int64_t dpitch, int64_t width, int64_t rows, int64_t pad = 0) {
  if (rows <= 0 || width + pad <= 0)
    return;
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>(rows, int64_t(1) << 20));
  copy_rows16_kernel<<<blocks, 256, 0, stream>>>(static_cast<const uint16_t *>(src), spitch,
                                                 static_cast<uint16_t *>(dst), dpitch, width,
                                                 rows, pad);
  check_launch(kernel);
}

// y (ld n) = the f32 sums y32 (ld ld32) rounded, `rows` rows of n.
template <typename T>
__global__ void round_rows_kernel(const float *y32, int64_t ld32, T *y, int64_t n, int64_t count) {
  DSRT_GRID_STRIDE(i, count) y[i] = st<T>(y32[i / n * ld32 + i % n]);
}

// a [m, k] with k % 8 != 0 and b [k, n] (workspace_shapes.h, matmul_stage:
// a_rows, a_cols, b_last): per block of a_rows rows of y, the contraction
// in chunks of a_cols columns of a, each copied into a_buf with zero
// columns up to 8; b's matching rows read in place but the last chunk's,
// copied into b_buf with zero rows up to 8; the products summed in f32 in
// y32 (ld n rounded to 8), beta 0 then 1, and rounded once into y. Every
// leading dimension and k is a multiple of 8, and each product has a
// block's rows of output tiles.
void run_split_k(cudaStream_t stream, const Gemm &g, const MatmulStage &st, const void *a,
                 const void *b, void *y, uint8_t *a_buf, uint8_t *b_buf, float *y32,
                 const Workspace &rest) {
  const size_t e = dtype_size(g.dtype);
  const int64_t cap = stage_rows_cap();
  const int64_t block_rows = std::min(st.a_rows, cap);
  const int64_t kc = std::min(st.a_cols, std::max<int64_t>(8, cap));
  const int64_t ld32 = round_up8(g.n);
  const int64_t k_last = (g.k - 1) / kc * kc;  // the last chunk's first row of b
  const int64_t w_last = g.k - k_last, w_last8 = round_up8(w_last);
  if (w_last8 * g.n * static_cast<int64_t>(e) > st.b_bytes)
    fail(g.kernel, "DSRT_MATMUL_STAGE_ROWS=" + std::to_string(cap) + " leaves a last chunk of " +
                       std::to_string(w_last8) + " rows of b, more than the workspace's " +
                       std::to_string(st.b_last));
  // b [k, n]'s last chunk of rows, then zero rows up to w_last8 (ld n):
  // copied once for every block of rows.
  copy_rows16(stream, g.kernel, static_cast<const uint8_t *>(b) + k_last * g.ldb * e, g.ldb,
              b_buf, g.n, g.n, w_last);
  check_cuda(cudaMemsetAsync(b_buf + w_last * g.n * e, 0, (w_last8 - w_last) * g.n * e, stream),
             g.kernel, "cudaMemsetAsync");
  for (int64_t r0 = 0; r0 < g.m; r0 += block_rows) {
    const int64_t rows = std::min(block_rows, g.m - r0);
    const uint8_t *a_rows = static_cast<const uint8_t *>(a) + r0 * g.lda * e;
    for (int64_t k0 = 0; k0 < g.k; k0 += kc) {
      const bool last = k0 == k_last;
      const int64_t w = last ? w_last : kc, w8 = round_up8(w);
      copy_rows16(stream, g.kernel, a_rows + k0 * e, g.lda, a_buf, w8, w, rows, w8 - w);
      Gemm c = g;
      c.m = rows;
      c.k = w8;
      c.lda = w8;
      c.ldy = ld32;
      c.y_f32 = true;
      const void *b_chunk = static_cast<const uint8_t *>(b) + k0 * g.ldb * e;
      if (last) {
        b_chunk = b_buf;
        c.ldb = g.n;
      }
      run_lt(stream, c, 1.0f, a_buf, b_chunk, k0 == 0 ? 0.0f : 1.0f, y32, y32, rest);
    }
    const int64_t count = rows * g.n;
    uint8_t *y_rows = static_cast<uint8_t *>(y) + r0 * g.n * e;
    if (g.dtype == DType::F16)
      round_rows_kernel<half_t><<<blocks_for(count), kThreads, 0, stream>>>(
          y32, ld32, reinterpret_cast<half_t *>(y_rows), g.n, count);
    else
      round_rows_kernel<bfloat_t><<<blocks_for(count), kThreads, 0, stream>>>(
          y32, ld32, reinterpret_cast<bfloat_t *>(y_rows), g.n, count);
    check_launch(g.kernel);
  }
}

// A single f16/bf16 product y = op(a) op(b) (g: m the rows over every
// batch) whose y or a leading dimension is not a multiple of 8, through
// the aligned buffers of workspace_shapes.h's matmul_stage: a [m, k] with
// k % 8 != 0 by run_split_k; otherwise per chunk of y's rows, a
// transposed's columns copied in (m % 8 != 0), the product into padded
// rows of y (or straight into y), which are copied out. The copies are
// copy_rows16_kernel launches on the stream (cudaMemcpy2DAsync ran at
// about 250 GB/s on an H200 with these unaligned pitches). False (nothing
// run) when the product is not staged: under the size, or b's leading
// dimension unaligned.
bool run_staged(cudaStream_t stream, const Gemm &g, int64_t m_matrix, const void *a,
                const void *b, void *y, const Workspace &ws) {
  const MatmulStage st = matmul_stage(g.m, m_matrix, g.n, g.k);
  // (b transposed [n, k] with k % 8 != 0 has an unaligned ldb unless a
  // strided view: not staged.)
  const bool split_k = !g.trans_a && !g.trans_b && st.a_rows > 0;
  const bool stage_y = st.y_rows > 0 && !split_k;
  const bool stage_a = g.trans_a && st.at_cols > 0;
  // b [n, k] (transposed) with n % 8 != 0 is copied with zero rows up to
  // n rounded to 8, so that the product's every dimension but k is a
  // multiple of 8 (with n = 50257 cuBLASLt ran the LM head at 85 TFLOP/s
  // even into an aligned y); b [k, n] with n % 8 != 0 is not staged.
  const bool stage_b = stage_y && g.trans_b;
  if ((!stage_y && !stage_a && !split_k) || g.ldb % 8 != 0 || g.batch != 1)
    return false;
  // The buffers at the workspace's start (its base is 256-byte aligned in
  // the plan; realigned here all the same), cuBLASLt's workspace after them.
  const uintptr_t base = (reinterpret_cast<uintptr_t>(ws.data) + 255) & ~uintptr_t(255);
  const int64_t used =
      static_cast<int64_t>(base - reinterpret_cast<uintptr_t>(ws.data)) + st.bytes();
  if (!ws.data || ws.bytes < used)
    fail(g.kernel, "the workspace holds " + std::to_string(ws.bytes) + " bytes, the staged " +
                       "product needs " + std::to_string(used));
  uint8_t *y_buf = reinterpret_cast<uint8_t *>(base);
  uint8_t *a_buf = y_buf + st.y_bytes;
  uint8_t *b_buf = a_buf + st.a_bytes;
  float *y32 = reinterpret_cast<float *>(b_buf + st.b_bytes);
  const Workspace rest{reinterpret_cast<uint8_t *>(ws.data) + used, ws.bytes - used};
  if (split_k) {
    run_split_k(stream, g, st, a, b, y, a_buf, b_buf, y32, rest);
    return true;
  }
  int64_t chunk = std::numeric_limits<int64_t>::max();
  if (stage_y)
    chunk = st.y_rows;
  if (stage_a)
    chunk = std::min(chunk, st.at_cols);
  chunk = std::max<int64_t>(8, std::min(chunk, stage_rows_cap()));
  const int64_t ldy = stage_y ? round_up8(g.n) : g.n;
  const size_t e = dtype_size(g.dtype);
  if (stage_b) {
    // b is contiguous [n, k] (ldb = k): one copy, then the zero rows.
    const size_t b_bytes = static_cast<size_t>(g.n * g.k) * e;
    check_cuda(cudaMemcpyAsync(b_buf, b, b_bytes, cudaMemcpyDeviceToDevice, stream), g.kernel,
               "cudaMemcpyAsync");
    check_cuda(cudaMemsetAsync(b_buf + b_bytes, 0, (round_up8(g.n) - g.n) * g.k * e, stream),
               g.kernel, "cudaMemsetAsync");
  }
  for (int64_t r0 = 0; r0 < g.m; r0 += chunk) {
    const int64_t rows = std::min(chunk, g.m - r0);
    Gemm c = g;
    c.m = rows;
    if (stage_b)
      c.n = round_up8(g.n);  // y's padding columns: products with b's zero rows
    const uint8_t *a_chunk;
    if (stage_a) {  // a is [k, m]: columns r0.. of every row
      copy_rows16(stream, g.kernel, static_cast<const uint8_t *>(a) + r0 * e, g.lda, a_buf,
                  chunk, rows, g.k);
      a_chunk = a_buf;
      c.lda = chunk;
    } else {
      a_chunk = static_cast<const uint8_t *>(a) + (g.trans_a ? r0 : r0 * g.lda) * e;
    }
    uint8_t *y_chunk = stage_y ? y_buf : static_cast<uint8_t *>(y) + r0 * g.n * e;
    c.ldy = ldy;
    run_lt(stream, c, 1.0f, a_chunk, stage_b ? b_buf : b, 0.0f, nullptr, y_chunk, rest);
    if (stage_y)
      copy_rows16(stream, g.kernel, y_buf, ldy, static_cast<uint8_t *>(y) + r0 * g.n * e, g.n,
                  g.n, rows);
  }
  return true;
}

// `stage`: a large f16/bf16 product with an unaligned leading dimension
// may run through run_staged (neither operand a vector: workspace_shapes.h).
void matmul_float(cudaStream_t stream, const char *kernel, const MatmulPlan &p, DType dtype,
                  const void *a, const void *b, void *y, const Workspace &ws, bool stage) {
  const size_t esize = dtype_size(dtype);
  Gemm g{kernel, dtype, p.trans_a, p.trans_b, p.m, p.n, p.k, p.lda, p.ldb};
  const int64_t a_matrix = p.m * p.k, b_matrix = p.k * p.n, y_matrix = p.m * p.n;
  const int64_t sa = uniform_stride(p, p.a_batch_stride, a_matrix);
  const int64_t sb = uniform_stride(p, p.b_batch_stride, b_matrix);
  // [B..., M, K] x [K, N]: the batch folds into M, one call.
  if (!p.b_has_batch && !p.trans_a && (p.batch == 1 || sa == a_matrix)) {
    g.m = p.m * p.batch;
    if (stage && run_staged(stream, g, p.m, a, b, y, ws))
      return;
    run_lt(stream, g, 1.0f, a, b, 0.0f, nullptr, y, ws);
    return;
  }
  if (p.batch == 1 && stage && run_staged(stream, g, p.m, a, b, y, ws))
    return;
  if (p.batch == 1 || (sa >= 0 && sb >= 0 && p.batch <= std::numeric_limits<int32_t>::max())) {
    g.batch = p.batch;
    g.a_stride = sa;
    g.b_stride = sb;
    g.y_stride = y_matrix;
    run_lt(stream, g, 1.0f, a, b, 0.0f, nullptr, y, ws);
    return;
  }
  for_each_batch(p, [&](int64_t i, int64_t a_off, int64_t b_off) {
    run_lt(stream, g, 1.0f, static_cast<const uint8_t *>(a) + a_off * esize,
           static_cast<const uint8_t *>(b) + b_off * esize, 0.0f, nullptr,
           static_cast<uint8_t *>(y) + i * y_matrix * esize, ws);
  });
}

// Integer matmul: one thread per output element, wrapping products and sums.
template <typename T>
__global__ void matmul_int_kernel(MatmulPlan p, const T *a, const T *b, T *y, int64_t total) {
  using U = std::make_unsigned_t<T>;
  DSRT_GRID_STRIDE(e, total) {
    const int64_t j = e % p.n, r = e / p.n;
    int64_t bi = r / p.m;
    const int64_t i = r % p.m;
    int64_t a_off = 0, b_off = 0;
    for (int d = p.batch_rank - 1; d >= 0; --d) {
      const int64_t at = bi % p.batch_dims[d];
      bi /= p.batch_dims[d];
      a_off += at * p.a_batch_stride[d];
      b_off += at * p.b_batch_stride[d];
    }
    U sum = 0;
    for (int64_t kk = 0; kk < p.k; ++kk)
      sum += static_cast<U>(a[a_off + i * p.a_rs + kk * p.a_cs]) *
             static_cast<U>(b[b_off + kk * p.b_rs + j * p.b_cs]);
    y[e] = static_cast<T>(sum);
  }
}

void check_lt_size(const char *kernel, const MatmulPlan &p) {
  const int64_t limit = std::numeric_limits<int32_t>::max();
  if (p.m * std::max<int64_t>(1, p.batch) > limit || p.n > limit || p.k > limit)
    fail(kernel, "matrix dimensions exceed cuBLASLt's 32-bit range");
}

// Broadcasts c (f32/f16/bf16, like y) into y.
template <typename T>
__global__ void expand_kernel(BroadcastPlan plan, const T *c, T *y, int64_t n) {
  DSRT_GRID_STRIDE(i, n) y[i] = c[plan_offset(plan, 0, i)];
}

template <typename T>
__global__ void scale_kernel(float beta, const T *c, T *y, int64_t n) {
  DSRT_GRID_STRIDE(i, n) y[i] = st<T>(beta * ld(c[i]));
}

// matmul_bias of an empty contraction: y = bias + addend, in f32.
template <typename T>
__global__ void bias_rows_kernel(const T *bias, const T *addend, T *y, int64_t cols,
                                 int64_t n) {
  DSRT_GRID_STRIDE(i, n) {
    float v = ld(bias[i % cols]);
    if (addend) v += ld(addend[i]);
    y[i] = st<T>(v);
  }
}

// matmul_bias's fallback: y += bias along every row, in f32.
template <typename T>
__global__ void add_bias_rows_kernel(const T *bias, T *y, int64_t cols, int64_t n) {
  DSRT_GRID_STRIDE(i, n) y[i] = st<T>(ld(y[i]) + ld(bias[i % cols]));
}

// A weight gradient with a bias gradient: y = op(a) op(b) and bias_grad
// the column sums of `summed` (b, or a for the [out, in] layout), in one
// cuBLASLt call with `epilogue` (BGRADA or BGRADB), else the product and
// the reduce kernel.
void run_bias_grad(Stream &s, cudaStream_t stream, const char *kernel, const MatmulPlan &p,
                   const Tensor &a, const Tensor &b, const Tensor &y, const Tensor &bias_grad,
                   const Tensor &summed, cublasLtEpilogue_t epilogue, const Workspace &ws) {
  check_lt_size(kernel, p);
  const int64_t axis0 = 0;
  if (p.k == 0 || y.numel() == 0) {
    // An empty sum, or an empty product whose bias gradient cuBLASLt
    // would not write: zeros, and the sums by the reduce kernel.
    if (y.numel() != 0)
      check_cuda(cudaMemsetAsync(y.data, 0, y.nbytes(), stream), kernel, "cudaMemsetAsync");
    if (bias_grad.numel() != 0 && p.k == 0)
      check_cuda(cudaMemsetAsync(bias_grad.data, 0, bias_grad.nbytes(), stream), kernel,
                 "cudaMemsetAsync");
    if (bias_grad.numel() != 0 && p.k != 0)
      reduce(s, ReduceOp::Sum, summed, bias_grad, &axis0, 1, ws);
    return;
  }
  Gemm g{kernel, a.dtype, p.trans_a, p.trans_b, p.m, p.n, p.k, p.lda, p.ldb};
  if (bias_grad_epilogue()) {
    g.epilogue = epilogue;
    g.bias = bias_grad.data;
    if (run_lt(stream, g, 1.0f, a.data, b.data, 0.0f, nullptr, y.data, ws))
      return;
    g.epilogue = CUBLASLT_EPILOGUE_DEFAULT;
    g.bias = nullptr;
  }
  run_lt(stream, g, 1.0f, a.data, b.data, 0.0f, nullptr, y.data, ws);
  reduce(s, ReduceOp::Sum, summed, bias_grad, &axis0, 1, ws);
}

// The GELU epilogues' pointwise step where cuBLASLt cannot take it:
// y = gelu(pre) (forward) or y = y * gelu'(pre) (backward), in f32.
template <typename T>
__global__ void gelu_tanh_kernel(const T *pre, T *y, bool grad, int64_t n) {
  DSRT_GRID_STRIDE(i, n) {
    const float x = ld(pre[i]);
    y[i] = grad ? st<T>(ld(y[i]) * gelu_tanh_grad_f32(x)) : st<T>(gelu_tanh_f32(x));
  }
}

void gelu_tanh_pointwise(cudaStream_t stream, const char *kernel, const Tensor &pre,
                         const Tensor &y, bool grad) {
  const int64_t n = y.numel();
  dispatch_float(kernel, y.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    gelu_tanh_kernel<T><<<blocks_for(n), kThreads, 0, stream>>>(pre.as<T>(), y.as<T>(), grad, n);
  });
  check_launch(kernel);
}

// matmul_bias_gelu's and matmul_dgelu's one cuBLASLt call: y = a op(b)
// through `epilogue`, with its bias (or none) and aux matrix. False (and
// nothing run) when cuBLASLt has no algorithm for it: the caller falls back.
bool gelu_epilogue(Stream &s, const char *kernel, const MatmulPlan &p, const Tensor &a,
                   const Tensor &b, const Tensor &y, cublasLtEpilogue_t epilogue, void *bias,
                   void *aux, const Workspace &ws) {
  cudaStream_t stream = begin_kernel(s);
  WorkspaceFloats scratch(kernel, ws, matmul_workspace_bytes(a.dtype, a.shape, b.shape, y.shape));
  check_lt_size(kernel, p);
  Gemm g{kernel, a.dtype, false, p.trans_b, p.m, p.n, p.k, p.lda, p.ldb};
  g.epilogue = epilogue;
  g.bias = bias;
  g.aux = aux;
  return run_lt(stream, g, 1.0f, a.data, b.data, 0.0f, nullptr, y.data, ws);
}

}  // namespace

void detail::lt_gemm_f32(cudaStream_t stream, const char *kernel, bool trans_a, bool trans_b,
                         int64_t m, int64_t n, int64_t k, float alpha, const float *a,
                         const float *b, float beta, float *c) {
  Gemm g{kernel, DType::F32, trans_a, trans_b, m, n, k, trans_a ? m : k, trans_b ? k : n};
  run_lt(stream, g, alpha, a, b, beta, c, c, Workspace{});
}

void matmul(Stream &s, const Tensor &a, const Tensor &b, const Tensor &y, bool transpose_a,
            bool transpose_b, const Workspace &ws) {
  cudaStream_t stream = begin_kernel(s);
  const char *kernel = "matmul";
  MatmulPlan p = check_matmul(kernel, a, b, y, transpose_a, transpose_b);
  WorkspaceFloats scratch(kernel, ws, matmul_workspace_bytes(a.dtype, a.shape, b.shape, y.shape));
  if (y.numel() == 0)
    return;
  check_lt_size(kernel, p);
  if (p.k == 0) {
    check_cuda(cudaMemsetAsync(y.data, 0, y.nbytes(), stream), kernel, "cudaMemsetAsync");
    return;
  }
  dispatch_numeric(kernel, a.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_integral_v<T>) {
      matmul_int_kernel<T><<<blocks_for(y.numel()), kThreads, 0, stream>>>(
          p, a.as<T>(), b.as<T>(), y.as<T>(), y.numel());
      check_launch(kernel);
    } else {
      matmul_float(stream, kernel, p, a.dtype, a.data, b.data, y.data, ws,
                   is_16bit(a.dtype) && a.shape.rank >= 2 && b.shape.rank >= 2);
    }
  });
}

void matmul_bias(Stream &s, const Tensor &a, const Tensor &b, const Tensor &bias,
                 const Tensor *addend, const Tensor &y, bool transpose_b, const Workspace &ws) {
  cudaStream_t stream = begin_kernel(s);
  const char *kernel = "matmul_bias";
  MatmulPlan p = check_matmul_bias(kernel, a, b, bias, addend, y, transpose_b);
  WorkspaceFloats scratch(kernel, ws, matmul_workspace_bytes(a.dtype, a.shape, b.shape, y.shape));
  const int64_t n = y.numel();
  if (n == 0)
    return;
  check_lt_size(kernel, p);
  if (p.k == 0) {
    dispatch_float(kernel, y.dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      bias_rows_kernel<T><<<blocks_for(n), kThreads, 0, stream>>>(
          bias.as<T>(), addend ? addend->as<T>() : nullptr, y.as<T>(), p.n, n);
    });
    check_launch(kernel);
    return;
  }
  Gemm g{kernel, a.dtype, false, p.trans_b, p.m, p.n, p.k, p.lda, p.ldb};
  g.epilogue = CUBLASLT_EPILOGUE_BIAS;
  g.bias = bias.data;
  if (run_lt(stream, g, 1.0f, a.data, b.data, addend ? 1.0f : 0.0f,
             addend ? addend->data : nullptr, y.data, ws))
    return;
  // No algorithm for the epilogue: the product (and addend), then the bias.
  g.epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  g.bias = nullptr;
  run_lt(stream, g, 1.0f, a.data, b.data, addend ? 1.0f : 0.0f,
         addend ? addend->data : nullptr, y.data, ws);
  dispatch_float(kernel, y.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    add_bias_rows_kernel<T><<<blocks_for(n), kThreads, 0, stream>>>(bias.as<T>(), y.as<T>(),
                                                                    p.n, n);
  });
  check_launch(kernel);
}

void matmul_bias_grad(Stream &s, const Tensor &a, const Tensor &b, const Tensor &y,
                      const Tensor &bias_grad, bool transpose_a, const Workspace &ws) {
  cudaStream_t stream = begin_kernel(s);
  const char *kernel = "matmul_bias_grad";
  MatmulPlan p = check_matmul_bias_grad(kernel, a, b, y, bias_grad, transpose_a);
  WorkspaceFloats scratch(kernel, ws,
                          matmul_bias_grad_workspace_bytes(a.dtype, a.shape, b.shape, y.shape));
  run_bias_grad(s, stream, kernel, p, a, b, y, bias_grad, b, CUBLASLT_EPILOGUE_BGRADA, ws);
}

void matmul_lhs_bias_grad(Stream &s, const Tensor &a, const Tensor &b, const Tensor &y,
                          const Tensor &bias_grad, const Workspace &ws) {
  cudaStream_t stream = begin_kernel(s);
  const char *kernel = "matmul_lhs_bias_grad";
  MatmulPlan p = check_matmul_lhs_bias_grad(kernel, a, b, y, bias_grad);
  WorkspaceFloats scratch(
      kernel, ws, matmul_lhs_bias_grad_workspace_bytes(a.dtype, a.shape, b.shape, y.shape));
  run_bias_grad(s, stream, kernel, p, a, b, y, bias_grad, a, CUBLASLT_EPILOGUE_BGRADB, ws);
}

void matmul_bias_gelu(Stream &s, const Tensor &a, const Tensor &b, const Tensor &bias,
                      const Tensor &y, const Tensor &pre, bool transpose_b, const Workspace &ws) {
  const char *kernel = "matmul_bias_gelu";
  MatmulPlan p = check_matmul_gelu(kernel, a, b, &bias, pre, y, transpose_b);
  if (y.numel() == 0)
    return;
  if (p.k != 0 && p.n % 8 == 0 &&
      gelu_epilogue(s, kernel, p, a, b, y, CUBLASLT_EPILOGUE_GELU_AUX_BIAS, bias.data, pre.data,
                    ws))
    return;
  // No epilogue (an empty sum, n % 8 != 0, or no algorithm for it): the
  // biased product into pre, the GELU into y.
  matmul_bias(s, a, b, bias, nullptr, pre, transpose_b, ws);
  gelu_tanh_pointwise(begin_kernel(s), kernel, pre, y, false);
}

void matmul_dgelu(Stream &s, const Tensor &a, const Tensor &b, const Tensor &pre,
                  const Tensor &y, bool transpose_b, const Workspace &ws) {
  const char *kernel = "matmul_dgelu";
  MatmulPlan p = check_matmul_gelu(kernel, a, b, nullptr, pre, y, transpose_b);
  if (y.numel() == 0)
    return;
  if (p.k != 0 && p.n % 8 == 0 &&
      gelu_epilogue(s, kernel, p, a, b, y, CUBLASLT_EPILOGUE_DGELU, nullptr, pre.data, ws))
    return;
  // No epilogue (an empty sum, n % 8 != 0, or no algorithm for it): the
  // product into y, then y * gelu'(pre).
  matmul(s, a, b, y, false, transpose_b, ws);
  gelu_tanh_pointwise(begin_kernel(s), kernel, pre, y, true);
}

void gemm(Stream &s, const Tensor &a, const Tensor &b, const Tensor *c, const Tensor &y,
          float alpha, float beta, bool transpose_a, bool transpose_b, const Workspace &ws) {
  cudaStream_t stream = begin_kernel(s);
  const char *kernel = "gemm";
  BroadcastPlan c_plan;
  MatmulPlan p = check_gemm(kernel, a, b, c, y, transpose_a, transpose_b, c_plan);
  const bool use_c = c != nullptr && beta != 0.0f;
  if (use_c && c->data == y.data && c->shape != y.shape)
    fail(kernel, "c aliases y but does not have y's shape");
  WorkspaceFloats scratch(kernel, ws, gemm_workspace_bytes(a.dtype, a.shape, b.shape, y.shape));
  const int64_t n = y.numel();
  if (n == 0)
    return;
  check_lt_size(kernel, p);
  // c of y's shape is cuBLASLt's C; a broadcast c is expanded into y first.
  const void *c_data = nullptr;
  if (use_c) {
    if (c->shape == y.shape) {
      c_data = c->data;
    } else {
      dispatch_float(kernel, y.dtype, [&](auto tag) {
        using T = typename decltype(tag)::type;
        expand_kernel<T><<<blocks_for(n), kThreads, 0, stream>>>(c_plan, c->as<T>(), y.as<T>(),
                                                                 n);
      });
      check_launch(kernel);
      c_data = y.data;
    }
  }
  if (p.k == 0) {
    // alpha * (empty product) + beta * c = beta * c.
    if (!use_c) {
      check_cuda(cudaMemsetAsync(y.data, 0, y.nbytes(), stream), kernel, "cudaMemsetAsync");
      return;
    }
    dispatch_float(kernel, y.dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      scale_kernel<T><<<blocks_for(n), kThreads, 0, stream>>>(beta, static_cast<const T *>(c_data),
                                                              y.as<T>(), n);
    });
    check_launch(kernel);
    return;
  }
  Gemm g{kernel, a.dtype, p.trans_a, p.trans_b, p.m, p.n, p.k, p.lda, p.ldb};
  run_lt(stream, g, alpha, a.data, b.data, use_c ? beta : 0.0f, c_data, y.data, ws);
}

}  // namespace dsrt

// The cuda backend: device memory is cudaMalloc'ed (once per arena: the
// plan's memory spaces), pinned host memory cudaHostAlloc'ed; copies, fills,
// additions and kernels are queued on the cudaStream_t of their dsrt::Stream
// and events are cudaEvent_t. Nothing here allocates device memory or
// blocks the host inside a step, except first_nonfinite and the
// synchronizations, which block by definition (backend.h).
//
// The device: each process uses the GPU of its local rank, as the launcher
// gives it (nccl/bootstrap.h: OMPI_COMM_WORLD_LOCAL_RANK, SLURM_LOCALID,
// ...; device 0 when none is set), chosen before the first allocation; the
// NCCL world transport (world_transport) must agree.
#include "dsrt/backend.h"
#include "dsrt/comm.h"
#if DSRT_HAVE_NCCL
#include "dsrt/nccl.h"
#endif

#include "cuda/chunk_table.h"
#include "cuda/common.cuh"
#include "nccl/bootstrap.h"

#include <algorithm>
#include <cstdlib>

#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <string>

namespace dsrt {

using namespace detail;

namespace {

//===----------------------------------------------------------------------===//
// Kernels of the backend operations
//===----------------------------------------------------------------------===//

// Bytes copied between overlapping ranges of device memory by one block, a
// chunk at a time, in the direction that never overwrites a byte not yet read.
__global__ void memmove_kernel(uint8_t *dst, const uint8_t *src, size_t bytes) {
  const size_t chunk = blockDim.x;
  const size_t chunks = (bytes + chunk - 1) / chunk;
  const bool forward = dst < src;
  for (size_t c = 0; c < chunks; ++c) {
    const size_t base = (forward ? c : chunks - 1 - c) * chunk;
    const size_t i = base + threadIdx.x;
    uint8_t v = i < bytes ? src[i] : 0;
    __syncthreads();
    if (i < bytes)
      dst[i] = v;
    __syncthreads();
  }
}

template <typename T> __global__ void fill_kernel(T *dst, T value, int64_t n) {
  DSRT_GRID_STRIDE(i, n) dst[i] = value;
}

// Up to this many sources per add launch, passed by value.
constexpr int kMaxAddSources = 512;
struct AddSources {
  const void *p[kMaxAddSources];
};

template <typename T>
__global__ void add_kernel(T *dst, AddSources srcs, int count, int64_t n) {
  DSRT_GRID_STRIDE(i, n) {
    float sum = ld(static_cast<const T *>(srcs.p[0])[i]);
    for (int j = 1; j < count; ++j)
      sum += ld(static_cast<const T *>(srcs.p[j])[i]);
    dst[i] = st<T>(sum);
  }
}

// first_nonfinite checks a list of tensors in one launch per
// kNonfiniteTensors float tensors: each tensor is cut into chunks of
// kChunkElements (chunk_table.h; a tensor's last chunk may be shorter), and
// a grid of at most kNonfiniteBlocks blocks walks the launch's chunks,
// block b taking chunks b, b + G, ... Only a pointer, a size and a type per
// tensor travel, by value in the kernel's parameters (about 7 KiB; sm_70+
// with CUDA 12.1+ takes 32 KiB), so one launch covers a model's gradients
// where adamw_multi's tables of kChunkTensors tensors take several.
constexpr int kNonfiniteTensors = 256;
constexpr int kNonfiniteBlocks = 1024;
struct NonfiniteLaunch {
  const void *data[kNonfiniteTensors];
  int64_t numel[kNonfiniteTensors];
  int32_t first_chunk[kNonfiniteTensors + 1];  // tensor t: chunks [first_chunk[t], first_chunk[t + 1])
  int32_t index[kNonfiniteTensors];            // its index in the call's list
  DType dtype[kNonfiniteTensors];
  int32_t count;
};
static_assert(sizeof(NonfiniteLaunch) < 32000, "kernel parameters are limited to 32 KiB");

// Whether x[begin, end) holds a NaN or an infinity (this thread's share).
template <typename T>
__device__ inline bool any_nonfinite(const void *x, int64_t begin, int64_t end) {
  bool bad = false;
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x)
    bad = bad || !isfinite(ld(static_cast<const T *>(x)[i]));
  return bad;
}

// Lowers *first to the list index of every tensor holding a NaN or an
// infinity.
__global__ void nonfinite_multi_kernel(NonfiniteLaunch launch, int32_t *first) {
  const int32_t chunks = launch.first_chunk[launch.count];
  int32_t lowest = INT32_MAX;
  for (int32_t q = blockIdx.x; q < chunks; q += gridDim.x) {
    // The tensor of chunk q: the last t with first_chunk[t] <= q.
    int lo = 0, hi = launch.count - 1;
    while (lo < hi) {
      const int mid = (lo + hi + 1) / 2;
      if (launch.first_chunk[mid] <= q)
        lo = mid;
      else
        hi = mid - 1;
    }
    const int64_t begin = static_cast<int64_t>(q - launch.first_chunk[lo]) * kChunkElements;
    const int64_t end = begin + kChunkElements < launch.numel[lo] ? begin + kChunkElements
                                                                   : launch.numel[lo];
    bool bad;
    switch (launch.dtype[lo]) {
    case DType::F16: bad = any_nonfinite<half_t>(launch.data[lo], begin, end); break;
    case DType::BF16: bad = any_nonfinite<bfloat_t>(launch.data[lo], begin, end); break;
    default: bad = any_nonfinite<float>(launch.data[lo], begin, end); break;
    }
    if (bad && launch.index[lo] < lowest)
      lowest = launch.index[lo];
  }
  for (int o = 16; o > 0; o >>= 1) {
    const int32_t other = __shfl_xor_sync(0xffffffffu, lowest, o);
    lowest = other < lowest ? other : lowest;
  }
  if ((threadIdx.x & 31) == 0 && lowest != INT32_MAX)
    atomicMin(first, lowest);
}

#ifndef DSRT_CUDA_ARCHITECTURES
#define DSRT_CUDA_ARCHITECTURES "unknown"
#endif

// A GPU that none of the library's kernel images runs on (libdsrt_cuda
// built for other architectures: CMAKE_CUDA_ARCHITECTURES, sm_90 by
// default, where an A100 is sm_80) is refused when the backend is made,
// naming the GPU's architecture, the library's and what to rebuild, rather
// than by the first kernel launch's "no kernel image" error mid-step.
void check_kernel_image(int device) {
  cudaFuncAttributes attributes{};
  const cudaError_t status =
      cudaFuncGetAttributes(&attributes, reinterpret_cast<const void *>(&memmove_kernel));
  if (status == cudaSuccess)
    return;
  cudaGetLastError();
  int major = 0, minor = 0;
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);
  cudaGetLastError();
  const std::string arch = std::to_string(major) + std::to_string(minor);
  throw Error("dsrt: CUDA device " + std::to_string(device) + " is sm_" + arch +
              ", and libdsrt_cuda has no kernels that run on it (built for CUDA architectures " +
              DSRT_CUDA_ARCHITECTURES + "; cudaFuncGetAttributes: " + cudaGetErrorString(status) +
              "): rebuild dsopt with -DCMAKE_CUDA_ARCHITECTURES=\"" + arch + ";" +
              DSRT_CUDA_ARCHITECTURES + "\" (and compile with --cuda-arch sm_" + arch + ")");
}

class CudaBackend final : public BackendInterface {
public:
  CudaBackend() {
    int count = 0;
    const cudaError_t status = cudaGetDeviceCount(&count);
    if (status != cudaSuccess || count < 1) {
      cudaGetLastError();
      throw Error(std::string("dsrt: no CUDA device: this program uses the cuda backend "
                              "(libdsrt_cuda) but cudaGetDeviceCount ") +
                  (status != cudaSuccess ? std::string("failed: ") + cudaGetErrorString(status)
                                         : std::string("found no device")));
    }
    const std::optional<nccl::LocalRank> local =
        nccl::local_rank_from_env([](const char *name) { return std::getenv(name); });
    if (local) {
      device_ = nccl::choose_device(local->rank, count, local->source);
      device_source_ = "local rank " + std::to_string(local->rank) + " from " + local->source;
    }
    check_cuda(cudaSetDevice(device_), "cuda", "cudaSetDevice");
    check_kernel_image(device_);
    device_error_word();
    void *p = nullptr;
    check_cuda(cudaHostAlloc(&p, sizeof(int32_t), cudaHostAllocMapped), "cuda",
               "cudaHostAlloc of the first_nonfinite flag");
    flag_host_ = static_cast<int32_t *>(p);
    void *d = nullptr;
    check_cuda(cudaHostGetDevicePointer(&d, p, 0), "cuda", "cudaHostGetDevicePointer");
    flag_device_ = static_cast<int32_t *>(d);
  }

  Backend kind() const override { return Backend::Cuda; }
  const char *name() const override { return "cuda"; }
  const char *kernel_library() const override { return "dsrt_cuda"; }

  void *allocate(MemoryKind kind, size_t bytes, size_t alignment) override {
    if (bytes == 0 || bytes > SIZE_MAX - alignment)
      return nullptr;
    // cudaMalloc and cudaHostAlloc align to at least 256 bytes (pages for
    // pinned memory); a larger alignment is had by over-allocating.
    const size_t extra = alignment > 256 ? alignment : 0;
    void *base = nullptr;
    if (kind == MemoryKind::Host) {
      // Ordinary (pageable) host memory: copies to and from it go through
      // the driver's staging; no kernel may read it.
      base = std::malloc(bytes + extra + 256);
      if (!base)
        return nullptr;
      alignment = std::max<size_t>(alignment, 256);
    } else {
      cudaError_t status = kind == MemoryKind::Device
                               ? cudaMalloc(&base, bytes + extra)
                               : cudaHostAlloc(&base, bytes + extra,
                                               cudaHostAllocPortable | cudaHostAllocMapped);
      if (status != cudaSuccess) {
        cudaGetLastError();
        return nullptr;
      }
    }
    uintptr_t aligned = (reinterpret_cast<uintptr_t>(base) + alignment - 1) & ~(alignment - 1);
    std::lock_guard<std::mutex> lock(mutex_);
    bases_[reinterpret_cast<void *>(aligned)] = base;
    return reinterpret_cast<void *>(aligned);
  }

  void deallocate(MemoryKind kind, void *p) override {
    void *base = p;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = bases_.find(p);
      if (it != bases_.end()) {
        base = it->second;
        bases_.erase(it);
      }
    }
    if (kind == MemoryKind::Device)
      cudaFree(base);
    else if (kind == MemoryKind::Host)
      std::free(base);
    else
      cudaFreeHost(base);
  }

  FileStore create_file(const std::string &path, int64_t bytes,
                        const FileIOOptions &io) override {
    return FileStore::create(path, bytes, io);
  }

  void copy(Stream &s, void *dst, const void *src, size_t bytes) override {
    cudaStream_t stream = begin_kernel(s);
    if (bytes == 0 || dst == src)
      return;
    if (!dst || !src)
      throw Error(std::string("dsrt::cuda::copy: ") + std::to_string(bytes) + " bytes " +
                  (!dst ? "to a null destination" : "from a null source"));
    const uint8_t *d = static_cast<const uint8_t *>(dst), *sp = static_cast<const uint8_t *>(src);
    const bool overlap = d < sp + bytes && sp < d + bytes;
    if (!overlap) {
      check_cuda(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream), "cuda::copy",
                 "cudaMemcpyAsync");
      return;
    }
    cudaPointerAttributes attr{};
    if (cudaPointerGetAttributes(&attr, dst) == cudaSuccess &&
        attr.type != cudaMemoryTypeUnregistered) {
      memmove_kernel<<<1, 1024, 0, stream>>>(static_cast<uint8_t *>(dst),
                                              static_cast<const uint8_t *>(src), bytes);
      check_launch("cuda::copy");
      return;
    }
    // Overlapping pageable host memory: the host moves it in stream order.
    cudaGetLastError();
    synchronize(s);
    std::memmove(dst, src, bytes);
  }

  void fill(Stream &s, const Tensor &dst, double value) override {
    cudaStream_t stream = begin_kernel(s);
    const int64_t n = dst.numel();
    if (n == 0)
      return;
    check_data("cuda::fill", "dst", dst);
    // The value's bits in dst's type, as the cpu backend rounds it.
    uint64_t bits = 0;
    const Tensor one{&bits, dst.dtype, Shape{}};
    if (is_float(dst.dtype))
      store_float(one, 0, static_cast<float>(value));
    else
      store_int(one, 0, static_cast<int64_t>(value));
    const unsigned blocks = blocks_for(n);
    switch (dtype_size(dst.dtype)) {
    case 1:
      fill_kernel<<<blocks, kThreads, 0, stream>>>(dst.as<uint8_t>(), uint8_t(bits), n);
      break;
    case 2:
      fill_kernel<<<blocks, kThreads, 0, stream>>>(dst.as<uint16_t>(), uint16_t(bits), n);
      break;
    case 4:
      fill_kernel<<<blocks, kThreads, 0, stream>>>(dst.as<uint32_t>(), uint32_t(bits), n);
      break;
    default:
      fill_kernel<<<blocks, kThreads, 0, stream>>>(dst.as<uint64_t>(), bits, n);
      break;
    }
    check_launch("cuda::fill");
  }

  void add(Stream &s, const Tensor &dst, const Tensor *srcs, int64_t count) override {
    cudaStream_t stream = begin_kernel(s);
    if (count < 1)
      throw Error("dsrt::cuda::add: needs at least one source, got " + std::to_string(count));
    if (count > kMaxAddSources)
      throw Error("dsrt::cuda::add: " + std::to_string(count) + " sources, at most " +
                  std::to_string(kMaxAddSources) + " are summed in one pass");
    check_float("cuda::add", "dst", dst);
    AddSources table{};
    for (int64_t j = 0; j < count; ++j) {
      if (srcs[j].dtype != dst.dtype || srcs[j].numel() != dst.numel())
        throw Error("dsrt::cuda::add: source " + std::to_string(j) + " " +
                    dtype_name(srcs[j].dtype) + srcs[j].shape.str() + " differs from dst " +
                    dtype_name(dst.dtype) + dst.shape.str() + " in element type or count");
      table.p[j] = srcs[j].data;
    }
    const int64_t n = dst.numel();
    if (n == 0)
      return;
    dispatch_float("cuda::add", dst.dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      add_kernel<T><<<blocks_for(n), kThreads, 0, stream>>>(dst.as<T>(), table,
                                                            static_cast<int>(count), n);
    });
    check_launch("cuda::add");
  }

  int64_t first_nonfinite(Stream &s, const Tensor *tensors, int64_t count) override {
    cudaStream_t stream = begin_kernel(s);
    std::lock_guard<std::mutex> lock(flag_mutex_);
    *flag_host_ = INT32_MAX;
    NonfiniteLaunch launch;
    launch.count = 0;
    int64_t chunks = 0;
    auto flush = [&]() {
      if (launch.count == 0)
        return;
      launch.first_chunk[launch.count] = static_cast<int32_t>(chunks);
      nonfinite_multi_kernel<<<static_cast<unsigned>(std::min<int64_t>(chunks, kNonfiniteBlocks)),
                               kThreads, 0, stream>>>(launch, flag_device_);
      check_launch("cuda::first_nonfinite");
      launch.count = 0;
      chunks = 0;
    };
    for (int64_t j = 0; j < count; ++j) {
      const Tensor &t = tensors[j];
      if (!is_float(t.dtype) || t.numel() == 0)
        continue;
      check_data("cuda::first_nonfinite", "tensor", t);
      const int64_t tensor_chunks = (t.numel() + kChunkElements - 1) / kChunkElements;
      if (launch.count == kNonfiniteTensors || chunks + tensor_chunks > INT32_MAX)
        flush();
      const int k = launch.count++;
      launch.data[k] = t.data;
      launch.numel[k] = t.numel();
      launch.first_chunk[k] = static_cast<int32_t>(chunks);
      launch.index[k] = static_cast<int32_t>(j);
      launch.dtype[k] = t.dtype;
      chunks += tensor_chunks;
    }
    flush();
    wait_stream(s, "cuda::first_nonfinite");  // the one sync: the answer is needed now
    const int32_t first = *static_cast<volatile int32_t *>(flag_host_);
    return first == INT32_MAX ? -1 : first;
  }

  void synchronize(Stream &s) override { wait_stream(s, "cuda::synchronize"); }

  DeviceEvent record(Stream &s) override {
    // Nothing was ever queued on a stream without a cudaStream_t: the null
    // event, which every wait and synchronize passes at once.
    if (!has_cuda_stream(s))
      return DeviceEvent();
    cudaEvent_t event = nullptr;
    check_cuda(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), "cuda::record",
               "cudaEventCreateWithFlags");
    DeviceEvent handle(event, [](void *e) { cudaEventDestroy(static_cast<cudaEvent_t>(e)); });
    check_cuda(cudaEventRecord(event, cuda_stream(s)), "cuda::record", "cudaEventRecord");
    return handle;
  }

  void wait(Stream &s, const DeviceEvent &event) override {
    if (event)
      check_cuda(cudaStreamWaitEvent(cuda_stream(s), static_cast<cudaEvent_t>(event.get()), 0),
                 "cuda::wait", "cudaStreamWaitEvent");
  }

  void synchronize(const DeviceEvent &event) override {
    if (!event)
      return;
    check_wait(cudaEventSynchronize(static_cast<cudaEvent_t>(event.get())), "cuda::synchronize",
               "cudaEventSynchronize");
    throw_device_error();
  }

  bool synchronous_ops() const override { return detail::synchronous_ops(); }

  DeviceEvent timing_mark() override {
    cudaEvent_t event = nullptr;
    check_cuda(cudaEventCreate(&event), "cuda::timing_mark", "cudaEventCreate");
    return DeviceEvent(event, [](void *e) { cudaEventDestroy(static_cast<cudaEvent_t>(e)); });
  }

  void record_timing(Stream &s, const DeviceEvent &mark, bool after_host_work) override {
    // After the host work pending on the stream, as a kernel would be, or
    // at once where the stream's device work has got to.
    check_cuda(cudaEventRecord(static_cast<cudaEvent_t>(mark.get()),
                               after_host_work ? begin_kernel(s) : cuda_stream(s)),
               "cuda::record_timing", "cudaEventRecord");
  }

  double elapsed_us(const DeviceEvent &from, const DeviceEvent &to) override {
    float ms = 0;
    const cudaError_t status = cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(from.get()),
                                                    static_cast<cudaEvent_t>(to.get()));
    if (status == cudaErrorNotReady) {
      cudaGetLastError();
      throw Error("dsrt::cuda::elapsed_us: a timing mark the stream has not reached yet (read "
                  "marks after a host wait that covers them)");
    }
    check_cuda(status, "cuda::elapsed_us", "cudaEventElapsedTime");
    return static_cast<double>(ms) * 1e3;
  }

  std::unique_ptr<Transport> world_transport(Communicator &bootstrap) override {
#if DSRT_HAVE_NCCL
    std::unique_ptr<Transport> transport = make_nccl_world(bootstrap);
    if (nccl_device() != device_)
      throw Error("dsrt: the NCCL transport chose CUDA device " + std::to_string(nccl_device()) +
                  " (by host names) but the cuda backend uses device " +
                  std::to_string(device_) + " (" + device_source_ +
                  "); start the job with mpirun or srun, which give each process its local rank");
    return transport;
#else
    if (bootstrap.size() > 1)
      throw Error("dsrt: this libdsrt_cuda was built without NCCL, so a cuda program runs on "
                  "one process only, not " + std::to_string(bootstrap.size()) +
                  "; rebuild dsrt where CMake finds nccl.h and libnccl");
    return nullptr;
#endif
  }

  bool query(const DeviceEvent &event) override {
    if (!event)
      return true;
    const cudaError_t status = cudaEventQuery(static_cast<cudaEvent_t>(event.get()));
    if (status == cudaErrorNotReady) {
      cudaGetLastError();
      return false;
    }
    return true;  // an error shows at the next synchronize
  }

private:
  // A host wait for the device: a failure is a fault of work queued before
  // it (its op is not known here) and names the wait that found it.
  static void check_wait(cudaError_t status, const char *wait, const char *call) {
    if (status == cudaSuccess)
      return;
    // With synchronous ops the wait is the end of the op that faulted.
    check_cuda(status, wait,
               detail::synchronous_ops()
                   ? call
                   : (std::string(call) + " (a device fault in work queued before this wait; "
                                          "DSRT_CUDA_SYNC=1 reports it at the op that caused it)")
                         .c_str());
  }

  void wait_stream(Stream &s, const char *wait) {
    if (has_cuda_stream(s))
      check_wait(cudaStreamSynchronize(cuda_stream(s)), wait, "cudaStreamSynchronize");
    throw_device_error();
  }

  int device_ = 0;
  std::string device_source_ = "no launcher's local rank: device 0";
  std::mutex mutex_;
  std::map<void *, void *> bases_;  // aligned pointer -> what cudaMalloc returned
  std::mutex flag_mutex_;
  int32_t *flag_host_ = nullptr;
  int32_t *flag_device_ = nullptr;
};

}  // namespace

BackendInterface &backend() {
  // Never destroyed: streams may outlive statics. A failed creation (no
  // device) throws here and is retried by the next call.
  static CudaBackend *cuda = new CudaBackend;
  return *cuda;
}

BackendInterface &backend(Backend kind) {
  if (kind != Backend::Cuda)
    throw Error("dsrt: this program was linked with the cuda backend (libdsrt_cuda); "
                "Backend::Cpu needs libdsrt.a");
  return backend();
}

}  // namespace dsrt

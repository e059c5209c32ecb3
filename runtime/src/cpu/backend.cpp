// The cpu backend: every memory kind is host memory, and copies, fills and
// additions run to completion on the calling thread when they are enqueued,
// after the asynchronous work pending on their stream (as kernels do). So
// the backend has no queue of its own: its events are null and its
// synchronize has nothing to wait for beyond what Stream already tracks.
#include "dsrt/backend.h"

#include "internal.h"

#include <cstdlib>
#include <cstring>
#include <string>

namespace dsrt {
namespace {

class CpuBackend final : public BackendInterface {
public:
  Backend kind() const override { return Backend::Cpu; }
  const char *name() const override { return "cpu"; }
  const char *kernel_library() const override { return "dsrt_cpu"; }

  void *allocate(MemoryKind, size_t bytes, size_t alignment) override {
    // aligned_alloc wants a multiple of the alignment. Device and pinned
    // host memory are not page-locked here.
    if (bytes == 0 || bytes > SIZE_MAX - alignment)
      return nullptr;
    return std::aligned_alloc(alignment, (bytes + alignment - 1) / alignment * alignment);
  }
  void deallocate(MemoryKind, void *p) override { std::free(p); }

  FileStore create_file(const std::string &path, int64_t bytes,
                        const FileIOOptions &io) override {
    return FileStore::create(path, bytes, io);
  }

  void copy(Stream &s, void *dst, const void *src, size_t bytes) override {
    detail::begin_kernel(s);
    if (bytes == 0 || dst == src)
      return;
    if (!dst || !src)
      throw Error(std::string("dsrt::cpu::copy: ") + std::to_string(bytes) + " bytes " +
                  (!dst ? "to a null destination" : "from a null source"));
    std::memmove(dst, src, bytes);
  }

  void fill(Stream &s, const Tensor &dst, double value) override {
    detail::begin_kernel(s);
    const int64_t n = dst.numel();
    if (n == 0)
      return;
    detail::check_data("cpu::fill", "dst", dst);
    detail::dispatch_all("cpu::fill", dst.dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      T v;
      if constexpr (std::is_same_v<T, uint8_t>)
        v = static_cast<int64_t>(value) != 0;  // bool, as store_int
      else if constexpr (std::is_same_v<T, int64_t> || std::is_same_v<T, int32_t>)
        v = static_cast<T>(static_cast<int64_t>(value));
      else
        v = detail::Elem<T>::store(static_cast<float>(value));
      T *out = static_cast<T *>(dst.data);
      for (int64_t i = 0; i < n; ++i)
        out[i] = v;
    });
  }

  void add(Stream &s, const Tensor &dst, const Tensor *srcs, int64_t count) override {
    detail::begin_kernel(s);
    if (count < 1)
      throw Error("dsrt::cpu::add: needs at least one source, got " + std::to_string(count));
    detail::check_float("cpu::add", "dst", dst);
    for (int64_t j = 0; j < count; ++j)
      if (srcs[j].dtype != dst.dtype || srcs[j].numel() != dst.numel())
        throw Error("dsrt::cpu::add: source " + std::to_string(j) + " " +
                    dtype_name(srcs[j].dtype) + srcs[j].shape.str() + " differs from dst " +
                    dtype_name(dst.dtype) + dst.shape.str() + " in element type or count");
    const int64_t n = dst.numel();
    if (n == 0)
      return;
    detail::dispatch_float("cpu::add", dst.dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      T *out = static_cast<T *>(dst.data);
      // Summed in f32 in source order, rounded once: every element reads
      // all sources before dst is written, so dst may be one of them. The
      // source pointers are read from srcs in the loop (no side array).
      for (int64_t i = 0; i < n; ++i) {
        float sum = detail::Elem<T>::load(static_cast<const T *>(srcs[0].data)[i]);
        for (int64_t j = 1; j < count; ++j)
          sum += detail::Elem<T>::load(static_cast<const T *>(srcs[j].data)[i]);
        out[i] = detail::Elem<T>::store(sum);
      }
    });
  }

  int64_t first_nonfinite(Stream &s, const Tensor *tensors, int64_t count) override {
    detail::begin_kernel(s);
    for (int64_t j = 0; j < count; ++j) {
      const Tensor &t = tensors[j];
      if (!is_float(t.dtype) || t.numel() == 0)
        continue;
      detail::check_data("cpu::first_nonfinite", "tensor", t);
      bool finite = true;
      detail::dispatch_float("cpu::first_nonfinite", t.dtype, [&](auto tag) {
        using T = typename decltype(tag)::type;
        const T *x = static_cast<const T *>(t.data);
        const int64_t n = t.numel();
        // Every element is read (no early exit), so the loop vectorizes:
        // NaN and infinities are the values whose x - x is not 0.
        float any = 0.0f;
        for (int64_t i = 0; i < n; ++i) {
          const float v = detail::Elem<T>::load(x[i]);
          any += v - v;
        }
        finite = any == 0.0f;
      });
      if (!finite)
        return j;
    }
    return -1;
  }

  // Stream (stream.cpp) waits for the host-side work; nothing else is queued.
  void synchronize(Stream &) override {}
  DeviceEvent record(Stream &) override { return nullptr; }
  void wait(Stream &, const DeviceEvent &) override {}
  void synchronize(const DeviceEvent &) override {}
  bool query(const DeviceEvent &) override { return true; }
};

}  // namespace

BackendInterface &backend() {
  static CpuBackend *cpu = new CpuBackend;  // never destroyed: streams may outlive statics
  return *cpu;
}

BackendInterface &backend(Backend kind) {
  if (kind != Backend::Cpu)
    throw Error("dsrt: this program was linked with the cpu backend (libdsrt.a); "
                "Backend::Cuda needs libdsrt_cuda.a");
  return backend();
}

}  // namespace dsrt

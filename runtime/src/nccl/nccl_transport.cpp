// The NCCL transport (dsrt/nccl.h): Transport over an NCCL communicator.
//
// Ordering: an operation issued on a Stream records a cudaEvent on that
// stream's CUDA stream (dsrt::cuda::launch_stream) and makes the
// transport's communication stream wait for it; the NCCL call runs on the
// communication stream; a second event, recorded after it, is what later
// work on the issuing stream waits for (on the device: the host is not
// blocked). The transport's worker thread waits for that event (polling,
// with ncclCommGetAsyncError and the timeout), runs the `after` hook, then
// completes the Request and counts the bytes.
//
// all_gather and reduce_scatter of sizes that do not divide evenly (the
// ring partition, ring_chunk) become grouped broadcasts / reductions, one
// per chunk, since NCCL's all_gather and reduce_scatter need equal parts.
#include "dsrt/nccl.h"

#include "dsrt/cuda_launch.h"

#include "../async.h"
#include "bootstrap.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <unistd.h>

#include <array>
#include <atomic>
#include <cstring>
#include <optional>
#include <chrono>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>

static_assert(NCCL_UNIQUE_ID_BYTES == dsrt::nccl::kUniqueIdBytes,
              "bootstrap.h's unique id size is NCCL's");

namespace dsrt {
namespace {

std::atomic<int> chosen_device{-1};

void check_cuda(cudaError_t status, const char *what) {
  if (status != cudaSuccess)
    throw Error(std::string("dsrt nccl: ") + what + ": " + cudaGetErrorString(status));
}

void check_nccl(ncclResult_t status, const char *what) {
  if (status != ncclSuccess && status != ncclInProgress)
    throw Error(std::string("dsrt nccl: ") + what + ": " + ncclGetErrorString(status));
}

ncclDataType_t nccl_type(DType dtype) {
  switch (dtype) {
  case DType::F32: return ncclFloat32;
  case DType::F16: return ncclFloat16;
  case DType::BF16: return ncclBfloat16;
  case DType::I64: return ncclInt64;
  case DType::I32: return ncclInt32;
  case DType::Bool: return ncclUint8;
  }
  throw Error("dsrt nccl: unknown element type");
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
  case ReduceOp::Sum: return ncclSum;
  case ReduceOp::Mean: return ncclAvg;
  case ReduceOp::Max: return ncclMax;
  case ReduceOp::Prod: break;  // refused by Communicator
  }
  throw Error("dsrt nccl: unsupported reduction");
}

char *bytes_at(const Tensor &t, int64_t element) {
  return static_cast<char *>(t.data) + element * static_cast<int64_t>(dtype_size(t.dtype));
}

// A cudaEvent without timing, destroyed with its last reference.
std::shared_ptr<CUevent_st> make_event() {
  cudaEvent_t event = nullptr;
  check_cuda(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), "cudaEventCreate");
  return std::shared_ptr<CUevent_st>(event, [](cudaEvent_t e) { cudaEventDestroy(e); });
}

class NcclTransport final : public Transport {
public:
  NcclTransport(std::unique_ptr<nccl::BootstrapGroup> group, int device)
      : group_(std::move(group)), device_(device) {
    rank_ = group_->rank();
    size_ = group_->size();
    // DSRT_COMM_TIMEOUT as the MPI ring reads it (which already refused a
    // bad value when the world was created).
    if (const char *text = std::getenv("DSRT_COMM_TIMEOUT"))
      if (double v = std::atof(text); v > 0)
        options_.timeout_s = v;
    check_cuda(cudaSetDevice(device_), "cudaSetDevice");
    nccl::UniqueId id = nccl::share_unique_id(*group_, [] {
      ncclUniqueId made;
      check_nccl(ncclGetUniqueId(&made), "ncclGetUniqueId");
      nccl::UniqueId bytes;
      std::memcpy(bytes.data(), made.internal, bytes.size());
      return bytes;
    });
    ncclUniqueId unique;
    std::memcpy(unique.internal, id.data(), id.size());
    check_nccl(ncclCommInitRank(&comm_, size_, unique, rank_), "ncclCommInitRank");
    check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    check_cuda(cudaMalloc(&barrier_word_, sizeof(float)), "cudaMalloc (barrier)");
  }

  ~NcclTransport() override {
    worker_.drain();
    cudaSetDevice(device_);
    cudaStreamSynchronize(stream_);
    cudaFree(barrier_word_);
    if (!aborted_)
      ncclCommDestroy(comm_);
    cudaStreamDestroy(stream_);
  }

  const char *name() const override { return "nccl"; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  bool uses_mpi() const override { return false; }
  bool device_memory() const override { return true; }

  Request all_reduce(Stream &stream, const Tensor &in, const Tensor &out, ReduceOp op,
                     const CommHooks &hooks) override {
    return issue(stream, CommOp::AllReduce, in.dtype, in.numel(), 0, hooks, [&] {
      check_nccl(ncclAllReduce(in.data, out.data, in.numel(), nccl_type(in.dtype), nccl_op(op),
                               comm_, stream_),
                 "ncclAllReduce");
    });
  }

  Request all_gather(Stream &stream, const Tensor &in, const Tensor &out,
                     const CommHooks &hooks) override {
    const int64_t total = out.numel();
    return issue(stream, CommOp::AllGather, out.dtype, total, 0, hooks, [&] {
      if (total % size_ == 0) {
        check_nccl(ncclAllGather(in.data, out.data, total / size_, nccl_type(out.dtype), comm_,
                                 stream_),
                   "ncclAllGather");
        return;
      }
      // Uneven ring chunks: each rank broadcasts its own.
      check_nccl(ncclGroupStart(), "ncclGroupStart");
      for (int j = 0; j < size_; ++j) {
        Chunk c = ring_chunk(total, size_, j);
        check_nccl(ncclBroadcast(j == rank_ ? in.data : nullptr, bytes_at(out, c.begin), c.size,
                                 nccl_type(out.dtype), j, comm_, stream_),
                   "ncclBroadcast (all_gather)");
      }
      check_nccl(ncclGroupEnd(), "ncclGroupEnd");
    });
  }

  Request reduce_scatter(Stream &stream, const Tensor &in, const Tensor &out, ReduceOp op,
                         const CommHooks &hooks) override {
    const int64_t total = in.numel();
    return issue(stream, CommOp::ReduceScatter, in.dtype, total, 0, hooks, [&] {
      if (total % size_ == 0) {
        check_nccl(ncclReduceScatter(in.data, out.data, total / size_, nccl_type(in.dtype),
                                     nccl_op(op), comm_, stream_),
                   "ncclReduceScatter");
        return;
      }
      // Uneven ring chunks: chunk j reduced onto rank j.
      check_nccl(ncclGroupStart(), "ncclGroupStart");
      for (int j = 0; j < size_; ++j) {
        Chunk c = ring_chunk(total, size_, j);
        check_nccl(ncclReduce(bytes_at(in, c.begin), j == rank_ ? out.data : nullptr, c.size,
                              nccl_type(in.dtype), nccl_op(op), j, comm_, stream_),
                   "ncclReduce (reduce_scatter)");
      }
      check_nccl(ncclGroupEnd(), "ncclGroupEnd");
    });
  }

  Request broadcast(Stream &stream, const Tensor &buffer, int root) override {
    return issue(stream, CommOp::Broadcast, buffer.dtype, buffer.numel(), root, {}, [&] {
      check_nccl(ncclBroadcast(buffer.data, buffer.data, buffer.numel(), nccl_type(buffer.dtype),
                               root, comm_, stream_),
                 "ncclBroadcast");
    });
  }

  Request send_recv(Stream &stream, const std::vector<P2POp> &ops) override {
    std::vector<P2POp> copy = ops;
    Request request = issue(stream, CommOp::Send, DType::F32, 0, 0, {}, [&] {
      check_nccl(ncclGroupStart(), "ncclGroupStart");
      for (const P2POp &p : copy) {
        if (p.op == CommOp::Send)
          check_nccl(ncclSend(p.tensor.data, p.tensor.numel(), nccl_type(p.tensor.dtype), p.peer,
                              comm_, stream_),
                     "ncclSend");
        else
          check_nccl(ncclRecv(p.tensor.data, p.tensor.numel(), nccl_type(p.tensor.dtype), p.peer,
                              comm_, stream_),
                     "ncclRecv");
      }
      check_nccl(ncclGroupEnd(), "ncclGroupEnd");
    }, &copy);
    return request;
  }

  Request barrier(Stream &stream) override {
    return issue(stream, CommOp::Barrier, DType::F32, 0, 0, {}, [&] {
      check_nccl(ncclAllReduce(barrier_word_, barrier_word_, 1, ncclFloat32, ncclSum, comm_,
                               stream_),
                 "ncclAllReduce (barrier)");
    });
  }

  std::unique_ptr<Transport> split(int color, int key) override {
    // A new NCCL communicator bootstrapped over the MPI group of the same
    // ranks (a grid axis).
    return std::make_unique<NcclTransport>(group_->split(color, key), device_);
  }

  CommCounters counters(CommOp op) const override {
    std::lock_guard<std::mutex> lock(mutex_);
    return counters_[static_cast<int>(op)];
  }
  void reset_counters() override {
    std::lock_guard<std::mutex> lock(mutex_);
    counters_ = {};
  }
  void set_options(const CommOptions &options) override {
    std::lock_guard<std::mutex> lock(mutex_);
    options_ = options;
  }
  CommOptions options() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    return options_;
  }
  std::string failure() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    return failure_;
  }

private:
  // Enqueues `call` on the communication stream between the two events,
  // and the wait for its end on the worker thread. `p2p`: the ops of a
  // send_recv group, counted per direction.
  template <typename Call>
  Request issue(Stream &stream, CommOp op, DType dtype, int64_t total, int root,
                const CommHooks &hooks, Call call, const std::vector<P2POp> *p2p = nullptr) {
    std::string failed = failure();
    if (!failed.empty()) {
      auto done = std::make_shared<detail::Completion>();
      done->finish("dsrt nccl: the communicator failed earlier: " + failed);
      return Request(done);
    }
    std::shared_ptr<CUevent_st> ready = make_event(), finished = make_event();
    check_cuda(cudaSetDevice(device_), "cudaSetDevice");
    if (hooks.before)
      hooks.before();
    cudaStream_t compute = cuda::launch_stream(stream);
    check_cuda(cudaEventRecord(ready.get(), compute), "cudaEventRecord");
    check_cuda(cudaStreamWaitEvent(stream_, ready.get(), 0), "cudaStreamWaitEvent");
    call();
    check_cuda(cudaEventRecord(finished.get(), stream_), "cudaEventRecord");
    check_cuda(cudaStreamWaitEvent(compute, finished.get(), 0), "cudaStreamWaitEvent");

    std::vector<CommVolume> volumes;
    std::vector<CommOp> ops;
    if (p2p) {
      for (const P2POp &p : *p2p) {
        ops.push_back(p.op);
        volumes.push_back(comm_volume(p.op, p.tensor.dtype, p.tensor.numel(), size_, rank_));
      }
    } else {
      ops.push_back(op);
      volumes.push_back(comm_volume(op, dtype, total, size_, rank_, root));
    }
    std::function<void()> after = hooks.after;
    // The worker's completion is only a stream dependency when an `after`
    // hook must run before later work; otherwise the device orders it.
    return worker_.submit(after ? &stream : nullptr,
                          [this, finished, after, ops, volumes](const std::string &) {
      wait_for(finished.get());
      if (after)
        after();
      std::lock_guard<std::mutex> lock(mutex_);
      for (size_t i = 0; i < ops.size(); ++i) {
        CommCounters &c = counters_[static_cast<int>(ops[i])];
        ++c.calls;
        c.bytes_sent += volumes[i].sent;
        c.bytes_received += volumes[i].received;
      }
    }, /*after_device=*/false);  // it waits for `finished` itself, with the timeout
  }

  // Polls `event`; an NCCL asynchronous error or no completion within the
  // timeout aborts the communicator and fails this and every later
  // operation.
  void wait_for(cudaEvent_t event) {
    auto start = std::chrono::steady_clock::now();
    const double timeout = options().timeout_s;
    for (;;) {
      cudaError_t state = cudaEventQuery(event);
      if (state == cudaSuccess)
        return;
      if (state != cudaErrorNotReady)
        fail(std::string("the GPU failed: ") + cudaGetErrorString(state));
      ncclResult_t async = ncclSuccess;
      ncclCommGetAsyncError(comm_, &async);
      if (async != ncclSuccess && async != ncclInProgress)
        fail(std::string("NCCL failed: ") + ncclGetErrorString(async));
      double waited =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (waited > timeout)
        fail("no progress for " + std::to_string(static_cast<int>(timeout)) +
             " s (DSRT_COMM_TIMEOUT): a peer died, hangs or issued other operations");
      std::this_thread::sleep_for(std::chrono::microseconds(waited < 0.01 ? 10 : 1000));
    }
  }

  [[noreturn]] void fail(const std::string &why) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (failure_.empty())
        failure_ = why;
    }
    // Only the worker thread aborts, once; the destructor drains it first.
    if (!aborted_) {
      aborted_ = true;
      ncclCommAbort(comm_);
    }
    throw Error("dsrt nccl: rank " + std::to_string(rank_) + " of " + std::to_string(size_) +
                ": " + why);
  }

  std::unique_ptr<nccl::BootstrapGroup> group_;
  int device_ = 0, rank_ = 0, size_ = 1;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  float *barrier_word_ = nullptr;
  bool aborted_ = false;
  mutable std::mutex mutex_;
  std::array<CommCounters, kNumCommOps> counters_{};
  CommOptions options_;
  std::string failure_;
  detail::Worker worker_;  // last: drained before the rest goes
};

}  // namespace

std::unique_ptr<Transport> make_nccl_world(Communicator &bootstrap) {
  std::unique_ptr<nccl::BootstrapGroup> group = nccl::communicator_group(bootstrap);
  int devices = 0;
  cudaError_t status = cudaGetDeviceCount(&devices);
  if (status != cudaSuccess)
    throw Error(std::string("dsrt: no CUDA device: ") + cudaGetErrorString(status));
  std::optional<nccl::LocalRank> local =
      nccl::local_rank_from_env([](const char *name) { return std::getenv(name); });
  if (!local) {
    char host[256] = {};
    gethostname(host, sizeof host - 1);
    local = nccl::LocalRank{nccl::local_rank_by_host(*group, host), "host names"};
  }
  int device = nccl::choose_device(local->rank, devices, local->source);
  chosen_device = device;
  return std::make_unique<NcclTransport>(std::move(group), device);
}

int nccl_device() { return chosen_device; }

}  // namespace dsrt

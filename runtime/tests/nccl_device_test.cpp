// The NCCL transport on real GPUs (scripts/gpu-check.sh runs it under
// mpirun -np 1; it works on any number of ranks, one GPU each): every
// operation's result on device memory, and its counters against the ring
// formulas (comm_volume). Built only with libdsrt_cuda and NCCL.
#include "dsrt/backend.h"
#include "dsrt/comm.h"
#include "dsrt/nccl.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <memory>
#include <vector>

namespace dsrt {
namespace {

// A device tensor of `values`, and reading one back.
struct DeviceFloats {
  DeviceFloats(Stream &stream, const std::vector<float> &values) : stream(stream) {
    BackendInterface &cuda = backend(Backend::Cuda);
    tensor.dtype = DType::F32;
    tensor.shape = Shape{static_cast<int64_t>(values.size())};
    tensor.data = cuda.allocate(MemoryKind::Device, std::max<size_t>(tensor.nbytes(), 64), 256);
    if (!tensor.data)
      throw Error("cannot allocate device memory");
    cuda.copy(stream, tensor.data, values.data(), tensor.nbytes());
    stream.synchronize();
  }
  ~DeviceFloats() { backend(Backend::Cuda).deallocate(MemoryKind::Device, tensor.data); }
  std::vector<float> read() {
    std::vector<float> host(tensor.numel());
    backend(Backend::Cuda).copy(stream, host.data(), tensor.data, tensor.nbytes());
    stream.synchronize();
    return host;
  }
  Stream &stream;
  Tensor tensor;
};

class NcclDevice : public ::testing::Test {
protected:
  static void SetUpTestSuite() {
    comm_ = new Communicator(make_nccl_world(Communicator::world()));
  }
  static Communicator *comm_;
};
Communicator *NcclDevice::comm_ = nullptr;

TEST_F(NcclDevice, AllReduceSumsOverRanks) {
  Communicator &c = *comm_;
  ASSERT_STREQ(c.transport().name(), "nccl");
  ASSERT_GE(nccl_device(), 0);
  Stream stream(Backend::Cuda);
  const int n = c.size(), r = c.rank();
  std::vector<float> mine(1000);
  for (size_t i = 0; i < mine.size(); ++i)
    mine[i] = static_cast<float>(r + 1) * static_cast<float>(i % 7);
  DeviceFloats buffer(stream, mine);
  c.reset_counters();
  c.all_reduce(stream, buffer.tensor, buffer.tensor).wait();
  std::vector<float> got = buffer.read();
  const float ranks_sum = n * (n + 1) / 2.0f;
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_EQ(got[i], ranks_sum * static_cast<float>(i % 7)) << "element " << i;
  CommVolume v = comm_volume(CommOp::AllReduce, DType::F32, 1000, n, r);
  CommCounters counted = c.counters(CommOp::AllReduce);
  EXPECT_EQ(counted.calls, 1);
  EXPECT_EQ(counted.bytes_sent, v.sent);
  EXPECT_EQ(counted.bytes_received, v.received);
}

TEST_F(NcclDevice, GatherScatterBroadcastBarrier) {
  Communicator &c = *comm_;
  Stream stream(Backend::Cuda);
  const int n = c.size(), r = c.rank();
  // 7 * n + 1 elements: the ring chunks differ by one (the grouped path).
  for (int64_t total : {int64_t(8) * n, int64_t(7) * n + 1}) {
    Chunk own = ring_chunk(total, n, r);
    std::vector<float> chunk(own.size);
    for (int64_t i = 0; i < own.size; ++i)
      chunk[i] = static_cast<float>(own.begin + i);
    DeviceFloats in(stream, chunk), out(stream, std::vector<float>(total, -1.0f));
    c.all_gather(stream, in.tensor, out.tensor).wait();
    std::vector<float> gathered = out.read();
    for (int64_t i = 0; i < total; ++i)
      ASSERT_EQ(gathered[i], static_cast<float>(i)) << "all_gather of " << total << ", element " << i;

    std::vector<float> full(total);
    for (int64_t i = 0; i < total; ++i)
      full[i] = static_cast<float>(i) + r;
    DeviceFloats whole(stream, full), part(stream, std::vector<float>(own.size, 0.0f));
    c.reduce_scatter(stream, whole.tensor, part.tensor).wait();
    std::vector<float> reduced = part.read();
    for (int64_t i = 0; i < own.size; ++i)
      ASSERT_EQ(reduced[i], n * static_cast<float>(own.begin + i) + n * (n - 1) / 2.0f)
          << "reduce_scatter of " << total << ", element " << i;
  }
  DeviceFloats root_buffer(stream, std::vector<float>(33, r == 0 ? 5.0f : 0.0f));
  c.broadcast(stream, root_buffer.tensor, 0).wait();
  for (float v : root_buffer.read())
    ASSERT_EQ(v, 5.0f);
  c.barrier(stream).wait();
  EXPECT_TRUE(c.failure().empty()) << c.failure();
}

TEST_F(NcclDevice, SplitGetsItsOwnCommunicator) {
  Communicator &c = *comm_;
  std::unique_ptr<Communicator> half = Communicator::split(c, c.rank() % 2, c.rank());
  ASSERT_STREQ(half->transport().name(), "nccl");
  Stream stream(Backend::Cuda);
  DeviceFloats one(stream, std::vector<float>(16, 1.0f));
  half->all_reduce(stream, one.tensor, one.tensor).wait();
  for (float v : one.read())
    ASSERT_EQ(v, static_cast<float>(half->size()));
}

}  // namespace
}  // namespace dsrt

// dsrt: the collectives the training runners issue themselves (agreeing on
// errors, step reports, the summary) and their traffic tally (train_common.h).
#include "train_common.h"

#include "health.h"
#include "staging.h"

#include "dsrt/backend.h"
#include "dsrt/memory.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <omp.h>
#include <sys/stat.h>

namespace dsrt {
namespace runner {

//===--- the runner's exchanges between ranks ------------------------------------===//

CommTally CommTally::of(const Communicator &comm) {
  CommTally t;
  for (int op = 0; op < kNumCommOps; ++op) {
    CommCounters c = comm.counters(static_cast<CommOp>(op));
    t.calls[op] = c.calls;
    t.sent[op] = c.bytes_sent;
    t.received[op] = c.bytes_received;
  }
  return t;
}

CommTally CommTally::of(const Grid &grid) {
  CommTally t;
  for (const Communicator *comm : grid.communicators()) t += of(*comm);
  return t;
}

CommTally &CommTally::operator+=(const CommTally &o) {
  for (int op = 0; op < kNumCommOps; ++op) {
    calls[op] += o.calls[op];
    sent[op] += o.sent[op];
    received[op] += o.received[op];
  }
  return *this;
}

CommTally CommTally::operator-(const CommTally &o) const {
  CommTally t = *this;
  for (int op = 0; op < kNumCommOps; ++op) {
    t.calls[op] -= o.calls[op];
    t.sent[op] -= o.sent[op];
    t.received[op] -= o.received[op];
  }
  return t;
}

int run_reporting_errors(const std::function<int()> &body) {
  health::install_stop_handlers();
  try {
    return body();
  } catch (const ReportedFailure &) {
    health::set_failed("failed (see its message)");
    return 1;
  } catch (const std::exception &error) {
    fprintf(stderr, "error: %s\n", error.what());
    health::set_failed(error.what());
    return 1;
  }
}

namespace {

// Device copies of host tensors for a transport that works on device
// memory, freed with it.
class DeviceStaging {
public:
  explicit DeviceStaging(Stream &stream) : stream_(stream) {}
  // A device buffer of `host`'s size, holding its bytes when `upload`.
  Tensor of(const Tensor &host, bool upload) {
    buffers_.emplace_back(MemoryKind::Device, std::max<size_t>(host.nbytes(), 1));
    const Tensor device{buffers_.back().data(), host.dtype, host.shape};
    if (upload) write_from_host(stream_, device.data, host.data, host.nbytes());
    return device;
  }

private:
  Stream &stream_;
  std::vector<Arena> buffers_;
};

}  // namespace

CommTally RunnerComm::own(const Grid &grid) const {
  CommTally sum;
  for (const Communicator *comm : grid.communicators()) {
    auto it = own_.find(comm);
    if (it != own_.end()) sum += it->second;
  }
  return sum;
}

void RunnerComm::tally(Communicator &comm, const std::function<void()> &exchange) {
  const CommTally before = CommTally::of(comm);
  exchange();
  own_[&comm] += CommTally::of(comm) - before;
}

void RunnerComm::all_gather(Communicator &comm, const Tensor &in, const Tensor &out) {
  if (comm.size() == 1) {
    // The runner's exchanges take host buffers. On a device backend a
    // read_to_host would send them through the pinned staging with a
    // device copy from pageable memory and a synchronization, every step;
    // on the cpu `in` may be the arena, read in stream order.
    if (detail::stages_host_copies(backend(stream_)))
      detail::copy_host_bytes(out.data, in.data, in.nbytes());
    else
      read_to_host(stream_, out.data, in);
    return;
  }
  tally(comm, [&] {
    if (!comm.transport().device_memory()) {
      comm.all_gather(stream_, in, out).wait();
      return;
    }
    DeviceStaging staging(stream_);
    const Tensor device_out = staging.of(out, false);
    comm.all_gather(stream_, staging.of(in, true), device_out).wait();
    read_to_host(stream_, out.data, device_out);
  });
}

void RunnerComm::send_recv(Communicator &comm, const std::vector<P2POp> &ops) {
  if (ops.empty()) return;
  tally(comm, [&] {
    if (!comm.transport().device_memory()) {
      comm.send_recv(stream_, ops).wait();
      return;
    }
    DeviceStaging staging(stream_);
    std::vector<P2POp> staged = ops;
    for (P2POp &op : staged) op.tensor = staging.of(op.tensor, op.op == CommOp::Send);
    comm.send_recv(stream_, staged).wait();
    for (size_t i = 0; i < ops.size(); ++i)
      if (ops[i].op == CommOp::Recv) read_to_host(stream_, ops[i].tensor.data, staged[i].tensor);
  });
}

void RunnerComm::barrier() {
  if (size() == 1) return;
  tally(comm_, [&] { comm_.barrier(stream_).wait(); });
}

void RunnerComm::agree(const std::string &error, const std::string &when) {
  int32_t mine = error.empty() ? 0 : 1;
  std::vector<int32_t> all(static_cast<size_t>(size()));
  try {
    all_gather(Tensor{&mine, DType::I32, Shape{1}}, Tensor{all.data(), DType::I32, Shape{size()}});
  } catch (const std::exception &) {
    if (error.empty()) throw;
    all.assign(all.size(), 0);  // report this rank's own error, not the exchange's
    all[static_cast<size_t>(rank())] = 1;
  }
  fail_if_any(error, all, when);
}

void RunnerComm::gather_step_reports(const std::string &error, std::vector<float> &report,
                                     std::vector<float> &reports, int64_t step) {
  const int64_t width = static_cast<int64_t>(report.size());
  report[0] = error.empty() ? 0.0f : 1.0f;
  try {
    all_gather(Tensor{report.data(), DType::F32, Shape{width}},
               Tensor{reports.data(), DType::F32, Shape{size() * width}});
  } catch (const std::exception &) {
    if (error.empty()) throw;
    reports.assign(reports.size(), 0.0f);
    reports[static_cast<size_t>(rank() * width)] = 1.0f;
  }
  std::vector<int32_t> failed(static_cast<size_t>(size()));
  for (int64_t r = 0; r < size(); ++r)
    failed[static_cast<size_t>(r)] = reports[static_cast<size_t>(r * width)] != 0.0f;
  fail_if_any(error, failed, "at step " + std::to_string(step));
}

void RunnerComm::fail_if_any(const std::string &error, const std::vector<int32_t> &failed,
                             const std::string &when) {
  std::string ranks;
  int count = 0;
  for (size_t r = 0; r < failed.size(); ++r)
    if (failed[r]) {
      ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
      ++count;
    }
  if (count == 0) return;
  if (!error.empty())
    fprintf(stderr, "error: %s\n", error.c_str());
  else
    fprintf(stderr, "error: rank %d: %s %s failed %s: see %s message\n", rank(),
            count == 1 ? "rank" : "ranks", ranks.c_str(), when.c_str(),
            count == 1 ? "its" : "their");
  throw ReportedFailure{};
}

}  // namespace runner
}  // namespace dsrt

// The NCCL transport's bootstrap (bootstrap.h): no NCCL, no CUDA.
#include "bootstrap.h"

#include "dsrt/backend.h"
#include "dsrt/comm.h"
#include "dsrt/tensor.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <vector>

namespace dsrt {
namespace nccl {
namespace {

// Host memory over the MPI ring: any element type moves as bytes.
class CommunicatorGroup final : public BootstrapGroup {
public:
  CommunicatorGroup(Communicator &comm, std::unique_ptr<Communicator> owned)
      : comm_(comm), owned_(std::move(owned)) {}
  int rank() const override { return comm_.rank(); }
  int size() const override { return comm_.size(); }
  void broadcast(void *data, size_t bytes, int root) override {
    Tensor buffer{data, DType::Bool, Shape{static_cast<int64_t>(bytes)}};
    // A stream of the program's backend (cuda, where this runs): the MPI
    // ring moves the host bytes on its own thread either way, and a cuda
    // program has no cpu backend to make a Backend::Cpu stream of.
    Stream host(backend().kind());
    comm_.broadcast(host, buffer, root).wait();
  }
  std::unique_ptr<BootstrapGroup> split(int color, int key) override {
    return communicator_group(Communicator::split(comm_, color, key));
  }

private:
  Communicator &comm_;
  std::unique_ptr<Communicator> owned_;
};

}  // namespace

std::unique_ptr<BootstrapGroup> communicator_group(Communicator &comm) {
  return std::make_unique<CommunicatorGroup>(comm, nullptr);
}

std::unique_ptr<BootstrapGroup> communicator_group(std::unique_ptr<Communicator> owned) {
  Communicator &comm = *owned;
  return std::make_unique<CommunicatorGroup>(comm, std::move(owned));
}

std::optional<LocalRank> local_rank_from_env(
    const std::function<const char *(const char *)> &getenv) {
  for (const char *name : {"OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID", "MPI_LOCALRANKID",
                           "MV2_COMM_WORLD_LOCAL_RANK", "LOCAL_RANK"}) {
    const char *text = getenv(name);
    if (!text)
      continue;
    char *end = nullptr;
    errno = 0;
    long value = std::strtol(text, &end, 10);
    if (!*text || *end != '\0' || errno != 0 || value < 0 || value > 1 << 20)
      throw Error(std::string("dsrt: ") + name + "='" + text +
                  "' is not a local rank (a non-negative integer)");
    return LocalRank{static_cast<int>(value), name};
  }
  return std::nullopt;
}

int local_rank_by_host(BootstrapGroup &group, const std::string &host) {
  // Fixed-size names, so that every rank broadcasts the same bytes.
  constexpr size_t kNameBytes = 256;
  int local = 0;
  for (int r = 0; r < group.size(); ++r) {
    std::array<char, kNameBytes> name{};
    if (r == group.rank())
      std::strncpy(name.data(), host.c_str(), kNameBytes - 1);
    group.broadcast(name.data(), kNameBytes, r);
    if (r < group.rank() && host.compare(0, kNameBytes - 1, name.data()) == 0)
      ++local;
  }
  return local;
}

int choose_device(int local_rank, int device_count, const std::string &source) {
  const char *visible = std::getenv("CUDA_VISIBLE_DEVICES");
  std::string visibility = visible ? std::string(" (CUDA_VISIBLE_DEVICES=") + visible + ")" : "";
  if (device_count <= 0)
    throw Error("dsrt: no CUDA device" + visibility);
  if (local_rank >= device_count)
    throw Error("dsrt: local rank " + std::to_string(local_rank) + " (from " + source +
                ") has no CUDA device of its own: " + std::to_string(device_count) +
                " visible" + visibility + "; start at most one process per GPU on a host");
  return local_rank;
}

UniqueId share_unique_id(BootstrapGroup &group, const std::function<UniqueId()> &make_id) {
  // The id with a verdict, so that a root that cannot make one fails every
  // rank instead of leaving them waiting for NCCL.
  struct Message {
    char ok = 0;
    char reason[127] = {};
    UniqueId id{};
  } message;
  std::string failure;
  if (group.rank() == 0) {
    try {
      message.id = make_id();
      message.ok = 1;
    } catch (const std::exception &e) {
      failure = e.what();
      std::strncpy(message.reason, e.what(), sizeof message.reason - 1);
    }
  }
  group.broadcast(&message, sizeof message, 0);
  if (!failure.empty())
    throw Error(failure);
  if (!message.ok)
    throw Error(std::string("dsrt: rank 0 of the NCCL group could not create its unique id: ") +
                message.reason);
  return message.id;
}

}  // namespace nccl
}  // namespace dsrt

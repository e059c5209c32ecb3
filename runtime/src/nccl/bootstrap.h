// The NCCL transport's bootstrap: what happens before the first NCCL call
// and needs neither NCCL nor a GPU, so that it is unit-tested anywhere
// (runtime/tests/nccl_bootstrap_test.cpp, with fakes).
//
// - The device: each process uses the GPU of its local rank (its index
//   among the job's processes on its host), read from the launcher's
//   environment (OMPI_COMM_WORLD_LOCAL_RANK, SLURM_LOCALID, ...) or, when
//   no launcher says, counted by comparing host names over the bootstrap
//   group (what an MPI shared-memory split gives).
// - The unique id: rank 0 of a group asks NCCL for an ncclUniqueId and
//   broadcasts its bytes over the group; every rank then initializes its
//   NCCL communicator with it.
// - The groups: the MPI world, and the groups split from it (a grid axis'
//   ranks, Communicator::split), each bootstrapping its own NCCL
//   communicator.
//
// Not installed.
#ifndef DSRT_SRC_NCCL_BOOTSTRAP_H
#define DSRT_SRC_NCCL_BOOTSTRAP_H

#include <array>
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>

namespace dsrt {
class Communicator;

namespace nccl {

// NCCL_UNIQUE_ID_BYTES (checked against nccl.h where NCCL is compiled in).
constexpr size_t kUniqueIdBytes = 128;
using UniqueId = std::array<char, kUniqueIdBytes>;

// The processes an NCCL communicator is bootstrapped over: blocking
// host-side operations, collective over the group.
class BootstrapGroup {
public:
  virtual ~BootstrapGroup() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // `bytes` of `root`'s buffer to every rank's.
  virtual void broadcast(void *data, size_t bytes, int root) = 0;
  // As Communicator::split: the ranks passing the same color, by key.
  virtual std::unique_ptr<BootstrapGroup> split(int color, int key) = 0;
};

// A group over a dsrt::Communicator (the MPI ring world, or a communicator
// split from it), on host memory. `owned`: the group owns the communicator
// (a split's), else `comm` must outlive it.
std::unique_ptr<BootstrapGroup> communicator_group(Communicator &comm);
std::unique_ptr<BootstrapGroup> communicator_group(std::unique_ptr<Communicator> owned);

// The local rank the launcher gives, and the variable it came from.
struct LocalRank {
  int rank = 0;
  std::string source;
};
// `getenv` looks up one variable (nullptr when unset). Variables are tried
// in order: OMPI_COMM_WORLD_LOCAL_RANK, SLURM_LOCALID, MPI_LOCALRANKID,
// MV2_COMM_WORLD_LOCAL_RANK, LOCAL_RANK; nullopt when none is set. A set
// value that is no non-negative integer throws a dsrt::Error naming it.
std::optional<LocalRank> local_rank_from_env(
    const std::function<const char *(const char *)> &getenv);
// The number of lower ranks of `group` whose host name is `host`'s: one
// broadcast per rank (at bootstrap only).
int local_rank_by_host(BootstrapGroup &group, const std::string &host);

// The CUDA device of local rank `local_rank` among `device_count` visible
// devices: the local rank itself. Throws a dsrt::Error when there is no
// device, or fewer devices than local ranks (naming `source`, where the
// local rank came from, and CUDA_VISIBLE_DEVICES).
int choose_device(int local_rank, int device_count, const std::string &source);

// Rank 0 of `group` calls `make_id` (ncclGetUniqueId) and broadcasts the
// id; every rank returns it.
UniqueId share_unique_id(BootstrapGroup &group, const std::function<UniqueId()> &make_id);

}  // namespace nccl
}  // namespace dsrt

#endif  // DSRT_SRC_NCCL_BOOTSTRAP_H

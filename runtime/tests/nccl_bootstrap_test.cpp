// The NCCL transport's bootstrap (src/nccl/bootstrap.h) with fakes: ranks
// are threads of this process sharing an in-memory group, the environment
// is a map and the unique id a counter. No NCCL, no GPU.
#include "nccl/bootstrap.h"

#include "dsrt/comm.h"
#include "dsrt/tensor.h"

#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace dsrt {
namespace nccl {
namespace {

// `size` ranks, one thread each, broadcasting through shared memory.
class ThreadGroup final : public BootstrapGroup {
public:
  struct Shared {
    explicit Shared(int size) : size(size) {}
    int size;
    std::mutex mutex;
    std::condition_variable cv;
    int arrived = 0;
    uint64_t generation = 0;
    std::vector<char> buffer;
    int broadcasts = 0;
    void barrier() {
      std::unique_lock<std::mutex> lock(mutex);
      uint64_t mine = generation;
      if (++arrived == size) {
        arrived = 0;
        ++generation;
        cv.notify_all();
      } else {
        cv.wait(lock, [&] { return generation != mine; });
      }
    }
  };
  ThreadGroup(std::shared_ptr<Shared> shared, int rank) : shared_(std::move(shared)), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return shared_->size; }
  void broadcast(void *data, size_t bytes, int root) override {
    if (rank_ == root) {
      std::lock_guard<std::mutex> lock(shared_->mutex);
      const char *p = static_cast<const char *>(data);
      shared_->buffer.assign(p, p + bytes);
      ++shared_->broadcasts;
    }
    shared_->barrier();
    if (rank_ != root) {
      ASSERT_EQ(shared_->buffer.size(), bytes);
      std::memcpy(data, shared_->buffer.data(), bytes);
    }
    shared_->barrier();
  }
  std::unique_ptr<BootstrapGroup> split(int, int) override {
    throw std::logic_error("the bootstrap never splits a fake group");
  }

private:
  std::shared_ptr<Shared> shared_;
  int rank_;
};

// Runs `body(group)` on `size` thread ranks; returns each rank's result.
template <typename F> auto on_ranks(int size, F body) {
  auto shared = std::make_shared<ThreadGroup::Shared>(size);
  std::vector<decltype(body(std::declval<BootstrapGroup &>()))> results(size);
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r)
    threads.emplace_back([&, r] {
      ThreadGroup group(shared, r);
      results[r] = body(group);
    });
  for (auto &t : threads)
    t.join();
  return results;
}

std::function<const char *(const char *)> env(std::map<std::string, std::string> vars) {
  auto held = std::make_shared<std::map<std::string, std::string>>(std::move(vars));
  return [held](const char *name) -> const char * {
    auto it = held->find(name);
    return it == held->end() ? nullptr : it->second.c_str();
  };
}

TEST(NcclBootstrap, LocalRankFromTheLauncher) {
  auto open_mpi = local_rank_from_env(env({{"OMPI_COMM_WORLD_LOCAL_RANK", "3"}, {"SLURM_LOCALID", "1"}}));
  ASSERT_TRUE(open_mpi.has_value());
  EXPECT_EQ(open_mpi->rank, 3);
  EXPECT_EQ(open_mpi->source, "OMPI_COMM_WORLD_LOCAL_RANK");
  auto slurm = local_rank_from_env(env({{"SLURM_LOCALID", "1"}, {"LOCAL_RANK", "5"}}));
  ASSERT_TRUE(slurm.has_value());
  EXPECT_EQ(slurm->rank, 1);
  EXPECT_EQ(slurm->source, "SLURM_LOCALID");
  EXPECT_FALSE(local_rank_from_env(env({{"OMPI_COMM_WORLD_RANK", "2"}})).has_value());
}

TEST(NcclBootstrap, BadLocalRankIsNamed) {
  for (const char *bad : {"", "-1", "two", "1x"}) {
    try {
      local_rank_from_env(env({{"SLURM_LOCALID", bad}}));
      FAIL() << "accepted SLURM_LOCALID='" << bad << "'";
    } catch (const Error &e) {
      EXPECT_NE(std::string(e.what()).find(std::string("SLURM_LOCALID='") + bad + "'"),
                std::string::npos)
          << e.what();
    }
  }
}

TEST(NcclBootstrap, DeviceOfTheLocalRank) {
  EXPECT_EQ(choose_device(0, 1, "SLURM_LOCALID"), 0);
  EXPECT_EQ(choose_device(5, 8, "SLURM_LOCALID"), 5);
  try {
    choose_device(0, 0, "host names");
    FAIL() << "chose a device among none";
  } catch (const Error &e) {
    EXPECT_NE(std::string(e.what()).find("no CUDA device"), std::string::npos) << e.what();
  }
  try {
    choose_device(2, 2, "OMPI_COMM_WORLD_LOCAL_RANK");
    FAIL() << "gave local rank 2 a device of 2";
  } catch (const Error &e) {
    std::string what = e.what();
    EXPECT_NE(what.find("local rank 2 (from OMPI_COMM_WORLD_LOCAL_RANK)"), std::string::npos) << what;
    EXPECT_NE(what.find("2 visible"), std::string::npos) << what;
  }
}

TEST(NcclBootstrap, LocalRankCountedByHostName) {
  const std::vector<std::string> hosts = {"node-a", "node-b", "node-a", "node-a", "node-b"};
  auto local = on_ranks(5, [&](BootstrapGroup &g) { return local_rank_by_host(g, hosts[g.rank()]); });
  EXPECT_EQ(local, (std::vector<int>{0, 0, 1, 2, 1}));
}

TEST(NcclBootstrap, RootMakesTheIdAndEveryRankGetsIt) {
  std::atomic<int> made{0};
  auto ids = on_ranks(4, [&](BootstrapGroup &g) {
    return share_unique_id(g, [&] {
      ++made;
      UniqueId id{};
      for (size_t i = 0; i < id.size(); ++i)
        id[i] = static_cast<char>(i * 7 + 1);
      return id;
    });
  });
  EXPECT_EQ(made.load(), 1);
  for (const UniqueId &id : ids) {
    EXPECT_EQ(id, ids[0]);
    EXPECT_EQ(id[3], 22);
  }
}

TEST(NcclBootstrap, RootFailureFailsEveryRank) {
  auto errors = on_ranks(3, [&](BootstrapGroup &g) -> std::string {
    try {
      share_unique_id(g, []() -> UniqueId { throw Error("ncclGetUniqueId: system error"); });
      return "";
    } catch (const Error &e) {
      return e.what();
    }
  });
  EXPECT_EQ(errors[0], "ncclGetUniqueId: system error");
  for (int r = 1; r < 3; ++r)
    EXPECT_NE(errors[r].find("rank 0 of the NCCL group could not create its unique id: "
                             "ncclGetUniqueId: system error"),
              std::string::npos)
        << errors[r];
}

// The real group over the world communicator (a world of one here).
TEST(NcclBootstrap, OverTheWorldCommunicator) {
  Communicator &world = Communicator::world();
  ASSERT_EQ(world.size(), 1) << "dsrt_async_tests runs as one process";
  auto group = communicator_group(world);
  UniqueId id = share_unique_id(*group, [] {
    UniqueId made{};
    made.fill('x');
    return made;
  });
  EXPECT_EQ(id[127], 'x');
  auto half = group->split(0, 0);
  EXPECT_EQ(half->size(), 1);
  EXPECT_EQ(local_rank_by_host(*half, "node"), 0);
}

}  // namespace
}  // namespace nccl
}  // namespace dsrt

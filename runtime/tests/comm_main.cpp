// dsrt_comm_tests [gtest flags] [--dead-peer] [--skip REASON]
//
// Run by mpirun on 1, 2 or 3 ranks (or alone: a world of one rank). Every
// rank runs every test in the same order, since the tests issue collectives.
// Rank 0 prints GoogleTest's report; the other ranks print only failures,
// tagged with their rank. --dead-peer enables the test that leaves the
// communicator failed (run it in a job of its own). --skip prints REASON and
// exits with 77, which CTest reports as skipped.
#include "comm_test.h"

#include "dsrt/comm.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <string>

namespace dsrt_test {
bool dead_peer_enabled = false;
}

namespace {

// Failures of a rank other than 0, tagged with the rank.
class RankFailurePrinter : public testing::EmptyTestEventListener {
public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const testing::TestPartResult &result) override {
    if (result.failed())
      std::fprintf(stderr, "[rank %d] %s:%d: Failure\n%s\n", rank_,
                   result.file_name() ? result.file_name() : "?", result.line_number(),
                   result.message());
  }
  void OnTestEnd(const testing::TestInfo &info) override {
    if (info.result()->Failed())
      std::fprintf(stderr, "[rank %d] [  FAILED  ] %s.%s\n", rank_, info.test_suite_name(),
                   info.name());
  }

private:
  int rank_;
};

}  // namespace

int main(int argc, char **argv) {
  testing::InitGoogleTest(&argc, argv);
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--dead-peer") {
      dsrt_test::dead_peer_enabled = true;
    } else if (arg == "--skip" && i + 1 < argc) {
      std::printf("dsrt_comm_tests: SKIPPED: %s\n", argv[i + 1]);
      return 77;
    } else {
      std::fprintf(stderr, "usage: %s [gtest flags] [--dead-peer] [--skip REASON]\n"
                           "unknown argument: %s\n", argv[0], arg.c_str());
      return 2;
    }
  }
  int rank = 0;
  try {
    dsrt::Communicator &world = dsrt::Communicator::world();
    rank = world.rank();
    if (rank == 0)
      std::printf("dsrt_comm_tests: %d rank(s)%s\n", world.size(),
                  world.uses_mpi() ? " over MPI" : ", no MPI");
  } catch (const dsrt::Error &e) {
    std::fprintf(stderr, "dsrt_comm_tests: %s\n", e.what());
    return 1;
  }
  if (rank != 0) {
    testing::TestEventListeners &listeners = testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new RankFailurePrinter(rank));
  }
  return RUN_ALL_TESTS();
}

// A program that initialized MPI itself with too low a thread level gets a
// clear dsrt::Error from Communicator::world(), not undefined behaviour on
// the communication thread. Run under mpirun -np 1.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include "dsrt/comm.h"

#include "test_util.h"

#include <cstdio>

namespace {

TEST(CommThreadLevel, TooLowALevelIsAClearError) {
  int provided = 0;
  MPI_Query_thread(&provided);
  ASSERT_EQ(provided, MPI_THREAD_FUNNELED);
  EXPECT_DSRT_ERROR(dsrt::Communicator::world(), "dsrt::Communicator::world",
                    "MPI provides only MPI_THREAD_FUNNELED",
                    "dsrt needs MPI_THREAD_SERIALIZED",
                    "initialize MPI with MPI_Init_thread and MPI_THREAD_SERIALIZED");
}

}  // namespace

int main(int argc, char **argv) {
  testing::InitGoogleTest(&argc, argv);
  int provided = 0;
  // FUNNELED: only the main thread may call MPI, so dsrt's communication
  // thread may not.
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  int result = RUN_ALL_TESTS();
  MPI_Finalize();
  return result;
}

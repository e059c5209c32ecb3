// Shared between comm_main.cpp and comm_test.cpp.
#ifndef DSRT_TESTS_COMM_TEST_H
#define DSRT_TESTS_COMM_TEST_H

namespace dsrt_test {
// Set by --dead-peer: the test that leaves the communicator failed runs.
extern bool dead_peer_enabled;
}  // namespace dsrt_test

#endif  // DSRT_TESTS_COMM_TEST_H

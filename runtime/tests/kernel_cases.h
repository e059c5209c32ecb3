// Registration of the PyTorch-oracle kernel cases written by make_cases.py.
#ifndef DSRT_TESTS_KERNEL_CASES_H
#define DSRT_TESTS_KERNEL_CASES_H

#include <string>

namespace dsrt_test {

// Registers one test per case directory under `root`; returns the number of
// cases, or -1 if `root` is not a directory.
int register_kernel_cases(const std::string &root);

}  // namespace dsrt_test

#endif  // DSRT_TESTS_KERNEL_CASES_H

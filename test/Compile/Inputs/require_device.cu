// What a generated cuda program's main does first (dsrt/cuda_launch.h).
#include "dsrt/cuda_launch.h"

int main(int, char **argv) {
  dsrt::cuda::require_device(argv[0]);
  return 0;
}

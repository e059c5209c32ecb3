// Not compiled: check_backend_neutral.cmake must reject this file, which
// copies into program memory behind the backend's back.
#include <cstring>

void load_micro_batch(unsigned char *arena, const unsigned char *batch, unsigned long bytes) {
  std::memcpy(arena, batch, bytes);
}

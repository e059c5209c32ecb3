// What the file readers' fuzz targets share: the fuzzer's bytes as a file
// the readers can open by path (they refuse anything but regular files).
#ifndef DSRT_FUZZ_FUZZ_FILE_H
#define DSRT_FUZZ_FUZZ_FILE_H

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <unistd.h>

namespace dsrt_fuzz {

// A directory of its own under $TMPDIR (else /dev/shm, in memory, else
// /tmp), made once per process.
inline const std::string &work_dir() {
  static const std::string dir = [] {
    const char *tmp = std::getenv("TMPDIR");
    std::string base = tmp && *tmp ? tmp : access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    std::string pattern = base + "/dsrt-fuzz-XXXXXX";
    if (!mkdtemp(&pattern[0])) std::abort();
    return pattern;
  }();
  return dir;
}

// Replaces `path` by `size` bytes of `data`.
inline void write_file(const std::string &path, const uint8_t *data, size_t size) {
  FILE *f = std::fopen(path.c_str(), "wb");
  if (!f) std::abort();
  if (size && std::fwrite(data, 1, size, f) != size) std::abort();
  std::fclose(f);
}

}  // namespace dsrt_fuzz

#endif  // DSRT_FUZZ_FUZZ_FILE_H

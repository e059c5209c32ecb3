// dsrt_aio_bench PATH BYTES [--block-size B] [--queue-depth Q]
//   [--intra-op N] [--single-submit] [--op-bytes B] [--repeats R]
//
// The file space's I/O engine on its own (no program around it): creates
// PATH at BYTES bytes (a FileStore with the given `aio` knobs), then per
// repeat writes the whole file and reads it back, each pass one transfer
// window of operations of --op-bytes (default 64 MiB) issued back to back
// from (into) one aligned host buffer, as a step's write-behinds and
// read-aheads are. A window's time runs from before its first submit to
// the return of the wait for its last completion, so the throughput is the
// bytes the engine moved over the time it was busy. Prints one JSON object
// (the engine in use, the knobs, and per direction the best and median
// bytes per second over the repeats); removes PATH at the end.
// bench/aio_bench.py sweeps the knobs and compares with fio.
#include "dsrt/file_io.h"
#include "dsrt/stream.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <unistd.h>

using namespace dsrt;

namespace {

[[noreturn]] void usage(const char *why) {
  fprintf(stderr,
          "dsrt_aio_bench: %s\nusage: dsrt_aio_bench PATH BYTES [--block-size B] "
          "[--queue-depth Q] [--intra-op N] [--single-submit] [--op-bytes B] "
          "[--repeats R]\n",
          why);
  exit(2);
}

int64_t number(const char *text, const char *what) {
  char *end = nullptr;
  long long value = strtoll(text, &end, 10);
  if (!end || *end || value <= 0) usage((std::string(what) + " must be a positive integer").c_str());
  return value;
}

// Seconds one pass over the file takes: every operation issued, then waited.
double pass(FileStore &store, Stream &stream, void *buffer, int64_t bytes, int64_t op_bytes,
            bool write) {
  std::vector<Request> requests;
  const auto start = std::chrono::steady_clock::now();
  for (int64_t offset = 0; offset < bytes; offset += op_bytes) {
    const size_t n = static_cast<size_t>(std::min(op_bytes, bytes - offset));
    requests.push_back(write ? store.write_async(stream, offset, buffer, n)
                             : store.read_async(stream, offset, buffer, n));
  }
  for (Request &request : requests) request.wait();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char **argv) {
  if (argc < 3) usage("PATH and BYTES are required");
  const std::string path = argv[1];
  const int64_t bytes = number(argv[2], "BYTES");
  FileIOOptions io;
  int64_t op_bytes = 64 << 20;
  int repeats = 3;
  for (int i = 3; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&](const char *what) {
      if (i + 1 >= argc) usage((arg + " needs a value").c_str());
      return number(argv[++i], what);
    };
    if (arg == "--block-size") io.block_size = value("--block-size");
    else if (arg == "--queue-depth") io.queue_depth = static_cast<int>(value("--queue-depth"));
    else if (arg == "--intra-op") io.intra_op_parallelism = static_cast<int>(value("--intra-op"));
    else if (arg == "--single-submit") io.single_submit = true;
    else if (arg == "--op-bytes") op_bytes = value("--op-bytes");
    else if (arg == "--repeats") repeats = static_cast<int>(value("--repeats"));
    else usage(("unknown option " + arg).c_str());
  }
  if (op_bytes % kDirectAlignment != 0) usage("--op-bytes must be a multiple of 4096");
  try {
    check_file_io_options(io, "dsrt_aio_bench");
    void *buffer = std::aligned_alloc(kDirectAlignment, static_cast<size_t>(op_bytes));
    if (!buffer) usage("cannot allocate the host buffer");
    std::memset(buffer, 0x5a, static_cast<size_t>(op_bytes));
    Stream stream;
    FileStore store = FileStore::create(path, bytes, io);
    std::vector<double> write_s, read_s;
    for (int r = 0; r < repeats; ++r) {
      write_s.push_back(pass(store, stream, buffer, bytes, op_bytes, /*write=*/true));
      read_s.push_back(pass(store, stream, buffer, bytes, op_bytes, /*write=*/false));
    }
    const FileStoreStats stats = store.stats();
    const std::string engine = store.engine();
    store.close();
    unlink(path.c_str());
    std::free(buffer);
    auto rate = [&](double seconds) { return static_cast<double>(bytes) / seconds; };
    printf("{\"engine\": \"%s\", \"bytes\": %lld, \"op_bytes\": %lld, \"block_size\": %lld, "
           "\"queue_depth\": %d, \"intra_op_parallelism\": %d, \"single_submit\": %s, "
           "\"repeats\": %d, \"write_bytes_per_s\": {\"best\": %.6g, \"median\": %.6g}, "
           "\"read_bytes_per_s\": {\"best\": %.6g, \"median\": %.6g}, \"requests\": %lld, "
           "\"max_in_flight\": %lld, \"bounced\": %lld}\n",
           engine.c_str(), static_cast<long long>(bytes), static_cast<long long>(op_bytes),
           static_cast<long long>(io.block_size), io.queue_depth, io.intra_op_parallelism,
           io.single_submit ? "true" : "false", repeats,
           rate(*std::min_element(write_s.begin(), write_s.end())), rate(median(write_s)),
           rate(*std::min_element(read_s.begin(), read_s.end())), rate(median(read_s)),
           static_cast<long long>(stats.requests), static_cast<long long>(stats.max_in_flight),
           static_cast<long long>(stats.bounced));
  } catch (const std::exception &e) {
    unlink(path.c_str());
    fprintf(stderr, "dsrt_aio_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}

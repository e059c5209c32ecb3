// bench/pc_sampling.cpp's aggregation and JSON on records given on stdin
// instead of CUPTI's (pc_sampling_test.py checks what it writes), one per
// line, tab-separated:
//
//   FUNCTION  PC_OFFSET  REASON  SAMPLES     samples of a PC (mangled name)
//   #totals   TOTAL  DROPPED  NON_USER  FULL one buffer's counts (FULL 0/1)
//   #status   STATUS  [ERROR]                 how the sampling went
//
// and writes the JSON to stdout.
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "pc_sampling_aggregate.h"

namespace {

std::vector<std::string> fields(const std::string &line) {
  std::vector<std::string> out;
  std::stringstream stream(line);
  std::string field;
  while (std::getline(stream, field, '\t'))
    out.push_back(field);
  return out;
}

} // namespace

int main() {
  dsrt_pcsample::Aggregate aggregate;
  dsrt_pcsample::Status status;
  status.collection_mode = "kernel-serialized";
  status.sampling_period_log2 = 12;
  std::string line;
  int number = 0;
  while (std::getline(std::cin, line)) {
    ++number;
    if (line.empty())
      continue;
    std::vector<std::string> f = fields(line);
    try {
      if (f[0] == "#totals" && f.size() == 5) {
        aggregate.add_totals(std::stoull(f[1]), std::stoull(f[2]), std::stoull(f[3]), f[4] == "1");
      } else if (f[0] == "#status" && (f.size() == 2 || f.size() == 3)) {
        status.status = f[1];
        status.error = f.size() == 3 ? f[2] : "";
      } else if (f.size() == 4 && f[0][0] != '#') {
        aggregate.add(f[0], std::stoull(f[1]), f[2], std::stoull(f[3]));
      } else {
        std::fprintf(stderr, "pc_sampling_records: line %d: expected FUNCTION PC REASON SAMPLES, "
                             "#totals or #status: '%s'\n", number, line.c_str());
        return 1;
      }
    } catch (const std::exception &) {
      std::fprintf(stderr, "pc_sampling_records: line %d: not a number: '%s'\n", number,
                   line.c_str());
      return 1;
    }
  }
  std::cout << aggregate.json(status, 3);
  return 0;
}

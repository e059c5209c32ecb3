// What bench/pc_sampling.cpp makes of CUPTI's PC samples, without CUPTI:
// the samples summed per kernel and per stall reason (and per PC offset, for
// each kernel's hottest instructions), written as JSON. Kept apart from the
// CUPTI calls so that a test feeds it records of its own
// (runtime/tests/cuda/pc_sampling_records.cpp) on a machine with no GPU.
//
// The JSON (what bench/pc_stalls.py reads):
//   {"status": "ok" | "unsupported" | "error" | "no-context",
//    "error": "..." (when not ok),
//    "collection_mode": "...", "sampling_period_log2": N,
//    "total_samples": N, "dropped_samples": N, "non_user_samples": N,
//    "hardware_buffer_full": false,
//    "kernels": [{"name": demangled, "mangled": ..., "samples": N,
//                 "stalls": {reason: N, ...},
//                 "top_pcs": [{"pc_offset": N, "samples": N, "reason": r}]}]}
// kernels by samples, most first; stalls by count, most first.
//
// A sample is one warp seen at one PC with one reason. CUPTI names the
// reasons smsp__pcsamp_warps_issue_stalled_<reason>, and on GPUs that tell
// issued from not-issued samples also <reason>_not_issued: those count the
// subset of the same samples at which the warp issued nothing, so a
// kernel's "samples" sums the reasons without that suffix (each sample
// once), while "stalls" keeps every reason CUPTI reported.
#pragma once

#include <cxxabi.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace dsrt_pcsample {

// The C++ name of a mangled symbol, or the symbol itself when it is not one.
inline std::string demangle(const std::string &symbol) {
  int status = 0;
  char *name = abi::__cxa_demangle(symbol.c_str(), nullptr, nullptr, &status);
  if (status != 0 || name == nullptr) {
    std::free(name);
    return symbol;
  }
  std::string result(name);
  std::free(name);
  return result;
}

// Whether samples of `reason` count towards a kernel's samples: every
// reason but the _not_issued subsets (above).
inline bool counts_as_sample(const std::string &reason) {
  static const std::string suffix = "_not_issued";
  return reason.size() < suffix.size() ||
         reason.compare(reason.size() - suffix.size(), suffix.size(), suffix) != 0;
}

inline std::string json_string(const std::string &text) {
  std::string out = "\"";
  for (unsigned char c : text) {
    switch (c) {
    case '"': out += "\\\""; break;
    case '\\': out += "\\\\"; break;
    case '\n': out += "\\n"; break;
    case '\t': out += "\\t"; break;
    default:
      if (c < 0x20) {
        char escaped[8];
        std::snprintf(escaped, sizeof escaped, "\\u%04x", c);
        out += escaped;
      } else {
        out += static_cast<char>(c);
      }
    }
  }
  return out + "\"";
}

// How the sampling went, written beside the samples.
struct Status {
  std::string status = "ok";   // ok, unsupported, error, no-context
  std::string error;           // the first CUPTI error, when not ok
  std::string collection_mode; // kernel-serialized or continuous
  int sampling_period_log2 = 0;
};

class Aggregate {
public:
  // `samples` samples of `function` (CUPTI's mangled name) at `pc_offset`
  // with `reason`.
  void add(const std::string &function, uint64_t pc_offset, const std::string &reason,
           uint64_t samples) {
    if (samples == 0)
      return;
    Kernel &kernel = kernels_[function];
    kernel.stalls[reason] += samples;
    kernel.pcs[pc_offset][reason] += samples;
    if (counts_as_sample(reason))
      kernel.samples += samples;
  }

  // CUPTI's counts of one buffer of PC records.
  void add_totals(uint64_t total, uint64_t dropped, uint64_t non_user, bool hardware_full) {
    total_samples_ += total;
    dropped_samples_ += dropped;
    non_user_samples_ += non_user;
    hardware_buffer_full_ = hardware_buffer_full_ || hardware_full;
  }

  size_t kernel_count() const { return kernels_.size(); }

  // The JSON above, with each kernel's `top_pcs` hottest PC offsets.
  std::string json(const Status &status, size_t top_pcs = 10) const {
    std::vector<std::pair<std::string, const Kernel *>> order;
    for (const auto &entry : kernels_)
      order.emplace_back(entry.first, &entry.second);
    std::stable_sort(order.begin(), order.end(), [](const auto &a, const auto &b) {
      return a.second->samples > b.second->samples;
    });
    std::string out = "{\n  \"status\": " + json_string(status.status);
    if (!status.error.empty())
      out += ",\n  \"error\": " + json_string(status.error);
    if (!status.collection_mode.empty())
      out += ",\n  \"collection_mode\": " + json_string(status.collection_mode);
    if (status.sampling_period_log2 > 0)
      out += ",\n  \"sampling_period_log2\": " + std::to_string(status.sampling_period_log2);
    out += ",\n  \"total_samples\": " + std::to_string(total_samples_);
    out += ",\n  \"dropped_samples\": " + std::to_string(dropped_samples_);
    out += ",\n  \"non_user_samples\": " + std::to_string(non_user_samples_);
    out += ",\n  \"hardware_buffer_full\": ";
    out += hardware_buffer_full_ ? "true" : "false";
    out += ",\n  \"kernels\": [";
    for (size_t k = 0; k < order.size(); ++k) {
      const Kernel &kernel = *order[k].second;
      out += k ? ",\n    {" : "\n    {";
      out += "\"name\": " + json_string(demangle(order[k].first));
      out += ", \"mangled\": " + json_string(order[k].first);
      out += ", \"samples\": " + std::to_string(kernel.samples);
      out += ",\n     \"stalls\": {";
      auto stalls = by_count(kernel.stalls);
      for (size_t s = 0; s < stalls.size(); ++s)
        out += (s ? ", " : "") + json_string(stalls[s].first) + ": " +
               std::to_string(stalls[s].second);
      out += "},\n     \"top_pcs\": [";
      auto pcs = hottest(kernel, top_pcs);
      for (size_t p = 0; p < pcs.size(); ++p) {
        out += p ? ", " : "";
        out += "{\"pc_offset\": " + std::to_string(pcs[p].offset) +
               ", \"samples\": " + std::to_string(pcs[p].samples) +
               ", \"reason\": " + json_string(pcs[p].reason) + "}";
      }
      out += "]}";
    }
    out += order.empty() ? "]\n}\n" : "\n  ]\n}\n";
    return out;
  }

private:
  struct Kernel {
    uint64_t samples = 0;
    std::map<std::string, uint64_t> stalls;
    std::unordered_map<uint64_t, std::map<std::string, uint64_t>> pcs;
  };
  struct Pc {
    uint64_t offset, samples;
    std::string reason; // the one with the most samples there
  };

  static std::vector<std::pair<std::string, uint64_t>>
  by_count(const std::map<std::string, uint64_t> &counts) {
    std::vector<std::pair<std::string, uint64_t>> sorted(counts.begin(), counts.end());
    std::stable_sort(sorted.begin(), sorted.end(),
                     [](const auto &a, const auto &b) { return a.second > b.second; });
    return sorted;
  }

  static std::vector<Pc> hottest(const Kernel &kernel, size_t count) {
    std::vector<Pc> pcs;
    for (const auto &entry : kernel.pcs) {
      Pc pc{entry.first, 0, ""};
      uint64_t most = 0;
      for (const auto &reason : entry.second) {
        if (!counts_as_sample(reason.first))
          continue;
        pc.samples += reason.second;
        if (reason.second > most) {
          most = reason.second;
          pc.reason = reason.first;
        }
      }
      if (pc.samples)
        pcs.push_back(pc);
    }
    std::sort(pcs.begin(), pcs.end(), [](const Pc &a, const Pc &b) {
      return a.samples != b.samples ? a.samples > b.samples : a.offset < b.offset;
    });
    if (pcs.size() > count)
      pcs.resize(count);
    return pcs;
  }

  std::map<std::string, Kernel> kernels_;
  uint64_t total_samples_ = 0, dropped_samples_ = 0, non_user_samples_ = 0;
  bool hardware_buffer_full_ = false;
};

} // namespace dsrt_pcsample

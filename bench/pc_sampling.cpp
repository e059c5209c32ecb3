// Warp-stall sampling of every kernel a CUDA program runs, for a GPU
// without Nsight Compute: a CUPTI injection library. The CUDA driver loads
// the shared library named by CUDA_INJECTION64_PATH into the process when
// it initializes and calls its InitializeInjection; this one then samples
// the program counters of the warps on every SM with CUPTI's PC Sampling
// API, each sample with the reason its warp was stalled (long scoreboard,
// barrier, MIO throttle, math pipe throttle, not selected, ...), and at exit
// writes the samples summed per kernel and reason (bench/pc_sampling_aggregate.h)
// as JSON. bench/pc_stalls.py turns that into a table; scripts/gpu-check.sh's
// stalls stage runs the GPT-2 benchmark's program under it.
//
//   g++ -std=c++17 -O2 -shared -fPIC bench/pc_sampling.cpp -I$CUDA/include
//       -L$CUDA/lib64 -lcupti -ldl -o libdsrt_pc_sampling.so
//   CUDA_INJECTION64_PATH=$PWD/libdsrt_pc_sampling.so DSRT_PCSAMPLE_OUT=stalls.json PROGRAM
//
// DSRT_PCSAMPLE_OUT       the JSON's path (unset: nothing is sampled)
// DSRT_PCSAMPLE_INTERVAL  a sample every 2^N cycles of each SM, N in 5..31
//                         (default 12: a 2 GHz SM is sampled about 500,000
//                         times a second)
// DSRT_PCSAMPLE_MODE      serialized (the default: CUPTI runs one kernel at
//                         a time, and each kernel's records are fetched when
//                         its launch returns) or continuous (kernels overlap
//                         as without sampling; records are fetched when
//                         CUPTI holds many, and at exit)
//
// It never stops the program: the first CUPTI error is reported once on
// stderr with the call that failed, sampling stops there (every context's
// sampling disabled) and the program goes on; the JSON then says
// "unsupported" (the device, driver, permissions or a virtualized GPU do
// not allow PC sampling) or "error", with CUPTI's message.
#include <cupti.h>
#include <cupti_pcsampling.h>
#include <dlfcn.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "pc_sampling_aggregate.h"

namespace {

using dsrt_pcsample::Aggregate;

// PC records one buffer holds: CUPTI's configured buffer (filled when a
// context's sampling is disabled) and the one each fetch fills.
constexpr size_t kBufferPcs = 10000;
// Fetches of one drain before it gives up (a CUPTI that keeps reporting
// records would otherwise hold the program).
constexpr int kMaxFetches = 100000;
// CUPTI's buffers: the raw counters downloaded from the hardware buffer
// (1 MiB by default, about 5,500 PCs with every reason: the fused attention
// kernels alone have more instructions) and the hardware buffer itself.
constexpr size_t kScratchBytes = size_t(16) << 20;
constexpr size_t kHardwareBytes = size_t(512) << 20;

// One buffer of PC records with room for `pcs` PCs of `reasons` reasons each.
struct Buffer {
  CUpti_PCSamplingData data{};
  std::vector<CUpti_PCSamplingPCData> pcs;
  std::vector<CUpti_PCSamplingStallReason> stalls;

  void allocate(size_t count, size_t reasons) {
    pcs.assign(count, CUpti_PCSamplingPCData{});
    stalls.assign(count * (reasons ? reasons : 1), CUpti_PCSamplingStallReason{});
    for (size_t i = 0; i < count; ++i) {
      pcs[i].size = sizeof(CUpti_PCSamplingPCData);
      pcs[i].stallReason = &stalls[i * (reasons ? reasons : 1)];
    }
    data = CUpti_PCSamplingData{};
    data.size = sizeof(CUpti_PCSamplingData);
    data.collectNumPcs = count;
    data.pPcData = pcs.data();
  }
};

// A context's sampling: its stall reasons' names by index and its buffers,
// which CUPTI keeps pointers to (so a Context never moves).
struct Context {
  CUcontext ctx = nullptr;
  bool enabled = false;
  std::unordered_map<uint32_t, std::string> reasons;
  std::vector<uint32_t> reason_indices;
  Buffer configured, fetched;
};

std::recursive_mutex g_mutex;
Aggregate g_aggregate;
dsrt_pcsample::Status g_status;
std::map<CUcontext, std::unique_ptr<Context>> g_contexts;
std::string g_out;
uint32_t g_period_log2 = 12;
CUpti_PCSamplingCollectionMode g_mode = CUPTI_PC_SAMPLING_COLLECTION_MODE_KERNEL_SERIALIZED;
CUpti_SubscriberHandle g_subscriber = nullptr;
bool g_failed = false;
bool g_saw_context = false;
bool g_written = false;

// CUPTI's results that say this machine cannot sample, as opposed to a
// failure of the sampling.
bool is_unsupported(CUptiResult result) {
  switch (result) {
  case CUPTI_ERROR_NOT_SUPPORTED:
  case CUPTI_ERROR_NOT_COMPATIBLE:
  case CUPTI_ERROR_INSUFFICIENT_PRIVILEGES:
  case CUPTI_ERROR_VIRTUALIZED_DEVICE_NOT_SUPPORTED:
  case CUPTI_ERROR_VIRTUALIZED_DEVICE_INSUFFICIENT_PRIVILEGES:
  case CUPTI_ERROR_CMP_DEVICE_NOT_SUPPORTED:
  case CUPTI_ERROR_MIG_DEVICE_NOT_SUPPORTED:
  case CUPTI_ERROR_SLI_DEVICE_NOT_SUPPORTED:
  case CUPTI_ERROR_WSL_DEVICE_NOT_SUPPORTED:
  case CUPTI_ERROR_CONFIDENTIAL_COMPUTING_NOT_SUPPORTED:
  case CUPTI_ERROR_LEGACY_PROFILER_NOT_SUPPORTED:
  case CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED:
    return true;
  default:
    return false;
  }
}

std::string result_text(CUptiResult result) {
  const char *text = nullptr;
  if (cuptiGetResultString(result, &text) != CUPTI_SUCCESS || text == nullptr)
    text = "unknown CUPTI result";
  std::string out = std::string(text) + " (CUPTI result " + std::to_string(int(result)) + ")";
  if (result == CUPTI_ERROR_NOT_INITIALIZED)
    out += ": no CUDA driver or GPU?";
  if (result == CUPTI_ERROR_INSUFFICIENT_PRIVILEGES)
    out += ": the driver lets only administrators profile (NVreg_RestrictProfilingToAdminUsers)";
  if (result == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED)
    out += ": another profiler holds CUPTI";
  return out;
}

// Stops sampling on every context, the results ignored: after a failure,
// or when the library cannot go on.
void stop_all() {
  for (auto &entry : g_contexts) {
    Context &context = *entry.second;
    if (!context.enabled)
      continue;
    context.enabled = false;
    CUpti_PCSamplingDisableParams params{};
    params.size = CUpti_PCSamplingDisableParamsSize;
    params.ctx = context.ctx;
    cuptiPCSamplingDisable(&params);
  }
}

// The first failure: reported once, sampling stopped, the program goes on.
void fail(const std::string &call, const std::string &why, bool unsupported) {
  if (g_failed)
    return;
  g_failed = true;
  g_status.status = unsupported ? "unsupported" : "error";
  g_status.error = call + ": " + why;
  std::fprintf(stderr,
               "dsrt pc sampling: %s failed: %s; %s, the program goes on\n", call.c_str(),
               why.c_str(),
               unsupported ? "PC sampling is not available here" : "sampling stops");
  stop_all();
}

bool ok(CUptiResult result, const char *call) {
  if (result == CUPTI_SUCCESS)
    return true;
  fail(call, result_text(result), is_unsupported(result));
  return false;
}

// One buffer's records into the aggregate.
void absorb(const Context &context, const CUpti_PCSamplingData &data) {
  g_aggregate.add_totals(data.totalSamples, data.droppedSamples, data.nonUsrKernelsTotalSamples,
                         data.hardwareBufferFull != 0);
  size_t count = data.totalNumPcs < data.collectNumPcs ? data.totalNumPcs : data.collectNumPcs;
  for (size_t i = 0; i < count; ++i) {
    const CUpti_PCSamplingPCData &pc = data.pPcData[i];
    // CUPTI allocates the names, shared between records; they are kept
    // (not freed) for the life of the process.
    std::string function = pc.functionName ? pc.functionName : "(unnamed)";
    size_t reasons = pc.stallReasonCount;
    if (reasons > context.reason_indices.size())
      reasons = context.reason_indices.size(); // no more than the buffer has room for
    for (size_t k = 0; k < reasons; ++k) {
      const CUpti_PCSamplingStallReason &stall = pc.stallReason[k];
      auto name = context.reasons.find(stall.pcSamplingStallReasonIndex);
      g_aggregate.add(function, pc.pcOffset,
                      name != context.reasons.end()
                          ? name->second
                          : "reason_" + std::to_string(stall.pcSamplingStallReasonIndex),
                      stall.samples);
    }
  }
}

// One cuptiPCSamplingGetData into the context's fetch buffer, absorbed:
// the number of PCs it brought, or -1 after a failure.
long fetch(Context &context) {
  Buffer &buffer = context.fetched;
  buffer.data.totalNumPcs = 0;
  buffer.data.remainingNumPcs = 0;
  buffer.data.totalSamples = buffer.data.droppedSamples = buffer.data.nonUsrKernelsTotalSamples = 0;
  buffer.data.hardwareBufferFull = 0;
  CUpti_PCSamplingGetDataParams params{};
  params.size = CUpti_PCSamplingGetDataParamsSize;
  params.ctx = context.ctx;
  params.pcSamplingData = &buffer.data;
  CUptiResult result = cuptiPCSamplingGetData(&params);
  if (result != CUPTI_SUCCESS) {
    std::string why = result_text(result);
    if (buffer.data.hardwareBufferFull)
      why += ": the hardware buffer is full (sample less often: raise DSRT_PCSAMPLE_INTERVAL)";
    fail("cuptiPCSamplingGetData", why, false);
    return -1;
  }
  absorb(context, buffer.data);
  return long(buffer.data.totalNumPcs);
}

// Every record CUPTI holds for the context, fetched while its configured
// buffer says some are there (CUPTI keeps the buffer's counts current).
void drain(Context &context) {
  for (int round = 0; context.configured.data.totalNumPcs > 0 ||
                      context.configured.data.remainingNumPcs > 0;
       ++round) {
    if (round == kMaxFetches) {
      fail("cuptiPCSamplingGetData",
           "PC records still came after " + std::to_string(kMaxFetches) + " fetches", false);
      return;
    }
    long got = fetch(context);
    if (got <= 0)
      return;
  }
}

void start(CUcontext ctx) {
  g_saw_context = true;
  auto owned = std::make_unique<Context>();
  Context &context = *owned;
  context.ctx = ctx;
  g_contexts[ctx] = std::move(owned);

  CUpti_PCSamplingEnableParams enable{};
  enable.size = CUpti_PCSamplingEnableParamsSize;
  enable.ctx = ctx;
  if (!ok(cuptiPCSamplingEnable(&enable), "cuptiPCSamplingEnable"))
    return;
  context.enabled = true;

  // Every stall reason the device has.
  size_t count = 0;
  CUpti_PCSamplingGetNumStallReasonsParams number{};
  number.size = CUpti_PCSamplingGetNumStallReasonsParamsSize;
  number.ctx = ctx;
  number.numStallReasons = &count;
  if (!ok(cuptiPCSamplingGetNumStallReasons(&number), "cuptiPCSamplingGetNumStallReasons"))
    return;
  std::vector<std::vector<char>> names(count, std::vector<char>(CUPTI_STALL_REASON_STRING_SIZE, 0));
  std::vector<char *> name_pointers(count);
  for (size_t i = 0; i < count; ++i)
    name_pointers[i] = names[i].data();
  context.reason_indices.assign(count, 0);
  CUpti_PCSamplingGetStallReasonsParams reasons{};
  reasons.size = CUpti_PCSamplingGetStallReasonsParamsSize;
  reasons.ctx = ctx;
  reasons.numStallReasons = count;
  reasons.stallReasonIndex = context.reason_indices.data();
  reasons.stallReasons = name_pointers.data();
  if (!ok(cuptiPCSamplingGetStallReasons(&reasons), "cuptiPCSamplingGetStallReasons"))
    return;
  for (size_t i = 0; i < count; ++i) {
    names[i].back() = 0;
    context.reasons[context.reason_indices[i]] = names[i].data();
  }

  context.configured.allocate(kBufferPcs, count);
  context.fetched.allocate(kBufferPcs, count);

  std::vector<CUpti_PCSamplingConfigurationInfo> attributes(6);
  attributes[0].attributeType = CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_SAMPLING_PERIOD;
  attributes[0].attributeData.samplingPeriodData.samplingPeriod = g_period_log2;
  attributes[1].attributeType = CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_STALL_REASON;
  attributes[1].attributeData.stallReasonData.stallReasonCount = count;
  attributes[1].attributeData.stallReasonData.pStallReasonIndex = context.reason_indices.data();
  attributes[2].attributeType = CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_SCRATCH_BUFFER_SIZE;
  attributes[2].attributeData.scratchBufferSizeData.scratchBufferSize = kScratchBytes;
  attributes[3].attributeType = CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_HARDWARE_BUFFER_SIZE;
  attributes[3].attributeData.hardwareBufferSizeData.hardwareBufferSize = kHardwareBytes;
  attributes[4].attributeType = CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_COLLECTION_MODE;
  attributes[4].attributeData.collectionModeData.collectionMode = g_mode;
  attributes[5].attributeType = CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_SAMPLING_DATA_BUFFER;
  attributes[5].attributeData.samplingDataBufferData.samplingDataBuffer = &context.configured.data;
  CUpti_PCSamplingConfigurationInfoParams configure{};
  configure.size = CUpti_PCSamplingConfigurationInfoParamsSize;
  configure.ctx = ctx;
  configure.numAttributes = attributes.size();
  configure.pPCSamplingConfigurationInfo = attributes.data();
  CUptiResult result = cuptiPCSamplingSetConfigurationAttribute(&configure);
  if (result != CUPTI_SUCCESS) {
    // Which attribute CUPTI refused, by its own status.
    static const char *const attribute_names[] = {"sampling period", "stall reasons",
                                                  "scratch buffer size", "hardware buffer size",
                                                  "collection mode", "data buffer"};
    std::string why = result_text(result);
    for (size_t i = 0; i < attributes.size(); ++i)
      if (attributes[i].attributeStatus != CUPTI_SUCCESS)
        why += std::string("; the ") + attribute_names[i] + ": " +
               result_text(attributes[i].attributeStatus);
    fail("cuptiPCSamplingSetConfigurationAttribute", why, is_unsupported(result));
  }
}

// The context's last records: fetched, sampling disabled (which writes what
// CUPTI still held into the configured buffer), that buffer absorbed.
void finish(Context &context) {
  if (!context.enabled || g_failed)
    return;
  if (fetch(context) < 0)
    return;
  drain(context);
  if (g_failed)
    return;
  CUpti_PCSamplingDisableParams disable{};
  disable.size = CUpti_PCSamplingDisableParamsSize;
  disable.ctx = context.ctx;
  context.enabled = false;
  if (!ok(cuptiPCSamplingDisable(&disable), "cuptiPCSamplingDisable"))
    return;
  absorb(context, context.configured.data);
  context.configured.data.totalNumPcs = 0;
}

// The driver's launches, whose exits end a kernel's range in serialized mode.
const CUpti_CallbackId kLaunches[] = {
    CUPTI_DRIVER_TRACE_CBID_cuLaunch,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchGrid,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchGridAsync,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernelMultiDevice,
    CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch,
    CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch_ptsz,
};

bool is_launch(CUpti_CallbackId id) {
  for (CUpti_CallbackId launch : kLaunches)
    if (id == launch)
      return true;
  return false;
}

void CUPTIAPI on_callback(void *, CUpti_CallbackDomain domain, CUpti_CallbackId id,
                          const void *data) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  if (g_failed || g_written)
    return;
  if (domain == CUPTI_CB_DOMAIN_RESOURCE) {
    const auto *resource = static_cast<const CUpti_ResourceData *>(data);
    if (id == CUPTI_CBID_RESOURCE_CONTEXT_CREATED) {
      start(resource->context);
      return;
    }
    auto found = g_contexts.find(resource->context);
    if (found == g_contexts.end() || !found->second->enabled)
      return;
    if (id == CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING)
      finish(*found->second);
    else if (id == CUPTI_CBID_RESOURCE_MODULE_UNLOAD_STARTING)
      drain(*found->second); // the unloaded module's PCs before another's reuse them
    return;
  }
  if (domain != CUPTI_CB_DOMAIN_DRIVER_API || !is_launch(id))
    return;
  const auto *call = static_cast<const CUpti_CallbackData *>(data);
  if (call->callbackSite != CUPTI_API_EXIT)
    return;
  auto found = g_contexts.find(call->context);
  if (found == g_contexts.end() || !found->second->enabled)
    return;
  Context &context = *found->second;
  // Serialized: the kernel has ended and is a range of its own, fetched
  // now. Continuous: fetched once CUPTI holds half a buffer's PCs.
  if (g_mode == CUPTI_PC_SAMPLING_COLLECTION_MODE_KERNEL_SERIALIZED ||
      context.configured.data.remainingNumPcs >= kBufferPcs / 2)
    drain(context);
}

void write_json() {
  if (g_written || g_out.empty())
    return;
  g_written = true;
  if (!g_failed && !g_saw_context) {
    g_status.status = "no-context";
    g_status.error = "no CUDA context was created (no GPU, or the program made no CUDA call)";
  }
  std::string json = g_aggregate.json(g_status);
  std::string temporary = g_out + ".tmp";
  FILE *file = std::fopen(temporary.c_str(), "w");
  bool written = file && std::fwrite(json.data(), 1, json.size(), file) == json.size();
  if (file)
    written = std::fclose(file) == 0 && written;
  if (!written || std::rename(temporary.c_str(), g_out.c_str()) != 0) {
    std::fprintf(stderr, "dsrt pc sampling: cannot write %s: %s\n", g_out.c_str(),
                 std::strerror(errno));
    return;
  }
  std::fprintf(stderr, "dsrt pc sampling: %s: %zu kernels (%s) written to %s\n",
               g_status.status.c_str(), g_aggregate.kernel_count(),
               g_status.collection_mode.c_str(), g_out.c_str());
}

void at_exit() {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  for (auto &entry : g_contexts)
    finish(*entry.second);
  write_json();
}

// The settings from the environment; false (reported) when one is invalid.
bool read_settings() {
  if (const char *period = std::getenv("DSRT_PCSAMPLE_INTERVAL")) {
    char *end = nullptr;
    long value = std::strtol(period, &end, 10);
    if (!*period || *end || value < 5 || value > 31) {
      fail("DSRT_PCSAMPLE_INTERVAL",
           std::string("must be N in 5..31 (a sample every 2^N cycles), not '") + period + "'",
           false);
      return false;
    }
    g_period_log2 = uint32_t(value);
  }
  g_status.sampling_period_log2 = int(g_period_log2);
  const char *mode = std::getenv("DSRT_PCSAMPLE_MODE");
  if (!mode || !std::strcmp(mode, "serialized")) {
    g_mode = CUPTI_PC_SAMPLING_COLLECTION_MODE_KERNEL_SERIALIZED;
    g_status.collection_mode = "kernel-serialized";
  } else if (!std::strcmp(mode, "continuous")) {
    g_mode = CUPTI_PC_SAMPLING_COLLECTION_MODE_CONTINUOUS;
    g_status.collection_mode = "continuous";
  } else {
    fail("DSRT_PCSAMPLE_MODE",
         std::string("must be serialized or continuous, not '") + mode + "'", false);
    return false;
  }
  return true;
}

} // namespace

// Called by the CUDA driver while it initializes (CUDA_INJECTION64_PATH).
// Returns 1 whether or not sampling could start: a failure is reported and
// written to the JSON, never passed on to the program.
extern "C" __attribute__((visibility("default"))) int InitializeInjection(void) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  static bool initialized = false;
  if (initialized)
    return 1;
  initialized = true;
  const char *out = std::getenv("DSRT_PCSAMPLE_OUT");
  if (!out || !*out) {
    std::fprintf(stderr, "dsrt pc sampling: DSRT_PCSAMPLE_OUT is not set: nothing is sampled\n");
    return 1;
  }
  g_out = out;
  CUptiResult subscribed = CUPTI_SUCCESS;
  if (read_settings()) {
    subscribed =
        cuptiSubscribe(&g_subscriber, reinterpret_cast<CUpti_CallbackFunc>(on_callback), nullptr);
    if (subscribed != CUPTI_SUCCESS) {
      // Called by hand (a test's dlopen), not by a driver.
      bool driver = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD) != nullptr;
      fail("cuptiSubscribe",
           result_text(subscribed) +
               (driver ? "" : "; no CUDA driver (libcuda.so.1) is loaded in this process"),
           is_unsupported(subscribed));
    }
  }
  if (!g_failed) {
    bool enabled =
        ok(cuptiEnableCallback(1, g_subscriber, CUPTI_CB_DOMAIN_RESOURCE,
                               CUPTI_CBID_RESOURCE_CONTEXT_CREATED),
           "cuptiEnableCallback") &&
        ok(cuptiEnableCallback(1, g_subscriber, CUPTI_CB_DOMAIN_RESOURCE,
                               CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING),
           "cuptiEnableCallback") &&
        ok(cuptiEnableCallback(1, g_subscriber, CUPTI_CB_DOMAIN_RESOURCE,
                               CUPTI_CBID_RESOURCE_MODULE_UNLOAD_STARTING),
           "cuptiEnableCallback");
    for (CUpti_CallbackId id : kLaunches)
      enabled = enabled &&
                ok(cuptiEnableCallback(1, g_subscriber, CUPTI_CB_DOMAIN_DRIVER_API, id),
                   "cuptiEnableCallback");
    if (enabled)
      std::fprintf(stderr, "dsrt pc sampling: on (%s, a sample every 2^%u cycles), to %s\n",
                   g_status.collection_mode.c_str(), g_period_log2, g_out.c_str());
  }
  // After CUPTI's own exit handlers were registered, so that this one,
  // registered later, runs first.
  std::atexit(at_exit);
  return 1;
}

//===- TrainConfig.cpp - reading DeepSpeed configs ------------------------===//
//
// A DeepSpeed config is read in three steps: the text is parsed as strict
// JSON (nesting depth and duplicate keys are checked around llvm::json, which
// neither limits its recursion nor rejects duplicates, while DeepSpeed
// rejects duplicate keys), the command-line overrides are written into the
// JSON, and the JSON is interpreted key by key into a TrainConfig with
// DeepSpeed's defaults. Every error names the file and the key path; every
// key dsopt does not use becomes a warning.
//
//===----------------------------------------------------------------------===//

#include "dsopt/Config/TrainConfig.h"
#include "dsopt/Pipeline/Schedule.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MathExtras.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/raw_ostream.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>

using llvm::StringRef;
using llvm::Twine;
namespace json = llvm::json;

namespace dsopt {

StringRef optimizerKindName(OptimizerKind kind) {
  switch (kind) {
  case OptimizerKind::AdamW:
    return "AdamW";
  case OptimizerKind::Adam:
    return "Adam";
  case OptimizerKind::SGD:
    return "SGD";
  case OptimizerKind::Lion:
    return "Lion";
  }
  return "AdamW";
}

StringRef scheduleKindName(ScheduleKind kind) {
  switch (kind) {
  case ScheduleKind::Constant:
    return "Constant";
  case ScheduleKind::WarmupLR:
    return "WarmupLR";
  case ScheduleKind::WarmupDecayLR:
    return "WarmupDecayLR";
  case ScheduleKind::WarmupCosineLR:
    return "WarmupCosineLR";
  }
  return "Constant";
}

bool TrainConfigOverrides::empty() const {
  return !optimizer && !lr && !weightDecay && !eps && !momentum &&
         !gradientClipping && !betas && !nesterov && !trainBatchSize &&
         !microBatchSize && !gradientAccumulationSteps && !stepsPerPrint &&
         !zeroStage && !dataParallelSize && !pipelineStages && !microbatches &&
         !pipelineChunks && !worldSize && !pipelineSchedule && !precision &&
         !offloadOptimizer && !nvmePath && !offloadParam &&
         !tensorParallelSize &&
         !sequenceParallel;
}

llvm::StringRef offloadDeviceName(OffloadDevice device) {
  switch (device) {
  case OffloadDevice::None: return "none";
  case OffloadDevice::CPU: return "cpu";
  case OffloadDevice::NVMe: return "nvme";
  }
  llvm_unreachable("unknown offload device");
}

std::optional<OffloadDevice> parseOffloadDevice(llvm::StringRef name) {
  for (OffloadDevice d :
       {OffloadDevice::None, OffloadDevice::CPU, OffloadDevice::NVMe})
    if (name == offloadDeviceName(d))
      return d;
  return std::nullopt;
}

llvm::StringRef precisionName(Precision precision) {
  switch (precision) {
  case Precision::FP32: return "fp32";
  case Precision::BF16: return "bf16";
  case Precision::FP16: return "fp16";
  }
  llvm_unreachable("unknown precision");
}

std::optional<Precision> parsePrecision(llvm::StringRef name) {
  for (Precision p : {Precision::FP32, Precision::BF16, Precision::FP16})
    if (name == precisionName(p))
      return p;
  return std::nullopt;
}

namespace {

/// Deeper nesting is refused before llvm::json (which recurses) sees it.
constexpr int kMaxNesting = 64;
/// Configs are a few kilobytes; this bounds what a wrong path can make dsopt
/// read.
constexpr uint64_t kMaxConfigBytes = 16 << 20;
/// Integers beyond this are refused, so products of batch sizes can be
/// checked for overflow and doubles convert exactly.
constexpr double kMaxInteger = 9007199254740992.0; // 2^53

llvm::Error makeError(const Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
}

/// Text from the file, fit for a one-line message: control characters
/// escaped (they must not drive the user's terminal), long text cut.
std::string display(StringRef text, size_t limit = 64) {
  std::string result;
  for (size_t i = 0; i < text.size(); ++i) {
    unsigned char c = text[i];
    // Cut at a character boundary, not inside a UTF-8 sequence.
    if (result.size() >= limit && (c & 0xc0) != 0x80) {
      result += "...";
      break;
    }
    if (c < 0x20 || c == 0x7f) {
      result += "\\x";
      result += llvm::hexdigit(c >> 4, /*LowerCase=*/true);
      result += llvm::hexdigit(c & 15, /*LowerCase=*/true);
    } else {
      result += static_cast<char>(c);
    }
  }
  return result;
}

/// The shortest decimal form of `value` that reads back as the same double
/// (0.9, not 0.90000000000000002).
std::string formatNumber(double value) {
  char text[64];
  for (int digits = 1; digits <= 17; ++digits) {
    std::snprintf(text, sizeof text, "%.*g", digits, value);
    if (std::strtod(text, nullptr) == value)
      break;
  }
  return text;
}

/// A JSON value as a message shows it.
std::string describe(const json::Value &value) {
  switch (value.kind()) {
  case json::Value::Null:
    return "null";
  case json::Value::Boolean:
    return *value.getAsBoolean() ? "true" : "false";
  case json::Value::Number: {
    // getAsInteger converts doubles near 2^63 without a check.
    double number = *value.getAsNumber();
    if (std::fabs(number) <= kMaxInteger)
      if (std::optional<int64_t> i = value.getAsInteger())
        return std::to_string(*i);
    return formatNumber(number);
  }
  case json::Value::String: {
    std::string text = "\"" + display(*value.getAsString()) + "\"";
    // Configs written for Hugging Face's Trainer hold "auto", which the
    // Trainer replaces with its own arguments.
    if (*value.getAsString() == "auto")
      text += " (\"auto\" is filled in by Hugging Face's Trainer; dsopt "
              "needs the value written out)";
    return text;
  }
  case json::Value::Array:
    return "a list";
  case json::Value::Object:
    return "an object";
  }
  return "a value";
}

std::vector<std::string> sortedKeys(const json::Object &object) {
  std::vector<std::string> keys;
  for (const auto &entry : object)
    keys.push_back(StringRef(entry.first).str());
  llvm::sort(keys);
  return keys;
}

//===----------------------------------------------------------------------===//
// JSON text: depth, syntax, duplicate keys
//===----------------------------------------------------------------------===//

/// The nesting depth of the JSON text, not counting brackets in strings.
int nestingDepth(StringRef text) {
  int depth = 0, deepest = 0;
  bool inString = false;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (inString) {
      if (c == '\\')
        ++i;
      else if (c == '"')
        inString = false;
    } else if (c == '"') {
      inString = true;
    } else if (c == '{' || c == '[') {
      deepest = std::max(deepest, ++depth);
      if (deepest > kMaxNesting)
        return deepest;
    } else if (c == '}' || c == ']') {
      --depth;
    }
  }
  return deepest;
}

/// Finds the first key that appears twice in one object of valid JSON
/// `text`; returns its path and 1-based line and column.
struct DuplicateKey {
  std::string path;
  unsigned line = 0, column = 0;
};
std::optional<DuplicateKey> findDuplicateKey(StringRef text) {
  struct Frame {
    bool isObject;
    bool expectKey;
    llvm::StringSet<> keys;
    std::string current; // the key (object) or index (list) being read
    int64_t index = 0;
  };
  std::vector<Frame> stack;
  unsigned line = 1, column = 1;
  auto pathOf = [&]() {
    std::string path;
    for (const Frame &frame : stack) {
      if (frame.isObject) {
        if (!path.empty())
          path += ".";
        path += frame.current;
      } else {
        path += "[" + std::to_string(frame.index) + "]";
      }
    }
    return path;
  };
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (c == '"') {
      unsigned keyLine = line, keyColumn = column;
      size_t end = i + 1;
      while (end < text.size() && text[end] != '"')
        end += text[end] == '\\' ? 2 : 1;
      StringRef token = text.slice(i, end + 1);
      column += token.size();
      i = end;
      if (stack.empty() || !stack.back().isObject || !stack.back().expectKey)
        continue;
      Frame &frame = stack.back();
      frame.expectKey = false;
      // The token is valid JSON (the whole text parsed); decoding it makes
      // "a" and "\u0061" the same key.
      std::string key;
      if (llvm::Expected<json::Value> decoded = json::parse(token)) {
        if (std::optional<StringRef> s = decoded->getAsString())
          key = s->str();
      } else {
        llvm::consumeError(decoded.takeError());
      }
      frame.current = display(key);
      if (!frame.keys.insert(key).second)
        return DuplicateKey{pathOf(), keyLine, keyColumn};
      continue;
    }
    if (c == '\n') {
      ++line;
      column = 1;
      continue;
    }
    ++column;
    if (c == '{' || c == '[') {
      stack.push_back(Frame{c == '{', c == '{', {}, {}, 0});
    } else if (c == '}' || c == ']') {
      if (!stack.empty())
        stack.pop_back();
    } else if (c == ',' && !stack.empty()) {
      if (stack.back().isObject)
        stack.back().expectKey = true;
      else
        ++stack.back().index;
    }
  }
  return std::nullopt;
}

/// "FILE:LINE:COLUMN: " from the "FILE: " that starts messages.
std::string locate(StringRef prefix, unsigned line, unsigned column) {
  prefix.consume_back(": ");
  std::string location = prefix.empty() ? "" : prefix.str() + ":";
  return location + std::to_string(line) + ":" + std::to_string(column) +
         ": ";
}

/// Parses `text` as a JSON object; errors start with `prefix`.
llvm::Expected<json::Object> parseJsonObject(StringRef text,
                                             const std::string &prefix) {
  text.consume_front("\xEF\xBB\xBF"); // a UTF-8 byte order mark
  if (text.trim().empty())
    return makeError(prefix + "the config is empty; a DeepSpeed config is a "
                              "JSON object, e.g. {\"train_batch_size\": 8}");
  if (nestingDepth(text) > kMaxNesting)
    return makeError(prefix + "the config nests more than " +
                     Twine(kMaxNesting) +
                     " levels deep; a DeepSpeed config is a few levels deep");
  llvm::Expected<json::Value> parsed = json::parse(text);
  if (!parsed) {
    // ParseError logs "[LINE:COLUMN, byte=OFFSET]: MESSAGE", OFFSET just
    // past the offending character. The position is recomputed from the
    // offset: at the end of a file that ends with a newline, llvm::json
    // says column 0.
    std::string logged = llvm::toString(parsed.takeError());
    StringRef rest(logged);
    size_t offset = 0;
    size_t byte = rest.find(", byte=");
    if (byte == StringRef::npos ||
        rest.drop_front(byte + 7).consumeInteger(10, offset) ||
        offset > text.size())
      return makeError(prefix + "invalid JSON: " + logged);
    StringRef message = rest.split("]: ").second;
    bool atEnd = offset == text.size();
    StringRef before = text.take_front(atEnd || offset == 0 ? offset
                                                            : offset - 1);
    unsigned line = 1 + before.count('\n');
    size_t lineStart = before.rfind('\n');
    unsigned column =
        before.size() - (lineStart == StringRef::npos ? 0 : lineStart + 1) +
        1;
    return makeError(locate(prefix, line, column) + "invalid JSON: " +
                     message +
                     (atEnd ? " (the file ends too early)" : ""));
  }
  json::Object *object = parsed->getAsObject();
  if (!object)
    return makeError(prefix + "expected a JSON object at the top level, got " +
                     describe(*parsed));
  if (std::optional<DuplicateKey> duplicate = findDuplicateKey(text)) {
    return makeError(locate(prefix, duplicate->line, duplicate->column) +
                     duplicate->path +
                     ": the key appears twice (DeepSpeed rejects duplicate "
                     "keys too)");
  }
  return std::move(*object);
}

//===----------------------------------------------------------------------===//
// Command-line overrides, written into the JSON
//===----------------------------------------------------------------------===//

std::string flagName(OptimizerKind kind) {
  return StringRef(optimizerKindName(kind)).lower();
}

/// The optimizer an `optimizer` section selects, or nullopt when it does not
/// name a supported one (interpreting the section reports why).
std::optional<OptimizerKind> sectionKind(const json::Value *section) {
  const json::Object *object = section ? section->getAsObject() : nullptr;
  if (!object)
    return std::nullopt;
  std::optional<StringRef> type = object->getString("type");
  if (!type)
    return std::nullopt;
  std::string lower = type->lower();
  if (lower == "adamw")
    return OptimizerKind::AdamW;
  if (lower == "adam") {
    const json::Object *params = object->getObject("params");
    std::optional<bool> mode =
        params ? params->getBoolean("adam_w_mode") : std::nullopt;
    return mode && !*mode ? OptimizerKind::Adam : OptimizerKind::AdamW;
  }
  if (lower == "sgd")
    return OptimizerKind::SGD;
  if (lower == "lion")
    return OptimizerKind::Lion;
  return std::nullopt;
}

/// An optimizer section for `kind` chosen on the command line: PyTorch's
/// defaults where they differ from DeepSpeed's (AdamW's weight decay 0.01).
json::Object flagOptimizerSection(OptimizerKind kind) {
  json::Object params;
  if (kind == OptimizerKind::AdamW)
    params["weight_decay"] = 0.01;
  if (kind == OptimizerKind::Adam)
    params["adam_w_mode"] = false;
  return json::Object{{"type", optimizerKindName(kind)},
                      {"params", std::move(params)}};
}

llvm::Error applyOverrides(json::Object &root,
                           const TrainConfigOverrides &overrides,
                           const std::string &prefix,
                           std::vector<std::string> &warnings) {
  bool optimizerFlags = overrides.lr || overrides.weightDecay ||
                        overrides.eps || overrides.momentum ||
                        overrides.betas || overrides.nesterov;
  json::Value *section = root.get("optimizer");
  if (overrides.optimizer) {
    OptimizerKind kind = *overrides.optimizer;
    if (!section || sectionKind(section) != kind) {
      json::Object replacement = flagOptimizerSection(kind);
      std::optional<json::Value> fileLr;
      if (const json::Object *object = section ? section->getAsObject()
                                               : nullptr)
        if (const json::Object *params = object->getObject("params"))
          if (const json::Value *lr = params->get("lr"))
            fileLr = *lr;
      if (section) {
        std::string was = "its optimizer";
        if (const json::Object *object = section->getAsObject())
          if (std::optional<StringRef> type = object->getString("type"))
            was = "its optimizer " + display(*type);
        warnings.push_back(
            prefix + "--optimizer=" + flagName(kind) + " replaces " + was +
            (fileLr ? "; of its parameters only lr is kept"
                    : " and its parameters"));
      }
      if (fileLr)
        (*replacement.getObject("params"))["lr"] = std::move(*fileLr);
      else if (kind == OptimizerKind::SGD && !overrides.lr)
        return makeError("--optimizer=sgd needs a learning rate: give --lr "
                         "(torch.optim.SGD has no default)");
      root["optimizer"] = std::move(replacement);
    }
  } else if (optimizerFlags && !section) {
    // dsopt's default optimizer, written out so the flags can amend it.
    root["optimizer"] = flagOptimizerSection(OptimizerKind::AdamW);
  }
  if (optimizerFlags) {
    section = root.get("optimizer");
    json::Object *object = section->getAsObject();
    if (!object)
      return llvm::Error::success(); // reported when the section is read
    if (!object->get("params"))
      (*object)["params"] = json::Object();
    json::Object *params = object->getObject("params");
    if (!params)
      return llvm::Error::success();
    if (std::optional<OptimizerKind> kind = sectionKind(section)) {
      std::string name = optimizerKindName(*kind).str();
      auto notFor = [&](StringRef flag, StringRef which) {
        return makeError(flag + " applies to " + which +
                         "; the optimizer is " + name +
                         " (choose another with --optimizer)");
      };
      if (overrides.betas && *kind == OptimizerKind::SGD)
        return notFor("--betas", "AdamW, Adam and Lion");
      if (overrides.eps &&
          (*kind == OptimizerKind::SGD || *kind == OptimizerKind::Lion))
        return notFor("--eps", "AdamW and Adam");
      if (overrides.momentum && *kind != OptimizerKind::SGD)
        return notFor("--momentum", "SGD");
      if (overrides.nesterov && *kind != OptimizerKind::SGD)
        return notFor("--nesterov", "SGD");
      if (overrides.nesterov) {
        std::optional<double> momentum = overrides.momentum;
        if (!momentum)
          momentum = params->getNumber("momentum");
        std::optional<double> dampening = params->getNumber("dampening");
        if (!momentum || *momentum <= 0 || (dampening && *dampening != 0))
          return makeError("--nesterov needs momentum > 0 (--momentum) and "
                           "dampening 0, as torch.optim.SGD does");
      }
    }
    if (overrides.lr)
      (*params)["lr"] = *overrides.lr;
    if (overrides.weightDecay)
      (*params)["weight_decay"] = *overrides.weightDecay;
    if (overrides.eps)
      (*params)["eps"] = *overrides.eps;
    if (overrides.betas)
      (*params)["betas"] =
          json::Array{overrides.betas->first, overrides.betas->second};
    if (overrides.momentum)
      (*params)["momentum"] = *overrides.momentum;
    if (overrides.nesterov)
      (*params)["nesterov"] = true;
  }
  if (overrides.gradientClipping)
    root["gradient_clipping"] = *overrides.gradientClipping;
  if (overrides.trainBatchSize)
    root["train_batch_size"] = *overrides.trainBatchSize;
  if (overrides.microBatchSize)
    root["train_micro_batch_size_per_gpu"] = *overrides.microBatchSize;
  if (overrides.microbatches) {
    // The micro-batches of a pipelined step are its accumulation steps:
    // two different numbers for them cannot both hold.
    int64_t m = *overrides.microbatches;
    if (overrides.gradientAccumulationSteps &&
        *overrides.gradientAccumulationSteps != m)
      return makeError("--microbatches " + Twine(m) + " conflicts with "
                       "--grad-accum " +
                       Twine(*overrides.gradientAccumulationSteps) +
                       ": the micro-batches of a step are its gradient "
                       "accumulation steps; give one of them");
    if (const json::Value *accum = root.get("gradient_accumulation_steps"))
      if (accum->getAsInteger() != std::optional<int64_t>(m))
        return makeError(prefix + "gradient_accumulation_steps " +
                         describe(*accum) + " conflicts with --microbatches " +
                         Twine(m) +
                         ": the micro-batches of a step are its gradient "
                         "accumulation steps; give one of them");
    root["gradient_accumulation_steps"] = m;
  }
  if (overrides.gradientAccumulationSteps)
    root["gradient_accumulation_steps"] =
        *overrides.gradientAccumulationSteps;
  if (overrides.pipelineStages || overrides.pipelineSchedule ||
      overrides.pipelineChunks) {
    json::Value *section = root.get("pipeline");
    if (!section || !section->getAsObject()) {
      root["pipeline"] = json::Object{};
      section = root.get("pipeline");
    }
    json::Object &pipeline = *section->getAsObject();
    if (overrides.pipelineStages)
      pipeline["stages"] = *overrides.pipelineStages;
    if (overrides.pipelineSchedule)
      pipeline["schedule"] = *overrides.pipelineSchedule;
    if (overrides.pipelineChunks)
      pipeline["chunks"] = *overrides.pipelineChunks;
  }
  if (overrides.tensorParallelSize || overrides.sequenceParallel) {
    json::Value *section = root.get("tensor_parallel");
    if (!section || !section->getAsObject()) {
      root["tensor_parallel"] = json::Object{};
      section = root.get("tensor_parallel");
    }
    if (overrides.tensorParallelSize)
      (*section->getAsObject())["autotp_size"] =
          *overrides.tensorParallelSize;
    if (overrides.sequenceParallel)
      (*section->getAsObject())["sequence_parallel"] =
          *overrides.sequenceParallel;
  }
  if (overrides.stepsPerPrint)
    root["steps_per_print"] = *overrides.stepsPerPrint;
  if (overrides.precision) {
    // The file's bf16 section may go by DeepSpeed's older name.
    StringRef bf16Key =
        !root.get("bf16") && root.get("bfloat16") ? "bfloat16" : "bf16";
    for (auto [key, enabled] :
         {std::pair{StringRef("fp16"), *overrides.precision == Precision::FP16},
          {bf16Key, *overrides.precision == Precision::BF16}}) {
      json::Value *section = root.get(key);
      if (section && section->getAsObject())
        (*section->getAsObject())["enabled"] = enabled;
      else
        root[key] = json::Object{{"enabled", enabled}};
    }
  }
  if (overrides.zeroStage) {
    json::Value *zero = root.get("zero_optimization");
    if (zero && zero->getAsObject())
      (*zero->getAsObject())["stage"] = *overrides.zeroStage;
    else
      root["zero_optimization"] = json::Object{{"stage", *overrides.zeroStage}};
  }
  if (overrides.offloadOptimizer || overrides.nvmePath ||
      overrides.offloadParam) {
    // DeepSpeed's deprecated `"zero_optimization": true` is stage 1.
    json::Value *zero = root.get("zero_optimization");
    if (!zero || !zero->getAsObject()) {
      int64_t stage = zero && zero->getAsBoolean() == std::optional(true);
      if (zero && !zero->getAsBoolean())
        return llvm::Error::success(); // the reader names the bad value
      root["zero_optimization"] = json::Object{{"stage", stage}};
      zero = root.get("zero_optimization");
    }
    json::Object &object = *zero->getAsObject();
    auto sectionOf = [&](StringRef key) -> json::Object & {
      json::Value *section = object.get(key);
      if (!section || !section->getAsObject()) {
        object[key] = json::Object{};
        section = object.get(key);
      }
      return *section->getAsObject();
    };
    if (overrides.offloadOptimizer || overrides.nvmePath) {
      json::Object &offload = sectionOf("offload_optimizer");
      if (overrides.offloadOptimizer)
        offload["device"] = offloadDeviceName(*overrides.offloadOptimizer);
      if (overrides.nvmePath)
        offload["nvme_path"] = *overrides.nvmePath;
    }
    // --nvme-path is the parameters' directory too, where they are
    // offloaded (one file space per rank).
    const json::Value *paramSection = object.get("offload_param");
    if (overrides.offloadParam ||
        (overrides.nvmePath && paramSection && paramSection->getAsObject())) {
      json::Object &offload = sectionOf("offload_param");
      if (overrides.offloadParam)
        offload["device"] = offloadDeviceName(*overrides.offloadParam);
      if (overrides.nvmePath)
        offload["nvme_path"] = *overrides.nvmePath;
    }
  }
  return llvm::Error::success();
}

//===----------------------------------------------------------------------===//
// Interpreting the JSON
//===----------------------------------------------------------------------===//

/// Reads the keys of a config into `config`. The first error stops reading
/// (every reader returns false once one is recorded).
class ConfigReader {
public:
  ConfigReader(std::string prefix, TrainConfig &config)
      : prefix(std::move(prefix)), config(config) {}

  llvm::Error read(const json::Object &root);

private:
  std::string prefix; // "FILE: " or empty
  TrainConfig &config;

public:
  bool dataParallelExplicit = false; // --dp given, not derived from --world
  bool irOnly = false;               // TrainConfigOverrides::irOnly
  bool offloadParamFlag = false;     // --offload-param given

private:
  std::optional<std::string> error;

  bool fail(StringRef path, const Twine &message) {
    if (!error)
      error = prefix + path.str() + ": " + message.str();
    return false;
  }
  void warn(const Twine &message) {
    config.warnings.push_back(prefix + message.str());
  }

  enum class Range { Any, NonNegative, UnitInterval /*[0, 1)*/ };
  bool readNumber(const json::Value &value, StringRef path, Range range,
                  double &out);
  bool readInteger(const json::Value &value, StringRef path, int64_t min,
                   int64_t max, StringRef expected, int64_t &out);
  bool readPositive(const json::Value &value, StringRef path, int64_t &out) {
    return readInteger(value, path, 1, static_cast<int64_t>(kMaxInteger),
                       "a positive integer", out);
  }
  bool readBool(const json::Value &value, StringRef path, bool &out);
  bool readString(const json::Value &value, StringRef path, std::string &out);
  const json::Object *readObject(const json::Value &value, StringRef path,
                                 StringRef expected = "an object");
  bool readBetas(const json::Value &value, StringRef path);

  /// A section `{"type": ..., "params": {...}}`; warns about other keys.
  bool readTypedSection(const json::Value &value, StringRef name,
                        StringRef supported, std::string &type,
                        const json::Object *&params);
  bool readOptimizer(const json::Value *section);
  bool readAdam(const json::Object &params, bool typeIsAdamW);
  bool readSgd(const json::Object &params, bool hasParams);
  bool readLion(const json::Object &params);
  bool readScheduler(const json::Value *section);
  bool readZero(const json::Value &value);
  bool readOffloadDevice(const json::Object &section, StringRef path,
                         OffloadDevice &device, std::string &nvmePath);
  bool readOffloadOptimizer(const json::Value &value);
  bool readOffloadParam(const json::Value &value);
  bool readAio(const json::Value &value);
  bool readPipeline(const json::Value &value);
  bool readTensorParallel(const json::Value &value);
  bool resolveGrid();
  bool readPrecision(const json::Object &root);
  bool readLossScaler(const json::Object &fp16);
  std::optional<bool> readEnabled(const json::Value &value, StringRef key);

  /// Warns about each key of `params` not in `known`.
  void warnUnknownParams(const json::Object &params, StringRef path,
                         llvm::ArrayRef<StringRef> known, StringRef owner) {
    for (const std::string &key : sortedKeys(params))
      if (!llvm::is_contained(known, key))
        warn(path + "." + display(key) + " is not a parameter of " + owner +
             " and is ignored");
  }
  /// Keys accepted for compatibility that change nothing in dsopt.
  bool readNoEffect(const json::Object &params, StringRef path,
                    llvm::ArrayRef<StringRef> keys, StringRef why) {
    for (StringRef key : keys)
      if (const json::Value *value = params.get(key)) {
        bool flag;
        if (!readBool(*value, (path + "." + key).str(), flag))
          return false;
        warn(path + "." + key + " has no effect in dsopt (" + why +
             ") and is ignored");
      }
    return true;
  }
};

bool ConfigReader::readNumber(const json::Value &value, StringRef path,
                              Range range, double &out) {
  const char *expected = range == Range::Any ? "a number"
                         : range == Range::NonNegative
                             ? "a non-negative number"
                             : "a number in [0, 1)";
  std::optional<double> number = value.getAsNumber();
  if (!number || !std::isfinite(*number) ||
      (range != Range::Any && *number < 0) ||
      (range == Range::UnitInterval && *number >= 1))
    return fail(path, Twine("expected ") + expected + ", got " +
                          describe(value));
  out = *number;
  return true;
}

bool ConfigReader::readInteger(const json::Value &value, StringRef path,
                               int64_t min, int64_t max, StringRef expected,
                               int64_t &out) {
  std::optional<double> number = value.getAsNumber();
  // Bounded first: llvm::json's getAsInteger converts doubles near 2^63
  // without a check.
  if (!number || !std::isfinite(*number) || std::fabs(*number) > kMaxInteger ||
      std::floor(*number) != *number)
    return fail(path, "expected " + expected + ", got " + describe(value));
  std::optional<int64_t> integer = value.getAsInteger();
  if (!integer || *integer < min || *integer > max)
    return fail(path, "expected " + expected + ", got " + describe(value));
  out = *integer;
  return true;
}

bool ConfigReader::readBool(const json::Value &value, StringRef path,
                            bool &out) {
  std::optional<bool> flag = value.getAsBoolean();
  if (!flag)
    return fail(path, "expected true or false, got " + describe(value));
  out = *flag;
  return true;
}

bool ConfigReader::readString(const json::Value &value, StringRef path,
                              std::string &out) {
  std::optional<StringRef> text = value.getAsString();
  if (!text)
    return fail(path, "expected a string, got " + describe(value));
  out = text->str();
  return true;
}

const json::Object *ConfigReader::readObject(const json::Value &value,
                                             StringRef path,
                                             StringRef expected) {
  const json::Object *object = value.getAsObject();
  if (!object)
    fail(path, "expected " + expected + ", got " + describe(value));
  return object;
}

bool ConfigReader::readBetas(const json::Value &value, StringRef path) {
  const json::Array *list = value.getAsArray();
  std::optional<double> b1, b2;
  if (list && list->size() == 2) {
    b1 = (*list)[0].getAsNumber();
    b2 = (*list)[1].getAsNumber();
  }
  auto inRange = [](std::optional<double> b) {
    return b && std::isfinite(*b) && *b >= 0 && *b < 1;
  };
  if (!inRange(b1) || !inRange(b2)) {
    std::string got = describe(value);
    if (list) {
      got = "[";
      for (auto [i, element] : llvm::enumerate(*list)) {
        if (i == 4) {
          got += ", ...";
          break;
        }
        got += (i ? ", " : "") + describe(element);
      }
      got += "]";
    }
    return fail(path, "expected a list of two numbers in [0, 1), got " + got);
  }
  config.beta1 = *b1;
  config.beta2 = *b2;
  return true;
}

bool ConfigReader::readTypedSection(const json::Value &value, StringRef name,
                                    StringRef supported, std::string &type,
                                    const json::Object *&params) {
  const json::Object *section =
      readObject(value, name, "an object with \"type\" and \"params\"");
  if (!section)
    return false;
  for (const std::string &key : sortedKeys(*section))
    if (key != "type" && key != "params")
      warn(name + "." + display(key) +
           " is not implemented by dsopt and is ignored");
  const json::Value *typeValue = section->get("type");
  if (!typeValue)
    return fail((name + ".type").str(),
                "missing; dsopt supports " + supported);
  if (!readString(*typeValue, (name + ".type").str(), type))
    return false;
  static const json::Object noParams;
  params = &noParams;
  if (const json::Value *paramsValue = section->get("params")) {
    params = readObject(*paramsValue, (name + ".params").str());
    if (!params)
      return false;
  }
  return true;
}

bool ConfigReader::readOptimizer(const json::Value *section) {
  // No optimizer section: PyTorch's AdamW, the TrainConfig defaults.
  if (!section)
    return true;
  std::string type;
  const json::Object *params;
  if (!readTypedSection(*section, "optimizer", "AdamW, Adam, SGD and Lion",
                        type, params))
    return false;
  config.optimizerName = type;
  std::string lower = StringRef(type).lower();
  if (lower == "adamw" || lower == "adam")
    return readAdam(*params, lower == "adamw");
  if (lower == "sgd")
    return readSgd(*params, section->getAsObject()->get("params"));
  if (lower == "lion")
    return readLion(*params);
  return fail("optimizer.type",
              "\"" + display(type) +
                  "\" is not implemented by dsopt; supported: AdamW, Adam, "
                  "SGD, Lion");
}

bool ConfigReader::readAdam(const json::Object &params, bool typeIsAdamW) {
  // DeepSpeed's FusedAdam: lr 1e-3, betas (0.9, 0.999), eps 1e-8, weight
  // decay 0, adam_w_mode true (so type "Adam" is AdamW unless it is false).
  static const StringRef known[] = {
      "lr",           "betas",         "eps",     "weight_decay",
      "adam_w_mode",  "torch_adam",    "bias_correction", "amsgrad",
      "maximize",     "set_grad_none", "foreach", "fused",
      "capturable",   "differentiable"};
  const StringRef owner = typeIsAdamW ? "AdamW" : "Adam";
  config.lr = 1e-3;
  config.beta1 = 0.9;
  config.beta2 = 0.999;
  config.eps = 1e-8;
  config.weightDecay = 0.0;
  bool adamWMode = true;
  if (const json::Value *value = params.get("adam_w_mode")) {
    if (!readBool(*value, "optimizer.params.adam_w_mode", adamWMode))
      return false;
    if (typeIsAdamW && !adamWMode) {
      warn("optimizer.params.adam_w_mode false has no effect with type "
           "AdamW (DeepSpeed always decouples AdamW's weight decay) and is "
           "ignored");
      adamWMode = true;
    }
  }
  config.optimizer = typeIsAdamW || adamWMode ? OptimizerKind::AdamW
                                              : OptimizerKind::Adam;
  if (const json::Value *value = params.get("torch_adam")) {
    bool torchAdam;
    if (!readBool(*value, "optimizer.params.torch_adam", torchAdam))
      return false;
    // DeepSpeed then builds torch.optim.AdamW, whose default weight decay
    // is 0.01 rather than FusedAdam's 0.
    bool torchDefaults = torchAdam && config.optimizer == OptimizerKind::AdamW;
    if (torchDefaults)
      config.weightDecay = 0.01;
    warn(Twine("optimizer.params.torch_adam selects an implementation, not "
               "the update, and is ignored") +
         (torchDefaults && !params.get("weight_decay")
              ? "; weight_decay defaults to torch.optim.AdamW's 0.01"
              : ""));
  }
  struct Unsupported {
    StringRef key;
    bool implementedValue;
    StringRef what, note;
  };
  static const Unsupported unsupported[] = {
      {"bias_correction", true, "Adam without bias correction", ""},
      {"amsgrad", false, "AMSGrad", "; DeepSpeed's FusedAdam rejects it too"},
      {"maximize", false, "maximizing the objective", ""}};
  for (const Unsupported &entry : unsupported)
    if (const json::Value *value = params.get(entry.key)) {
      std::string path = ("optimizer.params." + entry.key).str();
      bool flag;
      if (!readBool(*value, path, flag))
        return false;
      if (flag != entry.implementedValue)
        return fail(path, Twine(flag ? "true" : "false") + " (" + entry.what +
                              ") is not implemented by dsopt" + entry.note);
    }
  if (!readNoEffect(params, "optimizer.params",
                    {"set_grad_none", "foreach", "fused", "capturable",
                     "differentiable"},
                    "it selects an implementation, not the update"))
    return false;
  if (const json::Value *value = params.get("lr"))
    if (!readNumber(*value, "optimizer.params.lr", Range::NonNegative,
                    config.lr))
      return false;
  if (const json::Value *value = params.get("betas"))
    if (!readBetas(*value, "optimizer.params.betas"))
      return false;
  if (const json::Value *value = params.get("eps"))
    if (!readNumber(*value, "optimizer.params.eps", Range::NonNegative,
                    config.eps))
      return false;
  if (const json::Value *value = params.get("weight_decay"))
    if (!readNumber(*value, "optimizer.params.weight_decay",
                    Range::NonNegative, config.weightDecay))
      return false;
  warnUnknownParams(params, "optimizer.params", known, owner);
  return true;
}

bool ConfigReader::readSgd(const json::Object &params, bool hasParams) {
  // torch.optim.SGD: lr required, momentum 0, dampening 0, weight decay 0
  // (added to the gradient), nesterov false.
  static const StringRef known[] = {"lr",       "momentum",     "dampening",
                                    "nesterov", "weight_decay", "maximize",
                                    "foreach",  "differentiable"};
  config.optimizer = OptimizerKind::SGD;
  config.momentum = 0.0;
  config.dampening = 0.0;
  config.nesterov = false;
  config.weightDecay = 0.0;
  const json::Value *lr = params.get("lr");
  if (!lr)
    return fail(hasParams ? "optimizer.params.lr" : "optimizer.params",
                "SGD needs a learning rate \"lr\" (torch.optim.SGD has no "
                "default)");
  if (!readNumber(*lr, "optimizer.params.lr", Range::NonNegative, config.lr))
    return false;
  if (const json::Value *value = params.get("momentum"))
    if (!readNumber(*value, "optimizer.params.momentum", Range::NonNegative,
                    config.momentum))
      return false;
  if (const json::Value *value = params.get("dampening"))
    if (!readNumber(*value, "optimizer.params.dampening", Range::Any,
                    config.dampening))
      return false;
  if (const json::Value *value = params.get("weight_decay"))
    if (!readNumber(*value, "optimizer.params.weight_decay",
                    Range::NonNegative, config.weightDecay))
      return false;
  if (const json::Value *value = params.get("nesterov"))
    if (!readBool(*value, "optimizer.params.nesterov", config.nesterov))
      return false;
  if (const json::Value *value = params.get("maximize")) {
    bool flag;
    if (!readBool(*value, "optimizer.params.maximize", flag))
      return false;
    if (flag)
      return fail("optimizer.params.maximize",
                  "true (maximizing the objective) is not implemented by "
                  "dsopt");
  }
  if (!readNoEffect(params, "optimizer.params", {"foreach", "differentiable"},
                    "it selects an implementation, not the update"))
    return false;
  if (config.nesterov && (config.momentum <= 0 || config.dampening != 0))
    return fail("optimizer.params.nesterov",
                "Nesterov momentum needs momentum > 0 and dampening 0, as "
                "torch.optim.SGD does (momentum " +
                    formatNumber(config.momentum) + ", dampening " +
                    formatNumber(config.dampening) + ")");
  warnUnknownParams(params, "optimizer.params", known, "SGD");
  return true;
}

bool ConfigReader::readLion(const json::Object &params) {
  // DeepSpeed's FusedLion and DeepSpeedCPULion: lr 1e-3, betas
  // (0.9, 0.999), weight decay 0 (decoupled).
  static const StringRef known[] = {"lr", "betas", "weight_decay",
                                    "set_grad_none", "fp32_optimizer_states"};
  config.optimizer = OptimizerKind::Lion;
  config.lr = 1e-3;
  config.beta1 = 0.9;
  config.beta2 = 0.999;
  config.weightDecay = 0.0;
  if (!readNoEffect(params, "optimizer.params",
                    {"set_grad_none", "fp32_optimizer_states"},
                    "optimizer state is always fp32"))
    return false;
  if (const json::Value *value = params.get("lr"))
    if (!readNumber(*value, "optimizer.params.lr", Range::NonNegative,
                    config.lr))
      return false;
  if (const json::Value *value = params.get("betas"))
    if (!readBetas(*value, "optimizer.params.betas"))
      return false;
  if (const json::Value *value = params.get("weight_decay"))
    if (!readNumber(*value, "optimizer.params.weight_decay",
                    Range::NonNegative, config.weightDecay))
      return false;
  warnUnknownParams(params, "optimizer.params", known, "Lion");
  return true;
}

bool ConfigReader::readScheduler(const json::Value *section) {
  config.schedule = ScheduleKind::Constant;
  if (!section)
    return true;
  static const StringRef supported = "WarmupLR, WarmupDecayLR, WarmupCosineLR";
  std::string type;
  const json::Object *params;
  if (!readTypedSection(*section, "scheduler",
                        "WarmupLR, WarmupDecayLR and WarmupCosineLR", type,
                        params))
    return false;
  std::string lower = StringRef(type).lower();
  if (lower == "warmuplr")
    config.schedule = ScheduleKind::WarmupLR;
  else if (lower == "warmupdecaylr")
    config.schedule = ScheduleKind::WarmupDecayLR;
  else if (lower == "warmupcosinelr")
    config.schedule = ScheduleKind::WarmupCosineLR;
  else
    return fail("scheduler.type", "\"" + display(type) +
                                      "\" is not implemented by dsopt; "
                                      "supported: " +
                                      supported);
  StringRef owner = scheduleKindName(config.schedule);
  bool cosine = config.schedule == ScheduleKind::WarmupCosineLR;
  bool decays = config.schedule != ScheduleKind::WarmupLR;

  // DeepSpeed's lr_schedules.py: warmup from warmup_min_lr to warmup_max_lr
  // (WarmupLR: the optimizer's lr; WarmupDecayLR: 0.001) over
  // warmup_num_steps (1000) steps, "log" warmup by default.
  config.warmupMinLr = 0.0;
  config.warmupMaxLr =
      config.schedule == ScheduleKind::WarmupLR ? config.lr : 1e-3;
  config.warmupMinRatio = 0.0;
  config.cosMinRatio = 1e-4;
  config.warmupLinear = false;
  config.totalNumSteps = 0;
  int64_t warmupSteps = 1000;
  std::vector<StringRef> known = {"warmup_num_steps", "warmup_type",
                                  "last_batch_iteration"};
  if (decays)
    known.push_back("total_num_steps");
  if (cosine) {
    known.push_back("warmup_min_ratio");
    known.push_back("cos_min_ratio");
    if (const json::Value *value = params->get("warmup_min_ratio"))
      if (!readNumber(*value, "scheduler.params.warmup_min_ratio",
                      Range::NonNegative, config.warmupMinRatio))
        return false;
    if (const json::Value *value = params->get("cos_min_ratio"))
      if (!readNumber(*value, "scheduler.params.cos_min_ratio",
                      Range::NonNegative, config.cosMinRatio))
        return false;
  } else {
    known.push_back("warmup_min_lr");
    known.push_back("warmup_max_lr");
    if (const json::Value *value = params->get("warmup_min_lr"))
      if (!readNumber(*value, "scheduler.params.warmup_min_lr",
                      Range::NonNegative, config.warmupMinLr))
        return false;
    if (const json::Value *value = params->get("warmup_max_lr"))
      if (!readNumber(*value, "scheduler.params.warmup_max_lr",
                      Range::NonNegative, config.warmupMaxLr))
        return false;
  }
  if (const json::Value *value = params->get("warmup_num_steps"))
    if (!readPositive(*value, "scheduler.params.warmup_num_steps",
                      warmupSteps))
      return false;
  // DeepSpeed warms up over at least 2 steps (its log warmup divides by
  // log(warmup_num_steps)).
  config.warmupNumSteps = std::max<int64_t>(2, warmupSteps);
  if (const json::Value *value = params->get("warmup_type")) {
    std::string warmupType;
    if (!readString(*value, "scheduler.params.warmup_type", warmupType))
      return false;
    // DeepSpeed falls back to "log" with a warning; a misspelt "linear"
    // would then silently train with another schedule.
    if (warmupType != "log" && warmupType != "linear")
      return fail("scheduler.params.warmup_type",
                  "expected \"log\" or \"linear\", got " + describe(*value));
    config.warmupLinear = warmupType == "linear";
  }
  if (const json::Value *value = params->get("last_batch_iteration")) {
    int64_t last;
    if (!readInteger(*value, "scheduler.params.last_batch_iteration", -1,
                     static_cast<int64_t>(kMaxInteger),
                     "an integer >= -1", last))
      return false;
    if (last != -1)
      warn("scheduler.params.last_batch_iteration is ignored: dsopt's "
           "schedule starts at step 0");
  }
  if (decays) {
    const json::Value *value = params->get("total_num_steps");
    if (!value)
      return fail("scheduler.params.total_num_steps",
                  "required by " + owner +
                      " (the step at which the learning rate reaches its "
                      "end)");
    if (!readPositive(*value, "scheduler.params.total_num_steps",
                      config.totalNumSteps))
      return false;
    if (config.totalNumSteps < config.warmupNumSteps)
      warn("scheduler.params.total_num_steps " +
           Twine(config.totalNumSteps) + " is less than warmup_num_steps " +
           Twine(config.warmupNumSteps) + ": the learning rate " +
           (cosine ? "drops to its minimum" : "decays to 0") +
           " right after the warmup");
  }
  warnUnknownParams(*params, "scheduler.params", known, owner);
  return true;
}

bool ConfigReader::readPipeline(const json::Value &value) {
  const json::Object *section = readObject(value, "pipeline");
  if (!section)
    return false;
  for (const std::string &key : sortedKeys(*section)) {
    const json::Value *entry = section->get(key);
    std::string path = "pipeline." + display(key);
    if (key == "stages") {
      // DeepSpeed's default "auto" takes the stages from the model
      // (PipelineModule); here --pp gives them, else 1.
      if (entry->getAsString() == std::optional<StringRef>("auto"))
        continue;
      if (!readInteger(*entry, path, 1, int64_t(1) << 20,
                       "a positive integer or \"auto\"",
                       config.pipelineStages))
        return false;
    } else if (key == "partition_method" || key == "partition") {
      // DeepSpeed's PipelineModule(partition_method=...): "parameters"
      // balances parameter counts, "uniform" layer counts; dsopt balances
      // FLOPs by default ("flops"; DeepSpeed's config calls its default
      // "best").
      std::string method;
      if (!readString(*entry, path, method))
        return false;
      std::string lower = StringRef(method).lower();
      if (lower == "parameters" || lower == "uniform" || lower == "flops")
        config.partitionMethod = lower;
      else if (lower == "best")
        config.partitionMethod = "flops";
      else if (StringRef(lower).starts_with("type:"))
        return fail(path, "\"" + display(method) +
                              "\" is not implemented: dsopt cuts the "
                              "compiled graph, which has no layer classes; "
                              "use \"parameters\", \"uniform\" or "
                              "\"flops\"");
      else
        return fail(path, "expected \"parameters\", \"uniform\" or "
                          "\"flops\", got \"" + display(method) + "\"");
    } else if (key == "schedule") {
      // dsopt's own key (DeepSpeed runs 1F1B only).
      std::string name;
      if (!readString(*entry, path, name))
        return false;
      if (name != "gpipe" && name != "1f1b" && name != "interleaved" &&
          name != "zb-h1")
        return fail(path, "expected \"gpipe\", \"1f1b\", \"interleaved\" "
                          "or \"zb-h1\", got \"" + display(name) + "\"");
      config.pipelineSchedule = name;
    } else if (key == "chunks") {
      if (!readPositive(*entry, path, config.pipelineChunks))
        return false;
    } else {
      warn(path + " is not implemented by dsopt and is ignored");
    }
  }
  return true;
}

/// DeepSpeed's `tensor_parallel` section: `autotp_size`, the ranks of the
/// tp axis (DeepSpeed's AutoTP; dsopt finds the layout from the graph).
bool ConfigReader::readTensorParallel(const json::Value &value) {
  const json::Object *section = readObject(value, "tensor_parallel");
  if (!section)
    return false;
  for (const std::string &key : sortedKeys(*section)) {
    const json::Value *entry = section->get(key);
    std::string path = "tensor_parallel." + display(key);
    if (key == "autotp_size" || key == "tp_size") {
      if (!readInteger(*entry, path, 1, int64_t(1) << 20,
                       "a positive integer", config.tensorParallelSize))
        return false;
    } else if (key == "sequence_parallel") {
      // Megatron's name; DeepSpeed's section has no such key (its
      // sequence_parallel_size is Ulysses, another technique).
      if (!readBool(*entry, path, config.sequenceParallel))
        return false;
    } else {
      warn(path + " is not implemented by dsopt and is ignored");
    }
  }
  // As Megatron, which turns it off without tensor parallelism.
  if (config.sequenceParallel && config.tensorParallelSize == 1)
    warn("tensor_parallel.sequence_parallel has no effect with "
         "tensor_parallel.autotp_size 1 (--tp): there is no tp axis to "
         "split the sequence over");
  return true;
}

/// The grid pp x dp x tp against --world.
bool ConfigReader::resolveGrid() {
  int64_t pp = config.pipelineStages, tp = config.tensorParallelSize;
  int64_t world = config.worldSize;
  if (world == 0)
    return true;
  std::string others =
      "pp=" + std::to_string(pp) + ", tp=" + std::to_string(tp);
  if (dataParallelExplicit) {
    if (world != config.dataParallelSize * pp * tp) {
      error = "--world " + std::to_string(world) +
              " cannot be filled by the grid dp=" +
              std::to_string(config.dataParallelSize) + " (" + others +
              "): the world size must be dp * pp * tp";
      return false;
    }
    return true;
  }
  if (world % (pp * tp) != 0) {
    error = "--world " + std::to_string(world) +
            " cannot be filled by the grid with pp=" + std::to_string(pp) +
            " (tp=" + std::to_string(tp) + ")" +
            ": the world size must be dp * pp * tp, and no "
            "data-parallel size dp gives " +
            std::to_string(world);
    return false;
  }
  config.dataParallelSize = world / (pp * tp);
  return true;
}

bool ConfigReader::readZero(const json::Value &value) {
  // DeepSpeed's deprecated form `"zero_optimization": true` is stage 1.
  if (std::optional<bool> flag = value.getAsBoolean()) {
    config.zeroStage = *flag ? 1 : 0;
  } else {
    const json::Object *zero =
        readObject(value, "zero_optimization", "an object or true/false");
    if (!zero)
      return false;
    if (const json::Value *stage = zero->get("stage"))
      if (!readInteger(*stage, "zero_optimization.stage", 0, 3,
                       "0, 1, 2 or 3", config.zeroStage))
        return false;
    struct Size {
      StringRef key;
      int64_t min;
      int64_t &out;
    } sizes[] = {
        {"stage3_param_persistence_threshold", 0,
         config.paramPersistenceThreshold},
        {"reduce_bucket_size", 1, config.reduceBucketSize},
        {"allgather_bucket_size", 1, config.allgatherBucketSize},
        {"stage3_prefetch_bucket_size", 0, config.prefetchBucketSize}};
    for (Size &size : sizes)
      if (const json::Value *value = zero->get(size.key))
        if (!readInteger(*value, ("zero_optimization." + size.key).str(),
                         size.min, int64_t(1) << 62,
                         size.min ? "a positive integer"
                                  : "a non-negative integer",
                         size.out))
          return false;
    // Keys that describe what dsopt always does.
    static constexpr llvm::StringLiteral always[] = {
        "overlap_comm", "contiguous_gradients", "reduce_scatter",
        "allgather_partitions"};
    if (const json::Value *offload = zero->get("offload_optimizer"))
      if (!readOffloadOptimizer(*offload))
        return false;
    if (const json::Value *offload = zero->get("offload_param"))
      if (!readOffloadParam(*offload))
        return false;
    for (const std::string &key : sortedKeys(*zero)) {
      if (key == "stage" || key == "offload_optimizer" ||
          key == "offload_param" ||
          llvm::any_of(sizes, [&](const Size &s) { return s.key == key; }))
        continue;
      if (llvm::is_contained(always, key)) {
        const json::Value *value = zero->get(key);
        if (value->getAsBoolean() != std::optional<bool>(true))
          warn("zero_optimization." + display(key) +
               ": dsopt always overlaps communication and uses contiguous "
               "buckets, reduce-scatter and all-gather; the value is ignored");
        continue;
      }
      warn("zero_optimization." + display(key) +
           " is not implemented by dsopt and is ignored");
    }
  }
  // DeepSpeed offloads parameters with stage 3 only: elsewhere every rank
  // keeps its whole parameters on the device for the forward pass.
  if (config.offloadParam.device != OffloadDevice::None &&
      config.zeroStage != 3)
    return fail(offloadParamFlag ? "--offload-param"
                                 : "zero_optimization.offload_param.device",
                "\"" + offloadDeviceName(config.offloadParam.device) +
                    "\" needs ZeRO stage 3 (parameters are offloaded only "
                    "when they are partitioned), but the stage is " +
                    Twine(config.zeroStage));
  if (config.zeroStage > 0 && config.dataParallelSize == 1)
    warn("zero_optimization.stage " + Twine(config.zeroStage) +
         ": a single data-parallel rank has nothing to shard over; the "
         "model trains unsharded");
  return true;
}

bool ConfigReader::readOffloadDevice(const json::Object &section,
                                     StringRef path, OffloadDevice &device,
                                     std::string &nvmePath) {
  if (const json::Value *value = section.get("device")) {
    std::string name;
    std::string key = (path + ".device").str();
    if (!readString(*value, key, name))
      return false;
    std::optional<OffloadDevice> parsed = parseOffloadDevice(name);
    if (!parsed)
      return fail(key, "expected \"none\", \"cpu\" or \"nvme\", got \"" +
                           display(name) + "\"");
    device = *parsed;
  }
  if (const json::Value *value = section.get("nvme_path")) {
    std::string key = (path + ".nvme_path").str();
    // DeepSpeed's null is no path.
    if (value->kind() != json::Value::Null) {
      if (!readString(*value, key, nvmePath))
        return false;
      if (nvmePath.empty())
        return fail(key, "expected the directory of the NVMe files, got \"\"");
      if (nvmePath.find('\0') != std::string::npos)
        return fail(key, "the path contains a NUL character");
    }
  }
  if (device == OffloadDevice::NVMe && nvmePath.empty())
    return fail((path + ".nvme_path").str(),
                "missing; device \"nvme\" keeps the state in files under "
                "this directory (or give --nvme-path)");
  return true;
}

bool ConfigReader::readOffloadOptimizer(const json::Value &value) {
  static constexpr llvm::StringLiteral path = "zero_optimization.offload_optimizer";
  // DeepSpeed's null is the default: no offload.
  if (value.kind() == json::Value::Null)
    return true;
  const json::Object *section = readObject(value, path);
  if (!section)
    return false;
  OffloadOptimizerConfig &offload = config.offloadOptimizer;
  if (!readOffloadDevice(*section, path, offload.device, offload.nvmePath))
    return false;
  if (const json::Value *v = section->get("pin_memory"))
    if (!readBool(*v, (path + ".pin_memory").str(), offload.pinMemory))
      return false;
  if (const json::Value *v = section->get("buffer_count"))
    if (!readInteger(*v, (path + ".buffer_count").str(), 0, int64_t(1) << 30,
                     "a non-negative integer", offload.bufferCount))
      return false;
  if (const json::Value *v = section->get("ratio")) {
    std::string key = (path + ".ratio").str();
    if (!readNumber(*v, key, Range::NonNegative, offload.ratio))
      return false;
    if (offload.ratio > 1)
      return fail(key, "expected a fraction in [0, 1], got " + describe(*v));
  }
  if (!readNoEffect(*section, path,
                    {"pipeline_read", "pipeline_write", "fast_init"},
                    "the offload pass schedules the transfers itself"))
    return false;
  static constexpr llvm::StringLiteral known[] = {
      "device",        "nvme_path",      "pin_memory", "buffer_count",
      "ratio",         "pipeline_read",  "pipeline_write", "fast_init"};
  for (const std::string &key : sortedKeys(*section))
    if (!llvm::is_contained(known, key))
      warn(path + "." + display(key) +
           " is not implemented by dsopt and is ignored");
  return true;
}

bool ConfigReader::readOffloadParam(const json::Value &value) {
  static constexpr llvm::StringLiteral path = "zero_optimization.offload_param";
  if (value.kind() == json::Value::Null)
    return true;
  const json::Object *section = readObject(value, path);
  if (!section)
    return false;
  OffloadParamConfig &offload = config.offloadParam;
  if (!readOffloadDevice(*section, path, offload.device, offload.nvmePath))
    return false;
  if (const json::Value *v = section->get("pin_memory"))
    if (!readBool(*v, (path + ".pin_memory").str(), offload.pinMemory))
      return false;
  struct Count {
    StringRef key;
    int64_t &out;
  } counts[] = {{"buffer_count", offload.bufferCount},
                {"buffer_size", offload.bufferSize},
                {"max_in_cpu", offload.maxInCpu}};
  for (Count &count : counts)
    if (const json::Value *v = section->get(count.key))
      if (!readInteger(*v, (path + "." + count.key).str(), 0,
                       int64_t(1) << 62, "a non-negative integer", count.out))
        return false;
  for (const std::string &key : sortedKeys(*section))
    if (key != "device" && key != "nvme_path" && key != "pin_memory" &&
        !llvm::any_of(counts, [&](const Count &c) { return c.key == key; }))
      warn(path + "." + display(key) +
           " is not implemented by dsopt and is ignored");
  return true;
}

bool ConfigReader::readAio(const json::Value &value) {
  const json::Object *section = readObject(value, "aio");
  if (!section)
    return false;
  AioConfig &aio = config.aio;
  // The runtime's I/O engine's bounds (dsrt::check_file_io_options): an
  // io_uring holds at most 4096 requests; one ring per thread.
  struct Count {
    StringRef key;
    int64_t &out;
    int64_t max;
    const char *expected;
  } counts[] = {
      {"block_size", aio.blockSize, int64_t(1) << 30,
       "a positive integer of at most 2^30"},
      {"queue_depth", aio.queueDepth, 4096, "an integer in [1, 4096]"},
      {"intra_op_parallelism", aio.intraOpParallelism, 64,
       "an integer in [1, 64]"}};
  for (Count &count : counts)
    if (const json::Value *v = section->get(count.key))
      if (!readInteger(*v, ("aio." + count.key).str(), 1, count.max,
                       count.expected, count.out))
        return false;
  // O_DIRECT transfers whole, aligned blocks.
  if (aio.blockSize % 4096 != 0)
    return fail("aio.block_size",
                "expected a multiple of 4096 bytes (direct I/O moves whole "
                "aligned blocks), got " + Twine(aio.blockSize));
  // DeepSpeed's older name of intra_op_parallelism.
  if (const json::Value *v = section->get("thread_count")) {
    if (section->get("intra_op_parallelism"))
      return fail("aio.thread_count",
                  "give intra_op_parallelism or its older name thread_count, "
                  "not both");
    if (!readInteger(*v, "aio.thread_count", 1, 64, "an integer in [1, 64]",
                     aio.intraOpParallelism))
      return false;
  }
  struct Flag {
    StringRef key;
    bool &out;
  } flags[] = {{"single_submit", aio.singleSubmit},
               {"overlap_events", aio.overlapEvents}};
  for (Flag &flag : flags)
    if (const json::Value *v = section->get(flag.key))
      if (!readBool(*v, ("aio." + flag.key).str(), flag.out))
        return false;
  if (const json::Value *v = section->get("use_gds")) {
    bool gds = false;
    if (!readBool(*v, "aio.use_gds", gds))
      return false;
    if (gds)
      return fail("aio.use_gds", "GPUDirect Storage is not implemented; "
                                 "dsopt reads NVMe into pinned host memory");
  }
  for (const std::string &key : sortedKeys(*section))
    if (key != "thread_count" && key != "use_gds" &&
        !llvm::any_of(counts, [&](const Count &c) { return c.key == key; }) &&
        !llvm::any_of(flags, [&](const Flag &f) { return f.key == key; }))
      warn("aio." + display(key) + " is not implemented by dsopt and is "
                                   "ignored");
  return true;
}

std::optional<bool> ConfigReader::readEnabled(const json::Value &value,
                                              StringRef key) {
  const json::Object *section =
      readObject(value, key, "an object with \"enabled\"");
  if (!section)
    return std::nullopt;
  bool enabled = false;
  if (const json::Value *flag = section->get("enabled"))
    if (!readBool(*flag, (key + ".enabled").str(), enabled))
      return std::nullopt;
  return enabled;
}

bool ConfigReader::readLossScaler(const json::Object &fp16) {
  LossScalerConfig &scaler = config.lossScaler;
  if (const json::Value *value = fp16.get("loss_scale"))
    if (!readNumber(*value, "fp16.loss_scale", Range::NonNegative,
                    scaler.lossScale))
      return false;
  // 2^126 is the largest power of two below float32's largest value.
  if (const json::Value *value = fp16.get("initial_scale_power"))
    if (!readInteger(*value, "fp16.initial_scale_power", 0, 126,
                     "an integer in [0, 126]", scaler.initialScalePower))
      return false;
  if (const json::Value *value = fp16.get("loss_scale_window"))
    if (!readPositive(*value, "fp16.loss_scale_window",
                      scaler.lossScaleWindow))
      return false;
  if (const json::Value *value = fp16.get("hysteresis"))
    if (!readPositive(*value, "fp16.hysteresis", scaler.hysteresis))
      return false;
  if (const json::Value *value = fp16.get("consecutive_hysteresis"))
    if (!readBool(*value, "fp16.consecutive_hysteresis",
                  scaler.consecutiveHysteresis))
      return false;
  if (const json::Value *value = fp16.get("min_loss_scale")) {
    if (!readNumber(*value, "fp16.min_loss_scale", Range::NonNegative,
                    scaler.minLossScale))
      return false;
    if (scaler.minLossScale <= 0)
      return fail("fp16.min_loss_scale",
                  "expected a positive number, got " + describe(*value));
  }
  if (scaler.lossScale == 0 &&
      std::ldexp(1.0, static_cast<int>(scaler.initialScalePower)) <
          scaler.minLossScale)
    return fail("fp16.initial_scale_power",
                "the initial scale 2^" + Twine(scaler.initialScalePower) +
                    " is below min_loss_scale " +
                    llvm::formatv("{0}", scaler.minLossScale).str());
  static constexpr llvm::StringLiteral scalerKeys[] = {
      "enabled",        "loss_scale",     "initial_scale_power",
      "loss_scale_window", "hysteresis",  "consecutive_hysteresis",
      "min_loss_scale"};
  for (const std::string &key : sortedKeys(fp16))
    if (!llvm::is_contained(scalerKeys, key))
      warn("fp16." + display(key) + " is not implemented by dsopt and is "
                                    "ignored");
  return true;
}

bool ConfigReader::readPrecision(const json::Object &root) {
  bool fp16 = false, bf16 = false;
  StringRef bf16Key = "bf16";
  if (const json::Value *value = root.get("fp16")) {
    std::optional<bool> enabled = readEnabled(*value, "fp16");
    if (!enabled || !readLossScaler(*value->getAsObject()))
      return false;
    fp16 = *enabled;
  }
  const json::Value *bf16Value = root.get("bf16");
  if (!bf16Value) {
    bf16Key = "bfloat16"; // DeepSpeed's older name
    bf16Value = root.get("bfloat16");
  } else if (root.get("bfloat16")) {
    warn("bfloat16 is ignored: bf16 is given, and DeepSpeed reads bf16 "
         "first too");
  }
  if (bf16Value) {
    std::optional<bool> enabled = readEnabled(*bf16Value, bf16Key);
    if (!enabled)
      return false;
    bf16 = *enabled;
    for (const std::string &key : sortedKeys(*bf16Value->getAsObject()))
      if (key != "enabled")
        warn(bf16Key + "." + display(key) +
             " is not implemented by dsopt and is ignored");
  }
  if (fp16 && bf16)
    return fail("fp16.enabled", ("fp16 and " + bf16Key +
                                 " cannot both be enabled (DeepSpeed forbids "
                                 "it too)")
                                    .str());
  config.precision = fp16   ? Precision::FP16
                     : bf16 ? Precision::BF16
                            : Precision::FP32;
  if (const json::Value *value = root.get("data_types")) {
    const json::Object *types = readObject(*value, "data_types");
    if (!types)
      return false;
    for (const std::string &key : sortedKeys(*types))
      if (key != "grad_accum_dtype")
        warn("data_types." + display(key) +
             " is not implemented by dsopt and is ignored");
    if (const json::Value *dtype = types->get("grad_accum_dtype")) {
      std::string name;
      if (!readString(*dtype, "data_types.grad_accum_dtype", name))
        return false;
      std::optional<Precision> accum = parsePrecision(name);
      if (!accum)
        return fail("data_types.grad_accum_dtype",
                    "expected \"fp32\", \"bf16\" or \"fp16\", got " +
                        describe(*dtype));
      // Gradients of 16-bit training accumulate in its own type or in
      // fp32; other combinations have no meaning.
      if (*accum != Precision::FP32 && *accum != config.precision)
        return fail("data_types.grad_accum_dtype",
                    ("\"" + precisionName(*accum) + "\" accumulation needs " +
                     precisionName(*accum) + " training, but the model trains in " +
                     precisionName(config.precision))
                        .str());
      config.gradAccumDtype = accum;
    }
  }
  return true;
}

llvm::Error ConfigReader::read(const json::Object &root) {
  static const StringRef known[] = {"optimizer",
                                    "scheduler",
                                    "gradient_clipping",
                                    "train_batch_size",
                                    "train_micro_batch_size_per_gpu",
                                    "gradient_accumulation_steps",
                                    "zero_optimization",
                                    "fp16",
                                    "bf16",
                                    "bfloat16",
                                    "data_types",
                                    "steps_per_print",
                                    "pipeline",
                                    "aio",
                                    "tensor_parallel"};
  for (const std::string &key : sortedKeys(root))
    if (!llvm::is_contained(known, key))
      warn(display(key) + " is not implemented by dsopt and is ignored");

  auto positive = [&](StringRef key, int64_t &out) {
    const json::Value *value = root.get(key);
    return !value || readPositive(*value, key, out);
  };
  const json::Value *clipping = root.get("gradient_clipping");
  bool ok = readOptimizer(root.get("optimizer")) &&
            readScheduler(root.get("scheduler")) &&
            (!clipping || readNumber(*clipping, "gradient_clipping",
                                     Range::NonNegative,
                                     config.gradientClipping)) &&
            positive("train_batch_size", config.trainBatchSize) &&
            positive("train_micro_batch_size_per_gpu",
                     config.microBatchSize) &&
            positive("gradient_accumulation_steps",
                     config.gradientAccumulationSteps) &&
            (!root.get("pipeline") || readPipeline(*root.get("pipeline"))) &&
            (!root.get("tensor_parallel") ||
             readTensorParallel(*root.get("tensor_parallel"))) &&
            resolveGrid() &&
            (!root.get("zero_optimization") ||
             readZero(*root.get("zero_optimization"))) &&
            (!root.get("aio") || readAio(*root.get("aio"))) &&
            readPrecision(root) &&
            positive("steps_per_print", config.stepsPerPrint);
  if (!ok)
    return makeError(error ? *error : prefix + "invalid config");
  return llvm::Error::success();
}

} // namespace

//===----------------------------------------------------------------------===//
// Entry points
//===----------------------------------------------------------------------===//

llvm::Expected<TrainConfig>
parseTrainConfig(StringRef text, StringRef fileNameForMessages,
                 const TrainConfigOverrides &overrides) {
  std::string prefix =
      fileNameForMessages.empty() ? "" : fileNameForMessages.str() + ": ";
  llvm::Expected<json::Object> root = parseJsonObject(text, prefix);
  if (!root)
    return root.takeError();
  TrainConfig config;
  if (overrides.dataParallelSize)
    config.dataParallelSize = *overrides.dataParallelSize;
  if (overrides.worldSize)
    config.worldSize = *overrides.worldSize;
  if (llvm::Error error =
          applyOverrides(*root, overrides, prefix, config.warnings))
    return error;
  ConfigReader reader(prefix, config);
  reader.dataParallelExplicit = overrides.dataParallelSize.has_value();
  reader.irOnly = overrides.irOnly;
  reader.offloadParamFlag = overrides.offloadParam.has_value();
  if (llvm::Error error = reader.read(*root))
    return error;
  return config;
}

llvm::Expected<TrainConfig> parseTrainConfig(StringRef text,
                                             StringRef fileNameForMessages) {
  return parseTrainConfig(text, fileNameForMessages, TrainConfigOverrides());
}

llvm::Expected<TrainConfig>
loadTrainConfig(StringRef path, const TrainConfigOverrides &overrides) {
  auto fileError = [&](const Twine &message) {
    return makeError(path + ": " + message);
  };
  llvm::sys::fs::file_status status;
  if (std::error_code ec = llvm::sys::fs::status(path, status))
    return fileError("cannot read the config file: " + ec.message());
  if (llvm::sys::fs::is_directory(status))
    return fileError("is a directory, not a DeepSpeed config file");
  // Devices and pipes have no size to check up front: /dev/zero would be
  // read until memory runs out, and a FIFO without a writer blocks forever.
  if (!llvm::sys::fs::is_regular_file(status))
    return fileError("is not a regular file (a device, pipe or socket); "
                     "dsopt reads configs from regular files");
  if (status.getSize() > kMaxConfigBytes)
    return fileError("is " + Twine(status.getSize()) +
                     " bytes; a DeepSpeed config is a small JSON file (at "
                     "most 16 MiB)");
  auto buffer = llvm::MemoryBuffer::getFile(path, /*IsText=*/false,
                                            /*RequiresNullTerminator=*/false);
  if (!buffer)
    return fileError("cannot read the config file: " +
                     buffer.getError().message());
  return parseTrainConfig((*buffer)->getBuffer(), path, overrides);
}

llvm::Expected<TrainConfig> loadTrainConfig(StringRef path) {
  return loadTrainConfig(path, TrainConfigOverrides());
}

llvm::Error resolveBatch(TrainConfig &config,
                         std::optional<int64_t> modelBatch) {
  // 0: unknown (an empty batch fixes nothing either).
  int64_t model = modelBatch && *modelBatch > 0 ? *modelBatch : 0;
  int64_t dp = config.dataParallelSize;
  if (dp < 1)
    return makeError("the data-parallel size must be a positive integer, "
                     "got " +
                     Twine(dp));
  int64_t &train = config.trainBatchSize;
  int64_t &micro = config.microBatchSize;
  int64_t &accum = config.gradientAccumulationSteps;
  if (train < 0 || micro < 0 || accum < 0)
    return makeError("batch sizes must be positive integers");
  bool haveTrain = train > 0, haveMicro = micro > 0, haveAccum = accum > 0;
  bool derivedTrain = false, derivedMicro = false, derivedAccum = false;
  auto product = [](int64_t a, int64_t b, int64_t c,
                    int64_t &out) -> bool { // false on overflow
    int64_t ab;
    return !llvm::MulOverflow(a, b, ab) && !llvm::MulOverflow(ab, c, out);
  };
  auto overflow = [&]() {
    return makeError("train_micro_batch_size_per_gpu " + Twine(micro) +
                     " * gradient_accumulation_steps " + Twine(accum) +
                     " * data-parallel size " + Twine(dp) +
                     " does not fit in 64 bits");
  };

  // DeepSpeed's _set_batch_related_parameters, in its order.
  if (haveTrain && haveMicro && haveAccum) {
  } else if (haveTrain && haveMicro) {
    accum = train / micro / dp;
    derivedAccum = true;
  } else if (haveTrain && haveAccum) {
    micro = train / dp / accum;
    derivedMicro = true;
  } else if (haveMicro && haveAccum) {
    if (!product(micro, accum, dp, train))
      return overflow();
    derivedTrain = true;
  } else if (haveTrain) {
    accum = 1;
    micro = train / dp;
    derivedAccum = derivedMicro = true;
  } else if (haveMicro) {
    accum = 1;
    if (!product(micro, accum, dp, train))
      return overflow();
    derivedTrain = derivedAccum = true;
  } else {
    // DeepSpeed needs train_batch_size or train_micro_batch_size_per_gpu;
    // dsopt knows the model's batch, which is the micro batch.
    if (model == 0)
      return makeError(
          "the batch size is unknown: the model's inputs do not fix a batch "
          "(no inputs, or leading axes that differ); give "
          "train_micro_batch_size_per_gpu or train_batch_size (--micro-batch, "
          "--train-batch)");
    micro = model;
    derivedMicro = true;
    if (!haveAccum) {
      accum = 1;
      derivedAccum = true;
    }
    if (!product(micro, accum, dp, train))
      return overflow();
    derivedTrain = true;
  }

  auto show = [](StringRef name, int64_t value, bool derived) {
    return (name + " " + Twine(value) + (derived ? " (derived)" : "")).str();
  };
  if (micro < 1)
    return makeError("train_batch_size " + Twine(train) +
                     " is smaller than " +
                     (haveAccum ? "gradient_accumulation_steps " +
                                      std::to_string(accum) + " * "
                                : std::string()) +
                     "data-parallel size " + Twine(dp) +
                     ": train_micro_batch_size_per_gpu would be 0");
  if (accum < 1)
    return makeError("train_batch_size " + Twine(train) +
                     " is smaller than train_micro_batch_size_per_gpu " +
                     Twine(micro) + " * data-parallel size " + Twine(dp) +
                     ": gradient_accumulation_steps would be 0");
  int64_t expected;
  if (!product(micro, accum, dp, expected))
    return overflow();
  if (expected != train)
    return makeError(
        "the batch sizes contradict each other: DeepSpeed requires "
        "train_batch_size = train_micro_batch_size_per_gpu * "
        "gradient_accumulation_steps * data-parallel size, but " +
        show("train_batch_size", train, derivedTrain) + " != " +
        show("train_micro_batch_size_per_gpu", micro, derivedMicro) + " * " +
        show("gradient_accumulation_steps", accum, derivedAccum) +
        " * data-parallel size " + Twine(dp) + " = " + Twine(expected));
  if (model > 0 && micro != model) {
    std::string hint;
    int64_t perStep;
    if (haveTrain && !haveMicro && !haveAccum &&
        !llvm::MulOverflow(model, dp, perStep) && train % perStep == 0)
      hint = "; gradient_accumulation_steps " + std::to_string(train / perStep) +
             " would fit train_batch_size " + std::to_string(train);
    return makeError(
        show("train_micro_batch_size_per_gpu", micro, derivedMicro) +
        " differs from the model's batch " + Twine(model) +
        " (the leading axis of its inputs): one step of the compiled model "
        "runs one micro-batch, so they must agree (export the model with "
        "batch " +
        Twine(micro) + ", or give --batch " + Twine(micro) +
        " when its batch axis is symbolic)" + hint);
  }
  return llvm::Error::success();
}

std::string toJson(const TrainConfig &config) {
  std::string text;
  llvm::raw_string_ostream os(text);
  json::OStream out(os, /*IndentSize=*/2);
  auto number = [&](StringRef key, double value) {
    out.attributeBegin(key);
    out.rawValue(formatNumber(value));
    out.attributeEnd();
  };
  auto integer = [&](StringRef key, int64_t value) {
    if (value > 0) // unresolved batch sizes are left out
      out.attribute(key, value);
  };
  auto betas = [&]() {
    out.attributeArray("betas", [&] {
      out.rawValue(formatNumber(config.beta1));
      out.rawValue(formatNumber(config.beta2));
    });
  };
  bool adam = config.optimizer == OptimizerKind::AdamW ||
              config.optimizer == OptimizerKind::Adam;
  out.object([&] {
    out.attributeObject("optimizer", [&] {
      out.attribute("type", optimizerKindName(config.optimizer));
      out.attributeObject("params", [&] {
        number("lr", config.lr);
        if (config.optimizer != OptimizerKind::SGD)
          betas();
        if (adam)
          number("eps", config.eps);
        if (config.optimizer == OptimizerKind::SGD) {
          number("momentum", config.momentum);
          number("dampening", config.dampening);
          out.attribute("nesterov", config.nesterov);
        }
        number("weight_decay", config.weightDecay);
        if (config.optimizer == OptimizerKind::Adam)
          out.attribute("adam_w_mode", false);
      });
    });
    if (config.schedule != ScheduleKind::Constant) {
      out.attributeObject("scheduler", [&] {
        out.attribute("type", scheduleKindName(config.schedule));
        out.attributeObject("params", [&] {
          if (config.schedule == ScheduleKind::WarmupCosineLR) {
            number("warmup_min_ratio", config.warmupMinRatio);
            number("cos_min_ratio", config.cosMinRatio);
          } else {
            number("warmup_min_lr", config.warmupMinLr);
            number("warmup_max_lr", config.warmupMaxLr);
          }
          out.attribute("warmup_num_steps", config.warmupNumSteps);
          out.attribute("warmup_type", config.warmupLinear ? "linear" : "log");
          if (config.schedule != ScheduleKind::WarmupLR)
            out.attribute("total_num_steps", config.totalNumSteps);
        });
      });
    }
    number("gradient_clipping", config.gradientClipping);
    integer("train_batch_size", config.trainBatchSize);
    integer("train_micro_batch_size_per_gpu", config.microBatchSize);
    integer("gradient_accumulation_steps", config.gradientAccumulationSteps);
    out.attributeObject("zero_optimization", [&] {
      out.attribute("stage", config.zeroStage);
      out.attribute("stage3_param_persistence_threshold",
                    config.paramPersistenceThreshold);
      out.attribute("reduce_bucket_size", config.reduceBucketSize);
      out.attribute("allgather_bucket_size", config.allgatherBucketSize);
      out.attribute("stage3_prefetch_bucket_size", config.prefetchBucketSize);
      const OffloadOptimizerConfig &optimizer = config.offloadOptimizer;
      if (optimizer.device != OffloadDevice::None)
        out.attributeObject("offload_optimizer", [&] {
          out.attribute("device", offloadDeviceName(optimizer.device));
          if (!optimizer.nvmePath.empty())
            out.attribute("nvme_path", optimizer.nvmePath);
          out.attribute("pin_memory", optimizer.pinMemory);
          out.attribute("buffer_count", optimizer.bufferCount);
          number("ratio", optimizer.ratio);
        });
      const OffloadParamConfig &param = config.offloadParam;
      if (param.device != OffloadDevice::None)
        out.attributeObject("offload_param", [&] {
          out.attribute("device", offloadDeviceName(param.device));
          if (!param.nvmePath.empty())
            out.attribute("nvme_path", param.nvmePath);
          out.attribute("buffer_count", param.bufferCount);
          out.attribute("buffer_size", param.bufferSize);
          out.attribute("max_in_cpu", param.maxInCpu);
          out.attribute("pin_memory", param.pinMemory);
        });
    });
    if (config.offloadOptimizer.device == OffloadDevice::NVMe ||
        config.offloadParam.device == OffloadDevice::NVMe)
      out.attributeObject("aio", [&] {
        out.attribute("block_size", config.aio.blockSize);
        out.attribute("queue_depth", config.aio.queueDepth);
        out.attribute("intra_op_parallelism", config.aio.intraOpParallelism);
        out.attribute("single_submit", config.aio.singleSubmit);
        out.attribute("overlap_events", config.aio.overlapEvents);
      });
    if (config.pipelineStages > 1 || config.pipelineSchedule != "1f1b" ||
        config.pipelineChunks != 0 || config.partitionMethod != "flops")
      out.attributeObject("pipeline", [&] {
        out.attribute("stages", config.pipelineStages);
        out.attribute("partition_method", config.partitionMethod);
        out.attribute("schedule", config.pipelineSchedule);
        if (config.pipelineChunks)
          out.attribute("chunks", config.pipelineChunks);
      });
    if (config.tensorParallelSize > 1)
      out.attributeObject("tensor_parallel", [&] {
        out.attribute("autotp_size", config.tensorParallelSize);
        if (config.sequenceParallel)
          out.attribute("sequence_parallel", true);
      });
    // The loss scaler and the accumulation type are written where they
    // apply: with fp16, and with 16-bit training.
    out.attributeObject("fp16", [&] {
      out.attribute("enabled", config.precision == Precision::FP16);
      if (config.precision != Precision::FP16)
        return;
      const LossScalerConfig &scaler = config.lossScaler;
      out.attribute("loss_scale", scaler.lossScale);
      out.attribute("initial_scale_power", scaler.initialScalePower);
      out.attribute("loss_scale_window", scaler.lossScaleWindow);
      out.attribute("hysteresis", scaler.hysteresis);
      out.attribute("consecutive_hysteresis", scaler.consecutiveHysteresis);
      out.attribute("min_loss_scale", scaler.minLossScale);
    });
    out.attributeObject("bf16", [&] {
      out.attribute("enabled", config.precision == Precision::BF16);
    });
    if (config.precision != Precision::FP32)
      out.attributeObject("data_types", [&] {
        out.attribute("grad_accum_dtype",
                      precisionName(config.gradAccumDtype.value_or(
                          config.precision)));
      });
    out.attribute("steps_per_print", config.stepsPerPrint);
  });
  return text;
}

llvm::Error checkOffloadComposition(const TrainConfig &config, bool irOnly) {
  (void)irOnly; // every offload_optimizer device compiles to a program
  auto notYet = [](const Twine &message) {
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   message.str());
  };
  // One file space per rank: both offloads to nvme share its directory.
  const OffloadOptimizerConfig &optimizer = config.offloadOptimizer;
  const OffloadParamConfig &param = config.offloadParam;
  if (optimizer.device == OffloadDevice::NVMe &&
      param.device == OffloadDevice::NVMe &&
      optimizer.nvmePath != param.nvmePath)
    return notYet("zero_optimization.offload_param.nvme_path \"" +
                  param.nvmePath +
                  "\" differs from offload_optimizer.nvme_path \"" +
                  optimizer.nvmePath +
                  "\"; dsopt keeps a rank's offloaded states and parameters "
                  "in one file, in one directory");
  return llvm::Error::success();
}

llvm::Error checkPipelineSchedule(const TrainConfig &config,
                                  bool evenWithOneStage) {
  int64_t pp = config.pipelineStages;
  std::optional<pipeline::ScheduleKind> kind =
      pipeline::parseScheduleKind(config.pipelineSchedule);
  if (!kind)
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "unknown pipeline schedule '" +
                                       config.pipelineSchedule + "'");
  int64_t chunks = config.pipelineChunks
                       ? config.pipelineChunks
                       : (*kind == pipeline::ScheduleKind::Interleaved ? 2 : 1);
  if (pp <= 1 && !evenWithOneStage)
    return llvm::Error::success();
  int64_t m = std::max<int64_t>(config.gradientAccumulationSteps, 1);
  // Larger products are refused by the pass with their own message.
  if (pp * chunks * m > pipeline::kMaxStageMicrobatches)
    return llvm::Error::success();
  llvm::Expected<pipeline::Schedule> schedule =
      pipeline::buildSchedule(*kind, pp, m, chunks);
  if (schedule)
    return llvm::Error::success();
  return llvm::createStringError(
      llvm::inconvertibleErrorCode(),
      "--schedule " + config.pipelineSchedule + " with --pp " +
          std::to_string(pp) + ", --microbatches " + std::to_string(m) +
          " and --chunks " + std::to_string(chunks) + ": " +
          llvm::toString(schedule.takeError()));
}

} // namespace dsopt

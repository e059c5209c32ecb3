// A pipeline-parallel training program written by hand the way dsopt
// generates one (one program per pp rank, linked into one executable whose
// main calls dsrt::pipeline_main), for the end-to-end test of the pipeline
// runner (train_pipeline_e2e.py, with PyTorch as the oracle).
//
// The model is a chain of L = P * v linear layers (P pp ranks, v chunks),
// one per virtual stage s:  h_{s+1} = h_s W_s, with a bias t added after
// the first and the last layer (a parameter tied between pp rank 0 and pp
// rank P-1), and the loss mean((h_L - y)^2). h_0 = x is [2, 5], every
// other h_s is [2, 4]. The optimizer is SGD with global-norm clipping:
// gradients are averaged over dp and the norm is summed over pp (tied t
// counted once, on pp rank 0), as generated code does.
//
// Per virtual stage s (functions named after it; a value the pipeline holds
// is named as dsopt shows it, "recv:h<s>", and described with its role:
// recv: Recv, send: Send, stash: Stash, wstash: WeightStash):
//   forward_s          in: x or recv:h<s>, (last) y
//                      out: send:h<s+1> and stash:h<s>, or (last)
//                           stash:pred, loss, stash:h<s>
//   backward_s         in: (last) y, stash:pred, stash:h<s>, or stash:h<s>,
//                          recv:g<s+1>;  out: send:g<s> (s > 0)
//   backward_input_s   (zb-h1) in: (last) y, stash:pred, or recv:g<s+1>
//                      out: send:g<s> (s > 0), wstash:g
//   backward_weight_s  (zb-h1) in: wstash:g, stash:h<s>
// The gradient accumulators grad:W<s> and grad:t are states (role
// Accumulator, of parameters W<s> and t) updated in place. The memory plan is laid out here by a bump allocator (alignment
// 64): parameters and states, then each function's buffers from
// persistent_bytes, then the pools, each with as many slots as the
// schedule ever holds at once (counted by walking the action list), so
// that the arena's high-water mark is the plan. A function's buffers are
// its data inputs (x, y; lr and step) and its temporaries only: its
// received and stashed inputs have offset -1 and no buffer, and it
// reads them in their pool slots through dsrt::bound_input(p, k, ...),
// k counting those inputs in input order. Values passed on are views of
// them: forward_s's stash:h<s> (s > 0) is its recv:h<s>, and a non-last
// backward_input_s's wstash:g is its recv:g<s+1>.
//
// The test chooses the configuration with the environment (a generated
// program has it compiled in):
//   DSRT_PP_SCHEDULE    schedule name (gpipe, 1f1b, zb-h1, interleaved)
//   DSRT_PP_STAGES, DSRT_PP_CHUNKS, DSRT_PP_DP, DSRT_PP_MICROBATCHES
//   DSRT_PP_ACTIONS_<r> pp rank r's actions as dsopt-pipeline prints them
//                       ("F0 send-act0>1 recv-grad0<1 B0 ...", "F3.1")
//   DSRT_PP_BREAK       slot_bytes | slots | count: a broken plan (tests)
#include "dsrt/dist.h"
#include "dsrt/program.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#ifndef DSRT_PIPELINE_MODEL
#error "DSRT_PIPELINE_MODEL must name the source model"
#endif

namespace {

using dsrt::DType;
using dsrt::PipelineAction;
using dsrt::PipelineActionKind;

constexpr int64_t kBatch = 2, kIn = 5, kWidth = 4;
constexpr int64_t kAlign = 64;
constexpr double kLr = 0.05;
constexpr float kClip = 0.5f;
constexpr int kMaxStages = 8, kMaxRanks = 4;
constexpr int64_t kPpAxis = 0, kDpAxis = 1;

struct Config {
  std::string schedule = "gpipe", breaks;
  int64_t stages = 1, chunks = 1, dp = 1, microbatches = 4;
  std::vector<std::vector<PipelineAction>> actions;  // per pp rank
} config;

int64_t layers() { return config.stages * config.chunks; }
int64_t width(int64_t i) { return i == 0 ? kIn : kWidth; }  // of h_i
bool has_bias(int64_t s) { return s == 0 || s == layers() - 1; }
bool last(int64_t s) { return s == layers() - 1; }
bool split_backward() { return config.schedule == "zb-h1"; }

//===--- the configuration ----------------------------------------------------===//

int64_t env_int(const char *name, int64_t fallback) {
  const char *text = std::getenv(name);
  return text ? std::strtoll(text, nullptr, 10) : fallback;
}

// "F3", "Bi3", "W3.1", "send-act3>2", "recv-grad3.1<0".
PipelineAction parse_action(const std::string &text) {
  static const std::pair<const char *, PipelineActionKind> prefixes[] = {
      {"send-act", PipelineActionKind::SendActivation},
      {"recv-act", PipelineActionKind::RecvActivation},
      {"send-grad", PipelineActionKind::SendGradient},
      {"recv-grad", PipelineActionKind::RecvGradient},
      {"Bi", PipelineActionKind::BackwardInput},
      {"F", PipelineActionKind::Forward},
      {"B", PipelineActionKind::Backward},
      {"W", PipelineActionKind::BackwardWeight}};
  for (const auto &prefix : prefixes) {
    const size_t n = std::strlen(prefix.first);
    if (text.compare(0, n, prefix.first) != 0) continue;
    PipelineAction action;
    action.kind = prefix.second;
    const char *p = text.c_str() + n;
    char *end = nullptr;
    action.microbatch = std::strtoll(p, &end, 10);
    if (*end == '.') action.chunk = std::strtoll(end + 1, &end, 10);
    if (*end == '>' || *end == '<') action.peer = std::strtoll(end + 1, &end, 10);
    if (end == p || *end) break;
    return action;
  }
  std::fprintf(stderr, "train_pipeline: cannot read action '%s'\n", text.c_str());
  std::exit(2);
}

void read_config() {
  if (const char *s = std::getenv("DSRT_PP_SCHEDULE")) config.schedule = s;
  if (const char *s = std::getenv("DSRT_PP_BREAK")) config.breaks = s;
  config.stages = env_int("DSRT_PP_STAGES", 1);
  config.chunks = env_int("DSRT_PP_CHUNKS", 1);
  config.dp = env_int("DSRT_PP_DP", 1);
  config.microbatches = env_int("DSRT_PP_MICROBATCHES", 4);
  if (config.stages < 1 || config.stages > kMaxRanks || layers() > kMaxStages) {
    std::fprintf(stderr, "train_pipeline: at most %d ranks and %d stages\n", kMaxRanks,
                 kMaxStages);
    std::exit(2);
  }
  for (int64_t r = 0; r < config.stages; ++r) {
    const std::string name = "DSRT_PP_ACTIONS_" + std::to_string(r);
    const char *text = std::getenv(name.c_str());
    std::vector<PipelineAction> actions;
    if (!text) {
      // One stage alone: every forward, then every backward.
      for (int64_t mb = 0; mb < config.microbatches; ++mb)
        actions.push_back({PipelineActionKind::Forward, mb, 0, -1});
      for (int64_t mb = 0; mb < config.microbatches; ++mb)
        actions.push_back({PipelineActionKind::Backward, mb, 0, -1});
    } else {
      std::istringstream words(text);
      for (std::string word; words >> word;) actions.push_back(parse_action(word));
    }
    config.actions.push_back(actions);
  }
}

//===--- initial values (train_pipeline_e2e.py builds the same) ----------------===//

std::vector<float> initial_weight(int64_t s) {
  std::vector<float> w(static_cast<size_t>(width(s) * width(s + 1)));
  for (int64_t i = 0; i < width(s); ++i)
    for (int64_t j = 0; j < width(s + 1); ++j)
      w[static_cast<size_t>(i * width(s + 1) + j)] =
          static_cast<float>(0.4 * std::sin(1.0 + 7.0 * s + 3.0 * i + j));
  return w;
}

std::vector<float> initial_bias() {
  std::vector<float> t(kWidth);
  for (int64_t j = 0; j < kWidth; ++j) t[static_cast<size_t>(j)] = 0.1f * (j - 1.5f);
  return t;
}

// Keeps the initial values alive for add_param_data.
std::vector<std::vector<float>> initial_values;

//===--- the memory plan ----------------------------------------------------------===//

int64_t aligned(int64_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }
int64_t f32_bytes(const dsrt::Shape &shape) { return 4 * shape.numel(); }

// Where each function's values lie, per pp rank, filled by describe and
// read by the run functions (generated code has the offsets and the
// bound-input indices inline).
struct FunctionPlan {
  std::map<std::string, int64_t> at;     // buffers: data inputs, temporaries
  std::map<std::string, int64_t> bound;  // inputs without one: index k
  int64_t end = 0;
  int64_t place(const std::string &name, int64_t bytes) {
    at[name] = end;
    end += aligned(bytes);
    return at[name];
  }
  // The next input without a buffer (offset -1).
  void bind(const std::string &name) {
    const int64_t k = static_cast<int64_t>(bound.size());
    bound[name] = k;
  }
  int64_t offset(const std::string &name) const {
    return bound.count(name) ? -1 : at.at(name);
  }
};
struct RankPlan {
  std::map<std::string, int64_t> persistent;
  std::map<std::string, FunctionPlan> functions;
};
RankPlan plans[kMaxRanks];

dsrt::Shape h_shape(int64_t i) { return {kBatch, width(i)}; }

// What each value of a function is, in describe order. The names of the
// values the pipeline holds are spelt as dsopt shows them ("recv:h1"), but
// only their role says what they are.
using dsrt::ValueRole;
struct Value {
  std::string name;
  dsrt::Shape shape;
  ValueRole role = ValueRole::Input;  // an input's or output's; Input: data

  // Read or written where the pipeline keeps it (no buffer of its own).
  bool bound() const { return role != ValueRole::Input; }
};
struct FunctionSpec {
  std::string name;
  std::vector<Value> inputs, temporaries, outputs;  // outputs: names of inputs or temporaries
};

std::string h(int64_t i) { return "h" + std::to_string(i); }

std::vector<FunctionSpec> stage_functions(int64_t s) {
  const std::string n = std::to_string(s);
  const dsrt::Shape out = h_shape(s + 1), in = h_shape(s);
  std::vector<FunctionSpec> specs;
  FunctionSpec f{"forward_" + n, {}, {}, {}};
  f.inputs.push_back(s == 0 ? Value{"x", in} : Value{"recv:" + h(s), in, ValueRole::Recv});
  if (last(s)) f.inputs.push_back({"y", out});
  f.temporaries.push_back({last(s) ? "stash:pred" : "send:" + h(s + 1), out});
  if (last(s)) {
    f.temporaries.push_back({"loss", {}});
    f.outputs = {{"stash:pred", out, ValueRole::Stash},
                 {"loss", {}},
                 {"stash:" + h(s), in, ValueRole::Stash}};
  } else {
    f.outputs = {{"send:" + h(s + 1), out, ValueRole::Send},
                 {"stash:" + h(s), in, ValueRole::Stash}};
  }
  specs.push_back(f);
  // The gradient arriving at the layer's output: computed from the loss on
  // the last stage, received otherwise.
  std::vector<Value> gradient_in;
  if (last(s))
    gradient_in = {{"y", out}, {"stash:pred", out, ValueRole::Stash}};
  else
    gradient_in = {{"recv:g" + std::to_string(s + 1), out, ValueRole::Recv}};
  if (!split_backward()) {
    FunctionSpec b{"backward_" + n, gradient_in, {}, {}};
    if (last(s))
      b.inputs.push_back(Value{"stash:" + h(s), in, ValueRole::Stash});
    else
      b.inputs.insert(b.inputs.begin(), Value{"stash:" + h(s), in, ValueRole::Stash});
    if (last(s)) b.temporaries.push_back({"g", out});
    if (s > 0) {
      b.temporaries.push_back({"send:g" + n, in});
      b.outputs.push_back({"send:g" + n, in, ValueRole::Send});
    }
    specs.push_back(b);
  } else {
    FunctionSpec bi{"backward_input_" + n, gradient_in, {}, {}};
    // A non-last stage keeps the received gradient itself (a view of it).
    if (last(s)) bi.temporaries.push_back({"wstash:g", out});
    if (s > 0) {
      bi.temporaries.push_back({"send:g" + n, in});
      bi.outputs.push_back({"send:g" + n, in, ValueRole::Send});
    }
    bi.outputs.push_back({"wstash:g", out, ValueRole::WeightStash});
    specs.push_back(bi);
    FunctionSpec w{"backward_weight_" + n,
                   {{"wstash:g", out, ValueRole::WeightStash},
                    {"stash:" + h(s), in, ValueRole::Stash}},
                   {},
                   {}};
    specs.push_back(w);
  }
  return specs;
}

const FunctionSpec *find_spec(const std::vector<FunctionSpec> &specs, const char *prefix) {
  for (const FunctionSpec &spec : specs)
    if (spec.name.compare(0, std::strlen(prefix), prefix) == 0) return &spec;
  return nullptr;
}

// The bytes of a slot holding `values` (those whose name starts with
// `prefix`), one after another, each aligned.
int64_t slot_bytes(const std::vector<Value> &values, ValueRole role) {
  int64_t bytes = 0;
  for (const Value &v : values)
    if (v.role == role) bytes += aligned(f32_bytes(v.shape));
  return bytes;
}

// The most slots each pool of (kind, stage) holds at once over the schedule.
// A group's sent slots are held until the next group (the executor sends
// on its transfer stream while the computations between run).
std::map<std::pair<std::string, int64_t>, int64_t> peak_slots(int64_t rank) {
  std::map<std::pair<std::string, int64_t>, int64_t> held, peak;
  auto change = [&](const std::string &kind, int64_t stage, int64_t by) {
    int64_t &n = held[{kind, stage}];
    n += by;
    peak[{kind, stage}] = std::max(peak[{kind, stage}], n);
  };
  const std::vector<PipelineAction> &actions = config.actions[static_cast<size_t>(rank)];
  std::vector<std::pair<std::string, int64_t>> sending;
  for (size_t i = 0; i < actions.size(); ++i) {
    const PipelineAction &a = actions[i];
    const int64_t s = a.chunk * config.stages + rank;
    switch (a.kind) {
    case PipelineActionKind::Forward:
      if (s > 0) change("act_in", s, -1);
      if (!last(s)) change("act_out", s, +1);
      change("stash", s, +1);
      break;
    case PipelineActionKind::Backward:
      if (!last(s)) change("grad_in", s, -1);
      if (s > 0) change("grad_out", s, +1);
      change("stash", s, -1);
      break;
    case PipelineActionKind::BackwardInput:
      if (!last(s)) change("grad_in", s, -1);
      if (s > 0) change("grad_out", s, +1);
      change("wstash", s, +1);
      break;
    case PipelineActionKind::BackwardWeight:
      change("stash", s, -1);
      change("wstash", s, -1);
      break;
    default: {
      // A group: the previous group's sent slots are freed, then its
      // receives take slots; its sends keep theirs until the next group.
      for (const auto &[kind, stage] : sending) change(kind, stage, -1);
      sending.clear();
      size_t end = i;
      while (end < actions.size() &&
             static_cast<int64_t>(actions[end].kind) >=
                 static_cast<int64_t>(PipelineActionKind::SendActivation))
        ++end;
      for (int pass = 0; pass < 2; ++pass)
        for (size_t j = i; j < end; ++j) {
          const PipelineAction &t = actions[j];
          const int64_t ts = t.chunk * config.stages + rank;
          const bool send = t.kind == PipelineActionKind::SendActivation ||
                            t.kind == PipelineActionKind::SendGradient;
          const bool act = t.kind == PipelineActionKind::SendActivation ||
                           t.kind == PipelineActionKind::RecvActivation;
          if (pass == 0 && !send) change(act ? "act_in" : "grad_in", ts, +1);
          if (pass == 1 && send) sending.push_back({act ? "act_out" : "grad_out", ts});
        }
      i = end - 1;
    }
    }
  }
  return peak;
}

std::vector<int64_t> tied_ranks() {
  if (config.stages == 1) return {};
  return {0, config.stages - 1};
}

void describe(dsrt::ProgramInfo &info, int64_t rank) {
  const int64_t sizes[2] = {config.stages, config.dp};
  RankPlan &plan = plans[rank];
  plan = RankPlan();
  dsrt::set_model(info, DSRT_PIPELINE_MODEL);
  dsrt::set_grid(info, "pp,dp", sizes, 2);
  std::vector<int64_t> held;
  for (int64_t c = 0; c < config.chunks; ++c) held.push_back(c * config.stages + rank);
  const bool bias = has_bias(held.front()) || has_bias(held.back());

  // Parameters, then states.
  int64_t top = 0;
  auto persistent = [&](const std::string &name, int64_t bytes) {
    plan.persistent[name] = top;
    top += aligned(bytes);
    return plan.persistent[name];
  };
  for (int64_t s : held) {
    initial_values.push_back(initial_weight(s));
    const int64_t at = persistent("W" + std::to_string(s), 4 * width(s) * width(s + 1));
    dsrt::add_param_data(info, ("W" + std::to_string(s)).c_str(),
                         dsrt::view_static(initial_values.back().data(), DType::F32,
                                           {width(s), width(s + 1)}),
                         at, true);
  }
  if (bias) {
    initial_values.push_back(initial_bias());
    const int64_t at = persistent("t", 4 * kWidth);
    dsrt::add_param_data(info, "t",
                         dsrt::view_static(initial_values.back().data(), DType::F32, {kWidth}),
                         at, true);
  }
  for (int64_t s : held) {
    const std::string name = "grad:W" + std::to_string(s);
    dsrt::add_state(info, name.c_str(), DType::F32, {width(s), width(s + 1)},
                    persistent(name, 4 * width(s) * width(s + 1)), ValueRole::Accumulator,
                    ("W" + std::to_string(s)).c_str());
  }
  if (bias)
    dsrt::add_state(info, "grad:t", DType::F32, {kWidth}, persistent("grad:t", 4 * kWidth),
                    ValueRole::Accumulator, "t");
  const int64_t persistent_bytes = top;

  // Each function's buffers above the persistent part.
  std::vector<std::pair<FunctionSpec, int64_t>> functions;  // spec, stage (-1: optimizer)
  for (int64_t s : held)
    for (const FunctionSpec &spec : stage_functions(s)) functions.push_back({spec, s});
  FunctionSpec optimizer{"optimizer_step",
                         {{"lr", {}}, {"step", {}}},
                         {{"sq", {1}}, {"grad_norm", {}}},
                         {{"grad_norm", {}}}};
  functions.push_back({optimizer, -1});
  int64_t buffers_offset = persistent_bytes;
  for (auto &entry : functions) {
    FunctionPlan &fp = plan.functions[entry.first.name];
    fp.end = persistent_bytes;
    for (const Value &v : entry.first.inputs)
      if (v.bound())
        fp.bind(v.name);
      else
        fp.place(v.name, f32_bytes(v.shape));
    for (const Value &v : entry.first.temporaries) fp.place(v.name, f32_bytes(v.shape));
    buffers_offset = std::max(buffers_offset, fp.end);
  }

  // The pools, at the top.
  struct Pool {
    std::string kind;
    int64_t stage, slots, bytes;
  };
  std::vector<Pool> pools;
  const std::map<std::pair<std::string, int64_t>, int64_t> peaks = peak_slots(rank);
  const std::vector<int64_t> sharers = tied_ranks();
  if (bias && !sharers.empty())
    pools.push_back({"tied", -1, 1, aligned(4 * kWidth) * (int64_t(sharers.size()) - 1)});
  for (int64_t s : held) {
    const std::vector<FunctionSpec> specs = stage_functions(s);
    const FunctionSpec &f = *find_spec(specs, "forward_");
    const FunctionSpec *b = find_spec(specs, split_backward() ? "backward_input_" : "backward_");
    const std::pair<const char *, int64_t> kinds[] = {
        {"stash", slot_bytes(f.outputs, ValueRole::Stash)},
        {"act_in", slot_bytes(f.inputs, ValueRole::Recv)},
        {"act_out", slot_bytes(f.outputs, ValueRole::Send)},
        {"grad_in", slot_bytes(b->inputs, ValueRole::Recv)},
        {"grad_out", slot_bytes(b->outputs, ValueRole::Send)},
        {"wstash", slot_bytes(b->outputs, ValueRole::WeightStash)}};
    for (const auto &kind : kinds) {
      if (kind.second == 0) continue;
      auto peak = peaks.find({kind.first, s});
      pools.push_back({kind.first, s, peak == peaks.end() ? 1 : peak->second, kind.second});
    }
  }
  for (Pool &pool : pools) {
    if (config.breaks == "slot_bytes" && rank == config.stages - 1 && pool.kind == "act_in")
      pool.bytes += kAlign;
    if (config.breaks == "slots" && rank == 0 && pool.kind == "stash" && pool.slots > 1)
      pool.slots -= 1;
  }
  int64_t buffers_bytes = 0;
  for (const Pool &pool : pools) buffers_bytes += pool.slots * pool.bytes;

  dsrt::set_memory_plan(info, buffers_offset + buffers_bytes, persistent_bytes,
                        buffers_offset + buffers_bytes, kAlign);
  dsrt::set_training(info, "SGD", kLr, kClip, config.microbatches, kBatch, 1);
  dsrt::set_pipeline(info, config.schedule.c_str(), config.stages, config.chunks,
                     config.microbatches, rank, buffers_offset, buffers_bytes);
  int64_t offset = buffers_offset;
  for (const Pool &pool : pools) {
    dsrt::add_pipeline_pool(info, pool.kind.c_str(), pool.stage, pool.slots, pool.bytes, offset);
    offset += pool.slots * pool.bytes;
  }
  if (bias && !sharers.empty())
    dsrt::add_pipeline_tied(info, "t", sharers.data(), static_cast<int64_t>(sharers.size()));
  for (int64_t s : held) {
    const std::string n = std::to_string(s);
    if (split_backward())
      dsrt::add_pipeline_stage(info, s, ("forward_" + n).c_str(), "",
                               ("backward_input_" + n).c_str(),
                               ("backward_weight_" + n).c_str());
    else
      dsrt::add_pipeline_stage(info, s, ("forward_" + n).c_str(), ("backward_" + n).c_str(), "",
                               "");
  }
  for (const PipelineAction &a : config.actions[static_cast<size_t>(rank)])
    dsrt::add_pipeline_action(info, static_cast<int64_t>(a.kind), a.microbatch, a.chunk, a.peer);

  for (auto &entry : functions) {
    const FunctionSpec &spec = entry.first;
    const FunctionPlan &fp = plan.functions[spec.name];
    dsrt::begin_function(info, spec.name.c_str(), fp.end, fp.end - persistent_bytes);
    for (const Value &v : spec.inputs)
      dsrt::add_input(info, v.name.c_str(), v.name == "step" ? DType::I64 : DType::F32, v.shape,
                      fp.offset(v.name), v.role);
    for (const Value &v : spec.outputs)
      dsrt::add_output(info, v.name.c_str(), DType::F32, v.shape,
                       v.bound() ? v.role : ValueRole::Output);
  }
}

//===--- the run functions --------------------------------------------------------===//

float *at(dsrt::Program &p, int64_t offset) {
  return reinterpret_cast<float *>(dsrt::arena(p) + offset);
}

const RankPlan &rank_plan(dsrt::Program &p) { return plans[p.info->pipeline.rank]; }

// An input of the running function: a data input in its buffer, or one
// without a buffer where the runner bound it.
dsrt::Tensor input(dsrt::Program &p, const FunctionPlan &fp, const std::string &name,
                   const dsrt::Shape &shape) {
  auto k = fp.bound.find(name);
  if (k != fp.bound.end()) return dsrt::bound_input(p, k->second, DType::F32, shape);
  return dsrt::view(dsrt::arena(p), fp.at.at(name), DType::F32, shape);
}
const float *data(const dsrt::Tensor &t) { return static_cast<const float *>(t.data); }

// A value of the running function: acquired when the function defines it,
// as generated code does.
float *define(dsrt::Program &p, const FunctionPlan &fp, const std::string &name,
              const dsrt::Shape &shape) {
  dsrt::acquire(p, fp.at.at(name), aligned(f32_bytes(shape)));
  return at(p, fp.at.at(name));
}

// c[n, m] = a[n, k] b[k, m], with a or b read transposed.
void matmul(const float *a, const float *b, float *c, int64_t n, int64_t k, int64_t m,
            bool ta, bool tb) {
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < m; ++j) {
      float sum = 0;
      for (int64_t l = 0; l < k; ++l)
        sum += (ta ? a[l * n + i] : a[i * k + l]) * (tb ? b[j * k + l] : b[l * m + j]);
      c[i * m + j] = sum;
    }
}

void output(dsrt::Program &p, int64_t index, int64_t offset, const dsrt::Shape &shape) {
  dsrt::set_output(p, index, dsrt::view(dsrt::arena(p), offset, DType::F32, shape));
}

// The functions compute on the host, as a generated fused loop does:
// after the work pending on the program's stream (begin_generated_kernel),
// which includes the transfers the executor made it wait for (a received
// slot's, and the last send from a slot it computes into).
void begin_host_loops(dsrt::Program &p) { dsrt::begin_generated_kernel(dsrt::stream(p)); }

void forward(dsrt::Program &p, int64_t s) {
  begin_host_loops(p);
  const RankPlan &rp = rank_plan(p);
  const FunctionPlan &fp = rp.functions.at("forward_" + std::to_string(s));
  const int64_t n = width(s), m = width(s + 1);
  // stash:h<s> is the input itself, passed on: x's buffer or recv:h<s>'s slot.
  const dsrt::Tensor in = input(p, fp, s == 0 ? "x" : "recv:" + h(s), h_shape(s));
  const std::string out_name = last(s) ? "stash:pred" : "send:" + h(s + 1);
  float *z = define(p, fp, out_name, h_shape(s + 1));
  matmul(data(in), at(p, rp.persistent.at("W" + std::to_string(s))), z, kBatch, n, m, false,
         false);
  if (has_bias(s)) {
    const float *t = at(p, rp.persistent.at("t"));
    for (int64_t i = 0; i < kBatch * m; ++i) z[i] += t[i % m];
  }
  if (!last(s)) {
    output(p, 0, fp.at.at(out_name), h_shape(s + 1));
    dsrt::set_output(p, 1, in);
    return;
  }
  const float *y = data(input(p, fp, "y", h_shape(s + 1)));
  float *loss = define(p, fp, "loss", {});
  double sum = 0;
  for (int64_t i = 0; i < kBatch * m; ++i) sum += double(z[i] - y[i]) * (z[i] - y[i]);
  *loss = static_cast<float>(sum / (kBatch * m));
  output(p, 0, fp.at.at(out_name), h_shape(s + 1));
  output(p, 1, fp.at.at("loss"), {});
  dsrt::set_output(p, 2, in);
}

// The gradient at the layer's output (d (loss / k) / d pred on the last
// stage), where the function has it.
const float *output_gradient(dsrt::Program &p, const FunctionPlan &fp, int64_t s,
                             const char *scratch) {
  if (!last(s)) return data(input(p, fp, "recv:g" + std::to_string(s + 1), h_shape(s + 1)));
  const int64_t m = width(s + 1);
  const float *pred = data(input(p, fp, "stash:pred", h_shape(s + 1)));
  const float *y = data(input(p, fp, "y", h_shape(s + 1)));
  float *g = define(p, fp, scratch, h_shape(s + 1));
  const float scale = 2.0f / (kBatch * m) / static_cast<float>(config.microbatches);
  for (int64_t i = 0; i < kBatch * m; ++i) g[i] = scale * (pred[i] - y[i]);
  return g;
}

void accumulate_weight(dsrt::Program &p, int64_t s, const float *hs, const float *g) {
  const RankPlan &rp = rank_plan(p);
  const int64_t n = width(s), m = width(s + 1);
  std::vector<float> dw(static_cast<size_t>(n * m));
  matmul(hs, g, dw.data(), n, kBatch, m, true, false);
  float *acc = at(p, rp.persistent.at("grad:W" + std::to_string(s)));
  for (int64_t i = 0; i < n * m; ++i) acc[i] += dw[static_cast<size_t>(i)];
  if (has_bias(s)) {
    float *gt = at(p, rp.persistent.at("grad:t"));
    for (int64_t j = 0; j < m; ++j)
      for (int64_t r = 0; r < kBatch; ++r) gt[j] += g[r * m + j];
  }
}

// send:g<s> = g W_s^T
void input_gradient(dsrt::Program &p, const FunctionPlan &fp, int64_t s, const float *g,
                    int64_t index) {
  const RankPlan &rp = rank_plan(p);
  const std::string name = "send:g" + std::to_string(s);
  float *gin = define(p, fp, name, h_shape(s));
  matmul(g, at(p, rp.persistent.at("W" + std::to_string(s))), gin, kBatch, width(s + 1),
         width(s), false, true);
  output(p, index, fp.at.at(name), h_shape(s));
}

void backward(dsrt::Program &p, int64_t s) {
  begin_host_loops(p);
  const FunctionPlan &fp = rank_plan(p).functions.at("backward_" + std::to_string(s));
  const float *g = output_gradient(p, fp, s, "g");
  accumulate_weight(p, s, data(input(p, fp, "stash:" + h(s), h_shape(s))), g);
  if (s > 0) input_gradient(p, fp, s, g, 0);
}

void backward_input(dsrt::Program &p, int64_t s) {
  begin_host_loops(p);
  const FunctionPlan &fp = rank_plan(p).functions.at("backward_input_" + std::to_string(s));
  // W gets the output gradient: computed into a temporary on the last
  // stage, passed on as it was received (a view of recv:g<s+1>) otherwise.
  const float *kept = output_gradient(p, fp, s, "wstash:g");
  int64_t index = 0;
  if (s > 0) input_gradient(p, fp, s, kept, index++);
  const dsrt::Tensor wstash =
      last(s) ? dsrt::view(dsrt::arena(p), fp.at.at("wstash:g"), DType::F32, h_shape(s + 1))
              : input(p, fp, "recv:g" + std::to_string(s + 1), h_shape(s + 1));
  dsrt::set_output(p, index, wstash);
}

void backward_weight(dsrt::Program &p, int64_t s) {
  begin_host_loops(p);
  const FunctionPlan &fp = rank_plan(p).functions.at("backward_weight_" + std::to_string(s));
  accumulate_weight(p, s, data(input(p, fp, "stash:" + h(s), h_shape(s))),
                    data(input(p, fp, "wstash:g", h_shape(s + 1))));
}

void optimizer_step(dsrt::Program &p) {
  const RankPlan &rp = rank_plan(p);
  const FunctionPlan &fp = rp.functions.at("optimizer_step");
  dsrt::Stream &st = dsrt::stream(p);
  const float lr = *data(input(p, fp, "lr", {}));
  struct Grad {
    float *param, *grad;
    int64_t n;
    bool counted;  // in the norm (the tied bias once: on pp rank 0)
  };
  std::vector<Grad> grads;
  // The accumulators by their role and parameter, in name order.
  std::vector<const dsrt::ValueInfo *> accumulators;
  for (const dsrt::ValueInfo &state : p.info->states)
    if (state.role == ValueRole::Accumulator) accumulators.push_back(&state);
  std::sort(accumulators.begin(), accumulators.end(),
            [](const dsrt::ValueInfo *a, const dsrt::ValueInfo *b) { return a->name < b->name; });
  for (const dsrt::ValueInfo *state : accumulators) {
    const std::string &param = state->param;
    const int64_t layer = param == "t" ? -1 : std::stoll(param.substr(1));
    const int64_t n = param == "t" ? kWidth : width(layer) * width(layer + 1);
    grads.push_back({at(p, rp.persistent.at(param)), at(p, state->offset), n,
                     param != "t" || p.info->pipeline.rank == 0});
  }
  // Mean over dp, then the norm over pp.
  for (const Grad &g : grads) {
    const dsrt::Tensor t{g.grad, DType::F32, dsrt::Shape{g.n}};
    dsrt::all_reduce(st, t, t, dsrt::ReduceOp::Sum, kDpAxis);
    st.synchronize();
    for (int64_t i = 0; i < g.n; ++i) g.grad[i] /= static_cast<float>(config.dp);
  }
  float *sq = define(p, fp, "sq", {1});
  *sq = 0;
  for (const Grad &g : grads)
    if (g.counted)
      for (int64_t i = 0; i < g.n; ++i) *sq += g.grad[i] * g.grad[i];
  const dsrt::Tensor sum{sq, DType::F32, dsrt::Shape{1}};
  dsrt::all_reduce(st, sum, sum, dsrt::ReduceOp::Sum, kPpAxis);
  st.synchronize();
  const float norm = std::sqrt(*sq);
  const float clip = std::fmin(1.0f, kClip / (norm + 1e-6f));
  for (const Grad &g : grads)
    for (int64_t i = 0; i < g.n; ++i) {
      g.param[i] -= lr * clip * g.grad[i];
      g.grad[i] = 0;
    }
  float *out = define(p, fp, "grad_norm", {});
  *out = norm;
  output(p, 0, fp.at.at("grad_norm"), {});
}

template <int S> void forward_fn(dsrt::Program &p) { forward(p, S); }
template <int S> void backward_fn(dsrt::Program &p) { backward(p, S); }
template <int S> void backward_input_fn(dsrt::Program &p) { backward_input(p, S); }
template <int S> void backward_weight_fn(dsrt::Program &p) { backward_weight(p, S); }
template <int R> void describe_fn(dsrt::ProgramInfo &info) { describe(info, R); }

template <int... S> struct StageTable {
  static constexpr dsrt::RunFn forward[] = {forward_fn<S>...};
  static constexpr dsrt::RunFn backward[] = {backward_fn<S>...};
  static constexpr dsrt::RunFn backward_input[] = {backward_input_fn<S>...};
  static constexpr dsrt::RunFn backward_weight[] = {backward_weight_fn<S>...};
};
using Stages = StageTable<0, 1, 2, 3, 4, 5, 6, 7>;
constexpr dsrt::DescribeFn kDescribe[kMaxRanks] = {describe_fn<0>, describe_fn<1>, describe_fn<2>,
                                                   describe_fn<3>};

}  // namespace

int main(int argc, char **argv) {
  read_config();
  // Each rank's run functions in the order its describe lists them.
  std::vector<std::vector<dsrt::RunFn>> functions(static_cast<size_t>(config.stages));
  std::vector<dsrt::PipelineRankProgram> ranks;
  for (int64_t r = 0; r < config.stages; ++r) {
    std::vector<dsrt::RunFn> &list = functions[static_cast<size_t>(r)];
    for (int64_t c = 0; c < config.chunks; ++c) {
      const int64_t s = c * config.stages + r;
      list.push_back(Stages::forward[s]);
      if (split_backward()) {
        list.push_back(Stages::backward_input[s]);
        list.push_back(Stages::backward_weight[s]);
      } else {
        list.push_back(Stages::backward[s]);
      }
    }
    list.push_back(optimizer_step);
    ranks.push_back({kDescribe[r], list.data(), static_cast<int64_t>(list.size())});
  }
  const int64_t count = config.breaks == "count" ? config.stages - 1 : config.stages;
  return dsrt::pipeline_main(argc, argv, ranks.data(), count);
}

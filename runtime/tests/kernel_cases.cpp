// Runs the cases written by make_cases.py: one GoogleTest test per case
// directory, named Kernel_<kernel>.<case>. Each case runs on a 2-thread
// stream and is compared with PyTorch's answer, then runs again on a
// 1-thread stream, which must pass too and, for the kernels that do not call
// BLAS, give the same bytes (their results may not depend on how the work
// was split).
//
// Linked with the cuda backend (dsrt_cuda_kernel_test) the same cases run on
// the GPU: inputs, outputs and workspaces are staged in device memory, the
// outputs copied back after the stream is synchronized, and float outputs
// compared with at least the cuda tolerances of cuda_tolerance below.
#include "kernel_cases.h"

#include "compare.h"
#include "json.h"

#include "dsrt/backend.h"
#include "dsrt/kernels.h"
#include "dsrt/npy.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>

namespace dsrt_test {

using namespace dsrt;
namespace fs = std::filesystem;

namespace {

DType dtype_from_name(const std::string &name) {
  for (DType d : {DType::F32, DType::F16, DType::BF16, DType::I64, DType::I32, DType::Bool})
    if (name == dtype_name(d))
      return d;
  throw std::runtime_error("unknown dtype name '" + name + "'");
}

// The state of one run of one case: loaded inputs, output buffers, attrs.
class CaseRun {
public:
  CaseRun(const std::string &dir, const Json &manifest, Stream &stream)
      : dir_(dir), manifest_(manifest), stream_(stream),
        on_device_(stream.backend() != Backend::Cpu) {}
  CaseRun(const CaseRun &) = delete;
  CaseRun &operator=(const CaseRun &) = delete;
  ~CaseRun() {
    try {
      stream_.synchronize();
    } catch (const Error &) {
      // Reported by finish() already, or the case expected it.
    }
    for (void *p : device_buffers_)
      backend(stream_).deallocate(MemoryKind::Device, p);
  }

  // Waits for the kernel (throwing what it reported) and, on a device,
  // copies the outputs back to their host buffers.
  void finish() {
    for (auto &[name, output] : outputs_)
      if (output.device)
        backend(stream_).copy(stream_, output.actual.bytes.data(), output.device,
                              output.actual.bytes.size());
    stream_.synchronize();
  }

  Stream &stream() { return stream_; }

  // Inputs.
  Tensor in(const std::string &name) {
    const Json &entry = manifest_.at("inputs").at(name);
    if (entry.is_null())
      throw std::runtime_error("input '" + name + "' is required but null");
    return load(entry.as_string(), shift(name));
  }
  // An optional input: null when absent.
  const Tensor *opt(const std::string &name) {
    const Json *entry = manifest_.at("inputs").find(name);
    if (!entry || entry->is_null())
      return nullptr;
    views_[name] = in(name);
    return &views_[name];
  }
  std::vector<Tensor> in_list(const std::string &name) {
    std::vector<Tensor> list;
    for (const Json &f : manifest_.at("inputs").at(name).items())
      list.push_back(load(f.as_string(), shift(name)));
    return list;
  }

  // Outputs: buffers of the expected type and shape, filled with 0xFF bytes
  // (NaN for floats, -1 for integers, an invalid bool) so that an element
  // the kernel forgets to write is caught.
  Tensor out(const std::string &name) {
    return make_output(name, manifest_.at("outputs").at(name), shift(name));
  }
  std::vector<Tensor> out_list(const std::string &name) {
    std::vector<Tensor> list;
    const auto &items = manifest_.at("outputs").at(name).items();
    for (size_t i = 0; i < items.size(); ++i)
      list.push_back(make_output(name + std::to_string(i), items[i], shift(name)));
    return list;
  }

  bool has_output(const std::string &name) const {
    return manifest_.at("outputs").find(name) != nullptr;
  }

  // An int64 scalar output the runner computes on the host (what a backend
  // call returns rather than writes).
  void put_i64(const std::string &name, int64_t value) {
    make_output(name, manifest_.at("outputs").at(name));
    Output &slot = outputs_.at(name);
    if (slot.actual.dtype != DType::I64 || slot.actual.numel() != 1)
      throw std::runtime_error("output '" + name + "' is not an i64 scalar");
    slot.device = nullptr;  // nothing to copy back: the value is written here
    std::memcpy(slot.actual.bytes.data(), &value, sizeof value);
  }

  // Attributes.
  const Json &attr(const std::string &name) const { return manifest_.at("attrs").at(name); }
  int64_t attr_int(const std::string &name) const { return attr(name).as_int(); }
  float attr_float(const std::string &name) const { return static_cast<float>(attr(name).as_double()); }
  bool attr_bool(const std::string &name) const { return attr(name).as_bool(); }
  const std::string &attr_str(const std::string &name) const { return attr(name).as_string(); }
  uint64_t attr_u64(const std::string &name) const {
    return std::strtoull(attr(name).as_string().c_str(), nullptr, 10);
  }
  std::vector<int64_t> attr_ints(const std::string &name) const {
    std::vector<int64_t> v;
    for (const Json &x : attr(name).items())
      v.push_back(x.as_int());
    return v;
  }

  // A workspace of exactly `bytes` bytes (what the kernel's size function
  // says), filled with 0xFF bytes so that a kernel reading scratch it did
  // not write is caught.
  Workspace workspace(int64_t bytes) {
    workspaces_.emplace_back(static_cast<size_t>(bytes) / sizeof(float) + 1, 0);
    std::memset(workspaces_.back().data(), 0xFF, workspaces_.back().size() * sizeof(float));
    return Workspace{staged(workspaces_.back().data(), workspaces_.back().size() * sizeof(float)),
                     bytes};
  }

  // name -> (actual buffer, output entry) of every output made.
  struct Output {
    NpyArray actual;
    const Json *entry;
    void *device = nullptr;  // the kernel's buffer on a device backend
  };
  std::map<std::string, Output> &outputs() { return outputs_; }
  const std::string &dir() const { return dir_; }

private:
  // The manifest's optional "shift": {name: k} places the named input or
  // output (each tensor of a list) k elements past an aligned allocation,
  // so that a case reaches the kernels' paths for misaligned tensors.
  int64_t shift(const std::string &name) const {
    const Json *shifts = manifest_.find("shift");
    const Json *k = shifts ? shifts->find(name) : nullptr;
    return k ? k->as_int() : 0;
  }
  Tensor load(const std::string &file, int64_t shift) {
    auto it = arrays_.find(file);
    if (it == arrays_.end())
      it = arrays_.emplace(file, read_npy(dir_ + "/" + file)).first;
    Tensor t = it->second.tensor();
    t.data = staged(t.data, it->second.bytes.size(), shift * dtype_size(t.dtype));
    return t;
  }
  // `bytes` host bytes `shift_bytes` past a 256-byte aligned buffer: on a
  // device backend a device copy, on the cpu a host copy.
  void *shifted(void *host, size_t bytes, size_t shift_bytes) {
    if (!on_device_) {
      shifted_.emplace_back(bytes + shift_bytes + 256);
      char *base = shifted_.back().data();
      base += (256 - reinterpret_cast<uintptr_t>(base) % 256) % 256;
      std::memcpy(base + shift_bytes, host, bytes);
      return base + shift_bytes;
    }
    void *base = backend(stream_).allocate(MemoryKind::Device, bytes + shift_bytes, 256);
    if (!base)
      throw std::runtime_error("cannot allocate " + std::to_string(bytes + shift_bytes) +
                               " bytes of device memory for a case");
    device_buffers_.push_back(base);
    char *device = static_cast<char *>(base) + shift_bytes;
    backend(stream_).copy(stream_, device, host, bytes);
    return device;
  }
  // Host bytes as the kernel sees them: themselves on the cpu backend, a
  // device copy otherwise.
  void *staged(void *host, size_t bytes, size_t shift_bytes) {
    if (shift_bytes > 0 && bytes > 0)
      return shifted(host, bytes, shift_bytes);
    return staged(host, bytes);
  }
  void *staged(void *host, size_t bytes) {
    if (!on_device_ || bytes == 0)
      return host;
    void *device = backend(stream_).allocate(MemoryKind::Device, bytes, 256);
    if (!device)
      throw std::runtime_error("cannot allocate " + std::to_string(bytes) +
                               " bytes of device memory for a case");
    device_buffers_.push_back(device);
    backend(stream_).copy(stream_, device, host, bytes);
    return device;
  }
  Tensor make_output(const std::string &key, const Json &entry, int64_t shift = 0) {
    NpyArray buffer;
    if (const Json *file = entry.find("file")) {
      NpyArray expected = read_npy(dir_ + "/" + file->as_string());
      buffer.dtype = expected.dtype;
      buffer.shape = expected.shape;
    } else {
      buffer.dtype = dtype_from_name(entry.at("dtype").as_string());
      std::vector<int64_t> dims;
      for (const Json &d : entry.at("shape").items())
        dims.push_back(d.as_int());
      buffer.shape = Shape::of(dims.data(), static_cast<int>(dims.size()));
    }
    buffer.bytes.assign(static_cast<size_t>(buffer.numel()) * dtype_size(buffer.dtype), 0xFF);
    auto &slot = outputs_[key];
    slot.actual = std::move(buffer);
    slot.entry = &entry;
    Tensor t = slot.actual.tensor();
    if (t.data && shift > 0)  // copied back by finish() on the cpu too
      slot.device = t.data = staged(t.data, slot.actual.bytes.size(), shift * dtype_size(t.dtype));
    else if (on_device_ && t.data)
      slot.device = t.data = staged(t.data, slot.actual.bytes.size());
    return t;
  }

  std::string dir_;
  const Json &manifest_;
  Stream &stream_;
  std::map<std::string, NpyArray> arrays_;
  std::map<std::string, Tensor> views_;
  std::map<std::string, Output> outputs_;
  std::vector<std::vector<float>> workspaces_;
  std::vector<std::vector<char>> shifted_;  // the cpu's shifted copies
  bool on_device_;
  std::vector<void *> device_buffers_;
};

UnaryOp unary_op(const std::string &s) {
  static const std::map<std::string, UnaryOp> ops = {
      {"sqrt", UnaryOp::Sqrt},      {"reciprocal", UnaryOp::Reciprocal},
      {"exp", UnaryOp::Exp},        {"log", UnaryOp::Log},
      {"tanh", UnaryOp::Tanh},      {"erf", UnaryOp::Erf},
      {"sigmoid", UnaryOp::Sigmoid}, {"neg", UnaryOp::Neg},
      {"relu", UnaryOp::Relu},      {"leaky_relu", UnaryOp::LeakyRelu},
      {"gelu", UnaryOp::Gelu},      {"gelu_tanh", UnaryOp::GeluTanh},
      {"not", UnaryOp::Not},        {"softplus", UnaryOp::Softplus},
      {"elu", UnaryOp::Elu},        {"celu", UnaryOp::Celu},
      {"sin", UnaryOp::Sin},        {"cos", UnaryOp::Cos},
      {"floor", UnaryOp::Floor},    {"ceil", UnaryOp::Ceil},
      {"round", UnaryOp::Round}};
  return ops.at(s);
}
BinaryOp binary_op(const std::string &s) {
  static const std::map<std::string, BinaryOp> ops = {{"add", BinaryOp::Add},
                                                      {"sub", BinaryOp::Sub},
                                                      {"mul", BinaryOp::Mul},
                                                      {"div", BinaryOp::Div},
                                                      {"pow", BinaryOp::Pow},
                                                      {"mod", BinaryOp::Mod},
                                                      {"fmod", BinaryOp::Fmod}};
  return ops.at(s);
}
ComparePredicate compare_pred(const std::string &s) {
  static const std::map<std::string, ComparePredicate> ops = {{"eq", ComparePredicate::Eq},
                                                              {"lt", ComparePredicate::Lt},
                                                              {"le", ComparePredicate::Le},
                                                              {"gt", ComparePredicate::Gt},
                                                              {"ge", ComparePredicate::Ge}};
  return ops.at(s);
}
ReduceOp reduce_op(const std::string &s) {
  static const std::map<std::string, ReduceOp> ops = {
      {"sum", ReduceOp::Sum}, {"mean", ReduceOp::Mean}, {"max", ReduceOp::Max},
      {"prod", ReduceOp::Prod}};
  return ops.at(s);
}
Reduction reduction(const std::string &s) {
  static const std::map<std::string, Reduction> ops = {
      {"none", Reduction::None}, {"sum", Reduction::Sum}, {"mean", Reduction::Mean}};
  return ops.at(s);
}

// Loss attributes: ignore_index is null when absent.
void ignore_attr(CaseRun &c, bool &has, int64_t &value) {
  const Json &v = c.attr("ignore_index");
  has = !v.is_null();
  value = has ? v.as_int() : 0;
}

using KernelFn = std::function<void(CaseRun &)>;

const std::map<std::string, KernelFn> &kernels() {
  static const std::map<std::string, KernelFn> table = {
      {"unary",
       [](CaseRun &c) {
         unary(c.stream(), unary_op(c.attr_str("op")), c.in("x"), c.out("y"),
               c.attr_float("alpha"));
       }},
      {"binary",
       [](CaseRun &c) {
         binary(c.stream(), binary_op(c.attr_str("op")), c.in("a"), c.in("b"), c.out("y"));
       }},
      {"compare",
       [](CaseRun &c) {
         compare(c.stream(), compare_pred(c.attr_str("pred")), c.in("a"), c.in("b"), c.out("y"));
       }},
      {"where", [](CaseRun &c) { where(c.stream(), c.in("cond"), c.in("a"), c.in("b"), c.out("y")); }},
      {"cast", [](CaseRun &c) { cast(c.stream(), c.in("x"), c.out("y")); }},
      {"copy", [](CaseRun &c) { copy(c.stream(), c.in("x"), c.out("y")); }},
      {"matmul",
       [](CaseRun &c) {
         Tensor a = c.in("a"), b = c.in("b"), y = c.out("y");
         matmul(c.stream(), a, b, y, c.attr_bool("transpose_a"), c.attr_bool("transpose_b"),
                c.workspace(matmul_workspace_bytes(a.dtype, a.shape, b.shape, y.shape)));
       }},
      {"gemm",
       [](CaseRun &c) {
         Tensor a = c.in("a"), b = c.in("b"), y = c.out("y");
         gemm(c.stream(), a, b, c.opt("c"), y, c.attr_float("alpha"), c.attr_float("beta"),
              c.attr_bool("transpose_a"), c.attr_bool("transpose_b"),
              c.workspace(gemm_workspace_bytes(a.dtype, a.shape, b.shape, y.shape)));
       }},
      {"matmul_bias",
       [](CaseRun &c) {
         Tensor a = c.in("a"), b = c.in("b"), y = c.out("y");
         matmul_bias(c.stream(), a, b, c.in("bias"), c.opt("addend"), y,
                     c.attr_bool("transpose_b"),
                     c.workspace(matmul_workspace_bytes(a.dtype, a.shape, b.shape, y.shape)));
       }},
      {"matmul_bias_grad",
       [](CaseRun &c) {
         Tensor a = c.in("a"), b = c.in("b"), y = c.out("y");
         matmul_bias_grad(
             c.stream(), a, b, y, c.out("bias_grad"), c.attr_bool("transpose_a"),
             c.workspace(matmul_bias_grad_workspace_bytes(a.dtype, a.shape, b.shape, y.shape)));
       }},
      {"matmul_bias_gelu",
       [](CaseRun &c) {
         Tensor a = c.in("a"), b = c.in("b"), y = c.out("y");
         matmul_bias_gelu(c.stream(), a, b, c.in("bias"), y, c.out("pre"),
                          c.attr_bool("transpose_b"),
                          c.workspace(matmul_workspace_bytes(a.dtype, a.shape, b.shape, y.shape)));
       }},
      {"matmul_dgelu",
       [](CaseRun &c) {
         Tensor a = c.in("a"), b = c.in("b"), y = c.out("y");
         matmul_dgelu(c.stream(), a, b, c.in("pre"), y, c.attr_bool("transpose_b"),
                      c.workspace(matmul_workspace_bytes(a.dtype, a.shape, b.shape, y.shape)));
       }},
      {"matmul_lhs_bias_grad",
       [](CaseRun &c) {
         Tensor a = c.in("a"), b = c.in("b"), y = c.out("y");
         matmul_lhs_bias_grad(
             c.stream(), a, b, y, c.out("bias_grad"),
             c.workspace(matmul_lhs_bias_grad_workspace_bytes(a.dtype, a.shape, b.shape, y.shape)));
       }},
      {"softmax",
       [](CaseRun &c) {
         Tensor x = c.in("x");
         const int axis = static_cast<int>(c.attr_int("axis"));
         softmax(c.stream(), x, c.out("y"), axis,
                 c.workspace(softmax_workspace_bytes(x.dtype, x.shape, axis)));
       }},
      {"log_softmax",
       [](CaseRun &c) {
         Tensor x = c.in("x");
         const int axis = static_cast<int>(c.attr_int("axis"));
         log_softmax(c.stream(), x, c.out("y"), axis,
                     c.workspace(softmax_workspace_bytes(x.dtype, x.shape, axis)));
       }},
      {"layer_norm",
       [](CaseRun &c) {
         Tensor x = c.in("x");
         const int axis = static_cast<int>(c.attr_int("axis"));
         Tensor scale = c.in("scale");
         const Tensor *bias = c.opt("bias");
         layer_norm(c.stream(), x, scale, bias, c.out("y"), c.out("mean"),
                    c.out("inv_std_dev"), axis, c.attr_float("epsilon"),
                    c.workspace(layer_norm_workspace_bytes(x.dtype, x.shape, scale.shape,
                                                           bias ? &bias->shape : nullptr, axis)));
       }},
      {"batch_norm",
       [](CaseRun &c) {
         batch_norm(c.stream(), c.in("x"), c.in("scale"), c.in("bias"), c.in("mean"),
                    c.in("var"), c.out("y"), c.attr_float("epsilon"));
       }},
      {"batch_norm_train",
       [](CaseRun &c) {
         batch_norm_train(c.stream(), c.in("x"), c.in("scale"), c.in("bias"),
                          c.in("running_mean"), c.in("running_var"), c.out("y"),
                          c.out("running_mean_out"), c.out("running_var_out"),
                          c.out("saved_mean"), c.out("saved_inv_std"), c.attr_float("epsilon"),
                          c.attr_float("momentum"), c.attr_bool("unbiased_running_var"));
       }},
      {"reduce",
       [](CaseRun &c) {
         std::vector<int64_t> axes = c.attr_ints("axes");
         Tensor x = c.in("x");
         const ReduceOp op = reduce_op(c.attr_str("op"));
         const int n = static_cast<int>(axes.size());
         reduce(c.stream(), op, x, c.out("y"), axes.data(), n,
                c.workspace(reduce_workspace_bytes(op, x.dtype, x.shape, axes.data(), n)));
       }},
      {"transpose",
       [](CaseRun &c) {
         std::vector<int64_t> perm = c.attr_ints("perm");
         transpose(c.stream(), c.in("x"), c.out("y"), perm.data());
       }},
      {"broadcast_to", [](CaseRun &c) { broadcast_to(c.stream(), c.in("x"), c.out("y")); }},
      {"concat",
       [](CaseRun &c) {
         std::vector<Tensor> xs = c.in_list("x");
         concat(c.stream(), xs.data(), static_cast<int>(xs.size()), c.out("y"),
                static_cast<int>(c.attr_int("axis")));
       }},
      {"split",
       [](CaseRun &c) {
         std::vector<Tensor> ys = c.out_list("y");
         split(c.stream(), c.in("x"), ys.data(), static_cast<int>(ys.size()),
               static_cast<int>(c.attr_int("axis")));
       }},
      {"slice",
       [](CaseRun &c) {
         std::vector<int64_t> offsets = c.attr_ints("offsets"), strides = c.attr_ints("strides");
         slice(c.stream(), c.in("x"), c.out("y"), offsets.data(), strides.data());
       }},
      {"gather",
       [](CaseRun &c) {
         gather(c.stream(), c.in("data"), c.in("indices"), c.out("y"),
                static_cast<int>(c.attr_int("axis")));
       }},
      {"scatter",
       [](CaseRun &c) {
         scatter(c.stream(), c.in("data"), c.in("positions"), c.in("updates"), c.out("y"),
                 static_cast<int>(c.attr_int("axis")), static_cast<int>(c.attr_int("reduction")));
       }},
      {"top_k",
       [](CaseRun &c) {
         top_k(c.stream(), c.in("x"), c.out("indices"), static_cast<int>(c.attr_int("axis")),
               c.attr_bool("largest"));
       }},
      {"trilu",
       [](CaseRun &c) {
         trilu(c.stream(), c.in("x"), c.out("y"), c.attr_bool("upper"), c.attr_int("k"));
       }},
      {"dropout",
       [](CaseRun &c) {
         dropout(c.stream(), c.in("x"), c.out("y"), c.out("mask"), c.attr_float("ratio"),
                 c.attr_u64("seed"), c.attr_u64("counter"));
       }},
      {"softmax_cross_entropy",
       [](CaseRun &c) {
         bool has;
         int64_t ignore;
         ignore_attr(c, has, ignore);
         Tensor scores = c.in("scores");
         softmax_cross_entropy(
             c.stream(), scores, c.in("labels"), c.opt("weights"), c.out("loss"),
             c.out("log_prob"), reduction(c.attr_str("reduction")), has, ignore,
             c.workspace(softmax_cross_entropy_workspace_bytes(scores.dtype, scores.shape)));
       }},
      {"softmax_cross_entropy_with_grad",
       [](CaseRun &c) {
         bool has;
         int64_t ignore;
         ignore_attr(c, has, ignore);
         Tensor scores = c.in("scores");
         softmax_cross_entropy_with_grad(
             c.stream(), scores, c.in("labels"), c.in("dloss"), c.opt("weights"), c.out("loss"),
             c.out("dscores"), reduction(c.attr_str("reduction")), has, ignore,
             c.workspace(
                 softmax_cross_entropy_with_grad_workspace_bytes(scores.dtype, scores.shape)));
       }},
      {"nll_loss",
       [](CaseRun &c) {
         bool has;
         int64_t ignore;
         ignore_attr(c, has, ignore);
         nll_loss(c.stream(), c.in("log_prob"), c.in("labels"), c.opt("weights"), c.out("loss"),
                  reduction(c.attr_str("reduction")), has, ignore);
       }},
      {"conv",
       [](CaseRun &c) {
         std::vector<int64_t> st = c.attr_ints("strides"), pads = c.attr_ints("pads"),
                              dil = c.attr_ints("dilations");
         Tensor x = c.in("x"), w = c.in("w"), y = c.out("y");
         const Tensor *bias = c.opt("bias");
         const int64_t group = c.attr_int("group");
         conv(c.stream(), x, w, bias, y, st.data(), pads.data(), dil.data(), group,
              c.workspace(conv_workspace_bytes(x.dtype, x.shape, w.shape, y.shape,
                                               bias != nullptr, st.data(), pads.data(), group)));
       }},
      {"max_pool",
       [](CaseRun &c) {
         std::vector<int64_t> k = c.attr_ints("kernel_shape"), st = c.attr_ints("strides"),
                              pads = c.attr_ints("pads"), dil = c.attr_ints("dilations");
         max_pool(c.stream(), c.in("x"), c.out("y"), k.data(), st.data(), pads.data(), dil.data());
       }},
      {"avg_pool",
       [](CaseRun &c) {
         std::vector<int64_t> k = c.attr_ints("kernel_shape"), st = c.attr_ints("strides"),
                              pads = c.attr_ints("pads");
         avg_pool(c.stream(), c.in("x"), c.out("y"), k.data(), st.data(), pads.data(),
                  c.attr_bool("count_include_pad"));
       }},
      {"adam",
       [](CaseRun &c) {
         adam(c.stream(), c.in("lr"), c.in("step"), c.in("param"), c.in("grad"), c.in("m"),
              c.in("v"), c.out("param_out"), c.out("m_out"), c.out("v_out"), c.attr_float("alpha"),
              c.attr_float("beta"), c.attr_float("epsilon"), c.attr_float("norm_coefficient"),
              c.attr_float("norm_coefficient_post"));
       }},
      {"momentum",
       [](CaseRun &c) {
         MomentumMode mode =
             c.attr_str("mode") == "nesterov" ? MomentumMode::Nesterov : MomentumMode::Standard;
         momentum(c.stream(), c.in("lr"), c.in("step"), c.in("param"), c.in("grad"),
                  c.in("velocity"), c.out("param_out"), c.out("velocity_out"),
                  c.attr_float("alpha"), c.attr_float("beta"), mode,
                  c.attr_float("norm_coefficient"));
       }},
      {"adagrad",
       [](CaseRun &c) {
         adagrad(c.stream(), c.in("lr"), c.in("step"), c.in("param"), c.in("grad"),
                 c.in("accumulator"), c.out("param_out"), c.out("accumulator_out"),
                 c.attr_float("decay_factor"), c.attr_float("epsilon"),
                 c.attr_float("norm_coefficient"));
       }},
      // Backward kernels.
      {"softmax_grad",
       [](CaseRun &c) {
         Tensor y = c.in("y");
         const int axis = static_cast<int>(c.attr_int("axis"));
         softmax_grad(c.stream(), y, c.in("dy"), c.out("dx"), axis,
                      c.workspace(softmax_grad_workspace_bytes(y.dtype, y.shape, axis)));
       }},
      {"log_softmax_grad",
       [](CaseRun &c) {
         Tensor y = c.in("y");
         const int axis = static_cast<int>(c.attr_int("axis"));
         log_softmax_grad(c.stream(), y, c.in("dy"), c.out("dx"), axis,
                          c.workspace(softmax_grad_workspace_bytes(y.dtype, y.shape, axis)));
       }},
      {"attention",
       [](CaseRun &c) {
         attention(c.stream(), c.in("q"), c.in("k"), c.in("v"), c.out("o"), c.out("lse"),
                   c.attr_float("scale"), c.attr_bool("causal"), c.attr_bool("tokens_major"));
       }},
      {"attention_grad",
       [](CaseRun &c) {
         Tensor q = c.in("q");
         attention_grad(c.stream(), q, c.in("k"), c.in("v"), c.in("o"), c.in("lse"), c.in("do"),
                        c.out("dq"), c.out("dk"), c.out("dv"), c.attr_float("scale"),
                        c.attr_bool("causal"), c.attr_bool("tokens_major"),
                        c.workspace(attention_grad_cuda_workspace_bytes(q.dtype, q.shape)));
       }},
      {"attention_packed",
       [](CaseRun &c) {
         attention_packed(c.stream(), c.in("qkv"), c.out("o"), c.out("lse"),
                          c.attr_float("scale"), c.attr_bool("causal"));
       }},
      {"attention_packed_grad",
       [](CaseRun &c) {
         Tensor o = c.in("o");
         attention_packed_grad(c.stream(), c.in("qkv"), o, c.in("lse"), c.in("do"), c.out("dqkv"),
                               c.attr_float("scale"), c.attr_bool("causal"),
                               c.workspace(attention_grad_cuda_workspace_bytes(o.dtype, o.shape)));
       }},
      {"layer_norm_grad",
       [](CaseRun &c) {
         const bool has_bias = c.attr_bool("has_bias");
         Tensor dbias;
         if (has_bias)
           dbias = c.out("dbias");
         Tensor x = c.in("x");
         const int axis = static_cast<int>(c.attr_int("axis"));
         Tensor scale = c.in("scale");
         Tensor dx = c.out("dx");
         const Tensor *addend = c.opt("addend");
         if (addend && c.attr_bool("in_place")) {
           // dx written over the addend: dx's buffer holds it first.
           backend(c.stream()).copy(c.stream(), dx.data, addend->data, dx.nbytes());
           addend = &dx;
         }
         layer_norm_grad_add(
             c.stream(), c.in("dy"), x, scale, c.in("mean"), c.in("inv_std_dev"), addend, dx,
             c.out("dscale"), has_bias ? &dbias : nullptr, axis,
             c.workspace(layer_norm_grad_workspace_bytes(x.dtype, x.shape, scale.shape, axis)));
       }},
      {"batch_norm_grad",
       [](CaseRun &c) {
         batch_norm_grad(c.stream(), c.in("dy"), c.in("x"), c.in("scale"), c.in("saved_mean"),
                         c.in("saved_inv_std"), c.out("dx"), c.out("dscale"), c.out("dbias"));
       }},
      {"softmax_cross_entropy_grad",
       [](CaseRun &c) {
         bool has;
         int64_t ignore;
         ignore_attr(c, has, ignore);
         softmax_cross_entropy_grad(c.stream(), c.in("dloss"), c.in("log_prob"), c.in("labels"),
                                    c.opt("weights"), c.out("dscores"),
                                    reduction(c.attr_str("reduction")), has, ignore);
       }},
      {"nll_loss_grad",
       [](CaseRun &c) {
         bool has;
         int64_t ignore;
         ignore_attr(c, has, ignore);
         nll_loss_grad(c.stream(), c.in("dloss"), c.in("labels"), c.opt("weights"),
                       c.out("dlog_prob"), reduction(c.attr_str("reduction")), has, ignore);
       }},
      {"gather_grad",
       [](CaseRun &c) {
         Tensor ddata = c.out("ddata");
         gather_grad(c.stream(), c.in("dy"), c.in("indices"), ddata,
                     static_cast<int>(c.attr_int("axis")),
                     c.workspace(gather_grad_workspace_bytes(
                         ddata.dtype, ddata.shape, c.in("indices").shape,
                         static_cast<int>(c.attr_int("axis")))));
       }},
      {"slice_grad",
       [](CaseRun &c) {
         std::vector<int64_t> offsets = c.attr_ints("offsets"), strides = c.attr_ints("strides");
         slice_grad(c.stream(), c.in("dy"), c.out("dx"), offsets.data(), strides.data());
       }},
      {"conv_grad_input",
       [](CaseRun &c) {
         std::vector<int64_t> st = c.attr_ints("strides"), pads = c.attr_ints("pads"),
                              dil = c.attr_ints("dilations");
         Tensor dy = c.in("dy"), w = c.in("w"), dx = c.out("dx");
         const int64_t group = c.attr_int("group");
         conv_grad_input(c.stream(), dy, w, dx, st.data(), pads.data(), dil.data(), group,
                         c.workspace(conv_grad_input_workspace_bytes(
                             dx.dtype, dy.shape, w.shape, dx.shape, st.data(), pads.data(),
                             group)));
       }},
      {"conv_grad_weight",
       [](CaseRun &c) {
         std::vector<int64_t> st = c.attr_ints("strides"), pads = c.attr_ints("pads"),
                              dil = c.attr_ints("dilations");
         Tensor dy = c.in("dy"), x = c.in("x"), dw = c.out("dw");
         const int64_t group = c.attr_int("group");
         conv_grad_weight(c.stream(), dy, x, dw, st.data(), pads.data(), dil.data(), group,
                          c.workspace(conv_grad_weight_workspace_bytes(
                              dw.dtype, dy.shape, x.shape, dw.shape, st.data(), pads.data(),
                              group)));
       }},
      {"max_pool_grad",
       [](CaseRun &c) {
         std::vector<int64_t> k = c.attr_ints("kernel_shape"), st = c.attr_ints("strides"),
                              pads = c.attr_ints("pads"), dil = c.attr_ints("dilations");
         Tensor dx = c.out("dx");
         max_pool_grad(c.stream(), c.in("dy"), c.in("x"), dx, k.data(), st.data(),
                       pads.data(), dil.data(),
                       c.workspace(pool_grad_workspace_bytes(dx.dtype, dx.shape)));
       }},
      {"avg_pool_grad",
       [](CaseRun &c) {
         std::vector<int64_t> k = c.attr_ints("kernel_shape"), st = c.attr_ints("strides"),
                              pads = c.attr_ints("pads");
         Tensor dx = c.out("dx");
         avg_pool_grad(c.stream(), c.in("dy"), dx, k.data(), st.data(), pads.data(),
                       c.attr_bool("count_include_pad"),
                       c.workspace(pool_grad_workspace_bytes(dx.dtype, dx.shape)));
       }},
      // torch.optim steps.
      {"adamw",
       [](CaseRun &c) {
         adamw(c.stream(), c.in("lr"), c.in("step"), c.in("param"), c.in("grad"), c.in("m"),
               c.in("v"), c.out("param_out"), c.out("m_out"), c.out("v_out"), c.attr_float("beta1"),
               c.attr_float("beta2"), c.attr_float("epsilon"), c.attr_float("weight_decay"),
               c.attr_bool("decoupled"), c.opt("grad_scale"));
       }},
      {"adamw_multi",
       [](CaseRun &c) {
         std::vector<Tensor> ps = c.in_list("params"), gs = c.in_list("grads"),
                             ms = c.in_list("ms"), vs = c.in_list("vs"),
                             ps_out = c.out_list("params_out"), ms_out = c.out_list("ms_out"),
                             vs_out = c.out_list("vs_out");
         // Mixed precision's 16-bit copies of the updated parameters, when
         // the case has them.
         std::vector<Tensor> copies;
         if (c.has_output("params_copy"))
           copies = c.out_list("params_copy");
         adamw_multi(c.stream(), c.in("lr"), c.in("step"), static_cast<int>(ps.size()), ps.data(),
                     gs.data(), ms.data(), vs.data(), ps_out.data(), ms_out.data(),
                     vs_out.data(), c.attr_float("beta1"), c.attr_float("beta2"),
                     c.attr_float("epsilon"), c.attr_float("weight_decay"),
                     c.attr_bool("decoupled"), c.opt("grad_scale"),
                     copies.empty() ? nullptr : copies.data());
       }},
      {"sgd",
       [](CaseRun &c) {
         sgd(c.stream(), c.in("lr"), c.in("step"), c.in("param"), c.in("grad"), c.in("velocity"),
             c.out("param_out"), c.out("velocity_out"), c.attr_float("momentum"),
             c.attr_float("dampening"), c.attr_float("weight_decay"), c.attr_bool("nesterov"),
             c.opt("grad_scale"));
       }},
      {"lion",
       [](CaseRun &c) {
         lion(c.stream(), c.in("lr"), c.in("param"), c.in("grad"), c.in("m"), c.out("param_out"),
              c.out("m_out"), c.attr_float("beta1"), c.attr_float("beta2"),
              c.attr_float("weight_decay"), c.opt("grad_scale"));
       }},
      {"sum_of_squares",
       [](CaseRun &c) {
         std::vector<Tensor> ts = c.in_list("tensors");
         sum_of_squares(c.stream(), ts.data(), static_cast<int>(ts.size()), c.out("out"));
       }},
      // The backend's non-finite check of a step's gradients (not a
      // kernels.h function): the first tensor holding a NaN or an infinity.
      {"first_nonfinite",
       [](CaseRun &c) {
         std::vector<Tensor> ts = c.in_list("tensors");
         c.put_i64("first", backend(c.stream()).first_nonfinite(c.stream(), ts.data(),
                                                                 static_cast<int64_t>(ts.size())));
       }},
  };
  return table;
}

Json read_manifest(const std::string &dir) {
  std::ifstream in(dir + "/manifest.json");
  if (!in)
    throw std::runtime_error("cannot read " + dir + "/manifest.json");
  std::stringstream ss;
  ss << in.rdbuf();
  return Json::parse(ss.str());
}

// The cuda kernels sum in other orders than PyTorch's and the cpu's, and
// use CUDA's libm: an output that a case does not require to be exact is
// compared with at least f32 1e-5 relative (1e-5 absolute), f16 1e-2
// (1e-3), bf16 2e-2 (4e-3). Exact outputs (moves, integers, casts) stay
// exact.
void cuda_tolerance(DType dtype, double &rtol, double &atol) {
  if (rtol == 0.0 && atol == 0.0)
    return;
  const double r = dtype == DType::BF16 ? 2e-2 : dtype == DType::F16 ? 1e-2 : 1e-5;
  const double a = dtype == DType::BF16 ? 4e-3 : dtype == DType::F16 ? 1e-3 : 1e-5;
  rtol = std::max(rtol, r);
  atol = std::max(atol, a);
}

// Runs a case on `threads` threads; returns the outputs by name.
std::map<std::string, NpyArray> run_case(const std::string &dir, const Json &manifest,
                                         int threads) {
  const std::string kernel = manifest.at("kernel").as_string();
  auto it = kernels().find(kernel);
  if (it == kernels().end())
    throw std::runtime_error("no runner for kernel '" + kernel + "'");
  Stream stream(backend().kind(), threads);
  CaseRun run(dir, manifest, stream);
  const Json *error = manifest.find("error");
  if (error) {
    try {
      it->second(run);
      run.finish();
    } catch (const Error &e) {
      std::string message = e.what();
      EXPECT_NE(message.find(error->as_string()), std::string::npos)
          << "dsrt::Error message \"" << message << "\" lacks \"" << error->as_string() << "\"";
      return {};
    }
    ADD_FAILURE() << kernel << " did not throw dsrt::Error (expected \"" << error->as_string()
                  << "\")";
    return {};
  }
  it->second(run);
  run.finish();
  std::map<std::string, NpyArray> result;
  for (auto &[name, output] : run.outputs()) {
    const Json &entry = *output.entry;
    NpyArray expected = read_npy(dir + "/" + entry.at("file").as_string());
    double rtol = entry.at("rtol").as_double(), atol = entry.at("atol").as_double();
    if (stream.backend() != Backend::Cpu)
      cuda_tolerance(expected.dtype, rtol, atol);
    Comparison cmp = compare_tensors(output.actual.tensor(), expected.tensor(), rtol, atol);
    EXPECT_TRUE(cmp.ok) << "output " << name << " of " << dir << ": " << cmp.message;
    result.emplace(name, std::move(output.actual));
  }
  return result;
}

class KernelCaseTest : public testing::Test {
public:
  explicit KernelCaseTest(std::string dir) : dir_(std::move(dir)) {}
  void TestBody() override {
    Json manifest = read_manifest(dir_);
    std::map<std::string, NpyArray> two = run_case(dir_, manifest, 2);
    if (HasFailure() || manifest.find("error"))
      return;
    std::map<std::string, NpyArray> one = run_case(dir_, manifest, 1);
    // OpenBLAS blocks differently for different thread counts, so only the
    // kernels that do not call it must reproduce the same bytes.
    const std::string kernel = manifest.at("kernel").as_string();
    if (kernel == "matmul" || kernel == "gemm" || kernel == "matmul_bias" ||
        kernel == "matmul_bias_grad" || kernel == "matmul_lhs_bias_grad" ||
        kernel == "matmul_bias_gelu" || kernel == "matmul_dgelu" || kernel == "conv" ||
        kernel == "conv_grad_input" || kernel == "conv_grad_weight")
      return;
    for (auto &[name, array] : two)
      EXPECT_TRUE(array.bytes == one.at(name).bytes)
          << "output " << name << " differs between 1 and 2 threads";
  }

private:
  std::string dir_;
};

class CaseCountTest : public testing::Test {
public:
  CaseCountTest(std::string root, int64_t found) : root_(std::move(root)), found_(found) {}
  void TestBody() override {
    std::ifstream in(root_ + "/count.txt");
    int64_t written = -1;
    in >> written;
    ASSERT_GT(written, 0) << "no count.txt in " << root_ << ": run make_cases.py --out " << root_;
    EXPECT_EQ(found_, written) << "case directories found vs written by make_cases.py";
    // Every kernel of kernels.h has cases.
    for (const auto &[kernel, fn] : kernels()) {
      bool any = false;
      for (const auto &entry : fs::directory_iterator(root_))
        any = any || entry.path().filename().string().rfind(kernel + ".", 0) == 0;
      EXPECT_TRUE(any) << "no case for kernel " << kernel;
    }
  }

private:
  std::string root_;
  int64_t found_;
};

}  // namespace

int register_kernel_cases(const std::string &root) {
  if (!fs::is_directory(root)) {
    std::fprintf(stderr, "dsrt_kernel_tests: --cases %s is not a directory\n", root.c_str());
    return -1;
  }
  std::vector<std::string> dirs;
  for (const auto &entry : fs::directory_iterator(root))
    if (entry.is_directory() && fs::exists(entry.path() / "manifest.json"))
      dirs.push_back(entry.path().filename().string());
  std::sort(dirs.begin(), dirs.end());
  for (const std::string &d : dirs) {
    std::string kernel = d.substr(0, d.find('.'));
    std::string name = d.substr(d.find('.') + 1);
    std::string path = root + "/" + d;
    testing::RegisterTest(("Kernel_" + kernel).c_str(), name.c_str(), nullptr, nullptr, __FILE__,
                          __LINE__, [path]() -> testing::Test * { return new KernelCaseTest(path); });
  }
  const int64_t found = static_cast<int64_t>(dirs.size());
  testing::RegisterTest("Cases", "AllWrittenCasesFound", nullptr, nullptr, __FILE__, __LINE__,
                        [root, found]() -> testing::Test * { return new CaseCountTest(root, found); });
  return static_cast<int>(dirs.size());
}

}  // namespace dsrt_test

//===- dsopt.cpp - the dsopt compiler driver ------------------------------===//
//
//   dsopt model.onnx -o out/                compile: out/run, out/plan.json,
//                                           out/plan.txt, out/src/
//   dsopt model.onnx --emit=mlir            the ds IR after import and cleanup
//   dsopt model.onnx --emit=summary         inputs, parameters, ops, cost
//   dsopt model.onnx --emit=plan            plan.json, without building
//   dsopt model.onnx --emit=cpp             the generated C++ source
//   dsopt model.onnx --config ds_config.json --print-config
//                                           the resolved training config
//
// The driver imports the model, runs the pass pipeline (every stage can be
// printed with --mlir-print-ir-after-all) and writes what --emit asks for;
// without --emit it compiles the model into an executable.
//
//===----------------------------------------------------------------------===//

#include "Training.h"
#include "dsopt/Transforms/TrainingPipeline.h"

#include "dsopt/Analysis/ModelSummary.h"
#include "dsopt/Analysis/Plan.h"
#include "dsopt/Config/TrainConfig.h"
#include "dsopt/Conversion/Passes.h"
#include "dsopt/Conversion/PipelineMain.h"
#include "dsopt/Import/OnnxImporter.h"
#include "dsopt/Pipeline/Schedule.h"
#include "dsopt/Target/Program.h"
#include "dsopt/Transforms/Passes.h"

#include "ds/IR/DsDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/AsmState.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Dialect/Shard/IR/ShardDialect.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Support/FileUtilities.h"
#include "mlir/Support/Timing.h"
#include "mlir/Target/Cpp/CppEmitter.h"
#include "mlir/Transforms/Passes.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Process.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/WithColor.h"

#include <cmath>
#include <cstdio>
#include <unistd.h>

using namespace mlir;
namespace cl = llvm::cl;

namespace {
cl::OptionCategory inputCategory("Input options");
cl::OptionCategory outputCategory("Output options");

cl::opt<std::string> inputFile(cl::Positional, cl::desc("<model.onnx>"),
                               cl::cat(inputCategory));

cl::list<std::string>
    dims("dim",
         cl::desc("Size of a symbolic dimension of the graph inputs "
                  "(repeatable, or comma-separated)"),
         cl::value_desc("NAME=VALUE"), cl::CommaSeparated,
         cl::cat(inputCategory));

// Parsed by the driver rather than by cl::opt<int64_t>, whose messages for a
// bad value ("value invalid for long argument!") do not say what is wanted.
cl::opt<std::string> batch(
    "batch",
    cl::desc("Size of the leading axis of graph inputs whose leading axis "
             "is symbolic"),
    cl::value_desc("N"), cl::cat(inputCategory));

enum class EmitKind {
  Build,
  Mlir,
  Summary,
  Plan,
  Cpp,
  TrainMlir,
  TrainCpp,
  Trace
};
cl::opt<EmitKind> emit(
    "emit",
    cl::desc("What to produce (default: compile to the -o directory)"),
    cl::init(EmitKind::Build),
    cl::values(clEnumValN(EmitKind::Mlir, "mlir",
                          "the ds IR after import and cleanup"),
               clEnumValN(EmitKind::Summary, "summary",
                          "inputs, outputs, parameters, op histogram and "
                          "cost of the model"),
               clEnumValN(EmitKind::Plan, "plan",
                          "plan.json: memory plan, buffers and ops, without "
                          "building anything"),
               clEnumValN(EmitKind::Cpp, "cpp", "the generated C++ source"),
               clEnumValN(EmitKind::TrainMlir, "train-mlir",
                          "the training step's ds IR (@micro_step and "
                          "@optimizer_step), memory-planned"),
               clEnumValN(EmitKind::TrainCpp, "train-cpp",
                          "the generated C++ source of the training "
                          "program"),
               clEnumValN(EmitKind::Trace, "trace",
                          "Chrome trace JSON of the simulated pipeline "
                          "schedule of one training step (--pp)")),
    cl::cat(outputCategory));

cl::opt<std::string> outputFile(
    "o",
    cl::desc("Output directory when compiling; output file with --emit "
             "(default: stdout)"),
    cl::value_desc("path"), cl::init("-"), cl::cat(outputCategory));

cl::opt<std::string> targetFlag(
    "target",
    cl::desc("Backend the program is built for: cpu (C++ loops, OpenMP, "
             "MPI; default) or cuda (fused loops as CUDA kernels, compiled "
             "with nvcc against libdsrt_cuda)"),
    cl::value_desc("cpu|cuda"), cl::init("cpu"), cl::cat(outputCategory));

cl::opt<std::string> cudaArch(
    "cuda-arch",
    cl::desc("GPU architecture of --target cuda's kernels (default: sm_90, "
             "H100/H200)"),
    cl::value_desc("sm_NN"), cl::init("sm_90"), cl::cat(outputCategory));

cl::opt<std::string> hostCompiler(
    "cxx", cl::desc("Host C++ compiler for the generated program (default: "
                    "$CXX, else c++)"),
    cl::value_desc("path"), cl::cat(outputCategory));

cl::opt<unsigned> hostOptLevel(
    "host-opt-level",
    cl::desc("The -O level the host compiler builds the generated programs "
             "at, 0-3 (default: 3); the numbers do not depend on it"),
    cl::value_desc("N"), cl::init(3), cl::cat(outputCategory));

cl::opt<std::string> symbolPrefix(
    "symbol-prefix",
    cl::desc("Prefix of the generated program's functions and constants "
             "(default: dsopt_), so several programs can share an executable"),
    cl::value_desc("prefix"), cl::init("dsopt_"), cl::cat(outputCategory));

cl::opt<bool> noMain("no-main",
                     cl::desc("With --emit=cpp, leave out main(): the program "
                              "is linked into another executable"),
                     cl::cat(outputCategory));

cl::opt<bool> sourcesOnly(
    "sources-only",
    cl::desc("With -o: write the programs' source tree (src/, its "
             "CMakeLists.txt), plan.json and plan.txt, and build nothing; "
             "needs no compiler, toolkit or libdsrt"),
    cl::cat(outputCategory));

cl::opt<bool> flatCodegen(
    "flat-codegen",
    cl::desc("Emit one kernel call per op instead of one function per "
             "distinct repeated layer (the reference of "
             "bench/compile_bench.py)"),
    cl::cat(outputCategory));

cl::opt<bool> printBuildFlags(
    "print-build-flags",
    cl::desc("Print how generated programs are compiled and linked against "
             "libdsrt, and exit"),
    cl::cat(outputCategory));

cl::opt<bool> noFuse(
    "no-fuse",
    cl::desc("Do not fuse elementwise chains into single loops"),
    cl::cat(outputCategory));

cl::opt<bool> fuseAttention(
    "fuse-attention",
    cl::desc("Fuse scaled-dot-product attention (q kᵀ, scale, causal mask, "
             "softmax, times v) into one op whose kernels never materialise "
             "the [T, T] scores (ds-fuse-attention)"),
    cl::cat(outputCategory));

cl::opt<bool> noFuseParamCopy(
    "no-fuse-param-copy",
    cl::desc("With bf16/fp16, make the 16-bit parameter copy a separate "
             "cast after the optimizer update rather than in its loop"),
    cl::cat(outputCategory));

cl::opt<bool> noFuseLossGrad(
    "no-fuse-loss-grad",
    cl::desc("Keep softmax cross-entropy and its gradient two ops, the "
             "log-probabilities stored between them (ds-fuse-loss-grad)"),
    cl::cat(outputCategory));

cl::opt<bool> noPadVocab(
    "no-pad-vocab",
    cl::desc("With --target cuda, keep a 16-bit LM head's vocabulary as it "
             "is rather than padded to a multiple of 8 (ds-pad-vocab)"),
    cl::cat(outputCategory));

cl::opt<bool> listOps("list-ops",
                      cl::desc("List the supported ONNX operators and exit"),
                      cl::cat(outputCategory));

cl::opt<bool> noCanonicalize(
    "no-canonicalize",
    cl::desc("Print the IR exactly as imported, without canonicalization"),
    cl::cat(outputCategory));

//===----------------------------------------------------------------------===//
// Training options: a DeepSpeed config and flags that override its values.
// Numbers are parsed by the driver (see parseTrainNumber) so a bad value gets
// a message saying what is wanted.
//===----------------------------------------------------------------------===//

cl::OptionCategory trainingCategory("Training options");

cl::opt<std::string> configFile(
    "config",
    cl::desc("DeepSpeed config (ds_config.json): optimizer, scheduler, "
             "gradient clipping, batch sizes (see docs/cli.md)"),
    cl::value_desc("file"), cl::cat(trainingCategory));

cl::opt<std::string> optimizerFlag(
    "optimizer",
    cl::desc("Optimizer, with PyTorch's defaults: adamw, adam (L2 weight "
             "decay), sgd (needs --lr) or lion"),
    cl::value_desc("adamw|adam|sgd|lion"), cl::cat(trainingCategory));

cl::opt<std::string> lrFlag("lr", cl::desc("Learning rate"),
                            cl::value_desc("F"), cl::cat(trainingCategory));

cl::opt<std::string> weightDecayFlag("weight-decay",
                                     cl::desc("Weight decay"),
                                     cl::value_desc("F"),
                                     cl::cat(trainingCategory));

cl::opt<std::string> betasFlag("betas",
                               cl::desc("Adam and Lion betas, each in [0, 1)"),
                               cl::value_desc("B1,B2"),
                               cl::cat(trainingCategory));

cl::opt<std::string> epsFlag("eps", cl::desc("Adam epsilon"),
                             cl::value_desc("F"), cl::cat(trainingCategory));

cl::opt<std::string> momentumFlag("momentum", cl::desc("SGD momentum"),
                                  cl::value_desc("F"),
                                  cl::cat(trainingCategory));

cl::opt<bool> nesterovFlag("nesterov",
                           cl::desc("SGD with Nesterov momentum"),
                           cl::cat(trainingCategory));

cl::opt<std::string> clipFlag(
    "clip",
    cl::desc("Clip the global gradient norm to F (gradient_clipping; 0: off)"),
    cl::value_desc("F"), cl::cat(trainingCategory));

cl::opt<std::string> gradAccumFlag(
    "grad-accum", cl::desc("Gradient accumulation steps"),
    cl::value_desc("N"), cl::cat(trainingCategory));

cl::opt<std::string> trainBatchFlag(
    "train-batch",
    cl::desc("Samples per optimizer step over all data-parallel ranks "
             "(train_batch_size)"),
    cl::value_desc("N"), cl::cat(trainingCategory));

cl::opt<std::string> microBatchFlag(
    "micro-batch",
    cl::desc("Samples per forward/backward pass on one rank "
             "(train_micro_batch_size_per_gpu)"),
    cl::value_desc("N"), cl::cat(trainingCategory));

cl::opt<std::string> zeroFlag(
    "zero",
    cl::desc("ZeRO stage (zero_optimization.stage): 0 averages gradients, 1 "
             "also shards optimizer states, 2 also gradients, 3 also "
             "parameters"),
    cl::value_desc("0|1|2|3"), cl::cat(trainingCategory));

cl::opt<std::string> precisionFlag(
    "precision",
    cl::desc("Training precision: fp32, or bf16 / fp16 with fp32 master "
             "weights (overrides the config's bf16.enabled and "
             "fp16.enabled)"),
    cl::value_desc("fp32|bf16|fp16"), cl::cat(trainingCategory));
cl::opt<std::string> offloadOptimizerFlag(
    "offload-optimizer",
    cl::desc("Where the optimizer states and their step live: on the "
             "device (none), in pinned host memory (cpu) or in files under "
             "--nvme-path (nvme) (overrides the config's "
             "zero_optimization.offload_optimizer.device)"),
    cl::value_desc("none|cpu|nvme"), cl::cat(trainingCategory));
cl::opt<std::string> offloadParamFlag(
    "offload-param",
    cl::desc("Where ZeRO-3's parameter shards live: on the device (none), "
             "in host memory (cpu) or in files under --nvme-path (nvme); "
             "needs --zero 3 (overrides the config's "
             "zero_optimization.offload_param.device)"),
    cl::value_desc("none|cpu|nvme"), cl::cat(trainingCategory));
cl::opt<std::string> nvmePathFlag(
    "nvme-path",
    cl::desc("The directory of the NVMe files of offloaded optimizer states "
             "and parameters (zero_optimization.offload_optimizer.nvme_path "
             "and, where offload_param is given, its nvme_path)"),
    cl::value_desc("dir"), cl::cat(trainingCategory));

cl::opt<std::string> dpFlag(
    "dp",
    cl::desc("Data-parallel ranks the program is compiled for (default: "
             "--world, else 1)"),
    cl::value_desc("N"), cl::cat(trainingCategory));

cl::opt<std::string> worldFlag(
    "world",
    cl::desc("Ranks of the job (mpirun -np); must equal the grid's size "
             "dp * pp * tp"),
    cl::value_desc("N"), cl::cat(trainingCategory));

cl::opt<std::string> tpFlag(
    "tp",
    cl::desc("Tensor-parallel ranks (tensor_parallel.autotp_size, default "
             "1): Megatron's layout, found from the graph"),
    cl::value_desc("N"), cl::cat(trainingCategory));

cl::opt<bool> sequenceParallelFlag(
    "sequence-parallel",
    cl::desc("Megatron's sequence parallelism with --tp "
             "(tensor_parallel.sequence_parallel): norms, dropout and "
             "residual adds split along the sequence, each tp all-reduce an "
             "all-gather and a reduce-scatter"),
    cl::cat(trainingCategory));

cl::opt<std::string> ppFlag(
    "pp",
    cl::desc("Pipeline stages (default 1): ranks of the pp axis, each "
             "running its stages' part of the training step"),
    cl::value_desc("N"), cl::cat(trainingCategory));

cl::opt<std::string> microbatchesFlag(
    "microbatches",
    cl::desc("Micro-batches per step flowing through the pipeline (the "
             "gradient accumulation steps)"),
    cl::value_desc("M"), cl::cat(trainingCategory));

cl::opt<std::string> scheduleFlag(
    "schedule",
    cl::desc("Pipeline schedule: gpipe, 1f1b (default), interleaved or "
             "zb-h1"),
    cl::value_desc("gpipe|1f1b|interleaved|zb-h1"),
    cl::cat(trainingCategory));

cl::opt<std::string> chunksFlag(
    "chunks",
    cl::desc("Model chunks per pipeline rank (default 2 for interleaved, "
             "else 1)"),
    cl::value_desc("V"), cl::cat(trainingCategory));

cl::opt<std::string> stepsPerPrintFlag(
    "steps-per-print", cl::desc("Print the loss every N steps (default 1)"),
    cl::value_desc("N"), cl::cat(trainingCategory));

cl::opt<bool> printConfig(
    "print-config",
    cl::desc("Print the resolved training config as JSON (to -o or stdout) "
             "and exit"),
    cl::cat(trainingCategory));

cl::opt<std::string> lossFlag(
    "loss",
    cl::desc("The graph output that is the loss (default: the only scalar "
             "floating-point output)"),
    cl::value_desc("NAME"), cl::cat(trainingCategory));

cl::list<std::string> frozenFlag(
    "frozen",
    cl::desc("Initializers that do not train: names or glob patterns, "
             "comma-separated (e.g. --frozen 'cos,sin,*.running_*')"),
    cl::value_desc("NAMES"), cl::CommaSeparated, cl::cat(trainingCategory));

cl::opt<bool> gradientsFlag(
    "gradients",
    cl::desc("Also build OUTDIR/gradients: one forward and backward pass "
             "that writes the loss and every trainable parameter's gradient "
             "(<name>.grad.npy)"),
    cl::cat(trainingCategory));

cl::opt<bool> noTrainFlag(
    "no-train",
    cl::desc("Build only the forward program (OUTDIR/run), even for a "
             "training graph"),
    cl::cat(trainingCategory));

cl::opt<bool> noForwardFlag(
    "no-forward",
    cl::desc("Do not build the forward program (OUTDIR/run) of a training "
             "graph: only train (and with --gradients, gradients)"),
    cl::cat(trainingCategory));

int fail(const llvm::Twine &message) {
  llvm::WithColor::error(llvm::errs(), "dsopt") << message << "\n";
  return 1;
}

/// A build's output directory, written in a staging directory beside it
/// and put in place only once everything in it was built: a build that
/// fails (a compile error, a full disk) leaves no half-written output, and
/// an earlier build's directory stays as it was.
class StagedOutput {
public:
  explicit StagedOutput(std::string final) : final(std::move(final)) {
    llvm::SmallString<256> path(llvm::StringRef(this->final).rtrim('/'));
    path += ".partial-" + std::to_string(llvm::sys::Process::getProcessId());
    staging = path.str().str();
  }
  ~StagedOutput() {
    if (!committed)
      llvm::sys::fs::remove_directories(staging);
  }
  const std::string &path() const { return staging; }
  /// `text` with the staging directory's path spelled as the final one's.
  std::string finalSpelling(llvm::StringRef text) const {
    std::string out = text.str();
    for (size_t at = out.find(staging); at != std::string::npos;
         at = out.find(staging, at + final.size()))
      out.replace(at, staging.size(), final);
    return out;
  }
  llvm::Error create() {
    // Found before anything is built, not after.
    if (llvm::sys::fs::exists(final) && !llvm::sys::fs::is_directory(final))
      return llvm::createStringError(
          std::make_error_code(std::errc::not_a_directory),
          "output directory '" + final + "' exists and is not a directory");
    llvm::sys::fs::remove_directories(staging);
    if (std::error_code ec = llvm::sys::fs::create_directories(staging))
      return llvm::createStringError(ec, "cannot create output directory '" +
                                             staging + "': " + ec.message());
    return llvm::Error::success();
  }
  /// Replaces the final directory (if any) by the staged one.
  llvm::Error commit() {
    std::string old;
    if (llvm::sys::fs::exists(final)) {
      if (!llvm::sys::fs::is_directory(final))
        return llvm::createStringError(
            std::make_error_code(std::errc::not_a_directory),
            "'" + final + "' exists and is not a directory");
      old = staging + ".old";
      llvm::sys::fs::remove_directories(old);
      if (std::error_code ec = llvm::sys::fs::rename(final, old))
        return llvm::createStringError(ec, "cannot replace '" + final +
                                               "': " + ec.message());
    }
    if (std::error_code ec = llvm::sys::fs::rename(staging, final)) {
      if (!old.empty())
        llvm::sys::fs::rename(old, final);
      return llvm::createStringError(ec, "cannot move the build into '" +
                                             final + "': " + ec.message());
    }
    committed = true;
    if (!old.empty())
      llvm::sys::fs::remove_directories(old);
    return llvm::Error::success();
  }

private:
  std::string final, staging;
  bool committed = false;
};

/// `text` with control characters other than newlines escaped: import
/// errors quote names from the model file, which must not be able to drive
/// the user's terminal.
std::string printable(llvm::StringRef text) {
  std::string result;
  for (unsigned char c : text) {
    if ((c < 0x20 && c != '\n' && c != '\t') || c == 0x7f) {
      result += "\\x";
      result += llvm::hexdigit(c >> 4, /*LowerCase=*/true);
      result += llvm::hexdigit(c & 15, /*LowerCase=*/true);
    } else {
      result += static_cast<char>(c);
    }
  }
  return result;
}

/// Reports command-line errors from LLVM's parser in dsopt's format: the
/// first line as the error, the rest (suggestions) as notes.
int failCommandLine(llvm::StringRef text) {
  llvm::SmallVector<llvm::StringRef> lines;
  text.trim().split(lines, '\n', -1, /*KeepEmpty=*/false);
  if (lines.empty())
    return fail("invalid command line (see --help)");
  for (auto [i, line] : llvm::enumerate(lines)) {
    line = line.trim();
    line.consume_front("dsopt: ");
    if (i == 0)
      fail(line);
    else
      llvm::WithColor::note(llvm::errs(), "dsopt") << line << "\n";
  }
  return 1;
}

/// Parses the command line with stderr captured: LLVM's parser prints
/// errors about option values straight to stderr in its own format, and
/// dsopt's errors all start with `dsopt: error:`. Returns false with the
/// parser's messages in `errors`.
bool parseCommandLine(int argc, char **argv, llvm::StringRef overview,
                      std::string &errors) {
  llvm::raw_string_ostream stream(errors);
  llvm::errs().flush();
  int savedStderr = ::dup(STDERR_FILENO);
  std::FILE *capture = savedStderr < 0 ? nullptr : std::tmpfile();
  if (!capture) {
    if (savedStderr >= 0)
      ::close(savedStderr);
    return cl::ParseCommandLineOptions(argc, argv, overview, &stream);
  }
  ::dup2(::fileno(capture), STDERR_FILENO);
  bool ok = cl::ParseCommandLineOptions(argc, argv, overview, &stream);
  llvm::errs().flush();
  ::dup2(savedStderr, STDERR_FILENO);
  ::close(savedStderr);
  std::string captured;
  std::rewind(capture);
  char chunk[4096];
  for (size_t n; (n = std::fread(chunk, 1, sizeof chunk, capture)) > 0;)
    captured.append(chunk, n);
  std::fclose(capture);
  if (ok) {
    llvm::errs() << captured; // warnings, if any, pass through unchanged
    return true;
  }
  errors = captured + errors;
  return false;
}

/// A dimension size given on the command line: a positive integer.
std::optional<int64_t> parseSize(llvm::StringRef text) {
  int64_t size;
  if (text.trim() != text || text.getAsInteger(10, size) || size < 1)
    return std::nullopt;
  return size;
}

/// A number given to a training flag: finite and not negative. Errors name
/// the flag.
llvm::Expected<double> parseTrainNumber(llvm::StringRef flag,
                                        llvm::StringRef text) {
  double value;
  if (text.trim() != text || text.empty() || text.getAsDouble(value) ||
      !std::isfinite(value) || value < 0)
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        "--" + flag + " expects a non-negative number, got '" + text + "'");
  return value;
}

/// The command-line overrides of the training config.
llvm::Expected<dsopt::TrainConfigOverrides> trainOverrides() {
  dsopt::TrainConfigOverrides overrides;
  auto error = [](const llvm::Twine &message) {
    return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
  };
  if (optimizerFlag.getNumOccurrences()) {
    std::string name = llvm::StringRef(optimizerFlag).lower();
    if (name == "adamw")
      overrides.optimizer = dsopt::OptimizerKind::AdamW;
    else if (name == "adam")
      overrides.optimizer = dsopt::OptimizerKind::Adam;
    else if (name == "sgd")
      overrides.optimizer = dsopt::OptimizerKind::SGD;
    else if (name == "lion")
      overrides.optimizer = dsopt::OptimizerKind::Lion;
    else
      return error("--optimizer expects adamw, adam, sgd or lion, got '" +
                   optimizerFlag + "'");
  }
  struct NumberFlag {
    cl::opt<std::string> &option;
    std::optional<double> &value;
  };
  NumberFlag numbers[] = {{lrFlag, overrides.lr},
                          {weightDecayFlag, overrides.weightDecay},
                          {epsFlag, overrides.eps},
                          {momentumFlag, overrides.momentum},
                          {clipFlag, overrides.gradientClipping}};
  for (NumberFlag &flag : numbers) {
    if (!flag.option.getNumOccurrences())
      continue;
    llvm::Expected<double> value =
        parseTrainNumber(flag.option.ArgStr, flag.option);
    if (!value)
      return value.takeError();
    flag.value = *value;
  }
  if (betasFlag.getNumOccurrences()) {
    auto [first, second] = llvm::StringRef(betasFlag).split(',');
    double b1, b2;
    if (!llvm::StringRef(betasFlag).contains(',') || first.trim() != first ||
        second.trim() != second || first.getAsDouble(b1) ||
        second.getAsDouble(b2) || !(b1 >= 0 && b1 < 1) ||
        !(b2 >= 0 && b2 < 1))
      return error("--betas expects two numbers in [0, 1) as B1,B2, got '" +
                   betasFlag + "'");
    overrides.betas = {b1, b2};
  }
  overrides.nesterov = nesterovFlag;
  if (zeroFlag.getNumOccurrences()) {
    llvm::StringRef text(zeroFlag);
    int64_t stage;
    if (text.getAsInteger(10, stage) || stage < 0 || stage > 3)
      return error("--zero expects a ZeRO stage 0, 1, 2 or 3, got '" +
                   zeroFlag + "'");
    overrides.zeroStage = stage;
  }
  if (precisionFlag.getNumOccurrences()) {
    std::optional<dsopt::Precision> precision =
        dsopt::parsePrecision(precisionFlag);
    if (!precision)
      return error("--precision expects fp32, bf16 or fp16, got '" +
                   precisionFlag + "'");
    overrides.precision = precision;
  }
  for (auto [flag, out] :
       {std::pair{&offloadOptimizerFlag, &overrides.offloadOptimizer},
        {&offloadParamFlag, &overrides.offloadParam}}) {
    if (!flag->getNumOccurrences())
      continue;
    *out = dsopt::parseOffloadDevice(*flag);
    if (!*out)
      return error("--" + flag->ArgStr.str() +
                   " expects none, cpu or nvme, got '" + *flag + "'");
  }
  if (nvmePathFlag.getNumOccurrences()) {
    if (nvmePathFlag.empty())
      return error("--nvme-path expects a directory");
    overrides.nvmePath = nvmePathFlag;
  }
  std::optional<int64_t> dp, world, pp, tp, microbatches, chunks;
  for (auto [flag, out] :
       {std::pair{&dpFlag, &dp}, {&worldFlag, &world}, {&ppFlag, &pp},
        {&tpFlag, &tp},
        {&microbatchesFlag, &microbatches}, {&chunksFlag, &chunks}}) {
    if (!flag->getNumOccurrences())
      continue;
    std::optional<int64_t> size = parseSize(*flag);
    if (!size || *size > (int64_t(1) << 24))
      return error("--" + flag->ArgStr + " expects a positive integer, got '" +
                   *flag + "'");
    *out = *size;
  }
  // The grid pp x dp x tp must fill the world; the config reader checks
  // it once the config's pipeline stages are known.
  overrides.dataParallelSize = dp;
  overrides.worldSize = world;
  overrides.pipelineStages = pp;
  overrides.tensorParallelSize = tp;
  if (sequenceParallelFlag)
    overrides.sequenceParallel = true;
  overrides.microbatches = microbatches;
  overrides.pipelineChunks = chunks;
  if (scheduleFlag.getNumOccurrences()) {
    if (!dsopt::pipeline::parseScheduleKind(scheduleFlag))
      return error("--schedule expects gpipe, 1f1b, interleaved or zb-h1, "
                   "got '" +
                   scheduleFlag + "'");
    overrides.pipelineSchedule = std::string(scheduleFlag);
  }
  struct SizeFlag {
    cl::opt<std::string> &option;
    std::optional<int64_t> &value;
  };
  SizeFlag sizes[] = {{gradAccumFlag, overrides.gradientAccumulationSteps},
                      {trainBatchFlag, overrides.trainBatchSize},
                      {microBatchFlag, overrides.microBatchSize},
                      {stepsPerPrintFlag, overrides.stepsPerPrint}};
  for (SizeFlag &flag : sizes) {
    if (!flag.option.getNumOccurrences())
      continue;
    std::optional<int64_t> size = parseSize(flag.option);
    // Batch products are checked for overflow; keep each one sane.
    if (!size || *size > (int64_t(1) << 40))
      return error("--" + flag.option.ArgStr +
                   " expects a positive integer, got '" + flag.option + "'");
    flag.value = *size;
  }
  return overrides;
}

/// Whether the command line asks for a training config at all.
bool trainingRequested() {
  for (cl::Option *option : cl::getRegisteredOptions().values())
    if (llvm::is_contained(option->Categories, &trainingCategory) &&
        option->getNumOccurrences() && option != &noTrainFlag &&
        option != &noForwardFlag)
      return true;
  return false;
}

/// The config file (or dsopt's defaults) with the flags applied; batch sizes
/// are left unresolved and warnings unprinted.
llvm::Expected<dsopt::TrainConfig> readTrainConfig() {
  llvm::Expected<dsopt::TrainConfigOverrides> overrides = trainOverrides();
  if (!overrides)
    return overrides.takeError();
  overrides->irOnly =
      emit == EmitKind::TrainMlir || emit == EmitKind::Plan || printConfig;
  if (configFile.getNumOccurrences()) {
    if (configFile.empty())
      return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                     "--config expects a file name");
    return dsopt::loadTrainConfig(configFile, *overrides);
  }
  return dsopt::parseTrainConfig("{}", "", *overrides);
}

/// The model's batch: the leading axis of its graph inputs (arguments of
/// @main with `ds.input`) when they all agree, 1 when no input has a batch
/// axis, nullopt when they disagree.
std::optional<int64_t> modelBatchOf(ModuleOp module) {
  auto main = module.lookupSymbol<func::FuncOp>("main");
  if (!main)
    return std::nullopt;
  std::optional<int64_t> batch;
  for (unsigned i = 0, e = main.getNumArguments(); i < e; ++i) {
    if (!main.getArgAttr(i, dsopt::ds::DsDialect::kInputAttrName))
      continue;
    auto type = dyn_cast<RankedTensorType>(main.getArgument(i).getType());
    if (!type || type.getRank() == 0)
      continue; // a scalar input has no batch axis
    int64_t size = type.getDimSize(0);
    if (ShapedType::isDynamic(size) || (batch && *batch != size))
      return std::nullopt;
    batch = size;
  }
  // A graph without batched inputs (its data are initializers) runs one
  // sample per step.
  return batch ? batch : std::optional<int64_t>(1);
}
} // namespace

//===----------------------------------------------------------------------===//
// buildTrainConfig: the training configuration the training pipeline uses.
// The --config file (or dsopt's defaults: AdamW with PyTorch's defaults),
// then the flags, then the batch sizes resolved against the model's batch.
// Warnings go to stderr as `dsopt: warning: ...`; errors are returned.
//===----------------------------------------------------------------------===//
llvm::Expected<dsopt::TrainConfig>
buildTrainConfig(std::optional<int64_t> modelBatch) {
  llvm::Expected<dsopt::TrainConfig> config = readTrainConfig();
  if (!config)
    return config.takeError();
  if (llvm::Error error = dsopt::resolveBatch(*config, modelBatch))
    return error;
  for (const std::string &warning : config->warnings)
    llvm::WithColor::warning(llvm::errs(), "dsopt") << printable(warning)
                                                    << "\n";
  return config;
}

namespace {
/// Moves the MLIR debugging options dsopt supports into their own help
/// category; everything else LLVM registers stays hidden.
void exposeMlirOptions(cl::OptionCategory &category) {
  static const char *const shown[] = {
      "mlir-print-ir-after-all", "mlir-print-ir-before-all",
      "mlir-print-ir-after", "mlir-print-ir-before",
      "mlir-print-ir-after-change", "mlir-print-ir-module-scope",
      "mlir-print-debuginfo", "mlir-print-local-scope",
      "mlir-elide-elementsattrs-if-larger", "mlir-timing",
      "mlir-timing-display", "mlir-pass-statistics",
      "mlir-print-op-generic"};
  auto &options = cl::getRegisteredOptions();
  for (const char *name : shown) {
    auto it = options.find(name);
    if (it != options.end())
      it->second->addCategory(category);
  }
}

int listSupportedOps() {
  std::string domain = "-";
  for (const dsopt::SupportedOnnxOp &op : dsopt::supportedOnnxOps()) {
    if (op.domain != domain) {
      domain = op.domain;
      llvm::outs() << (domain.empty() ? "ai.onnx (opsets 13-21)"
                                      : domain + " (version 1)")
                   << ":\n";
    }
    llvm::outs() << "  " << llvm::left_justify(op.name, 28) << op.note
                 << "\n";
  }
  return 0;
}
} // namespace

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  registerAsmPrinterCLOptions();
  registerMLIRContextCLOptions();
  registerPassManagerCLOptions();
  registerDefaultTimingManagerCLOptions();
  cl::OptionCategory mlirCategory("IR inspection options");
  exposeMlirOptions(mlirCategory);
  cl::HideUnrelatedOptions(
      {&inputCategory, &outputCategory, &trainingCategory, &mlirCategory});
  cl::SetVersionPrinter([](llvm::raw_ostream &os) {
    os << "dsopt 0.1 (MLIR " << LLVM_VERSION_STRING << ")\n";
  });
  cl::extrahelp examples(R"(
EXAMPLES:
  dsopt model.onnx --emit=summary            inputs, parameters, ops, FLOPs
  dsopt model.onnx --emit=mlir -o model.mlir the imported ds IR
  dsopt model.onnx --emit=mlir --batch 8 --dim seq=1024
                                             fix symbolic dimensions
  dsopt model.onnx --emit=mlir --mlir-print-ir-after-all
                                             the IR after every pass
  dsopt model.onnx --config ds_config.json --print-config
                                             the training config, resolved
  dsopt model.onnx --optimizer=sgd --lr 0.1 --momentum 0.9 --print-config
  dsopt --list-ops                           supported ONNX operators
)");
  std::string commandLineErrors;
  if (!parseCommandLine(
          argc, argv,
          "dsopt: ahead-of-time compiler for distributed training of ONNX "
          "training graphs\n",
          commandLineErrors))
    return failCommandLine(commandLineErrors);

  if (listOps)
    return listSupportedOps();
  if (hostOptLevel > 3)
    return fail("--host-opt-level expects 0, 1, 2 or 3, got " +
                std::to_string(hostOptLevel));
  if (printBuildFlags) {
    dsopt::RuntimeLocation runtime = dsopt::findRuntime(argv[0]);
    if (targetFlag == "cuda") {
      std::string error;
      FailureOr<dsopt::CudaToolkit> toolkit = dsopt::findCudaToolkit(error);
      if (failed(toolkit))
        return fail(error);
      toolkit->arch = cudaArch;
      llvm::outs() << "nvcc: " << toolkit->nvcc << "\nnvccflags: "
                   << llvm::join(dsopt::cudaCompileFlags(runtime, *toolkit, hostOptLevel), " ")
                   << "\nlibs: "
                   << llvm::join(dsopt::cudaLinkArguments(runtime, *toolkit), " ")
                   << "\n";
      return 0;
    }
    llvm::outs() << "cxxflags: "
                 << llvm::join(dsopt::programCompileFlags(runtime, hostOptLevel), " ")
                 << "\nlibs: " << llvm::join(dsopt::programLinkArguments(runtime), " ")
                 << "\n";
    return 0;
  }
  // The training config is checked before the model is read, so mistakes
  // in it or in the flags show at once; the batch sizes are resolved after
  // import, against the model's batch.
  bool training = trainingRequested();
  if (printConfig && emit.getNumOccurrences())
    return fail("--print-config prints the training config; it cannot be "
                "combined with --emit");
  if (training) {
    llvm::Expected<dsopt::TrainConfig> config = readTrainConfig();
    if (!config)
      return fail(printable(llvm::toString(config.takeError())));
    if (llvm::Error problem = dsopt::checkPipelineSchedule(
            *config, /*evenWithOneStage=*/emit == EmitKind::Trace))
      return fail(llvm::toString(std::move(problem)));
    // --print-config shows what was read, whatever can be built of it;
    // only a training program needs the offloaded step's code.
    bool trainProgram = emit == EmitKind::Build || emit == EmitKind::TrainCpp;
    if (!printConfig)
      if (llvm::Error problem =
              dsopt::checkOffloadComposition(*config, !trainProgram))
        return fail(llvm::toString(std::move(problem)));
  }
  auto printTrainConfig =
      [&](std::optional<int64_t> modelBatch) -> int {
    llvm::Expected<dsopt::TrainConfig> config = buildTrainConfig(modelBatch);
    if (!config)
      return fail(printable(llvm::toString(config.takeError())));
    std::string errorMessage;
    auto output = openOutputFile(outputFile, &errorMessage);
    if (!output)
      return fail(errorMessage);
    output->os() << dsopt::toJson(*config) << "\n";
    output->os().flush();
    if (output->os().has_error()) {
      std::string reason = output->os().error().message();
      output->os().clear_error();
      return fail("cannot write '" + outputFile + "': " + reason);
    }
    output->keep();
    return 0;
  };
  // Without a model, the config alone must give the batch size.
  if (printConfig && inputFile.empty())
    return printTrainConfig(std::nullopt);

  if (inputFile.empty())
    return fail("no input model; usage: dsopt <model.onnx> -o OUTDIR, or "
                "dsopt <model.onnx> --emit=mlir "
                "(see --help)");

  dsopt::OnnxImportOptions options;
  options.warnings = &llvm::errs();
  for (const std::string &entry : dims) {
    auto [name, value] = llvm::StringRef(entry).split('=');
    std::optional<int64_t> size = parseSize(value);
    if (name.empty() || !llvm::StringRef(entry).contains('=') || !size)
      return fail("--dim expects NAME=VALUE with a positive integer VALUE, "
                  "got '" +
                  entry + "'");
    auto [it, inserted] = options.dims.try_emplace(name, *size);
    // Last-one-wins would silently compile a shape the user did not mean.
    if (!inserted && it->second != *size)
      return fail("--dim " + name + " is given twice, as " +
                  llvm::Twine(it->second) + " and " + llvm::Twine(*size));
  }
  if (batch.getNumOccurrences()) {
    std::optional<int64_t> size = parseSize(batch);
    if (!size)
      return fail("--batch expects a positive integer, got '" + batch + "'");
    options.batch = *size;
  }
  std::optional<dsopt::ProgramTarget> target =
      dsopt::parseProgramTarget(targetFlag);
  if (!target)
    return fail("--target expects cpu or cuda, got '" + targetFlag + "'");
  bool cudaArchValid = StringRef(cudaArch).starts_with("sm_") &&
                       cudaArch.size() > 3 &&
                       llvm::all_of(StringRef(cudaArch).drop_front(3),
                                    [](char c) { return llvm::isDigit(c); });
  if (!cudaArchValid)
    return fail("--cuda-arch expects sm_NN (e.g. sm_90), got '" + cudaArch +
                "'");
  // Building for cuda needs the toolkit: said before any work is done.
  dsopt::CudaToolkit cudaToolkit;
  cudaToolkit.arch = cudaArch;
  if (sourcesOnly && emit != EmitKind::Build)
    return fail("--sources-only goes with -o OUTDIR, not with --emit");
  if (*target == dsopt::ProgramTarget::Cuda && emit == EmitKind::Build &&
      !printConfig && !sourcesOnly) {
    std::string error;
    FailureOr<dsopt::CudaToolkit> found = dsopt::findCudaToolkit(error);
    if (failed(found) ||
        failed(dsopt::checkRuntime(dsopt::findRuntime(argv[0]), *target,
                                   error)))
      return fail(error);
    cudaToolkit = *found;
    cudaToolkit.arch = cudaArch;
  }
  if (emit == EmitKind::Build && !printConfig &&
      (outputFile == "-" || outputFile.empty()))
    return fail("compiling needs an output directory: dsopt " + inputFile +
                " -o OUTDIR (or choose --emit=mlir|summary|plan|cpp)");

  // The output is opened only after import; writing over the model would
  // destroy the bytes that parameters reference by file offset.
  if (outputFile != "-" && llvm::sys::fs::exists(outputFile) &&
      llvm::sys::fs::equivalent(inputFile, outputFile))
    return fail("the output file '" + outputFile +
                "' is the input model; refusing to overwrite it");

  DialectRegistry registry;
  dsopt::ds::registerShardModels(registry);
  MLIRContext context(registry);
  context.loadDialect<dsopt::ds::DsDialect, func::FuncDialect,
                      shard::ShardDialect>();
  // Diagnostics of the passes in dsopt's format, naming the model (the
  // message names the op and its ONNX node); no IR dumps for users.
  context.printOpOnDiagnostic(false);
  bool reportedError = false;
  std::string modelName = llvm::sys::path::filename(inputFile).str();
  ScopedDiagnosticHandler diagnostics(&context, [&](Diagnostic &diag) {
    auto print = [&](DiagnosticSeverity severity, const std::string &text) {
      switch (severity) {
      case DiagnosticSeverity::Error:
        reportedError = true;
        llvm::WithColor::error(llvm::errs(), "dsopt");
        break;
      case DiagnosticSeverity::Warning:
        llvm::WithColor::warning(llvm::errs(), "dsopt");
        break;
      default:
        llvm::WithColor::note(llvm::errs(), "dsopt");
      }
      llvm::errs() << printable(modelName + ": " + text) << "\n";
    };
    print(diag.getSeverity(), diag.str());
    for (Diagnostic &note : diag.getNotes())
      print(DiagnosticSeverity::Note, note.str());
    return success();
  });
  // After a pass failed: its diagnostics said why, unless it printed none.
  auto failPass = [&](const llvm::Twine &message) {
    return reportedError ? 1 : fail(message);
  };
  DefaultTimingManager timing;
  applyDefaultTimingManagerCLOptions(timing);
  TimingScope rootTiming = timing.getRootScope();

  OwningOpRef<ModuleOp> module;
  {
    TimingScope importTiming = rootTiming.nest("import");
    auto imported = dsopt::importOnnxFile(context, inputFile, options);
    if (!imported)
      return fail(printable(llvm::toString(imported.takeError())));
    module = std::move(*imported);
  }
  // The target, for the kernels whose workspaces depend on it (a large
  // product's cuBLASLt workspace on cuda); the programs built from this
  // module (forward, training step, gradients) are its clones.
  if (*target == dsopt::ProgramTarget::Cuda)
    (*module)->setAttr(dsopt::ds::DsDialect::kTargetAttrName, StringAttr::get(&context, "cuda"));
  if (printConfig)
    return printTrainConfig(modelBatchOf(*module));
  // A training config given on the command line is resolved against the
  // model (and its warnings printed) whatever is emitted.
  std::optional<dsopt::TrainConfig> trainConfig;
  if (training) {
    llvm::Expected<dsopt::TrainConfig> config =
        buildTrainConfig(modelBatchOf(*module));
    if (!config)
      return fail(printable(llvm::toString(config.takeError())));
    if (llvm::Error problem = dsopt::checkPipelineSchedule(
            *config, /*evenWithOneStage=*/emit == EmitKind::Trace))
      return fail(llvm::toString(std::move(problem)));
    trainConfig = *config;
  }

  PassManager pm(&context);
  if (failed(applyPassManagerCLOptions(pm)))
    return fail("invalid pass manager options");
  TimingScope pipelineTiming = rootTiming.nest("pipeline");
  pm.enableTiming(pipelineTiming);
  if (!noCanonicalize) {
    pm.addPass(createCanonicalizerPass());
    pm.addPass(createCSEPass());
  }
  if (failed(pm.run(*module)))
    return failPass("the pass pipeline failed on " + inputFile);
  pipelineTiming.stop();

  auto writeTo = [&](StringRef path,
                     llvm::function_ref<LogicalResult(llvm::raw_ostream &)>
                         write) -> LogicalResult {
    std::string errorMessage;
    auto output = openOutputFile(path, &errorMessage);
    if (!output) {
      fail(errorMessage);
      return failure();
    }
    if (failed(write(output->os())))
      return failure();
    output->os().flush();
    if (output->os().has_error()) {
      std::string reason = output->os().error().message();
      // An unchecked stream error is reported again, fatally, when the
      // stream is destroyed.
      output->os().clear_error();
      fail("cannot write '" + path + "': " + reason);
      return failure();
    }
    output->keep();
    return success();
  };

  if (emit == EmitKind::Mlir)
    return failed(writeTo(outputFile, [&](llvm::raw_ostream &os) {
             module->print(os);
             os << "\n";
             return success();
           }))
               ? 1
               : 0;
  if (emit == EmitKind::Summary)
    return failed(writeTo(outputFile, [&](llvm::raw_ostream &os) {
             dsopt::printModelSummary(*module, os);
             return success();
           }))
               ? 1
               : 0;

  // Training: a training graph (one scalar float output, or --loss) gets a
  // training program unless --no-train; asking for anything training
  // related of a model that is not one is an error.
  bool wantsTrainProgram = emit == EmitKind::TrainMlir ||
                           emit == EmitKind::TrainCpp ||
                           emit == EmitKind::Trace;
  std::string notTraining;
  bool isTrainingGraph =
      dsopt::isTrainingGraph(*module, lossFlag, notTraining);
  if ((training || wantsTrainProgram) && !isTrainingGraph)
    return fail("cannot train " + inputFile + ": " + notTraining);
  if (noTrainFlag && wantsTrainProgram)
    return fail("--no-train contradicts --emit=train-mlir, "
                "--emit=train-cpp and --emit=trace");
  if (noForwardFlag && emit == EmitKind::Cpp)
    return fail("--no-forward contradicts --emit=cpp (the forward program's "
                "C++)");
  bool buildTrain =
      isTrainingGraph && !noTrainFlag &&
      (emit == EmitKind::Build || emit == EmitKind::Plan || wantsTrainProgram);
  bool buildGradients = gradientsFlag && emit == EmitKind::Build;
  // The programs the build holds, as plan.json and plan.txt list them.
  std::vector<std::string> programNames;
  if (!noForwardFlag)
    programNames.push_back("run");
  if (buildTrain)
    programNames.push_back("train");
  if (gradientsFlag)
    programNames.push_back("gradients");
  if (programNames.empty()) {
    if (!isTrainingGraph)
      return fail("--no-forward leaves no program to build of " + inputFile +
                  ", which is not a training graph: " + notTraining);
    return fail("--no-forward and --no-train together leave no program to "
                "build (add --gradients for the gradients program)");
  }

  dsopt::TrainingPipelineOptions trainOptions;
  trainOptions.loss = lossFlag;
  trainOptions.frozen.assign(frozenFlag.begin(), frozenFlag.end());
  trainOptions.fuse = !noFuse;
  trainOptions.fuseAttention = fuseAttention;
  trainOptions.fuseLossGrad = !noFuseLossGrad;
  trainOptions.configure = [&](PassManager &trainPm) -> LogicalResult {
    return applyPassManagerCLOptions(trainPm);
  };
  // The training program: the library's ds-train pipeline on a clone of
  // the forward module. With --pp it holds each pipeline rank's program as
  // a nested module.
  OwningOpRef<ModuleOp> trainModule, gradientModule;
  SmallVector<ModuleOp> rankModules;
  if (buildTrain) {
    if (!trainConfig) {
      llvm::Expected<dsopt::TrainConfig> config =
          buildTrainConfig(modelBatchOf(*module));
      if (!config)
        return fail(printable(llvm::toString(config.takeError())));
      trainConfig = *config;
    }
    TimingScope trainTiming = rootTiming.nest("training step");
    dsopt::TrainingOptions options;
    dsopt::setTrainingOptions(options, *trainConfig);
    options.loss = lossFlag;
    options.frozen = trainOptions.frozen;
    options.fuse = !noFuse;
    options.fuseParamCopy = !noFuseParamCopy;
    options.fuseLossGrad = !noFuseLossGrad;
    options.padVocab = *target == dsopt::ProgramTarget::Cuda && !noPadVocab;
    options.fuseAttention = fuseAttention;
    options.cutOnly = emit == EmitKind::Trace;
    trainModule = OwningOpRef<ModuleOp>(module->clone());
    PassManager trainPm(&context);
    if (failed(applyPassManagerCLOptions(trainPm)))
      return fail("invalid pass manager options");
    trainPm.enableTiming(trainTiming);
    dsopt::buildTrainingPipeline(trainPm, options);
    if (failed(trainPm.run(*trainModule)))
      return failPass("building the training step failed on " + inputFile);
    llvm::errs() << "dsopt: "
                 << dsopt::trainingSummary(*trainModule, trainOptions.frozen)
                 << "\n";
    for (auto rank : trainModule->getOps<ModuleOp>())
      rankModules.push_back(rank);
  }
  if (buildGradients) {
    TimingScope gradTiming = rootTiming.nest("gradient program");
    FailureOr<OwningOpRef<ModuleOp>> built =
        dsopt::buildGradientModule(*module, trainOptions);
    if (failed(built))
      return failPass("differentiating " + inputFile + " failed");
    gradientModule = std::move(*built);
    if (!trainModule)
      llvm::errs() << "dsopt: "
                   << dsopt::trainingSummary(*gradientModule,
                                             trainOptions.frozen)
                   << "\n";
  }
  if (emit == EmitKind::Trace)
    return failed(writeTo(outputFile, [&](llvm::raw_ostream &os) {
             return dsopt::writePipelineTrace(*trainModule, os);
           }))
               ? 1
               : 0;
  if (emit == EmitKind::TrainMlir)
    return failed(writeTo(outputFile, [&](llvm::raw_ostream &os) {
             // As dsopt-opt prints the result of ds-train.
             trainModule->print(os);
             os << "\n";
             return success();
           }))
               ? 1
               : 0;

  // Memory planning, then the plan, then code generation.
  PassManager planPm(&context);
  if (failed(applyPassManagerCLOptions(planPm)))
    return fail("invalid pass manager options");
  TimingScope planTiming = rootTiming.nest("memory planning");
  planPm.enableTiming(planTiming);
  if (fuseAttention)
    planPm.addNestedPass<func::FuncOp>(dsopt::createDsFuseAttention());
  dsopt::buildPlanningPipeline(planPm, !noFuse);
  if (failed(planPm.run(*module)))
    return failPass("memory planning failed on " + inputFile);
  planTiming.stop();

  std::optional<llvm::json::Value> configJson;
  if (trainConfig) {
    llvm::Expected<llvm::json::Value> parsed =
        llvm::json::parse(dsopt::toJson(*trainConfig));
    if (!parsed)
      return fail("internal error: the training config is not JSON: " +
                  llvm::toString(parsed.takeError()));
    configJson = std::move(*parsed);
  }
  auto writePlan = [&](llvm::raw_ostream &os) {
    return dsopt::writePlanJson(*module, os,
                                trainModule ? *trainModule : ModuleOp(),
                                configJson ? &*configJson : nullptr,
                                rankModules,
                                dsopt::programTargetName(*target),
                                programNames);
  };
  if (emit == EmitKind::Plan)
    return failed(writeTo(outputFile, writePlan)) ? 1 : 0;

  std::optional<StagedOutput> staged;
  if (emit == EmitKind::Build) {
    staged.emplace(outputFile);
    if (llvm::Error error = staged->create())
      return fail(llvm::toString(std::move(error)));
    if (failed(writeTo(staged->path() + "/plan.json", writePlan)) ||
        failed(writeTo(staged->path() + "/plan.txt", [&](llvm::raw_ostream &os) {
          return dsopt::writePlanText(*module, os,
                                      trainModule ? *trainModule
                                                  : ModuleOp(),
                                      rankModules, programNames);
        })))
      return 1;
  }

  // Each planned module becomes C++.
  TimingScope lowerTiming = rootTiming.nest("code generation");
  auto lower = [&](ModuleOp program, std::string &source,
                   StringRef prefix = "", bool main = true) -> LogicalResult {
    PassManager lowerPm(&context);
    if (failed(applyPassManagerCLOptions(lowerPm)))
      return failure();
    lowerPm.enableTiming(lowerTiming);
    dsopt::DsLowerToEmitCOptions lowerOptions;
    lowerOptions.withMain = !noMain && main;
    lowerOptions.outlineRepeats = !flatCodegen;
    lowerOptions.symbolPrefix = prefix.empty() ? StringRef(symbolPrefix) : prefix;
    lowerOptions.target = dsopt::programTargetName(*target).str();
    if (trainConfig) {
      // One file space per rank, under the optimizer's directory, else the
      // parameters' (checkOffloadComposition refuses two).
      lowerOptions.nvmePath =
          trainConfig->offloadOptimizer.device == dsopt::OffloadDevice::NVMe
              ? trainConfig->offloadOptimizer.nvmePath
              : trainConfig->offloadParam.nvmePath;
      const dsopt::AioConfig &aio = trainConfig->aio;
      lowerOptions.aioBlockSize = aio.blockSize;
      lowerOptions.aioQueueDepth = aio.queueDepth;
      lowerOptions.aioIntraOpParallelism = aio.intraOpParallelism;
      lowerOptions.aioSingleSubmit = aio.singleSubmit;
      lowerOptions.aioOverlapEvents = aio.overlapEvents;
    }
    lowerPm.addPass(dsopt::createDsLowerToEmitC(lowerOptions));
    if (failed(lowerPm.run(program)))
      return failure();
    llvm::raw_string_ostream os(source);
    return dsopt::emitProgramCpp(program, llvm::sys::path::filename(inputFile),
                                 os);
  };
  std::vector<dsopt::ProgramSource> programs;
  // CUDA sources are .cu files, which nvcc compiles as CUDA.
  StringRef sourceExtension =
      *target == dsopt::ProgramTarget::Cuda ? ".cu" : ".cpp";
  auto sourceFile = [&](StringRef stem) {
    return (stem + sourceExtension).str();
  };
  if (emit != EmitKind::TrainCpp && !noForwardFlag) {
    programs.push_back({"run", sourceFile("model"), ""});
    if (failed(lower(*module, programs.back().source)))
      return failPass("code generation failed on " + inputFile);
  }
  if (emit == EmitKind::Cpp)
    return failed(writeTo(outputFile, [&](llvm::raw_ostream &os) {
             os << programs.front().source;
             return success();
           }))
               ? 1
               : 0;
  if (!rankModules.empty()) {
    // Every pipeline rank's program in one executable; each process runs
    // the one of its pp coordinate.
    programs.push_back({"train", sourceFile("train"), ""});
    std::string &source = programs.back().source;
    SmallVector<std::string> table;
    for (auto [r, rank] : llvm::enumerate(rankModules)) {
      std::string prefix = symbolPrefix + "pp" + std::to_string(r) + "_";
      std::string part;
      if (failed(lower(rank, part, prefix, /*main=*/false)))
        return failPass("code generation failed on pipeline rank " +
                        std::to_string(r) + " of " + inputFile);
      source += part;
      table.push_back(prefix + "program");
    }
    if (!noMain) {
      OwningOpRef<ModuleOp> main = dsopt::buildPipelineMain(
          &context, table, *target == dsopt::ProgramTarget::Cuda);
      llvm::raw_string_ostream os(source);
      os << "\n";
      if (failed(emitc::translateToCpp(*main, os)))
        return failPass("code generation failed on the pipeline's main");
    }
  } else if (trainModule) {
    programs.push_back({"train", sourceFile("train"), ""});
    if (failed(lower(*trainModule, programs.back().source)))
      return failPass("code generation failed on the training step of " +
                  inputFile);
  }
  if (emit == EmitKind::TrainCpp)
    return failed(writeTo(outputFile, [&](llvm::raw_ostream &os) {
             os << programs.back().source;
             return success();
           }))
               ? 1
               : 0;
  if (gradientModule) {
    programs.push_back({"gradients", sourceFile("gradients"), ""});
    if (failed(lower(*gradientModule, programs.back().source)))
      return failPass("code generation failed on the gradients of " + inputFile);
  }
  lowerTiming.stop();

  TimingScope buildTiming = rootTiming.nest("host compile");
  dsopt::HostCompiler compiler;
  compiler.cxx = hostCompiler;
  compiler.runtime = dsopt::findRuntime(argv[0]);
  compiler.target = *target;
  compiler.cuda = cudaToolkit;
  compiler.optLevel = hostOptLevel;
  std::string error;
  if (failed(sourcesOnly ? dsopt::writeProgramSources(staged->path(), programs,
                                                      compiler, error)
                         : dsopt::buildPrograms(staged->path(), programs,
                                                compiler, error)))
    return fail(staged->finalSpelling(error));
  if (llvm::Error error = staged->commit())
    return fail(llvm::toString(std::move(error)));
  return 0;
}

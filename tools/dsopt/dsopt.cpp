//===- dsopt.cpp - the dsopt compiler driver ------------------------------===//
//
//   dsopt model.onnx -o out/                compile: out/run, out/plan.json,
//                                           out/plan.txt, out/src/
//   dsopt model.onnx --emit=mlir            the ds IR after import and cleanup
//   dsopt model.onnx --emit=summary         inputs, parameters, ops, cost
//   dsopt model.onnx --emit=plan            plan.json, without building
//   dsopt model.onnx --emit=cpp             the generated C++ source
//
// The driver imports the model, runs the pass pipeline (every stage can be
// printed with --mlir-print-ir-after-all) and writes what --emit asks for;
// without --emit it compiles the model into an executable.
//
//===----------------------------------------------------------------------===//

#include "dsopt/Analysis/ModelSummary.h"
#include "dsopt/Analysis/Plan.h"
#include "dsopt/Conversion/Passes.h"
#include "dsopt/Import/OnnxImporter.h"
#include "dsopt/Target/Program.h"
#include "dsopt/Transforms/Passes.h"

#include "ds/IR/DsDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/AsmState.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Support/FileUtilities.h"
#include "mlir/Support/Timing.h"
#include "mlir/Transforms/Passes.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/WithColor.h"

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

enum class EmitKind { Build, Mlir, Summary, Plan, Cpp };
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
               clEnumValN(EmitKind::Cpp, "cpp", "the generated C++ source")),
    cl::cat(outputCategory));

cl::opt<std::string> outputFile(
    "o",
    cl::desc("Output directory when compiling; output file with --emit "
             "(default: stdout)"),
    cl::value_desc("path"), cl::init("-"), cl::cat(outputCategory));

cl::opt<std::string> hostCompiler(
    "cxx", cl::desc("Host C++ compiler for the generated program (default: "
                    "$CXX, else c++)"),
    cl::value_desc("path"), cl::cat(outputCategory));

cl::opt<std::string> symbolPrefix(
    "symbol-prefix",
    cl::desc("Prefix of the generated program's functions and constants "
             "(default: dsopt_), so several programs can share an executable"),
    cl::value_desc("prefix"), cl::init("dsopt_"), cl::cat(outputCategory));

cl::opt<bool> noMain("no-main",
                     cl::desc("With --emit=cpp, leave out main(): the program "
                              "is linked into another executable"),
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

cl::opt<bool> listOps("list-ops",
                      cl::desc("List the supported ONNX operators and exit"),
                      cl::cat(outputCategory));

cl::opt<bool> noCanonicalize(
    "no-canonicalize",
    cl::desc("Print the IR exactly as imported, without canonicalization"),
    cl::cat(outputCategory));

int fail(const llvm::Twine &message) {
  llvm::WithColor::error(llvm::errs(), "dsopt") << message << "\n";
  return 1;
}

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
  cl::HideUnrelatedOptions({&inputCategory, &outputCategory, &mlirCategory});
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
  if (printBuildFlags) {
    dsopt::RuntimeLocation runtime = dsopt::findRuntime(argv[0]);
    llvm::outs() << "cxxflags: " << llvm::join(dsopt::programCompileFlags(runtime), " ")
                 << "\nlibs: " << llvm::join(dsopt::programLinkArguments(runtime), " ")
                 << "\n";
    return 0;
  }
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
  if (emit == EmitKind::Build && (outputFile == "-" || outputFile.empty()))
    return fail("compiling needs an output directory: dsopt " + inputFile +
                " -o OUTDIR (or choose --emit=mlir|summary|plan|cpp)");

  // The output is opened only after import; writing over the model would
  // destroy the bytes that parameters reference by file offset.
  if (outputFile != "-" && llvm::sys::fs::exists(outputFile) &&
      llvm::sys::fs::equivalent(inputFile, outputFile))
    return fail("the output file '" + outputFile +
                "' is the input model; refusing to overwrite it");

  MLIRContext context;
  context.loadDialect<dsopt::ds::DsDialect, func::FuncDialect>();
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
    return fail("the pass pipeline failed on " + inputFile);
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

  // Memory planning, then the plan, then code generation.
  PassManager planPm(&context);
  if (failed(applyPassManagerCLOptions(planPm)))
    return fail("invalid pass manager options");
  TimingScope planTiming = rootTiming.nest("memory planning");
  planPm.enableTiming(planTiming);
  if (!noFuse)
    planPm.addNestedPass<func::FuncOp>(dsopt::createDsFuseElementwise());
  planPm.addPass(dsopt::createDsPlanMemory());
  if (failed(planPm.run(*module)))
    return fail("memory planning failed on " + inputFile);
  planTiming.stop();

  if (emit == EmitKind::Plan)
    return failed(writeTo(outputFile, [&](llvm::raw_ostream &os) {
             return dsopt::writePlanJson(*module, os);
           }))
               ? 1
               : 0;

  if (emit == EmitKind::Build) {
    if (std::error_code ec = llvm::sys::fs::create_directories(outputFile))
      return fail("cannot create output directory '" + outputFile +
                  "': " + ec.message());
    if (failed(writeTo(outputFile + "/plan.json",
                       [&](llvm::raw_ostream &os) {
                         return dsopt::writePlanJson(*module, os);
                       })) ||
        failed(writeTo(outputFile + "/plan.txt", [&](llvm::raw_ostream &os) {
          return dsopt::writePlanText(*module, os);
        })))
      return 1;
  }

  PassManager lowerPm(&context);
  if (failed(applyPassManagerCLOptions(lowerPm)))
    return fail("invalid pass manager options");
  TimingScope lowerTiming = rootTiming.nest("code generation");
  lowerPm.enableTiming(lowerTiming);
  dsopt::DsLowerToEmitCOptions lowerOptions;
  lowerOptions.withMain = !noMain;
  lowerOptions.symbolPrefix = symbolPrefix;
  lowerPm.addPass(dsopt::createDsLowerToEmitC(lowerOptions));
  if (failed(lowerPm.run(*module)))
    return fail("code generation failed on " + inputFile);
  lowerTiming.stop();
  std::string source;
  {
    llvm::raw_string_ostream os(source);
    if (failed(dsopt::emitProgramCpp(
            *module, llvm::sys::path::filename(inputFile), os)))
      return fail("C++ emission failed on " + inputFile);
  }
  if (emit == EmitKind::Cpp)
    return failed(writeTo(outputFile, [&](llvm::raw_ostream &os) {
             os << source;
             return success();
           }))
               ? 1
               : 0;

  TimingScope buildTiming = rootTiming.nest("host compile");
  dsopt::HostCompiler compiler;
  compiler.cxx = hostCompiler;
  compiler.runtime = dsopt::findRuntime(argv[0]);
  std::string error;
  if (failed(dsopt::buildProgram(outputFile, source, "run", compiler, error)))
    return fail(error);
  return 0;
}

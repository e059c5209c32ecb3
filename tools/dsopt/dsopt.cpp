//===- dsopt.cpp - the dsopt compiler driver ------------------------------===//
//
//   dsopt model.onnx --emit=mlir            the imported ds IR
//   dsopt model.onnx --emit=summary         inputs, parameters, ops, cost
//
// The driver imports the model, runs the pass pipeline (every stage can be
// printed with --mlir-print-ir-after-all) and writes what --emit asks for.
//
//===----------------------------------------------------------------------===//

#include "dsopt/Analysis/ModelSummary.h"
#include "dsopt/Import/OnnxImporter.h"
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

enum class EmitKind { None, Mlir, Summary };
cl::opt<EmitKind> emit(
    "emit", cl::desc("What to produce"), cl::init(EmitKind::None),
    cl::values(clEnumValN(EmitKind::Mlir, "mlir",
                          "the ds IR after the pipeline"),
               clEnumValN(EmitKind::Summary, "summary",
                          "inputs, outputs, parameters, op histogram and "
                          "cost of the model")),
    cl::cat(outputCategory));

cl::opt<std::string> outputFile("o", cl::desc("Output file (default: stdout)"),
                                cl::value_desc("file"), cl::init("-"),
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
  if (inputFile.empty())
    return fail("no input model; usage: dsopt <model.onnx> --emit=mlir "
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
  if (emit == EmitKind::None)
    return fail("code generation is not available yet; choose what to "
                "produce with --emit=mlir or --emit=summary");

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

  std::string errorMessage;
  auto output = openOutputFile(outputFile, &errorMessage);
  if (!output)
    return fail(errorMessage);
  if (emit == EmitKind::Mlir) {
    module->print(output->os());
    output->os() << "\n";
  }
  else
    dsopt::printModelSummary(*module, output->os());
  output->os().flush();
  if (output->os().has_error()) {
    std::string reason = output->os().error().message();
    // An unchecked stream error is reported again, fatally, when the stream
    // is destroyed.
    output->os().clear_error();
    return fail("cannot write '" + outputFile + "': " + reason);
  }
  output->keep();
  return 0;
}

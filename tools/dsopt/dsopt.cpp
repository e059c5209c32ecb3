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
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/WithColor.h"

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

cl::opt<int64_t> batch(
    "batch",
    cl::desc("Size of the leading axis of graph inputs whose leading axis "
             "is symbolic"),
    cl::value_desc("N"), cl::init(-1), cl::cat(inputCategory));

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
  if (!cl::ParseCommandLineOptions(
          argc, argv,
          "dsopt: ahead-of-time compiler for distributed training of ONNX "
          "training graphs\n"))
    return 1;

  if (listOps)
    return listSupportedOps();
  if (inputFile.empty())
    return fail("no input model; usage: dsopt <model.onnx> --emit=mlir "
                "(see --help)");

  dsopt::OnnxImportOptions options;
  options.warnings = &llvm::errs();
  for (const std::string &entry : dims) {
    auto [name, value] = llvm::StringRef(entry).split('=');
    int64_t size;
    if (name.empty() || value.getAsInteger(10, size) || size < 0)
      return fail("--dim expects NAME=VALUE with a non-negative integer "
                  "VALUE, got '" +
                  entry + "'");
    options.dims[name] = size;
  }
  if (batch.getNumOccurrences()) {
    if (batch < 1)
      return fail("--batch must be a positive integer, got " +
                  llvm::Twine(batch));
    options.batch = batch;
  }
  if (emit == EmitKind::None)
    return fail("code generation is not available yet; choose what to "
                "produce with --emit=mlir or --emit=summary");

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
      return fail(llvm::toString(imported.takeError()));
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
  if (output->os().has_error())
    return fail("cannot write " + outputFile);
  output->keep();
  return 0;
}

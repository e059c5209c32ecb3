//===- Program.h - generated C++ programs -----------------------*- C++ -*-===//
//
// The last stages of dsopt: a memory-planned ds module becomes EmitC, C++
// source, a small CMake project that rebuilds it against an installed libdsrt,
// and an executable built with the host compiler.
//
//===----------------------------------------------------------------------===//

#ifndef DSOPT_TARGET_PROGRAM_H
#define DSOPT_TARGET_PROGRAM_H

#include "mlir/IR/BuiltinOps.h"
#include "llvm/Support/raw_ostream.h"

#include <string>

namespace dsopt {

/// Translates an EmitC module (after ds-lower-to-emitc) to C++.
mlir::LogicalResult emitProgramCpp(mlir::ModuleOp emitcModule,
                                   llvm::StringRef modelName,
                                   llvm::raw_ostream &os);

/// Where libdsrt's headers and library are: the build tree dsopt was built
/// in, an installation next to the dsopt executable, or $DSOPT_RUNTIME_DIR
/// (a directory with include/ and lib/).
struct RuntimeLocation {
  std::string includeDir, library;
  std::vector<std::string> linkFlags;
};
RuntimeLocation findRuntime(const char *argv0);

/// Flags that compile a generated program's source, and what links it.
std::vector<std::string> programCompileFlags(const RuntimeLocation &runtime);
std::vector<std::string> programLinkArguments(const RuntimeLocation &runtime);

struct HostCompiler {
  /// The C++ compiler (default: $CXX, else c++).
  std::string cxx;
  /// Extra flags, appended.
  std::vector<std::string> flags;
  RuntimeLocation runtime;
};

/// One generated program: `outDir/<exe>` built from `outDir/src/<file>`.
struct ProgramSource {
  std::string exe, file, source;
};

/// Writes every program's source to `outDir/src/` with a
/// `outDir/src/CMakeLists.txt` that rebuilds them all, then compiles and
/// links each `outDir/<exe>` against libdsrt, the programs in parallel. On a
/// compiler failure, `error` holds the compiler's first error and the path
/// of the generated file.
mlir::LogicalResult buildPrograms(llvm::StringRef outDir,
                                  llvm::ArrayRef<ProgramSource> programs,
                                  const HostCompiler &compiler,
                                  std::string &error);

/// buildPrograms of one program, `outDir/<exeName>` from `src/model.cpp`.
mlir::LogicalResult buildProgram(llvm::StringRef outDir, llvm::StringRef source,
                                 llvm::StringRef exeName,
                                 const HostCompiler &compiler,
                                 std::string &error);

} // namespace dsopt

#endif // DSOPT_TARGET_PROGRAM_H

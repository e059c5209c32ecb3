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

#include <optional>
#include <string>
#include <vector>

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
  /// The cuda backend's libdsrt_cuda.a (backend-neutral core + cuda
  /// backend) next to libdsrt.a; empty where none was built.
  std::string cudaLibrary;
};

/// The backend generated programs are built for.
enum class ProgramTarget { Cpu, Cuda };
/// Whether `runtime` has what programs for `target` link (libdsrt.a, or
/// libdsrt_cuda.a); if not, `error` says what is missing and where.
mlir::LogicalResult checkRuntime(const RuntimeLocation &runtime,
                                 ProgramTarget target, std::string &error);
/// "cpu" or "cuda"; std::nullopt for anything else.
std::optional<ProgramTarget> parseProgramTarget(llvm::StringRef name);
llvm::StringRef programTargetName(ProgramTarget target);

/// The CUDA toolkit a cuda program is compiled with: nvcc and the directory
/// of its libraries (cudart, cuBLASLt, NCCL).
struct CudaToolkit {
  std::string nvcc, libraryDir;
  /// The GPU architecture the kernels are compiled for ("sm_90").
  std::string arch = "sm_90";
};
/// nvcc from $CUDACXX (which must then be one), $CUDA_HOME/bin, the toolkit
/// dsopt was built with, /usr/local/cuda/bin or PATH; on failure `error`
/// says where it looked.
mlir::FailureOr<CudaToolkit> findCudaToolkit(std::string &error);
/// nvcc flags that compile a generated `.cu` (to an object file), and what
/// the host compiler links it with.
std::vector<std::string> cudaCompileFlags(const RuntimeLocation &runtime,
                                          const CudaToolkit &toolkit,
                                          unsigned optLevel = 3);
std::vector<std::string> cudaLinkArguments(const RuntimeLocation &runtime,
                                           const CudaToolkit &toolkit);
RuntimeLocation findRuntime(const char *argv0);

/// Flags that compile a generated program's source, and what links it.
/// `optLevel` is the host compiler's -O level (3 unless asked otherwise):
/// without FP contraction or fast math every level computes the same
/// numbers, a lower one only compiles faster and runs slower.
std::vector<std::string> programCompileFlags(const RuntimeLocation &runtime,
                                             unsigned optLevel = 3);
std::vector<std::string> programLinkArguments(const RuntimeLocation &runtime);

struct HostCompiler {
  /// The C++ compiler (default: $CXX, else c++); it links cuda programs too.
  std::string cxx;
  ProgramTarget target = ProgramTarget::Cpu;
  /// With ProgramTarget::Cuda: nvcc compiles each source first.
  CudaToolkit cuda;
  /// Extra flags, appended.
  std::vector<std::string> flags;
  /// The -O level generated sources compile at (--host-opt-level).
  unsigned optLevel = 3;
  RuntimeLocation runtime;
};

/// One generated program: `outDir/<exe>` built from `outDir/src/<file>`
/// (a `.cu` file for the cuda target).
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

/// Writes `outDir/src/<file>` for every program and `src/CMakeLists.txt`,
/// and builds nothing: the source tree that rebuilds the programs without
/// dsopt (dsopt --sources-only). Needs no compiler and no libdsrt.
mlir::LogicalResult writeProgramSources(llvm::StringRef outDir,
                                        llvm::ArrayRef<ProgramSource> programs,
                                        const HostCompiler &compiler,
                                        std::string &error);

/// buildPrograms of one program, `outDir/<exeName>` from `src/model.cpp`
/// (`src/model.cu` for the cuda target).
mlir::LogicalResult buildProgram(llvm::StringRef outDir, llvm::StringRef source,
                                 llvm::StringRef exeName,
                                 const HostCompiler &compiler,
                                 std::string &error);

} // namespace dsopt

#endif // DSOPT_TARGET_PROGRAM_H

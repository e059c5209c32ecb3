//===- Passes.h - dsopt conversion passes -----------------------*- C++ -*-===//

#ifndef DSOPT_CONVERSION_PASSES_H
#define DSOPT_CONVERSION_PASSES_H

#include "mlir/Dialect/EmitC/IR/EmitC.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

namespace dsopt {

#define GEN_PASS_DECL
#include "dsopt/Conversion/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "dsopt/Conversion/Passes.h.inc"

} // namespace dsopt

#endif // DSOPT_CONVERSION_PASSES_H

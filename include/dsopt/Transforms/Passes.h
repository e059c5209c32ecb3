//===- Passes.h - dsopt passes ----------------------------------*- C++ -*-===//

#ifndef DSOPT_TRANSFORMS_PASSES_H
#define DSOPT_TRANSFORMS_PASSES_H

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Shard/IR/ShardDialect.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

#include <memory>

namespace dsopt {

#define GEN_PASS_DECL
#include "dsopt/Transforms/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "dsopt/Transforms/Passes.h.inc"

} // namespace dsopt

#endif // DSOPT_TRANSFORMS_PASSES_H

//===- HostMemory.h - How the host space's arena is allocated -------------===//
//
// The host space's arena is pinned (page-locked) host memory unless
// ds-offload marks the module with kHostPageableAttrName: only parameter
// shards are offloaded there (no optimizer update runs on the host) and
// offload_param.pin_memory is false, DeepSpeed's default. The code
// generator then has the runtime allocate the arena as ordinary host
// memory.
//
//===----------------------------------------------------------------------===//
#ifndef DSOPT_TRANSFORMS_HOSTMEMORY_H
#define DSOPT_TRANSFORMS_HOSTMEMORY_H

#include "mlir/IR/BuiltinOps.h"

namespace dsopt {

/// The unit attribute on a module whose host arena is pageable.
inline constexpr llvm::StringLiteral kHostPageableAttrName = "dsopt.host_pageable";

/// Whether `module`'s host arena is pinned host memory.
inline bool isHostArenaPinned(mlir::ModuleOp module) {
  return !module->hasAttr(kHostPageableAttrName);
}

} // namespace dsopt

#endif // DSOPT_TRANSFORMS_HOSTMEMORY_H

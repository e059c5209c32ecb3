//===- HostMemory.h - How the host space's arena is allocated -------------===//
//
// The host space's arena is pinned (page-locked) host memory unless
// ds-offload marks the module with kHostPageableAttrName: only parameter
// shards are offloaded there (no optimizer update runs on the host) and
// offload_param.pin_memory is false, DeepSpeed's default. The code
// generator then has the runtime allocate the arena as ordinary host
// memory.
//
// With offload_param on nvme, the host buffers that parameter shards are
// read into from the file are DeepSpeed's buffer pool: ds-offload gives
// each such read (a ds.transfer from the file to the host) the pool buffer
// it uses, kParamBufferAttrName, in schedule order (the k-th read takes
// buffer k mod offload_param.buffer_count); ds-plan-memory places every
// buffer of the pool at a fixed offset of the host arena and records the
// pool on the module (kParamBufferPoolAttrName) for plan.json.
//
//===----------------------------------------------------------------------===//
#ifndef DSOPT_TRANSFORMS_HOSTMEMORY_H
#define DSOPT_TRANSFORMS_HOSTMEMORY_H

#include "mlir/IR/BuiltinOps.h"

namespace dsopt {

/// The unit attribute on a module whose host arena is pageable.
inline constexpr llvm::StringLiteral kHostPageableAttrName = "dsopt.host_pageable";

/// The i64 attribute on a ds.transfer from the file to the host that reads
/// a parameter shard into buffer N of the pool.
inline constexpr llvm::StringLiteral kParamBufferAttrName = "dsopt.param_buffer";

/// The module's parameter buffer pool, set by ds-plan-memory: a dictionary
/// of i64 `buffers` (the pool's buffers that reads use), `buffer_bytes`
/// (each buffer's bytes: the largest shard read through the pool, rounded
/// up to a 4096-byte block) and `offset` (the first buffer's offset in the
/// host arena; buffer N is at offset + N * buffer_bytes).
inline constexpr llvm::StringLiteral kParamBufferPoolAttrName =
    "dsopt.param_buffer_pool";

/// Whether `module`'s host arena is pinned host memory.
inline bool isHostArenaPinned(mlir::ModuleOp module) {
  return !module->hasAttr(kHostPageableAttrName);
}

} // namespace dsopt

#endif // DSOPT_TRANSFORMS_HOSTMEMORY_H

//===- Passes.td - dsopt conversion passes -----------------*- tablegen -*-===//

#ifndef DSOPT_CONVERSION_PASSES_TD
#define DSOPT_CONVERSION_PASSES_TD

include "mlir/Pass/PassBase.td"

def DsLowerToEmitC : Pass<"ds-lower-to-emitc", "mlir::ModuleOp"> {
  let summary = "Lower the memory-planned @main to an EmitC program";
  let description = [{
    Replaces `@main` (after `ds-plan-memory`) by EmitC: `dsopt_run` calls one
    libdsrt kernel per op on tensor views of the arena, acquiring and
    releasing buffers as the plan says; `dsopt_describe` lists the program's
    inputs, parameters (with their files and byte ranges), outputs, memory
    plan and ops; constants become static arrays. `emitc::translateToCpp`
    turns the result into C++.

    Runs of ops that repeat back to back with the same code on other buffers
    (a model's identical layers) are emitted once, as a block function that
    takes the offsets of its buffers, and called once per repeat; each
    distinct fused loop is emitted once. `outline=false` emits one kernel
    call per op instead (the reference bench/compile_bench.py compares with).

    `target=cuda` emits the same program for the cuda backend: each fused
    loop becomes a CUDA `__global__` kernel (one thread per element, a
    grid-stride loop) and a host function that launches it on the op's
    stream; the source is then compiled by nvcc as a `.cu` file.
  }];
  let dependentDialects = ["mlir::emitc::EmitCDialect"];
  let options = [
    Option<"withMain", "main", "bool", /*default=*/"true",
           "Emit `int main` running the program">,
    Option<"modelPath", "model-path", "std::string", /*default=*/"\"\"",
           "Model file the program loads its weights next to (default: the "
           "module's ds.source, made absolute)">,
    Option<"symbolPrefix", "prefix", "std::string", /*default=*/"\"dsopt_\"",
           "Prefix of the emitted functions and constants (<prefix>run, "
           "<prefix>describe)">,
    Option<"outlineRepeats", "outline", "bool", /*default=*/"true",
           "Emit repeated layers once, as block functions called per layer">,
    Option<"target", "target", "std::string", /*default=*/"\"cpu\"",
           "Backend the program is generated for: cpu (C++ loops) or cuda "
           "(fused loops as CUDA kernels)">,
    Option<"nvmePath", "nvme-path", "std::string", /*default=*/"\"\"",
           "Directory of the file (NVMe) space's file when the plan has one "
           "(offload_optimizer.nvme_path); `train --nvme-path` overrides it">,
    Option<"aioBlockSize", "aio-block-size", "int64_t", /*default=*/"1048576",
           "Bytes per file space I/O request (aio.block_size)">,
    Option<"aioQueueDepth", "aio-queue-depth", "int64_t", /*default=*/"8",
           "File space I/O requests in flight per ring (aio.queue_depth)">,
    Option<"aioIntraOpParallelism", "aio-intra-op-parallelism", "int64_t",
           /*default=*/"1",
           "Rings one file space transfer is split across "
           "(aio.intra_op_parallelism)">,
    Option<"aioSingleSubmit", "aio-single-submit", "bool", /*default=*/"false",
           "Submit each file space I/O request alone (aio.single_submit)">,
    Option<"aioOverlapEvents", "aio-overlap-events", "bool", /*default=*/"true",
           "Submit file space I/O as requests complete (aio.overlap_events)">
  ];
}

#endif // DSOPT_CONVERSION_PASSES_TD

//===- PipelineRanks.cpp - every pipeline rank's program ------------------===//
//
// ds-pipeline-ranks: next to the cut training step, one nested module per
// pipeline rank, each made by ds-pipeline-split. Keeping the rank programs
// in one module lets a single pass pipeline (ds-train) build all of them,
// and lets the passes that follow (ds-zero, planning) nest on
// `builtin.module` as upstream pipelines nest on functions.
//
//===----------------------------------------------------------------------===//

#include "dsopt/Transforms/Passes.h"

#include "ds/IR/DsDialect.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/PassManager.h"

namespace dsopt {
#define GEN_PASS_DEF_DSPIPELINERANKS
#include "dsopt/Transforms/Passes.h.inc"
} // namespace dsopt

using namespace mlir;

namespace {

struct PipelineRanksPass
    : dsopt::impl::DsPipelineRanksBase<PipelineRanksPass> {
  using DsPipelineRanksBase::DsPipelineRanksBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto pipeline = module->getAttrOfType<dsopt::ds::PipelineAttr>(
        dsopt::ds::DsDialect::kPipelineAttrName);
    if (!pipeline) {
      module.emitError("no ds.pipeline on the module; run ds-pipeline first");
      return signalPassFailure();
    }
    // At least one (#ds.pipeline's verifier).
    int64_t stages = pipeline.getStages();
    if (!module.getOps<ModuleOp>().empty()) {
      module.emitError("the module already holds nested modules; "
                       "ds-pipeline-ranks runs once, on the cut step");
      return signalPassFailure();
    }

    Block *body = module.getBody();
    SmallVector<Operation *> original;
    for (Operation &op : *body)
      original.push_back(&op);

    OpBuilder b = OpBuilder::atBlockEnd(body);
    for (int64_t r = 0; r < stages; ++r) {
      auto rank = ModuleOp::create(b, module.getLoc(),
                                   StringRef("pp" + std::to_string(r)));
      for (NamedAttribute attr : module->getDiscardableAttrs())
        rank->setAttr(attr.getName(), attr.getValue());
      OpBuilder inner = OpBuilder::atBlockEnd(rank.getBody());
      for (Operation *op : original)
        inner.clone(*op);

      OpPassManager split(ModuleOp::getOperationName());
      dsopt::DsPipelineSplitOptions options;
      options.rank = r;
      options.dp = dp;
      split.addPass(dsopt::createDsPipelineSplit(options));
      if (failed(runPipeline(split, rank)))
        return signalPassFailure();
    }
  }
};

} // namespace

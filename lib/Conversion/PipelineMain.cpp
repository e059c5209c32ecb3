//===- PipelineMain.cpp - the entry point of pipeline programs ------------===//

#include "dsopt/Conversion/PipelineMain.h"

#include "mlir/Dialect/EmitC/IR/EmitC.h"
#include "mlir/IR/Builders.h"

using namespace mlir;

namespace dsopt {

void emitCudaDeviceCheck(OpBuilder &b, Location loc, Value argv) {
  MLIRContext *context = b.getContext();
  Value zero = emitc::LiteralOp::create(
      b, loc, emitc::OpaqueType::get(context, "int"), "0");
  auto argvValue = cast<TypedValue<emitc::PointerType>>(argv);
  Value program = emitc::LoadOp::create(
      b, loc, argvValue.getType().getPointee(),
      emitc::SubscriptOp::create(b, loc, argvValue, zero));
  emitc::CallOpaqueOp::create(b, loc, TypeRange{},
                              "dsrt::cuda::require_device",
                              ValueRange{program});
}

OwningOpRef<ModuleOp> buildPipelineMain(MLIRContext *context,
                                        ArrayRef<std::string> rankPrograms,
                                        bool cuda) {
  context->getOrLoadDialect<emitc::EmitCDialect>();
  Location loc = UnknownLoc::get(context);
  OwningOpRef<ModuleOp> module = ModuleOp::create(loc);
  OpBuilder b = OpBuilder::atBlockEnd(module->getBody());
  auto opaque = [&](StringRef type) {
    return emitc::OpaqueType::get(context, type);
  };
  Type i32 = opaque("int");
  Type argvType =
      emitc::PointerType::get(emitc::PointerType::get(opaque("char")));
  auto main = emitc::FuncOp::create(
      b, loc, "main", b.getFunctionType({i32, argvType}, {i32}));
  Block *entry = main.addEntryBlock();
  b.setInsertionPointToEnd(entry);
  if (cuda)
    emitCudaDeviceCheck(b, loc, entry->getArgument(1));

  // dsrt::PipelineRankProgram ranks[P]; ranks[r] = <prefix r>program;
  Type programType = opaque("dsrt::PipelineRankProgram");
  auto tableType = emitc::ArrayType::get(
      {static_cast<int64_t>(rankPrograms.size())}, programType);
  auto table = emitc::VariableOp::create(b, loc, tableType,
                                         emitc::OpaqueAttr::get(context, ""));
  auto tableValue = cast<TypedValue<emitc::ArrayType>>(table.getResult());
  for (auto [r, name] : llvm::enumerate(rankPrograms)) {
    Value index = emitc::ConstantOp::create(b, loc, b.getIndexType(),
                                            b.getIndexAttr(r));
    Value slot = emitc::SubscriptOp::create(b, loc, tableValue, index);
    Value program =
        emitc::LiteralOp::create(b, loc, programType, b.getStringAttr(name));
    emitc::AssignOp::create(b, loc, slot, program);
  }
  Value count = emitc::ConstantOp::create(
      b, loc, b.getI64Type(),
      b.getI64IntegerAttr(static_cast<int64_t>(rankPrograms.size())));
  Value status =
      emitc::CallOpaqueOp::create(
          b, loc, TypeRange{i32}, "dsrt::pipeline_main",
          ValueRange{entry->getArgument(0), entry->getArgument(1), tableValue,
                     count})
          .getResult(0);
  emitc::ReturnOp::create(b, loc, status);
  return module;
}

} // namespace dsopt

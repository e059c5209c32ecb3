//===- WriteBehind.h - When an NVMe write-behind must have completed ------===//
//
// ds-offload writes each host update's states back to the file space right
// after the update (a ds.transfer from host to file whose result only the
// function returns). Nothing reads that result, so without a rule its host
// buffer would stay live, and its write pending, until the step ends, and
// the host arena would hold every state of the rank. The rule, shared by
// the memory planner (which ends the buffer there) and the code generator
// (which waits for the write there): a write-behind completes before the
// second host update after it runs — double buffering, two updates' states
// in flight. An updated parameter shard that a device update computed
// (offload_param nvme, the optimizer on the device) goes back to its file
// the same way, through a copy to the host: such a copy counts as a host
// update here, so the host holds the shards of two write-backs in flight,
// not every updated shard of the step.
//
//===----------------------------------------------------------------------===//
#ifndef DSOPT_TRANSFORMS_WRITEBEHIND_H
#define DSOPT_TRANSFORMS_WRITEBEHIND_H

#include "ds/IR/DsDialect.h"

#include "mlir/IR/Operation.h"

namespace dsopt {

/// A ds.transfer from host to file memory whose results only the
/// function's terminator uses.
inline bool isWriteBehind(mlir::Operation *op) {
  auto transfer = llvm::dyn_cast<ds::TransferOp>(op);
  if (!transfer || transfer.getFrom() != ds::MemorySpace::host ||
      transfer.getTo() != ds::MemorySpace::file)
    return false;
  for (mlir::Operation *user : transfer.getResult().getUsers())
    if (!user->hasTrait<mlir::OpTrait::IsTerminator>())
      return false;
  return true;
}

/// Whether `op` starts a value on its way back to the file: a host update,
/// or a copy from the device to the host that a write-behind writes.
inline bool startsWriteBack(mlir::Operation *op) {
  auto transfer = llvm::dyn_cast<ds::TransferOp>(op);
  if (!transfer)
    return ds::getResultSpace(op) == ds::MemorySpace::host;
  return transfer.getFrom() == ds::MemorySpace::device &&
         transfer.getTo() == ds::MemorySpace::host &&
         llvm::any_of(transfer.getResult().getUsers(), isWriteBehind);
}

/// The op before which write-behind `op` must have completed: the second
/// op after it in its block that starts a write-back (startsWriteBack), or
/// null when there is none (it completes by the function's end).
inline mlir::Operation *writeBehindDeadline(mlir::Operation *op) {
  int updates = 0;
  for (mlir::Operation *next = op->getNextNode(); next;
       next = next->getNextNode())
    if (startsWriteBack(next) && ++updates == 2)
      return next;
  return nullptr;
}

} // namespace dsopt

#endif // DSOPT_TRANSFORMS_WRITEBEHIND_H

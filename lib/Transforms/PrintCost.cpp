//===- PrintCost.cpp - report the cost model ------------------------------===//

#include "dsopt/Transforms/Passes.h"

#include "ds/IR/DsDialect.h"

#include "mlir/Interfaces/FunctionInterfaces.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/Support/Format.h"

namespace dsopt {
#define GEN_PASS_DEF_DSPRINTCOST
#include "dsopt/Transforms/Passes.h.inc"
} // namespace dsopt

using namespace mlir;

namespace {
struct OpTotals {
  int64_t count = 0, flops = 0, bytes = 0;
};

struct PrintCostPass : dsopt::impl::DsPrintCostBase<PrintCostPass> {
  using DsPrintCostBase::DsPrintCostBase;

  void runOnOperation() override {
    llvm::raw_ostream &os = llvm::errs();
    getOperation().walk([&](FunctionOpInterface function) {
      llvm::MapVector<StringRef, OpTotals> perName;
      OpTotals total;
      function.walk([&](dsopt::ds::CostOpInterface op) {
        int64_t flops = op.getFlops(), bytes = op.getBytesAccessed();
        OpTotals &entry = perName[op->getName().getStringRef()];
        ++entry.count;
        entry.flops += flops;
        entry.bytes += bytes;
        ++total.count;
        total.flops += flops;
        total.bytes += bytes;
        if (perOp)
          op->emitRemark() << "flops = " << flops << ", bytes = " << bytes;
      });
      SmallVector<std::pair<StringRef, OpTotals>> rows(perName.begin(),
                                                       perName.end());
      llvm::stable_sort(rows, [](const auto &a, const auto &b) {
        return a.second.flops > b.second.flops;
      });
      os << "cost of @" << function.getName() << "\n";
      os << llvm::format("  %-28s %8s %20s %20s\n", "op", "count", "flops",
                         "bytes");
      for (const auto &[name, totals] : rows)
        os << llvm::format("  %-28s %8lld %20lld %20lld\n",
                           name.str().c_str(), (long long)totals.count,
                           (long long)totals.flops, (long long)totals.bytes);
      os << llvm::format("  %-28s %8lld %20lld %20lld\n", "total",
                         (long long)total.count, (long long)total.flops,
                         (long long)total.bytes);
    });
    markAllAnalysesPreserved();
  }
};
} // namespace

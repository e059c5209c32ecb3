//===- DsInterfaces.td - ds op interfaces ------------------*- tablegen -*-===//

#ifndef DSOPT_DIALECT_DS_DSINTERFACES_TD
#define DSOPT_DIALECT_DS_DSINTERFACES_TD

include "mlir/IR/OpBase.td"

def Ds_CostOpInterface : OpInterface<"CostOpInterface"> {
  let description = [{
    The cost model later passes ask of every op: arithmetic work and memory
    traffic of one evaluation. Pipeline balancing, the plan and the benchmark
    roofline read it. FLOPs count one multiply-add as two operations and one
    transcendental as one.
  }];
  let cppNamespace = "::dsopt::ds";
  let methods = [
    InterfaceMethod<
      "Arithmetic operations of one evaluation of the op.",
      "int64_t", "getFlops">,
    InterfaceMethod<
      "Bytes read from operands plus bytes written to results, each crossing "
      "memory once.",
      "int64_t", "getBytesAccessed", (ins), [{}], [{
        return ::dsopt::ds::detail::defaultBytesAccessed($_op.getOperation());
      }]>,
  ];
}

#endif // DSOPT_DIALECT_DS_DSINTERFACES_TD

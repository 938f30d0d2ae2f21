//===- MLTInterfaces.td - mlt op interfaces ----------------*- tablegen -*-===//
//
// Part of mlt. Interfaces through which ops join the compiler's algorithms:
// an op takes part in autodiff by implementing GradientOpInterface. Passes find
// the interface with `dyn_cast` and reject an op without it by name, never
// falling back to a default.
//
//===----------------------------------------------------------------------===//

#ifndef MLT_DIALECT_MLT_MLTINTERFACES_TD
#define MLT_DIALECT_MLT_MLTINTERFACES_TD

include "mlir/IR/OpBase.td"

def MLT_GradientOpInterface : OpInterface<"GradientOpInterface"> {
  let cppNamespace = "::mlt";
  let description = [{
    The vector-Jacobian product of an op: given the gradients of the loss with
    respect to the op's results, build the gradients with respect to its
    operands. `mlt-autodiff` calls it once per op, in reverse program order,
    with the builder placed where the backward ops go. Ops that read state
    (`mlt.load`) emit the accumulation into that state themselves.
  }];
  let methods = [
    InterfaceMethod<[{
        Builds the operand gradients from `resultGrads` (one per result; null
        where a result does not reach the loss). Appends one value per operand
        to `operandGrads`: its gradient, or null for an operand that has none
        (integer token ids, labels, layer indices). Fails with a diagnostic on
        the op when a case is not supported.
      }],
      "::mlir::LogicalResult", "buildGradients",
      (ins "::mlir::OpBuilder &":$builder, "::mlir::ValueRange":$resultGrads,
           "::llvm::SmallVectorImpl<::mlir::Value> &":$operandGrads)>
  ];
}

def MLT_ShardingRuleOpInterface : OpInterface<"ShardingRuleOpInterface"> {
  let cppNamespace = "::mlt";
  let description = [{
    How an op's dimensions may be split over a device mesh, as a
    `ShardingRule` (ShardingRule.h): the op's factors, which factors make up
    each dimension of each operand and result, which factors must stay whole,
    and whether partial sums pass through the op. Sharding propagation and the
    partitioner use nothing else about an op, so a new op joins them by
    implementing this. The models live in MLTShardingRules.cpp, attached to
    the ops when the dialect loads.
  }];
  let methods = [
    InterfaceMethod<[{
        The op's sharding rule, for its current (static) operand and result
        types.
      }],
      "::mlt::ShardingRule", "getShardingRule", (ins)>
  ];
}

#endif // MLT_DIALECT_MLT_MLTINTERFACES_TD

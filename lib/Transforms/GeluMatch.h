//===- GeluMatch.h - matching the tanh GELU's primitive-op form -----------===//
//
// Helpers shared by ds-recognize-gelu (the forward written as primitive
// ops) and ds-fuse-matmul-epilogue (the derivative autodiff writes for
// ds.gelu): operands of commutative ops in either order, and constants
// compared with the expected value rounded to their own element type.
//
//===----------------------------------------------------------------------===//

#ifndef DSOPT_TRANSFORMS_GELUMATCH_H
#define DSOPT_TRANSFORMS_GELUMATCH_H

#include "ds/IR/DsDialect.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Matchers.h"
#include "mlir/IR/PatternMatch.h"

#include <optional>
#include <utility>

namespace dsopt::gelu {

/// sqrt(2 / pi) and the cubic coefficient of the tanh approximation.
constexpr double kBeta = 0.7978845608028654, kKappa = 0.044715;

/// `value` is a constant of one element (any shape of size 1, or a splat of
/// `like`'s shape) equal to `expected` rounded to its element type.
inline bool isScalar(mlir::Value value, double expected) {
  mlir::Attribute attr;
  if (!value || !mlir::matchPattern(value, mlir::m_Constant(&attr)))
    return false;
  auto elements = llvm::dyn_cast<mlir::DenseFPElementsAttr>(attr);
  if (!elements || !elements.isSplat())
    return false;
  llvm::APFloat actual = elements.getSplatValue<llvm::APFloat>();
  llvm::APFloat want(expected);
  bool lost = false;
  want.convert(actual.getSemantics(), llvm::APFloat::rmNearestTiesToEven, &lost);
  return actual.bitwiseIsEqual(want);
}

/// The operands of the binary `Op` that makes `value`, if one does.
template <typename Op>
std::optional<std::pair<mlir::Value, mlir::Value>> operands(mlir::Value value) {
  auto op = value ? value.getDefiningOp<Op>() : Op();
  if (!op)
    return std::nullopt;
  return std::pair(op.getLhs(), op.getRhs());
}

/// `value` = Op(other, constant `c`) in either order; returns `other`.
template <typename Op>
mlir::Value withScalar(mlir::Value value, double c) {
  auto pair = operands<Op>(value);
  if (!pair)
    return {};
  if (isScalar(pair->second, c))
    return pair->first;
  if (isScalar(pair->first, c))
    return pair->second;
  return {};
}

/// `value` = Op(`known`, other) in either order; returns `other`.
template <typename Op>
mlir::Value withOperand(mlir::Value value, mlir::Value known) {
  auto pair = operands<Op>(value);
  if (!pair)
    return {};
  if (pair->first == known)
    return pair->second;
  if (pair->second == known)
    return pair->first;
  return {};
}

/// `value` = x * x.
inline bool isSquare(mlir::Value value, mlir::Value x) {
  auto pair = operands<ds::MulOp>(value);
  return pair && pair->first == x && pair->second == x;
}

/// `value` = x * (x * x), (x * x) * x or pow(x, 3).
inline bool isCube(mlir::Value value, mlir::Value x) {
  if (mlir::Value other = withOperand<ds::MulOp>(value, x))
    if (isSquare(other, x))
      return true;
  auto pow = operands<ds::PowOp>(value);
  return pow && pow->first == x && isScalar(pow->second, 3.0);
}

/// `t` = tanh(sqrt(2/pi) * (x + 0.044715 * x^3)) for some x (returned), in
/// any operand order, every intermediate of x's type.
inline mlir::Value tanhInnerOf(mlir::Value t) {
  auto tanh = t ? t.getDefiningOp<ds::TanhOp>() : ds::TanhOp();
  if (!tanh)
    return {};
  mlir::Value sum = withScalar<ds::MulOp>(tanh.getInput(), kBeta);
  auto pair = operands<ds::AddOp>(sum);
  if (!pair)
    return {};
  for (auto [x, cubic] : {*pair, std::pair(pair->second, pair->first)})
    if (x.getType() == t.getType() && sum.getType() == t.getType() &&
        isCube(withScalar<ds::MulOp>(cubic, kKappa), x))
      return x;
  return {};
}

/// x of the derivative autodiff writes for ds.gelu {approximate = tanh}
/// (DsVJP.cpp), 0.5 (1 + t) + (0.5 x (1 - t t)) (sqrt(2/pi) (1 + 3 0.044715
/// x x)) with t = tanh(inner(x)), in any operand order; or null.
inline mlir::Value tanhGeluDerivativeOf(mlir::Value d) {
  auto sum = operands<ds::AddOp>(d);
  if (!sum)
    return {};
  for (auto [left, right] : {*sum, std::pair(sum->second, sum->first)}) {
    mlir::Value t = withScalar<ds::AddOp>(withScalar<ds::MulOp>(left, 0.5), 1.0);
    mlir::Value x = tanhInnerOf(t);
    auto product = operands<ds::MulOp>(right);
    if (!x || !product || d.getType() != x.getType())
      continue;
    for (auto [p, innerDerivative] :
         {*product, std::pair(product->second, product->first)}) {
      mlir::Value square = withScalar<ds::MulOp>(
          withScalar<ds::AddOp>(withScalar<ds::MulOp>(innerDerivative, kBeta),
                                1.0),
          3 * kKappa);
      auto pq = operands<ds::MulOp>(p);
      if (!isSquare(square, x) || !pq)
        continue;
      for (auto [half, oneMinus] : {*pq, std::pair(pq->second, pq->first)}) {
        auto sub = oneMinus ? oneMinus.getDefiningOp<ds::SubOp>() : ds::SubOp();
        if (withScalar<ds::MulOp>(half, 0.5) == x && sub &&
            isScalar(sub.getLhs(), 1.0) && isSquare(sub.getRhs(), t))
          return x;
      }
    }
  }
  return {};
}

/// The elementwise ops `root` reads, transitively, down to `stop`: the
/// chain a fold replaces.
inline llvm::SmallVector<mlir::Operation *> chainBelow(mlir::Operation *root,
                                                       mlir::Value stop) {
  llvm::SmallVector<mlir::Operation *> chain;
  llvm::SmallVector<mlir::Value> pending(root->getOperands());
  while (!pending.empty()) {
    mlir::Value value = pending.pop_back_val();
    mlir::Operation *def = value.getDefiningOp();
    if (value == stop || !def || llvm::is_contained(chain, def) ||
        !llvm::isa<ds::MulOp, ds::AddOp, ds::SubOp, ds::TanhOp, ds::PowOp>(def))
      continue;
    chain.push_back(def);
    llvm::append_range(pending, def->getOperands());
  }
  return chain;
}

/// Erases the ops of `chain` nothing reads any more (a value read
/// elsewhere stays, with what it reads).
inline void eraseUnused(mlir::RewriterBase &rewriter,
                        llvm::SmallVector<mlir::Operation *> chain) {
  for (bool erased = true; erased;) {
    erased = false;
    for (mlir::Operation *&op : chain)
      if (op && op->use_empty()) {
        rewriter.eraseOp(op);
        op = nullptr;
        erased = true;
      }
  }
}

} // namespace dsopt::gelu

#endif // DSOPT_TRANSFORMS_GELUMATCH_H

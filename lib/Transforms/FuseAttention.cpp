//===- FuseAttention.cpp - scaled-dot-product attention as one op ---------===//
//
// Finds attention as the ONNX exports spell it,
//
//   s = matmul(q, kᵀ) [* c | / c]
//   x = where(causal, -big, s) | add(s, causal additive mask) | s
//   o = matmul(softmax(x, last axis), v)
//
// and replaces it by one ds.attention (scale, causal), whose kernels never
// materialise the [..., T, T] scores and whose gradient recomputes the
// probabilities from the saved log-sum-exp. A causal mask is recognised from
// its constant: the entries above the diagonal masked (a where's fill, or an
// additive mask's entries there, at most -1e9: their exponential is 0 in f32
// as the kernels' skipped keys are), the others kept (an additive mask's 0).
// Every intermediate must have only the chain's use. Chains that end in a
// softmax between two products but do not match are reported as warnings.
//
// When q, k (or kᵀ) and v are transposes of tokens-major [..., T, H, Dh]
// tensors (the projections' [B, T, H, Dh] read as [B, H, T, Dh]), the op
// reads those tensors instead (`tokens_major`) and its result replaces the
// transposes back to [..., T, H, Dh] that read it: no copies around the
// kernels, forward or (through the gradient, which keeps the layout)
// backward.
//
// When those tokens-major q, k and v are results 0, 1 and 2 of one split
// of x [..., T, 3 D] along its last axis into equal thirds (the fused
// q, k, v projection), each reshaped to [..., T, H, Dh] (D = H Dh) and
// read only there, the op becomes ds.attention_packed on x reshaped to
// [..., T, 3, H, Dh]: the kernels read q, k and v where the projection
// wrote them, and the split is gone. Its gradient (ds.attention_packed_grad,
// from autodiff, which runs after this pass) writes dq, dk and dv into one
// packed tensor, so the projection's gradient needs no concat.
//
//===----------------------------------------------------------------------===//

#include "dsopt/Transforms/Passes.h"

#include "ds/IR/DsDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/SetVector.h"

namespace dsopt {
#define GEN_PASS_DEF_DSFUSEATTENTION
#include "dsopt/Transforms/Passes.h.inc"
} // namespace dsopt

using namespace mlir;
using namespace dsopt;

namespace {

/// Masked entries at most this: exp(masked - row maximum) is 0 in f32.
constexpr double kMaskedAtMost = -1e9;
/// The largest head the kernels take (kMaxAttentionHead in
/// runtime/src/kernel_common.h).
constexpr int64_t kMaxHeadDim = 128;

DenseElementsAttr constantOf(Value value) {
  auto constant = value.getDefiningOp<ds::ConstantOp>();
  return constant ? dyn_cast<DenseElementsAttr>(constant.getValue())
                  : DenseElementsAttr();
}

std::optional<double> scalarOf(Value value) {
  DenseElementsAttr dense = constantOf(value);
  if (!dense || !dense.isSplat() || !isa<FloatType>(dense.getElementType()))
    return std::nullopt;
  return dense.getSplatValue<APFloat>().convertToDouble();
}

bool hasOneUse(Value value) { return value.hasOneUse(); }

/// The mask's [T, T] entries (leading axes 1), row-major, as a predicate
/// `kept(i, j)`; true when the constant is causal in that sense.
template <typename Kept>
bool isCausal(DenseElementsAttr dense, int64_t t, Kept kept) {
  auto type = cast<ShapedType>(dense.getType());
  if (type.getRank() < 2 || type.getShape().take_back(2) != ArrayRef<int64_t>{t, t} ||
      type.getNumElements() != t * t)
    return false;
  for (int64_t i = 0; i < t; ++i)
    for (int64_t j = 0; j < t; ++j)
      if (kept(dense, i * t + j) != (j <= i))
        return false;
  return true;
}

struct Match {
  Value query, key, keyTransposed, value;
  bool keyIsTransposed = false; // the product's rhs is kᵀ, not k
  double scale = 1.0;
  bool causal = false;
  SmallVector<Operation *> chain; // to erase, consumer first
};

/// Why `softmax` does not start a fusable chain, or the match.
FailureOr<Match> match(ds::SoftmaxOp softmax, std::string &why) {
  auto fail = [&](const Twine &reason) {
    why = reason.str();
    return failure();
  };
  Match m;
  auto xType = cast<ShapedType>(softmax.getInput().getType());
  int64_t rank = xType.getRank();
  if (rank < 2 || softmax.getAxis() != rank - 1)
    return failure();
  if (!softmax.getResult().hasOneUse())
    return failure();
  auto pv = dyn_cast<ds::MatMulOp>(*softmax.getResult().getUsers().begin());
  if (!pv || pv.getLhs() != softmax.getResult() || pv.getTransposeLhs() ||
      pv.getTransposeRhs())
    return failure();
  int64_t t = xType.getShape().back();
  if (xType.getShape()[rank - 2] != t)
    return failure();
  m.chain = {pv, softmax};

  Value x = softmax.getInput();
  Value s = x;
  // The mask.
  if (auto where = x.getDefiningOp<ds::WhereOp>(); where && hasOneUse(x)) {
    DenseElementsAttr cond = constantOf(where.getCondition());
    bool sOnLeft = !scalarOf(where.getLhs());
    std::optional<double> fill = scalarOf(sOnLeft ? where.getRhs() : where.getLhs());
    if (!cond || !fill || *fill > kMaskedAtMost)
      return fail("the where before the softmax is not a constant mask with "
                  "a fill of at most -1e9");
    // sOnLeft: cond true keeps the score.
    if (!isCausal(cond, t, [&](DenseElementsAttr d, int64_t k) {
          bool c = d.isSplat() ? d.getSplatValue<bool>()
                               : d.getValues<bool>()[k];
          return sOnLeft ? c : !c;
        }))
      return fail("the mask is not causal (query i sees keys j <= i)");
    s = sOnLeft ? where.getLhs() : where.getRhs();
    m.causal = true;
    m.chain.push_back(where);
  } else if (auto add = x.getDefiningOp<ds::AddOp>(); add && hasOneUse(x)) {
    Value maskValue = add.getRhs();
    s = add.getLhs();
    if (!constantOf(maskValue))
      std::swap(maskValue, s);
    if (!constantOf(maskValue) && !constantOf(s))
      if (auto trilu = maskValue.getDefiningOp<ds::TriluOp>(); !trilu)
        std::swap(maskValue, s);
    // A large T's mask is computed: trilu(splat c, upper, k = 1) is c
    // above the diagonal and 0 on and below it.
    if (auto trilu = maskValue.getDefiningOp<ds::TriluOp>()) {
      std::optional<double> c = scalarOf(trilu.getInput());
      auto type = cast<ShapedType>(trilu.getType());
      if (!c || *c > kMaskedAtMost || !trilu.getUpper() || trilu.getK() != 1 ||
          type.getRank() < 2 ||
          type.getShape().take_back(2) != ArrayRef<int64_t>{t, t} ||
          type.getNumElements() != t * t)
        return fail("the add before the softmax is a trilu that is not a "
                    "causal mask (a splat of at most -1e9, upper, k = 1)");
      m.causal = true;
      m.chain.push_back(add);
    } else {
    DenseElementsAttr mask = constantOf(maskValue);
    if (!mask || !isa<FloatType>(mask.getElementType()))
      return fail("the add before the softmax is not a constant additive mask");
    if (!isCausal(mask, t, [&](DenseElementsAttr d, int64_t k) {
          double v = (d.isSplat() ? d.getSplatValue<APFloat>()
                                  : d.getValues<APFloat>()[k])
                         .convertToDouble();
          return v == 0.0;
        }))
      return fail("the additive mask is not causal (0 where query i sees key "
                  "j <= i, at most -1e9 elsewhere)");
    // isCausal saw 0 exactly on and below the diagonal; the rest must mask.
    for (APFloat v : mask.getValues<APFloat>()) {
      double d = v.convertToDouble();
      if (d != 0.0 && d > kMaskedAtMost)
        return fail("the additive mask has entries other than 0 and at most "
                    "-1e9");
    }
    m.causal = true;
    m.chain.push_back(add);
    }
  }
  // The scale.
  if (auto mul = s.getDefiningOp<ds::MulOp>(); mul && hasOneUse(s)) {
    std::optional<double> c = scalarOf(mul.getRhs());
    Value product = mul.getLhs();
    if (!c) {
      c = scalarOf(mul.getLhs());
      product = mul.getRhs();
    }
    if (!c)
      return fail("the scores are multiplied by something other than a scalar");
    m.scale = *c;
    m.chain.push_back(mul);
    s = product;
  } else if (auto div = s.getDefiningOp<ds::DivOp>(); div && hasOneUse(s)) {
    std::optional<double> c = scalarOf(div.getRhs());
    if (!c || *c == 0.0)
      return fail("the scores are divided by something other than a scalar");
    m.scale = 1.0 / *c;
    m.chain.push_back(div);
    s = div.getLhs();
  }
  auto qk = s.getDefiningOp<ds::MatMulOp>();
  if (!qk || !hasOneUse(s) || qk.getTransposeLhs())
    return fail("the softmax's input is not a product q kᵀ");
  m.chain.push_back(qk);
  m.query = qk.getLhs();
  m.value = pv.getRhs();
  m.keyIsTransposed = !qk.getTransposeRhs();
  (m.keyIsTransposed ? m.keyTransposed : m.key) = qk.getRhs();
  auto qType = dyn_cast<RankedTensorType>(m.query.getType());
  auto kType = cast<RankedTensorType>(qk.getRhs().getType());
  if (!qType || qType != m.value.getType() || qType.getRank() != rank ||
      qType.getShape()[rank - 2] != t || kType.getRank() != rank ||
      kType.getShape().drop_back(2) != qType.getShape().drop_back(2) ||
      kType.getDimSize(rank - (m.keyIsTransposed ? 1 : 2)) != t ||
      kType.getDimSize(rank - (m.keyIsTransposed ? 2 : 1)) !=
          qType.getShape().back() ||
      pv.getResult().getType() != qType)
    return fail("q, k and v do not all have one shape [..., T, Dh]");
  if (qType.getShape().back() > kMaxHeadDim)
    return fail("head dimension " + Twine(qType.getShape().back()) +
                " exceeds the kernels' " + Twine(kMaxHeadDim));
  return m;
}

/// The permutation that swaps axes -3 and -2 of rank `rank` (its own
/// inverse): tokens-major [..., T, H, Dh] <-> heads-major [..., H, T, Dh].
SmallVector<int64_t> swapHeadsPerm(int64_t rank) {
  SmallVector<int64_t> perm = llvm::to_vector(llvm::seq<int64_t>(0, rank));
  std::swap(perm[rank - 3], perm[rank - 2]);
  return perm;
}

/// x when `value` is ds.transpose(x, perm) of a tokens-major x
/// [..., T, H, Dh]: perm is swapHeadsPerm (`value` heads-major
/// [..., H, T, Dh]), or, `transposedKey`, the one that makes kᵀ
/// [..., H, Dh, T] of it.
Value tokensMajorSource(Value value, bool transposedKey) {
  auto transpose = value.getDefiningOp<ds::TransposeOp>();
  if (!transpose)
    return {};
  ArrayRef<int64_t> perm = transpose.getPerm();
  int64_t rank = static_cast<int64_t>(perm.size());
  if (rank < 3)
    return {};
  SmallVector<int64_t> want = swapHeadsPerm(rank);
  if (transposedKey)
    std::rotate(want.end() - 2, want.end() - 1,
                want.end()); // [.., r-2, r-1, r-3]
  return perm == ArrayRef<int64_t>(want) ? transpose.getInput() : Value();
}

/// The tokens-major fold: ds.attention on the sources of q, k and v when
/// all three are tokens-major transposes (tokensMajorSource); the
/// transposes of its result back to tokens-major read the new result
/// instead, any other reader a transpose of it. Null when q, k and v are
/// not all such transposes.
ds::AttentionOp buildTokensMajor(OpBuilder &b, Location loc, const Match &m,
                                 Value result) {
  Value query = tokensMajorSource(m.query, false);
  Value key = m.keyIsTransposed ? tokensMajorSource(m.keyTransposed, true)
                                : tokensMajorSource(m.key, false);
  Value value = tokensMajorSource(m.value, false);
  if (!query || !key || !value || key.getType() != query.getType() ||
      value.getType() != query.getType())
    return {};
  auto attention = ds::AttentionOp::create(
      b, loc, query, key, value, b.getF32FloatAttr(static_cast<float>(m.scale)),
      m.causal ? b.getUnitAttr() : UnitAttr(), b.getUnitAttr());
  int64_t rank = cast<ShapedType>(query.getType()).getRank();
  SmallVector<int64_t> swap = swapHeadsPerm(rank);
  Value headsMajor;
  for (OpOperand &use : llvm::make_early_inc_range(result.getUses())) {
    auto transpose = dyn_cast<ds::TransposeOp>(use.getOwner());
    if (transpose && transpose.getPerm() == ArrayRef<int64_t>(swap)) {
      transpose.getResult().replaceAllUsesWith(attention.getResult());
      transpose->erase();
      continue;
    }
    if (!headsMajor)
      headsMajor = ds::TransposeOp::create(b, loc, attention.getResult(),
                                           b.getDenseI64ArrayAttr(swap))
                       .getResult();
    use.set(headsMajor);
  }
  return attention;
}

/// The split whose results 0, 1, 2 are `attention`'s q, k, v (as
/// ds.reshape of each to [..., T, H, Dh], read only by it) when it splits
/// [..., T, 3 H Dh] along its last axis into equal thirds; null otherwise.
ds::SplitOp packedSplit(ds::AttentionOp attention) {
  auto type = cast<RankedTensorType>(attention.getQuery().getType());
  ArrayRef<int64_t> shape = type.getShape();
  int64_t width = shape[shape.size() - 2] * shape.back(); // D = H Dh
  ds::SplitOp split;
  Value operands[] = {attention.getQuery(), attention.getKey(),
                      attention.getValue()};
  for (auto [i, operand] : llvm::enumerate(operands)) {
    auto reshape = operand.getDefiningOp<ds::ReshapeOp>();
    if (!reshape || !operand.hasOneUse())
      return {};
    auto part = dyn_cast<OpResult>(reshape.getInput());
    auto owner = part ? dyn_cast<ds::SplitOp>(part.getOwner()) : ds::SplitOp();
    if (!owner || part.getResultNumber() != i || !part.hasOneUse() ||
        (split && owner != split))
      return {};
    split = owner;
    auto partType = cast<RankedTensorType>(part.getType());
    if (partType.getShape().drop_back() != shape.drop_back(2) ||
        partType.getShape().back() != width)
      return {};
  }
  auto input = cast<RankedTensorType>(split.getInput().getType());
  if (split.getNumResults() != 3 ||
      static_cast<int64_t>(split.getAxis()) != input.getRank() - 1)
    return {};
  return split;
}

/// ds.attention_packed in place of a tokens-major `attention` whose q, k, v
/// packedSplit finds; the reshapes and the split erased.
void foldPacked(ds::AttentionOp attention) {
  ds::SplitOp split = packedSplit(attention);
  if (!split)
    return;
  auto type = cast<RankedTensorType>(attention.getQuery().getType());
  SmallVector<int64_t> shape(type.getShape());
  shape.insert(shape.end() - 2, 3); // [..., T, 3, H, Dh]
  OpBuilder b(attention);
  Location loc = attention.getLoc();
  Value qkv = ds::ReshapeOp::create(
      b, loc, RankedTensorType::get(shape, type.getElementType()),
      split.getInput());
  auto packed = ds::AttentionPackedOp::create(
      b, loc, qkv, attention.getScaleAttr(),
      attention.getCausal() ? b.getUnitAttr() : UnitAttr());
  SmallVector<Operation *> reshapes;
  for (Value operand :
       {attention.getQuery(), attention.getKey(), attention.getValue()})
    reshapes.push_back(operand.getDefiningOp());
  attention.getResult().replaceAllUsesWith(packed.getResult());
  attention.getLse().replaceAllUsesWith(packed.getLse());
  attention->erase();
  for (Operation *reshape : reshapes)
    reshape->erase();
  split->erase();
}

struct FuseAttentionPass : dsopt::impl::DsFuseAttentionBase<FuseAttentionPass> {
  void runOnOperation() override {
    func::FuncOp function = getOperation();
    SmallVector<ds::SoftmaxOp> softmaxes;
    function.walk([&](ds::SoftmaxOp op) { softmaxes.push_back(op); });
    for (ds::SoftmaxOp softmax : softmaxes) {
      std::string why;
      FailureOr<Match> found = match(softmax, why);
      if (failed(found)) {
        if (!why.empty())
          softmax.emitWarning() << "attention not fused: " << why;
        continue;
      }
      Match &m = *found;
      auto pv = cast<ds::MatMulOp>(m.chain.front());
      OpBuilder b(pv);
      Location loc = pv.getLoc();
      // The chain's inputs, erased below when the fold leaves them unread.
      llvm::SetVector<Value> operands;
      operands.insert(m.query);
      operands.insert(m.value);
      operands.insert(m.keyIsTransposed ? m.keyTransposed : m.key);
      if (ds::AttentionOp attention =
              buildTokensMajor(b, loc, m, pv.getResult())) {
        eraseChain(m);
        for (Value operand : operands)
          if (auto transpose = operand.getDefiningOp<ds::TransposeOp>();
              transpose && transpose->use_empty())
            transpose->erase();
        foldPacked(attention);
        continue;
      }
      Value key = m.key;
      if (m.keyIsTransposed) {
        int64_t rank = cast<ShapedType>(m.keyTransposed.getType()).getRank();
        SmallVector<int64_t> perm;
        for (int64_t i = 0; i < rank; ++i)
          perm.push_back(i);
        std::swap(perm[rank - 1], perm[rank - 2]);
        key = ds::TransposeOp::create(b, loc, m.keyTransposed,
                                      b.getDenseI64ArrayAttr(perm))
                  .getResult();
      }
      auto attention = ds::AttentionOp::create(
          b, loc, m.query, key, m.value,
          b.getF32FloatAttr(static_cast<float>(m.scale)),
          m.causal ? b.getUnitAttr() : UnitAttr(), UnitAttr());
      pv.getResult().replaceAllUsesWith(attention.getResult());
      eraseChain(m);
    }
  }

  /// The chain (its result no longer read), then what only it read (masks,
  /// scales, their inputs).
  static void eraseChain(const Match &m) {
    llvm::SetVector<Operation *> inputs;
    for (Operation *op : m.chain)
      for (Value operand : op->getOperands())
        if (Operation *def = operand.getDefiningOp();
            def && !llvm::is_contained(m.chain, def))
          inputs.insert(def);
    for (Operation *op : m.chain)
      op->erase();
    // Each op once: a trilu before its input (the set keeps their order).
    for (size_t i = 0; i < inputs.size(); ++i) {
      Operation *op = inputs[i];
      if (!op->use_empty() || !isa<ds::ConstantOp, ds::TriluOp>(op))
        continue;
      for (Value operand : op->getOperands())
        if (Operation *def = operand.getDefiningOp())
          inputs.insert(def);
      op->dropAllReferences();
    }
    for (Operation *op : inputs)
      if (op->use_empty() && isa<ds::ConstantOp, ds::TriluOp>(op))
        op->erase();
  }
};

} // namespace

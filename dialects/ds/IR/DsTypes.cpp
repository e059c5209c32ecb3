//===- DsTypes.cpp - element and tensor size utilities --------------------===//

#include "ds/IR/DsDialect.h"

#include "mlir/IR/Location.h"
#include "mlir/IR/Visitors.h"
#include "llvm/Support/MathExtras.h"

using namespace mlir;

namespace dsopt::ds {

bool isSupportedElementType(Type type) {
  return type.isF32() || type.isF16() || type.isBF16() ||
         type.isSignlessInteger(64) || type.isSignlessInteger(32) ||
         type.isSignlessInteger(1);
}

int64_t getElementByteSize(Type elementType) {
  if (elementType.isSignlessInteger(1))
    return 1;
  if (elementType.isIntOrFloat())
    return (elementType.getIntOrFloatBitWidth() + 7) / 8;
  return 0;
}

std::optional<int64_t> getByteSize(ShapedType type) {
  if (!type.hasStaticShape())
    return std::nullopt;
  int64_t bytes = getElementByteSize(type.getElementType());
  for (int64_t dim : type.getShape()) {
    if (llvm::MulOverflow(bytes, dim, bytes))
      return std::nullopt;
  }
  return bytes;
}

std::string getNodeName(Location loc) {
  std::string name;
  loc->walk([&](Location nested) {
    if (auto named = dyn_cast<NameLoc>(nested)) {
      name = named.getName().str();
      return WalkResult::interrupt();
    }
    return WalkResult::advance();
  });
  return name;
}

} // namespace dsopt::ds

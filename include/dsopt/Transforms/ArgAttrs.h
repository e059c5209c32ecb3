//===- ArgAttrs.h - Setting many argument attributes at once --------------===//
//
// A pass that marks many of a function's arguments takes the attribute
// dictionaries once (getAllArgAttrs), changes them in that array and sets
// them back once (setAllArgAttrs): FunctionOpInterface::setArgAttr rebuilds
// the array of every argument's dictionary on each call, which is quadratic
// in the thousands of parameters and states a large model has.
//
//===----------------------------------------------------------------------===//
#ifndef DSOPT_TRANSFORMS_ARGATTRS_H
#define DSOPT_TRANSFORMS_ARGATTRS_H

#include "mlir/IR/OperationSupport.h"

namespace dsopt {

/// Sets attribute `name` of argument `i` to `value` in `argAttrs`, a
/// function's argument dictionaries as getAllArgAttrs returns them.
inline void setArgAttrIn(llvm::SmallVectorImpl<mlir::DictionaryAttr> &argAttrs, unsigned i,
                         llvm::StringRef name, mlir::Attribute value) {
  mlir::NamedAttrList attrs(argAttrs[i]);
  attrs.set(name, value);
  argAttrs[i] = attrs.getDictionary(value.getContext());
}

} // namespace dsopt

#endif // DSOPT_TRANSFORMS_ARGATTRS_H

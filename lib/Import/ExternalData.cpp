//===- ExternalData.cpp - validated references to external tensor data ---===//

#include "ExternalData.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

using llvm::StringRef;
using llvm::Twine;

namespace dsopt::onnx_import {

static llvm::Error refused(const onnx::TensorProto &tensor,
                           const Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                 "external data of tensor '" + tensor.name() +
                                     "': " + message);
}

llvm::Expected<ExternalRef>
resolveExternalData(StringRef modelDir, const onnx::TensorProto &tensor,
                    int64_t expectedBytes) {
  ExternalRef ref;
  bool hasLocation = false, hasLength = false;
  for (const auto &entry : tensor.external_data()) {
    StringRef key = entry.key(), value = entry.value();
    if (key == "location") {
      ref.location = value.str();
      hasLocation = true;
    } else if (key == "offset" || key == "length") {
      int64_t number;
      if (value.getAsInteger(10, number) || number < 0)
        return refused(tensor, "'" + key + "' must be a non-negative integer, "
                                           "got '" +
                                   value + "'");
      if (key == "offset") {
        ref.offset = number;
      } else {
        ref.length = number;
        hasLength = true;
      }
    }
    // "checksum" and unknown keys carry no location information.
  }
  if (!hasLocation || ref.location.empty())
    return refused(tensor, "no 'location' entry");
  StringRef location = ref.location;
  // File APIs stop at a NUL, so "w.bin\0x" would be validated and read as
  // "w.bin" while the IR records the full string; control characters have
  // no business in a file name either.
  if (llvm::any_of(location, [](char c) {
        return static_cast<unsigned char>(c) < 0x20 || c == 0x7f;
      })) {
    std::string escaped;
    llvm::raw_string_ostream os(escaped);
    llvm::printEscapedString(location, os);
    return refused(tensor, "location '" + escaped +
                               "' contains a control character");
  }
  if (llvm::sys::path::is_absolute(location) || location.starts_with("/") ||
      location.starts_with("\\"))
    return refused(tensor, "location '" + location +
                               "' is an absolute path; external data must be "
                               "relative to the model's directory");
  llvm::SmallVector<StringRef> components;
  location.split(components, '/');
  for (StringRef component : components) {
    llvm::SmallVector<StringRef> parts;
    component.split(parts, '\\');
    for (StringRef part : parts)
      if (part == "..")
        return refused(tensor, "location '" + location +
                                   "' contains '..'; external data must stay "
                                   "inside the model's directory");
  }
  llvm::SmallString<256> joined(modelDir);
  llvm::sys::path::append(joined, location);
  llvm::SmallString<256> realDir, realFile;
  if (llvm::sys::fs::real_path(modelDir, realDir))
    return refused(tensor, "cannot resolve the model's directory '" +
                               modelDir + "'");
  if (std::error_code ec = llvm::sys::fs::real_path(joined, realFile))
    return refused(tensor, "file '" + joined + "' not found (" +
                               ec.message() + ")");
  StringRef dir = realDir, file = realFile;
  if (!file.starts_with(dir) || file.size() <= dir.size() ||
      (!dir.ends_with("/") && file[dir.size()] != '/'))
    return refused(tensor, "location '" + location + "' resolves to '" +
                               file +
                               "', outside the model's directory '" + dir +
                               "' (through a symlink); refused");
  llvm::sys::fs::file_status status;
  if (llvm::sys::fs::status(realFile, status) ||
      !llvm::sys::fs::is_regular_file(status))
    return refused(tensor, "'" + joined + "' is not a regular file");
  if (hasLength && ref.length != expectedBytes)
    return refused(tensor, "'length' is " + Twine(ref.length) +
                               " bytes but the tensor needs " +
                               Twine(expectedBytes));
  ref.length = expectedBytes;
  ref.resolvedPath = realFile.str().str();
  uint64_t size = status.getSize();
  uint64_t end = static_cast<uint64_t>(ref.offset) +
                 static_cast<uint64_t>(ref.length);
  if (end < static_cast<uint64_t>(ref.offset) || end > size)
    return refused(tensor, "'" + location + "' is " + Twine(size) +
                               " bytes, too short for " + Twine(ref.length) +
                               " bytes at offset " + Twine(ref.offset));
  return ref;
}

llvm::Expected<std::string> readExternalBytes(StringRef modelDir,
                                              const ExternalRef &ref) {
  // Read what was validated, not the location again: a symlink swapped in
  // between would otherwise escape the checks.
  llvm::SmallString<256> path(ref.resolvedPath);
  if (path.empty()) {
    path = modelDir;
    llvm::sys::path::append(path, ref.location);
  }
  auto buffer = llvm::MemoryBuffer::getFileSlice(path, ref.length, ref.offset,
                                                 /*IsVolatile=*/false);
  if (!buffer)
    return llvm::createStringError(buffer.getError(),
                                   "cannot read external data from '" + path +
                                       "': " + buffer.getError().message());
  return (*buffer)->getBuffer().str();
}

} // namespace dsopt::onnx_import

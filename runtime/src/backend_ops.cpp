// Backend-neutral helpers over the backend interface: how runtime code that
// must not touch arena memory reads and writes single values.
#include "dsrt/backend.h"

#include <cstdint>
#include <string>

namespace dsrt {

void read_to_host(Stream &stream, void *host, const Tensor &src) {
  backend(stream).copy(stream, host, src.data, src.nbytes());
  stream.synchronize();
}

double read_scalar(Stream &stream, const Tensor &src) {
  if (src.numel() < 1)
    throw Error(std::string("dsrt::read_scalar: ") + dtype_name(src.dtype) + src.shape.str() +
                " has no element");
  alignas(8) uint8_t bytes[8] = {};
  const Tensor first{src.data, src.dtype, Shape{}};
  read_to_host(stream, bytes, first);
  const Tensor host{bytes, src.dtype, Shape{}};
  return is_float(src.dtype) ? static_cast<double>(load_float(host, 0))
                             : static_cast<double>(load_int(host, 0));
}

void write_scalar(Stream &stream, const Tensor &dst, double value) {
  if (dst.numel() != 1)
    throw Error(std::string("dsrt::write_scalar: ") + dtype_name(dst.dtype) + dst.shape.str() +
                " is not a single value");
  fill_async(stream, dst, value);
}

}  // namespace dsrt

// Owning tensors and error expectations for the C++ unit tests.
#ifndef DSRT_TESTS_TEST_UTIL_H
#define DSRT_TESTS_TEST_UTIL_H

#include "dsrt/tensor.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

namespace dsrt_test {

// A tensor that owns its memory.
class Owned {
public:
  Owned(dsrt::DType dtype, dsrt::Shape shape, unsigned char fill = 0)
      : bytes_(static_cast<size_t>(shape.numel()) * dsrt::dtype_size(dtype), fill) {
    tensor_.dtype = dtype;
    tensor_.shape = shape;
    tensor_.data = bytes_.empty() ? nullptr : bytes_.data();
  }
  Owned(const Owned &other) : Owned(other.tensor_.dtype, other.tensor_.shape) {
    bytes_ = other.bytes_;
  }
  Owned &operator=(const Owned &) = delete;

  // Elements given as doubles, converted to the element type.
  static Owned of(dsrt::DType dtype, dsrt::Shape shape, const std::vector<double> &values) {
    Owned o(dtype, shape);
    for (size_t i = 0; i < values.size() && static_cast<int64_t>(i) < shape.numel(); ++i) {
      if (dsrt::is_float(dtype))
        dsrt::store_float(o.tensor_, static_cast<int64_t>(i), static_cast<float>(values[i]));
      else
        dsrt::store_int(o.tensor_, static_cast<int64_t>(i), static_cast<int64_t>(values[i]));
    }
    return o;
  }

  const dsrt::Tensor &t() const { return tensor_; }
  operator const dsrt::Tensor &() const { return tensor_; }
  double at(int64_t i) const {
    return dsrt::is_float(tensor_.dtype) ? dsrt::load_float(tensor_, i)
                                         : static_cast<double>(dsrt::load_int(tensor_, i));
  }
  const std::vector<unsigned char> &bytes() const { return bytes_; }

private:
  std::vector<unsigned char> bytes_;
  dsrt::Tensor tensor_;
};

}  // namespace dsrt_test

// Expects `statement` to throw dsrt::Error whose message contains every
// given fragment.
#define EXPECT_DSRT_ERROR(statement, ...)                                                  \
  do {                                                                                     \
    bool thrown_ = false;                                                                  \
    try {                                                                                  \
      statement;                                                                           \
    } catch (const dsrt::Error &e_) {                                                      \
      thrown_ = true;                                                                      \
      std::string message_ = e_.what();                                                    \
      for (const char *fragment_ : {__VA_ARGS__})                                          \
        EXPECT_NE(message_.find(fragment_), std::string::npos)                             \
            << "message \"" << message_ << "\" lacks \"" << fragment_ << "\"";             \
    }                                                                                      \
    EXPECT_TRUE(thrown_) << #statement " did not throw dsrt::Error";                       \
  } while (0)

#endif  // DSRT_TESTS_TEST_UTIL_H

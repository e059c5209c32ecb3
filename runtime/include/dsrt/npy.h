// dsrt: NumPy .npy files.
//
// Reads format versions 1.0, 2.0 and 3.0 and writes 1.0, little-endian, C
// order. Element types map as follows:
//
//   dsrt  | .npy descr
//   f32   | '<f4'
//   f16   | '<f2'
//   bf16  | '<u2'  (NumPy has no bfloat16: the raw bits, as uint16)
//   i64   | '<i8'
//   i32   | '<i4'
//   bool  | '|b1'
//
// '<f8' is read only when NpyReadOptions::f64_to_f32 is set, rounding to f32.
// Every failure (a file that is missing, not .npy, truncated, big-endian,
// Fortran-ordered or of another element type) throws dsrt::Error naming the
// file and the problem.
#ifndef DSRT_NPY_H
#define DSRT_NPY_H

#include "dsrt/tensor.h"

#include <string>
#include <vector>

namespace dsrt {

// An array read from a file: owns its bytes.
struct NpyArray {
  DType dtype = DType::F32;
  Shape shape;
  std::vector<unsigned char> bytes;
  std::string path;  // the file it was read from, for messages

  int64_t numel() const { return shape.numel(); }
  // A view of the bytes; valid while this array lives and is not resized.
  Tensor tensor() {
    Tensor t;
    t.data = bytes.empty() ? nullptr : bytes.data();
    t.dtype = dtype;
    t.shape = shape;
    return t;
  }
};

struct NpyReadOptions {
  // Accept '<f8' files and round them to f32.
  bool f64_to_f32 = false;
};

NpyArray read_npy(const std::string &path, const NpyReadOptions &options = {});

// Reads a file straight into `dst` (e.g. a parameter's place in an arena),
// which must have the file's element type and shape.
void read_npy_into(const std::string &path, const Tensor &dst, const NpyReadOptions &options = {});

void write_npy(const std::string &path, const Tensor &tensor);

// Throws unless `array` has `dtype` and `shape`; `what` names it in the
// message ("parameter wte.weight").
void expect(const NpyArray &array, DType dtype, const Shape &shape, const std::string &what);

}  // namespace dsrt

#endif  // DSRT_NPY_H

// dsrt: what a generated program is made of.
//
// dsopt emits two functions per program:
//   void dsopt_describe(dsrt::ProgramInfo&)  inputs, parameters (and where
//                                            their bytes are), outputs, the
//                                            memory plan and the op list;
//   void dsopt_run(dsrt::Program&)           one kernel call per op on views
//                                            of the arena;
// and a main() that hands both to dsrt::forward_main, which loads weights and
// inputs into the arena, runs, writes the outputs and checks the memory plan.
#ifndef DSRT_PROGRAM_H
#define DSRT_PROGRAM_H

#include "dsrt/kernels.h"
#include "dsrt/math.h"
#include "dsrt/stream.h"
#include "dsrt/tensor.h"

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace dsrt {

struct ValueInfo {
  std::string name;
  DType dtype = DType::F32;
  Shape shape;
  int64_t offset = -1; // in the arena; -1 for outputs (their views tell)
};

struct ParamInfo : ValueInfo {
  bool trainable = false;
  // Bytes in a file relative to the model's directory...
  std::string file;
  int64_t file_offset = 0, length = 0;
  // ...or in the program itself (small parameters).
  Tensor data;
};

struct OpInfo {
  std::string name, location;
  int64_t flops = 0, bytes = 0;
};

struct ProgramInfo {
  std::string model_path;
  int64_t arena_bytes = 0, persistent_bytes = 0, peak_live_bytes = 0;
  int64_t alignment = 64;
  std::vector<ValueInfo> inputs, outputs;
  std::vector<ParamInfo> params;
  std::vector<OpInfo> ops;
};

// Tracks the arena's live buffers: acquiring a slot that overlaps a live one,
// or releasing one that is not live, means the memory plan is wrong and
// throws. The high-water mark is the highest byte any live slot reached.
class MemoryMonitor {
public:
  void acquire(int64_t offset, int64_t size);
  void release(int64_t offset);
  int64_t high_water_mark() const { return high_water_mark_; }
  int64_t live_bytes() const { return live_bytes_; }
  int64_t peak_live_bytes() const { return peak_live_bytes_; }

private:
  std::map<int64_t, int64_t> live_; // offset -> size
  int64_t high_water_mark_ = 0, live_bytes_ = 0, peak_live_bytes_ = 0;
};

// Chrome trace events (chrome://tracing, ui.perfetto.dev).
class Tracer {
public:
  void begin(int64_t op);
  void end(int64_t op);
  void write(const std::string &path, const ProgramInfo &info, int rank = 0) const;

private:
  struct Slice {
    int64_t op;
    double begin_us, end_us;
  };
  std::vector<Slice> slices_;
  double open_begin_ = 0;
};

struct Program {
  const ProgramInfo *info = nullptr;
  Stream stream;
  uint8_t *arena = nullptr;
  MemoryMonitor memory;
  Tracer *tracer = nullptr;
  std::vector<Tensor> outputs;
};

//===--- called by generated code: dsopt_run ------------------------------===//

inline Stream &stream(Program &p) { return p.stream; }
inline uint8_t *arena(Program &p) { return p.arena; }

inline Tensor view(uint8_t *base, int64_t offset, DType dtype, Shape shape) {
  return Tensor{base + offset, dtype, shape};
}
// Views of the program's static constants (16-bit floats are stored as their
// bit patterns, bools as bytes).
template <typename T> Tensor view_static(T *data, DType dtype, Shape shape) {
  return Tensor{const_cast<void *>(static_cast<const void *>(data)), dtype, shape};
}
inline Tensor reshape(const Tensor &t, Shape shape) { return Tensor{t.data, t.dtype, shape}; }
// The elements of a tensor view as a typed pointer (generated fused loops).
template <typename T> T *elements(const Tensor &t) { return static_cast<T *>(t.data); }
inline const Tensor *optional(const Tensor &t) { return &t; }
template <typename... Ts> std::array<Tensor, sizeof...(Ts)> tensor_array(const Ts &...ts) {
  return {ts...};
}
template <size_t N> const Tensor *data(const std::array<Tensor, N> &tensors) {
  return tensors.data();
}
// Writes `value`, converted to the tensor's type, into every element.
void fill(const Tensor &t, double value);

inline void acquire(Program &p, int64_t offset, int64_t size) { p.memory.acquire(offset, size); }
inline void release(Program &p, int64_t offset) { p.memory.release(offset); }
inline void begin_op(Program &p, int64_t op) {
  if (p.tracer) p.tracer->begin(op);
}
inline void end_op(Program &p, int64_t op) {
  if (p.tracer) p.tracer->end(op);
}
void set_output(Program &p, int64_t index, const Tensor &value);

//===--- called by generated code: dsopt_describe -------------------------===//

void set_model(ProgramInfo &info, const char *path);
void set_memory_plan(ProgramInfo &info, int64_t arena_bytes, int64_t persistent_bytes,
                     int64_t peak_live_bytes, int64_t alignment);
void add_input(ProgramInfo &info, const char *name, DType dtype, Shape shape, int64_t offset);
void add_param_file(ProgramInfo &info, const char *name, DType dtype, Shape shape,
                    int64_t offset, bool trainable, const char *file, int64_t file_offset,
                    int64_t length);
void add_param_data(ProgramInfo &info, const char *name, const Tensor &data, int64_t offset,
                    bool trainable);
void add_output(ProgramInfo &info, const char *name, DType dtype, Shape shape);
void add_op(ProgramInfo &info, const char *name, const char *location, int64_t flops,
            int64_t bytes);

//===--- the program's main ------------------------------------------------===//

using DescribeFn = void (*)(ProgramInfo &);
using RunFn = void (*)(Program &);

// `run --inputs DIR --outputs DIR [--weights DIR] [--threads N] [--trace FILE]`:
// reads <input name>.npy for every input, writes <output name>.npy for every
// output. Returns the process exit status; errors are reported, never thrown.
int forward_main(int argc, char **argv, DescribeFn describe, RunFn run);

// Where a parameter's bytes come from when loading: the model's directory,
// unless overridden (--weights).
std::string resolve_weight_file(const ProgramInfo &info, const std::string &weights_dir,
                                const std::string &file);

}  // namespace dsrt

#endif  // DSRT_PROGRAM_H

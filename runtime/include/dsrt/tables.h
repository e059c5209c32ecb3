// dsrt: a generated program's long lists as tables.
//
// A model with many layers has thousands of parameters, optimizer states and
// ops, and its training step has ops over all of them (the gradient norm
// reads every gradient, ZeRO-3 gathers every parameter). One call per entry
// makes functions of thousands of calls, each with its own Shape temporary,
// on which the host compiler spends seconds to minutes. dsopt emits such
// lists instead as static const arrays of these rows, which compile as data,
// and one call per array that does what the calls would, in the same order.
#ifndef DSRT_TABLES_H
#define DSRT_TABLES_H

#include "dsrt/dist.h"
#include "dsrt/program.h"

#include <cstdint>
#include <vector>

namespace dsrt {

// A shape in a row: its rank and the leading `rank` dims.
struct TableShape {
  int rank;
  int64_t dims[kMaxRank];
};

inline Shape table_shape(const TableShape &shape) { return Shape::of(shape.dims, shape.rank); }

// add_param_file, then set_param_working_copy when working != dtype and
// set_param_shard when shard_total > 0.
struct ParamFileRow {
  const char *name;
  DType dtype;
  TableShape shape;
  int64_t offset;
  bool trainable;
  const char *file;
  int64_t file_offset, length;
  int64_t shard_total;
  TableShape full_shape;
  DType working;  // == dtype, or the 16-bit working copy's (set_param_working_copy)
};

// add_state.
struct StateRow {
  const char *name;
  DType dtype;
  TableShape shape;
  int64_t offset;
  ValueRole role;
  const char *param;
};

// add_op.
struct OpRow {
  const char *name, *location;
  int64_t flops, bytes;
};

// A view of the arena: view(arena, offset, dtype, shape).
struct ViewRow {
  int64_t offset;
  DType dtype;
  TableShape shape;
};

// acquire(p, offset, bytes).
struct SlotRow {
  int64_t offset, bytes;
};

// copy(stream, view of `from`, view of `to`), both of `dtype` and `shape`.
struct CopyRow {
  int64_t from, to;
  DType dtype;
  TableShape shape;
};

inline void add_param_files(ProgramInfo &info, const ParamFileRow *rows, int64_t count) {
  for (int64_t i = 0; i < count; ++i) {
    const ParamFileRow &row = rows[i];
    add_param_file(info, row.name, row.dtype, table_shape(row.shape), row.offset,
                   row.trainable, row.file, row.file_offset, row.length);
    if (row.working != row.dtype) set_param_working_copy(info, row.working);
    if (row.shard_total > 0) set_param_shard(info, row.shard_total, table_shape(row.full_shape));
  }
}

inline void add_states(ProgramInfo &info, const StateRow *rows, int64_t count) {
  for (int64_t i = 0; i < count; ++i)
    add_state(info, rows[i].name, rows[i].dtype, table_shape(rows[i].shape), rows[i].offset,
              rows[i].role, rows[i].param);
}

inline void add_ops(ProgramInfo &info, const OpRow *rows, int64_t count) {
  for (int64_t i = 0; i < count; ++i)
    add_op(info, rows[i].name, rows[i].location, rows[i].flops, rows[i].bytes);
}

// The views of a kernel's tensor list (dsrt::data of it is the list).
inline std::vector<Tensor> views(uint8_t *arena, const ViewRow *rows, int64_t count) {
  std::vector<Tensor> tensors;
  tensors.reserve(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i)
    tensors.push_back(view(arena, rows[i].offset, rows[i].dtype, table_shape(rows[i].shape)));
  return tensors;
}
inline const Tensor *data(const std::vector<Tensor> &tensors) { return tensors.data(); }

inline void acquire_all(Program &p, const SlotRow *rows, int64_t count) {
  for (int64_t i = 0; i < count; ++i) acquire(p, rows[i].offset, rows[i].bytes);
}

inline void release_all(Program &p, const int64_t *offsets, int64_t count) {
  for (int64_t i = 0; i < count; ++i) release(p, offsets[i]);
}

inline void copy_all(Stream &stream, uint8_t *arena, const CopyRow *rows, int64_t count) {
  for (int64_t i = 0; i < count; ++i) {
    Shape shape = table_shape(rows[i].shape);
    copy(stream, view(arena, rows[i].from, rows[i].dtype, shape),
         view(arena, rows[i].to, rows[i].dtype, shape));
  }
}

}  // namespace dsrt

#endif  // DSRT_TABLES_H

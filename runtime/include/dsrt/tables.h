// dsrt: a generated program's description as tables.
//
// A model with many layers has thousands of parameters, optimizer states and
// ops. One describe call per entry makes dsopt_describe a function of
// thousands of calls, each with its own Shape temporary, on which the host
// compiler spends seconds. dsopt emits them instead as static const arrays
// of these rows, which compile as data, and one call per array.
#ifndef DSRT_TABLES_H
#define DSRT_TABLES_H

#include "dsrt/dist.h"
#include "dsrt/program.h"

#include <cstdint>

namespace dsrt {

// A shape in a row: its rank and the leading `rank` dims.
struct TableShape {
  int rank;
  int64_t dims[kMaxRank];
};

inline Shape table_shape(const TableShape &shape) { return Shape::of(shape.dims, shape.rank); }

// add_param_file, then set_param_shard when shard_total > 0.
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
};

// add_state.
struct StateRow {
  const char *name;
  DType dtype;
  TableShape shape;
  int64_t offset;
};

// add_op.
struct OpRow {
  const char *name, *location;
  int64_t flops, bytes;
};

inline void add_param_files(ProgramInfo &info, const ParamFileRow *rows, int64_t count) {
  for (int64_t i = 0; i < count; ++i) {
    const ParamFileRow &row = rows[i];
    add_param_file(info, row.name, row.dtype, table_shape(row.shape), row.offset,
                   row.trainable, row.file, row.file_offset, row.length);
    if (row.shard_total > 0) set_param_shard(info, row.shard_total, table_shape(row.full_shape));
  }
}

inline void add_states(ProgramInfo &info, const StateRow *rows, int64_t count) {
  for (int64_t i = 0; i < count; ++i)
    add_state(info, rows[i].name, rows[i].dtype, table_shape(rows[i].shape), rows[i].offset);
}

inline void add_ops(ProgramInfo &info, const OpRow *rows, int64_t count) {
  for (int64_t i = 0; i < count; ++i)
    add_op(info, rows[i].name, rows[i].location, rows[i].flops, rows[i].bytes);
}

}  // namespace dsrt

#endif  // DSRT_TABLES_H

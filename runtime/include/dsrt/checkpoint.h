// dsrt: the checkpoint format (docs/checkpoints.md). A checkpoint is a
// directory step_<N> holding a manifest and one shard file per rank; each
// shard file holds pieces of logical tensors (parameters and states, by
// name, whole shape and dtype) as ranges of their flattened elements, so
// that a run of any layout can read the ranges it needs. Every file
// carries a CRC32C; every error names the file. Used by the training
// runners and by dsopt-ckpt.
#ifndef DSRT_CHECKPOINT_H
#define DSRT_CHECKPOINT_H

#include "dsrt/tensor.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace dsrt {
namespace checkpoint {

constexpr int kFormatVersion = 1;

// CRC32C (Castagnoli), continuing from `crc` (0 to start).
uint32_t crc32c(const void *data, size_t size, uint32_t crc = 0);

// A piece of a logical tensor: elements [begin, begin + count) of its
// flattened form, `crc` the CRC32C of its bytes, at `offset` bytes from the
// start of its file's data.
struct Record {
  std::string key;  // "param:<name>" or "state:<state name>"
  DType dtype = DType::F32;
  Shape shape;  // the whole tensor's
  int64_t begin = 0, count = 0;
  uint64_t offset = 0;
  uint32_t crc = 0;
  size_t nbytes() const { return static_cast<size_t>(count) * dtype_size(dtype); }
};

// A shard file: "DSCKPT1\n", the header's length (u64 LE), the header (text
// lines: step, rank, model, one "tensor" line per record), the records'
// bytes, and the CRC32C of everything before it (u32 LE).
struct ShardFile {
  std::string path;
  int64_t step = 0, rank = 0;
  std::string model;
  uint64_t data_start = 0, size = 0;
  std::vector<Record> records;
};

// Builds a shard file in memory.
class ShardWriter {
public:
  // Appends elements [begin, begin + count) of tensor `key` (of `dtype` and
  // whole shape `shape`) held in `bytes`.
  void add(const std::string &key, DType dtype, const Shape &shape, int64_t begin, int64_t count,
           const void *bytes);
  // The file's bytes; its CRC32C (the trailer's value) in `crc`.
  std::vector<uint8_t> finish(int64_t step, int64_t rank, const std::string &model,
                              uint32_t &crc) const;

  // A record whose bytes the caller copies into the returned place later
  // (a snapshot taken piece by piece); its CRC32C is computed by write().
  // reserve_data(total) first makes the data buffer exactly `total` bytes
  // of capacity, so that it is allocated once.
  void reserve_data(size_t total) { data_.reserve(total); }
  uint8_t *add_uninitialized(const std::string &key, DType dtype, const Shape &shape,
                             int64_t begin, int64_t count);
  size_t data_capacity() const { return data_.capacity(); }
  // Writes the file to `path` and fsyncs it, without a second copy of the
  // data; computes the pending records' CRC32Cs; sets `size` and `crc`.
  void write(const std::string &path, int64_t step, int64_t rank, const std::string &model,
             uint64_t &size, uint32_t &crc);

private:
  std::string header(int64_t step, int64_t rank, const std::string &model) const;
  std::vector<bool> pending_;  // records whose CRC32C write() computes
  std::vector<Record> records_;
  std::vector<uint8_t> data_;
};

// A mixed-precision run's dynamic loss scaler (absent in fp32 training):
// the fields of dsrt::LossScaler::State, kept exactly.
struct LossScalerState {
  double scale = 0;
  int hysteresis = 0;
  int64_t iter = 0, last_overflow_iter = 0;
};

// What the manifest says: where training stands, the model's identity,
// the layout that wrote it and every shard file's size and CRC32C.
struct Manifest {
  std::string path;
  int64_t step = 0;     // optimizer steps run (the next step is step + 1)
  int64_t applied = 0;  // updates applied (the lr schedule's position)
  int64_t skipped = 0;  // steps skipped for non-finite values
  uint64_t seed = 0;    // the dropout seed (masks follow seed and step)
  int64_t data_batches = 0;  // global batches in the data (batch = (step - 1) % n)
  std::string model;         // model_identity()
  std::string layout;        // e.g. "dp=2 pp=1", for people
  int64_t world = 1;
  bool has_loss_scaler = false;
  LossScalerState loss_scaler;
  struct File {
    std::string name;
    uint64_t size = 0;
    uint32_t crc = 0;
  };
  std::vector<File> files;
};

std::string manifest_text(const Manifest &manifest);
// Reads and checks DIR/manifest (its own CRC32C line included).
Manifest read_manifest(const std::string &dir);

// The checkpoint directory that `path` names: itself when it holds a
// manifest, else the one its `latest` pointer names.
std::string resolve(const std::string &path);

// Reads a shard file's header, checking it against the manifest's entry.
ShardFile read_shard_header(const std::string &dir, const Manifest &manifest,
                            const Manifest::File &file);
// Reads the whole file and checks its size and CRC32C against the
// trailer and the manifest.
void verify_shard(const std::string &dir, const Manifest::File &file);
// A record's bytes, checked against its CRC32C.
std::vector<uint8_t> read_record(const ShardFile &file, const Record &record);

// A checkpoint opened for reading: its manifest and every shard file's
// header (each checked against the manifest).
struct Checkpoint {
  std::string dir;
  Manifest manifest;
  std::vector<ShardFile> files;
};
// `path` as resolve() takes it.
Checkpoint open_checkpoint(const std::string &path);
// Elements [begin, begin + count) of tensor `key`, which must have `dtype`
// and whole shape `shape`, from whatever files hold them; elements past
// the tensor's end (a shard's padding) are zeros. Throws naming the
// checkpoint when a piece is missing, and the file when it differs.
std::vector<uint8_t> read_range(const Checkpoint &checkpoint, const std::string &key, DType dtype,
                                const Shape &shape, int64_t begin, int64_t count);
// One record per tensor the checkpoint holds (the first piece of each;
// begin and count cover the whole tensor), sorted by key.
std::vector<Record> tensors(const Checkpoint &checkpoint);

// A tensor-parallel piece's key: `base@tpR/T,dim=D,blocks=B`, piece R of
// T of tensor `base` split along axis D in B blocks (dsrt::tp_piece_copy's
// layout), so a reader of any tp size can put the pieces back together.
// A padded piece (B = 1; an axis of V entries that T pieces of
// tp_padded_piece(V, T) entries more than cover) adds `,whole=V`: the
// pieces hold tp_padded_piece(V, T) entries each (or, as older runtimes
// wrote them, ceil(V / T); see tp_piece_run_ok), zeros past V.
struct TpPiece {
  std::string base;
  int64_t rank = 0, ranks = 1, dim = 0, blocks = 1;
  int64_t whole = 0;  // the padded axis's extent; 0: not padded
};
std::string tp_piece_key(const TpPiece &piece);
// The piece a key names; nullopt for a key of a whole tensor.
std::optional<TpPiece> parse_tp_piece_key(const std::string &key);
// One record per logical tensor, its tp pieces shown as the whole tensor
// (key `base`, the whole shape), sorted by key.
std::vector<Record> whole_tensors(const Checkpoint &checkpoint);
// Tensor `base` whole: its own record, or its tp pieces put back in place.
// Throws naming the checkpoint and the tensor when it is absent, a piece
// is missing or the pieces disagree.
struct WholeTensor {
  DType dtype = DType::F32;
  Shape shape;
  std::vector<uint8_t> bytes;
};
WholeTensor read_whole(const Checkpoint &checkpoint, const std::string &base);
// Elements [begin, begin + count) of tp piece `piece` of `tensor` (the
// whole tensor when `piece` is null), flattened; zeros past its end (a
// ZeRO shard's padding).
std::vector<uint8_t> piece_range(const WholeTensor &tensor, const TpPiece *piece, int64_t begin,
                                 int64_t count);

// The identity of a model: a hash of its parameters' names, dtypes and
// whole shapes, `entries` being one "name dtype shape" line each.
std::string model_identity(std::vector<std::string> entries);

// "dir/name" (no doubled slash).
std::string join_path(const std::string &dir, const std::string &name);
// A CRC32C as 8 hex digits, as the files write it.
std::string hex32(uint32_t value);

// Files: written whole to `path` and fsynced (throws naming it).
void write_durable(const std::string &path, const void *bytes, size_t size);
// The same for a file made of several pieces, written in order.
struct Span {
  const void *data;
  size_t size;
};
void write_durable(const std::string &path, const std::vector<Span> &pieces);
// fsync of a directory.
void sync_directory(const std::string &dir);
// Creates `dir` and its parents as needed.
void make_directories(const std::string &dir);
// Removes a directory tree (no error when absent).
void remove_tree(const std::string &path);

}  // namespace checkpoint
}  // namespace dsrt

#endif  // DSRT_CHECKPOINT_H

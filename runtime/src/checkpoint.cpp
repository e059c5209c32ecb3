// dsrt: the checkpoint format (dsrt/checkpoint.h, docs/checkpoints.md), on
// host buffers: CRC32C, shard files, the manifest, durable writes.
#include "dsrt/checkpoint.h"
#include "dsrt/dist.h"

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <map>
#include <optional>
#include <sstream>
#include <sys/stat.h>
#include <unistd.h>

namespace dsrt {
namespace checkpoint {

//===--- CRC32C ------------------------------------------------------------------===//

namespace {

struct Crc32cTable {
  uint32_t entries[256];
  Crc32cTable() {
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
      entries[i] = c;
    }
  }
};

}  // namespace

uint32_t crc32c(const void *data, size_t size, uint32_t crc) {
  static const Crc32cTable table;
  const uint8_t *p = static_cast<const uint8_t *>(data);
  crc = ~crc;
  for (size_t i = 0; i < size; ++i) crc = table.entries[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
  return ~crc;
}

//===--- small helpers -----------------------------------------------------------===//

namespace {

constexpr char kMagic[8] = {'D', 'S', 'C', 'K', 'P', 'T', '1', '\n'};
constexpr size_t kPrefix = 16, kTrailer = 4;

bool parse_hex32(const std::string &text, uint32_t &out) {
  if (text.size() != 8) return false;
  char *end = nullptr;
  unsigned long value = strtoul(text.c_str(), &end, 16);
  if (*end) return false;
  out = static_cast<uint32_t>(value);
  return true;
}

bool parse_i64(const std::string &text, int64_t &out) {
  if (text.empty()) return false;
  char *end = nullptr;
  errno = 0;
  long long value = strtoll(text.c_str(), &end, 10);
  if (errno || *end) return false;
  out = value;
  return true;
}

bool parse_dtype(const std::string &text, DType &out) {
  for (DType d : {DType::F32, DType::F16, DType::BF16, DType::I64, DType::I32, DType::Bool})
    if (text == dtype_name(d)) {
      out = d;
      return true;
    }
  return false;
}

// "2x3" for [2, 3], "scalar" for [].
std::string shape_text(const Shape &shape) {
  if (shape.rank == 0) return "scalar";
  std::string text;
  for (int i = 0; i < shape.rank; ++i) text += (i ? "x" : "") + std::to_string(shape[i]);
  return text;
}

// A shape whose bytes could not be counted in 64 bits (its element count
// times the widest dtype's 8 bytes) is refused: no file holds it, and
// numel() and the byte counts below must not overflow.
bool parse_shape(const std::string &text, Shape &out) {
  out = Shape{};
  if (text == "scalar") return true;
  std::stringstream in(text);
  std::string dim;
  int64_t numel = 1;
  while (std::getline(in, dim, 'x')) {
    int64_t value = 0;
    if (out.rank == kMaxRank || !parse_i64(dim, value) || value < 0 ||
        __builtin_mul_overflow(numel, value, &numel) || numel > INT64_MAX / 8)
      return false;
    out.dims[out.rank++] = value;
  }
  return out.rank > 0;
}

void put_u64(std::vector<uint8_t> &out, uint64_t value) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<uint8_t>(value >> (8 * i)));
}

uint64_t get_le(const uint8_t *p, int bytes) {
  uint64_t value = 0;
  for (int i = 0; i < bytes; ++i) value |= static_cast<uint64_t>(p[i]) << (8 * i);
  return value;
}

bool exists(const std::string &path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

std::string read_text(const std::string &path, const std::string &what) {
  FILE *f = fopen(path.c_str(), "rb");
  if (!f) throw Error(what + " '" + path + "': cannot read it (" + strerror(errno) + ")");
  std::string text;
  char buffer[4096];
  size_t n;
  while ((n = fread(buffer, 1, sizeof(buffer), f)) > 0) {
    text.append(buffer, n);
    if (text.size() > (64u << 20)) {
      fclose(f);
      throw Error(what + " '" + path + "' is over 64 MiB: not a checkpoint manifest");
    }
  }
  fclose(f);
  return text;
}

std::vector<std::string> words_of(const std::string &line) {
  std::vector<std::string> words;
  std::stringstream in(line);
  std::string word;
  while (in >> word) words.push_back(word);
  return words;
}

// The file descriptor's bytes [offset, offset + size) or an error naming `path`.
void read_exact(int fd, const std::string &path, uint64_t offset, void *out, size_t size) {
  uint8_t *p = static_cast<uint8_t *>(out);
  size_t done = 0;
  while (done < size) {
    ssize_t n = pread(fd, p + done, size - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0)
      throw Error("checkpoint file '" + path + "': cannot read it (" + strerror(errno) + ")");
    if (n == 0)
      throw Error("checkpoint file '" + path + "' is truncated: it ends at byte " +
                  std::to_string(offset + done) + ", inside what its header describes");
    done += static_cast<size_t>(n);
  }
}

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) close(fd);
  }
};

int open_shard(const std::string &path, Fd &fd) {
  fd.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd.fd < 0)
    throw Error("checkpoint file '" + path + "': cannot open it (" + strerror(errno) + ")");
  return fd.fd;
}

}  // namespace

std::string hex32(uint32_t value) {
  char text[16];
  snprintf(text, sizeof(text), "%08" PRIx32, value);
  return text;
}

std::string join_path(const std::string &dir, const std::string &name) {
  return dir.empty() || dir.back() == '/' ? dir + name : dir + "/" + name;
}

//===--- shard files -------------------------------------------------------------===//

void ShardWriter::add(const std::string &key, DType dtype, const Shape &shape, int64_t begin,
                      int64_t count, const void *bytes) {
  uint8_t *place = add_uninitialized(key, dtype, shape, begin, count);
  std::memcpy(place, bytes, records_.back().nbytes());
  records_.back().crc = crc32c(place, records_.back().nbytes());
  pending_.back() = false;
}

uint8_t *ShardWriter::add_uninitialized(const std::string &key, DType dtype, const Shape &shape,
                                        int64_t begin, int64_t count) {
  if (key.empty() || key.find('\n') != std::string::npos || key.find('\r') != std::string::npos)
    throw Error("checkpoint: tensor name '" + key + "' cannot be stored (empty or a line break)");
  Record record;
  record.key = key;
  record.dtype = dtype;
  record.shape = shape;
  record.begin = begin;
  record.count = count;
  record.offset = data_.size();
  data_.resize(data_.size() + record.nbytes());
  records_.push_back(record);
  pending_.push_back(true);
  return data_.data() + record.offset;
}

std::string ShardWriter::header(int64_t step, int64_t rank, const std::string &model) const {
  std::string text = "step " + std::to_string(step) + "\nrank " + std::to_string(rank) +
                     "\nmodel " + model + "\n";
  for (const Record &r : records_)
    text += "tensor " + std::string(dtype_name(r.dtype)) + " " + shape_text(r.shape) + " " +
            std::to_string(r.begin) + " " + std::to_string(r.count) + " " +
            std::to_string(r.offset) + " " + hex32(r.crc) + " " + r.key + "\n";
  std::string out(kMagic, kMagic + sizeof(kMagic));
  std::vector<uint8_t> length;
  put_u64(length, text.size() + 4);  // "end\n" follows
  out.append(length.begin(), length.end());
  return out + text + "end\n";
}

std::vector<uint8_t> ShardWriter::finish(int64_t step, int64_t rank, const std::string &model,
                                         uint32_t &crc) const {
  const std::string prefix = header(step, rank, model);
  std::vector<uint8_t> out(prefix.begin(), prefix.end());
  out.insert(out.end(), data_.begin(), data_.end());
  crc = crc32c(out.data(), out.size());
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<uint8_t>(crc >> (8 * i)));
  return out;
}

void ShardWriter::write(const std::string &path, int64_t step, int64_t rank,
                        const std::string &model, uint64_t &size, uint32_t &crc) {
  for (size_t i = 0; i < records_.size(); ++i)
    if (pending_[i]) {
      records_[i].crc = crc32c(data_.data() + records_[i].offset, records_[i].nbytes());
      pending_[i] = false;
    }
  const std::string prefix = header(step, rank, model);
  crc = crc32c(data_.data(), data_.size(), crc32c(prefix.data(), prefix.size()));
  uint8_t trailer[4];
  for (int i = 0; i < 4; ++i) trailer[i] = static_cast<uint8_t>(crc >> (8 * i));
  write_durable(path, {{prefix.data(), prefix.size()}, {data_.data(), data_.size()}, {trailer, 4}});
  size = prefix.size() + data_.size() + 4;
}

ShardFile read_shard_header(const std::string &dir, const Manifest &manifest,
                            const Manifest::File &entry) {
  ShardFile file;
  file.path = join_path(dir, entry.name);
  const std::string &path = file.path;
  Fd fd;
  open_shard(path, fd);
  struct stat st;
  if (fstat(fd.fd, &st) != 0 || !S_ISREG(st.st_mode))
    throw Error("checkpoint file '" + path + "' is not a regular file");
  file.size = static_cast<uint64_t>(st.st_size);
  if (file.size != entry.size)
    throw Error("checkpoint file '" + path + "' has " + std::to_string(file.size) +
                " bytes; the manifest '" + manifest.path + "' says " +
                std::to_string(entry.size) + (file.size < entry.size ? " (truncated)" : ""));
  uint8_t prefix[kPrefix];
  if (file.size < kPrefix + kTrailer)
    throw Error("checkpoint file '" + path + "' is truncated (" + std::to_string(file.size) +
                " bytes)");
  read_exact(fd.fd, path, 0, prefix, kPrefix);
  if (std::memcmp(prefix, kMagic, sizeof(kMagic)) != 0)
    throw Error("checkpoint file '" + path + "' is not a dsopt checkpoint shard (bad magic)");
  const uint64_t header_size = get_le(prefix + 8, 8);
  if (header_size > file.size - kPrefix - kTrailer)
    throw Error("checkpoint file '" + path + "' is corrupt: its header length " +
                std::to_string(header_size) + " exceeds the file");
  std::string header(header_size, '\0');
  read_exact(fd.fd, path, kPrefix, &header[0], header_size);
  file.data_start = kPrefix + header_size;
  const uint64_t data_size = file.size - file.data_start - kTrailer;
  std::stringstream in(header);
  std::string line;
  bool ended = false;
  int64_t line_number = 0;
  auto bad = [&](const std::string &why) {
    return Error("checkpoint file '" + path + "' is corrupt: header line " +
                 std::to_string(line_number) + ": " + why);
  };
  while (std::getline(in, line)) {
    ++line_number;
    if (ended) throw bad("text after 'end'");
    const std::vector<std::string> w = words_of(line);
    if (w.empty()) throw bad("empty line");
    if (w[0] == "end" && w.size() == 1) {
      ended = true;
    } else if ((w[0] == "step" || w[0] == "rank") && w.size() == 2) {
      if (!parse_i64(w[1], w[0] == "step" ? file.step : file.rank)) throw bad("bad " + w[0]);
    } else if (w[0] == "model" && w.size() == 2) {
      file.model = w[1];
    } else if (w[0] == "tensor" && w.size() >= 8) {
      Record r;
      int64_t offset = 0;
      // The key is the rest of the line after the seventh word.
      size_t at = 0;
      for (int i = 0; i < 7; ++i) {
        at = line.find_first_not_of(' ', at);
        at = line.find(' ', at);
      }
      r.key = line.substr(at + 1);
      if (!parse_dtype(w[1], r.dtype) || !parse_shape(w[2], r.shape) ||
          !parse_i64(w[3], r.begin) || !parse_i64(w[4], r.count) || !parse_i64(w[5], offset) ||
          !parse_hex32(w[6], r.crc) || r.begin < 0 || r.count < 0 || offset < 0 ||
          r.begin > r.shape.numel() || r.count > r.shape.numel() - r.begin)
        throw bad("bad tensor line '" + line + "'");
      r.offset = static_cast<uint64_t>(offset);
      if (r.offset + r.nbytes() > data_size) throw bad("tensor '" + r.key + "' exceeds the data");
      file.records.push_back(r);
    } else {
      throw bad("unexpected '" + line + "'");
    }
  }
  if (!ended) throw bad("no 'end' line");
  if (file.step != manifest.step)
    throw Error("checkpoint file '" + path + "' holds step " + std::to_string(file.step) +
                " but its manifest '" + manifest.path + "' is of step " +
                std::to_string(manifest.step) + ": a file of another checkpoint");
  if (file.model != manifest.model)
    throw Error("checkpoint file '" + path + "' is of model " + file.model +
                " but its manifest '" + manifest.path + "' of model " + manifest.model +
                ": a file of another checkpoint");
  return file;
}

void verify_shard(const std::string &dir, const Manifest::File &entry) {
  const std::string path = join_path(dir, entry.name);
  Fd fd;
  open_shard(path, fd);
  struct stat st;
  if (fstat(fd.fd, &st) != 0 || !S_ISREG(st.st_mode))
    throw Error("checkpoint file '" + path + "' is not a regular file");
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size != entry.size)
    throw Error("checkpoint file '" + path + "' has " + std::to_string(size) +
                " bytes; the manifest says " + std::to_string(entry.size) +
                (size < entry.size ? " (truncated)" : ""));
  if (size < kTrailer) throw Error("checkpoint file '" + path + "' is truncated");
  std::vector<uint8_t> buffer(1u << 20);
  uint32_t crc = 0;
  for (uint64_t done = 0; done < size - kTrailer;) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(buffer.size(), size - kTrailer - done));
    read_exact(fd.fd, path, done, buffer.data(), n);
    crc = crc32c(buffer.data(), n, crc);
    done += n;
  }
  uint8_t trailer[kTrailer];
  read_exact(fd.fd, path, size - kTrailer, trailer, kTrailer);
  const uint32_t stored = static_cast<uint32_t>(get_le(trailer, 4));
  if (crc != stored)
    throw Error("checkpoint file '" + path + "' is corrupt: its CRC32C is " + hex32(crc) +
                ", its trailer says " + hex32(stored));
  if (crc != entry.crc)
    throw Error("checkpoint file '" + path + "' does not match its manifest (CRC32C " +
                hex32(crc) + ", the manifest says " + hex32(entry.crc) +
                "): a file of another checkpoint");
}

std::vector<uint8_t> read_record(const ShardFile &file, const Record &record) {
  Fd fd;
  open_shard(file.path, fd);
  std::vector<uint8_t> bytes(record.nbytes());
  read_exact(fd.fd, file.path, file.data_start + record.offset, bytes.data(), bytes.size());
  const uint32_t crc = crc32c(bytes.data(), bytes.size());
  if (crc != record.crc)
    throw Error("checkpoint file '" + file.path + "' is corrupt: tensor '" + record.key +
                "' has CRC32C " + hex32(crc) + ", its header says " + hex32(record.crc));
  return bytes;
}

//===--- the manifest ------------------------------------------------------------===//

std::string manifest_text(const Manifest &m) {
  char scale[64];
  snprintf(scale, sizeof(scale), "%a", m.loss_scaler.scale);
  std::string text = "dsopt-checkpoint " + std::to_string(kFormatVersion) + "\n";
  text += "step " + std::to_string(m.step) + "\napplied " + std::to_string(m.applied) +
          "\nskipped " + std::to_string(m.skipped) + "\nseed " + std::to_string(m.seed) +
          "\ndata_batches " + std::to_string(m.data_batches) + "\nmodel " + m.model +
          "\nworld " + std::to_string(m.world) + "\nlayout " + m.layout + "\n";
  text += m.has_loss_scaler
              ? "loss_scaler " + std::string(scale) + " " + std::to_string(m.loss_scaler.hysteresis) +
                    " " + std::to_string(m.loss_scaler.iter) + " " +
                    std::to_string(m.loss_scaler.last_overflow_iter) + "\n"
              : "loss_scaler none\n";
  for (const Manifest::File &f : m.files)
    text += "file " + f.name + " " + std::to_string(f.size) + " " + hex32(f.crc) + "\n";
  text += "crc32c " + hex32(crc32c(text.data(), text.size())) + "\n";
  return text;
}

Manifest read_manifest(const std::string &dir) {
  Manifest m;
  m.path = join_path(dir, "manifest");
  const std::string text = read_text(m.path, "checkpoint manifest");
  auto bad = [&](const std::string &why) {
    return Error("checkpoint manifest '" + m.path + "' is corrupt: " + why);
  };
  // The last line is the CRC32C of everything before it.
  const size_t last = text.size() >= 2 ? text.rfind('\n', text.size() - 2) : std::string::npos;
  if (text.empty() || text.back() != '\n' || last == std::string::npos)
    throw bad("it is truncated");
  const std::vector<std::string> crc_line = words_of(text.substr(last + 1));
  uint32_t stored = 0;
  if (crc_line.size() != 2 || crc_line[0] != "crc32c" || !parse_hex32(crc_line[1], stored))
    throw bad("its last line is not its checksum (truncated?)");
  if (crc32c(text.data(), last + 1) != stored) throw bad("its checksum does not match");
  std::stringstream in(text.substr(0, last + 1));
  std::string line;
  bool header = false;
  while (std::getline(in, line)) {
    const std::vector<std::string> w = words_of(line);
    if (w.empty()) throw bad("empty line");
    auto number = [&](int64_t &out) {
      if (w.size() != 2 || !parse_i64(w[1], out)) throw bad("bad line '" + line + "'");
    };
    int64_t value = 0;
    if (w[0] == "dsopt-checkpoint") {
      number(value);
      if (value != kFormatVersion)
        throw Error("checkpoint manifest '" + m.path + "' is of format version " +
                    std::to_string(value) + "; this runtime reads version " +
                    std::to_string(kFormatVersion));
      header = true;
    } else if (w[0] == "step") number(m.step);
    else if (w[0] == "applied") number(m.applied);
    else if (w[0] == "skipped") number(m.skipped);
    else if (w[0] == "seed") {
      number(value);
      m.seed = static_cast<uint64_t>(value);
    } else if (w[0] == "data_batches") number(m.data_batches);
    else if (w[0] == "world") number(m.world);
    else if (w[0] == "model" && w.size() == 2) m.model = w[1];
    else if (w[0] == "layout") m.layout = line.size() > 7 ? line.substr(7) : "";
    else if (w[0] == "loss_scaler" && w.size() == 2 && w[1] == "none") m.has_loss_scaler = false;
    else if (w[0] == "loss_scaler" && w.size() == 5) {
      int64_t hysteresis = 0;
      char *end = nullptr;
      m.loss_scaler.scale = strtod(w[1].c_str(), &end);
      if (*end || !parse_i64(w[2], hysteresis) || !parse_i64(w[3], m.loss_scaler.iter) ||
          !parse_i64(w[4], m.loss_scaler.last_overflow_iter))
        throw bad("bad line '" + line + "'");
      m.loss_scaler.hysteresis = static_cast<int>(hysteresis);
      m.has_loss_scaler = true;
    } else if (w[0] == "file" && w.size() == 4) {
      Manifest::File f;
      f.name = w[1];
      int64_t size = 0;
      if (!parse_i64(w[2], size) || size < 0 || !parse_hex32(w[3], f.crc) ||
          f.name.find('/') != std::string::npos || f.name[0] == '.')
        throw bad("bad line '" + line + "'");
      f.size = static_cast<uint64_t>(size);
      m.files.push_back(f);
    } else {
      throw bad("unexpected line '" + line + "'");
    }
  }
  if (!header) throw bad("it does not start with 'dsopt-checkpoint'");
  if (m.model.empty() || m.step < 1 || m.files.empty()) throw bad("it names no model, step or file");
  return m;
}

std::string resolve(const std::string &path) {
  if (exists(join_path(path, "manifest"))) return path;
  const std::string latest = join_path(path, "latest");
  if (!exists(latest))
    throw Error("'" + path + "' is not a checkpoint (no 'manifest') nor a directory of "
                "checkpoints (no 'latest')");
  std::string name = read_text(latest, "checkpoint pointer");
  while (!name.empty() && (name.back() == '\n' || name.back() == ' ')) name.pop_back();
  if (name.empty() || name.find('/') != std::string::npos || name[0] == '.')
    throw Error("checkpoint pointer '" + latest + "' is corrupt: '" + name +
                "' is not a checkpoint's name");
  const std::string dir = join_path(path, name);
  if (!exists(join_path(dir, "manifest")))
    throw Error("checkpoint pointer '" + latest + "' names '" + name +
                "', which holds no manifest");
  return dir;
}

Checkpoint open_checkpoint(const std::string &path) {
  Checkpoint c;
  c.dir = resolve(path);
  c.manifest = read_manifest(c.dir);
  for (const Manifest::File &f : c.manifest.files)
    c.files.push_back(read_shard_header(c.dir, c.manifest, f));
  return c;
}

std::vector<uint8_t> read_range(const Checkpoint &c, const std::string &key, DType dtype,
                                const Shape &shape, int64_t begin, int64_t count) {
  const size_t element = dtype_size(dtype);
  const int64_t end = begin + std::min(count, std::max<int64_t>(0, shape.numel() - begin));
  // The pieces that overlap [begin, end), checked to cover it before
  // anything is allocated: a header may claim any tensor, but only the
  // pieces its files hold can be read.
  std::vector<std::pair<const ShardFile *, const Record *>> pieces;
  std::vector<std::pair<int64_t, int64_t>> spans;
  bool found = false;
  for (const ShardFile &file : c.files)
    for (const Record &r : file.records) {
      if (r.key != key) continue;
      found = true;
      if (r.dtype != dtype || r.shape != shape)
        throw Error("checkpoint file '" + file.path + "': tensor '" + key + "' is " +
                    dtype_name(r.dtype) + " " + r.shape.str() + "; this program's is " +
                    dtype_name(dtype) + " " + shape.str());
      const int64_t from = std::max(begin, r.begin), to = std::min(end, r.begin + r.count);
      if (from >= to) continue;
      pieces.emplace_back(&file, &r);
      spans.emplace_back(from, to);
    }
  if (!found)
    throw Error("checkpoint '" + c.dir + "' holds no tensor '" + key +
                "' (written by another optimizer or model?)");
  std::sort(spans.begin(), spans.end());
  int64_t covered = begin;  // [begin, covered) is held
  for (const auto &[from, to] : spans) {
    if (from > covered) break;
    covered = std::max(covered, to);
  }
  if (covered < end)
    throw Error("checkpoint '" + c.dir + "' lacks element " + std::to_string(covered) +
                " of tensor '" + key + "': a shard file is missing from it");
  std::vector<uint8_t> out(static_cast<size_t>(count) * element, 0);
  for (const auto &[file, r] : pieces) {
    const int64_t from = std::max(begin, r->begin), to = std::min(end, r->begin + r->count);
    const std::vector<uint8_t> bytes = read_record(*file, *r);
    std::memcpy(out.data() + static_cast<size_t>(from - begin) * element,
                bytes.data() + static_cast<size_t>(from - r->begin) * element,
                static_cast<size_t>(to - from) * element);
  }
  return out;
}

std::vector<Record> tensors(const Checkpoint &c) {
  std::map<std::string, Record> all;
  for (const ShardFile &file : c.files)
    for (const Record &r : file.records) {
      Record whole = r;
      whole.begin = 0;
      whole.count = r.shape.numel();
      all.emplace(r.key, whole);
    }
  std::vector<Record> out;
  for (auto &entry : all) out.push_back(entry.second);
  return out;
}

std::string tp_piece_key(const TpPiece &piece) {
  return piece.base + "@tp" + std::to_string(piece.rank) + "/" + std::to_string(piece.ranks) +
         ",dim=" + std::to_string(piece.dim) + ",blocks=" + std::to_string(piece.blocks) +
         (piece.whole ? ",whole=" + std::to_string(piece.whole) : "");
}

std::optional<TpPiece> parse_tp_piece_key(const std::string &key) {
  const std::string::size_type at = key.rfind("@tp");
  if (at == std::string::npos || at == 0) return std::nullopt;
  TpPiece piece;
  piece.base = key.substr(0, at);
  // Exactly what tp_piece_key writes: four non-negative integers.
  size_t i = at + 3;
  auto number = [&](const char *before, int64_t &out) {
    const size_t n = strlen(before);
    if (key.compare(i, n, before) != 0) return false;
    i += n;
    const size_t first = i;
    out = 0;
    while (i < key.size() && key[i] >= '0' && key[i] <= '9' && i - first < 12)
      out = out * 10 + (key[i++] - '0');
    return i > first;
  };
  if (!number("", piece.rank) || !number("/", piece.ranks) || !number(",dim=", piece.dim) ||
      !number(",blocks=", piece.blocks) ||
      (i != key.size() && (!number(",whole=", piece.whole) || piece.blocks != 1 ||
                           piece.whole < 1 ||
                           tp_padded_piece(piece.whole, piece.ranks) * piece.ranks ==
                               piece.whole)) ||
      i != key.size() || piece.ranks < 1 || piece.rank >= piece.ranks || piece.blocks < 1)
    return std::nullopt;
  return piece;
}

namespace {
// The whole shape of `piece`'s tensor, from the shape of one piece (less
// its padding where the key says so); a whole too large to count in bytes
// (see parse_shape) is refused.
Shape whole_of_piece(const std::string &dir, const TpPiece &piece, Shape shape) {
  int64_t dim = 0, numel = 0;
  if (piece.dim < shape.rank &&
      (__builtin_mul_overflow(shape.dims[piece.dim], piece.ranks, &dim) ||
       __builtin_mul_overflow(shape.numel(), piece.ranks, &numel) || numel > INT64_MAX / 8))
    throw Error("checkpoint '" + dir + "': the tensor-parallel pieces of '" + piece.base +
                "' (" + std::to_string(piece.ranks) + " of " + shape.str() +
                ") make a tensor too large to hold");
  if (piece.dim < shape.rank) shape.dims[piece.dim] = piece.whole ? piece.whole : dim;
  return shape;
}
}  // namespace

std::vector<Record> whole_tensors(const Checkpoint &c) {
  std::map<std::string, Record> all;
  for (const Record &r : tensors(c)) {
    Record whole = r;
    if (std::optional<TpPiece> piece = parse_tp_piece_key(r.key)) {
      whole.key = piece->base;
      whole.shape = whole_of_piece(c.dir, *piece, r.shape);
      whole.count = whole.shape.numel();
    }
    all.emplace(whole.key, whole);
  }
  std::vector<Record> out;
  for (auto &entry : all) out.push_back(entry.second);
  return out;
}

WholeTensor read_whole(const Checkpoint &c, const std::string &base) {
  WholeTensor out;
  std::map<int64_t, Record> pieces;  // by tp rank
  std::optional<TpPiece> layout;
  for (const Record &r : tensors(c)) {
    if (r.key == base) {
      out.dtype = r.dtype;
      out.shape = r.shape;
      out.bytes = read_range(c, r.key, r.dtype, r.shape, 0, r.shape.numel());
      return out;
    }
    std::optional<TpPiece> piece = parse_tp_piece_key(r.key);
    if (!piece || piece->base != base) continue;
    const std::string what = "checkpoint '" + c.dir + "': the tensor-parallel pieces of '" + base + "'";
    if (layout && (piece->ranks != layout->ranks || piece->dim != layout->dim ||
                   piece->blocks != layout->blocks || piece->whole != layout->whole ||
                   r.dtype != pieces.begin()->second.dtype ||
                   r.shape != pieces.begin()->second.shape))
      throw Error(what + " disagree: '" + r.key + "' against '" +
                  tp_piece_key(*layout) + "' (" + pieces.begin()->second.shape.str() + ")");
    layout = piece;
    pieces[piece->rank] = r;
  }
  if (!layout)
    throw Error("checkpoint '" + c.dir + "' holds no tensor '" + base +
                "' (written by another optimizer or model?)");
  for (int64_t r = 0; r < layout->ranks; ++r)
    if (!pieces.count(r))
      throw Error("checkpoint '" + c.dir + "' lacks tensor-parallel piece " + std::to_string(r) +
                  " of " + std::to_string(layout->ranks) + " of '" + base +
                  "': a shard file is missing from it");
  const Record &first = pieces.begin()->second;
  out.dtype = first.dtype;
  out.shape = whole_of_piece(c.dir, *layout, first.shape);
  const size_t element = dtype_size(first.dtype);
  int64_t cut = 0;  // the pieces' blocks along the axis
  // A padded piece holds the run its writer cut: this runtime's
  // (tp_padded_piece) or an older one's, ceil(whole / ranks).
  int64_t run = 0;
  bool piece_ok = layout->dim < first.shape.rank &&
                  !__builtin_mul_overflow(layout->blocks, layout->ranks, &cut);
  if (piece_ok && layout->whole) {
    run = first.shape[layout->dim];
    piece_ok = tp_piece_run_ok(layout->whole, layout->ranks, run);
  } else if (piece_ok) {
    piece_ok = tp_piece_shape(out.shape, layout->dim, layout->blocks, layout->ranks) ==
               first.shape;
  }
  if (!piece_ok)
    throw Error("checkpoint '" + c.dir + "': '" + tp_piece_key(*layout) + "' of shape " +
                first.shape.str() + " is not a piece along axis " + std::to_string(layout->dim));
  // Every piece is read (and so known to be held whole) before the whole
  // tensor is allocated.
  std::vector<std::vector<uint8_t>> bytes;
  for (auto &[rank, record] : pieces)
    bytes.push_back(read_range(c, record.key, record.dtype, record.shape, 0, record.shape.numel()));
  out.bytes.assign(static_cast<size_t>(out.shape.numel()) * element, 0);
  size_t i = 0;
  for (auto &[rank, record] : pieces)
    tp_piece_copy(out.bytes.data(), bytes[i++].data(), out.shape, layout->dim, layout->blocks,
                  layout->ranks, rank, element, /*to_piece=*/false, run);
  return out;
}

std::vector<uint8_t> piece_range(const WholeTensor &tensor, const TpPiece *piece, int64_t begin,
                                 int64_t count) {
  const size_t element = dtype_size(tensor.dtype);
  const std::vector<uint8_t> *values = &tensor.bytes;
  std::vector<uint8_t> cut;
  int64_t n = tensor.shape.numel();
  if (piece) {
    // A padded piece (its key's whole=) of this runtime's layout.
    if (piece->whole && (piece->dim >= tensor.shape.rank ||
                         tensor.shape[piece->dim] != piece->whole))
      throw Error("piece_range: '" + tp_piece_key(*piece) + "' is no piece of " +
                  tensor.shape.str());
    const int64_t run = piece->whole ? tp_padded_piece(piece->whole, piece->ranks) : 0;
    n = tp_piece_shape(tensor.shape, piece->dim, piece->blocks, piece->ranks, run).numel();
    cut.resize(static_cast<size_t>(n) * element);
    // Only read: tp_piece_copy takes both buffers mutable, for either way.
    std::vector<uint8_t> &whole = const_cast<std::vector<uint8_t> &>(tensor.bytes);
    tp_piece_copy(whole.data(), cut.data(), tensor.shape, piece->dim, piece->blocks, piece->ranks,
                  piece->rank, element, /*to_piece=*/true, run);
    values = &cut;
  }
  std::vector<uint8_t> out(static_cast<size_t>(count) * element, 0);
  const int64_t end = std::min(begin + count, n);
  if (end > begin)
    std::memcpy(out.data(), values->data() + static_cast<size_t>(begin) * element,
                static_cast<size_t>(end - begin) * element);
  return out;
}

std::string model_identity(std::vector<std::string> entries) {
  std::sort(entries.begin(), entries.end());
  entries.erase(std::unique(entries.begin(), entries.end()), entries.end());
  uint64_t hash = 14695981039346656037ull;  // FNV-1a, 64 bits
  for (const std::string &entry : entries)
    for (char c : entry + "\n") hash = (hash ^ static_cast<uint8_t>(c)) * 1099511628211ull;
  char text[32];
  snprintf(text, sizeof(text), "%016" PRIx64, hash);
  return text;
}

//===--- files -------------------------------------------------------------------===//

void write_durable(const std::string &path, const void *bytes, size_t size) {
  write_durable(path, {{bytes, size}});
}

void write_durable(const std::string &path, const std::vector<Span> &pieces) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw Error("cannot create '" + path + "': " + strerror(errno));
  for (const Span &piece : pieces) {
    const uint8_t *p = static_cast<const uint8_t *>(piece.data);
    size_t done = 0;
    while (done < piece.size) {
      ssize_t n = ::write(fd, p + done, piece.size - done);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        const std::string why = strerror(errno);
        close(fd);
        throw Error("cannot write '" + path + "': " + why);
      }
      done += static_cast<size_t>(n);
    }
  }
  if (fsync(fd) != 0) {
    const std::string why = strerror(errno);
    close(fd);
    throw Error("cannot sync '" + path + "' to disk: " + why);
  }
  if (close(fd) != 0) throw Error("cannot write '" + path + "': " + strerror(errno));
}

void sync_directory(const std::string &dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) throw Error("cannot open directory '" + dir + "': " + strerror(errno));
  const int rc = fsync(fd);
  const std::string why = rc != 0 ? strerror(errno) : "";
  close(fd);
  if (rc != 0) throw Error("cannot sync directory '" + dir + "': " + why);
}

void make_directories(const std::string &dir) {
  if (dir.empty()) return;
  struct stat st;
  if (stat(dir.c_str(), &st) == 0) {
    if (!S_ISDIR(st.st_mode)) throw Error("'" + dir + "' exists and is not a directory");
    return;
  }
  const size_t slash = dir.find_last_of('/', dir.size() > 1 ? dir.size() - 2 : 0);
  if (slash != std::string::npos && slash > 0) make_directories(dir.substr(0, slash));
  if (mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST)
    throw Error("cannot create directory '" + dir + "': " + strerror(errno));
}

void remove_tree(const std::string &path) {
  struct stat st;
  if (lstat(path.c_str(), &st) != 0) return;
  if (S_ISDIR(st.st_mode)) {
    if (DIR *d = opendir(path.c_str())) {
      std::vector<std::string> names;
      while (dirent *e = readdir(d)) {
        const std::string name = e->d_name;
        if (name != "." && name != "..") names.push_back(name);
      }
      closedir(d);
      for (const std::string &name : names) remove_tree(join_path(path, name));
    }
    if (rmdir(path.c_str()) != 0)
      throw Error("cannot remove '" + path + "': " + strerror(errno));
  } else if (unlink(path.c_str()) != 0) {
    throw Error("cannot remove '" + path + "': " + strerror(errno));
  }
}

}  // namespace checkpoint
}  // namespace dsrt

// dsrt: writing the source ONNX model back with trained parameters.
//
// libdsrt has no protobuf dependency, so this reads and writes the wire
// format directly (protobuf's encoding: varint tags, field number << 3 |
// wire type). Only three messages are looked into, and only at the fields
// that change:
//
//   ModelProto   7 graph (GraphProto)
//   GraphProto   5 initializer (TensorProto, repeated)
//   TensorProto  1 dims, 2 data_type, 8 name, 9 raw_data, 13 external_data
//                (StringStringEntryProto: 1 key, 2 value), 14 data_location
//                (1 = EXTERNAL), 4/5/6/7/10/11 typed data
//
// Every other field, and every other message (nodes, subgraphs of If and
// Loop, training info, functions, metadata), is copied byte for byte.
#include "dsrt/program.h"
#include "runner.h"

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <sys/stat.h>
#include <unistd.h>

namespace dsrt {

using namespace runner;

namespace {

enum WireType { kVarint = 0, kFixed64 = 1, kBytes = 2, kStartGroup = 3, kEndGroup = 4, kFixed32 = 5 };

// TensorProto fields.
enum : uint32_t {
  kDims = 1, kDataType = 2, kFloatData = 4, kInt32Data = 5, kStringData = 6, kInt64Data = 7,
  kName = 8, kRawData = 9, kDoubleData = 10, kUint64Data = 11, kExternalData = 13,
  kDataLocation = 14,
};
constexpr uint32_t kModelGraph = 7, kGraphInitializer = 5;
constexpr int64_t kDataLocationExternal = 1;
// Above this many initializer bytes the model would come close to
// protobuf's 2 GiB message limit: their data goes to an external file.
constexpr int64_t kExternalThresholdBytes = int64_t(1) << 30;
// Tensors at least this large go to the external file (smaller ones stay
// inline, as onnx's convert_model_to_external_data does by default).
constexpr int64_t kExternalMinTensorBytes = 1024;

struct Span {
  const uint8_t *data = nullptr;
  size_t size = 0;
  std::string str() const { return std::string(reinterpret_cast<const char *>(data), size); }
};

struct Field {
  uint32_t number = 0;
  int wire = 0;
  uint64_t value = 0;  // varint and fixed values
  Span payload;        // length-delimited payload
  Span whole;          // tag included, for verbatim copies
};

// Iterates over the fields of one message.
class WireReader {
public:
  WireReader(Span span, const std::string &what) : p_(span.data), end_(span.data + span.size), what_(what) {}

  bool done() const { return p_ >= end_; }

  Field next() {
    Field field;
    const uint8_t *start = p_;
    uint64_t tag = varint();
    field.number = static_cast<uint32_t>(tag >> 3);
    field.wire = static_cast<int>(tag & 7);
    if (field.number == 0) fail("field number 0");
    skip_value(field);
    field.whole = {start, static_cast<size_t>(p_ - start)};
    return field;
  }

private:
  [[noreturn]] void fail(const std::string &problem) const {
    throw Error(what_ + ": malformed protobuf (" + problem + ")");
  }

  uint64_t varint() {
    uint64_t value = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (p_ >= end_) fail("truncated varint");
      uint8_t byte = *p_++;
      value |= static_cast<uint64_t>(byte & 0x7f) << shift;
      if (!(byte & 0x80)) return value;
    }
    fail("varint longer than 10 bytes");
  }

  void need(uint64_t bytes) {
    if (bytes > static_cast<uint64_t>(end_ - p_)) fail("field runs past the end of its message");
  }

  void skip_value(Field &field) {
    switch (field.wire) {
    case kVarint: field.value = varint(); return;
    case kFixed64:
      need(8);
      std::memcpy(&field.value, p_, 8);
      p_ += 8;
      return;
    case kFixed32: {
      need(4);
      uint32_t v;
      std::memcpy(&v, p_, 4);
      field.value = v;
      p_ += 4;
      return;
    }
    case kBytes: {
      uint64_t size = varint();
      need(size);
      field.payload = {p_, static_cast<size_t>(size)};
      p_ += size;
      return;
    }
    case kStartGroup:
      // Deprecated groups: skip to the matching end tag. Bounded nesting,
      // so that a hostile file cannot exhaust the stack.
      if (++group_depth_ > 64) fail("groups nested too deeply");
      while (true) {
        if (done()) fail("unterminated group");
        Field inner = next_raw();
        if (inner.wire == kEndGroup) {
          if (inner.number != field.number) fail("mismatched end of group");
          --group_depth_;
          return;
        }
      }
    default: fail("wire type " + std::to_string(field.wire));
    }
  }

  // next() that accepts an end-group tag (inside a group).
  Field next_raw() {
    Field field;
    uint64_t tag = varint();
    field.number = static_cast<uint32_t>(tag >> 3);
    field.wire = static_cast<int>(tag & 7);
    if (field.wire != kEndGroup) skip_value(field);
    return field;
  }

  const uint8_t *p_, *end_;
  std::string what_;
  int group_depth_ = 0;
};

// An output message as a list of pieces: small encoded fields it owns and
// large byte ranges it only points at (the arena, the source model), so
// that weights are never copied before being written.
class Rope {
public:
  void varint(uint64_t value) {
    while (value >= 0x80) {
      tail_.push_back(static_cast<char>((value & 0x7f) | 0x80));
      value >>= 7;
    }
    tail_.push_back(static_cast<char>(value));
  }
  void tag(uint32_t number, int wire) { varint((static_cast<uint64_t>(number) << 3) | wire); }
  void copy(Span span) { tail_.append(reinterpret_cast<const char *>(span.data), span.size); }
  // Appends a range that must outlive the rope.
  void reference(Span span) {
    if (span.size < 256) return copy(span);
    flush();
    pieces_.push_back(span);
    size_ += span.size;
  }
  void bytes_field(uint32_t number, Span span) {
    tag(number, kBytes);
    varint(span.size);
    reference(span);
  }
  void string_field(uint32_t number, const std::string &text) {
    tag(number, kBytes);
    varint(text.size());
    tail_ += text;
  }
  void varint_field(uint32_t number, uint64_t value) {
    tag(number, kVarint);
    varint(value);
  }
  void message_field(uint32_t number, Rope &&message) {
    message.flush();
    tag(number, kBytes);
    varint(message.size());
    flush();
    for (auto &chunk : message.owned_) owned_.push_back(std::move(chunk));
    pieces_.insert(pieces_.end(), message.pieces_.begin(), message.pieces_.end());
    size_ += message.size_;
  }

  size_t size() const { return size_ + tail_.size(); }

  void write(std::ostream &out) {
    flush();
    for (const Span &piece : pieces_)
      out.write(reinterpret_cast<const char *>(piece.data), static_cast<std::streamsize>(piece.size));
  }

private:
  void flush() {
    if (tail_.empty()) return;
    // Heap-allocated so that moving chunks between ropes keeps the pointers.
    owned_.push_back(std::make_unique<std::string>(std::move(tail_)));
    tail_.clear();
    const std::string &chunk = *owned_.back();
    pieces_.push_back({reinterpret_cast<const uint8_t *>(chunk.data()), chunk.size()});
    size_ += chunk.size();
  }

  std::vector<std::unique_ptr<std::string>> owned_;
  std::vector<Span> pieces_;
  std::string tail_;
  size_t size_ = 0;
};

// ONNX TensorProto.DataType values and their element sizes (0: not a
// fixed-size type).
int onnx_data_type(DType dtype) {
  switch (dtype) {
  case DType::F32: return 1;
  case DType::F16: return 10;
  case DType::BF16: return 16;
  case DType::I64: return 7;
  case DType::I32: return 6;
  case DType::Bool: return 9;
  }
  return 0;
}

int64_t onnx_element_size(int64_t data_type) {
  switch (data_type) {
  case 1: case 6: case 12: return 4;             // float, int32, uint32
  case 2: case 3: case 9: return 1;              // uint8, int8, bool
  case 4: case 5: case 10: case 16: return 2;    // uint16, int16, float16, bfloat16
  case 7: case 11: case 13: case 14: return 8;   // int64, double, uint64, complex64
  case 15: return 16;                            // complex128
  case 17: case 18: case 19: case 20: return 1;  // float8 variants
  default: return 0;
  }
}

std::string dims_str(const std::vector<int64_t> &dims) {
  std::string text = "[";
  for (size_t i = 0; i < dims.size(); ++i) text += (i ? ", " : "") + std::to_string(dims[i]);
  return text + "]";
}

// What the initializer walk needs to know about one TensorProto.
struct TensorFacts {
  std::string name;
  int64_t data_type = 0;
  std::vector<int64_t> dims;
  bool external = false;
  std::string location;
  int64_t offset = 0, length = -1;
  int64_t data_bytes = 0;  // payload bytes, for the 1 GiB rule
};

TensorFacts read_tensor(Span tensor, const std::string &what) {
  TensorFacts facts;
  int64_t inline_bytes = 0;
  WireReader reader(tensor, what);
  while (!reader.done()) {
    Field field = reader.next();
    switch (field.number) {
    case kDims:
      if (field.wire == kVarint) {
        facts.dims.push_back(static_cast<int64_t>(field.value));
      } else if (field.wire == kBytes) {  // packed
        // A packed run: bare varints, no tags.
        const uint8_t *p = field.payload.data, *end = p + field.payload.size;
        while (p < end) {
          uint64_t value = 0;
          int shift = 0;
          while (true) {
            if (p >= end || shift >= 64) throw Error(what + ": malformed protobuf (packed dims)");
            uint8_t byte = *p++;
            value |= static_cast<uint64_t>(byte & 0x7f) << shift;
            shift += 7;
            if (!(byte & 0x80)) break;
          }
          facts.dims.push_back(static_cast<int64_t>(value));
        }
      }
      break;
    case kDataType: facts.data_type = static_cast<int64_t>(field.value); break;
    case kName: facts.name = field.payload.str(); break;
    case kDataLocation: facts.external = field.value == kDataLocationExternal; break;
    case kExternalData: {
      std::string key, value;
      WireReader entry(field.payload, what);
      while (!entry.done()) {
        Field f = entry.next();
        if (f.number == 1 && f.wire == kBytes) key = f.payload.str();
        if (f.number == 2 && f.wire == kBytes) value = f.payload.str();
      }
      if (key == "location") {
        facts.location = value;
      } else if (key == "offset" || key == "length") {
        uint64_t number = 0;
        bool ok = !value.empty() && value.size() <= 18 &&
                  std::all_of(value.begin(), value.end(), [](char c) { return c >= '0' && c <= '9'; });
        if (ok) number = std::stoull(value);
        if (!ok)
          throw Error(what + ": tensor '" + facts.name + "': external data '" + key +
                      "' must be a non-negative integer, got '" + value + "'");
        (key == "offset" ? facts.offset : facts.length) = static_cast<int64_t>(number);
      }
      break;
    }
    case kRawData: case kFloatData: case kInt32Data: case kStringData: case kInt64Data:
    case kDoubleData: case kUint64Data:
      inline_bytes += static_cast<int64_t>(field.wire == kBytes ? field.payload.size : 8);
      break;
    default: break;
    }
  }
  int64_t element = onnx_element_size(facts.data_type);
  int64_t count = 1;
  for (int64_t d : facts.dims) count *= d;
  if (facts.external)
    facts.data_bytes = facts.length >= 0 ? facts.length : count * element;
  else
    facts.data_bytes = inline_bytes;
  return facts;
}

bool is_data_field(uint32_t number) {
  switch (number) {
  case kFloatData: case kInt32Data: case kStringData: case kInt64Data: case kRawData:
  case kDoubleData: case kUint64Data: case kExternalData: case kDataLocation:
    return true;
  default:
    return false;
  }
}

std::string real_path(const std::string &path) {
  char *resolved = ::realpath(path.c_str(), nullptr);
  if (!resolved) return "";
  std::string out = resolved;
  std::free(resolved);
  return out;
}

// Where a non-parameter initializer's external bytes are, checked as the
// importer checks them: relative, no '..', no control characters, and not
// escaping the directory through a symlink.
std::string resolve_external(const std::string &dir, const TensorFacts &tensor,
                             const std::string &what) {
  std::string prefix = what + ": external data of tensor '" + tensor.name + "': ";
  const std::string &location = tensor.location;
  if (location.empty()) throw Error(prefix + "no 'location' entry");
  if (tensor.length < 0 && onnx_element_size(tensor.data_type) == 0)
    throw Error(prefix + "no 'length' entry and data type " + std::to_string(tensor.data_type) +
                " has no fixed element size");
  for (unsigned char c : location)
    if (c < 0x20 || c == 0x7f) throw Error(prefix + "location contains a control character");
  if (location[0] == '/' || location[0] == '\\')
    throw Error(prefix + "location '" + location + "' is an absolute path; refused");
  std::stringstream parts(location);
  std::string part;
  while (std::getline(parts, part, '/')) {
    std::stringstream pieces(part);
    std::string piece;
    while (std::getline(pieces, piece, '\\'))
      if (piece == "..") throw Error(prefix + "location '" + location + "' contains '..'; refused");
  }
  std::string real_dir = real_path(dir), real_file = real_path(dir + "/" + location);
  if (real_dir.empty()) throw Error(prefix + "cannot resolve the directory '" + dir + "'");
  if (real_file.empty())
    throw Error(prefix + "file '" + dir + "/" + location + "' not found (use --weights DIR if "
                "the model's files moved)");
  if (real_file.compare(0, real_dir.size(), real_dir) != 0 || real_file.size() <= real_dir.size() ||
      (real_dir.back() != '/' && real_file[real_dir.size()] != '/'))
    throw Error(prefix + "location '" + location + "' resolves to '" + real_file +
                "', outside '" + real_dir + "' (through a symlink); refused");
  struct stat st;
  if (stat(real_file.c_str(), &st) != 0 || !S_ISREG(st.st_mode))
    throw Error(prefix + "'" + real_file + "' is not a regular file");
  if (tensor.data_bytes < 0 || tensor.offset + tensor.data_bytes > st.st_size)
    throw Error(prefix + "'" + real_file + "' is " + std::to_string(st.st_size) +
                " bytes, too short for " + std::to_string(tensor.data_bytes) +
                " bytes at offset " + std::to_string(tensor.offset));
  return real_file;
}

std::string read_file(const std::string &path, const std::string &what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(what + ": cannot open '" + path + "'");
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) throw Error(what + ": cannot read '" + path + "'");
  return bytes;
}

std::string basename_of(const std::string &path) {
  size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

}  // namespace

struct runner::OnnxSaveSource {
  std::string model_path, external_dir;
  std::string bytes;                // the whole source model
  std::map<std::string, const ParamInfo *> params;
  int64_t initializer_bytes = 0;    // for the 1 GiB rule
  // Resolved files of non-parameter initializers with external data.
  std::map<std::string, std::string> external_files;
};

std::shared_ptr<const OnnxSaveSource> runner::prepare_save_onnx(const ProgramInfo &info,
                                                                const std::string &weights_dir) {
  auto source = std::make_shared<OnnxSaveSource>();
  if (info.model_path.empty())
    throw Error("--save-onnx: the program does not name its source model");
  source->model_path = info.model_path;
  source->external_dir = weights_dir.empty() ? directory_of(info.model_path) : weights_dir;
  const std::string what = "--save-onnx: model '" + info.model_path + "'";
  source->bytes = read_file(info.model_path, what);
  for (const ParamInfo &param : info.params) source->params[param.name] = &param;

  std::map<std::string, bool> found;
  Span model{reinterpret_cast<const uint8_t *>(source->bytes.data()), source->bytes.size()};
  WireReader model_reader(model, what);
  bool has_graph = false;
  while (!model_reader.done()) {
    Field graph = model_reader.next();
    if (graph.number != kModelGraph) continue;
    if (graph.wire != kBytes) throw Error(what + ": malformed protobuf (graph is not a message)");
    has_graph = true;
    WireReader graph_reader(graph.payload, what);
    while (!graph_reader.done()) {
      Field initializer = graph_reader.next();
      if (initializer.number != kGraphInitializer) continue;
      if (initializer.wire != kBytes)
        throw Error(what + ": malformed protobuf (initializer is not a message)");
      TensorFacts tensor = read_tensor(initializer.payload, what);
      auto param = source->params.find(tensor.name);
      if (param == source->params.end()) {
        if (tensor.external)
          source->external_files[tensor.name] = resolve_external(source->external_dir, tensor, what);
        source->initializer_bytes += tensor.data_bytes;
        continue;
      }
      const ParamInfo &p = *param->second;
      // A sharded or tp-split parameter is checked against its whole tensor.
      const Shape &whole = p.model_shape();
      std::vector<int64_t> shape(whole.dims, whole.dims + whole.rank);
      if (tensor.data_type != onnx_data_type(p.stored) || tensor.dims != shape)
        throw Error(what + ": initializer '" + tensor.name + "' has ONNX data type " +
                    std::to_string(tensor.data_type) + " and dims " + dims_str(tensor.dims) +
                    " but the program's parameter is " + dtype_name(p.stored) + " " +
                    whole.str() + "; the model is not the one this program was compiled from");
      found[tensor.name] = true;
      source->initializer_bytes +=
          static_cast<int64_t>(Tensor{nullptr, p.stored, whole}.nbytes());
    }
  }
  if (!has_graph) throw Error(what + ": the model has no graph");
  for (const ParamInfo &param : info.params)
    if (param.trainable && !found.count(param.name))
      throw Error(what + ": trained parameter '" + param.name +
                  "' is not an initializer of the model's graph");
  return source;
}

void runner::write_save_onnx(const OnnxSaveSource &source, const ProgramInfo &info,
                             const uint8_t *arena, const std::string &path, bool external_data,
                             const std::map<std::string, Tensor> &full_values) {
  const std::string what = "--save-onnx: model '" + source.model_path + "'";
  // The bytes each parameter is saved with: a supplied whole value, else its
  // arena slot (which holds only a shard of a sharded parameter, and only
  // the 16-bit working copy of a parameter with master weights).
  auto param_bytes = [&](const ParamInfo &p) {
    const Shape &whole = p.model_shape();
    auto value = full_values.find(p.name);
    if (value == full_values.end()) {
      if (p.sharded() || p.tp_split() || p.dtype != p.stored)
        throw Error("--save-onnx: parameter '" + p.name + "' is " +
                    (p.sharded() || p.tp_split()
                                 ? "sharded (the arena holds " + p.shape.str() + " of " +
                                       dtype_name(p.dtype) + " " + whole.str() + ")"
                                 : std::string("a ") + dtype_name(p.dtype) +
                                       " working copy of " + dtype_name(p.stored) +
                                       " master weights") +
                    "; its whole value must be supplied");
      return Span{arena + p.offset, Tensor{nullptr, p.dtype, p.shape}.nbytes()};
    }
    const Tensor &t = value->second;
    if (t.dtype != p.stored || t.numel() != whole.numel() || (t.numel() > 0 && !t.data))
      throw Error("--save-onnx: the value supplied for parameter '" + p.name + "' is " +
                  dtype_name(t.dtype) + " " + t.shape.str() + ", expected " +
                  dtype_name(p.stored) + " " + whole.str());
    return Span{static_cast<const uint8_t *>(t.data), t.nbytes()};
  };
  for (const auto &value : full_values) {
    auto param = std::find_if(info.params.begin(), info.params.end(),
                               [&](const ParamInfo &p) { return p.name == value.first; });
    if (param == info.params.end())
      throw Error("--save-onnx: a value was supplied for '" + value.first +
                  "', which is not a parameter of the program");
  }
  const bool external = external_data || source.initializer_bytes > kExternalThresholdBytes;
  const std::string data_name = basename_of(path) + ".data";
  const std::string data_path = directory_of(path) + "/" + data_name;

  // Bytes read from the source's external files, owned until written.
  std::vector<std::unique_ptr<std::string>> loaded;
  std::vector<Span> external_pieces;
  int64_t external_size = 0;

  // The initializer's non-data fields (name, dims, data_type, doc_string,
  // ...) verbatim, then the new data inline or in the external file.
  auto rewrite = [&](Span tensor, Span data) {
    Rope out;
    WireReader reader(tensor, what);
    while (!reader.done()) {
      Field field = reader.next();
      if (!is_data_field(field.number)) out.copy(field.whole);
    }
    if (external && static_cast<int64_t>(data.size) >= kExternalMinTensorBytes) {
      auto entry = [&](const char *key, const std::string &value) {
        Rope kv;
        kv.string_field(1, key);
        kv.string_field(2, value);
        out.message_field(kExternalData, std::move(kv));
      };
      entry("location", data_name);
      entry("offset", std::to_string(external_size));
      entry("length", std::to_string(data.size));
      out.varint_field(kDataLocation, kDataLocationExternal);
      external_pieces.push_back(data);
      external_size += static_cast<int64_t>(data.size);
    } else {
      out.bytes_field(kRawData, data);
    }
    return out;
  };

  Rope model_out;
  Span model{reinterpret_cast<const uint8_t *>(source.bytes.data()), source.bytes.size()};
  WireReader model_reader(model, what);
  while (!model_reader.done()) {
    Field graph = model_reader.next();
    if (graph.number != kModelGraph) {
      model_out.reference(graph.whole);
      continue;
    }
    Rope graph_out;
    WireReader graph_reader(graph.payload, what);
    while (!graph_reader.done()) {
      Field initializer = graph_reader.next();
      if (initializer.number != kGraphInitializer) {
        graph_out.reference(initializer.whole);
        continue;
      }
      TensorFacts tensor = read_tensor(initializer.payload, what);
      auto param = source.params.find(tensor.name);
      if (param != source.params.end()) {
        Span data = param_bytes(*param->second);
        graph_out.message_field(kGraphInitializer, rewrite(initializer.payload, data));
      } else if (tensor.external) {
        std::string file = source.external_files.at(tensor.name);
        std::ifstream in(file, std::ios::binary);
        auto bytes = std::make_unique<std::string>(static_cast<size_t>(tensor.data_bytes), '\0');
        in.seekg(tensor.offset);
        in.read(&(*bytes)[0], tensor.data_bytes);
        if (!in || in.gcount() != tensor.data_bytes)
          throw Error(what + ": cannot read the external data of '" + tensor.name + "' from '" +
                      file + "'");
        Span data{reinterpret_cast<const uint8_t *>(bytes->data()), bytes->size()};
        loaded.push_back(std::move(bytes));
        graph_out.message_field(kGraphInitializer, rewrite(initializer.payload, data));
      } else {
        graph_out.reference(initializer.whole);
      }
    }
    model_out.message_field(kModelGraph, std::move(graph_out));
  }
  if (!external && model_out.size() > static_cast<size_t>(INT_MAX))
    throw Error("--save-onnx: the model would be " + std::to_string(model_out.size()) +
                " bytes, over protobuf's 2 GiB limit; use --external-data");

  // Write beside the destination and rename, so that a failed write never
  // leaves a truncated model (or replaces a good one).
  auto write_atomically = [&](const std::string &target, auto &&emit) {
    std::string temporary = target + ".tmp" + std::to_string(getpid());
    {
      std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
      if (!out) throw Error("--save-onnx: cannot write '" + temporary + "'");
      emit(out);
      out.flush();
      if (!out) {
        std::remove(temporary.c_str());
        throw Error("--save-onnx: cannot write '" + temporary + "' (disk full?)");
      }
    }
    if (std::rename(temporary.c_str(), target.c_str()) != 0) {
      std::remove(temporary.c_str());
      throw Error("--save-onnx: cannot rename '" + temporary + "' to '" + target + "'");
    }
  };
  if (!external_pieces.empty())
    write_atomically(data_path, [&](std::ostream &out) {
      for (const Span &piece : external_pieces)
        out.write(reinterpret_cast<const char *>(piece.data),
                  static_cast<std::streamsize>(piece.size));
    });
  write_atomically(path, [&](std::ostream &out) { model_out.write(out); });
}

void save_onnx(const ProgramInfo &info, const uint8_t *arena, const std::string &path,
               const std::string &weights_dir, bool external_data,
               const std::map<std::string, Tensor> &full_values) {
  std::shared_ptr<const OnnxSaveSource> source = prepare_save_onnx(info, weights_dir);
  write_save_onnx(*source, info, arena, path, external_data, full_values);
}

}  // namespace dsrt

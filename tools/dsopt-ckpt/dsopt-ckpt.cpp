// dsopt-ckpt: what a training checkpoint holds, and the trained model out
// of it (docs/checkpoints.md). Reads checkpoints with the runtime's reader,
// so every file is checked as a resume checks it.
//
//   dsopt-ckpt list DIR
//   dsopt-ckpt export-onnx DIR --model MODEL.onnx -o OUT.onnx [--external-data]
//   dsopt-ckpt export-safetensors DIR -o OUT.safetensors [--states]
//
// Tensor-parallel pieces are listed and exported as the whole tensors.
#include "dsrt/checkpoint.h"
#include "dsrt/program.h"

#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace ck = dsrt::checkpoint;
using dsrt::DType;
using dsrt::Error;

namespace {

const char kUsage[] =
    "usage: dsopt-ckpt list PATH\n"
    "       dsopt-ckpt export-onnx PATH --model MODEL.onnx -o OUT.onnx [--external-data]\n"
    "       dsopt-ckpt export-safetensors PATH -o OUT.safetensors [--states]\n"
    "PATH is a checkpoint (DIR/step_<N>) or a directory of them (its 'latest').\n"
    "  list                the step, layout, files and every tensor: name, dtype,\n"
    "                      shape, the element range each file holds and its CRC32C\n"
    "  export-onnx         MODEL.onnx (the model the program was compiled from) with\n"
    "                      the checkpoint's parameters as its initializers\n"
    "  export-safetensors  the parameters (with --states also the optimizer states,\n"
    "                      named state:<name>) in the safetensors format\n";

const std::string kParam = "param:";

// Every file checked whole, as a resume does between its ranks.
ck::Checkpoint open_verified(const std::string &path) {
  ck::Checkpoint c = ck::open_checkpoint(path);
  for (const ck::Manifest::File &f : c.manifest.files) ck::verify_shard(c.dir, f);
  return c;
}

int list(const std::string &path) {
  const ck::Checkpoint c = open_verified(path);
  const ck::Manifest &m = c.manifest;
  printf("checkpoint %s\n", c.dir.c_str());
  printf("step %" PRId64 " (updates applied %" PRId64 ", skipped %" PRId64 ")\n", m.step,
         m.applied, m.skipped);
  printf("model %s\nlayout %s (world %" PRId64 ")\nseed %" PRIu64 "\ndata batches %" PRId64 "\n",
         m.model.c_str(), m.layout.c_str(), m.world, m.seed, m.data_batches);
  if (m.has_loss_scaler)
    printf("loss scaler scale %.17g hysteresis %d iter %" PRId64 " last overflow %" PRId64 "\n",
           m.loss_scaler.scale, m.loss_scaler.hysteresis, m.loss_scaler.iter,
           m.loss_scaler.last_overflow_iter);
  else
    printf("loss scaler none\n");
  for (const ck::Manifest::File &f : m.files)
    printf("file %s %" PRIu64 " bytes crc32c %s\n", f.name.c_str(), f.size, ck::hex32(f.crc).c_str());
  // Per logical tensor (tp pieces listed under the whole tensor), the
  // pieces each file holds.
  std::map<std::string, std::vector<std::pair<std::string, const ck::Record *>>> pieces;
  for (const ck::ShardFile &file : c.files)
    for (const ck::Record &r : file.records) {
      const std::optional<ck::TpPiece> tp = ck::parse_tp_piece_key(r.key);
      pieces[tp ? tp->base : r.key].emplace_back(file.path.substr(file.path.find_last_of('/') + 1),
                                                 &r);
    }
  const std::vector<ck::Record> wholes = ck::whole_tensors(c);
  printf("tensors %zu\n", wholes.size());
  for (const ck::Record &whole : wholes) {
    printf("  %s %s %s\n", whole.key.c_str(), dsrt::dtype_name(whole.dtype),
           whole.shape.str().c_str());
    for (const auto &piece : pieces[whole.key]) {
      std::string tp;
      if (const std::optional<ck::TpPiece> p = ck::parse_tp_piece_key(piece.second->key))
        tp = "tp piece " + std::to_string(p->rank) + "/" + std::to_string(p->ranks) + " (axis " +
             std::to_string(p->dim) + ", " + std::to_string(p->blocks) + " block" +
             (p->blocks > 1 ? "s" : "") +
             (p->whole ? ", padded from " + std::to_string(p->whole) : "") + ") " +
             piece.second->shape.str() + " ";
      printf("    %s %s[%" PRId64 ", %" PRId64 ") crc32c %s\n", piece.first.c_str(), tp.c_str(),
             piece.second->begin, piece.second->begin + piece.second->count,
             ck::hex32(piece.second->crc).c_str());
    }
  }
  return 0;
}

int export_onnx(const std::string &path, const std::string &model, const std::string &out,
                bool external_data) {
  const ck::Checkpoint c = open_verified(path);
  dsrt::ProgramInfo info;
  info.model_path = model;
  std::vector<std::vector<uint8_t>> buffers;
  std::map<std::string, dsrt::Tensor> values;
  for (const ck::Record &r : ck::whole_tensors(c)) {
    if (r.key.compare(0, kParam.size(), kParam) != 0) continue;
    dsrt::ParamInfo param;
    param.name = r.key.substr(kParam.size());
    param.dtype = r.dtype;
    param.shape = r.shape;
    // Every parameter must be an initializer of the model.
    param.trainable = true;
    info.params.push_back(param);
    buffers.push_back(ck::read_whole(c, r.key).bytes);
    values[param.name] = dsrt::Tensor{buffers.back().data(), r.dtype, r.shape};
  }
  if (info.params.empty()) throw Error("checkpoint '" + c.dir + "' holds no parameters");
  dsrt::save_onnx(info, nullptr, out, "", external_data, values);
  fprintf(stderr, "dsopt-ckpt: wrote '%s' with %zu parameters of step %" PRId64 "\n",
          out.c_str(), info.params.size(), c.manifest.step);
  return 0;
}

const char *safetensors_dtype(DType dtype) {
  switch (dtype) {
  case DType::F32: return "F32";
  case DType::F16: return "F16";
  case DType::BF16: return "BF16";
  case DType::I64: return "I64";
  case DType::I32: return "I32";
  case DType::Bool: return "BOOL";
  }
  return "?";
}

std::string json_string(const std::string &text) {
  std::string out = "\"";
  for (unsigned char ch : text) {
    if (ch == '"' || ch == '\\') {
      out += '\\';
      out += static_cast<char>(ch);
    } else if (ch < 0x20) {
      char escaped[8];
      snprintf(escaped, sizeof(escaped), "\\u%04x", ch);
      out += escaped;
    } else {
      out += static_cast<char>(ch);
    }
  }
  return out + "\"";
}

// The safetensors format: an 8-byte little-endian header length, a JSON
// header (per tensor its dtype, shape and data_offsets into the data that
// follows; "__metadata__" string pairs), padded with spaces to 8 bytes,
// then the tensors' bytes.
int export_safetensors(const std::string &path, const std::string &out, bool states) {
  const ck::Checkpoint c = open_verified(path);
  std::string header = "{\"__metadata__\":{\"format\":\"pt\",\"dsopt_step\":\"" +
                       std::to_string(c.manifest.step) + "\",\"dsopt_model\":\"" +
                       c.manifest.model + "\"}";
  std::vector<uint8_t> data;
  size_t count = 0;
  for (const ck::Record &r : ck::whole_tensors(c)) {
    const bool param = r.key.compare(0, kParam.size(), kParam) == 0;
    if (!param && !states) continue;
    const std::string name = param ? r.key.substr(kParam.size()) : r.key;
    const std::vector<uint8_t> bytes = ck::read_whole(c, r.key).bytes;
    std::string shape;
    for (int i = 0; i < r.shape.rank; ++i) shape += (i ? "," : "") + std::to_string(r.shape[i]);
    header += "," + json_string(name) + ":{\"dtype\":\"" + safetensors_dtype(r.dtype) +
              "\",\"shape\":[" + shape + "],\"data_offsets\":[" + std::to_string(data.size()) +
              "," + std::to_string(data.size() + bytes.size()) + "]}";
    data.insert(data.end(), bytes.begin(), bytes.end());
    ++count;
  }
  header += "}";
  while (header.size() % 8) header += ' ';
  std::vector<uint8_t> file;
  for (int i = 0; i < 8; ++i) file.push_back(static_cast<uint8_t>(uint64_t(header.size()) >> (8 * i)));
  file.insert(file.end(), header.begin(), header.end());
  file.insert(file.end(), data.begin(), data.end());
  ck::write_durable(out, file.data(), file.size());
  fprintf(stderr, "dsopt-ckpt: wrote '%s' with %zu tensors of step %" PRId64 "\n", out.c_str(),
          count, c.manifest.step);
  return 0;
}

int run(int argc, char **argv) {
  if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
    fputs(kUsage, argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  const std::string command = argv[1];
  std::string path, model, out;
  bool external_data = false, states = false;
  for (int i = 2; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&](std::string &into) {
      if (i + 1 >= argc) throw Error("option " + arg + " needs a value");
      into = argv[++i];
    };
    if (arg == "--model") value(model);
    else if (arg == "-o") value(out);
    else if (arg == "--external-data") external_data = true;
    else if (arg == "--states") states = true;
    else if (!arg.empty() && arg[0] == '-') throw Error("unknown option '" + arg + "'");
    else if (path.empty()) path = arg;
    else throw Error("unexpected argument '" + arg + "'");
  }
  if (path.empty()) throw Error(command + ": which checkpoint? (see --help)");
  if (command == "list") {
    if (!model.empty() || !out.empty()) throw Error("list takes no --model or -o");
    return list(path);
  }
  if (command == "export-onnx") {
    if (model.empty() || out.empty()) throw Error("export-onnx needs --model MODEL.onnx and -o OUT");
    return export_onnx(path, model, out, external_data);
  }
  if (command == "export-safetensors") {
    if (out.empty()) throw Error("export-safetensors needs -o OUT");
    return export_safetensors(path, out, states);
  }
  throw Error("unknown command '" + command + "' (list, export-onnx, export-safetensors)");
}

}  // namespace

int main(int argc, char **argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception &error) {
    fprintf(stderr, "dsopt-ckpt: error: %s\n", error.what());
    return 1;
  }
}

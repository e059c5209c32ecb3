// libFuzzer target: the checkpoint reader (dsrt::checkpoint::open_checkpoint,
// tensors, read_range, verify_shard, and the tensor-parallel pieces'
// whole_tensors, read_whole and piece_range), which --resume and dsopt-ckpt
// use.
// An input is [u16 LE manifest length][manifest lines][shard file]; the
// harness writes a checkpoint directory of one rank from it and, so that
// mutations reach past the checksums, fixes them: the shard's CRC32C
// trailer, its manifest entry (unless the input has "file" lines) and the
// manifest's own crc32c line. Every input must load or end in a
// dsrt::Error; anything else is a finding.
//
// DSRT_FUZZ_WRITE_SEED=FILE writes a valid input (a whole tensor, a ZeRO
// shard, an i64 state, both tensor-parallel pieces of a 4x3 tensor cut
// along axis 0 and both padded pieces of a 5x2 one) to FILE and exits: the
// seed corpus, made at test time.
#include "dsrt/checkpoint.h"
#include "fuzz_file.h"

#include <cstring>
#include <vector>

namespace ck = dsrt::checkpoint;

namespace {

std::vector<uint8_t> seed() {
  ck::ShardWriter writer;
  const float w[6] = {1, 2, 3, 4, 5, 6};
  const int64_t step[1] = {3};
  writer.add("param:w", dsrt::DType::F32, dsrt::Shape{2, 3}, 0, 6, w);
  writer.add("state:w.m", dsrt::DType::F32, dsrt::Shape{12}, 2, 6, w);
  writer.add("state:count", dsrt::DType::I64, dsrt::Shape{1}, 0, 1, step);
  for (int64_t r = 0; r < 2; ++r)
    writer.add(ck::tp_piece_key({"param:v", r, 2, 0, 1}), dsrt::DType::F32, dsrt::Shape{2, 3}, 0,
               6, w);
  // A padded vocabulary: 5 rows over 2 ranks, 8 rows a piece.
  const std::vector<float> rows(16, 0.5f);
  for (int64_t r = 0; r < 2; ++r)
    writer.add(ck::tp_piece_key({"param:u", r, 2, 0, 1, 5}), dsrt::DType::F32, dsrt::Shape{8, 2},
               0, 16, rows.data());
  uint32_t crc = 0;
  const std::vector<uint8_t> shard = writer.finish(3, 0, "0123456789abcdef", crc);
  ck::Manifest m;
  m.step = 3;
  m.applied = 3;
  m.seed = 7;
  m.data_batches = 2;
  m.model = "0123456789abcdef";
  m.layout = "dp=1";
  m.world = 1;
  std::string text = ck::manifest_text(m);
  text = text.substr(0, text.rfind("crc32c "));  // the harness adds it
  std::vector<uint8_t> out{static_cast<uint8_t>(text.size() & 0xff),
                           static_cast<uint8_t>(text.size() >> 8)};
  out.insert(out.end(), text.begin(), text.end());
  out.insert(out.end(), shard.begin(), shard.end());
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int *, char ***) {
  if (const char *path = std::getenv("DSRT_FUZZ_WRITE_SEED")) {
    const std::vector<uint8_t> bytes = seed();
    dsrt_fuzz::write_file(path, bytes.data(), bytes.size());
    std::exit(0);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 2) return 0;
  const size_t length = std::min<size_t>(data[0] | (data[1] << 8), size - 2);
  std::string manifest(reinterpret_cast<const char *>(data + 2), length);
  std::vector<uint8_t> shard(data + 2 + length, data + size);
  if (shard.size() >= 4) {
    const uint32_t crc = ck::crc32c(shard.data(), shard.size() - 4);
    for (int i = 0; i < 4; ++i) shard[shard.size() - 4 + i] = static_cast<uint8_t>(crc >> (8 * i));
  }
  if (manifest.find("file ") == std::string::npos) {
    if (!manifest.empty() && manifest.back() != '\n') manifest += '\n';
    const uint32_t crc = ck::crc32c(shard.data(), shard.size());
    manifest += "file rank_0.bin " + std::to_string(shard.size()) + " " + ck::hex32(crc) + "\n";
  }
  manifest += "crc32c " + ck::hex32(ck::crc32c(manifest.data(), manifest.size())) + "\n";
  static const std::string dir = dsrt_fuzz::work_dir();
  dsrt_fuzz::write_file(dir + "/manifest", reinterpret_cast<const uint8_t *>(manifest.data()),
                        manifest.size());
  dsrt_fuzz::write_file(dir + "/rank_0.bin", shard.data(), shard.size());
  try {
    const ck::Checkpoint c = ck::open_checkpoint(dir);
    for (const ck::Manifest::File &f : c.manifest.files) ck::verify_shard(c.dir, f);
    for (const ck::Record &r : ck::tensors(c)) {
      // Small reads only: a record may claim a huge tensor, which the
      // reader must refuse or read piecewise, not allocate whole.
      const int64_t count = std::min<int64_t>(r.count, 1 << 16);
      (void)ck::read_range(c, r.key, r.dtype, r.shape, r.begin, count);
    }
    // Whole tensors, tp pieces put back together, and a piece of each cut
    // again (as a resume at another tp size does), for small ones only.
    for (const ck::Record &r : ck::whole_tensors(c)) {
      if (r.nbytes() > (1u << 20)) continue;
      const ck::WholeTensor whole = ck::read_whole(c, r.key);
      (void)ck::piece_range(whole, nullptr, 0, std::min<int64_t>(whole.shape.numel() + 1, 1 << 16));
      if (whole.shape.rank > 0 && whole.shape[0] > 0) {
        // An even cut, or a padded one (whole= the rows) for an odd count.
        const ck::TpPiece half{r.key, 1, 2, 0, 1, whole.shape[0] % 2 ? whole.shape[0] : 0};
        (void)ck::piece_range(whole, &half, 0, std::min<int64_t>(whole.shape.numel(), 1 << 16));
      }
    }
  } catch (const dsrt::Error &) {
  }
  return 0;
}

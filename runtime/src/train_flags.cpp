// dsrt: the flags of train_main and pipeline_main (train_common.h).
#include "train_common.h"

#include "dsrt/backend.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <omp.h>
#include <sys/stat.h>

namespace dsrt {
namespace runner {

//===--- flags ------------------------------------------------------------------===//

namespace {

void train_usage(const char *argv0, Launch launch) {
  fprintf(stderr,
          "usage: %s --data DIR --steps N [--log-json FILE] [--save-onnx FILE]\n"
          "          [--external-data] [--seed S] [--weights DIR] [--threads N]\n"
          "          [--trace FILE] [--nvme-path DIR] [--on-nonfinite stop|skip] [--quiet]\n"
          "          [--save-dir DIR [--save-interval N] [--keep K] [--sync-save]\n"
          "          [--save-staging-limit BYTES]] [--resume PATH]\n"
          "  --data DIR        one <input name>.npy per input of micro_step, holding\n"
          "                    [n, ranks * accumulation_steps * S0, S1, ...] for an\n"
          "                    input of shape [S0, S1, ...]: n global batches, used in\n"
          "                    turn; rank r takes micro-batches r*k .. r*k+k-1 of each\n"
          "                    (k = accumulation_steps; ranks = 1 without a dp grid)\n"
          "  --steps N         optimizer steps to run\n"
          "  --log-json FILE   one JSON object per step\n"
          "  --save-onnx FILE  after training, write the model with the trained weights\n"
          "  --external-data   ...with tensors of 1 KiB or more in FILE.data\n"
          "  --save-dir DIR    write checkpoints to DIR/step_<N> after the last step\n"
          "                    (DIR/latest names the newest)\n"
          "  --save-interval N ...and after every N steps\n"
          "  --keep K          keep the newest K checkpoints (default: all)\n"
          "  --sync-save       write each checkpoint before the next step starts\n"
          "                    (default: a host snapshot written in the background)\n"
          "  --save-staging-limit BYTES\n"
          "                    write in the background only when this rank's\n"
          "                    snapshot fits in BYTES of host memory\n"
          "  --resume PATH     continue from checkpoint PATH (DIR/step_<N>, or DIR for\n"
          "                    its latest), written under any dp, ZeRO or pp layout;\n"
          "                    --steps stays the total\n"
          "  --seed S          dropout seed (default 0)\n"
          "  --weights DIR     where the model's weight files are (default: the\n"
          "                    model's directory at compile time)\n"
          "  --threads N       threads for kernels (default: all cores)\n"
          "  --nvme-path DIR   where the file-backed (NVMe) memory space's file goes,\n"
          "                    when the plan has one (default: $TMPDIR, else /tmp)\n"
          "  --on-nonfinite stop|skip\n"
          "                    a step whose gradients or loss hold a NaN or an\n"
          "                    infinity stops the run, naming the parameter (stop,\n"
          "                    the default in fp32), or is skipped and reported: no\n"
          "                    weight, optimizer state or learning-rate step changes\n"
          "                    (skip, the default in bf16); in fp16 it is an overflow\n"
          "                    of the loss scale, always skipped\n",
          argv0);
  if (launch == Launch::DataParallel)
    fprintf(stderr,
            "  --trace FILE      write a Chrome trace of the run (opens in Perfetto);\n"
            "                    rank r > 0 writes FILE.rank<r>\n"
            "  --quiet           print no step lines and no summary\n"
            "A program compiled for W ranks (--dp=W) runs as mpirun -np W %s ...\n",
            argv0);
  else
    fprintf(stderr,
            "  --trace FILE      rank 0 writes the measured pipeline schedule of every\n"
            "                    rank as a Chrome trace (opens in Perfetto)\n"
            "  --quiet           print no step lines and no summary\n"
            "The data inputs are those of the stages' functions; r above is the rank's\n"
            "dp coordinate. A program compiled for --pp=P and D data-parallel ranks runs\n"
            "as mpirun -np P*D %s ...\n",
            argv0);
}

// A whole decimal number without sign, so that "1e3", "-1" or "12x" are
// refused instead of read as something else.
bool parse_unsigned(const std::string &text, uint64_t &out) {
  if (text.empty() || !std::all_of(text.begin(), text.end(),
                                   [](char c) { return c >= '0' && c <= '9'; }))
    return false;
  errno = 0;
  char *end = nullptr;
  unsigned long long value = std::strtoull(text.c_str(), &end, 10);
  if (errno == ERANGE || *end) return false;
  out = value;
  return true;
}

}  // namespace

bool parse_train(int argc, char **argv, TrainOptions &options, Launch launch) {
  bool has_steps = false;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    auto value = [&](std::string &out) {
      if (i + 1 >= argc) throw Error("option " + arg + " needs a value");
      out = argv[++i];
    };
    std::string text;
    uint64_t number = 0;
    if (arg == "--data") value(options.data);
    else if (arg == "--log-json") value(options.log_json);
    else if (arg == "--save-onnx") value(options.save_onnx);
    else if (arg == "--weights") value(options.weights);
    else if (arg == "--nvme-path") value(options.nvme_path);
    else if (arg == "--save-dir") value(options.save_dir);
    else if (arg == "--resume") value(options.resume);
    else if (arg == "--save-interval" || arg == "--keep") {
      value(text);
      if (!parse_unsigned(text, number) || number < 1 ||
          number > static_cast<uint64_t>(INT64_MAX))
        throw Error(arg + " expects a positive integer, got '" + text + "'");
      (arg == "--keep" ? options.keep : options.save_interval) = static_cast<int64_t>(number);
    }
    else if (arg == "--save-staging-limit") {
      value(text);
      if (!parse_unsigned(text, number) || number > static_cast<uint64_t>(INT64_MAX))
        throw Error("--save-staging-limit expects a number of bytes, got '" + text + "'");
      options.save_staging_limit = static_cast<int64_t>(number);
    }
    else if (arg == "--sync-save") options.sync_save = true;
    else if (arg == "--on-nonfinite") {
      value(text);
      if (text != "stop" && text != "skip")
        throw Error("--on-nonfinite expects stop or skip, got '" + text + "'");
      options.skip_nonfinite = text == "skip";
      options.nonfinite_given = true;
    }
    else if (arg == "--trace") value(options.trace);
    else if (arg == "--external-data") options.external_data = true;
    else if (arg == "--quiet") options.quiet = true;
    else if (arg == "--steps") {
      value(text);
      if (!parse_unsigned(text, number) || number < 1 ||
          number > static_cast<uint64_t>(INT64_MAX))
        throw Error("--steps expects a positive integer, got '" + text + "'");
      options.steps = static_cast<int64_t>(number);
      has_steps = true;
    } else if (arg == "--seed") {
      value(text);
      if (!parse_unsigned(text, number) || number > 0xffffffffull)
        throw Error("--seed expects an integer in [0, 2^32), got '" + text + "'");
      options.seed = number;
      options.seed_given = true;
    } else if (arg == "--threads") {
      value(text);
      if (!parse_unsigned(text, number) || number < 1 || number > 4096)
        throw Error("--threads expects a positive integer, got '" + text + "'");
      options.threads = static_cast<int>(number);
    } else if (arg == "--help" || arg == "-h") {
      train_usage(argv[0], launch);
      return false;
    } else {
      throw Error("unknown option '" + arg + "' (see --help)");
    }
  }
  if (options.data.empty() || !has_steps)
    throw Error("--data and --steps are required (see --help)");
  if ((options.save_interval > 0 || options.keep > 0 || options.sync_save ||
       options.save_staging_limit >= 0) &&
      options.save_dir.empty())
    throw Error("--save-interval, --keep, --sync-save and --save-staging-limit need --save-dir DIR");
  if (options.external_data && options.save_onnx.empty())
    throw Error("--external-data only applies to --save-onnx FILE");
  return true;
}

}  // namespace runner
}  // namespace dsrt

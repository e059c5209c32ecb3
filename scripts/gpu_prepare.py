#!/usr/bin/env python3
"""The half of the GPU check that needs dsopt (scripts/gpu-check.sh --prepare).

  gpu_prepare.py --dsopt DSOPT --out DIR [--work W] [--only MODELS] [--steps N]
                 [--no-bench] [--bench-size 124m|tiny] [--no-kernel-cases] [--limit-mib M]
                 [--variants-model M]

Runs where dsopt is built (LLVM/MLIR 22) and writes DIR, everything the
device step (gpu-check.sh --device DIR OUT) needs on a machine with a GPU
and the CUDA toolkit but no dsopt:

  DIR/programs/NAME/   each cuda program's source tree (dsopt --target cuda
                       --sources-only: src/*.cu, src/CMakeLists.txt,
                       plan.json), built there against a standalone libdsrt
  DIR/models/          the zoo's .onnx files: the programs read their
                       weights from them (--weights)
  DIR/data/NAME/       each training program's data, each forward
                       program's inputs
  DIR/ref/STAGE/NAME/  the cpu programs' results, run here (log.jsonl, or
                       outputs/*.npy), which the cuda runs must match
  DIR/kernel-cases.tar.xz  runtime/tests' kernel cases (make_cases.py,
                       PyTorch), packed; left out when DIR would not fit
                       a device call (the device half then runs
                       make_cases.py itself, with PyTorch there)
  DIR/gtest/           GoogleTest's sources, to build the kernel tests
  DIR/bench/           GPT-2 124M's graph (weights regenerated there)
  DIR/manifest.json    what to build, run and compare, stage by stage

The cpu references are checked against PyTorch here on the way
(check_zoo_train.py --forward). DIR and the checkout's files that travel
with it (tracked, and untracked but not ignored) must stay under
--limit-mib (64 MiB, what a device call carries): the sizes are printed,
and more is an error. Exits 1 on any failure.
"""
import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ORACLES = ROOT / "test" / "oracles"
MODELS = ["gpt2", "llama", "bert", "mlp", "cnn"]
CONFIG = "adamw-gas1"
# The step whose checkpoint the checkpoint stage saves and resumes.
CHECKPOINT_STEP = 2


def log(message: str) -> None:
    print(f"gpu-prepare: {message}", flush=True)


def run(command, **kwargs) -> subprocess.CompletedProcess:
    """Runs `command`; on failure raises with its last output lines."""
    done = subprocess.run([str(c) for c in command], capture_output=True, text=True, **kwargs)
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
        raise RuntimeError(f"{' '.join(shlex.quote(str(c)) for c in command)} "
                           f"failed (exit {done.returncode}):\n{tail}")
    return done


def twin(argv) -> int:
    """`twin DSOPT PROGRAMS -- ARGS...`: runs `DSOPT ARGS` (the cpu build a
    zoo oracle asked for), then the same command for the cuda target with
    --sources-only, its -o PATH replaced by PROGRAMS/<case>, the case being
    the name of PATH's parent (the oracle's case directory)."""
    dsopt, programs, sep, *args = argv
    assert sep == "--", "twin DSOPT PROGRAMS -- ARGS"
    done = subprocess.run(shlex.split(dsopt) + args)
    if done.returncode != 0 or "-o" not in args:
        return done.returncode
    at = args.index("-o") + 1
    case = Path(args[at]).parent.name
    cuda = list(args)
    cuda[at] = str(Path(programs) / case)
    shutil.rmtree(cuda[at], ignore_errors=True)
    return subprocess.run(shlex.split(dsopt) + cuda + ["--target", "cuda", "--sources-only"]).returncode


class Prep:
    def __init__(self, args):
        self.args = args
        self.out = args.out
        self.work = args.work
        self.dsopt = shlex.split(args.dsopt)
        self.programs = []
        # The kernel cases: "packed" (kernel-cases.tar.xz), "generate" (the
        # device half writes them) or False (--no-kernel-cases).
        self.cases = False

    def wants(self, stage: str) -> bool:
        return not self.args.stages or stage in self.args.stages.split(",")

    def add(self, name, stage, exe, run_args, compare=None, **extra):
        """One program for the device step: DIR/programs/NAME built, its
        `exe` run with `run_args` ({prep}: DIR, {out}: its own output
        directory there), compared as `compare` says."""
        assert (self.out / "programs" / name / "src" / "CMakeLists.txt").exists(), name
        self.programs.append({"name": name, "stage": stage, "exe": exe, "args": run_args,
                              "compare": compare, **extra})

    def copy_data(self, source: Path, name: str) -> str:
        target = self.out / "data" / name
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(source, target)
        return "{prep}/data/" + name

    def cuda_sources(self, model: Path, name: str, flags) -> None:
        target = self.out / "programs" / name
        shutil.rmtree(target, ignore_errors=True)
        run([*self.dsopt, model, *flags, "--target", "cuda", "--sources-only", "-o", target])

    def train_args(self, data: str, steps: int):
        return ["--data", data, "--steps", str(steps), "--weights", "{prep}/models",
                "--log-json", "{out}/log.jsonl"]

    # The zoo: forward and 20 training steps of every model, fp32 and bf16.
    def zoo(self) -> None:
        zoo = self.work / "zoo"
        if not (zoo / "zoo.json").exists():
            log("exporting the zoo")
            run([sys.executable, ORACLES / "export_zoo.py", "--out", zoo])
        entries = {e["name"]: e for e in json.loads((zoo / "zoo.json").read_text())}
        models = [m for m in self.args.only.split(",") if m] or MODELS
        missing = [m for m in models if m not in entries]
        if missing:
            raise RuntimeError(f"--only: {', '.join(missing)} not in the zoo ({', '.join(entries)})")
        (self.out / "models").mkdir(parents=True, exist_ok=True)
        for m in models:
            shutil.copy(zoo / entries[m]["file"], self.out / "models")
        files = [entries[m]["file"] for m in models]

        # fp32: the oracle compiles each case for the cpu (and its twin for
        # cuda), runs forward and training and checks both against PyTorch.
        log(f"cpu references of {', '.join(models)} ({self.args.steps} steps), checked against PyTorch")
        twin_cmd = shlex.join([sys.executable, str(Path(__file__).resolve()), "twin",
                               shlex.join(self.dsopt), str(self.out / "programs"), "--"])
        train_work = self.work / "train"
        done = subprocess.run([sys.executable, ORACLES / "check_zoo_train.py", "--zoo", zoo,
                               "--work", train_work, "--dsopt", twin_cmd, "--only", ",".join(files),
                               "--configs", CONFIG, "--steps", str(self.args.steps), "--forward",
                               "--jobs", str(self.args.jobs)], text=True)
        if done.returncode != 0:
            raise RuntimeError("check_zoo_train.py failed: the cpu programs do not match PyTorch")
        for m, file in zip(models, files):
            case = f"{Path(file).stem}-{CONFIG}"
            work = train_work / case
            data = self.copy_data(work / "data", case)
            shutil.copy(work / "ds_config.json", self.out / "data" / case)  # how it was built
            ref = self.out / "ref" / "train" / case
            ref.mkdir(parents=True, exist_ok=True)
            shutil.copy(work / "log.jsonl", ref)
            if self.wants("train"):
                self.add(case, "train", "train", self.train_args(data, self.args.steps),
                         {"kind": "train", "rtol": 1e-4})
            if self.wants("bf16"):
                self.bf16(zoo / file, case, work, data)
            self.variants(m, zoo / file, case, work / "ds_config.json", data)
            # The forward program of the same build, on the export's inputs.
            if not self.wants("forward"):
                continue
            inputs = self.copy_data(work / "forward" / "inputs", case + "-inputs")
            shutil.copytree(work / "forward" / "outputs", self.out / "ref" / "forward" / case / "outputs",
                            dirs_exist_ok=True)
            self.add(case, "forward", "run",
                     ["--inputs", inputs, "--outputs", "{out}/outputs", "--weights", "{prep}/models"],
                     {"kind": "forward", "rtol": 1e-4})

    def bf16(self, model: Path, case: str, work: Path, data: str) -> None:
        """The oracle's case `work` in bf16, the cpu program run here for
        reference."""
        bf16 = f"{case}-bf16"
        cpu = self.work / "bf16" / bf16
        shutil.rmtree(cpu, ignore_errors=True)
        flags = ["--config", work / "ds_config.json", "--precision", "bf16"]
        run([*self.dsopt, model, *flags, "-o", cpu / "program"])
        ref = self.out / "ref" / "bf16" / bf16
        ref.mkdir(parents=True, exist_ok=True)
        run([cpu / "program" / "train", "--data", work / "data", "--steps", self.args.steps,
             "--log-json", ref / "log.jsonl", "--quiet"])
        self.cuda_sources(model, bf16, flags)
        self.add(bf16, "bf16", "train", self.train_args(data, self.args.steps),
                 {"kind": "train", "rtol": 2e-2})

    def variants(self, model, path, case, config, data) -> None:
        """ZeRO-3 and offload (gpt2, or --variants-model's) against the
        plain run's log; its checkpoints (the plain program saving and
        resuming, and resuming the cpu program's); mlp's 2-rank program on
        one GPU (refused there)."""
        plain = "{prep}/ref/train/" + case + "/log.jsonl"
        if model == self.args.variants_model and self.wants("checkpoint"):
            # The cpu program's checkpoint after step CHECKPOINT_STEP of the
            # same run as the plain log (its weights where the oracle left
            # them), which the cuda program resumes on the device.
            cpu = self.work / "train" / case / "program" / "train"
            saved = self.work / "checkpoint" / case
            shutil.rmtree(saved, ignore_errors=True)
            steps = min(CHECKPOINT_STEP, self.args.steps)
            run([cpu, "--data", self.work / "train" / case / "data", "--steps", steps,
                 "--save-dir", saved, "--quiet"])
            target = self.out / "ckpt" / case
            shutil.rmtree(target, ignore_errors=True)
            shutil.copytree(saved / f"step_{steps}", target / f"step_{steps}")
            self.add(case, "checkpoint", "train", self.train_args(data, self.args.steps), None,
                     checkpoint={"step": steps, "cpu": "{prep}/ckpt/" + f"{case}/step_{steps}",
                                 "ref": plain, "rtol": 1e-4})
        if model == self.args.variants_model and (self.wants("zero3") or self.wants("offload")):
            # NCCL_DEBUG=VERSION: NCCL prints its version when the program's
            # world transport initializes it, which shows the run went through NCCL.
            nccl = {"env": {"NCCL_DEBUG": "VERSION"}, "expect": "NCCL version"}
            # ZeRO-3's parameter offload with every trained parameter in
            # pinned host memory (a persistence threshold of 0): each read
            # fetched to the device on the communication stream ahead of
            # its op (offload_param's buffer_count), one GPU's program whose
            # communication overlaps compute by design (the trace stage
            # requires it).
            param_config = self.work / f"{case}-offload-param.json"
            offload_param = json.loads(config.read_text())
            offload_param["zero_optimization"] = {
                **offload_param.get("zero_optimization", {}), "stage": 3,
                "stage3_param_persistence_threshold": 0, "offload_param": {"device": "cpu"}}
            param_config.write_text(json.dumps(offload_param, indent=2) + "\n")
            for stage, name, flags, extra in (
                    ("zero3", f"{case}-zero3", ["--config", config, "--zero=3"], nccl),
                    ("offload", f"{case}-offload", ["--config", config, "--offload-optimizer=cpu"], {}),
                    ("offload", f"{case}-offload-param", ["--config", param_config], {})):
                if not self.wants(stage):
                    continue
                self.cuda_sources(path, name, flags)
                self.add(name, stage, "train", self.train_args(data, self.args.steps),
                         {"kind": "train", "rtol": 1e-4, "ref": plain}, **extra)
        if model == "mlp" and self.wants("ranks2"):
            # The same micro-batch on each of 2 ranks: a global batch of
            # twice the data's, each batch repeated.
            import numpy as np
            dp2 = json.loads(config.read_text())
            dp2["train_batch_size"] = 2 * dp2["train_batch_size"]
            name = f"{case}-dp2-zero3"
            dp2_config = self.work / f"{name}.json"
            dp2_config.write_text(json.dumps(dp2, indent=2) + "\n")
            target = self.out / "data" / name
            target.mkdir(parents=True, exist_ok=True)
            for array in (self.out / "data" / case).glob("*.npy"):
                np.save(target / array.name, np.concatenate([np.load(array)] * 2, axis=1))
            self.cuda_sources(path, name, ["--config", dp2_config, "--dp=2", "--zero=3"])
            self.add(name, "ranks2", "train", ["--data", "{prep}/data/" + name, "--steps", "2",
                                                "--weights", "{prep}/models"], None, ranks=2)

    def kernel_cases(self) -> None:
        """The cases, packed: their directories of .npy files, about 58 MiB,
        are about 45 as kernel-cases.tar.xz (the device half unpacks it). main()
        leaves them out when DIR would not fit a device call: the manifest
        then says "generate"."""
        target = self.work / "kernel-cases"
        shutil.rmtree(target, ignore_errors=True)
        log("kernel cases (runtime/tests/make_cases.py)")
        run([sys.executable, ROOT / "runtime" / "tests" / "make_cases.py", "--out", target])
        packed = self.out / "kernel-cases.tar.xz"
        subprocess.run(["tar", "-C", self.work, "-cJf", packed, "kernel-cases"], check=True,
                       env={**os.environ, "XZ_OPT": "-6 -T0"})
        shutil.rmtree(target)
        self.cases = "packed"

    def gtest(self) -> None:
        source = Path(self.args.gtest_source)
        if not (source / "CMakeLists.txt").exists():
            raise RuntimeError(f"no GoogleTest sources at {source} (install googletest or libgtest-dev, "
                               "or pass --gtest-source DIR)")
        shutil.rmtree(self.out / "gtest", ignore_errors=True)
        shutil.copytree(source, self.out / "gtest",
                        ignore=shutil.ignore_patterns("docs", "test", "samples", "*.md"))

    def bench(self) -> None:
        """GPT-2 124M in bf16 at the largest micro-batch of gpu_bench.SIZES'
        list whose planned device memory fits 90% of the GPU
        (--gpu-memory-gib), or at --bench-batch's if it fits. The graph travels
        (its weights file is sparse here); the device step writes random
        weights at the same offsets with the same generator. --bench-size
        tiny: a 2-layer GPT of width 64 instead (gpu_bench.SIZES), which
        the CUDA emulation trains in seconds."""
        sys.path.insert(0, str(ROOT / "bench"))
        import gpu_bench
        bench = self.out / "bench"
        shutil.rmtree(bench, ignore_errors=True)
        bench.mkdir(parents=True)
        memory = self.args.gpu_memory_gib * 2**30
        size = self.args.bench_size
        title = gpu_bench.SIZES[size]["title"]
        gelu = self.args.bench_gelu
        if gelu != "erf":
            title += f" ({gelu} GELU)"
        batches = gpu_bench.SIZES[size]["batches"]
        chosen = self.args.bench_batch is not None
        for batch in [self.args.bench_batch] if chosen else batches:
            generator = gpu_bench.generator_args(batch, size, gelu)
            model = self.work / "bench" / f"gpt2-{size}-b{batch}.onnx"
            model.parent.mkdir(parents=True, exist_ok=True)
            run([sys.executable, ORACLES / "gen_gpt.py", *generator, "--out", model])
            plan = json.loads(run([*self.dsopt, model, "--target", "cuda", "--precision", "bf16",
                                   *gpu_bench.DSOPT_FLAGS, "--emit=plan"]).stdout)
            need = gpu_bench.planned_device_bytes(plan)
            log(f"{title} micro-batch {batch}: {need / 2**30:.1f} GiB planned")
            if need <= gpu_bench.FIT * memory:
                break
            model.unlink()
            Path(str(model) + ".data").unlink(missing_ok=True)
        else:
            raise RuntimeError(f"{title}: --bench-batch {batch} plans more than 90% of "
                               f"{self.args.gpu_memory_gib:g} GiB" if chosen else
                               f"{title}: not even micro-batch 1 fits")
        shutil.copy(model, bench / model.name)
        self.cuda_sources(model, f"bench-gpt2-{size}", ["--precision", "bf16", *gpu_bench.DSOPT_FLAGS])
        self.add(f"bench-gpt2-{size}", "bench", "train", [], None,
                 bench={"model": model.name, "micro_batch": batch, "planned_device_bytes": need,
                        "generator": generator, "title": title,
                        "gpu_memory_bytes": int(memory), "batches": batches,
                        "chosen_batch": chosen})

    def write(self) -> None:
        manifest = {
            "created_by": "scripts/gpu-check.sh --prepare",
            "commit": subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                                     capture_output=True, text=True).stdout.strip() or "?",
            "steps": self.args.steps,
            "kernel_cases": self.cases,
            "gtest": (self.out / "gtest").is_dir(),
            "programs": self.programs,
        }
        (self.out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")


def size_of(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def tree_size() -> int:
    """The bytes of the checkout's files that travel with DIR: tracked, and
    untracked but not ignored (0 outside a git checkout)."""
    listed = subprocess.run(["git", "-C", ROOT, "ls-files", "-z", "--cached", "--others",
                             "--exclude-standard"], capture_output=True)
    if listed.returncode != 0:
        return 0
    files = (ROOT / name for name in listed.stdout.decode().split("\0") if name)
    return sum(f.stat().st_size for f in files if f.is_file())


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "twin":
        return twin(sys.argv[2:])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsopt", required=True, help="the dsopt command (split like a shell would)")
    parser.add_argument("--out", required=True, type=Path, help="the directory to write (replaced)")
    parser.add_argument("--work", type=Path, help="scratch directory (default: a temporary one)")
    parser.add_argument("--only", default="", help="comma-separated zoo models (default: all)")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--stages", default="",
                        help="comma-separated: only these stages' programs (forward, train, bf16, "
                             "zero3, offload, checkpoint, ranks2; default: all)")
    parser.add_argument("--jobs", type=int, default=2, help="oracle cases at once")
    parser.add_argument("--variants-model", default="gpt2",
                        help="the zoo model of the zero3 and offload stages (default gpt2)")
    parser.add_argument("--no-bench", action="store_true", help="leave out the GPT-2 124M benchmark")
    parser.add_argument("--bench-size", choices=["124m", "tiny"], default="124m",
                        help="the benchmark's model: GPT-2 124M (the GPU's), or a tiny GPT "
                             "(the CUDA emulation's rehearsal)")
    parser.add_argument("--bench-batch", type=int, default=None,
                        help="the benchmark's micro-batch (default: the largest of gpu_bench.py's "
                             "list whose plan fits 90%% of --gpu-memory-gib; 64 is llm.c's per GPU)")
    parser.add_argument("--bench-gelu", choices=["erf", "tanh"], default="tanh",
                        help="the benchmark GPT's GELU: tanh, GPT-2's own (default), or the exact erf")
    parser.add_argument("--no-kernel-cases", action="store_true", help="leave out the kernel cases")
    parser.add_argument("--gtest-source", default="/usr/src/googletest")
    parser.add_argument("--gpu-memory-gib", type=float, default=139.0,
                        help="the device's memory, for the benchmark's micro-batch (default: an H200's)")
    parser.add_argument("--limit-mib", type=float, default=64.0)
    args = parser.parse_args()
    if args.out.exists():
        shutil.rmtree(args.out)
    args.out.mkdir(parents=True)
    args.out = args.out.resolve()
    scratch = None
    if args.work is None:
        scratch = tempfile.TemporaryDirectory(prefix="gpu-prepare-")
        args.work = Path(scratch.name)
    args.work = args.work.resolve()
    prep = Prep(args)
    try:
        prep.zoo()
        if not args.no_kernel_cases:
            prep.kernel_cases()
        prep.gtest()
        if not args.no_bench:
            prep.bench()
        tree = tree_size()
        packed = args.out / "kernel-cases.tar.xz"
        if packed.is_file() and size_of(args.out) + tree > args.limit_mib * 2**20:
            # Over what a device call carries: the device half writes the
            # cases itself (make_cases.py, with PyTorch there), in seconds.
            log(f"kernel cases left out ({packed.stat().st_size / 2**20:.1f} MiB packed): "
                "the device half generates them (runtime/tests/make_cases.py, needs PyTorch)")
            packed.unlink()
            prep.cases = "generate"
        prep.write()
    except RuntimeError as e:
        print(f"gpu-prepare: error: {e}", file=sys.stderr)
        return 1
    size = size_of(args.out)
    log(f"{args.out}: {len(prep.programs)} programs, {size / 2**20:.1f} MiB; with the checkout's "
        f"{tree / 2**20:.1f} MiB, {(size + tree) / 2**20:.1f} MiB (limit {args.limit_mib:.0f} MiB)")
    if size + tree > args.limit_mib * 2**20:
        biggest = sorted(((size_of(p) if p.is_dir() else p.stat().st_size, p.name)
                          for p in args.out.iterdir()), reverse=True)[:4]
        print(f"gpu-prepare: error: {args.out} is {size / 2**20:.1f} MiB, and with the checkout's "
              f"{tree / 2**20:.1f} MiB over the {args.limit_mib:.0f} MiB a device call carries; largest: "
              + ", ".join(f"{n} {s / 2**20:.1f} MiB" for s, n in biggest), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

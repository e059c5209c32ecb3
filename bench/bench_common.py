"""What the multi-rank CPU benchmarks (dp_bench, pipeline_bench, tp_bench)
share: the launcher, the GPT-shaped model with real weights, and the JSON
log's split into steps and summary."""
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MPIRUN = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none"]


def gen_gpt(out: Path, layers: int, width: int, heads: int, vocab: int, seq: int, micro: int) -> None:
    """A GPT training graph with materialised random weights
    (test/oracles/gen_gpt.py --materialize)."""
    subprocess.run([sys.executable, str(ROOT / "test" / "oracles" / "gen_gpt.py"), "--layers", str(layers),
                    "--d-model", str(width), "--heads", str(heads), "--vocab", str(vocab), "--seq", str(seq),
                    "--batch", str(micro), "--materialize", "--out", str(out)],
                   check=True, capture_output=True)


def read_log(path: Path):
    """A --log-json file's step records and its summary record (or None)."""
    records = [json.loads(line) for line in path.read_text().splitlines()]
    return [r for r in records if not r.get("summary")], next((r for r in records if r.get("summary")), None)

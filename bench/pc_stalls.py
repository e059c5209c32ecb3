#!/usr/bin/env python3
"""The warp stalls of a run, by kernel: bench/pc_sampling.cpp's JSON as a
markdown table.

  pc_stalls.py STALLS_JSON [--out STALLS_MD] [--top 12] [--reasons 5]
               [--always attention]

One row per kernel, the TOP kernels with the most samples and every kernel
whose name contains an --always word (the fused attention kernels) even
below them: its samples, its share of all the samples, and its REASONS
commonest reasons, each with its share of the kernel's samples. Then the
hottest instructions (PC offsets) of the --always kernels with the reason
most of their samples had.

Exit status: 0 with the table written; 0 and a line starting with "SKIP"
when CUPTI said PC sampling is not available on this machine (the JSON's
status "unsupported": the GPU, driver or permissions do not allow it);
1 when the sampling failed or sampled nothing (the reason printed).
"""
import argparse
import json
import sys
from pathlib import Path

# CUPTI's names of the reasons: smsp__pcsamp_warps_issue_stalled_<reason>.
PREFIXES = ("smsp__pcsamp_warps_issue_stalled_", "smsp__pcsamp_")
NOT_ISSUED = "_not_issued"


def reason_name(reason: str) -> str:
    for prefix in PREFIXES:
        if reason.startswith(prefix):
            return reason[len(prefix):]
    return reason


def kernel_name(name: str) -> str:
    """The demangled name without its return type and parameter list:
    `void ns::(anonymous namespace)::k<64, true>(float const*, int)` ->
    `ns::(anonymous namespace)::k<64, true>`."""
    anonymous, mark = "(anonymous namespace)", "\x00"
    name = name.replace(anonymous, mark)
    depth, cut = 0, len(name)
    for i, c in enumerate(name):
        if c in "<[":
            depth += 1
        elif c in ">]":
            depth -= 1
        elif c == "(" and depth == 0 and i > 0:
            cut = i
            break
    head = name[:cut].strip()
    if head.startswith("void "):
        head = head[len("void "):]
    return head.replace(mark, anonymous).replace("|", "\\|")


def share(part: int, whole: int) -> str:
    return f"{100.0 * part / whole:.1f}%" if whole else "-"


def table(data: dict, top: int, reasons: int, always: list) -> str:
    kernels = sorted(data.get("kernels", []), key=lambda k: -k["samples"])
    total = sum(k["samples"] for k in kernels)
    chosen = kernels[:top]
    extra = [k for k in kernels[top:] if any(word in k["name"] for word in always)]
    period = data.get("sampling_period_log2")
    lines = [
        "## Warp stalls by kernel (CUPTI PC sampling, bench/pc_sampling.cpp)",
        "",
        f"{data.get('collection_mode', '?')} collection, a sample every "
        f"2^{period} cycles of each SM; {total:,} samples of {len(kernels)} kernels"
        f"; {data.get('dropped_samples', 0):,} dropped by the hardware"
        + ("; THE HARDWARE BUFFER OVERFLOWED (samples lost)" if data.get("hardware_buffer_full")
           else "") + ".",
        "A sample is one warp at one instruction; `selected` means it issued, every other",
        "reason is why it could not; a reason's share is of the kernel's samples.",
        "",
        "| kernel | samples | of all | " + " | ".join(f"reason {i + 1}" for i in range(reasons))
        + " |",
        "|---|---|---|" + "---|" * reasons,
    ]
    for kernel in chosen + extra:
        counted = [(r, n) for r, n in kernel["stalls"].items() if not r.endswith(NOT_ISSUED)]
        counted.sort(key=lambda item: -item[1])
        cells = [f"{reason_name(r)} {share(n, kernel['samples'])}" for r, n in counted[:reasons]]
        cells += [""] * (reasons - len(cells))
        name = kernel_name(kernel["name"])
        if kernel in extra:
            name += f" (#{kernels.index(kernel) + 1})"
        lines.append(f"| {name} | {kernel['samples']:,} | {share(kernel['samples'], total)} | "
                     + " | ".join(cells) + " |")
    hot = [k for k in chosen + extra if any(word in k["name"] for word in always) and k.get("top_pcs")]
    if hot:
        lines += ["", "Hottest instructions (PC offset in the kernel's code, share of its "
                  "samples, their commonest reason):", ""]
        for kernel in hot:
            pcs = ", ".join(f"0x{pc['pc_offset']:x} {share(pc['samples'], kernel['samples'])} "
                            f"{reason_name(pc['reason'])}" for pc in kernel["top_pcs"][:5])
            lines.append(f"- {kernel_name(kernel['name'])}: {pcs}")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("json", type=Path)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--top", type=int, default=12)
    parser.add_argument("--reasons", type=int, default=5)
    parser.add_argument("--always", action="append", default=None,
                        help="kernels whose name contains this are always listed "
                        "(default: attention)")
    args = parser.parse_args()
    always = args.always or ["attention"]
    if not args.json.is_file():
        print(f"error: no {args.json}: the sampled program wrote none (did the CUDA driver "
              "load the sampler? CUDA_INJECTION64_PATH must be an absolute path)")
        return 1
    data = json.loads(args.json.read_text())
    status = data.get("status")
    if status == "ok" and data.get("kernels"):
        report = table(data, args.top, args.reasons, always)
        if args.out:
            args.out.write_text(report)
        print(report, end="")
        return 0
    why = data.get("error") or "CUPTI reported no samples"
    if args.out:
        args.out.write_text("## Warp stalls by kernel (CUPTI PC sampling)\n\n"
                            f"Not sampled ({status}): {why}\n")
    if status == "unsupported":
        print(f"SKIP stalls: CUPTI PC sampling is not available here: {why}")
        return 0
    print(f"error: PC sampling {status}: {why}")
    return 1


if __name__ == "__main__":
    sys.exit(main())

"""The pipeline traffic a plan.json implies, from its `pipeline` section
alone: what each pp rank sends and receives in one optimizer step.

Per micro-batch, every transfer (a value going from stage a to stage b)
moves its bytes from the rank holding a to the rank holding b, one message
per value. Once per step, each tied parameter's accumulator goes from every
stage rank holding a part of its gradient to every other one, one message
each, and each sums the copies (docs/pipeline.md, "Tied parameters"). A
gradient contribution itself never crosses a stage.

A transfer that skips stages (a -> b with |a - b| > 1) is relayed: each
stage in between receives the value and sends it on, and a value read on
several later stages crosses a cut once. The transfers do not say which
values they share, so plans with such transfers are not comparable here
(planned_sends returns None).
"""
from typing import Dict, Optional


def accumulator_bytes(plan: Dict, pp: int, param: str) -> int:
    """The bytes of `param`'s gradient accumulator on stage rank `pp` (its
    dp shard under ZeRO)."""
    ranks = plan["train"]["ranks"]
    entry = next((r for r in ranks if r["rank"] == pp), ranks[0])
    for state in entry["states"]:
        if state["name"] == f"grad:{param}":
            return state["bytes"]
    raise KeyError(f"plan.json's train.ranks[{pp}] has no accumulator grad:{param}")


def planned_sends(plan: Dict) -> Optional[Dict[int, Dict[str, Dict[str, int]]]]:
    """{pp: {"send": {"sent", "calls"}, "recv": {"received", "calls"}}} for
    one step, or None when a transfer skips a stage."""
    pipeline = plan["pipeline"]
    p, m = pipeline["stages"], pipeline["microbatches"]
    out = {r: {"send": {"sent": 0, "calls": 0}, "recv": {"received": 0, "calls": 0}}
           for r in range(p)}
    for t in pipeline["transfers"]:
        if abs(t["from"] - t["to"]) != 1:
            return None
        sender, receiver = t["from"] % p, t["to"] % p
        out[sender]["send"]["sent"] += m * t["bytes"]
        out[sender]["send"]["calls"] += m * t["values"]
        out[receiver]["recv"]["received"] += m * t["bytes"]
        out[receiver]["recv"]["calls"] += m * t["values"]
    for tied in pipeline["tied_parameters"]:
        holders = sorted({s % p for s in tied["stages"]})
        for r in holders:
            size = accumulator_bytes(plan, r, tied["name"])
            others = len(holders) - 1
            out[r]["send"]["sent"] += others * size
            out[r]["send"]["calls"] += others
            out[r]["recv"]["received"] += others * size
            out[r]["recv"]["calls"] += others
    return out


def compare(plan: Dict, measured: Dict[int, Dict], steps: int = 1) -> Optional[str]:
    """What differs between planned_sends and `measured`, {world rank:
    collective_bytes} over `steps` steps (the plan's own ranks[] or a
    run's), or None."""
    planned = planned_sends(plan)
    if planned is None:
        return "a transfer skips a stage"
    for rank in plan["ranks"]:
        want = planned[rank["pp"]]
        have = measured[rank["rank"]]
        for kind, key in (("send", "sent"), ("recv", "received")):
            got = have.get(kind, {key: 0, "calls": 0})
            for field in (key, "calls"):
                if got[field] != steps * want[kind][field]:
                    return (f"rank {rank['rank']} (pp {rank['pp']}) {kind} {field}: "
                            f"{got[field]} over {steps} step(s), but the pipeline section's "
                            f"transfers and tied parameters make {want[kind][field]} per step")
    return None

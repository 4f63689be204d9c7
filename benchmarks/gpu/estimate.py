"""How long each run of the kit takes on the card, estimated before it runs, so that the
runs are ordered fastest first and a cut time budget cuts the slowest (issue 32: the one
device call must stay under 10 minutes).

The estimate of a run is, in this order:
1. its own seconds in the committed results (benchmarks/gpu-groundtruth/*.summary.json,
   each row's `seconds`: the probe and its share of the CPU work; a later file wins);
2. else the mean of the same net and phase in the other configurations there (a new
   configuration of a measured net: the plan and the runtime's switches change little);
3. else, for a net never measured, BASE + PER_GROUP x its cuDNN convolution groups: a least-
   squares line through the 46 runs of the H200 result (means over configurations): 1.5 s
   and 13 ms a group (3 cuDNN handles and streams each), worst miss 2.3 s (VGG16 TRAIN, the
   largest allocations).
A timed run (issue 33, gpu/configs.py TIMED_NETS) adds its iterations, warm-up included, at
PER_ITERATION each: GoogLeNet and ResNet-50 TRAIN b32 took 71 and 117 ms on an H200 (issue
33), a recompute plan up to 2.05x that."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

from gpu.paths import REPO

RESULTS = REPO / "benchmarks" / "gpu-groundtruth"
BASE = 1.5
PER_GROUP = 0.013
PER_ITERATION = 0.15
WARMUP = 3  # the iterations probe.cpp runs before it times (kTimeWarmup)


def committed_seconds(summaries: Iterable[Path] | None = None) -> dict[tuple[str, str, str], float]:
    """(file, phase, config) -> seconds, from the committed summaries (sorted by name: the
    later wins)."""
    found: dict[tuple[str, str, str], float] = {}
    for path in sorted(summaries if summaries is not None else RESULTS.glob("*.summary.json")):
        for row in json.loads(path.read_text())["runs"]:
            if row.get("ok") and "seconds" in row:
                found[(row["file"], row["phase"], row["config"])] = row["seconds"]
    return found


def estimated_seconds(measured: dict[tuple[str, str, str], float], file: str, phase: str, config: str, cudnn_groups: int) -> float:
    """One run's estimate (the module's docstring says how)."""
    if (file, phase, config) in measured:
        return measured[(file, phase, config)]
    same = [seconds for (f, p, _), seconds in measured.items() if (f, p) == (file, phase)]
    if same:
        return sum(same) / len(same)
    return BASE + PER_GROUP * cudnn_groups


def timed_seconds(iterations: int) -> float:
    """What timing `iterations` SGD iterations adds to a run (0 when it times none)."""
    return (WARMUP + iterations) * PER_ITERATION if iterations else 0.0

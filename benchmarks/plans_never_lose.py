"""Plans never lose (issue 22): `optimize` on every run of the ground truth
(../shared/groundtruth, at its inputs) and the siamese net (fixtures/siamese), in both
modes, with and without --share-buffers, checked against the inequalities a plan must
keep:

- ``>stock``: the plan holds more than stock Caffe;
- ``>fork``: more than the memory-multiloading fork's plan;
- ``buffers>blobs``: the --share-buffers plan holds more than the plan without it;
- ``bound>plan``: the lower bound is above the plan (no bound);
- ``gap>2%``: the plan is more than 2% above its lower bound (the bound does not count what
  the run really holds, or the plan is poor).

    python benchmarks/plans_never_lose.py [--mode cpu|gpu] [--markdown]

Prints one row per run and mode (MiB: stock, fork, plan, plan --share-buffers, their
lower bounds, the faults) and then the count of each fault per mode.  The figures are
those `optimize --json` prints as ``bytes`` (the card's in GPU mode).  Run it with another
checkout first on PYTHONPATH (``PYTHONPATH=/path/to/other/checkout``) to measure that
version: it uses only the public API.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

from caffemem.api.analyze import Options
from caffemem.api.optimize import OptimizeSettings, optimize

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
SIAMESE = REPO / "fixtures" / "siamese" / "mnist_siamese_train_test.prototxt"
FAULTS = (">stock", ">fork", "buffers>blobs", "bound>plan", "gap>2%")
MIB = 1024 * 1024


def runs() -> list[tuple[str, str, str, dict]]:
    """(label, net file, phase, inputs) of every ground-truth run Caffe accepted, then the siamese net."""
    found = []
    for path in sorted((SHARED / "groundtruth").glob("*.json")):
        document = json.loads(path.read_text())
        found += [(path.stem, str(SHARED / document["source"]), run["phase"], run["inputs"]) for run in document["runs"] if run["ok"]]
    return found + [("siamese", str(SIAMESE), phase, {}) for phase in ("TRAIN", "TEST")]


def faults(blobs: dict[str, int], buffers: dict[str, int]) -> list[str]:
    found = []
    for totals in (blobs, buffers):
        found += [fault for fault, bad in zip(FAULTS, (totals["planned"] > totals["stock"], totals["planned"] > totals["fork"])) if bad]
        if totals["lower_bound"] > totals["planned"]:
            found.append("bound>plan")
        elif totals["planned"] - totals["lower_bound"] > abs(totals["lower_bound"]) * 0.02:
            found.append("gap>2%")
    if buffers["planned"] > blobs["planned"]:
        found.append("buffers>blobs")
    return list(dict.fromkeys(found))


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=("cpu", "gpu"), action="append", help="cpu, gpu or both (default)")
    parser.add_argument("--markdown", action="store_true", help="a Markdown table")
    args = parser.parse_args(argv)
    modes = args.mode or ["cpu", "gpu"]
    counts = {mode: Counter() for mode in modes}
    header = ("run", "phase", "mode", "stock", "fork", "plan", "bound", "plan --share-buffers", "bound", "faults")
    print(("| " + " | ".join(header) + " |\n|" + "---|" * len(header)) if args.markdown else "  ".join(header))
    for label, net, phase, inputs in runs():
        for mode in modes:
            options = Options(phase=phase, inputs={name: tuple(shape) for name, shape in inputs.items()}, device=mode)
            blobs, buffers = (optimize(net, options, OptimizeSettings(share_buffers=flag)).phases[0].totals() for flag in (False, True))
            found = faults(blobs, buffers)
            counts[mode].update(found)
            counts[mode]["runs"] += 1
            counts[mode]["runs with a fault"] += bool(found)
            cells = (label, phase, mode, *(f"{figure / MIB:,.2f}" for figure in (blobs["stock"], blobs["fork"], blobs["planned"], blobs["lower_bound"], buffers["planned"], buffers["lower_bound"])), " ".join(found))
            print(("| " + " | ".join(cells) + " |") if args.markdown else "  ".join(cells), flush=True)
    print()
    for mode in modes:
        print(f"{mode}: {counts[mode]['runs with a fault']} of {counts[mode]['runs']} runs with a fault; " + ", ".join(f"{fault} {counts[mode][fault]}" for fault in FAULTS))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

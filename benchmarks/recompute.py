"""Recompute in backward (issue 23), the model's side: `optimize --recompute` on the nets the
issue names, each policy against the plan without recomputation at the same flags.

    python benchmarks/recompute.py [--markdown] [--device cpu|gpu]
    python benchmarks/recompute.py --timing    # measured against predicted seconds

One row per net and policy: the plan without recomputation (``--share-buffers``, which
``--recompute`` implies), the plan with it, their ratio, how many Forwards run again and
their FLOPs as a share of one Forward pass (a cost model from the shapes: convolutions and
inner products exactly, other layers by their outputs).  The seconds these cost, and the
saving measured in the patched Caffe, are benchmarks/runtime.py's.  The README's table
"Recompute in backward" is ``--markdown``'s output.  Each row also has the time model's
estimate (caffemem/plan/timing.py): ``time_ratio``, one iteration with the recomputation
over one without, and ``iteration_seconds``.

``--timing``: per measured run of fixtures/timing/measured.json (seconds per iteration of
stock Caffe and of the recompute plan, measured in real Caffe: benchmarks/runtime.py on the
CPU, the issue's H200 runs on the card), the seconds measured and those the model predicts,
for the runtime that ran them.  Uses the public API only.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from caffemem.api.analyze import Options, parse_inputs
from caffemem.api.optimize import OptimizeSettings, optimize
from caffemem.errors import CaffememError
from caffemem.layers.registry import SpecTable
from caffemem.plan.recompute import parse_policy, time_ratio_at
from caffemem.plan.timing import DEVICES

REPO = Path(__file__).resolve().parents[1]
MODELS = REPO.parent / "shared" / "models"
MIB = 1024 * 1024
POLICIES = ("cheap", "sqrt")

# (label, net file, batch, --input values): the nets, in TRAIN.
NETS = (
    ("ResNet-50 (force_backward), batch 32", "resnet/ResNet-50-deploy.prototxt", 32, ()),
    ("GoogLeNet train_val, batch 32", "bvlc_googlenet/train_val.prototxt", 32, ("data=_,3,_,_",)),
    ("AlexNet train_val, batch 64", "bvlc_alexnet/train_val.prototxt", 64, ("data=_,3,_,_",)),
    ("recompute_resnet fixture, batch 4", str(REPO / "fixtures" / "plan" / "recompute_resnet.prototxt"), 4, ()),
)


def with_force_backward(path: Path, folder: Path) -> Path:
    """A deploy net as the issue trains it: ``force_backward: true`` after its name line."""
    text = path.read_text()
    if "force_backward" in text:
        return path
    lines = text.splitlines(keepends=True)
    at = next(i for i, line in enumerate(lines) if line.lstrip().startswith("name:")) + 1
    out = folder / path.name
    out.write_text("".join(lines[:at] + ["force_backward: true\n"] + lines[at:]))
    return out


def rows(device: str) -> list[dict]:
    found = []
    with tempfile.TemporaryDirectory() as folder:
        for label, file, batch, inputs in NETS:
            path = Path(file) if file.startswith("/") else MODELS / file
            if not path.exists():
                continue
            path = with_force_backward(path, Path(folder))
            options = Options(device=device, phase="TRAIN", batch=batch, inputs=parse_inputs(list(inputs)))
            plain = optimize(str(path), options, OptimizeSettings(share_buffers=True)).phases[0].totals()["planned"]
            for policy in POLICIES:
                try:
                    phase = optimize(str(path), options, OptimizeSettings(recompute=parse_policy(policy))).phases[0]
                except CaffememError as error:
                    found.append({"net": label, "policy": policy, "error": error.message})
                    continue
                choice = phase.recompute
                planned = phase.totals()["planned"]
                found.append(
                    {
                        "net": label,
                        "policy": policy,
                        "plain": plain,
                        "planned": planned,
                        "ratio": planned / plain,
                        "forwards": len(choice.recomputed),
                        "extra_flops_percent": 100.0 * choice.extra_flops / max(choice.forward_flops, 1),
                        "time_ratio": choice.time_ratio,
                        "iteration_seconds": choice.iteration_seconds,
                    }
                )
    return found


def markdown(found: list[dict]) -> str:
    lines = ["| net (TRAIN, CPU mode) | policy | plan without | plan with | ratio | Forwards run again | extra Forward FLOPs |", "|---|---|---:|---:|---:|---:|---:|"]
    for row in found:
        if "error" in row:
            lines.append(f"| {row['net']} | {row['policy']} | | | | | {row['error']} |")
            continue
        lines.append(
            f"| {row['net']} | {row['policy']} | {row['plain'] / MIB:,.1f} MiB | {row['planned'] / MIB:,.1f} MiB | {row['ratio']:.2f}× | {row['forwards']} | {row['extra_flops_percent']:.1f}% |"
        )
    return "\n".join(lines)


MEASURED = REPO / "fixtures" / "timing" / "measured.json"
# The nets of fixtures/timing/measured.json, as each device's runs built them.
TIMED_NETS = {
    ("gpu", "googlenet"): ("bvlc_googlenet/train_val.prototxt", ("data=_,3,_,_",)),
    ("gpu", "resnet50"): ("resnet/ResNet-50-deploy.prototxt", ()),
    ("cpu", "googlenet"): ("bvlc_googlenet/train_val.prototxt", ("data=_,3,_,_",)),
    ("cpu", "alexnet"): ("bvlc_alexnet/train_val.prototxt", ("data=_,3,_,_",)),
}


def timing_rows() -> list[dict]:
    """Per measured run: the seconds per iteration measured (stock, with the recomputation)
    and those the time model predicts for the runtime that ran it."""
    from dataclasses import replace

    measured = json.loads(MEASURED.read_text())
    found = []
    with tempfile.TemporaryDirectory() as folder:
        for device in ("cpu", "gpu"):
            prices = replace(DEVICES[device], runtime_skips_reshape=measured[device]["runtime_skips_reshape"])
            for run in measured[device]["runs"]:
                if (device, run["net"]) not in TIMED_NETS:
                    continue  # the generated BatchNorm net lives in tests/runtime/runtime_nets.py
                file, inputs = TIMED_NETS[(device, run["net"])]
                path = with_force_backward(MODELS / file, Path(folder))
                options = Options(device=device, phase="TRAIN", batch=run["batch"], inputs=parse_inputs(list(inputs)))
                choice = optimize(str(path), options, OptimizeSettings(recompute=parse_policy(run["policy"]))).phases[0].recompute
                predicted = time_ratio_at(choice, SpecTable(), prices)
                found.append(
                    {
                        "device": device,
                        "net": run["net"],
                        "batch": run["batch"],
                        "policy": run["policy"],
                        "measured_stock": run["stock_seconds"],
                        "measured": run["stock_seconds"] * run["ratio"],
                        "predicted_stock": choice.iteration_seconds,
                        "predicted": choice.iteration_seconds * predicted,
                        "measured_ratio": run["ratio"],
                        "predicted_ratio": predicted,
                        "predicted_ratio_now": choice.time_ratio,
                    }
                )
    return found


def timing_markdown(found: list[dict]) -> str:
    lines = [
        "| device | net (TRAIN) | batch | policy | stock s/iter measured | predicted | recompute s/iter measured | predicted | ratio measured | predicted | off | predicted with this runtime |",
        "|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in found:
        lines.append(
            f"| {r['device']} | {r['net']} | {r['batch']} | {r['policy']} | {r['measured_stock']:.4f} | {r['predicted_stock']:.4f} | {r['measured']:.4f} | {r['predicted']:.4f} "
            f"| {r['measured_ratio']:.2f}× | {r['predicted_ratio']:.2f}× | {r['predicted_ratio'] / r['measured_ratio'] - 1:+.0%} | {r['predicted_ratio_now']:.2f}× |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--markdown", action="store_true", help="print docs/recompute.md's table")
    parser.add_argument("--device", choices=("cpu", "gpu"), default="cpu")
    parser.add_argument("--timing", action="store_true", help="measured (fixtures/timing/measured.json) against predicted seconds")
    args = parser.parse_args(argv)
    if args.timing:
        print(timing_markdown(timing_rows()))
        return 0
    found = rows(args.device)
    if args.markdown:
        print(markdown(found))
        return 0
    for row in found:
        print(row)
    return 0


if __name__ == "__main__":
    sys.exit(main())

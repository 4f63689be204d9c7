"""Recompute in backward (issue 23), the model's side: `optimize --recompute` on the nets the
issue names, each policy against the plan without recomputation at the same flags.

    python benchmarks/recompute.py [--markdown] [--device cpu|gpu]

One row per net and policy: the plan without recomputation (``--share-buffers``, which
``--recompute`` implies), the plan with it, their ratio, how many Forwards run again and
their FLOPs as a share of one Forward pass (a cost model from the shapes: convolutions and
inner products exactly, other layers by their outputs).  The seconds these cost, and the
saving measured in the patched Caffe, are benchmarks/runtime.py's.  The README's table
"Recompute in backward" is ``--markdown``'s output.  Uses the public API only.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from caffemem.api.analyze import Options, parse_inputs
from caffemem.api.optimize import OptimizeSettings, optimize
from caffemem.errors import CaffememError
from caffemem.plan.recompute import parse_policy

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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--markdown", action="store_true", help="print docs/recompute.md's table")
    parser.add_argument("--device", choices=("cpu", "gpu"), default="cpu")
    args = parser.parse_args(argv)
    found = rows(args.device)
    if args.markdown:
        print(markdown(found))
        return 0
    for row in found:
        print(row)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Time and peak memory of `caffemem analyze` and `caffemem optimize` on generated nets
of 1,000 to 100,000 layers (chains, wide DAGs, Inception-style fan-out/fan-in) and on
ResNet-152, each command a fresh process, as a user runs it.

    python benchmarks/scale.py                      # 1k and 10k layers, ResNet-152
    python benchmarks/scale.py --sizes 1000 10000 100000 --repeat 1
    python benchmarks/scale.py --recompute --sizes 1000 5000 20000 --repeat 1

Prints a Markdown table (docs/benchmarks.md) and the machine it ran on.
The last column is the growth of the time per layer against the smallest size, divided by
what n log n allows (log n / log n₀): 1.00 or less means the command grows no faster than
n log n.  These are figures of one run on one machine; no test asserts on them.

``--recompute`` (issue 33) times the recompute policies instead: `optimize --recompute
sqrt|cheap|budget=…` (the budget halfway between the plan with `sqrt` and without
recomputation) and `fit --recompute sqrt`, each against plain `optimize` of the same net
(the ratio column), on the generated nets and on ResNet-152; and `fit --recompute sqrt` on
GoogLeNet's solver (../shared/models, where present) against plain `fit` of it.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
GOOGLENET_SOLVER = REPO.parent / "shared" / "models" / "bvlc_googlenet" / "solver.prototxt"
FIT_MEMORY = "12GiB"  # the card fit --recompute plans for
sys.path.insert(0, str(REPO / "fixtures"))
import generate  # noqa: E402  (fixtures/generate.py)

SHAPES = ("chain", "wide", "inception")


@dataclass(frozen=True)
class Measure:
    seconds: float  # wall time of the whole process, imports included
    peak_mib: float  # its peak resident memory
    output: str = ""  # what it printed, where asked


# `caffemem ARGS...` in a fresh interpreter that reports its own peak resident memory as it
# exits: the kernel's high-water mark of this process image (VmHWM), which, unlike
# getrusage's, does not count the parent's memory inherited through fork.
_MEASURED_CLI = """
import atexit, sys
def report():
    with open("/proc/self/status") as status:
        peak = next(line.split()[1] for line in status if line.startswith("VmHWM"))
    sys.stderr.write(f"\\ncaffemem-peak-kib: {peak}\\n")
atexit.register(report)
sys.argv[0] = "caffemem"
from caffemem.cli import main
main()
"""


# A user's caffemem runs from its bytecode (pip compiles it at install); on a machine that
# sets PYTHONDONTWRITEBYTECODE (this project's does) every measured process would compile
# the whole package again first: about 0.9 s of imports instead of 0.35 s.
CHILD_ENV = {name: value for name, value in os.environ.items() if name != "PYTHONDONTWRITEBYTECODE"}


def warm_bytecode() -> None:
    """Compile the package once, before anything is timed, as an installation does."""
    subprocess.run([sys.executable, "-c", "import caffemem.cli"], env=CHILD_ENV, check=True)


def run_command(args: list[str], keep_output: bool = False) -> Measure:
    """One `caffemem ...` process: its wall time and peak resident memory (and, asked, what
    it printed).  Exit 1 is a finding (`fit`: nothing fits the card), timed as any run."""
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", _MEASURED_CLI, *args], stdout=subprocess.PIPE if keep_output else subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=CHILD_ENV)
    seconds = time.perf_counter() - start
    if done.returncode not in (0, 1):
        raise RuntimeError(f"caffemem {' '.join(args)} failed: {done.stderr[-500:]}")
    peak_kib = int(done.stderr.rsplit("caffemem-peak-kib:", 1)[1].split()[0])
    return Measure(seconds, peak_kib / 1024, done.stdout if keep_output else "")


def best_of(args: list[str], repeat: int, keep_output: bool = False) -> Measure:
    runs = [run_command(args, keep_output) for _ in range(repeat)]
    return min(runs, key=lambda m: m.seconds)


def recompute_rows(name: str, path: Path, layers: int, repeat: int, folder: Path, solver: bool = False, fit_too: bool = True) -> None:
    """The recompute policies on one net (or ``fit`` alone on a solver), each against plain
    ``optimize`` of the same net: one Markdown row per command (``fit_too``: and ``fit
    --recompute sqrt``)."""
    out = str(folder / "planned.prototxt")
    fit = ["fit", str(path), "--gpu-memory", FIT_MEMORY, "--recompute", "sqrt"] + (["--input", "data=3,224,224"] if solver else [])
    if solver:
        commands = [(["fit", str(path), "--gpu-memory", FIT_MEMORY, "--input", "data=3,224,224"], False), (fit, False)]
    else:
        sqrt = ["optimize", str(path), "--phase", "TRAIN", "--recompute", "sqrt", "--json", "-o", out, "--force"]
        commands = [(["optimize", str(path), "--phase", "TRAIN", "-o", out, "--force"], False), (sqrt, True), (["optimize", str(path), "--phase", "TRAIN", "--recompute", "cheap", "-o", out, "--force"], False)]
    base = None
    for command, keep in commands:
        measure = best_of(command, repeat, keep)
        base = base or measure.seconds
        shown = " ".join(["caffemem", command[0]] + [word for word in command[2:] if word not in (out, "--force", "--json", "-o")])
        print(f"| {name} | {layers:,} | `{shown}` | {measure.seconds:.2f} | {measure.seconds / base:.2f} | {measure.peak_mib:.0f} |", flush=True)
        if keep:  # the budget: halfway between the plan with sqrt and the one without recomputation
            phase = json.loads(measure.output)["phases"][0]
            budget = (phase["bytes"]["planned"] + phase["recompute"]["lower_bound_without_recompute"]) // 2
            commands.append((["optimize", str(path), "--phase", "TRAIN", "--recompute", f"budget={budget}", "-o", out, "--force"], False))
    if not solver and fit_too:
        measure = best_of(fit, repeat)
        print(f"| {name} | {layers:,} | `caffemem fit --gpu-memory {FIT_MEMORY} --recompute sqrt` | {measure.seconds:.2f} | {measure.seconds / base:.2f} | {measure.peak_mib:.0f} |", flush=True)


def recompute_table(sizes: list[int], shapes: list[str], repeat: int, fit_too: bool = True) -> None:
    """``--recompute``: the policies' table (module docstring)."""
    print("| net | layers | command | seconds | × plain optimize | peak RSS (MiB) |")
    print("|---|---:|---|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as folder:
        nets = [("ResNet-152", lambda: generate.resnet(152))]
        nets += [(f"{shape} {size:,}", functools.partial(generate.sized, shape, size)) for shape in shapes for size in sorted(sizes)]
        for name, make in nets:
            path = Path(folder) / "net.prototxt"
            text = make()
            path.write_text(text)
            layers = layer_count(text)
            del text
            recompute_rows(name, path, layers, repeat if layers <= 10000 else 1, Path(folder), fit_too=fit_too)
        if GOOGLENET_SOLVER.exists() and fit_too:
            recompute_rows("GoogLeNet solver", GOOGLENET_SOLVER, layer_count(GOOGLENET_SOLVER.with_name("train_val.prototxt").read_text()), repeat, Path(folder), solver=True)


def layer_count(text: str) -> int:
    return sum(1 for line in text.splitlines() if line.startswith("layer {"))


def machine() -> str:
    model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("model name")), platform.processor())
    return f"{os.cpu_count()} cores ({model}), Python {platform.python_version()}, {platform.system()} {platform.release()}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--shapes", nargs="+", default=list(SHAPES), choices=SHAPES)
    parser.add_argument("--repeat", type=int, default=3, help="runs per command (the fastest is kept)")
    parser.add_argument("--recompute", action="store_true", help="time the recompute policies against plain optimize instead")
    parser.add_argument("--no-fit", action="store_true", help="with --recompute: the optimize policies only, no fit --recompute")
    options = parser.parse_args(argv)
    print(f"Machine: {machine()}\n")
    warm_bytecode()
    if options.recompute:
        recompute_table(options.sizes, options.shapes, options.repeat, fit_too=not options.no_fit)
        return 0
    print("| net | layers | command | seconds | µs per layer | peak RSS (MiB) | growth / n log n |")
    print("|---|---:|---|---:|---:|---:|---:|")
    smallest: dict[tuple[str, str], tuple[int, float]] = {}  # (shape, command) -> (layers, µs per layer)
    with tempfile.TemporaryDirectory() as folder:
        nets = [("ResNet-152", "resnet", lambda: generate.resnet(152))]
        nets += [(f"{shape} {size:,}", shape, functools.partial(generate.sized, shape, size)) for shape in options.shapes for size in sorted(options.sizes)]
        for name, shape, make in nets:
            path = Path(folder) / "net.prototxt"
            text = make()
            path.write_text(text)
            layers = layer_count(text)
            del text
            for command in (["analyze", str(path)], ["analyze", str(path), "--json"], ["optimize", str(path), "--phase", "TRAIN"]):
                measure = best_of(command, options.repeat if layers <= 10000 else 1)
                shown = " ".join(["caffemem", command[0]] + command[2:])
                per_layer = measure.seconds / layers * 1e6
                base_layers, base_per_layer = smallest.setdefault((shape, shown), (layers, per_layer))
                growth = "" if base_layers == layers else f"{per_layer / base_per_layer / (math.log(layers) / math.log(base_layers)):.2f}"
                print(f"| {name} | {layers:,} | `{shown}` | {measure.seconds:.2f} | {per_layer:.0f} | {measure.peak_mib:.0f} | {growth} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Time and peak memory of `caffemem analyze` and `caffemem optimize` on generated nets
of 1,000 to 100,000 layers (chains, wide DAGs, Inception-style fan-out/fan-in) and on
ResNet-152, each command a fresh process, as a user runs it.

    python benchmarks/scale.py                      # 1k and 10k layers, ResNet-152
    python benchmarks/scale.py --sizes 1000 10000 100000 --repeat 1

Prints a Markdown table (docs/benchmarks.md) and the machine it ran on.
The last column is the growth of the time per layer against the smallest size, divided by
what n log n allows (log n / log n₀): 1.00 or less means the command grows no faster than
n log n.  These are figures of one run on one machine; no test asserts on them.
"""

from __future__ import annotations

import argparse
import functools
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
sys.path.insert(0, str(REPO / "fixtures"))
import generate  # noqa: E402  (fixtures/generate.py)

SHAPES = ("chain", "wide", "inception")


@dataclass(frozen=True)
class Measure:
    seconds: float  # wall time of the whole process, imports included
    peak_mib: float  # its peak resident memory


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


def run_command(args: list[str]) -> Measure:
    """One `caffemem ...` process: its wall time and peak resident memory."""
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", _MEASURED_CLI, *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"caffemem {' '.join(args)} failed: {done.stderr[-500:]}")
    peak_kib = int(done.stderr.rsplit("caffemem-peak-kib:", 1)[1].split()[0])
    return Measure(seconds, peak_kib / 1024)


def best_of(args: list[str], repeat: int) -> Measure:
    runs = [run_command(args) for _ in range(repeat)]
    return min(runs, key=lambda m: m.seconds)


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
    options = parser.parse_args(argv)
    print(f"Machine: {machine()}\n")
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

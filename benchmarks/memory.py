"""Peak memory of `caffemem analyze` against the size of its input, for the kinds of
input issue 26 found memory-hungry, and for a real net: each run a fresh process, its
peak resident memory (VmHWM) read as it exits.

    python benchmarks/memory.py                          # 1, 2 and 4 MB of each kind
    python benchmarks/memory.py --sizes 1 2 4 8 16       # MB

Prints a Markdown table (the README's "Memory for any input") and, per kind, the slope
of a least-squares line through (input bytes, peak bytes): the bytes of memory each byte
of input costs.  These are figures of one run on one machine; tests/cli/test_bounded_memory.py
asserts the bound on the issue's reproductions with an address-space limit instead.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "fixtures"))
import generate  # noqa: E402  (fixtures/generate.py)
from scale import _MEASURED_CLI, machine  # noqa: E402  (benchmarks/scale.py)

MB = 10**6
_DIMS = "input_dim: 1\n"


def _long_name(size: int) -> bytes:
    return ('input: "data"\ninput_shape { dim: 1 }\nlayer { name: "' + "a" * size + '" type: "ReLU" bottom: "data" top: "data" }\n').encode()


def _chain(size: int) -> bytes:
    """A valid chain of convolutions and ReLUs of about ``size`` bytes (~150 bytes a layer)."""
    per_layer = len(generate.chain(1003)) / 1000
    return generate.chain(int(size / per_layer)).encode()


# name -> (what it is, the file of about `size` bytes, its suffix, the share of --sizes it is given)
KINDS: dict[str, tuple[str, Callable[[int], bytes], str, float]] = {
    "chain": ("a valid chain net (convolutions, ReLUs), analyzed", _chain, ".prototxt", 1.0),
    "long-name": ("one layer name of the whole size (refused: names over 4,096)", _long_name, ".prototxt", 1.0),
    "dims-comment": ("`input_dim: 1` lines and one `# é`", lambda size: (_DIMS * (size // len(_DIMS)) + "# é\n").encode(), ".prototxt", 1.0),
    "stray-brace": ("`input_dim: 1` lines and a stray `}` (the error path)", lambda size: (_DIMS * (size // len(_DIMS)) + "}\n").encode(), ".prototxt", 1.0),
    # 3 bytes a layer: 4 MB would be past the 200,000-layer limit, refused unparsed
    "binary-layers": ("a binary of empty layers (3 bytes each)", lambda size: b"\xa2\x06\x00" * (size // 3), ".caffemodel", 0.15),
}


def peak_mib(path: Path) -> tuple[float, int]:
    """(peak resident MiB, exit code) of `caffemem analyze PATH --device cpu`."""
    done = subprocess.run([sys.executable, "-c", _MEASURED_CLI, "analyze", str(path), "--device", "cpu"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, check=False)
    return int(done.stderr.rsplit("caffemem-peak-kib:", 1)[1].split()[0]) / 1024, done.returncode


def slope(points: list[tuple[int, float]]) -> tuple[float, float]:
    """(bytes of peak per input byte, intercept in MiB) of the least-squares line."""
    n = len(points)
    mean_x = sum(x for x, _ in points) / n
    mean_y = sum(y for _, y in points) / n
    sxx = sum((x - mean_x) ** 2 for x, _ in points)
    per_byte_mib = sum((x - mean_x) * (y - mean_y) for x, y in points) / sxx if sxx else 0.0
    return per_byte_mib * 2**20, mean_y - per_byte_mib * mean_x


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=float, nargs="+", default=[1, 2, 4], help="input sizes in MB")
    parser.add_argument("--kinds", nargs="+", default=list(KINDS), choices=list(KINDS))
    options = parser.parse_args(argv)
    print(f"Machine: {machine()}\n")
    print("| input | size (MB) | exit | peak RSS (MiB) |")
    print("|---|---:|---:|---:|")
    lines = []
    with tempfile.TemporaryDirectory() as folder:
        for kind in options.kinds:
            what, make, suffix, share = KINDS[kind]
            points = []
            for size in options.sizes:
                path = Path(folder) / f"{kind}{suffix}"
                path.write_bytes(make(int(size * share * MB)))
                peak, code = peak_mib(path)
                points.append((path.stat().st_size, peak))
                print(f"| {kind}: {what} | {path.stat().st_size / MB:.1f} | {code} | {peak:.0f} |", flush=True)
                os.unlink(path)
            per_byte, base = slope(points)
            lines.append(f"| {kind} | {per_byte:.1f} | {base:.0f} |")
    print("\n| input | bytes of peak per input byte | MiB at size 0 |")
    print("|---|---:|---:|")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())

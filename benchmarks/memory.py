"""Peak memory of `caffemem analyze` against the size of its input, for the kinds of
input issues 26 and 31 found memory-hungry, and for real nets: each run a fresh process,
its peak resident memory (VmHWM) read as it exits.

    python benchmarks/memory.py                          # 1, 2 and 4 MB of each kind; 5k to 40k layers
    python benchmarks/memory.py --sizes 1 2 4 8 16       # MB
    python benchmarks/memory.py --layers 5000 20000      # the per-layer table only at these counts

Prints three Markdown tables (docs/benchmarks.md, "Memory for any input"): peak against input
bytes per kind, with the slope of a least-squares line through (input bytes, peak bytes);
peak and seconds against the layers of a valid chain net, text and binary, with the slope
per layer (what the layer limit, passes/load.py MAX_LAYERS, bounds); and a fork tree
(--caffe-root) holding a 2 GiB sparse source file, scanned a line at a time.  These are
figures of one run on one machine; tests/cli/test_bounded_memory.py asserts the bounds on
the issues' reproductions with an address-space limit instead.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
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
    # 3 bytes a layer: 0.15 MB is 50,000 layers, the limit (more is refused unparsed), so
    # this kind gets 0.035 of each size: 11,666 to 46,666 layers for 1 to 4 MB
    "binary-layers": ("a binary of empty layers (3 bytes each)", lambda size: b"\xa2\x06\x00" * (size // 3), ".caffemodel", 0.035),
}


def peak_mib(path: Path, *extra: str) -> tuple[float, int]:
    """(peak resident MiB, exit code) of `caffemem analyze PATH --device cpu`."""
    mib, code, _ = measured(path, *extra)
    return mib, code


def measured(path: Path, *extra: str) -> tuple[float, int, float]:
    """(peak resident MiB, exit code, seconds) of `caffemem analyze PATH --device cpu ...`."""
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", _MEASURED_CLI, "analyze", str(path), "--device", "cpu", *extra], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, check=False)
    seconds = time.perf_counter() - start
    return int(done.stderr.rsplit("caffemem-peak-kib:", 1)[1].split()[0]) / 1024, done.returncode, seconds


def _binary(text: str) -> bytes:
    from google.protobuf import text_format

    from caffemem.schema import caffe_pb2

    return text_format.Parse(text, caffe_pb2.NetParameter()).SerializeToString()


# name -> (what it is, the file of `layers` layers, its suffix): a real net's cost per layer
LAYER_KINDS: dict[str, tuple[str, Callable[[int], bytes], str]] = {
    "chain-text": ("a valid chain net (convolutions, ReLUs), text", lambda layers: generate.chain(layers).encode(), ".prototxt"),
    "chain-binary": ("the same net, binary", lambda layers: _binary(generate.chain(layers)), ".caffemodel"),
}


def fork_tree_with_a_sparse_source(folder: Path, size: int = 2 * 2**30) -> Path:
    """A Caffe tree (caffemem's own caffe.proto) whose src/caffe/layers holds a sparse
    source file of ``size`` bytes, one "line" of NULs (issue 31: it took 4.1 GB)."""
    root = folder / "caffe"
    (root / "src" / "caffe" / "proto").mkdir(parents=True)
    (root / "src" / "caffe" / "proto" / "caffe.proto").write_bytes((HERE.parent / "proto" / "caffe.proto").read_bytes())
    (root / "src" / "caffe" / "layers").mkdir()
    with open(root / "src" / "caffe" / "layers" / "huge_layer.cpp", "wb") as sparse:
        sparse.truncate(size)
    return root


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
    parser.add_argument("--layers", type=int, nargs="+", default=[5000, 10000, 20000, 40000], help="layer counts of the per-layer table")
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
    print("\n| input | " + " | ".join(f"{n:,} layers" for n in options.layers) + " | KiB of peak per layer |")
    print("|---|" + "---:|" * (len(options.layers) + 1))
    with tempfile.TemporaryDirectory() as folder:
        for kind, (what, make, suffix) in LAYER_KINDS.items():
            points, cells = [], []
            for layers in options.layers:
                path = Path(folder) / f"{kind}{suffix}"
                path.write_bytes(make(layers))
                peak, code, seconds = measured(path)
                points.append((layers, peak))
                cells.append(f"{peak:.0f} MiB, {seconds:.0f} s" + ("" if code == 0 else f" (exit {code})"))
                os.unlink(path)
            per_layer, _ = slope(points)
            print(f"| {what} | " + " | ".join(cells) + f" | {per_layer / 1024:.1f} |", flush=True)
    with tempfile.TemporaryDirectory() as folder:
        root = fork_tree_with_a_sparse_source(Path(folder))
        net = Path(folder) / "net.prototxt"
        net.write_text(generate.chain(20))
        env_cache = Path(folder) / "cache"
        os.environ["CAFFEMEM_CACHE_DIR"] = str(env_cache)
        peak, code, seconds = measured(net, "--caffe-root", str(root))
        print("\n| input | peak RSS (MiB) | seconds | exit |")
        print("|---|---:|---:|---:|")
        print(f"| --caffe-root tree with a 2 GiB sparse .cpp (one line of NULs) | {peak:.0f} | {seconds:.0f} | {code} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

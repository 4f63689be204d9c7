"""Memory and speed of real Caffe running caffemem's plans (issue 14): per net, the heap
the process grew (peak, counted by tests/runtime/harness.cpp's malloc) in stock BVLC Caffe,
in caffemem-patched Caffe with the blob plan and with --share-buffers, and seconds per
iteration of each (the ratio to stock shows what the plan costs in speed). With --fork, also
the yjxiong fork running the net under its own optimizer (n/a where the fork lacks a layer).
Timings come from a 2-core machine shared with other work: treat ratios within ~10% as noise.

    python benchmarks/runtime.py                    # every net of tests/runtime/nets.py
    python benchmarks/runtime.py --nets lenet googlenet --iters 3

Builds (or reuses from the cache) stock and patched Caffe with .ci/build_caffe.sh.
Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "runtime"))
from runtime_caffe import Caffe, build, compile_harness, heap, optimize  # noqa: E402
from runtime_nets import CASES, make_net, with_declared_inputs  # noqa: E402


def seconds(proc) -> float:
    return next(float(line.split()[1]) for line in proc.stdout.splitlines() if line.startswith("seconds_per_iter"))


def fork_harness(tmp: Path) -> Caffe:
    """The patched fork and the harness built against it (-DCAFFEMEM_FORK); a net without
    our table runs under the fork's own optimizer there."""
    tree = build("fork-patched")
    return Caffe(tree, compile_harness(tree, tmp / "h" / "fork", fork=True))


def mib(n: int) -> str:
    return f"{n / 2**20:.1f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nets", nargs="*", default=[c.name for c in CASES])
    ap.add_argument("--iters", type=int, default=0, help="SGD iterations per run (default: each case's)")
    ap.add_argument("--fork", action="store_true", help="also the yjxiong fork's own optimizer (builds the fork)")
    args = ap.parse_args()
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        stock_tree, patched_tree = build("stock"), build("patched")
        stock = Caffe(stock_tree, compile_harness(stock_tree, tmp / "h" / "stock"))
        patched = Caffe(patched_tree, compile_harness(patched_tree, tmp / "h" / "patched"))
        fork = fork_harness(tmp) if args.fork else None
        print(
            "| net | phase | batch | stock MiB | fork optimizer MiB | blob plan MiB | shared buffers MiB | predicted (blobs / shared) | s/iter stock | ratio fork | ratio blobs | ratio shared | identical |"
        )
        print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
        for case in CASES:
            if case.name not in args.nets:
                continue
            iters = args.iters or max(case.iters, 2)
            net = make_net(case, tmp)
            s = stock.run(net, case.phase, iters, tmp / "stock.dump")
            row, same, predicted = [], True, []
            for plan, extra in (("blobs", ()), ("shared", ("--share-buffers",))):
                out = tmp / f"{case.name}.{plan}.prototxt"
                doc = optimize(net, out, "--phase", case.phase.lower(), *extra)
                saving = next(p for p in doc["phases"] if p["phase"] == case.phase)["savings"]["bytes"]
                p = patched.run(out, case.phase, iters, tmp / f"{plan}.dump")
                same &= (tmp / f"{plan}.dump").read_text() == (tmp / "stock.dump").read_text()
                row.append(p)
                predicted.append(mib(heap(s)["heap_peak"] - saving))
            sb = heap(s)["heap_peak"]
            fork_mib, fork_ratio = "n/a", "n/a"
            if fork is not None:
                declared = with_declared_inputs(net, tmp)
                if case.phase == "TEST":  # the fork optimizes TEST nets only when asked
                    declared.write_text(declared.read_text() + "mem_param { optimize_test: true }\n")
                f = fork.run(declared, case.phase, iters, tmp / "fork.dump", check=False)
                if f.returncode == 0:
                    fork_mib, fork_ratio = mib(heap(f)["heap_peak"]), f"{seconds(f) / seconds(s):.2f}"
            print(
                f"| {case.name} | {case.phase} | {case.batch} | {mib(sb)} | {fork_mib} | {mib(heap(row[0])['heap_peak'])} | {mib(heap(row[1])['heap_peak'])} "
                f"| {' / '.join(predicted)} | {seconds(s):.4f} | {fork_ratio} | {seconds(row[0]) / seconds(s):.2f} | {seconds(row[1]) / seconds(s):.2f} | {'yes' if same else 'NO'} |",
                flush=True,
            )


if __name__ == "__main__":
    main()

"""Memory and speed of real Caffe running caffemem's plans (issue 14): per net, the heap
the process grew (peak, counted by tests/runtime/harness.cpp's malloc) in stock BVLC Caffe,
in caffemem-patched Caffe with the blob plan and with --share-buffers, and seconds per
iteration of each (the ratio to stock shows what the plan costs in speed). With --fork, also
the yjxiong fork running the net under its own optimizer (n/a where the fork lacks a layer).
Timings come from a 2-core machine shared with other work: treat ratios within ~10% as noise.

    python benchmarks/runtime.py                    # every net of tests/runtime/nets.py
    python benchmarks/runtime.py --nets lenet googlenet --iters 3
    python benchmarks/runtime.py --recompute cheap sqrt budget --nets batchnorm googlenet alexnet --iters 5

With --recompute (issue 23), the table is of `optimize --recompute POLICY` plans instead,
per net of tests/runtime/runtime_nets.py's RECOMPUTE_CASES and policy: the heap with the plan without recomputation (--share-buffers,
which --recompute implies) and with it, the heap predicted for it (stock less its saving),
the Forwards run again and their FLOPs (share of one Forward pass), and seconds per
iteration against stock of both plans, measured in the same run (the faster of two runs
each). ``budget`` alone is
the budget halfway between the plan without recomputation and the sqrt plan (budget=SIZE
names one).

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
from runtime_nets import CASES, RECOMPUTE_CASES, make_net, with_declared_inputs  # noqa: E402


def seconds(proc) -> float:
    return next(float(line.split()[1]) for line in proc.stdout.splitlines() if line.startswith("seconds_per_iter"))


def fork_harness(tmp: Path) -> Caffe:
    """The patched fork and the harness built against it (-DCAFFEMEM_FORK); a net without
    our table runs under the fork's own optimizer there."""
    tree = build("fork-patched")
    return Caffe(tree, compile_harness(tree, tmp / "h" / "fork", fork=True))


def mib(n: int) -> str:
    return f"{n / 2**20:.1f}"


def train_entry(doc: dict) -> dict:
    return next(p for p in doc["phases"] if p["phase"] == "TRAIN")


RECOMPUTE_HEADER = (
    "| net | batch | policy | stock MiB | plan MiB | recompute plan MiB | predicted MiB | off (of stock) | Forwards again | extra Forward FLOPs "
    "| s/iter stock | ratio plan | ratio recompute | identical |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
)


def fastest(caffe: Caffe, net: Path, iters: int, dump: Path, runs: int = 2):
    """The run with the fewest seconds per iteration of ``runs`` (on a shared machine the
    fastest is the least disturbed); all give the same dump and heap."""
    return min((caffe.run(net, "TRAIN", iters, dump) for _ in range(runs)), key=seconds)


def recompute_rows(case, policies: list[str], iters: int, stock: Caffe, patched: Caffe, tmp: Path) -> list[str]:
    """One table row per policy for a TRAIN case (module docstring)."""
    net = make_net(case, tmp)
    s = fastest(stock, net, iters, tmp / "stock.dump")
    want = (tmp / "stock.dump").read_text()
    plain_out = tmp / f"{case.name}.shared.prototxt"
    plain_doc = train_entry(optimize(net, plain_out, "--phase", "train", "--share-buffers"))
    plain = fastest(patched, plain_out, iters, tmp / "plain.dump")
    sqrt_planned = None
    rows = []
    for policy in policies:
        if policy == "budget":
            if sqrt_planned is None:
                sqrt_planned = train_entry(optimize(net, tmp / "sqrt.prototxt", "--phase", "train", "--recompute", "sqrt"))["bytes"]["planned"]
            policy = f"budget={(plain_doc['bytes']['planned'] + sqrt_planned) // 2}"
        out = tmp / f"{case.name}.recompute.prototxt"
        entry = train_entry(optimize(net, out, "--phase", "train", "--recompute", policy))
        r = fastest(patched, out, iters, tmp / "recompute.dump")
        same = (tmp / "recompute.dump").read_text() == want == (tmp / "plain.dump").read_text()
        stock_bytes, measured = heap(s)["heap_peak"], heap(r)["heap_peak"]
        predicted = stock_bytes - entry["savings"]["bytes"]
        again = entry["recompute"]
        name = entry["recompute"]["policy"] if policy.startswith("budget=") else policy
        rows.append(
            f"| {case.name} | {case.batch} | {name} | {mib(stock_bytes)} | {mib(heap(plain)['heap_peak'])} | {mib(measured)} | {mib(predicted)} "
            f"| {(measured - predicted) / stock_bytes:+.2%} | {again['layers']} | {again['extra_forward_percent']:.1f}% "
            f"| {seconds(s):.4f} | {seconds(plain) / seconds(s):.2f} | {seconds(r) / seconds(s):.2f} | {'yes' if same else 'NO'} |"
        )
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nets", nargs="*", default=[c.name for c in CASES])
    ap.add_argument("--iters", type=int, default=0, help="SGD iterations per run (default: each case's)")
    ap.add_argument("--fork", action="store_true", help="also the yjxiong fork's own optimizer (builds the fork)")
    ap.add_argument("--recompute", nargs="+", metavar="POLICY", help="the table of optimize --recompute plans: cheap, sqrt, budget, budget=SIZE")
    args = ap.parse_args()
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    os.environ.setdefault("CAFFEMEM_DEVICE", "cpu")  # plans for the harness's CPU mode (the CLI defaults to gpu)
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        stock_tree, patched_tree = build("stock"), build("patched")
        stock = Caffe(stock_tree, compile_harness(stock_tree, tmp / "h" / "stock"))
        patched = Caffe(patched_tree, compile_harness(patched_tree, tmp / "h" / "patched"))
        if args.recompute:
            print(RECOMPUTE_HEADER)
            for case in RECOMPUTE_CASES:
                if case.name in args.nets:
                    print("\n".join(recompute_rows(case, args.recompute, args.iters or max(case.iters, 2), stock, patched, tmp)), flush=True)
            return
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

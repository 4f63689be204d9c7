"""GPU ground truth (issue 18): build BVLC Caffe with CUDA from ../shared/caffe, stock and
caffemem-patched, and measure what each net of ../shared/groundtruth takes on the card and in
pinned host memory, per layer, in forward and backward, plus the per-process constant.
docs/gpu.md says how to run it and what the JSON holds.

    python benchmarks/gpu_groundtruth.py toolkit      # install the CUDA wheels; print CUDA_DIR
    python benchmarks/gpu_groundtruth.py check        # CI: compile the GPU code of the patch
    python benchmarks/gpu_groundtruth.py build        # full CUDA builds, stock and patched
    python benchmarks/gpu_groundtruth.py run [--out DIR] [--nets NAME ...] [--device N]
    python benchmarks/gpu_groundtruth.py bundle       # the kit for a bare GPU machine
    python benchmarks/gpu_groundtruth.py run-bundle ARCHIVE [--rehearse] [--pack FILE]

The toolkit is PyPI's CUDA 13 wheels, pinned in benchmarks/gpu/requirements.txt (why 13, not
12: see there), installed into /var/cache/caffemem/cuda-<key> (or ~/.cache/caffemem) and laid
out as a CUDA_DIR for Caffe's Makefile. Builds are cached beside it, keyed on everything they
depend on, as .ci/build_caffe.sh does for the CPU builds. Heavy steps run one at a time,
`make -j2` (CAFFEMEM_JOBS).

Exit codes: 0 done; 2 bad usage or missing input; 3 (``run`` only) everything built, but this
machine has no usable GPU: rerun on one with an NVIDIA driver for CUDA 13 (>= 580); 1 a
build or a measurement failed.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import tempfile
from pathlib import Path

from gpu.builds import Variant, build, check
from gpu.bundle import CHECKOUT_ARCHIVE, bundle
from gpu.configs import configs_of
from gpu.corpus import stage_corpus
from gpu.kit import run_bundle
from gpu.measure import measure
from gpu.paths import DEFAULT_OUT, REPO, TARBALL
from gpu.probe import EXIT_NO_GPU, compile_probe, gpu_devices, tree_programs
from gpu.shell import log
from gpu.toolkit import toolkit


#: run-bundle's default time budget (seconds from the start): the kit's runs are estimated
#: at ~500 s (gpu/estimate.py; `measure` logs the estimate), and the device tool's one call
#: must end, results packed, within its 600 s.
BUDGET = 520.0


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gpu_groundtruth.py", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command")
    sub.add_parser("toolkit", help="install the pinned CUDA wheels into the cache; print CUDA_DIR")
    sub.add_parser("check", help="compile the GPU code of the runtime patch (CI)")
    b = sub.add_parser("build", help="full CUDA builds of Caffe and the probe")
    b.add_argument("--variant", choices=["stock", "patched", "both"], default="both")
    r = sub.add_parser("run", help="build, then measure every net of ../shared/groundtruth on the GPU")
    r.add_argument("--variant", choices=["stock", "patched", "both"], default="both")
    r.add_argument("--nets", nargs="*", help="only ground-truth files whose name contains one of these")
    r.add_argument("--out", type=Path, default=DEFAULT_OUT)
    r.add_argument("--device", type=int, default=0)
    sub.add_parser("bundle", help=f"build, then pack the kit for a bare GPU machine into {CHECKOUT_ARCHIVE.relative_to(REPO)}")
    k = sub.add_parser("run-bundle", help="on the GPU machine: unpack the kit and measure every net (docs/gpu.md)")
    k.add_argument("archive", type=Path)
    k.add_argument("--out", type=Path, default=DEFAULT_OUT)
    k.add_argument("--pack", type=Path, help="also pack OUT into this .tar.xz")
    k.add_argument("--nets", nargs="*", help="only ground-truth files whose name contains one of these")
    k.add_argument("--device", type=int, default=0)
    k.add_argument("--budget", type=float, default=BUDGET, help=f"seconds for the whole measurement (default {BUDGET:.0f}); runs left are recorded as not measured")
    k.add_argument("--cuda-lib", type=Path, action="append", help="a folder with CUDA's libraries (default: this Python's nvidia packages)")
    k.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="threads for the CPU work (default: every core)")
    k.add_argument("--rehearse", action="store_true", help="only check the kit: libraries found, programs start (exit 3 without a GPU)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.command == "run-bundle":
        return run_bundle(args.archive, args.out, args.pack, args.nets, args.device, args.budget, args.cuda_lib, args.rehearse, args.jobs)
    if not TARBALL.is_file():
        log(f"missing {TARBALL}")
        return 2
    try:
        if args.command == "toolkit":
            print(toolkit())
        elif args.command == "check":
            print(check())
        elif args.command == "bundle":
            print(bundle())
        elif args.command in ("build", "run", None):
            chosen = getattr(args, "variant", "both")
            variants = [Variant(v) for v in (("stock", "patched") if chosen == "both" else (chosen,))]
            cuda = toolkit()
            if args.command == "build":
                for v in variants:
                    tree = build(v)
                    log(f"probe: {compile_probe(tree, cuda)}")
                    print(tree)
            else:
                programs = {v.name: tree_programs(build(v), cuda) for v in variants}
                count, reason = gpu_devices(next(iter(programs.values())))
                if count == 0:
                    log(f"everything is built, but there is no GPU here: {reason}")
                    log(f"rerun `python benchmarks/gpu_groundtruth.py run` on a machine with an NVIDIA GPU (exit {EXIT_NO_GPU})")
                    return EXIT_NO_GPU
                out = getattr(args, "out", DEFAULT_OUT)
                with tempfile.TemporaryDirectory(prefix="caffemem-corpus-") as corpus:
                    return measure(configs_of(chosen), programs, stage_corpus(Path(corpus)), getattr(args, "nets", None), out, getattr(args, "device", 0))
    except (RuntimeError, subprocess.CalledProcessError) as e:
        log(str(e))
        return 1
    return 0

"""Where the kit finds its inputs: this checkout, the shared corpus beside it (../shared,
which does not travel to the GPU machine) and the kit's own files in this folder."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
KIT = Path(__file__).resolve().parent
REQUIREMENTS = KIT / "requirements.txt"
CUDA_FIX = KIT / "fix-for-cuda13.edits"
PROBE = KIT / "probe.cpp"
SHARED = REPO.parent / "shared"
TARBALL = SHARED / "caffe" / "bvlc-caffe-9b89154.tar.xz"
DEBIAN_FIX = SHARED / "caffe" / "fix-for-debian12.sh"
GROUNDTRUTH = SHARED / "groundtruth"
#: Where `run` and `run-bundle` write by default.
DEFAULT_OUT = REPO / "benchmarks" / "gpu-groundtruth-out"

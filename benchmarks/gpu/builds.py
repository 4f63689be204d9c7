"""BVLC Caffe built with CUDA from ../shared/caffe, stock and caffemem-patched: `check`
(CI) compiles only the translation units the runtime patch and the CUDA 13 fix touch;
`build` makes the whole library and tools. Both are cached on every input; heavy steps run
one at a time, `make -j2` (CAFFEMEM_JOBS)."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from caffemem.runtime import Flavour, apply_edits_file, apply_patch, patch_files
from gpu.cache import cache_root, digest, is_done, publish
from gpu.paths import CUDA_FIX, DEBIAN_FIX, REQUIREMENTS, TARBALL
from gpu.shell import log, run
from gpu.toolkit import toolkit

#: SASS for Ampere (sm_80; also runs on sm_86/sm_89) and Hopper (sm_90), and compute_75 PTX
#: that the driver compiles at load time for Turing (T4) and for cards newer than sm_90.
CUDA_ARCH = "-gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 -gencode arch=compute_75,code=compute_75"
#: The kit's full builds (`build`): only the cards it is lent, the H100 and H200 (sm_90), and
#: compute_90 PTX for newer ones. Each .cu compiles in ~16 s instead of ~29 s on this machine,
#: ~14 min less per tree on 2 cores; the probe refuses an older card (probe.cpp kMinMajor).
#: `check` keeps CUDA_ARCH: CI proves every unit compiles for each architecture.
KIT_ARCH = "-gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90"
#: What `check` compiles (CI): the translation units the runtime patch and the CUDA 13 fix
#: add or edit, in GPU mode with cuDNN, and the CUDA files that include the layer headers the
#: patch edits (nvcc's front end parses those headers too). Paths are Makefile object targets.
CHECK_OBJECTS = [
    ".build_release/src/caffe/util/mem_slots.o",  # the runtime: GPU slots (set_gpu_data)
    ".build_release/src/caffe/util/mem_recompute.o",  # patch v4: Forwards again in Backward
    ".build_release/src/caffe/net.o",  # Net::Init binds the slots
    ".build_release/src/caffe/common.o",  # CUDA 13 fix: Caffe::DeviceQuery
    ".build_release/src/caffe/syncedmem.o",
    ".build_release/src/caffe/layers/cudnn_conv_layer.o",  # cuDNN 9 fix: algorithm choice
    ".build_release/src/caffe/layers/cudnn_deconv_layer.o",
    ".build_release/src/caffe/layers/cudnn_softmax_layer.o",  # g++ with thrust (CCCL path)
    ".build_release/cuda/src/caffe/layers/cudnn_conv_layer.o",
    ".build_release/cuda/src/caffe/layers/cudnn_deconv_layer.o",  # patch v3: planned_workspace.hpp
    ".build_release/cuda/src/caffe/layers/conv_layer.o",  # base_conv_layer.hpp
    ".build_release/cuda/src/caffe/layers/softmax_loss_layer.o",  # softmax(_loss)_layer.hpp
    ".build_release/cuda/src/caffe/layers/batch_norm_layer.o",
    ".build_release/src/caffe/util/cudnn_pool.o",  # patch v6: the per-device cuDNN pool
    *(f".build_release/src/caffe/layers/cudnn_{layer}_layer.o" for layer in ("relu", "sigmoid", "tanh", "pooling", "lrn", "lcn")),
    *(f".build_release/cuda/src/caffe/layers/cudnn_{layer}_layer.o" for layer in ("relu", "sigmoid", "tanh", "pooling", "lrn", "lcn", "softmax")),
]
#: Debian packages a BVLC build needs (the list of .ci/build_caffe.sh).
DEBIAN_PACKAGES = [
    "build-essential", "libboost-system-dev", "libboost-thread-dev", "libboost-filesystem-dev", "libboost-regex-dev",
    "libgoogle-glog-dev", "libgflags-dev", "libprotobuf-dev", "protobuf-compiler", "libhdf5-dev", "libopenblas-dev",
]


def makefile_config(cuda: Path, arch: str = CUDA_ARCH) -> str:
    """Caffe's Makefile.config for the CUDA build (the CPU one of .ci/build_caffe.sh with
    CPU_ONLY off, cuDNN on, our CUDA_DIR and CUDA_ARCH). CCCL 3 keeps thrust and cub in
    include/cccl, which nvcc finds by itself (nvcc.profile) but g++ does not: some .cpp
    include thrust. Changing it: bump the "v2" of the keys in check() and build()."""
    return f"""USE_CUDNN := 1
CUDA_DIR := {cuda}
CUDA_ARCH := {arch}
USE_OPENCV := 0
USE_LEVELDB := 0
USE_LMDB := 0
BLAS := open
INCLUDE_DIRS := /usr/local/include /usr/include/hdf5/serial {cuda}/include/cccl
LIBRARY_DIRS := /usr/local/lib /usr/lib /usr/lib/x86_64-linux-gnu /usr/lib/x86_64-linux-gnu/hdf5/serial
BUILD_DIR := build
"""


@dataclass(frozen=True)
class Variant:
    """stock or patched BVLC master, built with CUDA."""

    name: str

    @property
    def patched(self) -> bool:
        return self.name == "patched"

    def key_inputs(self, arch: str = CUDA_ARCH) -> list[Path | str]:
        parts: list[Path | str] = [TARBALL, DEBIAN_FIX, CUDA_FIX, REQUIREMENTS, arch]
        if self.patched:
            parts += patch_files(Flavour.BVLC)
        return parts


def ensure_packages() -> None:
    """apt-get install what is missing of DEBIAN_PACKAGES (not with CAFFEMEM_NO_APT=1)."""
    if os.environ.get("CAFFEMEM_NO_APT") == "1":
        return
    missing = [p for p in DEBIAN_PACKAGES if subprocess.run(["dpkg", "-s", p], check=False, capture_output=True).returncode != 0]
    if missing:
        run(["apt-get", "update", "-qq"])
        run(["apt-get", "install", "-y", "-qq", *missing], env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})


def unpack_tree(variant: Variant, work: Path, cuda: Path, arch: str = CUDA_ARCH) -> Path:
    """A fresh tree: the tarball, the Debian 12 fix, the CUDA 13 fix, (patched) the caffemem
    runtime patch, and the CUDA Makefile.config."""
    ensure_packages()
    run(["tar", "-xJf", str(TARBALL), "-C", str(work)])
    run(["bash", str(DEBIAN_FIX), str(work)])
    log(f"CUDA 13 fix: {', '.join(apply_edits_file(work, CUDA_FIX)) or 'already applied'}")
    if variant.patched:
        log(apply_patch(work).describe())
    (work / "Makefile.config").write_text(makefile_config(cuda, arch))
    return work


def jobs() -> str:
    return os.environ.get("CAFFEMEM_JOBS", "2")


def make(tree: Path, targets: list[str], log_name: str) -> float:
    t0 = time.monotonic()
    run(["make", f"-j{jobs()}", "CUSTOM_CXX=g++", *targets], cwd=tree, log_to=tree / log_name)
    return time.monotonic() - t0


def check() -> Path:
    """CI: compile CHECK_OBJECTS of the patched tree with the CUDA toolkit (no GPU needed).
    Cached on every input; returns the tree."""
    cuda = toolkit()
    variant = Variant("patched")
    dest = cache_root() / f"cuda-check-{digest(*variant.key_inputs(), *CHECK_OBJECTS, 'check v2')}"
    if is_done(dest):
        log(f"CUDA compile check: cached ({dest})")
        return dest
    work = dest.with_name(dest.name + f".tmp.{os.getpid()}")
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    try:
        unpack_tree(variant, work, cuda)
        seconds = make(work, CHECK_OBJECTS, "check.log")
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)  # nothing to resume: it is small
        raise
    log(f"CUDA compile check: {len(CHECK_OBJECTS)} objects compiled in {seconds:.0f} s")
    (work / "check-seconds.txt").write_text(f"{seconds:.0f}\n")
    return publish(work, dest)


def build_path(variant: Variant) -> tuple[Path, bool]:
    """(the variant's full build in the cache, whether it is there), building nothing."""
    dest = cache_root() / f"bvlc-cuda-{variant.name}-{digest(*variant.key_inputs(KIT_ARCH), 'build v2')}"
    return dest, is_done(dest)


def build(variant: Variant) -> Path:
    """The full CUDA build (`make lib tools`) for the kit's cards (KIT_ARCH), cached; returns the tree."""
    cuda = toolkit()
    dest, built = build_path(variant)
    if built:
        return dest
    with open(dest.with_name(dest.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one make per tree: a second `build`/`bundle` waits for the first
        if is_done(dest):
            return dest
        # An interrupted or failed build resumes in its .partial tree (make is incremental).
        work = dest.with_name(dest.name + ".partial")
        if not (work / ".caffemem-unpacked").is_file():
            shutil.rmtree(work, ignore_errors=True)
            work.mkdir(parents=True)
            unpack_tree(variant, work, cuda, KIT_ARCH)
            (work / ".caffemem-unpacked").touch()
        (work / "Makefile.config").write_text(makefile_config(cuda, KIT_ARCH))
        seconds = make(work, ["lib", "tools"], "build.log")
        log(f"{variant.name}: Caffe built with CUDA in {seconds / 60:.1f} min")
        (work / "build-seconds.txt").write_text(f"{seconds:.0f}\n")
        return publish(work, dest)

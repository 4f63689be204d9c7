"""The CUDA toolkit: PyPI's CUDA 13 wheels pinned in requirements.txt (why 13, not 12: see
there and docs/gpu.md), installed once into the cache and laid out as a CUDA_DIR for
Caffe's Makefile."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from gpu.cache import cache_root, digest, is_done, publish
from gpu.paths import REQUIREMENTS
from gpu.shell import log, run


def toolkit_path() -> tuple[Path, bool]:
    """(the CUDA_DIR of the pinned toolkit in the cache, whether it is installed)."""
    dest = cache_root() / f"cuda-{digest(REQUIREMENTS, 'layout v1')}"
    return dest / "toolkit", is_done(dest)


def toolkit() -> Path:
    """The pinned CUDA wheels, installed once into the cache, laid out as a CUDA_DIR
    (bin/nvcc, nvvm/, include/ with cuDNN's headers, lib64/ with unversioned .so links,
    which the wheels lack and `-lcudart` needs). Returns that CUDA_DIR."""
    cuda, installed = toolkit_path()
    if installed:
        return cuda
    dest = cuda.parent
    work = dest.with_name(dest.name + f".tmp.{os.getpid()}")
    shutil.rmtree(work, ignore_errors=True)
    wheels = work / "wheels"
    t0 = time.monotonic()
    run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--disable-pip-version-check", "--target", str(wheels), "-r", str(REQUIREMENTS)])
    nvidia = wheels / "nvidia"
    cu13 = nvidia / "cu13"
    kit = work / "toolkit"
    (kit / "include").mkdir(parents=True)
    (kit / "lib64").mkdir()
    # Relative links, so the directory can be moved (it is, from .tmp to its name).
    (kit / "bin").symlink_to(os.path.relpath(cu13 / "bin", kit))
    (kit / "nvvm").symlink_to(os.path.relpath(cu13 / "nvvm", kit))
    for inc in (cu13 / "include", nvidia / "cudnn" / "include"):
        for f in sorted(inc.iterdir()):
            (kit / "include" / f.name).symlink_to(os.path.relpath(f, kit / "include"))
    for lib in (cu13 / "lib", nvidia / "cudnn" / "lib"):
        for f in sorted(lib.glob("*.so.*")):
            rel = os.path.relpath(f, kit / "lib64")
            (kit / "lib64" / f.name).symlink_to(rel)
            plain = kit / "lib64" / (f.name.split(".so.")[0] + ".so")
            if not plain.exists():
                plain.symlink_to(rel)
    nvcc = kit / "bin" / "nvcc"
    if not nvcc.is_file():
        raise RuntimeError(f"{REQUIREMENTS}: the wheels have no bin/nvcc")
    version = subprocess.run([str(nvcc), "--version"], capture_output=True, text=True, check=True).stdout.strip().splitlines()[-1]
    log(f"CUDA toolkit installed in {time.monotonic() - t0:.0f} s: {version}")
    publish(work, dest)
    return cuda

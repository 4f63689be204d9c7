"""The shared libraries the kit's programs load: what `ldd` says of a program, whose each
library is (glibc's and CUDA's are the GPU machine's own; every other travels in the kit),
and where CUDA's libraries are (a Python's `nvidia` wheels, as PyTorch installs them)."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from gpu.toolkit import toolkit_path

#: glibc's own libraries: every Linux machine has them, and a copy from another glibc breaks
#: the process (they must match the machine's ld.so).
GLIBC = re.compile(r"^(ld-linux.*|linux-vdso|libc|libm|libdl|libpthread|librt|libresolv|libutil|libanl|libnsl|libnss_\w+|libmvec|libBrokenLocale)\.so(\.\d+)*$")
#: CUDA's libraries: the GPU machine's own (its Python's nvidia wheels; the driver's libcuda).
CUDA = re.compile(r"^(libcudart|libcublas|libcublasLt|libcurand|libcudnn(_\w+)?|libcuda|libnvidia-\w+|libnvrtc(-builtins)?|libnvJitLink)\.so(\.[\d.]+)*$")
#: The CUDA libraries the kit needs from the GPU machine: the programs' NEEDED ones, plus what
#: those load themselves (cuBLAS -> cuBLASLt; cuDNN 9 dlopens its sub-libraries by soname).
CUDA_NEEDED = ("libcudart.so.13", "libcublas.so.13", "libcublasLt.so.13", "libcurand.so.10", "libcudnn.so.9",
               "libcudnn_ops.so.9", "libcudnn_cnn.so.9", "libcudnn_graph.so.9", "libcudnn_heuristic.so.9",
               "libcudnn_engines_precompiled.so.9", "libcudnn_engines_runtime_compiled.so.9")


def kind(soname: str) -> str:
    """Where a library comes from on the GPU machine: 'glibc' (the machine's), 'cuda' (its
    Python's nvidia wheels or its driver) or 'kit' (carried in lib/)."""
    if GLIBC.match(soname):
        return "glibc"
    if CUDA.match(soname):
        return "cuda"
    return "kit"


# ----------------------------------------------------------------------------- ldd


@dataclass(frozen=True)
class Resolved:
    """What `ldd` says of one program or library: each library it loads, by the name the
    loader asked for, with the file found (None: "not found"), and the symbol versions it
    could not find ("version `GLIBCXX_3.4.32' not found (required by ...)")."""

    libraries: dict[str, str | None]
    missing_versions: tuple[str, ...]

    @property
    def not_found(self) -> list[str]:
        return sorted(name for name, path in self.libraries.items() if path is None)


_LDD_LINE = re.compile(r"^\s*(\S+)\s+=>\s+(not found|(\S+)\s+\(0x[0-9a-f]+\))\s*$")
_LDD_DIRECT = re.compile(r"^\s*(/\S+)\s+\(0x[0-9a-f]+\)\s*$")  # the loader itself
_LDD_VERSION = re.compile(r"version `([^']+)' not found \(required by ([^)]+)\)")


def parse_ldd(text: str) -> Resolved:
    libraries: dict[str, str | None] = {}
    missing: list[str] = []
    for line in text.splitlines():
        version = _LDD_VERSION.search(line)
        if version:
            missing.append(f"{version.group(1)} (required by {version.group(2)})")
            continue
        m = _LDD_LINE.match(line)
        if m:
            libraries[m.group(1)] = None if m.group(2) == "not found" else m.group(3)
            continue
        m = _LDD_DIRECT.match(line)
        if m:
            libraries[Path(m.group(1)).name] = m.group(1)
    return Resolved(libraries, tuple(missing))


def ldd(path: Path, library_path: list[Path]) -> Resolved:
    """`ldd PATH` with exactly these folders on LD_LIBRARY_PATH."""
    env = {**os.environ, "LD_LIBRARY_PATH": ":".join(str(p) for p in library_path)}
    proc = subprocess.run(["ldd", str(path)], check=False, capture_output=True, text=True, env=env)
    if proc.returncode != 0 and "not a dynamic executable" not in proc.stdout + proc.stderr:
        raise RuntimeError(f"ldd {path}: exit {proc.returncode}: {proc.stderr.strip()}")
    return parse_ldd(proc.stdout + proc.stderr)


def glibc_versions(path: Path) -> set[str]:
    """The GLIBC_x.y symbol versions a program or library asks for (objdump -p)."""
    out = subprocess.run(["objdump", "-p", str(path)], check=True, capture_output=True, text=True).stdout
    return set(re.findall(r"\bGLIBC_(\d+(?:\.\d+)+)\b", out))


def version_key(version: str) -> tuple[int, ...]:
    return tuple(int(x) for x in version.split("."))


# ----------------------------------------------------------------------------- CUDA libraries


def cuda_dirs(roots: list[Path]) -> list[Path]:
    """The folders under `roots` (each an `nvidia` package folder of a Python, as PyTorch's
    wheels lay them out: nvidia/cu13/lib, nvidia/cudnn/lib, or per-library nvidia/X/lib in
    older wheels) that hold one of CUDA_NEEDED, in the order found."""
    found: list[Path] = []
    for root in roots:
        for lib in sorted(root.glob("*/lib")):
            if lib.is_dir() and lib not in found and any((lib / name).exists() for name in CUDA_NEEDED):
                found.append(lib)
    return found


def python_nvidia_roots() -> list[Path]:
    """This Python's `nvidia` package folders (a namespace package: one per site-packages)."""
    spec = importlib.util.find_spec("nvidia")
    if spec is None or not spec.submodule_search_locations:
        return []
    return [Path(p) for p in spec.submodule_search_locations]


def find_cuda(explicit: list[Path] | None = None) -> tuple[list[Path], str]:
    """(the folders with CUDA's libraries, where they came from): the ones given, else this
    Python's nvidia wheels (the GPU machine), else the pinned toolkit's wheels in the cache
    (this machine: the same wheels `build` compiled against)."""
    if explicit:
        return explicit, "given"
    dirs = cuda_dirs(python_nvidia_roots())
    if dirs:
        return dirs, f"{sys.executable}'s nvidia packages"
    toolkit, installed = toolkit_path()
    if installed:
        return cuda_dirs([toolkit.parent / "wheels" / "nvidia"]), "the pinned CUDA wheels in the cache"
    return [], "nowhere"


def missing_cuda(dirs: list[Path]) -> list[str]:
    return [name for name in CUDA_NEEDED if not any((d / name).exists() for d in dirs)]

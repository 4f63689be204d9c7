"""Helpers of the runtime tests (issue 14) and benchmarks/runtime.py: build Caffe with
.ci/build_caffe.sh (cached outside the checkout), compile tests/runtime/harness.cpp against a
built tree, run it, read its heap figures, and run `caffemem optimize`."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
SHARED_CAFFE = REPO.parent / "shared" / "caffe"
BVLC_TARBALL = SHARED_CAFFE / "bvlc-caffe-9b89154.tar.xz"
FORK_TARBALL = SHARED_CAFFE / "yjxiong-caffe-action_recog-9831a2b.tar.xz"
# the console script of this environment (the CLI entry point caffemem.cli:main)
CAFFEMEM = str(Path(sys.executable).parent / "caffemem") if (Path(sys.executable).parent / "caffemem").exists() else (shutil.which("caffemem") or "caffemem")


def build(kind: str, *options: str) -> Path:
    """.ci/build_caffe.sh KIND [--pycaffe]: the built tree (cached outside the checkout)."""
    env = dict(os.environ, CAFFEMEM_PYTHON=sys.executable)
    proc = subprocess.run([str(REPO / ".ci" / "build_caffe.sh"), kind, *options], capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"build_caffe.sh {kind} failed:\n{proc.stderr[-4000:]}")
    return Path(proc.stdout.strip().splitlines()[-1])


@dataclass(frozen=True)
class Caffe:
    """A built tree: its `caffe` tool and the harness compiled against it."""

    tree: Path
    harness: Path

    @property
    def tool(self) -> Path:
        return self.tree / "build" / "tools" / "caffe"

    def run(self, net: Path, phase: str, iters: int, dump: Path, check: bool = True) -> subprocess.CompletedProcess:
        env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
        proc = subprocess.run([str(self.harness), str(net), phase.lower(), str(iters), str(dump)], capture_output=True, text=True, env=env)
        if check and proc.returncode != 0:
            raise AssertionError(f"harness failed on {net} ({phase}):\n{proc.stderr[-3000:]}")
        return proc


def heap(proc: subprocess.CompletedProcess) -> dict[str, int]:
    return {k: int(v) for k, v in (line.split() for line in proc.stdout.splitlines() if line.startswith("heap_"))}


def compile_harness(tree: Path, out: Path, fork: bool = False) -> Path:
    """harness.cpp built against the Caffe in ``tree`` (``fork``: the yjxiong tree, whose
    libcaffe leaves OpenCV to the program, with -DCAFFEMEM_FORK)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    lib = tree / "build" / "lib"
    cmd = ["g++", "-std=gnu++17", "-O2", "-DCPU_ONLY", *(["-DCAFFEMEM_FORK"] if fork else []), "-rdynamic", str(HERE / "harness.cpp"), "-o", str(out)]
    cmd += [f"-I{tree / 'include'}", f"-I{tree / 'build' / 'src'}", "-I/usr/include/hdf5/serial", f"-L{lib}", f"-Wl,-rpath,{lib}"]
    cmd += ["-lcaffe", "-lglog", "-lgflags", "-lprotobuf", "-lboost_system", "-lopenblas", "-lpthread"]
    cmd += ["-lopencv_imgcodecs", "-lopencv_imgproc", "-lopencv_core"] if fork else []
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"compiling the harness failed:\n{proc.stderr[-4000:]}")
    return out


def optimize(net: Path, out: Path, *args: str) -> dict:
    """`caffemem optimize NET -o OUT --json ARGS`; returns the JSON document."""
    proc = subprocess.run([CAFFEMEM, "optimize", str(net), "-o", str(out), "--json", *args], capture_output=True, text=True, cwd=REPO)
    if proc.returncode != 0:
        raise AssertionError(f"caffemem optimize {net} failed:\n{proc.stderr}")
    return json.loads(proc.stdout)


# ----------------------------------------------------------------------------- fixtures
# (here, not in a conftest.py: tests import `conftest` by name, and a second conftest.py
# on sys.path would shadow tests/conftest.py.)  Set CAFFEMEM_SKIP_CAFFE=1 to skip the
# tests that need a built Caffe.


def _need_caffe() -> None:
    if os.environ.get("CAFFEMEM_SKIP_CAFFE") == "1":
        pytest.skip("CAFFEMEM_SKIP_CAFFE=1")
    if not BVLC_TARBALL.is_file():
        pytest.skip(f"{BVLC_TARBALL} missing")


@pytest.fixture(scope="session")
def stock_caffe(tmp_path_factory) -> Caffe:
    _need_caffe()
    tree = build("stock")
    return Caffe(tree, compile_harness(tree, tmp_path_factory.mktemp("harness") / "harness_stock"))


@pytest.fixture(scope="session")
def patched_caffe(tmp_path_factory) -> Caffe:
    _need_caffe()
    tree = build("patched")
    return Caffe(tree, compile_harness(tree, tmp_path_factory.mktemp("harness") / "harness_patched"))


def unpack(tarball: Path, dest: Path) -> Path:
    """A Caffe tarball of ../shared/caffe unpacked into ``dest`` (skips without it)."""
    if not tarball.is_file():
        pytest.skip(f"{tarball} missing")
    dest.mkdir()
    subprocess.run(["tar", "-xJf", str(tarball), "-C", str(dest)], check=True)
    return dest


def snapshot(tree: Path) -> dict[str, str]:
    """Every regular file of ``tree``: its hash and mode (the bytes a patch may change)."""
    out = {}
    for p in sorted(tree.rglob("*")):
        if p.is_file() and not p.is_symlink():
            out[str(p.relative_to(tree))] = hashlib.sha256(p.read_bytes()).hexdigest() + oct(p.stat().st_mode)
    return out


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> Path:
    """BVLC Caffe master's source tree, unpacked once per module: copy it (``bvlc``) to change it."""
    return unpack(BVLC_TARBALL, tmp_path_factory.mktemp("bvlc") / "caffe")


@pytest.fixture
def bvlc(pristine, tmp_path) -> Path:
    tree = tmp_path / "caffe"
    subprocess.run(["cp", "-a", str(pristine), str(tree)], check=True)
    return tree

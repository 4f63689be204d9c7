"""The probe (probe.cpp): the program that runs a net in Caffe and counts, per layer and
step, what Caffe allocates on the card and in pinned host memory. Compiled against a build
tree; run with one variant's programs (a build tree's for `run`, an unpacked kit's for
`run-bundle`)."""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from gpu.cache import digest
from gpu.paths import PROBE
from gpu.shell import run

#: The probe's `--devices` (and `run`, `run-bundle`): everything is sound, but no GPU is here.
EXIT_NO_GPU = 3


@dataclass(frozen=True)
class Programs:
    """One variant's programs and the environment they run in: a build tree's (`run`) or an
    unpacked GPU bundle's (`run-bundle`, kit.py)."""

    probe: Path
    upgrade: Path  # upgrade_net_proto_text: the V1 nets of the corpus
    env: dict[str, str]


def compile_probe(tree: Path, cuda: Path, kit: bool = False) -> Path:
    """probe.cpp against the built libcaffe (same defines as the library), into the built
    tree, named by the probe's digest. `kit`: for the GPU bundle, which finds libcaffe beside
    it ($ORIGIN/../lib, as Caffe's tools do) and everything else on LD_LIBRARY_PATH, instead
    of in this machine's build tree and toolkit."""
    out = tree / "build" / "tools" / f"caffemem_gpu_probe-{digest(PROBE)}{'-kit' if kit else ''}"
    if out.is_file():
        return out
    rpath = "$ORIGIN/../lib" if kit else f"{tree / 'build' / 'lib'}:{cuda / 'lib64'}"
    cmd = [
        "g++", "-std=gnu++17", "-O2", "-rdynamic", str(PROBE), "-o", str(out),
        "-DUSE_CUDNN", "-DUSE_HDF5", f"-I{tree / 'include'}", f"-I{tree / '.build_release' / 'src'}",
        f"-I{cuda / 'include'}", "-I/usr/include/hdf5/serial",
        f"-L{tree / 'build' / 'lib'}", f"-L{cuda / 'lib64'}",
        f"-Wl,-rpath,{rpath}", f"-Wl,-rpath-link,{tree / 'build' / 'lib'}:{cuda / 'lib64'}",  # libcaffe's own NEEDED, at link time
        "-lcaffe", "-lcudart", "-lglog", "-lgflags", "-lprotobuf", "-lboost_system", "-ldl", "-lpthread",
    ]
    tmp = out.with_name(out.name + ".tmp")
    cmd[cmd.index(str(out))] = str(tmp)
    run(cmd, log_to=tree / "probe-build.log")
    tmp.replace(out)
    return out


def cuda_env(cuda: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = f"{cuda / 'lib64'}:{env.get('LD_LIBRARY_PATH', '')}".rstrip(":")
    env.setdefault("GLOG_minloglevel", "0")
    return env


def tree_programs(tree: Path, cuda: Path) -> Programs:
    """A full build's programs (builds.build), the probe compiled for it."""
    return Programs(compile_probe(tree, cuda), tree / "build" / "tools" / "upgrade_net_proto_text", cuda_env(cuda))


def gpu_devices(programs: Programs) -> tuple[int, str]:
    """(number of devices, the probe's reason when none)."""
    proc = subprocess.run([str(programs.probe), "--devices"], check=False, capture_output=True, text=True, env=programs.env)
    count = 0
    for line in proc.stdout.splitlines():
        if line.startswith("devices "):
            count = int(line.split()[1])
    return count, (proc.stderr.strip() or f"probe exit {proc.returncode}")


def probe_run(programs: Programs, net: Path, phase: str, out: Path, device: int, timeout: float | None = None,
              env: dict[str, str] | None = None) -> dict:
    """The probe on `net` in `phase` (with `env` added to the programs' environment: the
    patched runtime's switches): its JSON (written to `out`), its log beside it."""
    try:
        proc = subprocess.run([str(programs.probe), str(net), phase.lower(), str(out), str(device)], check=False, capture_output=True,
                              text=True, env={**programs.env, **(env or {})}, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        raise RuntimeError(f"probe stopped after {timeout:.0f} s (the time budget)") from e
    (out.with_suffix(".log")).write_text(proc.stderr)
    if proc.returncode != 0:
        last = [line for line in proc.stderr.splitlines() if line.strip()][-3:]
        raise RuntimeError(f"probe exit {proc.returncode}: " + " | ".join(last))
    return json.loads(out.read_text())

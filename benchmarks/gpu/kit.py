"""There, on the GPU machine: `gpu_groundtruth.py run-bundle ARCHIVE` unpacks the kit
(bundle.py made it here), checks that it can run on this machine, and measures the corpus
with the kit's programs and this checkout's caffemem. `LD_LIBRARY_PATH` puts the variant's
lib/, the kit's lib/ and CUDA's folders (this Python's nvidia wheels) first."""

from __future__ import annotations

import json
import lzma
import os
import shutil
import subprocess
import tarfile
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from gpu.archive import pack_results, unpack
from gpu.configs import CONFIGS
from gpu.layout import FORMAT, MANIFEST, PROBE_NAME, VARIANTS, patch_key
from gpu.libraries import Resolved, find_cuda, kind, ldd, missing_cuda, version_key
from gpu.measure import measure
from gpu.probe import EXIT_NO_GPU, Programs
from gpu.shell import log


@dataclass(frozen=True)
class Kit:
    """An unpacked kit: its root, its manifest, and the CUDA folders found for it."""

    root: Path
    manifest: dict
    cuda: tuple[Path, ...]

    def library_path(self, variant: str, inherited: bool = True) -> list[Path]:
        """The variant's lib/, the kit's lib/, CUDA's folders, then (`inherited`) the
        machine's own LD_LIBRARY_PATH, where a container puts the driver's libcuda."""
        own = os.environ.get("LD_LIBRARY_PATH", "") if inherited else ""
        return [self.root / variant / "lib", self.root / "lib", *self.cuda, *(Path(p) for p in own.split(":") if p)]

    def env(self, variant: str, inherited: bool = True) -> dict[str, str]:
        env = dict(os.environ)
        env["LD_LIBRARY_PATH"] = ":".join(str(p) for p in self.library_path(variant, inherited))
        env.setdefault("GLOG_minloglevel", "0")
        return env

    def program(self, variant: str, name: str) -> Path:
        return self.root / variant / "bin" / name

    def programs(self, variant: str) -> Programs:
        return Programs(self.program(variant, PROBE_NAME), self.program(variant, "upgrade_net_proto_text"), self.env(variant))


def open_kit(archive: Path, dest: Path, cuda: list[Path] | None) -> Kit:
    root = unpack(archive, dest)
    manifest = json.loads((root / MANIFEST).read_text())
    if manifest.get("format") != FORMAT:
        raise RuntimeError(f"{archive}: made by another version of the kit ({manifest.get('format')!r}, this checkout reads {FORMAT!r}); rebuild it with `bundle`")
    dirs, _ = find_cuda(cuda)
    return Kit(root, manifest, tuple(dirs))


def preflight(kit: Kit) -> list[str]:
    """What stops the kit from running on this machine, as sentences (empty: nothing)."""
    problems = []
    missing = missing_cuda(list(kit.cuda))
    if missing:
        problems.append(f"CUDA libraries not found: {', '.join(missing)} (looked in {', '.join(map(str, kit.cuda)) or 'no folder'}); "
                        "install PyTorch cu130's nvidia wheels into this python3, or pass --cuda-lib DIR")
    needed = kit.manifest.get("glibc_needed")
    libc = os.confstr("CS_GNU_LIBC_VERSION").split()[-1] if hasattr(os, "confstr") else ""
    if needed and libc and version_key(libc) < version_key(needed):
        problems.append(f"this machine's glibc is {libc}; the kit's programs need {needed}")
    if kit.manifest.get("runtime_patch") != patch_key():
        problems.append("the kit's patched Caffe was built from another runtime patch than this checkout's caffemem "
                        f"(kit {kit.manifest.get('runtime_patch')}, checkout {patch_key()}): rebuild it with `gpu_groundtruth.py bundle`")
    return problems


def rehearse(kit: Kit) -> tuple[list[str], int]:
    """Checks the kit as the GPU machine will use it. `ldd` (where the machine has it), with
    only the kit's libraries and CUDA's folders on the library path, finds every library of
    every program and libcaffe, inside the kit, CUDA's folders or glibc, with every symbol
    version. Each program then starts with every symbol bound (LD_BIND_NOW) and does what it
    does without a GPU: the probe's `--devices` exits 3 (0 with a GPU), `caffe --version`
    prints its version, `upgrade_net_proto_text` upgrades a V1 net of the corpus. The
    programs run as the measurement will, the machine's LD_LIBRARY_PATH after the kit's
    (where a container puts the driver's libcuda). Returns (the problems, the probes' exit
    code)."""
    problems: list[str] = []
    allowed = [a.resolve() for a in (kit.root, *kit.cuda)]
    probe_exit = 0
    v1 = next((kit.root / "corpus" / f for f in kit.manifest["corpus"] if "legacy_v1" in f and f.endswith(".prototxt")), None)
    for variant in VARIANTS:
        if shutil.which("ldd"):
            for program in sorted((kit.root / variant / "bin").iterdir()) + sorted((kit.root / variant / "lib").iterdir()):
                problems += _ldd_problems(program.relative_to(kit.root), ldd(program, kit.library_path(variant, inherited=False)), allowed)
        env = {**kit.env(variant), "LD_BIND_NOW": "1"}
        runs = [([str(kit.program(variant, PROBE_NAME)), "--devices"], {0, EXIT_NO_GPU}),
                ([str(kit.program(variant, "caffe")), "--version"], {0})]
        if v1 is not None:
            runs.append(([str(kit.program(variant, "upgrade_net_proto_text")), str(v1), os.devnull], {0}))
        for cmd, ok in runs:
            proc = subprocess.run(cmd, check=False, capture_output=True, text=True, env=env, timeout=120)
            if proc.returncode not in ok:
                problems.append(f"{Path(cmd[0]).relative_to(kit.root)} {' '.join(cmd[1:2])}: exit {proc.returncode}: {proc.stderr.strip()[-300:]}")
            elif Path(cmd[0]).name == PROBE_NAME:
                probe_exit = max(probe_exit, proc.returncode)
                log(f"{variant} probe --devices: exit {proc.returncode}: {(proc.stdout + proc.stderr).strip()}")
    return problems, probe_exit


def _ldd_problems(name: Path, resolved: Resolved, allowed: list[Path]) -> list[str]:
    problems = []
    for lib, found in sorted(resolved.libraries.items()):
        if found is None:
            problems.append(f"{name}: ldd finds no {lib}")
        elif kind(lib) != "glibc" and not any(Path(found).resolve().is_relative_to(a) for a in allowed):
            problems.append(f"{name}: {lib} resolves to {found}, outside the kit and CUDA's folders")
    return problems + [f"{name}: {m}" for m in resolved.missing_versions]


def run_bundle(archive: Path, out: Path, pack_to: Path | None, names: list[str] | None, device: int, budget: float,
               cuda: list[Path] | None, rehearsal: bool, jobs: int) -> int:
    """`run-bundle`: unpack, check (preflight, rehearse), then (not `rehearsal`) measure the
    corpus with the kit's programs and this checkout's caffemem, writing `run`'s JSON into
    `out` (and packing `out` into `pack_to`). Exit codes: 0 measured; 1 the kit is broken
    or a run failed or was left; 2 bad input or the kit cannot run on this machine; 3 the
    kit is sound but there is no GPU."""
    if not archive.is_file():
        log(f"{archive}: no such file; make it with `python benchmarks/gpu_groundtruth.py bundle`")
        return 2
    t0 = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="caffemem-kit-"))
    try:
        kit = open_kit(archive, work, cuda)
        log(f"kit of {kit.manifest['built']} unpacked in {time.monotonic() - t0:.1f} s; CUDA from {', '.join(map(str, kit.cuda)) or 'nowhere'}")
        problems = preflight(kit)
        for p in problems:
            log(p)
        if problems:
            return 2
        problems, probe_exit = rehearse(kit)
        for p in problems:
            log(f"rehearsal: {p}")
        if problems:
            return 1
        log(f"rehearsal passed: every library found, every program starts; probes exit {probe_exit}")
        if rehearsal:
            return probe_exit
        if probe_exit == EXIT_NO_GPU:
            log(f"the kit is sound, but there is no GPU here (exit {EXIT_NO_GPU})")
            return EXIT_NO_GPU
        programs = {v: kit.programs(v) for v in VARIANTS}
        code = measure(CONFIGS, programs, kit.root / "corpus", names, out, device, deadline=t0 + budget, jobs=jobs,
                       caffe=f"bvlc 9b89154, CUDA build from the kit of {kit.manifest['built']}")
        if pack_to is not None:
            pack_results(out, pack_to)
        return code
    except (tarfile.TarError, lzma.LZMAError, EOFError) as e:
        log(f"{archive}: not a readable tar.xz ({e}); copy it again, or rebuild it with `bundle`")
        return 2
    except RuntimeError as e:
        log(str(e))
        return 1
    finally:
        shutil.rmtree(work, ignore_errors=True)

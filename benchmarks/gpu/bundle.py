"""Here: `gpu_groundtruth.py bundle` packs everything `run` needs except CUDA itself into
one archive (layout.py says what it holds), for `run-bundle` on a bare GPU machine (kit.py).

Why a kit: the GPU machines this project borrows (docs/gpu.md, "The kit") have CUDA 13 and a
Python with PyTorch's `nvidia-*` wheels, but no compiler toolchain for Caffe's dependencies, no
package manager, no network, at most 64 MiB of files beside the repository and ~11 minutes of
GPU time per visit. A full CUDA build of Caffe takes 10-35 minutes on 2 cores; building there
is out of the question. CUDA's runtime, cuBLAS, cuRAND and cuDNN 9 are taken there from its
Python's `nvidia` packages (the wheels PyTorch cu130 installs), the driver from the machine.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from gpu.archive import MIB, pack
from gpu.builds import KIT_ARCH, Variant, build, build_path
from gpu.cache import cache_root, digest
from gpu.corpus import corpus_files, key_inputs, stage_corpus
from gpu.layout import FORMAT, MANIFEST, PROBE_NAME, ROOT, TOOLS, VARIANTS, patch_key
from gpu.libraries import CUDA_NEEDED, glibc_versions, kind, ldd, version_key
from gpu.paths import PROBE, REPO, REQUIREMENTS
from gpu.probe import compile_probe
from gpu.shell import log
from gpu.toolkit import toolkit

#: Where `bundle` puts the archive in the checkout: ignored by git, so the device tool's
#: `carry` takes it (docs/gpu.md, "The kit").
CHECKOUT_ARCHIVE = REPO / ".gpu-bundle" / f"{ROOT}.tar.xz"


def bundle_key(trees: dict[str, Path]) -> str:
    """Every input of the archive: the builds (their cache names are their keys), the probe,
    the corpus, the layout."""
    return digest(*(trees[v].name for v in VARIANTS), PROBE, *key_inputs(), FORMAT)


def cache_archive(key: str) -> Path:
    return cache_root() / f"gpu-bundle-{key}" / f"{ROOT}.tar.xz"


def cached_archive() -> Path | None:
    """The archive of the current inputs if it is in the cache, without building anything."""
    trees = {}
    for v in VARIANTS:
        tree, built = build_path(Variant(v))
        if not built:
            return None
        trees[v] = tree
    archive = cache_archive(bundle_key(trees))
    return archive if archive.is_file() else None


def _strip(path: Path) -> None:
    subprocess.run(["strip", "--strip-unneeded", str(path)], check=True, capture_output=True)


def stage(trees: dict[str, Path], probes: dict[str, Path], cuda: Path, dest: Path) -> dict:
    """Lays the kit out in `dest` (layout.py); returns the manifest."""
    lib = dest / "lib"
    lib.mkdir(parents=True)
    programs: list[Path] = []
    for v in VARIANTS:
        (dest / v / "bin").mkdir(parents=True)
        (dest / v / "lib").mkdir()
        built = trees[v] / "build"
        libcaffe = (built / "lib" / "libcaffe.so.1.0.0").resolve()
        shutil.copy2(libcaffe, dest / v / "lib" / "libcaffe.so.1.0.0")
        for tool in TOOLS:
            shutil.copy2((built / "tools" / tool).resolve(), dest / v / "bin" / tool)
        shutil.copy2(probes[v], dest / v / "bin" / PROBE_NAME)
        for f in [dest / v / "lib" / "libcaffe.so.1.0.0", *(dest / v / "bin").iterdir()]:
            _strip(f)
            programs.append(f)
    # Every library the programs load, as the build machine resolves it; each "kit" one is
    # copied (its target, under the name the loader asks for).
    search = [trees["stock"] / "build" / "lib", cuda / "lib64"]
    needed: dict[str, str] = {}
    for program in programs:
        resolved = ldd(program, [program.parent.parent / "lib", *search])
        if resolved.not_found:
            raise RuntimeError(f"{program.relative_to(dest)}: ldd finds no {', '.join(resolved.not_found)} on this machine")
        for name, path in resolved.libraries.items():
            if kind(name) == "kit" and name != "libcaffe.so.1.0.0":
                needed.setdefault(name, path or "")
    for name, path in sorted(needed.items()):
        shutil.copy2(Path(path).resolve(), lib / name)
    glibc = set()
    for f in [*programs, *lib.iterdir()]:
        glibc |= glibc_versions(f)
    stage_corpus(dest / "corpus")
    manifest = {
        "format": FORMAT,
        "built": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "variants": {v: {"tree": trees[v].name, "programs": sorted(str(p.relative_to(dest)) for p in programs if p.is_relative_to(dest / v))} for v in VARIANTS},
        "runtime_patch": patch_key(),
        "cuda_arch": KIT_ARCH,
        "toolkit": [line for line in REQUIREMENTS.read_text().splitlines() if line and not line.startswith("#")],
        "cuda_needed": list(CUDA_NEEDED),
        "libraries": {name: str(Path(path).resolve()) for name, path in sorted(needed.items())},
        "glibc_needed": max(glibc, key=version_key) if glibc else None,
        "corpus": [str(f) for f in corpus_files()],
    }
    (dest / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    return manifest


def bundle() -> Path:
    """Builds (or reuses) both CUDA trees, links the kit's probes, lays the kit out, packs it
    (cached on bundle_key) and copies the archive to CHECKOUT_ARCHIVE. Returns that path."""
    cuda = toolkit()
    trees = {v: build(Variant(v)) for v in VARIANTS}
    archive = cache_archive(bundle_key(trees))
    if not archive.is_file():
        t0 = time.monotonic()
        with tempfile.TemporaryDirectory(prefix="caffemem-bundle-") as tmp:
            root = Path(tmp) / ROOT
            probes = {v: compile_probe(trees[v], cuda, kit=True) for v in VARIANTS}
            manifest = stage(trees, probes, cuda, root)
            size = pack(root, archive)
        log(f"GPU bundle packed in {time.monotonic() - t0:.0f} s: {archive} ({size / MIB:.1f} MiB; "
            f"{len(manifest['libraries'])} libraries; needs glibc >= {manifest['glibc_needed']})")
    CHECKOUT_ARCHIVE.parent.mkdir(exist_ok=True)
    (CHECKOUT_ARCHIVE.parent / ".gitignore").write_text("*\n")
    tmp_copy = CHECKOUT_ARCHIVE.with_name(CHECKOUT_ARCHIVE.name + ".tmp")
    shutil.copyfile(archive, tmp_copy)
    tmp_copy.replace(CHECKOUT_ARCHIVE)
    log(f"GPU bundle: {CHECKOUT_ARCHIVE} ({archive.stat().st_size / MIB:.1f} MiB)")
    return CHECKOUT_ARCHIVE

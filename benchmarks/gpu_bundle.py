"""The measurement kit for a bare GPU machine (issue 22 item 4): `gpu_groundtruth.py bundle`
packs, here, everything `gpu_groundtruth.py run` needs except CUDA itself into one archive;
`gpu_groundtruth.py run-bundle ARCHIVE` unpacks it on the GPU machine and measures the corpus.

Why a kit: the GPU machines this project borrows (docs/gpu.md, "The kit") have CUDA 13 and a
Python with PyTorch's `nvidia-*` wheels, but no compiler toolchain for Caffe's dependencies, no
package manager, no network, at most 64 MiB of files beside the repository and ~11 minutes of
GPU time per visit. A full CUDA build of Caffe takes 10-35 minutes on 2 cores; building there
is out of the question. So the kit carries:

- `stock/` and `patched/`: each variant's `libcaffe.so.1.0.0` (lib/), the `caffe` tool,
  `upgrade_net_proto_text` (V1 nets of the corpus) and the probe (bin/), all stripped. Caffe's
  Makefile links the tools with RUNPATH `$ORIGIN/../lib`, and the probe is linked the same way
  for the kit, so nothing points back at this machine's build trees;
- `lib/`: every shared library those programs load that is neither glibc's nor CUDA's
  (glog, gflags, protobuf, boost, HDF5 and what it pulls in, OpenBLAS, libstdc++ ...), found
  with `ldd` and copied under the name the loader asks for;
- `corpus/`: the BVLC files of ../shared/groundtruth and the prototxts they name (../shared
  does not travel to the GPU machine);
- `MANIFEST.json`: what was built from what (the runtime patch's digest among it), the CUDA
  sonames the programs need, the newest glibc symbol version they need.

CUDA's runtime, cuBLAS, cuRAND and cuDNN 9 are taken on the GPU machine from its Python's
`nvidia` packages (the wheels PyTorch cu130 installs: nvidia/cu13/lib, nvidia/cudnn/lib), and
the driver (libcuda.so.1) from the machine. `LD_LIBRARY_PATH` puts the variant's lib/, the
kit's lib/ and those CUDA folders first.

The archive is a tar compressed with xz (Python's tarfile unpacks it: no xz binary needed
there); its size limit, 48 MiB, leaves room for the repository within the 64 MiB that travel.
"""

from __future__ import annotations

import importlib.util
import json
import lzma
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import gpu_groundtruth as gg

MIB = 1 << 20
#: The archive's limit: the repository (~10 MiB) and the archive travel together in 64 MiB.
ARCHIVE_LIMIT = 48 * MIB
#: What `run-bundle --pack` may write: the device tool brings back files of at most 16 MiB.
RESULTS_LIMIT = 15 * MIB
#: The layout of the kit; bump it when the layout or what the kit holds changes.
FORMAT = "caffemem gpu bundle v1"
#: Where `bundle` puts the archive in the checkout: ignored by git, so the device tool's
#: `carry` takes it (docs/gpu.md, "The kit").
CHECKOUT_ARCHIVE = gg.REPO / ".gpu-bundle" / "caffemem-gpu-bundle.tar.xz"
#: The programs of each variant, by their name in bin/ (the probe's source is gg.PROBE).
TOOLS = ("caffe", "upgrade_net_proto_text")
PROBE_NAME = "caffemem_gpu_probe"
VARIANTS = ("stock", "patched")

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


def is_elf(path: Path) -> bool:
    with open(path, "rb") as f:
        return f.read(4) == b"\x7fELF"


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
    toolkit, installed = gg.toolkit_path()
    if installed:
        return cuda_dirs([toolkit.parent / "wheels" / "nvidia"]), "the pinned CUDA wheels in the cache"
    return [], "nowhere"


def missing_cuda(dirs: list[Path]) -> list[str]:
    return [name for name in CUDA_NEEDED if not any((d / name).exists() for d in dirs)]


# ----------------------------------------------------------------------------- packing


def corpus_files() -> list[Path]:
    """The ground-truth files `run` reads (the BVLC ones) and the prototxts they name,
    relative to ../shared."""
    files = [Path("groundtruth") / "README.md"] if (gg.GROUNDTRUTH / "README.md").is_file() else []
    for gt_file in sorted(gg.GROUNDTRUTH.glob("*.json")):
        gt = json.loads(gt_file.read_text())
        if gt.get("caffe") == "bvlc":
            files += [gt_file.relative_to(gg.SHARED), Path(gt["source"])]
    return files


def bundle_key(trees: dict[str, Path]) -> str:
    """Every input of the archive: the builds (their cache names are their keys), the probe,
    the corpus, the layout."""
    return gg.digest(*(trees[v].name for v in VARIANTS), gg.PROBE, *(gg.SHARED / f for f in corpus_files()),
                     *(str(f) for f in corpus_files()), FORMAT)


def cache_archive(key: str) -> Path:
    return gg.cache_root() / f"gpu-bundle-{key}" / "caffemem-gpu-bundle.tar.xz"


def cached_archive() -> Path | None:
    """The archive of the current inputs if it is in the cache, without building anything."""
    trees = {}
    for v in VARIANTS:
        tree, built = gg.build_path(gg.Variant(v))
        if not built:
            return None
        trees[v] = tree
    archive = cache_archive(bundle_key(trees))
    return archive if archive.is_file() else None


def _strip(path: Path) -> None:
    subprocess.run(["strip", "--strip-unneeded", str(path)], check=True, capture_output=True)


def stage(trees: dict[str, Path], probes: dict[str, Path], cuda: Path, dest: Path) -> dict:
    """Lays the kit out in `dest` (see the module docstring); returns the manifest."""
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
    (dest / "corpus").mkdir()
    for rel in corpus_files():
        (dest / "corpus" / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(gg.SHARED / rel, dest / "corpus" / rel)
    manifest = {
        "format": FORMAT,
        "built": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "variants": {v: {"tree": trees[v].name, "programs": sorted(str(p.relative_to(dest)) for p in programs if p.is_relative_to(dest / v))} for v in VARIANTS},
        "runtime_patch": patch_key(),
        "cuda_arch": gg.CUDA_ARCH,
        "toolkit": [line for line in gg.REQUIREMENTS.read_text().splitlines() if line and not line.startswith("#")],
        "cuda_needed": list(CUDA_NEEDED),
        "libraries": {name: str(Path(path).resolve()) for name, path in sorted(needed.items())},
        "glibc_needed": max(glibc, key=version_key) if glibc else None,
        "corpus": [str(f) for f in corpus_files()],
    }
    (dest / "MANIFEST.json").write_text(json.dumps(manifest, indent=1) + "\n")
    return manifest


def patch_key() -> str:
    """The digest of the runtime patch's files: the kit's patched Caffe and the checkout's
    `caffemem optimize` must agree on it."""
    return gg.digest(*gg.patch_files(gg.Flavour.BVLC))


def _members(root: Path) -> list[Path]:
    """The files to archive in a fixed order that puts the two libcaffe.so side by side, so
    xz's window finds the second in the first (they differ in a few objects)."""
    files = sorted(p for p in root.rglob("*") if p.is_file())
    return sorted(files, key=lambda p: (p.name != "libcaffe.so.1.0.0", str(p)))


def pack(root: Path, archive: Path, limit: int = ARCHIVE_LIMIT) -> int:
    """tar + xz (x86 filter for the machine code, LZMA2 with a window larger than one
    libcaffe) of `root` into `archive`, written atomically; refuses an archive over `limit`,
    naming the largest members. Returns its size in bytes."""
    filters = [{"id": lzma.FILTER_X86}, {"id": lzma.FILTER_LZMA2, "preset": 9 | lzma.PRESET_EXTREME, "dict_size": 256 * MIB}]
    tmp = archive.with_name(archive.name + f".tmp.{os.getpid()}")
    archive.parent.mkdir(parents=True, exist_ok=True)
    with lzma.open(tmp, "wb", format=lzma.FORMAT_XZ, filters=filters) as xz, tarfile.open(fileobj=xz, mode="w") as tar:
        for f in _members(root):
            tar.add(f, arcname=str(f.relative_to(root.parent)), recursive=False)
    size = tmp.stat().st_size
    try:
        check_size(size, root, limit)
    except RuntimeError:
        tmp.unlink()
        raise
    tmp.replace(archive)
    return size


def check_size(size: int, root: Path, limit: int = ARCHIVE_LIMIT) -> None:
    if size <= limit:
        return
    largest = sorted((p for p in root.rglob("*") if p.is_file()), key=lambda p: -p.stat().st_size)[:8]
    listing = ", ".join(f"{p.relative_to(root)} {p.stat().st_size / MIB:.1f} MiB" for p in largest)
    raise RuntimeError(f"the GPU bundle is {size / MIB:.1f} MiB compressed, over its limit of {limit / MIB:.0f} MiB "
                       f"(the repository and the archive travel in 64 MiB); the largest files, uncompressed: {listing}")


def bundle() -> Path:
    """Builds (or reuses) both CUDA trees, links the kit's probes, lays the kit out, packs it
    (cached on bundle_key) and copies the archive to CHECKOUT_ARCHIVE. Returns that path."""
    cuda = gg.toolkit()
    trees = {v: gg.build(gg.Variant(v)) for v in VARIANTS}
    archive = cache_archive(bundle_key(trees))
    if not archive.is_file():
        t0 = time.monotonic()
        with tempfile.TemporaryDirectory(prefix="caffemem-bundle-") as tmp:
            root = Path(tmp) / "caffemem-gpu-bundle"
            probes = {v: gg.compile_probe(trees[v], cuda, kit=True) for v in VARIANTS}
            manifest = stage(trees, probes, cuda, root)
            size = pack(root, archive)
        gg.log(f"GPU bundle packed in {time.monotonic() - t0:.0f} s: {archive} ({size / MIB:.1f} MiB; "
               f"{len(manifest['libraries'])} libraries; needs glibc >= {manifest['glibc_needed']})")
    CHECKOUT_ARCHIVE.parent.mkdir(exist_ok=True)
    (CHECKOUT_ARCHIVE.parent / ".gitignore").write_text("*\n")
    tmp_copy = CHECKOUT_ARCHIVE.with_name(CHECKOUT_ARCHIVE.name + ".tmp")
    shutil.copyfile(archive, tmp_copy)
    tmp_copy.replace(CHECKOUT_ARCHIVE)
    gg.log(f"GPU bundle: {CHECKOUT_ARCHIVE} ({archive.stat().st_size / MIB:.1f} MiB)")
    return CHECKOUT_ARCHIVE


# ----------------------------------------------------------------------------- on the GPU machine


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

    def programs(self, variant: str) -> gg.Programs:
        return gg.Programs(self.program(variant, PROBE_NAME), self.program(variant, "upgrade_net_proto_text"), self.env(variant))


def unpack(archive: Path, dest: Path) -> Path:
    """Unpacks the archive into `dest`; returns the kit's root. Refuses members that would
    land outside `dest` (tarfile's "data" filter where this Python has it)."""
    with tarfile.open(archive, "r:xz") as tar:
        names = tar.getnames()
        if any(name.startswith("/") or ".." in Path(name).parts for name in names):
            raise RuntimeError(f"{archive}: a member's path leaves the folder; not a caffemem GPU bundle")
        if hasattr(tarfile, "data_filter"):
            tar.extractall(dest, filter="data")
        else:
            tar.extractall(dest)
    root = dest / "caffemem-gpu-bundle"
    if not (root / "MANIFEST.json").is_file():
        raise RuntimeError(f"{archive}: no caffemem-gpu-bundle/MANIFEST.json; not a caffemem GPU bundle")
    return root


def open_kit(archive: Path, dest: Path, cuda: list[Path] | None) -> Kit:
    root = unpack(archive, dest)
    manifest = json.loads((root / "MANIFEST.json").read_text())
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
        runs = [([str(kit.program(variant, PROBE_NAME)), "--devices"], {0, gg.EXIT_NO_GPU}),
                ([str(kit.program(variant, "caffe")), "--version"], {0})]
        if v1 is not None:
            runs.append(([str(kit.program(variant, "upgrade_net_proto_text")), str(v1), os.devnull], {0}))
        for cmd, ok in runs:
            proc = subprocess.run(cmd, check=False, capture_output=True, text=True, env=env, timeout=120)
            if proc.returncode not in ok:
                problems.append(f"{Path(cmd[0]).relative_to(kit.root)} {' '.join(cmd[1:2])}: exit {proc.returncode}: {proc.stderr.strip()[-300:]}")
            elif Path(cmd[0]).name == PROBE_NAME:
                probe_exit = max(probe_exit, proc.returncode)
                gg.log(f"{variant} probe --devices: exit {proc.returncode}: {(proc.stdout + proc.stderr).strip()}")
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
        gg.log(f"{archive}: no such file; make it with `python benchmarks/gpu_groundtruth.py bundle`")
        return 2
    t0 = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="caffemem-kit-"))
    try:
        kit = open_kit(archive, work, cuda)
        gg.log(f"kit of {kit.manifest['built']} unpacked in {time.monotonic() - t0:.1f} s; CUDA from {', '.join(map(str, kit.cuda)) or 'nowhere'}")
        problems = preflight(kit)
        for p in problems:
            gg.log(p)
        if problems:
            return 2
        problems, probe_exit = rehearse(kit)
        for p in problems:
            gg.log(f"rehearsal: {p}")
        if problems:
            return 1
        gg.log(f"rehearsal passed: every library found, every program starts; probes exit {probe_exit}")
        if rehearsal:
            return probe_exit
        if probe_exit == gg.EXIT_NO_GPU:
            gg.log(f"the kit is sound, but there is no GPU here (exit {gg.EXIT_NO_GPU})")
            return gg.EXIT_NO_GPU
        programs = {v: kit.programs(v) for v in VARIANTS}
        code = gg.measure(gg.CONFIGS, programs, kit.root / "corpus", names, out, device, deadline=t0 + budget, jobs=jobs,
                          caffe=f"bvlc 9b89154, CUDA build from the kit of {kit.manifest['built']}")
        if pack_to is not None:
            pack_results(out, pack_to)
        return code
    except (tarfile.TarError, lzma.LZMAError, EOFError) as e:
        gg.log(f"{archive}: not a readable tar.xz ({e}); copy it again, or rebuild it with `bundle`")
        return 2
    except RuntimeError as e:
        gg.log(str(e))
        return 1
    finally:
        shutil.rmtree(work, ignore_errors=True)


def pack_results(out: Path, dest: Path, limit: int = RESULTS_LIMIT) -> None:
    """`out` as one .tar.xz (the device tool brings back at most 8 files, each at most
    16 MiB); over `limit`, packed again without the probes' glog logs, the bulk of it."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(dest.name + ".tmp")
    for skip_logs in (False, True):
        with tarfile.open(tmp, "w:xz") as tar:
            tar.add(out, arcname=out.name, filter=lambda info: None if skip_logs and info.name.endswith(".probe.log") else info)
        if tmp.stat().st_size <= limit:
            break
        gg.log(f"results packed: {tmp.stat().st_size / MIB:.1f} MiB, over {limit / MIB:.0f} MiB" + ("" if skip_logs else "; again without the probe logs"))
    tmp.replace(dest)
    gg.log(f"results packed: {dest} ({dest.stat().st_size / 1024:.0f} KiB)")

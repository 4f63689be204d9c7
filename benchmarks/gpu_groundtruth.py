"""GPU ground truth (issue 18): build BVLC Caffe with CUDA from ../shared/caffe, stock and
caffemem-patched, and measure what each net of ../shared/groundtruth takes on the card and in
pinned host memory, per layer, in forward and backward, plus the per-process constant.
docs/gpu.md says how to run it and what the JSON holds.

    python benchmarks/gpu_groundtruth.py toolkit      # install the CUDA wheels; print CUDA_DIR
    python benchmarks/gpu_groundtruth.py check        # CI: compile the GPU code of the patch
    python benchmarks/gpu_groundtruth.py build        # full CUDA builds, stock and patched
    python benchmarks/gpu_groundtruth.py run [--out DIR] [--nets NAME ...] [--device N]

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
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from caffemem.runtime import Flavour, apply_edits_file, apply_patch, patch_files

GPU = REPO / "benchmarks" / "gpu"
REQUIREMENTS = GPU / "requirements.txt"
CUDA_FIX = GPU / "fix-for-cuda13.edits"
PROBE = GPU / "probe.cpp"
SHARED = REPO.parent / "shared"
TARBALL = SHARED / "caffe" / "bvlc-caffe-9b89154.tar.xz"
DEBIAN_FIX = SHARED / "caffe" / "fix-for-debian12.sh"
GROUNDTRUTH = SHARED / "groundtruth"

EXIT_NO_GPU = 3
#: SASS for Ampere (sm_80; also runs on sm_86/sm_89) and Hopper (sm_90), and compute_75 PTX
#: that the driver compiles at load time for Turing (T4) and for cards newer than sm_90.
CUDA_ARCH = "-gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 -gencode arch=compute_75,code=compute_75"
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
]
#: Layer types whose tops the ground truth fed through Input layers (they read files); so is
#: any other layer without bottoms whose tops are all inputs of the run (fork data layers).
DATA_LAYERS = {"Data", "ImageData", "WindowData", "HDF5Data", "MemoryData", "Python", "DummyData", "VideoData"}


def log(msg: str) -> None:
    print(f"[gpu_groundtruth] {msg}", file=sys.stderr, flush=True)


def cache_root() -> Path:
    root = Path(os.environ.get("CAFFEMEM_CACHE", "/var/cache/caffemem"))
    try:
        root.mkdir(parents=True, exist_ok=True)
        if os.access(root, os.W_OK):
            return root
    except OSError:
        pass
    root = Path.home() / ".cache" / "caffemem"
    root.mkdir(parents=True, exist_ok=True)
    return root


def digest(*parts: Path | str) -> str:
    """Key of a cached directory: the bytes of the files and the strings given."""
    h = hashlib.sha256()
    for p in parts:
        h.update(p.read_bytes() if isinstance(p, Path) else p.encode())
        h.update(b"\0")
    return h.hexdigest()[:16]


def _publish(work: Path, dest: Path) -> Path:
    (work / ".caffemem-ok").touch()
    shutil.rmtree(dest, ignore_errors=True)
    work.rename(dest)
    return dest


def _run(cmd: list[str], cwd: Path | None = None, env: dict | None = None, log_to: Path | None = None) -> None:
    log(" ".join(cmd) + (f"  (in {cwd})" if cwd else ""))
    if log_to is None:
        subprocess.run(cmd, cwd=cwd, env=env, check=True, stdout=sys.stderr)
        return
    with open(log_to, "w") as out:
        proc = subprocess.run(cmd, check=False, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT)
    if proc.returncode != 0:
        tail = log_to.read_text(errors="replace").splitlines()[-60:]
        raise RuntimeError(f"{' '.join(cmd[:3])} ... failed (exit {proc.returncode}); the end of {log_to}:\n" + "\n".join(tail))


# ----------------------------------------------------------------------------- toolkit


def toolkit_path() -> tuple[Path, bool]:
    """(the CUDA_DIR of the pinned toolkit in the cache, whether it is installed)."""
    dest = cache_root() / f"cuda-{digest(REQUIREMENTS, 'layout v1')}"
    return dest / "toolkit", (dest / ".caffemem-ok").is_file()


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
    _run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--disable-pip-version-check", "--target", str(wheels), "-r", str(REQUIREMENTS)])
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
    _publish(work, dest)
    return cuda


# ----------------------------------------------------------------------------- trees


def makefile_config(cuda: Path) -> str:
    """Caffe's Makefile.config for the CUDA build (the CPU one of .ci/build_caffe.sh with
    CPU_ONLY off, cuDNN on, our CUDA_DIR and CUDA_ARCH). CCCL 3 keeps thrust and cub in
    include/cccl, which nvcc finds by itself (nvcc.profile) but g++ does not: some .cpp
    include thrust. Changing it: bump the "v2" of the keys in check() and build()."""
    return f"""USE_CUDNN := 1
CUDA_DIR := {cuda}
CUDA_ARCH := {CUDA_ARCH}
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

    def key_inputs(self) -> list[Path | str]:
        parts: list[Path | str] = [TARBALL, DEBIAN_FIX, CUDA_FIX, REQUIREMENTS, CUDA_ARCH]
        if self.patched:
            parts += patch_files(Flavour.BVLC)
        return parts


#: Debian packages a BVLC build needs (the list of .ci/build_caffe.sh).
DEBIAN_PACKAGES = [
    "build-essential", "libboost-system-dev", "libboost-thread-dev", "libboost-filesystem-dev", "libboost-regex-dev",
    "libgoogle-glog-dev", "libgflags-dev", "libprotobuf-dev", "protobuf-compiler", "libhdf5-dev", "libopenblas-dev",
]


def ensure_packages() -> None:
    """apt-get install what is missing of DEBIAN_PACKAGES (not with CAFFEMEM_NO_APT=1)."""
    if os.environ.get("CAFFEMEM_NO_APT") == "1":
        return
    missing = [p for p in DEBIAN_PACKAGES if subprocess.run(["dpkg", "-s", p], check=False, capture_output=True).returncode != 0]
    if missing:
        _run(["apt-get", "update", "-qq"])
        _run(["apt-get", "install", "-y", "-qq", *missing], env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})


def unpack(variant: Variant, work: Path, cuda: Path) -> Path:
    """A fresh tree: the tarball, the Debian 12 fix, the CUDA 13 fix, (patched) the caffemem
    runtime patch, and the CUDA Makefile.config."""
    ensure_packages()
    _run(["tar", "-xJf", str(TARBALL), "-C", str(work)])
    _run(["bash", str(DEBIAN_FIX), str(work)])
    log(f"CUDA 13 fix: {', '.join(apply_edits_file(work, CUDA_FIX)) or 'already applied'}")
    if variant.patched:
        log(apply_patch(work).describe())
    (work / "Makefile.config").write_text(makefile_config(cuda))
    return work


def jobs() -> str:
    return os.environ.get("CAFFEMEM_JOBS", "2")


def make(tree: Path, targets: list[str], log_name: str) -> float:
    t0 = time.monotonic()
    _run(["make", f"-j{jobs()}", "CUSTOM_CXX=g++", *targets], cwd=tree, log_to=tree / log_name)
    return time.monotonic() - t0


def check() -> Path:
    """CI: compile CHECK_OBJECTS of the patched tree with the CUDA toolkit (no GPU needed).
    Cached on every input; returns the tree."""
    cuda = toolkit()
    variant = Variant("patched")
    dest = cache_root() / f"cuda-check-{digest(*variant.key_inputs(), *CHECK_OBJECTS, 'check v2')}"
    if (dest / ".caffemem-ok").is_file():
        log(f"CUDA compile check: cached ({dest})")
        return dest
    work = dest.with_name(dest.name + f".tmp.{os.getpid()}")
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    try:
        unpack(variant, work, cuda)
        seconds = make(work, CHECK_OBJECTS, "check.log")
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)  # nothing to resume: it is small
        raise
    log(f"CUDA compile check: {len(CHECK_OBJECTS)} objects compiled in {seconds:.0f} s")
    (work / "check-seconds.txt").write_text(f"{seconds:.0f}\n")
    return _publish(work, dest)


def build_path(variant: Variant) -> tuple[Path, bool]:
    """(the variant's full build in the cache, whether it is there), building nothing."""
    dest = cache_root() / f"bvlc-cuda-{variant.name}-{digest(*variant.key_inputs(), 'build v2')}"
    return dest, (dest / ".caffemem-ok").is_file()


def build(variant: Variant) -> Path:
    """The full CUDA build (`make lib tools`), cached; returns the tree."""
    cuda = toolkit()
    dest, built = build_path(variant)
    if built:
        return dest
    with open(dest.with_name(dest.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one make per tree: a second `build`/`bundle` waits for the first
        if (dest / ".caffemem-ok").is_file():
            return dest
        # An interrupted or failed build resumes in its .partial tree (make is incremental).
        work = dest.with_name(dest.name + ".partial")
        if not (work / ".caffemem-unpacked").is_file():
            shutil.rmtree(work, ignore_errors=True)
            work.mkdir(parents=True)
            unpack(variant, work, cuda)
            (work / ".caffemem-unpacked").touch()
        (work / "Makefile.config").write_text(makefile_config(cuda))
        seconds = make(work, ["lib", "tools"], "build.log")
        log(f"{variant.name}: Caffe built with CUDA in {seconds / 60:.1f} min")
        (work / "build-seconds.txt").write_text(f"{seconds:.0f}\n")
        return _publish(work, dest)


def compile_probe(tree: Path, cuda: Path, kit: bool = False) -> Path:
    """benchmarks/gpu/probe.cpp against the built libcaffe (same defines as the library),
    into the built tree, named by the probe's digest. `kit`: for the GPU bundle, which finds
    libcaffe beside it ($ORIGIN/../lib, as Caffe's tools do) and everything else on
    LD_LIBRARY_PATH, instead of in this machine's build tree and toolkit."""
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
    _run(cmd, log_to=tree / "probe-build.log")
    tmp.replace(out)
    return out


# ----------------------------------------------------------------------------- measuring


@dataclass(frozen=True)
class Programs:
    """One variant's programs and the environment they run in: a build tree's (`run`) or an
    unpacked GPU bundle's (`run-bundle`, benchmarks/gpu_bundle.py)."""

    probe: Path
    upgrade: Path  # upgrade_net_proto_text: the V1 nets of the corpus
    env: dict[str, str]


@dataclass(frozen=True)
class Config:
    """One measured configuration: which build runs the nets, and the `caffemem optimize`
    options their plan is made with (None: the net as it is, stock Caffe). `name` is its
    folder in the output."""

    name: str
    variant: str
    plan: tuple[str, ...] | None
    phases: tuple[str, ...] = ("TRAIN", "TEST")  # the phases it runs (recompute: only where Backward runs)


#: Stock Caffe; the patched Caffe with the blob plan; the same with --share-buffers; stock
#: Caffe again (its digests tell a plan's difference from cuDNN's own run-to-run one); the
#: patched Caffe running `optimize --recompute sqrt`'s plan (runtime patch v4), TRAIN only.
CONFIGS = (
    Config("stock", "stock", None),
    Config("patched", "patched", ()),
    Config("patched-buffers", "patched", ("--share-buffers",)),
    Config("stock-again", "stock", None),
    Config("patched-recompute", "patched", ("--recompute", "sqrt"), ("TRAIN",)),
)


def cuda_env(cuda: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = f"{cuda / 'lib64'}:{env.get('LD_LIBRARY_PATH', '')}".rstrip(":")
    env.setdefault("GLOG_minloglevel", "0")
    return env


def tree_programs(tree: Path, cuda: Path) -> Programs:
    return Programs(compile_probe(tree, cuda), tree / "build" / "tools" / "upgrade_net_proto_text", cuda_env(cuda))


def gpu_devices(programs: Programs) -> tuple[int, str]:
    """(number of devices, the probe's reason when none)."""
    proc = subprocess.run([str(programs.probe), "--devices"], check=False, capture_output=True, text=True, env=programs.env)
    count = 0
    for line in proc.stdout.splitlines():
        if line.startswith("devices "):
            count = int(line.split()[1])
    return count, (proc.stderr.strip() or f"probe exit {proc.returncode}")


def caffe_pb2():
    from caffemem.schema import caffe_pb2 as pb

    return pb


def prepare_net(source: Path, phase: str, inputs: dict[str, list[int]], programs: Programs, out: Path) -> Path:
    """The net as the ground truth ran it: upgraded by Caffe's own tool when it is in an old
    format, its data layers for `phase` replaced by one Input layer with the ground truth's
    shapes (tests/runtime/runtime_nets.make_net does the same for the CPU runtime tests)."""
    from google.protobuf import text_format

    pb = caffe_pb2()
    text = source.read_text()
    net = text_format.Parse(text, pb.NetParameter(), allow_unknown_field=True)
    if net.layers:  # V1: Caffe's upgrade_net_proto_text
        upgraded = out.with_suffix(".upgraded.prototxt")
        subprocess.run([str(programs.upgrade), str(source), str(upgraded)], check=True, capture_output=True, env=programs.env)
        net = text_format.Parse(upgraded.read_text(), pb.NetParameter(), allow_unknown_field=True)
    phase_value = getattr(pb, phase)
    layers = list(net.layer)
    del net.layer[:]
    done = False
    for layer in layers:
        feeds = not layer.bottom and layer.type != "Input" and set(layer.top) <= set(inputs)
        if inputs and (layer.type in DATA_LAYERS or feeds):
            rules = [r for r in layer.include if r.HasField("phase")]
            if (rules and not any(r.phase == phase_value for r in rules)) or done:
                continue
            new = pb.LayerParameter(name=layer.name, type="Input")
            for top, shape in inputs.items():
                new.top.append(top)
                new.input_param.shape.add().dim.extend(shape)
            net.layer.append(new)
            done = True
        else:
            net.layer.add().CopyFrom(layer)
    out.write_text(text_format.MessageToString(net))
    return out


def caffemem(args: list[str], stdout: Path) -> None:
    """This checkout's `caffemem ARGS` in GPU mode, its JSON on `stdout` kept beside the run
    (the model's figures for the same net, to compare with the measurement)."""
    proc = subprocess.run(
        [sys.executable, "-m", "caffemem", *args, "--device", "gpu", "--json"],
        check=False, capture_output=True, text=True, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    stdout.write_text(proc.stdout)
    if proc.returncode != 0:
        raise RuntimeError(f"caffemem {' '.join(args[:1])} {Path(args[1]).name}: exit {proc.returncode}: {proc.stderr.strip()[-2000:]}")


def optimize(net: Path, phase: str, out: Path, options: tuple[str, ...] = ()) -> Path:
    """`caffemem optimize` for a patched run (the slot table for this phase); its JSON goes
    to OUT.optimize.json."""
    caffemem(["optimize", str(net), "--phase", phase.lower(), *options, "-o", str(out)], out.with_suffix(".optimize.json"))
    return out


def probe_run(programs: Programs, net: Path, phase: str, out: Path, device: int, timeout: float | None = None) -> dict:
    try:
        proc = subprocess.run([str(programs.probe), str(net), phase.lower(), str(out), str(device)], check=False, capture_output=True,
                              text=True, env=programs.env, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        raise RuntimeError(f"probe stopped after {timeout:.0f} s (the time budget)") from e
    (out.with_suffix(".log")).write_text(proc.stderr)
    if proc.returncode != 0:
        last = [line for line in proc.stderr.splitlines() if line.strip()][-3:]
        raise RuntimeError(f"probe exit {proc.returncode}: " + " | ".join(last))
    return json.loads(out.read_text())


def merge(gt_run: dict, measured: dict) -> dict:
    """The ground truth's run (CPU figures) with the GPU figures added: per layer `gpu`
    (setup, forward, backward), per run `gpu` (construction, inputs, end state)."""
    run = dict(gt_run)
    by_name = {layer["name"]: layer for layer in measured["layers"]}
    layers = []
    for layer in gt_run.get("layers", []):
        entry = dict(layer)
        got = by_name.get(layer["name"])
        if got is not None:
            entry["gpu"] = {k: got[k] for k in ("setup", "forward", "backward") if k in got}
        layers.append(entry)
    run["layers"] = layers
    run["gpu"] = {k: measured[k] for k in ("construct", "fill_inputs", "end")}
    run["gpu"]["layers_not_in_groundtruth"] = sorted(set(by_name) - {layer["name"] for layer in gt_run.get("layers", [])})
    return run


@dataclass(frozen=True)
class Task:
    """One run of one ground-truth file in one configuration."""

    gt_file: Path
    gt: dict
    gt_run: dict
    config: Config

    @property
    def stem(self) -> str:
        return f"{self.gt_file.stem}.{self.gt_run['phase']}"


def convolution_groups(source: Path) -> int:
    """The groups of the net's convolutions, summed (1 for a convolution without `group`).
    BVLC's CuDNNConvolutionLayer makes 3 cuDNN handles and 3 streams per group in LayerSetUp
    (cudnn_conv_layer.cpp): MobileNet's depthwise convolutions ask for ~15,000 of each, the
    slowest set-ups of the corpus by far."""
    from google.protobuf import text_format

    net = text_format.Parse(source.read_text(), caffe_pb2().NetParameter(), allow_unknown_field=True)
    groups = [layer.convolution_param.group for layer in [*net.layer, *net.layers] if layer.HasField("convolution_param")]
    groups += [layer.layer.group for layer in net.layers if layer.layer.type == "conv"]  # V0: the old layer inside
    return sum(max(1, g) for g in groups)


def tasks(corpus: Path, configs: tuple[Config, ...], names: list[str] | None) -> list[Task]:
    """Every BVLC run of the corpus in every configuration, a net's configurations side by
    side (so a run cut short by the time budget still compares whole nets), the nets with
    the fewest convolution groups first (so the budget cuts the slowest set-ups)."""
    files = sorted((corpus / "groundtruth").glob("*.json"))
    if names:
        files = [f for f in files if any(n in f.stem for n in names)]
    docs = [(f, json.loads(f.read_text())) for f in files]
    docs = sorted(((f, gt) for f, gt in docs if gt.get("caffe") == "bvlc"), key=lambda d: convolution_groups(corpus / d[1]["source"]))
    return [Task(gt_file, gt, gt_run, c) for gt_file, gt in docs for gt_run in gt["runs"] for c in configs if gt_run["phase"] in c.phases]


def _prepare(task: Task, corpus: Path, programs: Programs, out_dir: Path) -> Path:
    """The net the probe runs (CPU work only: upgrade, Input layer, the plan), with the
    model's figures for it beside it."""
    phase = task.gt_run["phase"]
    work = out_dir / task.config.name / "nets"
    net = prepare_net(corpus / task.gt["source"], phase, task.gt_run.get("inputs", {}), programs, work / f"{task.stem}.prototxt")
    if task.config.plan is None:
        caffemem(["analyze", str(net), "--phase", phase.lower()], work / f"{task.stem}.analyze.json")
        return net
    return optimize(net, phase, work / f"{task.stem}.optimized.prototxt", task.config.plan)


def _write_json(path: Path, doc: dict) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(doc, indent=1) + "\n")
    tmp.replace(path)


def measure(configs: tuple[Config, ...], programs: dict[str, Programs], corpus: Path, names: list[str] | None, out_dir: Path,
            device: int, deadline: float | None = None, jobs: int = 1, caffe: str = "bvlc 9b89154, CUDA build") -> int:
    """Measures every BVLC run of `corpus`/groundtruth in every configuration; writes
    OUT/<config>/<ground-truth file name> (each rewritten after every run, so a run cut short
    keeps what it measured) and OUT/summary.json. The CPU work (upgrading, planning) runs on
    `jobs` threads ahead of the probes; the probes run one at a time, since the card's
    figures (cudaMemGetInfo) see every process on it. Past `deadline` (time.monotonic()), the
    runs left are recorded as not measured. Returns 0, or 1 if a run failed or was left."""
    from concurrent.futures import ThreadPoolExecutor

    todo = tasks(corpus, configs, names)
    for c in configs:
        (out_dir / c.name / "nets").mkdir(parents=True, exist_ok=True)
    docs: dict[tuple[str, str], dict] = {}
    rows = []
    failures = 0
    t0 = time.monotonic()
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        prepared = [None if not t.gt_run.get("ok") else pool.submit(_prepare, t, corpus, programs[t.config.variant], out_dir) for t in todo]
        for task, future in zip(todo, prepared):
            phase = task.gt_run["phase"]
            doc = docs.setdefault((task.config.name, task.gt_file.name), {
                "source": task.gt["source"], "caffe": f"{caffe} ({task.config.variant})", "plan": task.config.plan,
                "toolkit": REQUIREMENTS.read_text().split("\n# ")[0], "runs": []})
            row = {"config": task.config.name, "file": task.gt_file.name, "phase": phase, "ok": False}
            started = time.monotonic()
            try:
                if future is None:
                    raise RuntimeError("the CPU ground truth has no run: " + task.gt_run.get("error", ""))
                if deadline is not None and time.monotonic() >= deadline:
                    future.cancel()
                    raise RuntimeError("not measured: the time budget ran out")
                net = future.result()
                left = None if deadline is None else max(1.0, deadline - time.monotonic())
                measured = probe_run(programs[task.config.variant], net, phase, out_dir / task.config.name / "nets" / f"{task.stem}.probe.json",
                                     device, timeout=left)
            except (RuntimeError, subprocess.CalledProcessError, OSError, ValueError) as e:
                if future is not None:
                    failures += 1
                    log(f"{task.config.name} {task.stem}: {e}")
                doc["runs"].append({"phase": phase, "ok": False, "error": str(e)})
                row["error"] = str(e)
            else:
                doc.setdefault("device", measured["device"])
                doc.setdefault("process_constant", measured["process"])
                doc["runs"].append(merge(task.gt_run, measured))
                end = measured["end"]
                row.update(ok=True, device_peak=end["device_peak"], device_used=end["device_used"], process=measured["process"])
                if "results" in measured:
                    row["results"] = measured["results"]
                log(f"{task.config.name} {task.stem}: device peak {end['device_peak']} B counted, {end['device_used']} B used on the card"
                    f" ({time.monotonic() - started:.1f} s)")
            row["seconds"] = round(time.monotonic() - started, 2)
            rows.append(row)
            _write_json(out_dir / task.config.name / task.gt_file.name, doc)
    measured_runs = sum(r["ok"] for r in rows)
    identical = bit_identical(rows)
    _write_json(out_dir / "summary.json", {"seconds": round(time.monotonic() - t0, 1), "measured": measured_runs, "failed": failures,
                                           "bit_identical": identical, "runs": rows})
    for config, (same, compared) in identical.items():
        log(f"{config}: what the net computed is bit-identical to stock Caffe's in {same} of {compared} run(s)")
    log(f"wrote {out_dir}: {measured_runs} run(s) measured, {failures} failed or not measured, in {time.monotonic() - t0:.0f} s")
    return 1 if failures else 0


def bit_identical(rows: list[dict]) -> dict[str, tuple[int, int]]:
    """config -> (runs whose digest of outputs and gradients equals stock Caffe's, runs
    compared): the probe's `results` (benchmarks/gpu/probe.cpp Results)."""
    stock = {(r["file"], r["phase"]): r["results"]["all"] for r in rows if r["config"] == "stock" and "results" in r}
    counts: dict[str, tuple[int, int]] = {}
    for r in rows:
        key = (r["file"], r["phase"])
        if r["config"] == "stock" or "results" not in r or key not in stock:
            continue
        same, compared = counts.get(r["config"], (0, 0))
        counts[r["config"]] = (same + (r["results"]["all"] == stock[key]), compared + 1)
    return counts


def configs_of(variant: str) -> tuple[Config, ...]:
    """--variant stock|patched|both -> the configurations measured."""
    return tuple(c for c in CONFIGS if variant in ("both", c.variant))


def main(argv: list[str] | None = None) -> int:
    import gpu_bundle  # builds on this module: imported here, not at the top

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command")
    sub.add_parser("toolkit", help="install the pinned CUDA wheels into the cache; print CUDA_DIR")
    sub.add_parser("check", help="compile the GPU code of the runtime patch (CI)")
    b = sub.add_parser("build", help="full CUDA builds of Caffe and the probe")
    b.add_argument("--variant", choices=["stock", "patched", "both"], default="both")
    r = sub.add_parser("run", help="build, then measure every net of ../shared/groundtruth on the GPU")
    r.add_argument("--variant", choices=["stock", "patched", "both"], default="both")
    r.add_argument("--nets", nargs="*", help="only ground-truth files whose name contains one of these")
    r.add_argument("--out", type=Path, default=REPO / "benchmarks" / "gpu-groundtruth-out")
    r.add_argument("--device", type=int, default=0)
    sub.add_parser("bundle", help=f"build, then pack the kit for a bare GPU machine into {gpu_bundle.CHECKOUT_ARCHIVE.relative_to(REPO)}")
    k = sub.add_parser("run-bundle", help="on the GPU machine: unpack the kit and measure every net (docs/gpu.md)")
    k.add_argument("archive", type=Path)
    k.add_argument("--out", type=Path, default=REPO / "benchmarks" / "gpu-groundtruth-out")
    k.add_argument("--pack", type=Path, help="also pack OUT into this .tar.xz")
    k.add_argument("--nets", nargs="*", help="only ground-truth files whose name contains one of these")
    k.add_argument("--device", type=int, default=0)
    k.add_argument("--budget", type=float, default=420, help="seconds for the whole measurement (default 420); runs left are recorded as not measured")
    k.add_argument("--cuda-lib", type=Path, action="append", help="a folder with CUDA's libraries (default: this Python's nvidia packages)")
    k.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="threads for the CPU work (default: every core)")
    k.add_argument("--rehearse", action="store_true", help="only check the kit: libraries found, programs start (exit 3 without a GPU)")
    args = parser.parse_args(argv)
    if args.command == "run-bundle":
        return gpu_bundle.run_bundle(args.archive, args.out, args.pack, args.nets, args.device, args.budget, args.cuda_lib, args.rehearse, args.jobs)
    if not TARBALL.is_file():
        log(f"missing {TARBALL}")
        return 2
    try:
        if args.command == "toolkit":
            print(toolkit())
        elif args.command == "check":
            print(check())
        elif args.command == "bundle":
            print(gpu_bundle.bundle())
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
                out = getattr(args, "out", REPO / "benchmarks" / "gpu-groundtruth-out")
                return measure(configs_of(chosen), programs, SHARED, getattr(args, "nets", None), out, getattr(args, "device", 0))
    except (RuntimeError, subprocess.CalledProcessError) as e:
        log(str(e))
        return 1
    return 0


if __name__ == "__main__":
    sys.modules.setdefault("gpu_groundtruth", sys.modules[__name__])  # one module for gpu_bundle's `import`
    sys.exit(main())

"""The measurement kit for a bare GPU machine (issue 22 item 4; benchmarks/gpu/: bundle.py
here, kit.py there).

Without a build: how `ldd`'s answers are read and each library sorted (carried in the kit,
glibc's, CUDA's), where CUDA's libraries are found in a Python's nvidia wheels, the archive's
size limit and format, what stops a kit from running, and the measuring loop `run` and
`run-bundle` share, driven by a stand-in probe over real corpus nets.

With the kit built (`python benchmarks/gpu_groundtruth.py bundle`: two full CUDA builds of 30
to 45 min each on 2 cores from an empty cache; skipped otherwise, saying so): the archive is within its limit and holds every
program, and the rehearsal passes: with only the kit's libraries and the pinned CUDA wheels on
the library path, `ldd` finds every library and each probe exits 3 (no GPU here)."""

from __future__ import annotations

import dataclasses
import io
import json
import os
import shutil
import stat
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from caffemem.api.analyze import Options, analyze
from caffemem.runtime import PATCH_VERSION

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "gpu_groundtruth.py"
sys.path.insert(0, str(REPO / "benchmarks"))
from gpu.archive import ARCHIVE_LIMIT, MIB, pack, pack_results, unpack  # noqa: E402
from gpu.bundle import cached_archive, stage  # noqa: E402
from gpu.corpus import KIT_NETS, corpus_files, stage_corpus  # noqa: E402
import gpu.configs as gpu_configs  # noqa: E402
from gpu.configs import CONFIGS  # noqa: E402
from gpu.kit import Kit, preflight  # noqa: E402
from gpu.layout import FORMAT, PROBE_NAME, TOOLS, VARIANTS, patch_key  # noqa: E402
from gpu.libraries import CUDA_NEEDED, cuda_dirs, kind, missing_cuda, parse_ldd  # noqa: E402
from gpu.measure import measure, tasks  # noqa: E402
from gpu.estimate import committed_seconds, estimated_seconds, timed_seconds  # noqa: E402
from gpu.nets import cudnn_groups  # noqa: E402
from gpu.paths import SHARED  # noqa: E402
from gpu.cli import BUDGET  # noqa: E402
from gpu.probe import EXIT_NO_GPU, Programs  # noqa: E402

# What `ldd build/tools/caffemem_gpu_probe` printed on this machine (Debian 12), shortened:
# a library found, the CUDA runtime not on the path, a symbol version the libstdc++ found
# lacks, the vDSO (no file) and the loader (a path, no arrow).
LDD = """\
\tlinux-vdso.so.1 (0x00007ffd2d5f5000)
\tlibcaffe.so.1.0.0 => /tmp/kit/stock/lib/libcaffe.so.1.0.0 (0x00007f0d4f000000)
\tlibcudart.so.13 => not found
\tlibglog.so.1 => /lib/x86_64-linux-gnu/libglog.so.1 (0x00007f0d4efc0000)
./caffemem_gpu_probe: /tmp/kit/lib/libstdc++.so.6: version `GLIBCXX_3.4.32' not found (required by ./caffemem_gpu_probe)
\t/lib64/ld-linux-x86-64.so.2 (0x00007f0d50a2e000)
"""


def test_ldd_output_gives_each_library_its_file_or_none():
    resolved = parse_ldd(LDD)
    assert resolved.libraries == {
        "libcaffe.so.1.0.0": "/tmp/kit/stock/lib/libcaffe.so.1.0.0",
        "libcudart.so.13": None,
        "libglog.so.1": "/lib/x86_64-linux-gnu/libglog.so.1",
        "ld-linux-x86-64.so.2": "/lib64/ld-linux-x86-64.so.2",
    }
    assert resolved.not_found == ["libcudart.so.13"]
    assert resolved.missing_versions == ("GLIBCXX_3.4.32 (required by ./caffemem_gpu_probe)",)


@pytest.mark.parametrize(("soname", "where"), [
    ("libc.so.6", "glibc"), ("libm.so.6", "glibc"), ("libpthread.so.0", "glibc"), ("ld-linux-x86-64.so.2", "glibc"),
    ("libcudart.so.13", "cuda"), ("libcublasLt.so.13", "cuda"), ("libcurand.so.10", "cuda"), ("libcudnn.so.9", "cuda"),
    ("libcudnn_engines_precompiled.so.9", "cuda"), ("libcuda.so.1", "cuda"),
    # everything else travels in the kit, the C++ runtime too: the GPU machine's may be older
    ("libglog.so.1", "kit"), ("libopenblas.so.0", "kit"), ("libhdf5_serial.so.103", "kit"),
    ("libboost_system.so.1.74.0", "kit"), ("libstdc++.so.6", "kit"), ("libgcc_s.so.1", "kit"), ("libz.so.1", "kit"),
])
def test_each_library_is_the_machines_cudas_or_carried(soname, where):
    assert kind(soname) == where


def _touch(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"")
    return path


def test_cuda_folders_are_found_as_pytorchs_cu13_wheels_lay_them_out(tmp_path):
    nvidia = tmp_path / "site-packages" / "nvidia"
    _touch(nvidia / "cu13" / "lib" / "libcudart.so.13")
    _touch(nvidia / "cu13" / "lib" / "libcublas.so.13")
    _touch(nvidia / "cudnn" / "lib" / "libcudnn.so.9")
    _touch(nvidia / "nccl" / "lib" / "libnccl.so.2")  # not one the kit needs
    assert cuda_dirs([nvidia]) == [nvidia / "cu13" / "lib", nvidia / "cudnn" / "lib"]


def test_each_cuda_library_not_found_is_named(tmp_path):
    lib = tmp_path / "cu13" / "lib"
    for name in ("libcudart.so.13", "libcublas.so.13", "libcublasLt.so.13", "libcurand.so.10"):
        _touch(lib / name)
    assert missing_cuda([lib]) == [name for name in CUDA_NEEDED if name.startswith("libcudnn")]


def test_the_corpus_is_every_bvlc_ground_truth_file_and_the_net_it_names_and_the_kits_own_nets():
    files = [str(f) for f in corpus_files()]
    # 34 BVLC files of ../shared/groundtruth, each with its prototxt, and the README; then
    # the kit's own 5 nets (issue 32), each a ground-truth file without CPU figures and a prototxt
    assert len(files) == 1 + 2 * 34 + 2 * 5
    assert "groundtruth/bvlc_alexnet__deploy.json" in files
    assert "models/bvlc_alexnet/deploy.prototxt" in files
    assert all((SHARED / f).is_file() for f in files[:1 + 2 * 34])
    assert files[1 + 2 * 34:] == [f for name in ("siamese", "resnet50_bn_train", "depthwise", "densenet121", "resnet152")
                                  for f in (f"groundtruth/kit__{name}.json", f"kit/{name}.prototxt")]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    return stage_corpus(tmp_path_factory.mktemp("corpus"))


def test_the_kits_own_nets_are_staged_beside_shareds(corpus):
    assert (corpus / "models" / "bvlc_alexnet" / "deploy.prototxt").is_file()
    doc = json.loads((corpus / "groundtruth" / "kit__siamese.json").read_text())
    assert doc == {"source": "kit/siamese.prototxt", "caffe": "bvlc", "kit": True,
                   "runs": [{"phase": "TRAIN", "ok": True, "inputs": {}, "layers": []}, {"phase": "TEST", "ok": True, "inputs": {}, "layers": []}]}
    assert (corpus / "kit" / "siamese.prototxt").read_text() == (REPO / "fixtures" / "siamese" / "mnist_siamese_train_test.prototxt").read_text()
    assert (corpus / "kit" / "densenet121.prototxt").read_text() == (SHARED / "models" / "densenet" / "DenseNet_121.prototxt").read_text()


def test_the_depthwise_net_holds_388_cudnn_handles_in_stock_caffe(corpus):
    """Issue 32's depthwise net: a 3x3 convolution of 128 groups (3 handles each), a ReLU
    (1), a 1x1 convolution (3), on input 1x128x56x56."""
    device = analyze(str(corpus / "kit" / "depthwise.prototxt"), Options(device="gpu")).nets[0].device
    assert device.handles.cudnn == 3 * 128 + 1 + 3 == 388
    assert cudnn_groups(corpus / "kit" / "depthwise.prototxt") == 129


def test_the_batchnorm_net_updates_its_statistics_in_train_at_the_batch_issue_33_timed(corpus):
    text = (corpus / "kit" / "resnet50_bn_train.prototxt").read_text()
    assert text.count('type: "BatchNorm"') == 53 and "use_global_stats: true" not in text
    assert "dim: 32 dim: 3 dim: 224 dim: 224" in text


def _fake_tree(tmp_path: Path, name: str) -> Path:
    """A build tree of stand-ins, system programs with known NEEDED lists: libcaffe is
    Debian's gflags (libstdc++, libgcc_s, glibc), the tools are xz (liblzma, glibc)."""
    tree = tmp_path / name
    (tree / "build" / "lib").mkdir(parents=True)
    (tree / "build" / "tools").mkdir()
    shutil.copy(Path("/usr/lib/x86_64-linux-gnu/libgflags.so.2.2").resolve(), tree / "build" / "lib" / "libcaffe.so.1.0.0")
    for tool in TOOLS:
        shutil.copy("/usr/bin/xz", tree / "build" / "tools" / tool)
    return tree


@pytest.mark.skipif(not Path("/usr/lib/x86_64-linux-gnu/libgflags.so.2.2").exists(), reason="Debian's libgflags2.2 is not installed")
def test_stage_carries_every_library_but_glibcs_and_cudas(tmp_path):
    trees = {v: _fake_tree(tmp_path, v) for v in VARIANTS}
    probes = {v: Path("/usr/bin/xz") for v in VARIANTS}
    manifest = stage(trees, probes, tmp_path / "no-cuda", tmp_path / "kit")
    assert sorted(p.name for p in (tmp_path / "kit" / "lib").iterdir()) == ["libgcc_s.so.1", "liblzma.so.5", "libstdc++.so.6"]
    assert sorted(manifest["libraries"]) == ["libgcc_s.so.1", "liblzma.so.5", "libstdc++.so.6"]
    assert manifest["variants"]["stock"]["programs"] == [
        "stock/bin/caffe", f"stock/bin/{PROBE_NAME}", "stock/bin/upgrade_net_proto_text", "stock/lib/libcaffe.so.1.0.0"]
    assert manifest["runtime_patch"] == patch_key()
    assert manifest["glibc_needed"] == "2.36"  # Debian 12's libstdc++ asks for glibc 2.36
    assert manifest["corpus"] == [str(f) for f in corpus_files()]
    assert (tmp_path / "kit" / "corpus" / "models" / "bvlc_alexnet" / "deploy.prototxt").is_file()


def _fake_kit(root: Path, manifest: dict | None = None) -> Path:
    (root / "lib").mkdir(parents=True)
    (root / "MANIFEST.json").write_text(json.dumps(manifest or {"format": FORMAT}))
    return root


def test_an_archive_over_its_limit_is_refused_naming_its_largest_files(tmp_path):
    root = _fake_kit(tmp_path / "caffemem-gpu-bundle")
    (root / "lib" / "libbig.so").write_bytes(os.urandom(2 * MIB))  # random: xz cannot shrink it
    archive = tmp_path / "out" / "kit.tar.xz"
    with pytest.raises(RuntimeError, match=r"over its limit of 1 MiB .* lib/libbig.so 2.0 MiB"):
        pack(root, archive, limit=MIB)
    assert not archive.exists() and list(archive.parent.iterdir()) == []


def test_a_packed_kit_unpacks_into_its_folder(tmp_path):
    root = _fake_kit(tmp_path / "caffemem-gpu-bundle")
    (root / "lib" / "libx.so.1").write_bytes(b"\x7fELF" + bytes(1000))
    archive = tmp_path / "kit.tar.xz"
    size = pack(root, archive)
    assert size == archive.stat().st_size < 1000
    unpacked = unpack(archive, tmp_path / "there")
    assert unpacked == tmp_path / "there" / "caffemem-gpu-bundle"
    assert (unpacked / "lib" / "libx.so.1").read_bytes() == b"\x7fELF" + bytes(1000)


def _archive(path: Path, members: dict[str, bytes]) -> Path:
    with tarfile.open(path, "w:xz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def test_an_archive_that_is_not_a_kit_is_refused(tmp_path):
    archive = _archive(tmp_path / "other.tar.xz", {"something/README": b"hi"})
    with pytest.raises(RuntimeError, match="no caffemem-gpu-bundle/MANIFEST.json; not a caffemem GPU bundle"):
        unpack(archive, tmp_path / "there")


def test_an_archive_member_leaving_the_folder_is_refused(tmp_path):
    archive = _archive(tmp_path / "evil.tar.xz", {"caffemem-gpu-bundle/MANIFEST.json": b"{}", "../outside": b"x"})
    with pytest.raises(RuntimeError, match="a member's path leaves the folder"):
        unpack(archive, tmp_path / "there")
    assert not (tmp_path / "outside").exists()


def test_a_kit_built_from_another_runtime_patch_or_for_a_newer_glibc_does_not_run(tmp_path):
    manifest = {"format": FORMAT, "runtime_patch": "0123456789abcdef", "glibc_needed": "99.0"}
    problems = preflight(Kit(_fake_kit(tmp_path / "k", manifest), manifest, ()))
    assert problems[0].startswith("CUDA libraries not found: libcudart.so.13, libcublas.so.13")
    assert problems[1].startswith("this machine's glibc is ") and problems[1].endswith("the kit's programs need 99.0")
    assert problems[2].startswith("the kit's patched Caffe was built from another runtime patch than this checkout's caffemem (kit 0123456789abcdef")


def test_run_bundle_without_the_archive_says_how_to_make_it(tmp_path):
    proc = subprocess.run([sys.executable, str(SCRIPT), "run-bundle", str(tmp_path / "none.tar.xz")], capture_output=True, text=True)
    assert proc.returncode == 2
    assert "none.tar.xz: no such file; make it with `python benchmarks/gpu_groundtruth.py bundle`" in proc.stderr


def test_run_bundle_on_a_damaged_archive_says_so(tmp_path):
    archive = tmp_path / "kit.tar.xz"
    archive.write_bytes(b"\xfd7zXZ\x00" + bytes(100))  # an xz header, then nothing
    proc = subprocess.run([sys.executable, str(SCRIPT), "run-bundle", str(archive)], capture_output=True, text=True)
    assert proc.returncode == 2
    assert "kit.tar.xz: not a readable tar.xz (" in proc.stderr and "Traceback" not in proc.stderr


# A stand-in for the probe: what benchmarks/gpu/probe.cpp writes, for any net, with the bytes
# of the net's prototxt as its "device peak" (so each configuration's file shows its own net),
# 7 cuDNN handles with CAFFEMEM_CUDNN_POOL=0 (else 4) and the stack limit it was asked for;
# asked to time iterations, it says they took the bytes of its net (+2, +1) in seconds.
FAKE_PROBE = """#!/bin/sh
size=$(wc -c < "$1")
cat > "$3" <<EOF
{"device": {"name": "stand-in", "index": $4, "compute_capability": "9.0", "total_bytes": 1, "cuda_runtime": 13000, "cuda_driver": 13000},
 "process": {"device_used_after_context": 500, "handles_bytes": 20, "device_used_before_net": 520},
 "phase": "$2", "construct": {}, "fill_inputs": {},
 "layers": [{"name": "conv1", "type": "Convolution", "setup": {"device_alloc": 7}, "forward": {"device_alloc": 0}}],
 "end": {"device_in_use": 0, "host_in_use": 0, "device_peak": $size, "host_peak": 0, "device_used": 9,
         "cudnn_handles": $([ "$CAFFEMEM_CUDNN_POOL" = 0 ] && echo 7 || echo 4), "cuda_streams": 3, "stack_limit_bytes": ${CAFFEMEM_CUDA_STACK_BYTES:-1024}},
 $([ -n "$CAFFEMEM_PROBE_TIME_ITERS" ] && printf '"timing": {"iterations": %s, "warmup": 3, "seconds": [%s, %s, %s]},' "$CAFFEMEM_PROBE_TIME_ITERS" $size $((size + 2)) $((size + 1)))
 "results": {"outputs": {}, "all": "$(grep -c mem_param "$1")"}}
EOF
"""


@pytest.fixture
def fake_programs(tmp_path):
    probe = tmp_path / "probe"
    probe.write_text(FAKE_PROBE)
    probe.chmod(probe.stat().st_mode | stat.S_IEXEC)
    programs = Programs(probe, tmp_path / "no-upgrade-tool", {**os.environ, "PATH": os.environ.get("PATH", "")})
    return {"stock": programs, "patched": programs}


def test_measure_writes_runs_json_for_stock_and_both_plans(tmp_path, fake_programs, corpus):
    """lenet deploy (TEST) in the four configurations (after lenet train_test: its runs took
    less on the H200, gpu/estimate.py): the probe ran on the net as it is,
    on the blob plan and on the buffers plan, each plan made by this checkout's caffemem in
    GPU mode, its JSON kept beside the net, and on the net as it is again; in TRAIN also on
    the recompute plan (a TEST net runs no Backward, so it has nothing to recompute); lenet
    train_test also without the cuDNN handle pool and under each smaller stack limit."""
    out = tmp_path / "out"
    code = measure(CONFIGS, fake_programs, corpus, ["bvlc_examples_mnist__lenet"], out, device=0, jobs=2)
    assert code == 0
    summary = json.loads((out / "summary.json").read_text())
    base = ("stock", "patched", "patched-buffers", "stock-again")
    v6 = ("patched-nopool", "patched-stack-256", "patched-stack-128")
    assert [(r["config"], r["file"], r["phase"], r["ok"]) for r in summary["runs"]] == [
        (c, f, p, True)
        for f, phases in (("bvlc_examples_mnist__lenet_train_test.json", ["TRAIN", "TEST"]), ("bvlc_examples_mnist__lenet.json", ["TEST"]))
        for p in phases for c in base + (("patched-recompute",) if p == "TRAIN" else ()) + (v6 if "train_test" in f else ())
    ]
    # The stand-in's digest is whether the net has a slot table: a plan's differs from stock's.
    assert summary["bit_identical"] == {"patched": [0, 3], "patched-buffers": [0, 3], "stock-again": [3, 3], "patched-recompute": [0, 1],
                                        "patched-nopool": [0, 2], "patched-stack-256": [0, 2], "patched-stack-128": [0, 2]}
    assert summary["time_ratios"] == {} and not any("timing" in r for r in summary["runs"])  # lenet is not timed
    recompute = json.loads((out / "patched-recompute" / "nets" / "bvlc_examples_mnist__lenet_train_test.TRAIN.optimized.optimize.json").read_text())
    assert recompute["phases"][0]["recompute"]["policy"] == "sqrt"
    stock = json.loads((out / "stock" / "bvlc_examples_mnist__lenet.json").read_text())
    buffers = json.loads((out / "patched-buffers" / "bvlc_examples_mnist__lenet.json").read_text())
    assert (stock["plan"], buffers["plan"]) == (None, ["--share-buffers"])
    assert stock["process_constant"] == {"device_used_after_context": 500, "handles_bytes": 20, "device_used_before_net": 520}
    conv1 = next(layer for layer in stock["runs"][0]["layers"] if layer["name"] == "conv1")
    assert conv1["gpu"] == {"setup": {"device_alloc": 7}, "forward": {"device_alloc": 0}}
    plan = json.loads((out / "patched-buffers" / "nets" / "bvlc_examples_mnist__lenet.TEST.optimized.optimize.json").read_text())
    assert plan["phases"][0]["mode"] == "gpu"
    assert "mem_param" in (out / "patched-buffers" / "nets" / "bvlc_examples_mnist__lenet.TEST.optimized.prototxt").read_text()
    assert "mem_param" not in (out / "stock" / "nets" / "bvlc_examples_mnist__lenet.TEST.prototxt").read_text()
    model = json.loads((out / "stock" / "nets" / "bvlc_examples_mnist__lenet.TEST.analyze.json").read_text())
    assert (model["mode"], model["phase"]) == ("gpu", "TEST")


def test_each_summary_row_says_what_the_run_asked_of_the_runtime_and_what_it_held(tmp_path, fake_programs, corpus):
    """What the model needs of a run (issue 32): the variables set for the probe, the pool
    on or off (None: stock Caffe has none), the stack limit asked for, and what the probe
    counted: cuDNN handles and CUDA streams alive at the end, the stack limit the card reports."""
    out = tmp_path / "out"
    measure(CONFIGS, fake_programs, corpus, ["bvlc_examples_mnist__lenet_train_test"], out, device=0, jobs=2)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["runtime_patch"] == PATCH_VERSION
    rows = {r["config"]: r for r in summary["runs"] if r["phase"] == "TEST"}
    fields = ("env", "pool", "stack_bytes", "cudnn_handles", "cuda_streams", "stack_limit_bytes")
    assert {name: tuple(rows[name][k] for k in fields) for name in ("stock", "patched", "patched-nopool", "patched-stack-256")} == {
        "stock": ({}, None, None, 4, 3, 1024),
        "patched": ({}, True, None, 4, 3, 1024),
        "patched-nopool": ({"CAFFEMEM_CUDNN_POOL": "0"}, False, None, 7, 3, 1024),
        "patched-stack-256": ({"CAFFEMEM_CUDA_STACK_BYTES": "256"}, True, 256, 4, 3, 256),
    }
    assert rows["stock"]["estimated_seconds"] == 0.92  # lenet train_test's TEST run on the H200 (committed summary)


def test_runs_past_the_time_budget_are_recorded_as_not_measured(tmp_path, fake_programs):
    out = tmp_path / "out"
    code = measure(CONFIGS[:1], fake_programs, SHARED, ["bvlc_examples_mnist__lenet"], out, device=0, deadline=0.0)
    assert code == 1
    doc = json.loads((out / "stock" / "bvlc_examples_mnist__lenet_train_test.json").read_text())
    assert doc["runs"] == [{"phase": p, "ok": False, "error": "not measured: the time budget ran out"} for p in ("TRAIN", "TEST")]


def test_only_the_groups_of_convolutions_on_cudnn_count():
    """MobileNet v1: 13 depthwise convolutions with 4,960 groups in all, which say `engine:
    CAFFE`, and 15 others of 1 group on cuDNN (each group is 3 cuDNN handles and streams in
    BVLC); lenet: 2 convolutions; a V0 net's convolutions are all on cuDNN."""
    assert cudnn_groups(SHARED / "models/mobilenet/mobilenet_deploy.prototxt") == 15
    assert cudnn_groups(SHARED / "models/bvlc_examples_mnist/lenet.prototxt") == 2
    assert cudnn_groups(SHARED / "models/legacy_v0_bvlc_imagenet/imagenet_deploy.prototxt") == 1 + 2 + 1 + 2 + 2  # conv1..conv5, 2, 4, 5 of group 2


def test_a_run_is_estimated_from_the_committed_results_else_its_net_else_its_cudnn_groups():
    measured = {("a.json", "TEST", "stock"): 1.0, ("a.json", "TEST", "patched"): 2.0}
    assert estimated_seconds(measured, "a.json", "TEST", "patched", 50) == 2.0
    assert estimated_seconds(measured, "a.json", "TEST", "patched-nopool", 50) == 1.5
    assert estimated_seconds(measured, "b.json", "TEST", "stock", 100) == 1.5 + 0.013 * 100


def test_the_slowest_nets_are_measured_last_and_the_kit_fits_its_budget(corpus):
    """Nets in the order of their runs' mean estimated seconds: the H200's committed
    seconds (VGG16 TRAIN 3.4 s a run), else 1.5 s + 13 ms a cuDNN group (ResNet-152: 155
    groups); a net's configurations side by side. The whole is estimated within run-bundle's
    default budget, which leaves the device tool's 600 s room to pack the results."""
    todo = tasks(corpus, CONFIGS, None)
    order = list(dict.fromkeys(t.gt_file.stem for t in todo))
    assert len(order) == 34 + 5
    assert order[0] == "senet__SE-ResNet-50"  # Caffe refused it on the CPU: no run, no time
    assert order[-4:] == ["kit__depthwise", "places365__train_val_vgg16", "kit__resnet152", "kit__resnet50_bn_train"]
    assert [t.config.name for t in todo if t.gt_file.stem == "kit__resnet152"] == ["stock", "patched", "patched-buffers", "stock-again", "patched-nopool"]
    assert len(todo) == 270
    assert sum(t.seconds for t in todo) < BUDGET < 600 - 60
    assert committed_seconds()[("places365__train_val_vgg16.json", "TRAIN", "stock")] == 4.24  # the H200 (h200-2026-11-26.summary.json)


def test_the_probe_times_iterations_only_on_issue_33s_nets_in_train_in_the_timed_configurations():
    by_name = {c.name: c for c in CONFIGS}
    assert by_name["patched-cheap"].plan == ("--recompute", "cheap") and by_name["patched-cheap"].phases == ("TRAIN",)
    assert by_name["patched-recompute"].time_iterations("bvlc_googlenet__train_val", "TRAIN") == 15
    assert by_name["stock-again"].time_iterations("kit__resnet50_bn_train", "TRAIN") == 15
    assert by_name["stock"].time_iterations("bvlc_googlenet__train_val", "TEST") == 0  # no Backward to time
    assert by_name["patched"].time_iterations("bvlc_googlenet__train_val", "TRAIN") == 0  # the blob plan: not asked
    assert by_name["stock"].time_iterations("bvlc_alexnet__train_val", "TRAIN") == 0
    assert timed_seconds(15) == (3 + 15) * 0.15 and timed_seconds(0) == 0.0


def test_a_timed_run_gives_its_iterations_and_the_summary_each_plans_median_against_stocks_faster(tmp_path, fake_programs, corpus, monkeypatch):
    """lenet train_test timed as issue 33's nets are: the stand-in says each iteration took
    the bytes of its net (then +2, +1) seconds, so each configuration's median is its net's
    bytes + 1, and the ratio is that against stock's (stock and stock-again run the same net)."""
    lenet = ("bvlc_examples_mnist__lenet_train_test",)
    monkeypatch.setattr(gpu_configs, "TIMED_NETS", lenet)
    configs = tuple(dataclasses.replace(c, nets=lenet) if c.name == "patched-cheap" else c for c in CONFIGS)
    out = tmp_path / "out"
    measure(configs, fake_programs, corpus, list(lenet), out, device=0, jobs=2)
    summary = json.loads((out / "summary.json").read_text())
    timed = {r["config"]: r["timing"] for r in summary["runs"] if "timing" in r}
    assert sorted(timed) == ["patched-buffers", "patched-cheap", "patched-recompute", "stock", "stock-again"]
    assert all(r["phase"] == "TRAIN" for r in summary["runs"] if "timing" in r)
    net = {c: out / c / "nets" / f"bvlc_examples_mnist__lenet_train_test.TRAIN{'' if c.startswith('stock') else '.optimized'}.prototxt" for c in timed}
    assert timed["stock"] == {"iterations": 15, "warmup": 3, "seconds": [net["stock"].stat().st_size + k for k in (0, 2, 1)]}
    stock = net["stock"].stat().st_size + 1
    assert summary["time_ratios"] == {"bvlc_examples_mnist__lenet_train_test.json": {
        c: round((net[c].stat().st_size + 1) / stock, 4) for c in ("patched-buffers", "patched-recompute", "patched-cheap")}}


def test_results_over_the_limit_are_packed_without_the_probe_logs(tmp_path):
    out = tmp_path / "gpu-groundtruth"
    (out / "stock" / "nets").mkdir(parents=True)
    (out / "stock" / "net.json").write_text("{}")
    (out / "stock" / "nets" / "net.TEST.probe.log").write_bytes(os.urandom(2 * MIB))  # random: xz cannot shrink it
    pack_results(out, tmp_path / "results.tar.xz", limit=MIB)
    with tarfile.open(tmp_path / "results.tar.xz") as tar:
        assert sorted(tar.getnames()) == ["gpu-groundtruth", "gpu-groundtruth/stock", "gpu-groundtruth/stock/net.json", "gpu-groundtruth/stock/nets"]


# ----------------------------------------------------------------------------- the built kit


@pytest.fixture(scope="module")
def archive() -> Path:
    found = cached_archive()
    if found is None:
        pytest.skip("the GPU bundle of these inputs is not built: `python benchmarks/gpu_groundtruth.py bundle` "
                    "(two full CUDA builds, 30 to 45 min each on 2 cores from an empty cache; the stock one outlives a patch change)")
    return found


def test_the_kit_fits_its_limit_and_holds_both_variants_programs(archive):
    assert archive.stat().st_size <= ARCHIVE_LIMIT
    with tarfile.open(archive, "r:xz") as tar:
        names = set(tar.getnames())
    for variant in VARIANTS:
        for program in ("bin/caffe", "bin/upgrade_net_proto_text", f"bin/{PROBE_NAME}", "lib/libcaffe.so.1.0.0"):
            assert f"caffemem-gpu-bundle/{variant}/{program}" in names
    libs = {Path(n).name for n in names if n.startswith("caffemem-gpu-bundle/lib/")}
    assert {"libglog.so.1", "libgflags.so.2.2", "libprotobuf.so.32", "libopenblas.so.0", "libstdc++.so.6"} <= libs
    assert not {name for name in libs if kind(name) != "kit"}


def test_the_rehearsal_finds_every_library_and_each_probe_exits_3_without_a_gpu(archive):
    proc = subprocess.run([sys.executable, str(SCRIPT), "run-bundle", str(archive), "--rehearse"], capture_output=True, text=True, timeout=900)
    assert "rehearsal passed: every library found, every program starts; probes exit 3" in proc.stderr, proc.stderr[-4000:]
    assert proc.returncode == EXIT_NO_GPU

"""The GPU code of the runtime patch compiles (issue 18): `benchmarks/gpu_groundtruth.py
check` builds, with nvcc and g++ against PyPI's CUDA 13 wheels (benchmarks/gpu/
requirements.txt), the translation units the patch and the CUDA 13 / cuDNN 9 build fix touch,
in GPU mode with cuDNN; no GPU is needed. Cached outside the checkout, so a rerun with the same
inputs is instant.

The toolkit is installed by the script (pip, ~1.4 GB, once per version set). These tests skip
only when it is not installed AND CAFFEMEM_SKIP_CUDA=1; CI installs it (.ci/run)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "gpu_groundtruth.py"
sys.path.insert(0, str(REPO / "benchmarks"))
from gpu.builds import CHECK_OBJECTS, make  # noqa: E402
from gpu.paths import TARBALL  # noqa: E402
from gpu.toolkit import toolkit_path  # noqa: E402

from caffemem import runtime  # noqa: E402


def _need_toolkit() -> None:
    if not TARBALL.is_file():
        pytest.skip(f"{TARBALL} missing")
    if os.environ.get("CAFFEMEM_SKIP_CUDA") == "1" and not toolkit_path()[1]:
        pytest.skip("CAFFEMEM_SKIP_CUDA=1 and the CUDA toolkit is not installed (python benchmarks/gpu_groundtruth.py toolkit)")


@pytest.fixture(scope="module")
def checked_tree() -> Path:
    """The tree `check` compiled (runs the compile unless cached)."""
    _need_toolkit()
    proc = subprocess.run([sys.executable, str(SCRIPT), "check"], check=False, capture_output=True, text=True, timeout=3600)
    assert proc.returncode == 0, f"CUDA compile check failed:\n{proc.stderr[-8000:]}"
    return Path(proc.stdout.strip().splitlines()[-1])


def patch_objects() -> list[str]:
    """Every translation unit the runtime patch (BVLC) adds or edits, and the .cu of each
    cuDNN layer whose header it edits (nvcc parses the header), as a Makefile object target:
    a .cpp under .build_release/src, a .cu under .build_release/cuda/src."""
    rels = {edit.path for edit in runtime._read_edits(runtime.Flavour.BVLC)} | set(runtime._new_files(runtime.Flavour.BVLC))
    rels |= {f"src/caffe/layers/{Path(rel).stem}.cu" for rel in rels if rel.startswith("include/caffe/layers/cudnn_")}
    cpp = [f".build_release/{rel[: -len('.cpp')]}.o" for rel in sorted(rels) if rel.endswith(".cpp")]
    return cpp + [f".build_release/cuda/{rel[: -len('.cu')]}.o" for rel in sorted(rels) if rel.endswith(".cu")]


@pytest.fixture(scope="module")
def patch_tree(checked_tree) -> Path:
    """The checked tree with every unit of patch_objects compiled too (make is incremental:
    those CHECK_OBJECTS holds are there already)."""
    missing = [obj for obj in patch_objects() if obj not in CHECK_OBJECTS and not (checked_tree / obj).is_file()]
    if missing:
        make(checked_tree, missing, "check-patch.log")
    return checked_tree


def test_every_unit_the_patch_adds_or_edits_compiles_with_cuda_and_cudnn(patch_tree):
    """Patch v6 edits all nine cuDNN layers (their .cpp, and the (de)convolution's .cu) and
    adds util/cudnn_pool.cpp: each compiles in GPU mode with cuDNN 9."""
    objects = patch_objects()
    assert {".build_release/src/caffe/util/cudnn_pool.o", ".build_release/cuda/src/caffe/layers/cudnn_conv_layer.o", ".build_release/src/caffe/layers/cudnn_lcn_layer.o"} <= set(objects)
    assert [obj for obj in objects if not (patch_tree / obj).is_file()] == []


def test_the_pool_makes_stocks_handles_and_streams_and_sets_the_stack(patch_tree):
    """Patch v6: util/cudnn_pool.o creates the handles and streams as stock's layers do
    (cudnnCreate, cudaStreamCreate, cudnnSetStream), its workspace with cudaMalloc, and
    sets CAFFEMEM_CUDA_STACK_BYTES with cudaDeviceSetLimit."""
    undefined = _symbols(patch_tree / ".build_release/src/caffe/util/cudnn_pool.o", undefined=True).split()
    for symbol in ("cudnnCreate", "cudnnSetStream", "cudaStreamCreate", "cudaMalloc", "cudaDeviceSetLimit", "cudnnDestroy", "cudaStreamDestroy"):
        assert symbol in undefined, symbol


@pytest.mark.parametrize("name", ["relu", "sigmoid", "tanh", "pooling", "lrn", "lcn", "softmax"])
def test_a_single_handle_cudnn_layer_leases_the_pools_handle(patch_tree, name):
    undefined = _symbols(patch_tree / f".build_release/src/caffe/layers/cudnn_{name}_layer.o", undefined=True)
    assert "caffe::CudnnPool::Lease()" in undefined
    assert "caffe::CudnnPool::default_handle()" in undefined


@pytest.mark.parametrize("name", ["conv", "deconv"])
def test_a_grouped_cudnn_layer_takes_the_pools_pairs_and_blocks(patch_tree, name):
    """LayerSetUp leases pairs (handle, stream), Reshape reserves the blocks, and the .cu's
    Forward_gpu and Backward_gpu point the workspaces at them (PointAtPool, inline)."""
    undefined = _symbols(patch_tree / f".build_release/src/caffe/layers/cudnn_{name}_layer.o", undefined=True)
    for symbol in ("caffe::CudnnPool::Lease()", "caffe::CudnnPool::handle(int)", "caffe::CudnnPool::stream(int)", "caffe::CudnnPool::Reserve(unsigned long)"):
        assert symbol in undefined, symbol
    assert "caffe::CudnnPool::Point(void**, int) const" in _symbols(patch_tree / f".build_release/cuda/src/caffe/layers/cudnn_{name}_layer.o", undefined=True)


def _symbols(obj: Path, undefined: bool) -> str:
    return subprocess.run(["nm", "-C", *(["-u"] if undefined else []), str(obj)], capture_output=True, text=True, check=True).stdout


def test_the_runtime_binds_slots_with_cudaMalloc(checked_tree):
    """mem_slots.o was compiled with the GPU path (not CPU_ONLY): it calls cudaMalloc for the
    slots and SyncedMemory::set_gpu_data to bind them."""
    undefined = _symbols(checked_tree / ".build_release/src/caffe/util/mem_slots.o", undefined=True)
    assert "cudaMalloc" in undefined
    assert "caffe::SyncedMemory::set_gpu_data(void*)" in undefined


def test_cudnn_convolution_uses_the_v7_queries(checked_tree):
    """The cuDNN 9 fix: the convolution layer asks cudnnGet*Algorithm_v7 (the calls of
    cuDNN <= 7 do not exist in cuDNN 9)."""
    undefined = _symbols(checked_tree / ".build_release/src/caffe/layers/cudnn_conv_layer.o", undefined=True)
    for query in ("Forward", "BackwardFilter", "BackwardData"):
        assert f"cudnnGetConvolution{query}Algorithm_v7" in undefined


@pytest.mark.parametrize("layer", ["cudnn_conv_layer", "cudnn_deconv_layer"])
def test_the_cudnn_layers_can_take_their_workspace_from_a_slot(checked_tree, layer):
    """Patch v3: a planned workspace is a SyncedMemory of the bytes the plan reserved
    (util/planned_workspace.hpp), bound by the slot table; Reshape points the per-stream
    workspaces at its device memory. Stock BVLC's layer touches no SyncedMemory itself."""
    undefined = _symbols(checked_tree / f".build_release/src/caffe/layers/{layer}.o", undefined=True)
    assert "caffe::SyncedMemory::SyncedMemory(unsigned long)" in undefined
    assert "caffe::SyncedMemory::mutable_gpu_data()" in undefined
    assert "cudaMalloc" in undefined  # the stock path, for nets without a plan


def test_net_init_tells_each_layer_its_planned_buffers(checked_tree):
    undefined = _symbols(checked_tree / ".build_release/src/caffe/net.o", undefined=True)
    assert "caffe::PlannedBuffers(caffe::NetParameter const&, caffe::Phase, int" in undefined


def test_backward_runs_the_planned_forwards_again_with_parameters_kept_on_the_device(checked_tree):
    """Patch v4: Net::BackwardFromTo calls MemoryRecomputes::Before, whose GPU path saves and
    restores a layer's parameters (restore_params) in device memory."""
    assert "caffe::MemoryRecomputes<float>::Before(int)" in _symbols(checked_tree / ".build_release/src/caffe/net.o", undefined=True)
    undefined = _symbols(checked_tree / ".build_release/src/caffe/util/mem_recompute.o", undefined=True)
    assert "caffe::Blob<float>::gpu_data() const" in undefined
    assert "caffe::Blob<float>::mutable_gpu_data()" in undefined


def test_cuda_objects_hold_code_for_ampere_and_hopper(checked_tree):
    """A .cu that includes a header the patch edits was compiled by nvcc into a fat binary
    (SASS sm_80, sm_90 and compute_75 PTX, CUDA_ARCH)."""
    obj = checked_tree / ".build_release/cuda/src/caffe/layers/conv_layer.o"
    sections = subprocess.run(["readelf", "-S", "-W", str(obj)], capture_output=True, text=True, check=True).stdout
    assert ".nv_fatbin" in sections
    data = obj.read_bytes()
    for arch in (b"sm_80", b"sm_90", b"compute_75"):
        assert arch in data, arch


PICK_TEST = r"""
#include <cstdio>
#include "caffe/util/cudnn.hpp"
struct Perf { int algo; cudnnStatus_t status; size_t memory; };
int main() {
  const size_t MiB = 1 << 20;
  // cuDNN's ranking, fastest first: 16 MiB, then a failed one of 1 MiB, then 4 MiB, then 0.
  const Perf perf[4] = {{7, CUDNN_STATUS_SUCCESS, 16 * MiB},
      {6, CUDNN_STATUS_NOT_SUPPORTED, 1 * MiB}, {5, CUDNN_STATUS_SUCCESS, 4 * MiB},
      {1, CUDNN_STATUS_SUCCESS, 0}};
  int limited = -1, fastest = -1, none = -1, fallback = -1;
  caffe::cudnn::pickAlgorithm(CUDNN_STATUS_SUCCESS, perf, 4, 2, 8 * MiB, 0, &limited);
  caffe::cudnn::pickAlgorithm(CUDNN_STATUS_SUCCESS, perf, 4, 1, 0, 0, &fastest);
  caffe::cudnn::pickAlgorithm(CUDNN_STATUS_SUCCESS, perf, 4, 0, 8 * MiB, 0, &none);
  caffe::cudnn::pickAlgorithm(CUDNN_STATUS_SUCCESS, perf, 1, 2, 8 * MiB, 9, &fallback);
  printf("%d %d %d %d\n", limited, fastest, none, fallback);
  return 0;
}
"""


def test_cudnn_algorithm_choice_keeps_bvlcs_workspace_limit(checked_tree, tmp_path):
    """The shim for cuDNN >= 8 keeps the first (fastest-ranked) algorithm that succeeded and
    fits the limit, as CUDNN_CONVOLUTION_*_SPECIFY_WORKSPACE_LIMIT did: with 8 MiB it skips
    the 16 MiB one and the failed one and takes the 4 MiB one (5); PREFER_FASTEST takes the
    first (7); NO_WORKSPACE the 0-byte one (1); none fitting gives the fallback (9)."""
    cuda, _ = toolkit_path()
    src = tmp_path / "pick.cpp"
    src.write_text(PICK_TEST)
    exe = tmp_path / "pick"
    subprocess.run(
        ["g++", "-std=gnu++17", "-DUSE_CUDNN", str(src), "-o", str(exe), f"-I{checked_tree / 'include'}",
         f"-I{checked_tree / '.build_release' / 'src'}", f"-I{cuda / 'include'}", "-I/usr/include/hdf5/serial"],
        check=True, capture_output=True, text=True,
    )
    assert subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.split() == ["5", "7", "1", "9"]


def test_the_recompute_runtime_tells_a_cudnn_convolution_apart(checked_tree):
    """Issue 33: mem_recompute.o, compiled with cuDNN, asks whether a recomputed layer is a
    CuDNNConvolutionLayer (dynamic_cast: its typeinfo), whose Reshape it skips on the card."""
    symbols = _symbols(checked_tree / ".build_release/src/caffe/util/mem_recompute.o", undefined=False)
    assert "typeinfo for caffe::CuDNNConvolutionLayer<float>" in symbols

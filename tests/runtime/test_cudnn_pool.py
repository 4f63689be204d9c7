"""Runtime patch v6 (issue 32): every cuDNN layer of a patched BVLC tree takes its handles,
streams and workspace from one pool per device (util/cudnn_pool.hpp), CAFFEMEM_CUDNN_POOL=0
gives stock's own, CAFFEMEM_CUDA_STACK_BYTES sets the CUDA stack size.  Here: the edits on a
pristine tree (no build), and the environment's parsing in the patched CPU build (the pool
itself is GPU code: tests/runtime/test_cuda_compile.py compiles it)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from runtime_caffe import bvlc, patched_caffe, pristine  # noqa: F401  (fixtures)

from caffemem import runtime

#: BVLC's cuDNN layers with one handle of their own (stock: cudnnCreate in LayerSetUp).
SINGLE = ("relu", "sigmoid", "tanh", "pooling", "lrn", "lcn", "softmax")
#: ... and those with 3 handles and streams per group.
GROUPED = ("conv", "deconv")


def _layer_files(names: tuple[str, ...], suffixes: tuple[str, ...]) -> list[str]:
    out = []
    for name in names:
        out += [f"src/caffe/layers/cudnn_{name}_layer.{s}" for s in suffixes if s != "hpp"]
        out += [f"include/caffe/layers/cudnn_{name}_layer.hpp"] if "hpp" in suffixes else []
    return out


def test_the_patch_covers_every_cudnn_layer_that_creates_a_handle(pristine):
    """Stock BVLC creates cuDNN handles in exactly these layers; the patch edits each."""
    creating = {p.name for p in (pristine / "src/caffe/layers").glob("cudnn_*_layer.cpp") if "cudnnCreate(&handle_" in p.read_text()}
    assert creating == {f"cudnn_{name}_layer.cpp" for name in SINGLE + GROUPED}
    edited = {edit.path for edit in runtime._read_edits(runtime.Flavour.BVLC)}
    assert set(_layer_files(SINGLE, ("hpp", "cpp"))) <= edited
    assert set(_layer_files(GROUPED, ("hpp", "cpp", "cu"))) <= edited


def test_the_cudnn_layers_apply_and_revert_byte_for_byte(bvlc, pristine):
    files = _layer_files(SINGLE, ("hpp", "cpp")) + _layer_files(GROUPED, ("hpp", "cpp", "cu"))
    runtime.apply_patch(bvlc)
    assert all((bvlc / rel).read_bytes() != (pristine / rel).read_bytes() for rel in files)
    assert (bvlc / "include/caffe/util/cudnn_pool.hpp").is_file() and (bvlc / "src/caffe/util/cudnn_pool.cpp").is_file()
    runtime.revert_patch(bvlc)
    assert [rel for rel in files if (bvlc / rel).read_bytes() != (pristine / rel).read_bytes()] == []
    assert not (bvlc / "include/caffe/util/cudnn_pool.hpp").exists() and not (bvlc / "src/caffe/util/cudnn_pool.cpp").exists()


@pytest.mark.parametrize("name", SINGLE)
def test_a_single_handle_layer_leases_the_pools_default_handle(bvlc, name):
    """The pool's handle, unless CAFFEMEM_CUDNN_POOL=0 (Lease gives NULL): then stock's
    cudnnCreate, and only then the destructor's cudnnDestroy."""
    runtime.apply_patch(bvlc)
    cpp = (bvlc / f"src/caffe/layers/cudnn_{name}_layer.cpp").read_text()
    assert "  pool_ = CudnnPool::Lease();\n  if (pool_) {\n    handle_ = pool_->default_handle();\n  } else {\n    CUDNN_CHECK(cudnnCreate(&handle_));\n  }\n" in cpp
    assert re.search(r"\n  if \(!pool_\) \{ cudnnDestroy\((this->)?handle_\); \}", cpp)
    assert cpp.count("cudnnDestroy(") == 1 and cpp.count("cudnnCreate(&handle_)") == 1
    assert "shared_ptr<CudnnPool>     pool_;" in (bvlc / f"include/caffe/layers/cudnn_{name}_layer.hpp").read_text()


@pytest.mark.parametrize("name", GROUPED)
def test_a_grouped_layer_takes_pair_i_mod_3_for_its_index_i(bvlc, pristine, name):
    """handle_[g], stream_[g] = the pool's pair g % 3 for every index g of the 3 * group;
    stock's own loop (create, and destroy) runs only without a pool."""
    runtime.apply_patch(bvlc)
    cpp = (bvlc / f"src/caffe/layers/cudnn_{name}_layer.cpp").read_text()
    assert (
        "  for (int g = 0; pool_ && g < this->group_ * CUDNN_STREAMS_PER_GROUP; g++) {\n"
        "    handle_[g] = pool_->handle(g % CUDNN_STREAMS_PER_GROUP);\n"
        "    stream_[g] = pool_->stream(g % CUDNN_STREAMS_PER_GROUP);\n"
    ) in cpp
    assert "  for (int g = 0; !pool_ && g < this->group_ * CUDNN_STREAMS_PER_GROUP; g++) {\n    CUDA_CHECK(cudaStreamCreate(&stream_[g]));" in cpp
    assert "  for (int g = 0; !pool_ && g < this->group_ * CUDNN_STREAMS_PER_GROUP; g++) {\n    cudaStreamDestroy(stream_[g]);" in cpp
    assert "#define CUDNN_STREAMS_PER_GROUP 3\n" in cpp  # the pool's kPairs


@pytest.mark.parametrize("name", GROUPED)
def test_a_grouped_layer_chooses_its_algorithms_as_stock(bvlc, pristine, name):
    """BVLC's 8 MiB per query, and the queries' text untouched: the pool only changes where
    the chosen workspace lives (the slot table's planned limit, v3, is the one other line)."""
    runtime.apply_patch(bvlc)
    rel = f"src/caffe/layers/cudnn_{name}_layer.cpp"

    def queries(text: str) -> str:
        return text[text.index("  size_t workspace_limit_bytes = 8*1024*1024;") : text.index("  // reduce over all workspace sizes")]

    planned = "  // caffemem: planned, the algorithms fit the bytes the slot table reserved\n  // (one block of them per group and stream).\n  workspace_limit_bytes = planned_workspace_.limit(workspace_limit_bytes);\n"
    assert queries((bvlc / rel).read_text()).replace(planned, "") == queries((pristine / rel).read_text())


@pytest.mark.parametrize("name", GROUPED)
def test_a_grouped_layer_reserves_the_pools_blocks_before_its_own_cudamalloc(bvlc, name):
    """Reshape: a planned slot first (v3), else the pool's blocks grown to the layer's
    largest need, else (no pool, or the pool could not grow) stock's own cudaMalloc; and
    Forward_gpu, Backward_gpu point workspace[i] at block i % 3 before any cuDNN call."""
    runtime.apply_patch(bvlc)
    cpp = (bvlc / f"src/caffe/layers/cudnn_{name}_layer.cpp").read_text()
    assert (
        "  if (planned_workspace_.planned()) {  // caffemem: the slot, no cudaMalloc\n"
        "    planned_workspace_.Point(max_workspace, workspace);\n"
        "  } else if (pool_ && workspaceData == NULL &&\n"
        "      pool_->Reserve(max_workspace)) {\n"
    ) in cpp
    cu = (bvlc / f"src/caffe/layers/cudnn_{name}_layer.cu").read_text()
    for method in ("Forward_gpu", "Backward_gpu"):
        body = cu[cu.index(f"::{method}(") :]
        body = body[body.index("{\n") + 2 :]
        assert body.startswith("  PointAtPool();  // caffemem\n"), method
    hpp = (bvlc / f"include/caffe/layers/cudnn_{name}_layer.hpp").read_text()
    assert "    if (pool_ && !planned_workspace_.planned() && workspaceData == NULL) {\n      pool_->Point(workspace, this->group_ * CudnnPool::kPairs);\n" in hpp


def test_the_pool_binds_each_handle_to_its_stream_and_sets_the_stack_once(bvlc):
    runtime.apply_patch(bvlc)
    cpp = (bvlc / "src/caffe/util/cudnn_pool.cpp").read_text()
    assert "  CUDA_CHECK(cudaStreamCreate(&streams_[k]));\n  CUDNN_CHECK(cudnnCreate(&handles_[k]));\n  CUDNN_CHECK(cudnnSetStream(handles_[k], streams_[k]));\n" in cpp
    assert cpp.count("cudaDeviceSetLimit(cudaLimitStackSize, stack)") == 1
    assert cpp.index("cudaDeviceSetLimit") > cpp.index("CudnnPool::CudnnPool(int device)")
    assert "static const int kPairs = 3;" in (bvlc / "include/caffe/util/cudnn_pool.hpp").read_text()


# ----------------------------------------------------------------------------- the patched CPU build

ENV_PROGRAM = r"""
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include "caffe/util/cudnn_pool.hpp"
int main(int argc, char** argv) {
  google::InitGoogleLogging(argv[0]);
  FLAGS_logtostderr = 1;
  const char* value = argc > 2 ? argv[2] : NULL;  // no argument: the variable unset
  if (strcmp(argv[1], "pool") == 0) {
    printf("%d\n", caffe::CudnnPoolEnabled(value) ? 1 : 0);
  } else {
    printf("%zu\n", caffe::CudaStackBytes(value));
  }
  return 0;
}
"""


@pytest.fixture(scope="module")
def env_program(patched_caffe, tmp_path_factory) -> Path:  # noqa: F811
    """A program that asks the patched libcaffe how it reads CAFFEMEM_CUDNN_POOL and
    CAFFEMEM_CUDA_STACK_BYTES (the parsing is compiled in CPU builds too)."""
    tree = patched_caffe.tree
    work = tmp_path_factory.mktemp("cudnn_pool_env")
    (work / "env.cpp").write_text(ENV_PROGRAM)
    lib = tree / "build" / "lib"
    subprocess.run(
        ["g++", "-std=gnu++17", "-DCPU_ONLY", str(work / "env.cpp"), "-o", str(work / "env"), f"-I{tree / 'include'}", f"-I{tree / 'build' / 'src'}",
         "-I/usr/include/hdf5/serial", f"-L{lib}", f"-Wl,-rpath,{lib}", "-lcaffe", "-lglog", "-lgflags", "-lprotobuf", "-lboost_system"],
        check=True, capture_output=True, text=True,
    )
    return work / "env"


def _ask(program: Path, what: str, *value: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(program), what, *value], capture_output=True, text=True, check=False)


@pytest.mark.parametrize(("value", "enabled"), [((), "1"), (("",), "1"), (("1",), "1"), (("0",), "0")])
def test_the_pool_is_on_unless_caffemem_cudnn_pool_is_0(env_program, value, enabled):
    proc = _ask(env_program, "pool", *value)
    assert proc.returncode == 0 and proc.stdout == f"{enabled}\n"


def test_another_caffemem_cudnn_pool_value_stops_the_run_naming_it(env_program):
    proc = _ask(env_program, "pool", "yes")
    assert proc.returncode != 0 and proc.stdout == ""
    assert (
        "CAFFEMEM_CUDNN_POOL=yes: expected 1 (the default: the cuDNN layers share one pool of handles, streams and workspace per device) "
        "or 0 (each layer its own, as stock Caffe); set it to 0 or 1, or unset it"
    ) in proc.stderr


@pytest.mark.parametrize(("value", "bytes_"), [((), "0"), (("",), "0"), (("512",), "512"), (("128",), "128"), (("1024",), "1024")])
def test_the_stack_size_is_the_drivers_unless_caffemem_cuda_stack_bytes_is_set(env_program, value, bytes_):
    proc = _ask(env_program, "stack", *value)
    assert proc.returncode == 0 and proc.stdout == f"{bytes_}\n"


@pytest.mark.parametrize("value", ["0", "-1", "1k", " 512", "0x200", "1234567890"])
def test_a_stack_size_that_is_no_positive_number_of_bytes_stops_the_run_naming_it(env_program, value):
    proc = _ask(env_program, "stack", value)
    assert proc.returncode != 0 and proc.stdout == ""
    assert f"CAFFEMEM_CUDA_STACK_BYTES={value}: expected a positive number of bytes (e.g. 512), the CUDA stack size per thread; unset it for the driver's default (1024)" in proc.stderr

"""A slot table names only storage the patched Caffe can bind (layers/bound_buffers.py).

MemorySlots::Bind (mem_slots.cpp) looks every member up among the net's blobs, its layers'
parameters and what each layer's NamedBuffers lists; anything else stops Net::Init with
"... is not a blob or layer buffer this Caffe can bind".  The GPU kit's H100 run hit it on
the LRCN LSTM nets with --share-buffers (`20:lstm1/unrolled/W_xc_x`): RecurrentLayer's
unrolled net is a Net of its own, whose blobs patch v3 gives no name.  Here: the table of
bound names is the patch's, every --share-buffers table of LSTM and RNN nets names only
bound storage in both modes, and `verify` says what Caffe says of an older table."""

from __future__ import annotations

import re
from functools import lru_cache

import pytest
from conftest import SHARED, needs_shared

from caffemem.api.analyze import Options
from caffemem.api.optimize import OptimizeSettings, PhasePlan, optimize
from caffemem.layers.access import BlobId
from caffemem.passes.liveness import UNBOUND
from caffemem.plan.verify import PlanData, bind_violations
from caffemem.runtime import Flavour, _read_edits
from caffemem.layers.bound_buffers import BOUND_BUFFERS, runtime_binds

# Headers whose NamedBuffers FIND anchor names no type(): the classes that inherit them.
_HEADER_TYPES = {"base_conv_layer.hpp": ("Convolution", "Deconvolution"), "cudnn_conv_layer.hpp": ("Convolution",), "cudnn_deconv_layer.hpp": ("Deconvolution",)}
_NESTED_TYPES = {"softmax_layer_": "Softmax", "bias_layer_": "Bias"}  # AddNested's member -> its class's type


def _patch_names() -> dict[str, set[str]]:
    """Caffe type -> the names patch v3's NamedBuffers give, read from cpp/bvlc/edits.txt."""
    direct: dict[str, set[str]] = {}
    nested: dict[str, list[tuple[str, str]]] = {}
    for edit in _read_edits(Flavour.BVLC):
        if "NamedBuffers(LayerBuffers* buffers) {  // caffemem" not in edit.replace:
            continue
        header = edit.path.rsplit("/", 1)[-1]
        declared = re.findall(r'type\(\) const \{ return "(\w+)"; \}', edit.find)
        for type in declared or _HEADER_TYPES[header]:
            names = direct.setdefault(type, set())
            names.update(re.findall(r'buffers->Add\("(\w+)"', edit.replace))
            names.update({"cudnn_workspace"} if "planned_workspace_.Add(buffers)" in edit.replace else set())
            nested.setdefault(type, []).extend(re.findall(r'buffers->AddNested\("(\w+)", (\w+)\.get\(\)\)', edit.replace))
    for type, inner in nested.items():
        for prefix, member in inner:
            direct[type].update(f"{prefix}/{name}" for name in direct[_NESTED_TYPES[member]])
    return direct


def test_the_table_is_what_patch_v3s_named_buffers_give():
    assert {type: set(names) for type, names in BOUND_BUFFERS.items()} == _patch_names()


# T = 8 frames of N = 4 streams: conv -> pool -> fc -> T x N x 64 -> LSTM/RNN -> fc -> loss.
FRAMES = """name: "frames"
layer {{ name: "data" type: "Input" top: "data" top: "cont" top: "label"
        input_param {{ shape {{ dim: 32 dim: 3 dim: 16 dim: 16 }} shape {{ dim: 8 dim: 4 }} shape {{ dim: 8 dim: 4 }} }} }}
layer {{ name: "conv1" type: "Convolution" bottom: "data" top: "conv1"
        convolution_param {{ num_output: 8 kernel_size: 3 pad: 1 weight_filler {{ type: "gaussian" std: 0.1 }} }} }}
layer {{ name: "pool1" type: "Pooling" bottom: "conv1" top: "pool1" pooling_param {{ pool: MAX kernel_size: 2 stride: 2 }} }}
layer {{ name: "fc1" type: "InnerProduct" bottom: "pool1" top: "fc1" inner_product_param {{ num_output: 64 }} }}
layer {{ name: "frames" type: "Reshape" bottom: "fc1" top: "frames" reshape_param {{ shape {{ dim: 8 dim: 4 dim: 64 }} }} }}
layer {{ name: "rec1" type: "{type}" bottom: "frames" bottom: "cont" top: "rec1" recurrent_param {{ num_output: 32 }} }}
layer {{ name: "fc2" type: "InnerProduct" bottom: "rec1" top: "fc2" inner_product_param {{ num_output: 10 axis: 2 }} }}
layer {{ name: "loss" type: "SoftmaxWithLoss" bottom: "fc2" bottom: "label" top: "loss" softmax_param {{ axis: 2 }} }}
"""
LRCN = {"deploy_lstm.prototxt": ("TEST", {}), "train_test_lstm_RGB.prototxt": ("TRAIN", {"data": (384, 3, 227, 227), "label": (384,), "clip_markers": (384,)})}


@lru_cache(maxsize=None)
def _frames(type: str, phase: str, device: str) -> PhasePlan:
    return optimize(FRAMES.format(type=type), Options(phase=phase, device=device), OptimizeSettings(share_buffers=True)).phases[0]


@lru_cache(maxsize=None)
def _lrcn(file: str, device: str) -> PhasePlan:
    phase, inputs = LRCN[file]
    path = SHARED / "models" / "lrcn_activity_recognition" / file
    return optimize(str(path), Options(phase=phase, device=device, inputs=inputs), OptimizeSettings(share_buffers=True)).phases[0]


def _unbound_members(plan: PhasePlan) -> list[str]:
    """The table's members MemorySlots::Bind could not name."""
    class_of, graph = plan.schedule.class_of, plan.shaped.graph
    kinds = {blob: kind for blob, part, _, _ in plan.plan_data.assign for kind in ("blob", "buffer", "param") if (BlobId(kind, blob), part) in class_of}  # type: ignore[arg-type]
    return [blob for blob, kind in kinds.items() if not runtime_binds(graph, BlobId(kind, blob))]


@pytest.mark.parametrize("device", ["cpu", "gpu"])
@pytest.mark.parametrize("phase", ["TRAIN", "TEST"])
@pytest.mark.parametrize("type", ["LSTM", "RNN"])
def test_a_recurrent_nets_table_names_only_what_caffe_binds(type, phase, device):
    plan = _frames(type, phase, device)
    assert _unbound_members(plan) == []
    # the buffers Caffe binds still share: the convolution's im2col buffer on the CPU (on the
    # card its cuDNN workspace is runtime v6's pool's, never a slot's)
    assigned = {blob for blob, _, _, _ in plan.plan_data.assign}
    assert "1:conv1/col_buffer" in assigned if device == "cpu" else "1:conv1/cudnn_workspace" not in assigned
    kept = [plan.schedule.classes[c].owner for c, why in plan.liveness.kept.items() if why == UNBOUND]
    assert "5:rec1/unrolled/W_xc_x" in kept if type == "LSTM" else "5:rec1/unrolled/W_xh_x" in kept


@needs_shared
@pytest.mark.parametrize("device", ["cpu", "gpu"])
@pytest.mark.parametrize("file", sorted(LRCN))
def test_the_lrcn_lstm_tables_that_stopped_the_gpu_kit_name_only_what_caffe_binds(file, device):
    plan = _lrcn(file, device)
    assert _unbound_members(plan) == []
    assert any("/unrolled/" in plan.schedule.classes[c].owner for c, why in plan.liveness.kept.items() if why == UNBOUND)


def test_verify_says_what_caffe_says_of_a_table_naming_an_unrolled_blob():
    plan = _frames("LSTM", "TEST", "cpu")
    unrolled = next(c for c in plan.schedule.classes if c.owner == "5:rec1/unrolled/W_xc_x")
    table = PlanData({0: unrolled.bytes}, ((unrolled.owner, "data", 0, 0),))
    [violation] = bind_violations(plan.schedule, table, "frames")
    assert violation.message.startswith(
        "blob 5:rec1/unrolled/W_xc_x of mem_param slot 0 is not a blob or layer buffer this Caffe can bind of net frames (phase TEST): "
        "the net does not match the slot table (edited after `caffemem optimize`?); rerun `caffemem optimize`"
    )

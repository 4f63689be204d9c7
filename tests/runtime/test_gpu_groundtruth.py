"""The GPU kit's Python side (benchmarks/gpu/nets.py, measure.py), without a GPU: the net it runs is the one the
CPU ground truth ran (data layers of the phase -> one Input layer with the JSON's shapes), and
its output puts the GPU figures beside the CPU ones."""

from __future__ import annotations

import sys
from pathlib import Path

from google.protobuf import text_format

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))
from gpu.measure import merge  # noqa: E402
from gpu.nets import prepare_net  # noqa: E402
from gpu.probe import Programs  # noqa: E402

from caffemem.schema import caffe_pb2 as pb

# Shaped like BVLC/caffe: examples/mnist/lenet_train_test.prototxt (one Data layer per phase),
# with a fork-style data layer type the ground truth also fed through Input.
NET = """
name: "t"
layer { name: "mnist" type: "Data" top: "data" top: "label" include { phase: TRAIN } }
layer { name: "mnist" type: "Data" top: "data" top: "label" include { phase: TEST } }
layer { name: "ip" type: "InnerProduct" bottom: "data" top: "ip" inner_product_param { num_output: 10 } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "ip" bottom: "label" top: "loss" }
"""

#: No Caffe tools: these nets are not V1, so prepare_net does not upgrade them.
NO_TOOLS = Programs(Path("/nonexistent/probe"), Path("/nonexistent/upgrade_net_proto_text"), {})


def test_data_layers_of_the_phase_become_one_input_layer(tmp_path):
    src = tmp_path / "net.prototxt"
    src.write_text(NET)
    out = prepare_net(src, "TEST", {"data": [100, 1, 28, 28], "label": [100]}, NO_TOOLS, tmp_path / "out.prototxt")
    net = text_format.Parse(out.read_text(), pb.NetParameter())
    assert [(layer.name, layer.type) for layer in net.layer] == [("mnist", "Input"), ("ip", "InnerProduct"), ("loss", "SoftmaxWithLoss")]
    assert list(net.layer[0].top) == ["data", "label"]
    assert [list(s.dim) for s in net.layer[0].input_param.shape] == [[100, 1, 28, 28], [100]]


def test_a_bottomless_layer_feeding_only_inputs_is_replaced(tmp_path):
    """HED's ImageLabelmapData (not a BVLC type) is fed like Data."""
    src = tmp_path / "net.prototxt"
    src.write_text(NET.replace('type: "Data"', 'type: "ImageLabelmapData"'))
    out = prepare_net(src, "TRAIN", {"data": [1, 1, 28, 28], "label": [1]}, NO_TOOLS, tmp_path / "out.prototxt")
    assert [layer.type for layer in text_format.Parse(out.read_text(), pb.NetParameter()).layer] == ["Input", "InnerProduct", "SoftmaxWithLoss"]


def test_merge_puts_gpu_figures_beside_the_cpu_ones():
    gt_run = {"phase": "TEST", "layers": [{"name": "ip", "fwd_alloc": 40}]}
    step = {"device_alloc": 40}
    measured = {
        "layers": [{"name": "ip", "setup": step, "forward": step}, {"name": "extra", "setup": step, "forward": step}],
        "construct": step, "fill_inputs": step, "end": step,
    }
    run = merge(gt_run, measured)
    assert run["layers"] == [{"name": "ip", "fwd_alloc": 40, "gpu": {"setup": step, "forward": step}}]
    assert run["gpu"]["layers_not_in_groundtruth"] == ["extra"]
    assert gt_run["layers"] == [{"name": "ip", "fwd_alloc": 40}]  # the ground truth is not changed

"""Test nets for the runtime tests: models of ../shared/models with their data layers
replaced by Input layers (shapes from ../shared/groundtruth, batch cut small), plus three
generated nets (BatchNorm, siamese with shared weights, LSTM). Written to a tmp directory,
never into the repo. caffe.proto is compiled from the repo's proto/ with grpc_tools."""

from __future__ import annotations

import importlib
import json
import sys
from dataclasses import dataclass, replace
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SHARED = REPO.parent / "shared"
MODELS = SHARED / "models"
GROUNDTRUTH = SHARED / "groundtruth"

DATA_LAYERS = {"Data", "ImageData", "WindowData", "HDF5Data", "MemoryData", "Python", "DummyData", "VideoData", "Input"}


_PB2 = "runtime_test_caffe_pb2"


def caffe_pb2(tmp: Path):
    """proto/caffe.proto compiled under another file and package name (caffemem's own
    caffe_pb2 may already sit in protobuf's default pool), imported once per process."""
    if _PB2 in sys.modules:
        return sys.modules[_PB2]
    out = tmp / "pb"
    out.mkdir(parents=True, exist_ok=True)
    from grpc_tools import protoc

    text = (REPO / "proto" / "caffe.proto").read_text()
    (out / "runtime_test_caffe.proto").write_text(text.replace("package caffe;", "package runtime_test_caffe;", 1))
    rc = protoc.main(["protoc", f"-I{out}", f"--python_out={out}", str(out / "runtime_test_caffe.proto")])
    assert rc == 0, "protoc failed on proto/caffe.proto"
    sys.path.insert(0, str(out))
    return importlib.import_module(_PB2)


@dataclass(frozen=True)
class Case:
    """One net to run: ``model`` is "<folder>/<file>" under ../shared/models (None for a
    generated net), ``phase`` TRAIN or TEST, ``batch`` the cut batch size."""

    name: str
    model: str | None
    phase: str
    batch: int
    iters: int = 2


CASES = [
    Case("lenet", "bvlc_examples_mnist/lenet_train_test.prototxt", "TRAIN", 4),
    Case("lenet_test", "bvlc_examples_mnist/lenet_train_test.prototxt", "TEST", 4, 1),
    Case("cifar10_quick", "bvlc_examples_cifar10/cifar10_quick_train_test.prototxt", "TRAIN", 4),
    Case("mnist_autoencoder", "bvlc_examples_mnist/mnist_autoencoder.prototxt", "TRAIN", 4),
    Case("alexnet", "bvlc_alexnet/train_val.prototxt", "TRAIN", 2),
    Case("googlenet", "bvlc_googlenet/train_val.prototxt", "TRAIN", 2),
    Case("googlenet_test", "bvlc_googlenet/train_val.prototxt", "TEST", 2, 1),
    Case("squeezenet", "squeezenet_v1.0/train_val.prototxt", "TRAIN", 2),
    Case("resnet50_deploy", "resnet/ResNet-50-deploy.prototxt", "TEST", 1, 1),
    Case("batchnorm", None, "TRAIN", 4),
    Case("siamese", None, "TRAIN", 4),
    Case("lstm", None, "TRAIN", 4),
]
_BY_NAME = {c.name: c for c in CASES}
#: The nets `optimize --recompute` plans run on (issue 23): a BatchNorm net (batch 16, so that
#: the net outweighs the runtime's fixed costs), an Inception net and a net with Dropout.
RECOMPUTE_CASES = [replace(_BY_NAME["batchnorm"], batch=16, iters=3), _BY_NAME["googlenet"], _BY_NAME["alexnet"]]


def _groundtruth_inputs(model: str, phase: str) -> dict[str, list[int]]:
    folder, file = model.split("/")
    gt = json.loads((GROUNDTRUTH / f"{folder}__{Path(file).stem}.json").read_text())
    for run in gt["runs"]:
        if run["phase"] == phase:
            return run["inputs"]
    raise KeyError(f"{model}: no {phase} run in the ground truth")


def _input_layer(pb, name: str, tops: dict[str, list[int]], include=None):
    layer = pb.LayerParameter(name=name, type="Input")
    for top, shape in tops.items():
        layer.top.append(top)
        layer.input_param.shape.add().dim.extend(shape)
    if include is not None:
        layer.include.extend(include)
    return layer


def make_net(case: Case, tmp: Path) -> Path:
    """Write the case's net (data layers -> Input layers, batch cut) to tmp; return its path."""
    from google.protobuf import text_format

    pb = caffe_pb2(tmp)
    path = tmp / f"{case.name}.prototxt"
    if case.model is None:
        net = text_format.Parse(GENERATED[case.name].replace("BATCH", str(case.batch)), pb.NetParameter())
    else:
        net = text_format.Parse((MODELS / case.model).read_text(), pb.NetParameter())
        assert not net.layers, f"{case.model}: V1 nets are not used here"
        inputs = _groundtruth_inputs(case.model, case.phase)
        if not inputs and net.input:  # deploy nets: `input:` with input_dim/input_shape
            shapes = [list(s.dim) for s in net.input_shape] or [list(net.input_dim[4 * i : 4 * i + 4]) for i in range(len(net.input))]
            inputs = dict(zip(net.input, shapes))
        layers = list(net.layer)
        del net.layer[:]
        done = False
        for layer in layers:
            if layer.type in DATA_LAYERS:
                in_phase = not layer.include or any(r.phase == getattr(pb, case.phase) for r in layer.include if r.HasField("phase"))
                if not in_phase or done:
                    continue
                tops = {t: [case.batch] + list(inputs[t][1:]) for t in inputs}
                net.layer.append(_input_layer(pb, layer.name, tops))
                done = True
            else:
                net.layer.add().CopyFrom(layer)
        for name in ("input", "input_shape", "input_dim"):
            net.ClearField(name)
        if not done:  # deploy nets declare their inputs in the net itself
            net.layer.insert(0, _input_layer(pb, "input", {t: [case.batch] + list(inputs[t][1:]) for t in inputs}))
    path.write_text(text_format.MessageToString(net))
    return path


def input_args(case: Case, net: Path) -> list[str]:
    """No --input needed: the generated nets have Input layers."""
    return []


GENERATED = {
    "batchnorm": """
name: "bn_net"
layer { name: "data" type: "Input" top: "data" top: "label"
        input_param { shape { dim: BATCH dim: 3 dim: 16 dim: 16 } shape { dim: BATCH } } }
layer { name: "conv1" type: "Convolution" bottom: "data" top: "conv1"
        convolution_param { num_output: 8 kernel_size: 3 pad: 1 weight_filler { type: "gaussian" std: 0.1 } } }
layer { name: "bn1" type: "BatchNorm" bottom: "conv1" top: "conv1" }
layer { name: "scale1" type: "Scale" bottom: "conv1" top: "conv1" scale_param { bias_term: true } }
layer { name: "relu1" type: "ReLU" bottom: "conv1" top: "conv1" }
layer { name: "pool1" type: "Pooling" bottom: "conv1" top: "pool1" pooling_param { pool: MAX kernel_size: 2 stride: 2 } }
layer { name: "conv2" type: "Convolution" bottom: "pool1" top: "conv2"
        convolution_param { num_output: 8 kernel_size: 3 pad: 1 weight_filler { type: "gaussian" std: 0.1 } } }
layer { name: "bn2" type: "BatchNorm" bottom: "conv2" top: "bn2" }
layer { name: "scale2" type: "Scale" bottom: "bn2" top: "scale2" scale_param { bias_term: true } }
layer { name: "relu2" type: "ReLU" bottom: "scale2" top: "scale2" }
layer { name: "pool2" type: "Pooling" bottom: "scale2" top: "pool2" pooling_param { pool: AVE kernel_size: 2 stride: 2 } }
layer { name: "ip" type: "InnerProduct" bottom: "pool2" top: "ip"
        inner_product_param { num_output: 10 weight_filler { type: "xavier" } } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "ip" bottom: "label" top: "loss" }
""",
    "siamese": """
name: "siamese"
layer { name: "pair" type: "Input" top: "data" top: "data_p" top: "sim"
        input_param { shape { dim: BATCH dim: 1 dim: 28 dim: 28 } shape { dim: BATCH dim: 1 dim: 28 dim: 28 } shape { dim: BATCH } } }
layer { name: "conv1" type: "Convolution" bottom: "data" top: "conv1"
        param { name: "conv1_w" } param { name: "conv1_b" }
        convolution_param { num_output: 8 kernel_size: 5 stride: 1 weight_filler { type: "xavier" } } }
layer { name: "pool1" type: "Pooling" bottom: "conv1" top: "pool1" pooling_param { pool: MAX kernel_size: 2 stride: 2 } }
layer { name: "ip1" type: "InnerProduct" bottom: "pool1" top: "ip1"
        param { name: "ip1_w" } param { name: "ip1_b" }
        inner_product_param { num_output: 32 weight_filler { type: "xavier" } } }
layer { name: "relu1" type: "ReLU" bottom: "ip1" top: "ip1" }
layer { name: "feat" type: "InnerProduct" bottom: "ip1" top: "feat"
        param { name: "feat_w" } param { name: "feat_b" }
        inner_product_param { num_output: 2 weight_filler { type: "xavier" } } }
layer { name: "conv1_p" type: "Convolution" bottom: "data_p" top: "conv1_p"
        param { name: "conv1_w" } param { name: "conv1_b" }
        convolution_param { num_output: 8 kernel_size: 5 stride: 1 weight_filler { type: "xavier" } } }
layer { name: "pool1_p" type: "Pooling" bottom: "conv1_p" top: "pool1_p" pooling_param { pool: MAX kernel_size: 2 stride: 2 } }
layer { name: "ip1_p" type: "InnerProduct" bottom: "pool1_p" top: "ip1_p"
        param { name: "ip1_w" } param { name: "ip1_b" }
        inner_product_param { num_output: 32 weight_filler { type: "xavier" } } }
layer { name: "relu1_p" type: "ReLU" bottom: "ip1_p" top: "ip1_p" }
layer { name: "feat_p" type: "InnerProduct" bottom: "ip1_p" top: "feat_p"
        param { name: "feat_w" } param { name: "feat_b" }
        inner_product_param { num_output: 2 weight_filler { type: "xavier" } } }
layer { name: "loss" type: "ContrastiveLoss" bottom: "feat" bottom: "feat_p" bottom: "sim" top: "loss"
        contrastive_loss_param { margin: 1 } }
""",
    # 8 frames of 4 streams (batch 4; the net spells the shapes out): conv -> pool -> fc ->
    # T x N x 64 -> LSTM (lstm_layer.cpp's unrolled net) -> fc on axis 2 -> loss per frame.
    "lstm": """
name: "lstm_net"
layer { name: "data" type: "Input" top: "data" top: "cont" top: "label"
        input_param { shape { dim: 32 dim: 3 dim: 16 dim: 16 } shape { dim: 8 dim: 4 } shape { dim: 8 dim: 4 } } }
layer { name: "conv1" type: "Convolution" bottom: "data" top: "conv1"
        convolution_param { num_output: 8 kernel_size: 3 pad: 1 weight_filler { type: "gaussian" std: 0.1 } } }
layer { name: "relu1" type: "ReLU" bottom: "conv1" top: "conv1" }
layer { name: "pool1" type: "Pooling" bottom: "conv1" top: "pool1" pooling_param { pool: MAX kernel_size: 2 stride: 2 } }
layer { name: "fc1" type: "InnerProduct" bottom: "pool1" top: "fc1" inner_product_param { num_output: 64 weight_filler { type: "xavier" } } }
layer { name: "frames" type: "Reshape" bottom: "fc1" top: "frames" reshape_param { shape { dim: 8 dim: 4 dim: 64 } } }
layer { name: "lstm1" type: "LSTM" bottom: "frames" bottom: "cont" top: "lstm1"
        recurrent_param { num_output: 32 weight_filler { type: "uniform" min: -0.1 max: 0.1 } bias_filler { type: "constant" value: 0 } } }
layer { name: "fc2" type: "InnerProduct" bottom: "lstm1" top: "fc2" inner_product_param { num_output: 10 axis: 2 weight_filler { type: "xavier" } } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "fc2" bottom: "label" top: "loss" softmax_param { axis: 2 } }
""",
}


def with_declared_inputs(net_path: Path, tmp: Path) -> Path:
    """The same net with its Input layers turned into `input:`/`input_shape` fields (the
    yjxiong fork predates the Input layer)."""
    from google.protobuf import text_format

    pb = caffe_pb2(tmp)
    net = text_format.Parse(net_path.read_text(), pb.NetParameter())
    layers = list(net.layer)
    del net.layer[:]
    for layer in layers:
        if layer.type == "Input":
            for top, shape in zip(layer.top, layer.input_param.shape):
                net.input.append(top)
                net.input_shape.add().CopyFrom(shape)
        else:
            net.layer.add().CopyFrom(layer)
    out = tmp / f"{net_path.stem}.declared.prototxt"
    out.write_text(text_format.MessageToString(net))
    return out

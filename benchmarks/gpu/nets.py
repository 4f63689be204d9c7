"""A ground-truth net made into the one the probe runs: upgraded by Caffe's own tool when
it is in an old format, its data layers for the phase replaced by one Input layer with the
ground truth's shapes; and how slow its set-up is (its convolution groups on cuDNN)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from gpu.probe import Programs

#: Layer types whose tops the ground truth fed through Input layers (they read files); so is
#: any other layer without bottoms whose tops are all inputs of the run (fork data layers).
DATA_LAYERS = {"Data", "ImageData", "WindowData", "HDF5Data", "MemoryData", "Python", "DummyData", "VideoData"}


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


def cudnn_groups(source: Path) -> int:
    """The groups of the convolutions BVLC builds on cuDNN (layer_factory.cpp 40-75: engine
    DEFAULT or CUDNN, no dilation above 1), summed: each group is 3 cuDNN handles and 3
    streams (cudnn_conv_layer.cpp 51-56), what makes a net's set-up slow on the card.
    MobileNet's depthwise convolutions say `engine: CAFFE`: none of their groups counts."""
    from google.protobuf import text_format

    pb = caffe_pb2()
    net = text_format.Parse(source.read_text(), pb.NetParameter(), allow_unknown_field=True)
    total = 0
    for layer in [*net.layer, *net.layers]:
        if not layer.HasField("convolution_param"):
            continue
        param = layer.convolution_param
        if param.engine == pb.ConvolutionParameter.CAFFE or any(d > 1 for d in param.dilation):
            continue
        total += max(1, param.group)
    return total + sum(max(1, layer.layer.group) for layer in net.layers if layer.layer.type == "conv")  # V0: always cuDNN

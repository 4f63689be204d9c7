"""Custom layer types declared in a TOML file (`--layers FILE`)."""

from __future__ import annotations

import pytest
from conftest import FIXTURES

from caffemem.api.analyze import Options, analyze
from caffemem.errors import CaffememError

NET = str(FIXTURES / "custom" / "net.prototxt")
LAYERS = str(FIXTURES / "custom" / "upsample_layers.toml")
INPUTS = {"data": (2, 3, 8, 10), "label": (2, 16, 20)}


def shapes(**options):
    options = {"layers_file": LAYERS, "inputs": INPUTS, **options}
    return analyze(NET, Options(**options)).nets[0].shaped


def test_like_bottom_with_axes_changed():
    assert shapes().blob_shapes["up"] == (2, 3, 16, 20)


def test_explicit_shape_reads_the_layers_own_parameters():
    assert shapes().blob_shapes["proj"] == (2, 7, 16, 20)


def test_declared_parameter_shapes():
    shaped = shapes()
    proj = shaped.graph.layer("proj")
    assert shaped.layer_shapes[proj.index].params == ((7, 3, 1, 1),)


def test_declared_data_layer_takes_its_tops_from_input():
    with pytest.raises(CaffememError, match="'data' .*'label'"):
        shapes(inputs={})


def test_without_the_declarations_the_type_is_unknown():
    with pytest.raises(CaffememError, match="unknown layer type 'MyReader'.*--layers"):
        analyze(NET, Options(inputs=INPUTS))


def test_memory_of_a_declared_layer_is_a_labelled_guess():
    memory = analyze(NET, Options(layers_file=LAYERS, inputs=INPUTS)).nets[0].memory
    assert set(memory.unverified_types) == {"MyReader", "MyUpsample", "MyProjection"}


@pytest.mark.parametrize(
    "text, message",
    [
        ("[layer.X]\nbottoms = 1\n", "'top' must give each top's shape"),
        ("[layer.X]\ntop = ['like bottom 0']\ncolour = 1\n", "unknown key(s) colour"),
        ("[layer.X]\nbottoms = 'one'\ntop = ['like bottom 0']\n", "'bottoms' must be a count or [min, max]"),
        ("[layer.X\n", "not valid TOML"),
        ("title = 'x'\n", "expected one or more [layer.TYPE] tables"),
    ],
)
def test_bad_declarations_are_clear_errors(tmp_path, text, message):
    path = tmp_path / "layers.toml"
    path.write_text(text)
    with pytest.raises(CaffememError, match=message.replace("[", r"\[").replace("]", r"\]").replace("(", r"\(").replace(")", r"\)")) as caught:
        analyze(NET, Options(layers_file=str(path), inputs=INPUTS))
    assert str(path) in str(caught.value)


@pytest.mark.parametrize(
    "expression, message",
    [
        ("like bottom 3", "refers to bottom 3"),
        ("like bottom 0 with axis 9 = 1", "axis 9 is outside"),
        ("b0[0], __import__('os')", "not allowed"),
        ("b0[0], nope_param.x", "has no field 'nope_param.x'"),
        ("b0[0] // 0", "division by zero"),
    ],
)
def test_bad_shape_expressions_name_the_layer(tmp_path, expression, message):
    path = tmp_path / "layers.toml"
    path.write_text(open(LAYERS).read().replace("like bottom 0 with axis 2 = b0[2] * 2, axis 3 = b0[3] * 2", expression))
    with pytest.raises(CaffememError, match=message) as caught:
        analyze(NET, Options(layers_file=str(path), inputs=INPUTS))
    assert "layer 'up'" in str(caught.value)


# A fork's loss layer caffemem has no rule for (the colorization fork's own loss).
LOSS_NET = (
    'layer { name: "in" type: "Input" top: "x" top: "y" input_param { shape { dim: 2 dim: 4 } shape { dim: 2 dim: 4 } } }\n'
    'layer { name: "ip" type: "InnerProduct" bottom: "x" top: "ip" inner_product_param { num_output: 4 } }\n'
    'layer { name: "loss" type: "ColorLoss" bottom: "ip" bottom: "y" top: "loss" }\n'
)


def test_the_skeleton_of_a_loss_declares_a_scalar_loss_that_trains(tmp_path):
    # Issue 34: its placeholder top = ["like bottom 0"] is no loss's shape.
    from types import SimpleNamespace

    from google.protobuf import text_format

    from caffemem.layers.declarative import layer_skeleton
    from caffemem.schema import caffe_pb2

    proto = text_format.Parse(LOSS_NET.splitlines()[2], caffe_pb2.NetParameter()).layer[0]
    root = SimpleNamespace(schema=SimpleNamespace(view=lambda proto: None), registered={"ColorLoss": SimpleNamespace(file="src/caffe/layers/color_loss_layer.cpp", line=9)}, relative=lambda file: file)
    skeleton = layer_skeleton("ColorLoss", [SimpleNamespace(bottoms=tuple(proto.bottom), tops=tuple(proto.top), proto=proto)], root)
    assert skeleton.splitlines()[-2:] == ["loss = true  # a LossLayer: its top 0 is the loss, a scalar, weighted 1 unless loss_weight says otherwise", 'top = ["scalar"]']
    layers = tmp_path / "layers.toml"
    layers.write_text(skeleton)
    net = analyze(LOSS_NET, Options(layers_file=str(layers))).nets[0]
    assert (net.phase, net.blobs["loss"], net.memory.by_category["parameter_gradients"] > 0) == ("TRAIN", (), True)

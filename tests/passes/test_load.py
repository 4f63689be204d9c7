"""Loading: text, binary and solver files, located errors, --lenient."""

from __future__ import annotations

import pytest

from caffemem.errors import CaffememError
from caffemem.passes.load import NetSource, SolverSource, load
from caffemem.schema import caffe_pb2

NET = """name: "tiny"
layer {
  name: "data"
  type: "Input"
  top: "data"
  input_param { shape { dim: 1 dim: 3 dim: 8 dim: 8 } }
}
layer {
  name: "conv"
  type: "Convolution"
  bottom: "data"
  top: "conv"
  convolution_param { num_output: 4 kernel_size: 3 }
}
"""


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text) if isinstance(text, str) else path.write_bytes(text)
    return str(path)


def test_text_net_keeps_the_line_of_every_layer(tmp_path):
    source = load(write(tmp_path, "net.prototxt", NET))
    assert isinstance(source, NetSource)
    assert [layer.name for layer in source.proto.layer] == ["data", "conv"]
    assert source.line_of("data") == 2 and source.line_of("conv") == 8


def test_unknown_field_names_file_line_column_field_and_layer(tmp_path):
    path = write(tmp_path, "bad.prototxt", NET.replace("num_output: 4", "num_output: 4 kernel_sise: 3"))
    with pytest.raises(CaffememError) as caught:
        load(path)
    message = str(caught.value)
    assert message.startswith(f"{path}:13:")
    assert "unknown field 'kernel_sise' in ConvolutionParameter" in message
    assert "layer 'conv'" in message


def test_lenient_skips_unknown_fields_with_one_warning_each(tmp_path):
    text = NET.replace("num_output: 4", "num_output: 4 kernel_sise: 3 my_param { a: 1 }")
    source = load(write(tmp_path, "bad.prototxt", text), lenient=True)
    assert source.proto.layer[1].convolution_param.num_output == 4
    warnings = [n for n in source.notes if n.startswith("warning")]
    assert len(warnings) == 2
    assert "kernel_sise" in warnings[0] and "my_param" in warnings[1]


# richzhang/colorization's models/colorization_train_val_v2.prototxt needs its own Caffe
# (caffe-colorization); a field only such a fork has gets named with the fork.
COLORIZATION = NET.replace(
    '  convolution_param { num_output: 4 kernel_size: 3 }\n',
    '  convolution_param { num_output: 4 kernel_size: 3 }\n  image_data_modify_param { resize: true }\n',
)


def test_unknown_fork_field_names_the_fork_on_one_located_line(tmp_path):
    from click.testing import CliRunner

    from caffemem.cli import main

    path = write(tmp_path, "color.prototxt", COLORIZATION)
    result = CliRunner().invoke(main, ["analyze", path])
    assert result.exit_code == 2
    message = result.output.strip()
    assert "\n" not in message and "Traceback" not in message
    assert f"{path}:14:" in message and "layer 'conv'" in message
    assert "unknown field 'image_data_modify_param' in LayerParameter: it belongs to richzhang/colorization's Caffe" in message


def test_unknown_field_of_no_known_fork_is_not_attributed(tmp_path):
    path = write(tmp_path, "bad.prototxt", NET.replace("num_output: 4", "num_output: 4 kernel_sise: 3"))
    with pytest.raises(CaffememError) as caught:
        load(path)
    assert "belongs to" not in str(caught.value)


def test_fork_field_lookup_prefers_the_message_specific_entry():
    from caffemem.schema.forks import fork_defining

    # PSPNet's transform crop_width, but DenseImageDataParameter has a crop_width of its own
    assert "PSPNet" in fork_defining("TransformationParameter", "crop_width")
    assert fork_defining("SomeOtherParameter", "crop_width") is None
    assert "flownet2" in fork_defining("LayerParameter", "correlation_param")
    assert fork_defining("ConvolutionParameter", "kernel_sise") is None
    # an enum value: C3D-v1.0's voxel layers, which caffemem does not model
    assert "C3D-v1.0" in fork_defining("V1LayerParameter.LayerType", "VOXEL_CUSTOM_LOSS")
    assert fork_defining("V1LayerParameter.LayerType", "hole") is None


def test_unknown_v1_type_of_c3d_names_the_fork(tmp_path):
    # facebook/C3D C3D-v1.0's VOLUME_DATA (volume_data_layer.cpp: LevelDB volumes), not modelled
    text = 'name: "c3d"\nlayers {\n  name: "data"\n  type: VOLUME_DATA\n  top: "data"\n}\n'
    with pytest.raises(CaffememError) as caught:
        load(write(tmp_path, "c3d.prototxt", text))
    message = str(caught.value)
    assert ":4:" in message and "layer 'data'" in message
    assert "unknown value VOLUME_DATA for enum V1LayerParameter.LayerType: it belongs to facebook/C3D C3D-v1.0" in message


def test_unknown_layer_type_of_a_known_fork_names_it(tmp_path):
    # richzhang/colorization models/colorization_train_val_v2.prototxt ends in its fork's
    # SoftmaxCrossEntropyLoss
    from caffemem.api.analyze import Options, analyze

    text = NET + 'layer {\n  name: "loss8_313"\n  type: "SoftmaxCrossEntropyLoss"\n  bottom: "conv"\n  bottom: "data"\n  top: "loss"\n}\n'
    path = write(tmp_path, "color.prototxt", text)
    with pytest.raises(CaffememError) as caught:
        analyze(path, Options(phase="TRAIN"))
    message = str(caught.value)
    assert f"{path}:15:" in message and "layer 'loss8_313'" in message
    assert "unknown layer type 'SoftmaxCrossEntropyLoss'" in message and "it belongs to richzhang/colorization's Caffe" in message


def test_lenient_warning_names_the_fork(tmp_path):
    source = load(write(tmp_path, "color.prototxt", COLORIZATION), lenient=True)
    (warning,) = [n for n in source.notes if n.startswith("warning")]
    assert ":14:" in warning and "image_data_modify_param" in warning and "richzhang/colorization" in warning


def test_syntax_error_is_located(tmp_path):
    path = write(tmp_path, "broken.prototxt", NET.replace('top: "conv"\n', 'top: "conv"\n  {{\n'))
    with pytest.raises(CaffememError) as caught:
        load(path)
    assert f"{path}:" in str(caught.value)
    assert caught.value.where.line is not None


def test_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(CaffememError, match="file not found"):
        load(str(tmp_path / "nope.prototxt"))


def test_empty_file_is_a_net_with_no_layers(tmp_path):
    source = load(write(tmp_path, "empty.prototxt", ""))
    assert isinstance(source, NetSource) and len(source.proto.layer) == 0


def test_binary_caffemodel_keeps_parameter_shapes_not_weights(tmp_path):
    net = caffe_pb2.NetParameter(name="bin")
    layer = net.layer.add(name="ip", type="InnerProduct")
    blob = layer.blobs.add()
    blob.shape.dim.extend([10, 20])
    blob.data.extend([0.5] * 200)
    source = load(write(tmp_path, "w.caffemodel", net.SerializeToString() + b""))
    assert source.binary
    assert source.stored_params == {"ip": ((10, 20),)}
    assert len(source.proto.layer[0].blobs) == 0


def test_binary_garbage_is_refused(tmp_path):
    with pytest.raises(CaffememError, match="binary"):
        load(write(tmp_path, "junk.bin", b"\x00\xff\xfe" * 100))


def test_solver_reads_train_and_test_nets_relative_to_its_folder(tmp_path):
    write(tmp_path, "net.prototxt", NET)
    solver = write(tmp_path, "solver.prototxt", 'net: "net.prototxt"\ntest_iter: 10\ntest_iter: 5\nbase_lr: 0.01\ntest_state { stage: "val" }\ntest_state { stage: "x" }\n')
    source = load(solver, cwd=tmp_path / "elsewhere")
    assert isinstance(source, SolverSource)
    assert len(source.tests) == 2
    assert list(source.tests[0].state.stage) == ["val"]
    assert source.tests[1].state.phase == caffe_pb2.TEST
    assert any("relative to the solver's folder" in note for note in source.notes)


def test_solver_prefers_the_working_directory_as_caffe_does(tmp_path):
    (tmp_path / "run").mkdir()
    write(tmp_path / "run", "net.prototxt", NET)
    write(tmp_path, "net.prototxt", NET.replace("tiny", "beside"))
    solver = write(tmp_path, "solver.prototxt", 'net: "net.prototxt"\n')
    source = load(solver, cwd=tmp_path / "run")
    assert source.train.proto.name == "tiny"
    assert any("working directory" in note for note in source.notes)


def test_solver_with_missing_net_names_every_place_tried(tmp_path):
    solver = write(tmp_path, "solver.prototxt", 'train_net: "models/x/train.prototxt"\n')
    with pytest.raises(CaffememError, match="train_net 'models/x/train.prototxt' not found"):
        load(solver, cwd=tmp_path)


def test_solver_needs_exactly_one_train_net(tmp_path):
    write(tmp_path, "net.prototxt", NET)
    solver = write(tmp_path, "solver.prototxt", 'net: "net.prototxt"\ntrain_net: "net.prototxt"\n')
    with pytest.raises(CaffememError, match="exactly one of"):
        load(solver, cwd=tmp_path)


def test_inline_net_param_in_solver(tmp_path):
    body = "\n".join("  " + line for line in NET.splitlines())
    solver = write(tmp_path, "solver.prototxt", "base_lr: 0.1\nnet_param {\n" + body + "\n}\n")
    source = load(solver)
    assert source.train.proto.name == "tiny"
    assert source.train.line_of("conv") == 10

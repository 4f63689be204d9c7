"""--input as a train_val file and a solver need it: a shape without its batch takes each
phase's own batch from the data layer, TRAIN:/TEST: qualify a name by phase, and a
solver's nets take only the inputs they have."""

from __future__ import annotations

import json

from click.testing import CliRunner
from conftest import FIXTURES, SHARED, needs_shared

import caffemem
from caffemem.cli import main
from caffemem.schema import caffe_pb2

LENET = str(FIXTURES / "examples" / "lenet_train.prototxt")
GOOGLENET = SHARED / "models" / "bvlc_googlenet" / "train_val.prototxt"


@needs_shared
def test_a_shape_without_batch_keeps_each_phases_batch_and_optimize_writes_both_tables(tmp_path):
    # BVLC GoogLeNet train_val: Data layers with batch_size 32 (TRAIN) and 50 (TEST),
    # crop_size 224; only the channels are in the LMDB.
    shapes = {phase: caffemem.analyze(str(GOOGLENET), phase=phase, inputs={"data": (3, 224, 224)}).nets[0].blobs["data"] for phase in ("TRAIN", "TEST")}
    assert shapes == {"TRAIN": (32, 3, 224, 224), "TEST": (50, 3, 224, 224)}
    out = tmp_path / "out.prototxt"
    result = CliRunner().invoke(main, ["optimize", str(GOOGLENET), "--input", "data=3,224,224", "-o", str(out)])
    assert result.exit_code == 0, result.output
    from google.protobuf import text_format

    written = text_format.Parse(out.read_text(), caffe_pb2.NetParameter())
    assert {caffe_pb2.Phase.Name(slot.phase) for slot in written.mem_param.slot} == {"TRAIN", "TEST"}


def test_phase_qualified_inputs_go_to_their_phase_only():
    options = caffemem.Options(inputs={"TEST:data": (8, 1, 28, 28), "TEST:label": (8,)}, overrides=frozenset({"TEST:data", "TEST:label"}))
    train = caffemem.analyze(LENET, options, phase="TRAIN").nets[0]
    test = caffemem.analyze(LENET, options, phase="TEST").nets[0]
    assert train.blobs["data"] == (64, 1, 28, 28) and test.blobs["data"] == (8, 1, 28, 28)


def test_a_qualified_input_wins_over_a_plain_one():
    inputs = {"data": (16, 1, 28, 28), "TEST:data": (8, 1, 28, 28), "label": (8,)}
    net = caffemem.analyze(LENET, caffemem.Options(inputs=inputs, overrides=frozenset(inputs)), phase="TEST").nets[0]
    assert net.blobs["data"] == (8, 1, 28, 28)


def test_a_solvers_nets_take_only_the_inputs_they_have(tmp_path):
    (tmp_path / "train.prototxt").write_text(open(LENET).read())
    (tmp_path / "test.prototxt").write_text(
        'layer { name: "in" type: "Input" top: "pixels" input_param { shape { dim: 4 dim: 1 dim: 28 dim: 28 } } }\n'
        'layer { name: "ip" type: "InnerProduct" bottom: "pixels" top: "ip" inner_product_param { num_output: 10 } }\n'
    )
    (tmp_path / "solver.prototxt").write_text('train_net: "train.prototxt"\ntest_net: "test.prototxt"\ntest_iter: 1\ntest_interval: 10\nbase_lr: 0.1\nlr_policy: "fixed"\n')
    result = CliRunner().invoke(main, ["analyze", str(tmp_path / "solver.prototxt"), "--override-input", "data=2,1,28,28", "--override-input", "label=2", "--json"])
    assert result.exit_code == 0, result.output
    nets = json.loads(result.output)["nets"]
    assert nets[0]["blobs"][0] == {"name": "data", "shape": [2, 1, 28, 28]} and nets[1]["blobs"][0] == {"name": "pixels", "shape": [4, 1, 28, 28]}


def test_a_typo_in_a_net_files_input_is_still_refused():
    result = CliRunner().invoke(main, ["analyze", LENET, "--input", "dta=1,1,28,28"])
    assert result.exit_code == 2 and "--input dta" in result.output


def test_a_placeholder_input_gets_a_warning_and_the_real_size_silences_it(tmp_path):
    # OpenPose's deploy files ship `input_dim: 1 3 1 1` and resize the input at run time.
    net = tmp_path / "pose.prototxt"
    net.write_text('name: "pose"\ninput: "image"\ninput_dim: 1\ninput_dim: 3\ninput_dim: 1\ninput_dim: 1\n'
                   'layer { name: "conv1" type: "Convolution" bottom: "image" top: "conv1" convolution_param { num_output: 8 kernel_size: 1 } }\n')
    (warned,) = [n for n in caffemem.analyze(str(net)).nets[0].notes if n.startswith("warning: input 'image' is 1x3x1x1")]
    assert "--input image=1,3,368,368" in warned
    assert not [n for n in caffemem.analyze(str(net), inputs={"image": (1, 3, 368, 368)}).nets[0].notes if "placeholder" in n]


def test_a_templated_file_is_named_as_one(tmp_path):
    net = tmp_path / "tpl.prototxt"
    net.write_text('layer { name: "in" type: "Input" top: "data" input_param { shape { dim: ${BATCH} dim: 3 } } }\n')
    result = CliRunner().invoke(main, ["analyze", str(net)])
    assert result.exit_code == 2 and "the file is a template: fill in its placeholders (${BATCH})" in result.output


def test_replanning_one_phase_keeps_the_other_phases_table(tmp_path):
    from google.protobuf import text_format

    both, again = tmp_path / "both.prototxt", tmp_path / "again.prototxt"
    assert CliRunner().invoke(main, ["optimize", LENET, "-o", str(both)]).exit_code == 0
    assert CliRunner().invoke(main, ["optimize", str(both), "--phase", "TRAIN", "--force", "-o", str(again)]).exit_code == 0
    before, after = (text_format.Parse(path.read_text(), caffe_pb2.NetParameter()).mem_param for path in (both, again))
    tests = lambda block: [slot for slot in block.slot if slot.phase == caffe_pb2.TEST]  # noqa: E731
    assert tests(after) == tests(before) and after.optimize_train and after.optimize_test
    assert any(slot.phase == caffe_pb2.TRAIN for slot in after.slot)


def test_an_error_in_one_phase_names_that_phase_and_the_line(tmp_path):
    # A layer that only the TEST net includes, with a bottom nobody produces.
    net = tmp_path / "net.prototxt"
    text = open(LENET).read()
    net.write_text(text + 'layer {\n  name: "probe"\n  type: "ReLU"\n  bottom: "nowhere"\n  top: "probe"\n  include { phase: TEST }\n}\n')
    line = text.count("\n") + 1
    result = CliRunner().invoke(main, ["optimize", str(net)])
    assert result.exit_code == 2
    assert result.output.startswith(f"caffemem: error: {net}:{line}: TEST net: layer 'probe' (ReLU): bottom 0 'nowhere'"), result.output


# ----------------------------------------------------------------------------- inputs fill, never override

ALEXNET = SHARED / "models" / "bvlc_alexnet"


@needs_shared
def test_an_input_that_contradicts_an_input_layers_shape_is_an_error_naming_the_files_value_and_line():
    # bvlc_alexnet/deploy.prototxt: layer 'data' (Input, from line 2) states 10,3,227,227.
    result = CliRunner().invoke(main, ["analyze", str(ALEXNET / "deploy.prototxt"), "--input", "data=10,3,224,224"])
    assert result.exit_code == 2
    assert result.output == (
        f"caffemem: error: {ALEXNET / 'deploy.prototxt'}:2: TEST net: layer 'data' (Input): --input data=10,3,224,224 contradicts the file: "
        "it states 10,3,227,227 for 'data' (axis 2: 227, not 224); give only what the file leaves open (_ keeps an axis as stated, "
        "e.g. --input data=_,_,_,_), or --override-input data=10,3,224,224 analyses it anyway\n"
    )


@needs_shared
def test_override_input_analyses_another_size_and_says_so():
    result = CliRunner().invoke(main, ["analyze", str(ALEXNET / "deploy.prototxt"), "--override-input", "data=10,3,224,224", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["blobs"][0] == {"name": "data", "shape": [10, 3, 224, 224]}
    assert "override: --override-input data gives [10, 3, 224, 224] where the file states [10, 3, 227, 227] (layer 'data', Input, line 2)" in report["notes"]


@needs_shared
def test_a_crop_size_is_not_replaced_by_an_input_without_batch():
    # bvlc_alexnet/train_val.prototxt: TRAIN Data layer with batch_size 256 and crop_size 227.
    result = CliRunner().invoke(main, ["analyze", str(ALEXNET / "train_val.prototxt"), "--input", "data=3,224,224"])
    assert result.exit_code == 2
    assert "--input data=3,224,224 contradicts the file: it states 256,C,227,227 for 'data' (axis 2: 227, not 224)" in result.output


@needs_shared
def test_underscores_give_only_the_channels_and_keep_each_phases_batch_and_crop():
    shapes = {phase: caffemem.analyze(str(ALEXNET / "train_val.prototxt"), phase=phase, inputs={"data": (-1, 3, -1, -1)}).nets[0].blobs["data"] for phase in ("TRAIN", "TEST")}
    assert shapes == {"TRAIN": (256, 3, 227, 227), "TEST": (50, 3, 227, 227)}
    result = CliRunner().invoke(main, ["analyze", str(ALEXNET / "train_val.prototxt"), "--input", "data=_,3,_,_", "--json"])
    assert result.exit_code == 0 and json.loads(result.output)["blobs"][0]["shape"] == [256, 3, 227, 227]


@needs_shared
def test_the_channels_alone_are_refused_with_the_value_to_give():
    result = CliRunner().invoke(main, ["analyze", str(ALEXNET / "train_val.prototxt"), "--input", "data=3"])
    assert result.exit_code == 2
    assert result.output.endswith(
        "--input data=3 has 1 axis(es), but the file states 4 for 'data' (256,C,227,227); give each axis, _ for one the file states, e.g. --input data=_,3,_,_\n"
    )


def test_an_input_that_changes_the_batch_points_at_batch():
    result = CliRunner().invoke(main, ["analyze", LENET, "--input", "data=8,1,28,28"])
    assert result.exit_code == 2
    assert "(axis 0: 64, not 8)" in result.output and result.output.rstrip().endswith("or --batch N changes the batch")


def test_an_input_that_agrees_with_the_file_is_accepted():
    assert caffemem.analyze(LENET, inputs={"data": (64, 1, 28, 28)}).nets[0].blobs["data"] == (64, 1, 28, 28)


def fed_by(tmp_path, data_layer: str):
    """A net whose data layer (text) feeds an InnerProduct with its top 'data'."""
    net = tmp_path / "net.prototxt"
    net.write_text(data_layer + '\nlayer { name: "ip" type: "InnerProduct" bottom: "data" top: "ip" inner_product_param { num_output: 2 } }\n')
    return net


def test_an_underscore_on_an_axis_the_file_leaves_open_still_asks_for_it(tmp_path):
    net = fed_by(tmp_path, 'layer { name: "d" type: "Data" top: "data" data_param { source: "db" batch_size: 8 } }')
    result = CliRunner().invoke(main, ["analyze", str(net), "--input", "data=_,3,_,_"])
    assert result.exit_code == 2 and "--input data=_,3,H,W" in result.output


def test_an_underscore_where_the_file_states_nothing_is_refused(tmp_path):
    net = fed_by(tmp_path, 'layer { name: "in" type: "Input" top: "data" }')
    result = CliRunner().invoke(main, ["analyze", str(net), "--input", "data=_,3"])
    assert result.exit_code == 2
    assert "--input data=_,3: the file states no axis of 'data' for _ to keep; give every axis as a number" in result.output


def test_an_hdf5_batch_is_not_replaced_by_a_shape_without_it(tmp_path):
    # HDF5Data states only the batch: a C,H,W value would silently have been a batch of 3.
    net = fed_by(tmp_path, 'layer { name: "h" type: "HDF5Data" top: "data" hdf5_data_param { source: "list.txt" batch_size: 16 } }')
    result = CliRunner().invoke(main, ["analyze", str(net), "--input", "data=3,32,32"])
    assert result.exit_code == 2 and "(axis 0: 16, not 3)" in result.output
    assert caffemem.analyze(str(net), inputs={"data": (-1, 3, 32, 32)}).nets[0].blobs["data"] == (16, 3, 32, 32)


def test_a_name_given_both_as_input_and_as_override_is_refused():
    result = CliRunner().invoke(main, ["analyze", LENET, "--input", "data=_,1,28,28", "--override-input", "data=8,1,28,28"])
    assert result.exit_code == 2 and "data is given with both --input and --override-input" in result.output


def test_a_contradicted_input_dim_is_named_at_its_line(tmp_path):
    net = tmp_path / "deploy.prototxt"
    net.write_text('name: "legacy"\ninput: "data"\ninput_dim: 1\ninput_dim: 3\ninput_dim: 32\ninput_dim: 32\n'
                   'layer { name: "ip" type: "InnerProduct" bottom: "data" top: "ip" inner_product_param { num_output: 2 } }\n')
    result = CliRunner().invoke(main, ["analyze", str(net), "--input", "data=1,3,64,64"])
    assert result.exit_code == 2
    assert result.output.startswith(f"caffemem: error: {net}:2: TEST net: layer 'input' (Input): --input data=1,3,64,64 contradicts the file: it states 1,3,32,32")


DOCS = FIXTURES / "docs"  # train_val.prototxt: Data layers of batch 32 (TRAIN) and 50 (TEST), crop 224, no database here


def test_the_input_hint_of_a_solver_works_for_every_phase_as_given(tmp_path):
    # Issue 34: `fit solver.prototxt` asked for data=50,C,224,224 (the TEST net's batch),
    # which then contradicted the TRAIN net's 32.
    first = CliRunner().invoke(main, ["fit", str(DOCS / "solver.prototxt"), "--gpu-memory", "12GiB"])
    assert first.exit_code == 2 and "; pass --input data=_,C,224,224; its source examples/imagenet/val_lmdb is not at " in first.output
    second = CliRunner().invoke(main, ["fit", str(DOCS / "solver.prototxt"), "--gpu-memory", "12GiB", "--input", "data=_,3,224,224"])
    assert second.exit_code == 0, second.output

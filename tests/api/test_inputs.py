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
    train = caffemem.analyze(LENET, phase="TRAIN", inputs={"TEST:data": (8, 1, 28, 28), "TEST:label": (8,)}).nets[0]
    test = caffemem.analyze(LENET, phase="TEST", inputs={"TEST:data": (8, 1, 28, 28), "TEST:label": (8,)}).nets[0]
    assert train.blobs["data"] == (64, 1, 28, 28) and test.blobs["data"] == (8, 1, 28, 28)


def test_a_qualified_input_wins_over_a_plain_one():
    net = caffemem.analyze(LENET, phase="TEST", inputs={"data": (16, 1, 28, 28), "TEST:data": (8, 1, 28, 28), "label": (8,)}).nets[0]
    assert net.blobs["data"] == (8, 1, 28, 28)


def test_a_solvers_nets_take_only_the_inputs_they_have(tmp_path):
    (tmp_path / "train.prototxt").write_text(open(LENET).read())
    (tmp_path / "test.prototxt").write_text(
        'layer { name: "in" type: "Input" top: "pixels" input_param { shape { dim: 4 dim: 1 dim: 28 dim: 28 } } }\n'
        'layer { name: "ip" type: "InnerProduct" bottom: "pixels" top: "ip" inner_product_param { num_output: 10 } }\n'
    )
    (tmp_path / "solver.prototxt").write_text('train_net: "train.prototxt"\ntest_net: "test.prototxt"\ntest_iter: 1\ntest_interval: 10\nbase_lr: 0.1\nlr_policy: "fixed"\n')
    result = CliRunner().invoke(main, ["analyze", str(tmp_path / "solver.prototxt"), "--input", "data=2,1,28,28", "--input", "label=2", "--json"])
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

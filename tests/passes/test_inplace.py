"""`caffemem optimize --inplace`: which layers go in place, which stay as written and why,
and that the rewritten file is the user's file with only those names changed, runs the
same, and costs exactly the rewritten tops less.

The small nets: a (2, 3, 8, 8) input, 3x3 convolutions with 4 outputs, so a blob after
the first convolution is (2, 4, 6, 6): 288 float32 = 1152 bytes, its shape 16 bytes.
"""

from __future__ import annotations

import json
import re
import sys
from collections import Counter

import pytest
from click.testing import CliRunner
from conftest import FIXTURES, SHARED, needs_shared
from google.protobuf import text_format

from caffemem.api.analyze import Options, analyze
from caffemem.api.optimize import OptimizeSettings, optimize
from caffemem.cli import main
from caffemem.errors import CaffememError
from caffemem.plan.verify import verify_plan
from caffemem.schema import caffe_pb2

sys.path.insert(0, str(FIXTURES))
from generate import resnet  # noqa: E402  (fixtures/generate.py)

HEAD = """name: "t"
layer { name: "data" type: "Input" top: "data" top: "label"
  input_param { shape { dim: 2 dim: 3 dim: 8 dim: 8 } shape { dim: 2 } } }
layer { name: "conv1" type: "Convolution" bottom: "data" top: "conv1"
  convolution_param { num_output: 4 kernel_size: 3 } }
"""
TAIL = """layer { name: "fc" type: "InnerProduct" bottom: "%s" top: "fc" inner_product_param { num_output: 5 } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "fc" bottom: "label" top: "loss" }
"""
BLOB_BYTES = 2 * 4 * 6 * 6 * 4  # (2, 4, 6, 6) float32
SHAPE_BYTES = 4 * 4


def net(tmp_path, body: str, last: str, name: str = "net.prototxt") -> str:
    path = tmp_path / name
    path.write_text(HEAD + body + TAIL % last)
    return str(path)


def in_place(path: str, phase: str = "TRAIN", **settings):
    return optimize(path, Options(phase=phase), OptimizeSettings(inplace=True, **settings)).inplace


def rewritten(result) -> list[tuple[str, str, str]]:
    return [(r.layer, r.top_was, r.now) for r in result.rewrites]


def kept(result) -> dict[str, str]:
    return {k.layer: k.reason for k in result.kept}


RELU_OUT_OF_PLACE = 'layer { name: "relu1" type: "ReLU" bottom: "conv1" top: "relu1" }  # not in place\n'


# ----------------------------------------------------------------------------- what is rewritten


def test_out_of_place_relu_takes_its_bottoms_name_and_so_do_its_readers(tmp_path):
    result = in_place(net(tmp_path, RELU_OUT_OF_PLACE, "relu1"))
    assert rewritten(result) == [("relu1", "relu1", "conv1")]
    assert 'bottom: "conv1" top: "conv1" }  # not in place' in result.text
    assert 'bottom: "conv1" top: "fc"' in result.text


def test_only_the_renamed_names_change_every_other_byte_is_kept(tmp_path):
    path = net(tmp_path, RELU_OUT_OF_PLACE, "relu1")
    original = open(path).read()
    result = in_place(path)
    assert result.text.splitlines(keepends=True) != original.splitlines(keepends=True)
    assert result.text.replace('"conv1"', '"relu1"') == original.replace('"conv1"', '"relu1"')
    assert result.text.count("\n") == original.count("\n")


def test_the_output_parses_and_builds_with_the_relu_in_place(tmp_path):
    result = in_place(net(tmp_path, RELU_OUT_OF_PLACE, "relu1"))
    out = tmp_path / "out.prototxt"
    out.write_text(result.text)
    parsed = text_format.Parse(result.text, caffe_pb2.NetParameter())
    assert [list(layer.top) for layer in parsed.layer if layer.name == "relu1"] == [["conv1"]]
    graph = analyze(str(out)).nets[0].shaped.graph
    assert graph.layer("relu1").in_place_tops == (True,)


def test_a_bottom_read_by_two_layers_is_kept(tmp_path):
    body = RELU_OUT_OF_PLACE + 'layer { name: "sig" type: "Sigmoid" bottom: "conv1" top: "sig" }\n'
    body += 'layer { name: "cat" type: "Concat" bottom: "relu1" bottom: "sig" top: "cat" }\n'
    result = in_place(net(tmp_path, body, "cat"))
    assert rewritten(result) == []
    assert kept(result) == {"relu1": "its bottom 'conv1' is also read by 'sig'", "sig": "its bottom 'conv1' is also read by 'relu1'"}


def test_a_type_that_is_wrong_in_place_is_never_a_candidate(tmp_path):
    # bnll_layer.cpp: Backward reads bottom_data, which in place would be log(1 + e^x).
    result = in_place(net(tmp_path, 'layer { name: "bnll" type: "BNLL" bottom: "conv1" top: "bnll" }\n', "bnll"))
    assert rewritten(result) == [] and kept(result) == {}


def test_a_relu_with_a_negative_slope_is_kept(tmp_path):
    # In place its Backward would test the sign of slope * x, which is flipped.
    body = 'layer { name: "relu1" type: "ReLU" bottom: "conv1" top: "relu1" relu_param { negative_slope: -0.5 } }\n'
    assert kept(in_place(net(tmp_path, body, "relu1"))) == {"relu1": "ReLU is not right in place with these parameters"}


def test_a_net_output_keeps_its_name(tmp_path):
    path = tmp_path / "net.prototxt"
    path.write_text(HEAD + 'layer { name: "sig" type: "Sigmoid" bottom: "conv1" top: "prob" }\n')
    assert kept(in_place(str(path))) == {"sig": "its top 'prob' is a net output (no layer reads it)"}


def test_a_data_layers_top_is_kept(tmp_path):
    path = tmp_path / "net.prototxt"
    head, conv = HEAD.split('layer { name: "conv1"')
    path.write_text(head + 'layer { name: "drop" type: "Dropout" bottom: "data" top: "dropped" }\nlayer { name: "conv1"' + conv.replace('"data"', '"dropped"') + TAIL % "conv1")
    assert kept(in_place(str(path))) == {"drop": "its bottom 'data' is a data layer's top (a net input)"}


def test_an_excluded_blob_is_kept(tmp_path):
    result = in_place(net(tmp_path, RELU_OUT_OF_PLACE, "relu1"), exclude=("relu1",))
    assert kept(result) == {"relu1": "blob 'relu1' is excluded from sharing"}


def test_a_producer_whose_backward_reads_its_top_keeps_it(tmp_path):
    # lrn_layer.cpp: Backward reads top_data; a ReLU in place on it would overwrite it.
    body = 'layer { name: "norm" type: "LRN" bottom: "conv1" top: "norm" }\n'
    body += 'layer { name: "relu1" type: "ReLU" bottom: "norm" top: "relu1" }\n'
    result = in_place(net(tmp_path, body, "relu1"))
    assert kept(result) == {"relu1": "the backward of 'norm' would read 'norm' after 'relu1' overwrote it"}


def test_a_later_in_place_layer_that_changes_what_the_backward_reads_keeps_it(tmp_path):
    # relu_layer.cpp: Backward reads bottom_data; in place that would be BatchNorm's output.
    body = RELU_OUT_OF_PLACE + 'layer { name: "bn" type: "BatchNorm" bottom: "relu1" top: "relu1" }\n'
    result = in_place(net(tmp_path, body, "relu1"))
    assert kept(result) == {"relu1": "the backward of 'relu1' would read 'conv1' after 'bn' overwrote it"}


def test_a_relu_after_an_eltwise_goes_in_place_unless_its_backward_uses_the_top(tmp_path):
    # eltwise_layer.cpp: Backward takes top[0]->cpu_data() for every operation, but uses
    # the values only for PROD with stable_prod_grad off (top_data / bottom_data).
    for param, expected in (("operation: SUM", [("relu", "relu", "sum")]), ("operation: PROD stable_prod_grad: false", [])):
        body = f'layer {{ name: "sum" type: "Eltwise" bottom: "conv1" bottom: "conv1" top: "sum" eltwise_param {{ {param} }} }}\n'
        body += 'layer { name: "relu" type: "ReLU" bottom: "sum" top: "relu" }\n'
        assert rewritten(in_place(net(tmp_path, body, "relu"))) == expected


def test_a_net_whose_train_net_does_not_build_is_checked_forward_only_and_says_so(tmp_path):
    body = RELU_OUT_OF_PLACE + 'layer { name: "fc" type: "InnerProduct" bottom: "relu1" top: "fc" include { phase: TEST } inner_product_param { num_output: 5 } }\n'
    path = tmp_path / "net.prototxt"
    path.write_text(HEAD + body + 'layer { name: "prob" type: "Softmax" bottom: "fc" top: "prob" }\n')
    result = in_place(str(path), phase="TEST")
    assert rewritten(result) == [("relu1", "relu1", "conv1")]
    assert len(result.notes) == 1 and result.notes[0].startswith("the TRAIN net does not build (") and "checked on the TEST net, forward only" in result.notes[0]


def test_a_sigmoid_may_go_in_place_under_a_later_in_place_layer(tmp_path):
    # sigmoid_layer.cpp: Backward reads top_data, which that later layer overwrites with or
    # without the rewrite: the rewrite changes nothing it reads.
    body = 'layer { name: "sig" type: "Sigmoid" bottom: "conv1" top: "sig" }\n'
    body += 'layer { name: "drop" type: "Dropout" bottom: "sig" top: "sig" }\n'
    assert rewritten(in_place(net(tmp_path, body, "sig"))) == [("sig", "sig", "conv1")]


def test_no_in_place_chain_is_grown(tmp_path):
    # relu1 goes in place on conv1; drop then reads conv1 after relu1 does: two readers.
    body = RELU_OUT_OF_PLACE + 'layer { name: "drop" type: "Dropout" bottom: "relu1" top: "drop" }\n'
    result = in_place(net(tmp_path, body, "drop"))
    assert rewritten(result) == [("relu1", "relu1", "conv1")]
    assert kept(result) == {"drop": "its bottom 'conv1' is also read by 'relu1'"}


def test_top_level_input_fields_and_legacy_v1_layers(tmp_path):
    # The upgrade puts an Input layer in front: the rewrite must still land on relu1's block.
    path = tmp_path / "v1.prototxt"
    path.write_text(
        'input: "data"\ninput_shape { dim: 2 dim: 3 dim: 8 dim: 8 }\n'
        'layers { name: "conv1" type: CONVOLUTION bottom: "data" top: "conv1" convolution_param { num_output: 4 kernel_size: 3 } }\n'
        'layers { name: "relu1" type: RELU bottom: "conv1" top: "relu1" }\n'
        'layers { name: "fc" type: INNER_PRODUCT bottom: "relu1" top: "fc" inner_product_param { num_output: 5 } }\n'
    )
    result = in_place(str(path))
    assert rewritten(result) == [("relu1", "relu1", "conv1")]
    assert 'type: RELU bottom: "conv1" top: "conv1" }' in result.text and 'bottom: "conv1" top: "fc"' in result.text


def test_a_binary_net_is_refused(tmp_path):
    path = tmp_path / "net.caffemodel"
    proto = text_format.Parse(HEAD + RELU_OUT_OF_PLACE + TAIL % "relu1", caffe_pb2.NetParameter())
    path.write_bytes(proto.SerializeToString())
    with pytest.raises(CaffememError, match="text prototxt"):
        in_place(str(path))


# ----------------------------------------------------------------------------- what it saves


def test_analyze_of_the_output_differs_only_in_the_rewritten_layers_own_top(tmp_path):
    path = net(tmp_path, RELU_OUT_OF_PLACE, "relu1")
    out = tmp_path / "out.prototxt"
    out.write_text(in_place(path).text)
    for phase in ("TRAIN", "TEST"):
        before = {l.name: (l.init, l.fwd_alloc, l.bwd_alloc) for l in analyze(path, Options(phase=phase)).nets[0].memory.layers}
        after = {l.name: (l.init, l.fwd_alloc, l.bwd_alloc) for l in analyze(str(out), Options(phase=phase)).nets[0].memory.layers}
        saved = {name: tuple(b - a for b, a in zip(before[name], after[name])) for name in before if before[name] != after[name]}
        # The top's shape (Init), its data (Forward) and, in TRAIN, the diff ReLU's Backward
        # wrote into its bottom: in place that is the diff fc's Backward already allocated.
        assert saved == {"relu1": (SHAPE_BYTES, BLOB_BYTES, BLOB_BYTES if phase == "TRAIN" else 0)}


def test_optimize_reports_the_stock_bytes_of_the_file_as_given(tmp_path):
    result = optimize(net(tmp_path, RELU_OUT_OF_PLACE, "relu1"), Options(), OptimizeSettings(inplace=True))
    for phase, diff_bytes in zip(result.phases, (BLOB_BYTES, 0)):
        assert phase.as_given - phase.stock.heap_total == SHAPE_BYTES + BLOB_BYTES + diff_bytes


def test_cli_writes_the_rewrite_and_mem_param_and_reports_it_in_json(tmp_path):
    path = net(tmp_path, RELU_OUT_OF_PLACE, "relu1")
    out = tmp_path / "out.prototxt"
    result = CliRunner().invoke(main, ["optimize", path, "--inplace", "-o", str(out), "--json"])
    assert result.exit_code == 0, result.output
    document = json.loads(result.output)
    assert document["inplace"] == [{"layer": "relu1", "type": "ReLU", "top_was": "relu1", "now": "conv1"}]
    assert document["phases"][0]["bytes"]["stock_as_given"] - document["phases"][0]["bytes"]["stock"] == SHAPE_BYTES + 2 * BLOB_BYTES
    written = text_format.Parse(out.read_text(), caffe_pb2.NetParameter())
    assert written.mem_param.optimize_train and [list(l.top) for l in written.layer if l.name == "relu1"] == [["conv1"]]


def test_cli_tables_name_the_rewritten_layers(tmp_path):
    result = CliRunner().invoke(main, ["optimize", net(tmp_path, RELU_OUT_OF_PLACE, "relu1"), "--inplace", "--phase", "TRAIN"])
    assert result.exit_code == 0, result.output
    assert "in place: 1 layer rewritten" in result.output and "stock Caffe, file as given" in result.output
    # The answer first: the plan against stock and the fork, then the layers rewritten.
    assert result.output.startswith("TRAIN, batch ") and result.output.index("stock Caffe, file as given") < result.output.index("in place: 1 layer rewritten")


# ----------------------------------------------------------------------------- a generated net


def written_out_of_place(text: str) -> str:
    """The net as an exporter that never writes in place would: each in-place top gets
    its layer's name, and later layers read that name."""
    current: dict[str, str] = {}
    lines = []
    for line in text.splitlines(keepends=True):
        layer = re.search(r'name: "([^"]+)"', line).group(1)
        bottoms, tops = re.findall(r'bottom: "([^"]+)"', line), re.findall(r'top: "([^"]+)"', line)
        line = re.sub(r'bottom: "([^"]+)"', lambda m: f'bottom: "{current.get(m.group(1), m.group(1))}"', line)
        if len(bottoms) == 1 and tops == bottoms:
            line = line.replace(f'top: "{tops[0]}"', f'top: "{layer}"')
            current[tops[0]] = layer
        lines.append(line)
    return "".join(lines)


def test_resnet_written_out_of_place_gets_every_batchnorm_and_relu_back_in_place(tmp_path):
    path = tmp_path / "resnet18.prototxt"
    path.write_text(written_out_of_place(resnet(18, size=32)))
    result = in_place(str(path))
    # The generator's ResNet-18: 21 Convolution+BatchNorm+Scale (conv1, two per block, a
    # projection in each stage's first block) and 17 ReLUs (conv1, each block's first
    # branch, after each block's sum).  Each BatchNorm goes in place on its convolution;
    # the Scale after it then reads that name too: two readers, so it stays; each ReLU goes
    # in place (on a Scale's top, or on an Eltwise SUM's, whose Backward never uses its
    # top's values).
    assert Counter(r.type for r in result.rewrites) == {"BatchNorm": 21, "ReLU": 17}
    assert {k.layer: k.reason for k in result.kept}["scale_conv1"] == "its bottom 'conv1' is also read by 'bn_conv1'"
    assert Counter(k.type for k in result.kept) == {"Scale": 21}


def test_a_net_already_in_place_comes_back_byte_for_byte(tmp_path):
    path = tmp_path / "resnet18.prototxt"
    path.write_text(resnet(18, size=32))
    result = in_place(str(path))
    assert result.rewrites == () and result.kept == () and result.text == path.read_text()


# ----------------------------------------------------------------------------- real nets


GROUND_TRUTH_NETS = [
    ("bvlc_alexnet/train_val.prototxt", {"data": (256, 3, 227, 227)}, 0),
    ("bvlc_examples_mnist/mnist_autoencoder.prototxt", {"data": (100, 1, 28, 28)}, 6),
    ("mobilenet/mobilenet_v2_deploy.prototxt", {}, 53),
]


@needs_shared
@pytest.mark.parametrize("model, inputs, rewrites", GROUND_TRUTH_NETS, ids=[m for m, _, _ in GROUND_TRUTH_NETS])
def test_real_net_plans_verify_and_are_no_larger_with_inplace(model, inputs, rewrites):
    path = str(SHARED / "models" / model)
    options = Options(phase="TRAIN" if inputs else "TEST", inputs=inputs)
    plain = optimize(path, options, OptimizeSettings())
    rewritten_net = optimize(path, options, OptimizeSettings(inplace=True))
    assert len(rewritten_net.inplace.rewrites) == rewrites
    for before, after in zip(plain.phases, rewritten_net.phases):
        assert verify_plan(after.schedule, after.plan_data) == []
        assert after.planned.heap_total <= before.planned.heap_total
        assert after.as_given == before.stock.total_bytes  # the file as given, as analyze counts it
        assert (after.stock.heap_total < before.stock.heap_total) == (rewrites > 0)


@needs_shared
@pytest.mark.parametrize("model, inputs, rewrites", GROUND_TRUTH_NETS[1:], ids=[m for m, _, _ in GROUND_TRUTH_NETS[1:]])
def test_real_net_analyses_the_same_but_for_the_rewritten_layers_which_only_shrink(tmp_path, model, inputs, rewrites):
    path = str(SHARED / "models" / model)
    options = Options(phase="TRAIN", inputs=inputs)
    out = tmp_path / "out.prototxt"
    result = optimize(path, options, OptimizeSettings(inplace=True))
    out.write_text(result.inplace.text)
    names = {r.layer for r in result.inplace.rewrites}
    before, after = analyze(path, options).nets[0].memory.layers, analyze(str(out), options).nets[0].memory.layers
    changed = {b.name for b, a in zip(before, after) if (b.init, b.fwd_alloc, b.bwd_alloc) != (a.init, a.fwd_alloc, a.bwd_alloc)}
    assert changed == names
    assert all(a.total < b.total for b, a in zip(before, after) if b.name in names)

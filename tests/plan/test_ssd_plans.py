"""SSD's train net (weiliu89/caffe) plans: its Permute layers take the bottom data and the
top diff through mutable_cpu_data/mutable_cpu_diff (permute_layer.cpp: Permute() wants
non-const pointers) but only read them, so the values stay alive across those steps."""

from __future__ import annotations

from click.testing import CliRunner
from conftest import SHARED, needs_shared

import caffemem
from caffemem.cli import main
from caffemem.plan.verify import verify_plan

SSD = SHARED / "models" / "ssd_vgg16_voc0712_300x300" / "train.prototxt"


@needs_shared
def test_ssd_train_plans_safely_at_the_lower_bound(tmp_path):
    result = CliRunner().invoke(main, ["optimize", str(SSD), "--override-input", "data=32,3,300,300", "--input", "label=1,1,8,8", "-o", str(tmp_path / "ssd.prototxt")])
    assert result.exit_code == 0, result.output
    (phase,) = caffemem.optimize(str(SSD), caffemem.Options(overrides=frozenset({"data"})), phase="TRAIN", inputs={"data": (32, 3, 300, 300), "label": (1, 1, 8, 8)}).phases
    assert verify_plan(phase.schedule, phase.plan_data) == []
    assert phase.planned.heap_total == phase.lower_bound < phase.fork.heap_total


@needs_shared
def test_multibox_loss_on_cudnn_holds_its_confidence_softmaxs_handle():
    # multibox_loss_layer.cpp LayerSetUp builds conf_loss_layer_, a SoftmaxWithLoss, from a
    # fresh LayerParameter (engine DEFAULT) through LayerRegistry; its LayerSetUp builds the
    # inner Softmax the same way: a CuDNNSoftmaxLayer in a cuDNN build, one cudnnCreate.
    net = caffemem.analyze(str(SSD), caffemem.Options(device="gpu"), phase="TRAIN", inputs={"data": (4, 3, 300, 300), "label": (1, 1, 40, 8)}).nets[0]
    (loss,) = [layer for layer in net.device.layers if layer.type == "MultiBoxLoss"]
    assert loss.cudnn_handles == 1
    on_caffe = caffemem.analyze(str(SSD), caffemem.Options(device="gpu", engine="caffe"), phase="TRAIN", inputs={"data": (4, 3, 300, 300), "label": (1, 1, 40, 8)}).nets[0]
    assert on_caffe.device.handles.cudnn == 0


def test_permute_reads_the_bottom_and_the_top_diff():
    from caffemem.layers.access import Touch

    net = caffemem.analyze(
        'layer { name: "in" type: "Input" top: "x" input_param { shape { dim: 2 dim: 3 dim: 4 dim: 5 } } }\n'
        'layer { name: "p" type: "Permute" bottom: "x" top: "y" permute_param { order: 0 order: 2 order: 3 order: 1 } }\n'
        'layer { name: "loss" type: "EuclideanLoss" bottom: "y" bottom: "y" top: "l" }\n',
        phase="TRAIN",
    ).nets[0]
    rule = net.memory.rules[1]
    touches = [(a.blob.name, a.part, a.write) for a in rule.forward + rule.backward if isinstance(a, Touch) and a.blob.kind == "blob"]
    assert touches == [("x", "data", False), ("y", "data", True), ("y", "diff", False), ("x", "diff", True)]


BOXES = (
    'layer { name: "data" type: "AnnotatedData" top: "data" top: "label" include { phase: TRAIN }\n'
    '  data_param { source: "no_lmdb" batch_size: 4 backend: LMDB } transform_param { resize_param { height: 8 width: 8 } } }\n'
    'layer { name: "ip" type: "InnerProduct" bottom: "data" top: "ip" inner_product_param { num_output: 8 } }\n'
    'layer { name: "loss" type: "EuclideanLoss" bottom: "ip" bottom: "ip" top: "l" }\n'
    'layer { name: "sink" type: "Silence" bottom: "label" }\n'
)


def test_batch_scales_the_images_but_not_the_box_label():
    # Issue 34: AnnotatedData's label holds every box of the batch on one 1 x 1 x N x 8
    # plane (annotated_data_layer.cpp): its axis 0 is not the batch.
    net = caffemem.analyze(BOXES, inputs={"data": "_,3,_,_", "label": "_,_,5,_"}, batch=32).nets[0]
    assert (net.blobs["data"], net.blobs["label"]) == ((32, 3, 8, 8), (1, 1, 5, 8))


def test_optimize_writes_a_box_net_at_another_batch_and_verify_reads_it_back(tmp_path):
    net, out = tmp_path / "boxes.prototxt", tmp_path / "boxes32.prototxt"
    net.write_text(BOXES)
    result = CliRunner().invoke(main, ["optimize", str(net), "--input", "data=_,3,_,_", "--input", "label=_,_,5,_", "--batch", "32", "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert "batch_size: 32" in out.read_text()
    assert CliRunner().invoke(main, ["verify", str(out)]).exit_code == 0


@needs_shared
def test_ssd_train_is_written_at_batch_32(tmp_path):
    out = tmp_path / "ssd32.prototxt"
    result = CliRunner().invoke(main, ["optimize", str(SSD), "--input", "data=_,3,_,_", "--input", "label=_,_,8,_", "--batch", "32", "-o", str(out)])
    assert result.exit_code == 0, result.output
    net = caffemem.analyze(str(out), inputs={"data": "_,3,_,_", "label": "_,_,8,_"}).nets[0]
    assert (net.blobs["data"], net.blobs["label"]) == ((32, 3, 300, 300), (1, 1, 8, 8))


def test_a_batch_the_file_cannot_state_is_refused_at_the_users_net(tmp_path):
    net, out = tmp_path / "python.prototxt", tmp_path / "python4.prototxt"
    net.write_text('layer { name: "data" type: "Python" top: "data" python_param { module: "m" layer: "L" } }\n'
                   'layer { name: "ip" type: "InnerProduct" bottom: "data" top: "ip" inner_product_param { num_output: 8 } }\n')
    result = CliRunner().invoke(main, ["optimize", str(net), "--input", "data=2,3", "--batch", "4", "-o", str(out)])
    assert result.exit_code == 2 and result.output.startswith(f"caffemem: error: {net}:1: layer 'data' (Python): --batch 4 with -o:")
    assert not out.exists()

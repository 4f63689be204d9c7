"""Well-known Python layers are sized from their code (rbgirshick/py-faster-rcnn,
lib/roi_data_layer/layer.py and lib/rpn/*.py, default config): the user gives only the
image size, as the issue's ZF/VGG end2end train nets need."""

from __future__ import annotations

from conftest import SHARED, needs_shared

import caffemem

END2END = SHARED / "models" / "faster_rcnn_vgg16_end2end" / "train.prototxt"


def python_layer(module: str, name: str, bottoms: list[str], tops: list[str], param_str: str = "") -> str:
    wiring = "".join(f' bottom: "{b}"' for b in bottoms) + "".join(f' top: "{t}"' for t in tops)
    return f'layer {{ name: "{name}" type: "Python"{wiring} python_param {{ module: "{module}" layer: "{name}" param_str: "{param_str}" }} }}\n'


def test_anchor_targets_follow_the_score_map():
    # rpn_cls_score (1, 18, 38, 63): A = 9 anchors; labels (1, 1, 9*38, 63), the rest (1, 36, 38, 63).
    net = 'layer { name: "in" type: "Input" top: "rpn_cls_score" input_param { shape { dim: 1 dim: 18 dim: 38 dim: 63 } } }\n'
    net += python_layer("rpn.anchor_target_layer", "AnchorTargetLayer", ["rpn_cls_score"], ["labels", "targets", "inside", "outside"], "'feat_stride': 16")
    blobs = caffemem.analyze(net, phase="TEST").nets[0].blobs
    assert (blobs["labels"], blobs["targets"], blobs["outside"]) == ((1, 1, 342, 63), (1, 36, 38, 63), (1, 36, 38, 63))


def test_proposals_are_at_most_post_nms_top_n_of_the_phase():
    net = 'layer { name: "in" type: "Input" top: "s" input_param { shape { dim: 1 dim: 18 dim: 38 dim: 63 } } }\n'
    net += python_layer("rpn.proposal_layer", "ProposalLayer", ["s"], ["rois"], "'feat_stride': 16")
    # cfg.TRAIN.RPN_POST_NMS_TOP_N = 2000, cfg.TEST.RPN_POST_NMS_TOP_N = 300
    assert caffemem.analyze(net, phase="TRAIN").nets[0].blobs["rois"] == (2000, 5)
    assert caffemem.analyze(net, phase="TEST").nets[0].blobs["rois"] == (300, 5)


def test_proposal_targets_sample_128_rois_of_num_classes():
    net = 'layer { name: "in" type: "Input" top: "r" input_param { shape { dim: 2000 dim: 5 } } }\n'
    net += python_layer("rpn.proposal_target_layer", "ProposalTargetLayer", ["r"], ["rois", "labels", "targets", "inside", "outside"], "'num_classes': 21")
    blobs = caffemem.analyze(net, phase="TEST").nets[0].blobs
    assert (blobs["rois"], blobs["labels"], blobs["targets"]) == ((128, 5), (128,), (128, 84))  # 4 x 21 classes


@needs_shared
def test_faster_rcnn_end2end_train_needs_only_the_image_size():
    net = caffemem.analyze(str(END2END), inputs={"data": (3, 600, 1000)}).nets[0]
    assert net.blobs["data"] == (1, 3, 600, 1000) and net.blobs["im_info"] == (1, 3) and net.blobs["rois"] == (128, 5)
    assert any("shapes from the code of py-faster-rcnn's RoIDataLayer" in note for note in net.notes + net.memory.notes)


def test_an_unknown_python_layer_still_asks_for_every_top():
    net = python_layer("my.module", "Mine", [], ["a", "b"])
    try:
        caffemem.analyze(net)
    except caffemem.CaffememError as error:
        assert "--input a=" in str(error) and "--input b=" in str(error)
    else:
        raise AssertionError("an unknown Python layer must ask for its tops")


def test_fast_rcnn_roi_data_gives_two_images_and_128_sampled_rois():
    # Mirrors rbgirshick/py-faster-rcnn models/pascal_voc/VGG_CNN_M_1024/fast_rcnn/train.prototxt:
    # without an RPN (config.py: HAS_RPN False, IMS_PER_BATCH 2, BATCH_SIZE 128, BBOX_REG True)
    # setup() names the tops data, rois, labels, bbox_targets, bbox_inside/outside_weights;
    # minibatch.py samples 128 / 2 = 64 RoIs per image, 128 in all.
    tops = ["data", "rois", "labels", "bbox_targets", "bbox_inside_weights", "bbox_outside_weights"]
    net = python_layer("roi_data_layer.layer", "RoIDataLayer", [], tops, "'num_classes': 21")
    net += 'layer { name: "pool" type: "ROIPooling" bottom: "data" bottom: "rois" top: "pool" roi_pooling_param { pooled_w: 6 pooled_h: 6 spatial_scale: 0.0625 } }\n'
    net += 'layer { name: "cls" type: "InnerProduct" bottom: "pool" top: "cls" inner_product_param { num_output: 21 } }\n'
    net += 'layer { name: "loss" type: "SoftmaxWithLoss" bottom: "cls" bottom: "labels" top: "loss" }\n'
    net += 'layer { name: "silence" type: "Silence" bottom: "bbox_targets" bottom: "bbox_inside_weights" bottom: "bbox_outside_weights" }\n'
    result = caffemem.analyze(net, inputs={"data": (3, 600, 1000)}).nets[0]
    blobs = result.blobs
    assert blobs["data"] == (2, 3, 600, 1000) and blobs["rois"] == (128, 5) and blobs["labels"] == (128,)
    assert blobs["bbox_targets"] == blobs["bbox_outside_weights"] == (128, 84)  # 4 x 21 classes
    assert blobs["cls"] == (128, 21)
    cls = next(layer for layer in result.memory.layers if layer.name == "cls")
    assert cls.fwd_alloc == 128 * 21 * 4  # its top's data on the first Forward: 10,752 bytes

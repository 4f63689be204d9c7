"""Well-known Python layers are sized from their code: the user gives only the image size.
Sources (commits in caffemem/layers/pylayers.py): rbgirshick/py-faster-rcnn
lib/roi_data_layer/layer.py, lib/rpn/*.py and its config; YuwenXiong/py-R-FCN's copies of
them with experiments/cfgs/rfcn_end2end{,_ohem}.yml; shelhamer/fcn.berkeleyvision.org
voc_layers.py, siftflow_layers.py, nyud_layers.py; LisaAnne/lisa-caffe-public
examples/LRCN_activity_recognition/sequence_input_layer.py; ENet's python/spatial_dropout.py."""

from __future__ import annotations

import pytest
from conftest import FIXTURES, SHARED, needs_shared
from google.protobuf import text_format

import caffemem
from caffemem.api.analyze import Options
from caffemem.api.optimize import OptimizeSettings, optimize
from caffemem.graph import Layer
from caffemem.layers import ShapeQuery, SpecTable
from caffemem.plan.verify import verify_plan
from caffemem.schema import caffe_pb2

END2END = SHARED / "models" / "faster_rcnn_vgg16_end2end" / "train.prototxt"
LRCN = SHARED / "models" / "lrcn_activity_recognition" / "train_test_lstm_RGB.prototxt"
ZF = FIXTURES / "examples" / "zf_faster_rcnn_end2end_train.prototxt"


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
    # One message for the whole net, naming each top once (a known module with another
    # layer class is unknown too).
    net = python_layer("my.module", "Mine", [], ["a", "b"]) + python_layer("voc_layers", "Other", [], ["c"])
    with pytest.raises(caffemem.CaffememError) as error:
        caffemem.analyze(net)
    message = str(error.value)
    assert "the file does not tell the shape of 3 data blob(s)" in message
    assert all(message.count(f"'{top}' (layer") == 1 for top in "abc")


# The colorization net's chain (richzhang/colorization train prototxts): Python layers fed
# by Python layers, a Slice between them.
COLORIZATION = (
    python_layer("caffe_traininglayers", "Data", [], ["img"])
    + python_layer("caffe_traininglayers", "BGR2LabLayer", ["img"], ["img_lab"])
    + 'layer { name: "slice" type: "Slice" bottom: "img_lab" top: "l" top: "ab" slice_param { axis: 1 slice_point: 1 } }\n'
    + python_layer("caffe_traininglayers", "NNEncLayer", ["ab"], ["ab_enc"])
    + 'layer { name: "conv" type: "Convolution" bottom: "l" top: "conv" convolution_param { num_output: 313 kernel_size: 1 } }\n'
    + 'layer { name: "loss" type: "SoftmaxWithLoss" bottom: "conv" bottom: "ab_enc" top: "loss" }\n'
)


def test_python_layers_behind_python_layers_are_asked_for_in_one_run():
    # Issue 34: the colorization net took one run per missing blob.
    with pytest.raises(caffemem.CaffememError) as error:
        caffemem.analyze(COLORIZATION, phase="TRAIN")
    message = str(error.value)
    assert "the file does not tell the shape of 3 data blob(s): 'img' (layer 'Data', Python, line 1), 'img_lab' (layer 'BGR2LabLayer', Python, line 2), 'ab_enc' (layer 'NNEncLayer', Python, line 4)" in message


def test_the_request_gives_the_bottoms_it_knows():
    with pytest.raises(caffemem.CaffememError) as error:
        caffemem.analyze(COLORIZATION, phase="TRAIN", inputs={"img": (40, 3, 176, 176)})
    message = str(error.value)
    assert "the file does not tell the shape of 2 data blob(s): 'img_lab' (layer 'BGR2LabLayer', Python, line 2), 'ab_enc' (layer 'NNEncLayer', Python, line 4)" in message
    assert "layer 'BGR2LabLayer' reads img [40,3,176,176]" in message and "layer 'NNEncLayer' reads ab (known once img_lab is given)" in message
    net = caffemem.analyze(COLORIZATION, phase="TRAIN", inputs={"img": (40, 3, 176, 176), "img_lab": (40, 3, 176, 176), "ab_enc": (40, 1, 176, 176)}).nets[0]
    assert net.blobs["ab"] == (40, 2, 176, 176)


def python_shapes(layer_text: str, bottoms=(), phase: str = "TRAIN", inputs=None, net_types=()) -> tuple:
    """One Python layer's tops, as the shape pass asks for them in a net holding ``net_types``."""
    proto = text_format.Parse(layer_text, caffe_pb2.LayerParameter())
    layer = Layer(0, proto.name, proto.type, tuple(proto.bottom), tuple(proto.top), proto, line=1)
    query = ShapeQuery(layer, tuple(bottoms), phase, dict(inputs or {}), frozenset(net_types) | {"Python"})
    return SpecTable().get("Python").shape(query).tops


def analyzed(tmp_path, text: str, phase: str = "TRAIN", **inputs):
    path = tmp_path / "net.prototxt"
    path.write_text(text)
    return caffemem.analyze(str(path), phase=phase, inputs=inputs or None).nets[0]


# --- param_str as yaml.load reads it -------------------------------------------------------


def test_param_str_lines_and_python_tuples_are_read_as_yaml():
    # py-R-FCN models/coco/ResNet-101/rfcn_end2end/train_agnostic_ohem.prototxt writes
    # "'feat_stride': 16 \n'scales': !!python/tuple [4, 8, 16, 32]": A = 3 ratios x 4 scales = 12,
    # labels (1, 1, 12*38, 63), targets (1, 4*12, 38, 63).
    layer = python_layer("rpn.anchor_target_layer", "AnchorTargetLayer", ["s"], ["labels", "targets"], "'feat_stride': 16 \\n'scales': !!python/tuple [4, 8, 16, 32]")
    tops = python_shapes(layer[len("layer {") : -2], [(1, 24, 38, 63)])
    assert tops == ((1, 1, 456, 63), (1, 48, 38, 63))


# --- R-FCN (YuwenXiong/py-R-FCN lib/rpn, lib/roi_data_layer) -------------------------------

# Mirrors the RoI part of py-R-FCN models/pascal_voc/ResNet-50/rfcn_end2end/train_agnostic.prototxt:
# proposals, class-agnostic targets ('num_classes': 2), position-sensitive RoI pooling.
RFCN_HEAD = """
layer { name: "in" type: "Input" top: "rpn_cls_prob_reshape" top: "rpn_bbox_pred" top: "im_info" top: "gt_boxes" top: "rfcn_cls"
  input_param { shape { dim: 1 dim: 18 dim: 6 dim: 10 } shape { dim: 1 dim: 36 dim: 6 dim: 10 } shape { dim: 1 dim: 3 }
                shape { dim: 1 dim: 5 dim: 1 dim: 1 } shape { dim: 1 dim: 18 dim: 6 dim: 10 } } }
layer { name: "proposal" type: "Python" bottom: "rpn_cls_prob_reshape" bottom: "rpn_bbox_pred" bottom: "im_info" top: "rpn_rois"
  python_param { module: "rpn.proposal_layer" layer: "ProposalLayer" param_str: "'feat_stride': 16" } }
layer { name: "roi-data" type: "Python" bottom: "rpn_rois" bottom: "gt_boxes"
  top: "rois" top: "labels" top: "bbox_targets" top: "bbox_inside_weights" top: "bbox_outside_weights"
  python_param { module: "rpn.proposal_target_layer" layer: "ProposalTargetLayer" param_str: "'num_classes': 2" } }
layer { name: "psroipooled_cls_rois" type: "PSROIPooling" bottom: "rfcn_cls" bottom: "rois" top: "psroipooled_cls_rois"
  psroi_pooling_param { spatial_scale: 0.0625 output_dim: 2 group_size: 3 } }
"""


def test_rfcn_proposals_and_4d_class_agnostic_targets(tmp_path):
    # rfcn_end2end.yml: RPN_POST_NMS_TOP_N 300 (py-faster-rcnn's TRAIN: 2000), BATCH_SIZE 128;
    # proposal_target_layer.py's forward (R-FCN) reshapes every top to (n, c, 1, 1);
    # bbox_targets (128, 4 x 2, 1, 1); PSROIPooling (128, output_dim 2, 3, 3).
    net = analyzed(tmp_path, RFCN_HEAD)
    blobs = net.blobs
    assert blobs["rpn_rois"] == (300, 5)
    assert (blobs["rois"], blobs["labels"], blobs["bbox_targets"]) == ((128, 5, 1, 1), (128, 1, 1, 1), (128, 8, 1, 1))
    assert blobs["psroipooled_cls_rois"] == (128, 2, 3, 3)
    # The tops count as the run's input: Input 4*(1080+2160+3+5+1080) = 17312; proposals
    # 4*300*5 = 6000; RoIs 4*128*(5+1+3*8) = 15360.
    assert net.memory.input_bytes == 17312 + 6000 + 15360


def test_rfcn_ohem_keeps_every_proposal_and_the_ground_truth_box():
    # rfcn_end2end_ohem.yml: BATCH_SIZE -1 (rois_per_image = inf) and BG_THRESH_LO 0: every
    # candidate is fg or bg, so all 300 proposals + the gt box (counted as 1) are kept.
    layer = 'name: "roi-data" type: "Python" bottom: "rpn_rois" bottom: "gt_boxes" top: "rois" top: "labels" top: "bbox_targets" python_param { module: "rpn.proposal_target_layer" layer: "ProposalTargetLayer" param_str: "\'num_classes\': 2" }'
    tops = python_shapes(layer, [(300, 5), (1, 5, 1, 1)], net_types={"PSROIPooling", "BoxAnnotatorOHEM"})
    assert tops == ((301, 5, 1, 1), (301, 1, 1, 1), (301, 8, 1, 1))
    # The same layer in py-faster-rcnn's net (no PSROIPooling): 2-D, 128 RoIs.
    assert python_shapes(layer, [(2000, 5), (1, 5)]) == ((128, 5), (128,), (128, 8))


def test_rfcn_roi_data_gives_4d_gt_boxes():
    # py-R-FCN roi_data_layer/layer.py forward: 2-D blobs but im_info become (n, c, 1, 1).
    layer = 'name: "input-data" type: "Python" top: "data" top: "im_info" top: "gt_boxes" python_param { module: "roi_data_layer.layer" layer: "RoIDataLayer" param_str: "\'num_classes\': 21" }'
    tops = python_shapes(layer, inputs={"data": (3, 600, 1000)}, net_types={"PSROIPooling"})
    assert tops == ((1, 3, 600, 1000), (1, 3), (1, 5, 1, 1))


def test_fast_rcnn_roi_data_samples_128_rois_over_two_images():
    # py-faster-rcnn models/pascal_voc/VGG16/fast_rcnn/train.prototxt: six tops, HAS_RPN False;
    # config.py: IMS_PER_BATCH 2, BATCH_SIZE 128 (64 an image); targets 4 x 21 = 84.
    layer = 'name: "data" type: "Python" top: "data" top: "rois" top: "labels" top: "bbox_targets" top: "bbox_inside_weights" top: "bbox_outside_weights" python_param { module: "roi_data_layer.layer" layer: "RoIDataLayer" param_str: "\'num_classes\': 21" }'
    tops = python_shapes(layer, inputs={"data": (3, 600, 1000)})
    assert tops == ((2, 3, 600, 1000), (128, 5), (128,), (128, 84), (128, 84), (128, 84))


# --- FCN (shelhamer/fcn.berkeleyvision.org *_layers.py) ----------------------------------

# As voc-fcn32s/train.prototxt declares its data layer.
VOC = """layer { name: "data" type: "Python" top: "data" top: "label"
  python_param { module: "voc_layers" layer: "SBDDSegDataLayer"
    param_str: "{\\'sbdd_dir\\': \\'../data/sbdd/dataset\\', \\'seed\\': 1337, \\'split\\': \\'train\\', \\'mean\\': (104.00699, 116.66877, 122.67892)}" } }
layer { name: "score" type: "Convolution" bottom: "data" top: "score" convolution_param { num_output: 21 kernel_size: 1 } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "score" bottom: "label" top: "loss" loss_param { ignore_label: 255 normalize: false } }
"""


def test_fcn_voc_layer_asks_for_the_image_alone(tmp_path):
    with pytest.raises(caffemem.CaffememError) as error:
        analyzed(tmp_path, VOC)
    message = str(error.value)
    assert "voc_layers.SBDDSegDataLayer loads one image at a time" in message and "pass --input data=3,H,W" in message
    assert "'label'" not in message  # the label follows the image: not asked for


def test_fcn_voc_label_follows_the_image(tmp_path):
    # reshape(): data (1, 3, H, W), label (1, 1, H, W); input 4 x (3+1) x 500 x 375 = 3,000,000 bytes.
    net = analyzed(tmp_path, VOC, data=(3, 500, 375))
    assert (net.blobs["data"], net.blobs["label"], net.blobs["score"]) == ((1, 3, 500, 375), (1, 1, 500, 375), (1, 21, 500, 375))
    assert net.memory.input_bytes == 3_000_000


def test_fcn_siftflow_images_are_256_square():
    # siftflow_layers.py reads spatial_envelope_256x256_static_8outdoorcategories: data, sem, geo.
    layer = 'name: "data" type: "Python" top: "data" top: "sem" top: "geo" python_param { module: "siftflow_layers" layer: "SIFTFlowSegDataLayer" param_str: "{\'siftflow_dir\': \'../data/sift-flow\', \'seed\': 1337, \'split\': \'trainval\'}" }'
    assert python_shapes(layer) == ((1, 3, 256, 256), (1, 1, 256, 256), (1, 1, 256, 256))
    assert python_shapes(layer, inputs={"data": (3, 200, 300)})[2] == (1, 1, 200, 300)


def test_fcn_nyud_tops_follow_param_str():
    # nyud-fcn32s-color-hha/trainval.prototxt: 'tops': ['color', 'hha', 'label'].
    layer = 'name: "color" type: "Python" top: "color" top: "hha" top: "label" python_param { module: "nyud_layers" layer: "NYUDSegDataLayer" param_str: "{\'tops\': [\'color\', \'hha\', \'label\'], \'seed\': 1337, \'nyud_dir\': \'../data/nyud\', \'split\': \'trainval\'}" }'
    assert python_shapes(layer, inputs={"color": (3, 425, 560)}) == ((1, 3, 425, 560), (1, 3, 425, 560), (1, 1, 425, 560))


def test_fcn_optimize_plans_the_voc_net(tmp_path):
    path = tmp_path / "voc.prototxt"
    path.write_text(VOC)
    result = optimize(str(path), Options(phase="TRAIN", inputs={"data": (3, 64, 48)}), OptimizeSettings())
    assert result.phases and all(verify_plan(phase.schedule, phase.plan_data) == [] for phase in result.phases)


# --- LRCN (LisaAnne/lisa-caffe-public sequence_input_layer.py) ---------------------------


def test_lrcn_sequence_input_clips():
    # videoReadTrain_RGB: 16 frames x 24 videos = 384; videoReadTest_flow: 16 x 3 = 48.
    layer = 'name: "data" type: "Python" top: "data" top: "label" top: "clip_markers" python_param {{ module: "sequence_input_layer" layer: "{}" }}'
    assert python_shapes(layer.format("videoReadTrain_RGB")) == ((384, 3, 227, 227), (384,), (384,))
    assert python_shapes(layer.format("videoReadTest_flow"), phase="TEST")[0] == (48, 3, 227, 227)


@needs_shared
def test_lrcn_shared_net_analyses_as_downloaded():
    net = caffemem.analyze(str(LRCN), phase="TRAIN").nets[0]
    assert (net.blobs["data"], net.blobs["fc6-reshape"], net.blobs["lstm1"]) == ((384, 3, 227, 227), (16, 24, 4096), (16, 24, 256))


# --- py-faster-rcnn's ZF end2end train net, given only the image -------------------------


def test_zf_end2end_train_needs_only_the_image_size():
    # conv1 k7 p3 s2: 600x1000 -> 300x500; pool1 k3 s2 p1 (ceil): 151x251; conv2 k5 p2 s2:
    # 76x126; pool2: 39x64 (conv3-5 keep it).  A = 9 anchors: rpn_labels (1, 1, 9*39, 64);
    # TRAIN's 2000 proposals, 128 RoIs pooled to 6x6; bbox_pred 4 x 21.
    net = caffemem.analyze(str(ZF), inputs={"data": (3, 600, 1000)}).nets[0]
    expected = {
        "data": (1, 3, 600, 1000), "im_info": (1, 3), "gt_boxes": (1, 5), "conv5": (1, 256, 39, 64),
        "rpn_cls_score_reshape": (1, 2, 351, 64), "rpn_labels": (1, 1, 351, 64), "rpn_bbox_targets": (1, 36, 39, 64),
        "rpn_rois": (2000, 5), "rois": (128, 5), "labels": (128,), "bbox_targets": (128, 84),
        "roi_pool_conv5": (128, 256, 6, 6), "fc7": (128, 4096), "cls_score": (128, 21), "bbox_pred": (128, 84),
    }  # fmt: skip
    assert {name: net.blobs[name] for name in expected} == expected


def test_zf_end2end_train_is_planned_safely():
    result = optimize(str(ZF), Options(phase="TRAIN", inputs={"data": (3, 600, 1000)}), OptimizeSettings())
    assert result.phases
    for phase in result.phases:
        assert verify_plan(phase.schedule, phase.plan_data) == []
        assert phase.lower_bound <= phase.planned.heap_total <= phase.stock.heap_total


# --- --batch on nets whose Python code fixes the batch -----------------------------------


def test_batch_leaves_the_rpn_counts_and_refuses_more_images():
    # proposal_layer.py / proposal_target_layer.py assert 'Only single item batches are
    # supported'; the proposals and RoIs are counts the config sets, not a batch.
    net = caffemem.analyze(str(ZF), inputs={"data": (3, 600, 1000)}, batch=1).nets[0]
    assert (net.blobs["data"], net.blobs["rpn_rois"], net.blobs["rois"], net.blobs["rpn_labels"]) == ((1, 3, 600, 1000), (2000, 5), (128, 5), (1, 1, 351, 64))
    with pytest.raises(caffemem.CaffememError, match=r"--batch 2: py-faster-rcnn's RoIDataLayer reads cfg.TRAIN.IMS_PER_BATCH images, not --batch, so this net runs 1 image\(s\) a batch"):
        caffemem.analyze(str(ZF), inputs={"data": (3, 600, 1000)}, batch=2)


def test_fit_stops_at_the_one_image_the_code_allows(tmp_path):
    from caffemem.api.fit import FitRequest, fit

    path = tmp_path / "voc.prototxt"
    path.write_text(VOC)
    result = fit(str(path), Options(phase="TRAIN", inputs={"data": (3, 64, 48)}), FitRequest(gpu_memory=1 << 30, reserve=0))
    assert result.search.batch == 1
    assert "FCN's SBDDSegDataLayer loads one image a batch" in (result.following.error or "")


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


def test_enet_spatial_dropout_keeps_its_bottom_shape():
    # Mirrors TimoSaemann/ENet prototxts/enet_train_encoder.prototxt (drop1_0_3 after
    # bn1_0_2, summed with the pooled branch): reshape() copies the bottom's shape.
    net = 'layer { name: "in" type: "Input" top: "bn" input_param { shape { dim: 4 dim: 16 dim: 256 dim: 512 } } }\n'
    net += python_layer("spatial_dropout", "SpatialDropoutLayer", ["bn"], ["drop"], "{\\'phase\\': \\'TRAIN\\', \\'p\\': \\'0.01\\'}")
    net += 'layer { name: "sum" type: "Eltwise" bottom: "drop" bottom: "bn" top: "sum" }\n'
    blobs = caffemem.analyze(net).nets[0].blobs
    assert blobs["drop"] == blobs["sum"] == (4, 16, 256, 512)


def test_enet_spatial_dropout_takes_one_bottom():
    net = 'layer { name: "in" type: "Input" top: "a" top: "b" input_param { shape { dim: 1 dim: 2 dim: 3 dim: 4 } } }\n'
    net += python_layer("spatial_dropout", "SpatialDropoutLayer", ["a", "b"], ["drop"], "{\\'phase\\': \\'TRAIN\\', \\'p\\': \\'0.01\\'}")
    with pytest.raises(caffemem.CaffememError, match="Dropout layer needs one blob as input; received bottom blobs = 2"):
        caffemem.analyze(net)

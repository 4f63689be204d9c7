"""R-FCN's own SoftmaxWithLoss and SmoothL1Loss (daijifeng001/caffe-rfcn): the same type
strings as master's / py-faster-rcnn's, with a per-RoI loss top for online hard example
mining.  The OHEM nets of daijifeng001/R-FCN (models/rfcn_prototxts/ResNet-50L_OHEM_res3a/
train_val.prototxt, commit 94797e0e) use them.

Sources: daijifeng001/caffe-rfcn@a7641303 src/caffe/layers/softmax_loss_layer.cpp, .cu;
@4bcfcd10 smooth_L1_loss_layer.cpp, .cu; @a7641303 include/caffe/fast_rcnn_layers.hpp.
Bytes: float32, 4 bytes a value; a Blob's shape buffer is 4 bytes an axis.
"""

from __future__ import annotations

import pytest

from caffemem.api.analyze import Options, analyze
from caffemem.api.optimize import OptimizeSettings, optimize
from caffemem.errors import CaffememError
from caffemem.plan.verify import verify_plan

# As in the R-FCN file (line 3683): three tops, all weighted 0, no propagation.
SOFTMAX3 = 'type: "SoftmaxWithLoss" bottom: "cls_score" bottom: "labels" top: "temp_loss_cls" top: "temp_prob_cls" top: "per_roi_loss_cls" loss_weight: 0 loss_weight: 0 loss_weight: 0'
SMOOTH2 = 'type: "SmoothL1Loss" bottom: "bbox_pred" bottom: "bbox_targets" bottom: "w" top: "temp_loss_bbox" top: "per_roi_loss_bbox" loss_weight: 0 loss_weight: 0'


def test_softmax_with_loss_third_top_is_shaped_like_the_labels(shape_of):
    # Reshape: top[1] ReshapeLike(bottom[0]), top[2] ReshapeLike(bottom[1])
    assert shape_of(SOFTMAX3, (6, 21, 1, 1), (6, 1, 1, 1)).tops == ((), (6, 21, 1, 1), (6, 1, 1, 1))
    # LossLayer's checks still hold: one loss_weight per top, labels match predictions
    with pytest.raises(CaffememError, match="once per top"):
        shape_of(SOFTMAX3.replace(" loss_weight: 0 loss_weight: 0 loss_weight: 0", ""), (6, 21, 1, 1), (6, 1, 1, 1))
    with pytest.raises(CaffememError, match="number of labels"):
        shape_of(SOFTMAX3, (6, 21, 1, 1), (6, 2, 1, 1))


def test_softmax_with_loss_still_refuses_a_fourth_top(memory_of):
    four = f'layer {{ name: "cls" {SOFTMAX3} top: "extra" loss_weight: 0 }}'
    with pytest.raises(CaffememError, match="1 to 3 top"):
        memory_of(four, {"cls_score": (6, 21, 1, 1), "labels": (6, 1, 1, 1)})


def test_softmax_with_loss_three_tops_memory(memory_of):
    # cls_score (6, 21, 1, 1): 126 values, 504 bytes; labels (6, 1, 1, 1) 24 bytes.
    # SetUp: top shapes 0 (loss) + 16 + 16; prob_ shape 16; inner Softmax (loss weights
    # cleared: no prob_ diff): sum_multiplier_ (21) 4 + 84, scale_ (6, 1, 1, 1) shape 16.
    body = f'layer {{ name: "cls" {SOFTMAX3} propagate_down: false propagate_down: false }}'
    got = memory_of(body, {"cls_score": (6, 21, 1, 1), "labels": (6, 1, 1, 1)}, force_backward=False)["cls"]
    assert got.init == 32 + 16 + 88 + 16
    # Forward_gpu: prob_ 504, scale_ 24, cls_score's diff 504 (per-RoI losses), prob_'s diff
    # 504 (counts), the loss 4, top 2 24 (the copy); top 1 shares prob_'s data
    assert got.fwd_alloc == 504 + 24 + 504 + 504 + 4 + 24
    assert got.bwd_alloc == 0


def test_softmax_with_loss_one_or_two_tops_unchanged(memory_of):
    # master's rule: loss weight 1 by default, so the inner Softmax's prob_ diff (504) is
    # allocated at SetUp with prob_'s shape 16, sum_multiplier_ 88, scale_ 16, the loss top
    # shape 0 and its diff 4
    body = 'layer { name: "cls" type: "SoftmaxWithLoss" bottom: "cls_score" bottom: "labels" top: "loss" }'
    got = memory_of(body, {"cls_score": (6, 21, 1, 1), "labels": (6, 1, 1, 1)})["cls"]
    assert got.init == 0 + 4 + 16 + 504 + 88 + 16


def test_smooth_l1_loss_rfcn_shapes(shape_of):
    # fast_rcnn_layers.hpp: 2..3 bottoms, 1..2 tops; Reshape: top[1] (N, 1, H, W)
    assert shape_of(SMOOTH2, (6, 8, 1, 1), (6, 8, 1, 1), (6, 8, 1, 1)).tops == ((), (6, 1, 1, 1))
    one = 'type: "SmoothL1Loss" bottom: "p" bottom: "t" bottom: "w" top: "loss_bbox" loss_weight: 1'
    assert shape_of(one, (6, 8, 1, 1), (6, 8, 1, 1), (6, 8, 1, 1)).tops == ((),)
    with pytest.raises(CaffememError, match="must match bottom"):
        shape_of(SMOOTH2, (6, 8, 1, 1), (6, 4, 1, 1), (6, 8, 1, 1))
    # four bottoms (py-faster-rcnn's inside/outside weights) with a per-RoI top: no fork has it
    four = SMOOTH2.replace('bottom: "w"', 'bottom: "w" bottom: "w2"')
    with pytest.raises(CaffememError, match="2 or 3 bottoms"):
        shape_of(four, (6, 8, 1, 1), (6, 8, 1, 1), (6, 8, 1, 1), (6, 8, 1, 1))


def test_smooth_l1_loss_rfcn_memory(memory_of):
    # bbox_pred (6, 8, 1, 1): 48 values, 192 bytes.  SetUp: top shapes 0 + 16, diff_ and
    # errors_ shapes 16 + 16 (no ones_: R-FCN's Reshape has none).
    body = f'layer {{ name: "lb" {SMOOTH2} propagate_down: false propagate_down: false propagate_down: false }}'
    got = memory_of(body, {"bbox_pred": (6, 8, 1, 1), "bbox_targets": (6, 8, 1, 1), "w": (6, 8, 1, 1)}, force_backward=False)["lb"]
    assert got.init == 16 + 16 + 16
    # Forward: diff_ 192, errors_ 192, the loss 4, the per-RoI loss (6, 1, 1, 1) 24
    assert got.fwd_alloc == 192 + 192 + 4 + 24
    # Backward_gpu rewrites diff_ in place (no new bytes); no bottom propagates
    assert got.bwd_alloc == 0


def test_smooth_l1_loss_py_faster_rcnn_rule_kept(memory_of):
    # two bottoms, one top: py-faster-rcnn's rule, with ones_ (filled at Reshape, 16 + 192)
    body = 'layer { name: "lb" type: "SmoothL1Loss" bottom: "p" bottom: "t" top: "l" }'
    got = memory_of(body, {"p": (6, 8, 1, 1), "t": (6, 8, 1, 1)})["lb"]
    assert got.init == 0 + 4 + 16 + 16 + 16 + 192


# The OHEM head of daijifeng001/R-FCN@94797e0e models/rfcn_prototxts/ResNet-50L_OHEM_res3a/
# train_val.prototxt after a shortened trunk: the same input blobs (rois, labels, box targets
# and weights as `input:` placeholders), PSROIPooling, the per-RoI SoftmaxWithLoss (three tops)
# and SmoothL1Loss (two tops), BoxAnnotatorOHEM, the final losses.
RFCN_OHEM = """name: "ResNet-50"
input: "data" input_dim: 1 input_dim: 3 input_dim: 32 input_dim: 32
input: "rois" input_dim: 6 input_dim: 5 input_dim: 1 input_dim: 1
input: "labels" input_dim: 6 input_dim: 1 input_dim: 1 input_dim: 1
input: "bbox_targets" input_dim: 6 input_dim: 8 input_dim: 1 input_dim: 1
input: "bbox_loss_weights" input_dim: 6 input_dim: 8 input_dim: 1 input_dim: 1
layer { bottom: "data" top: "conv1" name: "conv1" type: "Convolution" convolution_param { num_output: 16 kernel_size: 3 pad: 1 stride: 4 } }
layer { bottom: "conv1" top: "conv1" name: "conv1_relu" type: "ReLU" }
layer { bottom: "conv1" top: "rfcn_cls" name: "rfcn_cls" type: "Convolution" convolution_param { num_output: 18 kernel_size: 1 } }
layer { bottom: "conv1" top: "rfcn_bbox" name: "rfcn_bbox" type: "Convolution" convolution_param { num_output: 72 kernel_size: 1 } }
layer { bottom: "rfcn_cls" bottom: "rois" top: "psroipooled_cls_rois" name: "psroipooled_cls_rois" type: "PSROIPooling" psroi_pooling_param { spatial_scale: 0.25 output_dim: 2 group_size: 3 } }
layer { bottom: "psroipooled_cls_rois" top: "cls_score" name: "ave_cls_score_rois" type: "Pooling" pooling_param { pool: AVE kernel_size: 3 stride: 3 } }
layer { bottom: "rfcn_bbox" bottom: "rois" top: "psroipooled_loc_rois" name: "psroipooled_loc_rois" type: "PSROIPooling" psroi_pooling_param { spatial_scale: 0.25 output_dim: 8 group_size: 3 } }
layer { bottom: "psroipooled_loc_rois" top: "bbox_pred" name: "ave_bbox_pred_rois" type: "Pooling" pooling_param { pool: AVE kernel_size: 3 stride: 3 } }
layer { name: "per_roi_loss_cls" type: "SoftmaxWithLoss" bottom: "cls_score" bottom: "labels" top: "temp_loss_cls" top: "temp_prob_cls" top: "per_roi_loss_cls"
  loss_weight: 0 loss_weight: 0 loss_weight: 0 propagate_down: false propagate_down: false }
layer { name: "per_roi_loss_bbox" type: "SmoothL1Loss" bottom: "bbox_pred" bottom: "bbox_targets" bottom: "bbox_loss_weights" top: "temp_loss_bbox" top: "per_roi_loss_bbox"
  loss_weight: 0 loss_weight: 0 propagate_down: false propagate_down: false propagate_down: false }
layer { name: "per_roi_loss" type: "Eltwise" bottom: "per_roi_loss_cls" bottom: "per_roi_loss_bbox" top: "per_roi_loss" propagate_down: false propagate_down: false }
layer { bottom: "rois" bottom: "per_roi_loss" bottom: "labels" bottom: "bbox_loss_weights" top: "labels_ohem" top: "bbox_loss_weights_ohem" name: "annotator_detector" type: "BoxAnnotatorOHEM"
  box_annotator_ohem_param { roi_per_img: 128 ignore_label: -1 } propagate_down: false propagate_down: false propagate_down: false propagate_down: false }
layer { name: "silence" type: "Silence" bottom: "temp_loss_cls" bottom: "temp_prob_cls" bottom: "temp_loss_bbox" }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "cls_score" bottom: "labels_ohem" top: "loss_cls" loss_weight: 1 loss_param { ignore_label: -1 } propagate_down: true propagate_down: false }
layer { name: "accuarcy" type: "Accuracy" bottom: "cls_score" bottom: "labels_ohem" top: "accuarcy" accuracy_param { ignore_label: -1 } propagate_down: false propagate_down: false }
layer { name: "loss_bbox" type: "SmoothL1Loss" bottom: "bbox_pred" bottom: "bbox_targets" bottom: "bbox_loss_weights_ohem" top: "loss_bbox" loss_weight: 1
  loss_param { normalization: PRE_FIXED pre_fixed_normalizer: 256 } propagate_down: true propagate_down: false propagate_down: false }
"""


def test_rfcn_ohem_train_val_analyses_and_plans(tmp_path):
    path = tmp_path / "train_val.prototxt"
    path.write_text(RFCN_OHEM)
    net = analyze(str(path), Options(phase="TRAIN")).nets[0]
    layers = {layer.name: layer for layer in net.memory.layers}
    # cls_score (6, 2, 1, 1) 48 bytes: prob_ 48 + scale_ 24 + cls_score's diff 48 + prob_'s
    # diff 48 + loss 4 + per-RoI loss (6, 1, 1, 1) 24; weights 0, nothing in Backward
    assert (layers["per_roi_loss_cls"].fwd_alloc, layers["per_roi_loss_cls"].bwd_alloc) == (48 + 24 + 48 + 48 + 4 + 24, 0)
    # bbox_pred (6, 8, 1, 1) 192: diff_ + errors_ 384, loss 4, per-RoI loss 24
    assert layers["per_roi_loss_bbox"].fwd_alloc == 192 + 192 + 4 + 24
    # loss_bbox (R-FCN's, three bottoms): diff_, errors_, loss; Backward: bbox_pred's diff 192
    assert (layers["loss_bbox"].fwd_alloc, layers["loss_bbox"].bwd_alloc) == (192 + 192 + 4, 192)
    result = optimize(str(path), Options(phase="TRAIN"), OptimizeSettings())
    for phase in result.phases:
        assert verify_plan(phase.schedule, phase.plan_data) == []
        assert phase.lower_bound <= phase.planned.heap_total <= phase.stock.heap_total

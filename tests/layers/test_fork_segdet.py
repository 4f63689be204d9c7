"""The detection / segmentation fork layers (caffemem/layers/fork_segdet.py): DeepLab's
ImageSegData, SegAccuracy, MatWrite (and its V1 enums), R-FCN's OHEM layers, RCF's AutoCrop.
Shapes and bytes are worked out by hand from each repository's source (named in the
comments); small nets built like the originals are analysed and planned.

Bytes: float32, 4 bytes a value; a Blob's shape buffer is 4 bytes an axis.  ``init`` is the
layer's SetUp (top shape buffers included), ``fwd_alloc`` / ``bwd_alloc`` its passes.
"""

from __future__ import annotations

import pytest
from click.testing import CliRunner
from google.protobuf import text_format

from caffemem.api.analyze import Options, analyze
from caffemem.api.optimize import OptimizeSettings, optimize
from caffemem.cli import main
from caffemem.errors import CaffememError, NeedsInput
from caffemem.plan.verify import verify_plan
from caffemem.schema import caffe_pb2

SEG = 'type: "ImageSegData" top: "data" top: "label" {tops} image_data_param {{ batch_size: 2 label_type: PIXEL {param} }} transform_param {{ {transform} }}'


def seg(tops: str = "", param: str = "", transform: str = "crop_size: 17") -> str:
    return SEG.format(tops=tops, param=param, transform=transform)


# --- ImageSegData (deeplab-public-ver2 image_seg_data_layer.cpp) -------------------------


def test_image_seg_data_shapes_with_crop(shape_of):
    # DataLayerSetUp: crop_size 17 -> data (2, 3, 17, 17), label (2, 1, 17, 17),
    # data_dim (2, 1, 1, 2) (each image's height and width)
    assert shape_of(seg('top: "data_dim"')).tops == ((2, 3, 17, 17), (2, 1, 17, 17), (2, 1, 1, 2))
    # is_color: false -> ReadImageToCVMat in greyscale, 1 channel; two named tops
    assert shape_of(seg(param="is_color: false")).tops == ((2, 1, 17, 17), (2, 1, 17, 17))


def test_image_seg_data_size_from_new_size_or_input(shape_of):
    # no crop: the (resized) first image's size; new_height/new_width fix it
    assert shape_of(seg(param="new_height: 10 new_width: 12", transform="")).tops == ((2, 3, 10, 12), (2, 1, 10, 12))
    # neither: the image's own size, which only --input can give; the label follows data
    with pytest.raises(NeedsInput) as asked:
        shape_of(seg(transform=""))
    assert asked.value.blobs == ["data"] and "--input data=_,3,H,W (the label map takes its height" in asked.value.hint
    got = shape_of(seg(transform=""), inputs={"data": (3, 9, 11)})
    assert got.tops == ((2, 3, 9, 11), (2, 1, 9, 11))


def test_image_seg_data_refuses_what_deeplab_checks(shape_of):
    with pytest.raises(CaffememError, match="does not support mean file"):
        shape_of(seg(transform='crop_size: 17 mean_file: "mean.binaryproto"'))
    with pytest.raises(CaffememError, match="new_height and new_width"):
        shape_of(seg(param="new_height: 10"))


def test_image_seg_data_memory_with_its_anonymous_data_dim_top(memory_report):
    # Two named tops: AutoTopBlobs (ExactNumTopBlobs 3) appends data_dim anonymously.
    # SetUp: three shape buffers, 3 * 16 = 48.  Forward copies the batch into the tops:
    # data 2*3*17*17*4 = 6936 and label 2*17*17*4 = 2312 are the run's input, data_dim
    # 2*2*4 = 16 is the layer's own.
    report = memory_report(f'layer {{ name: "d" {seg()} }}', {})
    got = {layer.name: layer for layer in report.layers}["d"]
    assert (got.init, got.fwd_alloc, got.bwd_alloc) == (48, 16, 0)
    assert report.input_bytes == 6936 + 2312
    # prefetch: transformed_data_ (2,3,17,17) and transformed_label_ (2,1,17,17) shapes only
    # (16 + 16); PREFETCH_COUNT = 5 batches of data 6952, label 2328, dim 32 (each with its
    # 16-byte shape): 32 + 5 * 9312 = 46592.  The tops own their copy: nothing prefetched.
    assert (report.prefetch_bytes, report.prefetched_input_bytes) == (32 + 5 * (6952 + 2328 + 32), 0)


def test_image_seg_data_named_data_dim_top_is_input(memory_report):
    # all three named: init 48, the Forward copies are all the run's input
    body = 'layer { name: "d" ' + seg(tops='top: "data_dim"') + " }"
    report = memory_report(body, {})
    got = {layer.name: layer for layer in report.layers}["d"]
    assert (got.init, got.fwd_alloc) == (48, 0)
    assert report.input_bytes == 6936 + 2312 + 16


# --- SegAccuracy, MatWrite (deeplab-public-ver2) -----------------------------------------


def test_seg_accuracy_shape_and_checks(shape_of):
    text = 'type: "SegAccuracy" bottom: "s" bottom: "l" top: "a" seg_accuracy_param { ignore_label: 255 }'
    # Reshape: top (1, 1, 1, 3): pixel accuracy, class recall, IoU
    assert shape_of(text, (2, 21, 5, 5), (2, 1, 5, 5)).tops == ((1, 1, 1, 3),)
    with pytest.raises(CaffememError, match="one channel"):
        shape_of(text, (2, 21, 5, 5), (2, 2, 5, 5))
    with pytest.raises(CaffememError, match="same height"):
        shape_of(text, (2, 21, 5, 5), (2, 1, 4, 5))
    with pytest.raises(CaffememError, match="same number"):
        shape_of(text, (2, 21, 5, 5), (1, 1, 5, 5))


def test_seg_accuracy_memory(memory_of):
    # SetUp: top shape 16; Forward: reads both (inputs), writes 3 values 12.  No Backward.
    body = 'layer { name: "acc" type: "SegAccuracy" bottom: "s" bottom: "l" top: "a" }'
    got = memory_of(body, {"s": (2, 3, 4, 4), "l": (2, 1, 4, 4)}, force_backward=False)["acc"]
    assert (got.init, got.fwd_alloc, got.bwd_alloc) == (16, 12, 0)


def test_mat_write_has_no_tops_and_only_reads(shape_of, memory_of):
    text = 'type: "MatWrite" bottom: "fc8" mat_write_param { prefix: "features/fc8/" source: "list/val_id.txt" strip: 0 period: 1 }'
    assert shape_of(text, (1, 21, 5, 5)).tops == ()
    with pytest.raises(CaffememError, match="period must be positive"):
        shape_of('type: "MatWrite" bottom: "fc8" mat_write_param { prefix: "f/" period: 0 }', (1, 21, 5, 5))
    # Forward hands fc8's data to matio: no bytes of its own, nothing in Backward
    got = memory_of(f'layer {{ name: "mw" {text} }}', {"fc8": (1, 21, 5, 5)}, force_backward=False)["mw"]
    assert (got.init, got.fwd_alloc, got.bwd_alloc) == (0, 0, 0)


def test_mat_write_prefix_is_required():
    # mat_write_param.prefix is `required` in DeepLab's caffe.proto, as here
    layer = text_format.Parse('type: "MatWrite" mat_write_param { period: 1 }', caffe_pb2.LayerParameter())
    assert not layer.mat_write_param.IsInitialized()


# --- R-FCN OHEM (daijifeng001/caffe-rfcn, Microsoft/caffe) -------------------------------

OHEM = 'type: "BoxAnnotatorOHEM" bottom: "rois" bottom: "loss" bottom: "labels" bottom: "w" top: "labels_ohem" top: "w_ohem" box_annotator_ohem_param { roi_per_img: 128 ignore_label: -1 }'


def test_box_annotator_ohem_shapes(shape_of):
    # Reshape: rois (R, 5), the per-RoI loss and labels (R,), weights (R, 8) read through
    # num/channels/height/width -> labels (R, 1, 1, 1), weights (R, 8, 1, 1)
    assert shape_of(OHEM, (6, 5), (6,), (6,), (6, 8)).tops == ((6, 1, 1, 1), (6, 8, 1, 1))
    with pytest.raises(CaffememError, match="5 channels"):
        shape_of(OHEM, (6, 4), (6,), (6,), (6, 8))
    with pytest.raises(CaffememError, match="per-RoI loss"):
        shape_of(OHEM, (6, 5), (5,), (6,), (6, 8))


def test_box_annotator_ohem_memory(memory_of):
    # SetUp: two top shape buffers, 16 + 16.  Forward_gpu writes labels 6*4 = 24 and weights
    # 6*8*4 = 192 on the CPU.  Backward does nothing.
    body = f'layer {{ name: "ohem" {OHEM} propagate_down: false propagate_down: false propagate_down: false propagate_down: false }}'
    got = memory_of(body, {"rois": (6, 5), "loss": (6,), "labels": (6,), "w": (6, 8)})["ohem"]
    assert (got.init, got.fwd_alloc, got.bwd_alloc) == (32, 24 + 192, 0)


SOFTMAX_OHEM = 'type: "SoftmaxWithLossOHEM" bottom: "cls_score" bottom: "labels" top: "temp_loss_cls" top: "temp_prob_cls" top: "per_roi_loss_cls" loss_weight: 0 loss_weight: 0 loss_weight: 0'


def test_softmax_with_loss_ohem_shapes(shape_of):
    # Reshape: loss (), the probabilities like cls_score, the per-RoI loss like the labels
    assert shape_of(SOFTMAX_OHEM, (6, 21, 1, 1), (6,)).tops == ((), (6, 21, 1, 1), (6,))
    with pytest.raises(CaffememError, match="number of labels"):
        shape_of(SOFTMAX_OHEM, (6, 21, 1, 1), (6, 2))


def test_softmax_with_loss_ohem_memory(memory_of):
    # cls_score (6, 21, 1, 1): 126 values, 504 bytes.  SetUp: three top shapes 0 + 16 + 4;
    # prob_ shape 16 (its data comes in Forward); the inner Softmax: sum_multiplier_ (21)
    # 4 + 84, scale_ (6, 1, 1, 1) shape 16 -- no diff, its loss weights are cleared.
    body = f'layer {{ name: "cls" {SOFTMAX_OHEM} propagate_down: false propagate_down: false }}'
    got = memory_of(body, {"cls_score": (6, 21, 1, 1), "labels": (6,)})["cls"]
    assert got.init == 20 + 16 + 88 + 16
    # Forward_gpu: prob_ 504, scale_ 24, cls_score's diff 504 (per-RoI losses), prob_'s diff
    # 504 (counts), the loss 4, top 2 24; top 1 shares prob_'s data
    assert got.fwd_alloc == 504 + 24 + 504 + 504 + 4 + 24
    # force_backward overrides propagate_down: false where AllowForceBackward (LossLayer: not
    # the labels), so Backward_gpu runs for cls_score: its diff and prob_'s exist already;
    # top 0's diff (weight 0: SetLossWeights left it) is read, 4
    assert got.bwd_alloc == 4


SMOOTH_OHEM = 'type: "SmoothL1LossOHEM" bottom: "bbox_pred" bottom: "bbox_targets" bottom: "w" top: "loss_bbox" loss_weight: 1 loss_param { normalization: PRE_FIXED pre_fixed_normalizer: 128 }'


def test_smooth_l1_loss_ohem_shapes_and_pre_fixed(shape_of):
    # the loss (), and with a second top each RoI's loss (N, 1, H, W)
    assert shape_of(SMOOTH_OHEM, (6, 8, 1, 1), (6, 8, 1, 1), (6, 8, 1, 1)).tops == ((),)
    per_roi = SMOOTH_OHEM.replace('top: "loss_bbox" loss_weight: 1', 'top: "t" top: "per_roi" loss_weight: 0 loss_weight: 0')
    assert shape_of(per_roi, (6, 8, 1, 1), (6, 8, 1, 1), (6, 8, 1, 1)).tops == ((), (6, 1, 1, 1))
    with pytest.raises(CaffememError, match="must match bottom"):
        shape_of(SMOOTH_OHEM, (6, 8, 1, 1), (6, 4, 1, 1), (6, 8, 1, 1))
    layer = text_format.Parse(SMOOTH_OHEM, caffe_pb2.LayerParameter())
    assert layer.loss_param.normalization == caffe_pb2.LossParameter.PRE_FIXED
    assert layer.loss_param.pre_fixed_normalizer == 128


def test_smooth_l1_loss_ohem_memory(memory_of):
    # bbox_pred (6, 8, 1, 1): 48 values, 192 bytes.  SetUp: the loss top 0 axes (0 bytes),
    # its diff (loss weight 1) 4; diff_ and errors_ shapes 16 + 16.
    body = f'layer {{ name: "lb" {SMOOTH_OHEM} propagate_down: true propagate_down: false propagate_down: false }}'
    got = memory_of(body, {"bbox_pred": (6, 8, 1, 1), "bbox_targets": (6, 8, 1, 1), "w": (6, 8, 1, 1)})["lb"]
    assert got.init == 0 + 4 + 16 + 16
    # Forward: diff_ 192, errors_ 192, the loss 4
    assert got.fwd_alloc == 192 + 192 + 4
    # Backward: force_backward overrides propagate_down: false (AllowForceBackward is true for
    # every bottom here), so the diffs of bbox_pred and bbox_targets, 192 each (never w's)
    assert got.bwd_alloc == 192 + 192


def test_smooth_l1_loss_ohem_without_loss_weight_is_not_a_loss(memory_report):
    # Its LayerSetUp skips LossLayer::LayerSetUp: no default weight 1 (no loss diff at SetUp)
    body = 'layer { name: "lb" type: "SmoothL1LossOHEM" bottom: "p" bottom: "t" top: "l" top: "per_roi" }'
    report = memory_report(body, {"p": (6, 8, 1, 1), "t": (6, 8, 1, 1)}, force_backward=False)
    got = {layer.name: layer for layer in report.layers}["lb"]
    assert got.init == 0 + 16 + 16 + 16  # two top shapes (0 and 16 bytes), diff_, errors_
    assert got.bwd_alloc == 0


# --- AutoCrop (yun-liu/rcf auto_crop_layer.cpp) ------------------------------------------

CROP = 'type: "AutoCrop" bottom: "up" bottom: "data" top: "crop"'


def test_auto_crop_shape(shape_of):
    # Reshape: (num0, channels0, height1, width1)
    assert shape_of(CROP, (1, 1, 36, 52), (1, 3, 33, 49)).tops == ((1, 1, 33, 49),)
    with pytest.raises(CaffememError, match="larger than bottom 0"):
        shape_of(CROP, (1, 1, 30, 52), (1, 3, 33, 49))


def test_auto_crop_memory(memory_of):
    # top (1, 1, 33, 49): 1617 values, 6468 bytes.  SetUp: shape 16.  Forward writes it.
    # Backward: the top's diff 6468 and up's diff 36*52*4 = 7488 (taken before propagate_down)
    got = memory_of(f'layer {{ name: "c" {CROP} }}', {"up": (1, 1, 36, 52), "data": (1, 3, 33, 49)})["c"]
    assert (got.init, got.fwd_alloc, got.bwd_alloc) == (16, 6468, 6468 + 7488)


# --- small nets built like the originals, analysed and planned ---------------------------

# DeepLab-LargeFOV's V1 train net (http://www.cs.jhu.edu/~alanlab/ccvl/DeepLab-LargeFOV/
# train.prototxt, for deeplab-public v1), shortened: IMAGE_SEG_DATA with a crop, VGG convs
# with DeepLab's `hole` (atrous) fields, fc6 with hole 12, dropout, fc8_voc12, the label
# shrunk by INTERP to fc8's size, SOFTMAX_LOSS and SEG_ACCURACY.  (The original's crop is
# 321, batch 10 and its label_shrink factor 8; the ${VAR} names are filled in.)
LARGEFOV_V1 = """name: "deeplab_largefov"
layers {
  name: "data"
  type: IMAGE_SEG_DATA
  top: "data"
  top: "label"
  image_data_param { root_folder: "VOC2012/" source: "list/train_aug.txt" batch_size: 2 shuffle: true label_type: PIXEL }
  transform_param { mean_value: 104.008 mean_value: 116.669 mean_value: 122.675 crop_size: 33 mirror: true }
  include: { phase: TRAIN }
}
layers { bottom: "data" top: "conv1_1" name: "conv1_1" type: CONVOLUTION blobs_lr: 1 blobs_lr: 2 weight_decay: 1 weight_decay: 0 convolution_param { num_output: 8 pad: 1 kernel_size: 3 } }
layers { bottom: "conv1_1" top: "conv1_1" name: "relu1_1" type: RELU }
layers { bottom: "conv1_1" top: "pool1" name: "pool1" type: POOLING pooling_param { pool: MAX kernel_size: 3 stride: 2 pad: 1 } }
layers { bottom: "pool1" top: "conv5_1" name: "conv5_1" type: CONVOLUTION blobs_lr: 1 blobs_lr: 2 convolution_param { num_output: 8 pad: 2 kernel_size: 3 hole: 2 } }
layers { bottom: "conv5_1" top: "conv5_1" name: "relu5_1" type: RELU }
layers { bottom: "conv5_1" top: "pool5" name: "pool5" type: POOLING pooling_param { pool: MAX kernel_size: 3 stride: 1 pad: 1 } }
layers { bottom: "pool5" top: "fc6" name: "fc6" type: CONVOLUTION blobs_lr: 1 blobs_lr: 2 convolution_param { num_output: 16 pad: 12 kernel_size: 3 hole: 12 } }
layers { bottom: "fc6" top: "fc6" name: "relu6" type: RELU }
layers { bottom: "fc6" top: "fc6" name: "drop6" type: DROPOUT dropout_param { dropout_ratio: 0.5 } }
layers { bottom: "fc6" top: "fc7" name: "fc7" type: CONVOLUTION blobs_lr: 1 blobs_lr: 2 convolution_param { num_output: 16 kernel_size: 1 } }
layers { bottom: "fc7" top: "fc7" name: "relu7" type: RELU }
layers { bottom: "fc7" top: "fc7" name: "drop7" type: DROPOUT dropout_param { dropout_ratio: 0.5 } }
layers { bottom: "fc7" top: "fc8_voc12" name: "fc8_voc12" type: CONVOLUTION blobs_lr: 10 blobs_lr: 20 convolution_param { num_output: 21 kernel_size: 1 } }
layers { bottom: "label" top: "label_shrink" name: "label_shrink" type: INTERP interp_param { shrink_factor: 2 pad_beg: 0 pad_end: 0 } }
layers { bottom: "fc8_voc12" bottom: "label_shrink" name: "loss" type: SOFTMAX_LOSS include: { phase: TRAIN } }
layers { bottom: "fc8_voc12" bottom: "label_shrink" top: "accuracy" name: "accuracy" type: SEG_ACCURACY seg_accuracy_param { ignore_label: 255 } }
"""


def test_deeplab_v1_largefov_analyzes_with_its_v1_types(tmp_path):
    path = tmp_path / "train.prototxt"
    path.write_text(LARGEFOV_V1)
    net = analyze(str(path), Options()).nets[0]
    layers = {layer.name: layer for layer in net.memory.layers}
    assert [layers[n].type for n in ("data", "label_shrink", "accuracy")] == ["ImageSegData", "Interp", "SegAccuracy"]
    shapes = net.shaped.blob_shapes
    # crop 33 -> pool1 (33 + 2 - 3) / 2 + 1 = 17 (ceil); conv5_1 hole 2: extent 5, pad 2 -> 17;
    # fc6 hole 12: extent 25, pad 12 -> 17; label_shrink (33 - 1) / 2 + 1 = 17
    assert shapes["fc8_voc12"] == (2, 21, 17, 17) and shapes["label_shrink"] == (2, 1, 17, 17)
    # data: the anonymous data_dim top (2, 1, 1, 2): shapes 3 * 16 = 48, its copy 16
    assert (layers["data"].init, layers["data"].fwd_alloc) == (48, 16)
    # label_shrink: top shape 16, Forward 2*17*17*4 = 2312; the label needs no gradient
    assert (layers["label_shrink"].init, layers["label_shrink"].fwd_alloc, layers["label_shrink"].bwd_alloc) == (16, 2312, 0)
    # accuracy: top (1, 1, 1, 3): 16 + 12
    assert (layers["accuracy"].init, layers["accuracy"].fwd_alloc) == (16, 12)
    # the inputs are the tops' copies: data 2*3*33*33*4 = 26136, label 2*33*33*4 = 8712
    assert net.memory.input_bytes == 26136 + 8712


def test_deeplab_v1_largefov_optimizes_end_to_end(tmp_path):
    path = tmp_path / "train.prototxt"
    path.write_text(LARGEFOV_V1)
    result = optimize(str(path), Options(), OptimizeSettings())
    assert [phase.phase for phase in result.phases] == ["TRAIN"]  # the data layer is TRAIN only
    for phase in result.phases:
        assert verify_plan(phase.schedule, phase.plan_data) == []
        assert phase.lower_bound <= phase.planned.heap_total < phase.stock.heap_total
    out, plan = tmp_path / "train.opt.prototxt", tmp_path / "plan.json"
    runner = CliRunner()
    done = runner.invoke(main, ["optimize", str(path), "-o", str(out), "--plan-json", str(plan)])
    assert done.exit_code == 0, done.output
    written = out.read_text()
    assert "type: IMAGE_SEG_DATA" in written and "hole: 12" in written and "mem_param" in written  # a minimal edit: still V1
    assert runner.invoke(main, ["verify", str(path), str(plan)]).exit_code == 0
    assert runner.invoke(main, ["analyze", str(out)]).exit_code == 0


# DeepLab-LargeFOV's V1 test net: batch 1, no labels (label_type NONE), fc8 written by MAT_WRITE.
LARGEFOV_V1_TEST = LARGEFOV_V1.split("layers { bottom: \"label\"")[0].replace("batch_size: 2 shuffle: true label_type: PIXEL", "batch_size: 1 label_type: NONE").replace(
    "include: { phase: TRAIN }", "include: { phase: TEST }"
) + """layers { bottom: "label" name: "silence" type: SILENCE }
layers { bottom: "fc8_voc12" name: "fc8_mat" type: MAT_WRITE mat_write_param { prefix: "features/fc8/" source: "list/val_id.txt" strip: 0 period: 1 } include: { phase: TEST } }
"""


def test_deeplab_v1_test_net_with_mat_write(tmp_path):
    path = tmp_path / "test.prototxt"
    path.write_text(LARGEFOV_V1_TEST)
    net = analyze(str(path), Options(phase="TEST")).nets[0]
    layers = {layer.name: layer for layer in net.memory.layers}
    assert layers["fc8_mat"].type == "MatWrite" and (layers["fc8_mat"].init, layers["fc8_mat"].fwd_alloc) == (0, 0)
    result = optimize(str(path), Options(phase="TEST"), OptimizeSettings())
    assert all(verify_plan(phase.schedule, phase.plan_data) == [] for phase in result.phases)


# DeepLab v2's ResNet train net (deeplab-public-ver2; DeepLabv2 ResNet-101 train.prototxt from
# liangchiehchen.com/projects/DeepLabv2_resnet.html), shortened: ImageSegData, a ResNet stem
# and bottleneck (BatchNorm, Scale), the multi-scale inputs made by Interp (shrink 4 zoom 3
# for 0.75, shrink 2 for 0.5), the ASPP branches summed, the smaller scales' scores
# interpolated back and fused by Eltwise MAX, labels shrunk by Interp, SoftmaxWithLoss
# ignoring 255 per scale, SegAccuracy.
DEEPLAB_V2 = """name: "ResNet-101"
layer { name: "data" type: "ImageSegData" top: "data" top: "label" include { phase: TRAIN }
  transform_param { mirror: true crop_size: 33 mean_value: 104.008 mean_value: 116.669 mean_value: 122.675 }
  image_data_param { root_folder: "VOC2012" source: "list/train_aug.txt" batch_size: 2 shuffle: true label_type: PIXEL } }
layer { bottom: "data" top: "data075" name: "data075" type: "Interp" interp_param { shrink_factor: 4 zoom_factor: 3 } }
layer { bottom: "data" top: "data05" name: "data05" type: "Interp" interp_param { shrink_factor: 2 } }
layer { bottom: "data" top: "conv1" name: "conv1" type: "Convolution" param { name: "conv1_w" } convolution_param { num_output: 8 kernel_size: 3 pad: 1 stride: 2 bias_term: false } }
layer { bottom: "conv1" top: "conv1" name: "bn_conv1" type: "BatchNorm" batch_norm_param { use_global_stats: true } }
layer { bottom: "conv1" top: "conv1" name: "scale_conv1" type: "Scale" scale_param { bias_term: true } }
layer { bottom: "conv1" top: "conv1" name: "conv1_relu" type: "ReLU" }
layer { bottom: "conv1" top: "res2a" name: "res2a" type: "Convolution" param { name: "res2a_w" } convolution_param { num_output: 8 kernel_size: 3 pad: 2 dilation: 2 bias_term: false } }
layer { bottom: "res2a" top: "res2a" name: "bn2a" type: "BatchNorm" batch_norm_param { use_global_stats: true } }
layer { bottom: "res2a" bottom: "conv1" top: "res2a_sum" name: "res2a_sum" type: "Eltwise" }
layer { bottom: "res2a_sum" top: "res2a_sum" name: "res2a_relu" type: "ReLU" }
layer { bottom: "res2a_sum" top: "fc1_c0" name: "fc1_c0" type: "Convolution" param { name: "fc1_c0_w" } param { name: "fc1_c0_b" } convolution_param { num_output: 21 kernel_size: 3 pad: 6 dilation: 6 } }
layer { bottom: "res2a_sum" top: "fc1_c1" name: "fc1_c1" type: "Convolution" param { name: "fc1_c1_w" } param { name: "fc1_c1_b" } convolution_param { num_output: 21 kernel_size: 3 pad: 12 dilation: 12 } }
layer { bottom: "fc1_c0" bottom: "fc1_c1" top: "fc1" name: "fc1" type: "Eltwise" eltwise_param { operation: SUM } }
layer { bottom: "data05" top: "conv1_res05" name: "conv1_res05" type: "Convolution" param { name: "conv1_w" } convolution_param { num_output: 8 kernel_size: 3 pad: 1 stride: 2 bias_term: false } }
layer { bottom: "conv1_res05" top: "conv1_res05" name: "conv1_res05_relu" type: "ReLU" }
layer { bottom: "conv1_res05" top: "res2a_res05" name: "res2a_res05" type: "Convolution" param { name: "res2a_w" } convolution_param { num_output: 8 kernel_size: 3 pad: 2 dilation: 2 bias_term: false } }
layer { bottom: "res2a_res05" top: "fc1_res05" name: "fc1_c0_res05" type: "Convolution" param { name: "fc1_c0_w" } param { name: "fc1_c0_b" } convolution_param { num_output: 21 kernel_size: 3 pad: 6 dilation: 6 } }
layer { bottom: "fc1_res05" top: "fc1_res05_interp" name: "fc1_res05_interp" type: "Interp" interp_param { zoom_factor: 2 } }
layer { bottom: "data075" top: "conv1_res075" name: "conv1_res075" type: "Convolution" param { name: "conv1_w" } convolution_param { num_output: 8 kernel_size: 3 pad: 1 stride: 2 bias_term: false } }
layer { bottom: "conv1_res075" top: "fc1_res075" name: "fc1_c0_res075" type: "Convolution" param { name: "fc1_c0_w" } param { name: "fc1_c0_b" } convolution_param { num_output: 21 kernel_size: 3 pad: 6 dilation: 6 } }
layer { bottom: "fc1_res075" top: "fc1_res075_interp" name: "fc1_res075_interp" type: "Interp" interp_param { height: 17 width: 17 } }
layer { bottom: "fc1" bottom: "fc1_res075_interp" bottom: "fc1_res05_interp" top: "fc_fusion" name: "fc_fusion" type: "Eltwise" eltwise_param { operation: MAX } }
layer { bottom: "label" top: "label_shrink" name: "label_shrink" type: "Interp" interp_param { shrink_factor: 2 pad_beg: 0 pad_end: 0 } }
layer { bottom: "label" top: "label_shrink4" name: "label_shrink4" type: "Interp" interp_param { shrink_factor: 4 pad_beg: 0 pad_end: 0 } }
layer { bottom: "fc_fusion" bottom: "label_shrink" top: "loss" name: "loss" type: "SoftmaxWithLoss" include { phase: TRAIN } loss_param { ignore_label: 255 } }
layer { bottom: "fc1_res05" bottom: "label_shrink4" top: "loss_res05" name: "loss_res05" type: "SoftmaxWithLoss" include { phase: TRAIN } loss_param { ignore_label: 255 } }
layer { bottom: "fc_fusion" bottom: "label_shrink" top: "accuracy" name: "accuracy" type: "SegAccuracy" seg_accuracy_param { ignore_label: 255 } }
"""


def test_deeplab_v2_resnet_train_net_plans(tmp_path):
    path = tmp_path / "train.prototxt"
    path.write_text(DEEPLAB_V2)
    net = analyze(str(path), Options()).nets[0]
    layers = {layer.name: layer for layer in net.memory.layers}
    # data075: (33 - 1) / 4 + 1 = 9, zoomed 9 + 8 * 2 = 25; data05: (33 - 1) / 2 + 1 = 17.
    # Forward 2*3*25*25*4 = 15000 and 2*3*17*17*4 = 6936 (each top shape 16 at SetUp)
    assert (layers["data075"].init, layers["data075"].fwd_alloc) == (16, 15000)
    assert (layers["data05"].init, layers["data05"].fwd_alloc) == (16, 6936)
    # fc1_res05: data05 17 -> conv1_res05 (17 + 2 - 3) / 2 + 1 = 9 -> (2, 21, 9, 9); zoomed by 2:
    # 9 + 8 = 17 -> 2*21*17*17*4 = 48552.  Backward: only its bottom's diff, 2*21*9*9*4 = 13608
    # (the top's diff came with fc_fusion's Backward, which runs first)
    assert (layers["fc1_res05_interp"].fwd_alloc, layers["fc1_res05_interp"].bwd_alloc) == (48552, 13608)
    result = optimize(str(path), Options(), OptimizeSettings())
    for phase in result.phases:
        assert verify_plan(phase.schedule, phase.plan_data) == []
        assert phase.lower_bound <= phase.planned.heap_total < phase.stock.heap_total


# The OHEM part of py-R-FCN's models/pascal_voc/ResNet-101/rfcn_end2end/train_agnostic_ohem.prototxt
# (YuwenXiong/py-R-FCN@290dba7f; layers from Microsoft/caffe), after a shortened trunk.  The
# Python RoIDataLayer and ProposalTargetLayer are stood in for by Input layers of their shapes
# (lib/rpn/proposal_target_layer.py: rois (R, 5, 1, 1), labels (R, 1, 1, 1), box targets and
# weights (R, 8, 1, 1) class-agnostic).
RFCN_OHEM = """name: "ResNet-101"
force_backward: false
layer { name: "input-data" type: "Input" top: "data" input_param { shape { dim: 1 dim: 3 dim: 32 dim: 32 } } }
layer { name: "roi-data" type: "Input" top: "rois" top: "labels" top: "bbox_targets" top: "bbox_inside_weights" top: "bbox_outside_weights"
  input_param { shape { dim: 6 dim: 5 dim: 1 dim: 1 } shape { dim: 6 dim: 1 dim: 1 dim: 1 } shape { dim: 6 dim: 8 dim: 1 dim: 1 } shape { dim: 6 dim: 8 dim: 1 dim: 1 } shape { dim: 6 dim: 8 dim: 1 dim: 1 } } }
layer { bottom: "data" top: "res5c" name: "res5c" type: "Convolution" convolution_param { num_output: 16 kernel_size: 3 pad: 1 stride: 4 } }
layer { bottom: "res5c" top: "res5c" name: "res5c_relu" type: "ReLU" }
layer { bottom: "res5c" top: "conv_new_1" name: "conv_new_1" type: "Convolution" convolution_param { num_output: 16 kernel_size: 1 } }
layer { bottom: "conv_new_1" top: "conv_new_1" name: "conv_new_1_relu" type: "ReLU" }
layer { bottom: "conv_new_1" top: "rfcn_cls" name: "rfcn_cls" type: "Convolution" convolution_param { num_output: 189 kernel_size: 1 } }
layer { bottom: "conv_new_1" top: "rfcn_bbox" name: "rfcn_bbox" type: "Convolution" convolution_param { num_output: 72 kernel_size: 1 } }
layer { bottom: "rfcn_cls" bottom: "rois" top: "psroipooled_cls_rois" name: "psroipooled_cls_rois" type: "PSROIPooling" psroi_pooling_param { spatial_scale: 0.25 output_dim: 21 group_size: 3 } }
layer { bottom: "psroipooled_cls_rois" top: "cls_score" name: "ave_cls_score_rois" type: "Pooling" pooling_param { pool: AVE kernel_size: 3 stride: 3 } }
layer { bottom: "rfcn_bbox" bottom: "rois" top: "psroipooled_loc_rois" name: "psroipooled_loc_rois" type: "PSROIPooling" psroi_pooling_param { spatial_scale: 0.25 output_dim: 8 group_size: 3 } }
layer { bottom: "psroipooled_loc_rois" top: "bbox_pred" name: "ave_bbox_pred_rois" type: "Pooling" pooling_param { pool: AVE kernel_size: 3 stride: 3 } }
layer { name: "per_roi_loss_cls" type: "SoftmaxWithLossOHEM" bottom: "cls_score" bottom: "labels" top: "temp_loss_cls" top: "temp_prob_cls" top: "per_roi_loss_cls"
  loss_weight: 0 loss_weight: 0 loss_weight: 0 propagate_down: false propagate_down: false }
layer { name: "per_roi_loss_bbox" type: "SmoothL1LossOHEM" bottom: "bbox_pred" bottom: "bbox_targets" bottom: "bbox_inside_weights" top: "temp_loss_bbox" top: "per_roi_loss_bbox"
  loss_weight: 0 loss_weight: 0 propagate_down: false propagate_down: false propagate_down: false }
layer { name: "per_roi_loss" type: "Eltwise" bottom: "per_roi_loss_cls" bottom: "per_roi_loss_bbox" top: "per_roi_loss" propagate_down: false propagate_down: false }
layer { bottom: "rois" bottom: "per_roi_loss" bottom: "labels" bottom: "bbox_inside_weights" top: "labels_ohem" top: "bbox_loss_weights_ohem" name: "annotator_detector" type: "BoxAnnotatorOHEM"
  box_annotator_ohem_param { roi_per_img: 128 ignore_label: -1 } propagate_down: false propagate_down: false propagate_down: false propagate_down: false }
layer { name: "silence" type: "Silence" bottom: "bbox_outside_weights" bottom: "temp_loss_cls" bottom: "temp_prob_cls" bottom: "temp_loss_bbox" }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "cls_score" bottom: "labels_ohem" top: "loss_cls" loss_weight: 1 loss_param { ignore_label: -1 } propagate_down: true propagate_down: false }
layer { name: "accuarcy" type: "Accuracy" bottom: "cls_score" bottom: "labels_ohem" top: "accuarcy" accuracy_param { ignore_label: -1 } propagate_down: false propagate_down: false }
layer { name: "loss_bbox" type: "SmoothL1LossOHEM" bottom: "bbox_pred" bottom: "bbox_targets" bottom: "bbox_loss_weights_ohem" top: "loss_bbox" loss_weight: 1
  loss_param { normalization: PRE_FIXED pre_fixed_normalizer: 128 } propagate_down: true propagate_down: false propagate_down: false }
"""


def test_rfcn_ohem_train_net_plans(tmp_path):
    path = tmp_path / "train_agnostic_ohem.prototxt"
    path.write_text(RFCN_OHEM)
    net = analyze(str(path), Options(phase="TRAIN")).nets[0]
    layers = {layer.name: layer for layer in net.memory.layers}
    # cls_score (6, 21, 1, 1), 504 bytes; the per-RoI mining runs forward only (weights 0,
    # propagate_down false): prob_ 504 + scale_ 24 + cls_score's diff 504 + prob_'s diff 504
    # + loss 4 + per-RoI loss 24; nothing in Backward
    assert (layers["per_roi_loss_cls"].fwd_alloc, layers["per_roi_loss_cls"].bwd_alloc) == (1564, 0)
    # labels_ohem (6, 1, 1, 1) 24 and bbox_loss_weights_ohem (6, 8, 1, 1) 192
    assert layers["annotator_detector"].fwd_alloc == 24 + 192
    # loss_bbox: diff_ and errors_ 192 each, the loss 4; Backward: bbox_pred's diff 192
    assert (layers["loss_bbox"].fwd_alloc, layers["loss_bbox"].bwd_alloc) == (192 + 192 + 4, 192)
    result = optimize(str(path), Options(phase="TRAIN"), OptimizeSettings())
    for phase in result.phases:
        assert verify_plan(phase.schedule, phase.plan_data) == []
        assert phase.lower_bound <= phase.planned.heap_total <= phase.stock.heap_total


def test_softmax_with_loss_ohem_on_cudnn_holds_its_inner_softmaxs_handle(tmp_path):
    # softmax_loss_ohem_layer.cpp LayerSetUp builds its Softmax through LayerRegistry, as
    # SoftmaxWithLoss does: with cuDNN a CuDNNSoftmaxLayer, whose LayerSetUp calls cudnnCreate.
    path = tmp_path / "train_agnostic_ohem.prototxt"
    path.write_text(RFCN_OHEM)
    device = analyze(str(path), Options(phase="TRAIN", device="gpu")).nets[0].device
    handles = {layer.name: layer.cudnn_handles for layer in device.layers if layer.cudnn_handles}
    # The OHEM loss and the plain SoftmaxWithLoss "loss" each hold one; no convolution is
    # counted here beyond its own (3 per group).
    assert (handles["per_roi_loss_cls"], handles["loss"]) == (1, 1)
    caffe = analyze(str(path), Options(phase="TRAIN", device="gpu", engine="caffe")).nets[0].device
    assert caffe.handles.cudnn == 0


# RCF's train net (yun-liu/rcf@ce460ff6 examples/rcf/train_vgg16.prototxt), shortened to two
# stages: side outputs of 1x1 convs summed (Eltwise), scored, the deeper one upsampled by a
# Deconvolution and cropped back to the image by AutoCrop, a SigmoidCrossEntropyLoss per side
# output and on their 1x1-conv fusion.  The ImageLabelmapData (no resize) is an Input here.
RCF_TRAIN = """name: "RCF"
layer { name: "data" type: "Input" top: "data" top: "label" input_param { shape { dim: 1 dim: 3 dim: 21 dim: 29 } shape { dim: 1 dim: 1 dim: 21 dim: 29 } } }
layer { name: "conv1_1" type: "Convolution" bottom: "data" top: "conv1_1" convolution_param { num_output: 8 pad: 35 kernel_size: 3 } }
layer { name: "relu1_1" type: "ReLU" bottom: "conv1_1" top: "conv1_1" }
layer { name: "conv1_2" type: "Convolution" bottom: "conv1_1" top: "conv1_2" convolution_param { num_output: 8 pad: 1 kernel_size: 3 } }
layer { name: "relu1_2" type: "ReLU" bottom: "conv1_2" top: "conv1_2" }
layer { name: "pool1" type: "Pooling" bottom: "conv1_2" top: "pool1" pooling_param { pool: MAX kernel_size: 2 stride: 2 } }
layer { name: "conv1_1_down" type: "Convolution" bottom: "conv1_1" top: "conv1_1_down" convolution_param { num_output: 4 kernel_size: 1 } }
layer { name: "conv1_2_down" type: "Convolution" bottom: "conv1_2" top: "conv1_2_down" convolution_param { num_output: 4 kernel_size: 1 } }
layer { name: "score_fuse1" type: "Eltwise" bottom: "conv1_1_down" bottom: "conv1_2_down" top: "score_fuse1" eltwise_param { operation: SUM } }
layer { name: "score-dsn1" type: "Convolution" bottom: "score_fuse1" top: "score-dsn1-full" convolution_param { num_output: 1 kernel_size: 1 } }
layer { name: "crop1" type: "AutoCrop" bottom: "score-dsn1-full" bottom: "data" top: "upscore-dsn1" }
layer { name: "dsn1_loss" type: "SigmoidCrossEntropyLoss" bottom: "upscore-dsn1" bottom: "label" top: "dsn1_loss" loss_weight: 1 }
layer { name: "conv2_1" type: "Convolution" bottom: "pool1" top: "conv2_1" convolution_param { num_output: 8 pad: 1 kernel_size: 3 } }
layer { name: "relu2_1" type: "ReLU" bottom: "conv2_1" top: "conv2_1" }
layer { name: "conv2_1_down" type: "Convolution" bottom: "conv2_1" top: "conv2_1_down" convolution_param { num_output: 4 kernel_size: 1 } }
layer { name: "score-dsn2" type: "Convolution" bottom: "conv2_1_down" top: "score-dsn2" convolution_param { num_output: 1 kernel_size: 1 } }
layer { name: "upsample_2" type: "Deconvolution" bottom: "score-dsn2" top: "score-dsn2-up" param { lr_mult: 0 decay_mult: 1 } param { lr_mult: 0 decay_mult: 0 } convolution_param { kernel_size: 4 stride: 2 num_output: 1 } }
layer { name: "crop2" type: "AutoCrop" bottom: "score-dsn2-up" bottom: "data" top: "upscore-dsn2" }
layer { name: "dsn2_loss" type: "SigmoidCrossEntropyLoss" bottom: "upscore-dsn2" bottom: "label" top: "dsn2_loss" loss_weight: 1 }
layer { name: "concat" bottom: "upscore-dsn1" bottom: "upscore-dsn2" top: "concat-upscore" type: "Concat" concat_param { concat_dim: 1 } }
layer { name: "new-score-weighting" type: "Convolution" bottom: "concat-upscore" top: "upscore-fuse" convolution_param { num_output: 1 kernel_size: 1 } }
layer { name: "fuse_loss" type: "SigmoidCrossEntropyLoss" bottom: "upscore-fuse" bottom: "label" top: "fuse_loss" loss_weight: 1 }
"""


def test_rcf_train_net_plans(tmp_path):
    path = tmp_path / "train_vgg16.prototxt"
    path.write_text(RCF_TRAIN)
    net = analyze(str(path), Options()).nets[0]
    layers = {layer.name: layer for layer in net.memory.layers}
    # conv1_1 pad 35: 21 + 70 - 2 = 89 x 97; pool1 (ceil) 45 x 49; conv2_1 45 x 49;
    # score-dsn2-up: (45 - 1) * 2 + 4 = 92 x 100.  Both crops give (1, 1, 21, 29): 609
    # values, 2436 bytes.  crop2 Backward: the upsampled score's diff 92*100*4 = 36800
    # (upsample_2's weights are frozen, but score-dsn2 learns below it); the top's diff came
    # with the Backward of its split (it feeds dsn2_loss and concat), which runs first
    assert (layers["crop2"].init, layers["crop2"].fwd_alloc, layers["crop2"].bwd_alloc) == (16, 2436, 36800)
    # crop1: bottom 89 x 97: its diff 89*97*4 = 34532
    assert layers["crop1"].bwd_alloc == 34532
    result = optimize(str(path), Options(), OptimizeSettings())
    for phase in result.phases:
        assert verify_plan(phase.schedule, phase.plan_data) == []
        assert phase.lower_bound <= phase.planned.heap_total < phase.stock.heap_total

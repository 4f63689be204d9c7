"""DeepLab v1's V1 fields `strict_dim` and `softmaxloss_param` (TheLegendAli/DeepLab-Context
@fb04e9e2, which keeps deeplab-public's caffe.proto), as voc12/vgg128_noup/train.prototxt
of that repository writes them, and v1's own SoftmaxWithLoss they bring.

- strict_dim (V1LayerParameter 1003, default true): read only by net.cpp
  Net::CopyTrainedLayersFrom; false lets a pretrained blob of the same count but another
  shape be loaded.  No bytes: the upgrade drops it and says so.
- softmaxloss_param (44): softmax_loss_layer.cpp/.cu of v1, a class-weighted loss that
  runs on the host (Forward_gpu calls Forward_cpu), whose inner SoftmaxLayer is built from
  the param as written (no default loss weight), with v1's 4-axis buffers and loss top.
- PADDING (V1 enum 42, padding_param 45, padding_layer.cpp) and ImageDataParameter's
  has_label (13 there, 1013 here), as its voc12/vgg128_noup/test.prototxt writes them.

Bytes: float32, 4 bytes a value; a Blob's shape buffer is 4 bytes an axis.
"""

from __future__ import annotations

import pytest

from caffemem.api.analyze import Options, analyze
from caffemem.api.optimize import OptimizeSettings, optimize
from caffemem.errors import CaffememError
from caffemem.plan.verify import verify_plan

# fc8 (2, 3, 8, 8): 384 values, 1,536 bytes; label (2, 1, 8, 8): 128 values.
V1_NET = """name: "vgg128_noup"
input: "data" input_dim: 2 input_dim: 3 input_dim: 8 input_dim: 8
input: "label" input_dim: 2 input_dim: 1 input_dim: 8 input_dim: 8
layers { bottom: "data" top: "fc8" name: "fc8" type: CONVOLUTION {strict}
  blobs_lr: 1 blobs_lr: 2 weight_decay: 1 weight_decay: 0
  convolution_param {{ num_output: 3 pad: 2 hole: 2 kernel_size: 3 }} }
layers {{ name: "loss" type: SOFTMAX_LOSS bottom: "fc8" bottom: "label" {softmaxloss} }}
"""


def _layers(tmp_path, strict: str = "strict_dim: false", softmaxloss: str = "softmaxloss_param { }", name: str = "net.prototxt"):
    path = tmp_path / name
    path.write_text(V1_NET.replace("{strict}", strict).replace("{softmaxloss}", softmaxloss).replace("{{", "{").replace("}}", "}"))
    net = analyze(str(path), Options(phase="TRAIN")).nets[0]
    return {layer.name: layer for layer in net.memory.layers}, net.notes


def test_strict_dim_parses_and_changes_no_byte(tmp_path):
    relaxed, notes = _layers(tmp_path, name="relaxed.prototxt")
    strict, strict_notes = _layers(tmp_path, strict="", name="strict.prototxt")
    assert (relaxed["fc8"].init, relaxed["fc8"].fwd_alloc, relaxed["fc8"].bwd_alloc) == (strict["fc8"].init, strict["fc8"].fwd_alloc, strict["fc8"].bwd_alloc)
    assert any(note.startswith("dropped DeepLab's strict_dim: false of layer(s) 'fc8'") for note in notes)
    assert not any("strict_dim" in note for note in strict_notes)


def test_deeplab_v1_softmax_loss_bytes(tmp_path):
    layers, notes = _layers(tmp_path)
    loss = layers["loss"]
    # SetUp: the loss top (1, 1, 1, 1) shape 16 and its diff 4 (LossLayer's weight 1);
    # prob_ (2, 3, 8, 8) shape 16, no diff (the inner Softmax was built before the default
    # weight); sum_multiplier_ (1, 3, 1, 1) shape 16 and its ones 12; scale_ (2, 1, 8, 8) 16
    assert loss.init == 16 + 4 + 16 + 16 + 12 + 16
    # Forward (CPU run): prob_ 1,536, scale_ 2 * 64 * 4 = 512, the loss 4
    assert loss.fwd_alloc == 1536 + 512 + 4
    # Backward: fc8's diff, 1,536
    assert loss.bwd_alloc == 1536
    assert any("SoftmaxWithLoss layer(s) 'loss' are DeepLab v1's" in note for note in notes)


def test_a_deeplab_v1_net_marks_its_loss_without_softmaxloss_param(tmp_path):
    # the hole makes the net DeepLab v1's: its SOFTMAX_LOSS is v1's code all the same
    layers, _ = _layers(tmp_path, strict="", softmaxloss="")
    assert layers["loss"].init == 80


def test_master_softmax_loss_unchanged_in_a_plain_v1_net(tmp_path):
    # no DeepLab v1 type or field: master's rule.  SetUp: loss top 0 axes + diff 4; prob_
    # shape 16 + diff 1,536 (the default weight 1 reaches the inner Softmax); sum_multiplier_
    # [3] 4 + 12; scale_ (2, 1, 8, 8) 16
    path = tmp_path / "plain.prototxt"
    path.write_text(
        'input: "data" input_dim: 2 input_dim: 3 input_dim: 8 input_dim: 8\n'
        'input: "label" input_dim: 2 input_dim: 1 input_dim: 8 input_dim: 8\n'
        'layers { bottom: "data" top: "fc8" name: "fc8" type: CONVOLUTION convolution_param { num_output: 3 pad: 1 kernel_size: 3 } }\n'
        'layers { name: "loss" type: SOFTMAX_LOSS bottom: "fc8" bottom: "label" }\n'
    )
    net = analyze(str(path), Options(phase="TRAIN")).nets[0]
    loss = {layer.name: layer for layer in net.memory.layers}["loss"]
    assert loss.init == 4 + 16 + 1536 + 16 + 16


# voc12/vgg128_noup/train.prototxt (TheLegendAli/DeepLab-Context@fb04e9e2) shortened: the
# IMAGE_SEG_DATA layer (crop_size 306 there) with a small crop, two convolutions with holes,
# the fc6/fc7/fc8 convolutions with strict_dim: false, the label shrunk by INTERP, the
# SOFTMAX_LOSS with its (empty) softmaxloss_param, SEG_ACCURACY.
VGG128_NOUP = """name: "${NET_ID}"
layers { name: "data" type: IMAGE_SEG_DATA top: "data" top: "label"
  image_data_param { root_folder: "/rmt/data/pascal/VOCdevkit/VOC2012" source: "voc12/list/train_aug.txt" label_type: PIXEL batch_size: 2 shuffle: true }
  transform_param { mean_value: 104.008 mean_value: 116.669 mean_value: 122.675 crop_size: 34 mirror: true }
  include: { phase: TRAIN } }
layers { bottom: "data" top: "conv1" name: "conv1" type: CONVOLUTION convolution_param { num_output: 8 pad: 1 kernel_size: 3 } }
layers { bottom: "conv1" top: "conv1" name: "relu1" type: RELU }
layers { bottom: "conv1" top: "pool1" name: "pool1" type: POOLING pooling_param { pool: MAX kernel_size: 2 stride: 2 } }
layers { bottom: "pool1" top: "conv5" name: "conv5" type: CONVOLUTION convolution_param { num_output: 8 pad: 2 hole: 2 kernel_size: 3 } }
layers { bottom: "conv5" top: "fc6" name: "fc6" type: CONVOLUTION strict_dim: false blobs_lr: 1 blobs_lr: 2 weight_decay: 1 weight_decay: 0
  convolution_param { num_output: 16 pad: 6 hole: 4 kernel_size: 4 } }
layers { bottom: "fc6" top: "fc6" name: "relu6" type: RELU }
layers { bottom: "fc6" top: "fc6" name: "drop6" type: DROPOUT dropout_param { dropout_ratio: 0.5 } }
layers { bottom: "fc6" top: "fc7" name: "fc7" type: CONVOLUTION strict_dim: false convolution_param { num_output: 16 kernel_size: 1 } }
layers { bottom: "fc7" top: "fc8_pascal" name: "fc8_pascal" type: CONVOLUTION strict_dim: false convolution_param { num_output: 21 kernel_size: 1 } }
layers { bottom: "label" top: "label_shrink" name: "label_shrink" type: INTERP interp_param { shrink_factor: 2 pad_beg: -1 pad_end: 0 } }
layers { name: "loss" type: SOFTMAX_LOSS bottom: "fc8_pascal" bottom: "label_shrink" softmaxloss_param { } include: { phase: TRAIN } }
layers { name: "accuracy" type: SEG_ACCURACY bottom: "fc8_pascal" bottom: "label_shrink" top: "accuracy" }
"""


def test_vgg128_noup_train_analyses_and_plans(tmp_path):
    path = tmp_path / "train.prototxt"
    path.write_text(VGG128_NOUP)
    net = analyze(str(path), Options(phase="TRAIN")).nets[0]
    layers = {layer.name: layer for layer in net.memory.layers}
    # conv1 34 -> 34, pool1 (2, 2) -> 17; conv5 (kernel 3, hole 2: 5, pad 2) -> 17; fc6
    # (kernel 4, hole 4: 13, pad 6) -> 17 - 13 + 12 + 1 = 17; fc8_pascal (2, 21, 17, 17); the
    # label 34 shrunk by 2 with pad_beg -1 (interp_layer.cpp): (34 - 1 - 1) / 2 + 1 = 17
    loss = layers["loss"]
    # fc8_pascal: 2 * 21 * 289 = 12,138 values, 48,552 bytes.  Forward (CPU): prob_ 48,552,
    # scale_ (2, 1, 17, 17) 2,312, the loss 4; Backward: fc8_pascal's diff 48,552
    assert (loss.fwd_alloc, loss.bwd_alloc) == (48552 + 2312 + 4, 48552)
    result = optimize(str(path), Options(phase="TRAIN"), OptimizeSettings())
    for phase in result.phases:
        assert verify_plan(phase.schedule, phase.plan_data) == []
        assert phase.lower_bound <= phase.planned.heap_total <= phase.stock.heap_total


# voc12/vgg128_noup/test.prototxt (TheLegendAli/DeepLab-Context@fb04e9e2) shortened: its
# IMAGE_SEG_DATA names only the data top and sets has_label: false (parsed only: no v1 layer
# reads it), is kept for TEST while the loss is kept for TRAIN, and its scores, zoomed back
# by INTERP, are cropped to the input by PADDING (pad_beg -7, pad_end -8 there).
VGG128_NOUP_TEST = """name: "${NET_ID}"
layers { name: "data" type: IMAGE_SEG_DATA top: "data"
  image_data_param { root_folder: "/rmt/data/pascal/VOCdevkit/VOC2012" source: "voc12/list/${TEST_SET}.txt" batch_size: 1 has_label: false }
  transform_param { mean_value: 104.008 mean_value: 116.669 mean_value: 122.675 crop_size: 34 mirror: false }
  include: { phase: TEST } }
layers { bottom: "data" top: "conv1" name: "conv1" type: CONVOLUTION convolution_param { num_output: 8 pad: 1 kernel_size: 3 } }
layers { bottom: "conv1" top: "pool1" name: "pool1" type: POOLING pooling_param { pool: MAX kernel_size: 2 stride: 2 } }
layers { bottom: "pool1" top: "fc8_pascal" name: "fc8_pascal" type: CONVOLUTION convolution_param { num_output: 21 kernel_size: 1 } }
layers { bottom: "fc8_pascal" top: "fc8_interp" name: "fc8_interp" type: INTERP interp_param { zoom_factor: 2 } }
layers { bottom: "fc8_interp" top: "fc8_crop" name: "fc8_crop" type: PADDING padding_param { pad_beg: {beg} pad_end: {end} } }
layers { name: "loss" type: SOFTMAX_LOSS bottom: "fc8_crop" bottom: "label" include: { phase: TRAIN } }
layers { name: "fc8_crop_mat" type: MAT_WRITE bottom: "fc8_crop" mat_write_param { prefix: "features/" source: "voc12/list/val_id.txt" strip: 0 period: 1 } include: { phase: TEST } }
"""


def _test_net(tmp_path, beg: int = -1, end: int = -2):
    path = tmp_path / "test.prototxt"
    path.write_text(VGG128_NOUP_TEST.replace("{beg}", str(beg)).replace("{end}", str(end)))
    return path


def test_vgg128_noup_test_is_built_for_test_and_cropped_by_padding(tmp_path):
    # Only TEST keeps a data layer: the net analysed by default is TEST's (Caffe could not
    # build TRAIN's).  34 -> pool1 17 -> zoom 2: 17 + 16 = 33 -> crop 1 + 2: 30.
    net = analyze(str(_test_net(tmp_path)), Options()).nets[0]
    assert net.phase == "TEST"
    assert net.blobs["data"] == (1, 3, 34, 34)
    assert net.blobs["fc8_interp"] == (1, 21, 33, 33)
    assert net.blobs["fc8_crop"] == (1, 21, 30, 30)
    # Forward reads the bottom and writes the top: 21 * 30 * 30 * 4 = 75,600 bytes
    crop = {layer.name: layer for layer in net.memory.layers}["fc8_crop"]
    assert crop.fwd_alloc == 75600


def test_padding_pads_with_positive_pads(tmp_path):
    net = analyze(str(_test_net(tmp_path, 2, 3)), Options()).nets[0]
    assert net.blobs["fc8_crop"] == (1, 21, 38, 38)


def test_padding_refuses_mixed_signs(tmp_path):
    with pytest.raises(CaffememError, match="layer 'fc8_crop'.*Padding must either be both positive or negative"):
        analyze(str(_test_net(tmp_path, 1, -1)), Options())


def test_padding_refuses_cropping_everything(tmp_path):
    with pytest.raises(CaffememError, match="Padding makes height <= 0"):
        analyze(str(_test_net(tmp_path, -20, -13)), Options())

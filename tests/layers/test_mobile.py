"""The MobileNet / ShuffleNet / YOLO layers (caffemem/layers/mobile.py, and YOLO's one-bottom
Upsample in caffemem/layers/fork_vision.py): shapes and bytes worked out by hand from each
repository's source (named in the comments), and a plan for a small net built like theirs.

Bytes: float32, 4 bytes a value; a Blob's shape buffer is 4 bytes an axis.  ``init`` is the
layer's SetUp (top shape buffers included), ``fwd_alloc`` / ``bwd_alloc`` its passes.
"""

from __future__ import annotations

import pytest
from conftest import check_plans

from caffemem.api.analyze import Options
from caffemem.api.analyze import analyze as caffemem_analyze
from caffemem.api.optimize import OptimizeSettings, optimize
from caffemem.errors import CaffememError
from caffemem.plan.verify import verify_plan


def dw(params: str, extra: str = "") -> str:
    return f'type: "ConvolutionDepthwise" bottom: "x" top: "y" {extra} convolution_param {{ {params} }}'


# --- ConvolutionDepthwise (farmingyard/caffe-mobilenet conv_dw_layer.cpp) ------------------


def test_convolution_depthwise_shape_and_params(shape_of):
    # (7 + 2*1 - (1*(3-1)+1)) / 2 + 1 = 6/2 + 1 = 4; channels stay 8 (num_output is ignored,
    # here 16); weight (C, 1, kh, kw) = (8, 1, 3, 3), bias (8,)
    got = shape_of(dw("num_output: 16 kernel_size: 3 stride: 2 pad: 1"), (2, 8, 7, 7))
    assert got.tops == ((2, 8, 4, 4),)
    assert got.params == ((8, 1, 3, 3), (8,))


def test_convolution_depthwise_h_w_fields_and_dilation(shape_of):
    # h: (9 + 2*1 - 3) / 2 + 1 = 5; w: (6 + 0 - 1) / 1 + 1 = 6; no bias
    text = dw("kernel_h: 3 kernel_w: 1 stride_h: 2 stride_w: 1 pad_h: 1 pad_w: 0 bias_term: false")
    got = shape_of(text, (1, 4, 9, 6))
    assert got.tops == ((1, 4, 5, 6),) and got.params == ((4, 1, 3, 1),)
    # dilation 2: extent 2*(3-1)+1 = 5 -> (7 + 4 - 5) / 1 + 1 = 7; two values in a list: (h, w)
    assert shape_of(dw("kernel_size: 3 stride: 1 pad: 2 dilation: 2"), (1, 2, 7, 7)).tops == ((1, 2, 7, 7),)
    # kernel_size: [3, 1], stride: [1, 2], pad: [1, 0]: h (5+2-3)/1+1 = 5, w (8+0-1)/2+1 = 4 (7/2 -> 3)
    assert shape_of(dw("kernel_size: 3 kernel_size: 1 stride: 1 stride: 2 pad: 1 pad: 0"), (1, 2, 5, 8)).tops == ((1, 2, 5, 4),)


def test_convolution_depthwise_needs_stride_and_pad(shape_of):
    # conv_dw_layer.cpp reads stride(0) / pad(0) with no default: an empty list is refused
    with pytest.raises(CaffememError, match="stride"):
        shape_of(dw("kernel_size: 3 pad: 1"), (1, 2, 5, 5))
    with pytest.raises(CaffememError, match="pad"):
        shape_of(dw("kernel_size: 3 stride: 1"), (1, 2, 5, 5))


DW_LAYER = 'layer {{ name: "dw" type: "ConvolutionDepthwise" bottom: "x" top: "y" {extra} convolution_param {{ kernel_size: 3 stride: 1 pad: 1 {params} }} }}'


def test_convolution_depthwise_memory(memory_of):
    # x (2,3,5,5) -> y (2,3,5,5): 150 values, 600 bytes.  LayerSetUp: weight (3,1,3,3)
    # 16 + 27*4 = 124, bias (3) 4 + 12 = 16.  Reshape: top shape 16; weight_buffer_
    # (3,3,3,2,5,5) shape only 24; weight_multiplier_ (2,5,5) 12 + 50*4 = 212; bias_buffer_
    # (3,2,5,5) shape only 16; bias_multiplier_ (2,5,5) 212.
    got = memory_of(DW_LAYER.format(extra="", params=""), {"x": (2, 3, 5, 5)})["dw"]
    assert got.init == 124 + 16 + 16 + 24 + 212 + 16 + 212
    # Forward_cpu: the top 600
    assert got.fwd_alloc == 600
    # Backward_cpu: x's diff (caffe_set) 600, y's diff 600, bias diff 12, weight diff 108
    assert got.bwd_alloc == 600 + 600 + 12 + 108


def test_convolution_depthwise_zeroes_the_bottom_diff_without_propagate_down(memory_of):
    # no bias: init 124 + 16 + 24 + 212.  propagate_down false: the weight still learns, so
    # Backward runs, and caffe_set(bottom diff) comes first: x's diff 600, y's diff 600,
    # weight diff 108
    got = memory_of(DW_LAYER.format(extra="propagate_down: false", params="bias_term: false"), {"x": (2, 3, 5, 5)})["dw"]
    assert got.init == 124 + 16 + 24 + 212
    assert got.bwd_alloc == 600 + 600 + 108


# --- DepthwiseConvolution (yonghenglh6/DepthwiseConvolution depthwise_conv_layer.cpp) -----


def test_depthwise_convolution_shape_is_base_convolution(shape_of):
    # compute_output_shape: (7 + 2*1 - 3) / 2 + 1 = 4; group 8 of 8 channels: weight
    # (out, in/group, k, k) = (8, 1, 3, 3), bias (8,)
    text = 'type: "DepthwiseConvolution" bottom: "x" top: "y" convolution_param { num_output: 8 group: 8 kernel_size: 3 stride: 2 pad: 1 }'
    got = shape_of(text, (2, 8, 7, 7))
    assert got.tops == ((2, 8, 4, 4),) and got.params == ((8, 1, 3, 3), (8,))


DEPTHWISE = 'layer {{ name: "dw" type: "DepthwiseConvolution" bottom: "x" top: "y" convolution_param {{ num_output: 3 group: 3 kernel_size: 3 pad: 1 {engine} }} }}'


def test_depthwise_convolution_memory_is_caffe_convolution(memory_of):
    # x (2,3,5,5) -> y (2,3,5,5), 600 bytes.  LayerSetUp: kernel_shape_, stride_, pad_,
    # dilation_ Blob<int>[2] written 4 * (4 + 8) = 48; weight (3,1,3,3) 16 + 108; bias (3)
    # 4 + 12.  Reshape: top shape 16, conv_input_shape_ [3] 4 + 12, col_buffer_ [9*3,5,5]
    # shape only 12, bias_multiplier_ [25] 4 + 100.
    got = memory_of(DEPTHWISE.format(engine=""), {"x": (2, 3, 5, 5)})["dw"]
    assert got.init == 48 + 124 + 16 + 16 + 16 + 12 + 104
    # Forward_cpu (conv_layer.cpp's): the top 600 and forward_cpu_gemm's im2col 27*25*4 = 2700
    assert got.fwd_alloc == 600 + 2700
    # Backward_cpu: weight diff 108, y's diff 600, x's diff 600, bias diff 12
    assert got.bwd_alloc == 108 + 600 + 600 + 12
    # never a cuDNN class (REGISTER_LAYER_CLASS only): the same bytes with engine CUDNN
    cudnn = memory_of(DEPTHWISE.format(engine="engine: CUDNN"), {"x": (2, 3, 5, 5)}, engine="cudnn")["dw"]
    assert (cudnn.init, cudnn.fwd_alloc, cudnn.bwd_alloc) == (got.init, got.fwd_alloc, got.bwd_alloc)


# --- ShuffleChannel (farmingyard/ShuffleNet shuffle_channel_layer.cpp) ---------------------


def test_shuffle_channel_shape(shape_of):
    # Reshape(num, channels, height, width); 6 channels in 3 groups of 2
    text = 'type: "ShuffleChannel" bottom: "x" top: "y" shuffle_channel_param { group: 3 }'
    assert shape_of(text, (2, 6, 5, 5)).tops == ((2, 6, 5, 5),)
    # legacy accessors: an (N, C) bottom gives (N, C, 1, 1)
    assert shape_of(text, (2, 6)).tops == ((2, 6, 1, 1),)
    # 6 % 4 != 0: Forward_cpu's CHECK_EQ(chs, group_column * group_row) fails
    with pytest.raises(CaffememError, match="group"):
        shape_of(text.replace("3", "4"), (2, 6, 5, 5))
    with pytest.raises(CaffememError, match="greater than 0"):
        shape_of(text.replace("3", "0"), (2, 6, 5, 5))


def test_shuffle_channel_memory(memory_of):
    # x (2,6,2,2): 48 values, 192 bytes.  SetUp: the top's shape 16.  Forward: top 192
    # (temp_blob_ is commented out).  Backward: y's diff 192, x's diff 192.
    body = 'layer { name: "shuffle" type: "ShuffleChannel" bottom: "x" top: "y" shuffle_channel_param { group: 2 } }'
    got = memory_of(body, {"x": (2, 6, 2, 2)})["shuffle"]
    assert (got.init, got.fwd_alloc, got.bwd_alloc) == (16, 192, 384)


# --- ReLU6 (eric612/MobileNet-YOLO relu6_layer.cpp) ---------------------------------------


def test_relu6_shape(shape_of):
    # NeuronLayer: the top is shaped like the bottom
    assert shape_of('type: "ReLU6" bottom: "x" top: "y" relu6_param { negative_slope: 0.1 }', (2, 3, 4)).tops == ((2, 3, 4),)


def test_relu6_memory(memory_of):
    # x (2,3): 24 bytes.  SetUp: top shape 8.  Forward: top 24.  Backward reads x's data
    # (already there), y's diff 24, writes x's diff 24.
    got = memory_of('layer { name: "relu6" type: "ReLU6" bottom: "x" top: "y" }', {"x": (2, 3)})["relu6"]
    assert (got.init, got.fwd_alloc, got.bwd_alloc) == (8, 24, 48)


# --- YOLO's one-bottom Upsample (eric612/MobileNet-YOLO upsample_layer.cpp) ----------------


def test_yolo_upsample_shape(shape_of):
    # the last two axes times scale: 13*2 = 26
    text = 'type: "Upsample" bottom: "x" top: "y" upsample_param { scale: 2 }'
    assert shape_of(text, (1, 4, 13, 13)).tops == ((1, 4, 26, 26),)
    # no scale: YOLO's default is 1 (SegNet's 2 applies to two bottoms only)
    assert shape_of('type: "Upsample" bottom: "x" top: "y"', (1, 4, 13, 13)).tops == ((1, 4, 13, 13),)
    # Forward/Backward index shape(0..3)
    with pytest.raises(CaffememError, match="4 axes"):
        shape_of(text, (4, 13, 13))


def test_segnet_upsample_keeps_two_bottoms(shape_of):
    # SegNet: 4*2 = 8 (scale 2 by default), mask shaped like the data
    text = 'type: "Upsample" bottom: "x" bottom: "mask" top: "y"'
    assert shape_of(text, (1, 3, 4, 4), (1, 3, 4, 4)).tops == ((1, 3, 8, 8),)


def test_yolo_upsample_memory(memory_of):
    # x (1,2,3,3) -> y (1,2,6,6): 72 values, 288 bytes.  SetUp: top shape 16.  Forward: 288.
    # Backward_cpu (no propagate_down test): y's diff 288, x's diff 18*4 = 72.
    body = 'layer { name: "up" type: "Upsample" bottom: "x" top: "y" upsample_param { scale: 2 } }'
    got = memory_of(body, {"x": (1, 2, 3, 3)})["up"]
    assert (got.init, got.fwd_alloc, got.bwd_alloc) == (16, 288, 360)


# --- a small net in the style of MobileNet and ShuffleNet ----------------------------------

# One MobileNet block as in farmingyard/caffe-mobilenet mobilenet_1by2_deploy.prototxt
# (3x3 ConvolutionDepthwise -> BatchNorm -> Scale -> ReLU, then a 1x1 Convolution), a 3x3
# DepthwiseConvolution as yonghenglh6/DepthwiseConvolution's
# example/depthwised_mobilenet_deploy.prototxt writes MobileNet's (group = channels), one
# ShuffleNet unit as in farmingyard/ShuffleNet shufflenet_1x_g3_deploy.prototxt (grouped 1x1
# conv -> BN -> Scale -> ReLU -> ShuffleChannel -> 3x3 ConvolutionDepthwise -> BN -> Scale ->
# grouped 1x1 conv -> BN -> Scale, Eltwise SUM with the unit's input, ReLU), then ReLU6 and
# YOLO's Upsample before the classifier.
MOBILE_NET = """name: "mobile_block"
force_backward: true
layer { name: "data" type: "Input" top: "data" top: "label" input_param { shape { dim: 2 dim: 3 dim: 16 dim: 16 } shape { dim: 2 } } }
layer { name: "conv1" type: "Convolution" bottom: "data" top: "conv1" convolution_param { num_output: 12 bias_term: false pad: 1 kernel_size: 3 stride: 2 } }
layer { name: "conv1/bn" type: "BatchNorm" bottom: "conv1" top: "conv1" }
layer { name: "conv1/scale" type: "Scale" bottom: "conv1" top: "conv1" scale_param { bias_term: true } }
layer { name: "relu1" type: "ReLU" bottom: "conv1" top: "conv1" }
layer { name: "conv2_1/dw" type: "ConvolutionDepthwise" bottom: "conv1" top: "conv2_1/dw" convolution_param { num_output: 12 bias_term: false pad: 1 kernel_size: 3 stride: 1 } }
layer { name: "conv2_1/dw/bn" type: "BatchNorm" bottom: "conv2_1/dw" top: "conv2_1/dw" }
layer { name: "conv2_1/dw/scale" type: "Scale" bottom: "conv2_1/dw" top: "conv2_1/dw" scale_param { bias_term: true } }
layer { name: "relu2_1/dw" type: "ReLU" bottom: "conv2_1/dw" top: "conv2_1/dw" }
layer { name: "conv2_1/sep" type: "Convolution" bottom: "conv2_1/dw" top: "conv2_1/sep" convolution_param { num_output: 24 bias_term: false kernel_size: 1 } }
layer { name: "conv2_2/dw" type: "DepthwiseConvolution" bottom: "conv2_1/sep" top: "conv2_2/dw" convolution_param { num_output: 24 group: 24 bias_term: false pad: 1 kernel_size: 3 stride: 1 } }
layer { name: "resx2_conv1" type: "Convolution" bottom: "conv2_2/dw" top: "resx2_conv1" convolution_param { num_output: 12 kernel_size: 1 group: 3 bias_term: false } }
layer { name: "resx2_conv1_bn" type: "BatchNorm" bottom: "resx2_conv1" top: "resx2_conv1" }
layer { name: "resx2_conv1_scale" type: "Scale" bottom: "resx2_conv1" top: "resx2_conv1" scale_param { bias_term: true } }
layer { name: "resx2_conv1_relu" type: "ReLU" bottom: "resx2_conv1" top: "resx2_conv1" }
layer { name: "shuffle2" type: "ShuffleChannel" bottom: "resx2_conv1" top: "shuffle2" shuffle_channel_param { group: 3 } }
layer { name: "resx2_conv2" type: "ConvolutionDepthwise" bottom: "shuffle2" top: "resx2_conv2" convolution_param { num_output: 12 kernel_size: 3 stride: 1 pad: 1 group: 12 bias_term: false } }
layer { name: "resx2_conv2_bn" type: "BatchNorm" bottom: "resx2_conv2" top: "resx2_conv2" }
layer { name: "resx2_conv2_scale" type: "Scale" bottom: "resx2_conv2" top: "resx2_conv2" scale_param { bias_term: true } }
layer { name: "resx2_conv3" type: "Convolution" bottom: "resx2_conv2" top: "resx2_conv3" convolution_param { num_output: 24 kernel_size: 1 group: 3 bias_term: false } }
layer { name: "resx2_conv3_bn" type: "BatchNorm" bottom: "resx2_conv3" top: "resx2_conv3" }
layer { name: "resx2_conv3_scale" type: "Scale" bottom: "resx2_conv3" top: "resx2_conv3" scale_param { bias_term: true } }
layer { name: "resx2_elewise" type: "Eltwise" bottom: "conv2_2/dw" bottom: "resx2_conv3" top: "resx2_elewise" eltwise_param { operation: SUM } }
layer { name: "resx2_elewise_relu" type: "ReLU6" bottom: "resx2_elewise" top: "resx2_elewise" }
layer { name: "up" type: "Upsample" bottom: "resx2_elewise" top: "up" upsample_param { scale: 2 } }
layer { name: "pool" type: "Pooling" bottom: "up" top: "pool" pooling_param { pool: AVE global_pooling: true } }
layer { name: "fc" type: "InnerProduct" bottom: "pool" top: "fc" inner_product_param { num_output: 10 } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "fc" bottom: "label" top: "loss" }
"""


def test_optimize_plans_a_mobilenet_shufflenet_block(tmp_path):
    check_plans(tmp_path, MOBILE_NET, name="mobile.prototxt")


# --- Yolov3DetectionOutput (eric612/MobileNet-YOLO yolov3_detection_output_layer.cpp) ------

YOLO_OUT = 'type: "Yolov3DetectionOutput" bottom: "c19" bottom: "c20" top: "det" yolov3_detection_output_param {{ num_classes: 20 anchors_scale: 32 anchors_scale: 16 mask_group_num: 2 {extra} }}'


def test_yolov3_detection_output_bound_is_every_candidate(shape_of):
    # As models/yolov3/mobilenet_yolov3_lite_deploy.prototxt at 320x320: conv19 (1, 75, 10, 10),
    # conv20 (1, 75, 20, 20); num_box 3, 20 classes: (100 + 400) x 3 x 20 = 30000 rows of 7.
    assert shape_of(YOLO_OUT.format(extra=""), (1, 75, 10, 10), (1, 75, 20, 20)).tops == ((1, 1, 30000, 7),)


def test_yolov3_detection_output_checks_num_classes_and_bottoms(shape_of):
    # LayerSetUp: CHECK(has_num_classes()); CHECK_EQ(bottom.size(), mask_group_num_).
    with pytest.raises(CaffememError, match="num_classes"):
        shape_of('type: "Yolov3DetectionOutput" bottom: "a" yolov3_detection_output_param { mask_group_num: 1 }', (1, 75, 2, 2))
    with pytest.raises(CaffememError, match="mask_group_num"):
        shape_of(YOLO_OUT.format(extra="").replace("mask_group_num: 2", "mask_group_num: 3"), (1, 75, 10, 10), (1, 75, 20, 20))


def test_yolov3_detection_output_memory(memory_of):
    # SetUp: the top's shape buffer, 16.  Forward: swap_ like c19 (1,75,2,2): shape buffer 16
    # and 300*4 = 1,200 bytes, regrown like c20 (1,75,4,4): 1200*4 = 4,800 bytes, the first
    # 1,200 freed (net 4,800); the top (1,1,(4+16)*3*2,7) = (1,1,120,7): 3,360.  No Backward.
    body = 'layer { name: "l" ' + YOLO_OUT.format(extra="num_box: 3").replace("num_classes: 20", "num_classes: 2") + " }"
    layer = memory_of(body, {"c19": (1, 75, 2, 2), "c20": (1, 75, 4, 4)}, phase="TEST", force_backward=False)["l"]
    assert (layer.init, layer.fwd_alloc, layer.bwd_alloc) == (16, 16 + 4800 + 3360, 0)


YOLO_NET = """
layer { name: "in" type: "Input" top: "data" input_param { shape { dim: 1 dim: 3 dim: 32 dim: 32 } } }
layer { name: "c1" type: "Convolution" bottom: "data" top: "c1" convolution_param { num_output: 8 kernel_size: 3 stride: 2 pad: 1 } }
layer { name: "relu1" type: "ReLU6" bottom: "c1" top: "c1" }
layer { name: "c19" type: "Convolution" bottom: "c1" top: "c19" convolution_param { num_output: 21 kernel_size: 1 stride: 2 } }
layer { name: "c20" type: "Convolution" bottom: "c1" top: "c20" convolution_param { num_output: 21 kernel_size: 1 } }
layer { name: "det" type: "Yolov3DetectionOutput" bottom: "c19" bottom: "c20" top: "det"
  yolov3_detection_output_param { num_classes: 2 anchors_scale: 32 anchors_scale: 16 mask_group_num: 2 } }
"""


def test_optimize_plans_a_yolov3_head(tmp_path):
    result = check_plans(tmp_path, YOLO_NET, phase="TEST", name="yolo.prototxt", round_trip=False)
    # c19 (1,21,8,8), c20 (1,21,16,16): (64 + 256) x 3 x 2 = 1920 rows of 7 floats
    assert result.phases[0].stock.layers[-1].fwd_alloc >= 1920 * 7 * 4


# --- Yolov3 loss (eric612/MobileNet-YOLO yolov3_layer.cpp) ---------------------------------

YOLO_LOSS = 'type: "Yolov3" bottom: "pred" bottom: "label" top: "loss" yolov3_param {{ num_class: 2 num: 3 {extra} }}'


def test_yolov3_loss_is_a_scalar_over_matching_predictions(shape_of):
    # LayerSetUp: CHECK_EQ(count(1), W*H*num*(4 + num_class + 1)) = 4*4*3*7 = 336 = 21*4*4;
    # the label is AnnotatedData's YOLO label [N, 1, 300, 5].
    assert shape_of(YOLO_LOSS.format(extra=""), (2, 21, 4, 4), (2, 1, 300, 5)).tops == ((),)
    with pytest.raises(CaffememError, match="336"):
        shape_of(YOLO_LOSS.format(extra=""), (2, 20, 4, 4), (2, 1, 300, 5))
    with pytest.raises(CaffememError, match="first dimension"):
        shape_of(YOLO_LOSS.format(extra=""), (2, 21, 4, 4), (1, 1, 300, 5))


def test_yolov3_loss_memory(memory_of):
    # Predictions (2,21,4,4): 672 values, 2,688 bytes.  SetUp: diff_ and real_diff_ shaped like
    # them (16 + 16), the loss top (0 axes) and its diff (loss_weight 1): 4.  Forward: diff_
    # 2,688, swap_ 16 + 2,688, the loss 4.  Backward (the predictions come from a trained
    # Bias): their diff 2,688 (the label's never: LossLayer refuses it).
    trained = 'layer { name: "b" type: "Bias" bottom: "p0" top: "pred" }\n'
    body = trained + 'layer { name: "l" ' + YOLO_LOSS.format(extra="") + " }"
    layer = memory_of(body, {"p0": (2, 21, 4, 4), "label": (2, 1, 300, 5)}, force_backward=False)["l"]
    assert (layer.init, layer.fwd_alloc, layer.bwd_alloc) == (32 + 4, 2688 + 16 + 2688 + 4, 2688)


YOLO_TRAIN = """
layer { name: "data" type: "AnnotatedData" top: "data" top: "label" data_param { batch_size: 2 }
  transform_param { resize_param { prob: 0.5 height: 64 width: 64 } resize_param { prob: 0.5 height: 96 width: 96 } }
  annotated_data_param { yolo_data_type: 1 } }
layer { name: "c1" type: "Convolution" bottom: "data" top: "c1" convolution_param { num_output: 8 kernel_size: 3 stride: 4 pad: 1 } }
layer { name: "relu1" type: "ReLU6" bottom: "c1" top: "c1" }
layer { name: "pred" type: "Convolution" bottom: "c1" top: "pred" convolution_param { num_output: 21 kernel_size: 1 stride: 2 } }
layer { name: "loss" type: "Yolov3" bottom: "pred" bottom: "label" top: "loss" yolov3_param { num_class: 2 num: 3 } }
"""


def test_multi_scale_yolo_training_is_sized_at_its_largest_scale(tmp_path):
    # Mirrors models/yolov3/mobilenet_yolov3_lite_train.prototxt: several resize_params (one
    # picked every 10 iterations), so a run ends up holding the largest, 96x96: data
    # (2,3,96,96), c1 (2,8,24,24), pred (2,21,12,12); the YOLO label (2,1,300,5).
    path = tmp_path / "yolo_train.prototxt"
    path.write_text(YOLO_TRAIN)
    result = optimize(str(path), Options(phase="TRAIN", inputs={"data": (3, 96, 96)}), OptimizeSettings())
    net = caffemem_analyze(str(path), Options(phase="TRAIN", inputs={"data": (3, 96, 96)})).nets[0]
    assert net.blobs["data"] == (2, 3, 96, 96) and net.blobs["pred"] == (2, 21, 12, 12) and net.blobs["label"] == (2, 1, 300, 5)
    assert any("multi-scale training (64x64, 96x96)" in note for note in net.memory.notes)
    for phase in result.phases:
        assert verify_plan(phase.schedule, phase.plan_data) == []
        assert phase.lower_bound <= phase.planned.heap_total <= phase.stock.heap_total

"""Gram (happynear/caffe-windows), Gather (synopsys-caffe's tf.gather, PSPNet's MPI gather),
DenseBlock (Tongcheng/caffe) and senlinuc/caffe_ocr's CRNN layers from caffemem/layers/fork_misc.py: shapes and bytes worked
out by hand from each repository's source (named in the comments), and planned nets.

Bytes: float32, 4 bytes a value; a Blob's shape buffer is 4 bytes an axis.
"""

from __future__ import annotations

import pytest

from caffemem.errors import CaffememError
from tests.layers.test_faces import check_plans

# --- Gram (happynear/caffe-windows gram_layer.cpp) -----------------------------------------


def test_gram_shape(shape_of):
    # Reshape(num, channels, channels, 1)
    assert shape_of('type: "Gram" bottom: "x" top: "g"', (2, 8, 5, 7)).tops == ((2, 8, 8, 1),)
    # legacy accessors: a (2, 8) bottom reads height = width = 1 -- fine in TEST ...
    assert shape_of('type: "Gram" bottom: "x" top: "g"', (2, 8), phase="TEST").tops == ((2, 8, 8, 1),)
    # ... but Backward_cpu reads shape(2) * shape(3)
    with pytest.raises(CaffememError, match="4 axes"):
        shape_of('type: "Gram" bottom: "x" top: "g"', (2, 8))


def test_gram_memory(memory_of):
    # x (2,3,4,5) -> g (2,3,3,1): 18 values, 72 bytes.  SetUp: g's shape 16.  Forward: g 72
    # (the local temp copy of x is freed on return).  Backward, no propagate_down test: g's
    # diff 72 (mutable_cpu_diff), x's diff 120 values = 480.
    got = memory_of('layer { name: "gram" type: "Gram" bottom: "x" top: "g" }', {"x": (2, 3, 4, 5)})["gram"]
    assert (got.init, got.fwd_alloc, got.bwd_alloc) == (16, 72, 72 + 480)


# --- Gather -------------------------------------------------------------------------------

TF_GATHER = 'type: "Gather" bottom: "x" top: "y" gather_param {{ {p} }}'


def test_tf_gather_shapes(shape_of):
    # synopsys-caffe: params.shape[:axis] + indices.shape + params.shape[axis+1:]
    assert shape_of(TF_GATHER.format(p="indices: 0 indices: 2 shape: 2 axis: 1"), (4, 3, 5)).tops == ((4, 2, 5),)
    # indices of shape (2, 2) on axis 0
    assert shape_of(TF_GATHER.format(p="indices: [0, 1, 1, 0] shape: [2, 2]"), (3, 5)).tops == ((2, 2, 5),)
    # one index, no shape: the axis disappears (shape: 0 says the same)
    assert shape_of(TF_GATHER.format(p="indices: 1 axis: -1"), (3, 5)).tops == ((3,),)
    assert shape_of(TF_GATHER.format(p="indices: 1 shape: 0"), (3, 5)).tops == ((5,),)


def test_tf_gather_checks(shape_of):
    with pytest.raises(CaffememError, match="out of range"):
        shape_of(TF_GATHER.format(p="indices: 3 axis: 0"), (3, 5))
    with pytest.raises(CaffememError, match="do not match"):
        shape_of(TF_GATHER.format(p="indices: 0 indices: 1 shape: 3"), (3, 5))
    with pytest.raises(CaffememError, match="scalar"):
        shape_of(TF_GATHER.format(p="indices: 0 indices: 1"), (3, 5))


def test_mpi_gather_is_an_alias_per_bottom(shape_of, memory_of):
    # hszhao/PSPNet: one process, each top ReshapeLike its bottom and shares data and diff
    assert shape_of('type: "Gather" bottom: "a" bottom: "b" top: "c" top: "d"', (2, 3), (4,)).tops == ((2, 3), (4,))
    with pytest.raises(CaffememError, match="one top per bottom"):
        shape_of('type: "Gather" bottom: "a" bottom: "b" top: "c"', (2, 3), (4,))
    # SetUp: the two tops' shapes 8 + 4, no bytes of their own; Forward nothing
    body = 'layer { name: "g" type: "Gather" bottom: "a" bottom: "b" top: "c" top: "d" }'
    got = memory_of(body, {"a": (2, 3), "b": (4,)}, force_backward=False)["g"]
    assert (got.init, got.fwd_alloc, got.bwd_alloc) == (12, 0, 0)


def test_tf_gather_memory(memory_of):
    # x (4,3,5) -> y (4,2,5): 40 values.  SetUp: y's shape 12.  Forward: y 160.  No Backward
    # (NOT_IMPLEMENTED: nothing below needs a gradient here).
    body = f'layer {{ name: "g" {TF_GATHER.format(p="indices: 0 indices: 2 shape: 2 axis: 1")} }}'
    got = memory_of(body, {"x": (4, 3, 5)}, force_backward=False)["g"]
    assert (got.init, got.fwd_alloc, got.bwd_alloc) == (12, 160, 0)


# --- planned nets -------------------------------------------------------------------------

# Neural style: Gram matrices of two conv features compared to targets by EuclideanLoss
# (the style loss of Gatys et al.; happynear/caffe-windows has the layer but no example
# net); a tf.gather picking channels as synopsys-caffe's converted nets do (an output only:
# its Backward is NOT_IMPLEMENTED), and PSPNet's MPI Gather in one process before gram2.
STYLE_NET = """name: "style_block"
layer { name: "data" type: "Input" top: "data" top: "target1" top: "target2" input_param { shape { dim: 1 dim: 3 dim: 16 dim: 16 } shape { dim: 1 dim: 8 dim: 8 dim: 1 } shape { dim: 1 dim: 6 dim: 6 dim: 1 } } }
layer { name: "conv1" type: "Convolution" bottom: "data" top: "conv1" convolution_param { num_output: 8 kernel_size: 3 pad: 1 } }
layer { name: "relu1" type: "ReLU" bottom: "conv1" top: "conv1" }
layer { name: "gram1" type: "Gram" bottom: "conv1" top: "gram1" }
layer { name: "style1" type: "EuclideanLoss" bottom: "gram1" bottom: "target1" top: "style1" }
layer { name: "pool1" type: "Pooling" bottom: "conv1" top: "pool1" pooling_param { pool: MAX kernel_size: 2 stride: 2 } }
layer { name: "conv2" type: "Convolution" bottom: "pool1" top: "conv2" convolution_param { num_output: 6 kernel_size: 3 pad: 1 } }
layer { name: "pick" type: "Gather" bottom: "conv2" top: "pick" gather_param { indices: [0, 2, 3, 5] shape: 4 axis: 1 } }
layer { name: "mpi" type: "Gather" bottom: "conv2" top: "conv2_all" }
layer { name: "gram2" type: "Gram" bottom: "conv2_all" top: "gram2" }
layer { name: "style2" type: "EuclideanLoss" bottom: "gram2" bottom: "target2" top: "style2" }
"""


def test_optimize_plans_a_style_net_with_gram_and_gather(tmp_path):
    check_plans(tmp_path, STYLE_NET)


# --- DenseBlock (Tongcheng/caffe DenseBlock_layer.cpp) -------------------------------------

DENSE = 'type: "DenseBlock" bottom: "x" top: "y" denseblock_param {{ numTransition: 2 initChannel: 3 growthRate: 2 {extra} }}'


def test_dense_block_shapes_and_parameters(shape_of):
    # top (N, 3 + 2*2, H, W); 5T + 1 = 11 blobs: 3x3 filters (growth, C_i, 3, 3) for C_i = 3, 5,
    # then scalers, biases, global means, global variances (1, C_i, 1, 1), then the factor (1,)
    got = shape_of(DENSE.format(extra=""), (2, 3, 4, 4))
    assert got.tops == ((2, 7, 4, 4),)
    c = ((1, 3, 1, 1), (1, 5, 1, 1))
    assert got.params == ((2, 3, 3, 3), (2, 5, 3, 3)) + c * 4 + ((1,),)


def test_dense_block_bottleneck_parameters(shape_of):
    # use_BC: 10T + 1 blobs; the 3x3 filters read 4*growth = 8 channels, [5T + i] are the
    # 1x1 filters (8, C_i, 1, 1), [6T..9T + i] the bottleneck's BN blobs (1, 8, 1, 1)
    got = shape_of(DENSE.format(extra="use_BC: true"), (2, 3, 4, 4))
    c = ((1, 3, 1, 1), (1, 5, 1, 1))
    bc = ((1, 8, 1, 1),) * 2
    assert got.params == ((2, 8, 3, 3),) * 2 + c * 4 + ((8, 3, 1, 1), (8, 5, 1, 1)) + bc * 4 + ((1,),)


def test_dense_block_checks(shape_of):
    # Forward copies the bottom into an N x initChannel x H x W blob
    with pytest.raises(CaffememError, match="initChannel"):
        shape_of(DENSE.format(extra=""), (2, 4, 4, 4))
    with pytest.raises(CaffememError, match="4 axes"):
        shape_of(DENSE.format(extra=""), (2, 3, 16))
    # LayerSetUp adds its own ParamSpecs and CHECK-fails when the file gives one
    with pytest.raises(CaffememError, match="Nope"):
        shape_of(DENSE.format(extra="") + " param { lr_mult: 1 }", (2, 3, 4, 4))


DENSE_LAYER = 'layer {{ name: "db" {text} }}'


def test_dense_block_memory_train(memory_of):
    # x (1,3,2,2), T = 2, growth 2: C_0 = 3, C_1 = 5, output 7 channels; H*W = 4.
    # SetUp: filters (2,3,3,3) 16 + 216, (2,5,3,3) 16 + 360; scaler, bias, mean, var for
    # C_0 4 * (16 + 12), for C_1 4 * (16 + 20); the factor 4 + 4; the top's shape 16.
    got = memory_of(DENSE_LAYER.format(text=DENSE.format(extra="")), {"x": (1, 3, 2, 2)})["db"]
    assert got.init == 232 + 376 + 4 * 28 + 4 * 36 + 8 + 16
    # Forward: CPU_Initialization's 15 Blobs' shapes 15 * 16 = 240; per transition
    # batch_Mean + batch_Var + merged + x-hat + postBN + postReLU (4*C_i values each for the
    # images) + postConv (2 channels, 8 values): C_0 12+12+48*4+32 = 248, C_1 20+20+80*4+32
    # = 392; merged_conv[2] 7*4*4 = 112; the top 112
    assert got.fwd_alloc == 240 + 248 + 392 + 112 + 112
    # Backward: the top's diff 112, merged_conv[2]'s 112; transition 1: merged_conv[1] 80,
    # postConv 32, filter 360, postReLU 80, postBN 80, bias 20, scaler 20, x-hat 80,
    # batch_Var 20, batch_Mean 20 (792); transition 0 the same for C_0 (488); x's diff 48
    assert got.bwd_alloc == 112 + 112 + 792 + 488 + 48


def test_dense_block_memory_test_leaks_the_inference_statistics(memory_of):
    # TEST: shapes 240 as in TRAIN; merged_conv[0] 48; transition 0: BN_inf_Fwd's two new
    # (1,3,1,1) Blobs 2 * (16 + 12), postBN 48, postReLU 48, postConv 32, merged_conv[1] 80;
    # transition 1: 2 * (16 + 20), 80, 80, 32, merged_conv[2] 112; the top 112.  No x-hat,
    # no batch statistics, no Backward (without force_backward, a TEST net runs Forward only).
    got = memory_of(DENSE_LAYER.format(text=DENSE.format(extra="")), {"x": (1, 3, 2, 2)}, phase="TEST", force_backward=False)["db"]
    assert got.fwd_alloc == 240 + 48 + (56 + 48 + 48 + 32 + 80) + (72 + 80 + 80 + 32 + 112) + 112
    assert got.bwd_alloc == 0


def test_dense_block_bottleneck_memory_setup(memory_of):
    # use_BC, as train_test_BC_C10plus.prototxt: 3x3 filters (2,8,3,3) 2 * (16 + 576);
    # BN blobs for C_i as before 112 + 144; 1x1 filters (8,3,1,1) 16 + 96, (8,5,1,1) 16 + 160;
    # the bottleneck's BN blobs (1,8,1,1) 8 * (16 + 32); the factor 8; the top's shape 16
    got = memory_of(DENSE_LAYER.format(text=DENSE.format(extra="use_BC: true")), {"x": (1, 3, 2, 2)})["db"]
    assert got.init == 2 * 592 + 112 + 144 + 112 + 176 + 8 * 48 + 8 + 16


# Tongcheng/DN_CaffeScript train_test_BC_C10plus.prototxt, shrunk: Convolution -> DenseBlock
# (use_BC) -> BatchNorm -> Scale -> ReLU -> 1x1 Convolution -> AVE Pooling -> DenseBlock ->
# BatchNorm -> Scale -> ReLU -> global AVE Pooling -> InnerProduct -> SoftmaxWithLoss.
DENSE_NET = """name: "densenet_block"
layer { name: "Data1" type: "Input" top: "Data1" top: "Data2" input_param { shape { dim: 2 dim: 3 dim: 8 dim: 8 } shape { dim: 2 } } }
layer { name: "Convolution1" type: "Convolution" bottom: "Data1" top: "Convolution1" convolution_param { num_output: 4 bias_term: false pad: 1 kernel_size: 3 stride: 1 } }
layer { name: "DenseBlock1" type: "DenseBlock" bottom: "Convolution1" top: "DenseBlock1"
  denseblock_param { numTransition: 2 initChannel: 4 growthRate: 2 Filter_Filler { type: "msra" } BN_Scaler_Filler { type: "constant" value: 1 }
    BN_Bias_Filler { type: "constant" value: 0 } use_dropout: false dropout_amount: 0.2 use_BC: true BC_ultra_space_efficient: false } }
layer { name: "BatchNorm1" type: "BatchNorm" bottom: "DenseBlock1" top: "BatchNorm1" param { lr_mult: 0 decay_mult: 0 } param { lr_mult: 0 decay_mult: 0 } param { lr_mult: 0 decay_mult: 0 } }
layer { name: "Scale1" type: "Scale" bottom: "BatchNorm1" top: "BatchNorm1" scale_param { filler { value: 1 } bias_term: true bias_filler { value: 0 } } }
layer { name: "ReLU1" type: "ReLU" bottom: "BatchNorm1" top: "BatchNorm1" }
layer { name: "Convolution2" type: "Convolution" bottom: "BatchNorm1" top: "Convolution2" convolution_param { num_output: 8 bias_term: false pad: 0 kernel_size: 1 stride: 1 } }
layer { name: "Pooling1" type: "Pooling" bottom: "Convolution2" top: "Pooling1" pooling_param { pool: AVE kernel_size: 2 stride: 2 } }
layer { name: "DenseBlock2" type: "DenseBlock" bottom: "Pooling1" top: "DenseBlock2" denseblock_param { numTransition: 2 initChannel: 8 growthRate: 2 } }
layer { name: "BatchNorm2" type: "BatchNorm" bottom: "DenseBlock2" top: "BatchNorm2" param { lr_mult: 0 decay_mult: 0 } param { lr_mult: 0 decay_mult: 0 } param { lr_mult: 0 decay_mult: 0 } }
layer { name: "Scale2" type: "Scale" bottom: "BatchNorm2" top: "BatchNorm2" scale_param { bias_term: true } }
layer { name: "ReLU2" type: "ReLU" bottom: "BatchNorm2" top: "BatchNorm2" }
layer { name: "Pooling3" type: "Pooling" bottom: "BatchNorm2" top: "Pooling3" pooling_param { pool: AVE global_pooling: true } }
layer { name: "InnerProduct1" type: "InnerProduct" bottom: "Pooling3" top: "InnerProduct1" inner_product_param { num_output: 10 } }
layer { name: "SoftmaxWithLoss1" type: "SoftmaxWithLoss" bottom: "InnerProduct1" bottom: "Data2" top: "SoftmaxWithLoss1" }
"""


def test_optimize_plans_a_densenet_with_dense_blocks(tmp_path):
    check_plans(tmp_path, DENSE_NET)


# --- Transpose and Reverse (senlinuc/caffe_ocr transpose_layer.cpp, reverse_layer.cpp) -----

TRANSPOSE = 'type: "Transpose" bottom: "x" top: "t" transpose_param {{ {dims} }}'
CRNN_DIMS = "dim: 3 dim: 2 dim: 0 dim: 1"  # caffe_ocr's examples/ocr/resnet/deploy.prototxt


def test_transpose_shape(shape_of):
    # top axis i = bottom axis dim(i): N x C x H x W -> W x H x N x C
    assert shape_of(TRANSPOSE.format(dims=CRNN_DIMS), (2, 512, 1, 35)).tops == ((35, 1, 2, 512),)
    assert shape_of(TRANSPOSE.format(dims="dim: 1 dim: 0"), (3, 7)).tops == ((7, 3),)


def test_transpose_checks(shape_of):
    with pytest.raises(CaffememError, match="must be equal: transpose_param gives 2 dim"):
        shape_of(TRANSPOSE.format(dims="dim: 1 dim: 0"), (2, 3, 4))
    with pytest.raises(CaffememError, match="must name each axis"):
        shape_of(TRANSPOSE.format(dims="dim: 0 dim: 0"), (2, 3))
    with pytest.raises(CaffememError, match="in-place"):
        shape_of('type: "Transpose" bottom: "x" top: "x" transpose_param { dim: 1 dim: 0 }', (2, 3))


def test_transpose_memory(memory_of):
    # x (2,3,4,5): 120 values.  SetUp: t's shape 16; bottom_counts_, top_counts_,
    # forward_map_, backward_map_ (Blob<int> [4]): shape 4 + data 16 each = 80; buf_
    # [120 * 4] reshaped only (the GPU kernels write it): shape 4.  Forward: t 480.
    # Backward (force_backward): t's diff, read unwritten, 480; x's diff 480.
    got = memory_of(f'layer {{ name: "tr" {TRANSPOSE.format(dims=CRNN_DIMS)} }}', {"x": (2, 3, 4, 5)})["tr"]
    assert (got.init, got.fwd_alloc, got.bwd_alloc) == (16 + 80 + 4, 480, 960)


def test_transpose_writes_its_index_buffer_on_the_gpu(tmp_path):
    from caffemem.api.analyze import Options, analyze

    net = tmp_path / "t.prototxt"
    net.write_text('layer { name: "x" type: "Input" top: "x" input_param { shape { dim: 2 dim: 3 dim: 4 dim: 5 } } }\n' + f'layer {{ name: "tr" {TRANSPOSE.format(dims=CRNN_DIMS)} }}\n')
    device = analyze(str(net), Options(device="gpu", phase="TEST")).nets[0].device
    # On the card: buf_ [120 * 4] ints (Forward_gpu's mutable_gpu_data) 1920, and the device
    # copies of the three int blobs Forward_gpu reads (the counts, the forward map) 3 * 16.
    assert device.device_by_cause["layer_buffers"] == 1920 + 3 * 16
    # On the host: Reshape writes the four int blobs (4 + 16 each) and shapes buf_ (4).
    assert device.host_by_cause["layer_buffers"] == 4 * 20 + 4


def test_reverse_shape_and_checks(shape_of):
    assert shape_of('type: "Reverse" bottom: "x" top: "r" reverse_param { axis: 0 }', (35, 2, 256)).tops == ((35, 2, 256),)
    with pytest.raises(CaffememError, match="Axis must be less than the number of axis"):
        shape_of('type: "Reverse" bottom: "x" top: "r" reverse_param { axis: 3 }', (35, 2, 256))
    with pytest.raises(CaffememError, match="in-place"):
        shape_of('type: "Reverse" bottom: "x" top: "x"', (35, 2, 256))


def test_reverse_memory(memory_of):
    # x (2,3,4): 24 values.  SetUp: r's shape 12.  Forward: r 96.  Backward: x's diff 96,
    # then r's diff, read unwritten, 96.
    got = memory_of('layer { name: "rev" type: "Reverse" bottom: "x" top: "r" }', {"x": (2, 3, 4)})["rev"]
    assert (got.init, got.fwd_alloc, got.bwd_alloc) == (12, 96, 192)


# The tail of senlinuc/caffe_ocr examples/ocr/resnet/deploy.prototxt (81642f61), its LSTMs
# left out (CRNN below has them): pool5 features -> W x H x N x C -> a sequence
# and its reverse, joined, scored per step.
OCR_TAIL = """name: "ocr-tail"
force_backward: true
layer { name: "pool5_ave" type: "Input" top: "pool5_ave" input_param { shape { dim: 2 dim: 32 dim: 1 dim: 12 } } }
layer { name: "pool5_ave_transpose" type: "Transpose" bottom: "pool5_ave" top: "pool5_ave_transpose" transpose_param { dim: 3 dim: 2 dim: 0 dim: 1 } }
layer { name: "blstm_input" type: "Reshape" bottom: "pool5_ave_transpose" top: "blstm_input" reshape_param { shape { dim: -1 } axis: 1 num_axes: 2 } }
layer { name: "lstm1-reverse1" type: "Reverse" bottom: "blstm_input" top: "rlstm1_input" reverse_param { axis: 0 } }
layer { name: "lstm1-reverse2" type: "Reverse" bottom: "rlstm1_input" top: "rlstm1" reverse_param { axis: 0 } }
layer { name: "blstm1" type: "Concat" bottom: "blstm_input" bottom: "rlstm1" top: "blstm1" concat_param { axis: 2 } }
layer { name: "fc1x" type: "InnerProduct" bottom: "blstm1" top: "fc1x" inner_product_param { num_output: 10 axis: 2 } }
"""


def test_the_ocr_tail_shapes_and_plans(shape_of, tmp_path):
    from caffemem.api.analyze import Options, analyze

    net = tmp_path / "ocr_tail.prototxt"
    net.write_text(OCR_TAIL)
    blobs = analyze(str(net), Options(phase="TRAIN")).nets[0].blobs
    # 2 x 32 x 1 x 12 -> 12 x 1 x 2 x 32 -> T=12, N=2, 32 -> both directions: 64 -> 10 classes
    assert (blobs["pool5_ave_transpose"], blobs["blstm_input"], blobs["blstm1"], blobs["fc1x"]) == ((12, 1, 2, 32), (12, 2, 32), (12, 2, 64), (12, 2, 10))
    check_plans(tmp_path, OCR_TAIL)


# --- senlinuc/caffe_ocr's Lstm, CTCGreedyDecoder, WarpCTCLoss (81642f61) ---------------------

LSTM = 'type: "Lstm" bottom: "x" top: "h" lstm_param {{ num_output: {h} }}'


def test_lstm_shapes_and_parameters(shape_of):
    # lstm_layer_Junhyuk.cpp: T x N x I -> T x N x H; weights [4H, I], [4H, H], bias [4H]
    got = shape_of(LSTM.format(h=256), (35, 2, 512))
    assert got.tops == ((35, 2, 256),) and got.params == ((1024, 512), (1024, 256), (1024,))
    # a second bottom (continuation flags) must keep its count on axis 0
    assert shape_of('type: "Lstm" bottom: "x" bottom: "c" top: "h" lstm_param { num_output: 4 }', (5, 2, 3), (10,)).tops == ((5, 2, 4),)
    with pytest.raises(CaffememError, match=r"CHECK_EQ\(num, count\)"):
        shape_of('type: "Lstm" bottom: "x" bottom: "c" top: "h" lstm_param { num_output: 4 }', (5, 2, 3), (5, 2))
    with pytest.raises(CaffememError, match="3 or 4 axes"):
        shape_of(LSTM.format(h=4), (10, 3))
    with pytest.raises(CaffememError, match="num_output must be positive"):
        shape_of('type: "Lstm" bottom: "x" top: "h"', (5, 2, 3))


def test_lstm_memory(memory_of):
    # x (T=3, N=2, I=4), H=5.  SetUp: h's shape 12; the weights (20,4) 8 + 320, (20,5) 8 + 400
    # and bias (20) 4 + 80 (filled); c_0_, h_0_, c_T_, h_T_, h_to_h_ (2,5) shapes 5 * 8;
    # h_to_gate_ (2,4,5) 12; pre_gate_, gate_ (3,2,4,5) 16 each; cell_ 12; top_ 12 (its data
    # and diff are h's); bias_multiplier_ (6) 4 + 24 of ones: 968.
    # Forward: h 120, pre_gate_ 480, gate_ 480, cell_ 120, h_to_gate_ 160, c_0_, h_0_ 40 each,
    # c_T_, h_T_ 40 each: 1520.  Backward: h's diff 120, pre_gate_'s and gate_'s diffs 480
    # each, cell_'s 120, c_T_'s diff read 40, h_0_'s and c_0_'s diffs 40 each, h_to_h_ 40, the
    # three parameter diffs 800, x's diff 96: 2256.
    body = 'layer { name: "lstm" type: "Lstm" bottom: "x" top: "h" lstm_param { num_output: 5 weight_filler { type: "gaussian" } } }'
    got = memory_of(body, {"x": (3, 2, 4)})["lstm"]
    assert (got.init, got.fwd_alloc, got.bwd_alloc) == (968, 1520, 2256)


def test_ctc_greedy_decoder_shapes(shape_of):
    # ctc_decoder_layer.cpp LayerSetUp/Reshape: scores alone -> sequences (N, T, 1, 1);
    # scores and label -> accuracy (1, 2, 1, 1)
    assert shape_of('type: "CTCGreedyDecoder" bottom: "x" top: "seq"', (35, 2, 5990)).tops == ((2, 35, 1, 1),)
    assert shape_of('type: "CTCGreedyDecoder" bottom: "x" bottom: "l" top: "acc"', (35, 2, 5990), (2, 10)).tops == ((1, 2, 1, 1),)
    with pytest.raises(CaffememError, match="shapes only"):
        shape_of('type: "CTCGreedyDecoder" bottom: "x" top: "seq" top: "score"', (35, 2, 5990))
    with pytest.raises(CaffememError, match="3 or 4 axes"):
        shape_of('type: "CTCGreedyDecoder" bottom: "x" top: "seq"', (35, 2, 1, 5990, 1))


def test_ctc_greedy_decoder_memory(memory_of):
    # TEST, no .cu: Forward reads both bottoms on the host and writes acc (1,2,1,1): shape 16, 8
    got = memory_of('layer { name: "acc" type: "CTCGreedyDecoder" bottom: "x" bottom: "t" top: "acc" }', {"x": (4, 2, 7), "t": (2, 5)}, phase="TEST", force_backward=False)["acc"]
    assert (got.init, got.fwd_alloc, got.bwd_alloc) == (16, 8, 0)


def test_warp_ctc_loss_shapes(shape_of):
    assert shape_of('type: "WarpCTCLoss" bottom: "x" bottom: "l" top: "loss"', (35, 2, 5990), (2, 10)).tops == ((),)
    with pytest.raises(CaffememError, match="axis 0"):
        shape_of('type: "WarpCTCLoss" bottom: "x" bottom: "l" top: "loss"', (35, 2, 5990), (3, 10))
    with pytest.raises(CaffememError, match="width 1"):
        shape_of('type: "WarpCTCLoss" bottom: "x" bottom: "l" top: "loss"', (35, 2, 5990, 2), (2, 10))


def test_warp_ctc_loss_memory_counts_the_workspace_at_the_longest_label(memory_report):
    # x (T=4, N=2, C=7), label (2, 5): S = 2*5 + 1 = 11.  ctcpp_entrypoint.cpp, CPU: per item
    # C + S*T + S + 3*S = 7 + 44 + 11 + 33 = 95, times N = 190, plus C*T*N = 56: 246 * 4 = 984.
    # SetUp: the loss weight in the top's diff, 4.  Forward: x's diff (warp-ctc writes the
    # gradient there) 224, the workspace 984, the loss 4.  Backward: nothing.
    report = memory_report('layer { name: "loss" type: "WarpCTCLoss" bottom: "x" bottom: "t" }', {"x": (4, 2, 7), "t": (2, 5)})
    got = {layer.name: layer for layer in report.layers}["loss"]
    assert (got.init, got.fwd_alloc, got.bwd_alloc) == (4, 224 + 984 + 4, 0)
    assert any("workspace (984 B)" in note for note in report.notes)


# senlinuc/caffe_ocr examples/ocr/resnet/ResNet-train_val.prototxt's CRNN head (81642f61), cut
# down: the features become a T x N x C sequence, a bidirectional Lstm (the backward one
# between two Reverses), joined, scored per step, WarpCTCLoss in both phases, the greedy
# decoder's accuracy in TEST.
CRNN = """name: "ResNet-18-train"
layer { name: "data" type: "Input" top: "pool5_ave" top: "label" input_param { shape { dim: 2 dim: 8 dim: 1 dim: 6 } shape { dim: 2 dim: 4 } } }
layer { name: "pool5_ave_transpose" type: "Transpose" bottom: "pool5_ave" top: "pool5_ave_transpose" transpose_param { dim: 3 dim: 2 dim: 0 dim: 1 } }
layer { name: "blstm_input" type: "Reshape" bottom: "pool5_ave_transpose" top: "blstm_input" reshape_param { shape { dim: -1 } axis: 1 num_axes: 2 } }
layer { name: "lstm1" type: "Lstm" bottom: "blstm_input" top: "lstm1" lstm_param { num_output: 5 weight_filler { type: "gaussian" std: 0.1 } bias_filler { type: "constant" } } }
layer { name: "lstm1-reverse1" type: "Reverse" bottom: "blstm_input" top: "rlstm1_input" reverse_param { axis: 0 } }
layer { name: "rlstm1" type: "Lstm" bottom: "rlstm1_input" top: "rlstm1-output" lstm_param { num_output: 5 weight_filler { type: "gaussian" std: 0.1 } bias_filler { type: "constant" } } }
layer { name: "lstm1-reverse2" type: "Reverse" bottom: "rlstm1-output" top: "rlstm1" reverse_param { axis: 0 } }
layer { name: "blstm1" type: "Concat" bottom: "lstm1" bottom: "rlstm1" top: "blstm1" concat_param { axis: 2 } }
layer { name: "fc1x" type: "InnerProduct" bottom: "blstm1" top: "fc1x" inner_product_param { axis: 2 num_output: 9 weight_filler { type: "xavier" } } }
layer { name: "ctcloss" type: "WarpCTCLoss" bottom: "fc1x" bottom: "label" top: "ctcloss" loss_weight: 1 }
layer { name: "acc" type: "CTCGreedyDecoder" bottom: "fc1x" bottom: "label" top: "acc" include { phase: TEST } }
"""


def test_the_crnn_shapes_and_plans(tmp_path):
    from caffemem.api.analyze import Options, analyze

    net = tmp_path / "crnn.prototxt"
    net.write_text(CRNN)
    train = analyze(str(net), Options(phase="TRAIN")).nets[0].blobs
    # 2 x 8 x 1 x 6 -> 6 x 1 x 2 x 8 -> T=6, N=2, 8 -> Lstm 5 each way -> 10 -> 9 classes
    assert (train["blstm_input"], train["lstm1"], train["blstm1"], train["fc1x"], train["ctcloss"]) == ((6, 2, 8), (6, 2, 5), (6, 2, 10), (6, 2, 9), ())
    assert analyze(str(net), Options(phase="TEST")).nets[0].blobs["acc"] == (1, 2, 1, 1)
    check_plans(tmp_path, CRNN)

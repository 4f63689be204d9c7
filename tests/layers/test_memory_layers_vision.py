"""Memory rules of the vision families (caffemem.layers.vision and caffemem.layers.fork_vision).

Each test runs a small hand-written net through the whole pipeline and checks the bytes
one layer makes Caffe allocate: ``init`` (its SetUp, top shape buffers included),
``fwd_alloc`` and ``bwd_alloc``.  The expected numbers are worked out by hand from the
Caffe source named in the comment (float32: every value, int or float, is 4 bytes; a
Blob's shape buffer is 4 bytes per axis).  Convolution, Deconvolution, Pooling (MAX, AVE),
LRN ACROSS_CHANNELS and Crop are also checked layer by layer against real Caffe in
test_groundtruth_memory.py; the tests here cover the rest (SPP, Im2col, LRN
WITHIN_CHANNEL, STOCHASTIC pooling, the fork layers, the cuDNN classes) and the flags
that ground truth exercises only incidentally.
"""

from __future__ import annotations

from caffemem.api.analyze import Options, analyze

MIB = 1024 * 1024


def data(name: str, *dims: int) -> str:
    shape = " ".join(f"dim: {d}" for d in dims)
    return f'layer {{ name: "{name}" type: "Input" top: "{name}" input_param {{ shape {{ {shape} }} }} }}\n'


def run(tmp_path, text: str, phase: str = "TRAIN", engine: str = "caffe"):
    path = tmp_path / "net.prototxt"
    path.write_text(text)
    return analyze(str(path), Options(phase=phase, engine=engine)).nets[0]


def layer_bytes(tmp_path, text: str, name: str, **options):
    """(init, fwd_alloc, bwd_alloc) of one layer."""
    found = {l.name: l for l in run(tmp_path, text, **options).memory.layers}[name]
    return found.init, found.fwd_alloc, found.bwd_alloc


FORCE = "force_backward: true\n"
CONV = 'layer { name: "conv" type: "Convolution" bottom: "x" top: "y" %s convolution_param { %s } }\n'


# --- Convolution / Deconvolution (base_conv_layer.cpp, conv_layer.cpp, deconv_layer.cpp) ----


def test_convolution_setup_holds_geometry_blobs_params_and_bias_multiplier(tmp_path):
    # x (2,3,5,5), 4 outputs, kernel 3 -> y (2,4,3,3).  LayerSetUp: kernel_shape_, stride_,
    # pad_, dilation_ Blob<int>[2] written: 4 * (4 + 8) = 48; weight (4,3,3,3): 16 + 432;
    # bias (4): 4 + 16.  Reshape: top shape 16, conv_input_shape_ [3]: 4 + 12,
    # col_buffer_ [27,3,3] shape only: 12, bias_multiplier_ [9] filled: 4 + 36.
    text = data("x", 2, 3, 5, 5) + CONV % ("", "num_output: 4 kernel_size: 3")
    init, fwd, _ = layer_bytes(tmp_path, text, "conv", phase="TEST")
    assert init == 48 + (16 + 432) + (4 + 16) + 16 + 16 + 12 + (4 + 36)
    # Forward_cpu: the top 2*4*9*4 = 288, forward_cpu_gemm's col buffer (one image) 27*9*4 = 972
    assert fwd == 288 + 972


def test_convolution_backward_writes_bottom_diff_without_propagate_down(tmp_path):
    # conv_layer.cpp Backward_cpu takes bottom[i]->mutable_cpu_diff() before testing
    # propagate_down: the Input blob's diff (2*3*4*4*4 = 384) is allocated though it needs
    # none.  1x1 kernel: weight_cpu_gemm skips im2col, backward_cpu_gemm is not called, so no
    # col buffer.  Weight diff 2*3*4 = 24, bias diff 8; the top's diff came with loss_weight.
    text = data("x", 2, 3, 4, 4) + CONV % ("loss_weight: 1", "num_output: 2 kernel_size: 1")
    net = run(tmp_path, text)
    conv = net.memory.layers[1]
    assert conv.propagate_down == (False,)
    assert (conv.fwd_alloc, conv.bwd_alloc) == (2 * 2 * 16 * 4, 24 + 8 + 384)


def test_one_by_one_convolution_allocates_its_col_buffer_in_backward(tmp_path):
    # base_conv_layer.cpp backward_cpu_gemm takes col_buffer_.mutable_cpu_data() even for a
    # 1x1 kernel: with propagate_down the col buffer [3,4,4] (192 bytes) first appears in
    # Backward.  bwd = weight diff 24 + bias diff 8 + top diff 256 (no consumer) + bottom
    # diff 384 + col 192.
    text = FORCE + data("x", 2, 3, 4, 4) + CONV % ("", "num_output: 2 kernel_size: 1")
    assert layer_bytes(tmp_path, text, "conv")[1:] == (256, 24 + 8 + 256 + 384 + 192)


def test_convolution_without_bias_has_no_multiplier(tmp_path):
    # base_conv_layer.cpp Reshape sets bias_multiplier_ up only with bias_term.
    text = data("x", 2, 3, 5, 5) + CONV % ("", "num_output: 4 kernel_size: 3 bias_term: false")
    assert layer_bytes(tmp_path, text, "conv", phase="TEST")[0] == 48 + (16 + 432) + 16 + 16 + 12


def test_convolution_with_a_zero_batch_never_touches_its_col_buffer(tmp_path):
    # Forward_cpu's gemm loop runs num_ = 0 times: only the top (0 bytes) is touched.
    text = data("x", 0, 3, 5, 5) + CONV % ("", "num_output: 4 kernel_size: 3")
    assert layer_bytes(tmp_path, text, "conv", phase="TEST")[1] == 0


def test_deconvolution_col_buffer_is_allocated_in_forward_even_for_1x1(tmp_path):
    # deconv_layer.cpp Forward_cpu calls backward_cpu_gemm, which takes the col buffer
    # [kernel_dim * group = 4, 3, 3] whatever the kernel: 36*4 = 144, plus the top 144.
    # Init: weight (2,4,1,1) 16 + 32, bias 4 + 16, conv_input_shape_ 16, col shape 12,
    # bias_multiplier_ [9] 4 + 36, geometry blobs 48, top shape 16.
    text = data("x", 1, 2, 3, 3) + CONV.replace("Convolution", "Deconvolution") % ("", "num_output: 4 kernel_size: 1")
    init, fwd, _ = layer_bytes(tmp_path, text, "conv", phase="TEST")
    assert init == 48 + (16 + 32) + (4 + 16) + 16 + 12 + (4 + 36) + 16
    assert fwd == 144 + 144


def test_strided_deconvolution_col_buffer_follows_the_bottom(tmp_path):
    # Deconvolution: col_buffer_ [(4/1)*2*2 = 16, 3, 3] (the bottom's spatial dims): 576;
    # top (1,4,6,6): 576.
    text = data("x", 1, 2, 3, 3) + CONV.replace("Convolution", "Deconvolution") % ("", "num_output: 4 kernel_size: 2 stride: 2")
    assert layer_bytes(tmp_path, text, "conv", phase="TEST")[1] == 576 + 576


# --- Pooling (pooling_layer.cpp, pooling_layer.cu) ---------------------------------------

POOL = 'layer { name: "pool" type: "Pooling" bottom: "x" %s pooling_param { %s } }\n'


def test_max_pooling_keeps_an_int_argmax_blob(tmp_path):
    # Reshape: top shape 16 + max_idx_ shape 16; Forward: top and max_idx_, 2*2*2*2 values each.
    text = data("x", 2, 2, 4, 4) + POOL % ('top: "y"', "pool: MAX kernel_size: 2 stride: 2")
    assert layer_bytes(tmp_path, text, "pool", phase="TEST")[:2] == (32, 64 + 64)


def test_max_pooling_with_a_mask_top_uses_it_instead_of_max_idx(tmp_path):
    # Reshape: two top shapes, no max_idx_; Forward writes both tops (64 bytes each).
    text = data("x", 2, 2, 4, 4) + POOL % ('top: "y" top: "mask"', "pool: MAX kernel_size: 2 stride: 2")
    assert layer_bytes(tmp_path, text, "pool", phase="TEST")[:2] == (32, 128)


def test_stochastic_pooling_draws_rand_idx_in_train_only(tmp_path):
    # Forward_cpu is NOT_IMPLEMENTED; pooling_layer.cu writes rand_idx_ (a Dtype blob shaped
    # like the top, shape buffer at Reshape) only when phase_ == TRAIN.
    text = data("x", 2, 2, 4, 4) + POOL % ('top: "y"', "pool: STOCHASTIC kernel_size: 2 stride: 2")
    assert layer_bytes(tmp_path, text, "pool", phase="TEST")[:2] == (32, 64)
    assert layer_bytes(tmp_path, text, "pool", phase="TRAIN")[:2] == (32, 128)


def test_pooling_backward_needs_propagate_down(tmp_path):
    # Backward_cpu returns at once without propagate_down[0]: here the pooled blob is the
    # Input's, so nothing; with force_backward: the bottom's diff 2*2*4*4*4 = 256 (the top's
    # came with loss_weight).
    text = data("x", 2, 2, 4, 4) + POOL % ('top: "y" loss_weight: 1', "pool: AVE kernel_size: 2 stride: 2")
    net = run(tmp_path, text)
    assert not net.memory.layers[1].need_backward
    assert layer_bytes(tmp_path, FORCE + text, "pool")[2] == 256


# --- SPP (spp_layer.cpp) --------------------------------------------------------------------

SPP = 'layer { name: "spp" type: "SPP" bottom: "x" top: "y" spp_param { pyramid_height: %d pool: %s } }\n'


def test_spp_with_one_level_is_a_pooling_layer(tmp_path):
    # One level over 4x4: kernel 4 -> top (1,2,1,1).  The inner PoolingLayer: top shape 16 +
    # max_idx_ shape 16 (Reshape rebuilds the layer: the old shape buffer is freed).
    # Forward: top 8 + max_idx_ 8.
    text = data("x", 1, 2, 4, 4) + SPP % (1, "MAX")
    assert layer_bytes(tmp_path, text, "spp", phase="TEST")[:2] == (32, 16)


def test_spp_pyramid_runs_an_inner_split_pool_flatten_concat_net(tmp_path):
    # Levels over 4x4: (1,2,1,1) and (1,2,2,2); top (1,10).
    # Init: top 8; split tops 2*16; per level pooled shape 16 + max_idx_ 16 + flattened 8.
    # Forward: Split and Flatten share data; pools write 8+8 and 32+32; Concat the top 40.
    # Backward: top diff 40 (no consumer), Concat writes the flattened diffs 8 + 32, the
    # pooled blobs share them, the pools write the split tops' own diffs 2*128, the Split
    # sums them into the bottom's diff 128.
    text = FORCE + data("x", 1, 2, 4, 4) + SPP % (2, "MAX")
    assert layer_bytes(tmp_path, text, "spp") == (8 + 32 + 2 * 40, 16 + 64 + 40, 40 + 40 + 256 + 128)


# --- Im2col (im2col_layer.cpp) -------------------------------------------------------------


def test_im2col_holds_geometry_blobs_and_ignores_propagate_down(tmp_path):
    # LayerSetUp: four Blob<int>[2] written: 48; top (1,2*3*3,2,2) shape 16, data 72*4.
    # Backward_cpu writes the bottom's diff without testing propagate_down: 2*4*4*4 = 128
    # although this layer was told propagate_down: false (its top's diff came with loss_weight).
    text = data("x", 1, 2, 4, 4)
    text += 'layer { name: "c" type: "Convolution" bottom: "x" top: "f" convolution_param { num_output: 2 kernel_size: 1 } }\n'
    text += 'layer { name: "i2c" type: "Im2col" bottom: "f" top: "cols" loss_weight: 1 propagate_down: false convolution_param { kernel_size: 3 } }\n'
    net = run(tmp_path, text)
    im2col = net.memory.layers[2]
    assert (im2col.need_backward, im2col.propagate_down) == (True, (False,))
    assert (im2col.init - 72 * 4, im2col.fwd_alloc, im2col.bwd_alloc) == (48 + 16, 72 * 4, 128)


# --- LRN (lrn_layer.cpp) ---------------------------------------------------------------------

LRN = 'layer { name: "lrn" type: "LRN" bottom: "x" top: "y" lrn_param { %s } }\n'


def test_lrn_across_channels_keeps_scale(tmp_path):
    # Reshape: top and scale_ shapes (16 each).  Forward: top + scale_ (72 bytes each); the
    # padded_square temporary is freed before Forward returns.  Backward, no propagate_down
    # test: top diff + bottom diff (padded_ratio, accum_ratio are temporaries too).
    text = FORCE + data("x", 1, 2, 3, 3) + LRN % "local_size: 3"
    assert layer_bytes(tmp_path, text, "lrn") == (32, 144, 144)


def test_lrn_within_channel_runs_an_inner_net(tmp_path):
    # Inner Split -> Power -> Pooling(AVE, k 3, pad 1) -> Power -> Eltwise PROD on (1,2,3,3).
    # Init: top 16 + five inner blobs' shapes 5*16.  Forward: square_output_, pool_output_,
    # power_output_, the top: 4*72 (the split tops share the bottom's data).  Backward: top
    # diff, then product_input_, power_output_, pool_output_, square_output_, square_input_
    # diffs and the bottom's: 7*72.
    text = FORCE + data("x", 1, 2, 3, 3) + LRN % "local_size: 3 norm_region: WITHIN_CHANNEL"
    assert layer_bytes(tmp_path, text, "lrn") == (96, 4 * 72, 7 * 72)


# --- Crop (crop_layer.cpp) -------------------------------------------------------------------


def test_crop_writes_its_int_blobs_and_the_bottom_diff_unconditionally(tmp_path):
    # Reshape: offsets, src_strides_, dest_strides_ Blob<int>[4] written: 3*(4+16) = 60; top
    # shape 16.  Forward: top (1,2,3,3) 72.  Backward_cpu takes bottom[0]->mutable_cpu_diff()
    # before testing propagate_down: 1*2*5*5*4 = 200 though propagate_down is false.
    text = data("x", 1, 2, 5, 5) + data("ref", 1, 2, 3, 3)
    text += 'layer { name: "c" type: "Convolution" bottom: "x" top: "f" convolution_param { num_output: 2 kernel_size: 1 } }\n'
    text += 'layer { name: "crop" type: "Crop" bottom: "f" bottom: "ref" top: "y" loss_weight: 1 propagate_down: false propagate_down: false crop_param { axis: 2 } }\n'
    crop = run(tmp_path, text).memory.layers[3]
    assert crop.propagate_down == (False, False)
    assert (crop.init - 72, crop.fwd_alloc, crop.bwd_alloc) == (76, 72, 200)


# --- fork layers -----------------------------------------------------------------------------


def test_convolution3d_bias_multiplier_is_a_bare_synced_memory(tmp_path):
    # C3D convolution3d_layer.cpp LayerSetUp: col_buffer_ (1,36,3,3,3) shape 20; top shape 20;
    # weight (3,2,2,3,3) 20 + 432; bias (1,1,1,1,3) 20 + 12; bias_multiplier_ a SyncedMemory
    # of N_ = 27 values written at once: 108 (no shape buffer).
    # Forward: top 81*4 + col buffer 36*27*4.
    text = data("x", 1, 2, 4, 5, 5)
    text += 'layer { name: "c3d" type: "Convolution3D" bottom: "x" top: "y" loss_weight: 1 convolution3d_param { num_output: 3 kernel_size: 3 kernel_depth: 2 } }\n'
    init, fwd, bwd = layer_bytes(tmp_path, text, "c3d")
    assert init == 20 + 20 + (20 + 432) + (20 + 12) + 108 + 324  # + the loss-weight top diff
    assert fwd == 324 + 3888
    # Backward_cpu ignores the flags: weight diff 432, bottom diff 800 (propagate_down is
    # false), col buffer diff 3888, bias diff 12.
    assert bwd == 432 + 800 + 3888 + 12


def test_pooling3d_backward_needs_propagate_down_and_has_no_argmax(tmp_path):
    # pool3d_layer.cpp: top (1,2,2,2,2) shape 20; Forward the top 64; Backward (force_backward)
    # top diff 64 + bottom diff 512.  STOCHASTIC adds rand_idx_'s shape (20) only.
    params = "kernel_size: 2 kernel_depth: 2 stride: 2 temporal_stride: 2"
    layer = 'layer { name: "p3" type: "Pooling3D" bottom: "x" top: "y" pooling3d_param { %s } }\n'
    text = FORCE + data("x", 1, 2, 4, 4, 4) + layer % params
    assert layer_bytes(tmp_path, text, "p3") == (20, 64, 64 + 512)
    assert layer_bytes(tmp_path, text.replace(params, params + " pool: STOCHASTIC"), "p3", phase="TEST")[:2] == (40, 64)


def test_interp_is_elementwise_in_its_touches(tmp_path):
    # PSPNet interp_layer.cpp: zoom 2 on 3x3 -> 5x5.  Forward the top 100; Backward (force)
    # the top diff 100 and the bottom diff 36.
    text = FORCE + data("x", 1, 1, 3, 3) + 'layer { name: "i" type: "Interp" bottom: "x" top: "y" interp_param { zoom_factor: 2 } }\n'
    assert layer_bytes(tmp_path, text, "i") == (16, 100, 136)


def test_upsample_never_gives_the_mask_a_diff(tmp_path):
    # segnet upsample_layer.cpp: top (1,1,4,4) 64; Backward (force_backward, so
    # propagate_down is true for the mask too) writes only bottom 0's diff: 64 + 16.
    text = FORCE + data("x", 1, 1, 2, 2) + data("mask", 1, 1, 2, 2)
    text += 'layer { name: "up" type: "Upsample" bottom: "x" bottom: "mask" top: "y" upsample_param { scale: 2 } }\n'
    up = run(tmp_path, text).memory.layers[2]
    assert up.propagate_down == (True, True)
    assert (up.init, up.fwd_alloc, up.bwd_alloc) == (16, 64, 80)


ROI = data("feat", 1, 8, 4, 4) + data("rois", 3, 5)


def test_roi_pooling_keeps_max_idx_and_leaves_the_rois_alone(tmp_path):
    # fast-rcnn roi_pooling_layer.cpp: top and max_idx_ (3,8,2,2) shapes 16 each; Forward
    # both, 96*4 each.  Backward (roi_pooling_layer.cu; CPU is NOT_IMPLEMENTED): top diff 384
    # + feature diff 8*16*4 = 512; the rois get none.
    text = FORCE + ROI + 'layer { name: "roi" type: "ROIPooling" bottom: "feat" bottom: "rois" top: "y" roi_pooling_param { pooled_h: 2 pooled_w: 2 } }\n'
    assert layer_bytes(tmp_path, text, "roi") == (32, 768, 384 + 512)


def test_psroi_pooling_backward_zeroes_the_rois_diff(tmp_path):
    # R-FCN psroi_pooling_layer.cu (no CPU code): top and mapping_channel_ (3,2,2,2) 96 bytes
    # each; Backward: top diff 96 + feature diff 512 + the rois' diff 3*5*4 = 60.
    layer = 'layer { name: "ps" type: "PSROIPooling" bottom: "feat" bottom: "rois" top: "y" psroi_pooling_param { spatial_scale: 0.0625 output_dim: 2 group_size: 2 } }\n'
    assert layer_bytes(tmp_path, FORCE + ROI + layer, "ps") == (32, 192, 96 + 512 + 60)


# --- cuDNN engine (cudnn_*_layer.cpp / .cu) ----------------------------------------------------

WORKSPACE = 3 * 8 * MIB  # CUDNN_STREAMS_PER_GROUP blocks of workspace_limit_bytes per group


def test_cudnn_convolution_has_a_workspace_instead_of_a_col_buffer(tmp_path):
    # CuDNNConvolutionLayer runs the base LayerSetUp/Reshape (same 600 bytes as Caffe's, the
    # col buffer's shape included) and cudaMallocs at most 3 * group * 8 MiB; Forward writes
    # only the top.  Backward writes the bottom's diff only with propagate_down.
    text = data("x", 2, 3, 5, 5) + CONV % ("loss_weight: 1", "num_output: 4 kernel_size: 3 group: 1")
    net = run(tmp_path, text, engine="cudnn")
    conv = net.memory.layers[1]
    assert (conv.init, conv.fwd_alloc, conv.bwd_alloc) == (600 + 288 + WORKSPACE, 288, 432 + 16)
    assert conv.buffers["cudnn_workspace"] == WORKSPACE
    assert any("upper bound" in note for note in net.notes)


def test_cudnn_workspace_grows_with_group(tmp_path):
    text = data("x", 1, 4, 5, 5) + CONV % ("", "num_output: 4 kernel_size: 3 group: 2")
    conv = run(tmp_path, text, phase="TEST", engine="cudnn").memory.layers[1]
    assert conv.buffers["cudnn_workspace"] == 2 * WORKSPACE


def test_layer_engine_field_wins_over_the_build(tmp_path):
    # layer_factory.cpp: engine CUDNN asks for the cuDNN class, CAFFE for Caffe's, whatever the build's default.
    cudnn = data("x", 2, 3, 5, 5) + CONV % ("", "num_output: 4 kernel_size: 3 engine: CUDNN")
    assert layer_bytes(tmp_path, cudnn, "conv", phase="TEST")[1] == 288
    caffe = data("x", 2, 3, 5, 5) + CONV % ("", "num_output: 4 kernel_size: 3 engine: CAFFE")
    assert layer_bytes(tmp_path, caffe, "conv", phase="TEST", engine="cudnn")[1] == 288 + 972


def test_dilated_convolution_stays_caffe_under_cudnn(tmp_path):
    # GetConvolutionLayer: DEFAULT with dilation > 1 builds ConvolutionLayer: col buffer
    # [27,1,1] in Forward, no workspace, no note.  engine: CUDNN with dilation is a fatal
    # error in Caffe: counted as Caffe's, with a note.
    text = data("x", 1, 3, 5, 5) + CONV % ("", "num_output: 4 kernel_size: 3 dilation: 2")
    net = run(tmp_path, text, phase="TEST", engine="cudnn")
    assert (net.memory.layers[1].fwd_alloc, net.notes) == (16 + 108, ())
    explicit = run(tmp_path, text.replace("dilation: 2", "dilation: 2 engine: CUDNN"), phase="TEST")
    assert explicit.memory.layers[1].fwd_alloc == 16 + 108
    assert any("refuses" in note for note in explicit.notes)


def test_cudnn_deconvolution_forward_has_no_col_buffer(tmp_path):
    text = data("x", 1, 2, 3, 3) + CONV.replace("Convolution", "Deconvolution") % ("", "num_output: 4 kernel_size: 1")
    assert layer_bytes(tmp_path, text, "conv", phase="TEST", engine="cudnn")[1] == 144


def test_cudnn_build_keeps_caffe_max_pooling(tmp_path):
    # GetPoolingLayer builds Caffe's PoolingLayer for MAX even under cuDNN: max_idx_ stays.
    text = data("x", 2, 2, 4, 4) + POOL % ('top: "y"', "pool: MAX kernel_size: 2 stride: 2")
    assert layer_bytes(tmp_path, text, "pool", phase="TEST", engine="cudnn")[:2] == (32, 128)


def test_cudnn_ave_pooling_allocates_what_caffe_does(tmp_path):
    # CuDNNPoolingLayer: top in Forward; Backward reads both data (already there), writes the bottom's diff.
    text = FORCE + data("x", 2, 2, 4, 4) + POOL % ('top: "y"', "pool: AVE kernel_size: 2 stride: 2")
    assert layer_bytes(tmp_path, text, "pool", engine="cudnn") == (16, 64, 64 + 256)


def test_cudnn_lrn_leaves_scale_unallocated(tmp_path):
    # CuDNNLRNLayer: LRNLayer::Reshape still shapes scale_ (16), Forward writes only the top.
    # local_size above CUDNN_LRN_MAX_N (16) keeps Caffe's LRNLayer.
    text = data("x", 1, 2, 3, 3) + LRN % "local_size: 3"
    assert layer_bytes(tmp_path, text, "lrn", phase="TEST", engine="cudnn")[:2] == (32, 72)
    wide = data("x", 1, 2, 3, 3) + LRN % "local_size: 17"
    assert layer_bytes(tmp_path, wide, "lrn", phase="TEST", engine="cudnn")[:2] == (32, 144)


def test_cudnn_lcn_cudamallocs_two_temporaries(tmp_path):
    # CuDNNLCNLayer: LRNLayer::LayerSetUp builds the inner net (shapes: 96 with the top),
    # Reshape cudaMallocs tempData1/2 of the bottom's size (72 each); Forward writes the top.
    text = data("x", 1, 2, 3, 3) + LRN % "local_size: 3 norm_region: WITHIN_CHANNEL"
    assert layer_bytes(tmp_path, text, "lrn", phase="TEST", engine="cudnn")[:2] == (96 + 144, 72)

"""C3D's video layers (caffemem/layers/fork_vision.py, the VideoData rule of layers/forks.py)
and C3D-v1.0's V1 nets (passes/upgrade.py), worked out by hand from facebook/C3D@71336a22.

The nets mirror C3D's own files, cut down to a few frames of a few pixels:
C3D-v1.0/examples/c3d_train_ucf101/conv3d_ucf101_train.prototxt (V1 ``layers``,
VIDEO_DATA + CONVOLUTION3D + POOLING3D), C3D-v1.0/examples/v2v/ucf101_optical_flow/
deconv3d_ucf101_brox.prototxt (DECONVOLUTION3D) and C3D-v1.1/examples/c3d_ucf101_training/
train_simple.prototxt (V2 VideoData, Convolution3D, Pooling3D).

Bytes: float32, 4 bytes a value; a Blob's shape buffer is 4 bytes an axis.  ``init`` is the
layer's SetUp (top shape buffers included), ``fwd_alloc`` / ``bwd_alloc`` its passes.
"""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from caffemem.api.analyze import Options, analyze
from caffemem.api.optimize import OptimizeSettings, optimize
from caffemem.cli import main
from caffemem.errors import CaffememError
from caffemem.passes.load import load
from caffemem.passes.upgrade import upgrade_net
from caffemem.plan.verify import verify_plan


def deconv3d(params: str, extra: str = "") -> str:
    return f'type: "Deconvolution3D" bottom: "x" top: "y" {extra} convolution3d_param {{ {params} }}'


# --- Deconvolution3D (C3D-v1.1 src/caffe/layers/deconvolution3d_layer.cpp) -------------------


def test_deconvolution3d_doubles_like_the_brox_upsampling_layers(shape_of):
    # deconv5b of deconv3d_ucf101_brox: k 4, kd 4, pad 1, tpad 1, stride 2, tstride 2.
    # L' = (2-1)*2 - 2*1 + 4 = 4; H' = (3-1)*2 - 2 + 4 = 6; W' = (5-1)*2 - 2 + 4 = 10.
    # weight (C, num_output, kd, k, k) = (8, 6, 4, 4, 4); bias (1,1,1,1,6)
    params = "num_output: 6 kernel_size: 4 kernel_depth: 4 pad: 1 temporal_pad: 1 stride: 2 temporal_stride: 2"
    got = shape_of(deconv3d(params), (1, 8, 2, 3, 5))
    assert got.tops == ((1, 6, 4, 6, 10),)
    assert got.params == ((8, 6, 4, 4, 4), (1, 1, 1, 1, 6))


def test_deconvolution3d_reads_bias_term_from_convolution_param(shape_of):
    # LayerSetUp: bias_term_ = layer_param_.convolution_param().bias_term() -- not the
    # convolution3d_param's, which is ignored.  Stride 1: L' = L - 1 + kd = 3.
    params = "num_output: 2 kernel_size: 1 kernel_depth: 2"
    assert len(shape_of(deconv3d(params + " bias_term: false"), (1, 3, 2, 4, 4)).params) == 2
    no_bias = shape_of(deconv3d(params, 'convolution_param { bias_term: false }'), (1, 3, 2, 4, 4))
    assert no_bias.tops == ((1, 2, 3, 4, 4),) and no_bias.params == ((3, 2, 2, 1, 1),)


def test_deconvolution3d_checks(shape_of):
    with pytest.raises(CaffememError, match="num_output"):
        shape_of(deconv3d("kernel_size: 2 kernel_depth: 2"), (1, 3, 2, 4, 4))
    with pytest.raises(CaffememError, match="5 axes"):
        shape_of(deconv3d("num_output: 2 kernel_size: 2 kernel_depth: 2"), (1, 3, 4, 4))


def test_deconvolution3d_memory(memory_of):
    # x (1,2,2,3,3) -> y (1,3,3,4,4) with k 2, kd 2, stride 1: L' = 2-1+2 = 3, H' = 3-1+2 = 4.
    # LayerSetUp: col_buffer_ (1, 3*2*2*2 = 24, 2, 3, 3) shape 20 (no data yet); top shape 20;
    # weight (2,3,2,2,2) 20 + 48*4 = 212; bias (1,1,1,1,3) 20 + 12 = 32; bias_multiplier_ a
    # bare SyncedMemory of N0_ = 3*4*4 = 48 values written at once: 192.
    # Forward: top 144*4 = 576, col buffer 24*18*4 = 1728.
    # Backward (force_backward): top diff 576, weight diff 192, bottom diff 36*4 = 144,
    # col diff 1728, bias diff 12.
    layers = memory_of('layer { name: "d" ' + deconv3d("num_output: 3 kernel_size: 2 kernel_depth: 2") + " }", {"x": (1, 2, 2, 3, 3)})
    d = layers["d"]
    assert (d.init, d.fwd_alloc, d.bwd_alloc) == (20 + 20 + 212 + 32 + 192, 576 + 1728, 576 + 192 + 144 + 1728 + 12)


def test_deconvolution3d_takes_the_bottom_diff_without_propagate_down(memory_of):
    # Backward_cpu/_gpu call bottom[0]->mutable_*_diff() before testing propagate_down[0]:
    # the bottom's diff (144 bytes) is allocated all the same.  No bias: no multiplier, no
    # bias diff.  The loss weight on y writes its diff (576) at init and runs Backward.
    extra = "loss_weight: 1 propagate_down: false convolution_param { bias_term: false }"
    body = 'layer { name: "d" ' + deconv3d("num_output: 3 kernel_size: 2 kernel_depth: 2", extra) + " }"
    d = memory_of(body, {"x": (1, 2, 2, 3, 3)}, force_backward=False)["d"]
    assert d.propagate_down == (False,)
    assert (d.init, d.bwd_alloc) == (20 + 20 + 212 + 576, 192 + 144 + 1728)


# --- C3D-v1.0 V1 nets (conv3d_ucf101_train.prototxt, cut down) --------------------------------

C3D_V10_TRAIN = """name: "deep_c3d_ucf101"
layers {
  name: "data"
  type: VIDEO_DATA
  top: "data"
  top: "label"
  image_data_param {
    source: "../c3d_finetuning/train_01.lst"
    use_image: true
    mean_file: "ucf101_train_mean.binaryproto"
    batch_size: 2
    crop_size: 8
    mirror: true
    show_data: 0
    new_height: 10
    new_width: 12
    new_length: 4
    shuffle: true
  }
}
layers {
  name: "conv1a"
  type: CONVOLUTION3D
  bottom: "data"
  top: "conv1a"
  blobs_lr: 1
  blobs_lr: 2
  weight_decay: 1
  weight_decay: 0
  convolution_param {
    num_output: 4
    kernel_size: 3
    kernel_depth: 3
    pad: 1
    temporal_pad: 1
    stride: 1
    weight_filler { type: "gaussian" std: 0.01 }
    bias_filler { type: "constant" value: 0 }
  }
}
layers { name: "relu1a" type: RELU bottom: "conv1a" top: "conv1a" }
layers {
  name: "pool1"
  type: POOLING3D
  bottom: "conv1a"
  top: "pool1"
  pooling_param { pool: MAX kernel_size: 2 kernel_depth: 2 stride: 2 temporal_stride: 2 }
}
layers { name: "fc6" type: INNER_PRODUCT bottom: "pool1" top: "fc6" inner_product_param { num_output: 5 } }
layers { name: "relu6" type: RELU bottom: "fc6" top: "fc6" }
layers { name: "drop6" type: DROPOUT bottom: "fc6" top: "fc6" dropout_param { dropout_ratio: 0.5 } }
layers { name: "fc8" type: INNER_PRODUCT bottom: "fc6" top: "fc8" inner_product_param { num_output: 3 } }
layers { name: "loss" type: SOFTMAX_LOSS bottom: "fc8" bottom: "label" }
"""


def write(tmp_path, text: str, name: str = "net.prototxt") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_c3d_v10_layers_upgrade_to_c3d_v11_types_and_messages(tmp_path):
    upgraded, notes = upgrade_net(load(write(tmp_path, C3D_V10_TRAIN)).proto)
    types = [layer.type for layer in upgraded.layer]
    assert types == ["VideoData", "Convolution3D", "ReLU", "Pooling3D", "InnerProduct", "ReLU", "Dropout", "InnerProduct", "SoftmaxWithLoss"]
    data, conv, _, pool = upgraded.layer[:4]
    # crop_size, mirror, mean_file go to transform_param (as Caffe's data upgrade does for
    # IMAGE_DATA); the rest of image_data_param to video_data_param.
    assert (data.transform_param.crop_size, data.transform_param.mirror, data.transform_param.mean_file) == (8, True, "ucf101_train_mean.binaryproto")
    video = data.video_data_param
    assert (video.batch_size, video.new_length, video.new_height, video.new_width, video.use_image, video.shuffle) == (2, 4, 10, 12, True, True)
    assert not data.HasField("image_data_param")
    c3 = conv.convolution3d_param
    assert (c3.num_output, c3.kernel_size, c3.kernel_depth, c3.pad, c3.temporal_pad, c3.stride) == (4, 3, 3, 1, 1, 1)
    assert c3.weight_filler.type == "gaussian" and not conv.HasField("convolution_param")
    assert [p.lr_mult for p in conv.param] == [1, 2]
    p3 = pool.pooling3d_param
    assert (p3.pool, p3.kernel_size, p3.kernel_depth, p3.stride, p3.temporal_stride) == (p3.MAX, 2, 2, 2, 2)
    assert any("from convolution_param to convolution3d_param" in note for note in notes)


def test_c3d_v10_video_data_of_video_files_with_a_mean_value(tmp_path):
    # c3d_sport1m_feature_extractor_video.prototxt reads video files (use_image: false);
    # C3D-v1.0 subtracts image_data_param.mean_value when there is no mean_file, so it goes
    # to transform_param.  use_label is read by C3D's voxel layers only: dropped, with a note.
    text = C3D_V10_TRAIN.replace("use_image: true", "use_image: false").replace(
        '    mean_file: "ucf101_train_mean.binaryproto"\n', "    mean_value: 128\n    use_label: false\n"
    )
    upgraded, notes = upgrade_net(load(write(tmp_path, text)).proto)
    data = upgraded.layer[0]
    assert data.video_data_param.HasField("use_image") and not data.video_data_param.use_image
    assert list(data.transform_param.mean_value) == [128] and not data.transform_param.mean_file
    assert any("image_data_param.use_label" in note for note in notes)
    net = analyze(write(tmp_path, text), Options(phase="TEST")).nets[0]
    assert net.blobs["data"] == (2, 3, 4, 8, 8)


def test_c3d_v10_train_net_shapes_and_bytes(tmp_path):
    net = analyze(write(tmp_path, C3D_V10_TRAIN), Options(phase="TRAIN")).nets[0]
    shapes = net.blobs
    # VideoData: (batch, 3, new_length, crop, crop); C3D-v1.1's label is [batch].
    assert shapes["data"] == (2, 3, 4, 8, 8) and shapes["label"] == (2,)
    # conv1a: L = (4 + 2 - 3)/1 + 1 = 4, H = (8 + 2 - 3)/1 + 1 = 8; pool1: ceil((4-2)/2)+1 = 2, 4
    assert shapes["conv1a"] == (2, 4, 4, 8, 8) and shapes["pool1"] == (2, 4, 2, 4, 4)
    layers = {layer.name: layer for layer in net.memory.layers}
    # conv1a LayerSetUp: col buffer (1, 3*3*3*3 = 81, 4, 8, 8) shape 20; top shape 20; weight
    # (4,3,3,3,3) 20 + 324*4 = 1316; bias (1,1,1,1,4) 20 + 16 = 36; bias multiplier 4*8*8*4 = 1024.
    # Forward: top 2*4*4*8*8*4 = 8192, col buffer 81*256*4 = 82944.
    conv = layers["conv1a"]
    assert (conv.init, conv.fwd_alloc) == (20 + 20 + 1316 + 36 + 1024, 8192 + 82944)
    # data: C3D-v1.1 base_data_layer.cpp prefetches data_param.prefetch = 4 batches of data
    # (2,3,4,8,8) 20 + 1536*4 and label (2) 4 + 8, and shapes transformed_data_ (1,3,4,8,8): 20.
    assert net.memory.prefetch_bytes == 4 * (20 + 6144 + 4 + 8) + 20


def test_c3d_v10_net_optimizes_and_the_plan_verifies(tmp_path):
    path = write(tmp_path, C3D_V10_TRAIN)
    result = optimize(path, Options(), OptimizeSettings())
    assert [phase.phase for phase in result.phases] == ["TRAIN", "TEST"]
    for phase in result.phases:
        assert verify_plan(phase.schedule, phase.plan_data) == []
        assert phase.lower_bound <= phase.planned.heap_total <= phase.stock.heap_total
    runner = CliRunner()
    out, plan = tmp_path / "out.prototxt", tmp_path / "plan.json"
    assert runner.invoke(main, ["optimize", path, "-o", str(out), "--plan-json", str(plan)]).exit_code == 0
    assert runner.invoke(main, ["verify", path, str(plan)]).exit_code == 0
    # the written file keeps the V1 layers, reads back, and plans the same
    written = out.read_text()
    assert "type: CONVOLUTION3D" in written and "mem_param" in written
    assert runner.invoke(main, ["verify", str(out), str(plan)]).exit_code == 0


C3D_V10_DECONV = """name: "deep_deconv3d"
input: "data"
input_dim: 1
input_dim: 2
input_dim: 2
input_dim: 4
input_dim: 4
layers {
  name: "deconv5b"
  type: DECONVOLUTION3D
  bottom: "data"
  top: "deconv5b"
  convolution_param {
    num_output: 3 kernel_size: 4 kernel_depth: 4 pad: 1 temporal_pad: 1 stride: 2 temporal_stride: 2
    bias_term: false
  }
}
"""


def test_c3d_v10_deconvolution_keeps_its_bias_term_where_c3d_v11_reads_it(tmp_path):
    # deconv3d_ucf101_brox's DECONVOLUTION3D, with bias_term: false: C3D-v1.1 reads it from
    # convolution_param, so the upgrade leaves it there as well as in convolution3d_param.
    # C3D-v1.0's net.cpp reads five input_dim values per input (N, C, L, H, W).
    net = analyze(write(tmp_path, C3D_V10_DECONV), Options(phase="TEST")).nets[0]
    deconv = net.shaped.layer_shapes[1]
    # L' = (2-1)*2 - 2 + 4 = 4; H' = (4-1)*2 - 2 + 4 = 8; one param blob (no bias)
    assert deconv.tops == ((1, 3, 4, 8, 8),) and deconv.params == ((2, 3, 4, 4, 4),)


def test_input_dim_of_a_net_without_c3d_layers_stays_four_per_input(tmp_path):
    # Caffe's UpgradeNetInput: N, C, H, W; the fifth value has no input and is dropped.
    text = C3D_V10_DECONV[: C3D_V10_DECONV.index("layers {")] + 'layers { name: "relu" type: RELU bottom: "data" top: "r" }\n'
    upgraded, notes = upgrade_net(load(write(tmp_path, text)).proto)
    assert list(upgraded.layer[0].input_param.shape[0].dim) == [1, 2, 2, 4]
    assert any("1 input_dim values have no input name" in note for note in notes)


def test_c3d_v10_field_that_c3d_never_had_is_refused_with_its_line(tmp_path):
    # C3D-v1.0's ConvolutionParameter has no kernel_h: its own Caffe could not parse this.
    path = write(tmp_path, C3D_V10_TRAIN.replace("kernel_depth: 3\n    pad: 1", "kernel_depth: 3\n    kernel_h: 3\n    pad: 1"))
    result = CliRunner().invoke(main, ["analyze", path])
    assert result.exit_code == 2
    message = result.output.strip()
    assert "\n" not in message
    assert "convolution_param.kernel_h is not a field C3D-v1.0's CONVOLUTION3D has" in message
    assert f"{path}:" in message and "layer 'conv1a'" in message


def test_c3d_v10_video_data_without_new_length_fails_as_in_c3d(tmp_path):
    # video_data_layer.cpp: CHECK(new_length > 0); C3D-v1.0's default is 0.
    path = write(tmp_path, C3D_V10_TRAIN.replace("    new_length: 4\n", ""))
    with pytest.raises(CaffememError, match="new_length must be positive"):
        analyze(path, Options(phase="TRAIN"))


# --- C3D-v1.1 (train_simple.prototxt, cut down, with a Deconvolution3D) -----------------------

C3D_V11_NET = """name: "C3D-UCF101Net"
layer {
  name: "data" type: "VideoData" top: "data" top: "label"
  include { phase: TRAIN }
  transform_param { crop_size: 8 mean_value: 128 mean_value: 128 mean_value: 128 mirror: true }
  video_data_param { source: "train_01.lst" root_folder: "/frm/" new_length: 4 new_height: 10 new_width: 12 use_image: true show_data: false batch_size: 2 shuffle: true }
}
layer {
  name: "data" type: "VideoData" top: "data" top: "label"
  include { phase: TEST }
  transform_param { crop_size: 8 mean_value: 128 mean_value: 128 mean_value: 128 mirror: false }
  video_data_param { source: "test_01.lst" root_folder: "/frm/" new_length: 4 new_height: 10 new_width: 12 use_image: true show_data: false batch_size: 3 }
}
layer { name: "conv1a" type: "Convolution3D" bottom: "data" top: "conv1a"
  param { lr_mult: 1 decay_mult: 1 } param { lr_mult: 2 decay_mult: 0 }
  convolution3d_param { num_output: 4 kernel_size: 3 kernel_depth: 3 stride: 1 temporal_stride: 1 pad: 1 temporal_pad: 1 } }
layer { name: "relu1a" type: "ReLU" bottom: "conv1a" top: "conv1a" }
layer { name: "pool1" type: "Pooling3D" bottom: "conv1a" top: "pool1"
  pooling3d_param { pool: MAX kernel_size: 2 kernel_depth: 2 stride: 2 temporal_stride: 2 } }
layer { name: "deconv1" type: "Deconvolution3D" bottom: "pool1" top: "deconv1"
  convolution3d_param { num_output: 2 kernel_size: 2 kernel_depth: 2 stride: 2 temporal_stride: 2 } }
layer { name: "relu1b" type: "ReLU" bottom: "deconv1" top: "deconv1" }
layer { name: "fc6" type: "InnerProduct" bottom: "deconv1" top: "fc6" inner_product_param { num_output: 6 } }
layer { name: "drop6" type: "Dropout" bottom: "fc6" top: "fc6" dropout_param { dropout_ratio: 0.5 } }
layer { name: "fc8" type: "InnerProduct" bottom: "fc6" top: "fc8" inner_product_param { num_output: 3 } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "fc8" bottom: "label" top: "loss" }
layer { name: "accuracy" type: "Accuracy" bottom: "fc8" bottom: "label" top: "accuracy" include { phase: TEST } }
"""


def test_c3d_v11_net_with_a_deconvolution_plans_both_phases(tmp_path):
    path = write(tmp_path, C3D_V11_NET)
    result = optimize(path, Options(), OptimizeSettings())
    batches = {}
    for phase in result.phases:
        assert verify_plan(phase.schedule, phase.plan_data) == []
        assert phase.lower_bound <= phase.planned.heap_total <= phase.stock.heap_total
        batches[phase.phase] = phase
    assert set(batches) == {"TRAIN", "TEST"}
    net = analyze(path, Options(phase="TRAIN")).nets[0]
    # pool1 (2,4,2,4,4) -> deconv1: L' = (2-1)*2 + 2 = 4, H' = (4-1)*2 + 2 = 8
    assert net.blobs["deconv1"] == (2, 2, 4, 8, 8)

"""C3D-v1.0's video-to-video layers (caffemem/layers/fork_v2v.py) and their V1 upgrade,
worked out by hand from facebook/C3D@71336a22 (C3D-v1.0/src/caffe/layers/).

The nets mirror C3D's own V2V files, cut down to 4 frames of 8x8:
C3D-v1.0/examples/v2v/ucf101_optical_flow/deconv3d_ucf101_brox.prototxt (the fixture
fixtures/layers/fork_v2v.prototxt) and examples/v2v/video_segmentation_gatech/
deconv3d_gatech.prototxt and deconv3d_gatech_test.prototxt (GATECH below).

Bytes: float32, 4 bytes a value; a Blob's shape buffer is 4 bytes an axis.
"""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from caffemem.api.analyze import Options, analyze
from caffemem.errors import CaffememError, NeedsInput
from caffemem.passes.load import load
from caffemem.passes.upgrade import upgrade_net
from tests.conftest import check_plans

BROX = Path(__file__).resolve().parents[2] / "fixtures" / "layers" / "fork_v2v.prototxt"

VOXEL_TRUTH = 'name: "data" type: "VideoWithVoxelTruthData" top: "data" top: "truth" image_data_param {{ {p} }}'
SEGMENTATION = 'name: "data" type: "VideoSegmentationData" top: "data" top: "truth" image_data_param {{ {p} }}'


def write(tmp_path, text: str, name: str = "net.prototxt") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


# --- the V1 upgrade -----------------------------------------------------------------------


def test_v2v_layers_upgrade_to_their_class_names_keeping_image_data_param():
    upgraded, _ = upgrade_net(load(str(BROX)).proto)
    types = [layer.type for layer in upgraded.layer]
    assert types[0] == "VideoWithVoxelTruthData" and types[-1] == "EuclideanLoss"
    # the data layer's options stay where C3D-v1.0 reads them (image_data_param)
    param = upgraded.layer[0].image_data_param
    assert (param.num_truth_channels, param.crop_size, param.batch_size, param.is_flow, param.truth_scale) == (2, 8, 1, True, 0.125)
    assert not upgraded.layer[0].HasField("transform_param")


# --- VideoWithVoxelTruthData, VideoSegmentationData ------------------------------------------


def test_voxel_truth_data_needs_the_clip_channels_and_length(shape_of):
    # SetUp reads C and L from the first blob file of the list, which the net does not name
    with pytest.raises(NeedsInput) as caught:
        shape_of(VOXEL_TRUTH.format(p="batch_size: 4 crop_size: 8 num_truth_channels: 2"))
    assert caught.value.blobs == ["data"] and "--input data=_,C,L,8,8" in caught.value.hint


def test_voxel_truth_data_with_a_crop(shape_of):
    # data [batch, C - T, L, crop, crop], truth [batch, T, L, crop, crop]; --input gives the data's
    got = shape_of(VOXEL_TRUTH.format(p="batch_size: 4 crop_size: 8 num_truth_channels: 2"), inputs={"data": (4, 3, 16, 8, 8)})
    assert got.tops == ((4, 3, 16, 8, 8), (4, 2, 16, 8, 8))


def test_voxel_truth_data_without_a_crop_reshapes_the_truth_with_the_file_channels(shape_of):
    # video_with_voxel_truth_data_layer.cpp 327-329: top[1]->Reshape(batch, T, channels(), H, W),
    # channels() being the file's (C - T + T = 5), where prefetch_truth_ has the length
    got = shape_of(VOXEL_TRUTH.format(p="batch_size: 1 num_truth_channels: 2"), inputs={"data": (1, 3, 16, 10, 12)})
    assert got.tops == ((1, 3, 16, 10, 12), (1, 2, 5, 10, 12))


def test_voxel_truth_data_truth_input_must_agree(shape_of):
    with pytest.raises(CaffememError, match="contradicts the file"):
        shape_of(VOXEL_TRUTH.format(p="batch_size: 1 crop_size: 8"), inputs={"data": (1, 3, 4, 8, 8), "truth": (1, 2, 4, 8, 8)})


def test_mirror_without_crop_stops_as_in_c3d(shape_of):
    with pytest.raises(CaffememError, match="requires mirror and crop_size"):
        shape_of(VOXEL_TRUTH.format(p="batch_size: 1 mirror: true"), inputs={"data": (1, 3, 4, 8, 8)})


def test_segmentation_data_has_one_truth_channel_whatever_num_truth_channels_says(shape_of):
    # video_segmentation_data_layer.cpp 270-273: channels() - 1 and 1, num_truth_channels not read
    got = shape_of(SEGMENTATION.format(p="batch_size: 2 crop_size: 8 num_truth_channels: 3"), inputs={"data": (2, 3, 4, 8, 8)})
    assert got.tops == ((2, 3, 4, 8, 8), (2, 1, 4, 8, 8))


def test_voxel_truth_data_memory(tmp_path):
    # The fixture: data (1,3,4,8,8) 768 values, truth (1,2,4,8,8) 512.  SetUp allocates the
    # one prefetch batch: prefetch_data_ 20 + 3072, prefetch_truth_ 20 + 2048; with crop_size
    # the data_mean_ has the blob files' uncropped size: noted, not counted.
    net = analyze(str(BROX), Options(phase="TRAIN", inputs={"data": (1, 3, 4, 8, 8)})).nets[0]
    assert net.memory.prefetch_bytes == 20 + 3072 + 20 + 2048
    assert any("data_mean_" in note for note in net.memory.notes)


def test_voxel_truth_data_without_a_crop_counts_its_mean(tmp_path):
    # data (1,3,4,10,12) 1440 values, truth top (1,2,5,10,12) but prefetch_truth_ (1,2,4,10,12)
    # 960 values, data_mean_ (1,3,4,10,12) 1440: 3 * 20 + (1440 + 960 + 1440) * 4
    # (the whole brox net would stop at its EUCLIDEAN_LOSS: 960 truth values against 1200)
    text = "layer { " + VOXEL_TRUTH.format(p="batch_size: 1 num_truth_channels: 2 mean_value: 128") + " }\n"
    net = analyze(write(tmp_path, text), Options(phase="TEST", inputs={"data": (1, 3, 4, 10, 12)})).nets[0]
    assert net.blobs["truth"] == (1, 2, 5, 10, 12)
    assert net.memory.prefetch_bytes == 3 * 20 + (1440 + 960 + 1440) * 4


# --- VoxelWiseSoftmax, VoxelWiseSoftmaxWithLoss ---------------------------------------------


def test_voxel_softmax_keeps_the_shape_and_needs_five_axes(shape_of):
    assert shape_of('type: "VoxelWiseSoftmax" bottom: "x" top: "p"', (2, 3, 4, 5, 6)).tops == ((2, 3, 4, 5, 6),)
    with pytest.raises(CaffememError, match="5 axes"):
        shape_of('type: "VoxelWiseSoftmax" bottom: "x" top: "p"', (2, 3, 5, 6))


def test_voxel_softmax_memory(memory_of):
    # x (2,3,4,5,6): 720 values, 2880 bytes.  SetUp: the top's shape 20, scale_ (2,1,4,5,6)'s 20.
    # Forward: top 2880, scale_ 240 values 960.  Backward: top diff 2880, x diff 2880.
    got = memory_of('layer { name: "prob" type: "VoxelWiseSoftmax" bottom: "x" top: "p" }', {"x": (2, 3, 4, 5, 6)})["prob"]
    assert (got.init, got.fwd_alloc, got.bwd_alloc) == (40, 2880 + 960, 2880 + 2880)


def test_voxel_softmax_loss_checks_length_height_width(shape_of):
    layer = 'type: "VoxelWiseSoftmaxWithLoss" bottom: "x" bottom: "t" top: "loss"'
    assert shape_of(layer, (2, 3, 4, 5, 6), (2, 1, 4, 5, 6)).tops == ((),)
    with pytest.raises(CaffememError, match="same length, height and width"):
        shape_of(layer, (2, 3, 4, 5, 6), (2, 1, 4, 5, 7))


def test_voxel_softmax_loss_memory(memory_of):
    # SetUp: prob_ (2,3,4,5,6) and its softmax's scale_ (2,1,4,5,6) shapes, 20 each; the loss
    # weight 1 in the automatic top's diff, 4.  Forward: prob_ 2880, scale_ 960, loss 4.
    # Backward: the scores' diff 2880 (the truth gets none).
    body = 'layer { name: "loss" type: "VoxelWiseSoftmaxWithLoss" bottom: "x" bottom: "t" }'
    got = memory_of(body, {"x": (2, 3, 4, 5, 6), "t": (2, 1, 4, 5, 6)})["loss"]
    assert (got.init, got.fwd_alloc, got.bwd_alloc) == (20 + 20 + 4, 2880 + 960 + 4, 2880)


# --- whole nets ---------------------------------------------------------------------------

GATECH = """name: "deep_deconv3d_gatech"
layers {
  name: "data"
  type: VIDEO_SEGMENTATION_DATA
  top: "data"
  top: "truth"
  image_data_param { source: "cross_validation_bin_list_scaled.txt" mean_file: "train_data_frm_mean.binaryproto" batch_size: 1 crop_size: 8 mirror: true show_data: 0 shuffle: true }
}
layers {
  name: "conv1a"
  type: CONVOLUTION3D
  bottom: "data"
  top: "conv1a"
  convolution_param { num_output: 4 kernel_size: 3 kernel_depth: 3 pad: 1 temporal_pad: 1 }
}
layers { name: "relu1a" type: RELU bottom: "conv1a" top: "conv1a" }
layers {
  name: "predict"
  type: CONVOLUTION3D
  bottom: "conv1a"
  top: "predict"
  convolution_param { num_output: 3 kernel_size: 3 kernel_depth: 3 pad: 1 temporal_pad: 1 }
}
layers { name: "loss" type: VOXEL_SOFTMAX_LOSS bottom: "predict" bottom: "truth" }
"""


def test_gatech_train_and_test_nets_shape(tmp_path):
    train = analyze(write(tmp_path, GATECH), Options(phase="TRAIN", inputs={"data": (1, 3, 4, 8, 8)})).nets[0]
    assert train.blobs["truth"] == (1, 1, 4, 8, 8) and train.blobs["predict"] == (1, 3, 4, 8, 8)
    # deconv3d_gatech_test.prototxt ends in VOXEL_SOFTMAX instead
    test_text = GATECH.replace('layers { name: "loss" type: VOXEL_SOFTMAX_LOSS bottom: "predict" bottom: "truth" }', 'layers { name: "prob" type: VOXEL_SOFTMAX bottom: "predict" top: "prob" }')
    test = analyze(write(tmp_path, test_text, "test.prototxt"), Options(phase="TEST", inputs={"data": (1, 3, 4, 8, 8)})).nets[0]
    assert test.blobs["prob"] == (1, 3, 4, 8, 8)


@pytest.mark.parametrize("text", [BROX.read_text(), GATECH], ids=["brox", "gatech"])
def test_v2v_nets_optimize_and_the_plans_verify(tmp_path, text):
    for phase in ("TRAIN", "TEST"):
        assert check_plans(tmp_path, text, phase, inputs={"data": (1, 3, 4, 8, 8)}).phases[0].phase == phase


# --- shapes from the blob files --------------------------------------------------------------


def blob_file(folder: Path, name: str, n: int, c: int, l: int, h: int, w: int) -> None:
    """A C3D-v1.0 blob file (util/image_io.cpp): five int32 n, c, l, h, w, then the floats."""
    (folder / name).write_bytes(struct.pack("<5i", n, c, l, h, w) + bytes(4 * n * c * l * h * w))


def test_voxel_truth_data_reads_its_first_blob_file(tmp_path, monkeypatch):
    # the list names blob files, one a line (infile >> filename); the first is 1x5x4x10x12:
    # 3 clip channels and 2 flow channels, cropped to 8
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train_flow01_brox.txt").write_text("clip0.bin\nclip1.bin\n")
    blob_file(tmp_path, "clip0.bin", 1, 5, 4, 10, 12)
    net = analyze(str(BROX), Options(phase="TRAIN")).nets[0]
    assert net.blobs["data"] == (1, 3, 4, 8, 8) and net.blobs["truth"] == (1, 2, 4, 8, 8)
    assert "data: [1,3,4,8,8] from train_flow01_brox.txt (first blob file clip0.bin: 1x5x4x10x12, crop_size 8)" in net.shaped.notes
    # an --input that disagrees with the file is refused
    with pytest.raises(CaffememError, match="contradicts the file"):
        analyze(str(BROX), Options(phase="TRAIN", inputs={"data": (1, 3, 16, 8, 8)}))


def test_a_blob_file_no_larger_than_the_crop_stops_as_in_c3d(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train_flow01_brox.txt").write_text("clip0.bin\n")
    blob_file(tmp_path, "clip0.bin", 1, 5, 4, 8, 12)
    with pytest.raises(CaffememError, match=r"crop_size 8 must be smaller than its height and width"):
        analyze(str(BROX), Options(phase="TRAIN"))


def test_a_missing_blob_file_asks_for_input_naming_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train_flow01_brox.txt").write_text("clip0.bin\n")
    with pytest.raises(CaffememError, match="the first blob file clip0.bin that train_flow01_brox.txt lists does not exist"):
        analyze(str(BROX), Options(phase="TRAIN"))

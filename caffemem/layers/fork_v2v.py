"""facebook/C3D C3D-v1.0's video-to-video (V2V) layers, read in its sources at 71336a22.

The V2V nets (C3D-v1.0/examples/v2v: ucf101_optical_flow/deconv3d_ucf101_brox*.prototxt,
video_segmentation_gatech/deconv3d_gatech*.prototxt) are V1 files.  Beside the 3-D
convolution, pooling and deconvolution of layers/fork_vision.py they use four V1 types,
which C3D-v1.1 dropped and which the V1 upgrade (passes/upgrade.py) names after their
classes:

- ``VIDEO_WITH_VOXEL_TRUTH_DATA`` -> VideoWithVoxelTruthData
  (video_with_voxel_truth_data_layer.cpp/.cu): a video clip and its per-voxel truth
  (optical flow) stored together in one blob file;
- ``VIDEO_SEGMENTATION_DATA`` -> VideoSegmentationData (video_segmentation_data_layer.cpp/.cu):
  the same with one truth channel (the segment label), always read as bytes;
- ``VOXEL_SOFTMAX`` -> VoxelWiseSoftmax (voxel_wise_softmax_layer.cpp/.cu): softmax over the
  channels of every voxel;
- ``VOXEL_SOFTMAX_LOSS`` -> VoxelWiseSoftmaxWithLoss (voxel_wise_softmax_loss_layer.cpp/.cu).

C3D-v1.0's Blob is 5-D (num, channels, length, height, width) throughout.  The two .cu
files of the voxel layers only call Forward_cpu/Backward_cpu: on a GPU they run on the
host (``gpu="none"``).
"""

from __future__ import annotations

from caffemem.graph import LayerShapes, Shape
from caffemem.layers.access import LayerMemory, MemoryQuery, buffer_setup, read, write
from caffemem.layers.blob import format_shape
from caffemem.layers.data import Template, batch_size_of, given_shape, layer_note, resolve_tops
from caffemem.layers.registry import (
    LOSS,
    PURE_CHEAP,
    Arity,
    ShapeQuery,
    layer,
)

FAMILY = "fork_v2v"
C3D_V10 = "facebook/C3D@71336a22 C3D-v1.0/src/caffe/layers/"

_NCLHW = "num, channels, length, height, width"


def _voxels(q: ShapeQuery, index: int = 0) -> Shape:
    """C3D-v1.0's Blob has exactly five axes (N, C, L, H, W); the voxel layers read all five."""
    bottom = q.bottoms[index]
    q.check(len(bottom) == 5, f"bottom {index} must have 5 axes ({_NCLHW}) as C3D-v1.0's Blob has, got {format_shape(bottom)}")
    return bottom


# --------------------------------------------------------------------------- data layers


def _truth_channels(q: ShapeQuery) -> int:
    """VideoWithVoxelTruthData reads num_truth_channels (default 1); VideoSegmentationData has one."""
    if q.layer.type == "VideoSegmentationData":
        return 1
    channels = q.proto.image_data_param.num_truth_channels
    q.check(channels >= 1, f"image_data_param.num_truth_channels must be positive (got {channels})")
    return channels


def _voxel_truth_data(q: ShapeQuery) -> LayerShapes:
    """SetUp loads the first blob file of ``source`` (N=1, C, L, H, W: the clip's channels
    followed by the truth's) and shapes data [batch, C - T, L, crop, crop] and truth
    [batch, T, L, crop, crop] (T truth channels).  Without crop_size they keep the file's
    H and W, and the truth top is Reshape'd [batch, T, C, H, W] -- the file's channel count
    where its length belongs (prefetch_truth_ is [batch, T, L, H, W]; that is what Forward
    copies in).  The file's C, L (and H, W) are read from its header where the list and
    the file exist (passes/sources.py), else the data top's come from --input.  SetUp
    CHECKs the file's H and W greater than crop_size (CHECK_GT); mirror without crop_size
    stops the prefetch thread (LOG(FATAL))."""
    param = q.proto.image_data_param
    truth_channels, crop, batch = _truth_channels(q), param.crop_size, param.batch_size
    q.check(not (param.mirror and crop == 0), "Current implementation requires mirror and crop_size to be set at the same time.")
    template: Template = (batch, "C", "L") + ((crop, crop) if crop else ("H", "W"))
    if q.record is not None and q.record.volume is not None:
        _, channels, length, height, width = q.record.volume
        where = f"the first blob file of {q.record.source} is {'x'.join(map(str, q.record.volume))}"
        q.check(channels > truth_channels, f"{where}: its {channels} channel(s) leave none for the clip after {truth_channels} truth channel(s)")
        q.check(height > crop and width > crop, f"{where}: crop_size {crop} must be smaller than its height and width (CHECK_GT)")
        template = (batch, channels - truth_channels, length) + ((crop, crop) if crop else (height, width))
    data = resolve_tops(q, [template], "the clip's channels and length are in its blob file").tops[0]
    if crop:
        truth: Template = (batch, truth_channels) + data[2:]
    else:
        truth = (batch, truth_channels, data[1] + truth_channels) + data[3:]
    name = q.layer.tops[1]
    shape = given_shape(q, name, truth) if name in q.inputs else truth
    return LayerShapes(tops=(data, shape or truth))


def _voxel_truth_data_memory(q: MemoryQuery) -> LayerMemory:
    """SetUp allocates the one prefetch batch, ``prefetch_data_`` (the data top's shape) and
    ``prefetch_truth_`` [batch, T, L, H, W] (mutable_cpu_data), and ``data_mean_``: the blob
    file's size [1, C - T, L, H, W] (the mean_file's, CHECK_EQ'd to it, or zeros or the
    mean_value; data_mean_.cpu_data()).  With crop_size that size is the file's, not the
    net's: not counted.  Forward copies the batch into both tops (caffe_copy; the .cu
    cudaMemcpy's into their gpu data).  No Backward."""
    data, truth = q.tops[0], q.tops[1]
    prefetch = buffer_setup(q.buffer("prefetch_data"), data, filled=True)
    prefetch += buffer_setup(q.buffer("prefetch_truth"), truth[:2] + data[2:], filled=True)
    notes: tuple[str, ...] = ()
    if q.proto.image_data_param.crop_size:
        notes = (layer_note(q, "its data_mean_ has the uncropped size of the blob files, not counted"),)
    else:
        prefetch += buffer_setup(q.buffer("data_mean"), (1,) + data[1:], filled=True)
    return LayerMemory(forward=(write(q.top(0)), write(q.top(1))), prefetch=prefetch, notes=notes)


def _data_layer(type: str, source: str):
    """The two V2V data types: one rule, one memory, their own source."""
    return layer(
        type,
        FAMILY,
        bottoms=Arity.exactly(0),
        tops=Arity.exactly(2),
        is_data=True,
        source=C3D_V10 + source,
        memory=_voxel_truth_data_memory,
        batch_fields=batch_size_of("image_data_param"),
        source_kind="volume_list",
    )


@_data_layer("VideoWithVoxelTruthData", "video_with_voxel_truth_data_layer.cpp, .cu")
def _video_with_voxel_truth_data(q: ShapeQuery) -> LayerShapes:
    """A clip and its num_truth_channels truth channels (optical flow) from one blob file."""
    return _voxel_truth_data(q)


@_data_layer("VideoSegmentationData", "video_segmentation_data_layer.cpp, .cu")
def _video_segmentation_data(q: ShapeQuery) -> LayerShapes:
    """A clip and its one-channel segment labels from one blob file (always bytes)."""
    return _voxel_truth_data(q)


# --------------------------------------------------------------------------- softmax


def _voxel_softmax_memory(q: MemoryQuery) -> LayerMemory:
    """voxel_wise_softmax_layer.cpp: SetUp shapes ``scale_`` [N, 1, L, H, W]; Forward copies
    the bottom into the top and uses ``scale_`` for the maxima and the sums; Backward (no
    propagate_down test) copies the top's diff into the bottom's, with ``scale_`` as scratch."""
    scale = q.buffer("scale")
    shape = q.bottoms[0]
    return LayerMemory(
        setup=buffer_setup(scale, (shape[0], 1) + shape[2:]),
        forward=(read(q.bottom(0)), write(q.top(0)), write(scale)),
        backward=(read(q.top(0), "diff"), read(q.top(0)), write(q.bottom(0), "diff"), write(scale)),
    )


# voxel_wise_softmax_layer.cpp/.cu Forward: a softmax over the channels of each voxel.
@layer(
    "VoxelWiseSoftmax",
    FAMILY,
    bottoms=Arity.exactly(1),
    tops=Arity.exactly(1),
    source=C3D_V10 + "voxel_wise_softmax_layer.cpp, .cu",
    memory=_voxel_softmax_memory,
    gpu="none",
    recompute=PURE_CHEAP,
)
def _voxel_softmax(q: ShapeQuery) -> LayerShapes:
    """Softmax over the channels of each voxel: the top is shaped like the 5-axis bottom."""
    return LayerShapes(tops=(_voxels(q),))


def _voxel_softmax_loss_memory(q: MemoryQuery) -> LayerMemory:
    """voxel_wise_softmax_loss_layer.cpp: SetUp sets up its own VoxelWiseSoftmax from the
    scores to ``prob_`` (its ``scale_`` [N, 1, L, H, W]); Forward runs it and reads the
    truth; Backward (no propagate_down test) writes the scores' diff from ``prob_`` and the
    truth.  The loss is Forward's return value."""
    scores = q.bottoms[0]
    prob, scale = q.buffer("prob"), q.buffer("softmax/scale")
    setup = buffer_setup(prob, scores) + buffer_setup(scale, (scores[0], 1) + scores[2:])
    forward = (read(q.bottom(0)), write(prob), write(scale), read(q.bottom(1)))
    forward += tuple(write(q.top(i)) for i in range(len(q.tops)))
    backward = (read(prob), read(q.bottom(1)), write(q.bottom(0), "diff"))
    return LayerMemory(setup=setup, forward=forward, backward=backward)


@layer(
    "VoxelWiseSoftmaxWithLoss",
    FAMILY,
    bottoms=Arity.exactly(2),
    tops=Arity.exactly(1),
    auto_top=True,
    no_force_backward=(1,),
    source=C3D_V10 + "voxel_wise_softmax_loss_layer.cpp, .cu",
    memory=_voxel_softmax_loss_memory,
    gpu="none",
    recompute=LOSS,
)
def _voxel_softmax_loss(q: ShapeQuery) -> LayerShapes:
    """Mean over the voxels of -log prob[truth]; a truth value >= C is skipped.

    SetUp CHECKs the two bottoms' length, height and width equal (not their num: the
    loop reads the truth at the scores' num).  C3D-v1.0's layer has no top (the loss is
    Forward's return value, and its net backpropagates every layer that needs it); here
    it gets the loss top every LossLayer gets (a scalar, loss_weight 1), which keeps its
    Backward in the plan.
    """
    scores, truth = _voxels(q, 0), _voxels(q, 1)
    q.check(scores[2:] == truth[2:], f"the scores {format_shape(scores)} and truth {format_shape(truth)} must have the same length, height and width")
    return LayerShapes(tops=((),) * len(q.layer.tops))

"""Layers of Caffe forks (other than vision layers), each checked against its fork's source.

The nets of the corpus that need a fork use these types outside BVLC master:

- yjxiong/caffe action_recog (TSN) and hszhao/PSPNet: ``BN``, ``VideoData``;
- alexgkendall/caffe-segnet (SegNet): ``BN`` (its own variant), ``DenseImageData``;
- facebook/C3D C3D-v1.1: ``VideoData`` (its own variant, 5-D);
- weiliu89/caffe ssd: ``AnnotatedData``, ``Normalize``, ``Permute``, ``PriorBox``,
  ``DetectionOutput``, ``DetectionEvaluate``, ``MultiBoxLoss``;
- rbgirshick/caffe-fast-rcnn (py-faster-rcnn): ``SmoothL1Loss``; daijifeng001/caffe-rfcn's
  ``SmoothL1Loss`` (one weight blob, a per-RoI loss top) under the same name;
- hujie-frank/SENet: ``Axpy``;
- s9xie/hed: ``ImageLabelmapData``.

Where two forks registered different layers under one type name (BN, VideoData), the
rule tells them apart by the parameters only one of them has (the merged schema keeps
both sets of fields, see proto/caffe.proto).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from caffemem.graph import LayerShapes, Shape, count
from caffemem.layers.access import (
    Action,
    BlobId,
    LayerMemory,
    MemoryQuery,
    Part,
    Reshape,
    Share,
    buffer_setup,
    read,
    write,
)
from caffemem.layers.blob import (
    c_divide,
    dim,
    float32,
    format_shape,
    int32,
    int32_wrapped,
    legacy4,
    legacy_dim,
    reshaped,
)
from caffemem.layers.data import (
    COLOR_CHANNELS,
    Dim,
    Template,
    batch_size_of,
    both_or_neither,
    color_channels,
    follow_data,
    image_size,
    layer_note,
    positive_batch,
    prefetch_memory,
    resolve_tops,
    source_size,
)
from caffemem.layers.fork_segdet import _smooth_l1_loss_ohem as smooth_l1_loss_ohem_shapes
from caffemem.layers.fork_segdet import _smooth_l1_ohem_memory as smooth_l1_ohem_memory
from caffemem.layers.loss import _loss as loss_layer_checks
from caffemem.layers.neuron import softmax_memory
from caffemem.layers.registry import (
    CHEAP_ANSWER,
    LOSS,
    OUTPUT,
    PURE_CHEAP,
    Arity,
    Recompute,
    ShapeQuery,
    layer,
    never,
    recompute_rule,
)
from caffemem.schema import caffe_pb2

NONE = Arity.exactly(0)
ONE = Arity.exactly(1)
TWO = Arity.exactly(2)

SSD = "weiliu89/caffe ssd src/caffe/layers/"
YJXIONG = "yjxiong/caffe action_recog src/caffe/layers/"
SEGNET = "alexgkendall/caffe-segnet src/caffe/layers/"
C3D = "facebook/C3D C3D-v1.1 src/caffe/layers/"

# Each SSD prior box is 4 coordinates; PriorBox stores them and their variances (2 channels).
BOX_COORDS = 4
PRIOR_CHANNELS = 2
# DetectionOutput rows: [image_id, label, confidence, xmin, ymin, xmax, ymax].
DETECTION_FIELDS = 7
# AnnotatedData BBOX label rows: [item_id, group_label, instance_id, xmin, ymin, xmax, ymax, diff].
BBOX_LABEL_FIELDS = 8
# eric612/MobileNet-YOLO's YOLO label (yolo_data_type 1): 300 rows of [label, x, y, w, h] an image.
YOLO_LABEL_ROWS = 300
YOLO_LABEL_FIELDS = 5
# yjxiong ReadSegmentFlowToDatum stacks an x and a y flow image per frame.
FLOW_CHANNELS = 2


def _set(message: Any, *fields: str) -> bool:
    """Does the message set any of these (optional) fields?"""
    return any(message.HasField(name) for name in fields)


def _nchw(shape: Shape) -> Shape:
    """Blob::num/channels/height/width of a blob the shape rule accepted (missing axes: 1)."""
    return tuple(shape[i] if i < len(shape) else 1 for i in range(4))


def _reads(*blobs: BlobId) -> tuple[Action, ...]:
    return tuple(read(blob) for blob in blobs)


def _writes(*blobs: BlobId, part: Part = "data") -> tuple[Action, ...]:
    return tuple(write(blob, part) for blob in blobs)


# --------------------------------------------------------------------------- BN


def _segnet_bn(q: ShapeQuery) -> LayerShapes:
    """caffe-segnet BNLayer: scale, shift [1, C, 1, 1]; LEARN mode may output batch mean/variance."""
    param = q.proto.bn_param
    learn = param.bn_mode == param.LEARN
    tops = max(len(q.layer.tops), 1)  # the spec's arity guarantees a top
    # common_layers.hpp: MaxTopBlobs = 3 in LEARN mode, else 1.
    q.check(tops <= (3 if learn else 1), f"BN layer in {'LEARN' if learn else 'INFERENCE'} mode takes at most {3 if learn else 1} tops, got {tops}")
    num, channels, height, width = legacy4(q, q.bottoms[0])
    stat: Shape = (1, channels, 1, 1)
    # Reshape uses top[0]->Reshape(num, channels, height, width): always 4-D.
    return LayerShapes(tops=((num, channels, height, width),) + (stat,) * (tops - 1), params=(stat, stat))


def _is_segnet_bn(proto: Any) -> bool:
    """SegNet's BN is the one whose bn_param sets one of its own fields."""
    return _set(proto.bn_param, "scale_filler", "shift_filler", "bn_mode")


def _tsn_bn_memory(q: MemoryQuery) -> LayerMemory:
    """yjxiong bn_layer.cpp (hszhao/PSPNet's is the same but for the blobs' axes).  Reshape
    shapes ``broadcast_buffer_`` and ``x_norm_`` like the bottom, ``spatial_statistic_``
    [N, C, 1, 1], ``batch_statistic_`` and ``x_inv_std_`` [1, C, 1, 1], and writes the ones of
    ``spatial_sum_multiplier_`` [1, 1, H, W] and ``batch_sum_multiplier_`` [N, 1, 1, 1].
    Forward uses the stored mean/variance (blobs 2, 3) when frozen or in TEST, else the
    batch's (updating the blobs), and keeps ``x_norm_``, ``x_inv_std_`` unless frozen.
    Backward: frozen, only the bottom's diff (when propagate_down); else the slope's and
    bias's diffs (param_propagate_down) and the bottom's."""
    num, channels, height, width = _nchw(q.bottoms[0])
    names = ("broadcast_buffer", "spatial_statistic", "batch_statistic", "x_norm", "x_inv_std", "spatial_sum_multiplier", "batch_sum_multiplier")
    broadcast, spatial, batch, x_norm, inv_std, spatial_ones, batch_ones = (q.buffer(name) for name in names)
    stat = (1, channels, 1, 1)
    setup = buffer_setup(broadcast, q.bottoms[0]) + buffer_setup(spatial, (num, channels, 1, 1)) + buffer_setup(batch, stat)
    setup += buffer_setup(x_norm, q.bottoms[0]) + buffer_setup(inv_std, stat)
    setup += buffer_setup(spatial_ones, (1, 1, height, width), filled=True) + buffer_setup(batch_ones, (num, 1, 1, 1), filled=True)
    frozen = q.proto.bn_param.frozen
    stored = frozen or q.phase == "TEST"
    forward = _reads(q.bottom(0), q.top(0), q.param(0), q.param(1), spatial_ones, batch_ones) + _writes(q.top(0), batch, spatial, broadcast)
    forward += _reads(q.param(2), q.param(3)) if stored else _writes(q.param(2), q.param(3))
    forward += () if frozen else _writes(x_norm, inv_std)
    backward: tuple[Action, ...] = ()
    if frozen:
        if q.propagate_down[0]:
            backward = _reads(q.param(3), q.param(0)) + (read(q.top(0), "diff"), write(batch), write(q.bottom(0), "diff"))
        return LayerMemory(setup=setup, forward=forward, backward=backward)
    for j in (0, 1):
        if q.param_propagate_down[j]:
            backward += (read(q.top(0), "diff"), write(q.param(j), "diff"), read(x_norm), write(broadcast), write(spatial))
    if q.propagate_down[0]:
        backward += (read(q.top(0), "diff"), read(q.param(0)), read(x_norm), read(inv_std), write(q.bottom(0), "diff"), write(batch))
    return LayerMemory(setup=setup, forward=forward, backward=backward)


def _segnet_bn_memory(q: MemoryQuery) -> LayerMemory:
    """caffe-segnet bn_layer.cpp.  Reshape shapes ``x_norm_`` and ``buffer_blob_`` [N, C, H, W],
    ``spatial_mean_``, ``spatial_variance_`` [N, C, 1, 1], ``batch_mean_``, ``batch_variance_``
    [1, C, 1, 1], and writes ``spatial_sum_multiplier_`` [1, 1, H, W] and
    ``batch_sum_multiplier_`` [N, 1, 1, 1]: ones in the data, zeros in the diff.  Forward in
    LEARN mode computes the batch statistics (copied to tops 1 and 2 when present) and keeps
    ``x_norm_``; in INFERENCE mode it only scales and shifts.  Backward never tests
    propagate_down: it writes the bottom's diff, both parameters' diffs and, as scratch,
    the diffs of ``spatial_variance_`` and ``spatial_mean_``."""
    num, channels, height, width = _nchw(q.bottoms[0])
    names = ("x_norm", "buffer_blob", "spatial_mean", "spatial_variance", "batch_mean", "batch_variance", "spatial_sum_multiplier", "batch_sum_multiplier")
    x_norm, buffer, spatial_mean, spatial_variance, batch_mean, batch_variance, spatial_ones, batch_ones = (q.buffer(name) for name in names)
    stat = (1, channels, 1, 1)
    setup = buffer_setup(x_norm, (num, channels, height, width)) + buffer_setup(spatial_mean, (num, channels, 1, 1)) + buffer_setup(batch_mean, stat)
    setup += buffer_setup(spatial_variance, (num, channels, 1, 1)) + buffer_setup(batch_variance, stat) + buffer_setup(buffer, (num, channels, height, width))
    for ones, shape in ((spatial_ones, (1, 1, height, width)), (batch_ones, (num, 1, 1, 1))):
        setup += buffer_setup(ones, shape, filled=True) + (write(ones, "diff"),)
    forward = _reads(q.bottom(0), q.param(0), q.param(1), spatial_ones, batch_ones) + (write(q.top(0)),)
    learn = q.proto.bn_param.bn_mode == q.proto.bn_param.LEARN
    if learn:
        forward += _writes(buffer, spatial_mean, batch_mean, spatial_variance, batch_variance) + _writes(*(q.top(i) for i in range(1, len(q.tops))))
        forward += (write(x_norm),)
    else:
        forward += _writes(spatial_variance, buffer, spatial_mean)
    backward = _reads(q.bottom(0), q.param(0)) + (read(q.top(0), "diff"), write(q.bottom(0), "diff"), write(buffer))
    backward += _writes(q.param(0), q.param(1), spatial_variance, spatial_mean, part="diff") + (write(spatial_variance),)
    if learn:
        backward += (read(x_norm), write(spatial_mean), write(batch_mean), read(batch_variance))
    return LayerMemory(setup=setup, forward=forward, backward=backward)


def _bn_memory(q: MemoryQuery) -> LayerMemory:
    return _segnet_bn_memory(q) if _is_segnet_bn(q.proto) else _tsn_bn_memory(q)


@recompute_rule
def _bn_recompute(proto, phase: str) -> Recompute:
    """SegNet's bn_layer.cpp keeps no running statistics (LEARN normalises with the batch's,
    INFERENCE only scales and shifts): pure in both modes.  yjxiong's bn_layer.cpp/.cu
    (and cudnn_bn_layer.cu) use the stored mean/variance in TEST or when frozen: pure; in
    TRAIN they fold the batch's into blobs 2 and 3, which a restore would undo.  But
    hszhao/PSPNet's copy, which a file cannot be told from, ignores ``frozen`` and its
    Forward_gpu in TRAIN adds the statistics into those blobs' *diffs* (summed over
    iter_size and threads, copied into the data by Backward): a second Forward would add
    them twice.  In doubt, not recomputed in TRAIN."""
    if _is_segnet_bn(proto):
        return Recompute(True, "SegNet's BN keeps no running statistics: its Forward is a function of the bottom and the scale/shift", cheap=True)
    if phase == "TEST":
        return Recompute(True, "in TEST it normalises with the stored statistics (or, PSPNet's, the batch's) and writes no blob", cheap=True)
    return Recompute(False, "in TRAIN its Forward accumulates the running statistics (PSPNet's copy into the blobs' diffs, summed across threads)")


@layer("BN", "forks", bottoms=ONE, tops=Arity(1, 3), source=YJXIONG + "bn_layer.cpp; SegNet variant: " + SEGNET + "bn_layer.cpp", memory=_bn_memory, recompute=_bn_recompute)
def _bn(q: ShapeQuery) -> LayerShapes:
    """Batch normalisation with its own slope/bias and running mean/variance.

    yjxiong/caffe (TSN): four blobs of shape [1, C]; the top is shaped like the bottom.
    hszhao/PSPNet's copy makes the same four blobs [1, C, 1, 1] (same count; its bn_param
    cannot be told apart, so the yjxiong shapes are reported).  SegNet's layer (bn_param
    with scale_filler / shift_filler / bn_mode) has two [1, C, 1, 1] blobs instead.
    """
    if _is_segnet_bn(q.proto):
        return _segnet_bn(q)
    q.check(len(q.layer.tops) <= 1, f"BN layer takes exactly 1 top, got {len(q.layer.tops)}")
    stat: Shape = (1, legacy_dim(q, q.bottoms[0], 1))
    return LayerShapes(tops=(q.bottoms[0],), params=(stat,) * 4)


# --------------------------------------------------------------------------- data layers


def _video_size(q: ShapeQuery, param: Any) -> tuple[Dim, Dim]:
    """Frame height, width after the optional resize (new_height/new_width) and the crop."""
    return image_size(q, param.new_height, param.new_width, q.proto.transform_param.crop_size)


def _c3d_video(q: ShapeQuery) -> LayerShapes:
    """C3D-v1.1 VideoDataLayer: data [batch, 3, new_length, H, W] (VolumeDatum), label [batch(, labels)]."""
    param = q.proto.video_data_param
    both_or_neither(q, param.new_height, param.new_width, "new")
    if param.use_multiple_label:
        q.check(param.HasField("num_of_labels"), "number of labels must be set together with use multiple labels")
    length = int32(param.new_length)
    q.check(length > 0, "video_data_param.new_length must be positive (CHECK_GT(datum_length, 0))")
    batch = positive_batch(q, param.batch_size, "video_data_param.batch_size")
    # ReadImageSequenceToVolumeDatum / ReadVideoToVolumeDatum always store 3 channels.
    data: Template = (batch, COLOR_CHANNELS, length) + _video_size(q, param)
    label: Template = (batch, int32(param.num_of_labels)) if param.use_multiple_label else (batch,)
    return resolve_tops(q, [data, label], "without new_height/new_width or crop_size a VideoData layer takes the first frame's size")


def _tsn_video(q: ShapeQuery) -> LayerShapes:
    """yjxiong VideoDataLayer: data [batch, c * new_length * num_segments, H, W], label [batch, 1, 1, 1]."""
    param = q.proto.video_data_param
    if param.modality == param.FLOW:
        per_frame = FLOW_CHANNELS
    else:
        per_frame = color_channels(not param.grayscale)
    frames = int32(param.new_length) * int32(param.num_segments)
    batch = int32(param.batch_size)
    data: Template = (batch, per_frame * frames) + _video_size(q, param)
    return resolve_tops(
        q, [data, (batch, 1, 1, 1)], "without new_height/new_width or crop_size a VideoData layer takes the first frame's size"
    )


# Fields only facebook/C3D's VideoDataParameter has; a layer setting one of them is C3D's.
_C3D_VIDEO_FIELDS = (
    "is_color",
    "root_folder",
    "show_data",
    "use_image",
    "use_temporal_jitter",
    "sampling_rate",
    "max_sampling_rate",
    "use_sampling_rate_jitter",
    "use_multiple_label",
    "num_of_labels",
)
_TSN_VIDEO_FIELDS = ("num_segments", "modality", "name_pattern", "encoded", "grayscale")


def _is_c3d_video(proto: Any) -> bool:
    """A VideoData layer setting one of C3D's own fields and none of yjxiong's is C3D's."""
    return _set(proto.video_data_param, *_C3D_VIDEO_FIELDS) and not _set(proto.video_data_param, *_TSN_VIDEO_FIELDS)


def _video_data_memory(q: MemoryQuery) -> LayerMemory:
    """yjxiong base_data_layer.cpp, video_data_layer.cpp: one ``prefetch_data_`` and
    ``prefetch_label_`` batch, written in LayerSetUp, copied into the tops by Forward;
    ``transformed_data_`` [1, C, H, W] only shaped.  C3D-v1.1 base_data_layer.cpp: BVLC
    master's prefetching (data_param.prefetch batches, tops pointed at the batch)."""
    if _is_c3d_video(q.proto):
        return prefetch_memory(q, q.proto.data_param.prefetch)
    return prefetch_memory(q, 1, copies=True)


@layer(
    "VideoData",
    "forks",
    bottoms=NONE,
    tops=TWO,
    is_data=True,
    source=YJXIONG + "video_data_layer.cpp; C3D variant: " + C3D + "video_data_layer.cpp",
    memory=_video_data_memory,
    batch_fields=batch_size_of("video_data_param"),
)
def _video_data(q: ShapeQuery) -> LayerShapes:
    """Video clips: yjxiong's (TSN, 4-D, frames stacked in channels) or C3D's (5-D) layer.

    A layer setting one of C3D's own fields (use_image, root_folder, ...) and none of
    yjxiong's (num_segments, modality, ...) is C3D's; any other is read as yjxiong's.
    """
    return _c3d_video(q) if _is_c3d_video(q.proto) else _tsn_video(q)


# Older forks' prefetching: (batches, tops with a transformed_ blob); Forward copies the batch.
# caffe-segnet: one prefetch_data_/prefetch_label_ pair, transformed_data_ and transformed_label_.
# s9xie/hed BasePrefetchingLabelmapDataLayer: PREFETCH_COUNT = 3 batches, transformed_data_ and
# transformed_labelmap_.  weiliu89 ssd BasePrefetchingDataLayer: PREFETCH_COUNT = 3 batches
# (its data_param.prefetch is not read), transformed_data_ only.
_COPYING_PREFETCH = {"DenseImageData": (1, (0, 1)), "ImageLabelmapData": (3, (0, 1)), "AnnotatedData": (3, (0,))}


def _copying_prefetch_memory(q: MemoryQuery) -> LayerMemory:
    batches, transformed = _COPYING_PREFETCH[q.layer.type]
    return prefetch_memory(q, batches, transformed, copies=True)


def _divided(q: ShapeQuery, size: tuple[Dim, Dim], factor: int) -> tuple[Dim, Dim]:
    """ENet's label size: each known side divided by label_divide_factor (an unknown one
    is shown so in the --input template)."""
    q.check(factor >= 1, f"label_divide_factor must be positive (got {factor}): the layer divides by it")
    if factor == 1:
        return size
    return tuple(d // factor if isinstance(d, int) else f"{d}/{factor}" for d in size)  # type: ignore[return-value]


@layer(
    "DenseImageData",
    "forks",
    bottoms=NONE,
    tops=TWO,
    is_data=True,
    source=SEGNET + "dense_image_data_layer.cpp, base_data_layer.cpp",
    memory=_copying_prefetch_memory,
    batch_fields=batch_size_of("dense_image_data_param"),
    source_kind="dense_image_pair_list",
)
def _dense_image_data(q: ShapeQuery) -> LayerShapes:
    """Image and per-pixel label image: data [batch, 3 or 1, H, W], label [batch, 1, H, W].

    H, W: transform_param.crop_size, else crop_height/crop_width, else new_height/new_width,
    else the first image's size (a --input for data then sizes the label too).  ENet's copy
    (TimoSaemann/caffe-enet@22d356c9 dense_image_data_layer.cpp) reads the label image at
    new_height / label_divide_factor x new_width / label_divide_factor: without a crop the
    label is [batch, 1, H / f, W / f] (C division; with a crop the factor is not applied).
    """
    param = q.proto.dense_image_data_param
    both_or_neither(q, param.new_height, param.new_width, "new")
    both_or_neither(q, param.crop_height, param.crop_width, "crop")
    crop = int32(q.proto.transform_param.crop_size)
    crop_h, crop_w = int32(param.crop_height), int32(param.crop_width)
    size: tuple[Dim, Dim]
    # No CHECK against the resized image here: the layer reshapes its tops to the crop directly.
    if crop > 0:
        size = (crop, crop)
    elif crop_h > 0:
        size = (crop_h, crop_w)
    else:
        size = source_size(q, image_size(q, param.new_height, param.new_width, 0))
    size = follow_data(q, size)
    label = size if crop > 0 or crop_h > 0 else _divided(q, size, int32(param.label_divide_factor))
    batch = int32(param.batch_size)
    templates: list[Template] = [(batch, color_channels(param.is_color)) + size, (batch, 1) + label]
    return resolve_tops(q, templates, "without a crop or new_height/new_width a DenseImageData layer takes the first image's size")


@layer(
    "ImageLabelmapData",
    "forks",
    bottoms=NONE,
    tops=TWO,
    is_data=True,
    source="s9xie/hed src/caffe/layers/image_labelmap_data_layer.cpp, base_data_layer.cpp",
    memory=_copying_prefetch_memory,
    batch_fields=batch_size_of("image_data_param"),
    source_kind="image_pair_list",
)
def _image_labelmap_data(q: ShapeQuery) -> LayerShapes:
    """HED: data [batch, 3 or 1, H, W] and its edge map [batch, 1, H, W] (image_data_param, crop_size)."""
    param = q.proto.image_data_param
    both_or_neither(q, param.new_height, param.new_width, "new")
    size = follow_data(q, source_size(q, image_size(q, param.new_height, param.new_width, q.proto.transform_param.crop_size)))
    batch = positive_batch(q, param.batch_size, "image_data_param.batch_size")
    templates: list[Template] = [(batch, color_channels(param.is_color)) + size, (batch, 1) + size]
    return resolve_tops(q, templates, "without new_height/new_width or crop_size an ImageLabelmapData layer takes the first image's size")


def _ssd_image_size(q: ShapeQuery, batch: int) -> tuple[Dim, Dim]:
    """ssd DataTransformer::InferBlobShape: resize_param (InferNewSize), then crop_h/crop_w or crop_size.

    eric612/MobileNet-YOLO lists several resize_params (multi-scale training:
    annotated_data_layer.cpp load_batch picks one by its prob every 10 iterations and
    reshapes the batch to it); as blobs never shrink, a run ends up holding the largest,
    which is the size used here (see _multi_scale_note)."""
    transform = q.proto.transform_param
    crop = int32(transform.crop_size)
    crop_h, crop_w = (crop, crop) if crop else (int32(transform.crop_h), int32(transform.crop_w))
    sizes: list[tuple[Dim, Dim]] = []
    for resize in transform.resize_param:
        if resize.resize_mode == resize.FIT_SMALL_SIZE:
            q.check(batch == 1, "Only support batch size of 1 for FIT_SMALL_SIZE.")
            sizes.append(("H", "W"))
        else:  # WARP and FIT_LARGE_SIZE_AND_PAD produce exactly height x width (im_transforms.cpp)
            height, width = int32(resize.height), int32(resize.width)
            q.check(height >= crop_h and width >= crop_w, f"crop {crop_h}x{crop_w} exceeds the resized image {height}x{width}")
            sizes.append((height, width))
    known = [size for size in sizes if isinstance(size[0], int) and isinstance(size[1], int)]
    height, width = max(known, key=lambda size: size[0] * size[1]) if known and len(known) == len(sizes) else ("H", "W")
    return (crop_h or height, crop_w or width)


def _annotated_data_memory(q: MemoryQuery) -> LayerMemory:
    """The prefetching copy of ssd's AnnotatedData, with a note when several resize_params
    (eric612/MobileNet-YOLO's multi-scale training) make the figures those of the largest."""
    memory = _copying_prefetch_memory(q)
    sizes = [f"{r.height}x{r.width}" for r in q.proto.transform_param.resize_param]
    if len(sizes) < 2:
        return memory
    note = f"layer '{q.layer.name}' (AnnotatedData): multi-scale training ({', '.join(sizes)}); the figures are for the largest, which a run ends up holding"
    return replace(memory, notes=memory.notes + (note,))


@layer(
    "AnnotatedData",
    "forks",
    bottoms=NONE,
    tops=Arity(1, 2),
    is_data=True,
    source=SSD + "annotated_data_layer.cpp, base_data_layer.cpp, data_transformer.cpp",
    memory=_annotated_data_memory,
    batch_fields=batch_size_of("data_param"),
    source_kind="annotated_datum_db",
)
def _annotated_data(q: ShapeQuery) -> LayerShapes:
    """data [batch, C, H, W] (C from the database; H, W from resize/crop); label from the annotations.

    The label is [1, 1, N, 8] (all the boxes of a batch on one plane: --batch leaves it) with N the boxes of the first AnnotatedDatum (at least 1) when
    it has an annotation type (its own or anno_data_param.anno_type), else [batch, 1, 1, 1]
    (DataLayerSetUp): both come from the database when it exists (passes/sources.py),
    else from --input.  YOLO training data of eric612/MobileNet-YOLO (``yolo_data_type:
    1``, annotated_data_layer.cpp) has a fixed box label instead: [batch, 1, 300, 5], for
    the box databases YOLO trains on.  Without resize_param and crop, H, W are the datum's.
    """
    batch = int32(q.proto.data_param.batch_size)
    size = _ssd_image_size(q, batch)
    record = q.record
    if record is not None and record.image is not None:
        channels, height, width = record.image
        q.check(channels > 0, f"the first record of {record.source} has {channels} channels ({record.what}); Caffe stops: CHECK_GT(datum_channels, 0)")
        if not q.proto.transform_param.resize_param:  # else the resized size, not the datum's
            size = (height if size[0] == "H" else size[0], width if size[1] == "W" else size[1])
        data: Template = (batch, channels) + size
    else:
        data = (batch, "C") + size
    yolo = q.proto.annotated_data_param.yolo_data_type == 1
    label: Template = (batch, 1, YOLO_LABEL_ROWS, YOLO_LABEL_FIELDS) if yolo else (1, 1, "N", BBOX_LABEL_FIELDS)
    if record is not None and not yolo:
        label = (1, 1, max(record.boxes, 1), BBOX_LABEL_FIELDS) if record.boxes is not None else (batch, 1, 1, 1)
    why = (
        "an AnnotatedData layer's channels come from its database"
        if yolo
        else "an AnnotatedData layer's channels and its label's box count N come from its database (label is 1,1,N,8 for box annotations, batch,1,1,1 without)"
    )
    shapes = resolve_tops(q, [data, label], why)
    boxes = label[0] == 1 and label[1] == 1 and label[3] == BBOX_LABEL_FIELDS and not yolo  # all boxes of a batch on one plane
    return replace(shapes, unbatched=frozenset({1})) if boxes and len(q.layer.tops) > 1 else shapes


# --------------------------------------------------------------------------- SSD layers


def _normalize_memory(q: MemoryQuery) -> LayerMemory:
    """normalize_layer.cpp.  LayerSetUp shapes ``buffer_`` [1, C, H, W], ``buffer_channel_``
    [1, C, 1, 1], ``buffer_spatial_`` [1, 1, H, W] and ``norm_`` ([N, 1, 1, 1] across_spatial,
    else [N, 1, H, W]), and writes the ones of ``sum_channel_multiplier_`` [1, C, 1, 1] and
    ``sum_spatial_multiplier_`` [1, 1, H, W].  Forward writes the top, ``buffer_`` and
    ``norm_``.  Backward takes the bottom's diff and writes ``buffer_channel_`` and
    ``buffer_spatial_`` before any propagate_down test; the scale's diff when
    param_propagate_down[0]."""
    num, channels, height, width = _nchw(q.bottoms[0])
    names = ("buffer", "buffer_channel", "buffer_spatial", "norm", "sum_channel_multiplier", "sum_spatial_multiplier")
    buffer, by_channel, by_place, norm, channel_ones, spatial_ones = (q.buffer(name) for name in names)
    setup = buffer_setup(buffer, (1, channels, height, width)) + buffer_setup(by_channel, (1, channels, 1, 1))
    setup += buffer_setup(by_place, (1, 1, height, width))
    setup += buffer_setup(norm, (num, 1, 1, 1) if q.proto.norm_param.across_spatial else (num, 1, height, width))
    setup += buffer_setup(channel_ones, (1, channels, 1, 1), filled=True) + buffer_setup(spatial_ones, (1, 1, height, width), filled=True)
    forward = _reads(q.bottom(0), q.param(0), channel_ones, spatial_ones) + _writes(q.top(0), buffer, norm)
    backward = _reads(q.top(0), q.bottom(0), q.param(0), norm) + (read(q.top(0), "diff"), write(q.bottom(0), "diff"))
    backward += _writes(buffer, by_channel, by_place) + ((write(q.param(0), "diff"),) if q.param_propagate_down[0] else ())
    return LayerMemory(setup=setup, forward=forward, backward=backward, notes=_bare_normalize_note(q))


HAPPYNEAR_NORMALIZE = "happynear/caffe-windows (ms) src/caffe/layers/normalize_layer.cpp/.cu, include/caffe/layers/normalize_layer.hpp @967eedf2"


def _happynear_normalize_memory(q: MemoryQuery) -> LayerMemory:
    """happynear's normalize_layer.cpp/.cu (a layer with ``normalize_param``).  Reshape
    shapes ``squared_`` like the bottom and ``norm_`` [N, 1, H, W] (and the second top, the
    norm, when there is one).  Forward reads the bottom and writes the top, ``squared_`` and
    the norm (the second top, else ``norm_``).  Backward takes the top's diff and data, the
    bottom's data, ``squared_``, the norm and the bottom's diff before its propagate_down
    test; the GPU code also keeps its per-place dot product in ``norm_``'s diff; with
    ``bp_norm`` and two tops it reads the second top's diff."""
    num, channels, height, width = _nchw(q.bottoms[0])
    squared, own_norm = q.buffer("squared"), q.buffer("norm")
    norm = q.top(1) if len(q.tops) == 2 else own_norm
    setup = buffer_setup(squared, (num, channels, height, width)) + buffer_setup(own_norm, (num, 1, height, width))
    forward = (read(q.bottom(0)), write(q.top(0)), write(squared), write(norm))
    backward = (read(q.top(0), "diff"), read(q.top(0)), read(q.bottom(0)), read(squared), read(norm), write(q.bottom(0), "diff"))
    if q.device == "gpu":
        backward += (write(own_norm, "diff"),)
    if q.proto.normalize_param.bp_norm and len(q.tops) == 2:
        backward += (read(q.top(1), "diff"),)
    return LayerMemory(setup=setup, forward=forward, backward=backward)


def _any_normalize_memory(q: MemoryQuery) -> LayerMemory:
    """happynear's Normalize when the layer gives ``normalize_param``, else ssd's."""
    return _happynear_normalize_memory(q) if q.proto.HasField("normalize_param") else _normalize_memory(q)


def _bare_normalize_note(q: MemoryQuery) -> tuple[str, ...]:
    """Two forks register "Normalize": ssd's (norm_param) and happynear/caffe-windows'
    (normalize_param; NormFace and AM-Softmax nets use it bare).  A bare one is taken as
    ssd's, and the report says so."""
    if q.proto.HasField("norm_param"):
        return ()
    note = (
        f"layer '{q.layer.name}' (Normalize) has no norm_param: figured as weiliu89 ssd's Normalize (a scale parameter, "
        "buffers of one image); happynear/caffe-windows' Normalize, which NormFace/AM-Softmax nets use bare, has no parameter "
        "and keeps squared_ like the bottom and norm_ [N, 1, H, W] instead"
    )
    return (note,)


# SSD's normalize_layer.cpp/.cu and happynear's: the top, norm_ and buffers from the bottom and the scale.
@layer("Normalize", "forks", bottoms=ONE, tops=Arity(1, 2), source=SSD + "normalize_layer.cpp; " + HAPPYNEAR_NORMALIZE, memory=_any_normalize_memory, recompute=PURE_CHEAP)
def _normalize(q: ShapeQuery) -> LayerShapes:
    """ssd's: L2 normalisation with a learned scale, one scalar (channel_shared) or one per
    channel.  happynear's (``normalize_param``; MinTopBlobs 1, MaxTopBlobs 2): the top like
    the bottom's (num, channels, height, width), the second top the norm (num, 1, height,
    width); no parameter."""
    bottom = q.bottoms[0]
    if q.proto.HasField("normalize_param"):
        num, channels, height, width = legacy4(q, bottom)
        q.check(q.proto.normalize_param.normalize_type in ("L2", "L1"), f"normalize_type '{q.proto.normalize_param.normalize_type}' is not implemented (L2 or L1)")
        return LayerShapes(tops=((num, channels, height, width), (num, 1, height, width))[: len(q.layer.tops)])
    q.check(len(q.layer.tops) < 2, "ssd's Normalize takes exactly 1 top (a second one is happynear's, with normalize_param)")
    q.check(len(bottom) >= 2, f"Number of axes of bottom blob must be >=2 (got {format_shape(bottom)})")
    channels = legacy_dim(q, bottom, 1)
    scale: Shape = () if q.proto.norm_param.channel_shared else (channels,)
    return LayerShapes(tops=(bottom,), params=(scale,))


def _permute_memory(q: MemoryQuery) -> LayerMemory:
    """permute_layer.cpp.  LayerSetUp and Reshape write the int blobs ``permute_order_``,
    ``old_steps_``, ``new_steps_`` [num_axes, 1, 1, 1].  When the order changes nothing,
    Forward shares the bottom's data and Backward gives the bottom the top's diff; else
    Forward writes the top and Backward writes both diffs, whatever propagate_down says."""
    axes = len(q.bottoms[0])
    steps = tuple(q.buffer(name) for name in ("permute_order", "old_steps", "new_steps"))
    setup: tuple[Action, ...] = ()
    for blob in steps:
        setup += buffer_setup(blob, (axes, 1, 1, 1), "int", filled=True)
    given = list(q.proto.permute_param.order)
    if given + [axis for axis in range(axes) if axis not in given] == list(range(axes)):  # need_permute_ false
        return LayerMemory(setup=setup, forward=(Share(q.top(0), q.bottom(0), "data"),), backward=(Share(q.bottom(0), q.top(0), "diff"),))
    # Forward takes the bottom through mutable_cpu_data (Permute() wants a non-const pointer)
    # but only reads it: a read for the liveness of its value.
    forward = (read(q.bottom(0)), write(q.top(0))) + _reads(*steps)
    # Backward likewise takes the top diff mutable and reads it into the bottom diff.
    return LayerMemory(setup=setup, forward=forward, backward=(read(q.top(0), "diff"), write(q.bottom(0), "diff")))


# permute_layer.cpp/.cu Forward: an index permutation of the bottom.
@layer("Permute", "forks", bottoms=ONE, tops=ONE, source=SSD + "permute_layer.cpp", memory=_permute_memory, recompute=PURE_CHEAP)
def _permute(q: ShapeQuery) -> LayerShapes:
    """The bottom's axes in permute_param.order, the unnamed axes following in their order."""
    bottom = q.bottoms[0]
    order: list[int] = []
    for axis in q.proto.permute_param.order:
        q.check(axis < len(bottom), f"order {axis} should be less than the input dimension {len(bottom)}")
        q.check(axis not in order, f"there are duplicate orders ({axis})")
        order.append(axis)
    order += [axis for axis in range(len(bottom)) if axis not in order]
    return LayerShapes(tops=(tuple(bottom[axis] for axis in order),))


def _prior_count(q: ShapeQuery) -> int:
    """PriorBoxLayer::LayerSetUp's num_priors_: aspect ratios (1, each new r, 1/r with flip) x min sizes + max sizes."""
    param = q.proto.prior_box_param
    q.check(len(param.min_size) > 0, "must provide min_size.")
    for size in param.min_size:
        q.check(size > 0, "min_size must be positive.")
    ratios = [1.0]
    for ratio in param.aspect_ratio:
        ratio = float32(ratio)  # PriorBox compares aspect ratios as floats
        if any(abs(ratio - known) < 1e-6 for known in ratios):
            continue
        ratios.append(ratio)
        if param.flip:
            ratios.append(float32(c_divide(1.0, ratio)))  # 1./ar: a ratio of 0 gives inf, as in Caffe
    count = len(ratios) * len(param.min_size)
    if param.max_size:
        q.check(len(param.max_size) == len(param.min_size), "max_size must be given once per min_size")
        for low, high in zip(param.min_size, param.max_size):
            q.check(high > low, "max_size must be greater than min_size.")
        count += len(param.max_size)
    return count


def _prior_box_checks(q: ShapeQuery) -> None:
    """The remaining LayerSetUp CHECKs of PriorBox: variances, image size, step."""
    param = q.proto.prior_box_param
    if len(param.variance) > 1:
        q.check(len(param.variance) == 4, "Must and only provide 4 variance.")
    for variance in param.variance:
        q.check(variance > 0, "variance must be positive")
    explicit_image = _set(param, "img_h", "img_w")
    if explicit_image:
        q.check(not param.HasField("img_size"), "Either img_size or img_h/img_w should be specified; not both.")
        q.check(int32(param.img_h) > 0, "img_h should be larger than 0.")
        q.check(int32(param.img_w) > 0, "img_w should be larger than 0.")
    elif param.HasField("img_size"):
        q.check(int32(param.img_size) > 0, "img_size should be larger than 0.")
    if _set(param, "step_h", "step_w"):
        q.check(not param.HasField("step"), "Either step or step_h/step_w should be specified; not both.")
        q.check(param.step_h > 0, "step_h should be larger than 0.")
        q.check(param.step_w > 0, "step_w should be larger than 0.")
    elif param.HasField("step"):
        q.check(param.step > 0, "step should be larger than 0.")
    # Forward reads the image size from bottom[1] unless img_size / img_h, img_w is given.
    if not explicit_image and not param.HasField("img_size"):
        q.check(len(q.bottoms) >= 2, "PriorBox needs the image as bottom[1] when img_size (or img_h/img_w) is not set")


# prior_box_layer.hpp declares ExactBottomBlobs() (sic: no "Num"), which overrides nothing,
# so Caffe checks no bottom count; Reshape reads bottom[0], Forward bottom[1].
def _prior_box_memory(q: MemoryQuery) -> LayerMemory:
    """prior_box_layer.cpp: Forward writes the top from the bottoms' shapes only (their data
    is never read); Backward does nothing."""
    return LayerMemory(forward=(write(q.top(0)),))


# prior_box_layer.cpp Forward: boxes from the bottoms' shapes and the parameters alone.
@layer("PriorBox", "forks", bottoms=Arity(1), tops=ONE, source=SSD + "prior_box_layer.cpp", memory=_prior_box_memory, recompute=PURE_CHEAP)
def _prior_box(q: ShapeQuery) -> LayerShapes:
    """[1, 2, layer_h * layer_w * num_priors * 4]: every prior's box and its variances."""
    priors = _prior_count(q)
    _prior_box_checks(q)
    _, _, height, width = legacy4(q, q.bottoms[0])
    length = height * width * priors * BOX_COORDS
    q.check(length > 0, f"the feature map {format_shape(q.bottoms[0])} yields no prior boxes")
    return LayerShapes(tops=(reshaped(q, (1, PRIOR_CHANNELS, length)),))


def _check_predictions(q: ShapeQuery, num_classes: int, share_location: bool) -> int:
    """DetectionOutput/MultiBoxLoss Reshape: loc, conf and priors agree. Returns the prior count."""
    loc, conf, priors = q.bottoms[0], q.bottoms[1], q.bottoms[2]
    q.check(
        legacy_dim(q, loc, 0) == legacy_dim(q, conf, 0),
        f"loc {format_shape(loc)} and conf {format_shape(conf)} predictions must have the same num",
    )
    num_priors = legacy_dim(q, priors, 2) // BOX_COORDS
    loc_classes = 1 if share_location else num_classes
    q.check(
        num_priors * loc_classes * BOX_COORDS == legacy_dim(q, loc, 1),
        f"Number of priors must match number of location predictions: {num_priors} priors x {loc_classes} x 4 "
        f"!= {legacy_dim(q, loc, 1)} channels of {format_shape(loc)}",
    )
    q.check(
        num_priors * num_classes == legacy_dim(q, conf, 1),
        f"Number of priors must match number of confidence predictions: {num_priors} priors x {num_classes} classes "
        f"!= {legacy_dim(q, conf, 1)} channels of {format_shape(conf)}",
    )
    return num_priors


def _detection_output_memory(q: MemoryQuery) -> LayerMemory:
    """detection_output_layer.cpp: LayerSetUp shapes ``bbox_preds_`` like the locations,
    ``bbox_permute_`` too without share_location, ``conf_permute_`` like the confidences
    (only Forward_gpu fills them: a GPU build also allocates their data).  Forward_cpu reads
    the predictions and priors and writes the top (the most detections it can keep, see
    the shape rule); Backward is NOT_IMPLEMENTED."""
    setup = buffer_setup(q.buffer("bbox_preds"), q.bottoms[0]) + (() if q.proto.detection_output_param.share_location else buffer_setup(q.buffer("bbox_permute"), q.bottoms[0]))
    setup += buffer_setup(q.buffer("conf_permute"), q.bottoms[1])
    return LayerMemory(setup=setup, forward=_reads(q.bottom(0), q.bottom(1), q.bottom(2)) + (write(q.top(0)),))


# detection_output_layer.cpp/.cu Forward: the net's detections (NMS), read by no Backward;
# with save_output_param it also counts images (name_count_) and writes result files.
_DETECTION_OUTPUT_RECOMPUTE = never("its top is the net's detections, read by no Backward; with save_output_param its Forward counts images and writes files")


@layer("DetectionOutput", "forks", bottoms=Arity(3, 4), tops=ONE, source=SSD + "detection_output_layer.cpp", memory=_detection_output_memory, recompute=_DETECTION_OUTPUT_RECOMPUTE)
def _detection_output(q: ShapeQuery) -> LayerShapes:
    """[1, 1, kept, 7]: the detections kept after NMS, an upper bound of what Forward allocates.

    Reshape sizes the top [1, 1, 1, 7]; each Forward reshapes it to the detections kept, a
    data-dependent count.  As a blob never shrinks its allocation, caffemem uses the most
    Forward can keep: per image min(keep_top_k, classes x min(nms top_k, priors)) (classes
    without the background), at least one row per image (the "no detection" rows).
    """
    param = q.proto.detection_output_param
    q.check(param.HasField("num_classes"), "Must specify num_classes")
    num_classes = int32(param.num_classes)
    nms = param.nms_param
    q.check(nms.nms_threshold >= 0, "nms_threshold must be non negative.")
    q.check(0 < nms.eta <= 1, "nms_param.eta must be in (0, 1]")
    num_priors = _check_predictions(q, num_classes, param.share_location)

    background = int32(param.background_label_id)
    classes = num_classes - (1 if 0 <= background < num_classes else 0)
    per_class = min(num_priors, nms.top_k) if nms.HasField("top_k") and nms.top_k > -1 else num_priors
    per_image = classes * per_class
    if param.keep_top_k > -1:
        per_image = min(per_image, param.keep_top_k)
    images = legacy_dim(q, q.bottoms[0], 0)
    return LayerShapes(tops=(reshaped(q, (1, 1, images * max(per_image, 1), DETECTION_FIELDS)),))


# DetectionEvaluate rows: [image_id, label, confidence, true_pos, false_pos].
EVALUATION_FIELDS = 5


def _detection_evaluate_memory(q: MemoryQuery) -> LayerMemory:
    """detection_evaluate_layer.cpp: Reshape (so SetUp too) reads the detections'
    cpu_data to count the valid ones; Forward_cpu (there is no GPU version) reads the
    detections and the ground truth and writes the top; Backward is NOT_IMPLEMENTED."""
    return LayerMemory(setup=(read(q.bottom(0)),), forward=_reads(q.bottom(0), q.bottom(1)) + (write(q.top(0)),))


@layer("DetectionEvaluate", "forks", bottoms=TWO, tops=ONE, source=SSD + "detection_evaluate_layer.cpp", memory=_detection_evaluate_memory, recompute=OUTPUT)
def _detection_evaluate(q: ShapeQuery) -> LayerShapes:
    """[1, 1, positive classes + valid detections, 5], an upper bound.

    Reshape counts the detection rows whose label is not -1 (the "no detection" rows), a
    data-dependent count; caffemem counts every row of the detections (DetectionOutput's
    bound), so the top is the most Forward can need.  The positive classes are
    num_classes, less one unless background_label_id is -1.
    """
    param = q.proto.detection_evaluate_param
    q.check(param.HasField("num_classes"), "Must provide num_classes.")
    q.check(param.overlap_threshold > 0, "overlap_threshold must be non negative.")
    detections, truth = q.bottoms
    for name, shape, width in (("detections", detections, DETECTION_FIELDS), ("ground truth", truth, BBOX_LABEL_FIELDS)):
        q.check(
            (legacy_dim(q, shape, 0), legacy_dim(q, shape, 1), legacy_dim(q, shape, 3)) == (1, 1, width),
            f"the {name} must be [1, 1, rows, {width}], got {format_shape(shape)}",
        )
    classes = int32(param.num_classes)
    positive = classes if int32_wrapped(param.background_label_id) == -1 else classes - 1  # an int member
    return LayerShapes(tops=((1, 1, positive + legacy_dim(q, detections, 2), EVALUATION_FIELDS),))


def _multibox_location(q: MemoryQuery, pred: BlobId, gt: BlobId, loss: BlobId, elements: int) -> tuple[tuple[Action, ...], ...]:
    """(setup, forward, backward) of MultiBoxLoss's location part: ``loc_pred_``, ``loc_gt_``
    [1, 4] at SetUp, [1, 4 x matches] in Forward, into an inner SmoothL1Loss (ssd
    smooth_L1_loss_layer.cpp: ``diff_``, ``errors_`` with the legacy 4 axes) or
    EuclideanLoss (``diff_`` like its bottom) of loss_weight loc_weight."""
    param = q.proto.multibox_loss_param
    smooth = param.loc_loss_type == param.SMOOTH_L1
    diff, errors = q.buffer("loc_loss_layer/diff"), q.buffer("loc_loss_layer/errors")

    def shaped(size: int) -> tuple[Action, ...]:
        blobs = (Reshape(pred, (1, size)), Reshape(gt, (1, size)), Reshape(loss, ()))
        return blobs + ((Reshape(diff, (1, size, 1, 1)), Reshape(errors, (1, size, 1, 1))) if smooth else (Reshape(diff, (1, size)),))

    weighted = (write(loss, "diff"),) if param.loc_weight else ()
    setup = (Reshape(loss, (1,)),) + shaped(BOX_COORDS) + weighted
    forward = shaped(elements) + _writes(pred, gt) + _reads(pred, gt) + _writes(diff, loss) + ((write(errors),) if smooth else ())
    backward = (write(q.bottom(0), "diff"), write(diff), read(loss, "diff"), write(pred, "diff"), read(q.top(0), "diff"))
    return setup, forward, backward


def _multibox_confidence(q: MemoryQuery, pred: BlobId, gt: BlobId, loss: BlobId, rows: int) -> LayerMemory:
    """MultiBoxLoss's confidence part: ``conf_pred_``,
    ``conf_gt_`` with one row at SetUp, ``rows`` in Forward, into an inner SoftmaxWithLoss
    (prob_, its Softmax's buffers) or SigmoidCrossEntropyLoss (sigmoid_output_), built with
    an explicit loss_weight 1: their inner layer's output diff is written at SetUp (and
    dropped when Forward grows it).  Without mining, conf_pred_ shares the confidences'
    data, and Backward finally gives them conf_pred_'s diff (ShareDiff).  The
    SoftmaxWithLoss is built from a fresh LayerParameter (engine DEFAULT, the build's), its
    Softmax through LayerRegistry: with cuDNN a CuDNNSoftmaxLayer and its handle."""
    param = q.proto.multibox_loss_param
    classes = int32(param.num_classes)
    mining = param.mining_type != param.NONE
    softmax = param.conf_loss_type == param.SOFTMAX
    inner = q.buffer("conf_loss_layer/prob" if softmax else "conf_loss_layer/sigmoid_output")

    def shaped(gt_shape: Shape, pred_shape: Shape) -> tuple[Action, ...]:
        """conf_gt_, conf_pred_ reshaped, then the inner loss layer's Reshape."""
        blobs = (Reshape(gt, gt_shape), Reshape(pred, pred_shape), Reshape(loss, ()), Reshape(inner, pred_shape))
        return blobs + (softmax_memory(q, pred, inner, pred_shape, 1, "conf_loss_layer/softmax/", caffe_pb2.SoftmaxParameter.DEFAULT).setup if softmax else ())

    handles = 0
    if softmax:
        setup, forward = shaped((1,), (1, classes)), shaped((rows,), (rows, classes))
        inner_softmax = softmax_memory(q, pred, inner, (rows, classes), 1, "conf_loss_layer/softmax/", caffe_pb2.SoftmaxParameter.DEFAULT)
        run, handles = inner_softmax.forward, inner_softmax.cudnn_handles
    else:
        setup, forward = shaped((1, classes), (1, classes)), shaped((1, rows, classes), (1, rows, classes))
        run = (read(pred), write(inner))
    setup = (Reshape(loss, (1,)),) + setup + (write(inner, "diff"), write(loss, "diff"))
    forward += (() if mining else (Share(pred, q.bottom(1), "data"),)) + _writes(pred, gt) + run + (read(gt), write(loss))
    backward = (write(q.bottom(1), "diff"), read(inner), read(gt), write(pred, "diff"), read(loss, "diff"), read(q.top(0), "diff"))
    backward += () if mining else (Share(q.bottom(1), pred, "diff"),)
    return LayerMemory(setup=setup, forward=forward, backward=backward, cudnn_handles=handles)


def _multibox_loss_memory(q: MemoryQuery) -> LayerMemory:
    """multibox_loss_layer.cpp: a location loss and a confidence loss layer, each built in
    LayerSetUp on tiny internal blobs, reshaped by Forward to the matches it found, which
    depend on the data.  caffemem sizes them for the most there can be: every prior
    matched (4 x all location predictions) and every prior a confidence row (exact
    without mining).  Backward writes the location and confidence diffs when asked
    (propagate_down 0 and 1)."""
    names = ("loc_pred", "loc_gt", "loc_loss", "conf_pred", "conf_gt", "conf_loss")
    loc_pred, loc_gt, loc_loss, conf_pred, conf_gt, conf_loss = (q.buffer(name) for name in names)
    loc = _multibox_location(q, loc_pred, loc_gt, loc_loss, count(q.bottoms[0]))
    conf = _multibox_confidence(q, conf_pred, conf_gt, conf_loss, count(q.bottoms[1]) // int32(q.proto.multibox_loss_param.num_classes))
    forward = _reads(*(q.bottom(i) for i in range(4))) + loc[1] + conf.forward + (write(q.top(0)),)
    backward = (loc[2] if q.propagate_down[0] else ()) + (conf.backward if q.propagate_down[1] else ())
    note = layer_note(q, "its buffers grow with the matches found in the data; counted for every prior matched (an upper bound)")
    return LayerMemory(setup=loc[0] + conf.setup, forward=forward, backward=backward, notes=(note,), cudnn_handles=conf.cudnn_handles)


@layer(
    "MultiBoxLoss",
    "forks",
    bottoms=Arity.exactly(4),
    tops=ONE,
    auto_top=True,
    no_force_backward=(1,),
    source=SSD + "multibox_loss_layer.cpp, smooth_L1_loss_layer.cpp",
    memory=_multibox_loss_memory,
    recompute=LOSS,
)
def _multibox_loss(q: ShapeQuery) -> LayerShapes:
    """SSD's loss over loc, conf, priors and ground truth: a scalar, no parameters."""
    param = q.proto.multibox_loss_param
    q.check(param.HasField("num_classes"), "Must provide num_classes.")
    num_classes = int32(param.num_classes)
    q.check(num_classes >= 1, "num_classes should not be less than 1.")
    mining = param.mining_type != param.NONE
    if param.HasField("do_neg_mining"):
        q.check(param.do_neg_mining == mining, "do_neg_mining must agree with mining_type (do_neg_mining is deprecated)")
    if mining:
        q.check(param.share_location, "Currently only support negative mining if share_location is true.")
    if param.conf_loss_type == param.SOFTMAX:
        q.check(
            0 <= int32(param.background_label_id) < num_classes,
            "background_label_id should be within [0, num_classes) for Softmax.",
        )
    loss = loss_layer_checks(q)  # ssd's LossLayer is master's: SetUp weight 1, Reshape shape(0) check
    _check_predictions(q, num_classes, param.share_location)
    return LayerShapes(tops=(loss,))


# --------------------------------------------------------------------------- other forks


def _smooth_l1_loss_memory(q: MemoryQuery) -> LayerMemory:
    """py-faster-rcnn smooth_L1_loss_layer.cpp (Reshape) and smooth_L1_loss_layer.cu: its
    Forward_cpu/Backward_cpu are NOT_IMPLEMENTED, so this follows the GPU code.  Reshape
    shapes ``diff_``, ``errors_`` and ``ones_`` with the bottom's legacy 4 axes and writes
    the ones.  Forward writes ``diff_`` and ``errors_`` (reading the inside and outside
    weights when given); Backward rewrites ``diff_`` and writes the diff of each of the
    first two bottoms propagate_down asks for."""
    shape = _nchw(q.bottoms[0])
    diff, errors, ones = q.buffer("diff"), q.buffer("errors"), q.buffer("ones")
    setup = buffer_setup(diff, shape) + buffer_setup(errors, shape) + buffer_setup(ones, shape, filled=True)
    forward = _reads(*(q.bottom(i) for i in range(len(q.bottoms))), ones) + _writes(diff, errors, q.top(0))
    backward: tuple[Action, ...] = (write(diff),)
    for i in (0, 1):
        if q.propagate_down[i]:
            backward += (read(q.top(0), "diff"), write(q.bottom(i), "diff")) + _reads(*(q.bottom(j) for j in range(2, len(q.bottoms))))
    return LayerMemory(setup=setup, forward=forward, backward=backward)


# daijifeng001/caffe-rfcn@4bcfcd10 src/caffe/layers/smooth_L1_loss_layer.cpp, .cu and
# include/caffe/fast_rcnn_layers.hpp@a7641303: R-FCN's SmoothL1Loss (same type string) takes
# 2 or 3 bottoms (one weight blob, no sigma, no ones_) and 1 or 2 tops (the second: each
# RoI's loss), used by models/rfcn_prototxts/*_OHEM_*/train_val.prototxt.  It is the code of
# Microsoft/caffe's SmoothL1LossOHEM (fork_segdet.py), whose rule it shares.  py-faster-rcnn
# refuses three bottoms and a second top, so those can only mean this fork; two or four
# bottoms and one top keep py-faster-rcnn's rule.
RFCN_SMOOTH_L1 = "daijifeng001/caffe-rfcn@4bcfcd10 src/caffe/layers/smooth_L1_loss_layer.cpp, .cu"


def _is_rfcn_smooth_l1(bottoms: int, tops: int) -> bool:
    """R-FCN's variant: three bottoms (one weight blob) or the per-RoI second top."""
    return bottoms == 3 or tops == 2


def _smooth_l1_loss_dispatch(q: MemoryQuery) -> LayerMemory:
    """py-faster-rcnn's rule, or R-FCN's (= SmoothL1LossOHEM's) for its bottoms and tops."""
    if _is_rfcn_smooth_l1(len(q.bottoms), len(q.tops)):
        return smooth_l1_ohem_memory(q)
    return _smooth_l1_loss_memory(q)


@layer(
    "SmoothL1Loss",
    "forks",
    bottoms=Arity(2, 4),
    tops=Arity(1, 2),
    auto_top=True,
    source="rbgirshick/caffe-fast-rcnn faster-rcnn src/caffe/layers/smooth_L1_loss_layer.cpp, smooth_L1_loss_layer.cu; "
    "three bottoms or two tops: " + RFCN_SMOOTH_L1,
    memory=_smooth_l1_loss_dispatch,
    recompute=LOSS,
)
def _smooth_l1_loss(q: ShapeQuery) -> LayerShapes:
    """py-faster-rcnn's loss: prediction, target (+ inside and outside weights), all alike.
    R-FCN's: prediction, target (+ one weight blob), and optionally each RoI's loss."""
    if _is_rfcn_smooth_l1(len(q.bottoms), len(q.layer.tops)):
        q.check(len(q.bottoms) <= 3, "R-FCN's SmoothL1Loss (a per-RoI loss top) takes 2 or 3 bottoms")
        shapes = smooth_l1_loss_ohem_shapes(q)
        return shapes if q.layer.tops else LayerShapes(tops=((),))  # AutoTopBlobs: the anonymous loss
    # That fork's LossLayer::Reshape compares num(), then the other legacy axes are compared.
    first = legacy4(q, q.bottoms[0])
    q.check(first[0] == legacy_dim(q, q.bottoms[1], 0), "The data and label should have the same number.")
    for i, other in enumerate(q.bottoms[1:], start=1):
        q.check(
            legacy4(q, other)[1:] == first[1:],
            f"bottom[{i}] {format_shape(other)} must match bottom[0] {format_shape(q.bottoms[0])} in channels, height and width",
        )
    return LayerShapes(tops=((),))


def _label_specific_add_memory(q: MemoryQuery) -> LayerMemory:
    """label_specific_add.cpp and .cu: Forward reads the scores and the labels and, unless in
    place, copies the scores to the top; in TRAIN (or with transform_test) it then adds
    the margin to each sample's own-label score, and writes the bias to a second top.
    Backward, unless in place, copies the top's diff to the scores' (propagate_down[0])."""
    in_place = q.layer.tops[0] == q.layer.bottoms[0]
    forward: tuple[Action, ...] = (read(q.bottom(0)), read(q.bottom(1))) + (() if in_place else (write(q.top(0)),))
    param = q.proto.label_specific_add_param
    if len(q.layer.tops) == 2 and (q.phase == "TRAIN" or param.transform_test):
        forward += (write(q.top(1)),)
    backward: tuple[Action, ...] = ()
    if not in_place and q.propagate_down[0]:
        backward = (read(q.top(0), "diff"), write(q.bottom(0), "diff"))
    return LayerMemory(forward=forward, backward=backward)


@recompute_rule
def _label_specific_add_recompute(proto, phase: str) -> Recompute:
    """label_specific_add.cpp/.cu Forward: in TEST it only copies the scores (transform_test_
    is ``transform_test & phase == TRAIN``); in TRAIN it adds the margin to each sample's
    own-label score and, when annealing (``bias_base`` set), recomputes the margin from
    ``iteration_`` and increments it: a counter the next step reads."""
    if phase == "TRAIN" and proto.label_specific_add_param.HasField("bias_base"):
        return Recompute(False, "annealing (bias_base) its Forward counts iterations (iteration_++)")
    return CHEAP_ANSWER


@layer(
    "LabelSpecificAdd",
    "forks",
    bottoms=Arity(2),
    tops=Arity(1, 2),
    source="happynear/caffe-windows ms src/caffe/layers/label_specific_add.cpp, .cu, label_specific_add_layer.hpp @967eedf2",
    memory=_label_specific_add_memory,
    recompute=_label_specific_add_recompute,
)
def _label_specific_add(q: ShapeQuery) -> LayerShapes:
    """AM-Softmax's additive margin (happynear/AMSoftmax prototxt/face_train_test.prototxt):
    Reshape shapes the top like the scores (unless in place) and a second top, the bias
    used, as [1].  Forward indexes each sample's row by its label: one label a sample."""
    scores, labels = q.bottoms[0], q.bottoms[1]
    q.check(count(labels) == legacy4(q, scores)[0], f"one label a sample: {format_shape(labels)} for scores {format_shape(scores)}")
    return LayerShapes(tops=(scores,) + (((1,),) if len(q.layer.tops) == 2 else ()))


def _axpy_memory(q: MemoryQuery) -> LayerMemory:
    """axpy_layer.cpp.  Reshape writes the ones of ``spatial_sum_multiplier_`` [count(x, 2)].
    Forward writes the top from scale, x and y.  Backward reads the top's diff first; for
    the scale (propagate_down[0]) it writes x's diff as scratch and the scale's diff; x's
    diff for propagate_down[1]; y's for propagate_down[2]."""
    ones = q.buffer("spatial_sum_multiplier")
    setup = buffer_setup(ones, (count(q.bottoms[1][2:]),), filled=True)
    backward: tuple[Action, ...] = (read(q.top(0), "diff"),)
    if q.propagate_down[0]:
        backward += (read(q.bottom(1)), read(ones)) + _writes(q.bottom(1), q.bottom(0), part="diff")
    if q.propagate_down[1]:
        backward += (read(q.bottom(0)), write(q.bottom(1), "diff"))
    if q.propagate_down[2]:
        backward += (write(q.bottom(2), "diff"),)
    return LayerMemory(setup=setup, forward=_reads(q.bottom(0), q.bottom(1), q.bottom(2)) + (write(q.top(0)),), backward=backward)


# axpy_layer.cpp/.cu Forward: scale * x + y per channel.
@layer("Axpy", "forks", bottoms=Arity.exactly(3), tops=ONE, source="hujie-frank/SENet src/caffe/layers/axpy_layer.cpp", memory=_axpy_memory, recompute=PURE_CHEAP)
def _axpy(q: ShapeQuery) -> LayerShapes:
    """scale [N, C(, 1, 1)] * x + y, channel-wise: the top is shaped like x (and y)."""
    scale, x, y = q.bottoms
    q.check(
        dim(q, scale, 0) == dim(q, x, 0) and dim(q, scale, 1) == dim(q, x, 1),
        f"scale {format_shape(scale)} must match x {format_shape(x)} in its first two axes",
    )
    if len(scale) == 4:
        q.check(scale[2] == 1 and scale[3] == 1, f"a 4-D scale must be [N, C, 1, 1], got {format_shape(scale)}")
    q.check(x == y, f"x {format_shape(x)} and y {format_shape(y)} must have the same shape")
    return LayerShapes(tops=(x,))

"""Layers of Caffe forks (other than vision layers), each checked against its fork's source.

The nets of the corpus that need a fork use these types outside BVLC master:

- yjxiong/caffe action_recog (TSN) and hszhao/PSPNet: ``BN``, ``VideoData``;
- alexgkendall/caffe-segnet (SegNet): ``BN`` (its own variant), ``DenseImageData``;
- facebook/C3D C3D-v1.1: ``VideoData`` (its own variant, 5-D);
- weiliu89/caffe ssd: ``AnnotatedData``, ``Normalize``, ``Permute``, ``PriorBox``,
  ``DetectionOutput``, ``MultiBoxLoss``;
- rbgirshick/caffe-fast-rcnn (py-faster-rcnn): ``SmoothL1Loss``;
- hujie-frank/SENet: ``Axpy``;
- s9xie/hed: ``ImageLabelmapData``.

Where two forks registered different layers under one type name (BN, VideoData), the
rule tells them apart by the parameters only one of them has (the merged schema keeps
both sets of fields, see proto/caffe.proto).
"""

from __future__ import annotations

import struct
from typing import Any

from ..graph import LayerShapes, Shape
from .blob import dim, format_shape, int32, legacy4, legacy_dim, reshaped
from .data import (
    COLOR_CHANNELS,
    Dim,
    Template,
    both_or_neither,
    color_channels,
    follow_data,
    image_size,
    positive_batch,
    resolve_tops,
)
from .loss import _loss as loss_layer_checks
from .registry import Arity, ShapeQuery, layer

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
# yjxiong ReadSegmentFlowToDatum stacks an x and a y flow image per frame.
FLOW_CHANNELS = 2


def _set(message: Any, *fields: str) -> bool:
    """Does the message set any of these (optional) fields?"""
    return any(message.HasField(name) for name in fields)


def _float32(value: float) -> float:
    """A value as the C++ ``float`` holding it (PriorBox compares aspect ratios as floats)."""
    return struct.unpack("f", struct.pack("f", value))[0]


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


@layer("BN", "forks", bottoms=ONE, tops=Arity(1, 3), source=YJXIONG + "bn_layer.cpp; SegNet variant: " + SEGNET + "bn_layer.cpp")
def _bn(q: ShapeQuery) -> LayerShapes:
    """Batch normalisation with its own slope/bias and running mean/variance.

    yjxiong/caffe (TSN): four blobs of shape [1, C]; the top is shaped like the bottom.
    hszhao/PSPNet's copy makes the same four blobs [1, C, 1, 1] (same count; its bn_param
    cannot be told apart, so the yjxiong shapes are reported).  SegNet's layer (bn_param
    with scale_filler / shift_filler / bn_mode) has two [1, C, 1, 1] blobs instead.
    """
    if _set(q.proto.bn_param, "scale_filler", "shift_filler", "bn_mode"):
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


@layer("VideoData", "forks", bottoms=NONE, tops=TWO, is_data=True, source=YJXIONG + "video_data_layer.cpp; C3D variant: " + C3D + "video_data_layer.cpp")
def _video_data(q: ShapeQuery) -> LayerShapes:
    """Video clips: yjxiong's (TSN, 4-D, frames stacked in channels) or C3D's (5-D) layer.

    A layer setting one of C3D's own fields (use_image, root_folder, ...) and none of
    yjxiong's (num_segments, modality, ...) is C3D's; any other is read as yjxiong's.
    """
    param = q.proto.video_data_param
    if _set(param, *_C3D_VIDEO_FIELDS) and not _set(param, *_TSN_VIDEO_FIELDS):
        return _c3d_video(q)
    return _tsn_video(q)


@layer("DenseImageData", "forks", bottoms=NONE, tops=TWO, is_data=True, source=SEGNET + "dense_image_data_layer.cpp")
def _dense_image_data(q: ShapeQuery) -> LayerShapes:
    """Image and per-pixel label image: data [batch, 3 or 1, H, W], label [batch, 1, H, W].

    H, W: transform_param.crop_size, else crop_height/crop_width, else new_height/new_width,
    else the first image's size (a --input for data then sizes the label too).
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
        size = image_size(q, param.new_height, param.new_width, 0)
    size = follow_data(q, size)
    batch = int32(param.batch_size)
    templates: list[Template] = [(batch, color_channels(param.is_color)) + size, (batch, 1) + size]
    return resolve_tops(q, templates, "without a crop or new_height/new_width a DenseImageData layer takes the first image's size")


@layer("ImageLabelmapData", "forks", bottoms=NONE, tops=TWO, is_data=True, source="s9xie/hed src/caffe/layers/image_labelmap_data_layer.cpp")
def _image_labelmap_data(q: ShapeQuery) -> LayerShapes:
    """HED: data [batch, 3 or 1, H, W] and its edge map [batch, 1, H, W] (image_data_param, crop_size)."""
    param = q.proto.image_data_param
    both_or_neither(q, param.new_height, param.new_width, "new")
    size = follow_data(q, image_size(q, param.new_height, param.new_width, q.proto.transform_param.crop_size))
    batch = positive_batch(q, param.batch_size, "image_data_param.batch_size")
    templates: list[Template] = [(batch, color_channels(param.is_color)) + size, (batch, 1) + size]
    return resolve_tops(q, templates, "without new_height/new_width or crop_size an ImageLabelmapData layer takes the first image's size")


def _ssd_image_size(q: ShapeQuery, batch: int) -> tuple[Dim, Dim]:
    """ssd DataTransformer::InferBlobShape: resize_param (InferNewSize), then crop_h/crop_w or crop_size."""
    transform = q.proto.transform_param
    crop = int32(transform.crop_size)
    crop_h, crop_w = (crop, crop) if crop else (int32(transform.crop_h), int32(transform.crop_w))
    height: Dim = "H"
    width: Dim = "W"
    if transform.HasField("resize_param"):
        resize = transform.resize_param
        if resize.resize_mode == resize.FIT_SMALL_SIZE:
            q.check(batch == 1, "Only support batch size of 1 for FIT_SMALL_SIZE.")
        else:  # WARP and FIT_LARGE_SIZE_AND_PAD produce exactly height x width (im_transforms.cpp)
            height, width = int32(resize.height), int32(resize.width)
            q.check(height >= crop_h and width >= crop_w, f"crop {crop_h}x{crop_w} exceeds the resized image {height}x{width}")
    return (crop_h or height, crop_w or width)


@layer("AnnotatedData", "forks", bottoms=NONE, tops=Arity(1, 2), is_data=True, source=SSD + "annotated_data_layer.cpp, data_transformer.cpp")
def _annotated_data(q: ShapeQuery) -> LayerShapes:
    """data [batch, C, H, W] (C from the database; H, W from resize/crop); label from the annotations.

    The label is [1, 1, N, 8] with N the boxes of the batch (annotated datums) or [batch, 1, 1, 1]
    (plain datums): both depend on the database, so it always comes from --input.
    """
    batch = int32(q.proto.data_param.batch_size)
    data: Template = (batch, "C") + _ssd_image_size(q, batch)
    label: Template = (1, 1, "N", BBOX_LABEL_FIELDS)
    return resolve_tops(
        q,
        [data, label],
        "an AnnotatedData layer's channels and its label's box count N come from its database "
        "(label is 1,1,N,8 for box annotations, batch,1,1,1 without)",
    )


# --------------------------------------------------------------------------- SSD layers


@layer("Normalize", "forks", bottoms=ONE, tops=ONE, source=SSD + "normalize_layer.cpp")
def _normalize(q: ShapeQuery) -> LayerShapes:
    """L2 normalisation with a learned scale: one scalar (channel_shared) or one per channel."""
    bottom = q.bottoms[0]
    q.check(len(bottom) >= 2, f"Number of axes of bottom blob must be >=2 (got {format_shape(bottom)})")
    channels = legacy_dim(q, bottom, 1)
    scale: Shape = () if q.proto.norm_param.channel_shared else (channels,)
    return LayerShapes(tops=(bottom,), params=(scale,))


@layer("Permute", "forks", bottoms=ONE, tops=ONE, source=SSD + "permute_layer.cpp")
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
        ratio = _float32(ratio)
        if any(abs(ratio - known) < 1e-6 for known in ratios):
            continue
        ratios.append(ratio)
        if param.flip:
            ratios.append(_float32(1.0 / ratio))
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
@layer("PriorBox", "forks", bottoms=Arity(1), tops=ONE, source=SSD + "prior_box_layer.cpp")
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


@layer("DetectionOutput", "forks", bottoms=Arity(3, 4), tops=ONE, source=SSD + "detection_output_layer.cpp")
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


@layer("MultiBoxLoss", "forks", bottoms=Arity.exactly(4), tops=ONE, auto_top=True, no_force_backward=(1,), source=SSD + "multibox_loss_layer.cpp")
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


@layer("SmoothL1Loss", "forks", bottoms=Arity(2, 4), tops=ONE, auto_top=True, source="rbgirshick/caffe-fast-rcnn faster-rcnn src/caffe/layers/smooth_L1_loss_layer.cpp")
def _smooth_l1_loss(q: ShapeQuery) -> LayerShapes:
    """py-faster-rcnn's loss: prediction, target (+ inside and outside weights), all alike."""
    q.check(len(q.bottoms) != 3, "If weights are used, must specify both inside and outside weights")
    # That fork's LossLayer::Reshape compares num(), then the other legacy axes are compared.
    first = legacy4(q, q.bottoms[0])
    q.check(first[0] == legacy_dim(q, q.bottoms[1], 0), "The data and label should have the same number.")
    for i, other in enumerate(q.bottoms[1:], start=1):
        q.check(
            legacy4(q, other)[1:] == first[1:],
            f"bottom[{i}] {format_shape(other)} must match bottom[0] {format_shape(q.bottoms[0])} in channels, height and width",
        )
    return LayerShapes(tops=((),))


@layer("Axpy", "forks", bottoms=Arity.exactly(3), tops=ONE, source="hujie-frank/SENet src/caffe/layers/axpy_layer.cpp")
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

"""Layers of the detection and segmentation forks, each checked against its repository's source.

- ImageSegData, SegAccuracy, MatWrite: DeepLab.  ver2 from talent518/deeplab-public-ver2
  (a mirror of bitbucket deeplab/deeplab-public-ver2, commit 51750fa9); v1 (bitbucket
  deeplab/deeplab-public, V1 enums IMAGE_SEG_DATA, SEG_ACCURACY, MAT_WRITE) from
  TheLegendAli/DeepLab-Context (commit fb04e9e2), which keeps v1's layers.  The V1 upgrade
  maps the enums to ver2's type names.  DeepLab's ``Interp`` (V1 ``INTERP``) is the
  ``Interp`` of :mod:`caffemem.layers.fork_vision`: ver2's interp_layer.cpp is the same code.
- BoxAnnotatorOHEM: daijifeng001/caffe-rfcn (commit 543f8f6a) and Microsoft/caffe (commit
  ed05614c, py-R-FCN's Caffe), identical.  SoftmaxWithLossOHEM and SmoothL1LossOHEM, the
  per-RoI losses the OHEM nets (py-R-FCN ``train_agnostic_ohem.prototxt``) feed it, are
  Microsoft/caffe's only (caffe-rfcn puts the same code under the stock names: its
  SmoothL1Loss shares the rule below, its three-top SoftmaxWithLoss is in loss.py).  Their Forward_cpu/Backward_cpu are NOT_IMPLEMENTED: the rules
  follow the .cu files.  ``loss_param { normalization: PRE_FIXED pre_fixed_normalizer }``
  only changes the loss value (SmoothL1LossOHEM's divisor), not memory.
- AutoCrop: yun-liu/rcf (commit ce460ff6) ``auto_crop_layer.cpp``: crops bottom 0 to bottom
  1's height and width at an offset LayerSetUp derives from the layers' coord_map() between
  the two bottoms (the old FCN Crop).  The offset moves no bytes: caffemem does not compute
  it, so it does not repeat that CHECK (a scale of 1, a non-negative whole offset).

Every memory rule lists the touches of the file named, in order.
"""

from __future__ import annotations

from caffemem.errors import NeedsInput
from caffemem.graph import LayerShapes, Shape
from caffemem.layers.access import (
    Action,
    LayerMemory,
    MemoryQuery,
    Reshape,
    Share,
    buffer_setup,
    read,
    write,
)
from caffemem.layers.blob import dim, format_shape, int32, legacy4, reshaped
from caffemem.layers.data import (
    Dim,
    Template,
    batch_size_of,
    both_or_neither,
    color_channels,
    follow_data,
    hint_value,
    image_size,
    layer_note,
    positive_batch,
    resolve_tops,
    source_size,
)
from caffemem.layers.loss import _class_axis as class_axis
from caffemem.layers.neuron import softmax_memory
from caffemem.layers.registry import (
    LOSS,
    OUTPUT,
    PURE_CHEAP,
    Arity,
    ShapeQuery,
    layer,
    never,
)

FAMILY = "fork_segdet"
DEEPLAB2 = "talent518/deeplab-public-ver2@51750fa9 (deeplab-public-ver2) src/caffe/layers/"
DEEPLAB1 = "TheLegendAli/DeepLab-Context@fb04e9e2 (deeplab-public v1) src/caffe/layers/"
MSCAFFE = "Microsoft/caffe@ed05614c (py-R-FCN) src/caffe/layers/"
RFCN = "daijifeng001/caffe-rfcn@543f8f6a src/caffe/layers/"
RCF = "yun-liu/rcf@ce460ff6 src/caffe/layers/"

TWO = Arity.exactly(2)
SCALAR: Shape = ()
# ImageSegData's third top: per image (height, width) before padding to the crop.
IMAGE_DIMS = 2
# ImageDimPrefetchingDataLayer (ver2 base_data_layer.hpp): PREFETCH_COUNT = 5 batches.
DEEPLAB2_PREFETCH_COUNT = 5
# SegAccuracy's top: [pixel accuracy, mean class recall, mean IoU].
SEG_ACCURACY_VALUES = 3
# R-FCN rois: [batch index, x1, y1, x2, y2].
ROI_FIELDS = 5
_IMAGE_SEG_TOPS = ("data", "label", "data_dim")


# ----------------------------------------------------------------------------------------
# ImageSegData (DeepLab)
# ----------------------------------------------------------------------------------------


def _image_seg_tops(q: ShapeQuery) -> LayerShapes:
    """data [batch, 3 or 1, H, W], label [batch, 1, H, W], data_dim [batch, 1, 1, 2]: the named ones."""
    param = q.proto.image_data_param
    q.check(not q.proto.transform_param.mean_file, "ImageSegDataLayer does not support mean file")
    both_or_neither(q, param.new_height, param.new_width, "new")
    crop = int32(q.proto.transform_param.crop_size)
    # The tops take the crop whatever the image's size: TransformImgAndSeg pads a smaller one.
    size: tuple[Dim, Dim] = (crop, crop) if crop > 0 else source_size(q, image_size(q, param.new_height, param.new_width, 0))
    size = follow_data(q, size)
    batch = positive_batch(q, param.batch_size, "image_data_param.batch_size")
    templates: list[Template] = [(batch, color_channels(param.is_color)) + size, (batch, 1) + size, (batch, 1, 1, IMAGE_DIMS)]
    named = q.layer.tops
    if any(isinstance(d, str) for d in size) and not any(name in q.inputs for name in named[:2]):
        # Only the image's size is unknown: asking for the data top is enough.
        raise NeedsInput([named[0]], f"without crop_size or new_height/new_width an ImageSegData layer takes the first image's size; pass --input {named[0]}={hint_value(templates[0])} (the label map takes its height and width)")
    return resolve_tops(q, templates[: len(q.layer.tops)], "without crop_size or new_height/new_width an ImageSegData layer takes the first image's size")


def _anonymous_tops(data: Shape) -> tuple[Shape, Shape, Shape]:
    """The three tops' shapes as DataLayerSetUp gives them, from the data top's."""
    return (data, (data[0], 1) + tuple(data[2:]), (data[0], 1, 1, IMAGE_DIMS))


def _image_seg_data_memory(q: MemoryQuery) -> LayerMemory:
    """ver2 image_seg_data_layer.cpp and base_data_layer.cpp (ImageDimPrefetchingDataLayer).

    AutoTopBlobs with ExactNumTopBlobs 3: Net::Init appends anonymous tops up to three, so
    the label and data_dim tops always exist; those the file does not name are this
    layer's own here (no other layer can read them).  DataLayerSetUp shapes the tops,
    ``transformed_data_`` and ``transformed_label_`` (the whole batch, shape only: load_batch
    points them into a batch) and each of the 5 batches' data_, label_ and dim_, which
    LayerSetUp allocates (mutable_cpu_data; top.size() is 3, so all three).  Forward copies
    the next batch into the three tops.  No Backward.  DeepLab v1 (a V1 file) keeps one
    batch (prefetch_data_, prefetch_label_, prefetch_data_dim_) and transforms one image at a
    time; its tops and heap are the same, its prefetch figure is a fifth of this one."""
    shapes = tuple(q.tops) + _anonymous_tops(q.tops[0])[len(q.tops) :]
    tops = tuple(q.top(i) if i < len(q.tops) else q.buffer(f"anonymous top {_IMAGE_SEG_TOPS[i]}") for i in range(3))
    setup = tuple(Reshape(tops[i], shapes[i]) for i in range(len(q.tops), 3))
    prefetch = buffer_setup(q.buffer("transformed_data"), shapes[0]) + buffer_setup(q.buffer("transformed_label"), shapes[1])
    for i in range(DEEPLAB2_PREFETCH_COUNT):
        for name, shape in zip(_IMAGE_SEG_TOPS, shapes):
            prefetch += buffer_setup(q.buffer(f"prefetch_{i}/{name}"), shape, filled=True)
    return LayerMemory(setup=setup, forward=tuple(write(top) for top in tops), prefetch=prefetch)


@layer(
    "ImageSegData",
    FAMILY,
    bottoms=Arity.exactly(0),
    tops=Arity(1, 3),
    is_data=True,
    source=DEEPLAB2 + "image_seg_data_layer.cpp, base_data_layer.cpp; " + DEEPLAB1 + "image_seg_data_layer.cpp (IMAGE_SEG_DATA)",
    memory=_image_seg_data_memory,
    batch_fields=batch_size_of("image_data_param"),
    source_kind="image_pair_list",
)
def _image_seg_data(q: ShapeQuery) -> LayerShapes:
    """An image and its label map from a list file (image_data_param, label_type).

    H, W: transform_param.crop_size (the image is padded with mean/ignore_label when
    smaller), else new_height/new_width, else the first image's size (a --input for data
    then sizes the label too).  The third top holds each image's (height, width).
    """
    return _image_seg_tops(q)


# ----------------------------------------------------------------------------------------
# SegAccuracy, MatWrite (DeepLab)
# ----------------------------------------------------------------------------------------


def _seg_accuracy_memory(q: MemoryQuery) -> LayerMemory:
    """seg_accuracy_layer.cpp: the confusion matrix is a std::vector (LayerSetUp), not a
    Blob.  Forward reads scores and labels and writes the three values; Backward_cpu is
    NOT_IMPLEMENTED for any bottom asked for (as Accuracy)."""
    return LayerMemory(forward=(read(q.bottom(0)), read(q.bottom(1)), write(q.top(0))))


@layer("SegAccuracy", FAMILY, bottoms=TWO, tops=Arity.exactly(1), source=DEEPLAB2 + "seg_accuracy_layer.cpp; " + DEEPLAB1 + "seg_accuracy_layer.cpp", memory=_seg_accuracy_memory, recompute=OUTPUT)
def _seg_accuracy(q: ShapeQuery) -> LayerShapes:
    """Accuracy of a score map against a one-channel label map of its size: top [1, 1, 1, 3]."""
    scores, labels = legacy4(q, q.bottoms[0]), legacy4(q, q.bottoms[1])
    q.check(scores[1] >= 1, "top_k must be less than or equal to the number of channels (classes).")
    q.check(scores[0] == labels[0], f"The data {format_shape(q.bottoms[0])} and label {format_shape(q.bottoms[1])} should have the same number.")
    q.check(labels[1] == 1, f"The label {format_shape(q.bottoms[1])} should have one channel.")
    q.check(scores[2] == labels[2], f"The data should have the same height as label ({scores[2]} vs {labels[2]}).")
    q.check(scores[3] == labels[3], f"The data should have the same width as label ({scores[3]} vs {labels[3]}).")
    return LayerShapes(tops=((1, 1, 1, SEG_ACCURACY_VALUES),))


def _mat_write_memory(q: MemoryQuery) -> LayerMemory:
    """mat_write_layer.cpp: Forward (the first one and every ``period``-th) hands each
    bottom's mutable_cpu_data() to matio (matio_io.cpp WriteBlobToMat), which writes the
    file from it without changing it: a read for the planner.  Backward does nothing."""
    return LayerMemory(forward=tuple(read(q.bottom(i)) for i in range(len(q.bottoms))))


# mat_write_layer.cpp Forward: writes each bottom to a .mat file named by a line of
# ``source`` or the iteration count (iter_), a side effect and a counter.
_MAT_WRITE_RECOMPUTE = never("its Forward writes .mat files and counts iterations (iter_)")


@layer(
    "MatWrite",
    FAMILY,
    bottoms=Arity(0),
    tops=Arity.exactly(0),
    source=DEEPLAB2 + "mat_write_layer.cpp; " + DEEPLAB1 + "mat_write_layer.cpp",
    memory=_mat_write_memory,
    recompute=_MAT_WRITE_RECOMPUTE,
)
def _mat_write(q: ShapeQuery) -> LayerShapes:
    """Writes every bottom to ``prefix`` + (a name from ``source``, or iter_N) + _blob_i.mat; no tops."""
    param = q.proto.mat_write_param
    q.check(param.period > 0, f"period must be positive (got {param.period})")
    if param.HasField("source"):
        q.check(param.strip >= 0, f"Strip cannot be negative (got {param.strip})")
    return LayerShapes(tops=())


# ----------------------------------------------------------------------------------------
# R-FCN online hard example mining
# ----------------------------------------------------------------------------------------


def _box_annotator_ohem_memory(q: MemoryQuery) -> LayerMemory:
    """box_annotator_ohem_layer.cu: Forward_gpu reads the four bottoms' cpu_data and writes
    both tops on the CPU (labels of the roi_per_img hardest RoIs per image, ignore_label
    elsewhere; their box loss weights, 0 elsewhere).  Backward does nothing."""
    return LayerMemory(forward=tuple(read(q.bottom(i)) for i in range(4)) + (write(q.top(0)), write(q.top(1))))


# box_annotator_ohem_layer.cu Forward_gpu (on the host): std::sort of the RoIs by loss,
# then the first roi_per_img of each image: the same bottoms give the same tops.
@layer("BoxAnnotatorOHEM", FAMILY, bottoms=Arity.exactly(4), tops=TWO, source=RFCN + "box_annotator_ohem_layer.cpp, .cu (= " + MSCAFFE + ")", memory=_box_annotator_ohem_memory, recompute=PURE_CHEAP)
def _box_annotator_ohem(q: ShapeQuery) -> LayerShapes:
    """rois [R, 5], per-RoI loss, labels [R], box loss weights [R, K] -> labels [R, 1, 1, 1], weights [R, K, 1, 1].

    Reshape reads every bottom through num/channels/height/width: the loss and the labels
    must be [R, 1, H, W] like the rois, the weights [R, K, H, W].
    """
    param = q.proto.box_annotator_ohem_param
    q.check(param.roi_per_img > 0, f"roi_per_img must be positive (got {param.roi_per_img})")
    rois, loss, labels, weights = (legacy4(q, shape) for shape in q.bottoms)
    num, channels, height, width = rois
    q.check(channels == ROI_FIELDS, f"the rois {format_shape(q.bottoms[0])} must have 5 channels (batch index, x1, y1, x2, y2)")
    for what, shape, given in (("per-RoI loss", loss, q.bottoms[1]), ("labels", labels, q.bottoms[2])):
        q.check(shape == (num, 1, height, width), f"the {what} {format_shape(given)} must be [{num}, 1, {height}, {width}] to match the rois")
    q.check(
        weights[0] == num and weights[2:] == (height, width),
        f"the box loss weights {format_shape(q.bottoms[3])} must have {num} rows of {height} x {width} like the rois",
    )
    return LayerShapes(tops=((num, 1, height, width), (num, weights[1], height, width)))


def _loss_weight_count(q: ShapeQuery, weights: int, tops: int) -> None:
    """Layer::SetLossWeights: a loss_weight list, when given, has one entry per top."""
    q.check(weights in (0, tops), f"loss_weight must be unspecified or specified once per top blob ({weights} for {tops} tops)")


def _softmax_ohem_memory(q: MemoryQuery) -> LayerMemory:
    """softmax_loss_ohem_layer.cpp (LayerSetUp, Reshape) and .cu.

    The inner Softmax (bottom 0 -> ``prob_``) is built with the loss weights cleared, so
    its SetUp allocates no diff; built through LayerRegistry, with cuDNN it is a
    CuDNNSoftmaxLayer holding one handle, as SoftmaxWithLoss's.  Forward_gpu: the softmax, then per-RoI losses into bottom
    0's diff and counts into prob_'s diff (scratch), the loss into top 0; top 1 shares
    prob_'s data; top 2 is copied from bottom 0's diff; bottom 0's diff is then zeroed.
    Backward_gpu, when propagate_down[0]: prob_ copied into bottom 0's diff, corrected with
    the labels (counts again in prob_'s diff) and scaled by top 0's diff."""
    prob = q.buffer("prob")
    softmax = softmax_memory(q, q.bottom(0), prob, q.bottoms[0], q.proto.softmax_param.axis, "softmax/")
    forward = softmax.forward + (read(prob), read(q.bottom(1)), write(q.bottom(0), "diff"), write(prob, "diff"), write(q.top(0)))
    forward += (Share(q.top(1), prob, "data"),) if len(q.tops) > 1 else ()
    forward += (read(q.bottom(0), "diff"), write(q.top(2))) if len(q.tops) > 2 else ()
    forward += (write(q.bottom(0), "diff"),)
    backward: tuple[Action, ...] = ()
    if q.propagate_down[0]:
        backward = (read(prob), write(q.bottom(0), "diff"), read(q.top(0)), read(q.bottom(1)), write(prob, "diff"), read(q.top(0), "diff"))
    return LayerMemory(setup=buffer_setup(prob, q.bottoms[0]) + softmax.setup, forward=forward, backward=backward, cudnn_handles=softmax.cudnn_handles)


@layer(
    "SoftmaxWithLossOHEM",
    FAMILY,
    bottoms=TWO,
    tops=Arity(1, 3),
    auto_top=True,
    no_force_backward=(1,),
    source=MSCAFFE + "softmax_loss_ohem_layer.cpp, .cu",
    memory=_softmax_ohem_memory,
    recompute=LOSS,
)
def _softmax_with_loss_ohem(q: ShapeQuery) -> LayerShapes:
    """SoftmaxWithLoss with two more tops: the probabilities (like bottom 0) and the loss
    of each prediction (like bottom 1, the labels).  LossLayer's checks and default weight."""
    tops = max(len(q.layer.tops), 1)
    _loss_weight_count(q, len(q.proto.loss_weight) or 1, tops)
    q.check(dim(q, q.bottoms[0], 0) == dim(q, q.bottoms[1], 0), f"the data {format_shape(q.bottoms[0])} and label {format_shape(q.bottoms[1])} should have the same first dimension")
    class_axis(q, q.proto.softmax_param.axis, "softmax")
    return LayerShapes(tops=(SCALAR, q.bottoms[0], q.bottoms[1])[:tops])


def _smooth_l1_ohem_memory(q: MemoryQuery) -> LayerMemory:
    """smooth_L1_loss_ohem_layer.cpp (Reshape) and .cu.  Reshape shapes ``diff_`` and
    ``errors_`` like bottom 0 (legacy 4 axes; no ones_ blob).  Forward: diff_ = b0 - b1
    (times b2's weights with three bottoms), errors_ from diff_, the loss into top 0, and
    with a second top the per-RoI sums of errors_.  Backward rewrites diff_ and writes the
    diff of each of the first two bottoms propagate_down asks for, scaled by top 0's diff."""
    shape = _legacy4_of(q.bottoms[0])
    diff, errors = q.buffer("diff"), q.buffer("errors")
    forward: tuple[Action, ...] = (read(q.bottom(0)), read(q.bottom(1)), write(diff))
    if len(q.bottoms) == 3:
        forward += (read(q.bottom(2)), read(diff), write(diff))
    forward += (read(diff), write(errors), read(errors), write(q.top(0)))
    forward += (read(errors), write(q.top(1))) if len(q.tops) > 1 else ()
    backward: tuple[Action, ...] = (read(diff), write(diff))
    for i in (0, 1):
        if q.propagate_down[i]:
            backward += (read(q.top(0), "diff"), read(diff), write(q.bottom(i), "diff"))
    notes = ()
    if not q.proto.loss_weight:
        notes = (layer_note(q, "no loss_weight: its LayerSetUp skips LossLayer's default of 1, so Caffe gives it weight 0 (not a loss)"),)
    return LayerMemory(setup=buffer_setup(diff, shape) + buffer_setup(errors, shape), forward=forward, backward=backward, notes=notes)


def _legacy4_of(shape: Shape) -> Shape:
    """(num, channels, height, width) of a blob already checked to have at most 4 axes."""
    return tuple(shape[i] if i < len(shape) else 1 for i in range(4))


# Not auto_top: its LayerSetUp does not call LossLayer::LayerSetUp, so a file without
# loss_weight gets none (weight 0); R-FCN's files always give one.  AutoTopBlobs is true
# in Caffe, but a SmoothL1LossOHEM without a named top is refused here (Arity 1..2).
@layer(
    "SmoothL1LossOHEM",
    FAMILY,
    bottoms=Arity(2, 3),
    tops=Arity(1, 2),
    source=MSCAFFE + "smooth_L1_loss_ohem_layer.cpp, .cu",
    memory=_smooth_l1_ohem_memory,
    recompute=LOSS,
)
def _smooth_l1_loss_ohem(q: ShapeQuery) -> LayerShapes:
    """Smooth L1 of (b0 - b1) [* b2]: the loss, and (second top) each RoI's loss [N, 1, H, W]."""
    _loss_weight_count(q, len(q.proto.loss_weight), len(q.layer.tops))
    first = legacy4(q, q.bottoms[0])
    q.check(dim(q, q.bottoms[0], 0) == dim(q, q.bottoms[1], 0), f"the data {format_shape(q.bottoms[0])} and label {format_shape(q.bottoms[1])} should have the same first dimension")
    for i, other in enumerate(q.bottoms[1:], start=1):
        q.check(
            legacy4(q, other)[1:] == first[1:],
            f"bottom[{i}] {format_shape(other)} must match bottom[0] {format_shape(q.bottoms[0])} in channels, height and width",
        )
    per_roi = (first[0], 1, first[2], first[3])
    return LayerShapes(tops=(SCALAR, per_roi)[: len(q.layer.tops)])


# ----------------------------------------------------------------------------------------
# AutoCrop (RCF)
# ----------------------------------------------------------------------------------------


def _auto_crop_memory(q: MemoryQuery) -> LayerMemory:
    """auto_crop_layer.cpp/.cu: Forward copies rows of bottom 0 into the top; bottom 1 only
    gives its size (its data is never touched).  Backward takes the top's diff and bottom
    0's mutable diff before testing propagate_down[0] (then zeroes it and copies the rows)."""
    return LayerMemory(forward=(read(q.bottom(0)), write(q.top(0))), backward=(read(q.top(0), "diff"), write(q.bottom(0), "diff")))


# auto_crop_layer.cpp/.cu Forward: a cropped copy of bottom 0.
@layer("AutoCrop", FAMILY, bottoms=TWO, tops=Arity.exactly(1), source=RCF + "auto_crop_layer.cpp, auto_crop_layer.cu", memory=_auto_crop_memory, recompute=PURE_CHEAP)
def _auto_crop(q: ShapeQuery) -> LayerShapes:
    """Bottom 0 cropped to bottom 1's height and width: [num0, channels0, height1, width1].

    Caffe copies the rows without a bounds check; caffemem refuses a reference larger than
    bottom 0 (the copy would read past it whatever the offset).
    """
    num, channels, height, width = legacy4(q, q.bottoms[0])
    _, _, ref_height, ref_width = legacy4(q, q.bottoms[1])
    q.check(
        ref_height <= height and ref_width <= width,
        f"the reference {format_shape(q.bottoms[1])} is larger than bottom 0 {format_shape(q.bottoms[0])} in height or width: AutoCrop would read outside it",
    )
    return LayerShapes(tops=(reshaped(q, (num, channels, ref_height, ref_width)),))

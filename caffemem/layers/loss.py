"""Loss layers, and Accuracy (which reads predictions and labels the same way).

Every loss layer is a Caffe ``LossLayer`` (loss_layer.hpp, loss_layer.cpp):
- its first top is the loss, a 0-axis scalar blob;
- ``AutoTopBlobs()`` is true, so a loss layer written without tops still gets its
  anonymous loss top (``auto_top=True`` here; the spec's ``auto_top`` therefore also
  marks "is a LossLayer" for Caffe master);
- ``LossLayer::LayerSetUp`` gives it ``loss_weight: 1`` when the file gives none, so its
  first top counts as a loss unless weighted 0 (the memory pass must treat the diff of
  such a top as allocated by SetLossWeights).  Because the default is one weight, a loss
  layer with a second top and no explicit ``loss_weight`` fails Layer::SetLossWeights'
  "specified once per top blob" CHECK; the rules below reproduce that.
- ``LossLayer::Reshape`` CHECKs that data and label share their first dimension.
- ``LossLayer::AllowForceBackward`` refuses bottom 1 (the label) to force_backward, except
  where a layer overrides it (``no_force_backward`` below).

Two forks reuse the name SoftmaxWithLoss for other code, told apart by what master lacks:
a third top is daijifeng001/caffe-rfcn's (per-prediction losses for OHEM), a
``softmaxloss_param`` DeepLab v1's (a class-weighted loss run on the host).

Each memory rule lists what the same file's CPU code touches (access.py).  Every loss
layer's Backward reads the loss top's diff (the loss weight).

None is recomputed in Backward (``recompute=LOSS``, Accuracy ``OUTPUT``): their tops are
outputs of the net, kept to the end, and nothing is gained by running them twice.
"""

from __future__ import annotations

from collections.abc import Sequence

from caffemem.graph import LayerShapes, Shape
from caffemem.layers.access import (
    Action,
    BlobId,
    LayerMemory,
    MemoryQuery,
    Reshape,
    Share,
    Side,
    Touch,
    buffer_setup,
    on_side,
    read,
    write,
)
from caffemem.layers.blob import axis_index, count, dim, format_shape, legacy_dim
from caffemem.layers.neuron import canonical_axis, inner_loss, softmax_memory
from caffemem.layers.registry import (
    LOSS,
    OUTPUT,
    Arity,
    ShapeQuery,
    layer,
)

SCALAR: Shape = ()
TWO = Arity.exactly(2)
ONE = Arity.exactly(1)
ONE_OR_TWO = Arity(1, 2)
LABEL = (1,)  # LossLayer::AllowForceBackward: bottom_index != 1


def _top_count(q: ShapeQuery) -> int:
    """Tops the layer will have: AutoTopBlobs adds the anonymous loss top when none is named."""
    return max(len(q.layer.tops), 1)


def _loss(q: ShapeQuery) -> Shape:
    """LossLayer SetUp and Reshape checks common to every loss; returns the loss top's shape."""
    weights = len(q.proto.loss_weight) or 1  # LossLayer::LayerSetUp adds loss_weight 1
    tops = _top_count(q)
    q.check(weights == tops, f"loss_weight must be unspecified or specified once per top blob ({weights} for {tops} tops; the default is a single 1)")
    data, label = q.bottoms[0], q.bottoms[1]
    q.check(
        dim(q, data, 0) == dim(q, label, 0),
        f"the data {format_shape(data)} and label {format_shape(label)} should have the same first dimension",
    )
    return SCALAR


def _class_axis(q: ShapeQuery, axis: int, what: str) -> int:
    """Softmax/Infogain/Accuracy: one label per prediction outside the class axis; returns that axis."""
    data, label = q.bottoms[0], q.bottoms[1]
    a = axis_index(q, data, axis, f"{what} axis")
    predictions = count(q, data, 0, a) * count(q, data, a + 1)
    q.check(
        predictions == count(q, label),
        f"number of labels ({count(q, label)}, label {format_shape(label)}) must match number of predictions "
        f"({predictions}: prediction {format_shape(data)} without {what} axis {a})",
    )
    return a


def _with_prob(q: ShapeQuery, loss: Shape) -> LayerShapes:
    """Tops of a softmax-based loss: the loss, then (if asked for) the probabilities, shaped like bottom[0]."""
    tops = (loss, q.bottoms[0]) if _top_count(q) >= 2 else (loss,)
    return LayerShapes(tops=tops)


def gpu_scratch(q: MemoryQuery, *blobs: BlobId) -> tuple[Action, ...]:
    """The diffs a loss's Forward_gpu borrows as device scratch "since this memory is not
    used for anything" (softmax_loss_layer.cu, sigmoid_cross_entropy_loss_layer.cu,
    accuracy_layer.cu): device bytes a GPU run allocates even in a TEST net.  Master zeroes
    them again before Forward returns (BVLC/caffe#6202, after #5981: a Split summed the
    scratch into the gradient), so they are written, not left holding values."""
    return tuple(write(blob, "diff") for blob in blobs) if q.device == "gpu" else ()


def host_output(q: MemoryQuery, i: int = 0) -> Touch:
    """A scalar output the .cu file writes with mutable_cpu_data (the loss, the accuracy)."""
    return write(q.top(i), side="host")


def _softmax_loss_memory(
    q: MemoryQuery,
    axis: int,
    weights: Sequence[float],
    extra_setup: tuple[Action, ...] = (),
    labels_forward: tuple[Action, ...] = (),
    labels_backward: tuple[Action, ...] = (),
    device_scratch: bool = False,
    inner_side: Side = "",
) -> LayerMemory:
    """SoftmaxWithLoss and InfogainLoss: an inner Softmax from bottom[0] to ``prob_``, whose
    SetLossWeights gets ``weights`` (a non-zero one allocates prob_'s diff at SetUp).
    Forward reads prob_ and the labels and writes the loss; an optional second top is
    pointed at prob_'s data.  Backward (when propagate_down[0]) writes bottom[0]'s diff
    from prob_ and the labels.  ``labels_*``: what the infogain matrix adds.
    ``device_scratch``: the layer's .cu file (SoftmaxWithLoss's; InfogainLoss has none)
    counts in bottom[0]'s and prob_'s diffs and reads the loss top's device data.
    ``inner_side``: where the inner Softmax's Forward (and its Layer::Forward's loss read of
    prob_) runs when this layer's own code is elsewhere (InfogainLoss: the device).  The inner
    Softmax comes from LayerRegistry (softmax_loss_layer.cpp, infogain_loss_layer.cpp
    LayerSetUp): with cuDNN a CuDNNSoftmaxLayer, whose LayerSetUp calls cudnnCreate (its
    handle is counted with this layer's; runtime v6 gives it the pool's default-stream one)."""
    prob = q.buffer("prob")
    softmax = softmax_memory(q, q.bottom(0), prob, q.bottoms[0], axis, "softmax/")
    loss_setup, loss_forward = inner_loss(prob, weights)
    setup = buffer_setup(prob, q.bottoms[0]) + softmax.setup + loss_setup + extra_setup
    # In a GPU run Forward_gpu also takes bottom[0]'s and prob_'s diffs as scratch.
    scratch = gpu_scratch(q, q.bottom(0), prob) if device_scratch else ()
    forward = on_side(softmax.forward + loss_forward, inner_side) + (read(prob), read(q.bottom(1))) + labels_forward + scratch + (host_output(q),)
    forward += (Share(q.top(1), prob, "data"),) if len(q.tops) > 1 else ()
    backward: tuple[Action, ...] = ()
    if q.propagate_down[0]:
        backward = (read(prob), read(q.bottom(1))) + labels_backward + (write(q.bottom(0), "diff"), read(q.top(0), "diff", "host"))
        # Backward_gpu also reads the loss top's data on the device and prob_'s diff (counts).
        backward += (read(q.top(0)), write(prob, "diff")) if q.device == "gpu" and device_scratch else ()
    return LayerMemory(setup=setup, forward=forward, backward=backward, cudnn_handles=softmax.cudnn_handles)


def _softmax_with_loss_memory(q: MemoryQuery) -> LayerMemory:
    """softmax_loss_layer.cpp: the inner Softmax is built from a copy of this layer's param
    after LossLayer::LayerSetUp added the default loss_weight 1, so prob_'s diff is allocated
    at SetUp unless the file says loss_weight: 0.  A third top is R-FCN's (below)."""
    if len(q.tops) == RFCN_TOPS:
        return _rfcn_softmax_with_loss_memory(q)
    if q.proto.HasField("softmaxloss_param"):
        return _deeplab_v1_softmax_loss_memory(q)
    return _softmax_loss_memory(q, q.proto.softmax_param.axis, list(q.proto.loss_weight) or [1.0], device_scratch=True)


# daijifeng001/caffe-rfcn@a7641303 src/caffe/layers/softmax_loss_layer.cpp, .cu: R-FCN's
# SoftmaxWithLoss (same type string, MaxTopBlobs 3) outputs the loss of each prediction as a
# third top for its OHEM nets (models/rfcn_prototxts/*_OHEM_*/train_val.prototxt).  Stock
# Caffe refuses a third top, so three tops can only mean this fork; one or two tops keep
# master's rule (the figures checked against real Caffe).
RFCN_TOPS = 3
RFCN_SOFTMAX = "daijifeng001/caffe-rfcn@a7641303 src/caffe/layers/softmax_loss_layer.cpp, .cu"


def _rfcn_softmax_with_loss_memory(q: MemoryQuery) -> LayerMemory:
    """R-FCN's three-top SoftmaxWithLoss (its Forward_cpu/Backward_cpu are NOT_IMPLEMENTED:
    this follows the .cu file on either device).  LayerSetUp clears the loss weights of the
    inner Softmax's param, so prob_'s diff is not allocated at SetUp.  Forward_gpu: the
    softmax, the per-prediction losses into bottom 0's diff and counts into prob_'s diff,
    the loss through top 0's mutable_cpu_data; top 1 shares prob_'s data; top 2 is a copy
    of bottom 0's diff; bottom 0's diff is then zeroed.  Backward_gpu, when
    propagate_down[0]: prob_ copied into bottom 0's diff, top 0's device data taken, the
    labels read, counts into prob_'s diff, then scaled by top 0's host diff."""
    prob = q.buffer("prob")
    softmax = softmax_memory(q, q.bottom(0), prob, q.bottoms[0], q.proto.softmax_param.axis, "softmax/")
    forward = softmax.forward + (read(prob), read(q.bottom(1)), write(q.bottom(0), "diff"), write(prob, "diff"), host_output(q))
    forward += (Share(q.top(1), prob, "data"), read(q.bottom(0), "diff"), write(q.top(2)), write(q.bottom(0), "diff"))
    backward: tuple[Action, ...] = ()
    if q.propagate_down[0]:
        backward = (read(prob), write(q.bottom(0), "diff"), read(q.top(0)), read(q.bottom(1)), write(prob, "diff"), read(q.top(0), "diff", "host"))
    return LayerMemory(setup=buffer_setup(prob, q.bottoms[0]) + softmax.setup, forward=forward, backward=backward, cudnn_handles=softmax.cudnn_handles)


# TheLegendAli/DeepLab-Context@fb04e9e2 (DeepLab v1, deeplab-public) src/caffe/layers/
# softmax_loss_layer.cpp, .cu, softmax_layer.cpp, loss_layer.cpp: DeepLab v1's SOFTMAX_LOSS,
# a class-weighted loss whose options (softmaxloss_param) master lacks.  The V1 upgrade gives
# every SoftmaxWithLoss of a DeepLab v1 net that field (caffemem/passes/upgrade.py), so its
# presence means this code.
DEEPLAB_V1_SOFTMAX = "TheLegendAli/DeepLab-Context@fb04e9e2 src/caffe/layers/softmax_loss_layer.cpp, .cu"
LEGACY_SCALAR: Shape = (1, 1, 1, 1)  # old LossLayer::Reshape: top[0]->Reshape(1, 1, 1, 1)


def _deeplab_v1_softmax_loss_memory(q: MemoryQuery) -> LayerMemory:
    """DeepLab v1's SoftmaxWithLoss.  Its SoftmaxLayer is built in the constructor from the
    param as written (before LossLayer's default weight), so only a loss_weight in the file
    gives prob_ a diff at SetUp; that SoftmaxLayer's Reshape shapes prob_ (N, C, H, W), fills
    ``sum_multiplier_`` (1, C, 1, 1) with ones and shapes ``scale_`` (N, 1, H, W).  Its
    Forward (on the device in a GPU run; the CPU code also reads the ones) writes prob_ and
    scale_.  Forward_gpu and Backward_gpu call the CPU code: prob_ and the labels are read
    on the host and the loss written there; Backward (propagate_down[0]) writes bottom 0's
    diff on the host from prob_, the labels and the loss top's diff.  The class weights
    (weight_source) are a host std::vector, not a Blob."""
    num, channels, height, width = (q.bottoms[0] + (1, 1, 1, 1))[:4] if len(q.bottoms[0]) < 4 else q.bottoms[0][:4]
    prob, multiplier, scale = q.buffer("prob"), q.buffer("softmax/sum_multiplier"), q.buffer("softmax/scale")
    loss_setup, loss_forward = inner_loss(prob, list(q.proto.loss_weight))
    setup = buffer_setup(prob, (num, channels, height, width)) + buffer_setup(multiplier, (1, channels, 1, 1), filled=True)
    setup += buffer_setup(scale, (num, 1, height, width)) + loss_setup
    softmax: tuple[Action, ...] = (read(q.bottom(0)), write(prob), write(scale)) + ((read(multiplier),) if q.device == "cpu" else ())
    forward = softmax + loss_forward + (read(prob, side="host"), read(q.bottom(1), side="host"), write(q.top(0), side="host"))
    forward += (Share(q.top(1), prob, "data"),) if len(q.tops) > 1 else ()
    backward: tuple[Action, ...] = ()
    if q.propagate_down[0]:
        backward = (write(q.bottom(0), "diff", "host"), read(prob, side="host"), read(q.bottom(1), side="host"), read(q.top(0), "diff", "host"))
    return LayerMemory(setup=setup, forward=forward, backward=backward)


def _deeplab_v1_softmax_with_loss(q: ShapeQuery) -> LayerShapes:
    """DeepLab v1: at most two tops (its MaxTopBlobs), the loss shaped (1, 1, 1, 1); the
    softmax runs over the channels (v1's SoftmaxLayer has no axis).  Its Forward indexes one
    label per (image, pixel) of bottom 0, which is checked here (v1 CHECKs only the nums)."""
    q.check(len(q.layer.tops) <= 2, f"DeepLab v1's SoftmaxWithLoss gives 1 to 2 top blob(s), this layer names {len(q.layer.tops)}")
    _loss(q)
    q.check(len(q.bottoms[0]) <= 4, f"DeepLab v1's blobs have at most 4 axes, not {format_shape(q.bottoms[0])}")
    _class_axis(q, 1, "softmax")
    return _with_prob(q, LEGACY_SCALAR)


@layer(
    "SoftmaxWithLoss",
    "loss",
    bottoms=TWO,
    tops=Arity(1, RFCN_TOPS),
    auto_top=True,
    source="caffe master layers/softmax_loss_layer.cpp; three tops: " + RFCN_SOFTMAX + "; softmaxloss_param: " + DEEPLAB_V1_SOFTMAX,
    memory=_softmax_with_loss_memory,
    no_force_backward=LABEL,
    recompute=LOSS,
)
def _softmax_with_loss(q: ShapeQuery) -> LayerShapes:
    """Softmax along softmax_param.axis then log loss; the optional second top is the softmax
    output; R-FCN's third top, each prediction's loss, is shaped like the labels (its Reshape:
    ReshapeLike(*bottom[1]))."""
    if q.proto.HasField("softmaxloss_param"):
        return _deeplab_v1_softmax_with_loss(q)
    loss = _loss(q)
    _class_axis(q, q.proto.softmax_param.axis, "softmax")
    if _top_count(q) == RFCN_TOPS:
        return LayerShapes(tops=(loss, q.bottoms[0], q.bottoms[1]))
    return _with_prob(q, loss)


def _infogain_loss_memory(q: MemoryQuery) -> LayerMemory:
    """infogain_loss_layer.cpp: the inner Softmax (along infogain_param.axis) always gets
    loss_weight 1.  Reshape shapes ``sum_rows_H_`` [L].  With two bottoms LayerSetUp loads H
    from ``source`` into ``infogain_`` (BlobProto: its axes are not known here, taken as the
    legacy 4) and Reshape sums its rows; with H as bottom[2] the rows are summed in
    Backward.  It has no GPU code, so its Forward_cpu runs on the host, but the inner
    Softmax's Layer::Forward runs Forward_gpu in a GPU run: bottom 0 is read and prob_
    written on the device (its loss read too), then prob_ is read on the host."""
    axis = q.proto.infogain_loss_param.axis
    inner_side: Side = "device" if q.device == "gpu" else ""
    labels = q.bottoms[0][canonical_axis(axis, len(q.bottoms[0]))]
    sums = q.buffer("sum_rows_H")
    setup = buffer_setup(sums, (labels,))
    if len(q.bottoms) > 2:
        matrix = q.bottom(2)
        backward: tuple[Action, ...] = (read(matrix), write(sums), read(sums))
        return _softmax_loss_memory(q, axis, [1.0], setup, (read(matrix),), backward, inner_side=inner_side)
    matrix = q.buffer("infogain")
    setup += buffer_setup(matrix, (1, 1, labels, labels), filled=True) + (read(matrix), write(sums))
    return _softmax_loss_memory(q, axis, [1.0], setup, (write(sums), read(matrix)), (read(matrix), read(sums)), inner_side=inner_side)


@layer(
    "InfogainLoss",
    "loss",
    bottoms=Arity(2, 3),
    tops=ONE_OR_TWO,
    auto_top=True,
    source="caffe master layers/infogain_loss_layer.cpp",
    memory=_infogain_loss_memory,
    gpu="none",
    no_force_backward=LABEL,
    recompute=LOSS,
)
def _infogain_loss(q: ShapeQuery) -> LayerShapes:
    """Softmax then an infogain-weighted log loss; H (num_labels x num_labels) is bottom[2] or read from ``source``.

    When H comes from ``source`` (a binaryproto read at run time, relative to Caffe's working
    directory) its size is not checked here.
    """
    param = q.proto.infogain_loss_param
    q.check(not q.proto.loss_param.HasField("normalize"), 'loss_param.normalize is deprecated for InfogainLoss; use "normalization"')
    if len(q.bottoms) < 3:
        q.check(param.HasField("source"), "Infogain matrix source must be specified (or given as a third bottom)")
    loss = _loss(q)
    axis = _class_axis(q, param.axis, "infogain")
    if len(q.bottoms) == 3:
        labels = q.bottoms[0][axis]
        h = q.bottoms[2]
        q.check(count(q, h) == labels * labels, f"the infogain matrix bottom[2] {format_shape(h)} must have {labels}x{labels} elements")
    return _with_prob(q, loss)


def _sigmoid_cross_entropy_loss_memory(q: MemoryQuery) -> LayerMemory:
    """sigmoid_cross_entropy_loss_layer.cpp: the inner Sigmoid (``sigmoid_output_`` like
    bottom[0]) is constructed with the param as written, before LossLayer adds the default
    weight: only a loss_weight given in the file allocates its diff at SetUp."""
    output = q.buffer("sigmoid_output")
    loss_setup, loss_forward = inner_loss(output, q.proto.loss_weight)
    forward = (read(q.bottom(0)), write(output)) + loss_forward + (read(q.bottom(0)), read(q.bottom(1))) + gpu_scratch(q, q.bottom(0), q.bottom(1)) + (host_output(q),)
    backward: tuple[Action, ...] = ()
    if q.propagate_down[0]:
        backward = (read(output), read(q.bottom(1)), write(q.bottom(0), "diff"), read(q.top(0), "diff", "host"))
    return LayerMemory(setup=buffer_setup(output, q.bottoms[0]) + loss_setup, forward=forward, backward=backward)


@layer(
    "SigmoidCrossEntropyLoss",
    "loss",
    bottoms=TWO,
    tops=ONE,
    auto_top=True,
    source="caffe master layers/sigmoid_cross_entropy_loss_layer.cpp",
    memory=_sigmoid_cross_entropy_loss_memory,
    no_force_backward=LABEL,
    recompute=LOSS,
)
def _sigmoid_cross_entropy_loss(q: ShapeQuery) -> LayerShapes:
    """One target per prediction: both bottoms must have the same count."""
    loss = _loss(q)
    data, target = q.bottoms
    q.check(count(q, data) == count(q, target), f"inputs must have the same count: {format_shape(data)} vs {format_shape(target)}")
    return LayerShapes(tops=(loss,))


def _euclidean_loss_memory(q: MemoryQuery) -> LayerMemory:
    """euclidean_loss_layer.cpp: Forward writes the difference into ``diff_`` (shaped like
    bottom[0] in Reshape); Backward scales it into each bottom's diff asked for (both
    bottoms may get one: AllowForceBackward is true for both).  GPU: the loss is written
    and its weight read on the host (``top[0]->mutable_cpu_data()``, ``cpu_diff()``,
    euclidean_loss_layer.cu); Layer::Forward reads them on the device only for a top with
    a loss weight."""
    difference = q.buffer("diff")
    forward = (read(q.bottom(0)), read(q.bottom(1)), write(difference), host_output(q))
    top_weight = read(q.top(0), "diff", "host")
    backward = tuple(t for i in (0, 1) if q.propagate_down[i] for t in (top_weight, read(difference), write(q.bottom(i), "diff")))
    return LayerMemory(setup=buffer_setup(difference, q.bottoms[0]), forward=forward, backward=backward)


@layer(
    "EuclideanLoss",
    "loss",
    bottoms=TWO,
    tops=ONE,
    auto_top=True,
    source="caffe master layers/euclidean_loss_layer.cpp",
    memory=_euclidean_loss_memory,
    recompute=LOSS,
)
def _euclidean_loss(q: ShapeQuery) -> LayerShapes:
    """Sum of squared differences: the bottoms must agree in count per item."""
    loss = _loss(q)
    a, b = q.bottoms
    q.check(count(q, a, 1) == count(q, b, 1), f"inputs must have the same dimension: {format_shape(a)} vs {format_shape(b)}")
    return LayerShapes(tops=(loss,))


def _hinge_loss_memory(q: MemoryQuery) -> LayerMemory:
    """hinge_loss_layer.cpp: Forward computes the margins in bottom[0]'s diff (allocating it
    in Forward, whatever Backward will do); Backward finishes the gradient there."""
    forward = (read(q.bottom(0)), write(q.bottom(0), "diff"), read(q.bottom(1)), write(q.top(0)))
    backward = (write(q.bottom(0), "diff"), read(q.bottom(1)), read(q.top(0), "diff")) if q.propagate_down[0] else ()
    return LayerMemory(forward=forward, backward=backward)


@layer(
    "HingeLoss",
    "loss",
    bottoms=TWO,
    tops=ONE,
    auto_top=True,
    source="caffe master layers/hinge_loss_layer.cpp, loss_layer.cpp",
    memory=_hinge_loss_memory,
    no_force_backward=LABEL,
    gpu="none",
    recompute=LOSS,
)
def _hinge_loss(q: ShapeQuery) -> LayerShapes:
    """Only LossLayer's own check: predictions and labels share num."""
    return LayerShapes(tops=(_loss(q),))


def _check_singletons(q: ShapeQuery, which: int, axes: range) -> None:
    """Legacy-accessor CHECK that bottom[which] is 1 along ``axes`` of (num, channels, height, width)."""
    names = ("num", "channels", "height", "width")
    shape = q.bottoms[which]
    for i in axes:
        q.check(legacy_dim(q, shape, i) == 1, f"bottom[{which}] {format_shape(shape)} must have {names[i]} 1")


def _multinomial_logistic_loss_memory(q: MemoryQuery) -> LayerMemory:
    """multinomial_logistic_loss_layer.cpp: no buffer of its own."""
    forward = (read(q.bottom(0)), read(q.bottom(1)), write(q.top(0)))
    backward = (read(q.bottom(0)), read(q.bottom(1)), write(q.bottom(0), "diff"), read(q.top(0), "diff")) if q.propagate_down[0] else ()
    return LayerMemory(forward=forward, backward=backward)


@layer(
    "MultinomialLogisticLoss",
    "loss",
    bottoms=TWO,
    tops=ONE,
    auto_top=True,
    source="caffe master layers/multinomial_logistic_loss_layer.cpp",
    memory=_multinomial_logistic_loss_memory,
    gpu="none",
    no_force_backward=LABEL,
    recompute=LOSS,
)
def _multinomial_logistic_loss(q: ShapeQuery) -> LayerShapes:
    """Takes probabilities and one label per item: the label blob is (N, 1, 1, 1) in legacy terms."""
    loss = _loss(q)
    _check_singletons(q, 1, range(1, 4))
    return LayerShapes(tops=(loss,))


def _contrastive_loss_memory(q: MemoryQuery) -> LayerMemory:
    """contrastive_loss_layer.cpp: LayerSetUp shapes ``diff_`` and ``diff_sq_`` (N, C, 1, 1)
    (``diff_sq_`` is never touched on CPU), ``dist_sq_`` (N, 1, 1, 1), and writes
    ``summer_vec_`` (C, 1, 1, 1) with ones.  Forward writes the differences and squared
    distances; Backward writes the diffs of the two feature bottoms asked for.

    A GPU run (contrastive_loss_layer.cu) touches other copies, which is why a card
    measured the siamese example (examples/siamese, N=100 in TEST, 64 in TRAIN, C=2) 408
    and 520 bytes above a model that reused the CPU list:
    - Forward_gpu (.cu 12-31) writes ``diff_`` and ``diff_sq_`` (N*C floats each: 800 B in
      TEST) and ``dist_sq_`` on the device through ``caffe_gpu_gemv``, which reads
      ``summer_vec_``'s ``gpu_data()`` (C floats: 8 B, a device copy of the ones written on
      the host); then its loss loop (.cu 36-48) reads the similarity label and ``dist_sq_``
      with ``cpu_data()`` and writes the loss with ``mutable_cpu_data()``: host copies, so
      the label gets no device copy in Forward (the CPU list's device read of it: 400 B).
      TEST: +800 +8 -400 = +408 B.
    - Backward_gpu (.cu 85-103) reads the loss weight with ``cpu_diff()`` and the label,
      ``diff_`` and ``dist_sq_`` with ``gpu_data()``: the label's device copy (4N B) comes
      here.  TRAIN: +512 +8 = +520 B (the label's 256 B now in Backward, not Forward)."""
    num, channels = (q.bottoms[0] + (1, 1))[:2]  # legacy num(), channels(): missing axes read 1
    difference, squares, distances, ones = (q.buffer(name) for name in ("diff", "diff_sq", "dist_sq", "summer_vec"))
    setup = buffer_setup(difference, (num, channels, 1, 1)) + buffer_setup(squares, (num, channels, 1, 1))
    setup += buffer_setup(distances, (num, 1, 1, 1)) + buffer_setup(ones, (channels, 1, 1, 1), filled=channels > 0)
    gpu = q.device == "gpu"
    forward: tuple[Action, ...] = (read(q.bottom(0)), read(q.bottom(1)), write(difference))
    if gpu:
        forward += (write(squares), read(ones), write(distances), read(q.bottom(2), side="host"), read(distances, side="host"), host_output(q))
    else:
        forward += (write(distances), read(q.bottom(2)), write(q.top(0)))
    weight = read(q.top(0), "diff", "host") if gpu else read(q.top(0), "diff")
    backward = tuple(
        t
        for i in (0, 1)
        if q.propagate_down[i]
        for t in (weight, write(q.bottom(i), "diff"), read(q.bottom(2)), read(difference), read(distances))
    )
    return LayerMemory(setup=setup, forward=forward, backward=backward)


@layer(
    "ContrastiveLoss",
    "loss",
    bottoms=Arity.exactly(3),
    tops=ONE,
    auto_top=True,
    source="caffe master layers/contrastive_loss_layer.cpp",
    memory=_contrastive_loss_memory,
    no_force_backward=(2,),
    recompute=LOSS,
)
def _contrastive_loss(q: ShapeQuery) -> LayerShapes:
    """Two (N, C, 1, 1) feature blobs and one (N, 1, 1, 1) similarity label."""
    a, b = q.bottoms[0], q.bottoms[1]
    q.check(legacy_dim(q, a, 1) == legacy_dim(q, b, 1), f"the two feature bottoms must have the same channels: {format_shape(a)} vs {format_shape(b)}")
    _check_singletons(q, 0, range(2, 4))
    _check_singletons(q, 1, range(2, 4))
    _check_singletons(q, 2, range(1, 4))
    return LayerShapes(tops=(_loss(q),))


def _accuracy_memory(q: MemoryQuery) -> LayerMemory:
    """accuracy_layer.cpp: with the per-class top, Reshape shapes ``nums_buffer_`` [C] and
    Forward writes it.  Backward_cpu is NOT_IMPLEMENTED for any bottom asked for.

    accuracy_layer.cu (a GPU run): Forward_gpu accumulates in bottom[0]'s diff and, with one
    top, counts in the label's diff (device scratch, even in a TEST net); with the per-class
    top it reshapes ``nums_buffer_`` like bottom[0] and counts there on the device.  Both
    outputs are written on the host."""
    forward = (read(q.bottom(0)), read(q.bottom(1)))
    gpu = q.device == "gpu"
    if len(q.tops) > 1:
        counts = q.buffer("nums_buffer")
        if gpu:
            forward += gpu_scratch(q, q.bottom(0)) + (Reshape(counts, q.bottoms[0]), write(counts))
        else:
            forward += (write(counts),)
        return LayerMemory(setup=buffer_setup(counts, q.tops[1]), forward=forward + (host_output(q, 1), host_output(q)))
    return LayerMemory(forward=forward + gpu_scratch(q, q.bottom(0), q.bottom(1)) + (host_output(q),))


@layer("Accuracy", "loss", bottoms=TWO, tops=ONE_OR_TWO, source="caffe master layers/accuracy_layer.cpp", memory=_accuracy_memory, recompute=OUTPUT)
def _accuracy(q: ShapeQuery) -> LayerShapes:
    """A scalar accuracy; an optional second top holds per-class accuracies [num_labels].

    Not a LossLayer: no auto top, no default loss weight.
    """
    param = q.proto.accuracy_param
    data, label = q.bottoms
    labels = count(q, label)
    q.check(labels > 0, f"the label blob {format_shape(label)} is empty")
    q.check(param.top_k <= count(q, data) // labels, f"top_k ({param.top_k}) must be less than or equal to the number of classes ({count(q, data) // labels})")
    axis = _class_axis(q, param.axis, "label")
    tops = (SCALAR, (data[axis],)) if len(q.layer.tops) >= 2 else (SCALAR,)
    return LayerShapes(tops=tops)

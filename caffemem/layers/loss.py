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
"""

from __future__ import annotations

from ..graph import LayerShapes, Shape
from .blob import axis_index, count, dim, format_shape, legacy_dim
from .registry import Arity, ShapeQuery, layer

SCALAR: Shape = ()
TWO = Arity.exactly(2)
ONE = Arity.exactly(1)
ONE_OR_TWO = Arity(1, 2)


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


@layer("SoftmaxWithLoss", "loss", bottoms=TWO, tops=ONE_OR_TWO, auto_top=True, source="caffe master layers/softmax_loss_layer.cpp")
def _softmax_with_loss(q: ShapeQuery) -> LayerShapes:
    """Softmax along softmax_param.axis then log loss; the optional second top is the softmax output."""
    loss = _loss(q)
    _class_axis(q, q.proto.softmax_param.axis, "softmax")
    return _with_prob(q, loss)


@layer("InfogainLoss", "loss", bottoms=Arity(2, 3), tops=ONE_OR_TWO, auto_top=True, source="caffe master layers/infogain_loss_layer.cpp")
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


@layer("SigmoidCrossEntropyLoss", "loss", bottoms=TWO, tops=ONE, auto_top=True, source="caffe master layers/sigmoid_cross_entropy_loss_layer.cpp")
def _sigmoid_cross_entropy_loss(q: ShapeQuery) -> LayerShapes:
    """One target per prediction: both bottoms must have the same count."""
    loss = _loss(q)
    data, target = q.bottoms
    q.check(count(q, data) == count(q, target), f"inputs must have the same count: {format_shape(data)} vs {format_shape(target)}")
    return LayerShapes(tops=(loss,))


@layer("EuclideanLoss", "loss", bottoms=TWO, tops=ONE, auto_top=True, source="caffe master layers/euclidean_loss_layer.cpp")
def _euclidean_loss(q: ShapeQuery) -> LayerShapes:
    """Sum of squared differences: the bottoms must agree in count per item."""
    loss = _loss(q)
    a, b = q.bottoms
    q.check(count(q, a, 1) == count(q, b, 1), f"inputs must have the same dimension: {format_shape(a)} vs {format_shape(b)}")
    return LayerShapes(tops=(loss,))


@layer("HingeLoss", "loss", bottoms=TWO, tops=ONE, auto_top=True, source="caffe master layers/hinge_loss_layer.cpp, loss_layer.cpp")
def _hinge_loss(q: ShapeQuery) -> LayerShapes:
    """Only LossLayer's own check: predictions and labels share num."""
    return LayerShapes(tops=(_loss(q),))


def _check_singletons(q: ShapeQuery, which: int, axes: range) -> None:
    """Legacy-accessor CHECK that bottom[which] is 1 along ``axes`` of (num, channels, height, width)."""
    names = ("num", "channels", "height", "width")
    shape = q.bottoms[which]
    for i in axes:
        q.check(legacy_dim(q, shape, i) == 1, f"bottom[{which}] {format_shape(shape)} must have {names[i]} 1")


@layer("MultinomialLogisticLoss", "loss", bottoms=TWO, tops=ONE, auto_top=True, source="caffe master layers/multinomial_logistic_loss_layer.cpp")
def _multinomial_logistic_loss(q: ShapeQuery) -> LayerShapes:
    """Takes probabilities and one label per item: the label blob is (N, 1, 1, 1) in legacy terms."""
    loss = _loss(q)
    _check_singletons(q, 1, range(1, 4))
    return LayerShapes(tops=(loss,))


@layer("ContrastiveLoss", "loss", bottoms=Arity.exactly(3), tops=ONE, auto_top=True, source="caffe master layers/contrastive_loss_layer.cpp")
def _contrastive_loss(q: ShapeQuery) -> LayerShapes:
    """Two (N, C, 1, 1) feature blobs and one (N, 1, 1, 1) similarity label."""
    a, b = q.bottoms[0], q.bottoms[1]
    q.check(legacy_dim(q, a, 1) == legacy_dim(q, b, 1), f"the two feature bottoms must have the same channels: {format_shape(a)} vs {format_shape(b)}")
    _check_singletons(q, 0, range(2, 4))
    _check_singletons(q, 1, range(2, 4))
    _check_singletons(q, 2, range(1, 4))
    return LayerShapes(tops=(_loss(q),))


@layer("Accuracy", "loss", bottoms=TWO, tops=ONE_OR_TWO, source="caffe master layers/accuracy_layer.cpp")
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

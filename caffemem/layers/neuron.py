"""Neuron and elementwise layers: one bottom in, a top of the same shape out.

Caffe's ``NeuronLayer::Reshape`` gives the top the bottom's shape (neuron_layer.cpp); the
layers here differ only in the CHECKs their LayerSetUp adds and in the parameter blobs
some of them own (PReLU, Scale, Bias, BatchNorm), whose shapes memory depends on.
"""

from __future__ import annotations

import math

from ..graph import LayerShapes, Shape
from .blob import axis_index, format_shape, legacy4, legacy_dim
from .registry import Arity, LayerSpec, ShapeQuery, layer, register

ONE = Arity.exactly(1)
ONE_OR_TWO = Arity(1, 2)


def _like_bottom(q: ShapeQuery) -> LayerShapes:
    """NeuronLayer::Reshape: the top is shaped like the bottom, nothing learned."""
    return LayerShapes(tops=(q.bottoms[0],))


# Neurons whose LayerSetUp checks nothing that concerns shapes or the net's validity.
# (Dropout's ratio checks are DCHECKs, compiled out of release builds.)
_PLAIN_NEURONS = {
    "BNLL": "bnll_layer.cpp",
    "Dropout": "dropout_layer.cpp",
    "ELU": "elu_layer.cpp",
    "Power": "power_layer.cpp",
    "ReLU": "relu_layer.cpp, cudnn_relu_layer.cpp",
    "Sigmoid": "sigmoid_layer.cpp, cudnn_sigmoid_layer.cpp",
    "Swish": "swish_layer.cpp",
    "TanH": "tanh_layer.cpp, cudnn_tanh_layer.cpp",
    "Threshold": "threshold_layer.cpp",
}

for _type, _file in _PLAIN_NEURONS.items():
    register(
        LayerSpec(
            type=_type,
            shape=_like_bottom,
            family="neuron",
            bottoms=ONE,
            tops=ONE,
            source=f"caffe master layers/{_file}, neuron_layer.cpp",
        )
    )


@layer("AbsVal", "neuron", bottoms=ONE, tops=ONE, source="caffe master layers/absval_layer.cpp")
def _absval(q: ShapeQuery) -> LayerShapes:
    """Elementwise, but Caffe refuses to run it in place (its backward needs the input)."""
    q.check(not any(q.layer.in_place_tops), "AbsVal layer does not allow in-place computation")
    return _like_bottom(q)


@layer("Clip", "neuron", bottoms=ONE, tops=ONE, source="caffe master layers/clip_layer.cpp, caffe.proto ClipParameter")
def _clip(q: ShapeQuery) -> LayerShapes:
    """Elementwise.  ``min`` and ``max`` are required fields of ClipParameter: a clip_param
    lacking one makes Caffe's parser refuse the file (with no clip_param at all both read 0)."""
    param = q.proto.clip_param
    if q.proto.HasField("clip_param"):
        q.check(param.HasField("min") and param.HasField("max"), "clip_param needs both min and max (required fields)")
    return _like_bottom(q)


def _log_base(q: ShapeQuery, base: float) -> float:
    """The natural log of an Exp/Log layer's base as Caffe computes it (-1 means e); CHECKs it."""
    if base == -1:
        return 1.0
    q.check(base > 0, f"base must be strictly positive (got {base})")
    value = math.log(base)
    q.check(math.isfinite(value), f"log(base) = log({base}) is not finite")
    return value


@layer("Exp", "neuron", bottoms=ONE, tops=ONE, source="caffe master layers/exp_layer.cpp")
def _exp(q: ShapeQuery) -> LayerShapes:
    """Elementwise base**(shift + scale*x); LayerSetUp CHECKs the base."""
    _log_base(q, q.proto.exp_param.base)
    return _like_bottom(q)


@layer("Log", "neuron", bottoms=ONE, tops=ONE, source="caffe master layers/log_layer.cpp")
def _log(q: ShapeQuery) -> LayerShapes:
    """Elementwise log_base(shift + scale*x); LayerSetUp CHECKs that 1/log(base) is finite too."""
    base = q.proto.log_param.base
    q.check(_log_base(q, base) != 0, f"1/log(base) = 1/log({base}) is not finite")
    return _like_bottom(q)


@layer("PReLU", "neuron", bottoms=ONE, tops=ONE, source="caffe master layers/prelu_layer.cpp")
def _prelu(q: ShapeQuery) -> LayerShapes:
    """Learns one slope per channel, or a single 0-axis (scalar) slope if channel_shared.

    Caffe reads the channel count through the legacy ``channels()`` accessor, so the
    bottom needs 2 to 4 axes.
    """
    bottom = q.bottoms[0]
    q.check(len(bottom) >= 2, f"number of axes of bottom blob must be >= 2, got {format_shape(bottom)}")
    channels = legacy_dim(q, bottom, 1)
    slope: Shape = () if q.proto.prelu_param.channel_shared else (channels,)
    return LayerShapes(tops=(bottom,), params=(slope,))


@layer("Softmax", "neuron", bottoms=ONE, tops=ONE, source="caffe master layers/softmax_layer.cpp, cudnn_softmax_layer.cpp")
def _softmax(q: ShapeQuery) -> LayerShapes:
    """Normalises along ``axis``; the top is shaped like the bottom, the axis must exist."""
    axis_index(q, q.bottoms[0], q.proto.softmax_param.axis)
    return _like_bottom(q)


@layer("MVN", "neuron", bottoms=ONE, tops=ONE, source="caffe master layers/mvn_layer.cpp")
def _mvn(q: ShapeQuery) -> LayerShapes:
    """Caffe reshapes the top to (num, channels, height, width): always 4 axes, missing ones 1."""
    return LayerShapes(tops=(legacy4(q, q.bottoms[0]),))


@layer("BatchNorm", "neuron", bottoms=ONE, tops=ONE, source="caffe master layers/batch_norm_layer.cpp")
def _batch_norm(q: ShapeQuery) -> LayerShapes:
    """Keeps running mean [C], variance [C] and the moving-average factor [1] as its 3 blobs.

    Caffe masks them from the solver: a ``param`` given for any of them must have
    lr_mult 0.  Its Reshape reads ``shape(1)``, so the bottom needs at least 2 axes.
    """
    bottom = q.bottoms[0]
    q.check(len(bottom) >= 2, f"bottom blob needs a channel axis (at least 2 axes), got {format_shape(bottom)}")
    for spec in list(q.proto.param)[:3]:
        q.check(spec.lr_mult == 0, "cannot configure batch normalization statistics as layer parameters (lr_mult must be 0)")
    channels = bottom[1]
    return LayerShapes(tops=(bottom,), params=((channels,), (channels,), (1,)))


# ---- Scale and Bias: an operand broadcast over bottom[0] from `axis` on -----------------


def _learned_operand(q: ShapeQuery, what: str, axis: int, num_axes: int) -> Shape:
    """Scale/Bias LayerSetUp with one bottom: the learned blob is bottom[0]'s dims [axis, axis+num_axes)."""
    bottom = q.bottoms[0]
    start = axis_index(q, bottom, axis)
    q.check(num_axes >= -1, "num_axes must be non-negative, or -1 to extend to the end of bottom[0]")
    if num_axes >= 0:
        q.check(
            len(bottom) >= start + num_axes,
            f"{what} blob's shape extends past bottom[0]'s shape {format_shape(bottom)} when applied starting at axis {start}",
        )
    return bottom[start:] if num_axes == -1 else bottom[start : start + num_axes]


def _check_operand(q: ShapeQuery, what: str, axis: int, operand: Shape) -> None:
    """Scale/Bias Reshape: the operand must match bottom[0] from ``axis`` on (a scalar fits anywhere)."""
    bottom = q.bottoms[0]
    start = 0 if not operand else axis_index(q, bottom, axis)
    q.check(
        len(bottom) >= start + len(operand),
        f"{what} blob's shape extends past bottom[0]'s shape {format_shape(bottom)} when applied starting at axis {start}",
    )
    covered = bottom[start : start + len(operand)]
    q.check(
        covered == operand,
        f"dimension mismatch between bottom[0] {format_shape(bottom)} from axis {start} and {what} {format_shape(operand)}",
    )


@layer("Bias", "neuron", bottoms=ONE_OR_TWO, tops=ONE, source="caffe master layers/bias_layer.cpp")
def _bias(q: ShapeQuery) -> LayerShapes:
    """Adds bottom[1], or a learned blob covering bottom[0]'s axes [axis, axis+num_axes)."""
    param = q.proto.bias_param
    if len(q.bottoms) == 1:
        learned = _learned_operand(q, "bias", param.axis, param.num_axes)
        params: tuple[Shape, ...] = (learned,)
    else:
        learned, params = q.bottoms[1], ()
    _check_operand(q, "bias", param.axis, learned)
    return LayerShapes(tops=(q.bottoms[0],), params=params)


@layer("Scale", "neuron", bottoms=ONE_OR_TWO, tops=ONE, source="caffe master layers/scale_layer.cpp, bias_layer.cpp")
def _scale(q: ShapeQuery) -> LayerShapes:
    """Multiplies by bottom[1] or a learned blob; with bias_term, an inner Bias layer adds a learned bias.

    The blobs are [scale] (one bottom) then [bias] (bias_term).  The inner Bias layer
    always sees one bottom (bottom[0]), with num_axes = bottom[1]'s axis count when the
    scale is a bottom, so the bias has the scale's shape either way.
    """
    param = q.proto.scale_param
    params: list[Shape] = []
    if len(q.bottoms) == 1:
        params.append(_learned_operand(q, "scale", param.axis, param.num_axes))
    if param.bias_term:
        bias_axes = len(q.bottoms[1]) if len(q.bottoms) > 1 else param.num_axes
        params.append(_learned_operand(q, "bias", param.axis, bias_axes))
    operand = q.bottoms[1] if len(q.bottoms) > 1 else params[0]
    _check_operand(q, "scale", param.axis, operand)
    return LayerShapes(tops=(q.bottoms[0],), params=tuple(params))

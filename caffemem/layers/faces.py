"""Layers of the face-recognition and metric-learning forks, each read in its repository.

- CenterLoss: ydwen/caffe-face (branch caffe-face) ``src/caffe/layers/center_loss_layer.cpp``
  and ``include/caffe/layers/center_loss_layer.hpp`` (last changed in 0437af58; read at
  48ff38e3), used as in its ``face_example/face_train_test.prototxt``.
- MarginInnerProduct: wy1iu/sphereface ``tools/caffe-sphereface/src/caffe/layers/
  margin_inner_product_layer.cpp`` and ``.hpp`` (966c44c9; read at f20b130a), used as in its
  ``train/code/sphereface_model.prototxt`` (A-Softmax: MarginInnerProduct, then
  SoftmaxWithLoss).
- TripletLoss: happynear/caffe-windows (branch ms, 967eedf2) ``src/caffe/layers/
  triplet_loss_layer.cpp`` (c291a9e2) and its class in ``include/caffe/custom_layers.hpp``:
  Yuan Yang's three-bottom layer (anchor, positive, negative; ``triplet_loss_param { margin
  }``).  Of the many C++ ``TripletLoss`` layers (the type string is shared by incompatible
  ones: 2 bottoms with in-batch mining, 3 bottoms, 4 with a weight), this one is the most
  copied: besides happynear/caffe-windows, at least ten other repositories of the search
  index carry the same file (its header names Yuan Yang), more than any other variant.  A file written for another variant with a
  different bottom count is refused by the arity check, naming the count.

Every memory rule follows the CPU code of the file named (Forward_cpu/Backward_cpu), in
the order it touches memory; the GPU code's differences are noted where they matter.
"""

from __future__ import annotations

from caffemem.graph import LayerShapes, Shape, count
from caffemem.layers.access import (
    Action,
    LayerMemory,
    MemoryQuery,
    buffer_setup,
    read,
    write,
)
from caffemem.layers.blob import axis_index, dim, format_shape, legacy_dim, reshaped
from caffemem.layers.blob import count as blob_count
from caffemem.layers.registry import (
    LOSS,
    Arity,
    ShapeQuery,
    layer,
    never,
)

FAMILY = "faces"
TWO = Arity.exactly(2)
SCALAR: Shape = ()
CENTER_LOSS = "ydwen/caffe-face src/caffe/layers/center_loss_layer.cpp, include/caffe/layers/center_loss_layer.hpp @0437af58"
MARGIN_IP = "wy1iu/sphereface tools/caffe-sphereface/src/caffe/layers/margin_inner_product_layer.cpp, .hpp @966c44c9"
TRIPLET = "happynear/caffe-windows (ms) src/caffe/layers/triplet_loss_layer.cpp @c291a9e2, include/caffe/custom_layers.hpp @967eedf2"


def _check_label(q: ShapeQuery, which: int) -> None:
    """CHECK_EQ(bottom[which]->channels()/height()/width(), 1): one label per item."""
    label = q.bottoms[which]
    for i, name in ((1, "channels"), (2, "height"), (3, "width")):
        q.check(legacy_dim(q, label, i) == 1, f"the label bottom[{which}] {format_shape(label)} must have {name} 1 (one label per item)")


def _same_num(q: ShapeQuery, a: int, b: int, why: str) -> None:
    """CHECK_EQ(bottom[a]->shape(0) or num(), bottom[b]'s)."""
    first, second = q.bottoms[a], q.bottoms[b]
    q.check(dim(q, first, 0) == dim(q, second, 0), f"bottom[{a}] {format_shape(first)} and bottom[{b}] {format_shape(second)} {why}")


def _flattened(q: ShapeQuery, param) -> tuple[int, int]:
    """(axis, K): the bottom's axes from ``axis`` on are one K-long vector (CanonicalAxisIndex)."""
    bottom = q.bottoms[0]
    axis = axis_index(q, bottom, param.axis)
    return axis, blob_count(q, bottom, axis)


# ----------------------------------------------------------------------------------------
# CenterLoss (ydwen/caffe-face center_loss_layer.cpp)
# ----------------------------------------------------------------------------------------


def _center_loss_memory(q: MemoryQuery) -> LayerMemory:
    """center_loss_layer.cpp.  Reshape: ``distance_`` shaped like bottom[0] and
    ``variation_sum_`` like the centres (num_output, K) -- shapes only.  Forward_cpu reads the
    features, the labels and the centres, writes every row of ``distance_`` (x_i - c_{y_i}),
    reads it back for the dot product and writes the loss.  Backward_cpu: with
    param_propagate_down[0], reads the labels, writes the centres' diff (caffe_axpy adds into
    it), zeroes and fills ``variation_sum_`` from ``distance_``; with propagate_down[0],
    copies ``distance_`` into the features' diff and scales it by the top's diff.

    ``variation_sum_`` is as big as the centres (10572 x 512 floats, 21.6 MB, in
    face_train_test.prototxt) and gets its bytes in the first Backward.  (The GPU Backward
    writes the centres' diff whatever param_propagate_down says and zeroes
    ``variation_sum_`` through its CPU pointer; not modelled: CPU path.)"""
    distance, variation = q.buffer("distance"), q.buffer("variation_sum")
    centers = q.param(0)
    setup = buffer_setup(distance, q.bottoms[0]) + buffer_setup(variation, q.params[0])
    forward = (read(q.bottom(0)), read(q.bottom(1)), read(centers), write(distance), read(distance), write(q.top(0)))
    backward: tuple[Action, ...] = ()
    if q.param_propagate_down[0]:
        backward += (read(q.bottom(1)), write(centers, "diff"), write(variation), read(distance))
    if q.propagate_down[0]:
        backward += (read(distance), write(q.bottom(0), "diff"), read(q.top(0), "diff"))
    return LayerMemory(setup=setup, forward=forward, backward=backward)


# Not auto_top: CenterLossLayer overrides LayerSetUp without calling LossLayer::LayerSetUp
# (so no default loss_weight 1: a CenterLoss without loss_weight adds nothing to the loss
# and Net::Init skips its Backward) and sets ExactNumTopBlobs to -1 (so Net::Init's
# AutoTopBlobs adds no anonymous top: max(MinTopBlobs, ExactNumTopBlobs) = -1).  Every
# prototxt of the fork gives the top and a loss_weight (0.008 in face_train_test).
@layer(
    "CenterLoss",
    FAMILY,
    bottoms=TWO,
    tops=Arity.exactly(1),  # ExactNumTopBlobs -1, but Reshape and Forward use top[0] only
    source=CENTER_LOSS + ", loss_layer.cpp",
    memory=_center_loss_memory,
    no_force_backward=(1,),  # LossLayer::AllowForceBackward: the label,
    recompute=LOSS,
)
def _center_loss(q: ShapeQuery) -> LayerShapes:
    """The loss is a scalar (LossLayer::Reshape); the centres are one blob (num_output, K),
    K the count of bottom[0] from ``axis`` on.  Reshape CHECKs a one-per-item label and
    LossLayer's equal first dimensions."""
    param = q.proto.center_loss_param
    _, k = _flattened(q, param)
    _check_label(q, 1)
    _same_num(q, 0, 1, "should have the same first dimension (the data and its labels)")
    return LayerShapes(tops=(SCALAR,), params=(reshaped(q, (param.num_output, k), "centers"),))


# ----------------------------------------------------------------------------------------
# MarginInnerProduct (wy1iu/sphereface margin_inner_product_layer.cpp)
# ----------------------------------------------------------------------------------------

# The buffers Reshape shapes like the top, beyond cos_theta_ and sign_0_, for each margin
# type (MarginInnerProductParameter.MarginType: SINGLE, DOUBLE, TRIPLE, QUADRUPLE), in the
# order Reshape and Forward_cpu touch them.
_MARGIN_BUFFERS: dict[int, tuple[str, ...]] = {
    0: (),
    1: ("cos_theta_quadratic",),
    2: ("cos_theta_quadratic", "cos_theta_cubic", "sign_1", "sign_2"),
    3: ("cos_theta_quadratic", "cos_theta_cubic", "cos_theta_quartic", "sign_3", "sign_4"),
}
# What Forward_cpu reads to write the label's entry of each row, per margin type.
_FORWARD_READS: dict[int, tuple[str, ...]] = {
    0: (),
    1: ("sign_0", "cos_theta_quadratic"),
    2: ("sign_1", "sign_2", "cos_theta", "cos_theta_cubic"),
    3: ("sign_3", "sign_4", "cos_theta_quadratic", "cos_theta_quartic"),
}
# What Backward_cpu reads for the bottom's gradient, per margin type (SINGLE: only the weight).
_BACKWARD_READS: dict[int, tuple[str, ...]] = {
    0: (),
    1: ("sign_0", "cos_theta", "cos_theta_quadratic"),
    2: ("sign_1", "sign_2", "cos_theta_quadratic", "cos_theta_cubic"),
    3: ("sign_3", "sign_4", "cos_theta", "cos_theta_quadratic", "cos_theta_cubic", "cos_theta_quartic"),
}


def _margin_inner_product_memory(q: MemoryQuery) -> LayerMemory:
    """margin_inner_product_layer.cpp.

    Reshape: the top (M.., num_output) and the lambda top (1,); ``x_norm_`` (M,), ``sign_0_``
    and ``cos_theta_`` like the top, then the margin type's own buffers (_MARGIN_BUFFERS), all
    shapes only.  Forward_cpu writes lambda into top[1] first, normalises the weight rows in
    place (the weight's data is written every iteration), writes ``x_norm_``, ``cos_theta_``
    (a gemm, then scaled), ``sign_0_`` and the type's buffers, then the top (a gemm), reading
    the labels, ``x_norm_`` and the type's buffers for each row's label entry.
    Backward_cpu reads the top's diff, the features, the labels and the weight before any
    test; with param_propagate_down[0] it adds into the weight's diff; with propagate_down[0]
    it zeroes and fills the features' diff from ``x_norm_``, the weight and the type's
    buffers (_BACKWARD_READS).  The labels never get a diff."""
    margin = q.proto.margin_inner_product_param.type
    weight = q.param(0)
    top_shape = q.tops[0]
    rows = count(top_shape[:-1])  # M_ = bottom count(0, axis): the top's leading axes
    buffers = {name: q.buffer(name) for name in ("x_norm", "cos_theta", "sign_0") + _MARGIN_BUFFERS[margin]}
    setup = buffer_setup(buffers["x_norm"], (rows,)) + buffer_setup(buffers["sign_0"], top_shape) + buffer_setup(buffers["cos_theta"], top_shape)
    for name in _MARGIN_BUFFERS[margin]:
        setup += buffer_setup(buffers[name], top_shape)
    forward: tuple[Action, ...] = (write(q.top(1)), write(weight), read(q.bottom(0)), read(weight), write(buffers["x_norm"]))
    forward += (write(buffers["cos_theta"]), read(buffers["x_norm"]), read(buffers["cos_theta"]), write(buffers["sign_0"]))
    forward += tuple(write(buffers[name]) for name in _MARGIN_BUFFERS[margin])
    forward += (write(q.top(0)), read(q.bottom(1)), read(buffers["x_norm"])) + tuple(read(buffers[name]) for name in _FORWARD_READS[margin])
    backward: tuple[Action, ...] = (read(q.top(0), "diff"), read(q.bottom(0)), read(q.bottom(1)), read(weight))
    if q.param_propagate_down[0]:
        backward += (write(weight, "diff"),)
    if q.propagate_down[0]:
        backward += (write(q.bottom(0), "diff"), read(buffers["x_norm"])) + tuple(read(buffers[name]) for name in _BACKWARD_READS[margin])
    return LayerMemory(setup=setup, forward=forward, backward=backward)


# margin_inner_product_layer.cpp/.cu Forward: ``iter_ += 1`` anneals lambda (an iteration
# counter the next step reads) and it rewrites the weights as unit rows.
_MARGIN_RECOMPUTE = never("its Forward counts iterations (iter_, which anneals lambda) and rewrites the weights as unit rows")


@layer("MarginInnerProduct", FAMILY, bottoms=TWO, tops=Arity(1, 2), source=MARGIN_IP, memory=_margin_inner_product_memory, recompute=_MARGIN_RECOMPUTE)
def _margin_inner_product(q: ShapeQuery) -> LayerShapes:
    """An inner product without bias: weight (num_output, K), top = bottom.shape[:axis] +
    (num_output,), and top[1] (1,) holding lambda.  Not a LossLayer.

    The hpp allows one top (MaxTopBlobs 2, no minimum), but Forward_cpu and Forward_gpu
    both write ``top[1]->mutable_cpu_data()[0]`` unconditionally: with one top Caffe indexes
    past the top vector.  caffemem refuses that net, as every sphereface prototxt names the
    second top ("lambda").  LayerSetUp CHECKs one label per item (equal num())."""
    param = q.proto.margin_inner_product_param
    q.check(
        len(q.layer.tops) == 2,
        'MarginInnerProduct needs a second top for lambda (e.g. top: "lambda"): its Forward writes top[1] whatever the top count (sphereface margin_inner_product_layer.cpp)',
    )
    q.check(legacy_dim(q, q.bottoms[0], 0) == legacy_dim(q, q.bottoms[1], 0), "Number of labels must match number of output (bottom[0] and bottom[1] num())")
    axis, k = _flattened(q, param)
    num_output = param.num_output
    weight = reshaped(q, (num_output, k), "weight")
    top = reshaped(q, q.bottoms[0][:axis] + (num_output,))
    return LayerShapes(tops=(top, (1,)), params=(weight,))


# ----------------------------------------------------------------------------------------
# TripletLoss (happynear/caffe-windows triplet_loss_layer.cpp, Yuan Yang's)
# ----------------------------------------------------------------------------------------

_PAIRS = ("diff_ap", "diff_an", "diff_pn")  # a - p, a - n, p - n: (N, C, 1, 1)
# Backward_cpu: bottom i's gradient is scaled from diff_pn (anchor), diff_ap (positive),
# diff_an (negative).
_GRADIENT_OF = ("diff_pn", "diff_ap", "diff_an")


def _triplet_loss_memory(q: MemoryQuery) -> LayerMemory:
    """triplet_loss_layer.cpp.  LayerSetUp (once; no Reshape of its own): ``diff_ap_``,
    ``diff_an_``, ``diff_pn_``, ``diff_sq_ap_``, ``diff_sq_an_`` (N, C, 1, 1),
    ``dist_sq_ap_``, ``dist_sq_an_`` (N, 1, 1, 1) shaped; ``summer_vec_`` (C, 1, 1, 1) and
    ``dist_binary_`` (N, 1, 1, 1) filled with ones.  The two diff_sq buffers and the two
    filled ones are never read on CPU.  Forward_cpu writes the three differences, the two
    squared distances and the loss; Backward_cpu, for each of the three bottoms asked
    for, reads the top's diff and writes that bottom's diff from one difference."""
    num, channels = _num_channels(q.bottoms[0])
    buffers = {name: q.buffer(name) for name in _PAIRS + ("diff_sq_ap", "diff_sq_an", "dist_sq_ap", "dist_sq_an", "summer_vec", "dist_binary")}
    setup: tuple[Action, ...] = ()
    for name in _PAIRS + ("diff_sq_ap", "diff_sq_an"):
        setup += buffer_setup(buffers[name], (num, channels, 1, 1))
    setup += buffer_setup(buffers["dist_sq_ap"], (num, 1, 1, 1)) + buffer_setup(buffers["dist_sq_an"], (num, 1, 1, 1))
    setup += buffer_setup(buffers["summer_vec"], (channels, 1, 1, 1), filled=channels > 0)
    setup += buffer_setup(buffers["dist_binary"], (num, 1, 1, 1), filled=num > 0)
    forward: tuple[Action, ...] = ()
    for name, (a, b) in zip(_PAIRS, ((0, 1), (0, 2), (1, 2))):
        forward += (read(q.bottom(a)), read(q.bottom(b)), write(buffers[name]))
    forward += (read(buffers["diff_ap"]), write(buffers["dist_sq_ap"]), read(buffers["diff_an"]), write(buffers["dist_sq_an"]), write(q.top(0)))
    backward: tuple[Action, ...] = ()
    for i in range(3):
        if q.propagate_down[i]:
            backward += (read(q.top(0), "diff"), write(q.bottom(i), "diff"), read(buffers[_GRADIENT_OF[i]]))
    return LayerMemory(setup=setup, forward=forward, backward=backward)


def _num_channels(shape: Shape) -> tuple[int, int]:
    """(num(), channels()) of a blob the shape rule already checked (missing axes read 1)."""
    padded = tuple(shape) + (1, 1)
    return padded[0], padded[1]


# A LossLayer that calls LossLayer::LayerSetUp (loss_weight 1 by default) and keeps
# ExactNumTopBlobs 1 (an anonymous top when none is named).  AllowForceBackward is
# ``bottom_index != 3``: all three bottoms may be forced.
@layer(
    "TripletLoss",
    FAMILY,
    bottoms=Arity.exactly(3),
    tops=Arity.exactly(1),
    auto_top=True,
    source=TRIPLET + ", loss_layer.cpp",
    memory=_triplet_loss_memory,
    recompute=LOSS,
)
def _triplet_loss(q: ShapeQuery) -> LayerShapes:
    """Three (N, C, 1, 1) embeddings (anchor, positive, negative) give a scalar loss.
    LayerSetUp CHECKs equal num() and channels() and height = width = 1 for each;
    LossLayer::Reshape the first dimensions of bottom[0] and bottom[1]."""
    anchor = q.bottoms[0]
    for i, other in enumerate(q.bottoms):
        q.check(legacy_dim(q, other, 0) == legacy_dim(q, anchor, 0), f"bottom[{i}] {format_shape(other)} must have the anchor's num ({legacy_dim(q, anchor, 0)})")
        q.check(legacy_dim(q, other, 1) == legacy_dim(q, anchor, 1), f"bottom[{i}] {format_shape(other)} must have the anchor's channels ({legacy_dim(q, anchor, 1)})")
        for axis, name in ((2, "height"), (3, "width")):
            q.check(legacy_dim(q, other, axis) == 1, f"bottom[{i}] {format_shape(other)} must have {name} 1 (one embedding vector per item)")
    _same_num(q, 0, 1, "should have the same first dimension")
    return LayerShapes(tops=(SCALAR,))


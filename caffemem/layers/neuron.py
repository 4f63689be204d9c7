"""Neuron and elementwise layers: one bottom in, a top of the same shape out.

Caffe's ``NeuronLayer::Reshape`` gives the top the bottom's shape (neuron_layer.cpp); the
layers here differ only in the CHECKs their LayerSetUp adds and in the parameter blobs
some of them own (PReLU, Scale, Bias, BatchNorm), whose shapes memory depends on.

Each spec's memory rule lists what the layer's CPU code touches (access.py), read from
the Caffe master file in its ``source``; the function a touch comes from is named where
it is not the obvious Forward_cpu/Backward_cpu.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

from caffemem.graph import LayerShapes, Shape, count
from caffemem.layers.access import (
    Action,
    BlobId,
    LayerMemory,
    MemoryQuery,
    MemoryRule,
    Reshape,
    buffer_setup,
    read,
    write,
)
from caffemem.layers.blob import axis_index, format_shape, legacy4, legacy_dim
from caffemem.layers.registry import (
    PURE_CHEAP,
    Arity,
    LayerSpec,
    Recompute,
    ShapeQuery,
    in_place_always,
    layer,
    per_top_element,
    recompute_rule,
    register,
)

ONE = Arity.exactly(1)
ONE_OR_TWO = Arity(1, 2)


def _like_bottom(q: ShapeQuery) -> LayerShapes:
    """NeuronLayer::Reshape: the top is shaped like the bottom, nothing learned."""
    return LayerShapes(tops=(q.bottoms[0],))


# ---- memory: helpers shared by the rules below (and by common.py, loss.py) -----------


def canonical_axis(axis: int, axes: int) -> int:
    """Blob::CanonicalAxisIndex on a shape the shape rule already CHECKed."""
    return axis + axes if axis < 0 else axis


def uses_cudnn(q: MemoryQuery, engine: int) -> bool:
    """Which class LayerRegistry builds: the layer's own engine (CAFFE=1, CUDNN=2) wins,
    DEFAULT (0) is the build's (layer_factory.cpp, GetSoftmaxLayer and friends)."""
    return engine == 2 or (engine == 0 and q.engine == "cudnn")


def inner_loss(blob: BlobId, weights: Sequence[float]) -> tuple[tuple[Action, ...], tuple[Action, ...]]:
    """(SetUp, Forward) touches of a layer built inside another, given the loss_weight list
    of the LayerParameter it was built from: a non-zero weight on its one top makes its
    SetLossWeights write the top's diff, and its Layer::Forward read data and diff."""
    if not (len(weights) and weights[0]):
        return (), ()
    return (write(blob, "diff"),), (read(blob), read(blob, "diff"))


def neuron_memory(*backward_reads: str, top_diff_always: bool = False) -> MemoryRule:
    """A NeuronLayer: Forward reads the bottom and writes the top; Backward, when
    propagate_down[0], reads the top's diff and the data of ``backward_reads`` ("bottom",
    "top") and writes the bottom's diff.  ``top_diff_always``: the top's diff is read before
    the propagate_down test (AbsVal).  The other kinds of blob are never touched."""

    def rule(q: MemoryQuery) -> LayerMemory:
        blobs = {"bottom": q.bottom(0), "top": q.top(0)}
        backward: tuple[Action, ...] = (read(q.top(0), "diff"),) if top_diff_always or q.propagate_down[0] else ()
        if q.propagate_down[0]:
            backward += tuple(read(blobs[name]) for name in backward_reads) + (write(q.bottom(0), "diff"),)
        return LayerMemory(forward=(read(q.bottom(0)), write(q.top(0))), backward=backward)

    return rule


def forward_only_memory(q: MemoryQuery) -> LayerMemory:
    """Forward reads the bottom and writes the top; Backward_cpu is NOT_IMPLEMENTED (Caffe
    aborts if it ever runs): threshold_layer.hpp, argmax_layer.hpp."""
    return LayerMemory(forward=(read(q.bottom(0)), write(q.top(0))))


def _dropout_memory(q: MemoryQuery) -> LayerMemory:
    """dropout_layer.cpp: Reshape shapes the unsigned-int mask ``rand_vec_`` like the bottom;
    Forward writes it in both phases, Backward reads it in TRAIN only, or in TEST as well
    with Bayesian SegNet's ``sample_weights_test`` (alexgkendall/caffe-segnet
    dropout_layer.cpp/.cu: ``phase_ == TRAIN || sample_weights_test()``).
    rbgirshick/caffe-fast-rcnn@4115385d's ``scale_train: false`` moves the 1/(1-p) scaling
    from the TRAIN to the TEST pass (a caffe_scal of the top, and of the bottom's diff): the
    same blobs are touched, so the rule is the same.

    GPU: Forward_gpu takes the mask (``rand_vec_.mutable_gpu_data()``) inside its
    ``if (phase_ == TRAIN)`` only, where Forward_cpu takes it before the test
    (dropout_layer.cu / .cpp): a GPU run of a TEST net never allocates it (measured on an
    H100, benchmarks/gpu-groundtruth)."""
    mask = q.buffer("rand_vec")
    dropping = q.phase == "TRAIN" or q.proto.dropout_param.sample_weights_test
    backward: tuple[Action, ...] = ()
    if q.propagate_down[0]:
        backward = (read(q.top(0), "diff"), write(q.bottom(0), "diff")) + ((read(mask),) if dropping else ())
    takes_mask = dropping or q.device == "cpu"
    return LayerMemory(
        setup=buffer_setup(mask, q.bottoms[0], "int"),
        forward=(read(q.bottom(0)), write(q.top(0))) + ((write(mask),) if takes_mask else ()),
        backward=backward,
    )


def _power_memory(q: MemoryQuery) -> LayerMemory:
    """power_layer.cpp: with power*scale == 0 the top is a constant (the bottom is not read);
    Backward reads the bottom unless the gradient is constant, and the top unless power is 2."""
    param = q.proto.power_param
    diff_scale = param.power * param.scale
    forward = (write(q.top(0)),) + ((read(q.bottom(0)),) if diff_scale != 0 else ())
    backward: tuple[Action, ...] = ()
    if q.propagate_down[0]:
        backward = (write(q.bottom(0), "diff"), read(q.top(0), "diff"))
        if diff_scale != 0 and param.power != 1:
            backward += (read(q.bottom(0)),) + ((read(q.top(0)),) if param.power != 2 else ())
    return LayerMemory(forward=forward, backward=backward)


def _swish_memory(q: MemoryQuery) -> LayerMemory:
    """swish_layer.cpp: an inner Sigmoid (built with this layer's param, loss_weight too)
    maps ``sigmoid_input_`` (beta * bottom) to ``sigmoid_output_``.  LayerSetUp sets the
    Sigmoid up before Reshape shapes its input, so its output is first a 1-element scalar
    blob (whose diff a loss_weight fills), then reshaped like the bottom."""
    sig_in, sig_out = q.buffer("sigmoid_input"), q.buffer("sigmoid_output")
    loss_setup, loss_forward = inner_loss(sig_out, q.proto.loss_weight)
    setup = (Reshape(sig_out, ()),) + loss_setup + (Reshape(sig_in, q.bottoms[0]), Reshape(sig_out, q.bottoms[0]))
    forward = (read(q.bottom(0)), write(sig_in), write(q.top(0)), read(sig_in), write(sig_out)) + loss_forward + (read(sig_out),)
    backward: tuple[Action, ...] = ()
    if q.propagate_down[0]:
        backward = (read(q.top(0)), read(q.top(0), "diff"), read(sig_out), write(q.bottom(0), "diff"))
    return LayerMemory(setup=setup, forward=forward, backward=backward)


# Neurons whose LayerSetUp checks nothing that concerns shapes or the net's validity.
# (Dropout's ratio checks are DCHECKs, compiled out of release builds.)  The memory rule
# follows each file's Backward_cpu: which data it reads besides the top's diff.  The
# cuDNN ReLU/Sigmoid/TanH touch the same buffers (their Backward also reads both data).
_PLAIN_NEURONS: dict[str, tuple[str, MemoryRule]] = {
    "BNLL": ("bnll_layer.cpp", neuron_memory("bottom")),
    "Dropout": ("dropout_layer.cpp", _dropout_memory),
    "ELU": ("elu_layer.cpp", neuron_memory("bottom", "top")),
    "Power": ("power_layer.cpp", _power_memory),
    "ReLU": ("relu_layer.cpp, cudnn_relu_layer.cpp", neuron_memory("bottom")),
    "Sigmoid": ("sigmoid_layer.cpp, cudnn_sigmoid_layer.cpp", neuron_memory("top")),
    "Swish": ("swish_layer.cpp", _swish_memory),
    "TanH": ("tanh_layer.cpp, cudnn_tanh_layer.cpp", neuron_memory("top")),
    "Threshold": ("threshold_layer.cpp", forward_only_memory),
}

# Which of them `optimize --inplace` may run in place (top 0 = bottom 0, so the top's data
# and diff ARE the bottom's), from each file's Forward_cpu/Backward_cpu and .cu twin.
# Left out: BNLL (Backward reads bottom_data: in place that is log(1+e^x), not x), Power
# (Backward reads bottom_data, and its caffe_set of bottom_diff wipes top_diff before the
# final caffe_mul reads it).
_IN_PLACE = {
    # Backward tests bottom_data > 0, in place the top: relu keeps that sign when the
    # slope is >= 0 (x <= 0 -> slope*x <= 0); cuDNN (slope 0) tests the same on y.
    "ReLU": lambda proto: proto.relu_param.negative_slope >= 0,
    # Backward reads the mask rand_vec_ (TRAIN) or copies top_diff (TEST; caffe_copy of a
    # buffer onto itself is a no-op): never the data.
    "Dropout": in_place_always,
    # Backward tests bottom_data > 0 and uses alpha + top_data: with alpha >= 0,
    # x > 0 <=> y > 0, and y is what the x <= 0 branch needs.
    "ELU": lambda proto: proto.elu_param.alpha >= 0,
    # Backward reads top_data only (sigmoid_x, tanhx); cuDNN's sigmoid/tanh derive dx from y.
    "Sigmoid": in_place_always,
    "TanH": in_place_always,
    # Backward reads top_data and the inner Sigmoid's own output; Forward's caffe_mul is
    # elementwise (bottom_data read before top_data[i] is written).
    "Swish": in_place_always,
    # Forward only, elementwise (Backward is NOT_IMPLEMENTED whether in place or not).
    "Threshold": in_place_always,
}

@recompute_rule
def _dropout_recompute(proto, phase: str) -> Recompute:
    """dropout_layer.cpp/.cu: in TRAIN Forward draws a new mask (caffe_rng_bernoulli,
    caffe_gpu_rng_uniform), so a second run drops other units; in TEST it copies (or, with
    fast-rcnn's ``scale_train: false``, scales) the bottom: pure.  Bayesian SegNet's
    ``sample_weights_test`` (alexgkendall/caffe-segnet dropout_layer.cpp) draws in TEST too."""
    if phase == "TRAIN" or proto.dropout_param.sample_weights_test:
        return Recompute(False, "its Forward draws a new random mask (caffe_rng_bernoulli): a second run drops other units")
    return Recompute(True, "in TEST its Forward copies (or scales) the bottom: no random draw", cheap=True)


# Every other plain neuron is an elementwise function of the bottom (its .cpp and .cu
# Forward; Swish's inner Sigmoid writes sigmoid_output_ from the bottom alone).
_RECOMPUTE = {"Dropout": _dropout_recompute}

# The neurons GetReLULayer / GetSigmoidLayer / GetTanHLayer build as cuDNN classes (one
# cudnnHandle each, the same touches): the engine field of their parameter message.
_CUDNN_NEURON_PARAMS = {"ReLU": "relu_param", "Sigmoid": "sigmoid_param", "TanH": "tanh_param"}


def _with_cudnn_handle(rule: MemoryRule, param_field: str) -> MemoryRule:
    def counted(q: MemoryQuery) -> LayerMemory:
        memory = rule(q)
        return replace(memory, cudnn_handles=1) if uses_cudnn(q, getattr(q.proto, param_field).engine) else memory

    return counted


for _type, (_file, _memory) in _PLAIN_NEURONS.items():
    if _type in _CUDNN_NEURON_PARAMS:
        _memory = _with_cudnn_handle(_memory, _CUDNN_NEURON_PARAMS[_type])
    register(
        LayerSpec(
            type=_type,
            shape=_like_bottom,
            family="neuron",
            bottoms=ONE,
            tops=ONE,
            source=f"caffe master layers/{_file}, neuron_layer.cpp",
            memory=_memory,
            in_place=_IN_PLACE.get(_type),
            gpu="forward" if _type == "Threshold" else "full",  # threshold_layer.cu: Forward_gpu only
            recompute=_RECOMPUTE.get(_type, PURE_CHEAP),
        )
    )


# Never in place: LayerSetUp CHECK_NEs top and bottom (its Backward needs the sign of x).
# Recompute: absval_layer.cpp/.cu Forward is elementwise (caffe_abs).
@layer("AbsVal", "neuron", bottoms=ONE, tops=ONE, source="caffe master layers/absval_layer.cpp", memory=neuron_memory("bottom", top_diff_always=True), recompute=PURE_CHEAP)
def _absval(q: ShapeQuery) -> LayerShapes:
    """Elementwise, but Caffe refuses to run it in place (its backward needs the input)."""
    q.check(not any(q.layer.in_place_tops), "AbsVal layer does not allow in-place computation")
    return _like_bottom(q)


# Not in place: Backward tests min <= bottom_data <= max, always true of a clipped top.
# Recompute: clip_layer.cpp/.cu Forward is elementwise.
@layer(
    "Clip",
    "neuron",
    bottoms=ONE,
    tops=ONE,
    source="caffe master layers/clip_layer.cpp, caffe.proto ClipParameter",
    memory=neuron_memory("bottom"),
    recompute=PURE_CHEAP,
)
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


# In place: Forward is elementwise (caffe_exp onto itself), Backward reads top_data only.
# Recompute: exp_layer.cpp/.cu Forward is elementwise.
@layer("Exp", "neuron", bottoms=ONE, tops=ONE, source="caffe master layers/exp_layer.cpp", memory=neuron_memory("top"), in_place=in_place_always, recompute=PURE_CHEAP)
def _exp(q: ShapeQuery) -> LayerShapes:
    """Elementwise base**(shift + scale*x); LayerSetUp CHECKs the base."""
    _log_base(q, q.proto.exp_param.base)
    return _like_bottom(q)


# Not in place: Backward reads bottom_data (in place, the log of it).
# Recompute: log_layer.cpp/.cu Forward is elementwise.
@layer("Log", "neuron", bottoms=ONE, tops=ONE, source="caffe master layers/log_layer.cpp", memory=neuron_memory("bottom"), recompute=PURE_CHEAP)
def _log(q: ShapeQuery) -> LayerShapes:
    """Elementwise log_base(shift + scale*x); LayerSetUp CHECKs that 1/log(base) is finite too."""
    base = q.proto.log_param.base
    q.check(_log_base(q, base) != 0, f"1/log(base) = 1/log({base}) is not finite")
    return _like_bottom(q)


def _prelu_memory(q: MemoryQuery) -> LayerMemory:
    """prelu_layer.cpp: LayerSetUp writes ``multiplier_`` [count(1)] with ones and shapes
    ``backward_buff_`` (the CPU code never touches it again); in place, Reshape shapes
    ``bottom_memory_`` like the bottom and Forward copies the input there for Backward,
    which reads the top's diff whatever it is asked to compute."""
    bottom = q.bottoms[0]
    per_item = (count(bottom[1:]),)
    saved = q.buffer("bottom_memory")
    in_place = q.in_place()
    setup = buffer_setup(q.buffer("multiplier"), per_item, filled=True) + buffer_setup(q.buffer("backward_buff"), per_item)
    backward = (read(saved if in_place else q.bottom(0)), read(q.param(0)), read(q.top(0), "diff"))
    backward += (write(q.param(0), "diff"),) if q.param_propagate_down[0] else ()
    backward += (write(q.bottom(0), "diff"),) if q.propagate_down[0] else ()
    return LayerMemory(
        setup=setup + (buffer_setup(saved, bottom) if in_place else ()),
        forward=(read(q.bottom(0)), write(q.top(0)), read(q.param(0))) + ((write(saved),) if in_place else ()),
        backward=backward,
    )


# In place: Forward copies the input to bottom_memory_ (``if (bottom[0] == top[0])``) and
# Backward reads that copy instead of bottom_data (prelu_layer.cpp and .cu).
# Recompute: prelu_layer.cpp/.cu Forward is elementwise with the slopes (in place it first
# copies the bottom into bottom_memory_, rewritten whole).
@layer("PReLU", "neuron", bottoms=ONE, tops=ONE, source="caffe master layers/prelu_layer.cpp", memory=_prelu_memory, in_place=in_place_always, recompute=PURE_CHEAP)
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


def softmax_memory(q: MemoryQuery, bottom: BlobId, top: BlobId, shape: Shape, axis: int, prefix: str = "", engine: int | None = None) -> LayerMemory:
    """The touches of one SoftmaxLayer from ``bottom`` to ``top`` (``prefix`` names the
    buffers of a Softmax built inside another layer; ``engine``: the softmax_param engine of
    the LayerParameter it is built from, by default this layer's, which SoftmaxWithLoss and
    its kin copy; a cuDNN Softmax holds one handle).  softmax_layer.cpp: Reshape writes
    ``sum_multiplier_`` [C] with ones and shapes ``scale_`` (the bottom with the softmax axis
    set to 1); Forward and Backward use ``scale_`` as scratch, Backward whatever
    propagate_down says.  cudnn_softmax_layer.cu: the same Reshape, no scratch, and
    Backward tests propagate_down[0]."""
    axis = canonical_axis(axis, len(shape))
    multiplier, scale = q.buffer(prefix + "sum_multiplier"), q.buffer(prefix + "scale")
    setup = buffer_setup(multiplier, (shape[axis],), filled=True) + buffer_setup(scale, shape[:axis] + (1,) + shape[axis + 1 :])
    if uses_cudnn(q, q.proto.softmax_param.engine if engine is None else engine):
        down = bool(q.propagate_down) and q.propagate_down[0]
        backward = (read(top), read(top, "diff"), read(bottom), write(bottom, "diff")) if down else ()
        return LayerMemory(setup=setup, forward=(read(bottom), write(top)), backward=backward, cudnn_handles=1)
    # The CPU code sums with sum_multiplier_; softmax_layer.cu's kernels need only scale_.
    scratch = (write(scale),) + ((read(multiplier),) if q.device == "cpu" else ())
    backward = (read(top, "diff"), read(top), write(bottom, "diff")) + scratch
    return LayerMemory(setup=setup, forward=(read(bottom), write(top)) + scratch, backward=backward)


def _softmax_memory(q: MemoryQuery) -> LayerMemory:
    return softmax_memory(q, q.bottom(0), q.top(0), q.bottoms[0], q.proto.softmax_param.axis)


# softmax_layer.cpp Forward_cpu, per element: the max over the axis, the subtraction, exp,
# the sum and the division (cuDNN's kernel does the same work).
SOFTMAX_FLOPS = 5

# Not flagged in place: the CPU code is right in place, but cuDNN's softmax Backward
# with dx aliasing dy is not documented as allowed.
# Recompute: softmax_layer.cpp/.cu Forward rewrites scale_ (scratch) and the top from the bottom.
@layer(
    "Softmax",
    "neuron",
    bottoms=ONE,
    tops=ONE,
    source="caffe master layers/softmax_layer.cpp, cudnn_softmax_layer.cpp",
    memory=_softmax_memory,
    recompute=PURE_CHEAP,
    forward_flops=per_top_element(SOFTMAX_FLOPS),
)
def _softmax(q: ShapeQuery) -> LayerShapes:
    """Normalises along ``axis``; the top is shaped like the bottom, the axis must exist."""
    axis_index(q, q.bottoms[0], q.proto.softmax_param.axis)
    return _like_bottom(q)


def _mvn_memory(q: MemoryQuery) -> LayerMemory:
    """mvn_layer.cpp: Reshape shapes ``mean_``/``variance_`` (N, C, 1, 1) whatever
    across_channels says, ``temp_`` like the top, and writes ``sum_multiplier_`` (1, C, H, W)
    across channels else (1, 1, H, W).  ``variance_`` is used only with normalize_variance
    (default true).  Backward runs whatever propagate_down says."""
    param = q.proto.mvn_param
    n, c, h, w = q.tops[0]
    mean, variance, temp, multiplier = (q.buffer(name) for name in ("mean", "variance", "temp", "sum_multiplier"))
    setup = buffer_setup(mean, (n, c, 1, 1)) + buffer_setup(variance, (n, c, 1, 1)) + buffer_setup(temp, (n, c, h, w))
    setup += buffer_setup(multiplier, (1, c if param.across_channels else 1, h, w), filled=True)
    forward = (read(q.bottom(0)), write(q.top(0)), read(multiplier), write(mean), write(temp))
    backward = (read(q.top(0), "diff"), read(q.top(0)), read(q.bottom(0)), write(q.bottom(0), "diff"), read(multiplier), write(mean), write(temp))
    if param.normalize_variance:
        forward += (write(variance),)
        backward += (read(variance),)
    return LayerMemory(setup=setup, forward=forward, backward=backward)


# Not in place: Backward (normalize_variance) reads both top_data and bottom_data.
# Recompute: mvn_layer.cpp/.cu Forward rewrites mean_, variance_ and temp_ from the bottom.
@layer("MVN", "neuron", bottoms=ONE, tops=ONE, source="caffe master layers/mvn_layer.cpp", memory=_mvn_memory, recompute=PURE_CHEAP)
def _mvn(q: ShapeQuery) -> LayerShapes:
    """Caffe reshapes the top to (num, channels, height, width): always 4 axes, missing ones 1."""
    return LayerShapes(tops=(legacy4(q, q.bottoms[0]),))


def _batch_norm_memory(q: MemoryQuery) -> LayerMemory:
    """batch_norm_layer.cpp.  Reshape shapes ``mean_``, ``variance_`` [C], ``temp_`` and
    ``x_norm_`` like the bottom, ``num_by_chans_`` [N*C], and writes the ones of
    ``batch_sum_multiplier_`` [N] and ``spatial_sum_multiplier_`` [count/(N*C)].  Forward
    touches the same buffers with or without use_global_stats (reading the three statistics
    blobs, or updating them).  Backward never touches a parameter's diff; run in place it
    first copies the top's diff into ``x_norm_``'s diff."""
    bottom = q.bottoms[0]
    num, channels = bottom[0], bottom[1]
    spatial = count(bottom) // (num * channels) if num * channels else 0
    names = ("mean", "variance", "temp", "x_norm", "num_by_chans", "batch_sum_multiplier", "spatial_sum_multiplier")
    mean, variance, temp, x_norm, by_chans, batch_ones, spatial_ones = (q.buffer(name) for name in names)
    setup = buffer_setup(mean, (channels,)) + buffer_setup(variance, (channels,)) + buffer_setup(temp, bottom) + buffer_setup(x_norm, bottom)
    setup += buffer_setup(batch_ones, (num,)) + buffer_setup(spatial_ones, (spatial,), filled=True)
    setup += buffer_setup(by_chans, (num * channels,)) + (write(batch_ones),)
    param = q.proto.batch_norm_param
    global_stats = param.use_global_stats if param.HasField("use_global_stats") else q.phase == "TEST"
    # The moving-average factor (blob 2) is a host scalar in either mode: Forward_gpu reads
    # and updates it with cpu_data()/mutable_cpu_data() (batch_norm_layer.cu), so a GPU run
    # never gives it a device copy.
    stats = tuple((read if global_stats else write)(q.param(j), "data", "host" if j == 2 else "") for j in range(3))
    forward = (read(q.bottom(0)), write(q.top(0)), read(spatial_ones), read(batch_ones), write(mean), write(variance), write(by_chans), write(temp))
    forward += stats + (write(x_norm),)
    backward: tuple[Action, ...] = (read(q.top(0), "diff"),)
    if q.in_place():
        backward += (write(x_norm, "diff"),)
    backward += (write(q.bottom(0), "diff"), read(temp))
    if not global_stats:
        backward += (read(x_norm), write(by_chans), write(mean), read(spatial_ones), read(batch_ones))
    return LayerMemory(setup=setup, forward=forward, backward=backward, notes=_cudnn_batch_norm_note(q))


def _cudnn_batch_norm_note(q: MemoryQuery) -> tuple[str, ...]:
    """Tongcheng/caffe@1625bb3b (Tongcheng/DN_CaffeScript's Caffe) adds ``engine``,
    ``scale_filler`` and ``bias_filler`` for its CuDNNBatchNormLayer (cudnn_batch_norm_layer.cpp:
    four (1, C, 1, 1) blobs, scale and bias learnt), but batch_norm_layer.cpp registers the
    BatchNorm type with REGISTER_LAYER_CLASS and no factory picks the cuDNN class: the
    layer built is always the plain BatchNormLayer counted here.  Said, since the file
    asks for cuDNN."""
    param = q.proto.batch_norm_param
    if not any(param.HasField(name) for name in ("engine", "scale_filler", "bias_filler")):
        return ()
    note = (
        f"layer '{q.layer.name}' ({q.layer.type}): engine/scale_filler/bias_filler (Tongcheng/caffe) are ignored as that fork "
        "ignores them: its BatchNorm type always builds the plain BatchNormLayer (3 statistics blobs, no scale or bias)"
    )
    return (note,)


@recompute_rule
def _batch_norm_recompute(proto, phase: str) -> Recompute:
    """batch_norm_layer.cpp/.cu Forward: with use_global_stats (the default in TEST) it
    reads blobs 0..2 and writes mean_, variance_, temp_, x_norm_ and the top from them;
    without (the default in TRAIN) it computes mean_ and variance_ from the batch and then
    updates the running averages, blobs 0 and 1 (axpby with moving_average_fraction) and
    the factor blob 2 (``*= fraction; += 1``).  Nothing else outlives the call, and the
    top depends on the batch alone: a second run gives the same bytes once the runtime
    puts blobs 0..2 back (restores_params), or the averages would move twice."""
    param = proto.batch_norm_param
    global_stats = param.use_global_stats if param.HasField("use_global_stats") else phase == "TEST"
    if global_stats:
        return Recompute(True, "with use_global_stats its Forward reads the stored statistics and writes nothing else", cheap=True)
    return Recompute(True, "its Forward normalises with the batch's statistics and updates the running averages (blobs 0..2), which the runtime restores", cheap=True, restores_params=True)


# In place: Forward computes the mean from bottom_data before it edits top_data, Backward
# copies top_diff to x_norm_'s diff first (``if (bottom[0] != top[0]) ... else``) and
# reads the saved x_norm_, never the top's data (batch_norm_layer.cpp and .cu).
@layer("BatchNorm", "neuron", bottoms=ONE, tops=ONE, source="caffe master layers/batch_norm_layer.cpp", memory=_batch_norm_memory, in_place=in_place_always, recompute=_batch_norm_recompute)
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


def _broadcast(q: MemoryQuery, operand: Shape, axis: int) -> tuple[int, int, int]:
    """Scale/Bias Reshape: (outer_dim_, count of the operand, inner_dim_) around the operand,
    which covers bottom[0] from ``axis`` on (from axis 0 when it is a scalar)."""
    bottom = q.bottoms[0]
    start = canonical_axis(axis, len(bottom)) if operand else 0
    return count(bottom[:start]), count(operand), count(bottom[start + len(operand) :])


def _operand(q: MemoryQuery) -> tuple[BlobId, Shape, bool]:
    """Scale/Bias: the operand (bottom[1] when given, else parameter 0), its shape, and
    whether Backward computes its gradient (propagate_down[1] or param_propagate_down[0])."""
    if len(q.bottoms) > 1:
        return q.bottom(1), q.bottoms[1], q.propagate_down[1]
    return q.param(0), q.params[0], q.param_propagate_down[0]


def _bias_memory(q: MemoryQuery, bias: BlobId, shape: Shape, axis: int, data: BlobId, data_grad: bool, bias_grad: bool) -> LayerMemory:
    """bias_layer.cpp from ``data`` (bottom[0]; the top itself for Scale's inner Bias) to the
    top.  Reshape reads, then writes, ``bias_multiplier_`` [inner_dim_] with ones; Forward
    copies the data unless in place and adds the bias with one gemm per outer item;
    Backward copies the top's diff to the data's unless in place, and sums it into the
    bias's diff when ``bias_grad``."""
    outer, _, inner = _broadcast(q, shape, axis)
    multiplier = q.buffer("bias_multiplier")
    in_place = data == q.top(0)
    with_ones = (read(multiplier),) if outer else ()
    forward = (read(bias), write(q.top(0))) + (() if in_place else (read(data),)) + with_ones
    backward: tuple[Action, ...] = (read(q.top(0), "diff"), write(data, "diff")) if data_grad and not in_place else ()
    if bias_grad:
        backward += (read(q.top(0), "diff"), write(bias, "diff")) + with_ones
    setup = buffer_setup(multiplier, (inner,)) + (read(multiplier), write(multiplier))
    return LayerMemory(setup=setup, forward=forward, backward=backward)


def _bias_layer_memory(q: MemoryQuery) -> LayerMemory:
    bias, shape, bias_grad = _operand(q)
    return _bias_memory(q, bias, shape, q.proto.bias_param.axis, q.bottom(0), q.propagate_down[0], bias_grad)


# In place (top 0 = bottom 0): Forward skips its copy and adds onto the data, Backward
# skips copying top_diff (it is the bottom's diff) and reads only top_diff (bias_layer.cpp, .cu).
# Recompute: bias_layer.cpp/.cu Forward adds the bias (a gemm with K = 1 broadcast, no product).
@layer("Bias", "neuron", bottoms=ONE_OR_TWO, tops=ONE, source="caffe master layers/bias_layer.cpp", memory=_bias_layer_memory, in_place=in_place_always, recompute=PURE_CHEAP)
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


def _scale_gradient(q: MemoryQuery, scale: BlobId, outer: int, dim: int, inner: int, temp: BlobId) -> tuple[Action, ...]:
    """ScaleLayer::Backward_cpu, the scale's gradient: top diff x input into a product
    buffer (the scale's diff when the scale is as big as the bottom, else ``temp_`` in
    place or the bottom's diff), then summed over inner (into the scale's diff when outer
    is 1, else ``sum_result_``) and over outer (into the scale's diff)."""
    in_place = q.in_place()
    touches = (read(q.top(0), "diff"), read(temp if in_place else q.bottom(0)))
    if count(q.bottoms[0]) == dim:
        return touches + (write(scale, "diff"),)
    touches += (write(temp) if in_place else write(q.bottom(0), "diff"),)
    ones = q.buffer("sum_multiplier")
    if inner != 1:
        total = scale if outer * dim == 1 or outer == 1 else q.buffer("sum_result")
        touches += (read(ones), write(total, "diff" if total == scale else "data"))
    if outer != 1:
        touches += (read(ones), write(scale, "diff"))
    return touches


def _scale_memory(q: MemoryQuery) -> LayerMemory:
    """scale_layer.cpp.  Reshape shapes ``temp_`` like the bottom when in place,
    ``sum_result_`` [outer*scale_dim], and reads, then writes, ``sum_multiplier_``
    [max(outer, inner)] with ones.  With bias_term, LayerSetUp sets up an inner Bias layer
    on the top, in place, whose blob is the Scale's last parameter; its Backward (the
    bias's gradient only) runs when that parameter's propagate_down is set."""
    param = q.proto.scale_param
    scale, shape, scale_grad = _operand(q)
    outer, dim, inner = _broadcast(q, shape, param.axis)
    temp, ones = q.buffer("temp"), q.buffer("sum_multiplier")
    in_place = q.in_place()
    setup = (buffer_setup(temp, q.bottoms[0]) if in_place else ()) + buffer_setup(q.buffer("sum_result"), (outer * dim,))
    setup += buffer_setup(ones, (max(outer, inner),)) + (read(ones), write(ones))
    forward = (read(q.bottom(0)),) + ((write(temp),) if in_place else ()) + (read(scale), write(q.top(0)))
    backward: tuple[Action, ...] = ()
    if param.bias_term:
        last = len(q.params) - 1
        bias = _bias_memory(q, q.param(last), q.params[last], param.axis, q.top(0), False, True)
        # Forward_gpu adds the bias in its own kernel (ScaleBiasForward, scale_layer.cu): only
        # the inner Bias layer's Backward reads its multiplier on the device.
        bias_forward = (read(q.param(last)),) if q.device == "gpu" else bias.forward
        setup, forward = bias.setup + setup, forward + bias_forward
        backward = bias.backward if q.param_propagate_down[last] else ()
    if scale_grad:
        backward += _scale_gradient(q, scale, outer, dim, inner, temp)
    if q.propagate_down[0]:
        backward += (read(q.top(0), "diff"), read(scale), write(q.bottom(0), "diff"))
    return LayerMemory(setup=setup, forward=forward, backward=backward)


# Recompute: scale_layer.cpp/.cu Forward multiplies (in place it first copies the bottom
# into temp_), then runs the inner Bias layer.
@layer(
    "Scale",
    "neuron",
    bottoms=ONE_OR_TWO,
    tops=ONE,
    source="caffe master layers/scale_layer.cpp, bias_layer.cpp",
    memory=_scale_memory,
    # In place: Forward copies the input to temp_ (``if (bottom[0] == top[0])``), Backward
    # reads temp_ for the scale's gradient before it writes bottom_diff (= top_diff).
    in_place=in_place_always,
    recompute=PURE_CHEAP,
)
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

"""Recurrent layers (LSTM, RNN) and the LSTMUnit they unroll into.

Caffe's ``RecurrentLayer`` (recurrent_layer.cpp) never computes anything itself: in
LayerSetUp it writes an *unrolled* net (one InnerProduct/Eltwise/... group per timestep,
built by the subclass's ``FillUnrolledNet``) and runs it as a sub-net.  Its top shapes are
the shapes of the unrolled net's outputs, and its parameter blobs are the unrolled net's
parameters that no other layer there shares (``param_owners()[i] == -1``), in the order
the unrolled net creates them.  So a rule here reproduces the CHECKs of
``RecurrentLayer::LayerSetUp/Reshape``, the CHECKs the unrolled layers would raise for
these shapes (the InnerProduct on ``x`` uses ``axis: 2``), and the list of owned weights.

Memory: every byte of the unrolled net is the recurrent layer's.  Its rule writes the
unrolled net as FillUnrolledNet does (a caffe_pb2.NetParameter), runs it through
caffemem's own passes (splits, shapes, Net::Init's flags, each inner layer's memory rule),
and replays those events as the outer layer's, with the inner blobs as its buffers
``unrolled/<name>`` and the inner weights' owners as its parameters.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TypeVar

from caffemem.graph import LayerShapes, Shape
from caffemem.graph import count as elements
from caffemem.layers.access import (
    Action,
    BlobId,
    LayerMemory,
    MemoryQuery,
    Reshape,
    Share,
    Touch,
    param_id,
    read,
    write,
)
from caffemem.layers.blob import axis_index, count, dim, format_shape, int32
from caffemem.layers.registry import (
    PURE_ANSWER,
    PURE_CHEAP,
    Arity,
    Recompute,
    ShapeQuery,
    layer,
    recompute_rule,
)
from caffemem.schema import caffe_pb2

# lstm_layer.cpp: the gate pre-activations i, f, o, g are computed by one InnerProduct.
LSTM_GATES = 4


@dataclass(frozen=True)
class _Unrolled:
    """What a recurrent architecture's FillUnrolledNet fixes: hidden blobs and owned weights."""

    hidden_blobs: tuple[str, ...]  # RecurrentInputBlobNames (h_0, c_0, ...): exposed with expose_hidden
    params: Callable[[int, int, int | None], tuple[Shape, ...]]  # (num_output, K of x, K of x_static)
    # RecurrentOutputBlobNames ("{T}": the last timestep), paired with hidden_blobs.
    final_blobs: tuple[str, ...]
    outputs: tuple[str, ...]  # OutputBlobNames: the tops' blobs in the unrolled net
    # FillUnrolledNet(net, recurrent_param, T, N, static_input): appends the layers.
    fill: Callable[[caffe_pb2.NetParameter, caffe_pb2.RecurrentParameter, int, int, bool], None]


def _num_output(q: ShapeQuery) -> int:
    """recurrent_param.num_output as the ``int`` FillUnrolledNet reads (CHECK_GT 0)."""
    num_output = int32(q.proto.recurrent_param.num_output)
    q.check(num_output > 0, "recurrent_param.num_output must be positive")
    return num_output


def _recurrent(q: ShapeQuery, arch: _Unrolled) -> LayerShapes:
    """RecurrentLayer::LayerSetUp + Reshape for one architecture."""
    expose = q.proto.recurrent_param.expose_hidden
    hidden = len(arch.hidden_blobs)
    # recurrent_layer.hpp: MinBottomBlobs = 2 (+ hidden if exposed), Max = Min + 1 (x_static);
    # ExactNumTopBlobs = 1 (+ hidden if exposed).
    min_bottoms = 2 + (hidden if expose else 0)
    q.check(
        min_bottoms <= len(q.bottoms) <= min_bottoms + 1,
        f"{q.layer.type} layer takes {min_bottoms} or {min_bottoms + 1} bottoms"
        f"{' with expose_hidden' if expose else ''}, got {len(q.bottoms)}",
    )
    tops_wanted = 1 + (hidden if expose else 0)
    q.check(len(q.layer.tops) == tops_wanted, f"{q.layer.type} layer takes exactly {tops_wanted} tops, got {len(q.layer.tops)}")

    x, cont = q.bottoms[0], q.bottoms[1]
    q.check(len(x) >= 2, f"bottom[0] must have at least 2 axes -- (#timesteps, #streams, ...); got {format_shape(x)}")
    steps, streams = x[0], x[1]
    q.check(len(cont) == 2, f"bottom[1] must have exactly 2 axes -- (#timesteps, #streams); got {format_shape(cont)}")
    q.check(
        cont == (steps, streams),
        f"bottom[1] {format_shape(cont)} must be (#timesteps, #streams) = ({steps}, {streams}) like bottom[0]",
    )
    # The unrolled net slices cont into T tops and concatenates T outputs: T >= 1.
    q.check(steps >= 1, "the sequence needs at least one timestep (bottom[0].shape(0) >= 1)")
    num_output = _num_output(q)

    static_input = len(q.bottoms) > min_bottoms
    static_k: int | None = None
    if static_input:
        x_static = q.bottoms[2]
        q.check(len(x_static) >= 1, "the static input bottom[2] must have at least 1 axis")
        q.check(
            x_static[0] == streams,
            f"the static input bottom[2] {format_shape(x_static)} must have #streams = {streams} as its first axis",
        )
        # Its InnerProduct flattens from axis 1 (CanonicalAxisIndex(1) needs a second axis).
        static_k = count(q, x_static, axis_index(q, x_static, 1, "x_static InnerProduct axis"))
    # The InnerProduct on x uses axis 2, so x needs a third axis; K = count(x, 2).
    input_k = count(q, x, axis_index(q, x, 2, "x InnerProduct axis"))

    state: Shape = (1, streams, num_output)  # RecurrentInputShapes: one timestep of hidden state
    if expose:
        offset = 2 + int(static_input)
        for name, shape in zip(arch.hidden_blobs, q.bottoms[offset:]):
            q.check(
                shape == state,
                f"shape mismatch - exposed hidden input {name} must be {format_shape(state)}, got {format_shape(shape)}",
            )
    tops: tuple[Shape, ...] = ((steps, streams, num_output),)
    if expose:
        tops += (state,) * hidden
    return LayerShapes(tops=tops, params=arch.params(num_output, input_k, static_k))


def _lstm_params(num_output: int, input_k: int, static_k: int | None) -> tuple[Shape, ...]:
    """lstm_layer.cpp FillUnrolledNet: W_xc, b_c (x_transform), W_xc_static, W_hc (transform_1)."""
    gates = LSTM_GATES * num_output
    params: tuple[Shape, ...] = ((gates, input_k), (gates,))
    if static_k is not None:
        params += ((gates, static_k),)
    return params + ((gates, num_output),)


def _rnn_params(num_output: int, input_k: int, static_k: int | None) -> tuple[Shape, ...]:
    """rnn_layer.cpp FillUnrolledNet: W_xh, b_h, W_xh_static, W_hh (W_hh_h_0), W_ho, b_o (W_ho_h_1)."""
    params: tuple[Shape, ...] = ((num_output, input_k), (num_output,))
    if static_k is not None:
        params += ((num_output, static_k),)
    return params + ((num_output, num_output), (num_output, num_output), (num_output,))


# --------------------------------------------------------------------------- the unrolled net


def _add(net: caffe_pb2.NetParameter, type: str, name: str, bottoms: list[str], tops: list[str]) -> caffe_pb2.LayerParameter:
    return net.layer.add(type=type, name=name, bottom=bottoms, top=tops)


def _inner_product(net, recurrent, name: str, outputs: int, bottom: str, top: str, params: tuple[str, ...], bias: bool = False, axis: int = 2) -> None:
    """FillUnrolledNet's ``hidden_param`` (no bias) or ``biased_hidden_param`` copy, its
    weights named for sharing; the two reading an input (x, x_static) set propagate_down."""
    layer = _add(net, "InnerProduct", name, [bottom], [top])
    ip = layer.inner_product_param
    ip.num_output, ip.bias_term, ip.axis = outputs, bias, axis
    ip.weight_filler.CopyFrom(recurrent.weight_filler)
    if bias:
        ip.bias_filler.CopyFrom(recurrent.bias_filler)
    layer.param.extend(caffe_pb2.ParamSpec(name=param) for param in params)
    if bottom in ("x", "x_static"):
        layer.propagate_down.append(True)


def _slice(net, name: str, bottom: str, tops: list[str]) -> None:
    _add(net, "Slice", name, [bottom], tops).slice_param.axis = 0


def _unroll_inputs(net, recurrent, w: str, width: int, hidden: tuple[str, ...], steps: int, streams: int, static: bool) -> None:
    """The part both FillUnrolledNets share before the timesteps: the state Input (one
    timestep), cont_slice, x_transform (W_x{w}, b_{w}), the static input's transform and
    Reshape, and the slice of the transformed x into timesteps."""
    state = _add(net, "Input", "", [], list(hidden))
    for _ in hidden:
        state.input_param.shape.add(dim=(1, streams, int32(recurrent.num_output)))
    _slice(net, "cont_slice", "cont", [f"cont_{t}" for t in range(1, steps + 1)])
    _inner_product(net, recurrent, "x_transform", width, "x", f"W_x{w}_x", (f"W_x{w}", f"b_{w}"), bias=True)
    if static:
        _inner_product(net, recurrent, f"W_x{w}_x_static", width, "x_static", f"W_x{w}_x_static_preshape", (f"W_x{w}_static",), axis=1)
        reshape = _add(net, "Reshape", f"W_x{w}_x_static_reshape", [f"W_x{w}_x_static_preshape"], [f"W_x{w}_x_static"])
        reshape.reshape_param.shape.dim.extend((1, -1, width))
    _slice(net, f"W_x{w}_x_slice", f"W_x{w}_x", [f"W_x{w}_x_{t}" for t in range(1, steps + 1)])


def _unroll_step(net, recurrent, w: str, width: int, t: int, transform: str, total: tuple[str, str], static: bool) -> None:
    """Both architectures' start of timestep t: h_conted_{t-1} = cont_t * h_{t-1} (Scale),
    W_h{w}_h_{t-1} (InnerProduct sharing W_h{w}), and their sum with W_x{w}_x_t (Eltwise)."""
    _add(net, "Scale", f"h_conted_{t - 1}", [f"h_{t - 1}", f"cont_{t}"], [f"h_conted_{t - 1}"]).scale_param.axis = 0
    _inner_product(net, recurrent, transform, width, f"h_conted_{t - 1}", f"W_h{w}_h_{t - 1}", (f"W_h{w}",))
    bottoms = [f"W_h{w}_h_{t - 1}", f"W_x{w}_x_{t}"] + ([f"W_x{w}_x_static"] if static else [])
    _add(net, "Eltwise", total[0], bottoms, [total[1]]).eltwise_param.operation = caffe_pb2.EltwiseParameter.SUM


def _concat(net, name: str, prefix: str, steps: int) -> None:
    _add(net, "Concat", name, [f"{prefix}_{t}" for t in range(1, steps + 1)], [prefix]).concat_param.axis = 0


def _fill_lstm(net, recurrent, steps: int, streams: int, static: bool) -> None:
    """lstm_layer.cpp LSTMLayer::FillUnrolledNet."""
    gates = LSTM_GATES * int32(recurrent.num_output)
    _unroll_inputs(net, recurrent, "c", gates, ("c_0", "h_0"), steps, streams, static)
    for t in range(1, steps + 1):
        _unroll_step(net, recurrent, "c", gates, t, f"transform_{t}", (f"gate_input_{t}", f"gate_input_{t}"), static)
        _add(net, "LSTMUnit", f"unit_{t}", [f"c_{t - 1}", f"gate_input_{t}", f"cont_{t}"], [f"c_{t}", f"h_{t}"])
    _add(net, "Split", "", [f"c_{steps}"], ["c_T"])
    _concat(net, "h_concat", "h", steps)


def _fill_rnn(net, recurrent, steps: int, streams: int, static: bool) -> None:
    """rnn_layer.cpp RNNLayer::FillUnrolledNet."""
    hidden = int32(recurrent.num_output)
    _unroll_inputs(net, recurrent, "h", hidden, ("h_0",), steps, streams, static)
    for t in range(1, steps + 1):
        _unroll_step(net, recurrent, "h", hidden, t, f"W_hh_h_{t - 1}", (f"h_input_sum_{t}", f"h_neuron_input_{t}"), static)
        _add(net, "TanH", f"h_neuron_{t}", [f"h_neuron_input_{t}"], [f"h_{t}"])
        _inner_product(net, recurrent, f"W_ho_h_{t}", hidden, f"h_{t}", f"W_ho_h_{t}", ("W_ho", "b_o"), bias=True)
        _add(net, "TanH", f"o_neuron_{t}", [f"W_ho_h_{t}"], [f"o_{t}"])
    _concat(net, "o_concat", "o", steps)


_LSTM = _Unrolled(hidden_blobs=("h_0", "c_0"), params=_lstm_params, final_blobs=("h_{T}", "c_T"), outputs=("h",), fill=_fill_lstm)
_RNN = _Unrolled(hidden_blobs=("h_0",), params=_rnn_params, final_blobs=("h_{T}",), outputs=("o",), fill=_fill_rnn)


def unrolled_net(q: MemoryQuery | ShapeQuery, arch: _Unrolled) -> caffe_pb2.NetParameter:
    """RecurrentLayer::LayerSetUp's NetParameter: an Input of x, cont (and x_static), the
    architecture's layers, every name prefixed with the layer's, and a pseudo-loss
    Reduction (loss_weight 1) on each output, which the layer never runs."""
    recurrent = q.proto.recurrent_param
    static = _static_input(q, arch)
    net = caffe_pb2.NetParameter()
    inputs = _add(net, "Input", "", [], ["x", "cont"] + (["x_static"] if static else []))
    for shape in q.bottoms[: 2 + static]:
        inputs.input_param.shape.add(dim=shape)
    arch.fill(net, recurrent, q.bottoms[0][0], q.bottoms[0][1], static)
    if q.layer.name:
        for inner in net.layer:
            inner.name = f"{q.layer.name}_{inner.name}"
    for output in arch.outputs:
        net.layer.add(name=f"{output}_pseudoloss", type="Reduction", bottom=[output], top=[f"{output}_pseudoloss"], loss_weight=[1])
    return net


def _time_major(proto, count: int, arch: _Unrolled) -> tuple[int, ...]:
    """recurrent_layer.cpp: x (T x N x ...), cont (T x N) and the exposed hidden inputs
    (1 x N x ...) put the batch on axis 1; x_static (N x ...), when there is one, does not."""
    hidden = len(arch.hidden_blobs) if proto.recurrent_param.expose_hidden else 0
    static = count - 2 - hidden == 1
    return tuple(i for i in range(count) if not (static and i == 2))


def _exposed(q: MemoryQuery | ShapeQuery, arch: _Unrolled) -> int:
    """How many hidden blobs are bottoms and tops (all of them with expose_hidden)."""
    return len(arch.hidden_blobs) if q.proto.recurrent_param.expose_hidden else 0


def _static_input(q: MemoryQuery | ShapeQuery, arch: _Unrolled) -> bool:
    """RecurrentLayer::LayerSetUp: bottom[2] is x_static when there is one more bottom."""
    return len(q.bottoms) > 2 + _exposed(q, arch)


_A = TypeVar("_A", Touch, Reshape, Share)


def _rename(action: _A, rename: Callable[[BlobId], BlobId]) -> _A:
    if isinstance(action, Share):
        return replace(action, dst=rename(action.dst), src=rename(action.src))
    return replace(action, blob=rename(action.blob))


def _recurrent_memory(q: MemoryQuery, arch: _Unrolled) -> LayerMemory:
    """recurrent_layer.cpp.  LayerSetUp builds the unrolled net (its Net::Init: every
    inner layer's SetUp, then ShareWeights) and writes the diffs of the final hidden
    blobs (h_T, c_T) with zeros.  Reshape points the inner x (data and diff), cont (data)
    and x_static at the bottoms, exposed hidden inputs' data at theirs, and each top's
    data and diff at its inner output.  Forward (after that Reshape again) re-shares the
    inner weights in TEST, copies h_T, c_T into h_0, c_0 unless they are exposed, and runs
    the inner Forward up to the pseudo-losses; Backward runs the inner Backward from there,
    whatever propagate_down says."""
    assert q.run_inner_net is not None, "the memory pass gives every query run_inner_net"
    unrolled = q.run_inner_net(unrolled_net(q, arch))
    shaped, rules, sharers = unrolled.shaped, unrolled.rules, unrolled.sharers
    layers = shaped.graph.layers
    last = len(layers) - len(arch.outputs)  # layers [0, last) run; the pseudo-losses never do

    inner_params = (param_id(l, j) for l in layers for j in range(len(shaped.layer_shapes[l.index].params)))
    owners = {param: q.param(k) for k, param in enumerate(p for p in inner_params if p not in sharers)}

    def inner(blob: BlobId | str) -> BlobId:
        blob = BlobId("blob", blob) if isinstance(blob, str) else blob
        return owners.get(blob) or q.buffer(f"unrolled/{blob.name}")

    setup: list[Action] = []
    share_weights: list[Action] = []
    forward: list[Action] = []
    for bucket, action in unrolled.events:
        if bucket.stage in ("input", "backward"):
            continue  # the inputs' fill is the copy below; Backward follows
        if bucket.in_net_init:
            setup.append(_rename(action, inner))
            if bucket.stage == "share":
                share_weights.append(setup[-1])
        elif bucket.layer < last:
            forward.append(_rename(action, inner))
    ran = list(zip(unrolled.need_backward[:last], rules[:last]))
    backward = tuple(_rename(action, inner) for need_backward, rule in reversed(ran) if need_backward for action in rule.backward)

    hidden, static = _exposed(q, arch), _static_input(q, arch)
    finals = tuple(name.format(T=q.bottoms[0][0]) for name in arch.final_blobs)
    links: list[Action] = [Share(inner("x"), q.bottom(0), "data"), Share(inner("x"), q.bottom(0), "diff"), Share(inner("cont"), q.bottom(1), "data")]
    if static:
        links += [Share(inner("x_static"), q.bottom(2), "data"), Share(inner("x_static"), q.bottom(2), "diff")]
    links += [Share(inner(name), q.bottom(2 + static + j), "data") for j, name in enumerate(arch.hidden_blobs[:hidden])]
    links += [Share(q.top(i), inner(name), part) for i, name in enumerate(arch.outputs) for part in ("data", "diff")]
    setup += [write(inner(name), "diff") for name in finals] + links
    copies = [] if hidden else [a for start, end in zip(arch.hidden_blobs, finals) for a in (read(inner(end)), write(inner(start)))]
    exposed = [Share(q.top(len(arch.outputs) + j), inner(name), "data") for j, name in enumerate(finals[:hidden])]
    forward = links + (share_weights if q.phase == "TEST" else []) + copies + forward + exposed
    pointer_only = tuple(_rename(touch, inner) for rule in rules[:last] for touch in rule.pointer_only)
    return LayerMemory(setup=tuple(setup), forward=tuple(forward), backward=backward, pointer_only=pointer_only)


# ---- recompute (LayerSpec.recompute, forward_flops) -------------------------------------


@recompute_rule
def _recurrent_recompute(proto, phase: str) -> Recompute:
    """recurrent_layer.cpp Forward_cpu (the .cu is the same): without expose_hidden it first
    copies the last timestep's hidden state (h_T, c_T) into h_0 (c_0), the state the next
    batch starts from, then runs the unrolled net: a second run would start from this
    batch's end and write other tops.  With expose_hidden the state comes from bottoms
    and the unrolled net (InnerProduct, Eltwise, LSTMUnit or TanH, Concat...) is pure; in
    TEST it also re-shares the weights (unrolled_net_->ShareWeights()), which changes no byte."""
    if not proto.recurrent_param.expose_hidden:
        return Recompute(False, "without expose_hidden its Forward carries the last hidden state into h_0 for the next batch")
    return PURE_ANSWER


def _recurrent_flops(arch: "_Unrolled"):
    """The unrolled net's matrix products and biases (its elementwise steps left out): each
    [rows, K] weight 2 rows K FLOPs and each bias its count per timestep and stream, T x N
    times; the static input's weight once per stream."""

    def flops(proto, shapes: LayerShapes) -> int:
        steps, streams = shapes.tops[0][0], shapes.tops[0][1]
        hidden = len(arch.hidden_blobs) if proto.recurrent_param.expose_hidden else 0
        static = len(proto.bottom) - hidden == 3  # x, cont, x_static, then the exposed state
        total = 0
        for i, param in enumerate(shapes.params):
            per_use = 2 * elements(param) if len(param) == 2 else elements(param)
            total += per_use * (streams if static and i == 2 else steps * streams)
        return total

    return flops


@layer(
    "LSTM",
    "recurrent",
    bottoms=Arity(2, 5),
    tops=Arity(1, 3),
    no_force_backward=(1,),
    time_major_bottoms=lambda proto, count: _time_major(proto, count, _LSTM),
    source="caffe master layers/lstm_layer.cpp, recurrent_layer.cpp",
    memory=lambda q: _recurrent_memory(q, _LSTM),
    recompute=_recurrent_recompute,
    forward_flops=_recurrent_flops(_LSTM),
)
def _lstm(q: ShapeQuery) -> LayerShapes:
    """x [T, N, ...], cont [T, N] (+ x_static [N, ...]) -> h [T, N, num_output]."""
    return _recurrent(q, _LSTM)


@layer(
    "RNN",
    "recurrent",
    bottoms=Arity(2, 4),
    tops=Arity(1, 2),
    no_force_backward=(1,),
    time_major_bottoms=lambda proto, count: _time_major(proto, count, _RNN),
    source="caffe master layers/rnn_layer.cpp, recurrent_layer.cpp",
    memory=lambda q: _recurrent_memory(q, _RNN),
    recompute=_recurrent_recompute,
    forward_flops=_recurrent_flops(_RNN),
)
def _rnn(q: ShapeQuery) -> LayerShapes:
    """x [T, N, ...], cont [T, N] (+ x_static [N, ...]) -> o [T, N, num_output]."""
    return _recurrent(q, _RNN)


def _lstm_unit_memory(q: MemoryQuery) -> LayerMemory:
    """lstm_unit_layer.cpp.  Reshape shapes ``X_acts_`` like bottom[1] (used by the GPU code
    only).  Forward reads the three bottoms and writes c_t, h_t; Backward returns unless c_{t-1}
    or the gates need a gradient, else reads all data and both top diffs (allocating those no
    consumer wrote) and writes both of those bottoms' diffs.  GPU (lstm_unit_layer.cu):
    Forward writes the gate activations to ``X_acts_``'s data, Backward reads them and
    writes their gradient to its diff (measured on an H100: 16 units x N x 4H floats each)."""
    acts = q.buffer("X_acts")
    gpu = q.device == "gpu"
    forward = tuple(read(q.bottom(i)) for i in range(3)) + ((write(acts),) if gpu else ()) + (write(q.top(0)), write(q.top(1)))
    backward: tuple[Action, ...] = ()
    if q.propagate_down[0] or q.propagate_down[1]:
        backward = tuple(read(q.bottom(i)) for i in range(3)) + ((read(acts),) if gpu else ())
        backward += tuple(read(q.top(i), part) for part in ("data", "diff") for i in range(2)) + ((write(acts, "diff"),) if gpu else ())
        backward += (write(q.bottom(0), "diff"), write(q.bottom(1), "diff"))
    return LayerMemory(setup=(Reshape(acts, q.bottoms[1]),), forward=forward, backward=backward)


# lstm_unit_layer.cpp/.cu Forward: elementwise gates from the three bottoms (the GPU code
# rewrites X_acts_ whole): pure and cheap.
@layer(
    "LSTMUnit",
    "recurrent",
    bottoms=Arity.exactly(3),
    tops=Arity.exactly(2),
    no_force_backward=(2,),
    time_major_bottoms=lambda proto, count: tuple(range(count)),  # c_prev, gates, cont: 1 x N x ...
    source="caffe master layers/lstm_unit_layer.cpp",
    memory=_lstm_unit_memory,
    recompute=PURE_CHEAP,
)
def _lstm_unit(q: ShapeQuery) -> LayerShapes:
    """c_prev [1, N, D], gates [1, N, 4D], cont [1, N] -> c_t, h_t, both shaped like c_prev."""
    c_prev, gates, cont = q.bottoms
    streams = dim(q, c_prev, 1)  # num_instances, read before the per-bottom CHECKs
    for i, (shape, axes) in enumerate(((c_prev, 3), (gates, 3), (cont, 2))):
        q.check(len(shape) == axes, f"bottom[{i}] must have {axes} axes, got {format_shape(shape)}")
        q.check(shape[0] == 1, f"bottom[{i}] must hold a single timestep (shape(0) == 1), got {format_shape(shape)}")
        q.check(shape[1] == streams, f"bottom[{i}] {format_shape(shape)} must have {streams} streams like bottom[0]")
    q.check(
        gates[2] == LSTM_GATES * c_prev[2],
        f"bottom[1] must hold {LSTM_GATES} gates of dimension {c_prev[2]} (shape(2) == {LSTM_GATES * c_prev[2]}), got {gates[2]}",
    )
    return LayerShapes(tops=(c_prev, c_prev))

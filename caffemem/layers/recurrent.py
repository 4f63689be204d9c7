"""Recurrent layers (LSTM, RNN) and the LSTMUnit they unroll into.

Caffe's ``RecurrentLayer`` (recurrent_layer.cpp) never computes anything itself: in
LayerSetUp it writes an *unrolled* net (one InnerProduct/Eltwise/... group per timestep,
built by the subclass's ``FillUnrolledNet``) and runs it as a sub-net.  Its top shapes are
the shapes of the unrolled net's outputs, and its parameter blobs are the unrolled net's
parameters that no other layer there shares (``param_owners()[i] == -1``), in the order
the unrolled net creates them.  So a rule here reproduces the CHECKs of
``RecurrentLayer::LayerSetUp/Reshape``, the CHECKs the unrolled layers would raise for
these shapes (the InnerProduct on ``x`` uses ``axis: 2``), and the list of owned weights.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..graph import LayerShapes, Shape
from .blob import axis_index, count, dim, format_shape, int32
from .registry import Arity, ShapeQuery, layer

# lstm_layer.cpp: the gate pre-activations i, f, o, g are computed by one InnerProduct.
LSTM_GATES = 4


@dataclass(frozen=True)
class _Unrolled:
    """What a recurrent architecture's FillUnrolledNet fixes: hidden blobs and owned weights."""

    hidden_blobs: tuple[str, ...]  # RecurrentInputBlobNames (h_0, c_0, ...): exposed with expose_hidden
    params: Callable[[int, int, int | None], tuple[Shape, ...]]  # (num_output, K of x, K of x_static)


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


_LSTM = _Unrolled(hidden_blobs=("h_0", "c_0"), params=_lstm_params)
_RNN = _Unrolled(hidden_blobs=("h_0",), params=_rnn_params)


@layer("LSTM", "recurrent", bottoms=Arity(2, 5), tops=Arity(1, 3), no_force_backward=(1,), source="caffe master layers/lstm_layer.cpp, recurrent_layer.cpp")
def _lstm(q: ShapeQuery) -> LayerShapes:
    """x [T, N, ...], cont [T, N] (+ x_static [N, ...]) -> h [T, N, num_output]."""
    return _recurrent(q, _LSTM)


@layer("RNN", "recurrent", bottoms=Arity(2, 4), tops=Arity(1, 2), no_force_backward=(1,), source="caffe master layers/rnn_layer.cpp, recurrent_layer.cpp")
def _rnn(q: ShapeQuery) -> LayerShapes:
    """x [T, N, ...], cont [T, N] (+ x_static [N, ...]) -> o [T, N, num_output]."""
    return _recurrent(q, _RNN)


@layer("LSTMUnit", "recurrent", bottoms=Arity.exactly(3), tops=Arity.exactly(2), no_force_backward=(2,), source="caffe master layers/lstm_unit_layer.cpp")
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

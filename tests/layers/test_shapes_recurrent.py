"""Shape rules of the recurrent layers (caffemem/layers/recurrent.py), from Caffe master.

RecurrentLayer runs an unrolled net built by FillUnrolledNet; its parameters are that
net's unshared weights in creation order (lstm_layer.cpp, rnn_layer.cpp):
LSTM: W_xc [4H, K], b_c [4H], (W_xc_static [4H, K_static]), W_hc [4H, H];
RNN:  W_xh [H, K], b_h [H], (W_xh_static [H, K_static]), W_hh [H, H], W_ho [H, H], b_o [H],
with K = count(x, 2) (InnerProduct axis 2) and K_static = count(x_static, 1).
"""

from __future__ import annotations

import pytest
from conftest import FIXTURES

from caffemem.errors import CaffememError
from caffemem.layers import SpecTable

LSTM = 'name: "lstm" type: "LSTM" bottom: "x" bottom: "cont" top: "h" recurrent_param {{ num_output: {n} {extra} }}'
RNN = 'name: "rnn" type: "RNN" bottom: "x" bottom: "cont" top: "o" recurrent_param {{ num_output: {n} {extra} }}'


def lstm(n: int, extra: str = "", tops: str = "") -> str:
    return LSTM.format(n=n, extra=extra).replace('top: "h"', 'top: "h"' + tops)


def test_lstm_like_lrcn(shape_of):
    # The LRCN deploy net: x [16, 10, 4096], cont [16, 10], num_output 256 (real Caffe agrees).
    shapes = shape_of(lstm(256), (16, 10, 4096), (16, 10))
    assert shapes.tops == ((16, 10, 256),)
    assert shapes.params == ((1024, 4096), (1024,), (1024, 256))


def test_lstm_flattens_trailing_input_axes(shape_of):
    # x_transform is an InnerProduct with axis 2: K = 3 * 4 * 5.
    shapes = shape_of(lstm(7), (2, 3, 3, 4, 5), (2, 3))
    assert shapes.tops == ((2, 3, 7),)
    assert shapes.params[0] == (28, 60)


def test_lstm_static_input_adds_its_weight(shape_of):
    # A third bottom x_static [N, ...]: W_xc_static [4H, count(x_static, 1)] after b_c.
    text = lstm(4).replace('bottom: "cont"', 'bottom: "cont" bottom: "s"')
    shapes = shape_of(text, (5, 2, 3), (5, 2), (2, 6, 2))
    assert shapes.tops == ((5, 2, 4),)
    assert shapes.params == ((16, 3), (16,), (16, 12), (16, 4))


def test_lstm_expose_hidden(shape_of):
    # expose_hidden: bottoms h_0, c_0 and tops h_T, c_T, each [1, N, num_output].
    text = lstm(4, "expose_hidden: true", ' top: "hT" top: "cT"').replace('bottom: "cont"', 'bottom: "cont" bottom: "h0" bottom: "c0"')
    shapes = shape_of(text, (5, 2, 3), (5, 2), (1, 2, 4), (1, 2, 4))
    assert shapes.tops == ((5, 2, 4), (1, 2, 4), (1, 2, 4))


def test_lstm_expose_hidden_checks_state_shape(shape_of):
    # Reshape: CHECK(recur_input_blobs_[j]->shape() == bottom[i]->shape()).
    text = lstm(4, "expose_hidden: true", ' top: "hT" top: "cT"').replace('bottom: "cont"', 'bottom: "cont" bottom: "h0" bottom: "c0"')
    with pytest.raises(CaffememError, match="shape mismatch"):
        shape_of(text, (5, 2, 3), (5, 2), (1, 2, 4), (1, 2, 5))


def test_lstm_expose_hidden_needs_the_extra_tops(shape_of):
    # ExactNumTopBlobs = 1 + 2 with expose_hidden.
    text = lstm(4, "expose_hidden: true").replace('bottom: "cont"', 'bottom: "cont" bottom: "h0" bottom: "c0"')
    with pytest.raises(CaffememError, match="tops"):
        shape_of(text, (5, 2, 3), (5, 2), (1, 2, 4), (1, 2, 4))


def test_lstm_cont_must_match_timesteps_and_streams(shape_of):
    # CHECK_EQ(T_, bottom[1]->shape(0)); CHECK_EQ(N_, bottom[1]->shape(1)).
    with pytest.raises(CaffememError, match="#timesteps"):
        shape_of(lstm(4), (5, 2, 3), (5, 3))


def test_lstm_cont_must_be_2d(shape_of):
    with pytest.raises(CaffememError, match="exactly 2 axes"):
        shape_of(lstm(4), (5, 2, 3), (5, 2, 1))


def test_lstm_input_needs_a_feature_axis(shape_of):
    # The unrolled InnerProduct's CanonicalAxisIndex(2) needs a third axis on x.
    with pytest.raises(CaffememError, match="axis"):
        shape_of(lstm(4), (5, 2), (5, 2))


def test_lstm_needs_num_output(shape_of):
    # FillUnrolledNet: CHECK_GT(num_output, 0).
    with pytest.raises(CaffememError, match="num_output"):
        shape_of(lstm(0), (5, 2, 3), (5, 2))


def test_lstm_static_input_streams(shape_of):
    # LayerSetUp: CHECK_EQ(N_, bottom[2]->shape(0)).
    text = lstm(4).replace('bottom: "cont"', 'bottom: "cont" bottom: "s"')
    with pytest.raises(CaffememError, match="streams"):
        shape_of(text, (5, 2, 3), (5, 2), (3, 6))


def test_rnn_params_in_unrolled_order(shape_of):
    shapes = shape_of(RNN.format(n=8, extra=""), (3, 2, 5), (3, 2))
    assert shapes.tops == ((3, 2, 8),)
    assert shapes.params == ((8, 5), (8,), (8, 8), (8, 8), (8,))


def test_rnn_static_input_and_expose_hidden(shape_of):
    # bottoms x, cont, x_static, h_0; W_xh_static comes right after b_h.
    text = RNN.format(n=8, extra="expose_hidden: true").replace('bottom: "cont"', 'bottom: "cont" bottom: "s" bottom: "h0"')
    text = text.replace('top: "o"', 'top: "o" top: "hT"')
    shapes = shape_of(text, (3, 2, 5), (3, 2), (2, 4), (1, 2, 8))
    assert shapes.tops == ((3, 2, 8), (1, 2, 8))
    assert shapes.params == ((8, 5), (8,), (8, 4), (8, 8), (8, 8), (8,))


def test_rnn_bottom_count(shape_of):
    # MinBottomBlobs 2, MaxBottomBlobs 3 without expose_hidden.
    text = RNN.format(n=8, extra="").replace('bottom: "cont"', 'bottom: "cont" bottom: "a" bottom: "b"')
    with pytest.raises(CaffememError, match="bottoms"):
        shape_of(text, (3, 2, 5), (3, 2), (2, 4), (2, 4))


def test_lstm_unit(shape_of):
    # lstm_unit_layer.cpp: tops c_t, h_t shaped like c_{t-1}; X is [1, N, 4D].
    text = 'type: "LSTMUnit" bottom: "c" bottom: "x" bottom: "cont" top: "c1" top: "h1"'
    assert shape_of(text, (1, 3, 5), (1, 3, 20), (1, 3)).tops == ((1, 3, 5), (1, 3, 5))


def test_lstm_unit_gate_dimension(shape_of):
    # CHECK_EQ(4 * hidden_dim_, bottom[1]->shape(2)).
    text = 'type: "LSTMUnit" bottom: "c" bottom: "x" bottom: "cont" top: "c1" top: "h1"'
    with pytest.raises(CaffememError, match="gates"):
        shape_of(text, (1, 3, 5), (1, 3, 19), (1, 3))


def test_lstm_unit_single_timestep(shape_of):
    text = 'type: "LSTMUnit" bottom: "c" bottom: "x" bottom: "cont" top: "c1" top: "h1"'
    with pytest.raises(CaffememError, match="single timestep"):
        shape_of(text, (2, 3, 5), (2, 3, 20), (2, 3))


def test_recurrent_layers_do_not_force_backward_to_cont():
    # recurrent_layer.hpp / lstm_layer.hpp AllowForceBackward.
    specs = SpecTable()
    assert specs.get("LSTM").no_force_backward == (1,)
    assert specs.get("RNN").no_force_backward == (1,)
    assert specs.get("LSTMUnit").no_force_backward == (2,)


def test_batch_scales_axis_1_of_time_major_inputs_and_axis_0_of_the_static_one():
    # recurrent_layer.cpp: x is T x N x ..., cont T x N, an exposed h_0 1 x N x ...,
    # x_static N x ...; LSTMUnit's bottoms are 1 x N x ...: --batch 3 sets every N to 3.
    import caffemem

    net = caffemem.analyze(str(FIXTURES / "layers" / "recurrent.prototxt"), batch=3).nets[0]
    shapes = {name: net.blobs[name] for name in ("x", "cont", "x_static", "h0", "gates")}
    assert shapes == {"x": (4, 3, 3, 5), "cont": (4, 3), "x_static": (3, 6), "h0": (1, 3, 8), "gates": (1, 3, 20)}

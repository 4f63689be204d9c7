"""Shape rules of the neuron family (caffemem/layers/neuron.py), checked against Caffe master's formulas."""

from __future__ import annotations

import pytest

from caffemem.errors import CaffememError

PLAIN = ["BNLL", "Dropout", "ELU", "Power", "ReLU", "Sigmoid", "Swish", "TanH", "Threshold", "AbsVal", "Exp", "Log", "Softmax"]


@pytest.mark.parametrize("type_", PLAIN)
def test_elementwise_top_is_shaped_like_bottom(shape_of, type_):
    # NeuronLayer::Reshape: top->ReshapeLike(*bottom[0]); no parameter blobs.
    shapes = shape_of(f'type: "{type_}" bottom: "x" top: "y"', (2, 3, 4, 5))
    assert shapes.tops == ((2, 3, 4, 5),)
    assert shapes.params == ()


def test_elementwise_keeps_any_number_of_axes(shape_of):
    # ReshapeLike copies the shape vector as is, 0-axis and 6-axis blobs included.
    assert shape_of('type: "ReLU"', ()).tops == ((),)
    assert shape_of('type: "TanH"', (1, 2, 3, 4, 5, 6)).tops == ((1, 2, 3, 4, 5, 6),)


def test_clip_with_bounds(shape_of):
    assert shape_of('type: "Clip" clip_param { min: -1 max: 1 }', (4, 7)).tops == ((4, 7),)


def test_clip_param_needs_both_bounds(shape_of):
    # ClipParameter's min and max are proto2 required fields: Caffe's parser refuses the file.
    with pytest.raises(CaffememError, match="required"):
        shape_of('type: "Clip" clip_param { min: 0 }', (4, 7))


def test_clip_without_clip_param_parses(shape_of):
    # An absent optional sub-message has no required fields to miss.
    assert shape_of('type: "Clip"', (4, 7)).tops == ((4, 7),)


def test_relu_in_place_is_allowed(shape_of):
    assert shape_of('type: "ReLU" bottom: "x" top: "x"', (2, 3)).tops == ((2, 3),)


def test_absval_refuses_in_place(shape_of):
    # absval_layer.cpp: CHECK_NE(top[0], bottom[0]).
    with pytest.raises(CaffememError, match="in-place"):
        shape_of('type: "AbsVal" bottom: "x" top: "x"', (2, 3))


@pytest.mark.parametrize("type_,param", [("Exp", "exp_param"), ("Log", "log_param")])
def test_exp_log_refuse_non_positive_base(shape_of, type_, param):
    with pytest.raises(CaffememError, match="strictly positive"):
        shape_of(f'type: "{type_}" {param} {{ base: -2 }}', (2, 3))


def test_exp_accepts_base_e_marker_and_positive_base(shape_of):
    # base == -1 means e; any base > 0 is fine for Exp (log(1) = 0 is only a problem for Log).
    assert shape_of('type: "Exp" exp_param { base: -1 }', (3,)).tops == ((3,),)
    assert shape_of('type: "Exp" exp_param { base: 1 }', (3,)).tops == ((3,),)


def test_log_refuses_base_one(shape_of):
    # log_layer.cpp: base_scale_ = 1 / log(1) is inf, CHECK(!isinf(base_scale_)).
    with pytest.raises(CaffememError, match="not finite"):
        shape_of('type: "Log" log_param { base: 1 }', (2, 3))


def test_prelu_learns_one_slope_per_channel(shape_of):
    # prelu_layer.cpp: blobs_[0] is vector<int>(1, channels) with channels = bottom->channels().
    shapes = shape_of('type: "PReLU"', (2, 16, 5, 5))
    assert shapes.tops == ((2, 16, 5, 5),)
    assert shapes.params == ((16,),)


def test_prelu_channel_shared_slope_is_a_scalar_blob(shape_of):
    # channel_shared: Blob(vector<int>(0)), a 0-axis blob holding one value.
    assert shape_of('type: "PReLU" prelu_param { channel_shared: true }', (2, 16, 5, 5)).params == ((),)


def test_prelu_needs_two_axes(shape_of):
    with pytest.raises(CaffememError, match=">= 2"):
        shape_of('type: "PReLU"', (8,))


def test_prelu_uses_legacy_channels_accessor(shape_of):
    # bottom->channels() CHECKs num_axes() <= 4.
    with pytest.raises(CaffememError, match="more than 4 axes"):
        shape_of('type: "PReLU"', (1, 2, 3, 4, 5))


def test_softmax_negative_axis(shape_of):
    assert shape_of('type: "Softmax" softmax_param { axis: -1 }', (2, 10)).tops == ((2, 10),)


def test_softmax_axis_out_of_range(shape_of):
    # CanonicalAxisIndex(2) on a 2-axis blob fails.
    with pytest.raises(CaffememError, match="out of range"):
        shape_of('type: "Softmax" softmax_param { axis: 2 }', (2, 10))


def test_mvn_top_always_has_four_axes(shape_of):
    # mvn_layer.cpp: top->Reshape(num, channels, height, width); missing legacy axes are 1.
    assert shape_of('type: "MVN"', (2, 3, 4, 5)).tops == ((2, 3, 4, 5),)
    assert shape_of('type: "MVN"', (6, 10)).tops == ((6, 10, 1, 1),)


def test_mvn_refuses_five_axes(shape_of):
    with pytest.raises(CaffememError, match="more than 4 axes"):
        shape_of('type: "MVN"', (1, 2, 3, 4, 5))


def test_batch_norm_keeps_mean_variance_and_factor(shape_of):
    # batch_norm_layer.cpp: blobs_ = [C], [C], [1].
    shapes = shape_of('type: "BatchNorm"', (4, 32, 7, 7))
    assert shapes.tops == ((4, 32, 7, 7),)
    assert shapes.params == ((32,), (32,), (1,))


def test_batch_norm_on_two_axes(shape_of):
    assert shape_of('type: "BatchNorm"', (4, 32)).params == ((32,), (32,), (1,))


def test_batch_norm_needs_channel_axis(shape_of):
    # Reshape CHECK_EQ(bottom->shape(1), channels_) fails through CanonicalAxisIndex on 1 axis.
    with pytest.raises(CaffememError, match="at least 2 axes"):
        shape_of('type: "BatchNorm"', (4,))


def test_batch_norm_accepts_frozen_params(shape_of):
    text = 'type: "BatchNorm" param { lr_mult: 0 } param { lr_mult: 0 } param { lr_mult: 0 }'
    assert shape_of(text, (1, 3, 2, 2)).params == ((3,), (3,), (1,))


def test_batch_norm_refuses_learned_statistics(shape_of):
    # A param without lr_mult has the default lr_mult 1: CHECK_EQ(lr_mult, 0) fails.
    with pytest.raises(CaffememError, match="lr_mult must be 0"):
        shape_of('type: "BatchNorm" param { decay_mult: 0 }', (1, 3, 2, 2))


def test_scale_default_learns_one_value_per_channel(shape_of):
    # axis 1, num_axes 1: scale shape = bottom.shape[1:2].
    shapes = shape_of('type: "Scale"', (2, 8, 5, 5))
    assert shapes.tops == ((2, 8, 5, 5),)
    assert shapes.params == ((8,),)


def test_scale_bias_term_adds_bias_of_scale_shape(shape_of):
    assert shape_of('type: "Scale" scale_param { bias_term: true }', (2, 8, 5, 5)).params == ((8,), (8,))


def test_scale_num_axes_to_end(shape_of):
    # num_axes -1: bottom.shape[axis:], here [5, 5] from axis -2.
    assert shape_of('type: "Scale" scale_param { axis: -2 num_axes: -1 }', (2, 8, 5, 5)).params == ((5, 5),)


def test_scale_num_axes_zero_is_a_scalar(shape_of):
    assert shape_of('type: "Scale" scale_param { num_axes: 0 bias_term: true }', (2, 8)).params == ((), ())


def test_scale_num_axes_past_end(shape_of):
    with pytest.raises(CaffememError, match="extends past"):
        shape_of('type: "Scale" scale_param { axis: 1 num_axes: 3 }', (2, 8, 5))


def test_scale_num_axes_below_minus_one(shape_of):
    with pytest.raises(CaffememError, match="num_axes"):
        shape_of('type: "Scale" scale_param { num_axes: -2 }', (2, 8, 5))


def test_scale_by_second_bottom_has_no_scale_blob(shape_of):
    # Two bottoms: the scale is bottom[1]; nothing learned.
    shapes = shape_of('type: "Scale"', (2, 8, 5, 5), (8, 5))
    assert shapes.tops == ((2, 8, 5, 5),)
    assert shapes.params == ()


def test_scale_by_second_bottom_with_bias_learns_bias_of_its_shape(shape_of):
    # The inner Bias layer gets num_axes = bottom[1]->num_axes() = 2: bias [8, 5].
    assert shape_of('type: "Scale" scale_param { bias_term: true }', (2, 8, 5, 5), (8, 5)).params == ((8, 5),)


def test_scale_second_bottom_dimension_mismatch(shape_of):
    with pytest.raises(CaffememError, match="dimension mismatch"):
        shape_of('type: "Scale"', (2, 8, 5, 5), (8, 4))


def test_scale_scalar_second_bottom_applies_anywhere(shape_of):
    # A 0-axis scale sets axis_ = 0, whatever scale_param.axis says.
    assert shape_of('type: "Scale" scale_param { axis: 3 }', (2, 8, 5, 5), ()).tops == ((2, 8, 5, 5),)


def test_bias_learned(shape_of):
    shapes = shape_of('type: "Bias" bias_param { axis: 0 num_axes: 2 }', (2, 8, 5))
    assert shapes.tops == ((2, 8, 5),)
    assert shapes.params == ((2, 8),)


def test_bias_second_bottom(shape_of):
    assert shape_of('type: "Bias"', (2, 8, 5), (8, 5)).params == ()


def test_bias_second_bottom_past_end(shape_of):
    with pytest.raises(CaffememError, match="extends past"):
        shape_of('type: "Bias" bias_param { axis: 2 }', (2, 8, 5), (5, 1))

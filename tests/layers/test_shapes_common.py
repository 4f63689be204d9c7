"""Shape rules of the common family (caffemem/layers/common.py), checked against Caffe master's formulas."""

from __future__ import annotations

import pytest

from caffemem.errors import CaffememError

# ---- InnerProduct ---------------------------------------------------------------------


def test_inner_product_flattens_from_axis_one(shape_of):
    # K = 3*4*5 = 60; top = (N, num_output); weight [N_out, K], bias [N_out].
    shapes = shape_of('type: "InnerProduct" inner_product_param { num_output: 10 }', (2, 3, 4, 5))
    assert shapes.tops == ((2, 10),)
    assert shapes.params == ((10, 60), (10,))


def test_inner_product_transpose_and_no_bias(shape_of):
    text = 'type: "InnerProduct" inner_product_param { num_output: 10 transpose: true bias_term: false }'
    assert shape_of(text, (2, 3, 4, 5)).params == ((60, 10),)


def test_inner_product_axis_keeps_leading_dims(shape_of):
    # axis 2: K = 4*5 = 20, top = bottom[:2] + (7,).
    shapes = shape_of('type: "InnerProduct" inner_product_param { num_output: 7 axis: 2 }', (2, 3, 4, 5))
    assert shapes.tops == ((2, 3, 7),)
    assert shapes.params == ((7, 20), (7,))


def test_inner_product_negative_axis(shape_of):
    assert shape_of('type: "InnerProduct" inner_product_param { num_output: 7 axis: -1 }', (2, 3, 4)).tops == ((2, 3, 7),)


def test_inner_product_axis_out_of_range(shape_of):
    with pytest.raises(CaffememError, match="out of range"):
        shape_of('type: "InnerProduct" inner_product_param { num_output: 7 axis: 3 }', (2, 3, 4))


# ---- Concat ---------------------------------------------------------------------------


def test_concat_channels(shape_of):
    assert shape_of('type: "Concat"', (2, 3, 4, 4), (2, 5, 4, 4), (2, 1, 4, 4)).tops == ((2, 9, 4, 4),)


def test_concat_negative_axis(shape_of):
    assert shape_of('type: "Concat" concat_param { axis: -1 }', (2, 3), (2, 4)).tops == ((2, 7),)


def test_concat_legacy_concat_dim(shape_of):
    assert shape_of('type: "Concat" concat_param { concat_dim: 0 }', (2, 3), (5, 3)).tops == ((7, 3),)


def test_concat_refuses_axis_and_concat_dim(shape_of):
    with pytest.raises(CaffememError, match="not both"):
        shape_of('type: "Concat" concat_param { axis: 0 concat_dim: 0 }', (2, 3), (5, 3))


def test_concat_dim_out_of_range(shape_of):
    with pytest.raises(CaffememError, match="out of range"):
        shape_of('type: "Concat" concat_param { concat_dim: 2 }', (2, 3), (2, 3))


def test_concat_mismatch_off_axis(shape_of):
    with pytest.raises(CaffememError, match="same shape"):
        shape_of('type: "Concat"', (2, 3, 4), (2, 3, 5))


def test_concat_mismatch_axes_count(shape_of):
    with pytest.raises(CaffememError, match="same #axes"):
        shape_of('type: "Concat"', (2, 3, 4), (2, 3))


def test_concat_single_bottom(shape_of):
    assert shape_of('type: "Concat"', (2, 3)).tops == ((2, 3),)


# ---- Slice ----------------------------------------------------------------------------


def test_slice_points(shape_of):
    # Points 2, 5 on an axis of 9: parts 2, 3, 4.
    text = 'type: "Slice" top: "a" top: "b" top: "c" slice_param { slice_point: 2 slice_point: 5 }'
    assert shape_of(text, (1, 9, 4)).tops == ((1, 2, 4), (1, 3, 4), (1, 4, 4))


def test_slice_equal_split(shape_of):
    text = 'type: "Slice" top: "a" top: "b" top: "c" slice_param { axis: -1 }'
    assert shape_of(text, (2, 5, 6)).tops == ((2, 5, 2),) * 3


def test_slice_legacy_slice_dim(shape_of):
    text = 'type: "Slice" top: "a" top: "b" slice_param { slice_dim: 0 }'
    assert shape_of(text, (4, 3)).tops == ((2, 3), (2, 3))


def test_slice_uneven_split(shape_of):
    with pytest.raises(CaffememError, match="evenly divide"):
        shape_of('type: "Slice" top: "a" top: "b" top: "c"', (2, 5))


def test_slice_point_count_must_match_tops(shape_of):
    with pytest.raises(CaffememError, match="slice_point"):
        shape_of('type: "Slice" top: "a" top: "b" slice_param { slice_point: 1 slice_point: 2 }', (2, 5))


def test_slice_points_must_increase(shape_of):
    with pytest.raises(CaffememError, match="increasing"):
        shape_of('type: "Slice" top: "a" top: "b" top: "c" slice_param { slice_point: 3 slice_point: 3 }', (2, 5))


def test_slice_point_past_end(shape_of):
    with pytest.raises(CaffememError, match="past the end"):
        shape_of('type: "Slice" top: "a" top: "b" slice_param { slice_point: 7 }', (2, 5))


# ---- Split, Eltwise -------------------------------------------------------------------


def test_split_copies_shape_to_every_top(shape_of):
    assert shape_of('type: "Split" bottom: "x" top: "a" top: "b"', (2, 3)).tops == ((2, 3), (2, 3))


def test_split_refuses_in_place(shape_of):
    with pytest.raises(CaffememError, match="in-place"):
        shape_of('type: "Split" bottom: "x" top: "x" top: "b"', (2, 3))


def test_eltwise_sum(shape_of):
    assert shape_of('type: "Eltwise" eltwise_param { coeff: 1 coeff: -1 }', (2, 3), (2, 3)).tops == ((2, 3),)


def test_eltwise_shape_mismatch(shape_of):
    with pytest.raises(CaffememError, match="same shape"):
        shape_of('type: "Eltwise"', (2, 3), (3, 2))


def test_eltwise_coeff_count(shape_of):
    with pytest.raises(CaffememError, match="one coefficient per bottom"):
        shape_of('type: "Eltwise" eltwise_param { coeff: 1 }', (2, 3), (2, 3))


def test_eltwise_prod_refuses_coeff(shape_of):
    with pytest.raises(CaffememError, match="only takes coefficients for summation"):
        shape_of('type: "Eltwise" eltwise_param { operation: PROD coeff: 1 coeff: 2 }', (2, 3), (2, 3))


def test_eltwise_max(shape_of):
    assert shape_of('type: "Eltwise" eltwise_param { operation: MAX }', (1, 2), (1, 2), (1, 2)).tops == ((1, 2),)


# ---- Reshape, Flatten -----------------------------------------------------------------


def test_reshape_copy_and_infer(shape_of):
    # 0 copies bottom dim 0 (2); -1 = 2*3*4*5 / (2*4) = 15.
    text = 'type: "Reshape" reshape_param { shape { dim: 0 dim: -1 dim: 4 } }'
    assert shape_of(text, (2, 3, 4, 5)).tops == ((2, 15, 4),)


def test_reshape_axis_and_num_axes(shape_of):
    # Replace axes [1, 2) (the 12) by (3, 4): (2, 3, 4, 5).
    text = 'type: "Reshape" reshape_param { shape { dim: 3 dim: 4 } axis: 1 num_axes: 1 }'
    assert shape_of(text, (2, 12, 5)).tops == ((2, 3, 4, 5),)


def test_reshape_negative_axis_inserts_at_end(shape_of):
    # axis -1 means start_axis = num_axes + 0 = 2; num_axes 0 inserts (1,) at the end.
    text = 'type: "Reshape" reshape_param { shape { dim: 1 } axis: -1 num_axes: 0 }'
    assert shape_of(text, (2, 3)).tops == ((2, 3, 1),)


def test_reshape_count_mismatch(shape_of):
    with pytest.raises(CaffememError, match="output count must match"):
        shape_of('type: "Reshape" reshape_param { shape { dim: 7 } }', (2, 3))


def test_reshape_two_inferred_dims(shape_of):
    with pytest.raises(CaffememError, match="multiple -1"):
        shape_of('type: "Reshape" reshape_param { shape { dim: -1 dim: -1 } }', (2, 3))


def test_reshape_indivisible_inferred_dim(shape_of):
    with pytest.raises(CaffememError, match="divisible"):
        shape_of('type: "Reshape" reshape_param { shape { dim: 4 dim: -1 } }', (2, 3))


def test_reshape_zero_without_bottom_axis(shape_of):
    with pytest.raises(CaffememError, match="no corresponding bottom axis"):
        shape_of('type: "Reshape" reshape_param { shape { dim: 6 dim: 0 } }', (6,))


def test_reshape_refuses_in_place(shape_of):
    with pytest.raises(CaffememError, match="in-place"):
        shape_of('type: "Reshape" bottom: "x" top: "x" reshape_param { shape { dim: -1 } }', (2, 3))


def test_flatten_default(shape_of):
    assert shape_of('type: "Flatten"', (2, 3, 4, 5)).tops == ((2, 60),)


def test_flatten_axis_range(shape_of):
    assert shape_of('type: "Flatten" flatten_param { axis: 1 end_axis: 2 }', (2, 3, 4, 5)).tops == ((2, 12, 5),)


def test_flatten_empty_range(shape_of):
    # end_axis = axis - 1: count(2, 2) = 1 is inserted (Caffe allows start == end + 1).
    assert shape_of('type: "Flatten" flatten_param { axis: 2 end_axis: 1 }', (2, 3, 4)).tops == ((2, 3, 1, 4),)


def test_flatten_reversed_range(shape_of):
    with pytest.raises(CaffememError, match="invalid"):
        shape_of('type: "Flatten" flatten_param { axis: 2 end_axis: 0 }', (2, 3, 4))


# ---- Reduction, Tile, Embed -----------------------------------------------------------


def test_reduction_default_axis_gives_scalar(shape_of):
    assert shape_of('type: "Reduction"', (2, 3, 4)).tops == ((),)


def test_reduction_keeps_leading_axes(shape_of):
    assert shape_of('type: "Reduction" reduction_param { operation: MEAN axis: -1 }', (2, 3, 4)).tops == ((2, 3),)


def test_tile(shape_of):
    assert shape_of('type: "Tile" tile_param { axis: 1 tiles: 3 }', (2, 4, 5)).tops == ((2, 12, 5),)


def test_tile_needs_tiles(shape_of):
    with pytest.raises(CaffememError, match="must be specified"):
        shape_of('type: "Tile"', (2, 4))


def test_tile_needs_positive_tiles(shape_of):
    with pytest.raises(CaffememError, match="positive"):
        shape_of('type: "Tile" tile_param { tiles: 0 }', (2, 4))


def test_embed(shape_of):
    # top = bottom shape + (num_output,); weight [input_dim, num_output]; bias [num_output].
    shapes = shape_of('type: "Embed" embed_param { input_dim: 100 num_output: 8 }', (5, 3))
    assert shapes.tops == ((5, 3, 8),)
    assert shapes.params == ((100, 8), (8,))


def test_embed_without_bias(shape_of):
    assert shape_of('type: "Embed" embed_param { input_dim: 100 num_output: 8 bias_term: false }', (5,)).params == ((100, 8),)


def test_embed_needs_input_dim(shape_of):
    with pytest.raises(CaffememError, match="input_dim"):
        shape_of('type: "Embed" embed_param { num_output: 8 }', (5,))


# ---- ArgMax ---------------------------------------------------------------------------


def test_argmax_default_shape(shape_of):
    # No axis: (num, 1, top_k) padded to at least 3 axes, other axes 1.
    assert shape_of('type: "ArgMax"', (4, 10)).tops == ((4, 1, 1),)
    assert shape_of('type: "ArgMax" argmax_param { top_k: 3 }', (4, 10, 2, 2)).tops == ((4, 1, 3, 1),)


def test_argmax_out_max_val(shape_of):
    assert shape_of('type: "ArgMax" argmax_param { out_max_val: true top_k: 2 }', (4, 10)).tops == ((4, 2, 2),)


def test_argmax_axis(shape_of):
    # With axis: bottom shape with that axis = top_k (out_max_val does not add an axis).
    text = 'type: "ArgMax" argmax_param { axis: 1 top_k: 2 out_max_val: true }'
    assert shape_of(text, (4, 10, 3)).tops == ((4, 2, 3),)


def test_argmax_top_k_larger_than_axis(shape_of):
    with pytest.raises(CaffememError, match="top_k"):
        shape_of('type: "ArgMax" argmax_param { axis: 1 top_k: 11 }', (4, 10))


def test_argmax_top_k_larger_than_item(shape_of):
    with pytest.raises(CaffememError, match="top_k"):
        shape_of('type: "ArgMax" argmax_param { top_k: 11 }', (4, 10))


# ---- BatchReindex, Filter, Parameter, Silence -----------------------------------------


def test_batch_reindex_num_from_index_blob(shape_of):
    assert shape_of('type: "BatchReindex"', (8, 3, 2), (5,)).tops == ((5, 3, 2),)


def test_batch_reindex_index_must_be_1d(shape_of):
    with pytest.raises(CaffememError, match="1 axis"):
        shape_of('type: "BatchReindex"', (8, 3), (5, 1))


def test_filter_upper_bound_is_bottom_num(shape_of):
    # First Reshape uses bottom[0]->shape(0) (every item passes): the upper bound.
    text = 'type: "Filter" top: "a" top: "b"'
    assert shape_of(text, (6, 3, 2), (6, 4), (6, 1)).tops == ((6, 3, 2), (6, 4))


def test_filter_top_count(shape_of):
    with pytest.raises(CaffememError, match="one top per filtered bottom"):
        shape_of('type: "Filter" top: "a" top: "b"', (6, 3), (6,))


def test_filter_selector_singletons(shape_of):
    with pytest.raises(CaffememError, match="singletons"):
        shape_of('type: "Filter" top: "a"', (6, 3), (6, 2))


def test_filter_num_mismatch(shape_of):
    with pytest.raises(CaffememError, match="first dimension"):
        shape_of('type: "Filter" top: "a"', (5, 3), (6,))


def test_parameter_top_and_blob_are_the_shape(shape_of):
    shapes = shape_of('type: "Parameter" parameter_param { shape { dim: 3 dim: 4 } }')
    assert shapes.tops == ((3, 4),)
    assert shapes.params == ((3, 4),)


def test_parameter_negative_dim(shape_of):
    with pytest.raises(CaffememError, match="negative"):
        shape_of('type: "Parameter" parameter_param { shape { dim: -3 } }')


def test_silence_has_no_tops(shape_of):
    assert shape_of('type: "Silence"', (2, 3), (4,)).tops == ()

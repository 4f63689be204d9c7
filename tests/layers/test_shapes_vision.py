"""Shape rules of the vision families (caffemem.layers.vision and caffemem.layers.fork_vision).

Every expected shape is worked out by hand from the Caffe source the rule cites; the
comment beside each says how.  C++ integer division truncates toward zero, and Pooling
rounds a float quotient up (CEIL) or down (FLOOR).
"""

from __future__ import annotations

import pytest

from caffemem.errors import CaffememError


def conv(params: str, bottom: str = 'bottom: "x"', top: str = 'top: "y"', kind: str = "Convolution") -> str:
    return f'type: "{kind}" {bottom} {top} convolution_param {{ {params} }}'


def pool(params: str, tops: str = 'top: "y"') -> str:
    return f'type: "Pooling" bottom: "x" {tops} pooling_param {{ {params} }}'


# --- Convolution ------------------------------------------------------------------------


def test_convolution_basic_shape_and_params(shape_of):
    # (10 + 0 - 3) / 1 + 1 = 8; weights (out, in, k, k), bias (out,)
    got = shape_of(conv("num_output: 4 kernel_size: 3"), (2, 3, 10, 10))
    assert got.tops == ((2, 4, 8, 8),)
    assert got.params == ((4, 3, 3, 3), (4,))


def test_convolution_stride_and_pad(shape_of):
    # (7 + 2*1 - 3) / 2 + 1 = 4
    assert shape_of(conv("num_output: 8 kernel_size: 3 stride: 2 pad: 1"), (1, 3, 7, 7)).tops == ((1, 8, 4, 4),)


def test_convolution_h_w_fields(shape_of):
    # h: (9 + 2 - 3) / 2 + 1 = 5; w: (12 + 4 - 5) / 3 + 1 = 4 (11/3 truncates to 3)
    text = conv("num_output: 6 kernel_h: 3 kernel_w: 5 stride_h: 2 stride_w: 3 pad_h: 1 pad_w: 2")
    got = shape_of(text, (1, 2, 9, 12))
    assert got.tops == ((1, 6, 5, 4),)
    assert got.params == ((6, 2, 3, 5), (6,))


def test_convolution_dilation(shape_of):
    # extent = 2 * (3 - 1) + 1 = 5: (10 - 5) / 1 + 1 = 6
    assert shape_of(conv("num_output: 1 kernel_size: 3 dilation: 2"), (1, 1, 10, 10)).tops == ((1, 1, 6, 6),)


def test_convolution_groups_divide_the_weight_input_channels(shape_of):
    # weights (num_output, channels / group, k, k) = (6, 4 / 2, 3, 3)
    assert shape_of(conv("num_output: 6 kernel_size: 3 group: 2"), (1, 4, 5, 5)).params == ((6, 2, 3, 3), (6,))


def test_convolution_without_bias(shape_of):
    assert shape_of(conv("num_output: 2 kernel_size: 1 bias_term: false"), (1, 3, 4, 4)).params == ((2, 3, 1, 1),)


def test_convolution_nd_with_one_kernel_size(shape_of):
    # three spatial axes, each (d - 3) + 1
    got = shape_of(conv("num_output: 2 kernel_size: 3"), (1, 2, 5, 6, 7))
    assert got.tops == ((1, 2, 3, 4, 5),)
    assert got.params == ((2, 2, 3, 3, 3), (2,))


def test_convolution_nd_with_kernel_size_per_axis(shape_of):
    # kernels 1, 2, 3 on 5, 6, 7: 5, 5, 5
    text = conv("num_output: 1 kernel_size: 1 kernel_size: 2 kernel_size: 3 force_nd_im2col: true")
    got = shape_of(text, (1, 2, 5, 6, 7))
    assert got.tops == ((1, 1, 5, 5, 5),)
    assert got.params[0] == (1, 2, 1, 2, 3)


def test_convolution_axis_moves_the_channel_axis(shape_of):
    # axis 2: axes before it are kept, channels = 4, spatial (8, 8) -> (6, 6)
    got = shape_of(conv("num_output: 5 kernel_size: 3 axis: 2"), (2, 3, 4, 8, 8))
    assert got.tops == ((2, 3, 5, 6, 6),)
    assert got.params == ((5, 4, 3, 3), (5,))


def test_convolution_negative_axis_is_canonicalised(shape_of):
    # axis -3 on 4 axes is axis 1
    assert shape_of(conv("num_output: 2 kernel_size: 3 axis: -3"), (1, 3, 5, 5)).tops == ((1, 2, 3, 3),)


def test_convolution_output_uses_c_truncating_division(shape_of):
    # (2 - 3) / 2 is 0 in C++ (Python's // would give -1), so the output is 1
    assert shape_of(conv("num_output: 1 kernel_size: 3 stride: 2"), (1, 1, 2, 2)).tops == ((1, 1, 1, 1),)


def test_convolution_several_bottoms_give_one_top_each(shape_of):
    text = conv("num_output: 2 kernel_size: 3", bottom='bottom: "a" bottom: "b"', top='top: "c" top: "d"')
    assert shape_of(text, (1, 1, 5, 5), (1, 1, 5, 5)).tops == ((1, 2, 3, 3), (1, 2, 3, 3))


@pytest.mark.parametrize(
    "params, bottom",
    [
        ("num_output: 2 kernel_size: 3", (1, 1, 1, 1)),  # (1 - 3) / 1 + 1 = -1: negative size
        ("num_output: 3 kernel_size: 3 group: 2", (1, 4, 5, 5)),  # num_output not a multiple of group
        ("num_output: 2 kernel_size: 3 group: 2", (1, 3, 5, 5)),  # channels not a multiple of group
        ("num_output: 0 kernel_size: 3", (1, 3, 5, 5)),
        ("num_output: 2", (1, 3, 5, 5)),  # no kernel at all
        ("num_output: 2 kernel_size: 3 kernel_h: 3 kernel_w: 3", (1, 3, 5, 5)),
        ("num_output: 2 kernel_h: 3 kernel_w: 3", (1, 3, 5, 5, 5)),  # kernel_h/w are 2-D only
        ("num_output: 2 kernel_h: 3", (1, 3, 5, 5)),  # kernel_w left 0
        ("num_output: 2 kernel_size: 3 kernel_size: 3", (1, 3, 5, 5, 5)),  # twice for 3 spatial axes
        ("num_output: 2 kernel_size: 3 stride: 0", (1, 3, 5, 5)),
        ("num_output: 2 kernel_size: 3 pad: 1 pad_h: 1", (1, 3, 5, 5)),
        ("num_output: 2 kernel_size: 3 axis: 4", (1, 3, 5, 5)),
    ],
)
def test_convolution_checks(shape_of, params, bottom):
    with pytest.raises(CaffememError):
        shape_of(conv(params), bottom)


def test_convolution_bottoms_must_share_a_shape(shape_of):
    text = conv("num_output: 2 kernel_size: 3", bottom='bottom: "a" bottom: "b"', top='top: "c" top: "d"')
    with pytest.raises(CaffememError):
        shape_of(text, (1, 1, 5, 5), (1, 1, 6, 6))


def test_convolution_needs_one_top_per_bottom(shape_of):
    with pytest.raises(CaffememError):
        shape_of(conv("num_output: 2 kernel_size: 3", bottom='bottom: "a" bottom: "b"'), (1, 1, 5, 5), (1, 1, 5, 5))


# --- Deconvolution ----------------------------------------------------------------------


def test_deconvolution_fcn_upscore(shape_of):
    # 2 * (16 - 1) + 4 - 0 = 34; weights (channels, num_output / group, k, k)
    got = shape_of(conv("num_output: 21 kernel_size: 4 stride: 2 bias_term: false", kind="Deconvolution"), (1, 21, 16, 16))
    assert got.tops == ((1, 21, 34, 34),)
    assert got.params == ((21, 21, 4, 4),)


def test_deconvolution_groups_reverse_the_weight(shape_of):
    # weights (channels=4, num_output/group=3, 3, 3); 1 * (5 - 1) + 3 = 7
    got = shape_of(conv("num_output: 6 kernel_size: 3 group: 2", kind="Deconvolution"), (1, 4, 5, 5))
    assert got.tops == ((1, 6, 7, 7),)
    assert got.params == ((4, 3, 3, 3), (6,))


def test_deconvolution_pad_and_dilation(shape_of):
    # extent 2 * (3 - 1) + 1 = 5: 2 * (5 - 1) + 5 - 2 * 1 = 11
    text = conv("num_output: 1 kernel_size: 3 stride: 2 pad: 1 dilation: 2", kind="Deconvolution")
    assert shape_of(text, (1, 1, 5, 5)).tops == ((1, 1, 11, 11),)


# --- Pooling ----------------------------------------------------------------------------


def test_pooling_max_rounds_up(shape_of):
    # ceil((6 - 3) / 2) + 1 = 3
    assert shape_of(pool("kernel_size: 3 stride: 2"), (1, 3, 6, 6)).tops == ((1, 3, 3, 3),)
    assert shape_of(pool("kernel_size: 3 stride: 2"), (1, 3, 6, 6)).params == ()


def test_pooling_round_mode_floor(shape_of):
    # ceil(5 / 2) + 1 = 4 by default, floor(5 / 2) + 1 = 3 with FLOOR
    assert shape_of(pool("kernel_size: 2 stride: 2"), (1, 1, 7, 7)).tops == ((1, 1, 4, 4),)
    assert shape_of(pool("kernel_size: 2 stride: 2 round_mode: FLOOR"), (1, 1, 7, 7)).tops == ((1, 1, 3, 3),)


def test_pooling_fork_ceil_mode_false_floors(shape_of):
    # DenseNet ports (BVLC PR #3057): ceil_mode: false is floor; (112 + 2 - 3) / 2 = 55.5 -> 55 + 1
    assert shape_of(pool("kernel_size: 3 stride: 2 pad: 1 ceil_mode: false"), (1, 64, 112, 112)).tops == ((1, 64, 56, 56),)
    assert shape_of(pool("kernel_size: 3 stride: 2 pad: 1"), (1, 64, 112, 112)).tops == ((1, 64, 57, 57),)


def test_pooling_drops_a_last_window_that_starts_in_the_padding(shape_of):
    # ceil((5 + 2 - 2) / 2) + 1 = 4, but (4 - 1) * 2 = 6 >= 5 + 1, so 3
    assert shape_of(pool("kernel_size: 2 stride: 2 pad: 1"), (1, 1, 5, 5)).tops == ((1, 1, 3, 3),)


def test_pooling_global(shape_of):
    assert shape_of(pool("pool: AVE global_pooling: true"), (2, 8, 7, 5)).tops == ((2, 8, 1, 1),)


def test_pooling_h_w_fields(shape_of):
    # h: ceil((8 + 2 - 3) / 2) + 1 = 5, kept as (5 - 1) * 2 < 8 + 1; w: ceil((9 + 0 - 2) / 3) + 1 = 4,
    # and since some padding is set the clip runs on w too: (4 - 1) * 3 >= 9 + 0, so 3
    text = pool("pool: AVE kernel_h: 3 kernel_w: 2 stride_h: 2 stride_w: 3 pad_h: 1 pad_w: 0")
    assert shape_of(text, (1, 2, 8, 9)).tops == ((1, 2, 5, 3),)


def test_pooling_max_mask_top(shape_of):
    got = shape_of(pool("kernel_size: 2 stride: 2", tops='top: "y" top: "mask"'), (1, 3, 4, 4))
    assert got.tops == ((1, 3, 2, 2), (1, 3, 2, 2))


@pytest.mark.parametrize(
    "params, tops",
    [
        ("pool: AVE kernel_size: 2", 'top: "y" top: "mask"'),  # mask only for MAX
        ("pool: STOCHASTIC kernel_size: 3 pad: 1", 'top: "y"'),  # padding only for AVE/MAX
        ("kernel_size: 2 pad: 2", 'top: "y"'),  # pad must be below the kernel
        ("global_pooling: true kernel_size: 2", 'top: "y"'),
        ("global_pooling: true stride: 2", 'top: "y"'),
        ("kernel_size: 2 kernel_h: 2 kernel_w: 2", 'top: "y"'),
        ("kernel_h: 2", 'top: "y"'),
        ("stride: 1", 'top: "y"'),  # no kernel
        ("kernel_size: 2 pad: 1 pad_h: 1 pad_w: 1", 'top: "y"'),
        ("kernel_size: 2 stride_h: 2", 'top: "y"'),
    ],
)
def test_pooling_checks(shape_of, params, tops):
    with pytest.raises(CaffememError):
        shape_of(pool(params, tops), (1, 3, 6, 6))


def test_pooling_needs_four_axes(shape_of):
    with pytest.raises(CaffememError):
        shape_of(pool("kernel_size: 2"), (1, 3, 6))


# --- SPP --------------------------------------------------------------------------------


def test_spp_one_level_is_a_pooling_to_one_bin(shape_of):
    got = shape_of('type: "SPP" bottom: "x" top: "y" spp_param { pyramid_height: 1 }', (2, 3, 7, 5))
    assert got.tops == ((2, 3, 1, 1),)


def test_spp_levels_are_flattened_and_concatenated(shape_of):
    # bins 1, 2, 4 on 8x8 with kernels 8, 4, 2: 3 * (1 + 4 + 16) = 63
    got = shape_of('type: "SPP" bottom: "x" top: "y" spp_param { pyramid_height: 3 }', (2, 3, 8, 8))
    assert got.tops == ((2, 63),)


def test_spp_uneven_levels_follow_pooling_arithmetic(shape_of):
    # 7x7: level 1 kernel 4 pad 1 -> ceil(5/4)+1 = 3, clipped to 2 as (3-1)*4 >= 7+1; level 2
    # kernel 2 pad 1 -> ceil(7/2)+1 = 5, clipped to 4 as (5-1)*2 >= 7+1: 2 * (1 + 4 + 16) = 42
    got = shape_of('type: "SPP" bottom: "x" top: "y" spp_param { pyramid_height: 3 pool: AVE }', (1, 2, 7, 7))
    assert got.tops == ((1, 42),)


@pytest.mark.parametrize("height, bottom", [(2, (1, 1, 1, 1)), (3, (1, 1, 5, 5))])
def test_spp_too_tall_for_the_input(shape_of, height, bottom):
    # 1x1 at level 1: kernel 1, pad 1; 5x5 at level 2: kernel 2, pad 2; the pad is not below the kernel
    with pytest.raises(CaffememError):
        shape_of(f'type: "SPP" bottom: "x" top: "y" spp_param {{ pyramid_height: {height} }}', bottom)


def test_spp_needs_a_pyramid_height(shape_of):
    with pytest.raises(CaffememError):
        shape_of('type: "SPP" bottom: "x" top: "y"', (1, 1, 4, 4))


# --- Im2col -----------------------------------------------------------------------------


def test_im2col_channels_times_kernel_area(shape_of):
    # channels 3 * 3 * 3 = 27; (6 + 2 - 3) / 2 + 1 = 3
    text = 'type: "Im2col" bottom: "x" top: "y" convolution_param { kernel_size: 3 stride: 2 pad: 1 }'
    assert shape_of(text, (2, 3, 6, 6)).tops == ((2, 27, 3, 3),)


def test_im2col_rectangular_kernel(shape_of):
    text = 'type: "Im2col" bottom: "x" top: "y" convolution_param { kernel_h: 2 kernel_w: 3 }'
    assert shape_of(text, (1, 2, 5, 5)).tops == ((1, 12, 4, 3),)


def test_im2col_one_spatial_axis(shape_of):
    text = 'type: "Im2col" bottom: "x" top: "y" convolution_param { kernel_size: 3 }'
    assert shape_of(text, (2, 3, 10)).tops == ((2, 9, 8),)


def test_im2col_needs_a_spatial_axis(shape_of):
    text = 'type: "Im2col" bottom: "x" top: "y" convolution_param { kernel_size: 3 axis: -1 }'
    with pytest.raises(CaffememError):
        shape_of(text, (2, 3, 10))


# --- LRN --------------------------------------------------------------------------------


@pytest.mark.parametrize("region", ["ACROSS_CHANNELS", "WITHIN_CHANNEL"])
def test_lrn_keeps_the_shape(shape_of, region):
    got = shape_of(f'type: "LRN" bottom: "x" top: "y" lrn_param {{ local_size: 3 norm_region: {region} }}', (2, 5, 7, 6))
    assert got == type(got)(tops=((2, 5, 7, 6),), params=())


def test_lrn_local_size_must_be_odd(shape_of):
    with pytest.raises(CaffememError):
        shape_of('type: "LRN" bottom: "x" top: "y" lrn_param { local_size: 4 }', (1, 5, 7, 7))


def test_lrn_needs_four_axes(shape_of):
    with pytest.raises(CaffememError):
        shape_of('type: "LRN" bottom: "x" top: "y"', (1, 5))


# --- Crop -------------------------------------------------------------------------------


def test_crop_default_axis_two(shape_of):
    text = 'type: "Crop" bottom: "a" bottom: "b" top: "c" crop_param { offset: 5 }'
    assert shape_of(text, (1, 21, 44, 44), (1, 3, 34, 34)).tops == ((1, 21, 34, 34),)


def test_crop_without_crop_param(shape_of):
    # HED's old-style Crop: defaults (axis 2, offset 0)
    assert shape_of('type: "Crop" bottom: "a" bottom: "b" top: "c"', (1, 1, 9, 9), (1, 3, 8, 7)).tops == ((1, 1, 8, 7),)


def test_crop_offset_per_axis(shape_of):
    text = 'type: "Crop" bottom: "a" bottom: "b" top: "c" crop_param { axis: 1 offset: 1 offset: 2 offset: 3 }'
    assert shape_of(text, (2, 5, 10, 10), (1, 3, 4, 4)).tops == ((2, 3, 4, 4),)


def test_crop_negative_axis(shape_of):
    text = 'type: "Crop" bottom: "a" bottom: "b" top: "c" crop_param { axis: -1 }'
    assert shape_of(text, (2, 5, 10, 10), (1, 3, 4, 4)).tops == ((2, 5, 10, 4),)


@pytest.mark.parametrize(
    "params",
    ["offset: 3", "axis: 1 offset: 1 offset: 1", "axis: 4"],
)
def test_crop_checks(shape_of, params):
    # 10 - 3 < 8; two offsets for three axes; axis out of range
    with pytest.raises(CaffememError):
        shape_of(f'type: "Crop" bottom: "a" bottom: "b" top: "c" crop_param {{ {params} }}', (1, 1, 10, 10), (1, 1, 8, 8))


# --- Convolution3D / Pooling3D (facebook/C3D, C3D-v1.1) ----------------------------------


def c3d(params: str) -> str:
    return f'type: "Convolution3D" bottom: "x" top: "y" convolution3d_param {{ {params} }}'


def test_convolution3d_c3d_conv1a(shape_of):
    # (16 + 2 - 3) / 1 + 1 = 16, (112 + 2 - 3) / 1 + 1 = 112; bias stored as (1, 1, 1, 1, out)
    got = shape_of(c3d("num_output: 64 kernel_size: 3 kernel_depth: 3 pad: 1 temporal_pad: 1"), (10, 3, 16, 112, 112))
    assert got.tops == ((10, 64, 16, 112, 112),)
    assert got.params == ((64, 3, 3, 3, 3), (1, 1, 1, 1, 64))


def test_convolution3d_strides_truncate(shape_of):
    # L: (7 - 3) / 2 + 1 = 3; H, W: (10 + 2 - 3) / 3 + 1 = 4 (9/3); filter_group leaves weights alone
    text = c3d("num_output: 4 kernel_size: 3 kernel_depth: 3 stride: 3 temporal_stride: 2 pad: 1 filter_group: 2 bias_term: false")
    got = shape_of(text, (1, 2, 7, 10, 11))
    assert got.tops == ((1, 4, 3, 4, 4),)
    assert got.params == ((4, 2, 3, 3, 3),)


@pytest.mark.parametrize(
    "params, bottom",
    [
        ("num_output: 3 kernel_size: 3 kernel_depth: 3 filter_group: 2", (1, 2, 4, 4, 4)),
        ("num_output: 0 kernel_size: 3 kernel_depth: 3", (1, 2, 4, 4, 4)),
        ("num_output: 2 kernel_size: 3 kernel_depth: 3", (1, 2, 4, 4)),  # not a video blob
        ("num_output: 2 kernel_size: 3 kernel_depth: 3 stride: 0", (1, 2, 4, 4, 4)),
        ("num_output: 2 kernel_size: 5 kernel_depth: 3", (1, 2, 4, 2, 2)),  # negative size
    ],
)
def test_convolution3d_checks(shape_of, params, bottom):
    with pytest.raises(CaffememError):
        shape_of(c3d(params), bottom)


def p3d(params: str) -> str:
    return f'type: "Pooling3D" bottom: "x" top: "y" pooling3d_param {{ {params} }}'


def test_pooling3d_c3d_pools(shape_of):
    # pool1 keeps the length: (16 - 1) / 1 + 1; pool2 halves everything
    assert shape_of(p3d("kernel_size: 2 kernel_depth: 1 stride: 2"), (10, 64, 16, 112, 112)).tops == ((10, 64, 16, 56, 56),)
    text = p3d("kernel_size: 2 kernel_depth: 2 stride: 2 temporal_stride: 2")
    assert shape_of(text, (10, 128, 16, 56, 56)).tops == ((10, 128, 8, 28, 28),)


def test_pooling3d_rounds_up_without_clipping(shape_of):
    # L: ceil((5 - 2) / 2) + 1 = 3; H, W: ceil((5 + 2 - 3) / 2) + 1 = 3, kept (no clip in C3D)
    text = p3d("pool: AVE kernel_size: 3 kernel_depth: 2 stride: 2 temporal_stride: 2 pad: 1")
    assert shape_of(text, (1, 1, 5, 5, 5)).tops == ((1, 1, 3, 3, 3),)
    # ceil((5 + 2 - 2) / 2) + 1 = 4; BVLC Pooling would drop the last window (3 * 2 >= 5 + 1)
    text = p3d("pool: AVE kernel_size: 2 kernel_depth: 1 stride: 2 pad: 1")
    assert shape_of(text, (1, 1, 1, 5, 5)).tops == ((1, 1, 1, 4, 4),)


def test_pooling3d_padding_only_for_average(shape_of):
    with pytest.raises(CaffememError):
        shape_of(p3d("pool: MAX kernel_size: 2 kernel_depth: 1 pad: 1"), (1, 1, 4, 4, 4))


# --- Interp (PSPNet) --------------------------------------------------------------------


def interp(params: str) -> str:
    return f'type: "Interp" bottom: "x" top: "y" interp_param {{ {params} }}'


@pytest.mark.parametrize(
    "params, bottom, top",
    [
        ("height: 60 width: 60", (1, 512, 1, 1), (1, 512, 60, 60)),
        ("zoom_factor: 8", (1, 150, 60, 60), (1, 150, 473, 473)),  # 60 + 59 * 7
        ("shrink_factor: 2", (1, 3, 473, 473), (1, 3, 237, 237)),  # 472 / 2 + 1
        ("shrink_factor: 2 zoom_factor: 3", (1, 1, 9, 9), (1, 1, 13, 13)),  # 5, then 5 + 4 * 2
        ("zoom_factor: 2 pad_beg: -1 pad_end: -1", (1, 1, 10, 12), (1, 1, 15, 19)),  # 8 -> 15, 10 -> 19
        ("zoom_factor: 2 height: 5 width: 5", (1, 1, 4, 4), (1, 1, 7, 7)),  # zoom alone wins over height/width
    ],
)
def test_interp_sizes(shape_of, params, bottom, top):
    assert shape_of(interp(params), bottom).tops == (top,)


@pytest.mark.parametrize("params", ["", "height: 5", "zoom_factor: 0", "pad_beg: 1 zoom_factor: 2", "shrink_factor: 2 pad_end: -9"])
def test_interp_checks(shape_of, params):
    with pytest.raises(CaffememError):
        shape_of(interp(params), (1, 1, 8, 8))


# --- Upsample (SegNet) ------------------------------------------------------------------


def upsample(params: str) -> str:
    return f'type: "Upsample" bottom: "x" bottom: "mask" top: "y" upsample_param {{ {params} }}'


@pytest.mark.parametrize(
    "params, top",
    [
        ("scale: 2 upsample_w: 30 upsample_h: 23", (1, 512, 23, 30)),  # exact size wins over scale
        ("scale: 2", (1, 512, 30, 40)),
        ("scale_h: 2 scale_w: 3", (1, 512, 30, 60)),
        ("scale: 2 pad_out_h: true", (1, 512, 29, 40)),
        ("upsample_h: 31", (1, 512, 30, 40)),  # upsample_h alone falls back to scale (default 2)
    ],
)
def test_upsample_sizes(shape_of, params, top):
    assert shape_of(upsample(params), (1, 512, 15, 20), (1, 512, 15, 20)).tops == (top,)


@pytest.mark.parametrize(
    "params, mask",
    [
        ("scale: 2", (1, 512, 15, 21)),  # the mask must match the data
        ("scale: 2", (1, 512, 15, 20, 1)),
        ("scale: 2 scale_h: 2 scale_w: 2", (1, 512, 15, 20)),
        ("scale: 1", (1, 512, 15, 20)),
        ("scale: 3 pad_out_w: true", (1, 512, 15, 20)),
        ("upsample_h: 1 upsample_w: 9", (1, 512, 15, 20)),
    ],
)
def test_upsample_checks(shape_of, params, mask):
    with pytest.raises(CaffememError):
        shape_of(upsample(params), (1, 512, 15, 20), mask)


# --- ROIPooling (Fast/Faster R-CNN) and PSROIPooling (R-FCN) -----------------------------


def test_roi_pooling_one_map_per_roi(shape_of):
    text = 'type: "ROIPooling" bottom: "conv5_3" bottom: "rois" top: "pool5" roi_pooling_param { pooled_h: 7 pooled_w: 6 spatial_scale: 0.0625 }'
    assert shape_of(text, (1, 512, 38, 50), (128, 5)).tops == ((128, 512, 7, 6),)


def test_roi_pooling_needs_a_pooled_size(shape_of):
    with pytest.raises(CaffememError):
        shape_of('type: "ROIPooling" bottom: "a" bottom: "r" top: "p" roi_pooling_param { pooled_w: 7 }', (1, 8, 4, 4), (3, 5))


def test_psroi_pooling(shape_of):
    # 21 * 7 * 7 = 1029 score maps in; one (output_dim, group, group) map per roi out
    text = 'type: "PSROIPooling" bottom: "s" bottom: "rois" top: "p" psroi_pooling_param { spatial_scale: 0.0625 output_dim: 21 group_size: 7 }'
    assert shape_of(text, (1, 1029, 38, 50), (300, 5, 1, 1)).tops == ((300, 21, 7, 7),)


@pytest.mark.parametrize("params", ["output_dim: 2 group_size: 3", "output_dim: 0 group_size: 2", "output_dim: 2"])
def test_psroi_pooling_checks(shape_of, params):
    text = f'type: "PSROIPooling" bottom: "s" bottom: "rois" top: "p" psroi_pooling_param {{ spatial_scale: 1 {params} }}'
    with pytest.raises(CaffememError):
        shape_of(text, (1, 8, 4, 4), (3, 5))

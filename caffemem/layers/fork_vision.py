"""Vision layers that exist only in Caffe forks, each checked against its fork's source.

- Convolution3D, Pooling3D: facebook/C3D, C3D-v1.1 (the C3D-v1.1 UCF101 nets use these
  types with ``convolution3d_param`` / ``pooling3d_param``, not N-d Convolution).  Both set
  their top in LayerSetUp and leave Reshape empty.
- Interp: hszhao/PSPNet (DeepLab v2's bilinear resize).
- Upsample: alexgkendall/caffe-segnet (max-unpooling with the pooling mask).
- ROIPooling: rbgirshick/caffe-fast-rcnn, branch faster-rcnn (py-faster-rcnn's Caffe).
- PSROIPooling: daijifeng001/caffe-rfcn (R-FCN).
"""

from __future__ import annotations

from ..graph import LayerShapes, Shape
from .blob import format_shape, legacy4, reshaped
from .registry import Arity, ShapeQuery, layer
from .vision import c_div, float_div_rounded, positive, require_axes

FAMILY = "fork_vision"
C3D = "facebook/C3D C3D-v1.1/src/caffe/layers/"

_NCLHW = "num, channels, length, height, width"


def _video_bottom(q: ShapeQuery) -> Shape:
    """C3D reads shape(0..4) of its bottom: it needs at least 5 axes (N, C, L, H, W)."""
    bottom = q.bottoms[0]
    q.check(len(bottom) >= 5, f"bottom must have at least 5 axes ({_NCLHW}), got {format_shape(bottom)}")
    return bottom


@layer("Convolution3D", FAMILY, bottoms=Arity.exactly(1), tops=Arity.exactly(1), source=C3D + "convolution3d_layer.cpp")
def _convolution3d(q: ShapeQuery) -> LayerShapes:
    """Spatio-temporal convolution with square spatial kernels.

    out = (in + 2*pad - kernel) / stride + 1 (C division) on H and W, the same with the
    temporal_* fields on L; weights are (out, C, kernel_depth, k, k) whatever filter_group
    is, and the bias is stored as (1, 1, 1, 1, out).
    """
    num, channels, length, height, width = _video_bottom(q)[:5]
    param = q.proto.convolution3d_param
    q.check(param.num_output > 0, "num_output must be positive")
    q.check(param.num_output % positive(q, param.filter_group, "filter_group") == 0, "num_output must be a multiple of filter_group")
    k, depth, pad, temporal_pad = param.kernel_size, param.kernel_depth, param.pad, param.temporal_pad
    stride, temporal_stride = positive(q, param.stride, "stride"), positive(q, param.temporal_stride, "temporal_stride")
    top = (
        num,
        param.num_output,
        c_div(length + 2 * temporal_pad - depth, temporal_stride) + 1,
        c_div(height + 2 * pad - k, stride) + 1,
        c_div(width + 2 * pad - k, stride) + 1,
    )
    weight = (param.num_output, channels, depth, k, k)
    params = (weight, (1, 1, 1, 1, param.num_output)) if param.bias_term else (weight,)
    return LayerShapes(tops=(reshaped(q, top),), params=params)


@layer("Pooling3D", FAMILY, bottoms=Arity.exactly(1), tops=Arity.exactly(1), source=C3D + "pool3d_layer.cpp")
def _pooling3d(q: ShapeQuery) -> LayerShapes:
    """Spatio-temporal pooling, rounding up (float32 ceil) with no clipping and no temporal padding."""
    num, channels, length, height, width = _video_bottom(q)[:5]
    param = q.proto.pooling3d_param
    q.check(param.pad == 0 or param.pool == param.AVE, "padding is implemented only for average pooling")
    k, pad = param.kernel_size, param.pad
    stride, temporal_stride = positive(q, param.stride, "stride"), positive(q, param.temporal_stride, "temporal_stride")
    top = (
        num,
        channels,
        float_div_rounded(length - param.kernel_depth, temporal_stride, ceil=True) + 1,
        float_div_rounded(height + 2 * pad - k, stride, ceil=True) + 1,
        float_div_rounded(width + 2 * pad - k, stride, ceil=True) + 1,
    )
    return LayerShapes(tops=(reshaped(q, top),))


def _shrink(q: ShapeQuery, size: int, factor: int) -> int:
    q.check(factor >= 1, f"shrink_factor must be positive, got {factor}")
    return c_div(size - 1, factor) + 1


def _zoom(q: ShapeQuery, size: int, factor: int) -> int:
    q.check(factor >= 1, f"zoom_factor must be positive, got {factor}")
    return size + (size - 1) * (factor - 1)


@layer("Interp", FAMILY, bottoms=Arity.exactly(1), tops=Arity.exactly(1), source="hszhao/PSPNet src/caffe/layers/interp_layer.cpp")
def _interp(q: ShapeQuery) -> LayerShapes:
    """Bilinear resize of (cropped) H and W; the branch taken depends on which fields are *set*.

    pad_beg/pad_end (<= 0) crop the input first; then shrink_factor alone, zoom_factor alone,
    height+width, or shrink then zoom, in that order of precedence.
    """
    num, channels, height, width = legacy4(q, q.bottoms[0])
    param = q.proto.interp_param
    has = param.HasField
    q.check(param.pad_beg <= 0 and param.pad_end <= 0, "only non-positive padding (cropping) is supported")
    crop = param.pad_beg + param.pad_end
    height_eff, width_eff = height + crop, width + crop
    if has("shrink_factor") and not has("zoom_factor"):
        out = (_shrink(q, height_eff, param.shrink_factor), _shrink(q, width_eff, param.shrink_factor))
    elif has("zoom_factor") and not has("shrink_factor"):
        out = (_zoom(q, height_eff, param.zoom_factor), _zoom(q, width_eff, param.zoom_factor))
    elif has("height") and has("width"):
        out = (param.height, param.width)
    elif has("shrink_factor") and has("zoom_factor"):
        shrunk = (_shrink(q, height_eff, param.shrink_factor), _shrink(q, width_eff, param.shrink_factor))
        out = (_zoom(q, shrunk[0], param.zoom_factor), _zoom(q, shrunk[1], param.zoom_factor))
    else:
        raise q.fail("set zoom_factor, shrink_factor, or both height and width")
    q.check(height_eff > 0 and width_eff > 0, f"the cropped input ({height_eff} x {width_eff}) must be positive")
    q.check(out[0] > 0 and out[1] > 0, f"the output ({out[0]} x {out[1]}) must be positive")
    return LayerShapes(tops=((num, channels) + out,))


@layer("Upsample", FAMILY, bottoms=Arity.exactly(2), tops=Arity.exactly(1), source="alexgkendall/caffe-segnet src/caffe/layers/upsample_layer.cpp")
def _upsample(q: ShapeQuery) -> LayerShapes:
    """Max-unpooling: bottom 1 is the mask of the matching MAX pooling, shaped like bottom 0.

    The size is upsample_h x upsample_w when both are set, else (deprecated) the input
    times scale (or scale_h/scale_w), minus one where pad_out_h/pad_out_w (scale 2 only).
    """
    data, mask = q.bottoms
    require_axes(q, data, 4, "num, channels, height, width")
    require_axes(q, mask, 4, "num, channels, height, width", which="the mask bottom")
    q.check(data == mask, f"the mask {format_shape(mask)} must have the shape of the data {format_shape(data)}")
    param = q.proto.upsample_param
    has = param.HasField
    q.check(
        (has("upsample_h") and has("upsample_w"))
        or (not has("scale") and has("scale_h") and has("scale_w"))
        or (not has("scale_h") and not has("scale_w")),
        "upsample_h & upsample_w are required, else (deprecated) scale OR scale_h & scale_w",
    )
    if has("upsample_h") and has("upsample_w"):
        q.check(param.upsample_h > 1 and param.upsample_w > 1, "upsample_h and upsample_w must be greater than 1")
        return LayerShapes(tops=(data[:2] + (param.upsample_h, param.upsample_w),))
    scale = (param.scale_h, param.scale_w) if has("scale_h") else (param.scale, param.scale)
    q.check(scale[0] > 1 and scale[1] > 1, f"scale must be greater than 1, got {scale}")
    pad_out = (param.pad_out_h, param.pad_out_w)
    q.check(all(not pad or s == 2 for pad, s in zip(pad_out, scale)), "pad_out_h/pad_out_w require a scale of 2")
    out = tuple(size * s - int(pad) for size, s, pad in zip(data[2:], scale, pad_out))
    return LayerShapes(tops=(reshaped(q, data[:2] + out),))


_RCNN = "rbgirshick/caffe-fast-rcnn (faster-rcnn) src/caffe/layers/roi_pooling_layer.cpp"


@layer("ROIPooling", FAMILY, bottoms=Arity.exactly(2), tops=Arity.exactly(1), source=_RCNN)
def _roi_pooling(q: ShapeQuery) -> LayerShapes:
    """One pooled_h x pooled_w map per region: top num is bottom 1's num (the rois)."""
    param = q.proto.roi_pooling_param
    q.check(param.pooled_h > 0, "pooled_h must be > 0")
    q.check(param.pooled_w > 0, "pooled_w must be > 0")
    channels = legacy4(q, q.bottoms[0])[1]
    rois = legacy4(q, q.bottoms[1])[0]
    return LayerShapes(tops=((rois, channels, param.pooled_h, param.pooled_w),))


@layer("PSROIPooling", FAMILY, bottoms=Arity.exactly(2), tops=Arity.exactly(1), source="daijifeng001/caffe-rfcn src/caffe/layers/psroi_pooling_layer.cpp")
def _psroi_pooling(q: ShapeQuery) -> LayerShapes:
    """Position-sensitive ROI pooling: bottom 0 holds output_dim * group_size^2 score maps."""
    param = q.proto.psroi_pooling_param
    q.check(param.output_dim > 0, "output_dim must be > 0")
    q.check(param.group_size > 0, "group_size must be > 0")
    group = param.group_size
    channels = legacy4(q, q.bottoms[0])[1]
    q.check(
        channels == param.output_dim * group * group,
        f"input channel number ({channels}) does not match output_dim * group_size^2 ({param.output_dim * group * group})",
    )
    rois = legacy4(q, q.bottoms[1])[0]
    return LayerShapes(tops=((rois, param.output_dim, group, group),))

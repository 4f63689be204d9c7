"""Vision layers of BVLC Caffe master: convolution, pooling and their relatives.

Every rule mirrors the LayerSetUp + Reshape pair of the Caffe file named in its spec,
including the CHECKs, the legacy parameter forms and C's arithmetic (integer division
truncates toward zero; Pooling rounds a float32 quotient), because a shape that is off
by one pixel changes every blob after it.  The small helpers at the top are shared with
:mod:`caffemem.layers.fork_vision`, whose fork layers reuse the same conventions.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass
from typing import Sequence

from ..graph import LayerShapes, Shape
from ..schema import caffe_pb2
from .blob import axis_index, format_shape, reshaped
from .registry import Arity, ShapeQuery, layer

FAMILY = "vision"
BVLC = "caffe master "

# ----------------------------------------------------------------------------------------
# Helpers shared by the vision families
# ----------------------------------------------------------------------------------------


def c_div(a: int, b: int) -> int:
    """C++ integer division of ints: the quotient truncates toward zero (Python's // floors)."""
    quotient = abs(a) // abs(b)
    return quotient if (a >= 0) == (b > 0) else -quotient


def _float32(x: float) -> float:
    return struct.unpack("f", struct.pack("f", x))[0]


def float_div_rounded(numerator: int, denominator: int, ceil: bool) -> int:
    """``static_cast<int>(ceil|floor(static_cast<float>(n) / d))``: Pooling's float32 rounding.

    Division of two float32 values done in double then rounded to float32 is exact IEEE
    float32 division, so this matches Caffe even where float32 loses integer precision.
    """
    quotient = _float32(_float32(float(numerator)) / _float32(float(denominator)))
    return int(math.ceil(quotient) if ceil else math.floor(quotient))


def require_axes(q: ShapeQuery, shape: Shape, axes: int, meaning: str, which: str = "bottom") -> None:
    """The CHECK_EQ(n, num_axes()) many vision layers start their Reshape with."""
    q.check(len(shape) == axes, f"{which} must have {axes} axes ({meaning}), got {format_shape(shape)}")


def positive(q: ShapeQuery, value: int, name: str) -> int:
    """A divisor Caffe uses without a CHECK (it would crash or loop): reject it as a user error."""
    q.check(value > 0, f"{name} must be positive, got {value}")
    return value


# ----------------------------------------------------------------------------------------
# Convolution geometry (base_conv_layer.cpp / im2col_layer.cpp LayerSetUp)
# ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ConvGeometry:
    """Per spatial axis: kernel, stride, pad, dilation, plus where the channel axis is."""

    channel_axis: int
    kernel: tuple[int, ...]
    stride: tuple[int, ...]
    pad: tuple[int, ...]
    dilation: tuple[int, ...]

    def extent(self, i: int) -> int:
        return self.dilation[i] * (self.kernel[i] - 1) + 1


def _per_axis(
    q: ShapeQuery, values: Sequence[int], name: str, axes: int, default: int | None
) -> tuple[int, ...]:
    """A repeated field given once or once per spatial axis (or not at all, with a default)."""
    allowed = {1, axes} if default is None else {0, 1, axes}
    q.check(
        len(values) in allowed,
        f"{name} must be specified once, or once per spatial dimension ({name} specified {len(values)} times; {axes} spatial dims)",
    )
    if not values:
        return (default,) * axes if default is not None else ()
    return tuple(values[0] if len(values) == 1 else values[i] for i in range(axes))


def _h_w_pair(q: ShapeQuery, param, prefix: str, repeated: str, axes: int, default: int | None) -> tuple[int, ...]:
    """``<prefix>_h``/``<prefix>_w`` (2-D only, exclusive with the repeated field) or the repeated form."""
    if param.HasField(f"{prefix}_h") or param.HasField(f"{prefix}_w"):
        q.check(axes == 2, f"{prefix}_h & {prefix}_w can only be used for 2D convolution")
        q.check(len(getattr(param, repeated)) == 0, f"either {repeated} or {prefix}_h/w should be specified; not both")
        return (getattr(param, f"{prefix}_h"), getattr(param, f"{prefix}_w"))
    return _per_axis(q, list(getattr(param, repeated)), repeated, axes, default)


def conv_geometry(q: ShapeQuery, bottom: Shape, min_spatial_axes: int) -> ConvGeometry:
    """Parse convolution_param as BaseConvolutionLayer (min 0 spatial axes) or Im2col (min 1) does."""
    param = q.proto.convolution_param
    channel_axis = axis_index(q, bottom, param.axis)
    axes = len(bottom) - channel_axis - 1
    q.check(axes >= min_spatial_axes, f"the bottom needs {min_spatial_axes} or more spatial axes after the channel axis {channel_axis}")
    kernel = _h_w_pair(q, param, "kernel", "kernel_size", axes, None)
    q.check(all(k > 0 for k in kernel), "filter dimensions must be nonzero")
    stride = _h_w_pair(q, param, "stride", "stride", axes, 1)
    q.check(all(s > 0 for s in stride), "stride dimensions must be nonzero")
    pad = _h_w_pair(q, param, "pad", "pad", axes, 0)
    dilation = _per_axis(q, list(param.dilation), "dilation", axes, 1)
    return ConvGeometry(channel_axis, kernel, stride, pad, dilation)


def _conv_out(input_dim: int, geo: ConvGeometry, i: int) -> int:
    """ConvolutionLayer::compute_output_shape (C division)."""
    return c_div(input_dim + 2 * geo.pad[i] - geo.extent(i), geo.stride[i]) + 1


def _deconv_out(input_dim: int, geo: ConvGeometry, i: int) -> int:
    """DeconvolutionLayer::compute_output_shape."""
    return geo.stride[i] * (input_dim - 1) + geo.extent(i) - 2 * geo.pad[i]


def _base_conv(q: ShapeQuery, reverse: bool) -> LayerShapes:
    """BaseConvolutionLayer LayerSetUp + Reshape; ``reverse`` is Deconvolution's reverse_dimensions()."""
    q.check(len(q.layer.tops) == len(q.bottoms), "needs as many tops as bottoms (one output per input)")
    bottom = q.bottoms[0]
    for i, other in enumerate(q.bottoms[1:], start=1):
        q.check(other == bottom, f"shape mismatch - bottom[0]: {format_shape(bottom)} vs. bottom[{i}]: {format_shape(other)}")
    geo = conv_geometry(q, bottom, min_spatial_axes=0)
    param = q.proto.convolution_param
    channels = bottom[geo.channel_axis]
    num_output = param.num_output
    group = positive(q, param.group, "group")
    q.check(num_output > 0, "num_output must be positive")
    q.check(channels % group == 0, f"input channels ({channels}) must be a multiple of group ({group})")
    q.check(num_output % group == 0, f"num_output ({num_output}) must be a multiple of group ({group})")
    out_channels, in_channels = (channels, num_output) if reverse else (num_output, channels)
    weight = (out_channels, in_channels // group) + geo.kernel
    params = (weight, (num_output,)) if param.bias_term else (weight,)
    output_dim = _deconv_out if reverse else _conv_out
    spatial = bottom[geo.channel_axis + 1 :]
    top = bottom[: geo.channel_axis] + (num_output,) + tuple(output_dim(d, geo, i) for i, d in enumerate(spatial))
    return LayerShapes(tops=(reshaped(q, top),) * len(q.bottoms), params=params)


_CONV_ARITY = dict(bottoms=Arity(1, None), tops=Arity(1, None))


@layer("Convolution", FAMILY, source=BVLC + "layers/base_conv_layer.cpp, conv_layer.cpp", **_CONV_ARITY)
def _convolution(q: ShapeQuery) -> LayerShapes:
    """N-d convolution: out = (in + 2*pad - dilated kernel) / stride + 1 per spatial axis."""
    return _base_conv(q, reverse=False)


@layer("Deconvolution", FAMILY, source=BVLC + "layers/base_conv_layer.cpp, deconv_layer.cpp", **_CONV_ARITY)
def _deconvolution(q: ShapeQuery) -> LayerShapes:
    """Transposed convolution: out = stride*(in-1) + dilated kernel - 2*pad; weights are (C, out/g, k...)."""
    return _base_conv(q, reverse=True)


@layer("Im2col", FAMILY, bottoms=Arity.exactly(1), tops=Arity.exactly(1), source=BVLC + "layers/im2col_layer.cpp")
def _im2col(q: ShapeQuery) -> LayerShapes:
    """The column buffer as a blob: channels grow by the kernel's volume, spatial axes as convolution."""
    bottom = q.bottoms[0]
    geo = conv_geometry(q, bottom, min_spatial_axes=1)
    top = list(bottom)
    for i, k in enumerate(geo.kernel):
        top[geo.channel_axis] *= k
        top[geo.channel_axis + 1 + i] = _conv_out(bottom[geo.channel_axis + 1 + i], geo, i)
    return LayerShapes(tops=(reshaped(q, top),))


# ----------------------------------------------------------------------------------------
# Pooling (pooling_layer.cpp), reused by SPP and LRN's internal pooling
# ----------------------------------------------------------------------------------------

_NCHW = "num, channels, height, width"


def _rounds_up(param) -> bool:
    """CEIL or FLOOR: a fork's ``ceil_mode`` (BVLC PR #3057, DenseNet ports) when set, else ``round_mode``."""
    if param.HasField("ceil_mode"):
        return bool(param.ceil_mode)
    return param.round_mode == caffe_pb2.PoolingParameter.CEIL


def _pool_window(q: ShapeQuery, param, height: int, width: int) -> tuple[tuple[int, int], tuple[int, int], tuple[int, int]]:
    """PoolingLayer::LayerSetUp: (kernel, pad, stride) as (h, w) pairs, with its CHECKs."""
    has = param.HasField
    if param.global_pooling:
        q.check(not (has("kernel_size") or has("kernel_h") or has("kernel_w")), "with global_pooling: true filter size cannot be specified")
        kernel = (height, width)
    else:
        q.check(has("kernel_size") != (has("kernel_h") and has("kernel_w")), "filter size is kernel_size OR kernel_h and kernel_w; not both")
        kernel = (param.kernel_size,) * 2 if has("kernel_size") else (param.kernel_h, param.kernel_w)
    q.check(kernel[0] > 0 and kernel[1] > 0, "filter dimensions cannot be zero")
    for name in ("pad", "stride"):
        q.check(
            (not has(name) and has(f"{name}_h") and has(f"{name}_w")) or (not has(f"{name}_h") and not has(f"{name}_w")),
            f"{name} is {name} OR {name}_h and {name}_w are required",
        )
    pad = (param.pad_h, param.pad_w) if has("pad_h") else (param.pad,) * 2
    stride = (param.stride_h, param.stride_w) if has("stride_h") else (param.stride,) * 2
    if param.global_pooling:
        q.check(pad == (0, 0) and stride == (1, 1), "with global_pooling: true only pad = 0 and stride = 1")
    if pad != (0, 0):
        q.check(param.pool in (param.AVE, param.MAX), "padding is implemented only for average and max pooling")
        q.check(pad[0] < kernel[0] and pad[1] < kernel[1], f"pad {pad} must be smaller than the kernel {kernel}")
    return kernel, pad, stride


def pooled_size(q: ShapeQuery, size: int, kernel: int, pad: int, stride: int, ceil: bool, any_pad: bool) -> int:
    """One axis of PoolingLayer::Reshape: round, then drop a last window that starts in the padding."""
    pooled = float_div_rounded(size + 2 * pad - kernel, positive(q, stride, "stride"), ceil) + 1
    if any_pad:
        if (pooled - 1) * stride >= size + pad:
            pooled -= 1
        q.check((pooled - 1) * stride < size + pad, "the last pooling window starts in the padding")
    return pooled


def pool_2d(q: ShapeQuery, param, bottom: Shape) -> Shape:
    """The top of a PoolingLayer with ``param`` (a PoolingParameter) on a 4-axis bottom."""
    require_axes(q, bottom, 4, _NCHW)
    num, channels, height, width = bottom
    kernel, pad, stride = _pool_window(q, param, height, width)
    ceil, any_pad = _rounds_up(param), pad != (0, 0)
    pooled_h = pooled_size(q, height, kernel[0], pad[0], stride[0], ceil, any_pad)
    pooled_w = pooled_size(q, width, kernel[1], pad[1], stride[1], ceil, any_pad)
    return reshaped(q, (num, channels, pooled_h, pooled_w))


@layer("Pooling", FAMILY, bottoms=Arity.exactly(1), tops=Arity(1, 2), source=BVLC + "layers/pooling_layer.cpp")
def _pooling(q: ShapeQuery) -> LayerShapes:
    """2-D pooling; MAX may give a second top, the argmax mask, shaped like the first."""
    param = q.proto.pooling_param
    q.check(len(q.layer.tops) == 1 or param.pool == param.MAX, "only MAX pooling can output a second (mask) top")
    top = pool_2d(q, param, q.bottoms[0])
    return LayerShapes(tops=(top,) * max(1, len(q.layer.tops)))


@layer("SPP", FAMILY, bottoms=Arity.exactly(1), tops=Arity.exactly(1), source=BVLC + "layers/spp_layer.cpp")
def _spp(q: ShapeQuery) -> LayerShapes:
    """Spatial pyramid: level l pools into 2^l bins per side; the levels are flattened and concatenated.

    One level is a plain pooling (the top keeps 4 axes); several are Flatten + Concat on axis 1.
    """
    bottom = q.bottoms[0]
    require_axes(q, bottom, 4, _NCHW)
    num, channels, height, width = bottom
    q.check(height > 0 and width > 0, "input dimensions cannot be zero")
    spp = q.proto.spp_param
    q.check(spp.pyramid_height >= 1, "pyramid_height must be at least 1")
    levels = [pool_2d(q, _spp_level_param(spp, level, height, width), bottom) for level in range(spp.pyramid_height)]
    if spp.pyramid_height == 1:
        return LayerShapes(tops=(levels[0],))
    return LayerShapes(tops=((num, sum(c * h * w for _, c, h, w in levels)),))


def _spp_level_param(spp, level: int, height: int, width: int):
    """SPPLayer::GetPoolingParam: kernel = ceil(size / bins), stride = kernel, pad splits the excess."""
    bins = 2**level
    kernel_h, kernel_w = -(-height // bins), -(-width // bins)
    return caffe_pb2.PoolingParameter(
        pool=spp.pool,  # SPP's and Pooling's PoolMethod enums have the same numbers
        kernel_h=kernel_h,
        kernel_w=kernel_w,
        stride_h=kernel_h,
        stride_w=kernel_w,
        pad_h=(kernel_h * bins - height + 1) // 2,
        pad_w=(kernel_w * bins - width + 1) // 2,
    )


@layer("LRN", FAMILY, bottoms=Arity.exactly(1), tops=Arity.exactly(1), source=BVLC + "layers/lrn_layer.cpp")
def _lrn(q: ShapeQuery) -> LayerShapes:
    """Local response normalisation keeps the bottom's shape in both norm regions.

    WITHIN_CHANNEL builds an internal split/power/pool/power/eltwise net; its AVE pooling
    (kernel local_size, pad (local_size-1)/2) runs the Pooling CHECKs and must give back
    the bottom's shape for the final Eltwise product.
    """
    bottom = q.bottoms[0]
    require_axes(q, bottom, 4, _NCHW)
    param = q.proto.lrn_param
    q.check(param.local_size % 2 == 1, f"LRN only supports odd values for local_size, got {param.local_size}")
    if param.norm_region == param.WITHIN_CHANNEL:
        pre_pad = (param.local_size - 1) // 2
        pooling = caffe_pb2.PoolingParameter(pool=caffe_pb2.PoolingParameter.AVE, pad=pre_pad, kernel_size=param.local_size)
        q.check(pool_2d(q, pooling, bottom) == bottom, "the within-channel pooling does not keep the bottom's shape")
    return LayerShapes(tops=(bottom,))


@layer("Crop", FAMILY, bottoms=Arity.exactly(2), tops=Arity.exactly(1), source=BVLC + "layers/crop_layer.cpp")
def _crop(q: ShapeQuery) -> LayerShapes:
    """Axes from ``axis`` on take the second bottom's sizes; the offsets must keep the crop inside."""
    data, like = q.bottoms
    param = q.proto.crop_param
    start = axis_index(q, data, param.axis)
    offsets = list(param.offset)
    if len(offsets) > 1:
        q.check(
            start + len(offsets) == len(data),
            f"number of offset values ({len(offsets)}) must equal the number of dimensions from axis {start} ({len(data) - start})",
        )
    q.check(len(like) >= len(data), f"the reference bottom {format_shape(like)} has fewer axes than the data {format_shape(data)}")
    top = list(data)
    for i in range(start, len(data)):
        offset = offsets[0] if len(offsets) == 1 else offsets[i - start] if offsets else 0
        q.check(
            data[i] - offset >= like[i],
            f"the crop for dimension {i} is out-of-bounds with size {like[i]} and offset {offset} (input size {data[i]})",
        )
        top[i] = like[i]
    return LayerShapes(tops=(tuple(top),))

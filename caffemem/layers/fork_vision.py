"""Vision layers that exist only in Caffe forks, each checked against its fork's source.

- Convolution3D, Pooling3D, Deconvolution3D: facebook/C3D, C3D-v1.1 (the C3D-v1.1 UCF101
  nets use these types with ``convolution3d_param`` / ``pooling3d_param``, not N-d
  Convolution).  All three set their top in LayerSetUp and leave Reshape empty.  C3D-v1.0's
  V1 layers (``CONVOLUTION3D``, ``POOLING3D``, ``DECONVOLUTION3D``) reach these rules
  through the V1 upgrade (passes/upgrade.py), which moves their geometry into the same
  messages.
- Interp: hszhao/PSPNet (DeepLab v2's bilinear resize; talent518/deeplab-public-ver2@51750fa9
  interp_layer.cpp is the same Reshape, Forward and Backward).  DeepLab v1's (V1 ``INTERP``,
  TheLegendAli/DeepLab-Context@fb04e9e2) CHECKs that exactly one of zoom_factor,
  shrink_factor, height+width is set; with one set it gives the same size.
- Padding: DeepLab v1's (V1 ``PADDING``, TheLegendAli/DeepLab-Context@fb04e9e2
  padding_layer.cpp): pads H and W with zeros, or crops them, by pad_beg and pad_end; its
  vgg128 test nets crop the zoomed scores back to the input with it.
- Upsample: alexgkendall/caffe-segnet (max-unpooling with the pooling mask, two bottoms) and
  YOLO's nearest-neighbour Upsample (eric612/MobileNet-YOLO, one bottom, ``scale``): one
  type string, so one spec that tells them apart by their number of bottoms.
- ROIPooling: rbgirshick/caffe-fast-rcnn, branch faster-rcnn (py-faster-rcnn's Caffe).
- PSROIPooling: daijifeng001/caffe-rfcn (R-FCN).

The memory rules follow each fork's CPU code; where a fork has only a GPU implementation
(ROIPooling's Backward, all of PSROIPooling) they follow the .cu file's touches, as named.
"""

from __future__ import annotations

from caffemem.graph import LayerShapes, Shape, count
from caffemem.layers.access import (
    Action,
    Alloc,
    LayerMemory,
    MemoryQuery,
    Reshape,
    read,
    write,
)
from caffemem.layers.blob import format_shape, legacy4, reshaped
from caffemem.layers.neuron import neuron_memory
from caffemem.layers.registry import (
    CHEAP_ANSWER,
    PURE,
    PURE_CHEAP,
    Arity,
    Recompute,
    ShapeQuery,
    layer,
    recompute_rule,
)
from caffemem.layers.vision import c_div, conv_flops, float_div_rounded, positive, require_axes
from caffemem.schema import caffe_pb2

FAMILY = "fork_vision"
C3D = "facebook/C3D C3D-v1.1/src/caffe/layers/"

_NCLHW = "num, channels, length, height, width"


def _video_bottom(q: ShapeQuery) -> Shape:
    """C3D reads shape(0..4) of its bottom: it needs at least 5 axes (N, C, L, H, W)."""
    bottom = q.bottoms[0]
    q.check(len(bottom) >= 5, f"bottom must have at least 5 axes ({_NCLHW}), got {format_shape(bottom)}")
    return bottom


def _convolution3d_memory(q: MemoryQuery) -> LayerMemory:
    """convolution3d_layer.cpp: LayerSetUp shapes a 5-axis col buffer for one clip,
    (1, C * kernel_depth * k * k, L', H', W'), and writes ones into ``bias_multiplier_``, a
    bare SyncedMemory of L' * H' * W' values (no Blob, so no shape buffer; never touched
    again as far as the model's steps go).  Forward vol2cols into the col buffer.  Backward
    looks at neither propagate_down nor param_propagate_down: it takes the weight's, the
    bias's, the bottom's and the col buffer's diffs every time."""
    top, weight, col = q.tops[0], q.param(0), q.buffer("col_buffer")
    bias = q.param(1) if q.proto.convolution3d_param.bias_term else None
    setup: tuple[Action, ...] = (Reshape(col, (1, count(q.params[0][1:])) + top[2:]),)
    forward = (read(q.bottom(0)), write(q.top(0)), write(col), read(weight))
    backward = (read(q.top(0), "diff"), read(weight), write(weight, "diff"), read(q.bottom(0)), write(q.bottom(0), "diff"), write(col), write(col, "diff"))
    if bias is not None:
        setup += (Alloc(q.buffer("bias_multiplier"), count(top[2:])),)
        forward += (read(bias),)
        backward += (write(bias, "diff"),)
    return LayerMemory(setup=setup, forward=forward, backward=backward)


# convolution3d_layer.cpp/.cu Forward: vol2col and a gemm per clip, plus the bias: pure,
# not cheap; FLOPs as any convolution's (vision.conv_flops, the weight (out, C, d, k, k)).
@layer("Convolution3D", FAMILY, bottoms=Arity.exactly(1), tops=Arity.exactly(1), source=C3D + "convolution3d_layer.cpp", memory=_convolution3d_memory, recompute=PURE, forward_flops=conv_flops)
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


def _deconvolution3d_memory(q: MemoryQuery) -> LayerMemory:
    """deconvolution3d_layer.cpp: LayerSetUp shapes the col buffer for one clip,
    (1, num_output * kernel_depth * k * k, L, H, W) -- the *input's* L, H, W -- and, with a
    bias, writes ones into ``bias_multiplier_``, a bare SyncedMemory of L' * H' * W'
    values.  Forward gemms into the col buffer and col2vols it into the top.  Backward
    (CPU and .cu alike) takes the bottom's diff before testing propagate_down, zeroes and
    fills the weight's (and bias's) diff, and vol2cols the top's diff into the col
    buffer's diff; the .cu also asks for the col buffer's data, already there."""
    top, weight, col = q.tops[0], q.param(0), q.buffer("col_buffer")
    bias = q.param(1) if len(q.params) > 1 else None
    setup: tuple[Action, ...] = (Reshape(col, (1, q.params[0][1] * count(q.params[0][2:])) + q.bottoms[0][2:5]),)
    forward = (read(q.bottom(0)), write(q.top(0)), write(col), read(weight))
    backward = (read(q.top(0), "diff"), read(weight), write(weight, "diff"), read(q.bottom(0)), write(q.bottom(0), "diff"), write(col, "diff"))
    if bias is not None:
        setup += (Alloc(q.buffer("bias_multiplier"), count(top[2:])),)
        forward += (read(bias),)
        backward += (write(bias, "diff"),)
    return LayerMemory(setup=setup, forward=forward, backward=backward)


def _deconvolution3d_flops(proto, shapes: LayerShapes) -> int:
    """deconvolution3d_layer.cpp Forward: per bottom element 2 x (out * d * k * k) into the
    col buffer (col2vol adds them up), plus the bias per top element; the bottom's L, H, W
    are the shape rule's formula solved for its input, (out + 2 pad - kernel) / stride + 1."""
    param = proto.convolution3d_param
    top, weight = shapes.tops[0], shapes.params[0]  # weight (C, out, d, k, k)
    length = (top[2] + 2 * param.temporal_pad - param.kernel_depth) // param.temporal_stride + 1
    height, width = ((size + 2 * param.pad - param.kernel_size) // param.stride + 1 for size in top[3:5])
    bottom = top[0] * weight[0] * length * height * width
    return 2 * bottom * count(weight[1:]) + (count(top) if len(shapes.params) > 1 else 0)


@layer(
    "Deconvolution3D",
    FAMILY,
    bottoms=Arity.exactly(1),
    tops=Arity.exactly(1),
    source=C3D + "deconvolution3d_layer.cpp, deconvolution3d_layer.cu",
    memory=_deconvolution3d_memory,
    recompute=PURE,
    forward_flops=_deconvolution3d_flops,
)
def _deconvolution3d(q: ShapeQuery) -> LayerShapes:
    """Spatio-temporal transposed convolution (C3D's voxel-to-voxel nets).

    out = (in - 1) * stride - 2 * pad + kernel on H and W, the temporal_* fields on L;
    weights (C, num_output, kernel_depth, k, k), bias (1, 1, 1, 1, num_output).  The
    geometry is read from convolution3d_param, but ``bias_term`` from convolution_param
    (default true): a bias_term in convolution3d_param is not read.
    """
    num, channels, length, height, width = _video_bottom(q)[:5]
    param = q.proto.convolution3d_param
    q.check(param.num_output > 0, "num_output must be positive (CHECK_GT(num_output_, 0))")
    k, depth = param.kernel_size, param.kernel_depth
    top = (
        num,
        param.num_output,
        (length - 1) * param.temporal_stride - 2 * param.temporal_pad + depth,
        (height - 1) * param.stride - 2 * param.pad + k,
        (width - 1) * param.stride - 2 * param.pad + k,
    )
    weight = (channels, param.num_output, depth, k, k)
    params = (weight, (1, 1, 1, 1, param.num_output)) if q.proto.convolution_param.bias_term else (weight,)
    return LayerShapes(tops=(reshaped(q, top),), params=params)


_reads_both_data = neuron_memory("top", "bottom")


def _pooling3d_memory(q: MemoryQuery) -> LayerMemory:
    """pool3d_layer.cpp: no argmax blob (MAX's Backward compares bottom with top), so
    Backward, when propagate_down[0], reads both data; STOCHASTIC only shapes rand_idx_
    (its Forward is NOT_IMPLEMENTED on CPU and empty on GPU)."""
    steps = _reads_both_data(q)
    if q.proto.pooling3d_param.pool != caffe_pb2.Pooling3DParameter.STOCHASTIC:
        return steps
    return LayerMemory(setup=(Reshape(q.buffer("rand_idx"), q.tops[0]),), forward=steps.forward, backward=steps.backward)


@recompute_rule
def _pooling3d_recompute(proto, phase: str) -> Recompute:
    """pool3d_layer.cpp/.cu Forward: MAX and AVE write the top from the bottom (no argmax
    blob); STOCHASTIC is NOT_IMPLEMENTED on the CPU and writes nothing on the GPU, so a
    second run would not give back what the first left there."""
    if proto.pooling3d_param.pool == caffe_pb2.Pooling3DParameter.STOCHASTIC:
        return Recompute(False, "STOCHASTIC Pooling3D's Forward writes no top (empty on the GPU, NOT_IMPLEMENTED on the CPU)")
    return CHEAP_ANSWER


def _pooling3d_flops(proto, shapes: LayerShapes) -> int:
    """One operation per window element (kernel_depth x kernel_size^2) per output."""
    param = proto.pooling3d_param
    return count(shapes.tops[0]) * param.kernel_depth * param.kernel_size**2


@layer("Pooling3D", FAMILY, bottoms=Arity.exactly(1), tops=Arity.exactly(1), source=C3D + "pool3d_layer.cpp", memory=_pooling3d_memory, recompute=_pooling3d_recompute, forward_flops=_pooling3d_flops)
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


# interp_layer.cpp: Forward reads the bottom and writes the top; Backward, when
# propagate_down[0], writes the bottom's diff from the top's (no data read).
# interp_layer.cpp/.cu Forward: bilinear interpolation of the bottom (caffe_cpu_interp2).
@layer(
    "Interp",
    FAMILY,
    bottoms=Arity.exactly(1),
    tops=Arity.exactly(1),
    source="hszhao/PSPNet src/caffe/layers/interp_layer.cpp (= deeplab-public-ver2's)",
    memory=neuron_memory(),
    recompute=PURE_CHEAP,
)
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


# padding_layer.cpp: Forward reads the bottom and writes the top (zeroed first when
# padding); Backward returns without propagate_down[0], else zeroes the bottom's diff and
# copies the top's diff into it.
# padding_layer.cpp Forward: the bottom copied into a larger top (pad_beg/pad_end).
@layer(
    "Padding",
    FAMILY,
    bottoms=Arity.exactly(1),
    tops=Arity.exactly(1),
    source="TheLegendAli/DeepLab-Context@fb04e9e2 src/caffe/layers/padding_layer.cpp (DeepLab v1)",
    memory=neuron_memory(),
    recompute=PURE_CHEAP,
)
def _padding(q: ShapeQuery) -> LayerShapes:
    """LayerSetUp: pad_beg and pad_end both >= 0 (pad) or both <= 0 (crop); Reshape:
    (num, channels, height + pad_beg + pad_end, width + pad_beg + pad_end), each > 0."""
    num, channels, height, width = legacy4(q, q.bottoms[0])
    beg, end = q.proto.padding_param.pad_beg, q.proto.padding_param.pad_end
    q.check((beg >= 0 and end >= 0) or (beg <= 0 and end <= 0), "Padding must either be both positive or negative")
    q.check(height + beg + end > 0, "Padding makes height <= 0")
    q.check(width + beg + end > 0, "Padding makes width <= 0")
    return LayerShapes(tops=((num, channels, height + beg + end, width + beg + end),))


def _upsample_memory(q: MemoryQuery) -> LayerMemory:
    """SegNet's upsample_layer.cpp (two bottoms): Forward scatters bottom 0 through the mask
    (bottom 1) into the top; Backward, when propagate_down[0], gathers the top's diff into
    bottom 0's through the mask.  The mask never gets a diff.

    YOLO's (one bottom; eric612/MobileNet-YOLO src/caffe/layers/upsample_layer.cpp):
    Forward_cpu reads the bottom and writes the top; Backward_cpu takes the top's diff and
    zeroes then fills the bottom's diff without testing propagate_down."""
    if len(q.bottoms) == 1:
        return LayerMemory(forward=(read(q.bottom(0)), write(q.top(0))), backward=(read(q.top(0), "diff"), write(q.bottom(0), "diff")))
    backward = (read(q.top(0), "diff"), read(q.bottom(1)), write(q.bottom(0), "diff")) if q.propagate_down[0] else ()
    return LayerMemory(forward=(read(q.bottom(0)), read(q.bottom(1)), write(q.top(0))), backward=backward)


def _yolo_upsample(q: ShapeQuery) -> LayerShapes:
    """YOLO's Upsample (eric612/MobileNet-YOLO upsample_layer.cpp): Reshape multiplies the last
    two axes by ``scale`` (its UpsampleParameter: int32, default 1 -- not SegNet's default 2);
    Forward_cpu and Backward_cpu index shape(0..3), so the bottom has 4 axes."""
    bottom = q.bottoms[0]
    require_axes(q, bottom, 4, "num, channels, height, width")
    param = q.proto.upsample_param
    scale = param.scale if param.HasField("scale") else 1
    return LayerShapes(tops=(reshaped(q, bottom[:2] + (bottom[2] * scale, bottom[3] * scale)),))


# SegNet's upsample_layer.cpp/.cu Forward: the top zeroed, then each bottom value put where
# the pooling mask (bottom 1) says; MobileNet-YOLO's: nearest-neighbour copies.  Both pure,
# as long as no two values share a mask index: only overlapping pooling windows (kernel >
# stride) make the GPU scatter race, and then two stock runs may differ as well; SegNet's
# nets pool 2x2 with stride 2.
@layer(
    "Upsample",
    FAMILY,
    bottoms=Arity(1, 2),
    tops=Arity.exactly(1),
    source="alexgkendall/caffe-segnet src/caffe/layers/upsample_layer.cpp (two bottoms); eric612/MobileNet-YOLO@69b4441c src/caffe/layers/upsample_layer.cpp (one bottom)",
    memory=_upsample_memory,
    recompute=PURE_CHEAP,
)
def _upsample(q: ShapeQuery) -> LayerShapes:
    """Two bottoms (SegNet): max-unpooling, bottom 1 is the mask of the matching MAX pooling,
    shaped like bottom 0.  The size is upsample_h x upsample_w when both are set, else
    (deprecated) the input times scale (or scale_h/scale_w), minus one where
    pad_out_h/pad_out_w (scale 2 only).  One bottom: YOLO's nearest-neighbour upsampling
    (:func:`_yolo_upsample`).
    """
    if len(q.bottoms) == 1:
        return _yolo_upsample(q)
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


def _roi_memory(index: str, clears_roi_diff: bool):
    """A region pooling layer that keeps, per output value, a Blob<int> ``index`` shaped like
    the top (Reshape) and written by Forward; Backward, when propagate_down[0], reads the
    rois, the top's diff and the index and writes bottom 0's diff (``clears_roi_diff``:
    it also zeroes the rois' diff)."""

    def rule(q: MemoryQuery) -> LayerMemory:
        own = q.buffer(index)
        backward: tuple[Action, ...] = ()
        if q.propagate_down[0]:
            backward = (read(q.bottom(1)), read(q.top(0), "diff"), write(q.bottom(0), "diff"), read(own))
            backward += (write(q.bottom(1), "diff"),) if clears_roi_diff else ()
        return LayerMemory(
            setup=(Reshape(own, q.tops[0], "int"),),
            forward=(read(q.bottom(0)), read(q.bottom(1)), write(q.top(0)), write(own)),
            backward=backward,
        )

    return rule


# roi_pooling_layer.cpp keeps the argmax in max_idx_; its Backward_cpu is NOT_IMPLEMENTED,
# so Backward is roi_pooling_layer.cu's.
# roi_pooling_layer.cpp/.cu Forward: max over each bin, rewriting max_idx_ (Backward's argmax) whole.
@layer("ROIPooling", FAMILY, bottoms=Arity.exactly(2), tops=Arity.exactly(1), source=_RCNN + ", roi_pooling_layer.cu", memory=_roi_memory("max_idx", clears_roi_diff=False), recompute=PURE_CHEAP)
def _roi_pooling(q: ShapeQuery) -> LayerShapes:
    """One pooled_h x pooled_w map per region: top num is bottom 1's num (the rois)."""
    param = q.proto.roi_pooling_param
    q.check(param.pooled_h > 0, "pooled_h must be > 0")
    q.check(param.pooled_w > 0, "pooled_w must be > 0")
    channels = legacy4(q, q.bottoms[0])[1]
    rois = legacy4(q, q.bottoms[1])[0]
    return LayerShapes(tops=((rois, channels, param.pooled_h, param.pooled_w),))


# psroi_pooling_layer.cpp is NOT_IMPLEMENTED on CPU: the steps are psroi_pooling_layer.cu's,
# whose Backward also zeroes the rois' diff (mapping_channel_ is the Blob<int> index).
# Recompute: psroi_pooling_layer.cu Forward averages each bin and rewrites mapping_channel_ whole.
@layer(
    "PSROIPooling",
    FAMILY,
    bottoms=Arity.exactly(2),
    tops=Arity.exactly(1),
    source="daijifeng001/caffe-rfcn src/caffe/layers/psroi_pooling_layer.cpp, psroi_pooling_layer.cu",
    memory=_roi_memory("mapping_channel", clears_roi_diff=True),
    recompute=PURE_CHEAP,
)
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

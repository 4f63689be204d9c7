"""Vision layers of BVLC Caffe master: convolution, pooling and their relatives.

Every rule mirrors the LayerSetUp + Reshape pair of the Caffe file named in its spec,
including the CHECKs, the legacy parameter forms and C's arithmetic (integer division
truncates toward zero; Pooling rounds a float32 quotient), because a shape that is off
by one pixel changes every blob after it.  The small helpers at the top are shared with
:mod:`caffemem.layers.fork_vision`, whose fork layers reuse the same conventions.

Each memory rule lists what the layer's CPU code touches (access.py), in the order it
does; where ``--engine cudnn`` (or the layer's own ``engine``) makes Caffe's layer factory
build a cuDNN class instead, the rule follows that class (cudnn_*_layer.cpp/.cu).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from types import SimpleNamespace
from typing import Callable, Sequence

from caffemem.graph import LayerShapes, Shape, count
from caffemem.layers.access import (
    Action,
    Alloc,
    BlobId,
    LayerMemory,
    MemoryQuery,
    MemoryRule,
    Reshape,
    Share,
    buffer_setup,
    read,
    write,
)
from caffemem.layers.blob import axis_index, float32, format_shape, reshaped
from caffemem.layers.neuron import uses_cudnn
from caffemem.layers.registry import (
    CHEAP_ANSWER,
    PURE,
    PURE_ANSWER,
    PURE_CHEAP,
    Arity,
    Recompute,
    ShapeQuery,
    layer,
    recompute_rule,
)
from caffemem.schema import caffe_pb2

FAMILY = "vision"
BVLC = "caffe master "

BuffersOf = Callable[[str], BlobId]  # a layer's own blob by name (MemoryQuery.buffer, or an inner layer's)

# ----------------------------------------------------------------------------------------
# Helpers shared by the vision families
# ----------------------------------------------------------------------------------------


def c_div(a: int, b: int) -> int:
    """C++ integer division of ints: the quotient truncates toward zero (Python's // floors)."""
    quotient = abs(a) // abs(b)
    return quotient if (a >= 0) == (b > 0) else -quotient


def float_div_rounded(numerator: int, denominator: int, ceil: bool) -> int:
    """``static_cast<int>(ceil|floor(static_cast<float>(n) / d))``: Pooling's float32 rounding.

    Division of two float32 values done in double then rounded to float32 is exact IEEE
    float32 division, so this matches Caffe even where float32 loses integer precision.
    """
    quotient = float32(float32(float(numerator)) / float32(float(denominator)))
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


# ---- forward_flops (a cost model, registry.py): the convolutions' GEMMs --------------
#
# conv_layer.cpp Forward_cpu: per image and group a (Cout/g) x (Cin/g * kernel) by
# (Cin/g * kernel) x (out spatial) gemm, then the bias as a gemm with K = 1.  Per top
# element that is 2 * (Cin/g * kernel) FLOPs, and the weight blob's shape (Cout, Cin/g,
# kernel...) spells the factor out: one rule for every convolution of the families.


def conv_flops(proto, shapes: LayerShapes) -> int:
    """2 x top elements x the weight's count per output channel, plus one per top element
    with a bias (blob 1), for each top (a Convolution of several bottoms has one each)."""
    per_output = 2 * count(shapes.params[0][1:]) + (1 if len(shapes.params) > 1 else 0)
    return sum(count(top) * per_output for top in shapes.tops)


# The shape pass ran every CHECK of the parameters before any FLOPs are counted: reading
# them again needs no error path.
_CHECKED = SimpleNamespace(check=lambda condition, message: None)


def _deconv_flops(proto, shapes: LayerShapes) -> int:
    """deconv_layer.cpp Forward_cpu is the convolution's backward_cpu_gemm: per bottom
    element 2 x (Cout/g * kernel) FLOPs into the col buffer (col2im adds them up), plus the
    bias per top element.  The bottom's spatial size is DeconvolutionLayer's
    compute_output_shape solved for its input: in = (out + 2 pad - extent) / stride + 1."""
    weight = shapes.params[0]  # (Cin, Cout / group, kernel...)
    kernel = weight[2:]
    param = proto.convolution_param
    axes = len(kernel)
    stride = _h_w_pair(_CHECKED, param, "stride", "stride", axes, 1)
    pad = _h_w_pair(_CHECKED, param, "pad", "pad", axes, 0)
    dilation = _per_axis(_CHECKED, list(param.dilation), "dilation", axes, 1)
    total = 0
    for top in shapes.tops:
        spatial = top[len(top) - axes :]
        inputs = [(out + 2 * pad[i] - (dilation[i] * (kernel[i] - 1) + 1)) // stride[i] + 1 for i, out in enumerate(spatial)]
        bottom = count(top[: len(top) - axes - 1]) * weight[0] * math.prod(inputs)
        total += 2 * bottom * count(weight[1:]) + (count(top) if len(shapes.params) > 1 else 0)
    return total


def shape_query(q: MemoryQuery) -> ShapeQuery:
    """A memory rule's layer as the shape rules see it, to reuse their parsing (the shapes
    pass already ran their CHECKs on these very shapes, so none fails here)."""
    return ShapeQuery(q.layer, q.bottoms, q.phase, {})


def int_blobs(q: MemoryQuery, names: Sequence[str], axes: int) -> tuple[Action, ...]:
    """Blob<int>s of ``axes`` values that LayerSetUp or Reshape writes at once."""
    return tuple(action for name in names for action in buffer_setup(q.buffer(name), (axes,), "int", filled=True))


GEOMETRY_BLOBS = ("kernel_shape", "stride", "pad", "dilation")

# cudnn_conv_layer.cpp / cudnn_deconv_layer.cpp Reshape: each of the three algorithms
# (forward, backward filter, backward data) is picked with a workspace of at most
# workspace_limit_bytes; one block of the largest need per group and stream is cudaMalloc'd.
CUDNN_WORKSPACE_LIMIT = 8 * 1024 * 1024
CUDNN_STREAMS_PER_GROUP = 3
WORKSPACE_BUFFER = "cudnn_workspace"  # its buffer name (the patched runtime's PlannedWorkspace::Name)
CUDNN_WORKSPACE_NOTE = (
    "cuDNN convolution workspaces are upper bounds, not exact figures: Caffe lets cuDNN pick "
    f"algorithms needing up to {CUDNN_WORKSPACE_LIMIT // (1024 * 1024)} MiB per group and stream "
    f"({CUDNN_STREAMS_PER_GROUP} streams a group) and cudaMallocs the largest need; that limit is "
    "counted for every cuDNN (de)convolution (very loose for grouped ones). A caffemem-patched "
    f"Caffe (runtime v6) runs every layer on one workspace of {CUDNN_STREAMS_PER_GROUP} such blocks for the net, "
    "which a plan's figure counts"
)


def is_workspace(blob: BlobId) -> bool:
    """Is ``blob`` a cuDNN (de)convolution's workspace (the buffer :func:`cudnn_workspace` allocates)?"""
    return blob.kind == "buffer" and blob.name.endswith("/" + WORKSPACE_BUFFER)


def cudnn_workspace(q: MemoryQuery, group: int) -> Alloc:
    """A cuDNN (de)convolution's workspace: BVLC's bound, one block of workspace_limit_bytes
    per group and stream, cudaMalloc'd in Reshape (cudnn_conv_layer.cpp 113, 183-225; cudnn_deconv_layer.cpp 115, 251-283).

    Only that layer's Forward or Backward uses it (the rule writes it there, then reads it),
    and two layers' never at once: each Forward_gpu/Backward_gpu ends with
    ``sync_conv_groups<<<1, 1>>>()`` on the legacy default stream (cudnn_conv_layer.cu 44,
    111; sync_deconv_groups in cudnn_deconv_layer.cu 52, 131), which waits for the layer's
    blocking streams and which later work waits for (GPU-MEMORY.md section 4).  So with
    ``--share-buffers`` it is a layer buffer like the col buffer, and a plan holds the
    largest workspace, not their sum; NVIDIA/caffe 0.17 gives every cuDNN convolution one
    workspace (``Caffe::ws(CAFFE_WS_CONV)``) on the same grounds.  The patched runtime (v3)
    binds the slot in place of the cudaMalloc and limits cuDNN's algorithms to these bytes,
    so a planned workspace is exact; an unplanned one is an upper bound (see
    CUDNN_WORKSPACE_NOTE)."""
    return Alloc(q.buffer(WORKSPACE_BUFFER), CUDNN_STREAMS_PER_GROUP * group * CUDNN_WORKSPACE_LIMIT // 4, "int", device=True)


def engine_note(q: MemoryQuery, why: str) -> str:
    """The note for a layer that a cuDNN build would refuse, counted with Caffe's engine."""
    return f"layer '{q.layer.name}' ({q.layer.type}): {why}, which a cuDNN build refuses; counted with Caffe's own engine"


def _conv_memory(reverse: bool) -> MemoryRule:
    """BaseConvolutionLayer with ConvolutionLayer (``reverse`` False) or DeconvolutionLayer,
    or the cuDNN class that GetConvolutionLayer / GetDeconvolutionLayer builds instead."""

    def rule(q: MemoryQuery) -> LayerMemory:
        param = q.proto.convolution_param
        geo = conv_geometry(shape_query(q), q.bottoms[0], min_spatial_axes=0)
        axes = len(geo.kernel)
        spatial = {"bottom": q.bottoms[0][geo.channel_axis + 1 :], "top": q.tops[0][geo.channel_axis + 1 :]}
        bias = q.param(1) if param.bias_term else None
        multiplier = q.buffer("bias_multiplier")
        # LayerSetUp: the four geometry blobs (at least one value each); Reshape:
        # conv_input_shape_, the col buffer's shape (one image: kernel_dim_ * group_ rows),
        # the bias multiplier filled with ones.  The cuDNN classes run both too.
        setup = int_blobs(q, GEOMETRY_BLOBS, max(axes, 1)) + int_blobs(q, ("conv_input_shape",), axes + 1)
        setup += (Reshape(q.buffer("col_buffer"), (count(q.params[0][1:]) * param.group,) + spatial["bottom" if reverse else "top"]),)
        if bias is not None:
            setup += buffer_setup(multiplier, (count(spatial["top"]),), filled=True)
        # layer_factory.cpp: DEFAULT means Caffe's engine for a dilated kernel; cuDNN CHECKs 2 spatial axes.
        dilated = any(d > 1 for d in geo.dilation)
        wanted = uses_cudnn(q, param.engine) and not (dilated and param.engine == param.DEFAULT)
        if wanted and not dilated and axes == 2:
            workspace = cudnn_workspace(q, param.group)
            return _cudnn_conv_steps(q, bias, workspace.blob, setup + (workspace,))
        notes = (engine_note(q, "cuDNN convolves only 2-D, undilated kernels"),) if wanted else ()
        return caffe_conv_steps(q, reverse, geo, bias, multiplier, setup, notes)

    return rule


def caffe_conv_steps(
    q: MemoryQuery, reverse: bool, geo: ConvGeometry, bias: BlobId | None, multiplier: BlobId, setup: tuple[Action, ...], notes: tuple[str, ...]
) -> LayerMemory:
    """conv_layer.cpp / deconv_layer.cpp over base_conv_layer.cpp's gemm helpers, per image.

    forward_cpu_gemm im2cols into the col buffer unless the kernel is 1x1 (stride 1, pad 0);
    backward_cpu_gemm takes the col buffer's mutable data even then.  Convolution uses the
    first in Forward and for the bottom's gradient the second; Deconvolution the other way
    round.  weight_cpu_gemm im2cols (not for 1x1).  Backward takes the weight's and every
    bottom's diff whatever the flags say; the bias diff only with param_propagate_down[1]."""
    weight, col = q.param(0), q.buffer("col_buffer")
    one_by_one = all(k == 1 and s == 1 and p == 0 for k, s, p in zip(geo.kernel, geo.stride, geo.pad))
    im2col = () if one_by_one else (write(col), read(col))
    col2im = (write(col),)
    forward_col, data_col = (col2im, im2col) if reverse else (im2col, col2im)
    images = count(q.bottoms[0][: geo.channel_axis])  # num_: the gemm helpers run per image
    bias_grad = bias is not None and q.param_propagate_down[1]
    forward: tuple[Action, ...] = (read(weight),)
    backward: tuple[Action, ...] = (read(weight), write(weight, "diff"))
    for i in range(len(q.bottoms)):
        forward += (read(q.bottom(i)), write(q.top(i)))
        backward += (read(q.top(i), "diff"), read(q.bottom(i)), write(q.bottom(i), "diff"))
        backward += (write(bias, "diff"), read(multiplier)) if bias_grad else ()
        if images:
            forward += forward_col + ((read(bias), read(multiplier)) if bias is not None else ())
            backward += (im2col if q.param_propagate_down[0] else ()) + (data_col if q.propagate_down[i] else ())
    return LayerMemory(setup=setup, forward=forward, backward=backward, notes=notes)


def _cudnn_conv_steps(q: MemoryQuery, bias: BlobId | None, workspace: BlobId, setup: tuple[Action, ...]) -> LayerMemory:
    """cudnn_conv_layer.cu / cudnn_deconv_layer.cu: no col buffer (its shape is still set by
    the base Reshape); Backward takes the weight's diff only with param_propagate_down[0]
    and a bottom's diff only with its propagate_down.  The workspace is scratch of the
    step: cuDNN's forward, backward filter and backward data calls write it before they read
    it (the bias gradient, cudnnConvolutionBackwardBias, takes none)."""
    weight = q.param(0)
    scratch = (write(workspace), read(workspace))
    forward: tuple[Action, ...] = (read(weight),)
    backward: tuple[Action, ...] = (read(weight), write(weight, "diff")) if q.param_propagate_down[0] else ()
    backward += (write(bias, "diff"),) if bias is not None and q.param_propagate_down[1] else ()
    for i in range(len(q.bottoms)):
        forward += (read(q.bottom(i)), write(q.top(i))) + ((read(bias),) if bias is not None else ()) + scratch
        backward += (read(q.top(i), "diff"),) + ((read(q.bottom(i)),) + scratch if q.param_propagate_down[0] else ())
        backward += (read(weight), write(q.bottom(i), "diff")) + scratch if q.propagate_down[i] else ()
    handles = CUDNN_STREAMS_PER_GROUP * q.proto.convolution_param.group
    return LayerMemory(setup=setup, forward=forward, backward=backward, notes=(CUDNN_WORKSPACE_NOTE,), cudnn_handles=handles, cudnn_streams=handles)


def _im2col_memory(q: MemoryQuery) -> LayerMemory:
    """im2col_layer.cpp: the four geometry blobs (one value per spatial axis); Backward
    writes the bottom's diff without looking at propagate_down."""
    axes = len(conv_geometry(shape_query(q), q.bottoms[0], min_spatial_axes=1).kernel)
    return LayerMemory(
        setup=int_blobs(q, GEOMETRY_BLOBS, axes),
        forward=(read(q.bottom(0)), write(q.top(0))),
        backward=(read(q.top(0), "diff"), write(q.bottom(0), "diff")),
    )


def _conv_out(input_dim: int, geo: ConvGeometry, i: int) -> int:
    """ConvolutionLayer::compute_output_shape (C division)."""
    return c_div(input_dim + 2 * geo.pad[i] - geo.extent(i), geo.stride[i]) + 1


def _deconv_out(input_dim: int, geo: ConvGeometry, i: int) -> int:
    """DeconvolutionLayer::compute_output_shape."""
    return geo.stride[i] * (input_dim - 1) + geo.extent(i) - 2 * geo.pad[i]


def base_conv(q: ShapeQuery, reverse: bool) -> LayerShapes:
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


# conv_layer.cpp/.cu and cudnn_conv_layer.cu Forward: im2col into col_buffer_ (scratch
# Backward rewrites), a gemm, the bias: a function of the bottom and the weights.  cuDNN's
# forward algorithms are deterministic (only its backward filter/data ones may not be).
@layer(
    "Convolution",
    FAMILY,
    source=BVLC + "layers/base_conv_layer.cpp, conv_layer.cpp, cudnn_conv_layer.cpp",
    memory=_conv_memory(reverse=False),
    **_CONV_ARITY,
    recompute=PURE,
    forward_flops=conv_flops,
)
def _convolution(q: ShapeQuery) -> LayerShapes:
    """N-d convolution: out = (in + 2*pad - dilated kernel) / stride + 1 per spatial axis."""
    return base_conv(q, reverse=False)


@recompute_rule
def _deconv_recompute(proto, phase: str) -> Recompute:
    """deconv_layer.cpp/.cu Forward: Convolution's backward-data gemm and col2im (each
    output summed by one thread): pure.  But a cuDNN build (engine DEFAULT or CUDNN,
    GetDeconvolutionLayer) runs cudnn_deconv_layer.cu, whose Forward is
    cudnnConvolutionBackwardData: its algorithm 0, which the heuristic may pick, adds with
    atomics and is not reproducible (cuDNN's reproducibility notes), so a second run may
    differ in the last bits.  Only Caffe's engine is recomputed: ``engine: CAFFE``, or
    DEFAULT with a dilation, which GetDeconvolutionLayer never gives to cuDNN."""
    param = proto.convolution_param
    engine = param.engine
    if engine == caffe_pb2.ConvolutionParameter.DEFAULT and any(d > 1 for d in param.dilation):
        engine = caffe_pb2.ConvolutionParameter.CAFFE
    if engine != caffe_pb2.ConvolutionParameter.CAFFE:
        return Recompute(False, "a cuDNN build runs its Forward as cudnnConvolutionBackwardData, not reproducible bit for bit (set engine: CAFFE)")
    return PURE_ANSWER


@layer(
    "Deconvolution",
    FAMILY,
    source=BVLC + "layers/base_conv_layer.cpp, deconv_layer.cpp, cudnn_deconv_layer.cpp",
    memory=_conv_memory(reverse=True),
    **_CONV_ARITY,
    recompute=_deconv_recompute,
    forward_flops=_deconv_flops,
)
def _deconvolution(q: ShapeQuery) -> LayerShapes:
    """Transposed convolution: out = stride*(in-1) + dilated kernel - 2*pad; weights are (C, out/g, k...)."""
    return base_conv(q, reverse=True)


# Recompute: im2col_layer.cpp/.cu Forward: im2col of the bottom, a copy.
@layer("Im2col", FAMILY, bottoms=Arity.exactly(1), tops=Arity.exactly(1), source=BVLC + "layers/im2col_layer.cpp", memory=_im2col_memory, recompute=PURE_CHEAP)
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


_POOL = caffe_pb2.PoolingParameter


def pool_steps(
    method: int, bottom: BlobId, top: BlobId, shape: Shape, propagate: bool, own: BuffersOf, mask: BlobId | None = None, train: bool = True
) -> LayerMemory:
    """One PoolingLayer from ``bottom`` to ``top`` (of ``shape``), its own blobs named by ``own``.

    pooling_layer.cpp: MAX writes its argmax into the ``mask`` top, else into its own
    Blob<int> max_idx_, and reads it back in Backward; Backward does nothing without
    ``propagate``.  STOCHASTIC is NOT_IMPLEMENTED on CPU, so its steps are pooling_layer.cu's:
    Reshape shapes the Dtype blob rand_idx_, which Forward draws when ``train`` (TRAIN is the
    phase of every layer built inside another: its LayerParameter is fresh) and Backward reads."""
    setup: tuple[Action, ...] = ()
    kept: tuple[BlobId, ...] = ()
    if method == _POOL.MAX:
        kept = (mask or own("max_idx"),)
        setup = () if mask else (Reshape(kept[0], shape, "int"),)
    elif method == _POOL.STOCHASTIC:
        kept = (own("rand_idx"),)
        setup = (Reshape(kept[0], shape),)
    drawn = kept if method == _POOL.MAX or train else ()
    forward = (read(bottom), write(top)) + tuple(write(blob) for blob in drawn)
    backward = (read(top, "diff"), write(bottom, "diff")) + tuple(read(blob) for blob in kept) if propagate else ()
    return LayerMemory(setup=setup, forward=forward, backward=backward)


def _pooling_memory(q: MemoryQuery) -> LayerMemory:
    """Caffe's PoolingLayer, or (GetPoolingLayer: one top, AVE) CuDNNPoolingLayer, whose
    Backward also reads both data; cuDNN MAX stays Caffe's layer, cuDNN STOCHASTIC aborts."""
    param = q.proto.pooling_param
    mask = q.top(1) if len(q.tops) > 1 else None
    steps = pool_steps(param.pool, q.bottom(0), q.top(0), q.tops[0], q.propagate_down[0], q.buffer, mask, train=q.phase == "TRAIN")
    if not uses_cudnn(q, param.engine) or mask is not None or param.pool == _POOL.MAX:
        return steps
    if param.pool == _POOL.STOCHASTIC:
        return replace(steps, notes=(engine_note(q, "cuDNN has no STOCHASTIC pooling"),))
    backward = steps.backward[:1] + (read(q.top(0)), read(q.bottom(0))) + steps.backward[1:]
    return replace(steps, backward=backward, cudnn_handles=1)


@recompute_rule
def _pooling_recompute(proto, phase: str) -> Recompute:
    """pooling_layer.cpp/.cu, cudnn_pooling_layer.cu: MAX rewrites its argmax (max_idx_, or
    the mask top) whole and AVE only the top, from the bottom; STOCHASTIC in TRAIN draws a
    threshold per window (caffe_gpu_rng_uniform in Forward_gpu; Forward_cpu is
    NOT_IMPLEMENTED), in TEST it weights the window by its values: pure."""
    return _pool_method_recompute(proto.pooling_param.pool, phase)


def _pool_method_recompute(method: int, phase: str) -> Recompute:
    """Pooling's answer for a method (PoolingParameter's and SPPParameter's enums agree)."""
    if method == _POOL.STOCHASTIC and phase == "TRAIN":
        return Recompute(False, "STOCHASTIC pooling in TRAIN draws random numbers in Forward (caffe_gpu_rng_uniform)")
    return CHEAP_ANSWER


def _pooling_flops(proto, shapes: LayerShapes) -> int:
    """One operation per window element per pooled output (top 0; MAX's mask top is its
    by-product).  global_pooling's window is the bottom's H x W, which the shapes here do
    not hold: it is counted as one per output, an undercount."""
    param = proto.pooling_param
    if param.global_pooling:
        return count(shapes.tops[0])
    has = param.HasField
    kernel_h, kernel_w = (param.kernel_size,) * 2 if has("kernel_size") else (param.kernel_h, param.kernel_w)
    return count(shapes.tops[0]) * kernel_h * kernel_w


@layer(
    "Pooling",
    FAMILY,
    bottoms=Arity.exactly(1),
    tops=Arity(1, 2),
    source=BVLC + "layers/pooling_layer.cpp, cudnn_pooling_layer.cpp",
    memory=_pooling_memory,
    recompute=_pooling_recompute,
    forward_flops=_pooling_flops,
)
def _pooling(q: ShapeQuery) -> LayerShapes:
    """2-D pooling; MAX may give a second top, the argmax mask, shaped like the first."""
    param = q.proto.pooling_param
    q.check(len(q.layer.tops) == 1 or param.pool == param.MAX, "only MAX pooling can output a second (mask) top")
    top = pool_2d(q, param, q.bottoms[0])
    return LayerShapes(tops=(top,) * max(1, len(q.layer.tops)))


def _spp_memory(q: MemoryQuery) -> LayerMemory:
    """spp_layer.cpp: one level is a PoolingLayer from bottom to top; more are an inner net.

    Split (its tops share the bottom's data, not its diff) -> per level a PoolingLayer into
    ``pooling_output_i`` -> Flatten (``flatten_output_i`` shares the pooled data; in Backward
    the pooled blob shares the flattened diff) -> Concat into the top.  Reshape rebuilds
    each PoolingLayer once (the old max_idx_ shape buffer is freed: no net change).
    Backward returns at once without propagate_down[0].  The inner layers are constructed
    directly, not by the layer factory: Caffe's own classes under cuDNN too."""
    spp = q.proto.spp_param
    shape, source = q.bottoms[0], q.bottom(0)
    levels = [pool_2d(shape_query(q), _spp_level_param(spp, level, shape[2], shape[3]), shape) for level in range(spp.pyramid_height)]
    if len(levels) == 1:
        return pool_steps(spp.pool, source, q.top(0), levels[0], q.propagate_down[0], q.buffer)
    splits = [q.buffer(f"split_top_{i}") for i in range(len(levels))]
    pooled = [q.buffer(f"pooling_output_{i}") for i in range(len(levels))]
    flat = [q.buffer(f"flatten_output_{i}") for i in range(len(levels))]
    pools = [pool_steps(spp.pool, splits[i], pooled[i], levels[i], True, lambda name, i=i: q.buffer(f"pooling_{i}/{name}")) for i in range(len(levels))]
    setup = tuple(Reshape(split, shape) for split in splits)
    forward = tuple(Share(split, source, "data") for split in splits)
    for i, level in enumerate(levels):
        setup += (Reshape(pooled[i], level),) + pools[i].setup + (Reshape(flat[i], (level[0], count(level[1:]))),)
        forward += pools[i].forward + (Share(flat[i], pooled[i], "data"),)
    forward += tuple(read(blob) for blob in flat) + (write(q.top(0)),)
    backward: tuple[Action, ...] = ()
    if q.propagate_down[0]:
        backward = (read(q.top(0), "diff"),) + tuple(write(blob, "diff") for blob in flat)
        for i in range(len(levels)):
            backward += (Share(pooled[i], flat[i], "diff"),) + pools[i].backward
        backward += tuple(read(split, "diff") for split in splits) + (write(source, "diff"),)
    return LayerMemory(setup=setup, forward=forward, backward=backward)


@recompute_rule
def _spp_recompute(proto, phase: str) -> Recompute:
    """spp_layer.cpp: an inner Split, one Pooling (spp_param.pool) + Flatten per level and
    a Concat: Pooling's answer."""
    return _pool_method_recompute(proto.spp_param.pool, phase)


@layer("SPP", FAMILY, bottoms=Arity.exactly(1), tops=Arity.exactly(1), source=BVLC + "layers/spp_layer.cpp", memory=_spp_memory, gpu="none", recompute=_spp_recompute)
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


CUDNN_LRN_MAX_N = 16  # cudnn.h: GetLRNLayer keeps Caffe's LRN for a larger local_size


def _lrn_memory(q: MemoryQuery) -> LayerMemory:
    """lrn_layer.cpp, or the class GetLRNLayer builds for cuDNN: CuDNNLCNLayer for
    WITHIN_CHANNEL, CuDNNLRNLayer for ACROSS_CHANNELS up to CUDNN_LRN_MAX_N channels.

    ACROSS_CHANNELS: Reshape shapes ``scale_`` like the bottom; Forward writes it, Backward
    (no propagate_down test) reads it.  Their temporaries (padded_square, padded_ratio,
    accum_ratio) are Blobs freed before the call returns: no bytes outlive it.  The cuDNN
    classes still run LRNLayer's LayerSetUp and Reshape but never touch ``scale_`` or the
    inner net; CuDNNLCNLayer's Reshape cudaMallocs two bottom-sized temporaries."""
    param = q.proto.lrn_param
    within = param.norm_region == param.WITHIN_CHANNEL
    forward = (read(q.bottom(0)), write(q.top(0)))
    backward = (read(q.top(0), "diff"), read(q.top(0)), read(q.bottom(0)), write(q.bottom(0), "diff"))
    if uses_cudnn(q, param.engine) and (within or param.local_size <= CUDNN_LRN_MAX_N):
        setup = _within_channel_memory(q).setup if within else (Reshape(q.buffer("scale"), q.bottoms[0]),)
        temporaries = tuple(Alloc(q.buffer(f"cudnn_temp{i}"), count(q.bottoms[0]), device=True) for i in (1, 2)) if within else ()
        return LayerMemory(setup=setup + temporaries, forward=forward, backward=backward, cudnn_handles=1)
    if within:
        return _within_channel_memory(q)
    scale = q.buffer("scale")
    return LayerMemory(setup=(Reshape(scale, q.bottoms[0]),), forward=forward + (write(scale),), backward=backward[:-1] + (read(scale),) + backward[-1:])


def _within_channel_memory(q: MemoryQuery) -> LayerMemory:
    """LRNLayer's WITHIN_CHANNEL inner net, all on bottom-shaped blobs: Split into
    product_input_ and square_input_ (shared data, own diffs) -> Power(2) -> AVE Pooling
    (pad (size-1)/2, stride 1) -> Power(-beta, alpha, 1) -> Eltwise PROD with product_input_
    into the top.  Backward (only with propagate_down[0]) runs them in reverse, the
    Eltwise asked for both bottoms' gradients.  (Built directly: Caffe's classes, never cuDNN's.)"""
    bottom, top, shape = q.bottom(0), q.top(0), q.bottoms[0]
    product_in, square_in, square_out, pool_out, power_out = (
        q.buffer(name) for name in ("product_input", "square_input", "square_output", "pool_output", "power_output")
    )
    pool = pool_steps(_POOL.AVE, square_out, pool_out, shape, True, q.buffer)
    setup = tuple(Reshape(blob, shape) for blob in (product_in, square_in, square_out, pool_out, power_out))
    forward = (Share(product_in, bottom, "data"), Share(square_in, bottom, "data"), write(square_out), read(square_in))
    forward += pool.forward + (write(power_out), read(pool_out), read(product_in), read(power_out), write(top))
    backward: tuple[Action, ...] = ()
    if q.propagate_down[0]:
        backward = (read(top), read(top, "diff"), read(product_in), write(product_in, "diff"), read(power_out), write(power_out, "diff"))
        backward += (write(pool_out, "diff"), read(power_out, "diff"), read(pool_out), read(power_out)) + pool.backward
        backward += (write(square_in, "diff"), read(square_out, "diff"), read(square_in))
        backward += (read(product_in, "diff"), read(square_in, "diff"), write(bottom, "diff"))
    return LayerMemory(setup=setup, forward=forward, backward=backward)


def _lrn_flops(proto, shapes: LayerShapes) -> int:
    """lrn_layer.cpp: per element the sum of squares over its window (local_size values
    across channels; local_size^2 within a channel, the inner AVE pooling), then the
    power and the product: window + 2."""
    param = proto.lrn_param
    window = param.local_size if param.norm_region == param.ACROSS_CHANNELS else param.local_size**2
    return count(shapes.tops[0]) * (window + 2)


# lrn_layer.cpp/.cu, cudnn_lrn_layer.cu: ACROSS_CHANNELS rewrites scale_ (read by Backward)
# whole from the bottom; WITHIN_CHANNEL runs its inner split/power/pool/power/eltwise net.
@layer(
    "LRN",
    FAMILY,
    bottoms=Arity.exactly(1),
    tops=Arity.exactly(1),
    source=BVLC + "layers/lrn_layer.cpp, cudnn_lrn_layer.cpp, cudnn_lcn_layer.cpp",
    memory=_lrn_memory,
    recompute=PURE_CHEAP,
    forward_flops=_lrn_flops,
)
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


def _crop_memory(q: MemoryQuery) -> LayerMemory:
    """crop_layer.cpp: Reshape writes three Blob<int>s of one value per axis (offsets,
    src_strides_, dest_strides_); Backward takes the top's and bottom 0's diffs whatever
    propagate_down says, and copies only when it is set.  The reference bottom is untouched.
    GPU: crop_layer.cu's kernels take all three blobs' gpu_data (the CPU copy reads only
    ``offsets``), so each gets a device copy in Forward."""
    names = ("offsets", "src_strides", "dest_strides") if q.device == "gpu" else ("offsets",)
    indexing = tuple(read(q.buffer(name)) for name in names)
    copy_back = indexing if q.propagate_down[0] else ()
    return LayerMemory(
        setup=int_blobs(q, ("offsets", "src_strides", "dest_strides"), len(q.bottoms[0])),
        forward=(read(q.bottom(0)), write(q.top(0))) + indexing,
        backward=(read(q.top(0), "diff"), write(q.bottom(0), "diff")) + copy_back,
    )


# Recompute: crop_layer.cpp/.cu Forward copies the window of bottom 0.
@layer("Crop", FAMILY, bottoms=Arity.exactly(2), tops=Arity.exactly(1), source=BVLC + "layers/crop_layer.cpp", memory=_crop_memory, recompute=PURE_CHEAP)
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

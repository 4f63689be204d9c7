"""Layers of the MobileNet / ShuffleNet forks, each checked against its repository's source.

- ConvolutionDepthwise: farmingyard/caffe-mobilenet ``conv_dw_layer.cpp`` (commit f7d7d130; sp2823's
  BVLC/caffe PR #5665, as its README says).  Its own LayerSetUp/Reshape over
  ``convolution_param``: one 2-D kernel per channel, no im2col, no col buffer.
- DepthwiseConvolution: yonghenglh6/DepthwiseConvolution
  ``caffe/src/caffe/layers/depthwise_conv_layer.cpp`` (commit 2b9cf52a).  A
  BaseConvolutionLayer whose compute_output_shape, Forward_cpu and Backward_cpu are
  conv_layer.cpp's line for line (im2col + gemm, so the col buffer is used on CPU); only its
  .cu has depthwise kernels.  Registered by REGISTER_LAYER_CLASS: never a cuDNN class.
- ShuffleChannel: farmingyard/ShuffleNet ``shuffle_channel_layer.cpp`` (commit b9624442)
  (``shuffle_channel_param { group }``, LayerParameter field 164 as in its README).
- ReLU6: eric612/MobileNet-YOLO ``src/caffe/layers/relu6_layer.cpp`` (commit 69b4441c) (``relu6_param``, a
  ReLUParameter at 211 in that fork; negative_slope below 0 as in ReLU, top clipped at 6).
- Yolov3: eric612/MobileNet-YOLO ``src/caffe/layers/yolov3_layer.cpp`` and ``.cu`` (commit
  69b4441c) (``yolov3_param``, field 603 there): the YOLOv3 loss of one feature map.
- Yolov3DetectionOutput: eric612/MobileNet-YOLO ``src/caffe/layers/yolov3_detection_output_layer.cpp``
  and ``.cu`` (commit 69b4441c) (``yolov3_detection_output_param``, field 602 there): the boxes of
  every feature map kept after NMS, a data-dependent count sized here by its upper bound.

YOLO's one-bottom ``Upsample`` lives beside SegNet's in :mod:`caffemem.layers.fork_vision`
(one type string, one spec).

Every memory rule follows the CPU code of the file named (Forward_cpu/Backward_cpu), in the
order it touches memory.
"""

from __future__ import annotations

from caffemem.graph import LayerShapes, count
from caffemem.layers.access import (
    Action,
    LayerMemory,
    MemoryQuery,
    Reshape,
    buffer_setup,
    read,
    write,
)
from caffemem.layers.blob import format_shape, int32, legacy4, legacy_dim, reshaped
from caffemem.layers.loss import _loss as loss_layer_checks
from caffemem.layers.neuron import neuron_memory
from caffemem.layers.registry import (
    LOSS,
    OUTPUT,
    PURE,
    PURE_CHEAP,
    Arity,
    ShapeQuery,
    layer,
)
from caffemem.layers.vision import (
    GEOMETRY_BLOBS,
    base_conv,
    c_div,
    conv_flops,
    caffe_conv_steps,
    conv_geometry,
    int_blobs,
    positive,
    shape_query,
)

FAMILY = "mobile"
ONE = Arity.exactly(1)
CONV_DW = "farmingyard/caffe-mobilenet conv_dw_layer.cpp, conv_dw_layer.hpp @f7d7d130 (sp2823, BVLC/caffe PR #5665)"
DEPTHWISE = "yonghenglh6/DepthwiseConvolution caffe/src/caffe/layers/depthwise_conv_layer.cpp, caffe/include/caffe/layers/depthwise_conv_layer.hpp @2b9cf52a"
SHUFFLE = "farmingyard/ShuffleNet shuffle_channel_layer.cpp @b9624442"
RELU6 = "eric612/MobileNet-YOLO src/caffe/layers/relu6_layer.cpp @69b4441c"
YOLOV3_LOSS = "eric612/MobileNet-YOLO src/caffe/layers/yolov3_layer.cpp, .cu, .hpp @69b4441c"
YOLOV3_OUTPUT = "eric612/MobileNet-YOLO src/caffe/layers/yolov3_detection_output_layer.cpp, .cu, .hpp @69b4441c"
# Its detection rows: [image_id, label, confidence, xmin, ymin, xmax, ymax].
DETECTION_FIELDS = 7


# ----------------------------------------------------------------------------------------
# ConvolutionDepthwise (conv_dw_layer.cpp)
# ----------------------------------------------------------------------------------------


def _pair(q: ShapeQuery, param, name: str, default: int | None) -> tuple[int, int]:
    """conv_dw_layer.cpp LayerSetUp: ``name_h``/``name_w`` when both are set, else the repeated
    field's first value for both axes (second value for w when there are two or more).

    The file reads ``kernel_size(0)``, ``stride(0)`` and ``pad(0)`` without a default when
    the list is empty (protobuf then reads past an empty array): caffemem refuses that.
    Only ``dilation`` has a default (1) when not given."""
    if name != "dilation" and param.HasField(f"{name}_h") and param.HasField(f"{name}_w"):
        return getattr(param, f"{name}_h"), getattr(param, f"{name}_w")
    repeated = "kernel_size" if name == "kernel" else name
    values = list(getattr(param, repeated))
    if not values:
        q.check(default is not None, f"ConvolutionDepthwise needs {repeated} (or {name}_h and {name}_w): conv_dw_layer.cpp reads {repeated}(0) with no default")
        return default, default  # type: ignore[return-value]
    return (values[0], values[0]) if len(values) == 1 else (values[0], values[1])


def _dw_geometry(q: ShapeQuery) -> tuple[tuple[int, int], tuple[int, int], tuple[int, int], tuple[int, int]]:
    """(kernel, stride, pad, dilation) as (h, w) pairs."""
    param = q.proto.convolution_param
    kernel = _pair(q, param, "kernel", None)
    stride = _pair(q, param, "stride", None)
    pad = _pair(q, param, "pad", None)
    dilation = _pair(q, param, "dilation", 1)
    for value, what in ((stride[0], "stride_h"), (stride[1], "stride_w")):
        positive(q, value, what)  # conv_dw_layer.cpp divides by it without a CHECK
    return kernel, stride, pad, dilation


def _dw_top(q: ShapeQuery) -> tuple[int, int, int, int]:
    """Reshape: (num, channels, (H + 2p - (d(k-1)+1)) / s + 1, same for W), C int division."""
    num, channels, height, width = legacy4(q, q.bottoms[0])
    kernel, stride, pad, dilation = _dw_geometry(q)
    out = tuple(c_div(size + 2 * pad[i] - (dilation[i] * (kernel[i] - 1) + 1), stride[i]) + 1 for i, size in enumerate((height, width)))
    return (num, channels) + out  # type: ignore[return-value]


def _convolution_depthwise_memory(q: MemoryQuery) -> LayerMemory:
    """conv_dw_layer.cpp.

    Reshape: ``weight_buffer_`` (C, kh, kw, N, H', W') and ``weight_multiplier_`` (N, H', W')
    shaped, the multiplier filled with ones (caffe_gpu_set of its mutable_gpu_data); with
    bias_term also ``bias_buffer_`` (C, N, H', W') shaped and ``bias_multiplier_`` (N, H', W')
    filled.  The two buffers get bytes only in the GPU Backward (not counted: CPU path).
    Forward_cpu: bottom and weight read, top written; with bias_term the top is taken again
    and the bias read.  Backward_cpu: the bottom's diff is zeroed first (caffe_set, whatever
    propagate_down says); the bias diff (top diff read) with bias_term and
    param_propagate_down[1]; the weight diff (top diff, bottom data) with
    param_propagate_down[0]; the bottom diff (top diff, weight) with propagate_down[0]."""
    sq = ShapeQuery(q.layer, q.bottoms, q.phase, {})
    kernel = _dw_geometry(sq)[0]
    num, channels, out_h, out_w = q.tops[0]
    bias_term = q.proto.convolution_param.bias_term
    weight, bias = q.param(0), (q.param(1) if bias_term else None)
    plane = (num, out_h, out_w)
    setup: tuple[Action, ...] = (Reshape(q.buffer("weight_buffer"), (channels,) + kernel + plane),)
    setup += buffer_setup(q.buffer("weight_multiplier"), plane, filled=True)
    if bias_term:
        setup += (Reshape(q.buffer("bias_buffer"), (channels,) + plane),)
        setup += buffer_setup(q.buffer("bias_multiplier"), plane, filled=True)
    forward: tuple[Action, ...] = (read(q.bottom(0)), read(weight), write(q.top(0)))
    if bias is not None:
        forward += (write(q.top(0)), read(bias))
    backward: tuple[Action, ...] = (write(q.bottom(0), "diff"),)
    if bias is not None and q.param_propagate_down[1]:
        backward += (read(q.top(0), "diff"), write(bias, "diff"))
    if q.param_propagate_down[0]:
        backward += (read(q.top(0), "diff"), read(q.bottom(0)), write(weight, "diff"))
    if q.propagate_down[0]:
        backward += (read(q.top(0), "diff"), read(weight), write(q.bottom(0), "diff"))
    return LayerMemory(setup=setup, forward=forward, backward=backward)


# conv_dw_layer.cpp/.cu Forward: one kh x kw filter per channel, plus the bias: pure, FLOPs as any
# convolution's (vision.conv_flops; the weight (C, 1, kh, kw)).  Not cheap: MXNet's mirror keeps convolutions.
@layer("ConvolutionDepthwise", FAMILY, bottoms=ONE, tops=ONE, source=CONV_DW, memory=_convolution_depthwise_memory, recompute=PURE, forward_flops=conv_flops)
def _convolution_depthwise(q: ShapeQuery) -> LayerShapes:
    """Depthwise convolution: every channel convolved with its own kernel; ``num_output`` and
    ``group`` are ignored (the top has the bottom's channels).  Weight (C, 1, kh, kw), bias (C,)
    when bias_term.  The bottom is read through num()/channels()/height()/width()."""
    top = reshaped(q, _dw_top(q))
    kernel = _dw_geometry(q)[0]
    channels = top[1]
    weight = (channels, 1) + kernel
    params = (weight, (channels,)) if q.proto.convolution_param.bias_term else (weight,)
    return LayerShapes(tops=(top,), params=params)


# ----------------------------------------------------------------------------------------
# DepthwiseConvolution (yonghenglh6/DepthwiseConvolution depthwise_conv_layer.cpp)
# ----------------------------------------------------------------------------------------


def _depthwise_convolution_memory(q: MemoryQuery) -> LayerMemory:
    """depthwise_conv_layer.cpp over base_conv_layer.cpp: BaseConvolutionLayer's LayerSetUp and
    Reshape (the four geometry blobs, conv_input_shape_, the col buffer's shape, the bias
    multiplier filled), then conv_layer.cpp's Forward_cpu/Backward_cpu, copied verbatim:
    the same touches as Convolution with Caffe's engine, whatever ``engine`` says."""
    param = q.proto.convolution_param
    geo = conv_geometry(shape_query(q), q.bottoms[0], min_spatial_axes=0)
    axes = len(geo.kernel)
    top_spatial = q.tops[0][geo.channel_axis + 1 :]
    bias = q.param(1) if param.bias_term else None
    multiplier = q.buffer("bias_multiplier")
    setup = int_blobs(q, GEOMETRY_BLOBS, max(axes, 1)) + int_blobs(q, ("conv_input_shape",), axes + 1)
    setup += (Reshape(q.buffer("col_buffer"), (count(q.params[0][1:]) * param.group,) + top_spatial),)
    if bias is not None:
        setup += buffer_setup(multiplier, (count(top_spatial),), filled=True)
    return caffe_conv_steps(q, False, geo, bias, multiplier, setup, ())


# depthwise_conv_layer.cpp/.cu: a convolution (base_conv_layer.cpp's gemms on the CPU).
@layer("DepthwiseConvolution", FAMILY, bottoms=Arity(1, None), tops=Arity(1, None), source=DEPTHWISE, memory=_depthwise_convolution_memory, recompute=PURE, forward_flops=conv_flops)
def _depthwise_convolution(q: ShapeQuery) -> LayerShapes:
    """BaseConvolutionLayer's shapes with ConvolutionLayer's output size: ``group`` must be
    given (MobileNet files set it to the channels) -- nothing forces it, as in the source."""
    return base_conv(q, reverse=False)


# ----------------------------------------------------------------------------------------
# ShuffleChannel (shuffle_channel_layer.cpp)
# ----------------------------------------------------------------------------------------


def _shuffle_memory(q: MemoryQuery) -> LayerMemory:
    """shuffle_channel_layer.cpp: Forward_cpu reads the bottom and writes the top (a strided
    copy, no temporary: ``temp_blob_`` is commented out); Backward_cpu, when propagate_down[0],
    reads the top's diff and writes the bottom's."""
    backward: tuple[Action, ...] = (read(q.top(0), "diff"), write(q.bottom(0), "diff")) if q.propagate_down[0] else ()
    return LayerMemory(forward=(read(q.bottom(0)), write(q.top(0))), backward=backward)


# Not in place: the copy moves channel blocks to other positions of the same buffer.
# shuffle_channel_layer.cpp/.cu Forward: a strided copy of the bottom.
@layer("ShuffleChannel", FAMILY, bottoms=ONE, tops=ONE, source=SHUFFLE, memory=_shuffle_memory, recompute=PURE_CHEAP)
def _shuffle_channel(q: ShapeQuery) -> LayerShapes:
    """LayerSetUp: CHECK_GT(group, 0), top ReshapeLike the bottom; Reshape then sets the top to
    (num, channels, height, width) through the legacy accessors, so the top has 4 axes (an
    (N, C) bottom gives (N, C, 1, 1)).  Forward_cpu CHECKs that the channels (shape(1)) are a
    multiple of group."""
    bottom = q.bottoms[0]
    group = q.proto.shuffle_channel_param.group
    q.check(group > 0, "group must be greater than 0")
    q.check(len(bottom) >= 2, f"the bottom needs a channel axis (shape(1)), got {format_shape(bottom)}")
    q.check(bottom[1] % group == 0, f"Wrong group size: channels ({bottom[1]}) must be a multiple of group ({group})")
    return LayerShapes(tops=(reshaped(q, legacy4(q, bottom)),))


# ----------------------------------------------------------------------------------------
# ReLU6 (relu6_layer.cpp)
# ----------------------------------------------------------------------------------------


# relu6_layer.cpp/.cu Forward: elementwise min(max(x, 0), 6).
@layer("ReLU6", FAMILY, bottoms=ONE, tops=ONE, source=RELU6 + ", neuron_layer.cpp", memory=neuron_memory("bottom"), recompute=PURE_CHEAP)
def _relu6(q: ShapeQuery) -> LayerShapes:
    """A NeuronLayer: the top is shaped like the bottom.  Forward_cpu reads the bottom and
    writes min(max(x, 0) + negative_slope * min(x, 0), 6); Backward_cpu, when
    propagate_down[0], reads the bottom's data and the top's diff, writes the bottom's diff."""
    return LayerShapes(tops=(q.bottoms[0],))


# ----------------------------------------------------------------------------------------
# Yolov3DetectionOutput (yolov3_detection_output_layer.cpp)
# ----------------------------------------------------------------------------------------


def _yolov3_output_memory(q: MemoryQuery) -> LayerMemory:
    """Forward_cpu (Forward_gpu runs the same steps with gpu_data, then calls it): for each
    bottom, ``swap_`` ReshapeLike the bottom (so it grows to the largest), its data written
    from the bottom's; then the top, reshaped to the boxes kept, is written.  Backward does
    nothing."""
    swap = q.buffer("swap")
    forward: tuple[Action, ...] = ()
    for index, shape in enumerate(q.bottoms):
        forward += (Reshape(swap, shape), write(swap), read(q.bottom(index)))
    return LayerMemory(forward=forward + (write(q.top(0)),))


@layer("Yolov3DetectionOutput", FAMILY, bottoms=Arity(1, None), tops=ONE, source=YOLOV3_OUTPUT, memory=_yolov3_output_memory, recompute=OUTPUT)
def _yolov3_detection_output(q: ShapeQuery) -> LayerShapes:
    """[1, 1, rows, 7], rows an upper bound of what Forward keeps.

    LayerSetUp CHECKs num_classes is given and that there are mask_group_num bottoms;
    Reshape sizes the top [1, 1, 1, 7].  Forward_cpu makes a candidate for every image,
    cell, box (num_box) and class scoring above confidence_threshold, keeps those NMS
    leaves, and reshapes the top to them, or to one "no detection" row per image of the
    last bottom when none is kept.  As a blob never shrinks, caffemem uses the most:
    every candidate, sum over the bottoms of N x H x W x num_box x num_classes.
    """
    param = q.proto.yolov3_detection_output_param
    q.check(param.HasField("num_classes"), "Must specify num_classes")
    groups = int32(param.mask_group_num)
    q.check(len(q.bottoms) == groups, f"mask_group_num is {groups}: the layer takes that many bottoms, got {len(q.bottoms)}")
    candidates = 0
    for shape in q.bottoms:
        num, _, height, width = legacy4(q, shape)
        candidates += num * height * width * int32(param.num_box) * int32(param.num_classes)
    rows = max(candidates, legacy_dim(q, q.bottoms[-1], 0))
    return LayerShapes(tops=(reshaped(q, (1, 1, rows, DETECTION_FIELDS)),))


# ----------------------------------------------------------------------------------------
# Yolov3 (yolov3_layer.cpp), the loss
# ----------------------------------------------------------------------------------------


def _yolov3_loss_memory(q: MemoryQuery) -> LayerMemory:
    """Reshape shapes ``diff_`` and ``real_diff_`` like the predictions (real_diff_ is never
    touched again).  Forward_cpu (Forward_gpu fills ``swap_`` on the GPU, then calls it)
    reads the label, zeroes ``diff_``, reads the predictions, shapes ``swap_`` like them
    and writes it, and writes the loss.  Backward, for the predictions: with
    use_logic_gradient it reads ``swap_`` and rewrites ``diff_``; then the loss's diff and
    ``diff_`` give the predictions' diff (it refuses to backpropagate to the label)."""
    diff, real_diff, swap = q.buffer("diff"), q.buffer("real_diff"), q.buffer("swap")
    setup = buffer_setup(diff, q.bottoms[0]) + buffer_setup(real_diff, q.bottoms[0])
    forward = (read(q.bottom(1)), write(diff), read(q.bottom(0)), Reshape(swap, q.bottoms[0]), write(swap), write(q.top(0)))
    backward: tuple[Action, ...] = ()
    if q.propagate_down[0]:
        logic = (read(swap), write(diff)) if q.proto.yolov3_param.use_logic_gradient else ()
        backward = logic + (read(q.top(0), "diff"), read(diff), write(q.bottom(0), "diff"))
    return LayerMemory(setup=setup, forward=forward, backward=backward)


@layer("Yolov3", FAMILY, bottoms=Arity.exactly(2), tops=ONE, auto_top=True, no_force_backward=(1,), source=YOLOV3_LOSS, memory=_yolov3_loss_memory, recompute=LOSS)
def _yolov3_loss(q: ShapeQuery) -> LayerShapes:
    """A scalar loss.  LayerSetUp CHECKs that the predictions hold, per image, H x W x num
    boxes of 4 coordinates, an objectness and num_class scores; LossLayer::Reshape that the
    label (AnnotatedData's YOLO label, [N, 1, 300, 5]) has the predictions' first axis."""
    param = q.proto.yolov3_param
    loss = loss_layer_checks(q)
    _, _, height, width = legacy4(q, q.bottoms[0])
    expected = width * height * int32(param.num) * (4 + int32(param.num_class) + 1)
    per_image = count(q.bottoms[0][1:])
    q.check(
        per_image == expected,
        f"the predictions {format_shape(q.bottoms[0])} must hold {width}x{height}x{param.num} boxes x (4 + {param.num_class} classes + 1) = {expected} values an image, not {per_image}",
    )
    return LayerShapes(tops=(loss,))

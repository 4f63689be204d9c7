"""Common layers: fully connected, blob plumbing (concat, slice, reshape...) and reductions.

Each rule follows the Reshape (and LayerSetUp) of the Caffe master file it cites, CHECKs
included, so a net Caffe refuses is refused here with the same reason.  Each memory rule
lists what the same file's CPU code touches (access.py).
"""

from __future__ import annotations

from dataclasses import replace

from caffemem.graph import LayerShapes, Shape
from caffemem.graph import count as elements
from caffemem.layers.access import (
    Action,
    LayerMemory,
    MemoryQuery,
    Share,
    buffer_setup,
    read,
    write,
)
from caffemem.layers.blob import axis_index, count, dim, format_shape, int32, reshaped
from caffemem.layers.neuron import forward_only_memory, neuron_memory
from caffemem.layers.registry import (
    PURE,
    PURE_ANSWER,
    PURE_CHEAP,
    SHARES,
    Arity,
    Recompute,
    ShapeQuery,
    always,
    layer,
    never,
    recompute_rule,
)
from caffemem.schema import caffe_pb2

ONE = Arity.exactly(1)
AT_LEAST_ONE = Arity(1)


def _legacy_axis(q: ShapeQuery, shape: Shape, param, legacy_field: str) -> int:
    """Concat/Slice: ``axis`` (may be negative) or the legacy uint32 ``concat_dim``/``slice_dim``.

    Caffe refuses both at once (LayerSetUp); the legacy field is cast to int and must be a
    non-negative axis of the bottom (Reshape).
    """
    q.check(
        not (param.HasField("axis") and param.HasField(legacy_field)),
        f"either axis or {legacy_field} should be specified; not both",
    )
    if not param.HasField(legacy_field):
        return axis_index(q, shape, param.axis)
    value = int32(getattr(param, legacy_field))
    q.check(value >= 0, f"{legacy_field} cast to int is negative; it must be in [0, 32)")
    q.check(value < len(shape), f"{legacy_field} {value} out of range for {len(shape)}-D bottom {format_shape(shape)}")
    return value


def _with_dim(shape: Shape, axis: int, value: int) -> Shape:
    """``shape`` with dimension ``axis`` replaced."""
    return shape[:axis] + (value,) + shape[axis + 1 :]


def _weights_memory(q: MemoryQuery, rows: int, bottom_grad: bool) -> LayerMemory:
    """InnerProduct and Embed: a weight blob, and with a bias blob the ``bias_multiplier_``
    [rows] of ones Reshape writes to broadcast it.  Backward computes each parameter's
    gradient when its propagate_down is set, and the bottom's when ``bottom_grad``."""
    biased = len(q.params) > 1
    ones = q.buffer("bias_multiplier")
    top_diff = read(q.top(0), "diff")
    forward = (read(q.bottom(0)), write(q.top(0)), read(q.param(0))) + ((read(ones), read(q.param(1))) if biased else ())
    backward: tuple[Action, ...] = (top_diff, read(q.bottom(0)), write(q.param(0), "diff")) if q.param_propagate_down[0] else ()
    if biased and q.param_propagate_down[1]:
        backward += (top_diff, read(ones), write(q.param(1), "diff"))
    if bottom_grad:
        backward += (top_diff, read(q.param(0)), write(q.bottom(0), "diff"))
    return LayerMemory(setup=buffer_setup(ones, (rows,), filled=True) if biased else (), forward=forward, backward=backward)


def _inner_product_memory(q: MemoryQuery) -> LayerMemory:
    """inner_product_layer.cpp: M (the bias multiplier's length) is the top's leading dims;
    unlike Convolution, the bottom's diff is touched only when propagate_down[0].

    happynear/caffe-windows' ``normalize`` (ms branch @967eedf2, inner_product_layer.cpp
    and .cu): Reshape shapes ``weight_norm_`` [N] and zeroes it; every Forward rewrites the
    weights as unit rows (the GPU code keeping the row norms in ``weight_norm_``)."""
    rows = elements(q.tops[0][:-1])
    memory = _weights_memory(q, rows, q.propagate_down[0])
    if q.device == "gpu" and rows == 1 and len(q.params) > 1:
        # Forward_gpu with M_ == 1 is a gemv plus an axpy scaled by
        # ``bias_multiplier_.cpu_data()[0]`` (inner_product_layer.cu): the multiplier is read
        # on the host, and only Backward's gemv gives it a device copy.
        ones = read(q.buffer("bias_multiplier"))
        memory = replace(memory, forward=tuple(read(t.blob, t.part, "host") if t == ones else t for t in memory.forward))
    if not q.proto.inner_product_param.normalize:
        return memory
    norms = q.buffer("weight_norm")
    setup = memory.setup + buffer_setup(norms, (int32(q.proto.inner_product_param.num_output),), filled=True)
    forward = (read(q.param(0)), write(norms), write(q.param(0))) + memory.forward
    return replace(memory, setup=setup, forward=forward)


@recompute_rule
def _inner_product_recompute(proto, phase: str) -> Recompute:
    """inner_product_layer.cpp/.cu Forward: a gemm (gemv when M is 1) of the bottom and the
    weights, plus the bias: pure, not cheap.  happynear's ``normalize`` rewrites the
    weights as unit rows in every Forward: a parameter the solver and the next step read,
    and normalising rows already unit need not give the same bits."""
    if proto.inner_product_param.normalize:
        return Recompute(False, "with normalize its Forward rewrites the weights (a parameter) as unit rows")
    return PURE_ANSWER


def _inner_product_flops(proto, shapes: LayerShapes) -> int:
    """M x K by K x N (2 M N K) plus the bias (M N): K is the weight's count over N."""
    top, weight = shapes.tops[0], shapes.params[0]
    k = elements(weight) // top[-1]
    return 2 * elements(top) * k + (elements(top) if len(shapes.params) > 1 else 0)


@layer(
    "InnerProduct",
    "common",
    bottoms=ONE,
    tops=ONE,
    source="caffe master layers/inner_product_layer.cpp",
    memory=_inner_product_memory,
    recompute=_inner_product_recompute,
    forward_flops=_inner_product_flops,
)
def _inner_product(q: ShapeQuery) -> LayerShapes:
    """Flattens axes [axis, end) to K and maps them to num_output N.

    Weights are [N, K], or [K, N] with ``transpose``; the bias is [N] when bias_term.
    """
    param = q.proto.inner_product_param
    bottom = q.bottoms[0]
    axis = axis_index(q, bottom, param.axis)
    k = count(q, bottom, axis)
    n = int32(param.num_output)
    weight = reshaped(q, (k, n) if param.transpose else (n, k), "weight")
    params: tuple[Shape, ...] = (weight, reshaped(q, (n,), "bias")) if param.bias_term else (weight,)
    return LayerShapes(tops=(reshaped(q, bottom[:axis] + (n,)),), params=params)


def _alias_memory(q: MemoryQuery) -> LayerMemory:
    """reshape_layer.cpp (and Concat of one bottom, Slice to one top): Reshape does
    top[0]->ShareData(*bottom[0]) and ShareDiff, and Layer::Forward calls Reshape again
    (re-pointing the top if the bottom's storage changed since, e.g. a Split top that took
    its source's data); Forward_cpu and Backward_cpu touch nothing."""
    alias = (Share(q.top(0), q.bottom(0), "data"), Share(q.top(0), q.bottom(0), "diff"))
    return LayerMemory(setup=alias, forward=alias)


def _concat_memory(q: MemoryQuery) -> LayerMemory:
    """concat_layer.cpp: one bottom is aliased (Forward and Backward return at once);
    otherwise Forward copies every bottom into the top, Backward the top's diff back into
    the diffs propagate_down asks for."""
    if len(q.bottoms) == 1:
        return _alias_memory(q)
    bottoms = range(len(q.bottoms))
    forward = (write(q.top(0)),) + tuple(read(q.bottom(i)) for i in bottoms)
    backward = (read(q.top(0), "diff"),) + tuple(write(q.bottom(i), "diff") for i in bottoms if q.propagate_down[i])
    return LayerMemory(forward=forward, backward=backward)


# Recompute: concat_layer.cpp/.cu Forward copies the bottoms into the top.
@layer("Concat", "common", bottoms=AT_LEAST_ONE, tops=ONE, source="caffe master layers/concat_layer.cpp", memory=_concat_memory, recompute=PURE_CHEAP)
def _concat(q: ShapeQuery) -> LayerShapes:
    """Sums the bottoms' sizes along the concat axis; every other dimension must agree."""
    first = q.bottoms[0]
    axis = _legacy_axis(q, first, q.proto.concat_param, "concat_dim")
    total = first[axis]
    for i, other in enumerate(q.bottoms[1:], start=1):
        q.check(len(other) == len(first), f"all inputs must have the same #axes: bottom[0] {format_shape(first)}, bottom[{i}] {format_shape(other)}")
        q.check(
            all(a == b for j, (a, b) in enumerate(zip(first, other)) if j != axis),
            f"all inputs must have the same shape, except at concat axis {axis}: bottom[0] {format_shape(first)}, bottom[{i}] {format_shape(other)}",
        )
        total += other[axis]
    return LayerShapes(tops=(reshaped(q, _with_dim(first, axis, total)),))


def _slice_memory(q: MemoryQuery) -> LayerMemory:
    """slice_layer.cpp: one top is aliased; otherwise Forward copies the bottom into every
    top, and Backward (when propagate_down[0]) every top's diff into the bottom's, reading
    the diffs of tops nobody back-propagated into (allocating them)."""
    if len(q.tops) == 1:
        return _alias_memory(q)
    tops = range(len(q.tops))
    forward = (read(q.bottom(0)),) + tuple(write(q.top(i)) for i in tops)
    backward = ((write(q.bottom(0), "diff"),) + tuple(read(q.top(i), "diff") for i in tops)) if q.propagate_down[0] else ()
    return LayerMemory(forward=forward, backward=backward)


# Recompute: slice_layer.cpp/.cu Forward copies the bottom into the tops.
@layer("Slice", "common", bottoms=ONE, tops=AT_LEAST_ONE, source="caffe master layers/slice_layer.cpp", memory=_slice_memory, recompute=PURE_CHEAP)
def _slice(q: ShapeQuery) -> LayerShapes:
    """Cuts the slice axis at the increasing ``slice_point``s, or into equal parts, one per top."""
    param = q.proto.slice_param
    bottom = q.bottoms[0]
    axis = _legacy_axis(q, bottom, param, "slice_dim")
    size = bottom[axis]
    tops = len(q.layer.tops)
    points = [int32(p) for p in param.slice_point]
    if points:
        q.check(len(points) == tops - 1, f"{len(points)} slice_point(s) need {len(points) + 1} tops, got {tops}")
        q.check(tops <= size, f"{tops} tops cannot slice axis {axis} of bottom {format_shape(bottom)}")
        sizes: list[int] = []
        prev = 0
        for point in points:
            q.check(point > prev, f"slice_point values must be increasing and positive (got {point} after {prev})")
            sizes.append(point - prev)
            prev = point
        # Caffe's Blob::Reshape refuses the negative last part when a point is past the end.
        q.check(prev <= size, f"slice_point {prev} is past the end of axis {axis} (size {size})")
        sizes.append(size - prev)
    else:
        q.check(size % tops == 0, f"number of top blobs ({tops}) should evenly divide input slice axis ({size})")
        sizes = [size // tops] * tops
    return LayerShapes(tops=tuple(_with_dim(bottom, axis, s) for s in sizes))


def _split_memory(q: MemoryQuery) -> LayerMemory:
    """split_layer.cpp: Forward points every top's data at the bottom's (the tops' own data
    is never allocated); Backward (when propagate_down[0]) sums every top's diff into the
    bottom's, allocating the diff of a top whose consumer never wrote it."""
    tops = [read(q.top(i), "diff") for i in range(len(q.tops))]
    backward = tuple(tops[:2]) + (write(q.bottom(0), "diff"),) + tuple(tops[2:]) if q.propagate_down[0] else ()
    return LayerMemory(forward=tuple(Share(q.top(i), q.bottom(0), "data") for i in range(len(q.tops))), backward=backward)


# Recompute: split_layer.cpp Forward only points every top's data at the bottom's (ShareData).
@layer("Split", "common", bottoms=ONE, tops=AT_LEAST_ONE, source="caffe master layers/split_layer.cpp", memory=_split_memory, fork_shares=("data",), fork_shares_first_bottom=True, recompute=SHARES)
def _split(q: ShapeQuery) -> LayerShapes:
    """Every top is shaped like the bottom; none may be the bottom itself (no in-place)."""
    q.check(not any(q.layer.in_place_tops), "Split layer does not allow in-place computation")
    return LayerShapes(tops=(q.bottoms[0],) * len(q.layer.tops))


def _eltwise_memory(q: MemoryQuery) -> LayerMemory:
    """eltwise_layer.cpp: MAX keeps the winning bottom per element in the int blob
    ``max_idx_`` (shaped in Reshape, written in Forward, read in Backward).  Backward reads
    the top's data and diff, then per bottom asked for: its data and diff, and for PROD the
    other bottoms (stable_prod_grad, the default) or the top's data: only then are the top's
    values used (the first read of it just takes the pointer)."""
    param = caffe_pb2.EltwiseParameter
    op = q.proto.eltwise_param.operation
    mask = q.buffer("max_idx")
    bottoms = range(len(q.bottoms))
    forward = (write(q.top(0)),) + tuple(read(q.bottom(i)) for i in bottoms) + ((write(mask),) if op == param.MAX else ())
    backward: tuple[Action, ...] = (read(q.top(0)), read(q.top(0), "diff"))
    for i in (i for i in bottoms if q.propagate_down[i]):
        backward += (read(q.bottom(i)), write(q.bottom(i), "diff"))
        if op == param.PROD and q.proto.eltwise_param.stable_prod_grad:
            backward += tuple(read(q.bottom(j)) for j in bottoms if j != i)
        elif op == param.MAX:
            backward += (read(mask),)
    top_values_used = op == param.PROD and not q.proto.eltwise_param.stable_prod_grad
    return LayerMemory(
        setup=buffer_setup(mask, q.bottoms[0], "int") if op == param.MAX else (),
        forward=forward,
        backward=backward,
        pointer_only=() if top_values_used else (read(q.top(0)),),
    )


def _eltwise_flops(proto, shapes: LayerShapes) -> int:
    """eltwise_layer.cpp: each bottom after the first is folded into the top once per
    element (caffe_mul, caffe_axpy, or MAX's compare): bottoms - 1 operations per element."""
    return (len(proto.bottom) - 1) * elements(shapes.tops[0])


# eltwise_layer.cpp/.cu Forward: PROD, SUM (coefficients from the parameters) and MAX
# (which rewrites max_idx_ whole, the mask its Backward reads) are functions of the bottoms.
@layer("Eltwise", "common", bottoms=Arity(2), tops=ONE, source="caffe master layers/eltwise_layer.cpp", memory=_eltwise_memory, recompute=PURE_CHEAP, forward_flops=_eltwise_flops)
def _eltwise(q: ShapeQuery) -> LayerShapes:
    """PROD/SUM/MAX of same-shaped bottoms; ``coeff`` (SUM only) needs one value per bottom."""
    param = q.proto.eltwise_param
    coeffs = len(param.coeff)
    q.check(coeffs in (0, len(q.bottoms)), f"Eltwise layer takes one coefficient per bottom blob ({coeffs} given, {len(q.bottoms)} bottoms)")
    q.check(not (param.operation == caffe_pb2.EltwiseParameter.PROD and coeffs), "Eltwise layer only takes coefficients for summation")
    first = q.bottoms[0]
    for i, other in enumerate(q.bottoms[1:], start=1):
        q.check(other == first, f"bottom[0]: {format_shape(first)}, bottom[{i}]: {format_shape(other)} must have the same shape")
    return LayerShapes(tops=(first,))


def _reshape_rebatch(proto, rank: int, axis: int, batch: int):
    """reshape_layer.cpp builds the top from the bottom's axes before ``axis``, the
    ``shape`` dims, then the bottom's axes after ``axis + num_axes``: top axis ``axis``
    is spelled out when it falls among the dims and that dim is positive (0 copies the
    bottom's, -1 is inferred: both follow the bottom).  The LayerParameter with that dim
    set to ``batch``, or None."""
    param = proto.reshape_param
    start = param.axis if param.axis >= 0 else rank + param.axis + 1
    index = axis - start
    if not 0 <= index < len(param.shape.dim) or param.shape.dim[index] <= 0:
        return None
    restated = type(proto)()
    restated.CopyFrom(proto)
    restated.reshape_param.shape.dim[index] = batch
    return restated


# Recompute: reshape_layer.cpp shares the bottom's data and diff (Reshape); Forward does nothing.
@layer(
    "Reshape",
    "common",
    bottoms=ONE,
    tops=ONE,
    source="caffe master layers/reshape_layer.cpp",
    memory=_alias_memory,
    gpu="none",
    fork_shares=("data", "diff"),
    rebatch=lambda proto, rank, axis, batch: _reshape_rebatch(proto, rank, axis, batch),
    recompute=SHARES,
)
def _reshape(q: ShapeQuery) -> LayerShapes:
    """Replaces bottom axes [axis, axis+num_axes) with ``shape``: 0 copies a bottom dim, one -1 is inferred."""
    q.check(not any(q.layer.in_place_tops), "Reshape layer does not allow in-place computation")
    param = q.proto.reshape_param
    bottom = q.bottoms[0]
    new_dims = [int32(d) for d in param.shape.dim]
    q.check(new_dims.count(-1) <= 1, "new shape contains multiple -1 dims; at most a single (1) value of -1 may be specified")
    n = len(bottom)
    start = param.axis if param.axis >= 0 else n + param.axis + 1
    q.check(0 <= start <= n, f"axis {param.axis} out of range for {n}-D input blob")
    q.check(param.num_axes >= -1, "num_axes must be >= 0, or -1 for all")
    end = n if param.num_axes == -1 else start + param.num_axes
    q.check(end <= n, f"end_axis = axis + num_axes = {end} is out of range for {n}-D input blob")
    top = list(bottom[:start]) + new_dims + list(bottom[end:])
    for i, d in enumerate(new_dims):
        if d == 0:
            q.check(start + i < n, "new shape contains a 0, but there was no corresponding bottom axis to copy")
            top[start + i] = bottom[start + i]
    if -1 in new_dims:
        inferred = start + new_dims.index(-1)
        known = 1
        for i, d in enumerate(top):
            if i != inferred:
                known *= d
        total = count(q, bottom)
        q.check(known != 0 and total % known == 0, f"bottom count ({total}) must be divisible by the product of the specified dimensions ({known})")
        top[inferred] = total // known
    shape = reshaped(q, top)
    q.check(count(q, shape) == count(q, bottom), f"output count must match input count: {format_shape(shape)} vs bottom {format_shape(bottom)}")
    return LayerShapes(tops=(shape,))


def _flatten_memory(q: MemoryQuery) -> LayerMemory:
    """flatten_layer.cpp: Forward points the top's data at the bottom's; Backward points the
    bottom's diff at the top's (the bottom's own diff, if allocated, is freed)."""
    return LayerMemory(forward=(Share(q.top(0), q.bottom(0), "data"),), backward=(Share(q.bottom(0), q.top(0), "diff"),))


# Recompute: flatten_layer.cpp Forward only points the top's data at the bottom's (ShareData).
@layer(
    "Flatten",
    "common",
    bottoms=ONE,
    tops=ONE,
    source="caffe master layers/flatten_layer.cpp",
    memory=_flatten_memory,
    gpu="none",
    fork_shares=("data", "diff"),
    recompute=SHARES,
)
def _flatten(q: ShapeQuery) -> LayerShapes:
    """Collapses axes [axis, end_axis] into one (not in place)."""
    q.check(not any(q.layer.in_place_tops), "Flatten layer does not allow in-place computation")
    param = q.proto.flatten_param
    bottom = q.bottoms[0]
    start = axis_index(q, bottom, param.axis)
    end = axis_index(q, bottom, param.end_axis, "end_axis")
    flat = count(q, bottom, start, end + 1)
    return LayerShapes(tops=(reshaped(q, bottom[:start] + (flat,) + bottom[end + 1 :]),))


def _reduction_memory(q: MemoryQuery) -> LayerMemory:
    """reduction_layer.cpp: SUM and MEAN dot with ``sum_multiplier_`` [count from axis], which
    Reshape writes with ones; ASUM and SUMSQ read the bottom again in Backward."""
    param = caffe_pb2.ReductionParameter
    summed = q.proto.reduction_param.operation in (param.SUM, param.MEAN)
    size = elements(q.bottoms[0][len(q.tops[0]) :])  # the top keeps the dims before axis
    ones = q.buffer("sum_multiplier")
    forward = (read(q.bottom(0)),) + ((read(ones),) if summed and size else ()) + (write(q.top(0)),)
    backward: tuple[Action, ...] = ()
    if q.propagate_down[0]:
        backward = (() if summed else (read(q.bottom(0)),)) + (read(q.top(0), "diff"), write(q.bottom(0), "diff"))
    return LayerMemory(setup=buffer_setup(ones, (size,), filled=True) if summed else (), forward=forward, backward=backward)


# Recompute: reduction_layer.cpp/.cu Forward: a sum (dot, asum) per output, no matrix product.
@layer("Reduction", "common", bottoms=ONE, tops=ONE, source="caffe master layers/reduction_layer.cpp", memory=_reduction_memory, recompute=PURE_CHEAP)
def _reduction(q: ShapeQuery) -> LayerShapes:
    """Reduces every axis from ``axis`` on: the top keeps the bottom's first ``axis`` dims."""
    bottom = q.bottoms[0]
    axis = axis_index(q, bottom, q.proto.reduction_param.axis)
    return LayerShapes(tops=(bottom[:axis],))


# Recompute: tile_layer.cpp/.cu Forward copies the bottom.
@layer("Tile", "common", bottoms=ONE, tops=ONE, source="caffe master layers/tile_layer.cpp", memory=neuron_memory(), recompute=PURE_CHEAP)
def _tile(q: ShapeQuery) -> LayerShapes:
    """Repeats the bottom ``tiles`` times along ``axis`` (tiles is required, > 0)."""
    param = q.proto.tile_param
    bottom = q.bottoms[0]
    axis = axis_index(q, bottom, param.axis)
    q.check(param.HasField("tiles"), "number of tiles must be specified")
    q.check(param.tiles > 0, f"number of tiles must be positive (got {param.tiles})")
    return LayerShapes(tops=(reshaped(q, _with_dim(bottom, axis, bottom[axis] * param.tiles)),))


def _embed_memory(q: MemoryQuery) -> LayerMemory:
    """embed_layer.cpp: like InnerProduct with M = count(bottom); Backward CHECKs that the
    bottom (indices) needs no gradient."""
    return _weights_memory(q, elements(q.bottoms[0]), False)


def _embed_flops(proto, shapes: LayerShapes) -> int:
    """embed_layer.cpp Forward: one weight row copied per index (a value per top element),
    then the bias added through a gemm with K = 1 (one more per element)."""
    return elements(shapes.tops[0]) * (2 if len(shapes.params) > 1 else 1)


# embed_layer.cpp/.cu: a gather of weight rows (a function of the indices and the weights);
# counted with the weighted layers, not cheap, as MXNet's mirror leaves Embedding out.
@layer("Embed", "common", bottoms=ONE, tops=ONE, source="caffe master layers/embed_layer.cpp", memory=_embed_memory, recompute=PURE, forward_flops=_embed_flops)
def _embed(q: ShapeQuery) -> LayerShapes:
    """Looks up each bottom value (an index < input_dim) in a [input_dim, num_output] table.

    The top is the bottom's shape plus a trailing num_output axis; bias [num_output] when bias_term.
    """
    param = q.proto.embed_param
    n = int32(param.num_output)
    k = int32(param.input_dim)
    q.check(n > 0, "Embed num_output must be positive")
    q.check(k > 0, "Embed input_dim must be positive")
    weight = reshaped(q, (k, n), "weight")
    params: tuple[Shape, ...] = (weight, (n,)) if param.bias_term else (weight,)
    return LayerShapes(tops=(reshaped(q, q.bottoms[0] + (n,)),), params=params)


# Recompute: argmax_layer.cpp Forward: a std::partial_sort per item, from the bottom alone.
@layer("ArgMax", "common", bottoms=ONE, tops=ONE, source="caffe master layers/argmax_layer.cpp", memory=forward_only_memory, gpu="none", recompute=PURE_CHEAP)
def _argmax(q: ShapeQuery) -> LayerShapes:
    """With ``axis``: the bottom's shape with that axis set to top_k.

    Without: the top has max(3, bottom axes) axes, all 1 except num, top_k at axis 2 and
    2 at axis 1 when out_max_val (index and value).
    """
    param = q.proto.argmax_param
    bottom = q.bottoms[0]
    top_k = param.top_k
    q.check(top_k >= 1, "top_k must not be less than 1")
    if param.HasField("axis"):
        axis = axis_index(q, bottom, param.axis)
        q.check(top_k <= bottom[axis], f"top_k ({top_k}) must be less than or equal to the dimension of axis {axis} ({bottom[axis]})")
        return LayerShapes(tops=(_with_dim(bottom, axis, top_k),))
    per_item = count(q, bottom, 1)
    q.check(top_k <= per_item, f"top_k ({top_k}) must be less than or equal to the dimension of the flattened bottom blob per instance ({per_item})")
    shape = [1] * max(3, len(bottom))
    shape[0] = dim(q, bottom, 0)
    shape[2] = top_k
    if param.out_max_val:
        shape[1] = 2
    return LayerShapes(tops=(reshaped(q, shape),))


def _batch_reindex_memory(q: MemoryQuery) -> LayerMemory:
    """batch_reindex_layer.cpp: Forward checks the indices (bottom[1]) and, unless the top
    is empty, gathers bottom[0]; Backward (when propagate_down[0]) scatters the top's diff."""
    forward = (read(q.bottom(1)),) + ((read(q.bottom(0)), write(q.top(0))) if elements(q.tops[0]) else ())
    backward = (write(q.bottom(0), "diff"), read(q.bottom(1)), read(q.top(0), "diff")) if q.propagate_down[0] else ()
    return LayerMemory(forward=forward, backward=backward)


# Recompute: batch_reindex_layer.cpp/.cu Forward copies the items the permutation bottom names.
@layer(
    "BatchReindex",
    "common",
    bottoms=Arity.exactly(2),
    tops=ONE,
    source="caffe master layers/batch_reindex_layer.cpp",
    memory=_batch_reindex_memory,
    recompute=PURE_CHEAP,
)
def _batch_reindex(q: ShapeQuery) -> LayerShapes:
    """Gathers bottom[0] items by the 1-D index blob bottom[1]: the top's num is bottom[1]'s length."""
    data, index = q.bottoms
    q.check(len(index) == 1, f"the index blob (bottom[1]) must have 1 axis, got {format_shape(index)}")
    return LayerShapes(tops=((index[0],) + data[1:],))


def _filter_memory(q: MemoryQuery) -> LayerMemory:
    """filter_layer.cpp: Reshape reads the selector (the last bottom) at SetUp already, and
    again in every Forward.  As for the shapes, every item is taken to pass: Backward then
    writes each asked-for bottom's diff and reads (mutable_cpu_diff) its top's."""
    selector = read(q.bottom(len(q.bottoms) - 1))
    tops = range(len(q.tops))
    forward = (selector,) + tuple(t for i in tops for t in (read(q.bottom(i)), write(q.top(i))))
    backward = tuple(t for i in tops if q.propagate_down[i] and q.bottoms[i][0] for t in (write(q.bottom(i), "diff"), write(q.top(i), "diff")))
    return LayerMemory(setup=(selector,), forward=forward, backward=backward)


# Recompute: filter_layer.cpp/.cu Forward copies the items the selector passes (counted in Reshape).
@layer("Filter", "common", bottoms=Arity(2), tops=AT_LEAST_ONE, source="caffe master layers/filter_layer.cpp", memory=_filter_memory, recompute=PURE_CHEAP)
def _filter(q: ShapeQuery) -> LayerShapes:
    """Forwards the items of bottoms[:-1] whose selector (last bottom) is non-zero.

    How many pass depends on the data; at setup Caffe shapes every top with bottom[0]'s
    num (its first Reshape), which is also the upper bound, and that is what we report.
    """
    q.check(len(q.layer.tops) == len(q.bottoms) - 1, f"Filter needs one top per filtered bottom: {len(q.bottoms) - 1} expected, {len(q.layer.tops)} given")
    selector = q.bottoms[-1]
    num = dim(q, selector, 0)
    q.check(all(d == 1 for d in selector[1:]), f"selector blob dimensions must be singletons (1), except the first: {format_shape(selector)}")
    for i, bottom in enumerate(q.bottoms[:-1]):
        q.check(dim(q, bottom, 0) == num, f"bottom[{i}] {format_shape(bottom)} must have the selector's first dimension ({num})")
    first_num = q.bottoms[0][0]
    return LayerShapes(tops=tuple((first_num,) + bottom[1:] for bottom in q.bottoms[: len(q.layer.tops)]))


def _parameter_memory(q: MemoryQuery) -> LayerMemory:
    """parameter_layer.hpp: LayerSetUp only reshapes its blob (no filler: its data is first
    allocated by whoever reads it); Forward points the top's data and diff at the blob's."""
    share = (Share(q.top(0), q.param(0), "data"), Share(q.top(0), q.param(0), "diff"))
    return LayerMemory(forward=share, params_filled=False)


# parameter_layer.hpp: Forward only points the top at blob 0.
_PARAMETER_RECOMPUTE = always(Recompute(True, "its top shares its parameter blob: a second Forward writes nothing", cheap=True))


@layer(
    "Parameter",
    "common",
    bottoms=Arity.exactly(0),
    tops=ONE,
    source="caffe master include/caffe/layers/parameter_layer.hpp",
    memory=_parameter_memory,
    gpu="none",
    recompute=_PARAMETER_RECOMPUTE,
)
def _parameter(q: ShapeQuery) -> LayerShapes:
    """Exposes one learned blob of parameter_param.shape as its top (same shape, separate blob)."""
    shape = reshaped(q, (int32(d) for d in q.proto.parameter_param.shape.dim), "parameter")
    return LayerShapes(tops=(shape,), params=(shape,))


def _silence_memory(q: MemoryQuery) -> LayerMemory:
    """silence_layer.cpp: Forward does nothing; Backward zeroes the diffs it is asked for."""
    return LayerMemory(backward=tuple(write(q.bottom(i), "diff") for i, down in enumerate(q.propagate_down) if down))


# Recompute: silence_layer.cpp has no tops.
@layer(
    "Silence",
    "common",
    bottoms=AT_LEAST_ONE,
    tops=Arity.exactly(0),
    source="caffe master layers/silence_layer.cpp",
    memory=_silence_memory,
    recompute=never("it has no tops: its Forward writes nothing"),
)
def _silence(q: ShapeQuery) -> LayerShapes:
    """Consumes its bottoms so they are not net outputs; it has no tops."""
    return LayerShapes(tops=())


"""Common layers: fully connected, blob plumbing (concat, slice, reshape...) and reductions.

Each rule follows the Reshape (and LayerSetUp) of the Caffe master file it cites, CHECKs
included, so a net Caffe refuses is refused here with the same reason.
"""

from __future__ import annotations

from ..graph import LayerShapes, Shape
from ..schema import caffe_pb2
from .blob import axis_index, count, dim, format_shape, int32, reshaped
from .registry import Arity, ShapeQuery, layer

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


@layer("InnerProduct", "common", bottoms=ONE, tops=ONE, source="caffe master layers/inner_product_layer.cpp")
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


@layer("Concat", "common", bottoms=AT_LEAST_ONE, tops=ONE, source="caffe master layers/concat_layer.cpp")
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


@layer("Slice", "common", bottoms=ONE, tops=AT_LEAST_ONE, source="caffe master layers/slice_layer.cpp")
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


@layer("Split", "common", bottoms=ONE, tops=AT_LEAST_ONE, source="caffe master layers/split_layer.cpp")
def _split(q: ShapeQuery) -> LayerShapes:
    """Every top is shaped like the bottom; none may be the bottom itself (no in-place)."""
    q.check(not any(q.layer.in_place_tops), "Split layer does not allow in-place computation")
    return LayerShapes(tops=(q.bottoms[0],) * len(q.layer.tops))


@layer("Eltwise", "common", bottoms=Arity(2), tops=ONE, source="caffe master layers/eltwise_layer.cpp")
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


@layer("Reshape", "common", bottoms=ONE, tops=ONE, source="caffe master layers/reshape_layer.cpp")
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


@layer("Flatten", "common", bottoms=ONE, tops=ONE, source="caffe master layers/flatten_layer.cpp")
def _flatten(q: ShapeQuery) -> LayerShapes:
    """Collapses axes [axis, end_axis] into one (not in place)."""
    q.check(not any(q.layer.in_place_tops), "Flatten layer does not allow in-place computation")
    param = q.proto.flatten_param
    bottom = q.bottoms[0]
    start = axis_index(q, bottom, param.axis)
    end = axis_index(q, bottom, param.end_axis, "end_axis")
    flat = count(q, bottom, start, end + 1)
    return LayerShapes(tops=(reshaped(q, bottom[:start] + (flat,) + bottom[end + 1 :]),))


@layer("Reduction", "common", bottoms=ONE, tops=ONE, source="caffe master layers/reduction_layer.cpp")
def _reduction(q: ShapeQuery) -> LayerShapes:
    """Reduces every axis from ``axis`` on: the top keeps the bottom's first ``axis`` dims."""
    bottom = q.bottoms[0]
    axis = axis_index(q, bottom, q.proto.reduction_param.axis)
    return LayerShapes(tops=(bottom[:axis],))


@layer("Tile", "common", bottoms=ONE, tops=ONE, source="caffe master layers/tile_layer.cpp")
def _tile(q: ShapeQuery) -> LayerShapes:
    """Repeats the bottom ``tiles`` times along ``axis`` (tiles is required, > 0)."""
    param = q.proto.tile_param
    bottom = q.bottoms[0]
    axis = axis_index(q, bottom, param.axis)
    q.check(param.HasField("tiles"), "number of tiles must be specified")
    q.check(param.tiles > 0, f"number of tiles must be positive (got {param.tiles})")
    return LayerShapes(tops=(reshaped(q, _with_dim(bottom, axis, bottom[axis] * param.tiles)),))


@layer("Embed", "common", bottoms=ONE, tops=ONE, source="caffe master layers/embed_layer.cpp")
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


@layer("ArgMax", "common", bottoms=ONE, tops=ONE, source="caffe master layers/argmax_layer.cpp")
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


@layer("BatchReindex", "common", bottoms=Arity.exactly(2), tops=ONE, source="caffe master layers/batch_reindex_layer.cpp")
def _batch_reindex(q: ShapeQuery) -> LayerShapes:
    """Gathers bottom[0] items by the 1-D index blob bottom[1]: the top's num is bottom[1]'s length."""
    data, index = q.bottoms
    q.check(len(index) == 1, f"the index blob (bottom[1]) must have 1 axis, got {format_shape(index)}")
    return LayerShapes(tops=((index[0],) + data[1:],))


@layer("Filter", "common", bottoms=Arity(2), tops=AT_LEAST_ONE, source="caffe master layers/filter_layer.cpp")
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


@layer("Parameter", "common", bottoms=Arity.exactly(0), tops=ONE, source="caffe master include/caffe/layers/parameter_layer.hpp")
def _parameter(q: ShapeQuery) -> LayerShapes:
    """Exposes one learned blob of parameter_param.shape as its top (same shape, separate blob)."""
    shape = reshaped(q, (int32(d) for d in q.proto.parameter_param.shape.dim), "parameter")
    return LayerShapes(tops=(shape,), params=(shape,))


@layer("Silence", "common", bottoms=AT_LEAST_ONE, tops=Arity.exactly(0), source="caffe master layers/silence_layer.cpp")
def _silence(q: ShapeQuery) -> LayerShapes:
    """Consumes its bottoms so they are not net outputs; it has no tops."""
    return LayerShapes(tops=())


"""Caffe's ``Blob`` shape arithmetic, with the CHECKs that guard it (include/caffe/blob.hpp, src/caffe/blob.cpp).

Many layers' rules are a line or two of shape code calling ``CanonicalAxisIndex``,
``count(start, end)``, the legacy ``num()/channels()/height()/width()`` accessors or
``Reshape``; each of those CHECKs its arguments, and a net that violates one is refused by
Caffe.  Keeping them here lets every family reproduce both the arithmetic and the refusal.
"""

from __future__ import annotations

import math
import struct
from typing import Any, Iterable

from google.protobuf.descriptor import FieldDescriptor

from caffemem.errors import CaffememError
from caffemem.graph import Shape
from caffemem.graph import count as element_count
from caffemem.layers.registry import ShapeQuery
from caffemem.schema import is_repeated

MAX_BLOB_AXES = 32  # kMaxBlobAxes in blob.hpp
INT_MAX = 2**31 - 1
# An axis given as `_` in --input: the file's own value (never a dimension: those are >= 0).
FROM_FILE = -1


def axis_index(q: ShapeQuery, shape: Shape, axis: int, what: str = "axis") -> int:
    """Blob::CanonicalAxisIndex: ``axis`` in [-n, n) for an n-axis blob, negatives from the end."""
    n = len(shape)
    q.check(-n <= axis < n, f"{what} {axis} out of range for {n}-D blob with shape {format_shape(shape)}")
    return axis + n if axis < 0 else axis


def dim(q: ShapeQuery, shape: Shape, index: int) -> int:
    """Blob::shape(index): one dimension, through CanonicalAxisIndex."""
    return shape[axis_index(q, shape, index)]


def count(q: ShapeQuery, shape: Shape, start: int = 0, end: int | None = None) -> int:
    """Blob::count(start, end): product of dims in [start, end), CHECKing the range."""
    stop = len(shape) if end is None else end
    q.check(
        0 <= start <= stop <= len(shape),
        f"axis range [{start}, {stop}) is invalid for {len(shape)}-D blob with shape {format_shape(shape)}",
    )
    total = 1
    for d in shape[start:stop]:
        total *= d
    return total


def legacy_dim(q: ShapeQuery, shape: Shape, index: int) -> int:
    """Blob::LegacyShape (num/channels/height/width): missing axes of a <=4-D blob read as 1."""
    q.check(len(shape) <= 4, f"cannot use legacy accessors (num/channels/height/width) on blob {format_shape(shape)} with more than 4 axes")
    if index >= len(shape) or index < -len(shape):
        return 1
    return shape[index]


def legacy4(q: ShapeQuery, shape: Shape) -> Shape:
    """(num, channels, height, width) of a blob, as a layer that calls Reshape(n, c, h, w) sees it."""
    return tuple(legacy_dim(q, shape, i) for i in range(4))


def reshaped(q: ShapeQuery, dims: Iterable[int], blob: str = "top") -> Shape:
    """Blob::Reshape: at most 32 axes, no negative dim, count within INT_MAX."""
    shape = tuple(int(d) for d in dims)
    q.check(len(shape) <= MAX_BLOB_AXES, f"{blob} blob would have {len(shape)} axes; Caffe allows at most {MAX_BLOB_AXES}")
    total = 1
    for d in shape:
        q.check(d >= 0, f"{blob} blob shape {format_shape(shape)} has a negative dimension")
        if total != 0:
            q.check(d <= INT_MAX // total, f"{blob} blob shape {format_shape(shape)} exceeds INT_MAX elements")
        total *= d
    return shape


def format_shape(shape: Shape) -> str:
    """Caffe's shape_string: ``2 3 4 (24)``."""
    return " ".join(str(d) for d in shape) + f" ({element_count(shape)})"


# uint32 fields Caffe really reads as unsigned (data_layer.cpp: `unsigned int skip =
# caffe_rng_rand() % rand_skip`); every other integer of a layer lands in an `int`.
UNSIGNED_IN_CAFFE = frozenset({"rand_skip"})
_WIDE_INTS = frozenset({FieldDescriptor.TYPE_UINT32, FieldDescriptor.TYPE_UINT64, FieldDescriptor.TYPE_INT64, FieldDescriptor.TYPE_FIXED32, FieldDescriptor.TYPE_FIXED64})


def int_overflow(message: Any, path: str = "") -> tuple[str, int] | None:
    """The first integer field of a layer's parameters that Caffe would wrap when it reads
    it into an ``int`` (``stride: 4294967295`` becomes -1), as (field path, value)."""
    for field, value in message.ListFields():
        name = f"{path}{field.name}"
        if field.type == FieldDescriptor.TYPE_MESSAGE:
            for item in value if is_repeated(field) else (value,):
                found = int_overflow(item, name + ".")
                if found:
                    return found
        elif field.type in _WIDE_INTS and field.name not in UNSIGNED_IN_CAFFE:
            for item in value if is_repeated(field) else (value,):
                if not -(2**31) <= item <= INT_MAX:
                    return name, item
    return None


def int32(value: int) -> int:
    """A uint32/int64 proto field read into Caffe's ``int``.  A value outside it is refused:
    Caffe would silently wrap it (a dim of 2^40 becomes 0), so no figure for it is true."""
    if not -(2**31) <= value <= INT_MAX:
        raise CaffememError(f"{value} does not fit Caffe's 32-bit int (Caffe would silently wrap it to {int32_wrapped(value)})")
    return value


def int32_wrapped(value: int) -> int:
    """What a C++ ``int`` holds after ``int x = value`` (two's complement, low 32 bits)."""
    return (value & 0xFFFFFFFF) - (2**32 if value & 0x80000000 else 0)


def float32(value: float) -> float:
    """A double stored in a C++ ``float``: rounded to float32; beyond its range ±inf, as the
    conversion gives on every platform Caffe runs on (Python's struct would raise)."""
    try:
        return struct.unpack("f", struct.pack("f", value))[0]
    except OverflowError:
        return math.copysign(math.inf, value)


def c_divide(numerator: float, denominator: float) -> float:
    """``numerator / denominator`` on C++ doubles: dividing by zero gives ±inf or nan, not an exception."""
    if denominator:
        return numerator / denominator
    return math.nan if numerator == 0 or math.isnan(numerator) else math.copysign(math.inf, numerator) * math.copysign(1.0, denominator)


def with_batch(given: Shape, template: tuple[int | str, ...]) -> Shape:
    """``--input data=3,224,224`` (no batch) on a layer whose batch is known (a Data
    layer's batch_size, an Input layer's first dim): that batch in front, so a train_val
    file's TRAIN and TEST nets each keep their own.  A full shape is taken as given."""
    if "..." not in template and len(given) == len(template) - 1 and template and isinstance(template[0], int):
        return (template[0],) + tuple(given)
    return tuple(given)

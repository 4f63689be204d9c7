"""The one graph every pass reads and extends.

A net moves through the pipeline as protobuf messages until filtering is done (the
passes that mirror Caffe's own proto-level code: load, upgrade, filter), then as a
:class:`Graph` of :class:`Layer` records (split insertion onwards), so later passes deal
with names and shapes, never with protobuf plumbing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

Shape = tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Layer:
    """One layer as Caffe will construct it, in execution order."""

    index: int
    name: str
    type: str
    bottoms: tuple[str, ...]
    tops: tuple[str, ...]
    proto: Any  # caffe_pb2.LayerParameter; Any keeps this module free of protobuf
    line: int | None = None
    inserted: bool = False  # a Split layer caffemem (like Caffe) added

    @property
    def in_place_tops(self) -> tuple[bool, ...]:
        """For each top: is it the same blob as the bottom at that index (Caffe's in-place)?"""
        return tuple(i < len(self.bottoms) and self.bottoms[i] == top for i, top in enumerate(self.tops))

    def loss_weights(self) -> tuple[float, ...]:
        """The proto's loss_weight list (Caffe's defaults for loss layers come from the spec)."""
        return tuple(self.proto.loss_weight)


@dataclass(frozen=True)
class Graph:
    """A net after filtering and split insertion: what Net::Init sees."""

    name: str
    source: str
    phase: str
    layers: tuple[Layer, ...]
    proto: Any  # caffe_pb2.NetParameter after filtering (without splits)
    force_backward: bool = False
    notes: tuple[str, ...] = ()

    def layer(self, name: str) -> Layer:
        for layer in self.layers:
            if layer.name == name:
                return layer
        raise KeyError(name)


@dataclass(frozen=True, slots=True)
class LayerShapes:
    """What a shape rule computes for one layer: its tops' and its parameters' shapes."""

    tops: tuple[Shape, ...]
    params: tuple[Shape, ...] = ()
    # A data layer's tops whose first axis is not the batch (SSD's box label, 1 x 1 x N x 8):
    # --batch leaves them as they are.
    unbatched: frozenset[int] = frozenset()


@dataclass(frozen=True)
class ShapedGraph:
    """A graph with every blob's shape, in Caffe's blob order (first creation)."""

    graph: Graph
    blob_shapes: dict[str, Shape]
    layer_shapes: tuple[LayerShapes, ...]  # parallel to graph.layers
    notes: tuple[str, ...] = field(default=())

    def top_shapes(self, layer_index: int) -> tuple[Shape, ...]:
        return self.layer_shapes[layer_index].tops

    def bottom_shapes(self, layer_index: int) -> tuple[Shape, ...]:
        return tuple(self.blob_shapes[b] for b in self.graph.layers[layer_index].bottoms)


def count(shape: Shape) -> int:
    """Number of elements, as Blob::count() (an empty shape is a scalar: 1)."""
    total = 1
    for dim in shape:
        total *= dim
    return total

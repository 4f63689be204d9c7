"""Pass 5, shapes: every blob's and parameter's shape, layer by layer, as Net::Init does.

Entry point: :func:`infer_shapes`.  Each layer's own rule comes from the layer registry;
this pass only walks the graph in order, checks blob counts (Layer::CheckBlobCounts) and
sizes (Blob::Reshape), and gathers every data blob the user still has to give a shape
for, so one message can list them all.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping

from caffemem.errors import CaffememError, Location, NeedsInput
from caffemem.graph import Graph, Layer, LayerShapes, Shape, ShapedGraph, count
from caffemem.layers.blob import (  # Blob::Reshape's CHECKs on every blob
    INT_MAX,
    MAX_BLOB_AXES,
    int32_wrapped,
    int_overflow,
)
from caffemem.layers.registry import LayerSpec, ShapeQuery, SpecTable


def infer_shapes(
    graph: Graph,
    specs: SpecTable,
    inputs: Mapping[str, Shape] | None = None,
    stored_params: Mapping[str, tuple[Shape, ...]] | None = None,
    batch: int | None = None,
) -> ShapedGraph:
    """Shapes for a wired graph; raises CaffememError naming the layer at fault.

    ``batch`` replaces the first axis of every data layer's tops (``--batch``)."""
    inputs = dict(inputs or {})
    blob_shapes: dict[str, Shape] = {}
    layer_shapes: list[LayerShapes] = []
    missing: list[tuple[str, Layer, str]] = []
    unknown: set[str] = set()
    notes: list[str] = []
    data_tops: set[str] = set()
    time_major = _time_major_blobs(graph, specs) if batch is not None else set()
    net_types = frozenset(layer.type for layer in graph.layers)

    for layer in graph.layers:
        spec = _spec_for(layer, specs, graph.source)
        _check_counts(layer, spec, graph.source)
        if spec.is_data:
            data_tops.update(layer.tops)
        if any(b in unknown for b in layer.bottoms):
            unknown.update(layer.tops)
            layer_shapes.append(LayerShapes(tops=()))
            continue
        overflow = int_overflow(layer.proto)
        if overflow is not None:
            field, value = overflow
            raise CaffememError(f"{field}: {value} does not fit Caffe's 32-bit int (Caffe would silently wrap it to {int32_wrapped(value)})", _where(layer, graph.source))
        query = ShapeQuery(layer, tuple(blob_shapes[b] for b in layer.bottoms), graph.phase, inputs, net_types)
        try:
            result = spec.shape(query)
        except NeedsInput as need:
            missing.extend((blob, layer, need.hint) for blob in need.blobs)
            unknown.update(layer.tops)
            layer_shapes.append(LayerShapes(tops=()))
            continue
        except CaffememError as error:
            raise error.at(file=graph.source, line=layer.line, layer=layer.name, layer_type=layer.type) from None
        except (ArithmeticError, IndexError, KeyError, TypeError, ValueError) as error:
            raise CaffememError(f"cannot infer this layer's shapes from its parameters ({type(error).__name__}: {error})", _where(layer, graph.source)) from None
        result = _with_stored_params(layer, result, stored_params, notes, graph.source)
        if batch is not None and spec.is_data:
            result = LayerShapes(tuple(_with_batch(s, batch, 1 if top in time_major and len(s) >= 2 else 0) for top, s in zip(layer.tops, result.tops)), result.params)
        _check_result(layer, result, graph.source)
        _check_in_place(layer, query.bottoms, result, graph.source)
        for top, shape in zip(layer.tops, result.tops):
            blob_shapes[top] = shape
        layer_shapes.append(result)

    _check_inputs_used(inputs, data_tops, graph)
    if missing:
        first = missing[0][1]  # located at the first layer that needs a shape
        raise CaffememError(_missing_message(missing), Location.of_layer(first, graph.source))
    return ShapedGraph(graph, blob_shapes, tuple(layer_shapes), tuple(notes))


def _time_major_blobs(graph: Graph, specs: SpecTable) -> set[str]:
    """Blobs some layer reads time first (T x N x ...): --batch scales their axis 1."""
    blobs: set[str] = set()
    for layer in graph.layers:
        spec = specs.get(layer.type)
        if spec is not None and spec.time_major_bottoms is not None:
            blobs.update(layer.bottoms[i] for i in spec.time_major_bottoms(layer.proto, len(layer.bottoms)))
    return blobs


def _with_batch(shape: Shape, batch: int, axis: int) -> Shape:
    """``shape`` with its batch axis set to ``batch`` (a scalar top stays as it is)."""
    return shape[:axis] + (batch,) + shape[axis + 1 :] if len(shape) > axis else shape


def _where(layer: Layer, file: str) -> Location:
    return Location.of_layer(layer, file)


def _spec_for(layer: Layer, specs: SpecTable, file: str) -> LayerSpec:
    spec = specs.get(layer.type)
    if spec is not None:
        return spec
    close = difflib.get_close_matches(layer.type, specs.types(), n=3)
    hint = f" (did you mean {', '.join(close)}?)" if close else ""
    raise CaffememError(
        f"unknown layer type '{layer.type}'{hint}; describe it in a file passed with --layers "
        "(see README: 'Custom layers')",
        _where(layer, file),
    )


def _check_counts(layer: Layer, spec: LayerSpec, file: str) -> None:
    """Layer::CheckBlobCounts, worded for the user."""
    if not spec.bottoms.accepts(len(layer.bottoms)):
        raise CaffememError(f"{spec.type} takes {spec.bottoms.describe()} bottom blob(s), this layer has {len(layer.bottoms)}", _where(layer, file))
    if not spec.tops.accepts(len(layer.tops)):
        raise CaffememError(f"{spec.type} gives {spec.tops.describe()} top blob(s), this layer names {len(layer.tops)}", _where(layer, file))


def _check_result(layer: Layer, result: LayerShapes, file: str) -> None:
    if len(result.tops) != len(layer.tops):
        raise CaffememError(f"gives {len(result.tops)} top shapes for {len(layer.tops)} tops", _where(layer, file))
    for name, shape in list(zip(layer.tops, result.tops)) + [(f"parameter {i}", s) for i, s in enumerate(result.params)]:
        if len(shape) > MAX_BLOB_AXES:
            raise CaffememError(f"{name} would have {len(shape)} axes; Caffe allows at most {MAX_BLOB_AXES} per blob", _where(layer, file))
        if any(d < 0 for d in shape):
            raise CaffememError(f"{name} would have a negative dimension {list(shape)}: the input is too small for this layer's parameters", _where(layer, file))
        if count(shape) > INT_MAX:
            raise CaffememError(f"{name} of shape {list(shape)} has {count(shape)} elements, more than Caffe's limit of {INT_MAX} per blob", _where(layer, file))


def _check_in_place(layer: Layer, bottoms: tuple[Shape, ...], result: LayerShapes, file: str) -> None:
    """In place, top i and bottom i are one blob with one shape: a layer that would give it
    another shape reshapes it under every layer that reads it, which Caffe never models."""
    for i, (top, in_place) in enumerate(zip(layer.tops, layer.in_place_tops)):
        if in_place and result.tops[i] != bottoms[i]:
            raise CaffememError(
                f"works in place on '{top}' but would reshape it from {list(bottoms[i])} to {list(result.tops[i])}: give the top a name of its own",
                _where(layer, file),
            )


def _with_stored_params(layer: Layer, result: LayerShapes, stored: Mapping[str, tuple[Shape, ...]] | None, notes: list[str], file: str) -> LayerShapes:
    """A .caffemodel's stored parameter shapes are what Caffe would load: keep them, note a
    mismatch of shapes; a different number of blobs is refused."""
    if not stored or layer.name not in stored:
        return result
    shapes = stored[layer.name]
    if len(shapes) != len(result.params):  # Caffe refuses ("Incorrect number of weight blobs") or reads past the end
        raise CaffememError(
            f"the binary file stores {len(shapes)} parameter blob(s) for this layer, but a {layer.type} layer with these parameters has {len(result.params)}",
            _where(layer, file),
        )
    if shapes != result.params:
        notes.append(f"layer '{layer.name}': stored parameter shapes {[list(s) for s in shapes]} differ from the definition's {[list(s) for s in result.params]}; using the stored ones")
    return LayerShapes(result.tops, shapes)


def _check_inputs_used(inputs: Mapping[str, Shape], data_tops: set[str], graph: Graph) -> None:
    for name in inputs:
        if name not in data_tops:
            produced = any(name in layer.tops for layer in graph.layers)
            reason = "it is computed by a layer, not read from data" if produced else "no layer in this phase produces it"
            raise CaffememError(f"--input {name}: {reason}; --input gives the shapes of data-layer tops only", Location(file=graph.source))


def _missing_message(missing: list[tuple[str, Layer, str]]) -> str:
    parts = [f"'{blob}' (layer '{layer.name}', {layer.type}{', line ' + str(layer.line) if layer.line else ''})" for blob, layer, _ in missing]
    hints = sorted({hint for _, _, hint in missing if hint})
    example = " ".join(f"--input {blob}=N,C,H,W" if i == 0 else f"--input {blob}=..." for i, (blob, _, _) in enumerate(missing[:2]))
    message = f"the file does not tell the shape of {len(missing)} data blob(s): {', '.join(parts)}; give them with {example}"
    if hints:
        message += " (" + "; ".join(hints) + ")"
    return message

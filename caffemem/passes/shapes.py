"""Pass 5, shapes: every blob's and parameter's shape, layer by layer, as Net::Init does.

Entry point: :func:`infer_shapes`.  Each layer's own rule comes from the layer registry;
this pass only walks the graph in order, checks blob counts (Layer::CheckBlobCounts) and
sizes (Blob::Reshape), and gathers every data blob the user still has to give a shape
for, so one message can list them all.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from caffemem.errors import CaffememError, Location, NeedsInput, NoShapeRule
from caffemem.graph import Graph, Layer, LayerShapes, Shape, ShapedGraph, count
from caffemem.layers.blob import (  # Blob::Reshape's CHECKs on every blob
    FROM_FILE,
    INT_MAX,
    MAX_BLOB_AXES,
    int32_wrapped,
    int_overflow,
)
from caffemem.layers.declarative import layer_skeleton
from caffemem.layers.pylayers import known_note
from caffemem.layers.registry import LayerSpec, ShapeQuery, SpecTable
from caffemem.passes.sources import Sources, provenance
from caffemem.schema.forks import fork_defining


def infer_shapes(
    graph: Graph,
    specs: SpecTable,
    inputs: Mapping[str, Shape] | None = None,
    stored_params: Mapping[str, tuple[Shape, ...]] | None = None,
    batch: int | None = None,
    overrides: frozenset[str] = frozenset(),
    sources: Sources | None = None,
) -> ShapedGraph:
    """Shapes for a wired graph; raises CaffememError naming the layer at fault.

    ``sources`` (pass 4b, :func:`~caffemem.passes.sources.read_sources`) holds the first
    record of each data layer's source, which its rule sizes the tops from; a note says
    where each such shape came from.  ``inputs`` fill what the data layers and their
    sources leave open; those named in ``overrides`` (``--override-input``) replace what
    the file states, each noted with the file's shapes.

    ``batch`` replaces the batch of every data layer's tops (``--batch``): their first
    axis, or where a recurrent net puts it (see :func:`batch_axes`)."""
    inputs = dict(inputs or {})
    sources = sources or Sources()
    blob_shapes: dict[str, Shape] = {}
    layer_shapes: list[LayerShapes] = []
    missing: list[tuple[str, Layer, str]] = []
    unknown: dict[str, str] = {}  # a blob whose shape is not known -> the missing data blob it waits for
    notes: list[str] = []
    data_tops: set[str] = set()
    axes = batch_axes(graph, specs, inputs, stored_params, batch, sources) if batch is not None else BatchAxes()
    notes.extend(axes.notes)
    net_types = frozenset(layer.type for layer in graph.layers)

    for position, layer in enumerate(graph.layers):
        spec = _spec_for(layer, specs, graph)
        _check_counts(layer, spec, graph.source)
        if spec.is_data:
            data_tops.update(layer.tops)
        waiting = [b for b in layer.bottoms if b in unknown]
        if waiting and not _sized_without_bottoms(spec, layer):
            unknown.update(dict.fromkeys(layer.tops, unknown[waiting[0]]))
            layer_shapes.append(LayerShapes(tops=()))
            continue
        overflow = int_overflow(layer.proto)
        if overflow is not None:
            field, value = overflow
            raise CaffememError(f"{field}: {value} does not fit Caffe's 32-bit int (Caffe would silently wrap it to {int32_wrapped(value)})", _where(layer, graph.source))
        asked = replace(layer, proto=axes.restated[position]) if position in axes.restated else layer
        record = sources.records.get(layer.name)
        query = ShapeQuery(asked, tuple(blob_shapes.get(b, ()) for b in layer.bottoms), graph.phase, inputs, net_types, overrides & set(layer.tops), record)
        try:
            result = spec.shape(query)
            _check_from_file(layer, result, inputs, graph.source)
            notes.extend(_override_notes(spec, query, result))
        except NeedsInput as need:
            hint = "; ".join(h for h in (need.hint, sources.hints.get(layer.name, ""), _bottoms_read(layer, blob_shapes, unknown)) if h)
            missing.extend((blob, layer, hint) for blob in need.blobs)
            unknown.update({top: top if top in need.blobs else need.blobs[0] for top in layer.tops})
            layer_shapes.append(LayerShapes(tops=()))
            continue
        except CaffememError as error:
            error = replace(error, message=error.message + _other_fork_hint(layer, spec, specs))
            raise error.at(file=graph.source, line=layer.line, layer=layer.name, layer_type=layer.type) from None
        except (ArithmeticError, IndexError, KeyError, TypeError, ValueError) as error:
            raise CaffememError(f"cannot infer this layer's shapes from its parameters ({type(error).__name__}: {error})", _where(layer, graph.source)) from None
        if waiting:  # tops given whole with --input; a bottom is still to come
            unknown.update(dict.fromkeys(layer.tops, unknown[waiting[0]]))
            layer_shapes.append(LayerShapes(tops=()))
            continue
        result = _with_stored_params(layer, result, stored_params, notes, graph.source)
        if batch is not None and spec.is_data:
            fixed = spec.fixed_tops(layer.proto) if spec.fixed_tops is not None else None
            if fixed is not None:
                _check_fixed_batch(layer, result, fixed, batch, graph.source)
            else:
                tops = tuple(s if i in result.unbatched else _with_batch(s, batch, *axes.data.get(top, (0, 1))) for i, (top, s) in enumerate(zip(layer.tops, result.tops)))
                result = replace(result, tops=tops)
        _check_result(layer, result, graph.source)
        if record is not None:  # after --batch: the note gives the shape analysed
            notes.extend(provenance(layer, record, result.tops, query.overrides))
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


def _check_fixed_batch(layer: Layer, result: LayerShapes, fixed: tuple[str, bool], batch: int, file: str) -> None:
    """A layer whose code fixes its tops keeps them under --batch; one that reads the
    batch's images refuses another number of images (fit then stops below it)."""
    why, images = fixed
    held = result.tops[0][0] if images and result.tops and result.tops[0] else None
    if held is not None and held != batch:
        raise CaffememError(f"--batch {batch}: {why}, so this net runs {held} image(s) a batch whatever --batch says", _where(layer, file))


def _with_batch(shape: Shape, batch: int, axis: int, per_sample: int = 1) -> Shape:
    """``shape`` with its batch axis set to ``per_sample`` x ``batch`` (a scalar top stays
    as it is)."""
    return shape[:axis] + (per_sample * batch,) + shape[axis + 1 :] if len(shape) > axis else shape


@dataclass(frozen=True)
class BatchAxes:
    """Where ``--batch`` puts the batch, read off the net at the file's own batch."""

    # data top -> (axis, items per sample): (1, 1) time-major T x N x ..., (0, T) frames
    # laid out T x N on axis 0; tops not listed: (0, 1), the batch on axis 0.
    data: dict[str, tuple[int, int]] = field(default_factory=dict)
    restated: dict[int, Any] = field(default_factory=dict)  # layer position -> LayerParameter for the batch
    notes: tuple[str, ...] = ()


def batch_axes(graph: Graph, specs: SpecTable, inputs: Mapping[str, Shape], stored_params, batch: int, sources: Sources | None = None) -> BatchAxes:
    """A recurrent layer reads its inputs T x N x ... (recurrent_layer.cpp), and LRCN-style
    nets feed it frames computed T x N on axis 0 then reshaped to T x N x ... (e.g. LisaAnne/
    lisa-caffe-public examples/LRCN_activity_recognition/train_test_lstm_RGB.prototxt:
    384 frames, Reshape to 16 x 24 x 4096).  From the shapes at the file's batch, each
    recurrent input (and each Reshape to the same T x N from T x N rows) tells T and N; the
    data tops it is computed from then hold N (batch on axis 0), T x N (frames: T x batch
    on axis 0) or start T, N (batch on axis 1); a Reshape that spells N out is restated.
    A data top that fits none of these cannot be rescaled: the error says what to pass."""
    time_major = _time_major_blobs(graph, specs)
    if not time_major:
        return BatchAxes()
    shapes = infer_shapes(graph, specs, inputs, stored_params, sources=sources).blob_shapes
    in_order = [top for layer in graph.layers for top in layer.tops]
    sequences = {blob: shapes[blob][:2] for blob in dict.fromkeys(in_order) if blob in time_major and len(shapes[blob]) >= 2}
    pairs = set(sequences.values())
    rebatched = [(i, layer, specs.get(layer.type)) for i, layer in enumerate(graph.layers) if getattr(specs.get(layer.type), "rebatch", None) and layer.bottoms and layer.tops]
    for _, layer, _ in rebatched:
        top, bottom = shapes[layer.tops[0]], shapes[layer.bottoms[0]]
        if top[:2] in pairs and bottom and bottom[0] == top[0] * top[1]:
            sequences.setdefault(layer.tops[0], top[:2])
    producers: dict[str, list[Layer]] = {}
    for layer in graph.layers:
        for top in layer.tops:
            producers.setdefault(top, []).append(layer)
    data: dict[str, tuple[int, int]] = {}
    for blob, (steps, streams) in sequences.items():
        for top, source in _data_ancestors(blob, producers, specs):
            where = _batch_axis(shapes[top], steps, streams, top in time_major)
            if where is None or data.setdefault(top, where) != where:
                raise CaffememError(
                    f"--batch {batch}: cannot tell where the batch is in '{top}' {list(shapes[top])}: the recurrent input '{blob}' {list(shapes[blob])} "
                    f"is T={steps} time steps x N={streams} sequences, and '{top}' starts with neither N, T x N (frames) nor T, N; "
                    f"leave out --batch and give the shapes of the batch you want with --input {top}=... (and the file's Reshape dims to match)",
                    _where(source, graph.source),
                )
    restated = {}
    for position, layer, spec in rebatched:
        if layer.tops[0] in sequences:
            proto = spec.rebatch(layer.proto, len(shapes[layer.bottoms[0]]), 1, batch)
            if proto is not None:
                restated[position] = proto
    frames = {top: data[top][1] for top in dict.fromkeys(in_order) if data.get(top, (1, 1))[0] == 0 and data[top][1] > 1}
    notes = ()
    if frames:
        spelled = ", ".join(f"'{graph.layers[p].name}'" for p in restated)
        steps = "/".join(str(t) for t in sorted(set(frames.values())))
        notes = (
            f"--batch {batch}: {', '.join(repr(t) for t in frames)} hold T x N frames on axis 0 (T = {steps} time steps, read off the recurrent "
            f"input's T x N shape), so N = {batch} makes them T x {batch}" + (f"; Reshape {spelled} restated for N = {batch}" if restated else ""),
        )
    return BatchAxes(data, restated, notes)


def _batch_axis(shape: Shape, steps: int, streams: int, time_major: bool) -> tuple[int, int] | None:
    """Where a data top computed into a T x N recurrent input keeps its batch, or None."""
    if time_major or (len(shape) >= 2 and shape[1] == streams and shape[0] in (1, steps)):
        return (1, 1)
    if shape and shape[0] == steps * streams and steps > 1:
        return (0, steps)
    if shape and shape[0] == streams:
        return (0, 1)
    return None


def _data_ancestors(blob: str, producers: Mapping[str, list[Layer]], specs: SpecTable) -> list[tuple[str, Layer]]:
    """The data tops ``blob`` is computed from, with the layer giving each."""
    found: list[tuple[str, Layer]] = []
    seen: set[str] = set()
    stack = [blob]
    while stack:
        name = stack.pop()
        if name in seen:
            continue
        seen.add(name)
        for layer in producers.get(name, ()):
            spec = specs.get(layer.type)
            if spec is not None and spec.is_data:
                found.append((name, layer))
            else:
                stack.extend(layer.bottoms)
    return found


def _where(layer: Layer, file: str) -> Location:
    return Location.of_layer(layer, file)


def _spec_for(layer: Layer, specs: SpecTable, graph: Graph) -> LayerSpec:
    spec = specs.get(layer.type)
    if spec is not None:
        return spec
    file = graph.source
    if specs.root is not None:
        raise _unknown_in_tree(layer, specs, graph)
    close = difflib.get_close_matches(layer.type, specs.types(), n=3)
    hint = f" (did you mean {', '.join(close)}?)" if close else ""
    fork = fork_defining("LayerParameter.type", layer.type)
    hint += f": it belongs to {fork}" if fork else ""
    raise CaffememError(
        f"unknown layer type '{layer.type}'{hint}; describe it in a file passed with --layers "
        "(see docs/forks.md)",
        _where(layer, file),
    )


def _unknown_in_tree(layer: Layer, specs: SpecTable, graph: Graph) -> CaffememError:
    """A type with no rule, when the user's Caffe tree is known (--caffe-root): the tree
    registers it (it needs a --layers rule: the error carries a skeleton for every such
    type of the net), or it is a typo (the closest types of caffemem and of the tree)."""
    root = specs.root
    where = _where(layer, graph.source)
    registered = root.registered
    found = registered.get(layer.type)
    if found is None:
        close = difflib.get_close_matches(layer.type, sorted(set(specs.types()) | set(registered)), n=3)
        hint = f"; did you mean {', '.join(repr(c) for c in close)}?" if close else "" if registered else f" (no source under {root.root} registers any layer type: is it the root of a Caffe tree?)"
        return CaffememError(f"no layer type '{layer.type}' in caffemem or in {root.root}{hint}", where)
    missing = [t for t in dict.fromkeys(other.type for other in graph.layers) if specs.get(t) is None and t in registered]
    skeleton = "\n".join(layer_skeleton(t, [other for other in graph.layers if other.type == t], root) for t in missing)
    others = f" (and {len(missing) - 1} more of the fork's types)" if len(missing) > 1 else ""
    return NoShapeRule(
        f"type '{layer.type}' is registered by the fork in {root.relative(found.file)}:{found.line} but caffemem has no shape rule for it{others}; "
        "describe it in a file passed with --layers: a skeleton for it is on standard output (see docs/forks.md)",
        where,
        skeleton,
    )


def _other_fork_hint(layer: Layer, spec: LayerSpec, specs: SpecTable) -> str:
    """When a fork's rule refuses a layer whose type the user's tree (--caffe-root)
    registers: the tree's class may be another fork's layer of the same name (senlinuc/
    caffe_ocr's DenseBlock is not Tongcheng/caffe's), which a --layers rule replaces."""
    found = specs.root.registered.get(layer.type) if specs.root is not None else None
    if found is None or spec.family == "declared" or spec.source.startswith("caffe master"):
        return ""
    return f" (caffemem's rule follows {spec.source}; your tree registers its own {layer.type} in {specs.root.relative(found.file)}:{found.line}: if it is another layer, a --layers declaration replaces caffemem's rule)"


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
    return replace(result, params=shapes)


def _check_from_file(layer: Layer, result: LayerShapes, inputs: Mapping[str, Shape], file: str) -> None:
    """A `_` axis left in a top: the layer's rule takes its --input whole (a Python or a
    declared layer), so the file states no axis for `_` to keep."""
    for top, shape in zip(layer.tops, result.tops):
        if top in inputs and FROM_FILE in shape:
            given = ",".join("_" if d == FROM_FILE else str(d) for d in inputs[top])
            raise CaffememError(f"--input {top}={given}: the file states no axis of '{top}' for _ to keep; give every axis as a number", _where(layer, file))


def _override_notes(spec: LayerSpec, query: ShapeQuery, result: LayerShapes) -> list[str]:
    """One note per top given with --override-input: the shape used and the file's own
    (the layer's rule run again without the overrides), so the output says what changed."""
    if not query.overrides:
        return []
    layer = query.layer
    try:
        stated: tuple[Shape, ...] | None = spec.shape(replace(query, inputs={k: v for k, v in query.inputs.items() if k not in query.overrides}, overrides=frozenset())).tops
    except (CaffememError, NeedsInput):  # the file leaves the shape open
        stated = None
    line = f", line {layer.line}" if layer.line else ""
    notes = []
    for i, top in enumerate(layer.tops):
        if top in query.overrides:
            own = f"states {list(stated[i])}" if stated is not None else "leaves it open"
            notes.append(f"override: --override-input {top} gives {list(result.tops[i])} where the file {own} (layer '{layer.name}', {layer.type}{line})")
    return notes


def _check_inputs_used(inputs: Mapping[str, Shape], data_tops: set[str], graph: Graph) -> None:
    for name in inputs:
        if name not in data_tops:
            produced = any(name in layer.tops for layer in graph.layers)
            reason = "it is computed by a layer, not read from data" if produced else "no layer in this phase produces it"
            raise CaffememError(f"--input {name}: {reason}; --input gives the shapes of data-layer tops only", Location(file=graph.source))


def _sized_without_bottoms(spec: LayerSpec, layer: Layer) -> bool:
    """A layer whose tops come from outside whatever its bottoms hold (a Python layer
    caffemem has no rule for, a declared data type): asked for with the others even while a
    bottom waits for its own shape (issue 34: the colorization net's chain of Python
    layers took one run per blob)."""
    if not (spec.is_data and spec.opaque_tops):
        return False
    return layer.type != "Python" or known_note(layer.proto.python_param) is None


def _bottoms_read(layer: Layer, known: Mapping[str, Shape], unknown: Mapping[str, str]) -> str:
    """What a layer asked for reads, for the user who sizes its tops: each bottom's shape,
    or the data blob it waits for."""
    if not layer.bottoms:
        return ""

    def said(bottom: str) -> str:
        if bottom in known:
            return f"{bottom} [{','.join(map(str, known[bottom]))}]"
        waits = unknown.get(bottom, bottom)
        return f"{bottom} (asked for too)" if waits == bottom else f"{bottom} (known once {waits} is given)"

    return f"layer '{layer.name}' reads {', '.join(said(bottom) for bottom in layer.bottoms)}"


def _missing_message(missing: list[tuple[str, Layer, str]]) -> str:
    parts = [f"'{blob}' (layer '{layer.name}', {layer.type}{', line ' + str(layer.line) if layer.line else ''})" for blob, layer, _ in missing]
    hints = sorted({hint for _, _, hint in missing if hint})
    example = " ".join(f"--input {blob}=N,C,H,W" if i == 0 else f"--input {blob}=..." for i, (blob, _, _) in enumerate(missing[:2]))
    message = f"the file does not tell the shape of {len(missing)} data blob(s): {', '.join(parts)}"
    if any("--input" in hint for hint in hints):  # the hints say what to pass: the generic N,C,H,W would contradict them
        return f"{message}: {'; '.join(hints)}"
    return f"{message}; give them with {example}" + (" (" + "; ".join(hints) + ")" if hints else "")

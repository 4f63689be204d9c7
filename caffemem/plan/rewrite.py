"""The plan as Caffe reads it: the `mem_param` block with each phase's slot table.

Entry points: :func:`mem_param`, and :func:`with_batch` (the data layers' batch lines
for ``optimize --batch N -o``); :mod:`caffemem.prototxt.write` puts the block into the
user's file, every other byte kept.
"""

from __future__ import annotations

from caffemem.errors import CaffememError, Location
from caffemem.passes.upgrade import upgrade_net
from caffemem.prototxt.textmap import Token, field_extent, layer_blocks, replace_tokens, tokenize, value_token
from caffemem.schema import caffe_pb2

TARGETS = ("caffemem", "fork")


def mem_param(phases, exclude: tuple[str, ...], target: str, previous: caffe_pb2.MemoryOptimizationParameter | None = None, fork_off: frozenset[str] = frozenset()) -> caffe_pb2.MemoryOptimizationParameter:
    """The block for the phases planned; the slot table only for caffemem's own target.
    ``previous``: the file's block, whose tables of the phases not planned now are kept
    (replanning TRAIN with --force leaves the TEST table as it was).  ``fork_off``: with
    the fork's target, the phases where its optimizer would hold more than stock Caffe:
    left off (``optimize_test: false``)."""
    planned = {phase.phase for phase in phases}
    kept = [slot for slot in (previous.slot if previous is not None else ()) if caffe_pb2.Phase.Name(slot.phase) not in planned]
    kept_phases = {caffe_pb2.Phase.Name(slot.phase) for slot in kept}
    on = (planned | kept_phases) - (fork_off if target == "fork" else set())
    block = caffe_pb2.MemoryOptimizationParameter(optimize_train="TRAIN" in on, optimize_test="TEST" in on)
    block.exclude_blob.extend(exclude)
    if target == "caffemem":
        block.slot.extend(kept)
        block.recompute.extend(entry for entry in (previous.recompute if previous is not None else ()) if caffe_pb2.Phase.Name(entry.phase) not in planned)
        for phase in phases:
            for layer, before, restore in phase.plan_data.recompute:
                block.recompute.add(phase=caffe_pb2.TRAIN if phase.phase == "TRAIN" else caffe_pb2.TEST, layer=layer, before=before, restore_params=restore)
            by_slot: dict[int, list[tuple[str, str, int]]] = {}
            for blob, kind, slot, offset in phase.plan_data.assign:
                by_slot.setdefault(slot, []).append((blob, kind, offset))
            for slot_id, size in sorted(phase.plan_data.slot_bytes.items()):
                slot = block.slot.add(id=slot_id, bytes=size, phase=caffe_pb2.TRAIN if phase.phase == "TRAIN" else caffe_pb2.TEST)
                for blob, kind, offset in by_slot.get(slot_id, []):
                    slot.member.add(blob=blob, kind=kind, offset=offset)
    return block


def _stands_for_top_level_inputs(net: caffe_pb2.NetParameter, layer) -> bool:
    """The Input layer Caffe's UpgradeNetInput makes of a deploy file's top-level ``input``
    fields: it has no text of its own in the file (messages point at the ``input:`` line)."""
    return len(net.input) > 0 and layer.type == "Input" and all(old.name != layer.name for old in (*net.layer, *net.layers))


def with_batch(text: str, nets, specs, batch: int, net: caffe_pb2.NetParameter, file: str) -> str:
    """``text`` with every data layer of the planned ``nets`` (ShapedGraphs) stating batch
    ``batch`` where its LayerSpec.batch_fields say the file states it, and the top-level
    ``input_dim``/``input_shape`` of a deploy file likewise: the edit `--batch` makes to
    the shapes, made to the text.  Only those numbers change; every other byte is kept.
    A layer whose batch is in no such field (a Python layer, a recurrent net's T x N
    frames) is refused, naming it, so a file is never written at one batch with a table
    for another."""
    return replace_tokens(text, {token: str(batch) for token in _batch_tokens(text, nets, specs, net, file, f"--batch {batch} with -o")})


def batch_line(text: str, shaped, specs, net: caffe_pb2.NetParameter, file: str) -> int | None:
    """The line where ``text`` states the batch of the net ``shaped`` (its first data
    layer's batch field, the one `optimize --batch` rewrites), or None where it states
    none that caffemem can rewrite: what `check` points at when the batch changed."""
    try:
        found = _batch_tokens(text, [shaped], specs, net, file, "")
    except CaffememError:
        return None
    return found[0].line if found else None


def _batch_tokens(text: str, nets, specs, net: caffe_pb2.NetParameter, file: str, refuse: str) -> list[Token]:
    """The tokens of ``text`` that state the batch of the data layers of ``nets``, in order;
    a CaffememError starting with ``refuse`` where a layer's batch is in no such field."""
    tokens = tokenize(text)
    blocks = layer_blocks(text, tokens)
    index_at = {token.offset: i for i, token in enumerate(tokens)}
    upgraded = list(upgrade_net(net, file)[0].layer)
    upgraded = upgraded[len(upgraded) - len(blocks) :]  # less the Input layer standing for top-level inputs
    found: dict[Token, None] = {}
    for shaped in nets:
        for layer in shaped.graph.layers:
            spec = specs.get(layer.type)
            if spec is not None and spec.time_major_bottoms is not None:
                raise CaffememError(
                    f"{refuse}: a recurrent layer reads its inputs T x N, so the batch is not one number in the data layers; "
                    "write the batch into the file by hand and optimize that file without --batch",
                    Location.of_layer(layer, file),
                )
        for layer in shaped.graph.layers:
            spec = specs.get(layer.type)
            if spec is None or not spec.is_data or (spec.fixed_tops is not None and spec.fixed_tops(layer.proto)):
                continue  # not a data layer, or one whose code fixes its tops (--batch leaves them)
            where = Location.of_layer(layer, file)
            if spec.batch_fields is None:
                raise CaffememError(f"{refuse}: the batch of layer type {layer.type} is not a field of the file caffemem can rewrite; set it in the file (or its code) and optimize that file without --batch", where)
            if _stands_for_top_level_inputs(net, layer):
                span, paths = (0, len(tokens)), _top_level_input_paths(net, layer.tops)
            elif any(old.HasField("layer") for old in net.layers):
                raise CaffememError(f"{refuse}: a V0 net (layers {{ layer {{ }} }}) names its fields otherwise; upgrade it with Caffe's upgrade_net_proto_text first", where)
            else:
                span, paths = _body(tokens, index_at, blocks, upgraded, layer), spec.batch_fields(layer.proto)
                if span is None:
                    raise CaffememError(f"{refuse}: cannot find this layer's text in the file to rewrite its batch", where)
            for path in paths:
                token = value_token(tokens, span[0], span[1], path)
                if token is None:
                    raise CaffememError(f"{refuse}: the file does not write {_dotted(path)} for this layer (Caffe takes its default); write it and run again", where)
                found[token] = None
    return list(found)


def _top_level_input_paths(net: caffe_pb2.NetParameter, tops) -> list[tuple[str | int, ...]]:
    """A deploy file's ``input_shape { dim }`` (first dim) or ``input_dim`` (the first of
    each input's values) for the given input blobs."""
    names = list(net.input)
    if len(net.input_shape):
        return [("input_shape", names.index(top), "dim", 0) for top in tops]
    per_input = len(net.input_dim) // max(len(names), 1)
    return [("input_dim", per_input * names.index(top)) for top in tops]


def _body(tokens: list[Token], index_at: dict[int, int], blocks, upgraded, layer) -> tuple[int, int] | None:
    """The token span of the body of ``layer``'s block: the file's layer blocks are the
    upgraded net's layers in order, and a built data layer is a copy of one of them (a
    train_val file's TRAIN and TEST data layers share a name, so names cannot tell)."""
    found = [block for block, proto in zip(blocks, upgraded) if proto == layer.proto]
    if len(found) != 1:
        return None
    i = index_at[found[0].start] + 1
    if tokens[i].text == ":":
        i += 1
    end = field_extent(tokens, index_at[found[0].start])
    return i + 1, end - 1


def _dotted(path: tuple[str | int, ...]) -> str:
    return "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in path).lstrip(".")

"""`optimize --inplace`: run layers in place where stock Caffe gives the same result.

Entry point: :func:`make_in_place`.  Caffe runs a layer in place when its top has its
bottom's name: the top then needs no data and no diff of its own.  Many files write
``bottom: "fc6" top: "relu6"`` where ``top: "fc6"`` would do; this pass renames such a top
to its bottom (and every later mention of the old name), in the user's own text, so the
result runs on stock Caffe.

A layer L (bottom B, top T) is rewritten only when all of these hold; each is
conservative, and each refusal is reported with its reason:

1. L's type says it is right in place with L's parameters (``LayerSpec.in_place``, read
   from Caffe's code); it has exactly one top, and the pair is (bottom 0, top 0).
2. B is read by L alone: no other layer in the whole file, in any phase or stage, names
   B as a bottom (so no in-place chain is grown); L reads it once; B carries no loss
   weight; B is not a data layer's top (a net input, which users feed and read by name)
   and is named by no layer after L.
3. T is produced by L alone (later layers may only run in place on it), named by no
   layer before L, read by at least one layer (a net output keeps its name), and carries
   no loss weight.  Neither B nor T is an excluded blob (``--exclude-blob``, mem_param).
4. L and B's producers have no include/exclude rules, so they are in every net the
   file defines, and B's storage is its own (not a Flatten/Reshape/Split view of another
   blob's) in the TRAIN net.
5. Values: in the TRAIN net with every Backward on (``force_backward``), every read of
   every step sees the value written by the same step as in the file as given — except
   that L's own steps may now read what L itself wrote (what rule 1 vouches for).  This
   catches a producer whose Backward reads its top (LRN, Sigmoid, Eltwise PROD...) and a
   later in-place layer on T overwriting what L's Backward reads.  The reads and writes
   are the memory rules' own (layers/access.py), less the reads a rule marks
   ``pointer_only`` (Eltwise SUM takes its top's data pointer and never uses it).  A file
   whose TRAIN net does not build (a deploy net with TEST-only layers) is checked on its
   TEST net, forward only, and the result's notes say so.

Rules 1-4 are checked layer by layer in file order on the net as already rewritten;
rule 5 on the whole result, dropping the layers it blames until it passes.  The text is
edited token by token (caffemem.prototxt.textmap): only the rewritten names change, every other
byte of the file is kept.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field

from caffemem.errors import CaffememError, Location
from caffemem.layers.access import Bucket, Touch
from caffemem.layers.registry import SpecTable
from caffemem.passes.load import NetSource
from caffemem.passes.memory import Run
from caffemem.passes.schedule import Schedule, build_schedule
from caffemem.prototxt.textmap import (
    Token,
    field_extent,
    layer_blocks,
    string_value,
    tokenize,
)
from caffemem.schema import caffe_pb2

RunOf = Callable[[caffe_pb2.NetParameter, str], Run]  # an upgraded net, a phase -> its run
StepKey = Bucket  # a step of the run: everything before Forward is one ("init")


@dataclass(frozen=True)
class Rewrite:
    """One layer made in place: its top ``top_was`` is now ``now`` (its bottom)."""

    layer: str
    type: str
    top_was: str
    now: str
    index: int  # the layer's position among the upgraded net's layers


@dataclass(frozen=True)
class Kept:
    """A layer of an in-place-safe type left as written, and why."""

    layer: str
    type: str
    reason: str


@dataclass(frozen=True)
class InPlaceResult:
    """What --inplace did to a file: the rewrites, the candidates kept, the new text."""

    rewrites: tuple[Rewrite, ...]
    kept: tuple[Kept, ...]
    text: str  # the user's file with the rewrites
    net: caffe_pb2.NetParameter = field(repr=False)  # the file's net as read (not upgraded), rewritten
    notes: tuple[str, ...] = ()


def make_in_place(text: str, source: NetSource, upgraded: caffe_pb2.NetParameter, specs: SpecTable, exclude: tuple[str, ...], run_of: RunOf) -> InPlaceResult:
    """The file with every layer that rules 1-5 allow run in place (see the module)."""
    raw_layers = _raw_layers(source)
    offset = _upgrade_offset(raw_layers, upgraded, source)
    phase, notes = "TRAIN", []

    def checked(net: caffe_pb2.NetParameter) -> _Checked:
        run = run_of(_with_backward(net), phase)
        return _Checked(run, build_schedule(run.shaped, specs, run.dtype, run=run))

    try:
        original = checked(upgraded)
    except CaffememError as error:
        phase = "TEST"
        try:
            original = checked(upgraded)
        except CaffememError:
            raise error from None
        notes.append(f"the TRAIN net does not build ({error}): the rewrites were checked on the TEST net, forward only")
    aliased = _aliased_blobs(original.schedule)
    vetoed: dict[int, str] = {}
    while True:
        rewrites, kept = _select(upgraded, specs, set(exclude), aliased, vetoed, offset)
        if not rewrites:
            break
        blamed = _value_changes(original, checked(_renamed(upgraded, rewrites)), rewrites)
        if not blamed:
            break
        vetoed.update(blamed)
    net = copy.deepcopy(source.proto)
    _rename_layers(_raw_layers_of(net), rewrites, offset)
    return InPlaceResult(tuple(rewrites), tuple(kept), _rewrite_text(text, rewrites, offset, source.file), net, tuple(notes))


# ----------------------------------------------------------------------------- the file's layers


def _raw_layers_of(net: caffe_pb2.NetParameter) -> list:
    """The layer messages as the file lists them (current `layer`, or V0/V1 `layers`)."""
    return list(net.layer) if len(net.layer) else list(net.layers)


def _raw_layers(source: NetSource) -> list:
    if source.binary:
        raise CaffememError("--inplace rewrites a text prototxt: give it the net definition, not a binary .caffemodel", Location(file=source.file))
    if len(source.proto.layer) and len(source.proto.layers):
        raise CaffememError("--inplace: the file mixes `layer` and legacy `layers` blocks", Location(file=source.file))
    return _raw_layers_of(source.proto)


def _upgrade_offset(raw_layers: list, upgraded: caffe_pb2.NetParameter, source: NetSource) -> int:
    """How many layers the upgrade put in front (the Input layer of top-level `input`
    fields), after checking that the rest are the file's layers, wired the same."""
    offset = len(upgraded.layer) - len(raw_layers)
    same = offset in (0, 1) and all(
        list(raw.bottom) == list(new.bottom) and list(raw.top) == list(new.top) for raw, new in zip(raw_layers, upgraded.layer[offset:])
    )
    if not same:
        raise CaffememError(
            "--inplace: the upgrade to the current format changes this file's layers (V0 padding layers); upgrade it with Caffe's upgrade_net_proto_text first",
            Location(file=source.file),
        )
    return offset


def _with_backward(net: caffe_pb2.NetParameter) -> caffe_pb2.NetParameter:
    """A copy with force_backward on: every Backward any training run could make."""
    forced = copy.deepcopy(net)
    forced.force_backward = True
    return forced


def _aliased_blobs(schedule: Schedule) -> set[str]:
    """Net blobs whose data or diff storage is shared with another blob (ShareData views)."""
    return {
        member.name
        for storage in schedule.classes
        if storage.kind == "blob" and len({m.name for m, _ in storage.members}) > 1
        for member, _ in storage.members
    }


# ----------------------------------------------------------------------------- rules 1-4


def _loss_tops(layer, specs: SpecTable) -> set[str]:
    """The tops a layer gives a non-zero loss weight (a loss layer's top 0 by default)."""
    spec = specs.get(layer.type)
    weights = list(layer.loss_weight) or ([1.0] if spec is not None and spec.auto_top else [])
    return {top for top, weight in zip(layer.top, weights) if weight}


def _select(upgraded, specs: SpecTable, exclude: set[str], aliased: set[str], vetoed: dict[int, str], offset: int) -> tuple[list[Rewrite], list[Kept]]:
    """Rules 1-4, layer by layer in file order, on the names as already rewritten."""
    layers = list(upgraded.layer)
    wiring = [(list(layer.bottom), list(layer.top)) for layer in layers]
    rewrites: list[Rewrite] = []
    kept: list[Kept] = []
    for k in range(offset, len(layers)):
        layer = layers[k]
        spec = specs.get(layer.type)
        bottoms, tops = wiring[k]
        if spec is None or spec.in_place is None or (tops and bottoms and tops[0] == bottoms[0]):
            continue
        reason = vetoed.get(k) or _why_not(k, layers, wiring, specs, exclude, aliased)
        if reason:
            kept.append(Kept(layer.name, layer.type, reason))
            continue
        rewrite = Rewrite(layer.name, layer.type, tops[0], bottoms[0], k)
        rewrites.append(rewrite)
        _rename_wiring(wiring, rewrite)
    return rewrites, kept


def _why_not(k: int, layers: list, wiring: list[tuple[list[str], list[str]]], specs: SpecTable, exclude: set[str], aliased: set[str]) -> str | None:
    """The first of rules 1-4 that layer k breaks, in words (None: it may run in place)."""
    layer = layers[k]
    spec = specs.get(layer.type)
    bottoms, tops = wiring[k]
    if not spec.in_place(layer):
        return f"{layer.type} is not right in place with these parameters"
    if len(tops) != 1 or not bottoms:
        return f"it has {len(tops)} tops and {len(bottoms)} bottoms"
    bottom, top = bottoms[0], tops[0]
    if bottom in exclude or top in exclude:
        return f"blob '{bottom if bottom in exclude else top}' is excluded from sharing"
    if len(layer.include) or len(layer.exclude):
        return "it has include/exclude rules (it is not in every net of the file)"
    if any(layer.loss_weight):
        return "its top carries a loss weight"
    readers = [layers[j].name for j, (b, _) in enumerate(wiring) for name in b if name == bottom]
    if len(readers) != 1:
        others = [name for name in readers if name != layer.name] or [layer.name]
        return f"its bottom '{bottom}' is also read by {', '.join(repr(n) for n in others[:3])}{' and more' if len(others) > 3 else ''}"
    producers = [j for j, (_, t) in enumerate(wiring) if bottom in t and j < k]
    for j in producers:
        source_spec = specs.get(layers[j].type)
        if source_spec is not None and source_spec.is_data:
            return f"its bottom '{bottom}' is a data layer's top (a net input)"
        if len(layers[j].include) or len(layers[j].exclude):
            return f"its bottom '{bottom}' comes from '{layers[j].name}', which has include/exclude rules"
        if bottom in _loss_tops(layers[j], specs):
            return f"its bottom '{bottom}' carries a loss weight"
    if not producers:
        return f"its bottom '{bottom}' has no producer before it"
    if bottom in aliased:
        return f"its bottom '{bottom}' shares storage with another blob (a Flatten/Reshape/Split view)"
    for j, (b, t) in enumerate(wiring):
        if j == k:
            continue
        if j < k and (top in b or top in t):
            return f"its top '{top}' is named before it, by '{layers[j].name}'"
        if j > k and bottom in b + t:
            return f"its bottom '{bottom}' is named again after it, by '{layers[j].name}'"
        if j > k and top in t and top not in b:
            return f"its top '{top}' is produced again by '{layers[j].name}'"
    if not any(top in b for b, _ in wiring[k + 1 :]):
        return f"its top '{top}' is a net output (no layer reads it)"
    return None


def _rename_wiring(wiring: list[tuple[list[str], list[str]]], rewrite: Rewrite) -> None:
    """Layer `rewrite.index`'s top and every later mention of it take the bottom's name."""
    for j in range(rewrite.index, len(wiring)):
        for names in wiring[j] if j > rewrite.index else (wiring[j][1],):
            names[:] = [rewrite.now if name == rewrite.top_was else name for name in names]


def _rename_layers(layers: list, rewrites: list[Rewrite], offset: int) -> None:
    """The same renames on layer messages (``offset``: rewrite indices are the upgraded net's)."""
    wiring = [(list(layer.bottom), list(layer.top)) for layer in layers]
    for rewrite in rewrites:
        _rename_wiring(wiring, Rewrite(rewrite.layer, rewrite.type, rewrite.top_was, rewrite.now, rewrite.index - offset))
    for layer, (bottoms, tops) in zip(layers, wiring):
        del layer.bottom[:], layer.top[:]
        layer.bottom.extend(bottoms)
        layer.top.extend(tops)


def _renamed(upgraded: caffe_pb2.NetParameter, rewrites: list[Rewrite]) -> caffe_pb2.NetParameter:
    net = copy.deepcopy(upgraded)
    _rename_layers(list(net.layer), rewrites, 0)
    return net


# ----------------------------------------------------------------------------- rule 5


@dataclass(frozen=True)
class _Checked:
    """One net's run for rule 5: its events and storage classes."""

    run: Run
    schedule: Schedule

    def reads(self) -> dict[StepKey, list[tuple[StepKey | None, int]]]:
        """Per layer step, in order, each read that uses the values, with the step that
        last wrote the storage it reads (None: nothing did)."""
        last_writer: dict[int, StepKey] = {}
        reads: dict[StepKey, list[tuple[StepKey | None, int]]] = {}
        rules = self.run.rules
        for bucket, action in self.run.events:
            if type(action) is not Touch:
                continue
            key = Bucket("init") if bucket.before_forward else bucket
            storage = self.schedule.class_of[(action.blob, action.part)]
            if action.write:
                last_writer[storage] = key
            elif key.layer is not None and action not in rules[key.layer].pointer_only:
                reads.setdefault(key, []).append((last_writer.get(storage), storage))
        return reads


def _value_changes(original: _Checked, after: _Checked, rewrites: list[Rewrite]) -> dict[int, str]:
    """Rule 5: the rewrites to drop (by layer index) and why; empty when every read sees
    the value it saw in the file as given."""
    rewritten = after.schedule
    graph, before_graph = rewritten.shaped.graph, original.schedule.shaped.graph
    if [(l.type, l.inserted) for l in graph.layers] != [(l.type, l.inserted) for l in before_graph.layers]:
        return {r.index: "the rewritten net does not build to the same layers" for r in rewrites}
    by_layer = {i: r for i, layer in enumerate(graph.layers) for r in rewrites if layer.name == r.layer and layer.tops == (r.now,) and layer.bottoms[:1] == (r.now,)}
    by_blob = {r.now: r for r in rewrites}
    blamed: dict[int, str] = {}

    def blame(culprits: list[Rewrite], reason: str) -> None:
        for rewrite in culprits or rewrites:
            blamed.setdefault(rewrite.index, reason)

    def named_by(i: int) -> list[Rewrite]:
        layer = graph.layers[i]
        return [by_blob[name] for name in layer.bottoms + layer.tops if name in by_blob]

    for i, (needed, needs) in enumerate(zip(original.schedule.need_backward, rewritten.need_backward)):
        if needed != needs:
            blame(named_by(i), f"layer '{graph.layers[i].name}' would {'gain' if needs else 'lose'} its Backward")
    old_reads = original.reads()
    for key, new in after.reads().items():
        kind, layer_index = key.stage, key.layer
        own = by_layer.get(layer_index)
        old = old_reads.get(key, [])
        if own is not None:
            allowed = {Bucket("forward", layer_index), Bucket("backward", layer_index)} | {writer for writer, _ in old}
            bad = [(writer, storage) for writer, storage in new if writer not in allowed]
        elif [w for w, _ in old] != [w for w, _ in new]:
            bad = [(w, s) for (w, s), (v, _) in zip(new, old) if w != v] or new[len(old) :]
            if not bad:  # fewer reads than before: blame whoever renamed what the layer names
                blame(named_by(layer_index), f"the {kind} of '{graph.layers[layer_index].name}' would read less than it does now")
        else:
            continue
        for writer, storage in bad:
            members = rewritten.classes[storage].members
            culprits = [own] if own else [by_blob[m.name] for m, _ in members if m.kind == "blob" and m.name in by_blob]
            if not culprits and writer is not None and writer.layer in by_layer:
                culprits = [by_layer[writer.layer]]
            when = f"after '{graph.layers[writer.layer].name}' overwrote it" if writer is not None and writer.layer is not None else "before its value is written"
            blame(culprits, f"the {kind} of '{graph.layers[layer_index].name}' would read '{rewritten.classes[storage].owner}' {when}")
    return blamed


# ----------------------------------------------------------------------------- the text


def _quoted(name: str) -> str:
    return '"' + name.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _blob_fields(tokens: list[Token], start: int, end: int) -> list[tuple[int, int, str]]:
    """The `bottom:`/`top:` fields directly inside the block tokens[start:end]: the token
    range of each value and the name it holds."""
    fields: list[tuple[int, int, str]] = []
    depth, i = 0, start
    while i < end:
        text = tokens[i].text
        if text in "{<":
            depth += 1
        elif text in "}>":
            depth -= 1
        elif depth == 1 and text in ("bottom", "top") and i + 2 < end and tokens[i + 1].text == ":":
            stop = field_extent(tokens, i)
            fields.append((i + 2, stop, "".join(string_value(t) for t in tokens[i + 2 : stop])))
            i = stop
            continue
        i += 1
    return fields


def _rewrite_text(text: str, rewrites: list[Rewrite], offset: int, file: str) -> str:
    """The text with the rewritten tops, and their later mentions, renamed; nothing else
    changes (line numbers included)."""
    if not rewrites:
        return text
    tokens = tokenize(text)
    starts = {token.offset: i for i, token in enumerate(tokens)}
    blocks = layer_blocks(text, tokens)
    spans = [(starts[b.start], next((i for i in range(starts[b.start], len(tokens)) if tokens[i].offset >= b.end), len(tokens))) for b in blocks]
    fields = [_blob_fields(tokens, start, stop) for start, stop in spans]
    values = [[name for _, _, name in block] for block in fields]
    for rewrite in rewrites:
        k = rewrite.index - offset
        tops = [i for i, (first, _, name) in enumerate(fields[k]) if tokens[first - 2].text == "top" and name == rewrite.top_was]
        if len(tops) != 1:
            raise CaffememError(f"--inplace: cannot find the top '{rewrite.top_was}' of layer '{rewrite.layer}' in the text", Location(file=file, line=blocks[k].line, layer=rewrite.layer))
        values[k][tops[0]] = rewrite.now
        for later in values[k + 1 :]:
            later[:] = [rewrite.now if name == rewrite.top_was else name for name in later]
    edits = [
        (tokens[first].offset, tokens[stop - 1].offset + len(tokens[stop - 1].text), _quoted(value))
        for block, new in zip(fields, values)
        for (first, stop, old), value in zip(block, new)
        if value != old
    ]
    for begin, finish, replacement in sorted(edits, reverse=True):
        text = text[:begin] + replacement + text[finish:]
    return text

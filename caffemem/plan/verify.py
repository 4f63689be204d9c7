"""Pass 10, verify: an independent check that a memory plan is safe.

Entry point: :func:`verify_plan`.  It shares no code with the planners: it takes the plan
as data (slot sizes, and which blob's data or diff lives in which slot), replays the
schedule over shadow memory that tags every slot with the storage that last wrote it,
and reports — naming step, layer and blob — every read of a slot another blob has
overwritten since, every slot smaller than one of its members, and every planned storage
that Net::Init fills (slots take over only when Init ends).  Storage of a net blob that
the run never touches may be assigned anywhere: Caffe never allocates it; so may a layer's
layer buffer that this run never allocates (the CPU run of a plan made for the card: Caffe's
own convolution takes no cuDNN workspace, ContrastiveLoss's CPU code never touches diff_sq_).
"""

from __future__ import annotations

import json
from bisect import bisect_left, bisect_right
from collections.abc import Iterable
from dataclasses import dataclass

from caffemem.errors import CaffememError, Location, excerpt
from caffemem.graph import count
from caffemem.layers.access import BlobId
from caffemem.layers.bound_buffers import runtime_binds
from caffemem.layers.registry import SpecTable, recompute_of
from caffemem.passes.recompute import Recomputation, names_given_twice
from caffemem.passes.schedule import Schedule, names_two_storages
from caffemem.prototxt.read import read_input
from caffemem.units import DTYPE_BYTES


@dataclass(frozen=True)
class PlanData:
    """A plan as it travels in files: slots and assignments by blob name."""

    slot_bytes: dict[int, int]
    assign: tuple[tuple[str, str, int, int], ...]  # (blob, "data"|"diff", slot, byte offset)
    # The Forwards run again in Backward, in order: (layer, before layer, restore_params).
    recompute: tuple[tuple[str, str, bool], ...] = ()


@dataclass(frozen=True)
class Violation:
    step: int
    step_name: str
    blob: str
    message: str

    def __str__(self) -> str:
        return f"step {self.step} ({self.step_name}), blob '{self.blob}': {self.message}"


def _whole(value: object, what: str, low: int = 0) -> int:
    """A JSON integer, strictly: not a string, a bool or a float that happens to be whole."""
    if type(value) is not int or value < low:
        raise ValueError(f"{what} must be a whole number of at least {low}, not {excerpt(json.dumps(value), 40)}")
    return value


def _text(value: object, what: str) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{what} must be a string, not {excerpt(json.dumps(value), 40)}")
    return value


def _no_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


def plan_from_json(document: dict, file: str | None = None) -> PlanData:
    """Read the `plan` object of `caffemem optimize --json` (or a --plan-json file), with
    a strict schema: whole numbers as numbers, slot ids unique, every member inside its
    slot (an offset past the slot's end can never be right)."""
    try:
        plan = document.get("plan", document)
        slots: dict[int, int] = {}
        for entry in plan["slots"]:
            slot = _whole(entry["id"], "slots[].id")
            if slot in slots:
                raise ValueError(f"slot id {slot} is given twice")
            slots[slot] = _whole(entry["bytes"], f"slot {slot}: bytes", low=1)
        assign = []
        for entry in plan["assign"]:
            blob, kind = _text(entry["blob"], "assign[].blob"), _text(entry["kind"], "assign[].kind")
            slot, offset = _whole(entry["slot"], f"'{excerpt(blob)}': slot"), _whole(entry.get("offset", 0), f"'{excerpt(blob)}': offset")
            if kind not in ("data", "diff"):
                raise ValueError(f"blob '{excerpt(blob)}' has kind '{excerpt(kind)}', not 'data' or 'diff'")
            if slot in slots and offset >= slots[slot]:
                raise ValueError(f"'{excerpt(blob)}' ({kind}) starts at offset {offset}, past the end of slot {slot} ({slots[slot]} bytes)")
            assign.append((blob, kind, slot, offset))
        recompute = []
        for entry in plan.get("recompute", []):
            layer, before = _text(entry["layer"], "recompute[].layer"), _text(entry["before"], "recompute[].before")
            restore = entry.get("restore_params", False)
            if not isinstance(restore, bool):
                raise ValueError(f"recompute '{excerpt(layer)}': restore_params must be true or false, not {excerpt(json.dumps(restore), 40)}")
            recompute.append((layer, before, restore))
    except (AttributeError, KeyError, TypeError, ValueError) as error:
        detail = f"no key {error}" if isinstance(error, KeyError) else str(error)
        raise CaffememError(
            f"not a caffemem plan: {excerpt(detail, 200)} (expected plan.slots[{{id, bytes}}] and plan.assign[{{blob, kind, slot, offset}}])",
            Location(file=file),
        ) from None
    return PlanData(slots, tuple(assign), tuple(recompute))


def read_plan(file: str, phase: str | None = None) -> list[tuple[str | None, PlanData, object]]:
    """(phase, plan, record) for each plan in a plan file: the phases of `optimize --json`
    or `--plan-json` output (only ``phase`` when given), or one bare plan (the ``phase`` it
    names, else the one given, else None); ``record``: the phase's ``made_for`` object as
    read (None when it has none).  A plan's phase is its own, never a record's."""
    where = Location(file=file)
    try:
        document = json.loads(read_input(file, what="plan file").decode("utf-8"), parse_constant=_no_constant)
    except CaffememError as error:
        raise CaffememError(error.message.replace("file not found", "plan file not found"), where) from None
    except ValueError as error:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise CaffememError(f"cannot read the plan as JSON: {excerpt(getattr(error, 'strerror', None) or str(error), 200)}", where) from None
    except RecursionError:
        raise CaffememError("cannot read the plan as JSON: it nests too deeply", where) from None
    if not isinstance(document, dict):
        raise CaffememError(f"not a caffemem plan: the JSON is {type(document).__name__}, not an object", where)
    if "phases" not in document:  # one bare plan: the phase it names, if any, is its own
        named = document.get("phase")
        if named is not None and named not in ("TRAIN", "TEST"):
            raise CaffememError(f"not a caffemem plan: 'phase' must be TRAIN or TEST, not {excerpt(json.dumps(named), 40)}", where)
        if named is not None and phase and named != phase.upper():
            raise CaffememError(f"the plan has no phase {phase.upper()} (it is {named}'s)", where)
        return [(named or (phase.upper() if phase else None), plan_from_json(document, file), None)]
    phases = document["phases"]
    if not isinstance(phases, list) or not all(isinstance(entry, dict) and entry.get("phase") in ("TRAIN", "TEST") for entry in phases):
        raise CaffememError("not a caffemem plan: 'phases' must be a list of objects with 'phase' TRAIN or TEST", where)
    named = [entry["phase"] for entry in phases]
    twice = next((name for i, name in enumerate(named) if name in named[:i]), None)
    if twice is not None:  # each table is checked for its own phase: two would be two plans for one run
        raise CaffememError(f"not a caffemem plan: phase {twice} is given twice in 'phases'", where)
    chosen = [entry for entry in phases if not phase or entry["phase"] == phase.upper()]
    if not chosen:
        raise CaffememError(f"the plan has no phase {phase}" if phase else "the plan's 'phases' list is empty", where)
    return [(entry["phase"], plan_from_json(entry, file), entry.get("made_for")) for entry in chosen]


RERUN = "; rerun `caffemem optimize` on this net (with the input shapes and phase you run it with) to write a new table"


def bind_violations(schedule: Schedule, plan: PlanData, net_name: str) -> list[Violation]:
    """What the patched Caffe's Net::Init says of this table for this net: the first
    mismatch MemorySlots::Bind stops at (caffemem/runtime/cpp/common/src/caffe/util/
    mem_slots.cpp, step 1: slots in table order, each member's kind, name (a buffer only
    where its layer's NamedBuffers lists it, layers/bound_buffers.py), storage and
    fit, then each slot's size against its members' end), worded as it words it.  Sizes
    are each storage's bytes in the net as built: a table planned for another batch or
    other inputs fails here, before any replay."""
    shaped = schedule.shaped
    where = f"net {net_name} (phase {shaped.graph.phase})"
    float_bytes = DTYPE_BYTES[schedule.dtype]
    params = {f"{layer.index}:{layer.name}#{j}": shape for layer, shapes in zip(shaped.graph.layers, shaped.layer_shapes) for j, shape in enumerate(shapes.params)}

    def storage_of(blob: str, kind: str) -> tuple[object, int | None]:
        """(what Caffe keeps as one SyncedMemory, its bytes or None when the net has no such storage)."""
        for id_kind in ("blob", "buffer", "param"):
            storage = schedule.class_of.get((BlobId(id_kind, blob), kind))  # type: ignore[arg-type]
            if storage is not None and not runtime_binds(shaped.graph, BlobId(id_kind, blob)):
                return (blob, kind), None  # a buffer no NamedBuffers lists: Bind cannot name it
            if storage is not None:
                return storage, schedule.classes[storage].bytes
        shape = shaped.blob_shapes.get(blob, params.get(blob))  # a storage the run never touches
        return (blob, kind), None if shape is None else count(shape) * float_bytes

    members: dict[int, list[tuple[str, str, int]]] = {}
    for blob, kind, slot, offset in plan.assign:
        members.setdefault(slot, []).append((blob, kind, offset))
    seen: set[tuple[str, str]] = set()
    placed: dict[object, tuple[int, int, str]] = {}
    for slot, slot_bytes in plan.slot_bytes.items():
        end = 0
        for blob, kind, offset in members.get(slot, []):
            name = f"{blob} ({kind})"
            fail = lambda message: [Violation(0, "Net::Init", blob, message + RERUN)]  # noqa: E731
            if kind not in ("data", "diff"):
                return fail(f'mem_param slot {slot}: member {blob} has kind "{kind}"; expected "data" or "diff"')
            if (blob, kind) in seen:
                return fail(f"mem_param slot {slot}: {name} is listed twice in the slot table")
            seen.add((blob, kind))
            if names_two_storages(shaped, blob):
                return fail(f"mem_param slot {slot}: {blob} names both a blob and a layer buffer or parameter of {where}, so the slot table cannot tell which it means: rename the blob")
            storage, size = storage_of(blob, kind)
            if size is None:
                buffer = " or layer buffer this Caffe can bind" if ":" in blob else ""
                return fail(f"blob {blob} of mem_param slot {slot} is not a blob{buffer} of {where}: the net does not match the slot table (edited after `caffemem optimize`?)")
            if size == 0:
                return fail(f"blob {blob} of {where} is empty, but mem_param slot {slot} plans its {kind}")
            if offset + size > slot_bytes:
                return fail(
                    f"blob {blob} of {where} does not match the slot table: its {kind} ({size} bytes at offset {offset}) does not fit in slot {slot} "
                    f"({slot_bytes} bytes); the table was planned for other shapes (another batch size?)"
                )
            end = max(end, offset + size)
            first = placed.setdefault(storage, (slot, offset, name))
            if first[:2] != (slot, offset):
                return fail(f"{name} and {first[2]} are one storage in {where} but the slot table puts them in different places")
        if end != slot_bytes:
            return [Violation(0, "Net::Init", f"slot {slot}", f"mem_param slot {slot} has {slot_bytes} bytes but the storages of {where} it holds need {end}: the table was planned for other shapes (another batch size?) or another net{RERUN}")]
    return []


def recompute_entries(schedule: Schedule, plan: PlanData, specs: SpecTable, net_name: str) -> tuple[tuple[Recomputation, ...], list[Violation]]:
    """The table's recompute entries as the run takes them, and what stops it: Net::Init's
    checks (each layer and ``before`` a layer of the net, and the only one of its name, the
    layer not after ``before``, no entry twice, ``restore_params`` only on a layer with
    parameters: the runtime's
    LOG(FATAL)s), then what only the layer specs know (LayerSpec.recompute: a Forward that
    draws random numbers, advances a cursor or keeps state may not run twice; BatchNorm in
    TRAIN only with its parameters restored)."""
    graph = schedule.shaped.graph
    index = {layer.name: layer.index for layer in graph.layers}
    shared = names_given_twice(graph)
    where = f"net {net_name} (phase {graph.phase})"
    entries: list[Recomputation] = []
    seen: set[tuple[str, str]] = set()
    backward = {step.layer for step in schedule.steps if step.kind == "backward"}
    for layer, before, restore in plan.recompute:
        fail = lambda message: (tuple(entries), [Violation(0, "Net::Init", layer, message + RERUN)])  # noqa: E731
        for name in (layer, before):
            if name not in index:
                return fail(f"mem_param recompute: {name} is not a layer of {where}")
        for name in (layer, before):
            if name in shared:
                return fail(f"mem_param recompute: {name} names {shared[name]} layers of {where}: Caffe lets layers share a name, but a recompute entry must name one layer; give each its own name")
        if index[layer] > index[before]:
            return fail(f"mem_param recompute: {layer} runs again before the Backward of {before}, an earlier layer of {where}")
        if (layer, before) in seen:
            return fail(f"mem_param recompute: {layer} before {before} is listed twice")
        seen.add((layer, before))
        params = schedule.shaped.layer_shapes[index[layer]].params
        if restore and not params:
            return fail(f"mem_param recompute: {layer} has no parameters to restore")
        proto = graph.layers[index[layer]]
        fact = recompute_of(specs.get(proto.type), proto.proto, graph.phase)
        if not fact.safe:
            return tuple(entries), [Violation(0, "plan", layer, f"its Forward may not run twice ({fact.why})")]
        if fact.restores_params and not restore:
            return tuple(entries), [Violation(0, "plan", layer, "its Forward changes its parameters (running averages), so running it again needs restore_params")]
        if index[before] not in backward:
            return tuple(entries), [Violation(0, "plan", layer, f"{before} runs no Backward in this net: a recomputation belongs before a Backward that reads what it writes, so this one reads nothing back")]
        entries.append(Recomputation(index[layer], index[before], restore))
    return tuple(entries), []


@dataclass(frozen=True, slots=True)
class Placement:
    """Where a storage class sits: bytes [start, end) of a slot."""

    slot: int
    start: int
    end: int

    def collides(self, other: "Placement") -> bool:
        return self.slot == other.slot and self.start < other.end and other.start < self.end


def verify_plan_on(schedules: Iterable[Schedule], plan: PlanData) -> list[Violation]:
    """The verifier on every run the plan must be right in (in GPU mode: the planning run
    and the CPU run of the same net); a violation both runs meet (the same step, storage
    and words) is one."""
    return list(dict.fromkeys(violation for schedule in schedules for violation in verify_plan(schedule, plan)))


def verify_plan(schedule: Schedule, plan: PlanData) -> list[Violation]:
    """Every way the plan would corrupt a run (empty: the plan is safe)."""
    violations: list[Violation] = []
    place: dict[int, Placement] = {}
    for blob, kind, slot, offset in plan.assign:
        storage = schedule.class_named(blob, kind)
        if slot not in plan.slot_bytes:
            violations.append(Violation(0, "plan", blob, f"assigned to slot {slot}, which the plan does not define"))
            continue
        if storage is None:
            known = blob in schedule.shaped.blob_shapes or (kind == "data" and _names_a_bound_buffer(schedule, blob))
            if not known or kind not in ("data", "diff"):
                violations.append(Violation(0, "plan", blob, f"no {kind} storage of this name in the net"))
            continue  # a storage the run never touches (or a layer buffer it never allocates): never allocated
        if storage in schedule.init_touched:
            violations.append(Violation(0, "init", blob, f"its {kind} is filled during Net::Init, before the plan's slots take over, which discards it"))
        size = schedule.classes[storage].bytes
        where = Placement(slot, offset, offset + size)
        previous = place.setdefault(storage, where)
        if previous != where:
            violations.append(Violation(0, "plan", blob, f"its {kind} storage is placed twice (slot {previous.slot} at {previous.start} and slot {slot} at {offset})"))
        if offset < 0 or offset + size > plan.slot_bytes[slot]:
            violations.append(Violation(0, "plan", blob, f"{kind} needs bytes {offset}..{offset + size}, slot {slot} has {plan.slot_bytes[slot]}"))

    return violations + recompute_violations(schedule) + replay_violations(schedule, place)


def recompute_violations(schedule: Schedule) -> list[Violation]:
    """Every read that the recomputed Forwards change (empty: the schedule is sound, before
    any plan).  Each class is tagged with the step that last wrote it, a Forward run again
    writing what its first run wrote only when it read what that run read; then every
    Backward must read what it read in the run without recomputation, and every recomputed
    Forward what its first run read: nothing is recomputed from a value that is gone, or
    read after a recomputation overwrote it (an in-place chain recomputed from its middle)."""
    if not any(step.kind == "recompute" for step in schedule.steps):
        return []
    plain = {(step.kind, step.layer): reads for step, reads in _traced(step for step in schedule.steps if step.kind != "recompute")}
    label = {c.id: c.owner for c in schedule.classes}
    violations: list[Violation] = []
    for step, reads in _traced(schedule.steps):
        expected = plain[("forward" if step.kind == "recompute" else step.kind, step.layer)]
        if step.kind == "recompute":  # its parameters aside (restore_params): compare what it reads
            read = {storage for storage, _ in reads}
            expected = [(storage, value) for storage, value in expected if storage in read]
        if reads != expected:
            storage, value, wanted = next((a[0], a[1], b[1]) for a, b in zip(reads + [(None, None)], expected + [(None, None)]) if a != b)
            violations.append(Violation(step.index, schedule.step_name(step), label.get(storage, "?"), f"reads {_origin(schedule, value)} where the run without recomputation reads {_origin(schedule, wanted)}"))
    return violations


def _traced(steps: Iterable) -> Iterable[tuple[object, list[tuple[int, object]]]]:
    """Each step with its reads, in order, as (storage, the value read): a value is the
    (kind, layer) of the step that wrote it ("self": this step, earlier), a recomputed
    Forward's the same as its first run's if it read the same values (else a value of its
    own, which no plain step reads)."""
    value: dict[int, object] = {}
    first_reads: dict[int | None, list] = {}
    for step in steps:
        reads: list[tuple[int, object]] = []
        written: set[int] = set()  # a set: Net::Init's step writes every storage (issue 33: a list was quadratic)
        for access in step.accesses:
            if access.write:
                written.add(access.storage)
            else:
                reads.append((access.storage, "self" if access.storage in written else value.get(access.storage)))
        origin: object = (step.kind, step.layer)
        if step.kind == "recompute":
            plain = first_reads.get(step.layer, [])
            origin = ("forward", step.layer) if all(pair in plain for pair in reads) else ("recompute", step.index)
        for storage in written:
            value[storage] = origin
        if step.kind == "forward":
            first_reads[step.layer] = reads
        yield step, reads


def _origin(schedule: Schedule, value: object) -> str:
    if value is None:
        return "nothing (never written)"
    if value == "self":
        return "what this step wrote"
    kind, where = value  # type: ignore[misc]
    if kind == "recompute":
        return f"what the recomputation at step {where} wrote from other values"
    if where is None:
        return "what Net::Init wrote"
    return f"what {kind} {schedule.shaped.graph.layers[where].name} wrote"


def _names_a_bound_buffer(schedule: Schedule, buffer: str) -> bool:
    """Is ``buffer`` ("<index>:<layer>/<name>") a layer buffer the patched Caffe binds
    (bound_buffers.runtime_binds)?  One this run never touches is never allocated: a cuDNN
    workspace in a CPU run (Caffe's own convolution takes none), ContrastiveLoss's
    ``diff_sq_``, which only its GPU code writes (contrastive_loss_layer.cu 18-22)."""
    return runtime_binds(schedule.shaped.graph, BlobId("buffer", buffer))


def replay_violations(schedule: Schedule, place: dict[int, Placement], shadow: "ShadowMemory | None" = None) -> list[Violation]:
    """Replay the run over shadow memory where each placed storage class sits in its slot:
    every read of bytes another class overwrote since, and every write over bytes another
    class uses in the same step.  (``shadow``: another model of the same memory, for tests.)"""
    violations: list[Violation] = []
    label = {c.id: c.owner for c in schedule.classes}
    shadow = shadow or ShadowMemory(place)
    clobbered_by: dict[int, int] = {}  # storage -> the storage that overwrote its bytes since it wrote them
    for step in schedule.steps:
        name = schedule.step_name(step)
        first_write: dict[int, bool] = {}
        written: dict[int, None] = {}  # in order of first write; a dict, not a list: Net::Init's step writes every storage
        for access in step.accesses:
            if access.storage not in place:
                continue
            first_write.setdefault(access.storage, access.write)
            if access.write:
                written.setdefault(access.storage)
        for storage, writes_first in first_write.items():
            culprit = clobbered_by.get(storage)
            if not writes_first and culprit is not None:
                violations.append(Violation(step.index, name, label[storage], f"reads bytes that '{label[culprit]}' overwrote (slot {place[storage].slot})"))
        sharing = shadow.sharing(list(first_write)) if written else {}
        for storage in written:
            for other in sharing[storage]:
                violations.append(Violation(step.index, name, label[storage], f"writes slot {place[storage].slot} over '{label[other]}', which the same step uses"))
        for storage in written:
            clobbered_by.pop(storage, None)
            for other in shadow.write(storage):
                clobbered_by.setdefault(other, storage)
    return violations


class ShadowMemory:
    """Shadow memory of the plan's slots, for one question per write: which storages that
    nothing has overwritten since they last wrote (or ever) does this write overwrite?

    Each slot keeps, as sorted segments, the storage that last wrote each byte: a storage
    untouched since its write still owns all its bytes, so the owners of the written bytes
    are the answer.  Storages that own no segment — never written yet, or of zero bytes —
    are *watched*: a max-tree over them (by slot and offset) finds those the write meets.
    A write costs O(log n) plus what it overwrites, where pairing every two storages that
    share bytes cost O(n^2) on a slot shared by n."""

    def __init__(self, place: dict[int, Placement]) -> None:
        self.place = place
        self.ordered = sorted(place, key=lambda storage: (place[storage].slot, place[storage].start))
        self.rank = {storage: i for i, storage in enumerate(self.ordered)}
        self.slot_first: dict[int, int] = {}  # slot -> rank of its first storage
        self.slot_starts: dict[int, list[int]] = {}  # slot -> its storages' offsets, in rank order
        for i, storage in enumerate(self.ordered):
            self.slot_first.setdefault(place[storage].slot, i)
            self.slot_starts.setdefault(place[storage].slot, []).append(place[storage].start)
        self.segments: dict[int, tuple[list[int], list[int], list[int]]] = {}  # slot -> (starts, ends, owners)
        self.size = 1
        while self.size < len(self.ordered):
            self.size *= 2
        self.watched = [_NOTHING] * (2 * self.size)  # max end of the watched storages below a node
        for storage in self.ordered:
            self._watch(storage, True)

    def sharing(self, storages: list[int]) -> dict[int, list[int]]:
        """Which of ``storages`` share bytes with which, each list by slot and offset: a
        sweep by offset pairs only true overlaps."""
        place = self.place
        ordered = sorted(storages, key=self.rank.__getitem__)
        sharing: dict[int, list[int]] = {storage: [] for storage in ordered}
        for i, storage in enumerate(ordered):
            here = place[storage]
            for other in ordered[i + 1 :]:
                there = place[other]
                if there.slot != here.slot or there.start >= here.end:
                    break
                if here.collides(there):
                    sharing[storage].append(other)
                    sharing[other].append(storage)
        return sharing

    def _watch(self, storage: int, on: bool) -> None:
        node = self.rank[storage] + self.size
        self.watched[node] = self.place[storage].end if on else _NOTHING
        node //= 2
        while node:
            self.watched[node] = max(self.watched[2 * node], self.watched[2 * node + 1])
            node //= 2

    def _watched_overlapping(self, where: Placement) -> list[int]:
        """Watched storages of the slot with start < where.end and end > where.start."""
        first = self.slot_first[where.slot]
        last = first + bisect_left(self.slot_starts[where.slot], where.end)
        found: list[int] = []
        pending = [(1, 0, self.size)]
        while pending:
            node, low, high = pending.pop()
            if high <= first or last <= low or self.watched[node] <= where.start:
                continue
            if node >= self.size:
                found.append(self.ordered[node - self.size])
                continue
            middle = (low + high) // 2
            pending += [(2 * node + 1, middle, high), (2 * node, low, middle)]
        return found

    def write(self, storage: int) -> list[int]:
        """Record that ``storage`` writes its bytes; the storages it overwrites (those that
        may still think they own them: the caller keeps the first overwriter of each)."""
        where = self.place[storage]
        self._watch(storage, False)
        hit = [other for other in self._watched_overlapping(where) if other != storage]
        for other in hit:
            self._watch(other, False)
        starts, ends, owners = self.segments.setdefault(where.slot, ([], [], []))
        if where.start == where.end:  # owns no byte: a write inside another's bytes still counts
            i = bisect_left(starts, where.start)
            if i and ends[i - 1] > where.start and owners[i - 1] != storage:
                hit.append(owners[i - 1])
            self._watch(storage, True)
            return hit
        first, last = bisect_right(ends, where.start), bisect_left(starts, where.end)
        hit += [owner for owner in owners[first:last] if owner != storage]
        new_starts, new_ends, new_owners = [where.start], [where.end], [storage]
        if first < last and starts[first] < where.start:
            new_starts.insert(0, starts[first])
            new_ends.insert(0, where.start)
            new_owners.insert(0, owners[first])
        if first < last and ends[last - 1] > where.end:
            new_starts.append(where.end)
            new_ends.append(ends[last - 1])
            new_owners.append(owners[last - 1])
        starts[first:last], ends[first:last], owners[first:last] = new_starts, new_ends, new_owners
        return hit


_NOTHING = float("-inf")

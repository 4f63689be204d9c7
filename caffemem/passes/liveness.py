"""Pass 8, liveness: when each storage class holds a value someone will still read.

Entry point: :func:`lifetimes`.  A class is live from the step that first writes it to
the step that last reads it.  What may never share storage, by default: the net's inputs
(data-layer tops) and outputs, loss tops, parameters, every ``--exclude-blob``, any class
read before it is written (Caffe relies on a fresh SyncedMemory being zero-filled, e.g. a
Split summing a gradient nobody wrote), and any class Net::Init touches (a plan's storage
takes over only when Init ends, discarding what Init wrote; layers read it later, not
always in a way that allocates, e.g. a convolution's geometry blobs).  Layer buffers that
every step refills before reading (the im2col column buffer) may share with
``share_buffers``, if the patched Caffe can bind them by name (layers/bound_buffers.py:
not the blobs of a recurrent layer's unrolled net).  The lower bound is the peak, over the
steps, of the bytes of shareable classes alive together.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from caffemem.graph import Graph
from caffemem.layers.access import BlobId
from caffemem.layers.bound_buffers import runtime_binds
from caffemem.passes.schedule import Schedule, StorageClass, names_two_storages


@dataclass(frozen=True, slots=True)
class Lifetime:
    """One storage class's live steps: a span, or for a scratch buffer single steps."""

    storage: int
    bytes: int
    spans: tuple[tuple[int, int], ...]  # inclusive [first, last] step ranges

    @property
    def start(self) -> int:
        return self.spans[0][0]

    @property
    def end(self) -> int:
        return self.spans[-1][1]

    def overlaps(self, other: "Lifetime") -> bool:
        return any(a0 <= b1 and b0 <= a1 for a0, a1 in self.spans for b0, b1 in other.spans)


@dataclass(frozen=True)
class Liveness:
    schedule: Schedule
    shareable: tuple[Lifetime, ...]  # what a planner may assign to slots
    kept: dict[int, str]  # storage class -> why it keeps its own storage
    lower_bound_peak: int  # most bytes of shareable classes alive at one step
    peak_step: int
    alive_at_peak: tuple[int, ...]  # storage classes alive at the peak step
    # The classes kept only for KEEPS_VALUES: shareable once a recomputation refills every
    # value (plan/figures.py finds which recomputation does, without measuring it whole).
    liftable: frozenset[int] = frozenset()


def net_outputs_of(graph: Graph) -> set[str]:
    """Blobs no layer consumes (Caffe's net outputs), as Net::Init's available_blobs."""
    available: set[str] = set()
    for layer in graph.layers:
        available.difference_update(layer.bottoms)
        available.update(layer.tops)
    return available


def _touches(schedule: Schedule) -> dict[int, list[tuple[int, bool, bool]]]:
    """storage -> [(step, first access in the step is a write, the step reads it)]."""
    seen: dict[int, list[tuple[int, bool, bool]]] = {}
    for step in schedule.steps:
        first: dict[int, bool] = {}
        reads: set[int] = set()
        for access in step.accesses:
            first.setdefault(access.storage, access.write)
            if not access.write:
                reads.add(access.storage)
        for storage, writes_first in first.items():
            seen.setdefault(storage, []).append((step.index, writes_first, storage in reads))
    return seen


def lifetimes(schedule: Schedule, exclude: Iterable[str] = (), share_buffers: bool = False, keep: Mapping[tuple[BlobId, str], str] | None = None) -> Liveness:
    """Every class's lifetime and which classes a planner may share (``keep``: storages,
    as (blob, part), that another run of the net needs private, with why)."""
    excluded_blobs = set(exclude) | schedule.data_tops | schedule.loss_tops | net_outputs_of(schedule.shaped.graph)
    touches = _touches(schedule)
    recompute_steps = frozenset(step.index for step in schedule.steps if step.kind == "recompute")
    shareable: list[Lifetime] = []
    kept: dict[int, str] = {}
    liftable: set[int] = set()
    for storage in schedule.classes:
        uses = touches.get(storage.id)
        if not uses:
            continue  # never touched: never allocated
        reason = _kept_reason(storage, _values(storage, uses, recompute_steps), recompute_steps, excluded_blobs, share_buffers, storage.id in schedule.init_touched)
        if reason == KEEPS_VALUES and not _private_reason(schedule, storage, keep):
            liftable.add(storage.id)
        reason = reason or _private_reason(schedule, storage, keep)
        if reason:
            kept[storage.id] = reason
            continue
        shareable.append(Lifetime(storage.id, storage.bytes, _spans(storage, uses, recompute_steps)))

    peak, peak_step, alive = _peak(shareable, len(schedule.steps))
    return Liveness(schedule, tuple(shareable), kept, peak, peak_step, alive, frozenset(liftable))


def _private_reason(schedule: Schedule, storage: StorageClass, keep: Mapping[tuple[BlobId, str], str] | None) -> str | None:
    """Why a class whose values allow sharing still keeps its own storage: what the
    runtime cannot bind, a name the slot table cannot resolve, no bytes, a caller's keep."""
    if not runtime_binds(schedule.shaped.graph, BlobId(storage.kind, storage.owner)):
        return UNBOUND
    if names_two_storages(schedule.shaped, storage.owner):
        return TWO_STORAGES
    if storage.bytes == 0:
        return "empty (a zero-sized blob allocates nothing, so there is nothing to share)"
    if keep:
        return next((keep[member] for member in storage.members if member in keep), None)
    return None


def kept_members(liveness: Liveness) -> dict[tuple[BlobId, str], str]:
    """Every storage (blob, part) the liveness keeps private, with why."""
    classes = liveness.schedule.classes
    return {member: why for storage, why in liveness.kept.items() for member in classes[storage].members}


# A slot-table member is its class's owner (plan_data), which MemorySlots::Bind looks up by name.
UNBOUND = "a layer buffer the patched Caffe cannot bind by name (its layer's NamedBuffers does not list it; a recurrent layer's unrolled net is a Net of its own)"


KEEPS_VALUES = "a layer buffer that keeps values between steps"  # the one reason a recomputation can lift (plan/figures.py)


TWO_STORAGES = "its name is both a net blob's and a layer buffer's or parameter's, and the slot table finds storage by name: rename the blob to plan it"


def _values(storage: StorageClass, uses, recompute_steps: frozenset[int]) -> list[list[tuple[int, bool, bool]]]:
    """The values a class holds, each the uses from its write to the next value's write.
    A blob holds one, and one more from each recomputed Forward that writes it first
    (passes/recompute.py); a scratch buffer a new one at every step that writes it first."""
    values: list[list[tuple[int, bool, bool]]] = [[]]
    for use in uses:
        step, writes_first, _ = use
        if values[-1] and writes_first and (storage.kind == "buffer" or step in recompute_steps):
            values.append([])
        values[-1].append(use)
    return values


def _spans(storage: StorageClass, uses, recompute_steps: frozenset[int]) -> tuple[tuple[int, int], ...]:
    """The steps a shareable class holds a value someone reads: each value from its write
    to its last read (a scratch buffer refilled at every step: each step alone); between
    a value's last read and a recomputed Forward's write it holds nothing anyone reads."""
    spans = []
    for value in _values(storage, uses, recompute_steps):
        start = value[0][0]
        last_read = max((step for step, _, read in value if read), default=start)
        spans.append((start, max(last_read, start)))
    return tuple(spans)


def _kept_reason(storage: StorageClass, values, recompute_steps: frozenset[int], excluded: set[str], share_buffers: bool, init_touched: bool) -> str | None:
    if storage.kind == "param":
        return "a parameter"
    if storage.kind == "buffer" and not share_buffers:
        return "a layer buffer (see --share-buffers)"
    hit = sorted({blob.name for blob, _ in storage.members} & excluded) if storage.kind == "blob" else []
    if hit:
        return f"'{hit[0]}' is an input, output, loss or excluded blob"
    if init_touched:
        return "filled during Net::Init (a plan takes over storage only when Init ends)"
    if storage.kind == "buffer":
        # Refilled at every step, or a value a recomputed Forward writes for the Backward
        # that reads it (the same refill, once more); a value Forward leaves for Backward stays.
        refilled = all(value[0][1] and (len(value) == 1 or value[0][0] in recompute_steps) for value in values)
        return None if refilled else KEEPS_VALUES
    if not values[0][0][1]:
        return "read before it is written (relies on zero-filled fresh memory)"
    return None


def _peak(shareable: list[Lifetime], steps: int) -> tuple[int, int, tuple[int, ...]]:
    """Sweep the steps: the most bytes alive at once, where, and what."""
    delta = [0] * (steps + 1)
    for life in shareable:
        for start, end in life.spans:
            delta[start] += life.bytes
            delta[end + 1] -= life.bytes
    best, best_step, running = 0, 0, 0
    for step in range(steps):
        running += delta[step]
        if running > best:
            best, best_step = running, step
    alive = tuple(life.storage for life in shareable if any(s <= best_step <= e for s, e in life.spans))
    return best, best_step, alive

"""Pass 9, plan: assign shareable storage to slots.

A slot is one block of memory; a member sits at an offset in it.  Whole-slot sharing
(every offset 0, a slot as large as its largest member) is what the memory-multiloading
fork can express; packing members at offsets gets close to the lower bound.

Entry point: :func:`make_plan`.  Strategies:
- ``packed``: one slot; largest class first, at the lowest offset where it overlaps no
  class alive at the same time (greedy by size, as TFLite's arena planner), and other
  greedy orders; when none reaches the lower bound on a small net, a bounded search for
  a packing at the bound (:func:`packing_within`);
- ``best-fit``: largest class first, into the slot it grows least (ties: least waste);
- ``first-fit``: in order of first use, into the first slot that is free (lowest index);
- ``exact``: branch and bound over slot assignments for small nets, within a time limit;
- ``auto``: every strategy that applies (and the fork's plan, see fork.py), keeping the
  smallest safe total — the choice is made by the optimizer after replay and verify.

The free slot and the free hole each class needs come from the trees of intervals.py,
not from a scan of every slot or placed class, so planning a net of n layers costs
O(n log n) (packing: plus the holes it has to look past in fragmented memory); the plans
are those of the direct scans (tests/reference_planners.py).
"""

from __future__ import annotations

import itertools
import math
import time
from bisect import bisect_left
from collections.abc import Callable
from dataclasses import dataclass, replace

from caffemem.passes.liveness import Lifetime, Liveness, _peak
from caffemem.plan.intervals import Occupancy, Runs, SlotTree, step_runs

EXACT_MAX_CLASSES = 24
EXACT_SECONDS = 2.0


@dataclass(frozen=True)
class Slot:
    id: int
    bytes: int
    members: tuple[int, ...]  # storage class ids
    offsets: tuple[int, ...] = ()  # byte offset of each member (empty: all at 0)

    def placements(self) -> list[tuple[int, int]]:
        return list(zip(self.members, self.offsets or (0,) * len(self.members)))


@dataclass(frozen=True)
class Plan:
    strategy: str
    slots: tuple[Slot, ...]
    notes: tuple[str, ...] = ()

    @property
    def slot_bytes(self) -> int:
        return sum(slot.bytes for slot in self.slots)

    def slot_of(self) -> dict[int, int]:
        return {member: slot.id for slot in self.slots for member in slot.members}


def _fill(strategy: str, ordered: list[Lifetime], new_position) -> Plan:
    """Each class, in order, into the first free slot in the order of slot positions, or
    into a new slot at ``new_position(life)``; slot ids are in order of opening."""
    tree = SlotTree(len(ordered))
    slot_at: dict[int, int] = {}  # position -> slot id
    members: list[list[int]] = []
    sizes: list[int] = []
    for life in ordered:
        runs = step_runs(life.spans)
        position = tree.first_free(runs)
        if position is None:
            position = new_position(life)
            slot_at[position] = len(members)
            members.append([])
            sizes.append(0)
            tree.open(position, runs)
        else:
            tree.add(position, runs)
        slot = slot_at[position]
        members[slot].append(life.storage)
        sizes[slot] = max(sizes[slot], life.bytes)
    return Plan(strategy, tuple(Slot(i, size, tuple(group)) for i, (size, group) in enumerate(zip(sizes, members))))


def best_fit(lives: tuple[Lifetime, ...]) -> Plan:
    """Largest first; each into the compatible slot it grows least, then wastes least.

    A slot is as large as its first member, the largest, so that is the smallest slot that
    is free, then the lowest id: slots take positions in blocks by size, smallest first."""
    block_start: dict[int, int] = {}  # size -> the first position of slots of that size
    first = 0
    for size, group in itertools.groupby(sorted(life.bytes for life in lives)):
        block_start[size], first = first, first + len(list(group))
    opened: dict[int, int] = {}

    def new_position(life: Lifetime) -> int:
        opened[life.bytes] = opened.get(life.bytes, -1) + 1
        return block_start[life.bytes] + opened[life.bytes]

    return _fill("best-fit", sorted(lives, key=lambda l: (-l.bytes, l.start, l.storage)), new_position)


def first_fit(lives: tuple[Lifetime, ...]) -> Plan:
    """In order of first use, into the lowest-numbered slot that is free then."""
    opened = itertools.count()
    return _fill("first-fit", sorted(lives, key=lambda l: (l.start, -l.bytes, l.storage)), lambda life: next(opened))


def exact(lives: tuple[Lifetime, ...], seconds: float = EXACT_SECONDS) -> Plan | None:
    """Branch and bound: the cheapest assignment, or None when the net is too large.

    Classes go largest first, so a slot's size is fixed by its first member; a class
    either joins a compatible slot (free) or opens one (its size).  The bound is the
    cost so far; the incumbent starts from best-fit."""
    if len(lives) > EXACT_MAX_CLASSES:
        return None
    order = sorted(lives, key=lambda l: (-l.bytes, l.start, l.storage))
    incumbent = best_fit(lives)
    best_cost = incumbent.slot_bytes
    best_assign: list[list[Lifetime]] | None = None
    deadline = time.monotonic() + seconds
    timed_out = False
    slots: list[list[Lifetime]] = []

    def search(i: int, cost: int) -> None:
        nonlocal best_cost, best_assign, timed_out
        if cost >= best_cost:
            return
        if i == len(order):
            best_cost, best_assign = cost, [list(s) for s in slots]
            return
        if time.monotonic() > deadline:
            timed_out = True
            return
        life = order[i]
        for slot in slots:
            if not any(life.overlaps(other) for other in slot):
                slot.append(life)
                search(i + 1, cost)
                slot.pop()
        slots.append([life])
        search(i + 1, cost + life.bytes)
        slots.pop()

    search(0, 0)
    note = ("time limit reached: best found so far",) if timed_out else ("optimal",)
    if best_assign is None:
        return Plan("exact", incumbent.slots, note)
    return Plan("exact", tuple(Slot(i, max(l.bytes for l in s), tuple(l.storage for l in s)) for i, s in enumerate(best_assign)), note)


PACKING_ORDERS = {
    "size": lambda l: (-l.bytes, l.start, l.storage),
    "area": lambda l: (-l.bytes * (l.end - l.start + 1), -l.bytes, l.storage),
    "start": lambda l: (l.start, -l.bytes, l.storage),
    "length": lambda l: (-(l.end - l.start), -l.bytes, l.storage),
}


def _pack(
    lives: tuple[Lifetime, ...], order, best_gap: bool, beaten_at: int | None = None, work_budget: int | None = None
) -> tuple[int, list[tuple[Lifetime, int]]] | None:
    """Place each class, in the given order, at the lowest offset (or, with best_gap, in
    the tightest gap) free of every placed class whose lifetime overlaps its own.  None
    once the packing reaches ``beaten_at`` bytes (it can only end as large or larger), or
    once its searches have crossed more than ``work_budget`` holes (see :func:`packed`)."""
    ordered = sorted(lives, key=order)
    occupancy = Occupancy(max((life.end for life in ordered), default=0) + 1)
    placed: list[tuple[Lifetime, int]] = []
    size = 0
    for life in ordered:
        runs = step_runs(life.spans)
        if life.bytes == 0:
            offset = _tightest_gap_for_nothing(placed, life) if best_gap else 0
        elif best_gap:
            offset = occupancy.tightest_hole(runs, life.bytes)
        else:
            offset = occupancy.lowest_hole(runs, life.bytes)
        occupancy.place(runs, offset, offset + life.bytes)
        placed.append((life, offset))
        size = max(size, offset + life.bytes)
        if beaten_at is not None and size >= beaten_at:
            return None
        if work_budget is not None and occupancy.looked_past > work_budget:
            return None
    return size, placed


def _tightest_gap_for_nothing(placed: list[tuple[Lifetime, int]], life: Lifetime) -> int:
    """A zero-byte class fits any hole, even an empty one between two touching ranges,
    which merged summaries do not keep: its tightest hole comes from the placed classes
    directly (rare: a blob with a zero dimension).  The first gap is always offset 0."""
    ranges = sorted(
        ((offset, offset + other.bytes) for other, offset in placed for start, end in other.spans if any(start <= e and end >= s for s, e in life.spans)),
        key=lambda r: r[0],
    )
    best_offset, best_hole, reach = 0, None, 0
    for low, high in ranges:
        if low >= reach and (best_hole is None or low - reach < best_hole):
            best_offset, best_hole = reach, low - reach
        reach = max(reach, high)
    return best_offset


def most_alive(lives: tuple[Lifetime, ...]) -> int:
    """The most bytes of ``lives`` alive at one step (liveness's sweep): no packing is smaller."""
    return _peak(list(lives), max((life.end for life in lives), default=-1) + 1)[0]


HOLES_PER_CLASS_LOG = 32  # work budget of a packing after the first: holes crossed per class and log2(classes)


def packing_work_budget(classes: int) -> int:
    """How many holes a packing after the first may cross: HOLES_PER_CLASS_LOG n log2 n.
    The searches cross every hole below their answer; on fragmented memory
    (biggest-area-first on deep Inception-style nets in training) that grows as n², so
    such a packing is given up — the first one (largest first) always finishes.  On the real nets of the ground truth
    no packing crosses more than 3 n log2 n, on generated nets of 10,000 layers 20."""
    return HOLES_PER_CLASS_LOG * classes * math.ceil(math.log2(max(classes, 2)))


class _OverBudget(Exception):
    """packing_within's search has done its work: it gives up at once."""


SEARCH_WORK = 200_000  # packing_within's budget: classes and positions looked at (about a second)


def search_work(classes: int) -> int:
    """The work a net of n classes must leave the search for it to be tried: twice what its
    first descent costs at least (each of n placements looks at every class still to
    place, n(n+1)/2).  A larger net (over some 450 classes) is not searched."""
    return classes * (classes + 1)


def packing_within(lives: tuple[Lifetime, ...], capacity: int, work: int = SEARCH_WORK) -> list[tuple[Lifetime, int]] | None:
    """A packing of every class into ``capacity`` bytes, or None when there is none or it
    was not found within ``work`` (a depth-first search; the classes and positions it
    looked at).

    Every packing can be pushed down until each class rests on the floor or on a class
    alive at one of its steps; taken in order of offset, each class is then at 0 or at the
    top of one placed before it.  The search places classes in that order (ties: earliest
    first), so it misses no packing; its first descent is the greedy "lowest class next"
    (a skyline packing).  A branch is cut when, at some step, the classes still to place
    need more bytes than are free above the current offset.  The greedy orders of
    :func:`packed` place one class at a time where it fits now; on the siamese net
    (fixtures/siamese) each stacks the four largest classes (the conv1 activations and
    gradients of both towers) at one offset, so the long-lived small blobs alive beside
    any of them end above it all — 6.5% over the bound, which this search reaches."""
    import numpy as np

    order = sorted((life for life in lives if life.bytes), key=lambda l: (l.start, -l.bytes, l.storage))
    n = len(order)
    sizes = np.array([life.bytes for life in order], dtype=np.int64)
    if n == 0 or int(sizes.max()) > capacity:
        return [(life, 0) for life in lives] if n == 0 else None
    owner = np.array([i for i, life in enumerate(order) for _ in life.spans])
    first, last = (np.array([span[k] for life in order for span in life.spans]) for k in (0, 1))
    spans_of = np.zeros((n, len(owner)), dtype=np.int64)
    spans_of[owner, np.arange(len(owner))] = 1
    meet = (first[:, None] <= last[None, :]) & (first[None, :] <= last[:, None])  # spans alive at one step
    together = (spans_of @ meet.astype(np.int64) @ spans_of.T) > 0
    np.fill_diagonal(together, False)
    overlapping = [np.flatnonzero(row).tolist() for row in together]
    starts = np.unique(first)  # the most alive is at a start
    alive = ((starts[:, None] >= first[None, :]) & (starts[:, None] <= last[None, :])).astype(np.int64) @ spans_of.T
    offsets = np.zeros(n, dtype=np.int64)
    placed = np.zeros(n, dtype=bool)
    busy = [Runs() for _ in range(n)]  # per class still to place: the bytes taken beside it
    spent = 0

    def fits_above(floor: int) -> bool:
        """Each step's classes still to place fit in the bytes free above ``floor``."""
        above = np.clip(np.minimum(offsets + sizes, capacity) - np.maximum(offsets, floor), 0, None) * placed
        return bool((alive @ (sizes * ~placed) <= capacity - floor - alive @ above).all())

    def candidates(floor: int, last: int) -> list[tuple[int, int]]:
        """(offset, class) after (floor, last) where a class may rest, free of what is placed:
        at the floor (0) or at the top of a busy range, from ``floor`` up."""
        nonlocal spent
        found = []
        for i in range(n):
            if placed[i]:
                continue
            taken, size = busy[i], int(sizes[i])
            lowest = bisect_left(taken.ends, floor)
            spent += 1 + len(taken.ends) - lowest
            for offset in ([0] if floor <= 0 else []) + taken.ends[lowest:]:
                if (offset, i) > (floor, last) and offset + size <= capacity and not taken.overlaps(offset, offset + size):
                    found.append((offset, i))
        return sorted(found)

    def place(i: int, offset: int) -> None:
        offsets[i], placed[i] = offset, True
        for j in overlapping[i]:
            if not placed[j]:
                busy[j].add(offset, offset + int(sizes[i]))

    def unplace(i: int) -> None:
        nonlocal spent
        placed[i] = False
        for j in (i, *overlapping[i]):
            if not placed[j]:
                spent += len(overlapping[j])
                busy[j] = Runs((int(offsets[k]), int(offsets[k] + sizes[k])) for k in overlapping[j] if placed[k])

    def search(floor: int, last: int, left: int) -> bool:
        if left == 0:
            return True
        if not fits_above(floor):
            return False
        for offset, i in candidates(floor, last):
            if spent > work:
                raise _OverBudget
            place(i, offset)
            if search(offset, i, left - 1):
                return True
            unplace(i)
        return False

    try:
        if not search(-1, -1, n):
            return None
    except _OverBudget:
        return None
    at = {life.storage: int(offset) for life, offset in zip(order, offsets)}
    return [(life, at.get(life.storage, 0)) for life in lives]


def packed(lives: tuple[Lifetime, ...], lower_bound: int | None = None) -> Plan:
    """All classes in one slot at offsets; the smallest of a few greedy packings
    (largest first, biggest area first, earliest first, longest first; first or best gap),
    the first of equal ones.  A packing is dropped as soon as it is as large as the best so
    far or over its work budget, and one as small as the most bytes of ``lives`` alive at
    once cannot be beaten, so the later ones are not tried.  Given ``lower_bound`` (the
    liveness's peak), when none reaches the floor, the larger of that bound and the most
    bytes of ``lives`` alive at once, :func:`packing_within` searches for a packing at the
    floor on a net small enough (:func:`search_work`).

    In GPU mode the lives are rounded up to DEVICE_ALIGNMENT (:func:`aligned`), so their
    peak, the floor, lies above the liveness's: a packing at it is the smallest there is
    (issue 33: the largest-first packing of a 20,000-layer chain is one, and the seven
    packings after it were made, each to be dropped).  The search once aimed at the
    liveness's own peak, which no packing of rounded lives reaches, and so never ran there."""
    best: tuple[int, list[tuple[Lifetime, int]]] | None = None
    budget = packing_work_budget(len(lives))
    floor = None if lower_bound is None else max(lower_bound, most_alive(lives))  # no packing is smaller
    for order, best_gap in itertools.product(PACKING_ORDERS.values(), (False, True)):
        tried = _pack(lives, order, best_gap, best[0] if best else None, budget if best else None)
        if tried is not None:
            best = tried
        if best is not None and best[0] == floor:
            break
    if best is not None and floor is not None and best[0] > floor and search_work(len(lives)) <= SEARCH_WORK:
        found = packing_within(lives, floor)
        if found is not None:
            best = (floor, found)
    size, placed = best or (0, [])
    if not placed:
        return Plan("packed", ())
    return Plan("packed", (Slot(0, size, tuple(l.storage for l, _ in placed), tuple(o for _, o in placed)),))


# cudaMalloc returns memory aligned to at least 256 bytes (CUDA C++ Programming Guide, "Device
# Memory Accesses"), and stock Caffe gives every device storage a cudaMalloc of its own.
# cuDNN and cuBLAS choose kernels by the alignment of the pointers they get (vector loads),
# so a member at an offset stock Caffe never gives may be computed by another kernel, in
# another order: on an H100, OpenPose's table, the only one with members at offsets that
# were not multiples of 16, gave outputs that differ from stock Caffe's in their bits
# (benchmarks/gpu-groundtruth, second run).  In GPU mode every member sits at a multiple of
# 256 bytes, as its own cudaMalloc would.
DEVICE_ALIGNMENT = 256


def aligned(lives: tuple[Lifetime, ...], alignment: int) -> tuple[Lifetime, ...]:
    """The lifetimes with each class's bytes rounded up to ``alignment``: packed, every
    offset is then a multiple of it (each offset is 0 or another class's end)."""
    if alignment <= 1:
        return lives
    return tuple(replace(life, bytes=-(-life.bytes // alignment) * alignment) for life in lives)


def trimmed(plan: Plan, lives: tuple[Lifetime, ...]) -> Plan:
    """The plan with each slot as large as its members' real end (the patched runtime checks
    a slot's bytes against exactly that), offsets kept."""
    size = {life.storage: life.bytes for life in lives}
    slots = tuple(replace(slot, bytes=max((offset + size[m] for m, offset in slot.placements()), default=0)) for slot in plan.slots)
    return replace(plan, slots=slots)


def packed_onto(plan: Plan, lives: tuple[Lifetime, ...], extra: tuple[Lifetime, ...], alignment: int = 1) -> Plan:
    """``packed_onto`` with every member at a multiple of ``alignment`` (DEVICE_ALIGNMENT in GPU mode)."""
    if alignment <= 1:
        return _packed_onto(plan, lives, extra)
    return trimmed(_packed_onto(plan, aligned(lives, alignment), aligned(extra, alignment)), lives + extra)


def _packed_onto(plan: Plan, lives: tuple[Lifetime, ...], extra: tuple[Lifetime, ...]) -> Plan:
    """A one-slot packing (``plan``, of ``lives``) with more classes added where they pay:
    every placement of ``plan`` stays, and each class of ``extra``, largest first, goes to
    the lowest hole free during its steps when that grows the slot by less than its own
    bytes; the others keep their own storage (they are not in the plan).

    This is how --share-buffers falls back class by class: the scratch buffers' single
    steps fragment a packing, so a packing of blobs and buffers together can end above the
    packing of the blobs alone (the siamese net, fixtures/siamese, by 3%); this one cannot."""
    size = plan.slot_bytes
    spans = {life.storage: life for life in lives + extra}
    occupancy = Occupancy(max((life.end for life in lives + extra), default=0) + 1)
    members: list[int] = []
    offsets: list[int] = []
    for slot in plan.slots:
        for storage, offset in slot.placements():
            life = spans[storage]
            occupancy.place(step_runs(life.spans), offset, offset + life.bytes)
            members.append(storage)
            offsets.append(offset)
    for life in sorted(extra, key=PACKING_ORDERS["size"]):
        if not life.bytes:
            continue
        runs = step_runs(life.spans)
        offset = occupancy.lowest_hole(runs, life.bytes)
        if offset + life.bytes - size >= life.bytes:
            continue  # no cheaper than its own storage
        occupancy.place(runs, offset, offset + life.bytes)
        members.append(life.storage)
        offsets.append(offset)
        size = max(size, offset + life.bytes)
    if not members:
        return Plan(plan.strategy, (), plan.notes)
    return Plan(plan.strategy, (Slot(0, size, tuple(members), tuple(offsets)),), plan.notes)


# caffemem's own strategies, each a pure function from the lifetimes to a Plan (None: it
# does not apply to a net this large).  The fork's plan (fork.py) and "auto" (every
# strategy, the optimizer keeps the smallest safe one) are the other names a user may pass.
STRATEGIES: dict[str, Callable[[Liveness], Plan | None]] = {
    "packed": lambda liveness: packed(liveness.shareable, liveness.lower_bound_peak),
    "best-fit": lambda liveness: best_fit(liveness.shareable),
    "first-fit": lambda liveness: first_fit(liveness.shareable),
    "exact": lambda liveness: exact(liveness.shareable),
}
STRATEGY_NAMES = ("auto", "fork", *STRATEGIES)  # what --strategy accepts and reports print


def make_plan(liveness: Liveness, strategy: str = "auto", alignment: int = 1) -> dict[str, Plan]:
    """The plans of caffemem's own strategies asked for (by name); "fork" is fork.py's.
    ``exact`` on a net too large for it falls back to ``best-fit``.  With ``alignment``,
    every member sits at a multiple of it (DEVICE_ALIGNMENT in GPU mode)."""
    if alignment > 1:
        padded = replace(liveness, shareable=aligned(liveness.shareable, alignment))
        return {name: trimmed(plan, liveness.shareable) for name, plan in make_plan(padded, strategy).items()}
    names = list(STRATEGIES) if strategy == "auto" else [strategy] if strategy in STRATEGIES else []
    candidates: dict[str, Plan] = {}
    for name in names:
        found = STRATEGIES[name](liveness)
        if found is not None:
            candidates[name] = found
        elif strategy == name:
            candidates["best-fit"] = best_fit(liveness.shareable)
    return candidates

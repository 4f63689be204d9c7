"""Pass 9, plan: assign shareable storage to slots.

A slot is one block of memory; a member sits at an offset in it.  Whole-slot sharing
(every offset 0, a slot as large as its largest member) is what the memory-multiloading
fork can express; packing members at offsets gets close to the lower bound.

Entry point: :func:`make_plan`.  Strategies:
- ``packed``: one slot; largest class first, at the lowest offset where it overlaps no
  class alive at the same time (greedy by size, as TFLite's arena planner);
- ``best-fit``: largest class first, into the slot it grows least (ties: least waste);
- ``first-fit``: in order of first use, into the first slot that is free (lowest index);
- ``exact``: branch and bound over slot assignments for small nets, within a time limit;
- ``auto``: every strategy that applies (and the fork's plan, see fork.py), keeping the
  smallest safe total — the choice is made by the optimizer after replay and verify.
"""

from __future__ import annotations

import bisect
import time
from dataclasses import dataclass

import numpy as np

from .liveness import Lifetime, Liveness

STRATEGIES = ("auto", "fork", "packed", "best-fit", "first-fit", "exact")
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


class _OpenSlot:
    """A slot being filled: its members' spans never overlap, so they are kept sorted
    and a new lifetime is checked against its neighbours only (bisect)."""

    def __init__(self, index: int) -> None:
        self.index = index
        self.bytes = 0
        self.lives: list[Lifetime] = []
        self.starts: list[int] = []
        self.ends: list[int] = []

    def fits(self, life: Lifetime) -> bool:
        for start, end in life.spans:
            i = bisect.bisect_right(self.starts, end)  # spans starting at or before `end`
            if i and self.ends[i - 1] >= start:
                return False
        return True

    def take(self, life: Lifetime) -> None:
        self.lives.append(life)
        self.bytes = max(self.bytes, life.bytes)
        for start, end in life.spans:
            i = bisect.bisect_left(self.starts, start)
            self.starts.insert(i, start)
            self.ends.insert(i, end)


def _finish(strategy: str, slots: list[_OpenSlot], notes: tuple[str, ...] = ()) -> Plan:
    used = [s for s in slots if s.lives]
    return Plan(strategy, tuple(Slot(i, s.bytes, tuple(l.storage for l in s.lives)) for i, s in enumerate(used)), notes)


def best_fit(lives: tuple[Lifetime, ...]) -> Plan:
    """Largest first; each into the compatible slot it grows least, then wastes least."""
    slots: list[_OpenSlot] = []
    for life in sorted(lives, key=lambda l: (-l.bytes, l.start, l.storage)):
        candidates = [s for s in slots if s.fits(life)]
        if candidates:
            best = min(candidates, key=lambda s: (max(0, life.bytes - s.bytes), abs(s.bytes - life.bytes), s.index))
        else:
            best = _OpenSlot(len(slots))
            slots.append(best)
        best.take(life)
    return _finish("best-fit", slots)


def first_fit(lives: tuple[Lifetime, ...]) -> Plan:
    """In order of first use, into the lowest-numbered slot that is free then."""
    slots: list[_OpenSlot] = []
    for life in sorted(lives, key=lambda l: (l.start, -l.bytes, l.storage)):
        target = next((s for s in slots if s.fits(life)), None)
        if target is None:
            target = _OpenSlot(len(slots))
            slots.append(target)
        target.take(life)
    return _finish("first-fit", slots)


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


def _pack(lives: tuple[Lifetime, ...], order, best_gap: bool) -> tuple[int, list[tuple[Lifetime, int]]]:
    """Place each class, in the given order, at the lowest offset (or, with best_gap, in
    the tightest gap) free of every placed class whose lifetime overlaps its own."""
    ordered = sorted(lives, key=order)
    n = sum(len(life.spans) for life in ordered)
    span_start = np.empty(n, dtype=np.int64)
    span_end = np.empty(n, dtype=np.int64)
    span_low = np.empty(n, dtype=np.int64)  # byte range of the placed class owning the span
    span_high = np.empty(n, dtype=np.int64)
    filled = 0
    placed: list[tuple[Lifetime, int]] = []
    for life in ordered:
        mask = np.zeros(filled, dtype=bool)
        for start, end in life.spans:
            mask |= (span_start[:filled] <= end) & (span_end[:filled] >= start)
        offset = _lowest_gap(span_low[:filled][mask], span_high[:filled][mask], life.bytes, best_gap)
        placed.append((life, offset))
        for start, end in life.spans:
            span_start[filled], span_end[filled] = start, end
            span_low[filled], span_high[filled] = offset, offset + life.bytes
            filled += 1
    return max((offset + life.bytes for life, offset in placed), default=0), placed


def _lowest_gap(lows: np.ndarray, highs: np.ndarray, size: int, best_gap: bool) -> int:
    """The offset of the first (or tightest) hole of ``size`` bytes among busy ranges."""
    if not len(lows):
        return 0
    order = np.argsort(lows, kind="stable")
    lows, highs = lows[order], highs[order]
    reach = np.maximum.accumulate(highs)  # end of busy memory up to each range
    hole_start = np.concatenate(([0], reach))  # before range i: free from reach[i-1]
    hole_size = np.concatenate((lows, [np.iinfo(np.int64).max])) - hole_start
    fitting = np.nonzero(hole_size >= size)[0]
    if best_gap:
        finite = fitting[fitting < len(lows)]
        if len(finite):
            return int(hole_start[finite[np.argmin(hole_size[finite])]])
    return int(hole_start[fitting[0]])


def packed(lives: tuple[Lifetime, ...]) -> Plan:
    """All classes in one slot at offsets; the smallest of a few greedy packings
    (largest first, biggest area first, earliest first, longest first; first or best gap)."""
    tries = [_pack(lives, order, best_gap) for order in PACKING_ORDERS.values() for best_gap in (False, True)]
    size, placed = min(tries, key=lambda t: t[0])
    if not placed:
        return Plan("packed", ())
    return Plan("packed", (Slot(0, size, tuple(l.storage for l, _ in placed), tuple(o for _, o in placed)),))


def make_plan(liveness: Liveness, strategy: str = "auto") -> dict[str, Plan]:
    """The plans of caffemem's own strategies asked for (by name); "fork" is fork.py's."""
    lives = liveness.shareable
    candidates: dict[str, Plan] = {}
    if strategy in ("auto", "packed"):
        candidates["packed"] = packed(lives)
    if strategy in ("auto", "best-fit"):
        candidates["best-fit"] = best_fit(lives)
    if strategy in ("auto", "first-fit"):
        candidates["first-fit"] = first_fit(lives)
    if strategy in ("auto", "exact"):
        found = exact(lives)
        if found is not None:
            candidates["exact"] = found
        elif strategy == "exact":
            candidates["best-fit"] = best_fit(lives)
    return candidates

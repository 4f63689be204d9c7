"""Pass 9, plan: assign shareable storage to slots; a slot is as large as its largest member.

Entry point: :func:`make_plan`.  Strategies:
- ``fork``: the memory-multiloading fork's own algorithm (see fork.py), the baseline;
- ``best-fit``: largest class first, into the slot it grows least (ties: least waste);
- ``first-fit``: in order of first use, into the first slot that is free (lowest index);
- ``exact``: branch and bound over slot assignments for small nets, within a time limit;
- ``auto``: every strategy that applies, keeping the smallest total.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from .liveness import Lifetime, Liveness

STRATEGIES = ("auto", "fork", "best-fit", "first-fit", "exact")
EXACT_MAX_CLASSES = 24
EXACT_SECONDS = 2.0


@dataclass(frozen=True)
class Slot:
    id: int
    bytes: int
    members: tuple[int, ...]  # storage class ids


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
    def __init__(self, index: int) -> None:
        self.index = index
        self.bytes = 0
        self.lives: list[Lifetime] = []

    def fits(self, life: Lifetime) -> bool:
        return not any(life.overlaps(other) for other in self.lives)

    def take(self, life: Lifetime) -> None:
        self.lives.append(life)
        self.bytes = max(self.bytes, life.bytes)


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


def make_plan(liveness: Liveness, strategy: str = "auto", fork_plan: Plan | None = None) -> tuple[Plan, dict[str, Plan]]:
    """The chosen plan and every candidate tried (by strategy name)."""
    lives = liveness.shareable
    candidates: dict[str, Plan] = {}
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
    if strategy in ("auto", "fork") and fork_plan is not None:
        candidates["fork"] = fork_plan
    chosen = min(candidates.values(), key=lambda p: (p.slot_bytes, len(p.slots)))
    return chosen, candidates

"""Straightforward reference versions of what became fast: the whole-slot planners (a scan
of every slot per class), the packer (every placed class checked per class), the
verifier's shadow memory (every pair of storages that share bytes) and the fork's slot list (a
scan for the first free slot).  They are what caffemem ran before, quadratic and obvious;
the tests hold the fast versions to their answers, so plans stay byte-identical."""

from __future__ import annotations

import itertools

from caffemem.passes.liveness import Lifetime
from caffemem.plan.strategies import PACKING_ORDERS, Plan, Slot
from caffemem.plan.verify import Placement


def _fits(members: list[Lifetime], life: Lifetime) -> bool:
    return not any(life.overlaps(member) for member in members)


def _whole_slots(strategy: str, ordered: list[Lifetime], choose) -> Plan:
    slots: list[list[Lifetime]] = []
    for life in ordered:
        free = [i for i, members in enumerate(slots) if _fits(members, life)]
        if free:
            slots[choose(free, slots, life)].append(life)
        else:
            slots.append([life])
    return Plan(strategy, tuple(Slot(i, max(l.bytes for l in members), tuple(l.storage for l in members)) for i, members in enumerate(slots)))


def best_fit(lives: tuple[Lifetime, ...]) -> Plan:
    """Largest first; into the free slot it grows least, then wastes least, then the first."""

    def choose(free: list[int], slots: list[list[Lifetime]], life: Lifetime) -> int:
        size = {i: max(l.bytes for l in slots[i]) for i in free}
        return min(free, key=lambda i: (max(0, life.bytes - size[i]), abs(size[i] - life.bytes), i))

    return _whole_slots("best-fit", sorted(lives, key=lambda l: (-l.bytes, l.start, l.storage)), choose)


def first_fit(lives: tuple[Lifetime, ...]) -> Plan:
    """In order of first use; into the first free slot."""
    return _whole_slots("first-fit", sorted(lives, key=lambda l: (l.start, -l.bytes, l.storage)), lambda free, slots, life: free[0])


def lowest_gap(ranges: list[tuple[int, int]], size: int, best_gap: bool) -> int:
    """The first (or tightest) hole of ``size`` bytes among busy byte ranges, holes counted
    before each range in order of start, as the packer always counted them."""
    holes = []
    reach = 0
    for low, high in sorted(ranges, key=lambda r: r[0]):
        holes.append((reach, low - reach))
        reach = max(reach, high)
    fitting = [(start, hole) for start, hole in holes if hole >= size]
    if best_gap and fitting:
        return min(fitting, key=lambda h: h[1])[0]
    return fitting[0][0] if fitting else reach


def pack(lives: tuple[Lifetime, ...], order, best_gap: bool) -> tuple[int, list[tuple[Lifetime, int]]]:
    """Each class, in order, at the first (or tightest) hole among every placed class alive
    at one of its steps (one range per placed span)."""
    placed: list[tuple[Lifetime, int]] = []
    for life in sorted(lives, key=order):
        ranges = [(offset, offset + other.bytes) for other, offset in placed for start, end in other.spans if any(start <= e and end >= s for s, e in life.spans)]
        placed.append((life, lowest_gap(ranges, life.bytes, best_gap)))
    return max((offset + life.bytes for life, offset in placed), default=0), placed


def packed(lives: tuple[Lifetime, ...]) -> Plan:
    """The smallest of all eight packings, the first of equal ones."""
    size, placed = min((pack(lives, order, best_gap) for order, best_gap in itertools.product(PACKING_ORDERS.values(), (False, True))), key=lambda t: t[0])
    if not placed:
        return Plan("packed", ())
    return Plan("packed", (Slot(0, size, tuple(l.storage for l, _ in placed), tuple(o for _, o in placed)),))


class PairwiseShadow:
    """The verifier's shadow memory as it was: every pair of storages that share bytes
    listed up front; a write overwrites all of its pairs."""

    def __init__(self, place: dict[int, Placement]) -> None:
        self.ordered = sorted(place, key=lambda s: (place[s].slot, place[s].start))
        self.pairs = {storage: [other for other in self.ordered if other != storage and place[storage].collides(place[other])] for storage in place}

    def sharing(self, storages: list[int]) -> dict[int, list[int]]:
        return {storage: [other for other in self.pairs[storage] if other in storages] for storage in storages}

    def write(self, storage: int) -> list[int]:
        return self.pairs[storage]


class ScanningSlots:
    """The fork's slot list as the fork keeps it: scanned for a free slot and for a key."""

    def __init__(self) -> None:
        self.keys: list[str] = []
        self.refs: list[int] = []

    def acquire(self, key: str) -> int:
        for i, held in enumerate(self.keys):
            if held == "":
                self.keys[i], self.refs[i] = key, 1
                return i
        self.keys.append(key)
        self.refs.append(1)
        return len(self.keys) - 1

    def find(self, key: str) -> int:
        return self.keys.index(key) if key in self.keys else -1

    def add_ref(self, index: int) -> None:
        while index >= len(self.keys):
            self.keys.append("")
            self.refs.append(0)
        self.refs[index] += 1

    def release(self, index: int) -> None:
        if index < 0 or self.refs[index] <= 0:
            return
        self.refs[index] -= 1
        if self.refs[index] == 0:
            self.keys[index] = ""


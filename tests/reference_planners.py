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



def reference_choose(schedule, specs, policy, liveness_of, stock_figure, prices=None):
    """`optimize --recompute`'s policies searched as they were before issue 33's scaling:
    every candidate measured whole (its extended schedule through liveness), every k of
    Chen's segments tried, every chosen unit's removal measured; quadratic and obvious.
    Ties and the budget's knapsack go by estimated seconds at ``prices`` (plan/timing.py),
    as today's policies rank.  Returns (figure, flops, recomputed entries)."""
    from caffemem.plan import recompute as r

    prices = prices if prices is not None else r.prices_for("cpu")
    plain = liveness_of(schedule)
    units = r.units_of(schedule, specs, plain, r.times_of(schedule, specs, prices))

    def bound(liveness) -> int:
        return stock_figure - sum(life.bytes for life in liveness.shareable) + liveness.lower_bound_peak

    cache = {}

    def measure(chosen):
        if chosen not in cache:
            entries = r.placed(schedule, [units[u].layers for u in sorted(chosen)], [layer for u in chosen for layer in units[u].restores])
            liveness = liveness_of(r.with_recomputation(schedule, entries))
            copies = r.restored_bytes(schedule, entries)
            run = [u for u in chosen if any(entry.layer in units[u].layers for entry in entries)]
            flops = sum(units[u].flops for u in run)
            cache[chosen] = r._Measured(chosen, entries, None, liveness, bound(liveness) + copies, flops, copies, sum(units[u].seconds for u in run))
        return cache[chosen]

    def sqrt(checkpoints, eligible):
        allowed = set(eligible)
        candidates = [u for u in checkpoints if u in allowed] or list(eligible)
        tried = [measure(frozenset(u for u in eligible if u not in set(candidates[k - 1 :: k]))) for k in range(1, len(candidates) + 1)]
        return min(tried, key=lambda m: (m.figure, m.seconds)) if tried else measure(frozenset())

    def pruned(best):
        for unit in sorted(best.units, reverse=True):
            if unit not in best.units:
                continue
            without = measure(best.units - {unit})
            if without.figure <= best.figure:
                best = without
        return best

    def budget(eligible, checkpoints, target):
        none = measure(frozenset())
        if none.figure <= target:
            return none
        options = []
        for segment in r._segments(checkpoints, eligible):
            found = [(0, 0, frozenset())]
            for chosen in {frozenset(u for u in segment if units[u].cheap), frozenset(segment)} - {frozenset()}:
                measured = measure(chosen)
                if measured.figure < none.figure:
                    found.append((none.figure - measured.figure, measured.seconds, chosen))
            options.append(found)
        deepest = min([measure(frozenset(eligible)), sqrt(checkpoints, eligible)], key=lambda m: m.figure)
        need, best = none.figure - target, None
        for _ in range(8):
            chosen = r._knapsack(options, need)
            if chosen is None:
                break
            measured = measure(chosen)
            if measured.figure <= target:
                best = measured
                break
            need += measured.figure - target
        if best is None and deepest.figure <= target:
            best = deepest
        if best is None:
            raise r.missed(target, min(deepest, none, key=lambda m: m.figure).figure)
        return best

    eligible = [u for u, unit in enumerate(units) if unit.why_not is None]
    none = measure(frozenset())
    checkpoints = r.checkpoint_candidates(schedule, units, plain)
    if policy.name == "cheap":
        best = measure(frozenset(u for u in eligible if units[u].cheap))
    elif policy.name == "sqrt":
        best = sqrt(checkpoints, eligible)
    else:
        best = budget(eligible, checkpoints, policy.target if policy.target is not None else policy.budget or 0)
    best = pruned(best)
    if best.figure >= none.figure and policy.name != "budget":
        best = none
    return best.figure, best.flops, best.recomputed

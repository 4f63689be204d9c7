"""The figure of a candidate recomputation without building its schedule: what the policies
of plan/recompute.py search with.

Measuring a candidate whole (passes/recompute.py ``with_recomputation``, then liveness) is
a pass over every step and storage of the net; a policy that measures a candidate per k
of Chen's segments, or per unit it prunes, is then quadratic in the net's size (issue 33:
``--recompute sqrt`` took 34 s at 1,000 layers).  A recomputation changes the lives of
only the storages its recomputed Forwards touch; every other storage keeps its plain span,
shifted by the recompute steps inserted before it.  :class:`Figures` keeps the plain
liveness, and for a candidate places its units (the rule of ``placed``, precomputed per
unit), rebuilds the lives of the storages they touch with liveness's own rules, and sweeps
the peak over the extended steps as arrays: the same figure the whole measure gives (the
tests hold it to that on random and real nets), in a fraction of its time.  The chosen
candidate is still measured whole, and its plan verified, as before.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from caffemem.graph import count
from caffemem.passes.liveness import Liveness, _touches
from caffemem.passes.recompute import _param_classes, names_given_twice
from caffemem.passes.schedule import Schedule
from caffemem.units import DTYPE_BYTES


@dataclass(frozen=True)
class Figure:
    """A candidate's figure and what it costs, as the whole measure would give them."""

    units: frozenset[int]  # indices into the unit list
    figure: int
    flops: int
    placed: tuple[int, ...]  # the units that run again (a unit no Backward needs does not)
    seconds: float = 0.0  # their Forwards, estimated (plan/timing.py)


class Figures:
    """Figures of candidate recomputations of ``schedule`` (see the module docstring).
    ``plain``: the schedule's liveness; ``stock_figure``: what a plan's figure starts from,
    as plan/recompute.py's ``choose`` counts it.  Which buffers a recomputation lets share
    (as liveness decides with all its settings) is found here, from ``plain.liftable`` and
    the values of the deepest recomputation, every eligible unit recomputed (issue 33:
    measuring that one whole was a third of a search; the tests hold the two equal).

    ``exact`` is False where the precomputed placement would not be ``placed``'s (a
    storage two units write, a layer name the net gives twice): the caller then measures
    whole."""

    def __init__(self, schedule: Schedule, units: Sequence, plain: Liveness, stock_figure: int) -> None:
        self.schedule = schedule
        self.units = units
        self.stock_figure = stock_figure
        steps = schedule.steps
        self.n = len(steps)
        forward = {step.layer: step for step in steps if step.kind == "forward"}
        self.forward = forward
        writer: dict[int, int] = {}
        firsts = [unit.layers[0] for unit in units]
        self.exact = not names_given_twice(schedule.shaped.graph) and firsts == sorted(firsts)
        for u, unit in enumerate(units):
            for layer in unit.layers:
                for access in forward[layer].accesses:
                    if access.write:
                        if writer.get(access.storage, u) != u:
                            self.exact = False
                        writer[access.storage] = u
        backward_order = [step for step in steps if step.kind == "backward"]
        self.backward_at = [step.index for step in backward_order]  # plain step index of each backward
        own: dict[int, int] = {}
        for i, step in enumerate(backward_order):
            for access in step.accesses:
                u = writer.get(access.storage)
                if u is not None and not access.write and u not in own:
                    own[u] = i
        self.own_need = [own.get(u, -1) for u in range(len(units))]
        self.producers: list[tuple[int, ...]] = []
        for u, unit in enumerate(units):
            found = []
            for layer in unit.layers:
                for access in forward[layer].accesses:
                    p = writer.get(access.storage)
                    if not access.write and p is not None and units[p].layers[0] < unit.layers[0] and p not in found:
                        found.append(p)
            self.producers.append(tuple(found))
        layers = schedule.shaped.graph.layers
        shared = names_given_twice(schedule.shaped.graph)
        place, last = [], None
        for step in backward_order:
            last = step.index if layers[step.layer].name not in shared else last
            place.append(last)
        self.places = np.array([-1 if at is None else at for at in place], dtype=np.int64)  # plain step index of the Backward a need at backward i runs before (-1: none)
        # Each unit's recomputed accesses as arrays: (storage, writes first, reads, its
        # layer's place in the unit), as liveness's _touches sees a step's accesses.
        shapes = schedule.shaped.layer_shapes
        dtype = DTYPE_BYTES[schedule.dtype]
        self.copies: list[int] = []
        flat: list[tuple[int, bool, bool, int]] = []
        self.unit_from = np.zeros(len(units) + 1, dtype=np.int64)  # unit u's rows: unit_from[u] to unit_from[u + 1]
        for unit in units:
            rows = []
            for offset, layer in enumerate(unit.layers):
                accesses = forward[layer].accesses
                if layer in unit.restores:
                    mine = _param_classes(schedule, layer)
                    accesses = tuple(a for a in accesses if a.storage not in mine)
                first: dict[int, bool] = {}
                reads: set[int] = set()
                for access in accesses:
                    first.setdefault(access.storage, access.write)
                    if not access.write:
                        reads.add(access.storage)
                rows += [(storage, writes, storage in reads, offset) for storage, writes in first.items()]
            flat += rows
            self.unit_from[len(self.copies) + 1] = len(flat)
            self.copies.append(sum(count(shape) for layer in unit.restores for shape in shapes[layer].params) * dtype)
        columns = list(zip(*flat)) if flat else [(), (), (), ()]
        self.again_storage = np.array(columns[0], dtype=np.int64)
        self.again_writes = np.array(columns[1], dtype=bool)
        self.again_reads = np.array(columns[2], dtype=bool)
        self.again_offset = np.array(columns[3], dtype=np.int64)
        self.unit_layers = np.array([len(unit.layers) for unit in units], dtype=np.int64)
        self.unit_copies = np.array(self.copies, dtype=np.int64)
        self.unit_flops = np.array([unit.flops for unit in units], dtype=object)  # FLOPs may pass int64
        self.unit_seconds = np.array([unit.seconds for unit in units], dtype=np.float64)
        classes = schedule.classes
        shareable = {life.storage: life for life in plain.shareable}
        self.shareable_bytes = sum(life.bytes for life in plain.shareable)
        # Buffers plain liveness keeps for holding a value Forward leaves for Backward, which
        # a recomputation refilling them lets share (every other reason is the schedule's alone).
        liftable = set(plain.liftable)  # those every value of which the deepest recomputation refills: below
        self.storage_count = len(classes)
        self.buffer = np.array([c.kind == "buffer" for c in classes], dtype=bool)
        self.bytes = np.array([c.bytes for c in classes], dtype=np.int64)
        spans = [(start, end, life.bytes, life.storage) for life in plain.shareable for start, end in life.spans]
        columns = list(zip(*spans)) if spans else [(), (), (), ()]
        self.starts = np.array(columns[0], dtype=np.int64)
        self.ends = np.array(columns[1], dtype=np.int64)
        self.sizes = np.array(columns[2], dtype=np.int64)
        self.owners = np.array(columns[3], dtype=np.int64)
        self.span_first, self.span_count = _groups(self.owners, len(classes))  # each storage's plain spans (contiguous)
        # The plain profile: bytes alive at each plain step, its maxima over every 2^k steps
        # (a sparse table), and at each place the bytes of the lives that cross it (alive
        # before it and at it: alive at any step inserted there).
        n = self.n
        delta = np.zeros(n + 2, dtype=np.int64)
        np.add.at(delta, self.starts, self.sizes)
        np.add.at(delta, self.ends + 1, -self.sizes)
        profile = np.cumsum(delta[:n])
        self.table = [profile]
        while 1 << len(self.table) <= n:
            half = 1 << (len(self.table) - 1)
            self.table.append(np.maximum(self.table[-1][:-half], self.table[-1][half:]))
        delta[:] = 0
        np.add.at(delta, self.starts + 1, self.sizes)
        np.add.at(delta, self.ends + 1, -self.sizes)
        self.cross = np.cumsum(delta[: n + 1])
        self.relevant = np.zeros(self.storage_count, dtype=bool)  # what a recomputation can change the figure by
        self.relevant[list(shareable) + list(liftable)] = True
        touches = _touches(schedule)
        self._liftable(liftable, touches)
        if liftable:
            deepest_units = frozenset(u for u, unit in enumerate(units) if unit.why_not is None)
            liftable = {int(storage) for storage in self._evaluate(deepest_units)[1]}
            self.relevant[:] = False
            self.relevant[list(shareable) + list(liftable)] = True
            self._liftable(liftable, touches)

    def _liftable(self, liftable: set[int], touches: dict) -> None:
        """The liftable buffers, and every plain use of the storages a recomputation can
        change the figure by (``relevant``), by storage then step (liveness's _touches)."""
        self.liftable = np.zeros(self.storage_count, dtype=bool)
        self.liftable[list(liftable)] = True
        rows = [(storage, step, writes, reads) for storage, uses in touches.items() if self.relevant[storage] for step, writes, reads in uses]
        columns = list(zip(*rows)) if rows else [(), (), (), ()]
        self.use_storage = np.array(columns[0], dtype=np.int64)
        self.use_step = np.array(columns[1], dtype=np.int64)
        self.use_writes = np.array(columns[2], dtype=bool)
        self.use_reads = np.array(columns[3], dtype=bool)
        self.use_first, self.use_count = _groups(self.use_storage, self.storage_count)  # each storage's uses (contiguous)

    def _range_max(self, low: np.ndarray, high: np.ndarray) -> np.ndarray:
        """The plain profile's maximum over steps [low, high] (inclusive), for each pair."""
        level = np.log2(high - low + 1).astype(np.int64)
        found = np.empty(len(low), dtype=np.int64)
        for k in np.unique(level):
            mine = level == k
            row = self.table[k]
            found[mine] = np.maximum(row[low[mine]], row[high[mine] - (1 << int(k)) + 1])
        return found

    def placement(self, chosen: frozenset[int]) -> tuple[np.ndarray, np.ndarray]:
        """The units that run again, in the order ``placed`` gives their entries, and the
        plain step index of the Backward each runs before: ``placed``'s rule, from the
        precomputed needs (a unit's own, then the earliest of the chosen units reading it)."""
        order = sorted(chosen)  # units_of lists units in Forward order
        need = [-1] * len(self.units)
        own, producers = self.own_need, self.producers
        member = bytearray(len(self.units))
        for u in order:
            need[u] = own[u]
            member[u] = 1
        for u in reversed(order):
            due = need[u]
            if due < 0:
                continue
            for p in producers[u]:
                if member[p] and (need[p] < 0 or due < need[p]):
                    need[p] = due
        units = np.array(order, dtype=np.int64)
        due = np.array(need, dtype=np.int64)[units] if order else np.zeros(0, dtype=np.int64)
        placed = due >= 0
        units, due = units[placed], due[placed]
        places = self.places[due] if len(due) else due
        units, due, places = units[places >= 0], due[places >= 0], places[places >= 0]
        ranked = np.lexsort((units, due))
        return units[ranked], places[ranked]

    def figure(self, chosen: frozenset[int]) -> Figure:
        """``chosen``'s figure, as measuring its extended schedule whole would give it:
        the lives of the storages the recomputed Forwards touch rebuilt by liveness's rules
        (a blob's value ends at its last read before a recomputed Forward writes it first,
        a buffer holds one value per write; a buffer that keeps values between steps is
        shared only if every value is refilled), every other life shifted, the peak swept."""
        return self._evaluate(chosen)[0]

    def _evaluate(self, chosen: frozenset[int]) -> tuple[Figure, np.ndarray]:
        """:meth:`figure`, and the liftable buffers the recomputation lets share.

        Sparse, in the size of what the recomputation touches, not of the net (issue 33:
        ``budget=`` asks a figure per Chen segment): the plain steps' bytes alive less the
        touched storages' plain lives plus their rebuilt ones, a correction constant between
        its breakpoints, added to the plain profile's maximum over each piece (a sparse
        table); each inserted step's bytes from the plain lives that cross its place."""
        ran, before = self.placement(chosen)
        n = self.n
        lengths = self.unit_layers[ran]
        # Where steps are inserted: before plain step points[i], counts[i] of them
        # (``before`` does not decrease: the units due at one place are next to each other).
        bounds = np.flatnonzero(np.r_[True, before[1:] != before[:-1]]) if len(ran) else np.zeros(0, dtype=np.int64)
        points = before[bounds]
        counts = np.add.reduceat(lengths, bounds) if len(ran) else np.zeros(0, dtype=np.int64)
        through = np.r_[0, np.cumsum(counts)].astype(np.int64)  # through[i]: inserted before points[i]
        total = n + int(through[-1])
        block_start = points + through[:-1]  # the first inserted step's extended index at points[i]

        def ext(step: np.ndarray) -> np.ndarray:
            """A plain step's index in the extended schedule."""
            return step + through[np.searchsorted(points, step, side="right")]

        def inserted_before(index: np.ndarray) -> np.ndarray:
            """How many inserted steps have an extended index below ``index``."""
            j = np.searchsorted(block_start, index, side="left")
            last = np.maximum(j - 1, 0)
            partial = np.minimum(counts[last], index - block_start[last]) if len(counts) else np.zeros_like(index)
            return np.where(j > 0, through[last] + partial, 0)

        # Each placed unit's first step: its Backward's place, less what runs there from it on.
        after = np.cumsum(lengths) - lengths
        group = np.ones(len(ran), dtype=bool)
        group[1:] = before[1:] != before[:-1]
        group_at = np.maximum.accumulate(np.where(group, np.arange(len(ran)), 0))
        first_step = before + through[np.searchsorted(points, before, side="left")] + after - after[group_at]
        sizes = self.unit_from[ran + 1] - self.unit_from[ran]
        rows = _ranges(self.unit_from[ran], sizes)
        again_storage = self.again_storage[rows]
        keep = self.relevant[again_storage]
        again_storage = again_storage[keep]
        touched = np.unique(again_storage)
        shareable_bytes = self.shareable_bytes
        lifted_owners = np.zeros(0, dtype=np.int64)
        new_start = new_end = new_bytes = np.zeros(0, dtype=np.int64)
        if len(again_storage):
            again_step = (np.repeat(first_step, sizes) + self.again_offset[rows])[keep]
            again_writes = self.again_writes[rows][keep]
            again_reads = self.again_reads[rows][keep]
            plain = _ranges(self.use_first[touched], self.use_count[touched])
            storage = np.concatenate([self.use_storage[plain], again_storage])
            step = np.concatenate([ext(self.use_step[plain]), again_step])
            writes = np.concatenate([self.use_writes[plain], again_writes])
            reads = np.concatenate([self.use_reads[plain], again_reads])
            again = np.concatenate([np.zeros(len(plain), dtype=bool), np.ones(len(again_storage), dtype=bool)])
            order = np.lexsort((step, storage))
            storage, step, writes, reads, again = storage[order], step[order], writes[order], reads[order], again[order]
            first = np.ones(len(storage), dtype=bool)
            first[1:] = storage[1:] != storage[:-1]
            opens = first | (writes & (self.buffer[storage] | again))  # liveness._values: where a new value begins
            heads = np.flatnonzero(opens)
            value_start = step[heads]
            last_read = np.maximum.reduceat(np.where(reads, step, -1), heads)
            value_end = np.maximum(last_read, value_start)
            value_storage = storage[heads]
            uses = np.diff(np.append(heads, len(storage)))
            # liveness._kept_reason for a buffer: every value written first, alone or by a recomputed Forward.
            refilled = writes[heads] & ((uses == 1) | again[heads])
            owner_heads = np.flatnonzero(first[heads])
            whole = np.logical_and.reduceat(refilled, owner_heads)
            owners = value_storage[owner_heads]
            dropped = self.liftable[owners] & ~whole
            lifted_owners = owners[self.liftable[owners] & whole]
            shareable_bytes += int(self.bytes[lifted_owners].sum())
            alive = ~np.isin(value_storage, owners[dropped])
            new_start, new_end, new_bytes = value_start[alive], value_end[alive], self.bytes[value_storage[alive]]
        # The touched storages' plain lives, in plain steps: what the rebuilt ones replace.
        spans = _ranges(self.span_first[touched], self.span_count[touched])
        old_start, old_end, old_bytes = self.starts[spans], self.ends[spans], self.sizes[spans]
        peak = 0
        if n:
            # The plain steps: rebuilt lives mapped back to the plain steps they cover.
            low = new_start - inserted_before(new_start)  # the first plain step at or after
            high = new_end - inserted_before(new_end + 1)  # the last plain step at or before
            covers = low <= high
            at = np.concatenate([old_start, old_end + 1, low[covers], high[covers] + 1, [0, n]])
            change = np.concatenate([-old_bytes, old_bytes, new_bytes[covers], -new_bytes[covers], [0, 0]])
            order = np.argsort(at, kind="stable")
            at, level = at[order], np.cumsum(change[order])
            last = np.r_[at[1:] != at[:-1], True]  # the level after every change at a breakpoint
            at, level = at[last], level[last]
            piece = at < n
            peak = max(peak, int((level[piece] + self._range_max(at[piece], np.r_[at[1:], n][piece] - 1)).max()))
        if len(ran):
            # The inserted steps: the plain lives crossing their place, less the touched ones, plus the rebuilt ones.
            index = _ranges(block_start, counts)
            place = np.repeat(points, counts)
            alive_at = self.cross[place] - _level_at(place, old_start + 1, old_end + 1, old_bytes) + _level_at(index, new_start, new_end + 1, new_bytes)
            peak = max(peak, int(alive_at.max()))
        copies = int(self.unit_copies[ran].sum())
        flops = int(self.unit_flops[ran].sum()) if len(ran) else 0
        seconds = float(self.unit_seconds[ran].sum()) if len(ran) else 0.0
        return Figure(chosen, self.stock_figure - shareable_bytes + peak + copies, flops, tuple(int(u) for u in ran), seconds), lifted_owners


def _ranges(starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """The integers of every range [starts[i], starts[i] + counts[i]), in order."""
    counts = counts.astype(np.int64)
    return np.repeat(starts - np.cumsum(counts) + counts, counts) + np.arange(int(counts.sum()), dtype=np.int64)


def _level_at(where: np.ndarray, opens: np.ndarray, closes: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """At each of ``where``, the sum of ``sizes`` of the ranges [opens, closes) holding it."""
    at = np.concatenate([opens, closes])
    order = np.argsort(at, kind="stable")
    level = np.cumsum(np.concatenate([sizes, -sizes])[order])
    i = np.searchsorted(at[order], where, side="right")
    return np.where(i > 0, np.r_[0, level][i], 0)


def _groups(keys: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    """For keys stored in contiguous runs: where each key's run starts, and its length."""
    first = np.zeros(size, dtype=np.int64)
    count = np.zeros(size, dtype=np.int64)
    if len(keys):
        heads = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]])
        first[keys[heads]] = heads
        count[keys[heads]] = np.diff(np.r_[heads, len(keys)])
    return first, count

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
from caffemem.passes.liveness import Liveness, _kept_reason, _spans, _touches, _values
from caffemem.passes.recompute import _param_classes, names_given_twice
from caffemem.passes.schedule import Schedule
from caffemem.units import DTYPE_BYTES

KEEPS_VALUES = "a layer buffer that keeps values between steps"  # liveness._kept_reason's: the one reason a recomputation can lift


@dataclass(frozen=True)
class Figure:
    """A candidate's figure and what it costs, as the whole measure would give them."""

    units: frozenset[int]  # indices into the unit list
    figure: int
    flops: int
    placed: tuple[int, ...]  # the units that run again (a unit no Backward needs does not)


class Figures:
    """Figures of candidate recomputations of ``schedule`` (see the module docstring).
    ``plain``: the schedule's liveness; ``deepest``: the liveness with every unit in
    ``units`` recomputed (which buffers a recomputation lets share, as liveness decides
    with all its settings); ``bound``: a liveness's figure from its shareable bytes and
    peak, as plan/recompute.py's ``choose`` counts it.

    ``exact`` is False where the precomputed placement would not be ``placed``'s (a
    storage two units write, a layer name the net gives twice): the caller then measures
    whole."""

    def __init__(self, schedule: Schedule, units: Sequence, plain: Liveness, deepest: Liveness, stock_figure: int) -> None:
        self.schedule = schedule
        self.units = units
        self.stock_figure = stock_figure
        steps = schedule.steps
        self.n = len(steps)
        forward = {step.layer: step for step in steps if step.kind == "forward"}
        self.forward = forward
        writer: dict[int, int] = {}
        self.exact = not names_given_twice(schedule.shaped.graph)
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
        self.own_need = own
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
        self.place = place  # plain step index of the Backward a need at backward i runs before
        # Each unit's recomputed accesses, per layer: (storage, writes first, reads) in step order.
        self.unit_uses: list[tuple[tuple[tuple[int, bool, bool], ...], ...]] = []
        shapes = schedule.shaped.layer_shapes
        dtype = DTYPE_BYTES[schedule.dtype]
        self.copies: list[int] = []
        for unit in units:
            per_layer = []
            for layer in unit.layers:
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
                per_layer.append(tuple((storage, writes, storage in reads) for storage, writes in first.items()))
            self.unit_uses.append(tuple(per_layer))
            self.copies.append(sum(count(shape) for layer in unit.restores for shape in shapes[layer].params) * dtype)
        self.touches = _touches(schedule)
        shareable = {life.storage: life for life in plain.shareable}
        self.plain_lives = shareable
        self.shareable_bytes = sum(life.bytes for life in plain.shareable)
        lifted = {life.storage for life in deepest.shareable}
        # Buffers plain liveness keeps for holding a value Forward leaves for Backward, which
        # a recomputation refilling them lets share (every other reason is the schedule's alone).
        self.liftable = {storage for storage, why in plain.kept.items() if why == KEEPS_VALUES and storage in lifted}
        starts, ends, sizes, owners = [], [], [], []
        for life in plain.shareable:
            for start, end in life.spans:
                starts.append(start)
                ends.append(end)
                sizes.append(life.bytes)
                owners.append(life.storage)
        self.starts = np.array(starts, dtype=np.int64)
        self.ends = np.array(ends, dtype=np.int64)
        self.sizes = np.array(sizes, dtype=np.int64)
        self.owners = np.array(owners, dtype=np.int64)
        self.storage_count = len(schedule.classes)

    def placement(self, chosen: frozenset[int]) -> list[tuple[int, int]]:
        """(unit, plain step index of the Backward it runs before), in the order ``placed``
        gives the entries: ``placed``'s rule, from the precomputed needs."""
        need = {u: self.own_need[u] for u in chosen if u in self.own_need}
        for u in sorted(chosen, key=lambda u: self.units[u].layers[0], reverse=True):
            if u not in need:
                continue
            for p in self.producers[u]:
                if p in chosen:
                    need[p] = min(need.get(p, need[u]), need[u])
        ordered = sorted((u for u in need if self.place[need[u]] is not None), key=lambda u: (need[u], self.units[u].layers[0]))
        return [(u, self.place[need[u]]) for u in ordered]

    def figure(self, chosen: frozenset[int]) -> Figure:
        """``chosen``'s figure, as measuring its extended schedule whole would give it."""
        placement = self.placement(chosen)
        n = self.n
        inserted = np.zeros(n + 1, dtype=np.int64)
        for u, before in placement:
            inserted[before] += len(self.units[u].layers)
        shift = np.cumsum(inserted)  # recompute steps inserted at or before each plain step
        ext = np.arange(n + 1, dtype=np.int64) + shift  # a plain step's index in the extended schedule
        total = n + int(shift[-1])
        # The extended steps each placed unit's layers take, in order before their Backward.
        taken = {}
        cursor: dict[int, int] = {}
        uses: dict[int, list[tuple[int, bool, bool]]] = {}
        recompute_steps: set[int] = set()
        for u, before in placement:
            at = cursor.get(before, int(ext[before]) - int(inserted[before]))
            for per_layer in self.unit_uses[u]:
                recompute_steps.add(at)
                for storage, writes, reads in per_layer:
                    uses.setdefault(storage, []).append((at, writes, reads))
                at += 1
            cursor[before] = at
            taken[u] = at
        classes = self.schedule.classes
        shareable_bytes = self.shareable_bytes
        frozen_steps = frozenset(recompute_steps)
        extra_starts, extra_ends, extra_sizes = [], [], []
        for storage, again in uses.items():
            life = self.plain_lives.get(storage)
            if life is None and storage not in self.liftable:
                continue  # kept whatever runs again
            merged = sorted([(int(ext[step]), writes, reads) for step, writes, reads in self.touches[storage]] + again)
            values = _values(classes[storage], merged, frozen_steps)
            if life is None:
                if _kept_reason(classes[storage], values, frozen_steps, set(), True, False):
                    continue
                shareable_bytes += classes[storage].bytes
            for start, end in _spans(classes[storage], merged, frozen_steps):
                extra_starts.append(start)
                extra_ends.append(end)
                extra_sizes.append(classes[storage].bytes)
        moved = np.zeros(self.storage_count, dtype=bool)
        if uses:
            moved[np.fromiter(uses.keys(), dtype=np.int64, count=len(uses))] = True
        keep = ~moved[self.owners]
        delta = np.zeros(total + 1, dtype=np.int64)
        np.add.at(delta, ext[self.starts[keep]], self.sizes[keep])
        np.add.at(delta, ext[self.ends[keep]] + 1, -self.sizes[keep])
        if extra_sizes:
            sizes = np.array(extra_sizes, dtype=np.int64)
            np.add.at(delta, np.array(extra_starts, dtype=np.int64), sizes)
            np.add.at(delta, np.array(extra_ends, dtype=np.int64) + 1, -sizes)
        peak = max(0, int(np.cumsum(delta[:total]).max())) if total else 0
        ran = tuple(u for u, _ in placement)
        copies = sum(self.copies[u] for u in ran)
        flops = sum(self.units[u].flops for u in ran)
        return Figure(chosen, self.stock_figure - shareable_bytes + peak + copies, flops, ran)

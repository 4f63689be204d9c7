"""Interval structures for the planners (plan/strategies.py).

A planner asks one question per storage class: which slot is free for these steps, or
where in memory is a hole for these steps.  Scanning every slot or every placed class for
it made planning quadratic in the size of the net.  The two trees here answer it from
O(log n) summaries instead, and give exactly the answer the scan gave.  A summary rules
out whole groups of slots or bytes at once; what it cannot rule out is looked at one by
one: nothing for first-fit, a few slots for best-fit, and for packing the holes below the
answer, which fragmented memory can make many (Inception-style nets in training).

Steps and bytes alike are integers; a set of them is a :class:`Runs`.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Sequence

Run = tuple[int, int]  # half-open [start, end)


class Runs:
    """A set of integers as sorted, disjoint half-open runs [start, end).

    Touching runs merge.  An empty run [p, p) stays where no run reaches p: a zero-byte
    class placed at p still splits a hole in two for the packer (see :class:`Occupancy`)."""

    __slots__ = ("starts", "ends")

    def __init__(self, runs: Iterable[Run] = ()) -> None:
        self.starts: list[int] = []
        self.ends: list[int] = []
        for start, end in runs:
            self.add(start, end)

    def __bool__(self) -> bool:
        return bool(self.starts)

    def runs(self) -> list[Run]:
        return list(zip(self.starts, self.ends))

    def add(self, start: int, end: int) -> None:
        starts, ends = self.starts, self.ends
        first = bisect_left(ends, start)  # the first run that reaches start
        if first == len(ends):
            starts.append(start)
            ends.append(end)
            return
        last = bisect_right(starts, end, first)  # past the last run that starts by end
        if first == last:
            starts.insert(first, start)
            ends.insert(first, end)
            return
        if starts[first] < start:
            start = starts[first]
        if ends[last - 1] > end:
            end = ends[last - 1]
        starts[first:last] = (start,)
        ends[first:last] = (end,)

    def overlaps(self, start: int, end: int) -> bool:
        """Does a run hold an integer of [start, end) (start < end)?"""
        i = bisect_left(self.starts, end)
        return i > 0 and self.ends[i - 1] > start

    def overlaps_any(self, runs: Sequence[Run]) -> bool:
        return any(self.overlaps(start, end) for start, end in runs)

    def within(self, runs: Sequence[Run]) -> "Runs":
        """The part of this set inside the given sorted, disjoint runs (a short list)."""
        starts, ends = self.starts, self.ends
        found = Runs()
        for start, end in runs:
            first, last = bisect_right(ends, start), bisect_left(starts, end)
            if first < last:
                clipped_starts, clipped_ends = starts[first:last], ends[first:last]
                clipped_starts[0] = max(clipped_starts[0], start)
                clipped_ends[-1] = min(clipped_ends[-1], end)
                found.starts += clipped_starts
                found.ends += clipped_ends
        return found


def _one_run(start: int, end: int) -> Runs:
    """``Runs(((start, end),))``, made directly (the packer makes one per node it first fills)."""
    found = Runs.__new__(Runs)
    found.starts, found.ends = [start], [end]
    return found


def step_runs(spans: Iterable[tuple[int, int]]) -> list[Run]:
    """Inclusive [first, last] step spans as sorted, merged half-open runs."""
    return Runs((first, last + 1) for first, last in spans).runs()


def _tree_size(leaves: int) -> int:
    size = 1
    while size < leaves:
        size *= 2
    return size


class SlotTree:
    """Slots at fixed positions (the order a planner prefers them in), each with its busy
    steps; every node of a binary tree over the positions keeps the steps where *all* the
    slots below it are busy.  A node whose common steps meet the query has no free slot,
    so the search for the first free slot skips it whole.

    For classes taken in order of first use (first-fit) a slot is taken exactly when it is
    busy at the query's first step, so every node the search enters holds a free slot and
    a search costs O(log n); in other orders the skip is a filter and the leaves decide."""

    def __init__(self, positions: int) -> None:
        self.size = _tree_size(max(positions, 1))
        self.common: list[Runs | None] = [None] * (2 * self.size)  # None: no slot below

    def first_free(self, runs: Sequence[Run]) -> int | None:
        """The first position whose slot is free on every step of ``runs``."""
        common, size = self.common, self.size
        pending = [1]
        while pending:
            node = pending.pop()
            busy = common[node]
            if busy is None or busy.overlaps_any(runs):
                continue
            if node >= size:
                return node - size
            pending.append(2 * node + 1)
            pending.append(2 * node)
        return None

    def open(self, position: int, runs: Sequence[Run]) -> None:
        """A new slot at ``position``, busy on ``runs``."""
        common = self.common
        node = position + self.size
        common[node] = Runs(runs)
        node //= 2
        while node:
            below = common[node]
            if below is None:
                common[node] = Runs(runs)
            elif below:
                common[node] = below.within(runs)
            else:
                break  # nothing in common already: nor above
            node //= 2

    def add(self, position: int, runs: Sequence[Run]) -> None:
        """The slot at ``position`` is also busy on ``runs`` (free there until now)."""
        common = self.common
        node = position + self.size
        added = Runs(runs)
        while True:
            target = common[node]
            for start, end in zip(added.starts, added.ends):
                target.add(start, end)  # type: ignore[union-attr]
            if node == 1:
                return
            sibling = common[node ^ 1]
            if sibling is not None:
                added = sibling.within(added.runs())
                if not added:
                    return
            node //= 2


class Occupancy:
    """Byte ranges placed over step runs, for packing: a binary tree over the steps keeps
    each range at the O(log n) nodes that exactly cover its steps (``own``) and in the
    summary (``alive``) of those nodes and of every node on the paths above them.  The
    ranges alive at some step of a query are then the union of O(log n) merged runs — the
    ``alive`` of the nodes that cover the query, the ``own`` of the nodes above them — and
    holes are found in that union without looking at each placed class.

    When every placed range is alive at some step of the query (a deep net in training
    keeps all its activations alive from Forward to Backward, so each long-lived one meets
    all placed before it), that union is simply everything placed, kept merged as one
    Runs: the tree would give it in many small interleaved pieces, crossed one by one."""

    def __init__(self, steps: int) -> None:
        self.size = _tree_size(max(steps, 1))
        self.levels = self.size.bit_length() - 1
        self.own: list[Runs | None] = [None] * (2 * self.size)
        self.alive: list[Runs | None] = [None] * (2 * self.size)
        self.everything = Runs()  # every placed range
        self.latest_start, self.earliest_end = -1, steps + 1  # of the placed ranges' steps
        self.one_run_each = True  # so far every placed range has one run of steps
        self.looked_past = 0  # holes and runs the searches have crossed so far: their work
        self._last: tuple[Sequence[Run], tuple[list[int], list[int]]] | None = None  # _nodes' last answer

    def _nodes(self, runs: Sequence[Run]) -> tuple[list[int], list[int]]:
        """The nodes covering ``runs`` exactly, and the nodes above them (each of which
        covers part of a run).  A packer asks for the same runs twice, to find a hole and
        to place there: the last answer is kept."""
        last = self._last
        if last is not None and last[0] == runs:
            return last[1]
        found = self._nodes_of(runs)
        self._last = (runs, found)
        return found

    def _nodes_of(self, runs: Sequence[Run]) -> tuple[list[int], list[int]]:
        covering: list[int] = []
        above: list[int] = []
        size, levels = self.size, self.levels
        for start, end in runs:
            low, high = start + size, end + size
            for level in range(1, levels + 1):
                if (low >> level) << level != low:
                    above.append(low >> level)
                if (high >> level) << level != high and (not above or above[-1] != (high - 1) >> level):
                    above.append((high - 1) >> level)
            while low < high:
                if low & 1:
                    covering.append(low)
                    low += 1
                if high & 1:
                    high -= 1
                    covering.append(high)
                low //= 2
                high //= 2
        if len(runs) > 1:
            return list(set(covering)), list(set(above))
        return covering, above

    def place(self, runs: Sequence[Run], start: int, end: int) -> None:
        self.everything.add(start, end)
        self.latest_start = max(self.latest_start, runs[0][0])
        self.earliest_end = min(self.earliest_end, runs[-1][1])
        self.one_run_each = self.one_run_each and len(runs) == 1
        covering, above = self._nodes(runs)
        own, alive = self.own, self.alive
        for node in covering:
            found = own[node]
            if found is None:
                own[node] = _one_run(start, end)
            else:
                found.add(start, end)
            found = alive[node]
            if found is None:
                alive[node] = _one_run(start, end)
            else:
                found.add(start, end)
        for node in above:
            found = alive[node]
            if found is None:
                alive[node] = _one_run(start, end)
            else:
                found.add(start, end)

    def _alive(self, runs: Sequence[Run]) -> list[tuple[list[int], list[int]]]:
        """The byte ranges alive at some step of ``runs``: (starts, ends) of a few Runs."""
        if self.one_run_each and len(runs) == 1 and self.latest_start < runs[0][1] and self.earliest_end > runs[0][0]:
            return [(self.everything.starts, self.everything.ends)] if self.everything else []  # all placed meet the query
        covering, above = self._nodes(runs)
        alive, own = self.alive, self.own
        found = [alive[node] for node in covering] + [own[node] for node in above]
        return [(r.starts, r.ends) for r in found if r]

    def lowest_hole(self, runs: Sequence[Run], size: int) -> int:
        """The lowest offset where ``size`` (> 0) bytes are free during ``runs``."""
        alive = self._alive(runs)
        offset = 0
        for _ in range(FEW_HOLES):
            reach = offset
            for starts, ends in alive:
                i = bisect_left(starts, offset + size)
                if i and ends[i - 1] > reach:
                    reach = ends[i - 1]
            if reach == offset:
                return offset
            offset = reach  # everything below reach meets a range that starts before offset + size
        reach, holes = _holes_above(alive, offset)
        self.looked_past += len(holes)
        fitting = holes >= size
        return int(reach[fitting.argmax()]) if fitting.any() else int(reach[-1])

    def tightest_hole(self, runs: Sequence[Run], size: int) -> int:
        """The offset of the smallest hole that holds ``size`` (> 0) bytes during ``runs``,
        the lowest of equal ones; with no hole large enough, the end of all ranges."""
        alive = self._alive(runs)
        if sum(len(starts) for starts, _ in alive) > FEW_HOLES:
            reach, holes = _holes_above(alive, 0)
            self.looked_past += len(holes)
            fitting = (holes >= size).nonzero()[0]
            return int(reach[fitting[holes[fitting].argmin()]]) if len(fitting) else int(reach[-1])
        best_offset, best_size = -1, -1
        reach = 0
        while True:
            extended = True
            while extended:  # reach: the end of the busy bytes from here on
                extended = False
                for starts, ends in alive:
                    i = bisect_right(starts, reach)
                    if i and ends[i - 1] > reach:
                        reach, extended = ends[i - 1], True
            following = None
            for starts, ends in alive:
                i = bisect_right(starts, reach)
                if i < len(starts) and (following is None or starts[i] < following):
                    following = starts[i]
            if following is None:
                return best_offset if best_offset >= 0 else reach
            hole = following - reach
            if size <= hole and (best_size < 0 or hole < best_size):
                best_offset, best_size = reach, hole
                if hole == size:
                    return best_offset
            reach = following


FEW_HOLES = 16  # more holes than this in a query's memory are merged by numpy at once


def _holes_above(alive: list[tuple[list[int], list[int]]], offset: int):
    """Every hole from ``offset`` up in the union of the given runs, merged at once:
    (reach, holes) where holes[i] is the free bytes from reach[i] to the i-th run (by
    start; <= 0: none) and reach[-1] is the end of them all.  Memory fragmented into many
    holes costs a pass over its runs here, in numpy, not a step per hole in Python."""
    import numpy as np

    starts: list[int] = []
    ends: list[int] = []
    for run_starts, run_ends in alive:
        first = bisect_right(run_ends, offset)
        starts += run_starts[first:]
        ends += run_ends[first:]
    both = np.array((starts, ends), dtype=np.int64)  # one conversion of the Python lists (the costly part)
    order = np.argsort(both[0], kind="stable")
    reach = np.maximum.accumulate(np.concatenate(([offset], both[1][order])))
    return reach, both[0][order] - reach[:-1]

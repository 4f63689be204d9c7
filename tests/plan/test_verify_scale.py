"""The verifier at any depth (issue 33, item 4): Net::Init's step touches every storage of
the net (a 20,000-layer net: some 125,000 accesses in one step), so whatever the verifier
does per access of a step must not scan what the step did before; a scan made
``optimize --recompute sqrt`` of a 20,000-layer Inception-style net run for tens of minutes.
Counted in storage comparisons, not seconds."""

from __future__ import annotations

from types import SimpleNamespace

from caffemem.passes.schedule import Access, Step
from caffemem.plan.verify import Placement, _traced, replay_violations

WRITES = 2000  # storages one step writes


class Counted(int):
    """A storage id that counts how often it is compared for equality (a scan of a list
    compares; a set or dict lookup of distinct ids hashes and does not)."""

    comparisons = 0

    def __eq__(self, other: object) -> bool:
        Counted.comparisons += 1
        return int(self) == int(other)  # type: ignore[call-overload]

    __hash__ = int.__hash__


def init_step_writing(n: int) -> Step:
    """Net::Init's step as the schedule makes it: each storage written, then read."""
    ids = [Counted(storage) for storage in range(n)]
    return Step(0, "init", None, tuple(Access(ids[storage], write) for storage in range(n) for write in (True, False)))


def test_tracing_a_step_that_writes_every_storage_compares_no_storage_with_the_others():
    Counted.comparisons = 0
    [(step, reads)] = list(_traced([init_step_writing(WRITES)]))
    compared = Counted.comparisons
    assert reads == [(storage, "self") for storage in range(WRITES)]
    assert compared == 0


def test_replaying_a_step_that_writes_every_storage_compares_no_storage_with_the_others():
    step = init_step_writing(WRITES)
    schedule = SimpleNamespace(steps=(step,), classes=tuple(SimpleNamespace(id=s, owner=f"blob{s}") for s in range(WRITES)), step_name=lambda step: "init")
    place = {storage: Placement(0, 4 * storage, 4 * storage + 4) for storage in range(WRITES)}
    Counted.comparisons = 0
    violations = replay_violations(schedule, place)
    compared = Counted.comparisons
    assert violations == []
    assert compared <= 8 * WRITES  # the shadow memory's few per write; a scan: WRITES² / 2

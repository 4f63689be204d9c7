"""The slot table a net file carries (`optimize -o`'s mem_param), as the patched Caffe
takes it: each phase's slots and recompute entries, every planned storage pointed at its
slot, and the runtime's copies of the parameters it restores.

Entry points: :func:`tables_in` (the tables of a file, read by `verify` and by `analyze`,
which reports a file as the patched Caffe runs it), :func:`taken_by_init` (what the
patched Net::Init does with one, for both), :func:`assignment_of` and :func:`with_copies`
(shared with `optimize`, which plans the tables).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from caffemem.errors import CaffememError, Location
from caffemem.passes.device import DeviceReport
from caffemem.passes.load import NetSource, NetText
from caffemem.passes.memory import MemoryReport, SlotAssignment
from caffemem.layers.registry import SpecTable
from caffemem.passes.recompute import Recomputation, with_recomputation
from caffemem.passes.schedule import Schedule
from caffemem.plan.record import MadeFor, read_records
from caffemem.plan.verify import PlanData, Violation, bind_violations, recompute_entries
from caffemem.prototxt.write import read_exact
from caffemem.schema import caffe_pb2


@dataclass(frozen=True)
class Table:
    """One phase's table as the file gives it: caffemem's slots (and recompute entries), or
    none at all where the phase's ``optimize_*`` flag hands it to the fork's own optimizer
    (``fork``: then the plan is the one that optimizer makes, reproduced by plan/fork.py)."""

    phase: str
    plan: PlanData
    record: MadeFor | None
    fork: bool = False


def tables_in(source: NetSource, path, phase: str | None) -> list[Table]:
    """Each phase's table from the file's mem_param, in the order Caffe reads it, with the
    record of that phase (plan/record.py: refused where it names another phase).

    A phase is caffemem's when the block has slots or recompute entries for it, or a
    ``caffemem made-for`` record (a net with nothing to share: a table of no slot); a
    phase whose ``optimize_*`` flag is on with none of these is the fork's (``--target
    fork``, or a file written for the memory-multiloading fork), checked as its optimizer
    would plan it (issue 31: both were "the file carries no slot table")."""
    where = Location(file=source.file)
    block = source.proto.mem_param
    if not source.proto.HasField("mem_param"):
        raise CaffememError("the file carries no mem_param: write one with `caffemem optimize NET -o OUT`, or give a plan JSON after the net", where)
    tables: dict[str, PlanData] = {}
    for slot in block.slot:
        name = caffe_pb2.Phase.Name(slot.phase)
        table = tables.setdefault(name, PlanData({}, ()))
        table.slot_bytes[slot.id] = slot.bytes
        tables[name] = PlanData(table.slot_bytes, table.assign + tuple((m.blob, m.kind, slot.id, m.offset) for m in slot.member))
    for entry in block.recompute:  # recompute entries without slots are legal (docs/runtime.md)
        name = caffe_pb2.Phase.Name(entry.phase)
        table = tables.get(name, PlanData({}, ()))
        tables[name] = replace(table, recompute=table.recompute + ((entry.layer, entry.before, entry.restore_params),))
    # a binary NetParameter has no comments, so no record
    records = {} if source.binary else read_records(path.text if isinstance(path, NetText) else read_exact(path), source.file)
    flagged = {"TRAIN": block.optimize_train, "TEST": block.optimize_test}
    found: list[Table] = []
    for name in ("TRAIN", "TEST"):
        if name in tables or name in records:
            found.append(Table(name, tables.get(name, PlanData({}, ())), records.get(name)))
        elif flagged[name]:
            found.append(Table(name, PlanData({}, ()), None, fork=True))
    if not found:
        raise CaffememError("the file's mem_param plans no phase (no slot table, and optimize_train and optimize_test are off): write one with `caffemem optimize NET -o OUT`, or give a plan JSON after the net", where)
    if phase is not None and phase not in {table.phase for table in found}:
        raise CaffememError(f"the file's mem_param has no {phase} phase (it has {', '.join(table.phase for table in found)})", where)
    return [table for table in found if phase is None or table.phase == phase]


def taken_by_init(schedules: Sequence[Schedule], plan: PlanData, specs: SpecTable, net: str) -> tuple[list[Schedule], tuple[Recomputation, ...], list[Violation]]:
    """What the patched Caffe's Net::Init does with a table, on each run it must hold in
    (the first is the one it binds): the schedules with the table's recompute entries
    run, those entries, and what stops Init (an entry it refuses, a member that does not
    bind to its slot), empty where the table is taken."""
    recomputed, stops = recompute_entries(schedules[0], plan, specs, net)
    schedules = [with_recomputation(schedule, recomputed) for schedule in schedules]
    return schedules, recomputed, stops or bind_violations(schedules[0], plan, net)


def assignment_of(data: PlanData, schedule: Schedule) -> SlotAssignment:
    """Every member storage of every planned class pointed at its slot."""
    slot_of = {}
    for blob, kind, slot, _ in data.assign:
        storage = schedule.class_named(blob, kind)
        for member in schedule.classes[storage].members:
            slot_of[member] = slot
    return SlotAssignment(slot_of, dict(data.slot_bytes))


RECOMPUTE_COPIES = "recompute_copies"  # the cause of the runtime's copies of restored parameters


def with_copies(report: "MemoryReport | DeviceReport", copies: int) -> "MemoryReport | DeviceReport":
    """A planned run's report with the runtime's copies of the parameters it restores around
    a recomputed Forward (allocated once at Net::Init, on the card in GPU mode: none on the
    host, but the cause is in both sides' tables, as every cause of a DeviceReport is)."""
    if not copies:
        return report
    if isinstance(report, DeviceReport):
        return replace(report, device_by_cause=report.device_by_cause | {RECOMPUTE_COPIES: copies}, host_by_cause=report.host_by_cause | {RECOMPUTE_COPIES: 0})
    return replace(report, heap_init=report.heap_init + copies, by_category=report.by_category | {RECOMPUTE_COPIES: copies})

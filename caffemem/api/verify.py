"""`caffemem verify` as an API: judge a slot table against the net's own run — the table a
prototxt carries (``optimize -o``) or a plan JSON (``optimize --json``/``--plan-json``).

Each table is checked for the phase its own entries name (a slot's ``phase``, a plan
entry's ``phase``), built as the plan records it was made for (plan/record.py: inputs,
batch, dtype, device, engine), unless the caller overrides a field; a record naming
another phase than its table is refused (record.py ``for_table``).  Then, in order:

1. what the patched Caffe's Net::Init would say of the table (plan/verify.py
   ``bind_violations``: every member a storage of this net, fitting its slot, every slot
   exactly its members' size) — a table from another batch or other inputs stops here,
   as it would stop Caffe;
2. the replay over shadow memory by the verifier that shares no code with the planners.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace

from caffemem.api.analyze import Options, analyze, load_source, net_batch, planning_runs, spec_table, with_overrides
from caffemem.api.source import NetLike, as_source
from caffemem.errors import CaffememError, Location, excerpt
from caffemem.passes.load import NetSource
from caffemem.passes.schedule import build_schedule
from caffemem.plan.carried import Table, tables_in, taken_by_init
from caffemem.plan.fork import fork_assignment, fork_plan_data
from caffemem.plan.record import MadeFor, fingerprint, for_table
from caffemem.plan.verify import Violation, read_plan, verify_plan_on
from caffemem.units import DTYPE_BYTES

# The Options fields a plan's record supplies when the caller does not set them.
RECORDED = ("phase", "inputs", "batch", "stages", "level", "dtype", "device", "engine")


@dataclass(frozen=True)
class Verdict:
    """One phase of a table, judged."""

    phase: str
    slots: int
    violations: tuple[Violation, ...]
    made_for: MadeFor | None = None  # what the plan records it was made for
    checked_at: str = ""  # the run it was checked at, in words
    notes: tuple[str, ...] = ()
    batch: int | None = None  # the batch it was checked at (analyze.net_batch; None: no data layer)

    @property
    def safe(self) -> bool:
        return not self.violations


def verify(
    net: NetLike,
    plan_file: str | None = None,
    options: Options = Options(),
    *,
    explicit: Collection[str] = RECORDED,
    phase: str | None = None,
    inputs: Mapping[str, Sequence[int]] | None = None,
) -> tuple[Verdict, ...]:
    """Every phase of the table (or only ``options.phase``): the one ``net`` carries in
    its mem_param when ``plan_file`` is None, else the plan file's.  ``explicit``: the
    Options fields the caller chose; the others come from the plan's record where it has
    one (the library default: the caller's ``options`` throughout; a plan without a record
    is checked in a CPU run unless ``Options(device="gpu")``, the command line's default)."""
    options = with_overrides(options, phase, inputs, None)
    if plan_file is not None and not isinstance(plan_file, (str, os.PathLike)):
        raise CaffememError(f"plan_file {excerpt(repr(plan_file))}: expected a path to a --plan-json file, or None (the table the net carries)")
    path = as_source(net)
    source = load_source(path, options)
    if not isinstance(source, NetSource):
        raise CaffememError("verify takes a net definition, not a solver: pass the net file the table is for", Location(file=str(path)))
    wanted = options.phase if "phase" in explicit else None
    if plan_file is None:
        tables = tables_in(source, path, wanted)
    else:
        where = Location(file=os.fspath(plan_file))
        tables = [
            Table(plan_phase, plan, None if record is None or plan_phase is None else for_table(MadeFor.from_json(record, where), plan_phase, f"the made_for record of the {plan_phase} entry", where))
            for plan_phase, plan, record in read_plan(plan_file, wanted)
        ]
    current = fingerprint(source.proto)
    verdicts = []
    for table in tables:
        plan_phase, plan, record = table.phase, table.plan, table.record
        at = _options_at(options, record, plan_phase, explicit)
        built = analyze(path, at, tables=False).nets[0]
        specs = spec_table(at)
        runs = [run for run in planning_runs(built.shaped, specs, at) if run is not None]  # GPU mode: the CPU run too
        schedules = [build_schedule(built.shaped, specs, at.dtype, run=run) for run in runs]
        if table.fork:  # the fork's optimizer plans this phase at run time: its plan, reproduced
            plan = fork_plan_data(fork_assignment(built.shaped, specs, tuple(source.proto.mem_param.exclude_blob), DTYPE_BYTES[at.dtype], runs[0].flags))
        schedules, _, violations = taken_by_init(schedules, plan, specs, built.shaped.graph.name)
        violations = violations or verify_plan_on(schedules, plan)
        notes = ()
        if record is not None and record.net != current:
            notes = (f"the net is not the one the table was planned for (fingerprint {current}, planned for {record.net}): checked against the net as it is now",)
        if record is None:
            notes = ("the plan records no run it was made for: checked at the file's own shapes and the flags given",)
        if table.fork:
            private = ", ".join(source.proto.mem_param.exclude_blob) or "none"
            notes = (f"no slot table for {plan_phase}: optimize_{plan_phase.lower()} hands it to the memory-multiloading fork's own optimizer (yjxiong/caffe), whose plan caffemem reproduces and checks here (exclude_blob: {private})", *notes)
        verdicts.append(Verdict(built.phase, len(plan.slot_bytes), tuple(violations), record, _describe(at, built.shaped), notes, net_batch(built.shaped, specs)))
    return tuple(verdicts)


def _options_at(options: Options, record: MadeFor | None, phase: str | None, explicit: Collection[str]) -> Options:
    """The options of one phase's check: the caller's where chosen, else the record's; the
    phase is always the table's own (``phase``; None: a bare plan, the caller's), never
    the record's: the record must not decide which run a table is checked against."""
    phase = phase or options.phase
    if record is None:
        return replace(options, phase=phase)
    chosen = {name: getattr(options, name) for name in RECORDED if name in explicit and name != "phase"}
    inputs = dict(record.inputs) | dict(chosen.pop("inputs", {}))
    at = replace(options, phase=phase, inputs=inputs, batch=record.rescale, stages=record.stages, level=record.level, dtype=record.dtype, device=record.device, engine=record.engine)
    return replace(at, **chosen)


def _describe(options: Options, shaped) -> str:
    """The run a phase was checked at, in words."""
    data = [(layer.tops[0], shaped.blob_shapes[layer.tops[0]]) for layer in shaped.graph.layers if not layer.bottoms and layer.tops and layer.tops[0] in shaped.blob_shapes]
    shapes = ", ".join(f"{name} {'x'.join(map(str, shape))}" for name, shape in data[:3])
    return f"{shapes}; {options.dtype}, {options.device} mode, {options.build_engine} engine"

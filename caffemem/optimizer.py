"""`caffemem optimize` as an API: plan shared storage for a net, per phase, and prove it.

schedule → liveness → plan (every strategy asked for) → replay each candidate over the
memory model (exact bytes, lazy slots) → verify each (independent checker) → keep the
smallest safe one; the fork's own plan is computed alongside as the baseline.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .api import Options, build_net, default_phase, spec_table
from .errors import CaffememError, Location
from .graph import ShapedGraph
from .layers.access import BlobId
from .layers.registry import SpecTable
from .passes.filter import make_state
from .passes.fork import fork_assignment
from .passes.liveness import Liveness, lifetimes
from .passes.load import NetSource, SolverSource, load
from .passes.memory import DTYPE_BYTES, MemoryReport, SlotAssignment, simulate
from .passes.plan import Plan, make_plan
from .passes.schedule import Schedule, build_schedule
from .passes.upgrade import upgrade_net
from .passes.verify import PlanData, verify_plan
from .schema import caffe_pb2


@dataclass(frozen=True)
class OptimizeSettings:
    strategy: str = "auto"
    exclude: tuple[str, ...] = ()
    share_buffers: bool = False


@dataclass(frozen=True)
class PhasePlan:
    """One phase: the plan chosen, what it saves, and against what."""

    phase: str
    shaped: ShapedGraph
    schedule: Schedule
    liveness: Liveness
    strategy: str  # the strategy whose plan was kept
    plan_data: PlanData
    stock: MemoryReport
    planned: MemoryReport
    fork: MemoryReport
    fork_safe: bool
    lower_bound: int
    candidates: dict[str, int]  # strategy -> whole-run bytes (safe candidates only)
    rejected: dict[str, str] = field(default_factory=dict)  # strategy -> first violation

    @property
    def savings(self) -> int:
        return self.stock.heap_total - self.planned.heap_total


@dataclass(frozen=True)
class OptimizeResult:
    path: str
    source: NetSource
    exclude: tuple[str, ...]
    phases: tuple[PhasePlan, ...]


def plan_data(plan: Plan, schedule: Schedule) -> PlanData:
    """A plan as data: slots and, per storage class, its owner blob and part."""
    classes = schedule.classes
    return PlanData(
        {slot.id: slot.bytes for slot in plan.slots},
        tuple((classes[m].owner, classes[m].part, slot.id, offset) for slot in plan.slots for m, offset in slot.placements()),
    )


def slot_assignment(plan: Plan, schedule: Schedule) -> SlotAssignment:
    """Every member storage of every planned class pointed at its slot."""
    slot_of = {}
    for slot in plan.slots:
        for storage in slot.members:
            for member in schedule.classes[storage].members:
                slot_of[member] = slot.id
    return SlotAssignment(slot_of, {slot.id: slot.bytes for slot in plan.slots})


def fork_plan_data(assignment: SlotAssignment) -> PlanData:
    return PlanData(dict(assignment.slot_bytes), tuple((blob.name, part, slot, 0) for (blob, part), slot in assignment.slot_of.items()))


def plan_phase(shaped: ShapedGraph, specs: SpecTable, options: Options, settings: OptimizeSettings) -> PhasePlan:
    """Plan one built net (one phase): every strategy asked for, replayed and verified."""
    stock = simulate(shaped, specs, options.dtype, options.engine)
    schedule = build_schedule(shaped, specs, options.dtype, options.engine)
    liveness = lifetimes(schedule, settings.exclude, settings.share_buffers)

    fork_slots = fork_assignment(shaped, specs, settings.exclude, DTYPE_BYTES[options.dtype])
    fork = simulate(shaped, specs, options.dtype, options.engine, fork_slots)
    fork_data = fork_plan_data(fork_slots)
    fork_violations = verify_plan(schedule, fork_data)

    # strategy -> (plan as data, replayed run)
    safe: dict[str, tuple[PlanData, MemoryReport]] = {}
    rejected: dict[str, str] = {}
    if settings.strategy == "fork" or (settings.strategy == "auto" and not fork_violations):
        safe["fork"] = (fork_data, fork)
    if settings.strategy != "fork":
        for name, candidate in make_plan(liveness, settings.strategy).items():
            data = plan_data(candidate, schedule)
            violations = verify_plan(schedule, data)
            if violations:
                rejected[name] = str(violations[0])
                continue
            safe[name] = (data, simulate(shaped, specs, options.dtype, options.engine, slot_assignment(candidate, schedule)))
    if not safe:
        raise CaffememError(f"no safe plan found ({'; '.join(f'{k}: {v}' for k, v in rejected.items())})", Location(file=shaped.graph.source))
    name, (data, planned) = min(safe.items(), key=lambda item: (item[1][1].heap_total, len(item[1][0].slot_bytes), item[0] == "fork"))

    shareable = sum(life.bytes for life in liveness.shareable)
    return PhasePlan(
        phase=shaped.graph.phase,
        shaped=shaped,
        schedule=schedule,
        liveness=liveness,
        strategy=name,
        plan_data=data,
        stock=stock,
        planned=planned,
        fork=fork,
        fork_safe=not fork_violations,
        lower_bound=stock.heap_total - shareable + liveness.lower_bound_peak,
        candidates={k: v[1].heap_total for k, v in safe.items()},
        rejected=rejected,
    )


def optimize(path: str, options: Options, settings: OptimizeSettings, force: bool = False) -> OptimizeResult:
    """Plan every phase the user asked for (default: TRAIN and TEST for a net that
    trains, TEST for a deploy net)."""
    specs = spec_table(options)
    source = load(path, lenient=options.lenient)
    if isinstance(source, SolverSource):
        raise CaffememError("optimize takes a net definition, not a solver: pass the solver's net file", Location(file=path))
    if source.proto.HasField("mem_param") and not force:
        raise CaffememError("the file already has a mem_param (it was planned before); pass --force to plan it again", Location(file=path))
    upgraded, _ = upgrade_net(source.proto, source.file)
    exclude = tuple(dict.fromkeys(tuple(source.proto.mem_param.exclude_blob) + settings.exclude))
    settings = OptimizeSettings(settings.strategy, exclude, settings.share_buffers)
    if options.phase:
        phases = [options.phase]
    else:
        phases = ["TRAIN", "TEST"] if default_phase(upgraded, specs) == "TRAIN" else ["TEST"]
    known = set()
    results = []
    for phase in phases:
        state = make_state(phase, options.stages, options.level, base=upgraded.state)
        shaped = build_net(source, upgraded, state, options, specs)
        known |= set(shaped.blob_shapes)
        results.append(plan_phase(shaped, specs, options, settings))
    unknown = [name for name in settings.exclude if name not in known]
    if unknown:
        raise CaffememError(f"--exclude-blob {unknown[0]}: no blob of that name in the net", Location(file=path))
    return OptimizeResult(path, source, exclude, tuple(results))


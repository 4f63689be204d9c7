"""`caffemem optimize` as an API: plan shared storage for a net, per phase, and prove it.

schedule → liveness → plan (every strategy asked for) → rank the candidates by the figure
the reports print (the card's in GPU mode) → verify them, best first (independent
checker) → keep the first safe one and replay it over the memory model; the fork's own
plan is computed alongside as the baseline.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from caffemem.api.analyze import Options, analyze, build_net, inputs_for, load_source, measure, net_batch, net_phases, planning_runs, prepare_run, spec_table, with_overrides
from caffemem.api.source import NetLike, as_source
from caffemem.api.timeline import Timeline, run_timeline
from caffemem.errors import CaffememError, Location, UnsafePlan, excerpt
from caffemem.graph import ShapedGraph
from caffemem.layers.access import BlobId
from caffemem.layers.registry import SpecTable
from caffemem.layers.vision import is_workspace
from caffemem.passes.device import DeviceReport, device_footprint, pool_line
from caffemem.passes.filter import make_state
from caffemem.passes.inplace import InPlaceResult, make_in_place
from caffemem.passes.liveness import Liveness, kept_members, lifetimes
from caffemem.passes.load import NetSource, NetText, SolverSource
from caffemem.passes.memory import (
    MemoryReport,
    Run,
    SlotAssignment,
    prepare,
    replay,
)
from caffemem.passes.recompute import Recomputation, with_recomputation
from caffemem.passes.schedule import Schedule, build_schedule
from caffemem.passes.upgrade import upgrade_net
from caffemem.plan.carried import assignment_of, with_copies
from caffemem.plan.fork import fork_assignment, fork_plan_data, fork_run
from caffemem.plan.recompute import BudgetMissed, Choice, Policy, Search, missed, parse_policy
from caffemem.plan.record import MadeFor, comment_lines, fingerprint, read_records
from caffemem.plan.rewrite import mem_param, with_batch
from caffemem.plan.strategies import DEVICE_ALIGNMENT, STRATEGY_NAMES, Plan, make_plan, packed_onto
from caffemem.plan.timing import prices_for
from caffemem.plan.verify import PlanData, recompute_entries, verify_plan_on
from caffemem.prototxt.write import read_exact, rewrite_text
from caffemem.schema import caffe_pb2
from caffemem.units import DTYPE_BYTES


RECOMPUTE_NOT_WITH_FORK = (
    "--recompute is run by caffemem's patched Caffe from its own table: it cannot go with --strategy fork or --target fork (the fork's optimizer recomputes nothing)"
)


@dataclass(frozen=True)
class OptimizeSettings:
    strategy: str = "auto"
    exclude: tuple[str, ...] = ()
    share_buffers: bool = False
    inplace: bool = False  # first make layers in place where stock Caffe allows (passes/inplace.py)
    # optimize --recompute: run some Forwards again in Backward (plan/recompute.py); it
    # shares the recomputed layers' buffers, so it implies share_buffers.  A string is read
    # as the flag's value ("cheap", "sqrt", "budget=6GiB").
    recompute: Policy | None = None

    def __post_init__(self) -> None:
        """Checked as the flags are (issue 31: ``strategy="bogus"`` gave "no safe plan found
        ()", and ``strategy="fork"`` with ``recompute`` was accepted where the CLI refuses
        it)."""
        if self.strategy not in STRATEGY_NAMES:
            raise CaffememError(f"strategy {excerpt(repr(self.strategy))}: expected one of {', '.join(STRATEGY_NAMES)}")
        exclude = (self.exclude,) if isinstance(self.exclude, str) else self.exclude
        if not isinstance(exclude, Sequence) or not all(isinstance(name, str) for name in exclude):
            raise CaffememError(f"exclude {excerpt(repr(self.exclude))}: expected a list of blob names")
        object.__setattr__(self, "exclude", tuple(exclude))
        if isinstance(self.recompute, str):
            object.__setattr__(self, "recompute", parse_policy(self.recompute, "recompute="))
        if self.recompute is not None and not isinstance(self.recompute, Policy):
            raise CaffememError(f"recompute {excerpt(repr(self.recompute))}: expected a policy (\"cheap\", \"sqrt\", \"budget=6GiB\"), or None")
        for name in ("share_buffers", "inplace"):
            if not isinstance(getattr(self, name), bool):
                raise CaffememError(f"{name} {excerpt(repr(getattr(self, name)))}: expected True or False")
        if self.recompute is not None and self.strategy == "fork":
            raise CaffememError(RECOMPUTE_NOT_WITH_FORK)


@dataclass(frozen=True)
class DeviceFigures:
    """GPU mode: what one card holds in stock Caffe, under the fork's plan and under ours
    (the slots bound on the device, as the patched runtime does)."""

    stock: DeviceReport
    fork: DeviceReport
    planned: DeviceReport
    # The patched Caffe (runtime v6) running the net with no table: stock's allocations,
    # the pool's handles and workspace.  What every plan of ours starts from.
    runtime: DeviceReport | None = None

    @property
    def pool_line(self) -> str | None:
        """What the plan's figure counts of the v6 pool against stock's handles, or None."""
        return pool_line(self.stock, self.planned)


@dataclass(frozen=True)
class Peak:
    """The step where the most shareable bytes hold live values (the lower bound's)."""

    step: int
    at: str | None  # the step's name (None: a run of no steps)
    alive: tuple[str, ...]  # the storage classes alive there, as owner:part


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
    candidates: dict[str, int]  # strategy -> the figure reported as planned, were it kept (not rejected), best first
    rejected: dict[str, str] = field(default_factory=dict)  # strategy -> first violation
    as_given: int | None = None  # with --inplace: stock Caffe's total bytes for the file as given
    devices: DeviceFigures | None = None  # GPU mode: the figures on the card
    # Every run the plan was verified on: ``schedule``, and in GPU mode the CPU run's too.
    schedules: tuple[Schedule, ...] = ()
    batch: int | None = None  # the batch planned for (analyze.net_batch), as the headline states it
    # optimize --recompute: what the policy chose (the Forwards the patched Caffe runs
    # again inside Backward, their FLOPs, the plan without them), None without the flag.
    recompute: Choice | None = None
    # What it was planned with, for what a view computes only when it asks (``timeline``).
    specs: SpecTable = field(kw_only=True, repr=False, compare=False)
    options: Options = field(kw_only=True, repr=False, compare=False)

    @functools.cached_property
    def timeline(self) -> Timeline:
        """The planned run step by step in the figures' mode (api/timeline.py), computed
        when a view first asks (``optimize --html``).  Its slots are placed over the run
        planned; in GPU mode its live values are the planned run's on the card."""
        figures = (self.devices.stock, self.devices.planned) if self.devices is not None else (self.stock, self.planned)
        return run_timeline(self.schedule, self.liveness, *figures, self.totals()["lower_bound"], self.plan_data)

    @property
    def peak(self) -> Peak:
        """The planned run's peak of shareable live values (the terminal's and --json's)."""
        schedule, liveness = self.schedule, self.liveness
        at = schedule.step_name(schedule.steps[liveness.peak_step]) if schedule.steps else None
        return Peak(liveness.peak_step, at, tuple(schedule.classes[storage].label for storage in liveness.alive_at_peak))

    @property
    def kept_private(self) -> dict[str, str]:
        """owner:part -> why the plan keeps that storage class private."""
        return {self.schedule.classes[storage].label: why for storage, why in self.liveness.kept.items()}

    @property
    def recomputed(self) -> tuple[Recomputation, ...]:
        return self.recompute.recomputed if self.recompute is not None else ()

    @property
    def savings(self) -> int:
        if self.devices is not None:
            return self.devices.stock.device_bytes - self.devices.planned.device_bytes
        return self.stock.heap_total - self.planned.heap_total

    @property
    def planned_figures(self) -> "MemoryReport | DeviceReport":
        """The planned run's report in the mode asked for (check --optimized, fit --optimized)."""
        return self.devices.planned if self.devices is not None else self.planned

    # The JSON document's fields (report/document.py), under the same names.
    @property
    def bytes(self) -> dict[str, int]:
        return self.totals() | {"prefetch": self.stock.prefetch_bytes}

    @property
    def fork_plan_safe(self) -> bool:
        return self.fork_safe

    @property
    def plan(self) -> PlanData:
        return self.plan_data

    def totals(self) -> dict[str, int]:
        """The whole-run figures as Caffe allocates them, prefetch batches included (the
        same in every plan): ``stock`` is the figure analyze, check and fit give.  The
        terminal, the JSON and the HTML all print these."""
        extra = self.stock.outside_heap_bytes
        figures = {"stock": self.stock.total_bytes, "fork": self.fork.total_bytes, "planned": self.planned.total_bytes, "lower_bound": self.lower_bound + extra}
        if self.devices is not None:
            # The bound on the card: stock less the most any plan can save, which is the same
            # storage as in the heap when every shareable storage is touched on the device.
            stock = self.devices.stock.device_bytes
            base = (self.devices.runtime or self.devices.stock).device_bytes  # a plan of ours runs on the v6 pool
            figures = {"stock": stock, "fork": self.devices.fork.device_bytes, "planned": self.devices.planned.device_bytes, "lower_bound": base - (self.stock.heap_total - self.lower_bound)}
        return figures | ({} if self.as_given is None else {"stock_as_given": self.as_given})


@dataclass(frozen=True)
class OptimizeResult:
    path: str
    source: NetSource
    exclude: tuple[str, ...]
    phases: tuple[PhasePlan, ...]
    inplace: InPlaceResult | None = None  # with --inplace: the layers rewritten and the new text


def plan_data(plan: Plan, schedule: Schedule) -> PlanData:
    """A plan as data: slots and, per storage class, its owner blob and part."""
    classes = schedule.classes
    return PlanData(
        {slot.id: slot.bytes for slot in plan.slots},
        tuple((classes[m].owner, classes[m].part, slot.id, offset) for slot in plan.slots for m, offset in slot.placements()),
    )


@dataclass(frozen=True)
class _Candidate:
    """One plan the optimizer may keep, with the figure it is ranked by: the whole-run
    figure the reports print as ``planned`` (the card's in GPU mode)."""

    figure: int
    slots: int
    name: str
    data: PlanData
    fork: bool = False
    blobs_only: bool = False  # a --share-buffers candidate that shares no layer buffer

    @property
    def rank(self) -> tuple[int, int, bool, bool]:
        # Ties: fewer slots, then caffemem's own plan before the fork's, then buffers shared.
        return (self.figure, self.slots, self.fork, self.blobs_only)


ON_HOST_ONLY = "touched only on the host in a GPU run: a slot is cudaMalloc'd on the card, so sharing it would only add to the card"
POOLED_WORKSPACE = "a cuDNN workspace: the patched Caffe (runtime v6) runs every cuDNN layer on its pool's one workspace, never more than a slot would hold"


def pooled_workspaces(schedule: Schedule) -> dict[tuple[BlobId, str], str]:
    """The cuDNN workspaces of a GPU run, which the planner leaves to the v6 pool (runtime
    v6 shares one workspace per card; a table naming one, written for v5, still runs)."""
    return {member: POOLED_WORKSPACE for c in schedule.classes for member in c.members if is_workspace(member[0])}


BUDGET_RETRIES = 4  # --recompute budget=SIZE: plans made again at a lower target when the packer missed the bound


def plan_phase(shaped: ShapedGraph, specs: SpecTable, options: Options, settings: OptimizeSettings, bound: "RecomputeBound | None" = None) -> PhasePlan:
    """:func:`plan_one`, and for ``--recompute budget=SIZE`` the same again at a lower target
    while the plan the packer made is above the budget its bound met.  ``bound``: this net's
    :func:`recompute_bound` at these settings, already made (fit --recompute's answer).
    Every try starts from the one prepared net and fork plan (:class:`_Start`): only the
    choice, the packing and its proof depend on the target (issue 33: each try prepared the
    whole net again, and a 20,000-layer net's ``budget=`` did not finish).  A lower target
    often chooses the very recomputation chosen before (its bound was below the budget by
    more than the packer missed it by): its plan is that try's, not packed and proved again
    (the 20,000-layer Inception-style net: three of its five tries)."""
    policy = settings.recompute
    if policy is None or policy.budget is None:
        return plan_one(shaped, specs, options, settings, bound)
    settings = replace(settings, share_buffers=True)
    start = _start(shaped, specs, options, settings, bound)
    search = _recompute_search(start.ready, specs, options, settings) if bound is None else None
    planned = plan_one(shaped, specs, options, settings, bound, start=start, search=search)
    for _ in range(BUDGET_RETRIES):
        figure = planned.totals()["planned"]
        if figure <= policy.budget:
            return planned
        policy = replace(policy, target=(policy.target if policy.target is not None else policy.budget) - (figure - policy.budget))
        search = search if search is not None else _recompute_search(start.ready, specs, options, settings)
        try:
            choice = _recompute_choice(start.ready, specs, options, replace(settings, recompute=policy), search)
        except BudgetMissed:
            break
        if _same_recomputation(choice, planned.recompute):
            planned = replace(planned, recompute=choice)  # what plan_one makes of it: the same plan, for the new policy
        else:
            planned = plan_one(shaped, specs, options, replace(settings, recompute=policy), RecomputeBound(start.ready.base, choice, start.ready), start=start)
    if planned.totals()["planned"] > policy.budget:
        raise missed(policy.budget, planned.totals()["planned"])
    return planned


def _same_recomputation(choice: Choice, before: Choice | None) -> bool:
    """Whether ``choice`` is ``before`` but for its policy: the same Forwards run again at the
    same places (so the same schedule and liveness), the same figures."""
    return before is not None and replace(choice, policy=before.policy) == before


@dataclass(frozen=True)
class _Start:
    """What every plan of one built net starts from whatever it recomputes: the prepared net
    and the fork's own plan, with the verifier's verdict on it."""

    ready: "_Prepared"
    fork_slots: SlotAssignment
    fork: MemoryReport
    fork_card: DeviceReport | None
    fork_data: PlanData
    fork_violations: tuple


def _start(shaped: ShapedGraph, specs: SpecTable, options: Options, settings: OptimizeSettings, bound: "RecomputeBound | None" = None) -> _Start:
    """:class:`_Start` at ``settings`` (a recomputation's share buffers); ``bound``: its prepared net, made already."""
    ready = bound.ready if bound is not None else _prepared(shaped, specs, options, settings)
    fork_slots, fork, fork_card = fork_plan(shaped, specs, options, settings.exclude, ready.run, ready.on_card_run)
    fork_data = fork_plan_data(fork_slots)
    return _Start(ready, fork_slots, fork, fork_card, fork_data, tuple(verify_plan_on(ready.schedules, fork_data)))


def plan_one(shaped: ShapedGraph, specs: SpecTable, options: Options, settings: OptimizeSettings, bound: "RecomputeBound | None" = None, *, start: _Start | None = None, search: Search | None = None) -> PhasePlan:
    """Plan one built net (one phase): every strategy asked for, ranked by the figure the
    reports print (the card's in GPU mode), verified, the smallest safe one kept.

    A plan never loses: in GPU mode storage the card never holds is kept private (the
    patched runtime cudaMallocs every slot whole, mem_slots.cpp, so a slot of host-only
    storage is all loss), and with ``--share-buffers`` every strategy's plan of the blobs
    alone stays a candidate, with the buffers added to its packing where each pays
    (:func:`packed_onto`), so sharing buffers never ends above not sharing them.
    ``start``, ``search``: this net's :func:`_start` and :func:`_recompute_search` at these
    settings, made already (plan_phase's tries)."""
    if settings.recompute is not None:
        settings = replace(settings, share_buffers=True)
    start = start if start is not None else _start(shaped, specs, options, settings, bound)
    ready = start.ready
    on_card_run, run, stock, schedule, liveness, schedules, keep = ready.on_card_run, ready.run, ready.stock, ready.schedule, ready.liveness, ready.schedules, ready.keep
    on_card, stock_card, runtime_card, base_figure = ready.on_card, ready.stock_card, ready.runtime_card, ready.base_figure
    fork_slots, fork, fork_card, fork_data, fork_violations = start.fork_slots, start.fork, start.fork_card, start.fork_data, list(start.fork_violations)

    recompute = None
    if settings.recompute is not None:
        recompute = bound.choice if bound is not None else _recompute_choice(ready, specs, options, settings, search)
        read_back(schedule, specs, recompute)
        if recompute.recomputed:
            schedule, liveness = recompute.schedule, recompute.liveness
            schedules = tuple(with_recomputation(run_schedule, recompute.recomputed) for run_schedule in schedules)
    # The runtime's copies of the parameters it restores (BatchNorm's running averages).
    copies = recompute.saved_param_bytes if recompute is not None else 0

    # Every shareable class is touched (on the card, in GPU mode), so a plan's run costs the
    # stock run, less the storage of the classes it places, plus its slots (each holds a
    # class the card touches, so the card holds it whole, as the runtime cudaMallocs it):
    # candidates are ranked by that, unreplayed, in the figure the reports print.
    shareable = sum(life.bytes for life in liveness.shareable)

    def candidates_of(plans: Mapping[str, Plan], blobs_only: bool = False) -> list[_Candidate]:
        found = []
        for name, plan in plans.items():
            figure = base_figure - sum(schedule.classes[m].bytes for slot in plan.slots for m in slot.members) + plan.slot_bytes + copies
            found.append(_Candidate(figure, len(plan.slots), name, plan_data(plan, schedule), blobs_only=blobs_only))
        return found

    ranked: list[_Candidate] = []
    if settings.strategy == "fork" or (settings.strategy == "auto" and not fork_violations and not (recompute and recompute.recomputed)):
        figure = fork_card.device_bytes if fork_card is not None else fork.total_bytes
        ranked.append(_Candidate(figure, len(fork_data.slot_bytes), "fork", fork_data, fork=True))
    if settings.strategy != "fork":
        alignment = DEVICE_ALIGNMENT if options.device == "gpu" else 1
        ranked += candidates_of(make_plan(liveness, settings.strategy, alignment))
        buffers = tuple(life for life in liveness.shareable if schedule.classes[life.storage].kind == "buffer")
        if settings.share_buffers and buffers:
            blobs = lifetimes(schedule, settings.exclude, False, keep or None)
            alone = make_plan(blobs, settings.strategy, alignment)
            ranked += candidates_of(alone, blobs_only=True)
            onto = {name: packed_onto(plan, blobs.shareable, buffers, alignment) for name, plan in alone.items() if len(plan.slots) == 1 and plan.slots[0].offsets}
            ranked += candidates_of(onto)
    ranked.sort(key=lambda c: c.rank)
    rejected: dict[str, str] = {}
    chosen, at = None, len(ranked)
    for at, found in enumerate(ranked):  # verified best first, until one passes
        violations = fork_violations if found.fork else verify_plan_on(schedules, found.data)
        if not violations:
            chosen = found
            break
        rejected.setdefault(found.name, str(violations[0]))
    if chosen is None and settings.strategy == "fork":
        raise UnsafePlan(f"the fork's plan is unsafe ({rejected['fork']}); nothing written: --strategy auto keeps the smallest safe plan", Location(file=shaped.graph.source))
    if chosen is None:
        raise CaffememError(f"no safe plan found ({'; '.join(f'{k}: {v}' for k, v in rejected.items())})", Location(file=shaped.graph.source))
    assignment = fork_slots if chosen.fork else assignment_of(chosen.data, schedule)
    planned = fork if chosen.fork else with_copies(replay(run, assignment), copies)
    devices = None
    if on_card is not None:
        devices = DeviceFigures(stock_card, fork_card, fork_card if chosen.fork else with_copies(on_card(on_card_run, slots=assignment, pooled=True), copies), runtime_card)
    candidates: dict[str, int] = {}  # each strategy's best variant not rejected, best first
    for found in ranked[at:]:
        candidates.setdefault(found.name, found.figure)
    return PhasePlan(
        phase=shaped.graph.phase,
        shaped=shaped,
        schedule=schedule,
        liveness=liveness,
        strategy=chosen.name,
        plan_data=replace(chosen.data, recompute=recompute_names(shaped, recompute)) if recompute is not None else chosen.data,
        stock=stock,
        planned=planned,
        fork=fork,
        fork_safe=not fork_violations,
        lower_bound=stock.heap_total - shareable + liveness.lower_bound_peak + copies,
        candidates=candidates,
        rejected={name: why for name, why in rejected.items() if name not in candidates},
        devices=devices,
        schedules=schedules,
        batch=net_batch(shaped, specs),
        recompute=recompute,
        specs=specs,
        options=options,
    )


def recompute_names(shaped: ShapedGraph, choice: Choice) -> tuple[tuple[str, str, bool], ...]:
    """The chosen recomputations as the table names them: (layer, before layer, restore_params)."""
    layers = shaped.graph.layers
    return tuple((layers[entry.layer].name, layers[entry.before].name, entry.restore_params) for entry in choice.recomputed)


def read_back(schedule: Schedule, specs: SpecTable, choice: Choice) -> None:
    """The chosen recomputations, named as the table names them, read back as the patched
    Caffe's Net::Init reads them (plan/verify.py ``recompute_entries``): they must be the
    very layers chosen, or the table would run other Forwards than the verified ones (a
    name two layers share, issue 31).  The planner never names such a layer; this is the
    proof, and an UnsafePlan (nothing written) where it would fail."""
    shaped = schedule.shaped
    read, stops = recompute_entries(schedule, PlanData({}, (), recompute_names(shaped, choice)), specs, shaped.graph.name)
    if stops or read != choice.recomputed:
        why = stops[0].message if stops else "its entries name other layers than those chosen"
        raise UnsafePlan(f"the recompute table would not run what was planned ({why}); nothing written", Location(file=shaped.graph.source))


@dataclass(frozen=True)
class _Prepared:
    """What every plan of one built net starts from: its runs, the schedule and the
    liveness (with what stays private), in the figures' mode; stock's figures on demand
    (fit --recompute's search reads only the base run's: :func:`recompute_bound`)."""

    on_card_run: Run
    run: Run
    schedule: Schedule
    liveness: Liveness
    schedules: tuple[Schedule, ...]
    keep: dict[tuple[BlobId, str], str]
    on_card: object  # GPU mode: the card's report of a run (device_footprint, partial); else None
    runtime_card: DeviceReport | None
    heap_run: Run  # the CPU heap's run, as analyze simulates it (in CPU mode ``run``): its rules' notes are analyze's

    @functools.cached_property
    def stock(self) -> MemoryReport:
        """Stock Caffe's heap (a replay: made when a plan is, not for a bound)."""
        return replay(self.run)

    @functools.cached_property
    def stock_card(self) -> DeviceReport | None:
        """Stock BVLC's card (GPU mode), as :attr:`stock`."""
        return self.on_card(self.on_card_run) if self.on_card is not None else None  # type: ignore[operator]

    @property
    def base(self) -> "MemoryReport | DeviceReport":
        """The report of the run our plans start from (the v6 pool's run in GPU mode)."""
        return self.runtime_card if self.runtime_card is not None else self.stock

    @property
    def base_figure(self) -> int:
        """What our plans start from: :attr:`base`'s figure."""
        return self.base.device_bytes if isinstance(self.base, DeviceReport) else self.base.total_bytes


def _prepared(shaped: ShapedGraph, specs: SpecTable, options: Options, settings: OptimizeSettings) -> _Prepared:
    """:func:`plan_one`'s start, shared with :func:`recompute_bound`."""
    on_card_run = prepare_run(shaped, specs, options)
    run, on_cpu = planning_runs(shaped, specs, options, on_card_run)  # in CPU mode: the same run, None
    schedule = build_schedule(shaped, specs, options.dtype, run=run)
    cpu_schedule = build_schedule(shaped, specs, options.dtype, run=on_cpu) if on_cpu is not None else None
    keep: dict[tuple[BlobId, str], str] = {}
    if cpu_schedule is not None:
        keep = {member: f"on the CPU: {why}" for member, why in kept_members(lifetimes(cpu_schedule, settings.exclude, settings.share_buffers)).items()}
    on_card = runtime_card = None
    if options.device == "gpu":
        on_card = functools.partial(device_footprint, specs=specs, engine=options.build_engine, context_bytes=options.context_bytes, gpus=options.gpus, card=options.card)
        runtime_card = on_card(on_card_run, pooled=True)
        # What the card touches is the same in stock's run: the pool changes which storage
        # a cuDNN workspace is, not what a step touches (passes/device.py _TwoSidedHeap.touch).
        on_host = [c for c in schedule.classes if not any(member in runtime_card.on_device for member in c.members)]
        keep |= {member: ON_HOST_ONLY for c in on_host for member in c.members if member not in keep}
        keep |= {member: why for member, why in pooled_workspaces(schedule).items() if member not in keep}
    liveness = lifetimes(schedule, settings.exclude, settings.share_buffers, keep or None)
    schedules = (schedule,) if cpu_schedule is None else (schedule, cpu_schedule)
    return _Prepared(on_card_run, run, schedule, liveness, schedules, keep, on_card, runtime_card, on_cpu if on_cpu is not None else run)


def _recompute_choice(ready: _Prepared, specs: SpecTable, options: Options, settings: OptimizeSettings, search: Search | None = None) -> Choice:
    """What ``settings.recompute`` chooses on the prepared net, measured with the plan's own
    liveness settings (``search``: :func:`_recompute_search` of the same, made already)."""
    assert settings.recompute is not None
    return (search if search is not None else _recompute_search(ready, specs, options, settings)).choose(settings.recompute)


def _recompute_search(ready: _Prepared, specs: SpecTable, options: Options, settings: OptimizeSettings) -> Search:
    """The policies' search on the prepared net, with the plan's own liveness settings and
    the device's prices: what budget='s tries share."""
    return Search(ready.schedule, specs, _liveness_of(ready, settings), ready.base_figure, prices_for(options.device, options.build_engine))


def _liveness_of(ready: _Prepared, settings: OptimizeSettings) -> Callable[[Schedule], Liveness]:
    """A schedule's liveness with the plan's own settings, for the recompute search."""

    def liveness_of(schedule: Schedule) -> Liveness:
        """The prepared schedule's liveness is made already, with these settings when
        they share buffers (a recomputation's always do): choose asks for it first."""
        if schedule is ready.schedule and settings.share_buffers:
            return ready.liveness
        return lifetimes(schedule, settings.exclude, True, ready.keep or None)

    return liveness_of


@dataclass(frozen=True)
class RecomputeBound:
    """A recompute policy's choice on one built net without the plan: ``choice.figure`` is
    the plan's lower bound (what the packer then reaches at best), ``base`` the report of
    the run every plan starts from."""

    base: "MemoryReport | DeviceReport"
    choice: Choice
    ready: _Prepared = field(repr=False, compare=False)  # what the plan at this batch starts from (plan_one reuses it)


def recompute_bound(shaped: ShapedGraph, specs: SpecTable, options: Options, settings: OptimizeSettings) -> RecomputeBound:
    """What :func:`planned_phase` chooses to recompute, and its bound, without packing or
    verifying a plan: ``fit --recompute`` searches the batch by it and plans the answer
    only (issue 33: a plan per batch took ~3 s on ResNet-152).  A plan's figure is never
    below the bound (a packing holds at least the peak of what it shares)."""
    settings = replace(settings, exclude=excluded_blobs(shaped.graph.proto, settings.exclude), share_buffers=True)
    ready = _prepared(shaped, specs, options, settings)
    return RecomputeBound(ready.base, _recompute_choice(ready, specs, options, settings), ready)


MAX_FORK_EXCLUSIONS = 64  # blobs kept private before giving up on making the fork's plan safe


def fork_plan(shaped: ShapedGraph, specs: SpecTable, options: Options, exclude: tuple[str, ...], run: Run, on_card_run: Run) -> tuple[SlotAssignment, MemoryReport, DeviceReport | None]:
    """The fork's own plan of one built net with ``exclude`` kept private, and what the fork
    holds running it: the heap, and in GPU mode the card."""
    slots = fork_assignment(shaped, specs, exclude, DTYPE_BYTES[options.dtype], run.flags)
    heap = replay(fork_run(run), slots)
    card = None
    if options.device == "gpu":
        card = device_footprint(fork_run(on_card_run), specs=specs, engine=options.build_engine, context_bytes=options.context_bytes, gpus=options.gpus, slots=slots, card=options.card)
    return slots, heap, card


def fork_losing_phases(result: OptimizeResult, options: Options, exclude: tuple[str, ...]) -> dict[str, tuple[int, int]]:
    """The planned phases where the fork's own optimizer, with ``exclude`` kept private,
    holds more than stock Caffe (phase -> (the fork's figure, stock's)): ``--target fork``
    leaves its optimizer off there (issue 31: fork_defect's TEST net, 448 B against 440)."""
    specs = spec_table(options)
    losing: dict[str, tuple[int, int]] = {}
    for phase in result.phases:
        on_card_run = prepare_run(phase.shaped, specs, options)
        run, _ = planning_runs(phase.shaped, specs, options, on_card_run)
        _, heap, card = fork_plan(phase.shaped, specs, options, exclude, run, on_card_run)
        figure, stock = (card.device_bytes if card is not None else heap.total_bytes), phase.totals()["stock"]
        if figure > stock:
            losing[phase.phase] = (figure, stock)
    return losing


def fork_safe_exclusions(phase: PhasePlan, specs: SpecTable, options: Options, exclude: tuple[str, ...]) -> tuple[str, ...] | None:
    """The blobs to add to ``exclude_blob`` so that the fork's own optimizer gives this
    phase a safe plan (empty: it already does), or None when keeping blobs private does
    not help.  Each round keeps private the blob the verifier's first violation names."""
    run = prepare(phase.shaped, specs, options.dtype, options.heap_engine)
    blobs = set(phase.shaped.blob_shapes)
    added: tuple[str, ...] = ()
    for _ in range(MAX_FORK_EXCLUSIONS):
        slots = fork_assignment(phase.shaped, specs, exclude + added, DTYPE_BYTES[options.dtype], run.flags)
        violations = verify_plan_on(phase.schedules, fork_plan_data(slots))
        if not violations:
            return added
        blob = violations[0].blob
        if blob not in blobs or blob in exclude + added:
            return None
        added += (blob,)
    return None


def fork_target_exclusions(result: OptimizeResult, options: Options) -> tuple[str, ...] | None:
    """What ``--target fork`` adds to ``exclude_blob`` so that the fork's own optimizer is
    safe in every planned phase (empty: it already is), or None when that does not help."""
    specs = spec_table(options)
    found = [fork_safe_exclusions(phase, specs, options, result.exclude) for phase in result.phases if not phase.fork_safe]
    if any(added is None for added in found):
        return None
    return tuple(dict.fromkeys(blob for added in found for blob in added or ()))


def excluded_blobs(net: caffe_pb2.NetParameter, extra: tuple[str, ...] = ()) -> tuple[str, ...]:
    """The blobs kept private: the file's own ``mem_param.exclude_blob``, then the
    ``--exclude-blob`` flags, each once."""
    return tuple(dict.fromkeys(tuple(net.mem_param.exclude_blob) + tuple(extra)))


def planned_report(shaped: ShapedGraph, specs: SpecTable, options: Options, settings: OptimizeSettings = OptimizeSettings()) -> "MemoryReport | DeviceReport":
    """The bytes of one built net under caffemem's plan, honouring the file's
    ``exclude_blob``, in the mode asked for: the one computation behind ``optimize``,
    ``check --optimized`` and ``fit --optimized``."""
    return planned_phase(shaped, specs, options, settings).planned_figures


def planned_phase(shaped: ShapedGraph, specs: SpecTable, options: Options, settings: OptimizeSettings = OptimizeSettings(), bound: "RecomputeBound | None" = None) -> PhasePlan:
    """:func:`planned_report`'s whole plan (``fit --recompute`` reads its recomputation's
    estimated seconds; ``bound``: :func:`recompute_bound` of ``shaped`` at ``settings``)."""
    return plan_phase(shaped, specs, options, replace(settings, exclude=excluded_blobs(shaped.graph.proto, settings.exclude)), bound)


def optimize(
    net: NetLike,
    options: Options = Options(),
    settings: OptimizeSettings = OptimizeSettings(),
    force: bool = False,
    *,
    phase: str | None = None,
    inputs: Mapping[str, Sequence[int]] | None = None,
    batch: int | None = None,
) -> OptimizeResult:
    """Plan every phase the user asked for (default: TRAIN and TEST for a net that
    trains, TEST for a deploy net).  ``net``: a path, prototxt text or a NetParameter.
    Planned for a CPU run unless ``Options(device="gpu")`` (the command line's default)."""
    options = with_overrides(options, phase, inputs, batch)
    path = as_source(net)
    specs = spec_table(options)
    source = load_source(path, options)
    if isinstance(source, SolverSource):
        raise CaffememError("optimize takes a net definition, not a solver: pass the solver's net file", Location(file=str(path)))
    if source.proto.HasField("mem_param") and not force:
        raise CaffememError("the file already has a mem_param (it was planned before); pass --force to plan it again", Location(file=str(path)))
    upgraded, _ = upgrade_net(source.proto, source.file)
    exclude = excluded_blobs(source.proto, settings.exclude)
    settings = replace(settings, exclude=exclude)
    as_given, inplace = (source, upgraded), None
    if settings.inplace:
        inplace = make_in_place(path.text if isinstance(path, NetText) else read_exact(path), source, upgraded, specs, exclude, _run_of(source, options, specs))
        source = replace(source, proto=inplace.net)
        upgraded, _ = upgrade_net(inplace.net, source.file)
    if options.phase:
        phases = [options.phase]
    else:
        phases = net_phases(upgraded, specs, options)
    known = set()
    results = []
    for phase in phases:
        state = make_state(phase, options.stages, options.level, base=upgraded.state)
        shaped = build_net(source, upgraded, state, options, specs)
        known |= set(shaped.blob_shapes)
        try:
            planned = plan_phase(shaped, specs, options, settings)
        except CaffememError as error:
            raise error.at(phase=phase) from None
        if inplace is not None:
            original = build_net(*as_given, state, options, specs)
            known |= set(original.blob_shapes)
            memory, device = measure(original, specs, options)
            planned = replace(planned, as_given=(device or memory).total_bytes)
        results.append(planned)
    unknown = [name for name in settings.exclude if name not in known]
    if unknown:
        raise CaffememError(f"--exclude-blob {unknown[0]}: no blob of that name in the net", Location(file=str(path)))
    return OptimizeResult(str(path), source, exclude, tuple(results), inplace)




def made_for(result: OptimizeResult, options: Options, net: str | None = None, rescaled: bool = False) -> tuple[MadeFor, ...]:
    """What each phase's plan was made for (plan/record.py).  ``net``: the fingerprint of
    the file the table goes into (default: the net planned).  ``rescaled``: the file now
    states the batch planned (``optimize --batch N -o``), so the record asks for no
    rescale and gives full --input shapes at the batch planned."""
    records = []
    for phase in result.phases:
        inputs = inputs_for(options.inputs, None, result.path, phase.phase)
        if rescaled:
            planned = phase.shaped.blob_shapes
            inputs = {name: planned[name] if name in planned and len(shape) == len(planned[name]) else shape for name, shape in inputs.items()}
        records.append(
            MadeFor(
                phase=phase.phase,
                batch=_planned_batch(phase.shaped),
                rescale=None if rescaled else options.batch,
                inputs={name: tuple(shape) for name, shape in inputs.items()},
                stages=options.stages,
                level=options.level,
                dtype=options.dtype,
                device=options.device,
                engine=options.engine,
                net=net or fingerprint(result.source.proto),
            )
        )
    return tuple(records)


def _planned_batch(shaped: ShapedGraph) -> int | None:
    """The first data top's first axis (the batch in all but recurrent nets)."""
    for layer, shapes in zip(shaped.graph.layers, shaped.layer_shapes):
        if not layer.bottoms and shapes.tops and shapes.tops[0]:
            return shapes.tops[0][0]
    return None


def written_text(result: OptimizeResult, options: Options, original: str, exclude: tuple[str, ...], target: str, fork_off: frozenset[str] = frozenset()) -> str:
    """The file `optimize -o` writes: ``original`` (the file's exact text) with, under
    ``--batch N``, its data layers' batch lines at N (plan/rewrite.py ``with_batch``),
    and the mem_param block with each phase's table and what it was made for
    (``fork_off``: the phases whose fork optimizer ``--target fork`` leaves off)."""
    text = original
    if options.batch is not None:
        text = with_batch(text, [phase.shaped for phase in result.phases], spec_table(options), options.batch, result.source.proto, result.path)
    net = load_source(NetText(text, result.path), options)
    records = list(made_for(result, options, fingerprint(net.proto), rescaled=options.batch is not None))
    previous = result.source.proto.mem_param if result.source.proto.HasField("mem_param") else None
    planned = {phase.phase for phase in result.phases}
    kept = read_records(original, result.path)
    records += [kept[phase] for phase in ("TRAIN", "TEST") if phase in kept and phase not in planned]
    return rewrite_text(text, mem_param(result.phases, exclude, target, previous, fork_off), comment_lines(records) if target == "caffemem" else ())


def other_phases_rebatched(result: OptimizeResult, options: Options, text: str) -> tuple[str, ...]:
    """With ``--phase P --batch N -o``: the phases not planned whose nets the rewritten
    text changes too (a data layer with no phase rule feeds both), each in one line."""
    upgraded, _ = upgrade_net(result.source.proto, result.path)
    planned = {phase.phase for phase in result.phases}
    others = [phase for phase in net_phases(upgraded, spec_table(options), options) if phase not in planned]
    notes = []
    for phase in others:
        before, after = (analyze(source, replace(options, phase=phase, batch=None), tables=False).nets[0].shaped for source in (result.path, NetText(text, result.path)))
        changed = [name for name, shape in before.blob_shapes.items() if after.blob_shapes.get(name) != shape]
        if changed:
            notes.append(f"the {phase} net reads the same data layers, so it now runs at batch {options.batch} too; its table was not planned (optimize without --phase plans both)")
    return tuple(notes)


def _run_of(source: NetSource, options: Options, specs: SpecTable):
    """For --inplace: an upgraded net's run in one phase (its reads and writes)."""

    def run_of(net: caffe_pb2.NetParameter, phase: str) -> Run:
        state = make_state(phase, options.stages, options.level, base=net.state)
        return prepare(build_net(source, net, state, options, specs), specs, options.dtype, options.heap_engine)

    return run_of


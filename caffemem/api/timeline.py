"""A run step by step, as the views draw it: the bytes after each step (stock Caffe's
running total, a plan's, and those that hold a value a later step reads) and when each
storage class and each planned slot member holds one.

Entry point: :func:`run_timeline`, from a run's schedule, liveness and replayed reports.
The results compute it when a view first asks (``NetAnalysis.timeline``,
``PhasePlan.timeline``), so a command that draws no timeline never pays for it; the
views (report/html.py) only format it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from caffemem.passes.device import DeviceReport
from caffemem.passes.liveness import Liveness
from caffemem.passes.memory import MemoryReport
from caffemem.passes.schedule import Schedule
from caffemem.plan.verify import PlanData

Span = tuple[int, int]  # first and last step, inclusive


@dataclass(frozen=True)
class StorageUse:
    """One storage class the run touches: its first and last touch, and the steps it holds
    a value someone reads (a class kept private: its whole use, first touch to last)."""

    id: int
    label: str  # owner:part
    bytes: int
    kind: str  # "blob", "param" or "buffer"
    part: str  # "data" or "diff"
    touched: Span
    spans: tuple[Span, ...]
    kept: str | None  # why it keeps its own storage; None: a planner may share it
    members: tuple[str, ...]  # "blob (part)" of each member, sorted

    @property
    def style(self) -> str:
        """What the charts colour it by: a blob's part, else its kind."""
        return self.part if self.kind == "blob" else self.kind


@dataclass(frozen=True)
class SlotMember:
    """One (blob, data|diff) entry of a plan's table that some step touches (a member no
    step touches is never allocated), at its byte offset in its slot."""

    blob: str
    kind: str
    slot: int
    offset: int
    storage: StorageUse


@dataclass(frozen=True)
class Timeline:
    """One run (index = step index), in the figures' one unit: the heap and the prefetch
    batches in CPU mode, the card in GPU mode, so that each series ends at the figure the
    terminal and --json give."""

    step_names: tuple[str, ...]
    step_kinds: tuple[str, ...]  # "init", "forward", "backward", "recompute"
    allocated: tuple[int, ...]  # stock Caffe's running total (it frees nothing)
    planned: tuple[int, ...] | None  # the planned run's running total (slots are never freed either)
    live: tuple[int, ...]  # bytes holding a value a later step reads (private storage counted whole)
    lower_bound: int | None
    storage: tuple[StorageUse, ...]  # every class the run touches, by id
    slot_members: tuple[SlotMember, ...] = ()  # a plan's table entries, in its order

    @property
    def peak_step(self) -> int:
        """The step where the most bytes hold live values (the first, on a tie)."""
        return max(range(len(self.live)), key=lambda step: (self.live[step], -step))


def run_timeline(
    schedule: Schedule,
    liveness: Liveness,
    stock: MemoryReport | DeviceReport,
    planned: MemoryReport | DeviceReport | None = None,
    lower_bound: int | None = None,
    plan: PlanData | None = None,
) -> Timeline:
    """The timeline of one run: ``stock`` (and a plan's ``planned``) reports in the run's
    mode (a DeviceReport: the card's bytes), ``plan`` whose slots to place.  The live
    series is of the run the figures are of: in GPU mode with a plan, the planned run on
    the card (:func:`planned_live_by_step`), so that the plan's line never dips below it."""
    allocated = _series(schedule, stock)
    storage = storage_uses(schedule, liveness)
    members = slot_members(schedule, storage, plan) if plan is not None else ()
    series = _series(schedule, planned) if planned is not None else None
    if isinstance(planned, DeviceReport) and series is not None:
        live = planned_live_by_step(schedule, planned, series, members)
    else:
        live = live_by_step(liveness, allocated)
    return Timeline(
        step_names=tuple(schedule.step_name(step) for step in schedule.steps),
        step_kinds=tuple(step.kind for step in schedule.steps),
        allocated=allocated,
        planned=series,
        live=live,
        lower_bound=lower_bound,
        storage=storage,
        slot_members=members,
    )


def _series(schedule: Schedule, report: MemoryReport | DeviceReport) -> tuple[int, ...]:
    """The bytes allocated after each step in the report's mode."""
    if isinstance(report, DeviceReport):
        return card_by_step(schedule, report)
    return with_outside(allocated_by_step(schedule, report), report.outside_heap_bytes)


def allocated_by_step(schedule: Schedule, report: MemoryReport) -> tuple[int, ...]:
    """The running total of the replay's allocations after each step.

    Exact, because the replay charges every byte to the step that allocates it: Net::Init
    and the inputs' fill to step 0, each layer's Forward and Backward to its own step."""
    total, series = 0, []
    for step in schedule.steps:
        if step.layer is None:
            total += report.heap_init + report.input_bytes
        elif step.kind == "recompute":
            pass  # a Forward run again finds everything it touches allocated by its first run
        else:
            layer = report.layers[step.layer]
            total += layer.fwd_alloc if step.kind == "forward" else layer.bwd_alloc
        series.append(total)
    return tuple(series)


def card_by_step(schedule: Schedule, device: DeviceReport) -> tuple[int, ...]:
    """GPU mode: what the card holds after each step.  Each layer's Forward and Backward
    add what they cudaMalloc (``LayerSides.device``); everything else is there after step 0
    (Net::Init, the inputs, the prefetch batches, the CUDA context), so the series ends at
    the card's figure, ``device.device_bytes``."""
    return _by_step(schedule, [layer.device for layer in device.layers], device.device_bytes)


def _by_step(schedule: Schedule, layer_steps: Sequence[tuple[int, int, int]], total: int) -> tuple[int, ...]:
    """A running total that ends at ``total``: each layer's Forward and Backward add their
    part of ``layer_steps`` (SetUp, Forward, Backward) at their step, the rest is there
    after step 0 (a Forward run again allocates nothing)."""
    steps = [0 if step.layer is None or step.kind == "recompute" else layer_steps[step.layer][1 if step.kind == "forward" else 2] for step in schedule.steps]
    held, series = total - sum(steps), []
    for added in steps:
        held += added
        series.append(held)
    return tuple(series)


def planned_live_by_step(schedule: Schedule, planned: DeviceReport, series: tuple[int, ...], members: tuple[SlotMember, ...]) -> tuple[int, ...]:
    """GPU mode: what the planned run on the card holds live after each step, its bytes
    (``series``) less the free space of the slots it has cudaMalloc'd: each slot counted
    only for its members that hold a value then (issue 34: the live values of the card's
    stock run, its cuDNN workspaces at their bound and nothing shared, lay above the
    plan's line).  A verified plan never puts two members live at once in the same bytes,
    so the series never exceeds ``series``."""
    slots = _by_step(schedule, planned.slot_device, planned.slot_device_bytes) if planned.slot_device else (0,) * len(series)
    alive = [0] * (len(series) + 1)  # a difference array of the members' live bytes
    for member in members:
        for first, last in member.storage.spans:
            alive[first] += member.storage.bytes
            alive[last + 1] -= member.storage.bytes
    live, held = [], 0
    for step, total in enumerate(series):
        held += alive[step]
        live.append(total - slots[step] + held)
    return tuple(live)


def with_outside(series: tuple[int, ...], outside: int) -> tuple[int, ...]:
    """CPU mode: a heap series with what a run holds beyond the heap (the prefetch
    batches, filled at setup) from step 0 on, so that it ends at ``total_bytes``."""
    return tuple(value + outside for value in series)


def live_by_step(liveness: Liveness, allocated: tuple[int, ...]) -> tuple[int, ...]:
    """What a run needs at each step: stock's allocations, with every shareable class
    counted only while it holds a value a later step reads (from its first write to its
    last read) instead of from its first touch to the end."""
    steps = len(allocated)
    started = [0] * (steps + 1)  # shareable bytes stock has allocated by each step
    alive = [0] * (steps + 1)  # shareable bytes live at each step (a difference array)
    for life in liveness.shareable:
        started[life.start] += life.bytes
        for first, last in life.spans:
            alive[first] += life.bytes
            alive[last + 1] -= life.bytes
    series, allocated_shareable, live_shareable = [], 0, 0
    for step in range(steps):
        allocated_shareable += started[step]
        live_shareable += alive[step]
        series.append(allocated[step] - allocated_shareable + live_shareable)
    return tuple(series)


def touched_steps(schedule: Schedule) -> dict[int, Span]:
    """storage class -> (first, last) step that touches it (untouched classes: absent)."""
    seen: dict[int, Span] = {}
    for step in schedule.steps:
        for access in step.accesses:
            first, _ = seen.get(access.storage, (step.index, step.index))
            seen[access.storage] = (first, step.index)
    return seen


def storage_uses(schedule: Schedule, liveness: Liveness) -> tuple[StorageUse, ...]:
    """Every touched class with its live steps: a shareable class's lifetime, a private
    one's whole use."""
    touched = touched_steps(schedule)
    lives = {life.storage: life.spans for life in liveness.shareable}
    uses = []
    for storage in sorted(touched):
        cls = schedule.classes[storage]
        members = tuple(sorted({f"{blob.name} ({part})" for blob, part in cls.members}))
        spans = lives.get(storage, (touched[storage],))
        uses.append(StorageUse(storage, cls.label, cls.bytes, cls.kind, cls.part, touched[storage], spans, liveness.kept.get(storage), members))
    return tuple(uses)


def slot_members(schedule: Schedule, storage: tuple[StorageUse, ...], plan: PlanData) -> tuple[SlotMember, ...]:
    """The plan's table entries that a touched class answers to, in the table's order."""
    by_id = {use.id: use for use in storage}
    found = []
    for blob, kind, slot, offset in plan.assign:
        storage_id = schedule.class_named(blob, kind)
        if storage_id in by_id and slot in plan.slot_bytes:
            found.append(SlotMember(blob, kind, slot, offset, by_id[storage_id]))
    return tuple(found)

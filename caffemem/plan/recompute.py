"""Which Forwards to run again in Backward: the policies of ``optimize --recompute``.

Entry point: :func:`choose`.  The unit of recomputation is a chain of layers writing one
storage (Caffe's in-place chains, conv → BatchNorm → Scale → ReLU: only the whole chain, run
again from its head, gives its storage back its last value); a unit is recomputed only if
every layer's spec says its Forward may run twice (LayerSpec.recompute: no random draw, no
cursor, no state another step reads, BatchNorm's running averages saved and restored) and it
writes no storage that stays private anyway (an output, a loss).  Every candidate set is
measured, not estimated: the searches take its figure from plan/figures.py (the plain
liveness with the lives of the storages its recomputed Forwards touch rebuilt, the same
figure as its extended schedule through liveness, in a fraction of the time: issue 33), and
the chosen set's extended schedule (passes/recompute.py) goes through the same liveness as
any plan, whose lower bound is what the packer then reaches.

- ``cheap``: MXNet's mirror (``MXNET_BACKWARD_DO_MIRROR``): the units whose Forward costs
  little beside a convolution's (no GEMM), less those that save nothing (recomputing an
  Eltwise keeps its bottoms alive to the Backward: it may cost more than it saves).
- ``sqrt``: Chen, Xu, Zhang, Guestrin, "Training Deep Nets with Sublinear Memory Cost"
  (2016): checkpoints at the storages a cut of the Forward order crosses alone (a residual
  block's output), every k-th kept, each segment between them recomputed in its Backward;
  the k with the smallest footprint is kept (Chen's √n is where that minimum lies for equal
  segments, the real segments are not equal).
- ``budget=SIZE``: the least recomputation (estimated seconds, plan/timing.py) whose
  footprint fits SIZE.  A dynamic
  program, a multiple-choice knapsack over the segments (keep, recompute the cheap units,
  recompute all): each choice's saving is measured alone and the savings add up in Chen's
  segment model (every segment's storages are alive together at the turn from Forward to
  Backward, where such nets peak); the answer is then measured whole, and where the savings
  did not add up the target grows by the miss and the program runs again.  Not Checkmate's
  ILP: no solver is among caffemem's packages, and on Chen's segments the exact program over
  the Pareto frontier of (saving, seconds) is instant.

Every choice is priced in estimated seconds (plan/timing.py: per layer kind and device,
a cuDNN convolution's Reshape included) besides FLOPs: the time ratio, one iteration with
the Forwards run again over one without, is what a user pays.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from caffemem.errors import CaffememError, UnsafePlan
from caffemem.graph import count
from caffemem.layers.bound_buffers import BOUND_BUFFERS
from caffemem.layers.registry import LayerSpec, SpecTable, recompute_of
from caffemem.passes.liveness import Liveness
from caffemem.passes.recompute import Recomputation, names_given_twice, placed, with_recomputation
from caffemem.passes.schedule import Schedule
from caffemem.plan.timing import LayerTime, Prices, iteration_seconds, layer_times, prices_for, update_seconds
from caffemem.units import DTYPE_BYTES, format_size, mib_gib, parse_size

POLICIES = ("cheap", "sqrt", "budget=SIZE")


@dataclass(frozen=True)
class Policy:
    name: str  # "cheap", "sqrt" or "budget"
    budget: int | None = None  # bytes, for "budget"
    # What the search aims at, at most the budget: lower where the plan the packer made
    # from the chosen recomputation came out above its bound (api/optimize.py retries).
    target: int | None = None

    def describe(self) -> str:
        return f"budget={format_size(self.budget)}" if self.budget is not None else self.name


def parse_policy(text: str, flag: str = "--recompute") -> Policy:
    """``cheap``, ``sqrt`` or ``budget=SIZE`` (SIZE as every size flag takes it: 6GiB)."""
    name, sep, size = text.strip().partition("=")
    name = name.strip().lower()
    if name in ("cheap", "sqrt") and not sep:
        return Policy(name)
    if name == "budget" and sep:
        return Policy("budget", parse_size(size, f"{flag} budget="))
    raise CaffememError(f"{flag} '{text}': expected one of {', '.join(POLICIES)}")


@dataclass(frozen=True)
class Unit:
    """Layers that write one storage (an in-place chain), recomputed together or not at all."""

    layers: tuple[int, ...]
    writes: frozenset[int]  # the blob data storages its Forwards write
    why_not: str | None  # None: may be recomputed
    cheap: bool
    restores: tuple[int, ...]  # its layers whose parameters the runtime saves and restores
    flops: int  # its Forwards' work, once
    seconds: float = 0.0  # its Forwards run again, estimated (plan/timing.py)


@dataclass(frozen=True)
class Choice:
    """What a policy chose, measured: its figure by the search's (plan/figures.py, exact),
    its extended schedule and liveness whole when a plan first asks for them (``fit
    --recompute``'s search reads a choice's figure at each batch it evaluates and plans
    the answer alone: measuring every choice whole was a quarter of each, issue 33)."""

    policy: Policy
    recomputed: tuple[Recomputation, ...]
    figure: int  # the plan's bound in the figure the reports print: private bytes + the shared peak
    plain_figure: int  # the same without recomputation
    extra_flops: int  # the Forwards run again
    forward_flops: int  # one plain Forward pass
    saved_param_bytes: int  # the runtime's copies of restore_params layers' parameters
    extra_seconds: float = 0.0  # the Forwards run again, estimated (plan/timing.py)
    iteration_seconds: float = 0.0  # one training iteration without them, estimated
    time_model: str = ""  # what the estimate was fitted on (Prices.measured_on)
    measured: "Callable[[], _Measured] | None" = field(default=None, repr=False, compare=False)  # the chosen set measured whole

    @functools.cached_property
    def _whole(self) -> "_Measured":
        """The chosen set measured whole, once: its figure must be the one chosen by (the
        search's figures are the whole measure's, plan/figures.py; a difference is a bug)."""
        assert self.measured is not None
        whole = self.measured()
        if (whole.figure, whole.recomputed) != (self.figure, self.recomputed):
            raise AssertionError(f"the chosen recomputation measures {whole.figure:,} B whole, not the {self.figure:,} B it was chosen by")
        return whole

    @property
    def schedule(self) -> Schedule:
        """The schedule with the recompute steps."""
        return self._whole.schedule

    @property
    def liveness(self) -> Liveness:
        return self._whole.liveness

    @property
    def time_ratio(self) -> float:
        """One iteration with the recomputation over one without (estimated)."""
        return 1.0 + self.extra_seconds / self.iteration_seconds if self.iteration_seconds > 0 else 1.0


def forward_flops(spec: LayerSpec | None, proto, shapes) -> int:
    """One layer's Forward work (LayerSpec.forward_flops; by default one per top element)."""
    if spec is not None and spec.forward_flops is not None:
        return spec.forward_flops(proto, shapes)
    return sum(count(top) for top in shapes.tops)


def units_of(schedule: Schedule, specs: SpecTable, liveness: Liveness, times: Sequence[LayerTime] | None = None) -> list[Unit]:
    """The net's recompute units, in Forward order: layers grouped by the blob data storages
    their Forwards write (a layer that writes none, a Split, is in none); ``times``: each
    layer's estimated seconds (:func:`times_of`), for Unit.seconds."""
    shaped = schedule.shaped
    layers = shaped.graph.layers
    phase = shaped.graph.phase
    blob_data = {c.id for c in schedule.classes if c.kind == "blob" and c.part == "data"}
    writes: dict[int, set[int]] = {}
    for step in schedule.steps:
        if step.kind == "forward":
            writes[step.layer] = {a.storage for a in step.accesses if a.write and a.storage in blob_data}
    owner: dict[int, int] = {}  # storage -> unit root layer
    parent = {layer: layer for layer in writes}

    def find(layer: int) -> int:
        while parent[layer] != layer:
            parent[layer] = parent[parent[layer]]
            layer = parent[layer]
        return layer

    for layer, written in writes.items():
        for storage in written:
            if storage in owner:
                parent[find(layer)] = find(owner[storage])
            else:
                owner[storage] = layer
    grouped: dict[int, list[int]] = {}
    for layer, written in writes.items():
        if written:
            grouped.setdefault(find(layer), []).append(layer)
    shared = names_given_twice(shaped.graph)
    units = []
    for members in sorted(grouped.values(), key=min):
        members.sort()
        written = frozenset(storage for layer in members for storage in writes[layer])
        facts = [(layer, recompute_of(specs.get(layers[layer].type), layers[layer].proto, phase)) for layer in members]
        why_not = next((f"{layers[layer].name} ({layers[layer].type}): {fact.why}" for layer, fact in facts if not fact.safe), None)
        named = next((layers[layer] for layer in members if layers[layer].name in shared), None)
        if why_not is None and named is not None:
            why_not = f"{named.name} ({named.type}): the net gives {shared[named.name]} layers the name '{named.name}', and the patched Caffe finds a recomputed layer by name"
        kept = sorted((schedule.classes[storage].owner, liveness.kept[storage]) for storage in written if storage in liveness.kept)
        if why_not is None and kept:
            why_not = f"writes '{kept[0][0]}', which keeps its own storage ({kept[0][1]})"
        flops = sum(forward_flops(specs.get(layers[layer].type), layers[layer].proto, shaped.layer_shapes[layer]) for layer in members)
        seconds = sum(times[layer].again for layer in members) if times is not None else 0.0
        units.append(Unit(tuple(members), written, why_not, all(fact.cheap for _, fact in facts), tuple(layer for layer, fact in facts if fact.restores_params), flops, seconds))
    return units


@dataclass(frozen=True)
class _Measured:
    units: frozenset[int]  # indices into the unit list
    recomputed: tuple[Recomputation, ...]
    schedule: Schedule
    liveness: Liveness
    figure: int
    flops: int
    copies: int  # restored_bytes
    seconds: float = 0.0  # the Forwards run again, estimated


def times_of(schedule: Schedule, specs: SpecTable, prices: Prices) -> tuple[LayerTime, ...]:
    """Every layer's estimated seconds (plan/timing.py) at ``prices``; a layer binds a
    buffer to a slot where its type has any the runtime binds (a --recompute plan shares
    buffers)."""
    shaped = schedule.shaped
    layers = shaped.graph.layers
    return layer_times(
        shaped,
        lambda index: forward_flops(specs.get(layers[index].type), layers[index].proto, shaped.layer_shapes[index]),
        DTYPE_BYTES[schedule.dtype],
        prices,
        lambda index: layers[index].type in BOUND_BUFFERS,
    )


def time_ratio_at(choice: Choice, specs: SpecTable, prices: Prices) -> float:
    """``choice``'s time ratio at other ``prices`` (a measurement's runtime or device)."""
    times = times_of(choice.schedule, specs, prices)
    again = sum(times[layer].again for layer in {entry.layer for entry in choice.recomputed})
    return 1.0 + again / iteration_seconds(times, update_seconds(choice.schedule.shaped, DTYPE_BYTES[choice.schedule.dtype], prices))


_Found = TypeVar("_Found")  # a _Measured, or plan/figures.py's Figure


def choose(schedule: Schedule, specs: SpecTable, policy: Policy, liveness_of: Callable[[Schedule], Liveness], stock_figure: int, prices: Prices | None = None, *, search: "Search | None" = None) -> Choice:
    """The recomputation ``policy`` picks for ``schedule``, measured with ``liveness_of``
    (the plan's own liveness settings); ``stock_figure``: stock Caffe's figure, from which
    a plan's bound is the stock figure less the shareable storage plus its peak; ``prices``:
    the device's (plan/timing.py; default the CPU's); ``search``: a :class:`Search` made
    already from these same arguments (budget='s tries again).  Raises a CaffememError for
    a budget no recomputation reaches."""
    return (search if search is not None else Search(schedule, specs, liveness_of, stock_figure, prices)).choose(policy)


class Search:
    """What every policy's search on one schedule starts from (:func:`choose`'s arguments
    less the policy): the units, their estimated seconds, the evaluator of candidates'
    figures and every figure measured so far.  ``budget=`` asks it again at a lower target
    when the packed plan missed its bound (api/optimize.py plan_phase): the same search,
    not a new one (issue 33)."""

    def __init__(self, schedule: Schedule, specs: SpecTable, liveness_of: Callable[[Schedule], Liveness], stock_figure: int, prices: Prices | None = None) -> None:
        self.schedule, self.specs, self.liveness_of, self.stock_figure = schedule, specs, liveness_of, stock_figure
        self.prices = prices if prices is not None else prices_for("cpu")
        plain = liveness_of(schedule)
        self.times = times_of(schedule, specs, self.prices)
        units = self.units = units_of(schedule, specs, plain, self.times)

        @_cached
        def measure(chosen: frozenset[int]) -> _Measured:  # not over self: a cycle outlives the search
            return _measured_whole(schedule, liveness_of, stock_figure, chosen, _entries(schedule, units, chosen), units)

        self.measure = measure
        self.eligible = [u for u, unit in enumerate(units) if unit.why_not is None]
        self.none = measure.seed(frozenset(), _Measured(frozenset(), (), schedule, plain, _bound(stock_figure, plain), 0, 0))  # nothing recomputed: the plain liveness
        from caffemem.plan.figures import Figures  # numpy: here, not at import (a run under a tight address-space cap plans no recomputation)

        # Which buffers a recomputation lets share, as liveness decides with all its settings: those
        # the deepest recomputation refills, of those plain keeps only for the one reason it can
        # lift (Liveness.liftable; Figures finds them without measuring that recomputation whole).
        figures = Figures(schedule, units, plain, stock_figure)
        self.quick = _cached(figures.figure) if figures.exact else measure  # the search's figures; the choice is measured whole
        self.plain = plain

    def entries(self, chosen: frozenset[int]) -> tuple[Recomputation, ...]:
        """The recompute entries of the units ``chosen``, placed in the schedule."""
        return _entries(self.schedule, self.units, chosen)

    @functools.cached_property
    def forward_pass_flops(self) -> int:
        """One Forward pass's FLOPs (the share a recomputation adds is reported against it)."""
        shaped = self.schedule.shaped
        return sum(forward_flops(self.specs.get(layer.type), layer.proto, shaped.layer_shapes[layer.index]) for layer in shaped.graph.layers)

    @functools.cached_property
    def plain_iteration_seconds(self) -> float:
        """One training iteration without recomputation, estimated."""
        return iteration_seconds(self.times, update_seconds(self.schedule.shaped, DTYPE_BYTES[self.schedule.dtype], self.prices))

    @functools.cached_property
    def checkpoints(self) -> list[int]:
        """Chen's checkpoint candidates (sqrt and budget= search by them)."""
        return checkpoint_candidates(self.schedule, self.units, self.plain)

    def choose(self, policy: Policy) -> Choice:
        """What ``policy`` picks (:func:`choose`)."""
        quick, eligible, units, schedule = self.quick, self.eligible, self.units, self.schedule
        if policy.name == "cheap":
            best = quick(frozenset(u for u in eligible if units[u].cheap))
        elif policy.name == "sqrt":
            best = _sqrt(quick, self.checkpoints, eligible)
        else:
            best = _budget(quick, units, eligible, self.checkpoints, policy.target if policy.target is not None else policy.budget or 0)
        best = quick(_pruned(quick, best).units)
        if best.figure >= self.none.figure and policy.name != "budget":
            best = self.none  # recomputing nothing beats a recomputation that saves nothing
        chosen = best.units
        entries = self.entries(chosen)
        # Measured whole when a plan asks (or already, where the search measured whole), from
        # what that needs alone: a closure over the search kept its figures and every
        # candidate's alive through the packing (84 MiB more peak on a 20,000-layer chain).
        known = self.measure.cache.get(chosen)
        whole = (lambda: known) if known is not None else functools.partial(_measured_whole, schedule, self.liveness_of, self.stock_figure, chosen, entries, {u: units[u] for u in chosen})
        return Choice(policy, entries, best.figure, self.none.figure, best.flops, self.forward_pass_flops, restored_bytes(schedule, entries), best.seconds, self.plain_iteration_seconds, self.prices.measured_on, whole)


def _entries(schedule: Schedule, units: "Sequence[Unit] | Mapping[int, Unit]", chosen: frozenset[int]) -> tuple[Recomputation, ...]:
    """The recompute entries of the units ``chosen``, placed in ``schedule``."""
    return placed(schedule, [units[u].layers for u in sorted(chosen)], [layer for u in chosen for layer in units[u].restores])


def _bound(stock_figure: int, liveness: Liveness) -> int:
    """A plan's bound under ``liveness``: the stock figure less the shareable storage plus its peak."""
    return stock_figure - sum(life.bytes for life in liveness.shareable) + liveness.lower_bound_peak


def _measured_whole(schedule: Schedule, liveness_of: Callable[[Schedule], Liveness], stock_figure: int, chosen: frozenset[int], entries: tuple[Recomputation, ...], units: "Sequence[Unit] | Mapping[int, Unit]") -> _Measured:
    """The units ``chosen`` (whose placed ``entries`` are given) measured whole: the schedule
    extended with their recompute steps, its liveness, the bound."""
    extended = with_recomputation(schedule, entries)
    liveness = liveness_of(extended)
    copies = restored_bytes(schedule, entries)
    ran = {entry.layer for entry in entries}
    run = [u for u in chosen if ran.intersection(units[u].layers)]
    flops = sum(units[u].flops for u in run)
    seconds = sum(units[u].seconds for u in run)
    return _Measured(chosen, entries, extended, liveness, _bound(stock_figure, liveness) + copies, flops, copies, seconds)


class _cached(Generic[_Found]):
    """``figure_of`` asked once per candidate (the searches ask some again)."""

    def __init__(self, figure_of: Callable[[frozenset[int]], _Found]) -> None:
        self.figure_of = figure_of
        self.cache: dict[frozenset[int], _Found] = {}

    def __call__(self, chosen: frozenset[int]) -> _Found:
        if chosen not in self.cache:
            self.cache[chosen] = self.figure_of(chosen)
        return self.cache[chosen]

    def seed(self, chosen: frozenset[int], known: _Found) -> _Found:
        self.cache[chosen] = known
        return known


def restored_bytes(schedule: Schedule, entries: Sequence[Recomputation]) -> int:
    """The runtime's copies of the parameters it restores around recomputed Forwards: one
    Blob per parameter blob of each ``restore_params`` layer, allocated once at Net::Init
    (mem_recompute.cpp, Bind: ``mutable_gpu_data()`` in GPU mode, so on the card).

    The card holds these bytes and no more: CopyData copies a parameter on the side where its
    data is current (runtime patch v6, issue 33), so BatchNorm's moving-average factor
    ``blobs_[2]``, which batch_norm_layer.cu 58-59 updates with ``mutable_cpu_data()``, is
    copied on the host and gets no device copy (v5 copied it with ``gpu_data()``: 4 B more on
    the card per restored BatchNorm, the 184 B an H200 counted on a ResNet-50 in TRAIN).  The
    saved factor's own host copy (4 B, pinned, made by that copy) is not counted."""
    shapes = schedule.shaped.layer_shapes
    layers = {entry.layer for entry in entries if entry.restore_params}
    return sum(count(shape) for layer in layers for shape in shapes[layer].params) * DTYPE_BYTES[schedule.dtype]


def _pruned(measure: Callable[[frozenset[int]], _Measured], best: _Measured) -> _Measured:
    """``best`` less every unit whose recomputation does not lower the figure (one pass,
    last unit first: a later unit's recomputation often needs an earlier one's): the same
    bytes or fewer for fewer seconds.  Past ``PRUNE_ALL`` units, ``PRUNE_TESTS`` of them,
    spread evenly (each test is a figure over the whole net)."""
    order = sorted(best.units, reverse=True)
    if len(order) > PRUNE_ALL:
        order = order[:: -(-len(order) // PRUNE_TESTS)]
    for unit in order:
        if unit not in best.units:
            continue
        without = measure(best.units - {unit})
        if without.figure <= best.figure:
            best = without
    return best


def checkpoint_candidates(schedule: Schedule, units: Sequence[Unit], plain: Liveness) -> list[int]:
    """The units whose storage alone crosses the cut after their Forward (Chen's
    articulation points: a residual block's output): no other shareable blob storage is
    written before the cut and read by a Forward after it."""
    forward_at = {step.layer: step.index for step in schedule.steps if step.kind == "forward"}
    shareable = {life.storage for life in plain.shareable}
    first_write: dict[int, int] = {}
    last_read: dict[int, int] = {}
    for step in schedule.steps:
        if step.kind != "forward":
            continue
        for access in step.accesses:
            if access.storage not in shareable or schedule.classes[access.storage].kind != "blob":
                continue
            if access.write:
                first_write.setdefault(access.storage, step.index)
            else:
                last_read[access.storage] = step.index
    crossing = [0] * (len(schedule.steps) + 1)  # crossing[p]: storages written at or before p, read after p
    for storage, written in first_write.items():
        read = last_read.get(storage, written)
        if read > written:
            crossing[written] += 1
            crossing[read] -= 1
    for p in range(1, len(crossing)):
        crossing[p] += crossing[p - 1]
    found = []
    for u, unit in enumerate(units):
        cut = forward_at[unit.layers[-1]]
        own = sum(1 for storage in unit.writes if storage in first_write and first_write[storage] <= cut < last_read.get(storage, -1))
        if crossing[cut] - own == 0:
            found.append(u)
    return found


def _sqrt(measure, checkpoints: list[int], eligible: list[int]) -> _Measured:
    """Chen's segments: every k-th checkpoint candidate (``checkpoints``) kept, every other
    eligible unit recomputed; the k with the smallest figure (then the fewest estimated seconds).
    Every k is tried up to ``EVERY_K`` candidates; past it (a net of thousands of layers)
    the k of :func:`_ks_to_try`, a coarse grid refined around its best."""
    allowed = set(eligible)
    candidates = [u for u in checkpoints if u in allowed] or list(eligible)
    if not candidates:
        return measure(frozenset())

    def at(k: int):
        kept = set(candidates[k - 1 :: k])
        return measure(frozenset(u for u in eligible if u not in kept))

    if len(candidates) <= EVERY_K:
        return min((at(k) for k in range(1, len(candidates) + 1)), key=_rank)
    tried = {k: at(k) for k in _ks_to_try(len(candidates))}
    while True:  # refine: halve the gaps on both sides of the best k until they close
        best = min(tried, key=lambda k: (_rank(tried[k]), k))  # ties: the smaller k, as trying every k does
        below = max((k for k in tried if k < best), default=best)
        above = min((k for k in tried if k > best), default=best)
        fresh = {(best + below) // 2, (best + above + 1) // 2} - set(tried)
        if not fresh:
            return tried[best]
        tried.update((k, at(k)) for k in fresh)


EVERY_K = 64  # candidates up to which _sqrt tries every k (ResNet-152 has 54)
PRUNE_ALL = 256  # chosen units up to which _pruned tests every one (ResNet-152's sqrt chooses 181)
PRUNE_TESTS = 64  # past it, how many it tests, spread evenly


def _ks_to_try(candidates: int) -> list[int]:
    """The first k of a large net's search: 1 to 4, and a geometric grid (ratio √2) from 4
    to every candidate in one segment, which holds Chen's √n; the figure falls then rises
    with k on such nets (checkpoints kept against the longest segment recomputed)."""
    ks = {1, 2, 3, 4, candidates}
    k = 4.0
    while k < candidates:
        ks.add(round(k))
        k *= 2**0.5
    return sorted(ks)


def _rank(found) -> tuple[int, float]:
    """How the searches order candidates: the smaller figure, then the fewer estimated
    seconds (plan/timing.py)."""
    return (found.figure, found.seconds)


def _segments(checkpoints: list[int], eligible: list[int]) -> list[list[int]]:
    """Chen's segments: the eligible units between two checkpoint candidates, each ending
    at (and not including) its checkpoint."""
    candidates = set(checkpoints)
    segments: list[list[int]] = [[]]
    for u in eligible:
        if u in candidates:
            segments.append([])
        else:
            segments[-1].append(u)
    return [segment for segment in segments if segment]


def _budget(measure, units: Sequence[Unit], eligible: list[int], checkpoints: list[int], budget: int) -> _Measured:
    """The fewest estimated seconds recomputed whose figure fits ``budget`` (module docstring)."""
    none = measure(frozenset())
    if none.figure <= budget:
        return none
    segments = _segments(checkpoints, eligible)
    options: list[list[tuple[int, float, frozenset[int]]]] = []  # per segment: (saving, seconds, units)
    for segment in segments:
        choices = {frozenset(u for u in segment if units[u].cheap), frozenset(segment)} - {frozenset()}
        found: list[tuple[int, float, frozenset[int]]] = [(0, 0.0, frozenset())]
        for chosen in choices:
            measured = measure(chosen)
            if measured.figure < none.figure:
                found.append((none.figure - measured.figure, measured.seconds, chosen))
        options.append(found)
    deepest = min([measure(frozenset(eligible)), _sqrt(measure, checkpoints, eligible)], key=lambda m: m.figure)
    need = none.figure - budget
    best: _Measured | None = None
    for _ in range(8):
        chosen = _knapsack(options, need)
        if chosen is None:
            break
        measured = measure(chosen)
        if measured.figure <= budget:
            best = measured
            break
        need += measured.figure - budget  # the savings did not add up: ask for the miss more
    if best is None and deepest.figure <= budget:
        best = deepest
    if best is None:
        closest = min(deepest, none, key=lambda m: m.figure)
        raise missed(budget, closest.figure)
    return best


class BudgetMissed(UnsafePlan):
    """No recomputation reaches the budget, and how far the best one misses: a finding
    (exit 1, nothing written), as an unsafe plan is."""


def missed(budget: int, best: int) -> BudgetMissed:
    return BudgetMissed(f"--recompute budget={format_size(budget)}: no recomputation fits; the least any reaches is {mib_gib(best)}, {format_size(best - budget)} over the budget")


def _knapsack(options: list[list[tuple[int, float, frozenset[int]]]], need: int) -> frozenset[int] | None:
    """The choice per segment with the fewest estimated seconds whose savings add up to
    ``need``: a DP over the segments keeping the Pareto frontier of (saving, seconds).
    Each entry keeps its choices as a chain back to the first segment's (the union is made
    once, for the answer: a union per entry and segment was quadratic, issue 33)."""
    Chain = tuple  # (this segment's units, the chain of the segments before) or ()
    frontier: list[tuple[int, float, Chain]] = [(0, 0.0, ())]
    left = sum(max(s for s, _, _ in choices) for choices in options)  # the most the segments still to come save
    for choices in options:
        left -= max(s for s, _, _ in choices)
        grown = [(saving + s, seconds + f, (c, chain)) for saving, seconds, chain in frontier for s, f, c in choices]
        grown.sort(key=lambda entry: (-entry[0], entry[1]))
        frontier, cheapest = [], None
        for entry in grown:  # by saving, most first: keep those cheaper than every larger saving
            if entry[0] + left < need:
                break  # nor can any after it reach ``need``
            if cheapest is None or entry[1] < cheapest:
                if frontier and frontier[-1][0] >= need and entry[0] >= need:
                    frontier.pop()  # reaches it for more seconds than this one, as will all it grows into
                frontier.append(entry)
                cheapest = entry[1]
    fitting = [entry for entry in frontier if entry[0] >= need]
    if not fitting:
        return None
    chain, chosen = min(fitting, key=lambda entry: (entry[1], -entry[0]))[2], set()
    while chain:
        units, chain = chain
        chosen.update(units)
    return frozenset(chosen)

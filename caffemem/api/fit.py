"""`caffemem fit` as an API: the largest batch whose footprint fits a GPU.

Memory is piecewise linear in the batch for most nets, so a line through a few exact
evaluations predicts the answer.  The prediction is only a starting point: the answer is
always confirmed by exact evaluations of the memory model at it and at the next batch,
and where the line is wrong (kinks, steps, a batch the net cannot be built at) an
exponential then binary search, again with exact evaluations, corrects it.  The only
promise is the one checked: the batch reported fits and the next one does not.
"""

from __future__ import annotations

import functools

import math
import os
import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import TYPE_CHECKING

from caffemem.api.analyze import (
    Analysis,
    NetAnalysis,
    Options,
    analyze,
    default_phase,
    load_source,
    net_notes,
    shaped_net,
    spec_table,
    with_overrides,
)
from caffemem.api.source import NetLike, as_source
from caffemem.errors import CaffememError, Location, excerpt
from caffemem.passes.device import CUDA_CONTEXT, LAZY_KERNELS, MEASURED_ON, Constant, DeviceReport, grouped_convolutions
from caffemem.passes.load import NetText, SolverSource
from caffemem.passes.memory import MemoryReport, rule_notes
from caffemem.passes.shapes import FROM_FILE
from caffemem.passes.solver import solver_footprint
from caffemem.passes.upgrade import upgrade_net, upgrade_solver
from caffemem.plan.recompute import Choice, Policy, parse_policy
from caffemem.units import DTYPE_BYTES, format_size, parse_size, plural

if TYPE_CHECKING:
    from caffemem.api.optimize import RecomputeBound
    from caffemem.graph import ShapedGraph

DEFAULT_RESERVE = "500MiB"  # CPU-mode figures leave out the CUDA context and the handles


def default_reserve(options: Options) -> tuple[int, Constant | None]:
    """What --reserve leaves free when not given.  CPU mode: 500 MiB for the CUDA context
    and the handles the heap does not see.  GPU mode: the figure already holds the context,
    the library handles and the workspaces at their bound, but not the kernels CUDA loads
    lazily: the most the card held beyond the figure in the measurement
    (passes/device.py ``LAZY_KERNELS``)."""
    if options.device != "gpu":
        return parse_size(DEFAULT_RESERVE, "--reserve"), None
    return LAZY_KERNELS.bytes, LAZY_KERNELS


# The first exact evaluations; the line through the last two predicts the answer (the
# smallest batches can sit off that line: e.g. Scale's backward buffers at batch 1).
PROBES = (1, 2, 4, 8)
# fit --recompute's: each evaluation is a policy's choice (about a second on ResNet-152),
# and the bound is affine in the batch from batch 1 on the nets measured (ResNet-152 and
# GoogLeNet's solver: batches 1, 2, 4 and 8 on one line, issue 33), so the line through
# batches 1 and 2 lands on the answer; where it does not, the search corrects it as ever.
BOUND_PROBES = (1, 2)
MAX_BATCH = 2**31 - 1  # a blob dimension is an int in Caffe
MAX_ITER_SIZE = 2**31 - 1  # SolverParameter.iter_size is an int32


@dataclass(frozen=True)
class FitRequest:
    """The card, what stays free on it, and how training is spread (the CLI flags)."""

    gpu_memory: int
    reserve: int | None = None  # None: default_reserve's margin for the mode
    gpus: int = 1
    effective_batch: int | None = None
    optimized: bool = False  # count caffemem optimize's plan instead of stock Caffe
    recompute: "Policy | None" = None  # ... with this recompute policy (implies optimized; a string: the flag's value)

    def __post_init__(self) -> None:
        """Checked as the flags are: a wrong value is a CaffememError naming it."""
        for name, low, optional in (("gpu_memory", 1, False), ("reserve", 0, True), ("gpus", 1, False), ("effective_batch", 1, True)):
            value = getattr(self, name)
            if value is None and optional:
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < low:  # upper bounds: fit's own checks name them
                raise CaffememError(f"{name} {excerpt(repr(value))}: expected a whole number of at least {low}" + (", or None" if optional else ""))
        if isinstance(self.recompute, str):
            object.__setattr__(self, "recompute", parse_policy(self.recompute, "recompute="))

    @property
    def budget(self) -> int:
        """What Caffe's own allocations (SyncedMemory and cuDNN workspaces) may use (once
        ``fit`` has settled the reserve)."""
        return self.gpu_memory - (self.reserve or 0)


@dataclass(frozen=True)
class Footprint:
    """One exact evaluation of the memory model at one batch."""

    bytes: int
    notes: tuple[str, ...] = ()
    device: DeviceReport | None = None  # GPU mode: the card's report (the train net's, for a solver)
    seconds: float | None = None  # fit --recompute: one iteration's estimated seconds (plan/timing.py)


Measure = Callable[[int], Footprint]  # batch -> footprint; raises CaffememError


@dataclass(frozen=True)
class Subject:
    """What is fitted: memory as a function of the batch, and what the file says around it."""

    kind: str  # "net" or "solver"
    phase: str  # the phase whose batch varies (a solver: TRAIN, its train net)
    iter_size: int  # the solver's (1 for a net)
    measure: Measure
    test_nets: int = 0  # a solver's test nets (they stay at their own batch)
    notes: tuple[str, ...] = ()
    # fit --recompute: ``measure`` gives the plan's lower bound (the policy's choice, no
    # packing), never above the plan's figure; ``confirm`` the whole plan's, for the answer.
    confirm: Measure | None = None
    # fit --recompute on a solver: what the file says around one batch's plan (an analysis
    # at that batch), made for the answer alone; ``confirm``'s footprints carry only the
    # rest.  A net's ``confirm`` says it all, from the runs its plan was made on.
    notes_at: Callable[[int], tuple[str, ...]] | None = None


@dataclass(frozen=True)
class Evaluation:
    batch: int
    bytes: int | None  # None: the net cannot be built at this batch
    error: str | None = None
    notes: tuple[str, ...] = field(default=(), compare=False)
    device: DeviceReport | None = field(default=None, compare=False, repr=False)
    seconds: float | None = field(default=None, compare=False)  # one iteration, estimated (fit --recompute)
    bound: bool = field(default=False, compare=False)  # fit --recompute: the plan's lower bound, not the plan's figure

    @property
    def per_sample(self) -> float | None:
        """Estimated seconds per training sample (fit --recompute)."""
        return self.seconds / self.batch if self.seconds is not None else None


class Evaluations:
    """Exact evaluations against a budget, each batch at most once, kept in the order made."""

    def __init__(self, measure: Measure, budget: int, confirm: Measure | None = None) -> None:
        self.measure = measure
        self.budget = budget
        self.confirm = confirm  # see Subject.confirm
        self.made: dict[int, Evaluation] = {}
        self.confirmed: set[int] = set()

    @property
    def probes(self) -> tuple[int, ...]:
        """The first evaluations: :data:`BOUND_PROBES` where they are bounds, else :data:`PROBES`."""
        return BOUND_PROBES if self.confirm is not None else PROBES

    def at(self, batch: int) -> Evaluation:
        if batch not in self.made:
            made = evaluate(self.measure, batch)
            self.made[batch] = replace(made, bound=True) if self.confirm is not None else made
        return self.made[batch]

    def fits(self, batch: int) -> bool:
        """Within the budget; a batch past Caffe's limit or one that cannot be built does not fit."""
        if batch > MAX_BATCH:
            return False
        used = self.at(batch).bytes
        return used is not None and used <= self.budget

    def fits_exactly(self, batch: int) -> bool:
        """:meth:`fits`, by ``confirm``'s figure where there is one (it then replaces the
        bound as this batch's evaluation).  A batch whose bound does not fit is not planned:
        the plan's figure is never below it."""
        if self.confirm is None or not self.fits(batch):
            return self.fits(batch)
        self.exact(batch)
        return self.fits(batch)

    def exact(self, batch: int) -> Evaluation:
        """This batch's evaluation by ``confirm`` (made once)."""
        if self.confirm is not None and batch not in self.confirmed:
            self.made[batch] = evaluate(self.confirm, batch)
            self.confirmed.add(batch)
        return self.at(batch)


def evaluate(measure: Measure, batch: int) -> Evaluation:
    """The model at one batch.  Batch 1 must build (else the input is bad); a larger batch
    that cannot be built (e.g. a blob past Caffe's INT_MAX elements) is an upper limit."""
    try:
        footprint = measure(batch)
    except CaffememError as error:
        if batch == 1:
            raise
        return Evaluation(batch, None, str(error))
    return Evaluation(batch, footprint.bytes, None, footprint.notes, footprint.device, footprint.seconds)


@dataclass(frozen=True)
class BatchSearch:
    """`batch` fits and `batch + 1` does not (0: not even batch 1 fits)."""

    batch: int
    guess: int | None = None  # what the line through the last probes predicted
    line: tuple[int, int] | None = None  # the two batches that line went through


def line_guess(first: Evaluation, second: Evaluation, budget: int) -> int | None:
    """The largest batch the line through two evaluations keeps within the budget (None
    when that line does not grow)."""
    assert first.bytes is not None and second.bytes is not None
    per_sample = Fraction(second.bytes - first.bytes, second.batch - first.batch)
    if per_sample <= 0:
        return None
    return math.floor((budget - (first.bytes - per_sample * first.batch)) / per_sample)


def largest_fitting_batch(evaluations: Evaluations) -> BatchSearch:
    """Probe, guess with a line, confirm the guess and its successor exactly, and search
    (exponentially from the last evaluation, then by halves) where the guess was wrong."""
    fits = evaluations.fits
    if not fits(1):
        if evaluations.confirm is not None:
            evaluations.exact(1)
        return BatchSearch(0)
    low, high = 1, None  # low fits; high (once known) does not
    probes = evaluations.probes
    for probe in probes[1:]:
        if not fits(probe):
            high = probe
            break
        low = probe
    guess = line = None
    if high is None:
        line = probes[-2:]
        guess = line_guess(evaluations.at(line[0]), evaluations.at(line[1]), evaluations.budget)
        if guess is not None:
            guess = min(max(guess, low), MAX_BATCH)
            if fits(guess):
                low = guess
            else:
                high = guess
    if evaluations.confirm is not None:
        low, high = _aimed(evaluations, low, high)
    low, high = _bracket(fits, low, high)
    while high - low > 1:
        middle = (low + high) // 2
        if fits(middle):
            low = middle
        else:
            high = middle
    # Both ends were evaluated exactly (high only fails unevaluated past MAX_BATCH): the
    # answer and its successor are the confirmation.  With a bound (fit --recompute) the
    # answer is planned whole, a batch lower while that plan does not fit; its successor's
    # bound (or plan) already does not.
    if evaluations.confirm is not None:
        low = _planned_answer(evaluations, low)
    return BatchSearch(low, guess, line)


AIMED_STEPS = 4  # fit --recompute: lines aimed before the exponential and binary search


def _aimed(evaluations: Evaluations, low: int, high: int | None) -> tuple[int, int | None]:
    """fit --recompute, where an evaluation is a policy's choice: narrow ``low`` (fits) and
    ``high`` (does not, None: not known) by the line through the nearest evaluations on
    either side (below ``low`` the one before it when ``high`` is not known), each aim
    confirmed by its neighbour (the batch above if it fits, below if not), at most
    :data:`AIMED_STEPS` times; the exponential and binary search then finish as for any
    fit.  Where memory is a line from ``low`` on, the first aim and its neighbour are the
    answer and its successor (the line through batches 1 and 2 can miss it when the small
    batches sit off that line: the recompute fixture's predicted 312 for 222, and the
    exponential search from it took 12 more evaluations)."""
    fits = evaluations.fits
    for _ in range(AIMED_STEPS):
        if high is not None and high - low <= 1:
            break
        if high is not None:
            first, second = evaluations.at(low), evaluations.at(high)
        else:
            below = [batch for batch, made in evaluations.made.items() if batch < low and made.bytes is not None]
            if not below:
                break
            first, second = evaluations.at(max(below)), evaluations.at(low)
        if first.bytes is None or second.bytes is None:
            break  # a batch that cannot be built: the binary search finds the limit
        aim = line_guess(first, second, evaluations.budget)
        if aim is None:
            break
        aim = min(max(aim, low + 1), high - 1 if high is not None else MAX_BATCH)
        if aim <= low:
            break
        if fits(aim):
            low = aim
            if (high is None or aim + 1 < high) and not fits(aim + 1):
                high = aim + 1
        else:
            high = aim
            if aim - 1 > low and fits(aim - 1):
                low = aim - 1
    return low, high


def _planned_answer(evaluations: Evaluations, batch: int) -> int:
    """The largest batch up to ``batch`` (the bound's answer) whose whole plan fits: where
    the plan at ``batch`` does not, a step down by what it misses over the bytes a sample
    adds, again while that plan does not fit, then halves between the two (the bound of
    the batch above the answer already does not fit: a plan is never below its bound)."""
    if batch and evaluations.fits_exactly(batch):
        return batch
    if batch <= 1:
        evaluations.exact(1)  # batch 1's own figure and card, for what is reported
        return 1 if evaluations.fits(1) else 0
    first = evaluations.at(1).bytes or 0
    high, low = batch, batch
    while low > 1:
        used = evaluations.at(high).bytes
        per_sample = max(Fraction((used or 0) - first, high - 1), Fraction(1))
        low = max(1, min(high - 1, high - math.ceil(Fraction((used or 0) - evaluations.budget) / per_sample))) if used is not None else high - 1
        if evaluations.fits_exactly(low):
            break
        high = low
    else:
        evaluations.exact(1)
        if not evaluations.fits(1):
            return 0
    if high - low > 1 and not evaluations.fits_exactly(low + 1):  # the step down usually lands on the answer
        return low
    while high - low > 1:
        middle = (low + high) // 2
        if evaluations.fits_exactly(middle):
            low = middle
        else:
            high = middle
    return low


def _bracket(fits: Callable[[int], bool], low: int, high: int | None) -> tuple[int, int]:
    """From the side known last, step 1, 2, 4, ... until a fitting `low` and a failing
    `high` are found; when `high` was the last failure, the steps go down from it."""
    step = 1
    if high is None:
        while high is None:
            candidate = low + step
            if fits(candidate):
                low = candidate
            else:
                high = candidate
            step *= 2
        return low, high
    while high - step > low:
        if fits(high - step):
            return high - step, high
        high -= step
        step *= 2
    return low, high


@dataclass(frozen=True)
class BatchSchedule:
    """How training reaches its effective batch: effective = batch × iter_size × gpus
    (Caffe accumulates gradients over iter_size passes; every GPU runs its own batch)."""

    batch: int
    iter_size: int
    gpus: int
    bytes: int

    @property
    def effective_batch(self) -> int:
        return self.batch * self.iter_size * self.gpus


def _is_prime(n: int) -> bool:
    """Miller-Rabin with the first twelve primes as bases: exact below 3.3e24, which
    covers every batch × iter_size Caffe can run (below 2^62)."""
    bases = (2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37)
    if n < 2:
        return False
    for p in bases:
        if n % p == 0:
            return n == p
    d, r = n - 1, 0
    while d % 2 == 0:
        d, r = d // 2, r + 1
    for a in bases:
        x = pow(a, d, n)
        if x in (1, n - 1):
            continue
        for _ in range(r - 1):
            x = x * x % n
            if x == n - 1:
                break
        else:
            return False
    return True


def _a_factor(n: int) -> int:
    """A nontrivial factor of the composite ``n`` (Pollard's rho, Floyd's cycle finding):
    about n^(1/4) steps, a few thousand for any n below 2^62."""
    for c in range(1, n):
        x = y = 2
        factor = 1
        while factor == 1:
            x = (x * x + c) % n
            y = (y * y + c) % n
            y = (y * y + c) % n
            factor = math.gcd(abs(x - y), n)
        if factor != n:
            return factor
    raise AssertionError(f"{n} is prime")  # pragma: no cover - callers test primality first


def _prime_factors(n: int) -> list[int]:
    factors: list[int] = []
    for p in (2, 3, 5, 7, 11, 13):
        while n % p == 0:
            factors.append(p)
            n //= p
    pending = [n] if n > 1 else []
    while pending:
        m = pending.pop()
        if _is_prime(m):
            factors.append(m)
        else:
            d = _a_factor(m)
            pending += [d, m // d]
    return sorted(factors)


def divisors_descending(n: int) -> list[int]:
    """Every divisor of ``n``, from its prime factors (trial division up to √n took
    minutes for an effective batch of 10^20; issue 26): at most ~10^5 of them below 2^62."""
    divisors = [1]
    factors = _prime_factors(n)
    for p in sorted(set(factors)):
        powers = [p**k for k in range(1, factors.count(p) + 1)]
        divisors += [d * q for d in divisors for q in powers]
    return sorted(divisors, reverse=True)


def schedule_effective_batch(effective_batch: int, gpus: int, largest: int, evaluations: Evaluations) -> BatchSchedule:
    """The largest batch per GPU that fits and divides effective_batch / gpus, i.e. the
    smallest iter_size that reaches the effective batch exactly (`gpus` divides it), with
    an iter_size Caffe can hold (an int32).  Each candidate is checked exactly (memory
    need not be monotone)."""
    per_gpu = effective_batch // gpus
    for batch in divisors_descending(per_gpu):
        if per_gpu // batch > MAX_ITER_SIZE:
            break
        if batch <= largest and evaluations.fits_exactly(batch):
            return BatchSchedule(batch, per_gpu // batch, gpus, evaluations.at(batch).bytes or 0)
    raise CaffememError(
        f"--effective-batch {effective_batch}: no batch that fits (at most {largest}) divides {per_gpu} samples per GPU with an iter_size Caffe can hold (at most {MAX_ITER_SIZE}, an int32)"
    )


@dataclass(frozen=True)
class FitResult:
    path: str
    subject: Subject
    request: FitRequest
    search: BatchSearch
    schedule: BatchSchedule | None  # None when nothing fits
    evaluations: tuple[Evaluation, ...]  # every exact evaluation, in the order made
    notes: tuple[str, ...]
    margin: Constant | None = None  # GPU mode without --reserve: what the reserve keeps for
    advice: "Advice | None" = None  # --optimized: the commands that write the plan counted

    @property
    def fits(self) -> bool:
        return self.search.batch > 0

    def at(self, batch: int) -> Evaluation | None:
        return next((e for e in self.evaluations if e.batch == batch), None)

    @property
    def bytes(self) -> int | None:
        found = self.at(self.search.batch)
        return found.bytes if found else None

    @property
    def following(self) -> Evaluation | None:
        """The evaluation at batch + 1, which does not fit (None past Caffe's limit)."""
        return self.at(self.search.batch + 1)

    @property
    def growth(self) -> tuple[Evaluation, Evaluation] | None:
        """The two exact evaluations the per-sample figures come from: the largest probe
        below the answer and the answer (batches 1 and 2 when the answer is 1)."""
        if not self.fits:
            return None
        below = [probe for probe in PROBES if probe < self.search.batch and self.at(probe) is not None]  # fit --recompute probes fewer
        first, second = (self.at(below[-1]), self.at(self.search.batch)) if below else (self.at(1), self.at(2))
        if first is None or second is None or first.bytes is None or second.bytes is None:
            return None
        return first, second

    @property
    def bytes_per_sample(self) -> int | None:
        """What a sample adds: exact where memory is linear there, else an average (rounded)."""
        growth = self.growth
        if growth is None:
            return None
        first, second = growth
        return round(Fraction(second.bytes - first.bytes, second.batch - first.batch))  # type: ignore[operator]

    @property
    def fixed_bytes(self) -> int | None:
        """The answer's bytes less batch × bytes_per_sample: parameters, gradients, solver
        history, per-layer buffers, test nets."""
        per_sample = self.bytes_per_sample
        return None if per_sample is None or self.bytes is None else self.bytes - self.search.batch * per_sample


def fit(net: NetLike, options: Options, request: FitRequest, *, phase: str | None = None, inputs: Mapping[str, Sequence[int]] | None = None) -> FitResult:
    """The largest batch per GPU whose footprint fits `request.budget`, and the batch and
    iter_size that reach `request.effective_batch`.  `options.batch` is ignored: the batch
    is what varies.  `request.reserve` None: :func:`default_reserve`.  The figures are a
    CPU run's unless ``Options(device="gpu")`` (the command line's default)."""
    options = with_overrides(options, phase, inputs, None)
    path = as_source(net)
    margin = None
    if request.reserve is None:
        reserve, margin = default_reserve(options)
        request = replace(request, reserve=reserve)
    if request.budget <= 0:
        raise CaffememError(f"--reserve {format_size(request.reserve)} leaves nothing of --gpu-memory {format_size(request.gpu_memory)}")
    if request.gpus < 1 or (request.effective_batch is not None and request.effective_batch < 1):
        raise CaffememError("--gpus and --effective-batch must be at least 1")
    if request.effective_batch is not None and request.effective_batch % request.gpus:
        raise CaffememError(f"--effective-batch {request.effective_batch} is not a multiple of --gpus {request.gpus} (every GPU runs the same batch)")
    if request.effective_batch is not None and request.effective_batch // request.gpus > MAX_BATCH * MAX_ITER_SIZE:
        raise CaffememError(f"--effective-batch {request.effective_batch} is more than Caffe can reach: batch × iter_size per GPU is at most {MAX_BATCH * MAX_ITER_SIZE} (both are int32)")
    if request.recompute is not None:
        if request.recompute.budget is not None:
            raise CaffememError("fit --recompute takes cheap or sqrt: the budget is the card's (--gpu-memory less --reserve), and fit searches the batch that fits it")
        request = replace(request, optimized=True)
    subject = subject_of(path, options, request.optimized, request.recompute)
    evaluations = Evaluations(subject.measure, request.budget, subject.confirm)
    search = largest_fitting_batch(evaluations)
    schedule = None
    if search.batch:
        if request.effective_batch is not None:
            schedule = schedule_effective_batch(request.effective_batch, request.gpus, search.batch, evaluations)
        else:
            schedule = BatchSchedule(search.batch, subject.iter_size, request.gpus, evaluations.at(search.batch).bytes or 0)
    made = tuple(evaluations.made.values())
    answer = evaluations.made.get(search.batch or 1)
    answer_notes = (subject.notes_at(answer.batch) if subject.notes_at is not None and answer is not None and not answer.bound else ()) + (answer.notes if answer else ())
    notes = subject.notes + answer_notes + search_notes(search, made) + time_notes(search, made, request.budget)
    if request.gpus > 1 and subject.test_nets:
        notes += ("with several GPUs only the root solver (the first GPU) builds the test nets: these figures are that GPU's, the others need less",)
    if schedule is not None and request.effective_batch is not None:
        notes += schedule_notes(schedule, search.batch)
    if margin is not None:
        notes += (f"the reserve keeps room for the kernels CUDA loads lazily, which no figure counts: {margin.source}; --reserve SIZE overrides it",)
    if not search.batch and answer is not None and answer.device is not None:
        notes += (what_dominates(answer.device, request.optimized),)
    advice = None
    if request.optimized and search.batch:
        advice = optimize_commands(path, subject, options, search.batch, request.recompute, evaluations.at(search.batch).bytes or 0)
    return FitResult(str(path), subject, request, search, schedule, made, tuple(dict.fromkeys(notes)), margin, advice)


def what_dominates(device: DeviceReport, optimized: bool) -> str:
    """Batch 1 does not fit: what the card's figure is made of, largest first, and what
    changes the largest parts (issue 32: stock BVLC's cuDNN handles alone, 3 per group of
    every convolution, can exceed a card; a caffemem-patched Caffe pools them)."""
    handles, workspace, context = device.device_by_cause["library_handles"], device.workspace_bytes_max, device.device_by_cause["cuda_context"]
    kind = "the pool's" if device.handles.pooled else "stock BVLC's"
    parts = [
        (handles, f"library handles {format_size(handles)} ({kind} {device.handles.cudnn:,} cuDNN handles)"),
        (workspace, f"cuDNN workspaces up to {format_size(workspace)}"),
        (context, f"the CUDA context {format_size(context)}"),
        (device.device_bytes - handles - workspace - context, f"Caffe's allocations {format_size(device.device_bytes - handles - workspace - context)}"),
    ]
    parts.sort(key=lambda part: -part[0])
    said = ", ".join(text for size, text in parts if size)
    fixes = []
    if not device.handles.pooled and handles + workspace >= parts[0][0]:
        fixes.append("`caffemem patch CAFFE_DIR` builds a Caffe that pools the cuDNN handles and the workspace per card, counted by `fit --optimized`")
    grouped = grouped_convolutions(device.layers) if not device.handles.pooled else ()
    if grouped:
        more = f" and {plural(len(grouped) - 1, 'more')}" if len(grouped) > 1 else ""
        fixes.append(f"'engine: CAFFE' in the convolution_param of the grouped convolutions ('{grouped[0]}'{more}) creates none of their handles")
    if context == parts[0][0] and device.context == CUDA_CONTEXT:
        fixes.append(f"the context is as measured on {MEASURED_ON}: --context-mib or --card FILE gives your card's")
    if not optimized:
        fixes.append("`fit --optimized` (or --recompute sqrt) counts a plan of Caffe's allocations")
    return f"not even batch 1 fits: on the card {format_size(device.device_bytes)}, {said}" + (f"; {'; '.join(fixes)}" if fixes else "")


def search_notes(search: BatchSearch, evaluations: tuple[Evaluation, ...]) -> tuple[str, ...]:
    """Say where memory was not the line the guess assumed, or not monotone."""
    notes = []
    built = sorted((e.batch, e.bytes) for e in evaluations if e.bytes is not None)
    if search.guess is not None and search.line is not None and search.batch != search.guess and _off_line(search.line, built):
        notes.append(
            f"memory is not linear in the batch here: the line through batches {search.line[0]} and {search.line[1]} "
            f"predicted {search.guess}; exact evaluations ({len(evaluations)}) found {search.batch}"
        )
    kinds = [sorted((e.batch, e.bytes) for e in evaluations if e.bytes is not None and e.bound == bound) for bound in (False, True)]
    drops = [(a, b) for same in kinds for (a, used_a), (b, used_b) in zip(same, same[1:]) if used_b < used_a]  # a bound is below its plan: compared alike only
    drops.sort()
    if drops:
        smaller, larger = drops[0]
        notes.append(f"memory is not monotone in the batch (batch {larger} needs less than batch {smaller}): a batch above the answer may fit again")
    return tuple(notes)


def _off_line(line: tuple[int, int], built: list[tuple[int, int]]) -> bool:
    """Whether an evaluation from the line's first batch on misses the line (a guess can
    also miss because a batch could not be built, with memory still linear)."""
    known = dict(built)
    per_sample = Fraction(known[line[1]] - known[line[0]], line[1] - line[0])
    return any(used != known[line[0]] + per_sample * (batch - line[0]) for batch, used in built if batch >= line[0])


def schedule_notes(schedule: BatchSchedule, largest: int) -> tuple[str, ...]:
    """When the exact schedule needs a smaller batch than fits, name the nearest one with it."""
    per_gpu = schedule.batch * schedule.iter_size
    iter_size = math.ceil(per_gpu / largest)
    if iter_size >= schedule.iter_size:
        return ()
    batch = math.ceil(per_gpu / iter_size)
    return (
        f"batch {largest} fits, but the largest batch that divides {per_gpu} samples per GPU and fits is {schedule.batch}; "
        f"batch {batch} × iter_size {iter_size} would give effective batch {batch * iter_size * schedule.gpus} instead",
    )


# ---------------------------------------------------------------- the memory model


def subject_of(path: str, options: Options, optimized: bool, recompute: "Policy | None" = None) -> Subject:
    """Memory as a function of the batch: a net's phase (its total_bytes), or a solver's
    training process (train net at the batch, solver history, test nets at their own batch)."""
    source = load_source(path, options)
    if isinstance(source, SolverSource):
        return _solver_subject(path, source, options, optimized, recompute)
    specs = spec_table(options)
    upgraded, upgrade_notes = upgrade_net(source.proto, source.file)
    phase = options.phase or default_phase(upgraded, specs)
    at_phase = replace(options, phase=phase)

    def measure(batch: int) -> Footprint:
        analysis = analyze(path, replace(at_phase, batch=batch), tables=False)  # stock Caffe at every batch: a table binds at one only
        net = analysis.nets[0]
        report = _report(net, at_phase, optimized)
        return Footprint(report.total_bytes, _notes(analysis, net, options), report if isinstance(report, DeviceReport) else None)

    notes = ("a net file counts that net alone; pass the solver file to count the training process (solver history, test nets)",) if phase == "TRAIN" else ()
    if recompute is None:
        return Subject("net", phase, 1, measure, 0, notes + _optimized_notes(optimized, recompute))

    bounds: dict[int, RecomputeBound] = {}  # each batch's bound, which its plan starts from

    def bound_at(batch: int) -> RecomputeBound:
        return _bound(shaped_net(source, replace(at_phase, batch=batch), specs), at_phase, recompute)

    def bound(batch: int) -> Footprint:
        found = bounds[batch] = bound_at(batch)
        return Footprint(found.choice.figure, (), None, _seconds(found.choice))

    def planned(batch: int) -> Footprint:
        """The plan's figure, and what analyze says around the net at this batch, from the
        net and the runs its bound was made on (an analysis at the answer re-ran them)."""
        found = bounds.pop(batch, None) or bound_at(batch)
        report, seconds = _planned(found, at_phase, recompute)
        shaped = found.ready.schedule.shaped
        said = net_notes(source, upgrade_notes, shaped, options, rule_notes(found.ready.heap_run.rules)) + shaped.notes + _rescaled_inputs_note(shaped, options)
        return Footprint(report.total_bytes, said, report if isinstance(report, DeviceReport) else None, seconds)

    return Subject("net", phase, 1, bound, 0, notes + _optimized_notes(optimized, recompute), planned)


def _solver_subject(path: str, source: SolverSource, options: Options, optimized: bool, recompute: "Policy | None" = None) -> Subject:
    """Only the train net's batch varies: the test nets keep the batch their files give."""
    if options.phase not in (None, "TRAIN"):
        raise CaffememError("a solver is fitted as its training process; pass the net file to fit its TEST phase", Location(file=str(path)))
    solver, _ = upgrade_solver(source.proto, source.file)
    train_options = replace(options, phase="TRAIN")
    specs = spec_table(options)
    tests = analyze(path, replace(options, phase="TEST", batch=None), tables=False).nets
    test_parts = [(test.shaped, _report(test, options, optimized)) for test in tests]  # a TEST net runs no Backward: nothing to recompute

    def measure(batch: int) -> Footprint:
        analysis = analyze(path, replace(train_options, batch=batch), tables=False)
        train = analysis.nets[0]
        report = _report(train, options, optimized)
        process = solver_footprint(solver, (train.shaped, report), test_parts, DTYPE_BYTES[options.dtype])
        return Footprint(process.total_bytes, _notes(analysis, train, options) + process.notes, report if isinstance(report, DeviceReport) else None)

    notes = ("the test nets keep their own batch sizes; only the train net's batch varies",) if tests else ()
    if recompute is None:
        return Subject("solver", "TRAIN", max(solver.iter_size, 1), measure, len(tests), notes + _optimized_notes(optimized, recompute))

    bounds: dict[int, RecomputeBound] = {}  # each batch's bound, which its plan starts from

    def bound_at(batch: int) -> RecomputeBound:
        return _bound(shaped_net(source, replace(train_options, batch=batch), specs), options, recompute)

    def bound(batch: int) -> Footprint:
        """The process with the train net at its plan's bound: the train net's figure is the
        one part a plan changes (its pool and untouched gradients are the base run's)."""
        found = bounds[batch] = bound_at(batch)
        process = solver_footprint(solver, (found.ready.schedule.shaped, found.base), test_parts, DTYPE_BYTES[options.dtype])
        return Footprint(process.total_bytes - found.base.total_bytes + found.choice.figure, (), None, _seconds(found.choice))

    def planned(batch: int) -> Footprint:  # its notes: ``notes_at``'s, then the process's
        found = bounds.pop(batch, None) or bound_at(batch)
        report, seconds = _planned(found, options, recompute)
        process = solver_footprint(solver, (found.ready.schedule.shaped, report), test_parts, DTYPE_BYTES[options.dtype])
        return Footprint(process.total_bytes, process.notes, report if isinstance(report, DeviceReport) else None, seconds)

    notes_at = functools.partial(_notes_at, path, train_options, options)
    return Subject("solver", "TRAIN", max(solver.iter_size, 1), bound, len(tests), notes + _optimized_notes(optimized, recompute), planned, notes_at)


def _notes_at(path: str, at_phase: Options, options: Options, batch: int) -> tuple[str, ...]:
    """What the file says around the net (its analysis) at ``batch``: fit --recompute's
    notes at the answer (``Subject.notes_at``)."""
    analysis = analyze(path, replace(at_phase, batch=batch), tables=False)
    return _notes(analysis, analysis.nets[0], options)


def _report(net: NetAnalysis, options: Options, optimized: bool, recompute: "Policy | None" = None) -> MemoryReport:
    """Stock Caffe's figures, or those of the plan `caffemem optimize` makes for this net
    (with ``recompute``: `optimize --recompute`'s)."""
    if not optimized:
        return net.figures
    from caffemem.api.optimize import OptimizeSettings, planned_report

    return planned_report(net.shaped, spec_table(options), options, OptimizeSettings(recompute=recompute))


def _planned(bound: "RecomputeBound", options: Options, recompute: Policy) -> "tuple[MemoryReport, float | None]":
    """`optimize --recompute`'s figures for the net ``bound`` was made on (its plan starts
    from the bound), and one iteration's estimated seconds with the Forwards it runs again
    (plan/timing.py)."""
    from caffemem.api.optimize import OptimizeSettings, planned_phase

    planned = planned_phase(bound.ready.schedule.shaped, spec_table(options), options, OptimizeSettings(recompute=recompute), bound)
    return planned.planned_figures, _seconds(planned.recompute)


def _bound(shaped: "ShapedGraph", options: Options, recompute: Policy) -> "RecomputeBound":
    """What ``recompute`` chooses for this net and the bound of its plan (api/optimize.py
    ``recompute_bound``): fit --recompute's search, the plan made at the answer only."""
    from caffemem.api.optimize import OptimizeSettings, recompute_bound

    return recompute_bound(shaped, spec_table(options), options, OptimizeSettings(recompute=recompute))


def _seconds(choice: "Choice | None") -> float | None:
    """One iteration's estimated seconds with the Forwards ``choice`` runs again."""
    return choice.iteration_seconds * choice.time_ratio if choice is not None else None


def time_notes(search: BatchSearch, evaluations: tuple[Evaluation, ...], budget: int) -> tuple[str, ...]:
    """fit --recompute: the largest batch's estimated seconds per sample, and the batch
    among those evaluated within the card that trains fastest per sample."""
    timed = [e for e in evaluations if e.per_sample is not None and e.bytes is not None and e.bytes <= budget]
    largest = next((e for e in timed if e.batch == search.batch), None)
    if largest is None:
        return ()
    notes = [f"batch {largest.batch}: an estimated {largest.per_sample * 1e3:,.3f} ms per sample ({largest.seconds * 1e3:,.1f} ms per iteration, recomputation included; plan/timing.py's model)"]
    fastest = min(timed, key=lambda e: (e.per_sample, -e.batch))
    if fastest.batch != largest.batch:
        notes.append(f"of the batches evaluated, batch {fastest.batch} trains fastest per sample: an estimated {fastest.per_sample * 1e3:,.3f} ms")
    else:
        notes.append(f"of the batches evaluated within the card, batch {largest.batch} also trains fastest per sample")
    return tuple(notes)


def _optimized_notes(optimized: bool, recompute: "Policy | None" = None) -> tuple[str, ...]:
    if not optimized:
        return ()
    if recompute is not None:
        return (f"counts caffemem optimize --recompute {recompute.describe()}'s plan at each batch (Forwards run again in Backward: more compute per iteration)",)
    return ("counts caffemem optimize's plan at each batch",)


@dataclass(frozen=True)
class Advice:
    """What writes the plan fit counted: `caffemem optimize` command lines, run in order
    in the folder the files are to land in, then what is left to do by hand (``then``), or
    only ``then`` where no command can (a solver's inline net)."""

    batch: int
    commands: tuple[str, ...]
    then: str


def optimize_commands(path: str | NetText, subject: Subject, options: Options, batch: int, recompute: "Policy | None", figure: int) -> Advice:
    """The plan fit counted, written: a net's phase at ``batch``; a solver's train net
    (TRAIN) at ``batch`` and its test nets' TEST phase at their own batch, each planned as
    the figure was (issue 34: the advice planned TRAIN alone, and the test net then ran as
    stock Caffe, a gigabyte above the figure).  ``figure``: what `analyze` then states."""
    from caffemem.units import mib

    if subject.kind != "solver":
        net = str(path)
        out = _written_name(net, f"b{batch}")
        flags = _net_flags(options, subject.phase)
        command = _command("optimize", net, "--phase", subject.phase, *flags, *_recompute_flags(recompute), "--batch", str(batch), "-o", out)
        return Advice(batch, (command,), f"then `{_command('analyze', out, '--phase', subject.phase, *flags)}` states {mib(figure)}")
    source = load_source(path, options)
    train = source.train.file  # type: ignore[union-attr]
    if train == str(path):
        return Advice(batch, (), f"the solver defines its train net inline (train_net_param): move it to a file, then caffemem optimize THAT_FILE --phase TRAIN --batch {batch} -o OUT")
    out = _written_name(train, f"b{batch}")
    commands = [_command("optimize", train, "--phase", "TRAIN", *_net_flags(options, "TRAIN"), *_recompute_flags(recompute), "--batch", str(batch), "-o", out)]
    written: dict[str, str] = {train: out}
    for test in source.tests:  # type: ignore[union-attr]
        file = test.net.file
        if file == train:  # a train_val file: its TEST table joins the TRAIN one
            commands.append(_command("optimize", out, "--phase", "TEST", *_net_flags(options, "TEST"), "--force", "--in-place-file", "-o", out))
        elif file not in written and file != str(path):
            written[file] = _written_name(file, "optimized")
            commands.append(_command("optimize", file, "--phase", "TEST", *_net_flags(options, "TEST"), "-o", written[file]))
    solver = source.proto  # type: ignore[union-attr]
    named = f'net: "{out}"' if solver.HasField("net") else ", ".join([f'train_net: "{out}"'] + [f'test_net: "{written.get(test.net.file, test.net.file)}"' for test in source.tests])  # type: ignore[union-attr]
    analyzed = _command("analyze", str(path), *_net_flags(options, None))
    return Advice(batch, tuple(commands), f"then have the solver name them ({named}): `{analyzed}` on it states {mib(figure)}")


def _written_name(net: str, tag: str) -> str:
    """Where a suggested command writes: in the folder it runs in (the net's may be read-only)."""
    stem, _ = os.path.splitext(os.path.basename(net))
    return f"{stem}.{tag}.prototxt"


def _command(*words: str) -> str:
    return " ".join(shlex.quote(word) for word in ("caffemem", *words))


def _recompute_flags(recompute: "Policy | None") -> list[str]:
    return ["--recompute", recompute.describe()] if recompute is not None else []


# fit's input prefixes (a solver's nets, a net's phases) as optimize and analyze take them
_PHASE_OF_PREFIX = {"TRAIN": "TRAIN", "train": "TRAIN", "TEST": "TEST", "test": "TEST", "test0": "TEST"}


def _net_flags(options: Options, phase: str | None) -> list[str]:
    """The flags of this run that build the same net: its inputs for ``phase`` (None: all,
    as given), stages, level, declarations, dtype, engine and device."""
    words = [flag for stage in options.stages for flag in ("--stage", stage)]
    words += ["--level", str(options.level)] if options.level is not None else []
    for key, shape in options.inputs.items():
        prefix, sep, name = key.rpartition(":")
        if sep and phase is not None and _PHASE_OF_PREFIX.get(prefix) != phase:
            continue  # another net's input (a later test net, or the other phase)
        given = ",".join("_" if d == FROM_FILE else str(d) for d in shape)
        words += ["--input", f"{name if phase is not None else key}={given}" if not sep or phase is None else f"{_PHASE_OF_PREFIX[prefix]}:{name}={given}"]
    words += ["--layers", options.layers_file] if options.layers_file else []
    words += ["--lenient"] if options.lenient else []
    words += ["--dtype", options.dtype] if options.dtype != "float32" else []
    words += ["--engine", options.engine] if options.engine else []
    words += ["--gpus", str(options.gpus)] if options.gpus > 1 else []
    words += ["--context-mib", str(options.context_bytes // 2**20)] if options.context_bytes is not None else []
    words += ["--card", options.card.file] if options.card is not None and options.card.file is not None else []
    words += ["--cuda-stack-bytes", str(options.card.stack_bytes)] if options.card is not None and options.card.stack_bytes is not None else []
    return words + ["--device", options.device]


def _notes(analysis: Analysis, net: NetAnalysis, options: Options) -> tuple[str, ...]:
    return tuple(analysis.notes) + net.notes + net.shaped.notes + _rescaled_inputs_note(net.shaped, options)


def _rescaled_inputs_note(shaped: "ShapedGraph", options: Options) -> tuple[str, ...]:
    """--batch sets the first axis of every data top, including those of layers whose code
    caffemem does not know (Python layers, declared ones): right for a batch axis, wrong
    for a count of boxes or ROIs.  Layers whose code is known to fix their tops keep them
    (LayerSpec.fixed_tops) and are not listed."""
    specs = spec_table(options)
    opaque = [specs.get(layer.type) for layer in shaped.graph.layers]
    tops = [
        top
        for layer, spec in zip(shaped.graph.layers, opaque)
        if spec is not None and spec.is_data and spec.opaque_tops and not (spec.fixed_tops and spec.fixed_tops(layer.proto))
        for top in layer.tops
    ]
    if not tops:
        return ()
    return (
        f"the batch replaces the first axis of every data top, also of those Python or declared layers give ({', '.join(dict.fromkeys(tops))}): "
        "the figures hold only where that axis is the batch (not a count of boxes or ROIs)",
    )


# ---------------------------------------------------------------- output

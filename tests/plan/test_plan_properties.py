"""The planner's promises on random nets (tests/random_nets.py), TRAIN and TEST alike: a
plan the verifier accepts is never below the lower bound; the plan `auto` picks passes the
verifier, is the smallest safe plan of any strategy, and costs what the optimizer's
ranking formula says; and the verifier catches plans broken on purpose.

Every property test draws the same 60 nets (one fixed seed), so each net is optimized
once (``phase_cases`` is cached) and CI sees the same nets on every run."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from conftest import FIXTURES
from hypothesis import HealthCheck, assume, given, seed, settings
from hypothesis import strategies as st
from random_nets import RandomNet, caffe_nets

from caffemem.api.analyze import Options
from caffemem.api.optimize import (
    OptimizeSettings,
    PhasePlan,
    assignment_of,
    optimize,
    plan_data,
)
from caffemem.layers.registry import SpecTable
from caffemem.passes.memory import prepare, replay
from caffemem.passes.schedule import Schedule
from caffemem.plan.fork import fork_assignment, fork_plan_data
from caffemem.plan.strategies import make_plan
from caffemem.plan.verify import PlanData, Violation, verify_plan

NETS = st.tuples(caffe_nets(max_layers=12), st.booleans())  # (RandomNet, share_buffers)
SEED = 20240611


def property_test(test):
    """60 random nets, the same ones for every property (a fixed seed, no database)."""
    ci = settings(max_examples=60, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
    return seed(SEED)(ci(given(NETS)(test)))


@dataclass(frozen=True)
class Candidate:
    """One strategy's plan on one phase, judged independently of the optimizer."""

    data: PlanData
    violations: tuple[Violation, ...]
    heap_total: int  # replayed over the memory model
    ranked_cost: int | None  # the optimizer's formula (None for the fork's plan, which it replays)
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class PhaseCase:
    chosen: PhasePlan  # what `auto` picked
    candidates: dict[str, Candidate]  # packed, best-fit, first-fit, exact (small nets), fork


@lru_cache(maxsize=None)
def phase_cases(text: str, share_buffers: bool) -> tuple[PhaseCase, ...]:
    """Optimize the net (`auto`, both phases) and, beside it, every strategy on its own."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "net.prototxt"
        path.write_text(text)
        result = optimize(str(path), Options(), OptimizeSettings(share_buffers=share_buffers))
    specs = SpecTable()
    cases = []
    for phase in result.phases:
        run = prepare(phase.shaped, specs)
        shareable = sum(life.bytes for life in phase.liveness.shareable)
        candidates = {}
        for name, plan in make_plan(phase.liveness).items():
            data = plan_data(plan, phase.schedule)
            heap = replay(run, assignment_of(data, phase.schedule)).heap_total
            cost = phase.stock.heap_total - shareable + plan.slot_bytes
            candidates[name] = Candidate(data, tuple(verify_plan(phase.schedule, data)), heap, cost, plan.notes)
        fork = fork_assignment(phase.shaped, specs, flags=run.flags)
        fork_data = fork_plan_data(fork)
        candidates["fork"] = Candidate(fork_data, tuple(verify_plan(phase.schedule, fork_data)), replay(run, fork).heap_total, None)
        cases.append(PhaseCase(phase, candidates))
    return tuple(cases)


def cases_of(net: tuple[RandomNet, bool]) -> tuple[PhaseCase, ...]:
    random_net, share_buffers = net
    return phase_cases(random_net.text, share_buffers)


@property_test
def test_the_generator_and_caffemem_agree_on_every_shape(net):
    """The nets are valid as meant: caffemem infers the shapes the generator computed."""
    computed = dict(net[0].shapes)
    for case in cases_of(net):
        inferred = {name: tuple(shape) for name, shape in case.chosen.shaped.blob_shapes.items() if name in computed}
        assert inferred == {name: shape for name, shape in computed.items() if name in inferred}
        assert set(computed) - set(inferred) <= {"accuracy"}  # included in TEST only


@property_test
def test_no_safe_plan_is_below_the_lower_bound(net):
    for case in cases_of(net):
        for name, candidate in case.candidates.items():
            if not candidate.violations:
                assert candidate.heap_total >= case.chosen.lower_bound, (case.chosen.phase, name)


@property_test
def test_the_chosen_plan_passes_the_verifier(net):
    for case in cases_of(net):
        assert verify_plan(case.chosen.schedule, case.chosen.plan_data) == [], case.chosen.phase


@property_test
def test_the_chosen_plan_is_no_larger_than_any_safe_plan(net):
    for case in cases_of(net):
        safe = {name: c.heap_total for name, c in case.candidates.items() if not c.violations}
        assert case.chosen.planned.heap_total <= min(safe.values()), (case.chosen.phase, case.chosen.strategy, safe)


@property_test
def test_the_ranking_formula_is_what_the_plan_costs(net):
    """The optimizer ranks caffemem's plans by stock - shareable + slots without replaying
    them: that must be exactly what the replay gives."""
    for case in cases_of(net):
        for name, candidate in case.candidates.items():
            if candidate.ranked_cost is not None:
                assert candidate.heap_total == candidate.ranked_cost, (case.chosen.phase, name)


@property_test
def test_caffemems_own_strategies_always_give_safe_plans(net):
    for case in cases_of(net):
        for name, candidate in case.candidates.items():
            if name != "fork":
                assert candidate.violations == (), (case.chosen.phase, name)


@property_test
def test_an_optimal_exact_plan_is_no_larger_than_the_greedy_whole_slot_plans(net):
    for case in cases_of(net):
        exact = case.candidates.get("exact")
        if exact is not None and exact.notes == ("optimal",):
            assert exact.heap_total <= min(case.candidates[name].heap_total for name in ("best-fit", "first-fit"))


@property_test
def test_the_forks_plan_fails_only_where_caffe_relies_on_zeroed_memory(net):
    """The fork's one known unsafe sharing (see the fixed case below): a gradient read
    before anything writes it, which stock Caffe gets zero-filled."""
    for case in cases_of(net):
        kept = case.chosen.liveness.kept
        zeroed = {c.owner for c in case.chosen.schedule.classes if kept.get(c.id, "").startswith("read before it is written")}
        for violation in case.candidates["fork"].violations:
            assert violation.message.startswith("reads bytes that") and violation.blob in zeroed, str(violation)


# ----------------------------------------------------------------------------- mutations


def _first_accesses(schedule: Schedule) -> list[dict[int, bool]]:
    """Per step: storage -> whether the step's first access to it is a read."""
    steps = []
    for step in schedule.steps:
        first: dict[int, bool] = {}
        for access in step.accesses:
            first.setdefault(access.storage, not access.write)
        steps.append(first)
    return steps


def _writes(schedule: Schedule) -> list[set[int]]:
    return [{a.storage for a in step.accesses if a.write} for step in schedule.steps]


def _together(case: PhaseCase, moved: tuple[int, ...]) -> PlanData:
    """The chosen plan with the given storage classes moved into one new slot, all at 0."""
    schedule, data = case.chosen.schedule, case.chosen.plan_data
    classes = schedule.classes
    slot = max(data.slot_bytes, default=-1) + 1
    keys = {(classes[m].owner, classes[m].part) for m in moved}
    assign = tuple(a for a in data.assign if (a[0], a[1]) not in keys)
    assign += tuple((classes[m].owner, classes[m].part, slot, 0) for m in moved)
    return PlanData({**data.slot_bytes, slot: max(classes[m].bytes for m in moved)}, assign)


def _planned(case: PhaseCase) -> set[int]:
    return {life.storage for life in case.chosen.liveness.shareable}


def _input_and_output(schedule: Schedule, planned: set[int]) -> tuple[int, int, int] | None:
    """(step, written, read): a planned class a step writes, and another planned class the
    same step reads before writing anything to it (a layer's output and input)."""
    firsts, writes = _first_accesses(schedule), _writes(schedule)
    for step in schedule.steps:
        read = sorted(s for s, is_read in firsts[step.index].items() if is_read and s in planned)
        written = sorted((writes[step.index] & planned) - set(read))
        if read and written:
            return step.index, written[0], read[0]
    return None


def _clobber(schedule: Schedule, planned: set[int]) -> tuple[int, int, int] | None:
    """(step, victim, culprit): the victim is written, then the culprit is written in a
    later step that does not touch the victim, then the victim is read first thing at
    ``step`` — it would read the culprit's bytes as its own."""
    firsts, writes = _first_accesses(schedule), _writes(schedule)
    last_write: dict[int, int] = {}
    for step in schedule.steps:
        for victim, is_read in firsts[step.index].items():
            if not (is_read and victim in planned and victim in last_write):
                continue
            for middle in range(last_write[victim] + 1, step.index):
                culprits = sorted((writes[middle] & planned) - {victim})
                if culprits and victim not in firsts[middle]:
                    return step.index, victim, culprits[0]
        for storage in writes[step.index]:
            last_write[storage] = step.index
    return None


def _hazards_caught(net, find, message: str) -> int:
    """Per phase, the hazard ``find`` names — (step, blamed, other) — made real by moving
    both classes onto the same bytes: the verifier must blame ``blamed`` at ``step`` with
    ``message`` (``{}``: the other class's blob).  Returns how many phases had one (the
    tests ``assume`` one at least, so that none of their 60 nets passes vacuously)."""
    found_in = 0
    for case in cases_of(net):
        schedule = case.chosen.schedule
        found = find(schedule, _planned(case))
        if found is not None:
            step, blamed, other = found
            owner = {c.id: c.owner for c in schedule.classes}
            violations = verify_plan(schedule, _together(case, (blamed, other)))
            assert any(v.step == step and v.blob == owner[blamed] and message.format(owner[other]) in v.message for v in violations)
            found_in += 1
    return found_in


@property_test
def test_a_layers_input_and_output_on_the_same_bytes_are_caught(net):
    assume(_hazards_caught(net, _input_and_output, "over '{}'"))


@property_test
def test_a_value_overwritten_before_it_is_read_is_caught(net):
    assume(_hazards_caught(net, _clobber, "'{}' overwrote"))


@property_test
def test_a_slot_smaller_than_its_members_is_caught(net):
    for case in cases_of(net):
        schedule, data = case.chosen.schedule, case.chosen.plan_data
        if data.slot_bytes:
            sizes = {(c.owner, c.part): c.bytes for c in schedule.classes}
            slot = max(data.slot_bytes)
            needed = max(offset + sizes[(blob, part)] for blob, part, s, offset in data.assign if s == slot)
            violations = verify_plan(schedule, PlanData({**data.slot_bytes, slot: needed - 1}, data.assign))
            assert any(f"slot {slot} has {needed - 1}" in v.message for v in violations)


@property_test
def test_a_blob_the_net_does_not_have_is_caught(net):
    for case in cases_of(net):
        data = case.chosen.plan_data
        if data.assign:
            (blob, part, slot, offset), rest = data.assign[0], data.assign[1:]
            violations = verify_plan(case.chosen.schedule, PlanData(data.slot_bytes, ((blob + "~renamed", part, slot, offset),) + rest))
            assert [v.message for v in violations] == [f"no {part} storage of this name in the net"]


# ----------------------------------------------------------------------------- cases these properties found

FORK_DEFECT_NET = (FIXTURES / "plan" / "fork_defect.prototxt").read_text()


def test_the_fork_shares_a_gradient_that_caffe_relies_on_being_zero():
    """`side` is a net output, not a loss: its ReLU has no Backward, yet the Split of `ip`
    sums both of its tops' gradients.  Stock Caffe reads a zero-filled fresh diff for the
    `side` branch; the fork's dry run gives that diff a slot `score`'s gradient is in."""
    train = phase_cases(FORK_DEFECT_NET, False)[0]
    assert train.candidates["fork"].violations == (Violation(8, "backward ip_ip_0_split", "ip_ip_0_split_0", "reads bytes that 'score' overwrote (slot 2)"),)
    assert not train.chosen.fork_safe and train.chosen.strategy != "fork"


LENET = str(FIXTURES / "examples" / "lenet_train.prototxt")


def test_a_diff_the_run_never_touches_may_be_assigned_anywhere():
    """The fork gives every blob's diff a slot, even in TEST where none is ever touched:
    Caffe never allocates those, so the plan is still safe."""
    test = optimize(LENET, Options(phase="TEST"), OptimizeSettings(strategy="fork")).phases[0]
    assert {part for _, part, _, _ in test.plan_data.assign} == {"data", "diff"}
    assert verify_plan(test.schedule, test.plan_data) == [] and test.fork_safe


def test_buffers_filled_during_init_keep_their_own_storage():
    """A convolution's geometry blobs are written in SetUp and read (on the host, which
    allocates nothing) by every Forward; a plan takes over storage only after Init."""
    test = optimize(LENET, Options(phase="TEST"), OptimizeSettings(share_buffers=True)).phases[0]
    kernel_shape = next(c for c in test.schedule.classes if c.owner.endswith("conv1/kernel_shape"))
    assert test.liveness.kept[kernel_shape.id] == "filled during Net::Init (a plan takes over storage only when Init ends)"
    data = test.plan_data
    violations = verify_plan(test.schedule, PlanData({**data.slot_bytes, 99: 8}, data.assign + ((kernel_shape.owner, "data", 99, 0),)))
    assert [v.message for v in violations] == ["its data is filled during Net::Init, before the plan's slots take over, which discards it"]


def test_a_zero_sized_blob_is_kept_private_and_the_plan_verifies():
    """`input_dim: 0` (a batch of none) gives blobs of 0 bytes: nothing to share, and no
    slot of 0 bytes, which the plan schema refuses (found by the mutation campaign)."""
    from caffemem.api.analyze import Options
    from caffemem.api.optimize import OptimizeSettings, optimize
    from caffemem.plan.verify import verify_plan

    net = (
        'name: "zero" input: "data" input_dim: 0 input_dim: 3 input_dim: 8 input_dim: 8\n'
        'layer { name: "conv" type: "Convolution" bottom: "data" top: "conv" convolution_param { num_output: 4 kernel_size: 3 } }\n'
        'layer { name: "relu" type: "ReLU" bottom: "conv" top: "r" }\n'
        'layer { name: "conv2" type: "Convolution" bottom: "r" top: "conv2" convolution_param { num_output: 4 kernel_size: 3 } }\n'
    )
    phase = optimize(net, Options(), OptimizeSettings()).phases[0]
    assert all(size > 0 for size in phase.plan_data.slot_bytes.values())
    assert any("zero-sized" in why for why in phase.liveness.kept.values())
    assert verify_plan(phase.schedule, phase.plan_data) == []

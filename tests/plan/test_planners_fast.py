"""The fast planners, verifier replay and fork slot list (O(n log n) on real nets) give
exactly what the straightforward versions in reference_planners.py give: the same slots,
members and offsets, the same violations in the same order, on random inputs and on
real nets."""

from __future__ import annotations

import itertools
import sys

import pytest
import reference_planners as reference
from conftest import FIXTURES, SHARED, needs_shared
from hypothesis import given, settings
from hypothesis import strategies as st

from caffemem.api.analyze import Options, build_net, spec_table
from caffemem.api.optimize import optimize
from caffemem.passes.filter import make_state
from caffemem.passes.liveness import Lifetime, Liveness, lifetimes
from caffemem.passes.load import load
from caffemem.passes.memory import prepare
from caffemem.passes.schedule import build_schedule
from caffemem.passes.upgrade import upgrade_net
from caffemem.plan import intervals
from caffemem.plan import strategies as plan_module
from caffemem.plan.fork import _Slots
from caffemem.plan.strategies import (
    PACKING_ORDERS,
    Plan,
    Slot,
    _pack,
    aligned,
    best_fit,
    first_fit,
    make_plan,
    packed,
    packing_within,
)
from caffemem.plan.verify import Placement, replay_violations

sys.path.insert(0, str(FIXTURES))
import generate  # noqa: E402  (fixtures/generate.py)

EXAMPLES = settings(max_examples=300, deadline=None, derandomize=True, database=None)

# A blob's lifetime is one span of steps; a scratch buffer's (--share-buffers) is single
# steps.  Few sizes, so ties in every sort key occur; zero bytes (a zero dimension) too.
SPAN = st.tuples(st.integers(0, 39), st.integers(0, 12)).map(lambda s: ((s[0], s[0] + s[1]),))
SCRATCH = st.lists(st.integers(0, 39), min_size=1, max_size=4, unique=True).map(lambda steps: tuple((t, t) for t in sorted(steps)))
SIZES = st.sampled_from((4, 4, 8, 8, 12, 12, 16, 0, 7, 100))
LIFETIMES = st.lists(st.tuples(SPAN | SCRATCH, SIZES), max_size=30).map(lambda drawn: tuple(Lifetime(i, size, spans) for i, (spans, size) in enumerate(drawn)))


@EXAMPLES
@given(LIFETIMES)
def test_best_fit_plan_is_the_reference_plan(lives):
    assert best_fit(lives) == reference.best_fit(lives)


@EXAMPLES
@given(LIFETIMES)
def test_first_fit_plan_is_the_reference_plan(lives):
    assert first_fit(lives) == reference.first_fit(lives)


@EXAMPLES
@given(LIFETIMES, st.sampled_from(sorted(PACKING_ORDERS)), st.booleans())
def test_each_packing_places_every_class_at_the_reference_offset(lives, order, best_gap):
    size, placed = _pack(lives, PACKING_ORDERS[order], best_gap)
    expected_size, expected = reference.pack(lives, PACKING_ORDERS[order], best_gap)
    assert (size, [(life.storage, offset) for life, offset in placed]) == (expected_size, [(life.storage, offset) for life, offset in expected])


@EXAMPLES
@given(LIFETIMES, st.sampled_from(sorted(PACKING_ORDERS)), st.booleans())
def test_packing_that_merges_many_holes_at_once_places_as_the_reference(lives, order, best_gap):
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(intervals, "FEW_HOLES", 0)  # every hole search takes the merged (numpy) path
        size, placed = _pack(lives, PACKING_ORDERS[order], best_gap)
    expected_size, expected = reference.pack(lives, PACKING_ORDERS[order], best_gap)
    assert (size, [(life.storage, offset) for life, offset in placed]) == (expected_size, [(life.storage, offset) for life, offset in expected])


def _most_alive(lives) -> int:
    steps = range(max((life.end for life in lives), default=0) + 1)
    return max((sum(l.bytes for l in lives if any(s <= t <= e for s, e in l.spans)) for t in steps), default=0)


@EXAMPLES
@given(LIFETIMES)
def test_packed_plan_is_the_smallest_reference_packing_even_when_it_stops_early(lives):
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(plan_module, "SEARCH_WORK", -1)  # the greedy packings only
        assert packed(lives, _most_alive(lives)) == reference.packed(lives)


def _overlapping_bytes(placed) -> list:
    """Pairs of classes alive at one step whose byte ranges meet (a valid packing has none)."""
    return [
        (a.storage, b.storage)
        for (a, offset_a), (b, offset_b) in itertools.combinations(placed, 2)
        if a.bytes and b.bytes and a.overlaps(b) and offset_a < offset_b + b.bytes and offset_b < offset_a + a.bytes
    ]


@EXAMPLES
@given(LIFETIMES)
def test_a_packing_the_search_finds_is_valid_and_within_the_capacity(lives):
    most_alive = _most_alive(lives)
    found = packing_within(lives, most_alive)
    if found is not None:
        assert sorted(life.storage for life, _ in found) == sorted(life.storage for life in lives)
        assert max((offset + life.bytes for life, offset in found), default=0) <= most_alive
        assert _overlapping_bytes(found) == []
    plan = packed(lives, most_alive)
    assert most_alive <= plan.slot_bytes <= reference.packed(lives).slot_bytes


def test_the_search_reaches_a_bound_every_greedy_packing_misses():
    # A and B (4 bytes) are never alive together, nor C and D (1 byte); C lives beside B
    # (steps 3-4), D beside A (step 7), C beside D (5-6): at most 5 bytes alive at once.
    lives = (Lifetime(0, 4, ((7, 7),)), Lifetime(1, 4, ((3, 4),)), Lifetime(2, 1, ((2, 6),)), Lifetime(3, 1, ((5, 7),)))
    # Every greedy order puts A and B at 0 (the largest first, or whichever comes first),
    # then C above B and D above A and C: 6 bytes.
    assert packed(lives).slot_bytes == 6
    # The search: C at 0, B above it (1..5), D at 4 (beside C and A, above both), A at 0.
    assert [(life.storage, offset) for life, offset in packing_within(lives, 5)] == [(0, 0), (1, 1), (2, 0), (3, 4)]
    assert packed(lives, 5) == Plan("packed", (Slot(0, 5, (0, 1, 2, 3), (0, 1, 0, 4)),))


def test_the_search_finds_nothing_when_the_bound_cannot_be_reached():
    # Three 1-byte scratch buffers, each pair alive together at one step, never all three:
    # 2 bytes alive at most, but each needs a byte of its own.
    lives = (Lifetime(0, 1, ((0, 0), (2, 2))), Lifetime(1, 1, ((0, 0), (1, 1))), Lifetime(2, 1, ((1, 1), (2, 2))))
    assert _most_alive(lives) == 2
    assert packing_within(lives, 2) is None
    assert sorted(offset for _, offset in packing_within(lives, 3)) == [0, 1, 2]
    assert packed(lives, 2).slot_bytes == 3


def test_in_gpu_mode_the_search_aims_at_the_peak_of_the_rounded_lives():
    # The four lives above, in bytes a card rounds up to 256 (DEVICE_ALIGNMENT): A and B
    # 1,000 (1,024), C and D 200 (256).  The liveness's own peak, 1,200, lies below the
    # rounded lives' 1,280, which no aligned packing can go under: a search at 1,200 could
    # never succeed, and one was never tried; the greedy orders end at D above A and C.
    lives = (Lifetime(0, 1000, ((7, 7),)), Lifetime(1, 1000, ((3, 4),)), Lifetime(2, 200, ((2, 6),)), Lifetime(3, 200, ((5, 7),)))
    liveness = Liveness(None, lives, {}, _most_alive(lives), 0, ())
    assert liveness.lower_bound_peak == 1200
    assert packed(aligned(lives, 256)).slot_bytes == 1280 + 256  # the greedy orders alone
    # Given the liveness's bound, the search aims at the rounded lives' peak, 1,280: C at 0,
    # B on it (256), D at 1,024, A at 0; in the plan the slot ends at B's real end.
    assert packed(aligned(lives, 256), 1200) == Plan("packed", (Slot(0, 1280, (0, 1, 2, 3), (0, 256, 0, 1024)),))
    assert make_plan(liveness, "packed", 256)["packed"] == Plan("packed", (Slot(0, 1256, (0, 1, 2, 3), (0, 256, 0, 1024)),))


@needs_shared
def test_fcn8s_trains_on_the_card_in_a_packing_at_the_peak_of_its_rounded_lives():
    # A real net where every greedy order misses the rounded peak and the search reaches it:
    # 304,432 B below the table the H200 ran (benchmarks/gpu-groundtruth, third run), and
    # 816 B over the unrounded bound, the rounding of the classes alive at the peak.
    options = Options(device="gpu", phase="TRAIN", inputs={"data": (1, 3, 500, 500), "label": (1, 1, 500, 500)})
    phase = optimize(str(SHARED / "models" / "fcn_voc-fcn8s" / "train.prototxt"), options).phases[0]
    assert (phase.strategy, phase.plan_data.slot_bytes) == ("packed", {0: 645511120})
    assert phase.totals()["planned"] == 2524348164 == 2524652596 - 304432 == phase.totals()["lower_bound"] + 816


def test_the_search_gives_up_once_over_its_work():
    lives = (Lifetime(0, 4, ((7, 7),)), Lifetime(1, 4, ((3, 4),)), Lifetime(2, 1, ((2, 6),)), Lifetime(3, 1, ((5, 7),)))
    # Without backtracking, it places C (earliest), A (at 0 too), B, D; its work is each
    # class still to place, and each top of a busy range from the floor up it tries there:
    # 4 classes; then B, D and A and the top of C for B and D (5); then B and D with one
    # top each, C's and A's merged (4); then D and A's top (2): 15 in all.
    assert packing_within(lives, 5, work=14) is None
    assert packing_within(lives, 5, work=15) is not None


def test_only_nets_whose_first_descent_fits_the_budget_are_searched(monkeypatch):
    lives = (Lifetime(0, 4, ((7, 7),)), Lifetime(1, 4, ((3, 4),)), Lifetime(2, 1, ((2, 6),)), Lifetime(3, 1, ((5, 7),)))
    assert plan_module.search_work(4) == 20  # twice 4 + 3 + 2 + 1 classes to look at
    monkeypatch.setattr(plan_module, "SEARCH_WORK", 19)
    assert packed(lives, 5).slot_bytes == 6
    monkeypatch.setattr(plan_module, "SEARCH_WORK", 20)
    assert packed(lives, 5).slot_bytes == 5


def test_a_packing_gives_up_once_its_searches_cross_more_holes_than_its_budget(monkeypatch):
    monkeypatch.setattr(intervals, "FEW_HOLES", 0)  # every search merges (and counts) the holes above it
    lives = (Lifetime(0, 8, ((0, 5),)), Lifetime(1, 4, ((2, 9),)))  # the second search crosses the first class
    assert _pack(lives, PACKING_ORDERS["size"], False, work_budget=0) is None
    assert _pack(lives, PACKING_ORDERS["size"], False, work_budget=1) == _pack(lives, PACKING_ORDERS["size"], False)


def test_only_the_packings_after_the_first_have_a_work_budget(monkeypatch):
    spans = [((4, 5),), ((5, 8),), ((1, 4),), ((2, 6),), ((0, 2),), ((6, 8),)]
    lives = tuple(Lifetime(i, size, span) for i, (size, span) in enumerate(zip((4, 8, 12, 12, 4, 12), spans)))
    assert packed(lives).slot_bytes == 32  # a later packing beats the first (largest first: 36 bytes)
    monkeypatch.setattr(intervals, "FEW_HOLES", 0)  # every search merges (and counts) the holes above it
    monkeypatch.setattr(plan_module, "HOLES_PER_CLASS_LOG", 0)  # so every later packing is given up
    size, placed = _pack(lives, PACKING_ORDERS["size"], False)
    assert size == 36
    assert packed(lives) == Plan("packed", (Slot(0, size, tuple(l.storage for l, _ in placed), tuple(o for _, o in placed)),))


def test_a_packing_works_out_each_classs_tree_nodes_once(monkeypatch):
    """A packer asks the occupancy for a class's nodes twice, to find its hole and to place
    it there (issue 33: a third of a placement's time on a 20,000-layer net); the second
    time gets the first answer.  Classes of two step runs each, so no search takes the
    everything-placed shortcut."""
    lives = tuple(Lifetime(i, 4 + i % 5, ((i, i + 3), (i + 6, i + 7))) for i in range(40))
    worked = []
    real = intervals.Occupancy._nodes_of
    monkeypatch.setattr(intervals.Occupancy, "_nodes_of", lambda self, runs: worked.append(runs) or real(self, runs))
    for best_gap in (False, True):
        worked.clear()
        _pack(lives, PACKING_ORDERS["size"], best_gap)
        assert len(worked) == 40


def test_a_packing_at_the_peak_of_the_aligned_lives_ends_the_search_for_a_smaller_one(monkeypatch):
    """In GPU mode the lives are rounded up to 256 bytes, so their peak is above the
    liveness's; a packing at the rounded peak cannot be beaten, and the seven packings after
    it were made to be dropped (issue 33: a 20,000-layer chain).  A chain of 100-byte
    blobs, each alive with the next: the liveness's peak is 200 bytes, the rounded one 512,
    and largest-first reaches it.  The plan is the one all eight packings give."""
    lives = plan_module.aligned(tuple(Lifetime(i, 100, ((i, i + 1),)) for i in range(30)), plan_module.DEVICE_ALIGNMENT)
    every = packed(lives)  # no bound: every packing made
    made = []
    real = plan_module._pack
    monkeypatch.setattr(plan_module, "_pack", lambda *args: made.append(args[1:3]) or real(*args))
    assert packed(lives, 200) == every
    assert every.slot_bytes == 512
    assert made == [(PACKING_ORDERS["size"], False)]


def _schedule(text: str, tmp_path, phase: str):
    path = tmp_path / "net.prototxt"
    path.write_text(text)
    options = Options(phase=phase)
    specs = spec_table(options)
    source = load(str(path))
    upgraded, _ = upgrade_net(source.proto, source.file)
    shaped = build_net(source, upgraded, make_state(phase, base=upgraded.state), options, specs)
    return build_schedule(shaped, specs, run=prepare(shaped, specs))


REAL_NETS = {
    "lenet": (FIXTURES / "examples" / "lenet_train.prototxt").read_text(),
    "resnet18": generate.resnet(18),
    "inception3": generate.inception(3),
    "wide": generate.wide(150),
}


@pytest.mark.parametrize("net", sorted(REAL_NETS))
@pytest.mark.parametrize("phase", ["TRAIN", "TEST"])
@pytest.mark.parametrize("share_buffers", [False, True])
def test_planners_give_the_reference_plans_on_real_nets(tmp_path, net, phase, share_buffers):
    lives = lifetimes(_schedule(REAL_NETS[net], tmp_path, phase), share_buffers=share_buffers).shareable
    assert (best_fit(lives), first_fit(lives), packed(lives)) == (reference.best_fit(lives), reference.first_fit(lives), reference.packed(lives))


# The verifier's replay: storage classes of real nets (one with a zero dimension, so
# zero-byte classes) placed at random, overlapping on purpose.
@pytest.fixture(scope="module")
def schedules(tmp_path_factory):
    folder = tmp_path_factory.mktemp("nets")
    chains = 'layer { name: "in" type: "Input" top: "x" top: "z" input_param { shape { dim: 2 dim: 3 } shape { dim: 0 dim: 3 } } }\n'
    for blob in ("x", "z"):  # z has a zero dimension: its classes are zero bytes
        chains += "".join(f'layer {{ name: "{blob}{i}" type: "ReLU" bottom: "{blob}{i - 1 if i else ""}" top: "{blob}{i}" }}\n' for i in range(4))
    chains += 'layer { name: "loss" type: "EuclideanLoss" bottom: "x3" bottom: "x" top: "loss" }\nlayer { name: "loss_z" type: "EuclideanLoss" bottom: "z3" bottom: "z" top: "loss_z" }\nforce_backward: true\n'
    return {(name, phase): _schedule(text, folder, phase) for name, text in (("lenet", REAL_NETS["lenet"]), ("resnet18", generate.resnet(18)), ("chains", chains)) for phase in ("TRAIN", "TEST")}


@EXAMPLES
@given(st.data())
def test_verifier_replay_reports_what_the_pairwise_reference_reports(schedules, data):
    schedule = data.draw(st.sampled_from(sorted(schedules.items())))[1]
    classes = [c for c in schedule.classes if c.kind != "param"]
    chosen = data.draw(st.lists(st.sampled_from(classes), min_size=1, max_size=40, unique_by=lambda c: c.id))
    where = data.draw(st.lists(st.tuples(st.integers(0, 2), st.sampled_from((0, 0, 4, 12, 24, 64, 4096, -8)) | st.integers(0, 300_000)), min_size=len(chosen), max_size=len(chosen)))
    place = {c.id: Placement(slot, offset, offset + c.bytes) for c, (slot, offset) in zip(chosen, where)}
    assert replay_violations(schedule, place) == replay_violations(schedule, place, reference.PairwiseShadow(place))


def test_verifier_replay_of_the_planners_own_plans_matches_the_reference(schedules):
    for schedule in schedules.values():
        for plan in make_plan(lifetimes(schedule, share_buffers=True)).values():
            place = {member: Placement(slot.id, offset, offset + schedule.classes[member].bytes) for slot in plan.slots for member, offset in slot.placements()}
            assert replay_violations(schedule, place) == replay_violations(schedule, place, reference.PairwiseShadow(place)) == []


def test_a_zero_byte_class_written_inside_another_overwrites_it(schedules):
    schedule = schedules[("chains", "TRAIN")]
    x0, z0 = (next(c.id for c in schedule.classes if c.owner == blob and c.part == "data") for blob in ("x0", "z0"))
    place = {x0: Placement(0, 0, 24), z0: Placement(0, 4, 4)}  # z0 has no bytes, but sits inside x0's
    assert [(v.step_name, v.blob, v.message) for v in replay_violations(schedule, place)] == [("backward x1", "x0", "reads bytes that 'z0' overwrote (slot 0)")]


OPERATIONS = st.lists(st.tuples(st.sampled_from(("acquire", "find", "add_ref", "release")), st.integers(-1, 7)), max_size=60)


@EXAMPLES
@given(OPERATIONS)
def test_fork_slot_list_answers_as_the_scanning_list(operations):
    fast, scanning = _Slots(), reference.ScanningSlots()
    for operation, argument in operations:
        key = f"blob{argument}_data"
        if operation == "acquire" and scanning.find(key) == -1:
            assert fast.acquire(key) == scanning.acquire(key)
        elif operation == "find":
            assert fast.find(key) == scanning.find(key)
        elif operation == "add_ref" and argument >= 0:
            fast.add_ref(argument)
            scanning.add_ref(argument)
        elif operation == "release" and argument < len(scanning.keys):
            fast.release(argument)
            scanning.release(argument)
        assert (fast.keys, fast.refs) == (scanning.keys, scanning.refs)


# The structures under the planners, by example.


@pytest.mark.parametrize("few_holes", [intervals.FEW_HOLES, 0])  # walked in Python, or merged by numpy
def test_tightest_hole_is_the_lowest_of_the_smallest_holes_that_fit(few_holes, monkeypatch):
    monkeypatch.setattr(intervals, "FEW_HOLES", few_holes)
    occupancy = intervals.Occupancy(10)
    for start, end in [(0, 4), (12, 16), (24, 28), (40, 50)]:  # holes 4..12 and 16..24 (8 bytes), 28..40 (12)
        occupancy.place([(0, 5)], start, end)
    occupancy.place([(6, 9)], 4, 12)  # fills the first hole, but only after step 5
    assert occupancy.tightest_hole([(2, 3)], 5) == 4
    assert occupancy.tightest_hole([(2, 7)], 5) == 16
    assert occupancy.tightest_hole([(2, 3)], 10) == 28
    assert occupancy.tightest_hole([(2, 3)], 13) == 50


@pytest.mark.parametrize("few_holes", [intervals.FEW_HOLES, 0])
def test_a_zero_byte_class_splits_the_hole_it_sits_in(few_holes, monkeypatch):
    monkeypatch.setattr(intervals, "FEW_HOLES", few_holes)
    occupancy = intervals.Occupancy(4)
    occupancy.place([(0, 4)], 0, 4)
    occupancy.place([(0, 4)], 20, 30)
    occupancy.place([(1, 2)], 10, 10)
    assert occupancy.lowest_hole([(0, 4)], 8) == 10  # 4..12 would hold it, but 10 is inside
    assert occupancy.lowest_hole([(3, 4)], 8) == 4  # the zero-byte class is not alive then
    assert occupancy.tightest_hole([(0, 4)], 5) == 4  # 4..10 (6 bytes) is tighter than 10..20


def test_first_free_slot_is_the_lowest_position_free_on_every_step():
    tree = intervals.SlotTree(8)
    tree.open(0, [(0, 10)])
    tree.open(1, [(0, 3)])
    tree.add(1, [(8, 9)])
    tree.open(5, [(4, 6)])
    assert tree.first_free([(4, 5)]) == 1
    assert tree.first_free([(2, 3)]) == 5
    assert tree.first_free([(0, 10)]) is None
    assert tree.first_free([(5, 6), (8, 9)]) is None
    tree.open(6, [(20, 30)])
    assert tree.first_free([(5, 6), (8, 9)]) == 6

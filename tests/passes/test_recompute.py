"""The schedule with Forwards run again in Backward (passes/recompute.py), its liveness, and
the verifier's check that recomputation changes no value any step reads (plan/verify.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from caffemem.api.analyze import Options
from caffemem.api.optimize import OptimizeSettings, optimize
from caffemem.passes.liveness import lifetimes
from caffemem.passes.recompute import Recomputation, placed, with_recomputation
from caffemem.plan.verify import recompute_violations

NET = Path(__file__).resolve().parents[2] / "fixtures" / "plan" / "recompute_resnet.prototxt"
CHAIN = ("conv2", "bn2", "scale2", "relu2")  # one in-place chain: one storage, conv2


@pytest.fixture(scope="module")
def schedule():
    return optimize(str(NET), Options(device="cpu", phase="TRAIN"), OptimizeSettings(share_buffers=True)).phases[0].schedule


def index(schedule, *names):
    at = {layer.name: layer.index for layer in schedule.shaped.graph.layers}
    return [at[name] for name in names]


def names(schedule, entries):
    layers = schedule.shaped.graph.layers
    return [(layers[e.layer].name, layers[e.before].name, e.restore_params) for e in entries]


def test_a_chain_runs_again_whole_before_the_first_backward_that_reads_its_storage(schedule):
    # res1 (Eltwise) reads conv2's data in its Backward (eltwise_layer.cpp Backward_cpu
    # fetches every bottom's data), the first Backward after conv3's to read it.
    entries = placed(schedule, [index(schedule, *CHAIN)], index(schedule, "bn2"))
    assert names(schedule, entries) == [("conv2", "res1", False), ("bn2", "res1", True), ("scale2", "res1", False), ("relu2", "res1", False)]


def test_recompute_steps_sit_before_their_backward_and_the_steps_are_renumbered(schedule):
    entries = placed(schedule, [index(schedule, *CHAIN)], index(schedule, "bn2"))
    extended = with_recomputation(schedule, entries)
    steps = [extended.step_name(step) for step in extended.steps]
    at = steps.index("backward res1")
    assert steps[at - 4 : at] == ["recompute conv2", "recompute bn2", "recompute scale2", "recompute relu2"]
    assert [step.index for step in extended.steps] == list(range(len(schedule.steps) + 4))


def test_a_restored_layer_runs_again_without_touching_its_parameters(schedule):
    (bn2,) = index(schedule, "bn2")
    extended = with_recomputation(schedule, [Recomputation(bn2, bn2, restore_params=True)])
    again = next(step for step in extended.steps if step.kind == "recompute")
    first = next(step for step in extended.steps if step.kind == "forward" and step.layer == bn2)
    params = {c.id for c in schedule.classes if c.kind == "param"}
    assert {a.storage for a in again.accesses} == {a.storage for a in first.accesses} - params


def test_a_recomputed_storage_lives_twice_and_is_dead_between(schedule):
    entries = placed(schedule, [index(schedule, *CHAIN)], index(schedule, "bn2"))
    extended = with_recomputation(schedule, entries)
    (conv2,) = [c.id for c in schedule.classes if c.owner == "conv2" and c.part == "data"]
    life = next(life for life in lifetimes(extended, (), True).shareable if life.storage == conv2)
    steps = [extended.step_name(step) for step in extended.steps]
    assert [(steps[a], steps[b]) for a, b in life.spans] == [("forward conv2", "forward res1"), ("recompute conv2", "backward relu2")]  # BatchNorm in place reads x_norm, conv2 reads conv1


def test_buffers_a_recomputed_forward_refills_for_its_backward_become_shareable(schedule):
    # bn2's x_norm is written in Forward and read in Backward: kept private without
    # recomputation, two short lives with it.
    x_norm = next(c.id for c in schedule.classes if c.owner.endswith(":bn2/x_norm") and c.part == "data")
    assert "keeps values between steps" in lifetimes(schedule, (), True).kept[x_norm]
    extended = with_recomputation(schedule, placed(schedule, [index(schedule, *CHAIN)], index(schedule, "bn2")))
    life = next(life for life in lifetimes(extended, (), True).shareable if life.storage == x_norm)
    steps = [extended.step_name(step) for step in extended.steps]
    assert [(steps[a], steps[b]) for a, b in life.spans] == [("forward bn2", "forward bn2"), ("recompute bn2", "backward bn2")]


def test_the_whole_chain_run_again_changes_no_value_any_step_reads(schedule):
    entries = placed(schedule, [index(schedule, *CHAIN)], index(schedule, "bn2"))
    assert recompute_violations(with_recomputation(schedule, entries)) == []


def test_a_chain_recomputed_from_its_middle_reads_a_value_that_is_gone(schedule):
    (bn2, res1) = index(schedule, "bn2", "res1")
    violations = recompute_violations(with_recomputation(schedule, [Recomputation(bn2, res1, True)]))
    assert str(violations[0]) == "step 35 (recompute bn2), blob 'conv2': reads what forward relu2 wrote where the run without recomputation reads what forward conv2 wrote"


def test_a_chain_recomputed_without_its_tail_leaves_a_value_the_backward_did_not_read(schedule):
    entries = placed(schedule, [index(schedule, "conv2", "bn2")], index(schedule, "bn2"))
    violations = recompute_violations(with_recomputation(schedule, entries))
    assert str(violations[0]) == "step 37 (backward res1), blob 'conv2': reads what forward bn2 wrote where the run without recomputation reads what forward relu2 wrote"


def test_a_schedule_without_recomputation_has_nothing_to_check(schedule):
    assert recompute_violations(schedule) == []
    assert with_recomputation(schedule, ()) is schedule


def test_an_entry_before_a_layer_without_backward_is_refused(schedule):
    (data, conv1) = index(schedule, "data", "conv1")
    with pytest.raises(ValueError, match="no such Forward or Backward step"):
        with_recomputation(schedule, [Recomputation(conv1, data)])

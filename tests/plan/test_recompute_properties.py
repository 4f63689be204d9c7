"""`optimize --recompute`'s promises on random nets (tests/random_nets.py: in-place layers,
fan-out, BatchNorm with its statistics updated in TRAIN, Dropout, frozen parameters), in
TRAIN, for each policy: the plan passes the verifier on the extended schedule (no step reads
a value the recomputation changed), it is never above the plan without recomputation at the
same flags, no layer whose Forward may not run twice is run again, and every BatchNorm run
again in TRAIN has its parameters restored.  40 nets, one fixed seed: CI sees the same ones."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st
from random_nets import RandomNet, caffe_nets

from caffemem.api.analyze import Options
from caffemem.api.optimize import OptimizeSettings, optimize, plan_data
from caffemem.layers.registry import SpecTable, recompute_of
from caffemem.passes.liveness import lifetimes
from caffemem.passes.recompute import placed, with_recomputation
from caffemem.plan.recompute import units_of
from caffemem.plan.strategies import make_plan
from caffemem.plan.verify import recompute_violations, verify_plan, verify_plan_on

SEED = 20261126


def planned(net: RandomNet, recompute: str | None):
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "net.prototxt"
        path.write_text(net.text)
        return optimize(str(path), Options(device="cpu", phase="TRAIN"), OptimizeSettings(share_buffers=True, recompute=recompute)).phases[0]


@seed(SEED)
@settings(max_examples=40, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(net=caffe_nets(max_layers=12), policy=st.sampled_from(["cheap", "sqrt"]))
def test_a_recompute_plan_is_safe_never_above_the_plan_without_and_runs_only_what_may_run_twice(net, policy):
    plain = planned(net, None)
    phase = planned(net, policy)
    assert verify_plan_on(phase.schedules, phase.plan_data) == []
    assert phase.totals()["planned"] <= plain.totals()["planned"]
    specs, layers = SpecTable(), phase.shaped.graph.layers
    for entry in phase.recomputed:
        layer = layers[entry.layer]
        fact = recompute_of(specs.get(layer.type), layer.proto, "TRAIN")
        assert fact.safe, (layer.name, layer.type, fact.why)
        assert entry.restore_params == fact.restores_params, layer.name


@seed(SEED)
@settings(max_examples=40, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(net=caffe_nets(max_layers=12))
def test_every_unit_that_may_run_again_run_again_gives_plans_the_verifier_accepts(net):
    """The placement and the liveness are sound whether or not a recomputation pays: every
    eligible unit recomputed at once, each strategy's packing of that schedule is safe."""
    phase = planned(net, None)
    schedule, specs = phase.schedule, SpecTable()
    units = [unit for unit in units_of(schedule, specs, phase.liveness) if unit.why_not is None]
    extended = with_recomputation(schedule, placed(schedule, [unit.layers for unit in units], [layer for unit in units for layer in unit.restores]))
    assert recompute_violations(extended) == []
    liveness = lifetimes(extended, (), True)
    for name, plan in make_plan(liveness).items():
        assert verify_plan(extended, plan_data(plan, extended)) == [], name

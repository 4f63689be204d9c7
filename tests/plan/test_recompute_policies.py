"""The policies of `optimize --recompute` (plan/recompute.py) on real nets: what each
recomputes, what it saves against the plan without recomputation, and that every plan they
give passes the verifier on the extended schedule."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from caffemem.api.analyze import Options, parse_inputs
from caffemem.api.optimize import OptimizeSettings, optimize
from caffemem.plan.recompute import BudgetMissed, Policy, parse_policy
from caffemem.plan.verify import verify_plan_on

REPO = Path(__file__).resolve().parents[2]
MODELS = REPO.parent / "shared" / "models"
FIXTURE = REPO / "fixtures" / "plan" / "recompute_resnet.prototxt"
needs_shared = pytest.mark.skipif(not MODELS.exists(), reason="../shared/models is not here")
MIB = 1024 * 1024


def resnet50(tmp_path: Path) -> Path:
    """ResNet-50's deploy file as the issue trains it: force_backward after its name."""
    text = (MODELS / "resnet" / "ResNet-50-deploy.prototxt").read_text()
    out = tmp_path / "ResNet-50-force-backward.prototxt"
    out.write_text(text.replace('name: "ResNet-50"\n', 'name: "ResNet-50"\nforce_backward: true\n', 1))
    return out


def plan(net, policy: str | None, share_buffers: bool = True, **options):
    settings = OptimizeSettings(share_buffers=share_buffers, recompute=parse_policy(policy) if policy else None)
    return optimize(str(net), Options(device="cpu", phase="TRAIN", **options), settings).phases[0]


def recomputed_types(phase) -> set[str]:
    layers = phase.shaped.graph.layers
    return {layers[entry.layer].type for entry in phase.recomputed}


@pytest.fixture(scope="module")
def resnet(tmp_path_factory):
    return resnet50(tmp_path_factory.mktemp("resnet"))


@needs_shared
def test_resnet50_batch_32_sqrt_holds_at_most_half_the_plan_without_recomputation(resnet):
    plain = plan(resnet, None, batch=32).totals()["planned"]
    plain_blobs = plan(resnet, None, share_buffers=False, batch=32).totals()["planned"]
    sqrt = plan(resnet, "sqrt", batch=32)
    assert (plain, plain_blobs) == (5_106_087_040, 7_906_447_104)  # 4,869.54 and 7,540.18 MiB
    assert sqrt.totals()["planned"] == sqrt.totals()["lower_bound"] == 1_759_949_952  # 1,678.42 MiB: 0.34x and 0.22x
    assert (len(sqrt.recomputed), sqrt.recompute.extra_flops) == (184, 232_522_809_344)
    assert verify_plan_on(sqrt.schedules, sqrt.plan_data) == []


def test_every_recomputed_batchnorm_in_train_restores_its_running_averages():
    phase = plan(FIXTURE, "sqrt")
    layers = phase.shaped.graph.layers
    restored = sorted(layers[entry.layer].name for entry in phase.recomputed if entry.restore_params)
    assert restored == ["bn1", "bn2", "bn3"]
    assert all(layers[entry.layer].type == "BatchNorm" for entry in phase.recomputed if entry.restore_params)
    # The runtime's copies: 3 blobs per BatchNorm (mean and variance, 8 channels; the scale factor, 1).
    assert phase.recompute.saved_param_bytes == 3 * 4 * (8 + 8 + 1) == 204


@needs_shared
def test_batchnorm_with_global_stats_runs_again_with_nothing_to_restore(resnet):
    # ResNet-50's deploy file sets use_global_stats: true, so its Forward never updates them.
    phase = plan(resnet, "sqrt", batch=2)
    layers = phase.shaped.graph.layers
    assert any(layers[entry.layer].type == "BatchNorm" for entry in phase.recomputed)
    assert not any(entry.restore_params for entry in phase.recomputed)
    assert phase.recompute.saved_param_bytes == 0


@needs_shared
@pytest.mark.parametrize("policy", ["cheap", "sqrt"])
def test_alexnet_never_runs_a_dropout_or_a_data_layer_twice(policy):
    phase = plan(MODELS / "bvlc_alexnet" / "train_val.prototxt", policy, batch=4, inputs=parse_inputs(["data=_,3,_,_"]))
    assert not recomputed_types(phase) & {"Dropout", "Data", "SoftmaxWithLoss", "Accuracy"}
    assert verify_plan_on(phase.schedules, phase.plan_data) == []


@needs_shared
@pytest.mark.parametrize("policy", ["cheap", "sqrt"])
def test_googlenet_plans_with_recomputation_are_below_the_plan_without(policy):
    net = MODELS / "bvlc_googlenet" / "train_val.prototxt"
    plain = plan(net, None, batch=4, inputs=parse_inputs(["data=_,3,_,_"]))
    phase = plan(net, policy, batch=4, inputs=parse_inputs(["data=_,3,_,_"]))
    assert phase.recomputed
    assert phase.totals()["planned"] < plain.totals()["planned"]
    assert verify_plan_on(phase.schedules, phase.plan_data) == []


def test_cheap_runs_no_convolution_or_inner_product_again():
    phase = plan(FIXTURE, "cheap")
    assert phase.recomputed
    assert not recomputed_types(phase) & {"Convolution", "InnerProduct", "Dropout"}


def test_a_test_net_has_no_backward_so_nothing_is_recomputed(tmp_path):
    net = tmp_path / "forward_only.prototxt"  # with force_backward a TEST net runs Backward (tests/plan/test_force_backward.py)
    net.write_text(FIXTURE.read_text().replace("force_backward: true\n", ""))
    phase = optimize(str(net), Options(device="cpu", phase="TEST"), OptimizeSettings(recompute=Policy("sqrt"))).phases[0]
    assert phase.recomputed == ()
    assert phase.recompute.extra_flops == 0


@pytest.fixture(scope="module")
def fixture_figures():
    none = plan(FIXTURE, None).totals()["planned"]
    deepest = plan(FIXTURE, "sqrt").totals()["planned"]
    return none, deepest


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(share=st.floats(min_value=0.0, max_value=1.0))
def test_a_budget_between_the_deepest_recomputation_and_none_is_met_and_verified(fixture_figures, share):
    none, deepest = fixture_figures
    budget = int(deepest + share * (none - deepest))
    phase = plan(FIXTURE, f"budget={budget}B")
    assert phase.totals()["planned"] <= budget
    assert verify_plan_on(phase.schedules, phase.plan_data) == []


def test_a_budget_the_plan_already_meets_recomputes_nothing(fixture_figures):
    none, _ = fixture_figures
    assert plan(FIXTURE, f"budget={none}B").recomputed == ()


def test_a_budget_below_every_recomputation_is_missed_by_how_much(fixture_figures):
    _, deepest = fixture_figures
    with pytest.raises(BudgetMissed, match=r"over the budget"):
        plan(FIXTURE, f"budget={deepest // 2}B")

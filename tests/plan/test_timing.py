"""plan/timing.py, the time model of `optimize --recompute` (issue 33): its ratios against
the measurements its prices were fitted on (fixtures/timing/measured.json: CPU runs of
benchmarks/runtime.py, the H200 runs of the issue), and what the reports and policies do
with it.  No test times anything: the measurements are committed figures."""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from caffemem.api.analyze import Options, parse_inputs
from caffemem.api.optimize import OptimizeSettings, optimize
from caffemem.layers.registry import SpecTable
from caffemem.plan.recompute import _knapsack, parse_policy, time_ratio_at
from caffemem.plan.timing import DEVICES, kind_of, prices_for

REPO = Path(__file__).resolve().parents[2]
MODELS = REPO.parent / "shared" / "models"
FIXTURE = REPO / "fixtures" / "plan" / "recompute_resnet.prototxt"
MEASURED = json.loads((REPO / "fixtures" / "timing" / "measured.json").read_text())
needs_shared = pytest.mark.skipif(not MODELS.exists(), reason="../shared/models is not here")
TOLERANCE = 0.15  # the target: within 15% of the measured ratio


def _cpu_net(name: str, batch: int, tmp: Path) -> Path:
    # The runtime tests' nets are written through a caffe_pb2 that grpcio-tools compiles
    # (runtime_nets.caffe_pb2); the oldest CI stacks lack it (its protobuf is too new).
    pytest.importorskip("grpc_tools", reason="grpcio-tools writes the runtime tests' nets")
    sys.path.insert(0, str(REPO / "tests" / "runtime"))
    from runtime_nets import RECOMPUTE_CASES, make_net

    case = next(c for c in RECOMPUTE_CASES if c.name == name)
    return make_net(replace(case, batch=batch), tmp)


@needs_shared
@pytest.mark.parametrize("run", MEASURED["cpu"]["runs"], ids=lambda r: f"{r['net']}-{r['policy']}")
def test_the_cpu_model_is_within_15_percent_of_each_measured_ratio(run, tmp_path):
    net = _cpu_net(run["net"], run["batch"], tmp_path)
    phase = optimize(str(net), Options(device="cpu", phase="TRAIN"), OptimizeSettings(recompute=parse_policy(run["policy"]))).phases[0]
    assert len(phase.recomputed) == run["forwards"]  # the plan that was measured
    prices = replace(DEVICES["cpu"], runtime_skips_reshape=MEASURED["cpu"]["runtime_skips_reshape"])
    assert time_ratio_at(phase.recompute, SpecTable(), prices) == pytest.approx(run["ratio"], rel=TOLERANCE)


GPU_NETS = {"googlenet": ("bvlc_googlenet/train_val.prototxt", ("data=_,3,_,_",)), "resnet50": ("resnet/ResNet-50-deploy.prototxt", ())}


def _gpu_phase(net: str, batch: int, policy: str, tmp: Path):
    file, inputs = GPU_NETS[net]
    path = MODELS / file
    if net == "resnet50":  # the deploy file as the issue trains it
        path = tmp / "ResNet-50-force-backward.prototxt"
        path.write_text((MODELS / file).read_text().replace('name: "ResNet-50"\n', 'name: "ResNet-50"\nforce_backward: true\n', 1))
    options = Options(device="gpu", phase="TRAIN", batch=batch, inputs=parse_inputs(list(inputs)))
    return optimize(str(path), options, OptimizeSettings(recompute=parse_policy(policy))).phases[0]


def _gpu_params():
    for run in MEASURED["gpu"]["runs"]:
        marks = ()
        if (run["net"], run["policy"]) == ("googlenet", "sqrt"):
            marks = pytest.mark.xfail(strict=True, reason="measured 2.05x, the model says 1.21x: what else GoogLeNet's recomputed convolutions cost on the card is not known (issue 33)")
        yield pytest.param(run, marks=marks, id=f"{run['net']}-{run['policy']}")


@needs_shared
@pytest.mark.parametrize("run", list(_gpu_params()))
def test_the_gpu_model_is_within_15_percent_of_each_measured_ratio(run, tmp_path):
    phase = _gpu_phase(run["net"], run["batch"], run["policy"], tmp_path)
    prices = replace(DEVICES["gpu"], runtime_skips_reshape=MEASURED["gpu"]["runtime_skips_reshape"])
    assert time_ratio_at(phase.recompute, SpecTable(), prices) == pytest.approx(run["ratio"], rel=TOLERANCE)


def test_a_layer_is_priced_by_flops_by_its_window_or_by_its_bytes():
    assert kind_of("Convolution", 2 * 27 * 100, 100) == "compute"
    assert kind_of("Pooling", 9 * 100, 100) == "window"
    assert kind_of("LRN", 7 * 100, 100) == "window"
    assert kind_of("ReLU", 100, 100) == "memory"
    assert kind_of("BatchNorm", 8 * 100, 100) == "memory"


def test_a_gpu_build_with_caffe_convolutions_pays_no_cudnn_algorithm_queries():
    assert prices_for("gpu", "cudnn").reshape_s == DEVICES["gpu"].reshape_s > 0
    assert prices_for("gpu", "caffe").reshape_s == 0
    assert prices_for("cpu", "caffe") == DEVICES["cpu"]


def test_the_knapsack_ranks_by_seconds_not_flops():
    """Two segments save the same bytes; the budget needs one: the one whose Forwards take
    fewer estimated seconds is chosen (a pooling segment may have few FLOPs and many seconds)."""
    slow_few_flops = (100, 5.0, frozenset({1}))
    fast_many_flops = (100, 1.0, frozenset({2}))
    nothing = (0, 0.0, frozenset())
    assert _knapsack([[nothing, slow_few_flops], [nothing, fast_many_flops]], 100) == frozenset({2})


def _fixture_phase(policy: str, device: str = "cpu"):
    return optimize(str(FIXTURE), Options(device=device, phase="TRAIN"), OptimizeSettings(recompute=parse_policy(policy))).phases[0]


@pytest.mark.parametrize("policy", ["cheap", "sqrt"])
def test_every_policy_reports_its_estimated_time_ratio(policy):
    choice = _fixture_phase(policy).recompute
    assert choice.recomputed and choice.extra_seconds > 0 and choice.iteration_seconds > 0
    assert choice.time_ratio == 1 + choice.extra_seconds / choice.iteration_seconds
    assert choice.time_model == DEVICES["cpu"].measured_on


def test_the_fixture_policies_choose_and_price_exactly():
    """recompute_resnet (CPU prices): cheap costs an estimated 1.13x; a budget halfway
    between the plan without recomputation and sqrt's needs the three residual chains and
    the pooling run again, as sqrt does: 1.23x."""
    cheap = _fixture_phase("cheap").recompute
    halfway = _fixture_phase("budget=632402B").recompute
    layers = _fixture_phase("sqrt").shaped.graph.layers
    assert [layers[e.layer].name for e in halfway.recomputed] == ["pool", "conv3", "bn3", "scale3", "relu3", "conv1", "bn1", "scale1", "relu1", "conv2", "bn2", "scale2", "relu2"]
    assert (round(cheap.time_ratio, 4), round(halfway.time_ratio, 4)) == (1.1321, 1.2276)
    assert halfway.time_ratio == _fixture_phase("sqrt").recompute.time_ratio

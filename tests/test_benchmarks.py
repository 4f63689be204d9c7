"""Benchmarks (pytest-benchmark) of whole `caffemem` processes and of the pipeline.

In CI: ResNet-152 (optimize and analyze, each well under a second, imports included) and
1,000-layer chains, wide DAGs and Inception-style nets.  On demand (``-m slow`` or
CAFFEMEM_BENCH_LARGE=1): 10,000 and 100,000 layers, where the time per layer may grow
by no more than a log factor over 1,000 layers and the memory per layer stays bounded.
benchmarks/scale.py prints the same measurements as the README's table."""

from __future__ import annotations

import math
import os
import sys

import pytest
from conftest import FIXTURES, REPO

from caffemem.api.analyze import Options, analyze
from caffemem.api.optimize import OptimizeSettings, optimize

sys.path.insert(0, str(FIXTURES))
sys.path.insert(0, str(REPO / "benchmarks"))
import generate  # noqa: E402  (fixtures/generate.py)
import scale  # noqa: E402  (benchmarks/scale.py)

LARGE = os.environ.get("CAFFEMEM_BENCH_LARGE") == "1"
SHAPES = ("chain", "wide", "inception")
SLACK = 1.5  # for a busy machine: n log n may cost up to this much more per layer than measured at 1,000


@pytest.fixture(autouse=True)
def large_only_on_demand(request):
    if request.node.get_closest_marker("slow") and not (LARGE or "slow" in (request.config.getoption("markexpr") or "")):
        pytest.skip("a large benchmark: run with -m slow or CAFFEMEM_BENCH_LARGE=1")


def timed_runs(benchmark, args: list[str], rounds: int = 3) -> list[scale.Measure]:
    """Whole `caffemem` processes, as a user runs them; each round's time and peak memory."""
    measures: list[scale.Measure] = []
    benchmark.pedantic(lambda: measures.append(scale.run_command(args)), rounds=rounds, iterations=1)
    return measures


@pytest.fixture(scope="module")
def resnet152(tmp_path_factory):
    path = tmp_path_factory.mktemp("resnet") / "resnet152.prototxt"
    path.write_text(generate.resnet(152))
    return str(path)


def test_optimize_of_resnet152_takes_under_a_second(benchmark, resnet152):
    measures = timed_runs(benchmark, ["optimize", resnet152, "--phase", "TRAIN"])
    assert min(m.seconds for m in measures) < 1.0


def test_analyze_of_resnet152_takes_under_a_second(benchmark, resnet152):
    measures = timed_runs(benchmark, ["analyze", resnet152])
    assert min(m.seconds for m in measures) < 1.0


def _net(tmp_path, shape: str, layers: int) -> str:
    path = tmp_path / f"{shape}-{layers}.prototxt"
    path.write_text(generate.sized(shape, layers))
    return str(path)


@pytest.mark.parametrize("shape", SHAPES)
def test_optimize_of_a_thousand_layers(benchmark, tmp_path, shape):
    path = _net(tmp_path, shape, 1000)
    result = benchmark.pedantic(optimize, args=(path, Options(phase="TRAIN"), OptimizeSettings()), rounds=1, iterations=1)
    phase = result.phases[0]
    assert phase.lower_bound <= phase.planned.heap_total < phase.stock.heap_total


@pytest.mark.parametrize("shape", SHAPES)
def test_analyze_of_a_thousand_layers(benchmark, tmp_path, shape):
    path = _net(tmp_path, shape, 1000)
    analysis = benchmark.pedantic(analyze, args=(path, Options(phase="TRAIN")), rounds=1, iterations=1)
    assert len(analysis.nets[0].memory.layers) >= 1000


def test_sized_nets_have_about_the_layers_asked_for():
    counts = {shape: scale.layer_count(generate.sized(shape, 1000)) for shape in SHAPES}
    # chain: input, 498 conv+ReLU pairs, pool/fc/loss; wide: input, 8 stems, 41 levels of
    # 8 x (Eltwise, conv, ReLU), Concat, head; inception: stem, 37 modules of 26, 2 pools, head.
    assert counts == {"chain": 1000, "wide": 997, "inception": 978}


@pytest.mark.slow
@pytest.mark.parametrize("layers", [10_000, 100_000])
@pytest.mark.parametrize("shape", SHAPES)
def test_optimize_grows_no_faster_than_n_log_n(benchmark, tmp_path, shape, layers):
    small = scale.run_command(["optimize", _net(tmp_path, shape, 1000), "--phase", "TRAIN"])
    large = timed_runs(benchmark, ["optimize", _net(tmp_path, shape, layers), "--phase", "TRAIN"], rounds=1)[0]
    per_layer_small, per_layer_large = small.seconds / 1000, large.seconds / layers
    assert per_layer_large <= SLACK * per_layer_small * math.log(layers) / math.log(1000)
    assert large.peak_mib * 1024 / layers < 32  # KiB per layer


@pytest.mark.slow
@pytest.mark.parametrize("layers", [10_000, 100_000])
@pytest.mark.parametrize("shape", SHAPES)
def test_analyze_grows_no_faster_than_n_log_n(benchmark, tmp_path, shape, layers):
    small = scale.run_command(["analyze", _net(tmp_path, shape, 1000), "--json"])
    large = timed_runs(benchmark, ["analyze", _net(tmp_path, shape, layers), "--json"], rounds=1)[0]
    assert large.seconds / layers <= SLACK * small.seconds / 1000 * math.log(layers) / math.log(1000)
    assert large.peak_mib * 1024 / layers < 32

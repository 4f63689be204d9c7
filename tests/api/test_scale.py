"""Generated nets of 1,000 layers (chains, wide DAGs, Inception-style) and ResNet-152 plan
correctly.  Their speed and memory are measured by benchmarks/scale.py (figures of one
run, in docs/benchmarks.md), never asserted here: CI machines are shared and noisy."""

from __future__ import annotations

import sys

import pytest
from conftest import FIXTURES, REPO

from caffemem.api.analyze import Options, analyze
from caffemem.api.optimize import OptimizeSettings, optimize

sys.path.insert(0, str(FIXTURES))
sys.path.insert(0, str(REPO / "benchmarks"))
import generate  # noqa: E402  (fixtures/generate.py)
import scale  # noqa: E402  (benchmarks/scale.py)

SHAPES = ("chain", "wide", "inception")


def _net(tmp_path, text: str, name: str) -> str:
    path = tmp_path / f"{name}.prototxt"
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize("shape", SHAPES)
def test_a_thousand_layer_net_plans_between_the_lower_bound_and_stock(tmp_path, shape):
    result = optimize(_net(tmp_path, generate.sized(shape, 1000), shape), Options(phase="TRAIN"), OptimizeSettings())
    phase = result.phases[0]
    assert phase.lower_bound <= phase.planned.heap_total < phase.stock.heap_total


@pytest.mark.parametrize("shape", SHAPES)
def test_a_thousand_layer_net_is_analyzed_layer_by_layer(tmp_path, shape):
    analysis = analyze(_net(tmp_path, generate.sized(shape, 1000), shape), Options(phase="TRAIN"))
    assert len(analysis.nets[0].memory.layers) >= 1000


def test_resnet152_plans_between_the_lower_bound_and_stock(tmp_path):
    phase = optimize(_net(tmp_path, generate.resnet(152), "resnet152"), Options(phase="TRAIN"), OptimizeSettings()).phases[0]
    assert phase.lower_bound <= phase.planned.heap_total < phase.stock.heap_total


def test_sized_nets_have_about_the_layers_asked_for():
    counts = {shape: scale.layer_count(generate.sized(shape, 1000)) for shape in SHAPES}
    # chain: input, 498 conv+ReLU pairs, pool/fc/loss; wide: input, 8 stems, 41 levels of
    # 8 x (Eltwise, conv, ReLU), Concat, head; inception: stem, 37 modules of 26, 2 pools, head.
    assert counts == {"chain": 1000, "wide": 997, "inception": 978}

"""Shared weights (issue 15): the siamese net of BVLC/caffe examples/siamese/
mnist_siamese_train_test.prototxt (fixtures/siamese, its Data layers replaced by Input layers),
whose two towers share every parameter by name.

- `--strategy fork` predicts what the memory-multiloading fork (yjxiong/caffe action_recog
  9831a2b) allocated on it with its optimizer on, as benchmarks/fork_groundtruth.py measured
  it (fixtures/siamese/mnist_siamese_train_test.yjx.json; re-measured by the slow test
  tests/runtime/test_fork_groundtruth.py).
- caffemem's own plan reaches the lower bound there."""

from __future__ import annotations

import json

import pytest
from conftest import FIXTURES

from caffemem.api.analyze import Options, build_net, spec_table
from caffemem.api.optimize import OptimizeSettings, optimize
from caffemem.passes.filter import make_state
from caffemem.passes.load import load
from caffemem.passes.memory import prepare, replay
from caffemem.passes.upgrade import upgrade_net
from caffemem.plan.fork import fork_assignment, fork_run

SIAMESE = FIXTURES / "siamese" / "mnist_siamese_train_test.prototxt"
MEASURED = json.loads((FIXTURES / "siamese" / "mnist_siamese_train_test.yjx.json").read_text())


@pytest.mark.parametrize("run", MEASURED["runs"], ids=lambda run: run["phase"])
def test_fork_strategy_predicts_the_forks_measured_run_on_the_siamese_net(run):
    phase = optimize(str(SIAMESE), Options(phase=run["phase"]), OptimizeSettings(strategy="fork")).phases[0]
    assert phase.strategy == "fork"
    assert (phase.planned.heap_forward, phase.planned.heap_backward) == (run["heap_forward"], run["heap_backward"])
    # The fork's inputs are net-level, ours an Input layer: the layers after it match one by one.
    ours = [(l.name, l.fwd_alloc, l.bwd_alloc) for l, layer in zip(phase.planned.layers, phase.shaped.graph.layers) if layer.bottoms]
    assert ours == [(l["name"], l["fwd_alloc"], l["bwd_alloc"]) for l in run["layers"]]


def test_in_the_fork_each_tower_keeps_its_own_parameter_gradients():
    """The fork's Net::AppendParam shares a named parameter's data only (src/caffe/net.cpp,
    ShareData), BVLC's ShareWeights data and diff; so conv1, the owner, allocates its own
    weight gradients in Backward as well as conv1_p."""
    phase = optimize(str(SIAMESE), Options(phase="TRAIN"), OptimizeSettings(strategy="fork")).phases[0]
    bwd = {layer.name: layer.bwd_alloc for layer in phase.planned.layers}
    stock = {layer.name: layer.bwd_alloc for layer in phase.stock.layers}
    # conv1's weights 20x1x5x5 and bias 20: (500 + 20) * 4 = 2,080 bytes.  Stock Caffe
    # allocates them once, in conv1_p's Backward (it runs first), beside the diff of its
    # bottom data_p (64x1x28x28: 200,704), and conv1 only data's diff; in the fork those
    # two diffs are in slots allocated before.
    assert (bwd["conv1"], bwd["conv1_p"]) == (2_080, 2_080)
    assert (stock["conv1"], stock["conv1_p"]) == (200_704, 200_704 + 2_080)


def test_fork_run_drops_only_the_sharing_of_parameter_diffs():
    phase = optimize(str(SIAMESE), Options(phase="TRAIN"), OptimizeSettings(strategy="fork")).phases[0]
    specs = spec_table(Options())
    run = prepare(phase.shaped, specs)
    slots = fork_assignment(phase.shaped, specs, flags=run.flags)
    # The five shared pairs' gradients, allocated twice: conv1 500 + 20, conv2 25,000 + 50,
    # ip1 400,000 + 500, ip2 5,000 + 10, feat 20 + 2 = 431,102 floats = 1,724,408 bytes.
    assert replay(fork_run(run), slots).heap_backward - replay(run, slots).heap_backward == 1_724_408
    assert replay(fork_run(run), slots).heap_forward == replay(run, slots).heap_forward


def test_fork_run_is_the_run_itself_without_shared_parameters():
    source = load(str(FIXTURES / "examples" / "lenet_train.prototxt"))
    upgraded, _ = upgrade_net(source.proto, source.file)
    specs = spec_table(Options())
    run = prepare(build_net(source, upgraded, make_state("TRAIN"), Options(phase="TRAIN"), specs), specs)
    assert fork_run(run) is run


@pytest.mark.parametrize("phase_name", ["TRAIN", "TEST"])
def test_the_plan_reaches_the_lower_bound_on_the_siamese_net(phase_name):
    phase = optimize(str(SIAMESE), Options(phase=phase_name)).phases[0]
    assert phase.strategy == "packed"
    assert phase.planned.heap_total == phase.lower_bound
    assert phase.totals()["planned"] == phase.totals()["lower_bound"]


def test_the_siamese_lower_bound_is_the_bytes_alive_at_pool1_p():
    # TRAIN peak, at pool1_p's Forward: pair_data's halves data and data_p (64x1x28x28: 200,704
    # each), pool1 (64x20x12x12: 737,280), pool2 (64x50x4x4: 204,800), ip1 (64x500: 128,000),
    # ip2 (64x10: 2,560), feat (64x2: 512), conv1_p (64x20x24x24: 2,949,120), pool1_p
    # (737,280): 5,160,960 bytes.  Greedy packing stacks the four conv1-sized classes at one
    # offset and ended at 2 x 2,949,120 = 5,898,240 bytes (6.5% of the whole run over the bound).
    phase = optimize(str(SIAMESE), Options(phase="TRAIN")).phases[0]
    assert phase.liveness.lower_bound_peak == 5_160_960
    assert phase.plan_data.slot_bytes == {0: 5_160_960}

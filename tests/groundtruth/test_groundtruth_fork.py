"""Issue 4's baseline: `--strategy fork` predicts what the memory-multiloading fork itself
allocated with its optimizer on (../shared/groundtruth-fork), exactly."""

from __future__ import annotations

import pytest
from conftest import SHARED, groundtruth_runs, needs_shared, run_inputs

from caffemem.api.analyze import Options
from caffemem.api.optimize import OptimizeSettings, optimize


@needs_shared
@pytest.mark.parametrize("source, run", groundtruth_runs("groundtruth-fork"))
def test_fork_strategy_predicts_the_forks_own_run(source, run):
    inputs = run_inputs(run)
    phase = optimize(str(SHARED / source), Options(phase=run["phase"], inputs=inputs), OptimizeSettings(strategy="fork")).phases[0]
    assert phase.strategy == "fork"
    assert (phase.planned.heap_forward, phase.planned.heap_backward) == (run["heap_forward"], run["heap_backward"])
    # The fork has no Input layer (its inputs are net-level), so its layer list starts
    # after ours; the layers themselves allocate the same, one by one.
    ours = [(l.fwd_alloc, l.bwd_alloc) for l, layer in zip(phase.planned.layers, phase.shaped.graph.layers) if layer.bottoms]
    assert ours == [(l["fwd_alloc"], l["bwd_alloc"]) for l in run["layers"]]

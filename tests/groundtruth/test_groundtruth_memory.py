"""Issue 3's proof: caffemem predicts the bytes real Caffe allocated, exactly —
heap_init/forward/backward, Caffe's own log figure, every layer's fwd and bwd bytes,
and Net::Init's need_backward / propagate_down."""

from __future__ import annotations

import pytest
from conftest import SHARED, groundtruth_runs, needs_shared, run_inputs

from caffemem.api.analyze import Options, analyze


def _memory(source: str, run: dict):
    inputs = run_inputs(run)
    return analyze(str(SHARED / source), Options(phase=run["phase"], inputs=inputs)).nets[0].memory


@needs_shared
@pytest.mark.parametrize("source, run", groundtruth_runs())
def test_net_totals_equal_caffe(source, run):
    memory = _memory(source, run)
    ours = (memory.heap_init, memory.heap_forward, memory.heap_backward, memory.memory_required_for_data, memory.learnable_param_bytes)
    theirs = (run["heap_init"], run["heap_forward"], run["heap_backward"], run["memory_required_for_data"], run["learnable_param_bytes"])
    assert ours == theirs


@needs_shared
@pytest.mark.parametrize("source, run", groundtruth_runs())
def test_every_layer_allocates_what_caffe_allocated(source, run):
    memory = _memory(source, run)
    ours = [(l.name, l.fwd_alloc, l.bwd_alloc) for l in memory.layers]
    theirs = [(l["name"], l["fwd_alloc"], l["bwd_alloc"]) for l in run["layers"]]
    assert ours == theirs


@needs_shared
@pytest.mark.parametrize("source, run", groundtruth_runs())
def test_backward_flags_equal_net_init(source, run):
    memory = _memory(source, run)
    ours = [(l.name, l.need_backward, list(l.propagate_down)) for l in memory.layers]
    theirs = [(l["name"], l["need_backward"], l["propagate_down"]) for l in run["layers"]]
    assert ours == theirs

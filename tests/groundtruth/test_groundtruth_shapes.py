"""Issue 2's proof: for every run real Caffe accepted, caffemem builds the same net —
the same blobs, in the same order, with the same shapes, and the same layers."""

from __future__ import annotations

import pytest
from conftest import SHARED, groundtruth_runs, needs_shared, run_inputs

from caffemem.api.analyze import Options, analyze
from caffemem.report.document import to_json


def _analyze(source: str, run: dict) -> dict:
    inputs = run_inputs(run)
    return to_json(analyze(str(SHARED / source), Options(phase=run["phase"], inputs=inputs)))


@needs_shared
@pytest.mark.parametrize("source, run", groundtruth_runs())
def test_blobs_match_caffe(source, run):
    ours = _analyze(source, run)
    assert [(b["name"], b["shape"]) for b in ours["blobs"]] == [(b["name"], b["shape"]) for b in run["blobs"]]


@needs_shared
@pytest.mark.parametrize("source, run", groundtruth_runs())
def test_layers_match_caffe(source, run):
    ours = _analyze(source, run)
    replaced = {name for name in run["inputs"]}
    theirs = run["layers"]
    # Ground truth replaced data layers by Input layers: compare their tops, not their types.
    assert [(l["name"], l["bottoms"], l["tops"]) for l in ours["layers"]] == [(l["name"], l["bottoms"], l["tops"]) for l in theirs]
    for mine, real in zip(ours["layers"], theirs):
        if not set(real["tops"]) & replaced:
            assert mine["type"] == real["type"], mine["name"]
        assert mine["params"] == real["params"], mine["name"]

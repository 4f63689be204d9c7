"""benchmarks/recompute.py: the table of docs/recompute.md ("Recompute in backward") is its output, and
on the issue's net (ResNet-50 with force_backward, batch 32, CPU mode) the best policy's plan
is at most half the plan without recomputation."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import load_script

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "recompute.py"
needs_shared = pytest.mark.skipif(not (REPO.parent / "shared" / "models").exists(), reason="../shared/models is not here")


@pytest.fixture(scope="module")
def rows():
    return load_script(SCRIPT).rows("cpu")


@needs_shared
def test_the_guides_table_is_the_benchmarks_output(rows):
    assert load_script(SCRIPT).markdown(rows) in (REPO / "docs" / "recompute.md").read_text()


@needs_shared
def test_resnet50_best_policy_is_at_most_half_the_plan_without_recomputation(rows):
    resnet = [row for row in rows if row["net"].startswith("ResNet-50")]
    assert {row["policy"] for row in resnet} == {"cheap", "sqrt"}
    assert min(row["ratio"] for row in resnet) <= 0.5

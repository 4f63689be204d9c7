"""benchmarks/fork_groundtruth.py against the real fork (yjxiong/caffe action_recog 9831a2b,
built with its byte probe): it reproduces ../shared/groundtruth-fork exactly on nets measured
there, and re-measures the siamese fixture's recorded run (fixtures/siamese, which
tests/groundtruth/test_siamese.py holds caffemem's fork model to). Slow (builds the fork,
~5 min on 2 cores the first time, cached after): `pytest -m slow tests/runtime/test_fork_groundtruth.py`."""

from __future__ import annotations

import json
import os
import sys

import pytest
from runtime_caffe import FORK_TARBALL, REPO

sys.path.insert(0, str(REPO / "benchmarks"))
import fork_groundtruth  # noqa: E402  (benchmarks/fork_groundtruth.py)

pytestmark = pytest.mark.slow

SHARED = REPO.parent / "shared"
SIAMESE = REPO / "fixtures" / "siamese" / "mnist_siamese_train_test.prototxt"


@pytest.fixture(autouse=True)
def _need_the_fork():
    if os.environ.get("CAFFEMEM_SKIP_CAFFE") == "1":
        pytest.skip("CAFFEMEM_SKIP_CAFFE=1")
    if not FORK_TARBALL.is_file():
        pytest.skip(f"{FORK_TARBALL} missing")


def test_the_siamese_fixture_measures_as_recorded():
    recorded = json.loads(SIAMESE.with_suffix(".yjx.json").read_text())
    measured = fork_groundtruth.measure(str(SIAMESE), source=recorded["source"])
    assert measured == recorded


@pytest.mark.parametrize("name", ["bvlc_examples_mnist__lenet_train_test", "bvlc_examples_cifar10__cifar10_quick_train_test", "bvlc_examples_mnist__lenet"])
def test_the_tool_reproduces_the_shared_fork_ground_truth(name):
    path = SHARED / "groundtruth-fork" / f"{name}.yjx.json"
    if not path.is_file():
        pytest.skip(f"{path} missing")
    expected = json.loads(path.read_text())
    for run in expected["runs"]:
        given = {top: tuple(shape) for top, shape in run["inputs"].items()}
        measured = fork_groundtruth.measure(str(SHARED / expected["source"]), [run["phase"]], given, source=expected["source"])
        assert measured["runs"] == [run]

"""Plans never lose (issue 22) on every run of the ground truth (../shared/groundtruth, at
its inputs) and on the siamese net (fixtures/siamese), in both modes, with and without
--share-buffers: planned <= stock Caffe, <= the fork's plan, the --share-buffers plan <=
the plan without it, the lower bound <= planned and within 1.5% of it, and `auto`'s
candidates rank the figure reported as planned.

Before (issue 22): FCN-8s TRAIN `--share-buffers --device gpu` planned 3,366.28 MiB against
stock's 3,194.86 MiB with a "lower bound" of 177.42 MiB; AlexNet deploy planned 757.64 MiB
on the card without the flag and 763.73 MiB with it; the siamese TRAIN net planned
11,641,172 bytes with the flag and 11,275,092 without (CPU)."""

from __future__ import annotations

import json
from functools import lru_cache

import pytest
from conftest import FIXTURES, SHARED, needs_shared

from caffemem.api.analyze import Options
from caffemem.api.optimize import OptimizeSettings, PhasePlan, optimize

GROUNDTRUTH = SHARED / "groundtruth"
SIAMESE = FIXTURES / "siamese" / "mnist_siamese_train_test.prototxt"


def _runs():
    if not GROUNDTRUTH.is_dir():
        return []
    return [
        pytest.param(str(SHARED / document["source"]), run["phase"], json.dumps(run["inputs"], sort_keys=True), device, id=f"{path.stem}-{run['phase']}-{device}")
        for path in sorted(GROUNDTRUTH.glob("*.json"))
        for document in [json.loads(path.read_text())]
        for run in document["runs"]
        if run["ok"]
        for device in ("cpu", "gpu")
    ]


RUNS = _runs() + [pytest.param(str(SIAMESE), phase, "{}", device, id=f"siamese-{phase}-{device}") for phase in ("TRAIN", "TEST") for device in ("cpu", "gpu")]


@lru_cache(maxsize=None)
def planned(path: str, phase: str, inputs: str, device: str, share_buffers: bool) -> PhasePlan:
    options = Options(phase=phase, inputs={name: tuple(shape) for name, shape in json.loads(inputs).items()}, device=device)
    return optimize(path, options, OptimizeSettings(share_buffers=share_buffers)).phases[0]


@needs_shared
@pytest.mark.parametrize("path, phase, inputs, device", RUNS)
def test_no_plan_loses(path, phase, inputs, device):
    blobs, buffers = (planned(path, phase, inputs, device, share_buffers) for share_buffers in (False, True))
    for plan in (blobs, buffers):
        totals = plan.totals()
        assert totals["lower_bound"] <= totals["planned"] <= min(totals["stock"], totals["fork"]), (plan.strategy, totals)
        # A bound plans come close to (it was 95% below FCN-8s' plan on the card): the
        # farthest is cifar10_quick TRAIN in CPU mode with --share-buffers, 1.14% above it.
        assert totals["planned"] - totals["lower_bound"] <= totals["lower_bound"] * 3 // 200, (plan.strategy, totals)
        assert plan.candidates[plan.strategy] == totals["planned"] == min(plan.candidates.values())
    assert buffers.totals()["planned"] <= blobs.totals()["planned"]
    assert buffers.totals()["lower_bound"] <= blobs.totals()["lower_bound"]


@needs_shared
def test_a_plan_above_stock_caffe_is_never_written(tmp_path):
    # cifar10_quick on the card: the fork's plan holds 810.39 MiB, stock Caffe 810.36 MiB.
    from click.testing import CliRunner

    from caffemem.cli import main

    out = tmp_path / "planned.prototxt"
    net = str(SHARED / "models" / "bvlc_examples_cifar10" / "cifar10_quick.prototxt")
    result = CliRunner().invoke(main, ["optimize", net, "--device", "gpu", "--strategy", "fork", "-o", str(out)])
    assert result.exit_code == 1
    assert "the fork plan of TEST holds 810.39 MiB on the card, more than stock Caffe's 810.36 MiB: nothing written" in result.output
    assert not out.exists()
    assert CliRunner().invoke(main, ["optimize", net, "--device", "gpu", "-o", str(out)]).exit_code == 0

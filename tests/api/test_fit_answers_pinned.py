"""`fit`'s answers on ResNet-152 and GoogLeNet's solver, pinned before issue 33 item 4 made
`fit --recompute` fast (a batch-independent part built once, cheaper passes): a speedup
changes no batch, no byte and no evaluation.  The figures are those `fit` printed before."""

from __future__ import annotations

import sys

import pytest
from conftest import FIXTURES, SHARED, needs_shared

from caffemem.api.analyze import Options
from caffemem.api.fit import FitRequest, fit

sys.path.insert(0, str(FIXTURES))
import generate  # noqa: E402  (fixtures/generate.py)

GiB = 2**30
GOOGLENET_SOLVER = SHARED / "models" / "bvlc_googlenet" / "solver.prototxt"
IMAGENET = {"data": (3, 224, 224)}


@pytest.fixture(scope="module")
def resnet152(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("resnet152") / "resnet152.prototxt"
    path.write_text(generate.resnet(152))
    return str(path)


def made(result) -> list[tuple[int, int | None, bool]]:
    """Every evaluation, in the order made: batch, bytes, whether it was the plan's bound."""
    return [(e.batch, e.bytes, e.bound) for e in result.evaluations]


def time_notes(result) -> list[str]:
    return [note for note in result.notes if "per sample" in note]


def test_resnet152_recompute_sqrt_answer_and_evaluations_are_pinned(resnet152):
    result = fit(resnet152, Options(device="gpu"), FitRequest(12 * GiB, recompute="sqrt"))
    assert (result.search.batch, result.bytes, result.following.bytes, result.search.guess) == (38, 12_399_406_524, 12_694_771_568, 38)
    assert made(result) == [
        (1, 1_467_864_760, True),
        (2, 1_763_309_676, True),
        (4, 2_354_199_508, True),
        (8, 3_535_979_172, True),
        (38, 12_399_406_524, False),
        (39, 12_694_771_568, True),
    ]
    assert time_notes(result) == [
        "batch 38: an estimated 10.956 ms per sample (416.3 ms per iteration, recomputation included; plan/timing.py's model)",
        "of the batches evaluated within the card, batch 38 also trains fastest per sample",
    ]


@needs_shared
def test_googlenet_solver_recompute_sqrt_answer_and_evaluations_are_pinned():
    result = fit(str(GOOGLENET_SOLVER), Options(device="gpu"), FitRequest(12 * GiB, recompute="sqrt"), inputs=IMAGENET)
    assert (result.search.batch, result.bytes, result.following.bytes, result.search.guess) == (590, 12_665_270_356, 12_683_961_308, 595)
    assert made(result) == [
        (1, 1_656_443_084, True),
        (2, 1_674_994_356, True),
        (4, 1_712_096_900, True),
        (8, 1_786_301_988, True),
        (595, 12_758_723_068, False),
        (596, 12_694_449_924, True),
        (590, 12_665_270_356, False),
        (591, 12_683_961_308, False),
    ]
    assert time_notes(result) == [
        "batch 590: an estimated 1.018 ms per sample (600.5 ms per iteration, recomputation included; plan/timing.py's model)",
        "of the batches evaluated within the card, batch 590 also trains fastest per sample",
    ]


def test_resnet152_optimized_and_stock_answers_are_pinned(resnet152):
    optimized = fit(resnet152, Options(device="gpu"), FitRequest(12 * GiB, optimized=True))
    assert made(optimized) == [
        (1, 1_669_413_800, False),
        (2, 2_166_872_668, False),
        (4, 3_161_184_708, False),
        (8, 5_149_808_788, False),
        (23, 12_607_149_088, False),
        (24, 13_104_305_108, False),
    ]
    stock = fit(resnet152, Options(device="gpu"), FitRequest(12 * GiB))
    assert made(stock) == [(1, 11_907_527_917, False), (2, 12_651_274_977, False), (4, 14_138_163_401, False), (3, 13_394_719_189, False)]
    assert (optimized.search.batch, stock.search.batch) == (23, 2)


@needs_shared
def test_googlenet_solver_optimized_and_stock_answers_are_pinned():
    optimized = fit(str(GOOGLENET_SOLVER), Options(device="gpu"), FitRequest(12 * GiB, optimized=True), inputs=IMAGENET)
    assert made(optimized) == [
        (1, 1_671_049_836, False),
        (2, 1_704_194_548, False),
        (4, 1_770_497_028, False),
        (8, 1_903_101_988, False),
        (333, 12_679_354_572, False),
        (332, 12_644_114_244, False),
    ]
    stock = fit(str(GOOGLENET_SOLVER), Options(device="gpu"), FitRequest(12 * GiB), inputs=IMAGENET)
    assert made(stock) == [
        (1, 10_571_739_742, False),
        (2, 10_649_242_758, False),
        (4, 10_804_248_790, False),
        (8, 11_114_260_854, False),
        (28, 12_664_321_174, False),
        (29, 12_741_824_190, False),
    ]
    assert (optimized.search.batch, stock.search.batch) == (332, 28)

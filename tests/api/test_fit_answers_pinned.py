"""`fit`'s answers on ResNet-152 and GoogLeNet's solver, pinned before issue 33 item 4 made
`fit --recompute` fast (a batch-independent part built once, cheaper passes): a speedup
changes no batch, no byte and no evaluation.  The figures are those `fit` printed before,
updated once for a change of the model, not of the search: SoftmaxWithLoss's inner cuDNN
handle counted and the lazy-kernel reserve 197.29 -> 168.75 MiB (issue 32; the same figures
came from the code before the speedups with that model).  `fit --recompute` then probed
batches 1 and 2 only (api/fit.py ``BOUND_PROBES``: its bound is one line from batch 1 on
both nets, so the line through 1 and 2 lands where the one through 4 and 8 did): batches 4
and 8 are no longer evaluated, and every other evaluation is the same, in the same order."""

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
    assert (result.search.batch, result.bytes, result.following.bytes, result.search.guess) == (39, 12_694_853_488, 12_990_216_484, 39)
    assert made(result) == [
        (1, 1_467_864_760, True),
        (2, 1_763_309_676, True),
        (39, 12_694_853_488, False),
        (40, 12_990_216_484, True),
    ]
    assert time_notes(result) == [
        "batch 39: an estimated 10.868 ms per sample (423.9 ms per iteration, recomputation included; plan/timing.py's model)",
        "of the batches evaluated within the card, batch 39 also trains fastest per sample",
    ]


@needs_shared
def test_googlenet_solver_recompute_sqrt_answer_and_evaluations_are_pinned():
    result = fit(str(GOOGLENET_SOLVER), Options(device="gpu"), FitRequest(12 * GiB, recompute="sqrt"), inputs=IMAGENET)
    assert (result.search.batch, result.bytes, result.following.bytes, result.search.guess) == (592, 12_702_651_236, 12_721_342_188, 596)
    assert made(result) == [
        (1, 1_656_443_084, True),
        (2, 1_674_994_356, True),
        (596, 12_777_413_252, False),
        (597, 12_713_001_196, True),
        (592, 12_702_651_236, False),
        (593, 12_721_342_188, False),
    ]
    assert time_notes(result) == [
        "batch 592: an estimated 1.018 ms per sample (602.4 ms per iteration, recomputation included; plan/timing.py's model)",
        "of the batches evaluated within the card, batch 592 also trains fastest per sample",
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
    assert made(stock) == [(1, 11_917_505_550, False), (2, 12_661_252_610, False), (4, 14_148_141_034, False), (3, 13_404_696_822, False)]
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
        (334, 12_710_416_724, False),
    ]
    stock = fit(str(GOOGLENET_SOLVER), Options(device="gpu"), FitRequest(12 * GiB), inputs=IMAGENET)
    assert made(stock) == [
        (1, 10_631_605_540, False),
        (2, 10_709_108_556, False),
        (4, 10_864_114_588, False),
        (8, 11_174_126_652, False),
        (27, 12_646_683_956, False),
        (28, 12_724_186_972, False),
    ]
    assert (optimized.search.batch, stock.search.batch) == (333, 27)

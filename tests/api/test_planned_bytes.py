"""The bytes of an optimized net are one computation (api.optimize.planned_report): optimize,
check --optimized and fit --optimized give the same figure for the same net, and all of
them honour the file's own mem_param.exclude_blob."""

from __future__ import annotations

import pytest
from conftest import FIXTURES

from caffemem.api.analyze import Options
from caffemem.api.check import CheckSettings, Measurement, check_file
from caffemem.api.fit import subject_of
from caffemem.api.optimize import OptimizeSettings, optimize

LENET = FIXTURES / "examples" / "lenet_train.prototxt"
SOLVER = 'net: "net.prototxt"\ntest_iter: 1\ntest_interval: 100\nbase_lr: 0.01\nlr_policy: "fixed"\n'


@pytest.fixture
def excluding_solver(tmp_path):
    """LeNet whose file keeps conv2 private (mem_param.exclude_blob), and a solver for it."""
    (tmp_path / "net.prototxt").write_text(LENET.read_text() + '\nmem_param { exclude_blob: "conv2" }\n')
    (tmp_path / "solver.prototxt").write_text(SOLVER)
    return tmp_path


def planned_total(net, phase: str, **settings) -> int:
    return optimize(str(net), Options(phase=phase), OptimizeSettings(**settings), force=True).phases[0].planned.total_bytes


def test_check_optimized_on_a_solver_honours_the_nets_exclude_blob(excluding_solver):
    (measured,) = check_file(str(excluding_solver / "solver.prototxt"), CheckSettings(Options(phase="TEST"), optimized=True))
    assert isinstance(measured, Measurement)
    assert measured.bytes == planned_total(excluding_solver / "net.prototxt", "TEST")


def test_check_optimized_on_the_net_gives_optimizes_figure(excluding_solver):
    outcomes = check_file(str(excluding_solver / "net.prototxt"), CheckSettings(Options(), optimized=True))
    assert {m.phase: m.bytes for m in outcomes} == {phase: planned_total(excluding_solver / "net.prototxt", phase) for phase in ("TRAIN", "TEST")}


def test_fit_optimized_counts_optimizes_figure(excluding_solver):
    subject = subject_of(str(excluding_solver / "net.prototxt"), Options(phase="TEST"), optimized=True)
    assert subject.measure(64).bytes == planned_total(excluding_solver / "net.prototxt", "TEST")


def test_the_exclusion_is_counted(excluding_solver):
    # Keeping conv2 private costs memory: the figure with the file's exclusion is larger
    # than the same net planned without it.
    plain = excluding_solver / "plain.prototxt"
    plain.write_text(LENET.read_text())
    assert planned_total(excluding_solver / "net.prototxt", "TRAIN") > planned_total(plain, "TRAIN")

"""A TEST net with ``force_backward: true`` runs Backward (issue 31, item 6): pycaffe's
``net.backward()`` on a deploy net kept for back-propagating to the image.  Net::Init gives
such a net the same need_backward in TEST as in TRAIN (BVLC net.cpp: the phase filters
layers only; force_backward then sets layer_need_backward_ for every layer), so its run is
Init, one Forward and one Backward: the memory model counts the gradients, the schedule
has the Backward steps, and a plan holds for them.  Without force_backward a TEST net runs
Forward only, as `caffe test` and the solver's test nets do."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import FIXTURES, SHARED

from caffemem.api.analyze import Options, analyze
from caffemem.api.optimize import OptimizeSettings, optimize
from caffemem.cli import main
from caffemem.plan.verify import verify_plan_on

NET = FIXTURES / "plan" / "force_backward_mfm.prototxt"


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def without_force_backward(tmp_path) -> Path:
    path = tmp_path / "forward_only.prototxt"
    path.write_text(NET.read_text().replace("force_backward: true\n", ""))
    return path


def test_a_test_net_with_force_backward_counts_its_backward():
    memory = analyze(str(NET), Options(device="cpu", phase="TEST")).nets[0].memory
    # fc2: its top's diff 12 B, weights' 48 + bias' 12, mfm_fc1's diff 16; the in-place
    # Dropout adds nothing; mfm_fc1: the slices' diffs 2 x 16; slice_fc1: fc1's 32; fc1:
    # weights' 1,024 + bias' 32 + pool1's 128; pool1: mfm1's 512; mfm1: 2 x 512; slice1:
    # conv1's 1,024; conv1: weights' 144 + bias' 16 + the image's 256 (force_backward).
    assert [(layer.name, layer.bwd_alloc) for layer in memory.layers] == [
        ("input", 0), ("conv1", 416), ("slice1", 1024), ("mfm1", 1024), ("pool1", 512), ("fc1", 1184),
        ("slice_fc1", 32), ("mfm_fc1", 32), ("drop1", 0), ("fc2", 88),
    ]  # fmt: skip
    assert (memory.heap_init, memory.heap_forward, memory.heap_backward, memory.total_bytes) == (1856, 6012, 4312, 12180)


def test_the_same_net_in_train_allocates_the_same_bytes():
    test, train = (analyze(str(NET), Options(device="cpu", phase=phase)).nets[0].memory for phase in ("TEST", "TRAIN"))
    assert [layer.bwd_alloc for layer in test.layers] == [layer.bwd_alloc for layer in train.layers]


def test_without_force_backward_a_test_net_runs_forward_only(tmp_path):
    memory = analyze(str(without_force_backward(tmp_path)), Options(device="cpu", phase="TEST")).nets[0].memory
    assert (memory.heap_backward, memory.total_bytes) == (0, 7868)


def test_the_test_schedule_has_a_backward_step_per_layer():
    phase = optimize(str(NET), Options(device="cpu", phase="TEST")).phases[0]
    layers = phase.shaped.graph.layers
    assert [layers[step.layer].name for step in phase.schedule.steps if step.kind == "backward"] == [
        "fc2", "drop1", "mfm_fc1", "slice_fc1", "fc1", "pool1", "mfm1", "slice1", "conv1",
    ]  # fmt: skip


def test_the_test_plan_holds_for_backward_relabelled_train_or_as_it_is(tmp_path):
    plan = tmp_path / "plan.json"
    assert run("optimize", NET, "--device", "cpu", "--plan-json", plan).exit_code == 0
    document = json.loads(plan.read_text())
    assert [entry["phase"] for entry in document["phases"]] == ["TEST"]
    # The TRAIN plan's figures (the same run): the fork's own optimizer frees a layer's
    # inputs after its Forward outside TRAIN, so its plan does not hold for this Backward.
    (entry,) = document["phases"]
    assert entry["bytes"] == {"stock": 12180, "fork": 8692, "planned": 9716, "lower_bound": 9716, "prefetch": 0}
    assert (entry["fork_plan_safe"], entry["peak"]["at"]) == (False, "backward mfm1")
    assert run("verify", NET, plan).exit_code == 0
    for entry in document["phases"]:
        entry["phase"] = entry["made_for"]["phase"] = "TRAIN"
    plan.write_text(json.dumps(document))
    result = run("verify", NET, plan)
    assert result.exit_code == 0 and result.output.splitlines()[0] == f"{plan}: TRAIN, batch 1: the table is safe (1 slot)"


def _lightened_cnn_b() -> Path | None:
    """happynear's LightenedCNN_B deploy (DeepVisualization FaceVis), where ../shared/models has it."""
    manifest = SHARED / "models" / "MANIFEST.tsv"
    if not manifest.is_file():
        return None
    with manifest.open(newline="") as handle:
        rows = [row for row in csv.DictReader(handle, delimiter="\t") if "LightenedCNN_B" in row["relative_path"]]
    return SHARED / "models" / rows[0]["relative_path"] if rows else None


@pytest.mark.skipif(_lightened_cnn_b() is None, reason="LightenedCNN_B is not in ../shared/models")
def test_lightened_cnn_b_deploy_plan_verifies_clean_in_test_and_relabelled_train():
    net = _lightened_cnn_b()
    phase = optimize(str(net), Options(phase="TEST"), OptimizeSettings()).phases[0]
    assert verify_plan_on(phase.schedules, phase.plan_data) == []
    train = optimize(str(net), Options(phase="TRAIN"), OptimizeSettings()).phases[0]
    assert verify_plan_on(train.schedules, phase.plan_data) == []


def test_a_test_net_with_force_backward_may_recompute_and_its_plan_verifies():
    net = FIXTURES / "plan" / "recompute_resnet.prototxt"  # force_backward: true
    phase = optimize(str(net), Options(device="cpu", phase="TEST"), OptimizeSettings(recompute="sqrt")).phases[0]
    layers = phase.shaped.graph.layers
    assert [layers[entry.layer].name for entry in phase.recomputed] == ["pool", "conv3", "bn3", "scale3", "relu3", "conv1", "bn1", "scale1", "relu1", "conv2", "bn2", "scale2", "relu2"]
    assert not any(entry.restore_params for entry in phase.recomputed)  # BatchNorm in TEST uses its stored statistics
    assert verify_plan_on(phase.schedules, phase.plan_data) == []


def test_a_solvers_test_net_runs_forward_only_even_with_force_backward(tmp_path):
    # Solver::Test runs each test net's Forward only (BVLC solver.cpp): force_backward gives
    # it a Backward that never runs, so the solver's TEST net is counted as without it.
    solver = tmp_path / "solver.prototxt"
    solver.write_text(f'net: "{NET}"\ntest_iter: 1\ntest_interval: 10\nbase_lr: 0.01\nlr_policy: "fixed"\nmax_iter: 10\n')
    from_solver = analyze(str(solver), Options(device="cpu", phase="TEST")).nets[0]
    assert from_solver.role == "test"
    assert (from_solver.memory.heap_backward, from_solver.memory.total_bytes) == (0, 7868)
    on_card, alone = (analyze(str(net), Options(device="gpu", phase="TEST")).nets[0] for net in (solver, without_force_backward(tmp_path)))
    assert on_card.figures == alone.figures

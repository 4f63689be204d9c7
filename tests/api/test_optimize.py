"""`caffemem optimize` and `caffemem verify`: plans are safe, never below the lower bound,
written into the prototxt atomically, and a broken plan is caught."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from conftest import FIXTURES
from google.protobuf import text_format

from caffemem.api.analyze import Options, analyze
from caffemem.api.optimize import OptimizeSettings, optimize
from caffemem.cli import main
from caffemem.plan.verify import PlanData, verify_plan
from caffemem.report.document import to_json
from caffemem.schema import caffe_pb2

LENET = str(FIXTURES / "examples" / "lenet_train.prototxt")


def run(*args):
    return CliRunner().invoke(main, list(args))


@pytest.fixture(scope="module")
def lenet():
    return optimize(LENET, Options(), OptimizeSettings())


def test_plans_both_phases_of_a_net_that_trains(lenet):
    assert [p.phase for p in lenet.phases] == ["TRAIN", "TEST"]


def test_every_plan_is_safe_and_not_below_the_lower_bound(lenet):
    for phase in lenet.phases:
        assert verify_plan(phase.schedule, phase.plan_data) == []
        assert phase.lower_bound <= phase.planned.heap_total <= phase.stock.heap_total


def test_plan_is_no_larger_than_the_forks(lenet):
    for phase in lenet.phases:
        assert phase.planned.heap_total <= phase.fork.heap_total


def test_test_phase_of_a_chain_reaches_the_lower_bound(lenet):
    test = lenet.phases[1]
    # A chain in TEST needs, at most, one layer's input and output at once.
    assert test.planned.heap_total == test.lower_bound


def test_whole_slot_strategies_keep_every_member_at_offset_zero():
    result = optimize(LENET, Options(phase="TEST"), OptimizeSettings(strategy="best-fit"))
    assert {offset for _, _, _, offset in result.phases[0].plan_data.assign} == {0}


def test_slot_smaller_than_a_member_is_caught(lenet):
    phase = lenet.phases[0]
    slots = dict(phase.plan_data.slot_bytes)
    biggest = max(slots, key=slots.get)
    slots[biggest] -= 4
    violations = verify_plan(phase.schedule, PlanData(slots, phase.plan_data.assign))
    assert violations and "slot" in violations[0].message and "has" in violations[0].message


def test_two_live_blobs_in_one_slot_are_caught(lenet):
    phase = lenet.phases[1]
    # conv1 is still read by pool1 when pool1 writes: both in one slot overwrites conv1.
    assign = [(b, k, s, 0) if b in ("conv1", "pool1") and k == "data" else (b, k, s, o) for b, k, s, o in phase.plan_data.assign]
    violations = verify_plan(phase.schedule, PlanData(phase.plan_data.slot_bytes, tuple(assign)))
    assert any(v.step_name == "forward pool1" and v.blob == "pool1" and "over 'conv1'" in v.message for v in violations)


def test_a_blob_read_after_another_overwrote_it_is_caught(lenet):
    phase = lenet.phases[0]
    # TRAIN: conv2's Backward reads pool1's data, long after conv2 and fc1 (which live
    # there in the plan) are written in Forward: moving pool1 there loses its value.
    where = {b: (s, o) for b, k, s, o in phase.plan_data.assign if k == "data"}
    assign = [(b, k, *where["fc1"]) if b == "pool1" and k == "data" else (b, k, s, o) for b, k, s, o in phase.plan_data.assign]
    violations = verify_plan(phase.schedule, PlanData(phase.plan_data.slot_bytes, tuple(assign)))
    assert any(v.blob == "pool1" and v.step_name == "backward conv2" and "overwrote" in v.message for v in violations)


def test_optimize_writes_mem_param_and_the_result_still_analyses_the_same(tmp_path):
    out = tmp_path / "planned.prototxt"
    result = run("optimize", LENET, "-o", str(out))
    assert result.exit_code == 0, result.output
    net = text_format.Parse(out.read_text(), caffe_pb2.NetParameter())
    assert net.mem_param.optimize_train and net.mem_param.optimize_test
    assert {slot.phase for slot in net.mem_param.slot} == {caffe_pb2.TRAIN, caffe_pb2.TEST}
    before, after = to_json(analyze(LENET)), to_json(analyze(str(out)))
    # The same net, now stated as the patched Caffe runs its table (stock Caffe's figure kept beside it).
    assert before["blobs"] == after["blobs"] and before["total_bytes"] == after["mem_param"]["stock_bytes"] > after["total_bytes"]
    assert out.read_text().startswith(open(LENET).read())


def test_fork_target_writes_only_the_forks_fields(tmp_path):
    out = tmp_path / "fork.prototxt"
    assert run("optimize", LENET, "-o", str(out), "--target", "fork", "--exclude-blob", "fc1").exit_code == 0
    net = text_format.Parse(out.read_text(), caffe_pb2.NetParameter())
    assert len(net.mem_param.slot) == 0 and list(net.mem_param.exclude_blob) == ["fc1"]


def test_excluded_blob_keeps_its_own_storage():
    result = optimize(LENET, Options(phase="TEST"), OptimizeSettings(exclude=("conv1",)))
    assert "conv1" not in {blob for blob, _, _, _ in result.phases[0].plan_data.assign}


def test_unknown_excluded_blob_is_an_error():
    result = run("optimize", LENET, "--exclude-blob", "nope")
    assert result.exit_code == 2 and "--exclude-blob nope" in result.output


def test_refuses_to_overwrite_its_input(tmp_path):
    copy = tmp_path / "net.prototxt"
    copy.write_text(open(LENET).read())
    result = run("optimize", str(copy), "-o", str(copy))
    assert result.exit_code == 2 and "--in-place-file" in result.output


def test_refuses_to_replan_without_force(tmp_path):
    out = tmp_path / "planned.prototxt"
    run("optimize", LENET, "-o", str(out))
    assert run("optimize", str(out)).exit_code == 2
    assert run("optimize", str(out), "--force").exit_code == 0


def test_verify_command_accepts_the_plan_it_wrote_and_rejects_a_broken_one(tmp_path):
    plan = tmp_path / "plan.json"
    assert run("optimize", LENET, "--phase", "TEST", "--plan-json", str(plan)).exit_code == 0
    assert run("verify", LENET, str(plan)).exit_code == 0
    document = json.loads(plan.read_text())
    for slot in document["plan"]["slots"]:  # every member still starts inside its slot, but no longer fits
        slot["bytes"] = 4 + max(a.get("offset", 0) for a in document["plan"]["assign"] if a["slot"] == slot["id"])
    document["phases"][0]["plan"] = document["plan"]
    plan.write_text(json.dumps(document))
    result = run("verify", LENET, str(plan))
    assert result.exit_code == 1 and "slot" in result.output

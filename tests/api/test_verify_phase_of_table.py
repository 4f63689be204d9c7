"""`caffemem verify` checks each table for the phase its own entries name (a slot's
``phase``, a plan JSON entry's ``phase``), never for the phase its made-for record says:
a record that disagrees with its table is refused, so a one-word edit of the record
cannot make an unsafe table pass (issue 31, item 4)."""

from __future__ import annotations

import json
import re

import pytest
from click.testing import CliRunner
from conftest import FIXTURES

from caffemem.cli import main
from caffemem.plan.record import TAG

NET = FIXTURES / "plan" / "recompute_resnet.prototxt"


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def _member(blob: str, kind: str) -> re.Pattern:
    return re.compile(r'(blob: "' + blob + r'"\s+kind: "' + kind + r'"\s+offset: )(\d+)')


def unsafe(text: str) -> str:
    """The table with norm's diff given the offset of res2's diff (both live in Backward norm)."""
    offset = _member("res2", "diff").search(text).group(2)
    return _member("norm", "diff").sub(lambda m: m.group(1) + offset, text, count=1)


def unsafe_train_table(tmp_path) -> str:
    out = tmp_path / "out.prototxt"
    assert run("optimize", NET, "--device", "cpu", "-o", out).exit_code == 0
    text = unsafe(out.read_text())
    out.write_text(text)
    return str(out)


def relabel_record(path: str, old: str, new: str) -> int:
    """The TRAIN record's JSON phase changed from ``old`` to ``new``; its line number."""
    lines = open(path).read().split("\n")
    (number,) = [i for i, line in enumerate(lines, 1) if f"# {TAG} TRAIN:" in line]
    lines[number - 1] = lines[number - 1].replace(f'"phase": "{old}"', f'"phase": "{new}"')
    with open(path, "w") as handle:
        handle.write("\n".join(lines))
    return number


def test_the_unsafe_train_table_has_two_violations(tmp_path):
    out = unsafe_train_table(tmp_path)
    result = run("verify", out)
    assert result.exit_code == 1
    assert result.output.splitlines()[:2] == [
        f"{out}: TRAIN, batch 4: the table is not safe: 2 violations in the replay of its 1 slot",
        f"{out}: TEST, batch 4: the table is safe (1 slot)",
    ]


def test_a_record_that_names_another_phase_than_its_table_is_refused(tmp_path):
    out = unsafe_train_table(tmp_path)
    number = relabel_record(out, "TRAIN", "TEST")
    message = f"{out}:{number}: the '{TAG} TRAIN' record says phase TEST, but it stands for the TRAIN table: a table is checked for the phase its own entries name; rerun `caffemem optimize`"
    for flags in ((), ("--phase", "TRAIN"), ("--phase", "TEST")):
        result = run("verify", out, *flags)
        assert (result.exit_code, result.output.strip()) == (2, f"caffemem: error: {message}"), flags


def test_a_record_moved_to_the_other_phase_leaves_the_table_checked_for_its_own(tmp_path):
    out = tmp_path / "out.prototxt"
    assert run("optimize", NET, "--device", "cpu", "--phase", "TRAIN", "-o", out).exit_code == 0
    out.write_text(unsafe(out.read_text()).replace(f"# {TAG} TRAIN:", f"# {TAG} TEST:").replace('"phase": "TRAIN"', '"phase": "TEST"'))
    result = run("verify", out)
    assert result.exit_code == 1
    assert result.output.splitlines()[0] == f"{out}: TRAIN, batch 4: the table is not safe: 2 violations in the replay of its 1 slot"
    assert f"{out}: TRAIN: note: the plan records no run it was made for: checked at the file's own shapes and the flags given" in result.output.splitlines()


def test_two_records_for_one_phase_are_refused(tmp_path):
    out = unsafe_train_table(tmp_path)
    text = open(out).read().replace(f"# {TAG} TRAIN:", f"# {TAG} TEST:").replace('"phase": "TRAIN"', '"phase": "TEST"')
    with open(out, "w") as handle:
        handle.write(text)
    lines = text.split("\n")
    second = [i for i, line in enumerate(lines, 1) if f"# {TAG} TEST:" in line][1]
    result = run("verify", out)
    assert (result.exit_code, result.output.strip()) == (2, f"caffemem: error: {out}:{second}: the file gives a '{TAG} TEST' record twice: rerun `caffemem optimize`")


def test_a_plan_jsons_record_that_names_another_phase_is_refused(tmp_path):
    plan = tmp_path / "plan.json"
    assert run("optimize", NET, "--device", "cpu", "--plan-json", plan).exit_code == 0
    document = json.loads(plan.read_text())
    train = next(entry for entry in document["phases"] if entry["phase"] == "TRAIN")
    assign = {(a["blob"], a["kind"]): a for a in train["plan"]["assign"]}
    assign[("norm", "diff")]["offset"] = assign[("res2", "diff")]["offset"]
    plan.write_text(json.dumps(document))
    result = run("verify", NET, plan)
    assert result.exit_code == 1 and result.output.splitlines()[0] == f"{plan}: TRAIN, batch 4: the table is not safe: 2 violations in the replay of its 1 slot"
    train["made_for"]["phase"] = "TEST"
    plan.write_text(json.dumps(document))
    for flags in ((), ("--phase", "TRAIN")):
        result = run("verify", NET, plan, *flags)
        assert (result.exit_code, result.output.strip()) == (
            2,
            f"caffemem: error: {plan}: the made_for record of the TRAIN entry says phase TEST, but it stands for the TRAIN table: a table is checked for the phase its own entries name; rerun `caffemem optimize`",
        ), flags


def test_a_plan_json_that_gives_one_phase_twice_is_refused(tmp_path):
    plan = tmp_path / "plan.json"
    assert run("optimize", NET, "--device", "cpu", "--plan-json", plan).exit_code == 0
    document = json.loads(plan.read_text())
    document["phases"][1]["phase"] = document["phases"][0]["phase"]
    plan.write_text(json.dumps(document))
    result = run("verify", NET, plan)
    assert (result.exit_code, result.output.strip()) == (2, f"caffemem: error: {plan}: not a caffemem plan: phase TRAIN is given twice in 'phases'")


@pytest.mark.gpu_default
def test_a_violation_both_runs_of_a_gpu_plan_meet_is_reported_once(tmp_path):
    # A GPU plan is checked on the card's run and on the CPU run of the same net: the
    # same step over the same bytes is one violation, not two.
    out = tmp_path / "out.prototxt"
    assert run("optimize", NET, "--phase", "TRAIN", "-o", out).exit_code == 0
    out.write_text(unsafe(out.read_text()))
    result = run("verify", out)
    assert f"{out}: TRAIN: planned for batch 4, float32, gpu mode, cudnn engine" in result.output.splitlines()
    assert result.exit_code == 1
    assert result.output.splitlines()[0] == f"{out}: TRAIN, batch 4: the table is not safe: 2 violations in the replay of its 1 slot"
    assert len([line for line in result.output.splitlines() if ": step " in line]) == 2


def test_a_bare_plan_is_checked_for_the_phase_it_names(tmp_path):
    net = tmp_path / "net.prototxt"  # without force_backward: its TEST run has no Backward
    net.write_text(NET.read_text().replace("force_backward: true\n", ""))
    plan = tmp_path / "plan.json"
    assert run("optimize", net, "--device", "cpu", "--phase", "TRAIN", "--plan-json", plan).exit_code == 0
    document = json.loads(plan.read_text())
    bare = {"phase": document["phase"], "plan": document["plan"]}  # a one-phase document's own top-level copy
    assign = {(a["blob"], a["kind"]): a for a in bare["plan"]["assign"]}
    assign[("norm", "diff")]["offset"] = assign[("res2", "diff")]["offset"]
    plan.write_text(json.dumps(bare))
    result = run("verify", net, plan)
    assert result.exit_code == 1 and result.output.splitlines()[0] == f"{plan}: TRAIN, batch 4: the table is not safe: 2 violations in the replay of its 1 slot"
    result = run("verify", net, plan, "--phase", "TEST")
    assert (result.exit_code, result.output.strip()) == (2, f"caffemem: error: {plan}: the plan has no phase TEST (it is TRAIN's)")

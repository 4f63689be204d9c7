"""Issue 26, the second hostile round: each defect the campaign found, as the reproduction
it was filed with (items 1, 3, 4 and 7), and the contract every run keeps whatever the
environment does to it — exit 0, 1, 2 or 130 only, one line on stderr, never a traceback,
nothing written before the command has succeeded."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from click.testing import CliRunner
from conftest import FIXTURES, REPO, SHARED, needs_shared

from caffemem.cli import main

LENET = FIXTURES / "examples" / "lenet_train.prototxt"
FORK_DEFECT_NET = FIXTURES / "plan" / "fork_defect.prototxt"  # docs/fork-memopt.md §10
HERE = {**os.environ, "PYTHONPATH": str(REPO), "CAFFEMEM_DEVICE": "cpu"}  # this checkout's caffemem, whatever the folder


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def one_error_line(result) -> str:
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.output, result.output
    return lines[0]


def shell(command: str, cwd, env=None, **kwargs) -> subprocess.CompletedProcess:
    """``caffemem`` as a user's shell runs it (python -m caffemem, this checkout)."""
    command = command.replace("caffemem ", f"{sys.executable} -m caffemem ", 1)
    return subprocess.run(command, shell=True, executable="/bin/bash", cwd=cwd, env=env or HERE, capture_output=True, **kwargs)


def stderr_line(done: subprocess.CompletedProcess) -> str:
    lines = done.stderr.decode("utf-8", "replace").splitlines()
    assert len(lines) == 1 and "Traceback" not in lines[0], lines
    return lines[0]


# ----------------------------------------------------------------------------- 1. an unsafe plan written with exit 0


def test_strategy_fork_on_a_net_the_fork_corrupts_is_a_finding_and_writes_nothing(tmp_path):
    # The fork's own optimizer lets 'score' overwrite the split's first copy before
    # ip_ip_0_split's backward reads it (TRAIN step 8): its plan fails the verifier, and
    # --strategy fork has no other plan to offer.
    out, plan = tmp_path / "o.prototxt", tmp_path / "p.json"
    result = run("optimize", FORK_DEFECT_NET, "--strategy", "fork", "-o", out, "--plan-json", plan)
    assert result.exit_code == 1
    line = one_error_line(result)
    assert "TRAIN net: the fork's plan is unsafe" in line and "reads bytes that 'score' overwrote" in line and "--strategy auto" in line
    assert list(tmp_path.iterdir()) == []


def test_strategy_fork_where_the_forks_plan_is_safe_still_writes_it(tmp_path):
    out, plan = tmp_path / "o.prototxt", tmp_path / "p.json"
    assert run("optimize", LENET, "--strategy", "fork", "-o", out, "--plan-json", plan).exit_code == 0
    assert run("verify", out, plan).exit_code == 0


@needs_shared
@pytest.mark.parametrize("net", ["tsn_ucf101/tsn_bn_inception_rgb_train_val.prototxt", "finetune_flickr_style/train_val.prototxt"])
def test_every_written_fork_plan_of_the_real_nets_passes_verify(tmp_path, net):
    path = SHARED / "models" / net
    if not path.is_file():
        pytest.skip(f"{net} is not in ../shared")
    out, plan = tmp_path / "o.prototxt", tmp_path / "p.json"
    result = run("optimize", path, "--strategy", "fork", "-o", out, "--plan-json", plan)
    assert result.exit_code in (0, 1), result.output
    if result.exit_code == 0:
        assert run("verify", out, plan).exit_code == 0
    else:
        assert not out.exists() and not plan.exists()


# ----------------------------------------------------------------------------- 3. one output over another


@pytest.mark.parametrize("second", ["--plan-json", "--html"])
def test_two_outputs_naming_one_file_are_refused_before_anything_is_written(tmp_path, second):
    out = tmp_path / "out"
    result = run("optimize", LENET, "-o", out, second, out)
    assert result.exit_code == 2 and f"{second} names the same file as -o" in one_error_line(result)
    assert list(tmp_path.iterdir()) == []


def test_a_link_to_another_output_is_that_output(tmp_path):
    (tmp_path / "plan.json").write_text("{}")
    os.symlink(tmp_path / "plan.json", tmp_path / "alias")
    result = run("optimize", LENET, "--plan-json", tmp_path / "plan.json", "--html", tmp_path / "alias")
    assert result.exit_code == 2 and "--html names the same file as --plan-json" in one_error_line(result)
    assert (tmp_path / "plan.json").read_text() == "{}"


def test_check_refuses_a_report_over_its_baseline(tmp_path):
    baseline = tmp_path / "b.json"
    result = run("check", LENET, "--baseline", baseline, "--update-baseline", "--report", f"json:{baseline}")
    assert result.exit_code == 2 and "--report names the same file as --baseline" in one_error_line(result)
    assert not baseline.exists()

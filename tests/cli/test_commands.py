"""The command line: every command is attached to `caffemem` and to `python -m caffemem`,
answers --help, and takes back every name the reports print."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from click.testing import CliRunner
from conftest import FIXTURES

from caffemem.cli import main
from caffemem.plan.strategies import STRATEGY_NAMES

LENET = str(FIXTURES / "examples" / "lenet_train.prototxt")
COMMANDS = ("analyze", "optimize", "verify", "check", "fit", "patch")


def test_python_dash_m_caffemem_lists_every_command():
    done = subprocess.run([sys.executable, "-m", "caffemem", "--help"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    listed = {line.split()[0] for line in done.stdout.split("Commands:")[1].splitlines() if line.strip()}
    assert set(COMMANDS) <= listed


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_answers_help(command):
    result = CliRunner().invoke(main, [command, "--help"])
    assert result.exit_code == 0, result.output
    assert f"Usage: main {command}" in result.output or f"Usage: caffemem {command}" in result.output
    assert "Examples:" in result.output and f"caffemem {command} " in result.output.split("Examples:")[1]
    assert "Exit codes: 0 ok, 1 a finding" in result.output


@pytest.mark.parametrize("strategy", STRATEGY_NAMES)
def test_optimize_accepts_every_strategy_name(strategy):
    result = CliRunner().invoke(main, ["optimize", LENET, "--phase", "TEST", "--strategy", strategy, "--json"])
    assert result.exit_code == 0, result.output


def test_the_strategy_a_report_names_can_be_passed_back():
    first = json.loads(CliRunner().invoke(main, ["optimize", LENET, "--phase", "TRAIN", "--json"]).output)
    chosen = first["phases"][0]["strategy"]
    assert chosen in STRATEGY_NAMES
    again = json.loads(CliRunner().invoke(main, ["optimize", LENET, "--phase", "TRAIN", "--json", "--strategy", chosen]).output)
    assert again["phases"][0]["bytes"] == first["phases"][0]["bytes"]


def test_optimize_says_the_file_it_wrote_needs_the_patched_caffe(tmp_path):
    # Issue 34: stock Caffe refuses mem_param, and optimize never said so.
    out = tmp_path / "out.prototxt"
    result = CliRunner().invoke(main, ["optimize", LENET, "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert " ".join(result.output.split()).endswith(f"wrote {out}: run it with a Caffe patched by `caffemem patch CAFFE_DIR` (stock Caffe refuses mem_param)")
    fork = CliRunner().invoke(main, ["optimize", LENET, "--target", "fork", "-o", str(tmp_path / "fork.prototxt")])
    assert " ".join(fork.output.split()).endswith("run it with the memory-multiloading fork (yjxiong/caffe), whose own optimizer plans it (stock Caffe refuses mem_param)")


def test_optimizes_headline_names_the_fork():
    result = CliRunner().invoke(main, ["optimize", LENET, "--phase", "TEST"])
    assert " ".join(result.output.split()[:40]).count("and the memory-multiloading fork's (yjxiong/caffe) ") == 1

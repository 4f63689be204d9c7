"""`caffemem check` in a model repository with its own settings: a caffemem.toml (or
pyproject.toml's [tool.caffemem]) gives each net, by glob, its inputs, phase, stages and
budget, so one run checks files whose data blobs share a name but not a shape.

The repository is fixtures/check_config: digits/ (a Data layer whose LMDB holds 1x28x28
images), cifar/ (a Data layer cropping colour images to 24x24: only the channels are
open), features/ (an Input layer without a shape) and caffemem.toml.
"""

from __future__ import annotations

import json
import os
import subprocess
import shlex
import shutil
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from conftest import FIXTURES, REPO

import caffemem
from caffemem.api.analyze import Options
from caffemem.api.config import find_config, read_config
from caffemem.cli import main
from caffemem.errors import CaffememError

MIB = 1024 * 1024
# What stock Caffe allocates (CPU mode) for each net at the shapes the config gives.
ROWS = [
    ("cifar/train_val.prototxt", "TRAIN", 32, 4_276_884, 8 * MIB),
    ("cifar/train_val.prototxt", "TEST", 50, 3_668_108, 8 * MIB),
    ("digits/train_val.prototxt", "TRAIN", 64, 3_805_204, 64 * MIB),
    ("digits/train_val.prototxt", "TEST", 100, 3_357_420, 64 * MIB),
    ("features/deploy.prototxt", "TEST", 16, 312_500, 64 * MIB),
]


@pytest.fixture
def repo(tmp_path, monkeypatch) -> Path:
    """A copy of fixtures/check_config, with a .git folder (its root) and as the working directory."""
    root = tmp_path / "repo"
    shutil.copytree(FIXTURES / "check_config", root)
    (root / ".git").mkdir()
    monkeypatch.chdir(root)
    return root


def check(*args: str):
    return CliRunner().invoke(main, ["check", "--device", "cpu", "--format", "json", "--jobs", "1", *args])


def rows(output: str) -> list[tuple]:
    return [(r["file"], r["phase"], r["batch"], r["bytes"], r["budget"]) for r in json.loads(output)["results"]]


def test_every_net_gets_its_own_inputs_phase_and_budget_from_the_config(repo):
    result = check("cifar", "digits", "features")
    assert result.exit_code == 0, result.output
    assert rows(result.stdout) == ROWS


def test_the_configs_figures_are_those_of_analyze_with_the_same_inputs(repo):
    cifar = caffemem.analyze("cifar/train_val.prototxt", phase="TRAIN", inputs={"data": (-1, 3, -1, -1)}).nets[0]
    assert cifar.blobs["data"] == (32, 3, 24, 24) and cifar.figures.total_bytes == ROWS[0][3]


def test_without_the_config_the_same_run_asks_for_the_inputs(repo):
    (repo / "caffemem.toml").unlink()
    result = check("cifar", "digits", "features")
    assert result.exit_code == 2
    assert all(r["status"] == "error" and "--input data=" in r["message"] for r in json.loads(result.stdout)["results"])


def test_the_config_is_found_from_a_subfolder_up_to_the_repository_root(repo, monkeypatch):
    monkeypatch.chdir(repo / "digits")
    assert find_config() == str(repo / "caffemem.toml")
    assert find_config(str(repo.parent)) is None  # above the root: not this repository's


def test_pyproject_tool_caffemem_is_read_like_caffemem_toml(repo):
    text = (repo / "caffemem.toml").read_text()
    (repo / "caffemem.toml").unlink()
    (repo / "pyproject.toml").write_text('[project]\nname = "models"\n\n[tool.caffemem]\n' + text.replace("[[nets]]", "[[tool.caffemem.nets]]"))
    assert find_config() == str(repo / "pyproject.toml")
    result = check("cifar", "digits", "features")
    assert result.exit_code == 0, result.output
    assert rows(result.stdout) == ROWS


def test_flags_on_the_command_line_win_over_the_config(repo):
    result = check("features", "--input", "data=4,512", "--budget", "1MiB")
    assert result.exit_code == 0, result.output
    ((_, phase, batch, _, budget),) = rows(result.stdout)
    assert (phase, batch, budget) == ("TEST", 4, MIB)


def test_a_per_glob_budget_fails_only_the_nets_it_matches(repo):
    (repo / "caffemem.toml").write_text((repo / "caffemem.toml").read_text().replace('budget = "8MiB"', 'budget = "4MiB"'))
    result = check("cifar", "digits")
    assert result.exit_code == 1
    assert [r["status"] for r in json.loads(result.stdout)["results"]] == ["over-budget", "pass", "pass", "pass"]


def test_an_explicit_config_file_is_used_from_anywhere(repo, monkeypatch):
    shutil.move(repo / "caffemem.toml", repo.parent / "settings.toml")
    (repo.parent / "settings.toml").write_text((repo.parent / "settings.toml").read_text().replace('glob = "', 'glob = "repo/'))
    result = check("features", "--config", str(repo.parent / "settings.toml"))
    assert result.exit_code == 0, result.output
    assert rows(result.stdout) == [ROWS[-1]]


def test_a_mistake_in_the_config_is_one_line_naming_the_file(repo):
    (repo / "caffemem.toml").write_text('[[nets]]\nglob = "digits/*"\ninput = { data = "1,1,28,28" }\n')
    result = CliRunner().invoke(main, ["check", "digits"])
    assert result.exit_code == 2
    assert result.output == f"caffemem: error: {repo / 'caffemem.toml'}: [[nets]] entry 1: unknown key 'input' (expected budget, glob, inputs, override-inputs, phase, stages)\n"


def test_a_bad_shape_in_the_config_is_refused_when_read(repo):
    (repo / "caffemem.toml").write_text('[[nets]]\nglob = "digits/*"\ninputs = { data = "1,x,28,28" }\n')
    with pytest.raises(CaffememError, match=r"\[\[nets\]\] entry 1: 'inputs': --input '.*': expected NAME=d0,d1,..."):
        read_config(str(repo / "caffemem.toml"))


def test_stages_from_the_config_select_the_layers(repo):
    net = repo / "features" / "deploy.prototxt"
    net.write_text(net.read_text() + 'layer { name: "big" type: "InnerProduct" bottom: "fc1" top: "big" include { stage: "wide" } inner_product_param { num_output: 4096 } }\n')
    assert rows(check("features").stdout)[0][3] == ROWS[-1][3]  # without the stage, no "big"
    (repo / "caffemem.toml").write_text((repo / "caffemem.toml").read_text() + 'stages = ["wide"]\n')  # in the features entry
    staged = caffemem.analyze(str(net), Options(stages=("wide",), inputs={"data": (16, 512)})).nets[0]
    assert "big" in staged.blobs and rows(check("features").stdout)[0][3] == staged.figures.total_bytes


def test_the_action_passes_its_config_input(repo):
    step = yaml.safe_load((REPO / "action.yml").read_text())["runs"]["steps"][-1]
    assert step["env"]["CAFFEMEM_CONFIG"] == "${{ inputs.config }}" and '${CAFFEMEM_CONFIG:+--config "$CAFFEMEM_CONFIG"}' in step["run"]
    assert "working-directory" not in step  # empty: the run starts at the checkout's root, where caffemem.toml is found


def test_the_pre_commit_hook_gives_the_changed_nets_their_config_inputs(repo):
    (hook,) = yaml.safe_load((REPO / ".pre-commit-hooks.yaml").read_text())
    program, *arguments = shlex.split(hook["entry"])  # pre-commit runs it at the root, with the changed files
    result = CliRunner().invoke(main, [*arguments, "--device", "cpu", "--format", "json", "--jobs", "1", "digits/train_val.prototxt", "features/deploy.prototxt"])
    assert result.exit_code == 0, result.output
    assert rows(result.stdout) == ROWS[2:]


def test_a_budget_flag_that_replaces_the_configs_budgets_says_so_in_every_report(repo):
    # Issue 34: the README workflow's `budget:` silently replaced caffemem.toml's budgets.
    result = CliRunner().invoke(main, ["check", "--device", "cpu", "--jobs", "1", "--budget", "100MiB", "--format", "markdown", "digits", "cifar"])
    note = "--budget 100.00 MiB replaces the budgets caffemem.toml gives 2 of the files checked (8.00 MiB to 64.00 MiB): leave it out to hold each file to its own"
    assert result.exit_code == 0 and f"> ⚠️ {note}" in result.stdout.splitlines()
    assert json.loads(check("--budget", "100MiB", "digits", "cifar").stdout)["notes"] == [note]
    assert f"::warning title=caffemem%3A note::{note}" in CliRunner().invoke(main, ["check", "--device", "cpu", "--jobs", "1", "--budget", "100MiB", "--format", "github", "digits", "cifar"]).stdout
    assert json.loads(check("--budget", "64MiB", "digits").stdout)["notes"] == []  # the same budget: nothing replaced


def test_the_action_installs_the_extras_it_is_given():
    action = yaml.safe_load((REPO / "action.yml").read_text())
    install = action["runs"]["steps"][2]
    assert action["inputs"]["extras"]["default"] == ""
    assert install["env"] == {"CAFFEMEM_EXTRAS": "${{ inputs.extras }}"}
    assert "replaces the per-net budgets" in action["inputs"]["budget"]["description"]
    for extras, installed in (("", "/action"), ("data,fork", "/action[data,fork]")):
        script = install["run"].replace("python -m pip install --quiet", "echo")
        done = subprocess.run(["bash", "-eo", "pipefail", "-c", script], env={"PATH": os.environ["PATH"], "GITHUB_ACTION_PATH": "/action", "CAFFEMEM_EXTRAS": extras}, capture_output=True, text=True)
        assert (done.returncode, done.stdout) == (0, installed + "\n")
    refused = subprocess.run(["bash", "-eo", "pipefail", "-c", install["run"]], env={"PATH": os.environ["PATH"], "GITHUB_ACTION_PATH": "/action", "CAFFEMEM_EXTRAS": "data]; rm -rf ~"}, capture_output=True, text=True)
    assert refused.returncode == 2 and refused.stdout.startswith("::error title=caffemem action::extras")

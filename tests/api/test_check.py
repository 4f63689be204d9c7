"""`caffemem check`, the memory-budget gate: exit codes, baselines, and every output format.

The nets are our own, in fixtures/check: models/ (LeNet with a solver training it, a
ResNet-18 at batch 2 on 64×64 images, a LeNet deploy net in a subfolder, and a file that
is not a net) and bad/ (a typo in a layer, a Data layer that needs --input).  Each test
works in a copy of that folder, so paths in the output are relative and exact.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from conftest import FIXTURES, REPO

from caffemem._version import __version__
from caffemem.api.analyze import Options, analyze
from caffemem.api.check import (
    Baseline,
    CheckSettings,
    Problem,
    change_percent,
    check_file,
    collect_files,
    parse_tolerance,
    problem_of,
)
from caffemem.api.optimize import OptimizeSettings, optimize
from caffemem.cli import main
from caffemem.errors import CaffememError, Location
from caffemem.units import parse_size

# What stock Caffe allocates for each fixture net and phase (the process: train net,
# SGD history and the test net of lenet_solver.prototxt).
LENET_TRAIN, LENET_TEST = 14_668_784, 7_902_828
SOLVER_PROCESS = 22_571_804
RESNET_TRAIN, RESNET_TEST = 111_953_324, 59_622_348
DEPLOY_TEST = 2_006_448


@pytest.fixture
def repo(tmp_path, monkeypatch) -> Path:
    """A model repository: a copy of fixtures/check, and the working directory."""
    root = tmp_path / "repo"
    shutil.copytree(FIXTURES / "check", root)
    monkeypatch.chdir(root)
    return root


def run(*args: str):
    return CliRunner().invoke(main, ["check", *args])


def results(output: str) -> list[tuple]:
    """The JSON format's rows as (file, net, phase, bytes, baseline_bytes, status)."""
    return [(r["file"], r["net"], r["phase"], r["bytes"], r["baseline_bytes"], r["status"]) for r in json.loads(output)["results"]]


def write_baseline(path: Path, nets: dict[str, dict[str, int]], version: str = __version__) -> None:
    document = {"format": 1, "optimized": False, "nets": {file: {key: {"bytes": n, "caffemem": version} for key, n in entries.items()} for file, entries in nets.items()}}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document))


def measured_baseline(**changes: int) -> dict[str, dict[str, int]]:
    """The baseline of every models/ net as measured now, keyed from a `ci/` folder, with
    some figures replaced (`lenet_TRAIN=...`)."""
    nets = {
        "../models/lenet.prototxt": {"TRAIN": LENET_TRAIN, "TEST": LENET_TEST},
        "../models/lenet_solver.prototxt": {"process:TRAIN": SOLVER_PROCESS},
        "../models/resnet18.prototxt": {"TRAIN": RESNET_TRAIN, "TEST": RESNET_TEST},
        "../models/deploy/lenet_deploy.prototxt": {"TEST": DEPLOY_TEST},
    }
    for name, value in changes.items():
        stem, key = name.rsplit("_", 1)
        file = next(f for f in nets if Path(f).stem == stem)
        nets[file][key] = value
    return nets


# ----------------------------------------------------------------------------- flag values


def test_sizes_take_decimal_and_binary_units_as_named():
    assert parse_size("11GiB", "--budget") == 11 * 2**30
    assert parse_size("11GB", "--budget") == 11 * 10**9
    assert parse_size("1.5 MiB", "--budget") == 1_572_864
    assert parse_size("800kb", "--budget") == 800_000
    assert parse_size("4096", "--budget") == parse_size("4096B", "--budget") == 4096


@pytest.mark.parametrize("text", ["11G", "lots", "-1GiB", "1e9", ""])
def test_a_size_without_a_known_unit_is_bad_input(text):
    with pytest.raises(CaffememError, match="expected a size such as 11GiB"):
        parse_size(text, "--budget")


def test_tolerance_is_a_percentage_or_a_fraction():
    assert parse_tolerance("2%") == parse_tolerance("0.02") == 0.02
    assert parse_tolerance("2.5%") == 0.025
    assert parse_tolerance("0%") == 0.0


@pytest.mark.parametrize("text", ["2", "-1%", "two", "nan%"])
def test_a_tolerance_that_could_be_misread_is_bad_input(text):
    with pytest.raises(CaffememError, match="expected a percentage such as 2% or a fraction such as 0.02"):
        parse_tolerance(text)


# ----------------------------------------------------------------------------- files


def test_folders_give_their_prototxt_files_recursively_in_order(repo):
    (repo / "models" / ".hidden").mkdir()
    (repo / "models" / ".hidden" / "skipped.prototxt").write_text("")
    assert collect_files(["models"]) == [
        "models/lenet.prototxt",
        "models/lenet_solver.prototxt",
        "models/resnet18.prototxt",
        "models/deploy/lenet_deploy.prototxt",
    ]


def test_globs_files_and_folders_are_collected_once_each(repo):
    found = collect_files(["models/lenet.prototxt", "models/**/lenet*.prototxt", "models/deploy"])
    assert found == ["models/lenet.prototxt", "models/deploy/lenet_deploy.prototxt", "models/lenet_solver.prototxt"]


def test_a_path_that_names_nothing_is_bad_input(repo):
    (repo / "empty").mkdir()
    assert collect_files(["empty", "nets/*.prototxt"]) == [
        Problem("empty", None, "no *.prototxt file in this folder", "empty", 1),
        Problem("nets/*.prototxt", None, "no file matches this pattern", "nets/*.prototxt", 1),
    ]


# ----------------------------------------------------------------------------- measuring


def test_each_phase_is_measured_as_analyze_measures_it(repo):
    for file, phase, expected in [
        ("models/lenet.prototxt", "TRAIN", LENET_TRAIN),
        ("models/lenet.prototxt", "TEST", LENET_TEST),
        ("models/resnet18.prototxt", "TRAIN", RESNET_TRAIN),
        ("models/resnet18.prototxt", "TEST", RESNET_TEST),
        ("models/deploy/lenet_deploy.prototxt", "TEST", DEPLOY_TEST),
    ]:
        assert analyze(file, Options(phase=phase)).nets[0].memory.total_bytes == expected
    assert analyze("models/lenet_solver.prototxt").process.total_bytes == SOLVER_PROCESS


def test_a_net_that_trains_is_checked_in_both_phases_and_a_deploy_net_in_test(repo):
    result = run("models", "--format", "json")
    assert result.exit_code == 0, result.output
    assert results(result.stdout) == [
        ("models/lenet.prototxt", "net", "TRAIN", LENET_TRAIN, None, "pass"),
        ("models/lenet.prototxt", "net", "TEST", LENET_TEST, None, "pass"),
        ("models/lenet_solver.prototxt", "process", "TRAIN", SOLVER_PROCESS, None, "pass"),
        ("models/resnet18.prototxt", "net", "TRAIN", RESNET_TRAIN, None, "pass"),
        ("models/resnet18.prototxt", "net", "TEST", RESNET_TEST, None, "pass"),
        ("models/deploy/lenet_deploy.prototxt", "net", "TEST", DEPLOY_TEST, None, "pass"),
    ]


def test_phase_test_checks_a_solvers_test_nets_each_on_its_own(repo):
    result = run("models/lenet_solver.prototxt", "models/lenet.prototxt", "--phase", "TEST", "--format", "json")
    assert results(result.stdout) == [
        ("models/lenet_solver.prototxt", "test0", "TEST", LENET_TEST, None, "pass"),
        ("models/lenet.prototxt", "net", "TEST", LENET_TEST, None, "pass"),
    ]


def test_optimized_measures_caffemems_plan(repo):
    planned = {phase: optimize("models/lenet.prototxt", Options(phase=phase), OptimizeSettings()).phases[0].planned.total_bytes for phase in ("TRAIN", "TEST")}
    result = run("models/lenet.prototxt", "models/lenet_solver.prototxt", "--optimized", "--format", "json")
    rows = json.loads(result.stdout)["results"]
    assert [(r["phase"], r["bytes"]) for r in rows[:2]] == [("TRAIN", planned["TRAIN"]), ("TEST", planned["TEST"])]
    assert planned["TRAIN"] < LENET_TRAIN and rows[2]["net"] == "process" and rows[2]["bytes"] < SOLVER_PROCESS
    solver_test = run("models/lenet_solver.prototxt", "--optimized", "--phase", "TEST", "--format", "json")
    assert json.loads(solver_test.stdout)["results"][0]["bytes"] == planned["TEST"]


def test_input_shapes_reach_only_the_files_that_have_that_blob(repo):
    result = run("bad/data_layer.prototxt", "models/lenet.prototxt", "--input", "pixels=64,1,28,28", "--phase", "TRAIN", "--format", "json")
    assert result.exit_code == 0, result.output
    measured = analyze("bad/data_layer.prototxt", Options(phase="TRAIN", inputs={"pixels": (64, 1, 28, 28)})).nets[0].memory.total_bytes
    assert [(r["file"], r["bytes"]) for r in json.loads(result.stdout)["results"]] == [("bad/data_layer.prototxt", measured), ("models/lenet.prototxt", LENET_TRAIN)]


def test_an_error_naming_only_a_layer_points_at_the_layers_line(repo):
    problem = problem_of("bad/broken.prototxt", "TRAIN", CaffememError("too big", Location(file="bad/broken.prototxt", layer="conv1", layer_type="Convolution")))
    assert problem == Problem("bad/broken.prototxt", "TRAIN", "layer 'conv1' (Convolution): too big", "bad/broken.prototxt", 4)


def test_an_error_in_a_solvers_net_points_at_that_net(repo):
    (repo / "bad" / "solver.prototxt").write_text('net: "broken.prototxt"\nbase_lr: 0.01\n')
    (problem,) = check_file("bad/solver.prototxt", CheckSettings())
    assert (problem.at_file, problem.line) == ("bad/broken.prototxt", 9)
    assert problem.message == "bad/broken.prototxt:9: layer 'conv1': unknown field 'num_outputs' in ConvolutionParameter (did you mean 'num_output'? if it is your fork's field, --caffe-root DIR reads the fork's caffe.proto; --lenient skips unknown fields)"


# ----------------------------------------------------------------------------- budget


def test_every_net_within_the_budget_passes(repo):
    result = run("models", "--budget", "107MiB", "--format", "json")
    assert result.exit_code == 0
    assert {row["status"] for row in json.loads(result.stdout)["results"]} == {"pass"}


def test_a_net_over_the_budget_fails_with_exit_code_1(repo):
    result = run("models", "--budget", "64MiB", "--format", "json")
    assert result.exit_code == 1
    document = json.loads(result.stdout)
    assert document["summary"] == {"failed": 1, "errors": 0, "passed": 5}
    assert document["results"][3] == {
        "file": "models/resnet18.prototxt",
        "net": "net",
        "phase": "TRAIN",
        "batch": 2,
        "bytes": RESNET_TRAIN,
        "budget": 64 * 2**20,
        "baseline_bytes": None,
        "delta": None,
        "status": "over-budget",
        "message": "106.77 MiB is over the budget of 64.00 MiB by 42.77 MiB",
        "line": 1,
    }


def test_a_footprint_equal_to_the_budget_passes(repo):
    assert run("models/resnet18.prototxt", "--budget", str(RESNET_TRAIN)).exit_code == 0
    assert run("models/resnet18.prototxt", "--budget", str(RESNET_TRAIN - 1)).exit_code == 1


# ----------------------------------------------------------------------------- baseline


def test_growth_beyond_the_tolerance_fails(repo):
    write_baseline(repo / "ci" / "memory.json", measured_baseline(lenet_TRAIN=14_000_000))
    result = run("models", "--baseline", "ci/memory.json", "--format", "json")
    assert result.exit_code == 1
    row = json.loads(result.stdout)["results"][0]
    assert (row["status"], row["baseline_bytes"], row["delta"]) == ("grew", 14_000_000, LENET_TRAIN - 14_000_000)
    assert row["message"] == "grew by 0.64 MiB (+4.8%) against the baseline, more than the 2% tolerance"


def test_growth_within_the_tolerance_passes(repo):
    write_baseline(repo / "ci" / "memory.json", measured_baseline(lenet_TRAIN=14_000_000))
    result = run("models", "--baseline", "ci/memory.json", "--tolerance", "0.05", "--format", "json")
    assert result.exit_code == 0
    row = json.loads(result.stdout)["results"][0]
    assert (row["status"], row["message"]) == ("pass", "grew by 0.64 MiB (+4.8%), within the 5% tolerance")


def test_shrinking_is_good_news_and_a_new_net_passes(repo):
    nets = measured_baseline(resnet18_TEST=60_000_000)
    del nets["../models/deploy/lenet_deploy.prototxt"]
    write_baseline(repo / "ci" / "memory.json", nets)
    result = run("models", "--baseline", "ci/memory.json", "--format", "json")
    assert result.exit_code == 0
    rows = json.loads(result.stdout)["results"]
    assert (rows[4]["status"], rows[4]["message"]) == ("shrank", "shrank by 0.36 MiB (-0.6%) against the baseline: good news")
    assert (rows[5]["status"], rows[5]["message"]) == ("new", "new: not in the baseline yet")


def test_a_baseline_from_another_caffemem_version_is_named(repo):
    write_baseline(repo / "ci" / "memory.json", measured_baseline(), version="0.0.9")
    result = run("models/lenet.prototxt", "--baseline", "ci/memory.json", "--phase", "TEST", "--format", "json")
    assert json.loads(result.stdout)["results"][0]["message"] == "unchanged against the baseline (baseline measured by caffemem 0.0.9)"


def test_baseline_keys_do_not_depend_on_the_working_directory(repo, monkeypatch):
    write_baseline(repo / "ci" / "memory.json", measured_baseline())
    monkeypatch.chdir(repo / "models")
    result = run(".", "--baseline", "../ci/memory.json", "--format", "json")
    assert result.exit_code == 0
    assert [row[5] for row in results(result.stdout)] == ["pass"] * 6
    assert Baseline("../ci/memory.json").key_of("deploy/lenet_deploy.prototxt") == "../models/deploy/lenet_deploy.prototxt"


def test_update_baseline_writes_the_file_and_the_check_then_passes(repo):
    write_baseline(repo / "ci" / "memory.json", measured_baseline(lenet_TRAIN=14_000_000))
    result = run("models", "--baseline", "ci/memory.json", "--update-baseline", "--budget", "200MiB", "--format", "json")
    assert result.exit_code == 0
    document = json.loads(result.stdout)
    assert (document["wrote_baseline"], document["results"][0]["status"]) == ("ci/memory.json", "accepted")
    entry = {"caffemem": __version__, "budget": 200 * 2**20}
    written = json.loads((repo / "ci" / "memory.json").read_text())
    layers = {file: {key: e.pop("layers") for key, e in entries.items()} for file, entries in written["nets"].items()}
    assert list(layers["../models/lenet.prototxt"]["TRAIN"])[:3] == ["digits", "conv1", "pool1"]  # every layer, in net order
    assert written == {
        "format": 1,
        "optimized": False,
        "device": "cpu",
        "nets": {
            "../models/deploy/lenet_deploy.prototxt": {"TEST": {"bytes": DEPLOY_TEST, "batch": 1, **entry}},
            "../models/lenet.prototxt": {"TEST": {"bytes": LENET_TEST, "batch": 64, **entry}, "TRAIN": {"bytes": LENET_TRAIN, "batch": 64, **entry}},
            "../models/lenet_solver.prototxt": {"process:TRAIN": {"bytes": SOLVER_PROCESS, "batch": 64, **entry}},
            "../models/resnet18.prototxt": {"TEST": {"bytes": RESNET_TEST, "batch": 2, **entry}, "TRAIN": {"bytes": RESNET_TRAIN, "batch": 2, **entry}},
        },
    }
    assert run("models", "--baseline", "ci/memory.json").exit_code == 0


def test_update_baseline_creates_a_readable_file(repo):
    assert run("models/lenet.prototxt", "--baseline", "ci/memory.json", "--update-baseline").exit_code == 0
    umask = os.umask(0)
    os.umask(umask)
    assert (repo / "ci" / "memory.json").stat().st_mode & 0o777 == 0o666 & ~umask


def test_update_baseline_keeps_files_not_checked_and_figures_it_could_not_measure(repo):
    write_baseline(repo / "ci" / "memory.json", {"../models/resnet18.prototxt": {"TRAIN": 1}, "../bad/broken.prototxt": {"TEST": 2}, "../gone.prototxt": {"TEST": 3}})
    result = run("models/lenet.prototxt", "bad/broken.prototxt", "--baseline", "ci/memory.json", "--update-baseline")
    assert result.exit_code == 2
    nets = json.loads((repo / "ci" / "memory.json").read_text())["nets"]
    assert {file: {key: e["bytes"] for key, e in entries.items()} for file, entries in nets.items()} == {
        "../bad/broken.prototxt": {"TEST": 2},
        "../models/lenet.prototxt": {"TEST": LENET_TEST, "TRAIN": LENET_TRAIN},
        "../models/resnet18.prototxt": {"TRAIN": 1},
    }


def test_update_baseline_still_holds_the_budget(repo):
    assert run("models/resnet18.prototxt", "--baseline", "ci/memory.json", "--update-baseline", "--budget", "64MiB").exit_code == 1
    assert (repo / "ci" / "memory.json").exists()


def test_update_baseline_needs_a_baseline_file(repo):
    result = run("models", "--update-baseline")
    assert result.exit_code == 2
    assert "--update-baseline needs --baseline FILE" in result.stderr


def test_a_missing_baseline_is_bad_input(repo):
    result = run("models", "--baseline", "ci/memory.json")
    assert result.exit_code == 2
    assert result.stderr == "caffemem: error: ci/memory.json: baseline file not found (create it with --update-baseline)\n"


def test_a_baseline_measured_the_other_way_is_bad_input(repo):
    write_baseline(repo / "ci" / "memory.json", measured_baseline())
    result = run("models", "--baseline", "ci/memory.json", "--optimized")
    assert result.exit_code == 2
    assert "the baseline was measured without --optimized" in result.stderr


# ----------------------------------------------------------------------------- bad input


def test_bad_input_exits_2_and_every_other_file_is_still_reported(repo):
    result = run("models", "bad", "--budget", "64MiB", "--format", "json")
    assert result.exit_code == 2
    document = json.loads(result.stdout)
    assert document["summary"] == {"failed": 1, "errors": 3, "passed": 5}
    assert [(r["file"], r["phase"], r["status"]) for r in document["results"][5:]] == [
        ("models/deploy/lenet_deploy.prototxt", "TEST", "pass"),
        ("bad/broken.prototxt", None, "error"),
        ("bad/data_layer.prototxt", "TRAIN", "error"),
        ("bad/data_layer.prototxt", "TEST", "error"),
    ]
    assert document["results"][6]["message"] == "line 9: layer 'conv1': unknown field 'num_outputs' in ConvolutionParameter (did you mean 'num_output'? if it is your fork's field, --caffe-root DIR reads the fork's caffe.proto; --lenient skips unknown fields)"
    assert document["results"][7]["message"].startswith("line 4: layer 'reader' (Data): the file does not tell the shape of 1 data blob(s): 'pixels'")


def test_parallel_and_serial_runs_print_the_same(repo):
    write_baseline(repo / "ci" / "memory.json", measured_baseline(lenet_TRAIN=14_000_000))
    args = ("models", "bad", "--budget", "64MiB", "--baseline", "ci/memory.json", "--format", "json")
    serial, parallel = run(*args, "--jobs", "1"), run(*args, "--jobs", "3")
    assert serial.exit_code == parallel.exit_code == 2
    assert serial.stdout == parallel.stdout


# ----------------------------------------------------------------------------- formats

GITHUB_BAD_INPUT = (
    "::error file=bad/broken.prototxt,line=9,title=caffemem%3A bad input::"
    "line 9: layer 'conv1': unknown field 'num_outputs' in ConvolutionParameter (did you mean 'num_output'? if it is your fork's field, --caffe-root DIR reads the fork's caffe.proto; --lenient skips unknown fields)\n"
)


def test_github_annotations_name_the_file_and_line(repo):
    nets = measured_baseline(lenet_TRAIN=14_000_000, resnet18_TEST=60_000_000)
    del nets["../models/deploy/lenet_deploy.prototxt"]
    write_baseline(repo / "ci" / "memory.json", nets)
    result = run("models", "bad/broken.prototxt", "--budget", "64MiB", "--baseline", "ci/memory.json", "--format", "github")
    assert result.exit_code == 2
    # a workflow command's message escapes % as %25 (GitHub shows it as %)
    assert result.stdout == (
        "::error file=models/lenet.prototxt,line=1,title=caffemem%3A TRAIN memory grew beyond the tolerance::"
        "22%25 of the budget; grew by 0.64 MiB (+4.8%25) against the baseline, more than the 2%25 tolerance\n"
        "::error file=models/resnet18.prototxt,line=1,title=caffemem%3A TRAIN over the memory budget::"
        "106.77 MiB is over the budget of 64.00 MiB by 42.77 MiB; unchanged against the baseline\n"
        "::notice file=models/resnet18.prototxt,line=1,title=caffemem%3A TEST memory shrank::"
        "89%25 of the budget; shrank by 0.36 MiB (-0.6%25) against the baseline: good news\n"
        "::notice file=models/deploy/lenet_deploy.prototxt,line=1,title=caffemem%3A TEST new net::"
        "3%25 of the budget; new: not in the baseline yet\n" + GITHUB_BAD_INPUT + "caffemem check failed: 2 failed, 1 bad input, 4 passed (budget 64.00 MiB, baseline ci/memory.json ± 2%, stock Caffe)\n"
    )


def test_markdown_is_a_summary_line_and_a_table(repo):
    write_baseline(repo / "ci" / "memory.json", measured_baseline(lenet_TRAIN=14_000_000))
    result = run("models/lenet.prototxt", "models/resnet18.prototxt", "--budget", "64MiB", "--baseline", "ci/memory.json", "--format", "markdown")
    assert result.exit_code == 1
    assert result.stdout == (
        "❌ **caffemem check failed: 2 failed, 0 bad input, 2 passed (budget 64.00 MiB, baseline ci/memory.json ± 2%, stock Caffe)**\n"
        "\n"
        "| | file | phase | batch | bytes | budget | baseline | change | note |\n"
        "|---|---|---|--:|--:|--:|--:|--:|---|\n"
        "| ❌ | models/lenet.prototxt | TRAIN | 64 | 13.99 MiB | 64.00 MiB | 13.35 MiB | +0.64 MiB (+4.8%) | 22% of the budget; grew by 0.64 MiB (+4.8%) against the baseline, more than the 2% tolerance |\n"
        "| ✅ | models/lenet.prototxt | TEST | 64 | 7.54 MiB | 64.00 MiB | 7.54 MiB | 0 B | 12% of the budget; unchanged against the baseline |\n"
        "| ❌ | models/resnet18.prototxt | TRAIN | 2 | 106.77 MiB | 64.00 MiB | 106.77 MiB | 0 B | 106.77 MiB is over the budget of 64.00 MiB by 42.77 MiB; unchanged against the baseline |\n"
        "| ✅ | models/resnet18.prototxt | TEST | 2 | 56.86 MiB | 64.00 MiB | 56.86 MiB | 0 B | 89% of the budget; unchanged against the baseline |\n"
    )


def test_markdown_of_a_passing_run_has_a_green_summary(repo):
    result = run("models/deploy", "--budget", "2MiB", "--format", "markdown")
    assert result.stdout.splitlines()[0] == "✅ **caffemem check passed: 0 failed, 0 bad input, 1 passed (budget 2.00 MiB, stock Caffe)**"
    assert result.stdout.splitlines()[-1] == "| ✅ | models/deploy/lenet\\_deploy.prototxt | TEST | 1 | 1.91 MiB | 2.00 MiB |  |  | 96% of the budget |"


def test_junit_is_valid_xml_with_one_testcase_per_net_and_phase(repo):
    result = run("models", "bad", "--budget", "64MiB", "--format", "junit")
    assert result.exit_code == 2
    root = ElementTree.fromstring(result.stdout.encode())
    suite = root.find("testsuite")
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("9", "1", "3")
    cases = suite.findall("testcase")
    assert [(c.get("classname"), c.get("name")) for c in cases[:3]] == [("models/lenet.prototxt", "TRAIN"), ("models/lenet.prototxt", "TEST"), ("models/lenet_solver.prototxt", "TRAIN process")]
    failures = [(c.get("classname"), c.get("name"), c.find("failure").get("type")) for c in cases if c.find("failure") is not None]
    assert failures == [("models/resnet18.prototxt", "TRAIN", "over-budget")]
    errors = [(c.get("classname"), c.get("name"), c.get("line")) for c in cases if c.find("error") is not None]
    assert errors == [("bad/broken.prototxt", "file", "9"), ("bad/data_layer.prototxt", "TRAIN", "4"), ("bad/data_layer.prototxt", "TEST", "4")]


def test_text_is_the_verdict_a_table_each_rows_note_and_the_verdict_again(repo):
    result = run("models/lenet.prototxt", "models/resnet18.prototxt", "--budget", "64MiB")
    assert result.exit_code == 1
    assert result.stdout.splitlines() == [
        "caffemem check failed: 1 failed, 0 bad input, 3 passed (budget 64.00 MiB, stock Caffe)",
        "                            caffemem check",
        "┏━━━━━━━━━━━━━━━━━━━━━━━━━━┳━━━━━━━┳━━━━━━━┳━━━━━━━━━━━━┳━━━━━━━━━━━━━┓",
        "┃ file                     ┃ phase ┃ batch ┃      bytes ┃ status      ┃",
        "┡━━━━━━━━━━━━━━━━━━━━━━━━━━╇━━━━━━━╇━━━━━━━╇━━━━━━━━━━━━╇━━━━━━━━━━━━━┩",
        "│ models/lenet.prototxt    │ TRAIN │    64 │  13.99 MiB │ pass        │",
        "│ models/lenet.prototxt    │ TEST  │    64 │   7.54 MiB │ pass        │",
        "│ models/resnet18.prototxt │ TRAIN │     2 │ 106.77 MiB │ over-budget │",
        "│ models/resnet18.prototxt │ TEST  │     2 │  56.86 MiB │ pass        │",
        "└──────────────────────────┴───────┴───────┴────────────┴─────────────┘",
        "models/lenet.prototxt TRAIN: 22% of the budget",
        "models/lenet.prototxt TEST: 12% of the budget",
        "models/resnet18.prototxt TRAIN: 106.77 MiB is over the budget of 64.00 MiB by 42.77 MiB",
        "models/resnet18.prototxt TEST: 89% of the budget",
        "caffemem check failed: 1 failed, 0 bad input, 3 passed (budget 64.00 MiB, stock Caffe)",
    ]


def test_at_80_columns_no_figure_is_cut(repo):
    # Issue 34: at 80 columns the table cut the key figures (`1,401.53 …`, `pa…`).
    assert run("models", "--baseline", "ci/memory.json", "--update-baseline").exit_code == 0
    result = CliRunner().invoke(main, ["check", "models", "--baseline", "ci/memory.json", "--budget", "64MiB"], env={"COLUMNS": "80"})
    lines = result.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80 and "…" not in result.stdout and not any(line != line.rstrip() for line in lines)
    assert "┏" not in result.stdout  # no table fits 80 columns here, even without the baseline's columns: a line a net
    assert "models/resnet18.prototxt TRAIN: batch 2, 106.77 MiB — over-budget" in lines


# ----------------------------------------------------------------------------- CI integrations


def test_the_pre_commit_hook_checks_the_changed_nets(repo):
    (hook,) = [h for h in yaml.safe_load((REPO / ".pre-commit-hooks.yaml").read_text()) if h["id"] == "caffemem-check"]
    assert (hook["language"], hook["require_serial"]) == ("python", True)
    changed = ["models/NOTES.txt", "bad/broken.prototxt", "models/lenet.prototxt"]
    passed = [file for file in changed if re.search(hook["files"], file)]  # as pre-commit filters them
    assert passed == ["bad/broken.prototxt", "models/lenet.prototxt"]
    program, *arguments = shlex.split(hook["entry"])
    assert program == "caffemem"
    result = CliRunner().invoke(main, [*arguments, "--budget", "13MiB", "--format", "github", *passed])
    assert result.exit_code == 2
    assert result.stdout == GITHUB_BAD_INPUT + (
        "::error file=models/lenet.prototxt,line=1,title=caffemem%3A TRAIN over the memory budget::13.99 MiB is over the budget of 13.00 MiB by 0.99 MiB\n"
        "caffemem check failed: 1 failed, 1 bad input, 1 passed (budget 13.00 MiB, stock Caffe)\n"
    )


def test_the_action_installs_itself_and_runs_caffemem_check_with_its_inputs(repo):
    action = yaml.safe_load((REPO / "action.yml").read_text())
    setup, cache, install, check = action["runs"]["steps"]
    assert action["runs"]["using"] == "composite"
    assert re.fullmatch(r"actions/setup-python@v\d+\.\d+\.\d+", setup["uses"]) and re.fullmatch(r"actions/cache@v\d+\.\d+\.\d+", cache["uses"])  # pinned versions
    assert install["run"].endswith('python -m pip install --quiet "$GITHUB_ACTION_PATH${CAFFEMEM_EXTRAS:+[$CAFFEMEM_EXTRAS]}"\n')
    inputs = {name: spec.get("default", "") for name, spec in action["inputs"].items()}
    assert inputs["device"] == "gpu"  # as the command's own default; this test checks the CPU figures
    inputs |= {"paths": "models/lenet.prototxt bad/*.prototxt", "budget": "13MiB", "device": "cpu", "args": "--input pixels=64,1,28,28 --jobs 1"}
    env = {name: re.sub(r"\$\{\{ inputs\.([\w-]+) \}\}", lambda m: inputs[m.group(1)], value) for name, value in check["env"].items()}
    bin_dir = str(Path(sys.executable).parent)
    assert shutil.which("caffemem", path=bin_dir), "the caffemem command is installed beside the test's Python"
    outputs, summary = repo / "github_output", repo / "step_summary.md"
    completed = subprocess.run(
        ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", check["run"]],  # as GitHub runs a bash step
        env={**os.environ, **env, "PATH": bin_dir + os.pathsep + os.environ["PATH"], "GITHUB_OUTPUT": str(outputs), "GITHUB_STEP_SUMMARY": str(summary), "RUNNER_TEMP": str(repo)},
        cwd=repo,
        capture_output=True,
        text=True,
    )
    assert completed.returncode == 2, completed.stderr
    assert completed.stdout == (
        "::error file=models/lenet.prototxt,line=1,title=caffemem%3A TRAIN over the memory budget::13.99 MiB is over the budget of 13.00 MiB by 0.99 MiB\n"
        + GITHUB_BAD_INPUT
        + "caffemem check failed: 1 failed, 1 bad input, 3 passed (budget 13.00 MiB, stock Caffe)\n"
    )
    written = dict(line.split("=", 1) for line in outputs.read_text().splitlines())
    rows = json.loads((repo / "caffemem-check.json").read_text())["results"]
    assert written == {"total-bytes": str(sum(r["bytes"] or 0 for r in rows)), "status": "error", "report": str(repo / "caffemem-check.json")}
    assert summary.read_text().startswith("#") or "|" in summary.read_text()  # the Markdown report, as the job summary


def test_a_grown_net_is_explained_by_the_layers_that_grew_and_annotated_at_the_first(repo):
    assert run("models/lenet.prototxt", "--baseline", "ci/memory.json", "--update-baseline", "--phase", "TRAIN").exit_code == 0
    net = repo / "models" / "lenet.prototxt"
    net.write_text(net.read_text().replace("num_output: 500", "num_output: 1000"))  # fc1 (its block starts on line 40): twice the outputs
    result = run("models/lenet.prototxt", "--baseline", "ci/memory.json", "--phase", "TRAIN", "--format", "github")
    assert result.exit_code == 1
    (line,) = [l for l in result.stdout.splitlines() if l.startswith("::error")]
    # fc1 doubles its weights (800x500 -> 800x1000) and outputs; relu1 and fc2 follow it.
    assert "file=models/lenet.prototxt,line=40" in line and "fc1 +" in line
    row = json.loads(run("models/lenet.prototxt", "--baseline", "ci/memory.json", "--phase", "TRAIN", "--format", "json").stdout)["results"][0]
    assert row["message"].split("; ")[1].startswith("fc1 +")


def test_a_batch_change_is_named_first_and_annotated_at_the_batch_line(repo):
    # Issue 34: AlexNet 256 -> 512 was blamed on norm1, line 73; the batch was never named.
    assert run("models/lenet.prototxt", "--baseline", "ci/memory.json", "--update-baseline", "--phase", "TRAIN").exit_code == 0
    net = repo / "models" / "lenet.prototxt"
    net.write_text(net.read_text().replace("shape { dim: 64 dim: 1 dim: 28 dim: 28 } shape { dim: 64 }", "shape { dim: 128 dim: 1 dim: 28 dim: 28 } shape { dim: 128 }"))
    result = run("models/lenet.prototxt", "--baseline", "ci/memory.json", "--phase", "TRAIN", "--format", "github")
    assert result.exit_code == 1
    (line,) = [l for l in result.stdout.splitlines() if l.startswith("::error")]
    assert line.startswith("::error file=models/lenet.prototxt,line=8,title=caffemem%3A TRAIN memory grew beyond the tolerance::batch 64 → 128 (the file's batch changed); grew by ")
    markdown = run("models/lenet.prototxt", "--baseline", "ci/memory.json", "--phase", "TRAIN", "--format", "markdown").stdout.splitlines()
    assert markdown[2] == "| | file | phase | batch | bytes | budget | baseline | change | note |"
    assert markdown[4].startswith("| ❌ | models/lenet.prototxt | TRAIN | 64 → 128 | ")


def test_a_new_layer_is_named_in_the_explanation(repo):
    assert run("models/lenet.prototxt", "--baseline", "ci/memory.json", "--update-baseline", "--phase", "TEST").exit_code == 0
    net = repo / "models" / "lenet.prototxt"
    text = net.read_text()
    net.write_text(text.replace('layer {\n  name: "fc2"', 'layer {\n  name: "extra"\n  type: "ReLU"\n  bottom: "fc1"\n  top: "extra"\n}\nlayer {\n  name: "fc2"', 1))
    row = json.loads(run("models/lenet.prototxt", "--baseline", "ci/memory.json", "--phase", "TEST", "--format", "json").stdout)["results"][0]
    assert "new layer extra +" in row["message"]


# ----------------------------------------------------------------------------- net flags as analyze's

STAGED = """name: "staged"
layer { name: "x" type: "Input" top: "x" input_param { shape { dim: 2 dim: 8 } } }
layer { name: "wide" type: "InnerProduct" bottom: "x" top: "y" inner_product_param { num_output: 64 } include { stage: "wide" } }
layer { name: "narrow" type: "InnerProduct" bottom: "x" top: "y" inner_product_param { num_output: 4 } exclude { stage: "wide" } }
"""


def test_check_takes_stage_dtype_and_lenient_as_analyze_does(repo):
    (repo / "staged.prototxt").write_text(STAGED)
    (repo / "fork.prototxt").write_text(STAGED.replace('top: "x" input_param', 'top: "x" no_such_field: 1 input_param'))
    for flags, options in [((), Options()), (("--stage", "wide"), Options(stages=("wide",))), (("--dtype", "float16"), Options(dtype="float16"))]:
        result = run("staged.prototxt", *flags, "--format", "json")
        assert result.exit_code == 0, result.output
        assert results(result.stdout)[0][3] == analyze("staged.prototxt", options).nets[0].total_bytes
    # narrow, wide and narrow at half width: three different footprints
    assert len({analyze("staged.prototxt", options).nets[0].total_bytes for options in (Options(), Options(stages=("wide",)), Options(dtype="float16"))}) == 3
    assert run("fork.prototxt", "--format", "json").exit_code == 2
    lenient = run("fork.prototxt", "--lenient", "--format", "json")
    assert lenient.exit_code == 0 and results(lenient.stdout)[0][3] == analyze("staged.prototxt").nets[0].total_bytes


def test_a_change_that_rounds_to_nothing_is_never_minus_zero_percent():
    # 1 byte less of 10 MB is -0.00001%: shown as 0.0%, as optimize's vs-stock column does.
    assert change_percent(-1, 10_000_000) == "0.0%" and change_percent(480_000, 10_000_000) == "+4.8%"
    assert change_percent(5, 0) == "from 0 B"


def test_each_row_states_the_batch_it_was_measured_at(repo):
    result = run("models", "--format", "json")
    # LeNet trains and tests at 64 (the solver: its train net's 64), ResNet-18 at 2, the deploy net at 1.
    assert [(r["file"], r["phase"], r["batch"]) for r in json.loads(result.stdout)["results"]] == [
        ("models/lenet.prototxt", "TRAIN", 64),
        ("models/lenet.prototxt", "TEST", 64),
        ("models/lenet_solver.prototxt", "TRAIN", 64),
        ("models/resnet18.prototxt", "TRAIN", 2),
        ("models/resnet18.prototxt", "TEST", 2),
        ("models/deploy/lenet_deploy.prototxt", "TEST", 1),
    ]

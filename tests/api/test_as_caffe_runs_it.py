"""A file carrying `optimize -o`'s slot table is reported as the patched Caffe will run
it (issue 34): `analyze` states the planned figures and says so, `check --optimized`
honours its recompute entries, and `fit`'s advice, run, gives files whose figure is the
one `fit` stated."""

from __future__ import annotations

import json
import re
import shlex

import pytest

from click.testing import CliRunner
from conftest import FIXTURES

import caffemem
from caffemem.cli import main

LENET = FIXTURES / "examples" / "lenet_train.prototxt"
RECOMPUTE = FIXTURES / "plan" / "recompute_resnet.prototxt"  # sqrt recomputes some of its Forwards
DOCS = FIXTURES / "docs"  # solver.prototxt trains train_val.prototxt: Data layers of batch 32 (TRAIN) and 50 (TEST)


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def optimized(tmp_path, net, *flags) -> str:
    out = tmp_path / "optimized.prototxt"
    result = run("optimize", net, *flags, "-o", out)
    assert result.exit_code == 0, result.output
    return str(out)


def test_analyze_states_an_optimized_file_as_the_patched_caffe_runs_it(tmp_path):
    out = optimized(tmp_path, LENET)
    train = next(phase for phase in caffemem.optimize(str(LENET)).phases if phase.phase == "TRAIN")
    net = caffemem.analyze(out).nets[0]
    assert (net.total_bytes, net.mem_param.stock_bytes) == (train.totals()["planned"], train.totals()["stock"])
    document = json.loads(run("analyze", out, "--json").output)
    assert (document["total_bytes"], document["mem_param"]) == (train.totals()["planned"], {"slots": len(train.plan_data.slot_bytes), "recomputed": 0, "stock_bytes": train.totals()["stock"]})
    text = " ".join(run("analyze", out).output.split())
    assert text.startswith(f"lenet_example — net (TRAIN, batch 64, float32) The patched Caffe will allocate {train.totals()['planned'] / 2**20:,.2f} MiB")
    assert "as the patched Caffe runs the file's mem_param table for TRAIN" in text


def test_a_table_for_another_batch_leaves_stock_figures_and_says_why(tmp_path):
    out = optimized(tmp_path, LENET)
    net = caffemem.analyze(out, batch=8).nets[0]
    assert net.mem_param is None and net.total_bytes == caffemem.analyze(str(LENET), batch=8).nets[0].total_bytes
    assert any("does not fit this net as built" in note and "the patched Caffe would stop at Net::Init" in note for note in net.notes)


def test_check_optimized_honours_the_files_recompute_entries(tmp_path):
    out = optimized(tmp_path, RECOMPUTE, "--recompute", "sqrt")
    planned = {phase.phase: phase.totals()["planned"] for phase in caffemem.optimize(str(RECOMPUTE), settings=caffemem.OptimizeSettings(recompute="sqrt")).phases}
    rows = json.loads(run("check", out, "--optimized", "--format", "json").output)["results"]
    assert {row["phase"]: row["bytes"] for row in rows} == planned


def advised(output: str) -> tuple[list[list[str]], str]:
    """fit's advice: each command's arguments (after `caffemem`), and the `then` line."""
    lines = output.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("to run the plan counted here"))
    block = []
    for line in lines[start + 1 :]:
        if not line.startswith("  "):
            break
        if block and block[-1].endswith("\\"):
            block[-1] = block[-1][:-1] + line.strip()
        else:
            block.append(line.strip())
    return [shlex.split(command)[1:] for command in block if command.startswith("caffemem ")], block[-1]


@pytest.mark.gpu_default
def test_fits_advice_on_a_solver_run_gives_the_figure_fit_stated(tmp_path, monkeypatch):
    # Issue 34: GoogLeNet's solver fitted 12,090 MiB with the test net planned, but the
    # advice planned TRAIN only: the test net ran as stock Caffe, ~13,142 MiB in all.
    monkeypatch.chdir(tmp_path)
    fitted = run("fit", DOCS / "solver.prototxt", "--gpu-memory", "2GiB", "--input", "data=3,224,224", "--recompute", "sqrt", "--json")
    assert fitted.exit_code == 0, fitted.output
    document = json.loads(fitted.output)
    batch, figure = document["batch"], document["bytes"]
    commands, then = advised(run("fit", DOCS / "solver.prototxt", "--gpu-memory", "2GiB", "--input", "data=3,224,224", "--recompute", "sqrt").output)
    assert [command[:4] for command in commands] == [["optimize", str(DOCS / "train_val.prototxt"), "--phase", "TRAIN"], ["optimize", f"train_val.b{batch}.prototxt", "--phase", "TEST"]]
    for command in commands:
        written = run(*command)
        assert written.exit_code == 0, written.output
    solver = DOCS / "solver.prototxt"
    assert then == f'then have the solver name them (net: "train_val.b{batch}.prototxt"): `caffemem analyze {solver} --input data=3,224,224 --device gpu` on it states {figure / 2**20:,.2f} MiB'
    (tmp_path / "solver.prototxt").write_text((DOCS / "solver.prototxt").read_text().replace('net: "train_val.prototxt"', f'net: "train_val.b{batch}.prototxt"'))
    analyzed = json.loads(run("analyze", "solver.prototxt", "--input", "data=3,224,224", "--json").output)
    assert analyzed["total_bytes"] == figure
    assert [net["mem_param"] is not None for net in analyzed["nets"]] == [True, True]  # both phases run their tables


def test_fits_advice_on_a_net_run_gives_the_figure_fit_stated(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    fitted = run("fit", LENET, "--gpu-memory", "64MiB", "--reserve", "0", "--optimized")
    assert fitted.exit_code == 0, fitted.output
    commands, then = advised(fitted.output)
    (command,) = commands
    assert run(*command).exit_code == 0
    analyzed = shlex.split(re.search(r"`(.*)`", then).group(1))[1:]
    stated = re.search(r"states (.*) MiB$", then).group(1)
    assert f"{caffemem.analyze(analyzed[1], phase='TRAIN').nets[0].total_bytes / 2**20:,.2f}" == stated
    assert json.loads(run(*analyzed, "--json").output)["total_bytes"] == json.loads(run("fit", LENET, "--gpu-memory", "64MiB", "--reserve", "0", "--optimized", "--json").output)["bytes"]

"""A file carrying `optimize -o`'s slot table is reported as the patched Caffe will run
it (issue 34): `analyze` states the planned figures and says so, `check --optimized`
honours its recompute entries, and `fit`'s advice, run, gives files whose figure is the
one `fit` stated."""

from __future__ import annotations

import json
import re
import shlex

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
    assert (net.total_bytes, net.carried.stock_bytes) == (train.totals()["planned"], train.totals()["stock"])
    document = json.loads(run("analyze", out, "--json").output)
    assert (document["total_bytes"], document["mem_param"]) == (train.totals()["planned"], {"slots": len(train.plan_data.slot_bytes), "recomputed": 0, "stock_bytes": train.totals()["stock"]})
    text = " ".join(run("analyze", out).output.split())
    assert text.startswith(f"lenet_example — net (TRAIN, batch 64, float32) The patched Caffe will allocate {train.totals()['planned'] / 2**20:,.2f} MiB")
    assert "as the patched Caffe runs the file's mem_param table for TRAIN" in text


def test_a_table_for_another_batch_leaves_stock_figures_and_says_why(tmp_path):
    out = optimized(tmp_path, LENET)
    net = caffemem.analyze(out, batch=8).nets[0]
    assert net.carried is None and net.total_bytes == caffemem.analyze(str(LENET), batch=8).nets[0].total_bytes
    assert any("does not fit this net as built" in note and "the patched Caffe would stop at Net::Init" in note for note in net.notes)


def test_check_optimized_honours_the_files_recompute_entries(tmp_path):
    out = optimized(tmp_path, RECOMPUTE, "--recompute", "sqrt")
    planned = {phase.phase: phase.totals()["planned"] for phase in caffemem.optimize(str(RECOMPUTE), settings=caffemem.OptimizeSettings(recompute="sqrt")).phases}
    rows = json.loads(run("check", out, "--optimized", "--format", "json").output)["results"]
    assert {row["phase"]: row["bytes"] for row in rows} == planned

"""Every command's output fits 80 columns, piped with ``COLUMNS=80`` (issue 34 item 5):
no line wider than 80 terminal cells, none ending in spaces, whatever the command, its
flags, its device, its findings and its errors.

Each command runs as a user's shell runs it: a child process whose standard output and
error are pipes, in a copy of ``fixtures/docs/`` (the files the README's examples name).
Machine formats are exempt, being read by programs rather than people: ``--json``,
``check --format json|markdown|github|junit`` (a Markdown table row and a GitHub workflow
command are one line each by their own syntax), and so is an error's one line on stderr
(``caffemem: error: FILE:LINE: ...``, the contract scripts read; a terminal wraps it).
Piped with no ``COLUMNS`` a report is a line a fact (for grep and a CI log):
tests/report/test_terminal.py.  The README's and the guide's examples are held to the
same width where they run: tests/cli/test_documented_examples.py.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest
from conftest import FIXTURES, REPO
from tools import readme_examples as docs

WIDTH, overlong = docs.WIDTH, docs.overlong
LENET = str(FIXTURES / "examples" / "lenet_train.prototxt")
LENET_SOLVER = str(FIXTURES / "examples" / "lenet_solver.prototxt")
RESNET = str(FIXTURES / "plan" / "recompute_resnet.prototxt")
FASTER_RCNN = str(FIXTURES / "examples" / "zf_faster_rcnn_end2end_train.prototxt")
IMAGE = ("--input", "data=3,224,224")

# (name, arguments): every command, in the order a user runs them (later ones read the
# files earlier ones write), with the flags that change what it prints.
RUNS: list[tuple[str, tuple[str, ...]]] = [
    ("analyze", ("analyze", "train_val.prototxt", *IMAGE)),
    ("analyze --device cpu", ("analyze", "train_val.prototxt", *IMAGE, "--device", "cpu")),
    ("analyze --top 3", ("analyze", "train_val.prototxt", *IMAGE, "--top", "3")),
    ("analyze --layers-table", ("analyze", "train_val.prototxt", *IMAGE, "--layers-table")),
    ("analyze --layers-table --device cpu", ("analyze", "train_val.prototxt", *IMAGE, "--layers-table", "--device", "cpu")),
    ("analyze a solver -v", ("analyze", "solver.prototxt", *IMAGE, "-v")),
    ("analyze a solver --device cpu", ("analyze", "solver.prototxt", *IMAGE, "--device", "cpu")),
    ("analyze deploy", ("analyze", "deploy.prototxt", "--phase", "TEST", "--layers-table")),
    ("analyze lenet's solver", ("analyze", LENET_SOLVER)),
    ("analyze, bad input", ("analyze", FASTER_RCNN)),
    ("optimize -o", ("optimize", "train_val.prototxt", *IMAGE, "-o", "opt.prototxt")),
    ("optimize --device cpu", ("optimize", "train_val.prototxt", *IMAGE, "--device", "cpu")),
    ("optimize --recompute", ("optimize", "train_val.prototxt", *IMAGE, "--recompute", "sqrt", "-o", "recomputed.prototxt")),
    ("optimize --recompute, a resnet", ("optimize", RESNET, "--recompute", "sqrt")),
    ("optimize --share-buffers --plan-json", ("optimize", "deploy.prototxt", "--share-buffers", "--plan-json", "plan.json")),
    ("optimize --target fork", ("optimize", "train_val.prototxt", *IMAGE, "--target", "fork", "-o", "fork.prototxt")),
    ("optimize --batch", ("optimize", "train_val.prototxt", *IMAGE, "--batch", "16", "-o", "b16.prototxt")),
    ("analyze an optimized file", ("analyze", "opt.prototxt", *IMAGE)),
    ("analyze an optimized file --device cpu", ("analyze", "opt.prototxt", *IMAGE, "--device", "cpu")),
    ("analyze an optimized file, no --input", ("analyze", "opt.prototxt")),
    ("verify", ("verify", "opt.prototxt")),
    ("verify a recomputing plan", ("verify", "recomputed.prototxt")),
    ("verify a plan's JSON", ("verify", "deploy.prototxt", "plan.json")),
    ("verify, a wrong plan", ("verify", "train_val.prototxt", "plan.json", *IMAGE)),
    ("check", ("check", "models", "--budget", "11GiB")),
    ("check over budget", ("check", "models", "--budget", "1MiB")),
    ("check --optimized", ("check", "models", "--budget", "11GiB", "--optimized")),
    ("check --device cpu", ("check", "models", "--budget", "11GiB", "--device", "cpu")),
    ("check bundled fixtures", ("check", str(FIXTURES / "check" / "models"), "--budget", "11GiB")),
    ("check --update-baseline", ("check", "models", "--baseline", "baseline.json", "--update-baseline")),
    ("check --baseline", ("check", "models", "--baseline", "baseline.json", "--budget", "1GiB")),
    ("fit", ("fit", "solver.prototxt", "--gpu-memory", "11GiB", *IMAGE)),
    ("fit --optimized", ("fit", "solver.prototxt", "--gpu-memory", "11GiB", *IMAGE, "--optimized")),
    ("fit --recompute", ("fit", "solver.prototxt", "--gpu-memory", "11GiB", *IMAGE, "--recompute", "sqrt")),
    ("fit --gpus --effective-batch", ("fit", "train_val.prototxt", *IMAGE, "--gpu-memory", "16GB", "--gpus", "4", "--effective-batch", "256", "--optimized")),
    ("fit --device cpu", ("fit", "train_val.prototxt", *IMAGE, "--gpu-memory", "16GB", "--device", "cpu")),
    ("fit, nothing fits", ("fit", "train_val.prototxt", *IMAGE, "--gpu-memory", "900MiB")),
    ("patch --check", ("patch", "not-a-caffe-tree", "--check")),
    ("no such command", ("anaylze", "train_val.prototxt")),
    ("--help", ("--help",)),
    *((f"{command} --help", (command, "--help")) for command in ("analyze", "optimize", "verify", "check", "fit", "patch")),
]


@pytest.fixture(scope="module")
def outputs(tmp_path_factory) -> dict[str, subprocess.CompletedProcess]:
    """Every run of RUNS, in order, in one folder (the runs read what earlier ones wrote)."""
    folder = tmp_path_factory.mktemp("eighty") / "work"
    shutil.copytree(docs.DOCS_FIXTURES, folder)
    (folder / "not-a-caffe-tree").mkdir()
    env = {key: value for key, value in os.environ.items() if not key.startswith("CAFFEMEM_")}
    env.update(COLUMNS=str(WIDTH), PYTHONIOENCODING="utf-8", PYTHONPATH=str(REPO))
    done = {}
    for name, args in RUNS:
        done[name] = subprocess.run([sys.executable, "-m", "caffemem", *args], cwd=folder, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=300)
    return done


@pytest.mark.parametrize("name", [name for name, _ in RUNS])
def test_the_output_fits_80_columns_piped_with_columns_80(outputs, name):
    run = outputs[name]
    assert run.returncode in (0, 1, 2), f"{name}: exit {run.returncode}\n{run.stderr}"
    assert run.stdout or run.stderr
    assert not overlong(run.stdout), f"{name}: standard output\n" + "\n".join(overlong(run.stdout))
    wide = overlong(run.stderr, error_line=run.returncode == 2)  # an error is one line: a terminal wraps it
    assert not wide, f"{name}: standard error\n" + "\n".join(wide)


def test_the_runs_cover_findings_and_bad_input(outputs):
    # The lines most likely to run long: a finding (exit 1) and an error (exit 2).
    codes = {name: run.returncode for name, run in outputs.items()}
    assert codes["check over budget"] == codes["fit, nothing fits"] == 1
    assert codes["analyze, bad input"] == codes["analyze an optimized file, no --input"] == codes["no such command"] == 2


def test_the_wide_per_layer_table_asked_for_is_a_paragraph_a_layer_with_every_figure(outputs):
    lines = outputs["analyze --layers-table --device cpu"].stdout.splitlines()
    start = lines.index("every layer, one a paragraph (as a table: 156 columns)")
    assert lines[start - 1] == "SmallNet — net (TRAIN, batch 32, float32)"
    # conv1: its shapes, then each figure named by its column, a figure never cut from its unit.
    assert lines[start + 3 : start + 6] == [
        "   1 conv1 (Convolution): data → conv1 [32×64×54×54]; params 64×3×11×11, 64;",
        "       outputs 22.78 MiB, gradients 18.38 MiB, buffers 4.05 MiB, parameters",
        "       0.18 MiB, total 45.38 MiB",
    ]

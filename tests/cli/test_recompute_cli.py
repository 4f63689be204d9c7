"""`optimize --recompute` and `fit --recompute` at the command line: the choice in --help,
bad values and combinations refused in one line with exit 2, a missed budget exit 1, the
table written into mem_param and read back by `caffemem verify`."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

from click.testing import CliRunner

from caffemem.cli import main

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "plan" / "recompute_resnet.prototxt"


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def test_the_policies_are_listed_in_help():
    text = run("optimize", "--help").output
    assert "--recompute [cheap|sqrt|budget=SIZE]" in text


def test_an_unknown_policy_is_refused_in_one_line_with_exit_2():
    result = run("optimize", FIXTURE, "--device", "cpu", "--recompute", "fast")
    assert result.exit_code == 2
    assert "--recompute 'fast': expected one of cheap, sqrt, budget=SIZE" in result.output


def test_a_budget_without_a_size_is_refused():
    result = run("optimize", FIXTURE, "--device", "cpu", "--recompute", "budget=lots")
    assert result.exit_code == 2
    assert "--recompute budget=" in result.output


def test_recompute_cannot_target_the_fork():
    result = run("optimize", FIXTURE, "--device", "cpu", "--recompute", "sqrt", "--target", "fork", "-o", "-")
    assert result.exit_code == 2
    assert "cannot go with --strategy fork or --target fork" in result.output


def test_fit_takes_no_budget_policy():
    result = run("fit", FIXTURE, "--device", "cpu", "--gpu-memory", "1GiB", "--recompute", "budget=1MiB")
    assert result.exit_code == 2
    assert "fit --recompute takes cheap or sqrt" in result.output


def test_a_budget_no_recomputation_reaches_is_a_finding_naming_the_miss():
    result = run("optimize", FIXTURE, "--device", "cpu", "--phase", "train", "--recompute", "budget=1KiB")
    assert result.exit_code == 1
    assert re.search(r"no recomputation fits; the least any reaches is [\d.,]+ MiB .*, [\d.,]+ KiB over the budget", result.output)


def test_the_written_file_carries_the_recompute_entries_and_verifies(tmp_path):
    out = tmp_path / "out.prototxt"
    result = run("optimize", FIXTURE, "--device", "cpu", "--phase", "train", "--recompute", "sqrt", "-o", out)
    assert result.exit_code == 0, result.output
    text = out.read_text()
    assert text.count("recompute {") > 0
    assert 'layer: "drop"' not in text  # Dropout draws its mask in Forward: never run twice
    checked = run("verify", out)
    assert checked.exit_code == 0, checked.output
    assert "the table is safe" in checked.output


def test_verify_refuses_a_table_that_recomputes_dropout(tmp_path):
    out = tmp_path / "out.prototxt"
    assert run("optimize", FIXTURE, "--device", "cpu", "--phase", "train", "--recompute", "sqrt", "-o", out).exit_code == 0
    text = out.read_text().replace("  recompute {", '  recompute {\n    phase: TRAIN\n    layer: "drop"\n    before: "drop"\n  }\n  recompute {', 1)
    out.write_text(text)
    checked = run("verify", out)
    assert checked.exit_code == 1
    assert "blob 'drop': its Forward may not run twice" in checked.output


def test_verify_stops_where_net_init_would_on_an_unknown_layer(tmp_path):
    out = tmp_path / "out.prototxt"
    assert run("optimize", FIXTURE, "--device", "cpu", "--phase", "train", "--recompute", "sqrt", "-o", out).exit_code == 0
    out.write_text(re.sub(r'layer: "conv3"\n    before', 'layer: "conv9"\n    before', out.read_text(), count=1))
    checked = run("verify", out)
    assert checked.exit_code == 1
    assert "mem_param recompute: conv9 is not a layer of net recompute_resnet (phase TRAIN)" in checked.output


def test_fit_with_recomputation_fits_a_larger_batch(tmp_path):
    plain = run("fit", FIXTURE, "--device", "cpu", "--phase", "train", "--gpu-memory", "24MiB", "--reserve", "0", "--optimized", "--json")
    again = run("fit", FIXTURE, "--device", "cpu", "--phase", "train", "--gpu-memory", "24MiB", "--reserve", "0", "--recompute", "sqrt", "--json")
    assert plain.exit_code == 0 and again.exit_code == 0, plain.output + again.output
    batch = lambda output: int(re.search(r'"batch": (\d+)', output)[1])  # noqa: E731
    assert batch(again.output) > batch(plain.output)
    assert "--recompute sqrt" in again.output


def test_optimize_says_the_estimated_time_ratio_beside_the_flops(tmp_path):
    """Issue 33: the terminal names the seconds, not only the FLOPs, and what the estimate
    was fitted on; the JSON carries them under recompute.time."""
    shown = run("optimize", FIXTURE, "--device", "cpu", "--phase", "train", "--recompute", "sqrt", "-o", tmp_path / "a.prototxt")
    assert shown.exit_code == 0, shown.output
    flat = " ".join(shown.output.split())
    assert re.search(r"% of a Forward pass\).*; estimated \d\.\d\d× the seconds of an iteration without it \([\d.,]+ ms more of [\d.,]+ ms; time model fitted on BVLC Caffe's CPU code", flat), flat
    doc = run("optimize", FIXTURE, "--device", "cpu", "--phase", "train", "--recompute", "sqrt", "-o", tmp_path / "b.prototxt", "--json")
    assert doc.exit_code == 0, doc.output
    time = json.loads(doc.output)["phases"][0]["recompute"]["time"]
    assert set(time) == {"ratio", "extra_seconds", "iteration_seconds", "model"}
    assert time["ratio"] == round(1 + time["extra_seconds"] / time["iteration_seconds"], 4) > 1


def test_fit_with_recomputation_says_the_seconds_per_sample_and_the_fastest_batch():
    fitted = run("fit", FIXTURE, "--device", "cpu", "--phase", "train", "--gpu-memory", "24MiB", "--reserve", "0", "--recompute", "sqrt", "--json")
    assert fitted.exit_code == 0, fitted.output
    doc = json.loads(fitted.output)
    notes = " ".join(doc["notes"])
    batch = doc["batch"]
    assert re.search(rf"batch {batch}: an estimated [\d.,]+ ms per sample \([\d.,]+ ms per iteration, recomputation included", notes), notes
    assert "trains fastest per sample" in notes


def test_fit_with_recomputation_says_which_figures_are_bounds():
    """Issue 33: fit --recompute searches by the recompute plan's bound and plans the answer
    whole; the batch above is over the budget by its bound, which the terminal says."""
    fitted = run("fit", FIXTURE, "--device", "cpu", "--phase", "train", "--gpu-memory", "24MiB", "--reserve", "0", "--recompute", "sqrt")
    assert fitted.exit_code == 0, fitted.output
    flat = " ".join(fitted.output.split())
    assert "largest batch per GPU 222, needs 23.96 MiB (0.02 GiB), 25,124,072 B" in flat
    assert "batch 223 needs at least 24.07 MiB (0.02 GiB), 25,236,832 B: over the budget" in flat
    assert "searched with 5 evaluations (4 by the recompute plan's bound, 1 planned whole), at 222 and 223 among them" in flat

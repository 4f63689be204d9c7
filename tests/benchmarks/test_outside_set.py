"""benchmarks/outside_set.py scores downloaded files from the runs alone: a file that
analyses is OK, one that only asks for a shape passes with the manifest's --input, and
everything else fails with caffemem's message.  Tiny nets written here stand in for the
downloaded set (kept outside the project)."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import load_script

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "outside_set.py"

DEPLOY = 'layer { name: "in" type: "Input" top: "x" input_param { shape { dim: 1 dim: 2 } } }\nlayer { name: "r" type: "ReLU" bottom: "x" top: "y" }\n'
FROM_DB = 'layer { name: "d" type: "Data" top: "data" data_param { source: "db" batch_size: 2 } }\nlayer { name: "r" type: "ReLU" bottom: "data" top: "y" }\n'
UNKNOWN = 'layer { name: "in" type: "Input" top: "x" input_param { shape { dim: 1 } } }\nlayer { name: "w" type: "Warp9" bottom: "x" top: "y" }\n'


def _script():
    return load_script(SCRIPT)


def _set(tmp_path: Path, rows: list[tuple[str, str, str]]) -> Path:
    """A set: files/ and MANIFEST.tsv, one (name, text, options) per file, all of repo o/r."""
    (tmp_path / "files").mkdir()
    lines = ["file\trepo\tpath\tcommit\tkind\toptions"]
    for name, text, options in rows:
        (tmp_path / "files" / f"o+r__{name}").write_text(text)
        lines.append(f"o+r__{name}\to/r\t{name}\t0\tnet\t{options}")
    (tmp_path / "MANIFEST.tsv").write_text("\n".join(lines) + "\n")
    return tmp_path


def test_scores_each_file_by_its_runs(tmp_path, capsys):
    rows = [
        ("deploy.prototxt", DEPLOY, ""),
        ("db.prototxt", FROM_DB, "--input data=3,8,8"),
        ("db_without.prototxt", FROM_DB, ""),
        ("unknown.prototxt", UNKNOWN, "--input x=1"),
    ]
    directory = _set(tmp_path, rows)
    assert _script().main([str(directory)]) == 0
    results = (directory / "RESULTS.md").read_text()
    assert "**Score: 2 of 4 (as downloaded: 1; with only what the file cannot know: 1)**" in results
    table = {line.split(" | ")[2]: line for line in results.splitlines() if line.startswith("| ") and "prototxt" in line}
    assert " OK " in table["`deploy.prototxt`"] and "OK+input" in table["`db.prototxt`"]
    assert "asks for an input the manifest does not give" in table["`db_without.prototxt`"]
    assert "Warp9" in table["`unknown.prototxt`"]  # not asking: the options are not tried


def test_the_manifest_may_only_give_shapes(tmp_path):
    directory = _set(tmp_path, [("db.prototxt", FROM_DB, "--lenient --input data=3,8,8")])
    with pytest.raises(SystemExit, match="options may only be"):
        _script().main([str(directory)])

"""The terminal report reads at a glance: the answer in the first lines, every line within
the terminal's width, the full per-layer table only when asked or when it fits."""

from __future__ import annotations

import pytest
from click.testing import CliRunner
from conftest import FIXTURES, SHARED, needs_shared

from caffemem.cli import main

LENET = str(FIXTURES / "examples" / "lenet_train.prototxt")


def analyze(*args: str, columns: int = 80) -> list[str]:
    result = CliRunner().invoke(main, ["analyze", *args], env={"COLUMNS": str(columns)})
    assert result.exit_code == 0, result.output
    return result.output.splitlines()


@needs_shared
def test_googlenet_at_80_columns_fits_and_answers_in_the_first_lines():
    lines = analyze(str(SHARED / "models" / "bvlc_googlenet" / "train_val.prototxt"), "--input", "data=32,3,224,224", "--input", "label=32")
    assert max(len(line) for line in lines) <= 80
    head = "\n".join(lines[:12])
    assert "Caffe will allocate 2,630.05 MiB" in head and "prefetch batches" in head and "largest step: the Forward of layer 10 'conv2/norm2' (LRN) allocates 147.00 MiB" in head


def test_the_top_layers_come_largest_first_and_top_sets_how_many():
    lines = analyze(LENET, "--top", "3")
    start = next(i for i, line in enumerate(lines) if line.startswith("top 3 layers by bytes"))
    rows = [line for line in lines[start : start + 8] if line.startswith("│")]
    # pool1 4.22 MiB (Forward 0.70 + Backward 2.81 + buffers), fc1 3.37 MiB, conv1 3.07 MiB
    assert [row.split("│")[2].strip() for row in rows] == ["pool1", "fc1", "conv1"]


@pytest.mark.parametrize("flag", ["--layers-table", "-v"])
def test_the_full_table_is_printed_when_asked(flag):
    lines = analyze(LENET, flag)
    assert any("bottoms → tops" in line for line in lines)


def test_the_full_table_is_left_out_when_it_does_not_fit():
    lines = analyze(LENET)  # not a terminal: the summary only, and how to get the rest
    assert not any("bottoms → tops" in line for line in lines)
    assert any("--layers-table" in line for line in lines)

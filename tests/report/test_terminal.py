"""The terminal report reads at a glance: the answer in the first lines, every line within
the terminal's width, the full per-layer table only when asked or when it fits."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from conftest import FIXTURES, SHARED, needs_shared

from caffemem.cli import main

LENET = str(FIXTURES / "examples" / "lenet_train.prototxt")
SOLVER = str(FIXTURES / "check" / "models" / "lenet_solver.prototxt")
LAYERS = str(FIXTURES / "layers" / "common.prototxt")


def analyze(*args: str, columns: int = 80, command: str = "analyze") -> list[str]:
    result = CliRunner().invoke(main, [command, *args], env={"COLUMNS": str(columns)})
    assert result.exit_code == 0, result.output
    return result.output.splitlines()


def as_json(*args: str, command: str = "analyze") -> dict:
    result = CliRunner().invoke(main, [command, *args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


@needs_shared
def test_googlenet_at_80_columns_fits_and_answers_in_the_first_lines():
    lines = analyze(str(SHARED / "models" / "bvlc_googlenet" / "train_val.prototxt"), "--input", "data=32,3,224,224", "--input", "label=32")
    assert max(len(line) for line in lines) <= 80
    head = "\n".join(lines[:12])
    assert lines[0] == "GoogleNet — net (TRAIN, batch 32, float32)"
    assert lines[1] == "Caffe will allocate 2,630.05 MiB (2.57 GiB) for this net (2,757,806,232 bytes)"
    assert "prefetch batches" in head and "largest step: the Forward of layer 10 'conv2/norm2' (LRN) allocates 147.00 MiB" in head


def test_the_top_layers_come_largest_first_and_top_sets_how_many():
    lines = analyze(LENET, "--top", "3")
    start = next(i for i, line in enumerate(lines) if line.startswith("top 3 layers by bytes"))
    rows = [line for line in lines[start : start + 8] if line.startswith("│")]
    # pool1 4.22 MiB (Forward 0.70 + Backward 2.81 + buffers), fc1 3.37 MiB, conv1 3.07 MiB
    assert [row.split("│")[2].strip() for row in rows] == ["pool1", "fc1", "conv1"]


@pytest.mark.parametrize("flag", ["--layers-table", "-v"])
def test_the_full_table_is_printed_when_asked(flag):
    lines = analyze(LENET, flag, columns=300)
    assert any("bottoms → tops" in line for line in lines)


def test_the_full_table_asked_for_where_it_is_wider_is_a_paragraph_a_layer():
    # Issue 34: at 80 columns the table ran to 239.
    lines = analyze(LENET, "--layers-table")
    assert not any("bottoms → tops" in line for line in lines) and max(len(line) for line in lines) <= 80
    start = next(i for i, line in enumerate(lines) if line.startswith("every layer, one a paragraph (as a table: "))
    conv1 = next(line for line in lines[start:] if line.startswith("   1 "))
    assert conv1 == "   1 conv1 ◀ peak (Convolution): data → conv1 [64×20×24×24]; params 20×1×5×5,"


def test_the_full_table_is_left_out_when_it_does_not_fit():
    lines = analyze(LENET)  # not a terminal: the summary only, and how to get the rest
    assert not any("bottoms → tops" in line for line in lines)
    assert any("--layers-table" in line for line in lines)


# ----------------------------------------------------------------------------- the answer first


@pytest.mark.parametrize("device", ["cpu", "gpu"])
def test_a_solvers_training_process_is_the_first_line_and_the_jsons_total(device):
    lines = analyze(SOLVER, "--device", device, columns=200)
    total = as_json(SOLVER, "--device", device)["total_bytes"]
    # LeNet's solver: the train net at batch 64, its SGD history and the test net at batch 64.
    where = " on one card" if device == "gpu" else ""
    assert lines[0] == f"Training{where}: {total / 2**20:,.2f} MiB ({total / 2**30:.2f} GiB) — train batch 64, test batch 64"
    assert any(line.startswith("│ total while all are alive") for line in lines[:8])


@pytest.mark.parametrize("device", ["cpu", "gpu"])
def test_the_headline_states_the_jsons_total_bytes(device):
    lines = analyze(LENET, "--device", device, columns=200)
    total = as_json(LENET, "--device", device)["total_bytes"]
    figure = f"{total / 2**20:,.2f} MiB ({total / 2**30:.2f} GiB)"
    assert lines[0] == "lenet_example — net (TRAIN, batch 64, float32)"
    expected = f"A GPU run holds {figure} on the card (cudnn engine; " if device == "gpu" else f"Caffe will allocate {figure} for this net ({total:,} bytes)"
    assert lines[1].startswith(expected)


def test_gpu_mode_gives_the_largest_step_on_the_card_and_no_unlabelled_cpu_figure():
    lines = analyze(LENET, "--device", "gpu", columns=200)
    # conv1's Forward cudaMallocs its 64×20×24×24 top (2.81 MiB) and its column buffer.
    assert lines[2] == "largest step on the card: the Forward of layer 1 'conv1' (Convolution) allocates 3.01 MiB"
    cpu = as_json(LENET, "--device", "gpu")["cpu_total_bytes"]
    assert not any(f"{cpu / 2**20:,.2f} MiB" in line for line in lines)
    # (723.04 MiB before its SoftmaxWithLoss's inner cuDNN Softmax handle was counted: issue 32)
    assert any("a GPU run holds 732.55 MiB on the card: the log counts" in line for line in lines)


def test_the_host_column_is_in_mib_throughout():
    lines = analyze(LENET, "--device", "gpu", columns=200)
    table = lines[lines.index(next(line for line in lines if "┃ cause" in line)) :][:14]
    rows = [line.split("│") for line in table if line.startswith("│")]
    cells = [cell.strip() for row in rows for cell in row[2:4] if cell.strip()]
    assert cells and all(cell.endswith(" MiB") for cell in cells), cells


def test_gpu_caveats_are_one_line_per_output_pointing_to_the_guide():
    for command, args in (("analyze", (SOLVER,)), ("optimize", (LENET,))):
        result = CliRunner().invoke(main, [command, *args, "--device", "gpu"], env={"COLUMNS": "400"})
        caveats = [line for line in result.output.splitlines() if "kernels loaded lazily not counted" in line]
        assert len(caveats) == 1 and caveats[0].endswith("— user guide: GPU mode (docs/gpu-mode.md)"), caveats
        assert "../shared" not in result.output and "benchmarks/" not in result.output and result.output.count(".md") == 1
        document = json.dumps(as_json(*args, "--device", "gpu", command=command))
        assert document.count("kernels loaded lazily not counted") == 1 and "../shared" not in document and "benchmarks/" not in document


def test_flatten_is_not_said_to_copy_its_blobs():
    notes = as_json(LAYERS, "--device", "gpu")["gpu"]["notes"]
    # flatten_layer.cpp: top->ShareData(*bottom[0]); bottom[0]->ShareDiff(*top[0]).
    assert "no GPU code, nothing copied (the top shares memory already there): Flatten, Parameter, Reshape" in notes
    assert not any("copied both ways" in note and "Flatten" in note for note in notes)


def test_optimize_answers_first_with_the_plan_against_stock_and_the_fork():
    lines = analyze(LENET, "--phase", "TRAIN", columns=200, command="optimize")
    bytes_ = as_json(LENET, "--phase", "TRAIN", command="optimize")["bytes"]
    figure = {name: f"{n / 2**20:,.2f} MiB ({n / 2**30:.2f} GiB)" for name, n in bytes_.items()}
    assert lines[0] == f"TRAIN, batch 64: caffemem's plan {figure['planned']} against stock Caffe's {figure['stock']} and the memory-multiloading fork's (yjxiong/caffe) {figure['fork']}"
    # LeNet's packed plan is one slot; the stock row compares with itself.
    title = " ".join(line.strip() for line in lines[1:4])  # the table's title, wrapped to the table
    assert "plan 'packed', 1 shared slot " in title and "slots" not in title
    stock_row = next(line for line in lines if line.startswith("│ stock Caffe"))
    assert stock_row.split("│")[3].strip() == "0.0%" and not any("-0.0%" in line for line in lines)


@needs_shared
def test_googlenets_training_process_is_the_first_line_of_its_solvers_analysis():
    solver = str(SHARED / "models" / "bvlc_googlenet" / "solver.prototxt")
    args = (solver, "--input", "data=3,224,224", "--device", "gpu")
    lines = analyze(*args)
    total = as_json(*args)["total_bytes"]
    # The solver trains at batch 32 and tests at 50 (train_val.prototxt's batch_size lines).
    assert lines[0].startswith(f"Training on one card: {total / 2**20:,.2f} MiB ({total / 2**30:.2f} GiB)") and "train batch 32, test batch 50" in " ".join(lines[:2])
    assert any("total while all are alive" in line and f"│ {total / 2**20:,.2f} MiB │" in line for line in lines[:8])

"""Runtime patch v4 (issue 23): the patched Caffe runs again, inside Net::Backward, the
Forwards that mem_param's recompute entries list (util/mem_recompute.cpp), and stays
bit-identical to stock Caffe: outputs, weights and gradients over several SGD iterations,
BatchNorm in TRAIN included (its running averages restored around the second Forward).
First with hand-written tables, then with `caffemem optimize --recompute` on a BatchNorm
net, an Inception net (GoogLeNet) and a net with Dropout (AlexNet), every policy: the heap
the process grew is stock's less the predicted saving (within 2% of stock, as
test_runtime_nets.py). A table that does not match the net stops at Net::Init with the
LOG(FATAL) message."""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
from runtime_caffe import CAFFEMEM, REPO, heap, optimize, patched_caffe, stock_caffe  # noqa: F401  (session fixtures)
from runtime_nets import RECOMPUTE_CASES, make_net

# conv -> BatchNorm -> Scale -> ReLU, then the next convolution, whose Backward reads the
# chain's output: the chain's Forwards run again just before it (tops kept apart, so that
# each Forward has its input when it runs again).
NET = """name: "bn_chain"
layer { name: "data" type: "Input" top: "data" top: "label"
        input_param { shape { dim: 4 dim: 3 dim: 12 dim: 12 } shape { dim: 4 } } }
layer { name: "conv1" type: "Convolution" bottom: "data" top: "conv1"
        convolution_param { num_output: 8 kernel_size: 3 pad: 1 weight_filler { type: "gaussian" std: 0.1 } } }
layer { name: "bn1" type: "BatchNorm" bottom: "conv1" top: "bn1" }
layer { name: "scale1" type: "Scale" bottom: "bn1" top: "scale1" scale_param { bias_term: true } }
layer { name: "relu1" type: "ReLU" bottom: "scale1" top: "scale1" }
layer { name: "conv2" type: "Convolution" bottom: "scale1" top: "conv2"
        convolution_param { num_output: 8 kernel_size: 3 pad: 1 weight_filler { type: "gaussian" std: 0.1 } } }
layer { name: "bn2" type: "BatchNorm" bottom: "conv2" top: "conv2" }
layer { name: "pool" type: "Pooling" bottom: "conv2" top: "pool" pooling_param { pool: AVE kernel_size: 2 stride: 2 } }
layer { name: "ip" type: "InnerProduct" bottom: "pool" top: "ip" inner_product_param { num_output: 10 weight_filler { type: "xavier" } } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "ip" bottom: "label" top: "loss" }
"""
ITERS = 3


def _entry(layer: str, before: str, restore: bool = False, phase: str = "TRAIN") -> str:
    return f'  recompute {{ phase: {phase} layer: "{layer}" before: "{before}"' + (" restore_params: true" if restore else "") + " }\n"


CHAIN = _entry("bn1", "conv2", restore=True) + _entry("scale1", "conv2") + _entry("relu1", "conv2")


def _write(tmp_path: Path, name: str, table: str | None) -> Path:
    path = tmp_path / f"{name}.prototxt"
    path.write_text(NET + ("" if table is None else "mem_param {\n" + table + "}\n"))
    return path


def _dumps(stock_caffe, patched_caffe, tmp_path: Path, table: str) -> tuple[str, str]:
    stock_caffe.run(_write(tmp_path, "stock", None), "TRAIN", ITERS, tmp_path / "stock.dump")
    patched_caffe.run(_write(tmp_path, "table", table), "TRAIN", ITERS, tmp_path / "patched.dump")
    return (tmp_path / "stock.dump").read_text(), (tmp_path / "patched.dump").read_text()


def _params(dump: str, layer: str) -> list[str]:
    return [line for line in dump.splitlines() if line.startswith(f"param_data {layer}#")]


def test_a_chain_run_again_before_the_next_backward_is_bit_identical(stock_caffe, patched_caffe, tmp_path):
    """A table of recompute entries and no slots is legal: the chain's Forwards run a second
    time and every output, weight and gradient is the stock one."""
    stock, patched = _dumps(stock_caffe, patched_caffe, tmp_path, CHAIN)
    assert patched == stock
    assert len(_params(stock, "bn1")) == 3  # mean, variance, the moving-average factor


def test_without_restore_params_the_batchnorm_averages_move_twice(stock_caffe, patched_caffe, tmp_path):
    """The Forwards do run again: without restore_params, BatchNorm updates its running
    averages a second time each iteration (so the planner must ask for restore_params);
    the gradients, computed from the batch's own statistics, are still the stock ones."""
    table = CHAIN.replace(" restore_params: true", "")
    stock, patched = _dumps(stock_caffe, patched_caffe, tmp_path, table)
    assert _params(patched, "bn1") != _params(stock, "bn1")
    assert _params(patched, "bn2") == _params(stock, "bn2")
    outputs = [line for line in stock.splitlines() if line.startswith(("iter", "output", "param_diff"))]
    assert [line for line in patched.splitlines() if line.startswith(("iter", "output", "param_diff"))] == outputs


def test_entries_of_the_other_phase_are_not_run(stock_caffe, patched_caffe, tmp_path):
    table = CHAIN.replace(" restore_params: true", "").replace("phase: TRAIN", "phase: TEST")
    stock, patched = _dumps(stock_caffe, patched_caffe, tmp_path, table)
    assert patched == stock


def _timed(patched_caffe, path: Path, dump: Path) -> list[str]:
    """The patched harness on ``path`` with CAFFEMEM_RECOMPUTE_TIMES=1: the runtime's line
    per recomputed Forward, less its time (``relu1 before conv2: Reshape skipped``)."""
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", CAFFEMEM_RECOMPUTE_TIMES="1", GLOG_minloglevel="0")
    proc = subprocess.run([str(patched_caffe.harness), str(path), "train", str(ITERS), str(dump)], capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    found = re.findall(r"mem_param recompute: (\S+ before \S+): [0-9.e+-]+ us, (Reshape \w+)", proc.stderr)
    return [f"{entry}: {reshape}" for entry, reshape in found]


def test_a_recomputed_forward_skips_the_reshape_its_forward_pass_ran(stock_caffe, patched_caffe, tmp_path):
    """Issue 33: Layer::Forward reshapes first (layer.hpp), and the same iteration's Forward
    pass already did it for the same bottoms; a layer none of whose buffers a slot binds
    runs its second Forward without it (on the card a cuDNN convolution's Reshape asks
    cuDNN for three algorithms), and every output, weight and gradient stays the stock one."""
    stock_caffe.run(_write(tmp_path, "stock", None), "TRAIN", ITERS, tmp_path / "stock.dump")
    lines = _timed(patched_caffe, _write(tmp_path, "table", CHAIN), tmp_path / "patched.dump")
    assert lines == ["bn1 before conv2: Reshape skipped", "scale1 before conv2: Reshape skipped", "relu1 before conv2: Reshape skipped"] * ITERS
    assert (tmp_path / "patched.dump").read_text() == (tmp_path / "stock.dump").read_text()


def test_a_layer_whose_buffer_a_slot_binds_reshapes_again(stock_caffe, patched_caffe, tmp_path):
    """BatchNorm's Reshape fills its sum multipliers with ones; bound to a slot, another
    storage may have written there since, so its recomputed Forward reshapes as the first."""
    slot = '  slot { id: 0 bytes: 16 phase: TRAIN member { blob: "2:bn1/batch_sum_multiplier" kind: "data" } }\n'
    stock_caffe.run(_write(tmp_path, "stock", None), "TRAIN", ITERS, tmp_path / "stock.dump")
    lines = _timed(patched_caffe, _write(tmp_path, "table", CHAIN + slot), tmp_path / "patched.dump")
    assert lines == ["bn1 before conv2: Reshape run", "scale1 before conv2: Reshape skipped", "relu1 before conv2: Reshape skipped"] * ITERS
    assert (tmp_path / "patched.dump").read_text() == (tmp_path / "stock.dump").read_text()


@pytest.mark.parametrize(
    ("table", "says"),
    [
        (_entry("bn9", "conv2"), "mem_param recompute: bn9 is not a layer of net bn_chain (phase TRAIN)"),
        (_entry("bn1", "conv9"), "mem_param recompute: conv9 is not a layer of net bn_chain (phase TRAIN)"),
        (_entry("relu1", "bn1"), "mem_param recompute: relu1 runs again before the Backward of bn1, an earlier layer of net bn_chain (phase TRAIN)"),
        (_entry("relu1", "conv2", restore=True), "mem_param recompute: relu1 has no parameters to restore"),
        (_entry("bn1", "conv2", restore=True) + _entry("bn1", "conv2", restore=True), "mem_param recompute: bn1 before conv2 is listed twice"),
    ],
    ids=["unknown_layer", "unknown_before", "before_earlier_than_layer", "restore_without_params", "twice"],
)
def test_a_table_that_does_not_match_the_net_stops_with_a_message(patched_caffe, tmp_path, table, says):
    proc = patched_caffe.run(_write(tmp_path, "bad", table), "TRAIN", 1, tmp_path / "bad.dump", check=False)
    assert proc.returncode != 0
    assert says in proc.stderr and "rerun `caffemem optimize`" in proc.stderr
    assert "mem_recompute.cpp" in proc.stderr  # a LOG(FATAL)/CHECK of the runtime, not a crash


@pytest.mark.parametrize("table", [_entry("bn1", "conv2", restore=True), _entry("conv1", "bn1")], ids=["layer", "before"])
def test_an_entry_naming_a_name_two_layers_share_stops_with_a_message(patched_caffe, tmp_path, table):
    """Caffe lets layers share a name (issue 31): an entry naming one would run whichever
    layer the lookup kept; Net::Init stops instead, in the words of `caffemem verify`
    (tests/plan/test_unique_names.py)."""
    path = tmp_path / "shared_name.prototxt"
    path.write_text(NET.replace('name: "bn2"', 'name: "bn1"') + "mem_param {\n" + table + "}\n")
    proc = patched_caffe.run(path, "TRAIN", 1, tmp_path / "bad.dump", check=False)
    says = "mem_param recompute: bn1 names 2 layers of net bn_chain (phase TRAIN): Caffe lets layers share a name, but a recompute entry must name one layer; give each its own name"
    assert proc.returncode != 0 and says in proc.stderr and "rerun `caffemem optimize`" in proc.stderr
    assert "mem_recompute.cpp" in proc.stderr


# ----------------------------------------------------------------------------- planned tables

POLICIES = ("cheap", "sqrt", "budget")


@dataclass(frozen=True)
class _Stock:
    net: Path
    dump: str
    heap_peak: int
    planned_without: int  # optimize --share-buffers: the plan without recomputation
    planned_sqrt: int


def _planned(doc: dict) -> dict:
    return next(p for p in doc["phases"] if p["phase"] == "TRAIN")


@pytest.fixture(scope="module")
def stock_run(stock_caffe, tmp_path_factory):
    """Per case, once: the net, stock Caffe's run of it, and the plans a budget lies between."""
    done: dict[str, _Stock] = {}

    def run(case) -> _Stock:
        if case.name not in done:
            tmp = tmp_path_factory.mktemp(case.name)
            net = make_net(case, tmp)
            proc = stock_caffe.run(net, case.phase, case.iters, tmp / "stock.dump")
            without = _planned(optimize(net, tmp / "without.prototxt", "--phase", "train", "--share-buffers"))["bytes"]["planned"]
            sqrt = _planned(optimize(net, tmp / "sqrt.prototxt", "--phase", "train", "--recompute", "sqrt"))["bytes"]["planned"]
            done[case.name] = _Stock(net, (tmp / "stock.dump").read_text(), heap(proc)["heap_peak"], without, sqrt)
        return done[case.name]

    return run


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("case", RECOMPUTE_CASES, ids=[c.name for c in RECOMPUTE_CASES])
def test_a_recompute_plan_trains_bit_identically_at_the_predicted_saving(case, policy, stock_run, patched_caffe, tmp_path):
    stock = stock_run(case)
    budget = (stock.planned_without + stock.planned_sqrt) // 2
    option = f"budget={budget}" if policy == "budget" else policy
    optimized = tmp_path / f"{case.name}.{policy}.prototxt"
    entry = _planned(optimize(stock.net, optimized, "--phase", "train", "--recompute", option))
    assert entry["recompute"]["layers"] > 0  # the plan does run Forwards again
    if policy == "budget":
        assert entry["bytes"]["planned"] <= budget
    if case.name == "batchnorm":  # BatchNorm among them: its averages saved and restored
        assert entry["recompute"]["restored_param_bytes"] > 0

    patched = patched_caffe.run(optimized, case.phase, case.iters, tmp_path / "patched.dump")
    assert (tmp_path / "patched.dump").read_text() == stock.dump

    expected = stock.heap_peak - entry["savings"]["bytes"]
    measured = heap(patched)["heap_peak"]
    assert abs(measured - expected) <= 0.02 * stock.heap_peak, (
        f"{case.name} ({option}): stock {stock.heap_peak} B, patched {measured} B, predicted {expected} B; off by {(measured - expected) / stock.heap_peak:+.2%} of stock"
    )


@pytest.mark.parametrize("before", ["no_such_layer", "data"], ids=["unknown_before", "before_earlier_than_layer"])
def test_verify_says_what_the_patched_caffe_says_of_an_edited_recompute_entry(patched_caffe, tmp_path, before):
    """`caffemem verify` checks a file's recompute entries as Net::Init does, word for word."""
    case = RECOMPUTE_CASES[0]
    optimized = tmp_path / "planned.prototxt"
    optimize(make_net(case, tmp_path), optimized, "--phase", "train", "--recompute", "cheap")
    head, table = optimized.read_text().split("mem_param {", 1)
    edited = tmp_path / "edited.prototxt"
    edited.write_text(head + "mem_param {" + re.sub(r'before: "[^"]*"', f'before: "{before}"', table, count=1))
    checked = subprocess.run([CAFFEMEM, "verify", str(edited), "--phase", "TRAIN"], capture_output=True, text=True, cwd=REPO)
    assert checked.returncode == 1, checked.stdout + checked.stderr
    stops = "the patched Caffe stops at Net::Init: "
    (said,) = [line.split(stops, 1)[1] for line in checked.stdout.splitlines() if stops in line]
    proc = patched_caffe.run(edited, "TRAIN", 1, tmp_path / "edited.dump", check=False)
    assert proc.returncode != 0
    assert said.startswith("mem_param recompute: ") and said in proc.stderr

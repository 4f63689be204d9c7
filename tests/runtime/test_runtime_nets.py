"""Stock BVLC Caffe on a net vs caffemem-patched Caffe on `caffemem optimize -o`'s file:
outputs, weights and gradients bit-identical over SGD iterations, and the heap the
process grew equal to stock minus optimize's predicted saving (within 2% of stock).
Also: the patched build without a table behaves as stock, `caffe train --solver` gives
the same loss sequence, and a table that does not match the net stops with the
LOG(FATAL) message."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from runtime_caffe import CAFFEMEM, REPO, heap, optimize, patched_caffe, stock_caffe  # noqa: F401  (session fixtures)
from runtime_nets import CASES, make_net

PLANS = {"blobs": (), "shared_buffers": ("--share-buffers",)}


def _phase_entry(doc: dict, phase: str) -> dict:
    return next(p for p in doc["phases"] if p["phase"] == phase)


@pytest.mark.parametrize("plan", sorted(PLANS))
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_optimized_net_is_bit_identical_at_the_predicted_saving(case, plan, stock_caffe, patched_caffe, tmp_path):
    net = make_net(case, tmp_path)
    optimized = tmp_path / f"{case.name}.{plan}.prototxt"
    doc = optimize(net, optimized, "--phase", case.phase.lower(), *PLANS[plan])
    saving = _phase_entry(doc, case.phase)["savings"]["bytes"]

    stock = stock_caffe.run(net, case.phase, case.iters, tmp_path / "stock.dump")
    patched = patched_caffe.run(optimized, case.phase, case.iters, tmp_path / "patched.dump")
    assert (tmp_path / "patched.dump").read_text() == (tmp_path / "stock.dump").read_text()

    stock_bytes, patched_bytes = heap(stock)["heap_peak"], heap(patched)["heap_peak"]
    expected = stock_bytes - saving
    assert abs(patched_bytes - expected) <= 0.02 * stock_bytes, (
        f"{case.name} ({plan}): stock {stock_bytes} B, patched {patched_bytes} B, predicted {expected} B (saving {saving} B); off by {(patched_bytes - expected) / stock_bytes:+.2%} of stock"
    )


@pytest.mark.parametrize("case", [c for c in CASES if c.name in ("lenet", "batchnorm", "siamese")], ids=lambda c: c.name)
def test_patched_caffe_without_a_table_behaves_as_stock(case, stock_caffe, patched_caffe, tmp_path):
    net = make_net(case, tmp_path)
    stock = stock_caffe.run(net, case.phase, case.iters, tmp_path / "stock.dump")
    patched = patched_caffe.run(net, case.phase, case.iters, tmp_path / "patched.dump")
    assert (tmp_path / "patched.dump").read_text() == (tmp_path / "stock.dump").read_text()
    # the same allocations, but for protobuf building the (three messages larger) caffe.proto
    # descriptor on first use, a few KiB once per process
    assert abs(heap(patched)["heap_peak"] - heap(stock)["heap_peak"]) <= max(0.001 * heap(stock)["heap_peak"], 16384)


def _lenet(tmp_path):
    case = next(c for c in CASES if c.name == "lenet")
    return case, make_net(case, tmp_path)


SOLVER = """net: "{net}"
base_lr: 0.01
momentum: 0.9
weight_decay: 0.0005
lr_policy: "inv"
gamma: 0.0001
power: 0.75
display: 1
max_iter: 6
test_iter: 2
test_interval: 3
snapshot: 0
random_seed: 1701
solver_mode: CPU
"""


def _losses(log: str) -> list[str]:
    """The loss lines of a `caffe train` log, without the timing BVLC prints in them."""
    out = []
    for line in log.splitlines():
        m = re.search(r"Iteration (\d+).*, loss = (\S+)", line)
        if m:
            out.append(f"iteration {m[1]} loss {m[2]}")
        m = re.search(r"((?:Test|Train) net output #\d+: .*)", line)
        if m:
            out.append(m[1])
    return out


def test_caffe_train_solver_gives_the_stock_loss_sequence(stock_caffe, patched_caffe, tmp_path):
    case, net = _lenet(tmp_path)
    optimized = tmp_path / "lenet.opt.prototxt"
    optimize(net, optimized, "--share-buffers")  # both phases: the solver's train and test nets
    logs = {}
    for name, caffe, file in (("stock", stock_caffe, net), ("patched", patched_caffe, optimized)):
        solver = tmp_path / f"{name}_solver.prototxt"
        solver.write_text(SOLVER.format(net=file))
        proc = subprocess.run([str(caffe.tool), "train", f"--solver={solver}"], capture_output=True, text=True, env={"OPENBLAS_NUM_THREADS": "1", "GLOG_logtostderr": "1"})
        assert proc.returncode == 0, proc.stderr[-3000:]
        logs[name] = proc.stderr
    assert logs["patched"].count("mem_param:") == 2  # train net and test net
    assert len(_losses(logs["stock"])) >= 6
    assert _losses(logs["patched"]) == _losses(logs["stock"])


def _fatal(caffe, net, phase, tmp_path):
    proc = caffe.run(net, phase, 1, tmp_path / "bad.dump", check=False)
    assert proc.returncode != 0
    return proc.stderr


def test_table_from_another_batch_size_stops_with_a_message(patched_caffe, tmp_path):
    case, net = _lenet(tmp_path)
    bigger = tmp_path / "lenet8.prototxt"
    bigger.write_text(net.read_text().replace("dim: 4\n", "dim: 8\n"))
    optimized = tmp_path / "lenet8.opt.prototxt"
    optimize(bigger, optimized, "--phase", "train")
    # the batch-8 table on the batch-4 net
    swapped = tmp_path / "lenet_swapped.prototxt"
    swapped.write_text(optimized.read_text().replace("dim: 8\n", "dim: 4\n"))
    err = _fatal(patched_caffe, swapped, "TRAIN", tmp_path)
    assert "another batch size" in err and "rerun `caffemem optimize`" in err
    assert "mem_slots.cpp" in err  # a LOG(FATAL)/CHECK of the runtime, not a crash


def test_verify_says_what_the_patched_caffe_says_of_a_table_for_another_batch(patched_caffe, tmp_path):
    case, net = _lenet(tmp_path)
    at8 = tmp_path / "lenet.b8.prototxt"
    optimize(net, at8, "--phase", "train", "--batch", "8")  # the net rewritten at batch 8, with its table
    back = tmp_path / "lenet.back.prototxt"  # the same table on the file's own batch lines
    back.write_text(net.read_text().rstrip("\n") + "\nmem_param {" + at8.read_text().split("mem_param {", 1)[1])
    checked = subprocess.run([CAFFEMEM, "verify", str(back), "--phase", "TRAIN"], capture_output=True, text=True, cwd=REPO)
    assert checked.returncode == 1, checked.stdout + checked.stderr
    stops = "the patched Caffe stops at Net::Init: "
    (said,) = [line.split(stops, 1)[1] for line in checked.stdout.splitlines() if stops in line]
    err = _fatal(patched_caffe, back, "TRAIN", tmp_path)
    assert said in err  # word for word the runtime's LOG(FATAL)


def test_table_of_an_edited_net_stops_naming_the_blob(patched_caffe, tmp_path):
    case, net = _lenet(tmp_path)
    optimized = tmp_path / "lenet.opt.prototxt"
    optimize(net, optimized, "--phase", "train")
    edited = tmp_path / "lenet_edited.prototxt"
    text = optimized.read_text()
    head, table = text.split("mem_param", 1)
    edited.write_text(head.replace('"ip1"', '"fc1"') + "mem_param" + table)
    err = _fatal(patched_caffe, edited, "TRAIN", tmp_path)
    assert "blob ip1 of mem_param slot" in err and "rerun `caffemem optimize`" in err


def test_table_for_the_other_phase_changes_nothing(stock_caffe, patched_caffe, tmp_path):
    case, net = _lenet(tmp_path)
    optimized = tmp_path / "lenet.opt.prototxt"
    optimize(net, optimized, "--phase", "train")
    stock = stock_caffe.run(net, "TEST", 1, tmp_path / "stock.dump")
    patched = patched_caffe.run(optimized, "TEST", 1, tmp_path / "patched.dump")
    assert (tmp_path / "patched.dump").read_text() == (tmp_path / "stock.dump").read_text()
    assert abs(heap(patched)["heap_peak"] - heap(stock)["heap_peak"]) <= max(0.001 * heap(stock)["heap_peak"], 16384)


def test_a_plan_made_for_the_card_runs_bit_identical_in_a_caffe_without_cudnn(stock_caffe, patched_caffe, tmp_path):
    """`--device gpu --share-buffers` plans with the GPU code's reads and writes; the cuDNN
    convolutions' workspaces are runtime v6's pool, in no slot (patch v3 to v5 slotted
    them); a CPU-only Caffe builds Caffe's own convolutions, binds the table and the run is
    stock's, bit for bit."""
    case, net = _lenet(tmp_path)
    optimized = tmp_path / "lenet.gpu.prototxt"
    optimize(net, optimized, "--phase", "train", "--share-buffers", "--device", "gpu")
    assert "cudnn_workspace" not in optimized.read_text()
    stock_caffe.run(net, "TRAIN", case.iters, tmp_path / "stock.dump")
    patched_caffe.run(optimized, "TRAIN", case.iters, tmp_path / "patched.dump")
    assert (tmp_path / "patched.dump").read_text() == (tmp_path / "stock.dump").read_text()


@pytest.mark.parametrize("device", ["cpu", "gpu"])
@pytest.mark.parametrize("phase", ["TRAIN", "TEST"])
def test_an_lstm_nets_shared_buffer_table_binds_and_runs_bit_identical(phase, device, stock_caffe, patched_caffe, tmp_path):
    """The GPU kit's LRCN runs stopped at Net::Init ("blob 20:lstm1/unrolled/W_xc_x ... is
    not a blob or layer buffer this Caffe can bind"): RecurrentLayer's unrolled net is a Net
    of its own, whose blobs patch v3 cannot name.  The table keeps them private, in the
    tables of both modes, and the run is stock's, bit for bit."""
    case = next(c for c in CASES if c.name == "lstm")
    net = make_net(case, tmp_path)
    optimized = tmp_path / f"lstm.{device}.prototxt"
    optimize(net, optimized, "--phase", phase.lower(), "--share-buffers", "--device", device)
    text = optimized.read_text()
    # conv1's column buffer is shared in CPU mode; on the card conv1 is cuDNN's (no column
    # buffer), and its workspace is runtime v6's pool, in no slot.
    assert "/unrolled/" not in text and ('"1:conv1/' in text) == (device == "cpu")
    stock_caffe.run(net, phase, case.iters, tmp_path / "stock.dump")
    patched_caffe.run(optimized, phase, case.iters, tmp_path / "patched.dump")
    assert (tmp_path / "patched.dump").read_text() == (tmp_path / "stock.dump").read_text()


def test_a_reshape_that_outgrows_the_slots_falls_back_with_one_warning(stock_caffe, patched_caffe, tmp_path, monkeypatch):
    case, net = _lenet(tmp_path)
    optimized = tmp_path / "lenet.opt.prototxt"
    optimize(net, optimized, "--phase", "train", "--share-buffers")
    monkeypatch.setenv("CAFFEMEM_HARNESS_RESHAPE", "8")  # batch 4 -> 8 after the planned iterations
    stock_caffe.run(net, "TRAIN", 2, tmp_path / "stock.dump")
    patched = patched_caffe.run(optimized, "TRAIN", 2, tmp_path / "patched.dump")
    assert "reshaped 8" in (tmp_path / "patched.dump").read_text()
    assert (tmp_path / "patched.dump").read_text() == (tmp_path / "stock.dump").read_text()
    warnings = [line for line in patched.stderr.splitlines() if "outgrew their slots" in line]
    assert len(warnings) == 1 and "conv1 (data)" in warnings[0]


def _caffe(caffe, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(caffe.tool), *args], capture_output=True, text=True, env={"OPENBLAS_NUM_THREADS": "1", "GLOG_logtostderr": "1"})


def test_caffe_test_and_time_run_the_optimized_file(stock_caffe, patched_caffe, tmp_path):
    case, net = _lenet(tmp_path)
    optimized = tmp_path / "lenet.opt.prototxt"
    optimize(net, optimized, "--share-buffers")
    solver = tmp_path / "solver.prototxt"  # weights to score: 6 iterations of stock training
    solver.write_text(SOLVER.format(net=net).replace("snapshot: 0", f'snapshot_prefix: "{tmp_path / "w"}"'))
    assert _caffe(stock_caffe, "train", f"--solver={solver}").returncode == 0
    weights = tmp_path / "w_iter_6.caffemodel"
    stock = _caffe(stock_caffe, "test", f"--model={net}", f"--weights={weights}", "--iterations=2")
    patched = _caffe(patched_caffe, "test", f"--model={optimized}", f"--weights={weights}", "--iterations=2")
    assert stock.returncode == 0 and patched.returncode == 0, patched.stderr[-2000:]
    results = lambda log: re.findall(r"(Batch \d+, \S+ = \S+|\] \S+ = \S+)", log)  # noqa: E731
    assert results(patched.stderr) == results(stock.stderr) and results(stock.stderr)
    assert "mem_param:" in patched.stderr
    timed = _caffe(patched_caffe, "time", f"--model={optimized}", "--iterations=2")
    assert timed.returncode == 0, timed.stderr[-2000:]
    assert "mem_param:" in timed.stderr and "Average Forward-Backward" in timed.stderr


def test_snapshot_and_resume_continue_the_stock_loss_sequence(stock_caffe, patched_caffe, tmp_path):
    case, net = _lenet(tmp_path)
    optimized = tmp_path / "lenet.opt.prototxt"
    optimize(net, optimized, "--share-buffers")
    logs = {}
    for name, caffe, file in (("stock", stock_caffe, net), ("patched", patched_caffe, optimized)):
        solver = tmp_path / f"{name}_solver.prototxt"
        solver.write_text(SOLVER.format(net=file).replace("snapshot: 0", f'snapshot: 3\nsnapshot_prefix: "{tmp_path / name}"'))
        first = _caffe(caffe, "train", f"--solver={solver}")
        assert first.returncode == 0, first.stderr[-2000:]
        state = tmp_path / f"{name}_iter_3.solverstate"
        assert state.is_file()
        resumed = _caffe(caffe, "train", f"--solver={solver}", f"--snapshot={state}")
        assert resumed.returncode == 0, resumed.stderr[-2000:]
        logs[name] = (_losses(first.stderr), _losses(resumed.stderr))
    assert logs["patched"] == logs["stock"]
    assert logs["stock"][1] and logs["stock"][1][-1] == logs["stock"][0][-1]  # resuming reaches the same end


def test_pycaffe_net_runs_the_optimized_file(stock_caffe, patched_caffe, tmp_path):
    """pycaffe's caffe.Net (built for the system python3 by build_caffe.sh --pycaffe) on the
    optimized file: same loss and gradients as stock. Intermediate blobs live in shared slots,
    so reading one after Backward needs --exclude-blob (ip2 here), as with the fork."""
    if not Path("/usr/bin/python3").exists():
        pytest.skip("no system python3 for pycaffe")
    from runtime_caffe import build

    stock_tree, patched_tree = build("stock", "--pycaffe"), build("patched", "--pycaffe")  # the fixtures' trees, + pycaffe
    assert (stock_tree, patched_tree) == (stock_caffe.tree, patched_caffe.tree)
    case, net = _lenet(tmp_path)
    optimized = tmp_path / "lenet.opt.prototxt"
    optimize(net, optimized, "--phase", "train", "--share-buffers", "--exclude-blob", "ip2")
    script = Path(__file__).with_name("pycaffe_run.py")
    env = {"OPENBLAS_NUM_THREADS": "1", "GLOG_minloglevel": "1", "PATH": "/usr/bin:/bin"}
    runs = {}
    for name, tree, file in (("stock", stock_tree, net), ("patched", patched_tree, optimized)):
        proc = subprocess.run(["/usr/bin/python3", str(script), str(tree), str(file)], capture_output=True, text=True, env=env)
        assert proc.returncode == 0, proc.stderr[-2000:]
        runs[name] = proc.stdout
    assert runs["patched"] == runs["stock"] and len(runs["stock"].splitlines()) == 2

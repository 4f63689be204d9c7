"""The yjxiong/caffe action_recog fork (memory multiloading) patched by caffemem: an explicit
slot table wins over the fork's own dry-run optimizer, bit-identically, in less memory; a file
without our table keeps the fork's behaviour. Slow (builds the fork, ~5 min on 2 cores the
first time, cached after): run with `pytest -m slow tests/runtime/test_fork.py`."""

from __future__ import annotations

import pytest
from runtime_caffe import FORK_TARBALL, Caffe, build, compile_harness, heap, optimize
from runtime_nets import CASES, make_net, with_declared_inputs

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def fork_caffe(tmp_path_factory) -> Caffe:
    if not FORK_TARBALL.is_file():
        pytest.skip(f"{FORK_TARBALL} missing")
    tree = build("fork-patched")
    return Caffe(tree, compile_harness(tree, tmp_path_factory.mktemp("harness") / "harness_fork", fork=True))


def test_the_fork_runs_lenet_with_an_explicit_table(fork_caffe, tmp_path):
    case = next(c for c in CASES if c.name == "lenet")
    net = with_declared_inputs(make_net(case, tmp_path), tmp_path)  # the fork has no Input layer
    optimized = tmp_path / "lenet.opt.prototxt"
    doc = optimize(net, optimized, "--phase", "train")
    plain = tmp_path / "lenet.plain.prototxt"
    plain.write_text(net.read_text() + "mem_param { optimize_train: false }\n")

    runs = {}
    for name, file in (("fork_optimizer", net), ("no_optimizer", plain), ("caffemem_table", optimized)):
        proc = fork_caffe.run(file, "TRAIN", 2, tmp_path / f"{name}.dump")
        runs[name] = heap(proc)["heap_peak"]
    dumps = {name: (tmp_path / f"{name}.dump").read_text() for name in runs}
    assert dumps["caffemem_table"] == dumps["no_optimizer"] == dumps["fork_optimizer"]
    # the explicit table won over the fork's optimizer: the saving is caffemem's, not the fork's
    saving = next(p for p in doc["phases"] if p["phase"] == "TRAIN")["savings"]["bytes"]
    assert runs["caffemem_table"] < runs["fork_optimizer"] < runs["no_optimizer"]
    assert abs(runs["caffemem_table"] - (runs["no_optimizer"] - saving)) <= 0.02 * runs["no_optimizer"]


def test_the_fork_refuses_a_table_with_recompute_entries_when_parsing_it(fork_caffe, tmp_path):
    """Forwards run again in Backward are BVLC's only (patch v4): the fork's caffe.proto has
    no MemoryOptimizationParameter.recompute, so a file with such entries stops at parsing,
    before any layer is built, with protobuf's message naming the field."""
    case = next(c for c in CASES if c.name == "lenet")
    net = with_declared_inputs(make_net(case, tmp_path), tmp_path)
    planned = tmp_path / "lenet.recompute.prototxt"
    planned.write_text(net.read_text() + 'mem_param { recompute { phase: TRAIN layer: "relu1" before: "ip2" } }\n')
    proc = fork_caffe.run(planned, "TRAIN", 1, tmp_path / "recompute.dump", check=False)
    assert proc.returncode != 0
    assert 'has no field named "recompute"' in proc.stderr

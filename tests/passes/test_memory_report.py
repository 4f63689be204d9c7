"""What `analyze` reports beyond Caffe's own run: dtype, batch rescaling, solver history,
test nets sharing the train net's parameters, the JSON fields."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from conftest import FIXTURES, SHARED, needs_shared

from caffemem.api.analyze import Options, analyze
from caffemem.cli import main

LENET = str(FIXTURES / "examples" / "lenet_train.prototxt")
SOLVER = str(FIXTURES / "examples" / "lenet_solver.prototxt")
# conv1 20x1x5x5 + 20, conv2 50x20x5x5 + 50, fc1 500x800 + 500, fc2 10x500 + 10
LENET_PARAM_ELEMENTS = 500 + 20 + 25000 + 50 + 400000 + 500 + 5000 + 10
LENET_PARAM_AXES = 4 + 1 + 4 + 1 + 2 + 1 + 2 + 1  # a shape buffer holds 4 bytes per axis


def memory(path=LENET, **options):
    return analyze(path, Options(**options)).nets[0].memory


def test_caffes_log_figure_scales_with_the_dtype():
    assert memory(dtype="float16").memory_required_for_data * 2 == memory().memory_required_for_data


def test_parameters_take_half_the_bytes_in_float16():
    assert memory(dtype="float16").learnable_param_bytes == LENET_PARAM_ELEMENTS * 2


def test_batch_rescales_every_data_top():
    shaped = analyze(LENET, Options(batch=128)).nets[0].shaped
    assert shaped.blob_shapes["data"] == (128, 1, 28, 28)
    assert shaped.blob_shapes["label"] == (128,)
    assert shaped.blob_shapes["fc2"] == (128, 10)


def test_sgd_history_is_one_blob_per_parameter_plus_update_and_temp_shapes():
    process = analyze(SOLVER).process
    assert process.solver_type == "SGD"
    assert process.history_bytes == LENET_PARAM_ELEMENTS * 4 + 3 * 4 * LENET_PARAM_AXES


@pytest.mark.parametrize(
    "solver, data_blobs, blobs",
    [
        ("Nesterov", 2, 3),  # history and update_ hold data
        ("AdaGrad", 2, 3),
        ("RMSProp", 2, 3),
        ("AdaDelta", 4, 4),  # two histories, update_ and temp_
        ("Adam", 3, 4),  # m, v and temp_ (val_t)
    ],
)
def test_history_per_solver_type(tmp_path, solver, data_blobs, blobs):
    path = tmp_path / "solver.prototxt"
    path.write_text(open(SOLVER).read().replace('type: "SGD"', f'type: "{solver}"').replace('net: "lenet_train.prototxt"', f'net: "{LENET}"'))
    process = analyze(str(path)).process
    assert process.history_bytes == data_blobs * LENET_PARAM_ELEMENTS * 4 + blobs * 4 * LENET_PARAM_AXES


def test_test_net_shares_the_train_nets_parameters():
    analysis = analyze(SOLVER)
    train, test = analysis.nets
    assert (train.role, test.role, test.phase) == ("train", "test", "TEST")
    process = analysis.process
    assert process.tests[0].bytes == test.memory.heap_init + test.memory.heap_forward - LENET_PARAM_ELEMENTS * 4


def test_train_net_in_a_process_has_every_parameter_gradient():
    analysis = analyze(SOLVER)
    train = analysis.nets[0].memory
    assert analysis.process.train_bytes == train.total_bytes + train.untouched_param_diff_bytes
    assert analysis.process.total_bytes == analysis.process.train_bytes + analysis.process.history_bytes + analysis.process.tests[0].bytes


def test_json_has_the_ground_truths_fields():
    result = CliRunner().invoke(main, ["analyze", LENET, "--json"])
    document = json.loads(result.output)
    for key in ("phase", "blobs", "layers", "heap_init", "heap_forward", "heap_backward", "memory_required_for_data", "prefetch_bytes", "total_bytes", "by_category"):
        assert key in document
    conv1 = next(layer for layer in document["layers"] if layer["name"] == "conv1")
    for key in ("fwd_alloc", "bwd_alloc", "buffers", "params", "need_backward", "propagate_down"):
        assert key in conv1
    assert document["total_bytes"] == document["heap_init"] + document["heap_forward"] + document["heap_backward"]


@needs_shared
def test_shared_solver_counts_the_shared_parameters_once():
    analysis = analyze(str(SHARED / "models/bvlc_alexnet/solver.prototxt"), Options(inputs={"train:data": (256, 3, 227, 227), "test:data": (50, 3, 227, 227)}))
    train, test = analysis.nets
    assert train.memory.learnable_param_bytes == test.memory.learnable_param_bytes == 243860896
    # A Data layer keeps prefetch batches; its top's data lives in them.
    assert test.memory.prefetch_bytes > 4 * 50 * 3 * 227 * 227 * 4
    real_test_run = test.memory.heap_init + test.memory.heap_forward + test.memory.prefetch_bytes - test.memory.prefetched_input_bytes
    assert analysis.process.tests[0].bytes == real_test_run - 243860896

"""--batch (and fit) on recurrent nets: where each data top keeps its batch, read off the
net at the file's own batch (passes/shapes.py batch_axes).

recurrent_layer.cpp reads x as T x N x ... and cont as T x N.  LRCN computes its frames
T x N on axis 0 and reshapes them to T x N x ... before the LSTM (LisaAnne/lisa-caffe-public
examples/LRCN_activity_recognition/train_test_lstm_RGB.prototxt, 16 x 24 frames); --batch N
then means T x N frames, and the Reshapes that spell N out say N.
"""

from __future__ import annotations

import pytest
from conftest import SHARED, needs_shared

import caffemem
from caffemem.api.analyze import Options
from caffemem.api.fit import FitRequest, fit

LRCN = SHARED / "models" / "lrcn_activity_recognition" / "train_test_lstm_RGB.prototxt"


def net_file(tmp_path, frames: tuple[int, ...], reshape: str, cont_reshape: str = "dim: 3 dim: 2") -> str:
    """Built like LRCN's: frames (T x N = 6 here) -> conv -> fc -> Reshape to T x N x 10, clip
    markers (T x N,) -> Reshape to T x N, labels (T x N,) -> Reshape to T x N, LSTM, loss."""
    dims = " ".join(f"dim: {d}" for d in frames)
    text = f"""
layer {{ name: "data" type: "Input" top: "data" top: "clip_markers" top: "label"
  input_param {{ shape {{ {dims} }} shape {{ dim: 6 }} shape {{ dim: 6 }} }} }}
layer {{ name: "conv" type: "Convolution" bottom: "data" top: "conv" convolution_param {{ num_output: 4 kernel_size: 3 }} }}
layer {{ name: "fc" type: "InnerProduct" bottom: "conv" top: "fc" inner_product_param {{ num_output: 10 }} }}
layer {{ name: "reshape-data" type: "Reshape" bottom: "fc" top: "fc-reshape" reshape_param {{ shape {{ {reshape} }} }} }}
layer {{ name: "reshape-cm" type: "Reshape" bottom: "clip_markers" top: "cm" reshape_param {{ shape {{ {cont_reshape} }} }} }}
layer {{ name: "reshape-label" type: "Reshape" bottom: "label" top: "lab" reshape_param {{ shape {{ dim: 3 dim: 2 }} }} }}
layer {{ name: "lstm" type: "LSTM" bottom: "fc-reshape" bottom: "cm" top: "lstm" recurrent_param {{ num_output: 4 }} }}
layer {{ name: "fc8" type: "InnerProduct" bottom: "lstm" top: "fc8" inner_product_param {{ num_output: 5 axis: 2 }} }}
layer {{ name: "loss" type: "SoftmaxWithLoss" bottom: "fc8" bottom: "lab" top: "loss" softmax_param {{ axis: 2 }} }}
"""
    path = tmp_path / "lrcn_like.prototxt"
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize("reshape", ["dim: 3 dim: 2 dim: 10", "dim: -1 dim: 2 dim: 10", "dim: 3 dim: -1 dim: 10"])
def test_frames_are_t_times_the_batch_and_the_reshapes_say_the_batch(tmp_path, reshape):
    # T = 3, N = 2 at the file's batch (6 frames of 3x8x8).  --batch 5: 3 x 5 = 15 frames,
    # clip markers and labels; every Reshape to T x N says 3 x 5 (an explicit 2 is restated,
    # -1 is inferred); the LSTM gives (3, 5, 4), fc8 (3, 5, 5).
    net = caffemem.analyze(net_file(tmp_path, (6, 3, 8, 8), reshape), phase="TRAIN", batch=5).nets[0]
    shapes = {name: net.blobs[name] for name in ("data", "clip_markers", "label", "fc", "fc-reshape", "cm", "lab", "lstm", "fc8")}
    assert shapes == {
        "data": (15, 3, 8, 8), "clip_markers": (15,), "label": (15,), "fc": (15, 10),
        "fc-reshape": (3, 5, 10), "cm": (3, 5), "lab": (3, 5), "lstm": (3, 5, 4), "fc8": (3, 5, 5),
    }  # fmt: skip
    assert any("'data', 'clip_markers', 'label' hold T x N frames on axis 0 (T = 3 time steps" in note for note in net.shaped.notes)


def test_the_files_own_batch_changes_nothing(tmp_path):
    path = net_file(tmp_path, (6, 3, 8, 8), "dim: 3 dim: 2 dim: 10")
    as_written = caffemem.analyze(path, phase="TRAIN").nets[0]
    at_two = caffemem.analyze(path, phase="TRAIN", batch=2).nets[0]
    assert at_two.blobs == as_written.blobs and at_two.memory.total_bytes == as_written.memory.total_bytes


def test_a_data_top_that_is_neither_n_nor_t_by_n_is_an_error_saying_what_to_pass(tmp_path):
    # 12 rows of 5 reshaped to 3 x 2 x 10: 12 is neither N = 2 nor T x N = 6 (nor starts 3, 2).
    text = """
layer { name: "x" type: "Input" top: "x" top: "cont" input_param { shape { dim: 12 dim: 5 } shape { dim: 3 dim: 2 } } }
layer { name: "r" type: "Reshape" bottom: "x" top: "seq" reshape_param { shape { dim: 3 dim: 2 dim: 10 } } }
layer { name: "lstm" type: "LSTM" bottom: "seq" bottom: "cont" top: "h" recurrent_param { num_output: 4 } }
"""
    path = tmp_path / "odd.prototxt"
    path.write_text(text)
    assert caffemem.analyze(str(path), phase="TEST").nets[0].blobs["h"] == (3, 2, 4)  # without --batch: fine
    with pytest.raises(caffemem.CaffememError) as error:
        caffemem.analyze(str(path), phase="TEST", batch=4)
    message = str(error.value)
    assert "cannot tell where the batch is in 'x' [12, 5]" in message and "T=3 time steps x N=2 sequences" in message
    assert "leave out --batch and give the shapes of the batch you want with --input x=" in message
    assert "layer 'x'" in message


def test_a_time_major_data_top_before_an_embed_keeps_its_batch_on_axis_1(tmp_path):
    # LRCN captioning style: words T x N -> Embed -> T x N x D -> LSTM; cont T x N.
    text = """
layer { name: "in" type: "Input" top: "words" top: "cont" input_param { shape { dim: 4 dim: 2 } shape { dim: 4 dim: 2 } } }
layer { name: "embed" type: "Embed" bottom: "words" top: "embedded" embed_param { num_output: 8 input_dim: 100 } }
layer { name: "lstm" type: "LSTM" bottom: "embedded" bottom: "cont" top: "h" recurrent_param { num_output: 4 } }
"""
    path = tmp_path / "caption.prototxt"
    path.write_text(text)
    blobs = caffemem.analyze(str(path), phase="TEST", batch=5).nets[0].blobs
    assert (blobs["words"], blobs["embedded"], blobs["h"]) == ((4, 5), (4, 5, 8), (4, 5, 4))


@needs_shared
def test_lrcn_batch_sets_the_videos_per_batch():
    # sequence_input_layer.py: 16 frames x 24 videos; --batch 8: 128 frames, Reshapes 16 x 8.
    net = caffemem.analyze(str(LRCN), phase="TRAIN", batch=8).nets[0]
    shapes = {name: net.blobs[name] for name in ("data", "label", "clip_markers", "fc6-reshape", "reshape-cm", "reshape-label", "lstm1", "fc8-final")}
    assert shapes == {
        "data": (128, 3, 227, 227), "label": (128,), "clip_markers": (128,), "fc6-reshape": (16, 8, 4096),
        "reshape-cm": (16, 8), "reshape-label": (16, 8), "lstm1": (16, 8, 256), "fc8-final": (16, 8, 101),
    }  # fmt: skip
    as_written = caffemem.analyze(str(LRCN), phase="TRAIN").nets[0].memory.total_bytes
    assert caffemem.analyze(str(LRCN), phase="TRAIN", batch=24).nets[0].memory.total_bytes == as_written


@needs_shared
def test_fit_finds_the_videos_per_batch_of_lrcn():
    # Every batch but the file's 24 used to fail in the Reshape (16 x 24 x 4096 of fewer
    # frames).  Memory is linear in N here: the batch fit reports is the largest whose
    # analyze --batch total is within the budget.
    per_batch = {n: caffemem.analyze(str(LRCN), phase="TRAIN", batch=n).nets[0].memory.total_bytes for n in (10, 11)}
    budget = (per_batch[10] + per_batch[11]) // 2
    result = fit(str(LRCN), Options(phase="TRAIN"), FitRequest(gpu_memory=budget, reserve=0))
    assert result.search.batch == 10


def test_optimize_plans_the_frames_net_at_another_batch(tmp_path):
    from caffemem.api.optimize import OptimizeSettings, optimize
    from caffemem.plan.verify import verify_plan

    path = net_file(tmp_path, (6, 3, 8, 8), "dim: 3 dim: 2 dim: 10")
    result = optimize(path, Options(phase="TRAIN", batch=5), OptimizeSettings())
    assert result.phases
    for phase in result.phases:
        assert phase.shaped.blob_shapes["data"] == (15, 3, 8, 8)
        assert verify_plan(phase.schedule, phase.plan_data) == []


@needs_shared
def test_lrcn_deploy_net_frames_follow_the_batch():
    # deploy_lstm.prototxt: input data 160 = 16 x 10 frames, Reshapes to 16 x 10 (x 4096).
    net = caffemem.analyze(str(LRCN.with_name("deploy_lstm.prototxt")), batch=4).nets[0]
    assert (net.blobs["data"], net.blobs["clip_markers"], net.blobs["lstm1"]) == ((64, 3, 227, 227), (64, 1, 1, 1), (16, 4, 256))


@pytest.mark.parametrize(
    ("reshape", "rank", "dims"),
    [
        ("shape { dim: 16 dim: 24 dim: 4096 }", 2, [16, 8, 4096]),  # top axis 1 is dims[1]
        ("axis: 1 shape { dim: 24 dim: 4096 }", 2, [8, 4096]),  # top = bottom[:1] + dims: axis 1 is dims[0]
        ("axis: -2 shape { dim: 24 dim: 4096 }", 2, [8, 4096]),  # -2 of a 2-D bottom is axis 1
        ("shape { dim: 16 dim: -1 dim: 4096 }", 2, None),  # inferred: follows the bottom
        ("shape { dim: 16 dim: 0 }", 2, None),  # copied from the bottom
        ("axis: 2 shape { dim: 4 }", 3, None),  # axis 1 is the bottom's own
    ],
)
def test_reshape_restates_the_dim_that_lands_on_the_batch_axis(reshape, rank, dims):
    # reshape_layer.cpp: top = bottom[:axis] + shape.dim + bottom[axis + num_axes:].
    from google.protobuf import text_format

    from caffemem.layers import SpecTable
    from caffemem.schema import caffe_pb2

    proto = text_format.Parse(f'type: "Reshape" reshape_param {{ {reshape} }}', caffe_pb2.LayerParameter())
    restated = SpecTable().get("Reshape").rebatch(proto, rank, 1, 8)
    assert (None if restated is None else list(restated.reshape_param.shape.dim)) == dims

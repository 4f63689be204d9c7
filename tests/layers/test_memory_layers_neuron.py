"""Memory rules of the neuron family (caffemem/layers/neuron.py), in bytes derived by hand
from Caffe master's CPU code (float32: 4 bytes an element, a shape buffer 4 bytes an axis).

Each net is an Input per bottom, then the layer under test named "l"; ``force_backward``
(the helper's default) makes every Backward run with every propagate_down set, so a
layer's own top diff is first touched by its own Backward (no loss layer writes it).
"""

from __future__ import annotations

import pytest

X4 = (2, 3, 2, 2)  # 24 elements: a data blob is 96 bytes, its shape buffer 16


def _layer(type_: str, extra: str = "", bottom: str = "x", top: str = "y") -> str:
    return f'layer {{ name: "l" type: "{type_}" bottom: "{bottom}" top: "{top}" {extra} }}'


def _bytes(layer) -> tuple[int, int, int]:
    return layer.init, layer.fwd_alloc, layer.bwd_alloc


@pytest.mark.parametrize(
    "type_, extra",
    [
        ("ReLU", ""),
        ("Sigmoid", ""),
        ("TanH", ""),
        ("AbsVal", ""),
        ("BNLL", ""),
        ("ELU", ""),
        ("Exp", ""),
        ("Log", ""),
        ("Power", ""),
        ("Clip", "clip_param { min: 0 max: 1 }"),
    ],
)
def test_pointwise_neuron_writes_its_top_then_both_diffs(memory_of, type_, extra):
    # <type>_layer.cpp: Reshape (NeuronLayer) shapes the top: 8 bytes for (2, 3).
    # Forward_cpu writes the top: 24.  Backward_cpu reads the top's diff (first touch: 24)
    # and writes the bottom's: 24.
    layer = memory_of(_layer(type_, extra), {"x": (2, 3)})["l"]
    assert _bytes(layer) == (8, 24, 48)


def test_threshold_has_no_backward(memory_of):
    # threshold_layer.hpp: Backward_cpu is NOT_IMPLEMENTED; Forward writes the top (24).
    layer = memory_of(_layer("Threshold"), {"x": (2, 3)}, phase="TEST")["l"]
    assert _bytes(layer) == (8, 24, 0)


def test_swish_keeps_the_input_and_output_of_an_inner_sigmoid(memory_of):
    # swish_layer.cpp LayerSetUp/Reshape: top shape 8, sigmoid_input_ and sigmoid_output_
    # like the bottom: 8 + 8 (the output first Reshaped to a 0-axis blob: 0 bytes).
    # Forward_cpu writes sigmoid_input_, the top and (inner Forward) sigmoid_output_: 3 x 24.
    # Backward_cpu: the top's diff and the bottom's: 48.
    layer = memory_of(_layer("Swish"), {"x": (2, 3)})["l"]
    assert _bytes(layer) == (24, 72, 48)
    assert layer.buffers == {"sigmoid_input": 8 + 24, "sigmoid_output": 8 + 24}


def test_swish_loss_weight_reaches_the_inner_sigmoid(memory_of):
    # The inner Sigmoid is built with Swish's param, loss_weight included: its SetLossWeights
    # writes the diff of sigmoid_output_ while that is still a 1-element blob (4 bytes),
    # then Reshape grows the blob and frees it (-4).  Init: 24 as above + the top's loss
    # diff 24.  Forward: the inner Layer::Forward reads the new, never written diff (24) on
    # top of the 72; Backward: the top's diff is allocated already, the bottom's is 24.
    layer = memory_of(_layer("Swish", "loss_weight: 1"), {"x": (2, 3)})["l"]
    assert _bytes(layer) == (48, 96, 24)


def test_prelu_learns_a_slope_per_channel(memory_of):
    # prelu_layer.cpp LayerSetUp: slope [3] (4 + 12, filled 0.25), multiplier_ [count(1) =
    # 12] written (4 + 48), backward_buff_ [12] shape only (4); top shape 16 -> 88.
    # Forward: top 96.  Backward_cpu: top diff 96, slope diff 12 (param_propagate_down),
    # bottom diff 96.
    layer = memory_of(_layer("PReLU"), {"x": X4})["l"]
    assert _bytes(layer) == (88, 96, 204)


def test_prelu_in_place_copies_its_input(memory_of):
    # prelu_layer.cpp Reshape: in place, bottom_memory_ is shaped like the bottom (16, in
    # place of the top's shape buffer); Forward_cpu copies the input there (96) for
    # Backward_cpu, which then writes the slope's diff (12) and the shared diff (96).
    layer = memory_of(_layer("PReLU", top="x"), {"x": X4})["l"]
    assert _bytes(layer) == (88, 96, 108)


def test_mvn_normalizes_with_per_item_statistics(memory_of):
    # mvn_layer.cpp Reshape: top (2,3,2,2) 16; mean_ and variance_ (2,3,1,1) 16 each; temp_
    # 16; sum_multiplier_ (1,1,2,2) written: 16 + 16 -> 96.  Forward_cpu: top 96, mean_ 24,
    # temp_ 96, variance_ 24 (normalize_variance).  Backward_cpu (no propagate_down test):
    # top diff 96, bottom diff 96.
    layer = memory_of(_layer("MVN"), {"x": X4})["l"]
    assert _bytes(layer) == (96, 240, 192)


def test_mvn_without_variance_across_channels(memory_of):
    # mvn_layer.cpp: across_channels makes sum_multiplier_ (1,3,2,2) (16 + 48); without
    # normalize_variance Forward never touches variance_ (shape buffer only).
    layer = memory_of(_layer("MVN", "mvn_param { normalize_variance: false across_channels: true }"), {"x": X4})["l"]
    assert _bytes(layer) == (128, 216, 192)
    assert layer.buffers["variance"] == 16


def test_softmax_backward_reuses_its_scratch(memory_of):
    # softmax_layer.cpp Reshape: top 8, sum_multiplier_ [5] written (4 + 20), scale_ (2,1)
    # shape 8 -> 40.  Forward_cpu: top 40, scale_ 8.  Backward_cpu: top diff 40, bottom
    # diff 40 (scale_ allocated already).
    layer = memory_of(_layer("Softmax"), {"x": (2, 5)})["l"]
    assert _bytes(layer) == (40, 48, 80)


@pytest.mark.parametrize("engine, extra", [("caffe", "softmax_param { engine: CUDNN }"), ("cudnn", "")])
def test_cudnn_softmax_needs_no_scratch(memory_of, engine, extra):
    # cudnn_softmax_layer.cpp: the same Reshape (40 bytes); Forward_gpu calls cuDNN and never
    # touches scale_: only the top (40).  The layer's engine wins, DEFAULT follows the build.
    layer = memory_of(_layer("Softmax", extra), {"x": (2, 5)}, engine=engine)["l"]
    assert _bytes(layer) == (40, 40, 80)


def test_batch_norm_training_statistics(memory_of):
    # batch_norm_layer.cpp LayerSetUp: three blobs [3], [3], [1] written: 16 + 16 + 8.
    # Reshape: top 16; mean_, variance_ 4 each; temp_, x_norm_ 16 each;
    # batch_sum_multiplier_ [2] written 4 + 8; spatial_sum_multiplier_ [4] written 4 + 16;
    # num_by_chans_ [6] 4 -> 132.  Forward_cpu: top 96, mean_ 12, variance_ 12,
    # num_by_chans_ 24, temp_ 96, x_norm_ 96.  Backward_cpu: top diff 96, bottom diff 96 --
    # never a parameter's diff, although force_backward sets their propagate_down.
    layer = memory_of(_layer("BatchNorm"), {"x": X4})["l"]
    assert _bytes(layer) == (132, 336, 192)


def test_batch_norm_in_place_backward_copies_the_diff(memory_of):
    # batch_norm_layer.cpp Backward_cpu, in place: the top's diff (the bottom's, 96) is
    # copied into x_norm_'s diff (96) first.  No top shape buffer (116 at init), no top data.
    layer = memory_of(_layer("BatchNorm", top="x"), {"x": X4})["l"]
    assert _bytes(layer) == (116, 240, 192)
    assert layer.buffers["x_norm"] == 16 + 96 + 96


def test_scale_with_bias_term(memory_of):
    # scale_layer.cpp LayerSetUp: scale [3] (16, filled 1); the inner Bias layer's blob [3]
    # (16) and bias_multiplier_ [inner 4] (4 + 16, read then written).  Reshape: top 16,
    # sum_result_ [outer 2 x 3] 4, sum_multiplier_ [max(2, 4)] 4 + 16 -> 92.
    # Forward: top 96.  Backward_cpu: inner Bias Backward: top diff 96, bias diff 12; the
    # scale's gradient: product in the bottom's diff (96), sum_result_ 24 (inner != 1,
    # outer != 1), scale diff 12; propagate_down: the bottom's diff again.
    layer = memory_of(_layer("Scale", "scale_param { bias_term: true }"), {"x": X4})["l"]
    assert _bytes(layer) == (92, 96, 240)


def test_scale_in_place_keeps_its_input_in_temp(memory_of):
    # scale_layer.cpp Reshape, in place: temp_ like the bottom (16) instead of a top shape.
    # Forward_cpu copies the input into temp_ (96); Backward uses temp_ as the product
    # buffer (no new bytes) and writes sum_result_ (24) and the scale's diff (12) after the
    # shared top/bottom diff (96).
    layer = memory_of(_layer("Scale", top="x"), {"x": X4})["l"]
    assert _bytes(layer) == (56, 96, 132)


def test_scale_by_a_second_bottom(memory_of):
    # scale_layer.cpp with bottom[1] (3,) as the scale: no parameter; init = top 16 +
    # sum_result_ 4 + sum_multiplier_ 20.  Backward: propagate_down[1] computes the
    # scale's gradient into bottom[1]'s diff (12) through the bottom's diff (96) and
    # sum_result_ (24), after the top's diff (96).
    layer = memory_of(_layer("Scale", bottom='x" bottom: "s'), {"x": X4, "s": (3,)})["l"]
    assert _bytes(layer) == (40, 96, 228)


def test_scale_as_big_as_the_bottom_writes_its_diff_directly(memory_of):
    # scale_layer.cpp Backward_cpu, is_eltwise: the product goes straight into the scale's
    # diff (24).  Scale [2, 3] (axis 0, num_axes -1): 8 + 24; top 8; sum_result_ [6] 4;
    # sum_multiplier_ [1] 4 + 4.
    layer = memory_of(_layer("Scale", "scale_param { axis: 0 num_axes: -1 }"), {"x": (2, 3)})["l"]
    assert _bytes(layer) == (52, 24, 72)


def test_scale_with_inner_dim_one_skips_sum_result(memory_of):
    # scale_layer.cpp Backward_cpu: inner_dim_ == 1, so the product (the bottom's diff, 24)
    # is summed over outer straight into the scale's diff (12); sum_result_ stays a shape.
    layer = memory_of(_layer("Scale"), {"x": (2, 3)})["l"]
    assert _bytes(layer) == (40, 24, 60)
    assert layer.buffers["sum_result"] == 4


def test_scalar_scale_dots_into_its_diff(memory_of):
    # scale_layer.cpp: num_axes 0 gives a 0-axis scale (0 + 4) applied from axis 0: outer 1,
    # inner 6, sum_result_ count 1 -> one dot product into the scale's diff (4).
    # sum_multiplier_ [6]: 4 + 24.
    layer = memory_of(_layer("Scale", "scale_param { num_axes: 0 }"), {"x": (2, 3)})["l"]
    assert _bytes(layer) == (44, 24, 52)


def test_bias_adds_a_learned_blob(memory_of):
    # bias_layer.cpp: blob [3] 16; top 16; bias_multiplier_ [4] 4 + 16.  Forward: top 96.
    # Backward_cpu: top diff 96 -> bottom diff 96 and bias diff 12.
    layer = memory_of(_layer("Bias"), {"x": X4})["l"]
    assert _bytes(layer) == (52, 96, 204)


def test_bias_in_place(memory_of):
    # bias_layer.cpp: in place there is no top to shape or copy; Backward only sums the
    # shared diff (96, first touched here) into the bias's diff (12).
    layer = memory_of(_layer("Bias", top="x"), {"x": X4})["l"]
    assert _bytes(layer) == (36, 0, 108)


# ---------------------------------------------------------------- Bayesian SegNet dropout


def _dropout_backward_reads_mask(tmp_path, param: str) -> bool:
    """Does Dropout's Backward, at TEST, read its mask rand_vec_?"""
    from caffemem.api.analyze import Options, analyze

    path = tmp_path / "drop.prototxt"
    net = 'force_backward: true\nlayer { name: "x" type: "Input" top: "x" input_param { shape { dim: 2 dim: 3 } } }\n'
    path.write_text(net + f'layer {{ name: "drop" type: "Dropout" bottom: "x" top: "y" {param} }}\n')
    memory = analyze(str(path), Options(phase="TEST")).nets[0].memory
    return any(getattr(touch, "blob", None) and touch.blob.name.endswith("drop/rand_vec") and not touch.write for touch in memory.rules[1].backward)


def test_bayesian_segnet_dropout_keeps_its_mask_for_backward_at_test(tmp_path):
    # alexgkendall/caffe-segnet dropout_layer.cpp (and .cu): Backward uses the mask when
    # phase_ == TRAIN || sample_weights_test(); as in Models/bayesian_segnet_inference.prototxt
    # (alexgkendall/SegNet-Tutorial), where every dropout samples at TEST.
    assert _dropout_backward_reads_mask(tmp_path, "dropout_param { dropout_ratio: 0.5 sample_weights_test: true }")
    assert not _dropout_backward_reads_mask(tmp_path, "dropout_param { dropout_ratio: 0.5 }")

"""Memory rules of the loss family (caffemem/layers/loss.py), in bytes derived by hand from
Caffe master's CPU code (float32: 4 bytes an element, a shape buffer 4 bytes an axis).

The loss top is a 0-axis blob (0-byte shape buffer); LossLayer's default loss_weight 1
makes SetLossWeights write its 4-byte diff at init.  Each net is an Input per bottom, then
the layer under test named "l"; ``force_backward`` (the helper's default) runs Backward
with every propagate_down AllowForceBackward permits.
"""

from __future__ import annotations

import pytest

TRAINABLE = 'layer { name: "b" type: "Bias" bottom: "x" top: "b" }\n'
SCORES, LABELS = (4, 5), (4,)  # scores: 80 bytes of data, an 8-byte shape buffer


def _bytes(layer) -> tuple[int, int, int]:
    return layer.init, layer.fwd_alloc, layer.bwd_alloc


def test_softmax_with_loss_weight_zero_gives_prob_no_diff(memory_of):
    # softmax_loss_layer.cpp LayerSetUp: the inner Softmax copies this layer's param, so
    # loss_weight 0 reaches its SetLossWeights and prob_'s diff is not written.  Init: prob_
    # shape 8, sum_multiplier_ [5] 4 + 20, scale_ (4,1) 8.  Forward: prob_ 80, scale_ 16,
    # loss 4.  Backward_cpu: the scores' diff 80 and the loss top's diff (read, 4).
    body = 'layer { name: "l" type: "SoftmaxWithLoss" bottom: "x" bottom: "t" top: "loss" loss_weight: 0 }'
    layer = memory_of(body, {"x": SCORES, "t": LABELS})["l"]
    assert _bytes(layer) == (40, 100, 84)


def test_infogain_loss_with_matrix_from_file(memory_of):
    # infogain_loss_layer.cpp LayerSetUp: the inner Softmax always gets loss_weight 1: prob_
    # shape 8 + diff 80, sum_multiplier_ 24, scale_ 8; infogain_ FromProto (taken as a
    # legacy (1,1,5,5) BlobProto: 16 + 100).  Reshape: sum_rows_H_ [5] 4, written by
    # sum_rows_of_H 20; loss diff 4 -> 264.  Forward: prob_ 80, scale_ 16, loss 4.
    # Backward_cpu: the scores' diff 80 (the label is barred from force_backward).
    body = 'layer { name: "l" type: "InfogainLoss" bottom: "x" bottom: "t" top: "loss" infogain_loss_param { source: "H.binaryproto" } }'
    layer = memory_of(body, {"x": SCORES, "t": LABELS})["l"]
    assert _bytes(layer) == (264, 100, 80)


def test_infogain_loss_with_matrix_bottom_sums_rows_in_backward(memory_of):
    # infogain_loss_layer.cpp: with H as bottom[2], Reshape only shapes sum_rows_H_ (4);
    # Backward_cpu calls sum_rows_of_H (20) before writing the scores' diff (80).  (H is an
    # index-like bottom force_backward would make Caffe abort on: a Bias trains instead.)
    body = TRAINABLE + 'layer { name: "l" type: "InfogainLoss" bottom: "b" bottom: "t" bottom: "H" top: "loss" }'
    layer = memory_of(body, {"x": SCORES, "t": LABELS, "H": (5, 5)}, force_backward=False)["l"]
    assert _bytes(layer) == (128, 100, 100)


@pytest.mark.parametrize("weight, init", [("", 12), ("loss_weight: 1", 92)])
def test_sigmoid_cross_entropy_inner_sigmoid_sees_only_an_explicit_weight(memory_of, weight, init):
    # sigmoid_cross_entropy_loss_layer.hpp: sigmoid_layer_ is constructed with the param as
    # written, before LossLayer::LayerSetUp adds the default weight.  Init: sigmoid_output_
    # shape 8 + the loss diff 4, + its diff 80 when the file gives the weight.
    # Forward: sigmoid_output_ 80, loss 4.  Backward_cpu: the scores' diff 80.
    body = f'layer {{ name: "l" type: "SigmoidCrossEntropyLoss" bottom: "x" bottom: "t" top: "loss" {weight} }}'
    layer = memory_of(body, {"x": SCORES, "t": SCORES})["l"]
    assert _bytes(layer) == (init, 84, 80)


def test_euclidean_loss_gives_both_bottoms_a_diff(memory_of):
    # euclidean_loss_layer.cpp: diff_ shape 8 + loss diff 4.  Forward: diff_ 80, loss 4.
    # Backward_cpu: both bottoms (AllowForceBackward is true for both): 80 + 80.
    body = 'layer { name: "l" type: "EuclideanLoss" bottom: "x" bottom: "t" top: "loss" }'
    layer = memory_of(body, {"x": SCORES, "t": SCORES})["l"]
    assert _bytes(layer) == (12, 84, 160)


def test_hinge_loss_uses_the_bottom_diff_in_forward(memory_of):
    # hinge_loss_layer.cpp Forward_cpu computes the margins in bottom[0]'s diff (80) and
    # writes the loss (4); Backward_cpu finishes there: nothing new.
    body = 'layer { name: "l" type: "HingeLoss" bottom: "x" bottom: "t" top: "loss" }'
    layer = memory_of(body, {"x": SCORES, "t": LABELS})["l"]
    assert _bytes(layer) == (4, 84, 0)


def test_multinomial_logistic_loss(memory_of):
    # multinomial_logistic_loss_layer.cpp: no buffer; Forward the loss (4), Backward the
    # probabilities' diff (80).
    body = 'layer { name: "l" type: "MultinomialLogisticLoss" bottom: "x" bottom: "t" top: "loss" }'
    layer = memory_of(body, {"x": SCORES, "t": LABELS})["l"]
    assert _bytes(layer) == (4, 4, 80)


def test_contrastive_loss(memory_of):
    # contrastive_loss_layer.cpp LayerSetUp: diff_, diff_sq_ (4,3,1,1) and dist_sq_ (4,1,1,1)
    # shapes 16 each, summer_vec_ (3,1,1,1) written 16 + 12; loss diff 4 -> 80.
    # Forward_cpu: diff_ 48, dist_sq_ 16, loss 4.  Backward_cpu: both feature diffs
    # 48 + 48 (AllowForceBackward refuses bottom 2, the similarity label).
    body = 'layer { name: "l" type: "ContrastiveLoss" bottom: "a" bottom: "b" bottom: "s" top: "loss" }'
    layer = memory_of(body, {"a": (4, 3), "b": (4, 3), "s": (4,)})["l"]
    assert _bytes(layer) == (80, 68, 96)


def test_accuracy_per_class_top(memory_of):
    # accuracy_layer.cpp Reshape: top 0 (0-axis), top 1 [5] 4, nums_buffer_ [5] 4.
    # Forward_cpu: nums_buffer_ 20, top 1 20, top 0 4.
    body = 'layer { name: "l" type: "Accuracy" bottom: "x" bottom: "t" top: "acc" top: "per_class" }'
    layer = memory_of(body, {"x": SCORES, "t": LABELS}, phase="TEST")["l"]
    assert _bytes(layer) == (8, 44, 0)


@pytest.mark.parametrize(
    "type_, bottoms, propagate_down",
    [
        ("SoftmaxWithLoss", {"x": SCORES, "t": LABELS}, (True, False)),
        ("SigmoidCrossEntropyLoss", {"x": SCORES, "t": SCORES}, (True, False)),
        ("EuclideanLoss", {"x": SCORES, "t": SCORES}, (True, True)),
        ("ContrastiveLoss", {"a": (4, 3), "b": (4, 3), "s": (4,)}, (True, True, False)),
    ],
)
def test_force_backward_spares_the_labels(memory_of, type_, bottoms, propagate_down):
    # loss_layer.hpp AllowForceBackward: bottom_index != 1; euclidean_loss_layer.hpp: true;
    # contrastive_loss_layer.hpp: bottom_index != 2.
    wiring = " ".join(f'bottom: "{name}"' for name in bottoms)
    layer = memory_of(f'layer {{ name: "l" type: "{type_}" {wiring} top: "loss" }}', bottoms)["l"]
    assert layer.propagate_down == propagate_down


def test_unnamed_loss_layers_keep_their_own_buffers(memory_report):
    # Caffe accepts layers without a name (HED's losses): each SigmoidCrossEntropyLoss owns
    # its sigmoid_output_, so each explicit weight allocates one diff (80) at init:
    # 8 + 80 + the loss diff 4.
    layer_text = 'layer {{ type: "SigmoidCrossEntropyLoss" bottom: "{0}" bottom: "t{0}" top: "loss{0}" loss_weight: 1 }}\n'
    body = layer_text.format("x") + layer_text.format("y")
    report = memory_report(body, {"x": SCORES, "tx": SCORES, "y": SCORES, "ty": SCORES}, force_backward=False)
    assert [l.init for l in report.layers if l.type == "SigmoidCrossEntropyLoss"] == [92, 92]

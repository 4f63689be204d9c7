"""Shape rules of the loss family (caffemem/layers/loss.py), checked against Caffe master's formulas."""

from __future__ import annotations

import pytest

from caffemem.errors import CaffememError
from caffemem.layers import SpecTable

LOSSES = ["SoftmaxWithLoss", "SigmoidCrossEntropyLoss", "EuclideanLoss", "HingeLoss", "MultinomialLogisticLoss"]


@pytest.mark.parametrize("type_", LOSSES + ["InfogainLoss", "ContrastiveLoss"])
def test_loss_layers_create_their_top(type_):
    # LossLayer::AutoTopBlobs() is true.
    assert SpecTable().get(type_).auto_top


def test_accuracy_is_not_a_loss_layer():
    assert not SpecTable().get("Accuracy").auto_top


def test_softmax_with_loss_is_a_scalar(shape_of):
    shapes = shape_of('type: "SoftmaxWithLoss" top: "loss"', (4, 10), (4,))
    assert shapes.tops == ((),)
    assert shapes.params == ()


def test_loss_without_named_top_still_has_one(shape_of):
    # AutoTopBlobs: Net::AppendTop creates the anonymous loss top.
    assert shape_of('type: "SoftmaxWithLoss"', (4, 10), (4,)).tops == ((),)


def test_softmax_with_loss_prob_top(shape_of):
    text = 'type: "SoftmaxWithLoss" top: "loss" top: "prob" loss_weight: 1 loss_weight: 0'
    assert shape_of(text, (4, 10, 3, 3), (4, 1, 3, 3)).tops == ((), (4, 10, 3, 3))


def test_second_top_needs_explicit_loss_weights(shape_of):
    # LossLayer adds a single loss_weight 1; SetLossWeights wants one per top.
    with pytest.raises(CaffememError, match="once per top"):
        shape_of('type: "SoftmaxWithLoss" top: "loss" top: "prob"', (4, 10), (4,))


def test_softmax_with_loss_label_count(shape_of):
    # outer*inner = 4*3*3 = 36 labels needed, 4 given.
    with pytest.raises(CaffememError, match="number of labels"):
        shape_of('type: "SoftmaxWithLoss"', (4, 10, 3, 3), (4,))


def test_softmax_with_loss_axis(shape_of):
    # axis -1: outer = 4*3 = 12 labels.
    assert shape_of('type: "SoftmaxWithLoss" softmax_param { axis: -1 }', (4, 3, 10), (4, 3)).tops == ((),)


def test_loss_num_mismatch(shape_of):
    with pytest.raises(CaffememError, match="same first dimension"):
        shape_of('type: "HingeLoss"', (4, 10), (5,))


def test_sigmoid_cross_entropy_counts(shape_of):
    assert shape_of('type: "SigmoidCrossEntropyLoss"', (4, 10), (4, 10, 1)).tops == ((),)
    with pytest.raises(CaffememError, match="same count"):
        shape_of('type: "SigmoidCrossEntropyLoss"', (4, 10), (4, 9))


def test_euclidean_dimension(shape_of):
    assert shape_of('type: "EuclideanLoss"', (4, 6), (4, 2, 3)).tops == ((),)
    with pytest.raises(CaffememError, match="same dimension"):
        shape_of('type: "EuclideanLoss"', (4, 6), (4, 5))


def test_infogain_with_matrix_bottom(shape_of):
    text = 'type: "InfogainLoss" top: "loss" top: "prob" loss_weight: 1 loss_weight: 0'
    assert shape_of(text, (4, 5), (4,), (1, 1, 5, 5)).tops == ((), (4, 5))


def test_infogain_matrix_size(shape_of):
    with pytest.raises(CaffememError, match="5x5"):
        shape_of('type: "InfogainLoss"', (4, 5), (4,), (4, 4))


def test_infogain_needs_source_without_third_bottom(shape_of):
    with pytest.raises(CaffememError, match="source"):
        shape_of('type: "InfogainLoss"', (4, 5), (4,))


def test_infogain_with_source(shape_of):
    assert shape_of('type: "InfogainLoss" infogain_loss_param { source: "H.binaryproto" }', (4, 5), (4,)).tops == ((),)


def test_infogain_refuses_normalize(shape_of):
    with pytest.raises(CaffememError, match="deprecated"):
        shape_of('type: "InfogainLoss" loss_param { normalize: true }', (4, 5), (4,), (5, 5))


def test_multinomial_logistic_label_shape(shape_of):
    assert shape_of('type: "MultinomialLogisticLoss"', (4, 10), (4, 1, 1, 1)).tops == ((),)
    with pytest.raises(CaffememError, match="channels 1"):
        shape_of('type: "MultinomialLogisticLoss"', (4, 10), (4, 2))


def test_contrastive(shape_of):
    assert shape_of('type: "ContrastiveLoss"', (4, 8), (4, 8, 1, 1), (4,)).tops == ((),)


def test_contrastive_feature_channels(shape_of):
    with pytest.raises(CaffememError, match="same channels"):
        shape_of('type: "ContrastiveLoss"', (4, 8), (4, 7), (4,))


def test_contrastive_features_are_flat(shape_of):
    with pytest.raises(CaffememError, match="height 1"):
        shape_of('type: "ContrastiveLoss"', (4, 8, 2), (4, 8, 2), (4,))


def test_accuracy_scalar(shape_of):
    assert shape_of('type: "Accuracy" top: "acc"', (4, 10), (4,)).tops == ((),)


def test_accuracy_per_class_top(shape_of):
    assert shape_of('type: "Accuracy" top: "acc" top: "per_class"', (4, 10, 3), (4, 3)).tops == ((), (10,))


def test_accuracy_top_k_above_classes(shape_of):
    # count(bottom0) / count(bottom1) = 40 / 4 = 10 classes.
    with pytest.raises(CaffememError, match="top_k"):
        shape_of('type: "Accuracy" accuracy_param { top_k: 11 }', (4, 10), (4,))


def test_accuracy_label_count(shape_of):
    with pytest.raises(CaffememError, match="number of labels"):
        shape_of('type: "Accuracy"', (4, 10, 3), (4, 2))

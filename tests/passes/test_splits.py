"""Split insertion, exactly as Caffe's insert_splits.cpp, and wiring errors."""

from __future__ import annotations

import pytest
from google.protobuf import text_format

from caffemem.errors import CaffememError
from caffemem.passes.splits import insert_splits
from caffemem.schema import caffe_pb2


def wire(text):
    return insert_splits(text_format.Parse(text, caffe_pb2.NetParameter()), file="n.prototxt", line_of=lambda n, k: 3)


def test_blob_read_twice_gets_a_split_with_caffes_names():
    graph = wire("""
      layer { name: "in" type: "Input" top: "x" }
      layer { name: "a" type: "ReLU" bottom: "x" top: "a" }
      layer { name: "b" type: "ReLU" bottom: "x" top: "b" }""")
    assert [(l.name, l.type, l.bottoms, l.tops) for l in graph.layers] == [
        ("in", "Input", (), ("x",)),
        ("x_in_0_split", "Split", ("x",), ("x_in_0_split_0", "x_in_0_split_1")),
        ("a", "ReLU", ("x_in_0_split_0",), ("a",)),
        ("b", "ReLU", ("x_in_0_split_1",), ("b",)),
    ]


def test_in_place_consumer_counts_and_later_readers_see_the_in_place_top():
    graph = wire("""
      layer { name: "in" type: "Input" top: "x" }
      layer { name: "r" type: "ReLU" bottom: "x" top: "x" }
      layer { name: "a" type: "ReLU" bottom: "x" top: "a" }
      layer { name: "b" type: "ReLU" bottom: "x" top: "b" }""")
    assert [l.name for l in graph.layers] == ["in", "r", "x_r_0_split", "a", "b"]


def test_loss_weight_counts_as_a_consumer_and_moves_to_the_split():
    graph = wire("""
      layer { name: "in" type: "Input" top: "x" }
      layer { name: "l" type: "EuclideanLoss" bottom: "x" bottom: "x" top: "loss" loss_weight: 2 }
      layer { name: "s" type: "Sigmoid" bottom: "loss" top: "s" }""")
    names = [l.name for l in graph.layers]
    assert names == ["in", "x_in_0_split", "l", "loss_l_0_split", "s"]
    loss, split = graph.layers[2], graph.layers[3]
    assert list(loss.proto.loss_weight) == []
    assert list(split.proto.loss_weight) == [2.0]
    assert graph.layers[4].bottoms == ("loss_l_0_split_1",)


def test_unknown_bottom_names_layer_and_says_what_to_fix():
    with pytest.raises(CaffememError) as caught:
        wire('layer { name: "a" type: "ReLU" bottom: "nope" top: "a" }')
    assert "bottom 0 'nope' is not produced by any layer" in str(caught.value)
    assert "layer 'a' (ReLU)" in str(caught.value)


def test_bottom_produced_later_says_to_move_the_producer():
    with pytest.raises(CaffememError, match="layer 'p' produces it later"):
        wire('layer { name: "a" type: "ReLU" bottom: "x" top: "a" } layer { name: "p" type: "Input" top: "x" }')


def test_blob_produced_twice_is_an_error():
    with pytest.raises(CaffememError, match="top 'x' is already produced by layer 'in'"):
        wire('layer { name: "in" type: "Input" top: "x" } layer { name: "in2" type: "Input" top: "x" }')


def test_auto_tops_are_added_for_loss_layers_without_tops():
    net = text_format.Parse('layer { name: "in" type: "Input" top: "x" top: "y" } layer { name: "l" type: "EuclideanLoss" bottom: "x" bottom: "y" }', caffe_pb2.NetParameter())
    graph = insert_splits(net, auto_tops=lambda t: 1 if t == "EuclideanLoss" else 0)
    assert graph.layers[1].tops == ("(automatic)",)

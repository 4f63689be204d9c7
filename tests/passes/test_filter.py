"""NetState filtering, exactly as Caffe's Net::FilterNet / StateMeetsRule."""

from __future__ import annotations

import pytest
from google.protobuf import text_format

from caffemem.errors import CaffememError
from caffemem.passes.filter import filter_net, make_state
from caffemem.schema import caffe_pb2

NET = """
layer { name: "always" type: "Input" top: "x" }
layer { name: "train_only" type: "ReLU" bottom: "x" top: "x" include { phase: TRAIN } }
layer { name: "test_only" type: "ReLU" bottom: "x" top: "x" include { phase: TEST } }
layer { name: "staged" type: "ReLU" bottom: "x" top: "x" include { stage: "deploy" } }
layer { name: "not_staged" type: "ReLU" bottom: "x" top: "x" exclude { stage: "deploy" } }
layer { name: "both_stages" type: "ReLU" bottom: "x" top: "x" include { stage: "a" stage: "b" } }
layer { name: "either" type: "ReLU" bottom: "x" top: "x" include { stage: "a" } include { stage: "b" } }
layer { name: "not_stage" type: "ReLU" bottom: "x" top: "x" include { not_stage: "a" } }
layer { name: "level" type: "ReLU" bottom: "x" top: "x" include { min_level: 1 max_level: 2 } }
"""


def kept(phase, stages=(), level=None):
    net = text_format.Parse(NET, caffe_pb2.NetParameter())
    return [layer.name for layer in filter_net(net, make_state(phase, stages, level)).layer]


def test_phase_rules():
    assert kept("TRAIN") == ["always", "train_only", "not_staged", "not_stage"]
    assert kept("TEST") == ["always", "test_only", "not_staged", "not_stage"]


def test_stage_include_and_exclude():
    assert "staged" in kept("TEST", ["deploy"]) and "not_staged" not in kept("TEST", ["deploy"])


def test_all_stages_of_one_rule_must_be_present():
    assert "both_stages" not in kept("TEST", ["a"])
    assert "both_stages" in kept("TEST", ["a", "b"])


def test_any_include_rule_suffices():
    assert "either" in kept("TEST", ["b"])


def test_not_stage():
    assert "not_stage" not in kept("TEST", ["a"])


def test_levels():
    assert "level" not in kept("TEST", level=0)
    assert "level" in kept("TEST", level=1)
    assert "level" not in kept("TEST", level=3)


def test_include_and_exclude_on_one_layer_is_an_error():
    net = text_format.Parse('layer { name: "l" type: "ReLU" include { phase: TRAIN } exclude { phase: TEST } }', caffe_pb2.NetParameter())
    with pytest.raises(CaffememError, match="either include rules or exclude rules"):
        filter_net(net, make_state("TRAIN"), "f.prototxt", line_of=lambda name: 7)

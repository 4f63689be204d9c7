"""SSD's DetectionEvaluate (weiliu89/caffe ssd, src/caffe/layers/detection_evaluate_layer.cpp),
the last layer of every SSD TEST net: e.g. chuanqi305/MobileNet-SSD voc/MobileNetSSD_test.prototxt,
detection_out (DetectionOutput) and label (AnnotatedData) -> detection_eval."""

from __future__ import annotations

import pytest
from conftest import check_plans

from caffemem.errors import CaffememError

EVAL = 'type: "DetectionEvaluate" bottom: "det" bottom: "gt" detection_evaluate_param {{ num_classes: 21 {extra} }}'


def test_rows_are_positive_classes_plus_every_detection_row(shape_of):
    # Reshape: [1, 1, num_pos_classes + num_valid_det, 5]; 21 classes less background 0 = 20,
    # and at most the 400 rows DetectionOutput gave: 420.
    assert shape_of(EVAL.format(extra=""), (1, 1, 400, 7), (1, 1, 12, 8)).tops == ((1, 1, 420, 5),)


def test_no_background_counts_every_class(shape_of):
    # background_label_id -1 (uint32 4294967295 in the proto, read into an int): 21 + 3.
    text = EVAL.format(extra="background_label_id: 4294967295")
    assert shape_of(text, (1, 1, 3, 7), (1, 1, 1, 8)).tops == ((1, 1, 24, 5),)


def test_checks_the_detection_and_label_layouts(shape_of):
    # CHECK_EQ(bottom[0]->width(), 7); CHECK_EQ(bottom[1]->width(), 8).
    with pytest.raises(CaffememError, match="detections must be"):
        shape_of(EVAL.format(extra=""), (1, 1, 4, 6), (1, 1, 1, 8))
    with pytest.raises(CaffememError, match="ground truth must be"):
        shape_of(EVAL.format(extra=""), (1, 1, 4, 7), (2, 1, 1, 8))
    with pytest.raises(CaffememError, match="num_classes"):
        shape_of('type: "DetectionEvaluate" bottom: "det" bottom: "gt"', (1, 1, 4, 7), (1, 1, 1, 8))


def test_memory_writes_its_top_in_forward_only(memory_of):
    # SetUp: the top (1,1,22,5)'s shape buffer, 16 bytes, and Reshape's cpu_data() of the
    # detections, which the Input has only shaped: 1 x 1 x 2 x 7 x 4 = 56 bytes.  Forward_cpu
    # writes the top: 22 x 5 x 4 = 440 bytes; no Backward.
    body = 'layer { name: "l" ' + EVAL.format(extra="") + ' top: "eval" }'
    layer = memory_of(body, {"det": (1, 1, 2, 7), "gt": (1, 1, 1, 8)}, phase="TEST", force_backward=False)["l"]
    assert (layer.init, layer.fwd_alloc, layer.bwd_alloc) == (16 + 56, 440, 0)


SSD_TEST_TAIL = """
layer { name: "in" type: "Input" top: "loc" top: "conf" top: "prior" top: "label"
  input_param { shape { dim: 1 dim: 8 } shape { dim: 1 dim: 6 } shape { dim: 1 dim: 2 dim: 8 } shape { dim: 1 dim: 1 dim: 2 dim: 8 } } }
layer { name: "detection_out" type: "DetectionOutput" bottom: "loc" bottom: "conf" bottom: "prior" top: "detection_out"
  detection_output_param { num_classes: 3 nms_param { nms_threshold: 0.45 top_k: 100 } keep_top_k: 100 } }
layer { name: "detection_eval" type: "DetectionEvaluate" bottom: "detection_out" bottom: "label" top: "detection_eval"
  detection_evaluate_param { num_classes: 3 background_label_id: 0 overlap_threshold: 0.5 } }
"""


def test_optimize_plans_an_ssd_test_tail(tmp_path):
    result = check_plans(tmp_path, SSD_TEST_TAIL, phase="TEST", name="ssd_test.prototxt", round_trip=False)
    for phase in result.phases:
        # 2 priors x 2 classes = 4 detection rows, + 2 positive classes: (1, 1, 6, 5)
        assert phase.stock.layers[-1].fwd_alloc == 6 * 5 * 4

"""happynear/caffe-windows (ms branch @967eedf2) pieces that AM-Softmax's training net uses
(happynear/AMSoftmax prototxt/face_train_test.prototxt): InnerProduct ``normalize``, the
LabelSpecificAdd margin, and a bare ``Normalize`` (figured as ssd's, with a note); and what
its deploy net (prototxt/face_deploy_mirror_normalize.prototxt) adds: the fork's own
Normalize with ``normalize_param`` (normalize_layer.cpp/.cu) and Flip (flip_layer.cpp/.cu).

Bytes: float32, 4 bytes a value; a Blob's shape buffer is 4 bytes an axis.
"""

from __future__ import annotations

import pytest

from caffemem.api.analyze import Options, analyze
from caffemem.api.optimize import OptimizeSettings, optimize
from caffemem.errors import CaffememError
from caffemem.plan.verify import verify_plan

IP = 'layer {{ name: "l" type: "InnerProduct" bottom: "x" top: "y" inner_product_param {{ num_output: 10 bias_term: false {extra} }} }}'


def test_normalized_inner_product_keeps_weight_norms(memory_of):
    # inner_product_layer.cpp Reshape, normalize: weight_norm_ [10], shape buffer 4 + 40 bytes
    # of zeros; nothing else changes (Forward rewrites the weights in place).
    plain = memory_of(IP.format(extra=""), {"x": (4, 8)})["l"]
    normalized = memory_of(IP.format(extra="normalize: true"), {"x": (4, 8)})["l"]
    assert normalized.init - plain.init == 4 + 10 * 4
    assert (normalized.fwd_alloc, normalized.bwd_alloc) == (plain.fwd_alloc, plain.bwd_alloc)


MARGIN = 'type: "LabelSpecificAdd" bottom: "s" bottom: "label" top: "m" {top} label_specific_add_param {{ bias: -0.35 }}'


def test_label_specific_add_is_shaped_like_the_scores(shape_of):
    # Reshape: top[0] ReshapeLike(bottom[0]); a second top, the bias, Reshape({1}).
    assert shape_of(MARGIN.format(top=""), (256, 10516), (256,)).tops == ((256, 10516),)
    assert shape_of(MARGIN.format(top='top: "bias"'), (256, 10516), (256,)).tops == ((256, 10516), (1,))
    with pytest.raises(CaffememError, match="one label a sample"):
        shape_of(MARGIN.format(top=""), (256, 10516), (128,))


def test_label_specific_add_memory(memory_of):
    # Scores (4,10) from a trained Bias: 160 bytes.  SetUp: the top's shape buffer 8.  Forward
    # copies the scores into the top: 160.  Backward copies the top's diff into the scores':
    # their diff 160 (the top's diff 160 comes from the loss, the label's never).
    trained = 'layer { name: "b" type: "Bias" bottom: "s0" top: "s" }\n'
    body = trained + 'layer { name: "l" ' + MARGIN.format(top="") + ' }\nlayer { name: "loss" type: "SoftmaxWithLoss" bottom: "m" bottom: "label" top: "loss" }'
    layer = memory_of(body, {"s0": (4, 10), "label": (4,)}, force_backward=False)["l"]
    assert (layer.init, layer.fwd_alloc, layer.bwd_alloc) == (8, 160, 160)


AM_SOFTMAX = """
layer { name: "in" type: "Input" top: "fc5" top: "label" input_param { shape { dim: 4 dim: 8 } shape { dim: 4 } } }
layer { name: "norm1" type: "Normalize" bottom: "fc5" top: "norm1" }
layer { name: "fc6_l2" type: "InnerProduct" bottom: "norm1" top: "fc6" inner_product_param { num_output: 10 normalize: true bias_term: false } }
layer { name: "label_specific_margin" type: "LabelSpecificAdd" bottom: "fc6" bottom: "label" top: "fc6_margin" label_specific_add_param { bias: -0.35 } }
layer { name: "fc6_margin_scale" type: "Scale" bottom: "fc6_margin" top: "fc6_margin_scale" param { lr_mult: 0 decay_mult: 0 } scale_param { filler { type: "constant" value: 30 } } }
layer { name: "softmax_loss" type: "SoftmaxWithLoss" bottom: "fc6_margin_scale" bottom: "label" top: "softmax_loss" }
"""


def test_am_softmax_head_plans_and_says_how_it_took_the_bare_normalize(tmp_path):
    path = tmp_path / "am_softmax.prototxt"
    path.write_text(AM_SOFTMAX)
    net = analyze(str(path), Options(phase="TRAIN")).nets[0]
    assert net.blobs["fc6_margin"] == (4, 10)
    assert any("'norm1' (Normalize) has no norm_param" in note for note in net.memory.notes)
    for phase in optimize(str(path), Options(phase="TRAIN"), OptimizeSettings()).phases:
        assert verify_plan(phase.schedule, phase.plan_data) == []
        assert phase.lower_bound <= phase.planned.heap_total <= phase.stock.heap_total


# face_deploy_mirror_normalize.prototxt shortened: the faces and their mirrors (Flip, then a
# Concat on axis 0), an embedding, its halves summed, then Normalize with normalize_param.
MIRROR = """
layer { name: "flip_data" type: "Flip" bottom: "data" top: "flip_data" }
layer { name: "concat_data" type: "Concat" bottom: "data" bottom: "flip_data" top: "concat_data" concat_param { axis: 0 } }
layer { name: "fc5" type: "InnerProduct" bottom: "concat_data" top: "fc5" inner_product_param { num_output: 8 } }
layer { name: "slice_fc5" type: "Slice" bottom: "fc5" top: "fc5_orig" top: "fc5_mirror" slice_param { axis: 0 } }
layer { name: "eltmax_fc5" type: "Eltwise" bottom: "fc5_orig" bottom: "fc5_mirror" top: "eltmax_fc5" eltwise_param { operation: MAX } }
layer { name: "normalize1" type: "Normalize" bottom: "eltmax_fc5" top: "norm1" {tops} normalize_param { normalize_type: "L2" } }
"""


def test_mirrored_faces_are_flipped_and_normalized(memory_report):
    report = memory_report(MIRROR.replace("{tops}", ""), {"data": (2, 3, 12, 10)}, phase="TEST", force_backward=False)
    layers = {layer.name: layer for layer in report.layers}
    # Flip: the top like the bottom, written by Forward: 2 * 3 * 12 * 10 * 4 = 2,880 bytes
    assert layers["flip_data"].fwd_alloc == 2880
    # Normalize (2, 8) -> top (2, 8, 1, 1) 64 bytes, squared_ (2, 8, 1, 1) 64, norm_ (2, 1, 1, 1) 8
    assert layers["normalize1"].fwd_alloc == 64 + 64 + 8
    assert not any("has no norm_param" in note for note in report.notes)


def test_happynear_normalize_gives_the_norm_as_a_second_top(memory_report):
    report = memory_report(MIRROR.replace("{tops}", 'top: "norm"'), {"data": (2, 3, 12, 10)}, phase="TEST", force_backward=False)
    layers = {layer.name: layer for layer in report.layers}
    # the norm is the second top (2, 1, 1, 1), written instead of norm_: the same 136 bytes
    assert layers["normalize1"].fwd_alloc == 64 + 64 + 8


def test_ssd_normalize_takes_one_top(memory_report):
    ssd = MIRROR.replace(' {tops} normalize_param { normalize_type: "L2" }', ' top: "norm" norm_param { across_spatial: false }')
    with pytest.raises(CaffememError, match="ssd's Normalize takes exactly 1 top"):
        memory_report(ssd, {"data": (2, 3, 12, 10)}, phase="TEST")

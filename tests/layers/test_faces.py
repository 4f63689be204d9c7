"""The face / metric-learning layers (caffemem/layers/faces.py): shapes and bytes worked out
by hand from each repository's source (named in the comments), and a plan for small nets
built like theirs.

Bytes: float32, 4 bytes a value; a Blob's shape buffer is 4 bytes an axis (a scalar loss
top: 0).  ``init`` is the layer's SetUp (top shape buffers included), ``fwd_alloc`` /
``bwd_alloc`` its passes.
"""

from __future__ import annotations

import pytest
from conftest import check_plans

from caffemem.errors import CaffememError

# --- CenterLoss (ydwen/caffe-face center_loss_layer.cpp) ----------------------------------

CENTER = 'type: "CenterLoss" bottom: "x" bottom: "label" top: "loss" loss_weight: 0.008 center_loss_param {{ num_output: {n} {extra} }}'


def test_center_loss_shape_and_centers(shape_of):
    # a scalar loss; centres (num_output, K), K = count from axis 1: 3*2*2 = 12
    got = shape_of(CENTER.format(n=10, extra=""), (4, 3, 2, 2), (4,))
    assert got.tops == ((),) and got.params == ((10, 12),)
    # axis 2: K = 2*2 = 4
    assert shape_of(CENTER.format(n=10, extra="axis: 2"), (4, 3, 2, 2), (4,)).params == ((10, 4),)


def test_center_loss_checks_the_labels(shape_of):
    # Reshape: CHECK_EQ(bottom[1]->channels(), 1)
    with pytest.raises(CaffememError, match="channels 1"):
        shape_of(CENTER.format(n=3, extra=""), (4, 5), (4, 2))
    # LossLayer::Reshape: the same first dimension
    with pytest.raises(CaffememError, match="first dimension"):
        shape_of(CENTER.format(n=3, extra=""), (4, 5), (3,))


CENTER_NET = """
layer { name: "fc5" type: "InnerProduct" bottom: "x" top: "fc5" inner_product_param { num_output: 4 } }
layer { name: "center_loss" type: "CenterLoss" bottom: "fc5" bottom: "label" top: "center_loss" %s
  center_loss_param { num_output: 3 center_filler { type: "xavier" } } }
"""


def test_center_loss_memory(memory_of):
    # fc5 (2,4).  SetUp: the centres (3,4) 8 + 48 (filled); distance_ like fc5 and
    # variation_sum_ like the centres: shapes only, 8 + 8; the scalar top's shape 0 and its
    # diff (loss_weight 0.008) 4.
    got = memory_of(CENTER_NET % "loss_weight: 0.008", {"x": (2, 5), "label": (2,)})["center_loss"]
    assert got.init == 56 + 8 + 8 + 4
    # Forward: distance_ 2*4*4 = 32, the loss 4
    assert got.fwd_alloc == 32 + 4
    # Backward: the centres' diff 48, variation_sum_ 48 (as big as the centres), fc5's diff 32
    assert got.bwd_alloc == 48 + 48 + 32


def test_center_loss_has_no_default_loss_weight(memory_of):
    # LayerSetUp does not call LossLayer::LayerSetUp: without loss_weight the loss counts 0,
    # so Net::Init gives the layer no Backward and its top no diff
    got = memory_of(CENTER_NET % "", {"x": (2, 5), "label": (2,)}, force_backward=False)["center_loss"]
    assert (got.init, got.bwd_alloc) == (56 + 8 + 8, 0)
    # with force_backward it runs, and reads the top's diff (4): 48 + 48 + 32 + 4
    forced = memory_of(CENTER_NET % "", {"x": (2, 5), "label": (2,)})["center_loss"]
    assert forced.bwd_alloc == 48 + 48 + 32 + 4


def test_center_loss_without_learning_the_centers(memory_of):
    # lr_mult 0 (and no force_backward, which would set every param_propagate_down): no
    # centre diff, no variation_sum_; fc5's diff 32 only
    got = memory_of(CENTER_NET % "loss_weight: 0.008 param { lr_mult: 0 }", {"x": (2, 5), "label": (2,)}, force_backward=False)["center_loss"]
    assert got.bwd_alloc == 32


# --- MarginInnerProduct (wy1iu/sphereface margin_inner_product_layer.cpp) ------------------

MIP = 'type: "MarginInnerProduct" bottom: "x" bottom: "label" top: "fc6" top: "lambda" margin_inner_product_param {{ num_output: 7 {extra} }}'


def test_margin_inner_product_shapes(shape_of):
    # top = bottom.shape[:axis] + (num_output,); lambda (1,); weight (7, 3*2*2 = 12), no bias
    got = shape_of(MIP.format(extra="type: QUADRUPLE"), (4, 3, 2, 2), (4,))
    assert got.tops == ((4, 7), (1,)) and got.params == ((7, 12),)
    assert shape_of(MIP.format(extra="axis: 2"), (4, 3, 2, 2), (4,)).tops == ((4, 3, 7), (1,))


def test_margin_inner_product_needs_the_lambda_top(shape_of):
    # Forward_cpu writes top[1]->mutable_cpu_data()[0] whatever the top count
    with pytest.raises(CaffememError, match="lambda"):
        shape_of(MIP.format(extra="").replace(' top: "lambda"', ""), (4, 12), (4,))
    # LayerSetUp: one label per item
    with pytest.raises(CaffememError, match="Number of labels"):
        shape_of(MIP.format(extra=""), (4, 12), (3,))


MIP_NET = """
layer {{ name: "fc6" type: "MarginInnerProduct" bottom: "x" bottom: "label" top: "fc6" top: "lambda"
  margin_inner_product_param {{ num_output: 3 type: {type} weight_filler {{ type: "xavier" }} base: 1000 gamma: 0.12 power: 1 lambda_min: 5 }} }}
layer {{ name: "softmax_loss" type: "SoftmaxWithLoss" bottom: "fc6" bottom: "label" top: "softmax_loss" }}
"""


@pytest.mark.parametrize(
    "margin, extra",
    [
        ("SINGLE", 0),  # cos_theta_, sign_0_ only
        ("DOUBLE", 1),  # + cos_theta_quadratic_
        ("TRIPLE", 4),  # + quadratic, cubic, sign_1_, sign_2_
        ("QUADRUPLE", 5),  # + quadratic, cubic, quartic, sign_3_, sign_4_
    ],
)
def test_margin_inner_product_memory_by_margin_type(memory_of, margin, extra):
    # x (2,5) -> fc6 (2,3).  SetUp: top shapes 8 + 4 (lambda); weight (3,5) 8 + 60;
    # x_norm_ (2) 4, sign_0_ 8, cos_theta_ 8, and 8 per extra buffer (shapes only).
    got = memory_of(MIP_NET.format(type=margin), {"x": (2, 5), "label": (2,)})["fc6"]
    assert got.init == 8 + 4 + 68 + 4 + 8 + 8 + 8 * extra
    # Forward: lambda 4, x_norm_ 8, cos_theta_ 24, sign_0_ 24, 24 per extra buffer, fc6 24
    assert got.fwd_alloc == 4 + 8 + 24 + 24 + 24 * extra + 24
    # Backward (fc6's diff came from the loss): the weight's diff 60, x's diff 40
    assert got.bwd_alloc == 60 + 40


def backward_reads(layer_text: str, bottoms, tops, params, propagate_down, param_propagate_down) -> set[str]:
    """The names of the layer's own buffers and blobs its memory rule reads in Backward."""
    from google.protobuf import text_format

    from caffemem.graph import Layer
    from caffemem.layers import builtin_specs
    from caffemem.layers.access import MemoryQuery, Touch
    from caffemem.schema import caffe_pb2

    proto = text_format.Parse(layer_text, caffe_pb2.LayerParameter())
    layer = Layer(0, "l", proto.type, tuple(proto.bottom), tuple(proto.top), proto, line=1)
    query = MemoryQuery(layer, bottoms, tops, params, "TRAIN", True, propagate_down, param_propagate_down)
    rule = builtin_specs()[proto.type].memory(query)
    return {f"{t.blob.name.split('/')[-1]}.{t.part}" for t in rule.backward if isinstance(t, Touch) and not t.write}


def test_margin_inner_product_backward_reads_by_margin_type():
    # Backward_cpu reads the top's diff, x, the labels and the weight first; for x's
    # gradient x_norm_ and the type's buffers (QUADRUPLE: sign_3_, sign_4_ and the four
    # cos_theta powers; SINGLE: nothing more)
    text = MIP.format(extra="type: QUADRUPLE")
    got = backward_reads(text, ((4, 12), (4,)), ((4, 7), (1,)), ((7, 12),), (True, False), (True,))
    base = {"fc6.diff", "x.data", "label.data", "0:l#0.data"}
    powers = {f"{name}.data" for name in ("cos_theta", "cos_theta_quadratic", "cos_theta_cubic", "cos_theta_quartic", "sign_3", "sign_4")}
    assert got == base | {"x_norm.data"} | powers
    single = backward_reads(MIP.format(extra=""), ((4, 12), (4,)), ((4, 7), (1,)), ((7, 12),), (True, False), (True,))
    assert single == base | {"x_norm.data"}
    # no gradient for x: none of the buffers is read
    assert backward_reads(text, ((4, 12), (4,)), ((4, 7), (1,)), ((7, 12),), (False, False), (True,)) == base


# --- TripletLoss (happynear/caffe-windows triplet_loss_layer.cpp) -------------------------

TRIPLET = 'type: "TripletLoss" bottom: "a" bottom: "p" bottom: "n" top: "loss" triplet_loss_param { margin: 0.2 }'


def test_triplet_loss_shape(shape_of):
    got = shape_of(TRIPLET, (4, 8), (4, 8), (4, 8, 1, 1))
    assert got.tops == ((),) and got.params == ()
    # LayerSetUp: CHECK_EQ(bottom[1]->channels(), bottom[2]->channels()), height 1
    with pytest.raises(CaffememError, match="channels"):
        shape_of(TRIPLET, (4, 8), (4, 8), (4, 6))
    with pytest.raises(CaffememError, match="height 1"):
        shape_of(TRIPLET, (4, 8, 2, 1), (4, 8, 2, 1), (4, 8, 2, 1))


def test_triplet_loss_other_variants_are_refused_by_bottom_count(memory_of):
    # the two-bottom variants (features + labels) are other layers with the same type name
    with pytest.raises(CaffememError, match="exactly 3"):
        memory_of('layer { name: "t" type: "TripletLoss" bottom: "a" bottom: "label" top: "loss" }', {"a": (4, 8), "label": (4,)})


def test_triplet_loss_memory(memory_of):
    # a, p, n (3,4).  LayerSetUp: diff_ap_, diff_an_, diff_pn_, diff_sq_ap_, diff_sq_an_
    # (3,4,1,1) 16 each; dist_sq_ap_, dist_sq_an_ (3,1,1,1) 16 each; summer_vec_ (4,1,1,1)
    # 16 + 16 and dist_binary_ (3,1,1,1) 16 + 12 written; the loss's diff (default weight 1) 4.
    body = f'layer {{ name: "triplet" {TRIPLET} }}'
    got = memory_of(body, {"a": (3, 4), "p": (3, 4), "n": (3, 4)})["triplet"]
    assert got.init == 5 * 16 + 2 * 16 + 32 + 28 + 4
    # Forward: three differences 48 each, two distances 12 each, the loss 4
    assert got.fwd_alloc == 3 * 48 + 2 * 12 + 4
    # Backward (force_backward: all three bottoms): 48 each
    assert got.bwd_alloc == 3 * 48


# --- small nets in the style of the forks' prototxts --------------------------------------

# caffe-face's face_train_test.prototxt: conv + PReLU, a residual unit (two convs + PReLU,
# Eltwise with the unit's input), fc5 feature, fc6 + SoftmaxWithLoss and CenterLoss with
# loss_weight 0.008 on fc5; sphereface_model.prototxt: MarginInnerProduct (QUADRUPLE,
# tops fc6 and lambda) + SoftmaxWithLoss.
FACE_NET = """name: "face_block"
layer { name: "data" type: "Input" top: "data" top: "label" input_param { shape { dim: 4 dim: 3 dim: 12 dim: 10 } shape { dim: 4 } } }
layer { name: "conv1a" type: "Convolution" bottom: "data" top: "conv1a" convolution_param { num_output: 8 kernel_size: 3 stride: 2 pad: 1 } }
layer { name: "relu1a" type: "PReLU" bottom: "conv1a" top: "conv1a" }
layer { name: "conv2_1" type: "Convolution" bottom: "conv1a" top: "conv2_1" convolution_param { num_output: 8 kernel_size: 3 pad: 1 } }
layer { name: "relu2_1" type: "PReLU" bottom: "conv2_1" top: "conv2_1" }
layer { name: "conv2_2" type: "Convolution" bottom: "conv2_1" top: "conv2_2" convolution_param { num_output: 8 kernel_size: 3 pad: 1 } }
layer { name: "relu2_2" type: "PReLU" bottom: "conv2_2" top: "conv2_2" }
layer { name: "res2_2" type: "Eltwise" bottom: "conv1a" bottom: "conv2_2" top: "res2_2" eltwise_param { operation: 1 } }
layer { name: "fc5" type: "InnerProduct" bottom: "res2_2" top: "fc5" inner_product_param { num_output: 16 } }
layer { name: "fc6" type: "InnerProduct" bottom: "fc5" top: "fc6" inner_product_param { num_output: 10 } }
layer { name: "softmax_loss" type: "SoftmaxWithLoss" bottom: "fc6" bottom: "label" top: "softmax_loss" }
layer { name: "center_loss" type: "CenterLoss" bottom: "fc5" bottom: "label" top: "center_loss" param { lr_mult: 1 decay_mult: 2 }
  center_loss_param { num_output: 10 center_filler { type: "xavier" } } loss_weight: 0.008 }
layer { name: "fc6_margin" type: "MarginInnerProduct" bottom: "fc5" bottom: "label" top: "fc6_margin" top: "lambda"
  margin_inner_product_param { num_output: 10 type: QUADRUPLE weight_filler { type: "xavier" } base: 1000 gamma: 0.12 power: 1 lambda_min: 5 iteration: 0 } }
layer { name: "a_softmax_loss" type: "SoftmaxWithLoss" bottom: "fc6_margin" bottom: "label" top: "a_softmax_loss" }
"""

# A triplet net as users of the layer write it (happynear/caffe-windows ships no example
# prototxt for it): one embedding of a batch laid out as anchors, positives, negatives,
# sliced into three along the batch axis, then TripletLoss with triplet_loss_param.
TRIPLET_NET = """name: "triplet_block"
layer { name: "data" type: "Input" top: "data" input_param { shape { dim: 6 dim: 3 dim: 8 dim: 8 } } }
layer { name: "conv1" type: "Convolution" bottom: "data" top: "conv1" convolution_param { num_output: 4 kernel_size: 3 stride: 2 } }
layer { name: "relu1" type: "ReLU" bottom: "conv1" top: "conv1" }
layer { name: "feat" type: "InnerProduct" bottom: "conv1" top: "feat" inner_product_param { num_output: 8 } }
layer { name: "slice" type: "Slice" bottom: "feat" top: "anchor" top: "positive" top: "negative" slice_param { axis: 0 } }
layer { name: "triplet_loss" type: "TripletLoss" bottom: "anchor" bottom: "positive" bottom: "negative" top: "triplet_loss" triplet_loss_param { margin: 0.2 } }
"""


def test_optimize_plans_a_face_net_with_center_loss_and_a_softmax(tmp_path):
    check_plans(tmp_path, FACE_NET)


def test_optimize_plans_a_triplet_net(tmp_path):
    check_plans(tmp_path, TRIPLET_NET)

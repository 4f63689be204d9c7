"""What each layer spec says about running its Forward a second time, inside Net::Backward
(LayerSpec.recompute), and what that Forward costs (LayerSpec.forward_flops).

The answers are read from each type's Caffe source (cited in the family modules).  A layer
is ``safe`` when a second Forward with the same bottoms and parameters writes the same
bytes and changes nothing another step reads; ``restores_params`` when that holds only once
the runtime puts its parameter blobs back (BatchNorm's running averages); ``cheap`` when
the Forward has no matrix product (MXNet's mirror set).  FLOPs are a cost model: multiply-
adds count 2, worked out by hand below from the shapes.
"""

from __future__ import annotations

import pytest
from google.protobuf import text_format

from caffemem.layers import SpecTable
from caffemem.layers.registry import DATA_LAYER, NOT_STUDIED, builtin_specs, recompute_of
from caffemem.schema import caffe_pb2
from conftest import SHARED, needs_shared, run_shape_rule

# Built-in types left without a rule (never recomputed, "not studied"), each with its
# reason.  Empty: every built-in type has been read.  (Types declared with --layers have
# no rule by design: caffemem cannot read their code.)
NOT_STUDIED_TYPES: dict[str, str] = {}


def proto_of(text: str) -> caffe_pb2.LayerParameter:
    return text_format.Parse(text, caffe_pb2.LayerParameter())


def facts(text: str, phase: str = "TRAIN"):
    proto = proto_of(text)
    return recompute_of(SpecTable().get(proto.type), proto, phase)


def flops(text: str, *bottoms: tuple[int, ...]) -> int:
    """The spec's forward_flops on the shapes its own shape rule gives for ``bottoms`` (a
    layer written without bottoms gets one bottom "x" and one top "y")."""
    if "bottom:" not in text:
        text = f'bottom: "x" top: "y" {text}'
    proto = proto_of(text)
    rule = SpecTable().get(proto.type).forward_flops
    assert rule is not None, f"{proto.type} counts one FLOP per top element"
    return rule(proto, run_shape_rule(text, *bottoms))


def alexnet_layer(name: str) -> str:
    """A layer of BVLC AlexNet's deploy.prototxt, as text."""
    net = text_format.Parse((SHARED / "models/bvlc_alexnet/deploy.prototxt").read_text(), caffe_pb2.NetParameter())
    (layer,) = [layer for layer in net.layer if layer.name == name]
    return text_format.MessageToString(layer)


# --- every type has a rule ----------------------------------------------------------------


def test_every_registered_type_has_a_recompute_rule():
    # A data layer's answer is its spec's is_data (registry.recompute_of): it needs no rule.
    missing = sorted(t for t, spec in builtin_specs().items() if spec.recompute is None and not spec.is_data)
    assert missing == sorted(NOT_STUDIED_TYPES)


def test_every_data_layer_is_never_recomputed_as_a_data_layer():
    for type_, spec in builtin_specs().items():
        if spec.is_data and spec.recompute is None:
            assert recompute_of(spec, caffe_pb2.LayerParameter(type=type_, name="x"), "TRAIN") == DATA_LAYER, type_


@pytest.mark.parametrize("phase", ["TRAIN", "TEST"])
def test_every_rule_answers_for_a_default_layer_in_both_phases(phase):
    # Each rule reads only the parameters its type's Forward reads; a layer written with no
    # parameter at all must get an answer (with a reason) too.
    for type_, spec in builtin_specs().items():
        answer = recompute_of(spec, caffe_pb2.LayerParameter(type=type_, name="x"), phase)
        assert answer.why, type_
        assert not (answer.restores_params and not answer.safe), type_


def test_a_type_without_a_rule_is_never_recomputed():
    assert recompute_of(None, caffe_pb2.LayerParameter(type="Mystery"), "TRAIN") == NOT_STUDIED
    assert not NOT_STUDIED.safe


# --- what must never be recomputed -------------------------------------------------------


@pytest.mark.parametrize("type_", sorted(t for t, spec in builtin_specs().items() if spec.is_data))
def test_data_layers_are_never_recomputed(type_):
    # Each Forward takes the next batch (a cursor, a prefetch thread), or runs user code.
    assert not facts(f'type: "{type_}"').safe
    assert not facts(f'type: "{type_}"', "TEST").safe


def test_python_layers_are_never_recomputed():
    answer = facts('type: "Python" python_param { module: "m" layer: "L" }')
    assert not answer.safe
    assert "Python" in answer.why


@pytest.mark.parametrize("type_", sorted(t for t, spec in builtin_specs().items() if spec.auto_top))
def test_loss_layers_are_never_recomputed(type_):
    assert not facts(f'type: "{type_}"').safe


def test_any_layer_given_a_loss_weight_is_never_recomputed():
    # A ReLU is safe, but with a loss_weight its top is a loss, an output of the net.
    assert facts('type: "ReLU"').safe
    answer = facts('type: "ReLU" loss_weight: 1')
    assert not answer.safe
    assert "loss_weight" in answer.why
    assert facts('type: "ReLU" loss_weight: 0').safe  # weight 0: not a loss


@pytest.mark.parametrize("type_", ["Accuracy", "Silence", "SegAccuracy", "DetectionOutput", "DetectionEvaluate", "MatWrite", "CTCGreedyDecoder", "Yolov3DetectionOutput"])
def test_outputs_and_layers_without_tops_are_never_recomputed(type_):
    assert not facts(f'type: "{type_}"', "TEST").safe


def test_dropout_draws_a_new_mask_in_train_and_copies_in_test():
    assert not facts('type: "Dropout"', "TRAIN").safe
    test = facts('type: "Dropout"', "TEST")
    assert test.safe and test.cheap and not test.restores_params


def test_bayesian_segnet_dropout_draws_in_test_too():
    # caffe-segnet's sample_weights_test keeps dropping units at test time.
    assert not facts('type: "Dropout" dropout_param { sample_weights_test: true }', "TEST").safe


@pytest.mark.parametrize("type_", ["LSTM", "RNN"])
def test_recurrent_layers_carry_their_state_to_the_next_batch(type_):
    # Without expose_hidden, Forward copies h_T into h_0 first: not recomputed.
    text = f'type: "{type_}" recurrent_param {{ num_output: 4 }}'
    assert not facts(text).safe
    assert not facts(text, "TEST").safe


@pytest.mark.parametrize("type_", ["LSTM", "RNN"])
def test_recurrent_layers_with_exposed_state_are_safe_but_not_cheap(type_):
    answer = facts(f'type: "{type_}" recurrent_param {{ num_output: 4 expose_hidden: true }}')
    assert answer.safe and not answer.cheap


def test_junhyuk_lstm_with_continuation_flags_carries_its_state():
    assert facts('type: "Lstm" bottom: "x" lstm_param { num_output: 4 }').safe
    assert not facts('type: "Lstm" bottom: "x" bottom: "clip" lstm_param { num_output: 4 }').safe


def test_stochastic_pooling_draws_in_train_only():
    text = 'type: "Pooling" pooling_param { pool: STOCHASTIC kernel_size: 2 }'
    assert not facts(text, "TRAIN").safe
    assert facts(text, "TEST").safe
    assert not facts('type: "SPP" spp_param { pool: STOCHASTIC pyramid_height: 2 }', "TRAIN").safe


def test_fork_layers_with_iteration_counters_are_never_recomputed():
    assert not facts('type: "MarginInnerProduct"').safe  # sphereface's iter_
    annealed = 'type: "LabelSpecificAdd" label_specific_add_param { bias_base: 0.5 }'
    assert not facts(annealed, "TRAIN").safe  # iteration_++
    assert facts(annealed, "TEST").safe  # TEST returns after the copy
    assert facts('type: "LabelSpecificAdd" label_specific_add_param { bias: 0.3 }', "TRAIN").safe


def test_inner_product_that_normalises_its_weights_is_never_recomputed():
    # happynear's normalize rewrites blob 0 in every Forward.
    assert not facts('type: "InnerProduct" inner_product_param { num_output: 2 normalize: true }').safe


# --- BatchNorm and its forks ----------------------------------------------------------------


def test_batch_norm_in_train_restores_its_running_averages():
    answer = facts('type: "BatchNorm"', "TRAIN")
    assert answer.safe and answer.cheap and answer.restores_params


def test_batch_norm_in_test_changes_no_blob():
    answer = facts('type: "BatchNorm"', "TEST")
    assert answer.safe and answer.cheap and not answer.restores_params


def test_batch_norm_follows_use_global_stats_over_the_phase():
    assert not facts('type: "BatchNorm" batch_norm_param { use_global_stats: true }', "TRAIN").restores_params
    assert facts('type: "BatchNorm" batch_norm_param { use_global_stats: false }', "TEST").restores_params


def test_fork_bn_is_not_recomputed_in_train():
    # yjxiong's BN could be restored, but PSPNet's copy (same type, same parameters)
    # accumulates the statistics into the blobs' diffs on the GPU: in doubt, not safe.
    assert not facts('type: "BN" bn_param { frozen: true }', "TRAIN").safe
    assert not facts('type: "BN"', "TRAIN").safe
    assert facts('type: "BN"', "TEST").safe


def test_segnet_bn_keeps_no_statistics():
    answer = facts('type: "BN" bn_param { bn_mode: LEARN scale_filler { type: "constant" value: 1 } }', "TRAIN")
    assert answer.safe and answer.cheap and not answer.restores_params


# --- safe, and cheap or not ------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        'type: "ReLU"',
        'type: "Pooling" pooling_param { pool: MAX kernel_size: 2 }',
        'type: "Pooling" pooling_param { pool: AVE kernel_size: 2 }',
        'type: "Concat"',
        'type: "Eltwise"',
        'type: "Scale"',
        'type: "LRN"',
        'type: "Softmax"',
    ],
)
def test_elementwise_normalisation_pooling_and_copies_are_safe_and_cheap(text):
    for phase in ("TRAIN", "TEST"):
        answer = facts(text, phase)
        assert answer.safe and answer.cheap and not answer.restores_params


@pytest.mark.parametrize("type_", ["Split", "Reshape", "Flatten"])
def test_layers_sharing_their_bottom_are_safe_and_cheap(type_):
    answer = facts(f'type: "{type_}"')
    assert answer.safe and answer.cheap
    assert "shares" in answer.why


@pytest.mark.parametrize(
    "type_",
    ["Convolution", "InnerProduct", "Embed", "Convolution3D", "Deconvolution3D", "ConvolutionDepthwise", "DepthwiseConvolution", "Gram"],
)
def test_layers_with_a_matrix_product_are_safe_but_not_cheap(type_):
    answer = facts(f'type: "{type_}"')
    assert answer.safe and not answer.cheap and not answer.restores_params


def test_deconvolution_is_recomputed_with_caffe_engine_only():
    # cudnn_deconv_layer.cu's Forward is cudnnConvolutionBackwardData, whose algorithm 0
    # adds with atomics; Caffe's engine (asked for, or forced by a dilation) is pure.
    assert not facts('type: "Deconvolution" convolution_param { num_output: 2 kernel_size: 2 }').safe
    assert not facts('type: "Deconvolution" convolution_param { num_output: 2 kernel_size: 2 engine: CUDNN }').safe
    caffe = facts('type: "Deconvolution" convolution_param { num_output: 2 kernel_size: 2 engine: CAFFE }')
    assert caffe.safe and not caffe.cheap
    assert facts('type: "Deconvolution" convolution_param { num_output: 2 kernel_size: 2 dilation: 2 }').safe


# --- FLOPs (a cost model) ------------------------------------------------------------------


@needs_shared
def test_alexnet_conv1_flops():
    # 96x3x11x11, stride 4, 227 input: out (227 - 11) / 4 + 1 = 55; batch 1.
    # 2 * 96 * 55 * 55 * 3 * 11 * 11 = 210,830,400, plus the bias 96 * 55 * 55 = 290,400.
    assert flops(alexnet_layer("conv1"), (1, 3, 227, 227)) == 211_120_800


@needs_shared
def test_alexnet_conv2_grouped_flops():
    # 256 outputs, group 2: each sees 96 / 2 = 48 channels; 5x5, pad 2 on 27x27 keeps 27.
    # 2 * 256 * 27 * 27 * 48 * 5 * 5 = 447,897,600, plus the bias 256 * 27 * 27 = 186,624.
    assert flops(alexnet_layer("conv2"), (1, 96, 27, 27)) == 448_084_224


@needs_shared
def test_alexnet_fc6_flops():
    # K = 256 * 6 * 6 = 9216 -> N = 4096: 2 * 9216 * 4096 = 75,497,472, plus the bias 4096.
    assert flops(alexnet_layer("fc6"), (1, 256, 6, 6)) == 75_501_568


@needs_shared
def test_alexnet_norm1_and_pool1_flops():
    # norm1: 96 * 55 * 55 = 290,400 elements, each a window of local_size 5 plus 2: 2,032,800.
    assert flops(alexnet_layer("norm1"), (1, 96, 55, 55)) == 2_032_800
    # pool1: 3x3 stride 2 on 55 -> 27: 96 * 27 * 27 = 69,984 outputs of 9 each: 629,856.
    assert flops(alexnet_layer("pool1"), (1, 96, 55, 55)) == 629_856


def test_grouped_convolution_flops_without_bias():
    # 8 -> 6 channels in 2 groups (4 inputs each), 3x3 on 5x5 -> 3x3, batch 2, no bias:
    # 2 * (2 * 6 * 3 * 3) * (4 * 3 * 3) = 2 * 108 * 36 = 7,776.
    text = 'type: "Convolution" convolution_param { num_output: 6 kernel_size: 3 group: 2 bias_term: false }'
    assert flops(text, (2, 8, 5, 5)) == 7_776


def test_convolution_of_two_bottoms_counts_each_top():
    # Two 1x1 convolutions 3 -> 2 on 4x4: 2 tops * 2 * (2 * 4 * 4) * 3 + 2 * 32 bias = 448.
    text = 'type: "Convolution" bottom: "a" bottom: "b" top: "c" top: "d" convolution_param { num_output: 2 kernel_size: 1 }'
    assert flops(text, (1, 3, 4, 4), (1, 3, 4, 4)) == 448


def test_deconvolution_flops_count_the_bottom_elements():
    # FCN-style 2x upsampling: 21 -> 21 channels, kernel 4 stride 2 on 8x8 -> 2 * 7 + 4 = 18.
    # Each of the 21 * 8 * 8 = 1,344 bottom values meets 21 * 4 * 4 = 336 weights: 2 * 1344 * 336.
    text = 'type: "Deconvolution" convolution_param { num_output: 21 kernel_size: 4 stride: 2 bias_term: false }'
    assert flops(text, (1, 21, 8, 8)) == 903_168


def test_deconvolution_flops_with_pad_and_bias():
    # 4 -> 2 channels, kernel 3 stride 2 pad 1 on 5x5 -> 2 * 4 + 3 - 2 = 9; bottom 4 * 25 = 100
    # values meet 2 * 3 * 3 = 18 weights: 2 * 100 * 18 = 3,600, plus the bias 2 * 9 * 9 = 162.
    text = 'type: "Deconvolution" convolution_param { num_output: 2 kernel_size: 3 stride: 2 pad: 1 }'
    assert flops(text, (1, 4, 5, 5)) == 3_762


def test_inner_product_flops_on_a_later_axis():
    # axis 2: M = 2 * 3 = 6 rows of K = 5 -> N = 7: 2 * 6 * 5 * 7 = 420, plus the bias 42.
    text = 'type: "InnerProduct" inner_product_param { num_output: 7 axis: 2 }'
    assert flops(text, (2, 3, 5)) == 462


def test_embed_flops_copy_a_row_and_add_the_bias():
    # 2 x 3 indices into a 10 x 4 table: 24 values copied, 24 bias additions.
    assert flops('type: "Embed" embed_param { num_output: 4 input_dim: 10 }', (2, 3)) == 48


def test_eltwise_flops_are_bottoms_minus_one_per_element():
    # Three bottoms of 2 x 4: 2 operations per element, 16.
    assert flops('type: "Eltwise" bottom: "a" bottom: "b" bottom: "c" top: "d"', (2, 4), (2, 4), (2, 4)) == 16


def test_softmax_flops_are_five_per_element():
    # max, subtract, exp, sum, divide: 5 * 1000.
    assert flops('type: "Softmax"', (1, 1000)) == 5_000


def test_lstm_flops_are_its_matrix_products_and_bias():
    # T = 3, N = 2, I = 5, H = 4: per step and stream 2 * 16 * 5 (input) + 16 (bias) + 2 * 16 * 4
    # (hidden) = 304; times 6 = 1,824.
    text = 'type: "LSTM" bottom: "x" bottom: "cont" top: "h" recurrent_param { num_output: 4 }'
    assert flops(text, (3, 2, 5), (3, 2)) == 1_824


def test_convolution3d_flops():
    # C3D: 3 -> 4 channels, 3x3x3, pad 1 on 1 x 3 x 4 x 6 x 6 keeps 4 x 6 x 6 (144 places):
    # 2 * 4 * 144 * 3 * 27 = 93,312, plus the bias 576.
    text = 'type: "Convolution3D" convolution3d_param { num_output: 4 kernel_size: 3 kernel_depth: 3 pad: 1 temporal_pad: 1 }'
    assert flops(text, (1, 3, 4, 6, 6)) == 93_888


def test_deconvolution3d_flops_count_the_bottom_elements():
    # 2 -> 3 channels, kernel 2x2x2 stride 2 on 1 x 2 x 2 x 3 x 3 -> 4 x 6 x 6; the bottom's
    # 2 * 18 = 36 values meet 3 * 8 = 24 weights: 2 * 36 * 24 = 1,728, plus the bias 432.
    text = 'type: "Deconvolution3D" convolution3d_param { num_output: 3 kernel_size: 2 kernel_depth: 2 stride: 2 temporal_stride: 2 }'
    assert flops(text, (1, 2, 2, 3, 3)) == 2_160


def test_elementwise_types_leave_the_default_of_one_per_top_element():
    assert builtin_specs()["ReLU"].forward_flops is None


# --- a real net ------------------------------------------------------------------------------


@needs_shared
def test_resnet50_deploy_in_train_recomputes_everything_but_its_products_cheaply():
    # 228 layers: 53 Convolution and 1 InnerProduct (safe, not cheap); 53 BatchNorm, 53 Scale,
    # 49 ReLU, 16 Eltwise, 2 Pooling, 1 Softmax (safe and cheap: 174).  The deploy file sets
    # use_global_stats: true, so even in TRAIN no BatchNorm updates (or restores) a blob.
    net = text_format.Parse((SHARED / "models/resnet/ResNet-50-deploy.prototxt").read_text(), caffe_pb2.NetParameter())
    specs = SpecTable()
    answers = [recompute_of(specs.get(layer.type), layer, "TRAIN") for layer in net.layer]
    assert len(answers) == 228
    assert all(answer.safe for answer in answers)
    assert sum(answer.cheap for answer in answers) == 174
    assert not any(answer.restores_params for answer in answers)

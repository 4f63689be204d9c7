"""The upgrade pass gives what Caffe's upgrade_proto.cpp gives for old nets and solvers.

Each test states one behaviour of Caffe's UpgradeNetAsNeeded / UpgradeSolverAsNeeded with
the exact net it must produce.  The last group runs the real legacy files of ../shared and
checks the upgraded layers against what real Caffe built from them.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from google.protobuf import text_format

from caffemem.errors import CaffememError
from caffemem.passes.upgrade import V1_LAYER_TYPE_NAMES, upgrade_net, upgrade_solver
from caffemem.schema import caffe_pb2
from caffemem.schema.forks import FORK_ENUM_VALUES

SHARED = Path(__file__).resolve().parents[2].parent / "shared"
MODELS = SHARED / "models"
GROUNDTRUTH = SHARED / "groundtruth"
needs_models = pytest.mark.skipif(not MODELS.is_dir(), reason="../shared/models is not beside the repo")


def net(text: str) -> caffe_pb2.NetParameter:
    return text_format.Parse(text, caffe_pb2.NetParameter())


def solver(text: str) -> caffe_pb2.SolverParameter:
    return text_format.Parse(text, caffe_pb2.SolverParameter())


def same(actual, expected_text: str) -> None:
    """Message equality, shown as text so a failure reads as a diff."""
    expected = text_format.Parse(expected_text, type(actual)())
    assert text_format.MessageToString(actual) == text_format.MessageToString(expected)
    assert actual == expected


# ------------------------------------------------------------------ V0 -> current


def test_v0_padding_layer_is_folded_into_the_following_conv_layer():
    upgraded, notes = upgrade_net(
        net(
            """
            name: "padded"
            input: "data" input_dim: 1 input_dim: 3 input_dim: 8 input_dim: 8
            layers { layer { name: "pad1" type: "padding" pad: 2 } bottom: "data" top: "pad1" }
            layers { layer { name: "conv1" type: "conv" num_output: 4 kernelsize: 5 } bottom: "pad1" top: "conv1" }
            """
        )
    )
    same(
        upgraded,
        """
        name: "padded"
        layer { name: "input" type: "Input" top: "data" input_param { shape { dim: 1 dim: 3 dim: 8 dim: 8 } } }
        layer { name: "conv1" type: "Convolution" bottom: "data" top: "conv1"
                convolution_param { num_output: 4 pad: 2 kernel_size: 5 } }
        """,
    )
    assert "folded V0 padding layer 'pad1' (pad 2) into conv layer 'conv1'" in notes


def test_v0_padding_layer_before_pool_sets_the_pool_pad_and_overrides_its_own():
    upgraded, _ = upgrade_net(
        net(
            """
            input: "x" input_dim: 1 input_dim: 1 input_dim: 4 input_dim: 4
            layers { layer { name: "pad" type: "padding" pad: 1 } bottom: "x" top: "px" }
            layers { layer { name: "pool" type: "pool" pool: AVE kernelsize: 3 stride: 2 pad: 7 }
                     bottom: "px" top: "y" }
            """
        )
    )
    same(
        upgraded.layer[1],
        """
        name: "pool" type: "Pooling" bottom: "x" top: "y"
        pooling_param { pool: AVE kernel_size: 3 stride: 2 pad: 1 }
        """,
    )


def test_v0_padding_layer_feeding_a_non_conv_layer_is_an_error_naming_that_layer():
    with pytest.raises(CaffememError) as caught:
        upgrade_net(
            net(
                """
                input: "x" input_dim: 1 input_dim: 1 input_dim: 4 input_dim: 4
                layers { layer { name: "pad" type: "padding" pad: 1 } bottom: "x" top: "px" }
                layers { layer { name: "act" type: "relu" } bottom: "px" top: "y" }
                """
            ),
            file="old.prototxt",
        )
    assert caught.value.where.file == "old.prototxt"
    assert caught.value.where.layer == "act"
    assert caught.value.where.layer_type == "relu"
    assert "padding layer 'pad'" in caught.value.message


def test_v0_bottom_that_no_layer_produces_is_an_error():
    with pytest.raises(CaffememError) as caught:
        upgrade_net(net('layers { layer { name: "r" type: "relu" } bottom: "nowhere" top: "y" }'))
    assert caught.value.where.layer == "r"
    assert "'nowhere'" in caught.value.message


def test_v0_data_layer_fields_go_to_data_param_and_transform_param():
    upgraded, _ = upgrade_net(
        net(
            """
            layers {
              layer { name: "data" type: "data" source: "train_db" meanfile: "mean.binaryproto"
                      batchsize: 256 cropsize: 227 mirror: true scale: 0.5 rand_skip: 10 }
              top: "data" top: "label"
            }
            """
        )
    )
    same(
        upgraded,
        """
        layer {
          name: "data" type: "Data" top: "data" top: "label"
          transform_param { scale: 0.5 mirror: true crop_size: 227 mean_file: "mean.binaryproto" }
          data_param { source: "train_db" batch_size: 256 rand_skip: 10 }
        }
        """,
    )


def test_v0_conv_fields_and_blobs_lr_weight_decay_become_convolution_param_and_param_specs():
    upgraded, _ = upgrade_net(
        net(
            """
            input: "data" input_dim: 1 input_dim: 3 input_dim: 8 input_dim: 8
            layers {
              layer { name: "conv2" type: "conv" num_output: 256 kernelsize: 5 pad: 2 group: 2 stride: 1
                      biasterm: false weight_filler { type: "gaussian" std: 0.01 }
                      bias_filler { type: "constant" value: 1 }
                      blobs_lr: 1 blobs_lr: 2 weight_decay: 1 weight_decay: 0 }
              bottom: "data" top: "conv2"
            }
            """
        )
    )
    same(
        upgraded.layer[1],
        """
        name: "conv2" type: "Convolution" bottom: "data" top: "conv2"
        param { lr_mult: 1 decay_mult: 1 }
        param { lr_mult: 2 decay_mult: 0 }
        convolution_param { num_output: 256 bias_term: false pad: 2 kernel_size: 5 group: 2 stride: 1
                            weight_filler { type: "gaussian" std: 0.01 }
                            bias_filler { type: "constant" value: 1 } }
        """,
    )


def test_v0_innerproduct_lrn_dropout_concat_fields_move_to_their_params():
    upgraded, _ = upgrade_net(
        net(
            """
            input: "a" input_dim: 2 input_dim: 3 input_dim: 4 input_dim: 4
            layers { layer { name: "norm" type: "lrn" local_size: 3 alpha: 0.001 beta: 0.5 k: 2 } bottom: "a" top: "n" }
            layers { layer { name: "cat" type: "concat" concat_dim: 1 } bottom: "a" bottom: "n" top: "c" }
            layers { layer { name: "fc" type: "innerproduct" num_output: 10 biasterm: true } bottom: "c" top: "f" }
            layers { layer { name: "drop" type: "dropout" dropout_ratio: 0.3 } bottom: "f" top: "f" }
            layers { layer { name: "loss" type: "softmax_loss" } bottom: "f" bottom: "a" top: "l" }
            """
        )
    )
    same(
        upgraded,
        """
        layer { name: "input" type: "Input" top: "a" input_param { shape { dim: 2 dim: 3 dim: 4 dim: 4 } } }
        layer { name: "norm" type: "LRN" bottom: "a" top: "n" lrn_param { local_size: 3 alpha: 0.001 beta: 0.5 k: 2 } }
        layer { name: "cat" type: "Concat" bottom: "a" bottom: "n" top: "c" concat_param { concat_dim: 1 } }
        layer { name: "fc" type: "InnerProduct" bottom: "c" top: "f" inner_product_param { num_output: 10 bias_term: true } }
        layer { name: "drop" type: "Dropout" bottom: "f" top: "f" dropout_param { dropout_ratio: 0.3 } }
        layer { name: "loss" type: "SoftmaxWithLoss" bottom: "f" bottom: "a" top: "l" }
        """,
    )


def test_v0_image_and_window_data_fields_move_to_their_params():
    upgraded, _ = upgrade_net(
        net(
            """
            layers { layer { name: "img" type: "images" source: "list.txt" batchsize: 4 shuffle_images: true
                             new_height: 32 new_width: 48 rand_skip: 3 } top: "i" top: "il" }
            layers { layer { name: "win" type: "window_data" source: "w.txt" batchsize: 8 det_fg_threshold: 0.6
                             det_bg_threshold: 0.4 det_fg_fraction: 0.3 det_context_pad: 16
                             det_crop_mode: "square" cropsize: 227 } top: "w" top: "wl" }
            """
        )
    )
    same(
        upgraded,
        """
        layer { name: "img" type: "ImageData" top: "i" top: "il"
                image_data_param { source: "list.txt" batch_size: 4 rand_skip: 3 shuffle: true
                                   new_height: 32 new_width: 48 } }
        layer { name: "win" type: "WindowData" top: "w" top: "wl"
                transform_param { crop_size: 227 }
                window_data_param { source: "w.txt" batch_size: 8 fg_threshold: 0.6 bg_threshold: 0.4
                                    fg_fraction: 0.3 context_pad: 16 crop_mode: "square" } }
        """,
    )


def test_v0_parameter_unknown_for_the_layer_type_is_dropped_with_a_warning():
    upgraded, notes = upgrade_net(
        net('layers { layer { name: "r" type: "relu" num_output: 3 } bottom: "x" top: "x" } input: "x"')
    )
    same(upgraded, 'layer { name: "r" type: "ReLU" bottom: "x" top: "x" }')
    assert any("'num_output'" in note and "dropped" in note for note in notes)


def test_v0_unknown_layer_type_is_an_error():
    with pytest.raises(CaffememError) as caught:
        upgrade_net(net('layers { layer { name: "w" type: "wobble" } top: "y" }'))
    assert caught.value.where.layer == "w"
    assert "unknown V0 layer type 'wobble'" in caught.value.message


def test_v0_net_keeps_only_name_inputs_and_force_backward_at_top_level():
    upgraded, notes = upgrade_net(
        net(
            """
            name: "n" force_backward: true debug_info: true
            state { phase: TEST }
            layers { layer { name: "r" type: "relu" } bottom: "x" top: "x" }
            input: "x"
            """
        )
    )
    same(upgraded, 'name: "n" force_backward: true layer { name: "r" type: "ReLU" bottom: "x" top: "x" }')
    assert any("dropped: state, debug_info" in note for note in notes)


def test_v0_net_loses_current_format_layers_as_in_caffe():
    upgraded, notes = upgrade_net(
        net(
            """
            layer { name: "new" type: "ReLU" bottom: "x" top: "x" }
            layers { layer { name: "old" type: "relu" } bottom: "x" top: "x" }
            input: "x"
            """
        )
    )
    same(upgraded, 'layer { name: "old" type: "ReLU" bottom: "x" top: "x" }')
    assert any("dropped: layer" in note for note in notes)


# ------------------------------------------------------------------ V1 -> current


def test_v1_blobs_lr_and_weight_decay_become_param_specs():
    upgraded, notes = upgrade_net(
        net(
            """
            layers { name: "fc" type: INNER_PRODUCT bottom: "x" top: "y"
                     blobs_lr: 1 blobs_lr: 2 weight_decay: 1 weight_decay: 0
                     inner_product_param { num_output: 10 } }
            """
        )
    )
    same(
        upgraded,
        """
        layer { name: "fc" type: "InnerProduct" bottom: "x" top: "y"
                param { lr_mult: 1 decay_mult: 1 } param { lr_mult: 2 decay_mult: 0 }
                inner_product_param { num_output: 10 } }
        """,
    )
    assert notes == ["upgraded V1 layers to the current format"]


def test_v1_param_names_share_modes_and_a_lone_blobs_lr_fill_param_specs_by_index():
    upgraded, _ = upgrade_net(
        net(
            """
            layers { name: "c" type: CONVOLUTION bottom: "x" top: "y"
                     param: "w" param: "b" blob_share_mode: STRICT blob_share_mode: PERMISSIVE
                     blobs_lr: 3 }
            """
        )
    )
    same(
        upgraded.layer[0],
        """
        name: "c" type: "Convolution" bottom: "x" top: "y"
        param { name: "w" share_mode: STRICT lr_mult: 3 }
        param { name: "b" share_mode: PERMISSIVE }
        """,
    )


def test_v1_rules_loss_weight_blobs_and_layer_params_are_kept():
    upgraded, _ = upgrade_net(
        net(
            """
            name: "kept" force_backward: true
            layers { name: "loss" type: SOFTMAX_LOSS bottom: "p" bottom: "l" top: "loss"
                     include { phase: TRAIN } exclude { stage: "deploy" } loss_weight: 0.3
                     loss_param { ignore_label: 255 } softmax_param { axis: 1 }
                     blobs { num: 1 channels: 1 height: 1 width: 1 data: 7 } }
            """
        )
    )
    same(
        upgraded,
        """
        name: "kept" force_backward: true
        layer { name: "loss" type: "SoftmaxWithLoss" bottom: "p" bottom: "l" top: "loss"
                include { phase: TRAIN } exclude { stage: "deploy" } loss_weight: 0.3
                blobs { num: 1 channels: 1 height: 1 width: 1 data: 7 }
                loss_param { ignore_label: 255 } softmax_param { axis: 1 } }
        """,
    )


@pytest.mark.parametrize(
    ("v1_type", "current_type"),
    [
        ("CONVOLUTION", "Convolution"),
        ("POOLING", "Pooling"),
        ("SOFTMAX_LOSS", "SoftmaxWithLoss"),
        ("TANH", "TanH"),
        ("IM2COL", "Im2col"),
        ("ABSVAL", "AbsVal"),
        ("HDF5_DATA", "HDF5Data"),
        ("SIGMOID_CROSS_ENTROPY_LOSS", "SigmoidCrossEntropyLoss"),
        ("DECONVOLUTION", "Deconvolution"),
        ("NONE", ""),
    ],
)
def test_v1_enum_type_becomes_caffes_string_type(v1_type, current_type):
    upgraded, _ = upgrade_net(net(f'layers {{ name: "l" type: {v1_type} }}'))
    assert upgraded.layer[0].type == current_type


def test_every_v1_enum_value_of_the_schema_has_caffes_mapping():
    names = set(caffe_pb2.V1LayerParameter.LayerType.keys())
    assert names == set(V1_LAYER_TYPE_NAMES)
    # master's 40, plus the forks' values registered in caffemem/schema/forks.py
    forks_values = {v.name for v in FORK_ENUM_VALUES if v.enum == "V1LayerParameter.LayerType"}
    assert len(names - forks_values) == 40


def test_v1_data_layer_transformation_fields_move_to_transform_param():
    upgraded, notes = upgrade_net(
        net(
            """
            layers { name: "d" type: DATA top: "data" top: "label"
                     data_param { source: "db" batch_size: 64 scale: 0.00390625 mean_file: "m.binaryproto"
                                  crop_size: 28 mirror: true } }
            layers { name: "i" type: IMAGE_DATA top: "img" top: "lab" image_data_param { source: "l.txt" crop_size: 10 } }
            layers { name: "w" type: WINDOW_DATA top: "win" top: "wl" window_data_param { source: "w.txt" } }
            """
        )
    )
    same(
        upgraded,
        """
        layer { name: "d" type: "Data" top: "data" top: "label"
                transform_param { scale: 0.00390625 mirror: true crop_size: 28 mean_file: "m.binaryproto" }
                data_param { source: "db" batch_size: 64 } }
        layer { name: "i" type: "ImageData" top: "img" top: "lab"
                transform_param { crop_size: 10 } image_data_param { source: "l.txt" } }
        layer { name: "w" type: "WindowData" top: "win" top: "wl"
                transform_param { } window_data_param { source: "w.txt" } }
        """,
    )
    assert upgraded.layer[2].HasField("transform_param")  # Caffe leaves an empty one too
    assert (
        "moved data transformation fields (scale, mean_file, crop_size, mirror) of layer 'd' "
        "from data_param to transform_param" in notes
    )


def test_net_with_both_layer_and_layers_is_refused():
    with pytest.raises(CaffememError) as caught:
        upgrade_net(
            net('layer { name: "a" type: "ReLU" } layers { name: "b" type: RELU }'),
            file="mixed.prototxt",
        )
    assert caught.value.where.file == "mixed.prototxt"
    assert "both 'layer' and 'layers'" in caught.value.message


# ------------------------------------------------------------------ inputs


def test_input_dim_becomes_an_input_layer_named_input_placed_first():
    upgraded, notes = upgrade_net(
        net(
            """
            input: "data" input_dim: 10 input_dim: 3 input_dim: 227 input_dim: 227
            input: "rois" input_dim: 5 input_dim: 5 input_dim: 1 input_dim: 1
            layer { name: "r" type: "ReLU" bottom: "data" top: "data" }
            """
        )
    )
    same(
        upgraded,
        """
        layer { name: "input" type: "Input" top: "data" top: "rois"
                input_param { shape { dim: 10 dim: 3 dim: 227 dim: 227 } shape { dim: 5 dim: 5 dim: 1 dim: 1 } } }
        layer { name: "r" type: "ReLU" bottom: "data" top: "data" }
        """,
    )
    assert "replaced top-level input fields by an Input layer named 'input' (data 10x3x227x227; rois 5x5x1x1)" in notes


def test_input_shape_becomes_an_input_layer_with_those_shapes():
    upgraded, _ = upgrade_net(
        net('input: "x" input_shape { dim: 2 dim: 7 } layer { name: "r" type: "ReLU" bottom: "x" top: "y" }')
    )
    same(
        upgraded,
        """
        layer { name: "input" type: "Input" top: "x" input_param { shape { dim: 2 dim: 7 } } }
        layer { name: "r" type: "ReLU" bottom: "x" top: "y" }
        """,
    )


def test_input_without_any_dims_is_only_removed():
    upgraded, notes = upgrade_net(net('input: "x" layer { name: "r" type: "ReLU" bottom: "x" top: "y" }'))
    same(upgraded, 'layer { name: "r" type: "ReLU" bottom: "x" top: "y" }')
    assert any("removed top-level input 'x'" in note for note in notes)


def test_input_dim_with_fewer_than_four_values_per_input_is_an_error():
    with pytest.raises(CaffememError) as caught:
        upgrade_net(net('input: "x" input_dim: 1 input_dim: 3 input_dim: 8'))
    assert "four values" in caught.value.message


def test_fewer_input_shapes_than_inputs_is_an_error():
    with pytest.raises(CaffememError) as caught:
        upgrade_net(net('input: "a" input: "b" input_shape { dim: 1 }'), file="two.prototxt")
    assert caught.value.where.file == "two.prototxt"
    assert "2 input blobs but only 1 input_shape" in caught.value.message


# ------------------------------------------------------------------ BatchNorm


def test_batchnorm_with_three_param_specs_gets_zero_lr_and_decay_keeping_names():
    upgraded, notes = upgrade_net(
        net(
            """
            layer { name: "bn" type: "BatchNorm" bottom: "x" top: "x"
                    param { name: "m" lr_mult: 1 } param { lr_mult: 1 decay_mult: 5 } param { } }
            """
        )
    )
    same(
        upgraded,
        """
        layer { name: "bn" type: "BatchNorm" bottom: "x" top: "x"
                param { name: "m" lr_mult: 0 decay_mult: 0 } param { lr_mult: 0 decay_mult: 0 }
                param { lr_mult: 0 decay_mult: 0 } }
        """,
    )
    assert notes == ["set lr_mult and decay_mult to 0 in the 3 param specs of BatchNorm layer 'bn'"]


def test_batchnorm_with_other_than_three_param_specs_is_left_alone():
    original = net('layer { name: "bn" type: "BatchNorm" bottom: "x" top: "x" param { lr_mult: 1 } }')
    upgraded, notes = upgrade_net(original)
    assert upgraded == original
    assert notes == []


# ------------------------------------------------------------------ general


def test_current_net_comes_back_equal_with_no_notes():
    original = net(
        """
        name: "now" layer { name: "in" type: "Input" top: "x" input_param { shape { dim: 1 } } }
        layer { name: "r" type: "ReLU" bottom: "x" top: "y" }
        """
    )
    upgraded, notes = upgrade_net(original)
    assert upgraded == original
    assert notes == []


def test_input_message_is_not_changed_and_result_is_a_new_message():
    original = net(
        """
        input: "data" input_dim: 1 input_dim: 1 input_dim: 2 input_dim: 2
        layers { name: "d" type: DATA top: "t" data_param { scale: 2 } }
        """
    )
    before = original.SerializeToString()
    upgraded, _ = upgrade_net(original)
    assert original.SerializeToString() == before
    assert upgraded is not original
    assert len(original.layers) == 1 and len(original.layer) == 0


# ------------------------------------------------------------------ solver


def test_solver_type_enum_becomes_type_string():
    upgraded, notes = upgrade_solver(solver("base_lr: 0.01 solver_type: ADAGRAD"))
    same(upgraded, 'base_lr: 0.01 type: "AdaGrad"')
    assert not upgraded.HasField("solver_type")
    assert notes == ['upgraded solver_type: ADAGRAD to type: "AdaGrad"']


@pytest.mark.parametrize(
    ("enum", "string"),
    [
        ("SGD", "SGD"),
        ("NESTEROV", "Nesterov"),
        ("ADAGRAD", "AdaGrad"),
        ("RMSPROP", "RMSProp"),
        ("ADADELTA", "AdaDelta"),
        ("ADAM", "Adam"),
    ],
)
def test_every_solver_type_maps_as_in_caffe(enum, string):
    upgraded, _ = upgrade_solver(solver(f"solver_type: {enum}"))
    assert upgraded.type == string


def test_solver_with_both_solver_type_and_type_is_refused():
    with pytest.raises(CaffememError) as caught:
        upgrade_solver(solver('solver_type: SGD type: "Adam"'), file="solver.prototxt")
    assert caught.value.where.file == "solver.prototxt"
    assert "both" in caught.value.message


def test_solver_with_type_string_is_unchanged():
    original = solver('type: "Adam" base_lr: 0.001')
    upgraded, notes = upgrade_solver(original)
    assert upgraded == original and upgraded is not original
    assert notes == []


# ------------------------------------------------------------------ real legacy files vs real Caffe

LEGACY = [
    ("legacy_v0_bvlc_imagenet", "imagenet_train.prototxt"),
    ("legacy_v0_bvlc_imagenet", "imagenet_deploy.prototxt"),
    ("legacy_v1_bvlc_googlenet", "train_val.prototxt"),
    ("legacy_v1_vgg19", "VGG_ILSVRC_19_layers_deploy.prototxt"),
]
DATA_TYPES = {"Data", "ImageData", "WindowData", "HDF5Data", "MemoryData", "DummyData", "Python"}


def _meets_rule(rule, phase: str) -> bool:
    """Caffe's StateMeetsRule for a NetState with this phase, level 0 and no stages."""
    if rule.HasField("phase") and caffe_pb2.Phase.Name(rule.phase) != phase:
        return False
    if rule.HasField("min_level") and 0 < rule.min_level:
        return False
    if rule.HasField("max_level") and 0 > rule.max_level:
        return False
    return len(rule.stage) == 0


def _in_phase(layer, phase: str) -> bool:
    """Caffe's FilterNet decision for one layer."""
    included = len(layer.include) == 0
    if any(_meets_rule(rule, phase) for rule in layer.exclude):
        included = False
    if any(_meets_rule(rule, phase) for rule in layer.include):
        included = True
    return included


def _without_splits(layers: list[dict]) -> list[dict]:
    """Caffe's layers with its inserted Split layers taken out and their tops renamed back."""
    original: dict[str, str] = {}
    kept = []
    for layer in layers:
        if layer["type"] == "Split":
            for top in layer["tops"]:
                original[top] = original.get(layer["bottoms"][0], layer["bottoms"][0])
            continue
        kept.append({**layer, "bottoms": [original.get(b, b) for b in layer["bottoms"]]})
    return kept


@needs_models
@pytest.mark.parametrize(("folder", "name"), LEGACY)
def test_real_legacy_net_upgrades_to_the_layers_caffe_built(folder, name):
    path = MODELS / folder / name
    truth = json.loads((GROUNDTRUTH / f"{folder}__{Path(name).stem}.json").read_text())
    upgraded, notes = upgrade_net(net(path.read_text()), file=str(path))
    assert "upgraded V1 layers to the current format" in notes
    assert not upgraded.layers and not upgraded.input and not upgraded.input_dim

    for run in truth["runs"]:
        assert run["ok"]
        phase = run["phase"]
        ours = [layer for layer in upgraded.layer if _in_phase(layer, phase)]
        theirs = _without_splits(run["layers"])
        assert [layer.name for layer in ours] == [layer["name"] for layer in theirs], phase
        for mine, real in zip(ours, theirs):
            if real["type"] == "Input" and mine.type in DATA_TYPES:
                # The ground truth swapped this data layer for an Input layer of the same name.
                assert list(mine.bottom) == []
            else:
                assert mine.type == real["type"], (phase, mine.name)
                assert list(mine.bottom) == real["bottoms"], (phase, mine.name)
            # Net::Init (not the upgrade) names missing loss tops "(automatic)".
            assert list(mine.top) == [t for t in real["tops"] if t != "(automatic)"], (phase, mine.name)
            if real["params"] and mine.param:
                # blobs_lr / weight_decay gave one param spec per learnable blob.
                assert len(mine.param) == len(real["params"]), (phase, mine.name)


@needs_models
def test_real_v0_imagenet_conv_layer_upgrades_to_caffes_exact_layer():
    path = MODELS / "legacy_v0_bvlc_imagenet" / "imagenet_train.prototxt"
    upgraded, _ = upgrade_net(net(path.read_text()), file=str(path))
    conv2 = next(layer for layer in upgraded.layer if layer.name == "conv2")
    same(
        conv2,
        """
        name: "conv2" type: "Convolution" bottom: "norm1" top: "conv2"
        param { lr_mult: 1 decay_mult: 1 } param { lr_mult: 2 decay_mult: 0 }
        convolution_param { num_output: 256 pad: 2 kernel_size: 5 group: 2
                            weight_filler { type: "gaussian" std: 0.01 } bias_filler { type: "constant" value: 1 } }
        """,
    )
    same(
        upgraded.layer[0],
        """
        name: "data" type: "Data" top: "data" top: "label"
        transform_param { mirror: true crop_size: 227 mean_file: "../../data/ilsvrc12/imagenet_mean.binaryproto" }
        data_param { source: "ilvsrc12_train_leveldb" batch_size: 256 }
        """,
    )


@needs_models
def test_real_solver_with_solver_type_sgd_upgrades_to_type_sgd():
    path = MODELS / "places365" / "solver_vgg16.prototxt"
    upgraded, notes = upgrade_solver(solver(path.read_text()), file=str(path))
    assert upgraded.type == "SGD"
    assert not upgraded.HasField("solver_type")
    assert notes == ['upgraded solver_type: SGD to type: "SGD"']

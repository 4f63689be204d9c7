"""Memory rules of the fork layers (caffemem/layers/forks.py), in bytes derived by hand from
each fork's CPU code (float32: 4 bytes an element, a shape buffer 4 bytes an axis).

Most nets are an Input per bottom, then the layer under test named "l"; ``force_backward``
(the helper's default) makes every Backward run with every propagate_down allowed.  The
BN nets use a bottom (2,3,2,2): N = 2, C = 3, H = W = 2, 24 elements (96 bytes).
"""

from __future__ import annotations

from caffemem.api.analyze import Options, analyze

BOTTOM = {"x": (2, 3, 2, 2)}
TSN_BN = 'layer {{ name: "l" type: "BN" bottom: "x" top: "y" {} }}'
SEGNET_BN = 'layer {{ name: "l" type: "BN" bottom: "x" top: "y" bn_param {{ scale_filler {{ value: 1 }} {} }} }}'


def _bytes(layer) -> tuple[int, int, int]:
    return layer.init, layer.fwd_alloc, layer.bwd_alloc


def _data_report(tmp_path, body: str, **inputs):
    path = tmp_path / "net.prototxt"
    path.write_text(body)
    return analyze(str(path), Options(phase="TRAIN", inputs=inputs)).nets[0].memory


# ---- BN


def test_tsn_bn_setup(memory_of):
    # yjxiong bn_layer.cpp: 4 blobs (1,3) filled, 8 + 12 each; Reshape: top 16,
    # broadcast_buffer_, spatial_statistic_ (2,3,1,1), batch_statistic_ (1,3,1,1), x_norm_,
    # x_inv_std_ 16 each, spatial_sum_multiplier_ (1,1,2,2) 16 + 16, batch_sum_multiplier_
    # (2,1,1,1) 16 + 8 written.
    assert memory_of(TSN_BN.format(""), BOTTOM)["l"].init == 80 + 16 + 5 * 16 + 32 + 24


def test_tsn_bn_forward_keeps_x_norm_unless_frozen(memory_of):
    # bn_layer.cpp Forward_cpu: top 96, batch_statistic_ 12, spatial_statistic_ 24,
    # broadcast_buffer_ 96; x_norm_ 96 and x_inv_std_ 12 when not frozen (TEST as well).
    assert memory_of(TSN_BN.format(""), BOTTOM, phase="TEST")["l"].fwd_alloc == 228 + 108
    assert memory_of(TSN_BN.format("bn_param { frozen: true }"), BOTTOM)["l"].fwd_alloc == 228


def test_tsn_bn_backward(memory_of):
    # bn_layer.cpp Backward_cpu: the top's diff (96, no consumer), slope and bias diffs
    # (12 + 12), the bottom's diff 96.
    assert memory_of(TSN_BN.format(""), BOTTOM)["l"].bwd_alloc == 216


def test_frozen_tsn_bn_backward_gives_the_bottom_only(memory_of):
    # bn_layer.cpp Backward_cpu, frozen_: top diff 96 and bottom diff 96, no parameter diff.
    assert memory_of(TSN_BN.format("bn_param { frozen: true }"), BOTTOM)["l"].bwd_alloc == 192


def test_segnet_bn_setup(memory_of):
    # caffe-segnet bn_layer.cpp: scale and shift (1,3,1,1) 16 + 12 each; Reshape: top 16,
    # x_norm_, spatial_mean_, batch_mean_, spatial_variance_, batch_variance_, buffer_blob_
    # 16 each; spatial_sum_multiplier_ 16 + data 16 + diff 16, batch_sum_multiplier_ 16 + 8 + 8.
    assert memory_of(SEGNET_BN.format(""), BOTTOM)["l"].init == 56 + 16 + 96 + 48 + 32


def test_segnet_bn_forward_by_mode(memory_of):
    # bn_layer.cpp Forward_cpu LEARN: top 96, buffer_blob_ 96, spatial_mean_ 24, batch_mean_ 12,
    # spatial_variance_ 24, batch_variance_ 12, x_norm_ 96.  INFERENCE: top 96,
    # spatial_variance_ 24, buffer_blob_ 96, spatial_mean_ 24.
    assert memory_of(SEGNET_BN.format(""), BOTTOM)["l"].fwd_alloc == 360
    assert memory_of(SEGNET_BN.format("bn_mode: INFERENCE"), BOTTOM)["l"].fwd_alloc == 240


def test_segnet_bn_backward_ignores_propagate_down(memory_of):
    # bn_layer.cpp Backward_cpu: top diff 96, bottom diff 96, scale and shift diffs 12 + 12, and
    # the diffs of spatial_variance_ and spatial_mean_ as scratch (24 + 24), without testing
    # propagate_down: here the bottom is an Input and force_backward is off.
    layer = memory_of(SEGNET_BN.format("") + '\nlayer { name: "s" type: "Reduction" bottom: "y" top: "s" loss_weight: 1 }', BOTTOM, force_backward=False)["l"]
    assert layer.propagate_down == (False,)
    assert layer.bwd_alloc == 264 - 96  # the Reduction wrote the top's diff


# ---- data layers


def test_tsn_video_data_copies_one_batch(tmp_path):
    # yjxiong base_data_layer.cpp: one prefetch_data_ (2,3,4,4) 16 + 384 and prefetch_label_
    # (2,1,1,1) 16 + 8 written in LayerSetUp, transformed_data_ (1,3,4,4) 16; Forward copies
    # into the tops, which own their data: nothing of the input is in the batch.
    body = 'layer { name: "l" type: "VideoData" top: "data" top: "label" transform_param { crop_size: 4 } video_data_param { batch_size: 2 num_segments: 1 modality: RGB } }'
    report = _data_report(tmp_path, body)
    assert (report.prefetch_bytes, report.prefetched_input_bytes) == (440, 0)


def test_c3d_video_data_prefetches_like_master(tmp_path):
    # C3D-v1.1 base_data_layer.cpp: data_param.prefetch (4) batches of data (2,3,2,4,4) 20 + 768
    # and label (2,) 4 + 8, transformed_data_ (1,3,2,4,4) 20; the tops point into the batch.
    body = 'layer { name: "l" type: "VideoData" top: "data" top: "label" transform_param { crop_size: 4 } video_data_param { batch_size: 2 new_length: 2 use_image: true } }'
    report = _data_report(tmp_path, body)
    assert (report.prefetch_bytes, report.prefetched_input_bytes) == (20 + 4 * 800, 776)


def test_dense_image_data_transforms_data_and_label(tmp_path):
    # caffe-segnet dense_image_data_layer.cpp: one batch, data (2,3,4,4) 16 + 384 and label
    # (2,1,4,4) 16 + 128, transformed_data_ and transformed_label_ 16 each; copied to the tops.
    body = 'layer { name: "l" type: "DenseImageData" top: "data" top: "label" transform_param { crop_size: 4 } dense_image_data_param { batch_size: 2 } }'
    report = _data_report(tmp_path, body)
    assert (report.prefetch_bytes, report.prefetched_input_bytes) == (32 + 544, 0)


def test_image_labelmap_data_holds_three_batches(tmp_path):
    # s9xie/hed data_layers.hpp BasePrefetchingLabelmapDataLayer: PREFETCH_COUNT = 3 batches of
    # data (2,3,4,4) and labelmap (2,1,4,4) (544), transformed_data_, transformed_labelmap_.
    body = 'layer { name: "l" type: "ImageLabelmapData" top: "data" top: "label" image_data_param { batch_size: 2 new_height: 4 new_width: 4 } }'
    report = _data_report(tmp_path, body)
    assert (report.prefetch_bytes, report.prefetched_input_bytes) == (32 + 3 * 544, 0)


def test_annotated_data_holds_three_batches(tmp_path):
    # weiliu89 ssd base_data_layer.hpp: PREFETCH_COUNT = 3 (data_param.prefetch unread):
    # data (2,3,4,4) 16 + 384, label (1,1,5,8) 16 + 160, transformed_data_ 16; copied.
    body = 'layer { name: "l" type: "AnnotatedData" top: "data" top: "label" data_param { batch_size: 2 } }'
    report = _data_report(tmp_path, body, data=(2, 3, 4, 4), label=(1, 1, 5, 8))
    assert (report.prefetch_bytes, report.prefetched_input_bytes) == (16 + 3 * 576, 0)


# ---- SSD


def test_normalize(memory_of):
    # normalize_layer.cpp: scale () filled: 0 + 4 (channel_shared); LayerSetUp: buffer_
    # (1,3,2,2), buffer_channel_, buffer_spatial_, norm_ (2,1,1,1) 16 each,
    # sum_channel_multiplier_ 16 + 12 and sum_spatial_multiplier_ 16 + 16 written; top 16.
    # Forward: top 96, buffer_ 48, norm_ 8.  Backward: top diff 96, bottom diff 96,
    # buffer_channel_ 12, buffer_spatial_ 16, scale diff 4.
    layer = memory_of('layer { name: "l" type: "Normalize" bottom: "x" top: "y" }', BOTTOM)["l"]
    assert _bytes(layer) == (4 + 16 + 64 + 60, 152, 224)


def test_permute(memory_of):
    # permute_layer.cpp: top (2,4,3) 12; permute_order_, old_steps_, new_steps_ int
    # (3,1,1,1) 16 + 12 written each.  Forward writes the top (96); Backward both diffs.
    layer = memory_of('layer { name: "l" type: "Permute" bottom: "x" top: "y" permute_param { order: 0 order: 2 order: 1 } }', {"x": (2, 3, 4)})["l"]
    assert _bytes(layer) == (12 + 84, 96, 192)


def test_identity_permute_shares(memory_of):
    # permute_layer.cpp: need_permute_ false: Forward top.ShareData(bottom), Backward
    # bottom.ShareDiff(top): no bytes.
    layer = memory_of('layer { name: "l" type: "Permute" bottom: "x" top: "y" permute_param { order: 0 } }', {"x": (2, 3, 4)})["l"]
    assert _bytes(layer) == (12 + 84, 0, 0)


def test_prior_box_writes_its_top_only(memory_of):
    # prior_box_layer.cpp: top (1,2,16) 12; Forward writes it (128) from the bottoms' shapes;
    # Backward does nothing.
    body = 'layer { name: "l" type: "PriorBox" bottom: "f" bottom: "im" top: "p" prior_box_param { min_size: 2 } }'
    layer = memory_of(body, {"f": (1, 1, 2, 2), "im": (1, 3, 8, 8)})["l"]
    assert _bytes(layer) == (12, 128, 0)


def test_detection_output(memory_of):
    # detection_output_layer.cpp: 2 priors, 2 classes: top (1,1,2,7) 16; bbox_preds_ like loc
    # (1,8) 8, conf_permute_ like conf (1,4) 8 (data on the GPU only).  Forward writes the
    # top: 56.
    body = 'layer { name: "l" type: "DetectionOutput" bottom: "loc" bottom: "conf" bottom: "prior" top: "d" detection_output_param { num_classes: 2 } }'
    layer = memory_of(body, {"loc": (1, 8), "conf": (1, 4), "prior": (1, 2, 8)}, phase="TEST", force_backward=False)["l"]
    assert _bytes(layer) == (32, 56, 0)


MULTIBOX = (
    'layer { name: "l" type: "MultiBoxLoss" bottom: "loc" bottom: "conf" bottom: "prior" bottom: "gt" top: "loss" '
    "propagate_down: true propagate_down: true propagate_down: false propagate_down: false "
    "multibox_loss_param { num_classes: 2 } }"
)
MULTIBOX_INPUTS = {"loc": (1, 8), "conf": (1, 4), "prior": (1, 2, 8), "gt": (1, 1, 1, 8)}


def test_multibox_loss_setup(memory_of):
    # multibox_loss_layer.cpp LayerSetUp: loc_pred_, loc_gt_ (1,4) 8 + 8, loc_loss_ (1) 4; the
    # ssd SmoothL1Loss: diff_, errors_ (1,4,1,1) 16 + 16, loc_loss_'s diff (loc_weight 1) 4.
    # conf_loss_ 4, conf_gt_ (1) 4, conf_pred_ (1,2) 8; SoftmaxWithLoss: prob_ (1,2) 8, its
    # Softmax's sum_multiplier_ 4 + 8 and scale_ (1,1) 8, prob_'s diff 8 (loss_weight 1),
    # conf_loss_'s diff 4.  The loss top: 0 + its diff 4.
    assert memory_of(MULTIBOX, MULTIBOX_INPUTS, force_backward=False)["l"].init == 56 + 56 + 4


def test_multibox_loss_forward_sizes_for_every_prior(memory_of):
    # Forward_cpu with the most matches (2 priors): loc_pred_, loc_gt_ (1,8) 32 + 32, the
    # SmoothL1's diff_ and errors_ 32 + 32, loc_loss_ 4; mining (MAX_NEGATIVE, the default):
    # conf_gt_ (2) 8, conf_pred_ (2,2) 16, prob_ regrown: its SetUp diff freed (-8), data 16,
    # scale_ 8, conf_loss_ 4; the loss top 4.
    assert memory_of(MULTIBOX, MULTIBOX_INPUTS, force_backward=False)["l"].fwd_alloc == 132 + 44 + 4


def test_multibox_loss_backward(memory_of):
    # Backward_cpu (the predictions come from trained Bias layers): loc's diff 32 and
    # loc_pred_'s 32; conf's diff 16 and conf_pred_'s 16.
    trained = 'layer { name: "bl" type: "Bias" bottom: "l0" top: "loc" }\nlayer { name: "bc" type: "Bias" bottom: "c0" top: "conf" }\n'
    inputs = {"l0": (1, 8), "c0": (1, 4), "prior": (1, 2, 8), "gt": (1, 1, 1, 8)}
    assert memory_of(trained + MULTIBOX, inputs, force_backward=False)["l"].bwd_alloc == 96


def _multibox_handles(text: str, **options) -> int:
    """The cuDNN handles stock BVLC-style Caffe (weiliu89's) creates for the MultiBoxLoss "l"."""
    from caffemem.api.analyze import Options, analyze

    inputs = "".join(f'layer {{ name: "{name}" type: "Input" top: "{name}" input_param {{ shape {{ {" ".join(f"dim: {d}" for d in shape)} }} }} }}\n' for name, shape in MULTIBOX_INPUTS.items())
    device = analyze(inputs + text, Options(device="gpu", phase="TRAIN", **options)).nets[0].device
    return next(layer.cudnn_handles for layer in device.layers if layer.name == "l")


def test_multibox_loss_on_cudnn_holds_its_confidence_softmaxs_handle():
    # multibox_loss_layer.cpp LayerSetUp: conf_loss_layer_, a SoftmaxWithLoss built through
    # LayerRegistry, builds its Softmax the same way: CuDNNSoftmaxLayer, one cudnnCreate.
    assert (_multibox_handles(MULTIBOX), _multibox_handles(MULTIBOX, engine="caffe")) == (1, 0)


def test_multibox_losss_own_softmax_engine_does_not_reach_its_inner_softmax():
    # conf_loss_layer_ is built from a fresh LayerParameter (only softmax_param.axis set):
    # the engine is DEFAULT, the build's, whatever this layer's softmax_param says.
    assert _multibox_handles(MULTIBOX.replace("multibox_loss_param", "softmax_param { engine: CAFFE } multibox_loss_param")) == 1


def test_multibox_loss_with_a_logistic_confidence_holds_no_handle():
    # SigmoidCrossEntropyLossLayer constructs its SigmoidLayer itself: no LayerRegistry, no cuDNN.
    assert _multibox_handles(MULTIBOX.replace("num_classes: 2", "num_classes: 2 conf_loss_type: LOGISTIC")) == 0


# ---- other forks


def test_smooth_l1_loss(memory_of):
    # py-faster-rcnn smooth_L1_loss_layer.cpp Reshape: diff_, errors_, ones_ (2,3,1,1) 16
    # each, ones_ written 24; the loss diff 4.  smooth_L1_loss_layer.cu (the CPU code is
    # NOT_IMPLEMENTED): Forward diff_ 24, errors_ 24, top 4; Backward both bottoms' diffs.
    body = 'layer { name: "l" type: "SmoothL1Loss" bottom: "a" bottom: "b" top: "loss" loss_weight: 1 }'
    layer = memory_of(body, {"a": (2, 3), "b": (2, 3)})["l"]
    assert _bytes(layer) == (76, 52, 48)


def test_axpy(memory_of):
    # SENet axpy_layer.cpp: top (2,3,2,2) 16, spatial_sum_multiplier_ (4) 4 + 16.  Forward:
    # top 96.  Backward: top diff 96, x's diff 96, the scale's 24, y's 96.
    body = 'layer { name: "l" type: "Axpy" bottom: "s" bottom: "x" bottom: "y" top: "z" }'
    layer = memory_of(body, {"s": (2, 3, 1, 1), "x": (2, 3, 2, 2), "y": (2, 3, 2, 2)})["l"]
    assert _bytes(layer) == (36, 96, 312)

"""Shape rules of fork layers (caffemem/layers/forks.py), each from its fork's own source.

Comments name the fork file and the formula each expected shape comes from.
"""

from __future__ import annotations

import pytest

from caffemem.errors import CaffememError
from caffemem.layers import NeedsInput, SpecTable

# ---------------------------------------------------------------- BN


def test_bn_yjxiong_four_blobs_of_one_by_c(shape_of):
    # yjxiong bn_layer.cpp: slope, bias, mean, variance, each vector{1, channels}.
    shapes = shape_of('type: "BN" bn_param { frozen: true slope_filler { type: "constant" value: 1 } }', (2, 16, 5, 5))
    assert shapes.tops == ((2, 16, 5, 5),)
    assert shapes.params == ((1, 16),) * 4


def test_bn_without_bn_param_is_yjxiong(shape_of):
    assert shape_of('type: "BN"', (2, 3, 4, 4)).params == ((1, 3),) * 4


def test_bn_segnet_two_blobs(shape_of):
    # caffe-segnet bn_layer.cpp: scale, shift Blob(1, C, 1, 1); top Reshape(N, C, H, W).
    shapes = shape_of('type: "BN" bn_param { scale_filler { type: "constant" value: 1 } shift_filler { type: "constant" } }', (4, 64, 9, 9))
    assert shapes.tops == ((4, 64, 9, 9),)
    assert shapes.params == ((1, 64, 1, 1), (1, 64, 1, 1))


def test_bn_segnet_learn_mode_batch_statistics_tops(shape_of):
    # LEARN mode: top[1] batch mean, top[2] batch variance, both (1, C, 1, 1).
    text = 'type: "BN" top: "y" top: "mean" top: "var" bn_param { bn_mode: LEARN }'
    assert shape_of(text, (4, 8, 3, 3)).tops == ((4, 8, 3, 3), (1, 8, 1, 1), (1, 8, 1, 1))


def test_bn_segnet_inference_mode_one_top(shape_of):
    # MaxTopBlobs is 1 in INFERENCE mode.
    with pytest.raises(CaffememError, match="at most 1"):
        shape_of('type: "BN" top: "y" top: "mean" bn_param { bn_mode: INFERENCE }', (4, 8, 3, 3))


def test_bn_yjxiong_one_top(shape_of):
    with pytest.raises(CaffememError, match="exactly 1 top"):
        shape_of('type: "BN" top: "y" top: "z" bn_param { frozen: false }', (4, 8, 3, 3))


# ---------------------------------------------------------------- VideoData

TSN = "type: \"VideoData\" top: \"data\" top: \"label\" transform_param {{ crop_size: 224 }} video_data_param {{ batch_size: 32 {extra} }}"


def test_video_data_tsn_rgb_stacks_segments_in_channels(shape_of):
    # yjxiong video_data_layer.cpp: datum channels = 3 * new_length * num_segments; crop 224; label (batch, 1, 1, 1).
    shapes = shape_of(TSN.format(extra="new_length: 1 num_segments: 3 modality: RGB"))
    assert shapes.tops == ((32, 9, 224, 224), (32, 1, 1, 1))


def test_video_data_tsn_flow_is_the_default_modality(shape_of):
    # ReadSegmentFlowToDatum: 2 (x, y) channels per frame; modality defaults to FLOW.
    shapes = shape_of(TSN.format(extra="new_length: 5 num_segments: 3"))
    assert shapes.tops[0] == (32, 30, 224, 224)


def test_video_data_tsn_resize_without_crop(shape_of):
    text = 'type: "VideoData" top: "data" top: "label" video_data_param { batch_size: 2 modality: RGB new_height: 40 new_width: 50 }'
    assert shape_of(text).tops == ((2, 3, 40, 50), (2, 1, 1, 1))


def test_video_data_tsn_frame_size_from_input(shape_of):
    text = 'type: "VideoData" top: "data" top: "label" video_data_param { batch_size: 2 modality: RGB num_segments: 2 }'
    with pytest.raises(NeedsInput) as info:
        shape_of(text)
    assert info.value.blobs == ["data"]
    assert "--input data=_,6,H,W" in info.value.hint


def test_video_data_c3d_is_five_dimensional(shape_of):
    # C3D-v1.1 InferBlobShape(VolumeDatum): [batch, 3, length, crop, crop]; label [batch].
    text = (
        'type: "VideoData" top: "data" top: "label" transform_param { crop_size: 112 } '
        "video_data_param { batch_size: 10 new_length: 16 new_height: 128 new_width: 171 use_image: true }"
    )
    assert shape_of(text).tops == ((10, 3, 16, 112, 112), (10,))


def test_video_data_c3d_multiple_labels(shape_of):
    text = (
        'type: "VideoData" top: "data" top: "label" video_data_param { batch_size: 4 new_length: 8 '
        "new_height: 32 new_width: 32 use_multiple_label: true num_of_labels: 5 }"
    )
    assert shape_of(text).tops == ((4, 3, 8, 32, 32), (4, 5))


def test_video_data_c3d_multiple_labels_need_a_count(shape_of):
    text = 'type: "VideoData" top: "data" top: "label" video_data_param { new_height: 32 new_width: 32 use_multiple_label: true }'
    with pytest.raises(CaffememError, match="number of labels"):
        shape_of(text)


# ---------------------------------------------------------------- DenseImageData, ImageLabelmapData


def test_dense_image_data_crop_size(shape_of):
    # caffe-segnet dense_image_data_layer.cpp: crop_size > 0 -> (batch, channels, crop, crop) and (batch, 1, crop, crop).
    text = 'type: "DenseImageData" top: "data" top: "label" transform_param { crop_size: 64 } dense_image_data_param { batch_size: 4 }'
    assert shape_of(text).tops == ((4, 3, 64, 64), (4, 1, 64, 64))


def test_dense_image_data_crop_height_width(shape_of):
    text = 'type: "DenseImageData" top: "data" top: "label" dense_image_data_param { batch_size: 4 crop_height: 30 crop_width: 40 is_color: false }'
    assert shape_of(text).tops == ((4, 1, 30, 40), (4, 1, 30, 40))


def test_dense_image_data_resized(shape_of):
    text = 'type: "DenseImageData" top: "data" top: "label" dense_image_data_param { batch_size: 4 new_height: 360 new_width: 480 }'
    assert shape_of(text).tops == ((4, 3, 360, 480), (4, 1, 360, 480))


def test_dense_image_data_label_follows_given_data(shape_of):
    # Without a resize or crop both tops take the first image's size: a --input data sizes the label.
    text = 'type: "DenseImageData" top: "data" top: "label" dense_image_data_param { batch_size: 4 }'
    assert shape_of(text, inputs={"data": (4, 3, 360, 480)}).tops == ((4, 3, 360, 480), (4, 1, 360, 480))


def test_dense_image_data_needs_input_without_size(shape_of):
    with pytest.raises(NeedsInput) as info:
        shape_of('type: "DenseImageData" top: "data" top: "label" dense_image_data_param { batch_size: 4 }')
    assert info.value.blobs == ["data", "label"]


def test_dense_image_data_crop_pair(shape_of):
    with pytest.raises(CaffememError, match="same time"):
        shape_of('type: "DenseImageData" top: "data" top: "label" dense_image_data_param { batch_size: 4 crop_height: 30 }')


def test_image_labelmap_data(shape_of):
    # HED image_labelmap_data_layer.cpp: InferBlobShape of the image (3 ch) and of the grey map (1 ch).
    text = (
        'type: "ImageLabelmapData" top: "data" top: "label" transform_param { crop_size: 100 } '
        "image_data_param { batch_size: 1 new_height: 200 new_width: 300 }"
    )
    assert shape_of(text).tops == ((1, 3, 100, 100), (1, 1, 100, 100))


def test_image_labelmap_data_without_size(shape_of):
    text = 'type: "ImageLabelmapData" top: "data" top: "label" image_data_param { batch_size: 1 new_height: 0 new_width: 0 }'
    with pytest.raises(NeedsInput) as info:
        shape_of(text)
    assert "--input data=_,3,H,W" in info.value.hint and "--input label=_,1,H,W" in info.value.hint
    assert shape_of(text, inputs={"data": (1, 3, 321, 481)}).tops == ((1, 3, 321, 481), (1, 1, 321, 481))


# ---------------------------------------------------------------- AnnotatedData

ANNOTATED = 'type: "AnnotatedData" top: "data" top: "label" data_param {{ batch_size: 4 }} transform_param {{ {transform} }}'


def test_annotated_data_warp_resize(shape_of):
    # ssd InferBlobShape: InferNewSize(WARP) = resize height x width; channels from the LMDB.
    text = ANNOTATED.format(transform="resize_param { resize_mode: WARP height: 300 width: 300 }")
    with pytest.raises(NeedsInput) as info:
        shape_of(text)
    assert info.value.blobs == ["data", "label"]
    assert "--input data=_,C,300,300" in info.value.hint
    assert "--input label=_,1,N,8" in info.value.hint


def test_annotated_data_from_inputs(shape_of):
    text = ANNOTATED.format(transform="resize_param { height: 300 width: 300 }")
    shapes = shape_of(text, inputs={"data": (4, 3, 300, 300), "label": (1, 1, 12, 8)})
    assert shapes.tops == ((4, 3, 300, 300), (1, 1, 12, 8))


def test_annotated_data_crop_overrides_resize(shape_of):
    text = ANNOTATED.format(transform="crop_h: 200 crop_w: 250 resize_param { height: 300 width: 300 }")
    with pytest.raises(NeedsInput) as info:
        shape_of(text)
    assert "--input data=_,C,200,250" in info.value.hint


def test_annotated_data_fit_small_size_needs_batch_one(shape_of):
    text = ANNOTATED.format(transform="resize_param { resize_mode: FIT_SMALL_SIZE height: 300 width: 300 }")
    with pytest.raises(CaffememError, match="batch size of 1"):
        shape_of(text)


# ---------------------------------------------------------------- Normalize, Permute


def test_normalize_channel_wise_scale(shape_of):
    # normalize_layer.cpp: blobs_[0] is vector<int>(1, channels) unless channel_shared.
    shapes = shape_of('type: "Normalize" norm_param { across_spatial: false channel_shared: false }', (1, 512, 38, 38))
    assert shapes.tops == ((1, 512, 38, 38),)
    assert shapes.params == ((512,),)


def test_normalize_shared_scale_is_a_scalar_blob(shape_of):
    # channel_shared (default): Blob(vector<int>(0)), a 0-axis blob holding one value.
    assert shape_of('type: "Normalize"', (2, 8, 4, 4)).params == ((),)


def test_normalize_needs_two_axes(shape_of):
    with pytest.raises(CaffememError, match=">=2"):
        shape_of('type: "Normalize"', (8,))


def test_permute_named_and_remaining_axes(shape_of):
    # permute_layer.cpp: top_shape[i] = bottom->shape(orders[i]); unnamed axes follow in order.
    assert shape_of('type: "Permute" permute_param { order: 0 order: 2 order: 3 order: 1 }', (1, 16, 38, 38)).tops == ((1, 38, 38, 16),)
    assert shape_of('type: "Permute" permute_param { order: 2 }', (2, 3, 4, 5)).tops == ((4, 2, 3, 5),)


def test_permute_refuses_duplicate_and_out_of_range_orders(shape_of):
    with pytest.raises(CaffememError, match="duplicate"):
        shape_of('type: "Permute" permute_param { order: 1 order: 1 }', (2, 3, 4))
    with pytest.raises(CaffememError, match="less than"):
        shape_of('type: "Permute" permute_param { order: 3 }', (2, 3, 4))


# ---------------------------------------------------------------- PriorBox

PRIOR = 'type: "PriorBox" bottom: "f" bottom: "img" prior_box_param {{ min_size: 30 {extra} }}'


def test_prior_box_ssd_conv4_3(shape_of):
    # Ratios {1, 2, 1/2} x 1 min size + 1 max size = 4 priors; 38 * 38 * 4 * 4 = 23104.
    shapes = shape_of(PRIOR.format(extra="max_size: 60 aspect_ratio: 2 flip: true clip: false"), (1, 512, 38, 38), (1, 3, 300, 300))
    assert shapes.tops == ((1, 2, 23104),)


def test_prior_box_two_ratios_with_flip(shape_of):
    # {1, 2, 1/2, 3, 1/3} + max size = 6 priors; 10 * 10 * 6 * 4 = 2400.
    text = PRIOR.format(extra="max_size: 60 aspect_ratio: 2 aspect_ratio: 3")
    assert shape_of(text, (1, 8, 10, 10), (1, 3, 300, 300)).tops == ((1, 2, 2400),)


def test_prior_box_ignores_duplicate_ratios_and_honours_no_flip(shape_of):
    # aspect_ratio 1 is already there, 2 repeated once; no flip: {1, 2} x 2 min sizes = 4 priors.
    text = 'type: "PriorBox" bottom: "f" bottom: "img" prior_box_param { min_size: 10 min_size: 20 aspect_ratio: 1 aspect_ratio: 2 aspect_ratio: 2 flip: false }'
    assert shape_of(text, (1, 8, 3, 5), (1, 3, 30, 50)).tops == ((1, 2, 3 * 5 * 4 * 4),)


def test_prior_box_flipped_ratio_counts_as_duplicate(shape_of):
    # aspect_ratio 0.5 after 2 with flip: 1/2 is already present, so {1, 2, 0.5}: 3 priors.
    text = PRIOR.format(extra="aspect_ratio: 2 aspect_ratio: 0.5")
    assert shape_of(text, (1, 8, 1, 1), (1, 3, 30, 30)).tops == ((1, 2, 12),)


def test_prior_box_needs_min_size(shape_of):
    with pytest.raises(CaffememError, match="min_size"):
        shape_of('type: "PriorBox" prior_box_param { aspect_ratio: 2 }', (1, 8, 3, 3), (1, 3, 9, 9))


def test_prior_box_max_size_above_min_size(shape_of):
    with pytest.raises(CaffememError, match="greater than min_size"):
        shape_of(PRIOR.format(extra="max_size: 20"), (1, 8, 3, 3), (1, 3, 9, 9))


def test_prior_box_four_variances(shape_of):
    with pytest.raises(CaffememError, match="4 variance"):
        shape_of(PRIOR.format(extra="variance: 0.1 variance: 0.2"), (1, 8, 3, 3), (1, 3, 9, 9))


def test_prior_box_img_size_and_img_h_conflict(shape_of):
    with pytest.raises(CaffememError, match="not both"):
        shape_of(PRIOR.format(extra="img_size: 300 img_h: 300 img_w: 300"), (1, 8, 3, 3), (1, 3, 9, 9))


def test_prior_box_with_img_size_needs_no_image_bottom(shape_of):
    text = 'type: "PriorBox" bottom: "f" prior_box_param { min_size: 30 img_size: 300 }'
    assert shape_of(text, (1, 8, 2, 2)).tops == ((1, 2, 16),)
    with pytest.raises(CaffememError, match="bottom\\[1\\]"):
        shape_of('type: "PriorBox" bottom: "f" prior_box_param { min_size: 30 }', (1, 8, 2, 2))


# ---------------------------------------------------------------- DetectionOutput

DETECT = 'type: "DetectionOutput" bottom: "loc" bottom: "conf" bottom: "prior" detection_output_param {{ num_classes: 21 {extra} }}'


def test_detection_output_bound_is_keep_top_k_per_image(shape_of):
    # SSD deploy: 8732 priors, keep_top_k 200 < 20 classes x min(400, 8732): [1, 1, 200 * N, 7].
    text = DETECT.format(extra="nms_param { nms_threshold: 0.45 top_k: 400 } keep_top_k: 200")
    shapes = shape_of(text, (2, 8732 * 4), (2, 8732 * 21), (1, 2, 8732 * 4))
    assert shapes.tops == ((1, 1, 400, 7),)


def test_detection_output_bound_without_keep_top_k(shape_of):
    # No keep_top_k: every class but background keeps up to min(top_k, priors) boxes: 20 * 3 = 60.
    text = DETECT.format(extra="nms_param { top_k: 5 }")
    assert shape_of(text, (1, 12), (1, 63), (1, 2, 12)).tops == ((1, 1, 60, 7),)


def test_detection_output_at_least_one_row_per_image(shape_of):
    # keep_top_k 0: Forward writes one "no detection" row per image.
    text = DETECT.format(extra="keep_top_k: 0")
    assert shape_of(text, (3, 8), (3, 42), (1, 2, 8)).tops == ((1, 1, 3, 7),)


def test_detection_output_checks_prediction_counts(shape_of):
    # CHECK_EQ(num_priors_ * num_loc_classes_ * 4, bottom[0]->channels()).
    with pytest.raises(CaffememError, match="location predictions"):
        shape_of(DETECT.format(extra=""), (1, 16), (1, 42), (1, 2, 8))
    with pytest.raises(CaffememError, match="confidence predictions"):
        shape_of(DETECT.format(extra=""), (1, 8), (1, 40), (1, 2, 8))


def test_detection_output_needs_num_classes(shape_of):
    with pytest.raises(CaffememError, match="num_classes"):
        shape_of('type: "DetectionOutput" detection_output_param { keep_top_k: 1 }', (1, 8), (1, 42), (1, 2, 8))


# ---------------------------------------------------------------- MultiBoxLoss, SmoothL1Loss

MULTIBOX = 'type: "MultiBoxLoss" bottom: "loc" bottom: "conf" bottom: "prior" bottom: "gt" top: "loss" multibox_loss_param {{ num_classes: 21 {extra} }}'


def test_multibox_loss_is_a_scalar(shape_of):
    # LossLayer::Reshape: a 0-axis top; no parameter blobs.
    shapes = shape_of(MULTIBOX.format(extra=""), (4, 32), (4, 168), (1, 2, 32), (1, 1, 7, 8))
    assert shapes.tops == ((),)
    assert shapes.params == ()


def test_multibox_loss_prediction_counts(shape_of):
    with pytest.raises(CaffememError, match="confidence predictions"):
        shape_of(MULTIBOX.format(extra=""), (4, 32), (4, 160), (1, 2, 32), (1, 1, 7, 8))


def test_multibox_loss_background_label_in_range_for_softmax(shape_of):
    with pytest.raises(CaffememError, match="background_label_id"):
        shape_of(MULTIBOX.format(extra="background_label_id: 21"), (4, 32), (4, 168), (1, 2, 32), (1, 1, 7, 8))


def test_multibox_loss_mining_needs_shared_location(shape_of):
    with pytest.raises(CaffememError, match="share_location"):
        shape_of(MULTIBOX.format(extra="share_location: false"), (4, 32 * 21), (4, 168), (1, 2, 32), (1, 1, 7, 8))


def test_smooth_l1_loss_with_weights(shape_of):
    # py-faster-rcnn smooth_L1_loss_layer.cpp: 2 or 4 bottoms of equal C, H, W; scalar top.
    shapes = shape_of('type: "SmoothL1Loss"', (1, 36, 14, 14), (1, 36, 14, 14), (1, 36, 14, 14), (1, 36, 14, 14))
    assert shapes.tops == ((),)


def test_smooth_l1_loss_three_bottoms_is_rfcn_s(shape_of):
    # py-faster-rcnn refuses three bottoms ("must specify both inside and outside weights");
    # daijifeng001/caffe-rfcn's SmoothL1Loss takes one weight blob (tests/layers/test_rfcn_losses.py)
    assert shape_of('type: "SmoothL1Loss" top: "l" loss_weight: 1', (2, 8), (2, 8), (2, 8)).tops == ((),)


def test_smooth_l1_loss_shapes_must_agree(shape_of):
    with pytest.raises(CaffememError, match="channels"):
        shape_of('type: "SmoothL1Loss"', (2, 8), (2, 4))


# ---------------------------------------------------------------- Axpy


def test_axpy_top_like_x(shape_of):
    # SENet axpy_layer.cpp: top ReshapeLike(bottom[1]); scale is [N, C, 1, 1].
    assert shape_of('type: "Axpy"', (2, 64, 1, 1), (2, 64, 7, 7), (2, 64, 7, 7)).tops == ((2, 64, 7, 7),)


def test_axpy_scale_must_be_per_channel(shape_of):
    with pytest.raises(CaffememError, match=r"\[N, C, 1, 1\]"):
        shape_of('type: "Axpy"', (2, 64, 7, 7), (2, 64, 7, 7), (2, 64, 7, 7))


def test_axpy_x_and_y_alike(shape_of):
    with pytest.raises(CaffememError, match="same shape"):
        shape_of('type: "Axpy"', (2, 64, 1, 1), (2, 64, 7, 7), (2, 64, 5, 5))


# ---------------------------------------------------------------- specs


@pytest.mark.parametrize("type_", ["VideoData", "AnnotatedData", "DenseImageData", "ImageLabelmapData"])
def test_fork_data_layers_are_marked_data(type_):
    assert SpecTable().get(type_).is_data


@pytest.mark.parametrize("type_", ["MultiBoxLoss", "SmoothL1Loss"])
def test_fork_losses_create_their_top(type_):
    assert SpecTable().get(type_).auto_top


# ---------------------------------------------------------------- eric612/MobileNet-YOLO AnnotatedData


def test_yolo_annotated_data_has_a_fixed_label(shape_of):
    # eric612/MobileNet-YOLO annotated_data_layer.cpp: yolo_data_type 1 makes the box label
    # [batch, 1, 300, 5] (its models/yolov3/mobilenet_yolov3_lite_train.prototxt); only the
    # channels of the data stay the database's.
    text = (
        'type: "AnnotatedData" top: "data" top: "label" data_param { batch_size: 6 } '
        "transform_param { resize_param { height: 416 width: 416 } } "
        "annotated_data_param { yolo_data_type: 1 yolo_data_jitter: 0.3 }"
    )
    with pytest.raises(NeedsInput) as asked:
        shape_of(text)
    assert asked.value.blobs == ["data"]
    assert shape_of(text, inputs={"data": (6, 3, 416, 416)}).tops == ((6, 3, 416, 416), (6, 1, 300, 5))

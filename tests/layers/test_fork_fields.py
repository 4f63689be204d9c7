"""Fork fields that change no layer type but must parse and be honoured: py-faster-rcnn's
Dropout ``scale_train``, ENet's ``label_divide_factor``, PSPNet's transform ``scale_factors``.

Each net mirrors the named original, cut down to a few pixels; bytes are float32 (4 bytes a
value) with a 4-byte-per-axis shape buffer per Blob.
"""

from __future__ import annotations

from caffemem.api.analyze import Options, analyze
from caffemem.api.optimize import OptimizeSettings, optimize
from caffemem.plan.verify import verify_plan


def write(tmp_path, text: str) -> str:
    path = tmp_path / "net.prototxt"
    path.write_text(text)
    return str(path)


# --- DropoutParameter.scale_train (rbgirshick/caffe-fast-rcnn@4115385d dropout_layer.cpp) ----

# py-faster-rcnn's models/pascal_voc/ZF/faster_rcnn_end2end/train.prototxt keeps the stock
# Dropout; its fc6/drop6 block with caffe-fast-rcnn's scale_train switched off:
DROPOUT_NET = """name: "ZF"
layer { name: "input" type: "Input" top: "pool5" top: "labels" input_param { shape { dim: 4 dim: 8 dim: 3 dim: 3 } shape { dim: 4 } } }
layer { name: "fc6" type: "InnerProduct" bottom: "pool5" top: "fc6" inner_product_param { num_output: 16 } }
layer { name: "relu6" type: "ReLU" bottom: "fc6" top: "fc6" }
layer { name: "drop6" type: "Dropout" bottom: "fc6" top: "fc6" dropout_param { dropout_ratio: 0.5 %s} }
layer { name: "cls_score" type: "InnerProduct" bottom: "fc6" top: "cls_score" inner_product_param { num_output: 3 } }
layer { name: "loss_cls" type: "SoftmaxWithLoss" bottom: "cls_score" bottom: "labels" top: "loss_cls" }
"""


def test_scale_train_false_parses_and_touches_what_stock_dropout_touches(tmp_path):
    # scale_train only moves the 1/(1-p) scaling from the TRAIN pass to the TEST pass: the
    # mask rand_vec_ (4*16 uint: shape 8 at Reshape, 256 written by Forward) and the
    # in-place top are touched the same way.
    net = analyze(write(tmp_path, DROPOUT_NET % "scale_train: false "), Options(phase="TRAIN")).nets[0]
    drop = net.shaped.graph.layers[3]
    assert drop.proto.dropout_param.scale_train is False
    stock = analyze(write(tmp_path, DROPOUT_NET % ""), Options(phase="TRAIN")).nets[0]
    got = {layer.name: (layer.init, layer.fwd_alloc, layer.bwd_alloc) for layer in net.memory.layers}
    assert got == {layer.name: (layer.init, layer.fwd_alloc, layer.bwd_alloc) for layer in stock.memory.layers}
    drop6 = {layer.name: layer for layer in net.memory.layers}["drop6"]
    assert (drop6.init, drop6.fwd_alloc) == (8, 256)
    assert net.memory.total_bytes == stock.memory.total_bytes


def test_scale_train_net_optimizes(tmp_path):
    result = optimize(write(tmp_path, DROPOUT_NET % "scale_train: false "), Options(), OptimizeSettings())
    for phase in result.phases:
        assert verify_plan(phase.schedule, phase.plan_data) == []


# --- DenseImageDataParameter.label_divide_factor (TimoSaemann/caffe-enet@22d356c9) ----------

# TimoSaemann/ENet prototxts/enet_train_encoder.prototxt: 512 x 1024 images, batch 4, the
# label read at 1/8 for the encoder; here 16 x 32, batch 2.
ENET_ENCODER = """name: "ENet"
layer {
  name: "data"
  type: "DenseImageData"
  top: "data"
  top: "label"
  dense_image_data_param {
    source: "ENet/dataset/train_fine_2columns.txt"
    batch_size: 2
    shuffle: true
    new_height: 16
    new_width: 32
    label_divide_factor: 8
  }
}
layer { name: "conv0_1" type: "Convolution" bottom: "data" top: "conv0_1" convolution_param { num_output: 13 bias_term: true pad: 1 kernel_size: 3 stride: 2 } }
layer { name: "pool0" type: "Pooling" bottom: "conv0_1" top: "pool0" pooling_param { pool: MAX kernel_size: 2 stride: 2 } }
layer { name: "pool1" type: "Pooling" bottom: "pool0" top: "pool1" pooling_param { pool: MAX kernel_size: 2 stride: 2 } }
layer { name: "score" type: "Convolution" bottom: "pool1" top: "score" convolution_param { num_output: 5 kernel_size: 1 } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "score" bottom: "label" top: "loss" loss_param { ignore_label: 255 } }
"""


def test_label_divide_factor_shrinks_the_label(tmp_path):
    net = analyze(write(tmp_path, ENET_ENCODER), Options(phase="TRAIN")).nets[0]
    # dense_image_data_layer.cpp, no crop: data (2, 3, 16, 32); label (2, 1, 16/8, 32/8)
    assert net.blobs["data"] == (2, 3, 16, 32) and net.blobs["label"] == (2, 1, 2, 4)
    # conv0_1: (16+2-3)/2+1 = 8, 16; two poolings: 4x8, 2x4 -- the label's size, as the loss wants
    assert net.blobs["score"] == (2, 5, 2, 4)
    # SegNet's prefetching (one copied batch): prefetch_data_ 16 + 2*3*16*32*4 = 12304,
    # prefetch_label_ 16 + 2*2*4*4 = 80, transformed_data_ and transformed_label_ shaped: 16 + 16
    assert net.memory.prefetch_bytes == 12304 + 80 + 16 + 16


def test_label_divide_factor_is_not_applied_to_a_crop(tmp_path):
    # ENet's layer reshapes both tops to crop_height x crop_width when a crop is set.
    data_layer = ENET_ENCODER[: ENET_ENCODER.index('layer { name: "conv0_1"')]
    text = data_layer.replace("label_divide_factor: 8", "label_divide_factor: 8 crop_height: 8 crop_width: 8")
    text += 'layer { name: "silence" type: "Silence" bottom: "data" bottom: "label" }\n'
    net = analyze(write(tmp_path, text), Options(phase="TEST")).nets[0]
    assert net.blobs["label"] == (2, 1, 8, 8)


def test_enet_encoder_optimizes(tmp_path):
    result = optimize(write(tmp_path, ENET_ENCODER), Options(), OptimizeSettings())
    assert result.phases
    for phase in result.phases:
        assert verify_plan(phase.schedule, phase.plan_data) == []


# --- TransformationParameter.scale_factors (hszhao/PSPNet@798bdc90 data_transformer.cpp) ------


def test_scale_factors_parse_and_leave_the_cropped_shape(tmp_path):
    # TransformImgAndSeg rescales by a random factor *before* the crop, which alone sizes
    # the blobs; a stock ImageData never reads the field.
    base = """name: "psp"
layer { name: "data" type: "ImageData" top: "data" top: "label"
  transform_param { mirror: true crop_size: 8 mean_value: 104 mean_value: 117 mean_value: 123 %s}
  image_data_param { source: "list.txt" batch_size: 2 new_height: 12 new_width: 12 } }
layer { name: "fc" type: "InnerProduct" bottom: "data" top: "fc" inner_product_param { num_output: 2 } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "fc" bottom: "label" top: "loss" }
"""
    scaled = analyze(write(tmp_path, base % "scale_factors: 0.5 scale_factors: 0.75 scale_factors: 1.5 "), Options()).nets[0]
    assert list(scaled.shaped.graph.layers[0].proto.transform_param.scale_factors) == [0.5, 0.75, 1.5]
    plain = analyze(write(tmp_path, base % ""), Options()).nets[0]
    assert scaled.blobs == plain.blobs and scaled.blobs["data"] == (2, 3, 8, 8)
    assert scaled.memory.total_bytes == plain.memory.total_bytes

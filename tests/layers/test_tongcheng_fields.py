"""Tongcheng/caffe's fields in master messages (Tongcheng/caffe@1625bb3b
src/caffe/proto/caffe.proto), as Tongcheng/DN_CaffeScript@71719285
train_test_BCBN_C10plus.prototxt writes them: BatchNorm's ``scale_filler``, ``bias_filler``
and ``engine: CUDNN``, and the ``use_log`` debug switch of Accuracy, Concat, Convolution,
ReLU and Scale.

BatchNorm: cudnn_batch_norm_layer.cpp (four (1, C, 1, 1) blobs filled by the fillers) is
never built: batch_norm_layer.cpp registers the type with REGISTER_LAYER_CLASS(BatchNorm)
and layer_factory.cpp has no BatchNorm creator, so the layer is the plain BatchNormLayer
(master's three statistics blobs and buffers).  The bytes must not change.
"""

from __future__ import annotations

from caffemem.api.analyze import Options, analyze
from caffemem.api.optimize import OptimizeSettings, optimize
from caffemem.plan.verify import verify_plan

BN = 'layer {{ name: "bn" type: "BatchNorm" bottom: "x" top: "y" batch_norm_param {{ moving_average_fraction: 0.1 {extra} }} }}'
TONGCHENG_BN = 'scale_filler { type: "constant" value: 1 } bias_filler { type: "constant" value: 0 } engine: CUDNN'


def test_batch_norm_fillers_and_engine_change_no_byte(memory_report):
    plain = memory_report(BN.format(extra=""), {"x": (2, 4, 3, 3)})
    fork = memory_report(BN.format(extra=TONGCHENG_BN), {"x": (2, 4, 3, 3)})
    a, b = ({layer.name: layer for layer in report.layers}["bn"] for report in (plain, fork))
    assert (b.init, b.fwd_alloc, b.bwd_alloc, b.buffers) == (a.init, a.fwd_alloc, a.bwd_alloc, a.buffers)
    # the three statistics blobs of BatchNormLayer::LayerSetUp: mean [4], variance [4], factor
    # [1], zero-filled at SetUp: (4 + 4 + 1) * 4 = 36 bytes of data and 3 shape buffers of 4
    assert b.by_category["parameters"] == 36 + 12


def test_batch_norm_says_the_cudnn_request_is_ignored(memory_report):
    fork = memory_report(BN.format(extra=TONGCHENG_BN), {"x": (2, 4, 3, 3)})
    assert any("layer 'bn' (BatchNorm): engine/scale_filler/bias_filler (Tongcheng/caffe) are ignored" in note for note in fork.notes)
    plain = memory_report(BN.format(extra=""), {"x": (2, 4, 3, 3)})
    assert not any("Tongcheng" in note for note in plain.notes)


# A shortened train_test_BCBN_C10plus.prototxt: the CIFAR Data layers stood in for by an
# Input of the same tops (batch 64, 3 x 32 x 32 as crop_size 32 gives), the DenseBlock
# replaced by a convolution, then BatchNorm (the fork's fields), ReLU, pooling, a Concat and
# Scale carrying use_log, the classifier, loss and Accuracy (use_log: true as in the file).
DN_NET = """name: "DenseNet_BC"
layer { name: "Data1" type: "Input" top: "Data1" top: "Data2" input_param { shape { dim: 64 dim: 3 dim: 32 dim: 32 } shape { dim: 64 } } }
layer { name: "Convolution1" type: "Convolution" bottom: "Data1" top: "Convolution1"
  convolution_param { num_output: 24 bias_term: false pad: 1 kernel_size: 3 stride: 1 weight_filler { type: "msra" } use_log: false } }
layer { name: "BatchNorm1" type: "BatchNorm" bottom: "Convolution1" top: "BatchNorm1"
  batch_norm_param { moving_average_fraction: 0.1 scale_filler { type: "constant" value: 1 } bias_filler { type: "constant" value: 0 } engine: CUDNN } }
layer { name: "Scale1" type: "Scale" bottom: "BatchNorm1" top: "BatchNorm1" scale_param { bias_term: true use_log: false } }
layer { name: "ReLU1" type: "ReLU" bottom: "BatchNorm1" top: "BatchNorm1" relu_param { use_log: false } }
layer { name: "Concat1" type: "Concat" bottom: "Convolution1" bottom: "BatchNorm1" top: "Concat1" concat_param { use_log: false } }
layer { name: "Pooling1" type: "Pooling" bottom: "Concat1" top: "Pooling1" pooling_param { pool: AVE global_pooling: true } }
layer { name: "InnerProduct1" type: "InnerProduct" bottom: "Pooling1" top: "InnerProduct1" inner_product_param { num_output: 10 } }
layer { name: "SoftmaxWithLoss1" type: "SoftmaxWithLoss" bottom: "InnerProduct1" bottom: "Data2" top: "SoftmaxWithLoss1" }
layer { name: "Accuracy1" type: "Accuracy" bottom: "InnerProduct1" bottom: "Data2" top: "Accuracy1" accuracy_param { use_log: true } }
"""


def test_dn_caffescript_net_parses_analyses_and_plans(tmp_path):
    path = tmp_path / "train_test_BCBN_C10plus.prototxt"
    path.write_text(DN_NET)
    net = analyze(str(path), Options(phase="TRAIN")).nets[0]
    layers = {layer.name: layer for layer in net.memory.layers}
    # BatchNorm1 on (64, 24, 32, 32): 1,572,864 values.  Forward allocates its top
    # (6,291,456 bytes), temp_ and x_norm_ (6,291,456 each), mean_ and variance_ (96
    # each), num_by_chans_ (64 * 24 * 4 = 6,144) -- master's BatchNormLayer
    assert layers["BatchNorm1"].fwd_alloc == 3 * 6_291_456 + 2 * 96 + 6_144
    result = optimize(str(path), Options(phase="TRAIN"), OptimizeSettings())
    for phase in result.phases:
        assert verify_plan(phase.schedule, phase.plan_data) == []
        assert phase.lower_bound <= phase.planned.heap_total <= phase.stock.heap_total

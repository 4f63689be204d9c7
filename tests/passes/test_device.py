"""GPU mode: the bytes a Caffe GPU run holds on the card and on the host.

Each expected figure is worked out from BVLC Caffe's source (../shared/caffe/GPU-MEMORY.md
cites the lines): SyncedMemory allocates the device copy on the first gpu_ touch and the
host copy on the first cpu_ touch; Net::Init writes on the host; a layer with GPU code
touches the device; a prefetching data layer holds every batch on both sides.
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from conftest import FIXTURES

from caffemem.api.analyze import Options, analyze
from caffemem.api.optimize import POOLED_WORKSPACE, OptimizeSettings, optimize
from caffemem.cli import main
from caffemem.passes.device import CUDA_CONTEXT, CUDNN_HANDLE, gpu_caveat
from caffemem.plan.verify import verify_plan

CONV = """name: "conv"
layer { name: "data" type: "Input" top: "data" input_param { shape { dim: 2 dim: 3 dim: 8 dim: 8 } } }
layer { name: "conv" type: "Convolution" bottom: "data" top: "conv" convolution_param { num_output: 4 kernel_size: 3 } }
"""

# A Data layer (4 prefetch batches), an InnerProduct, Accuracy (GPU scratch) and ArgMax
# (no .cu file: it runs on the host).
DATA = """name: "data"
layer { name: "data" type: "Data" top: "data" top: "label" data_param { source: "db" batch_size: 2 backend: LMDB } }
layer { name: "ip" type: "InnerProduct" bottom: "data" top: "ip" inner_product_param { num_output: 10 } }
layer { name: "acc" type: "Accuracy" bottom: "ip" bottom: "label" top: "acc" }
layer { name: "argmax" type: "ArgMax" bottom: "ip" top: "argmax" }
"""
DATA_INPUTS = {"data": (2, 3, 8, 8), "label": (2,)}

TRAIN = """name: "train"
layer { name: "data" type: "Input" top: "data" top: "label" input_param { shape { dim: 2 dim: 3 dim: 8 dim: 8 } shape { dim: 2 } } }
layer { name: "ip" type: "InnerProduct" bottom: "data" top: "ip" inner_product_param { num_output: 10 } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "ip" bottom: "label" top: "loss" }
"""

MIB = 1024 * 1024


def gpu(text: str, **options):
    return analyze(text, Options(device="gpu", **options)).nets[0]


def test_conv_with_caffe_engine_puts_im2col_and_bias_multiplier_on_the_card():
    device = gpu(CONV, engine="caffe").device
    # weight 4x3x3x3 + bias 4 = 112 floats; input 2x3x8x8 (1536 B) copied up from the host,
    # output 2x4x6x6 (1152 B); col buffer 27x6x6 (3888 B) and bias multiplier 36 (144 B).
    assert device.device_by_cause["parameters"] == 448
    assert device.device_by_cause["activations"] == 1536 + 1152
    assert device.device_by_cause["layer_buffers"] == 3888 + 144
    assert device.device_by_cause["cudnn_workspace"] == 0
    assert [layer.device for layer in device.layers] == [(0, 0, 0), (0, 7168, 0)]


def test_conv_with_cudnn_has_no_col_buffer_and_a_workspace_range():
    device = gpu(CONV).device  # GPU mode's default engine: cuDNN
    assert device.engine == "cudnn"
    assert device.device_by_cause["layer_buffers"] == 0  # the bias multiplier stays on the host
    # One cudaMalloc of 3 streams x 1 group x the 8 MiB workspace limit, at most.
    assert device.workspace_bytes_max == 24 * MIB
    assert device.device_bytes - device.device_bytes_min == 24 * MIB
    assert device.handles.cudnn == 3


# Two cuDNN convolutions (TRAIN: the second's loss makes both run Backward).
TWO_CONVS = """name: "two"
layer { name: "data" type: "Input" top: "data" input_param { shape { dim: 2 dim: 3 dim: 8 dim: 8 } } }
layer { name: "conv1" type: "Convolution" bottom: "data" top: "conv1" convolution_param { num_output: 4 kernel_size: 3 } }
layer { name: "conv2" type: "Convolution" bottom: "conv1" top: "conv2" convolution_param { num_output: 4 kernel_size: 3 group: 2 } }
layer { name: "loss" type: "Reduction" bottom: "conv2" top: "loss" loss_weight: 1 }
"""


def test_a_plan_runs_on_the_v6_pool_one_workspace_of_three_blocks_and_three_handles():
    # Stock BVLC: conv1 3 streams x 1 group x 8 MiB, conv2 x 2 groups: 72 MiB of workspaces
    # at their bound, 9 handles and 9 streams.  A plan runs on a caffemem-patched Caffe
    # (runtime v6): one pool per card, 3 (handle, stream) pairs and one workspace of 3 blocks
    # of the largest per-block bound (8 MiB): 24 MiB, still a range ("at most").
    phase = optimize(TWO_CONVS, Options(device="gpu", phase="TRAIN"), OptimizeSettings()).phases[0]
    stock, planned = phase.devices.stock, phase.devices.planned
    assert (stock.workspace_bytes_max, planned.workspace_bytes_max) == (72 * MIB, 24 * MIB)
    assert (stock.handles.cudnn, stock.handles.streams, stock.handles.pooled) == (9, 9, False)
    assert (planned.handles.cudnn, planned.handles.streams, planned.handles.pooled) == (3, 3, True)
    # Stock: + the context + 6,888 B of the net (parameters 752, their gradients 752,
    # activations 3,204, their gradients 1,668, the bias multipliers 512) + 9 handles as
    # measured; the plan: 24 MiB, 3 handles, and the net's 6,376 B once the blobs share.
    assert stock.device_bytes == 72 * MIB + CUDA_CONTEXT.bytes + 9 * CUDNN_HANDLE.bytes + 6_888 == 789_009_169
    assert planned.device_bytes == 24 * MIB + CUDA_CONTEXT.bytes + 3 * CUDNN_HANDLE.bytes + 6_376 == 678_811_211


def test_share_buffers_leaves_the_workspaces_to_the_pool_never_to_a_slot():
    # A slot for the workspaces held BVLC's bound (8 MiB x 3 streams x the groups), where
    # v6's pool holds 3 blocks for the whole net: the planner keeps them private in GPU
    # mode, so --share-buffers is never above the blob plan on the workspace (issue 32).
    phase = optimize(TWO_CONVS, Options(device="gpu", phase="TRAIN"), OptimizeSettings(share_buffers=True)).phases[0]
    assert not any(blob.endswith("/cudnn_workspace") for blob, _, _, _ in phase.plan_data.assign)
    assert phase.kept_private["1:conv1/cudnn_workspace:data"] == phase.kept_private["2:conv2/cudnn_workspace:data"] == POOLED_WORKSPACE
    blobs = optimize(TWO_CONVS, Options(device="gpu", phase="TRAIN"), OptimizeSettings()).phases[0]
    assert phase.devices.planned.workspace_bytes_max == blobs.devices.planned.workspace_bytes_max == 24 * MIB
    assert phase.totals()["planned"] == blobs.totals()["planned"] == 678_811_211
    for schedule in phase.schedules:  # the cuDNN run and the CPU run (which has no workspace)
        assert verify_plan(schedule, phase.plan_data) == []


def test_the_cpu_run_accepts_a_planned_workspace_only_of_a_layer_of_the_net():
    from caffemem.plan.verify import PlanData

    phase = optimize(TWO_CONVS, Options(device="gpu", phase="TRAIN"), OptimizeSettings(share_buffers=True)).phases[0]
    on_cpu = phase.schedules[1]  # Caffe's own convolutions: no workspace at all
    assert verify_plan(on_cpu, PlanData({0: 24 * MIB}, (("1:conv1/cudnn_workspace", "data", 0, 0),))) == []
    for blob, kind in (("1:conv9/cudnn_workspace", "data"), ("1:conv1/cudnn_workspace", "diff")):
        violations = verify_plan(on_cpu, PlanData({0: 24 * MIB}, ((blob, kind, 0, 0),)))
        assert [v.message for v in violations] == [f"no {kind} storage of this name in the net"]


def test_host_keeps_what_net_init_wrote():
    device = gpu(CONV).device
    # Fillers write the parameters on the host (pinned): 448 B plus shape buffers 16 + 4.
    assert device.host_by_cause["parameters"] == 468
    # The user fills the input on the host: 1536 B, plus the two 4-axis shape buffers.
    assert device.host_by_cause["activations"] == 1536 + 16 + 16


def test_prefetch_batches_are_on_both_sides_and_the_tops_own_no_device_data():
    net = gpu(DATA, phase="TEST", inputs=DATA_INPUTS)
    device = net.device
    # 4 batches x (2x3x8x8 data + 2 labels) floats, on the card and pinned on the host
    # (the host also has the batches' shape buffers, 4 x (16 + 4), and transformed_data's 16).
    assert device.device_by_cause["prefetch"] == 4 * (384 + 2) * 4
    assert device.host_by_cause["prefetch"] == 4 * (384 + 2) * 4 + 4 * 20 + 16
    assert device.layers[0].device == (0, 0, 0)
    assert (device.handles.cublas, device.handles.curand) == (2, 2)  # the prefetch thread's own Caffe


def test_accuracy_borrows_its_bottoms_diffs_on_the_card_even_in_test():
    device = gpu(DATA, phase="TEST", inputs=DATA_INPUTS).device
    acc = next(layer for layer in device.layers if layer.name == "acc")
    # ip's split top diff (2x10 floats) and the label's diff (2 floats); the output on the host.
    assert acc.device == (0, 80 + 8, 0)
    assert acc.host == (0, 4, 0)
    assert device.device_by_cause["activation_gradients"] == 88


def test_a_layer_without_gpu_code_copies_its_bottom_to_the_host():
    device = gpu(DATA, phase="TEST", inputs=DATA_INPUTS).device
    argmax = next(layer for layer in device.layers if layer.name == "argmax")
    assert argmax.runs_on == "cpu"
    assert argmax.host[1] == 80 + 8  # ip's data read on the host, its 2x1x1 output written there
    assert argmax.device == (0, 0, 0)
    assert any("ArgMax" in note for note in device.notes)


def test_softmax_loss_scratch_and_loss_reads_are_on_the_card():
    device = gpu(TRAIN).device
    loss = next(layer for layer in device.layers if layer.name == "loss")
    # prob data 80 + prob diff 80 + ip diff 80 (scratch) + label 8, loss data and diff 4 + 4.
    assert loss.device == (0, 256, 0)


def test_softmax_with_loss_on_cudnn_holds_its_inner_softmaxs_handle():
    # softmax_loss_layer.cpp LayerSetUp builds its Softmax through LayerRegistry: with cuDNN
    # (the engine DEFAULT in a USE_CUDNN build) a CuDNNSoftmaxLayer, whose LayerSetUp calls
    # cudnnCreate (cudnn_softmax_layer.cpp).  No other layer of TRAIN has a handle.
    device = gpu(TRAIN).device
    loss = next(layer for layer in device.layers if layer.name == "loss")
    assert (loss.cudnn_handles, device.handles.cudnn, device.handles.streams) == (1, 1, 0)
    assert device.device_by_cause["library_handles"] == CUDNN_HANDLE.bytes


def test_softmax_with_loss_on_caffes_engine_holds_no_handle():
    # softmax_param's engine is the inner Softmax's (the param is copied): CAFFE, no cuDNN.
    caffe = gpu(TRAIN.replace('top: "loss" }', 'top: "loss" softmax_param { engine: CAFFE } }')).device
    assert (caffe.handles.cudnn, gpu(TRAIN, engine="caffe").device.handles.cudnn) == (0, 0)


def test_infogain_loss_on_cudnn_holds_its_inner_softmaxs_handle():
    # infogain_loss_layer.cpp LayerSetUp builds its Softmax through LayerRegistry too.
    infogain = TRAIN.replace('type: "SoftmaxWithLoss" bottom: "ip" bottom: "label"', 'type: "InfogainLoss" bottom: "ip" bottom: "label" bottom: "h"')
    infogain = infogain.replace('shape { dim: 2 } } }', 'shape { dim: 2 } shape { dim: 10 dim: 10 } } }').replace('top: "data" top: "label"', 'top: "data" top: "label" top: "h"')
    assert gpu(infogain).device.handles.cudnn == 1


INFOGAIN = TRAIN.replace('type: "SoftmaxWithLoss" bottom: "ip" bottom: "label"', 'type: "InfogainLoss" bottom: "ip" bottom: "label" bottom: "h"')
INFOGAIN = INFOGAIN.replace('shape { dim: 2 } } }', 'shape { dim: 2 } shape { dim: 10 dim: 10 } } }').replace('top: "data" top: "label"', 'top: "data" top: "label" top: "h"')


def test_infogain_loss_runs_its_inner_softmax_on_the_card():
    # InfogainLoss has no .cu: its Forward_cpu runs on the host, but the inner Softmax's
    # Layer::Forward runs Forward_gpu in a GPU run (layer.hpp): ip's device data is read and
    # prob_ (2x10, 80 B) written on the card, its loss read takes prob_'s diff there (80,
    # set at SetUp on the host), then Forward_cpu reads prob_ on the host (80).  The loss
    # top (4 + 4 on the card, 4 on the host) as for any loss; ip's data never goes to the host.
    loss = next(layer for layer in gpu(INFOGAIN).device.layers if layer.name == "loss")
    assert (loss.device[1], loss.host[1]) == (80 + 80 + 8, 80 + 4)


def test_infogain_loss_on_caffes_engine_writes_the_softmax_scratch_on_the_card():
    # SoftmaxLayer::Forward_gpu (softmax_layer.cu) also writes scale_ (2x1, 8 B) there.
    loss = next(layer for layer in gpu(INFOGAIN, engine="caffe").device.layers if layer.name == "loss")
    assert (loss.device[1], loss.host[1]) == (80 + 80 + 8 + 8, 80 + 4)


def test_caffes_softmax_on_the_card_leaves_its_sum_multiplier_on_the_host():
    # softmax_layer.cu's kernels need only scale_; sum_multiplier_ (written at SetUp on the
    # host) is read by the CPU code alone.  TEST net: ip (2x10) -> prob 80 + scale_ 8.
    text = TRAIN.replace('type: "SoftmaxWithLoss" bottom: "ip" bottom: "label" top: "loss"', 'type: "Softmax" bottom: "ip" top: "prob"')
    device = gpu(text, engine="caffe", phase="TEST").device
    softmax = next(layer for layer in device.layers if layer.name == "loss")
    assert softmax.device == (0, 80 + 8, 0)


def test_the_v6_pool_gives_softmax_with_loss_its_default_stream_handle():
    # Runtime v6 (cudnn_softmax_layer.cpp edit): the inner CuDNNSoftmaxLayer takes the pool's
    # default_handle(), created on first use: a net whose only cuDNN layer is the loss's
    # Softmax holds that one handle and no stream.
    from caffemem.api.optimize import planned_report

    net = gpu(TRAIN)
    planned = planned_report(net.shaped, net.specs, Options(device="gpu"))
    assert (planned.handles.cudnn, planned.handles.streams, planned.handles.pooled) == (1, 0, True)


def test_the_context_is_the_measured_constant_and_can_be_given():
    # Measured on an H100 (benchmarks/gpu-groundtruth): total minus free memory once the
    # context, the main thread's cuBLAS handle and its cuRAND generator exist.
    device = gpu(CONV).device
    assert device.device_by_cause["cuda_context"] == CUDA_CONTEXT.bytes == 552_402_944 + 71_303_168
    assert "H100" in CUDA_CONTEXT.source and CUDA_CONTEXT.measured_for_caffe
    own = gpu(CONV, context_bytes=123 * MIB).device
    assert own.device_bytes - device.device_bytes == 123 * MIB - CUDA_CONTEXT.bytes


def test_adam_keeps_two_histories_on_the_card(tmp_path):
    (tmp_path / "train.prototxt").write_text(TRAIN)
    (tmp_path / "solver.prototxt").write_text('net: "train.prototxt"\ntype: "Adam"\nbase_lr: 0.01\n')
    process = analyze(str(tmp_path / "solver.prototxt"), Options(device="gpu")).process
    assert process.device == "gpu"
    assert process.history_bytes == 2 * (7680 + 40)  # m and v of the 10x192 weight and 10 bias
    sgd = (tmp_path / "sgd.prototxt")
    sgd.write_text('net: "train.prototxt"\nbase_lr: 0.01\n')
    assert analyze(str(sgd), Options(device="gpu")).process.history_bytes == 7680 + 40


def test_gpus_report_one_cards_figure_and_the_total():
    one, four = gpu(CONV).device, gpu(CONV, gpus=4).device
    assert four.device_bytes == one.device_bytes
    assert four.gpus == 4 and "with --gpus 4 every card holds the figure" in gpu_caveat(four)


def test_cpu_mode_keeps_the_heap_figure():
    net = analyze(CONV, Options(device="cpu")).nets[0]
    assert net.device is None and net.total_bytes == net.memory.total_bytes


def test_optimize_plans_the_card_and_the_plan_verifies():
    result = optimize(TRAIN, Options(device="gpu"), OptimizeSettings())
    phase = result.phases[0]
    assert phase.devices is not None
    totals = phase.totals()
    assert totals["stock"] == phase.devices.stock.device_bytes
    assert totals["planned"] <= totals["stock"] and totals["planned"] >= totals["lower_bound"]
    assert verify_plan(phase.schedule, phase.plan_data) == []


@pytest.mark.gpu_default
def test_analyze_json_defaults_to_gpu_and_names_the_causes(tmp_path):
    net = tmp_path / "data.prototxt"
    net.write_text(DATA)
    args = ["analyze", str(net), "--phase", "TEST", "--input", "data=2,3,8,8", "--input", "label=2", "--json"]
    on_card = json.loads(CliRunner().invoke(main, args).stdout)
    on_cpu = json.loads(CliRunner().invoke(main, args + ["--device", "cpu"]).stdout)
    assert on_card["mode"] == "gpu" and on_cpu["mode"] == "cpu"
    assert on_card["total_bytes"] != on_cpu["total_bytes"]
    causes = on_card["gpu"]["by_cause"]
    assert {"cudnn_workspace", "prefetch", "cuda_context"} <= set(causes)
    assert causes["prefetch"]["device"] == 4 * (384 + 2) * 4
    assert on_card["layers"][-1]["gpu"]["runs_on"] == "cpu"


@pytest.mark.gpu_default
def test_a_baseline_measured_on_the_cpu_is_not_compared_with_a_gpu_check(tmp_path):
    net = tmp_path / "conv.prototxt"
    net.write_text(CONV)
    baseline = tmp_path / "baseline.json"
    assert CliRunner().invoke(main, ["check", str(net), "--baseline", str(baseline), "--update-baseline", "--device", "cpu"]).exit_code == 0
    result = CliRunner().invoke(main, ["check", str(net), "--baseline", str(baseline)])
    assert result.exit_code == 2
    assert "measured with --device cpu" in result.output


def test_the_html_page_shows_the_card_and_the_host():
    from caffemem.report.html import html_report

    options = Options(device="gpu", phase="TEST", inputs=DATA_INPUTS)
    page = html_report(analyze(DATA, options), options)
    assert "on the card" in page and "on the host" in page
    assert "cuda context" in page and "prefetch" in page  # the causes' bars, by their device bytes
    assert "--device gpu --engine cudnn" in page


@pytest.mark.parametrize(
    "source, share_buffers",
    [("models/fcn_voc-fcn8s/train.prototxt", False), ("models/hed/train_val.prototxt", False), ("models/lrcn_activity_recognition/train_test_lstm_RGB.prototxt", True)],
)
def test_a_plan_made_for_the_card_is_safe_in_a_cpu_run(source, share_buffers):
    """FCN's and HED's frozen deconvolutions (lr_mult 0): cuDNN's Backward skips their
    bottom, Caffe's engine takes it, so a plan for the cuDNN run alone would share a
    storage the CPU run still reads.  LRCN: on the GPU, Accuracy writes scratch into its
    bottom's diff, which the Split before it then reads; on the CPU that diff is read as
    fresh zeros, so it must stay private.  The GPU plan is verified against both runs."""
    from conftest import SHARED, groundtruth_runs, run_inputs

    from caffemem.api.analyze import spec_table
    from caffemem.passes.memory import prepare
    from caffemem.passes.schedule import build_schedule

    runs = [param.values[1] for param in groundtruth_runs() if param.values[0] == source and param.values[1]["phase"] == "TRAIN"]
    if not runs:
        pytest.skip("../shared is not beside the repo")
    options = Options(device="gpu", phase="TRAIN", inputs=run_inputs(runs[0]))
    phase = optimize(str(SHARED / source), options, OptimizeSettings(share_buffers=share_buffers)).phases[0]
    specs = spec_table(options)
    on_cpu = build_schedule(phase.shaped, specs, run=prepare(phase.shaped, specs, "float32", "caffe", "cpu"))
    assert verify_plan(on_cpu, phase.plan_data) == []
    assert verify_plan(phase.schedule, phase.plan_data) == []


@pytest.mark.gpu_default
def test_check_measures_the_card_with_the_engine_and_gpus_asked_for(tmp_path):
    net = tmp_path / "conv.prototxt"
    net.write_text(CONV)

    def checked(*flags):
        result = CliRunner().invoke(main, ["check", str(net), "--format", "json", *flags])
        assert result.exit_code == 0, result.output
        return json.loads(result.stdout)["results"][0]["bytes"]

    cudnn, caffe = checked(), checked("--engine", "caffe")
    # the workspace's bound and 3 cuDNN handles instead of im2col and the multiplier
    assert cudnn - caffe == 24 * MIB + 3 * CUDNN_HANDLE.bytes - (3888 + 144)
    assert checked("--gpus", "2") == cudnn  # one card's figure
    assert checked("--device", "cpu") == analyze(CONV, Options(device="cpu")).nets[0].total_bytes


def test_the_handles_beyond_the_main_threads_are_sized_as_measured():
    from caffemem.passes.device import Handles, handle_bytes

    # A train and a test net, each with one prefetching data layer: 12 cuDNN handles, and
    # the main thread's cuBLAS handle and cuRAND generator plus one of each per prefetch thread.
    both = Handles(cudnn=12, cublas=3, curand=3)
    # 12 cuDNN handles x 9,977,633 B + 2 further threads' cuBLAS and cuRAND x 71,303,168 B
    # (the main thread's are in the context constant), as measured on an H100
    assert handle_bytes(both) == 12 * 9_977_633 + 2 * 71_303_168


DEPTHWISE = """name: "dw"
layer { name: "data" type: "Input" top: "data" input_param { shape { dim: 1 dim: 128 dim: 8 dim: 8 } } }
layer { name: "conv_dw" type: "Convolution" bottom: "data" top: "conv_dw"
  convolution_param { num_output: 128 group: 128 kernel_size: 3 pad: 1 ENGINE } }
"""


def test_grouped_cudnn_convolutions_holding_a_gib_of_handles_are_named_with_the_fix():
    # A depthwise convolution of 128 channels: 3 cuDNN handles per group (cudnn_conv_layer.cpp),
    # 384 handles x 9,977,633 B = 3.57 GiB on the card, as measured on an H100.
    device = analyze(DEPTHWISE.replace("ENGINE", ""), Options(device="gpu")).nets[0].device
    assert device.handles.cudnn == 384 and device.device_by_cause["library_handles"] == 384 * CUDNN_HANDLE.bytes
    (note,) = [note for note in device.notes if note.startswith("grouped cuDNN convolutions")]
    assert note.startswith("grouped cuDNN convolutions ('conv_dw') create 3 cuDNN handles per group: 384 handles, 3.57 GiB on the card")
    assert "'engine: CAFFE' in their convolution_param" in note
    caffe = analyze(DEPTHWISE.replace("ENGINE", "engine: CAFFE"), Options(device="gpu")).nets[0].device
    assert caffe.handles.cudnn == 0 and not any(note.startswith("grouped cuDNN") for note in caffe.notes)


DEPTHWISE_ON_CUDNN = (FIXTURES / "examples" / "depthwise_cudnn.prototxt").read_text()  # issue 32: 388 stock cuDNN handles


def test_a_depthwise_plan_holds_the_pools_four_handles_not_stocks_388():
    # Stock BVLC: 3 x 128 + 3 convolution handles with their streams, 1 for the ReLU; the
    # workspaces at their bound, 8 MiB x 3 x (128 + 1) = 3,096 MiB.  v6: 4 handles, 3
    # streams, one 24 MiB workspace: the plan 661.54 MiB, 0.09x stock's 7,387.45 MiB.
    phase = optimize(DEPTHWISE_ON_CUDNN, Options(device="gpu"), OptimizeSettings(share_buffers=True)).phases[0]
    stock, planned = phase.devices.stock, phase.devices.planned
    assert (stock.handles.cudnn, stock.handles.streams, stock.workspace_bytes_max) == (388, 387, 3_096 * MIB)
    assert (planned.handles.cudnn, planned.handles.streams, planned.workspace_bytes_max) == (4, 3, 24 * MIB)
    assert (stock.device_bytes, planned.device_bytes) == (7_746_307_076, 693_670_532)


def test_analyze_of_a_plain_file_says_what_a_patched_caffe_would_hold_instead():
    device = gpu(DEPTHWISE_ON_CUDNN).device
    assert not device.handles.pooled  # stock BVLC's figure
    assert device.notes[-1] == (
        "a caffemem-patched Caffe (runtime v6, `caffemem patch CAFFE_DIR`) shares one pool of cuDNN handles and one workspace per card: "
        "4 handles and 3 streams instead of 388 and 387, the workspace at most 24.00 MiB instead of 3.02 GiB: up to 6.57 GiB less on the card "
        "(what `optimize` states for its plans)"
    )


def test_a_small_net_gets_no_note_of_the_pool():
    # TWO_CONVS: 9 handles and 72 MiB of workspaces, far from a GiB.
    assert not any("runtime v6" in note for note in gpu(TWO_CONVS, phase="TRAIN").device.notes)


def test_analyze_of_an_optimized_file_counts_the_pool_as_the_patched_caffe_runs_it(tmp_path):
    out = tmp_path / "dw.prototxt"
    source = tmp_path / "in.prototxt"
    source.write_text(DEPTHWISE_ON_CUDNN)
    result = CliRunner().invoke(main, ["optimize", str(source), "--device", "gpu", "--share-buffers", "-o", str(out)])
    assert result.exit_code == 0, result.output
    net = analyze(str(out), Options(device="gpu")).nets[0]
    assert net.device.handles.pooled and (net.device.handles.cudnn, net.device.workspace_bytes_max) == (4, 24 * MIB)
    assert net.device.device_bytes == 693_670_532
    assert not any("runtime v6" in note for note in net.device.notes)


TRAIN_VAL_ON_CUDNN = """name: "tv"
layer { name: "data" type: "Input" top: "data" top: "label" input_param { shape { dim: 2 dim: 3 dim: 8 dim: 8 } shape { dim: 2 } } }
layer { name: "conv" type: "Convolution" bottom: "data" top: "conv" convolution_param { num_output: 4 kernel_size: 3 } }
layer { name: "relu" type: "ReLU" bottom: "conv" top: "conv" }
layer { name: "ip" type: "InnerProduct" bottom: "conv" top: "ip" inner_product_param { num_output: 10 } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "ip" bottom: "label" top: "loss" }
"""


def test_a_training_process_on_the_patched_runtime_holds_one_pool_for_its_train_and_test_nets(tmp_path):
    # Runtime v6: one pool per card, whatever the nets: the test net's 4 handles (3 with
    # streams, 1 for the ReLU) and its 24 MiB workspace are the train net's, so under the
    # plans the test net adds only what is its own (stock: each net its own handles).
    from caffemem.api.optimize import planned_report
    from caffemem.passes.solver import solver_footprint
    from caffemem.schema import caffe_pb2

    (tmp_path / "train_val.prototxt").write_text(TRAIN_VAL_ON_CUDNN)
    (tmp_path / "solver.prototxt").write_text('net: "train_val.prototxt"\nbase_lr: 0.01\ntest_iter: 1\ntest_interval: 10\n')
    options = Options(device="gpu")
    stock = analyze(str(tmp_path / "solver.prototxt"), options)
    train, test = stock.nets
    planned = [(net.shaped, planned_report(net.shaped, stock.nets[0].specs, options)) for net in (train, test)]
    process = solver_footprint(caffe_pb2.SolverParameter(base_lr=0.01), planned[0], [planned[1]], 4)
    shared_params = 6_248  # conv 4x3x3x3 + 4, ip 10x144 + 10 floats
    pool = 4 * CUDNN_HANDLE.bytes + 24 * MIB
    test_report = planned[1][1]
    assert process.tests[0].bytes == test_report.device_bytes - CUDA_CONTEXT.bytes - shared_params - pool
    assert process.tests[0].note.endswith("; one pool of cuDNN handles and workspace per card (a caffemem-patched Caffe)")
    assert stock.process.tests[0].bytes == test.device.device_bytes - CUDA_CONTEXT.bytes - shared_params  # stock: the handles again


def test_optimize_says_what_its_plan_counts_of_the_pool(tmp_path):
    source = tmp_path / "dw.prototxt"
    source.write_text(DEPTHWISE_ON_CUDNN)
    result = CliRunner().invoke(main, ["optimize", str(source), "--device", "gpu"], env={"COLUMNS": "400"})
    assert result.exit_code == 0, result.output
    assert (
        "the plan runs on a caffemem-patched Caffe (runtime v6), one pool per card: 4 handles and 3 streams instead of 388 and 387, "
        "the workspace at most 24.00 MiB instead of 3.02 GiB"
    ) in result.output.splitlines()

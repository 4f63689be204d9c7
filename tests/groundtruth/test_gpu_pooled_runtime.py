"""The plans run on a caffemem-patched Caffe (runtime v6, issue 32): every cuDNN layer takes
its handles and streams from one pool per card (3 (handle, stream) pairs for the
convolutions, one handle for the single-handle layers) and one workspace of 3 blocks of the
largest per-block bound (BVLC's 8 MiB per algorithm query: at most 24 MiB).  Stock Caffe's
figure keeps BVLC's own: 3 handles and streams per group of every cuDNN convolution, one
handle per other cuDNN layer, each convolution's workspace at 8 MiB x 3 x its groups.

So `optimize --share-buffers` no longer puts a workspace in a slot (issue 22 did: its slot
was reserved at BVLC's bound, 1.72x stock on the card for a depthwise net), and a plan is
never above stock nor above the blob plan on the workspace.

The nets run at their ground-truth inputs (../shared/groundtruth); ResNet-152 is
fixtures/generate.py's."""

from __future__ import annotations

import sys

import pytest
from conftest import FIXTURES, SHARED, needs_shared

from caffemem.api.analyze import Options
from caffemem.api.optimize import OptimizeSettings, PhasePlan, optimize
from caffemem.passes.device import CUDNN_HANDLE, Handles, gpu_caveat

sys.path.insert(0, str(FIXTURES))
import generate  # noqa: E402  (fixtures/generate.py)

MIB = 1024 * 1024
WORKSPACE = 3 * 8 * MIB  # a group-1 convolution's: 3 streams x workspace_limit_bytes; the v6 pool's too
GOOGLENET_TRAIN = {"data": (32, 3, 224, 224), "label": (32,)}  # its own batch (train_val's Data layer)
POOL = Handles(cudnn=4, cublas=1, curand=1, streams=3, pooled=True)  # 3 pairs + the default-stream handle


def _plan(source: str, phase: str, inputs: dict, share_buffers: bool = True) -> PhasePlan:
    options = Options(device="gpu", phase=phase, inputs=inputs)
    path = source if source.startswith("name:") else str(SHARED / "models" / source)
    return optimize(path, options, OptimizeSettings(share_buffers=share_buffers)).phases[0]


@pytest.fixture(scope="module")
def resnet50() -> PhasePlan:
    return _plan("resnet/ResNet-50-deploy.prototxt", "TEST", {})


@pytest.fixture(scope="module")
def googlenet() -> PhasePlan:
    return _plan("bvlc_googlenet/train_val.prototxt", "TRAIN", GOOGLENET_TRAIN)


def _workspaces(plan: PhasePlan) -> list[tuple[str, int]]:
    """(buffer, slot) of every cuDNN workspace the plan assigns."""
    return [(blob, slot) for blob, _, slot, _ in plan.plan_data.assign if blob.endswith("/cudnn_workspace")]


@needs_shared
def test_resnet50_deploy_share_buffers_plan_is_under_three_tenths_of_stock(resnet50):
    # Issue 32's done-when.  Stock: 53 cuDNN convolutions with their own workspaces at
    # 24 MiB (1,272 MiB), 210 handles (159 with their streams) at 9.52 MiB, the context:
    # 4,148.00 MiB.  The plan: Caffe's allocations shared, the pool's 4 handles and one
    # 24 MiB workspace, the context: 767.62 MiB, 0.185x (it was 2,722.43, 0.66x, with
    # stock's handles and a workspace slot).
    devices = resnet50.devices
    assert devices.stock.device_bytes == 4_349_486_302
    assert (devices.stock.handles.cudnn, devices.stock.handles.streams) == (210, 159)
    assert devices.stock.workspace_bytes_max == 53 * WORKSPACE
    assert devices.planned.device_bytes == 804_911_024
    assert devices.planned.handles == POOL
    assert devices.planned.device_by_cause["library_handles"] == 4 * CUDNN_HANDLE.bytes
    assert devices.planned.workspace_bytes_max == WORKSPACE
    assert resnet50.totals()["planned"] / resnet50.totals()["stock"] <= 0.30


@needs_shared
def test_googlenet_train_plan_holds_the_pool_beside_caffes_shared_allocations(googlenet):
    # Stock: 59 cuDNN convolutions x 24 MiB, 246 handles (177 with streams; 3 are the inner
    # Softmax of its three SoftmaxWithLoss layers), the prefetch thread's cuBLAS: 6,886.88
    # MiB; planned: 1,838.64 MiB (0.27x; 4,106.83 with a slot).
    devices = googlenet.devices
    assert (devices.stock.handles.cudnn, devices.stock.handles.streams) == (246, 177)
    assert devices.stock.device_bytes == 7_221_413_390
    assert devices.stock.workspace_bytes_max == 59 * WORKSPACE
    assert devices.planned.device_bytes == 1_927_952_604
    assert devices.planned.handles == Handles(cudnn=4, cublas=2, curand=2, streams=3, pooled=True)


@needs_shared
@pytest.mark.parametrize("net", ["resnet50", "googlenet"])
def test_no_workspace_is_planned_in_a_slot_the_pool_holds_one_at_most(net, request):
    plan = request.getfixturevalue(net)
    assert _workspaces(plan) == []
    planned = plan.devices.planned
    # cuDNN still picks the algorithms (BVLC's limits): the pool's 24 MiB is a bound.
    assert planned.workspace_bytes_max == WORKSPACE and planned.device_bytes - planned.device_bytes_min == WORKSPACE
    assert "picks its workspace at run time" in gpu_caveat(planned)


@needs_shared
def test_share_buffers_is_never_above_the_blob_plan_on_the_workspace(resnet50):
    blobs = _plan("resnet/ResNet-50-deploy.prototxt", "TEST", {}, share_buffers=False)
    assert blobs.devices.planned.workspace_bytes_max == resnet50.devices.planned.workspace_bytes_max == WORKSPACE
    assert blobs.devices.planned.device_bytes == 929_863_856  # 886.79 MiB: the layer buffers unshared
    assert resnet50.devices.planned.device_bytes < blobs.devices.planned.device_bytes < blobs.devices.stock.device_bytes


@needs_shared
def test_densenet121_deploy_plan_includes_the_pooled_handles():
    # 121 cuDNN convolutions (363 handles with streams) and 125 other cuDNN layers: 488
    # handles, 4.53 GiB, and 2.84 GiB of workspaces in stock's 8,480.87 MiB; the plan 700.78 MiB.
    plan = _plan("densenet/DenseNet_121.prototxt", "TEST", {})
    assert (plan.devices.stock.handles.cudnn, plan.devices.stock.handles.streams) == (488, 363)
    assert plan.devices.planned.handles == POOL
    assert (plan.devices.stock.device_bytes, plan.devices.planned.device_bytes) == (8_892_831_776, 734_823_740)


def test_resnet152_deploy_plan_includes_the_pooled_handles():
    # fixtures/generate.py's ResNet-152 (batch 1, 224x224): 618 handles (465 with streams;
    # one is its SoftmaxWithLoss's inner Softmax, as issue 32 counted on the card) and 155
    # workspaces in stock's 10,815.12 MiB; the plan 900.23 MiB (the pool's default-stream
    # handle serves that Softmax too).
    plan = _plan(generate.resnet(152), "TEST", {})
    assert (plan.devices.stock.handles.cudnn, plan.devices.stock.handles.streams) == (618, 465)
    assert plan.devices.planned.handles == POOL
    assert (plan.devices.stock.device_bytes, plan.devices.planned.device_bytes) == (11_340_466_170, 943_955_700)

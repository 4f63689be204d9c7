"""One shared cuDNN workspace (issue 22): `optimize --share-buffers --device gpu` holds the
cuDNN convolutions' workspaces in a shared slot, so the plan carries the largest one, not
their sum, and the planned figure is exact (the patched layers take the slot and ask cuDNN
only for algorithms that fit it).  Without a plan each layer keeps its own workspace, an
upper bound (BVLC's 8 MiB per algorithm, per group and stream), as stock Caffe allocates it.

The nets run at their ground-truth inputs (../shared/groundtruth)."""

from __future__ import annotations

import pytest
from conftest import SHARED, needs_shared

from caffemem.api.analyze import Options
from caffemem.api.optimize import OptimizeSettings, PhasePlan, optimize
from caffemem.passes.device import gpu_caveat

MIB = 1024 * 1024
WORKSPACE = 3 * 8 * MIB  # a group-1 convolution's: 3 streams x workspace_limit_bytes
GOOGLENET_TRAIN = {"data": (32, 3, 224, 224), "label": (32,)}  # its own batch (train_val's Data layer)


def _plan(source: str, phase: str, inputs: dict, share_buffers: bool = True) -> PhasePlan:
    options = Options(device="gpu", phase=phase, inputs=inputs)
    return optimize(str(SHARED / "models" / source), options, OptimizeSettings(share_buffers=share_buffers)).phases[0]


@pytest.fixture(scope="module")
def resnet50() -> PhasePlan:
    return _plan("resnet/ResNet-50-deploy.prototxt", "TEST", {})


@pytest.fixture(scope="module")
def googlenet() -> PhasePlan:
    return _plan("bvlc_googlenet/train_val.prototxt", "TRAIN", GOOGLENET_TRAIN)


def _workspaces(plan: PhasePlan) -> list[tuple[str, int]]:
    """(buffer, slot) of every cuDNN workspace the plan assigns."""
    return [(blob, slot) for blob, _, slot, _ in plan.plan_data.assign if blob.endswith("/cudnn_workspace")]


def _fixed(device) -> int:
    """What no plan changes: the context and the library handles (both as measured on an H100)."""
    return device.device_by_cause["cuda_context"] + device.device_by_cause["library_handles"]


@needs_shared
def test_resnet50_deploy_plans_caffes_allocations_under_a_tenth_of_stock(resnet50):
    # Stock: 53 cuDNN convolutions, each with its own workspace of at most 24 MiB (1,272 MiB
    # of Caffe's 1,554.94 MiB); the plan holds one, beside the shared activations: 129.39 MiB
    # (the H100 counted 129.39 MiB for this plan, benchmarks/gpu-groundtruth). The card also
    # holds the context and 210 cuDNN handles (2,593.09 MiB), which no plan changes.
    devices = resnet50.devices
    assert devices.stock.device_bytes == 4_349_486_302  # 4,148.00 MiB
    assert devices.stock.workspace_bytes_max == 53 * WORKSPACE
    assert devices.planned.device_bytes == 2_854_680_638  # 2,722.43 MiB
    assert _fixed(devices.stock) == _fixed(devices.planned) == 2_719_009_042
    assert devices.planned.device_bytes - _fixed(devices.planned) <= 0.10 * (devices.stock.device_bytes - _fixed(devices.stock))


@needs_shared
def test_googlenet_train_plans_caffes_allocations_under_a_third_of_stock(googlenet):
    # Stock: 59 cuDNN convolutions x 24 MiB = 1,416 MiB of workspace in Caffe's 3,883.27 MiB;
    # planned: 1,131.77 MiB (0.29x), beside 2,975.07 MiB of context and 243 cuDNN handles.
    devices = googlenet.devices
    assert devices.stock.device_bytes == 7_191_480_491  # 6,858.33 MiB
    assert devices.stock.workspace_bytes_max == 59 * WORKSPACE
    assert devices.planned.device_bytes == 4_306_323_627  # 4,106.83 MiB
    assert devices.planned.device_bytes - _fixed(devices.planned) <= 0.30 * (devices.stock.device_bytes - _fixed(devices.stock))


@needs_shared
@pytest.mark.parametrize("net, convolutions", [("resnet50", 53), ("googlenet", 59)])
def test_every_workspace_is_planned_in_one_slot_and_exact(net, convolutions, request):
    plan = request.getfixturevalue(net)
    workspaces = _workspaces(plan)
    assert len(workspaces) == convolutions
    assert len({slot for _, slot in workspaces}) == 1
    planned = plan.devices.planned
    # No workspace is a layer's own any more: the card's figure is one number, not a range.
    assert planned.workspace_bytes_max == 0 and planned.device_bytes_min == planned.device_bytes
    assert "picks its workspace" not in gpu_caveat(planned)


@needs_shared
def test_without_share_buffers_each_layer_keeps_its_own_workspace():
    plan = _plan("resnet/ResNet-50-deploy.prototxt", "TEST", {}, share_buffers=False)
    assert _workspaces(plan) == []
    assert plan.devices.planned.workspace_bytes_max == plan.devices.stock.workspace_bytes_max == 53 * WORKSPACE
    assert "picks its workspace at run time" in gpu_caveat(plan.devices.planned)

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


@needs_shared
def test_resnet50_deploy_plans_under_a_third_of_stock_on_the_card(resnet50):
    # Stock: 53 cuDNN convolutions, each with its own workspace of at most 24 MiB
    # (1,272 MiB of 1,855.17 MiB); the plan holds one, beside the shared activations.
    devices = resnet50.devices
    assert devices.stock.device_bytes == 1_945_283_516  # 1,855.17 MiB
    assert devices.stock.workspace_bytes_max == 53 * WORKSPACE
    assert devices.planned.device_bytes == 456_900_380  # 435.73 MiB, 0.235x
    assert devices.planned.device_bytes <= 0.30 * devices.stock.device_bytes


@needs_shared
def test_googlenet_train_plans_under_045_of_stock_on_the_card(googlenet):
    # Stock: 59 cuDNN convolutions x 24 MiB = 1,416 MiB of workspace in 4,183.27 MiB.
    devices = googlenet.devices
    assert devices.stock.device_bytes == 4_386_479_192  # 4,183.27 MiB
    assert devices.stock.workspace_bytes_max == 59 * WORKSPACE
    assert devices.planned.device_bytes == 1_501_322_328  # 1,431.77 MiB, 0.342x
    assert devices.planned.device_bytes <= 0.45 * devices.stock.device_bytes


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
    assert not any("cudnn_workspace is the most" in note for note in planned.notes)


@needs_shared
def test_without_share_buffers_each_layer_keeps_its_own_workspace():
    plan = _plan("resnet/ResNet-50-deploy.prototxt", "TEST", {}, share_buffers=False)
    assert _workspaces(plan) == []
    assert plan.devices.planned.workspace_bytes_max == plan.devices.stock.workspace_bytes_max == 53 * WORKSPACE
    assert any("cudnn_workspace is the most" in note for note in plan.devices.planned.notes)

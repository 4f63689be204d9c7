"""The GPU model held to the card: benchmarks/gpu-groundtruth/h100-2026-11-26.tar.xz is what
an H100 measured for every net of the ground truth, stock and under both plans (136 runs;
benchmarks/gpu-groundtruth/README.md).  The archive is in the repository: these tests need
neither ../shared nor a GPU."""

from __future__ import annotations

import json
import sys
import tarfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))
import gpu_measured  # noqa: E402

from caffemem.passes.device import CUDA_CONTEXT, CUDNN_HANDLE, LAZY_KERNELS_HIGH, LAZY_KERNELS_LOW  # noqa: E402


@pytest.fixture(scope="module")
def measured(tmp_path_factory) -> list[gpu_measured.Row]:
    root = gpu_measured.unpack(gpu_measured.ARCHIVE, tmp_path_factory.mktemp("gpu"))
    return list(gpu_measured.rows(root))


def test_every_measured_run_is_compared(measured):
    # 46 runs of the corpus x (stock, blob plan, --share-buffers plan), less the two LSTM
    # --share-buffers plans the patched Caffe refused on the card.
    assert len(measured) == 136
    assert sum(row.config == "stock" for row in measured) == 46


def test_caffes_allocations_on_the_card_equal_the_model_byte_for_byte(measured):
    # Every byte counted at Caffe's cudaMalloc sites (less frees and cuDNN's workspaces)
    # against the model's device bytes less the context, the handles and the workspaces.
    compared = [row for row in measured if row.plan_as_run]
    differ = [(row.config, row.file, row.phase, row.card.caffe_bytes, row.model_caffe_bytes) for row in compared if not row.equal]
    assert differ == [] and len(compared) == 117


def test_resnet50_deploy_under_the_buffers_plan_as_counted_on_the_card(measured):
    row = next(r for r in measured if r.config == "patched-buffers" and r.file.startswith("resnet__ResNet-50-deploy"))
    assert row.card.caffe_bytes == row.model_caffe_bytes == 135_671_596


def test_the_plans_remade_today_are_those_the_card_ran_but_where_dropouts_test_mask_left_the_card(measured):
    # The model now keeps Dropout's mask off the card in TEST (dropout_layer.cu takes it only
    # in TRAIN), so --share-buffers no longer places it in TEST nets with Dropout; every
    # other plan is the one that ran.
    changed = {(row.file, row.phase) for row in measured if not row.plan_as_run}
    assert all(row.config == "patched-buffers" and row.phase == "TEST" for row in measured if not row.plan_as_run)
    assert ("bvlc_alexnet__deploy.json", "TEST") in changed and len(changed) == 19


def test_cudnn_picked_workspaces_within_the_bound_the_model_reports(measured):
    for row in measured:
        if row.config == "stock":
            assert row.card.workspace_bytes <= row.workspace_bound, (row.file, row.phase)


def test_the_context_constant_is_what_the_card_held_before_the_net():
    with tarfile.open(gpu_measured.ARCHIVE) as tar:
        summary = json.load(tar.extractfile("gpu-groundtruth/summary.json"))
    before = {run["process"]["device_used_before_net"] for run in summary["runs"] if run["ok"]}
    assert before == {CUDA_CONTEXT.bytes}


def test_the_handle_and_lazy_kernel_constants_are_the_fit_of_the_measurement(measured):
    slope, low, high = gpu_measured.handle_fit(measured)
    assert (round(slope), round(low), round(high)) == (CUDNN_HANDLE.bytes, LAZY_KERNELS_LOW, LAZY_KERNELS_HIGH)

"""A result's timeline (api/timeline.py): its run step by step, as every view draws it,
computed by the API once, when a view first asks."""

from __future__ import annotations

import pytest

from caffemem.api.analyze import Options, analyze
from caffemem.api.optimize import OptimizeSettings, optimize

# Five 1×1×4×4 float32 blobs (64 bytes of data, 16 of shape each): x → r1 → r2 → r3 → r4.
CHAIN = """name: "chain"
layer { name: "x" type: "Input" top: "x" input_param { shape { dim: 1 dim: 1 dim: 4 dim: 4 } } }
layer { name: "r1" type: "ReLU" bottom: "x" top: "r1" }
layer { name: "r2" type: "ReLU" bottom: "r1" top: "r2" }
layer { name: "r3" type: "ReLU" bottom: "r2" top: "r3" }
layer { name: "r4" type: "ReLU" bottom: "r3" top: "r4" }
"""
TEST = Options(phase="TEST")


@pytest.fixture(scope="module")
def chain(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("chain") / "chain.prototxt"
    path.write_text(CHAIN)
    return str(path)


def test_the_stock_series_is_the_running_total_of_caffes_allocations(chain):
    net = analyze(chain, TEST).nets[0]
    # Step 0: x's data (64) and five shape buffers (80); then each ReLU's top (64).
    assert net.timeline.allocated == (144, 208, 272, 336, 400)
    assert net.timeline.allocated[-1] == net.memory.heap_total == net.total_bytes
    assert net.timeline.step_names == ("init", "forward r1", "forward r2", "forward r3", "forward r4")


def test_live_bytes_count_a_shareable_blob_from_its_first_write_to_its_last_read(chain):
    # r1 is live at steps 1-2, r2 at 2-3, r3 at 3-4; x (input) and r4 (output) stay.
    assert analyze(chain, TEST).nets[0].timeline.live == (144, 208, 272, 272, 272)


def test_each_storage_class_is_drawn_over_the_steps_it_holds_a_value_someone_reads(chain):
    storage = {use.label: (use.touched, use.spans, use.kept) for use in analyze(chain, TEST).nets[0].timeline.storage}
    assert storage["r1:data"] == ((1, 2), ((1, 2),), None)
    # An output keeps its storage: drawn over its whole use.
    assert storage["r4:data"] == ((4, 4), ((4, 4),), "'r4' is an input, output, loss or excluded blob")


def test_the_planned_series_allocates_each_slot_whole_on_first_touch(chain):
    phase = optimize(chain, TEST, OptimizeSettings(strategy="best-fit")).phases[0]
    # Slot 0 (r1, r3) at step 1, slot 1 (r2) at step 2, r4's own storage at step 4.
    assert phase.timeline.planned == (144, 208, 272, 272, 336)
    assert phase.timeline.lower_bound == phase.totals()["lower_bound"]


def test_a_plans_slot_members_are_its_table_entries_at_their_offsets(chain):
    phase = optimize(chain, TEST, OptimizeSettings(strategy="best-fit")).phases[0]
    members = [(m.blob, m.kind, m.slot, m.offset, m.storage.spans) for m in phase.timeline.slot_members]
    assert members == [("r1", "data", 0, 0, ((1, 2),)), ("r3", "data", 0, 0, ((3, 4),)), ("r2", "data", 1, 0, ((2, 3),))]


def test_in_gpu_mode_the_series_are_the_cards(chain):
    net = analyze(chain, Options(phase="TEST", device="gpu")).nets[0]
    # Step 0 holds the context and Net::Init's copies; each ReLU's Forward cudaMallocs its top.
    assert net.timeline.allocated[-1] == net.device.device_bytes
    assert [b - a for a, b in zip(net.timeline.allocated, net.timeline.allocated[1:])] == [layer.device[1] for layer in net.device.layers[1:]]


def test_a_result_computes_its_timeline_only_when_a_view_asks(chain):
    """analyze, optimize, check and fit build nets that no view draws: they never pay for it."""
    net, phase = analyze(chain, TEST).nets[0], optimize(chain, TEST).phases[0]
    assert "timeline" not in vars(net) and "timeline" not in vars(phase)
    assert net.timeline is net.timeline and phase.timeline is phase.timeline  # computed once


PLANNED_RUNS = [
    ("examples/lenet_train.prototxt", {}),
    ("docs/train_val.prototxt", {"data": (3, 224, 224)}),
    ("plan/recompute_resnet.prototxt", {}),
]


@pytest.mark.parametrize("device", ["cpu", "gpu"])
@pytest.mark.parametrize("settings", [OptimizeSettings(), OptimizeSettings(share_buffers=True), OptimizeSettings(recompute="sqrt")], ids=["blobs", "share-buffers", "recompute"])
@pytest.mark.parametrize("net, inputs", PLANNED_RUNS, ids=[net for net, _ in PLANNED_RUNS])
def test_the_plans_line_never_dips_below_the_live_values_of_the_run_it_is_of(net, inputs, settings, device):
    # Issue 34 item 10: in GPU mode the live values were the card's stock run (no shared
    # buffers, no recomputation, each cuDNN workspace at its bound): 72 MiB above the plan
    # of docs/train_val.prototxt with --share-buffers at step 0.
    from conftest import FIXTURES

    for phase in optimize(str(FIXTURES / net), Options(device=device, inputs=inputs), settings).phases:
        timeline = phase.timeline
        assert len(timeline.live) == len(timeline.planned) == len(timeline.step_names)
        below = [(step, planned - live) for step, (planned, live) in enumerate(zip(timeline.planned, timeline.live)) if planned < live]
        assert not below, f"{phase.phase}: the plan's line below the live values at (step, bytes) {below[:3]}"
        assert min(timeline.live) > 0


def test_in_gpu_mode_the_live_values_are_the_planned_runs_on_the_card(chain):
    phase = optimize(chain, Options(phase="TEST", device="gpu"), OptimizeSettings(strategy="best-fit")).phases[0]
    # Slot 0 (r1, r3) is cudaMalloc'd by r1's Forward, slot 1 (r2) by r2's, 64 B each.
    assert phase.devices.planned.slot_device == ((0, 0, 0), (0, 64, 0), (0, 64, 0), (0, 0, 0), (0, 0, 0))
    # Each slot holds a live value until step 4, where r2 (slot 1) has had its last read.
    timeline = phase.timeline
    assert [planned - live for planned, live in zip(timeline.planned, timeline.live)] == [0, 0, 0, 0, 64]

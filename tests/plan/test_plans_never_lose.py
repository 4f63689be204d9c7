"""Plans never lose (issue 22), on random nets (tests/random_nets.py) in both modes, CPU
and GPU, with and without --share-buffers: the plan kept is no larger than stock Caffe,
than the fork's plan when that is safe, and (with --share-buffers) than the plan without
it; the lower bound is no larger than any plan a strategy makes, nor than the fork's;
and `auto` ranks, and reports, the figure it keeps — the card's in GPU mode.

Each figure is the one the reports print (``PhasePlan.totals``), recomputed here by
replaying each plan over the memory model of the mode (device.py on the card), not by
the optimizer's own ranking."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, seed, settings
from random_nets import RandomNet, caffe_nets

from caffemem.api.analyze import Options, prepare_run
from caffemem.api.optimize import OptimizeSettings, PhasePlan, assignment_of, optimize, plan_data
from caffemem.layers.registry import SpecTable
from caffemem.passes.device import device_footprint
from caffemem.passes.memory import SlotAssignment, replay
from caffemem.layers.access import BlobId
from caffemem.plan.strategies import DEVICE_ALIGNMENT, make_plan
from caffemem.plan.verify import verify_plan_on

MODES = ("cpu", "gpu")
SEED = 20261126


def property_test(test):
    """40 random nets, the same ones for every property (a fixed seed, no database), each
    in both modes."""
    ci = settings(max_examples=40, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
    return pytest.mark.parametrize("device", MODES)(seed(SEED)(ci(given(caffe_nets(max_layers=12))(test))))


@lru_cache(maxsize=None)
def planned(text: str, device: str, share_buffers: bool) -> tuple[PhasePlan, ...]:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "net.prototxt"
        path.write_text(text)
        return optimize(str(path), Options(device=device), OptimizeSettings(share_buffers=share_buffers)).phases


def figure(phase: PhasePlan, device: str, slots: SlotAssignment) -> int:
    """What the reports would print as ``planned`` for a plan with these slots (on the
    card: as a caffemem-patched Caffe runs it, its cuDNN handles and workspace pooled)."""
    specs, options = SpecTable(), Options(device=device)
    run = prepare_run(phase.shaped, specs, options)
    if device == "cpu":
        return replay(run, slots).total_bytes
    return device_footprint(run, specs, options.build_engine, slots=slots, pooled=True).device_bytes


@dataclass(frozen=True)
class Strategy:
    """One strategy's plan of a phase, judged from outside the optimizer."""

    name: str
    figure: int
    safe: bool


@lru_cache(maxsize=None)
def every_strategy(text: str, device: str, share_buffers: bool) -> tuple[tuple[Strategy, ...], ...]:
    """Per phase: every strategy's own plan of the chosen liveness (on the card: its members
    at multiples of 256 bytes, as the optimizer places them), replayed and verified."""
    found = []
    for phase in planned(text, device, share_buffers):
        plans = []
        for name, plan in make_plan(phase.liveness, alignment=DEVICE_ALIGNMENT if device == "gpu" else 1).items():
            data = plan_data(plan, phase.schedule)
            plans.append(Strategy(name, figure(phase, device, assignment_of(data, phase.schedule)), not verify_plan_on(phase.schedules, data)))
        found.append(tuple(plans))
    return tuple(found)


@property_test
def test_the_plan_is_no_larger_than_stock_caffe(device, net: RandomNet):
    for share_buffers in (False, True):
        for phase in planned(net.text, device, share_buffers):
            assert phase.totals()["planned"] <= phase.totals()["stock"], (phase.phase, share_buffers)


@property_test
def test_the_plan_is_no_larger_than_the_forks_safe_plan(device, net: RandomNet):
    for share_buffers in (False, True):
        for phase in planned(net.text, device, share_buffers):
            if phase.fork_safe:
                assert phase.totals()["planned"] <= phase.totals()["fork"], (phase.phase, share_buffers)


@property_test
def test_sharing_buffers_never_ends_above_not_sharing_them(device, net: RandomNet):
    for blobs, buffers in zip(planned(net.text, device, False), planned(net.text, device, True)):
        assert buffers.totals()["planned"] <= blobs.totals()["planned"], blobs.phase


@property_test
def test_the_lower_bound_is_below_every_strategys_plan_and_the_forks(device, net: RandomNet):
    for share_buffers in (False, True):
        for phase, plans in zip(planned(net.text, device, share_buffers), every_strategy(net.text, device, share_buffers)):
            bound = phase.totals()["lower_bound"]
            assert bound <= phase.totals()["planned"], (phase.phase, share_buffers)
            assert bound <= phase.totals()["fork"] or not phase.fork_safe, (phase.phase, share_buffers)
            for plan in plans:
                assert bound <= plan.figure, (phase.phase, share_buffers, plan)


@property_test
def test_auto_keeps_the_smallest_safe_figure_it_reports(device, net: RandomNet):
    for share_buffers in (False, True):
        for phase, plans in zip(planned(net.text, device, share_buffers), every_strategy(net.text, device, share_buffers)):
            totals = phase.totals()
            assert phase.candidates[phase.strategy] == totals["planned"] == min(phase.candidates.values()), (phase.phase, share_buffers)
            assert totals["planned"] <= min(plan.figure for plan in plans if plan.safe), (phase.phase, share_buffers, plans)


@property_test
def test_candidates_are_ranked_by_what_each_plan_replays_to(device, net: RandomNet):
    """The optimizer ranks by stock - the storage a plan places + its slots, unreplayed:
    on the card as on the CPU, that is what the replay of the mode gives."""
    for phase, plans in zip(planned(net.text, device, False), every_strategy(net.text, device, False)):
        for plan in plans:
            if plan.name in phase.candidates:
                assert phase.candidates[plan.name] == plan.figure, (phase.phase, plan)


@property_test
def test_on_the_card_every_member_sits_where_its_own_cudamalloc_would(device, net: RandomNet):
    # cudaMalloc aligns to 256 bytes; cuDNN and cuBLAS pick kernels by pointer alignment (an
    # H100 gave OpenPose other outputs from a table with members off a 16-byte boundary).
    # Each slot is still exactly as large as its members' end, which the runtime checks.
    if device != "gpu":
        return
    for share_buffers in (False, True):
        for phase in planned(net.text, device, share_buffers):
            assert all(offset % DEVICE_ALIGNMENT == 0 for _, _, _, offset in phase.plan_data.assign)
            sizes = {(blob, kind): phase.schedule.classes[phase.schedule.class_of.get((BlobId("blob", blob), kind), phase.schedule.class_of.get((BlobId("buffer", blob), kind)))].bytes for blob, kind, _, _ in phase.plan_data.assign}
            for slot, size in phase.plan_data.slot_bytes.items():
                ends = [offset + sizes[(blob, kind)] for blob, kind, s, offset in phase.plan_data.assign if s == slot]
                assert size == max(ends, default=0)

"""benchmarks/plans_never_lose.py names each inequality a plan breaks, from the figures
`optimize` reports (the issue-22 reproductions, in bytes)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "plans_never_lose.py"


def _faults():
    spec = importlib.util.spec_from_file_location("plans_never_lose", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.faults


def test_fcn8s_on_the_card_before_the_fix_breaks_every_inequality_but_the_bound():
    # stock 3,194.86 MiB, fork 2,804.15, blobs 2,554.53 (bound 2,551.67), buffers 3,366.28 (bound 177.42)
    blobs = {"stock": 3350056960, "fork": 2940366848, "planned": 2678614016, "lower_bound": 2675613696}
    buffers = dict(blobs, planned=3529805824, lower_bound=186040320)
    assert _faults()(blobs, buffers) == [">stock", ">fork", "gap>2%", "buffers>blobs"]


def test_a_plan_at_its_bound_below_stock_and_the_fork_has_no_fault():
    blobs = {"stock": 100, "fork": 90, "planned": 80, "lower_bound": 80}
    assert _faults()(blobs, dict(blobs, planned=70, lower_bound=70)) == []


def test_a_bound_above_the_plan_is_no_bound():
    blobs = {"stock": 100, "fork": 90, "planned": 80, "lower_bound": 81}
    assert _faults()(blobs, blobs) == ["bound>plan"]

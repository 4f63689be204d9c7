"""`caffemem verify` as an API: judge a plan (the JSON of ``optimize --json`` or
``--plan-json``) against the net's own run, with the verifier that shares no code with
the planners (plan/verify.py)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from caffemem.api.analyze import Options, analyze, planning_runs, spec_table, with_overrides
from caffemem.api.source import NetLike, as_source
from caffemem.passes.schedule import build_schedule
from caffemem.plan.verify import Violation, read_plan, verify_plan_on


@dataclass(frozen=True)
class Verdict:
    """One phase of a plan file, judged."""

    phase: str
    slots: int
    violations: tuple[Violation, ...]

    @property
    def safe(self) -> bool:
        return not self.violations


def verify(net: NetLike, plan_file: str, options: Options = Options(), *, phase: str | None = None, inputs: Mapping[str, Sequence[int]] | None = None) -> tuple[Verdict, ...]:
    """Every phase the plan file holds (or only ``options.phase``), replayed over the net
    (a path, prototxt text or a NetParameter)."""
    options = with_overrides(options, phase, inputs, None)
    path = as_source(net)
    verdicts = []
    for plan_phase, plan in read_plan(plan_file, options.phase):
        at_phase = replace(options, phase=plan_phase)
        net = analyze(path, at_phase).nets[0]
        specs = spec_table(at_phase)
        runs = [run for run in planning_runs(net.shaped, specs, at_phase) if run is not None]  # GPU mode: the CPU run too
        violations = verify_plan_on((build_schedule(net.shaped, specs, options.dtype, run=run) for run in runs), plan)
        verdicts.append(Verdict(net.phase, len(plan.slot_bytes), tuple(violations)))
    return tuple(verdicts)

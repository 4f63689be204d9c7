"""`caffemem verify`: judge a plan (JSON) against the net's run, sharing no code with the planners.

Exit codes: 0 every phase's plan is safe, 1 a violation, 2 bad input.
"""

from __future__ import annotations

import sys

import click

from caffemem.cli.common import EXIT_FINDING, net_options, options_from, reports_errors


@click.command("verify")
@net_options
@click.argument("plan", type=str)
@reports_errors
def verify_command(net, plan, phase, stages, level, inputs, layers_file, lenient, dtype, batch, engine) -> None:
    """Check a plan (JSON from `optimize --json`/`--plan-json`) against the net's run."""
    from caffemem.api.analyze import analyze as run_analysis
    from caffemem.api.analyze import spec_table
    from caffemem.passes.schedule import build_schedule
    from caffemem.plan.verify import read_plan, verify_plan

    failures = 0
    for run_phase, plan_data in read_plan(plan, phase):
        options = options_from(run_phase, stages, level, inputs, layers_file, lenient, dtype, batch, engine)
        analysis = run_analysis(net, options)
        schedule = build_schedule(analysis.nets[0].shaped, spec_table(options), dtype, engine)
        violations = verify_plan(schedule, plan_data)
        label = analysis.nets[0].phase
        for violation in violations:
            click.echo(f"{plan}: {label}: {violation}")
        if not violations:
            click.echo(f"{plan}: {label}: plan is safe ({len(plan_data.slot_bytes)} slots)")
        failures += bool(violations)
    if failures:
        sys.exit(EXIT_FINDING)

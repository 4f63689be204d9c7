"""`caffemem verify`: judge a plan (JSON) against the net's run, sharing no code with the planners.

Exit codes: 0 every phase's plan is safe, 1 a violation, 2 bad input.
"""

from __future__ import annotations

import sys

import click

from caffemem.cli.common import EXIT_CODES_HELP, EXIT_FINDING, net_options, options_from, reports_errors


@click.command("verify", epilog=EXIT_CODES_HELP)
@net_options
@click.argument("plan", type=str)
@reports_errors
def verify_command(net, plan, phase, stages, level, inputs, layers_file, lenient, dtype, batch, engine) -> None:
    """Check a plan (JSON from `optimize --json`/`--plan-json`) against the net's run.

    Every phase the plan holds is replayed (or only --phase).

    \b
    Examples:
      caffemem optimize deploy.prototxt --plan-json plan.json
      caffemem verify deploy.prototxt plan.json
      caffemem optimize train_val.prototxt --input data=3,224,224 --plan-json plan.json
      caffemem verify train_val.prototxt plan.json --phase TEST --input data=3,224,224
    """
    from caffemem.api.verify import verify

    options = options_from(phase, stages, level, inputs, layers_file, lenient, dtype, batch, engine)
    verdicts = verify(net, plan, options)
    for verdict in verdicts:
        for violation in verdict.violations:
            click.echo(f"{plan}: {verdict.phase}: {violation}")
        if verdict.safe:
            click.echo(f"{plan}: {verdict.phase}: plan is safe ({verdict.slots} slots)")
    if not all(verdict.safe for verdict in verdicts):
        sys.exit(EXIT_FINDING)

"""`caffemem verify`: judge a slot table against the net's run, sharing no code with the
planners — the table the prototxt carries (``optimize -o``), or a plan JSON.

Exit codes: 0 every phase's table is safe, 1 a violation (or a table the patched Caffe
would refuse at Net::Init), 2 bad input.
"""

from __future__ import annotations

import sys

import click

from caffemem.cli.common import EXIT_CODES_HELP, EXIT_FINDING, echo_wrapped, net_options, options_from, reports_errors
from caffemem.units import plural

# The flags that override what the plan records it was made for (api/verify.py RECORDED),
# by the parameter that carries each.
_RECORDED_FLAGS = {"phase": "phase", "stages": "stages", "level": "level", "inputs": "inputs", "dtype": "dtype", "batch": "batch", "engine": "engine", "device": "device"}


@click.command("verify", epilog=EXIT_CODES_HELP)
@net_options
@click.argument("plan", type=str, required=False)
@reports_errors
def verify_command(net, plan, phase, stages, level, inputs, layers_file, lenient, dtype, batch, engine) -> None:
    """Check the slot table NET carries (written by `optimize -o`), or a PLAN (JSON from
    `optimize --json`/`--plan-json`), against the net's run.

    Each table is checked for the phase its own entries name (--phase picks one),
    at what the plan records it was made for (inputs, batch, dtype, device, engine);
    a flag given here overrides that field, e.g. --batch 8 asks whether the table runs
    at batch 8.  A record naming another phase than its table is refused.  First comes
    what the patched Caffe's Net::Init would say (the first slot or blob that does not
    match the net), then the replay of every step.

    \b
    Examples:
      caffemem optimize train_val.prototxt --input data=3,224,224 -o opt.prototxt
      caffemem verify opt.prototxt
      caffemem optimize deploy.prototxt --plan-json plan.json
      caffemem verify deploy.prototxt plan.json
    """
    from caffemem.api.verify import verify

    context = click.get_current_context()
    given = {field for field, param in _RECORDED_FLAGS.items() if context.get_parameter_source(param) == click.core.ParameterSource.COMMANDLINE}
    if context.meta.get("caffemem.override_inputs"):
        given.add("inputs")  # --override-input's shapes replace the record's too
    options = options_from(phase, stages, level, inputs, layers_file, lenient, dtype, batch, engine)
    label = plan or net
    verdicts = verify(net, plan, options, explicit=given)
    lines = [f"{label}: {verdict_line(verdict)}" for verdict in verdicts]  # the answer first: one verdict per phase, with its batch
    for verdict in verdicts:
        if verdict.made_for is not None:
            lines.append(f"{label}: {verdict.phase}: planned for {verdict.made_for.describe()}")
        lines.append(f"{label}: {verdict.phase}: checked at {verdict.checked_at}")
        lines += [f"{label}: {verdict.phase}: note: {note}" for note in verdict.notes]
        for violation in verdict.violations:
            said = f"the patched Caffe stops at Net::Init: {violation.message}" if violation.step_name == "Net::Init" else str(violation)
            lines.append(f"{label}: {verdict.phase}: {said}")
    for line in lines:  # names from the net and the record, shown as one_line shows them: a CR in one cannot overprint a verdict
        echo_wrapped(line)
    if not all(verdict.safe for verdict in verdicts):
        sys.exit(EXIT_FINDING)


def verdict_line(verdict) -> str:
    """One phase's answer: "TRAIN, batch 16: the table is safe (3 slots)", or what stops it."""
    where = f"{verdict.phase}{'' if verdict.batch is None else f', batch {verdict.batch}'}"
    slots = plural(verdict.slots, "slot")
    if verdict.safe:
        return f"{where}: the table is safe ({slots})"
    if verdict.violations[0].step_name == "Net::Init":
        return f"{where}: the table is not safe: the patched Caffe would stop at Net::Init"
    return f"{where}: the table is not safe: {plural(len(verdict.violations), 'violation')} in the replay of its {slots}"

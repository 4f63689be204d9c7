"""`caffemem optimize`: plan shared storage and write it into the prototxt as mem_param."""

from __future__ import annotations

import json
import sys

import click

from caffemem.cli.common import (
    EXIT_CODES_HELP,
    EXIT_FINDING,
    GPUS_OPTION,
    HTML_HELP,
    RECOMPUTE_HELP,
    RecomputePolicy,
    console,
    distinct_outputs,
    echo_wrapped,
    input_files,
    net_options,
    options_from,
    progress,
    reports_errors,
    write_html,
)
from caffemem.plan.strategies import STRATEGY_NAMES
from caffemem.units import mib


@click.command("optimize", epilog=EXIT_CODES_HELP)
@net_options
@GPUS_OPTION
@click.option("-o", "--output", type=str, metavar="OUT", help="Write the prototxt with mem_param here (- for standard output); never over an input unless --in-place-file.")
@click.option("--strategy", type=click.Choice(list(STRATEGY_NAMES)), default="auto", show_default=True, help="auto: every strategy, the smallest safe plan is kept.")
@click.option("--exclude-blob", "exclude", multiple=True, metavar="NAME", help="Keep this blob's storage private (repeatable).")
@click.option("--share-buffers", is_flag=True, help="Let scratch layer buffers (im2col) share slots too.")
@click.option("--recompute", type=RecomputePolicy(), metavar="[cheap|sqrt|budget=SIZE]", help=RECOMPUTE_HELP)
@click.option("--inplace", is_flag=True, help="First run layers in place (top renamed to its bottom) where stock Caffe gives the same result.")
@click.option("--target", type=click.Choice(["caffemem", "fork"]), default="caffemem", show_default=True, help="caffemem: mem_param with the slot table; fork: only what the fork's schema accepts.")
@click.option("--plan-json", type=str, metavar="FILE", help="Also write the plan as JSON (for `caffemem verify`).")
@click.option("--in-place-file", is_flag=True, help="Allow OUT to be the input file itself.")
@click.option("--force", is_flag=True, help="Plan a file that already has a mem_param.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document instead of tables.")
@click.option("--html", "html_file", type=str, metavar="FILE", help=HTML_HELP)
@reports_errors
def optimize_command(net, phase, stages, level, inputs, layers_file, lenient, dtype, batch, engine, output, strategy, exclude, share_buffers, recompute, inplace, target, plan_json, in_place_file, force, as_json, html_file) -> None:
    """Plan shared storage for the net's blobs and write it as mem_param.

    Plans TRAIN and TEST for a net that trains (TEST for a deploy net) unless --phase;
    every plan is checked by the verifier before it is written.

    --batch N with -o writes the net at batch N: the data layers' batch lines (batch_size,
    an Input's first dim, input_dim) become N, every other byte is kept, and the table is
    planned for N.  The table records what it was made for, so `caffemem verify OUT`
    needs no flags.

    \b
    Examples:
      caffemem optimize train_val.prototxt --input data=3,224,224 -o opt.prototxt
      caffemem optimize train_val.prototxt --input data=3,224,224 \\
        --batch 16 -o train_val.b16.prototxt
      caffemem optimize deploy.prototxt --share-buffers --plan-json plan.json \\
        --exclude-blob fc7
      caffemem optimize train_val.prototxt --input data=3,224,224 \\
        --recompute sqrt -o train_val.sqrt.prototxt
    """
    from caffemem.api.optimize import RECOMPUTE_NOT_WITH_FORK, OptimizeSettings, fork_losing_phases, fork_target_exclusions, made_for, other_phases_rebatched, written_text
    from caffemem.api.optimize import optimize as run_optimize
    from caffemem.errors import CaffememError, Location, one_line
    from caffemem.prototxt.write import STDOUT, encode_exact, read_exact, write_output
    from caffemem.report.document import optimize_json
    from caffemem.report.terminal import print_optimize

    distinct_outputs(("-o", output), ("--plan-json", plan_json), ("--html", html_file))
    if STDOUT in (output, plan_json, html_file) and as_json:
        raise CaffememError("--json prints to standard output; write the prototxt or plan to a file, not -")
    options = options_from(phase, stages, level, inputs, layers_file, lenient, dtype, batch, engine)
    if recompute is not None and (strategy == "fork" or target == "fork"):
        raise CaffememError(RECOMPUTE_NOT_WITH_FORK)
    settings = OptimizeSettings(strategy, tuple(exclude), share_buffers, inplace, recompute)
    with progress(f"caffemem: planning {net}"):
        result = run_optimize(net, options, settings, force=force)
    document = optimize_json(result)
    for entry, record in zip(document["phases"], made_for(result, options)):
        entry["made_for"] = record.to_json()
    inputs_read = input_files(result, options)
    losing = [phase for phase in result.phases if phase.totals()["planned"] > phase.totals()["stock"]]
    if losing and (output is not None or plan_json is not None):
        where = "on the card" if options.device == "gpu" else "in all"
        for phase in losing:
            totals = phase.totals()
            echo_wrapped(
                f"caffemem: the {phase.strategy} plan of {phase.phase} holds {mib(totals['planned'])} {where}, more than stock Caffe's "
                f"{mib(totals['stock'])}: nothing written ({one_line(net)}). --strategy auto never plans above stock Caffe.",
                err=True,
            )
        sys.exit(EXIT_FINDING)
    if output is not None:
        if result.source.binary:
            raise CaffememError("optimize writes text prototxt: give it the net definition, not a binary .caffemodel", Location(file=net))
        exclude_written, fork_off = result.exclude, {}
        if target == "fork":
            added = fork_target_exclusions(result, options)
            if added is None:
                unsafe = [p.phase for p in result.phases if not p.fork_safe]
                echo_wrapped(
                    f"caffemem: the fork's own optimizer would corrupt this net in {' and '.join(unsafe)} "
                    f"(its plan fails caffemem's verifier: {one_line(net)}), and keeping blobs private does not make it safe; nothing written. "
                    "Write caffemem's verified slot table instead (--target caffemem, run by `caffemem patch`).",
                    err=True,
                )
                sys.exit(EXIT_FINDING)
            if added:
                exclude_written = result.exclude + added
                echo_wrapped(f"caffemem: kept private so that the fork's own optimizer is safe on this net: {', '.join(added)} (exclude_blob)", err=True)
            fork_off = fork_losing_phases(result, options, exclude_written)
            if len(fork_off) == len(result.phases):
                echo_wrapped(f"caffemem: the fork's own optimizer would hold more than stock Caffe in {' and '.join(fork_off)} ({net}); nothing written", err=True)
                sys.exit(EXIT_FINDING)
            for losing, (figure, stock) in fork_off.items():
                echo_wrapped(f"caffemem: the fork's own optimizer would hold {mib(figure)} in {losing}, more than stock Caffe's {mib(stock)}: left off there (optimize_{losing.lower()}: false)", err=True)
        original = result.inplace.text if result.inplace is not None else read_exact(net)
        text = written_text(result, options, original, exclude_written, target, frozenset(fork_off))
        if batch is not None and target == "caffemem":
            check_written(text, net, output, options)
        for note in other_phases_rebatched(result, options, text) if batch is not None and phase else ():
            echo_wrapped(f"caffemem: note: {note}", err=True)
        write_output(output, encode_exact(text), inputs=inputs_read, may_replace=net if in_place_file else None)
    if plan_json is not None:
        write_output(plan_json, (json.dumps(document, indent=1) + "\n").encode("utf-8"), inputs=inputs_read, flag="--plan-json")
    if html_file is not None:
        write_html(html_file, result, options, settings)
    if as_json:
        click.echo(json.dumps(document, indent=1))
        return
    report_to_stderr = STDOUT in (output, plan_json, html_file)  # standard output carries the file
    print_optimize(result, console(stderr=report_to_stderr))
    if output is not None:
        wrote = "standard output" if output == STDOUT else output
        echo_wrapped(f"wrote {wrote}: {RUNS_ON[target]}", err=output == STDOUT)


# Where the file `optimize -o` writes runs: stock Caffe stops at the mem_param field it does
# not know (Message type "caffe.NetParameter" has no field named "mem_param").
RUNS_ON = {
    "caffemem": "run it with a Caffe patched by `caffemem patch CAFFE_DIR` (stock Caffe refuses mem_param)",
    "fork": "run it with the memory-multiloading fork (yjxiong/caffe), whose own optimizer plans it (stock Caffe refuses mem_param)",
}


def check_written(text: str, net: str, output: str, options) -> None:
    """The file about to be written, verified as `caffemem verify OUT` will: at its own
    batch lines the table must be right, or nothing is written.  A refusal names the
    user's net (OUT was never written: issue 31)."""
    from dataclasses import replace

    from caffemem.api.verify import verify
    from caffemem.errors import CaffememError, Location
    from caffemem.passes.load import NetText

    try:
        verdicts = verify(NetText(text, output), None, replace(options, batch=None), explicit=("layers_file", "lenient"))
    except CaffememError as error:
        line = f" at its line {error.where.line}" if error.where.line is not None else ""
        raise CaffememError(f"--batch {options.batch}: the file rewritten at that batch would not read back ({error.message}{line}); nothing written to {output}", Location(file=net)) from None
    for verdict in verdicts:
        if not verdict.safe:
            raise CaffememError(f"--batch {options.batch}: the file rewritten at that batch would not run its table ({verdict.phase}: {verdict.violations[0]}); nothing written to {output}", Location(file=net))

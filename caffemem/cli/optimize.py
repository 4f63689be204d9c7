"""`caffemem optimize`: plan shared storage and write it into the prototxt as mem_param."""

from __future__ import annotations

import json
import os

import click

from caffemem.cli.common import (
    HTML_HELP,
    net_options,
    options_from,
    reports_errors,
    write_html,
)
from caffemem.plan.strategies import STRATEGY_NAMES


@click.command("optimize")
@net_options
@click.option("-o", "--output", type=str, metavar="OUT", help="Write the prototxt with mem_param here.")
@click.option("--strategy", type=click.Choice(list(STRATEGY_NAMES)), default="auto", show_default=True, help="auto: every strategy, the smallest safe plan is kept.")
@click.option("--exclude-blob", "exclude", multiple=True, metavar="NAME", help="Keep this blob's storage private (repeatable).")
@click.option("--share-buffers", is_flag=True, help="Let scratch layer buffers (im2col) share slots too.")
@click.option("--inplace", is_flag=True, help="First run layers in place (top renamed to its bottom) where stock Caffe gives the same result.")
@click.option("--target", type=click.Choice(["caffemem", "fork"]), default="caffemem", show_default=True, help="caffemem: mem_param with the slot table; fork: only what the fork's schema accepts.")
@click.option("--plan-json", type=str, metavar="FILE", help="Also write the plan as JSON (for `caffemem verify`).")
@click.option("--in-place-file", is_flag=True, help="Allow OUT to be the input file itself.")
@click.option("--force", is_flag=True, help="Plan a file that already has a mem_param.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document instead of tables.")
@click.option("--html", "html_file", type=str, metavar="FILE", help=HTML_HELP)
@reports_errors
def optimize_command(net, phase, stages, level, inputs, layers_file, lenient, dtype, batch, engine, output, strategy, exclude, share_buffers, inplace, target, plan_json, in_place_file, force, as_json, html_file) -> None:
    """Plan shared storage for the net's blobs and write it as mem_param."""
    from caffemem.api.optimize import OptimizeSettings
    from caffemem.api.optimize import optimize as run_optimize
    from caffemem.errors import CaffememError, Location
    from caffemem.plan.rewrite import mem_param
    from caffemem.prototxt.write import rewrite_text, write_atomically
    from caffemem.report.document import optimize_json
    from caffemem.report.terminal import print_optimize

    if output and os.path.exists(output) and os.path.realpath(output) == os.path.realpath(net) and not in_place_file:
        raise CaffememError("-o names the input file; pass --in-place-file to overwrite it", Location(file=net))
    options = options_from(phase, stages, level, inputs, layers_file, lenient, dtype, batch, engine)
    result = run_optimize(net, options, OptimizeSettings(strategy, tuple(exclude), share_buffers, inplace), force=force)
    document = optimize_json(result)
    if output:
        if result.source.binary:
            raise CaffememError("optimize writes text prototxt: give it the net definition, not a binary .caffemodel", Location(file=net))
        if result.inplace is not None:
            original = result.inplace.text
        else:
            with open(net, encoding="utf-8", errors="surrogateescape") as handle:  # bytes kept as they are
                original = handle.read()
        write_atomically(output, rewrite_text(original, mem_param(result.phases, result.exclude, target)), errors="surrogateescape")
    if plan_json:
        write_atomically(plan_json, json.dumps(document, indent=1) + "\n")
    if html_file:
        write_html(html_file, result, options)
    if as_json:
        click.echo(json.dumps(document, indent=1))
        return
    from rich.console import Console

    print_optimize(result, Console())
    if output:
        click.echo(f"wrote {output}")

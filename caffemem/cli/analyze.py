"""`caffemem analyze`: every layer's shapes and bytes, as stock Caffe allocates them (on
the card and on the host in GPU mode, the heap in CPU mode)."""

from __future__ import annotations

import json

import click

from caffemem.cli.common import (
    EXIT_CODES_HELP,
    GPUS_OPTION,
    HTML_HELP,
    console,
    output_width,
    distinct_outputs,
    net_options,
    options_from,
    progress,
    reports_errors,
    write_html,
)


@click.command("analyze", epilog=EXIT_CODES_HELP)
@net_options
@GPUS_OPTION
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document instead of tables.")
@click.option("--html", "html_file", type=str, metavar="FILE", help=HTML_HELP)
@click.option("--layers-table", "-v", "--verbose", "layers_table", is_flag=True, default=None, help="Also print every layer's shapes and bytes (default: only when the table fits the terminal).")
@click.option("--top", type=click.IntRange(min=0), default=10, show_default=True, metavar="N", help="How many of the largest layers the summary lists.")
@reports_errors
def analyze_command(net, phase, stages, level, inputs, layers_file, lenient, dtype, batch, engine, as_json, html_file, layers_table, top) -> None:
    """Every layer's shapes and the bytes Caffe will allocate for it, as Caffe builds the net.

    NET is a net (its TRAIN phase if it has a loss, else TEST, unless --phase), a solver
    (its train and test nets, and the whole training process) or a binary .caffemodel.
    --input data=3,224,224 gives a Data layer's C,H,W (the batch is the file's);
    --device cpu gives the CPU run's heap instead of what the card holds.

    \b
    Examples:
      caffemem analyze train_val.prototxt --input data=3,224,224
      caffemem analyze deploy.prototxt --phase TEST --json > memory.json
      caffemem analyze train_val.prototxt --input data=3,224,224 --device cpu
      caffemem analyze solver.prototxt --input data=3,224,224
    """
    from caffemem.api.analyze import analyze as run_analysis
    from caffemem.report.document import to_json
    from caffemem.report.terminal import print_tables

    distinct_outputs(("--html", html_file))
    options = options_from(phase, stages, level, inputs, layers_file, lenient, dtype, batch, engine)
    with progress(f"caffemem: analyzing {net}"):
        analysis = run_analysis(net, options)
    if html_file is not None:
        write_html(html_file, analysis, options)
    if as_json:
        click.echo(json.dumps(to_json(analysis), indent=1))
        return
    print_tables(analysis, console(), layers_table, top, fit_table=output_width() is not None)

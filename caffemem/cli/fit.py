"""The `caffemem fit` command: flags → :func:`caffemem.api.fit.fit` → the answer on stdout.

Attached to the `caffemem` group in :mod:`caffemem.cli`.  Exit codes: 0 a
batch fits, 1 not even batch 1 fits (the message says what batch 1 needs), 2 bad input.
"""

from __future__ import annotations

import json
import sys

import click

from caffemem.cli.common import EXIT_CODES_HELP, EXIT_FINDING, RecomputePolicy, echo_wrapped, net_options, options_from, output_width, progress, reports_errors


@click.command("fit", epilog=EXIT_CODES_HELP)
@net_options
@click.option("--gpu-memory", required=True, metavar="SIZE", help="The card's memory: 12GiB, 11264MiB, 16GB (KiB/MiB/GiB binary, KB/MB/GB decimal).")
@click.option("--reserve", metavar="SIZE", help="Left free for what the figure does not count. Default with --device gpu: room for the kernels CUDA loads lazily, as measured (stated in the output); with --device cpu: 500MiB (context and handles).")
@click.option("--gpus", type=click.IntRange(min=1), default=1, show_default=True, help="GPUs training together: each runs the batch found, so the effective batch multiplies.")
@click.option("--effective-batch", type=click.IntRange(min=1), metavar="B", help="Also give the batch and iter_size that reach B = batch × iter_size × gpus.")
@click.option("--optimized", is_flag=True, help="Count caffemem optimize's shared-storage plan instead of stock Caffe.")
@click.option("--recompute", type=RecomputePolicy(), metavar="[cheap|sqrt]", help="Count caffemem optimize --recompute's plan (implies --optimized): some Forwards run again in Backward.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
@reports_errors
def fit_command(net, phase, stages, level, inputs, layers_file, lenient, dtype, engine, gpu_memory, reserve, gpus, effective_batch, optimized, recompute, as_json) -> None:
    """The largest batch per GPU whose memory fits the card (exact, confirmed at the next batch).

    NET is a net (its TRAIN phase if it trains, else TEST, or --phase) or a solver (the
    whole training process: train net, solver history, test nets).

    \b
    Examples:
      caffemem fit solver.prototxt --gpu-memory 11GiB --input data=3,224,224
      caffemem fit train_val.prototxt --input data=3,224,224 --gpu-memory 16GB \\
        --gpus 4 --effective-batch 256 --optimized
    """
    from caffemem.api.fit import FitRequest
    from caffemem.api.fit import fit as run_fit
    from caffemem.report.fit import fit_json, fit_lines, nothing_fits_message
    from caffemem.units import parse_size

    options = options_from(phase, stages, level, inputs, layers_file, lenient, dtype, None, engine, gpus)
    kept_free = parse_size(reserve, "--reserve") if reserve is not None else None  # None: fit's default margin
    request = FitRequest(parse_size(gpu_memory, "--gpu-memory"), kept_free, gpus, effective_batch, optimized, recompute)
    with progress(f"caffemem: fitting {net}"):
        result = run_fit(net, options, request)
    click.echo(json.dumps(fit_json(result), indent=1) if as_json else "\n".join(fit_lines(result, output_width())))
    if not result.fits:
        echo_wrapped(f"caffemem: {nothing_fits_message(result)}", err=True)
        sys.exit(EXIT_FINDING)


# The batch is what fit searches for: the shared --batch flag does not apply.
fit_command.params[:] = [param for param in fit_command.params if param.name != "batch"]

"""The `caffemem check` command: flags → :mod:`caffemem.api.check` → one report on stdout.

Attached to the `caffemem` group in :mod:`caffemem.cli`.  Exit codes: 0
every net passes, 1 a net is over the budget or grew beyond the tolerance, 2 bad input
(the other files are still checked and reported).
"""

from __future__ import annotations

import os
import sys

import click

from caffemem.cli.common import CAFFE_ROOT_OPTION, EXIT_CODES_HELP, GPUS_OPTION, caffe_root_given, OVERRIDE_INPUT_OPTION, Reported, console, device_flags, device_options, distinct_outputs, given_inputs, output_width, reports_errors
from caffemem.report.check import RENDERERS, render_text
from caffemem.units import DTYPE_BYTES

PROGRESS_MIN_FILES = 8  # fewer files finish before a bar is worth drawing


@click.command("check", epilog=EXIT_CODES_HELP)
@click.argument("paths", nargs=-1, required=True, metavar="PATH...")
@click.option("--budget", metavar="SIZE", help="Fail a net whose footprint is larger (11GiB, 800MB, 4096; KB/MB/GB decimal, KiB/MiB/GiB binary).")
@click.option("--phase", type=click.Choice(["TRAIN", "TEST"], case_sensitive=False), help="Check only this phase (default: every phase each net has).")
@click.option("--stage", "stages", multiple=True, metavar="NAME", help="NetState stage, for every net (repeatable).")
@click.option("--optimized", is_flag=True, help="Measure caffemem's shared-storage plan instead of stock Caffe.")
@click.option("--baseline", metavar="FILE", help="Committed JSON of each net's bytes: growth beyond --tolerance fails.")
@click.option("--update-baseline", is_flag=True, help="Rewrite --baseline with the bytes measured now (growth is accepted).")
@click.option("--tolerance", default="2%", show_default=True, metavar="PCT", help="Growth allowed against the baseline: 2% or 0.02.")
@click.option("--format", "output_format", type=click.Choice(list(RENDERERS)), default="text", show_default=True)
@click.option("--input", "inputs", multiple=True, metavar="NAME=d0,d1,...", help="Shape of a data-layer top, for every file that has one of that name: the axes the file leaves open, _ for one it states (repeatable).")
@OVERRIDE_INPUT_OPTION
@click.option("--config", "config_file", metavar="FILE", help="Per-file inputs, phase, stages and budget (default: caffemem.toml or pyproject.toml's [tool.caffemem] here or above, up to the repository's root).")
@click.option("--layers", "layers_file", metavar="FILE", help="Declarations of custom layer types (see docs/forks.md).")
@CAFFE_ROOT_OPTION
@click.option("--lenient", is_flag=True, help="Skip unknown fields with a warning instead of failing.")
@click.option("--dtype", type=click.Choice(list(DTYPE_BYTES)), default="float32", show_default=True, help="Caffe's Dtype.")
@click.option("--jobs", type=click.IntRange(min=1), default=lambda: min(4, os.cpu_count() or 1), show_default="min(4, CPUs)", help="Files analysed in parallel.")
@device_flags
@click.option("--engine", type=click.Choice(["caffe", "cudnn"]), help="Default engine of the build (default: cudnn with --device gpu, caffe with --device cpu).")
@GPUS_OPTION
@click.option("--report", "reports", multiple=True, metavar="FORMAT:FILE", help="Also write the report in FORMAT to FILE (repeatable), e.g. markdown:$GITHUB_STEP_SUMMARY.")
@reports_errors
def check_command(paths, budget, phase, stages, optimized, baseline, update_baseline, tolerance, output_format, inputs, config_file, layers_file, lenient, dtype, jobs, engine, reports) -> None:
    """Fail when a net outgrows the memory budget or its committed baseline (a CI gate).

    PATHs are files, folders (every *.prototxt below them) and globs; a solver is
    checked as its whole training process; a net in every phase it has (or --phase).
    Write the baseline once with --update-baseline, then commit it.

    \b
    Examples:
      caffemem check models/ --budget 11GiB
      caffemem check models/ --baseline .caffemem-baseline.json --update-baseline
      caffemem check models/ --baseline .caffemem-baseline.json --format github
    """
    from caffemem.api.analyze import Options
    from caffemem.api.config import find_config, read_config
    from caffemem.api.check import (
        CheckSettings,
        Gate,
        Measurement,
        baseline_text,
        collect_files,
        make_report,
        parse_tolerance,
        read_baseline,
        replaced_budgets,
        updated_baseline,
    )
    from caffemem.errors import CaffememError, Location
    from caffemem.prototxt.write import locked, write_output
    from caffemem.units import parse_size

    if update_baseline and not baseline:
        raise click.UsageError("--update-baseline needs --baseline FILE")
    extra_reports = [_report_target(value) for value in reports]
    distinct_outputs(("--baseline", baseline), *(("--report", file) for _, file in extra_reports))
    budget_bytes = parse_size(budget, "--budget") if budget is not None else None
    tolerance_fraction = parse_tolerance(tolerance)
    options = device_options(
        Options(phase=phase.upper() if phase else None, stages=tuple(stages), **given_inputs(inputs), layers_file=layers_file, lenient=lenient, dtype=dtype, engine=engine, caffe_root=caffe_root_given())
    )
    if options.caffe_root is not None:
        from caffemem.api.analyze import fork_tree

        fork_tree(options)  # a tree that cannot be read is the run's bad input, not each file's
    device = options.device
    old = _measured_as(read_baseline(baseline, optimized, missing_ok=update_baseline, device=device), optimized, device) if baseline else None
    targets = collect_files(paths)
    checked = [target for target in targets if isinstance(target, str)]
    config_path = config_file or find_config()
    config = read_config(config_path) if config_path else None
    outcomes = _run_with_progress(targets, CheckSettings(options, optimized, config, budget_bytes), jobs)
    gate = Gate(budget_bytes, old, tolerance_fraction, accept_growth=update_baseline)
    # The baseline is updated under its lock and lands at once: everything that can fail
    # without harm (the reports, staged to land with the run; standard output) goes first.
    wrote = old.path if update_baseline and old is not None and any(isinstance(outcome, Measurement) for outcome in outcomes) else None
    report = make_report(outcomes, gate, optimized, wrote, replaced_budgets(config, checked, budget_bytes))
    for report_format, file in extra_reports:
        write_output(file, RENDERERS[report_format](report).encode("utf-8"), inputs=checked, flag="--report")
    if output_format == "text":
        click.echo(render_text(report, output_width(), color=sys.stdout.isatty()), nl=False)
    else:
        click.echo(RENDERERS[output_format](report), nl=False)
    sys.stdout.flush()
    if wrote is not None:
        try:
            os.makedirs(os.path.dirname(os.path.abspath(wrote)), exist_ok=True)
        except OSError as error:
            raise CaffememError(f"cannot create the baseline's folder: {error.strerror or error}", Location(file=wrote)) from None
        with locked(wrote):  # another run may have updated it since we read it
            current = _measured_as(read_baseline(wrote, optimized, missing_ok=True, device=device), optimized, device)
            write_output(wrote, baseline_text(updated_baseline(current, outcomes, optimized, budget_bytes, device)).encode("utf-8"), inputs=checked, may_replace=wrote, flag="--baseline", now=True)
    raise Reported(report.exit_code)


def _measured_as(baseline, optimized: bool, device: str):
    """The baseline, or an empty one when it was measured the other way (with or without
    --optimized, on another --device): there is nothing to compare with then."""
    from caffemem.api.check import Baseline

    return baseline if baseline.measured_as(optimized, device) else Baseline(baseline.path, optimized, device=device)


def _report_target(value: str) -> tuple[str, str]:
    """`markdown:summary.md` as (format, file)."""
    report_format, sep, file = value.partition(":")
    if not sep or report_format not in RENDERERS or not file:
        raise click.BadParameter(f"'{value}': expected FORMAT:FILE with FORMAT one of {', '.join(RENDERERS)}", param_hint="--report")
    return report_format, file


def _run_with_progress(targets, settings, jobs):
    """A progress bar on stderr while many files are analysed and someone is watching."""
    from caffemem.api.check import check_files

    files = sum(isinstance(target, str) for target in targets)
    if files < PROGRESS_MIN_FILES or not sys.stderr.isatty():
        return check_files(targets, settings, jobs)
    from rich.progress import Progress

    with Progress(console=console(stderr=True), transient=True) as progress:
        task = progress.add_task("caffemem check", total=files)
        return check_files(targets, settings, jobs, lambda: progress.advance(task))

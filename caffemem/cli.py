"""The `caffemem` command: a thin layer over :mod:`caffemem.api`.

Exit codes: 0 success, 2 bad input (one message naming file, line and layer), 3 a bug in
caffemem itself (set CAFFEMEM_DEBUG=1 for the traceback).
"""

from __future__ import annotations

import functools
import gc
import json
import os
import sys
from collections.abc import Callable

import click

from . import __version__
from .errors import CaffememError, one_line

EXIT_BAD_INPUT = 2
EXIT_INTERNAL = 3


def _reports_errors(command: Callable) -> Callable:
    """Turn CaffememError into one line on stderr and exit code 2; never a traceback."""

    @functools.wraps(command)
    def run(*args, **kwargs):
        try:
            return command(*args, **kwargs)
        except CaffememError as error:
            click.echo(f"caffemem: error: {error}", err=True)
            sys.exit(EXIT_BAD_INPUT)
        except (click.exceptions.Exit, click.ClickException, SystemExit, KeyboardInterrupt):
            raise
        except RecursionError:
            click.echo("caffemem: error: the input nests too deeply to be a Caffe definition", err=True)
            sys.exit(EXIT_BAD_INPUT)
        except Exception as error:  # a bug: say so in one line
            if os.environ.get("CAFFEMEM_DEBUG"):
                raise
            click.echo(f"caffemem: internal error: {type(error).__name__}: {one_line(str(error))} (set CAFFEMEM_DEBUG=1 for details)", err=True)
            sys.exit(EXIT_INTERNAL)

    return run


def net_options(command: Callable) -> Callable:
    """The flags every command that builds a net shares."""
    decorators = [
        click.argument("net", type=str),  # the loader reports a missing file or a folder in one line
        click.option("--phase", type=click.Choice(["TRAIN", "TEST"], case_sensitive=False), help="Phase to build (default: TRAIN if the net has a loss, else TEST)."),
        click.option("--stage", "stages", multiple=True, metavar="NAME", help="NetState stage (repeatable)."),
        click.option("--level", type=click.IntRange(-(2**31), 2**31 - 1), help="NetState level."),  # an int32 in NetState
        click.option("--input", "inputs", multiple=True, metavar="NAME=d0,d1,...", help="Shape of a data-layer top (repeatable)."),
        click.option("--layers", "layers_file", type=str, metavar="FILE", help="Declarations of custom layer types (see README)."),
        click.option("--lenient", is_flag=True, help="Skip unknown fields with a warning instead of failing."),
        click.option("--dtype", type=click.Choice(["float32", "float16", "float64"]), default="float32", show_default=True, help="Caffe's Dtype."),
        click.option("--batch", type=click.IntRange(min=1), help="Rescale the batch axis of every data layer."),
        click.option("--engine", type=click.Choice(["caffe", "cudnn"]), default="caffe", show_default=True, help="Default engine of the build (cuDNN figures are estimates)."),
    ]
    for decorate in reversed(decorators):
        command = decorate(command)
    return command


def _options(phase, stages, level, inputs, layers_file, lenient, dtype, batch, engine):
    from .api import Options, parse_inputs

    return Options(
        phase=phase.upper() if phase else None,
        stages=tuple(stages),
        level=level,
        inputs=parse_inputs(inputs),
        layers_file=layers_file,
        lenient=lenient,
        dtype=dtype,
        batch=batch,
        engine=engine,
    )


HTML_HELP = "Also write a self-contained HTML report here (memory timeline, Gantt chart of storage, per-layer table)."


def _write_html(path: str, subject, options) -> None:
    from .passes.html import html_report
    from .passes.rewrite import write_atomically

    write_atomically(path, html_report(subject, options))
    click.echo(f"wrote {path}", err=True)  # stderr: --json keeps stdout one document


class _OneLineUsageError(click.UsageError):
    """A usage error (a bad flag value) shown like every other bad input: one line, exit 2."""

    def show(self, file=None) -> None:
        command = f" (see '{self.ctx.command_path} --help')" if self.ctx else ""
        click.echo(f"caffemem: error: {one_line(self.format_message())}{command}", file=file, err=file is None)


class _CaffememGroup(click.Group):
    """click's own usage errors come out of make_context (the group's flags) and invoke
    (the command's): both are reworded as one line."""

    def make_context(self, info_name, args, parent=None, **extra):
        try:
            return super().make_context(info_name, args, parent, **extra)
        except click.UsageError as error:
            raise _one_line_usage(error) from None

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except click.UsageError as error:
            raise _one_line_usage(error) from None


# `caffemem` alone prints the help (click raises it as a usage error): keep that as it is.
_HELP_WITHOUT_ARGUMENTS = getattr(click.exceptions, "NoArgsIsHelpError", ())


def _one_line_usage(error: click.UsageError) -> click.UsageError:
    if isinstance(error, (_OneLineUsageError, _HELP_WITHOUT_ARGUMENTS)):
        return error
    return _OneLineUsageError(error.format_message(), error.ctx)


@click.group(cls=_CaffememGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="caffemem")
def main() -> None:
    """Profile and optimize the GPU memory of Caffe networks, statically."""
    # One short run that builds millions of small objects and almost no cycles: the cyclic
    # collector would rescan them over and over (a third of the time on a deep net).
    gc.disable()


@main.command()
@net_options
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document instead of tables.")
@click.option("--html", "html_file", type=str, metavar="FILE", help=HTML_HELP)
@_reports_errors
def analyze(net, phase, stages, level, inputs, layers_file, lenient, dtype, batch, engine, as_json, html_file) -> None:
    """Every layer's shapes and the bytes Caffe will allocate for it, as Caffe builds the net."""
    from .api import analyze as run_analysis
    from .passes.render import print_tables, to_json

    options = _options(phase, stages, level, inputs, layers_file, lenient, dtype, batch, engine)
    analysis = run_analysis(net, options)
    if html_file:
        _write_html(html_file, analysis, options)
    if as_json:
        click.echo(json.dumps(to_json(analysis), indent=1))
        return
    from rich.console import Console

    print_tables(analysis, Console())


@main.command()
@net_options
@click.option("-o", "--output", type=str, metavar="OUT", help="Write the prototxt with mem_param here.")
@click.option("--strategy", type=click.Choice(["auto", "fork", "best-fit", "first-fit", "exact"]), default="auto", show_default=True)
@click.option("--exclude-blob", "exclude", multiple=True, metavar="NAME", help="Keep this blob's storage private (repeatable).")
@click.option("--share-buffers", is_flag=True, help="Let scratch layer buffers (im2col) share slots too.")
@click.option("--inplace", is_flag=True, help="First run layers in place (top renamed to its bottom) where stock Caffe gives the same result.")
@click.option("--target", type=click.Choice(["caffemem", "fork"]), default="caffemem", show_default=True, help="caffemem: mem_param with the slot table; fork: only what the fork's schema accepts.")
@click.option("--plan-json", type=str, metavar="FILE", help="Also write the plan as JSON (for `caffemem verify`).")
@click.option("--in-place-file", is_flag=True, help="Allow OUT to be the input file itself.")
@click.option("--force", is_flag=True, help="Plan a file that already has a mem_param.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document instead of tables.")
@click.option("--html", "html_file", type=str, metavar="FILE", help=HTML_HELP)
@_reports_errors
def optimize(net, phase, stages, level, inputs, layers_file, lenient, dtype, batch, engine, output, strategy, exclude, share_buffers, inplace, target, plan_json, in_place_file, force, as_json, html_file) -> None:
    """Plan shared storage for the net's blobs and write it as mem_param."""
    from .errors import CaffememError, Location
    from .optimizer import OptimizeSettings
    from .optimizer import optimize as run_optimize
    from .passes.render import optimize_json, print_optimize
    from .passes.rewrite import mem_param, rewrite_text, write_atomically

    if output and os.path.exists(output) and os.path.realpath(output) == os.path.realpath(net) and not in_place_file:
        raise CaffememError("-o names the input file; pass --in-place-file to overwrite it", Location(file=net))
    options = _options(phase, stages, level, inputs, layers_file, lenient, dtype, batch, engine)
    strategy_name = "fork" if strategy == "fork" else strategy
    result = run_optimize(net, options, OptimizeSettings(strategy_name, tuple(exclude), share_buffers, inplace), force=force)
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
        _write_html(html_file, result, options)
    if as_json:
        click.echo(json.dumps(document, indent=1))
        return
    from rich.console import Console

    print_optimize(result, Console())
    if output:
        click.echo(f"wrote {output}")


@main.command()
@net_options
@click.argument("plan", type=str)
@_reports_errors
def verify(net, plan, phase, stages, level, inputs, layers_file, lenient, dtype, batch, engine) -> None:
    """Check a plan (JSON from `optimize --json`/`--plan-json`) against the net's run."""
    from .api import analyze as run_analysis
    from .api import spec_table
    from .passes.schedule import build_schedule
    from .passes.verify import read_plan, verify_plan

    failures = 0
    for run_phase, plan_data in read_plan(plan, phase):
        options = _options(run_phase, stages, level, inputs, layers_file, lenient, dtype, batch, engine)
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
        sys.exit(1)


from . import check_command  # noqa: E402,F401  (registers `caffemem check`)
from . import fit_command  # noqa: E402,F401  (registers `caffemem fit`)


if __name__ == "__main__":  # pragma: no cover
    main()

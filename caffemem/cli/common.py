"""What every command shares: the net flags, one-line errors and the exit codes.

Exit codes: 0 success, 1 a finding (over budget, unsafe plan, nothing fits), 2 bad input
(one message naming file, line and layer), 3 a bug in caffemem itself (set
CAFFEMEM_DEBUG=1 for the traceback).
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable

import click

from caffemem.errors import CaffememError, one_line

EXIT_FINDING = 1
EXIT_BAD_INPUT = 2
EXIT_INTERNAL = 3


def reports_errors(command: Callable) -> Callable:
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


def options_from(phase, stages, level, inputs, layers_file, lenient, dtype, batch, engine):
    from caffemem.api.analyze import Options, parse_inputs

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


def write_html(path: str, subject, options) -> None:
    from caffemem.prototxt.write import write_atomically
    from caffemem.report.html import html_report

    write_atomically(path, html_report(subject, options))
    click.echo(f"wrote {path}", err=True)  # stderr: --json keeps stdout one document


class _OneLineUsageError(click.UsageError):
    """A usage error (a bad flag value) shown like every other bad input: one line, exit 2."""

    def show(self, file=None) -> None:
        command = f" (see '{self.ctx.command_path} --help')" if self.ctx else ""
        click.echo(f"caffemem: error: {one_line(self.format_message())}{command}", file=file, err=file is None)


class CaffememGroup(click.Group):
    """click's own usage errors come out of make_context (the group's flags) and invoke
    (the command's): both are reworded as one line."""

    def make_context(self, info_name, args, parent=None, **extra):
        try:
            return super().make_context(info_name, args, parent, **extra)
        except click.UsageError as error:
            raise one_line_usage(error) from None

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except click.UsageError as error:
            raise one_line_usage(error) from None


# `caffemem` alone prints the help (click raises it as a usage error): keep that as it is.
_HELP_WITHOUT_ARGUMENTS = getattr(click.exceptions, "NoArgsIsHelpError", ())


def one_line_usage(error: click.UsageError) -> click.UsageError:
    if isinstance(error, (_OneLineUsageError, _HELP_WITHOUT_ARGUMENTS)):
        return error
    return _OneLineUsageError(error.format_message(), error.ctx)

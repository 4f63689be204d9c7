"""What every command shares: the net flags, one-line errors and the exit codes.

Exit codes: 0 success, 1 a finding (over budget, unsafe plan, nothing fits), 2 bad input
or environment (one message naming file, line and layer), 130 interrupted (Ctrl-C), 3 a
bug in caffemem itself (set CAFFEMEM_DEBUG=1 for the traceback).  A closed standard
output (``caffemem analyze NET | head``) ends the run quietly with 0.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
from collections.abc import Callable, Iterator

import click

from caffemem.errors import CaffememError, one_line

EXIT_FINDING = 1
EXIT_BAD_INPUT = 2
EXIT_INTERNAL = 3
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as shells report it

EXIT_CODES_HELP = "Exit codes: 0 ok, 1 a finding (over budget, unsafe plan, nothing fits), 2 bad input or environment, 130 interrupted."


def reports_errors(command: Callable) -> Callable:
    """Turn CaffememError into one line on stderr and exit code 2; never a traceback."""

    @functools.wraps(command)
    def run(*args, **kwargs):
        try:
            return command(*args, **kwargs)
        except CaffememError as error:
            click.echo(f"caffemem: error: {error}", err=True)
            sys.exit(EXIT_BAD_INPUT)
        except (click.exceptions.Exit, click.ClickException, SystemExit):
            raise
        except KeyboardInterrupt:
            _quiet_stdout()  # what was printed so far is all; no traceback
            click.echo("caffemem: interrupted", err=True)
            sys.exit(EXIT_INTERRUPTED)
        except BrokenPipeError:  # `| head` closed the pipe: the reader has what it wanted
            _quiet_stdout()
            sys.exit(0)
        except MemoryError:
            click.echo("caffemem: error: the input needs more memory than this machine has (is it a real net definition?)", err=True)
            sys.exit(EXIT_BAD_INPUT)
        except RecursionError:
            click.echo("caffemem: error: the input nests too deeply to be a Caffe definition", err=True)
            sys.exit(EXIT_BAD_INPUT)
        except Exception as error:  # a bug: say so in one line
            if os.environ.get("CAFFEMEM_DEBUG"):
                raise
            click.echo(f"caffemem: internal error: {type(error).__name__}: {one_line(str(error))} (set CAFFEMEM_DEBUG=1 for details)", err=True)
            sys.exit(EXIT_INTERNAL)

    return run


def _quiet_stdout() -> None:
    """Point standard output at /dev/null, so the interpreter's last flush of a closed
    pipe or an interrupted write cannot print a traceback."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass


def console(stderr: bool = False):
    """A rich Console whose closed pipe ends the run with 0, like any other write
    (rich's own handler exits with 1)."""
    from rich.console import Console

    class _Console(Console):
        def on_broken_pipe(self) -> None:
            raise BrokenPipeError

    return _Console(stderr=stderr)


def _remember_max_input(ctx: click.Context, _param: click.Parameter, value: str | None) -> None:
    if value is not None:
        from caffemem.units import parse_size

        try:
            ctx.meta["caffemem.max_input_bytes"] = parse_size(value, "--max-input-size")
        except CaffememError as error:
            raise click.BadParameter(error.message) from None


# Read by options_from through the context, so no command lists it among its parameters.
MAX_INPUT_SIZE_OPTION = click.option(
    "--max-input-size",
    metavar="SIZE",
    expose_value=False,
    callback=_remember_max_input,
    help="Refuse text inputs larger than this, unread (default 64MiB: far above any real prototxt).",
)


def _remember(key: str) -> Callable:
    def callback(ctx: click.Context, _param: click.Parameter, value) -> None:
        if value is not None:
            ctx.meta[f"caffemem.{key}"] = value

    return callback


def device_flags(command: Callable) -> Callable:
    """--device and --context-mib, read by device_options through the context."""
    command = click.option(
        "--context-mib",
        type=click.IntRange(min=0),
        metavar="MIB",
        expose_value=False,
        callback=_remember("context_mib"),
        help="GPU mode: the CUDA context and libraries per card, as measured on yours (default: a published 300 MiB, see README).",
    )(command)
    return click.option(
        "--device",
        type=click.Choice(["gpu", "cpu"]),
        envvar="CAFFEMEM_DEVICE",
        show_envvar=True,
        default="gpu",
        show_default=True,
        expose_value=False,
        callback=_remember("device"),
        help="Caffe's mode: gpu (bytes on the card and on the host, the default) or cpu (the heap of a CPU run, checked against real Caffe).",
    )(command)


# Read by device_options through the context (fit has its own --gpus, which also sets it).
GPUS_OPTION = click.option(
    "--gpus",
    type=click.IntRange(min=1),
    expose_value=False,
    callback=_remember("gpus"),
    help="GPU mode: GPUs training together (each holds the figure; the total multiplies).",
)


def device_options(options, gpus: int | None = None):
    """``options`` with the device flags of the current command applied."""
    from dataclasses import replace

    context = click.get_current_context(silent=True)
    meta = context.meta if context else {}
    context_mib = meta.get("caffemem.context_mib")
    return replace(
        options,
        device=meta.get("caffemem.device", "gpu"),
        gpus=gpus or meta.get("caffemem.gpus", 1),
        context_bytes=None if context_mib is None else context_mib * 1024 * 1024,
    )


@contextlib.contextmanager
def progress(message: str) -> Iterator[None]:
    """A spinner on stderr while a long run works, only where someone watches (stderr
    is a terminal): standard output stays the report, a pipe or a CI log stays clean."""
    if not sys.stderr.isatty():
        yield
        return
    with console(stderr=True).status(message):
        yield


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
        click.option("--engine", type=click.Choice(["caffe", "cudnn"]), help="Default engine of the build (default: cudnn with --device gpu, caffe with --device cpu)."),
        device_flags,
        MAX_INPUT_SIZE_OPTION,
    ]
    for decorate in reversed(decorators):
        command = decorate(command)
    return command


def options_from(phase, stages, level, inputs, layers_file, lenient, dtype, batch, engine, gpus=None):
    from caffemem.api.analyze import Options, parse_inputs
    from caffemem.prototxt.read import MAX_TEXT_BYTES

    context = click.get_current_context(silent=True)
    options = Options(
        max_input_bytes=context.meta.get("caffemem.max_input_bytes", MAX_TEXT_BYTES) if context else MAX_TEXT_BYTES,
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
    return device_options(options, gpus)


HTML_HELP = "Also write a self-contained HTML report here (memory timeline, Gantt chart of storage, per-layer table)."


def input_files(subject, options) -> list[str]:
    """Every file a run read (the net or solver, a solver's nets, the --layers file): no
    output may overwrite one of them."""
    files = [subject.path] + [net.file for net in getattr(subject, "nets", ())]
    return files + ([options.layers_file] if options.layers_file else [])


def write_html(path: str, subject, options, settings=None) -> None:
    """``settings``: optimize's flags, named on the page with the options."""
    from caffemem.prototxt.write import write_output
    from caffemem.report.html import html_report

    write_output(path, html_report(subject, options, settings).encode("utf-8"), inputs=input_files(subject, options), flag="--html")
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

"""What every command shares: the net flags, one-line errors and the exit codes.

Exit codes: 0 success, 1 a finding (over budget, unsafe plan, nothing fits), 2 bad input
or environment (one message naming file, line and layer), 130 interrupted (Ctrl-C), 3 a
bug in caffemem itself (set CAFFEMEM_DEBUG=1 for the traceback).  A closed standard
output (``caffemem analyze NET | head``) ends the run quietly with 0.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import signal
import sys
from collections.abc import Callable, Iterator

import click

from caffemem.errors import CaffememError, UnsafePlan, one_line

EXIT_FINDING = 1
EXIT_BAD_INPUT = 2
EXIT_INTERNAL = 3
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as shells report it

EXIT_CODES_HELP = "Exit codes: 0 ok, 1 a finding (over budget, unsafe plan, nothing fits), 2 bad input or environment, 130 interrupted."


def reports_errors(command: Callable) -> Callable:
    """Run a command under the contract: exit 0, 1, 2 or 130 with at most one line on
    stderr, never a traceback, and no output file before the command has succeeded.

    Outputs are staged (prototxt.write.staged_outputs): each waits, complete and fsynced,
    in its temporary file, and all are renamed into place only once the command has
    finished with 0, 1 or a code it reported (Reported) and its report has reached
    standard output.  A full disk or a
    closed descriptor behind standard output is then exit 2 with nothing written; Ctrl-C
    anywhere is exit 130 with nothing written."""

    @functools.wraps(command)
    def run(*args, **kwargs):
        from caffemem.prototxt.read import forget_reads
        from caffemem.prototxt.write import staged_outputs

        raise_on_interrupt()
        forget_reads()  # no output may land on a file this command reads
        try:
            with staged_outputs() as commit:
                try:
                    command(*args, **kwargs)
                except SystemExit as done:
                    if isinstance(done, Reported) or done.code in (None, 0, EXIT_FINDING):  # a finding still writes its reports
                        _land(commit)
                    raise
                except BrokenPipeError:  # the reader has what it wanted: the run has succeeded
                    ignore_late_interrupts()
                    commit()
                    raise
                _land(commit)
        except UnsafePlan as error:
            say(f"caffemem: {error}")
            sys.exit(EXIT_FINDING)
        except CaffememError as error:
            skeleton = getattr(error, "skeleton", "")  # NoShapeRule: the --layers start the message points to
            if skeleton:
                with contextlib.suppress(OSError, ValueError):
                    click.echo(skeleton, nl=False)
            say(f"caffemem: error: {error}")
            sys.exit(EXIT_BAD_INPUT)
        except (click.exceptions.Exit, click.ClickException, SystemExit):
            raise
        except KeyboardInterrupt:
            interrupted()
        except Terminated as ended:
            _quiet_stdout()
            say("caffemem: terminated")
            sys.exit(128 + ended.signum)
        except BrokenPipeError:  # `| head` closed the pipe: the reader has what it wanted
            _quiet_stdout()
            sys.exit(0)
        except MemoryError:
            say("caffemem: error: the input needs more memory than this machine has (is it a real net definition?)")
            sys.exit(EXIT_BAD_INPUT)
        except RecursionError:
            say("caffemem: error: the input nests too deeply to be a Caffe definition")
            sys.exit(EXIT_BAD_INPUT)
        except OSError as error:  # the environment: a deleted working folder, a failing disk
            say(f"caffemem: error: {environment_problem(error)}")
            sys.exit(EXIT_BAD_INPUT)
        except Exception as error:  # a bug: say so in one line
            if os.environ.get("CAFFEMEM_DEBUG"):
                raise
            say(f"caffemem: internal error: {type(error).__name__}: {one_line(str(error))} (set CAFFEMEM_DEBUG=1 for details)")
            sys.exit(EXIT_INTERNAL)

    return run


class Reported(SystemExit):
    """The command ran to its end and reported, with this exit code whatever it is
    (`check` exits 2 when one of its files is bad input): its outputs land."""


def _land(commit: Callable[[], None]) -> None:
    """The report first (flushed: a full disk behind standard output shows here), then the
    staged outputs."""
    try:
        if sys.stdout is not None:
            sys.stdout.flush()
    except BrokenPipeError:
        ignore_late_interrupts()
        commit()
        raise
    except OSError as error:
        _quiet_stdout()
        raise CaffememError(f"cannot write to standard output: {error.strerror or error}; nothing written") from None
    ignore_late_interrupts()  # the run has succeeded: what it wrote lands whatever comes
    commit()


_WRITE_ERRORS = {errno.ENOSPC, errno.EBADF, errno.EIO, errno.EDQUOT, errno.EFBIG}


def environment_problem(error: OSError) -> str:
    """An OSError no pass expected, worded for the user (the file it names, if any)."""
    try:
        os.getcwd()
    except OSError:
        return "the working directory no longer exists (deleted?): cd to a folder that exists, or give absolute paths"
    if error.filename is None and error.errno in _WRITE_ERRORS:
        # Every file caffemem opens is named in its errors: this was a report's write to
        # standard output (a full disk, a descriptor closed or opened read-only).
        _quiet_stdout()
        return f"cannot write to standard output: {error.strerror or error}"
    where = f"{one_line(os.fsdecode(error.filename))}: " if error.filename is not None else ""
    return f"{where}{error.strerror or error}"


def say(line: str) -> None:
    """A line on stderr as the run ends (its error, or what it wrote): one line whatever
    the width, the contract scripts and CI logs read (`caffemem: error: FILE:LINE: ...`;
    a terminal wraps it for the eye); a closed or full stderr only loses the line, the
    exit code stays.  A Ctrl-C now cannot add a line."""
    ignore_late_interrupts()
    with contextlib.suppress(OSError, ValueError):
        click.echo(one_line(line), err=True)  # a path or a name in it cannot add a line or an escape


def interrupted() -> None:
    """Ctrl-C: what was printed so far is all; one line, exit 130, no traceback."""
    _quiet_stdout()
    say("caffemem: interrupted")
    sys.exit(EXIT_INTERRUPTED)


def raise_on_interrupt() -> None:
    """From here on Ctrl-C raises KeyboardInterrupt, and SIGTERM or SIGHUP (unless
    ignored, as under nohup) raise Terminated, so that each command's cleanup runs: a
    staged output's temporary file is removed (issue 31: SIGTERM as `check` ended left
    ``.r.json.XXXXXXXX.tmp`` beside its report).  The entry point, caffemem/__main__.py,
    exits at once while nothing has begun."""
    import signal

    if getattr(signal.getsignal(signal.SIGINT), "caffemem_startup", False):
        signal.signal(signal.SIGINT, signal.default_int_handler)
        _ENTRY["owns_the_process"] = True
        for number in TERMINATING_SIGNALS:
            if signal.getsignal(number) == signal.SIG_DFL:
                signal.signal(number, _terminate)
        sys.unraisablehook = functools.partial(redeliver_signals, sys.unraisablehook)


def redeliver_signals(otherwise, unraisable) -> None:
    """sys.unraisablehook: Ctrl-C or SIGTERM that Python raised inside a weakref callback
    or a ``__del__`` (importlib's module-lock callback, say) cannot propagate from there:
    Python would print "Exception ignored ... KeyboardInterrupt" and drop it, and the run
    would go on as if never interrupted (the hostile campaign's case 3959).  The signal is
    sent again, to be raised where the command's own code runs; anything else goes to
    ``otherwise``, the hook before ours."""
    error = unraisable.exc_value
    if isinstance(error, KeyboardInterrupt):
        signal.raise_signal(signal.SIGINT)
    elif isinstance(error, Terminated):
        signal.raise_signal(error.signum)
    else:
        otherwise(unraisable)


TERMINATING_SIGNALS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name))


class Terminated(BaseException):
    """SIGTERM or SIGHUP during a command: cleaned up like Ctrl-C, then exit 128 + the
    signal's number (143 for SIGTERM), as a shell reports a process it ended."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _terminate(signum: int, _frame: object) -> None:
    raise Terminated(signum)


_ENTRY = {"owns_the_process": False}  # run from caffemem/__main__.py, not from a test or a program


def ignore_late_interrupts() -> None:
    """The command has ended (its exit code is decided): a Ctrl-C now, while the
    interpreter flushes and exits, is ignored rather than turned into a traceback."""
    if _ENTRY["owns_the_process"]:
        import signal

        signal.signal(signal.SIGINT, signal.SIG_IGN)
        for number in TERMINATING_SIGNALS:  # nothing is left to clean up: end as by default
            if signal.getsignal(number) is _terminate:
                signal.signal(number, signal.SIG_DFL)


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
    (rich's own handler exits with 1), that prints a name like ``:smile:`` as written
    (no emoji codes; markup in names is escaped by report.terminal.markup), and whose
    text fits its width (report/wrap.py: the terminal's, else $COLUMNS, else 80)."""
    from caffemem.report.wrap import FittingConsole

    class _Console(FittingConsole):
        def on_broken_pipe(self) -> None:
            raise BrokenPipeError

    return _Console(stderr=stderr, emoji=False)


def output_width(stderr: bool = False) -> int | None:
    """The width a command's plain lines fit: the terminal's, else $COLUMNS (issue 34:
    piped, `check` took 160 columns and COLUMNS=80 was ignored); None when neither says
    one (piped with no COLUMNS: a line a fact, for grep and a CI log)."""
    stream = sys.stderr if stderr else sys.stdout
    if stream is not None and stream.isatty():
        return console(stderr).width
    columns = os.environ.get("COLUMNS", "")
    return int(columns) if columns.isdigit() and int(columns) > 0 else None


def echo_wrapped(line: str, err: bool = False) -> None:
    """One line of a report, as errors.one_line shows it, in lines that fit the output
    (continuation lines indented two more than the line)."""
    from caffemem.report.wrap import wrapped

    width = output_width(err)
    for part in [one_line(line)] if width is None else wrapped(one_line(line), width):
        click.echo(part, err=err)


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


# Read by given_inputs through the context, so no command lists it among its parameters.
OVERRIDE_INPUT_OPTION = click.option(
    "--override-input",
    multiple=True,
    metavar="NAME=d0,d1,...",
    expose_value=False,
    callback=lambda ctx, _param, value: ctx.meta.__setitem__("caffemem.override_inputs", tuple(value)),
    help="Shape of a data-layer top that replaces what the file states (reported as an override; repeatable).",
)


def given_inputs(inputs: tuple[str, ...]) -> dict:
    """Options' ``inputs`` and ``overrides`` from --input and --override-input."""
    from caffemem.api.analyze import parse_inputs

    context = click.get_current_context(silent=True)
    overrides = context.meta.get("caffemem.override_inputs", ()) if context else ()
    return {"inputs": parse_inputs(inputs, overrides), "overrides": frozenset(value.partition("=")[0].strip() for value in overrides)}


def _remember(key: str) -> Callable:
    def callback(ctx: click.Context, _param: click.Parameter, value) -> None:
        if value is not None:
            ctx.meta[f"caffemem.{key}"] = value

    return callback


def _remember_caffe_root(ctx: click.Context, _param: click.Parameter, value: str | None) -> None:
    if value:  # an empty $CAFFE_ROOT names no tree
        ctx.meta["caffemem.caffe_root"] = value


# Read by options_from (and check) through the context, so no command lists it among its parameters.
CAFFE_ROOT_OPTION = click.option(
    "--caffe-root",
    metavar="DIR",
    envvar="CAFFE_ROOT",
    show_envvar=True,
    expose_value=False,
    callback=_remember_caffe_root,
    help="Your Caffe fork's source tree: its src/caffe/proto/caffe.proto is read with caffemem's schema, and the layer types it registers tell a fork's type from a typo (see docs/forks.md).",
)


def caffe_root_given() -> str | None:
    """--caffe-root DIR, else $CAFFE_ROOT, of the current command."""
    context = click.get_current_context(silent=True)
    return context.meta.get("caffemem.caffe_root") if context else None


def device_flags(command: Callable) -> Callable:
    """--device, --context-mib and --card, read by device_options through the context."""
    command = click.option(
        "--cuda-stack-bytes",
        type=click.Choice(["1024", "512", "256", "128"]),
        expose_value=False,
        callback=_remember("stack_bytes"),
        help="GPU mode: the CUDA stack limit you run a caffemem-patched Caffe with (CAFFEMEM_CUDA_STACK_BYTES): its plans' figures count the context measured at that limit (an H200: 594.8, 463, 397, 363 MiB with cuBLAS); stock Caffe's stay at the driver's 1 KiB.",
    )(command)
    command = click.option(
        "--card",
        metavar="FILE",
        expose_value=False,
        callback=_remember("card"),
        help="GPU mode: the per-process constants (context, cuBLAS, cuDNN handle, stream) of your card, from a GPU-kit result run on it (its summary.json, or benchmarks/gpu_measured.py --json); --context-mib still overrides the context (see docs/gpu-mode.md).",
    )(command)
    command = click.option(
        "--context-mib",
        type=click.IntRange(min=0),
        metavar="MIB",
        expose_value=False,
        callback=_remember("context_mib"),
        help="GPU mode: the CUDA context with the main thread's cuBLAS and cuRAND per card, as measured on yours (default: 594.8 MiB, measured on an H100; see docs/gpu-mode.md).",
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


class RecomputePolicy(click.ParamType):
    """``--recompute``: cheap, sqrt or budget=SIZE (plan/recompute.py), listed in --help."""

    name = "recompute"

    def get_metavar(self, param, *args) -> str:
        return "[cheap|sqrt|budget=SIZE]"

    def convert(self, value, param, ctx):
        from caffemem.plan.recompute import Policy, parse_policy

        if isinstance(value, Policy):
            return value
        try:
            return parse_policy(value)
        except CaffememError as error:
            self.fail(error.message, param, ctx)


RECOMPUTE_HELP = (
    "Run some layers' Forward again inside Backward instead of keeping their outputs (TRAIN): cheap (MXNet's mirror: "
    "cheap layers), sqrt (Chen et al.'s checkpoints), budget=SIZE (the least recomputation that fits SIZE); "
    "implies --share-buffers; the patched Caffe runs it (see docs/recompute.md)."
)


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
    card, stack = meta.get("caffemem.card"), meta.get("caffemem.stack_bytes")
    if card is not None:
        from caffemem.passes.card import read_card

        card = read_card(card)
    if stack is not None:
        from caffemem.passes.device import CardConstants

        card = replace(card or CardConstants(), stack_bytes=int(stack))
    return replace(
        options,
        device=meta.get("caffemem.device", "gpu"),
        gpus=gpus or meta.get("caffemem.gpus", 1),
        context_bytes=None if context_mib is None else context_mib * 1024 * 1024,
        card=card,
    )


@contextlib.contextmanager
def progress(message: str) -> Iterator[None]:
    """A spinner on stderr while a long run works, only where someone watches (stderr
    is a terminal): standard output stays the report, a pipe or a CI log stays clean."""
    if not sys.stderr.isatty():
        yield
        return
    from rich.text import Text

    with console(stderr=True).status(Text(one_line(message))):  # a path's "[/]" is text, not markup
        yield


def net_options(command: Callable) -> Callable:
    """The flags every command that builds a net shares."""
    decorators = [
        click.argument("net", type=str),  # the loader reports a missing file or a folder in one line
        click.option("--phase", type=click.Choice(["TRAIN", "TEST"], case_sensitive=False), help="Phase to build (default: TRAIN if the net has a loss, else TEST)."),
        click.option("--stage", "stages", multiple=True, metavar="NAME", help="NetState stage (repeatable)."),
        click.option("--level", type=click.IntRange(-(2**31), 2**31 - 1), help="NetState level."),  # an int32 in NetState
        click.option("--input", "inputs", multiple=True, metavar="NAME=d0,d1,...", help="Shape of a data-layer top: the axes the file leaves open, _ for one it states (repeatable)."),
        OVERRIDE_INPUT_OPTION,
        click.option("--layers", "layers_file", type=str, metavar="FILE", help="Declarations of custom layer types (see docs/forks.md)."),
        click.option("--lenient", is_flag=True, help="Skip unknown fields with a warning instead of failing."),
        click.option("--dtype", type=click.Choice(["float32", "float16", "float64"]), default="float32", show_default=True, help="Caffe's Dtype."),
        click.option("--batch", type=click.IntRange(min=1), help="Rescale the batch axis of every data layer."),
        click.option("--engine", type=click.Choice(["caffe", "cudnn"]), help="Default engine of the build (default: cudnn with --device gpu, caffe with --device cpu)."),
        device_flags,
        CAFFE_ROOT_OPTION,
        MAX_INPUT_SIZE_OPTION,
    ]
    for decorate in reversed(decorators):
        command = decorate(command)
    return command


def options_from(phase, stages, level, inputs, layers_file, lenient, dtype, batch, engine, gpus=None):
    from caffemem.api.analyze import Options
    from caffemem.prototxt.read import MAX_TEXT_BYTES

    context = click.get_current_context(silent=True)
    options = Options(
        max_input_bytes=context.meta.get("caffemem.max_input_bytes", MAX_TEXT_BYTES) if context else MAX_TEXT_BYTES,
        phase=phase.upper() if phase else None,
        stages=tuple(stages),
        level=level,
        **given_inputs(inputs),
        layers_file=layers_file,
        lenient=lenient,
        dtype=dtype,
        batch=batch,
        engine=engine,
        caffe_root=caffe_root_given(),
    )
    return device_options(options, gpus)


HTML_HELP = "Also write a self-contained HTML report here (memory timeline, Gantt chart of storage, per-layer table)."


def input_files(subject, options) -> list[str]:
    """Every file a run read (the net or solver, a solver's nets, the --layers file): no
    output may overwrite one of them."""
    files = [subject.path] + [net.file for net in getattr(subject, "nets", ())]
    return files + ([options.layers_file] if options.layers_file else [])


def distinct_outputs(*named: tuple[str, str | None]) -> None:
    """Refuse, before any work, outputs that cannot all land: an empty name (it would
    write nothing and say nothing), and two flags naming one file or both standard output
    (the later would silently replace the earlier).  ``named``: (flag, path) pairs, None
    for a flag not given.  Symlinks and hard links are followed, as for inputs."""
    from caffemem.errors import Location
    from caffemem.prototxt.write import STDOUT

    seen: list[tuple[str, str]] = []
    for flag, path in named:
        if path is None:
            continue
        if not path:
            raise CaffememError(f"{flag} names no file (an empty name); give a file name, or - for standard output")
        for other_flag, other in seen:
            if path == other == STDOUT:
                raise CaffememError(f"{other_flag} - and {flag} - would both write to standard output")
            if STDOUT not in (path, other) and _same_file(path, other):
                raise CaffememError(f"{flag} names the same file as {other_flag} ({other}); give each output its own file", Location(file=path))
        seen.append((flag, path))


def _same_file(path: str, other: str) -> bool:
    if os.path.realpath(path) == os.path.realpath(other):
        return True
    try:
        return os.path.samefile(path, other)  # hard links
    except OSError:  # one of them does not exist yet
        return False


def write_html(path: str, subject, options, settings=None) -> None:
    """``settings``: optimize's flags, named on the page with the options."""
    from caffemem.prototxt.write import after_landing, write_output
    from caffemem.report.html import html_report

    write_output(path, html_report(subject, options, settings).encode("utf-8"), inputs=input_files(subject, options), flag="--html")
    after_landing(lambda: say(f"wrote {path}"))  # stderr: --json keeps stdout one document


class _OneLineUsageError(click.UsageError):
    """A usage error (a bad flag value) shown like every other bad input: one line, exit 2."""

    def show(self, file=None) -> None:
        command = f" (see '{self.ctx.command_path} --help')" if self.ctx else ""
        with contextlib.suppress(OSError, ValueError):  # a closed stderr loses the line, not the exit code
            click.echo(f"caffemem: error: {one_line(self.format_message())}{command}", file=file, err=file is None)


class CaffememGroup(click.Group):
    """click's own usage errors come out of make_context (the group's flags) and invoke
    (the command's): both are reworded as one line."""

    def main(self, *args, **kwargs):
        try:
            return super().main(*args, **kwargs)
        except OSError as error:  # --help or a usage message to a full or closed stream
            say(f"caffemem: error: {environment_problem(error)}")
            sys.exit(EXIT_BAD_INPUT)
        finally:
            ignore_late_interrupts()

    def make_context(self, info_name, args, parent=None, **extra):
        try:
            return super().make_context(info_name, args, parent, **extra)
        except click.UsageError as error:
            raise one_line_usage(error) from None
        except KeyboardInterrupt:  # click's own handler would print "Aborted!" and exit 1
            interrupted()

    def invoke(self, ctx):
        raise_on_interrupt()
        try:
            return super().invoke(ctx)
        except click.UsageError as error:
            raise one_line_usage(error) from None
        except KeyboardInterrupt:
            interrupted()
        except Terminated as ended:
            _quiet_stdout()
            say("caffemem: terminated")
            sys.exit(128 + ended.signum)


# `caffemem` alone prints the help (click raises it as a usage error): keep that as it is.
_HELP_WITHOUT_ARGUMENTS = getattr(click.exceptions, "NoArgsIsHelpError", ())


def one_line_usage(error: click.UsageError) -> click.UsageError:
    if isinstance(error, (_OneLineUsageError, _HELP_WITHOUT_ARGUMENTS)):
        return error
    return _OneLineUsageError(error.format_message(), error.ctx)

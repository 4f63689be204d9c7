"""The `caffemem` command: a thin layer over :mod:`caffemem.api`.

Exit codes: 0 success, 2 bad input (one message naming file, line and layer), 3 a bug in
caffemem itself (set CAFFEMEM_DEBUG=1 for the traceback).
"""

from __future__ import annotations

import functools
import json
import os
import sys
from collections.abc import Callable

import click

from . import __version__
from .errors import CaffememError

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
            click.echo(f"caffemem: internal error: {type(error).__name__}: {error} (set CAFFEMEM_DEBUG=1 for details)", err=True)
            sys.exit(EXIT_INTERNAL)

    return run


def net_options(command: Callable) -> Callable:
    """The flags every command that builds a net shares."""
    decorators = [
        click.argument("net", type=click.Path(dir_okay=False, path_type=str, exists=False)),
        click.option("--phase", type=click.Choice(["TRAIN", "TEST"], case_sensitive=False), help="Phase to build (default: TRAIN if the net has a loss, else TEST)."),
        click.option("--stage", "stages", multiple=True, metavar="NAME", help="NetState stage (repeatable)."),
        click.option("--level", type=int, help="NetState level."),
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


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="caffemem")
def main() -> None:
    """Profile and optimize the GPU memory of Caffe networks, statically."""


@main.command()
@net_options
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document instead of tables.")
@_reports_errors
def analyze(net, phase, stages, level, inputs, layers_file, lenient, dtype, batch, engine, as_json) -> None:
    """Every layer's shapes and the bytes Caffe will allocate for it, as Caffe builds the net."""
    from .api import analyze as run_analysis
    from .passes.render import print_tables, to_json

    analysis = run_analysis(net, _options(phase, stages, level, inputs, layers_file, lenient, dtype, batch, engine))
    if as_json:
        click.echo(json.dumps(to_json(analysis), indent=1))
        return
    from rich.console import Console

    print_tables(analysis, Console())


if __name__ == "__main__":  # pragma: no cover
    main()

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


@main.command()
@net_options
@click.option("-o", "--output", type=str, metavar="OUT", help="Write the prototxt with mem_param here.")
@click.option("--strategy", type=click.Choice(["auto", "fork", "best-fit", "first-fit", "exact"]), default="auto", show_default=True)
@click.option("--exclude-blob", "exclude", multiple=True, metavar="NAME", help="Keep this blob's storage private (repeatable).")
@click.option("--share-buffers", is_flag=True, help="Let scratch layer buffers (im2col) share slots too.")
@click.option("--target", type=click.Choice(["caffemem", "fork"]), default="caffemem", show_default=True, help="caffemem: mem_param with the slot table; fork: only what the fork's schema accepts.")
@click.option("--plan-json", type=str, metavar="FILE", help="Also write the plan as JSON (for `caffemem verify`).")
@click.option("--in-place-file", is_flag=True, help="Allow OUT to be the input file itself.")
@click.option("--force", is_flag=True, help="Plan a file that already has a mem_param.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document instead of tables.")
@_reports_errors
def optimize(net, phase, stages, level, inputs, layers_file, lenient, dtype, batch, engine, output, strategy, exclude, share_buffers, target, plan_json, in_place_file, force, as_json) -> None:
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
    result = run_optimize(net, options, OptimizeSettings(strategy_name, tuple(exclude), share_buffers), force=force)
    document = optimize_json(result)
    if output:
        if result.source.binary:
            raise CaffememError("optimize writes text prototxt: give it the net definition, not a binary .caffemodel", Location(file=net))
        with open(net, encoding="utf-8", errors="replace") as handle:
            original = handle.read()
        write_atomically(output, rewrite_text(original, mem_param(result.phases, result.exclude, target)))
    if plan_json:
        write_atomically(plan_json, json.dumps(document, indent=1) + "\n")
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
    from .errors import CaffememError, Location
    from .passes.schedule import build_schedule
    from .passes.verify import plan_from_json, verify_plan

    try:
        with open(plan, encoding="utf-8") as handle:
            document = json.load(handle)
    except FileNotFoundError:
        raise CaffememError("plan file not found", Location(file=plan)) from None
    except (OSError, ValueError) as error:
        raise CaffememError(f"cannot read the plan as JSON: {error}", Location(file=plan)) from None
    phases = document.get("phases") if isinstance(document, dict) else None
    if phases:
        chosen = [p for p in phases if not phase or p.get("phase") == phase.upper()]
        if not chosen:
            raise CaffememError(f"the plan has no phase {phase}", Location(file=plan))
        entries = chosen
    else:
        entries = [document]
    failures = 0
    for entry in entries:
        run_phase = (phase or entry.get("phase") or "").upper() or None
        options = _options(run_phase, stages, level, inputs, layers_file, lenient, dtype, batch, engine)
        analysis = run_analysis(net, options)
        schedule = build_schedule(analysis.nets[0].shaped, spec_table(options), dtype, engine)
        violations = verify_plan(schedule, plan_from_json(entry, plan))
        label = analysis.nets[0].phase
        for violation in violations:
            click.echo(f"{plan}: {label}: {violation}")
        if not violations:
            click.echo(f"{plan}: {label}: plan is safe ({len(plan_from_json(entry, plan).slot_bytes)} slots)")
        failures += bool(violations)
    if failures:
        sys.exit(1)


if __name__ == "__main__":  # pragma: no cover
    main()

"""The `fit` answer for a person (lines) and for a program (JSON)."""

from __future__ import annotations

from typing import Any

from caffemem.api.fit import FitResult
from caffemem.errors import one_line
from caffemem.report.schemas import schema_version
from caffemem.units import format_size, mib_gib


def fit_json(result: FitResult) -> dict[str, Any]:
    """One document: the answer, its neighbour, the schedule and every evaluation made."""
    request, following, schedule = result.request, result.following, result.schedule
    return {
        "schema_version": schema_version("fit"),
        "net": result.path,
        "kind": result.subject.kind,
        "phase": result.subject.phase,
        "optimized": request.optimized,
        "gpu_memory": request.gpu_memory,
        "reserve": request.reserve,
        "reserve_is_estimate": result.margin is not None,
        "budget": request.budget,
        "gpus": request.gpus,
        "fits": result.fits,
        "batch": result.search.batch,
        "bytes": result.bytes,
        "next_batch": result.search.batch + 1,
        "next_bytes": following.bytes if following else None,
        "next_error": following.error if following else None,
        "bytes_per_sample": result.bytes_per_sample,
        "fixed_bytes": result.fixed_bytes,
        "linear_guess": result.search.guess,
        "line_batches": list(result.search.line) if result.search.line else None,
        "schedule": None
        if schedule is None
        else {"effective_batch": schedule.effective_batch, "batch": schedule.batch, "iter_size": schedule.iter_size, "gpus": schedule.gpus, "bytes": schedule.bytes},
        "evaluations": [{"batch": e.batch, "bytes": e.bytes, "error": e.error, "bound": e.bound} for e in result.evaluations],
        "notes": list(result.notes),
        "advice": None if result.advice is None else {"batch": result.advice.batch, "commands": list(result.advice.commands), "then": result.advice.then},
    }


def _sized(n: int) -> str:
    return format_size(n) if abs(n) < 2**10 else f"{format_size(n)} ({n:,} B)"


def _figure(n: int) -> str:
    """A figure the answer states: MiB and GiB (as analyze's headline), then exact bytes."""
    return f"{mib_gib(n)}, {n:,} B"


def fit_lines(result: FitResult, width: int | None = None) -> list[str]:
    """The answer for a person, first: the batch per GPU and what it needs (then the
    effective batch's schedule when asked); then the budget, the next batch's bytes, the
    per-sample figures and how the batch was found.  Each line as errors.one_line shows
    it (the net's path, a batch's error and the notes quote the user's files); with a
    ``width``, broken to fit it (report/wrap.py; a command continued with backslashes)."""
    request, search, subject = result.request, result.search, result.subject
    counted = "caffemem optimize's plan" if request.optimized else "stock Caffe"
    what = "training process (solver)" if subject.kind == "solver" else f"{subject.phase} net"
    budget = (
        f"  budget: {_figure(request.budget)} = GPU {format_size(request.gpu_memory)} - reserve {format_size(request.reserve or 0)}"
        + (" (room for the kernels CUDA loads lazily, see the note; --reserve overrides)" if result.margin is not None else "")
    )
    head = f"{result.path}: {what}, {counted}"
    if not result.fits:
        needed = result.at(1).bytes or 0
        return _fitted([f"{head}: nothing fits: batch 1 needs {_figure(needed)}, {format_size(needed - request.budget)} more than the budget", budget] + [f"note: {note}" for note in result.notes], width)
    lines = [f"{head}: largest batch per GPU {search.batch}, needs {_figure(result.bytes or 0)}"]
    schedule = result.schedule
    if schedule is not None and (request.effective_batch is not None or schedule.gpus > 1):  # else it is the batch itself
        gpus = f"{schedule.gpus} GPU{'s' if schedule.gpus > 1 else ''}"
        lines.append(f"{head}: effective batch {schedule.effective_batch} = batch {schedule.batch} × iter_size {schedule.iter_size} × {gpus}, needs {_figure(schedule.bytes)} per GPU")
    lines.append(budget)
    following = result.following
    if following is None:
        lines.append(f"  (batch {search.batch} is Caffe's largest)")
    elif following.bytes is None:
        lines.append(f"  batch {following.batch} cannot be built: {following.error}")
    else:
        at_least = "at least " if following.bound else ""  # fit --recompute: its plan's bound, already over
        lines.append(f"  batch {following.batch} needs {at_least}{_figure(following.bytes)}: over the budget")
    if result.bytes_per_sample is not None and result.fixed_bytes is not None:
        lines.append(f"  per sample: {_sized(result.bytes_per_sample)}; fixed part: {_sized(result.fixed_bytes)}")
    found = "confirmed" if search.guess == search.batch else "searched"
    guess = f"the line through batches {search.line[0]} and {search.line[1]} predicted {search.guess}; " if search.line and search.guess is not None else ""
    bounds = sum(1 for e in result.evaluations if e.bound)
    made = f"{len(result.evaluations)} exact evaluations"
    if bounds:  # fit --recompute: the search's figures are the plan's bound, the answer's a plan
        made = f"{len(result.evaluations)} evaluations ({bounds} by the recompute plan's bound, {len(result.evaluations) - bounds} planned whole)"
    lines.append(f"  found by: {guess}{found} with {made}, at {search.batch} and {search.batch + 1} among them")
    return _fitted(lines + advice_lines(result) + [f"note: {note}" for note in result.notes], width)


def _fitted(lines: list[str], width: int | None) -> list[str]:
    """Each line as errors.one_line shows it, broken to ``width`` when given: a command
    (``  caffemem ...``) between its words, with backslashes, anything else at spaces."""
    from caffemem.report.wrap import wrapped, wrapped_command

    shown = [one_line(line) for line in lines]
    if width is None:
        return shown
    return [part for line in shown for part in (wrapped_command(line, width, 2) if line.startswith("  caffemem ") else wrapped(line, width))]


def advice_lines(result: FitResult) -> list[str]:
    """--optimized: the commands that write the plan counted (one a line, to copy), then
    what is left to do."""
    advice = result.advice
    if advice is None:
        return []
    head = f"to run the plan counted here, write it for batch {advice.batch}" + (":" if advice.commands else f": {advice.then}")
    return [head] + [f"  {command}" for command in advice.commands] + ([f"  {advice.then}"] if advice.commands else [])


def nothing_fits_message(result: FitResult) -> str:
    first = result.at(1)
    used = first.bytes if first and first.bytes is not None else 0
    return (
        f"nothing fits: batch 1 needs {_sized(used)}, {format_size(used - result.request.budget)} more than the budget "
        f"{_sized(result.request.budget)} (GPU {format_size(result.request.gpu_memory)} - reserve {format_size(result.request.reserve or 0)})"
    )


"""Last pass, render: an analysis as JSON (machine-readable) or as rich tables (people).

Entry points: :func:`to_json` and :func:`print_tables`.  The JSON uses the field names of
``../shared/groundtruth`` so the two compare directly.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from rich.cells import cell_len
from rich.console import Console
from rich.table import Table
from rich.text import Span, Text

from caffemem.api.analyze import Analysis, NetAnalysis
from caffemem.graph import Shape
from caffemem.passes.memory import CATEGORIES, MemoryReport
from caffemem.units import mib


def _shape(shape: Shape) -> list[int]:
    return [int(d) for d in shape]


def memory_json(memory: MemoryReport) -> dict[str, Any]:
    """The whole-net figures, with the ground truth's names."""
    return {
        "dtype": memory.dtype,
        "heap_init": memory.heap_init,
        "heap_forward": memory.heap_forward,
        "heap_backward": memory.heap_backward,
        "input_bytes": memory.input_bytes,
        "memory_required_for_data": memory.memory_required_for_data,
        "learnable_param_bytes": memory.learnable_param_bytes,
        "prefetch_bytes": memory.prefetch_bytes,
        "total_bytes": memory.total_bytes,
        "by_category": dict(memory.by_category, prefetch=memory.prefetch_bytes),
        "peak_layer": memory.peak_layer,
        "unverified_types": list(memory.unverified_types),
    }


def net_json(net: NetAnalysis) -> dict[str, Any]:
    """One net: phase, blobs in Caffe's order, layers in execution order, memory."""
    shaped, memory = net.shaped, net.memory
    graph = shaped.graph
    layers = []
    for layer, bytes_ in zip(graph.layers, memory.layers):
        layers.append(
            {
                "name": layer.name,
                "type": layer.type,
                "bottoms": list(layer.bottoms),
                "tops": list(layer.tops),
                "params": [_shape(p) for p in shaped.layer_shapes[layer.index].params],
                "need_backward": bytes_.need_backward,
                "propagate_down": list(bytes_.propagate_down),
                "init_alloc": bytes_.init,
                "fwd_alloc": bytes_.fwd_alloc,
                "bwd_alloc": bytes_.bwd_alloc,
                "buffers": bytes_.buffers,
                "by_category": bytes_.by_category,
            }
        )
    return {
        "role": net.role,
        "index": net.index,
        "file": net.file,
        "name": graph.name,
        "phase": graph.phase,
        "blobs": [{"name": name, "shape": _shape(shape)} for name, shape in shaped.blob_shapes.items()],
        "layers": layers,
        **memory_json(memory),
        "notes": list(net.notes + shaped.notes),
    }


def to_json(analysis: Analysis) -> dict[str, Any]:
    """A net file gives one net's document; a solver gives {"solver": ..., "nets": [...]}."""
    if analysis.kind == "net":
        document = net_json(analysis.nets[0])
        document["notes"] = list(analysis.notes) + document["notes"]
        return document
    document: dict[str, Any] = {"solver": analysis.path, "nets": [net_json(net) for net in analysis.nets], "notes": list(analysis.notes)}
    if analysis.process is not None:
        document["process"] = asdict(analysis.process)
    return document


def _dims(shape: Shape) -> str:
    return "×".join(str(d) for d in shape) if shape else "scalar"


def _cell(n: int) -> str:
    return "" if n == 0 else mib(n)


def print_tables(analysis: Analysis, console: Console) -> None:
    """Per net: each layer's shapes and bytes, then where the memory goes."""
    for note in analysis.notes:
        console.print(f"[dim]{note}[/dim]")
    for net in analysis.nets:
        _print_net(net, console)
    if analysis.process is not None:
        _print_process(analysis, console)


Cell = list[tuple[str, str | None]]  # fragments of text, each with its style (None: the column's)


def _print_net(net: NetAnalysis, console: Console) -> None:
    graph, memory = net.shaped.graph, net.memory
    title = f"{graph.name or net.file} — {net.role}{f' #{net.index}' if net.role == 'test' else ''} ({graph.phase}, {memory.dtype})"
    columns = [("#", "right", "dim"), ("layer", "left", None), ("type", "left", "cyan"), ("bottoms → tops", "left", None), ("params", "left", "magenta")]
    columns += [(column, "right", None) for column in ("outputs", "gradients", "buffers", "parameters", "total")]
    blobs = net.shaped.blob_shapes
    rows: list[list[Cell]] = []
    for layer, bytes_ in zip(graph.layers, memory.layers):
        bottoms = ", ".join(layer.bottoms) or "∅"
        tops = ", ".join(f"{t} [{_dims(blobs[t])}]" for t in layer.tops) or "∅"
        params = ", ".join(_dims(p) for p in net.shaped.layer_shapes[layer.index].params)
        c = bytes_.by_category
        numbers = (c["activations"], c["activation_gradients"], c["layer_buffers"], c["parameters"] + c["parameter_gradients"], bytes_.total)
        rows.append(
            [
                [(str(layer.index), None)],
                [(layer.name, None)] + ([(" ◀ peak", "bold red")] if layer.name == memory.peak_layer else []),
                [(layer.type, None)] + ([] if bytes_.verified else [(" ?", "yellow")]),
                [(f"{bottoms} → {tops}", None)],
                [(params, None)],
            ]
            + [[(_cell(n), None)] for n in numbers]
        )
    for text in _table_text(title, columns, rows):
        console.print(text, soft_wrap=True)
    _print_summary(memory, console)
    for note in net.notes + net.shaped.notes:
        console.print(f"[dim]{note}[/dim]")


def _table_text(title: str, columns: list[tuple[str, str, str | None]], rows: list[list[Cell]], rows_per_text: int = 500):
    """A table drawn as rich draws one (heavy head, light body), as Texts of a few hundred
    rows each: rich lays out a Table cell by cell, seconds for a net of a thousand layers.
    Cells are never wrapped; a wide table runs past the terminal's edge.  ``columns``:
    (header, justify, style)."""
    widths = [max([cell_len(header)] + [sum(cell_len(text) for text, _ in row[i]) for row in rows]) for i, (header, _, _) in enumerate(columns)]
    parts: list[str] = []
    spans: list[Span] = []
    length = 0  # of the text in parts

    def add(text: str, style: str | None = None) -> None:
        nonlocal length
        if style:
            spans.append(Span(length, length + len(text), style))
        parts.append(text)
        length += len(text)

    def rule(left: str, middle: str, right: str, line: str) -> None:
        add(left + middle.join(line * (width + 2) for width in widths) + right + "\n")

    def cells(border: str, row: list[Cell], header: bool) -> None:
        for (_, justify, style), width, cell in zip(columns, widths, row):
            padding = " " * (width - sum(cell_len(fragment) for fragment, _ in cell))
            add(border + " " + (padding if justify == "right" else ""))
            for fragment, own_style in cell:
                add(fragment, "bold" if header else own_style or style)
            add(("" if justify == "right" else padding) + " ")
        add(border + "\n")

    def text() -> Text:
        nonlocal length
        done = Text("".join(parts).rstrip("\n"), spans=list(spans))
        parts.clear()
        spans.clear()
        length = 0
        return done

    add(title.center(sum(widths) + 3 * len(widths) + 1).rstrip(), "italic")
    add("\n")
    rule("┏", "┳", "┓", "━")
    cells("┃", [[(header, None)] for header, _, _ in columns], header=True)
    rule("┡", "╇", "┩", "━")
    for i, row in enumerate(rows):
        if i and i % rows_per_text == 0:
            yield text()
        cells("│", row, header=False)
    rule("└", "┴", "┘", "─")
    yield text()


def _print_summary(memory: MemoryReport, console: Console) -> None:
    summary = Table(title="where the memory goes", show_header=False)
    summary.add_column("what")
    summary.add_column("bytes", justify="right")
    for category in CATEGORIES:
        summary.add_row(category.replace("_", " "), mib(memory.by_category[category]))
    if memory.prefetch_bytes:
        summary.add_row("prefetch batches", mib(memory.prefetch_bytes))
    summary.add_row("[bold]total[/bold]", f"[bold]{mib(memory.total_bytes)}[/bold]")
    console.print(summary)
    logged = memory.memory_required_for_data
    console.print(
        f"Caffe logs 'Memory required for data: {logged}' ({mib(logged)}); it will really allocate {mib(memory.total_bytes)}: "
        "the log counts each layer's outputs once (in-place outputs again) and leaves out gradients, parameters and layer buffers."
    )
    if memory.peak_layer:
        console.print(f"The largest single allocation step is layer '{memory.peak_layer}'.")
    if memory.unverified_types:
        console.print(f"[yellow]? = memory rule guessed (not checked against Caffe's source) for: {', '.join(memory.unverified_types)}[/yellow]")


def _print_process(analysis: Analysis, console: Console) -> None:
    process = analysis.process
    assert process is not None
    table = Table(title=f"training process ({process.solver_type} solver)", show_header=False)
    table.add_column("what")
    table.add_column("bytes", justify="right")
    table.add_row("train net (with every parameter gradient cleared)", mib(process.train_bytes))
    table.add_row(f"solver history ({process.solver_type})", mib(process.history_bytes))
    for test in process.tests:
        table.add_row(f"test net #{test.index}", mib(test.bytes))
    table.add_row("[bold]total while all are alive[/bold]", f"[bold]{mib(process.total_bytes)}[/bold]")
    console.print(table)
    for test in process.tests:
        console.print(f"[dim]test net #{test.index}: {test.note}[/dim]")
    for note in process.notes:
        console.print(f"[dim]{note}[/dim]")


# ----------------------------------------------------------------------------- optimize


def _percent(part: int, whole: int) -> float:
    return round(100.0 * part / whole, 2) if whole else 0.0


def phase_plan_json(phase) -> dict[str, Any]:
    """One planned phase: the four whole-run figures, the plan, and the peak."""
    schedule, liveness = phase.schedule, phase.liveness
    peak_step = schedule.steps[liveness.peak_step] if schedule.steps else None
    return {
        "phase": phase.phase,
        "strategy": phase.strategy,
        "bytes": {"stock": phase.stock.heap_total, "fork": phase.fork.heap_total, "planned": phase.planned.heap_total, "lower_bound": phase.lower_bound}
        | ({} if phase.as_given is None else {"stock_as_given": phase.as_given}),
        "savings": {"bytes": phase.savings, "percent": _percent(phase.savings, phase.stock.heap_total)},
        "gap_to_lower_bound_percent": _percent(phase.planned.heap_total - phase.lower_bound, phase.lower_bound),
        "fork_plan_safe": phase.fork_safe,
        "candidates": phase.candidates,
        "rejected": phase.rejected,
        "peak": {
            "step": liveness.peak_step,
            "at": schedule.step_name(peak_step) if peak_step else None,
            "alive": [schedule.classes[c].label for c in liveness.alive_at_peak],
        },
        "plan": {
            "slots": [{"id": slot, "bytes": size} for slot, size in sorted(phase.plan_data.slot_bytes.items())],
            "assign": [{"blob": blob, "kind": kind, "slot": slot, "offset": offset} for blob, kind, slot, offset in phase.plan_data.assign],
        },
        "kept_private": {schedule.classes[c].label: why for c, why in liveness.kept.items()},
    }


def optimize_json(result) -> dict[str, Any]:
    phases = [phase_plan_json(p) for p in result.phases]
    document: dict[str, Any] = {"file": result.path, "exclude_blob": list(result.exclude), "phases": phases}
    if len(phases) == 1:
        document.update({k: phases[0][k] for k in ("phase", "bytes", "plan")})
    if result.inplace is not None:
        document["inplace"] = [{"layer": r.layer, "type": r.type, "top_was": r.top_was, "now": r.now} for r in result.inplace.rewrites]
        document["inplace_kept"] = [{"layer": k.layer, "type": k.type, "reason": k.reason} for k in result.inplace.kept]
        document["inplace_notes"] = list(result.inplace.notes)
    return document


def _print_inplace(inplace, console: Console) -> None:
    """--inplace: the layers rewritten, then those of an in-place type left alone, and why."""
    if inplace.rewrites:
        table = Table(title=f"in place: {len(inplace.rewrites)} layers rewritten", header_style="bold")
        for column in ("layer", "type", "top was", "now"):
            table.add_column(column, style="cyan" if column == "type" else None)
        for rewrite in inplace.rewrites:
            table.add_row(rewrite.layer, rewrite.type, rewrite.top_was, rewrite.now)
        console.print(table)
    else:
        console.print("in place: no layer rewritten")
    for kept in inplace.kept:
        console.print(f"[dim]kept {kept.layer} ({kept.type}) as written: {kept.reason}[/dim]")
    for note in inplace.notes:
        console.print(f"[yellow]{note}[/yellow]")


def print_optimize(result, console: Console) -> None:
    if result.inplace is not None:
        _print_inplace(result.inplace, console)
    for phase in result.phases:
        stock = phase.stock.heap_total
        table = Table(title=f"{result.path} — {phase.phase}: plan '{phase.strategy}', {len(phase.plan_data.slot_bytes)} shared slots", show_header=True, header_style="bold")
        table.add_column("")
        table.add_column("bytes", justify="right")
        table.add_column("vs stock", justify="right")
        rows = [("stock Caffe", stock), ("memory-multiloading fork", phase.fork.heap_total), ("caffemem plan", phase.planned.heap_total), ("lower bound", phase.lower_bound)]
        if phase.as_given is not None:
            rows[0] = ("stock Caffe, layers in place", stock)
            rows.insert(0, ("stock Caffe, file as given", phase.as_given))
        base = rows[0][1]
        for label, value in rows:
            table.add_row(label, mib(value), f"{-_percent(base - value, base):+.1f}%")
        console.print(table)
        saved = phase.savings
        console.print(f"saves {mib(saved)} ({_percent(saved, stock):.1f}%) against stock Caffe, {mib(phase.fork.heap_total - phase.planned.heap_total)} against the fork; {_percent(phase.planned.heap_total - phase.lower_bound, phase.lower_bound):.2f}% above the lower bound.")
        schedule, liveness = phase.schedule, phase.liveness
        if schedule.steps:
            alive = [schedule.classes[c].label for c in liveness.alive_at_peak]
            shown = ", ".join(alive[:12]) + (f" and {len(alive) - 12} more" if len(alive) > 12 else "")
            console.print(f"peak of shared storage at step {liveness.peak_step} ({schedule.step_name(schedule.steps[liveness.peak_step])}): {shown or 'nothing'}")
        if not phase.fork_safe:
            console.print("[yellow]the fork's own plan fails caffemem's verifier on this net (see `caffemem verify`)[/yellow]")
        for name, why in phase.rejected.items():
            console.print(f"[yellow]strategy {name} rejected by the verifier: {why}[/yellow]")

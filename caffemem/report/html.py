"""Render, browser side: one self-contained HTML page a person reads (`--html FILE`).

Entry point: :func:`html_report`.  The page carries its own CSS and a small script that
draws the two charts as inline SVG from a JSON block — nothing is fetched, so the file
opens offline and can be mailed around.  Per net (or per planned phase) it shows:

- the memory timeline: bytes allocated after each step of the run (Net::Init, each
  Forward, each Backward) by stock Caffe — which frees nothing, so that is its running
  total — and, for a plan, by the planned run; beside them the bytes that hold a value
  someone will still read, whose peak is marked: what sharing cannot go below;
- a Gantt chart: for a plan, each shared slot a row, its members drawn at their byte
  offsets over the steps they are live; for an analysis, the largest storage classes;
- the per-layer table (shapes, bytes by category, allocations per step).

Everything the page shows the API computed (a result's ``timeline``, api/timeline.py, and
its reports); this module only chooses and lays it out, and the script only draws.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from html import escape
from importlib import resources
from typing import Any

from caffemem._version import __version__
from caffemem.api.analyze import CATEGORIES, FROM_FILE, Analysis, DeviceReport, MemoryReport, Options
from caffemem.api.optimize import PlanData
from caffemem.api.timeline import Timeline
from caffemem.graph import ShapedGraph
from caffemem.report.terminal import recompute_line
from caffemem.units import MIB, mib, mib_column, mib_gib, plural

MAX_SLOT_ROWS = 60  # a plan's Gantt: the largest slots beyond this are summarised
MAX_CLASS_ROWS = 40  # an analysis's Gantt: the largest storage classes only


@dataclass(frozen=True)
class Bar:
    """One stretch of a Gantt row: steps first..last, a band of the row's height."""

    first: int
    last: int  # inclusive
    top: float  # where the band starts, as a fraction of the row (a member's byte offset)
    height: float  # the band's share of the row (a member's bytes over the slot's)
    style: str  # "data", "diff", "param", "buffer" or "held" (allocated, no live value)
    title: str


@dataclass(frozen=True)
class GanttRow:
    label: str
    title: str
    bytes: int  # the row's height is drawn in proportion to it
    bars: tuple[Bar, ...]


@dataclass(frozen=True)
class Gantt:
    rows: tuple[GanttRow, ...]
    note: str  # what the chart shows and what it leaves out


@dataclass(frozen=True)
class Section:
    """One net (an analysis) or one planned phase: everything its part of the page shows."""

    anchor: str
    title: str
    facts: tuple[tuple[str, str], ...]
    timeline: Timeline
    gantt: Gantt
    table: str  # the per-layer table, as HTML
    notes: tuple[str, ...]
    causes: tuple[tuple[str, int], ...] = ()  # what the total is made of (parts that add up)
    top_layers: tuple[tuple[int, str, str, int], ...] = ()  # (index, name, type, bytes), largest first
    top_title: str = ""  # what the top layers' bytes are, after "The 10 largest layers"
    on_card: bool = False  # GPU mode: the timeline and the table's steps are the card's


def step_range(timeline: Timeline, first: int, last: int) -> str:
    """`steps 3–40 (forward conv1 → backward conv1)`, for hover titles."""
    names = timeline.step_names[first], timeline.step_names[last]
    if first == last:
        return f"step {first} ({names[0]})"
    return f"steps {first}–{last} ({names[0]} → {names[1]})"


def _first_few(names: list[str] | tuple[str, ...], shown: int = 8) -> str:
    return ", ".join(names[:shown]) + (f" and {len(names) - shown} more" if len(names) > shown else "")


# ----------------------------------------------------------------------------- the Gantt charts


def slot_gantt(timeline: Timeline, plan: PlanData, max_rows: int = MAX_SLOT_ROWS) -> Gantt:
    """Each slot a row as tall as its bytes, each member a band at its byte offset over
    the steps it is live: free space shows as gaps, reuse as bands side by side."""
    members: dict[int, list[Bar]] = {slot: [] for slot in plan.slot_bytes}
    names: dict[int, list[str]] = {slot: [] for slot in plan.slot_bytes}
    for member in timeline.slot_members:
        blob, kind, slot, offset, storage = member.blob, member.kind, member.slot, member.offset, member.storage
        names[slot].append(f"{blob} ({kind})")
        size, slot_size = storage.bytes, max(plan.slot_bytes[slot], 1)
        for first, last in storage.spans:
            title = f"{blob} ({kind}) · {mib(size)} at offset {mib(offset)} of slot {slot} · {step_range(timeline, first, last)}"
            members[slot].append(Bar(first, last, offset / slot_size, size / slot_size, storage.style, title))
    largest = sorted(plan.slot_bytes, key=lambda slot: (-plan.slot_bytes[slot], slot))[:max_rows]
    rows = tuple(
        GanttRow(
            label=f"slot {slot} · {mib(plan.slot_bytes[slot])}",
            title=f"slot {slot}: {mib(plan.slot_bytes[slot])} shared by {_first_few(names[slot])}",
            bytes=plan.slot_bytes[slot],
            bars=tuple(members[slot]),
        )
        for slot in sorted(largest)
    )
    shown = sum(plan.slot_bytes[slot] for slot in largest)
    total = sum(plan.slot_bytes.values())
    note = f"{plural(len(plan.slot_bytes), 'shared slot')} holding {len(plan.assign)} blob parts, {mib(total)} in all; each row's height is in proportion to its slot's bytes, each member drawn at its byte offset over the steps it holds a live value."
    if len(largest) < len(plan.slot_bytes):
        note += f" Showing the {plural(len(largest), 'largest slot')} ({mib(shown)}, {100 * shown / total:.1f}% of the slot bytes)."
    kept = [storage for storage in timeline.storage if storage.kept]
    note += f" Not drawn, as they keep their own storage: {plural(len(kept), 'storage class', 'storage classes')} ({mib(sum(storage.bytes for storage in kept))}: parameters, inputs, outputs, losses, excluded blobs, layer buffers)."
    return Gantt(rows, note)


def class_gantt(timeline: Timeline, max_rows: int = MAX_CLASS_ROWS) -> Gantt:
    """The largest storage classes, each a row, in order of first touch: the pale bar is
    what stock Caffe holds (first touch to the end), the dark bars when the bytes hold a
    value a later step still reads — the difference is what `caffemem optimize` reclaims."""
    last_step = len(timeline.step_names) - 1
    largest = sorted(timeline.storage, key=lambda storage: (-storage.bytes, storage.id))[:max_rows]
    rows = []
    for storage in sorted(largest, key=lambda storage: (storage.touched[0], storage.id)):
        first, kept = storage.touched[0], storage.kept
        why = f"keeps its own storage: {kept}" if kept else "shareable"
        held = Bar(first, last_step, 0.1, 0.8, "held", f"{storage.label}: {mib(storage.bytes)} allocated from {step_range(timeline, first, last_step)} ({why})")
        live = tuple(
            Bar(start, end, 0.1, 0.8, storage.style, f"{storage.label}: {mib(storage.bytes)} {'used' if kept else 'live'} over {step_range(timeline, start, end)} ({why})")
            for start, end in storage.spans
        )
        title = f"{storage.label} · {mib(storage.bytes)} · {storage.kind} storage of {_first_few(storage.members)}"
        rows.append(GanttRow(storage.label, title, storage.bytes, (held,) + live))
    total = sum(storage.bytes for storage in timeline.storage)
    shown = sum(storage.bytes for storage in largest)
    note = (
        f"The {len(largest)} largest of the {plural(len(timeline.storage), 'storage class', 'storage classes')} Caffe allocates ({mib(shown)}, {100 * shown / max(total, 1):.1f}% of their bytes), in order of first touch; "
        "each row's height is in proportion to its bytes. Pale: allocated (Caffe frees nothing); dark: holding a value a later step reads "
        "(for storage that must stay private — parameters, inputs, outputs, losses, layer buffers — from its first use to its last)."
    )
    return Gantt(tuple(rows), note)


# ----------------------------------------------------------------------------- the table


def _dims(shape) -> str:
    return "×".join(str(d) for d in shape) if shape else "scalar"


def _cell(n: int) -> str:
    """MiB to keep the table narrow; the exact bytes on hover."""
    if not n:
        return '<td class="n"></td>'
    return f'<td class="n" title="{n:,} bytes">{n / MIB:,.2f}</td>' if abs(n) >= MIB // 200 else f'<td class="n dim" title="{n:,} bytes">&lt;0.01</td>'


def _steps(layers, index: int, on_card: bool) -> tuple[int, int, int]:
    """A layer's (SetUp, Forward, Backward) bytes: a MemoryReport's or, on the card, a
    DeviceReport's device side."""
    layer = layers[index]
    return layer.device if on_card else (layer.init, layer.fwd_alloc, layer.bwd_alloc)


def layer_table(shaped: ShapedGraph, stock: MemoryReport, planned: MemoryReport | None = None, card: tuple[DeviceReport, DeviceReport | None] | None = None) -> str:
    """Every layer: its name, type and tops with shapes in one cell, what its
    SetUp/Forward/Backward allocated by category, and per step (with a plan: the planned
    run's Forward/Backward too).  ``card`` (GPU mode: stock's and the plan's device
    reports): every figure is the GPU run's, what the card gets at each step and what the
    host gets in all, and no column is a CPU run's (issue 34: its categories stood beside
    the card's steps).  Eleven columns at most, none of them wider than its figures or a
    wrapped name, so the table fits a 1024-pixel window."""
    on_card = card is not None
    kinds = () if on_card else tuple(c.replace("_", " ") for c in CATEGORIES)
    groups = [("", 2)] + ([("by category", len(kinds))] if kinds else []) + [(f"allocated {'on the card' if on_card else 'per step'}", 3 if planned is None else 5)]
    headers = ["#", "layer · type · tops [shape]", *kinds, "SetUp", "Forward", "Backward"]
    if planned is not None:
        headers += ["Forward, planned", "Backward, planned"]
    if on_card:
        groups.append(("on the host", 1))
        headers.append("in all")
    stock_steps = card[0].layers if on_card else stock.layers
    largest = card[0].largest_step() if on_card else None
    peak = (card[0].layers[largest[0]].name if largest else None) if on_card else stock.peak_layer
    planned_steps = (card[1].layers if on_card and card[1] is not None else planned.layers) if planned is not None else None
    rows = []
    for layer, own in zip(shaped.graph.layers, stock.layers):
        tops = "<br>".join(f"{escape(top)} <span class=dim>[{_dims(shaped.blob_shapes[top])}]</span>" for top in layer.tops)
        marks = ' <span class="peak">◀ largest step</span>' if layer.name == peak else ""
        guessed = ' <span class="warn" title="memory rule guessed, not checked against Caffe">?</span>' if not own.verified else ""
        cells = [
            f'<td class="n dim">{layer.index}</td>',
            f'<td class="name" title="bottoms: {escape(", ".join(layer.bottoms) or "none")}"><b>{escape(layer.name)}</b>{marks} <span class="type">{escape(layer.type)}{guessed}</span>'
            + (f'<div class="tops">{tops}</div>' if tops else "")
            + "</td>",
            *(_cell(own.by_category[c]) for c in CATEGORIES if not on_card),
            *(_cell(n) for n in _steps(stock_steps, layer.index, on_card)),
        ]
        if planned_steps is not None:
            cells += [_cell(n) for n in _steps(planned_steps, layer.index, on_card)[1:]]
        if on_card:
            cells.append(_cell(stock_steps[layer.index].host_total))
        rows.append("<tr>" + "".join(cells) + "</tr>")
    group_row = "".join(f'<th colspan="{span}" class="group">{escape(name)}</th>' for name, span in groups)
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    return f'<div class="scroll"><table class="layers"><thead><tr>{group_row}</tr><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table></div>'


# ----------------------------------------------------------------------------- sections


def _log_versus_real(memory: MemoryReport, real: int, on_card: bool) -> tuple[str, str]:
    logged = memory.memory_required_for_data
    ratio = f"; real is {real / logged:.2f}× the log" if logged else ""
    return ("Caffe's log vs real", f"logs 'Memory required for data: {logged}' ({mib(logged)}); {'a GPU run holds' if on_card else 'allocates'} {mib(real)}{' on the card' if on_card else ''}{ratio}")


def _peak_fact(timeline: Timeline) -> tuple[str, str]:
    peak = timeline.peak_step
    return ("most live values", f"{mib(timeline.live[peak])} at step {peak} ({timeline.step_names[peak]})")


def _batch(batch: int | None) -> str:
    return "" if batch is None else f", batch {batch}"


def analysis_sections(analysis: Analysis, options: Options) -> tuple[Section, ...]:
    """One section per net of the file (a solver: its train net and each test net).  In
    GPU mode every figure is the card's: the facts, the causes, the largest layers, the
    timeline and the per-layer table (no column of it a CPU run's)."""
    sections = []
    for i, net in enumerate(analysis.nets):
        memory, device, timeline = net.memory, net.device, net.timeline
        graph = net.shaped.graph
        role = "" if net.role == "net" else f"{net.role}{f' #{net.index}' if net.role == 'test' else ''} net — "
        facts: tuple[tuple[str, str], ...] = (
            ("net", f"{graph.name or '(unnamed)'} — {net.file}"),
            ("phase", f"{graph.phase}{_batch(net.batch)}, {memory.dtype}, {options.device.upper()} mode, {options.build_engine} engine"),
        )
        if device is None:
            facts += (
                ("Caffe allocates", mib_gib(memory.total_bytes) + (f" (the net {mib(memory.total_bytes - memory.prefetch_bytes)} + prefetch batches {mib(memory.prefetch_bytes)}, which hold the data tops)" if memory.prefetch_bytes else "")),
                _log_versus_real(memory, memory.total_bytes, False),
                ("by cause", ", ".join(f"{c.replace('_', ' ')} {mib(size)}" for c, size in memory.parts().items()) + f" (total {mib(memory.total_bytes)})"),
            )
            causes, largest = tuple(memory.parts().items()), top_layers(memory)
        else:
            facts += device_facts(device) + (_log_versus_real(memory, device.device_bytes, True),)
            causes = tuple((cause, size) for cause, size in device.device_by_cause.items() if size)
            largest = tuple((index, layer.name, layer.type, layer.device_total) for index, layer in device.largest_layers(TOP_LAYERS) if layer.device_total)
        facts += (_peak_fact(timeline),)
        sections.append(
            Section(
                anchor=f"net{i}",
                title=f"{role}{graph.name or net.file} ({graph.phase})",
                facts=facts,
                timeline=timeline,
                gantt=class_gantt(timeline),
                table=layer_table(net.shaped, memory, card=(device, None) if device is not None else None),
                notes=tuple(dict.fromkeys(net.notes + net.shaped.notes + (device.notes if device is not None else ()))),
                causes=causes,
                top_layers=largest,
                top_title=" on the card" if device is not None else "",
                on_card=device is not None,
            )
        )
    return tuple(sections)


def process_intro(analysis: Analysis) -> str:
    """A solver's answer, first on its page: the training process and its parts."""
    process = analysis.process
    if process is None:
        return ""
    on_card = process.device == "gpu"
    parts = [f"train net {mib(process.train_bytes)}", f"{process.solver_type} solver history {mib(process.history_bytes)}"]
    parts += [f"test net #{test.index} {mib(test.bytes)}" for test in process.tests]
    return f"Training{' on one card' if on_card else ''}: {mib_gib(process.total_bytes)}, all alive at once — {', '.join(parts)}."


TOP_LAYERS = 10


def device_facts(device: DeviceReport) -> tuple[tuple[str, str], ...]:
    """GPU mode: what one card and the host hold, each cause on both sides."""
    low, high = device.device_bytes_min, device.device_bytes
    span = mib_gib(high) + (f" (cuDNN workspaces at their bound; {mib(low)} if cuDNN takes no workspace)" if low != high else "")
    both = ", ".join(
        f"{cause.replace('_', ' ')} {mib_column(size)} / {mib_column(device.host_by_cause[cause])}" for cause, size in device.device_by_cause.items() if size or device.host_by_cause[cause]
    )
    handles = device.handles
    return (
        ("on the card", span + (f", on each of {device.gpus} GPUs" if device.gpus > 1 else "")),
        ("on the host", f"{mib(device.host_bytes)} (pinned copies of what host code touched)"),
        ("by cause, card / host", both),
        ("handles", f"{handles.cudnn} cuDNN, {handles.cublas} cuBLAS, {handles.curand} cuRAND ({mib(device.device_by_cause.get('library_handles', 0))} as measured); CUDA context {mib(device.context.bytes)}: {device.context.source}"),
    )


def top_layers(memory: MemoryReport, count: int = TOP_LAYERS) -> tuple[tuple[int, str, str, int], ...]:
    """The layers that make Caffe allocate the most, largest first."""
    return tuple((index, layer.name, layer.type, layer.total) for index, layer in memory.largest_layers(count) if layer.total)


def _causes_html(causes: tuple[tuple[str, int], ...]) -> str:
    """A bar per cause, its length in proportion to its bytes; no script needed."""
    if not causes:
        return ""
    total, largest = max(sum(size for _, size in causes), 1), max(max(size for _, size in causes), 1)
    rows = "".join(
        f'<tr><th>{escape(name.replace("_", " "))}</th><td class="bar"><span class="cause {escape(name)}" style="width:{100 * size / largest:.2f}%"></span></td>'
        f'<td class="n" title="{size:,} bytes">{mib_column(size)}</td><td class="n">{100 * size / total:.1f}%</td></tr>'
        for name, size in causes
    )
    return f'<div><h3>Where the memory goes</h3><table class="causes">{rows}<tr class="total"><th>total</th><td></td><td class="n">{mib_column(total)}</td><td class="n">100%</td></tr></table></div>'


def _top_layers_html(layers: tuple[tuple[int, str, str, int], ...], title: str) -> str:
    if not layers:
        return ""
    rows = "".join(f'<tr><td class="n">{index}</td><td>{escape(name)}</td><td>{escape(kind)}</td><td class="n" title="{size:,} bytes">{mib_column(size)}</td></tr>' for index, name, kind, size in layers)
    return f'<div><h3>The {plural(len(layers), "largest layer")}{escape(title)}</h3><table class="top"><tr><th>#</th><th>layer</th><th>type</th><th>bytes</th></tr>{rows}</table></div>'


def options_text(options: Options, settings=None) -> str:
    """The options a page was made with, as the flags that make it again (``settings``:
    optimize's own, an :class:`~caffemem.api.optimize.OptimizeSettings`)."""
    flags = [f"--phase {options.phase}"] if options.phase else ["--phase (default)"]
    flags += [f"--stage {stage}" for stage in options.stages] + ([f"--level {options.level}"] if options.level is not None else [])
    flags += [
        f"--{'override-input' if name in options.overrides else 'input'} {name}={','.join('_' if d == FROM_FILE else str(d) for d in shape)}" for name, shape in options.inputs.items()
    ]
    flags += [f"--dtype {options.dtype}", f"--device {options.device}", f"--engine {options.build_engine}"] + ([f"--batch {options.batch}"] if options.batch else [])
    flags += ([f"--gpus {options.gpus}"] if options.gpus > 1 else []) + ([f"--context-mib {options.context_bytes // MIB}"] if options.context_bytes is not None else []) + ([f"--card {options.card.file}"] if options.card is not None and options.card.file else []) + ([f"--cuda-stack-bytes {options.card.stack_bytes}"] if options.card is not None and options.card.stack_bytes else [])
    if settings is not None:
        flags += [f"--strategy {settings.strategy}"] + [f"--exclude-blob {blob}" for blob in settings.exclude]
        flags += (["--share-buffers"] if settings.share_buffers else []) + (["--inplace"] if settings.inplace else [])
    return " ".join(flags + ([f"--layers {options.layers_file}"] if options.layers_file else []))


def plan_sections(result) -> tuple[Section, ...]:
    """One section per planned phase (`result`: an optimizer.OptimizeResult), with the
    figures the terminal gives (``PhasePlan.totals``: on the card in GPU mode).  Its
    largest layers are what each layer holds in stock Caffe, never a whole slot."""
    sections = []
    for i, phase in enumerate(result.phases):
        graph, stock, devices, timeline = phase.shaped.graph, phase.stock, phase.devices, phase.timeline
        saved, totals = phase.savings, phase.totals()
        if devices is not None:
            causes = tuple((cause, size) for cause, size in devices.planned.device_by_cause.items() if size)
            largest = tuple((index, layer.name, layer.type, layer.device_total) for index, layer in devices.stock.largest_layers(TOP_LAYERS) if layer.device_total)
        else:
            causes, largest = tuple(phase.planned.parts().items()), top_layers(stock)
        slots = plural(len(phase.plan_data.slot_bytes), "shared slot")
        facts = (
            ("net", f"{graph.name or '(unnamed)'} — {result.path}"),
            ("phase", f"{graph.phase}{_batch(phase.batch)}, {stock.dtype}, {'GPU mode, on one card' if devices is not None else 'CPU mode'}"),
            ("caffemem plan", f"{mib_gib(totals['planned'])} — strategy '{phase.strategy}', {slots}; saves {mib(saved)} ({100 * saved / max(totals['stock'], 1):.1f}%)"),
            ("stock Caffe", mib_gib(totals["stock"]) + (f" (prefetch batches {mib(stock.prefetch_bytes)} included, in every figure)" if stock.prefetch_bytes else "")),
            ("memory-multiloading fork", mib_gib(totals["fork"]) + ("" if phase.fork_safe else " (its plan fails caffemem's verifier)")),
            ("lower bound", mib(totals["lower_bound"])),
            _log_versus_real(stock, totals["stock"], devices is not None),
            _peak_fact(timeline),
        )
        rejected = tuple(f"strategy {name} rejected by the verifier: {why}" for name, why in phase.rejected.items())
        rejected += (recompute_line(phase),) if phase.recompute is not None else ()
        sections.append(
            Section(
                anchor=f"phase{i}",
                title=f"{graph.name or result.path} ({graph.phase})",
                facts=facts,
                timeline=timeline,
                gantt=slot_gantt(timeline, phase.plan_data),
                table=layer_table(phase.shaped, stock, phase.planned, card=(devices.stock, devices.planned) if devices is not None else None),
                notes=rejected + phase.shaped.notes,
                causes=causes,
                top_layers=largest,
                top_title=" in stock Caffe (what each holds; the plan shares their storage in slots)",
                on_card=devices is not None,
            )
        )
    return tuple(sections)


# ----------------------------------------------------------------------------- the page


def chart_data(section: Section) -> dict[str, Any]:
    """What the page's script draws, as JSON (steps, series, peak, Gantt rows)."""
    timeline = section.timeline
    where = " on the card" if section.on_card else ""
    series = [{"name": f"allocated by stock Caffe{where} (frees nothing)", "style": "stock", "values": list(timeline.allocated)}]
    if timeline.planned is not None:
        series.append({"name": f"allocated by the planned run{where}", "style": "planned", "values": list(timeline.planned)})
    series.append({"name": "holding live values (what a run needs)", "style": "live", "values": list(timeline.live)})
    for one in series:  # the legend's figures, formatted as every other figure of the page
        one["end"] = mib(one["values"][-1]) if one["values"] else ""
    peak = timeline.peak_step
    return {
        "steps": list(timeline.step_names),
        "kinds": "".join(kind[0] for kind in timeline.step_kinds),
        "series": series,
        "lowerBound": timeline.lower_bound,
        "lowerBoundText": mib(timeline.lower_bound) if timeline.lower_bound is not None else None,
        "peak": {"step": peak, "bytes": timeline.live[peak], "label": f"peak of live values: {mib(timeline.live[peak])} at step {peak} ({timeline.step_names[peak]})"},
        "gantt": [
            {"label": row.label, "title": row.title, "bytes": row.bytes, "bars": [[b.first, b.last, round(b.top, 5), round(b.height, 5), b.style, b.title] for b in row.bars]}
            for row in section.gantt.rows
        ],
    }


# Inside <script>, "</script" ends the element and "<!--" changes how the rest is parsed
# (HTML's script data escape states); U+2028/U+2029 end a line of JavaScript.  JSON's
# \u escapes write them with no "<" at all and parse back to the same string.
_SCRIPT_SAFE = str.maketrans({"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"})


def _json_for_script(document: dict[str, Any]) -> str:
    """JSON that cannot end its <script> element early and parses back to ``document``
    (the page's script reads it with JSON.parse): outside strings JSON has none of these
    characters, so each is escaped where it stands."""
    return json.dumps(document, separators=(",", ":")).translate(_SCRIPT_SAFE)


def _section_html(section: Section) -> str:
    facts = "".join(f"<dt>{escape(k)}</dt><dd>{escape(v)}</dd>" for k, v in section.facts)
    notes = "".join(f"<li>{escape(note)}</li>" for note in section.notes)
    layers = section.table.count("<tr>") - 2  # the two header rows
    step0 = "Net::Init, the inputs' fill, the prefetch batches and the CUDA context" if section.on_card else "Net::Init, the inputs' fill and the prefetch batches"
    return f"""
<section class="net" id="{section.anchor}">
<h2>{escape(section.title)}</h2>
<dl class="facts">{facts}</dl>
<div class="summary">{_causes_html(section.causes)}{_top_layers_html(section.top_layers, section.top_title)}</div>
<h3>Memory over the run{" on the card" if section.on_card else ""}</h3>
<p class="note">Bytes{" on the card" if section.on_card else ""} after each step: {step0} (step 0), each layer's Forward, then each Backward. Hover for a step's figures.</p>
<div class="chart timeline"></div>
<h3>Storage over time</h3>
<p class="note">{escape(section.gantt.note)} Hover a bar for its blob, bytes and steps.</p>
<div class="chart gantt"></div>
<details open><summary>Per-layer table ({layers} layers)</summary>
<p class="note">MiB each layer's SetUp, Forward and Backward make Caffe allocate, {"on the card by step and on the host in all (a GPU run's figures only)" if section.on_card else "by category and by step"}; hover a figure for its exact bytes, a name for its bottoms.</p>{section.table}</details>
{f'<ul class="notes">{notes}</ul>' if notes else ""}
<script type="application/json" class="data">{_json_for_script(chart_data(section))}</script>
</section>"""


def page(title: str, sections: tuple[Section, ...], made_with: str = "", intro: str = "", caveat: str = "") -> str:
    """The whole document: head (``intro``: a solver's answer; ``caveat``: GPU mode's one
    line), one block per section, the drawing script."""
    nav = " · ".join(f'<a href="#{s.anchor}">{escape(s.title)}</a>' for s in sections) if len(sections) > 1 else ""
    body = "".join(_section_html(s) for s in sections)
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{escape(title)}</title>
<style>{_asset('report.css')}</style>
</head>
<body>
<header><h1>{escape(title)}</h1>{f'<p class="answer">{escape(intro)}</p>' if intro else ""}<p class="note">caffemem {escape(__version__)} — GPU memory of a Caffe net, computed from its definition. {escape(made_with)} {nav}</p>{f'<p class="note caveat">{escape(caveat)}</p>' if caveat else ""}</header>
<noscript><p class="warn">The charts need JavaScript; the tables below do not.</p></noscript>
{body}
<script>{_asset('report.js')}</script>
</body>
</html>
"""


def html_report(subject, options: Options = Options(), settings=None) -> str:
    """The page for an :class:`~caffemem.api.analyze.Analysis` or an
    :class:`~caffemem.api.optimize.OptimizeResult`, with the ``options`` it was made with
    (and ``settings``, the optimize flags it was planned with) on its Options line."""
    made_with = f"Options: {options_text(options, settings)}."
    if isinstance(subject, Analysis):
        devices = [net.device for net in subject.nets if net.device is not None]
        return page(f"Memory of {subject.path}", analysis_sections(subject, options), made_with, process_intro(subject), devices[0].caveat if devices else "")
    devices = [phase.devices.stock for phase in subject.phases if phase.devices is not None]
    return page(f"Memory plan for {subject.path}", plan_sections(subject), made_with, caveat=devices[0].caveat if devices else "")


def _asset(name: str) -> str:
    """A file of ``report/assets`` (package data): the page's style sheet and script."""
    return resources.files("caffemem.report").joinpath("assets").joinpath(name).read_text(encoding="utf-8")

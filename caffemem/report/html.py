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

Everything the page shows is computed here by pure functions over the schedule, the
liveness and the replayed memory reports; the script only draws.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from html import escape
from typing import Any

from caffemem.api.analyze import Analysis, Options, spec_table
from caffemem.graph import ShapedGraph
from caffemem.layers.access import BlobId
from caffemem.passes.liveness import Liveness, lifetimes
from caffemem.passes.memory import CATEGORIES, MemoryReport
from caffemem.passes.schedule import Schedule, StorageClass, build_schedule
from caffemem.plan.verify import PlanData
from caffemem.units import MIB, mib

MAX_SLOT_ROWS = 60  # a plan's Gantt: the largest slots beyond this are summarised
MAX_CLASS_ROWS = 40  # an analysis's Gantt: the largest storage classes only


@dataclass(frozen=True)
class Timeline:
    """Bytes after each step of the run (index = step index)."""

    step_names: tuple[str, ...]
    step_kinds: tuple[str, ...]  # "init", "forward", "backward"
    allocated: tuple[int, ...]  # stock Caffe's running total (it frees nothing)
    planned: tuple[int, ...] | None  # the planned run's running total (slots are never freed either)
    live: tuple[int, ...]  # bytes holding a value a later step reads (private storage counted whole)
    lower_bound: int | None

    @property
    def peak_step(self) -> int:
        """The step where the most bytes hold live values (the first, on a tie)."""
        return max(range(len(self.live)), key=lambda step: (self.live[step], -step))


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


# ----------------------------------------------------------------------------- the series


def allocated_by_step(schedule: Schedule, report: MemoryReport) -> tuple[int, ...]:
    """The running total of the replay's allocations after each step.

    Exact, because the replay charges every byte to the step that allocates it: Net::Init
    and the inputs' fill to step 0, each layer's Forward and Backward to its own step."""
    total, series = 0, []
    for step in schedule.steps:
        if step.layer is None:
            total += report.heap_init + report.input_bytes
        else:
            layer = report.layers[step.layer]
            total += layer.fwd_alloc if step.kind == "forward" else layer.bwd_alloc
        series.append(total)
    return tuple(series)


def live_by_step(liveness: Liveness, allocated: tuple[int, ...]) -> tuple[int, ...]:
    """What a run needs at each step: stock's allocations, with every shareable class
    counted only while it holds a value a later step reads (from its first write to its
    last read) instead of from its first touch to the end."""
    steps = len(allocated)
    started = [0] * (steps + 1)  # shareable bytes stock has allocated by each step
    alive = [0] * (steps + 1)  # shareable bytes live at each step (a difference array)
    for life in liveness.shareable:
        started[life.start] += life.bytes
        for first, last in life.spans:
            alive[first] += life.bytes
            alive[last + 1] -= life.bytes
    series, allocated_shareable, live_shareable = [], 0, 0
    for step in range(steps):
        allocated_shareable += started[step]
        live_shareable += alive[step]
        series.append(allocated[step] - allocated_shareable + live_shareable)
    return tuple(series)


def touched_steps(schedule: Schedule) -> dict[int, tuple[int, int]]:
    """storage class -> (first, last) step that touches it (untouched classes: absent)."""
    seen: dict[int, tuple[int, int]] = {}
    for step in schedule.steps:
        for access in step.accesses:
            first, _ = seen.get(access.storage, (step.index, step.index))
            seen[access.storage] = (first, step.index)
    return seen


def live_spans(liveness: Liveness, touched: dict[int, tuple[int, int]]) -> dict[int, tuple[tuple[int, int], ...]]:
    """Every touched class's live steps: a shareable class's lifetime; a private one's
    whole use, first touch to last."""
    spans = {storage: (span,) for storage, span in touched.items()}
    spans.update({life.storage: life.spans for life in liveness.shareable})
    return spans


def step_range(schedule: Schedule, first: int, last: int) -> str:
    """`steps 3–40 (forward conv1 → backward conv1)`, for hover titles."""
    names = schedule.step_name(schedule.steps[first]), schedule.step_name(schedule.steps[last])
    if first == last:
        return f"step {first} ({names[0]})"
    return f"steps {first}–{last} ({names[0]} → {names[1]})"


def _count(n: int, thing: str) -> str:
    return f"{n} {thing}" + ("" if n == 1 else "s")


def _first_few(names: list[str], shown: int = 8) -> str:
    return ", ".join(names[:shown]) + (f" and {len(names) - shown} more" if len(names) > shown else "")


def _bar_style(storage: StorageClass) -> str:
    return storage.part if storage.kind == "blob" else storage.kind


# ----------------------------------------------------------------------------- the Gantt charts


def storage_of(schedule: Schedule, blob: str, kind: str) -> int | None:
    """The storage class a plan's (blob, data|diff) entry names: a net blob or a buffer."""
    return schedule.class_of.get((BlobId("blob", blob), kind), schedule.class_of.get((BlobId("buffer", blob), kind)))


def slot_gantt(schedule: Schedule, liveness: Liveness, plan: PlanData, max_rows: int = MAX_SLOT_ROWS) -> Gantt:
    """Each slot a row as tall as its bytes, each member a band at its byte offset over
    the steps it is live: free space shows as gaps, reuse as bands side by side."""
    spans = live_spans(liveness, touched_steps(schedule))
    members: dict[int, list[Bar]] = {slot: [] for slot in plan.slot_bytes}
    names: dict[int, list[str]] = {slot: [] for slot in plan.slot_bytes}
    for blob, kind, slot, offset in plan.assign:
        storage = storage_of(schedule, blob, kind)
        if storage is None or storage not in spans or slot not in members:
            continue  # a member no step touches is never allocated: nothing to draw
        names[slot].append(f"{blob} ({kind})")
        size, slot_size = schedule.classes[storage].bytes, max(plan.slot_bytes[slot], 1)
        style = _bar_style(schedule.classes[storage])
        for first, last in spans[storage]:
            title = f"{blob} ({kind}) · {mib(size)} at offset {mib(offset)} of slot {slot} · {step_range(schedule, first, last)}"
            members[slot].append(Bar(first, last, offset / slot_size, size / slot_size, style, title))
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
    note = f"{_count(len(plan.slot_bytes), 'shared slot')} holding {len(plan.assign)} blob parts, {mib(total)} in all; each row's height is in proportion to its slot's bytes, each member drawn at its byte offset over the steps it holds a live value."
    if len(largest) < len(plan.slot_bytes):
        note += f" Showing the {len(largest)} largest slots ({mib(shown)}, {100 * shown / total:.1f}% of the slot bytes)."
    kept = sum(schedule.classes[storage].bytes for storage in liveness.kept)
    note += f" Not drawn: {len(liveness.kept)} storage classes that keep their own storage ({mib(kept)}: parameters, inputs, outputs, losses, excluded blobs, layer buffers)."
    return Gantt(rows, note)


def class_gantt(schedule: Schedule, liveness: Liveness, max_rows: int = MAX_CLASS_ROWS) -> Gantt:
    """The largest storage classes, each a row, in order of first touch: the pale bar is
    what stock Caffe holds (first touch to the end), the dark bars when the bytes hold a
    value a later step still reads — the difference is what `caffemem optimize` reclaims."""
    touched = touched_steps(schedule)
    spans = live_spans(liveness, touched)
    last_step = len(schedule.steps) - 1
    largest = sorted(touched, key=lambda storage: (-schedule.classes[storage].bytes, storage))[:max_rows]
    rows = []
    for storage in sorted(largest, key=lambda storage: (touched[storage][0], storage)):
        cls = schedule.classes[storage]
        kept = liveness.kept.get(storage)
        why = f"keeps its own storage: {kept}" if kept else "shareable"
        held = Bar(touched[storage][0], last_step, 0.1, 0.8, "held", f"{cls.label}: {mib(cls.bytes)} allocated from {step_range(schedule, touched[storage][0], last_step)} ({why})")
        live = tuple(
            Bar(first, last, 0.1, 0.8, _bar_style(cls), f"{cls.label}: {mib(cls.bytes)} {'used' if kept else 'live'} over {step_range(schedule, first, last)} ({why})")
            for first, last in spans[storage]
        )
        members = sorted({f"{blob.name} ({part})" for blob, part in cls.members})
        title = f"{cls.label} · {mib(cls.bytes)} · {cls.kind} storage of {_first_few(members)}"
        rows.append(GanttRow(cls.label, title, cls.bytes, (held,) + live))
    total = sum(schedule.classes[storage].bytes for storage in touched)
    shown = sum(schedule.classes[storage].bytes for storage in largest)
    note = (
        f"The {len(largest)} largest of the {len(touched)} storage classes Caffe allocates ({mib(shown)}, {100 * shown / max(total, 1):.1f}% of their bytes), in order of first touch; "
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


def layer_table(shaped: ShapedGraph, stock: MemoryReport, planned: MemoryReport | None = None) -> str:
    """Every layer: tops with shapes, what its SetUp/Forward/Backward allocated by
    category, and per step (with a plan: the planned run's Forward/Backward too)."""
    headers = ["#", "layer", "type", "tops [shape]", *(c.replace("_", " ") for c in CATEGORIES), "SetUp", "Forward", "Backward"]
    if planned is not None:
        headers += ["Forward, planned", "Backward, planned"]
    rows = []
    for layer, own in zip(shaped.graph.layers, stock.layers):
        tops = "<br>".join(f"{escape(top)} <span class=dim>[{_dims(shaped.blob_shapes[top])}]</span>" for top in layer.tops)
        marks = ' <span class="peak">◀ largest step</span>' if layer.name == stock.peak_layer else ""
        guessed = ' <span class="warn" title="memory rule guessed, not checked against Caffe">?</span>' if not own.verified else ""
        cells = [
            f'<td class="n dim">{layer.index}</td>',
            f'<td title="bottoms: {escape(", ".join(layer.bottoms) or "none")}">{escape(layer.name)}{marks}</td>',
            f"<td>{escape(layer.type)}{guessed}</td>",
            f"<td>{tops}</td>",
            *(_cell(own.by_category[c]) for c in CATEGORIES),
            _cell(own.init),
            _cell(own.fwd_alloc),
            _cell(own.bwd_alloc),
        ]
        if planned is not None:
            mine = planned.layers[layer.index]
            cells += [_cell(mine.fwd_alloc), _cell(mine.bwd_alloc)]
        rows.append("<tr>" + "".join(cells) + "</tr>")
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    return f'<div class="scroll"><table class="layers"><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table></div>'


# ----------------------------------------------------------------------------- sections


def timeline_of(schedule: Schedule, liveness: Liveness, stock: MemoryReport, planned: MemoryReport | None, lower_bound: int | None) -> Timeline:
    """The three series of one run (``planned``/``lower_bound``: with a plan)."""
    allocated = allocated_by_step(schedule, stock)
    return Timeline(
        step_names=tuple(schedule.step_name(step) for step in schedule.steps),
        step_kinds=tuple(step.kind for step in schedule.steps),
        allocated=allocated,
        planned=allocated_by_step(schedule, planned) if planned is not None else None,
        live=live_by_step(liveness, allocated),
        lower_bound=lower_bound,
    )


def _log_versus_real(memory: MemoryReport) -> tuple[str, str]:
    logged, real = memory.memory_required_for_data, memory.total_bytes
    ratio = f"; real is {real / logged:.2f}× the log" if logged else ""
    return ("Caffe's log vs real", f"logs 'Memory required for data: {logged}' ({mib(logged)}); allocates {mib(real)}{ratio}")


def _peak_fact(timeline: Timeline) -> tuple[str, str]:
    peak = timeline.peak_step
    return ("most live values", f"{mib(timeline.live[peak])} at step {peak} ({timeline.step_names[peak]})")


def analysis_sections(analysis: Analysis, options: Options) -> tuple[Section, ...]:
    """One section per net of the file (a solver: its train net and each test net)."""
    specs = spec_table(options)
    sections = []
    for i, net in enumerate(analysis.nets):
        memory = net.memory
        schedule = build_schedule(net.shaped, specs, memory.dtype, options.engine)
        liveness = lifetimes(schedule)
        timeline = timeline_of(schedule, liveness, memory, None, None)
        graph = net.shaped.graph
        role = "" if net.role == "net" else f"{net.role}{f' #{net.index}' if net.role == 'test' else ''} net — "
        facts = (
            ("net", f"{graph.name or '(unnamed)'} — {net.file}"),
            ("phase", f"{graph.phase}, {memory.dtype}, {options.engine} engine"),
            ("Caffe allocates", f"{mib(memory.total_bytes)} (heap {mib(memory.heap_total)}" + (f", prefetch batches {mib(memory.prefetch_bytes)})" if memory.prefetch_bytes else ")")),
            _log_versus_real(memory),
            ("by category", ", ".join(f"{c.replace('_', ' ')} {mib(memory.by_category[c])}" for c in CATEGORIES)),
            _peak_fact(timeline),
        )
        if analysis.process is not None and net.role == "train":
            process = analysis.process
            facts += (("training process", f"{mib(process.total_bytes)}: this net, the {process.solver_type} solver's history and the test nets"),)
        sections.append(
            Section(
                anchor=f"net{i}",
                title=f"{role}{graph.name or net.file} ({graph.phase})",
                facts=facts,
                timeline=timeline,
                gantt=class_gantt(schedule, liveness),
                table=layer_table(net.shaped, memory),
                notes=tuple(dict.fromkeys(analysis.notes + net.notes + net.shaped.notes)),
            )
        )
    return tuple(sections)


def plan_sections(result) -> tuple[Section, ...]:
    """One section per planned phase (`result`: an optimizer.OptimizeResult)."""
    sections = []
    for i, phase in enumerate(result.phases):
        graph, stock = phase.shaped.graph, phase.stock
        timeline = timeline_of(phase.schedule, phase.liveness, stock, phase.planned, phase.lower_bound)
        saved = phase.savings
        facts = (
            ("net", f"{graph.name or '(unnamed)'} — {result.path}"),
            ("phase", f"{graph.phase}, {stock.dtype}"),
            ("stock Caffe", mib(stock.heap_total)),
            ("memory-multiloading fork", mib(phase.fork.heap_total) + ("" if phase.fork_safe else " (its plan fails caffemem's verifier)")),
            ("caffemem plan", f"{mib(phase.planned.heap_total)} — strategy '{phase.strategy}', {_count(len(phase.plan_data.slot_bytes), 'shared slot')}; saves {mib(saved)} ({100 * saved / max(stock.heap_total, 1):.1f}%)"),
            ("lower bound", mib(phase.lower_bound)),
            _log_versus_real(stock),
            _peak_fact(timeline),
        )
        rejected = tuple(f"strategy {name} rejected by the verifier: {why}" for name, why in phase.rejected.items())
        sections.append(
            Section(
                anchor=f"phase{i}",
                title=f"{graph.name or result.path} ({graph.phase})",
                facts=facts,
                timeline=timeline,
                gantt=slot_gantt(phase.schedule, phase.liveness, phase.plan_data),
                table=layer_table(phase.shaped, stock, phase.planned),
                notes=rejected + phase.shaped.notes,
            )
        )
    return tuple(sections)


# ----------------------------------------------------------------------------- the page


def chart_data(section: Section) -> dict[str, Any]:
    """What the page's script draws, as JSON (steps, series, peak, Gantt rows)."""
    timeline = section.timeline
    series = [{"name": "allocated by stock Caffe (frees nothing)", "style": "stock", "values": list(timeline.allocated)}]
    if timeline.planned is not None:
        series.append({"name": "allocated by the planned run", "style": "planned", "values": list(timeline.planned)})
    series.append({"name": "holding live values (what a run needs)", "style": "live", "values": list(timeline.live)})
    peak = timeline.peak_step
    return {
        "steps": list(timeline.step_names),
        "kinds": "".join(kind[0] for kind in timeline.step_kinds),
        "series": series,
        "lowerBound": timeline.lower_bound,
        "peak": {"step": peak, "bytes": timeline.live[peak], "label": f"peak of live values: {mib(timeline.live[peak])} at step {peak} ({timeline.step_names[peak]})"},
        "gantt": [
            {"label": row.label, "title": row.title, "bytes": row.bytes, "bars": [[b.first, b.last, round(b.top, 5), round(b.height, 5), b.style, b.title] for b in row.bars]}
            for row in section.gantt.rows
        ],
    }


def _json_for_script(document: dict[str, Any]) -> str:
    """JSON that cannot end its <script> element early."""
    return json.dumps(document, separators=(",", ":")).replace("</", "<\\/").replace("<!--", "<\\!--")


def _section_html(section: Section) -> str:
    facts = "".join(f"<dt>{escape(k)}</dt><dd>{escape(v)}</dd>" for k, v in section.facts)
    notes = "".join(f"<li>{escape(note)}</li>" for note in section.notes)
    layers = section.table.count("<tr>") - 1
    return f"""
<section class="net" id="{section.anchor}">
<h2>{escape(section.title)}</h2>
<dl class="facts">{facts}</dl>
<h3>Memory over the run</h3>
<p class="note">Bytes after each step: Net::Init and the inputs' fill (step 0), each layer's Forward, then each Backward. Hover for a step's figures. Prefetch batches live outside this heap.</p>
<div class="chart timeline"></div>
<h3>Storage over time</h3>
<p class="note">{escape(section.gantt.note)} Hover a bar for its blob, bytes and steps.</p>
<div class="chart gantt"></div>
<details open><summary>Per-layer table ({layers} layers)</summary>
<p class="note">MiB each layer's SetUp, Forward and Backward make Caffe allocate, by category and by step (hover a figure for its exact bytes).</p>{section.table}</details>
{f'<ul class="notes">{notes}</ul>' if notes else ""}
<script type="application/json" class="data">{_json_for_script(chart_data(section))}</script>
</section>"""


def page(title: str, sections: tuple[Section, ...]) -> str:
    """The whole document: head, one block per section, the drawing script."""
    nav = " · ".join(f'<a href="#{s.anchor}">{escape(s.title)}</a>' for s in sections) if len(sections) > 1 else ""
    body = "".join(_section_html(s) for s in sections)
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{escape(title)}</title>
<style>{_CSS}</style>
</head>
<body>
<header><h1>{escape(title)}</h1><p class="note">caffemem — GPU memory of a Caffe net, computed from its definition. {nav}</p></header>
<noscript><p class="warn">The charts need JavaScript; the tables below do not.</p></noscript>
{body}
<script>{_JS}</script>
</body>
</html>
"""


def html_report(subject, options: Options = Options()) -> str:
    """The page for an :class:`~caffemem.api.analyze.Analysis` (``options``: the ones it was built
    with, for the schedule) or an :class:`~caffemem.api.optimize.OptimizeResult`."""
    if isinstance(subject, Analysis):
        return page(f"Memory of {subject.path}", analysis_sections(subject, options))
    return page(f"Memory plan for {subject.path}", plan_sections(subject))


_CSS = """
:root { --stock:#c8423b; --planned:#23915a; --live:#3b73c8; --data:#3b73c8; --diff:#e07b2e; --param:#8056c4; --buffer:#2f9e8f; --held:#dfe3ea; --bound:#4b5563; --ink:#1d2330; --dim:#6b7280; }
* { box-sizing: border-box; }
body { margin: 0 auto; max-width: 1280px; padding: 16px 24px 48px; font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif; color: var(--ink); background: #fff; }
h1 { font-size: 22px; margin: 8px 0 2px; word-break: break-all; }
h2 { font-size: 19px; margin: 28px 0 8px; padding-top: 12px; border-top: 2px solid #e5e7eb; }
h3 { font-size: 15px; margin: 20px 0 2px; }
.note { color: var(--dim); margin: 2px 0 6px; font-size: 13px; }
.warn { color: #b45309; }
.dim { color: var(--dim); }
.peak { color: var(--stock); font-weight: 600; font-size: 12px; }
dl.facts { display: grid; grid-template-columns: max-content 1fr; gap: 3px 16px; margin: 8px 0; padding: 10px 14px; background: #f6f7f9; border-radius: 6px; }
dl.facts dt { font-weight: 600; }
dl.facts dd { margin: 0; }
.chart { position: relative; width: 100%; }
.chart svg { display: block; width: 100%; height: auto; }
.chart svg text { font: 12px system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif; fill: var(--ink); }
.chart .axis text { fill: var(--dim); font-size: 11px; }
.chart .grid { stroke: #e5e7eb; }
.chart .stock { stroke: var(--stock); fill: none; stroke-width: 2; }
.chart .planned { stroke: var(--planned); fill: none; stroke-width: 2; }
.chart .live { stroke: var(--live); fill: rgba(59,115,200,.16); stroke-width: 1.5; }
.chart .bound { stroke: var(--bound); stroke-dasharray: 6 4; stroke-width: 1; }
.chart .marker { stroke: var(--ink); stroke-dasharray: 3 3; }
.chart .guide { stroke: #9ca3af; }
.chart rect.data { fill: var(--data); } .chart rect.diff { fill: var(--diff); } .chart rect.param { fill: var(--param); }
.chart rect.buffer { fill: var(--buffer); } .chart rect.held { fill: var(--held); }
.chart .bars rect:not(.held) { stroke: #fff; stroke-width: .5; }
.chart .bars rect:hover { opacity: .7; }
.chart .legend { display: flex; flex-wrap: wrap; gap: 4px 18px; font-size: 13px; margin: 4px 0; }
.chart .legend i { display: inline-block; width: 14px; height: 10px; margin-right: 6px; vertical-align: baseline; border-radius: 2px; }
.chart .tip { position: absolute; pointer-events: none; background: rgba(29,35,48,.92); color: #fff; padding: 6px 9px; border-radius: 5px; font-size: 12px; white-space: nowrap; display: none; }
details { margin-top: 18px; }
summary { cursor: pointer; font-weight: 600; font-size: 15px; }
.scroll { overflow-x: auto; }
table.layers { border-collapse: collapse; margin-top: 8px; font-size: 12.5px; width: 100%; }
table.layers th { position: sticky; top: 0; background: #f3f4f6; text-align: left; padding: 4px 6px; border-bottom: 1px solid #d1d5db; }
table.layers td { padding: 3px 6px; border-bottom: 1px solid #eef0f3; vertical-align: top; }
table.layers td.n { text-align: right; white-space: nowrap; font-variant-numeric: tabular-nums; }
table.layers tr:hover td { background: #f9fafb; }
ul.notes { color: var(--dim); font-size: 12.5px; }
"""

_JS = r"""
(function () {
  "use strict";
  var NS = "http://www.w3.org/2000/svg", W = 1200, LEFT = 210, RIGHT = 20;
  var STYLE_NAMES = { data: "data (activations)", diff: "diff (gradients)", param: "parameters", buffer: "layer buffers", held: "allocated, no live value" };

  function svgEl(name, attrs, parent, text) {
    var node = document.createElementNS(NS, name);
    for (var key in attrs) node.setAttribute(key, attrs[key]);
    if (text !== undefined) node.textContent = text;
    if (parent) parent.appendChild(node);
    return node;
  }
  function fmt(bytes) {
    var a = Math.abs(bytes);
    if (a >= 1073741824) return (bytes / 1073741824).toFixed(2) + " GiB";
    if (a >= 1048576) return (bytes / 1048576).toFixed(1) + " MiB";
    if (a >= 1024) return (bytes / 1024).toFixed(1) + " KiB";
    return bytes + " B";
  }
  function niceStep(raw) {
    var mag = Math.pow(10, Math.floor(Math.log10(raw))), steps = [1, 2, 2.5, 5, 10];
    for (var i = 0; i < steps.length; i++) if (steps[i] * mag >= raw) return steps[i] * mag;
    return 10 * mag;
  }
  function scaleX(n) { var span = W - LEFT - RIGHT; return function (s) { return LEFT + span * s / n; }; }
  function legend(host, entries) {
    var box = document.createElement("div");
    box.className = "legend";
    entries.forEach(function (e) {
      var item = document.createElement("span"), swatch = document.createElement("i");
      swatch.style.background = e.color;
      item.appendChild(swatch);
      item.appendChild(document.createTextNode(e.text));
      box.appendChild(item);
    });
    host.appendChild(box);
  }
  // The phases of the run as shaded columns, with the step axis below them.
  function stepAxis(svg, d, x, top, bottom) {
    var n = d.steps.length, g = svgEl("g", { "class": "axis" }, svg);
    var fwd = d.kinds.indexOf("f"), bwd = d.kinds.indexOf("b");
    var regions = [[0, fwd < 0 ? n : fwd, "#eef0f4", "init"], [fwd, bwd < 0 ? n : bwd, "#f7f9fc", "Forward →"], [bwd, n, "#fbf6f1", "← Backward"]];
    regions.forEach(function (r) {
      if (r[0] < 0 || r[1] <= r[0]) return;
      svgEl("rect", { x: x(r[0]), y: top, width: x(r[1]) - x(r[0]), height: bottom - top, fill: r[2] }, g);
      if (r[3] !== "init" || x(r[1]) - x(r[0]) > 30) svgEl("text", { x: x(r[0]) + 4, y: top + 12 }, g, r[3]);
    });
    var every = Math.max(1, niceStep(n / 12));
    for (var s = 0; s < n; s += every) {
      svgEl("line", { x1: x(s + 0.5), x2: x(s + 0.5), y1: bottom, y2: bottom + 4, stroke: "#9ca3af" }, g);
      svgEl("text", { x: x(s + 0.5), y: bottom + 16, "text-anchor": "middle" }, g, String(s));
    }
    svgEl("text", { x: LEFT - 8, y: bottom + 16, "text-anchor": "end" }, g, "step");
    return g;
  }
  function stepPath(values, x, y, n, closed) {
    var p = "M" + x(0) + "," + (closed ? y(0) : y(values[0]));
    for (var s = 0; s < n; s++) p += (closed || s ? "V" + y(values[s]) : "") + "H" + x(s + 1);
    return closed ? p + "V" + y(0) + "Z" : p;
  }

  function drawTimeline(host, d) {
    var n = d.steps.length, H = 340, top = 24, bottom = H - 34, x = scaleX(n), drawn = 0;
    var max = d.lowerBound || 0;
    d.series.forEach(function (s) { s.values.forEach(function (v) { if (v > max) max = v; }); });
    max = max > 0 ? max * 1.06 : 1;
    var y = function (v) { return bottom - (bottom - top) * v / max; };
    var colors = { stock: "var(--stock)", planned: "var(--planned)", live: "var(--live)" };
    legend(host, d.series.map(function (s) {
      return { color: colors[s.style], text: s.name + " — " + fmt(s.values[n - 1]) + " at the end" };
    }).concat(d.lowerBound ? [{ color: "var(--bound)", text: "lower bound for a plan — " + fmt(d.lowerBound) + " (dashed)" }] : []));
    var svg = svgEl("svg", { viewBox: "0 0 " + W + " " + H, role: "img", "aria-label": "bytes after each step" });
    host.appendChild(svg);
    stepAxis(svg, d, x, top, bottom);
    var unit = max >= 1073741824 ? 1073741824 : max >= 1048576 ? 1048576 : max >= 1024 ? 1024 : 1;
    var grid = svgEl("g", { "class": "axis" }, svg), tick = niceStep(max / unit / 6) * unit;
    for (var v = 0; v <= max; v += tick) {
      svgEl("line", { x1: LEFT, x2: W - RIGHT, y1: y(v), y2: y(v), "class": "grid" }, grid);
      svgEl("text", { x: LEFT - 8, y: y(v) + 4, "text-anchor": "end" }, grid, fmt(v));
    }
    d.series.slice().reverse().forEach(function (s) {
      svgEl("path", { d: stepPath(s.values, x, y, n, s.style === "live"), "class": s.style }, svg);
      drawn++;
    });
    if (d.lowerBound) { svgEl("line", { x1: LEFT, x2: W - RIGHT, y1: y(d.lowerBound), y2: y(d.lowerBound), "class": "bound" }, svg); drawn++; }
    var px = x(d.peak.step + 0.5), py = y(d.peak.bytes), right = px > LEFT + (W - LEFT) * 0.6;
    svgEl("line", { x1: px, x2: px, y1: top, y2: bottom, "class": "marker" }, svg);
    svgEl("circle", { cx: px, cy: py, r: 5, fill: "var(--live)", stroke: "#fff", "stroke-width": 2 }, svg);
    var label = svgEl("text", { x: px + (right ? -8 : 8), y: top + 30, "text-anchor": right ? "end" : "start", "font-weight": "600" }, svg, d.peak.label);
    label.setAttribute("paint-order", "stroke");
    label.setAttribute("stroke", "#fff");
    label.setAttribute("stroke-width", "4");
    // Hover: a guide line and the step's figures.
    var guide = svgEl("line", { y1: top, y2: bottom, "class": "guide", visibility: "hidden" }, svg);
    var tip = document.createElement("div");
    tip.className = "tip";
    host.appendChild(tip);
    svg.addEventListener("mousemove", function (ev) {
      var box = svg.getBoundingClientRect(), sx = (ev.clientX - box.left) * W / box.width;
      var s = Math.floor((sx - LEFT) / (W - LEFT - RIGHT) * n);
      if (s < 0 || s >= n) { guide.setAttribute("visibility", "hidden"); tip.style.display = "none"; return; }
      guide.setAttribute("x1", x(s + 0.5)); guide.setAttribute("x2", x(s + 0.5)); guide.setAttribute("visibility", "visible");
      tip.textContent = "";
      [["step " + s + ": " + d.steps[s], true]].concat(d.series.map(function (se) { return [se.name.split(" (")[0] + ": " + fmt(se.values[s]), false]; })).forEach(function (line) {
        var div = document.createElement("div");
        div.textContent = line[0];
        if (line[1]) div.style.fontWeight = "600";
        tip.appendChild(div);
      });
      tip.style.display = "block";
      var hostBox = host.getBoundingClientRect(), left = ev.clientX - hostBox.left + 14;
      if (left + tip.offsetWidth > hostBox.width) left = ev.clientX - hostBox.left - tip.offsetWidth - 14;
      tip.style.left = left + "px";
      tip.style.top = (ev.clientY - hostBox.top + 12) + "px";
    });
    svg.addEventListener("mouseleave", function () { guide.setAttribute("visibility", "hidden"); tip.style.display = "none"; });
    host.setAttribute("data-rendered", String(drawn));
  }

  function drawGantt(host, d) {
    var rows = d.gantt, n = d.steps.length, x = scaleX(n), drawn = 0;
    if (!rows.length) {
      var p = document.createElement("p");
      p.className = "note";
      p.textContent = "Nothing to draw: no storage is shared.";
      host.appendChild(p);
      host.setAttribute("data-rendered", "0");
      return;
    }
    var styles = {};
    rows.forEach(function (r) { r.bars.forEach(function (b) { styles[b[4]] = true; }); });
    legend(host, Object.keys(styles).map(function (s) { return { color: "var(--" + s + ")", text: STYLE_NAMES[s] || s }; }));
    // Heights in proportion to bytes: the largest row at most 220 px, all rows about 720 px.
    var biggest = 1, sum = 0;
    rows.forEach(function (r) { biggest = Math.max(biggest, r.bytes); sum += r.bytes; });
    var perByte = Math.min(220 / biggest, 720 / Math.max(sum, 1));
    var heights = rows.map(function (r) { return Math.max(14, Math.round(r.bytes * perByte)); });
    var top = 22, gap = 3, total = heights.reduce(function (a, b) { return a + b + gap; }, 0), bottom = top + total;
    var svg = svgEl("svg", { viewBox: "0 0 " + W + " " + (bottom + 26), role: "img", "aria-label": "storage lifetimes" });
    host.appendChild(svg);
    stepAxis(svg, d, x, top - 18, bottom);
    var bars = svgEl("g", { "class": "bars" }, svg), rowTop = top;
    rows.forEach(function (r, i) {
      var h = heights[i];
      svgEl("rect", { x: LEFT, y: rowTop, width: W - LEFT - RIGHT, height: h, fill: i % 2 ? "rgba(0,0,0,.025)" : "rgba(0,0,0,.05)" }, svg);
      var text = r.label.length > 30 ? r.label.slice(0, 29) + "…" : r.label;
      var label = svgEl("text", { x: LEFT - 8, y: rowTop + Math.min(h / 2 + 4, 14), "text-anchor": "end" }, svg, text);
      svgEl("title", {}, label, r.title);
      r.bars.forEach(function (b) {
        var rect = svgEl("rect", { x: x(b[0]), y: rowTop + b[2] * h, width: Math.max(1, x(b[1] + 1) - x(b[0])), height: Math.max(1, b[3] * h), "class": b[4] }, bars);
        svgEl("title", {}, rect, b[5]);
        drawn++;
      });
      rowTop += h + gap;
    });
    var px = x(d.peak.step + 0.5);
    svgEl("line", { x1: px, x2: px, y1: top, y2: bottom, "class": "marker" }, svg);
    host.setAttribute("data-rendered", String(drawn));
  }

  document.querySelectorAll("section.net").forEach(function (section) {
    var d = JSON.parse(section.querySelector("script.data").textContent);
    drawTimeline(section.querySelector(".timeline"), d);
    drawGantt(section.querySelector(".gantt"), d);
  });
})();
"""

"""The `check` report in each format: text, JSON, Markdown, GitHub workflow commands and
JUnit XML, each a pure function of the :class:`~caffemem.api.check.Report`."""

from __future__ import annotations

import io
import json
import xml.etree.ElementTree as ElementTree
from collections.abc import Callable

from caffemem._version import __version__
from caffemem.api.check import Report, Row, change_percent, signed
from caffemem.errors import one_line
from caffemem.report.schemas import schema_version
from caffemem.units import mib


def _cell(n: int | None) -> str:
    return "" if n is None else mib(n)


def _change(row: Row) -> str:
    """`+0.64 MiB (+4.8%)` against the baseline, `0 B` unchanged, empty without one."""
    if row.delta is None or row.baseline_bytes is None:
        return ""
    return f"{signed(row.delta)} ({change_percent(row.delta, row.baseline_bytes)})" if row.delta else "0 B"


def _batch(row: Row) -> str:
    """The batch measured, with the baseline's where it differs: `256 → 512`."""
    if row.batch is None:
        return ""
    return f"{row.baseline_batch} → {row.batch}" if row.batch_changed else str(row.batch)


UNWRAPPED = 1 << 14  # the width of a report no terminal or COLUMNS sizes: lines as long as their facts
STATUS_STYLE = {"error": "bold red", "over-budget": "bold red", "grew": "bold red", "shrank": "green", "new": "cyan", "accepted": "yellow"}


def render_text(report: Report, width: int | None = 80, color: bool = False) -> str:
    """The verdict first, then each net's figures (a table where one fits ``width``: with
    the baseline's columns, else without them; else a line each), then what each row's
    figure means, then the verdict again where a CI log ends.  Every line fits ``width``
    (issue 34: at 80 columns the table cut the figures, `1,401.53 …`); None: a line a
    fact, however long."""
    width = width or UNWRAPPED
    from rich.table import Table

    from caffemem.report.terminal import markup, print_titled
    from caffemem.report.wrap import FittingConsole

    out = io.StringIO()
    console = FittingConsole(file=out, width=width, force_terminal=color, color_system="standard" if color else None, highlight=False, emoji=False)
    compared = report.gate.baseline is not None
    console.print(markup(report.summary()))

    def table_of(columns: tuple[str, ...]) -> Table:
        table = Table(header_style="bold")
        for column in columns:
            table.add_column(column, justify="left" if column in ("file", "phase", "status") else "right", no_wrap=True)
        for row in report.rows:
            cells = {"file": markup(row.file), "phase": row.label, "batch": _batch(row), "bytes": _cell(row.bytes), "baseline": _cell(row.baseline_bytes), "change": _change(row)}
            table.add_row(*(cells.get(column, _status(row)) for column in columns))
        return table

    columns = ("file", "phase", "batch", "bytes") + (("baseline", "change") if compared else ()) + ("status",)
    tables = [table_of(columns)] + ([table_of(tuple(c for c in columns if c not in ("baseline", "change")))] if compared else [])
    unbounded = console.options.update_width(1 << 16)  # the width a table needs, not the one it would be squeezed to
    fitting = next((table for table in tables if console.measure(table, options=unbounded).maximum <= width), None)
    if fitting is not None:
        print_titled(console, "caffemem check", fitting)
    else:  # a line a net: the file's name is never cut
        for row in report.rows:
            figures = ", ".join(part for part in (f"batch {_batch(row)}" if row.batch is not None else "", _cell(row.bytes)) if part)
            console.print(f"{markup(row.file)} {row.label}{': ' + figures if figures else ''} — {_status(row)}")
    for row in report.rows:
        if row.message:
            console.print(f"[dim]{markup(row.file)} {row.label}:[/dim] {markup(row.message)}")
    console.print(markup(report.summary()))
    for note in report.notes:
        console.print(f"[yellow]note: {markup(note)}[/yellow]")
    return out.getvalue()


def _status(row: Row) -> str:
    return f"[{STATUS_STYLE.get(row.status, 'green')}]{row.status}[/]"


def render_json(report: Report) -> str:
    """One document: the gate, the verdict and every row with exact bytes."""
    gate = report.gate
    document = {
        "schema_version": schema_version("check"),
        "caffemem": __version__,
        "budget": gate.budget,
        "baseline": gate.baseline.path if gate.baseline else None,
        "tolerance": gate.tolerance,
        "optimized": report.optimized,
        "wrote_baseline": report.wrote_baseline,
        "exit_code": report.exit_code,
        "summary": {"failed": report.failed, "errors": report.errors, "passed": report.passed},
        "notes": list(report.notes),
        "results": [
            {
                "file": row.file,
                "net": row.net,
                "phase": row.phase,
                "batch": row.batch,
                "bytes": row.bytes,
                "budget": row.budget,
                "baseline_bytes": row.baseline_bytes,
                "delta": row.delta,
                "status": row.status,
                "message": row.message,
                "line": row.line,
            }
            for row in report.rows
        ],
    }
    return json.dumps(document, indent=1) + "\n"


# GitHub Markdown (GFM) reads these inside a table cell: a backslash escape, a code span,
# emphasis, strikethrough, a link or an image, a cell's end, math.  Each is written
# backslash-escaped (CommonMark: any ASCII punctuation may be), which shows it as itself.
_MARKDOWN_SPECIAL = frozenset("\\`*_~[]|$")
_MARKDOWN_REPLACED = {"&": "&amp;", "<": "&lt;", ">": "&gt;", "@": "@\u200d"}


def markdown_text(text: str) -> str:
    """User text (a file, a message quoting a layer) as Markdown that shows it as written,
    for a pull-request comment or a job summary: one line (errors.one_line), no raw HTML
    (``<`` as ``&lt;``), no link, image or emphasis, no ``|`` ending a table cell, and no
    ``@mention`` (a zero-width joiner after each ``@``: GitHub links and notifies
    ``@name`` only when a letter or digit follows the ``@``)."""
    return "".join(_MARKDOWN_REPLACED.get(ch) or (f"\\{ch}" if ch in _MARKDOWN_SPECIAL else ch) for ch in one_line(text))


def render_markdown(report: Report) -> str:
    """A pull-request comment: the summary line, then a table with ✅/❌ per row."""
    icon = "✅" if report.exit_code == 0 else "❌"
    lines = [
        f"{icon} **{markdown_text(report.summary())}**",
        "",
        "| | file | phase | batch | bytes | budget | baseline | change | note |",
        "|---|---|---|--:|--:|--:|--:|--:|---|",
    ]
    lines[2:2] = [line for note in report.notes for line in (f"> ⚠️ {markdown_text(note)}", "")]
    for row in report.rows:
        cells = ["✅" if row.ok else "❌", markdown_text(row.file), row.label, _batch(row), _cell(row.bytes), _cell(row.budget), _cell(row.baseline_bytes), _change(row), markdown_text(row.message)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


GITHUB_TITLES = {
    "error": "bad input",
    "over-budget": "over the memory budget",
    "grew": "memory grew beyond the tolerance",
    "shrank": "memory shrank",
    "new": "new net",
    "accepted": "memory growth accepted",
}


def _github_data(text: str) -> str:
    """A workflow command's message: one line (errors.one_line: no CR or LF, so no name
    can start a line, and with it a command of its own; no terminal escape in the log),
    and ``%`` escaped as the runner decodes it (%25)."""
    return one_line(text).replace("%", "%25")


def _github_property(text: str) -> str:
    return _github_data(text).replace(":", "%3A").replace(",", "%2C")


def render_github(report: Report) -> str:
    """GitHub workflow commands: ::error for a failing net or bad input, ::notice for a
    new or shrunk net, at the file and line to look at; then the summary line."""
    lines = []
    for row in report.rows:
        if row.status == "pass":
            continue
        level = "error" if not row.ok else "notice"
        title = f"caffemem: {row.label} {GITHUB_TITLES[row.status]}" if row.phase else f"caffemem: {GITHUB_TITLES[row.status]}"
        lines.append(f"::{level} file={_github_property(row.at_file)},line={row.line},title={_github_property(title)}::{_github_data(row.message)}")
    for note in report.notes:
        lines.append(f"::warning title={_github_property('caffemem: note')}::{_github_data(note)}")
    lines.append(one_line(report.summary()))
    return "\n".join(lines) + "\n"



def render_junit(report: Report) -> str:
    """A JUnit XML report: one testcase per net and phase (a failure when it is over the
    budget or grew, an error for bad input).  Names are written as errors.one_line shows
    them: XML 1.0 has no way to write most control characters, escaped or not."""
    suite = ElementTree.Element(
        "testsuite",
        name="caffemem check",
        tests=str(len(report.rows)),
        failures=str(report.failed),
        errors=str(report.errors),
        skipped="0",
        time="0",
    )
    for row in report.rows:
        message = one_line(row.message)
        case = ElementTree.SubElement(suite, "testcase", classname=one_line(row.file), name=row.label, file=one_line(row.at_file), line=str(row.line), time="0")
        if row.status == "error":
            ElementTree.SubElement(case, "error", message=message, type="bad-input").text = message
        elif not row.ok:
            ElementTree.SubElement(case, "failure", message=message, type=row.status).text = message
        elif message:
            ElementTree.SubElement(case, "system-out").text = f"{row.status}: {message}"
    root = ElementTree.Element("testsuites", name="caffemem", tests=suite.get("tests", "0"), failures=suite.get("failures", "0"), errors=suite.get("errors", "0"))
    root.append(suite)
    ElementTree.indent(root)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ElementTree.tostring(root, encoding="unicode") + "\n"


RENDERERS: dict[str, Callable[[Report], str]] = {
    "text": render_text,
    "json": render_json,
    "markdown": render_markdown,
    "github": render_github,
    "junit": render_junit,
}

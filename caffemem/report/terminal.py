"""The terminal report: an analysis and an optimize result as rich tables, for people.

Entry points: :func:`print_tables` and :func:`print_optimize` (the JSON documents are in
:mod:`caffemem.report.document`).
"""

from __future__ import annotations

from rich.cells import cell_len
from rich.console import Console
from rich.markup import escape as escape_markup
from rich.table import Table
from rich.text import Span, Text

from caffemem.api.analyze import Analysis, DeviceReport, LayerSides, MemoryReport, NetAnalysis
from caffemem.errors import one_line
from caffemem.graph import Shape
from caffemem.report.wrap import wrapped
from caffemem.units import format_flops, mib, mib_column, mib_gib, percent_of, plural, signed_percent


def _dims(shape: Shape) -> str:
    return "×".join(str(d) for d in shape) if shape else "scalar"


def _cell(n: int) -> str:
    return "" if n == 0 else mib_column(n)


def print_tables(analysis: Analysis, console: Console, layers_table: bool | None = None, top: int = 10, fit_table: bool = True) -> None:
    """The answer first: for a solver the training process (train net, solver history,
    test nets), then per net what Caffe will allocate with its batch (prefetch on its own
    line), the largest step, where the memory goes and the ``top`` layers by bytes; then
    the full per-layer table when asked (``layers_table``), or, when not said, when it
    fits the terminal.  In GPU mode every figure is the card's, and what they rest on is
    said once, last.  Every line fits ``console.width``: the full table asked for where it
    is wider, a paragraph per layer (``fit_table`` False: the table as it is, a line a
    layer, for a pipe that gave no width)."""
    if analysis.process is not None:
        _print_process(analysis, console)
    for note in analysis.notes:
        console.print(f"[dim]{markup(note)}[/dim]")
    for net in analysis.nets:
        _print_net(net, console, layers_table, top, fit_table)
    devices = [net.device for net in analysis.nets if net.device is not None]
    if devices:
        console.print(f"[dim]{devices[0].caveat}[/dim]")


def _batch(batch: int | None) -> str:
    return "" if batch is None else f", batch {batch}"


Cell = list[tuple[str, str | None]]  # fragments of text, each with its style (None: the column's)

# The widest a cell of each text column may be: a 300-character layer name (or a Concat of
# twenty blobs) is elided in the middle instead of pushing every row off the screen.
MAX_NAME_CELLS, MAX_TYPE_CELLS, MAX_BLOBS_CELLS, MAX_PARAMS_CELLS = 48, 32, 100, 48
TOP_NAME_CELLS, TOP_TYPE_CELLS = 32, 20  # the summary's top layers fit 80 columns with their bytes


def elide(text: str, width: int) -> str:
    """``text`` in at most ``width`` terminal cells, its middle replaced by "…" (both
    ends of a name tell most: a prefix of a block, a suffix of a branch)."""
    if cell_len(text) <= width:
        return text
    keep = width - 1
    head, tail = text[: (keep + 1) // 2], text[len(text) - keep // 2 :]
    while cell_len(head) + cell_len(tail) > keep:  # wide characters take two cells
        head, tail = (head[:-1], tail) if cell_len(head) >= cell_len(tail) else (head, tail[1:])
    return head + "…" + tail


def shown(text: str, width: int | None = None) -> str:
    """A name (or a note quoting one) from the user's files as the terminal shows it: its
    control characters escaped (errors.one_line), then elided to ``width`` cells."""
    text = one_line(text)
    return text if width is None else elide(text, width)


def markup(text: str, width: int | None = None) -> str:
    """:func:`shown`, to go inside rich markup (console.print's strings, a Table's cells
    and title): rich reads ``[bold]`` in any string it prints, and an unbalanced ``[/]``
    made it raise, so the name's tags are escaped and it prints as written."""
    return escape_markup(shown(text, width))


def print_titled(console: Console, title: str, table: Table, justify: str = "center") -> None:
    """A table under its title (markup), as rich sets one (italic, centred over the table,
    or as ``justify`` says) where it fits the table's width, else a line of its own that
    wraps at the console's: rich wraps a long title to the table's width, mid-phrase,
    and pads every title with spaces (issue 34)."""
    text = Text.from_markup(title, style="italic")
    width = console.measure(table).maximum
    if justify == "center" and text.cell_len < width:
        text = Text(" " * ((width - text.cell_len) // 2)) + text
    console.print(text)
    console.print(table)


def _print_net(net: NetAnalysis, console: Console, layers_table: bool | None, top: int, fit_table: bool = True) -> None:
    graph, memory = net.shaped.graph, net.memory
    title = f"{shown(graph.name or net.file, MAX_BLOBS_CELLS)} — {net.role}{f' #{net.index}' if net.role == 'test' else ''} ({graph.phase}{_batch(net.batch)}, {memory.dtype})"
    console.print(f"[bold]{escape_markup(title)}[/bold]")
    patched = "the patched Caffe" if net.mem_param is not None else ""  # the file's mem_param table applied (its note says so)
    if net.device is not None:
        _print_device(net.device, console, patched)
    else:
        _print_answer(memory, console, patched)
        _print_summary(memory, console)
    _print_top_layers(net, console, top)
    columns, rows = _layer_rows(net)
    texts = list(_table_text(title, columns, rows))
    widest = max(cell_len(line) for text in texts for line in text.plain.splitlines())
    if layers_table and fit_table and widest > console.width:
        _print_layer_paragraphs(title, columns, rows, widest, console)
    elif layers_table or (layers_table is None and console.is_terminal and widest <= console.width):
        for text in texts:
            console.print(text, soft_wrap=True)
    else:
        console.print(f"[dim]every layer's shapes and bytes: --layers-table ({widest} columns wide), or --json[/dim]")
    _print_log_line(net, console)
    for note in net.notes + net.shaped.notes:
        console.print(f"[dim]{markup(note)}[/dim]")


def _print_layer_paragraphs(title: str, columns: list[tuple[str, str, str | None]], rows: list[list[Cell]], widest: int, console: Console) -> None:
    """The per-layer table too wide for the terminal (issue 34: 239 columns at 80): each
    layer a paragraph, its figures named by their column, broken at spaces."""
    console.print(Text(title, style="italic"))
    console.print(Text(f"every layer, one a paragraph (as a table: {widest} columns)", style="dim"))
    for row in rows:
        index, name, kind, blobs, params, *figures = ("".join(fragment for fragment, _ in cell) for cell in row)
        facts = [f"params {params}"] if params else []
        facts += [", ".join(f"{header} {figure}" for (header, _, _), figure in zip(columns[5:], figures) if figure)]
        for line in wrapped("; ".join([f"{index:>4} {name} ({kind}): {blobs}", *filter(None, facts)]), console.width, hang=7):
            console.print(Text(line), soft_wrap=True)


def _print_answer(memory: MemoryReport, console: Console, patched: str = "") -> None:
    """The figures a user came for, in the first lines: the total, prefetch apart, and the
    step that allocates the most (``patched``: the Caffe that runs the file's table)."""
    console.print(f"{(patched or 'Caffe')[:1].upper()}{(patched or 'Caffe')[1:]} will allocate [bold]{mib_gib(memory.total_bytes)}[/bold] for this net ({memory.total_bytes:,} bytes)")
    if memory.prefetch_bytes:
        console.print(f"  of which prefetch batches (data layers' threads): {mib(memory.prefetch_bytes)}")
    if memory.peak_layer is not None:
        index, peak = next((i, b) for i, b in enumerate(memory.layers) if b.name == memory.peak_layer)
        step, allocated = ("Forward", peak.fwd_alloc) if peak.fwd_alloc >= peak.bwd_alloc else ("Backward", peak.bwd_alloc)
        console.print(f"largest step: the {step} of layer {index} '{markup(peak.name, MAX_NAME_CELLS)}' ({markup(peak.type, MAX_TYPE_CELLS)}) allocates {mib(allocated)}")


def _print_device(device: DeviceReport, console: Console, patched: str = "") -> None:
    """GPU mode: what one card holds (the figure of --json's total_bytes: cuDNN workspaces
    at their bound, what it holds without them beside it), the step that puts the most on
    the card, each cause on the device and on the host, then what is counted but not sized."""
    low, high = device.device_bytes_min, device.device_bytes
    bound = f"; {mib(low)} if cuDNN takes no workspace" if low != high else ""
    console.print(
        f"A GPU run{' of ' + patched if patched else ''} holds [bold]{mib_gib(high)}[/bold] on the card ({device.engine} engine{bound}){f', on each of {device.gpus} GPUs' if device.gpus > 1 else ''}"
        f", and {mib(device.host_bytes)} on the host"
    )
    largest = device.largest_step()
    if largest is not None:
        index, stage, allocated = largest
        layer = device.layers[index]
        console.print(f"largest step on the card: the {stage} of layer {index} '{markup(layer.name, MAX_NAME_CELLS)}' ({markup(layer.type, MAX_TYPE_CELLS)}) allocates {mib(allocated)}")
    table = Table(header_style="bold")
    table.add_column("cause")
    table.add_column("device", justify="right")
    table.add_column("host", justify="right")
    for cause, size in device.device_by_cause.items():
        host = device.host_by_cause[cause]
        if size or host:
            label = cause.replace("_", " ") + (" (max)" if cause == "cudnn_workspace" else "") + (" (measured)" if cause == "cuda_context" else "")
            table.add_row(label, _cell(size), _cell(host))
    table.add_row("[bold]total[/bold]", f"[bold]{mib_column(device.device_bytes)}[/bold]", f"[bold]{mib_column(device.host_bytes)}[/bold]")
    print_titled(console, "where the memory goes", table)
    handles = device.handles
    console.print(f"[dim]library handles: {handles.cudnn} cuDNN, {handles.cublas} cuBLAS, {handles.curand} cuRAND (sized as measured, see 'library handles')[/dim]")
    for note in device.notes:
        console.print(f"[dim]{markup(note)}[/dim]")


def _print_top_layers(net: NetAnalysis, console: Console, top: int) -> None:
    layers = net.figures.largest_layers(top)
    if not layers or top <= 0:
        return
    whole = max(net.total_bytes, 1)  # the headline's figure
    where = " on the card" if net.device is not None else ""
    table = Table(header_style="bold", expand=False)
    table.add_column("#", justify="right", style="dim", no_wrap=True)
    table.add_column("layer", overflow="ellipsis", no_wrap=True)
    table.add_column("type", style="cyan", overflow="ellipsis", no_wrap=True)
    table.add_column("bytes", justify="right", no_wrap=True)
    table.add_column("share", justify="right", no_wrap=True)
    for index, layer in layers:
        table.add_row(str(index), markup(layer.name, TOP_NAME_CELLS), markup(layer.type, TOP_TYPE_CELLS), mib_column(layer.total), f"{percent_of(layer.total, whole):.1f}%")
    print_titled(console, f"top {plural(len(layers), 'layer')} by bytes{where}", table, justify="left")


def _layer_rows(net: NetAnalysis) -> tuple[list[tuple[str, str, str | None]], list[list[Cell]]]:
    graph, memory = net.shaped.graph, net.memory
    columns = [("#", "right", "dim"), ("layer", "left", None), ("type", "left", "cyan"), ("bottoms → tops", "left", None), ("params", "left", "magenta")]
    if net.device is None:
        columns += [(column, "right", None) for column in ("outputs", "gradients", "buffers", "parameters", "total")]
    else:  # the GPU run's figures only (issue 34: a CPU run's categories stood beside them)
        columns += [("runs on", "left", "dim"), ("device", "right", None), ("host", "right", None)]
    blobs = net.shaped.blob_shapes
    rows: list[list[Cell]] = []
    for layer, bytes_ in zip(graph.layers, memory.layers):
        bottoms = ", ".join(shown(b) for b in layer.bottoms) or "∅"
        tops = ", ".join(f"{shown(t)} [{_dims(blobs[t])}]" for t in layer.tops) or "∅"
        params = ", ".join(_dims(p) for p in net.shaped.layer_shapes[layer.index].params)
        c = bytes_.by_category
        numbers = (c["activations"], c["activation_gradients"], c["layer_buffers"], c["parameters"] + c["parameter_gradients"], bytes_.total)
        rows.append(
            [
                [(str(layer.index), None)],
                [(shown(layer.name, MAX_NAME_CELLS), None)] + ([(" ◀ peak", "bold red")] if layer.name == memory.peak_layer else []),
                [(shown(layer.type, MAX_TYPE_CELLS), None)] + ([] if bytes_.verified else [(" ?", "yellow")]),
                [(elide(f"{bottoms} → {tops}", MAX_BLOBS_CELLS), None)],
                [(elide(params, MAX_PARAMS_CELLS), None)],
            ]
            + ([[(_cell(n), None)] for n in numbers] if net.device is None else _sides_cells(net.device.layers[layer.index]))
        )
    return columns, rows


def _sides_cells(sides: LayerSides) -> list[Cell]:
    return [[(sides.runs_on, None)], [(_cell(sides.device_total), None)], [(_cell(sides.host_total), None)]]


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
    summary = Table(show_header=False)
    summary.add_column("what")
    summary.add_column("bytes", justify="right")
    for part, size in memory.parts().items():  # they add up to the total
        summary.add_row(part.replace("_", " "), mib(size))
    summary.add_row("[bold]total[/bold]", f"[bold]{mib(memory.total_bytes)}[/bold]")
    print_titled(console, "where the memory goes", summary)
    if memory.unverified_types:
        console.print(f"[yellow]? = memory rule guessed (not checked against Caffe's source) for: {markup(', '.join(memory.unverified_types))}[/yellow]")


def _print_log_line(net: NetAnalysis, console: Console) -> None:
    """Caffe's log figure against the answer above (in GPU mode: the card's)."""
    logged = net.memory.memory_required_for_data
    really = f"a GPU run holds {mib(net.total_bytes)} on the card" if net.device is not None else f"it will really allocate {mib(net.total_bytes)}"
    console.print(
        f"Caffe logs 'Memory required for data: {logged}' ({mib(logged)}); {really}: "
        "the log counts each layer's outputs once (in-place outputs again) and leaves out gradients, parameters and layer buffers."
    )


def _print_process(analysis: Analysis, console: Console) -> None:
    """A solver's answer: the training process while the train net, the solver's history
    and the test nets are all alive (the figure of --json's total_bytes), with each part."""
    process = analysis.process
    assert process is not None
    where = ", on one card" if process.device == "gpu" else ""
    train = next(net for net in analysis.nets if net.role == "train")
    tests = [net for net in analysis.nets if net.role == "test"]
    batches = [f"train batch {train.batch}"] if train.batch is not None else []
    batches += [f"test{f' #{net.index}' if len(tests) > 1 else ''} batch {net.batch}" for net in tests if net.batch is not None]
    console.print(f"[bold]Training{' on one card' if where else ''}: {mib_gib(process.total_bytes)}[/bold]" + (f" — {', '.join(batches)}" if batches else ""))
    table = Table(show_header=False)
    table.add_column("what")
    table.add_column("bytes", justify="right")
    table.add_row("train net (with every parameter gradient cleared)", mib(process.train_bytes))
    table.add_row(f"solver history ({markup(process.solver_type)})", mib(process.history_bytes))
    for test in process.tests:
        table.add_row(f"test net #{test.index}", mib(test.bytes))
    table.add_row("[bold]total while all are alive[/bold]", f"[bold]{mib(process.total_bytes)}[/bold]")
    print_titled(console, f"training process ({markup(process.solver_type)} solver{where})", table)
    for test in process.tests:
        console.print(f"[dim]test net #{test.index}: {markup(test.note)}[/dim]")
    for note in process.notes:
        console.print(f"[dim]{markup(note)}[/dim]")


# ----------------------------------------------------------------------------- optimize


def _print_inplace(inplace, console: Console) -> None:
    """--inplace: the layers rewritten, then those of an in-place type left alone, and why."""
    if inplace.rewrites:
        table = Table(header_style="bold")
        for column in ("layer", "type", "top was", "now"):
            table.add_column(column, style="cyan" if column == "type" else None)
        for rewrite in inplace.rewrites:
            table.add_row(markup(rewrite.layer), markup(rewrite.type), markup(rewrite.top_was), markup(rewrite.now))
        print_titled(console, f"in place: {plural(len(inplace.rewrites), 'layer')} rewritten", table)
    else:
        console.print("in place: no layer rewritten")
    for kept in inplace.kept:
        console.print(f"[dim]kept {markup(kept.layer)} ({markup(kept.type)}) as written: {markup(kept.reason)}[/dim]")
    for note in inplace.notes:
        console.print(f"[yellow]{markup(note)}[/yellow]")


def recompute_line(phase) -> str:
    """optimize --recompute: what was recomputed, what it saves against the same plan without
    recomputation (its lower bound), and the extra Forward work."""
    choice = phase.recompute
    policy = choice.policy.describe()
    if not choice.recomputed:
        return f"--recompute {policy}: nothing recomputed (no recomputation lowers this plan: {phase.phase} needs no Backward, or every layer it could run again is kept or may not run twice)"
    gained = choice.plain_figure - phase.totals()["lower_bound"]
    restored = f"; the parameters of {plural(len({e.layer for e in choice.recomputed if e.restore_params}), 'layer')} saved and restored around it ({mib(choice.saved_param_bytes)})" if choice.saved_param_bytes else ""
    return (
        f"--recompute {policy}: {plural(len(choice.recomputed), 'Forward')} run again in Backward, {mib(gained)} below the plan without recomputation "
        f"(lower bounds {mib(choice.plain_figure)} → {mib(phase.totals()['lower_bound'])}), for {format_flops(choice.extra_flops)} more "
        f"({percent_of(choice.extra_flops, choice.forward_flops):.1f}% of a Forward pass){restored}; "
        f"{time_words(choice)}."
    )


def time_words(choice) -> str:
    """The estimated time ratio of a recomputation and what the estimate rests on
    (plan/timing.py)."""
    return f"estimated {choice.time_ratio:.2f}× the seconds of an iteration without it ({choice.extra_seconds * 1e3:,.1f} ms more of {choice.iteration_seconds * 1e3:,.1f} ms; time model {choice.time_model})"


def print_optimize(result, console: Console) -> None:
    """Per phase the answer first (the plan against stock Caffe and the fork, with the
    batch), then the table and the peak; --inplace's rewrites after the figures."""
    for phase in result.phases:
        totals = phase.totals()
        stock = totals["stock"]
        where = f", on the card ({phase.devices.stock.engine} engine)" if phase.devices is not None else ""
        slots = len(phase.plan_data.slot_bytes)
        console.print(
            f"[bold]{phase.phase}{_batch(phase.batch)}{', on one card' if phase.devices is not None else ''}: caffemem's plan {mib_gib(totals['planned'])}[/bold]"
            f" against stock Caffe's {mib_gib(stock)} and the memory-multiloading fork's (yjxiong/caffe) {mib_gib(totals['fork'])}"
        )
        table = Table(show_header=True, header_style="bold")
        table.add_column("")
        table.add_column("bytes", justify="right")
        table.add_column("vs stock", justify="right")
        rows = [("stock Caffe", stock), ("memory-multiloading fork", totals["fork"]), ("caffemem plan", totals["planned"]), ("lower bound", totals["lower_bound"])]
        if phase.as_given is not None:
            rows[0] = ("stock Caffe, layers in place", stock)
            rows.insert(0, ("stock Caffe, file as given", phase.as_given))
        base = rows[0][1]
        for label, value in rows:
            table.add_row(label, mib(value), signed_percent(value - base, base))
        print_titled(console, f"{markup(str(result.path))} — {phase.phase}{where}: plan '{phase.strategy}', {plural(slots, 'shared slot')}", table)
        if phase.stock.prefetch_bytes:
            console.print(f"every figure includes the prefetch batches ({mib(phase.stock.prefetch_bytes)}, the same in every plan)")
        saved = phase.savings
        console.print(f"saves {mib(saved)} ({percent_of(saved, stock):.1f}%) against stock Caffe, {mib(totals['fork'] - totals['planned'])} against the fork; {percent_of(totals['planned'] - totals['lower_bound'], totals['lower_bound']):.2f}% above the lower bound.")
        pool = phase.devices.pool_line if phase.devices is not None else None
        if pool is not None:
            console.print(pool)
        if phase.recompute is not None:
            console.print(recompute_line(phase))
        peak = phase.peak
        if peak.at is not None:
            alive = peak.alive
            named = ", ".join(alive[:12]) + (f" and {len(alive) - 12} more" if len(alive) > 12 else "")
            console.print(f"peak of shared storage at step {peak.step} ({markup(peak.at)}): {markup(named) or 'nothing'}")
        if not phase.fork_safe:
            console.print("[yellow]the fork's own plan fails caffemem's verifier on this net (see `caffemem verify`)[/yellow]")
        for name, why in phase.rejected.items():
            console.print(f"[yellow]strategy {name} rejected by the verifier: {markup(why)}[/yellow]")
    if result.inplace is not None:
        _print_inplace(result.inplace, console)
    devices = [phase.devices.stock for phase in result.phases if phase.devices is not None]
    if devices:
        console.print(f"[dim]{devices[0].caveat}[/dim]")

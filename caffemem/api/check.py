"""`caffemem check` as an API: the memory-budget gate for a model repository's CI.

A gate must say the same thing on every clone and every run, and must never hide one
net's result behind another's problem.  So the steps are pure functions over plain data:
:func:`collect_files` (paths, folders, globs → files) → :func:`check_file` (one file →
one :class:`Measurement` per net and phase, or a :class:`Problem` for bad input) →
:func:`judge` (against the budget and the committed :class:`Baseline`) → a
:class:`Report` that each renderer turns into text, JSON, Markdown, GitHub workflow
commands or JUnit XML.
"""

from __future__ import annotations

import fnmatch
import glob
import json
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field, replace
from decimal import Decimal, InvalidOperation
from pathlib import Path

from caffemem._version import __version__
from caffemem.api.analyze import Options, analyze, load_source, net_phases, spec_table
from caffemem.api.config import CheckConfig
from caffemem.errors import CaffememError, Location, excerpt
from caffemem.passes.load import NetSource, SolverSource
from caffemem.passes.memory import MemoryReport
from caffemem.passes.upgrade import upgrade_net, upgrade_solver
from caffemem.prototxt.read import HEAD_BYTES, looks_binary, read_input
from caffemem.userfiles import forget_reads, note_reads, reads
from caffemem.prototxt.textmap import top_level_blocks
from caffemem.units import DTYPE_BYTES, mib, signed_percent

NET_PATTERN = "*.prototxt"  # what a folder is searched for
BASELINE_FORMAT = 1

# ----------------------------------------------------------------------------- flag values

def parse_tolerance(text: str) -> float:
    """`2%` or `0.02` → 0.02.  A bare number above 1 is refused: `2` is surely not 200%."""
    raw = text.strip()
    percent = raw.endswith("%")
    try:
        value = Decimal(raw[:-1] if percent else raw)
    except InvalidOperation:
        value = Decimal(-1)
    fraction = value / 100 if percent else value
    if not value.is_finite() or value < 0 or (not percent and value > 1):
        raise CaffememError(f"--tolerance '{text}': expected a percentage such as 2% or a fraction such as 0.02")
    return float(fraction)


def percent(fraction: float) -> str:
    """0.02 → `2%`, 0.025 → `2.5%`."""
    return f"{fraction * 100:.4g}%"


# ----------------------------------------------------------------------------- files


@dataclass(frozen=True)
class Measurement:
    """The bytes of one net of a file in one phase (a solver: its training process, or
    one of its test nets)."""

    file: str
    net: str  # "net"; a solver's "process" or "testK"
    phase: str
    bytes: int
    # Each layer's bytes and the line it starts on, keyed by name (a repeated name gets
    # "#2", "#3"...): a change of the total is explained by the layers that changed.
    layers: tuple[tuple[str, int, int | None], ...] = ()
    batch: int | None = None  # the batch measured (a process: its train net's), as analyze states it
    budget: int | None = None  # this file's own budget (a config file's entry); None: the run's
    batch_at: tuple[str, int] | None = None  # the file and line that state the batch (a batch change points there)

    @property
    def key(self) -> str:
        """The entry's name inside its file's baseline record."""
        return self.phase if self.net == "net" else f"{self.net}:{self.phase}"


@dataclass(frozen=True)
class Problem:
    """Bad input: the file (or path) could not be measured, and where to look."""

    file: str
    phase: str | None
    message: str
    at_file: str  # the file the problem is in (a solver's net file, say)
    line: int

    @property
    def key(self) -> str:
        return self.phase or "file"


Outcome = Measurement | Problem


def collect_files(paths: Sequence[str]) -> list[str | Problem]:
    """Files named, found in folders (every *.prototxt, hidden folders skipped) or matched
    by globs, each once and in the order given; a path that names nothing is a Problem."""
    found: list[str | Problem] = []
    seen: set[str] = set()

    def add(file: str) -> None:
        real = os.path.realpath(file)  # two links to one file: checked once
        if real not in seen:
            seen.add(real)
            found.append(file)

    for path in paths:
        if os.path.isdir(path):
            files = _nets_under(path)
            missing = f"no {NET_PATTERN} file in this folder"
        elif not os.path.exists(path) and glob.has_magic(path):
            matches = expand_glob(path)
            files = [f for match in matches for f in (_nets_under(match) if os.path.isdir(match) else [match])]
            missing = "no file matches this pattern"
        else:
            files, missing = [path], ""
        for file in files:
            add(file)
        if not files:
            found.append(Problem(path, None, missing, path, 1))
    return found


def expand_glob(pattern: str) -> list[str]:
    """``sorted(glob.glob(pattern, recursive=True))``, except that each real folder is
    searched once for each part of the pattern.  glob follows symbolic links, so under
    ``g/**`` two links back to their folder (``g/l1 -> .``, ``g/l2 -> .``) never ended,
    and one gave each file 41 times (until the path grew too long); here a folder reached
    again, by any path, is skipped.  As in glob, ``*`` and ``**`` skip hidden names."""
    absolute = pattern.startswith(os.sep)
    parts = [part for part in pattern.split(os.sep) if part]
    matches: list[str] = []
    searched: set[tuple[int, int, int]] = set()

    def search(path: str, i: int) -> None:
        if i == len(parts):
            matches.append(path)
            return
        part, here, last = parts[i], path or os.curdir, i == len(parts) - 1
        if part == "**":
            folder = _identity(here)
            if folder is None or (*folder, i) in searched:
                return
            searched.add((*folder, i))
            search(path, i + 1)  # ** matches no folder too
            for name, is_folder in _entries(here, hidden=False):
                if is_folder:
                    search(os.path.join(path, name), i)
                elif last:
                    matches.append(os.path.join(path, name))
        elif not glob.has_magic(part):
            following = os.path.join(path, part)
            if os.path.lexists(following) if last else os.path.isdir(following):
                search(following, i + 1)
        else:
            for name, is_folder in _entries(here, hidden=part.startswith(".")):
                if fnmatch.fnmatchcase(name, part) and (last or is_folder):
                    search(os.path.join(path, name), i + 1)

    search(os.sep if absolute else "", 0)
    return sorted(set(matches))


def _identity(folder: str) -> tuple[int, int] | None:
    """The folder a path leads to (device, inode), or None where it leads nowhere."""
    try:
        status = os.stat(folder)
    except OSError:
        return None
    return (status.st_dev, status.st_ino) if os.path.isdir(folder) else None


def _entries(folder: str, hidden: bool) -> list[tuple[str, bool]]:
    """(name, is a folder, links followed) of each entry, in name order."""
    try:
        with os.scandir(folder) as scan:
            entries = list(scan)
    except OSError:
        return []
    found = []
    for entry in sorted(entries, key=lambda e: e.name):
        if hidden or not entry.name.startswith("."):
            try:
                found.append((entry.name, entry.is_dir()))
            except OSError:
                found.append((entry.name, False))
    return found


def _nets_under(folder: str) -> list[str]:
    nets: list[str] = []
    for root, folders, files in os.walk(folder):
        folders[:] = sorted(f for f in folders if not f.startswith("."))
        nets += [os.path.join(root, f) for f in sorted(files) if fnmatch.fnmatch(f, NET_PATTERN)]
    return nets


# ----------------------------------------------------------------------------- measuring


@dataclass(frozen=True)
class CheckSettings:
    """How every file is measured: the net options (phase, inputs, layers) and whether
    the figure is caffemem's optimized plan instead of stock Caffe's footprint."""

    options: Options = Options()
    optimized: bool = False
    config: CheckConfig | None = None  # the repository's per-file settings (caffemem.toml)
    budget: int | None = None  # --budget (the config's budgets apply where it is None)


def check_file(path: str, settings: CheckSettings) -> tuple[Outcome, ...]:
    """Every net and phase of one file, measured; bad input becomes a Problem (a phase
    that fails does not hide the phase that builds)."""
    if not isinstance(path, (str, os.PathLike)):
        raise CaffememError(f"check_file: {excerpt(repr(path))} is not a path")
    path = os.fspath(path)
    try:
        options, budget = settings.config.settings_for(path, settings.options, settings.budget) if settings.config else (settings.options, None)
        source = load_source(path, options)
        options = replace(options, inputs=_inputs_named_in(source, options.inputs))
        if isinstance(source, SolverSource):
            return tuple(replace(outcome, budget=budget) if isinstance(outcome, Measurement) else outcome for outcome in _check_solver(path, source, options, settings.optimized))
        phases = [options.phase] if options.phase else _phases_of(source, options)
    except (CaffememError, RecursionError) as error:
        return (problem_of(path, None, error),)
    outcomes: list[Outcome] = []
    for phase in phases:
        try:
            outcomes.append(replace(_net_measurement(path, replace(options, phase=phase), settings.optimized), budget=budget))
        except (CaffememError, RecursionError) as error:
            outcomes.append(problem_of(path, phase, error))
    return tuple(outcomes)


def _phases_of(source: NetSource, options: Options) -> list[str]:
    """Every phase a net has: TRAIN and TEST for a net that trains, TEST for deploy."""
    upgraded, _ = upgrade_net(source.proto, source.file)
    return net_phases(upgraded, spec_table(options), options)


def _net_measurement(path: str, options: Options, optimized: bool) -> Measurement:
    """Stock Caffe's whole footprint, or that of caffemem's plan (planned heap + prefetch),
    with every layer's share."""
    net = analyze(path, options).nets[0]
    report = _memory_reports([net], options, optimized)[0]
    return Measurement(path, "net", options.phase or net.phase, report.total_bytes, layer_figures(net.shaped, report), net.batch, batch_at=_batch_at(net, options))


def _batch_at(net, options: Options) -> tuple[str, int] | None:
    """Where the net's file states its batch (plan/rewrite.py ``batch_line``), or None."""
    from caffemem.plan.rewrite import batch_line
    from caffemem.prototxt.write import read_exact

    source = load_source(net.file, options)
    if not isinstance(source, NetSource) or source.binary:
        return None
    line = batch_line(read_exact(net.file), net.shaped, spec_table(options), source.proto, net.file)
    return None if line is None else (net.file, line)


def layer_figures(shaped, report: MemoryReport) -> tuple[tuple[str, int, int | None], ...]:
    """(key, bytes, line) per layer; the key is the layer's name, "#k" added to the k-th
    layer of a repeated name (Caffe accepts repeats and unnamed layers)."""
    seen: dict[str, int] = {}
    figures = []
    for layer, bytes_ in zip(shaped.graph.layers, report.layers):
        seen[layer.name] = seen.get(layer.name, 0) + 1
        key = layer.name if seen[layer.name] == 1 else f"{layer.name}#{seen[layer.name]}"
        figures.append((key, bytes_.total, layer.line))
    return tuple(figures)


def _check_solver(path: str, source: SolverSource, options: Options, optimized: bool) -> tuple[Outcome, ...]:
    """TRAIN (or no --phase): the training process — train net, solver history and test
    nets, all alive at once; --phase TEST: each test net on its own."""
    if options.phase == "TEST":
        analysis = analyze(path, options)
        reports = _memory_reports(analysis.nets, options, optimized)
        return tuple(Measurement(path, f"test{net.index}", "TEST", report.total_bytes, layer_figures(net.shaped, report), net.batch) for net, report in zip(analysis.nets, reports))
    analysis = analyze(path, replace(options, phase=None))
    process = analysis.process
    reports = _memory_reports(analysis.nets, options, optimized)
    if optimized:
        from caffemem.passes.solver import solver_footprint

        solver, _ = upgrade_solver(source.proto, source.file)
        pairs = [(net.shaped, report) for net, report in zip(analysis.nets, reports)]
        process = solver_footprint(solver, pairs[0], pairs[1:], DTYPE_BYTES[options.dtype])
    assert process is not None  # a TRAIN analysis of a solver always has its process
    train = analysis.nets[0]
    return (Measurement(path, "process", "TRAIN", process.total_bytes, layer_figures(train.shaped, reports[0]), train.batch, batch_at=_batch_at(train, options)),)  # the train net's layers


def _memory_reports(nets, options: Options, optimized: bool) -> list[MemoryReport]:
    """Each net's figures (a file carrying a slot table: as the patched Caffe runs it, its
    recompute entries honoured), or with --optimized caffemem's plan of a net that
    carries none."""
    if not optimized:
        return [net.figures for net in nets]
    from caffemem.api.optimize import planned_report

    specs = spec_table(options)
    return [net.figures if net.mem_param is not None else planned_report(net.shaped, specs, options) for net in nets]


def _inputs_named_in(source: NetSource | SolverSource, inputs: Mapping[str, tuple[int, ...]]) -> dict[str, tuple[int, ...]]:
    """The --input shapes that concern this file: one flag set serves a whole folder of
    nets, so a name no layer of this file produces is someone else's input."""
    nets = [source.train] + [test.net for test in source.tests] if isinstance(source, SolverSource) else [source]
    names = {top for net in nets for layer in list(net.proto.layer) + list(net.proto.layers) for top in layer.top}
    names |= {name for net in nets for name in net.proto.input}
    return {key: shape for key, shape in inputs.items() if key.rpartition(":")[2] in names}


def problem_of(path: str, phase: str | None, error: CaffememError | RecursionError) -> Problem:
    """A Problem pointing at the file and line of the error (the layer's line when the
    error names only the layer; line 1 when it names neither)."""
    if isinstance(error, RecursionError):
        error = CaffememError("the input nests too deeply to be a Caffe definition", Location(file=path))
    where = error.where
    at_file = where.file or path
    line = where.line or (_layer_line(at_file, where.layer) if where.layer else None) or 1
    elsewhere = os.path.abspath(at_file) != os.path.abspath(path)
    position = (display_path(at_file) + (f":{where.line}" if where.line else "")) if elsewhere else (f"line {where.line}" if where.line else "")
    layer = Location(layer=where.layer, layer_type=where.layer_type).describe()
    prefix = ": ".join(part for part in (position, layer) if part)
    return Problem(path, phase, f"{prefix}: {error.message}" if prefix else error.message, display_path(at_file), line)


def _layer_line(file: str, layer: str) -> int | None:
    """The line of a layer named in a message that gave none, read as every input is (a
    binary net has no lines: it is not tokenized as text)."""
    try:
        data = read_input(file)
    except CaffememError:
        return None
    if looks_binary(data[:HEAD_BYTES]):
        return None
    text = data.decode("utf-8", errors="replace")
    return next((block.line for block in top_level_blocks(text) if block.name == layer), None)


def display_path(file: str) -> str:
    """Paths under the working directory relative to it (what CI annotations want)."""
    relative = os.path.relpath(os.path.abspath(file))
    return relative if not relative.startswith("..") else file


def check_files(targets: Sequence[str | Problem], settings: CheckSettings, jobs: int = 1, advance: Callable[[], None] | None = None) -> tuple[Outcome, ...]:
    """Every file's outcomes, in the order of `targets` whatever the number of `jobs`;
    `advance` is called once per file as it finishes (a progress bar)."""
    files = [target for target in targets if isinstance(target, str)]
    by_file: dict[str, tuple[Outcome, ...]] = {}
    if jobs <= 1 or len(files) <= 1:
        for file in files:
            by_file[file] = check_file(file, settings)
            if advance:
                advance()
    else:
        with _signals_answered_once() as stopping:
            pool = ProcessPoolExecutor(max_workers=min(jobs, len(files)), initializer=_leave_interrupts_to_the_parent)
            try:
                with _interrupts_held():  # the workers fork while submitting
                    futures = {pool.submit(_check_file_in_worker, file, settings): file for file in files}
                for future in as_completed(futures):
                    by_file[futures[future]], read_there = future.result()
                    note_reads(read_there)
                    if advance:
                        advance()
            except BaseException:  # Ctrl-C, an error: stop the workers now, not after their current file
                stopping()
                _stop_workers(pool)
                raise
            pool.shutdown()
    return tuple(outcome for target in targets for outcome in ((target,) if isinstance(target, Problem) else by_file[target]))


def _check_file_in_worker(file: str, settings: CheckSettings) -> tuple[tuple[Outcome, ...], frozenset[tuple[int, int]]]:
    """check_file in a worker process, with the files it read: the parent notes them, so
    that no report lands on a source or a list a worker read."""
    forget_reads()
    return check_file(file, settings), reads()


def _stop_workers(pool: ProcessPoolExecutor) -> None:
    """Kill the pool's workers and wait for its manager thread (quick: its workers are
    gone); left running, Python 3.10's exit hook wakes it through a pipe already closed
    and prints "Exception ignored ... Bad file descriptor" after our one line.  A Ctrl-C
    that lands inside concurrent.futures' own locking (as_completed's waiter) can leave a
    lock it then releases again ("release unlocked lock"): the workers are gone either
    way, and the interrupt, not that, is what the user gets."""
    for worker in list((getattr(pool, "_processes", None) or {}).values()):  # (shutdown forgets them)
        worker.kill()  # SIGKILL: the workers ignore SIGTERM, which the parent answers
    try:
        pool.shutdown(wait=True, cancel_futures=True)
    except RuntimeError:
        pass


@contextmanager
def _signals_answered_once() -> Iterator[Callable[[], None]]:
    """While check_files runs its workers, Ctrl-C (SIGTERM, SIGHUP) raises once; from then
    on, or once the caller says it is `stopping` (an error), a further signal is only
    noted until the workers are stopped.  Ctrl-C reaches the whole process group, so a
    second one is common (the user's second press, or every worker's own): raised while
    the parent killed its workers, it skipped the rest, and the parent, its one line
    printed, then waited at exit for a worker still measuring its file (CI under load: a
    test's worker asleep for 30 s).  A signal noted while stopping after an error is
    delivered once the workers are gone: Ctrl-C still wins over the error."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():  # only the main thread gets signals
        yield lambda: None
        return
    state = {"answered": False, "stopping": False}
    noted: list[int] = []
    previous: dict[int, Callable] = {}

    def once(number: int, frame: object) -> None:
        if state["answered"] or state["stopping"]:
            noted.append(number)
            return
        try:
            previous[number](number, frame)  # KeyboardInterrupt, or Terminated
        except BaseException:
            state["answered"] = True
            raise

    for name in ("SIGINT", "SIGTERM", "SIGHUP"):
        number = getattr(signal, name, None)
        if number is not None and callable(signal.getsignal(number)):  # not SIG_IGN (nohup, `&`), SIG_DFL
            previous[number] = signal.signal(number, once)
    try:
        yield lambda: state.update(stopping=True)
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
        if noted and not state["answered"]:
            signal.raise_signal(noted[0])


@contextmanager
def _interrupts_held() -> Iterator[None]:
    """Hold Ctrl-C while the pool forks its workers, then deliver it (to the handler
    before this one: raised, or ignored where SIGINT is ignored): a worker forked with
    Python's default handler and interrupted before its initializer ran printed "Process
    ForkProcess-2:" and the start of a traceback beside our one line.  Forked under this
    handler, a worker only notes the signal, until the initializer ignores it."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():  # only the main thread gets signals
        yield
        return
    held: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda number, frame: held.append(number))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if held:
        signal.raise_signal(signal.SIGINT)


def _leave_interrupts_to_the_parent() -> None:
    """A worker of check_files: Ctrl-C reaches the terminal's whole process group, and the
    parent alone answers it (one line, exit 130) and stops the workers; a worker's own
    KeyboardInterrupt would print its traceback and break the pool."""
    import signal

    for name in ("SIGINT", "SIGTERM", "SIGHUP"):  # the parent ends the workers (kill) when it must
        if hasattr(signal, name):
            signal.signal(getattr(signal, name), signal.SIG_IGN)


# ----------------------------------------------------------------------------- baseline


@dataclass(frozen=True)
class BaselineEntry:
    bytes: int
    caffemem: str  # the version that measured it: a new model of Caffe may move figures
    budget: int | None = None
    layers: Mapping[str, int] = field(default_factory=dict)  # per layer (empty in older baselines)
    batch: int | None = None  # the batch measured (None in older baselines)


@dataclass(frozen=True)
class Baseline:
    """The committed figures, per file (relative to the baseline's folder) and entry key."""

    path: str
    optimized: bool = False
    nets: Mapping[str, Mapping[str, BaselineEntry]] = field(default_factory=dict)
    device: str = "cpu"  # --device it was measured with (baselines before GPU mode: cpu)

    def measured_as(self, optimized: bool, device: str) -> bool:
        """Were these figures measured the way a run with these flags measures?"""
        return (self.optimized, self.device) == (optimized, device)

    def key_of(self, file: str) -> str:
        """A file's name in the baseline: relative to its folder, so any clone agrees."""
        folder = os.path.dirname(os.path.abspath(self.path))
        return Path(os.path.relpath(os.path.abspath(file), folder)).as_posix()

    def entry(self, outcome: Outcome) -> BaselineEntry | None:
        return self.nets.get(self.key_of(outcome.file), {}).get(outcome.key)


def read_baseline(path: str, optimized: bool, missing_ok: bool = False, device: str = "cpu") -> Baseline:
    """The committed baseline; it must have been measured the way this run measures."""
    where = Location(file=path)
    if missing_ok and not os.path.lexists(path):
        return Baseline(path, optimized, device=device)
    try:
        document = json.loads(read_input(path, what="baseline file").decode("utf-8"))
    except CaffememError as error:
        if error.message == "file not found":
            raise CaffememError("baseline file not found (create it with --update-baseline)", where) from None
        raise
    except ValueError as error:
        raise CaffememError(f"cannot read the baseline as JSON: {error}", where) from None
    try:
        if document.get("format") != BASELINE_FORMAT:
            raise ValueError(f"unknown format {document.get('format')!r}")
        nets = {
            file: {
                key: BaselineEntry(
                    _count(e["bytes"]),
                    str(e["caffemem"]),
                    None if e.get("budget") is None else _count(e["budget"]),
                    {str(k): _count(v) for k, v in e.get("layers", {}).items()},
                    None if e.get("batch") is None else _count(e["batch"]),
                )
                for key, e in entries.items()
            }
            for file, entries in document["nets"].items()
        }
        recorded_optimized = bool(document["optimized"])
        recorded_device = str(document.get("device", "cpu"))
    except (AttributeError, KeyError, TypeError, ValueError) as error:
        raise CaffememError(f"not a caffemem baseline ({type(error).__name__}: {error}); rewrite it with --update-baseline", where) from None
    if recorded_optimized != optimized and not missing_ok:
        flag = "with" if recorded_optimized else "without"
        raise CaffememError(f"the baseline was measured {flag} --optimized: check the same way, or rewrite it with --update-baseline", where)
    if recorded_device != device and not missing_ok:
        raise CaffememError(f"the baseline was measured with --device {recorded_device}: check the same way, or rewrite it with --update-baseline", where)
    return Baseline(path, recorded_optimized, nets, recorded_device)


def _count(value: object) -> int:
    """A byte count of the baseline: a whole number a run can measure (JSON's 1e999 is
    infinity, a float; `true` is no count)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value or not 0 <= value < 2**63 or value != int(value):
        raise ValueError(f"{value!r} is not a byte count")
    return int(value)


def updated_baseline(old: Baseline, outcomes: Sequence[Outcome], optimized: bool, budget: int | None, device: str = "cpu") -> Baseline:
    """The old baseline with every file checked now measured afresh.  Files not checked
    this run (pre-commit passes only the changed ones) keep their entries while they
    exist; an entry whose net has bad input now keeps its old figure."""
    folder = os.path.dirname(os.path.abspath(old.path))
    comparable = old.measured_as(optimized, device)
    checked = {old.key_of(outcome.file) for outcome in outcomes}
    nets: dict[str, dict[str, BaselineEntry]] = {}
    if comparable:
        nets = {file: dict(entries) for file, entries in old.nets.items() if file not in checked and os.path.exists(os.path.join(folder, file))}
    for outcome in outcomes:
        file = old.key_of(outcome.file)
        entries = nets.setdefault(file, {})
        if isinstance(outcome, Measurement):
            entries[outcome.key] = BaselineEntry(outcome.bytes, __version__, budget if outcome.budget is None else outcome.budget, {key: size for key, size, _ in outcome.layers}, outcome.batch)
        elif comparable:
            kept = old.nets.get(file, {})
            entries.update({key: entry for key, entry in kept.items() if outcome.phase is None or key == outcome.key})
    return Baseline(old.path, optimized, {file: entries for file, entries in sorted(nets.items()) if entries}, device)


def baseline_text(baseline: Baseline) -> str:
    """The baseline as a small, stably ordered JSON document (diffs stay readable)."""
    nets = {
        file: {
            key: {
                "bytes": e.bytes,
                "caffemem": e.caffemem,
                **({"batch": e.batch} if e.batch is not None else {}),
                **({"budget": e.budget} if e.budget is not None else {}),
                **({"layers": dict(e.layers)} if e.layers else {}),
            }
            for key, e in sorted(entries.items())
        }
        for file, entries in sorted(baseline.nets.items())
    }
    return json.dumps({"format": BASELINE_FORMAT, "optimized": baseline.optimized, "device": baseline.device, "nets": nets}, indent=1) + "\n"


# ----------------------------------------------------------------------------- judging

FAILING = ("over-budget", "grew")
PASSING = ("pass", "new", "shrank", "accepted")


@dataclass(frozen=True)
class Gate:
    """What a measurement is held to."""

    budget: int | None = None
    baseline: Baseline | None = None
    tolerance: float = 0.02
    accept_growth: bool = False  # --update-baseline: growth is accepted, the budget still holds


@dataclass(frozen=True)
class Row:
    """One net and phase of one file, judged (or its bad input)."""

    file: str
    net: str | None
    phase: str | None
    bytes: int | None
    budget: int | None
    baseline_bytes: int | None
    status: str  # pass, new, shrank, accepted | over-budget, grew | error
    message: str
    at_file: str  # where an annotation goes
    line: int
    batch: int | None = None
    baseline_batch: int | None = None  # the batch the baseline measured (None: none, or an older baseline)

    @property
    def batch_changed(self) -> bool:
        return None not in (self.batch, self.baseline_batch) and self.batch != self.baseline_batch

    @property
    def delta(self) -> int | None:
        return None if self.bytes is None or self.baseline_bytes is None else self.bytes - self.baseline_bytes

    @property
    def label(self) -> str:
        """`TRAIN`, `TRAIN process`, `TEST test net #0`, or `file` for a file that did not load."""
        if self.phase is None:
            return "file"
        if self.net in (None, "net"):
            return self.phase
        return f"{self.phase} process" if self.net == "process" else f"{self.phase} test net #{self.net.removeprefix('test')}"

    @property
    def ok(self) -> bool:
        return self.status in PASSING


def judge(outcome: Outcome, gate: Gate) -> Row:
    """Hold one measurement to the budget and to its baseline entry."""
    if isinstance(outcome, Problem):
        return Row(outcome.file, None, outcome.phase, None, None, None, "error", outcome.message, outcome.at_file, outcome.line)
    size = outcome.bytes
    statuses: list[str] = []
    notes: list[str] = []
    budget = gate.budget if outcome.budget is None else outcome.budget
    if budget is not None:
        if size > budget:
            statuses.append("over-budget")
            notes.append(f"{mib(size)} is over the budget of {mib(budget)} by {mib(size - budget)}")
        else:
            notes.append(f"{used(size, budget)} of the budget")
    entry = gate.baseline.entry(outcome) if gate.baseline is not None else None
    if gate.baseline is not None and entry is None:
        statuses.append("new")
        notes.append("new: not in the baseline yet")
    line, at_file = 1, outcome.file
    if entry is not None:
        status, note = _against_baseline(size, entry, gate)
        statuses.append(status)
        changes = layer_changes(outcome, entry)
        if changes and size != entry.bytes:
            note += "; " + ", ".join(change for change, _ in changes[:LAYERS_NAMED])
            line = next((at for _, at in changes if at is not None), 1)
        if None not in (entry.batch, outcome.batch) and entry.batch != outcome.batch:
            # The batch explains every layer's change: named first, annotated where it is stated.
            note = f"batch {entry.batch} → {outcome.batch} (the file's batch changed); {note}"
            at_file, line = outcome.batch_at or (outcome.file, 1)
        notes.append(note)
    status = next((s for s in FAILING + ("accepted", "shrank", "new") if s in statuses), "pass")
    return Row(
        outcome.file, outcome.net, outcome.phase, size, budget, entry.bytes if entry else None, status, "; ".join(notes), display_path(at_file), line, outcome.batch, entry.batch if entry else None
    )


LAYERS_NAMED = 3  # the layers a changed figure is explained by, largest change first


def layer_changes(outcome: Measurement, entry: BaselineEntry) -> list[tuple[str, int | None]]:
    """What moved between the baseline and now, layer by layer, largest change first:
    (`conv5 +2.00 MiB`, the line of conv5); a removed layer has no line."""
    if not entry.layers:
        return []
    now = {key: (size, at) for key, size, at in outcome.layers}
    changes = []
    for key in list(now) + [key for key in entry.layers if key not in now]:
        before, (after, at) = entry.layers.get(key), now.get(key, (None, None))
        if before == after:
            continue
        if before is None:
            changes.append((abs(after), f"new layer {key} {signed(after)}", at))
        elif after is None:
            changes.append((before, f"layer {key} removed ({signed(-before)})", None))
        else:
            changes.append((abs(after - before), f"{key} {signed(after - before)}", at))
    changes.sort(key=lambda change: -change[0])
    return [(text, at) for _, text, at in changes]


def _against_baseline(size: int, entry: BaselineEntry, gate: Gate) -> tuple[str, str]:
    delta = size - entry.bytes
    change = f"by {mib(abs(delta))} ({change_percent(delta, entry.bytes)})"
    version = f" (baseline measured by caffemem {entry.caffemem})" if entry.caffemem != __version__ else ""
    if delta > gate.tolerance * entry.bytes:
        if gate.accept_growth:
            return "accepted", f"grew {change}: accepted into the baseline{version}"
        return "grew", f"grew {change} against the baseline, more than the {percent(gate.tolerance)} tolerance{version}"
    if delta > 0:
        return "pass", f"grew {change}, within the {percent(gate.tolerance)} tolerance{version}"
    if delta < 0:
        return "shrank", f"shrank {change} against the baseline: good news{version}"
    return "pass", f"unchanged against the baseline{version}"


def signed(n: int) -> str:
    """A change in bytes: `+1.20 MiB`, `-4,096 B`, `0 B`."""
    return ("+" if n > 0 else "-" if n < 0 else "") + mib(abs(n))


def change_percent(delta: int, base: int) -> str:
    """A change against the baseline: `+4.8%` (never `-0.0%`), or `from 0 B`."""
    return signed_percent(delta, base) if base else "from 0 B"


def used(size: int, budget: int) -> str:
    return f"{size / budget:.0%}" if budget else "all"


@dataclass(frozen=True)
class Report:
    """Everything a run found, and what it was held to."""

    rows: tuple[Row, ...]
    gate: Gate
    optimized: bool = False
    wrote_baseline: str | None = None
    notes: tuple[str, ...] = ()  # what the run wants a reader to know, in every format

    @property
    def failed(self) -> int:
        return sum(row.status in FAILING for row in self.rows)

    @property
    def errors(self) -> int:
        return sum(row.status == "error" for row in self.rows)

    @property
    def passed(self) -> int:
        return sum(row.ok for row in self.rows)

    @property
    def exit_code(self) -> int:
        """2 when some input could not be checked, else 1 when a net fails, else 0."""
        return 2 if self.errors else 1 if self.failed else 0

    def summary(self) -> str:
        """One line: the verdict and what the nets were held to."""
        verdict = "passed" if self.exit_code == 0 else "failed"
        counts = f"{self.failed} failed, {self.errors} bad input, {self.passed} passed"
        budgets = sorted({row.budget for row in self.rows if row.budget is not None})
        held = [f"budget {mib(budgets[0])}" if len(budgets) == 1 else f"budgets {mib(budgets[0])} to {mib(budgets[-1])}" if budgets else "no budget"]
        if self.gate.baseline is not None:
            held.append(f"baseline {display_path(self.gate.baseline.path)} ± {percent(self.gate.tolerance)}")
        held.append("optimized plan" if self.optimized else "stock Caffe")
        wrote = f"; wrote {display_path(self.wrote_baseline)}" if self.wrote_baseline else ""
        return f"caffemem check {verdict}: {counts} ({', '.join(held)}){wrote}"


def make_report(outcomes: Sequence[Outcome], gate: Gate, optimized: bool = False, wrote_baseline: str | None = None, notes: Sequence[str] = ()) -> Report:
    return Report(tuple(judge(outcome, gate) for outcome in outcomes), gate, optimized, wrote_baseline, tuple(notes))


def replaced_budgets(config: CheckConfig | None, files: Sequence[str], budget: int | None) -> tuple[str, ...]:
    """A note when --budget replaces budgets the settings file gives the files checked
    (issue 34: a workflow's ``budget:`` silently overrode caffemem.toml's)."""
    if config is None or budget is None:
        return ()
    replaced = [own for file in files if (own := config.budget_of(file)) is not None and own != budget]
    if not replaced:
        return ()
    given = mib(replaced[0]) if len(set(replaced)) == 1 else f"{mib(min(replaced))} to {mib(max(replaced))}"
    return (
        f"--budget {mib(budget)} replaces the budgets {os.path.basename(config.path)} gives {len(replaced)} of the files checked ({given}): "
        "leave it out to hold each file to its own",
    )


# ----------------------------------------------------------------------------- formats

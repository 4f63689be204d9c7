"""A model repository's own settings for `caffemem check`: per glob, each net's inputs,
phase, stages and budget, so one CI run gives every file what it needs.

The settings live in ``caffemem.toml`` (top level) or in ``pyproject.toml`` under
``[tool.caffemem]``, found as black and ruff find theirs: in the working directory or the
nearest folder above it, stopping at the repository's root (a folder holding ``.git``);
``caffemem.toml`` wins over ``pyproject.toml`` in the same folder.  ``--config FILE``
names one instead.  The format::

    budget = "11GiB"                    # every net's budget unless a [[nets]] entry says
    [[nets]]
    glob = "models/alexnet/*.prototxt"  # relative to the config's folder (fnmatch: * spans folders)
    inputs = { data = "_,3,_,_" }       # as --input: _ keeps an axis the file states
    override-inputs = { }               # as --override-input
    phase = "TRAIN"
    stages = ["deploy"]
    budget = "8GiB"

Every entry whose glob matches a file applies, in order (a later one wins a key it
repeats; inputs merge by name); flags on the command line win over the file.
"""

from __future__ import annotations

import fnmatch
import os
import sys
from dataclasses import dataclass, field, replace

from caffemem.api.analyze import Options, parse_inputs
from caffemem.errors import CaffememError, Location
from caffemem.userfiles import open_input
from caffemem.units import parse_size

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: the same parser, as a package (a dependency there)
    import tomli as tomllib

CONFIG_NAME = "caffemem.toml"
ENTRY_KEYS = {"glob", "inputs", "override-inputs", "phase", "stages", "budget"}


@dataclass(frozen=True)
class NetEntry:
    """One ``[[nets]]`` entry: the settings of the files its glob matches."""

    glob: str
    inputs: tuple[str, ...] = ()  # NAME=d0,d1,... as --input takes them
    overrides: tuple[str, ...] = ()
    phase: str | None = None
    stages: tuple[str, ...] | None = None
    budget: int | None = None


@dataclass(frozen=True)
class CheckConfig:
    """A repository's settings, read from ``path`` (globs are relative to its folder)."""

    path: str
    budget: int | None = None
    nets: tuple[NetEntry, ...] = field(default_factory=tuple)

    def entries_for(self, file: str) -> list[NetEntry]:
        relative = os.path.relpath(os.path.abspath(file), os.path.dirname(os.path.abspath(self.path))).replace(os.sep, "/")
        return [entry for entry in self.nets if fnmatch.fnmatchcase(relative, entry.glob)]

    def budget_of(self, file: str) -> int | None:
        """The budget the file gives ``file``: its last entry's that has one, else its own."""
        return next((entry.budget for entry in reversed(self.entries_for(file)) if entry.budget is not None), self.budget)

    def settings_for(self, file: str, options: Options, budget: int | None) -> tuple[Options, int | None]:
        """``options`` and ``budget`` for one file: the flags given (``options``' own
        values; ``budget`` None when --budget was not given) win over the file's entries."""
        inputs: dict[str, str] = {}
        overrides: dict[str, str] = {}
        phase, stages, own_budget = None, None, self.budget_of(file)
        for entry in self.entries_for(file):
            inputs.update((value.partition("=")[0], value) for value in entry.inputs)
            overrides.update((value.partition("=")[0], value) for value in entry.overrides)
            phase = entry.phase or phase
            stages = entry.stages if entry.stages is not None else stages
        for name in list(options.inputs):  # a flag wins a name the file also gives
            inputs.pop(name, None)
            overrides.pop(name, None)
        try:
            parsed = parse_inputs(list(inputs.values()), list(overrides.values()))
        except CaffememError as error:
            raise CaffememError(f"{error.message} (in {self.path})", Location(file=self.path)) from None
        merged = replace(
            options,
            inputs={**parsed, **options.inputs},
            overrides=options.overrides | frozenset(overrides),
            phase=options.phase or phase,
            stages=options.stages or tuple(stages or ()),
        )
        return merged, budget if budget is not None else own_budget


def find_config(start: str | None = None) -> str | None:
    """The settings file for a run started in ``start`` (the working directory), or None.
    A pyproject.toml counts when it has a ``[tool.caffemem]`` table; one that is not
    TOML and never names caffemem is another tool's business, passed over."""
    folder = os.path.abspath(start or os.getcwd())
    while True:
        own = os.path.join(folder, CONFIG_NAME)
        if os.path.isfile(own):
            return own
        pyproject = os.path.join(folder, "pyproject.toml")
        if os.path.isfile(pyproject) and _has_our_table(pyproject):
            return pyproject
        parent = os.path.dirname(folder)
        if os.path.exists(os.path.join(folder, ".git")) or parent == folder:
            return None
        folder = parent


def _has_our_table(pyproject: str) -> bool:
    try:
        return _tool_table(_read(pyproject), pyproject) is not None
    except CaffememError:
        if b"caffemem" in _read_bytes(pyproject):
            raise  # a broken file that is meant for us: say what is wrong with it
        return False


def read_config(path: str) -> CheckConfig:
    """The settings of a ``caffemem.toml`` (its top level) or a ``pyproject.toml``'s
    ``[tool.caffemem]``.  A file of another name (--config) holds them at its top level
    or, pyproject-style, in ``[tool.caffemem]``: never both, and other tools' ``[tool.*]``
    tables beside them are theirs (issue 31: one such table made the top-level budget go
    unread, and the gate passed)."""
    data = _read(path)
    ours = _tool_table(data, path)
    top = {key: value for key, value in data.items() if key != "tool"}
    if os.path.basename(path) == "pyproject.toml":
        if ours is None:
            raise CaffememError("has no [tool.caffemem] table: put caffemem's settings there (budget, [[tool.caffemem.nets]])", Location(file=path))
        data = ours
    elif ours is not None:
        if top:
            raise CaffememError(f"sets '{sorted(top)[0]}' at its top level and has a [tool.caffemem] table: keep caffemem's settings in one of them", Location(file=path))
        data = ours
    else:
        data = top
    unknown = sorted(set(data) - {"budget", "nets"})
    if unknown:
        raise CaffememError(f"unknown setting '{unknown[0]}' (expected budget and [[nets]] entries)", Location(file=path))
    nets = data.get("nets", [])
    if not isinstance(nets, list) or not all(isinstance(entry, dict) for entry in nets):
        raise CaffememError("'nets' must be a list of tables ([[nets]] entries)", Location(file=path))
    return CheckConfig(path, _budget(data.get("budget"), path, "budget"), tuple(_entry(entry, path, i) for i, entry in enumerate(nets)))


def _tool_table(data: dict, path: str) -> dict | None:
    """``[tool.caffemem]``, None when the file has none; a ``tool`` or ``tool.caffemem``
    that is not a table is refused, never read as settings."""
    tool = data.get("tool")
    if tool is None:
        return None
    if not isinstance(tool, dict):
        raise CaffememError("'tool' must be a table ([tool.NAME] holds each tool's settings)", Location(file=path))
    ours = tool.get("caffemem")
    if ours is not None and not isinstance(ours, dict):
        raise CaffememError("'tool.caffemem' must be a table ([tool.caffemem] with budget and [[tool.caffemem.nets]])", Location(file=path))
    return ours


MAX_CONFIG_BYTES = 1 << 22  # 4 MiB: settings are a few hundred bytes


def _read_bytes(path: str) -> bytes:
    """The file's bytes: a regular file (a FIFO or /dev/zero is refused unread, issue 31),
    at most MAX_CONFIG_BYTES, noted as read (no report may replace it)."""
    where = Location(file=path)
    try:
        with open_input(path, "settings file", where) as stream:
            data = stream.read(MAX_CONFIG_BYTES + 1)
    except OSError as error:
        raise CaffememError(f"cannot read the settings: {error.strerror or error}", where) from None
    if len(data) > MAX_CONFIG_BYTES:
        raise CaffememError(f"is over {MAX_CONFIG_BYTES >> 20} MiB, larger than any settings file", where)
    return data


def _read(path: str) -> dict:
    data = _read_bytes(path)
    try:
        return tomllib.loads(data.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as error:
        raise CaffememError(f"not valid TOML: {error}", Location(file=path)) from None
    except RecursionError:
        raise CaffememError("nests too deeply to be a settings file", Location(file=path)) from None


def _entry(data: dict, path: str, index: int) -> NetEntry:
    where = f"[[nets]] entry {index + 1}"
    unknown = sorted(set(data) - ENTRY_KEYS)
    if unknown:
        raise CaffememError(f"{where}: unknown key '{unknown[0]}' (expected {', '.join(sorted(ENTRY_KEYS))})", Location(file=path))
    if not isinstance(data.get("glob"), str) or not data["glob"]:
        raise CaffememError(f"{where}: 'glob' must name the files it sets, e.g. glob = \"models/*/train_val.prototxt\"", Location(file=path))
    phase = data.get("phase")
    if phase is not None and (not isinstance(phase, str) or phase.upper() not in ("TRAIN", "TEST")):
        raise CaffememError(f"{where}: 'phase' must be TRAIN or TEST", Location(file=path))
    stages = data.get("stages")
    if stages is not None and (not isinstance(stages, list) or not all(isinstance(s, str) for s in stages)):
        raise CaffememError(f"{where}: 'stages' must be a list of names", Location(file=path))
    return NetEntry(
        data["glob"],
        _shapes(data.get("inputs", {}), path, f"{where}: 'inputs'"),
        _shapes(data.get("override-inputs", {}), path, f"{where}: 'override-inputs'"),
        phase.upper() if phase else None,
        tuple(stages) if stages is not None else None,
        _budget(data.get("budget"), path, f"{where}: 'budget'"),
    )


def _shapes(table: object, path: str, what: str) -> tuple[str, ...]:
    """``{ data = "_,3,_,_", label = [64] }`` as --input values."""
    if not isinstance(table, dict):
        raise CaffememError(f"{what} must be a table of NAME = \"d0,d1,...\"", Location(file=path))
    values = []
    for name, dims in table.items():
        if isinstance(dims, list) and all(isinstance(d, int) and not isinstance(d, bool) for d in dims):
            dims = ",".join(map(str, dims))
        if not isinstance(dims, str):
            raise CaffememError(f"{what}: '{name}' must be \"d0,d1,...\" or a list of whole numbers", Location(file=path))
        values.append(f"{name}={dims}")
    try:
        parse_inputs(values)
    except CaffememError as error:
        raise CaffememError(f"{what}: {error.message}", Location(file=path)) from None
    return tuple(values)


def _budget(value: object, path: str, what: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise CaffememError(f"{what} must be a size such as \"11GiB\"", Location(file=path))
    try:
        return parse_size(str(value), what)
    except CaffememError as error:
        raise CaffememError(error.message, Location(file=path)) from None

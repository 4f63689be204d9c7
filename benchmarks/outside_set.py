"""Run `caffemem analyze` on a set of prototxt files downloaded from public Caffe model
repositories and kept outside the project, as a user would, and score how many are
analysed as downloaded or stop asking only for what the file cannot know.

    python benchmarks/outside_set.py                      # the set in /work/outside
    python benchmarks/outside_set.py DIR --results OUT.md

DIR holds ``files/`` (one file per row, named ``<owner>+<repo>__<path with / as __>``)
and ``MANIFEST.tsv`` with the columns ``file, repo, path, commit, kind, options``.  The
last column says what a user knows and the file cannot (the image size of a data layer
reading a database, the box count of a detection label), as ``--input`` options; it is
used only when caffemem asks for an input.

Each file is put back at its path in its repository (beside the set's other files of
that repository, so a solver finds its nets) and analysed from the repository's root,
first with no options.  A file is

* ``OK`` when that run exits 0;
* ``OK+input`` when the first run stops asking for an input (its message names
  ``--input``) and the rerun with just the manifest's ``--input`` options exits 0;
* ``FAIL`` otherwise, with caffemem's message (or the traceback's last line).

A passing file shows the total caffemem gives (``--json``: the net's ``total_bytes``, or a
solver's whole training process), so a figure that is plainly wrong stands out.

Prints a Markdown table and the score "N of M", and writes it to RESULTS.md (or
``--results``).  Nothing here knows which file should pass: the figures come from the
runs.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DIR = Path("/work/outside")
COLUMNS = ("file", "repo", "path", "commit", "kind", "options")
ASKS = re.compile(r"--input \S+=")  # caffemem's way of asking for a shape it cannot know


@dataclass(frozen=True)
class Entry:
    """One row of MANIFEST.tsv."""

    file: str
    repo: str
    path: str
    commit: str
    kind: str
    options: tuple[str, ...]


@dataclass(frozen=True)
class Run:
    """One `caffemem analyze` process."""

    code: int
    message: str  # the error caffemem printed, or the last line of a traceback; "" on success
    crashed: bool  # a Python traceback instead of caffemem's own message
    total_bytes: int | None = None  # what a passing run reports


@dataclass(frozen=True)
class Outcome:
    entry: Entry
    status: str  # OK, OK+input or FAIL
    options: tuple[str, ...]  # what the passing (or last) run was given
    message: str  # why it failed (empty when it passed)
    total_bytes: int | None = None


def read_manifest(path: Path) -> list[Entry]:
    """The rows of MANIFEST.tsv; the options column is split as a shell would."""
    with path.open(newline="") as handle:
        rows = list(csv.reader(handle, delimiter="\t"))
    if not rows or tuple(rows[0][: len(COLUMNS)]) != COLUMNS:
        raise SystemExit(f"{path}: the first line must be the columns {', '.join(COLUMNS)}")
    entries = []
    for number, row in enumerate(rows[1:], start=2):
        if not row:
            continue
        row = row + [""] * (len(COLUMNS) - len(row))
        entries.append(Entry(*row[:5], options=tuple(shlex.split(row[5]))))  # type: ignore[misc]
        _check_only_inputs(entries[-1], f"{path}:{number}")
    return entries


def _check_only_inputs(entry: Entry, where: str) -> None:
    """The manifest may only supply shapes (``--input NAME=...``): anything else would
    be helping caffemem, not telling it what the file cannot know."""
    words = entry.options
    pairs = len(words) % 2 == 0 and all(words[i] == "--input" and "=" in words[i + 1] for i in range(0, len(words), 2))
    if not pairs:
        raise SystemExit(f"{where}: options may only be '--input NAME=shape' pairs, not {shlex.join(words)!r}")


def stage(entries: list[Entry], files: Path, root: Path) -> None:
    """Put every file back at its path under root/<owner+repo>/, as a clone would have it."""
    for entry in entries:
        target = root / entry.repo.replace("/", "+") / entry.path
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(files / entry.file, target)


def analyze(entry: Entry, root: Path, options: tuple[str, ...], python: str, timeout: float) -> Run:
    """`python -m caffemem analyze PATH [options]` from the repository's root, with this
    tree's caffemem."""
    cwd = root / entry.repo.replace("/", "+")
    env = dict(os.environ, PYTHONPATH=str(REPO), COLUMNS="100")
    command = [python, "-m", "caffemem", "analyze", entry.path, "--json", *options]
    try:
        done = subprocess.run(command, check=False, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return Run(-1, f"no answer in {timeout:.0f} s", False)
    if done.returncode == 0:
        return Run(0, "", False, _total_bytes(done.stdout))
    return Run(done.returncode, *_message(done.stderr, str(cwd) + os.sep))


def _total_bytes(stdout: str) -> int | None:
    """A net's ``total_bytes``, or a solver's whole process's; None if the JSON lacks both."""
    try:
        report = json.loads(stdout)
    except ValueError:
        return None
    process = report.get("process") if isinstance(report, dict) else None
    total = report.get("total_bytes") if isinstance(report, dict) else None
    return total if isinstance(total, int) else process.get("total_bytes") if isinstance(process, dict) else None


def _message(stderr: str, prefix: str) -> tuple[str, bool]:
    """caffemem's error (its lines joined), else the traceback's last line; paths shown
    relative to the repository root."""
    text = stderr.replace(prefix, "")
    if "Traceback (most recent call last)" in text:
        lines = [line for line in text.strip().splitlines() if line.strip()]
        return "traceback: " + (lines[-1].strip() if lines else "?"), True
    start = text.find("caffemem: error:")
    body = text[start:] if start >= 0 else text
    return " ".join(body.split()), False


def classify(entry: Entry, root: Path, python: str, timeout: float) -> Outcome:
    """As downloaded first; when caffemem asks for an input, again with only the shapes
    the manifest says the file cannot know."""
    first = analyze(entry, root, (), python, timeout)
    if first.code == 0:
        return Outcome(entry, "OK", (), "", first.total_bytes)
    if first.crashed or first.code != 2 or not ASKS.search(first.message):
        return Outcome(entry, "FAIL", (), first.message or f"exit code {first.code}")
    if not entry.options:
        return Outcome(entry, "FAIL", (), "asks for an input the manifest does not give: " + first.message)
    second = analyze(entry, root, entry.options, python, timeout)
    if second.code == 0:
        return Outcome(entry, "OK+input", entry.options, "", second.total_bytes)
    return Outcome(entry, "FAIL", entry.options, second.message or f"exit code {second.code}")


def table(outcomes: list[Outcome]) -> str:
    """Markdown: one row per file, then the score."""
    lines = ["| # | repository | file | kind | result | options given | total | message |", "|---|---|---|---|---|---|---:|---|"]
    for number, o in enumerate(outcomes, start=1):
        total = f"{o.total_bytes / 2**20:,.1f} MiB" if o.total_bytes is not None else ""
        cells = (str(number), o.entry.repo, f"`{o.entry.path}`", o.entry.kind, o.status, f"`{shlex.join(o.options)}`" if o.options else "", total, o.message)
        lines.append("| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |")
    return "\n".join(lines)


def score(outcomes: list[Outcome]) -> str:
    passed = sum(o.status != "FAIL" for o in outcomes)
    as_downloaded = sum(o.status == "OK" for o in outcomes)
    return f"{passed} of {len(outcomes)} (as downloaded: {as_downloaded}; with only what the file cannot know: {passed - as_downloaded})"


def report(outcomes: list[Outcome], commit: str) -> str:
    fails = [o for o in outcomes if o.status == "FAIL"]
    parts = [
        "# caffemem on files downloaded outside the project",
        "",
        f"caffemem tree: {REPO} at {commit}",
        "",
        f"**Score: {score(outcomes)}**",
        "",
        table(outcomes),
        "",
        f"## Failures ({len(fails)})",
        "",
    ]
    parts += [f"- `{o.entry.repo}` `{o.entry.path}`: {o.message}" for o in fails] or ["none"]
    return "\n".join(parts) + "\n"


def _commit() -> str:
    try:
        done = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True)
        return done.stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "?"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("directory", nargs="?", type=Path, default=DEFAULT_DIR, help="holds files/ and MANIFEST.tsv (default /work/outside)")
    parser.add_argument("--manifest", type=Path, help="default DIRECTORY/MANIFEST.tsv")
    parser.add_argument("--files", type=Path, help="default DIRECTORY/files")
    parser.add_argument("--results", type=Path, help="default DIRECTORY/RESULTS.md")
    parser.add_argument("--python", default=sys.executable, help="the interpreter that runs caffemem")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per run")
    parser.add_argument("--only", metavar="TEXT", help="run only the files whose name contains TEXT")
    args = parser.parse_args(argv)
    manifest = args.manifest or args.directory / "MANIFEST.tsv"
    files = args.files or args.directory / "files"
    results = args.results or args.directory / "RESULTS.md"
    entries = read_manifest(manifest)
    chosen = [e for e in entries if not args.only or args.only in e.file]
    outcomes = []
    with tempfile.TemporaryDirectory(prefix="caffemem-outside-") as tmp:
        stage(entries, files, Path(tmp))
        for entry in chosen:
            outcome = classify(entry, Path(tmp), args.python, args.timeout)
            print(f"{outcome.status:8} {entry.file}" + (f"\n         {outcome.message}" if outcome.message else ""), file=sys.stderr, flush=True)
            outcomes.append(outcome)
    text = report(outcomes, _commit())
    print(text)
    if not args.only:
        results.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

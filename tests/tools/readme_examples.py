"""The examples the README, the user guide (``docs/*.md``) and every command's ``--help``
show, run as written (issues 25 and 34).

A documented example that does not run is worse than none, so the tests run them all
(``tests/cli/test_documented_examples.py``) and this script refreshes the outputs the pages
show after a change of wording:

    python tests/tools/readme_examples.py            # run every example, say what differs (exit 1)
    python tests/tools/readme_examples.py --update   # rewrite the pages' shown outputs

The pages are ``documented_pages()``: README.md, then every ``docs/*.md``; a block is named by
its page and line (``docs/fit.md:12``).  Every page follows the same conventions.

**Which blocks are what.** The fence's info string says it:

- ```` ```console ````: a transcript.  Each ``$ `` line is a command (run by bash); the lines
  after it, up to the next ``$ `` line, are its standard output, compared line by line (trailing
  spaces and trailing empty lines aside).  A line that is exactly ``...`` stands for any number
  of lines, at most once per output: ``--update`` keeps as many lines before and after it as
  the page shows.
- ```` ```sh ````: commands to copy.  Each ``caffemem`` command in it runs and must exit 0:
  a line, or a part of a line joined by ``&&`` or ``;``, whose program is ``caffemem`` (also
  as ``.venv/bin/caffemem``).  Other programs (pip, make, git, caffe) are not run.
- ```` ```sh synopsis ````: a command's flags, with placeholders (``NET``, ``[--phase ...]``):
  not run.
- ```` ```python ````: the library's example: run as a script, it must exit 0.
- Any other block with a line that starts with ``caffemem `` or ``$ caffemem `` is an
  error: say what it is.  Inline ``code`` in prose is not run.

**Where they run.** Each block of a page, and each command's ``--help`` examples (in their
order), run in a fresh folder that starts as a copy of ``fixtures/docs/`` (the
``train_val.prototxt``, ``deploy.prototxt``, ``solver.prototxt`` and ``models/`` the
examples name) with ``fixtures`` linking the repository's ``fixtures/``.  ``HOME`` is that
folder, so ``~/caffe`` is a Caffe source tree unpacked there from ``../shared/caffe`` when
an example patches one (such examples are skipped without it).  The command is this
checkout's ``caffemem``, at its defaults (``CAFFEMEM_DEVICE`` unset: ``--device gpu``), with
``COLUMNS=80``.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
DOCS_FIXTURES = ROOT / "fixtures" / "docs"
CAFFE_TARBALLS = ROOT.parent / "shared" / "caffe"
ELIDED = "..."
PROMPT = "$ "
COLUMNS = "80"  # the width the examples run at, piped (issue 34: every report fits it)
RUN_TIMEOUT_S = 300

_FENCE = re.compile(r"^(```+)\s*(.*)$")
_PART_SEPARATORS = re.compile(r"\s*(?:&&|;)\s*")
_CAFFEMEM = re.compile(r"^(?:\S*/)?caffemem(?=\s|$)")


@dataclass(frozen=True)
class Block:
    """A fenced block of a page: its info string and its lines (``first`` is the 0-based
    index in the page of the line after the opening fence; ``page``, its path from the
    repository's root)."""

    info: str
    first: int
    lines: tuple[str, ...]
    page: str = "README.md"

    @property
    def kind(self) -> str:
        return " ".join(self.info.split()[:2])

    @property
    def where(self) -> str:
        return f"{self.page}:{self.first}"  # the opening fence's 1-based line number


@dataclass(frozen=True)
class Example:
    """One command to run; ``shown`` is the output its page shows (``None``: only its
    exit code, 0, is checked), at the page's lines ``shown_at`` (0-based, end excluded)."""

    command: str
    where: str
    shown: tuple[str, ...] | None = None
    shown_at: tuple[int, int] | None = None


@dataclass(frozen=True)
class Outcome:
    example: Example
    returncode: int
    stdout: str
    stderr: str

    @property
    def lines(self) -> list[str]:
        return _normalised(self.stdout.splitlines())

    def problem(self) -> str | None:
        """Why the example is wrong as documented, or None."""
        if self.returncode != 0:
            return f"{self.example.where}: `{self.example.command}` exited {self.returncode}:\n{self.stderr.strip() or self.stdout.strip()}"
        if self.example.shown is not None and not output_matches(self.example.shown, self.lines):
            return f"{self.example.where}: `{self.example.command}` printed\n" + "\n".join(self.lines) + f"\nbut {self.example.where.rsplit(':', 1)[0]} shows\n" + "\n".join(self.example.shown)
        return None


WIDTH = int(COLUMNS)
MACHINE_FORMATS = ("--json", "--format json", "--format markdown", "--format github", "--format junit", "--report")


def overlong(text: str, error_line: bool = False) -> list[str]:
    """The lines of ``text`` wider than WIDTH terminal cells or ending in spaces, with their
    widths.  ``error_line``: ``text`` is a failed run's stderr, whose one line
    (``caffemem: error: FILE:LINE: ...``, the contract scripts read) may be as long as
    its message: a terminal wraps it, and breaking it would make it two."""
    from rich.cells import cell_len

    lines = text.splitlines()
    if error_line and len(lines) == 1 and lines[0].startswith("caffemem: error: "):
        lines = [lines[0]] if lines[0] != lines[0].rstrip() else []
    return [f"{cell_len(line)}: {line!r}" for line in lines if cell_len(line) > WIDTH or line != line.rstrip()]


def documented_pages() -> list[Path]:
    """The pages whose examples run: README.md, then the user guide's ``docs/*.md``."""
    return [README, *sorted(DOCS.glob("*.md"))]


def page_name(path: Path) -> str:
    """A page's name in messages: its path from the repository's root (else its file name)."""
    resolved = path.resolve()
    return resolved.relative_to(ROOT).as_posix() if resolved.is_relative_to(ROOT) else path.name


def readme_blocks(text: str, page: str = "README.md") -> list[Block]:
    """Every fenced block, with its info string (```` ```sh synopsis ```` -> "sh synopsis")."""
    blocks, lines, i = [], text.splitlines(), 0
    while i < len(lines):
        opening = _FENCE.match(lines[i])
        if opening is None:
            i += 1
            continue
        end = next((j for j in range(i + 1, len(lines)) if lines[j].strip() == opening.group(1)), len(lines))
        blocks.append(Block(opening.group(2).strip(), i + 1, tuple(lines[i + 1 : end]), page))
        i = end + 1
    return blocks


def names_caffemem(line: str) -> bool:
    """A line that shows a caffemem command (as opposed to prose or a path)."""
    stripped = line.strip()
    return bool(_CAFFEMEM.match(stripped.removeprefix(PROMPT)))


def block_examples(block: Block) -> list[Example]:
    """The commands of a block, by the conventions above (ValueError: unclassified)."""
    if block.kind == "console":
        return _transcript(block)
    if block.kind == "sh":
        return [Example(part, block.where) for line in _joined(block.lines) for part in _PART_SEPARATORS.split(_without_comment(line)) if _CAFFEMEM.match(part)]
    if block.kind == "python":
        return [Example("python -c " + shlex.quote("\n".join(block.lines)), block.where)]
    if block.kind == "sh synopsis" or not any(names_caffemem(line) for line in block.lines):
        return []
    raise ValueError(f"{block.where}: a ```{block.info} block shows a caffemem command: make it ```console (run, output compared), ```sh (run) or ```sh synopsis (not run)")


def _transcript(block: Block) -> list[Example]:
    examples: list[Example] = []
    starts = [i for i, line in enumerate(block.lines) if line.startswith(PROMPT)]
    for k, start in enumerate(starts):
        end = starts[k + 1] if k + 1 < len(starts) else len(block.lines)
        shown = _normalised(list(block.lines[start + 1 : end]))
        if shown.count(ELIDED) > 1:
            raise ValueError(f"{block.where}: one '{ELIDED}' per output at most")
        examples.append(Example(block.lines[start][len(PROMPT) :], block.where, tuple(shown), (block.first + start + 1, block.first + start + 1 + len(shown))))
    return examples


def _joined(lines: tuple[str, ...]) -> list[str]:
    """Lines with their backslash continuations joined."""
    out: list[str] = []
    pending = ""
    for line in lines:
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        out.append(pending + line)
        pending = ""
    return out + ([pending] if pending else [])


def _without_comment(line: str) -> str:
    return re.sub(r"(^|\s)#.*$", "", line).strip()


def _normalised(lines: list[str]) -> list[str]:
    lines = [line.rstrip() for line in lines]
    while lines and not lines[-1]:
        lines.pop()
    return lines


def output_matches(shown: tuple[str, ...] | list[str], actual: list[str]) -> bool:
    """Exact, except that a line ``...`` stands for any number of lines."""
    if ELIDED not in shown:
        return list(shown) == actual
    cut = list(shown).index(ELIDED)
    head, tail = list(shown[:cut]), list(shown[cut + 1 :])
    return len(head) + len(tail) <= len(actual) and actual[: len(head)] == head and actual[len(actual) - len(tail) :] == tail


def refreshed(shown: tuple[str, ...], actual: list[str]) -> list[str]:
    """What the README should show for ``actual``: all of it, or as many lines before and
    after ``...`` as it shows now."""
    if ELIDED not in shown:
        return actual
    cut = shown.index(ELIDED)
    head, tail = cut, len(shown) - cut - 1
    if head + tail >= len(actual):
        return actual
    return actual[:head] + [ELIDED] + (actual[len(actual) - tail :] if tail else [])


def help_examples() -> dict[str, list[Example]]:
    """Each command's ``Examples:`` lines from its --help epilogue, by command name."""
    from caffemem.cli import main

    examples: dict[str, list[Example]] = {}
    for name, command in main.commands.items():
        text = command.help or ""
        after = text.split("Examples:", 1)[1] if "Examples:" in text else ""
        lines = [line.strip() for line in _joined(tuple(after.splitlines())) if names_caffemem(line)]  # a long example continues with a backslash
        examples[name] = [Example(part, f"caffemem {name} --help") for line in lines for part in _PART_SEPARATORS.split(_without_comment(line)) if _CAFFEMEM.match(part)]
    return examples


def needs_caffe_tree(examples: list[Example]) -> bool:
    return any("~/caffe" in example.command for example in examples)


def caffe_tarball() -> Path | None:
    """A BVLC Caffe source tree to patch, from ../shared/caffe (None without it)."""
    found = sorted(CAFFE_TARBALLS.glob("bvlc-caffe-*.tar.xz")) if CAFFE_TARBALLS.is_dir() else []
    return found[0] if found else None


def prepare_folder(folder: Path, with_caffe_tree: bool) -> None:
    """The folder the examples run in (see the module's docstring)."""
    shutil.copytree(DOCS_FIXTURES, folder, dirs_exist_ok=True)
    (folder / "fixtures").symlink_to(ROOT / "fixtures", target_is_directory=True)
    bin_dir = folder / ".bin"
    bin_dir.mkdir()
    for name, program in (("caffemem", f'"{sys.executable}" -m caffemem'), ("python", f'"{sys.executable}"')):
        (bin_dir / name).write_text(f'#!/bin/sh\nexec {program} "$@"\n')  # this interpreter, its venv kept
        (bin_dir / name).chmod(0o755)
    if with_caffe_tree:
        tarball = caffe_tarball()
        if tarball is None:
            raise FileNotFoundError(f"no Caffe source tree to patch: {CAFFE_TARBALLS}/bvlc-caffe-*.tar.xz is missing")
        (folder / "caffe").mkdir()
        subprocess.run(["tar", "-xJf", str(tarball), "-C", str(folder / "caffe")], check=True)


def run_examples(examples: list[Example]) -> list[Outcome]:
    """Run the examples in order in one fresh folder; stop after the first that fails."""
    outcomes: list[Outcome] = []
    with tempfile.TemporaryDirectory(prefix="caffemem-examples-") as tmp:
        folder = Path(tmp) / "work"
        prepare_folder(folder, needs_caffe_tree(examples))
        env = {key: value for key, value in os.environ.items() if not key.startswith("CAFFEMEM_")}
        env.update(HOME=str(folder), COLUMNS=COLUMNS, PYTHONIOENCODING="utf-8", PATH=os.pathsep.join([str(folder / ".bin"), env.get("PATH", "")]))
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])  # this checkout's caffemem
        for example in examples:
            command = _CAFFEMEM.sub("caffemem", example.command, count=1)
            proc = subprocess.run(["bash", "-o", "pipefail", "-c", command], check=False, cwd=folder, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
            outcomes.append(Outcome(example, proc.returncode, proc.stdout, proc.stderr))
            if proc.returncode != 0:
                break
    return outcomes


def readme_runs(text: str, page: str = "README.md") -> list[tuple[Block, list[Example]]]:
    """A page's blocks that run something, with their examples."""
    return [(block, examples) for block in readme_blocks(text, page) for examples in [block_examples(block)] if examples]


def documented_runs() -> list[tuple[Block, list[Example]]]:
    """The runs of every documented page, README first."""
    return [run for path in documented_pages() for run in readme_runs(path.read_text(encoding="utf-8"), page_name(path))]


def update_readme(path: Path = README) -> list[str]:
    """Rewrite the outputs a page (the README by default) shows from the commands' real
    output; the commands that changed, by page position.  Raises RuntimeError naming a
    command that fails."""
    text = path.read_bytes().decode("utf-8")  # its own line endings kept
    lines = text.splitlines(keepends=True)
    changes: list[tuple[tuple[int, int], list[str], str]] = []
    for _block, examples in readme_runs(text, page_name(path)):
        if needs_caffe_tree(examples) and caffe_tarball() is None:
            continue
        for outcome in run_examples(examples):
            if outcome.returncode != 0:
                raise RuntimeError(outcome.problem())
            example = outcome.example
            if example.shown is None or output_matches(example.shown, outcome.lines):
                continue
            changes.append((example.shown_at, refreshed(example.shown, outcome.lines), f"{example.where}: {example.command}"))
    newline = "\r\n" if text.count("\r\n") else "\n"
    for (start, end), new, _ in sorted(changes, reverse=True):
        lines[start:end] = [line + newline for line in new]
    if changes:
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text("".join(lines), encoding="utf-8", newline="")
        os.replace(tmp, path)
    return [what for _, _, what in changes]


def problems() -> list[str]:
    """What is wrong with every documented example now (empty: all run as shown)."""
    found: list[str] = []
    groups = [examples for _, examples in documented_runs()] + list(help_examples().values())
    for examples in groups:
        if needs_caffe_tree(examples) and caffe_tarball() is None:
            print(f"skipped (no Caffe tree in {CAFFE_TARBALLS}): {examples[0].where}", file=sys.stderr)
            continue
        found += [problem for outcome in run_examples(examples) for problem in [outcome.problem()] if problem]
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--update", action="store_true", help="rewrite the outputs README.md and docs/*.md show from the commands' real output")
    args = parser.parse_args(argv)
    if args.update:
        changed = [what for path in documented_pages() for what in update_readme(path)]
        print("\n".join(f"updated {what}" for what in changed) or "every page already shows every output as the commands print it")
        return 0
    found = problems()
    print("\n\n".join(found) or "every documented example runs as shown")
    return 1 if found else 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())

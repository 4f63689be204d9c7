"""The hostile campaign: thousands of runs of every command as a careless or hostile user
and environment would make them, each judged against the contract the README promises.

    python benchmarks/hostile.py --jobs 2                 # 7,000 cases, seed 0
    python benchmarks/hostile.py --cases 300 --seed 7 --json summary.json
    python benchmarks/hostile.py --only 1234 --seed 0 --keep   # one case again: its folder, command, verdict
    python benchmarks/hostile.py --surfaces cwd,patch --cases 100   # only those surfaces
    python benchmarks/hostile.py --markdown summary.json  # docs/hostile.md's tables of a --json summary

A seeded generator (:func:`generate`) draws each case from one of the surfaces of
:data:`SURFACES`, each with its share.  The first six are the families of the first
campaign (issues 26 and 27; the last two together):

* ``mutated``: a real net (``../shared/models``, ``fixtures/``) after one to four edits —
  an extreme number, another string of the file, a line deleted or repeated, the text cut
  short, byte noise, a NUL, CR / CRLF / mixed line ends, a BOM, Latin-1 or broken UTF-8
  comments, a name of thousands of characters, deep nesting, an old ``mem_param`` — run
  through analyze, optimize (``-o`` with ``--plan-json`` or ``--html``), verify, check or
  fit, with the ground truth's ``--input`` shapes where the net needs them (one net in
  twelve inline in a solver's ``net_param``);
* ``binary``: the same nets as a binary NetParameter, bytes flipped or cut;
* ``flags``: valid nets with odd flag values (zero, negative, huge, empty, garbage);
* ``special``: inputs and outputs that are folders, FIFOs, sockets, devices, symlink
  loops, dangling links, links to an input or to another output, 255-byte names, empty
  names, missing folders;
* ``environment`` and ``signal``: standard output on ``/dev/full``, closed or a pipe closed
  after 10 bytes, standard error closed, a deleted working folder, a terminal width of 0,
  ``PYTHONIOENCODING=ascii``, ``LC_ALL=C PYTHONUTF8=0``, and Ctrl-C after a random delay
  (in a fresh interpreter too, to hit its start-up).

The other eleven are issue 31's (each builder's docstring says what it draws):

* ``cwd``: ``grpc_tools/``, ``google/``, ``click/``, ``numpy/``, ``lmdb/``... packages,
  ``sitecustomize.py`` and a ``protoc`` (PATH holding ``.`` or an empty entry) planted in
  the working folder of runs with a Caffe tree (``--caffe-root`` or ``$CAFFE_ROOT``; its
  caffe.proto caffemem's own, with a fork's extra field, with a field retyped, or a FIFO;
  an empty ``CAFFEMEM_CACHE_DIR``, so that protoc runs) and of plain runs, half of them
  through the ``caffemem`` console script in a fresh interpreter;
* ``patch``: a stand-in Caffe tree (:func:`fake_caffe_tree`) with links on the files or
  folders the patch writes, or a ``.caffemem-patch.journal`` naming links, ``..``,
  absolute paths, setuid modes or files the patch never edits (or a real one);
* ``sources``: LMDB, LevelDB, HDF5 and ImageData sources with FIFOs, links outside,
  devices, damaged bytes and size fields past the end inside, and files named as the
  tables LevelDB's recovery writes;
* ``record``: an unsafe table (one member moved onto another's bytes) whose ``made-for``
  record, in the prototxt or a ``--plan-json``, was edited (phase, level, dtype...);
* ``duplicates``: layers renamed alike, planned with ``--recompute``;
* ``force_backward``: nets with ``force_backward: true`` planned with ``--phase TEST``;
* ``config``: ``check --config`` a FIFO, a device, huge or deeply nested; ``[tool.*]``
  tables beside a budget; broken ``pyproject.toml`` files;
* ``cr_comment``: a lone CR before or after a trailing comment, through ``optimize -o``,
  ``--inplace``, ``--force`` and ``--batch``;
* ``read_outputs``: ``-o``, ``--html``, ``--plan-json`` or ``--report`` naming a file the
  run read (its settings, a list, an image, the mean file, the fork's caffe.proto or
  sources, the ``--layers`` file), or a link to one;
* ``injection``: escape sequences, CR, ``<img>``, ``@mentions``, ``<!--``, ``</script>``,
  ``::error`` and bidi controls in layer, blob and net names, through every output format;
* ``api``: the library's functions with bogus values.

Each case runs in a forked child of a process that has imported caffemem once (a fresh
interpreter, ``python -m caffemem`` or the console script, where the environment, the
start-up or the import path is the point), through the ``caffemem`` script's own entry
(``caffemem.__main__.run``), in its own folder beside a sentinel folder (``outside``),
under a time limit (20 s for issue 31's surfaces) and an address-space cap
(``RLIMIT_AS``).  It is a defect when:

* the exit code is not 0, 1, 2 or 130 (a killed child counts as a hang or a crash);
* standard error holds a traceback (or Python's "Exception ignored"), or more than one
  line for an exit of 1, 2 or 130;
* it runs past the time limit (a hang) or reaches the memory cap;
* a file that was there before (an input) has changed;
* a failed run (2, 130; 1 outside `check`) has written or changed an output, or any run
  has left a temporary file;
* an ``-o`` file does not hold the input byte for byte outside caffemem's block (an old
  ``mem_param`` blanked out is the one change allowed);
* a slot table written with ``--plan-json`` fails ``caffemem verify`` (an unsafe table), or
  a written plan, baseline or report is not what it claims to be;
* and, in the surfaces that ask for it (:func:`surface_judges`, :func:`format_judges`):
  anything written in the sentinel folder (a planted package's marker, a write through a
  link) or a new setuid file; a link in the tree replaced; a file the patch never writes
  created; a file added to a data source; exit 0 on a crafted journal, a retyped field, or
  a config whose budget the net exceeds; an unsafe table that ``verify`` passes after a
  record edit (the same table unedited, the control, is refused); a written plan that
  ``verify`` refuses or whose recompute entries name a layer name several layers share; a
  TEST table of a force_backward net unsafe when replayed with Backward; an ``-o`` file
  Caffe's parser (protobuf's text format) cannot read, or reads without its block; raw
  control characters on the terminal, raw HTML, mentions or comments in Markdown, a
  workflow command a name made, an HTML report whose embedded JSON does not parse, JSON
  or JUnit that does not parse; an API call raising anything but CaffememError, or
  accepting what the CLI refuses.

The summary counts runs, exit codes, tracebacks, hangs, altered inputs, round-trip
failures, unsafe tables and peak memory, and per surface its cases, exit codes and
defects; it lists every defect with its case number.  ``--markdown`` prints docs/hostile.md's
tables of a summary.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import hashlib
import json
import os
import random
import re
import resource
import select
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
import traceback
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
MEMORY_CAP = 6 * 2**30  # the address space each run may take (the issue's own campaign used 6 GiB)
# issue 31's surfaces run small nets (under 300 MiB): a run that reads /dev/zero meets this
# cap sooner, and two such runs at once leave the machine its memory
NEW_SURFACE_MEMORY_CAP = 2 * 2**30
TIME_LIMIT = 60.0  # seconds a run may take
DEFAULT_CASES = 7000
MAX_BASE_BYTES = 90_000  # nets larger than this are left out of the corpus (time)


# ----------------------------------------------------------------------------- cases


@dataclass(frozen=True)
class Case:
    """One run: ``argv`` after ``caffemem`` (``{dir}``: the case's folder), the files the
    folder holds first, how the environment is broken, and which files it may write."""

    number: int
    family: str
    argv: tuple[str, ...]
    files: tuple[tuple[str, bytes], ...] = ()
    special: tuple[tuple[str, str], ...] = ()  # (name, kind): fifo, socket, folder, loop, dangling, link:<target>, mode000
    outputs: tuple[str, ...] = ()  # names in the folder the command may write
    env: tuple[tuple[str, str], ...] = ()
    stdout: str = "file"  # file, full, closed, head (a pipe read for 10 bytes, then closed)
    stderr: str = "file"  # file, closed
    interrupt_after: float | None = None  # seconds until Ctrl-C (SIGINT)
    fresh: bool = False  # a new interpreter (python -m caffemem) instead of a forked child
    delete_cwd: bool = False  # run in a folder deleted before the command starts
    verify_with: tuple[str, ...] | None = None  # net options for `caffemem verify` of the written table
    # The surfaces of issue 31 (see SURFACES): set-up steps run in order after ``files`` and
    # ``special`` (:func:`_set_up`), the extra judges (:data:`CHECKS`), and how it runs:
    # "fork" (the script's entry in a forked child), "script" (a fresh interpreter running
    # the `caffemem` console script: the user's folder is not on its import path), "api"
    # (``argv[0]`` is Python code run in a forked child against the library).
    setup: tuple[tuple, ...] = ()
    checks: tuple[str, ...] = ()
    runner: str = "fork"
    note: str = ""  # what the case tries, in words (the summary lists it with each defect)
    limit: float | None = None  # seconds, when less than the campaign's limit
    memory_cap: int = MEMORY_CAP  # bytes of address space (RLIMIT_AS)

    def command(self, folder: str = "DIR", outside: str = "OUTSIDE") -> str:
        """The case as a shell line, to reproduce it by hand."""
        import shlex

        def place(text: str) -> str:
            return text.replace("{dir}", folder).replace("{outside}", outside)

        env = " ".join(f'{k}="{place(v).replace("{path}", "$PATH")}"' if "{path}" in v else f"{k}={shlex.quote(place(v))}" for k, v in self.env)
        if self.runner == "api":
            return f"{env + ' ' if env else ''}python -c {shlex.quote(place(self.argv[0]))}"
        words = " ".join(shlex.quote(place(a)) for a in self.argv)
        redirect = {"full": " >/dev/full", "closed": " >&-", "head": " | head -c 10"}.get(self.stdout, "")
        redirect += " 2>&-" if self.stderr == "closed" else ""
        prefix = "rmdir $PWD; " if self.delete_cwd else ""
        ctrl_c = f"  # Ctrl-C after {self.interrupt_after:.2f} s" if self.interrupt_after is not None else ""
        return f"{prefix}{env + ' ' if env else ''}caffemem {words}{redirect}{ctrl_c}"

    def described_set_up(self) -> list[str]:
        """The case's folder as words: its files, special files and set-up steps (what
        ``--only N --keep`` leaves on disk to look at)."""
        lines = [f"file {name} ({len(data)} bytes)" for name, data in self.files]
        lines += [f"{kind} {name}" for name, kind in self.special]
        for step in self.setup:
            words = [repr(a) if isinstance(a, bytes) and len(a) <= 80 else (f"<{len(a)} bytes>" if isinstance(a, bytes) else str(a)) for a in step[1:]]
            lines.append(f"{step[0]} {' '.join(words)}")
        return lines


@dataclass(frozen=True)
class Base:
    """A net of the corpus: its bytes, where it came from, and the options that build it
    (the ground truth's phase and --input shapes, when the file cannot tell them)."""

    name: str
    data: bytes
    options: tuple[str, ...]


def corpus() -> list[Base]:
    """Real nets (../shared/models, with the ground truth's inputs) and our fixtures."""
    inputs: dict[str, tuple[str, ...]] = {}
    for path in sorted((SHARED / "groundtruth").glob("*.json")):
        with contextlib.suppress(OSError, ValueError, KeyError):
            document = json.loads(path.read_text())
            runs = [run for run in document["runs"] if run["ok"]]
            if runs:
                run = runs[0]
                flags = ["--phase", run["phase"]] + [x for name, shape in run["inputs"].items() for x in ("--input", f"{name}={','.join(map(str, shape))}")]
                inputs[document["source"]] = tuple(flags)
    bases = []
    for path in sorted((SHARED / "models").rglob("*.prototxt")) + sorted((REPO / "fixtures").rglob("*.prototxt")):
        if "solver" in path.name or path.stat().st_size > MAX_BASE_BYTES:
            continue
        source = str(path.relative_to(SHARED)) if path.is_relative_to(SHARED) else str(path.relative_to(REPO))
        bases.append(Base(source, path.read_bytes(), inputs.get(source, ())))
    return bases


TOKEN = re.compile(rb'#[^\n]*|"(?:[^"\\\n]|\\.)*"|[\w.+-]+|\S')
NUMBER = re.compile(rb"-?\d+(\.\d*)?(e-?\d+)?")
EXTREMES = [b"0", b"-1", b"2147483647", b"2147483648", b"4294967295", b"1099511627776", b"9223372036854775808", b"1e40", b"-1e-45", b"nan", b"inf", b"1e999", b'"x"', b"true", b"9" * 400]


BENIGN = ["crlf", "mixed eol", "bom", "latin1 comment", "tabs", "no final newline", "old mem_param"]


def mutate(rng: random.Random, data: bytes, benign: bool = False) -> tuple[bytes, str]:
    """One edit of a net's bytes, and its name; ``benign``: one that keeps a valid net
    valid (its bytes are what the round trip checks)."""
    edits = BENIGN if benign else [
        "extreme", "extreme", "string", "delete line", "repeat line", "cut", "noise", "nul", "crlf", "cr", "mixed eol", "bom",
        "latin1 comment", "broken utf8", "long name", "deep nesting", "old mem_param", "tabs", "no final newline", "swap tokens",
        "repeat layer",
    ]  # fmt: skip
    edit = rng.choice(edits)
    lines = data.split(b"\n")
    if edit == "extreme":
        numbers = [m for m in NUMBER.finditer(data)]
        if numbers:
            m = rng.choice(numbers)
            data = data[: m.start()] + rng.choice(EXTREMES) + data[m.end() :]
    elif edit == "string":
        strings = [m for m in re.finditer(rb'"[^"\n]*"', data)]
        if len(strings) > 1:
            a, b = rng.sample(strings, 2)
            data = data[: a.start()] + b.group() + data[a.end() :]
    elif edit == "delete line" and lines:
        del lines[rng.randrange(len(lines))]
        data = b"\n".join(lines)
    elif edit == "repeat line" and lines:
        i = rng.randrange(len(lines))
        lines.insert(i, lines[i])
        data = b"\n".join(lines)
    elif edit == "cut":
        data = data[: rng.randrange(len(data) + 1)]
    elif edit == "noise" and data:
        raw = bytearray(data)
        for _ in range(rng.randint(1, 8)):
            raw[rng.randrange(len(raw))] = rng.randrange(256)
        data = bytes(raw)
    elif edit == "nul":
        i = rng.randrange(len(data) + 1)
        data = data[:i] + b"\x00" + data[i:]
    elif edit == "crlf":
        data = data.replace(b"\n", b"\r\n")
    elif edit == "cr":
        data = b"\r".join(line for line in lines if not line.lstrip().startswith(b"#"))
    elif edit == "mixed eol":
        data = b"".join(line + rng.choice([b"\n", b"\r\n", b"\r"]) for line in lines)
    elif edit == "bom":
        data = b"\xef\xbb\xbf" + data
    elif edit == "latin1 comment":
        data = b"# caf\xe9 \xff\n" + data
    elif edit == "broken utf8":
        data = data.replace(b'name: "', b'name: "\xc3', 1)
    elif edit == "long name":
        data = data.replace(b'name: "', b'name: "' + b"n" * rng.choice([300, 4097, 100_000]), 1)
    elif edit == "deep nesting":
        depth = rng.choice([10, 65, 5000])
        data += b"\n" + b"layer { " * depth + b"}" * depth + b"\n"
    elif edit == "old mem_param":
        data += b'\nmem_param { exclude_blob: "data" }\n'
    elif edit == "tabs":
        data = data.replace(b"  ", b"\t")
    elif edit == "no final newline":
        data = data.rstrip(b"\r\n")
    elif edit == "swap tokens":
        tokens = [m for m in TOKEN.finditer(data) if not m.group().startswith(b"#")]
        if len(tokens) > 1:
            a, b = sorted(rng.sample(tokens, 2), key=lambda m: m.start())
            data = data[: a.start()] + b.group() + data[a.end() : b.start()] + a.group() + data[b.end() :]
    elif edit == "repeat layer":
        blocks = [m for m in re.finditer(rb"\nlayers? \{", data)]
        if blocks:
            start = rng.choice(blocks).start()
            data = data[:start] + data[start : start + 4000] * rng.choice([2, 50]) + data[start:]
    return data, edit


NET_FLAG_VALUES = {
    "--phase": ["TRAIN", "TEST", "test", "VAL", ""],
    "--batch": ["1", "0", "-1", "3", "2147483648", "9" * 30, "x"],
    "--dtype": ["float16", "float64", "int8"],
    "--engine": ["caffe", "cudnn", "mkl"],
    "--device": ["cpu", "gpu", "tpu"],
    "--context-mib": ["0", "300", "-5", "9" * 30],
    "--max-input-size": ["1", "100KiB", "64MiB", "0", "9" * 400, "5 GB", "-1", "1e3", ""],
    "--level": ["0", "-1", "2147483648", "x"],
    "--stage": ["deploy", "", "\x1b[31m"],
    "--input": ["data=1,3,8,8", "data=", "data=0", "data=-1", "=1", "data=1,2,3,4,5,6,7,8,9", "data=99999,99999,99999", "nope=1", "data=1,x"],
}
OPTIMIZE_FLAG_VALUES = {
    "--strategy": ["auto", "fork", "packed", "greedy", "none"],
    "--exclude-blob": ["data", "nope", "", "conv1"],
    "--target": ["caffemem", "fork", "other"],
    "--gpus": ["1", "2", "0", "9" * 30],
}
FLAGS_ALONE = ["--share-buffers", "--inplace", "--force", "--lenient", "--json"]
SIZES = ["11GiB", "0", "1", "1.5GB", ".5GiB", "12G", "-1", "1e9", "9" * 400, "", "12 GiB", "100000000TiB"]


def _net_flags(rng: random.Random, base: Base, odd: float) -> list[str]:
    flags = list(base.options) if rng.random() < 0.95 else []
    while rng.random() < odd:
        flag = rng.choice(list(NET_FLAG_VALUES))
        flags += [flag, rng.choice(NET_FLAG_VALUES[flag])]
    return flags


# Each surface, its share of the cases (weights, of 100) and what it tries.  The first six
# are the families of the first campaign (issues 26 and 27); the others are issue 31's.
SURFACES: dict[str, tuple[int, str]] = {
    "mutated": (24, "real nets after one to four edits, through every command"),
    "binary": (3, "binary NetParameters, bytes flipped or cut"),
    "flags": (10, "valid nets with odd flag values"),
    "special": (8, "inputs and outputs that are FIFOs, sockets, folders, devices, links"),
    "environment": (8, "stdout full, closed or a closed pipe; deleted working folder; odd terminals and locales"),
    "signal": (7, "Ctrl-C after a random delay, in a fresh interpreter too"),
    "cwd": (4, "planted grpc_tools/, google/, click/... packages, site hooks and a protoc on PATH in the working folder, with --caffe-root / $CAFFE_ROOT trees (empty schema cache)"),
    "patch": (4, "`patch` on Caffe trees with links on the files and folders it writes, and crafted journals"),
    "sources": (5, "LMDB, LevelDB, HDF5 and image-list sources with FIFOs, links outside, devices and damaged bytes inside"),
    "record": (4, "`verify` of an unsafe table whose made-for record (prototxt or --plan-json) was edited"),
    "duplicates": (3, "duplicate layer names with `optimize --recompute`"),
    "force_backward": (3, "force_backward nets planned with `--phase TEST`, the table replayed with Backward"),
    "config": (4, "`check` settings: --config FIFO, device, huge or deep; [tool.*] tables beside a budget; broken pyproject.toml"),
    "cr_comment": (3, "a lone CR before or after a trailing comment, through `optimize -o`, --inplace, --force, --batch"),
    "read_outputs": (3, "outputs naming a file the run read (settings, lists, images, mean file, caffe.proto, --layers file)"),
    "injection": (5, "escape sequences, CR, HTML, @mentions, `<!--`, `::error` in names, through every output format"),
    "api": (2, "the library API with bogus values"),
}
NEW_SURFACE_LIMIT = 20.0  # seconds: a FIFO left blocking is a hang; a normal run of these takes a few


def generate(seed: int, count: int, fresh_share: float = 0.03, surfaces: list[str] | None = None) -> list[Case]:
    """``count`` cases drawn from ``seed``: the same seed gives the same cases.
    ``surfaces``: only those (each case keeps its number in the full sequence's draw)."""
    rng = random.Random(seed)
    bases = corpus()
    names = list(SURFACES)
    weights = [SURFACES[name][0] for name in names]
    if surfaces is not None:
        weights = [w if name in surfaces else 0 for name, w in zip(names, weights)]
    cases = []
    for number in range(count):
        draw = random.Random(rng.getrandbits(64))
        family = draw.choices(names, weights)[0]
        cases.append(_case(number, family, draw, bases, fresh_share) if family in OLD_FAMILIES else _surface_case(number, family, draw, bases))
    return cases


OLD_FAMILIES = ("mutated", "binary", "flags", "special", "environment", "signal")


def _surface_case(number: int, family: str, rng: random.Random, bases: list[Base]) -> Case:
    """One case of an issue-31 surface, from its builder's fields."""
    builders = {
        "cwd": _cwd_case, "patch": _patch_case, "sources": _source_case, "record": _record_case, "duplicates": _duplicate_case,
        "force_backward": lambda r: _force_backward_case(r, bases), "config": _config_case, "cr_comment": _cr_case,
        "read_outputs": _read_outputs_case, "injection": _injection_case, "api": _api_case,
    }  # fmt: skip
    fields = builders[family](rng)
    return Case(number, family, limit=NEW_SURFACE_LIMIT, memory_cap=NEW_SURFACE_MEMORY_CAP, **fields)


def _case(number: int, family: str, rng: random.Random, bases: list[Base], fresh_share: float) -> Case:
    base = rng.choice(bases)
    data = base.data
    if family == "mutated":
        for _ in range(rng.randint(1, 4)):
            data, _ = mutate(rng, data, benign=rng.random() < 0.6)
    name = "net.prototxt"
    if family == "mutated" and rng.random() < 0.08:  # the net inline in a solver: the whole training process
        field_name = rng.choice(["net_param", "train_net_param"])
        data = f"{field_name} {{\n".encode() + data + b'\n}\ntest_iter: 1\ntest_interval: 10\nbase_lr: 0.01\nlr_policy: "fixed"\n'
    files = [(name, data)]
    if family == "binary":
        name, files = "net.caffemodel", [("net.caffemodel", _binary(rng, base.data))]
    odd = 0.6 if family == "flags" else 0.08
    net_flags = _net_flags(rng, base, odd)
    command = rng.choices(["analyze", "optimize", "verify", "check", "fit"], [30, 40, 8, 12, 10])[0]
    argv: list[str] = []
    outputs: list[str] = []
    verify_with = None
    if command == "analyze":
        argv = ["analyze", name, *net_flags]
        if rng.random() < 0.2:
            argv += ["--html", "report.html"]
            outputs.append("report.html")
        if rng.random() < 0.3:
            argv.append(rng.choice(["--json", "--layers-table", "--top=0", "--top=999999"]))
    elif command == "optimize":
        argv = ["optimize", name, *net_flags]
        for flag in FLAGS_ALONE:
            if rng.random() < (0.3 if family == "flags" else 0.05):
                argv.append(flag)
        for flag, values in OPTIMIZE_FLAG_VALUES.items():
            if rng.random() < (0.3 if family == "flags" else 0.1):
                argv += [flag, rng.choice(values)]
        if rng.random() < 0.8:
            argv += ["-o", "out.prototxt"]
            outputs.append("out.prototxt")
            if rng.random() < 0.75:
                argv += ["--plan-json", "plan.json"]
                outputs.append("plan.json")
                verify_with = tuple(_net_options_only(net_flags))
        if rng.random() < 0.15:
            argv += ["--html", "report.html"]
            outputs.append("report.html")
    elif command == "verify":
        plan = _plan_for(rng, base)
        files.append(("plan.json", plan))
        argv = ["verify", name, "plan.json", *net_flags]
    elif command == "check":
        argv = ["check", name]
        if rng.random() < 0.3:  # a folder of nets, checked by worker processes
            files.append(("other.prototxt", rng.choice(bases).data))
            argv = ["check", "."]
        for i in range(len(net_flags) - 1):
            if net_flags[i] == "--input":  # check's one net flag: the others are its own
                argv += net_flags[i : i + 2]
        if rng.random() < 0.4:
            argv += ["--budget", rng.choice(SIZES)]
        if rng.random() < 0.5:
            argv += ["--baseline", "baseline.json"]
            outputs.append("baseline.json")
            if rng.random() < 0.5:
                argv.append("--update-baseline")
            if rng.random() < 0.4:
                files.append(("baseline.json", _baseline(rng)))
        if rng.random() < 0.3:
            argv += ["--report", rng.choice(["markdown", "json", "github", "junit", "x"]) + ":report.txt"]
            outputs.append("report.txt")
        if rng.random() < 0.2:
            argv += ["--tolerance", rng.choice(["2%", "0", "-1%", "1e999", "nan", "x", "200%"])]
        argv += ["--jobs", rng.choice(["1", "1", "2"])]
    else:  # fit
        argv = ["fit", name, *[a for a in net_flags if not a.startswith("--batch")]]
        if "--batch" in argv:
            i = argv.index("--batch")
            del argv[i : i + 2]
        argv += ["--gpu-memory", rng.choice(SIZES) if family == "flags" else rng.choice(["12GiB", "1GiB", "80GB"])]
        if rng.random() < 0.3:
            argv += ["--reserve", rng.choice(SIZES)]
        if rng.random() < 0.2:
            argv += ["--effective-batch", rng.choice(["256", "1", "100000000000000000000", "0"])]
        if rng.random() < 0.2:
            argv.append("--optimized")
    case = Case(number, family, tuple(argv), tuple(files), outputs=tuple(outputs), verify_with=verify_with)
    if family == "special":
        return _special(rng, case)
    if family == "environment":
        return _environment(rng, case, fresh_share)
    if family == "signal":
        fresh = rng.random() < fresh_share * 4
        return _replace(case, interrupt_after=rng.uniform(0.0, 0.4 if fresh else 1.5), fresh=fresh)
    return case


def _replace(case: Case, **changes) -> Case:
    from dataclasses import replace

    return replace(case, **changes)


def _net_options_only(flags: list[str]) -> list[str]:
    """The flags verify shares with optimize (not --batch: a table is for the file's own)."""
    kept = []
    for i in range(0, len(flags) - 1, 2):
        if flags[i] != "--batch":
            kept += flags[i : i + 2]
    return kept


def _plan_for(rng: random.Random, base: Base) -> bytes:
    """A plan for verify: garbage, or the shape of a real one with odd values."""
    slot = rng.choice([0, 1, -1, 2**64, "x", None])
    plans = [
        b"", b"{", b"[]", b"null", b'{"phases": []}', b'{"phases": [{"phase": "TRAIN", "plan": {"slots": {"0": 1e999}, "assign": []}}]}',
        json.dumps({"phases": [{"phase": rng.choice(["TRAIN", "TEST", "X"]), "plan": {"slots": {"0": 16}, "assign": [["data", "data", slot, 0]]}}]}).encode(),
        b"\xff\xfe{\x00",
    ]  # fmt: skip
    return rng.choice(plans)


def _baseline(rng: random.Random) -> bytes:
    figure = rng.choice(["1e999", "-1", "NaN", '"x"', "true", "1.5", "9" * 400, "0", "12345"])
    return rng.choice(
        [
            f'{{"format": 1, "optimized": false, "device": "cpu", "nets": {{"net.prototxt": {{"TRAIN": {{"bytes": {figure}, "caffemem": "0.1.0"}}}}}}}}'.encode(),
            b"{}",
            b"[1, 2",
            b'{"format": 1, "optimized": false, "nets": []}',
            b"\x00\x01",
        ]
    )


def _binary(rng: random.Random, text: bytes) -> bytes:
    """The net as a binary NetParameter (a .caffemodel without weights), then damaged."""
    from google.protobuf import text_format

    from caffemem.schema import caffe_pb2

    net = caffe_pb2.NetParameter()
    try:
        text_format.Parse(text.decode("utf-8", "replace"), net, allow_unknown_field=True)
    except Exception:  # noqa: BLE001 (a fixture with fork fields the schema lacks: any bytes will do)
        return text[:200]
    data = bytearray(net.SerializeToString())
    edit = rng.choice(["none", "flip", "cut", "name"])
    if edit == "flip" and data:
        for _ in range(rng.randint(1, 6)):
            data[rng.randrange(len(data))] = rng.randrange(256)
    elif edit == "cut":
        data = data[: rng.randrange(len(data) + 1)]
    elif edit == "name":
        data = bytearray(b"\x0a\x02\xc2x") + data
    return bytes(data)


def _special(rng: random.Random, case: Case) -> Case:
    """An input or an output that is not a plain new file."""
    argv = list(case.argv)
    kind = rng.choice(["input fifo", "input socket", "input folder", "input device", "input loop", "input dangling", "input missing", "input empty name",
                       "output folder", "output fifo", "output device", "output link to input", "output same as other", "output 255 bytes",
                       "output 256 bytes", "output empty", "output missing folder", "output dash", "input kmsg", "layers garbage"])  # fmt: skip
    special = list(case.special)
    outputs = list(case.outputs)
    net = argv[1]
    if kind.startswith("input"):
        target = {"input device": "/dev/zero", "input kmsg": "/proc/kmsg", "input missing": "missing.prototxt", "input empty name": ""}.get(kind, "special.prototxt")
        if kind in ("input fifo", "input socket", "input folder", "input loop", "input dangling"):
            special.append(("special.prototxt", kind.split()[1]))
        argv[1] = target
    elif kind == "layers garbage":
        argv += ["--layers", "layers.toml"]
        return _replace(case, argv=tuple(argv), files=case.files + (("layers.toml", rng.choice([b"[layer.X]\nbottoms = 1e999\n", b"\xff\xfe", b"[[[", b""])),))
    else:
        out = {
            "output folder": "afolder", "output fifo": "afifo", "output device": "/dev/full", "output link to input": "alias.prototxt",
            "output same as other": "plan.json" if "--plan-json" in argv else "out.prototxt", "output 255 bytes": "o" * 251 + ".txt",
            "output 256 bytes": "o" * 252 + ".txt", "output empty": "", "output missing folder": "nofolder/out.prototxt", "output dash": "-",
        }[kind]  # fmt: skip
        if kind == "output folder":
            special.append(("afolder", "folder"))
        elif kind == "output fifo":
            special.append(("afifo", "fifo"))
        elif kind == "output link to input":
            special.append(("alias.prototxt", f"link:{net}"))
        flag = rng.choice(["-o", "--html"] if argv[0] == "optimize" else ["--html"])
        if argv[0] in ("check",):
            flag = "--report"
            out = f"json:{out}"
        elif argv[0] in ("verify", "fit"):
            return _replace(case, argv=tuple(argv + ["--max-input-size", rng.choice(["", "1"])]))
        argv += [flag, out]
        if out and out != "-" and "/" not in out:
            outputs.append(out.removeprefix("json:"))
    return _replace(case, argv=tuple(argv), special=tuple(special), outputs=tuple(outputs))


ENVIRONMENTS = {
    "stdout full": {"stdout": "full"},
    "stdout closed": {"stdout": "closed"},
    "stdout head": {"stdout": "head"},
    "stderr closed": {"stderr": "closed"},
    "deleted cwd": {"delete_cwd": True},
    "columns 0": {"env": (("COLUMNS", "0"),)},
    "columns huge": {"env": (("COLUMNS", "100000"),)},
    "term dumb": {"env": (("TERM", "dumb"), ("NO_COLOR", "1"))},
    "force color": {"env": (("FORCE_COLOR", "1"), ("COLUMNS", "20"))},
}
FRESH_ENVIRONMENTS = {
    "ascii": (("PYTHONIOENCODING", "ascii"),),
    "C locale": (("LC_ALL", "C"), ("LANG", "C"), ("PYTHONUTF8", "0"), ("PYTHONCOERCECLOCALE", "0")),
    "latin-1": (("PYTHONIOENCODING", "latin-1"),),
}


def _environment(rng: random.Random, case: Case, fresh_share: float) -> Case:
    if rng.random() < fresh_share * 6:
        return _replace(case, env=FRESH_ENVIRONMENTS[rng.choice(list(FRESH_ENVIRONMENTS))], fresh=True)
    changes = dict(ENVIRONMENTS[rng.choice(list(ENVIRONMENTS))])
    if changes.get("delete_cwd"):
        changes["argv"] = tuple(a if a in ("", "-") or a.startswith(("-", "/")) or "=" in a or a.replace(".", "").isdigit() or ":" in a else "{dir}/" + a for a in case.argv[:1]) + tuple(
            ("{dir}/" + a if a in dict(case.files) or a in case.outputs else a) for a in case.argv[1:]
        )
    return _replace(case, **changes)


# ----------------------------------------------------------------------------- the surfaces of issue 31
#
# Each builder below draws one case of its surface.  The cases share one folder layout:
# the case's folder (the working directory) and, beside it, an ``outside`` folder the
# command has no business writing (a sentinel: hashed before and after, and where planted
# code leaves its marker files).  ``{dir}`` and ``{outside}`` in arguments, link targets
# and templated file bytes become those folders' paths.

OUTSIDE_FILES = {"precious.txt": b"precious, not caffemem's\n", "dir/keep.txt": b"keep\n", "bin/tool.sh": b"#!/bin/sh\necho tool\n"}


def _c_escaped(text: str) -> str:
    """``text`` as the inside of a prototxt string: quotes, backslashes and every byte
    outside printable ASCII escaped (octal), as protobuf's text format reads them."""
    out = []
    for byte in text.encode("utf-8"):
        if byte in (0x22, 0x5C):
            out.append("\\" + chr(byte))
        elif 0x20 <= byte < 0x7F:
            out.append(chr(byte))
        else:
            out.append(f"\\{byte:03o}")
    return "".join(out)


@dataclass(frozen=True)
class Layer:
    """One layer of a generated net (:func:`tiny_net`)."""

    name: str
    type: str
    bottoms: tuple[str, ...]
    tops: tuple[str, ...]
    body: str = ""


def tiny_net(rng: random.Random, *, loss: bool = True, blocks: int = 2, batch: int = 2, bn: bool = False, dropout: bool = False) -> list[Layer]:
    """A small valid net (an Input, residual blocks of Convolution [BatchNorm Scale] ReLU
    in place, a pooling, an inner product, a loss or a Softmax): the raw material of the
    surfaces that rename, force or inject."""
    channels, size = rng.choice([2, 3, 4]), rng.choice([6, 8, 12])
    layers = [
        Layer(
            "data",
            "Input",
            (),
            ("data", "label") if loss else ("data",),
            f"input_param {{ shape {{ dim: {batch} dim: {channels} dim: {size} dim: {size} }}" + (f" shape {{ dim: {batch} }}" if loss else "") + " }",
        )
    ]
    current = "data"
    for b in range(1, blocks + 1):
        conv = f"conv{b}"
        layers.append(Layer(conv, "Convolution", (current,), (conv,), 'convolution_param { num_output: 4 kernel_size: 3 pad: 1 weight_filler { type: "gaussian" std: 0.1 } }'))
        if bn:
            layers.append(Layer(f"bn{b}", "BatchNorm", (conv,), (conv,)))
            layers.append(Layer(f"scale{b}", "Scale", (conv,), (conv,), "scale_param { bias_term: true }"))
        layers.append(Layer(f"relu{b}", "ReLU", (conv,), (conv,)))
        if b > 1 and rng.random() < 0.6:
            layers.append(Layer(f"res{b}", "Eltwise", (current, conv), (f"res{b}",)))
            conv = f"res{b}"
        current = conv
    layers.append(Layer("pool", "Pooling", (current,), ("pool",), "pooling_param { pool: MAX kernel_size: 2 stride: 2 }"))
    layers.append(Layer("fc", "InnerProduct", ("pool",), ("fc",), 'inner_product_param { num_output: 6 weight_filler { type: "gaussian" std: 0.1 } }'))
    if dropout:
        layers.append(Layer("drop", "Dropout", ("fc",), ("fc",), "dropout_param { dropout_ratio: 0.5 }"))
    layers.append(Layer("sig", "Sigmoid", ("fc",), ("fc",)))
    layers.append(Layer("score", "InnerProduct", ("fc",), ("score",), "inner_product_param { num_output: 3 }"))
    layers.append(Layer("loss", "SoftmaxWithLoss", ("score", "label"), ("loss",)) if loss else Layer("prob", "Softmax", ("score",), ("prob",)))
    return layers


def render_net(layers: list[Layer], name: str = "tiny", force_backward: bool = False) -> bytes:
    """The layers as a prototxt (names C-escaped: any character can be given)."""
    lines = [f'name: "{_c_escaped(name)}"'] + (["force_backward: true"] if force_backward else [])
    for layer in layers:
        words = [f'name: "{_c_escaped(layer.name)}"', f'type: "{layer.type}"']
        words += [f'bottom: "{_c_escaped(b)}"' for b in layer.bottoms] + [f'top: "{_c_escaped(t)}"' for t in layer.tops]
        lines.append("layer { " + " ".join(words) + (" " + layer.body if layer.body else "") + " }")
    return ("\n".join(lines) + "\n").encode()


def _rename(layers: list[Layer], old: str, new: str, blobs: bool = False) -> list[Layer]:
    """Layer ``old`` named ``new`` (and, with ``blobs``, the blob ``old`` too, everywhere)."""

    def blob(name: str) -> str:
        return new if blobs and name == old else name

    return [Layer(new if layer.name == old else layer.name, layer.type, tuple(map(blob, layer.bottoms)), tuple(map(blob, layer.tops)), layer.body) for layer in layers]


def _fixture(relative: str) -> bytes:
    return (REPO / relative).read_bytes()


LENET = "fixtures/check/models/lenet.prototxt"  # TRAIN and TEST, Input layers
LENET_DEPLOY = "fixtures/check/models/deploy/lenet_deploy.prototxt"
RECOMPUTE_RESNET = "fixtures/plan/recompute_resnet.prototxt"  # force_backward, BatchNorm, Dropout


def _small_nets(rng: random.Random) -> bytes:
    """A valid net that needs no --input: a fixture or a generated one."""
    pick = rng.random()
    if pick < 0.2:
        return _fixture(LENET_DEPLOY)
    if pick < 0.35:
        return _fixture(LENET)
    if pick < 0.5:
        return _fixture(RECOMPUTE_RESNET)
    return render_net(tiny_net(rng, loss=rng.random() < 0.6, bn=rng.random() < 0.4, dropout=rng.random() < 0.3))


# ---- hostile working directory ------------------------------------------------------------------


PLANTED_PACKAGES = ["grpc_tools", "google", "click", "rich", "numpy", "lmdb", "h5py", "plyvel", "PIL", "tomli", "caffemem", "encodings_x"]


def _marker_code(what: str) -> bytes:
    return f'import os\nopen(os.path.join(r"{{outside}}", "PWNED-{what}"), "a").write("planted code ran\\n")\n'.encode()


def _planted(rng: random.Random) -> list[tuple]:
    """Python packages, site hooks and executables a hostile checkout puts in the working
    directory; each leaves a marker file outside when it runs."""
    steps: list[tuple] = []
    if rng.random() < 0.7:  # else protoc really compiles: what follows the compile is tried too
        steps += [("write", "grpc_tools/__init__.py", _marker_code("grpc_tools")), ("write", "grpc_tools/protoc.py", _marker_code("grpc_tools.protoc"))]
    for package in rng.sample(PLANTED_PACKAGES[1:], rng.randint(2, len(PLANTED_PACKAGES) - 1)):
        steps.append(("write", f"{package}/__init__.py", _marker_code(package)))
        if package == "google":
            steps.append(("write", "google/protobuf/__init__.py", _marker_code("google.protobuf")))
    for hook in ("sitecustomize", "usercustomize"):
        if rng.random() < 0.7:
            steps.append(("write", f"{hook}.py", _marker_code(hook)))
    for program in ("protoc", "python", "python3", "sh", "c++", "g++"):
        if rng.random() < 0.6 or program == "protoc":
            steps.append(("write", program, f"#!/bin/sh\necho ran >> '{{outside}}/PWNED-{program}-from-PATH'\nexit 1\n".encode()))
            steps.append(("chmod", program, 0o755))
    return steps


FORK_PROTO_EXTRA = b"""
message HostileExtraParameter {
  optional int32 scale = 1 [default = 2];
  optional string note = 2;
}
"""


def _fork_tree(rng: random.Random, root: str, variant: str) -> list[tuple]:
    """A Caffe tree for --caffe-root: caffemem's own caffe.proto (proto/caffe.proto), as is,
    with a fork's extra message and field, with a field retyped, or with a hostile file
    where the tree's sources or the .proto are read."""
    proto = _fixture("proto/caffe.proto")
    steps: list[tuple] = [("mkdir", f"{root}/src/caffe/layers"), ("mkdir", f"{root}/include/caffe")]
    if variant == "extra field":
        proto = proto.replace(b"message LayerParameter {", b"message LayerParameter {\n  optional HostileExtraParameter hostile_extra_param = 4321;", 1) + FORK_PROTO_EXTRA
    elif variant == "retyped field":
        proto = re.sub(rb"optional uint32 num_output = 1;", b"optional float num_output = 1;", proto, count=1)
    elif variant == "comment noise":
        proto = b"// " + str(rng.random()).encode() + b"\n" + proto  # another hash: another compile
    steps.append(("write", f"{root}/src/caffe/proto/caffe.proto", proto))
    steps.append(("write", f"{root}/src/caffe/layers/hostile_layer.cpp", b"#include <caffe/layer.hpp>\nnamespace caffe {\nREGISTER_LAYER_CLASS(HostileUp);\n}\n"))
    if variant == "fifo source":
        steps.append(("fifo", f"{root}/src/caffe/layers/blocking_layer.cpp"))
    elif variant == "device source":
        steps.append(("link", f"{root}/include/caffe/zero.hpp", "/dev/zero"))
    elif variant == "link source outside":
        steps.append(("link", f"{root}/src/caffe/layers/outside_layer.cpp", "{outside}/precious.txt"))
    elif variant == "proto fifo":
        steps.append(("remove", f"{root}/src/caffe/proto/caffe.proto"))
        steps.append(("fifo", f"{root}/src/caffe/proto/caffe.proto"))
    elif variant == "proto link to device":
        steps.append(("remove", f"{root}/src/caffe/proto/caffe.proto"))
        steps.append(("link", f"{root}/src/caffe/proto/caffe.proto", "/dev/zero"))
    return steps


FORK_VARIANTS = ["plain", "plain", "extra field", "extra field", "retyped field", "comment noise", "fifo source", "device source", "link source outside", "proto fifo", "proto link to device"]


def _cwd_case(rng: random.Random) -> dict:
    """A run whose working directory holds planted packages and programs, with and
    without a Caffe tree given by --caffe-root or $CAFFE_ROOT (an empty cache: protoc runs)."""
    setup = _planted(rng)
    env = {"PATH": rng.choice([".:{path}", ":{path}", "{path}:", "{path}::/usr/bin", "{path}"]), "CAFFEMEM_CACHE_DIR": "{dir}/cache"}
    setup.append(("mkdir", "cache"))
    checks = ["outside"]
    net = _small_nets(rng)
    with_root = rng.random() < 0.75
    variant = "none"
    layers_file = None
    if with_root:
        variant = rng.choice(FORK_VARIANTS)
        setup += _fork_tree(rng, "tree", variant)
        if variant == "extra field" and rng.random() < 0.7:
            net = net.replace(b'type: "Convolution"', b'type: "Convolution" hostile_extra_param { scale: 3 }', 1)
        if variant == "retyped field" and b"num_output" in net:
            checks.append("refused")  # README: a net that sets a field the fork types otherwise is refused
        if rng.random() < 0.3:  # a type only the fork registers, declared in a --layers file or not
            net = net.replace(b'type: "ReLU"', b'type: "HostileUp"', 1)
            if rng.random() < 0.6:
                layers_file = b'[layer.HostileUp]\nbottoms = 1\ntops = 1\ntop = ["like bottom 0"]\n'
    files = [("net.prototxt", net)] + ([("up.layers.toml", layers_file)] if layers_file else [])
    command = rng.choice(["analyze", "analyze", "optimize", "check", "check-jobs", "fit", "verify"])
    argv = {
        "analyze": ["analyze", "net.prototxt"],
        "optimize": ["optimize", "net.prototxt", "-o", "out.prototxt"],
        "check": ["check", "net.prototxt"],
        "check-jobs": ["check", ".", "--jobs", "2"],
        "fit": ["fit", "net.prototxt", "--gpu-memory", "1GiB"],
        "verify": ["verify", "net.prototxt"],
    }[command]
    if layers_file:
        argv += ["--layers", "up.layers.toml"]
    if with_root:
        if rng.random() < 0.5:
            env["CAFFE_ROOT"] = "{dir}/tree"
        else:
            argv += ["--caffe-root", "{dir}/tree"]
    runner = "script" if rng.random() < 0.5 else "fork"
    outputs = ("out.prototxt",) if command == "optimize" else ()
    return {
        "argv": tuple(argv),
        "files": tuple(files),
        "setup": tuple(setup),
        "env": tuple(env.items()),
        "checks": tuple(checks),
        "runner": runner,
        "outputs": outputs,
        "note": f"caffe root: {variant}",
    }


# ---- links in Caffe trees and crafted journals for `caffemem patch` --------------------------------


@functools.lru_cache(maxsize=1)
def _patch_layout() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(the files BVLC's patch edits, the files it adds), tree-relative."""
    from caffemem import runtime

    edited = tuple(sorted({e.path for e in runtime._read_edits(runtime.Flavour.BVLC)}))
    return edited, tuple(sorted(runtime._new_files(runtime.Flavour.BVLC)))


JOURNAL = ".caffemem-patch.journal"


def fake_caffe_tree(root: Path) -> None:
    """A tree `caffemem patch` takes for BVLC master, made from the patch itself: each file
    it edits holds the text each edit finds there, plus the files detect_flavour looks for
    (no copy of Caffe's sources needed; tests/runtime patches the real tree)."""
    from caffemem import runtime

    texts: dict[str, list[str]] = {}
    for edit in runtime._read_edits(runtime.Flavour.BVLC):
        texts.setdefault(edit.path, []).append(edit.find)
    for rel in (
        "src/caffe/net.cpp",
        "include/caffe/net.hpp",
        "src/caffe/proto/caffe.proto",
        "include/caffe/blob.hpp",
        "include/caffe/layers/clip_layer.hpp",
        "include/caffe/layers/swish_layer.hpp",
        "Makefile",
    ):
        texts.setdefault(rel, [])
    for rel, finds in texts.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"// {rel}: a stand-in for BVLC Caffe's file\n" + "\n// ----\n".join(finds))
    for rel in runtime._new_files(runtime.Flavour.BVLC):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)


SCRIPT = b"#!/bin/sh\necho pwned\n"


def _journal_entry(rng: random.Random, kind: str) -> tuple[str, str, str, int]:
    """(path, before, after, mode) of one journal entry, as words :func:`_set_up` turns
    into bytes: before is "script", "none" or "original:<path>"; after "null", "random",
    "patched:<path>" or "current:<path>"."""
    edited, added = _patch_layout()
    if kind == "legit":
        rel = rng.choice(edited + added)
        return (rel, "none" if rel in added else f"original:{rel}", f"patched:{rel}", 0o644)
    if kind == "link":
        return ("evil_link/pwned.sh", "script", "null", rng.choice([0o4755, 0o755, 0o644]))
    if kind == "link to edited":
        return ("linked/net.cpp", "script", "null", 0o644)
    if kind == "dotdot":
        return (rng.choice(["../pwned.sh", "src/../../pwned.sh", "src/caffe/../../../pwned.sh"]), "script", "null", 0o755)
    if kind == "absolute":
        return (rng.choice(["{outside}/pwned.sh", "{outside}/dir/keep.txt", "/{outside}/precious.txt"]), "script", "null", 0o755)
    # "current:<path>": the hash of the file as it is, so that recovery goes on to write
    # ``before`` there (what a crafted journal needs to do harm).
    if kind == "setuid":
        rel = rng.choice(edited)
        return (rel, "script", f"current:{rel}", rng.choice([0o4755, 0o6755, 2541, 0o2755, 0o7777]))
    if kind == "never edited":
        rel = rng.choice(["Makefile", "pwned.sh", "tools/caffe.cpp", "src/caffe/layers/new_layer.cpp", ".git/hooks/pre-commit"])
        return (rel, rng.choice(["script", "none"]), f"current:{rel}", 0o755)
    if kind == "odd mode":
        rel = rng.choice(edited)
        return (rel, "script", f"current:{rel}", rng.choice([-1, 2**40, 0o1000000]))
    raise ValueError(kind)


JOURNAL_KINDS = ["link", "link to edited", "dotdot", "absolute", "setuid", "never edited", "odd mode"]


def _patch_case(rng: random.Random) -> dict:
    """`caffemem patch` on a tree with links on the files or folders it writes, or with a
    journal someone crafted (or a real one, left by a killed run)."""
    edited, added = _patch_layout()
    setup: list[tuple] = [("caffe-tree", "caffe")]
    flag = rng.choice([[], [], ["--revert"], ["--check"]])
    patched_first = rng.random() < (0.85 if flag == ["--revert"] else 0.15)  # so that the command has work to do
    if patched_first:
        setup.append(("patch", "caffe"))
    checks = ["outside", "links kept", "no setuid", "only outputs:caffe/"]
    variant = rng.choice(["link file", "link folder", "journal", "journal", "journal", "legit journal", "unrelated link"])
    if variant == "link file":
        rel = rng.choice(edited + added) if patched_first else rng.choice(edited)
        setup.append(("link-out", f"caffe/{rel}"))
    elif variant == "link folder":
        folder = rng.choice(["src/caffe/util", "include/caffe/util", "src/caffe/proto", "include/caffe", "src/caffe", "src"])
        setup.append(("link-out", f"caffe/{folder}"))
    elif variant == "unrelated link":
        setup.append(("link", "caffe/docs", "{outside}/dir"))
    else:
        setup.append(("link", "caffe/evil_link", "{outside}/dir"))
        setup.append(("link", "caffe/linked", "{outside}"))
        kinds = ["legit"] * rng.randint(1, 3) if variant == "legit journal" else [rng.choice(JOURNAL_KINDS) for _ in range(rng.randint(1, 2))] + ["legit"] * rng.randint(0, 2)
        rng.shuffle(kinds)
        entries = tuple(_journal_entry(rng, kind) for kind in kinds)
        setup.append(("journal", "caffe", entries))
        if variant == "journal":
            checks.append("refused")  # a journal no caffemem run wrote: nothing may be done with it
    outputs = tuple(f"caffe/{rel}" for rel in edited + added) + (f"caffe/{JOURNAL}",)
    return {"argv": ("patch", "caffe", *flag), "setup": tuple(setup), "checks": tuple(checks), "outputs": outputs, "note": variant}


# ---- data sources with links, FIFOs and damage inside ----------------------------------------------


def _datum_bytes(channels: int, height: int, width: int) -> bytes:
    from caffemem.schema import caffe_pb2

    return caffe_pb2.Datum(channels=channels, height=height, width=width, data=bytes(channels * height * width), label=1).SerializeToString()


SOURCE_NET = {
    "lmdb": 'layer {{ name: "data" type: "Data" top: "data" top: "label" data_param {{ source: "{source}" backend: LMDB batch_size: 2 }}{transform} }}',
    "leveldb": 'layer {{ name: "data" type: "Data" top: "data" top: "label" data_param {{ source: "{source}" backend: LEVELDB batch_size: 2 }}{transform} }}',
    "hdf5": 'layer {{ name: "data" type: "HDF5Data" top: "data" top: "label" hdf5_data_param {{ source: "{source}" batch_size: 2 }} }}',
    "image": 'layer {{ name: "data" type: "ImageData" top: "data" top: "label" image_data_param {{ source: "{source}" batch_size: 2 }}{transform} }}',
}
SOURCE_TAIL = """
layer { name: "ip" type: "InnerProduct" bottom: "data" top: "ip" inner_product_param { num_output: 2 } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "ip" bottom: "label" top: "loss" }
"""
SOURCE_VARIANTS = {
    "lmdb": ["intact", "data.mdb fifo", "data.mdb link outside", "data.mdb link device", "lock.mdb fifo", "lock.mdb link outside", "noise", "size past end", "truncated", "data.mdb folder", "folder link outside"],
    "leveldb": [
        "intact", "compacted", "next table link outside", "next manifest link outside", "next table plain file", "next manifest plain file", "compacted table link outside",
        "manifest fifo", "manifest link outside", "current fifo", "current link device", "log fifo", "lock link outside", "extra table link outside", "compacted noise",
        "compacted table truncated", "extra log fifo", "manifest folder",
    ],
    "hdf5": ["intact", "file fifo", "file link device", "external link fifo", "external link device", "external link outside", "noise", "listed folder", "list fifo"],
    "image": ["intact", "image fifo", "image folder", "image link device", "header bomb", "list fifo", "list link outside"],
}  # fmt: skip


def _source_case(rng: random.Random) -> dict:
    kind = rng.choice(list(SOURCE_NET))
    variant = rng.choice(SOURCE_VARIANTS[kind])
    source = {"lmdb": "db", "leveldb": "db", "hdf5": "h5list.txt", "image": "list.txt"}[kind]
    transform = ""
    setup: list[tuple] = [("source", kind, variant)]
    if kind in ("lmdb", "leveldb", "image") and rng.random() < 0.3:
        transform = ' transform_param { mean_file: "mean.binaryproto" }'
        setup.append(("mean", rng.choice(["intact", "intact", "fifo", "link device", "huge header"])))
    net = ('name: "sources"\n' + SOURCE_NET[kind].format(source=source, transform=transform) + SOURCE_TAIL).encode()
    command = rng.choice(["analyze", "analyze", "optimize", "check", "check-jobs", "fit"])
    argv = {
        "analyze": ["analyze", "net.prototxt", "--phase", "TRAIN"],
        "optimize": ["optimize", "net.prototxt", "--phase", "TRAIN", "-o", "out.prototxt"],
        "check": ["check", "net.prototxt", "--phase", "TRAIN"],
        "check-jobs": ["check", "net.prototxt", "other.prototxt", "--jobs", "2", "--phase", "TRAIN"],
        "fit": ["fit", "net.prototxt", "--gpu-memory", "1GiB"],
    }[command]
    files = [("net.prototxt", net)] + ([("other.prototxt", _fixture(LENET_DEPLOY))] if command == "check-jobs" else [])
    return {
        "argv": tuple(argv),
        "files": tuple(files),
        "setup": tuple(setup),
        "checks": ("outside", "links kept", "source untouched"),
        "outputs": ("out.prototxt",) if command == "optimize" else (),
        "note": f"{kind}: {variant}",
    }


# ---- tampered plan records ------------------------------------------------------------------------------


RECORD_EDITS = [
    ("phase", "TEST"), ("phase", "TRAIN"), ("phase", "train"), ("phase", "X"), ("level", 2147483648), ("level", -1), ("level", 1), ("level", "x"),
    ("dtype", "float16"), ("dtype", "float64"), ("dtype", "bogus"), ("batch", 1), ("batch", 0), ("batch", 2**31), ("batch", None), ("device", "gpu"),
    ("device", "cpu"), ("engine", "cudnn"), ("stages", ["deploy"]), ("inputs", {"data": [1, 1, 1, 1]}), ("net", "sha256:0000000000000000"),
    ("rescale", 2), ("phase", None), ("label", "swap"), ("record", "delete"), ("record", "duplicate"), ("record", "broken"),
]  # fmt: skip


def _plan_net(rng: random.Random) -> tuple[bytes, tuple[str, ...]]:
    """A net worth planning, and the flags it is planned with."""
    pick = rng.random()
    if pick < 0.35:
        return _fixture(RECOMPUTE_RESNET), tuple(rng.choice([[], ["--recompute", "sqrt"], ["--recompute", "cheap"], ["--share-buffers"], ["--phase", "TRAIN"]]))
    if pick < 0.5:
        return _fixture(LENET), tuple(rng.choice([[], ["--share-buffers"], ["--phase", "TRAIN"]]))
    # generated nets: the same few seeds again and again, so that their plans are cached
    seeded = random.Random(rng.randrange(12))
    return render_net(tiny_net(seeded, loss=True, blocks=seeded.choice([2, 3]), bn=seeded.random() < 0.5)), tuple(rng.choice([[], ["--share-buffers"], ["--recompute", "sqrt"]]))


def _record_case(rng: random.Random) -> dict:
    """`verify` of a table made unsafe (one member moved onto another's bytes) whose
    made-for record was edited too; the same table without the record edit is the
    control, verified first: where the control is refused, the case must be too."""
    net, flags = _plan_net(rng)
    plan_file = rng.random() < 0.35
    seed = rng.randrange(2**32)
    edits = tuple(rng.sample(RECORD_EDITS, rng.choice([1, 1, 1, 2])))
    if rng.random() < 0.4:  # the edit the issue found: the record names another phase
        edits = (("phase", rng.choice(["TEST", "TEST", "TRAIN"])),) + edits[1:]
    diffs = rng.random() < 0.6  # a Backward-only overlap: what a replay of another phase misses
    which = rng.choice(["TRAIN", "TRAIN", "all", "TEST"]) if diffs else rng.choice(["all", "TRAIN", "TEST"])
    setup = (
        ("cli", ("optimize", "net.prototxt", "-o", "out.prototxt", "--plan-json", "plan.json", *flags)),
        ("unsafe", "plan.json" if plan_file else "out.prototxt", seed, rng.random() < 0.85, diffs),
        ("copy", "plan.json" if plan_file else "out.prototxt", "control.json" if plan_file else "control.prototxt"),
        ("record", "plan.json" if plan_file else "out.prototxt", edits, which),
    )
    phase = rng.choice([[], [], ["--phase", "TRAIN"], ["--phase", "TEST"]])
    argv = ("verify", "net.prototxt", "plan.json", *phase) if plan_file else ("verify", "out.prototxt", *phase)
    return {
        "argv": argv,
        "files": (("net.prototxt", net),),
        "setup": setup,
        "checks": ("control",),
        "note": f"record edits {edits} ({which}) on {'plan.json' if plan_file else 'out.prototxt'}{', a diff moved' if diffs else ''}",
    }


# ---- duplicate layer names with --recompute -------------------------------------------------------------


def _duplicate_case(rng: random.Random) -> dict:
    """Layers renamed alike (Caffe allows it) in the recompute fixture or a generated net,
    planned with --recompute: a written plan must verify, and name no layer twice."""
    if rng.random() < 0.5:
        text = _fixture(RECOMPUTE_RESNET).decode()
        names = re.findall(r'layer \{ name: "(\w+)"', text)
        pool = [n for n in names if n not in ("data", "loss")]
        chosen = rng.sample(pool, rng.choice([2, 2, 3]))
        if rng.random() < 0.5:  # two of one type: the likeliest duplicate
            kind = rng.choice(["relu", "bn", "scale", "conv"])
            chosen = [n for n in pool if n.startswith(kind)][:2]
        new = rng.choice(["dup", "relu1", chosen[0]])
        for name in chosen:
            text = text.replace(f'name: "{name}"', f'name: "{new}"', 1)
        if rng.random() < 0.5:  # an in-place Dropout after the second, as in the issue
            second = re.findall(rf'layer \{{ name: "{new}" type: "\w+" bottom: "(\w+)"', text)
            if len(second) > 1:
                anchor = text.find(f'name: "{new}"', text.find(f'name: "{new}"') + 1)
                end = text.find("\n", anchor)
                text = text[: end + 1] + f'layer {{ name: "{new}_drop" type: "Dropout" bottom: "{second[1]}" top: "{second[1]}" }}\n' + text[end + 1 :]
        net = text.encode()
    else:
        layers = tiny_net(rng, loss=True, blocks=rng.choice([2, 3, 4]), bn=rng.random() < 0.6, dropout=rng.random() < 0.3)
        names = [layer.name for layer in layers if layer.type not in ("Input", "SoftmaxWithLoss")]
        chosen = rng.sample(names, rng.choice([2, 3]))
        new = rng.choice(["dup", chosen[0], ""])
        for name in chosen:
            layers = _rename(layers, name, new)
        net = render_net(layers, force_backward=rng.random() < 0.3)
    policy = rng.choice(["sqrt", "sqrt", "cheap", "budget=300KiB", "budget=1MiB"])
    argv = ["optimize", "net.prototxt", "--recompute", policy, "-o", "out.prototxt", "--plan-json", "plan.json"]
    argv += rng.choice([[], ["--phase", "TRAIN"], ["--share-buffers"]])
    return {
        "argv": tuple(argv),
        "files": (("net.prototxt", net),),
        "checks": ("verify out", "unique names"),
        "outputs": ("out.prototxt", "plan.json"),
        "verify_with": (),
        "note": f"renamed {chosen} to {new!r}",
    }


# ---- force_backward nets planned for TEST ---------------------------------------------------------------


PHASE_FREE = re.compile(rb'(?i:dropout|batchnorm|include|exclude|python|stage|lstm|rnn|recurrent)|"(?:Data|ImageData|HDF5Data|WindowData)"|type: (?:DATA|IMAGE_DATA|HDF5_DATA|WINDOW_DATA)\b')


def _force_backward_case(rng: random.Random, bases: list[Base]) -> dict:
    """A net that runs Backward at test time (force_backward: pycaffe's net.backward(),
    `caffe time`), planned with --phase TEST: its table must hold for Backward too (judged
    by the same table relabelled TRAIN, a phase whose Backward runs: only nets whose TRAIN
    and TEST nets are alike are drawn)."""
    candidates = [b for b in bases if b.data.count(b"layer") < 80 and not PHASE_FREE.search(b.data) and b"input" in b.data.lower()]
    if candidates and rng.random() < 0.35:
        base = rng.choice(candidates)
        net = b"force_backward: true\n" + base.data
        options = tuple(a for a in base.options if a not in ("TRAIN", "TEST", "--phase"))
        note = base.name
    else:
        net = render_net(tiny_net(rng, loss=rng.random() < 0.3, blocks=rng.choice([2, 3, 4])), force_backward=True)
        options, note = (), "a generated net"
    argv = ("optimize", "net.prototxt", "--phase", "TEST", "-o", "out.prototxt", *options, *rng.choice([[], ["--share-buffers"], ["--strategy", "best-fit"]]))
    return {"argv": argv, "files": (("net.prototxt", net),), "checks": ("backward holds",), "outputs": ("out.prototxt",), "note": note}


# ---- config files for check ------------------------------------------------------------------------------


def _deep_toml(rng: random.Random) -> bytes:
    depth = rng.choice([100, 1000, 100_000])
    if rng.random() < 0.5:
        return b'budget = "1KiB"\nx = ' + b"[" * depth + b"]" * depth + b"\n"
    return b'budget = "1KiB"\nx = ' + b"{a = " * depth + b"1" + b"}" * depth + b"\n"


GATE_CONFIGS = [  # (file, text): each applies a 1 KiB budget to net.prototxt, whatever else it holds
    ("caffemem.toml", b'budget = "1KiB"\n[tool.x]\na = 1\n'),
    ("caffemem.toml", b'budget = "1KiB"\n[tool.caffemem]\nbudget = "1KiB"\n'),
    ("caffemem.toml", b'budget = "1KiB"\n[tool]\n'),
    ("caffemem.toml", b'[[nets]]\nglob = "*.prototxt"\nbudget = "1KiB"\n[tool.black]\nline-length = 99\n'),
    ("caffemem.toml", b'budget = "1KiB"\n[[nets]]\nglob = "net.prototxt"\n[x]\ny = 2\n'),
    ("caffemem.toml", b'budget = "1KiB"\nnets = []\n[tool.x.y.z]\n'),
    ("caffemem.toml", b'tool = 5\nbudget = "1KiB"\n'),
    ("caffemem.toml", b"budget = 1024\n[unknown]\n"),
    ("pyproject.toml", b'[tool.black]\nline-length = 99\n[tool.caffemem]\nbudget = "1KiB"\n[tool.ruff.lint]\nselect = ["E"]\n'),
    ("pyproject.toml", b'[project]\nname = "x"\n[tool.caffemem]\nbudget = "1KiB"\n[[tool.caffemem.nets]]\nglob = "*.prototxt"\n'),
    ("pyproject.toml", b'[tool.caffemem]\nbudget = "1KiB"\n[tool.caffemem.x]\n'),
]
BROKEN_CONFIGS = [
    ("pyproject.toml", b"tool = 5\n"), ("pyproject.toml", b'tool = "caffemem"\n'), ("pyproject.toml", b"[tool]\ncaffemem = 5\n"),
    ("pyproject.toml", b"[tool.caffemem]\nnets = 5\n"), ("pyproject.toml", b"[tool]\ncaffemem = []\n"), ("pyproject.toml", b"[project\n"),
    ("pyproject.toml", b"[tool.black]\nline-length = \n"), ("caffemem.toml", b"budget = 1e999\n"), ("caffemem.toml", b"budget = -1\n"),
    ("caffemem.toml", b"budget = true\n"), ("caffemem.toml", b"nets = 5\n"), ("caffemem.toml", b'[[nets]]\nglob = 5\n'), ("caffemem.toml", b"nets = [5]\n"),
    ("caffemem.toml", b'[[nets]]\nglob = "*"\ninputs = 5\n'), ("caffemem.toml", b'[[nets]]\nglob = "*"\ninputs = {data = "x"}\n'), ("caffemem.toml", b"\xff\xfe\x00"),
    ("caffemem.toml", b'budget = "1KiB"\nbudget = "2KiB"\n'), ("caffemem.toml", b'[[nets]]\nglob = "[[["\nbudget = "1KiB"\n'),
    ("caffemem.toml", b'budget = "\xd9\xa1KiB"\n'), ("caffemem.toml", b'budget = "1KiB"\n' + b"# x\n" * 10),
]  # fmt: skip


def _config_case(rng: random.Random) -> dict:
    """`check` with hostile settings: --config naming a FIFO, a device, a huge or deep file;
    a caffemem.toml or pyproject.toml whose other tables must not silence its budget."""
    setup: list[tuple] = [("mkdir", ".git")]
    files = [("net.prototxt", _fixture(LENET_DEPLOY))]
    checks = ["outside"]
    argv = ["check", "net.prototxt"]
    pick = rng.random()
    if pick < 0.3:
        kind = rng.choice(["fifo", "device", "urandom", "folder", "huge", "deep", "empty", "loop", "link outside", "utf16"])
        if kind == "fifo":
            setup.append(("fifo", "cfg.toml"))
        elif kind == "folder":
            setup.append(("mkdir", "cfg.toml"))
        elif kind == "huge":
            setup.append(("sparse", "cfg.toml", rng.choice([80 << 20, 1 << 30])))
        elif kind == "deep":
            files.append(("cfg.toml", _deep_toml(rng)))
        elif kind == "empty":
            files.append(("cfg.toml", b""))
        elif kind == "loop":
            setup.append(("link", "cfg.toml", "cfg.toml"))
        elif kind == "link outside":
            setup.append(("link", "cfg.toml", "{outside}/precious.txt"))
        elif kind == "utf16":
            files.append(("cfg.toml", 'budget = "1KiB"\n'.encode("utf-16")))
        target = {"device": "/dev/zero", "urandom": "/dev/urandom"}.get(kind, "cfg.toml")
        argv += ["--config", target]
        note = f"--config {kind}"
    elif pick < 0.75:
        name, text = rng.choice(GATE_CONFIGS)
        files.append((name, text))
        checks.append("gate")  # the budget applies: exit 1 (or 2 for a file refused), never 0
        note = f"gate: {name} {text[:60]!r}"
    else:
        name, text = rng.choice(BROKEN_CONFIGS + [("caffemem.toml", _deep_toml(rng))])
        files.append((name, text))
        note = f"broken: {name} {text[:60]!r}"
    if rng.random() < 0.3:
        argv += ["--format", rng.choice(["json", "markdown", "github"])]
    if rng.random() < 0.2:
        argv += ["--jobs", "2"]
    return {"argv": tuple(argv), "files": tuple(files), "setup": tuple(setup), "checks": tuple(checks), "note": note}


# ---- CR before comments ---------------------------------------------------------------------------------


def _cr_comment(rng: random.Random, data: bytes) -> tuple[bytes, str]:
    """The net with a lone CR before or after a trailing comment (old Mac files, a stray
    CR an editor left): the comment must not swallow what optimize appends."""
    kind = rng.choice(["last line comment CR", "CR-only ending in comment", "CR-only ending in comment CR", "CRLF then comment CR", "comment CR no newline", "comment CR CR"])
    body = data.rstrip(b"\r\n")
    if kind == "last line comment CR":
        return body + b"\n# end\r", kind
    if kind == "CR-only ending in comment":
        return body.replace(b"\r\n", b"\n").replace(b"\n", b"\r") + b"\r# end", kind
    if kind == "CR-only ending in comment CR":
        return body.replace(b"\r\n", b"\n").replace(b"\n", b"\r") + b"\r# end\r", kind
    if kind == "CRLF then comment CR":
        return body.replace(b"\r\n", b"\n").replace(b"\n", b"\r\n") + b"\r\n# end\r", kind
    if kind == "comment CR no newline":
        return body + b"\n# a comment\rwith a CR inside", kind
    return body + b"\n# end\r\r", kind


def _cr_case(rng: random.Random) -> dict:
    net = _small_nets(rng)
    mode = rng.choice(["-o", "-o", "--inplace", "--force", "--batch"])
    if mode == "--force":  # an old block to re-plan, the comment after it
        net = net.rstrip(b"\n") + b"\nmem_param { optimize_train: true }\n"
    data, kind = _cr_comment(rng, net)
    argv = ["optimize", "net.prototxt", "-o", "out.prototxt"]
    argv += {"-o": [], "--inplace": ["--inplace"], "--force": ["--force"], "--batch": ["--batch", rng.choice(["1", "3"])]}[mode]
    if rng.random() < 0.4:
        argv += ["--plan-json", "plan.json"]
    return {"argv": tuple(argv), "files": (("net.prototxt", data),), "checks": ("caffe reads out",), "outputs": ("out.prototxt", "plan.json"), "note": f"{kind}, {mode}"}


# ---- outputs naming files the run read ------------------------------------------------------------------


def _read_outputs_case(rng: random.Random) -> dict:
    """An output flag naming a file the run reads (its settings, a data source's list or
    image, the mean file, the fork's caffe.proto or sources, the --layers file, a
    baseline): refused, the file as it was."""
    kind = rng.choice(["config", "config", "image list", "image", "mean", "caffe.proto", "fork source", "layers", "baseline", "hard link", "symlink", "lmdb"])
    setup: list[tuple] = [("mkdir", ".git")]
    files: list[tuple[str, bytes]] = [("net.prototxt", _fixture(LENET_DEPLOY))]
    env: dict[str, str] = {}
    flag = rng.choice(["--html", "--plan-json", "-o"])
    command = "optimize" if flag != "--html" or rng.random() < 0.5 else "analyze"
    target = ""
    if kind == "config":
        files.append(("caffemem.toml", b'budget = "11GiB"\n'))
        report = rng.choice(["json", "markdown", "github", "junit"])
        argv = ["check", "net.prototxt", "--report", f"{report}:caffemem.toml"]
        if rng.random() < 0.3:
            files.append(("other.toml", b'budget = "11GiB"\n'))
            argv = ["check", "net.prototxt", "--config", "other.toml", "--report", f"{report}:other.toml"]
        return {"argv": tuple(argv), "files": tuple(files), "setup": tuple(setup), "checks": ("outside",), "note": kind}
    if kind in ("image list", "image", "mean", "hard link", "symlink"):
        transform = ' transform_param { mean_file: "mean.binaryproto" }' if kind == "mean" or rng.random() < 0.5 else ""
        files = [("net.prototxt", ('name: "s"\n' + SOURCE_NET["image"].format(source="list.txt", transform=transform) + SOURCE_TAIL).encode())]
        setup.append(("source", "image", "intact"))
        if transform:
            setup.append(("mean", "intact"))
        target = {"image list": "list.txt", "image": "img.png", "mean": "mean.binaryproto", "hard link": "alias.html", "symlink": "alias.html"}[kind]
        if kind == "hard link":
            setup.append(("hardlink", "alias.html", "list.txt"))
        elif kind == "symlink":
            setup.append(("link", "alias.html", "list.txt"))
        command = rng.choice(["analyze", "optimize"]) if flag == "--html" else "optimize"
    elif kind == "lmdb":
        files = [("net.prototxt", ('name: "s"\n' + SOURCE_NET["lmdb"].format(source="db", transform="") + SOURCE_TAIL).encode())]
        setup.append(("source", "lmdb", "intact"))
        target = "db/data.mdb"
    elif kind in ("caffe.proto", "fork source"):
        setup += _fork_tree(rng, "tree", "plain")
        env = {"CAFFEMEM_CACHE_DIR": "{dir}/cache"}
        setup.append(("mkdir", "cache"))
        if kind == "fork source":
            files = [("net.prototxt", _fixture(LENET_DEPLOY).replace(b'type: "Pooling"', b'type: "HostileUp"', 1))]
            files.append(("up.layers.toml", b'[layer.HostileUp]\nbottoms = 1\ntops = 1\ntop = ["like bottom 0"]\n'))
        target = "tree/src/caffe/proto/caffe.proto" if kind == "caffe.proto" else "tree/src/caffe/layers/hostile_layer.cpp"
    elif kind == "layers":
        files.append(("up.layers.toml", b'[layer.HostileUp]\nbottoms = 1\ntops = 1\ntop = ["like bottom 0"]\n'))
        files[0] = ("net.prototxt", _fixture(LENET_DEPLOY).replace(b'type: "Pooling"', b'type: "HostileUp"', 1))
        target = "up.layers.toml"
    elif kind == "baseline":
        files.append(("base.json", b'{"format": 1, "optimized": false, "device": "cpu", "nets": {}}'))
        report = rng.choice(["json", "markdown"])
        argv = ["check", "net.prototxt", "--baseline", "base.json", "--layers", "up.layers.toml", "--report", f"{report}:up.layers.toml"]
        files.append(("up.layers.toml", b'[layer.HostileUp]\nbottoms = 1\ntops = 1\ntop = ["like bottom 0"]\n'))
        return {"argv": tuple(argv), "files": tuple(files), "setup": tuple(setup), "checks": ("outside",), "outputs": ("base.json",), "note": kind}
    argv = [command, "net.prototxt"]
    if command == "optimize" and flag != "-o":
        argv += ["-o", "out.prototxt"]
    argv += [flag, target]
    if kind == "caffe.proto" or kind == "fork source":
        argv += ["--caffe-root", "tree"]
    if kind in ("layers", "fork source"):
        argv += ["--layers", "up.layers.toml"]
    argv += ["--phase", "TEST"] if command in ("analyze", "optimize") else []
    return {"argv": tuple(argv), "files": tuple(files), "setup": tuple(setup), "env": tuple(env.items()), "checks": ("outside",), "outputs": ("out.prototxt",), "note": kind}


# ---- injection through names --------------------------------------------------------------------------


PAYLOADS = [
    "\x1b[31mRED\x1b[0m", "\x1b]0;pwned title\x07", "\x1b[2J\x1b[H", "ok\rSAFE: the table is safe", "\x9b31mC1", "bell\x07",
    "<img src=x onerror=alert(1)>", "@octocat", "<!--", "</script><script>alert(1)</script>", "::error file=x,line=1::pwned",
    "x\n::warning::injected", "`tick", "a|b", "**bold** [link](http://x)", "\u202eevil\u202c", "%0A::error::pct", "&lt;&amp;", "nul\x00byte", "tab\there",
]  # fmt: skip


def _injected_net(rng: random.Random) -> tuple[bytes, list[str]]:
    """A valid net whose layer and blob names (and the net's own) carry payloads."""
    layers = tiny_net(rng, loss=rng.random() < 0.5, blocks=rng.choice([2, 3]))
    payloads = rng.sample(PAYLOADS, rng.randint(1, 4))
    names = [layer.name for layer in layers if layer.type not in ("Input",)]
    for payload, name in zip(payloads, rng.sample(names, len(payloads))):
        blob = rng.random() < 0.5 and any(name in layer.tops for layer in layers if layer.name == name)
        layers = _rename(layers, name, f"{name}{payload}", blobs=blob)
    if rng.random() < 0.3:
        payloads.append(rng.choice(PAYLOADS))
        return render_net(layers, name=f"net{payloads[-1]}"), payloads
    return render_net(layers), payloads


def _injection_case(rng: random.Random) -> dict:
    net, payloads = _injected_net(rng)
    setup: tuple[tuple, ...] = ()
    checks = ["clean streams"]
    outputs: tuple[str, ...] = ()
    if rng.random() < 0.15:  # an error message naming a payload layer
        net = net.replace(b"num_output: 6", b"num_output: 0", 1).replace(b"kernel_size: 3", b"kernel_size: 300", 1)
    command = rng.choice(
        [
            "analyze -v",
            "analyze json",
            "analyze html",
            "optimize",
            "optimize json",
            "optimize html",
            "verify",
            "check text",
            "check markdown",
            "check github",
            "check json",
            "check junit",
            "check report",
            "fit",
        ]
    )
    if command.startswith("analyze"):
        argv = ["analyze", "net.prototxt"] + {"analyze -v": ["-v"], "analyze json": ["--json"], "analyze html": ["--html", "r.html"]}[command]
    elif command.startswith("optimize"):
        argv = ["optimize", "net.prototxt", "-o", "out.prototxt", "--plan-json", "plan.json", "--share-buffers"] + {"optimize": [], "optimize json": ["--json"], "optimize html": ["--html", "r.html"]}[
            command
        ]
        outputs = ("out.prototxt", "plan.json", "r.html")
    elif command == "verify":
        setup = (("cli", ("optimize", "net.prototxt", "-o", "out.prototxt", "--plan-json", "plan.json", "--share-buffers")), ("unsafe", "out.prototxt", rng.randrange(2**32), True))
        argv = ["verify", "out.prototxt"]
    elif command == "fit":
        argv = ["fit", "net.prototxt", "--gpu-memory", "1GiB"] + (["--json"] if rng.random() < 0.5 else [])
    else:
        argv = ["check", "net.prototxt"]
        fmt = command.split()[1]
        if fmt == "report":
            fmt = rng.choice(["markdown", "github", "junit", "json"])
            argv += ["--report", f"{fmt}:r.{fmt}"]
            outputs = (f"r.{fmt}",)
        else:
            argv += ["--format", fmt]
        if rng.random() < 0.5:  # a baseline the net outgrew: the report names the layers that grew
            small = net.replace(b"num_output: 4", b"num_output: 1")
            setup = (("write", "net.prototxt", small), ("cli", ("check", "net.prototxt", "--baseline", "base.json", "--update-baseline")), ("write", "net.prototxt", net))
            argv += ["--baseline", "base.json"]
        else:
            argv += ["--budget", rng.choice(["1KiB", "11GiB"])]
    return {"argv": tuple(argv), "files": (("net.prototxt", net),), "setup": setup, "checks": tuple(checks + ["formats"]), "outputs": outputs, "note": f"payloads {payloads!r}"}


# ---- the library API with bogus values ------------------------------------------------------------------


API_CALLS = [
    # (code, expectation): "refused" the call must raise CaffememError; "names:WORD" one
    # whose message names WORD (the value it refuses); "" any clean end
    ('caffemem.analyze(NET, caffemem.Options(dtype="bogus"))', "refused"),
    ('caffemem.analyze(NET, caffemem.Options(dtype=None))', "refused"),
    ('caffemem.analyze(NET, caffemem.Options(phase="BOGUS"))', "refused"),
    ('caffemem.analyze(NET, caffemem.Options(phase=5))', "refused"),
    ("caffemem.analyze(NET, caffemem.Options(level=2**40))", "refused"),
    ('caffemem.analyze(NET, caffemem.Options(level="1"))', "refused"),
    ('caffemem.analyze(NET, caffemem.Options(inputs={"data": "64,1,28,28"}))', ""),  # read as --input reads it
    ('caffemem.analyze(NET, caffemem.Options(inputs={"data": [1, -2, 28, 28]}))', "refused"),  # -1 is FROM_FILE, the CLI's "_"
    ('caffemem.analyze(NET, caffemem.Options(inputs={"data": None}))', "refused"),
    ("caffemem.analyze(NET, caffemem.Options(inputs={5: [1]}))", "refused"),
    ('caffemem.analyze(NET, caffemem.Options(inputs="data=1,1,28,28"))', "refused"),
    ('caffemem.analyze(NET, inputs={"data": (1.5, 1, 28, 28)})', "refused"),
    ("caffemem.analyze(NET, caffemem.Options(batch=0))", "refused"),
    ("caffemem.analyze(NET, caffemem.Options(batch=2**40))", "refused"),
    ('caffemem.analyze(NET, caffemem.Options(batch="4"))', "refused"),
    ('caffemem.analyze(NET, caffemem.Options(engine="bogus"))', "refused"),
    ('caffemem.analyze(NET, caffemem.Options(device="tpu"))', "refused"),
    ("caffemem.analyze(NET, caffemem.Options(device=\"gpu\", gpus=0))", "refused"),
    ("caffemem.analyze(NET, caffemem.Options(device=\"gpu\", context_bytes=-1))", "refused"),
    ("caffemem.analyze(NET, caffemem.Options(max_input_bytes=-1))", "refused"),
    ('caffemem.analyze(NET, caffemem.Options(stages="deploy"))', ""),
    ("caffemem.analyze(NET, caffemem.Options(stages=5))", "refused"),
    ('caffemem.analyze(NET, caffemem.Options(layers_file="missing.toml"))', "refused"),
    ("caffemem.analyze(NET, caffemem.Options(layers_file=5))", "refused"),
    ('caffemem.analyze(NET, caffemem.Options(caffe_root="/nonexistent"))', "refused"),
    ("caffemem.analyze(NET, caffemem.Options(caffe_root=5))", "refused"),
    ('caffemem.analyze(NET, caffemem.Options(overrides=frozenset({"data"})))', ""),
    ("caffemem.analyze(5)", "refused"),
    ("caffemem.analyze(None)", "refused"),
    ('caffemem.analyze(b"layer {}")', "refused"),
    ('caffemem.analyze("layer { name: 5 }")', "refused"),
    ("caffemem.analyze(NET, phase=\"TRAIN\")", ""),
    ('caffemem.optimize(NET, caffemem.Options(), caffemem.OptimizeSettings(strategy="bogus"))', "names:bogus"),
    ('caffemem.optimize(NET, caffemem.Options(), caffemem.OptimizeSettings(strategy="fork", recompute="sqrt"))', "refused"),
    ('caffemem.optimize(NET, caffemem.Options(), caffemem.OptimizeSettings(recompute="bogus"))', "refused"),
    ('caffemem.optimize(NET, caffemem.Options(), caffemem.OptimizeSettings(recompute="budget=x"))', "refused"),
    ("caffemem.optimize(NET, caffemem.Options(), caffemem.OptimizeSettings(recompute=5))", "refused"),
    ('caffemem.optimize(NET, caffemem.Options(), caffemem.OptimizeSettings(exclude="data"))', ""),
    ("caffemem.optimize(NET, caffemem.Options(), caffemem.OptimizeSettings(exclude=(5,)))", "refused"),
    ('caffemem.optimize(NET, caffemem.Options(level=2**40), caffemem.OptimizeSettings(strategy="exact"))', "refused"),
    ('caffemem.optimize(NET, caffemem.Options(dtype="int8"))', "refused"),
    ("caffemem.fit(NET, caffemem.Options(), caffemem.FitRequest(gpu_memory=-1))", "refused"),
    ('caffemem.fit(NET, caffemem.Options(), caffemem.FitRequest(gpu_memory="12GiB"))', "refused"),
    ("caffemem.fit(NET, caffemem.Options(), caffemem.FitRequest(gpu_memory=2**80))", ""),
    ("caffemem.fit(NET, caffemem.Options(), caffemem.FitRequest(gpu_memory=2**30, gpus=0))", "refused"),
    ("caffemem.fit(NET, caffemem.Options(), caffemem.FitRequest(gpu_memory=2**30, effective_batch=-5))", "refused"),
    ('caffemem.fit(NET, caffemem.Options(), caffemem.FitRequest(gpu_memory=2**30, recompute="budget=1GiB"))', "refused"),
    ('caffemem.fit(NET, caffemem.Options(), caffemem.FitRequest(gpu_memory=2**30, recompute="bogus"))', "refused"),
    ("caffemem.fit(NET, caffemem.Options(), caffemem.FitRequest(gpu_memory=2**30, reserve=-1))", "refused"),
    ('caffemem.verify(NET, "missing.json")', "refused"),
    ("caffemem.verify(NET, 5)", "refused"),
    ('caffemem.verify(NET, phase="X")', "refused"),
    ('caffemem.verify(NET, options=caffemem.Options(dtype="bogus"))', "refused"),
    ("caffemem.api.check_file(NET, caffemem.api.CheckSettings(budget=-1))", ""),
    ('caffemem.api.check_file(NET, caffemem.api.CheckSettings(options=caffemem.Options(phase="BOGUS")))', ""),
    ('caffemem.api.check_file(NET, caffemem.api.CheckSettings(options=caffemem.Options(dtype="bogus")))', ""),
    ("caffemem.api.check_file(5, caffemem.api.CheckSettings())", ""),
    ("caffemem.load(NET, max_text_bytes=-1)", "refused"),
    ('caffemem.load("missing.prototxt")', "refused"),
]  # fmt: skip


def _api_case(rng: random.Random) -> dict:
    """A library call with a bogus value: CaffememError (or a result), never another
    exception; a value the CLI refuses is refused by the library too."""
    calls = rng.sample(API_CALLS, 1 if rng.random() < 0.8 else 2)
    net = rng.choice(["net.prototxt", "deploy.prototxt"])
    lines = ["import sys, caffemem, caffemem.api", f"NET = {net!r}"]
    expect = ""
    for code, expectation in calls:
        lines.append(code)
        expect = expectation or expect
    code = "\n".join(lines)
    files = (("net.prototxt", _fixture(LENET)), ("deploy.prototxt", _fixture(LENET_DEPLOY)))
    checks = ("refused", expect) if expect.startswith("names:") else ("refused",) if expect else ()
    return {"argv": (code,), "files": files, "checks": checks if len(calls) == 1 else (), "runner": "api", "note": "; ".join(c for c, _ in calls)}


# ----------------------------------------------------------------------------- set-up steps


def _place(text: str, folder: Path, outside: Path) -> str:
    return text.replace("{dir}", str(folder)).replace("{outside}", str(outside)).replace("{path}", os.environ.get("PATH", "/usr/bin:/bin"))


def _place_bytes(data: bytes, folder: Path, outside: Path) -> bytes:
    return data.replace(b"{dir}", str(folder).encode()).replace(b"{outside}", str(outside).encode())


def _outside(outside: Path) -> None:
    """The sentinel beside the case's folder: files no command may write."""
    for name, data in OUTSIDE_FILES.items():
        (outside / name).parent.mkdir(parents=True, exist_ok=True)
        (outside / name).write_bytes(data)


def _set_up(case: Case, folder: Path, outside: Path, root: Path) -> None:
    """Run the case's set-up steps in its folder (see Case.setup)."""
    for step in case.setup:
        op, args = step[0], step[1:]
        path = folder / args[0] if args and isinstance(args[0], str) and op not in ("source", "mean") else None
        if path is not None and op not in ("remove",):
            path.parent.mkdir(parents=True, exist_ok=True)
        if op == "write":
            path.write_bytes(_place_bytes(args[1], folder, outside))
        elif op == "mkdir":
            path.mkdir(parents=True, exist_ok=True)
        elif op == "fifo":
            os.mkfifo(path)
        elif op == "link":
            os.symlink(_place(args[1], folder, outside), path)
        elif op == "hardlink":
            os.link(folder / args[1], path)
        elif op == "chmod":
            os.chmod(path, args[1])
        elif op == "remove":
            path.unlink()
        elif op == "sparse":
            with open(path, "wb") as handle:
                handle.truncate(args[1])
        elif op == "copy":
            if path.exists():
                shutil.copyfile(path, folder / args[1])
        elif op == "link-out":  # move a file or folder outside, and leave a link to it in its place
            moved = outside / "moved" / args[0].replace("/", "__")
            moved.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(str(path), str(moved))
            os.symlink(moved, path)
        elif op == "caffe-tree":
            fake_caffe_tree(path)
        elif op == "patch":
            from caffemem import runtime

            with _no_fsync():
                runtime.apply_patch(path)
        elif op == "journal":
            (path / JOURNAL).write_bytes(_journal_bytes(path, args[1], folder, outside))
        elif op == "source":
            _make_source(folder, outside, args[0], args[1])
        elif op == "mean":
            _make_mean(folder, args[0])
        elif op == "cli":
            _cli_in(folder, root, args[0])
        elif op == "unsafe":
            if path.exists():
                edited = unsafe_edit(path.read_bytes(), random.Random(args[1]), json_plan=path.suffix == ".json", overlap=args[2], diffs=args[3] if len(args) > 3 else False)
                if edited is not None:
                    path.write_bytes(edited)
        elif op == "record":
            if path.exists():
                path.write_bytes(record_edit(path.read_bytes(), args[1], json_plan=path.suffix == ".json", which=args[2] if len(args) > 2 else "all"))
        else:
            raise ValueError(f"unknown set-up step {op}")


@contextlib.contextmanager
def _no_fsync():
    """Set-up writes need no durability: os.fsync is skipped while they run."""
    real = os.fsync
    os.fsync = lambda descriptor: None
    try:
        yield
    finally:
        os.fsync = real


def _journal_bytes(tree: Path, entries: tuple, folder: Path, outside: Path) -> bytes:
    """A journal in the format `caffemem patch` writes (runtime._journal_bytes), from the
    words of :func:`_journal_entry`."""
    import base64

    from caffemem import runtime

    files = []
    patched: dict[str, bytes] = {}
    for path, before, after, mode in entries:
        path = _place(path, folder, outside)
        if before == "script":
            data: bytes | None = SCRIPT
        elif before == "none":
            data = None
        else:
            rel = before.split(":", 1)[1]
            data = (tree / rel).read_bytes() if (tree / rel).is_file() else None
        if after.startswith(("patched:", "current:")):
            rel = after.split(":", 1)[1]
            if after.startswith("patched:") and not patched:
                copy = folder.parent / f"{folder.name}-patched"
                shutil.copytree(tree, copy, symlinks=True)
                with _no_fsync(), contextlib.suppress(Exception):
                    runtime.apply_patch(copy)
                patched = {str(p.relative_to(copy)): p.read_bytes() for p in copy.rglob("*") if p.is_file() and not p.is_symlink()}
                shutil.rmtree(copy, ignore_errors=True)
            if after.startswith("patched:"):
                digest = hashlib.sha256(patched[rel]).hexdigest() if rel in patched else None
            else:
                current = (tree / rel).read_bytes() if (tree / rel).is_file() else None
                digest = None if current is None else hashlib.sha256(current).hexdigest()
        else:
            digest = {"null": None, "random": hashlib.sha256(b"random").hexdigest()}[after]
        files.append({"path": path, "before": None if data is None else base64.b64encode(data).decode("ascii"), "after": digest, "mode": mode})
    return json.dumps({"caffemem patch journal": 1, "files": files}, indent=0).encode("ascii")


def _become(path: Path, what: str, outside: Path) -> None:
    """Put in ``path``'s place a FIFO, a folder, a link (``link:TARGET``, ``{outside}`` in
    it the sentinel folder), or a link to a copy of it in the sentinel folder ("moved out")."""
    if what == "moved out":
        shutil.copyfile(path, outside / path.name)
        what = f"link:{outside / path.name}"
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    if what == "fifo":
        os.mkfifo(path)
    elif what == "folder":
        path.mkdir()
    else:
        os.symlink(what.removeprefix("link:").replace("{outside}", str(outside)), path)


def _noise(path: Path, flips: int, within: int | None = None) -> None:
    """``flips`` random bytes of the file changed (in its first ``within`` bytes)."""
    raw = bytearray(path.read_bytes())
    rng = random.Random(len(raw))
    for _ in range(flips):
        raw[rng.randrange(min(len(raw), within or len(raw)))] = rng.randrange(256)
    path.write_bytes(bytes(raw))


# variant -> (the file it changes, what it becomes): see _become
LMDB_SWAPS = {
    "data.mdb fifo": ("data.mdb", "fifo"), "data.mdb link outside": ("data.mdb", "moved out"), "data.mdb link device": ("data.mdb", "link:/dev/zero"),
    "lock.mdb fifo": ("lock.mdb", "fifo"), "lock.mdb link outside": ("lock.mdb", "link:{outside}/precious.txt"), "data.mdb folder": ("data.mdb", "folder"),
}  # fmt: skip
LEVELDB_SWAPS = {
    "next table link outside": ("000005.ldb", "link:{outside}/precious.txt"),  # named as the table the next open's recovery writes
    "next manifest link outside": ("MANIFEST-000004", "link:{outside}/precious.txt"), "manifest fifo": ("MANIFEST-000002", "fifo"),
    "manifest link outside": ("MANIFEST-000002", "moved out"), "manifest folder": ("MANIFEST-000002", "folder"), "current fifo": ("CURRENT", "fifo"),
    "current link device": ("CURRENT", "link:/dev/zero"), "log fifo": ("000003.log", "fifo"), "lock link outside": ("LOCK", "link:{outside}/precious.txt"),
    "extra table link outside": ("000099.ldb", "link:{outside}/precious.txt"), "extra log fifo": ("000100.log", "fifo"),
}  # fmt: skip
HDF5_SWAPS = {"list fifo": ("h5list.txt", "fifo"), "file fifo": ("a.h5", "fifo"), "file link device": ("a.h5", "link:/dev/zero"), "listed folder": ("a.h5", "folder")}
IMAGE_SWAPS = {"image fifo": ("img.png", "fifo"), "image folder": ("img.png", "folder"), "image link device": ("img.png", "link:/dev/zero"), "list fifo": ("list.txt", "fifo"), "list link outside": ("list.txt", "link:{outside}/precious.txt")}  # fmt: skip


def _make_source(folder: Path, outside: Path, kind: str, variant: str) -> None:
    """A data source of ``kind`` (lmdb, leveldb: folder db; hdf5: h5list.txt; image:
    list.txt) with one record of 3x8x8, then damaged as ``variant`` says."""
    if kind == "lmdb":
        import lmdb

        db = folder / "db"
        with lmdb.open(str(db), map_size=1 << 20) as env, env.begin(write=True) as txn:
            txn.put(b"00000000", _datum_bytes(3, 8, 8))
            txn.put(b"00000001", _datum_bytes(3, 8, 8))
        data = db / "data.mdb"
        if variant in LMDB_SWAPS:
            _become(db / LMDB_SWAPS[variant][0], LMDB_SWAPS[variant][1], outside)
        elif variant == "noise":
            _noise(data, 8)
        elif variant == "size past end":  # the first node's data size (4 bytes before its key's header) far past the file
            raw = bytearray(data.read_bytes())
            at = raw.find(b"00000000")
            if at >= 8:
                raw[at - 8 : at - 4] = (0x7FFFFFFF).to_bytes(4, "little")
            data.write_bytes(bytes(raw))
        elif variant == "truncated":
            data.write_bytes(data.read_bytes()[:5000])
        elif variant == "folder link outside":
            shutil.move(str(db), str(outside / "db"))
            os.symlink(outside / "db", db)
    elif kind == "leveldb":
        import plyvel

        db = folder / "db"
        handle = plyvel.DB(str(db), create_if_missing=True)
        handle.put(b"00000000", _datum_bytes(3, 8, 8))
        handle.close()  # the record in 000003.log: the next open recovers it into 000005.ldb and MANIFEST-000004
        if variant.startswith("compacted"):
            handle = plyvel.DB(str(db))
            handle.compact_range()
            handle.close()
        tables = sorted(p for p in db.iterdir() if p.suffix in (".ldb", ".sst"))
        if variant in LEVELDB_SWAPS:
            _become(db / LEVELDB_SWAPS[variant][0], LEVELDB_SWAPS[variant][1], outside)
        elif variant in ("next table plain file", "next manifest plain file"):
            (db / ("000005.ldb" if "table" in variant else "MANIFEST-000004")).write_bytes(b"the user's own file\n")
        elif variant == "compacted table link outside" and tables:
            _become(tables[0], "moved out", outside)
        elif variant == "compacted noise" and tables:
            _noise(tables[0], 6)
        elif variant == "compacted table truncated" and tables:
            tables[0].write_bytes(tables[0].read_bytes()[:20])
    elif kind == "hdf5":
        import h5py
        import numpy

        (folder / "h5list.txt").write_text("a.h5\n")
        if variant in HDF5_SWAPS:
            (folder / "a.h5").touch()
            _become(folder / HDF5_SWAPS[variant][0], HDF5_SWAPS[variant][1], outside)
            return
        with h5py.File(folder / "a.h5", "w") as h5:
            if variant.startswith("external link"):
                target = {"external link fifo": "fifo.h5", "external link device": "/dev/zero", "external link outside": str(outside / "precious.txt")}[variant]
                h5["data"] = h5py.ExternalLink(target, "/data")
            else:
                h5["data"] = numpy.zeros((4, 3, 8, 8), numpy.float32)
            h5["label"] = numpy.zeros((4,), numpy.float32)
        if variant == "external link fifo":
            os.mkfifo(folder / "fifo.h5")
        if variant == "noise":
            _noise(folder / "a.h5", 10, within=4096)
    elif kind == "image":
        (folder / "list.txt").write_text("img.png 0\nother.png 1\n")
        if variant == "header bomb":  # a PNG header claiming 2^31-1 x 2^31-1 pixels
            (folder / "img.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x7f\xff\xff\xff\x7f\xff\xff\xff\x08\x02\x00\x00\x00\x00\x00\x00\x00")
        else:
            (folder / "img.png").write_bytes(_png(8, 8))
        if variant in IMAGE_SWAPS:
            _become(folder / IMAGE_SWAPS[variant][0], IMAGE_SWAPS[variant][1], outside)


def _png(width: int, height: int) -> bytes:
    """A valid RGB PNG of ``width`` x ``height`` (zlib and struct only)."""
    import struct
    import zlib

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body) & 0xFFFFFFFF)

    rows = b"".join(b"\x00" + bytes(3 * width) for _ in range(height))
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")


def _make_mean(folder: Path, variant: str) -> None:
    from caffemem.schema import caffe_pb2

    path = folder / "mean.binaryproto"
    if variant == "fifo":
        os.mkfifo(path)
    elif variant == "link device":
        os.symlink("/dev/zero", path)
    elif variant == "huge header":
        path.write_bytes(caffe_pb2.BlobProto(num=1, channels=2**30, height=2**30, width=2**30).SerializeToString())
    else:
        path.write_bytes(caffe_pb2.BlobProto(num=1, channels=3, height=8, width=8, data=[0.0] * 192).SerializeToString())


# The outputs of set-up commands (`optimize -o` of a net, a baseline), per worker: a net's
# plan is made once however many cases tamper with it.
_CLI_CACHE: dict[str, dict[str, bytes]] = {}


def _cli_in(folder: Path, root: Path, argv: tuple[str, ...]) -> None:
    """Run a caffemem command in ``folder`` (a forked child, CPU mode) and keep what it
    wrote; the same command on the same files later is served from the cache."""
    inputs = sorted((str(p.relative_to(folder)), p.read_bytes()) for p in folder.rglob("*") if p.is_file() and not p.is_symlink())
    key = hashlib.sha256(repr((argv, inputs)).encode()).hexdigest()
    if key not in _CLI_CACHE:
        before = dict(inputs)
        _run_cli(argv, folder, root, TIME_LIMIT)
        after = {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file() and not p.is_symlink()}
        _CLI_CACHE[key] = {name: data for name, data in after.items() if before.get(name) != data}
        return
    for name, data in _CLI_CACHE[key].items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(data)


def _run_cli(argv: tuple[str, ...], folder: Path, root: Path, limit: float, env: tuple[tuple[str, str], ...] = ()) -> tuple[int | None, str]:
    """A caffemem command in a forked child in ``folder``: (exit code, stderr + stdout)."""
    io_folder = root / "io"
    io_folder.mkdir(exist_ok=True)
    token = f"cli{os.getpid()}-{time.monotonic_ns()}"
    out, err = io_folder / f"{token}.out", io_folder / f"{token}.err"
    check = Case(-1, "cli", argv, env=env)
    pid = _forked()
    if pid == 0:  # pragma: no cover
        _child(check, folder, out, err, None)
    code, _, _, _ = _wait(pid, check, limit, None)
    text = err.read_bytes().decode("utf-8", "replace") if err.exists() else ""
    text += out.read_bytes().decode("utf-8", "replace") if out.exists() else ""
    for leftover in (out, err):
        with contextlib.suppress(OSError):
            leftover.unlink()
    return code, text


# ----------------------------------------------------------------------------- plan tampering

SLOT = re.compile(rb"\n(  slot \{\n.*?\n  \})(?=\n)", re.DOTALL)
MEMBER = re.compile(rb'member \{\s*blob: "((?:[^"\\]|\\.)*)"\s*kind: "(\w+)"\s*offset: (\d+)\s*\}')


def unsafe_edit(data: bytes, rng: random.Random, json_plan: bool = False, overlap: bool = True, diffs: bool = False) -> bytes | None:
    """One member of a slot moved onto another's bytes (``overlap``: onto the offset of a
    member whose bytes it then overlaps; else to offset 0), in a prototxt's mem_param or a
    --plan-json plan; ``diffs``: a diff onto another diff (a TRAIN table's Backward, as the
    issue's "norm's diff at res2's diff").  None when no slot has two such members at
    different offsets."""
    wanted = ("diff",) if diffs else ("data", "diff")
    if json_plan:
        try:
            document = json.loads(data)
            phases = [p for p in document["phases"] if p.get("plan")]
        except (ValueError, KeyError, TypeError):
            return None
        groups = [[a for a in p["plan"]["assign"] if a["slot"] == slot and a["kind"] in wanted] for p in phases for slot in {a["slot"] for a in p["plan"]["assign"]}]
        groups = [g for g in groups if len({a["offset"] for a in g}) > 1]
        if not groups:
            return None
        members = rng.choice(groups)
        moved = rng.choice(members)
        moved["offset"] = rng.choice([a["offset"] for a in members if a["offset"] != moved["offset"]]) if overlap else 0
        return (json.dumps(document, indent=1) + "\n").encode()
    groups = [(slot, [m for m in MEMBER.finditer(slot.group(1)) if m.group(2).decode() in wanted]) for slot in SLOT.finditer(data)]
    groups = [(slot, members) for slot, members in groups if len({m.group(3) for m in members}) > 1]
    if not groups:
        return None
    slot, members = rng.choice(groups)
    moved = rng.choice(members)
    target = rng.choice([m.group(3) for m in members if m.group(3) != moved.group(3)]) if overlap else b"0"
    start = slot.start(1) + moved.start(3)
    return data[:start] + target + data[start + len(moved.group(3)) :]


RECORD = re.compile(rb"# caffemem made-for (\w+): (\{[^\n]*\})")


def record_edit(data: bytes, edits: tuple, json_plan: bool = False, which: str = "all") -> bytes:
    """The made-for records edited (``which``: every record, or the one of that phase):
    each (field, value) sets that field; ("label", "swap") swaps the records' phase
    labels, ("record", ...) deletes, duplicates or breaks them."""
    if json_plan:
        try:
            document = json.loads(data)
            for phase in document["phases"]:
                if which != "all" and phase.get("phase") != which:
                    continue
                record = phase.setdefault("made_for", {})
                for field_name, value in edits:
                    if field_name in ("label", "record"):
                        if value == "delete":
                            phase.pop("made_for", None)
                        elif value == "broken":
                            phase["made_for"] = "{"
                        elif value == "swap":
                            phase["phase"] = {"TRAIN": "TEST", "TEST": "TRAIN"}.get(phase.get("phase"), phase.get("phase"))
                    elif isinstance(record, dict):
                        record[field_name] = value
        except (ValueError, KeyError, TypeError, AttributeError):
            return data
        return (json.dumps(document, indent=1) + "\n").encode()

    def one(match: re.Match) -> bytes:
        label, body = match.group(1), match.group(2)
        if which != "all" and label.decode() != which:
            return match.group(0)
        try:
            record = json.loads(body)
        except ValueError:
            return match.group(0)
        line = match.group(0)
        for field_name, value in edits:
            if field_name == "label":
                label = {b"TRAIN": b"TEST", b"TEST": b"TRAIN"}.get(label, label)
            elif field_name == "record":
                if value == "delete":
                    return b"# (record removed)"
                if value == "broken":
                    return b"# caffemem made-for " + label + b": {" + body[: len(body) // 2]
                if value == "duplicate":
                    return line + b"\n  " + line
            else:
                record[field_name] = value
        return b"# caffemem made-for " + label + b": " + json.dumps(record, sort_keys=True).encode()

    return RECORD.sub(one, data)


# ----------------------------------------------------------------------------- running


@dataclass
class Result:
    number: int
    family: str
    command: str
    exit: int | None  # None: killed (hang or crash)
    seconds: float
    peak_kib: int
    stderr: str
    defects: list[str] = field(default_factory=list)
    verified: bool = False  # a slot table it wrote was given to `caffemem verify`
    note: str = ""
    set_up_error: str = ""  # the case's folder could not be made (the run was skipped)
    wall: float = 0.0  # seconds for the whole case: set-up, run, judges


def _snapshot(folder: Path) -> dict[str, tuple[int, str]]:
    """Every entry of the folder: its mode and a hash of its bytes (regular files)."""
    seen = {}
    for path in sorted(folder.rglob("*")):
        relative = str(path.relative_to(folder))
        try:
            status = path.lstat()
        except OSError:
            continue
        digest = ""
        if stat.S_ISREG(status.st_mode):
            with contextlib.suppress(OSError):
                digest = _file_digest(path)
        elif stat.S_ISLNK(status.st_mode):
            digest = os.readlink(path)
        seen[relative] = (stat.S_IFMT(status.st_mode) | stat.S_IMODE(status.st_mode), digest)
    return seen


def _file_digest(path: Path) -> str:
    """SHA-256 of a file, read in chunks (a sparse gigabyte is hashed, not held)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _prepare(case: Case, folder: Path) -> None:
    folder.mkdir(parents=True)
    for name, data in case.files:
        (folder / name).write_bytes(data)
    for name, kind in case.special:
        path = folder / name
        if kind == "fifo":
            os.mkfifo(path)
        elif kind == "socket":
            with socket.socket(socket.AF_UNIX) as server:
                server.bind(str(path))  # the file stays after the socket is closed
        elif kind == "folder":
            path.mkdir()
        elif kind == "loop":
            os.symlink(name, path)
        elif kind == "dangling":
            os.symlink("nowhere.prototxt", path)
        elif kind.startswith("link:"):
            os.symlink(kind.removeprefix("link:"), path)


def _child(case: Case, folder: Path, out: Path, err: Path, head_fd: int | None, outside: Path | None = None) -> None:  # pragma: no cover (runs in the forked child)
    """The forked child: the case's standard streams, folder and limits, then the
    `caffemem` script's own entry point.  Never returns."""
    code = 99
    try:
        os.setpgid(0, 0)
        resource.setrlimit(resource.RLIMIT_AS, (case.memory_cap, case.memory_cap))
        err_fd = os.open(err, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # before any descriptor is closed: it must not take 1 or 2
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        if case.stdout == "closed":
            os.close(1)
        else:
            target = {"full": "/dev/full"}.get(case.stdout)
            fd = head_fd if case.stdout == "head" else os.open(target or out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            os.dup2(fd, 1)
            os.close(fd)
        if case.stderr == "closed":
            os.close(2)
        else:
            os.dup2(err_fd, 2)
        if case.delete_cwd:
            gone = folder / "gone"
            gone.mkdir()
            os.chdir(gone)
            os.rmdir(gone)
        else:
            os.chdir(folder)
        for key, value in case.env:
            os.environ[key] = _place(value, folder, outside or folder)
        os.environ["CAFFEMEM_DEVICE"] = os.environ.get("CAFFEMEM_DEVICE", "cpu")
        if case.runner == "api":
            code = _api_child(_place(case.argv[0], folder, outside or folder), err_fd)
            return
        # As the interpreter sets them up at start: None for a closed descriptor.
        sys.stdin = open(0, encoding="utf-8", closefd=False)  # type: ignore[assignment]  # noqa: SIM115
        sys.stdout = None if case.stdout == "closed" else open(1, "w", encoding="utf-8", closefd=False)  # type: ignore[assignment]  # noqa: SIM115
        sys.stderr = None if case.stderr == "closed" else open(2, "w", encoding="utf-8", errors="backslashreplace", closefd=False, buffering=1)  # type: ignore[assignment]  # noqa: SIM115
        sys.argv = ["caffemem", *[_place(a, folder, outside or folder) for a in case.argv]]
        import caffemem.__main__ as entry

        signal.signal(signal.SIGINT, entry._interrupted_while_starting)  # as when the script starts
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGINT])  # held since the fork (_forked): a Ctrl-C sent meanwhile lands here
        try:
            entry.run()
            code = 0
        except SystemExit as done:
            code = done.code if isinstance(done.code, int) else (0 if done.code is None else 1)
        try:
            if sys.stdout is not None:
                sys.stdout.flush()  # the interpreter's own last flush
        except Exception:  # noqa: BLE001
            os.write(err_fd, b"Exception ignored on flushing sys.stdout\n")
            code = 120
    except BaseException:  # noqa: BLE001 (escaped the CLI: a traceback, as Python prints it)
        with contextlib.suppress(Exception):
            os.write(err_fd, traceback.format_exc().encode("utf-8", "replace"))
        code = 99 if code == 99 else code
    finally:
        os._exit(code & 0xFF if code >= 0 else 99)


def _api_child(code: str, err_fd: int) -> int:  # pragma: no cover (runs in the forked child)
    """A library call of the api surface: 0 it returned, 2 CaffememError (its message on
    one line), 3 any other exception (its traceback)."""
    from caffemem.errors import CaffememError

    try:
        exec(compile(code, "<case>", "exec"), {"__name__": "__case__"})  # noqa: S102 (the campaign's own code)
        return 0
    except CaffememError as error:
        try:
            message = str(error)
        except BaseException:  # noqa: BLE001 (an error that cannot say what it is: a defect too)
            os.write(err_fd, traceback.format_exc().encode("utf-8", "replace"))
            return 3
        os.write(err_fd, f"CaffememError: {message}".replace("\n", " ").encode("utf-8", "replace") + b"\n")
        return 2
    except BaseException:  # noqa: BLE001 (what the API must never raise)
        os.write(err_fd, traceback.format_exc().encode("utf-8", "replace"))
        return 3


def _wait(pid: int, case: Case, limit: float, head_read: int | None) -> tuple[int | None, int, float, bool]:
    """(exit code or None, peak RSS in KiB, seconds, timed out)."""
    start = time.monotonic()
    sent = False
    if head_read is not None:
        ready, _, _ = select.select([head_read], [], [], limit)
        if ready:
            with contextlib.suppress(OSError):
                os.read(head_read, 10)
        os.close(head_read)
    while True:
        finished, status, usage = os.wait4(pid, os.WNOHANG)
        elapsed = time.monotonic() - start
        if finished:
            break
        if case.interrupt_after is not None and not sent and elapsed >= case.interrupt_after:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGINT)  # as a terminal's Ctrl-C: the whole group (check's workers too)
            sent = True
        if elapsed > limit:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
            _, status, usage = os.wait4(pid, 0)
            return None, usage.ru_maxrss, elapsed, True
        time.sleep(0.002 if elapsed < 0.1 else 0.01)
    if os.WIFSIGNALED(status):
        code = 128 + os.WTERMSIG(status)  # as a shell reports it: Ctrl-C before Python's handler is 130
    else:
        code = os.WEXITSTATUS(status)
    return code, usage.ru_maxrss, elapsed, False


SCRIPT_RUNNER = "import sys\nfrom caffemem.__main__ import run\nsys.argv[0] = 'caffemem'\nrun()\n"


def _fresh(case: Case, folder: Path, out: Path, err: Path, limit: float, outside: Path | None = None) -> tuple[int | None, int, float, bool]:
    """A new interpreter in the case's environment: `python -m caffemem`, or (runner
    "script") a script as the `caffemem` console script is, whose folder, not the working
    directory, heads the import path."""
    env = {k: v for k, v in os.environ.items() if k not in ("LANG", "LC_ALL", "LC_CTYPE", "PYTHONIOENCODING", "PYTHONUTF8")}
    env.update({"PYTHONPATH": str(REPO), "CAFFEMEM_DEVICE": env.get("CAFFEMEM_DEVICE", "cpu"), **{k: _place(v, folder, outside or folder) for k, v in case.env}})

    def limits() -> None:  # pragma: no cover (in the child)
        os.setpgid(0, 0)
        resource.setrlimit(resource.RLIMIT_AS, (case.memory_cap, case.memory_cap))

    words = [_place(a, folder, outside or folder) for a in case.argv]
    if case.runner == "script":
        runner = out.parent / "caffemem_script.py"
        if not runner.exists():
            runner.write_text(SCRIPT_RUNNER)
        argv = [sys.executable, str(runner), *words]
    else:
        argv = [sys.executable, "-m", "caffemem", *words]
    with open(out, "wb") as stdout, open(err, "wb") as stderr:
        process = subprocess.Popen(argv, cwd=folder, env=env, stdin=subprocess.DEVNULL, stdout=stdout, stderr=stderr, preexec_fn=limits)  # noqa: PLW1509 (no threads here)
    return _wait(process.pid, case, limit, None)


def _forked() -> int:
    """os.fork with Ctrl-C held in the child until it has reached the `caffemem` script's
    entry (the child's own set-up stands in for Python's start-up, which in a real run
    takes milliseconds, not the harness's)."""
    signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGINT])
    pid = os.fork()
    if pid != 0:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGINT])
    return pid


def run_case(case: Case, root: Path, limit: float = TIME_LIMIT, keep: bool = False) -> Result:
    """Run one case in its own folder under ``root`` (and its sentinel folder beside it)
    and judge it; ``keep`` leaves both folders for a look."""
    limit = min(limit, case.limit) if case.limit else limit
    started = time.monotonic()
    folder, outside = root / f"case{case.number}", root / f"outside{case.number}"
    io_folder = root / "io"
    io_folder.mkdir(exist_ok=True)
    out, err = io_folder / f"{case.number}.out", io_folder / f"{case.number}.err"
    outside.mkdir(parents=True)
    _outside(outside)
    _prepare(case, folder)
    try:
        _set_up(case, folder, outside, root)
    except Exception as error:  # noqa: BLE001 (a set-up the machine cannot make: counted apart, not run)
        result = Result(case.number, case.family, case.command(), None, 0.0, 0, "", note=case.note, set_up_error=f"{type(error).__name__}: {error}"[:300])
        if not keep:
            shutil.rmtree(folder, ignore_errors=True)
            shutil.rmtree(outside, ignore_errors=True)
        return result
    before, outside_before = _snapshot(folder), _snapshot(outside)
    if case.fresh or case.runner == "script":
        code, peak, seconds, hung = _fresh(case, folder, out, err, limit, outside)
    else:
        head_read = head_write = None
        if case.stdout == "head":
            head_read, head_write = os.pipe()
        sys.stdout.flush()
        sys.stderr.flush()
        pid = _forked()
        if pid == 0:  # pragma: no cover
            if head_read is not None:
                os.close(head_read)
            _child(case, folder, out, err, head_write, outside)
        if head_write is not None:
            os.close(head_write)
        code, peak, seconds, hung = _wait(pid, case, limit, head_read)
    stderr = err.read_bytes().decode("utf-8", "replace") if err.exists() else ""
    stdout = out.read_bytes().decode("utf-8", "replace") if out.exists() and case.stdout == "file" else ""
    result = Result(case.number, case.family, case.command(), code, round(seconds, 3), peak, stderr[-2000:], note=case.note)
    after = _snapshot(folder)
    result.defects = judge(case, folder, before, after, code, hung, stderr)
    if not hung:
        result.defects += surface_judges(case, folder, outside, before, after, outside_before, _snapshot(outside), code, stdout, stderr, root, limit)
        if "formats" in case.checks:
            result.defects += format_judges(case, folder, stdout, stderr)
    if result.defects == [] and code == 0 and case.verify_with is not None and (folder / "plan.json").exists() and (folder / "out.prototxt").exists() and "fork" not in case.argv:
        verdict = _verify(case, folder, root, limit)
        result.verified = True
        if verdict is not None:
            result.defects.append(verdict)
    for leftover in (out, err):
        with contextlib.suppress(OSError):
            leftover.unlink()
    if not keep:
        shutil.rmtree(folder, ignore_errors=True)
        shutil.rmtree(outside, ignore_errors=True)
    result.wall = round(time.monotonic() - started, 3)
    return result


def _verify(case: Case, folder: Path, root: Path, limit: float) -> str | None:
    """`caffemem verify out.prototxt plan.json` in the case's folder: None when it passes."""
    code, text = _run_cli(("verify", str(folder / "out.prototxt"), str(folder / "plan.json"), *case.verify_with), folder, root, limit)
    if code == 0:
        return None
    return f"unsafe table: verify exits {code}: {_last_line(text)}"[:400]


def judge(case: Case, folder: Path, before: dict, after: dict, code: int | None, hung: bool, stderr: str) -> list[str]:
    """The contract's breaches in one finished run."""
    defects = []
    interrupted = case.interrupt_after is not None
    if hung:
        return ["hang: still running after the time limit"]
    if ("Traceback" in stderr or "Fatal Python error" in stderr) and interrupted_before_caffemem(case, stderr):
        return []  # counted apart in the summary
    if case.runner == "api":
        if code == 3 or "Traceback" in stderr:
            return [f"not a CaffememError: {_last_line(stderr)[:200]}"]
        if code not in (0, 2):
            return [f"exit code: {code}"]
        return []
    if code not in (0, 1, 2, 130):
        defects.append(f"exit code: {code}")
    if code == 130 and not interrupted:
        defects.append("exit code: 130 without Ctrl-C")
    if "Traceback (most recent call last)" in stderr or "Exception ignored" in stderr or "Fatal Python error" in stderr:
        defects.append("traceback")
    lines = [line for line in stderr.splitlines() if line.strip()]
    if code in (1, 2, 130) and len(lines) > 1:
        defects.append(f"stderr lines: {len(lines)}")
    if code == 2 and "needs more memory than this machine has" in stderr:
        defects.append("memory cap reached")
    if code == 2 and "internal error" in stderr:
        defects.append("internal error")
    # Inputs: everything that was there, except the outputs this command may rewrite.
    for name, entry in before.items():
        if name in case.outputs:
            continue
        if after.get(name) != entry:
            defects.append(f"altered input: {name}")
    new = [name for name in after if name not in before]
    leftovers = [name for name in new if name.endswith(".tmp") or "/." in name or name.startswith(".")]
    if leftovers:
        defects.append(f"temporary file left: {leftovers[0]}")
    written = [name for name in case.outputs if after.get(name) != before.get(name) and name in after]
    # check reports a finding (1) or a bad file among many (2, no error line) with its reports written.
    succeeded = code == 0 or (case.argv[:1] == ("check",) and (code == 1 or (code == 2 and "caffemem: error" not in stderr)))
    if written and not succeeded:
        defects.append(f"written on failure: exit {code}: {written[0]}")
    if succeeded:
        defects += _outputs_hold_what_they_claim(case, folder, written)
    return defects


def _value_of(argv: tuple[str, ...], flag: str) -> str | None:
    return argv[argv.index(flag) + 1] if flag in argv[:-1] else None


def interrupted_before_caffemem(case: Case, stderr: str) -> bool:
    """Ctrl-C in a fresh interpreter before it reached caffemem's first line (Python's
    own start-up: site, .pth files, runpy, the package's __init__): its traceback has no
    frame in the package past the lines that set __main__'s handler.
    No program can catch that; the summary counts these apart."""
    package = str(REPO / "caffemem") + os.sep
    # The package's own first lines run before __main__ can set its handler: importing
    # caffemem/__init__.py (and its _version), and __main__'s two imports above the handler.
    before_the_handler = {package + name for name in ("__init__.py", "_version.py", "__main__.py")}
    frames = re.findall(r'File "([^"]+)"', stderr)
    return case.fresh and case.interrupt_after is not None and all(frame in before_the_handler for frame in frames if frame.startswith(package))


def _outputs_hold_what_they_claim(case: Case, folder: Path, written: list[str]) -> list[str]:
    defects = []
    if "out.prototxt" in written and _value_of(case.argv, "-o") == "out.prototxt" and "--inplace" not in case.argv:
        source = dict(case.files).get(case.argv[1].removeprefix("{dir}/"))
        if source is not None:
            data = (folder / "out.prototxt").read_bytes()
            batch = _value_of(case.argv, "--batch")
            problem = round_trip_problem(source, data)
            if problem and batch is not None and batch_rewrite_problem(source, data, batch) is None:
                problem = None  # optimize --batch N -o: the data layers' batch numbers become N
            if problem:
                defects.append(f"round trip: {problem}")
    if "plan.json" in written:
        try:
            json.loads((folder / "plan.json").read_bytes())
        except ValueError:
            defects.append("bad output: plan.json is not JSON")
    if "baseline.json" in written:
        try:
            json.loads((folder / "baseline.json").read_bytes())["nets"]
        except (ValueError, KeyError, TypeError):
            defects.append("bad output: baseline.json is not a baseline")
    if "report.html" in written and not (folder / "report.html").read_bytes().lstrip().lower().startswith(b"<!doctype html"):
        defects.append("bad output: report.html is not HTML")
    return defects


def round_trip_problem(source: bytes, written: bytes) -> str | None:
    """None when ``written`` is ``source`` byte for byte, plus caffemem's block after it;
    the one change allowed inside is an old ``mem_param`` blanked out (spaces, line
    ends kept)."""
    if len(written) < len(source):
        return f"the output ({len(written)} bytes) is shorter than the input ({len(source)})"
    prefix = written[: len(source)]
    for i, (a, b) in enumerate(zip(source, prefix)):
        if a != b and not (b == 0x20 and a not in b"\r\n"):
            return f"byte {i} changed ({bytes([a])!r} -> {bytes([b])!r})"
    rest = written[len(source) :].lstrip(b"\r\n")
    if not rest.startswith(b"mem_param {"):
        return "no mem_param block after the input's bytes"
    return None


def batch_rewrite_problem(source: bytes, written: bytes, batch: str) -> str | None:
    """None when ``written`` is ``source`` with some of its numbers replaced by ``batch``
    (what ``optimize --batch N -o`` may change: the data layers' batch lines), every other
    byte kept, plus caffemem's block after it."""
    start = written.rfind(b"mem_param {")
    if start < 0:
        return "no mem_param block after the input's bytes"
    kept, given = re.split(rb"(\d+)", source.rstrip(b"\r\n")), re.split(rb"(\d+)", written[:start].rstrip(b"\r\n"))
    if len(kept) != len(given):
        return "the output's text differs from the input's beyond its numbers"
    for i, (a, b) in enumerate(zip(kept, given)):
        if a != b and not (i % 2 and b == batch.encode()):
            return f"{a[:40]!r} became {b[:40]!r}"
    return None


# ----------------------------------------------------------------------------- the surfaces' judges

CONTROL_CHARACTERS = re.compile("[\x00-\x08\x0b-\x1f\x7f\x80-\x9f]")
BIDI_CONTROLS = re.compile("[\u202a-\u202e\u2066-\u2069]")
INJECTED_COMMAND = re.compile(r"^\s*::(error file=x,line=1::pwned|warning::injected|error::pct)", re.MULTILINE)  # the payloads' own commands at a line's start


def surface_judges(
    case: Case, folder: Path, outside: Path, before: dict, after: dict, outside_before: dict, outside_after: dict, code: int | None, stdout: str, stderr: str, root: Path, limit: float
) -> list[str]:
    """The breaches the surfaces of issue 31 look for, beyond the contract every run keeps
    (:func:`judge`).  Each check is named in Case.checks."""
    defects = []
    changed_outside = sorted(name for name in set(outside_before) | set(outside_after) if outside_before.get(name) != outside_after.get(name))
    if changed_outside:
        defects.append(f"written outside: {', '.join(changed_outside[:3])}")
    for name, entry in [*after.items(), *((f"{{outside}}/{n}", e) for n, e in outside_after.items())]:
        if entry[0] & 0o6000 and {**before, **{f"{{outside}}/{n}": e for n, e in outside_before.items()}}.get(name) != entry:
            defects.append(f"setuid file: {name} mode {oct(entry[0] & 0o7777)}")
            break
    checks = set(case.checks)
    if "links kept" in checks:
        replaced = [name for name, entry in before.items() if stat.S_ISLNK(entry[0]) and after.get(name) != entry]
        if replaced:
            defects.append(f"link replaced: {replaced[0]}")
    for check in checks:
        if check.startswith("only outputs:"):
            prefix = check.split(":", 1)[1]
            created = [n for n in after if n not in before and n.startswith(prefix) and n not in case.outputs and not _temporary_name(n)]
            if created:
                defects.append(f"created: {created[0]}")
    if "source untouched" in checks:
        created = [n for n in after if n not in before and n.startswith(("db/", "a.h5", "h5list", "list.txt", "img.png", "mean."))]
        if created:
            defects.append(f"written into the source: {created[0]}")
    if "refused" in checks and code == 0:
        defects.append("accepted: exit 0 where the input must be refused")
    if "gate" in checks and code == 0:
        defects.append("gate passed: the config's budget was not applied")
    for check in checks:
        if check.startswith("names:") and code == 2 and check.split(":", 1)[1] not in stderr:
            defects.append(f"message does not name {check.split(':', 1)[1]!r}: {_last_line(stderr)[:160]}")
    if code != 0:
        return defects
    if "control" in checks:
        control = tuple(a.replace("out.prototxt", "control.prototxt").replace("plan.json", "control.json") for a in case.argv)
        control_code, _ = _run_cli(control, folder, root, limit)
        if control_code == 1:
            defects.append("unsafe table passes: verify exits 0 after the record edit (without it: exit 1)")
    if "verify out" in checks and (folder / "out.prototxt").exists():
        verdict, text = _run_cli(("verify", "out.prototxt"), folder, root, limit)
        if verdict != 0:
            defects.append(f"written plan refused: verify out.prototxt exits {verdict}: {_first_violation(text)}"[:300])
    if "unique names" in checks and (folder / "out.prototxt").exists():
        problem = duplicate_reference(folder / "out.prototxt")
        if problem:
            defects.append(problem)
    if "backward holds" in checks and (folder / "out.prototxt").exists():
        relabelled = relabel_as_train((folder / "out.prototxt").read_bytes())
        if relabelled is not None:
            (folder / "relabelled.prototxt").write_bytes(relabelled)
            options = [a for i, a in enumerate(case.argv) if i > 1 and case.argv[i - 1] in ("--input",) or a.startswith("--input")]
            verdict, text = _run_cli(("verify", "relabelled.prototxt", "--phase", "TRAIN", *options), folder, root, limit)
            if verdict == 1:
                defects.append(f"TEST table unsafe for Backward (force_backward): {_first_violation(text)}"[:300])
    if "caffe reads out" in checks and (folder / "out.prototxt").exists():
        problem = caffe_reads(dict(case.files).get("net.prototxt", b""), (folder / "out.prototxt").read_bytes())
        if problem:
            defects.append(problem)
        elif b"slot {" in (folder / "out.prototxt").read_bytes():
            verdict, text = _run_cli(("verify", "out.prototxt"), folder, root, limit)
            if verdict != 0:
                defects.append(f"written plan refused: verify out.prototxt exits {verdict}: {_first_violation(text)}"[:300])
    return defects


def format_judges(case: Case, folder: Path, stdout: str, stderr: str) -> list[str]:
    """Every output a run of the injection surface wrote, read as its reader will: the
    terminal (no control characters), Markdown (no raw HTML, mentions or comments outside
    code), GitHub's workflow commands, HTML (its embedded JSON parses, no payload tag),
    JSON and JUnit (they parse)."""
    defects = []
    for name, text in (("stdout", stdout), ("stderr", stderr)):
        found = CONTROL_CHARACTERS.search(text)
        if found:
            defects.append(f"raw control character on {name}: U+{ord(found.group()):04X}")
        found = BIDI_CONTROLS.search(text)
        if found:
            defects.append(f"bidi control on {name}: U+{ord(found.group()):04X}")
        if INJECTED_COMMAND.search(text):
            defects.append(f"injected workflow command on {name}: {INJECTED_COMMAND.search(text).group().strip()[:80]!r}")
    outputs: list[tuple[str, str]] = []  # (format, text)
    argv = case.argv
    fmt = _value_of(argv, "--format")
    if fmt:
        outputs.append((fmt, stdout))
    if "--json" in argv:
        outputs.append(("json", stdout))
    for i, word in enumerate(argv[:-1]):
        if word == "--report" and ":" in argv[i + 1]:
            kind, name = argv[i + 1].split(":", 1)
            if (folder / name).is_file():
                outputs.append((kind, (folder / name).read_text("utf-8", "replace")))
        elif word in ("--html", "--plan-json") and (folder / argv[i + 1]).is_file():
            outputs.append(("html" if word == "--html" else "json", (folder / argv[i + 1]).read_text("utf-8", "replace")))
    for kind, text in outputs:
        if not text.strip():
            continue  # nothing written (a refused run): nothing to read
        problem = {"markdown": markdown_problem, "github": github_problem, "html": html_problem, "json": json_problem, "junit": junit_problem}.get(kind, lambda t: None)(text)
        if problem:
            defects.append(f"{kind}: {problem}")
    return defects


CODE_SPAN = re.compile(r"(`+)(.+?)(?<!`)\1(?!`)", re.DOTALL)


def markdown_problem(text: str) -> str | None:
    """Raw HTML, an HTML comment or an @mention outside code spans: GitHub renders them in
    a pull-request comment or a job summary (code spans are literal)."""
    outside_code = CODE_SPAN.sub("", text)
    for pattern, what in ((r"<img|<script|</script", "raw HTML"), (r"<!--", "an HTML comment"), (r"(?<![\w`\\])@octocat", "an @mention"), (r"\]\(http", "a link")):
        if re.search(pattern, outside_code, re.IGNORECASE):
            return f"{what} outside code"
    return None


def github_problem(text: str) -> str | None:
    found = INJECTED_COMMAND.search(text)
    if found:
        return f"a workflow command made by a name: {found.group().strip()[:80]!r}"
    for line in text.splitlines():
        if line.startswith("::") and not re.match(r"::(error|warning|notice) file=[^:]*::", line):
            return f"a workflow command line caffemem did not make: {line[:80]!r}"
    return None


SCRIPT_JSON = re.compile(r'<script type="application/json"[^>]*>(.*?)</script>', re.DOTALL)


def html_problem(text: str) -> str | None:
    """A payload tag outside the embedded JSON (inside it, a script element's data, it is
    text), or embedded JSON that does not parse."""
    if re.search(r"<img src=x|<script>alert", SCRIPT_JSON.sub("", text)):
        return "a payload tag in the page"
    blocks = SCRIPT_JSON.findall(text)
    if not blocks and "application/json" in text:
        return "the embedded JSON's element does not close"
    for block in blocks:
        try:
            json.loads(block)
        except ValueError as error:
            return f"embedded JSON does not parse ({error})"[:200]
    return None


def json_problem(text: str) -> str | None:
    try:
        json.loads(text)
    except ValueError as error:
        return f"does not parse ({error})"[:200]
    return None


def junit_problem(text: str) -> str | None:
    from xml.etree import ElementTree

    try:
        ElementTree.fromstring(text.encode("utf-8"))
    except ElementTree.ParseError as error:
        return f"not XML ({error})"[:200]
    return None


def _temporary_name(name: str) -> bool:
    return name.endswith((".tmp", ".caffemem-tmp")) or "/." in name or name.startswith(".")


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""


def _first_violation(text: str) -> str:
    for line in text.splitlines():
        if "overwrote" in line or "overlap" in line or "stops at" in line or "unsafe" in line:
            return line.strip()
    return _last_line(text)


def relabel_as_train(data: bytes) -> bytes | None:
    """The TEST table of an `optimize --phase TEST` output as the TRAIN table (its slots,
    its record, optimize_train), so that `verify --phase TRAIN` replays it with Backward."""
    start = data.rfind(b"mem_param {")
    if start < 0 or b"phase: TEST" not in data[start:]:
        return None
    block = data[start:]
    block = block.replace(b"phase: TEST", b"phase: TRAIN").replace(b"made-for TEST:", b"made-for TRAIN:").replace(b'"phase": "TEST"', b'"phase": "TRAIN"')
    block = block.replace(b"optimize_train: false", b"optimize_train: true").replace(b"optimize_test: true", b"optimize_test: false")
    return data[:start] + block


def _parse_net(data: bytes):
    from google.protobuf import text_format

    from caffemem.schema import caffe_pb2

    net = caffe_pb2.NetParameter()
    text_format.Parse(data.decode("utf-8"), net)
    return net


def caffe_reads(source: bytes, written: bytes) -> str | None:
    """None when Caffe's parser (protobuf's text format, as caffemem's schema has it)
    reads the output, with the mem_param block it was given; where it reads the input."""
    try:
        _parse_net(source)
    except Exception:  # noqa: BLE001 (an input protobuf itself refuses: nothing to compare)
        return None
    try:
        net = _parse_net(written)
    except Exception as error:  # noqa: BLE001
        return f"Caffe's parser cannot read the output: {str(error)[:160]}"
    if not net.HasField("mem_param"):
        return "the output's mem_param is not read by Caffe's parser (a comment swallows it)"
    return None


def duplicate_reference(path: Path) -> str | None:
    """A recompute entry naming a layer (or a `before`) that several layers of the net are
    called: the patched runtime looks names up keeping the last one."""
    try:
        net = _parse_net(path.read_bytes())
    except Exception:  # noqa: BLE001
        return None
    counts = Counter(layer.name for layer in net.layer)
    for entry in net.mem_param.recompute:
        for name in (entry.layer, entry.before):
            if counts[name] > 1:
                return f"plan names a duplicate layer: {name!r} ({counts[name]} layers are called so)"
    return None


# ----------------------------------------------------------------------------- the campaign


def _kind(defect: str) -> str:
    """A defect's kind: its words before the first colon."""
    return defect.split(":")[0]


def summarize(results: list[Result], seconds: float) -> dict:
    ran = [r for r in results if not r.set_up_error]
    codes = Counter("killed" if r.exit is None else str(r.exit) for r in ran)
    kinds = Counter(_kind(d) for r in ran for d in r.defects)
    surfaces = {}
    for name in SURFACES:
        mine = [r for r in ran if r.family == name]
        if mine or any(r.family == name for r in results):
            surfaces[name] = {
                "cases": len(mine),
                "exit_codes": dict(sorted(Counter("killed" if r.exit is None else str(r.exit) for r in mine).items())),
                "defective": sum(bool(r.defects) for r in mine),
                "defect_kinds": dict(Counter(_kind(d) for r in mine for d in r.defects).most_common()),
                "set_up_failures": sum(bool(r.set_up_error) for r in results if r.family == name),
                "seconds": round(sum(r.wall for r in mine), 1),
            }
    return {
        "runs": len(ran),
        "seconds": round(seconds, 1),
        "families": dict(sorted(Counter(r.family for r in ran).items())),
        "surfaces": surfaces,
        "exit_codes": dict(sorted(codes.items())),
        "tracebacks": kinds.get("traceback", 0),
        "hangs": kinds.get("hang", 0),
        "altered_inputs": kinds.get("altered input", 0),
        "round_trip_failures": kinds.get("round trip", 0),
        "unsafe_tables": kinds.get("unsafe table", 0),
        "written_on_failure": kinds.get("written on failure", 0),
        "tables_verified": sum(r.verified for r in ran),
        "interrupted_in_python_start_up": sum(("Traceback" in r.stderr or "Fatal Python error" in r.stderr) and not r.defects and r.family == "signal" for r in ran),
        "peak_memory_mib": round(max((r.peak_kib for r in ran), default=0) / 1024, 1),
        "set_up_failures": [{"case": r.number, "family": r.family, "error": r.set_up_error} for r in results if r.set_up_error],
        "defect_kinds": dict(sorted(kinds.items())),
        "defective_runs": sum(bool(r.defects) for r in ran),
        "defects": [{"case": r.number, "family": r.family, "command": r.command, "note": r.note, "exit": r.exit, "defects": r.defects, "stderr": r.stderr[-600:]} for r in ran if r.defects],
    }


def markdown(summary: dict) -> str:
    """The summary as docs/hostile.md's two tables: per surface, then the whole campaign."""
    lines = ["| surface | what it tries | cases | exit codes | defects |", "|---|---|--:|---|---|"]
    for name, row in summary["surfaces"].items():
        codes = ", ".join(f"{code}: {n:,}" for code, n in row["exit_codes"].items())
        kinds = ", ".join(f"{kind} {n:,}" for kind, n in row["defect_kinds"].items())
        defects = f"{row['defective']:,}" + (f" ({kinds})" if kinds else "")
        lines.append(f"| {name} | {SURFACES[name][1]} | {row['cases']:,} | {codes} | {defects} |")
    codes = ", ".join(f"{code}: {n:,}" for code, n in summary["exit_codes"].items())
    rows = [
        ("runs", f"{summary['runs']:,} in {summary['seconds'] / 60:.0f} minutes"),
        ("exit codes", codes),
        ("tracebacks", summary["tracebacks"]),
        ("hangs (past the time limit)", summary["hangs"]),
        ("altered inputs", summary["altered_inputs"]),
        ("outputs written by a failed run", summary["written_on_failure"]),
        ("`-o` round-trip failures", summary["round_trip_failures"]),
        ("unsafe tables (of those verified)", f"{summary['unsafe_tables']} (of {summary['tables_verified']:,})"),
        ("Ctrl-C inside Python's own start-up (not counted)", summary["interrupted_in_python_start_up"]),
        ("peak memory of a run (RSS)", f"{summary['peak_memory_mib']} MiB"),
        ("defective runs", summary["defective_runs"]),
    ]
    return "\n".join(lines) + "\n\n| | |\n|---|---|\n" + "\n".join(f"| {name} | {value} |" for name, value in rows) + "\n"


def campaign(seed: int, count: int, limit: float = TIME_LIMIT, only: int | None = None, fresh_share: float = 0.03, progress=None, jobs: int = 1, surfaces: list[str] | None = None) -> dict:
    """Generate and run ``count`` cases (or case ``only``), in ``jobs`` worker processes;
    the summary as a dict."""
    cases = generate(seed, count if only is None else only + 1, fresh_share, surfaces)
    return run_cases(cases if only is None else [cases[only]], limit, progress, jobs)


def run_cases(cases: list[Case], limit: float = TIME_LIMIT, progress=None, jobs: int = 1) -> dict:
    """Run ``cases`` in ``jobs`` worker processes; the summary as a dict."""
    _import_once()
    started = time.monotonic()
    if jobs <= 1:
        results = _run_all(cases, limit, progress)
    else:
        results = sorted(_in_workers(cases, limit, progress, jobs), key=lambda r: r.number)
    return summarize(results, time.monotonic() - started)


def _import_once() -> None:
    """The library imported once, in CPU mode, before any case forks (each child starts
    from it instead of importing it again)."""
    os.environ.setdefault("CAFFEMEM_DEVICE", "cpu")
    import caffemem.cli  # noqa: F401


def sample(seed: int, per_family: int = 12, per_surface: int = 4) -> list[Case]:
    """A few cases of every surface (CI's sample): each surface's own draw from ``seed``
    plus its index, renumbered; the note says how to run one again."""
    from dataclasses import replace

    cases: list[Case] = []
    for index, name in enumerate(SURFACES):
        count = per_family if name in OLD_FAMILIES else per_surface
        for case in generate(seed + index, count, surfaces=[name]):
            again = f"python benchmarks/hostile.py --surfaces {name} --seed {seed + index} --only {case.number} --keep"
            cases.append(replace(case, number=len(cases), note=f"{case.note} [{again}]".lstrip()))
    return cases


def _in_workers(cases: list[Case], limit: float, progress, jobs: int) -> list[Result]:
    """Every ``jobs``-th case in each of ``jobs`` forked workers (plain processes: a
    multiprocessing pool's daemonic workers could not give `check --jobs` its own)."""
    with tempfile.TemporaryDirectory(prefix="caffemem-hostile-workers-") as folder:
        workers = []
        for k in range(jobs):
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:  # pragma: no cover
                code = 0
                try:
                    done = _run_all(cases[k::jobs], limit, progress)
                    Path(folder, f"{k}.json").write_text(json.dumps([vars(r) for r in done]))
                except BaseException:  # noqa: BLE001
                    traceback.print_exc()
                    code = 1
                finally:
                    os._exit(code)
            workers.append(pid)
        for pid in workers:
            os.waitpid(pid, 0)
        results = []
        for k in range(jobs):
            path = Path(folder, f"{k}.json")
            if path.exists():
                results += [Result(**fields) for fields in json.loads(path.read_text())]
        return results


def _run_all(cases: list[Case], limit: float, progress) -> list[Result]:
    results = []
    with tempfile.TemporaryDirectory(prefix="caffemem-hostile-") as root:
        for case in cases:
            try:
                results.append(run_case(case, Path(root), limit))
            except Exception as error:  # noqa: BLE001 (the harness's own failure: counted, the campaign goes on)
                results.append(Result(case.number, case.family, case.command(), None, 0.0, 0, "", note=case.note, set_up_error=f"harness: {type(error).__name__}: {error}"[:300]))
            if progress is not None:
                progress(results[-1])
    return results


_DONE: Counter = Counter()


def progress(result: Result) -> None:
    """Each defect as it is found (with the command that reproduces it), and a count."""
    _DONE["runs"] += 1
    _DONE["defective"] += bool(result.defects)
    if result.defects:
        print(f"case {result.number} ({result.family}: {result.note}): {'; '.join(result.defects)}\n    {result.command}\n    {result.stderr.strip()[-300:]}", file=sys.stderr)
    if result.set_up_error:
        print(f"case {result.number} ({result.family}): not run: {result.set_up_error}", file=sys.stderr)
    if _DONE["runs"] % 250 == 0:
        print(f"... {_DONE['runs']} runs in this worker, {_DONE['defective']} defective", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=DEFAULT_CASES)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--time-limit", type=float, default=TIME_LIMIT)
    parser.add_argument("--only", type=int, help="run this case number alone (of --seed's sequence) and show it")
    parser.add_argument("--keep", action="store_true", help="with --only: leave the case's folders on disk and say where")
    parser.add_argument("--surfaces", help="comma-separated: draw only these surfaces (another sequence: give it with --only too)")
    parser.add_argument("--json", type=Path, help="write the summary here too")
    parser.add_argument("--jobs", type=int, default=1, help="worker processes (each forks its cases)")
    parser.add_argument("--markdown", type=Path, metavar="JSON", help="only print docs/hostile.md's tables of a summary written by --json")
    args = parser.parse_args(argv)
    if args.markdown:
        print(markdown(json.loads(args.markdown.read_text())), end="")
        return 0
    _import_once()
    surfaces = args.surfaces.split(",") if args.surfaces else None
    if args.only is not None:
        return _show_one(args.seed, args.only, args.time_limit, surfaces, args.keep)
    summary = campaign(args.seed, args.cases, args.time_limit, progress=progress, jobs=args.jobs, surfaces=surfaces)
    shown = {k: v for k, v in summary.items() if k != "defects"}
    print(json.dumps(shown, indent=1))
    if args.json:
        args.json.write_text(json.dumps(summary, indent=1) + "\n")
    return 1 if summary["defective_runs"] else 0


def _show_one(seed: int, number: int, limit: float, surfaces: list[str] | None, keep: bool) -> int:
    """Case ``number`` of the sequence run alone: its command, its folder, its verdict."""
    case = generate(seed, number + 1, surfaces=surfaces)[number]
    root = Path(tempfile.mkdtemp(prefix="caffemem-hostile-case-"))
    result = run_case(case, root, limit, keep=keep)
    folder, outside = root / f"case{number}", root / f"outside{number}"
    print(f"case {number} ({case.family}): {case.note}")
    print("  in DIR:\n    " + "\n    ".join(case.described_set_up() or ["(empty)"]))
    print(f"  run (in DIR): {case.command()}")
    print(f"  exit {result.exit}, {result.seconds} s; stderr: {result.stderr.strip()[-400:]!r}")
    print(f"  defects: {result.defects or 'none'}" + (f"; not run: {result.set_up_error}" if result.set_up_error else ""))
    if keep:
        print(f"  DIR = {folder}\n  OUTSIDE = {outside}")
    else:
        shutil.rmtree(root, ignore_errors=True)
    return 1 if result.defects else 0


if __name__ == "__main__":
    sys.exit(main())

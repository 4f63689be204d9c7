"""The hostile campaign: thousands of runs of every command as a careless or hostile user
and environment would make them, each judged against the contract the README promises.

    python benchmarks/hostile.py                          # 5,000 cases, seed 0
    python benchmarks/hostile.py --cases 300 --seed 7 --json summary.json
    python benchmarks/hostile.py --only 1234 --seed 0     # one case again, its command shown

A seeded generator (:func:`generate`) draws each case from six families (the last two together):

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

Each case runs in a forked child of a process that has imported caffemem once (a fresh
interpreter, ``python -m caffemem``, where the environment or start-up is the point),
through the ``caffemem`` script's own entry (``caffemem.__main__.run``), under a time
limit and an address-space cap (``RLIMIT_AS``).  It is a defect when:

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
  a written plan, baseline or report is not what it claims to be.

The summary counts runs, exit codes, tracebacks, hangs, altered inputs, round-trip
failures, unsafe tables and peak memory, and lists every defect with its case number.
"""

from __future__ import annotations

import argparse
import contextlib
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
TIME_LIMIT = 60.0  # seconds a run may take
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

    def command(self, folder: str = "DIR") -> str:
        """The case as a shell line, to reproduce it by hand."""
        import shlex

        words = " ".join(shlex.quote(a.replace("{dir}", folder)) for a in self.argv)
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in self.env)
        redirect = {"full": " >/dev/full", "closed": " >&-", "head": " | head -c 10"}.get(self.stdout, "")
        redirect += " 2>&-" if self.stderr == "closed" else ""
        prefix = "rmdir $PWD; " if self.delete_cwd else ""
        ctrl_c = f"  # Ctrl-C after {self.interrupt_after:.2f} s" if self.interrupt_after is not None else ""
        return f"{prefix}{env + ' ' if env else ''}caffemem {words}{redirect}{ctrl_c}"


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


def generate(seed: int, count: int, fresh_share: float = 0.03) -> list[Case]:
    """``count`` cases drawn from ``seed``: the same seed gives the same cases."""
    rng = random.Random(seed)
    bases = corpus()
    cases = []
    for number in range(count):
        draw = random.Random(rng.getrandbits(64))
        family = draw.choices(["mutated", "binary", "flags", "special", "environment", "signal"], [40, 5, 17, 13, 13, 12])[0]
        cases.append(_case(number, family, draw, bases, fresh_share))
    return cases


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
                digest = hashlib.sha256(path.read_bytes()).hexdigest()
        elif stat.S_ISLNK(status.st_mode):
            digest = os.readlink(path)
        seen[relative] = (stat.S_IFMT(status.st_mode) | stat.S_IMODE(status.st_mode), digest)
    return seen


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


def _child(case: Case, folder: Path, out: Path, err: Path, head_fd: int | None) -> None:  # pragma: no cover (runs in the forked child)
    """The forked child: the case's standard streams, folder and limits, then the
    `caffemem` script's own entry point.  Never returns."""
    code = 99
    try:
        os.setpgid(0, 0)
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_CAP, MEMORY_CAP))
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
            os.environ[key] = value
        os.environ["CAFFEMEM_DEVICE"] = os.environ.get("CAFFEMEM_DEVICE", "cpu")
        # As the interpreter sets them up at start: None for a closed descriptor.
        sys.stdin = open(0, encoding="utf-8", closefd=False)  # type: ignore[assignment]  # noqa: SIM115
        sys.stdout = None if case.stdout == "closed" else open(1, "w", encoding="utf-8", closefd=False)  # type: ignore[assignment]  # noqa: SIM115
        sys.stderr = None if case.stderr == "closed" else open(2, "w", encoding="utf-8", errors="backslashreplace", closefd=False, buffering=1)  # type: ignore[assignment]  # noqa: SIM115
        sys.argv = ["caffemem", *[a.replace("{dir}", str(folder)) for a in case.argv]]
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


def _fresh(case: Case, folder: Path, out: Path, err: Path, limit: float) -> tuple[int | None, int, float, bool]:
    """A new interpreter, `python -m caffemem`, in the case's environment."""
    env = {k: v for k, v in os.environ.items() if k not in ("LANG", "LC_ALL", "LC_CTYPE", "PYTHONIOENCODING", "PYTHONUTF8")}
    env.update({"PYTHONPATH": str(REPO), "CAFFEMEM_DEVICE": env.get("CAFFEMEM_DEVICE", "cpu"), **dict(case.env)})

    def limits() -> None:  # pragma: no cover (in the child)
        os.setpgid(0, 0)
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_CAP, MEMORY_CAP))

    argv = [sys.executable, "-m", "caffemem", *[a.replace("{dir}", str(folder)) for a in case.argv]]
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


def run_case(case: Case, root: Path, limit: float = TIME_LIMIT) -> Result:
    """Run one case in its own folder under ``root`` and judge it."""
    folder = root / f"case{case.number}"
    io_folder = root / "io"
    io_folder.mkdir(exist_ok=True)
    out, err = io_folder / f"{case.number}.out", io_folder / f"{case.number}.err"
    _prepare(case, folder)
    before = _snapshot(folder)
    if case.fresh:
        code, peak, seconds, hung = _fresh(case, folder, out, err, limit)
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
            _child(case, folder, out, err, head_write)
        if head_write is not None:
            os.close(head_write)
        code, peak, seconds, hung = _wait(pid, case, limit, head_read)
    stderr = err.read_bytes().decode("utf-8", "replace") if err.exists() else ""
    result = Result(case.number, case.family, case.command(), code, round(seconds, 3), peak, stderr[-2000:])
    result.defects = judge(case, folder, before, _snapshot(folder), code, hung, stderr)
    if result.defects == [] and code == 0 and case.verify_with is not None and (folder / "plan.json").exists() and (folder / "out.prototxt").exists() and "fork" not in case.argv:
        verdict = _verify(case, folder, root, limit)
        result.verified = True
        if verdict is not None:
            result.defects.append(verdict)
    for leftover in (out, err):
        with contextlib.suppress(OSError):
            leftover.unlink()
    shutil.rmtree(folder, ignore_errors=True)
    return result


def _verify(case: Case, folder: Path, root: Path, limit: float) -> str | None:
    """`caffemem verify out.prototxt plan.json` in the case's folder: None when it passes."""
    check = Case(case.number, "verify", ("verify", str(folder / "out.prototxt"), str(folder / "plan.json"), *case.verify_with))
    io_folder = root / "io"
    out, err = io_folder / f"v{case.number}.out", io_folder / f"v{case.number}.err"
    pid = _forked()
    if pid == 0:  # pragma: no cover
        _child(check, folder, out, err, None)
    code, _, _, _ = _wait(pid, check, limit, None)
    text = err.read_bytes().decode("utf-8", "replace") if err.exists() else ""
    text += out.read_bytes().decode("utf-8", "replace") if out.exists() else ""
    for leftover in (out, err):
        with contextlib.suppress(OSError):
            leftover.unlink()
    if code == 0:
        return None
    return f"unsafe table: verify exits {code}: {text.strip().splitlines()[-1] if text.strip() else ''}"[:400]


def judge(case: Case, folder: Path, before: dict, after: dict, code: int | None, hung: bool, stderr: str) -> list[str]:
    """The contract's breaches in one finished run."""
    defects = []
    interrupted = case.interrupt_after is not None
    if hung:
        return ["hang: still running after the time limit"]
    if ("Traceback" in stderr or "Fatal Python error" in stderr) and interrupted_before_caffemem(case, stderr):
        return []  # counted apart in the summary
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
    own start-up: site, .pth files, runpy): its traceback has no frame in the package.
    No program can catch that; the summary counts these apart."""
    package = str(REPO / "caffemem") + os.sep
    frames = re.findall(r'File "([^"]+)"', stderr)
    return case.fresh and case.interrupt_after is not None and not any(frame.startswith(package) for frame in frames)


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


# ----------------------------------------------------------------------------- the campaign


def summarize(results: list[Result], seconds: float) -> dict:
    codes = Counter("killed" if r.exit is None else str(r.exit) for r in results)
    kinds = Counter(d.split(":")[0] for r in results for d in r.defects)
    return {
        "runs": len(results),
        "seconds": round(seconds, 1),
        "families": dict(sorted(Counter(r.family for r in results).items())),
        "exit_codes": dict(sorted(codes.items())),
        "tracebacks": kinds.get("traceback", 0),
        "hangs": kinds.get("hang", 0),
        "altered_inputs": kinds.get("altered input", 0),
        "round_trip_failures": kinds.get("round trip", 0),
        "unsafe_tables": kinds.get("unsafe table", 0),
        "written_on_failure": kinds.get("written on failure", 0),
        "tables_verified": sum(r.verified for r in results),
        "interrupted_in_python_start_up": sum(("Traceback" in r.stderr or "Fatal Python error" in r.stderr) and not r.defects for r in results),
        "peak_memory_mib": round(max((r.peak_kib for r in results), default=0) / 1024, 1),
        "defect_kinds": dict(sorted(kinds.items())),
        "defective_runs": sum(bool(r.defects) for r in results),
        "defects": [{"case": r.number, "command": r.command, "exit": r.exit, "defects": r.defects, "stderr": r.stderr[-600:]} for r in results if r.defects],
    }


def markdown(summary: dict) -> str:
    """The summary as the README's table."""
    codes = ", ".join(f"{code}: {n:,}" for code, n in summary["exit_codes"].items())
    families = ", ".join(f"{family} {n:,}" for family, n in summary["families"].items())
    rows = [
        ("runs", f"{summary['runs']:,} ({families})"),
        ("exit codes", codes),
        ("tracebacks", summary["tracebacks"]),
        ("hangs (past the time limit)", summary["hangs"]),
        ("altered inputs", summary["altered_inputs"]),
        ("outputs written by a failed run", summary["written_on_failure"]),
        ("`-o` round-trip failures", summary["round_trip_failures"]),
        ("unsafe tables (of those verified)", f"{summary['unsafe_tables']} (of {summary['tables_verified']:,})"),
        ("Ctrl-C inside Python's own start-up (not counted)", summary["interrupted_in_python_start_up"]),
        ("peak memory of a run (RSS)", f"{summary['peak_memory_mib']} MiB"),
        ("defects", summary["defective_runs"]),
    ]
    return "| | |\n|---|---|\n" + "\n".join(f"| {name} | {value} |" for name, value in rows) + "\n"


def campaign(seed: int, count: int, limit: float = TIME_LIMIT, only: int | None = None, fresh_share: float = 0.03, progress=None, jobs: int = 1) -> dict:
    """Generate and run ``count`` cases (or case ``only``), in ``jobs`` worker processes;
    the summary as a dict."""
    cases = generate(seed, count if only is None else only + 1, fresh_share)
    if only is not None:
        cases = [cases[only]]
    started = time.monotonic()
    if jobs <= 1:
        results = _run_all(cases, limit, progress)
    else:
        results = sorted(_in_workers(cases, limit, progress, jobs), key=lambda r: r.number)
    return summarize(results, time.monotonic() - started)


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
            results.append(run_case(case, Path(root), limit))
            if progress is not None:
                progress(results[-1])
    return results


_DONE: Counter = Counter()


def progress(result: Result) -> None:
    """Each defect as it is found (with the command that reproduces it), and a count."""
    _DONE["runs"] += 1
    _DONE["defective"] += bool(result.defects)
    if result.defects:
        print(f"case {result.number}: {'; '.join(result.defects)}\n    {result.command}\n    {result.stderr.strip()[-300:]}", file=sys.stderr)
    if _DONE["runs"] % 250 == 0:
        print(f"... {_DONE['runs']} runs in this worker, {_DONE['defective']} defective", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=5000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--time-limit", type=float, default=TIME_LIMIT)
    parser.add_argument("--only", type=int, help="run this case number alone (of --seed's sequence) and show it")
    parser.add_argument("--json", type=Path, help="write the summary here too")
    parser.add_argument("--jobs", type=int, default=1, help="worker processes (each forks its cases)")
    parser.add_argument("--markdown", type=Path, metavar="JSON", help="only print the README's table of a summary written by --json")
    args = parser.parse_args(argv)
    if args.markdown:
        print(markdown(json.loads(args.markdown.read_text())), end="")
        return 0
    os.environ.setdefault("CAFFEMEM_DEVICE", "cpu")
    import caffemem.cli  # noqa: F401  (imported once; each forked case starts from it)

    summary = campaign(args.seed, args.cases, args.time_limit, args.only, progress=progress, jobs=args.jobs)
    if args.only is not None:
        print(generate(args.seed, args.only + 1)[args.only].command())
    shown = {k: v for k, v in summary.items() if k != "defects"}
    print(json.dumps(shown, indent=1))
    if args.json:
        args.json.write_text(json.dumps(summary, indent=1) + "\n")
    return 1 if summary["defective_runs"] else 0


if __name__ == "__main__":
    sys.exit(main())

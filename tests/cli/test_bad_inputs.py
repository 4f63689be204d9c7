"""Hostile inputs: each ends with exit code 2 and exactly one line on stderr that names the
file (and the line and layer where there is one) — no traceback, no hang, and nothing
half-written: `optimize -o OUT` leaves no OUT and no temporary file.

The small inputs are files in tests/bad_inputs/; the big ones (100 MB), binary ones and
symlink loops are made in tmp_path by each case, so the repository holds none of them.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from conftest import FIXTURES, REPO
from google.protobuf import text_format

from caffemem.cli import main
from caffemem.cli.common import EXIT_BAD_INPUT
from caffemem.schema import caffe_pb2

BAD = REPO / "tests" / "bad_inputs"
LENET = FIXTURES / "examples" / "lenet_train.prototxt"
# A hang guard, not a speed limit: a run that has not ended after this long never will
# (a FIFO, /dev/zero, a loop).  No test asserts how fast a run is.
HANG_SECONDS = 120
MB = 1024 * 1024


class RunTooLong(BaseException):
    """Raised by the alarm; a BaseException so the CLI's own handlers cannot swallow it."""


@contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    def expire(signum, frame):
        raise RunTooLong(f"still running after {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def run_cli(*args: str) -> Result:
    """The real `caffemem` entry point, in process, under the hang guard."""
    with time_limit(HANG_SECONDS):
        return CliRunner().invoke(main, [str(a) for a in args])


def the_one_error_line(result: Result) -> str:
    """Exit 2, no traceback, and stderr is exactly one `caffemem: error:` line."""
    assert result.exit_code == EXIT_BAD_INPUT, (result.exit_code, result.output)
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert "Traceback" not in result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("caffemem: error: "), lines[0]
    return lines[0]


# ------------------------------------------------------------------------------ inputs made at test time


def write_bytes(name: str, data: bytes) -> Callable[[Path], Path]:
    def make(folder: Path) -> Path:
        path = folder / name
        path.write_bytes(data)
        return path

    return make


def write_chunks(name: str, chunks: Callable[[], Iterator[bytes]]) -> Callable[[Path], Path]:
    """A big file written piece by piece (never held in memory by the test)."""

    def make(folder: Path) -> Path:
        path = folder / name
        with open(path, "wb") as handle:
            for chunk in chunks():
                handle.write(chunk)
        return path

    return make


def huge_comment() -> Iterator[bytes]:
    yield b'layer { name: "data" type: "Input" top: "data" input_param { shape { dim: 1 dim: 3 } } }\n#'
    for _ in range(100):
        yield b"x" * MB


def garbage_layers() -> Iterator[bytes]:
    layer = b'layer { name: "g" type: "Garbage" bottom: "g" top: "g" }\n'  # 58 bytes
    for _ in range(40):
        yield layer * 50_000  # 2 million layers in all, 116 MB


def one_token() -> Iterator[bytes]:
    for _ in range(100):
        yield b"a" * MB


def symlink_loop(folder: Path) -> Path:
    os.symlink(folder / "b.prototxt", folder / "a.prototxt")
    os.symlink(folder / "a.prototxt", folder / "b.prototxt")
    return folder / "a.prototxt"


def a_folder(folder: Path) -> Path:
    (folder / "net.prototxt").mkdir()
    return folder / "net.prototxt"


def truncated_caffemodel(folder: Path) -> Path:
    """LeNet as a binary NetParameter carrying weights, like a .caffemodel, cut in the middle."""
    net = text_format.Parse(LENET.read_text(), caffe_pb2.NetParameter())
    for layer in net.layer:
        if layer.type in ("Convolution", "InnerProduct"):
            layer.blobs.add(data=[0.25] * 500).shape.dim.append(500)
    data = net.SerializeToString()
    return write_bytes("lenet_cut.caffemodel", data[: len(data) // 2])(folder)


def caffemodel_missing_a_bias(folder: Path) -> Path:
    """LeNet as a .caffemodel whose conv1 stores its weights but not its bias."""
    net = text_format.Parse(LENET.read_text(), caffe_pb2.NetParameter())
    next(layer for layer in net.layer if layer.name == "conv1").blobs.add().shape.dim.extend([20, 1, 5, 5])
    return write_bytes("lenet.caffemodel", net.SerializeToString())(folder)


LATIN1_NET = (
    b'# r\xe9seau \xe9crit en Latin-1\n'
    b'layer { name: "donn\xe9es" type: "Input" top: "data" input_param { shape { dim: 1 dim: 3 } } }\n'
    b'layer { name: "r\xe9gion" type: "Frobnicate" bottom: "data" top: "out" }\n'
)


# ------------------------------------------------------------------------------ the table

Argument = str | Callable[[Path], Path]  # as written, or a file made in tmp_path


def bad(name: str) -> str:
    return str(BAD / name)


@dataclass(frozen=True)
class Case:
    """One hostile input: NET and more arguments, the words the message must hold, and
    where it must point: the argument it blames (0: NET, k: args[k - 1], None: a flag's
    value, no file), the line and the layer."""

    id: str
    net: Argument
    words: tuple[str, ...]
    line: int | None = None
    layer: str | None = None
    args: tuple[Argument, ...] = ()
    blamed: int | None = 0
    optimize: bool = True  # also run `optimize -o OUT` on it


def made(argument: Argument, folder: Path) -> str:
    return argument if isinstance(argument, str) else str(argument(folder))


CASES = [
    Case("truncated text", bad("truncated.prototxt"), ("ends in the middle of a definition", "cut short"), 13, "conv1"),
    Case("num_output is text", bad("num_output_is_text.prototxt"), ("num_output", "Couldn't parse integer", '"abc"'), 12, "conv1"),
    Case("kernel_size is negative", bad("kernel_size_negative.prototxt"), ("kernel_size", "Value out of range: -3"), 12, "conv1"),
    Case("num_output is zero", bad("num_output_zero.prototxt"), ("num_output must be positive",), 7, "conv1"),
    Case("num_output is 2^40", bad("num_output_2_pow_40.prototxt"), ("num_output", "out of range", "1099511627776"), 12, "conv1"),
    Case("bottom produced later", bad("bottom_used_before_produced.prototxt"), ("'fc1'", "layer 'fc1' produces it later"), 7, "relu2"),
    Case("two layers produce one blob", bad("two_producers.prototxt"), ("'features'", "already produced by layer 'left'"), 13, "right"),
    Case("undefined bottom", bad("undefined_bottom.prototxt"), ("'dta'", "not produced by any layer"), 7, "relu"),
    Case("unknown layer type", bad("unknown_layer_type.prototxt"), ("unknown layer type 'Frobnicate'", "--layers"), 7, "mystery"),
    Case("Input dim negative", bad("input_dim_negative.prototxt"), ("top 'data'", "negative dimension"), 1, "data"),
    Case("Input dim 2^40", bad("input_dim_2_pow_40.prototxt"), ("1099511627776 does not fit Caffe's 32-bit int", "wrap it to 0"), 1, "data"),
    Case(
        "Input count overflows int64",
        bad("input_count_overflows_int64.prototxt"),
        ("exceeds INT_MAX elements", "(9903520300447984150353281023)"),  # the true count, not a wrapped one
        2,
        "data",
    ),
    Case("DummyData dim negative", bad("dummy_data_dim_negative.prototxt"), ("top 'noise'", "negative dimension"), 1, "noise"),
    Case("DummyData dim 2^40", bad("dummy_data_dim_2_pow_40.prototxt"), ("1099511627776 does not fit Caffe's 32-bit int",), 1, "noise"),
    Case("data blob without a shape", bad("needs_input.prototxt"), ("does not tell the shape of 1 data blob", "--input data=")),
    Case("solver naming missing nets", bad("solver_missing_nets.prototxt"), ("train_net 'no_such_train.prototxt' not found",), optimize=False),
    Case(
        "solver naming a net too long for a file name",
        write_bytes("long.prototxt", b'train_net: "' + b"x" * 5000 + b'.prototxt"\nbase_lr: 0.01\n'),
        ("train_net 'xxxxxxxxxx", "not found"),
        optimize=False,
    ),
    Case("solver naming itself as its net", bad("solver_names_itself.prototxt"), ("is a solver", "expects a net definition"), optimize=False),
    Case("empty file", write_bytes("empty.prototxt", b""), ("defines no layers", "empty or cut short")),
    Case("a folder as NET", a_folder, ("is a directory",)),
    Case("a missing NET", lambda folder: folder / "absent.prototxt", ("file not found",)),
    Case("symlink loop", symlink_loop, ("is a symbolic link loop", "point it at the real file")),
    Case("binary garbage", write_bytes("garbage.bin", random.Random(7).randbytes(4096)), ("binary file is not a Caffe NetParameter",)),
    Case("caffemodel cut in the middle", truncated_caffemodel, ("binary file is not a Caffe NetParameter",)),
    Case(
        "caffemodel with a blob too few",
        caffemodel_missing_a_bias,
        ("stores 1 parameter blob(s) for this layer, but a Convolution layer with these parameters has 2",),
        layer="conv1",
    ),
    Case("UTF-16 text", write_bytes("utf16.prototxt", 'name: "net"\n'.encode("utf-16")), ("is UTF-16 text", "save it as UTF-8")),
    Case("non-UTF-8 (Latin-1) text", write_bytes("latin1.prototxt", LATIN1_NET), ("unknown layer type 'Frobnicate'",), 3, "région"),
    Case(
        "a newline in a layer name",  # escaped in the message, which stays one line
        write_bytes("newline.prototxt", b'layer { name: "two\\nlines" type: "Frob" top: "out" }\n'),
        ("unknown layer type 'Frob'",),
        1,
        "two\\nlines",
    ),
    Case("deeply nested braces", write_bytes("nested.prototxt", b"layer { " * 100_000 + b"}" * 100_000), ("messages nested 65 deep", "64 at most"), 1),
    Case("100 MB comment", write_chunks("comment.prototxt", huge_comment), ("larger than any net definition",)),
    Case("2 million garbage layers", write_chunks("layers.prototxt", garbage_layers), ("larger than any net definition",)),
    Case("100 MB run of one token", write_chunks("token.prototxt", one_token), ("larger than any net definition",)),
    Case(
        "--layers file with bad syntax",
        bad("uses_custom_layer.prototxt"),
        ("not valid TOML", "at the end of a table declaration"),
        1,
        args=("--layers", bad("bad_syntax.layers.toml")),
        blamed=2,
    ),
    Case(
        "--layers file that is binary",
        bad("uses_custom_layer.prototxt"),
        ("not valid TOML", "not UTF-8"),
        args=("--layers", write_bytes("garbage.toml", b"\xff\xfe\xfa not text \x80")),
        blamed=2,
    ),
    Case("--input with a letter", str(LENET), ("--input 'data=1,x'", "whole numbers"), args=("--input", "data=1,x"), blamed=None),
    Case("--input negative", str(LENET), ("--input 'data=-1'", "whole numbers"), args=("--input", "data=-1"), blamed=None),
    Case("--input beyond int", str(LENET), ("--input 'data=2147483648'", "from 0 to 2147483647"), args=("--input", "data=2147483648"), blamed=None),
    Case("--input of a computed blob", str(LENET), ("--input conv1", "computed by a layer"), args=("--input", "conv1=1,2")),
    Case(
        "V0 int copied into an unsigned field",  # Caffe's upgrade: int32 -5 becomes uint32 4294967291
        write_bytes("v0.prototxt", b'layers { layer { name: "images" type: "images" source: "list.txt" batchsize: 2 new_height: -5 new_width: -5 } top: "data" top: "label" }\n'),
        ("4294967291 does not fit Caffe's 32-bit int",),
        1,
        "images",
    ),
    Case("--level beyond int32", str(LENET), ("Invalid value for '--level'", "--help"), args=("--level", "99999999999"), blamed=None),
    Case("--phase misspelled", str(LENET), ("Invalid value for '--phase': 'TRIAN'",), args=("--phase", "TRIAN"), blamed=None),
]


def run_case(command: str, case: Case, folder: Path, *more: str) -> str:
    """Run one command on a case; its one error line, checked for the case's words and place."""
    net = made(case.net, folder)
    args = [made(argument, folder) for argument in case.args]
    result = run_cli(command, net, *args, *more)
    line = the_one_error_line(result)
    for words in case.words:
        assert words in line, line
    if case.blamed is not None:
        assert ([net] + args)[case.blamed] in line, line
    if case.line is not None:
        assert f":{case.line}:" in line, line
    if case.layer is not None:
        assert f"layer '{case.layer}'" in line, line
    return line


@pytest.fixture
def folder(tmp_path: Path) -> Iterator[Path]:
    """tmp_path, emptied afterwards: pytest keeps old temp folders, and 100 MB inputs must not pile up."""
    yield tmp_path
    shutil.rmtree(tmp_path, ignore_errors=True)


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_analyze_refuses_in_one_line(case: Case, folder: Path):
    run_case("analyze", case, folder)


@pytest.mark.parametrize("case", [c for c in CASES if c.optimize], ids=[c.id for c in CASES if c.optimize])
def test_optimize_refuses_in_one_line_and_writes_nothing(case: Case, folder: Path):
    out = folder / "out"
    out.mkdir()
    run_case("optimize", case, folder, "-o", str(out / "planned.prototxt"), "--plan-json", str(out / "plan.json"))
    assert list(out.iterdir()) == []


# ------------------------------------------------------------------------------ verify: garbage plans

PLANS = {
    "wrong field types": lambda folder: BAD / "garbage_plan.json",
    "random bytes": write_bytes("random.json", random.Random(11).randbytes(512)),
    "a JSON list": write_bytes("list.json", b"[1, 2, 3]"),
    "nested 100000 deep": write_bytes("deep.json", b"[" * 100_000 + b"]" * 100_000),
    "phases not a list": write_bytes("phases.json", b'{"phases": 5}'),
    "a phase named 3": write_bytes("phase3.json", b'{"phases": [{"phase": 3}]}'),
    "an unknown storage kind": write_bytes("kind.json", b'{"slots": [{"id": 0, "bytes": 64}], "assign": [{"blob": "data", "kind": "weights", "slot": 0}]}'),
    "an infinite slot": write_bytes("inf.json", b'{"slots": [{"id": 0, "bytes": 1e400}], "assign": []}'),
    "a string number": write_bytes("string.json", b'{"slots": [{"id": "0", "bytes": 64}], "assign": []}'),
    "two slots with one id": write_bytes("twice.json", b'{"slots": [{"id": 0, "bytes": 64}, {"id": 0, "bytes": 128}], "assign": []}'),
    "an offset past its slot": write_bytes("past.json", b'{"slots": [{"id": 0, "bytes": 64}], "assign": [{"blob": "conv1", "kind": "data", "slot": 0, "offset": 64}]}'),
    "a missing file": lambda folder: folder / "absent.json",
}
PLAN_WORDS = {
    "wrong field types": 'not a caffemem plan: slot 0: bytes must be a whole number of at least 1, not "lots"',
    "a string number": 'not a caffemem plan: slots[].id must be a whole number of at least 0, not "0"',
    "two slots with one id": "not a caffemem plan: slot id 0 is given twice",
    "an offset past its slot": "not a caffemem plan: 'conv1' (data) starts at offset 64, past the end of slot 0 (64 bytes)",
    "random bytes": "cannot read the plan as JSON",
    "a JSON list": "not a caffemem plan: the JSON is list, not an object",
    "nested 100000 deep": "cannot read the plan as JSON: it nests too deeply",
    "phases not a list": "'phases' must be a list of objects with 'phase' TRAIN or TEST",
    "a phase named 3": "'phases' must be a list of objects with 'phase' TRAIN or TEST",
    "an unknown storage kind": "blob 'data' has kind 'weights', not 'data' or 'diff'",
    "an infinite slot": "not a caffemem plan: slot 0: bytes must be a whole number of at least 1, not Infinity",
    "a missing file": "plan file not found",
}


@pytest.mark.parametrize("name", PLANS)
def test_verify_refuses_a_garbage_plan_in_one_line(name: str, folder: Path):
    plan = str(PLANS[name](folder))
    result = run_cli("verify", LENET, plan)
    line = the_one_error_line(result)
    assert line.startswith(f"caffemem: error: {plan}: ") and PLAN_WORDS[name] in line, line


# ------------------------------------------------------------------------------ optimize: outputs are all or nothing


@pytest.mark.parametrize("where", ["a missing folder", "an existing folder"])
def test_optimize_that_cannot_write_leaves_no_temporary_file(where: str, folder: Path):
    target = folder / "missing" / "out.prototxt" if where == "a missing folder" else folder / "taken"
    if where == "an existing folder":
        target.mkdir()
    result = run_cli("optimize", LENET, "-o", target)
    line = the_one_error_line(result)
    said = "cannot write: " if where == "a missing folder" else "-o names a folder; give a file name"
    assert line.startswith(f"caffemem: error: {target}: {said}"), line
    assert sorted(p.name for p in folder.rglob("*")) == ([] if where == "a missing folder" else ["taken"])


def test_optimize_with_an_unknown_exclude_blob_writes_nothing(folder: Path):
    out = folder / "out.prototxt"
    result = run_cli("optimize", LENET, "--exclude-blob", "nosuch", "-o", out)
    assert the_one_error_line(result) == f"caffemem: error: {LENET}: --exclude-blob nosuch: no blob of that name in the net"
    assert list(folder.iterdir()) == []


# ------------------------------------------------------------------------------ odd but valid: analysed, not refused

LATIN1_VALID = LATIN1_NET.replace(b'type: "Frobnicate"', b'type: "ReLU"')


def test_a_latin1_net_is_analysed_with_its_names_as_written(folder: Path):
    result = run_cli("analyze", write_bytes("latin1.prototxt", LATIN1_VALID)(folder), "--json")
    assert result.exit_code == 0, result.output
    assert '"name": "r\\u00e9gion"' in result.stdout


def test_optimize_rewrites_a_latin1_net_keeping_its_bytes(folder: Path):
    net = write_bytes("latin1.prototxt", LATIN1_VALID)(folder)
    out = folder / "planned.prototxt"
    result = run_cli("optimize", net, "-o", out)
    assert result.exit_code == 0, result.output
    assert out.read_bytes().startswith(LATIN1_VALID)  # the original, byte for byte, then mem_param


def test_a_zero_sized_input_is_valid_caffe_and_is_analysed(folder: Path):
    """Blob::Reshape accepts a 0 dim (CHECK_GE(shape[i], 0)): such a blob holds no data,
    only its shape (one int per axis, Caffe's shape_data_)."""
    net = write_bytes("zero.prototxt", b'layer { name: "data" type: "Input" top: "data" input_param { shape { dim: 0 dim: 3 } } }\n')(folder)
    result = run_cli("analyze", net, "--json")
    assert result.exit_code == 0, result.output
    assert '"total_bytes": 8' in result.stdout


def test_lenient_skips_thousands_of_unknown_fields_in_one_pass(folder: Path):
    """A fork's field in every layer: one parse and one warning each, not a parse per field."""
    layers = "".join(f'layer {{ name: "relu{i}" type: "ReLU" bottom: "data" top: "data" fork_knob: {i} }}\n' for i in range(3000))
    net = write_bytes("fork.prototxt", (f'layer {{ name: "data" type: "Input" top: "data" input_param {{ shape {{ dim: 1 }} }} }}\n{layers}').encode())(folder)
    result = run_cli("analyze", net, "--lenient", "--json")
    assert result.exit_code == 0, result.output
    assert result.stdout.count("skipped unknown field 'fork_knob' in LayerParameter") == 3000


def test_a_prior_box_aspect_ratio_of_zero_counts_as_in_caffe(shape_of):
    """PriorBox pushes 1./ar: for ar = 0 C++ gives inf, so the ratios are 1, 0 and inf (flip
    is on by default), three priors per location and min_size, not an exception."""
    result = shape_of('type: "PriorBox" bottom: "x" bottom: "img" top: "p" prior_box_param { min_size: 8 aspect_ratio: 0 }', (1, 8, 4, 4), (1, 3, 32, 32))
    assert result.tops == ((1, 2, 4 * 4 * 3 * 4),)

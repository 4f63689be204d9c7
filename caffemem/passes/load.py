"""Pass 1, load: read a net or solver file (text or binary) into protobuf messages.

Entry point: :func:`load`.  It reads exactly what Caffe's ReadProtoFromTextFile /
ReadProtoFromBinaryFile read, keeps the line of every layer for later messages, and for a
solver reads the train and test nets it names, resolving relative paths as Caffe does.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from google.protobuf import text_format
from google.protobuf.message import DecodeError

from ..errors import CaffememError, Location
from ..graph import Shape
from ..schema import caffe_pb2
from ..textmap import Token, blank_out, field_extent, token_at, tokenize, top_level_blocks

MAX_TEXT_BYTES = 64 * 1024 * 1024
MAX_BINARY_BYTES = 2 * 1024 * 1024 * 1024 - 1  # protobuf's own message limit
LAYER_FIELDS = ("layer", "layers")


@dataclass(frozen=True)
class NetSource:
    """One net definition as read, with the lines its layers start on."""

    proto: caffe_pb2.NetParameter
    file: str
    layer_lines: dict[str, tuple[int, ...]] = field(default_factory=dict)  # name -> lines, in file order
    stored_params: dict[str, tuple[Shape, ...]] = field(default_factory=dict)  # from a .caffemodel
    binary: bool = False
    notes: tuple[str, ...] = ()

    def line_of(self, name: str, occurrence: int = 0) -> int | None:
        lines = self.layer_lines.get(name, ())
        return lines[min(occurrence, len(lines) - 1)] if lines else None


@dataclass(frozen=True)
class TestNet:
    """A solver's test net: its definition and the NetState Caffe builds it with."""

    net: NetSource
    state: caffe_pb2.NetState


@dataclass(frozen=True)
class SolverSource:
    """A solver file with the nets it names, read as Caffe's Solver would."""

    proto: caffe_pb2.SolverParameter
    file: str
    train: NetSource
    train_state: caffe_pb2.NetState
    tests: tuple[TestNet, ...]
    notes: tuple[str, ...] = ()


Source = NetSource | SolverSource


def load(path: str | os.PathLike, *, lenient: bool = False, cwd: str | os.PathLike | None = None) -> Source:
    """Read a net (text or binary) or a solver file; raises CaffememError on any problem."""
    file = str(path)
    data = _read_bytes(file)
    text = _as_text(data)
    if text is None:
        return _load_binary(data, file)
    del data
    tokens = tokenize(text)
    blocks = top_level_blocks(text, tokens)
    if _looks_like_solver(blocks):
        solver, notes = _parse_text(text, tokens, caffe_pb2.SolverParameter(), file, lenient)
        return _load_solver(solver, file, text, notes, lenient, Path(cwd) if cwd else Path.cwd())
    net, notes = _parse_text(text, tokens, caffe_pb2.NetParameter(), file, lenient)
    layer_blocks = [b for b in blocks if b.field in LAYER_FIELDS] if not notes else _net_layer_blocks(text)
    return NetSource(net, file, _layer_lines(text, layer_blocks), notes=tuple(notes))


def _read_bytes(file: str) -> bytes:
    where = Location(file=file)
    try:
        size = os.stat(file).st_size
        if os.path.isdir(file):
            raise CaffememError("is a directory, not a net or solver file", where)
        if size > MAX_BINARY_BYTES:
            raise CaffememError(f"file is {size} bytes, larger than any Caffe net can be", where)
        with open(file, "rb") as handle:
            return handle.read()
    except FileNotFoundError:
        raise CaffememError("file not found", where) from None
    except PermissionError:
        raise CaffememError("permission denied", where) from None
    except OSError as error:
        raise CaffememError(f"cannot read: {error.strerror or error}", where) from None


def _as_text(data: bytes) -> str | None:
    """The file as text, or None when it is binary (a .caffemodel or garbage)."""
    if b"\x00" in data[:65536]:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        try:
            text = data.decode("latin-1")
        except UnicodeDecodeError:  # pragma: no cover - latin-1 decodes everything
            return None
        printable = sum(ch.isprintable() or ch.isspace() for ch in text[:65536])
        return text if printable > 0.95 * min(len(text), 65536) else None


def _looks_like_solver(blocks) -> bool:
    net_fields = set(caffe_pb2.NetParameter.DESCRIPTOR.fields_by_name)
    solver_only = set(caffe_pb2.SolverParameter.DESCRIPTOR.fields_by_name) - net_fields
    return any(block.field in solver_only for block in blocks)


_UNKNOWN_FIELD = re.compile(r'Message type "caffe\.(\w+)" has no field named "([^"]+)"')
_UNKNOWN_ENUM = re.compile(r'Enum type "caffe\.([\w.]+)" has no value named (\S+?)( for field (\S+))?\.?$')


def _parse_text(text: str, tokens: list[Token], message, file: str, lenient: bool):
    """text_format.Parse with located errors; --lenient blanks unknown fields out one by one."""
    notes: list[str] = []
    if len(text) > MAX_TEXT_BYTES:
        raise CaffememError(f"text file of {len(text)} bytes is larger than any net definition ({MAX_TEXT_BYTES} max)", Location(file=file))
    while True:
        try:
            return text_format.Parse(text, message, allow_unknown_extension=False), notes
        except text_format.ParseError as error:
            line, column = error.GetLine(), error.GetColumn()
            detail = _explain_parse_error(str(error))
            layer = _layer_at(top_level_blocks(text, tokens), text, line)
            unknown = _UNKNOWN_FIELD.search(str(error))
            if lenient and unknown and line is not None:
                index = token_at(tokens, line, column)
                index = _field_name_index(tokens, index, unknown.group(2))
                if index is not None:
                    end = field_extent(tokens, index)
                    stop = tokens[end - 1].offset + len(tokens[end - 1].text)
                    text = blank_out(text, tokens[index].offset, stop)
                    tokens = tokenize(text)
                    place = f"{file}:{line}:{tokens[index].column if index < len(tokens) else column}"
                    notes.append(f"warning: {place}: skipped unknown field '{unknown.group(2)}' in {unknown.group(1)}" + (f" (layer '{layer}')" if layer else ""))
                    message.Clear()
                    continue
            hint = " (use --lenient to skip unknown fields)" if unknown else ""
            raise CaffememError(detail + hint, Location(file=file, line=line, column=column, layer=layer)) from None
        except RecursionError:
            raise CaffememError("nesting too deep to be a Caffe definition", Location(file=file)) from None


def _field_name_index(tokens: list[Token], index: int | None, name: str) -> int | None:
    """protobuf points at or after the unknown name: step back to the name token."""
    if index is None:
        return None
    for i in range(min(index, len(tokens) - 1), max(index - 3, -1), -1):
        if tokens[i].text == name:
            return i
    return None


def _explain_parse_error(raw: str) -> str:
    """protobuf's wording, made shorter and in caffemem's terms."""
    body = re.sub(r"^\d+:\d+ : ", "", raw)
    if match := _UNKNOWN_FIELD.search(body):
        return f"unknown field '{match.group(2)}' in {match.group(1)}"
    if match := _UNKNOWN_ENUM.search(body):
        return f"unknown value {match.group(2)} for enum {match.group(1)}"
    return body.rstrip(".")


def _net_layer_blocks(text: str):
    return [b for b in top_level_blocks(text) if b.field in LAYER_FIELDS]


def _layer_lines(text: str, blocks, line_offset: int = 0) -> dict[str, tuple[int, ...]]:
    lines: dict[str, list[int]] = {}
    for block in blocks:
        if block.name is not None:
            lines.setdefault(block.name, []).append(block.line + line_offset)
    return {name: tuple(found) for name, found in lines.items()}


def _layer_at(blocks, text: str, line: int | None) -> str | None:
    """Name of the top-level layer block that holds a line (for error messages)."""
    if line is None:
        return None
    holder = None
    for block in blocks:
        if block.field in LAYER_FIELDS and block.line <= line:
            end_line = text.count("\n", 0, block.end) + 1
            if line <= end_line:
                holder = block.name
    return holder


def _load_binary(data: bytes, file: str) -> NetSource:
    """A binary NetParameter (.caffemodel): keep parameter shapes, drop the weights."""
    net = caffe_pb2.NetParameter()
    try:
        net.ParseFromString(data)
    except (DecodeError, RuntimeError, ValueError) as error:
        raise CaffememError(f"binary file is not a Caffe NetParameter ({error})", Location(file=file)) from None
    if not (len(net.layer) or len(net.layers)):
        raise CaffememError("binary file has no layers: not a Caffe net or .caffemodel", Location(file=file))
    stored: dict[str, tuple[Shape, ...]] = {}
    for layer in list(net.layer) + list(net.layers):
        shapes = tuple(_blob_shape(blob) for blob in layer.blobs)
        if shapes:
            stored[layer.name] = shapes
        del layer.blobs[:]  # the weights are not needed: shapes are kept above
    return NetSource(net, file, {}, stored, binary=True, notes=(f"read binary NetParameter with {len(stored)} layers' stored parameters",))


def _blob_shape(blob) -> Shape:
    if blob.HasField("shape"):
        return tuple(int(d) for d in blob.shape.dim)
    return (blob.num, blob.channels, blob.height, blob.width)  # legacy 4-d blob


# ----------------------------------------------------------------------------- solvers


def _load_solver(solver, file: str, text: str, notes: list[str], lenient: bool, cwd: Path) -> SolverSource:
    """Read the train net and test nets as Solver::InitTrainNet / InitTestNets do."""
    where = Location(file=file)
    sources = [name for name in ("train_net_param", "train_net", "net_param", "net") if solver.HasField(name)]
    if len(sources) != 1:
        raise CaffememError(
            "a solver needs exactly one of train_net_param, train_net, net_param, net" + (f" (found {', '.join(sources)})" if sources else ""),
            where,
        )
    blocks = top_level_blocks(text)
    train = _solver_net(solver, sources[0], None, file, text, blocks, lenient, cwd, notes)
    train_state = caffe_pb2.NetState(phase=caffe_pb2.TRAIN)
    train_state.MergeFrom(train.proto.state)
    train_state.MergeFrom(solver.train_state)

    generic = solver.HasField("net") or solver.HasField("net_param")
    num_params, num_files = len(solver.test_net_param), len(solver.test_net)
    num_specified = num_params + num_files
    num_generic = 0
    if generic:
        if len(solver.test_iter) < num_specified:
            raise CaffememError("test_iter must be specified for each test network", where)
        num_generic = len(solver.test_iter) - num_specified
    elif len(solver.test_iter) != num_specified:
        raise CaffememError(f"test_iter is given {len(solver.test_iter)} times for {num_specified} test nets", where)
    num_tests = num_specified + num_generic
    if len(solver.test_state) and len(solver.test_state) != num_tests:
        raise CaffememError(f"test_state must be unspecified or given once per test net ({num_tests})", where)

    nets: list[NetSource] = []
    nets += [_solver_net(solver, "test_net_param", i, file, text, blocks, lenient, cwd, notes) for i in range(num_params)]
    nets += [_solver_net(solver, "test_net", i, file, text, blocks, lenient, cwd, notes) for i in range(num_files)]
    if num_generic:
        generic_net = train if sources[0] in ("net", "net_param") else None
        nets += [generic_net] * num_generic  # type: ignore[list-item]
    tests = []
    for i, net in enumerate(nets):
        state = caffe_pb2.NetState(phase=caffe_pb2.TEST)
        state.MergeFrom(net.proto.state)
        if len(solver.test_state):
            state.MergeFrom(solver.test_state[i])
        tests.append(TestNet(net, state))
    return SolverSource(solver, file, train, train_state, tuple(tests), tuple(notes))


def _solver_net(solver, field_name, index, file, text, blocks, lenient, cwd, notes) -> NetSource:
    value = getattr(solver, field_name)
    if index is not None:
        value = value[index]
    if field_name.endswith("_param"):
        block = [b for b in blocks if b.field == field_name][index or 0]
        inner = text[block.start : block.end]
        first_brace = inner.find("{")
        body = inner[first_brace + 1 : inner.rfind("}")] if first_brace >= 0 else ""
        offset = text.count("\n", 0, block.start + first_brace + 1)
        lines = _layer_lines(body, _net_layer_blocks(body), offset)
        return NetSource(value, file, lines, notes=(f"{field_name} is given inline in the solver",))
    path, note = resolve_net_path(value, file, cwd, field_name)
    notes.append(note)
    loaded = load(path, lenient=lenient, cwd=cwd)
    if isinstance(loaded, SolverSource):
        raise CaffememError(f"{field_name} names a solver file, not a net: {path}", Location(file=file))
    return loaded


def resolve_net_path(value: str, solver_file: str, cwd: Path, field_name: str) -> tuple[str, str]:
    """Caffe opens the path relative to the working directory; failing that we try the
    solver's folder, then a file of that base name beside the solver, and say which."""
    raw = Path(value)
    solver_dir = Path(solver_file).resolve().parent
    candidates = [
        (raw if raw.is_absolute() else cwd / raw, "as Caffe does (relative to the working directory)"),
        (solver_dir / raw, "relative to the solver's folder"),
        (solver_dir / raw.name, "by its base name in the solver's folder (Caffe itself would not find it)"),
    ]
    for candidate, how in candidates:
        if candidate.is_file():
            return str(candidate), f"{field_name} '{value}' resolved {how}: {candidate}"
    tried = ", ".join(str(c) for c, _ in candidates)
    raise CaffememError(f"{field_name} '{value}' not found (tried {tried})", Location(file=solver_file))

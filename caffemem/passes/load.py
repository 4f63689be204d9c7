"""Pass 1, load: read a net or solver file (text or binary) into protobuf messages.

Entry point: :func:`load`.  It reads exactly what Caffe's ReadProtoFromTextFile /
ReadProtoFromBinaryFile read, keeps the line of every layer for later messages, and for a
solver reads the train and test nets it names, resolving relative paths as Caffe does.
"""

from __future__ import annotations

import bisect
import codecs
import contextlib
import difflib
import collections
import itertools
import os
import re
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from google.protobuf import text_format
from google.protobuf.message import DecodeError

from caffemem.errors import CaffememError, Location, excerpt
from caffemem.graph import Shape
from caffemem.prototxt.parse import parse_net
from caffemem.prototxt.read import MAX_TEXT_BYTES, read_input, text_with_nul
from caffemem.prototxt.textmap import LAYER_FIELDS, Token, check_nesting, iter_tokens, iter_top_level_blocks, layer_blocks, tokenize, top_level_blocks, unknown_fields
from caffemem.schema import caffe_pb2, is_repeated
from caffemem.schema.caffe_root import ForkSchema
from caffemem.schema.forks import fork_defining

# The most layers a net may have: real ones have at most a few thousand, the scale tests
# 20,000.  The pipeline takes about 12 KiB a layer (benchmarks/memory.py), so this bounds a
# run near 0.6 GiB and a minute; 200,000 took 2.3 GB and minutes (issue 31).
MAX_LAYERS = 50_000
_LAYER_OPENING = re.compile(r"\blayers?\s*:?\s*[{<]")
MAX_NAME_CHARS = 4096  # a layer, blob or parameter name (real ones: under 200)


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


@dataclass(frozen=True)
class NetText:
    """A net or solver given as prototxt text instead of a file (the library API: a
    notebook's string, or pycaffe's NetParameter printed); ``name`` stands for the file
    in messages.  A solver's relative net paths are taken from the working directory."""

    text: str
    name: str = "<text>"

    def __str__(self) -> str:
        return self.name


def load(
    path: str | os.PathLike | NetText,
    *,
    lenient: bool = False,
    cwd: str | os.PathLike | None = None,
    expect_net: bool = False,
    max_text_bytes: int = MAX_TEXT_BYTES,
    schema: ForkSchema | None = None,
) -> Source:
    """Read a net (text or binary) or a solver file; raises CaffememError on any problem.

    ``expect_net``: the file is a solver's net, so a solver here is an error (not a loop).
    ``schema``: a fork's caffe.proto merged with caffemem's (--caffe-root): a text file is
    read with it, and handed on as caffemem's message with the fork's fields unknown to it
    (schema/caffe_root.py)."""
    file = str(path)
    data = path.text.encode("utf-8", "surrogateescape") if isinstance(path, NetText) else read_input(file, max_text_bytes)
    text = _as_text(data, file)
    if text is None:
        layers = _binary_layer_count(data, MAX_LAYERS + 1)
        if layers > MAX_LAYERS:  # before the parse, as for text: protobuf's message alone takes ~750 bytes a layer
            raise CaffememError(f"more than {MAX_LAYERS:,} layers; caffemem plans nets of up to {MAX_LAYERS:,} layers (real ones have at most a few thousand)", Location(file=file))
        return _check_names(_load_binary(data, file))
    del data
    check_nesting(text, file)
    layers = len(_LAYER_OPENING.findall(text))
    if layers > MAX_LAYERS:  # before the parse: its memory grows with every layer
        raise CaffememError(f"{layers} layer blocks; caffemem plans nets of up to {MAX_LAYERS:,} layers (real ones have at most a few thousand)", Location(file=file))
    # A plain net file, read at once (prototxt/parse.py) with caffemem's schema: not where
    # a fork's caffe.proto types a field otherwise (issue 31: `num_output: 2` under a fork
    # that makes it a float went through unrefused); a fork's own fields leave it anyway.
    fast = None if lenient or (schema is not None and schema.conflicts) else parse_net(text)
    if fast is not None:
        return _check_names(NetSource(fast[0], file, _with_input_line(text, fast[1])))
    message, notes, tokens = _parse_net_or_solver(text, file, lenient, schema)
    merged = message
    if schema is not None:
        for conflict in schema.used_conflicts(message):
            raise CaffememError(f"sets {conflict.message}.{conflict.field}, which the fork's caffe.proto declares otherwise than caffemem's ({conflict.describe()})", Location(file=file))
        notes += [f"note: {conflict.describe()}" for conflict in schema.used_differences(message)]
        message = schema.to_caffemem(message)
    if isinstance(message, caffe_pb2.SolverParameter):
        if expect_net:
            raise CaffememError("is a solver, named where a solver expects a net definition", Location(file=file))
        return _load_solver(message, file, text, notes, lenient, Path(cwd) if cwd else Path.cwd(), max_text_bytes, schema)
    source = NetSource(message, file, _with_input_line(text, _layer_lines(text, layer_blocks(text, tokens))), notes=tuple(notes))
    if schema is not None:
        _check_fork_v1_types(merged, source, schema)
    return _check_names(source)


def _check_fork_v1_types(merged, source: NetSource, schema: ForkSchema) -> None:
    """A V1 layer (``layers { type: MY_TYPE }``) whose type is a value the fork adds to
    V1LayerParameter.LayerType: the class it builds is in the fork's upgrade_proto.cpp
    (UpgradeV1LayerType), not in its schema; read as caffemem's message, the type would
    be unset.  Refused, saying how to write it."""
    added = {c.field: c for c in schema.fork_values if c.message == "V1LayerParameter.LayerType"}
    for layer in merged.layers if added else ():
        name = layer.DESCRIPTOR.fields_by_name["type"].enum_type.values_by_number[layer.type].name if layer.HasField("type") else None
        if name in added:
            where = Location(file=source.file, line=source.line_of(layer.name), layer=layer.name or None)
            raise CaffememError(
                f"V1 layer type {name} is the fork's ({added[name].file}:{added[name].line}): which layer class it makes is in the fork's upgrade_proto.cpp, "
                'not its schema; write the layer in the current format (layer { type: "..." }, the string the fork registers)',
                where,
            )


_INPUT_FIELD = re.compile(r"^[ \t]*input[ \t]*:", re.MULTILINE)


def _with_input_line(text: str, lines: dict[str, tuple[int, ...]]) -> dict[str, tuple[int, ...]]:
    """The line of the first top-level ``input:`` as that of the Input layer named "input"
    that UpgradeNetInput makes of it (a message about the input points there)."""
    found = _INPUT_FIELD.search(text) if "input" not in lines else None
    return {**lines, "input": (text.count("\n", 0, found.start()) + 1,)} if found else lines


_LAYER_PATH = re.compile(r"layers?\[(\d+)\]\.")


def _check_required(source: NetSource) -> None:
    """Caffe's parser refuses a message whose `required` fields are missing (a fork layer's
    ``spatial_scale``, ``roi_per_img``...); protobuf's Python text parser does not, and
    some runtimes fail later, on a copy.  Refused here, at the layer, as Caffe would."""
    if source.proto.IsInitialized():
        return
    missing = source.proto.FindInitializationErrors()[0]
    where = Location(file=source.file)
    match = _LAYER_PATH.match(missing)
    if match:
        layers = source.proto.layer if missing.startswith("layer[") else source.proto.layers
        layer = layers[int(match.group(1))]
        where = Location(file=source.file, line=source.line_of(layer.name), layer=layer.name, layer_type=layer.type if isinstance(layer.type, str) else None)
        missing = missing[match.end() :]
    raise CaffememError(f"required field {missing} is missing (Caffe refuses the file without it)", where)


def _check_names(source: NetSource) -> NetSource:
    """Layer, blob and parameter names of a sane length: Caffe sets no limit, but a name of
    megabytes is no net definition, and every message and table would carry it.  (Also
    the required fields, see _check_required.)"""
    _check_required(source)
    for layer in itertools.chain(source.proto.layer, source.proto.layers):
        names = [("name", layer.name), ("type", layer.type if isinstance(layer.type, str) else "")]
        names += [("bottom", n) for n in layer.bottom] + [("top", n) for n in layer.top] + [("param name", p.name) for p in layer.param if hasattr(p, "name")]
        for what, name in names:
            if len(name) > MAX_NAME_CHARS:
                where = Location(file=source.file, line=source.line_of(layer.name), layer=layer.name)
                raise CaffememError(f"a {what} of {len(name)} characters; caffemem takes names of at most {MAX_NAME_CHARS}", where)
    for index, layer in enumerate(source.proto.layer):
        # Caffe's LayerRegistry refuses it ("Unknown layer type: "); one that a phase or stage
        # rule may filter away is left to the filter.  Here, before the net is copied by the
        # passes: 200,000 empty layers took 490 MB to be refused at the registry.
        if not layer.type and not len(layer.include) and not len(layer.exclude):
            where = Location(file=source.file, line=source.line_of(layer.name), layer=layer.name or None)
            raise CaffememError(f'layer {index + 1} has no type (Caffe refuses it: "Unknown layer type: ")', where)
    return source


def _as_text(data: bytes, file: str) -> str | None:
    """The file as text, or None when it is binary (a .caffemodel or garbage)."""
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        raise CaffememError("is UTF-16 text; Caffe reads a prototxt as ASCII or UTF-8: save it as UTF-8", Location(file=file))
    if b"\x00" in data[:65536]:
        if text_with_nul(data[:65536]):
            line = data.count(b"\n", 0, data.index(b"\x00")) + 1
            raise CaffememError("a NUL byte in the text (Caffe would stop reading there): remove it", Location(file=file, line=line))
        return None
    try:
        text = data.decode("utf-8")
        # A UTF-8 byte order mark (editors on Windows write one) is no token: read it as a
        # blank, which keeps every offset and line number; the rewrite keeps the mark itself.
        return " " + text[1:] if text.startswith("\ufeff") else text
    except UnicodeDecodeError:
        try:
            text = data.decode("latin-1")
        except UnicodeDecodeError:  # pragma: no cover - latin-1 decodes everything
            return None
        printable = sum(ch.isprintable() or ch.isspace() for ch in text[:65536])
        return text if printable > 0.95 * min(len(text), 65536) else None


_SOLVER_ONLY_FIELDS = frozenset(caffe_pb2.SolverParameter.DESCRIPTOR.fields_by_name) - frozenset(caffe_pb2.NetParameter.DESCRIPTOR.fields_by_name)


_UNKNOWN_FIELD = re.compile(r'Message type "caffe\.(\w+)" has no field named "([^"]+)"')
_UNKNOWN_ENUM = re.compile(r'Enum type "caffe\.([\w.]+)" has no value named (\S+?)( for field (\S+))?\.?$')


def _parse_net_or_solver(text: str, file: str, lenient: bool, schema: ForkSchema | None = None):
    """(NetParameter or SolverParameter, notes, tokens or None).

    A solver names a solver-only field at the top level.  protobuf tells cheaply: parsing
    as a net stops at the first field a net does not have, so garbage fails at its first
    token without the whole file being scanned.  Only when that field is unknown to both
    messages (a typo) does one regular-expression scan look for the solver's fields.
    ``schema``: the messages are the merged schema's (load gives them on as caffemem's)."""
    net_class, solver_class = (schema.message_class("caffe.NetParameter"), schema.message_class("caffe.SolverParameter")) if schema else (caffe_pb2.NetParameter, caffe_pb2.SolverParameter)
    net = net_class()
    try:
        return _parse_once(text, net, file), [], None
    except text_format.ParseError as error:
        net_error = error
    unknown = _UNKNOWN_FIELD.search(_head(net_error))
    if unknown and unknown.group(1) == "NetParameter":
        if unknown.group(2) in _SOLVER_ONLY_FIELDS or _SOLVER_FIELD_ANYWHERE.search(text):
            return _parse_text(text, solver_class(), file, lenient, schema)
    if not lenient:
        raise _located(net_error, text, file, schema)  # parsing again would stop at the same place
    return _parse_text(text, net_class(), file, lenient, schema)


def _head(error: text_format.ParseError) -> str:
    """The start of protobuf's message, enough to read which field it is about: the
    message quotes the offending token, which in a hostile file can be megabytes."""
    return str(error)[:1000]


def _field_names_under(descriptor, seen: set[str] | None = None) -> set[str]:
    """Every field name of a message and of the messages inside it."""
    seen = set() if seen is None else seen
    if descriptor.full_name in seen:
        return set()
    seen.add(descriptor.full_name)
    names = set(descriptor.fields_by_name)
    for field in descriptor.fields:
        if field.message_type is not None:
            names |= _field_names_under(field.message_type, seen)
    return names


# Solver fields no message of a net has (base_lr, max_iter, net, ...): one of them set
# anywhere marks a solver, found by one regular-expression scan instead of a tokenization.
_SOLVER_FIELD_ANYWHERE = re.compile(r"(?:^|[\s{};,])(?:" + "|".join(sorted(_SOLVER_ONLY_FIELDS - _field_names_under(caffe_pb2.NetParameter.DESCRIPTOR))) + r")\s*[:{<]")


def _parse_once(text: str, message, file: str, lenient: bool = False):
    """text_format.Parse; a nesting deeper than Python's stack is the user's error."""
    try:
        return text_format.Parse(text, message, allow_unknown_extension=False, allow_unknown_field=lenient)
    except RecursionError:
        raise CaffememError("nesting too deep to be a Caffe definition", Location(file=file)) from None


def _parse_text(text: str, message, file: str, lenient: bool, schema: ForkSchema | None = None):
    """(message, notes, tokens or None) with located errors.  --lenient: protobuf skips the
    unknown fields in its one pass, and one walk of the tokens names each in a warning."""
    try:
        _parse_once(text, message, file, lenient)
    except text_format.ParseError as error:
        raise _located(error, text, file, schema) from None
    if not lenient:
        return message, [], None
    tokens = tokenize(text)
    skipped = unknown_fields(tokens, message.DESCRIPTOR)
    layer_at = _layer_finder(top_level_blocks(text, tokens) if skipped else [], text)
    notes = []
    for token, owner in skipped:
        layer = layer_at(token.offset)
        notes.append(f"warning: {file}:{token.line}:{token.column}: skipped {_unknown_field(owner, token.text)}" + (f" (layer '{excerpt(layer)}')" if layer else ""))
    return message, notes, tokens


def _located(error: text_format.ParseError, text: str, file: str, schema: ForkSchema | None = None) -> CaffememError:
    """protobuf's parse error as a CaffememError naming line, column, layer and field.
    The file is only tokenized up to the error, so a huge file stays cheap."""
    line, column = error.GetLine(), error.GetColumn()
    detail = _explain_parse_error(str(error), text, line, schema)
    unknown = _UNKNOWN_FIELD.search(_head(error))
    offset = _offset_of(text, line, column)
    before: collections.deque = collections.deque(maxlen=2)  # the last two tokens before the error
    last_layer = None  # the last top-level layer block before it: the one _layer_finder can name
    for block in iter_top_level_blocks(text, _kept(iter_tokens(text, offset), before)):
        if block.field in LAYER_FIELDS:
            last_layer = block
    layer = _layer_finder([last_layer] if last_layer else [], text)(offset) if line is not None else None
    if detail.startswith("Expected") and len(text) - offset < 100 and len(tokenize(text[offset:])) <= 1:
        detail = f"the file ends in the middle of a definition (is it cut short?): {detail}"
    elif not unknown and not detail.startswith("Expected") and len(before) >= 2 and before[-1].text == ":":
        detail = f"{excerpt(before[-2].text)}: {detail}"  # the field whose value is wrong
    hint = _unknown_field_hint(unknown.group(1), unknown.group(2), schema) if unknown else ""
    at_line = text[_offset_of(text, line, 1) : _offset_of(text, (line or 0) + 1, 1)] if line is not None else ""
    if _PLACEHOLDER.search(at_line):
        hint += f" — the file is a template: fill in its placeholders ({excerpt(_PLACEHOLDER.search(at_line).group(), 40)}) first, e.g. with the script that generates it or envsubst"
    return CaffememError(detail + hint, Location(file=file, line=line, column=column, layer=layer))


def _unknown_field_hint(message: str, field: str, schema: ForkSchema | None) -> str:
    """What to do about an unknown field: the field it is close to (``num_outputs``), and
    (unless the fork's schema was read already) --caffe-root for a fork's own field."""
    try:
        names = list(caffe_pb2.DESCRIPTOR.pool.FindMessageTypeByName(f"caffe.{message}").fields_by_name)
    except KeyError:
        names = []
    close = difflib.get_close_matches(field, names, n=1, cutoff=0.8)
    typo = f"did you mean '{close[0]}'? " if close else ""
    if schema is not None:
        return f" (neither caffemem's schema nor {schema.file} has it; {typo}--lenient skips unknown fields)"
    fork = "if it is your fork's field, --caffe-root DIR reads the fork's caffe.proto" if close else "a fork's field? --caffe-root DIR reads the fork's own caffe.proto"
    return f" ({typo}{fork}; --lenient skips unknown fields)"


def _kept(tokens: Iterator[Token], into: collections.deque) -> Iterator[Token]:
    """``tokens``, each also put into ``into`` as it passes."""
    for token in tokens:
        into.append(token)
        yield token


# A template's placeholder where a value should be: ${VAR}, $VAR, {{ var }}, @VAR@.
_PLACEHOLDER = re.compile(r"\$\{\w+\}|\$[A-Z_][A-Z0-9_]*\b|\{\{\s*\w+\s*\}\}|@[A-Z_][A-Z0-9_]*@")


def _offset_of(text: str, line: int | None, column: int | None) -> int:
    """Offset of a 1-based line and column (protobuf's), or 0 when they are unknown."""
    if line is None:
        return 0
    start = 0
    for _ in range(line - 1):
        start = text.find("\n", start) + 1
        if start == 0:
            return len(text)
    return min(start + max((column or 1) - 1, 0), len(text))


def _explain_parse_error(raw: str, text: str, line: int | None, schema: ForkSchema | None = None) -> str:
    """protobuf's wording, made shorter and in caffemem's terms (without the echo of the
    whole line, which in a one-line file is the whole file)."""
    body = re.sub(r"^\d+:\d+ : ", "", raw)
    if line is not None:
        start = _offset_of(text, line, 1)
        end = text.find("\n", start)
        echo = "'" + text[start : end if end >= 0 else len(text)] + "': "
        for quoted in (echo, "'': "):  # '' at the end of the file
            if body.startswith(quoted):
                body = body[len(quoted) :]
    head = body[:1000]  # a name longer than this is shown as protobuf words it, cut short
    neither = f" (neither caffemem's schema nor {schema.file} has it)" if schema else ""
    if match := _UNKNOWN_FIELD.search(head):
        return _unknown_field(match.group(1), match.group(2))  # the hint (_unknown_field_hint) follows
    if match := _UNKNOWN_ENUM.search(head):
        fork = fork_defining(match.group(1), match.group(2))
        return f"unknown value {excerpt(match.group(2))} for enum {match.group(1)}" + (f": it belongs to {fork}" if fork else "") + neither
    return excerpt(body.rstrip("."), 200)


def _unknown_field(message: str, field: str) -> str:
    """ "unknown field 'F' in M", naming the fork whose caffe.proto has F when one is known:
    the file was written for that fork, whose field caffemem cannot interpret."""
    fork = fork_defining(message, field)
    where = f": it belongs to {fork}, whose schema caffemem does not read" if fork else ""
    return f"unknown field '{excerpt(field)}' in {message}{where}"


def _net_layer_blocks(text: str):
    return layer_blocks(text)


def _layer_lines(text: str, blocks, line_offset: int = 0) -> dict[str, tuple[int, ...]]:
    lines: dict[str, list[int]] = {}
    for block in blocks:
        if block.name is not None:
            lines.setdefault(block.name, []).append(block.line + line_offset)
    return {name: tuple(found) for name, found in lines.items()}


def _layer_finder(blocks, text: str) -> Callable[[int], str | None]:
    """offset -> name of the top-level layer block holding it (for messages).  A position
    just after a block's last token (an error where the file is cut short) is still in it.
    By bisection: a warning per field of a big file stays cheap."""
    layers = [block for block in blocks if block.field in LAYER_FIELDS]
    starts = [block.start for block in layers]

    def layer_at(offset: int) -> str | None:
        i = bisect.bisect_right(starts, offset) - 1
        if i < 0 or not (offset <= layers[i].end or text[layers[i].end : offset].isspace()):
            return None
        return layers[i].name

    return layer_at


def _varint(data: bytes, i: int) -> tuple[int, int]:
    """A protobuf varint at ``i``: (value, the offset after it); past the end: (0, len + 1)."""
    value, shift = 0, 0
    while i < len(data):
        byte = data[i]
        value |= (byte & 0x7F) << shift
        i, shift = i + 1, shift + 7
        if byte < 0x80:
            return value, i
    return 0, len(data) + 1


def _binary_layer_count(data: bytes, stop: int) -> int:
    """The top-level ``layer`` (field 100) and ``layers`` (field 2) entries of a binary
    NetParameter, read from the wire format without parsing, counting up to ``stop``
    (a 250,000-layer binary was accepted past the limit, and 3 million empty layers, 9 MB,
    took past 6 GiB to parse).  Stops early on what is not the wire format: the parse
    then says what is wrong."""
    count, i = 0, 0
    while i < len(data) and count < stop:
        key, i = _varint(data, i)
        wire = key & 7
        if wire == 0:
            _, i = _varint(data, i)
        elif wire == 1:
            i += 8
        elif wire == 5:
            i += 4
        elif wire == 2:
            length, i = _varint(data, i)
            i += length
            count += (key >> 3) in (2, 100)
        else:  # groups (unused by caffe.proto) or garbage
            break
    return count


@contextlib.contextmanager
def _native_stderr_silenced() -> Iterator[None]:
    """protobuf's C++ runtime (the cpp backend of 3.20) also logs "[libprotobuf ERROR ...]
    String field ... contains invalid UTF-8" straight to file descriptor 2 when it refuses
    a message; the error is reported as caffemem's one line, so that log is let go."""
    try:
        saved = os.dup(2)
    except OSError:  # no stderr at all: nothing to silence
        yield
        return
    try:
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 2)
        os.close(null)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def _load_binary(data: bytes, file: str) -> NetSource:
    """A binary NetParameter (.caffemodel): keep parameter shapes, drop the weights."""
    net = caffe_pb2.NetParameter()
    try:
        with warnings.catch_warnings(record=True) as caught:
            # protobuf 3.20's runtime only warns where the others raise: "Unexpected
            # end-group tag: Not all data was converted".
            warnings.simplefilter("always")
            with _native_stderr_silenced():
                net.ParseFromString(data)
        for warning in caught:
            if issubclass(warning.category, RuntimeWarning):
                raise DecodeError(str(warning.message))
    except (DecodeError, RuntimeError, ValueError) as error:  # a string that is not UTF-8: UnicodeDecodeError, a ValueError
        raise CaffememError(f"binary file is not a Caffe NetParameter ({error})", Location(file=file)) from None
    bad_string = _first_non_utf8(net)
    if bad_string is not None:
        raise CaffememError(f"binary file is not a Caffe NetParameter (its {bad_string} is not UTF-8 text)", Location(file=file))
    if not (len(net.layer) or len(net.layers)):
        raise CaffememError("binary file has no layers: not a Caffe net or .caffemodel", Location(file=file))
    stored: dict[str, tuple[Shape, ...]] = {}
    for layer in itertools.chain(net.layer, net.layers):  # one wrapper at a time (a list of 200,000 took 260 MB)
        shapes = tuple(_blob_shape(blob) for blob in layer.blobs)
        if shapes:
            stored[layer.name] = shapes
        del layer.blobs[:]  # the weights are not needed: shapes are kept above
    return NetSource(net, file, {}, stored, binary=True, notes=(f"read binary NetParameter with {len(stored)} layers' stored parameters",))


def _first_non_utf8(message, prefix: str = "") -> str | None:
    """The first string field holding bytes that are not UTF-8, by its path (`name`,
    `layer.top`).  The upb runtime parses them without a word and raises only when the
    field is read, deep in a pass; protobuf's C++ (Caffe) refuses such a message."""
    for field, value in message.ListFields():
        values = value if is_repeated(field) else [value]
        if field.type == field.TYPE_MESSAGE:
            for item in values:
                found = _first_non_utf8(item, f"{prefix}{field.name}.")
                if found is not None:
                    return found
        elif field.type == field.TYPE_STRING:
            try:
                if any(isinstance(item, bytes) for item in values):
                    return prefix + field.name
            except UnicodeDecodeError:  # runtimes that decode as they hand the value out
                return prefix + field.name
    return None


def _blob_shape(blob) -> Shape:
    if blob.HasField("shape"):
        return tuple(int(d) for d in blob.shape.dim)
    return (blob.num, blob.channels, blob.height, blob.width)  # legacy 4-d blob


# ----------------------------------------------------------------------------- solvers


def _load_solver(solver, file: str, text: str, notes: list[str], lenient: bool, cwd: Path, max_text_bytes: int = MAX_TEXT_BYTES, schema: ForkSchema | None = None) -> SolverSource:
    """Read the train net and test nets as Solver::InitTrainNet / InitTestNets do."""
    where = Location(file=file)
    sources = [name for name in ("train_net_param", "train_net", "net_param", "net") if solver.HasField(name)]
    if len(sources) != 1:
        raise CaffememError(
            "a solver needs exactly one of train_net_param, train_net, net_param, net" + (f" (found {', '.join(sources)})" if sources else ""),
            where,
        )
    blocks = top_level_blocks(text)
    train = _solver_net(solver, sources[0], None, file, text, blocks, lenient, cwd, notes, max_text_bytes, schema)
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
    nets += [_solver_net(solver, "test_net_param", i, file, text, blocks, lenient, cwd, notes, max_text_bytes, schema) for i in range(num_params)]
    nets += [_solver_net(solver, "test_net", i, file, text, blocks, lenient, cwd, notes, max_text_bytes, schema) for i in range(num_files)]
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


def _solver_net(solver, field_name, index, file, text, blocks, lenient, cwd, notes, max_text_bytes, schema=None) -> NetSource:
    value = getattr(solver, field_name)
    if index is not None:
        value = value[index]
    if field_name.endswith("_param"):
        found = [b for b in blocks if b.field == field_name]
        lines: dict[str, tuple[int, ...]] = {}
        given = 1 if index is None else len(getattr(solver, field_name))  # net_param once, test_net_param repeated
        if len(found) == given:  # not so where the text lists them: `test_net_param [{...}, {...}]`
            block = found[index or 0]
            inner = text[block.start : block.end]
            first_brace = inner.find("{")
            body = inner[first_brace + 1 : inner.rfind("}")] if first_brace >= 0 else ""
            offset = text.count("\n", 0, block.start + first_brace + 1)
            lines = _layer_lines(body, _net_layer_blocks(body), offset)
        return _check_names(NetSource(value, file, lines, notes=(f"{field_name} is given inline in the solver",)))
    path, note = resolve_net_path(value, file, cwd, field_name)
    notes.append(note)
    return load(path, lenient=lenient, cwd=cwd, expect_net=True, max_text_bytes=max_text_bytes, schema=schema)  # type: ignore[return-value]


def resolve_net_path(value: str, solver_file: str, cwd: Path, field_name: str) -> tuple[str, str]:
    """Caffe opens the path relative to the working directory; failing that we try the
    solver's folder, then a file of that base name beside the solver, and say which."""
    raw = Path(value)
    solver_dir = Path(solver_file).absolute().parent
    candidates = [
        (raw if raw.is_absolute() else cwd / raw, "as Caffe does (relative to the working directory)"),
        (solver_dir / raw, "relative to the solver's folder"),
        (solver_dir / raw.name, "by its base name in the solver's folder (Caffe itself would not find it)"),
    ]
    for candidate, how in candidates:
        if _is_file(candidate):
            return str(candidate), f"{field_name} '{value}' resolved {how}: {candidate}"
    tried = ", ".join(dict.fromkeys(str(c) for c, _ in candidates))
    raise CaffememError(f"{field_name} '{excerpt(value)}' not found (tried {excerpt(tried, 600)})", Location(file=solver_file))


def _is_file(path: Path) -> bool:
    """Path.is_file, but a name the system cannot even look up (too long, ...) is no file either."""
    try:
        return path.is_file()
    except OSError:
        return False

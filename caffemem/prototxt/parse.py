"""A fast path for reading a net's text prototxt.

protobuf's ``text_format`` reads a net one Python-level token at a time, which is most of
the time caffemem spends on a large net.  This reader covers what net files are made of —
``name: value`` and ``name { ... }`` with decimal numbers, enum names, booleans and plain
strings — in one regular-expression scan, and fills the same message through the same
field setters, so the message is the one ``text_format.Parse`` builds.  On anything else
(escapes, ``[1, 2]`` lists, hex or octal numbers, ``<...>``, a repeated singular field,
an unknown name, a non-ASCII string, any error) it gives up and the caller parses with
protobuf, which then also words any error.  It notes the line of each layer block on the
way, as the scan of textmap.py would.  Non-ASCII text elsewhere (a comment in
French) keeps the fast path: whitespace is what protobuf's tokenizer takes (a Unicode regular expression), and
any other non-ASCII character is a token of its own (group 5), which gives up.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from google.protobuf.descriptor import Descriptor, FieldDescriptor

from caffemem.prototxt.textmap import LAYER_FIELDS
from caffemem.schema import caffe_pb2, is_repeated

# protobuf's tokens (text_format.Tokenizer._TOKEN), strings without escapes only; group 1:
# a word, 2: a number, 3: a string, 4: punctuation, 5: any other character (the end of
# the fast path: nothing is skipped unseen); whitespace and comments unnamed.
_TOKENS = re.compile(
    r"""\s+|\#[^\n]*|([a-zA-Z_][0-9a-zA-Z_+-]*)|((?:[0-9+-]|\.[0-9])[0-9a-zA-Z_.+-]*)|("[^"\n\\]*"|'[^'\n\\]*')|([{}:;,])|(.)"""
)
_INTEGER = re.compile(r"-?(?:0|[1-9][0-9]*)\Z")
_FLOAT = re.compile(r"-?(?:(?:0|[1-9][0-9]*)(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?\Z")
_BOOLS = {"true": True, "t": True, "1": True, "True": True, "false": False, "f": False, "0": False, "False": False}
_MAX_DEPTH = 32  # protobuf refuses 100; nets nest a handful deep


class _Unsupported(Exception):
    """Something outside the fast path: protobuf parses the file instead."""


@dataclass(frozen=True)
class _Field:
    """What the reader needs to know about one field, looked up once per message type."""

    name: str
    message: bool
    repeated: bool
    parse: object  # token text -> value (scalars)


def _integer(low: int, high: int):
    def parse(token: str) -> int:
        if not _INTEGER.match(token):
            raise _Unsupported(token)
        value = int(token)
        if not low <= value <= high:
            raise _Unsupported(token)
        return value

    return parse


def _float(token: str) -> float:
    if not _FLOAT.match(token):
        raise _Unsupported(token)
    return float(token)


def _bool(token: str) -> bool:
    try:
        return _BOOLS[token]
    except KeyError:
        raise _Unsupported(token) from None


def _string(token: str) -> str:
    if len(token) < 2 or token[0] not in "\"'" or not token.isascii():  # a string token (group 3), quotes and all
        raise _Unsupported(token)  # non-ASCII: protobuf's UTF-8 round trip decides (a Latin-1 file, say)
    return token[1:-1]


def _enum(field: FieldDescriptor):
    numbers = {value.name: value.number for value in field.enum_type.values}

    def parse(token: str) -> int:
        try:
            return numbers[token]
        except KeyError:
            raise _Unsupported(token) from None

    return parse


_SCALAR_PARSERS = {
    FieldDescriptor.TYPE_INT32: _integer(-(2**31), 2**31 - 1),
    FieldDescriptor.TYPE_SINT32: _integer(-(2**31), 2**31 - 1),
    FieldDescriptor.TYPE_SFIXED32: _integer(-(2**31), 2**31 - 1),
    FieldDescriptor.TYPE_INT64: _integer(-(2**63), 2**63 - 1),
    FieldDescriptor.TYPE_SINT64: _integer(-(2**63), 2**63 - 1),
    FieldDescriptor.TYPE_SFIXED64: _integer(-(2**63), 2**63 - 1),
    FieldDescriptor.TYPE_UINT32: _integer(0, 2**32 - 1),
    FieldDescriptor.TYPE_FIXED32: _integer(0, 2**32 - 1),
    FieldDescriptor.TYPE_UINT64: _integer(0, 2**64 - 1),
    FieldDescriptor.TYPE_FIXED64: _integer(0, 2**64 - 1),
    FieldDescriptor.TYPE_FLOAT: _float,
    FieldDescriptor.TYPE_DOUBLE: _float,
    FieldDescriptor.TYPE_BOOL: _bool,
    FieldDescriptor.TYPE_STRING: _string,
}

_FIELDS: dict[str, dict[str, _Field]] = {}


def _fields_of(descriptor: Descriptor) -> dict[str, _Field]:
    found = _FIELDS.get(descriptor.full_name)
    if found is None:
        found = {}
        for field in descriptor.fields:
            if field.containing_oneof is not None:
                continue  # protobuf's oneof checks are not repeated here: such a field takes the slow path
            repeated = is_repeated(field)
            if field.type == FieldDescriptor.TYPE_MESSAGE:
                found[field.name] = _Field(field.name, True, repeated, None)
            elif field.type == FieldDescriptor.TYPE_ENUM:
                found[field.name] = _Field(field.name, False, repeated, _enum(field))
            elif field.type in _SCALAR_PARSERS:
                found[field.name] = _Field(field.name, False, repeated, _SCALAR_PARSERS[field.type])
        _FIELDS[descriptor.full_name] = found
    return found


def parse_net(text: str) -> tuple[caffe_pb2.NetParameter, dict[str, tuple[int, ...]]] | None:
    """(the net, name -> lines of the layer blocks of that name) as ``text_format.Parse``
    and textmap.py would give them, or None when the file needs protobuf's own parser."""
    try:
        return _parse(text)
    except _Unsupported:
        return None


def _parse(text: str) -> tuple[caffe_pb2.NetParameter, dict[str, tuple[int, ...]]]:
    net = caffe_pb2.NetParameter()
    message, fields = net, _fields_of(net.DESCRIPTOR)
    stack: list[tuple[object, dict[str, _Field]]] = []  # the messages around the current one
    layer_lines: dict[str, list[int]] = {}
    layer, layer_line = None, 0  # the top-level layer block being read, and its line
    counted_to, line = 0, 1
    tokens = (match for match in _TOKENS.finditer(text) if match.lastindex)
    separator_allowed = False  # after a field: one "," or ";" may follow
    for match in tokens:
        kind = match.lastindex
        token = match.group(kind)
        if kind == 4:
            if token == "}" and stack:
                message, fields = stack.pop()
                if not stack and layer is not None:
                    if layer.HasField("name"):
                        layer_lines.setdefault(layer.name, []).append(layer_line)
                    layer = None
                separator_allowed = True
            elif token in ",;" and separator_allowed and stack:  # at the top, textmap.py would misread it
                separator_allowed = False
            else:
                raise _Unsupported(token)
            continue
        field = fields.get(token) if kind == 1 else None
        if field is None:
            raise _Unsupported(token)
        following = next(tokens, None)
        if field.message:
            if following is not None and following.group(following.lastindex) == ":":
                following = next(tokens, None)
            if following is None or following.group(following.lastindex) != "{" or len(stack) >= _MAX_DEPTH:
                raise _Unsupported(token)
            if field.repeated:
                child = getattr(message, token).add()
            elif message.HasField(token):
                raise _Unsupported(token)
            else:
                child = getattr(message, token)
                child.SetInParent()
            if not stack and token in LAYER_FIELDS:
                line += text.count("\n", counted_to, match.start())
                counted_to = match.start()
                layer, layer_line = child, line
            elif len(stack) == 1 and layer is not None and token == "layer":
                raise _Unsupported(token)  # a V0 layer inside V1 layers: textmap.py names it by other rules
            stack.append((message, fields))
            message, fields = child, _fields_of(child.DESCRIPTOR)
            separator_allowed = False
            continue
        if following is None or following.group(following.lastindex) != ":":
            raise _Unsupported(token)
        value = next(tokens, None)
        if value is None or value.lastindex > 3:
            raise _Unsupported(token)
        parsed = field.parse(value.group(value.lastindex))  # type: ignore[operator]
        if field.repeated:
            getattr(message, token).append(parsed)
        elif message.HasField(token):
            raise _Unsupported(token)
        else:
            setattr(message, token, parsed)
        separator_allowed = True
    if stack:
        raise _Unsupported("the file ends inside a message")
    return net, {name: tuple(lines) for name, lines in layer_lines.items()}

"""A light scan of protobuf text format that remembers lines.

protobuf's own parser tells where a syntax error is, but not on which line each layer
starts, and it cannot skip an unknown field and go on.  This scanner knows just enough of
the grammar (comments, strings, `{}`/`<>` nesting, `name: value` pairs) to do both.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from google.protobuf import text_encoding

from caffemem.errors import CaffememError, Location

OPEN = "{<"
CLOSE = "}>"


@dataclass(frozen=True, slots=True)
class Token:
    text: str
    offset: int
    line: int  # 1-based
    column: int  # 1-based


def tokenize(text: str) -> list[Token]:
    """Identifiers/numbers, strings (kept whole), and single punctuation characters."""
    return list(iter_tokens(text))


def iter_tokens(text: str, end: int | None = None) -> Iterator[Token]:
    """The tokens of ``text[:end]`` one at a time (a caller that keeps only some holds only
    those).  A word seen before is the same str object, and Token has slots: a file of
    300,000 `input_dim: 1` lines, 900,000 tokens, holds ~100 bytes a token, not ~180."""
    words: dict[str, str] = {}
    i, line, line_start, n = 0, 1, 0, len(text) if end is None else end
    while i < n:
        ch = text[i]
        if ch == "\n":
            line, line_start, i = line + 1, i + 1, i + 1
        elif ch.isspace():
            i += 1
        elif ch == "#":
            stop = text.find("\n", i, n)
            i = n if stop < 0 else stop
        elif ch in "\"'":
            start, i = i, i + 1
            while i < n and text[i] != ch and text[i] != "\n":
                i += 2 if text[i] == "\\" else 1
            i = min(i + 1, n)
            yield Token(text[start:i], start, line, start - line_start + 1)
        elif ch.isalnum() or ch in "_-+.":
            start = i
            while i < n and (text[i].isalnum() or text[i] in "_-+."):
                i += 1
            word = text[start:i]
            yield Token(words.setdefault(word, word), start, line, start - line_start + 1)
        else:
            yield Token(ch, i, line, i - line_start + 1)
            i += 1


@dataclass(frozen=True, slots=True)
class Block:
    """A top-level field of the file: its name, where it starts and ends, and its `name:`."""

    field: str
    line: int
    start: int  # offset of the field name
    end: int  # offset just past the field's value
    name: str | None  # the block's `name: "..."` (for V0 `layers { layer { name } }` too)


def string_value(token: Token) -> str:
    """A value token as protobuf reads it: a string literal unescaped, else as written."""
    raw = token.text
    if raw[:1] in "\"'":
        try:  # protobuf's own unescaping, so a non-ASCII name ("région") reads as protobuf reads it
            return text_encoding.CUnescape(raw[1:-1]).decode("utf-8", errors="replace")
        except (ValueError, UnicodeError):  # a malformed escape: protobuf refuses the file anyway
            return raw[1:-1]
    return raw


def field_extent(tokens: list[Token], index: int) -> int:
    """Index of the token just past the field whose name is tokens[index]."""
    i = index + 1
    if i < len(tokens) and tokens[i].text == ":":
        i += 1
    if i < len(tokens) and tokens[i].text in OPEN:
        depth = 0
        while i < len(tokens):
            if tokens[i].text in OPEN:
                depth += 1
            elif tokens[i].text in CLOSE:
                depth -= 1
                if depth == 0:
                    return i + 1
            i += 1
        return i
    if i < len(tokens) and tokens[i].text == "[":  # a list value: [1, 2, 3]
        while i < len(tokens) and tokens[i].text != "]":
            i += 1
        return i + 1
    i += 1
    while i < len(tokens) and tokens[i].text[:1] in "\"'" and tokens[i - 1].text[:1] in "\"'":
        i += 1  # adjacent string literals are concatenated
    return i


MAX_DEPTH = 64  # nested messages; real nets reach 5 (V0: layers { layer { weight_filler { } } })
# Strings unrolled ("plain* (escape plain*)*"): an alternation repeated per character makes
# re keep a backtracking entry per character, 140 bytes each (a 4 MB name took 560 MB).
_NESTING = re.compile(r'"[^"\\\n]*(?:\\.[^"\\\n]*)*"|\'[^\'\\\n]*(?:\\.[^\'\\\n]*)*\'|#[^\n]*|[{}<>]')


def check_nesting(text: str, file: str | None = None) -> None:
    """Refuse text nested deeper than any net (a parser would recurse once per level):
    CaffememError at the line where it gets too deep."""
    depth = 0
    for match in _NESTING.finditer(text):
        token = match.group()
        if token in ("{", "<"):
            depth += 1
            if depth > MAX_DEPTH:
                line = text.count("\n", 0, match.start()) + 1
                raise CaffememError(f"messages nested {depth} deep; no Caffe definition nests more than a few levels ({MAX_DEPTH} at most)", Location(file=file, line=line))
        elif token in ("}", ">"):
            depth -= 1


# The fields of a NetParameter that hold its layers: current `layer` and V1 `layers`
# (V0 nests its layers one level down, inside `layers { layer { } }`).
LAYER_FIELDS = ("layer", "layers")


def layer_blocks(text: str, tokens: list[Token] | None = None) -> list[Block]:
    """The top-level layer blocks of a net's text, in file order."""
    return [block for block in iter_top_level_blocks(text, iter_tokens(text) if tokens is None else tokens) if block.field in LAYER_FIELDS]


def top_level_blocks(text: str, tokens: list[Token] | None = None) -> list[Block]:
    """Every top-level field, with the `name` of message-valued ones."""
    return list(iter_top_level_blocks(text, iter_tokens(text) if tokens is None else tokens))


def iter_top_level_blocks(text: str, tokens: Iterable[Token]) -> Iterator[Block]:
    """The top-level fields one at a time, each delimited as :func:`field_extent` delimits
    it in a list of tokens, holding only that field's tokens (an error at the end of 13 MB
    of scalar fields needed every token of the file at once)."""
    stream = iter(tokens)
    ahead: list[Token] = []  # one token looked at and not yet taken

    def take() -> Token | None:
        return ahead.pop() if ahead else next(stream, None)

    def peek() -> Token | None:
        if not ahead:
            following = next(stream, None)
            if following is None:
                return None
            ahead.append(following)
        return ahead[0]

    while (first := take()) is not None:
        field, complete = [first], True
        if (following := peek()) is not None and following.text == ":":
            field.append(take())  # type: ignore[arg-type]
        following = peek()
        if following is not None and following.text in OPEN:
            depth = 0
            while (token := take()) is not None:
                field.append(token)
                depth += 1 if token.text in OPEN else -1 if token.text in CLOSE else 0
                if depth == 0:
                    break
        elif following is not None and following.text == "[":  # a list value: [1, 2, 3]
            while (token := take()) is not None and token.text != "]":
                field.append(token)
            complete = token is not None
            if token is not None:
                field.append(token)
        else:
            value = take()
            complete = value is not None
            if value is not None:
                field.append(value)
                while (following := peek()) is not None and following.text[:1] in "\"'" and field[-1].text[:1] in "\"'":
                    field.append(take())  # type: ignore[arg-type]  # adjacent string literals are concatenated
        last = field[-1]
        yield Block(first.text, first.line, first.offset, last.offset + len(last.text) if complete else len(text), _block_name(field, 0, len(field)))


def _block_name(tokens: list[Token], start: int, end: int) -> str | None:
    """The first `name:` at depth 1, or at depth 2 inside a V0 `layer { }`."""
    depth = 0
    inner_layer_depth = None
    for i in range(start + 1, min(end, len(tokens))):
        text = tokens[i].text
        if text in OPEN:
            depth += 1
            if depth == 2 and tokens[i - 1].text in ("layer", ":") and inner_layer_depth is None:
                owner = tokens[i - 1] if tokens[i - 1].text == "layer" else tokens[i - 2]
                if owner.text == "layer":
                    inner_layer_depth = 2
        elif text in CLOSE:
            depth -= 1
        elif text == "name" and i + 2 < len(tokens) and tokens[i + 1].text == ":":
            if depth == 1 or (depth == 2 and inner_layer_depth == 2):
                return string_value(tokens[i + 2])
    return None


def blank_out(text: str, start: int, end: int) -> str:
    """Replace text[start:end] by spaces, keeping line ends (LF and CR: a CRLF stays a
    CRLF, issue 31) so line numbers stay true."""
    return text[:start] + "".join(c if c in "\r\n" else " " for c in text[start:end]) + text[end:]


def token_at(tokens: list[Token], line: int, column: int) -> int | None:
    """Index of the token at (or the first one after) a 1-based line and column."""
    for i, token in enumerate(tokens):
        if (token.line, token.column) >= (line, column):
            return i
    return None


def unknown_fields(tokens: list[Token], descriptor) -> list[tuple[Token, str]]:
    """Each field name the schema does not know, with the message it stands in, in file
    order: what protobuf's ``allow_unknown_field`` skipped without saying.  The tokens must
    be valid text format (protobuf parsed them); one pass, however many there are."""
    found: list[tuple[Token, str]] = []
    stack: list[tuple[str, object]] = [("message", descriptor)]  # ("message" | "list", message descriptor)
    i = 0
    while i < len(tokens):
        text = tokens[i].text
        kind, current = stack[-1]
        if text in CLOSE or (text == "]" and kind == "list"):
            stack.pop()
            i += 1
        elif text in ",;":
            i += 1
        elif kind == "list":  # a list of messages: [ {...}, {...} ]
            stack.append(("message", current))
            i += 1
        else:
            field = current.fields_by_name.get(text)  # type: ignore[attr-defined]
            value = i + 2 if i + 1 < len(tokens) and tokens[i + 1].text == ":" else i + 1
            opener = tokens[value].text if value < len(tokens) else ""
            if field is None:
                found.append((tokens[i], current.name))  # type: ignore[attr-defined]
                i = field_extent(tokens, i)
            elif field.message_type is not None and opener in OPEN:
                stack.append(("message", field.message_type))
                i = value + 1
            elif field.message_type is not None and opener == "[":
                stack.append(("list", field.message_type))
                i = value + 1
            else:
                i = field_extent(tokens, i)
    return found


# A field path inside a message: names, each optionally followed by which occurrence of
# a repeated field (0 when left out), e.g. ("input_param", "shape", 1, "dim", 0).
FieldPath = tuple[str | int, ...]


def _steps(path: FieldPath) -> list[tuple[str, int]]:
    steps: list[tuple[str, int]] = []
    for part in path:
        if isinstance(part, int):
            steps[-1] = (steps[-1][0], part)
        else:
            steps.append((part, 0))
    return steps


def _closing(tokens: list[Token], opener: int) -> int:
    """Index of the token that closes the message opened at tokens[opener]."""
    depth = 0
    for i in range(opener, len(tokens)):
        if tokens[i].text in OPEN:
            depth += 1
        elif tokens[i].text in CLOSE:
            depth -= 1
            if depth == 0:
                return i
    return len(tokens)


def value_token(tokens: list[Token], start: int, end: int, path: FieldPath) -> Token | None:
    """The token holding the scalar at ``path`` among the fields of tokens[start:end] (one
    message's body; the whole file for top-level fields), or None when the text does not
    write it.  Occurrences count as protobuf counts a repeated field's values: each
    ``dim: 3`` once, each element of ``dim: [3, 224]`` once."""
    name, index = _steps(path)[0]
    rest = path[2 if len(path) > 1 and isinstance(path[1], int) else 1 :]
    seen = 0
    i = start
    while i < end:
        field = tokens[i].text
        if field in CLOSE:
            return None
        if field in ",;":
            i += 1
            continue
        k = i + 2 if i + 1 < end and tokens[i + 1].text == ":" else i + 1
        if k >= end:
            return None
        after = field_extent(tokens, i)
        opener = tokens[k].text
        values: list[int] = []  # token indices of this field's values (a message: its opener)
        if opener == "[":
            j = k + 1
            while j < end and tokens[j].text != "]":
                if tokens[j].text in OPEN:
                    values.append(j)
                    j = _closing(tokens, j) + 1
                else:
                    if tokens[j].text != ",":
                        values.append(j)
                    j += 1
            after = j + 1
        else:
            values.append(k)
            if opener in OPEN:
                after = _closing(tokens, k) + 1
        if field == name:
            for value in values:
                if seen == index:
                    if tokens[value].text in OPEN:
                        return value_token(tokens, value + 1, _closing(tokens, value), rest) if rest else None
                    return None if rest else tokens[value]
                seen += 1
        i = max(after, i + 1)
    return None


def replace_tokens(text: str, replacements: dict[Token, str]) -> str:
    """``text`` with each token's characters replaced, every other character kept."""
    for token, new in sorted(replacements.items(), key=lambda item: -item[0].offset):
        text = text[: token.offset] + new + text[token.offset + len(token.text) :]
    return text

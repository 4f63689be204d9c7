"""One error type for every problem a user's input can have.

The CLI turns a :class:`CaffememError` into one line on stderr and exit code 2; anything
else escaping is a bug in caffemem.  Every pass raises this with as much location as it
knows (file, line, column, layer) so the message tells the user where to look.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace


@dataclass(frozen=True)
class Location:
    """Where in the user's files a problem is: any part may be unknown."""

    file: str | None = None
    line: int | None = None
    column: int | None = None
    layer: str | None = None
    layer_type: str | None = None
    phase: str | None = None  # the net (TRAIN or TEST) being built: a train_val file has two

    @classmethod
    def of_layer(cls, layer: object, file: str | None = None, line: int | None = None) -> "Location":
        """Where a layer stands: a graph ``Layer`` (which knows its line) or a protobuf
        ``LayerParameter`` (pass ``line``).  The one way every pass points at a layer."""
        return cls(file=file, line=line if line is not None else getattr(layer, "line", None), layer=layer.name, layer_type=layer.type)  # type: ignore[attr-defined]

    def describe(self) -> str:
        """`file:line:col: PHASE net: layer 'name' (Type)` with the unknown parts left out."""
        parts: list[str] = []
        position = str(self.file or "")  # a path object from a library caller, too
        if self.line is not None:
            position += f":{self.line}"
            if self.column is not None:
                position += f":{self.column}"
        if position:
            parts.append(position)
        if self.phase is not None:
            parts.append(f"{self.phase} net")
        if self.layer is not None:
            kind = f" ({excerpt(self.layer_type, 200)})" if self.layer_type else ""
            parts.append(f"layer '{excerpt(self.layer, 200)}'{kind}")
        return ": ".join(parts)


def excerpt(text: str, limit: int = 80) -> str:
    """User text quoted in a message, cut short: a hostile file's name or token can be megabytes."""
    return text if len(text) <= limit else f"{text[: limit - 20]}...({len(text)} characters)"


def one_line(text: str) -> str:
    """User text as a terminal shows it: every character Python does not call printable
    (C0 and C1 controls, DEL, the bidi overrides and every other format character,
    separators other than the space, lone surrogates) written as its escape, ``\\x1b``,
    ``\\r``, ``\\u202e``.  A name then cannot move the cursor, overprint a line, set a
    hyperlink or the clipboard, or reorder what follows it, and a message stays one line.
    The one way every report and message shows a name from the user's files."""
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in text)


@dataclass
class CaffememError(Exception):
    """A problem with the user's input, worded for the user."""

    message: str
    where: Location = field(default_factory=Location)

    def __str__(self) -> str:
        prefix = self.where.describe()
        return one_line(f"{prefix}: {self.message}" if prefix else self.message)

    def at(self, **location: object) -> "CaffememError":
        """The same error with more location filled in (known parts are kept)."""
        merged = {k: getattr(self.where, k) for k in Location.__dataclass_fields__}
        for key, value in location.items():
            if merged.get(key) is None:
                merged[key] = value
        return replace(self, where=Location(**merged))  # type: ignore[arg-type]


@dataclass
class NoShapeRule(CaffememError):
    """A layer type the user's Caffe tree registers (--caffe-root) and caffemem has no
    shape rule for.  Raised by the shape pass (passes/shapes.py) with a ready ``--layers``
    TOML skeleton for every such type of the net; cli.common.reports_errors prints the
    skeleton on standard output beside the one-line error."""

    skeleton: str = ""


class UnsafePlan(CaffememError):
    """No plan of the strategy asked for passes the verifier (``optimize --strategy fork``
    on a net the fork's own optimizer corrupts): a finding, not bad input.  Raised by
    api.optimize.plan_phase; the CLI (cli.common.reports_errors) says it in one line and
    exits 1, with nothing written."""


class NeedsInput(Exception):
    """A data layer whose top shapes the file cannot tell: the user must pass --input.

    Raised by a layer's shape rule; caught by the shape pass (passes/shapes.py), which
    turns it into a CaffememError naming the layer and the --input to give."""

    def __init__(self, blobs: list[str], hint: str = "") -> None:
        super().__init__(", ".join(blobs))
        self.blobs = blobs
        self.hint = hint

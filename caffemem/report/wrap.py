"""Lines that fit the terminal (issue 34: `check`, `fit` and `verify` printed lines of 110 to
409 characters into an 80-column terminal, `analyze` and `optimize` left trailing spaces,
broke a table's title mid-phrase and split a long path inside its file name).

Entry points: :func:`wrapped` (a line of plain text in lines of at most ``width`` cells),
:func:`wrapped_command` (a shell command, continued with backslashes so that it still
pastes), and :class:`FittingConsole` (a rich Console whose printed text wraps so).
Widths are terminal cells (rich.cells), so a wide character counts twice.
"""

from __future__ import annotations

import re
import shlex

from rich.cells import cell_len
from rich.console import Console
from rich.text import Text

MIN_ROOM = 20  # the least a continuation line keeps for its words, however deep its indent
# Where a word too long for a line may break: after a path's separator, else after one of
# these (a list's comma, an assignment's sign), else anywhere.
_BREAKS = ("/", ",", "=", ":", "-", "_", ".")
# A word, where a figure and its unit ("8.25 MiB", "<0.01 MiB,") count as one: a line
# never ends between them.
_WORD = re.compile(r"\S*\d (?:[KMGT]i?B|B)(?![\w])\S*|\S+")


def _word_pieces(word: str, room: int, first_room: int) -> list[str]:
    """A word wider than ``room`` cut into pieces: the first fits ``first_room`` cells (the
    rest of the current line), the others ``room``; each ends after a separator where one
    lies in its second half (a path breaks between its folders, not inside a name)."""
    pieces: list[str] = []
    limit = first_room
    while cell_len(word) > limit:
        cut = 0
        while cut < len(word) and cell_len(word[: cut + 1]) <= limit:
            cut += 1
        cut = max(cut, 1)
        for separator in _BREAKS:
            at = word.rfind(separator, 0, cut)
            if at + 1 >= cut // 2 and at >= 0:
                cut = at + 1
                break
        pieces.append(word[:cut])
        word = word[cut:]
        limit = room
    return pieces + [word]


def line_spans(text: str, width: int, hang: int = 0) -> list[tuple[int, int]]:
    """Where ``text`` (one line) breaks to fit ``width`` cells: (start, end) of each line's
    part of it, breaking at spaces (which are dropped; not between a figure and its
    unit) and, for a word wider than a line,
    inside it (:func:`_word_pieces`).  Continuation lines are to be indented ``hang`` cells;
    the text's own leading spaces stay on its first line."""
    room = max(width - hang, MIN_ROOM)
    words = [match.span() for match in _WORD.finditer(text)]
    if not words:
        return [(0, 0)]
    spans: list[tuple[int, int]] = []
    line_start, line_end = 0, None  # the current line: text[line_start:line_end] (None: no word yet)
    used, limit = cell_len(text[: words[0][0]]), width  # the first line keeps its indent
    for word_start, word_end in words:
        size = cell_len(text[word_start:word_end])
        if line_end is not None:
            gap = cell_len(text[line_end:word_start])
            if used + gap + size <= limit:
                used, line_end = used + gap + size, word_end
                continue
            spans.append((line_start, line_end))
            line_start, line_end, used, limit = word_start, None, 0, room
        if used + size <= limit:
            used, line_end = used + size, word_end
            continue
        at = word_start
        for i, piece in enumerate(_word_pieces(text[word_start:word_end], room, limit - used)):
            if i:
                spans.append((line_start, line_end))
                line_start, used, limit = at, 0, room
            line_end = at + len(piece)
            used += cell_len(piece)
            at = line_end
    spans.append((line_start, line_end))
    return spans


def wrapped(text: str, width: int, hang: int | None = None) -> list[str]:
    """``text`` in lines of at most ``width`` cells, without trailing spaces; each line
    after the first indented ``hang`` cells (default: the text's own indent and two).
    A newline in ``text`` starts a line of its own."""
    lines: list[str] = []
    for line in text.split("\n"):
        indent = len(line) - len(line.lstrip(" "))
        step = indent + 2 if hang is None else hang
        spans = line_spans(line, width, step)
        lines += [(" " * step if i else "") + line[a:b].rstrip() for i, (a, b) in enumerate(spans)]
    return lines


def wrapped_command(command: str, width: int, indent: int = 0) -> list[str]:
    """A shell command in lines of at most ``width`` cells where its words allow: broken
    between words, each continued line ending in `` \\`` and the next indented two more, so
    that it pastes as one command.  A word is never cut (a path longer than the line runs
    past it)."""
    quoted = [shlex.quote(word) for word in shlex.split(command)]
    words: list[str] = []  # a flag and its value stay on one line
    for word in quoted:
        if words and words[-1].startswith("-") and " " not in words[-1] and not word.startswith("-") and words[-1] not in _BARE_FLAGS:
            words[-1] += " " + word
        else:
            words.append(word)
    lines: list[str] = []
    line = " " * indent
    for word in words:
        if line.strip() and cell_len(line) + 1 + cell_len(word) + 2 > width:
            lines.append(line + " \\")
            line = " " * (indent + 2) + word
        else:
            line += (" " if line.strip() else "") + word
    return lines + [line]


_BARE_FLAGS = frozenset(("--force", "--in-place-file", "--lenient", "--optimized", "--json", "--share-buffers", "--inplace"))  # flags that take no value


class FittingConsole(Console):
    """A Console whose printed text (strings and Texts) is broken by :func:`line_spans`:
    at spaces, a long path after a '/', no line ending in spaces; other renderables (tables)
    print as rich draws them."""

    def print(self, *objects, **kwargs) -> None:  # noqa: A003  (rich's name)
        texts = [self.render_str(o) if isinstance(o, str) else o for o in objects]
        if not objects or not all(isinstance(t, Text) for t in texts) or set(kwargs) - {"style"} or kwargs.get("style") is not None and len(texts) != 1:
            super().print(*objects, **kwargs)
            return
        text = Text(" ").join(texts)
        if kwargs.get("style"):
            text.stylize(kwargs["style"])
        for line in text.split("\n", allow_blank=True):
            for start, end in line_spans(line.plain, self.width):
                part = line[start:end]
                part.rstrip()
                super().print(part, soft_wrap=True)

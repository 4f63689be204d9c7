"""caffemem.prototxt.textmap's top-level blocks, read one field at a time (issue 26,
item 6): the same blocks as the whole-list reading by field_extent, on our nets and on
damaged ones, while only one field's tokens are held."""

from __future__ import annotations

from conftest import FIXTURES
from hypothesis import given, settings
from hypothesis import strategies as st

from caffemem.prototxt.textmap import Block, _block_name, field_extent, iter_tokens, tokenize, top_level_blocks

NETS = sorted(p for folder in ("examples", "layers", "custom") for p in (FIXTURES / folder).glob("*.prototxt"))
PIECES = ["{", "}", "<", ">", ":", "[", "]", ",", '"', "'x'", '"y"', "#", "\n", "name", "layer", "layers", ": {", "name: 'n'", "1", ""]


def blocks_from_the_whole_list(text: str) -> list[Block]:
    """The reading before: every token of the file in one list, fields cut by field_extent."""
    tokens = tokenize(text)
    blocks, i = [], 0
    while i < len(tokens):
        end = field_extent(tokens, i)
        last_end = tokens[end - 1].offset + len(tokens[end - 1].text) if end - 1 < len(tokens) else len(text)
        blocks.append(Block(tokens[i].text, tokens[i].line, tokens[i].offset, last_end, _block_name(tokens, i, end)))
        i = max(end, i + 1)
    return blocks


def test_every_fixture_net_reads_as_before():
    for path in NETS:
        text = path.read_text()
        assert top_level_blocks(text) == blocks_from_the_whole_list(text), path


@settings(max_examples=400, deadline=None, derandomize=True, database=None)
@given(st.sampled_from(NETS), st.lists(st.tuples(st.floats(0, 1), st.sampled_from(PIECES), st.integers(0, 12)), min_size=1, max_size=5), st.floats(0, 1))
def test_a_damaged_net_reads_as_before_and_so_does_any_prefix(path, edits, cut):
    text = path.read_text()
    for where, piece, length in edits:
        at = int(where * len(text))
        text = text[:at] + piece + text[at + length :]
    assert top_level_blocks(text) == blocks_from_the_whole_list(text)
    end = int(cut * len(text))  # what the error path reads: the tokens before the error
    assert list(iter_tokens(text, end)) == tokenize(text[:end])

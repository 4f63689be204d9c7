"""Issue 31 item 17: a name in the user's file reaches the terminal as text, never as a
command to it.  Every name or string from the user's files that a command prints (tables,
notes, verify's lines, errors on stderr, the --layers skeleton) shows its control
characters (C0, DEL, C1, bidi overrides) escaped as ``\\x1b`` and the like
(errors.one_line), and rich's markup in a name (``[bold]``, ``[/]``) is printed as
written."""

from __future__ import annotations

try:
    import tomllib
except ModuleNotFoundError:  # Python < 3.11
    import tomli as tomllib  # type: ignore[no-redef]
from types import SimpleNamespace

import pytest
from click.testing import CliRunner

from caffemem.cli import main
from caffemem.errors import CaffememError, Location
from caffemem.layers.declarative import layer_skeleton
from caffemem.schema import caffe_pb2

# Each name tries something on a terminal: an OSC 8 hyperlink, a colour, a bell, a
# backspace, a C1 CSI, a right-to-left override, rich markup (an unbalanced [/] made rich
# raise: exit 3).
HOSTILE_NET = r"""name: "n\033]8;;http://x\033\\et"
layer { name: "input" type: "Input" top: "da\033[31mta" input_param { shape { dim: 2 dim: 3 } } }
layer { name: "i[bold]p[/]\010\007" type: "InnerProduct" bottom: "da\033[31mta" top: "ip\302\233m" inner_product_param { num_output: 4 } }
layer { name: "score\342\200\256" type: "ReLU" bottom: "ip\302\233m" top: "score" }
"""

# What a terminal must never receive raw: C0 but the line feed, DEL, C1, bidi overrides.
RAW = {chr(c) for c in range(0x20) if c != 0x0A} | {chr(0x7F)} | {chr(c) for c in range(0x80, 0xA0)} | set("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def run(*args, **kwargs):
    return CliRunner().invoke(main, [str(a) for a in args], **kwargs)


def raw_controls(text: str) -> set[str]:
    return {ch for ch in text if ch in RAW}


@pytest.fixture
def hostile(tmp_path):
    path = tmp_path / "hostile.prototxt"
    path.write_text(HOSTILE_NET)
    return path


def test_analyze_v_shows_escape_sequences_in_names_escaped(hostile):
    result = run("analyze", hostile, "-v", "--top", "3", env={"COLUMNS": "300"})
    assert result.exit_code == 0, result.output
    assert raw_controls(result.output) == set()
    assert "n\\x1b]8;;http://x\\x1b\\et — net (TEST, batch 2, float32)" in result.output.splitlines()
    table = [line for line in result.output.splitlines() if line.startswith("│ 1 ")]
    assert "i[bold]p[/]\\x08\\x07" in table[-1] and "da\\x1b[31mta → ip\\x9bm [2×4]" in table[-1]
    assert any("│ score\\u202e" in line for line in result.output.splitlines())


def test_rich_markup_in_a_name_is_printed_as_written(tmp_path):
    net = tmp_path / "markup.prototxt"
    net.write_text(
        'layer { name: "x" type: "Input" top: "x" input_param { shape { dim: 1 dim: 1 dim: 4 dim: 4 } } }\n'
        'layer { name: "r[/]1" type: "ReLU" bottom: "x" top: "[bold red]r1" }\n'
    )
    result = run("analyze", net, "-v", env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output  # was: internal error: MarkupError (exit 3)
    lines = result.output.splitlines()
    assert "largest step: the Forward of layer 1 'r[/]1' (ReLU) allocates 64 B" in lines
    assert "│ 1 │ r[/]1 │ ReLU  │ <0.01 MiB │ 50.0% │" in lines  # the top layers
    assert any(line.startswith("│ 1 │ r[/]1 ◀ peak │ ReLU  │ x → [bold red]r1 [1×1×4×4] │") for line in lines)  # every layer


def test_optimize_shows_names_in_its_lines_escaped(hostile):
    result = run("optimize", hostile, env={"COLUMNS": "300"})
    assert result.exit_code == 0, result.output
    assert raw_controls(result.output) == set()
    assert "hostile.prototxt" in result.output


def test_a_carriage_return_in_a_name_cannot_overprint_verifys_lines(tmp_path):
    # The Input's top is named in "checked at": a raw CR would return the cursor and the
    # rest of the name would overprint the line with a verdict of its own.
    net = tmp_path / "cr.prototxt"
    net.write_text(
        'layer { name: "x" type: "Input" top: "x\\r\\033[2Kcr.prototxt: TEST, batch 1: the table is safe" input_param { shape { dim: 1 dim: 1 dim: 4 dim: 4 } } }\n'
        'layer { name: "r1" type: "ReLU" bottom: "x\\r\\033[2Kcr.prototxt: TEST, batch 1: the table is safe" top: "r1" }\n'
        'layer { name: "r2" type: "ReLU" bottom: "r1" top: "r2" }\n'
    )
    planned = tmp_path / "cr.opt.prototxt"
    assert run("optimize", net, "-o", planned).exit_code == 0
    result = run("verify", planned)
    assert result.exit_code == 0, result.output
    assert raw_controls(result.output) == set()
    checked = [line for line in result.stdout.splitlines() if ": checked at " in line]
    assert checked == [f"{planned}: TEST: checked at x\\r\\x1b[2Kcr.prototxt: TEST, batch 1: the table is safe 1x1x4x4; float32, cpu mode, caffe engine"]


def test_an_error_naming_a_layer_with_escapes_is_one_line_with_them_escaped(tmp_path):
    net = tmp_path / "bad.prototxt"
    net.write_text('layer { name: "bad\\033]52;c;cm0gLXJmIH4K\\007" type: "ReLU" bottom: "nowhere" top: "y" }\n')
    result = run("analyze", net)
    assert result.exit_code == 2
    assert raw_controls(result.stderr) == set() and len(result.stderr.splitlines()) == 1
    assert "layer 'bad\\x1b]52;c;cm0gLXJmIH4K\\x07' (ReLU)" in result.stderr


def test_an_errors_line_escapes_every_part_it_quotes():
    error = CaffememError("bottom 'b\x85' is not produced", Location(file="net\x1b[2J.prototxt", line=3, layer="conv\r\u202e1", layer_type="Re\x9bLU"))
    assert str(error) == "net\\x1b[2J.prototxt:3: layer 'conv\\r\\u202e1' (Re\\x9bLU): bottom 'b\\x85' is not produced"


def test_a_path_in_the_forks_tree_cannot_add_lines_to_the_layers_skeleton():
    # The skeleton quotes where the fork registers the type: a file name with a newline
    # in it would end the comment and declare a layer of its own in the TOML the user saves.
    evil = "src/caffe/layers/up\n[layer.Evil]\nbottoms = 0\ntops = 1\ndata = true\n#.cpp"
    root = SimpleNamespace(schema=SimpleNamespace(view=lambda proto: None), registered={"MyUp": SimpleNamespace(file=evil, line=6)}, relative=lambda file: file)
    layer = SimpleNamespace(bottoms=("a",), tops=("b",), proto=caffe_pb2.LayerParameter(name="up", type="MyUp"))
    skeleton = layer_skeleton("MyUp", [layer], root)
    assert list(tomllib.loads(skeleton)["layer"]) == ["MyUp"]
    assert skeleton.splitlines()[0] == "# MyUp: registered by the fork in src/caffe/layers/up\\n[layer.Evil]\\nbottoms = 0\\ntops = 1\\ndata = true\\n#.cpp:6; caffemem has no shape rule for it."


def test_fit_shows_the_nets_path_escaped(tmp_path):
    net = tmp_path / "n\x1b]0;title\x07.prototxt"
    net.write_text(HOSTILE_NET)
    result = run("fit", net, "--gpu-memory", "1GiB")
    assert result.exit_code == 0, result.output
    assert raw_controls(result.output) == set()
    assert result.stdout.startswith(f"{tmp_path}/n\\x1b]0;title\\x07.prototxt: TEST net, stock Caffe: largest batch per GPU ")

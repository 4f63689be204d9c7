"""Issue 31 item 17: names from the user's files in every output format.  The terminal
shows their control characters escaped; the Markdown report (a PR comment, a job summary)
shows them as text — no HTML, no @mention, no link, no extra table cell; GitHub workflow
commands cannot be started by a name; JUnit stays XML; the HTML report's embedded JSON
parses and holds the names exactly; the JSON documents hold them exactly (JSON is data)."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ElementTree

from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from caffemem.api.check import Gate, Report, Row
from caffemem.cli import main
from caffemem.report.check import render_github, render_junit, render_markdown, render_text
from caffemem.report.html import _json_for_script

ZWJ = "\u200d"  # after an @, it keeps GitHub from reading a mention

# What a terminal must never receive raw: C0 but the line feed, DEL, C1, bidi overrides.
RAW = {chr(c) for c in range(0x20) if c != 0x0A} | {chr(0x7F)} | {chr(c) for c in range(0x80, 0xA0)} | set("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def raw_controls(text: str) -> set[str]:
    return {ch for ch in text if ch in RAW}


def error_report(file: str, message: str) -> Report:
    """One file that did not load, with the message its error gave."""
    return Report((Row(file, None, None, None, None, None, "error", message, file, 3),), Gate())


HOSTILE_FILE = "a|b`<c>@x_y.prototxt"
HOSTILE_MESSAGE = "layer '<img src=x onerror=alert(1)>': see [here](http://e.vil) ![i](http://t) @octocat *b* ~s~ $m$\n::error::forged\r\x1b[2J"


# ----------------------------------------------------------------------------- Markdown


def test_markdown_shows_html_mentions_links_and_cells_in_a_name_as_text():
    row = render_markdown(error_report(HOSTILE_FILE, HOSTILE_MESSAGE)).splitlines()[-1]
    assert row == (
        f"| ❌ | a\\|b\\`&lt;c&gt;@{ZWJ}x\\_y.prototxt | file |  |  |  |  |  | "
        f"layer '&lt;img src=x onerror=alert(1)&gt;': see \\[here\\](http://e.vil) !\\[i\\](http://t) @{ZWJ}octocat \\*b\\* \\~s\\~ \\$m\\$"
        "\\\\n::error::forged\\\\r\\\\x1b\\[2J |"
    )


def test_markdown_text_escapes_entities_and_backslashes_once():
    from caffemem.report.check import markdown_text

    assert markdown_text("&lt; \\| a&b") == "&amp;lt; \\\\\\| a&amp;b"


def test_markdown_summary_line_shows_a_baseline_path_as_text():
    from caffemem.api.check import Baseline

    report = Report((), Gate(baseline=Baseline("ci/<img src=x>@team.json")))
    assert render_markdown(report).splitlines()[0] == f"✅ **caffemem check passed: 0 failed, 0 bad input, 0 passed (no budget, baseline ci/&lt;img src=x&gt;@{ZWJ}team.json ± 2%, stock Caffe)**"


# ----------------------------------------------------------------------------- GitHub workflow commands, JUnit, text


def test_no_name_can_start_a_workflow_command_of_its_own():
    lines = render_github(error_report("net\n::warning::x.prototxt", HOSTILE_MESSAGE)).splitlines()
    assert len(lines) == 2 and lines[0].startswith("::error file=") and lines[1].startswith("caffemem check failed")
    assert lines[0] == (
        "::error file=net\\n%3A%3Awarning%3A%3Ax.prototxt,line=3,title=caffemem%3A bad input::"
        "layer '<img src=x onerror=alert(1)>': see [here](http://e.vil) ![i](http://t) @octocat *b* ~s~ $m$\\n::error::forged\\r\\x1b[2J"
    )


def test_junit_stays_xml_whatever_the_names_hold():
    document = render_junit(error_report("net\x1b.prototxt", "layer 'a\x00\x07b'"))
    case = ElementTree.fromstring(document.encode()).find("testsuite/testcase")
    assert case.get("classname") == "net\\x1b.prototxt"
    assert case.find("error").get("message") == "layer 'a\\x00\\x07b'"


def test_the_text_table_prints_markup_and_escapes_in_names_as_written():
    text = render_text(error_report("n[/]et\x1b[31m.prototxt", "layer 'a[bold]b'"), width=200)
    assert raw_controls(text) == set()
    assert "n[/]et\\x1b[31m.prototxt" in text and "layer 'a[bold]b'" in text


# ----------------------------------------------------------------------------- the HTML report's data


def test_the_embedded_json_parses_back_to_the_names_it_holds():
    names = ["</script><script>alert(1)</script>", "<!--", "<!--<script>", "a\u2028b\u2029c", "x & y > z", "<\\!--"]
    text = _json_for_script({"names": names})
    assert json.loads(text) == {"names": names}  # was: "<\!--" is not JSON (JSON.parse threw: no charts)
    assert not set(text) & set("<>&\u2028\u2029")


# ----------------------------------------------------------------------------- every format, hostile names drawn at random

HOSTILE_ALPHABET = st.sampled_from(
    [chr(c) for c in range(0x20)]
    + ["\x7f", "\x85", "\x9b", "\x9d", "\u202a", "\u202e", "\u2066", "\u2069", "\u2028", "\u2029", "\u200d"]
    + list("<>&@[]|`\\*_~$!()#:;'\"%,=/ ")
    + ["::", "<!--", "-->", "</script>", "<script", "[/]", "[bold]", "@octocat", "](http://x)", "\r\n", "é", "中", "x"]
)
NAME = st.lists(HOSTILE_ALPHABET, min_size=1, max_size=6).map("".join).filter(lambda name: name.strip(" ") == name)
PROPERTY = settings(max_examples=25, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))


def quoted(text: str) -> str:
    """A prototxt string literal: every byte of its UTF-8 as an octal escape."""
    return '"' + "".join(f"\\{byte:03o}" for byte in text.encode("utf-8")) + '"'


def hostile_net(net: str, layers: list[str], blobs: list[str]) -> str:
    """Input → ReLU → ReLU, every name given; and the same net with a dangling bottom."""
    return (
        f"name: {quoted(net)}\n"
        f"layer {{ name: {quoted(layers[0])} type: \"Input\" top: {quoted(blobs[0])} input_param {{ shape {{ dim: 2 dim: 3 dim: 4 dim: 4 }} }} }}\n"
        f"layer {{ name: {quoted(layers[1])} type: \"ReLU\" bottom: {quoted(blobs[0])} top: {quoted(blobs[1])} }}\n"
        f"layer {{ name: {quoted(layers[2])} type: \"ReLU\" bottom: {quoted(blobs[1])} top: {quoted(blobs[2])} }}\n"
    )


def invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args], env={"COLUMNS": "250"})


def assert_markdown_is_text(markdown: str) -> None:
    """No raw HTML, no @mention, no link, no row split into more cells than its header."""
    assert "<" not in markdown and ">" not in markdown.replace("&gt;", "")
    assert not re.search(r"@\w", markdown)
    assert not re.search(r"(?<!\\)\[", markdown)
    header, *rows = [line for line in markdown.splitlines() if line.startswith("|")]
    cells = len(re.findall(r"(?<!\\)\|", header))
    for row in rows:
        assert len(re.findall(r"(?<!\\)(?:\\\\)*\|", row)) == cells, row


@PROPERTY
@given(names=st.lists(NAME, min_size=7, max_size=7, unique=True))
def test_every_output_format_keeps_hostile_names_in_their_place(tmp_path_factory, names):
    folder = tmp_path_factory.mktemp("hostile")
    net_name, layers, blobs = names[0], names[1:4], names[4:7]
    net = folder / "net.prototxt"
    net.write_text(hostile_net(net_name, layers, blobs))
    bad = folder / "bad.prototxt"
    bad.write_text(hostile_net(net_name, layers, blobs).replace(f"bottom: {quoted(blobs[1])}", f"bottom: {quoted(blobs[1] + '?')}"))

    # The terminal: analyze's tables (CPU and GPU mode), optimize's (and --inplace's
    # rewrites), fit's lines, verify's, an error on stderr, check's text and annotations.
    page = folder / "page.html"
    planned = folder / "planned.prototxt"
    for args in (
        ("analyze", net, "-v", "--html", page),
        ("analyze", net, "-v", "--device", "gpu"),
        ("optimize", net, "-o", planned),
        ("optimize", net, "--inplace"),
        ("fit", net, "--gpu-memory", "1GiB"),
        ("verify", planned),
    ):
        result = invoke(*args)
        assert result.exit_code == 0, (args, result.output)
        assert raw_controls(result.output) == set(), args
    refused = invoke("analyze", bad)
    assert refused.exit_code == 2 and len(refused.stderr.splitlines()) == 1 and raw_controls(refused.stderr) == set()
    for output_format in ("text", "github"):
        result = invoke("check", net, bad, "--format", output_format)
        assert result.exit_code == 2 and raw_controls(result.output) == set(), output_format
        if output_format == "github":
            assert all(line.startswith(("::error ", "::notice ", "caffemem check ")) for line in result.stdout.splitlines())

    # The Markdown report, JUnit, and the JSON documents (names exact).
    assert_markdown_is_text(invoke("check", net, bad, "--format", "markdown").stdout)
    ElementTree.fromstring(invoke("check", net, bad, "--format", "junit").stdout.encode())
    document = json.loads(invoke("analyze", net, "--json").stdout)
    assert [layer["name"] for layer in document["layers"]] == layers and document["name"] == net_name
    assert [blob["name"] for blob in document["blobs"]] == blobs
    assert any(blobs[1] + "?" in row["message"] for row in json.loads(invoke("check", net, bad, "--format", "json").stdout)["results"])

    # The HTML report: each section's data parses and holds the names exactly.
    html = page.read_text()
    data = [json.loads(block) for block in re.findall(r'<script type="application/json" class="data">(.*?)</script>', html, re.S)]
    assert len(data) == 1
    assert data[0]["steps"] == ["init", f"forward {layers[1]}", f"forward {layers[2]}"]

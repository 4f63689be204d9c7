"""`--html FILE`: one self-contained page with the memory timeline, the Gantt chart of
storage and the per-layer table — its figures exact, and drawn by a real browser
(headless Chromium; these tests fail, not skip, when it is missing)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import FIXTURES, SHARED

from caffemem.api.analyze import Options, analyze
from caffemem.api.optimize import OptimizeSettings, optimize
from caffemem.cli import main
from caffemem.report.html import (
    MAX_CLASS_ROWS,
    analysis_sections,
    chart_data,
    class_gantt,
    html_report,
    plan_sections,
    slot_gantt,
)
from caffemem.units import mib, mib_gib

LENET = str(FIXTURES / "examples" / "lenet_train.prototxt")
GOOGLENET = SHARED / "models" / "bvlc_googlenet" / "train_val.prototxt"
GOOGLENET_INPUT = "data=32,3,224,224"

# Five 1×1×4×4 float32 blobs (64 bytes of data, 16 of shape each): x → r1 → r2 → r3 → r4.
# r2's layer name tries to end the page's <script> early, r4's to change how the rest of
# it is parsed (<!--, and a U+2028 line separator); the page must still draw.
R4 = "r4<!--<script>\u2028"
CHAIN = """name: "chain"
layer { name: "x" type: "Input" top: "x" input_param { shape { dim: 1 dim: 1 dim: 4 dim: 4 } } }
layer { name: "r1" type: "ReLU" bottom: "x" top: "r1" }
layer { name: "r2</script><script>document.title='hijacked'</script>" type: "ReLU" bottom: "r1" top: "r2" }
layer { name: "r3" type: "ReLU" bottom: "r2" top: "r3" }
layer { name: "r4<!--<script>\\342\\200\\250" type: "ReLU" bottom: "r3" top: "r4" }
"""


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.fixture(scope="module")
def chain(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("chain") / "chain.prototxt"
    path.write_text(CHAIN)
    return str(path)


# ----------------------------------------------------------------------------- the figures
# (the series themselves are the API's: tests/api/test_timeline.py)


def test_timeline_ends_at_the_figures_the_terminal_gives_on_a_real_net():
    result = optimize(LENET, Options(), OptimizeSettings())
    for phase, section in zip(result.phases, plan_sections(result)):
        timeline, totals = section.timeline, phase.totals()
        assert timeline.allocated[-1] == totals["stock"] == phase.stock.total_bytes
        assert timeline.planned[-1] == totals["planned"]
        assert timeline.lower_bound == totals["lower_bound"]
        assert max(timeline.live) <= timeline.lower_bound


def test_in_gpu_mode_the_analysis_timeline_is_the_cards(chain):
    options = Options(phase="TEST", device="gpu")
    analysis = analyze(chain, options)
    (section,) = analysis_sections(analysis, options)
    device = analysis.nets[0].device
    # Step 0 holds the context and Net::Init's copies; each ReLU's Forward cudaMallocs its top (64 B).
    assert section.timeline.allocated[-1] == device.device_bytes
    assert [b - a for a, b in zip(section.timeline.allocated, section.timeline.allocated[1:])] == [layer.device[1] for layer in device.layers[1:]]
    assert section.on_card and dict(section.facts)["on the card"].startswith(mib_gib(device.device_bytes))


def test_in_gpu_mode_the_plan_page_gives_the_terminals_figures(chain):
    result = optimize(chain, Options(phase="TEST", device="gpu"), OptimizeSettings())
    (phase,), (section,) = result.phases, plan_sections(result)
    totals, facts = phase.totals(), dict(section.facts)
    assert section.timeline.allocated[-1] == totals["stock"] == phase.devices.stock.device_bytes
    assert section.timeline.planned[-1] == totals["planned"] == phase.devices.planned.device_bytes
    assert section.timeline.lower_bound == totals["lower_bound"]
    assert facts["stock Caffe"] == mib_gib(totals["stock"]) and facts["lower bound"] == mib(totals["lower_bound"])
    assert chart_data(section)["lowerBoundText"] == mib(totals["lower_bound"])


@pytest.mark.skipif(not GOOGLENET.is_file(), reason="../shared (models and ground truth) is not beside the repo")
def test_the_plan_pages_largest_layers_are_what_each_layer_holds_not_its_slot():
    options = Options(phase="TRAIN", inputs={"data": (32, 3, 224, 224)}, device="gpu")
    (section,) = plan_sections(optimize(str(GOOGLENET), options, OptimizeSettings()))
    conv1 = next(size for _, name, _, size in section.top_layers if name == "conv1/7x7_s2")
    # analyze gives conv1/7x7_s2 122.07 MiB on the card; its packed slot is 764.06 MiB.
    assert mib(conv1) == "122.07 MiB" == mib(analyze(str(GOOGLENET), options).nets[0].device.layers[2].device_total)


def test_slot_gantt_draws_each_member_over_the_steps_it_is_live(chain):
    phase = optimize(chain, Options(phase="TEST"), OptimizeSettings(strategy="best-fit")).phases[0]
    rows = slot_gantt(phase.timeline, phase.plan_data).rows
    assert [row.label for row in rows] == ["slot 0 · 64 B", "slot 1 · 64 B"]
    assert [[(bar.first, bar.last, bar.top, bar.height, bar.style) for bar in row.bars] for row in rows] == [
        [(1, 2, 0.0, 1.0, "data"), (3, 4, 0.0, 1.0, "data")],
        [(2, 3, 0.0, 1.0, "data")],
    ]
    assert rows[0].bars[0].title == "r1 (data) · 64 B at offset 0 B of slot 0 · steps 1–2 (forward r1 → forward r2</script><script>document.title='hijacked'</script>)"


def test_packed_slot_draws_members_as_bands_at_their_byte_offsets():
    phase = optimize(LENET, Options(phase="TRAIN"), OptimizeSettings(strategy="auto")).phases[0]
    assert phase.strategy == "packed"
    (row,) = slot_gantt(phase.timeline, phase.plan_data).rows
    slot_bytes = phase.plan_data.slot_bytes[0]
    assert row.bytes == slot_bytes == 3686400
    bands = {bar.title.split(" · ")[0]: (bar.top, bar.height) for bar in row.bars}
    assert bands["conv1 (data)"] == (737280 / slot_bytes, 2949120 / slot_bytes)
    assert bands["pool1 (diff)"] == (2949120 / slot_bytes, 737280 / slot_bytes)
    assert len(bands) == len(phase.plan_data.assign) == 12


def test_slot_gantt_shows_only_the_largest_slots_and_says_so():
    phase = optimize(LENET, Options(phase="TRAIN"), OptimizeSettings(strategy="best-fit")).phases[0]
    slots = phase.plan_data.slot_bytes
    gantt = slot_gantt(phase.timeline, phase.plan_data, max_rows=2)
    largest = sorted(slots.values(), reverse=True)[:2]
    assert sorted((row.bytes for row in gantt.rows), reverse=True) == largest
    assert "Showing the 2 largest slots" in gantt.note and f"{len(slots)} shared slots" in gantt.note


def test_class_gantt_shows_the_largest_classes_in_order_of_first_touch():
    gantt = class_gantt(analyze(LENET, Options()).nets[0].timeline, max_rows=3)
    assert [(row.label, row.bytes) for row in gantt.rows] == [("5:fc1#0:data", 1600000), ("conv1:data", 2949120), ("conv1:diff", 2949120)]
    # Pale: what Caffe holds (first touch to the end); dark: when the bytes hold a live value.
    assert [[(bar.first, bar.last, bar.style) for bar in row.bars] for row in gantt.rows] == [
        [(0, 16, "held"), (0, 12, "param")],
        [(1, 16, "held"), (1, 2, "data")],
        [(15, 16, "held"), (15, 16, "diff")],
    ]
    assert gantt.note.startswith("The 3 largest of the 55 storage classes")


# ----------------------------------------------------------------------------- the command


def test_analyze_html_writes_one_page_atomically(tmp_path):
    page = tmp_path / "report.html"
    result = run("analyze", LENET, "--html", page)
    assert result.exit_code == 0, result.output
    text = page.read_text()
    assert text.startswith("<!DOCTYPE html>") and text.rstrip().endswith("</html>")
    assert "logs &#x27;Memory required for data: 5169924&#x27;" in text and "lenet_example (TRAIN)" in text
    assert [p.name for p in tmp_path.iterdir()] == ["report.html"]  # no temporary left behind


def test_optimize_html_leaves_json_on_stdout_one_document(tmp_path):
    page = tmp_path / "plan.html"
    result = subprocess.run([sys.executable, "-m", "caffemem", "optimize", LENET, "--json", "--html", str(page)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["phases"][0]["phase"] == "TRAIN"
    assert result.stderr == f"wrote {page}\n"
    assert page.read_text().count('<section class="net"') == 2  # TRAIN and TEST


def test_html_into_a_missing_directory_is_one_error_line(tmp_path):
    result = run("analyze", LENET, "--html", tmp_path / "no" / "such" / "report.html")
    assert result.exit_code == 2
    assert "cannot write" in result.output and "Traceback" not in result.output


def test_page_loads_nothing_from_outside(tmp_path):
    text = html_report(optimize(LENET, Options(), OptimizeSettings()))
    for outside in ("<link", " src=", "url(", "@import", "https://"):
        assert outside not in text
    assert {line.strip() for line in text.splitlines() if "http://" in line} == {'var NS = "http://www.w3.org/2000/svg", W = 1200, LEFT = 210, RIGHT = 20;'}


def test_names_are_escaped_in_the_table_and_the_chart_data(chain):
    text = html_report(analyze(chain, Options(phase="TEST")), Options(phase="TEST"))
    assert "r2&lt;/script&gt;&lt;script&gt;" in text
    assert text.count("</script>") == 2  # the chart data's and the drawing script's


def test_the_chart_data_parses_back_to_the_names_exactly(chain):
    text = html_report(analyze(chain, Options(phase="TEST")), Options(phase="TEST"))
    (data,) = re.findall(r'<script type="application/json" class="data">(.*?)</script>', text, re.S)
    assert json.loads(data)["steps"][-2:] == ["forward r3", f"forward {R4}"]  # "<\!--" was no JSON: JSON.parse threw, no charts


# ----------------------------------------------------------------------------- in a browser

CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1280,2000",
)


def chromium() -> str:
    """The browser, or a failing test that says how to get it (CI installs it: .ci/run)."""
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    if os.access("/usr/bin/chromium", os.X_OK):
        return "/usr/bin/chromium"
    pytest.fail("headless Chromium is needed to check the HTML report and was not found: install it with `apt-get install -y chromium` (.ci/run does this)")


def dump_doms(pages: list[Path], scratch: Path) -> dict[Path, str]:
    """Each page's DOM after its scripts ran, the browsers running side by side."""
    browser = chromium()
    running = {}
    for i, page in enumerate(pages):
        profile = scratch / f"profile{i}"
        command = [browser, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--dump-dom", page.resolve().as_uri()]
        running[page] = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    doms = {}
    for page, process in running.items():
        out, _ = process.communicate(timeout=120)
        assert process.returncode == 0, f"chromium failed on {page}"
        doms[page] = out
    return doms


class ChartCounts(HTMLParser):
    """Per chart <div> (in document order): its kind, data-rendered, and how many SVG
    rect and path elements it holds."""

    def __init__(self) -> None:
        super().__init__()
        self.charts: list[dict] = []
        self.depth = 0  # <div> nesting inside the current chart; 0: outside any

    def handle_starttag(self, tag, attrs):
        attributes = dict(attrs)
        if tag == "div" and self.depth:
            self.depth += 1
        elif tag == "div" and "chart" in (attributes.get("class") or "").split():
            kind = "timeline" if "timeline" in attributes["class"] else "gantt"
            self.charts.append({"kind": kind, "rendered": attributes.get("data-rendered"), "rect": 0, "path": 0})
            self.depth = 1
        elif self.depth and tag in ("rect", "path"):
            self.charts[-1][tag] += 1

    def handle_endtag(self, tag):
        if tag == "div" and self.depth:
            self.depth -= 1


def charts_of(dom: str) -> list[dict]:
    parser = ChartCounts()
    parser.feed(dom)
    return parser.charts


@pytest.fixture(scope="module")
def browser_pages(tmp_path_factory, chain):
    """The reports the browser opens: the fixture nets always, GoogLeNet with ../shared;
    each with the Python-side sections, to compare what was drawn with what was meant."""
    where = tmp_path_factory.mktemp("html")
    reports = {
        "lenet analyze": (["analyze", LENET], lambda: analysis_sections(analyze(LENET, Options()), Options())),
        "lenet optimize": (["optimize", LENET, "--share-buffers"], lambda: plan_sections(optimize(LENET, Options(), OptimizeSettings(share_buffers=True)))),
        "chain optimize": (["optimize", chain, "--phase", "TEST"], lambda: plan_sections(optimize(chain, Options(phase="TEST"), OptimizeSettings()))),
    }
    if GOOGLENET.is_file():
        options = Options(inputs={"data": (32, 3, 224, 224)})
        train = Options(phase="TRAIN", inputs=options.inputs)
        reports["googlenet analyze"] = (["analyze", GOOGLENET, "--input", GOOGLENET_INPUT], lambda: analysis_sections(analyze(str(GOOGLENET), options), options))
        reports["googlenet optimize"] = (["optimize", GOOGLENET, "--input", GOOGLENET_INPUT, "--phase", "TRAIN"], lambda: plan_sections(optimize(str(GOOGLENET), train, OptimizeSettings())))
        on_card = Options(phase="TRAIN", inputs=options.inputs, device="gpu")
        reports["googlenet optimize gpu"] = (
            ["optimize", GOOGLENET, "--input", GOOGLENET_INPUT, "--phase", "TRAIN", "--device", "gpu"],
            lambda: plan_sections(optimize(str(GOOGLENET), on_card, OptimizeSettings())),
        )
    pages = {}
    for name, (args, _) in reports.items():
        page = where / (name.replace(" ", "_") + ".html")
        result = run(*args, "--json", "--html", page)
        assert result.exit_code == 0, result.output
        pages[name] = page
    doms = dump_doms(list(pages.values()), where)
    return {name: (doms[pages[name]], sections(), pages[name]) for name, (_, sections) in reports.items()}


def assert_both_charts_drawn(dom: str, sections) -> None:
    charts = charts_of(dom)
    assert [c["kind"] for c in charts] == ["timeline", "gantt"] * len(sections)
    for section, timeline, gantt in zip(sections, charts[0::2], charts[1::2]):
        series = 2 if section.timeline.planned is None else 3
        bound = section.timeline.lower_bound is not None
        assert timeline["rendered"] == str(series + bound), f"timeline of {section.title} not drawn"
        assert timeline["path"] >= series
        bars = sum(len(row.bars) for row in section.gantt.rows)
        assert bars > 0 and gantt["rendered"] == str(bars), f"Gantt chart of {section.title} not drawn"
        assert gantt["rect"] >= bars


def test_browser_draws_both_charts_of_an_analysis(browser_pages):
    dom, sections, _ = browser_pages["lenet analyze"]
    assert_both_charts_drawn(dom, sections)


def test_browser_draws_both_charts_of_each_planned_phase(browser_pages):
    dom, sections, _ = browser_pages["lenet optimize"]
    assert [s.title for s in sections] == ["lenet_example (TRAIN)", "lenet_example (TEST)"]
    assert_both_charts_drawn(dom, sections)


def test_a_layer_name_cannot_inject_script_into_the_page(browser_pages):
    dom, sections, _ = browser_pages["chain optimize"]
    assert_both_charts_drawn(dom, sections)
    assert "<title>Memory plan for" in dom and "hijacked" not in dom.split("</title>")[0]


@pytest.mark.skipif(not GOOGLENET.is_file(), reason="../shared (models and ground truth) is not beside the repo")
def test_browser_draws_googlenets_analysis_with_the_gantt_capped(browser_pages):
    dom, sections, page = browser_pages["googlenet analyze"]
    assert_both_charts_drawn(dom, sections)
    assert len(sections[0].gantt.rows) == MAX_CLASS_ROWS
    assert page.stat().st_size < 1_000_000


@pytest.mark.skipif(not GOOGLENET.is_file(), reason="../shared (models and ground truth) is not beside the repo")
def test_browser_draws_googlenets_plan(browser_pages):
    dom, sections, page = browser_pages["googlenet optimize"]
    assert_both_charts_drawn(dom, sections)
    assert page.stat().st_size < 1_000_000


def test_the_page_shows_where_the_memory_goes_in_parts_that_add_up_and_the_largest_layers(browser_pages):
    dom, sections, _ = browser_pages["lenet analyze"]
    (section,) = sections
    assert sum(size for _, size in section.causes) == analyze(LENET, Options()).nets[0].memory.total_bytes
    assert dom.count('class="cause ') == len(section.causes)
    # LeNet TRAIN: pool1 4.22 MiB, fc1 3.37 MiB, conv1 3.07 MiB lead the layers.
    assert [name for _, name, _, _ in section.top_layers[:3]] == ["pool1", "fc1", "conv1"]
    assert len(section.top_layers) == 8 and "The 8 largest layers" in dom  # relu1 (in place) allocates nothing


def test_the_page_names_the_caffemem_version_and_the_options_used(browser_pages):
    from caffemem import __version__

    dom, _, _ = browser_pages["lenet optimize"]
    assert f"caffemem {__version__}" in dom and "Options: --phase (default) --dtype float32 --device cpu --engine caffe --strategy auto --share-buffers." in dom


# Appended to a copy of a page: measures, once the page is laid out, whether each per-layer
# table fits the window (no scrolling sideways, no figure cut off, no tiny type).
MEASURE = """<script>
(function () {
  var doc = document.documentElement, out = { viewport: doc.clientWidth, page: doc.scrollWidth, tables: [] };
  document.querySelectorAll("details").forEach(function (d) { d.open = true; });
  document.querySelectorAll("table.layers").forEach(function (table) {
    var box = table.getBoundingClientRect(), clipped = 0, smallest = 99;
    table.querySelectorAll("td, th").forEach(function (cell) {
      if (cell.scrollWidth > cell.clientWidth + 1) clipped++;
      smallest = Math.min(smallest, parseFloat(getComputedStyle(cell).fontSize));
    });
    out.tables.push({ columns: table.rows[1].cells.length, right: box.right, scroll: table.parentElement.scrollWidth - table.parentElement.clientWidth, clipped: clipped, smallest: smallest });
  });
  var pre = document.createElement("pre");
  pre.id = "layout";
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
})();
</script>"""


@pytest.mark.parametrize("width", [1400, 1024])
def test_the_per_layer_table_is_readable_in_a_1400_and_a_1024_pixel_window(browser_pages, tmp_path, width):
    names = [name for name in ("lenet optimize", "googlenet optimize gpu") if name in browser_pages]
    browser = chromium()
    for name in names:
        _, _, page = browser_pages[name]
        measured = tmp_path / page.name
        measured.write_text(page.read_text().replace("</body>", MEASURE + "</body>"))
        command = [browser, *CHROMIUM_FLAGS[:-1], "--hide-scrollbars", f"--window-size={width},900", f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom", measured.as_uri()]
        dom = subprocess.run(command, check=True, capture_output=True, text=True, timeout=120).stdout
        layout = json.loads(dom.split('<pre id="layout">')[1].split("</pre>")[0])
        assert layout["viewport"] == width and layout["page"] <= width, f"{name}: the page scrolls sideways at {width} pixels"
        for table in layout["tables"]:
            # #, layer, 5 categories (a CPU run: lenet), SetUp, Forward, Backward, the plan's
            # two steps, and in GPU mode the host's bytes instead of the categories.
            assert table["columns"] == (8 if name.endswith("gpu") else 12)
            assert table["scroll"] == 0 and table["right"] <= width, f"{name}: the per-layer table runs off a {width}-pixel window"
            assert table["clipped"] == 0 and table["smallest"] >= 11


def test_a_solvers_page_opens_with_the_training_process_and_one_caveat_in_gpu_mode():
    solver = str(FIXTURES / "check" / "models" / "lenet_solver.prototxt")
    options = Options(device="gpu")
    analysis = analyze(solver, options)
    text = html_report(analysis, options)
    process = analysis.process
    header = text.split("</header>")[0]
    # LeNet's solver on one card: train net, SGD history, the test net without its shared parameters.
    assert f'<p class="answer">Training on one card: {mib_gib(process.total_bytes)}, all alive at once — train net {mib(process.train_bytes)}' in header
    assert text.count("kernels loaded lazily not counted") == 1 and "user guide: GPU mode (docs/gpu-mode.md)" in header
    assert "../shared" not in text and "benchmarks/" not in text


@pytest.mark.skipif(not GOOGLENET.is_file(), reason="../shared (models and ground truth) is not beside the repo")
def test_in_gpu_mode_the_live_values_are_the_cards_not_the_cpu_runs():
    # FCN-8s deploy: the CPU run's im2col buffers (2.2 GB, which a cuDNN build never
    # allocates) are shareable; counted against the card they took its live bytes below 0.
    options = Options(device="gpu")
    result = optimize(str(SHARED / "models" / "fcn_voc-fcn8s" / "deploy.prototxt"), options, OptimizeSettings(share_buffers=True))
    (section,) = plan_sections(result)  # the result knows its own options (issue 34: without them, the merged run's)
    # The live values are the planned run's on the card (issue 34 item 10): at step 0 it
    # holds what Net::Init put there, no slot yet, and no value is live.
    card = result.phases[0].devices.planned
    assert min(section.timeline.live) == section.timeline.planned[0] == card.device_bytes - sum(layer.device[1] + layer.device[2] for layer in card.layers)


def test_in_gpu_mode_the_table_marks_the_largest_step_on_the_card():
    options = Options(device="gpu")
    (section,) = analysis_sections(analyze(LENET, options), options)
    # The terminal's line: the Forward of layer 1 'conv1' allocates 3.01 MiB on the card.
    marked = [row for row in section.table.split("<tr>") if "◀ largest step" in row]
    assert len(marked) == 1 and "<b>conv1</b>" in marked[0]


def test_in_gpu_mode_the_per_layer_table_states_the_gpu_runs_figures_only():
    # Issue 34 item 10: the GPU page's table set a CPU run's categories ("by category (a
    # CPU run)") beside the card's steps.  LeNet's conv1 on the card: SetUp nothing,
    # Forward 3.01 MiB (its top and column buffer), Backward its diffs; the host its share.
    options = Options(device="gpu")
    (section,) = analysis_sections(analyze(LENET, options), options)
    head = section.table.split("</thead>")[0]
    assert "CPU run" not in section.table and "by category" not in head and "activations" not in head
    assert re.findall(r'<th colspan="(\d+)" class="group">([^<]*)</th>', head) == [("2", ""), ("3", "allocated on the card"), ("1", "on the host")]
    device = analyze(LENET, options).nets[0].device
    conv1 = next(row for row in section.table.split("<tr>") if "<b>conv1</b>" in row)
    figures = [int(n.replace(",", "")) for n in re.findall(r'title="([\d,]+) bytes"', conv1)]
    assert figures == [n for n in (*device.layers[1].device, device.layers[1].host_total) if n]


def test_the_pages_columns_of_figures_stay_in_mib():
    options = Options(device="gpu")
    text = html_report(analyze(LENET, options), options)
    # LeNet's loss layer puts 7,944 B on the card: "0.01 MiB" beside the others, not "7,944 B".
    summary = text.split('<div class="summary">')[1].split("</div></div>")[0]
    figures = re.findall(r'title="[\d,]+ bytes">([^<]*)</td>', summary)
    # 8 causes on the device (the library handles as measured among them), 7 on the host.
    assert len(figures) == 8 + 7 and all(figure.endswith(" MiB") for figure in figures) and "0.01 MiB" in figures


def test_the_options_line_names_every_flag_that_changes_the_figures():
    from caffemem.report.html import options_text

    options = Options(device="gpu", gpus=2, context_bytes=512 * 2**20, batch=8)
    settings = OptimizeSettings(strategy="best-fit", exclude=("fc1",), share_buffers=True, inplace=True)
    assert options_text(options, settings) == (
        "--phase (default) --dtype float32 --device gpu --engine cudnn --batch 8 --gpus 2 --context-mib 512 "
        "--strategy best-fit --exclude-blob fc1 --share-buffers --inplace"
    )


def test_the_options_line_gives_inputs_and_overrides_as_typed():
    from caffemem.report.html import options_text

    options = Options(inputs={"data": (-1, 3, -1, -1), "im_info": (1, 3)}, overrides=frozenset({"im_info"}))
    assert options_text(options).startswith("--phase (default) --input data=_,3,_,_ --override-input im_info=1,3 --dtype")

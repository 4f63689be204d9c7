"""The hostile campaign (benchmarks/hostile.py) on every CI run: a seeded sample of every
surface keeps the contract, its judges recognise each breach they count, and the tables of
docs/hostile.md are the summary of the last full campaign."""

from __future__ import annotations

import json
import random
import stat
from pathlib import Path

import pytest
from conftest import load_script, needs_shared

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "hostile.py"
SUMMARY = REPO / "fixtures" / "hostile" / "summary.json"

hostile = load_script(SCRIPT)

# Bounded for CI (2 shared cores): 12 cases of each of the first campaign's six families and
# 4 of each of issue 31's eleven surfaces, about a minute; `python benchmarks/hostile.py` runs 7,000.
SAMPLE_SEED = 20261126
ISSUE_31 = [name for name in hostile.SURFACES if name not in hostile.OLD_FAMILIES]


@needs_shared
def test_a_seeded_sample_of_every_surface_finds_no_defect():
    cases = hostile.sample(SAMPLE_SEED)
    summary = hostile.run_cases(cases, limit=20.0, jobs=2)
    assert summary["set_up_failures"] == []
    assert summary["defects"] == [], "\n".join(f"case {d['case']} ({d['family']}): {d['defects']}\n  {d['note']}\n  {d['command']}\n  {d['stderr']}" for d in summary["defects"])
    # Which exit codes it sees depends on timing (a Ctrl-C after a random delay may come
    # after the run has ended), so that is not asserted: every code it sees is judged above.
    assert {name: row["cases"] for name, row in summary["surfaces"].items()} == {name: 12 if name in hostile.OLD_FAMILIES else 4 for name in hostile.SURFACES}
    assert set(summary["exit_codes"]) <= {"0", "1", "2", "130"}


def test_the_sample_draws_every_surface_and_the_campaign_each_in_its_share():
    assert {case.family for case in hostile.sample(SAMPLE_SEED)} == set(hostile.SURFACES)
    drawn = {case.family for case in hostile.generate(0, 400)}
    assert drawn == set(hostile.SURFACES) and len(ISSUE_31) == 11
    assert sum(weight for weight, _ in hostile.SURFACES.values()) == 100 and hostile.DEFAULT_CASES >= 7000


def test_the_same_seed_gives_the_same_cases():
    first, again, other = hostile.generate(7, 40), hostile.generate(7, 40), hostile.generate(8, 40)
    assert first == again and first != other


def _case(**changes):
    return hostile.Case(0, "mutated", ("optimize", "net.prototxt", "-o", "out.prototxt"), (("net.prototxt", b"x"),), outputs=("out.prototxt",), **changes)


def _judge(case, before, after, code, stderr="", tmp_path=Path(".")):
    return hostile.judge(case, tmp_path, before, after, code, False, stderr)


@pytest.mark.parametrize(
    ("code", "stderr", "found"),
    [
        (3, "caffemem: internal error: ValueError: x (set CAFFEMEM_DEBUG=1 for details)", "exit code: 3"),
        (1, 'Traceback (most recent call last):\n  File "x"\nKeyError: 1', "traceback"),
        (2, "caffemem: error: one\ncaffemem: error: two", "stderr lines: 2"),
        (120, "Exception ignored on flushing sys.stdout", "exit code: 120"),
        (130, "caffemem: interrupted", "exit code: 130 without Ctrl-C"),
    ],
)
def test_the_judge_counts_each_way_a_run_may_end_badly(code, stderr, found):
    assert any(defect.startswith(found) for defect in _judge(_case(), {}, {}, code, stderr))


def test_the_judge_counts_an_altered_input_a_file_written_on_failure_and_a_leftover():
    before = {"net.prototxt": (0o100644, "a")}
    after = {"net.prototxt": (0o100644, "b"), "out.prototxt": (0o100644, "c"), ".out.prototxt.x1.tmp": (0o100600, "d")}
    defects = _judge(_case(), before, after, 2)
    assert "altered input: net.prototxt" in defects
    assert "written on failure: exit 2: out.prototxt" in defects
    assert "temporary file left: .out.prototxt.x1.tmp" in defects


def test_an_api_call_that_raises_anything_but_caffememerror_is_a_defect():
    case = hostile.Case(0, "api", ("caffemem.analyze(5)",), runner="api")
    assert _judge(case, {}, {}, 3, 'Traceback (most recent call last):\n  File "x"\nTypeError: bad') == ["not a CaffememError: TypeError: bad"]
    assert _judge(case, {}, {}, 2, "CaffememError: expected a path") == []


def test_the_round_trip_allows_only_our_block_and_a_blanked_old_one():
    source = b'name: "n"\r\nmem_param { x: 1 }\r\n'
    blanked = b'name: "n"\r\n                  \r\n'
    assert hostile.round_trip_problem(source, source + b"mem_param {\r\n}\r\n") is None
    assert hostile.round_trip_problem(source, blanked + b"mem_param {\r\n}\r\n") is None
    assert hostile.round_trip_problem(source, source.replace(b"\r\n", b"\n") + b"mem_param {\n}\n").startswith("byte 9 changed")
    assert hostile.round_trip_problem(source, source + b"layer {}") == "no mem_param block after the input's bytes"


def test_a_batch_rewrite_may_change_numbers_to_the_batch_and_nothing_else():
    source = b"layer {\n  data_param { batch_size: 64 }\n  crop_size: 227\n}\n"
    rewritten = source.replace(b"64", b"3")
    assert hostile.batch_rewrite_problem(source, rewritten + b"mem_param {\n}\n", "3") is None
    assert hostile.batch_rewrite_problem(source, source.replace(b"227", b"8") + b"mem_param {\n}\n", "3") == "b'227' became b'8'"
    assert hostile.batch_rewrite_problem(source, rewritten.replace(b"crop", b"drop") + b"mem_param {\n}\n", "3") == "b' }\\n  crop_size: ' became b' }\\n  drop_size: '"
    assert hostile.batch_rewrite_problem(source, rewritten, "3") == "no mem_param block after the input's bytes"


# ---- the judges of issue 31's surfaces: each can fail ---------------------------------------------


def _surface(case, before=None, after=None, outside_before=None, outside_after=None, code=0, stdout="", stderr=""):
    return hostile.surface_judges(case, Path("."), Path("."), before or {}, after or {}, outside_before or {}, outside_after or {}, code, stdout, stderr, Path("."), 1.0)


def test_a_marker_written_outside_by_planted_code_is_a_defect():
    case = hostile.Case(0, "cwd", ("analyze", "net.prototxt"))
    assert _surface(case, outside_after={"PWNED-grpc_tools": (0o100644, "x")}) == ["written outside: PWNED-grpc_tools"]
    assert _surface(case, outside_before={"precious.txt": (0o100644, "a")}, outside_after={"precious.txt": (0o100644, "b")}) == ["written outside: precious.txt"]


def test_a_replaced_link_a_new_setuid_file_and_a_file_the_patch_never_writes_are_defects():
    case = hostile.Case(0, "patch", ("patch", "caffe"), checks=("links kept", "only outputs:caffe/"), outputs=("caffe/src/caffe/net.cpp",))
    link, regular = (stat.S_IFLNK | 0o777, "/elsewhere/net.cpp"), (stat.S_IFREG | 0o644, "hash")
    assert _surface(case, before={"caffe/src/caffe/net.cpp": link}, after={"caffe/src/caffe/net.cpp": regular}) == ["link replaced: caffe/src/caffe/net.cpp"]
    assert _surface(case, after={"caffe/pwned.sh": (stat.S_IFREG | 0o4755, "h")}) == ["setuid file: caffe/pwned.sh mode 0o4755", "created: caffe/pwned.sh"]
    assert _surface(case, after={"caffe/src/caffe/net.cpp": regular}) == []


def test_exit_0_is_a_defect_where_the_input_must_be_refused_or_the_budget_applies():
    assert _surface(hostile.Case(0, "patch", ("patch", "caffe"), checks=("refused",))) == ["accepted: exit 0 where the input must be refused"]
    assert _surface(hostile.Case(0, "config", ("check", "net.prototxt"), checks=("gate",))) == ["gate passed: the config's budget was not applied"]
    assert _surface(hostile.Case(0, "config", ("check", "net.prototxt"), checks=("gate",)), code=1) == []


def test_a_data_source_that_gained_a_file_is_a_defect():
    case = hostile.Case(0, "sources", ("analyze", "net.prototxt"), checks=("source untouched",))
    assert _surface(case, after={"db/LOG": (stat.S_IFREG | 0o644, "h")}) == ["written into the source: db/LOG"]


def test_caffes_parser_must_read_the_block_a_trailing_comment_with_a_lone_cr_would_swallow():
    net = b'name: "n"\nlayer { name: "d" type: "Input" top: "d" input_param { shape { dim: 1 } } }\n# end\r'
    block = b"mem_param {\n  optimize_train: true\n}\n"
    assert hostile.caffe_reads(net, net + block) == 'Caffe\'s parser cannot read the output: 4:3 : Message type "caffe.NetParameter" has no field named "optimize_train".'
    assert hostile.caffe_reads(net, net + b"\n" + block) is None
    assert hostile.caffe_reads(net, net + b"\n# mem_param {}\n") == "the output's mem_param is not read by Caffe's parser (a comment swallows it)"


def test_a_recompute_entry_naming_a_layer_name_two_layers_share_is_a_defect(tmp_path):
    layers = 'layer { name: "dup" type: "ReLU" bottom: "a" top: "a" }\nlayer { name: "dup" type: "ReLU" bottom: "b" top: "b" }\nlayer { name: "c" type: "ReLU" bottom: "b" top: "b" }\n'
    (tmp_path / "out.prototxt").write_text(layers + 'mem_param {\n  recompute { phase: TRAIN layer: "dup" before: "c" }\n}\n')
    assert hostile.duplicate_reference(tmp_path / "out.prototxt") == "plan names a duplicate layer: 'dup' (2 layers are called so)"
    (tmp_path / "out.prototxt").write_text(layers + 'mem_param {\n  recompute { phase: TRAIN layer: "c" before: "c" }\n}\n')
    assert hostile.duplicate_reference(tmp_path / "out.prototxt") is None


def test_the_test_table_is_relabelled_as_the_train_table_to_be_replayed_with_backward():
    block = b'mem_param {\n  # caffemem made-for TEST: {"phase": "TEST"}\n  optimize_train: false\n  optimize_test: true\n  slot {\n    id: 0\n    phase: TEST\n  }\n}\n'
    relabelled = hostile.relabel_as_train(b'name: "n"\n' + block)
    assert relabelled == b'name: "n"\nmem_param {\n  # caffemem made-for TRAIN: {"phase": "TRAIN"}\n  optimize_train: true\n  optimize_test: false\n  slot {\n    id: 0\n    phase: TRAIN\n  }\n}\n'
    assert hostile.relabel_as_train(b'name: "n"\n') is None


def test_an_unsafe_edit_moves_one_member_onto_another_and_a_record_edit_changes_one_field():
    table = b'mem_param {\n  # caffemem made-for TRAIN: {"batch": 4, "phase": "TRAIN"}\n  slot {\n    id: 0\n    bytes: 64\n    member {\n      blob: "a"\n      kind: "diff"\n      offset: 0\n    }\n    member {\n      blob: "b"\n      kind: "diff"\n      offset: 32\n    }\n    phase: TRAIN\n  }\n}\n'
    moved = hostile.unsafe_edit(table, random.Random(0), diffs=True)
    assert moved.count(b"offset: 0") == 2 or moved.count(b"offset: 32") == 2
    assert b'"phase": "TEST"' in hostile.record_edit(table, (("phase", "TEST"),), which="TRAIN")
    assert hostile.record_edit(table, (("phase", "TEST"),), which="TEST") == table
    plan = {"phases": [{"phase": "TRAIN", "made_for": {"phase": "TRAIN"}, "plan": {"assign": [{"slot": 0, "kind": "diff", "offset": 0}, {"slot": 0, "kind": "diff", "offset": 32}]}}]}
    edited = json.loads(hostile.unsafe_edit(json.dumps(plan).encode(), random.Random(0), json_plan=True))
    assert {a["offset"] for a in edited["phases"][0]["plan"]["assign"]} in ({0}, {32})
    assert json.loads(hostile.record_edit(json.dumps(plan).encode(), (("level", 2147483648),), json_plan=True))["phases"][0]["made_for"]["level"] == 2147483648


@pytest.mark.parametrize(
    ("judge", "bad", "good"),
    [
        ("markdown_problem", "| `net` | grew: conv1<img src=x onerror=alert(1)> +1 B |", "| `net` | grew: `conv1<img src=x onerror=alert(1)>` +1 B |"),
        ("markdown_problem", "layer @octocat grew", "layer `@octocat` grew"),
        ("markdown_problem", "layer a<!-- grew", "layer a&lt;!-- grew"),
        ("github_problem", "::error file=n,line=1::layer x\n::warning::injected\n", "::error file=n,line=1::layer x%0A::warning::injected\n"),
        ("html_problem", '<script type="application/json" class="data">{"a":"<\\!--"}</script>', '<script type="application/json" class="data">{"a":"\\u003c!--"}</script>'),
        ("html_problem", "<td>conv<img src=x onerror=alert(1)></td>", "<td>conv&lt;img src=x onerror=alert(1)&gt;</td>"),
        ("json_problem", '{"a": 1', '{"a": 1}'),
        ("junit_problem", "<testsuite><testcase name='\x1b'/></testsuite>", "<testsuite><testcase name='x'/></testsuite>"),
    ],
)
def test_each_output_format_judge_tells_a_payload_read_as_markup_from_one_escaped(judge, bad, good):
    assert getattr(hostile, judge)(bad) is not None and getattr(hostile, judge)(good) is None


def test_control_characters_on_the_terminal_are_defects():
    case = hostile.Case(0, "injection", ("analyze", "net.prototxt", "-v"))
    assert hostile.format_judges(case, Path("."), "layer conv1\x1b[31mRED\n", "") == ["raw control character on stdout: U+001B"]
    assert hostile.format_judges(case, Path("."), "", "caffemem: error: layer 'a\rSAFE'\n") == ["raw control character on stderr: U+000D"]
    assert hostile.format_judges(case, Path("."), "layer conv1\\x1b[31mRED\ttab\n", "") == []


def test_the_fake_caffe_tree_takes_the_patch_and_gives_its_bytes_back(tmp_path):
    from caffemem import runtime

    hostile.fake_caffe_tree(tmp_path / "caffe")
    original = {p: p.read_bytes() for p in (tmp_path / "caffe").rglob("*") if p.is_file()}
    assert runtime.apply_patch(tmp_path / "caffe").applied
    runtime.revert_patch(tmp_path / "caffe")
    assert {p: p.read_bytes() for p in (tmp_path / "caffe").rglob("*") if p.is_file()} == original


# ---- the summary and docs/hostile.md ------------------------------------------------------------------------


def test_the_summary_counts_runs_codes_and_defects_per_surface_and_reads_as_the_readmes_tables():
    ok = hostile.Result(0, "mutated", "caffemem analyze net.prototxt", 0, 0.1, 51_200, "", verified=True)
    hung = hostile.Result(1, "sources", "caffemem analyze net.prototxt", None, 20.0, 40_960, "", ["hang: still running after the time limit"])
    summary = hostile.summarize([ok, hung], 61.0)
    assert summary["exit_codes"] == {"0": 1, "killed": 1} and summary["hangs"] == 1 and summary["defective_runs"] == 1
    assert summary["surfaces"]["sources"] == {"cases": 1, "exit_codes": {"killed": 1}, "defective": 1, "defect_kinds": {"hang": 1}, "set_up_failures": 0, "seconds": 0.0}
    assert summary["tables_verified"] == 1 and summary["peak_memory_mib"] == 50.0
    table = hostile.markdown(summary)
    assert f"| sources | {hostile.SURFACES['sources'][1]} | 1 | killed: 1 | 1 (hang 1) |" in table
    assert "| mutated |" in table and "| hangs (past the time limit) | 1 |" in table and "| defective runs | 1 |" in table


def test_the_guides_tables_are_the_summary_of_the_last_full_campaign():
    # The tables live on the user guide's page of the campaign (issue 34: the README is a front door).
    summary = json.loads(SUMMARY.read_text())
    assert summary["runs"] >= 7000 and set(summary["surfaces"]) == set(hostile.SURFACES)
    assert hostile.markdown(summary) in (REPO / "docs" / "hostile.md").read_text()


def test_ctrl_c_before_mains_handler_is_start_up_and_after_it_a_defect():
    # The CI sample once met Ctrl-C inside caffemem/__init__.py, before __main__ can set
    # its handler: as uncatchable as Python's own start-up.
    case = hostile.Case(0, "signal", ("analyze", "net.prototxt"), interrupt_after=0.1, fresh=True)
    package = hostile.REPO / "caffemem"

    def traceback(*files: str) -> str:
        return "Traceback (most recent call last):\n" + "".join(f'  File "{name}", line 1, in <module>\n' for name in files) + "KeyboardInterrupt\n"

    assert hostile.interrupted_before_caffemem(case, traceback("<frozen runpy>", "/usr/lib/python3.11/site.py"))
    assert hostile.interrupted_before_caffemem(case, traceback("<frozen runpy>", str(package / "__init__.py"), str(package / "_version.py")))
    assert not hostile.interrupted_before_caffemem(case, traceback(str(package / "__main__.py"), str(package / "cli" / "__init__.py")))

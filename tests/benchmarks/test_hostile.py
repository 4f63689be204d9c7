"""The hostile campaign (benchmarks/hostile.py) on every CI run: a seeded sample of its
cases keeps the contract, and its judge recognises each breach it counts."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import load_script, needs_shared

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "hostile.py"


hostile = load_script(SCRIPT)

# Bounded for CI (2 shared cores): about a minute; `python benchmarks/hostile.py` runs 5,000.
SAMPLE_SEED, SAMPLE_CASES = 20261126, 120


@needs_shared
def test_a_seeded_sample_of_the_campaign_finds_no_defect():
    summary = hostile.campaign(SAMPLE_SEED, SAMPLE_CASES, limit=20.0, jobs=2)
    assert summary["runs"] == SAMPLE_CASES
    assert summary["defects"] == [], "\n".join(f"case {d['case']}: {d['defects']}\n  {d['command']}\n  {d['stderr']}" for d in summary["defects"])
    # The sample reaches every family.  Which exit codes it sees depends on timing (a
    # Ctrl-C after a random delay may come after the run has ended), so that is not asserted:
    # every code it sees is judged above, and the 5,000-case run in benchmarks/ counts them.
    assert set(summary["families"]) == {"mutated", "binary", "flags", "special", "environment", "signal"}
    assert set(summary["exit_codes"]) <= {"0", "1", "2", "130"}


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


def test_the_summary_counts_runs_codes_and_defects_and_reads_as_the_readmes_table():
    ok = hostile.Result(0, "mutated", "caffemem analyze net.prototxt", 0, 0.1, 51_200, "", verified=True)
    hung = hostile.Result(1, "special", "caffemem analyze /proc/kmsg", None, 60.0, 40_960, "", ["hang: still running after the time limit"])
    summary = hostile.summarize([ok, hung], 61.0)
    assert summary["exit_codes"] == {"0": 1, "killed": 1} and summary["hangs"] == 1 and summary["defective_runs"] == 1
    assert summary["tables_verified"] == 1 and summary["peak_memory_mib"] == 50.0
    table = hostile.markdown(summary)
    assert "| runs | 2 (mutated 1, special 1) |" in table and "| hangs (past the time limit) | 1 |" in table and "| defects | 1 |" in table

"""Every example the README, the user guide (``docs/*.md``) and the commands' --help show runs
as written, on the bundled fixtures (``fixtures/docs/``), and prints what its page shows
(issue 25 item 4; the guide, issue 34).

The conventions (which blocks run, which are outputs, ``...`` for elided lines) are in
``tests/tools/readme_examples.py``; ``python tests/tools/readme_examples.py --update``
rewrites the pages' shown outputs after a change of wording.
"""

from __future__ import annotations

import pytest
from conftest import REPO
from tools import readme_examples as docs

README_RUNS = docs.readme_runs((REPO / "README.md").read_text(encoding="utf-8"))
DOCUMENTED_RUNS = docs.documented_runs()
HELP_EXAMPLES = docs.help_examples()


def _run(examples: list[docs.Example]) -> None:
    if docs.needs_caffe_tree(examples) and docs.caffe_tarball() is None:
        pytest.skip(f"no Caffe source tree to patch in {docs.CAFFE_TARBALLS}")
    outcomes = docs.run_examples(examples)
    problems = [problem for outcome in outcomes for problem in [outcome.problem()] if problem]
    assert not problems, "\n\n".join(problems) + "\n\n(python tests/tools/readme_examples.py --update refreshes the pages' shown outputs)"
    assert len(outcomes) == len(examples)
    # Issue 34: each fits 80 columns, as run (COLUMNS=80, piped), machine formats exempt.
    for outcome in outcomes:
        if not any(flag in outcome.example.command for flag in docs.MACHINE_FORMATS):
            wide = docs.overlong(outcome.stdout) + docs.overlong(outcome.stderr, error_line=outcome.returncode != 0)
            assert not wide, f"`{outcome.example.command}` does not fit {docs.WIDTH} columns:\n" + "\n".join(wide)


@pytest.mark.parametrize("block, examples", DOCUMENTED_RUNS, ids=[block.where for block, _ in DOCUMENTED_RUNS])
def test_the_documented_example_runs_and_prints_what_its_page_shows(block, examples):
    _run(examples)


@pytest.mark.parametrize("name", sorted(HELP_EXAMPLES))
def test_the_help_examples_run_in_order(name):
    _run(HELP_EXAMPLES[name])


def test_every_command_shows_examples_in_its_help():
    assert all(HELP_EXAMPLES.values()), [name for name, examples in HELP_EXAMPLES.items() if not examples]


def test_the_readme_shows_a_transcript_and_the_sh_examples_are_run():
    # The transcripts compare their output; the quick start's `.venv/bin/caffemem` runs.
    assert {"console", "sh"} <= {block.kind for block, _ in README_RUNS}
    commands = [example.command for _, examples in README_RUNS for example in examples]
    assert ".venv/bin/caffemem analyze fixtures/examples/lenet_train.prototxt" in commands
    assert not any(command.startswith(("pip", "make", "git", "python3 -m venv")) for command in commands)


def test_the_guide_pages_examples_are_collected_with_the_readmes():
    pages = {block.page for block, _ in DOCUMENTED_RUNS}
    assert {"README.md", "docs/analyze.md", "docs/fit.md", "docs/api.md"} <= pages
    assert "python" in {block.kind for block, _ in DOCUMENTED_RUNS}  # the library's example, docs/api.md
    assert README_RUNS == [run for run in DOCUMENTED_RUNS if run[0].page == "README.md"]


def test_a_guide_page_names_its_blocks_by_its_path():
    [(block, _)] = docs.readme_runs("x\n```sh\ncaffemem --version\n```\n", "docs/fit.md")
    assert block.where == "docs/fit.md:2"


def test_the_documented_pages_are_the_readme_then_every_guide_page():
    assert docs.documented_pages() == [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def test_a_block_that_shows_caffemem_without_saying_what_it_is_is_refused():
    text = "```bash\ncaffemem analyze deploy.prototxt\n```\n"
    with pytest.raises(ValueError, match="README.md:1: a ```bash block shows a caffemem command"):
        docs.readme_runs(text)


def test_a_synopsis_and_prose_run_nothing():
    text = "Run `caffemem analyze NET`.\n\n```sh synopsis\ncaffemem analyze NET [--json]\n```\n\n```yaml\npaths: models\n```\n"
    assert docs.readme_runs(text) == []


def test_a_transcript_splits_into_commands_and_their_outputs():
    text = "intro\n```console\n$ caffemem --version\ncaffemem, version 1\n\n$ ls\na\n...\nz\n```\n"
    [(_, examples)] = docs.readme_runs(text)
    assert [(e.command, e.shown, e.shown_at) for e in examples] == [
        ("caffemem --version", ("caffemem, version 1",), (3, 4)),  # 0-based README lines of the output
        ("ls", ("a", "...", "z"), (6, 9)),
    ]


def test_sh_blocks_run_only_the_caffemem_parts():
    text = "```sh\npython3 -m venv .venv && .venv/bin/caffemem analyze a.prototxt --json > a.json   # note\nmake -j4; caffemem patch ~/caffe\n```\n"
    [(_, examples)] = docs.readme_runs(text)
    assert [e.command for e in examples] == [".venv/bin/caffemem analyze a.prototxt --json > a.json", "caffemem patch ~/caffe"]


def test_an_elided_output_matches_its_first_and_last_lines_only():
    actual = ["a", "b", "c", "d"]
    assert docs.output_matches(("a", "...", "d"), actual)
    assert docs.output_matches(("a", "b", "c", "d"), actual)
    assert docs.output_matches(("...",), actual)
    assert not docs.output_matches(("a", "...", "c"), actual)
    assert not docs.output_matches(("a", "b", "c"), actual)  # no elision: exact


def test_a_refresh_keeps_as_many_lines_around_the_elision_as_shown():
    actual = ["new a", "new b", "new c", "new d", "new e"]
    assert docs.refreshed(("a", "...", "y", "z"), actual) == ["new a", "...", "new d", "new e"]
    assert docs.refreshed(("a", "b"), actual) == actual
    assert docs.refreshed(("a", "...", "y", "z", "w", "v"), actual) == actual  # shorter than shown: all of it


def test_update_rewrites_a_stale_output_from_the_real_command(tmp_path):
    from caffemem import __version__

    readme = tmp_path / "README.md"
    readme.write_text("# t\r\n\r\n```console\r\n$ caffemem --version\r\ncaffemem, version 0.0.0-stale\r\n```\r\nafter\r\n", encoding="utf-8", newline="")
    assert docs.update_readme(readme) == ["README.md:3: caffemem --version"]
    assert readme.read_bytes() == f"# t\r\n\r\n```console\r\n$ caffemem --version\r\ncaffemem, version {__version__}\r\n```\r\nafter\r\n".encode()
    assert docs.update_readme(readme) == []  # now current: nothing to change

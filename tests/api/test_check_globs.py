"""`check`'s globs through symbolic links (issue 26, item 5): glob follows links, so two
links back to their folder made `g/**/*.prototxt` run forever, and one link checked the
same file 41 times.  Each real folder is searched once, each real file checked once."""

from __future__ import annotations

import glob
import os
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import FIXTURES

from caffemem.api.check import collect_files, expand_glob
from caffemem.cli import main

LENET = FIXTURES / "examples" / "lenet_train.prototxt"


@pytest.fixture
def g(tmp_path, monkeypatch) -> Path:
    """g/net.prototxt, with the working directory above g."""
    (tmp_path / "g").mkdir()
    shutil.copy(LENET, tmp_path / "g" / "net.prototxt")
    monkeypatch.chdir(tmp_path)
    return tmp_path / "g"


def test_two_links_back_to_their_folder_give_the_file_once(g):
    os.symlink(".", g / "l1")
    os.symlink(".", g / "l2")
    assert collect_files(["g/**/*.prototxt"]) == ["g/net.prototxt"]


def test_one_link_back_gives_the_file_once_not_41_times(g):
    os.symlink(".", g / "l1")
    assert len(glob.glob("g/**/*.prototxt", recursive=True)) == 41  # what glob finds
    assert collect_files(["g/**/*.prototxt"]) == ["g/net.prototxt"]


def test_a_link_to_a_folder_beside_is_followed_once(g):
    (g / "models").mkdir()
    shutil.copy(LENET, g / "models" / "a.prototxt")
    os.symlink("models", g / "alias")
    # the link sorts first; the real folder, reached again, is skipped
    assert collect_files(["g/**/*.prototxt"]) == ["g/alias/a.prototxt", "g/net.prototxt"]


def test_the_check_command_measures_the_file_once_through_looping_links(g):
    os.symlink(".", g / "l1")
    os.symlink("..", g / "up")
    result = CliRunner().invoke(main, ["check", "g/**/*.prototxt", "--format", "json"])
    assert result.exit_code == 0, result.output
    assert '"g/net.prototxt"' in result.output and result.output.count("net.prototxt") == result.output.count('"g/net.prototxt"')


@pytest.mark.parametrize("pattern", ["t/**/*.prototxt", "t/**", "t/*/*.prototxt", "t/**/a/*", "t/*", "t/**/.*", "t/a*/**/n*", "**/*.txt", "t/a/../*", "t/[ab]/?.prototxt"])
def test_without_links_the_matches_are_globs(tmp_path, monkeypatch, pattern):
    monkeypatch.chdir(tmp_path)
    for rel in ["t/n.prototxt", "t/.h/n.prototxt", "t/a/n.prototxt", "t/a/b/m.prototxt", "t/b/x.txt", "t/ab/n.prototxt", "t/.z.prototxt"]:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("")
    assert expand_glob(pattern) == sorted(m.rstrip("/") for m in glob.glob(pattern, recursive=True))

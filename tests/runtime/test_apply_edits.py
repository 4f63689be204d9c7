"""caffemem.runtime.apply_edits_file: the edits-file format of the runtime patch applied as a
build fix (benchmarks/gpu/fix-for-cuda13.edits): all or nothing, idempotent."""

from __future__ import annotations

from pathlib import Path

import pytest

from caffemem.errors import CaffememError
from caffemem.runtime import apply_edits_file

EDITS = """# a comment line
@@@ FILE a.cpp
@@@ FIND
  int x = old();
@@@ REPLACE
  int x = new_one();
@@@ END
@@@ FILE sub/b.hpp
@@@ FIND
#define B 1
@@@ REPLACE
#define B 2
@@@ END
"""


def _tree(tmp_path: Path, b_text: str = "#define B 1\n") -> Path:
    (tmp_path / "sub").mkdir()
    (tmp_path / "a.cpp").write_text("void f() {\n  int x = old();\n}\n")
    (tmp_path / "sub" / "b.hpp").write_text(b_text)
    (tmp_path / "fix.edits").write_text(EDITS)
    return tmp_path


def test_applies_every_edit_and_names_the_files(tmp_path):
    root = _tree(tmp_path)
    assert apply_edits_file(root, root / "fix.edits") == ["a.cpp", "sub/b.hpp"]
    assert (root / "a.cpp").read_text() == "void f() {\n  int x = new_one();\n}\n"
    assert (root / "sub" / "b.hpp").read_text() == "#define B 2\n"


def test_applying_twice_is_applying_once(tmp_path):
    root = _tree(tmp_path)
    apply_edits_file(root, root / "fix.edits")
    assert apply_edits_file(root, root / "fix.edits") == []
    assert (root / "sub" / "b.hpp").read_text() == "#define B 2\n"


def test_a_conflict_writes_nothing(tmp_path):
    """b.hpp has the anchor twice: refused with its name, and a.cpp stays as it was."""
    root = _tree(tmp_path, b_text="#define B 1\n#define B 1\n")
    with pytest.raises(CaffememError, match=r"sub/b.hpp: .* occurs 2 times"):
        apply_edits_file(root, root / "fix.edits")
    assert (root / "a.cpp").read_text() == "void f() {\n  int x = old();\n}\n"


def test_a_linked_file_is_refused_and_nothing_written(tmp_path):
    """Issue 31: never write through a link, nor in place of one."""
    (tmp_path / "tree").mkdir()
    root = _tree(tmp_path / "tree")
    outside = tmp_path / "outside.hpp"
    (root / "sub" / "b.hpp").rename(outside)
    (root / "sub" / "b.hpp").symlink_to(outside)
    with pytest.raises(CaffememError, match=r"sub/b.hpp: a symbolic link; caffemem patch never writes through a link"):
        apply_edits_file(root, root / "fix.edits")
    assert outside.read_text() == "#define B 1\n"
    assert (root / "a.cpp").read_text() == "void f() {\n  int x = old();\n}\n"

"""caffemem.runtime's patching of a Caffe source tree (no build needed): flavour
detection, all-or-nothing, idempotent, exact revert, refusals that change nothing, and
the `caffemem patch` command."""

from __future__ import annotations

import stat
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner
from runtime_caffe import BVLC_TARBALL, FORK_TARBALL, bvlc, pristine  # noqa: F401  (fixtures)
from runtime_caffe import snapshot as _snapshot
from runtime_caffe import unpack as _unpack

from caffemem import runtime
from caffemem.cli import main
from caffemem.errors import CaffememError


def patch(*args: str):
    """`caffemem patch ARGS...` through the real command group."""
    return CliRunner().invoke(main, ["patch", *args])


def test_detects_bvlc(bvlc):
    assert runtime.detect_flavour(bvlc) is runtime.Flavour.BVLC
    status = runtime.patch_status(bvlc)
    assert not status.applied and status.version is None


def test_detects_the_fork(tmp_path):
    tree = _unpack(FORK_TARBALL, tmp_path / "fork")
    assert runtime.detect_flavour(tree) is runtime.Flavour.FORK


def test_refuses_a_directory_that_is_not_caffe(tmp_path):
    (tmp_path / "src").mkdir()
    (tmp_path / "README").write_text("hello")
    before = _snapshot(tmp_path)
    with pytest.raises(CaffememError, match="not a Caffe source tree"):
        runtime.apply_patch(tmp_path)
    assert _snapshot(tmp_path) == before


def test_apply_twice_is_apply_once_and_revert_gives_the_original_bytes(bvlc):
    original = _snapshot(bvlc)
    status = runtime.apply_patch(bvlc)
    assert status.applied and status.version == runtime.PATCH_VERSION
    once = _snapshot(bvlc)
    assert once != original
    assert "mem_param = 200" in (bvlc / "src/caffe/proto/caffe.proto").read_text()
    assert (bvlc / "src/caffe/util/mem_slots.cpp").is_file()
    runtime.apply_patch(bvlc)
    assert _snapshot(bvlc) == once
    status = runtime.revert_patch(bvlc)
    assert not status.applied
    assert _snapshot(bvlc) == original
    runtime.revert_patch(bvlc)  # reverting an unpatched tree changes nothing
    assert _snapshot(bvlc) == original


def test_a_tree_changed_where_we_patch_is_refused_naming_the_file(bvlc):
    net_cpp = bvlc / "src/caffe/net.cpp"
    net_cpp.write_text(net_cpp.read_text().replace('"Network initialization done."', '"Net ready."'))
    before = _snapshot(bvlc)
    with pytest.raises(CaffememError, match="src/caffe/net.cpp") as e:
        runtime.apply_patch(bvlc)
    assert "nothing was written" in str(e.value)
    assert _snapshot(bvlc) == before


def _restore_by_hand(tree: Path, rel: str) -> None:
    """One file put back from the tarball, as a user would (or an older caffemem's run
    that stopped after the others)."""
    pristine = subprocess.run(["tar", "-xJOf", str(BVLC_TARBALL), f"./{rel}"], capture_output=True)
    if pristine.returncode != 0:
        pristine = subprocess.run(["tar", "-xJOf", str(BVLC_TARBALL), rel], capture_output=True, check=True)
    (tree / rel).write_bytes(pristine.stdout)


def test_a_half_patched_tree_is_named_and_patch_finishes_it(bvlc):
    original = _snapshot(bvlc)
    runtime.apply_patch(bvlc)
    patched = _snapshot(bvlc)
    _restore_by_hand(bvlc, "src/caffe/proto/caffe.proto")
    status = runtime.patch_status(bvlc)
    assert not status.applied and status.pending == ("src/caffe/proto/caffe.proto",)
    assert "`caffemem patch` finishes it" in status.describe()
    assert runtime.apply_patch(bvlc).applied
    assert _snapshot(bvlc) == patched != original


def test_a_half_patched_tree_is_reverted_to_the_original_bytes(bvlc):
    original = _snapshot(bvlc)
    runtime.apply_patch(bvlc)
    _restore_by_hand(bvlc, "src/caffe/proto/caffe.proto")
    _restore_by_hand(bvlc, "include/caffe/net.hpp")
    status = runtime.revert_patch(bvlc)
    assert not status.applied and not status.changed
    assert _snapshot(bvlc) == original


def test_a_read_only_tree_is_refused_and_unchanged(bvlc):
    for p in [bvlc, *bvlc.rglob("*")]:
        if not p.is_symlink():
            p.chmod(stat.S_IMODE(p.stat().st_mode) & ~0o222)
    try:
        before = _snapshot(bvlc)
        with pytest.raises(CaffememError, match="read-only"):
            runtime.apply_patch(bvlc)
        assert _snapshot(bvlc) == before
    finally:
        for p in [bvlc, *bvlc.rglob("*")]:
            if not p.is_symlink():
                p.chmod(stat.S_IMODE(p.stat().st_mode) | 0o200)


def test_the_patch_command(bvlc):
    result = patch(str(bvlc), "--check")
    assert result.exit_code == 1 and "not applied" in result.output
    result = patch(str(bvlc))
    assert result.exit_code == 0, result.output
    result = patch(str(bvlc), "--check")
    assert result.exit_code == 0 and f"v{runtime.PATCH_VERSION} applied" in result.output
    result = patch(str(bvlc), "--revert")
    assert result.exit_code == 0
    result = patch(str(bvlc), "--check")
    assert result.exit_code == 1


def test_reverting_a_clean_tree_says_there_was_nothing_to_revert(bvlc):
    # Issue 34: it said "(reverted; rebuild Caffe)" of a tree it had not touched.
    result = patch(str(bvlc), "--revert")
    assert result.exit_code == 0
    assert result.output.startswith(f"{bvlc}: caffemem runtime patch not applied (") and result.output.endswith("): nothing to revert, nothing changed\n")


def test_the_patch_command_refuses_a_folder_that_is_no_caffe_tree_in_one_line(tmp_path):
    result = patch(str(tmp_path))
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("caffemem: error: ") and "Traceback" not in result.output


def test_patch_files_are_package_data():
    files = runtime.patch_files(runtime.Flavour.BVLC)
    assert all(p.is_file() for p in files)
    assert {p.name for p in files} >= {"edits.txt", "mem_slots.cpp", "mem_slots.hpp", "layer_buffers.hpp", "planned_workspace.hpp", "mem_recompute.hpp", "mem_recompute.cpp", "cudnn_pool.hpp", "cudnn_pool.cpp"}


@pytest.mark.parametrize("older", [1, 2, 3, 4, 5])
def test_a_tree_patched_by_an_older_caffemem_is_named_and_left_alone(bvlc, pristine, older):
    """The patch's C++ changed in v2 (device slots), v3 (planned cuDNN workspaces), v4
    (recompute in Backward), v5 (a recompute entry naming a name two layers share is
    refused at Net::Init) and v6 (the cuDNN layers' handles, streams and workspace from one
    pool per device): an older tree is reported as such, and applying over it refuses
    rather than mixing two versions' files."""
    runtime.apply_patch(bvlc)
    if older <= 5:  # before v6 there was no util/cudnn_pool.*, and the cuDNN layers' .cu and single-handle layers were stock's
        for rel in ("include/caffe/util/cudnn_pool.hpp", "src/caffe/util/cudnn_pool.cpp"):
            (bvlc / rel).unlink()
        for name in ("relu", "sigmoid", "tanh", "pooling", "lrn", "lcn", "softmax"):
            for rel in (f"include/caffe/layers/cudnn_{name}_layer.hpp", f"src/caffe/layers/cudnn_{name}_layer.cpp"):
                (bvlc / rel).write_bytes((pristine / rel).read_bytes())
        for name in ("conv", "deconv"):
            rel = f"src/caffe/layers/cudnn_{name}_layer.cu"
            (bvlc / rel).write_bytes((pristine / rel).read_bytes())
    if older <= 3:  # before v4 there was no util/mem_recompute.*
        for rel in ("include/caffe/util/mem_recompute.hpp", "src/caffe/util/mem_recompute.cpp"):
            (bvlc / rel).unlink()
    if older == 2:  # v2 had neither the cuDNN layers' edits nor planned_workspace.hpp
        for name in ("cudnn_conv_layer", "cudnn_deconv_layer"):
            for rel in (f"include/caffe/layers/{name}.hpp", f"src/caffe/layers/{name}.cpp"):
                (bvlc / rel).write_bytes((pristine / rel).read_bytes())
        (bvlc / "include/caffe/util/planned_workspace.hpp").unlink()
    header = bvlc / "include/caffe/util/mem_slots.hpp"
    header.write_text(header.read_text().replace(f"caffemem runtime patch v{runtime.PATCH_VERSION}", f"caffemem runtime patch v{older}", 1))
    status = runtime.patch_status(bvlc)
    assert status.version == older and not status.applied
    assert f"v{older} found, but this caffemem has v{runtime.PATCH_VERSION}" in status.describe()
    before = _snapshot(bvlc)
    with pytest.raises(CaffememError):
        runtime.apply_patch(bvlc)
    assert _snapshot(bvlc) == before


# ----------------------------------------------------------------------------- links (issue 31)
# Nothing is written through a link or in place of one: a tree where a file `patch` or
# `--revert` writes, or a folder on its path, is a symbolic link is refused before anything
# is written, naming the link.  The tree's root may be a link (the user's choice).


def _link_out(tree: Path, rel: str, outside: Path) -> Path:
    """Move ``rel`` out of the tree to ``outside`` and leave a symbolic link to it in its place."""
    outside.parent.mkdir(parents=True, exist_ok=True)
    (tree / rel).rename(outside)
    (tree / rel).symlink_to(outside)
    return outside


def _refused_link(tree: Path, rel: str, kind: str = "file") -> str:
    return (
        f"caffemem: error: {tree / rel}: a symbolic link; caffemem patch never writes through a link or in place of one: "
        f"replace it by a copy of the {kind} it points to, then run it again (nothing was written)\n"
    )


def test_patch_refuses_a_linked_file_and_writes_nothing(bvlc, tmp_path):
    outside = _link_out(bvlc, "src/caffe/net.cpp", tmp_path / "elsewhere" / "net.cpp")
    kept, before = outside.read_bytes(), _snapshot(bvlc)
    result = patch(str(bvlc))
    assert (result.exit_code, result.output) == (2, _refused_link(bvlc, "src/caffe/net.cpp"))
    assert (bvlc / "src/caffe/net.cpp").is_symlink() and outside.read_bytes() == kept
    assert _snapshot(bvlc) == before


def test_revert_refuses_a_linked_file_rather_than_turning_it_into_a_regular_file(bvlc, tmp_path):
    """Issue 31, item 14: `--revert` replaced the link by a regular file."""
    runtime.apply_patch(bvlc)
    outside = _link_out(bvlc, "src/caffe/net.cpp", tmp_path / "elsewhere" / "net.cpp")
    kept, before = outside.read_bytes(), _snapshot(bvlc)
    result = patch(str(bvlc), "--revert")
    assert (result.exit_code, result.output) == (2, _refused_link(bvlc, "src/caffe/net.cpp"))
    assert (bvlc / "src/caffe/net.cpp").is_symlink() and outside.read_bytes() == kept
    assert _snapshot(bvlc) == before


def test_patch_refuses_a_linked_folder_where_it_adds_a_file_and_writes_nothing_there(bvlc, tmp_path):
    """src/caffe/util -> a folder outside: mem_slots.cpp was created in that folder."""
    outside = _link_out(bvlc, "src/caffe/util", tmp_path / "elsewhere" / "util")
    listing, before = sorted(p.name for p in outside.iterdir()), _snapshot(bvlc)
    result = patch(str(bvlc))
    assert (result.exit_code, result.output) == (2, _refused_link(bvlc, "src/caffe/util", "folder"))
    assert sorted(p.name for p in outside.iterdir()) == listing
    assert _snapshot(bvlc) == before


def test_patch_refuses_a_dangling_link_where_it_adds_a_file(bvlc, tmp_path):
    (bvlc / "include/caffe/util/mem_slots.hpp").symlink_to(tmp_path / "nowhere.hpp")
    result = patch(str(bvlc))
    assert (result.exit_code, result.output) == (2, _refused_link(bvlc, "include/caffe/util/mem_slots.hpp"))
    assert (bvlc / "include/caffe/util/mem_slots.hpp").is_symlink() and not (tmp_path / "nowhere.hpp").exists()


def test_a_tree_whose_root_is_a_link_is_patched_and_reverted(bvlc, tmp_path):
    original = _snapshot(bvlc)
    (tmp_path / "caffe-link").symlink_to(bvlc)
    assert patch(str(tmp_path / "caffe-link")).exit_code == 0
    assert runtime.patch_status(bvlc).applied
    assert patch(str(tmp_path / "caffe-link"), "--revert").exit_code == 0
    assert _snapshot(bvlc) == original


def test_a_file_hard_linked_outside_the_tree_is_replaced_never_written_in_place(bvlc, tmp_path):
    outside = tmp_path / "net.cpp.hardlink"
    outside.hardlink_to(bvlc / "src/caffe/net.cpp")
    kept = outside.read_bytes()
    assert patch(str(bvlc)).exit_code == 0
    assert outside.read_bytes() == kept and (bvlc / "src/caffe/net.cpp").read_bytes() != kept
    assert patch(str(bvlc), "--revert").exit_code == 0
    assert outside.read_bytes() == kept == (bvlc / "src/caffe/net.cpp").read_bytes()


@pytest.mark.parametrize("kind", ["hard link", "symbolic link"])
def test_a_temporary_file_planted_in_the_tree_is_removed_never_written_into(bvlc, tmp_path, kind):
    """The temporary file that becomes net.cpp has a fixed name (a killed run's is found and
    removed): one planted there as a hard link to a file outside was truncated and
    written; as a symbolic link it made the run fail."""
    victim = tmp_path / "precious.txt"
    victim.write_bytes(b"keep me\n")
    planted = bvlc / "src/caffe/.net.cpp.caffemem-tmp"
    planted.hardlink_to(victim) if kind == "hard link" else planted.symlink_to(victim)
    result = patch(str(bvlc))
    assert result.exit_code == 0, result.output
    assert victim.read_bytes() == b"keep me\n"
    assert not planted.exists() and not planted.is_symlink()
    assert runtime.patch_status(bvlc).applied


def test_a_link_swapped_in_after_the_check_is_not_written_through(bvlc, tmp_path, monkeypatch):
    """The check (lstat) and the writing are two moments: a folder turned into a link in
    between is met by the writing's own walk (O_NOFOLLOW), which fails; the tree is put back."""
    monkeypatch.setattr(runtime, "_refuse_links", lambda root, paths: None)  # the link comes after the check
    outside = _link_out(bvlc, "src/caffe/util", tmp_path / "elsewhere" / "util")
    listing, before = sorted(p.name for p in outside.iterdir()), _snapshot(bvlc)
    with pytest.raises(CaffememError, match=rf"^{bvlc}/src/caffe/util: a symbolic link \(caffemem patch never writes through one\); the tree was restored, nothing changed$"):
        runtime.apply_patch(bvlc)
    assert sorted(p.name for p in outside.iterdir()) == listing
    assert _snapshot(bvlc) == before and not (bvlc / ".caffemem-patch.journal").exists()

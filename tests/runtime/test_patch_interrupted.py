"""`caffemem patch` all or nothing under any interruption (issue 26, item 2): Ctrl-C at
any point puts every file back; a run killed outright leaves its journal, and `patch`
then finishes the patch while `patch --revert` gives back the original bytes.

The interruption is injected at every step: ``runtime._put`` (which writes the journal,
then each file, then removes files) is wrapped to stop before or after its k-th call,
for every k.  The trees are the files the patch reads or writes, copied from BVLC Caffe
master, so that each of the ~100 runs copies and hashes a few hundred KiB."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from runtime_caffe import pristine, snapshot  # noqa: F401  (fixture)

from caffemem import runtime
from caffemem.cli import main

JOURNAL = ".caffemem-patch.journal"


@pytest.fixture(autouse=True)
def no_fsync(monkeypatch):
    """Durability against power loss is not what these tests judge, and ~3,000 fsyncs
    take minutes on a shared disk: os.fsync is a no-op here (not in the subprocesses)."""
    monkeypatch.setattr(os, "fsync", lambda descriptor: None)


def patch(*args: str):
    """`caffemem patch ARGS...` through the real command group."""
    return CliRunner().invoke(main, ["patch", *args])


@pytest.fixture(scope="module")
def small(pristine, tmp_path_factory) -> Path:  # noqa: F811
    """The part of BVLC Caffe the patch looks at: what detect_flavour reads, every file an
    edit changes, and the folders of the files it adds."""
    tree = tmp_path_factory.mktemp("small") / "caffe"
    edited = {edit.path for edit in runtime._read_edits(runtime.Flavour.BVLC)}
    needed = {"src/caffe/net.cpp", "include/caffe/net.hpp", "src/caffe/proto/caffe.proto", "include/caffe/blob.hpp"}
    needed |= {"include/caffe/layers/clip_layer.hpp", "include/caffe/layers/swish_layer.hpp"}
    for rel in sorted(edited | needed):
        (tree / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(pristine / rel, tree / rel)
    for rel in runtime._new_files(runtime.Flavour.BVLC):
        (tree / rel).parent.mkdir(parents=True, exist_ok=True)
    return tree


@pytest.fixture(scope="module")
def states(small, tmp_path_factory) -> tuple[dict[str, str], dict[str, str], int]:
    """(the original tree, the patched tree, how many _put calls a run makes)."""
    tree = tmp_path_factory.mktemp("states") / "caffe"
    shutil.copytree(small, tree)
    original = snapshot(tree)
    runtime.apply_patch(tree)
    patched = snapshot(tree)
    # the journal, each edited file, each new file
    puts = 1 + len({e.path for e in runtime._read_edits(runtime.Flavour.BVLC)}) + len(runtime._new_files(runtime.Flavour.BVLC))
    return original, patched, puts


def _copy(small: Path, tmp_path: Path, name: str, patched: bool = False) -> Path:
    tree = tmp_path / name
    shutil.copytree(small, tree)
    if patched:
        runtime.apply_patch(tree)
    return tree


def _stop_at(monkeypatch, k: int, when: str, stop) -> None:
    """Make the k-th call of runtime._put (1-based) call ``stop`` before or after it writes."""
    put = runtime._put
    calls = [0]

    def counted(*args):
        calls[0] += 1
        if calls[0] == k and when == "before":
            stop()
        put(*args)
        if calls[0] == k and when == "after":
            stop()

    monkeypatch.setattr(runtime, "_put", counted)


def _ctrl_c() -> None:
    raise KeyboardInterrupt


def _each_step(states):
    """Before the first _put, and after each (nothing happens between two calls but the
    look for a held signal, so "before call k" is "after call k - 1")."""
    _, _, puts = states
    return [(1, "before")] + [(k, "after") for k in range(1, puts + 1)]


def test_a_run_makes_one_put_per_file_and_one_for_the_journal(small, states, tmp_path, monkeypatch):
    _, _, puts = states
    tree = _copy(small, tmp_path, "count")
    calls = []
    put = runtime._put
    monkeypatch.setattr(runtime, "_put", lambda *args: (calls.append(args[:2]), put(*args)))
    runtime.apply_patch(tree)
    # the journal, then each edited file and each new one, all below the tree
    assert len(calls) == puts and calls[0] == (tree, JOURNAL) and {root for root, _ in calls} == {tree}
    assert sorted(rel for _, rel in calls[1:]) == sorted({e.path for e in runtime._read_edits(runtime.Flavour.BVLC)} | set(runtime._new_files(runtime.Flavour.BVLC)))


def test_ctrl_c_at_any_step_of_patch_leaves_the_original_bytes(small, states, tmp_path, monkeypatch):
    original, patched, _ = states
    for k, when in _each_step(states):
        tree = _copy(small, tmp_path, f"apply-{k}-{when}")
        with monkeypatch.context() as m:
            _stop_at(m, k, when, _ctrl_c)
            with pytest.raises(KeyboardInterrupt):
                runtime.apply_patch(tree)
        assert snapshot(tree) == original, (k, when)
        result = patch(str(tree), "--check")
        assert result.exit_code == 1 and "not applied" in result.output, (k, when)
        assert patch(str(tree)).exit_code == 0 and snapshot(tree) == patched, (k, when)
        assert patch(str(tree), "--revert").exit_code == 0 and snapshot(tree) == original, (k, when)


def test_ctrl_c_at_any_step_of_revert_leaves_the_patched_bytes(small, states, tmp_path, monkeypatch):
    original, patched, _ = states
    for k, when in _each_step(states):
        tree = _copy(small, tmp_path, f"revert-{k}-{when}", patched=True)
        with monkeypatch.context() as m:
            _stop_at(m, k, when, _ctrl_c)
            with pytest.raises(KeyboardInterrupt):
                runtime.revert_patch(tree)
        assert snapshot(tree) == patched, (k, when)
        assert patch(str(tree), "--check").exit_code == 0, (k, when)
        assert patch(str(tree), "--revert").exit_code == 0 and snapshot(tree) == original, (k, when)


def _killed_at(tree: Path, k: int, when: str, action) -> None:
    """Run ``action(tree)`` in a forked child that dies (os._exit, as under SIGKILL: no
    cleanup runs) before or after the k-th _put."""
    pid = os.fork()
    if pid == 0:  # the child
        try:
            _stop_at(pytest.MonkeyPatch(), k, when, lambda: os._exit(9))
            action(tree)
        finally:
            os._exit(0)
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 9


@pytest.mark.parametrize("action", [runtime.apply_patch, runtime.revert_patch], ids=["patch", "revert"])
def test_after_a_kill_at_any_step_check_names_it_and_patch_or_revert_recovers(small, states, tmp_path, action):
    original, patched, _ = states
    for k, when in _each_step(states):
        trees = [_copy(small, tmp_path, f"{action.__name__}-{k}-{when}-{i}", patched=action is runtime.revert_patch) for i in range(2)]
        for tree in trees:
            _killed_at(tree, k, when, action)
        if k == 1 and when == "before":  # killed before the journal: nothing happened
            assert snapshot(trees[0]) == (original if action is runtime.apply_patch else patched)
            continue
        assert (trees[0] / JOURNAL).is_file(), (k, when)
        result = patch(str(trees[0]), "--check")
        assert result.exit_code == 1, (k, when)
        assert "interrupted caffemem patch run" in result.output and "--revert" in result.output
        assert patch(str(trees[0])).exit_code == 0 and snapshot(trees[0]) == patched, (k, when)
        assert patch(str(trees[1]), "--revert").exit_code == 0 and snapshot(trees[1]) == original, (k, when)


def test_a_journal_whose_files_changed_since_is_refused_and_nothing_written(small, tmp_path):
    tree = _copy(small, tmp_path, "changed")
    _killed_at(tree, 5, "after", runtime.apply_patch)
    (tree / "include/caffe/net.hpp").write_text("// edited by hand since\n")
    before = snapshot(tree)
    result = patch(str(tree), "--revert")
    assert result.exit_code == 2
    assert result.output.count("\n") == 1 and "include/caffe/net.hpp changed since" in result.output
    assert snapshot(tree) == before


# A real signal, delivered to a real `caffemem patch` process while it writes: the k-th
# _put sends it to its own process, so the moment is exact.  Ctrl-C as a terminal delivers
# it: a process started in the background of a non-interactive shell (`cmd &`, as a CI
# script may run the suite) inherits SIGINT ignored, and then rightly never sees it.
_SIGNALLED = textwrap.dedent(
    """
    import os, signal, sys
    signal.signal(signal.SIGINT, signal.default_int_handler)
    from caffemem import runtime
    from caffemem.cli import main
    put, calls = runtime._put, [0]
    def counted(*args):
        put(*args)
        calls[0] += 1
        if calls[0] == int(sys.argv[2]):
            os.kill(os.getpid(), getattr(signal, sys.argv[3]))
    runtime._put = counted
    main(["patch", sys.argv[1]], prog_name="caffemem")
    """
)


@pytest.mark.parametrize("when", ["after the journal", "half-way", "after the last file"])
def test_a_real_sigint_during_patch_exits_130_in_one_line_with_the_tree_untouched(small, states, tmp_path, when):
    original, _, puts = states
    k = {"after the journal": 1, "half-way": puts // 2, "after the last file": puts}[when]
    tree = _copy(small, tmp_path, "sigint")
    proc = subprocess.run([sys.executable, "-c", _SIGNALLED, str(tree), str(k), "SIGINT"], capture_output=True, text=True, timeout=120, check=False)
    assert (proc.returncode, proc.stderr, proc.stdout) == (130, "caffemem: interrupted\n", "")
    assert snapshot(tree) == original


def test_sigterm_during_patch_puts_the_tree_back_before_the_process_ends(small, states, tmp_path):
    original, _, _ = states
    tree = _copy(small, tmp_path, "sigterm")
    proc = subprocess.run([sys.executable, "-c", _SIGNALLED, str(tree), "12", "SIGTERM"], capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == -signal.SIGTERM and "Traceback" not in proc.stderr
    assert snapshot(tree) == original


def test_a_sighup_ignored_as_under_nohup_does_not_stop_the_patch(small, states, tmp_path):
    _, patched, _ = states
    tree = _copy(small, tmp_path, "nohup")
    proc = subprocess.run(
        [sys.executable, "-c", "import signal; signal.signal(signal.SIGHUP, signal.SIG_IGN)\n" + _SIGNALLED, str(tree), "12", "SIGHUP"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert snapshot(tree) == patched


def test_ctrl_c_from_outside_while_the_journal_exists_leaves_the_tree_whole(small, states, tmp_path):
    """Sent by another process as soon as the journal appears, as a terminal would: the
    tree ends either untouched (exit 130) or patched (the signal came after the commit)."""
    original, patched, _ = states
    tree = _copy(small, tmp_path, "outside")
    proc = subprocess.Popen([sys.executable, "-m", "caffemem", "patch", str(tree)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    while proc.poll() is None and not (tree / JOURNAL).exists():
        time.sleep(0.0005)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=120)
    assert (proc.returncode, snapshot(tree)) in ((130, original), (0, patched), (130, patched)), stderr
    assert "Traceback" not in stderr


# ----------------------------------------------------------------------------- crafted journals (issue 31)
# A journal is untrusted input (the tree may come from anyone: a pull request a CI job
# checks out): one that names a file the patch does not write, goes through a link, gives
# a mode with special bits, or bytes the patch's own files or edits do not match, is
# refused by `patch`, `--revert` and `--check` alike: exit 2, one line naming the journal,
# nothing written, and no advice to run `patch` or `--revert` on it.

COMMANDS = [("--revert",), (), ("--check",)]


def _refused(tree: Path, problem: str) -> str:
    return f"caffemem: error: {tree / JOURNAL}: {problem}; nothing was written: restore the tree from its source, then delete the journal\n"


def _write_journal(tree: Path, *files: dict) -> None:
    (tree / JOURNAL).write_text(json.dumps({"caffemem patch journal": 1, "files": list(files)}))


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


@pytest.mark.parametrize("args", COMMANDS, ids=["revert", "patch", "check"])
def test_a_crafted_journal_writing_through_a_link_outside_the_tree_is_refused(small, tmp_path, args):
    """Issue 31, item 2: the entry was written through evil_link, setuid, with exit 0."""
    tree = _copy(small, tmp_path, "evil")
    outside = tmp_path / "outside"
    outside.mkdir()
    (tree / "evil_link").symlink_to(outside)
    _write_journal(tree, {"path": "evil_link/pwned.sh", "before": _b64(b"#!/bin/sh\necho pwned\n"), "after": None, "mode": 2541})
    before = snapshot(tree)
    result = patch(str(tree), *args)
    assert (result.exit_code, result.output) == (2, _refused(tree, "names 'evil_link/pwned.sh', a file caffemem patch never writes"))
    assert list(outside.iterdir()) == [] and snapshot(tree) == before


def test_a_journal_naming_a_file_of_the_patch_through_a_linked_folder_is_refused(small, tmp_path):
    """A genuine-looking entry of a revert (caffemem's own mem_slots.cpp put back) whose
    folder is a link to a folder outside."""
    tree = _copy(small, tmp_path, "linked-folder")
    outside = tmp_path / "outside"
    outside.mkdir()
    (tree / "src/caffe/util").rmdir()
    (tree / "src/caffe/util").symlink_to(outside)
    ours = runtime._new_files(runtime.Flavour.BVLC)["src/caffe/util/mem_slots.cpp"]
    _write_journal(tree, {"path": "src/caffe/util/mem_slots.cpp", "before": _b64(ours), "after": None, "mode": 0o644})
    for args in COMMANDS:
        result = patch(str(tree), *args)
        assert (result.exit_code, result.output) == (2, _refused(tree, "names src/caffe/util/mem_slots.cpp, but src/caffe/util is a symbolic link (caffemem patch never writes through one)")), args
    assert list(outside.iterdir()) == []


def _genuine(small: Path, tmp_path: Path, name: str) -> tuple[Path, dict]:
    """A tree whose patch run was killed after the journal and 2 files: its journal, read."""
    tree = _copy(small, tmp_path, name)
    _killed_at(tree, 3, "after", runtime.apply_patch)
    return tree, json.loads((tree / JOURNAL).read_text())


def _entry(document: dict, path: str) -> dict:
    return next(f for f in document["files"] if f["path"] == path)


def _setuid(document: dict) -> str:
    _entry(document, "src/caffe/net.cpp")["mode"] = 0o4755
    return "gives src/caffe/net.cpp mode 0o4755, not a plain file mode (caffemem patch writes permission bits only)"


def _new_file_with_other_bytes(document: dict) -> str:
    entry = _entry(document, "include/caffe/util/mem_slots.hpp")
    entry["before"], entry["after"] = _b64(b"#error not caffemem's\n"), None
    return "gives include/caffe/util/mem_slots.hpp bytes that are not caffemem's own file"


def _new_file_said_to_be_other_bytes(document: dict) -> str:
    _entry(document, "include/caffe/util/mem_slots.hpp")["after"] = hashlib.sha256(b"other").hexdigest()
    return "gives include/caffe/util/mem_slots.hpp bytes that are not caffemem's own file"


def _edited_file_with_other_bytes(document: dict) -> str:
    _entry(document, "src/caffe/net.cpp")["before"] = _b64(b'int main() { return system("id"); }\n')
    return "gives src/caffe/net.cpp bytes that the patch's edits do not turn into what it says was written there"


def _edited_file_removed(document: dict) -> str:
    _entry(document, "src/caffe/net.cpp")["after"] = None
    return "gives src/caffe/net.cpp bytes that the patch's edits do not turn into what it says was written there"


def _twice(document: dict) -> str:
    document["files"].append(dict(_entry(document, "src/caffe/net.cpp")))
    return "names src/caffe/net.cpp twice"


def _mode_as_text(document: dict) -> str:
    _entry(document, "src/caffe/net.cpp")["mode"] = "0644"
    return "the journal of an interrupted caffemem patch run, but unreadable (an entry's mode is not an integer)"


def _not_a_journal(document: dict) -> str:
    document.pop("caffemem patch journal")
    return "the journal of an interrupted caffemem patch run, but unreadable (not a caffemem patch journal)"


@pytest.mark.parametrize(
    "tamper",
    [_setuid, _new_file_with_other_bytes, _new_file_said_to_be_other_bytes, _edited_file_with_other_bytes, _edited_file_removed, _twice, _mode_as_text, _not_a_journal],
)
def test_a_tampered_journal_is_refused_by_every_command_and_nothing_written(small, tmp_path, tamper):
    tree, document = _genuine(small, tmp_path, tamper.__name__)
    problem = tamper(document)
    (tree / JOURNAL).write_text(json.dumps(document))
    before = snapshot(tree)
    for args in COMMANDS:
        result = patch(str(tree), *args)
        assert (result.exit_code, result.output) == (2, _refused(tree, problem)), args
    assert snapshot(tree) == before


def test_a_journal_that_is_a_symbolic_link_is_refused(small, tmp_path):
    tree, _ = _genuine(small, tmp_path, "journal-link")
    (tree / JOURNAL).rename(tmp_path / "elsewhere.journal")
    (tree / JOURNAL).symlink_to(tmp_path / "elsewhere.journal")
    before = snapshot(tree)
    for args in COMMANDS:
        result = patch(str(tree), *args)
        assert (result.exit_code, result.output) == (2, _refused(tree, "a symbolic link, not a journal caffemem wrote")), args
    assert snapshot(tree) == before and (tree / JOURNAL).is_symlink()


def test_a_dangling_link_in_place_of_the_journal_is_refused_not_replaced(small, tmp_path):
    tree = _copy(small, tmp_path, "journal-dangling")
    (tree / JOURNAL).symlink_to(tmp_path / "nowhere")
    before = snapshot(tree)
    result = patch(str(tree))
    assert (result.exit_code, result.output) == (2, _refused(tree, "a symbolic link, not a journal caffemem wrote"))
    assert snapshot(tree) == before and (tree / JOURNAL).is_symlink() and not (tmp_path / "nowhere").exists()


def test_a_journal_that_is_a_fifo_is_refused_without_waiting(small, tmp_path):
    tree = _copy(small, tmp_path, "journal-fifo")
    os.mkfifo(tree / JOURNAL)
    proc = subprocess.run([sys.executable, "-m", "caffemem", "patch", str(tree), "--check"], capture_output=True, text=True, timeout=60, check=False)
    assert (proc.returncode, proc.stdout) == (2, "")
    assert proc.stderr == f"caffemem: error: {tree / JOURNAL}: is a FIFO (named pipe), not a journal of caffemem patch: save it to a regular file first\n"

"""Issue 31, the third hostile round: each defect filed, as its reproduction, and the rules
behind them — no child process runs with the user's folder on its import path or from
it; no output lands on a file the run read; bounded memory whatever the input.

(The data sources, the patch journal, the plans and the output formats have their own
tests: tests/passes/test_sources*.py, tests/runtime/, tests/plan/, tests/report/.)"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import FIXTURES, REPO, one_error_line, run_cli

from caffemem.schema import caffe_root as tree_module

LENET = FIXTURES / "examples" / "lenet_train.prototxt"
SCRIPT = Path(sys.executable).parent / "caffemem"  # the installed `caffemem` command
MARKER_CODE = "import pathlib, os\npathlib.Path(os.environ['CAFFEMEM_TEST_MARKER']).write_text('ran')\n"


run = run_cli


def fork_tree(root: Path) -> Path:
    """A Caffe tree whose caffe.proto is caffemem's own plus one field: compiling it needs
    protoc (the cache below is empty)."""
    proto = root / "src" / "caffe" / "proto" / "caffe.proto"
    proto.parent.mkdir(parents=True)
    proto.write_text((REPO / "proto" / "caffe.proto").read_text() + "\nmessage ExtraOfThisForkParameter { optional uint32 x = 1; }\n")
    return root


def hostile_folder(folder: Path) -> Path:
    """A working folder planting a ``grpc_tools`` package (and others a run imports) whose
    code writes the marker when imported, and a ``protoc`` that does the same."""
    for package in ("grpc_tools", "google", "click", "rich", "numpy"):
        (folder / package).mkdir(parents=True)
        (folder / package / "__init__.py").write_text(MARKER_CODE)
    (folder / "grpc_tools" / "protoc.py").write_text(MARKER_CODE)
    (folder / "protoc").write_text(f"#!/bin/sh\necho ran > \"$CAFFEMEM_TEST_MARKER\"\n")
    (folder / "protoc").chmod(0o755)
    shutil.copy(LENET, folder / "net.prototxt")
    return folder


@pytest.mark.skipif(tree_module._grpc_tools_spec() is None, reason="grpcio-tools is not installed")
@pytest.mark.parametrize("entry", ["the caffemem script", "python -m caffemem"])
def test_a_grpc_tools_package_in_the_working_folder_is_never_run(tmp_path, entry):
    # Issue 31, item 1: the fork's proto was compiled with `python -m grpc_tools.protoc`
    # in the user's folder, which Python puts first on the child's sys.path.
    cwd = hostile_folder(tmp_path / "work")
    marker = tmp_path / "PWNED"
    env = dict(os.environ, CAFFE_ROOT=str(fork_tree(tmp_path / "caffe")), CAFFEMEM_CACHE_DIR=str(tmp_path / "cache"), CAFFEMEM_TEST_MARKER=str(marker), CAFFEMEM_DEVICE="cpu")
    env["PATH"] = f".:{env.get('PATH', '')}:"  # `.` and an empty entry: the working folder
    env.pop("PYTHONPATH", None)
    command = [str(SCRIPT)] if entry == "the caffemem script" else [sys.executable, "-m", "caffemem"]
    done = subprocess.run([*command, "analyze", "net.prototxt"], cwd=cwd, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    assert not marker.exists()
    assert list((tmp_path / "cache" / "schemas").glob("*.pb"))  # the compile did happen


def test_a_protoc_in_the_working_folder_is_never_chosen_whatever_path_says(tmp_path, monkeypatch):
    hostile_folder(tmp_path)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(tree_module, "_grpc_tools_spec", lambda: None)  # only PATH's protoc is left
    monkeypatch.setenv("PATH", f".::{tmp_path}:{os.environ.get('PATH', '')}")
    chosen = [command[0] for command in tree_module._compilers()]
    assert all(Path(program).resolve().parent != tmp_path.resolve() for program in chosen)
    assert not any(program in ("protoc", "./protoc") for program in chosen)


def test_the_module_search_ignores_the_working_folder(tmp_path, monkeypatch):
    hostile_folder(tmp_path)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(sys, "path", ["", *sys.path])
    spec = tree_module._grpc_tools_spec()
    assert spec is None or not Path(spec.origin).resolve().is_relative_to(tmp_path.resolve())


# ----------------------------------------------------------------------------- 10, 11: the fork tree's files


def test_a_caffe_proto_swapped_for_a_fifo_after_its_check_cannot_block(tmp_path):
    # Issue 31, item 10: the proto was stat'ed, then read by its path: swapped for a FIFO
    # in between, the read waited forever (1 run in 25).  The swap is made certain here:
    # every stat of the path says "regular file" while the path is a FIFO.  Opened first
    # (non-blocking) and judged from the descriptor, it is refused at once.
    root = fork_tree(tmp_path / "caffe")
    proto = root / "src" / "caffe" / "proto" / "caffe.proto"
    regular = tmp_path / "regular.proto"
    proto.rename(regular)
    os.mkfifo(proto)
    code = (
        "import os, pathlib, sys\n"
        f"fifo, regular = {str(proto)!r}, {str(regular)!r}\n"
        "real_stat = os.stat\n"
        "os.stat = lambda path, *a, **k: real_stat(regular if os.fspath(path) == fifo else path, *a, **k)\n"
        "from caffemem.errors import CaffememError\nfrom caffemem.schema.caffe_root import compile_proto\n"
        "try:\n    compile_proto(pathlib.Path(fifo))\nexcept CaffememError as error:\n    print(error)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"{proto}: is a FIFO (named pipe), not a caffe.proto: save it to a regular file first"


def test_a_2_gb_sparse_source_file_in_the_tree_is_scanned_in_bounded_memory(tmp_path):
    # Issue 31, item 11: registered_types read each .cpp whole (4.1 GB for a 2 GB sparse
    # file of NULs, one "line").  Now a line at a time, each cut at 64 KiB: the scan runs
    # under a 512 MiB address-space cap and still finds the registration after the hole.
    layers = tmp_path / "src" / "caffe" / "layers"
    layers.mkdir(parents=True)
    with open(layers / "huge_layer.cpp", "wb") as sparse:
        sparse.truncate(2 * 2**30)
        sparse.seek(0, os.SEEK_END)
        sparse.write(b"\nREGISTER_LAYER_CLASS(AfterTheHole);\n")
    (layers / "up_layer.cpp").write_text("#define X(type) \\\n  REGISTER_LAYER_CLASS(NotThis)\nREGISTER_LAYER_CLASS(Up);\n")
    code = (
        "import resource, sys\nresource.setrlimit(resource.RLIMIT_AS, (512 * 2**20, 512 * 2**20))\n"
        "from pathlib import Path\nfrom caffemem.schema.caffe_root import registered_types\n"
        f"print(sorted((t, r.line) for t, r in registered_types(Path({str(tmp_path)!r})).items()))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr
    # The hole is 2 GiB of NULs with no newline: 32,768 "lines" of 64 KiB, then the newline.
    assert done.stdout.strip() == f"[('AfterTheHole', {2 * 2**30 // 2**16 + 2}), ('Up', 3)]"


# ----------------------------------------------------------------------------- 12: no output over a file the run read


@pytest.mark.skipif(tree_module._grpc_tools_spec() is None and shutil.which("protoc") is None, reason="no protoc")
def test_o_over_the_caffe_proto_of_caffe_root_is_refused(tmp_path, monkeypatch):
    root = fork_tree(tmp_path / "caffe")
    proto = root / "src" / "caffe" / "proto" / "caffe.proto"
    before = proto.read_bytes()
    monkeypatch.setenv("CAFFEMEM_CACHE_DIR", str(tmp_path / "cache"))
    result = run("optimize", LENET, "--caffe-root", root, "-o", proto)
    assert result.exit_code == 2
    assert one_error_line(result) == f"caffemem: error: {proto}: -o names a file this run read; choose another file"
    assert proto.read_bytes() == before


@pytest.mark.skipif(tree_module._grpc_tools_spec() is None and shutil.which("protoc") is None, reason="no protoc")
def test_an_output_over_a_source_file_of_caffe_root_is_refused_even_unread(tmp_path, monkeypatch):
    # The hostile campaign: with the cache warm (or no unknown type to look up) the tree's
    # .cpp files were not read this run, and `--html` overwrote one of them.
    root = fork_tree(tmp_path / "caffe")
    source = root / "src" / "caffe" / "layers" / "up_layer.cpp"
    source.parent.mkdir(parents=True)
    source.write_text("REGISTER_LAYER_CLASS(Up);\n")
    monkeypatch.setenv("CAFFEMEM_CACHE_DIR", str(tmp_path / "cache"))
    assert run("analyze", LENET, "--caffe-root", root).exit_code == 0  # the cache is warm now
    result = run("analyze", LENET, "--caffe-root", root, "--html", source)
    assert result.exit_code == 2
    assert one_error_line(result) == f"caffemem: error: {source}: --html names a file this run read; choose another file"
    assert source.read_text() == "REGISTER_LAYER_CLASS(Up);\n"


def test_check_report_over_the_config_it_read_is_refused(tmp_path, monkeypatch):
    # Issue 31, item 12: `check ... --report json:caffemem.toml` replaced the settings.
    shutil.copy(LENET, tmp_path / "net.prototxt")
    config = tmp_path / "caffemem.toml"
    config.write_text('budget = "1GiB"\n')
    monkeypatch.chdir(tmp_path)
    result = run("check", "net.prototxt", "--report", "json:caffemem.toml")
    assert result.exit_code == 2
    assert one_error_line(result) == "caffemem: error: caffemem.toml: --report names a file this run read; choose another file"
    assert config.read_text() == 'budget = "1GiB"\n'


def test_check_report_over_the_named_config_is_refused(tmp_path):
    shutil.copy(LENET, tmp_path / "net.prototxt")
    config = tmp_path / "settings.toml"
    config.write_text('budget = "1GiB"\n')
    result = run("check", tmp_path / "net.prototxt", "--config", config, "--report", f"markdown:{config}")
    assert result.exit_code == 2 and "--report names a file this run read" in one_error_line(result)
    assert config.read_text() == 'budget = "1GiB"\n'


CUSTOM_NET, CUSTOM_LAYERS = FIXTURES / "custom" / "net.prototxt", FIXTURES / "custom" / "upsample_layers.toml"
CUSTOM_INPUTS = ("--input", "data=2,3,8,10", "--input", "label=2,16,20")


def test_o_over_the_layers_file_is_refused(tmp_path):
    layers = tmp_path / "custom.layers.toml"
    shutil.copy(CUSTOM_LAYERS, layers)
    result = run("optimize", CUSTOM_NET, *CUSTOM_INPUTS, "--layers", layers, "-o", layers)
    assert result.exit_code == 2 and "names an input of this run" in one_error_line(result)
    assert layers.read_bytes() == CUSTOM_LAYERS.read_bytes()


def test_with_in_place_file_only_the_net_itself_may_be_replaced(tmp_path):
    layers, net = tmp_path / "custom.layers.toml", tmp_path / "net.prototxt"
    shutil.copy(CUSTOM_LAYERS, layers)
    shutil.copy(CUSTOM_NET, net)
    assert run("optimize", net, *CUSTOM_INPUTS, "--layers", layers, "-o", layers, "--in-place-file").exit_code == 2
    assert layers.read_bytes() == CUSTOM_LAYERS.read_bytes()
    assert run("optimize", net, *CUSTOM_INPUTS, "--layers", layers, "-o", net, "--in-place-file").exit_code == 0
    assert b"mem_param" in net.read_bytes()


# ----------------------------------------------------------------------------- 9, 15, 16: check's settings


def checked_in(folder: Path, *args):
    shutil.copy(LENET, folder / "net.prototxt")
    cwd = os.getcwd()
    os.chdir(folder)
    try:
        return run("check", "net.prototxt", *args)
    finally:
        os.chdir(cwd)


def test_config_a_fifo_is_refused_without_waiting(tmp_path):
    # Issue 31, item 9: --config FIFO waited forever for a writer.
    fifo = tmp_path / "settings.toml"
    os.mkfifo(fifo)
    result = checked_in(tmp_path, "--config", fifo)
    assert result.exit_code == 2
    assert one_error_line(result) == f"caffemem: error: {fifo}: is a FIFO (named pipe), not a settings file: save it to a regular file first"


def test_config_dev_zero_is_refused_unread(tmp_path):
    # Issue 31, item 9: --config /dev/zero grew to 23.7 GB before the kernel killed it.
    result = checked_in(tmp_path, "--config", "/dev/zero")
    assert result.exit_code == 2 and one_error_line(result) == "caffemem: error: /dev/zero: is a device, not a settings file"


def test_a_settings_file_larger_than_any_is_refused_after_its_limit(tmp_path):
    big = tmp_path / "big.toml"
    big.write_bytes(b"# " + b"x" * (4 * 2**20) + b"\n")
    result = checked_in(tmp_path, "--config", big)
    assert result.exit_code == 2 and one_error_line(result) == f"caffemem: error: {big}: is over 4 MiB, larger than any settings file"


def test_another_tools_table_does_not_silence_the_budget(tmp_path):
    # Issue 31, item 15: any [tool.x] table made read_config look only at [tool.caffemem]:
    # the top-level budget went unread and the gate passed ("no budget").
    (tmp_path / "caffemem.toml").write_text('budget = "1MiB"\n[[nets]]\nglob = "*.prototxt"\n[tool.x]\ny = 1\n')
    result = checked_in(tmp_path)
    assert result.exit_code == 1  # LeNet's nets hold 13.99 and 7.54 MiB
    assert "caffemem check failed: 2 failed, 0 bad input, 0 passed (budget 1.00 MiB, stock Caffe)" in result.stdout


def test_settings_both_at_the_top_and_in_tool_caffemem_are_refused(tmp_path):
    (tmp_path / "settings.toml").write_text('budget = "1MiB"\n[tool.caffemem]\nbudget = "1TiB"\n')
    result = checked_in(tmp_path, "--config", tmp_path / "settings.toml")
    assert result.exit_code == 2
    assert one_error_line(result).endswith("settings.toml: sets 'budget' at its top level and has a [tool.caffemem] table: keep caffemem's settings in one of them")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('tool = "caffemem"\n', "'tool' must be a table ([tool.NAME] holds each tool's settings)"),
        ("[tool]\ncaffemem = 5\n", "'tool.caffemem' must be a table ([tool.caffemem] with budget and [[tool.caffemem.nets]])"),
    ],
)
def test_a_pyproject_whose_tool_is_not_a_table_is_bad_input_not_a_crash(tmp_path, text, message):
    # Issue 31, item 16: exit 3 (TypeError, AttributeError) before.
    (tmp_path / "pyproject.toml").write_text(text)
    result = checked_in(tmp_path)
    assert result.exit_code == 2 and one_error_line(result) == f"caffemem: error: {tmp_path / 'pyproject.toml'}: {message}"


@pytest.mark.parametrize("text", ["tool = 5\n", "[project\nname = 'broken'\n", "[tool.black]\nline-length = 'x'\n"])
def test_a_pyproject_that_is_not_caffemems_is_passed_over(tmp_path, text):
    # Issue 31, items 16 and 18: `tool = 5` was exit 3, an unrelated broken pyproject.toml exit 2.
    (tmp_path / "pyproject.toml").write_text(text)
    result = checked_in(tmp_path)
    assert result.exit_code == 0, result.output


def test_a_settings_file_nested_too_deeply_is_named(tmp_path):
    # Issue 31, item 18: "nests too deeply to be a Caffe definition" named no file.
    deep = tmp_path / "deep.toml"
    deep.write_text("x = " + "[" * 100_000 + "]" * 100_000 + "\n")
    result = checked_in(tmp_path, "--config", deep)
    assert result.exit_code == 2
    assert one_error_line(result) == f"caffemem: error: {deep}: nests too deeply to be a settings file"


def test_check_with_jobs_knows_what_its_workers_read(tmp_path):
    # The files a --jobs worker reads (a solver's nets, a data source's list) are the
    # run's too: a report may not land on one.  Here: a solver's net, read in a worker only.
    for name in ("a", "b"):
        shutil.copy(LENET, tmp_path / f"{name}.prototxt")
    (tmp_path / "solver.prototxt").write_text('net: "a.prototxt"\n')
    result = run("check", tmp_path / "solver.prototxt", tmp_path / "b.prototxt", "--jobs", "2", "--report", f"json:{tmp_path / 'a.prototxt'}")
    assert result.exit_code == 2 and "--report names a file this run read" in one_error_line(result)
    assert (tmp_path / "a.prototxt").read_bytes() == LENET.read_bytes()


# ----------------------------------------------------------------------------- 13, 14: the block after a comment ended by CR


def lenet_without_its_comments(eol: bytes) -> bytes:
    return eol.join(line for line in LENET.read_bytes().split(b"\n") if not line.startswith(b"#"))


@pytest.mark.parametrize(
    "ending",
    [
        pytest.param(b"\n# end\r", id="an LF file whose last line is a comment ended by CR"),
        pytest.param(b"\r# end\r", id="a CR-only file ending in a comment and CR"),
        pytest.param(b"\r# end", id="a CR-only file ending in a comment without a line end"),
        pytest.param(b"\r\n# end\r", id="a CRLF file whose last line is a comment ended by CR"),
    ],
)
@pytest.mark.parametrize("extra", [(), ("--inplace",)], ids=["plain", "inplace"])
def test_a_comment_ended_by_cr_never_swallows_the_block(tmp_path, ending, extra):
    # Issue 31, item 13: the block began right after the comment's lone CR, and protobuf's
    # text format ends a comment at LF only: the mem_param was part of the comment (Caffe
    # and verify: "no field named optimize_train").
    eol = ending[:-len(b"# end\r")] if ending.endswith(b"\r") else ending[:-len(b"# end")]
    net, out = tmp_path / "net.prototxt", tmp_path / "out.prototxt"
    net.write_bytes(lenet_without_its_comments(eol) + ending)
    assert run("optimize", net, *extra, "-o", out).exit_code == 0
    written = out.read_bytes()
    if not extra:
        assert written.startswith(net.read_bytes())
    assert run("verify", out).exit_code == 0  # the table and its record read back


def test_force_keeps_the_crlf_of_the_old_block(tmp_path):
    # Issue 31, item 14: the old block is blanked out with spaces, and the CR of its CRLF
    # lines became spaces too; line ends are kept now (a CRLF file stays one).
    net, once, twice = tmp_path / "net.prototxt", tmp_path / "once.prototxt", tmp_path / "twice.prototxt"
    net.write_bytes(LENET.read_bytes().replace(b"\n", b"\r\n"))
    assert run("optimize", net, "-o", once).exit_code == 0
    assert run("optimize", once, "--force", "-o", twice).exit_code == 0
    old_block = once.read_bytes()[len(net.read_bytes()):]
    blanked = twice.read_bytes()[len(net.read_bytes()) : len(once.read_bytes())]
    assert old_block.count(b"\r\n") > 10 and blanked.count(b"\r\n") == old_block.count(b"\r\n")
    assert blanked.replace(b"\r\n", b"").strip(b" ") == b""


def test_a_batch_rewrite_that_would_not_read_back_names_the_users_net_not_the_unwritten_output():
    # Issue 31, item 13: `--batch` caught the swallowed block but named the output file
    # (never written) as the place of the error.
    from caffemem.api.analyze import Options
    from caffemem.cli.optimize import check_written
    from caffemem.errors import CaffememError

    with pytest.raises(CaffememError) as refused:
        check_written('name: "x"\nlayer {\n', "net.prototxt", "out.prototxt", Options(batch=8))
    assert refused.value.where.file == "net.prototxt"
    assert str(refused.value).startswith("net.prototxt: --batch 8: the file rewritten at that batch would not read back (")
    assert str(refused.value).endswith("; nothing written to out.prototxt")


# ----------------------------------------------------------------------------- 14: SIGTERM as a run ends

TERMINATED_BEFORE_LANDING = """
import os, signal, sys
import caffemem.__main__ as entry  # the script's entry: its handlers as a user's run has them
import caffemem.cli.common as common

staged = common._land
def land_after_sigterm(commit):  # the outputs wait, staged, in their temporary files
    os.kill(os.getpid(), signal.{signal})
    staged(commit)
common._land = land_after_sigterm
sys.argv = ["caffemem", "check", "net.prototxt", "--report", "json:r.json", "--report", "markdown:r.md"]
entry.run()
"""


@pytest.mark.parametrize("signal_name", ["SIGTERM", "SIGHUP"])
def test_sigterm_before_the_outputs_land_leaves_no_temporary_file(tmp_path, signal_name):
    # Issue 31, item 14: SIGTERM at the end of `check` left `.r.json.XXXXXXXX.tmp` beside
    # the output (2 runs of 14): the default action ended the process before its cleanup.
    shutil.copy(LENET, tmp_path / "net.prototxt")
    env = dict(os.environ, PYTHONPATH=str(REPO), CAFFEMEM_DEVICE="cpu")
    done = subprocess.run([sys.executable, "-c", TERMINATED_BEFORE_LANDING.format(signal=signal_name)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 128 + getattr(__import__("signal"), signal_name)
    assert done.stderr == "caffemem: terminated\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["net.prototxt"]


# ----------------------------------------------------------------------------- 16: a damaged record


def made_for_edited(tmp_path, edit) -> Path:
    out = tmp_path / "out.prototxt"
    assert run("optimize", LENET, "-o", out).exit_code == 0
    text = out.read_text()
    out.write_text(edit(text))
    return out


@pytest.mark.parametrize("level", ["2147483648", "-2147483649", "1e3", "true"])
def test_a_made_for_record_with_a_level_beyond_int32_is_a_damaged_record(tmp_path, level):
    # Issue 31, item 16: "level": 2147483648 was read, then failed as a bug (exit 3).
    out = made_for_edited(tmp_path, lambda text: text.replace('"level": null', f'"level": {level}'))
    result = run("verify", out)
    assert result.exit_code == 2
    assert "the plan's 'caffemem made-for' record is damaged (expected a whole number from -2147483648 to 2147483647, not" in one_error_line(result)


def test_a_record_made_with_an_axis_kept_from_the_file_reads_back(tmp_path):
    # `--input data=_,1,28,28` is recorded as [-1, 1, 28, 28]: verify refused its own record.
    out = tmp_path / "out.prototxt"
    net = FIXTURES / "docs" / "deploy.prototxt"  # its Input states 10 x 3 x 224 x 224
    assert run("optimize", net, "--input", "data=_,3,_,_", "-o", out).exit_code == 0
    assert '"inputs": {"data": [-1, 3, -1, -1]}' in out.read_text()
    assert run("verify", out).exit_code == 0


# ----------------------------------------------------------------------------- 18: digits are ASCII digits


@pytest.mark.parametrize("size", ["\u0661GiB", "\u0661\u0662MiB", "1\u00a0GiB".replace("1", "\u06f1")])
def test_a_size_in_arabic_indic_digits_is_refused(size):
    # Issue 31, item 18: `\d` and Decimal read every script's digits; Caffe and a shell do not.
    result = run("check", LENET, "--budget", size)
    assert result.exit_code == 2 and "expected a size such as 11GiB" in one_error_line(result)


def test_a_layers_rule_in_arabic_indic_digits_is_refused():
    from caffemem.layers.declarative import _AXIS, _LIKE

    assert _LIKE.match("like bottom \u0660") is None and _AXIS.match("axis \u0661 = 3") is None
    assert _LIKE.match("like bottom 0") and _AXIS.match("axis 1 = 3")


# ----------------------------------------------------------------------------- 18: --target fork never above stock

FORK_DEFECT_NET = FIXTURES / "plan" / "fork_defect.prototxt"  # docs/fork-memopt.md §10


def test_target_fork_leaves_the_forks_optimizer_off_where_it_holds_more_than_stock(tmp_path):
    # Issue 31, item 18: --target fork enabled the fork's optimizer in TEST, where its plan
    # holds 448 B against stock's 440 (its slot is as large as its largest member, 8 B
    # more than the blobs it replaces).
    out = tmp_path / "fork.prototxt"
    result = run("optimize", FORK_DEFECT_NET, "--target", "fork", "--device", "cpu", "-o", out)
    assert result.exit_code == 0
    assert "caffemem: the fork's own optimizer would hold 448 B in TEST, more than stock Caffe's 440 B: left off there (optimize_test: false)" in result.stderr
    block = out.read_text()[len(FORK_DEFECT_NET.read_text()) :]
    assert "optimize_train: true" in block and "optimize_test: false" in block


# ----------------------------------------------------------------------------- 18: verify of a table with no slot


def test_verify_checks_the_forks_own_plan_where_the_file_hands_a_phase_to_it(tmp_path):
    # Issue 31, item 18: `verify` on a `--target fork` output said "the file carries no slot
    # table".  The phase is the fork's optimizer's: its plan, reproduced, is what runs.
    bad, kept = tmp_path / "fork.prototxt", tmp_path / "kept.prototxt"
    bad.write_text(FORK_DEFECT_NET.read_text() + "mem_param { optimize_train: true }\n")
    result = run("verify", bad, "--device", "cpu")
    assert result.exit_code == 1
    assert f"{bad}: TRAIN: step 8 (backward ip_ip_0_split), blob 'ip_ip_0_split_0': reads bytes that 'score' overwrote (slot 2)" in result.stdout
    assert "optimize_train hands it to the memory-multiloading fork's own optimizer (yjxiong/caffe)" in result.stdout
    assert run("optimize", FORK_DEFECT_NET, "--target", "fork", "--device", "cpu", "-o", kept).exit_code == 0
    result = run("verify", kept, "--device", "cpu")  # with the exclude_blob --target fork adds
    assert result.exit_code == 0 and result.stdout.startswith(f"{kept}: TRAIN, batch 2: the table is safe (3 slots)\n")


def test_optimize_batch_on_a_net_with_nothing_to_share_writes_a_table_verify_reads(tmp_path):
    # Issue 31, item 18: the --batch check refused its own output, "no slot table".
    net, out = tmp_path / "tiny.prototxt", tmp_path / "out.prototxt"
    net.write_text('name: "tiny"\nlayer { name: "data" type: "Input" top: "data" input_param { shape { dim: 1 dim: 3 } } }\nlayer { name: "r" type: "ReLU" bottom: "data" top: "data" }\n')
    assert run("optimize", net, "--batch", "4", "--device", "cpu", "-o", out).exit_code == 0
    result = run("verify", out)
    assert result.exit_code == 0 and result.stdout.startswith(f"{out}: TEST, batch 4: the table is safe (0 slots)\n")


def test_a_file_whose_mem_param_plans_no_phase_is_refused(tmp_path):
    net = tmp_path / "off.prototxt"
    net.write_text(LENET.read_text() + "mem_param { optimize_train: false }\n")
    result = run("verify", net)
    assert result.exit_code == 2 and one_error_line(result).endswith("the file's mem_param plans no phase (no slot table, and optimize_train and optimize_test are off): write one with `caffemem optimize NET -o OUT`, or give a plan JSON after the net")


# ----------------------------------------------------------------------------- Ctrl-C where Python cannot raise it


def test_ctrl_c_dropped_inside_a_weakref_callback_is_sent_again():
    # The campaign's case 3959: Ctrl-C landed in importlib's module-lock callback; Python
    # printed "Exception ignored ... KeyboardInterrupt" and the run went on.
    import signal
    from types import SimpleNamespace

    from caffemem.cli.common import redeliver_signals

    passed_on = []
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            redeliver_signals(passed_on.append, SimpleNamespace(exc_value=KeyboardInterrupt()))
            for _ in range(1000):  # the handler runs at the next bytecode boundary
                pass
        other = SimpleNamespace(exc_value=ValueError("in a __del__"))
        redeliver_signals(passed_on.append, other)
        assert passed_on == [other]
    finally:
        signal.signal(signal.SIGINT, previous)

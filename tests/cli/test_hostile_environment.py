"""A careless or hostile user and environment: the user's bytes survive, no output lands
on an input or a device, no read blocks, and every way a run can end has its exit code
(0 ok, 1 a finding, 2 bad input or environment, 130 interrupted) and one line."""

from __future__ import annotations

import importlib
import json
import os
import socket
import stat
import subprocess
import sys

import pytest
from click.testing import CliRunner
from conftest import FIXTURES, REPO

from caffemem.cli import main
from caffemem.prototxt.write import line_ending, locked

LENET = FIXTURES / "examples" / "lenet_train.prototxt"
FORK_DEFECT_NET = FIXTURES / "plan" / "fork_defect.prototxt"  # docs/fork-memopt.md §10


def run(*args) -> "CliRunner.invoke":
    return CliRunner().invoke(main, [str(a) for a in args])


def one_error_line(result) -> str:
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.output, result.output
    return lines[0]


# ----------------------------------------------------------------------------- the user's bytes

LINE_STYLES = {
    "CRLF, with a lone CR in a comment": LENET.read_bytes().replace(b"\n", b"\r\n").replace(b"# A LeNet", b"# A \r LeNet", 1),
    "no final newline": LENET.read_bytes().rstrip(b"\n"),
    "a UTF-8 BOM, tabs and trailing spaces": b"\xef\xbb\xbf" + LENET.read_bytes().replace(b"  name:", b"\tname:").replace(b"\n", b"  \n"),
    "a Latin-1 comment": LENET.read_bytes().replace(b"# A LeNet", b"# caf\xe9 \xff LeNet", 1),
}


@pytest.mark.parametrize("style", LINE_STYLES)
def test_optimize_keeps_every_byte_of_the_file_outside_its_block(tmp_path, style):
    net, out = tmp_path / "net.prototxt", tmp_path / "out.prototxt"
    net.write_bytes(LINE_STYLES[style])
    assert run("optimize", net, "-o", out).exit_code == 0
    written = out.read_bytes()
    assert written.startswith(net.read_bytes())
    ours = written[len(net.read_bytes()) :]
    assert ours.lstrip(b"\r\n").startswith(b"mem_param {")
    assert (b"\r\n" in ours) == (line_ending(net.read_bytes().decode("latin-1")) == "\r\n")  # the block in the file's own line ending


def test_a_crlf_file_gets_a_crlf_block():
    assert line_ending("a\r\nb\r\n") == "\r\n" and line_ending("a\nb\r\n") == "\r\n" and line_ending("a\nb\nc\r\n") == "\n"


# ----------------------------------------------------------------------------- outputs never overwrite inputs


@pytest.mark.parametrize("flag", ["-o", "--plan-json", "--html"])
def test_no_output_may_name_the_input_file(tmp_path, flag):
    net = tmp_path / "net.prototxt"
    net.write_bytes(LENET.read_bytes())
    result = run("optimize", net, flag, net)
    assert result.exit_code == 2 and "names an input of this run" in one_error_line(result)
    assert net.read_bytes() == LENET.read_bytes()


@pytest.mark.parametrize("link", ["symlink", "hard link"])
def test_a_link_to_the_input_is_the_input(tmp_path, link):
    net, alias = tmp_path / "net.prototxt", tmp_path / "alias.prototxt"
    net.write_bytes(LENET.read_bytes())
    (os.symlink if link == "symlink" else os.link)(net, alias)
    result = run("optimize", net, "-o", alias)
    assert result.exit_code == 2 and "names an input of this run" in one_error_line(result)
    assert net.read_bytes() == LENET.read_bytes()


def test_analyze_html_may_not_overwrite_a_solvers_net(tmp_path):
    (tmp_path / "net.prototxt").write_bytes(LENET.read_bytes())
    (tmp_path / "solver.prototxt").write_text('net: "net.prototxt"\ntest_iter: 1\ntest_interval: 10\nbase_lr: 0.1\nlr_policy: "fixed"\n')
    result = run("analyze", tmp_path / "solver.prototxt", "--html", tmp_path / "net.prototxt")
    assert result.exit_code == 2 and (tmp_path / "net.prototxt").read_bytes() == LENET.read_bytes()


def test_in_place_file_allows_the_input_on_purpose(tmp_path):
    net = tmp_path / "net.prototxt"
    net.write_bytes(LENET.read_bytes())
    assert run("optimize", net, "-o", net, "--in-place-file").exit_code == 0
    assert net.read_bytes().startswith(LENET.read_bytes()) and b"mem_param" in net.read_bytes()


def test_dash_is_standard_output(tmp_path):
    here = {**os.environ, "PYTHONPATH": str(REPO)}  # this checkout's caffemem, whatever the folder
    done = subprocess.run([sys.executable, "-m", "caffemem", "optimize", str(LENET), "-o", "-"], capture_output=True, cwd=tmp_path, env=here)
    assert done.returncode == 0 and done.stdout.startswith(LENET.read_bytes()) and b"mem_param {" in done.stdout
    assert not (tmp_path / "-").exists()


def test_a_device_is_never_replaced(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("making a device node needs root")
    node = tmp_path / "disk"
    os.mknod(node, stat.S_IFBLK | 0o600, os.makedev(7, 200))  # a loop device node: refused before any open
    result = run("optimize", LENET, "-o", node)
    assert result.exit_code == 2 and "names a device" in one_error_line(result)
    assert stat.S_ISBLK(os.stat(node).st_mode)


def test_dev_null_takes_the_output_and_dev_full_says_no_space():
    assert run("optimize", LENET, "-o", "/dev/null").exit_code == 0
    result = run("optimize", LENET, "-o", "/dev/full")
    assert result.exit_code == 2 and "no space left" in one_error_line(result)
    assert stat.S_ISCHR(os.stat("/dev/full").st_mode)


def test_a_stale_temporary_file_never_blocks_the_next_run(tmp_path):
    out = tmp_path / "out.prototxt"
    for stale in (tmp_path / "out.prototxt.tmp", tmp_path / ".out.prototxt.tmp", tmp_path / ".out.prototxt.abc123.tmp"):
        stale.write_text("left by a killed run")
    assert run("optimize", LENET, "-o", out).exit_code == 0
    assert b"mem_param {" in out.read_bytes()


# ----------------------------------------------------------------------------- unsafe writes


def test_target_fork_keeps_private_what_makes_the_forks_optimizer_safe(tmp_path):
    out, again = tmp_path / "out.prototxt", tmp_path / "again.json"
    result = CliRunner().invoke(main, ["optimize", str(FORK_DEFECT_NET), "--phase", "TRAIN", "--target", "fork", "-o", str(out)])
    assert result.exit_code == 0 and "kept private so that the fork's own optimizer is safe on this net: ip_ip_0_split_0" in result.output
    assert 'exclude_blob: "ip_ip_0_split_0"' in out.read_text()
    # The fork, planning the file written, honours its exclude_blob: its plan passes the verifier.
    replanned = CliRunner().invoke(main, ["optimize", str(out), "--phase", "TRAIN", "--force", "--json"])
    assert json.loads(replanned.output)["phases"][0]["fork_plan_safe"] is True


def test_target_fork_refuses_when_no_exclusion_makes_the_fork_safe(tmp_path, monkeypatch):
    api_optimize = importlib.import_module("caffemem.api.optimize")
    monkeypatch.setattr(api_optimize, "fork_safe_exclusions", lambda *args: None)  # no blob helps
    out = tmp_path / "out.prototxt"
    result = CliRunner().invoke(main, ["optimize", str(FORK_DEFECT_NET), "--phase", "TRAIN", "--target", "fork", "-o", str(out)])
    assert result.exit_code == 1 and "would corrupt this net in TRAIN" in result.output and "nothing written" in result.output
    assert not out.exists()
    assert run("optimize", FORK_DEFECT_NET, "--phase", "TRAIN", "-o", out).exit_code == 0  # caffemem's own table is verified


# ----------------------------------------------------------------------------- inputs that are not files


def test_a_fifo_is_refused_without_reading_it(tmp_path):
    fifo = tmp_path / "net.prototxt"
    os.mkfifo(fifo)  # opening it for reading would block until a writer comes: never here
    result = run("analyze", fifo)
    assert result.exit_code == 2 and "is a FIFO" in one_error_line(result)


def test_a_socket_is_refused(tmp_path):
    path = tmp_path / "s.prototxt"
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(str(path))
        result = run("analyze", path)
    assert result.exit_code == 2 and "is a socket" in one_error_line(result)


def test_a_text_file_over_the_limit_is_refused_and_the_limit_can_be_raised(tmp_path):
    net = tmp_path / "net.prototxt"
    net.write_bytes(LENET.read_bytes() + b"# padding\n" * 20_000)  # 200 KB
    result = run("analyze", net, "--max-input-size", "100KiB")
    assert result.exit_code == 2 and "larger than any net definition (102400 bytes at most; --max-input-size raises it)" in one_error_line(result)
    assert run("analyze", net, "--max-input-size", "1MiB", "--json").exit_code == 0


def test_a_nul_byte_is_refused_at_its_line(tmp_path):
    net = tmp_path / "net.prototxt"
    text = LENET.read_bytes()
    net.write_bytes(text.replace(b'name: "conv2"', b'name: "co\x00nv2"'))
    line = text[: text.index(b'name: "conv2"')].count(b"\n") + 1
    result = run("analyze", net)
    assert result.exit_code == 2 and one_error_line(result).startswith(f"caffemem: error: {net}:{line}: a NUL byte")


def test_a_name_of_megabytes_is_refused(tmp_path):
    net = tmp_path / "net.prototxt"
    net.write_bytes(LENET.read_bytes().replace(b'name: "conv1"', b'name: "' + b"c" * 5000 + b'"'))
    result = run("analyze", net)
    assert result.exit_code == 2 and "a name of 5000 characters" in one_error_line(result)


def test_a_field_caffe_would_wrap_is_refused_at_its_layer(tmp_path):
    net = tmp_path / "net.prototxt"
    net.write_bytes(LENET.read_bytes().replace(b"stride: 1 weight_filler", b"stride: 4294967295 weight_filler", 1))
    line = one_error_line(run("analyze", net))
    # conv1's stride: Caffe reads 4294967295 into an int as -1, and its CHECK_GT(stride, 0) fails.
    assert "layer 'conv1' (Convolution): convolution_param.stride: 4294967295 does not fit Caffe's 32-bit int" in line and "wrap it to -1" in line


def test_a_blob_past_int_max_is_refused_with_the_layer_and_shape(tmp_path):
    net = tmp_path / "net.prototxt"
    net.write_bytes(LENET.read_bytes().replace(b"shape { dim: 64 dim: 1 dim: 28 dim: 28 }", b"shape { dim: 65536 dim: 1 dim: 280 dim: 280 }"))
    line = one_error_line(run("analyze", net))
    # 65536 x 280 x 280 = 5,138,022,400 elements > 2,147,483,647: Blob::Reshape's CHECK_LE(count_, INT_MAX).
    assert "layer 'digits' (Input)" in line and "65536 1 280 280 (5138022400) exceeds INT_MAX elements" in line


# ----------------------------------------------------------------------------- how runs end


def test_a_closed_pipe_ends_quietly_with_0():
    done = subprocess.run(f"{sys.executable} -m caffemem analyze {LENET} | head -c 10 >/dev/null; exit ${{PIPESTATUS[0]}}", shell=True, executable="/bin/bash", capture_output=True, text=True)
    assert done.returncode == 0 and done.stderr == ""


def test_ctrl_c_exits_130_with_one_line_and_no_output_file(tmp_path, monkeypatch):
    api_optimize = importlib.import_module("caffemem.api.optimize")  # the module (caffemem.api.optimize is also the function)

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(api_optimize, "optimize", interrupted)
    result = run("optimize", LENET, "-o", tmp_path / "out.prototxt")
    assert result.exit_code == 130 and one_error_line(result) == "caffemem: interrupted"
    assert list(tmp_path.iterdir()) == []


def test_a_long_layer_name_is_elided_in_the_table(tmp_path):
    net = tmp_path / "net.prototxt"
    net.write_bytes(LENET.read_bytes().replace(b'name: "conv1"', b'name: "' + b"x" * 300 + b'"'))
    result = run("analyze", net, "--layers-table")
    assert result.exit_code == 0
    table = [line for line in result.output.splitlines() if line.startswith(("│", "┃", "┏", "└"))]
    assert max(len(line) for line in table) < 300 and "x" * 24 + "…" + "x" * 23 in result.output


# ----------------------------------------------------------------------------- the baseline, shared by runs


def test_two_baseline_updates_at_once_both_land(tmp_path, monkeypatch):
    """Another run writes its figure while this one measures: both entries survive, since
    the update re-reads the file under the lock."""
    import caffemem.api.check as api_check

    baseline, other = tmp_path / "baseline.json", tmp_path / "other.prototxt"
    other.write_bytes(LENET.read_bytes())
    assert run("check", other, "--baseline", baseline, "--update-baseline").exit_code == 0
    measured_first = json.loads(baseline.read_text())
    baseline.write_text(json.dumps({**measured_first, "nets": {}}))  # this run starts from an empty baseline
    real = api_check.check_files

    def slow_check_files(*args, **kwargs):
        outcomes = real(*args, **kwargs)
        with locked(str(baseline)):
            baseline.write_text(json.dumps(measured_first))  # the other run lands meanwhile
        return outcomes

    monkeypatch.setattr(api_check, "check_files", slow_check_files)
    assert run("check", LENET, "--baseline", baseline, "--update-baseline").exit_code == 0
    nets = json.loads(baseline.read_text())["nets"]
    assert set(nets) == set(measured_first["nets"]) | {next(k for k in nets if "lenet_train" in k)}
    assert len(nets) == 2


def test_exit_codes_are_in_every_help():
    for command in ("analyze", "optimize", "verify", "check", "fit"):
        assert "130 interrupted" in run(command, "--help").output


def test_more_layers_than_any_net_are_refused_before_the_parse(tmp_path):
    # 50,001 one-line layers (3 MB): under the size limit, but past what the pipeline
    # plans in bounded memory; refused by a scan, not after parsing them all.
    net = tmp_path / "net.prototxt"
    net.write_text('input: "x" input_shape { dim: 1 }\n' + 'layer { name: "r" type: "ReLU" bottom: "x" top: "x" }\n' * 50_001)
    result = run("analyze", net)
    assert result.exit_code == 2 and "50001 layer blocks; caffemem plans nets of up to 50,000 layers" in one_error_line(result)

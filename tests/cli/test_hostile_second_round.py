"""Issue 26, the second hostile round: each defect the campaign found, as the reproduction
it was filed with (items 1, 3, 4 and 7), and the contract every run keeps whatever the
environment does to it — exit 0, 1, 2 or 130 only, one line on stderr, never a traceback,
nothing written before the command has succeeded."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
from click.testing import CliRunner
from conftest import FIXTURES, REPO, SHARED, needs_shared, one_error_line, run_cli

from caffemem.cli import main

LENET = FIXTURES / "examples" / "lenet_train.prototxt"
FORK_DEFECT_NET = FIXTURES / "plan" / "fork_defect.prototxt"  # docs/fork-memopt.md §10
HERE = {**os.environ, "PYTHONPATH": str(REPO), "CAFFEMEM_DEVICE": "cpu"}  # this checkout's caffemem, whatever the folder


run = run_cli


def shell(command: str, cwd, env=None, **kwargs) -> subprocess.CompletedProcess:
    """``caffemem`` as a user's shell runs it (python -m caffemem, this checkout)."""
    command = command.replace("caffemem ", f"{sys.executable} -m caffemem ", 1)
    return subprocess.run(command, check=False, shell=True, executable="/bin/bash", cwd=cwd, env=env or HERE, capture_output=True, **kwargs)


def stderr_line(done: subprocess.CompletedProcess) -> str:
    lines = done.stderr.decode("utf-8", "replace").splitlines()
    assert len(lines) == 1 and "Traceback" not in lines[0], lines
    return lines[0]


# ----------------------------------------------------------------------------- 1. an unsafe plan written with exit 0


def test_strategy_fork_on_a_net_the_fork_corrupts_is_a_finding_and_writes_nothing(tmp_path):
    # The fork's own optimizer lets 'score' overwrite the split's first copy before
    # ip_ip_0_split's backward reads it (TRAIN step 8): its plan fails the verifier, and
    # --strategy fork has no other plan to offer.
    out, plan = tmp_path / "o.prototxt", tmp_path / "p.json"
    result = run("optimize", FORK_DEFECT_NET, "--strategy", "fork", "-o", out, "--plan-json", plan)
    assert result.exit_code == 1
    line = one_error_line(result)
    assert "TRAIN net: the fork's plan is unsafe" in line and "reads bytes that 'score' overwrote" in line and "--strategy auto" in line
    assert list(tmp_path.iterdir()) == []


def test_strategy_fork_where_the_forks_plan_is_safe_still_writes_it(tmp_path):
    out, plan = tmp_path / "o.prototxt", tmp_path / "p.json"
    assert run("optimize", LENET, "--strategy", "fork", "-o", out, "--plan-json", plan).exit_code == 0
    assert run("verify", out, plan).exit_code == 0


@needs_shared
@pytest.mark.parametrize("net", ["tsn_ucf101/tsn_bn_inception_rgb_train_val.prototxt", "finetune_flickr_style/train_val.prototxt"])
def test_every_written_fork_plan_of_the_real_nets_passes_verify(tmp_path, net):
    path = SHARED / "models" / net
    if not path.is_file():
        pytest.skip(f"{net} is not in ../shared")
    out, plan = tmp_path / "o.prototxt", tmp_path / "p.json"
    result = run("optimize", path, "--strategy", "fork", "-o", out, "--plan-json", plan)
    assert result.exit_code in (0, 1), result.output
    if result.exit_code == 0:
        assert run("verify", out, plan).exit_code == 0
    else:
        assert not out.exists() and not plan.exists()


# ----------------------------------------------------------------------------- 3. one output over another


@pytest.mark.parametrize("second", ["--plan-json", "--html"])
def test_two_outputs_naming_one_file_are_refused_before_anything_is_written(tmp_path, second):
    out = tmp_path / "out"
    result = run("optimize", LENET, "-o", out, second, out)
    assert result.exit_code == 2 and f"{second} names the same file as -o" in one_error_line(result)
    assert list(tmp_path.iterdir()) == []


def test_a_link_to_another_output_is_that_output(tmp_path):
    (tmp_path / "plan.json").write_text("{}")
    os.symlink(tmp_path / "plan.json", tmp_path / "alias")
    result = run("optimize", LENET, "--plan-json", tmp_path / "plan.json", "--html", tmp_path / "alias")
    assert result.exit_code == 2 and "--html names the same file as --plan-json" in one_error_line(result)
    assert (tmp_path / "plan.json").read_text() == "{}"


def test_check_refuses_a_report_over_its_baseline(tmp_path):
    baseline = tmp_path / "b.json"
    result = run("check", LENET, "--baseline", baseline, "--update-baseline", "--report", f"json:{baseline}")
    assert result.exit_code == 2 and "--report names the same file as --baseline" in one_error_line(result)
    assert not baseline.exists()


# ----------------------------------------------------------------------------- 4. exit 3 where the contract says 2

SOLVER_WITH_A_LIST = """net: "{net}"
test_net_param [{{ layer {{ name: "a" type: "Input" top: "x" input_param {{ shape {{ dim: 1 }} }} }} }},
                {{ layer {{ name: "a" type: "Input" top: "x" input_param {{ shape {{ dim: 2 }} }} }} }}]
test_iter: 1
test_iter: 1
"""


@pytest.mark.parametrize("command", [["analyze"], ["check"], ["fit", "--gpu-memory", "1GiB"], ["optimize"]])
def test_a_solvers_test_nets_written_as_a_list_are_read(tmp_path, command):
    # Protobuf's text format reads `field [{...}, {...}]` as two repeated messages: two test nets.
    solver = tmp_path / "solver.prototxt"
    solver.write_text(SOLVER_WITH_A_LIST.format(net=LENET))
    result = run(command[0], solver, *command[1:])
    if command[0] == "optimize":  # optimize takes a net, and says so
        assert result.exit_code == 2 and "not a solver" in one_error_line(result)
    else:
        assert result.exit_code == 0, result.output


def test_a_solvers_test_net_list_gets_both_nets(tmp_path):
    import caffemem

    solver = tmp_path / "solver.prototxt"
    solver.write_text(SOLVER_WITH_A_LIST.format(net=LENET))
    shapes = [net.shaped.blob_shapes["x"] for net in caffemem.analyze(str(solver)).nets if "x" in net.shaped.blob_shapes]
    assert shapes == [(1,), (2,)]


@pytest.mark.parametrize("field", ["bytes", "budget", "layers"])
def test_a_baseline_figure_of_1e999_is_not_a_baseline(tmp_path, field):
    baseline = tmp_path / "b.json"
    assert run("check", LENET, "--baseline", baseline, "--update-baseline").exit_code == 0
    text = baseline.read_text()
    if field == "layers":
        text = text.replace('"conv1": ', '"conv1": 1e999, "was": ', 1)
    elif field == "budget":
        text = text.replace('"bytes": ', '"budget": 1e999, "bytes": ', 1)
    else:
        text = text.replace('"bytes": ', '"bytes": 1e999, "was": ', 1)
    baseline.write_text(text)
    result = run("check", LENET, "--baseline", baseline)
    assert result.exit_code == 2 and "not a caffemem baseline" in one_error_line(result)


NINES = "9" * 400


@pytest.mark.parametrize("command", [["check", LENET, "--budget", NINES], ["fit", LENET, "--gpu-memory", "12GiB", "--reserve", NINES], ["fit", LENET, "--gpu-memory", NINES]])
def test_a_size_of_hundreds_of_nines_is_refused(command):
    result = run(*command)
    assert result.exit_code == 2 and "larger than any memory" in one_error_line(result)


def test_a_binary_net_whose_name_is_not_utf8_is_refused(tmp_path):
    # field 1 (name), 2 bytes "\xc2x": not UTF-8; then one layer {name: "a" type: "ReLU"}.
    net = tmp_path / "b.caffemodel"
    net.write_bytes(b"\x0a\x02\xc2x\xa2\x06\x09\x0a\x01a\x12\x04ReLU")
    result = run("analyze", net)
    assert result.exit_code == 2 and "binary file is not a Caffe NetParameter" in one_error_line(result)


# ----------------------------------------------------------------------------- 7. names and edges


def test_an_output_with_a_255_byte_name_is_written(tmp_path):
    out = tmp_path / ("o" * 251 + ".txt")  # 255 bytes: the most ext4 allows
    assert run("optimize", LENET, "-o", out).exit_code == 0
    assert out.read_bytes().startswith(LENET.read_bytes())
    assert [p.name for p in tmp_path.iterdir()] == [out.name]


@pytest.mark.parametrize("flag", ["-o", "--plan-json", "--html"])
def test_an_empty_output_name_is_refused(tmp_path, flag):
    result = CliRunner().invoke(main, ["optimize", str(LENET), flag, ""])
    assert result.exit_code == 2 and f"{flag} names no file" in one_error_line(result)


def test_a_cr_only_file_gets_its_block_with_cr_endings(tmp_path):
    net, out = tmp_path / "net.prototxt", tmp_path / "out.prototxt"
    # Without its comments: protobuf ends a comment at LF only, so in a CR-only file the
    # first `#` would hide the rest of the file from Caffe (and from caffemem) alike.
    lines = [line for line in LENET.read_bytes().split(b"\n") if not line.startswith(b"#")]
    net.write_bytes(b"\r".join(lines))
    assert run("optimize", net, "-o", out).exit_code == 0
    ours = out.read_bytes()[len(net.read_bytes()) :]
    assert ours.startswith(b"mem_param {\r")
    # Every line of the block ends CR but the record's comments, which end CR LF: protobuf
    # ends a comment at LF only, and a comment ending CR would hide the rest of the block.
    comments = [line for line in ours.split(b"\r") if line.lstrip(b"\n").lstrip().startswith(b"#")]
    assert comments and ours.count(b"\n") == len(comments) == ours.count(b"\r\n")
    assert run("verify", out).exit_code == 0  # the table and its record both read back


# ----------------------------------------------------------------------------- the contract, whatever the environment

INTERRUPT_WHEN_IMPORTING = """
import os, sys
import caffemem.__main__ as entry  # the `caffemem` script's entry: installs its Ctrl-C handler first

class CtrlC:  # sends Ctrl-C to this process when {module} is first imported
    def find_spec(self, name, path=None, target=None):
        if name == {module!r}:
            os.kill(os.getpid(), 2)
        return None

sys.meta_path.insert(0, CtrlC())
sys.argv = ["caffemem", "optimize", {net!r}, "-o", "out.prototxt", "--plan-json", "plan.json", "--html", "r.html"]
entry.run()
"""


@pytest.mark.parametrize(
    "module",
    [
        "caffemem.cli",  # while the command is still being imported: nothing has begun
        "caffemem.plan.rewrite",  # inside optimize, after planning, before -o is written
        "caffemem.report.html",  # after -o and --plan-json are written (staged), before --html
    ],
)
def test_ctrl_c_at_any_point_is_one_line_exit_130_and_no_file(tmp_path, module):
    done = subprocess.run([sys.executable, "-c", INTERRUPT_WHEN_IMPORTING.format(module=module, net=str(LENET))], check=False, cwd=tmp_path, env=HERE, capture_output=True)
    assert done.returncode == 130 and stderr_line(done) == "caffemem: interrupted"
    assert list(tmp_path.iterdir()) == []


def test_a_report_that_cannot_reach_standard_output_fails_the_run_before_any_file_lands(tmp_path):
    done = shell(f"caffemem optimize {LENET} -o out.prototxt --plan-json plan.json > /dev/full", cwd=tmp_path)
    assert done.returncode == 2 and stderr_line(done) == "caffemem: error: cannot write to standard output: No space left on device"
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("command", ["analyze", "fit --gpu-memory 1GiB", "verify {plan}", "check", "--help"])
def test_standard_output_on_a_full_disk_is_exit_2_with_one_line(tmp_path, command):
    plan = tmp_path / "plan.json"
    assert run("optimize", LENET, "--plan-json", plan).exit_code == 0
    line = f"caffemem {command.format(plan=plan)} {LENET}" if command != "--help" else "caffemem --help"
    done = shell(line.replace(f"verify {plan} {LENET}", f"verify {LENET} {plan}") + " > /dev/full", cwd=tmp_path)
    assert done.returncode == 2 and "cannot write to standard output: No space left on device" in stderr_line(done)


def test_a_closed_standard_output_is_exit_2(tmp_path):
    done = shell(f"caffemem optimize {LENET} -o out.prototxt >&-", cwd=tmp_path)
    assert done.returncode == 2 and "cannot write to standard output: Bad file descriptor" in stderr_line(done)
    assert list(tmp_path.iterdir()) == []


def test_a_closed_standard_error_changes_nothing_but_the_lost_message(tmp_path):
    assert shell(f"caffemem optimize {LENET} -o out.prototxt 2>&-", cwd=tmp_path).returncode == 0
    assert (tmp_path / "out.prototxt").read_bytes().startswith(LENET.read_bytes())
    assert shell("caffemem analyze missing.prototxt 2>&-", cwd=tmp_path).returncode == 2


@pytest.mark.parametrize("environment", [{"PYTHONIOENCODING": "ascii"}, {"LC_ALL": "C", "LANG": "C", "PYTHONUTF8": "0", "PYTHONCOERCECLOCALE": "0"}])
def test_a_terminal_that_cannot_encode_the_report_gets_it_with_replacements(tmp_path, environment):
    env = {k: v for k, v in HERE.items() if k not in ("LANG", "LC_ALL", "LC_CTYPE", "PYTHONIOENCODING", "PYTHONUTF8")} | environment
    done = shell(f"caffemem optimize {LENET} -o out.prototxt", cwd=tmp_path, env=env)
    assert done.returncode == 0 and done.stderr == b"", done.stderr
    assert re.search(rb"xt \?\s+TRAIN: plan 'packed'", done.stdout) and b"wrote out.prototxt" in done.stdout  # the title's dash, replaced
    assert (tmp_path / "out.prototxt").read_bytes().startswith(LENET.read_bytes())


def test_a_deleted_working_directory_is_exit_2_and_absolute_paths_still_work(tmp_path):
    gone = tmp_path / "g"
    gone.mkdir()
    done = shell(f"rmdir {gone}; caffemem optimize {LENET} -o out.prototxt", cwd=gone)
    assert done.returncode == 2 and "the working directory no longer exists" in stderr_line(done)
    gone.mkdir()
    done = shell(f"rmdir {gone}; caffemem optimize {LENET} -o {tmp_path / 'out.prototxt'}", cwd=gone)
    assert done.returncode == 0 and (tmp_path / "out.prototxt").exists()


def test_the_script_is_the_guarded_entry_point():
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib

    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts == {"caffemem": "caffemem.__main__:run"}


def test_check_updates_its_baseline_only_once_its_reports_can_be_written(tmp_path):
    baseline, fifo = tmp_path / "b.json", tmp_path / "report.fifo"
    os.mkfifo(fifo)
    result = run("check", LENET, "--baseline", baseline, "--update-baseline", "--report", f"json:{fifo}")
    assert result.exit_code == 2 and "--report names a FIFO" in one_error_line(result)
    assert not baseline.exists()


CTRL_C_IN_A_CHECK_WORKER = """
import os, sys, time
import multiprocessing.process as processes
import caffemem.__main__ as entry
import caffemem.api.check as api_check

parent, real, kill = os.getpid(), api_check.check_file, processes.BaseProcess.kill

def check_file(*args):  # in a worker: Ctrl-C reaches the whole group while the file is being measured
    if os.getpid() != parent:
        os.killpg(0, 2)
        time.sleep(600)  # far longer than the test waits: a worker left running is seen as one
    return real(*args)

def kill_after_a_second_ctrl_c(self):  # the user's second press, or the other worker's own
    os.kill(parent, 2)
    kill(self)

api_check.check_file = check_file
if {second!r}:
    processes.BaseProcess.kill = kill_after_a_second_ctrl_c
sys.argv = ["caffemem", "check", {folder!r}, "--jobs", "2", "--report", "json:report.json"]
entry.run()
"""


def interrupt_a_parallel_check(tmp_path, second: bool) -> tuple[int | None, str, bool]:
    """The check's exit code, its stderr, and whether a process of its group outlived it.
    The run's stderr goes to a file, not a pipe: a pipe's end stays open in a worker left
    running, and waiting for it raced the worker's sleep (CI under load: a 25 s timeout)."""
    folder = tmp_path / "nets"
    folder.mkdir()
    for name in ("a.prototxt", "b.prototxt"):
        (folder / name).write_bytes(LENET.read_bytes())
    stderr = tmp_path.parent / f"{tmp_path.name}.stderr"
    script = CTRL_C_IN_A_CHECK_WORKER.format(folder=str(folder), second=second)
    with open(stderr, "wb") as sink:
        check = subprocess.Popen([sys.executable, "-c", script], cwd=tmp_path, env=HERE, stdout=subprocess.DEVNULL, stderr=sink, start_new_session=True)
    try:
        returncode = check.wait(timeout=120)  # a hang guard only: the workers sleep 600 s
    except subprocess.TimeoutExpired:
        returncode = None  # still running: waiting for a worker it failed to stop
    finally:
        try:
            os.killpg(check.pid, 0)  # the check's own process group: its workers
            outlived = True
            os.killpg(check.pid, 9)
        except ProcessLookupError:
            outlived = False
        check.wait()
    return returncode, stderr.read_text("utf-8", "replace"), outlived


def test_ctrl_c_during_a_parallel_check_is_one_line_and_stops_the_workers(tmp_path):
    returncode, stderr, outlived = interrupt_a_parallel_check(tmp_path, second=False)
    assert (returncode, stderr, outlived) == (130, "caffemem: interrupted\n", False)  # not a worker's traceback, not exit 3
    assert sorted(p.name for p in tmp_path.iterdir()) == ["nets"]


def test_a_second_ctrl_c_while_the_workers_are_stopped_stops_them_all(tmp_path):
    # It skipped the rest of the kill loop: the parent printed its line, then waited at exit for a worker still asleep.
    returncode, stderr, outlived = interrupt_a_parallel_check(tmp_path, second=True)
    assert (returncode, stderr, outlived) == (130, "caffemem: interrupted\n", False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["nets"]


def test_a_run_interrupted_after_staging_its_html_neither_writes_it_nor_says_it_did(tmp_path, monkeypatch):
    from caffemem.report import terminal

    def interrupted(*args, **kwargs):  # Ctrl-C while the tables print, after --html is staged
        raise KeyboardInterrupt

    monkeypatch.setattr(terminal, "print_tables", interrupted)
    result = run("analyze", LENET, "--html", tmp_path / "r.html")
    assert result.exit_code == 130 and one_error_line(result) == "caffemem: interrupted"  # no "wrote r.html" before it
    assert list(tmp_path.iterdir()) == []

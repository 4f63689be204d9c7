"""`caffemem verify`: the table a file carries, checked with no flags at what it records it
was made for; at other inputs or another batch, what the patched Net::Init would say."""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from click.testing import CliRunner
from conftest import FIXTURES

from caffemem.api.analyze import Options
from caffemem.api.verify import verify
from caffemem.cli import main
from caffemem.plan.record import TAG, read_records

LENET = FIXTURES / "examples" / "lenet_train.prototxt"


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def planned(tmp_path, *flags) -> str:
    out = tmp_path / "planned.prototxt"
    result = run("optimize", LENET, *flags, "-o", out)
    assert result.exit_code == 0, result.output
    return str(out)


def test_the_table_records_what_it_was_made_for_in_comments_caffe_skips(tmp_path):
    out = planned(tmp_path, "--phase", "TEST", "--batch", "8")
    block = open(out).read().split("mem_param {")[1]
    assert block.startswith(f"\n  # {TAG} TEST: {{")  # the first line of our block, a comment
    record = read_records(open(out).read())["TEST"]
    assert (record.phase, record.batch, record.rescale, record.dtype, record.device, record.engine) == ("TEST", 8, None, "float32", "cpu", None)
    assert record.net.startswith("sha256:")


def test_verify_with_no_flags_checks_the_files_own_table(tmp_path):
    out = planned(tmp_path)
    result = run("verify", out)
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[:2] == [f"{out}: TRAIN, batch 64: the table is safe (1 slot)", f"{out}: TEST, batch 64: the table is safe (1 slot)"]


def test_the_first_lines_give_each_phases_verdict_at_the_batch_checked(tmp_path):
    out = planned(tmp_path, "--batch", "16")
    result = run("verify", out, "--batch", "8")
    assert result.exit_code == 1
    assert result.output.splitlines()[:2] == [
        f"{out}: TRAIN, batch 8: the table is not safe: the patched Caffe would stop at Net::Init",
        f"{out}: TEST, batch 8: the table is not safe: the patched Caffe would stop at Net::Init",
    ]


def test_other_inputs_fail_at_the_first_blob_that_no_longer_fits(tmp_path):
    out = planned(tmp_path, "--phase", "TEST")
    result = run("verify", out, "--override-input", "data=64,1,32,32")
    assert result.exit_code == 1
    # conv1 at 32x32 is 64 x 20 x 28 x 28 x 4 B = 4014080 B: more than at 28x28 (24x24 outputs).
    assert "the patched Caffe stops at Net::Init: blob conv1 of net lenet_example (phase TEST) does not match the slot table: its data (4014080 bytes" in result.output


def test_a_member_the_net_does_not_have_is_named_as_the_runtime_names_it(tmp_path):
    out = planned(tmp_path, "--phase", "TEST")
    text = open(out).read()
    with open(out, "w") as handle:
        handle.write(text.replace('blob: "conv1"', 'blob: "conv9"', 1))
    result = run("verify", out)
    assert result.exit_code == 1 and "blob conv9 of mem_param slot" in result.output and "is not a blob of net lenet_example (phase TEST): the net does not match the slot table" in result.output


def test_an_edited_net_is_noted_and_checked_as_it_is_now(tmp_path):
    out = planned(tmp_path, "--phase", "TEST")
    text = open(out).read()
    with open(out, "w") as handle:  # a weight filler changes no byte of memory, but the net
        handle.write(text.replace('weight_filler { type: "xavier" }', 'weight_filler { type: "msra" }', 1))
    result = run("verify", out)
    assert result.exit_code == 0 and "note: the net is not the one the table was planned for (fingerprint sha256:" in result.output


def test_a_file_without_a_table_asks_for_one(tmp_path):
    result = run("verify", LENET)
    assert result.exit_code == 2 and "the file carries no mem_param: write one with `caffemem optimize NET -o OUT`, or give a plan JSON after the net" in result.output


def test_a_plan_json_carries_its_record_and_is_checked_at_its_batch(tmp_path):
    plan = tmp_path / "plan.json"
    assert run("optimize", LENET, "--phase", "TEST", "--batch", "8", "--plan-json", plan).exit_code == 0
    made_for = json.loads(plan.read_text())["phases"][0]["made_for"]
    assert (made_for["rescale"], made_for["batch"]) == (8, 8)  # the file says 64: the plan is for --batch 8
    assert run("verify", LENET, plan).exit_code == 0
    result = run("verify", LENET, plan, "--batch", "4")
    assert result.exit_code == 1 and "the patched Caffe stops at Net::Init: mem_param slot" in result.output


def test_the_library_checks_at_the_callers_options_unless_told_which_come_from_the_record(tmp_path):
    out = planned(tmp_path, "--phase", "TEST", "--batch", "8")
    (checked,) = verify(out, None, Options(batch=4))
    assert not checked.safe  # the caller's batch 4, against a table for 8
    (recorded,) = verify(out, None, Options(batch=4), explicit=())
    assert recorded.safe and recorded.made_for is not None and recorded.made_for.batch == 8


def test_a_damaged_record_is_bad_input_naming_its_line(tmp_path):
    out = planned(tmp_path, "--phase", "TEST")
    lines = open(out).read().split("\n")
    (number,) = [i for i, line in enumerate(lines, 1) if TAG in line]
    lines[number - 1] = lines[number - 1].replace('"dtype": "float32"', '"dtype": "float8"')
    with open(out, "w") as handle:
        handle.write("\n".join(lines))
    result = run("verify", out)
    assert result.exit_code == 2 and f"{out}:{number}: the plan's '{TAG}' record is damaged (expected one of float32, float16, float64" in result.output


# A train_val file as the tool's own errors ask --input of: Data layers of batch 4 (TRAIN)
# and 2 (TEST) with a crop, the channels in a database that is not here.
TRAIN_VAL = """
layer { name: "data" type: "Data" top: "data" top: "label" include { phase: TRAIN }
  transform_param { crop_size: 8 } data_param { source: "no_train_lmdb" batch_size: 4 backend: LMDB } }
layer { name: "data" type: "Data" top: "data" top: "label" include { phase: TEST }
  transform_param { crop_size: 8 } data_param { source: "no_val_lmdb" batch_size: 2 backend: LMDB } }
layer { name: "conv" type: "Convolution" bottom: "data" top: "conv" convolution_param { num_output: 4 kernel_size: 3 } }
layer { name: "relu" type: "ReLU" bottom: "conv" top: "relu" }
layer { name: "ip" type: "InnerProduct" bottom: "relu" top: "ip" inner_product_param { num_output: 5 } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "ip" bottom: "label" top: "loss" }
"""

_AXIS = {"C": "3", "H": "8", "W": "8"}


@st.composite
def data_spellings(draw):
    """A --input value for `data` that every phase takes: the batch left out (C,H,W), or
    each stated axis as _ or its number where both phases state the same, the channels a
    number; with a TRAIN:/TEST: pair instead of a plain name now and then."""
    if draw(st.booleans()):
        axes = [draw(st.sampled_from([_AXIS[a], "_"])) if a != "C" else "3" for a in "CHW"]
        return [f"data={','.join(axes)}"]
    crop = [draw(st.sampled_from(["8", "_"])) for _ in range(2)]
    if draw(st.booleans()):
        return [f"data=_,3,{','.join(crop)}"]
    return [f"TRAIN:data=4,3,{','.join(crop)}", f"TEST:data={draw(st.sampled_from(['2', '_']))},3,{','.join(crop)}"]


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(spelling=data_spellings(), batch=st.sampled_from([None, 3]), phase=st.sampled_from([None, "TRAIN", "TEST"]))
def test_verify_reads_back_every_record_optimize_writes(tmp_path, spelling, batch, phase):
    # Issue 34 item 1: an `_` in --input was recorded as -1 and refused on reading back.
    net = tmp_path / "train_val.prototxt"
    net.write_text(TRAIN_VAL)
    out = tmp_path / "out.prototxt"
    flags = [flag for value in spelling for flag in ("--input", value)]
    flags += ["--batch", str(batch)] if batch is not None else []
    flags += ["--phase", phase] if phase is not None else []
    written = run("optimize", net, *flags, "-o", out)
    assert written.exit_code == 0, written.output
    checked = run("verify", out)
    assert checked.exit_code == 0, checked.output
    phases = [phase] if phase else ["TRAIN", "TEST"]
    assert [line.split(": ")[1].split(",")[0] for line in checked.output.splitlines()[: len(phases)]] == phases


def test_the_record_is_described_with_the_input_as_it_was_given(tmp_path):
    net = tmp_path / "train_val.prototxt"
    net.write_text(TRAIN_VAL)
    out = tmp_path / "out.prototxt"
    assert run("optimize", net, "--phase", "TEST", "--input", "data=_,3,_,_", "-o", out).exit_code == 0
    assert f"{out}: TEST: planned for batch 2, --input data=_,3,_,_, float32, cpu mode, caffe engine" in run("verify", out).output.splitlines()

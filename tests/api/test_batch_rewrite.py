"""`optimize --batch N -o OUT`: the net written at batch N — its data layers' batch lines
and nothing else changed — with the table planned for N, which `verify OUT` accepts."""

from __future__ import annotations

import pytest
from click.testing import CliRunner
from conftest import FIXTURES, SHARED, needs_shared

from caffemem.cli import main
from caffemem.prototxt.textmap import tokenize, value_token

LENET = FIXTURES / "examples" / "lenet_train.prototxt"
GOOGLENET = SHARED / "models" / "bvlc_googlenet" / "train_val.prototxt"


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def rewritten(tmp_path, text: str, *flags):
    """optimize ``flags`` -o OUT on a net file holding ``text``: (net, OUT, the result)."""
    net, out = tmp_path / "net.prototxt", tmp_path / "out.prototxt"
    net.write_text(text)
    return net, out, run("optimize", net, *flags, "-o", out)


def without_block(text: str) -> str:
    """The file up to the mem_param block optimize appends."""
    return text[: text.index("mem_param {")]


def test_value_token_counts_repeated_values_and_list_elements_as_protobuf_does():
    text = 'input_param { shape { dim: 10 dim: 3 } shape: { dim: [4, 5] } } data_param { batch_size : 32 }  # batch_size: 99'
    tokens = tokenize(text)
    find = lambda *path: getattr(value_token(tokens, 0, len(tokens), path), "text", None)  # noqa: E731
    assert find("input_param", "shape", 0, "dim", 0) == "10"
    assert find("input_param", "shape", 1, "dim", 1) == "5"  # the second element of [4, 5]
    assert find("data_param", "batch_size") == "32"  # the comment's 99 is no field
    assert find("data_param", "prefetch") is None and find("input_param", "shape", 2, "dim", 0) is None


@needs_shared
def test_googlenet_at_batch_16_changes_only_its_two_batch_size_lines_and_verifies(tmp_path):
    out = tmp_path / "b16.prototxt"
    result = run("optimize", GOOGLENET, "--input", "data=3,224,224", "--batch", "16", "-o", out)
    assert result.exit_code == 0, result.output
    original, written = GOOGLENET.read_text(), out.read_text()
    # Lines 19 and 40: the TRAIN Data layer's batch_size 32 and the TEST one's 50.
    expected = original.replace("    batch_size: 32\n", "    batch_size: 16\n").replace("    batch_size: 50\n", "    batch_size: 16\n")
    assert without_block(written) == expected and written.startswith(expected)
    result = run("verify", out)
    assert result.exit_code == 0, result.output
    assert result.output.count("plan is safe") == 2 and "TRAIN: planned for batch 16, --input data=3,224,224" in result.output


@needs_shared
def test_googlenet_table_for_batch_16_fails_at_batch_8_as_the_patched_caffe_would(tmp_path):
    out = tmp_path / "b16.prototxt"
    assert run("optimize", GOOGLENET, "--input", "data=3,224,224", "--batch", "16", "--phase", "TRAIN", "-o", out).exit_code == 0
    result = run("verify", out, "--batch", "8")
    assert result.exit_code == 1
    # The slot's last member ends earlier at batch 8: Net::Init's size check names the slot.
    assert f"{out}: TRAIN: the patched Caffe stops at Net::Init: mem_param slot 0 has 397798400 bytes but the storages of net GoogleNet (phase TRAIN) it holds need 397196288" in result.output
    larger = run("verify", out, "--batch", "32")
    assert larger.exit_code == 1
    assert "blob pool3/3x3_s2 of net GoogleNet (phase TRAIN) does not match the slot table: its data (12042240 bytes at offset 389368832) does not fit in slot 0 (397798400 bytes)" in larger.output


def test_every_byte_but_the_batch_numbers_is_kept(tmp_path):
    # CRLF line ends, a tab, a comment naming a batch, the list form of dims, a latin-1 byte.
    net = tmp_path / "net.prototxt"
    text = (
        'name: "tiny"\r\n# batch 64 is what we train with \xe9\r\n'
        'layer {\tname: "in" type: "Input" top: "data" top: "label"\r\n'
        '  input_param { shape { dim: [64, 1, 28, 28] } shape { dim: 64 } }\r\n}\r\n'
        'layer { name: "ip" type: "InnerProduct" bottom: "data" top: "ip" inner_product_param { num_output: 10 } }\r\n'
        'layer { name: "loss" type: "SoftmaxWithLoss" bottom: "ip" bottom: "label" top: "loss" }\r\n'
    )
    net.write_bytes(text.encode("latin-1"))
    out = tmp_path / "out.prototxt"
    result = run("optimize", net, "--batch", "8", "-o", out)
    assert result.exit_code == 0, result.output
    written = out.read_bytes().decode("latin-1")
    expected = text.replace("dim: [64, 1, 28, 28] } shape { dim: 64 }", "dim: [8, 1, 28, 28] } shape { dim: 8 }")
    assert written.startswith(expected)
    assert "\n" not in written.replace("\r\n", "")  # the block in the file's own line ends
    assert run("verify", out).exit_code == 0


def test_a_deploy_files_top_level_input_dim_is_rewritten(tmp_path):
    net, out, result = rewritten(
        tmp_path,
        'input: "data"\ninput_dim: 10\ninput_dim: 3\ninput_dim: 32\ninput_dim: 32\n'
        'layer { name: "conv" type: "Convolution" bottom: "data" top: "conv" convolution_param { num_output: 4 kernel_size: 3 } }\n'
        'layer { name: "relu" type: "ReLU" bottom: "conv" top: "relu" }\n',
        "--batch",
        "2",
    )
    assert result.exit_code == 0, result.output
    assert without_block(out.read_text()) == net.read_text().replace("input_dim: 10\n", "input_dim: 2\n")
    assert run("verify", out).exit_code == 0


def test_a_python_data_layer_keeps_its_batch_in_code_so_the_rewrite_is_refused(tmp_path):
    net, out, result = rewritten(
        tmp_path,
        'layer { name: "feed" type: "Python" top: "data" python_param { module: "feeder" layer: "Feed" } }\n'
        'layer { name: "ip" type: "InnerProduct" bottom: "data" top: "ip" inner_product_param { num_output: 10 } }\n',
        *("--input", "data=4,3", "--batch", "2"),
    )
    assert result.exit_code == 2 and f"{net}:1: layer 'feed' (Python): --batch 2 with -o: the batch of layer type Python is not a field" in result.output
    assert not out.exists()


def test_replanning_one_phase_keeps_the_other_phases_record(tmp_path):
    both, again = tmp_path / "both.prototxt", tmp_path / "again.prototxt"
    assert run("optimize", LENET, "-o", both).exit_code == 0
    assert run("optimize", both, "--phase", "TRAIN", "--force", "-o", again).exit_code == 0
    records = [line.strip() for line in again.read_text().splitlines() if "caffemem made-for" in line]
    assert [r.split(":")[0] for r in records] == ["# caffemem made-for TRAIN", "# caffemem made-for TEST"]
    result = run("verify", again)
    assert result.exit_code == 0 and "TEST: planned for batch 64" in result.output


@needs_shared
@pytest.mark.parametrize(
    "model, inputs, changed",
    [
        # s9xie/hed's ImageLabelmapData (a fork's data layer): the TRAIN one's batch_size (line 19).
        ("hed/train_val.prototxt", ["--input", "data=3,400,400", "--phase", "TRAIN"], {19: ("batch_size: 1", "batch_size: 3")}),
        # A V1 file (`layers { type: DATA }`): both phases' data_param.batch_size (lines 9, 30).
        ("legacy_v1_bvlc_googlenet/train_val.prototxt", ["--input", "data=3,224,224"], {9: ("batch_size: 32", "batch_size: 3"), 30: ("batch_size: 50", "batch_size: 3")}),
        # A deploy file's top-level input_dim: the first of its four values (line 3).
        ("resnet/ResNet-50-deploy.prototxt", [], {3: ("input_dim: 1", "input_dim: 3")}),
    ],
    ids=["fork-data-layer", "v1", "input_dim"],
)
def test_real_nets_of_each_kind_are_rewritten_at_their_batch_lines_only(tmp_path, model, inputs, changed):
    net, out = SHARED / "models" / model, tmp_path / "out.prototxt"
    result = run("optimize", net, *inputs, "--batch", "3", "-o", out)
    assert result.exit_code == 0, result.output
    lines = net.read_text().splitlines(keepends=True)
    for number, (old, new) in changed.items():
        assert old in lines[number - 1]
        lines[number - 1] = lines[number - 1].replace(old, new)
    assert without_block(out.read_text()) == "".join(lines)
    assert run("verify", out).exit_code == 0 and run("verify", out, "--batch", "2").exit_code == 1


def test_one_phase_at_a_new_batch_says_when_the_other_phase_reads_the_same_data_layer(tmp_path):
    # The LeNet example's one Input layer has no phase rule: TRAIN and TEST both read it.
    out = tmp_path / "out.prototxt"
    result = run("optimize", LENET, "--phase", "TRAIN", "--batch", "8", "-o", out)
    assert result.exit_code == 0
    assert "caffemem: note: the TEST net reads the same data layers, so it now runs at batch 8 too; its table was not planned" in result.output

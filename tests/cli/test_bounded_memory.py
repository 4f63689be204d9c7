"""Bounded memory for hostile inputs (issue 26, item 6).  Each reproduction of the issue
runs `caffemem analyze` in a process whose address space is capped (RLIMIT_AS) far below
what it took before, and must still give its one-line answer: memory is asserted, not
time.  (benchmarks/memory.py measures the peak against the input's size; docs/benchmarks.md:
"Memory for any input".)"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

# A small net runs in well under 100 MiB of address space (Python, protobuf, caffemem);
# every input below took 250 MiB to 3 GiB of resident memory before.
CAP = 128 * 2**20
_CAPPED = "import resource, sys\nresource.setrlimit(resource.RLIMIT_AS, ({cap}, {cap}))\nfrom caffemem.cli import main\nmain(sys.argv[1:], prog_name='caffemem')\n"


def analyze_capped(net: Path, cap: int = CAP) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", _CAPPED.format(cap=cap), "analyze", str(net), "--device", "cpu"],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
        env=dict(os.environ, CAFFEMEM_DEVICE="cpu"),
        cwd=net.parent,
    )


def one_error(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    return proc.stderr.rstrip("\n")


def test_a_layer_name_of_4_million_characters_is_refused_within_the_cap(tmp_path):
    """It took 560 MB: the regular expression that skips strings kept one backtracking
    entry per character (2.36 GB for the issue's 20 million)."""
    net = tmp_path / "long_name.prototxt"
    net.write_text('input: "data"\ninput_shape { dim: 1 }\nlayer { name: "' + "a" * 4_000_000 + '" type: "ReLU" bottom: "data" top: "data" }\n')
    assert "a name of 4000000 characters; caffemem takes names of at most 4096" in one_error(analyze_capped(net))


def test_4_mb_of_input_dims_with_one_non_ascii_comment_stay_within_the_cap(tmp_path):
    """One `# é` sent the file to protobuf's reader and its tokens: 257 MB for 4 MB
    (757 MB for the issue's 13 MB)."""
    net = tmp_path / "dims.prototxt"
    net.write_text("input_dim: 1\n" * 300_000 + "# é\n", encoding="utf-8")
    assert one_error(analyze_capped(net)).endswith("TEST net: the file defines no layers (is it empty or cut short?)")


def test_a_binary_of_250000_empty_layers_is_refused_before_its_parse(tmp_path):
    """The layer limit holds for binary nets: counted in the wire format, unparsed (it was
    accepted; 3 million empty layers, 9 MB, took past 6 GiB)."""
    net = tmp_path / "empty_layers.caffemodel"
    net.write_bytes(b"\xa2\x06\x00" * 250_000)  # field 100 (layer), length 0
    assert one_error(analyze_capped(net)) == (f"caffemem: error: {net}: more than 50,000 layers; caffemem plans nets of up to 50,000 layers (real ones have at most a few thousand)")


def test_a_text_of_1_5_gib_with_a_nul_in_its_head_is_refused_from_its_head(tmp_path):
    """Its NUL made it look binary, so all of it was read before the text was refused."""
    net = tmp_path / "huge.prototxt"
    with open(net, "wb") as handle:
        handle.write(b"name: 'x'\n\x00" + b"input_dim: 1\n" * 4000)
        handle.truncate(1536 * 2**20)  # sparse: no disk is used
    assert one_error(analyze_capped(net)) == (f"caffemem: error: {net}: text file of {1536 * 2**20} bytes is larger than any net definition ({64 * 2**20} bytes at most; --max-input-size raises it)")


@pytest.mark.parametrize("cap", [CAP])
def test_a_small_net_runs_within_the_cap(cap):
    net = Path(__file__).resolve().parents[2] / "fixtures" / "examples" / "lenet_train.prototxt"
    proc = analyze_capped(net, cap)
    assert proc.returncode == 0, proc.stderr


def _varint(n: int) -> bytes:
    out = b""
    while n >= 0x80:
        out, n = out + bytes([n & 0x7F | 0x80]), n >> 7
    return out + bytes([n])


def test_a_binary_layer_name_past_the_limit_is_refused_as_in_text(tmp_path):
    layer = b"\x0a" + _varint(5000) + b"a" * 5000 + b"\x12\x04ReLU"  # name (field 1), type (field 2)
    net = tmp_path / "long_name.caffemodel"
    # the layer (field 100), then 100 empty ones: the control bytes that tell a binary from text
    net.write_bytes(b"\xa2\x06" + _varint(len(layer)) + layer + b"\xa2\x06\x00" * 100)
    assert "a name of 5000 characters; caffemem takes names of at most 4096" in one_error(analyze_capped(net))


def test_50000_empty_binary_layers_are_refused_before_the_passes_copy_them(tmp_path):
    """Within the layer limit, so parsed (protobuf: ~750 bytes a layer); the first layer
    has no type, which Caffe refuses, and is refused before the passes copy the net
    (200,000 of them took 490 MB at the layer registry)."""
    net = tmp_path / "empty_layers.caffemodel"
    net.write_bytes(b"\xa2\x06\x00" * 50_000)
    assert one_error(analyze_capped(net, 320 * 2**20)) == f'caffemem: error: {net}: layer 1 has no type (Caffe refuses it: "Unknown layer type: ")'


def test_a_layer_without_type_is_refused_at_its_line_unless_a_rule_may_filter_it(tmp_path):
    net = tmp_path / "no_type.prototxt"
    net.write_text('name: "n"\nlayer { name: "x" include { phase: TEST } }\nlayer { name: "y" }\n')
    assert one_error(analyze_capped(net)) == f'caffemem: error: {net}:3: layer \'y\': layer 2 has no type (Caffe refuses it: "Unknown layer type: ")'


def test_a_binary_of_50001_convolutions_is_refused_before_its_parse(tmp_path):
    """Issue 31, item 11: a 7.2 MB binary of 150,000 convolutions took 2.3 GB and 44 s (the
    pipeline takes ~12 KiB a layer: benchmarks/memory.py).  Past the 50,000-layer limit it
    is refused from the wire format's count, unparsed, within the cap."""
    layer = b"\x0a\x01c\x12\x0bConvolution\x1a\x01x\x22\x01x" + b"\xd2\x06\x04\x08\x01\x20\x01"  # name, type, bottom, top, convolution_param
    net = tmp_path / "convolutions.caffemodel"
    net.write_bytes((b"\xa2\x06" + _varint(len(layer)) + layer) * 50_001)
    assert one_error(analyze_capped(net)) == f"caffemem: error: {net}: more than 50,000 layers; caffemem plans nets of up to 50,000 layers (real ones have at most a few thousand)"

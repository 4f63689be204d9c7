"""caffemem.prototxt.read: every input is read in bounded time and memory (issue 26,
items 5 and 6): special files refused from their stat, kernel files unread, a read that
would wait refused, and a file never read past its limit."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from caffemem.cli import main
from caffemem.errors import CaffememError, Location
from caffemem.prototxt.read import _read_up_to, read_input

KERNEL_FILES = [path for path in ("/proc/self/status", "/proc/kmsg") if os.path.exists(path)]


@pytest.mark.parametrize("path", KERNEL_FILES)
def test_a_kernel_file_is_refused_unread(path):
    """/proc/kmsg blocks until the kernel logs something, and a read takes the message
    away from the system's logger: refused from its stat (size 0, on /proc)."""
    with pytest.raises(CaffememError, match=r"is a kernel file \(/proc, /sys\), not a net or solver file: save it to a regular file first"):
        read_input(path)


def test_a_read_that_would_wait_is_refused():
    reader, writer = os.pipe()
    os.set_blocking(reader, False)
    try:
        with os.fdopen(reader, "rb", buffering=0) as handle, pytest.raises(CaffememError, match="reading it would wait for data"):
            _read_up_to(handle, 100, Location(file="pipe"))
    finally:
        os.close(writer)


def test_a_file_is_read_to_its_limit_and_no_further(tmp_path, monkeypatch):
    net = tmp_path / "net.prototxt"
    net.write_bytes(b"input_dim: 1\n" * 1000)  # 13,000 bytes
    asked: list[int] = []
    original = _read_up_to

    def counted(handle, count, where):
        asked.append(count)
        return original(handle, count, where)

    monkeypatch.setattr("caffemem.prototxt.read._read_up_to", counted)
    with pytest.raises(CaffememError, match="text file of 13000 bytes is larger than any net definition"):
        read_input(str(net), max_text_bytes=12_000)
    assert asked == [65536]  # the head, which is the whole file here: nothing more is asked
    asked.clear()
    assert read_input(str(net), max_text_bytes=13_000) == net.read_bytes()


def test_a_text_over_the_limit_with_a_nul_is_refused_after_its_first_64_kib(tmp_path, monkeypatch):
    net = tmp_path / "big.prototxt"
    with open(net, "wb") as handle:
        handle.write(b"name: 'x'\n\x00" + b"input_dim: 1\n" * 10_000)
        handle.truncate(10 * 2**20)
    read = []
    monkeypatch.setattr("caffemem.prototxt.read._read_up_to", lambda handle, count, where: read.append(count) or handle.read(count))
    with pytest.raises(CaffememError, match=f"text file of {10 * 2**20} bytes is larger than any net definition"):
        read_input(str(net), max_text_bytes=2**20)
    assert read == [65536]


def test_a_binary_proto_over_the_text_limit_is_read_whole(tmp_path):
    net = Path(tmp_path / "net.caffemodel")
    data = b"\x0a\x03net" + b"\xa2\x06\x00" * 60_000  # its name, then 60,000 empty layers (field 100, length 0)
    net.write_bytes(data)
    assert read_input(str(net), max_text_bytes=1024) == data


SAVE = ": save it to a regular file first"


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda tmp: "/dev/zero", "is a device, not a net or solver file"),
        (lambda tmp: os.mkfifo(tmp / "fifo") or str(tmp / "fifo"), "is a FIFO (named pipe), not a net or solver file" + SAVE),
        (lambda tmp: str(tmp), "is a directory, not a net or solver file"),
        (lambda tmp: "/proc/self/status", "is a kernel file (/proc, /sys), not a net or solver file" + SAVE),
    ],
    ids=["dev-zero", "fifo", "directory", "proc"],
)
def test_special_files_are_refused_by_the_command_in_one_line(tmp_path, make, message):
    path = make(tmp_path)
    result = CliRunner().invoke(main, ["analyze", path])
    assert (result.exit_code, result.output) == (2, f"caffemem: error: {path}: {message}\n")

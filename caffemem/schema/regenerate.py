"""Regenerate ``caffemem/schema/caffe_pb2.py`` from ``proto/caffe.proto``.

Usage (from the repository root)::

    python -m caffemem.schema.regenerate            # rewrite caffe_pb2.py
    python -m caffemem.schema.regenerate --check    # exit 1 if it is stale

The generator is the ``protoc`` bundled with grpcio-tools, so the output
depends on the grpcio-tools version: keep it at the pinned version (see
docs/schema.md), otherwise ``--check`` reports the file as stale even when
the .proto did not change.

Exit codes: 0 up to date / written, 1 stale (``--check``), 2 cannot run
(grpcio-tools missing, proto file missing, protoc error).
"""

from __future__ import annotations

import argparse
import difflib
import re
import sys
import tempfile
from pathlib import Path
from typing import List, Optional, Sequence

PACKAGE_DIR = Path(__file__).resolve().parent
REPO_ROOT = PACKAGE_DIR.parents[1]
DEFAULT_PROTO = REPO_ROOT / "proto" / "caffe.proto"
DEFAULT_OUTPUT = PACKAGE_DIR / "caffe_pb2.py"

_VERSION_LINE = re.compile(r"^# Protobuf Python Version: (\S+)$", re.M)


class RegenerateError(RuntimeError):
    """The generator could not run."""


def protoc_version() -> str:
    """Version of the protoc bundled with the installed grpcio-tools."""
    try:
        import grpc_tools
        from grpc_tools import protoc  # noqa: F401
    except ImportError as exc:  # pragma: no cover - depends on the env
        raise RegenerateError(
            "grpcio-tools is not installed (pip install the test extras)"
        ) from exc
    try:
        from importlib.metadata import version

        return "grpcio-tools " + version("grpcio-tools")
    except Exception:  # pragma: no cover
        return "grpcio-tools " + getattr(grpc_tools, "__version__", "?")


def generate(proto: Path = DEFAULT_PROTO) -> str:
    """Run protoc on ``proto`` and return the text of the generated module."""
    try:
        from grpc_tools import protoc
    except ImportError as exc:
        raise RegenerateError(
            "grpcio-tools is not installed (pip install the test extras)"
        ) from exc
    proto = Path(proto).resolve()
    if not proto.is_file():
        raise RegenerateError(f"proto file not found: {proto}")
    with tempfile.TemporaryDirectory(prefix="caffemem-protoc-") as out:
        # The include root is the proto's own folder, so the descriptor is
        # registered as "caffe.proto" whatever the checkout path is.
        args = [
            "grpc_tools.protoc",
            f"--proto_path={proto.parent}",
            f"--python_out={out}",
            str(proto),
        ]
        rc = protoc.main(args)
        if rc != 0:
            raise RegenerateError(f"protoc failed with exit code {rc}")
        generated = Path(out) / (proto.stem + "_pb2.py")
        if not generated.is_file():  # pragma: no cover
            raise RegenerateError(f"protoc wrote no {generated.name}")
        return portable(generated.read_text(encoding="utf-8"))


_RUNTIME_IMPORT = "from google.protobuf import runtime_version as _runtime_version\n"
_RUNTIME_CHECK = re.compile(r"_runtime_version\.ValidateProtobufRuntimeVersion\([^)]*\)\n")
_DEFAULT_POOL = "DESCRIPTOR = _descriptor_pool.Default().AddSerializedFile("


def portable(text: str) -> str:
    """protoc's module, made to live beside pycaffe and on older runtimes:

    - its own descriptor pool instead of protobuf's default one, where pycaffe's
      ``caffe_pb2`` registers a different ``caffe.proto``: either may be imported first;
    - no runtime version check (``runtime_version`` exists only from protobuf 5.26; the
      builder calls the module makes exist from 3.20 on), so one file serves every
      protobuf a Caffe install runs, 3.20 to current."""
    if _DEFAULT_POOL not in text:  # pragma: no cover - a protoc that writes other code
        raise RegenerateError("protoc's output has no default-pool registration to replace")
    text = _RUNTIME_CHECK.sub("", text.replace(_RUNTIME_IMPORT, ""))
    return text.replace(_DEFAULT_POOL, "POOL = _descriptor_pool.DescriptorPool()  # caffemem's own: see regenerate.portable\nDESCRIPTOR = POOL.AddSerializedFile(")


def _gencode_version(text: str) -> Optional[str]:
    match = _VERSION_LINE.search(text)
    return match.group(1) if match else None


def stale_reason(committed: Optional[str], fresh: str) -> Optional[str]:
    """None when ``committed`` equals ``fresh``; otherwise a short reason."""
    if committed is None:
        return "the generated module does not exist"
    if committed == fresh:
        return None
    old, new = _gencode_version(committed), _gencode_version(fresh)
    if old != new:
        return (
            f"the committed module was made by protoc for protobuf {old}, the "
            f"installed grpcio-tools makes {new}: install the pinned "
            "grpcio-tools, or regenerate and update the protobuf pin"
        )
    return "the .proto file changed since caffe_pb2.py was generated"


def _short_diff(committed: str, fresh: str, limit: int = 20) -> List[str]:
    lines = list(
        difflib.unified_diff(
            committed.splitlines(),
            fresh.splitlines(),
            "committed caffe_pb2.py",
            "regenerated caffe_pb2.py",
            n=0,
            lineterm="",
        )
    )
    # The serialized descriptor is one huge line: clip every line.
    lines = [line if len(line) <= 160 else line[:157] + "..." for line in lines]
    if len(lines) > limit:
        lines = lines[:limit] + [f"... ({len(lines) - limit} more diff lines)"]
    return lines


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m caffemem.schema.regenerate",
        description="Regenerate caffemem/schema/caffe_pb2.py from proto/caffe.proto.",
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="do not write; exit 1 if the committed module is stale",
    )
    parser.add_argument("--proto", type=Path, default=DEFAULT_PROTO, help="input .proto")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help="generated module")
    args = parser.parse_args(argv)

    try:
        fresh = generate(args.proto)
        tool = protoc_version()
    except RegenerateError as exc:
        print(f"regenerate: {exc}", file=sys.stderr)
        return 2

    output: Path = args.output
    committed = output.read_text(encoding="utf-8") if output.is_file() else None
    reason = stale_reason(committed, fresh)

    if args.check:
        if reason is None:
            print(f"{output}: up to date ({tool})")
            return 0
        print(f"{output}: STALE: {reason}", file=sys.stderr)
        if committed is not None:
            for line in _short_diff(committed, fresh):
                print(line, file=sys.stderr)
        print("run: python -m caffemem.schema.regenerate", file=sys.stderr)
        return 1

    if reason is None:
        print(f"{output}: already up to date ({tool})")
        return 0
    output.write_text(fresh, encoding="utf-8")
    print(f"{output}: written ({tool}; was stale: {reason})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

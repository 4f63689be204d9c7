"""A fork's own Caffe tree (``--caffe-root DIR``, default ``$CAFFE_ROOT``): its schema and
the layer types it registers.

No built-in table lists every fork, but every fork user has the fork's source tree, which
Caffe's own docs and scripts call ``$CAFFE_ROOT``.  From it caffemem reads:

- ``DIR/src/caffe/proto/caffe.proto``, merged with caffemem's own schema (proto/caffe.proto):
  what the fork adds (a message, a field, an enum value) is added; a field both define
  keeps caffemem's definition.  A fork field whose number caffemem gives another field is
  renumbered in the merged schema (a text net names fields, never numbers) and named in a
  note; a field both define with another kind of value (a float where caffemem has an
  integer, another message) is read as the fork declares it, and a net that sets it is
  refused, naming the fork's file, line, message and field.
- the ``REGISTER_LAYER_CLASS(Name)`` and ``REGISTER_LAYER_CREATOR(Name, ...)`` lines of
  its sources (``src/caffe``, ``include/``), which are what Caffe's LayerRegistry knows
  (include/caffe/layer_factory.hpp): an unknown layer type is then either the fork's (it
  needs a ``--layers`` rule) or a typo.

**How the .proto is compiled.**  With protoc, from the ``grpcio-tools`` wheel (the extra
``caffemem[fork]``), else a ``protoc`` on PATH (the one the fork's own build ran), never a
compiler of caffemem's own.  Why, rather than a pure-Python parser:

- protoc is what the fork's build runs on this very file (Caffe's Makefile and
  cmake/ProtoBuf.cmake), so the file is read exactly as the fork reads it — scopes,
  defaults, ``packed``, proto2's rules — and a broken file gets protoc's own
  ``line:column`` message.  The maintained pure-Python parser on PyPI
  (proto-schema-parser) gives a syntax tree only: resolving its types into descriptors
  would be ours to write and to get wrong.
- grpcio-tools installs from PyPI alone as a binary wheel (Linux, macOS, Windows): no
  compiler on the user's machine.  It is an extra, not a dependency, because recent
  grpcio-tools require a recent protobuf while Caffe installs run 3.20: pip picks the
  grpcio-tools that fits the protobuf installed (1.48 for 3.20).
- Only a FileDescriptorSet comes out (``--descriptor_set_out --include_source_info``),
  which every protobuf runtime reads, whatever protobuf the compiler was built for.  It is
  cached in the user's cache folder under the SHA-256 of the .proto's bytes (written
  atomically: a temporary file renamed into place), so a fork's schema is compiled once,
  and a cached one needs no compiler at all.

The merged schema parses the net; the message is then handed to the passes as caffemem's
own ``caffe_pb2`` message (same bytes: every field caffemem knows keeps caffemem's number),
where the fork's fields ride along as unknown fields.  :meth:`ForkSchema.view` reads them
back for a ``--layers`` rule (``my_upsample_param.scale``).
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from caffemem.errors import CaffememError, Location, excerpt
from caffemem.userfiles import note_read_path, open_input

PROTO = Path("src", "caffe", "proto", "caffe.proto")
MAX_PROTO_BYTES = 16 * 1024 * 1024
CACHE_FORMAT = "fdset1"  # in the cache file's name: a change of what is cached changes it
_COMPILE_SECONDS = 120


def user_cache_dir() -> Path:
    """caffemem's folder in the user's cache: $CAFFEMEM_CACHE_DIR, else the platform's
    place (XDG_CACHE_HOME or ~/.cache on Linux, ~/Library/Caches on macOS,
    %LOCALAPPDATA% on Windows)."""
    if os.environ.get("CAFFEMEM_CACHE_DIR"):
        return Path(os.environ["CAFFEMEM_CACHE_DIR"])
    if sys.platform == "win32" and os.environ.get("LOCALAPPDATA"):
        return Path(os.environ["LOCALAPPDATA"], "caffemem", "Cache")
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Caches" / "caffemem"
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "caffemem"


# ----------------------------------------------------------------------------- compiling


def _compilers() -> list[list[str]]:
    """protoc command lines, best first: grpcio-tools' (pinned by the extra), then PATH's.

    Neither may come from the user's folder (issue 31: a ``grpc_tools/`` package in the
    working directory was imported and run by ``python -m grpc_tools.protoc``): the module
    is looked up on caffemem's import path less the working directory, the child runs in
    a private temporary folder (``-m`` puts the child's working directory first on its
    path), and a protoc is searched for in PATH's absolute folders other than the working
    directory (an empty entry or ``.`` in PATH means the working directory)."""
    found = []
    spec = _grpc_tools_spec()
    if spec is not None and spec.origin:
        command = [sys.executable, "-m", "grpc_tools.protoc"]
        includes = Path(spec.origin).parent / "_proto"
        found.append(command + ([f"--proto_path={includes}"] if includes.is_dir() else []))
    protoc = shutil.which("protoc", path=os.pathsep.join(_trusted_path()))
    if protoc:
        found.append([protoc])
    return found


def _working_directory() -> str | None:
    try:
        return os.path.realpath(os.getcwd())
    except OSError:
        return None


def _grpc_tools_spec() -> Any:
    """grpc_tools' spec as found on sys.path without the working directory ('' or its
    path, which ``python -m caffemem`` puts first)."""
    from importlib.machinery import PathFinder

    cwd = _working_directory()
    path = [entry for entry in sys.path if entry and (cwd is None or os.path.realpath(entry) != cwd)]
    return PathFinder.find_spec("grpc_tools", path)


def _trusted_path() -> list[str]:
    """PATH's absolute folders other than the working directory."""
    cwd = _working_directory()
    folders = os.environ.get("PATH", os.defpath).split(os.pathsep)
    return [folder for folder in folders if os.path.isabs(folder) and os.path.realpath(folder) != cwd]


_PROTOC_ERROR = re.compile(r"(?:^|/)caffe\.proto:(\d+):(\d+): (.*)$", re.M)


def compile_proto(proto: Path) -> descriptor_pb2.FileDescriptorProto:
    """The fork's caffe.proto as protoc reads it, from the cache when its bytes were
    compiled before.  Raises CaffememError (no compiler, protoc's error at its line)."""
    where = Location(file=str(proto))
    try:
        # Opened first, then judged from the descriptor: a path swapped for a FIFO between
        # a check and the open cannot block (issue 31), and an output may not replace it.
        with open_input(proto, "caffe.proto", where) as handle:
            size = os.fstat(handle.fileno()).st_size
            if size > MAX_PROTO_BYTES:
                raise CaffememError(f"is {size} bytes, larger than any caffe.proto (Caffe's is about 60 KB)", where)
            data = handle.read(MAX_PROTO_BYTES + 1)
        if len(data) > MAX_PROTO_BYTES:  # it grew while being read
            raise CaffememError(f"is over {MAX_PROTO_BYTES} bytes, larger than any caffe.proto (Caffe's is about 60 KB)", where)
    except FileNotFoundError:
        raise CaffememError("no caffe.proto here: --caffe-root (or $CAFFE_ROOT) must be the root of a Caffe source tree, the folder holding src/caffe/proto/caffe.proto", where) from None
    except OSError as error:
        raise CaffememError(f"cannot read: {error.strerror or error}", where) from None
    cached = user_cache_dir() / "schemas" / f"{hashlib.sha256(data).hexdigest()}.{CACHE_FORMAT}.pb"
    compiled = _read_cached(cached)
    if compiled is None:
        compiled = _run_protoc(data, proto)
        _write_atomically(cached, compiled)
    files = descriptor_pb2.FileDescriptorSet.FromString(compiled).file
    return files[len(files) - 1]  # the file itself comes last, after any it imports


def _read_cached(path: Path) -> bytes | None:
    try:
        data = path.read_bytes()
        descriptor_pb2.FileDescriptorSet.FromString(data)  # a damaged file is compiled again
        return data
    except Exception:
        return None


def _write_atomically(path: Path, data: bytes) -> None:
    """Best effort: a cache that cannot be written (a read-only home) only costs a compile."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".pb")
        try:
            with os.fdopen(handle, "wb") as out:
                out.write(data)
                out.flush()
                os.fsync(out.fileno())
            os.replace(temporary, path)
        except BaseException:
            os.unlink(temporary)
            raise
    except OSError:
        pass


def _run_protoc(data: bytes, proto: Path) -> bytes:
    compilers = _compilers()
    if not compilers:
        raise CaffememError(
            "reading a fork's caffe.proto needs protoc: pip install 'caffemem[fork]' (protoc from the grpcio-tools wheel, no compiler needed), "
            "or put the protoc your Caffe was built with on PATH; the compiled schema is then cached",
            Location(file=str(proto)),
        )
    with tempfile.TemporaryDirectory(prefix="caffemem-proto-") as folder:
        # The bytes hashed for the cache are the bytes compiled, under the name Caffe's
        # build gives them (the descriptor is "caffe.proto" whatever the tree's path).
        Path(folder, "caffe.proto").write_bytes(data)
        out = Path(folder, "caffe.pb")
        command = compilers[0] + [f"--proto_path={folder}", f"--descriptor_set_out={out}", "--include_source_info", str(Path(folder, "caffe.proto"))]
        try:
            # In the private folder: never the user's (see _compilers).
            done = subprocess.run(command, capture_output=True, text=True, timeout=_COMPILE_SECONDS, stdin=subprocess.DEVNULL, cwd=folder)
        except (OSError, subprocess.TimeoutExpired) as error:
            raise CaffememError(f"protoc could not run ({excerpt(str(error), 200)})", Location(file=str(proto))) from None
        if done.returncode != 0 or not out.is_file():
            found = _PROTOC_ERROR.search(done.stderr)
            if found:
                raise CaffememError(f"protoc cannot read the fork's schema: {excerpt(found.group(3), 300)}", Location(file=str(proto), line=int(found.group(1)), column=int(found.group(2))))
            raise CaffememError(f"protoc cannot read the fork's schema: {excerpt(done.stderr.strip() or f'exit {done.returncode}', 300)}", Location(file=str(proto)))
        return out.read_bytes()


# ----------------------------------------------------------------------------- merging

_F = descriptor_pb2.FieldDescriptorProto
# What a value looks like in a text net: fields of one kind read the same text.
_KIND = {
    **dict.fromkeys((_F.TYPE_DOUBLE, _F.TYPE_FLOAT), "a real number"),
    **dict.fromkeys(
        (_F.TYPE_INT64, _F.TYPE_UINT64, _F.TYPE_INT32, _F.TYPE_FIXED64, _F.TYPE_FIXED32, _F.TYPE_UINT32, _F.TYPE_SFIXED32, _F.TYPE_SFIXED64, _F.TYPE_SINT32, _F.TYPE_SINT64),
        "an integer",
    ),
    _F.TYPE_BOOL: "a bool",
    _F.TYPE_STRING: "a string",
    _F.TYPE_BYTES: "a string",
    _F.TYPE_GROUP: "a group",
    _F.TYPE_MESSAGE: "a message",
    _F.TYPE_ENUM: "an enum",
}
_TYPE_NAMES = {value: name[5:].lower() for name, value in _F.Type.items()}
_MAX_FIELD_NUMBER = 536_870_911


@dataclass(frozen=True)
class Conflict:
    """A field the fork and caffemem define differently: where it stands in the fork's
    caffe.proto, and how."""

    file: str
    line: int | None
    message: str  # e.g. "LayerParameter"
    field: str
    detail: str

    def describe(self) -> str:
        return f"{self.file}:{self.line}: {self.message}.{self.field}: {self.detail}" if self.line else f"{self.file}: {self.message}.{self.field}: {self.detail}"


def _describe_type(field: descriptor_pb2.FieldDescriptorProto) -> str:
    label = "repeated " if field.label == _F.LABEL_REPEATED else ""
    return label + (field.type_name.lstrip(".").removeprefix("caffe.") if field.type_name else _TYPE_NAMES[field.type])


class _Merger:
    """caffemem's FileDescriptorProto plus the fork's additions (see the module docstring)."""

    def __init__(self, theirs: descriptor_pb2.FileDescriptorProto, file: str) -> None:
        self.file = file
        self.lines = {tuple(location.path): location.span[0] + 1 for location in theirs.source_code_info.location if location.span}
        self.conflicts: list[Conflict] = []  # the fork's definition, renumbered: refused where a net sets it
        self.renumbered: list[Conflict] = []  # noted where the net uses the field
        self.fork_values: list[Conflict] = []  # the fork's values of caffemem's enums: noted where used

    def merge(self, ours: descriptor_pb2.FileDescriptorProto, theirs: descriptor_pb2.FileDescriptorProto) -> descriptor_pb2.FileDescriptorProto:
        if theirs.package != ours.package:
            raise CaffememError(f"the fork's schema is package '{excerpt(theirs.package)}', not '{ours.package}': it is not a Caffe caffe.proto", Location(file=self.file))
        merged = descriptor_pb2.FileDescriptorProto()
        merged.CopyFrom(ours)
        merged.ClearField("source_code_info")
        self._messages(merged.message_type, theirs.message_type, (4,), "")
        self._enums(merged.enum_type, theirs.enum_type, (5,), "")
        return merged

    def _line(self, path: tuple[int, ...]) -> int | None:
        return self.lines.get(path)

    def _messages(self, ours, theirs, path: tuple[int, ...], scope: str) -> None:
        by_name = {message.name: message for message in ours}
        for index, message in enumerate(theirs):
            here = path + (index,)
            name = scope + message.name
            mine = by_name.get(message.name)
            if mine is None:
                added = ours.add()
                added.CopyFrom(message)
                for field in added.field:
                    field.ClearField("oneof_index")  # proto2 nets have none; a oneof would be dropped from the copy
                added.ClearField("oneof_decl")
                continue
            self._fields(mine, message, here, name)
            self._messages(mine.nested_type, message.nested_type, here + (3,), name + ".")
            self._enums(mine.enum_type, message.enum_type, here + (4,), name + ".")

    def _fields(self, mine, message, path: tuple[int, ...], name: str) -> None:
        by_name = {field.name: field for field in mine.field}
        numbers = {field.number: field.name for field in mine.field}
        for index, field in enumerate(message.field):
            line = self._line(path + (2, index))
            known = by_name.get(field.name)
            if known is None:
                added = mine.field.add()
                added.CopyFrom(field)
                added.ClearField("oneof_index")
                if field.number in numbers or _reserved(mine, field.number):
                    added.number = _free_number(mine)
                    self.renumbered.append(Conflict(self.file, line, name, field.name, f"the fork numbers it {field.number}, which caffemem gives {name}.{numbers.get(field.number, '(reserved)')}: a text net reads the same; a binary file the fork wrote would not"))
                numbers[added.number] = field.name
                continue
            if _KIND[field.type] != _KIND[known.type] or field.type_name.split(".")[-1] != known.type_name.split(".")[-1] or (field.label == _F.LABEL_REPEATED and known.label != _F.LABEL_REPEATED):
                # The fork's nets are read as the fork reads them, under a number of the
                # merged schema's own: caffemem's rules then see the field unset, so a net
                # that sets it is refused (ForkSchema.used_conflicts); one that does not
                # (an OCR fork's multi-label Datum.label) reads as it is.
                self.conflicts.append(Conflict(self.file, line, name, field.name, f"the fork declares it {_describe_type(field)} = {field.number}, caffemem {_describe_type(known)} = {known.number}: caffemem's rules cannot read the fork's meaning"))
                known.CopyFrom(field)
                known.ClearField("oneof_index")
                known.number = _free_number(mine)
            elif field.number != known.number:
                self.renumbered.append(Conflict(self.file, line, name, field.name, f"the fork numbers it {field.number}, caffemem {known.number}: a text net reads the same; a binary file the fork wrote would not"))

    def _enums(self, ours, theirs, path: tuple[int, ...], scope: str) -> None:
        by_name = {enum.name: enum for enum in ours}
        for index, enum in enumerate(theirs):
            mine = by_name.get(enum.name)
            if mine is None:
                ours.add().CopyFrom(enum)
                continue
            names = {value.name for value in mine.value}
            numbers = {value.number: value.name for value in mine.value}
            for value_index, value in enumerate(enum.value):
                if value.name in names:
                    continue
                added = mine.value.add()
                added.CopyFrom(value)
                line = self._line(path + (index, 2, value_index))
                self.fork_values.append(Conflict(self.file, line, scope + enum.name, value.name, "the fork's value of an enum caffemem knows: caffemem's own layer rules read the field as unset (its default); a --layers rule reads the value"))
                if value.number in numbers:
                    added.number = max(numbers) + 1
                    self.renumbered.append(Conflict(self.file, line, scope + enum.name, value.name, f"the fork numbers it {value.number}, which caffemem gives {numbers[value.number]}: a text net reads the same; a binary file the fork wrote would not"))
                numbers[added.number] = value.name
                names.add(value.name)


def _reserved(message, number: int) -> bool:
    return any(r.start <= number < r.end for r in list(message.reserved_range) + list(message.extension_range))


def _free_number(message) -> int:
    """A number no field of the message uses, above all of them (the merged schema's own)."""
    used = [field.number for field in message.field] + [r.end - 1 for r in list(message.reserved_range) + list(message.extension_range) if r.end - 1 < _MAX_FIELD_NUMBER]
    number = max(used, default=0) + 1
    return number if number < 19000 or number > 19999 else 20000  # 19000-19999: protobuf's own


@dataclass(frozen=True)
class FieldInfo:
    """A field of the fork's schema, as the --layers skeleton lists it."""

    name: str
    type: str  # "uint32", "repeated float", "UpsampleParameter.Mode"
    default: str | None
    line: int | None  # in the fork's caffe.proto


class ForkSchema:
    """caffemem's schema merged with a fork's caffe.proto: message classes of their own pool."""

    def __init__(self, proto: Path) -> None:
        from caffemem.schema import caffe_pb2

        self.file = str(proto)
        theirs = compile_proto(proto)
        ours = descriptor_pb2.FileDescriptorProto.FromString(caffe_pb2.DESCRIPTOR.serialized_pb)
        merger = _Merger(theirs, self.file)
        merged = merger.merge(ours, theirs)
        self.conflicts = tuple(merger.conflicts)
        self.renumbered = tuple(merger.renumbered)
        self.fork_values = tuple(merger.fork_values)
        self._theirs = theirs
        self._theirs_lines = merger.lines
        self.pool = descriptor_pool.DescriptorPool()
        try:
            self.pool.AddSerializedFile(merged.SerializeToString())
        except Exception as error:  # what protoc accepted and the merge made unbuildable: name it
            raise CaffememError(f"the fork's schema cannot be merged with caffemem's: {excerpt(str(error), 300)}", Location(file=self.file)) from None
        self._ours = caffe_pb2

    @functools.cache
    def message_class(self, full_name: str) -> Any:
        descriptor = self.pool.FindMessageTypeByName(full_name)
        get = getattr(message_factory, "GetMessageClass", None)  # protobuf 4.22 on
        return get(descriptor) if get else message_factory.MessageFactory(self.pool).GetPrototype(descriptor)

    def to_caffemem(self, message: Any) -> Any:
        """The same message as caffemem's own class: the fork's fields ride along unknown."""
        own = getattr(self._ours, message.DESCRIPTOR.full_name.removeprefix("caffe."))
        return own.FromString(message.SerializeToString())

    def view(self, message: Any) -> Any | None:
        """A caffemem message read with the merged schema (the fork's fields by name), or
        None for a message of no caffe schema."""
        name = message.DESCRIPTOR.full_name
        if message.DESCRIPTOR.file.pool is self.pool:
            return message
        try:
            return self.message_class(name).FromString(message.SerializeToString())
        except KeyError:
            return None

    def used_conflicts(self, message: Any) -> list[Conflict]:
        """The fields a parsed (merged) message sets that the fork types otherwise than
        caffemem: what refuses the net."""
        return self._used(message, self.conflicts)

    def used_differences(self, message: Any) -> list[Conflict]:
        """What a parsed (merged) message uses that reads otherwise in caffemem's schema
        (a renumbered field, the fork's value of caffemem's enum): what a note names."""
        return self._used(message, self.renumbered + self.fork_values)

    def _used(self, message: Any, differences: tuple[Conflict, ...]) -> list[Conflict]:
        if not differences:
            return []
        wanted = {(c.message, c.field) for c in differences}
        found: set[tuple[str, str]] = set()
        stack = [message]
        while stack:
            current = stack.pop()
            for field, value in current.ListFields():
                found.add((current.DESCRIPTOR.full_name.removeprefix("caffe."), field.name))
                if field.message_type is not None:
                    stack.extend(value if _repeated(field) else [value])
                elif field.enum_type is not None:
                    scope = field.enum_type.full_name.removeprefix("caffe.")
                    for number in value if _repeated(field) else [value]:
                        enum_value = field.enum_type.values_by_number.get(number)
                        if enum_value is not None:
                            found.add((scope, enum_value.name))
        return [c for c in differences if (c.message, c.field) in wanted & found]

    def fields_of(self, full_name: str) -> list[FieldInfo]:
        """The fields of a merged message, with their lines in the fork's file."""
        descriptor = self.pool.FindMessageTypeByName(full_name)
        lines = self._field_lines(full_name.removeprefix("caffe."))
        found = []
        for field in descriptor.fields:
            kind = field.message_type.full_name if field.message_type else field.enum_type.full_name if field.enum_type else _TYPE_NAMES[field.type]
            kind = ("repeated " if _repeated(field) else "") + kind.removeprefix("caffe.")
            default = None
            if field.has_default_value:
                default = field.enum_type.values_by_number[field.default_value].name if field.enum_type else repr(field.default_value) if isinstance(field.default_value, str) else str(field.default_value).lower() if isinstance(field.default_value, bool) else str(field.default_value)
            found.append(FieldInfo(field.name, kind, default, lines.get(field.name)))
        return found

    def _field_lines(self, name: str) -> dict[str, int]:
        """field name -> its line in the fork's file, for the (nested) message ``name``."""
        messages, path, message = self._theirs.message_type, (4,), None
        for part in name.split("."):
            index = next((i for i, candidate in enumerate(messages) if candidate.name == part), None)
            if index is None:
                return {}
            message, path = messages[index], path + (index,)
            messages, path = message.nested_type, path + (3,)
        path = path[:-1]  # the message's own path, not its nested types'
        return {field.name: self._theirs_lines[path + (2, i)] for i, field in enumerate(message.field) if path + (2, i) in self._theirs_lines}


def _repeated(field: Any) -> bool:
    from caffemem.schema import is_repeated

    return is_repeated(field)


# ----------------------------------------------------------------------------- registered types

_REGISTER = re.compile(r"[ \t]*REGISTER_LAYER_(?:CLASS|CREATOR)[ \t]*\([ \t]*(\w+)[ \t]*[,)]", re.ASCII)
SOURCE_LINE_BYTES = 1 << 16  # a source line is read up to this; the rest of it is another "line"
_SOURCE_SUFFIXES = (".cpp", ".cu", ".cc", ".hpp", ".h", ".cuh")


def _sources(folder: Path) -> list[Path]:
    """The C++ and CUDA files under ``folder``, tests left out, in a stable order; links to
    folders are not followed (a link back up would loop)."""
    found = []
    for directory, subfolders, files in os.walk(folder):
        subfolders[:] = sorted(d for d in subfolders if d != "test")
        found += [Path(directory, name) for name in sorted(files) if name.endswith(_SOURCE_SUFFIXES)]
    return [path for path in found if path.is_file()]


@dataclass(frozen=True)
class Registration:
    """Where the tree registers a layer type with Caffe's LayerRegistry."""

    type: str
    file: Path
    line: int


def registered_types(root: Path) -> dict[str, Registration]:
    """Every layer type the tree's sources register (src/caffe and include/, tests left
    out), with the first place each is registered.  Caffe's macros
    (include/caffe/layer_factory.hpp) are ``REGISTER_LAYER_CLASS(type)`` (a class
    ``typeLayer``, e.g. ``REGISTER_LAYER_CLASS(Concat);`` in concat_layer.cpp) and
    ``REGISTER_LAYER_CREATOR(type, creator)`` (layer_factory.cpp's engine switches)."""
    return registrations_in(source_files(root))


def registrations_in(sources: list[Path] | tuple[Path, ...]) -> dict[str, Registration]:
    """:func:`registered_types` of sources already listed."""
    found: dict[str, Registration] = {}
    for path in sources:
        for line_number, name in _registrations(path):
            found.setdefault(name, Registration(name, path, line_number))
    return found


def source_files(root: Path) -> list[Path]:
    """The tree's C++ and CUDA sources that registrations are read from (src/caffe and
    include/, tests left out)."""
    return [path for folder in (root / "src" / "caffe", root / "include") for path in _sources(folder)]


def _registrations(path: Path) -> list[tuple[int, str]]:
    """(line, type) of each registration in one source file, read a line at a time with
    each line cut at SOURCE_LINE_BYTES: memory stays bounded whatever the file is (issue
    31: a 2 GB sparse .cpp, one line of NULs, was read whole and took 4.1 GB).  A file
    that cannot be read as a regular file is skipped, as one without registrations."""
    found: list[tuple[int, str]] = []
    try:
        with open_input(path, "source file") as handle:
            continued = False  # the line before ended in a backslash: part of a #define
            for number, raw in enumerate(iter(lambda: handle.readline(SOURCE_LINE_BYTES), b""), start=1):
                line = raw.decode("utf-8", "replace")
                if "REGISTER_LAYER_" in line and not continued:
                    match = _REGISTER.match(line)
                    if match:
                        found.append((number, match.group(1)))
                continued = line.rstrip().endswith("\\")
    except (OSError, CaffememError):
        return []
    return found


# ----------------------------------------------------------------------------- the tree


class CaffeRoot:
    """A Caffe source tree given with --caffe-root (or $CAFFE_ROOT)."""

    def __init__(self, root: str | os.PathLike) -> None:
        self.root = Path(root)
        if not self.root.is_dir():
            raise CaffememError("--caffe-root (or $CAFFE_ROOT) is not a folder: give the root of your Caffe source tree", Location(file=str(root)))
        self.schema = ForkSchema(self.root / PROTO)

    @functools.cached_property
    def registered(self) -> dict[str, Registration]:
        return registrations_in(self.sources)  # the files every run notes as read: one walk of the tree

    @functools.cached_property
    def sources(self) -> tuple[Path, ...]:
        return tuple(source_files(self.root))

    def relative(self, path: Path) -> str:
        """``path`` as the user would write it: under the root they gave."""
        try:
            return str(self.root / path.relative_to(self.root))
        except ValueError:
            return str(path)


def caffe_root(root: str | os.PathLike) -> CaffeRoot:
    """One CaffeRoot per tree and process (``check`` reads many nets with one tree), read
    again when its caffe.proto changes."""
    try:
        status = (Path(root) / PROTO).stat()
        version = (status.st_mtime_ns, status.st_size)
    except OSError:
        version = None
    tree = _caffe_root(str(root), version)
    # Its caffe.proto and sources are inputs of every run given the tree, read this time
    # or from the cache, so no output may land on one (issue 31: `--html` on a registered
    # .cpp with a warm cache, or with the type declared in --layers, overwrote it).
    note_read_path(tree.root / PROTO)
    for path in tree.sources:
        note_read_path(path)
    return tree


@functools.lru_cache(maxsize=8)
def _caffe_root(root: str, _version: object) -> CaffeRoot:
    return CaffeRoot(root)

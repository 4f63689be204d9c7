"""Pass 4b, sources: what each data layer's source holds, read as Caffe's SetUp reads it.

Entry point: :func:`read_sources`.  It reads the graph's data layers (those whose spec
names a ``source_kind``) and gives, per layer, a :class:`SourceRecord`: the first
record's image size (a Datum, an image, a window file's first image), an HDF5 file's
datasets, an AnnotatedDatum's boxes, and the mean file's size.  The shape pass hands each
record to its layer's rule, which applies ``transform_param`` and the batch as Caffe's
DataTransformer::InferBlobShape and DataLayerSetUp do (layers/data.py).

What Caffe reads, and so what is read here (BVLC master):

- Data (data_layer.cpp): ``db::GetDB(backend)`` opens ``data_param.source`` (db_lmdb.cpp:
  MDB_RDONLY, a folder; db_leveldb.cpp: leveldb::DB::Open, create_if_missing false) and
  parses the cursor's first value as a Datum.  An encoded Datum is decoded by OpenCV
  (io.cpp DecodeDatumToCVMatNative: ``imdecode(data, -1)``, the image's own channels;
  force_color/force_gray: 3/1): its size is read from the image's header.
- ImageData (image_data_layer.cpp): the list file's lines are ``path label`` (split at
  the last space); the first image, ``root_folder + path``, is read by ReadImageToCVMat
  (io.cpp): is_color's 3 or 1 channels, resized to new_height x new_width when set.
- WindowData (window_data_layer.cpp): the window file is a series of ``# index``, image
  path, channels, height, width, window count and windows; the data top has the images'
  channels (Caffe keeps the last image's; the first is read here: R-CNN window files
  list images of one kind) and crop_size x crop_size.
- HDF5Data (hdf5_data_layer.cpp): the source lists .h5 files (whitespace-separated); the
  first file's dataset named by each top gives that top's shape after the batch
  (hdf5.cpp hdf5_load_nd_dataset; rows must agree across the tops).
- AnnotatedData (weiliu89/caffe ssd annotated_data_layer.cpp): as Data, an AnnotatedDatum.
- the forks' image-and-label-map lists (SegNet's DenseImageData, HED's ImageLabelmapData,
  DeepLab's ImageSegData): the first image of the list, as ImageData reads it.
- C3D-v1.0's video-to-video data (VideoWithVoxelTruthData, VideoSegmentationData): the
  list's first word names a blob file whose header is five int32, N, C, L, H, W
  (util/image_io.cpp load_blob_from_binary, load_blob_from_uint8_binary).
- the mean file (data_transformer.cpp): ``transform_param.mean_file``, a BlobProto.

Only what SetUp needs is read: the first record of a database, the first line of a list,
the header of one image, the dataset shapes (not data) of one HDF5 file.  Relative paths
resolve against the working directory, as Caffe's own file opening does.  A source that
does not exist gives no record (the rule asks for --input, as without sources, and names
the file a list names first where that is the one missing); a source that exists but
cannot be read is an error naming the file and the layer.

A source is read in place and read-only (issue 31): every file is opened by
prototxt.read.open_input (read-only, non-blocking, refused unless a regular file, from the
opened descriptor) and noted as read by the run, so that no output lands on it.  LMDB and
LevelDB are read by caffemem.databases (LevelDB writes on every open, even through links
in the folder; the lmdb binding maps the file, so a bad size field is a SIGBUS); HDF5
files are given to h5py as opened files, and their external links are followed here, to
regular files only.  Images and HDF5 need Pillow and h5py, the optional extra
``caffemem[data]``; without it the layer gets no record and the request for --input says
how to install it.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import io
import os
import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, BinaryIO

from caffemem.databases import DatabaseError, leveldb, lmdb
from caffemem.errors import CaffememError, Location
from caffemem.graph import Graph, Layer, Shape
from caffemem.layers.registry import SourceRecord, SpecTable
from caffemem.prototxt.read import note_read, note_read_path, open_input

EXTRA = "pip install 'caffemem[data]'"
# The most of a list file read for its first entry: a line (a path and a label) is short.
LIST_HEAD_BYTES = 1 << 16
# A mean file larger than this is not read (an ImageNet mean, 3x256x256 floats, is 0.8 MB).
MEAN_FILE_BYTES = 1 << 28
# db.proto's DB enum: DataParameter.backend (LEVELDB, the default, is 0), and the readers.
BACKENDS = ("leveldb", "lmdb")
DATABASES = {"leveldb": ("LevelDB", leveldb.first_value), "lmdb": ("LMDB", lmdb.first_value)}
# HDF5's limit on soft and external links followed in one lookup (H5L_NUM_LINKS).
HDF5_LINK_HOPS = 16


@dataclass(frozen=True)
class Sources:
    """What :func:`read_sources` found: a record per layer name, and per layer whose source
    exists but gives no record, the hint its request for --input adds: the extra to
    install, or the listed file that is missing."""

    records: Mapping[str, SourceRecord] = field(default_factory=dict)
    hints: Mapping[str, str] = field(default_factory=dict)


class _Unreadable(DatabaseError):
    """A reader's signal: the source exists but cannot be read (caught in read_sources,
    which names the layer).  A DatabaseError, so a database reader passes it on."""


class _NoLibrary(Exception):
    """A reader's signal: the library it needs is not installed."""


class _Absent(Exception):
    """A reader's signal: the source exists but the file it lists first does not (an
    image, an .h5 file): no record, and the request for --input says which file."""


def read_sources(graph: Graph, specs: SpecTable, cwd: str | None = None) -> Sources:
    """Pass 4b, sources: reads the graph's layers and, for each data layer with a
    ``source_kind`` whose source exists, its first record.  Adds nothing to the graph;
    raises CaffememError (file, line, layer) for a source that cannot be read."""
    if cwd is None:
        try:
            cwd = os.getcwd()
        except OSError:  # the working directory was deleted: relative sources are missing
            cwd = ""
    records: dict[str, SourceRecord] = {}
    hints: dict[str, str] = {}
    for layer in graph.layers:
        spec = specs.get(layer.type)
        if spec is None or spec.source_kind is None:
            continue
        try:
            found = _read(spec.source_kind, layer.proto.SerializeToString(), layer.type, cwd)
        except _NoLibrary as missing:
            hints[layer.name] = f"to read them from its source, install the readers: {EXTRA} ({missing})"
            continue
        except _Absent as absent:
            hints[layer.name] = str(absent)
            continue
        except DatabaseError as error:
            raise CaffememError(f"cannot read this layer's data source: {error}", Location.of_layer(layer, graph.source)) from None
        except (OSError, ValueError, RuntimeError, EOFError) as error:  # what a library says of a file it cannot take
            raise CaffememError(f"cannot read this layer's data source ({type(error).__name__}: {error})", Location.of_layer(layer, graph.source)) from None
        for path, status in found.read:  # noted on every run, the record cached or not
            note_read(status)
            note_read_path(path)  # and the file there now, should it have been replaced since
        if found.record is not None:
            records[layer.name] = found.record
    return Sources(records, hints)


def provenance(layer: Layer, record: SourceRecord, tops: tuple[Shape, ...], overridden: frozenset[str] = frozenset()) -> tuple[str, ...]:
    """The notes saying where a layer's top shapes came from, one per top the record sized
    (a top given with --override-input has its own note instead)."""
    sized = [i for i in record.tops if i < len(tops) and layer.tops[i] not in overridden]
    return tuple(f"{layer.tops[i]}: [{','.join(map(str, tops[i]))}] from {record.source} ({record.what})" for i in sized)


@dataclass(frozen=True)
class _Found:
    """A layer's record (None: its source does not exist) and the files read for it."""

    record: SourceRecord | None
    read: tuple[tuple[str, os.stat_result], ...]


class _Files:
    """How a reader finds and opens files: paths resolve against the working directory,
    and each file opened is kept (to be noted as read on every run, cached or not)."""

    def __init__(self, cwd: str):
        self.cwd = cwd
        self.read: list[tuple[str, os.stat_result]] = []

    def resolve(self, path: str) -> str:
        return os.path.join(self.cwd, path)

    def open(self, path: str, what: str, subject: str | None = None) -> BinaryIO:
        """``path`` opened by open_input (read-only, non-blocking, a regular file).  Raises
        OSError as os.open does (FileNotFoundError: the caller says what is missing), and
        _Unreadable, starting with ``subject`` (default: the path), for a FIFO, a folder,
        a device."""
        try:
            handle = open_input(path, what)
        except CaffememError as error:
            raise _Unreadable(f"{subject or path}{'' if subject else ':'} {error.message}") from None
        self.read.append((path, os.fstat(handle.fileno())))
        return handle


@functools.lru_cache(maxsize=64)
def _read(kind: str, proto_bytes: bytes, layer_type: str, cwd: str) -> _Found:
    """One layer's record, cached for the run (fit and optimize build a net many times):
    the key is the layer's parameters and the working directory."""
    from caffemem.schema import caffe_pb2

    proto = caffe_pb2.LayerParameter.FromString(proto_bytes)
    files = _Files(cwd)
    record = READERS[kind](proto, files)
    return _Found(record, tuple(files.read))


def _library(name: str, package: str | None = None) -> Any:
    """The module ``name``; ``package``: what pip installs it as, when named otherwise."""
    try:
        return importlib.import_module(name)
    except ImportError:
        raise _NoLibrary(f"{package or name} is not installed" + (f" (import {name})" if package else "")) from None


# ---- databases: Data, AnnotatedData -----------------------------------------------------


def _first_value(path: str, backend: str, files: _Files) -> bytes:
    """The first value of the database at ``path``, as Caffe's cursor sees it after
    SeekToFirst, read by caffemem.databases: read-only, in place, nothing written."""
    name, first_value = DATABASES[backend]
    try:
        value = first_value(path, files.open)
    except DatabaseError as error:
        raise _Unreadable(f"{error}{_other_backend(path, backend)}") from None
    if value is None:
        raise _Unreadable(f"the {name} {path} holds no record")
    return value


def _other_backend(path: str, backend: str) -> str:
    """A hint when the folder holds the other kind of database than data_param.backend says."""
    if backend == "leveldb" and os.path.exists(os.path.join(path, "data.mdb")):
        return "; it holds an LMDB (data.mdb): set data_param { backend: LMDB } (the default is LEVELDB)"
    if backend == "lmdb" and os.path.exists(os.path.join(path, "CURRENT")):
        return "; it holds a LevelDB: set data_param { backend: LEVELDB }"
    return ""


def _datum_image(datum: Any, transform: Any, where: str) -> tuple[tuple[int, int, int], str]:
    """C, H, W of a Datum as DataTransformer::InferBlobShape(const Datum&) sees it: the
    stored fields, or for an encoded Datum the decoded image's."""
    if not datum.encoded:
        return (datum.channels, datum.height, datum.width), f"first Datum {datum.channels}x{datum.height}x{datum.width}"
    if transform.force_color and transform.force_gray:
        raise _Unreadable("cannot set both force_color and force_gray (data_transformer.cpp)")
    size, channels, kind = _image_header(io.BytesIO(datum.data), f"the first Datum's encoded image in {where}")
    if transform.force_color or transform.force_gray:
        channels = 3 if transform.force_color else 1  # DecodeDatumToCVMat(datum, is_color)
    return (channels, size[1], size[0]), f"first Datum encoded {kind} {channels}x{size[1]}x{size[0]}"


def _read_datum_db(proto: Any, files: _Files) -> SourceRecord | None:
    """Data (data_layer.cpp DataLayerSetUp): the first Datum of data_param.source."""
    from caffemem.schema import caffe_pb2

    return _read_db(proto, files, caffe_pb2.Datum, lambda message: message)


def _read_annotated_db(proto: Any, files: _Files) -> SourceRecord | None:
    """AnnotatedData (weiliu89/caffe ssd annotated_data_layer.cpp DataLayerSetUp): the first
    AnnotatedDatum; its boxes (every annotation of every group) size the label when it
    has a type (its own or anno_data_param.anno_type)."""
    from caffemem.schema import caffe_pb2

    return _read_db(proto, files, caffe_pb2.AnnotatedDatum, lambda message: message.datum, annotated=True)


def _read_db(proto: Any, files: _Files, message_type: Any, datum_of: Callable[[Any], Any], annotated: bool = False) -> SourceRecord | None:
    from google.protobuf.message import DecodeError

    source = proto.data_param.source
    path = files.resolve(source)
    if not source:
        return None
    if not os.path.exists(path):
        raise _Absent(_not_found(source, path))
    backend = BACKENDS[proto.data_param.backend]
    value = _first_value(path, backend, files)
    try:
        message = message_type.FromString(value)
    except DecodeError as error:
        raise _Unreadable(f"the first record of {path} is not a {message_type.DESCRIPTOR.name} ({error})") from None
    image, what = _datum_image(datum_of(message), proto.transform_param, path)
    boxes = None
    if annotated and (message.HasField("type") or proto.annotated_data_param.HasField("anno_type")):
        boxes = sum(len(group.annotation) for group in message.annotation_group)
        what += f", {boxes} box(es)"
    mean, mean_what = _mean(proto, files)
    return SourceRecord(source, what + _crop(proto) + mean_what, (0,) if boxes is None else (0, 1), image=image, boxes=boxes, mean=mean)


# ---- images: ImageData, WindowData ------------------------------------------------------


def _image_header(stream: Any, what: str) -> tuple[tuple[int, int], int, str]:
    """(width, height), channels and format of an image, from its header only.

    The channels are those OpenCV's ``imdecode(data, -1)`` (IMREAD_UNCHANGED) gives:
    grey 1; colour 3; an alpha channel or a PNG transparency chunk 4 (grfmt_png.cpp);
    a CMYK JPEG is converted to 3."""
    image_module = _library("PIL.Image", "Pillow")
    limit, image_module.MAX_IMAGE_PIXELS = image_module.MAX_IMAGE_PIXELS, None  # only the header is read: no pixels to guard
    try:
        with image_module.open(stream) as image:
            mode, size, kind, info = image.mode, image.size, image.format or "image", image.info
    except (OSError, SyntaxError, ValueError) as error:  # UnidentifiedImageError is an OSError
        reason = str(error).replace(f" {stream!r}", "")  # Pillow names an opened file by its object
        raise _Unreadable(f"{what} cannot be decoded ({reason})") from None
    finally:
        image_module.MAX_IMAGE_PIXELS = limit
    if mode in ("LA", "La", "RGBA", "RGBa", "PA") or (mode in ("RGB", "P") and "transparency" in info):
        channels = 4
    elif mode in ("RGB", "P", "CMYK", "YCbCr", "LAB", "HSV"):
        channels = 3
    else:  # 1, L, I, I;16, F
        channels = 1
    return size, channels, kind


def _read_image_list(proto: Any, files: _Files) -> SourceRecord | None:
    """ImageData (image_data_layer.cpp DataLayerSetUp): the list's first line and, unless
    new_height/new_width fix the size, its image's header (ReadImageToCVMat's channels
    follow is_color whatever the file holds).  A listed image that is missing gives no
    record, as a missing list does, and the request for --input names it."""
    param = proto.image_data_param
    line = _first_line(param.source, files)
    if line is None:
        return None
    path, _, _ = line.rpartition(" ") if " " in line else (line, "", "")
    image, what = _read_image(param, path, files)
    mean, mean_what = _mean(proto, files)
    return SourceRecord(param.source, what + _crop(proto) + mean_what, image=image, mean=mean)


def _read_image(param: Any, path: str, files: _Files) -> tuple[tuple[int, int, int], str]:
    """C, H, W of ``root_folder + path`` as ReadImageToCVMat(file, new_height, new_width,
    is_color) gives it (io.cpp): is_color's channels; new_height x new_width when both are
    set (then the file is not opened), else the file's own size from its header."""
    channels = 3 if param.is_color else 1
    if param.new_height > 0 and param.new_width > 0:
        return (channels, param.new_height, param.new_width), f"first image {path}, resized to new_height/new_width {param.new_height}x{param.new_width}"
    with _open_listed(files, param.root_folder + path, param.source, "image") as stream:
        (width, height), _, kind = _image_header(stream, f"the first image {files.resolve(param.root_folder + path)}")
    return (channels, height, width), f"first image {path}: {kind} {width}x{height}, read with {channels} channel(s)"


def _image_pair_list(param_name: str) -> Callable[[Any, _Files], SourceRecord | None]:
    """The forks' image-and-label-map lists, read with ``infile >> image >> label`` and the
    first image read by ReadImageToCVMat as ImageData reads it: SegNet's DenseImageData
    (alexgkendall/caffe-segnet dense_image_data_layer.cpp, dense_image_data_param), HED's
    ImageLabelmapData (s9xie/hed image_labelmap_data_layer.cpp) and DeepLab's ImageSegData
    (image_seg_data_layer.cpp), both image_data_param.  The label map is the image's size,
    so the record sizes both tops."""

    def read(proto: Any, files: _Files) -> SourceRecord | None:
        param = getattr(proto, param_name)
        path, words = _head_tokens(param.source, files)
        if words is None:
            return None
        if not words:
            raise _Unreadable(f"the list {path} is empty (Caffe stops: \"File is empty\")")
        image, what = _read_image(param, words[0], files)
        return SourceRecord(param.source, what + _crop(proto), (0, 1), image=image)

    return read


def _open_list(source: str, files: _Files) -> tuple[str, BinaryIO | None]:
    """The resolved path of a list file and the file opened (None: it does not exist)."""
    path = files.resolve(source)
    if not source:
        return path, None
    try:
        return path, files.open(path, "list file", f"the list {path}")
    except FileNotFoundError:
        raise _Absent(_not_found(source, path)) from None
    except OSError as error:
        raise _Unreadable(f"the list {path} cannot be opened: {error.strerror or error}") from None


def _not_found(source: str, path: str) -> str:
    """Where a source that does not exist was looked for (issue 34: a relative LMDB, run
    from another folder, got the request for --input without it)."""
    if os.path.isabs(source):
        return f"its source {source} does not exist"
    return f"its source {source} is not at {path} (Caffe opens a relative source from the folder it runs in: run there, or give the shape)"


def _open_listed(files: _Files, name: str, source: str, kind: str) -> BinaryIO:
    """The file a list names first, opened; one that does not exist is absent (the request
    for --input names it), a FIFO or a folder says what it is."""
    subject = f"the first {kind} {name} that {source} lists"
    try:
        return files.open(files.resolve(name), "regular file", subject)
    except FileNotFoundError:
        raise _Absent(f"{subject} does not exist") from None
    except OSError as error:
        raise _Unreadable(f"{subject} cannot be opened: {error.strerror or error}") from None


def _first_line(source: str, files: _Files) -> str | None:
    """The first line of a list file (std::getline: without its newline), None when the file
    does not exist; an empty file stops Caffe (CHECK(!lines_.empty()) "File is empty")."""
    path, handle = _open_list(source, files)
    if handle is None:
        return None
    with handle:
        head = handle.readline(LIST_HEAD_BYTES)
    if not head:
        raise _Unreadable(f"the list {path} is empty (Caffe stops: \"File is empty\")")
    return head.decode("utf-8", "surrogateescape").rstrip("\n")


def _head_tokens(source: str, files: _Files) -> tuple[str, list[str] | None]:
    """The resolved path of a list read with ``>>`` (whitespace-separated words) and its
    first words (those in its first LIST_HEAD_BYTES); None when the file does not exist."""
    path, handle = _open_list(source, files)
    if handle is None:
        return path, None
    with handle:
        return path, handle.read(LIST_HEAD_BYTES).decode("utf-8", "surrogateescape").split()


def _first_listed(source: str, files: _Files, empty: str) -> str | None:
    """The first word of a list read with ``>>``: None when the list does not exist; an
    empty list is unreadable (``empty`` says what Caffe does)."""
    path, names = _head_tokens(source, files)
    if names is None:
        return None
    if not names:
        raise _Unreadable(f"the list {path} names no file ({empty})")
    return names[0]


def _read_window_file(proto: Any, files: _Files) -> SourceRecord | None:
    """WindowData (window_data_layer.cpp DataLayerSetUp): the first image record of the
    window file: ``# index``, path, channels, height, width."""
    source = proto.window_data_param.source
    path, tokens = _head_tokens(source, files)
    if tokens is None:
        return None
    if len(tokens) < 2:
        raise _Unreadable(f"the window file {path} is empty (Caffe stops: \"Window file is empty\")")
    try:
        if tokens[0] != "#":
            raise ValueError(f"it starts with {tokens[0]!r}, not '#'")
        image, channels, height, width = tokens[2], _whole(tokens[3]), _whole(tokens[4]), _whole(tokens[5])
    except (IndexError, ValueError) as error:
        raise _Unreadable(f"{path} is not a window file (# index, image path, channels, height, width, windows...): {error}") from None
    what = f"first image {image}: {channels}x{height}x{width}" + _crop(proto)
    return SourceRecord(source, what, image=(channels, height, width))


def _whole(token: str) -> int:
    """A count as ``infile >> int`` reads it in the C locale: ASCII digits, a ``+`` allowed
    (issue 31: int() took Arabic-Indic digits and "3_000", which Caffe's stream does not)."""
    digits = token[1:] if token.startswith("+") else token
    if not (digits.isascii() and digits.isdigit()):
        raise ValueError(f"{token!r} is not a whole number")
    return int(digits)


# ---- HDF5Data -----------------------------------------------------------------------


def _read_hdf5_list(proto: Any, files: _Files) -> SourceRecord | None:
    """HDF5Data (hdf5_data_layer.cpp LayerSetUp, LoadHDF5FileData): the first file the list
    names, and in it the dataset of each top's name (its shape, no data).  h5py is given
    the opened file (its fileobj driver: HDF5 itself opens nothing by name), and links to
    other files are followed here (:func:`_hdf5_dataset`)."""
    source = proto.hdf5_data_param.source
    listed = _first_listed(source, files, "Caffe stops: \"Must have at least 1 HDF5 filename listed\"")
    if listed is None:
        return None
    h5py = _library("h5py")
    file = files.resolve(listed)
    datasets: dict[str, Shape] = {}
    with contextlib.ExitStack() as opened:
        h5 = _open_hdf5(h5py, _open_listed(files, listed, source, "file"), file, opened)
        for top in proto.top:
            node = _hdf5_dataset(h5py, h5, file, top, files, opened)
            if node is None:
                raise _Unreadable(f"{file} has no dataset '{top}' for the top of that name (Caffe stops: \"Failed to find HDF5 dataset {top}\")")
            datasets[top] = tuple(int(d) for d in node.shape)
    what = "first file " + listed + ": " + ", ".join(f"{name} {'x'.join(map(str, shape)) or 'scalar'}" for name, shape in datasets.items())
    return SourceRecord(source, what, tuple(range(len(proto.top))), datasets=datasets)


def _open_hdf5(h5py: Any, handle: BinaryIO, path: str, opened: contextlib.ExitStack) -> Any:
    opened.enter_context(handle)
    try:
        return opened.enter_context(h5py.File(handle, "r"))
    except OSError as error:
        raise _Unreadable(f"{path} is not an HDF5 file ({error})") from None


def _hdf5_dataset(h5py: Any, h5: Any, file: str, name: str, files: _Files, opened: contextlib.ExitStack) -> Any:
    """The dataset at ``name`` in ``h5`` (read from ``file``), as H5Dopen finds it: each
    link of the path followed, soft links within the file, external links to the file
    they name (:func:`_hdf5_external`); None when there is none."""
    group, parts, hops = h5, [part for part in name.split("/") if part], 0
    while parts:
        part = parts.pop(0)
        try:
            link = group.get(part, getlink=True)
        except (KeyError, ValueError, RuntimeError, OSError):
            return None
        if isinstance(link, (h5py.SoftLink, h5py.ExternalLink)):
            hops += 1
            if hops > HDF5_LINK_HOPS:
                raise _Unreadable(f"{file}: the links to '{name}' go through more than {HDF5_LINK_HOPS} links (a loop?)")
            if isinstance(link, h5py.ExternalLink):
                file, handle = _hdf5_external(link.filename, file, part, files)
                h5 = group = _open_hdf5(h5py, handle, file, opened)
            elif link.path.startswith("/"):
                group = h5
            parts = [piece for piece in link.path.split("/") if piece] + parts
            continue
        if not isinstance(link, h5py.HardLink):
            return None  # a user-defined link class: HDF5 without its plugin cannot follow it either
        try:
            node = group[part]
        except (KeyError, ValueError, RuntimeError, OSError):
            return None
        if not parts:
            return node if isinstance(node, h5py.Dataset) else None
        if not isinstance(node, h5py.Group):
            return None
        group = node
    return None


def _hdf5_external(target: str, file: str, link: str, files: _Files) -> tuple[str, BinaryIO]:
    """The file an external link names, found as HDF5 finds it (H5Lcreate_external): an
    absolute name as given, else its last part; a relative one under each folder of
    $HDF5_EXT_PREFIX, then the linking file's folder, then the working directory.  The
    first that exists is the one, opened here: what is not a regular file is refused."""
    names = [target] if os.path.isabs(target) else []
    relative = os.path.basename(target) if os.path.isabs(target) else target
    prefixes = [prefix.replace("${ORIGIN}", os.path.dirname(file)) for prefix in os.environ.get("HDF5_EXT_PREFIX", "").split(os.pathsep) if prefix]
    names += [os.path.join(prefix, relative) for prefix in prefixes] + [os.path.join(os.path.dirname(file), relative), files.resolve(relative)]
    for name in names:
        try:
            return name, files.open(name, "regular file", f"{name}, the file of the external link '{link}' in {file},")
        except FileNotFoundError:
            continue
        except OSError as error:
            raise _Unreadable(f"{name}, the file of the external link '{link}' in {file}, cannot be opened: {error.strerror or error}") from None
    raise _Unreadable(f"{file}: the external link '{link}' names {target}, which does not exist (looked for as {', '.join(names)})")


# ---- C3D-v1.0's blob files ----------------------------------------------------------------

# load_blob_from_binary's header: n, c, l, h, w, each fread as a native int (little-endian
# on the x86 machines C3D ran on).
_VOLUME_HEADER = struct.Struct("<5i")


def _read_volume_list(proto: Any, files: _Files) -> SourceRecord | None:
    """facebook/C3D C3D-v1.0 video_with_voxel_truth_data_layer.cpp and
    video_segmentation_data_layer.cpp SetUp: ``infile >> filename`` over
    image_data_param.source, then the first file's blob (util/image_io.cpp: five int32,
    N, C, L, H, W, then the values, floats or bytes).  Only the header is read."""
    source = proto.image_data_param.source
    listed = _first_listed(source, files, "Caffe reads file_list_[0] of an empty list")
    if listed is None:
        return None
    with _open_listed(files, listed, source, "blob file") as stream:
        head = stream.read(_VOLUME_HEADER.size)
    if len(head) < _VOLUME_HEADER.size:
        raise _Unreadable(f"{files.resolve(listed)} is not a C3D blob file: {len(head)} bytes, shorter than its header (n, c, l, h, w: five int32)")
    volume = _VOLUME_HEADER.unpack(head)
    what = f"first blob file {listed}: {'x'.join(map(str, volume))}"
    crop = proto.image_data_param.crop_size
    return SourceRecord(source, what + (f", crop_size {crop}" if crop else ""), (0, 1), volume=volume)


# ---- the mean file ----------------------------------------------------------------------


def _mean(proto: Any, files: _Files) -> tuple[tuple[int, int, int] | None, str]:
    """transform_param.mean_file as DataTransformer's constructor loads it (a BlobProto,
    Blob::FromProto): its LegacyShape(1..3), which Transform CHECKs against the image.
    A mean file that does not exist is not checked (Caffe stops at it: the note says so)."""
    from google.protobuf.message import DecodeError

    from caffemem.schema import caffe_pb2

    name = proto.transform_param.mean_file
    if not name:
        return None, ""
    path = files.resolve(name)
    try:
        handle = files.open(path, "mean file (BlobProto)", f"the mean_file {path}")
    except FileNotFoundError:
        return None, f"; mean_file {name} not found: not checked, and Caffe stops without it"
    except OSError as error:
        raise _Unreadable(f"the mean_file {path} cannot be opened: {error.strerror or error}") from None
    with handle:
        data = handle.read(MEAN_FILE_BYTES + 1)
    if len(data) > MEAN_FILE_BYTES:
        return None, f"; mean_file {name} not read (over {MEAN_FILE_BYTES >> 20} MiB)"
    try:
        blob = caffe_pb2.BlobProto.FromString(data)
    except DecodeError as error:
        raise _Unreadable(f"the mean_file {path} is not a BlobProto ({error})") from None
    legacy = any(blob.HasField(f) for f in ("num", "channels", "height", "width"))
    dims = (blob.num, blob.channels, blob.height, blob.width) if legacy else tuple(blob.shape.dim)
    mean = tuple(dims[i] if i < len(dims) else 1 for i in (1, 2, 3))  # Blob::LegacyShape pads with 1
    return mean, f"; mean_file {'x'.join(map(str, mean))}"  # type: ignore[return-value]


def _crop(proto: Any) -> str:
    crop = proto.transform_param.crop_size
    return f", crop_size {crop}" if crop else ""


# Each source_kind a LayerSpec may name, and its reader: (LayerParameter, files) -> the
# record, or None when the source does not exist.
READERS: dict[str, Callable[[Any, _Files], SourceRecord | None]] = {
    "datum_db": _read_datum_db,
    "annotated_datum_db": _read_annotated_db,
    "image_list": _read_image_list,
    "window_file": _read_window_file,
    "hdf5_list": _read_hdf5_list,
    "image_pair_list": _image_pair_list("image_data_param"),
    "dense_image_pair_list": _image_pair_list("dense_image_data_param"),
    "volume_list": _read_volume_list,
}

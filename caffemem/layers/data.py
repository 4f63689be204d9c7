"""Data layers of BVLC Caffe: layers with no bottoms whose tops come from outside the net.

Caffe sizes a data layer's tops in its (Data)LayerSetUp, usually from the first record it
reads (a datum in an LMDB, an image on disk, a row of an HDF5 file) passed through
``DataTransformer::InferBlobShape`` (data_transformer.cpp), which replaces height and width
by ``crop_size`` when one is set.  Every rule here:

1. derives the top from the layer's parameters wherever Caffe's own formula depends on
   parameters only (batch sizes, crop sizes, new_height/new_width, colour), and from the
   first record of the layer's source where it exists (``q.record``, read by
   passes/sources.py as the layer's SetUp reads it);
2. fills the dimensions the parameters leave open from ``--input`` (``q.inputs``), which
   must agree with the ones they state (``--override-input``, ``q.overrides``, replaces
   them instead);
3. otherwise raises :class:`NeedsInput` naming the tops it cannot size, with a template of
   the ``--input NAME=d0,d1,...`` value that shows the dimensions already known.

The helpers below are shared with the data layers of Caffe forks (``forks.py``).

No data layer is recomputed in Backward (its ``is_data``, registry.recompute_of): each Forward takes the next
batch (a DataReader cursor, a prefetch thread, the caller's MemoryData/Input arrays), and
DummyData's non-constant fillers draw anew each time (dummy_data_layer.cpp ``refill_``).
"""

from __future__ import annotations

from collections.abc import Sequence

from caffemem.errors import NeedsInput
from caffemem.graph import LayerShapes, Shape
from caffemem.layers.access import (
    Action,
    LayerMemory,
    MemoryQuery,
    MemoryRule,
    Reshape,
    buffer_setup,
    read,
    write,
)
from caffemem.layers.blob import FROM_FILE, int32, reshaped, with_batch
from caffemem.layers.pylayers import fixed_tops, known_note, known_shapes
from caffemem.layers.registry import (
    Arity,
    ShapeQuery,
    layer,
    never,
)

# A top's dimensions as far as the parameters tell: an int is known, a str names an
# unknown dimension in the --input template (e.g. "C" for channels stored in a database).
Dim = int | str
Template = tuple[Dim, ...]

# Templates for tops the parameters say nothing about (Python, Input without shape).
ANY_SHAPE: Template = ("d0", "...")
# ReadImageToCVMat decodes colour images to 3 channels, grey ones to 1 (io.cpp).
COLOR_CHANNELS = 3
GRAY_CHANNELS = 1
NONE = Arity.exactly(0)


def resolve_tops(q: ShapeQuery, templates: Sequence[Template], why: str, placeholders: Sequence[frozenset[int]] = ()) -> LayerShapes:
    """Apply the precedence parameters > --input > NeedsInput to each top, in top order.

    ``--input`` fills the axes the file leaves open and must agree with those it states
    (:func:`given_shape`); ``--override-input`` replaces them.  ``placeholders`` names, per
    top, stated axes that are only placeholders a program resizes at run time (OpenPose's
    ``input_dim: 1 3 1 1``): --input may fill them as if they were open."""
    shapes: list[Shape] = []
    missing: list[tuple[str, Template]] = []
    for i, (name, template) in enumerate(zip(q.layer.tops, templates)):
        loose = placeholders[i] if i < len(placeholders) else frozenset()
        if name in q.inputs:
            shape = given_shape(q, name, template, loose)
            if shape is None:
                missing.append((name, template))
            else:
                shapes.append(shape)
        elif all(isinstance(d, int) for d in template):
            shapes.append(reshaped(q, template, f"top '{name}'"))  # type: ignore[arg-type]
        else:
            missing.append((name, template))
    if missing:
        flags = " ".join(f"--input {name}={hint_value(_still_open(q, name, template))}" for name, template in missing)
        raise NeedsInput([name for name, _ in missing], f"{why}; pass {flags}" if why else f"pass {flags}")
    return LayerShapes(tops=tuple(shapes))


def given_shape(q: ShapeQuery, name: str, template: Template, loose: frozenset[int] = frozenset()) -> Shape | None:
    """The shape of top ``name`` from its ``--input`` value and what the file states.

    An axis given as ``_`` (:data:`FROM_FILE`) takes the file's value; a number fills an
    axis the file leaves open (a str in ``template``) and must equal a number it states,
    else the run stops naming both (an ``--override-input`` top takes the number given).
    A value one axis short on a layer whose batch is known is C,H,W (:func:`with_batch`).
    None: an axis given as ``_`` that the file leaves open too (the caller asks for it)."""
    given = with_batch(q.inputs[name], template)
    override = name in q.overrides
    stated_text, example = _dims(template), _dims(_underscored(template))
    by_source = f" (with its data source {q.record.source})" if q.record is not None else ""
    if "..." in template:  # the axes before "..." as stated, then as many open ones as given
        head = template[: template.index("...")]
        template = head + tuple(f"d{i}" for i in range(len(head), len(given)))
        example = _dims(_underscored(head) + given)  # the value given, read as the axes after them
    elif len(given) != len(template) and not override:
        if any(isinstance(d, int) for d in template):
            raise q.fail(
                f"--input {name}={_dims(q.inputs[name])} has {len(given)} axis(es), but the file states {len(template)} for '{name}' ({_dims(template)}); "
                f"give each axis, _ for one the file states, e.g. --input {name}={_dims(_underscored(template, given))}"
            )
        template = tuple(f"d{i}" for i in range(len(given)))  # the file states no axis of it: the value is whole
    shape: list[int] = []
    for axis, (value, stated) in enumerate(zip(given, template)):
        if value == FROM_FILE:
            if not any(isinstance(d, int) for d in template):
                raise q.fail(f"--input {name}={_dims(q.inputs[name])}: the file states no axis of '{name}' for _ to keep; give every axis as a number")
            if not isinstance(stated, int):
                return None
            shape.append(stated)
        elif isinstance(stated, int) and value != stated and not override and axis not in loose:
            hint = "--batch N changes the batch" if axis == 0 else f"--override-input {name}={_dims(q.inputs[name])} analyses it anyway"
            raise q.fail(
                f"--input {name}={_dims(q.inputs[name])} contradicts the file{by_source}: it states {stated_text} for '{name}' (axis {axis}: {stated}, not {value}); "
                f"give only what the file leaves open (_ keeps an axis as stated, e.g. --input {name}={example}), or {hint}"
            )
        else:
            shape.append(value)
    shape.extend(given[len(template) :])  # an override may add axes
    return reshaped(q, tuple(shape), f"top '{name}'")


def _underscored(template: Template, given: Shape = ()) -> Template:
    """The --input value that keeps every stated axis (``_``) and names the open ones, or
    puts the values ``given`` there when there are as many (``data=3`` → ``_,3,_,_``)."""
    open_axes = [i for i, d in enumerate(template) if not isinstance(d, int)]
    values = dict(zip(open_axes, given)) if len(given) == len(open_axes) else {}
    return tuple(values.get(i, "_" if isinstance(d, int) else d) for i, d in enumerate(template))


def _still_open(q: ShapeQuery, name: str, template: Template) -> Template:
    """The template of a missing top, with the axes its --input already gave filled in."""
    given = q.inputs.get(name)
    if given is None or len(given) != len(template) or "..." in template:
        return template
    return tuple(g if g != FROM_FILE and not isinstance(d, int) else d for g, d in zip(given, template))


def hint_value(template: Template) -> str:
    """The ``--input`` value a hint asks for, with a stated first axis written ``_``: a
    train_val file states one batch in TRAIN and another in TEST, and ``_`` keeps each
    (issue 34: the TEST net's ``data=50,C,224,224`` then contradicted TRAIN's 32)."""
    return _dims((FROM_FILE,) + template[1:] if template and isinstance(template[0], int) else template)


def _dims(shape: Sequence[object]) -> str:
    return ",".join("_" if d == FROM_FILE else str(d) for d in shape)


def positive_batch(q: ShapeQuery, batch_size: int, field: str) -> int:
    """Prefetching data layers CHECK a non-empty batch (CHECK_GT / CHECK(data_.count()))."""
    batch = int32(batch_size)
    q.check(batch > 0, f"{field} must be positive (got {batch})")
    return batch


def both_or_neither(q: ShapeQuery, height: int, width: int, what: str) -> None:
    """Image layers' CHECK: ``new_height``/``new_width`` (or crops) are set together."""
    h, w = int32(height), int32(width)
    q.check((h == 0 and w == 0) or (h > 0 and w > 0), f"{what}_height and {what}_width must be set at the same time")


def image_size(q: ShapeQuery, new_height: int, new_width: int, crop_size: int) -> tuple[Dim, Dim]:
    """Height, width of an image after ReadImageToCVMat's resize and InferBlobShape's crop.

    Unknown (``"H"``, ``"W"``) when neither a resize nor a crop fixes it: the image's own size.
    """
    new_h, new_w, crop = int32(new_height), int32(new_width), int32(crop_size)
    if crop:
        if new_h > 0 and new_w > 0:
            # InferBlobShape: CHECK_GE(img_height, crop_size), CHECK_GE(img_width, crop_size).
            q.check(new_h >= crop and new_w >= crop, f"crop_size {crop} exceeds the resized image {new_h}x{new_w}")
        return crop, crop
    if new_h > 0 and new_w > 0:
        return new_h, new_w
    return "H", "W"


def transformed_image(q: ShapeQuery) -> tuple[int, int, int] | None:
    """C, H, W of top 0 from the first record of the layer's source (None without one), as
    DataTransformer::InferBlobShape gives them (data_transformer.cpp): crop_size replaces
    H and W, CHECK_GT(channels, 0), CHECK_GE(height and width, crop_size).  Transform, run
    on the first batch, CHECKs the mean_file's blob equal to the image before the crop and
    the mean_values 1 or one per channel: a mismatch stops Caffe, so it stops here too."""
    record = q.record
    if record is None or record.image is None:
        return None
    channels, height, width = record.image
    crop = int32(q.proto.transform_param.crop_size)
    q.check(channels > 0, f"the first record of {record.source} has {channels} channels ({record.what}); Caffe stops: CHECK_GT(datum_channels, 0)")
    q.check(height >= crop and width >= crop, f"crop_size {crop} exceeds the first record of {record.source}, {height}x{width} ({record.what})")
    if record.mean is not None and record.mean != record.image:
        raise q.fail(
            f"transform_param.mean_file {q.proto.transform_param.mean_file} is {'x'.join(map(str, record.mean))}, but the images of {record.source} are "
            f"{channels}x{height}x{width} before the crop; Caffe stops at the first batch (data_transformer.cpp: CHECK_EQ of the image's channels, height, width "
            "and the mean's): make the mean from this data (compute_image_mean) or use mean_value"
        )
    mean_values_fit(q, channels)
    return channels, (crop or height), (crop or width)


def mean_values_fit(q: ShapeQuery, channels: int) -> None:
    """DataTransformer::Transform's (and WindowData's DataLayerSetUp's) CHECK: one
    mean_value, or one per channel of the images read."""
    values = len(q.proto.transform_param.mean_value)
    source = q.record.source if q.record is not None else "its source"
    q.check(values in (0, 1, channels), f"transform_param has {values} mean_value(s) for the {channels} channel(s) of {source}; Caffe stops: \"Specify either 1 mean_value or as many as channels\"")


def source_size(q: ShapeQuery, size: tuple[Dim, Dim]) -> tuple[Dim, Dim]:
    """Height, width the parameters leave open (``"H"``, ``"W"``) taken from the first image
    of the layer's source (``q.record``), where it was read."""
    if q.record is None or q.record.image is None or all(isinstance(d, int) for d in size):
        return size
    return q.record.image[1], q.record.image[2]


def follow_data(q: ShapeQuery, size: tuple[Dim, Dim]) -> tuple[Dim, Dim]:
    """Height, width of a label map read with the data image: taken from a --input data top."""
    given = q.inputs.get(q.layer.tops[0])
    if all(isinstance(d, int) for d in size) or given is None or len(given) not in (3, 4) or FROM_FILE in given[-2:]:
        return size
    return given[-2], given[-1]  # N,C,H,W or, with the batch left to the layer, C,H,W


def color_channels(is_color: bool) -> int:
    """Channels of an image decoded by OpenCV in colour or greyscale mode."""
    return COLOR_CHANNELS if is_color else GRAY_CHANNELS


# ---- memory ------------------------------------------------------------------------
# A data top's data is counted as the run's input (the memory pass fills it before
# Forward, as the ground truth's Input layers have it), also where the layer writes it
# itself (DummyData, HDF5Data: the same bytes, one step earlier).  What a data layer
# holds besides its tops goes into ``prefetch``: outside the measured heap; its tops'
# input then lives there, unless its Forward copies it into the tops (older forks).


def layer_note(q: MemoryQuery, what: str) -> str:
    """A note on bytes a layer's rule cannot know (or only bounds)."""
    return f"layer '{q.layer.name}' ({q.layer.type}): {what}"


def _input_memory(q: MemoryQuery) -> LayerMemory:
    """input_layer.cpp: LayerSetUp only reshapes the tops; Forward and Backward do nothing.
    The tops' data is the caller's to fill (the memory pass counts it as the input)."""
    return LayerMemory()


def prefetch_memory(q: MemoryQuery, batches: int, transformed: tuple[int, ...] = (0,), copies: bool = False) -> LayerMemory:
    """A prefetching data layer (base_data_layer.cpp): LayerSetUp writes each batch's
    ``data_`` (top 0's shape) and, with a second top, ``label_`` (top 1's shape), so the
    thread never allocates; the ``transformed_`` blob of each top in ``transformed`` (one
    item, [1, ...]) only gets a shape, as load_batch points it into the batch
    (set_cpu_data).  BVLC master's Forward points the tops at the current batch
    (set_cpu_data, no bytes: the tops' input is in the batch); older forks' Forward
    ``copies`` it into the tops' own data instead.  A mean_file's ``data_mean_``
    (DataTransformer) has the file's size, which caffemem cannot know: it is not counted."""
    prefetch: tuple[Action, ...] = ()
    for i in transformed:
        prefetch += buffer_setup(q.buffer(f"transformed_{('data', 'label')[i]}"), (1,) + q.tops[i][1:])
    for i in range(batches):
        for name, shape in zip(("data", "label"), q.tops):
            prefetch += buffer_setup(q.buffer(f"prefetch_{i}/{name}"), shape, filled=True)
    forward = tuple(write(q.top(i)) for i in range(len(q.tops))) if copies else ()
    notes = (layer_note(q, "its mean_file is loaded into a blob of the file's size, not counted"),) if q.proto.transform_param.mean_file else ()
    return LayerMemory(forward=forward, prefetch=prefetch, notes=notes)


def _prefetching(transformed: tuple[int, ...] = (0,)) -> MemoryRule:
    """BVLC master's BasePrefetchingDataLayer: data_param.prefetch batches (default 4, read
    even for ImageData/WindowData, whose own parameters have no such field).  WindowData
    never shapes ``transformed_data_``, and loads a mean_file a second time (its own
    ``data_mean_``, not counted either)."""
    return lambda q: prefetch_memory(q, q.proto.data_param.prefetch, transformed)


def _dummy_data_memory(q: MemoryQuery) -> LayerMemory:
    """dummy_data_layer.cpp: LayerSetUp runs Forward once with ``refill_`` inverted, so a top
    with a "constant" filler (the default with no filler) is written there and never again;
    the others are written by every Forward."""
    fillers = q.proto.dummy_data_param.data_filler
    constant = [(fillers[i if len(fillers) > 1 else 0].type if fillers else "constant") == "constant" for i in range(len(q.tops))]
    setup = tuple(write(q.top(i)) for i, once in enumerate(constant) if once)
    return LayerMemory(setup=setup, forward=tuple(write(q.top(i)) for i, once in enumerate(constant) if not once))


def _memory_data_memory(q: MemoryQuery) -> LayerMemory:
    """memory_data_layer.cpp: DataLayerSetUp reshapes ``added_data_`` [batch, C, H, W] and
    ``added_label_`` [batch] and reads both (allocating them: AddDatumVector/AddMatVector fill
    them).  Forward reshapes the label top to [batch, 1, 1, 1] (a 16-byte shape buffer
    replacing the 4-byte one) and points both tops at the memory given to Reset
    (set_cpu_data): the tops own no data, like a prefetching layer's."""
    added = buffer_setup(q.buffer("added_data"), q.tops[0]) + buffer_setup(q.buffer("added_label"), q.tops[1])
    added += (read(q.buffer("added_data")), read(q.buffer("added_label")))
    return LayerMemory(forward=(Reshape(q.top(1), q.tops[1][:1] + (1, 1, 1)),), prefetch=added)


def _hdf5_data_memory(q: MemoryQuery) -> LayerMemory:
    """hdf5_data_layer.cpp: no prefetch; Forward copies the batch's rows into the tops' own
    data.  LayerSetUp loads the whole first file into ``hdf_blobs_`` (one blob per top, each
    dataset's full size), which stays held: the datasets' sizes are in the file, unknown
    to caffemem, so they are not counted."""
    note = layer_note(q, "it holds the whole current HDF5 file (hdf_blobs_), not counted")
    return LayerMemory(forward=tuple(write(q.top(i)) for i in range(len(q.tops))), notes=(note,))


def _python_memory(q: MemoryQuery) -> LayerMemory:
    """python_layer.hpp: the Python code's reshape() shapes the tops and its forward() fills
    them (counted as the input, as for an Input layer); whatever else the code allocates is
    its own (numpy memory), unknown to caffemem."""
    known = known_note(q.proto.python_param)
    notes = (layer_note(q, known),) if known else ()
    return LayerMemory(verified=False, notes=notes + (layer_note(q, "what its Python code allocates is not counted"),))



# ---- where each layer's text states its batch (LayerSpec.batch_fields) ---------------


def batch_size_of(param: str):
    """The ``batch_size`` of one parameter message (Data, ImageData, WindowData, HDF5Data,
    MemoryData: the batch is that number, whatever the records hold)."""
    return lambda proto: ((param, "batch_size"),)


def _first_dims(param: str):
    """``shape { dim }`` once or once per top: each shape's first dim is its tops' batch."""
    return lambda proto: tuple((param, "shape", k, "dim", 0) for k in range(len(getattr(proto, param).shape)))


def _dummy_batch_fields(proto) -> tuple[tuple[str | int, ...], ...]:
    """DummyData: each ``shape``'s first dim, or the legacy ``num`` values."""
    param = proto.dummy_data_param
    if len(param.num):
        return tuple(("dummy_data_param", "num", k) for k in range(len(param.num)))
    return _first_dims("dummy_data_param")(proto)


@layer(
    "Input",
    "data",
    bottoms=NONE,
    tops=Arity(1),
    is_data=True,
    source="caffe master layers/input_layer.cpp",
    memory=_input_memory,
    gpu="none",
    batch_fields=_first_dims("input_param"),
)
def _input(q: ShapeQuery) -> LayerShapes:
    """input_param.shape: none (the caller reshapes the tops), one for all tops, or one per top."""
    shapes = q.proto.input_param.shape
    tops = len(q.layer.tops)
    q.check(
        len(shapes) in (0, 1, tops),
        f"must specify 'shape' once, once per top blob, or not at all: {tops} tops vs. {len(shapes)} shapes",
    )
    if not shapes:
        templates: list[Template] = [ANY_SHAPE] * tops
    else:
        templates = [tuple(int32(d) for d in shapes[0 if len(shapes) == 1 else i].dim) for i in range(tops)]
    # A 4-D shape sized 1x1 is a placeholder the program resizes (placeholder_notes): --input may size it.
    loose = [frozenset({2, 3}) if len(t) == 4 and t[2:] == (1, 1) else frozenset() for t in templates]
    return resolve_tops(q, templates, "an Input layer without input_param.shape is shaped by its caller", loose)


@layer(
    "DummyData",
    "data",
    bottoms=NONE,
    tops=Arity(1),
    is_data=True,
    source="caffe master layers/dummy_data_layer.cpp",
    memory=_dummy_data_memory,
    gpu="none",
    batch_fields=_dummy_batch_fields,
)
def _dummy_data(q: ShapeQuery) -> LayerShapes:
    """Shapes from dummy_data_param: ``shape`` (once or per top) or legacy num/channels/height/width."""
    param = q.proto.dummy_data_param
    tops = len(q.layer.tops)
    fillers = len(param.data_filler)
    q.check(
        fillers in (0, 1, tops),
        f"number of data fillers must be 0, 1 or equal to the number of tops: {tops}; you specified {fillers} data fillers",
    )
    legacy = {"num": param.num, "channels": param.channels, "height": param.height, "width": param.width}
    if any(len(values) for values in legacy.values()):
        q.check(len(param.shape) == 0, "both shape and legacy fields were specified")
        for field, values in legacy.items():
            q.check(
                len(values) in (1, tops),
                f"must specify '{field}' once, or once per top blob ({tops}); specified {len(values)}",
            )
        templates: list[Template] = [
            tuple(int32(values[0 if len(values) == 1 else i]) for values in legacy.values()) for i in range(tops)
        ]
    else:
        q.check(
            len(param.shape) in (1, tops),
            f"must specify 'shape' once, or once per top blob ({tops}); specified {len(param.shape)}",
        )
        templates = [tuple(int32(d) for d in param.shape[0 if len(param.shape) == 1 else i].dim) for i in range(tops)]
    return resolve_tops(q, templates, "")


@layer(
    "MemoryData",
    "data",
    bottoms=NONE,
    tops=Arity.exactly(2),
    is_data=True,
    source="caffe master layers/memory_data_layer.cpp",
    memory=_memory_data_memory,
    gpu="none",
    batch_fields=batch_size_of("memory_data_param"),
)
def _memory_data(q: ShapeQuery) -> LayerShapes:
    """data [batch, channels, height, width] and label [batch] from memory_data_param."""
    param = q.proto.memory_data_param
    batch, channels, height, width = (int32(v) for v in (param.batch_size, param.channels, param.height, param.width))
    q.check(
        int32(batch * channels * height * width) > 0,
        "batch_size, channels, height, and width must be specified and positive in memory_data_param",
    )
    return resolve_tops(q, [(batch, channels, height, width), (batch,)], "")


@layer(
    "Data",
    "data",
    bottoms=NONE,
    tops=Arity(1, 2),
    is_data=True,
    source="caffe master layers/data_layer.cpp, data_transformer.cpp",
    memory=_prefetching(),
    gpu="forward",
    batch_fields=batch_size_of("data_param"),
    source_kind="datum_db",
)
def _data(q: ShapeQuery) -> LayerShapes:
    """data [batch, C, H, W] with C, H, W from the first datum (crop_size fixes H, W); label [batch]."""
    batch = positive_batch(q, q.proto.data_param.batch_size, "data_param.batch_size")
    crop = int32(q.proto.transform_param.crop_size)
    image = transformed_image(q)
    size: tuple[Dim, Dim] = (crop, crop) if crop else ("H", "W")
    templates: list[Template] = [(batch,) + image if image else (batch, "C") + size, (batch,)]
    return resolve_tops(q, templates, "a Data layer's channels (and height, width without crop_size) are stored in its database")


@layer(
    "ImageData",
    "data",
    bottoms=NONE,
    tops=Arity.exactly(2),
    is_data=True,
    source="caffe master layers/image_data_layer.cpp, data_transformer.cpp",
    memory=_prefetching(),
    gpu="forward",
    batch_fields=batch_size_of("image_data_param"),
    source_kind="image_list",
)
def _image_data(q: ShapeQuery) -> LayerShapes:
    """data [batch, 3 or 1 (is_color), H, W]: H, W from new_height/new_width, crop_size or the first image; label [batch]."""
    param = q.proto.image_data_param
    both_or_neither(q, param.new_height, param.new_width, "new")
    size = image_size(q, param.new_height, param.new_width, q.proto.transform_param.crop_size)
    batch = positive_batch(q, param.batch_size, "image_data_param.batch_size")
    image = transformed_image(q)
    templates: list[Template] = [(batch,) + (image or (color_channels(param.is_color),) + size), (batch,)]
    return resolve_tops(q, templates, "without new_height/new_width or crop_size an ImageData layer takes the first image's size")


@layer(
    "WindowData",
    "data",
    bottoms=NONE,
    tops=Arity.exactly(2),
    is_data=True,
    source="caffe master layers/window_data_layer.cpp",
    memory=_prefetching(transformed=()),
    gpu="forward",
    batch_fields=batch_size_of("window_data_param"),
    source_kind="window_file",
)
def _window_data(q: ShapeQuery) -> LayerShapes:
    """data [batch, C, crop, crop] (windows are warped to transform_param.crop_size); label [batch].

    Caffe takes the channel count from the window file's image records (its first one is
    read, see passes/sources.py); without the file, R-CNN window files list colour
    images, so 3 is assumed (pass --input to override).  DataLayerSetUp CHECKs the
    mean_values against those channels.
    """
    crop = int32(q.proto.transform_param.crop_size)
    q.check(crop > 0, "WindowData needs transform_param.crop_size > 0")
    batch = int32(q.proto.window_data_param.batch_size)
    channels = COLOR_CHANNELS
    if q.record is not None and q.record.image is not None:
        channels = q.record.image[0]
        mean_values_fit(q, channels)
    return resolve_tops(q, [(batch, channels, crop, crop), (batch,)], "")


@layer(
    "HDF5Data",
    "data",
    bottoms=NONE,
    tops=Arity(1),
    is_data=True,
    source="caffe master layers/hdf5_data_layer.cpp",
    memory=_hdf5_data_memory,
    gpu="forward",
    batch_fields=batch_size_of("hdf5_data_param"),
    source_kind="hdf5_list",
)
def _hdf5_data(q: ShapeQuery) -> LayerShapes:
    """Each top is [batch_size, dims of the HDF5 dataset of that name...] (the first file's,
    when its list exists): LoadHDF5FileData CHECKs at least 1 axis and the same rows in
    every top's dataset."""
    q.check(not q.proto.HasField("transform_param"), "HDF5Data does not transform data (remove transform_param)")
    batch = int32(q.proto.hdf5_data_param.batch_size)
    templates: list[Template] = [(batch, "...")] * len(q.layer.tops)
    record = q.record
    if record is not None and record.datasets is not None:
        shapes = [record.datasets[top] for top in q.layer.tops]
        where = f"in the first file {record.source} lists"
        q.check(all(len(shape) >= 1 for shape in shapes), f"a dataset {where} is a scalar; HDF5Data needs at least 1 axis (\"Input must have at least 1 axis\")")
        rows = {top: shape[0] for top, shape in zip(q.layer.tops, shapes)}
        q.check(len(set(rows.values())) == 1, f"the datasets {where} have different row counts ({', '.join(f'{t} {n}' for t, n in rows.items())}); Caffe stops: HDF5 data blobs must have the same number of rows")
        templates = [(batch,) + shape[1:] for shape in shapes]
    return resolve_tops(q, templates, "an HDF5Data layer's trailing dimensions are those of the datasets in its files")


# python_layer.hpp: Forward calls the user's Python ``forward``, code caffemem cannot read
# (it may draw random numbers, count, or read a file); only a data layer in caffemem's view.
_PYTHON_RECOMPUTE = never("a Python layer: its Forward is user code, which may draw random numbers or keep state")


@layer(
    "Python",
    "data",
    bottoms=Arity(0),
    tops=Arity(0),
    is_data=True,
    opaque_tops=True,
    source="caffe master layers/python_layer.hpp",
    memory=_python_memory,
    gpu="none",
    fixed_tops=lambda proto: fixed_tops(proto.python_param),
    recompute=_PYTHON_RECOMPUTE,
)
def _python(q: ShapeQuery) -> LayerShapes:
    """A Python layer shapes its tops in Python code (its reshape()), which caffemem does not run."""
    known = known_shapes(q)  # py-faster-rcnn's layers and their like (pylayers.py)
    if known is not None:
        return known
    param = q.proto.python_param
    where = f" ({param.module}.{param.layer})" if param.module or param.layer else ""
    return resolve_tops(q, [ANY_SHAPE] * len(q.layer.tops), f"a Python layer{where} computes its top shapes in Python code")


"""What a plan was made for, carried with it: phase, inputs, batch, dtype, device, engine
and a fingerprint of the net, so that `caffemem verify OUT.prototxt` needs no flags.

Entry points: :class:`MadeFor`, :func:`comment_lines` (written into the mem_param block)
and :func:`read_records` (read back from a file's text).

Where it is stored: as one comment line per phase inside our own `mem_param` block,

    mem_param {
      # caffemem made-for TRAIN: {"batch": 16, "device": "gpu", ...}
      optimize_train: true
      ...

and not as fields of the message.  Caffe reads a prototxt with protobuf's TextFormat,
which skips comments, so the patched Caffe (whose MemorySlot messages the runtime patch
ships, caffemem/runtime/cpp/*/edits.txt) and the memory-multiloading fork (whose
MemoryOptimizationParameter has only fields 1-3) read the file exactly as before: no
field added to the proto, so no rebuild of anyone's Caffe and no patch version to bump.
The price: a tool that re-serialises the message (Caffe's upgrade_net_proto_text) drops
the comments; `verify` then checks the table at the flags it is given and says so.  The
plan JSON (``optimize --plan-json``) carries the same record as ``made_for``.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass

from caffemem.errors import CaffememError, Location, excerpt
from caffemem.layers.blob import FROM_FILE, INT_MAX
from caffemem.prototxt.textmap import top_level_blocks
from caffemem.schema import caffe_pb2

TAG = "caffemem made-for"
_LINE = re.compile(r"#\s*" + re.escape(TAG) + r" (TRAIN|TEST): (\{[^\n\r]*\})")


@dataclass(frozen=True)
class MadeFor:
    """The run one phase's table was planned for (the flags of `optimize`, resolved)."""

    phase: str
    batch: int | None  # the first data top's batch as planned (for people; None: no data top)
    rescale: int | None  # the --batch applied on top of the file (None: the file's own batch)
    inputs: dict[str, tuple[int, ...]]  # the --input shapes the phase was built with
    stages: tuple[str, ...]
    level: int | None
    dtype: str
    device: str
    engine: str | None  # as given; None: the device's default (cuDNN on a GPU)
    net: str  # fingerprint() of the net the table was written into

    def to_json(self) -> dict:
        return {
            "phase": self.phase,
            "batch": self.batch,
            "rescale": self.rescale,
            "inputs": {name: list(shape) for name, shape in self.inputs.items()},
            "stages": list(self.stages),
            "level": self.level,
            "dtype": self.dtype,
            "device": self.device,
            "engine": self.engine,
            "net": self.net,
        }

    @classmethod
    def from_json(cls, value: object, where: Location) -> "MadeFor":
        try:
            if not isinstance(value, dict):
                raise TypeError("not an object")
            # FROM_FILE (-1): an axis given as `_`, the file's own value (issue 34: refused before)
            inputs = {str(name): tuple(_whole(d, low=FROM_FILE) for d in shape) for name, shape in value.get("inputs", {}).items()}
            level = value.get("level")
            batch, rescale = value.get("batch"), value.get("rescale")
            return cls(
                phase=_choice(value["phase"], ("TRAIN", "TEST")),
                batch=None if batch is None else _whole(batch),
                rescale=None if rescale is None else _whole(rescale, low=1),
                inputs=inputs,
                stages=tuple(str(s) for s in value.get("stages", ())),
                level=None if level is None else _whole(level, low=-INT_MAX - 1),
                dtype=_choice(value["dtype"], ("float32", "float16", "float64")),
                device=_choice(value["device"], ("gpu", "cpu")),
                engine=None if value.get("engine") is None else _choice(value["engine"], ("caffe", "cudnn")),
                net=str(value["net"]),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as error:
            detail = f"no key {error}" if isinstance(error, KeyError) else str(error)
            raise CaffememError(f"the plan's '{TAG}' record is damaged ({excerpt(detail, 120)}): rerun `caffemem optimize`, or pass the flags it was made with", where) from None

    def describe(self) -> str:
        """One line for people: what the table was planned for."""
        inputs = " ".join(f"{name}={','.join('_' if d == FROM_FILE else str(d) for d in shape)}" for name, shape in self.inputs.items())
        engine = self.engine or ("cudnn" if self.device == "gpu" else "caffe")
        batch = f"batch {self.batch}" if self.batch is not None else "the file's shapes"
        parts = [batch + (f" (--batch {self.rescale})" if self.rescale is not None else ""), inputs and f"--input {inputs}", self.dtype, f"{self.device} mode", f"{engine} engine"]
        parts += [f"stage {','.join(self.stages)}"] if self.stages else []
        parts += [f"level {self.level}"] if self.level is not None else []
        return ", ".join(part for part in parts if part)


def _whole(value: object, low: int = 0, high: int = INT_MAX) -> int:
    """A whole number in [low, high]: every figure of the record is one of Caffe's int32
    (issue 31: a level of 2**31 passed here and failed later as a bug, exit 3)."""
    if type(value) is not int or not low <= value <= high:
        raise ValueError(f"expected a whole number from {low} to {high}, not {excerpt(json.dumps(value), 40)}")
    return value


def _choice(value: object, allowed: tuple[str, ...]) -> str:
    if value not in allowed:
        raise ValueError(f"expected one of {', '.join(allowed)}, not {excerpt(json.dumps(value), 40)}")
    return value  # type: ignore[return-value]


def fingerprint(net: caffe_pb2.NetParameter) -> str:
    """The net's fingerprint: a hash of the message as parsed, without its mem_param (so
    comments, spacing and line endings do not count; any field's value does)."""
    copy = caffe_pb2.NetParameter()
    copy.CopyFrom(net)
    copy.ClearField("mem_param")
    return "sha256:" + hashlib.sha256(copy.SerializeToString(deterministic=True)).hexdigest()[:16]


def comment_lines(records: list[MadeFor]) -> list[str]:
    """The comment lines for the mem_param block, one per phase, ASCII only."""
    return [f"# {TAG} {record.phase}: {json.dumps(record.to_json(), sort_keys=True)}" for record in records]


def read_records(text: str, file: str | None = None) -> dict[str, MadeFor]:
    """Phase -> record, from the comments of the file's top-level mem_param block(s): one
    record a phase, each naming the phase of its line (:func:`for_table`)."""
    found: dict[str, MadeFor] = {}
    for block in top_level_blocks(text):
        if block.field != "mem_param":
            continue
        for match in _LINE.finditer(text, block.start, block.end):
            where = Location(file=file, line=text.count("\n", 0, match.start()) + 1)
            phase = match.group(1)
            if phase in found:
                raise CaffememError(f"the file gives a '{TAG} {phase}' record twice: rerun `caffemem optimize`", where)
            try:
                value = json.loads(match.group(2))
            except ValueError:
                value = None
            found[phase] = for_table(MadeFor.from_json(value, where), phase, f"the '{TAG} {phase}' record", where)
    return found


def for_table(record: MadeFor, phase: str, what: str, where: Location) -> MadeFor:
    """``record``, refused unless it names ``phase``, the phase of the table it stands for.
    A table is checked for the phase its own entries name (a slot's ``phase``, a plan
    entry's ``phase``: what the patched Caffe binds it by, mem_slots.cpp); a record that
    says otherwise was edited, and trusting it would check the table against another run
    (a TRAIN table that is unsafe in Backward passes as TEST's, issue 31)."""
    if record.phase != phase:
        raise CaffememError(
            f"{what} says phase {record.phase}, but it stands for the {phase} table: a table is checked for the phase its own entries name; rerun `caffemem optimize`",
            where,
        )
    return record

"""Custom layer types declared in a small TOML file (`--layers FILE`), no Python needed.

A fork's layer that caffemem does not know can be described by its shape rule::

    [layer.MyUpsample]                      # the Caffe type string
    bottoms = 1                             # a count, or [min, max]
    tops = 1
    top = ["like bottom 0 with axis 2 = b0[2] * 2, axis 3 = b0[3] * 2"]
    params = ["b0[1], 1, 3, 3"]             # optional: parameter blob shapes
    data = false                            # true: tops come from outside (--input)
    loss = false                            # true: a LossLayer (top 0 the scalar loss, weight 1)

A shape is ``like bottom K`` (optionally ``with axis A = EXPR, ...``), ``scalar``, or a
comma-separated list of expressions.  An expression uses whole numbers, ``+ - * // %``,
``min``/``max``, ``bK[A]`` (axis A of bottom K, negative counts from the end),
``bK.count`` and ``bK.axes``, and fields of the layer's own parameters such as
``convolution_param.num_output`` (first value of a repeated field, or ``…[i]``).
"""

from __future__ import annotations

import ast
import operator
import re
from dataclasses import dataclass, field
from typing import Any

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the same parser, from PyPI (a dependency there)
    import tomli as tomllib  # type: ignore[no-redef]

from caffemem.errors import CaffememError, Location, NeedsInput, excerpt, one_line
from caffemem.graph import LayerShapes, Shape
from caffemem.layers.registry import Arity, LayerSpec, ShapeQuery
from caffemem.prototxt.read import read_input

_LIKE = re.compile(r"^\s*like\s+bottom\s+(\d+)\s*(?:with\s+(.*))?$", re.IGNORECASE | re.ASCII)
_AXIS = re.compile(r"^\s*axis\s+(-?\d+)\s*=\s*(.+)$", re.IGNORECASE | re.ASCII)
_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod}
_FUNCTIONS = {"min": min, "max": max}
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


@dataclass(frozen=True)
class ShapeTemplate:
    """One declared shape, kept as text and checked for syntax when the file is read.
    ``schema``: the fork's merged schema (--caffe-root), whose fields expressions may read."""

    text: str
    schema: Any = field(default=None, compare=False)

    def evaluate(self, query: ShapeQuery) -> Shape:
        like = _LIKE.match(self.text)
        if like:
            base = list(_bottom(query, int(like.group(1))))
            for clause in _split_top_level(like.group(2) or ""):
                axis_match = _AXIS.match(clause)
                if not axis_match:
                    raise query.fail(f"declared shape '{excerpt(self.text)}': expected 'axis A = EXPR', got '{excerpt(clause)}'")
                axis = int(axis_match.group(1))
                if not -len(base) <= axis < len(base):
                    raise query.fail(f"declared shape '{excerpt(self.text)}': axis {axis} is outside bottom {like.group(1)} of {len(base)} axes")
                base[axis] = _evaluate(axis_match.group(2), query, self.text, self.schema)
            return tuple(base)
        if self.text.strip().lower() == "scalar":
            return ()
        text = self.text.strip()
        if text.startswith("[") and text.endswith("]"):
            text = text[1:-1]  # an optional list bracket around the whole shape
        return tuple(_evaluate(part, query, self.text, self.schema) for part in _split_top_level(text))


def _split_top_level(text: str) -> list[str]:
    """Split on commas that are not inside brackets or parentheses."""
    parts, depth, current = [], 0, ""
    for ch in text:
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += ch
    if current.strip():
        parts.append(current)
    return [p for p in (p.strip() for p in parts) if p]


def _bottom(query: ShapeQuery, index: int) -> Shape:
    if index >= len(query.bottoms):
        raise query.fail(f"declared shape refers to bottom {index}, but the layer has {len(query.bottoms)} bottoms")
    return query.bottoms[index]


def _evaluate(expression: str, query: ShapeQuery, context: str, schema: Any = None) -> int:
    try:
        tree = ast.parse(expression.strip(), mode="eval")
        return _Evaluator(query, context, schema).visit(tree.body)
    except (SyntaxError, ValueError):
        raise query.fail(f"declared shape '{excerpt(context)}': cannot read expression '{excerpt(expression.strip())}'") from None
    except (RecursionError, MemoryError):  # Python's parser gives up on deep nesting with either
        raise query.fail(f"declared shape '{excerpt(context)}': expression nests too deeply") from None


class _Evaluator(ast.NodeVisitor):
    """Evaluates the small, safe expression language (nothing else is reachable)."""

    def __init__(self, query: ShapeQuery, context: str, schema: Any = None) -> None:
        self.query, self.context, self.schema = query, context, schema

    def fail(self, what: str) -> CaffememError:
        return self.query.fail(f"declared shape '{excerpt(self.context)}': {what}")

    def generic_visit(self, node: ast.AST):
        raise self.fail(f"'{excerpt(ast.unparse(node))}' is not allowed in a shape expression")

    def visit(self, node: ast.AST) -> int:
        """Every value stays within C++'s int64, as the layer's own code would compute it."""
        value = super().visit(node)
        if not INT64_MIN <= value <= INT64_MAX:
            raise self.fail(f"'{excerpt(ast.unparse(node))}' is outside the 64-bit integer range")
        return value

    def visit_Constant(self, node: ast.Constant) -> int:
        if isinstance(node.value, bool) or not isinstance(node.value, int):
            raise self.fail(f"'{node.value!r}' is not a whole number")
        return node.value

    def visit_UnaryOp(self, node: ast.UnaryOp) -> int:
        if isinstance(node.op, ast.USub):
            return -self.visit(node.operand)
        return self.generic_visit(node)

    def visit_BinOp(self, node: ast.BinOp) -> int:
        op = _BINARY.get(type(node.op))
        if op is None:
            return self.generic_visit(node)
        left, right = self.visit(node.left), self.visit(node.right)
        if op in (operator.floordiv, operator.mod) and right == 0:
            raise self.fail("division by zero")
        return op(left, right)

    def visit_Call(self, node: ast.Call) -> int:
        if isinstance(node.func, ast.Name) and node.func.id in _FUNCTIONS and node.args and not node.keywords:
            return _FUNCTIONS[node.func.id](self.visit(arg) for arg in node.args)
        return self.generic_visit(node)

    def visit_Subscript(self, node: ast.Subscript) -> int:
        index = self.visit(node.slice)
        if isinstance(node.value, ast.Name) and re.fullmatch(r"b[0-9]+", node.value.id):
            shape = _bottom(self.query, int(node.value.id[1:]))
            if not -len(shape) <= index < len(shape):
                raise self.fail(f"axis {index} is outside {node.value.id} of {len(shape)} axes")
            return shape[index]
        values = self._field(node.value)
        if not hasattr(values, "__len__") or not -len(values) <= index < len(values):
            raise self.fail(f"'{excerpt(ast.unparse(node))}' has no value at index {index}")
        return int(values[index])

    def visit_Attribute(self, node: ast.Attribute) -> int:
        if isinstance(node.value, ast.Name) and re.fullmatch(r"b[0-9]+", node.value.id) and node.attr in ("count", "axes"):
            shape = _bottom(self.query, int(node.value.id[1:]))
            if node.attr == "axes":
                return len(shape)
            total = 1
            for d in shape:
                total *= d
            return total
        value = self._field(node)
        if hasattr(value, "__len__") and not isinstance(value, str):
            if not len(value):
                raise self.fail(f"'{excerpt(ast.unparse(node))}' is empty in this layer")
            value = value[0]
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.fail(f"'{excerpt(ast.unparse(node))}' is not a number")
        return int(value)

    def _field(self, node: ast.AST):
        """A field of the layer's proto, by dotted path (message.field).  A field caffemem's
        schema lacks is read with the fork's (--caffe-root), where the passes keep it as an
        unknown field."""
        path: list[str] = []
        while isinstance(node, ast.Attribute):
            path.append(node.attr)
            node = node.value
        if not isinstance(node, ast.Name):
            raise self.fail(f"'{excerpt(ast.unparse(node))}' is not a field of the layer")
        path.append(node.id)
        value = self.query.proto
        for name in reversed(path):
            descriptor = getattr(value, "DESCRIPTOR", None)
            if descriptor is not None and name not in descriptor.fields_by_name and self.schema is not None:
                value = self.schema.view(value) or value
                descriptor = value.DESCRIPTOR
            if descriptor is None or name not in descriptor.fields_by_name:
                where = f"neither caffemem's schema nor {self.schema.file} has it" if self.schema else "a fork's field? --caffe-root DIR reads the fork's caffe.proto"
                raise self.fail(f"the layer has no field '{'.'.join(reversed(path))}' ({where})")
            value = getattr(value, name)
        return value


def _arity(value, what: str, where: Location) -> Arity:
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return Arity.exactly(value)
    if isinstance(value, list) and len(value) == 2 and all(isinstance(v, int) and v >= 0 for v in value) and value[0] <= value[1]:
        return Arity(value[0], value[1])
    raise CaffememError(f"'{what}' must be a count or [min, max], got {value!r}", where)


def _shapes(value, what: str, where: Location, schema: Any = None) -> tuple[ShapeTemplate, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise CaffememError(f"'{what}' must be a list of shape strings", where)
    return tuple(ShapeTemplate(v, schema) for v in value)


def _spec(type_name: str, table: dict, file: str, schema: Any = None) -> LayerSpec:
    where = Location(file=file, layer_type=type_name)
    known = {"bottoms", "tops", "top", "params", "data", "loss"}
    extra = set(table) - known
    if extra:
        raise CaffememError(f"[layer.{type_name}]: unknown key(s) {', '.join(sorted(extra))} (known: {', '.join(sorted(known))})", where)
    is_data = bool(table.get("data", False))
    is_loss = bool(table.get("loss", False))  # Caffe's LossLayer: AutoTopBlobs, loss_weight 1 on top 0 unless set
    tops = _shapes(table.get("top", ["scalar"] if is_loss else None), "top", where, schema)
    params = _shapes(table.get("params"), "params", where, schema)
    bottoms = _arity(table.get("bottoms", 0 if is_data else 1), "bottoms", where)
    top_count = _arity(table.get("tops", len(tops) or 1), "tops", where)
    if not is_data and not tops:
        raise CaffememError(f"[layer.{type_name}]: 'top' must give each top's shape (or set data = true)", where)

    def rule(query: ShapeQuery) -> LayerShapes:
        if is_data:
            missing = [t for t in query.layer.tops if t not in query.inputs]
            if missing and not tops:
                raise NeedsInput(missing, f"{type_name} is declared as a data layer")
            if not missing:
                return LayerShapes(tuple(query.inputs[t] for t in query.layer.tops), tuple(p.evaluate(query) for p in params))
        if len(tops) < len(query.layer.tops):
            raise query.fail(f"the declaration of {type_name} gives {len(tops)} top shape(s) for {len(query.layer.tops)} tops")
        return LayerShapes(tuple(t.evaluate(query) for t in tops[: len(query.layer.tops)]), tuple(p.evaluate(query) for p in params))

    return LayerSpec(type=type_name, shape=rule, family="declared", bottoms=bottoms, tops=top_count, auto_top=is_loss, is_data=is_data, opaque_tops=True, source=file)


def load_declarations(file: str, schema: Any = None) -> dict[str, LayerSpec]:
    """Read a --layers file into specs (errors name the file and the declaration).
    ``schema``: a fork's merged schema (--caffe-root), whose fields the rules may read."""
    try:
        document = tomllib.loads(read_input(file, what="--layers file").decode("utf-8"))
    except CaffememError as error:
        raise CaffememError(error.message.replace("file not found", "--layers file not found"), error.where) from None
    except UnicodeDecodeError:
        raise CaffememError("not valid TOML: the file is not UTF-8 text", Location(file=file)) from None
    except tomllib.TOMLDecodeError as error:
        line = re.search(r"line (\d+)", str(error))
        raise CaffememError(f"not valid TOML: {error}", Location(file=file, line=int(line.group(1)) if line else None)) from None
    layers = document.get("layer")
    if not isinstance(layers, dict) or not layers or set(document) - {"layer"}:
        raise CaffememError("expected one or more [layer.TYPE] tables and nothing else", Location(file=file))
    return {name: _spec(name, table if isinstance(table, dict) else {}, file, schema) for name, table in layers.items()}


# Fields of every layer (LayerParameter's own bookkeeping), never a layer's parameters.
_GENERIC_FIELDS = frozenset(("param", "include", "exclude", "blobs"))


def _snake(name: str) -> str:
    """``MyUpsample`` -> ``my_upsample``: the name Caffe's convention gives the parameters
    of a layer type (``InnerProduct`` -> ``inner_product_param``)."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", name).lower()


def layer_skeleton(type_name: str, layers: list, root: Any) -> str:
    """A ready ``[layer.TYPE]`` declaration for a type the fork registers and caffemem has
    no rule for: the bottoms and tops its layers in this net have, and, as comments, the
    fields of its parameters in the fork's caffe.proto (name, type, default, line, and
    the value this net gives), which the shape expressions may read.  ``layers``: the
    net's layers of that type (graph ``Layer``s); ``root``: the CaffeRoot."""
    schema = root.schema
    found = root.registered[type_name]
    bottoms = sorted({len(layer.bottoms) for layer in layers})
    tops = sorted({len(layer.tops) for layer in layers})
    views = [schema.view(layer.proto) or layer.proto for layer in layers]
    params: list[str] = []
    conventional = f"{_snake(type_name)}_param"
    if conventional in views[0].DESCRIPTOR.fields_by_name:
        params.append(conventional)
    for view in views:
        for described, _value in view.ListFields():
            if described.message_type is not None and described.name not in _GENERIC_FIELDS and described.name not in params:
                params.append(described.name)
    lines = [
        f"# {type_name}: registered by the fork in {root.relative(found.file)}:{found.line}; caffemem has no shape rule for it.",
        "# Write each top's shape as the layer's Reshape computes it (docs/forks.md), then pass this file with --layers.",
    ]
    for name in params:
        message = views[0].DESCRIPTOR.fields_by_name[name].message_type
        lines.append(f"# {name} ({message.name}), fields the expressions may read:")
        given = getattr(views[0], name)
        for info in schema.fields_of(message.full_name):
            default = f" = {info.default}" if info.default is not None else ""
            where = f", caffe.proto:{info.line}" if info.line else ""
            value = _given(given, info.name)
            lines.append(f"#   {name}.{info.name}: {info.type}{default}{where}{value}")
    lines.append(f"[layer.{type_name}]")
    lines.append(f"bottoms = {bottoms[0] if len(bottoms) == 1 else [bottoms[0], bottoms[-1]]}")
    lines.append(f"tops = {tops[0] if len(tops) == 1 else [tops[0], tops[-1]]}")
    if bottoms[-1] == 0:
        lines.append("data = true  # its tops' shapes come from --input NAME=d0,d1,...")
    elif type_name.endswith("Loss") or any(len(layer.proto.loss_weight) for layer in layers):
        # Caffe's LossLayer::Reshape gives top 0 no axes (the loss); any other top is the layer's own.
        lines.append("loss = true  # a LossLayer: its top 0 is the loss, a scalar, weighted 1 unless loss_weight says otherwise")
        others = ", ".join('"like bottom 0"' for _ in range(tops[-1] - 1))
        lines.append(f'top = ["scalar"{", " + others if others else ""}]' + ("  # after the loss, placeholders: replace with each top's real shape" if others else ""))
    else:
        lines.append("top = [" + ", ".join('"like bottom 0"' for _ in range(tops[-1])) + "]  # a placeholder: replace with each top's real shape")
    return "".join(one_line(line) + "\n" for line in lines)  # a newline in a path of the tree cannot end a comment


def _given(message: Any, name: str) -> str:
    """``; this net: 4`` when the (first) layer sets the field, else nothing."""
    described = message.DESCRIPTOR.fields_by_name[name]
    if described.message_type is not None:
        return ""
    value = getattr(message, name)
    if hasattr(value, "__len__") and not isinstance(value, str):
        return f"; this net: {list(value)}" if len(value) else ""
    if not message.HasField(name):
        return ""
    if described.enum_type is not None:
        return f"; this net: {described.enum_type.values_by_number[value].name}"
    return f"; this net: {value!r}" if isinstance(value, str) else f"; this net: {str(value).lower() if isinstance(value, bool) else value}"

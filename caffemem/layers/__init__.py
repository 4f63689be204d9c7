"""Layer specs, one module per family; see :mod:`caffemem.layers.registry`."""

from .registry import Arity, LayerSpec, NeedsInput, ShapeQuery, SpecTable, builtin_specs, layer, register

__all__ = ["Arity", "LayerSpec", "NeedsInput", "ShapeQuery", "SpecTable", "builtin_specs", "layer", "register"]

"""Layer specs: the registry and one module per family.

Every family is listed here once.  Importing a family module registers its specs (one
``@layer`` per Caffe type, like Caffe's ``REGISTER_LAYER_CLASS``); any import of
``caffemem.layers.<module>`` runs this file first, so the registry is complete before
anyone asks it.  A new layer type goes into its family's module; a new family module is
added to ``FAMILIES``.
"""

from caffemem.errors import NeedsInput
from caffemem.layers import (
    common,
    data,
    faces,
    fork_misc,
    fork_segdet,
    fork_v2v,
    fork_vision,
    forks,
    loss,
    mobile,
    neuron,
    recurrent,
    vision,
)
from caffemem.layers.registry import (
    Arity,
    LayerSpec,
    ShapeQuery,
    SpecTable,
    builtin_specs,
    layer,
    register,
)

FAMILIES = (common, data, faces, fork_misc, fork_segdet, fork_v2v, fork_vision, forks, loss, mobile, neuron, recurrent, vision)

__all__ = ["FAMILIES", "Arity", "LayerSpec", "NeedsInput", "ShapeQuery", "SpecTable", "builtin_specs", "layer", "register"]

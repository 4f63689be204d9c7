"""Imports every family module so each registers its specs (one module per family)."""

from . import common, data, fork_vision, forks, loss, neuron, recurrent, vision  # noqa: F401

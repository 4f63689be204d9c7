"""The configurations each net is measured in: which build runs it, and the plan it runs."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Config:
    """One measured configuration: which build runs the nets, and the `caffemem optimize`
    options their plan is made with (None: the net as it is, stock Caffe). `name` is its
    folder in the output."""

    name: str
    variant: str
    plan: tuple[str, ...] | None
    phases: tuple[str, ...] = ("TRAIN", "TEST")  # the phases it runs (recompute: only where Backward runs)


#: Stock Caffe; the patched Caffe with the blob plan; the same with --share-buffers; stock
#: Caffe again (its digests tell a plan's difference from cuDNN's own run-to-run one); the
#: patched Caffe running `optimize --recompute sqrt`'s plan (runtime patch v4), TRAIN only.
CONFIGS = (
    Config("stock", "stock", None),
    Config("patched", "patched", ()),
    Config("patched-buffers", "patched", ("--share-buffers",)),
    Config("stock-again", "stock", None),
    Config("patched-recompute", "patched", ("--recompute", "sqrt"), ("TRAIN",)),
)


def configs_of(variant: str) -> tuple[Config, ...]:
    """--variant stock|patched|both -> the configurations measured."""
    return tuple(c for c in CONFIGS if variant in ("both", c.variant))

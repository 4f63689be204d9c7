"""`import caffemem` is the library: the README's notebook example runs as written."""

from __future__ import annotations

from conftest import FIXTURES

import caffemem

LENET = str(FIXTURES / "examples" / "lenet_train.prototxt")


def test_the_package_exports_its_api():
    assert {"analyze", "optimize", "verify", "fit", "load", "Options", "OptimizeSettings", "CaffememError", "__version__"} <= set(caffemem.__all__)
    assert all(hasattr(caffemem, name) for name in caffemem.__all__)


def test_analyze_with_inputs_as_in_the_readme():
    analysis = caffemem.analyze(LENET, caffemem.Options(phase="TRAIN", inputs={"data": (32, 1, 28, 28), "label": (32,)}))
    assert analysis.nets[0].shaped.blob_shapes["data"] == (32, 1, 28, 28)
    assert analysis.nets[0].memory.total_bytes > 0


def test_optimize_with_shared_buffers_saves_in_every_phase():
    result = caffemem.optimize(LENET, caffemem.Options(), caffemem.OptimizeSettings(share_buffers=True))
    assert [p.phase for p in result.phases] == ["TRAIN", "TEST"]
    assert all(p.savings > 0 for p in result.phases)

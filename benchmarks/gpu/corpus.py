"""The nets the kit measures, laid out as one folder: the BVLC files of ../shared/groundtruth
with the prototxts they name, and the kit's own nets (issue 32), which have no CPU ground
truth there: each gets a ground-truth file of the same form with no CPU figures (its runs:
the phases, and `inputs` empty, since each net has its own Input layers), named
`kit__<name>.json`, its prototxt under `kit/`, made here from the checkout (fixtures/) or
copied from ../shared/models."""

from __future__ import annotations

import importlib.util
import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from gpu.paths import GROUNDTRUTH, REPO, SHARED

FIXTURES = REPO / "fixtures"
GENERATE = FIXTURES / "generate.py"


def _generator(name: str, *args: int) -> Callable[[], str]:
    """fixtures/generate.py's GENERATORS[name](*args), loaded from its file (fixtures/ is no
    package)."""

    def make() -> str:
        spec = importlib.util.spec_from_file_location("caffemem_fixtures_generate", GENERATE)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module.GENERATORS[name](*args)

    return make


def _file(path: Path) -> Callable[[], str]:
    return path.read_text


@dataclass(frozen=True)
class KitNet:
    """One of the kit's own nets: `name` (its files are kit__NAME.json and kit/NAME.prototxt),
    the phases it runs, how its prototxt is made, and the files that text comes from."""

    name: str
    phases: tuple[str, ...]
    text: Callable[[], str]
    inputs: tuple[Path, ...]  # what `text` reads: part of the bundle's key

    @property
    def groundtruth(self) -> Path:
        return Path("groundtruth") / f"kit__{self.name}.json"

    @property
    def source(self) -> Path:
        return Path("kit") / f"{self.name}.prototxt"

    def document(self) -> dict:
        """Its ground-truth file: the form of ../shared/groundtruth's, no CPU figures."""
        return {"source": str(self.source), "caffe": "bvlc", "kit": True, "runs": [{"phase": p, "ok": True, "inputs": {}, "layers": []} for p in self.phases]}


SIAMESE = FIXTURES / "siamese" / "mnist_siamese_train_test.prototxt"
DENSENET = SHARED / "models" / "densenet" / "DenseNet_121.prototxt"

#: The kit's own nets (issue 32): the siamese example (Slice, shared InnerProducts,
#: ContrastiveLoss); a ResNet-50 with BatchNorm in TRAIN (use_global_stats false, batch 32, as issue 33 timed it:
#: the recompute plan restores its running averages); a depthwise convolution on cuDNN (388
#: handles); DenseNet-121 (shicai/DenseNet-Caffe, deploy) and ResNet-152 (generated, batch 1).
KIT_NETS = (
    KitNet("siamese", ("TRAIN", "TEST"), _file(SIAMESE), (SIAMESE,)),
    KitNet("resnet50_bn_train", ("TRAIN",), _generator("resnet", 50, 32), (GENERATE,)),
    KitNet("depthwise", ("TEST",), _generator("depthwise", 128), (GENERATE,)),
    KitNet("densenet121", ("TEST",), _file(DENSENET), (DENSENET,)),
    KitNet("resnet152", ("TEST",), _generator("resnet", 152), (GENERATE,)),
)


def shared_files() -> list[Path]:
    """The ground-truth files `run` reads (the BVLC ones) and the prototxts they name,
    relative to ../shared."""
    files = [Path("groundtruth") / "README.md"] if (GROUNDTRUTH / "README.md").is_file() else []
    for gt_file in sorted(GROUNDTRUTH.glob("*.json")):
        gt = json.loads(gt_file.read_text())
        if gt.get("caffe") == "bvlc":
            files += [gt_file.relative_to(SHARED), Path(gt["source"])]
    return files


def corpus_files() -> list[Path]:
    """Every file of the staged corpus, relative to its folder: ../shared's, then the kit's own."""
    return shared_files() + [f for net in KIT_NETS for f in (net.groundtruth, net.source)]


def key_inputs() -> list[Path | str]:
    """What the staged corpus is made from (the bundle's key)."""
    return [*(SHARED / f for f in shared_files()), *(str(f) for f in corpus_files()), *(p for net in KIT_NETS for p in net.inputs)]


def stage_corpus(dest: Path) -> Path:
    """Lays the corpus out in `dest` (its groundtruth/ is what `measure` reads); returns it."""
    for rel in shared_files():
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(SHARED / rel, dest / rel)
    for net in KIT_NETS:
        for rel in (net.groundtruth, net.source):
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        (dest / net.source).write_text(net.text())
        (dest / net.groundtruth).write_text(json.dumps(net.document(), indent=1) + "\n")
    return dest

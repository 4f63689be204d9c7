"""The kit's layout, which `bundle` writes here and `run-bundle` reads there (docs/gpu.md,
"The kit"):

- `stock/` and `patched/`: each variant's `libcaffe.so.1.0.0` (lib/), the `caffe` tool,
  `upgrade_net_proto_text` (V1 nets of the corpus) and the probe (bin/), all stripped.
  Caffe's Makefile links the tools with RUNPATH `$ORIGIN/../lib`, and the probe is linked
  the same way for the kit, so nothing points back at this machine's build trees;
- `lib/`: every shared library those programs load that is neither glibc's nor CUDA's
  (glog, gflags, protobuf, boost, HDF5 and what it pulls in, OpenBLAS, libstdc++ ...),
  found with `ldd` and copied under the name the loader asks for;
- `corpus/`: the BVLC files of ../shared/groundtruth and the prototxts they name (../shared
  does not travel to the GPU machine), and the kit's own nets (corpus.py: kit__*.json, kit/);
- `MANIFEST.json`: what was built from what (the runtime patch's digest among it), the CUDA
  sonames the programs need, the newest glibc symbol version they need."""

from __future__ import annotations

from caffemem.runtime import Flavour, patch_files
from gpu.cache import digest

#: The layout of the kit; bump it when the layout or what the kit holds changes.
FORMAT = "caffemem gpu bundle v2"  # v2: the kit's own nets in corpus/ (issue 32)
#: The one folder at the archive's top.
ROOT = "caffemem-gpu-bundle"
MANIFEST = "MANIFEST.json"
#: The programs of each variant, by their name in bin/ (the probe's source is paths.PROBE).
TOOLS = ("caffe", "upgrade_net_proto_text")
PROBE_NAME = "caffemem_gpu_probe"
VARIANTS = ("stock", "patched")


def patch_key() -> str:
    """The digest of the runtime patch's files: the kit's patched Caffe and the checkout's
    `caffemem optimize` must agree on it."""
    return digest(*patch_files(Flavour.BVLC))

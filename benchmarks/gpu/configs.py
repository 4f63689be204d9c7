"""The configurations each net is measured in: which build runs it, the plan it runs, the
patched runtime's environment, and which nets it runs on."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Config:
    """One measured configuration: which build runs the nets, and the `caffemem optimize`
    options their plan is made with (None: the net as it is, stock Caffe). `name` is its
    folder in the output. `env`: variables set for the probe (the patched runtime's switches,
    runtime patch v6: CAFFEMEM_CUDNN_POOL, CAFFEMEM_CUDA_STACK_BYTES). `nets`: only the
    ground-truth files of these names, less `.json` (empty: every net)."""

    name: str
    variant: str
    plan: tuple[str, ...] | None
    phases: tuple[str, ...] = ("TRAIN", "TEST")  # the phases it runs (recompute: only where Backward runs)
    env: tuple[tuple[str, str], ...] = ()
    nets: tuple[str, ...] = ()

    def runs_on(self, file_stem: str) -> bool:
        return not self.nets or file_stem in self.nets

    @property
    def pool(self) -> bool | None:
        """Whether the run shares cuDNN handles (runtime patch v6's pool, on unless
        CAFFEMEM_CUDNN_POOL=0); None for stock Caffe, which has none."""
        return None if self.variant == "stock" else dict(self.env).get("CAFFEMEM_CUDNN_POOL") != "0"

    def time_iterations(self, file_stem: str, phase: str) -> int:
        """How many SGD iterations the probe times after measuring (0: none)."""
        timed = phase == "TRAIN" and file_stem in TIMED_NETS and self.name in TIMED_CONFIGS
        return TIME_ITERATIONS if timed else 0

    @property
    def stack_bytes(self) -> int | None:
        """The CUDA stack limit the patched runtime is asked to set (None: the driver's)."""
        value = dict(self.env).get("CAFFEMEM_CUDA_STACK_BYTES")
        return int(value) if value is not None else None


#: What runtime patch v6 changes on the card, measured on nets that show it: the most cuDNN
#: handles (the pool), and kernels of every kind (the stack limit: Caffe's own, cuDNN's,
#: cuBLAS's, BatchNorm's, Backward's), with the digests compared to stock's. Each stack net
#: has cuDNN layers: the runtime sets the limit when it first makes its pool (V6-DESIGN).
#: The time they add: 9 runs without the pool and 11 under each limit, ~100 s of the ~500 s
#: (gpu/estimate.py).
POOL_NETS = ("bvlc_examples_mnist__lenet_train_test", "bvlc_googlenet__train_val", "resnet__ResNet-50-deploy",
             "kit__resnet50_bn_train", "kit__depthwise", "kit__densenet121", "kit__resnet152")
STACK_NETS = ("bvlc_examples_mnist__lenet_train_test", "bvlc_googlenet__train_val", "bvlc_alexnet__train_val", "resnet__ResNet-50-deploy",
              "kit__siamese", "kit__resnet50_bn_train", "kit__depthwise")
#: The stack limits measured (bytes a thread; the driver's default is 1 KiB): the smallest
#: that keeps every output bit-identical is the one to set, so 512 (the fallback should both
#: fail) gave way to the timed runs below.
STACK_LIMITS = (256, 128)
#: Issue 33: seconds per SGD iteration (the probe's CAFFEMEM_PROBE_TIME_ITERS: ClearParamDiffs
#: + Net::ForwardBackward, after 3 unmeasured iterations) of the recompute policies against
#: stock, on the issue's two nets at batch 32 in TRAIN; stock runs twice (stock, stock-again:
#: the faster counts). ~27 s more on the card (gpu/estimate.py).
TIMED_NETS = ("bvlc_googlenet__train_val", "kit__resnet50_bn_train")
TIMED_CONFIGS = ("stock", "stock-again", "patched-buffers", "patched-recompute", "patched-cheap")
TIME_ITERATIONS = 15

#: Stock Caffe; the patched Caffe with the blob plan; the same with --share-buffers; stock
#: Caffe again (its digests tell a plan's difference from cuDNN's own run-to-run one); the
#: patched Caffe running `optimize --recompute sqrt`'s plan (runtime patch v4), TRAIN only;
#: the blob plan with stock's own cuDNN handles in the patched build (CAFFEMEM_CUDNN_POOL=0);
#: the blob plan under each smaller CUDA stack limit (what the context gives back, and
#: whether every output stays bit-identical); `optimize --recompute cheap`'s plan on the
#: timed nets (TIMED_NETS).
CONFIGS = (
    Config("stock", "stock", None),
    Config("patched", "patched", ()),
    Config("patched-buffers", "patched", ("--share-buffers",)),
    Config("stock-again", "stock", None),
    Config("patched-recompute", "patched", ("--recompute", "sqrt"), ("TRAIN",)),
    Config("patched-cheap", "patched", ("--recompute", "cheap"), ("TRAIN",), nets=TIMED_NETS),
    Config("patched-nopool", "patched", (), env=(("CAFFEMEM_CUDNN_POOL", "0"),), nets=POOL_NETS),
    *(Config(f"patched-stack-{n}", "patched", (), env=(("CAFFEMEM_CUDA_STACK_BYTES", str(n)),), nets=STACK_NETS) for n in STACK_LIMITS),
)


def configs_of(variant: str) -> tuple[Config, ...]:
    """--variant stock|patched|both -> the configurations measured."""
    return tuple(c for c in CONFIGS if variant in ("both", c.variant))

"""Run by the system python3 (Debian's numpy and protobuf, the ones pycaffe was built for),
not by the test's venv: `python3 pycaffe_run.py CAFFE_TREE NET` runs 2 iterations of
Forward+Backward on deterministic inputs and prints per iteration the loss (exact repr) and
sha256 digests of all gradients, all weights and blob ip2's data. pycaffe's caffe/io.py
imports skimage and scipy, which only image I/O needs: they are stubbed when missing."""

import hashlib
import sys
import types

for name in ("skimage", "skimage.io", "skimage.transform", "scipy", "scipy.ndimage"):
    try:
        __import__(name)
    except ImportError:
        module = types.ModuleType(name)
        module.zoom = module.resize = None
        sys.modules[name] = module
        if "." in name:
            parent, child = name.rsplit(".", 1)
            setattr(sys.modules[parent], child, module)

tree, net_file = sys.argv[1], sys.argv[2]
sys.path.insert(0, tree + "/python")
import caffe  # noqa: E402
import numpy as np  # noqa: E402

caffe.set_mode_cpu()
caffe.set_random_seed(1701)
net = caffe.Net(net_file, caffe.TRAIN)
for it in range(2):
    data = net.blobs["data"]
    data.data[...] = np.linspace(-1, 1, data.count).reshape(data.shape) * (it + 1)
    net.blobs["label"].data[...] = np.arange(net.blobs["label"].count) % 2
    out = net.forward()
    net.backward()
    grads = b"".join(p[i].diff.tobytes() for p in net.params.values() for i in range(len(p)))
    weights = b"".join(p[i].data.tobytes() for p in net.params.values() for i in range(len(p)))
    print(repr(out["loss"].item()), hashlib.sha256(grads).hexdigest(), hashlib.sha256(weights).hexdigest(), hashlib.sha256(net.blobs["ip2"].data.tobytes()).hexdigest())

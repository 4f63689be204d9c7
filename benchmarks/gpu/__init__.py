"""The GPU kit (issues 18 and 22; docs/gpu.md): builds BVLC Caffe with CUDA here, stock and
caffemem-patched, packs it for a bare GPU machine, measures the ground-truth nets there, and
holds caffemem's model to what the card measured. Besides the code, this folder holds the
kit's inputs: the pinned CUDA wheels (requirements.txt), the CUDA 13 build fix
(fix-for-cuda13.edits) and the probe's source (probe.cpp).

Its commands are benchmarks/gpu_groundtruth.py (cli.py) and benchmarks/gpu_measured.py
(measured.py). Imports flow one way, each module importing only those listed before it
(tests/architecture/test_gpu_kit.py holds them to it):

- paths: where the repository, the shared corpus and the kit's inputs are;
- shell: the log and the commands run with it;
- cache: the keyed cache of built folders;
- toolkit: the pinned CUDA wheels laid out as a CUDA_DIR;
- builds: Caffe's CUDA trees, the CI compile check and the full builds;
- probe: the measuring program, compiled and run;
- nets: a ground-truth net made into the one the probe runs;
- corpus: the nets measured (../shared's and the kit's own), laid out as one folder;
- configs: the measured configurations (stock, each plan, the runtime's switches);
- estimate: each run's seconds, estimated from the committed results, for the order;
- measure: every run of the corpus in every configuration, to JSON;
- libraries: what a program loads (`ldd`), and where CUDA's libraries are;
- layout: the kit's layout and manifest format, shared by bundle and kit;
- archive: the kit and the results as tar.xz, within the device tool's limits;
- bundle: here, the kit laid out and packed;
- kit: there, the kit unpacked, checked and run;
- cli: `gpu_groundtruth.py`'s commands;
- measured: the model beside the card's figures (`gpu_measured.py`).
"""

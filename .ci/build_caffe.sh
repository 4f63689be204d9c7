#!/bin/bash
# Builds Caffe (CPU) from ../shared/caffe, stock or patched by caffemem's runtime
# (`caffemem patch`, via caffemem.runtime.apply_patch), and caches the build OUTSIDE the
# checkout, keyed on the tarball, the Debian fix script, the build recipe and (patched
# kinds) the patch files under caffemem/runtime/cpp/. A rerun with the same key is instant.
# Prints the path of the built tree on its last line of stdout; it holds build/lib/libcaffe.so
# (and, for BVLC, build/tools/caffe; `build` is Caffe's link to .build_release).
#
# usage: .ci/build_caffe.sh stock|patched|fork|fork-patched|fork-probe [--pycaffe]
#   stock, patched:         BVLC Caffe master 9b89154, `make lib tools`
#   fork, fork-patched:     yjxiong/caffe action_recog 9831a2b, libcaffe.so only
#   fork-probe:             the fork unchanged but for a byte counter in SyncedMemory
#                           (apply_probe below; read by benchmarks/fork_groundtruth.py)
#   --pycaffe (BVLC only):  also python/caffe/_caffe.so for the system python3 (Debian's
#                           python3-dev, libboost-python-dev, python3-numpy, python3-protobuf),
#                           built once into the cached tree (only _caffe.cpp compiles)
# env:   CAFFEMEM_CACHE  (default /var/cache/caffemem, falls back to ~/.cache/caffemem)
#        CAFFEMEM_JOBS   (default 2)
#        CAFFEMEM_PYTHON (default: python3 from PATH; must import caffemem)
#        CAFFEMEM_NO_APT=1 to skip installing the Debian packages
set -euo pipefail
kind="${1:?usage: build_caffe.sh stock|patched|fork|fork-patched|fork-probe [--pycaffe]}"
pycaffe=0; [ "${2:-}" = --pycaffe ] && pycaffe=1
repo="$(cd "$(dirname "$0")/.." && pwd)"
shared="$repo/../shared/caffe"
fix="$shared/fix-for-debian12.sh"
py="${CAFFEMEM_PYTHON:-python3}"
jobs="${CAFFEMEM_JOBS:-2}"
need_pkgs=(build-essential libboost-system-dev libboost-thread-dev libboost-filesystem-dev
  libboost-regex-dev libgoogle-glog-dev libgflags-dev libprotobuf-dev protobuf-compiler
  libhdf5-dev libopenblas-dev)
case "$kind" in
  stock|patched)
    tarball="$shared/bvlc-caffe-9b89154.tar.xz"; name=bvlc
    targets=(lib tools)
    config='USE_OPENCV := 0
USE_LEVELDB := 0
USE_LMDB := 0'
    ;;
  fork|fork-patched|fork-probe)
    tarball="$shared/yjxiong-caffe-action_recog-9831a2b.tar.xz"; name=fork
    targets=(.build_release/lib/libcaffe.so)   # the fork's Makefile has no `lib` target
    config=''                                   # the fork always uses OpenCV, LevelDB, LMDB
    need_pkgs+=(libopencv-dev libleveldb-dev liblmdb-dev libsnappy-dev)
    ;;
  *) echo "usage: build_caffe.sh stock|patched|fork|fork-patched|fork-probe" >&2; exit 2;;
esac
[ -f "$tarball" ] || { echo "missing $tarball" >&2; exit 2; }

cache="${CAFFEMEM_CACHE:-/var/cache/caffemem}"
if ! mkdir -p "$cache" 2>/dev/null || [ ! -w "$cache" ]; then cache="$HOME/.cache/caffemem"; mkdir -p "$cache"; fi

# The key: tarball + fix script + the build recipe below (+ the patch files for the patched
# kinds). Bump RECIPE when the configuration or the targets change.
RECIPE="$name cpu ${targets[*]} gnu++17 v1 $config"
key_inputs=("$tarball" "$fix")
if [ "${kind#*-}" = patched ] || [ "$kind" = patched ]; then
  # the patch is the package data under caffemem/runtime/cpp/ (edits.txt + whole files)
  while IFS= read -r f; do key_inputs+=("$f"); done < <(find "$repo/caffemem/runtime/cpp" -type f \
    -not -name '*.pyc' | LC_ALL=C sort)
fi
# The probe: SyncedMemory's host allocations (CaffeMallocHost / CaffeFreeHost, inline in
# syncedmem.hpp and called only from syncedmem.cpp) go through wrappers that keep
# caffe::caffemem_probe_allocated, the bytes SyncedMemory holds (allocated less freed), which
# the measuring program reads around each step. Only syncedmem.cpp changes; its text is part
# of the cache key.
apply_probe() {
  local cpp="$1/src/caffe/syncedmem.cpp"
  cat > "$cpp.probe" <<'PROBE'
#include <map>
namespace caffe {
long long caffemem_probe_allocated = 0;
static std::map<void*, size_t>& ProbeSizes() { static std::map<void*, size_t> sizes; return sizes; }
static void ProbeMallocHost(void** ptr, size_t size) {
  CaffeMallocHost(ptr, size);
  caffemem_probe_allocated += size;
  ProbeSizes()[*ptr] = size;
}
static void ProbeFreeHost(void* ptr) {
  std::map<void*, size_t>::iterator it = ProbeSizes().find(ptr);
  if (it != ProbeSizes().end()) { caffemem_probe_allocated -= it->second; ProbeSizes().erase(it); }
  CaffeFreeHost(ptr);
}
}  // namespace caffe
#define CaffeMallocHost ProbeMallocHost
#define CaffeFreeHost ProbeFreeHost
PROBE
  sed -i '/^#include "caffe\/util\/math_functions.hpp"$/r '"$cpp.probe" "$cpp"
  rm "$cpp.probe"
  grep -q '^#define CaffeFreeHost ProbeFreeHost' "$cpp"
}
[ "$kind" = fork-probe ] && RECIPE="$RECIPE $(declare -f apply_probe)"
key="$({ cat "${key_inputs[@]}"; echo "$RECIPE"; } | sha256sum | cut -c1-16)"
label="$kind"; [ "$kind" = stock ] && label=bvlc-stock; [ "$kind" = patched ] && label=bvlc-patched
dest="$cache/$label-$key"
build_pycaffe() {  # into the built tree $1; the library's objects are untouched
  [ -f "$1/python/caffe/_caffe.so" ] && return 0
  if [ "${CAFFEMEM_NO_APT:-0}" != 1 ]; then
    local p missing=()
    for p in python3-dev libboost-python-dev python3-numpy python3-protobuf; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
    if [ ${#missing[@]} -gt 0 ]; then
      apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >&2
    fi
  fi
  local pyver numpy_inc boost_py
  pyver="$(/usr/bin/python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
  numpy_inc="$(/usr/bin/python3 -c 'import numpy; print(numpy.get_include())')"
  boost_py="boost_python${pyver/./}"
  (cd "$1" && make -j"$jobs" CUSTOM_CXX="g++ -std=gnu++17" \
    INCLUDE_DIRS="/usr/include/python$pyver $numpy_inc /usr/local/include /usr/include/hdf5/serial .build_release/src ./src ./include" \
    PYTHON_LIBRARIES="$boost_py python$pyver" pycaffe >&2)
}
if [ -f "$dest/.caffemem-build-ok" ]; then
  if [ "$pycaffe" = 1 ]; then build_pycaffe "$dest"; fi
  echo "$dest"; exit 0
fi

if [ "${CAFFEMEM_NO_APT:-0}" != 1 ]; then
  missing=()
  for p in "${need_pkgs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
  if [ ${#missing[@]} -gt 0 ]; then
    echo "installing ${missing[*]}" >&2
    apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >&2
  fi
fi

work="$dest.tmp.$$"
rm -rf "$work"; mkdir -p "$work"
trap 'rm -rf "$work"' EXIT
tar -xJf "$tarball" -C "$work"
bash "$fix" "$work" >&2
if [ "$kind" = fork-probe ]; then apply_probe "$work" >&2; fi
if [ "$kind" = patched ] || [ "$kind" = fork-patched ]; then
  (cd "$repo" && "$py" -c 'import sys; from caffemem.runtime import apply_patch; print(apply_patch(sys.argv[1]).describe())' "$work") >&2
fi
cat > "$work/Makefile.config" <<CFG
CPU_ONLY := 1
$config
BLAS := open
INCLUDE_DIRS := /usr/local/include /usr/include/hdf5/serial /usr/include/opencv4
LIBRARY_DIRS := /usr/local/lib /usr/lib /usr/lib/x86_64-linux-gnu /usr/lib/x86_64-linux-gnu/hdf5/serial
BUILD_DIR := build
CFG
(cd "$work" && make -j"$jobs" CUSTOM_CXX="g++ -std=gnu++17" "${targets[@]}" >&2)
if [ "$pycaffe" = 1 ]; then build_pycaffe "$work"; fi
touch "$work/.caffemem-build-ok"
trap - EXIT
rm -rf "$dest"
mv "$work" "$dest"
echo "$dest"

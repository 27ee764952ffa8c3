#!/usr/bin/env bash
# `pip install .` into a fresh virtual environment (with Debian's system packages
# visible, for PyTorch), then a 2-rank allreduce through the installed kolorun.
# pip builds in the checkout (build-wheel/<tag>, pyproject.toml) and through ccache when
# there is one, so that the sources the wheels' builds compiled (packaging.wheels_build)
# are not compiled again: only kolo._core's, against pip's own pybind11, and the CUDA
# kernels for CMakeLists.txt's default architectures. The compiler is named as there
# (Debian's python3 would name the same GCC x86_64-linux-gnu-g++, which ccache tells
# apart).
set -euo pipefail
src=$(cd "$1" && pwd)
export CC=gcc CXX=g++
if command -v ccache >/dev/null 2>&1; then
  export CMAKE_C_COMPILER_LAUNCHER=ccache CMAKE_CXX_COMPILER_LAUNCHER=ccache CMAKE_CUDA_COMPILER_LAUNCHER=ccache
  export CCACHE_BASEDIR=$src
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
/usr/bin/python3 -m venv --system-site-packages "$work/venv"
t=$(date +%s)
"$work/venv/bin/pip" install -q "$src"
echo "pip install .: $(($(date +%s) - t)) s"
cd "$work"
rc=0
out=$(timeout 120 "$work/venv/bin/kolorun" -np 2 "$work/venv/bin/python" -c '
import torch, kolo.torch as hvd
hvd.init()
print("sum", hvd.allreduce(torch.ones(2), op=hvd.Sum).tolist(), "from", hvd.__file__)') || rc=$?
echo "$out"
[ $rc = 0 ] || { echo "pip install test: FAILED: kolorun exited $rc (124: it ran past 120 s)"; exit 1; }
echo "$out" | grep -q "\[1\]<stdout>:sum \[2.0, 2.0\] from $work/venv/lib/"
echo "pip install: OK"

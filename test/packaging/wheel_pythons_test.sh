#!/usr/bin/env bash
# kolo's wheels on every CPython 3.9 to 3.13 (docs/install.md, "Which Python, glibc and
# MPI"), as a user of each installs one: for each wheel that scripts/build_wheel.sh
# built (packaging.wheels_build), a fresh virtual environment of its Python without
# system site packages, `pip install --only-binary :all:` of the wheel and NumPy (no
# compiler runs), the environment's bin/ first on PATH, and a 2-rank kolo.numpy
# allreduce under the environment's own kolorun on the system's Open MPI; on PyPI's MPICH
# (both of its ABIs) and on Intel MPI too. Then, on CPython 3.12 and 3.13, PyPI's
# PyTorch (the reference environment's version) and scikit-learn join, and
# examples/pytorch_digits.py trains at np=2 to the main job's 0.95 test accuracy.
#
#   test/packaging/wheel_pythons_test.sh <source_dir> <wheel_dir> <reference_python> [work_dir]
#
# Prints each step's time. Ends with "wheel pythons: OK".
set -euo pipefail
src=$(cd "$1" && pwd)
wheels=$(cd "$2" && pwd)
ref_python=$3
work=${4:-}
if [ -z "$work" ]; then
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
else
  # The logs stay; the environments (3.3 GB each with PyTorch) go.
  trap 'rm -rf "$work"/venv-*' EXIT
fi
mkdir -p "$work"
work=$(cd "$work" && pwd)
rm -rf "${work:?}"/venv-* "${work:?}/home"
fail() {
  echo "wheel pythons test: FAILED: $*"
  exit 1
}
elapsed() { echo $(($(date +%s) - $1)); }
# shellcheck source=scripts/wheel/pythons.sh
source "$src/scripts/wheel/pythons.sh"
torch_pin=$("$ref_python" -c 'from importlib import metadata; print(metadata.version("torch").split("+")[0])') ||
  fail "$ref_python has no torch to take the version from"

# pip's and uv's caches stay the user's: the two PyTorch installs share their nvidia-*
# wheels (3 GB) with .venv's (frameworks_into.sh).
export PIP_CACHE_DIR=${PIP_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/pip}
# shellcheck source=test/packaging/frameworks_into.sh
source "$src/test/packaging/frameworks_into.sh"
# A user's shell: a home of its own, nothing of ours on the paths.
export HOME="$work/home"
unset PYTHONPATH KOLO_PYTHON
mkdir -p "$HOME"
cd "$work"

# pip_into VERSION PACKAGES...: VERSION's wheel and PACKAGES into venv-VERSION, wheels only.
pip_into() {
  local v=$1 t
  shift
  t=$(date +%s)
  "$work/venv-$v/bin/pip" install -q --disable-pip-version-check --no-compile --only-binary :all: "$@" \
    >>"$work/install-$v.log" 2>&1 || { tail -20 "$work/install-$v.log"; fail "CPython $v: pip install $* failed"; }
  local what="$*"
  echo "install: CPython $v: ${what//$wheels\//} in $(elapsed "$t") s"
}

# shellcheck source=test/packaging/allreduce_check.sh
source "$src/test/packaging/allreduce_check.sh"
# allreduce_in VERSION [VAR=VALUE...]: allreduce_check in venv-VERSION, which must run the
# environment's kolo; prints which libmpi each rank mapped.
allreduce_in() {
  local v=$1 out rc=0
  shift
  out=$(allreduce_check "$work/venv-$v" "$@") || rc=$?
  [ $rc = 0 ] || { echo "$out"; fail "CPython $v $*: kolorun exited $rc (124: it ran past 120 s)"; }
  echo "$out" | grep -q "^\[1\]<stdout>:sum \[2.0, 2.0\] python $v\.[0-9]* from $work/venv-$v/lib/python$v/site-packages/kolo/" ||
    { echo "$out"; fail "CPython $v $*: no 2-rank allreduce from the environment's kolo"; }
  echo "$out" | grep -m1 "^\[1\]<stdout>:sum" | sed 's/.* mpi /mpi /'
}

for v in 3.9 3.10 3.11 3.12 3.13; do
  cp=cp${v/./}
  python=$(find_python "$v")
  [ -n "$python" ] || fail "no CPython $v here (/usr/bin/python$v or pyenv's)"
  wheel=$(ls "$wheels"/kolo-*-"$cp"-"$cp"-*.whl 2>/dev/null) || fail "no wheel for CPython $v in $wheels"
  "$python" -m venv "$work/venv-$v"
  pip_into "$v" "$wheel" numpy
  t=$(date +%s)
  maps=$(allreduce_in "$v")
  mpi=$(PATH="$work/venv-$v/bin:/usr/bin:/bin" timeout 60 kolorun --check-build 2>&1 | grep -m1 "MPI (job)" | tr -s ' ') || true
  echo "ok: CPython $v ($python): $(basename "$wheel"), 2-rank allreduce in $(elapsed "$t") s; $mpi; $maps"
done

# The MPICH family, as its users install it: PyPI's MPICH (kolo[mpich]) in the CPython 3.12
# environment, whose kolorun then runs MPICH's mpiexec (first on PATH), on the wheel's
# MPICH-ABI libkolo and, with KOLO_MPI_ABI=mpiabi, its standard-ABI one; and Intel MPI
# (scripts/setup.sh's .venv-impi, KOLO_MPI_HOME) on its MPICH ABI. Each rank must map that
# MPI's library.
pip_into 3.12 "mpich==5.0.2"
for abi in mpich mpiabi; do
  maps=$(allreduce_in 3.12 KOLO_MPI_ABI=$abi UCX_LOG_LEVEL=fatal)
  lib=libmpi.so.12
  [ $abi = mpiabi ] && lib=libmpi_abi.so.1
  echo "$maps" | grep -q "$work/venv-3.12/lib/$lib" || fail "CPython 3.12 on PyPI's MPICH ($abi): ranks mapped $maps"
  echo "ok: CPython 3.12 on PyPI's MPICH 5.0.2, ABI $abi: $maps"
done
impi=$src/.venv-impi
if [ -x "$impi/bin/mpiexec.hydra" ]; then
  maps=$(allreduce_in 3.13 KOLO_MPI_HOME="$impi")
  echo "$maps" | grep -q "libmpi.so.12" || fail "CPython 3.13 on Intel MPI: ranks mapped $maps"
  echo "ok: CPython 3.13 on Intel MPI ($impi): $maps"
else
  echo "skipped: Intel MPI: no $impi (scripts/setup.sh makes it)"
fi

# PyPI's PyTorch on the two newest Pythons (PyTorch $torch_pin is built for them, and they
# share its nvidia-* wheels with the reference environment's); 3.11's is packaging.wheel's.
for v in 3.12 3.13; do
  t=$(date +%s)
  frameworks_into "$work/venv-$v" "$work/install-$v.log" "torch==$torch_pin" scikit-learn ||
    { tail -20 "$work/install-$v.log"; fail "CPython $v: installing torch==$torch_pin scikit-learn failed"; }
  echo "install: CPython $v: torch==$torch_pin scikit-learn in $(elapsed "$t") s"
  t=$(date +%s)
  rc=0
  out=$(cd "$work" && PATH="$work/venv-$v/bin:/usr/bin:/bin" timeout 300 kolorun -np 2 python \
    "$src/examples/pytorch_digits.py" --checkpoint "$work/digits-$v.pt" 2>&1) || rc=$?
  [ $rc = 0 ] || { echo "$out" | tail -30; fail "CPython $v: pytorch_digits: kolorun exited $rc (124: it ran past 300 s)"; }
  echo "$out" | grep -Eq "^\[0\]<stdout>:ranks: 2  test accuracy: (0\.9[5-9]|1\.0)" ||
    { echo "$out" | tail -30; fail "CPython $v: pytorch_digits did not reach test accuracy 0.95"; }
  echo "ok: CPython $v: PyTorch $torch_pin digits at np=2: $(echo "$out" | grep -oE 'test accuracy: [0-9.]+' | head -1) in $(elapsed "$t") s"
  rm -rf "$work/venv-$v"
done
echo "wheel pythons: OK"

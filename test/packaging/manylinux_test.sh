#!/usr/bin/env bash
# The wheels' platform tag holds (docs/install.md, "Platform tag"): for each wheel
# that scripts/build_wheel.sh built (packaging.wheels_build),
#   - its file name carries manylinux_2_28_x86_64;
#   - `auditwheel show`, looking only at the libraries a manylinux system provides
#     (MPI, TensorFlow, CUDA and NCCL are the machine's own and are left unresolved),
#     finds no symbol that needs a newer tag than manylinux_2_28: the test fails when
#     the tag rises, and prints what auditwheel says;
#   - scripts/wheel/check_symbols.py finds no glibc or libstdc++ symbol without a
#     version (one that the old glibc's link stubs lacked);
#   - it vendors no MPI (any family), TensorFlow, CUDA or NCCL library;
# and there is a wheel for each CPython version given (default: 3.9 to 3.13).
#
#   test/packaging/manylinux_test.sh <source_dir> <wheel_dir> [3.X...]
#
# Ends with "manylinux: OK".
set -euo pipefail
src=$(cd "$1" && pwd)
wheels=$2
shift 2
versions=("$@")
[ ${#versions[@]} -gt 0 ] || versions=(3.9 3.10 3.11 3.12 3.13)
tools=$src/build-wheel/tools
sysroot=$src/build-wheel/sysroot-manylinux_2_28
fail() {
  echo "manylinux test: FAILED: $*"
  exit 1
}
[ -x "$tools/bin/auditwheel" ] || fail "$tools/bin/auditwheel is missing: scripts/build_wheel.sh makes it"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# The libraries that every manylinux system provides and kolo's binaries link.
mkdir "$work/base"
for lib in libc.so.6 libm.so.6 libpthread.so.0 libdl.so.2 librt.so.1 libstdc++.so.6 libgcc_s.so.1 \
  ld-linux-x86-64.so.2; do
  ln -s "/lib/x86_64-linux-gnu/$lib" "$work/base/$lib"
done

for v in "${versions[@]}"; do
  cp=cp${v/./}
  wheel=$(ls "$wheels"/kolo-*-"$cp"-"$cp"-*.whl 2>/dev/null) || fail "no wheel for CPython $v in $wheels"
  name=$(basename "$wheel")
  case $name in *manylinux_2_28_x86_64*) ;; *) fail "$name does not carry manylinux_2_28_x86_64" ;; esac
  show=$("$tools/bin/auditwheel" show --ldpaths "$work/base" "$wheel" 2>&1) || { echo "$show"; fail "auditwheel show $name failed"; }
  need=$(echo "$show" | tr '\n' ' ' | grep -oE 'constrains the platform tag to +"manylinux_[0-9]+_[0-9]+' | grep -oE '[0-9]+_[0-9]+$') ||
    { echo "$show"; fail "auditwheel show $name named no manylinux tag"; }
  if [ "${need%_*}" -gt 2 ] || { [ "${need%_*}" = 2 ] && [ "${need#*_}" -gt 28 ]; }; then
    echo "$show"
    fail "$name needs manylinux_$need: a binary uses a newer glibc or libstdc++ symbol (above)"
  fi
  symbols=$("$tools/bin/python" "$src/scripts/wheel/check_symbols.py" "$sysroot" "$wheel") ||
    { echo "$symbols"; fail "$name: symbols without a version (above)"; }
  vendored=$(/usr/bin/python3 -m zipfile -l "$wheel" | awk '{print $1}' | grep '\.libs/' || true)
  if echo "$vendored" | grep -E "libmpi|libopen-(rte|pal)|libpmix|libfabric|libtensorflow|libcuda|libcudart|libnccl"; then
    fail "$name vendors MPI, TensorFlow, CUDA or NCCL (listed above)"
  fi
  echo "ok: $name: symbols need manylinux_$need, $(echo "$symbols" | grep -c "^$name: .*: OK$") binaries with every symbol versioned, $(echo "$vendored" | grep -c . || true) libraries vendored"
done
echo "manylinux: OK"

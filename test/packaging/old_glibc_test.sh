#!/usr/bin/env bash
# kolo's CPython 3.9 wheel on an older glibc than the one it was built on: Debian 11
# (glibc 2.31, GCC 10's libstdc++ of GLIBCXX_3.4.28, CPython 3.9, Open MPI 4.1.0),
# made once by debootstrap from Debian's archive into the user's cache
# (~/.cache/kolo/debian11, 400 MB: it outlives build folders and fresh clones, as
# ccache's and pip's caches do) and entered with chroot in a private mount namespace. There the wheel is installed
# into a venv that sees Debian 11's NumPy (no network, no compiler), and the
# environment's kolorun runs a 2-rank kolo.numpy allreduce on Debian 11's Open MPI.
# glibc 2.31 predates 2.34, so this runs what the link stubs promise and a newer glibc
# cannot show: the start files that hand __libc_csu_init to __libc_start_main,
# pthread in libpthread.so.0, stat() through __xstat. Needs root, debootstrap and
# unshare, else it is skipped.
#
#   test/packaging/old_glibc_test.sh <wheel_dir>
#
# Ends with "old glibc: OK" (or "old glibc test: SKIPPED").
set -euo pipefail
wheels=$(cd "$1" && pwd)
if [ "$(id -u)" != 0 ] || ! command -v debootstrap >/dev/null || ! command -v unshare >/dev/null; then
  echo "old glibc test: SKIPPED (needs root, debootstrap and unshare)"
  exit 0
fi
fail() {
  echo "old glibc test: FAILED: $*"
  exit 1
}
elapsed() { echo $(($(date +%s) - $1)); }
work=${XDG_CACHE_HOME:-$HOME/.cache}/kolo
mkdir -p "$work"
root=$work/debian11
# One test at a time uses the root (another checkout's CI may run beside this one).
exec 9>"$work/debian11.lock"
flock -w 900 9 || fail "$work/debian11.lock stayed taken for 900 s"
wheel=$(ls "$wheels"/kolo-*-cp39-cp39-*.whl 2>/dev/null) || fail "no cp39 wheel in $wheels"

t=$(date +%s)
if [ ! -e "$root/.complete" ]; then
  rm -rf "$root"
  timeout 900 debootstrap --variant=minbase --include=python3,python3-venv,python3-numpy,openmpi-bin,libopenmpi3 \
    bullseye "$root" http://deb.debian.org/debian >"$work/debootstrap.log" 2>&1 ||
    { tail -20 "$work/debootstrap.log"; fail "debootstrap of Debian 11 failed or ran past 900 s"; }
  touch "$root/.complete"
  echo "debootstrap: Debian 11 in $(elapsed "$t") s"
fi
rm -rf "$root/opt/kolo" "$root/opt/venv"
mkdir -p "$root/opt/kolo"
cp "$wheel" "$root/opt/kolo/"

rc=0
# shellcheck disable=SC2016 # the root's path is the inner shell's $1
out=$(timeout 300 unshare --mount --fork bash -c '
  set -e
  mount --make-rprivate /
  mount -t proc proc "$1/proc"
  mount --rbind /dev "$1/dev"
  mount -t tmpfs tmpfs "$1/tmp"
  exec chroot "$1" /usr/bin/env -i PATH=/opt/venv/bin:/usr/bin:/bin HOME=/root LANG=C.UTF-8 bash -c "
    set -e
    echo \"glibc \$(getconf GNU_LIBC_VERSION | cut -d\" \" -f2), \$(grep -aoE \"GLIBCXX_3\.4\.[0-9]+\" /usr/lib/x86_64-linux-gnu/libstdc++.so.6 | sort -V | tail -1), \$(python3 --version), \$(mpirun --version | head -1)\"
    python3 -m venv --system-site-packages /opt/venv
    pip install -q --no-index --no-deps --no-compile /opt/kolo/*.whl
    kolorun --check-build | grep -E \"MPI|kolo \"
    kolorun -np 2 python -c \"
import sys, numpy as np, kolo.numpy as hvd
hvd.init()
print(\\\"sum\\\", hvd.allreduce(np.ones(2), op=hvd.Sum).tolist(), \\\"python\\\", sys.version.split()[0], \\\"from\\\", hvd.__file__)\"
  "
' _ "$root" 2>&1) || rc=$?
echo "$out"
[ $rc = 0 ] || fail "Debian 11: exited $rc (124: it ran past 300 s)"
echo "$out" | grep -q "^glibc 2\.31, GLIBCXX_3\.4\.28" || fail "the root is not Debian 11's glibc 2.31 and libstdc++"
echo "$out" | grep -q "^\[1\]<stdout>:sum \[2.0, 2.0\] python 3\.9\.[0-9]* from /opt/venv/lib/python3.9/site-packages/kolo/" ||
  fail "no 2-rank allreduce from the cp39 wheel on Debian 11"
echo "ok: $(basename "$wheel") on Debian 11 in $(elapsed "$t") s"
echo "old glibc: OK"

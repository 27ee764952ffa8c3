#!/usr/bin/env bash
# Runs a command with some Debian packages hidden from it, as if they were not
# installed: hide_packages.py whites out their /usr files in an overlayfs upper
# layer under DIR, and the command runs in a private mount namespace whose /usr
# is that overlay (and whose /etc/openmpi, Open MPI's configuration, is empty).
# Used by the packaging tests that must see no system MPI or headers
# (wheel_test.sh's kolo[mpi], sdist_test.sh, gpu_kit_test.sh). Needs root,
# overlayfs and unshare; the callers check and skip.
#
#   test/packaging/without_packages.sh DIR PACKAGE_REGEX COMMAND [ARGS...]
set -euo pipefail
dir=$1
regex=$2
shift 2
rm -rf "$dir/upper" "$dir/work"
mkdir -p "$dir/upper" "$dir/work"
/usr/bin/python3 "$(dirname "$0")/hide_packages.py" "$dir/upper" "$regex" >&2
exec unshare --mount --propagation private bash -c '
  set -e
  mount -t overlay overlay -o "lowerdir=/usr,upperdir=$1/upper,workdir=$1/work" /usr
  [ ! -d /etc/openmpi ] || mount -t tmpfs none /etc/openmpi
  shift
  exec "$@"' _ "$dir" "$@"

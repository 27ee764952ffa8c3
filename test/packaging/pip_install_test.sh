#!/usr/bin/env bash
# `pip install .` into a fresh virtual environment (with Debian's system packages
# visible, for PyTorch), then a 2-rank allreduce through the installed kolorun.
set -euo pipefail
src="$1"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
/usr/bin/python3 -m venv --system-site-packages "$work/venv"
"$work/venv/bin/pip" install -q "$src"
cd "$work"
out=$("$work/venv/bin/kolorun" -np 2 "$work/venv/bin/python" -c '
import torch, kolo.torch as hvd
hvd.init()
print("sum", hvd.allreduce(torch.ones(2), op=hvd.Sum).tolist(), "from", hvd.__file__)')
echo "$out"
echo "$out" | grep -q "\[1\]<stdout>:sum \[2.0, 2.0\] from $work/venv/lib/"
echo "pip install: OK"

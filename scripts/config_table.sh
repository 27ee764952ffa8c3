#!/usr/bin/env bash
# Rewrites the settings table in docs/configuration.md from runtime/config.cc
# (through build/runtime/kolo_config_doc). A unit test fails when they drift.
set -euo pipefail
cd "$(dirname "$0")/.."
doc=docs/configuration.md
table=$(build/runtime/kolo_config_doc)
python3 - "$doc" "$table" <<'PY'
import re, sys
path, table = sys.argv[1], sys.argv[2]
text = open(path).read()
begin = text.index("<!-- settings table")
begin = text.index("\n", begin) + 1
end = text.index("<!-- end of settings table -->")
open(path, "w").write(text[:begin] + table.rstrip("\n") + "\n" + text[end:])
PY

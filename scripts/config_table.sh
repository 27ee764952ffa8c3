#!/usr/bin/env bash
# Rewrites the generated tables in docs/configuration.md from the settings table (runtime/config_table.cc)
# (through build/runtime/kolo_config_doc, or that of the build folder $KOLO_BUILD): the settings, with their Horovod
# aliases, and the Horovod variables kolo ignores. A unit test fails when
# they drift.
set -euo pipefail
cd "$(dirname "$0")/.."
doc=docs/configuration.md
settings=$(${KOLO_BUILD:-build}/runtime/kolo_config_doc)
unsupported=$(${KOLO_BUILD:-build}/runtime/kolo_config_doc --horovod-unsupported)
python3 - "$doc" "$settings" "$unsupported" <<'PY'
import sys
path, settings, unsupported = sys.argv[1:4]
text = open(path).read()

def replace(text, marker, table):
    begin = text.index("<!-- " + marker)
    begin = text.index("\n", begin) + 1
    end = text.index("<!-- end of " + marker + " -->")
    return text[:begin] + table.rstrip("\n") + "\n" + text[end:]

text = replace(text, "settings table", settings)
text = replace(text, "unsupported Horovod variables", unsupported)
open(path, "w").write(text)
PY

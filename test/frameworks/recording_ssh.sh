#!/usr/bin/env bash
# An ssh stand-in that appends its arguments, one line per call, to $KOLO_SSH_LOG and
# then does what test/launcher/fake_ssh.sh does: the test sees which ssh port and which
# host Open MPI asked for.
set -euo pipefail
echo "$*" >>"${KOLO_SSH_LOG:?KOLO_SSH_LOG names the file that records the calls}"
exec "$(dirname "$0")/../launcher/fake_ssh.sh" "$@"

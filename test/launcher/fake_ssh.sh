#!/usr/bin/env bash
# An ssh stand-in for Open MPI's plm_rsh_agent: "fake_ssh.sh [ssh options] HOST COMMAND..."
# runs COMMAND on this machine inside a new UTS namespace whose hostname is
# "kolo-<HOST>", so that a loopback address such as 127.0.0.2 looks like
# another machine to Open MPI. All traffic stays on loopback.
set -euo pipefail
while [ $# -gt 0 ]; do
  case "$1" in
    -p|-i|-l|-o) shift 2 ;;
    -*) shift ;;
    *) break ;;
  esac
done
host="$1"
shift
# FAKE_SSH_DELAY=S plays a host that is slow to start processes.
sleep "${FAKE_SSH_DELAY:-0}"
exec unshare --uts /bin/sh -c 'hostname "kolo-$0" && exec /bin/sh -c "$*"' "$host" "$@"

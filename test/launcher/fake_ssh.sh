#!/usr/bin/env bash
# An ssh stand-in for Open MPI's plm_rsh_agent and Hydra's -launcher-exec:
# "fake_ssh.sh [ssh options] HOST COMMAND..."
# runs COMMAND on this machine inside new UTS and mount namespaces whose
# hostname is "kolo-<HOST>", so that a loopback address such as 127.0.0.2
# looks like another machine to Open MPI. As on a real machine, that name
# resolves to the host's address (an /etc/hosts of its own), which libraries
# that bind to their host's name need (JAX's gloo collectives). All traffic
# stays on loopback.
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
# FAKE_SSH_DELAY=S plays a host that is slow to start Open MPI's daemon
# (kolorun's pre-flight check of the program answers at once).
# (orted: Open MPI 4.1's daemon; prted: 5.0's; hydra_*_proxy: Hydra's.)
case "$*" in *orted*|*prted*|*hydra_pmi_proxy*|*hydra_bstrap_proxy*) sleep "${FAKE_SSH_DELAY:-0}" ;; esac
hosts_file=$(mktemp)
{ echo "$host kolo-$host"; cat /etc/hosts; } >"$hosts_file"
# Open MPI names a daemon's session directory (and the topology file it maps
# there) after the host's name cut at the first dot: "kolo-127" for every
# fake host. A real machine has a /tmp of its own; each fake host gets a
# directory of its own, or two daemons starting at once share one file and
# one of them crashes (orted in hwloc_shmem_topology_write, SIGSEGV).
# (Open MPI 5's PRRTE reads its own parameter, not ORTE's.)
export OMPI_MCA_orte_tmpdir_base="/tmp/kolo-fake-host-$host"
export PRTE_MCA_prte_tmpdir_base="$OMPI_MCA_orte_tmpdir_base"
mkdir -p "$OMPI_MCA_orte_tmpdir_base"
# A real ssh's remote side inherits no descriptor of the launching side; this one
# runs here and would: Hydra's mpiexec leaves its listening socket open in its
# children, and a proxy started late connected to its own copy and waited forever.
# (255: bash reads this script from it.)
for fd in /proc/$$/fd/*; do
  fd=${fd##*/}
  if [ "$fd" -gt 2 ] && [ "$fd" -ne 255 ]; then eval "exec $fd>&-"; fi
done
# A host whose network namespace a test made (/run/netns/kolo-HOST, reached over
# a veth link) runs there: a machine whose link the test can cut. Such a host also
# gets what a real machine has of its own, a /dev/shm, System V IPC and a boot id:
# else MPICH's UCX takes it for this machine and goes on talking through shared
# memory past the cut link. (A loopback host such as 127.0.0.2 keeps them shared:
# UCX has no transport over loopback, and its ranks talk through shared memory.)
netns=()
unshare=(unshare --uts --mount)
own=:
if [ -e "/run/netns/kolo-$host" ]; then
  netns=(ip netns exec "kolo-$host")
  unshare+=(--ipc)
  cat /proc/sys/kernel/random/uuid >"$hosts_file.boot_id"
  own="mount -t tmpfs -o size=1g tmpfs /dev/shm && mount --bind $hosts_file.boot_id /proc/sys/kernel/random/boot_id && rm -f $hosts_file.boot_id"
fi
# The bind mount keeps the file's contents; its name is removed at once.
exec "${netns[@]}" "${unshare[@]}" /bin/sh -c \
  'mount --bind "$1" /etc/hosts && rm -f "$1" && eval "$3" && hostname "kolo-$0" && exec /bin/sh -c "$2"' \
  "$host" "$hosts_file" "$*" "$own"

"""A second host for the launcher tests: a network namespace /run/netns/kolo-HOST (which
fake_ssh.sh enters for HOST) joined to this one by a veth pair, so that the job's
traffic between the hosts goes over a network that is not loopback."""
import contextlib
import os
import signal
import subprocess

import pytest


@contextlib.contextmanager
def namespace_host(host, local, veth):
    """Makes HOST (an address of a new /24 network, this machine being LOCAL on it) behind
    the veth pair `veth`-a / `veth`-b; skips the test where namespaces cannot be made."""
    ns = "kolo-" + host
    near, far = veth + "a", veth + "b"

    def clean():
        # What still runs on the host goes with it: ranks cut off inside a blocking MPI
        # call never return (docs/reliability.md), and Intel MPI's spin on both cores.
        pids = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True)
        for pid in pids.stdout.split():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGKILL)
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        subprocess.run(["ip", "link", "del", near], capture_output=True)

    clean()  # left by a run that was killed
    steps = [["ip", "netns", "add", ns],
             ["ip", "link", "add", near, "type", "veth", "peer", "name", far],
             ["ip", "link", "set", far, "netns", ns],
             ["ip", "addr", "add", local + "/24", "dev", near],
             ["ip", "link", "set", near, "up"],
             ["ip", "netns", "exec", ns, "ip", "addr", "add", host + "/24", "dev", far],
             ["ip", "netns", "exec", ns, "ip", "link", "set", far, "up"],
             ["ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up"]]
    for cmd in steps:
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            clean()
            pytest.skip("cannot make a network namespace here (%s: %s)" % (" ".join(cmd),
                                                                          r.stderr.strip()))
    try:
        yield ns
    finally:
        clean()

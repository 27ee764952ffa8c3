"""Whiteouts that hide Debian packages' files from a process, as if not installed.

    hide_packages.py <upper> <package regex>

Writes into <upper> an overlayfs upper layer for /usr: a whiteout (character
device 0:0) for every non-directory /usr path of each installed package whose
name matches the regex, and for update-alternatives' links into them.
without_packages.sh mounts it over /usr in a private mount namespace and runs a
command there; the packaging tests use that. Needs root.
"""
import os
import re
import subprocess
import sys

upper, pattern = sys.argv[1], re.compile(sys.argv[2])
installed = subprocess.run(["dpkg-query", "-W", "-f=${Package}\n"], capture_output=True,
                           text=True, check=True).stdout.split()
packages = [p for p in installed if pattern.match(p)]
owned = subprocess.run(["dpkg-query", "-L", *packages], capture_output=True, text=True,
                       check=True).stdout.splitlines()


def whiteout(path):
    d = upper + os.path.dirname(path)[len("/usr"):]
    os.makedirs(d, exist_ok=True)
    try:
        os.mknod(os.path.join(d, os.path.basename(path)), 0o600 | 0o020000, os.makedev(0, 0))
    except FileExistsError:
        pass


files = [p for p in owned if p.startswith("/usr/") and os.path.lexists(p)
         and (os.path.islink(p) or not os.path.isdir(p))]
for p in files:
    whiteout(p)
targets = {os.path.realpath(p) for p in files}
for top, dirs, names in os.walk("/usr"):
    for name in dirs + names:
        p = os.path.join(top, name)
        if os.path.islink(p) and os.readlink(p).startswith("/etc/alternatives/") \
                and os.path.realpath(p) in targets:
            whiteout(p)
print(f"{len(files)} files of {len(packages)} packages hidden")

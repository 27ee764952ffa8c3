#!/usr/bin/env python3
"""Checks that a wheel's binaries need no glibc or libstdc++ newer than its tag says.

    check_symbols.py SYSROOT WHEEL_OR_DIR...

auditwheel reads the versions of the symbols a binary names; this reads the ones it
names without a version. A glibc or libstdc++ symbol without one was not found in the
link stubs (scripts/wheel/sysroot.py), so the binary would look for it at run time
in whatever glibc the machine has, and an older one lacks it. Every undefined,
non-weak, unversioned symbol that the system's libc, libm, libpthread, libdl, librt,
ld.so, libstdc++ or libgcc_s defines and SYSROOT's stubs do not is such a hole (one
that the stubs define is there on the oldest machine too: the binary found it first
in another library it links, such as TensorFlow's copy of a std::string member).
Prints one line per binary and "check_symbols: OK", or the holes and exit status 1.
"""
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

BASE_LIBRARIES = ["libc.so.6", "libm.so.6", "libpthread.so.0", "libdl.so.2", "librt.so.1",
                  "ld-linux-x86-64.so.2", "libstdc++.so.6", "libgcc_s.so.1"]


def dynamic_symbols(path):
    """(name, version or '', bind, defined) of each dynamic symbol."""
    out = subprocess.run(["readelf", "-W", "--dyn-syms", str(path)], capture_output=True,
                         text=True, check=True).stdout
    for line in out.splitlines():
        f = line.split()
        if len(f) == 8 and f[0].endswith(":") and f[7]:
            name, _, version = f[7].partition("@")
            yield name, version.lstrip("@"), f[4], f[6] != "UND"


def definitions(libraries):
    names = set()
    for lib in libraries:
        names.update(n for n, _, _, defined in dynamic_symbols(lib) if defined)
    return names


def system_libraries():
    for lib in BASE_LIBRARIES:
        path = subprocess.run(["gcc", f"-print-file-name={lib}"], capture_output=True, text=True,
                              check=True).stdout.strip()
        if not Path(path).is_absolute():
            path = f"/lib/x86_64-linux-gnu/{lib}"
        yield path


def elf_files(root):
    for path in sorted(Path(root).rglob("*")):
        if path.is_file() and not path.is_symlink():
            with open(path, "rb") as f:
                head = f.read(18)
            # Shared objects and executables (e_type 3, 2); not the objects of a build tree.
            if head[:4] == b"\x7fELF" and head[16] in (2, 3):
                yield path


def main(args):
    if len(args) < 2:
        sys.exit(__doc__)
    stubs = definitions(p for p in elf_files(Path(args[0], "lib")) if ".so" in p.name)
    system = definitions(system_libraries()) - stubs
    holes = 0
    for arg in args[1:]:
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(arg)
            if root.is_file():
                zipfile.ZipFile(root).extractall(tmp)
                root = Path(tmp)
            for path in elf_files(root):
                missing = sorted(n for n, version, bind, defined in dynamic_symbols(path)
                                 if not defined and not version and bind != "WEAK" and n in system)
                print(f"{Path(arg).name}: {path.relative_to(root)}: "
                      f"{'OK' if not missing else 'unversioned: ' + ' '.join(missing)}")
                holes += len(missing)
    if holes:
        print(f"check_symbols: {holes} glibc or libstdc++ symbols without a version (above): the "
              "link stubs lack them; add them to scripts/wheel/glibc_compat.c or call older ones")
        return 1
    print("check_symbols: OK")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

#!/usr/bin/env python3
"""Makes the link sysroot of a manylinux wheel: what kolo's binaries link against
so that they need nothing newer than the tag allows (docs/install.md, "Platform tag").

    sysroot.py --tag manylinux_2_28 --out DIR [--zig "python -m ziglang"]

DIR/lib then holds
  - glibc's link stubs for the tag's glibc (libc.so.6, libm.so.6, libpthread.so.0,
    libdl.so.2, librt.so.1, ... with only the symbols and versions that glibc had),
    its libc_nonshared.a (stat() through __xstat, __libc_csu_init) and crt1.o
    (whose _start hands __libc_csu_init to __libc_start_main, as glibc before 2.34
    needs to run an executable's constructors), all made by zig (PyPI's ziglang),
    which builds them for any glibc version from its ABI lists;
  - libstdc++.so: a stub of the system's libstdc++.so.6 that exports only the
    symbols of the GLIBCXX and CXXABI versions that auditwheel's policy for the tag
    allows, each at the newest allowed version. What a binary needs beyond them
    comes from the static libstdc++.a (-static-libstdc++ after the stub, hidden by
    --exclude-libs), as Red Hat's devtoolset does with libstdc++_nonshared.a;
  - glibc_compat.o: glibc_compat.c, the few newer glibc functions that GCC's
    libstdc++.a and kolo's code call, written with what the tag's glibc has.

DIR/toolchain.cmake (for CMAKE_TOOLCHAIN_FILE) names DIR and includes
scripts/wheel/toolchain.cmake, which links every binary against DIR/lib.
"""
import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path


def version_key(v):
    return [int(x) for x in re.findall(r"\d+", v)]


def policy_versions(tag):
    """The symbol versions auditwheel's policy allows for the tag, by library prefix."""
    import auditwheel  # the build tools' auditwheel, the one that gates the wheel

    path = Path(auditwheel.__file__).parent / "policy" / "manylinux-policy.json"
    for policy in json.loads(path.read_text()):
        if policy["name"] == tag:
            return {k: set(v) for k, v in policy["symbol_versions"]["x86_64"].items()}
    sys.exit(f"sysroot: auditwheel knows no policy {tag}")


def dynamic_symbols(path):
    """(name, version, default, value, size, type, bind) of each symbol a library defines."""
    table = subprocess.run(["readelf", "-W", "--dyn-syms", str(path)], capture_output=True,
                           text=True, check=True).stdout
    for line in table.splitlines():
        f = line.split()
        if len(f) != 8 or f[6] == "UND" or "@" not in f[7]:
            continue
        name, _, version = f[7].partition("@")
        size = int(f[2], 0) if f[2].startswith("0x") else int(f[2])
        yield name, version.lstrip("@"), version.startswith("@"), f[1], size, f[3], f[4]


def write_stub(symbols, aliases, soname, out, work):
    """A shared library that only names symbols: (name, version, default, size, type,
    bind) each. Data symbols that are one object in the real library (aliases: the same
    key, such as environ and __environ) share one address here too, so that the copy
    relocation of one moves the other along, as with the real library."""
    asm, nodes, by_key = [], set(), {}
    for i, (name, version, default, size, kind, bind) in enumerate(symbols):
        nodes.add(version)
        key = aliases.get((name, version), (None, None, None))[:2] if kind in ("OBJECT", "TLS") else None
        key = key if key != (None, None) else None
        by_key.setdefault(key if key is not None else ("own", i), []).append(
            (i, name, version, default, size, kind, bind))
    for group in by_key.values():
        kind = group[0][5]
        asm.append({"FUNC": ".text", "TLS": '.section .tbss,"awT",@nobits'}.get(kind, ".data"))
        asm.append(".balign 16")
        for i, name, version, default, size, kind, bind in group:
            local = f"kolo_stub_{i}"
            asm.append(f".weak {local}" if bind == "WEAK" else f".globl {local}")
            etype = {"FUNC": "@function", "TLS": "@tls_object"}.get(
                kind, "@gnu_unique_object" if bind == "UNIQUE" else "@object")
            asm.append(f".type {local}, {etype}")
            asm.append(f".size {local}, {max(size, 1)}")
            asm.append(f".symver {local}, {name}{'@@' if default else '@'}{version}, remove")
            asm.append(f"{local}:")
        asm.append(f".zero {max(max(g[4] for g in group), 1)}")
    stem = soname.replace("+", "x")
    (work / f"{stem}.s").write_text("\n".join(asm) + "\n")
    (work / f"{stem}.map").write_text(
        "".join(f"{v} {{ }};\n" for v in sorted(nodes, key=lambda v: (v.split("_")[0], version_key(v)))))
    subprocess.run(["gcc", "-shared", "-nostdlib", f"-Wl,-soname,{soname}",
                    f"-Wl,--version-script={work / (stem + '.map')}", str(work / f"{stem}.s"),
                    "-o", str(out)], check=True)


def real_symbols(paths):
    """(name, version) -> (library, address, bind) of every symbol of the real libraries."""
    return {(n, v): (str(p), value, bind) for p in paths
            for n, v, _, value, _, _, bind in dynamic_symbols(p)}


def system_library(name):
    path = subprocess.run(["gcc", f"-print-file-name={name}"], capture_output=True, text=True,
                          check=True).stdout.strip()
    return Path(path) if Path(path).is_absolute() else Path("/lib/x86_64-linux-gnu") / name


GLIBC_LIBRARIES = ["libc.so.6", "libm.so.6", "libpthread.so.0", "libdl.so.2", "librt.so.1",
                   "libutil.so.1", "libresolv.so.2", "ld-linux-x86-64.so.2"]


def glibc_stubs(zig, glibc, lib, work):
    """glibc's link stubs, libc_nonshared.a and crt1.o for the glibc version: zig makes
    them (which symbols that glibc had, at which versions, in which library); the stubs
    are written again with the aliases of the system's glibc."""
    src = work / "hello.c"
    src.write_text("int main(void) { return 0; }\n")
    env = dict(os.environ, ZIG_GLOBAL_CACHE_DIR=str(work / "zig-cache"),
               ZIG_LOCAL_CACHE_DIR=str(work / "zig-cache"))
    cmd = zig + ["cc", "-target", f"x86_64-linux-gnu.{glibc}", "-O2", "-fno-sanitize=all",
                 "-v", str(src), "-o", str(work / "hello")]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True)
    link = [l for l in (out.stdout + out.stderr).splitlines() if l.lstrip().startswith("ld.lld")]
    if out.returncode != 0 or not link:
        sys.exit(f"sysroot: {shlex.join(cmd)} failed:\n{out.stdout}{out.stderr}")
    made = {os.path.basename(a): a for a in shlex.split(link[-1])}
    made["ld-linux-x86-64.so.2"] = made.get("libld.so.2", "")
    real = real_symbols(system_library(n) for n in GLIBC_LIBRARIES)
    for name in ["crt1.o", "libc_nonshared.a"] + GLIBC_LIBRARIES:
        if not made.get(name):
            sys.exit(f"sysroot: zig's link line has no {name}: {link[-1]}")
        if name.endswith(".o") or name.endswith(".a"):
            shutil.copy(made[name], lib / name)
            continue
        # The real library's binding: ld copies a weak data symbol's strong alias along
        # (environ with __environ) only when it sees which one is weak.
        symbols = [(n, v, d, size, kind, real.get((n, v), (0, 0, bind))[2])
                   for n, v, d, _, size, kind, bind in dynamic_symbols(made[name])]
        write_stub(symbols, real, name, lib / name, work)
        if name != "libc.so.6" and name.startswith("lib"):
            os.symlink(name, lib / name.split(".so")[0].__add__(".so"))
    # Position-independent already (it reaches main and __libc_start_main through the GOT).
    shutil.copy(lib / "crt1.o", lib / "Scrt1.o")
    (lib / "libc.so").write_text(
        f"/* the link stub of glibc {glibc}'s libc (sysroot.py) */\n"
        f"GROUP ( {lib}/libc.so.6 {lib}/libc_nonshared.a AS_NEEDED ( {lib}/ld-linux-x86-64.so.2 ) )\n")


def libstdcxx_stub(allowed, lib, work):
    """libstdc++.so: the system libstdc++.so.6's symbols at allowed versions only, each at
    the newest of them (the default version a new reference binds to)."""
    real = system_library("libstdc++.so.6")
    ok = {f"GLIBCXX_{v}" for v in allowed["GLIBCXX"]} | {f"CXXABI_{v}" for v in allowed["CXXABI"]}
    best = {}
    for name, version, _, _, size, kind, bind in dynamic_symbols(real):
        if version in ok and (name not in best or version_key(version) > version_key(best[name][1])):
            best[name] = (name, version, True, size, kind, bind)
    write_stub(sorted(best.values()), real_symbols([real]), "libstdc++.so.6",
               lib / "libstdc++.so", work)
    return len(best)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tag", required=True, help="manylinux_2_28 and the like")
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--zig", default=f"{sys.executable} -m ziglang")
    args = parser.parse_args()
    m = re.fullmatch(r"manylinux_(\d+)_(\d+)", args.tag)
    if not m:
        sys.exit(f"sysroot: --tag must read manylinux_<major>_<minor>, not {args.tag}")
    glibc = f"{m.group(1)}.{m.group(2)}"
    allowed = policy_versions(args.tag)
    lib = args.out.resolve() / "lib"
    shutil.rmtree(lib.parent, ignore_errors=True)
    lib.mkdir(parents=True)
    with tempfile.TemporaryDirectory() as tmp:
        glibc_stubs(shlex.split(args.zig), glibc, lib, Path(tmp))
        count = libstdcxx_stub(allowed, lib, Path(tmp))
    here = Path(__file__).resolve().parent
    subprocess.run(["gcc", "-O2", "-fPIC", "-fvisibility=hidden", "-Wall", "-Wextra", "-Werror",
                    "-c", str(here / "glibc_compat.c"), "-o", str(lib / "glibc_compat.o")], check=True)
    # The toolchain file to hand CMake: it names this sysroot, so that CMake's own
    # checks (try_compile, check_language) link against it too.
    (lib.parent / "toolchain.cmake").write_text(
        f"# {args.tag}: made by scripts/wheel/sysroot.py\n"
        f'set(KOLO_WHEEL_SYSROOT "{lib.parent}")\n'
        f'include("{here / "toolchain.cmake"}")\n')
    print(f"sysroot: {args.out} for {args.tag}: glibc {glibc}'s stubs (zig), libstdc++ stub "
          f"({count} symbols up to GLIBCXX_{max(allowed['GLIBCXX'], key=version_key)}), glibc_compat.o")


if __name__ == "__main__":
    main()

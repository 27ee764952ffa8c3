#!/usr/bin/env python3
"""Checks that the code a page names in backticks exists: files and folders,
C++ classes, functions and members (`Class::member`), Python modules and their
names (`kolo.common.ops.check_adasum`), and kolo._core's functions.

    scripts/check_doc_refs.py [docs/architecture.md ...]

Prints every reference that resolves to nothing, one per line, and exits 1 if
there is any. What it cannot check is left alone: names of other projects
(MPI, NCCL, CUDA, PyTorch, TensorFlow, JAX, Horovod), environment variables,
constants in capitals, code fragments and plain words.
"""
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SOURCE_EXTS = (".cc", ".h", ".cu", ".py", ".fbs", ".sh")
FILE_EXTS = SOURCE_EXTS + (".md", ".txt", ".json", ".toml")
# Prefixes of names that belong to other projects or to the C library.
FOREIGN = ("MPI_", "MPIX_", "nccl", "cuda", "std::", "tf.", "jax.", "torch.", "lightning.",
           "pytorch_lightning", "os.", "np.", "_copy_to_iter", "follow_page_pte",
           "unpin_user_pages", "posix_fallocate", "process_vm_readv", "dlopen", "memcpy",
           "bind()", "perf", "vader", "ptrace_scope", "libnccl", "libtorch")
# Names of other projects that look like ours.
FOREIGN_NAMES = {"ProcessGroup", "_DistributedAdasumOptimizer", "ResNet", "Horovod"}
# Horovod's files that the pages compare with.
FOREIGN_FILES = {"adasum.h", "adasum_mpi.cc", "adasum_gpu_operations.cc", "operations.cc"}
# The repository's top folders and the Python package's: a reference under
# one of them is a path even without an extension.
TOP = ("base", "ops", "runtime", "bindings", "launcher", "python", "test", "docs", "bench",
       "examples", "scripts", "kolo")


def tracked_files():
    """The repository's files: git's list, or a walk outside a checkout."""
    try:
        out = subprocess.run(["git", "-C", ROOT, "ls-files"], capture_output=True, text=True,
                             check=True).stdout
        return [f for f in out.splitlines() if os.path.exists(os.path.join(ROOT, f))]
    except (OSError, subprocess.CalledProcessError):
        files = []
        for top, dirs, names in os.walk(ROOT):
            dirs[:] = [d for d in dirs if not d.startswith((".", "build", "__pycache__"))]
            files += [os.path.relpath(os.path.join(top, n), ROOT) for n in names]
        return files


class Index:
    def __init__(self):
        self.files = tracked_files()
        self.dirs = set()
        for f in self.files:
            parts = f.split("/")
            for i in range(1, len(parts)):
                self.dirs.add("/".join(parts[:i]))
        self.text = {}
        for f in self.files:
            if f.endswith(SOURCE_EXTS) or os.path.basename(f) == "CMakeLists.txt":
                with open(os.path.join(ROOT, f), encoding="utf-8", errors="replace") as fh:
                    self.text[f] = fh.read()
        self.words = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", "\n".join(self.text.values())))

    def path_exists(self, ref):
        """A file or folder whose path ends with `ref` (components, globs allowed)."""
        ref = ref.rstrip("/")
        pattern = re.compile("(^|/)" + re.escape(ref).replace(r"\*", "[^/]*") + "$")
        return any(pattern.search(p) for p in list(self.dirs) + self.files)

    def stem_exists(self, ref):
        """`ops/cpu_kernels`: a file of that path with any extension."""
        return any(re.search("(^|/)" + re.escape(ref) + r"\.[a-z]+$", f) for f in self.files)

    def declares(self, scope):
        """Files that declare class/struct/namespace `scope`, with their .cc/.h twins."""
        decl = re.compile(r"\b(class|struct|namespace)\s+(\w+\s+)?" + re.escape(scope) + r"\b")
        found = {f for f, t in self.text.items() if decl.search(t)}
        twins = {os.path.splitext(f)[0] for f in found}
        return [f for f in self.text if os.path.splitext(f)[0] in twins]

    def member_exists(self, scope, member):
        word = re.compile(r"\b" + re.escape(member) + r"\b")
        return any(word.search(self.text[f]) for f in self.declares(scope))

    def python_ref_exists(self, ref):
        parts = ref.split(".")
        if parts[:2] == ["kolo", "_core"]:
            return len(parts) == 2 or any(
                '"%s"' % parts[2] in t for f, t in self.text.items() if f.startswith("bindings/"))
        for n in range(len(parts), 0, -1):
            base = os.path.join("python", *parts[:n])
            for module in (base + ".py", os.path.join(base, "__init__.py")):
                if module in self.text:
                    rest = parts[n:]
                    if not rest:
                        return True
                    define = re.compile(r"^\s*(def|class)\s+%s\b|^%s\s*=|import .*\b%s\b" %
                                        ((re.escape(rest[0]),) * 3), re.M)
                    return bool(define.search(self.text[module]))
        return False


def references(path):
    with open(path, encoding="utf-8") as fh:
        text = fh.read()
    text = re.sub(r"```.*?```", "", text, flags=re.S)  # diagrams and code blocks
    for line_no, line in enumerate(text.splitlines(), 1):
        for ref in re.findall(r"`([^`\n]+)`", line):
            yield line_no, ref.strip()


def check(ref, index):
    """None when `ref` resolves or cannot be checked, else why it does not."""
    bare = re.sub(r"\(.*\)$", "", ref).rstrip("*")  # `Foo::Bar()`, `Enqueue*`
    if not ref or ref.startswith(FOREIGN) or bare in FOREIGN_NAMES or ref.startswith(("../", "/")):
        return None
    if ref in FOREIGN_FILES:
        return None
    if ref.startswith(("build/", "kolo/_core")) or " " in ref:
        return None  # build outputs and code fragments
    if "{" in ref:  # ops/adasum.{h,cc}
        head, alts = re.match(r"(.*)\{(.*)\}$", ref).groups()
        missing = [head + a for a in alts.split(",") if not index.path_exists(head + a)]
        return "no file " + ", ".join(missing) if missing else None
    if ref.endswith(FILE_EXTS) or ref.endswith("/") or ref.split("/")[0] in TOP and "/" in ref:
        if index.path_exists(ref) or index.stem_exists(ref):
            return None
        return "no such file or folder"
    if "::" in bare:
        scope, member = bare.rsplit("::", 1)
        scope = scope.split("::")[-1]
        if scope == "kolo" or scope[:1].islower() and not index.declares(scope):
            return None if member in index.words else "no %s in the sources" % member
        if not index.declares(scope):
            return "no class or namespace %s" % scope
        return None if index.member_exists(scope, member) else "%s declares no %s" % (scope,
                                                                                      member)
    if re.match(r"^kolo(\.\w+)+$", bare):
        return None if index.python_ref_exists(bare) else "no such module or name"
    if re.match(r"^_?[A-Z][A-Za-z0-9]*[a-z][A-Za-z0-9]*$", bare):  # CamelCase names
        return None if bare in index.words else "no %s in the sources" % bare
    if ref.endswith("()") and re.match(r"^\w+$", bare):
        return None if bare in index.words else "no %s in the sources" % bare
    return None


def main(argv):
    pages = argv[1:] or [os.path.join(ROOT, "docs", "architecture.md")]
    index = Index()
    bad = 0
    for page in pages:
        for line_no, ref in references(page):
            why = check(ref, index)
            if why:
                bad += 1
                print("%s:%d: `%s`: %s" % (os.path.relpath(page, ROOT), line_no, ref, why))
    if bad:
        print("%d reference(s) resolve to nothing" % bad)
        return 1
    print("doc references: OK")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

"""The shape of the kolo Python package (docs/architecture.md, "The Python side"),
checked from its sources without importing them:

- no module is longer than 500 lines;
- the modules' imports of each other have no cycle (deferred imports inside functions
  included: a cycle there still ties the modules together);
- only the engine (kolo.common.engine) and the lifecycle (kolo.common.basics, and
  kolo.common.join for ranks another launcher started) call kolo._core;
  kolo.torch.mpi_ops only re-exports it, as Horovod's module has its library;
- one way in for a tensor: every entry of kolo._core whose name ends in ``_async`` and
  that takes something a tensor's memory could cross as (an address: ``uintptr_t``,
  ``void*``, or a Python object) takes a reader first (``const TensorReader&``,
  bindings/collective_entries.cc), and the engine calls each of them with ``reader``
  first; the rest take plain numbers (join, barrier, process sets);
- readers are made only by adapters: a module that calls ``tensor_reader`` defines an
  Adapter subclass, and calls it once, at module level.

Prints the import graph and "package shape: OK"; exits 1 naming what breaks a rule.
Usage: package_shape_check.py [PACKAGE_DIR [BINDINGS_DIR]] (default: python/kolo and
bindings/ of this checkout)."""
import ast
import os
import re
import shutil
import sys
import tempfile

MAX_LINES = 500
CORE_CALLERS = {"kolo.common.engine", "kolo.common.basics", "kolo.common.join"}
CORE_REEXPORTS = {"kolo.torch.mpi_ops"}


def modules(package_dir):
    """{module name: path} for every .py file of the package."""
    root = os.path.dirname(os.path.abspath(package_dir))
    found = {}
    for folder, _, files in os.walk(package_dir):
        for f in files:
            if f.endswith(".py"):
                path = os.path.join(folder, f)
                name = os.path.relpath(path, root)[:-3].replace(os.sep, ".")
                found[name[:-len(".__init__")] if name.endswith(".__init__") else name] = path
    return found


def imports(name, path, known):
    """The package's modules that ``name`` imports (by name), and whether it uses _core."""
    tree = ast.parse(open(path).read(), path)
    out, uses_core = set(), False
    package = name if path.endswith("__init__.py") else name.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(parent + ([base] if base else []))
            # `from pkg import mod` imports the module mod; `from mod import name` the
            # module mod. kolo._core is a module without a .py file.
            targets = ["%s.%s" % (base, a.name)
                       if "%s.%s" % (base, a.name) in set(known) | {"kolo._core"} else base
                       for a in node.names]
        else:
            continue
        for t in targets:
            if t == "kolo._core":
                uses_core = True
            while t and t not in known:
                t = t.rpartition(".")[0]
            if t and t != name and t != "kolo":
                out.add(t)
    return out, uses_core


def core_entries(bindings_dir):
    """{name: first parameter} of every ``*_async`` entry of kolo._core defined in
    ``bindings_dir``'s .cc files, and the problems found there: an entry that takes an
    address or a Python object without a reader first."""
    entries, problems = {}, []
    for f in sorted(os.listdir(bindings_dir)):
        if not f.endswith(".cc"):
            continue
        text = open(os.path.join(bindings_dir, f)).read()
        for m in re.finditer(r'm\.def\(\s*"(\w+_async)",\s*(&\w+|\[[^\]]*\]\s*\(([^)]*)\))', text):
            name, target = m.group(1), m.group(2)
            if target.startswith("&"):
                found = re.search(r"\n\w[\w:<>]*\s+%s\(([^)]*)\)\s*\{" % target[1:], text)
                params = found.group(1) if found else ""
            else:
                params = m.group(3)
            params = " ".join(params.split())
            entries[name] = params.split(",")[0].strip()
            takes_memory = re.search(r"uintptr_t|void\s*\*|py::(handle|object)", params)
            if takes_memory and "TensorReader&" not in entries[name]:
                problems.append("kolo._core.%s (%s) takes %s without a reader first: a second "
                                "way into the core" % (name, f, takes_memory.group(0)))
    return entries, problems


def engine_calls(path, entries):
    """Problems of the engine's calls of kolo._core's reader entries: ``reader`` first."""
    problems = []
    for node in ast.walk(ast.parse(open(path).read(), path)):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and isinstance(node.func.value, ast.Name) and node.func.value.id == "_core"
                and "TensorReader&" in entries.get(node.func.attr, "")):
            first = node.args[0] if node.args else None
            if not (isinstance(first, ast.Name) and first.id == "reader"):
                problems.append("%s:%d calls kolo._core.%s without a reader first"
                                % (os.path.basename(path), node.lineno, node.func.attr))
    return problems


def reader_makers(name, path):
    """Problems of a module that makes readers: only an adapter module, once, at module
    level."""
    tree = ast.parse(open(path).read(), path)
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and (
        getattr(n.func, "attr", None) == "tensor_reader" or getattr(n.func, "id", None)
        == "tensor_reader")]
    if not calls or name == "kolo.common.engine":
        return []
    adapters = [n for n in tree.body if isinstance(n, ast.ClassDef) and any(
        getattr(b, "id", getattr(b, "attr", None)) == "Adapter" for b in n.bases)]
    top = [n for n in tree.body if isinstance(n, (ast.Assign, ast.Expr))
           and any(c in calls for c in ast.walk(n))]
    if not adapters or len(calls) != 1 or len(top) != 1:
        return ["%s makes a reader but is not an adapter module with one reader made at "
                "module level (kolo.common.adapter)" % name]
    return []


def cycle(graph):
    """One import cycle as a list of modules, or None."""
    state = {}

    def visit(node, stack):
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == "open":
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt, stack)
                if found:
                    return found
        stack.pop()
        state[node] = "done"
        return None
    for node in sorted(graph):
        if node not in state:
            found = visit(node, [])
            if found:
                return found
    return None


def check(package_dir, bindings_dir, show=True):
    """The problems of the tree (printing the import graph when ``show``)."""
    found = modules(package_dir)
    entries, problems = core_entries(bindings_dir)
    if not any("TensorReader&" in first for first in entries.values()):
        problems.append("no entry of kolo._core in %s takes a reader" % bindings_dir)
    graph = {}
    for name, path in sorted(found.items()):
        lines = sum(1 for _ in open(path))
        if lines > MAX_LINES:
            problems.append("%s has %d lines (at most %d)" % (name, lines, MAX_LINES))
        graph[name], uses_core = imports(name, path, found)
        if uses_core and name not in CORE_CALLERS | CORE_REEXPORTS:
            problems.append("%s imports kolo._core; only %s call it"
                            % (name, " and ".join(sorted(CORE_CALLERS))))
        if uses_core:
            problems += engine_calls(path, entries)
        problems += reader_makers(name, path)
    for name in sorted(graph):
        if show:
            print("%s -> %s" % (name, ", ".join(sorted(graph[name])) or "-"))
    found_cycle = cycle(graph)
    if found_cycle:
        problems.append("import cycle: %s" % " -> ".join(found_cycle))
    return problems, len(found), sum("TensorReader&" in f for f in entries.values())


# Second ways in that the check must refuse: (file, text appended to it).
SECOND_WAYS_IN = [
    ("bindings/collective_entries.cc",
     '\nvoid Views(py::module_& m) {\n  m.def("allreduce_view_async", [](uintptr_t in, '
     'int dtype) { return 0; });\n}\n'),
    ("python/kolo/common/engine.py",
     "\n\ndef view_async(view):\n    return _core.allreduce_async(view, None)\n"),
    ("python/kolo/torch/autograd.py",
     "\n_SECOND = _engine.tensor_reader('attributes', object, {}, None)\n"),
    ("python/kolo/torch/_async.py", "\nfrom kolo import _core\n"),
]


def refuses_second_ways_in(package_dir, bindings_dir):
    """Whether the check fails on each of SECOND_WAYS_IN, made in a copy of the tree."""
    for path, text in SECOND_WAYS_IN:
        with tempfile.TemporaryDirectory() as tmp:
            shutil.copytree(package_dir, os.path.join(tmp, "python", "kolo"))
            shutil.copytree(bindings_dir, os.path.join(tmp, "bindings"))
            with open(os.path.join(tmp, path), "a") as f:
                f.write(text)
            problems, _, _ = check(os.path.join(tmp, "python", "kolo"),
                                   os.path.join(tmp, "bindings"), show=False)
            if not problems:
                print("package shape: the check misses a second way in: %s gets %r"
                      % (path, text))
                return False
    return True


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    package_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        here, "..", "..", "python", "kolo")
    bindings_dir = sys.argv[2] if len(sys.argv) > 2 else os.path.join(
        package_dir, "..", "..", "bindings")
    problems, modules_count, reader_entries = check(package_dir, bindings_dir)
    for p in problems:
        print("package shape: %s" % p)
    if problems or not refuses_second_ways_in(package_dir, bindings_dir):
        return 1
    print("package shape: OK (%d modules; %d entries of kolo._core take a reader; %d second "
          "ways in refused)" % (modules_count, reader_entries, len(SECOND_WAYS_IN)))
    return 0


if __name__ == "__main__":
    sys.exit(main())

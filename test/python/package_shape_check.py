"""The shape of the kolo Python package (docs/architecture.md, "The Python side"),
checked from its sources without importing them:

- no module is longer than 500 lines;
- the modules' imports of each other have no cycle (deferred imports inside functions
  included: a cycle there still ties the modules together);
- only the engine (kolo.common.engine) and the lifecycle (kolo.common.basics, and
  kolo.common.join for ranks another launcher started) call kolo._core;
  kolo.torch.mpi_ops only re-exports it, as Horovod's module has its library.

Prints the import graph and "package shape: OK"; exits 1 naming what breaks a rule.
Usage: package_shape_check.py [PACKAGE_DIR] (default: python/kolo of this checkout)."""
import ast
import os
import sys

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
            # module mod.
            targets = ["%s.%s" % (base, a.name) if "%s.%s" % (base, a.name) in known else base
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


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    package_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        here, "..", "..", "python", "kolo")
    found = modules(package_dir)
    graph, problems = {}, []
    for name, path in sorted(found.items()):
        lines = sum(1 for _ in open(path))
        if lines > MAX_LINES:
            problems.append("%s has %d lines (at most %d)" % (name, lines, MAX_LINES))
        graph[name], uses_core = imports(name, path, found)
        if uses_core and name not in CORE_CALLERS | CORE_REEXPORTS:
            problems.append("%s imports kolo._core; only %s call it"
                            % (name, " and ".join(sorted(CORE_CALLERS))))
    for name in sorted(graph):
        print("%s -> %s" % (name, ", ".join(sorted(graph[name])) or "-"))
    found_cycle = cycle(graph)
    if found_cycle:
        problems.append("import cycle: %s" % " -> ".join(found_cycle))
    for p in problems:
        print("package shape: %s" % p)
    if problems:
        return 1
    print("package shape: OK (%d modules)" % len(found))
    return 0


if __name__ == "__main__":
    sys.exit(main())

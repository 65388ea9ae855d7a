"""The package's shape: one installed import name, and layers that import only downwards.

Layers, lowest first (``docs/architecture.md``): the algorithm language ``tensorlang.*`` (the
``tensorlang/`` folder), ``tensorlang.schedule`` (``schedule/``), ``tensorlang.backends``
(``backends/``), ``tensorlang.autotuner`` (``autotune/``). A module imports its own layer and
lower ones only — at module level or inside a function alike — and no module below the top
imports the public entry point ``tensorlang`` itself (whose ``tl.compile`` / ``tl.autotune``
reach every layer); ``tensorlang/__init__.py`` is the one module that may import any layer.
"""

from __future__ import annotations

import ast
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

#: checkout folder -> installed package, in layer order (lowest first)
FOLDERS = {"tensorlang": "tensorlang", "schedule": "tensorlang.schedule",
           "backends": "tensorlang.backends", "autotune": "tensorlang.autotuner"}
LAYERS = list(FOLDERS.values())
OLD_NAMES = ("schedule", "autotune", "backends")


def _modules():
    """(dotted module name, path) of every source file of the package."""
    for folder, package in FOLDERS.items():
        for dirpath, dirnames, files in os.walk(os.path.join(ROOT, folder)):
            dirnames[:] = [d for d in dirnames if d != "__pycache__"]
            for f in sorted(files):
                if f.endswith(".py"):
                    rel = os.path.relpath(os.path.join(dirpath, f), os.path.join(ROOT, folder))
                    parts = [*package.split("."), *rel[:-3].split(os.sep)]
                    if parts[-1] == "__init__":
                        parts = parts[:-1]
                    yield ".".join(parts), os.path.join(dirpath, f)


def _layer(module: str) -> int | None:
    """Index in LAYERS of the deepest layer package containing ``module`` (None: not ours)."""
    found = None
    for n, package in enumerate(LAYERS):
        if module == package or module.startswith(package + "."):
            if found is None or len(package) > len(LAYERS[found]):
                found = n
    return found


def _imports(module: str, path: str):
    """(imported module, line) of every import statement in the file, relative ones resolved."""
    package = module if path.endswith("__init__.py") else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(open(path, encoding="utf-8").read(), path)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[:len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            yield target, node.lineno
            for alias in node.names:  # "from tensorlang import x" may name a submodule x
                if _layer(f"{target}.{alias.name}") is not None and target in LAYERS:
                    yield f"{target}.{alias.name}", node.lineno


def test_every_package_folder_is_an_installed_subpackage():
    # pyproject.toml lists the packages by hand (the folders live outside tensorlang/): a new
    # package folder missing from the list would be left out of a wheel
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        pytest.skip("tomllib needs Python 3.11")
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as fh:
        tool = tomllib.load(fh)["tool"]["setuptools"]
    assert tool["package-dir"] == {pkg: folder for folder, pkg in FOLDERS.items()}
    packages = {m for m, p in _modules() if p.endswith("__init__.py")}
    assert set(tool["packages"]) == packages


def test_no_module_imports_the_old_top_level_names():
    # the installed package has one import name; "import schedule" would find the PyPI package
    # of that name (or nothing) outside a checkout
    bad = []
    dirs = [*FOLDERS, "tests", "benchmarks", "examples"]
    for d in dirs:
        for dirpath, _, files in os.walk(os.path.join(ROOT, d)):
            for f in files:
                if not f.endswith(".py"):
                    continue
                path = os.path.join(dirpath, f)
                for node in ast.walk(ast.parse(open(path, encoding="utf-8").read(), path)):
                    names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                        [node.module or ""] if isinstance(node, ast.ImportFrom) and \
                        not node.level else []
                    bad += [f"{os.path.relpath(path, ROOT)}:{node.lineno} imports {n}"
                            for n in names if n.split(".")[0] in OLD_NAMES]
    assert not bad, "\n".join(bad)


def test_layers_import_only_downwards():
    bad = []
    for module, path in _modules():
        if module == "tensorlang":
            continue  # the public entry point
        mine = _layer(module)
        for target, line in _imports(module, path):
            theirs = _layer(target)
            if theirs is None:
                continue
            where = f"{os.path.relpath(path, ROOT)}:{line}"
            if target == "tensorlang" and mine > 0:
                bad.append(f"{where}: {module} imports the entry point tensorlang "
                           f"(import the module it needs, e.g. tensorlang.language)")
            elif theirs > mine:
                bad.append(f"{where}: {module} ({LAYERS[mine]}) imports {target} "
                           f"({LAYERS[theirs]}), a higher layer")
    assert not bad, "\n".join(bad)


def test_the_layer_check_catches_an_upward_import(tmp_path):
    # the checker itself: an upward import and an entry-point import are both found
    src = tmp_path / "m.py"
    src.write_text("from tensorlang.autotuner.auto import compile_auto\nimport tensorlang\n")
    found = [t for t, _ in _imports("tensorlang.backends.compile", str(src))]
    assert _layer(found[0]) == 3 > _layer("tensorlang.backends.compile") == 2
    assert found[1] == "tensorlang" and _layer("tensorlang.schedule.view") == 1


def test_the_wheel_installs_one_top_level_name(tmp_path):
    # what "pip install tensorlang" would put into site-packages: tensorlang/ and its
    # dist-info, nothing else; the folders' modules under their installed names
    import shutil
    import subprocess
    import zipfile

    src = tmp_path / "src"  # a copy: setuptools writes build/ beside the sources it builds
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info", "build")
    for folder in FOLDERS:
        shutil.copytree(os.path.join(ROOT, folder), src / folder, ignore=ignore)
    for f in ("pyproject.toml", "README.md"):
        shutil.copy(os.path.join(ROOT, f), src / f)
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w",
                        str(tmp_path), str(src)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    (wheel,) = tmp_path.glob("tensorlang-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names}
    assert len(tops) == 2 and {t for t in tops if not t.endswith(".dist-info")} == {"tensorlang"}
    for module in ("tensorlang/schedule/legality/check.py", "tensorlang/backends/llvm/codegen.py",
                   "tensorlang/autotuner/cli.py", "tensorlang/language.py"):
        assert module in names
    entry = next(n for n in names if n.endswith("entry_points.txt"))
    assert "tensorlang = tensorlang.autotuner.cli:main" in \
        zipfile.ZipFile(wheel).read(entry).decode()


#: the autotuner modules that model the CPU the LLVM backend targets (its rule-based schedule,
#: search space, cost-model features; ``narrow_tile`` and ``one_pass`` the chunks and blocks its
#: parallel loops hand out);
#: every other tuner module is backend-neutral
CPU_MODELS = {"tensorlang.autotuner.cpu_model", "tensorlang.autotuner.heuristic",
              "tensorlang.autotuner.narrow_tile", "tensorlang.autotuner.one_pass",
              "tensorlang.autotuner.rfactor_rules", "tensorlang.autotuner.stream_rules",
              "tensorlang.autotuner.space", "tensorlang.autotuner.vector_width",
              "tensorlang.autotuner.features"}
#: what a backend-neutral module may import of the backends layer
BACKEND_INTERFACE = {"tensorlang.backends", "tensorlang.backends.base",
                     "tensorlang.backends.compile"}


def test_the_tuner_reaches_backends_only_through_the_interface():
    # a new backend (registered with register_backend) must be usable by the tuner, the
    # measurement workers, the cache and the CLI without editing them
    bad = []
    for module, path in _modules():
        if not module.startswith("tensorlang.autotuner") or module in CPU_MODELS:
            continue
        for target, line in _imports(module, path):
            if _layer(target) == LAYERS.index("tensorlang.backends") and \
                    target not in BACKEND_INTERFACE:
                bad.append(f"{os.path.relpath(path, ROOT)}:{line}: {module} imports {target} "
                           f"(use tensorlang.backends.base.get_backend)")
    assert not bad, "\n".join(bad)


#: import cycles kept on purpose: ``str(expr)`` renders through the printer, and the printer
#: needs the node classes (Halide's ``IRPrinter`` and ``Expr`` are tied the same way)
ALLOWED_CYCLES = [{"tensorlang.expr", "tensorlang.printer"}]


def _import_graph() -> dict[str, set[str]]:
    """Module -> the package's modules it imports (module level or in a function; imports under
    ``if TYPE_CHECKING:`` do not run and are left out)."""
    graph = {}
    for module, path in _modules():
        tree = ast.parse(open(path, encoding="utf-8").read(), path)
        typing_only = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If)
                       and "TYPE_CHECKING" in ast.unparse(node.test) for n in ast.walk(node)}
        deps = set()
        for target, line in _imports(module, path):
            deps.add((target, line))
        lines = {n.lineno for n in ast.walk(tree) if id(n) in typing_only
                 and isinstance(n, (ast.Import, ast.ImportFrom))}
        graph[module] = {t for t, line in deps if line not in lines}
    known = set(graph)
    return {m: {d for d in ds if d in known and d != m} for m, ds in graph.items()}


def _cycles(graph: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[set[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while True:
                w = stack.pop()
                comp.add(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(comp)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_import_cycles():
    # a cycle is what function-local imports were hiding: every module can be imported alone,
    # in any order, and read bottom-up
    cycles = [sorted(c) for c in _cycles(_import_graph()) if c not in ALLOWED_CYCLES]
    assert not cycles, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in cycles)


def test_the_cycle_check_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [{"a", "b", "c"}]
    assert _cycles({"a": {"b"}, "b": set()}) == []

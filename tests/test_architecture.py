"""The house rules of the code's layout, checked on the source: imports run downward and modules
stay readable.

- ``fairseq_bio`` (the plugin) never imports ``fairseq_bio_preprocess`` (the corpus commands, the
  checkout's ``preprocess/``) or ``benchmarks``; ``fairseq_bio_preprocess`` may import the plugin
  but never ``benchmarks``.
- No import cycle among the modules of ``fairseq_bio`` and ``fairseq_bio_preprocess``, counting
  imports inside functions too (a lazy import still ties two modules together), and counting the
  package ``__init__`` files an import runs: Python runs ``a/b/__init__.py`` before ``a/b/c.py``, so
  a module outside package ``a.b`` that imports ``a.b.c`` depends on all that ``a/b/__init__.py``
  imports (``from ..hf.common import x`` runs ``hf/__init__.py``, which imports the whole hf
  package). The root package's own ``__init__`` is not counted: ``fairseq_bio/__init__.py`` is the
  plugin's registration entry (patches, tasks, models, criterions), which Python runs before any
  module of the plugin, whoever imports it; it is above every one of them by design, not through an
  import a module chose.
- No module over ``MAX_LINES`` lines except the ones named in ``LONG_MODULES``, each with why it is
  one thing.
"""

import ast
from pathlib import Path
from typing import Dict, Iterator, List, Set

REPO = Path(__file__).resolve().parents[1]
# installed package name -> its directory in the checkout
PACKAGES = {"fairseq_bio": "fairseq_bio", "fairseq_bio_preprocess": "preprocess"}
# 650 when lines were 120 columns; black at 100 makes the same code about 20 % longer
# (fairseq_bio and preprocess: 22,887 -> 27,351 lines).
MAX_LINES = 780
LONG_MODULES: Dict[str, str] = {}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    parts[0] = {directory: package for package, directory in PACKAGES.items()}[parts[0]]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> Dict[str, Path]:
    return {
        module_name(p): p
        for directory in PACKAGES.values()
        for p in sorted((REPO / directory).rglob("*.py"))
    }


def imported_names(name: str, path: Path, known) -> Iterator[str]:
    """Every absolute module name an import statement of the file names (``from a import b``:
    ``a.b`` when that is a module, else ``a``), anywhere in the file."""
    is_package = path.name == "__init__.py"
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = name.split(".") if is_package else name.split(".")[:-1]
                parts = parts[: len(parts) - (node.level - 1)]
                base = ".".join(parts + ([base] if base else []))
            for alias in node.names:
                yield f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base


def packages_run(importer: str, target: str) -> Iterator[str]:
    """The packages whose ``__init__`` importing ``target`` runs when ``importer`` is not inside
    them yet: each package above ``target`` except the root (see the module's docstring)."""
    parts = target.split(".")
    for depth in range(2, len(parts)):
        package = ".".join(parts[:depth])
        if importer != package and not importer.startswith(package + "."):
            yield package


def import_graph() -> Dict[str, Set[str]]:
    """{module: the modules of ours it imports}, each import resolved to the longest module name
    that exists, plus the package ``__init__`` files that import runs."""
    mods = modules()
    graph = {}
    for name, path in mods.items():
        deps = set()
        for target in imported_names(name, path, mods):
            while target and target not in mods:
                target = target.rpartition(".")[0]
            if target:
                deps.update(p for p in packages_run(name, target) if p in mods)
                deps.add(target)
        deps.discard(name)
        graph[name] = deps
    return graph


def cycles(graph: Dict[str, Set[str]]) -> List[List[str]]:
    """The strongly connected components with more than one module (Tarjan, iteratively)."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on_stack: Set[str] = set()
    found = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_plugin_never_imports_the_scripts_or_benchmarks():
    mods = modules()
    wrong = []
    for name, path in mods.items():
        plugin = name.split(".")[0] == "fairseq_bio"
        banned = ("fairseq_bio_preprocess", "benchmarks") if plugin else ("benchmarks",)
        for target in imported_names(name, path, mods):
            if target.split(".")[0] in banned:
                wrong.append(f"{path.relative_to(REPO)} imports {target}")
    assert not wrong, "\n".join(wrong)


def test_no_import_cycles():
    assert cycles(import_graph()) == []


def test_an_import_from_outside_a_package_runs_its_init():
    """``runner/execute.py``'s ``from ..inference.predictions import ...`` runs
    ``inference/__init__.py`` first; an import inside the package (``hf/export.py``'s
    ``from .common import ...``) does not run its ``__init__`` again.
    """
    graph = import_graph()
    assert {"fairseq_bio.inference.predictions", "fairseq_bio.inference"} <= graph[
        "fairseq_bio.runner.execute"
    ]
    assert "fairseq_bio.hf.common" in graph["fairseq_bio.hf.export"]
    assert "fairseq_bio.hf" not in graph["fairseq_bio.hf.export"]
    assert "fairseq_bio" not in graph["fairseq_bio.hf.export"]


def test_an_import_back_up_the_real_graph_is_a_cycle():
    """``test_no_import_cycles`` can fail: a module below importing one that imports it (the
    package's own graph, one import added back up an existing edge) is reported, with the modules
    between them."""
    graph = import_graph()
    graph["fairseq_bio.inference.predictions"] = graph["fairseq_bio.inference.predictions"] | {
        "fairseq_bio.runner.execute"
    }
    (found,) = cycles(graph)
    assert {"fairseq_bio.runner.execute", "fairseq_bio.inference.predictions"} <= set(found)


def test_modules_stay_readable():
    long = {
        name: n
        for name, path in modules().items()
        if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES
        and name not in LONG_MODULES
    }
    assert (
        not long
    ), f"modules over {MAX_LINES} lines (split them, or say in LONG_MODULES why one is one thing): {long}"

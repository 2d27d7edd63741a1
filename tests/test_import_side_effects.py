"""What ``import fairseq_bio`` changes in fairseq, torch and the interpreter: exactly the rows of
the table in docs/stack.md ("What `import fairseq_bio` changes"), the one list of them.

The table is read here: a probe compares every attribute of every fairseq/torch module (and of their
classes), ``sys.excepthook``, the signal handlers, ``os.environ`` and ``warnings.filters`` before
and after the import with its rows (one more or one fewer fails until the table is updated); each
row must name the plugin module that makes the change, say what it fixes and why it must happen at
import, and name tests that exist.
"""

import ast
import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "stack.md"
PATCHES = REPO / "fairseq_bio" / "patches"
HEADING = "## What `import fairseq_bio` changes"
COLUMNS = ["attribute", "by", "what it fixes or adds", "why at plugin import", "test"]

PROBE = textwrap.dedent(
    """
    import importlib, inspect, json, os, signal, sys, warnings

    ROOTS = ("fairseq", "fairseq_cli", "torch", "numpy", "omegaconf", "hydra")

    def watched(name):
        return name.split(".")[0] in ROOTS

    def snapshot():
        state = {}
        for module in {id(m): m for m in list(sys.modules.values()) if m is not None}.values():
            name = getattr(module, "__name__", None)
            if not isinstance(name, str) or not watched(name):
                continue
            try:
                items = list(vars(module).items())
            except TypeError:
                continue
            for attr, value in items:
                state[f"{name}.{attr}"] = id(value)
                if inspect.isclass(value) and getattr(value, "__module__", None) == name:
                    for class_attr, class_value in list(vars(value).items()):
                        state[f"{name}.{attr}.{class_attr}"] = id(class_value)
        state["sys.excepthook"] = id(sys.excepthook)
        state["warnings.filters"] = hash(repr(warnings.filters))
        for sig in (signal.SIGUSR1, signal.SIGUSR2, signal.SIGTERM, signal.SIGINT):
            state[f"signal.{sig.name}"] = id(signal.getsignal(sig))
        state.update({f'os.environ["{k}"]': hash(v) for k, v in os.environ.items()})
        return state

    if sys.argv[1] == "modules":
        import fairseq_bio
        print(json.dumps(sorted(n for n in sys.modules if watched(n))))
    else:
        for name in json.loads(sys.argv[2]):
            try:
                importlib.import_module(name)
            except Exception:
                pass
        before = snapshot()
        import fairseq_bio
        after = snapshot()
        print(json.dumps(sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))))
    """
)

# FAIRSEQ_BIO_TRACEBACK=1 (and no HYDRA_FULL_ERROR of the caller's): the conditional row,
# HYDRA_FULL_ERROR, shows too.
PROBE_ENV = {
    **{k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"},
    "FAIRSEQ_BIO_TRACEBACK": "1",
}


def probe(*args) -> list:
    out = subprocess.run(
        [sys.executable, "-c", PROBE, *args],
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO,
        env=PROBE_ENV,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def table() -> dict:
    """docs/stack.md's rows: {attribute: {column: cell}}."""
    text = DOC.read_text(encoding="utf-8")
    assert HEADING in text, f"{DOC.name}: no section {HEADING!r}"
    section = text.split(HEADING, 1)[1].split("\n## ", 1)[0]
    lines = [line.strip() for line in section.splitlines() if line.startswith("|")]
    assert lines, f"{DOC.name}: no table under {HEADING!r}"

    def cells(line):
        return [cell.strip() for cell in line.strip("|").split("|")]

    assert cells(lines[0]) == COLUMNS, cells(lines[0])
    rows = {}
    for line in lines[2:]:
        row = dict(zip(COLUMNS, cells(line)))
        attribute = re.fullmatch(r"`([^`]+)`", row["attribute"])
        assert attribute and len(cells(line)) == len(COLUMNS), line
        assert attribute.group(1) not in rows, f"listed twice: {attribute.group(1)}"
        rows[attribute.group(1)] = row
    return rows


def test_import_changes_exactly_the_rows_of_the_table():
    # Every fairseq/torch module the plugin's import loads is imported first, so that a replacement
    # in any of them shows as a changed attribute (and a new attribute of an existing module or
    # class as one too).
    modules = probe("modules")
    changed, listed = set(probe("diff", json.dumps(modules))), set(table())
    assert changed - listed == set(), f"import fairseq_bio changes these, not in {DOC.name}'s table"
    assert (
        listed - changed == set()
    ), f"in {DOC.name}'s table, but import fairseq_bio no longer changes them"


def test_each_row_names_its_module_says_why_and_names_existing_tests():
    for attribute, row in table().items():
        modules = re.findall(r"`(\w+)`", row["by"])
        assert modules and all((PATCHES / f"{m}.py").is_file() for m in modules), (
            attribute,
            row["by"],
        )
        assert row["what it fixes or adds"] and row["why at plugin import"], attribute
        tests = re.findall(r"`(test_\w+\.py)::(test_\w+)`", row["test"])
        assert tests, f"{attribute}: no test named as `test_file.py::test_name`"
        for file, name in tests:
            path = REPO / "tests" / file
            assert path.is_file(), f"{attribute}: {file}: no such test file"
            defined = {
                n.name
                for n in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
                if isinstance(n, ast.FunctionDef)
            }
            assert name in defined, f"{attribute}: {file} has no {name}"


def installed_in_order() -> list:
    """The modules whose ``install()`` ``patches.install()`` calls, in its order; ``__init__`` (the
    module's own warning filter, set as it is imported) first."""
    tree = ast.parse((PATCHES / "__init__.py").read_text(encoding="utf-8"))
    install = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "install")
    calls = [
        s.value.func
        for s in install.body
        if isinstance(s, ast.Expr) and isinstance(s.value, ast.Call)
    ]
    return ["__init__"] + [
        c.value.id for c in calls if isinstance(c, ast.Attribute) and c.attr == "install"
    ]


def test_the_rows_run_in_the_order_patches_install_makes_them():
    order = installed_in_order()
    by = [re.findall(r"`(\w+)`", row["by"])[0] for row in table().values()]
    assert set(by) <= set(
        order
    ), f"rows by modules that patches.install() does not call: {set(by) - set(order)}"
    assert by == sorted(
        by, key=order.index
    ), f"{DOC.name}'s rows are not in patches.install()'s order {order}"


HOSTS = ("fairseq", "fairseq_cli", "torch")


def host_names(tree: ast.Module) -> set:
    """The names a module binds to fairseq's or torch's modules and objects by its imports (anywhere
    in it)."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {
                (a.asname or a.name).split(".")[0]
                for a in node.names
                if a.name.split(".")[0] in HOSTS
            }
        elif (
            isinstance(node, ast.ImportFrom)
            and node.level == 0
            and (node.module or "").split(".")[0] in HOSTS
        ):
            names |= {a.asname or a.name for a in node.names}
    return names


def host_assignments(path: Path) -> list:
    """``path``'s assignments to an attribute of a fairseq or torch name: ``x.attr = ...``,
    ``setattr(x, ...)``, ``del x.attr``, where ``x`` (the root of the attribute chain) was imported
    from fairseq or torch.
    """
    tree = ast.parse(path.read_text(encoding="utf-8"))
    hosts = host_names(tree)

    def root(node):
        while isinstance(node, ast.Attribute):
            node = node.value
        return node.id if isinstance(node, ast.Name) else None

    found = []
    for node in ast.walk(tree):
        targets = []
        if isinstance(node, (ast.Assign, ast.Delete)):
            targets = node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("setattr", "delattr")
        ):
            targets = [ast.Attribute(value=node.args[0], attr="?")] if node.args else []
        found += [
            f"{path.relative_to(REPO)}:{node.lineno}"
            for t in targets
            if isinstance(t, ast.Attribute) and root(t) in hosts
        ]
    return found


def test_only_the_patches_folder_assigns_to_fairseq_or_torch():
    outside = [p for p in (REPO / "fairseq_bio").rglob("*.py") if PATCHES not in p.parents]
    found = [hit for path in outside for hit in host_assignments(path)]
    assert (
        found == []
    ), "assignments to fairseq's or torch's attributes outside fairseq_bio/patches/"
    # The check sees the patches themselves: every module of the table that changes fairseq by
    # assignment.
    assigning = {
        Path(hit.split(":")[0]).stem
        for path in PATCHES.glob("*.py")
        for hit in host_assignments(path)
    }
    by = {re.findall(r"`(\w+)`", row["by"])[0] for row in table().values()}
    assert (
        by - {"__init__", "excepthook"} <= assigning
    )  # those two change warnings, sys and os, not fairseq or torch

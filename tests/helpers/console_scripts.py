"""The console scripts setup.py declares, read from its source (no install needed)."""

import ast
from typing import Dict, List

from conftest import REPO


def entry_points() -> Dict[str, str]:
    """setup.py's console scripts: {name: "module:function"}."""
    tree = ast.parse((REPO / "setup.py").read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict) and any(
            getattr(k, "value", None) == "console_scripts" for k in node.keys
        ):
            scripts = node.values[[k.value for k in node.keys].index("console_scripts")]
            return dict((part.strip() for part in entry.value.split("=")) for entry in scripts.elts)
    raise AssertionError("setup.py: no console_scripts")


def console_scripts() -> List[str]:
    return list(entry_points())

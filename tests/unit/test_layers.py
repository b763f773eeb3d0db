"""The layering rule of CONTRIBUTING.md: a module imports only from its layer or below, and
only the people layer imports typer (prints, prompts, exits)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "jobctl"
LAYERS = {
    0: {
        "errors",
        "durations",
        "rows",
        "output",
        "views",
        "story",
        "queries",
        "mapping",
        "screen",
        "safe_text",
        "sql_text",
        "column_types",
        "libraries",
        "__init__",
    },
    1: {"db", "loaders", "session", "targets"},
    2: {
        "triage",
        "reclaim",
        "manual",
        "watch",
        "service",
        "metrics",
        "schema",
        "schema_steps",
        "schema_check",
        "reclaim_index",
        "locks",
        "history",
        "ownership",
        "lease",
        "shape",
        "remove",
        "review",
        "events",
        "report",
        "replica",
        "unserved",
        "plans",
        "fleet",
    },
    3: {
        "terminal",
        "options",
        "completion",
        "cli",
        "cli_session",
        "cli_review",
        "cli_writes",
        "cli_targets",
        "cli_schema",
        "cli_fleet",
        "demo",
        "__main__",
    },
}
LAYER_OF = {module: layer for layer, modules in LAYERS.items() for module in modules}


def imports(path: Path) -> set[str]:
    """jobctl modules and third-party top-level packages ``path`` imports, at any depth."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module == "jobctl":
                found |= {alias.name for alias in node.names}
            elif node.module.startswith("jobctl."):
                found.add(node.module.split(".")[1])
            else:
                found.add(node.module.split(".")[0])
        elif isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
    return found


def test_every_module_has_a_layer():
    assert {p.stem for p in PACKAGE.glob("*.py")} == set(LAYER_OF)


@pytest.mark.parametrize("module", sorted(LAYER_OF))
def test_imports_go_down_only(module):
    used = imports(PACKAGE / f"{module}.py")
    upward = {m for m in used if m in LAYER_OF and LAYER_OF[m] > LAYER_OF[module]}
    assert not upward, f"{module} (layer {LAYER_OF[module]}) imports {upward}"
    if LAYER_OF[module] < 3:
        renderer = ("output", "screen")  # rich measures and paints cells there, never prints
        assert ("typer" not in used and "rich" not in used) or module in renderer, module

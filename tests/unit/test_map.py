"""CONTRIBUTING.md's architecture map is true: every module and SQL file of ``jobctl/`` is named
in the row of its layer, and every module a row describes (a name in backticks, then its job in
parentheses) exists in that row's package."""

from __future__ import annotations

import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "jobctl"
MAP = (ROOT / "CONTRIBUTING.md").read_text()


def layer_rows() -> dict[str, str]:
    """Each layer's row of the map's table by the packages or modules its second cell names
    (``cli/``, ``lease.py``), the row's whole text as the value."""
    rows: dict[str, str] = {}
    for line in MAP.splitlines():
        cells = [cell.strip() for cell in line.split("|")[1:-1]]
        if len(cells) >= 3 and "·" in cells[0]:
            for name in re.findall(r"`([a-z_]+(?:/|\.py))`", cells[1]):
                rows[name] = line
    return rows


def home_row(path: pathlib.Path, rows: dict[str, str]) -> str:
    """The map's row for a module: its top-level package's, or its own for a flat module."""
    parts = path.relative_to(PACKAGE).parts
    key = f"{parts[0]}/" if len(parts) > 1 else parts[0]
    return rows.get(key, "")


def test_every_module_is_named_in_its_layers_row() -> None:
    rows = layer_rows()
    missing = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name == "__init__.py":
            continue
        row = home_row(path, rows)
        if f"`{path.stem}`" not in row and f"`{path.name}`" not in row:
            missing.append(str(path.relative_to(ROOT)))
    assert not missing, f"modules CONTRIBUTING.md's map does not name: {missing}"


def test_every_module_a_row_describes_exists() -> None:
    packages: dict[str, list[pathlib.Path]] = {}
    for key, row in layer_rows().items():
        if key.endswith("/"):
            packages.setdefault(row, []).append(PACKAGE / key)
    gone = []
    for row, dirs in packages.items():
        held = row.split("|")[3]
        for name in re.findall(r"`([a-z_]+)(?:\.py)?` \(", held):
            if not any(list(d.rglob(f"{name}.py")) or (d / name).is_dir() for d in dirs):
                gone.append(name)
    assert not gone, f"CONTRIBUTING.md's map names modules that are gone: {gone}"


def test_every_sql_file_is_named() -> None:
    unnamed = [
        path.name for path in sorted((PACKAGE / "sql").glob("*.sql")) if f"`{path.name}`" not in MAP
    ]
    assert not unnamed, f"SQL files CONTRIBUTING.md does not name: {unnamed}"
    assert "`history/NNN_name.sql`" in MAP  # the migrations, by their pattern

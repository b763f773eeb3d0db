"""The core's boundary (docs/decisions.md, "The core and the optional parts: one wheel"): the
core is what triage, reclaim, the manual writes and schema need, with the infrastructure they
share; the optional parts are the modules that serve only the other commands. No core module
imports an optional one (at any depth, ``TYPE_CHECKING`` too), and an optional command joins
jobctl through the command table alone (``cli/commands/__init__.py`` names its module; only
``cli/main`` imports it, by that name, when the command runs or is listed).

A module is optional when it is in ``OPTIONAL`` or under a package there; every other module
is core. Deleting every optional module leaves a jobctl whose core commands import and run.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from test_layers import MODULES, PACKAGE, imports

from jobctl.cli import commands

OPTIONAL = (
    # the incident's other levers
    "jobctl.cli.commands.summary",
    "jobctl.ops.summary",
    "jobctl.cli.commands.records",  # events, report
    "jobctl.ops.events",
    "jobctl.ops.report",
    "jobctl.render.markdown",
    "jobctl.cli.commands.pause",  # the commands; the pauses' reads are core (every view shows them)
    "jobctl.cli.commands.policy",  # policy, quarantine
    "jobctl.ops.policy",
    # running jobctl
    "jobctl.cli.commands.metrics",
    "jobctl.ops.metrics",
    "jobctl.render.openmetrics",
    "jobctl.cli.top",
    "jobctl.ops.console",
    "jobctl.cli.commands.doctor",
    "jobctl.ops.doctor",
    "jobctl.ops.doctor_catalog",
    "jobctl.ops.doctor_fence",
    "jobctl.ops.doctor_kinds",
    "jobctl.ops.doctor_statements",
    "jobctl.render.checklist",
    "jobctl.cli.commands.targets",
    "jobctl.cli.commands.shells",
    "jobctl.cli.commands.demo",
)


def optional(module: str) -> bool:
    return any(module == o or module.startswith(o + ".") for o in OPTIONAL)


def crossings(modules: dict[str, Path]) -> dict[str, list[str]]:
    """Each core module that imports optional ones -> those it imports."""
    found = {}
    for module, path in modules.items():
        if optional(module):
            continue
        imported = sorted(i for i in imports(path)[0] if optional(i))
        if imported:
            found[module] = imported
    return found


def listed() -> dict[str, tuple[str, str]]:
    """Every command of the table by its name (``schema apply``): (its module, its panel)."""
    found = {}
    for name, entry in commands.COMMANDS.items():
        if isinstance(entry, commands.Group):
            found |= {f"{name} {sub}": (c.module, entry.panel) for sub, c in entry.commands.items()}
        else:
            found[name] = (entry.module, entry.panel)
    return found


def test_every_optional_entry_is_a_module():
    assert [o for o in OPTIONAL if o not in MODULES] == []


def test_no_core_module_imports_an_optional_one():
    assert crossings(MODULES) == {}


def test_the_count_sees_a_core_module_that_imports_an_optional_one(tmp_path):
    """The test can fail: a core module importing an optional one, inside a function."""
    core = tmp_path / "triage.py"
    core.write_text("def f():\n    from jobctl.ops import summary\n    return summary\n")
    found = crossings(
        {"jobctl.ops.triage": core, "jobctl.ops.summary": MODULES["jobctl.ops.summary"]}
    )
    assert found == {"jobctl.ops.triage": ["jobctl.ops.summary"]}


@pytest.mark.parametrize("name", sorted(listed()))
def test_each_command_lives_on_its_side(name):
    """A core command in a core module; any other in an optional one, reached by the table."""
    module, panel = listed()[name]
    assert module in MODULES and panel in commands.PANELS, (module, panel)
    if panel == commands.CORE:
        assert not optional(module), f"{name}: a core command in {module}"
    else:
        assert optional(module), f"{name}: an optional command in core {module}"


HELPS = """
import sys
from jobctl.cli import main
for name in sys.argv[1:]:
    try:
        code = main.main([*name.split(), "--help"])
    except SystemExit as exc:
        code = exc.code
    assert code in (0, None), (name, code)
    print("ok", name, file=sys.stderr)
"""


def test_the_core_runs_without_the_optional_parts(tmp_path):
    """A copy of jobctl with every optional module deleted: each core command is built and
    prints its help (its module and all it imports load), in one process."""
    package = PACKAGE
    copy = tmp_path / "jobctl"
    shutil.copytree(package, copy, ignore=shutil.ignore_patterns("__pycache__"))
    for module, path in MODULES.items():
        if optional(module):
            gone = copy / path.relative_to(package)
            if gone.name == "__init__.py":
                shutil.rmtree(gone.parent)
            elif gone.exists():  # not in a package deleted already
                gone.unlink()
    core = [n for n, (_, panel) in listed().items() if panel == commands.CORE]
    done = subprocess.run(
        [sys.executable, "-c", HELPS, *core],
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stderr.splitlines() == [f"ok {n}" for n in core]
    assert done.stdout.count("Usage: jobctl ") == len(core)

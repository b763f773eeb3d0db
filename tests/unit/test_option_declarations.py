"""Every flag is declared in one place, with its bounds on the option.

A declaration is a ``typer.Option(...)`` or ``Duration(...)`` call in ``jobctl/cli``: it names
its flags (``"--limit"``, ``"--commit/--dry-run"``), or typer names it after the parameter
it annotates (directly, through a bundle's field, or through an alias: each parameter the
alias annotates). A factory that passes a name through (``typer.Option(*names, ...)``)
declares nothing itself. Its place is the module's top-level statement that holds it (an
alias, a factory, a command), so a factory declaring its flag's variants is one place.
"""

from __future__ import annotations

import ast
import collections
import re
from pathlib import Path
from typing import Any

import typer
from typer.testing import CliRunner

from jobctl.cli import main as cli
from jobctl.cli import options as opt
from jobctl.ops.reclaim import request

CLI = Path(__file__).resolve().parents[2] / "jobctl" / "cli"
FLAG = r"--?[a-z][a-z0-9-]*"
DECLARED = re.compile(rf"{FLAG}(\s*/\s*{FLAG})?")  # "--limit", "--commit/--dry-run"
DECLARING = {"Option", "Duration"}  # typer.Option, options.Duration


def _called(call: ast.Call) -> str | None:
    func = call.func
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _annotated_names(trees: dict[str, ast.Module]) -> dict[str, set[str]]:
    """Each alias name (``Worker``, ``opt.Worker``) -> the parameters and fields it annotates."""
    uses: dict[str, set[str]] = collections.defaultdict(set)
    for tree in trees.values():
        for node in ast.walk(tree):
            if isinstance(node, ast.arg) and node.annotation is not None:
                annotation, name = node.annotation, node.arg
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                annotation, name = node.annotation, node.target.id
            else:
                continue
            if isinstance(annotation, ast.Attribute):
                uses[annotation.attr].add(name)
            elif isinstance(annotation, ast.Name):
                uses[annotation.id].add(name)
    return uses


def declarations() -> dict[str, set[str]]:
    """Each flag -> the places that declare it (``module:statement``)."""
    trees = {
        str(p.relative_to(CLI.parent)): ast.parse(p.read_text()) for p in sorted(CLI.rglob("*.py"))
    }
    uses = _annotated_names(trees)
    found: dict[str, set[str]] = collections.defaultdict(set)
    for module, tree in trees.items():
        for statement in tree.body:
            named = getattr(statement, "name", None)
            if named is None and isinstance(statement, ast.Assign | ast.AnnAssign):
                target = (
                    statement.targets[0] if isinstance(statement, ast.Assign) else statement.target
                )
                named = ast.unparse(target)
            place = f"{module}:{named or statement.lineno}"
            parents = {c: n for n in ast.walk(statement) for c in ast.iter_child_nodes(n)}
            for call in ast.walk(statement):
                if not isinstance(call, ast.Call) or _called(call) not in DECLARING:
                    continue
                given = [*call.args, *(k.value for k in call.keywords if k.arg == "name")]
                literal = [
                    flag.strip()
                    for a in given
                    if isinstance(a, ast.Constant) and isinstance(a.value, str)
                    if DECLARED.fullmatch(a.value)
                    for flag in a.value.split("/")
                ]
                if literal:
                    for flag in literal:
                        found[flag].add(place)
                    continue
                if any(isinstance(a, ast.Starred | ast.Name) for a in given):
                    continue  # a factory passing its caller's name on
                for flag in _implicit(call, parents, uses, place):
                    found[flag].add(place)
    return found


def _implicit(
    call: ast.Call, parents: dict[ast.AST, ast.AST], uses: dict[str, set[str]], place: str
) -> set[str]:
    """The flags typer names after what the unnamed declaration annotates."""
    node: ast.AST = call
    while node in parents:
        node = parents[node]
        if isinstance(node, ast.arg):
            return {_flag(node.arg)}
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            return {_flag(node.target.id)}
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            return {_flag(name) for name in uses[node.targets[0].id]}
    raise AssertionError(f"{place}: an option declared without a name or a parameter")


def built_options() -> list[tuple[str, typer.core.TyperOption]]:
    """Every option of every command (and jobctl's own), as typer built it."""
    group = typer.main.get_command(cli.app)
    found = [("jobctl", p) for p in group.params]
    for name, command in group.commands.items():  # type: ignore[attr-defined]
        for sub, each in (getattr(command, "commands", None) or {name: command}).items():
            label = name if sub == name else f"{name} {sub}"
            found += [(label, p) for p in each.params if p.param_type_name == "option"]
            found += [(label, p) for p in getattr(command, "params", []) if sub != name]
    return found


def test_every_flag_is_declared_in_one_place():
    declared = declarations()
    twice = {flag: sorted(places) for flag, places in declared.items() if len(places) > 1}
    assert twice == {}
    # the count sees every option typer builds (nothing named some other way)
    for command, option in built_options():
        for flag in [*option.opts, *option.secondary_opts]:
            if flag in ("--help", "-h") or flag.startswith("--no-"):
                continue
            assert flag in declared, f"jobctl {command} {flag}: not found as a declaration"


def test_the_count_sees_a_flag_declared_twice(tmp_path, monkeypatch):
    """The test can fail: a copy of a command module's declaration is counted."""
    copy = tmp_path / "cli"
    for path in CLI.rglob("*.py"):
        (copy / path.relative_to(CLI)).parent.mkdir(parents=True, exist_ok=True)
        (copy / path.relative_to(CLI)).write_text(path.read_text())
    (copy / "commands" / "extra.py").write_text(
        "import typer\nfrom typing import Annotated\n"
        "def extra(limit: Annotated[int, typer.Option(min=1)] = 1,\n"
        "          yes: Annotated[bool, typer.Option('--yes', '-y')] = False) -> None: ...\n"
    )
    monkeypatch.setattr(f"{__name__}.CLI", copy)
    declared = declarations()
    assert len(declared["--limit"]) == 2 and len(declared["--yes"]) == 2
    assert len(declared["-y"]) == 2 and len(declared["--kind"]) == 1


HAND_WRITTEN_BOUND = re.compile(r"\d\s*-\s*\d|between \d|at (least|most) \d|\d\+", re.IGNORECASE)


def int_range(option: typer.core.TyperOption) -> tuple[Any, Any, bool] | None:
    """(min, max, clamped) of an int option, None for any other; read where each typer keeps
    them: before 0.29 on click's ``IntRange`` (``option.type``), from 0.29 on the option itself
    (its type told by the annotation typer read)."""
    kind = getattr(option, "type", None)
    if kind is not None:  # typer < 0.29: click's parameter type ("integer", "int range")
        if not kind.name.startswith("int"):
            return None
        return getattr(kind, "min", None), getattr(kind, "max", None), getattr(kind, "clamp", False)
    if option.type_descriptor.annotation is not int:  # type: ignore[attr-defined]
        return None
    info = option.type_descriptor.parameter_info  # type: ignore[attr-defined]
    return option.min, option.max, bool(info.clamp)  # type: ignore[attr-defined]


def test_every_int_option_has_its_bounds_on_the_option():
    """typer's help shows an int option's range ([1<=x<=10000], [x>=1]): the option holds
    it, and no help text repeats it by hand."""
    checked = 0
    for command, option in built_options():
        bounds = int_range(option)
        if bounds is None:
            continue
        checked += 1
        where = f"jobctl {command} {option.opts[0]}"
        low, _, clamped = bounds
        assert low is not None, f"{where}: no min"
        assert not clamped, f"{where}: clamped, not refused"
        assert not HAND_WRITTEN_BOUND.search(option.help or ""), f"{where}: {option.help}"
    assert checked >= 10  # --limit (9 commands), --batch-size, --count, --notify-burst ...


def test_the_batch_size_bounds_are_the_requests():
    """The option refuses what Request.check refuses (the check stays for the library's
    callers, who build a Request without the CLI): a usage error, before any connection."""
    assert opt.BATCH_SIZE == (request.MIN_BATCH, request.MAX_BATCH)
    (batch_size,) = [o for c, o in built_options() if c == "reclaim" and o.name == "batch_size"]
    bounds = int_range(batch_size)
    assert bounds is not None and bounds[:2] == opt.BATCH_SIZE
    low, high = opt.BATCH_SIZE
    for value, code in ((low - 1, 2), (high + 1, 2)):
        result = CliRunner().invoke(
            cli.app, ["--dsn", "host=/nonexistent", "reclaim", "--batch-size", str(value)]
        )
        assert result.exit_code == code, result.output
        assert "--batch-size" in result.output


def test_every_alias_in_options_is_used():
    """An option or argument alias of cli/options.py (``Annotated[...]``) that no command
    reads is a declaration no --help shows: none is left there."""
    import typing

    package = CLI.parent
    elsewhere = "\n".join(p.read_text() for p in package.rglob("*.py") if p != CLI / "options.py")
    own = (CLI / "options.py").read_text()
    unused = [
        name
        for name, value in vars(opt).items()
        if typing.get_origin(value) is typing.Annotated
        and not re.search(rf"\b(opt|options)\.{name}\b|import[^\n]*\b{name}\b", elsewhere)
        and len(re.findall(rf"\b{name}\b", own)) == 1
    ]
    assert unused == []

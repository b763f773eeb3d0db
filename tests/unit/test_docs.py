"""The docs say what the code does: the commands reference carries every command's --help
exactly, every doc link resolves, and CI runs the README's test command.

After changing an option or a docstring, rewrite the reference's help blocks with
``JOBCTL_UPDATE_DOCS=1 pytest tests/unit/test_docs.py``.
"""

from __future__ import annotations

import os
import re
import shlex
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from jobctl import errors
from jobctl.cli import click_api
from jobctl.cli import main as cli

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "docs" / "commands.md"
BLOCK = re.compile(r"<!-- help: (?P<name>[a-z ]+) -->\n```\n(?P<text>.*?)```\n", re.DOTALL)


def command_names() -> list[str]:
    group = typer.main.get_command(cli.app)
    names = [""]
    for name, command in group.commands.items():  # type: ignore[attr-defined]
        subcommands = getattr(command, "commands", None) or {}
        names += [f"{name} {sub}" for sub in subcommands] or [name]
    return names


def help_text(name: str) -> str:
    result = CliRunner().invoke(cli.app, [*name.split(), "--help"], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    return f"$ jobctl {name} --help".replace("  ", " ") + "\n" + result.output


@pytest.mark.help_look
def test_the_reference_carries_every_commands_help():
    text = REFERENCE.read_text()
    wanted = {name: help_text(name) for name in command_names()}
    if os.environ.get("JOBCTL_UPDATE_DOCS"):
        blocks = "".join(
            f"<!-- help: {n or 'jobctl'} -->\n```\n{h}```\n\n" for n, h in wanted.items()
        )
        head = text.split("<!-- help:")[0].rstrip() + "\n\n"
        REFERENCE.write_text(head + blocks.rstrip() + "\n")
        text = REFERENCE.read_text()
    found = {m["name"]: m["text"] for m in BLOCK.finditer(text)}
    for name, help_ in wanted.items():
        key = name or "jobctl"
        assert key in found, f"docs/commands.md lacks the help of jobctl {name}"
        assert found[key] == help_, (
            f"docs/commands.md: the help of jobctl {name} is out of date "
            "(JOBCTL_UPDATE_DOCS=1 pytest tests/unit/test_docs.py rewrites it)"
        )
    assert set(found) == {n or "jobctl" for n in wanted}, "help of a command that is gone"


def test_every_command_has_a_section():
    headings = " ".join(re.findall(r"^## .*$", REFERENCE.read_text(), re.MULTILINE))
    for name in command_names()[1:]:
        assert f"jobctl {name}" in headings, f"docs/commands.md has no section for {name}"


PAGES = sorted([ROOT / "README.md", ROOT / "CONTRIBUTING.md", *ROOT.glob("docs/**/*.md")])


def anchors(text: str) -> set[str]:
    """The fragments a page's headings answer to, as GitHub makes them (lower case, all but
    word characters, hyphens and spaces dropped, spaces as hyphens, -1, -2 on repeats), and
    its explicit ``<a id=...>`` anchors. Headings inside code blocks are not headings."""
    found: set[str] = set()
    seen: dict[str, int] = {}
    fenced = False
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
            continue
        heading = None if fenced else re.match(r"^#{1,6} +(.*?)\s*$", line)
        if heading:
            slug = re.sub(r"[^\w\- ]", "", heading[1].lower()).replace(" ", "-")
            n = seen.get(slug, 0)
            seen[slug] = n + 1
            found.add(slug if n == 0 else f"{slug}-{n}")
    return found | set(re.findall(r'<a (?:name|id)="([^"]+)"', text))


def test_the_pages_are_all_checked():
    # a page moved into a folder of docs/ keeps its links checked
    names = {p.relative_to(ROOT).as_posix() for p in PAGES}
    assert {"docs/reference/performance.md", "docs/reference/screens.md"} <= names
    assert "docs/runbook.md" in names


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_relative_links_resolve(page):
    for target, fragment in re.findall(r"\]\(([^)#:\s]*)(?:#([^)\s]*))?\)", page.read_text()):
        linked = (page.parent / target) if target else page
        assert linked.exists(), f"{page.name}: broken link {target}"
        if fragment and linked.suffix == ".md":
            assert fragment in anchors(linked.read_text()), (
                f"{page.name}: link {target}#{fragment} names no heading of {linked.name}"
            )


def test_ci_runs_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    assert re.search(r"^make test +#", readme, re.MULTILINE)
    assert re.search(r"^JOBCTL_TEST_DSN=\S+ make --no-print-directory test$", ci, re.MULTILINE)
    assert re.search(r"^env -u JOBCTL_TEST_DSN make --no-print-directory test$", ci, re.MULTILINE)
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^test: .*\n\t\$\(VENV\)/bin/pytest \$\(ARGS\)$", makefile, re.MULTILINE)


# ---------------------------------------------------------------- the runbook
RUNBOOK = ROOT / "docs" / "runbook.md"


def parse_command(line: str) -> click_api.Context:
    """A documented command line, resolved and parsed by the real CLI without running it:
    the group's global options, each subcommand in turn, every option's name and type (a
    DURATION, a choice, a number) as when it runs. Raises ClickException when it would not
    parse."""
    args = shlex.split(line, comments=True)
    assert args[0] == "jobctl", line
    command = typer.main.get_command(cli.app)
    ctx = command.make_context("jobctl", args[1:])
    while hasattr(command, "resolve_command"):  # a group: its subcommand, then that one's
        rest = [*getattr(ctx, "_protected_args", []), *ctx.args]
        name, found, rest = command.resolve_command(ctx, rest)
        assert name is not None and found is not None, line
        command = found
        ctx = command.make_context(name, rest, parent=ctx)
    return ctx


def runbook_commands() -> list[str]:
    """Every command line of the runbook's shell blocks."""
    blocks = re.findall(r"```sh\n(.*?)```", RUNBOOK.read_text(), re.DOTALL)
    return [line for block in blocks for line in block.splitlines() if line.startswith("jobctl")]


def test_parse_command_refuses_what_the_cli_would():
    assert parse_command("jobctl --table t reclaim --plan p.json --commit").params["commit"]
    for bad in (
        "jobctl stuck --no-such-option",
        "jobctl reclaim --batch-size many",
        "jobctl schema no-such-command",
        "jobctl stuck --grace soon",
    ):
        with pytest.raises(click_api.ClickException):
            parse_command(bad)


@pytest.mark.parametrize("line", runbook_commands())
def test_every_runbook_command_parses(line):
    parse_command(line)


def test_the_runbook_walks_the_incident_path():
    """stuck, the dry run saved as a plan, that plan committed, review, then requeue or fail
    on a review plan: in that order."""
    lines = runbook_commands()
    wanted = [
        ("jobctl stuck",),
        ("jobctl reclaim", "--dry-run", "--save-plan"),
        ("jobctl reclaim", "--plan", "--commit"),
        ("jobctl review",),
        ("jobctl requeue --plan",),
        ("jobctl fail --plan",),
    ]
    at = -1
    for words in wanted:
        at = next(i for i, line in enumerate(lines) if i > at and all(w in line for w in words))
    assert any(line.startswith("jobctl schema grants") for line in lines)


def test_the_runbook_says_every_exit_code():
    text = RUNBOOK.read_text()
    codes = {v for k, v in vars(errors).items() if k.startswith("EXIT_")} | {130}
    rows = {int(m) for m in re.findall(r"^\| (\d+) \|", text, re.MULTILINE)}
    assert rows == codes


def test_the_readme_links_the_runbook_first():
    readme = (ROOT / "README.md").read_text()
    docs = re.findall(r"\]\((docs/[^)#\s]+)", readme)
    assert docs[0] == "docs/runbook.md"
    listed = readme.split("## Documentation", 1)[1]
    assert re.findall(r"\]\((docs/[^)#\s]+)", listed)[0] == "docs/runbook.md"


def test_the_readme_states_the_footprint_whole():
    """The README's footprint names every column, check, object and table apply adds (the
    names footprint.of prints; tests/integration/test_footprint.py holds those to the
    catalog), and offers the least footprint beside it."""
    from jobctl.schema import apply, footprint, history

    readme = (ROOT / "README.md").read_text()
    whole = readme.split("### What `schema apply` adds, whole", 1)[1].split("\n## ", 1)[0]
    names = [
        *apply.LEASE_COLUMNS,
        *history.COLUMNS,
        *(f"jobs_{suffix}" for suffix in apply.CHECKS),
        "idx_jobs_processing_timeout",
        history.TRIGGER,
        *footprint.TABLES,
        "SECURITY DEFINER",
        "schema `jobctl`",
    ]
    for name in names:
        assert name in whole, name
    assert "jobctl schema apply --history audit" in whole
    assert "BEFORE UPDATE OF jobctl_action" in whole
    assert "added to an existing table as five columns" not in readme  # the old half-truth

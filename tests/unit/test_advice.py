"""Every command line jobctl gives as advice parses against the real CLI.

jobctl tells people what to run next: doctor's advice, hints and next steps, the docstrings'
examples, and the docs' ``$ jobctl ...`` lines and `jobctl ...` spans. Each is resolved to
its command and its arguments parsed by click's parser, exactly as ``jobctl`` would parse
them, without running anything: a line that names no command, an option that does not
exist, a word where an option was meant (``jobctl policy ID manual``) fails here, at the
line that gives it.

Placeholders stand for a value of their kind (``ID`` 42, ``DURATION`` 5m, ``FILE`` a path);
the prose around a line given inside a sentence is cut at the sentence's own punctuation
and words (``jobctl stuck lists them``).
"""

from __future__ import annotations

import ast
import re
import shlex
from collections.abc import Iterator
from pathlib import Path

import pytest
import typer

from jobctl.cli import context
from jobctl.cli import main as cli
from jobctl.cli.click_api import ClickException, lazy_group, missing

ROOT = Path(__file__).resolve().parents[2]
GROUP = lazy_group(cli.app)
COMMANDS = set(GROUP.commands)
GLOBAL_WITH_VALUE = {"--dsn", "--table", "--target", "--actor", "--statement-timeout",
                     "--lock-timeout"}  # fmt: skip

PLACEHOLDERS = {
    "ID": "42",
    "ID...": "42",
    "N": "3",
    "D": "5m",
    "DURATION": "5m",
    "WHEN": "2h",
    "UUID": "0b6c7a42-0f7d-4d4e-9a1c-5f2f1f8f4a10",
    "SHELL": "bash",
    "FILE": "p.json",
}
# words that end a command line given inside a sentence: "jobctl stuck lists them"
PROSE = set(
    "lists says shows prints installs deletes drops first to and or then is with needs "
    "starts still gives runs before once do at on as for its in of the shows what would "
    "undoes works reads adds says".split()
)
# punctuation that ends it: "(jobctl review)", "jobctl schema apply;"
CLOSERS = ")];,:`'\""


def placeholder(token: str) -> str:
    if token in PLACEHOLDERS:
        return PLACEHOLDERS[token]
    if token in ("...", "{}", "X"):
        return "x"
    if re.fullmatch(r"[A-Z][A-Z_]*", token):
        return "x"
    return re.sub(r"\{\}|\b[A-Z][A-Z_]{2,}\b", "x", token)  # --column {}=COLUMN


def words(text: str) -> list[str]:
    try:
        return shlex.split(text)
    except ValueError:  # an unbalanced quote of the sentence around it
        return text.split()


def takes_arguments(name: str, sub: str | None) -> bool:
    """Whether the command takes positional arguments (ids, a shell): a word after one that
    takes none ends the line ("jobctl doctor finds the writer")."""
    command = GROUP.commands[name]
    if sub is not None and hasattr(command, "commands"):
        command = command.commands.get(sub, command)
    return any(p.param_type_name == "argument" for p in command.params)


def takes_value(name: str, sub: str | None, option: str) -> bool:
    """Whether ``option`` of the command takes a value (``--reason TEXT``), not a flag
    (``--allow-writes``): a word after a flag is the sentence's."""
    if not option.startswith("-"):
        return False
    command = GROUP.commands[name]
    if sub is not None and hasattr(command, "commands"):
        command = command.commands.get(sub, command)
    for param in command.params:
        if option in getattr(param, "opts", []) or option in getattr(param, "secondary_opts", []):
            return not getattr(param, "is_flag", False) and not getattr(param, "count", False)
    return True  # an option it does not have: let the parser say so


def from_prose(text: str) -> Iterator[str]:
    """Command lines given inside a sentence (code strings, docstrings): ``jobctl`` and a
    command, then its arguments up to the sentence's own punctuation or words."""
    for found in re.finditer(r"\bjobctl((?: --[a-z-]+(?: [^\s-]\S*)?)*) ([a-z][a-z-]*)\b", text):
        if found[2] not in COMMANDS:
            continue
        rest = text[found.end() :].split("\n")[0].split()
        sub = rest[0] if rest and hasattr(GROUP.commands[found[2]], "commands") else None
        positional = takes_arguments(found[2], sub)
        line = ["jobctl", *found[1].split(), found[2]]
        for token in rest:
            quoted = " ".join(line).count('"') % 2
            if not quoted:
                if token.startswith(("(", "/", ">", "|", "#", "$", "``", "—", "<")):
                    break
                if token in PROSE:
                    break
                value_of_option = takes_value(found[2], sub, line[-1]) and not token.startswith("-")
                if (
                    not positional
                    and token != sub
                    and not token.startswith("-")
                    and not token.startswith("{")
                    and not value_of_option
                    and re.fullmatch(r"[a-z]+", token.rstrip(CLOSERS + "."))
                ):
                    break
            cut = token.rstrip(CLOSERS + ".")
            if token.endswith('"') and " ".join([*line, token]).count('"') % 2 == 0:
                cut = token.rstrip(")];,:`'.")  # the closing quote of a value, kept
            ended = cut != token and not token.endswith("...")
            if cut:
                line.append(cut)
            if ended:
                break
        yield " ".join(line)


def from_code() -> Iterator[tuple[str, str]]:
    for path in sorted((ROOT / "jobctl").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                text = node.value
            elif isinstance(node, ast.JoinedStr):
                text = "".join(
                    v.value if isinstance(v, ast.Constant) else "{}" for v in node.values
                )
            else:
                continue
            for line in from_prose(text):
                yield f"{path.relative_to(ROOT)}:{node.lineno}", line


def from_docs() -> Iterator[tuple[str, str]]:
    for path in sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md")]):
        lines = path.read_text().split("\n")
        fenced = False
        for number, raw in enumerate(lines, 1):
            if raw.startswith("```"):
                fenced = not fenced
                continue
            where = f"{path.relative_to(ROOT)}:{number}"
            if "--help" in raw or "<TAB>" in raw:
                continue  # the help's own pages, a completion typed: not lines to parse
            second = raw.split()[1] if len(raw.split()) > 1 else ""
            if (
                fenced
                and re.match(r"(\$ )?jobctl (--|[a-z])", raw)
                and (raw.startswith("$") or second in COMMANDS or second.startswith("--"))
            ):
                line = raw.removeprefix("$ ")
                while line.endswith("\\") and number < len(lines):
                    line = line[:-1] + lines[number]
                    number += 1
                yield where, line.split(" #")[0]
            elif not fenced:
                for span in re.findall(r"`(jobctl [^`]+)`", raw):
                    yield from ((where, line) for line in from_prose(span))


def parse(line: str) -> None:
    """``line`` as jobctl's parser takes it: its command resolved, its options and arguments
    converted and checked; nothing runs. ClickException when it would not parse."""
    argv: list[str] = []
    for token in words(line)[1:]:
        if token in (">", "|", "&&", ";", "2>&1") or token.startswith((">", "<")):
            break
        if token == "..." and not (argv and argv[-1].startswith("-")):
            continue
        if token == "{}" and not (argv and argv[-1].startswith("-")):
            continue  # a formatted tail (a window's options), not a value
        if re.fullmatch(r"[a-z]+(\|[a-z]+)+", token):
            token = token.split("|")[0]  # bash|zsh|fish: one of them
        argv.append(placeholder(token))
    ctx = GROUP.make_context("jobctl", argv, obj=context.Invocation())
    command: typer.core.TyperGroup | object = GROUP
    rest = [*ctx._protected_args, *ctx.args]
    while isinstance(command, typer.core.TyperGroup):
        assert rest, f"{line!r} names no command"
        name, found, rest = command.resolve_command(ctx, rest)
        assert found is not None, f"{line!r}: no command {name!r}"
        if not rest and isinstance(found, typer.core.TyperGroup):
            return  # a group named alone ("jobctl schema"): its help
        try:
            ctx = found.make_context(name, list(rest), parent=ctx)
        except ClickException as exc:
            if missing(exc):
                return  # a command named without its ids ("jobctl history"), not a line to run
            if "requires an argument" in exc.format_message() and not rest[-1:] == ["--"]:
                if rest and rest[-1].startswith("-"):
                    return  # an option named, its value in the sentence ("--reason ...")
            raise
        command, rest = found, [*ctx._protected_args, *ctx.args]


ADVICE = sorted(set(from_code()) | set(from_docs()))


def test_advice_is_found_in_code_and_docs():
    # the extraction itself: doctor's advice, a hint, a docstring's example, the docs' lines
    lines = {line for _, line in ADVICE}
    assert "jobctl policy ID --manual" in lines  # doctor.py's advice
    assert "jobctl explain ID" in lines  # stuck's hint for a job with no lease
    assert any(where.startswith("docs/commands.md") for where, _ in ADVICE)
    assert any(where.startswith("README.md") for where, _ in ADVICE)
    assert len(ADVICE) > 200


@pytest.mark.parametrize(("where", "line"), ADVICE, ids=[f"{w} {x}" for w, x in ADVICE])
def test_every_command_line_jobctl_gives_parses(where, line):
    try:
        parse(line)
    except ClickException as exc:
        pytest.fail(f"{where}: {line!r} does not parse: {exc.format_message()}")


@pytest.mark.parametrize(
    "line",
    [
        "jobctl policy ID manual",  # a word where ids go: did you mean --manual?
        "jobctl stuck --no-such-option",
        "jobctl stuck --grace soon",
        "jobctl requeue 7 force",
    ],
)
def test_a_line_that_would_fail_fails_here(line):
    with pytest.raises(ClickException):
        parse(line)

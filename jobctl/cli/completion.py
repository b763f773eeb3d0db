"""Shell completion for bash, zsh and fish: candidates are data, never code a shell evaluates.

A candidate may come from the database (job ids, ``--worker`` names) or the config file
(target names), so it may hold anything an application can store: ``$(...)``, backticks,
quotes, backslashes, newlines, escape sequences. typer's own scripts let such text reach a
shell's parser (zsh ``eval``s its ``_arguments`` spec, and a backslash typer leaves unescaped
undoes its ``\\$``; bash inserts a candidate verbatim into the command line, which runs it on
Enter). Here, two rules (see docs/commands.md, "jobctl completion SHELL"):

* A candidate holding a character ``safe_text.visible`` would escape (C0/C1 controls and DEL,
  newlines and tabs among them, bidi and invisible characters) is not offered at all: such a
  character is the completion protocol's separator (a newline splits a candidate in two, a
  tab starts fish's description) or a terminal control in the list a shell prints. Type it
  by hand if you must.
* Every other candidate is sent in the one form its shell inserts as the literal value:
  bash gets it backslash-escaped (any character but letters, digits, non-ASCII ones and
  ``_@%+=:,./-``; bash inserts COMPREPLY as it is), zsh and fish get it raw, one per
  line, and quote it themselves on insertion (zsh's ``compadd`` without ``-Q``, fish's
  completions); their scripts read the lines into an array and never ``eval`` them.

Only these three shells are served: jobctl ships no PowerShell completion.

The protocol is jobctl's own (``respond``, from ``cli/main`` when ``_JOBCTL_COMPLETE`` is set:
``source_SHELL`` prints the script, ``complete_SHELL`` the candidates), on typer's public API
only: the command at the cursor is found by parsing the words as click would with
``resilient_parsing`` (``resolve``), and its parameter (or command) at the cursor offers its
candidates (``shell_complete``: the ``autocompletion=`` of jobctl's options, or the commands).

What a TAB asks the database (job ids, workers) has one deadline, ``DEADLINE_S`` for all of
it in the process (``ask``): a read not done by then is left to a daemon thread and gives no
candidate, and once the candidates are written the process ends at once (``os._exit``), so
its exit never waits on a read left behind (a server that accepts and never answers).
"""

from __future__ import annotations

import dataclasses
import os
import re
import shlex
import sys
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import typer.core

from jobctl.contract import safe_text

T = TypeVar("T")
DEADLINE_S = 1.0  # the longest a TAB waits on databases, all asks together (docs/commands.md)


class _Asks:
    """The process's asks of a database: when the first began, the readers started."""

    started: float | None = None
    readers: list[threading.Thread] = []  # noqa: RUF012 (one process, one list)


def ask(read: Callable[[float], list[T]]) -> list[T]:
    """``read(seconds_left)``'s candidates if it returns within what is left of the one
    deadline (``DEADLINE_S`` from the first ask of the process), else none; a read left
    behind runs on in a daemon thread that nothing waits for (``finish``)."""
    now = time.monotonic()
    if _Asks.started is None:
        _Asks.started = now
    left = _Asks.started + DEADLINE_S - now
    if left <= 0:
        return []
    found: list[list[T]] = []
    reader = threading.Thread(
        target=lambda: found.append(read(left)), daemon=True, name="jobctl-completion-read"
    )
    _Asks.readers.append(reader)
    reader.start()
    reader.join(left)
    return found[0] if found else []


def finish(text: str) -> str:
    """The candidates, as click then writes them; when a read was left behind, written and
    flushed here, and the process ended at once: an interpreter's exit may wait on what the
    read holds (libpq's connection attempts: seconds each), a TAB must not."""
    if not any(reader.is_alive() for reader in _Asks.readers):
        return text
    sys.stdout.write(text + "\n")
    sys.stdout.flush()
    os._exit(0)


@dataclasses.dataclass(frozen=True)
class Candidate:
    """One candidate: the value the shell inserts, and its help (what a parameter's
    ``shell_complete`` gives: click's completion items, read by their ``value`` and ``help``)."""

    value: str
    help: str | None = None


# what bash leaves alone in a word: anything else is escaped with a backslash (ASCII only:
# no character above U+007F is special to bash)
_BASH_SPECIAL = re.compile(r"[^A-Za-z0-9_@%+=:,./\-\u0080-\U0010ffff]")


def offered(value: str) -> bool:
    """Whether a candidate may be offered at all: not empty, nothing ``safe_text.visible``
    would escape (controls, newlines, tabs, bidi and invisible characters)."""
    return value != "" and safe_text.visible(value) == value


def bash_word(value: str) -> str:
    """``value`` as one bash word that means exactly ``value``: each special character
    backslash-escaped (``offered`` values only: a backslash before a newline would be a line
    continuation). Completed after an opening double quote it may keep a backslash, but
    nothing in it expands there either (``$``, backquote, ``"`` and ``\\`` are escaped)."""
    return _BASH_SPECIAL.sub(lambda m: "\\" + m.group(), value)


def description(item: Candidate) -> str:
    """A candidate's help on one line, nothing a terminal would obey ('' if none)."""
    if not item.help:
        return ""
    return safe_text.visible(" ".join(str(item.help).split()))


def paths(incomplete: str, *, dirs_only: bool = False) -> list[Candidate]:
    """The files (or folders) whose path starts with ``incomplete``, a folder with a ``/``:
    what a PATH option completes (listed here, so no script falls back to files where no
    file applies). Hidden ones only when ``incomplete``'s last part starts with a dot."""
    folder, _, start = incomplete.rpartition("/")
    where = os.path.expanduser(folder + "/" if folder else ".") if folder or not start else "."
    if folder == "" and incomplete.startswith("/"):
        where = "/"
    try:
        names = sorted(os.listdir(where or "/"))
    except OSError:
        return []
    found = []
    for name in names:
        if not name.startswith(start) or (name.startswith(".") and not start.startswith(".")):
            continue
        is_dir = os.path.isdir(os.path.join(where or "/", name))
        if dirs_only and not is_dir:
            continue
        value = (f"{folder}/" if folder or incomplete.startswith("/") else "") + name
        found.append(Candidate(value + ("/" if is_dir else "")))
    return found


_SENTINEL = "\x00"  # a word no one types: what follows the words, to see where they stop
PATH_METAVARS = {"FILE": False, "PATH": False, "DIR": True}  # a path option's: dirs only?


def split_words(line: str) -> list[str]:
    """A command line's words as a shell splits them; an unclosed quote or a trailing
    backslash ends the last word as it is (the cursor may be inside a quote)."""
    lexer = shlex.shlex(line, posix=True)
    lexer.whitespace_split = True
    lexer.commenters = ""
    words: list[str] = []
    try:
        words.extend(lexer)
    except ValueError:  # no closing quotation, or no escaped character
        words.append(lexer.token)
    return words


def resolve(root: Any, args: list[str], obj: object) -> Any:
    """The context of the command the words ``args`` (after ``jobctl``) reach, parsed as
    click parses them but forgiving (``resilient_parsing``: no callbacks, no errors). A
    group's subcommand is the word after its options: parsed with a word no one types after
    the words, the group's leftover arguments end with it, and the word before them is the
    subcommand's name (none left: no subcommand typed yet)."""
    ctx = None
    command, name, words = root, "jobctl", list(args)
    while True:
        settings: dict[str, Any] = {"resilient_parsing": True}
        if ctx is None:
            settings["obj"] = obj
        if not isinstance(command, typer.core.TyperGroup):
            return command.make_context(name, words, parent=ctx, **settings)
        probe = [*words, _SENTINEL]
        parsed = command.make_context(name, probe, parent=ctx, **settings)
        rest = list(parsed.args)
        sub = probe[len(probe) - len(rest) - 1] if rest else None
        found = command.get_command(parsed, sub) if sub is not None else None
        if sub is None or found is None:
            return command.make_context(name, words, parent=ctx, **settings)
        ctx, command, name, words = parsed, found, sub, rest[:-1]


def _option_awaits_value(ctx: Any, args: list[str], param: Any) -> bool:
    """Whether option ``param`` is the one the last words name, still without its value."""
    if param.param_type_name != "option" or param.is_flag or param.count:
        return False
    for index, word in enumerate(reversed(args)):
        if index + 1 > param.nargs:
            return False
        if word.startswith("-"):
            return word in param.opts
    return False


def _argument_awaits_value(ctx: Any, param: Any) -> bool:
    """Whether argument ``param`` can still take a value."""
    if param.param_type_name != "argument" or param.name is None:
        return False
    value = ctx.params.get(param.name)
    source = ctx.get_parameter_source(param.name)
    return (
        param.nargs == -1
        or source is None
        or source.name != "COMMANDLINE"
        or (param.nargs > 1 and isinstance(value, tuple | list) and len(value) < param.nargs)
    )


def at_cursor(ctx: Any, args: list[str], incomplete: str) -> tuple[Any, str]:
    """What completes ``incomplete``: an option's name (the command), an option's value (the
    option; ``--opt=value`` split), an argument's value (the first that takes one), or a
    subcommand's name (the group); and the text it completes."""
    args = list(args)
    if incomplete == "=":
        incomplete = ""
    elif "=" in incomplete and incomplete.startswith("-"):
        name, _, incomplete = incomplete.partition("=")
        args.append(name)
    if "--" not in args and incomplete.startswith("-"):
        return ctx.command, incomplete
    params = ctx.command.get_params(ctx)
    for param in params:
        if _option_awaits_value(ctx, args, param):
            return param, incomplete
    for param in params:
        if _argument_awaits_value(ctx, param):
            return param, incomplete
    return ctx.command, incomplete


def candidates(root: Any, args: list[str], incomplete: str, obj: object) -> list[Candidate]:
    """What the parameter (or command) at the cursor offers (``--opt=value`` included), a
    path option's files listed here (its metavar FILE, PATH or DIR: typer offers none), and
    then only those ``offered`` allows."""
    ctx = resolve(root, args, obj)
    where, value = at_cursor(ctx, args, incomplete)
    metavar = getattr(where, "metavar", None) if where is not ctx.command else None
    if metavar in PATH_METAVARS:
        items = paths(value, dirs_only=PATH_METAVARS[metavar])
    else:
        items = [Candidate(str(i.value), i.help) for i in where.shell_complete(ctx, value)]
    return [item for item in items if offered(item.value)]


def _is_option_value(word: str) -> bool:
    """``--opt=value``: a long option and its value in one word."""
    return word.startswith("--") and "=" in word


def option_prefix(word: str) -> str:
    """``--opt=`` of a ``--opt=value`` word ('' otherwise): what fish's candidates repeat."""
    return word.partition("=")[0] + "=" if _is_option_value(word) else ""


def bash_words(words: list[str], current: int) -> tuple[list[str], str, str]:
    """bash's words (split at ``=``, which COMP_WORDBREAKS holds: ``--output=j`` arrives as
    ``--output``, ``=``, ``j``) as click reads them: (args, incomplete, prefix). ``prefix``
    is ``=`` when the word being completed is the ``=`` itself (the cursor right after it):
    bash replaces that word, so each candidate must start with it."""
    joined: list[str] = []
    at = 0
    prefix = ""
    i = 0
    while i < len(words):
        word = words[i]
        if word == "=" and joined and joined[-1].startswith("--") and "=" not in joined[-1]:
            joined[-1] += "="
            if i == current:
                prefix = "="
            elif i + 1 < len(words) and i + 1 <= current:
                joined[-1] += words[i + 1]
                i += 1
            if i >= current and not at:
                at = len(joined) - 1
            i += 1
            continue
        joined.append(word)
        if i == current:
            at = len(joined) - 1
        i += 1
    if current >= len(words):
        joined.append("")
        at = len(joined) - 1
    incomplete = joined[at] if at < len(joined) else ""
    return joined[1:at], incomplete, prefix


class _Shell:
    """A shell's side of the protocol: its script (``source_template``, %-formatted as click
    formats its own), the words its script sends (``_TYPER_COMPLETE_ARGS``: the line up to
    the cursor), and one line per candidate."""

    source_template = ""

    def __init__(self, environ: Mapping[str, str]) -> None:
        self.environ = environ

    def source(self) -> str:
        return self.source_template % {
            "complete_func": "_jobctl_completion",
            "autocomplete_var": "_JOBCTL_COMPLETE",
            "prog_name": "jobctl",
        }

    def words(self) -> tuple[list[str], str]:
        """(the complete words after ``jobctl``, the word at the cursor)."""
        line = self.environ.get("_TYPER_COMPLETE_ARGS", "")
        args = split_words(line)[1:]
        if args and not line.endswith(" "):
            return args[:-1], args[-1]
        return args, ""

    def line(self, item: Candidate) -> str:
        raise NotImplementedError

    def complete(self, root: Any, obj: object) -> str:
        args, incomplete = self.words()
        return finish("\n".join(self.line(i) for i in candidates(root, args, incomplete, obj)))


class Bash(_Shell):
    """bash: one escaped word per line, read with ``mapfile`` (no word splitting, no globs)."""

    source_template = """\
# jobctl's bash completion: jobctl prints one candidate per line, already escaped as a bash
# word, and they are read with mapfile (no splitting, no globbing): nothing is evaluated.
# Nothing applies (no candidate): nothing is offered, never the files of the directory (no
# -o default); a PATH option's files come from jobctl itself. A folder keeps the cursor on it.
%(complete_func)s() {
    COMPREPLY=()
    mapfile -t COMPREPLY < <(env COMP_WORDS="${COMP_WORDS[*]}" COMP_CWORD="$COMP_CWORD" \\
        %(autocomplete_var)s=complete_bash "$1")
    if [[ ${#COMPREPLY[@]} -eq 1 && -z ${COMPREPLY[0]} ]]; then
        COMPREPLY=()
    elif [[ ${#COMPREPLY[@]} -eq 1 && ${COMPREPLY[0]} == */ ]]; then
        compopt -o nospace 2>/dev/null
    fi
    return 0
}

complete -F %(complete_func)s %(prog_name)s
"""

    prefix = ""

    def words(self) -> tuple[list[str], str]:
        words = split_words(self.environ["COMP_WORDS"])
        args, incomplete, self.prefix = bash_words(words, int(self.environ["COMP_CWORD"]))
        return args, incomplete

    def line(self, item: Candidate) -> str:
        return self.prefix + bash_word(item.value)


class Zsh(_Shell):
    """zsh: raw candidates, a tab, their description; ``compadd`` quotes them on insertion."""

    source_template = """\
#compdef %(prog_name)s

# jobctl's zsh completion: jobctl prints one candidate per line (a tab, then its description),
# the lines are read into arrays and given to compadd, which quotes each candidate as it
# inserts it: nothing is evaluated. Sourced, it registers itself; autoloaded from $fpath
# (as _%(prog_name)s), it also completes on its first call.
_%(prog_name)s() {
  emulate -L zsh
  local -a values helps shown
  local line
  local -i i width=0
  # --opt=value: the candidates are values, inserted after the --opt= kept as it is
  [[ $PREFIX == --*=* ]] && compset -P '*='
  for line in "${(@f)$(env _TYPER_COMPLETE_ARGS="${words[1,$CURRENT]}" \\
      %(autocomplete_var)s=complete_zsh %(prog_name)s)}"; do
    [[ -n $line ]] || continue
    values+=("${line%%%%$'\\t'*}")
    if [[ $line == *$'\\t'* ]]; then helps+=("${line#*$'\\t'}"); else helps+=(""); fi
    (( ${#values[-1]} > width )) && width=${#values[-1]}
  done
  if (( ! ${#values} )); then
    return 1  # nothing applies: nothing offered (a PATH option's files come from jobctl)
  elif [[ -z ${(j::)helps} ]]; then
    compadd -- "${values[@]}"
  else
    for (( i = 1; i <= ${#values}; i++ )); do
      shown+=("${(r:width:)values[i]}${helps[i]:+  -- ${helps[i]}}")
    done
    compadd -l -d shown -- "${values[@]}"
  fi
}

compdef _%(prog_name)s %(prog_name)s
if [[ ${funcstack[1]} == _%(prog_name)s ]]; then
  _%(prog_name)s "$@"
fi
"""

    def line(self, item: Candidate) -> str:
        help_text = description(item)
        return f"{item.value}\t{help_text}" if help_text else item.value


class Fish(_Shell):
    """fish: raw candidates, a tab, their description (fish escapes each candidate itself
    when it inserts it, and never expands a command substitution's output). Its script has
    no condition: nothing applies, nothing is offered (typer's fell back to files); a
    ``--opt=value`` word's candidates repeat its ``--opt=`` (fish matches the whole word)."""

    source_template = """\
# jobctl's fish completion: jobctl prints one candidate per line (a tab, then its
# description); fish quotes each as it inserts it. No files unless jobctl lists them.
complete --command %(prog_name)s --no-files --arguments \\
    "(env %(autocomplete_var)s=complete_fish _TYPER_COMPLETE_FISH_ACTION=get-args \\
    _TYPER_COMPLETE_ARGS=(commandline -cp) %(prog_name)s)"
"""

    prefix = ""

    def words(self) -> tuple[list[str], str]:
        args, incomplete = super().words()
        self.prefix = option_prefix(incomplete)
        return args, incomplete

    def line(self, item: Candidate) -> str:
        help_text = description(item)
        value = self.prefix + item.value
        return f"{value}\t{help_text}" if help_text else value


SHELLS: dict[str, type[Bash | Zsh | Fish]] = {"bash": Bash, "zsh": Zsh, "fish": Fish}


def script(shell: str) -> str:
    """``shell``'s completion script: what ``jobctl completion SHELL`` prints, byte for byte
    ``_JOBCTL_COMPLETE=source_SHELL``'s."""
    return SHELLS[shell]({}).source() + "\n"


def respond(root: Any, environ: Mapping[str, str], *, obj: object) -> int:
    """``_JOBCTL_COMPLETE``'s answer: ``source_SHELL`` the script, ``complete_SHELL`` the
    candidates at the cursor of the words the script sent, for ``root`` (the app's group;
    ``obj``, the invocation the commands' completions read)."""
    instruction, _, shell = environ.get("_JOBCTL_COMPLETE", "").partition("_")
    if shell not in SHELLS or instruction not in ("source", "complete"):
        print(f"jobctl: no completion for {environ.get('_JOBCTL_COMPLETE')!r}", file=sys.stderr)
        return 1
    made = SHELLS[shell](environ)
    text = made.source() if instruction == "source" else made.complete(root, obj)
    sys.stdout.write(text + "\n")
    sys.stdout.flush()
    return 0

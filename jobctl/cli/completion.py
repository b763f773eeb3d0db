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

Only these three shells are registered: jobctl ships no PowerShell completion.

What a TAB asks the database (job ids, workers) has one deadline, ``DEADLINE_S`` for all of
it in the process (``ask``): a read not done by then is left to a daemon thread and gives no
candidate, and once the candidates are written the process ends at once (``os._exit``), so
its exit never waits on a read left behind (a server that accepts and never answers).
"""

from __future__ import annotations

import os
import re
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from jobctl.cli.click_api import (
    BashComplete,
    CompletionItem,
    FishComplete,
    PathType,
    ZshComplete,
    add_completion_class,
    resolve_context,
    resolve_incomplete,
    split_arg_string,
)
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


def description(item: CompletionItem) -> str:
    """A candidate's help on one line, nothing a terminal would obey ('' if none)."""
    if not item.help:
        return ""
    return safe_text.visible(" ".join(str(item.help).split()))


def paths(incomplete: str, *, dirs_only: bool = False) -> list[CompletionItem]:
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
        found.append(CompletionItem(value + ("/" if is_dir else "")))
    return found


def candidates(shell: Any, args: list[str], incomplete: str) -> list[CompletionItem]:
    """What the parameter (or command) at the cursor offers, as click finds it (``--opt=value``
    included: click splits it), a PATH option's files listed here (typer's offer none), and
    then only those ``offered`` allows."""
    ctx = resolve_context(shell.cli, shell.ctx_args, shell.prog_name, args)
    where, value = resolve_incomplete(ctx, args, incomplete)
    kind = getattr(where, "type", None)
    if isinstance(kind, PathType):
        items = paths(value, dirs_only=bool(kind.dir_okay and not kind.file_okay))
    else:
        items = where.shell_complete(ctx, value)
    return [item for item in items if offered(str(item.value))]


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


class Bash(BashComplete):
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

    def get_completion_args(self) -> tuple[list[str], str]:
        words = split_arg_string(os.environ["COMP_WORDS"])
        args, incomplete, self.prefix = bash_words(words, int(os.environ["COMP_CWORD"]))
        return args, incomplete

    def get_completions(self, args: list[str], incomplete: str) -> list[CompletionItem]:
        return candidates(self, args, incomplete)

    def format_completion(self, item: CompletionItem) -> str:
        return self.prefix + bash_word(str(item.value))

    def complete(self) -> str:
        return finish(super().complete())


class Zsh(ZshComplete):
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

    def get_completions(self, args: list[str], incomplete: str) -> list[CompletionItem]:
        return candidates(self, args, incomplete)

    def format_completion(self, item: CompletionItem) -> str:
        help_text = description(item)
        value = str(item.value)
        return f"{value}\t{help_text}" if help_text else value

    def complete(self) -> str:
        args, incomplete = self.get_completion_args()
        found = self.get_completions(args, incomplete)
        return finish("\n".join(self.format_completion(i) for i in found))


class Fish(FishComplete):
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

    def get_completions(self, args: list[str], incomplete: str) -> list[CompletionItem]:
        self.prefix = option_prefix(incomplete)
        return candidates(self, args, incomplete)

    def format_completion(self, item: CompletionItem) -> str:
        help_text = description(item)
        value = self.prefix + str(item.value)
        return f"{value}\t{help_text}" if help_text else value

    def complete(self) -> str:
        return finish(super().complete())


SHELLS: dict[str, type[Bash | Zsh | Fish]] = {"bash": Bash, "zsh": Zsh, "fish": Fish}


def script(shell: str, command: Any) -> str:
    """``shell``'s completion script for ``command`` (the app's click command): what
    ``jobctl completion SHELL`` prints, byte for byte ``_JOBCTL_COMPLETE=source_SHELL``'s."""
    made = SHELLS[shell](command, {}, "jobctl", "_JOBCTL_COMPLETE")
    return str(made.source()) + "\n"


def register() -> None:
    """Make ``_JOBCTL_COMPLETE=source_SHELL`` and ``complete_SHELL`` use these classes."""
    add_completion_class(Bash, "bash")
    add_completion_class(Zsh, "zsh")
    add_completion_class(Fish, "fish")

"""Shell completion for bash, zsh and fish: candidates are data, never code a shell evaluates.

A candidate may come from the database (job ids, ``--worker`` names) or the config file
(target names), so it may hold anything an application can store: ``$(...)``, backticks,
quotes, backslashes, newlines, escape sequences. typer's own scripts let such text reach a
shell's parser (zsh ``eval``s its ``_arguments`` spec, and a backslash typer leaves unescaped
undoes its ``\\$``; bash inserts a candidate verbatim into the command line, which runs it on
Enter). Here, two rules (see docs/commands.md, "Shell completions"):

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
"""

from __future__ import annotations

import re

from typer._completion_classes import BashComplete, FishComplete, ZshComplete

from jobctl.cli.click_api import CompletionItem, add_completion_class
from jobctl.render import safe_text

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


def _offered(items: list[CompletionItem]) -> list[CompletionItem]:
    return [item for item in items if offered(str(item.value))]


class Bash(BashComplete):
    """bash: one escaped word per line, read with ``mapfile`` (no word splitting, no globs)."""

    source_template = """\
# jobctl's bash completion: jobctl prints one candidate per line, already escaped as a bash
# word, and they are read with mapfile (no splitting, no globbing): nothing is evaluated.
%(complete_func)s() {
    COMPREPLY=()
    mapfile -t COMPREPLY < <(env COMP_WORDS="${COMP_WORDS[*]}" COMP_CWORD="$COMP_CWORD" \\
        %(autocomplete_var)s=complete_bash "$1")
    return 0
}

complete -o default -F %(complete_func)s %(prog_name)s
"""

    def get_completions(self, args: list[str], incomplete: str) -> list[CompletionItem]:
        return _offered(super().get_completions(args, incomplete))

    def format_completion(self, item: CompletionItem) -> str:
        return bash_word(str(item.value))


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
  for line in "${(@f)$(env _TYPER_COMPLETE_ARGS="${words[1,$CURRENT]}" \\
      %(autocomplete_var)s=complete_zsh %(prog_name)s)}"; do
    [[ -n $line ]] || continue
    values+=("${line%%%%$'\\t'*}")
    if [[ $line == *$'\\t'* ]]; then helps+=("${line#*$'\\t'}"); else helps+=(""); fi
    (( ${#values[-1]} > width )) && width=${#values[-1]}
  done
  if (( ! ${#values} )); then
    _files
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
        return _offered(super().get_completions(args, incomplete))

    def format_completion(self, item: CompletionItem) -> str:
        help_text = description(item)
        value = str(item.value)
        return f"{value}\t{help_text}" if help_text else value

    def complete(self) -> str:
        args, incomplete = self.get_completion_args()
        return "\n".join(self.format_completion(i) for i in self.get_completions(args, incomplete))


class Fish(FishComplete):
    """fish: raw candidates, a tab, their description (typer's script: fish escapes each
    candidate itself when it inserts it, and never expands a command substitution's output)."""

    def get_completions(self, args: list[str], incomplete: str) -> list[CompletionItem]:
        return _offered(super().get_completions(args, incomplete))

    def format_completion(self, item: CompletionItem) -> str:
        help_text = description(item)
        value = str(item.value)
        return f"{value}\t{help_text}" if help_text else value


def register() -> None:
    """Make ``_JOBCTL_COMPLETE=source_SHELL`` and ``complete_SHELL`` use these classes."""
    add_completion_class(Bash, "bash")
    add_completion_class(Zsh, "zsh")
    add_completion_class(Fish, "fish")

"""``jobctl completion SHELL``: the shell completion script, printed to be installed where the
shell loads completions from (see docs/commands.md, "jobctl completion SHELL")."""

from __future__ import annotations

import enum
import sys
from typing import Annotated

import typer


class Shell(str, enum.Enum):
    bash = "bash"
    zsh = "zsh"
    fish = "fish"


def completion_command(
    ctx: typer.Context,
    shell: Annotated[
        Shell, typer.Argument(metavar="SHELL", help="bash, zsh or fish.", show_default=False)
    ],
) -> None:
    """Print the completion script for SHELL: candidates are data, never evaluated; nothing
    is offered when nothing applies; a TAB waits at most 1s on a database.

    Examples: jobctl completion bash > ~/.local/share/bash-completion/completions/jobctl;
    jobctl completion zsh > ~/.zfunc/_jobctl (a folder in $fpath, before compinit);
    jobctl completion fish > ~/.config/fish/completions/jobctl.fish
    """
    from jobctl.cli import completion

    sys.stdout.write(completion.script(shell.value))

"""Every command of jobctl, in the order ``jobctl --help`` lists them (pip's ``commands_dict``),
under the heading ``--help`` lists it in (``PANELS``: the core first, then the incident's other
levers, then running jobctl; docs/decisions.md): its name, the module and function that
implement it, the line ``--help`` lists it with, and what it does to the database: whether it
writes (always, or when one of its options is given) and whether it judges expiry widened by
a standby's lag. ``cli/main`` registers the
commands from this table alone; ``cli/context`` tells the core from it what a command does
(``sessions.Access``). Nothing is imported here: reading the table loads no command.

A new command is a function in a module of ``cli/commands/`` and one line here, at its place
in its panel's block: the core is what the mission names (find, read, recover, install); a
command that builds on the core goes under the incident's levers if the on-call reaches for it
during an incident, under running jobctl if it watches, sets up or shows jobctl itself.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any


@dataclasses.dataclass(frozen=True)
class Command:
    """One command: ``function`` of ``module``, listed in ``jobctl --help`` with ``summary``
    (None: the start of its docstring, as click shortens it)."""

    module: str
    function: str
    summary: str | None = None
    # False: never; True: always; an option's parameter name ("commit"): when it is given
    writes: bool | str = False
    widened: bool = False  # its expiry widened by a standby's lag, unless --trust-replica
    # an option's parameter name that makes a writing command only read ("list_pauses": pause
    # --list), served on a standby as any read is
    reads_with: str | None = None
    panel: str = ""  # the heading --help lists it under (one of PANELS), set by its block

    def writes_with(self, params: Mapping[str, Any]) -> bool:
        """Whether the command writes, run with ``params`` (typer's, by parameter name)."""
        if self.reads_with is not None and params.get(self.reads_with):
            return False
        if isinstance(self.writes, str):
            return bool(params.get(self.writes))
        return self.writes

    def widened_with(self, params: Mapping[str, Any]) -> bool:
        """Whether its judgement of expiry is widened, run with ``params``."""
        return self.widened and not params.get("trust_replica")


@dataclasses.dataclass(frozen=True)
class Group:
    """Commands under one name (``jobctl schema apply``), ``help`` their group's help."""

    help: str
    commands: dict[str, Command]
    panel: str = ""  # the heading jobctl --help lists the group under


CORE = "Core commands"
INCIDENT = "During an incident"
RUNNING = "Running jobctl"
PANELS = (CORE, INCIDENT, RUNNING)  # --help's headings, in its order


def _under(panel: str, block: dict[str, Command | Group]) -> dict[str, Command | Group]:
    """``block``'s commands, in its order, listed under ``panel``."""
    return {name: dataclasses.replace(entry, panel=panel) for name, entry in block.items()}


COMMANDS: dict[str, Command | Group] = {
    # the core: find stuck jobs, read one, recover them, install what it needs
    **_under(
        CORE,
        {
            "stuck": Command("jobctl.cli.commands.triage", "stuck", widened=True),
            "show": Command("jobctl.cli.commands.triage", "show"),
            "history": Command("jobctl.cli.commands.triage", "history"),
            "explain": Command(
                "jobctl.cli.commands.triage",
                "explain",
                "A job's story in plain sentences: claims, heartbeats, reclaims, who acted "
                "and why.",
            ),
            "reclaim": Command(
                "jobctl.cli.commands.writes", "reclaim_command", writes="commit", widened=True
            ),
            "requeue": Command("jobctl.cli.commands.writes", "requeue", writes=True),
            "fail": Command("jobctl.cli.commands.writes", "fail", writes=True),
            "cancel": Command(
                "jobctl.cli.commands.cancel",
                "cancel",
                "Take a running attempt back: fenced on its token; the worker's heartbeat "
                "stops it.",
                writes=True,
            ),
            "review": Command(
                "jobctl.cli.commands.review",
                "review",
                "Jobs waiting for a human: reclaim failed or parked them; longest waiting first.",
            ),
            "schema": Group(
                "Install and check the lease columns, reclaim index and history.",
                {
                    "apply": Command("jobctl.cli.commands.schema", "schema_apply", writes=True),
                    "remove": Command("jobctl.cli.commands.schema", "schema_remove", writes=True),
                    "grants": Command("jobctl.cli.commands.schema", "schema_grants", writes=True),
                    "check": Command("jobctl.cli.commands.schema", "schema_check"),
                    "statements": Command("jobctl.cli.commands.schema", "schema_statements"),
                },
            ),
        },
    ),
    # the incident's other levers: its shape, its record, stopping and steering the queue
    **_under(
        INCIDENT,
        {
            "summary": Command("jobctl.cli.commands.summary", "summary"),
            "events": Command(
                "jobctl.cli.commands.records",
                "events",
                "The history across jobs: transitions and every jobctl write, newest first.",
            ),
            "report": Command(
                "jobctl.cli.commands.records",
                "report",
                "An incident on one page of Markdown, for the postmortem.",
            ),
            "pause": Command(
                "jobctl.cli.commands.pause",
                "pause",
                "Stop claiming a kind or queue of jobs until resume; --list the pauses.",
                writes=True,
                reads_with="list_pauses",
            ),
            "resume": Command(
                "jobctl.cli.commands.pause",
                "resume",
                "Claim a paused kind or queue again.",
                writes=True,
            ),
            "policy": Command(
                "jobctl.cli.commands.policy", "policy", writes=True, reads_with="list_kinds"
            ),
            "quarantine": Command("jobctl.cli.commands.policy", "quarantine", writes="commit"),
        },
    ),
    # running jobctl: watching, checking, setting up, trying it
    **_under(
        RUNNING,
        {
            "metrics": Command(
                "jobctl.cli.commands.metrics",
                "metrics",
                "Lease health as Prometheus text, for node_exporter, cron or a Nagios-style check.",
            ),
            "top": Command(
                "jobctl.cli.top.command",
                "top",
                "An interactive console: stuck and review jobs, live; r/f if allowed.",
                writes="allow_writes",
            ),
            "doctor": Command(
                "jobctl.cli.commands.doctor",
                "doctor",
                "The lease design's pre-launch checks against what the application runs.",
            ),
            "targets": Command(
                "jobctl.cli.commands.targets",
                "targets_command",
                "The named databases of the config file; --check connects to each.",
            ),
            "completion": Command(
                "jobctl.cli.commands.shells",
                "completion_command",
                "Print the shell completion script: bash, zsh or fish.",
            ),
            "demo": Command("jobctl.cli.commands.demo", "demo_command"),
        },
    ),
}


def find(name: str) -> Command | None:
    """The command ``name``, as typed after ``jobctl`` (``reclaim``, ``schema apply``), or None."""
    first, _, rest = name.partition(" ")
    found = COMMANDS.get(first)
    if isinstance(found, Group):
        return found.commands.get(rest)
    return None if rest else found

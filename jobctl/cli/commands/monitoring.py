"""What notifications need of the CLI: the ``--notify`` options of ``reclaim --every`` and
``stuck --watch``, where their URLs come from, and the notifier each command starts
(``ops.notify`` does the rest). Registered with those commands.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import enum
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NamedTuple

import typer

from jobctl import db, errors, targets
from jobctl.cli import options as opt
from jobctl.cli import terminal
from jobctl.cli.bundles import Bundle

if TYPE_CHECKING:
    from jobctl.ops import notify, notify_send
    from jobctl.targets import Where

# ---------------------------------------------------------------- notifications
NotifyUrls = Annotated[
    list[str] | None,
    typer.Option(
        "--notify",
        metavar="URL",
        help="POST a notification to URL (repeatable; with reclaim --every or stuck --watch). "
        "A URL holding a secret: --notify-file or --notify-env instead, never on a command "
        "line. Default: JOBCTL_NOTIFY and the file JOBCTL_NOTIFY_FILE names.",
    ),
]
NotifyEnv = Annotated[
    list[str] | None,
    typer.Option(
        "--notify-env",
        metavar="VAR",
        help="POST notifications to the URL in environment variable VAR (repeatable; unset "
        "or empty: none, said once).",
    ),
]
NotifyFile = Annotated[
    Path | None,
    typer.Option(
        "--notify-file",
        metavar="PATH",
        dir_okay=False,
        help="POST notifications to the URLs in PATH, one a line (# comments), a file "
        "nobody else may write (a systemd credential, a 0600 file).",
    ),
]


class NotifyFormat(str, enum.Enum):
    json = "json"
    slack = "slack"
    pagerduty = "pagerduty"


NotifyAs = Annotated[
    NotifyFormat,
    typer.Option(
        "--notify-format",
        envvar="JOBCTL_NOTIFY_FORMAT",
        metavar="json|slack|pagerduty",
        help="The body: jobctl's JSON (schema jobctl.notification/1), Slack's incoming "
        "webhook, or PagerDuty Events v2 (alerts that resolve, routine events as Change "
        "Events; routing key from JOBCTL_PAGERDUTY_ROUTING_KEY).",
    ),
]
NotifyBurst = Annotated[
    int,
    typer.Option(
        "--notify-burst",
        min=1,
        metavar="N",
        help="expiry_burst when N or more leases expired in one pass (or one refresh).",
    ),
]
NotifyAfter = Annotated[
    dt.timedelta,
    opt.Duration(
        "reclaim --every tells target_down and review_waiting once they have lasted this "
        "long (with when they began): one that clears sooner (a database restarted in a few "
        "seconds) is told nothing, neither trigger nor resolve; 0s: at once.",
        show_default="60s",
    ),
]
NotifyState = Annotated[
    Path | None,
    typer.Option(
        "--notify-state-dir",
        envvar="JOBCTL_NOTIFY_STATE_DIR",
        metavar="DIR",
        file_okay=False,
        help="reclaim --every keeps in DIR which conditions it told open (a file per target "
        "and table), so that a restart resolves those and no other. Default: "
        "$STATE_DIRECTORY (systemd's StateDirectory=); none: PagerDuty is sent a resolve of "
        "each condition the first time a run finds it clear.",
        show_default=False,
    ),
]
ROUTING_KEY_VAR = "JOBCTL_PAGERDUTY_ROUTING_KEY"
SYSTEMD_STATE_VAR = "STATE_DIRECTORY"  # systemd's StateDirectory= (paths, ':' between)
URLS_VAR = "JOBCTL_NOTIFY"  # the URLs (spaces or newlines between), when no option names any
FILE_VAR = "JOBCTL_NOTIFY_FILE"  # a file of them, likewise
BURST = 20  # --notify-burst's default: ops.notify.BURST (tests/unit/test_notify.py)
AFTER = dt.timedelta(seconds=60)  # --notify-after's default: ops.notify.NOTIFY_AFTER_S


@dataclasses.dataclass(frozen=True)
class Asked(Bundle):
    """The ``--notify*`` options as given on the command line (``stuck --watch``,
    ``reclaim --every``): one parameter of the command, a bundle (``cli/bundles``)."""

    notify_urls: NotifyUrls = None
    notify_env: NotifyEnv = None
    notify_file: NotifyFile = None
    notify_format: NotifyAs = NotifyFormat.json
    notify_burst: NotifyBurst = BURST
    notify_after: NotifyAfter = AFTER
    notify_state_dir: NotifyState = None

    @property
    def given(self) -> bool:
        return bool(self.notify_urls or self.notify_env or self.notify_file)


NO_NOTIFY = Asked()  # no --notify option: the environment's, if any


def from_environment() -> bool:
    """Whether JOBCTL_NOTIFY or JOBCTL_NOTIFY_FILE name notifications: the default when no
    option does, like JOBCTL_DSN for --dsn (and, like it, never an error where a command
    sends none)."""
    return bool(os.environ.get(URLS_VAR, "").strip() or os.environ.get(FILE_VAR, "").strip())


def urls_of(asked: Asked, log: Callable[[str], None]) -> list[str]:
    """Every URL asked for, each checked (exit 2 in one line that names where it came from,
    never the URL): the options', else the environment's."""
    from jobctl.ops import notify_urls

    if not asked.given:
        found = notify_urls.urls_in(os.environ.get(URLS_VAR, ""), f"${URLS_VAR}")
        path = os.environ.get(FILE_VAR, "").strip()
        return found + (_file_urls(Path(path), f"${FILE_VAR}", log) if path else [])
    found = [
        notify_urls.check_url(u, f"--notify #{n}") for n, u in enumerate(asked.notify_urls or [], 1)
    ]
    for var in asked.notify_env or []:
        value = os.environ.get(var, "")
        if value.strip():
            found += notify_urls.urls_in(value, f"${var}")
        else:
            log(f"notify: ${var} is unset or empty: no notifications to it")
    if asked.notify_file is not None:
        found += _file_urls(asked.notify_file, "--notify-file", log)
    return found


def _file_urls(path: Path, source: str, log: Callable[[str], None]) -> list[str]:
    """The URLs of a file that nobody but its owner (or root) may write: another user who
    could would redirect the notifications; readable by others is said (its URLs are
    secrets)."""
    from jobctl.ops import notify_urls

    try:
        with path.open(encoding="utf-8") as f:
            mode = os.fstat(f.fileno()).st_mode
            text = f.read(1 << 20)
    except (OSError, UnicodeDecodeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else "not UTF-8 text"
        raise errors.UsageError(f"{source}: cannot read {path}: {why}") from None
    if mode & 0o022:
        raise errors.UsageError(
            f"{source}: {path} may be written by other users (chmod go-w): refused"
        )
    if mode & 0o004:
        log(f"notify: warning: {path} is readable by every user: its URLs are secrets (chmod 600)")
    found = notify_urls.urls_in(text, f"{source} {path}")
    if not found:
        log(f"notify: {path} names no URL: no notifications from it")
    return found


class Notifications(NamedTuple):
    """A command's notifications: their ``sender`` (a queue and a thread per webhook, closed
    when the command ends) and the ``watch`` that tells it what changed."""

    sender: notify_send.Sender
    watch: notify.Watch


def notifier(
    asked: Asked,
    *,
    table: str,
    target: str | None,
    command: str,
    log: Callable[[str], None],
    keeps_state: bool = False,
) -> Notifications | None:
    """The notifications' sender and watch (``ops.notify``), or None when no URL is given;
    bad input (a malformed URL, PagerDuty without its routing key) is exit 2, before the
    service starts. A URL that looks like it holds a secret, on the command line of this
    long-running command, is warned about (``ps`` shows it all along). ``keeps_state`` (the
    reclaimer): which conditions it told open kept in a state file (``state_dir``)."""
    from jobctl.ops import notify, notify_send, notify_urls

    found = urls_of(asked, log)
    if not found:
        return None
    key = os.environ.get(ROUTING_KEY_VAR, "")
    if asked.notify_format is NotifyFormat.pagerduty and not key:
        raise errors.UsageError(f"--notify-format pagerduty needs ${ROUTING_KEY_VAR}")
    if any(notify_urls.holds_secret(url) for url in asked.notify_urls or []):
        log(
            "jobctl: warning: a --notify URL looks like it holds a secret (a user, a token in "
            "its path or query) and stays visible in the process list (ps) while this runs: "
            f"use --notify-file, --notify-env or ${URLS_VAR}"
        )
    sender = notify_send.Sender(found, asked.notify_format.value, log=log, routing_key=key)
    names = ", ".join(notify_urls.shown(url) for url in found)
    log(f"notify: {asked.notify_format.value} notifications to {names}")
    opened = None
    if keeps_state:
        directory = state_dir(asked)
        if directory is None:
            log(
                "notify: no state directory (StateDirectory=, --notify-state-dir): "
                + notify.UNKNOWN
            )
        else:
            opened = notify.Opened(directory, table=table, target=target, log=log)
    watch = notify.Watch(
        sender.send,
        table=table,
        target=target,
        command=command,
        burst=asked.notify_burst,
        delivery=sender.delivery,
        close_stale=asked.notify_format is NotifyFormat.pagerduty,
        after_s=asked.notify_after.total_seconds(),
        log=log,
        opened=opened,
    )
    return Notifications(sender, watch)


def state_dir(asked: Asked) -> Path | None:
    """Where the reclaimer keeps which conditions it told open: --notify-state-dir (or its
    variable), else systemd's StateDirectory= (the first, when it names several); None:
    nowhere."""
    if asked.notify_state_dir is not None:
        return asked.notify_state_dir
    given = os.environ.get(SYSTEMD_STATE_VAR, "").split(":")[0].strip()
    return Path(given) if given else None


def for_stuck_watch(where: Where, watch: bool, asked: Asked) -> Notifications | None:
    """``stuck --watch``'s notifications (expiry_burst when ``burst`` leases are expired at a
    refresh), on one database only (a fleet is exit 2). The environment's URLs serve a
    watch on one database, and nothing else."""
    one = targets.single(where) if watch else None
    if not asked.given:
        if one is not None and from_environment():
            return _notifier_of(one, "stuck --watch", asked)
        return None
    if one is None:
        raise errors.UsageError(
            "--notify, --notify-env and --notify-file are for stuck --watch on one database"
        )
    return _notifier_of(one, "stuck --watch", asked)


def _notifier_of(here: db.Settings, command: str, asked: Asked) -> Notifications | None:
    """``notifier`` for ``command`` on the database ``here``, its lines on stderr; the
    reclaimer's keeps its state."""
    return notifier(
        asked,
        table=here.table,
        target=here.target,
        command=command,
        log=terminal.say,
        keeps_state=command == "reclaim --every",
    )


def served(where: Where, every: dt.timedelta | None, asked: Asked) -> db.Settings | None:
    """The one database ``reclaim --every`` notifies about, or None (no URL given, none in
    the environment); a ``--notify`` option without --every, or across targets: exit 2, before
    anything runs."""
    one = targets.single(where) if every is not None else None
    if not asked.given and not (one is not None and from_environment()):
        return None
    if one is None:
        raise errors.UsageError(
            "--notify, --notify-env and --notify-file are for reclaim --every on one database"
        )
    return one


@contextlib.contextmanager
def for_reclaim_service(
    where: Where, every: dt.timedelta | None, asked: Asked
) -> Iterator[notify.Watch | None]:
    """``reclaim --every``'s notifications, on one database only (without --every, or across
    targets, exit 2): their watch (``ops.notify.Watch``, or None when no URL is given), the
    sender closed when the service ends. The environment's URLs serve the service on one
    database, and nothing else."""
    one = served(where, every, asked)
    if one is None:
        yield None
        return
    made = _notifier_of(one, "reclaim --every", asked)
    try:
        yield made.watch if made else None
    finally:
        if made:
            made.sender.close()
            made.watch.settle()  # the resolves delivered while closing leave the state file


def refreshed(watch: Any, seen: list[Any]) -> None:
    """A refresh of ``stuck --watch`` told to its notifications (``ops.notify.Watch``, or
    None): the expired leases it shows (not those only expiring soon)."""
    if watch is not None:
        expired = [r for r in seen if r.get("lease_state", "expired") == "expired"]
        watch.burst_seen(len(expired), [r["id"] for r in expired])

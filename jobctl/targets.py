"""Named targets: the databases of a config file, addressed by name (``--target``).

The file is TOML: ``JOBCTL_CONFIG``, else ``$XDG_CONFIG_HOME/jobctl/config.toml`` (by default
``~/.config/jobctl/config.toml``). Each ``[targets.NAME]`` says where the database is (exactly
one of ``dsn``, ``service`` for pg_service.conf, or ``dsn_env`` naming an environment variable
that holds the DSN, so that no secret need sit in the file), its jobs table, and its defaults
for the global options; ``[defaults]`` holds defaults for every target. Example::

    [defaults]
    lock_timeout = "1s"

    [targets.orders]
    dsn = "host=db-eu.internal dbname=orders user=oncall"

    [targets.billing]
    dsn_env = "BILLING_DSN"
    table = "billing.jobs"

A setting on the command line wins over the target's, which wins over ``[defaults]``, which
wins over the environment (JOBCTL_TABLE, JOBCTL_ACTOR) and the built-in defaults.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import os
import re
import stat
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from jobctl import db, durations, errors

LOCATION_KEYS = ("dsn", "service", "dsn_env")
SETTING_KEYS = ("table", "statement_timeout", "lock_timeout", "actor")
TARGET_KEYS = (*LOCATION_KEYS, *SETTING_KEYS)
TOP_KEYS = ("defaults", "targets")
NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")


@dataclasses.dataclass(frozen=True)
class Target:
    """A named database of the config file: where it is, how jobctl behaves on it."""

    name: str
    settings: db.Settings
    where: str  # where it is (host:port/dbname), never with a password
    source: str = "dsn"  # where the file takes it from: dsn, service, or $VARIABLE (dsn_env)
    problem: str | None = None  # why it cannot be reached as configured (dsn_env unset)

    def check(self) -> None:
        """Refuse a target that cannot be used as configured (exit 2), before connecting."""
        if self.problem:
            raise errors.UsageError(f"target {self.name}: {self.problem}")


@dataclasses.dataclass(frozen=True)
class Config:
    """The config file as read: its targets in the file's order."""

    path: Path | None  # None: no config file
    targets: Mapping[str, Target]
    warnings: Sequence[str] = ()

    def select(self, names: Sequence[str]) -> list[Target]:
        """The targets named, in the order given (each once); an unknown name is one line
        naming the known ones (exit 2)."""
        chosen: list[Target] = []
        for name in dict.fromkeys(names):
            if name not in self.targets:
                raise errors.UsageError(f"unknown target {name!r}: {self.known()}")
            chosen.append(self.targets[name])
        return chosen

    def known(self) -> str:
        if self.path is None:
            return f"no config file ({default_path()}; JOBCTL_CONFIG names another)"
        if not self.targets:
            return f"{self.path} names no target"
        return f"the targets of {self.path} are {', '.join(self.targets)}"


def default_path() -> Path:
    """JOBCTL_CONFIG, else the XDG config home's jobctl/config.toml."""
    given = os.environ.get("JOBCTL_CONFIG")
    if given:
        return Path(given)
    home = os.environ.get("XDG_CONFIG_HOME") or os.path.join(Path.home(), ".config")
    return Path(home) / "jobctl" / "config.toml"


def load(path: Path | None = None, overrides: Mapping[str, Any] | None = None) -> Config:
    """The config file at ``path`` (default: ``default_path()``; a missing default file is no
    targets, a missing JOBCTL_CONFIG an error). ``overrides``: the global options given on the
    command line (``Settings`` field -> value), which win over the file's."""
    explicit = path is not None or bool(os.environ.get("JOBCTL_CONFIG"))
    path = path or default_path()
    try:
        with open(path, "rb") as file:
            found = os.fstat(file.fileno())
            raw = file.read()
    except FileNotFoundError:
        if explicit:
            raise errors.UsageError(f"config file {path} does not exist") from None
        return Config(None, {})
    except OSError as exc:
        raise errors.UsageError(f"cannot read config file {path}: {exc.strerror}") from None
    check_trusted(path, found, "config file", "use a file of your own (JOBCTL_CONFIG names it)")
    mode = found.st_mode
    document = _parse(path, raw)
    targets = parse(document, str(path), overrides or {})
    warnings = []
    exposed = mode & (stat.S_IRGRP | stat.S_IROTH)
    written = [t.settings.dsn for t in targets.values() if t.source == "dsn"]  # in the file
    if exposed and any(db.holds_password(dsn) for dsn in written):
        warnings.append(
            f"jobctl: warning: {path} holds a password and others can read it "
            f"({stat.filemode(mode)}): chmod 600 it, or name the DSN with dsn_env or service"
        )
    return Config(path, targets, warnings)


def check_trusted(path: Path, found: os.stat_result, kind: str, own_fix: str) -> None:
    """Refuse (UsageError, exit 2: one line naming the file, what is wrong and the fix) a
    file jobctl acts on (this config file, a saved plan: ``plans``) that someone else could
    have written. ``found``: the opened file's ``os.fstat``. ssh's rule for its own files: the
    file owned by you or root and not writable by group or others, and so its directory (the
    one named and, through a symbolic link, the real one), where a directory writable by
    others may be sticky (``/tmp``: nobody else can rename or remove your file there).
    ``own_fix``: what to do about a file of another user's."""
    me = os.geteuid()
    if found.st_uid not in (me, 0):
        _untrusted(path, kind, f"it belongs to uid {found.st_uid}, not you (uid {me})", own_fix)
    if found.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        shown = stat.filemode(found.st_mode)
        _untrusted(path, kind, f"it is writable by others ({shown})", f"chmod go-w {path}")
    directories = dict.fromkeys([path.absolute().parent, path.resolve().parent])
    for directory in directories:
        try:
            held = os.stat(directory)
        except OSError as exc:
            raise errors.UsageError(f"cannot read {kind} {path}: {exc.strerror}") from None
        if held.st_uid not in (me, 0):
            _untrusted(
                path,
                kind,
                f"its directory {directory} belongs to uid {held.st_uid}, not you (uid {me})",
                "move the file into a directory of your own",
            )
        if held.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not held.st_mode & stat.S_ISVTX:
            _untrusted(
                path,
                kind,
                f"its directory {directory} is writable by others "
                f"({stat.filemode(held.st_mode)}, not sticky)",
                f"chmod go-w {directory}, or move the file into a directory of your own",
            )


def _untrusted(path: Path, kind: str, problem: str, fix: str) -> None:
    raise errors.UsageError(
        f"{kind} {path} may have been changed by another user: {problem}; refused: {fix}"
    )


def _parse(path: Path, raw: bytes) -> dict[str, Any]:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.10: the same parser, from PyPI
        import tomli as tomllib
    try:
        document: dict[str, Any] = tomllib.loads(raw.decode("utf-8"))
        return document
    except UnicodeDecodeError:
        raise errors.UsageError(f"config file {path}: not UTF-8 text") from None
    except tomllib.TOMLDecodeError as exc:
        raise errors.UsageError(f"config file {path}: not valid TOML: {exc}") from None


def parse(
    document: Mapping[str, Any], source: str, overrides: Mapping[str, Any]
) -> dict[str, Target]:
    """The targets of a parsed config ``document`` (``source``: its file, for messages)."""
    unknown = sorted(set(document) - set(TOP_KEYS))
    if unknown:
        raise errors.UsageError(
            f"config file {source}: unknown key {unknown[0]!r} (known: {', '.join(TOP_KEYS)})"
        )
    defaults = _table(document.get("defaults", {}), source, "[defaults]")
    _only(defaults, SETTING_KEYS, source, "[defaults]")
    section = _table(document.get("targets", {}), source, "[targets]")
    targets = {}
    for name, body in section.items():
        if name == "total":  # summary's last row across targets
            raise errors.UsageError(
                f"config file {source}: target name 'total' is taken (summary's total row)"
            )
        if not NAME.fullmatch(name):
            raise errors.UsageError(
                f"config file {source}: target name {name!r}: letters, digits, '_', '-' and "
                "'.' only (it is typed on command lines and shown on terminals)"
            )
        header = f"[targets.{name}]"
        body = _table(body, source, header)
        _only(body, TARGET_KEYS, source, header)
        targets[name] = _target(name, {**defaults, **body}, source, header, overrides)
    return targets


def _table(value: Any, source: str, header: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise errors.UsageError(f"config file {source}: {header} must be a table")
    return value


def _only(body: Mapping[str, Any], keys: Sequence[str], source: str, header: str) -> None:
    unknown = sorted(set(body) - set(keys))
    if unknown:
        raise errors.UsageError(
            f"config file {source}: {header}: unknown key {unknown[0]!r} (known: {', '.join(keys)})"
        )


def _target(
    name: str, body: Mapping[str, Any], source: str, header: str, overrides: Mapping[str, Any]
) -> Target:
    for key, value in body.items():
        if not isinstance(value, str) or not value:
            raise errors.UsageError(f"config file {source}: {header}: {key} must be a string")
    given = [key for key in LOCATION_KEYS if key in body]
    if len(given) != 1:
        said = "none" if not given else " and ".join(given)
        raise errors.UsageError(
            f"config file {source}: {header} needs exactly one of dsn, service or dsn_env "
            f"(it has {said})"
        )
    problem = None
    if "dsn" in body:
        dsn, shown, taken_from = body["dsn"], _shown(body["dsn"]), "dsn"
    elif "service" in body:
        dsn, shown = f"service={_kv(body['service'])}", f"service {body['service']}"
        taken_from = "service"
    else:
        variable = body["dsn_env"]
        dsn, shown, taken_from = os.environ.get(variable, ""), "?", f"${variable}"
        if not dsn:
            problem = (
                f"its dsn_env {variable} is not set (or empty) (config file {source} {header})"
            )
        else:
            shown = _shown(dsn)
    fields: dict[str, Any] = {"dsn": dsn}
    if "table" in body:
        fields["table"] = body["table"]
    elif os.environ.get("JOBCTL_TABLE"):
        fields["table"] = os.environ["JOBCTL_TABLE"]
    for key in ("statement_timeout", "lock_timeout"):
        if key in body:
            fields[key] = _duration(body[key], source, f"{header}: {key}")
    if "actor" in body:
        fields["actor"] = body["actor"]
    elif os.environ.get("JOBCTL_ACTOR"):
        fields["actor"] = os.environ["JOBCTL_ACTOR"]
    fields |= overrides
    try:
        return Target(name, db.Settings(**fields, target=name), shown, taken_from, problem)
    except errors.UsageError as exc:
        raise errors.UsageError(f"config file {source}: {header}: {exc.message}") from None


def _duration(value: str, source: str, setting: str) -> dt.timedelta:
    try:
        return durations.parse(value)
    except durations.InvalidDuration as exc:
        raise errors.UsageError(f"config file {source}: {setting}: {exc}") from None


def _kv(value: str) -> str:
    """A value for a key=value connection string, quoted as libpq wants."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _shown(dsn: str) -> str:
    """Where a DSN points, for a person: host:port/dbname (no user, no password)."""
    from psycopg import conninfo

    try:
        parts = conninfo.conninfo_to_dict(dsn)
    except Exception:
        return "(an invalid dsn)"
    if "service" in parts and "host" not in parts:
        return f"service {parts['service']}"
    host = str(parts.get("host") or "localhost")
    port = f":{parts['port']}" if parts.get("port") else ""
    return f"{host}{port}/{parts.get('dbname') or '(default database)'}"


# ---------------------------------------------------------------- what a command addresses
@dataclasses.dataclass(frozen=True)
class Fleet:
    """Several targets at once (``--all-targets``, or ``--target`` given more than once)."""

    targets: Sequence[Target]


Where = db.Settings | Fleet  # where a command runs, decided once (``address``)


def address(
    names: Sequence[str],
    all_targets: bool,
    *,
    dsn: str | None,
    one: db.Settings,
    overrides: Mapping[str, Any],
    warn: Callable[[str], None],
) -> Where:
    """Where a command runs: ``one`` (the global options' database) when no target is named;
    a target's settings when one is; a ``Fleet`` for several or ``all_targets``. ``overrides``:
    the global options given on the command line, which win over the config file's."""
    if not names and not all_targets:
        return one
    if names and all_targets:
        raise errors.UsageError("--all-targets already names every target: no --target with it")
    if dsn:
        raise errors.UsageError("--dsn and --target both say where to connect: give one")
    config = load(overrides=overrides)
    for line in config.warnings:
        warn(line)
    chosen = list(config.targets.values()) if all_targets else config.select(names)
    if not chosen:
        raise errors.UsageError(f"--all-targets: no targets ({config.known()})")
    if len(chosen) == 1 and not all_targets:
        chosen[0].check()
        return chosen[0].settings
    return Fleet(chosen)


def from_environment() -> list[str]:
    """JOBCTL_TARGET: one name, or several separated by commas or spaces."""
    return [n for n in os.environ.get("JOBCTL_TARGET", "").replace(",", " ").split() if n]


def single(where: Where) -> db.Settings | None:
    """The one database a command runs on; None across several targets."""
    return None if isinstance(where, Fleet) else where


def one_database(where: Where, command: str) -> db.Settings:
    """The settings of a command that works on one database; across targets: exit 2."""
    settings = single(where)
    if settings is None:
        raise errors.UsageError(
            f"{command} works on one database at a time (ids, plans and schemas are per "
            "database): name one with --target, not several nor --all-targets"
        )
    return settings


def names(incomplete: str = "") -> list[str]:
    """The config file's target names starting with ``incomplete`` (shell completion):
    none, and no error, without a readable config file."""
    try:
        return [n for n in load().targets if n.startswith(incomplete)]
    except Exception:
        return []

"""The database: connecting, short transactions with timeouts, the jobs table resolved, and
database errors as one line. Its modules by job (``from jobctl import db`` gives their public
names, the way callers use them):

* ``settings``: where and how to connect (``Settings``), from the global options;
* ``connection``: a connection, and the transactions every command runs in;
* ``jobs_table``: the jobs table resolved in the database (``JobsTable``, ``resolve_table``);
* ``failures``: database errors as one line and an exit code (``mapped_errors``);
* ``secrets``: passwords kept out of every message (``redact``);
* ``gateway``: a statement of ``sql/`` run on a connection (``rows``, ``row``, ``one``,
  ``run``, ``stream``), the only way one reaches the server outside ``db/``, and the text of
  a JSON parameter (``json_parameter``);
* ``session``: a connection with its settings and table (``Session``), what workflows take;
* ``locks``, ``loaders``: lock tries that never make workers queue; values read safely.
"""

from jobctl.db.connection import (
    CONNECT_TIMEOUT_S,
    Sent,
    _settings_statement,
    connect,
    connected,
    pipelined,
    safe,
    sending,
    transaction,
    under_user_search_path,
    unset_hint,
)
from jobctl.db.failures import (
    UNAVAILABLE,
    database_error,
    mapped_errors,
    moved_to_another_partition,
    pooler_hint,
)
from jobctl.db.gateway import json_parameter, one, row, rows, run, stream
from jobctl.db.jobs_table import (
    DESIGN_ID_TYPE,
    DESIGN_STATUS_TYPE,
    JobsTable,
    creation_schema,
    identify,
    recorded_mapping,
    resolve_table,
    spelling,
    table_not_found,
    where,
)
from jobctl.db.secrets import check_dsn, holds_password, redact
from jobctl.db.settings import (
    DEFAULT_LOCK_TIMEOUT,
    DEFAULT_STATEMENT_TIMEOUT,
    Settings,
    default_actor,
)

__all__ = [
    "CONNECT_TIMEOUT_S",
    "DEFAULT_LOCK_TIMEOUT",
    "DEFAULT_STATEMENT_TIMEOUT",
    "DESIGN_ID_TYPE",
    "DESIGN_STATUS_TYPE",
    "UNAVAILABLE",
    "JobsTable",
    "Sent",
    "Settings",
    "_settings_statement",
    "check_dsn",
    "connect",
    "connected",
    "creation_schema",
    "database_error",
    "default_actor",
    "holds_password",
    "identify",
    "json_parameter",
    "mapped_errors",
    "moved_to_another_partition",
    "one",
    "pipelined",
    "pooler_hint",
    "recorded_mapping",
    "redact",
    "resolve_table",
    "row",
    "rows",
    "run",
    "safe",
    "sending",
    "spelling",
    "stream",
    "table_not_found",
    "transaction",
    "under_user_search_path",
    "unset_hint",
    "where",
]

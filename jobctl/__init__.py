"""jobctl: triage stuck jobs in a PostgreSQL job queue, safely."""

__version__ = "0.2.0"  # CHANGELOG.md: every change a user or a database sees bumps it

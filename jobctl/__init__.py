"""jobctl: triage stuck jobs in a PostgreSQL job queue, safely."""

__version__ = "0.1.0"

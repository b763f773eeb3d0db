"""jobctl: triage stuck jobs in a PostgreSQL job queue, safely.

A library first and a thin CLI over it: its packages are the layers of CONTRIBUTING.md's map
(``cli`` over ``ops`` over ``schema`` over ``db`` over ``table`` over ``render`` and ``sql``,
all over ``contract``), each importing only downward. Flat at this top: ``lease`` (the
worker API, public), ``targets`` (the config file's named databases), ``errors`` and
``durations`` (for every layer), and ``__main__`` (``python -m jobctl``).
"""

__version__ = "0.4.0"  # CHANGELOG.md: every change a user or a database sees bumps it

"""The workflows (layer 4): each command's job, for one database or many.

A workflow takes a ``Session`` (``db``) or the targets a command addresses, runs its
statements in short transactions, and returns typed data (rows, counts, outcomes, the steps
of a reclaim) for the CLI to word and show; it never prints, prompts, exits or imports typer.
``fleet`` runs a read on one database (a fleet of one) or on several targets at once, each
outcome kept; ``sessions`` opens the session the same way for both; ``standby`` tells a
standby from a primary. ``reclaim/`` is reclaim's one home; ``manual``, ``by_hand``, ``bulk``
and ``outcomes`` are the operator's fenced writes (read, decide, one UPDATE fenced on what
was read); ``doctor*`` is doctor's judge of the application's statements, pure but for
``doctor`` itself.
"""

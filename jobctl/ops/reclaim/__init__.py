"""Reclaim, the one home of ``jobctl reclaim``'s workflow: ``request`` (what the operator
asks, its rules), ``batches`` (the fenced statement in batches, the dry run, a plan's rows
applied), ``tally`` (what they did, counted as they pass, and the rows a table shows),
``plans`` (reclaim's plan files), ``one_database`` (one database's reclaim begun, in its
three modes), ``across_targets`` (the dry run and the commit across targets), ``row_errors``
(the row-by-row retry's rules), ``service`` (the reclaimer), ``steps`` (what the workflow
yields, as data: a lower layer's line, the targets whose preview failed, the question, the
batches to drain, what it did; ``render.reclaim_lines`` words them) and ``run`` (the
command's one workflow, on one database or several, a generator of its steps; ``serve``,
the service's)."""

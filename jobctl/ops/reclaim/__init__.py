"""Reclaim, the one home of ``jobctl reclaim``'s workflow: ``request`` (what the operator
asks, its rules), ``batches`` (the fenced statement in batches, the dry run, a plan's rows
applied), ``tally`` (what they did, counted as they pass, and the rows a table shows),
``plans`` (reclaim's plan files), ``one_database`` (one database's reclaim begun, in its
three modes), ``across_targets`` (the dry run and the commit across targets), ``row_errors``
(the row-by-row retry's rules), ``service`` (the reclaimer), and ``run`` (the command's one
workflow, on one database or several, the service's too)."""

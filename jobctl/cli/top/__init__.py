"""``jobctl top``: the interactive console (Textual, the optional extra ``jobctl[tui]``).
``command`` is the typer command and imports no Textual; ``app`` is the Textual app,
imported only when the command runs."""

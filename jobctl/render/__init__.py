"""Rows, documents and how they are drawn (layer 0, pure): tables, machine formats, safe text.

``views`` turns each command's result into a ``Document`` (the JSON payload, and the same
data as titled sections of rows); ``output`` renders a document in every format (a table
fitted to the terminal by ``screen``, tabulate's formats, csv/tsv by ``delimited``, json,
jsonl); ``rows`` says which columns a table shows of each row shape. The words of a command
live here too (``story``, ``judgements``, ``reclaim_lines``, ``write_lines``,
``pause_views``), as do the report's Markdown, the metrics' exposition and the
notifications' bodies. Nothing here touches the database, the environment or the terminal's
size: what it renders to is handed in.
"""

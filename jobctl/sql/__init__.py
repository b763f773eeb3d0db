"""jobctl's SQL (layer 0): the named statements of the .sql files beside this package.

Each statement is a ``-- name:`` block in one namespace, loaded once and composed by
``queries.query(name, **fragments)`` with ``{other_block}`` includes, so a statement is
written once and shared by the dry run and the commit; ``history/NNN_name.sql`` are the
history's migrations; ``printable`` keeps a generated script free of control characters.
"""

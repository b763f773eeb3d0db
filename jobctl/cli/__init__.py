"""The people's layer (5): the typer app, its commands, options, terminal and completion.

``main`` builds the app and registers every command from the command table
(``commands/__init__.py``, in ``--help``'s order, under its panel), each built only when it
runs or is listed (``click_api.LazyGroup``). A command is a function in ``commands/``: it
turns its options into a request, opens its session through ``context`` (the global options,
the server it found, the targets it addresses, whether it writes), calls one workflow of
``ops/`` and shows what comes back through ``terminal`` and ``render/``. Options are declared
once in ``options`` (a factory where help, type or bound differ; bounds on the option),
parsed by ``parameters``, grouped by ``bundles``; ``completion`` answers the shells.
Only this layer imports typer, prints, prompts or exits; ``top/`` alone imports Textual.
The optional commands' modules (``tests/unit/test_core_boundary.py``) are reached through
the command table only: no core module imports them.
"""

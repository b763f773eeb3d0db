"""The people's layer: the typer app, its commands, options, terminal and completion."""

"""Options that go together, taken by a command as one parameter: typer has no groups of
options, so a bundle is a frozen dataclass whose fields are its options (``Annotated``
aliases with their defaults), each named as the parameter it becomes; ``options.Slicing``
(--kind, --queue, --error), ``options.Bulk`` (requeue, fail and cancel on a filter),
``monitoring.Asked`` (the --notify options). The command table registers every command
``expanded`` (``cli/main``): the bundle's options stand in the bundle's place, where
``--help`` lists them, and the command is called with the bundle made of their values.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import typing
from collections.abc import Callable
from typing import Any


class Bundle:
    """The base of every bundle of options (a frozen dataclass of them)."""


def expanded(command: Callable[..., Any]) -> Callable[..., Any]:
    """``command`` as typer reads it: each ``Bundle`` parameter replaced by its options."""
    signature = inspect.signature(command, eval_str=True)
    bundles: dict[str, type[Bundle]] = {
        name: p.annotation
        for name, p in signature.parameters.items()
        if isinstance(p.annotation, type) and issubclass(p.annotation, Bundle)
    }
    if not bundles:
        return command
    parameters: list[inspect.Parameter] = []
    for p in signature.parameters.values():
        if p.name not in bundles:
            parameters.append(p)
            continue
        hints = typing.get_type_hints(p.annotation, include_extras=True)
        parameters += [
            inspect.Parameter(f.name, p.kind, default=f.default, annotation=hints[f.name])
            for f in dataclasses.fields(p.annotation)
        ]

    @functools.wraps(command)
    def run(**given: Any) -> Any:
        for name, bundle in bundles.items():
            options = {f.name: given.pop(f.name) for f in dataclasses.fields(bundle)}  # type: ignore[arg-type]
            given[name] = bundle(**options)
        return command(**given)

    run.__signature__ = signature.replace(parameters=parameters)  # type: ignore[attr-defined]
    run.__annotations__ = {p.name: p.annotation for p in parameters}
    return run

"""Options that go together, taken by a command as one parameter: typer has no groups of
options, so a bundle is a frozen dataclass whose fields are its options (``Annotated``
aliases with their defaults), each named as the parameter it becomes; ``options.Slicing``
(--kind, --queue, --error), ``options.Bulk`` (requeue, fail and cancel on a filter),
``monitoring.Asked`` (the --notify options). A command's bundle parameter has a bundle as
its default (``slicing: opt.Slicing = opt.ANY_JOB``). The command table registers every
command ``expanded`` (``cli/main``): the bundle's options stand in the bundle's place, where
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
    """``command`` as typer reads it: each parameter whose default is a ``Bundle`` replaced
    by the bundle's options. A command without one is itself."""
    if not any(isinstance(default, Bundle) for default in command.__defaults__ or ()):
        return command
    return _Expanded(command)


class _Expanded:
    """A command with bundles, called with their options. Its signature is worked out when
    typer first reads it (every annotation evaluated): typer builds only the command that
    runs (``click_api.lazy_group``), so ``jobctl --help`` and a TAB never pay for the others.
    """

    def __init__(self, command: Callable[..., Any]) -> None:
        functools.update_wrapper(
            self, command, assigned=("__module__", "__name__", "__qualname__", "__doc__")
        )
        self.command = command

    @functools.cached_property
    def bundles(self) -> dict[str, type[Bundle]]:
        """The command's bundles by parameter name."""
        parameters = inspect.signature(self.command).parameters
        return {n: type(p.default) for n, p in parameters.items() if isinstance(p.default, Bundle)}

    @functools.cached_property
    def __signature__(self) -> inspect.Signature:
        signature = inspect.signature(self.command, eval_str=True)
        parameters: list[inspect.Parameter] = []
        for p in signature.parameters.values():
            bundle = self.bundles.get(p.name)
            if bundle is None:
                parameters.append(p)
                continue
            parameters += [o.replace(kind=p.kind) for o in _options(bundle)]
        return signature.replace(parameters=parameters)  # a name twice: ValueError

    @functools.cached_property
    def __annotations__(self) -> dict[str, Any]:  # type: ignore[override]
        return {p.name: p.annotation for p in self.__signature__.parameters.values()}

    def __call__(self, **given: Any) -> None:
        for name, bundle in self.bundles.items():
            given[name] = _made(bundle, given)
        self.command(**given)


_OPTIONS: dict[type[Bundle], tuple[inspect.Parameter, ...]] = {}


def _options(bundle: type[Bundle]) -> tuple[inspect.Parameter, ...]:
    """A bundle's options as parameters (a bundle in it: its options in its place; a field
    the bundle fixes, ``init=False``: none), its annotations evaluated once whatever the
    number of commands that take it."""
    if bundle not in _OPTIONS:
        hints = typing.get_type_hints(bundle, include_extras=True)
        found: list[inspect.Parameter] = []
        for f in dataclasses.fields(bundle):  # type: ignore[arg-type]
            if not f.init:
                continue
            if isinstance(f.default, Bundle):
                found += _options(type(f.default))
                continue
            kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
            found.append(
                inspect.Parameter(f.name, kind, default=f.default, annotation=hints[f.name])
            )
        _OPTIONS[bundle] = tuple(found)
    return _OPTIONS[bundle]


def _made(bundle: type[Bundle], given: dict[str, Any]) -> Bundle:
    """The bundle of its options' values, taken out of ``given`` (a bundle in it: made the
    same way)."""
    values = {
        f.name: _made(type(f.default), given)
        if isinstance(f.default, Bundle)
        else given.pop(f.name)
        for f in dataclasses.fields(bundle)  # type: ignore[arg-type]
        if f.init
    }
    return bundle(**values)

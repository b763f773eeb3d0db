"""Bundles of options (``cli/bundles``): a command takes one as a parameter, typer sees its
options in that place, and the command gets the bundle back made of their values."""

from __future__ import annotations

import dataclasses
import inspect
from typing import Annotated

import pytest
import typer
from typer.testing import CliRunner

from jobctl.cli import bundles, parameters
from jobctl.cli import options as opt
from jobctl.cli.commands import monitoring, writes
from jobctl.ops.slices import Slice


@dataclasses.dataclass(frozen=True)
class Pair(bundles.Bundle):
    first: Annotated[int, typer.Option(metavar="N", help="The first.")] = 1
    second: Annotated[list[str] | None, typer.Option("--second", help="The second.")] = None


@dataclasses.dataclass(frozen=True)
class Clash(bundles.Bundle):
    first: Annotated[int, typer.Option(help="Named as Pair's.")] = 0


CALLS: list[tuple[int, Pair, bool]] = []


def command(
    before: Annotated[int, typer.Option(help="Before the bundle.")] = 0,
    pair: Pair = Pair(),  # never used: typer passes every option
    after: Annotated[bool, typer.Option("--after", help="After it.")] = False,
) -> None:
    """A command with a bundle between two options."""
    CALLS.append((before, pair, after))


def clashing(pair: Pair = Pair(), clash: Clash = Clash()) -> None:
    """Two bundles that name one parameter twice."""


def registered() -> typer.Typer:
    app = typer.Typer(add_completion=False, rich_markup_mode=None)
    app.command("command")(bundles.expanded(command))
    return app


def test_the_bundles_options_stand_in_its_place():
    params = typer.main.get_command(registered()).params
    assert [p.name for p in params] == ["before", "first", "second", "after"]
    help_text = CliRunner().invoke(registered(), ["--help"]).output
    assert help_text.index("--before") < help_text.index("--first N") < help_text.index("--after")
    assert "The first." in help_text and "[default: 1]" in help_text


def test_the_command_gets_the_bundle_of_the_values_given():
    CALLS.clear()
    done = CliRunner().invoke(registered(), ["--first", "3", "--second", "x", "--after"])
    assert done.exit_code == 0, done.output
    done = CliRunner().invoke(registered(), [])
    assert done.exit_code == 0, done.output
    assert CALLS == [(0, Pair(3, ["x"]), True), (0, Pair(), False)]


def test_a_command_without_a_bundle_is_registered_as_it_is():
    assert bundles.expanded(parameters.duration) is parameters.duration


def test_two_bundles_may_not_name_one_parameter_twice():
    with pytest.raises(ValueError, match="duplicate parameter name"):
        inspect.signature(bundles.expanded(clashing))


def test_the_signature_is_read_when_typer_builds_the_command(monkeypatch):
    """Registering reads no annotation: typer builds only the command that runs."""
    read = []
    real = inspect.signature
    monkeypatch.setattr(inspect, "signature", lambda f, **kw: read.append(f) or real(f, **kw))
    app = registered()
    assert read == []
    typer.main.get_command(app)
    assert command in read


def test_what_the_commands_bundles_give_the_core():
    assert opt.ANY_JOB.slice() == Slice((), (), None)
    assert opt.Slicing(["a", "b"], None, "").slice() == Slice(("a", "b"), (), None)
    assert opt.Slicing(None, ["q"], "timeout").slice() == Slice((), ("q",), "timeout")
    assert not monitoring.NO_NOTIFY.given
    assert monitoring.Asked(notify_env=["HOOK"]).given


@dataclasses.dataclass(frozen=True)
class Outer(bundles.Bundle):
    """A bundle in a bundle, and a field a narrower bundle fixes."""

    head: Annotated[int, typer.Option(metavar="N", help="Before the inner bundle.")] = 0
    pair: Pair = Pair()
    tail: Annotated[bool, typer.Option("--tail", help="After it.")] = False


@dataclasses.dataclass(frozen=True)
class Narrower(Outer):
    tail: bool = dataclasses.field(default=True, init=False)  # no option: always True


OUTER: list[Outer] = []


def nesting(outer: Narrower = Narrower()) -> None:
    OUTER.append(outer)


def test_a_bundle_in_a_bundle_stands_in_its_place_and_a_fixed_field_is_no_option():
    app = typer.Typer(add_completion=False, rich_markup_mode=None)
    app.command("nesting")(bundles.expanded(nesting))
    params = typer.main.get_command(app).params
    assert [p.name for p in params] == ["head", "first", "second"]
    OUTER.clear()
    done = CliRunner().invoke(app, ["--head", "2", "--first", "3"])
    assert done.exit_code == 0, done.output
    assert OUTER == [Narrower(head=2, pair=Pair(3, None))] and OUTER[0].tail is True
    assert CliRunner().invoke(app, ["--tail"]).exit_code == 2


def test_requeue_fail_and_cancel_take_one_bundle_each_narrowed():
    """Their options are ByHand's, in its order, less what each fixes."""
    names = [p.name for p in bundles._options(writes.ByHand)]
    for bundle, fixed in (
        (writes.Requeue, {"park"}),
        (writes.Fail, {"delay", "park", "spread"}),
        (writes.Cancel, {"delay", "force", "status", "spread"}),
    ):
        assert [p.name for p in bundles._options(bundle)] == [n for n in names if n not in fixed]
    assert (
        writes.CANCEL.force and not writes.FAIL.park and writes.FAIL.spread == writes.REQUEUE.spread
    )

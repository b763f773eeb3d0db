"""The walk of ``jobctl reclaim --commit --yes --batch-size 5``: what a reader follows from
the command to the database and back, measured on a real run (not a test: it asserts
nothing; it prints figures).

The run: 12 expired jobs on the reference table, the command in-process (the test suite's
runner and database), its own functions traced (``sys.setprofile``, the main thread) from
the moment ``reclaim_command`` is entered until it returns. The reader reads the call tree
depth first in the order the calls happen, each function once: a **stop** is a jobctl
function read (its first call; a comprehension is its enclosing function's; a lambda or
nested function is a stop of its own; what runs inside an import is no stop, so the figures
do not depend on what the process imported before); a **room** is the module a stop is in;
the **walk** is the rooms in the order the reader stands in them, where a first call moves
the reader from its caller's room (the nearest jobctl frame up the stack: going back there first, if
the reader stood elsewhere) to the callee's. A **return** is a move into a room already
left before. The figures are given twice: over every jobctl module, and over the command's
own path (``cli/``, ``ops/``, ``render/``: the stops and the walk without the shared ground
under them, its moves into and out of it folded); last, the command's functions (``cli/``)
a workflow (``ops/``) called first: the callbacks it was handed. ::

    .venv/bin/pytest -n0 -q -s -o addopts="" tests/bench/walk_reclaim.py
"""

from __future__ import annotations

import sys
import threading
import types
from pathlib import Path
from typing import Any

from helpers import add_jobs, claim_all

import jobctl

ROOT = Path(jobctl.__file__).parent
COMPREHENSIONS = {"<genexpr>", "<listcomp>", "<dictcomp>", "<setcomp>"}
called_back: list[str] = []  # the command's functions a workflow called (its callbacks)


def _room(code: types.CodeType) -> str | None:
    path = Path(code.co_filename)
    if not path.is_relative_to(ROOT):
        return None
    return str(path.relative_to(ROOT).with_suffix(""))


def _importing(frame: types.FrameType | None) -> bool:
    """Whether ``frame`` runs inside an import (a module's body, or a class body in it)."""
    while frame is not None and frame.f_code.co_name != "reclaim_command":
        if frame.f_code.co_name == "<module>":
            return True
        frame = frame.f_back
    return False


def _reader(frame: types.FrameType | None) -> types.FrameType | None:
    """The nearest frame of a jobctl function (not a comprehension) at or above ``frame``."""
    while frame is not None:
        if _room(frame.f_code) and frame.f_code.co_name not in COMPREHENSIONS:
            return frame
        frame = frame.f_back
    return None


def walk(run: Any, *args: str) -> tuple[list[str], list[str], Any]:
    """The stops and the rooms of the walk of ``jobctl *args`` (``run``: the suite's runner)."""
    stops: list[str] = []
    seen: set[types.CodeType] = set()
    rooms: list[str] = []
    called_back.clear()
    inside = [False]
    main = threading.main_thread()

    def stand(room: str) -> None:
        if not rooms or rooms[-1] != room:
            rooms.append(room)

    def profile(frame: types.FrameType, event: str, _arg: Any) -> None:
        if threading.current_thread() is not main:
            return
        code = frame.f_code
        if event == "call" and code.co_name == "reclaim_command":
            inside[0] = True
        if event == "return" and code.co_name == "reclaim_command":
            inside[0] = False
        if not inside[0] or event != "call" or code in seen:
            return
        room = _room(code)
        if room is None or code.co_name in COMPREHENSIONS or _importing(frame):
            return
        seen.add(code)
        caller = _reader(frame.f_back)
        if caller is not None and code.co_name != "reclaim_command":
            caller_room = _room(caller.f_code)
            assert caller_room is not None
            stand(caller_room)
        stops.append(f"{room}.{code.co_qualname}")
        if caller is not None and room.startswith("cli/"):
            from_room = _room(caller.f_code) or ""
            if from_room.startswith("ops/"):  # a callback the command handed the workflow
                called_back.append(f"{from_room}.{caller.f_code.co_qualname} -> {stops[-1]}")
        stand(room)

    sys.setprofile(profile)
    try:
        done = run(*args)
    finally:
        sys.setprofile(None)
    return stops, rooms, done


def test_walk_of_reclaim_batch_size(conn, dsn, run):
    add_jobs(conn, 12)
    claim_all(dsn, 12, lease_seconds=-60)
    stops, rooms, done = walk(run, "reclaim", "--commit", "--yes", "--batch-size", "5")
    assert done.code == 0, done.err
    print()
    for stop in stops:
        print("  stop", stop)
    print("  walk", " > ".join(rooms))
    said(stops, rooms, "every jobctl module")
    # the command's own path: the people's layer, the workflows and the words, without the
    # shared ground under them (db/, sql/, table/, schema/, contract/)
    own = ("cli/", "ops/", "render/")
    said(
        [s for s in stops if s.startswith(own)],
        _collapsed([r for r in rooms if r.startswith(own)]),
        "cli/, ops/, render/",
    )
    for call in called_back:
        print("  called back", call)
    print(f"the command's functions called from ops/ (callbacks): {len(called_back)}")


def _collapsed(rooms: list[str]) -> list[str]:
    return [r for i, r in enumerate(rooms) if not i or rooms[i - 1] != r]


def said(stops: list[str], rooms: list[str], what: str) -> None:
    returns = sum(room in rooms[:i] for i, room in enumerate(rooms))
    print(
        f"walk of reclaim --batch-size ({what}): {len(stops)} stops in {len(set(rooms))} "
        f"rooms, {returns} returns to a room already left"
    )

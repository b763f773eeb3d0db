"""The fleet on a terminal: commands across targets on a pty of 80x24 and 120x40
(tests/screens.py): no line wider than the terminal, one line per job with its target first,
a failed target one message, the commit's question naming each target's counts."""

from __future__ import annotations

import re
from typing import Any

import fleet as staging
import pytest
from psycopg import conninfo
from rich.cells import cell_len
from screens import on_terminal

pytest.importorskip("pyte")

SIZES = [(80, 24), (120, 40)]


@pytest.fixture(scope="module")
def staged(server_dsn, template, tmp_path_factory):
    with staging.staged(server_dsn, template, tmp_path_factory.mktemp("fleet")) as made:
        yield made


def fleet_shot(f: staging.Fleet, args: list[str], columns: int, rows: int, **kw: Any) -> Any:
    """``jobctl args`` on a pty with the fleet's config (no JOBCTL_DSN), checked to fit."""
    shot = on_terminal(
        args,
        columns=columns,
        rows=rows,
        env={"JOBCTL_CONFIG": str(f.config), **f.env},
        unset=("JOBCTL_DSN",),
        **kw,
    )
    wide = [line for line in shot.written_lines() if cell_len(line) > columns]
    assert not wide, f"lines wider than {columns} columns: {wide}"
    return shot


@pytest.mark.parametrize(("columns", "rows"), SIZES)
def test_stuck_across_targets_one_line_per_job_target_first(staged, columns, rows):
    shot = fleet_shot(staged, ["--all-targets", "stuck"], columns, rows)
    assert shot.code == 1  # the down target
    assert shot.lines[0].split()[:3] == ["TARGET", "ID", "WORKER"]
    for target, ids in staged.ids.items():
        for job in ids:
            found = [line for line in shot.lines if re.match(rf"{target}\s+{job}\s+dead", line)]
            assert len(found) == 1, (target, job, shot.text)
    assert sum("target down" in line for line in shot.lines) == 1


@pytest.mark.parametrize(("columns", "rows"), SIZES)
def test_summary_and_targets_fit(staged, columns, rows):
    shots = {
        name: fleet_shot(staged, args, columns, rows)
        for name, args in (
            ("summary", ["--all-targets", "summary"]),
            ("checked", ["targets", "--check"]),
            ("listed", ["targets"]),
        )
    }
    for shot in shots.values():
        names = [line.split()[0] for line in shot.lines[1:] if line and not line.startswith(" ")]
        assert {"orders", "billing", "emails"} <= set(names), shot.text
    assert any(line.startswith("total ") for line in shots["summary"].lines)
    row = next(line for line in shots["checked"].lines if line.startswith("billing "))
    assert "primary" in row and "applied" in row  # whole, never cut


def test_the_commit_across_targets_asks_once_naming_each_target(staged):
    shot = fleet_shot(staged, ["--all-targets", "reclaim", "--commit"], 120, 40, answer="n")
    said = " ".join(shot.lines)
    assert "by target: orders 3 (2 requeue, 1 fail), billing 2 (2 requeue, 0 fail)" in said
    assert "Reclaim 5 expired job(s) on 3 target(s), not on down (failed)? [y/N]" in said
    assert shot.code == 2
    assert "cancelled; nothing changed" in shot.text


@pytest.mark.parametrize(("columns", "rows"), SIZES)
def test_watch_across_targets_says_the_down_target_above_the_table(staged, columns, rows):
    args = ["--all-targets", "summary", "--watch", "--every", "0.2s", "--count", "2"]
    shot = fleet_shot(staged, args, columns, rows)
    assert shot.code == 1
    assert any(line.startswith("total ") for line in shot.lines), shot.text
    said = [n for n, line in enumerate(shot.lines) if line.startswith(f"{staged.down} ")]
    assert said and "error: cannot connect" in shot.lines[said[-1]], shot.text
    table = next(n for n, line in enumerate(shot.lines) if re.match(r"TARGET\s+QUEUED", line))
    assert shot.lines.index("what the targets said") < said[-1] < table, shot.text
    assert "Traceback" not in shot.text


def test_ctrl_c_leaves_the_watch_across_targets_on_screen_once(staged):
    """Ctrl-C ends the watch: its last refresh stays on the screen once (no title twice, no
    traceback), the down target's line above the table, exit 1 (that refresh was partial).
    The ^C echoed after a line as wide as the screen: tests/unit/test_screen_layout.py."""
    args = ["--all-targets", "summary", "--watch", "--every", "5s"]
    shot = fleet_shot(staged, args, 80, 24, interrupt_at=b"what the targets said")
    titles = [line for line in shot.lines if "Ctrl-C to stop" in line]
    assert len(titles) == 1, shot.text
    assert shot.lines.index("what the targets said") == shot.lines.index(titles[0]) + 1
    assert "Traceback" not in shot.text and shot.code == 1  # the last refresh had a target failing


@pytest.mark.parametrize(("columns", "rows"), SIZES)
def test_targets_check_names_each_database_whole(staged, columns, rows):
    """At 80 columns ``targets --check`` cut the database name
    (``127.0.0.1/…``); the database is its own column now, never cut, the host beside it
    where there is room, and a problem said whole under the table, not cut in a column."""
    shot = fleet_shot(staged, ["targets", "--check"], columns, rows)
    header = shot.lines[0].split()
    assert header[:3] == ["TARGET", "DATABASE", "TABLE"] and "PROBLEM" not in header
    for target in staged.ids:
        row = next(line for line in shot.lines if line.startswith(f"{target} "))
        database = conninfo.conninfo_to_dict(staged.dsns[target])["dbname"]
        assert database in row.split(), (target, shot.text)
    assert "…" not in "\n".join(line for line in shot.lines if line.startswith("billing "))

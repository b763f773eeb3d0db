"""jobctl top on a real pseudo-terminal, at 100x30 and 80x24: the screen a person
sees (pyte), driven with keys; q quits with exit 0. The pilot tests are in
tests/integration/test_top.py."""

from __future__ import annotations

import pytest
from conftest import scratch_database
from screens import WORKERS, stage
from top_screens import console

from jobctl.cli.top.views import HELP

pytest.importorskip("pyte")
pytest.importorskip("textual")


@pytest.fixture(scope="module")
def incident(server_dsn, template):
    with scratch_database(server_dsn, "jobctl_top_screen", template) as dsn:
        yield dsn, stage(dsn)


@pytest.mark.parametrize(("columns", "rows"), [(100, 30), (80, 24)])
def test_top_on_a_terminal(incident, columns, rows):
    dsn, ids = incident
    with console(["--expiring-within", "5m"], dsn, columns, rows) as top:
        shown = top.wait_for("1 stuck")
        lines = shown.splitlines()
        assert lines[0].startswith("expired 12 · expiring 4 · review 1")
        assert "read-only" in lines[1]
        assert "16 of 16" in lines[2]
        jobs = [line for line in lines if any(w in line for w in WORKERS)]
        assert len(jobs) == min(16, rows - 8)  # one line per job, as many as fit
        assert all(line.split()[0].isdigit() for line in jobs)  # each id whole, first
        assert "q quit" in top.screen.display[-1]  # the keys, at the bottom
        top.press("r")
        said = [line.strip() for line in top.text.splitlines() if "read-only: " in line]
        assert said == ["read-only: requeue writes nothing; start with top --allow-writes"]
        top.press("?")  # the help: every key, whole at this width
        shown = top.wait_for("jobctl top: keys")
        for keys, does in HELP:
            assert f"{keys:<10} {does}" in shown
        assert "jobctl top --allow-writes writes" in shown
        top.press("\x1b")
        top.wait_for("1 stuck")
        top.press("2")
        assert f"    {ids['parked']}   manual  {WORKERS[3]}" in top.wait_for("awaiting review")
        top.press("\r")
        detail = top.wait_for("explain")
        assert f"job {ids['parked']}" in detail
        top.press("\x1b")
        top.wait_for("2 awaiting review")
        top.press("q")
        assert top.close() == 0


def test_top_across_targets_on_a_terminal(incident, tmp_path):
    dsn, _ = incident
    config = tmp_path / "jobctl.toml"
    config.write_text(f'[targets.east]\ndsn = "{dsn}"\n\n[targets.west]\ndsn = "{dsn}"\n')
    config.chmod(0o600)
    with console(
        ["--every", "1h"],
        dsn,
        100,
        30,
        env={"JOBCTL_CONFIG": str(config)},
        before=["--all-targets"],
    ) as top:
        shown = top.wait_for("1 stuck")
        assert "2 target(s): east, west" in shown
        assert "expired 24" in shown  # the same database twice: every count twice
        rows = [line.split() for line in shown.splitlines() if "api-worker" in line]
        assert {r[0] for r in rows} == {"east", "west"}  # the target, first
        top.press("\x03")  # Ctrl-C, as the terminal sends it: out, exit 130
        assert top.close() == 130

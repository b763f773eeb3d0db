"""Shell completions: the committed scripts are current, and they work in a real bash."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import add_jobs, claim_all

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = {"bash": "jobctl.bash", "zsh": "_jobctl", "fish": "jobctl.fish"}


def generate(shell: str) -> str:
    env = {**os.environ, "_JOBCTL_COMPLETE": f"source_{shell}"}
    return subprocess.run(
        [sys.executable, "-m", "jobctl"], env=env, capture_output=True, text=True, check=True
    ).stdout


@pytest.mark.parametrize("shell", sorted(SCRIPTS))
def test_committed_completion_scripts_are_current(shell):
    committed = (ROOT / "completions" / SCRIPTS[shell]).read_text()
    assert generate(shell) == committed, (
        f"completions/{SCRIPTS[shell]} is stale: regenerate it with "
        f"_JOBCTL_COMPLETE=source_{shell} jobctl > completions/{SCRIPTS[shell]}"
    )


def bash_complete(words: list[str], env: dict[str, str]) -> list[str]:
    script = ROOT / "completions" / "jobctl.bash"
    line = " ".join(f"'{w}'" for w in words)
    program = (
        f"source {script}; COMP_WORDS=({line}); COMP_CWORD={len(words) - 1}; "
        "_jobctl_completion jobctl; printf '%s\\n' \"${COMPREPLY[@]}\""
    )
    path = f"{Path(sys.executable).parent}:{env.get('PATH', '')}"
    result = subprocess.run(
        ["bash", "-c", program],
        env={**env, "PATH": path},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.stderr == ""
    return [w for w in result.stdout.splitlines() if w]


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash")
@pytest.mark.skipif(
    shutil.which("jobctl", path=str(Path(sys.executable).parent)) is None,
    reason="jobctl is not installed in this environment",
)
def test_bash_completes_commands_options_and_job_ids(conn, dsn):
    env = {k: v for k, v in os.environ.items() if k not in ("JOBCTL_DSN", "DATABASE_URL")}
    registered = subprocess.run(
        ["bash", "-c", f"source {ROOT / 'completions' / 'jobctl.bash'}; complete -p jobctl"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert registered.strip() == "complete -o default -F _jobctl_completion jobctl"
    assert {"reclaim", "requeue"} <= set(bash_complete(["jobctl", "re"], env))
    assert "--batch-size" in bash_complete(["jobctl", "reclaim", "--ba"], env)
    assert bash_complete(["jobctl", "show", ""], env) == []  # no DSN: nothing, no error
    add_jobs(conn, 12)
    claim_all(dsn, 12)
    ids = bash_complete(["jobctl", "show", "1"], {**env, "JOBCTL_DSN": dsn})
    assert ids == ["1", "10", "11", "12"]


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash")
@pytest.mark.skipif(
    shutil.which("jobctl", path=str(Path(sys.executable).parent)) is None,
    reason="jobctl is not installed in this environment",
)
def test_bash_completes_option_values(conn, dsn):
    """--policy, -o and schema apply --history complete their values; --worker the workers
    holding processing jobs, from the database."""
    env = {k: v for k, v in os.environ.items() if k not in ("JOBCTL_DSN", "DATABASE_URL")}
    assert bash_complete(["jobctl", "stuck", "--policy", ""], env) == ["auto", "manual"]
    assert bash_complete(["jobctl", "stuck", "--policy", "m"], env) == ["manual"]
    assert {"table", "wide", "json", "csv"} <= set(
        bash_complete(["jobctl", "stuck", "-o", ""], env)
    )
    history = bash_complete(["jobctl", "schema", "apply", "--history", ""], env)
    assert history == ["transitions", "late", "exact", "audit"]
    assert bash_complete(["jobctl", "stuck", "--worker", ""], env) == []  # no DSN: nothing
    add_jobs(conn, 3)
    claim_all(dsn, 2, worker="api-worker-1.prod.internal")
    claim_all(dsn, 1, worker="api-worker-2.prod.internal")
    workers = bash_complete(["jobctl", "reclaim", "--worker", "api"], {**env, "JOBCTL_DSN": dsn})
    assert workers == ["api-worker-1.prod.internal", "api-worker-2.prod.internal"]


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash")
@pytest.mark.skipif(
    shutil.which("jobctl", path=str(Path(sys.executable).parent)) is None,
    reason="jobctl is not installed in this environment",
)
def test_bash_completes_target_names_and_a_targets_ids(conn, dsn, tmp_path):
    """--target completes the config file's names; with one target, ids come from it."""
    config = tmp_path / "config.toml"
    config.write_text(
        f'[targets.orders]\ndsn = "{dsn}"\n\n[targets.billing]\ndsn = "dbname=nowhere"\n'
    )
    env = {k: v for k, v in os.environ.items() if k not in ("JOBCTL_DSN", "DATABASE_URL")}
    env["JOBCTL_CONFIG"] = str(config)
    assert bash_complete(["jobctl", "--target", ""], env) == ["orders", "billing"]
    assert bash_complete(["jobctl", "--target", "o"], env) == ["orders"]
    add_jobs(conn, 12)
    claim_all(dsn, 12)
    ids = bash_complete(["jobctl", "--target", "orders", "show", "1"], env)
    assert ids == ["1", "10", "11", "12"]
    assert bash_complete(["jobctl", "--all-targets", "show", "1"], env) == []

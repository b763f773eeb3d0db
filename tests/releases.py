"""jobctl's earlier releases, installed from this repository's history into venvs of their own:
what a database is upgraded from (tests/integration/test_versions.py,
tests/system/test_upgrade_online.py).

    jobctl_0_1_0(cache): the path of 0.1.0's ``jobctl``, made once in ``cache`` (the fixture
                         of that name in conftest.py keeps it in pytest's cache)
    jobctl_0_3_0(cache): the same of 0.3.0, the release before the times kept without a zone
    old(binary, dsn, *args): that jobctl run against ``dsn``
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

RELEASE_0_1_0 = "7d8e492"  # CHANGELOG.md: the first release
RELEASE_0_3_0 = "fd4a4b2"  # CHANGELOG.md: 0.3.0 (history 15, trigger 5)
REPO = Path(__file__).resolve().parents[1]


def jobctl_0_1_0(cache: Path) -> Path:
    """jobctl 0.1.0 installed in a venv of its own (made once, kept in pytest's cache): the
    release's tree from git, its dependencies from the package index."""
    return release(cache, RELEASE_0_1_0, "0.1.0")


def jobctl_0_3_0(cache: Path) -> Path:
    """jobctl 0.3.0 installed as ``jobctl_0_1_0``."""
    return release(cache, RELEASE_0_3_0, "0.3.0")


def release(cache: Path, commit: str, version: str) -> Path:
    """jobctl ``version`` (git ``commit``) in a venv of its own made once in ``cache``."""
    venv = cache / "venv"
    binary = venv / "bin" / "jobctl"
    if binary.exists():
        return binary
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip(f"jobctl {version}: no git checkout to take release {commit} from")
    tree = cache / "tree"
    shutil.rmtree(tree, ignore_errors=True)
    tree.mkdir(parents=True)
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", commit], capture_output=True, check=False
    )
    if archive.returncode != 0:
        pytest.skip(f"jobctl {version}: git archive {commit} failed: {archive.stderr!r}")
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive.stdout, check=True)
    shutil.rmtree(venv, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = subprocess.run(
        [str(venv / "bin" / "pip"), "install", "-q", str(tree)],
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    if pip.returncode != 0 or not binary.exists():
        shutil.rmtree(venv, ignore_errors=True)
        tail = (pip.stderr or pip.stdout).strip().splitlines()[-1:] or ["?"]
        pytest.skip(f"jobctl {version}'s venv could not be built (offline?): pip: {tail[0]}")
    return binary


def old(binary: Path, dsn: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "JOBCTL_DSN": dsn, "NO_COLOR": "1"}
    env.pop("JOBCTL_TABLE", None)
    env.pop("PYTHONPATH", None)  # the old venv's own jobctl, not a checkout's on the path
    return subprocess.run(
        [str(binary), *args], capture_output=True, text=True, env=env, check=False, timeout=120
    )

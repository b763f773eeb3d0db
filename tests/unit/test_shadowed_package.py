"""A worker script run from a directory holding a ``jobctl/`` folder that is not the
installed package (a clone's, a copy without its SQL files): one clear line saying so, not
``FileNotFoundError: .../jobctl/sql/queries.sql``."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import jobctl

SCRIPT = """
from jobctl import errors
from jobctl.sql import queries
try:
    queries.query("stuck")
except errors.JobctlError as exc:
    print(type(exc).__name__, exc.message)
"""


def test_a_shadowing_jobctl_directory_is_one_clear_line(tmp_path: Path):
    package = Path(jobctl.__file__).parent
    shadow = tmp_path / "jobctl"
    shutil.copytree(package, shadow, ignore=shutil.ignore_patterns("*.sql", "__pycache__"))
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin"},
    )
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr and "FileNotFoundError" not in result.stdout
    (line,) = result.stdout.strip().splitlines()
    assert line.startswith("JobctlError jobctl's own sql/queries.sql is missing from ")
    assert str(shadow) in line and "shadows the installed package" in line

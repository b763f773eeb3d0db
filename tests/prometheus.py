"""The exposition as Prometheus reads it: prometheus_client's text parser (node_exporter's
textfile collector and a scrape read the same format) and, where installed, ``promtool``
(Debian's ``prometheus`` package): skipped without it, failed instead when
``JOBCTL_REQUIRE_PROMTOOL=1`` (CI sets it, and ``.ci/run`` installs the package)."""

from __future__ import annotations

import os
import shutil
import subprocess
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families


def promtool() -> str:
    """promtool's path; a skip (or, required, a failure) without it."""
    found = shutil.which("promtool")
    if found is None:
        if os.environ.get("JOBCTL_REQUIRE_PROMTOOL") == "1":
            pytest.fail("promtool is missing and JOBCTL_REQUIRE_PROMTOOL=1")
        pytest.skip("promtool is not installed (Debian: apt-get install prometheus)")
    return found


def check_metrics(text: str) -> None:
    """``promtool check metrics`` accepts ``text``: it parses, and passes its lint."""
    done = subprocess.run(
        [promtool(), "check", "metrics"], input=text, capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 0, (done.stdout, done.stderr, text)


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], Any]:
    """Every sample as (name, sorted labels) -> value, parsed as Prometheus text."""
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def families(text: str) -> dict[str, Any]:
    return {f.name: f for f in text_string_to_metric_families(text)}


def duplicate_series(text: str) -> list[tuple[str, tuple[tuple[str, str], ...]]]:
    """Every series (name and labels) that appears more than once, as Prometheus parses
    ``text``: a scrape (or the textfile collector) refuses such an exposition whole."""
    seen: set[tuple[str, tuple[tuple[str, str], ...]]] = set()
    again = []
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            key = (s.name, tuple(sorted(s.labels.items())))
            if key in seen:
                again.append(key)
            seen.add(key)
    return again


def amtool() -> str:
    """amtool's path (Debian's ``prometheus-alertmanager`` package); a skip without it, a
    failure when ``JOBCTL_REQUIRE_ALERTMANAGER=1`` (CI sets it, ``.ci/run`` installs it)."""
    return _required("amtool", "JOBCTL_REQUIRE_ALERTMANAGER", "prometheus-alertmanager")


def alertmanager() -> str:
    """Alertmanager's own binary (Debian names it ``prometheus-alertmanager``)."""
    for name in ("prometheus-alertmanager", "alertmanager"):
        found = shutil.which(name)
        if found is not None:
            return found
    return _required("alertmanager", "JOBCTL_REQUIRE_ALERTMANAGER", "prometheus-alertmanager")


def _required(name: str, require: str, package: str) -> str:
    found = shutil.which(name)
    if found is None:
        if os.environ.get(require) == "1":
            pytest.fail(f"{name} is missing and {require}=1")
        pytest.skip(f"{name} is not installed (Debian: apt-get install {package})")
    return found

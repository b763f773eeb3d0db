"""The shipped parts in contrib/: the alert rules pass ``promtool check rules`` and their
``promtool test rules`` cases; the dashboard and the rules query only metrics jobctl
exports; the systemd units pass ``systemd-analyze verify`` and score at most 4.0 on
``systemd-analyze security --offline=yes``. Skipped without the tools, failed instead when
JOBCTL_REQUIRE_PROMTOOL=1 / JOBCTL_REQUIRE_SYSTEMD=1 (CI sets both)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import prometheus
import pytest

from jobctl.render import openmetrics

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]
CONTRIB = ROOT / "contrib"
RULES = CONTRIB / "prometheus" / "jobctl.rules.yml"
DASHBOARD = CONTRIB / "grafana" / "jobctl-dashboard.json"
UNITS = ["jobctl-reclaimer.service", "jobctl-metrics.service", "jobctl-metrics.timer"]
SECURITY_CEILING = 4.0

FIGURES = {
    "stuck_auto": 1,
    "stuck_manual": 0,
    "oldest_expired_s": 1.0,
    "live": 0,
    "no_lease": 0,
    "expiring_soon": 0,
    "reclaims": 0,
    "awaiting": 0,
    "awaiting_review": 0,
    "ready": 0,
    "oldest_ready_s": 0.0,
    "expiring_within_s": 30.0,
    "reclaim_window_s": 300.0,
    "reclaims_total": 0,
    "replica_lag_s": 0.0,
    "standby": 0,
    "reclaimer_passes": 0,
    "reclaimer_last_pass": 0.0,
}


def exported() -> set[str]:
    """Every metric name jobctl's expositions can hold (one database, across targets)."""
    texts = [
        openmetrics.exposition(FIGURES, "public.jobs", target="t", collected_at=1.0),
        openmetrics.exposition_across([("t", ("public.jobs", FIGURES))], {"t": True}),
    ]
    return {name for text in texts for name, _ in prometheus.samples(text)}


def queried(text: str) -> set[str]:
    return set(re.findall(r"\bjobctl_[a-z_]+\b", text))


def tool(name: str, require: str) -> str:
    found = shutil.which(name)
    if found is None:
        if os.environ.get(require) == "1":
            pytest.fail(f"{name} is missing and {require}=1")
        pytest.skip(f"{name} is not installed")
    return found


# ---------------------------------------------------------------- Prometheus
def test_rules_pass_promtool_check_and_their_tests():
    promtool = prometheus.promtool()
    check = subprocess.run(
        [promtool, "check", "rules", RULES.name], cwd=RULES.parent, capture_output=True, text=True
    )
    assert check.returncode == 0, check.stdout + check.stderr
    tested = subprocess.run(
        [promtool, "test", "rules", "jobctl.rules.test.yml"],
        cwd=RULES.parent,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert tested.returncode == 0 and "SUCCESS" in tested.stdout, tested.stdout + tested.stderr


def test_a_broken_rule_fails_its_test(tmp_path):
    """The cases can fail: a threshold changed by hand breaks them."""
    promtool = prometheus.promtool()
    shutil.copy(RULES.parent / "jobctl.rules.test.yml", tmp_path)
    (tmp_path / RULES.name).write_text(RULES.read_text().replace("> 300", "> 30000"))
    tested = subprocess.run(
        [promtool, "test", "rules", "jobctl.rules.test.yml"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert tested.returncode != 0


def test_every_rule_has_a_severity_and_keeps_target():
    text = RULES.read_text()
    alerts = re.findall(r"- alert: (\w+)", text)
    assert len(alerts) >= 9 and len(re.findall(r"^ +severity: ", text, re.M)) == len(alerts)
    for expr in re.findall(r"expr: (.*)", text):
        assert not re.search(r"by \((?![^)]*target)[^)]*\)", expr), f"drops target: {expr}"
    for needed in ("TargetDown", "MetricsStale", "ReclaimerNotRunning", "JobsStuck"):
        assert f"Jobctl{needed}" in alerts
    for needed in ("ExpiryBurst", "ReviewWaiting"):
        assert f"Jobctl{needed}" in alerts


def test_rules_query_only_exported_metrics():
    assert queried(RULES.read_text()) <= exported()


# ---------------------------------------------------------------- Grafana
def test_dashboard_queries_only_exported_metrics():
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    exprs += [v["definition"] for v in dashboard["templating"]["list"] if "definition" in v]
    names = set().union(*(queried(e) for e in exprs))
    assert names and names <= exported(), names - exported()
    assert len({p["id"] for p in dashboard["panels"]}) == len(dashboard["panels"])
    assert dashboard["uid"] and all(p["targets"] for p in dashboard["panels"])


# ---------------------------------------------------------------- systemd
@pytest.fixture
def units(tmp_path):
    """The units as installed, ExecStart pointing at this jobctl (verify checks it runs)."""
    jobctl = Path(sys.executable).parent / "jobctl"
    for unit in UNITS:
        text = (CONTRIB / "systemd" / unit).read_text()
        (tmp_path / unit).write_text(text.replace("/opt/jobctl/bin/jobctl", str(jobctl)))
    return tmp_path


def test_units_pass_systemd_analyze_verify(units):
    analyze = tool("systemd-analyze", "JOBCTL_REQUIRE_SYSTEMD")
    done = subprocess.run(
        [analyze, "verify", *(f"./{u}" for u in UNITS)],
        cwd=units,
        capture_output=True,
        text=True,
        timeout=60,
    )
    # an unknown or misspelt key is only a warning there: no line at all is accepted
    assert done.returncode == 0 and done.stderr == "" and done.stdout == "", done.stderr


@pytest.mark.parametrize("unit", ["jobctl-reclaimer.service", "jobctl-metrics.service"])
def test_units_score_low_on_systemd_analyze_security(units, unit):
    analyze = tool("systemd-analyze", "JOBCTL_REQUIRE_SYSTEMD")
    done = subprocess.run(
        [analyze, "security", "--offline=yes", f"./{unit}"],
        cwd=units,
        capture_output=True,
        text=True,
        timeout=60,
    )
    found = re.search(r"Overall exposure level for \S+: (\d+\.\d+)", done.stdout)
    assert found, done.stdout + done.stderr
    assert float(found[1]) <= SECURITY_CEILING, done.stdout


def test_the_reclaimer_unit_has_what_a_service_needs():
    text = (CONTRIB / "systemd" / "jobctl-reclaimer.service").read_text()
    for line in (
        "DynamicUser=yes",
        "NoNewPrivileges=yes",
        "ProtectSystem=strict",
        "PrivateTmp=yes",
        "SystemCallFilter=@system-service",
        "LoadCredential=pgpass:",
        "Wants=network-online.target",
        "After=network-online.target",
        "RestartSec=",
    ):
        assert f"\n{line}" in text, line


# ---------------------------------------------------------------- the wheel
def test_the_wheel_installs_every_shipped_part():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    shipped = {f for files in config["tool"]["setuptools"]["data-files"].values() for f in files}
    on_disk = {
        str(p.relative_to(ROOT))
        for p in CONTRIB.rglob("*")
        if p.is_file() and p.name != "README.md"
    }
    assert on_disk <= shipped, on_disk - shipped

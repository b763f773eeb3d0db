"""The shipped parts in contrib/: the alert rules pass ``promtool check rules`` and their
``promtool test rules`` cases (a database lost and back, several textfiles on one node);
the dashboard type-checks against ``@grafana/schema``; it and the rules query only metrics
jobctl exports; the systemd units, installed as the docs say, pass ``systemd-analyze
verify`` and score at most 4.0 on ``systemd-analyze security --offline=yes`` (the
Alertmanager configuration: test_alertmanager.py). Skipped without the tools, failed
instead when JOBCTL_REQUIRE_PROMTOOL=1 / JOBCTL_REQUIRE_GRAFANA_SCHEMA=1 /
JOBCTL_REQUIRE_SYSTEMD=1 (CI sets them)."""

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
    "reclaimer_last_pass": 1.0,
    "notices_failed": 0,
    "pauses": [
        {
            "dimension": "kind",
            "value": "charge_card",
            "paused_s": 1.0,
            "waiting": 1,
            "claims_since": 2,
        }
    ],
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


OLD_DOWN = "jobctl_up == 0 unless on (instance, job) jobctl_target_up"


@pytest.mark.parametrize(
    ("before", "after"),
    [
        ("> 300", "> 30000"),  # a threshold changed by hand
        # JobctlDown as it was: any --target file on the node hid the untargeted outage
        (re.search(r"expr: (jobctl_up == 0 unless.*)", RULES.read_text())[1], OLD_DOWN),
        # an alert on the live figures alone: resolved the moment the database was lost
        ("expr: jobctl:stuck_jobs:held > 0", "expr: sum without (policy) (jobctl_stuck_jobs) > 0"),
        # a burst counted by increase(), which extrapolates (25 read as "about 29")
        (
            "expr: jobctl:reclaims:growth10m:held > 20",
            "expr: increase(jobctl_reclaims_total[10m]) > 20",
        ),
        # a reclaimer that never ran said as "for 20790d 15h"
        (
            " or (jobctl:reclaimer_passes_total:held * 0 unless on (instance, job, target, "
            "table) jobctl:reclaimer_last_pass_timestamp_seconds:held)",
            "",
        ),
        # the pass age growing through an outage: the reclaimer said not running, unmuted,
        # while it waits out its retry backoff after the database is back
        (
            "expr: jobctl:reclaimer_pass_age_seconds:held > 300",
            "expr: time() - jobctl:reclaimer_last_pass_timestamp_seconds:held > 300",
        ),
        # the reclaimer's `for:` shorter than its backoff and a metrics run after an outage
        (
            "jobctl:reclaimer_last_pass_timestamp_seconds:held)\n        for: 2m",
            "jobctl:reclaimer_last_pass_timestamp_seconds:held)\n        for: 1m",
        ),
        # the expired lease's age on the live figures: resolved the moment the database was
        # lost, fired again after it (and grown through it: it fired mid-outage)
        (
            "expr: jobctl:oldest_expired_lease_seconds:held > 600",
            "expr: jobctl_oldest_expired_lease_seconds > 600",
        ),
        # a pause's threshold changed, and its figures not held through an outage
        ("(jobctl:pause_seconds:held > 3600)", "(jobctl:pause_seconds:held > 7200)"),
        (
            "expr: jobctl_pause_seconds or (jobctl:pause_seconds:held and on (instance, job, "
            "target) jobctl:unread)",
            "expr: jobctl_pause_seconds",
        ),
    ],
    ids=[
        "threshold",
        "down-beside-targets",
        "no-hold",
        "extrapolated",
        "never",
        "reclaimer-backoff",
        "reclaimer-for",
        "lease-no-hold",
        "pause-1h",
        "pause-no-hold",
    ],
)
def test_a_broken_rule_fails_its_test(tmp_path, before, after):
    """The cases can fail: each mutation (a fix undone) breaks them."""
    promtool = prometheus.promtool()
    shutil.copy(RULES.parent / "jobctl.rules.test.yml", tmp_path)
    text = RULES.read_text()
    assert before in text
    (tmp_path / RULES.name).write_text(text.replace(before, after))
    tested = subprocess.run(
        [promtool, "test", "rules", "jobctl.rules.test.yml"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert tested.returncode != 0, tested.stdout


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


def _input_series(texts: list[str], instance: str) -> list[dict[str, str]]:
    """Textfiles served by one node_exporter, as promtool's input series: each sample as
    scraped (instance, job="node" added), unchanged for 10 minutes."""
    series = []
    for text in texts:
        for (name, labels), value in prometheus.samples(text).items():
            pairs = [*labels, ("instance", instance), ("job", "node")]
            quoted = ",".join(f'{k}="{v}"' for k, v in pairs)
            series.append({"series": f"{name}{{{quoted}}}", "values": f"{value:g}x10"})
    return series


def test_down_alerts_on_real_textfiles_side_by_side(tmp_path):
    """The expositions jobctl writes, several on one node: an untargeted database down beside
    a --target file that answers (JobctlDown, which used to be hidden); a run across targets
    with billing down beside a --target file (billing's JobctlTargetDown, no JobctlDown)."""
    promtool = prometheus.promtool()
    search = openmetrics.exposition(FIGURES, "public.jobs", target="search", collected_at=1.0)
    across = openmetrics.exposition_across(
        [("orders", ("public.jobs", FIGURES))], {"orders": True, "billing": False}
    )
    node = {"instance": "h1", "job": "node"}
    cases = [
        (
            [openmetrics.down(collected_at=1.0), search],
            [{"exp_labels": {"severity": "critical", **node}}],
            [],
        ),
        (
            [across, search],
            [],
            [{"exp_labels": {"severity": "critical", "target": "billing", **node}}],
        ),
    ]
    tests = [
        {
            "interval": "1m",
            "input_series": _input_series(texts, "h1"),
            "alert_rule_test": [
                {"eval_time": "6m", "alertname": "JobctlDown", "exp_alerts": down},
                {"eval_time": "6m", "alertname": "JobctlTargetDown", "exp_alerts": target_down},
            ],
        }
        for texts, down, target_down in cases
    ]
    # each expected alert with its texts (promtool compares an alert's annotations too)
    for case in tests:
        for check in case["alert_rule_test"]:
            for alert in check["exp_alerts"]:
                alert["exp_annotations"] = _annotations(check["alertname"], alert["exp_labels"])
    spec = {"rule_files": [str(RULES)], "evaluation_interval": "1m", "tests": tests}
    (tmp_path / "real.test.yml").write_text(json.dumps(spec))  # JSON is YAML
    tested = subprocess.run(
        [promtool, "test", "rules", "real.test.yml"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert tested.returncode == 0, tested.stdout + tested.stderr


def _annotations(alertname: str, labels: dict[str, str]) -> dict[str, str]:
    """The two alerts' texts, as the rules write them."""
    if alertname == "JobctlDown":
        return {
            "summary": "jobctl cannot read its database",
            "description": f"jobctl metrics failed for 5m on {labels['instance']} (its log has "
            "the error line); the database's other alerts hold their last figures.",
        }
    return {
        "summary": f"jobctl cannot read target {labels['target']}",
        "description": f"The database of target {labels['target']} did not answer jobctl "
        "metrics for 5m (down, no schema, timeout): nothing about its jobs is known; its "
        "other alerts hold their last figures. Next: jobctl targets --check",
    }


# ---------------------------------------------------------------- Grafana
def test_dashboard_queries_only_exported_metrics():
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    exprs += [v["query"]["query"] for v in dashboard["templating"]["list"] if v["type"] == "query"]
    names = set().union(*(queried(e) for e in exprs))
    assert names and names <= exported(), names - exported()
    assert len({p["id"] for p in dashboard["panels"]}) == len(dashboard["panels"])
    assert dashboard["uid"] and all(p["targets"] for p in dashboard["panels"])


GRAFANA_SCHEMA = "@grafana/schema"
# The export wrapper around a dashboard: what Grafana's import reads (the data sources it asks
# for, the plugins it needs), not part of the dashboard's own schema.
EXPORT_TYPES = """
interface DashboardInput {
  name: string; label: string; description: string; type: "datasource";
  pluginId: string; pluginName: string;
}
interface DashboardRequire { type: "grafana" | "datasource" | "panel"; id: string; name: string;
  version: string; }
"""


def grafana_node_modules() -> Path:
    """node_modules holding @grafana/schema and typescript (.ci/run installs them from npm
    into .ci/grafana); a skip without them, a failure when JOBCTL_REQUIRE_GRAFANA_SCHEMA=1."""
    found = Path(os.environ.get("JOBCTL_GRAFANA_NODE_MODULES", ROOT / ".ci/grafana/node_modules"))
    if not (found / ".bin" / "tsc").exists() or not (found / GRAFANA_SCHEMA).is_dir():
        if os.environ.get("JOBCTL_REQUIRE_GRAFANA_SCHEMA") == "1":
            pytest.fail(f"{found} lacks {GRAFANA_SCHEMA} or typescript")
        pytest.skip(f"{GRAFANA_SCHEMA} and typescript are not installed (bash .ci/run does)")
    return found


def typecheck(dashboard: dict[str, object], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """tsc (strict) on the dashboard as an object literal of @grafana/schema's Dashboard
    type: a field the schema lacks, or of the wrong type, is an error."""
    modules = grafana_node_modules()
    (tmp_path / "node_modules").symlink_to(modules)
    body = dict(dashboard)
    inputs, requires = body.pop("__inputs", None), body.pop("__requires", None)
    (tmp_path / "check.ts").write_text(
        f'import type {{ Dashboard }} from "{GRAFANA_SCHEMA}";\n{EXPORT_TYPES}\n'
        f"export const inputs: DashboardInput[] = {json.dumps(inputs)};\n"
        f"export const requires: DashboardRequire[] = {json.dumps(requires)};\n"
        f"export const dashboard: Dashboard = {json.dumps(body, indent=2)};\n"
    )
    options = ["--noEmit", "--strict", "--skipLibCheck", "--module", "esnext"]
    options += ["--moduleResolution", "bundler", "--target", "es2022"]
    return subprocess.run(
        [modules / ".bin" / "tsc", *options, "check.ts"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_dashboard_is_valid_against_grafana_schema(tmp_path):
    done = typecheck(json.loads(DASHBOARD.read_text()), tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_schema_check_can_fail(tmp_path):
    """A field the schema does not know, and a variable's empty current, are both caught."""
    dashboard = json.loads(DASHBOARD.read_text())
    dashboard["templating"]["list"][0]["current"] = {}
    dashboard["templating"]["list"][1]["definition"] = "label_values(jobctl_stuck_jobs, target)"
    done = typecheck(dashboard, tmp_path)
    assert done.returncode != 0
    assert "'VariableOption'" in done.stdout and '"definition"' in done.stdout, done.stdout


def test_dashboard_import_asks_for_the_prometheus_data_source():
    """Import asks for a data source (__inputs); every query uses the one picked (through
    the datasource variable, whose default is the input)."""
    dashboard = json.loads(DASHBOARD.read_text())
    (ds,) = dashboard["__inputs"]
    assert ds["type"] == "datasource" and ds["pluginId"] == "prometheus"
    variable = next(v for v in dashboard["templating"]["list"] if v["type"] == "datasource")
    assert variable["query"] == "prometheus"
    assert variable["current"]["value"] == "${" + ds["name"] + "}"
    for panel in dashboard["panels"]:
        for where in [panel, *panel["targets"]]:
            assert where["datasource"] == {"type": "prometheus", "uid": "${datasource}"}


def _kind(expr: str) -> str:
    """What a query's figures are: seconds, a yes/no, or a count."""
    if "jobctl_server_standby" in expr or re.fullmatch(r"jobctl_(target_)?up\b.*", expr):
        return "yes/no"
    if re.search(r"jobctl_\w+_seconds\b", expr):
        return "seconds"
    return "count"


UNIT_KINDS = {"s": "seconds", "short": "count", "none": "count", "bool_yes_no": "yes/no"}


def test_dashboard_has_one_unit_per_axis():
    """Each query's unit fits its figures (seconds as s, counts as counts), and the queries
    on one axis of a panel share one unit (a second unit gets the other axis)."""
    dashboard = json.loads(DASHBOARD.read_text())
    for panel in dashboard["panels"]:
        defaults = panel["fieldConfig"]["defaults"]
        axes: dict[str, set[str]] = {}
        for target in panel["targets"]:
            unit = defaults.get("unit")
            axis = defaults.get("custom", {}).get("axisPlacement", "auto")
            for override in panel["fieldConfig"]["overrides"]:
                if override["matcher"] == {"id": "byFrameRefID", "options": target["refId"]}:
                    for prop in override["properties"]:
                        unit = prop["value"] if prop["id"] == "unit" else unit
                        if prop["id"] == "custom.axisPlacement":
                            axis = prop["value"]
            kind = _kind(target["expr"])
            if panel["type"] == "stat" and kind == "yes/no":
                continue  # a stat shows 0/1 as numbers, no axis
            assert UNIT_KINDS.get(unit) == kind, (panel["title"], target["expr"], unit)
            axes.setdefault(axis, set()).add(unit)
        assert all(len(units) == 1 for units in axes.values()), (panel["title"], axes)
        if len(axes) > 1:
            assert "auto" not in axes, panel["title"]  # two units: each its own side


# ---------------------------------------------------------------- systemd
SYSTEM_UNITS = Path("/usr/lib/systemd/system")


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """A root where the docs' install steps ran (docs/service.md#install): a venv at
    /opt/jobctl with jobctl in it (``python3 -m venv``, its pip on this checkout; without
    the dependencies, which verify does not look at), the units copied unchanged into
    /etc/systemd/system, beside the machine's own units (the targets they name)."""
    analyze = tool("systemd-analyze", "JOBCTL_REQUIRE_SYSTEMD")
    root = tmp_path_factory.mktemp("root")
    shutil.copytree(SYSTEM_UNITS, root / SYSTEM_UNITS.relative_to("/"), symlinks=True)
    venv = root / "opt" / "jobctl"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    pip = [venv / "bin" / "pip", "install", "--quiet", "--disable-pip-version-check"]
    subprocess.run([*pip, "--no-deps", str(ROOT)], check=True, timeout=600)
    (root / "etc" / "systemd" / "system").mkdir(parents=True)
    for unit in UNITS:
        shutil.copyfile(CONTRIB / "systemd" / unit, root / "etc" / "systemd" / "system" / unit)
    return analyze, root


def test_units_pass_systemd_analyze_verify_as_shipped(installed):
    analyze, root = installed
    assert (root / "opt" / "jobctl" / "bin" / "jobctl").is_file()
    done = subprocess.run(
        [analyze, "verify", f"--root={root}", *UNITS], capture_output=True, text=True, timeout=60
    )
    # an unknown or misspelt key is only a warning there: no line at all is accepted
    assert done.returncode == 0 and done.stderr == "" and done.stdout == "", done.stderr
    # and ExecStart is what the install made: no other jobctl would do
    (root / "opt" / "jobctl" / "bin" / "jobctl").rename(root / "jobctl.away")
    try:
        missing = subprocess.run(
            [analyze, "verify", f"--root={root}", *UNITS], capture_output=True, text=True
        )
    finally:
        (root / "jobctl.away").rename(root / "opt" / "jobctl" / "bin" / "jobctl")
    assert missing.returncode != 0 and "/opt/jobctl/bin/jobctl" in missing.stderr


@pytest.mark.parametrize("unit", ["jobctl-reclaimer.service", "jobctl-metrics.service"])
def test_units_score_low_on_systemd_analyze_security(unit):
    """The units as shipped (the security score does not depend on ExecStart's binary)."""
    analyze = tool("systemd-analyze", "JOBCTL_REQUIRE_SYSTEMD")
    done = subprocess.run(
        [analyze, "security", "--offline=yes", f"./{unit}"],
        cwd=CONTRIB / "systemd",
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
        # where a restart learns which notified conditions are open ($STATE_DIRECTORY)
        "StateDirectory=jobctl",
        # every option the service needs as an environment variable, never in ExecStart: a
        # unit chooses Slack or PagerDuty in reclaimer.env; the URLs (secrets) a credential
        "Environment=JOBCTL_NOTIFY_FORMAT=json",
        "LoadCredential=notify:/etc/jobctl/notify",
        "Environment=JOBCTL_NOTIFY_FILE=%d/notify",
    ):
        assert f"\n{line}" in text, line
    (exec_start,) = re.findall(r"^ExecStart=(.*)", text, re.M)
    assert "--notify" not in exec_start


DOCS = ROOT / "docs"


def test_the_docs_install_makes_what_execstart_runs():
    """docs/service.md's install block makes the venv whose bin/jobctl every unit runs."""
    doc = (DOCS / "service.md").read_text()
    install = doc[doc.index("## Install") :]
    block = install[install.index("```sh") : install.index("```", install.index("```sh") + 5)]
    for unit in UNITS[:2]:
        (exec_start,) = re.findall(
            r"^ExecStart=(\S+)", (CONTRIB / "systemd" / unit).read_text(), re.M
        )
        venv = exec_start.removesuffix("/bin/jobctl")
        assert exec_start == f"{venv}/bin/jobctl", exec_start
        assert re.search(rf"^python3 -m venv {re.escape(venv)}\s", block, re.M), block
        assert re.search(rf"^{re.escape(venv)}/bin/pip install ", block, re.M), block
    # the credentials LoadCredential= loads: a missing one stops the unit from starting
    (touched,) = re.findall(r"^touch (.*)", block, re.M)
    for unit in UNITS[:2]:
        for source in re.findall(
            r"^LoadCredential=\w+:(\S+)", (CONTRIB / "systemd" / unit).read_text(), re.M
        ):
            assert source in touched.split(), source


def test_the_metrics_unit_writes_where_debians_node_exporter_reads():
    text = (CONTRIB / "systemd" / "jobctl-metrics.service").read_text()
    debian = "/var/lib/prometheus/node-exporter"
    assert f"--textfile {debian}/jobctl.prom" in text
    assert f"\nReadWritePaths={debian}\n" in text
    monitoring = (DOCS / "monitoring.md").read_text()
    assert f"| `{debian}` (the package's built-in default" in monitoring
    assert "/var/lib/node_exporter/textfile/" not in monitoring + text


@pytest.mark.parametrize("doc", ["service.md", "monitoring.md"])
def test_the_units_the_docs_show_are_the_shipped_ones(doc):
    """A unit quoted in the docs is the file as shipped, byte for byte."""
    text = (DOCS / doc).read_text()
    quoted = re.findall(r"```ini\n(.*?)```", text, re.S)
    shipped = {u: (CONTRIB / "systemd" / u).read_text() for u in UNITS}
    whole = [q for q in quoted if q.startswith("# ")]
    assert whole, doc
    for unit_text in whole:
        assert unit_text in shipped.values(), unit_text[:200]


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

"""The shipped Alertmanager configuration (contrib/alertmanager): it passes ``amtool
check-config``, inhibits exactly the alerts the rules hold while a database is unread, and a
real Alertmanager started with it mutes a down database's held alerts only, telling a
database loss to a webhook receiver as one page and no false resolved. Skipped without
Debian's prometheus-alertmanager, failed instead when JOBCTL_REQUIRE_ALERTMANAGER=1 (CI
sets it)."""

from __future__ import annotations

import contextlib
import datetime as dt
import http.server
import json
import re
import socket
import subprocess
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import prometheus

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "contrib" / "prometheus" / "jobctl.rules.yml"
ALERTMANAGER = ROOT / "contrib" / "alertmanager" / "jobctl.alertmanager.yml"


def per_table_alerts() -> set[str]:
    """The alerts whose expression reads held figures (jobctl:...:held)."""
    found = re.findall(r"- alert: (\w+)\n(?:\s+#.*\n)*\s+expr: (.*)", RULES.read_text())
    return {name for name, expr in found if ":held" in expr}


def test_alertmanager_config_passes_amtool_and_inhibits_every_held_alert():
    amtool = prometheus.amtool()
    done = subprocess.run(
        [amtool, "check-config", str(ALERTMANAGER)], capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 0 and "SUCCESS" in done.stdout, done.stdout + done.stderr
    inhibited = r"target_matchers:\s+- 'alertname =~ \"([^\"]+)\"'"
    targets = re.search(inhibited, ALERTMANAGER.read_text())
    assert targets is not None
    assert set(targets[1].split("|")) == per_table_alerts() and len(per_table_alerts()) == 9


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _api(port: int, path: str, body: object = None) -> object:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}", data=data, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=5) as answer:
        text = answer.read()
    return json.loads(text) if text.strip() else None


@contextlib.contextmanager
def running_alertmanager(config: Path, tmp_path: Path) -> Iterator[int]:
    """A real Alertmanager on a free local port with ``config``, no cluster; its port."""
    binary = prometheus.alertmanager()
    port = _free_port()
    logged = tmp_path / "alertmanager.log"
    with logged.open("wb") as log:
        server = subprocess.Popen(
            [
                binary,
                f"--config.file={config}",
                f"--storage.path={tmp_path / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--cluster.listen-address=",
            ],
            stdout=log,
            stderr=log,
        )
        try:
            deadline = time.monotonic() + 20
            while True:
                try:
                    urllib.request.urlopen(f"http://127.0.0.1:{port}/-/ready", timeout=1).close()
                    break
                except OSError:
                    assert server.poll() is None and time.monotonic() < deadline, logged.read_text()
                    time.sleep(0.1)
            yield port
        finally:
            server.terminate()
            server.wait(timeout=10)


def test_alertmanager_mutes_the_held_alerts_of_a_down_database_only(tmp_path):
    """A real Alertmanager with the shipped configuration: JobctlDown mutes the untargeted
    database's alerts on its node; JobctlTargetDown its target's; nothing else."""
    node = {"instance": "h1", "job": "node"}
    table = {"table": "public.jobs"}
    alerts = {
        "down": {"alertname": "JobctlDown", "severity": "critical", **node},
        "target down": {
            "alertname": "JobctlTargetDown",
            "target": "orders",
            "severity": "critical",
            **node,
        },
        "held": {"alertname": "JobctlJobsStuck", **table, **node},
        "held target": {"alertname": "JobctlQueueLatency", "target": "orders", **table, **node},
        "other target": {"alertname": "JobctlJobsStuck", "target": "search", **table, **node},
        "other node": {"alertname": "JobctlJobsStuck", **table, "instance": "h2", "job": "node"},
        "not held": {"alertname": "JobctlMetricsStale", "severity": "warning", **node},
    }
    names = {tuple(sorted(labels.items())): name for name, labels in alerts.items()}
    with running_alertmanager(ALERTMANAGER, tmp_path) as port:
        _api(port, "/api/v2/alerts", [{"labels": labels} for labels in alerts.values()])
        # Alertmanager lists an alert before its inhibitor has read the alerts that mute it
        # (an empty inhibitedBy for a moment, seen in CI): wait for the muted set to be the
        # expected one, or for the deadline, and then say what it was
        expected = {"held", "held target"}
        got: dict[str, list[str]] = {}
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            got = {
                names[tuple(sorted(a["labels"].items()))]: a["status"]["inhibitedBy"]
                for a in _api(port, "/api/v2/alerts")
            }
            if len(got) == len(alerts) and {name for name, by in got.items() if by} == expected:
                break
            time.sleep(0.1)
    assert {name for name, by in got.items() if by} == expected, got
    assert len(got) == len(alerts)


class _Receiver(http.server.BaseHTTPRequestHandler):
    """A webhook receiver that keeps (alertname, status) of every alert it is sent."""

    told: list[tuple[str, str]]

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.told.extend((a["labels"]["alertname"], a["status"]) for a in body["alerts"])
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


def test_alertmanager_tells_a_database_loss_as_one_page_and_no_false_resolve(tmp_path):
    """The loss timeline through a real Alertmanager with the shipped inhibit rule (its
    timings shortened to seconds): stuck jobs told firing; the database lost (the rules hold
    JobctlJobsStuck firing, JobctlDown fires, and the held last pass of the reclaimer ages
    into JobctlReclaimerNotRunning): JobctlDown told, nothing else, never a resolved; the
    database back with nothing stuck: both told resolved, the muted one never told."""
    told: list[tuple[str, str]] = []
    handler = type("Receiver", (_Receiver,), {"told": told})
    receiver = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=receiver.serve_forever, daemon=True).start()
    config = ALERTMANAGER.read_text()
    for slow, fast in (
        ("group_wait: 30s", "group_wait: 0s"),
        ("group_interval: 5m", "group_interval: 1s"),
    ):
        assert slow in config
        config = config.replace(slow, fast)
    config = config.replace(
        "http://127.0.0.1:9095/alerts", f"http://127.0.0.1:{receiver.server_port}/"
    )
    (tmp_path / "am.yml").write_text(config)
    stuck = {
        "alertname": "JobctlJobsStuck",
        "instance": "h1",
        "job": "node",
        "table": "public.jobs",
    }
    down = {"alertname": "JobctlDown", "instance": "h1", "job": "node", "severity": "critical"}
    reclaimer = {**stuck, "alertname": "JobctlReclaimerNotRunning", "severity": "critical"}

    def send(*alerts: tuple[dict[str, str], bool]) -> None:
        now = dt.datetime.now(dt.timezone.utc)
        end = now + (dt.timedelta(minutes=10))
        _api(
            port,
            "/api/v2/alerts",
            [
                {
                    "labels": labels,
                    "startsAt": (now - dt.timedelta(minutes=1)).isoformat(),
                    "endsAt": (end if firing else now).isoformat(),
                }
                for labels, firing in alerts
            ],
        )

    def wait_for(entry: tuple[str, str]) -> None:
        deadline = time.monotonic() + 15
        while entry not in told:
            assert time.monotonic() < deadline, (entry, told)
            send(*current)  # as Prometheus does, every evaluation
            time.sleep(0.2)

    try:
        with running_alertmanager(tmp_path / "am.yml", tmp_path) as port:
            current = [(stuck, True)]
            wait_for(("JobctlJobsStuck", "firing"))
            current = [(stuck, True), (down, True)]  # lost: held, and JobctlDown fires
            wait_for(("JobctlDown", "firing"))
            current.append((reclaimer, True))  # a held figure crosses its threshold
            for _ in range(15):  # three seconds: three group intervals
                send(*current)
                time.sleep(0.2)
            assert told == [("JobctlJobsStuck", "firing"), ("JobctlDown", "firing")], told
            current = [(stuck, False), (down, False), (reclaimer, False)]  # back, none stuck
            wait_for(("JobctlDown", "resolved"))
            wait_for(("JobctlJobsStuck", "resolved"))
            time.sleep(2)  # two group intervals: anything else would be told by now
    finally:
        receiver.shutdown()
        receiver.server_close()
    assert sorted(told[2:]) == [("JobctlDown", "resolved"), ("JobctlJobsStuck", "resolved")], told

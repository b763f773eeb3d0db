"""metrics: the exposition parsed as Prometheus text (and checked by promtool), the alert
thresholds, up 0 published when the database is down, --textfile's one-rename write."""

from __future__ import annotations

import prometheus
from helpers import add_jobs, claim_all


def test_metrics_parse_as_prometheus_text_and_thresholds(conn, dsn, run):
    add_jobs(conn, 4)
    add_jobs(conn, 2, policy="manual")
    claim_all(dsn, 3, lease_seconds=-120)
    (live,) = claim_all(dsn, 1, lease_seconds=10)
    # a 35 s lease with 10 s left: in its last third, expiring soon
    conn.execute(
        "UPDATE jobs SET reserved_at = reserved_at - interval '25 seconds' WHERE id = %s",
        (live.id,),
    )
    result = run("metrics")
    assert result.code == 0, result.err
    prometheus.check_metrics(result.out)
    samples = prometheus.samples(result.out)
    table = ("table", "public.jobs")
    assert samples[("jobctl_up", ())] == 1
    assert samples[("jobctl_stuck_jobs", (("policy", "auto"), table))] == 3
    assert samples[("jobctl_stuck_jobs", (("policy", "manual"), table))] == 0
    assert samples[("jobctl_oldest_expired_lease_seconds", (table,))] >= 120
    assert samples[("jobctl_expiring_soon_jobs", (table,))] == 1
    assert samples[("jobctl_reclaims_total", (table,))] == 0
    breached = run("metrics", "--max-stuck", "2", "--max-overdue", "1m")
    assert breached.code == 4 and breached.err.count("CRITICAL") == 2
    assert run("metrics", "--max-stuck", "3", "--max-overdue", "1h").code == 0
    assert run("reclaim", "--commit", "--yes").code == 0
    after = prometheus.samples(run("metrics", "--reclaim-window", "1m").out)
    assert after[("jobctl_recent_reclaims", (table,))] == 3  # the same series, any window
    assert after[("jobctl_reclaim_window_seconds", (table,))] == 60
    assert after[("jobctl_reclaims_total", (table,))] == 3
    assert after[("jobctl_oldest_expired_lease_seconds", (table,))] == 0


def test_a_database_down_still_prints_up_0(run, tmp_path):
    down = "host=127.0.0.1 port=1 connect_timeout=2 user=nobody dbname=none"
    result = run("--dsn", down, "metrics")
    assert result.code == 1 and "jobctl: error:" in result.err
    assert prometheus.samples(result.out)[("jobctl_up", ())] == 0
    assert result.out.endswith("# EOF\n")
    prometheus.check_metrics(result.out)
    published = tmp_path / "jobctl.prom"
    published.write_text("jobctl_up 1\n# EOF\n")  # the last good file
    again = run("--dsn", down, "metrics", "--textfile", str(published))
    assert again.code == 1 and again.out == ""
    assert prometheus.samples(published.read_text())[("jobctl_up", ())] == 0
    assert [p.name for p in tmp_path.iterdir()] == ["jobctl.prom"]  # no temporary left


def test_textfile_replaces_the_file_in_one_rename(conn, run, tmp_path):
    published = tmp_path / "jobctl.prom"
    published.write_text("old\n")
    inode = published.stat().st_ino
    result = run("metrics", "--textfile", str(published))
    assert result.code == 0 and result.out == "", result.err
    assert published.read_text().endswith("# EOF\n") and published.stat().st_ino != inode
    assert oct(published.stat().st_mode & 0o777) == "0o644"
    missing = run("metrics", "--textfile", str(tmp_path / "no" / "such.prom"))
    assert missing.code == 2 and "--textfile" in missing.err


def test_kinds_named_other_and_none_beside_null_and_the_rest_are_distinct_series(conn, dsn, run):
    """A kind really named ``other`` among the top ones and ``none``
    beside NULL gave the same series twice (8 duplicates); each is now its own."""
    conn.execute("ALTER TABLE jobs ADD COLUMN kind text")
    applied = run("schema", "apply", "--column", "kind=kind", "--yes")
    assert applied.code == 0, applied.err
    for kind, n in (("other", 4), ("none", 3), (None, 2), ("a", 1), ("b", 1)):
        conn.execute("INSERT INTO jobs (kind) SELECT %s FROM generate_series(1, %s)", (kind, n))
    claim_all(dsn, 11, lease_seconds=-60)
    result = run("metrics", "--label-top", "3")
    assert result.code == 0, result.err
    assert prometheus.duplicate_series(result.out) == []
    stuck = {
        (dict(labels)["kind"], dict(labels)["bucket"]): value
        for (name, labels), value in prometheus.samples(result.out).items()
        if name == "jobctl_jobs_by_kind" and dict(labels)["state"] == "stuck"
    }
    assert stuck == {
        ("other", "value"): 4,
        ("none", "value"): 3,
        ("none", "null"): 2,
        ("other", "rest"): 2,
    }
    prometheus.check_metrics(result.out)


def test_a_pause_is_a_series_of_its_age_and_waiting_jobs_until_resumed(conn, run):
    """Each pause (ops.pause.waiting) its two gauges, labelled with dimension and value as
    the other families label a kind: a long value cut past 256 characters, a quote and a
    newline escaped; promtool reads the exposition; resumed, the series end."""
    conn.execute("ALTER TABLE jobs ADD COLUMN kind text")
    applied = run("schema", "apply", "--column", "kind=kind", "--column", "queue=queue", "--yes")
    assert applied.code == 0, applied.err
    odd = 'say "hi"\nnow'
    long = "k" * 300
    for kind, n in (("charge_card", 3), (odd, 2), (long, 1), ("free", 4)):
        conn.execute(
            "INSERT INTO jobs (kind, queue) SELECT %s, 'main' FROM generate_series(1, %s)",
            (kind, n),
        )
    for kind in ("charge_card", odd, long):
        assert run("pause", "--kind", kind, "--reason", "provider down").code == 0
    assert run("pause", "--queue", "main", "--reason", "deploy").code == 0
    conn.execute(
        "UPDATE jobctl.pauses SET paused_at = now() - interval '2 hours' "
        "WHERE value = 'charge_card'"
    )
    result = run("metrics")
    assert result.code == 0, result.err
    prometheus.check_metrics(result.out)
    assert prometheus.duplicate_series(result.out) == []
    samples = prometheus.samples(result.out)
    table = ("table", "public.jobs")
    cut = "k" * 256 + "… (44 more bytes)"
    waiting = {
        dict(labels)["value"]: v
        for (name, labels), v in samples.items()
        if name == "jobctl_pause_waiting_jobs"
    }
    assert waiting == {"charge_card": 3, odd: 2, cut: 1, "main": 10}
    seconds = {
        (dict(labels)["dimension"], dict(labels)["value"]): v
        for (name, labels), v in samples.items()
        if name == "jobctl_pause_seconds"
    }
    assert 7200 <= seconds[("kind", "charge_card")] < 7300
    assert 0 <= seconds[("queue", "main")] < 60
    key = (("dimension", "kind"), table, ("value", "charge_card"))
    assert samples[("jobctl_pause_waiting_jobs", key)] == 3
    assert "# HELP jobctl_pause_seconds " in result.out
    assert '\\"hi\\"\\nnow' in result.out  # escaped as the text format wants
    for kind in ("charge_card", odd, long):
        assert run("resume", "--kind", kind).code == 0
    assert run("resume", "--queue", "main").code == 0
    after = run("metrics").out
    assert "jobctl_pause_" not in after
    prometheus.check_metrics(after)

"""doctor's checklist as people read it (jobctl/render/checklist.py): a line a check, its
findings under it, database text made safe, long statements cut, words never split."""

from __future__ import annotations

from jobctl.render import checklist

FINDING = {
    "kind": "unfenced_update",
    "queryid": 42,
    "role": "app\x1b[31m",
    "calls": 7,
    "rows": 3,
    "statement": "UPDATE jobs   SET status = 'done'\n WHERE id = $1 " + "AND x = 1 " * 60,
    "wrong": "an UPDATE without attempt_token = $n in its WHERE",
    "fix": "complete / heartbeat / fail",
    "fix_sql": "UPDATE ...",
}
REPORT = {
    "table": "public.jobs\u202e",
    "checks": [
        {
            "check": "timeout_by_lease",
            "title": "1. the timeout is judged by lease_expires_at alone",
            "status": "ok",
            "evidence": "no sweeper by age in pg_stat_statements",
            "findings": [],
        },
        {
            "check": "fenced_writes",
            "title": "2. every claim, heartbeat, reclaim and completion is fenced",
            "status": "fail",
            "evidence": "1 statement writes without the token",
            "findings": [FINDING, {"worker": "w1\x07", "advice": ["heartbeat more often"]}],
        },
    ],
}


def test_a_line_a_check_and_its_findings_under_it():
    text = checklist.text(REPORT, width=80)
    lines = text.splitlines()
    assert lines[0].startswith("jobctl doctor: public.jobs")
    marks = [line.split()[0] for line in lines if line and not line.startswith(" ")][1:]
    assert marks == ["ok", "FAIL"]
    assert all(len(line) <= 80 for line in lines)
    assert "fix: complete / heartbeat / fail (jobctl schema statements prints it)" in " ".join(
        line.strip() for line in lines
    )


def test_database_text_is_made_safe_and_long_statements_cut():
    text = checklist.text(REPORT, width=100)
    assert "\x1b" not in text and "\x07" not in text and "\u202e" not in text
    assert "UPDATE jobs SET status = 'done' WHERE id = $1" in text  # its spaces made one
    assert " ..." in text and text.count("AND x = 1") < 60


def test_json_is_the_report_whole_and_csv_a_row_a_check():
    doc = checklist.document(REPORT)
    assert doc.payload is REPORT
    rows = doc.sections[0].rows
    assert [(r["check"], r["status"], r["findings"]) for r in rows] == [
        ("timeout_by_lease", "ok", 0),
        ("fenced_writes", "fail", 2),
    ]


def test_a_rules_or_triggers_finding_is_named_by_it_and_made_safe():
    """What the catalog gave (a rule's name, its relation, a view's column in the words) is
    the application's text: shown only through safe_text."""
    hook = {
        "kind": "unfenced_update",
        "source": "trigger",
        "name": "beats\x1b]0;owned\x07",
        "relation": "app.beats\u202e",
        "function": "app.beat",
        "statement": "UPDATE public.jobs SET status = 'done' WHERE id = NEW.job_id",
        "wrong": "an UPDATE without a fence (through the view app.jv\x1b[2J, whose ...)",
        "fix": "complete / heartbeat / fail",
    }
    report = {**REPORT, "checks": [{**REPORT["checks"][1], "findings": [hook]}]}
    text = checklist.text(report, width=200)
    assert "\x1b" not in text and "\u202e" not in text
    assert (
        "- unfenced_update: trigger beats\\x1b]0;owned\\x07 on app.beats\\u202e, function "
        "app.beat (read from the catalog: pg_stat_statements never holds it)"
    ) in text
    assert "through the view app.jv\\x1b[2J" in text

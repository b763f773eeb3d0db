"""What the operator's writes say (``render.write_lines``): counts and names in, lines out."""

from __future__ import annotations

from jobctl.render import write_lines


def test_a_filters_match_in_words():
    assert write_lines.question("requeue", 3) == write_lines.Question(
        "Requeue 3 job(s)?", "about to requeue"
    )
    assert write_lines.nothing_matched("fail") == "no job matches the filter: nothing to fail"
    assert write_lines.nothing_matched("requeue", left_out=True) == (
        "no job left to requeue: every job the filter matches is left out"
    )
    assert write_lines.matched("requeue", 2, limit=None) == (
        "2 job(s) match; nothing changed: --yes to requeue exactly these, "
        "or --save-plan FILE to review them first"
    )
    assert write_lines.matched("fail", 5, limit=5, saved="p.json") == (
        "5 job(s) match (the first 5: --limit N for more); plan saved to p.json: apply it "
        "with jobctl fail --plan p.json --reason ..."
    )


def test_policy_and_quarantine_in_words():
    assert write_lines.policy_recorded("kind", "k", "manual") == (
        "kind k: policy manual, recorded: reclaim treats its jobs as manual"
    )
    assert write_lines.policy_recorded("queue", "q", "auto") == "queue q: policy auto, recorded"
    assert write_lines.policy_removed("kind", "k", False) == (
        "no policy recorded for kind k: nothing changed"
    )
    assert write_lines.quarantine_dry_run(0) == (
        "dry run: 0 job(s) would switch to manual; nothing changed"
    )

"""A sentence for a terminal (``output.prose``): wrapped at spaces, a jobctl command never
broken across lines — with the global options a printed command repeats (``--table``,
``--target``, shell-quoted), its options, ids, placeholders and paths."""

from __future__ import annotations

import shlex

import pytest

from jobctl.render import output, reclaim_lines, story, views

COMMANDS = [
    "jobctl --table delayed_jobs reclaim --dry-run",
    "jobctl --target prod --table 'my jobs' reclaim --commit --plan /tmp/plans/p.json",
    "jobctl --table delayed_jobs stuck -o wide",
    "jobctl --table public.jobs requeue 4981 --force --reason ...",
    "jobctl --table delayed_jobs requeue --no-lease --save-plan FILE",
]


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("width", [40, 60, 80, 120])
def test_a_command_is_never_broken_across_lines(command, width):
    text = f"a sentence long enough to wrap somewhere before: {command} and after it some words"
    said = output.prose(text, width)
    assert any(command in line for line in said.splitlines()), said
    assert " ".join(said.split()) == " ".join(text.split())  # nothing lost or added


def test_the_printed_commands_repeat_the_global_options_typed():
    again = f"--table {shlex.quote('my jobs')} "
    hint = reclaim_lines.reclaim_hint(3, None, None, again)
    assert hint.endswith("jobctl --table 'my jobs' reclaim --dry-run")
    line = views.no_lease_line(22, collapsed=True, again=again)
    assert line is not None and "jobctl --table 'my jobs' stuck -o wide lists them" in line
    assert "jobctl --table 'my jobs' explain ID" in line
    assert reclaim_lines.expired_after(2, again).endswith(
        "jobctl --table 'my jobs' reclaim --dry-run"
    )
    job = {
        "id": 7, "status": "processing", "recovery_policy": "auto", "attempts": 1,
        "max_attempts": 3, "reclaim_count": 0, "lease_state": "none",
        "lease_expires_at": None, "lease_less_recent": True,
    }  # fmt: skip
    told = story.explain({"job": job, "attempts": [], "events": []}, again=again)["story"]
    said = [w for line in told for w in line.split("jobctl ")[1:]]
    commands = [c for c in said if not c.startswith("can")]  # "jobctl cannot tell ..."
    assert commands and all(c.startswith("--table 'my jobs' ") for c in commands), told
    assert any("requeue 7 --force --reason" in c for c in commands)

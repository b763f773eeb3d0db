"""What a command says when it loses its server: how far it got, whether to run it again."""

from __future__ import annotations

from jobctl import errors
from jobctl.ops import lost_server


def test_losing_the_server_says_what_was_done_and_that_a_rerun_is_safe():
    progress = lost_server.Progress("of 7 step(s) applied", "re-running is safe", "the step")
    progress.done = 3
    lost = progress.lost(errors.ConnectError("database unavailable: server closed"))
    assert isinstance(lost, errors.ConnectError)
    assert lost.message == (
        "database unavailable: server closed; before the loss: 3 of 7 step(s) applied; the step "
        "in flight may or may not have committed; re-running is safe"
    )
    other = errors.LockTimeout("lock")
    assert progress.lost(other) is other

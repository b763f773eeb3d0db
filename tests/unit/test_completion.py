"""Completion candidates as each shell gets them: a candidate holding a
control, bidi or invisible character is not offered; bash gets the others as one escaped word
that means the value itself (the real shells: tests/system/test_completions.py)."""

from __future__ import annotations

import shlex
import string
import subprocess
import sys
import threading
import time

import pytest

from jobctl.cli import completion

HOSTILE = [
    "web-3\\$(touch /tmp/pwned)",
    "$(touch x)",
    "`touch x`",
    "';touch x;'",
    '";touch x;"',
    "{a,b}*?[x]~!#&|<>;$HOME",
    " a\\ b\\\\c\"d'e ",
    string.punctuation,
    "ünïcode ✓ 日本語 🙂",
    "-n",
]


@pytest.mark.parametrize("value", HOSTILE)
def test_a_bash_word_means_the_value(value):
    word = completion.bash_word(value)
    assert shlex.split(word) == [value]  # POSIX shell words: one, the value


def test_bash_words_of_ordinary_values_are_the_values():
    for value in ("api-worker-1.prod.internal", "01JDX3K8Q2ZVB7", "--batch-size", "a@b:1,c=2%"):
        assert completion.bash_word(value) == value


@pytest.mark.parametrize(
    "value", ["x\ny", "x\ty", "x\ry", "x\x1b]0;t\x07", "x\x7f", "x\x9b", "x\u202ey", "x\u200by", ""]
)
def test_controls_bidi_and_invisible_characters_are_never_offered(value):
    assert not completion.offered(value)


@pytest.mark.parametrize("value", HOSTILE)
def test_printable_values_are_offered(value):
    assert completion.offered(value)


def test_a_description_is_one_line_with_nothing_a_terminal_obeys():
    item = completion.Candidate("--x", help="Rows per\ntransaction \x1b[2J (1-10000).")
    assert completion.description(item) == "Rows per transaction \\x1b[2J (1-10000)."
    assert completion.description(completion.Candidate("x")) == ""


@pytest.mark.parametrize(
    ("words", "current", "wanted"),
    [
        # bash splits --opt=value at '=' (COMP_WORDBREAKS): click gets it whole
        (["jobctl", "stuck", "--output", "=", "j"], 4, (["stuck"], "--output=j", "")),
        # the cursor right after '=': that word is replaced, so candidates start with '='
        (["jobctl", "stuck", "--output", "="], 3, (["stuck"], "--output=", "=")),
        (["jobctl", "--target", "=", "a", "show", ""], 5, (["--target=a", "show"], "", "")),
        (["jobctl", "show", "1"], 2, (["show"], "1", "")),
        (["jobctl", "x", "=", "y"], 3, (["x", "="], "y", "")),  # not an option: as it is
    ],
)
def test_bash_words_join_an_option_and_its_value(words, current, wanted):
    assert completion.bash_words(words, current) == wanted


def test_paths_list_files_and_folders_with_a_slash(tmp_path, monkeypatch):
    (tmp_path / "plan.json").write_text("{}")
    (tmp_path / "plans").mkdir()
    (tmp_path / ".hidden").write_text("")
    monkeypatch.chdir(tmp_path)
    assert [i.value for i in completion.paths("pl")] == ["plan.json", "plans/"]
    assert [i.value for i in completion.paths("pl", dirs_only=True)] == ["plans/"]
    assert [i.value for i in completion.paths("")] == ["plan.json", "plans/"]
    assert [i.value for i in completion.paths(".h")] == [".hidden"]
    assert [i.value for i in completion.paths(f"{tmp_path}/plan.")] == [f"{tmp_path}/plan.json"]
    assert completion.paths("nowhere/x") == []


@pytest.fixture
def fresh_asks(monkeypatch):
    """The completion's asks as at a process's start (each test is one TAB)."""
    monkeypatch.setattr(completion._Asks, "started", None)
    monkeypatch.setattr(completion._Asks, "readers", [])


def test_every_ask_of_a_tab_shares_one_deadline(fresh_asks):
    never = threading.Event()  # a read that never returns (a server that never answers)
    started = time.monotonic()
    assert completion.ask(lambda left: [never.wait(), "1"]) == []
    assert completion.ask(lambda left: [never.wait(), "2"]) == []  # what is left: nothing
    assert completion.ask(lambda left: ["3"]) == []  # past the deadline: not even asked
    took = time.monotonic() - started
    assert completion.DEADLINE_S - 0.05 <= took < completion.DEADLINE_S + 0.3, took


def test_a_read_in_time_gives_its_candidates_and_knows_what_is_left(fresh_asks):
    lefts = []
    assert completion.ask(lambda left: lefts.append(left) or ["7", "8"]) == ["7", "8"]
    assert completion.ask(lambda left: lefts.append(left) or ["9"]) == ["9"]
    assert completion.DEADLINE_S >= lefts[0] > lefts[1] > 0
    assert completion.finish("7\n8") == "7\n8"  # nothing left behind: click writes it


def test_the_exit_never_waits_on_a_read_left_behind():
    """A read left behind that holds what the interpreter's exit needs (here a lock an
    exit handler takes, as libraries' handlers do): the candidates are written and the
    process ends at once."""
    program = """
import atexit, threading
from jobctl.cli import completion
held, never = threading.Lock(), threading.Event()
def read(left):
    with held:
        never.wait()
atexit.register(lambda: held.acquire())
print(completion.ask(read), flush=True)
completion.finish("no candidate")
"""
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=30
    )
    took = time.monotonic() - started
    assert (done.returncode, done.stdout, done.stderr) == (0, "[]\nno candidate\n", "")
    assert took < completion.DEADLINE_S + 3, took  # (the interpreter's start included)

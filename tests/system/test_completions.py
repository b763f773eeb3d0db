"""Shell completions: the committed scripts are current, they work in a real bash, and in
real bash, zsh and fish on a pty a hostile candidate never runs and completes as stored."""

from __future__ import annotations

import contextlib
import fcntl
import os
import pty
import select
import shutil
import string
import struct
import subprocess
import sys
import termios
import time
import unicodedata
from pathlib import Path
from typing import Any

import psycopg
import pytest
from helpers import add_jobs, claim_all

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = {"bash": "jobctl.bash", "zsh": "_jobctl", "fish": "jobctl.fish"}


def generate(shell: str) -> str:
    env = {**os.environ, "_JOBCTL_COMPLETE": f"source_{shell}"}
    return subprocess.run(
        [sys.executable, "-m", "jobctl"], env=env, capture_output=True, text=True, check=True
    ).stdout


@pytest.mark.parametrize("shell", sorted(SCRIPTS))
def test_committed_completion_scripts_are_current(shell):
    committed = (ROOT / "completions" / SCRIPTS[shell]).read_text()
    assert generate(shell) == committed, (
        f"completions/{SCRIPTS[shell]} is stale: regenerate it with "
        f"_JOBCTL_COMPLETE=source_{shell} jobctl > completions/{SCRIPTS[shell]}"
    )


@pytest.mark.parametrize("shell", sorted(SCRIPTS))
def test_jobctl_completion_prints_the_committed_script(shell):
    done = subprocess.run(
        [sys.executable, "-m", "jobctl", "completion", shell], capture_output=True, text=True
    )
    assert done.returncode == 0 and done.stderr == ""
    assert done.stdout == (ROOT / "completions" / SCRIPTS[shell]).read_text()
    if shell == "zsh":  # autoloadable from $fpath: the #compdef line comes first
        assert done.stdout.startswith("#compdef jobctl\n")


def bash_complete(words: list[str], env: dict[str, str]) -> list[str]:
    script = ROOT / "completions" / "jobctl.bash"
    line = " ".join(f"'{w}'" for w in words)
    program = (
        f"source {script}; COMP_WORDS=({line}); COMP_CWORD={len(words) - 1}; "
        "_jobctl_completion jobctl; printf '%s\\n' \"${COMPREPLY[@]}\""
    )
    path = f"{Path(sys.executable).parent}:{env.get('PATH', '')}"
    result = subprocess.run(
        ["bash", "-c", program],
        env={**env, "PATH": path},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.stderr == ""
    return [w for w in result.stdout.splitlines() if w]


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash")
@pytest.mark.skipif(
    shutil.which("jobctl", path=str(Path(sys.executable).parent)) is None,
    reason="jobctl is not installed in this environment",
)
def test_bash_completes_commands_options_and_job_ids(conn, dsn):
    env = {k: v for k, v in os.environ.items() if k not in ("JOBCTL_DSN", "DATABASE_URL")}
    registered = subprocess.run(
        ["bash", "-c", f"source {ROOT / 'completions' / 'jobctl.bash'}; complete -p jobctl"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert registered.strip() == "complete -F _jobctl_completion jobctl"  # no file fallback
    assert {"reclaim", "requeue"} <= set(bash_complete(["jobctl", "re"], env))
    assert "--batch-size" in bash_complete(["jobctl", "reclaim", "--ba"], env)
    assert bash_complete(["jobctl", "show", ""], env) == []  # no DSN: nothing, no error
    add_jobs(conn, 12)
    claim_all(dsn, 12)
    ids = bash_complete(["jobctl", "show", "1"], {**env, "JOBCTL_DSN": dsn})
    assert ids == ["1", "10", "11", "12"]


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash")
@pytest.mark.skipif(
    shutil.which("jobctl", path=str(Path(sys.executable).parent)) is None,
    reason="jobctl is not installed in this environment",
)
def test_bash_completes_option_values(conn, dsn):
    """--policy, -o and schema apply --history complete their values; --worker the workers
    holding processing jobs, from the database."""
    env = {k: v for k, v in os.environ.items() if k not in ("JOBCTL_DSN", "DATABASE_URL")}
    assert bash_complete(["jobctl", "stuck", "--policy", ""], env) == ["auto", "manual"]
    assert bash_complete(["jobctl", "stuck", "--policy", "m"], env) == ["manual"]
    assert {"table", "wide", "json", "csv"} <= set(
        bash_complete(["jobctl", "stuck", "-o", ""], env)
    )
    history = bash_complete(["jobctl", "schema", "apply", "--history", ""], env)
    assert history == ["transitions", "late", "exact", "audit"]
    assert bash_complete(["jobctl", "stuck", "--worker", ""], env) == []  # no DSN: nothing
    add_jobs(conn, 3)
    claim_all(dsn, 2, worker="api-worker-1.prod.internal")
    claim_all(dsn, 1, worker="api-worker-2.prod.internal")
    workers = bash_complete(["jobctl", "reclaim", "--worker", "api"], {**env, "JOBCTL_DSN": dsn})
    assert workers == ["api-worker-1.prod.internal", "api-worker-2.prod.internal"]


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash")
@pytest.mark.skipif(
    shutil.which("jobctl", path=str(Path(sys.executable).parent)) is None,
    reason="jobctl is not installed in this environment",
)
def test_bash_completes_target_names_and_a_targets_ids(conn, dsn, tmp_path):
    """--target completes the config file's names; with one target, ids come from it."""
    config = tmp_path / "config.toml"
    config.write_text(
        f'[targets.orders]\ndsn = "{dsn}"\n\n[targets.billing]\ndsn = "dbname=nowhere"\n'
    )
    env = {k: v for k, v in os.environ.items() if k not in ("JOBCTL_DSN", "DATABASE_URL")}
    env["JOBCTL_CONFIG"] = str(config)
    assert bash_complete(["jobctl", "--target", ""], env) == ["orders", "billing"]
    assert bash_complete(["jobctl", "--target", "o"], env) == ["orders"]
    add_jobs(conn, 12)
    claim_all(dsn, 12)
    ids = bash_complete(["jobctl", "--target", "orders", "show", "1"], env)
    assert ids == ["1", "10", "11", "12"]
    assert bash_complete(["jobctl", "--all-targets", "show", "1"], env) == []


# ---------------------------------------------------------------- hostile candidates, real shells
# A compromised application names its workers and its text job ids so that a shell would run
# them: each would create the file pwned-N in the shell's directory. Typed at a real bash, zsh
# and fish on a pty (`jobctl stuck --worker PREFIX<TAB><Enter>`, `jobctl show PREFIX<TAB><Enter>`),
# with `jobctl` a shell function recording the words it was given: nothing may run, and each
# candidate must arrive as the literal value stored, or (holding a control character) not be
# offered at all.
HOSTILE = [  # (prefix typed, the rest of the value)
    ("1", "\\$(touch pwned-1)"),  # the issue's: a backslash typer's zsh script did not escape
    ("2", "$(touch pwned-2)"),
    ("3", "`touch pwned-3`"),
    ("4", "';touch pwned-4;'"),
    ("5", '";touch pwned-5;"'),
    ("6", "(touch pwned-6)"),  # fish's command substitution
    ("7", "\\'$(touch pwned-7)\\'"),
    ("8", "{a,b}*?[x]~!#&|<>;$HOME"),  # brace, glob, history, variable: all literal
    ("9", " a\\ b\\\\c\"d'e "),
    ("m", "$(touch pwned-m)a"),  # two candidates: their common prefix is inserted
    ("m", "$(touch pwned-m)b"),
    # never offered: a newline would make two candidates of it, a tab start fish's
    # description, an escape act on the terminal in the list a shell prints, a bidi control
    # show it reversed
    ("c1", "x\ntouch pwned-c1"),
    ("c2", "x\ttouch pwned-c2"),
    ("c3", "x\x1b]0;pwned\x07"),
    ("c4", "x\u202etxt.exe"),
]
WORKERS = [f"w{p}-{rest}" for p, rest in HOSTILE] + [
    "api-worker-1.prod.internal",
    "api-worker-2.prod.internal",
]
IDS = [f"i{p}-{rest}" for p, rest in HOSTILE] + ["01JDX3K8Q2ZVB7", "01JEA0000000"]


def after_tab(typed: str, stored: list[str]) -> str:
    """What TAB makes of ``typed``: the common prefix of the values starting with it (the
    value itself when one does), leaving out those holding a control or format character
    (never offered); the typed text as it was when none is left."""
    offered = [
        v
        for v in stored
        if v.startswith(typed) and not any(unicodedata.category(c) in ("Cc", "Cf") for c in v)
    ]
    if not offered:
        return typed
    common = offered[0]
    for value in offered[1:]:
        while not value.startswith(common):
            common = common[:-1]
    return common


RECORD_END = b"\x01\x00"


def shell_rc(shell: str, home: Path, *, zsh_fpath: bool = False) -> list[str]:
    """The command starting ``shell`` interactively, with jobctl's committed completion
    script (zsh: sourced, or autoloaded from a folder in $fpath), a plain prompt, and
    ``jobctl`` a function recording its words in ./argv."""
    scripts = ROOT / "completions"
    record = "printf '%s\\0' \"$@\" >> argv; printf '\\1\\0' >> argv"
    if shell == "bash":
        rc = home / "bashrc"
        rc.write_text(
            f"PS1='READY> '\nsource {scripts / 'jobctl.bash'}\njobctl() {{ {record}; }}\n"
        )
        return ["bash", "--noprofile", "--rcfile", str(rc), "-i"]
    if shell == "zsh":  # ZDOTDIR=home: its .zshrc
        load = f"source {scripts / '_jobctl'}"
        if zsh_fpath:
            (home / "zfunc").mkdir()
            (home / "zfunc" / "_jobctl").write_text((scripts / "_jobctl").read_text())
            load = ""
        (home / ".zshrc").write_text(
            f"PS1='READY> '\nfpath=({home / 'zfunc'} $fpath)\n"
            f"autoload -Uz compinit && compinit -u -D\n{load}\njobctl() {{ {record}; }}\n"
        )
        return ["zsh", "-i"]
    rc = home / "config.fish"
    rc.write_text(
        "function fish_prompt; echo -n 'READY> '; end\nset -g fish_greeting\n"
        f"source {scripts / 'jobctl.fish'}\n"
        "function jobctl; printf '%s\\0' $argv >> argv; printf '\\1\\0' >> argv; end\n"
    )
    return ["fish", "--no-config", "-i", "-C", f"source {rc}"]


def typed_with_tab(
    shell: str, lines: list[str], env: dict[str, str], home: Path, *, zsh_fpath: bool = False
) -> list[list[str] | None]:
    """Type each line, TAB and Enter at ``shell`` on a pty; the words ``jobctl`` got each
    time (None: the line ran no jobctl, e.g. a syntax error)."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 200, 0, 0))
    environment = {k: v for k, v in os.environ.items() if not k.startswith("JOBCTL_")}
    environment.pop("DATABASE_URL", None)
    environment.update(
        HOME=str(home),
        ZDOTDIR=str(home),
        XDG_CONFIG_HOME=str(home / "config"),
        XDG_DATA_HOME=str(home / "data"),
        HISTFILE=str(home / "history"),
        fish_history="",
        TERM="xterm",
        PATH=f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}",
        **env,
    )
    proc = subprocess.Popen(
        shell_rc(shell, home, zsh_fpath=zsh_fpath),
        stdin=follower,
        stdout=follower,
        stderr=follower,
        cwd=home,
        env=environment,
        start_new_session=True,
        preexec_fn=lambda: fcntl.ioctl(0, termios.TIOCSCTTY, 0),
    )
    os.close(follower)
    seen = bytearray()

    def records() -> list[list[str]]:
        path = home / "argv"
        data = path.read_bytes() if path.exists() else b""
        return [
            [w.decode(errors="surrogateescape") for w in r.split(b"\0")[:-1]]
            for r in data.split(RECORD_END)[:-1]
        ]

    def wait_for(done: Any, timeout: float = 30) -> bool:
        deadline = time.monotonic() + timeout
        while not done() and time.monotonic() < deadline and proc.poll() is None:
            ready, _, _ = select.select([leader], [], [], 0.05)
            if ready:
                with contextlib.suppress(OSError):
                    seen.extend(os.read(leader, 65536))
        return bool(done())

    got: list[list[str] | None] = []
    try:
        assert wait_for(lambda: b"READY> " in seen), f"{shell}: no prompt: {bytes(seen)!r}"
        for n, line in enumerate(lines):
            before = len(records())
            # the line editor reads TAB, completes, then reads Enter, then the next line (a
            # file made when the line is done): in that order
            os.write(leader, f"{line}\t\recho > done-{n}\r".encode())
            if not wait_for((home / f"done-{n}").exists):  # e.g. a quote left open
                os.write(leader, b"\x03")
            now = records()
            got.append(now[before] if len(now) > before else None)
        os.write(leader, b"exit\r")
        proc.wait(timeout=10)
    finally:
        os.close(leader)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return got


@pytest.fixture(scope="module")
def hostile_database(server_dsn):
    """A table with text ids (and varchar workers): every row a hostile id and worker, but
    two legitimate ones (ULID ids, api-worker-N.prod.internal)."""
    from conftest import scratch_database
    from shapes import TEXT_VARCHAR_NAIVE

    from jobctl.cli import main as cli

    with scratch_database(server_dsn, "jobctl_completion") as made:
        with psycopg.connect(made, autocommit=True) as c:
            c.execute(TEXT_VARCHAR_NAIVE.ddl)
        assert cli.main(["--dsn", made, "--table", "work.jobs", "schema", "apply", "--yes"]) == 0
        with psycopg.connect(made, autocommit=True) as c:
            for job_id, worker in zip(IDS, WORKERS, strict=True):
                c.execute(
                    "INSERT INTO work.jobs (id, status, reserved_by, reserved_at) "
                    "VALUES (%s, 'processing', %s, now())",
                    (job_id, worker),
                )
        yield made


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_a_hostile_candidate_is_never_run_and_completes_as_stored(
    shell, hostile_database, tmp_path
):
    """Workers and text ids holding $(...), backticks, quotes, backslashes, globs and control
    characters, completed in a real shell and run: nothing of theirs runs, each arrives as
    the literal value stored (or, holding a control character, is not offered), and the
    legitimate ones complete."""
    if shutil.which(shell) is None:
        if os.environ.get("JOBCTL_REQUIRE_SHELLS") == "1":  # CI: run, never skip
            pytest.fail(f"{shell} is not installed and JOBCTL_REQUIRE_SHELLS=1")
        pytest.skip(f"{shell} is not installed (apt-get install {shell})")
    if shutil.which("jobctl", path=str(Path(sys.executable).parent)) is None:
        pytest.skip("jobctl is not installed in this environment")
    prefixes = list(dict.fromkeys(p for p, _ in HOSTILE))
    workers = [f"w{p}" for p in prefixes] + ["api-worker-1"]
    ids = ["i1", "ic1", "01JD"]  # the same code as the workers': a few, for time
    lines = [f"jobctl stuck --worker {t}" for t in workers] + [f"jobctl show {t}" for t in ids]
    env = {"JOBCTL_DSN": hostile_database, "JOBCTL_TABLE": "work.jobs"}
    got = typed_with_tab(shell, lines, env, tmp_path)
    assert sorted(p.name for p in tmp_path.glob("pwned*")) == []  # nothing ran
    wanted = [["stuck", "--worker", after_tab(t, WORKERS)] for t in workers]
    wanted += [["show", after_tab(t, IDS)] for t in ids]
    assert got == wanted
    assert ["stuck", "--worker", "api-worker-1.prod.internal"] in got
    assert ["show", "01JDX3K8Q2ZVB7"] in got


@pytest.mark.skipif(shutil.which("zsh") is None, reason="zsh is not installed")
@pytest.mark.skipif(
    shutil.which("jobctl", path=str(Path(sys.executable).parent)) is None,
    reason="jobctl is not installed in this environment",
)
def test_zsh_autoloaded_from_fpath_completes_on_the_first_tab(hostile_database, tmp_path):
    """Installed as docs/commands.md says (a folder in $fpath, then compinit), the very first
    TAB completes, and the next ones too."""
    lines = ["jobctl stuck --worker api-worker-1", "jobctl show 01JD", "jobctl show i1"]
    env = {"JOBCTL_DSN": hostile_database, "JOBCTL_TABLE": "work.jobs"}
    got = typed_with_tab("zsh", lines, env, tmp_path, zsh_fpath=True)
    assert got == [
        ["stuck", "--worker", "api-worker-1.prod.internal"],
        ["show", "01JDX3K8Q2ZVB7"],
        ["show", IDS[0]],
    ]
    assert list(tmp_path.glob("pwned*")) == []


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash")
def test_bash_reads_every_escaped_candidate_back_as_the_value(tmp_path):
    """Every printable ASCII character, first and inside a word, and the hostile values:
    bash reads each escaped word as the value, and runs nothing."""
    from jobctl.cli import completion

    printable = [c for c in string.printable if c.isprintable()]
    values = [f"{c}x{c}" for c in printable] + [v for v in WORKERS if completion.offered(v)]
    program = "printf '%s\\0' " + " ".join(completion.bash_word(v) for v in values)
    env = {**os.environ, "HOME": str(tmp_path)}
    result = subprocess.run(
        ["bash", "--norc", "-c", program], cwd=tmp_path, env=env, capture_output=True, check=True
    )
    assert result.stdout.decode().split("\0")[:-1] == values
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------- what the issue found (37)
def need(shell: str) -> None:
    if shutil.which(shell) is None:
        if os.environ.get("JOBCTL_REQUIRE_SHELLS") == "1":
            pytest.fail(f"{shell} is not installed and JOBCTL_REQUIRE_SHELLS=1")
        pytest.skip(f"{shell} is not installed (apt-get install {shell})")
    if shutil.which("jobctl", path=str(Path(sys.executable).parent)) is None:
        pytest.skip("jobctl is not installed in this environment")


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_opt_equals_value_forms_and_nothing_when_nothing_applies(shell, conn, dsn, tmp_path):
    """--output=j<TAB> and --target=o<TAB> complete the value after the =; a worker's name
    with spaces is inserted quoted; where nothing applies (no database for ids) nothing is
    offered, never the files of the directory (there are some: the shell's rc files, and
    README.md); a PATH option does complete files."""
    need(shell)
    (tmp_path / "README.md").write_text("not a job id\n")
    (tmp_path / "plan-7.json").write_text("{}\n")
    config = tmp_path / "targets.toml"
    config.write_text(f'[targets.orders]\ndsn = "{dsn}"\n\n[targets.billing]\ndsn = "x"\n')
    add_jobs(conn, 2)
    claim_all(dsn, 2, worker="night shift 'b'")
    lines = [
        "jobctl stuck --output=jsonl",  # complete already: TAB adds nothing but a space
        "jobctl stuck --output=cs",
        "jobctl --target=or",
        "jobctl --target orders stuck --worker nig",
        "jobctl show R",  # README.md is the one file starting so: a fallback would insert it
        "jobctl reclaim --plan pla",
    ]
    env = {"JOBCTL_CONFIG": str(config)}
    got = typed_with_tab(shell, lines, env, tmp_path)
    assert got[0] == ["stuck", "--output=jsonl"]
    assert got[1] == ["stuck", "--output=csv"]
    assert got[2] == ["--target=orders"]
    assert got[3] == ["--target", "orders", "stuck", "--worker", "night shift 'b'"]
    assert got[4] == ["show", "R"]  # no database: nothing, and no file name
    assert got[5] == ["reclaim", "--plan", "plan-7.json"]


def test_a_tab_never_waits_long_on_a_server_that_never_answers(tmp_path):
    """A server that accepts the connection and never says a word: the TAB in a real bash
    gives nothing, within about the one deadline (completion.DEADLINE_S) of what starting
    jobctl costs, not libpq's connect timeout. Timed three times each way, the fastest
    compared (a loaded machine only ever adds to a time)."""
    from jobctl.cli import completion

    need("bash")
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBCTL_")}
    took, startup = [], []
    with never_answers() as port:
        env["JOBCTL_DSN"] = f"host=127.0.0.1 port={port} user=x dbname=x connect_timeout=30"
        for _ in range(3):
            started = time.monotonic()
            assert bash_complete(["jobctl", "show", "1"], env) == []
            took.append(time.monotonic() - started)
            started = time.monotonic()  # what any completion costs: starting jobctl
            bash_complete(["jobctl", "re"], {k: v for k, v in env.items() if k != "JOBCTL_DSN"})
            startup.append(time.monotonic() - started)
    assert min(took) < min(startup) + completion.DEADLINE_S + 0.5, (took, startup)
    assert max(took) < max(startup) + completion.DEADLINE_S + 1.5, (took, startup)


def completion_run(words: list[str], env: dict[str, str]) -> tuple[float, str]:
    """One TAB as the shell's script runs it: ``jobctl`` with bash's completion variables
    (the process itself, timed from its start to its end), and what it printed."""
    variables = {
        "COMP_WORDS": " ".join(words),
        "COMP_CWORD": str(len(words) - 1),
        "_JOBCTL_COMPLETE": "complete_bash",
        "PYTHONPATH": str(ROOT),
    }
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "jobctl"],
        env={**env, **variables},
        capture_output=True,
        text=True,
        timeout=60,
    )
    took = time.monotonic() - started
    assert done.returncode == 0 and done.stderr == "", done.stderr
    return took, done.stdout


@contextlib.contextmanager
def never_answers() -> Any:
    """A server that accepts every connection and never says a word (nor closes one)."""
    import socket
    import threading

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    held: list[socket.socket] = []

    def accept() -> None:
        with contextlib.suppress(OSError):
            while True:
                held.append(listener.accept()[0])

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield listener.getsockname()[1]
    finally:
        listener.close()
        for conn in held:
            conn.close()


def test_one_deadline_for_the_database_and_the_exit_never_waits_on_the_read():
    """Against a server that accepts and never answers, behind a DSN of two hosts (two
    connection attempts, each allowed 30 s): each of several TABs gives nothing, within
    the one deadline (completion.DEADLINE_S) of what jobctl's start costs (the same
    process completing a command name, timed just before), the process not waiting at its
    exit on the read it left behind."""
    from jobctl.cli import completion

    env = {k: v for k, v in os.environ.items() if not k.startswith(("JOBCTL_", "PG"))}
    env.pop("DATABASE_URL", None)
    took, startup = [], []
    with never_answers() as port:
        dsn = f"host=127.0.0.1,127.0.0.1 port={port},{port} user=x dbname=x connect_timeout=30"
        for _ in range(5):
            spent, names = completion_run(["jobctl", "sho"], env)
            assert names.split() == ["show"]
            startup.append(spent)
            spent, out = completion_run(["jobctl", "show", ""], {**env, "JOBCTL_DSN": dsn})
            assert out.strip() == ""  # no candidate, and no error
            took.append(spent)
    # the fastest of each (load only adds), and each TAB: never a connect timeout's wait
    assert min(took) < min(startup) + completion.DEADLINE_S + 0.4, (took, startup)
    assert max(took) < max(startup) + completion.DEADLINE_S + 1.5, (took, startup)

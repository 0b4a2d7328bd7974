"""The CLI tests' fork server runs a command exactly as exec does: the same exit status,
stdout and stderr, on pipes and on a terminal; signals reach the command itself; a command
whose environment differs from the server's in what was read at import runs with exec."""

from __future__ import annotations

import json
import os
import pty
import select
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from . import processes
from .processes import COMMAND, ROOT, bare_env, popen

LEDGER = ROOT / "examples" / "ledger.jsonl"

pytestmark = pytest.mark.skipif(
    bool(os.environ.get("LEDGER_TESTS_EXEC")), reason="the fork server is switched off"
)


def both(argv: list[str], env: dict[str, str], cwd: Path, stdin: str = "") -> list[tuple]:
    """The command run forked and with exec: (kind, exit status, stdout, stderr) each."""
    results = []
    for exec_only in (False, True):
        options = {"close_fds": True} if exec_only else {}  # close_fds given: exec
        process = popen(
            argv,
            env,
            cwd=cwd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            **options,
        )
        done = processes.finish(process, stdin, 60)
        results.append((type(process).__name__, done.returncode, done.stdout, done.stderr))
    return results


@pytest.mark.parametrize(
    "argv",
    [
        ["--help"],
        ["ls", "--limit", "lots"],
        ["--store", "sqlite:///missing.db", "ls"],
        ["--store", "sqlite:///x.db", "import", "-"],
        ["--store", "sqlite:///x.db", "import", "-", "--json"],
        ["--table", "ledger", "--endpoint-url", "http://127.0.0.1:9", "ls"],
        ["nosuch"],
    ],
    ids=" ".join,
)
def test_a_forked_command_does_what_exec_does(argv: list[str], tmp_path: Path) -> None:
    forked, executed = both(argv, bare_env(), tmp_path, stdin=LEDGER.read_text())
    assert forked[0] == "_Forked" and executed[0] == "Popen"
    if argv[-1] in ("-", "--json"):  # an import: the second run finds every line present
        assert forked[1] == executed[1] == 0
        assert "6 new" in (forked[2] + forked[3]) and "6 already present" in (
            executed[2] + executed[3]
        )
        return
    assert forked[1:] == executed[1:]


def test_a_forked_commands_terminal_is_its_own(tmp_path: Path) -> None:
    """stdout on a pseudo-terminal: a table (line-buffered, as the interpreter makes it for
    a terminal), the same as with exec; on a pipe, tab-separated text."""
    store = f"sqlite:///{tmp_path / 'x.db'}"
    env = {**bare_env(), "TERM": "xterm", "COLUMNS": "100"}
    assert processes.run(["--store", store, "import", str(LEDGER)], env).returncode == 0
    shown = []
    for exec_only in (False, True):
        leader, follower = pty.openpty()
        process = popen(
            ["--store", store, "ls"],
            env,
            stdout=follower,
            stderr=subprocess.DEVNULL,
            stdin=subprocess.DEVNULL,
            **({"close_fds": True} if exec_only else {}),
        )
        os.close(follower)
        seen = bytearray()
        while select.select([leader], [], [], 60)[0]:
            try:
                chunk = os.read(leader, 65536)
            except OSError:
                break
            if not chunk:
                break
            seen += chunk
        os.close(leader)
        assert process.wait(timeout=60) == 0
        shown.append(bytes(seen))
    assert shown[0] == shown[1]
    assert b"\t" not in shown[0] and b"sb-" in shown[0]
    piped = processes.run(["--store", store, "ls"], env)
    assert "\t" in piped.stdout


def test_a_signal_reaches_the_command_and_its_status_is_reported(tmp_path: Path) -> None:
    process = popen(
        ["local", "--port", "0"], bare_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert type(process).__name__ == "_Forked"
    assert process.stdout is not None
    assert process.stdout.readline().startswith(b"export ")
    assert os.getpgid(process.pid) == os.getpgid(0)  # a process of this test's group
    process.send_signal(signal.SIGKILL)
    process.communicate(timeout=30)
    assert process.returncode == -signal.SIGKILL
    with pytest.raises(ProcessLookupError):
        os.kill(process.pid, 0)


def test_a_command_dropped_while_it_runs_never_breaks_the_next_popen(tmp_path: Path) -> None:
    """A forked command dropped while it runs goes on subprocess's list of children to reap,
    and the collector may close its socket first: subprocess._cleanup, run by every later
    Popen, then polled a closed socket and raised ValueError (a whole worker's later
    commands failed, under load, in CI)."""
    process = popen(
        ["local", "--port", "0"], bare_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert type(process).__name__ == "_Forked"
    assert process.stdout is not None
    assert process.stdout.readline().startswith(b"export ")
    pid = process.pid
    try:
        assert process._connection is not None
        process._connection.close()  # as the collector does to a dropped object's socket
        subprocess._active.append(process)  # type: ignore[attr-defined]  # as Popen.__del__
        subprocess._cleanup()  # type: ignore[attr-defined]
        assert process not in subprocess._active  # type: ignore[attr-defined]
        later = popen(["--version"], bare_env(), stdout=subprocess.PIPE)
        assert later.communicate(timeout=60)[0]
    finally:
        os.kill(pid, signal.SIGKILL)


def test_an_environment_read_at_import_differently_runs_as_it_would_with_exec(
    tmp_path: Path,
) -> None:
    """From a server started with that environment (up to MAX_SERVERS), or with exec."""
    server = processes._server()
    assert server is not None
    assert server.read_at_import, "the server recorded no variable read while importing"
    assert "TERMINAL_WIDTH" in server.read_at_import  # typer's help reads it on import
    for name, value in (("TERMINAL_WIDTH", "33"), ("LANG", "C")):
        env = {**bare_env(), name: value}
        shown = []
        for options in ({}, {"close_fds": True}):
            with popen(["--help"], env, stdout=subprocess.PIPE, text=True, **options) as process:
                shown.append(process.communicate(timeout=60)[0])
            assert process.returncode == 0
            if isinstance(process, processes._Forked):
                assert process._server.server_env.get(name) == value
                assert process._server is not server
        assert shown[0] == shown[1], name
    # A variable nothing reads at import (the table) is the command's own, forked.
    process = popen(
        ["ls"],
        {**bare_env(), "SANDBOX_LEDGER_STORE": f"sqlite:///{tmp_path / 'none.db'}"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    _, err = process.communicate(timeout=60)
    assert type(process).__name__ == "_Forked"
    assert process.returncode == 3 and "none.db does not exist" in err


def test_the_command_is_the_installed_script(tmp_path: Path) -> None:
    """sys.argv[0] and sys.path[0] as the console script has them: a forked command and an
    exec'd one name the same program in their usage line."""
    forked, executed = both(["ls", "--limit", "lots"], bare_env(), tmp_path)
    assert forked[3] == executed[3] and "`sandbox-ledger ls --help`" in forked[3]
    assert Path(str(COMMAND)).name == "sandbox-ledger"


PROBE = """
import os, sys
print(__name__, sys.argv, repr(sys.path[0]), os.getcwd(), os.environ.get("PROBE"))
sys.stdout.flush()
if os.environ.get("PROBE") == "raise":
    1 / 0
sys.exit(int(os.environ.get("PROBE", "0")))
"""


@pytest.mark.parametrize("probe", ["0", "3", "raise"])
def test_python_c_forked_runs_as_exec_runs_it(probe: str, tmp_path: Path) -> None:
    """``processes.python``: __main__, sys.argv, sys.path[0], the directory, the environment,
    the exit status and an uncaught exception as ``python -c`` has them."""
    env = {**bare_env(), "PROBE": probe}
    assert processes._server(env) is not None  # so python() forks it
    forked = processes.python(PROBE, env, cwd=tmp_path)
    executed = subprocess.run(
        [sys.executable, "-c", PROBE], env=env, cwd=tmp_path, capture_output=True, text=True
    )
    assert forked.stdout == executed.stdout == f"__main__ ['-c'] '' {tmp_path} {probe}\n"
    assert forked.returncode == executed.returncode == (1 if probe == "raise" else int(probe))
    assert forked.stderr.splitlines()[-1:] == executed.stderr.splitlines()[-1:]


ENVIRONMENT = """
import json, locale, os, sys
print(json.dumps([dict(os.environ), locale.setlocale(locale.LC_CTYPE), sys.getfilesystemencoding(),
                  sys.stdout.encoding, sys.flags.utf8_mode]))
"""


def test_a_shell_where_nothing_is_set_is_forked_with_the_environment_exec_gives(
    tmp_path: Path,
) -> None:
    """With only PATH and HOME, as the CLI tests run a new user's shell, the interpreter's
    start-up coerces the C locale (it sets LC_CTYPE, PEP 538): such a command is forked (it
    used to be exec'd every time, its server never agreeing) with the environment, locale
    and encodings an exec'd one has."""
    env = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/tmp")}
    processes.stop_extra_servers()  # room for this environment's, whatever ran before here
    assert processes._server(env) is not None  # so python() forks it
    forked = processes.python(ENVIRONMENT, env, cwd=tmp_path)
    executed = subprocess.run(
        [sys.executable, "-c", ENVIRONMENT], env=env, cwd=tmp_path, capture_output=True, text=True
    )
    assert forked.returncode == executed.returncode == 0, forked.stderr + executed.stderr
    assert json.loads(forked.stdout) == json.loads(executed.stdout)
    assert "LC_CTYPE" in json.loads(executed.stdout)[0]  # what the test is about: coerced

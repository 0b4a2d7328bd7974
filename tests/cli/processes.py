"""The operator CLI run as a real process: the command, the repository root, a shell with
AWS credentials and a region but no table or store configured, and one run of a command.

:func:`popen` and :func:`run` start ``sandbox-ledger`` as a process of its own, forked from
this test worker's fork server (``forkserver.py``: the CLI already imported) when the
command's environment agrees with the server's on every variable read at import, and with
exec otherwise, or everywhere with ``LEDGER_TESTS_EXEC=1`` in the environment (CI runs the
CLI tests so as well). Either way it is a real process: pid, exit status, signals, pipes or a
terminal, environment and working directory are its own.
"""

from __future__ import annotations

import atexit
import contextlib
import inspect
import json
import os
import select
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

COMMAND = Path(sys.executable).parent / "sandbox-ledger"
ROOT = Path(__file__).resolve().parents[2]
FORKSERVER = Path(__file__).with_name("forkserver.py")


def free_port() -> int:
    """A loopback port free now (for a server a test starts on a port it knows first)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def bare_env(**extra: str) -> dict[str, str]:
    """A shell with AWS credentials and a region but no table or store configured."""
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("SANDBOX_LEDGER_", "AWS_", "PG"))
    }
    return {
        **env,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_REGION": "us-east-1",
        **extra,
    }


def popen(argv: list[str], env: dict[str, str], **options: Any) -> subprocess.Popen[Any]:
    """``subprocess.Popen([sandbox-ledger, *argv], env=env, **options)``, forked from the
    fork server where that runs the command exactly as exec would."""
    server = _server(env) if _forkable(env, options) else None
    if server is None:
        return subprocess.Popen([str(COMMAND), *argv], env=env, **options)
    return _Forked([str(COMMAND), *argv], env=env, server=server, **options)


def python(
    code: str,
    env: dict[str, str],
    *,
    cwd: Path | str | None = None,
    timeout: float = 60,
) -> subprocess.CompletedProcess[str]:
    """``python -c code`` to its end, output captured: forked as :func:`popen` decides (the
    program runs as ``__main__`` with ``sys.argv == ["-c"]`` and the working directory first
    on ``sys.path``, as ``-c`` has them; the server's preloaded modules are already imported,
    so a program that inspects ``sys.modules`` must use exec)."""
    options: dict[str, Any] = {
        "cwd": cwd,
        "stdin": subprocess.DEVNULL,
        "stdout": subprocess.PIPE,
        "stderr": subprocess.PIPE,
        "text": True,
    }
    server = _server(env) if _forkable(env, options) else None
    args = [sys.executable, "-c", code]
    process = (
        subprocess.Popen(args, env=env, **options)
        if server is None
        else _Forked(args, env=env, server=server, code=code, **options)
    )
    return finish(process, None, timeout)


def run(
    argv: list[str],
    env: dict[str, str],
    *,
    cwd: Path | str | None = None,
    stdin: str | bytes = "",
    timeout: float = 60,
    text: bool = True,
    stderr: int = subprocess.PIPE,
) -> subprocess.CompletedProcess[Any]:
    """Run ``sandbox-ledger argv`` to its end, with ``stdin`` as its input and its output
    captured (``stderr=subprocess.STDOUT`` merges the two), as ``subprocess.run`` would."""
    if not text and isinstance(stdin, str):
        stdin = stdin.encode()
    process = popen(
        argv,
        env,
        cwd=cwd,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=stderr,
        text=text,
    )
    return finish(process, stdin, timeout)


def finish(
    process: subprocess.Popen[Any], stdin: str | bytes | None, timeout: float
) -> subprocess.CompletedProcess[Any]:
    """``process`` run to its end with ``stdin`` as its input, as ``subprocess.run`` does: on
    a timeout (or any other failure) it is killed and waited for, and the error raised."""
    with process:
        try:
            out, err = process.communicate(stdin, timeout=timeout)
        except BaseException:
            process.kill()
            process.wait()
            raise
    return subprocess.CompletedProcess(process.args, process.returncode, out, err)


# Options under which a forked command would differ from exec: left to exec.
_EXEC_ONLY = (
    "preexec_fn",
    "pass_fds",
    "start_new_session",
    "process_group",
    "executable",
    "shell",
    "user",
    "group",
    "extra_groups",
    "umask",
    "restore_signals",
    "close_fds",
)


def _forkable(env: dict[str, str], options: dict[str, Any]) -> bool:
    if os.environ.get("LEDGER_TESTS_EXEC") or env.get("LEDGER_TESTS_EXEC"):
        return False
    return not any(options.get(name) not in (None, ()) for name in _EXEC_ONLY)


class _Server:
    """This process's fork server: started on first use, ended when this process exits."""

    def __init__(self, env: dict[str, str]) -> None:
        self.folder = tempfile.mkdtemp(prefix="ledger-forkserver-")
        self.path = os.path.join(self.folder, "socket")
        report = os.path.join(self.folder, "report.json")
        self.env = env
        self.log = open(os.path.join(self.folder, "server.log"), "wb")  # noqa: SIM115
        self.process = subprocess.Popen(
            [sys.executable, str(FORKSERVER), self.path, report],
            env=self.env,
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=self.log,
        )
        deadline = time.monotonic() + 60
        while not os.path.exists(self.path):
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(
                    "the CLI tests' fork server did not start:\n"
                    + Path(self.log.name).read_text(errors="replace")
                )
            time.sleep(0.02)
        facts = json.loads(Path(report).read_text(encoding="utf-8"))
        self.read_at_import: list[str] = facts["read"]
        self.server_env: dict[str, str] = facts["env"]
        # What the interpreter's start-up added to the environment it was given (LC_CTYPE
        # where the C locale was coerced): an exec'd command that agrees gets the same.
        self.added = {k: v for k, v in facts["started"].items() if k not in env}
        atexit.register(self.stop)

    def agrees(self, env: dict[str, str]) -> bool:
        """Whether a command with ``env`` would start and import as the server did: every
        variable read while it imported, and every one the interpreter reads at start-up, the
        same as in the environment the server was started with."""
        if "*" in self.read_at_import:
            return env == self.env
        names = set(self.read_at_import) | {
            k for k in (*env, *self.env) if k.startswith(("PYTHON", "LC_", "LANG"))
        }
        return all(env.get(k) == self.env.get(k) for k in names)

    def stop(self) -> None:
        if self.process.poll() is None:
            assert self.process.stdin is not None
            self.process.stdin.close()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.log.close()
        with contextlib.suppress(FileNotFoundError):  # stopped already (idempotent)
            for name in os.listdir(self.folder):
                os.unlink(os.path.join(self.folder, name))
            os.rmdir(self.folder)


# A test process's fork servers: the first started with bare_env(), one more for each other
# environment (as far as imports read it) that commands run with, up to MAX_SERVERS.
MAX_SERVERS = 5
_servers: dict[int, list[_Server]] = {}
_lock = threading.Lock()


def _server(env: dict[str, str] | None = None) -> _Server | None:
    """The fork server whose imports agree with ``env`` (bare_env() when None), started if
    need be; None when there are MAX_SERVERS already and none agrees."""
    env = bare_env() if env is None else env
    with _lock:
        mine = _servers.setdefault(os.getpid(), [])
        mine[:] = [s for s in mine if s.process.poll() is None]
        for server in mine:
            if server.agrees(env):
                return server
        if len(mine) == MAX_SERVERS:
            return None
        if not mine:  # the common environment first, whatever this command's
            mine.append(_Server(bare_env()))
            if mine[0].agrees(env):
                return mine[0]
            if len(mine) == MAX_SERVERS:
                return None
        try:
            server = _Server(env)
        except RuntimeError:  # this environment fails the server's imports: exec shows how
            return None
        mine.append(server)
        return server if server.agrees(env) else None


def stop_extra_servers() -> None:
    """Stop this process's fork servers but the common environment's: a test that needs a
    server of its own gets one whatever environments the worker's earlier modules ran
    commands in (up to MAX_SERVERS are kept). Only between tests: a running command forked
    from a stopped server would lose its status."""
    with _lock:
        mine = _servers.get(os.getpid(), [])
        for server in mine[1:]:
            server.stop()
        del mine[1:]


_CHILD_PARAMETERS = list(inspect.signature(subprocess.Popen._execute_child).parameters)[1:]


class _Forked(subprocess.Popen[Any]):
    """A Popen whose child the fork server forks: every file object, ``communicate``,
    ``send_signal``, ``wait`` and ``returncode`` behave as ``subprocess.Popen``'s."""

    def __init__(
        self, args: list[str], *, server: _Server, code: str | None = None, **options: Any
    ) -> None:
        self._server = server
        self._code = code
        self._status_buffer = b""
        self._connection: socket.socket | None = None
        self._status_lock = threading.Lock()
        super().__init__(args, **options)

    def _execute_child(self, *values: Any) -> None:  # type: ignore[override]
        given = dict(zip(_CHILD_PARAMETERS, values, strict=True))
        fds = [
            given["p2cread"] if given["p2cread"] != -1 else 0,
            given["c2pwrite"] if given["c2pwrite"] != -1 else 1,
            given["errwrite"] if given["errwrite"] != -1 else 2,
        ]
        cwd = os.fsdecode(given["cwd"]) if given["cwd"] is not None else os.getcwd()
        env = {os.fsdecode(k): os.fsdecode(v) for k, v in (given["env"] or os.environ).items()}
        env = {**env, **self._server.added}  # as the interpreter's start-up adds them
        argv = list(given["args"]) if self._code is None else ["-c"]
        request = json.dumps({"argv": argv, "env": env, "cwd": cwd, "code": self._code}).encode()
        connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            connection.connect(self._server.path)
            socket.send_fds(connection, [len(request).to_bytes(8, "big")], fds)
            connection.sendall(request)
            self.pid = int(self._read_line(connection, None))
        except BaseException:
            connection.close()
            raise
        finally:
            self._close_pipe_fds(  # type: ignore[attr-defined]
                given["p2cread"],
                given["p2cwrite"],
                given["c2pread"],
                given["c2pwrite"],
                given["errread"],
                given["errwrite"],
            )
        self._connection = connection
        self._child_created = True

    def _read_line(self, connection: socket.socket, timeout: float | None) -> bytes:
        deadline = None if timeout is None else time.monotonic() + timeout
        while b"\n" not in self._status_buffer:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not select.select([connection], [], [], left)[0]:
                raise TimeoutError
            part = connection.recv(64)
            if not part:
                raise RuntimeError(f"the fork server lost command {self.args!r}")
            self._status_buffer += part
        line, _, self._status_buffer = self._status_buffer.partition(b"\n")
        return line

    def _status(self, timeout: float | None) -> int | None:
        if not self._status_lock.acquire(timeout=-1 if timeout is None else timeout):
            return None  # another thread is reading it
        try:
            if self.returncode is not None or self._connection is None:
                return self.returncode
            try:
                status = int(self._read_line(self._connection, timeout))
            except TimeoutError:
                return None
            self._connection.close()
            self._connection = None
            self._handle_exitstatus(status)  # type: ignore[attr-defined]
            return self.returncode
        finally:
            self._status_lock.release()

    def _internal_poll(self, _deadstate: int | None = None, **_: Any) -> int | None:
        connection = self._connection
        if self.returncode is None and connection is not None and connection.fileno() == -1:
            # Dropped while its child ran: Popen.__del__ put it on subprocess's list of
            # children to reap, and the collector closed its socket meanwhile. Its status can
            # never come: it is done with (left on the list, every later Popen of the process
            # failed in subprocess._cleanup's poll of it).
            self._connection = None
            self.returncode = _deadstate if _deadstate is not None else -1
            return self.returncode
        return self._status(0)

    def _wait(self, timeout: float | None) -> int:
        code = self._status(timeout)
        if code is None:
            raise subprocess.TimeoutExpired(self.args, timeout or 0)
        return code

    def send_signal(self, sig: int) -> None:
        self.poll()
        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)


# Every command but `demo` and `local`, each needing a table or a store.
EVERY_COMMAND_BUT_DEMO_AND_LOCAL = [
    ["ls"],
    ["show", "job", "sb-1"],
    ["checkpoints", "job", "sb-1"],
    ["envs"],
    ["rm", "job", "sb-1", "--yes"],
    ["export"],
    ["export", "-o", "backup.jsonl"],
    ["import", "-"],
    ["table", "create"],
    ["resources", "ls"],
    ["resources", "show", "0b7f6f4e-2f7a-4c55-9a59-3f1d7c2f8e10"],
    ["resources", "sweep"],
    ["resources", "sweep", "--dry-run"],
    ["resources", "import", "records"],
    ["resources", "export", "out"],
]

"""A fork server for the CLI tests: a Python process that has imported the CLI and the
libraries its commands use, and forks a fresh process for each command a test runs.

Each command is still a real process: its own pid, exit status, signal dispositions, file
descriptors (pipes, /dev/null or a terminal, as the test gives them), working directory and
environment, and the interpreter's own shutdown (``sys.exit``, atexit, threads, flushing),
exactly as the ``sandbox-ledger`` console script runs it. What it shares with the server is
the work of importing modules (0.2-0.5 s of CPU per command run with exec). So a test of
start-up itself (what a command imports, ``--help`` of the installed script) runs the script
with exec, and so does every command whose environment differs from the server's in a
variable read while the server imported (``processes.popen`` decides): such a variable's
effect is fixed at import.

Protocol, over a Unix socket: the client sends an 8-byte length with the command's three
standard file descriptors (``SCM_RIGHTS``), then a JSON request {argv, env, cwd}. The server
forks a waiter for each connection; the waiter forks the command, sends ``pid\\n``, waits
for it and sends its raw wait status ``status\\n``. The server exits when its stdin (a pipe
from the test process) closes.

Run as ``python tests/cli/forkserver.py SOCKET ENV_REPORT``.
"""

from __future__ import annotations

import gc
import io
import json
import os
import select
import socket
import sys
import threading
from typing import Any

# What the commands import, loaded once in the server.
PRELOAD = (
    "sandbox_ledger.cli",
    "sandbox_ledger.cli.app",
    "sandbox_ledger.sqlite",
    "sandbox_ledger.postgres",
    "sandbox_ledger.dynamodb",
    "sandbox_ledger.resources",
    "sandbox_ledger.local",
    "typer.rich_utils",
    "rich.console",
    "rich.table",
    "rich.progress",
    "jmespath",
    "boto3",
    "aioboto3",
    "aiosqlite",
    "psycopg",
    "psycopg_pool",
    "moto.moto_server.werkzeug_app",
    "werkzeug.serving",
)


def _preload() -> list[str]:
    """Import PRELOAD; return the environment variables read while importing."""
    read: set[str] = set()
    environ_type = type(os.environ)
    getitem, contains, iterate = (
        environ_type.__getitem__,
        environ_type.__contains__,
        environ_type.__iter__,
    )

    def spy_getitem(self: Any, key: str) -> Any:
        read.add(key)
        return getitem(self, key)

    def spy_contains(self: Any, key: object) -> bool:
        read.add(str(key))
        return contains(self, key)

    def spy_iterate(self: Any) -> Any:
        read.add("*")  # the whole environment was read
        return iterate(self)

    environ_type.__getitem__ = spy_getitem  # type: ignore[method-assign]
    environ_type.__contains__ = spy_contains  # type: ignore[method-assign]
    environ_type.__iter__ = spy_iterate  # type: ignore[method-assign]
    try:
        for name in PRELOAD:
            __import__(name)
    finally:
        environ_type.__getitem__ = getitem  # type: ignore[method-assign]
        environ_type.__contains__ = contains  # type: ignore[method-assign]
        environ_type.__iter__ = iterate  # type: ignore[method-assign]
    return sorted(read)


def _recv_exact(conn: socket.socket, size: int) -> bytes:
    data = bytearray()
    while len(data) < size:
        part = conn.recv(size - len(data))
        if not part:
            raise EOFError("the client went away")
        data += part
    return bytes(data)


def serve(path: str, report: str) -> dict[str, Any]:
    """Serve until stdin closes; returns only in a forked command process, with its request
    applied (standard descriptors, directory, environment), for the caller to run."""
    # The environment as the interpreter's start-up left it: with what it added (the C
    # locale's coercion sets LC_CTYPE, PEP 538), which an exec'd command gets too.
    started = dict(os.environ)
    with open(report, "w", encoding="utf-8") as out:
        json.dump({"read": _preload(), "env": dict(os.environ), "started": started}, out)
    if threading.active_count() != 1:
        raise RuntimeError(f"a fork server must not run threads: {threading.enumerate()}")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    # Bound under another name and renamed once listening: the client waits for ``path`` to
    # exist, and a connect between bind and listen is refused (seen under load).
    listener.bind(f"{path}.binding")
    listener.listen(64)
    os.rename(f"{path}.binding", path)
    sys.stdout.flush()
    sys.stderr.flush()
    gc.collect()
    gc.freeze()  # the preloaded heap stays shared with every fork
    while True:
        _reap()
        ready, _, _ = select.select([listener, sys.stdin], [], [], 1.0)
        if sys.stdin in ready:
            listener.close()
            sys.exit(0)
        if listener not in ready:
            continue
        conn, _ = listener.accept()
        if os.fork() == 0:
            listener.close()
            return _wait_for_command(conn)
        conn.close()


def _reap() -> None:
    """Wait for the waiters that ended (so their CPU counts in the test run's own)."""
    try:
        while os.waitpid(-1, os.WNOHANG)[0] > 0:
            pass
    except ChildProcessError:
        pass


def _wait_for_command(conn: socket.socket) -> dict[str, Any]:
    """In the waiter: receive a request, fork its command, report its pid and status."""
    header, fds, _, _ = socket.recv_fds(conn, 8, 3)
    request = json.loads(_recv_exact(conn, int.from_bytes(header, "big")))
    pid = os.fork()
    if pid == 0:
        conn.close()
        _apply(request, fds)
        return request
    for fd in fds:
        os.close(fd)
    code = 0
    try:
        conn.sendall(f"{pid}\n".encode())
        _, status = os.waitpid(pid, 0)
        conn.sendall(f"{status}\n".encode())
    except OSError:
        code = 1
    os._exit(code)


def _apply(request: dict[str, Any], fds: list[int]) -> None:
    """In the command: take the client's descriptors, directory and environment, and make
    sys.std* anew on them as the interpreter's start-up does."""
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
    for fd in set(fds):
        if fd > 2:
            os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    sys.argv = list(request["argv"])
    # The console script's folder first on sys.path, or the working directory for -c.
    sys.path[0] = "" if request.get("code") is not None else os.path.dirname(sys.argv[0])
    buffered = not os.environ.get("PYTHONUNBUFFERED")  # the server's own, agreed on
    for fd, name in enumerate(("stdin", "stdout", "stderr")):
        old = getattr(sys, name)
        raw: Any = io.FileIO(fd, "r" if fd == 0 else "w", closefd=False)
        raw.name = f"<{name}>"
        buffer = (
            io.BufferedReader(raw) if fd == 0 else (io.BufferedWriter(raw) if buffered else raw)
        )
        text = io.TextIOWrapper(
            buffer,
            encoding=old.encoding,
            errors=old.errors,
            newline="\n",
            line_buffering=buffered and (raw.isatty() or fd == 2),
            write_through=not buffered,
        )
        setattr(sys, name, text)
        setattr(sys, f"__{name}__", text)


def _run_code(source: str) -> None:
    """Run ``source`` as ``python -c`` does: in a fresh ``__main__`` module."""
    import builtins
    import types

    module = types.ModuleType("__main__")
    module.__dict__["__builtins__"] = builtins
    sys.modules["__main__"] = module
    exec(compile(source, "<string>", "exec"), module.__dict__)


if __name__ == "__main__":
    request = serve(sys.argv[1], sys.argv[2])
    # Only a forked command gets here: run it as the console script (or python -c) does.
    if request.get("code") is not None:
        _run_code(request["code"])
    else:
        from sandbox_ledger.cli import main

        sys.exit(main())

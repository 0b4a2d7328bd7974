"""The stores a run holds to its promises, and the faults a run deals them.

- :class:`LocalServer`: ``sandbox-ledger local --data FILE`` on the strict profile (its rates
  scaled down, so that throttling comes), restarted now and then: SIGTERM, then started
  again on the same port and FILE, as a developer restarts it.
- :class:`PostgresServer`: a throwaway PostgreSQL server, restarted now and then, half the
  time as after a crash of the server (an immediate shutdown: connections cut, no
  checkpoint; the restart recovers from the write-ahead log).
- :class:`SqliteDisk`: the SQLite file on a small filesystem of its own (a tmpfs), filled
  now and then by another file so that writes meet a full disk, then freed.

Each fault is recorded in the history by the supervisor (``"p": "s"``), with when it began
and ended: the checker reads what may be lost across one (the change feed of a restarted
local server is a new stream, which ``changes()`` reports as trimmed).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import random
    from pathlib import Path

    from sandbox_ledger.soak.history import History

__all__ = ["LocalServer", "PostgresServer", "SqliteDisk", "free_port"]

STRICT = "rate_scale=0.05"
"""The local server's strict profile in a run: DynamoDB's, its throughput a twentieth."""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class LocalServer:
    """``sandbox-ledger local --data FILE --table TABLE`` in a child process, on one port
    across restarts. :attr:`refused` adds up what the strict profile refused (throttles,
    conflicts), as each server says on exit."""

    def __init__(
        self, data: Path, table: str, *, strict: str = STRICT, options: list[str] | None = None
    ) -> None:
        self.data, self.table, self.port = data, table, free_port()
        self._strict, self._options = strict, options or []
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.refused: dict[str, int] = {}
        self.restarts = 0
        self._child: subprocess.Popen[str] | None = None
        self._said: list[str] = []

    def clear(self) -> None:
        """Remove what an earlier run left in FILE and beside it (its ledger, load image and
        stream), so that this run begins on an empty store: the checker holds every session
        stored to this run's history.

        Raises:
            RuntimeError: a server holds FILE's lock (another run on this ``--out``).
        """
        import fcntl

        lock = self.data.with_name(f".{self.data.name}.lock")
        if lock.exists():
            with lock.open("rb") as held:
                try:
                    fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    raise RuntimeError(
                        f"{self.data} is in use: another run uses this --out"
                    ) from None
                fcntl.flock(held, fcntl.LOCK_UN)
        for path in (
            self.data,
            self.data.with_name(f".{self.data.name}.image"),
            self.data.with_name(f".{self.data.name}.stream"),
        ):
            path.unlink(missing_ok=True)

    def start(self, timeout: float = 120.0) -> None:
        command = [sys.executable, "-m", "sandbox_ledger.cli", "local", "--data", str(self.data)]
        command += ["--port", str(self.port), "--table", self.table]
        command += ["--strict-option", self._strict, *self._options]
        child = subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
        )
        assert child.stdout is not None
        said: list[str] = []
        deadline = time.monotonic() + timeout
        while not any(line.startswith("serving DynamoDB") for line in said):
            line = child.stdout.readline()
            if not line or time.monotonic() > deadline:
                child.kill()
                child.wait()
                raise RuntimeError("sandbox-ledger local did not start: " + "".join(said[-40:]))
            said.append(line)
        # Keep reading what it says (its last line counts what it refused), so it never blocks.
        self._said = said
        threading.Thread(target=self._said.extend, args=(child.stdout,), daemon=True).start()
        self._child = child

    def stop(self) -> None:
        """SIGTERM, as a developer's Ctrl-C: the server saves FILE and exits 0."""
        child, self._child = self._child, None
        if child is None:
            return
        child.send_signal(signal.SIGTERM)
        try:
            child.wait(timeout=120)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
        time.sleep(0.2)  # the reading thread takes its last lines
        for line in self._said:
            if line.startswith("strict profile refused:"):
                for part in line.partition(":")[2].strip().rstrip(".").split(", "):
                    count, _, code = part.partition(" ")
                    self.refused[code] = self.refused.get(code, 0) + int(count)
        if child.returncode != 0:
            raise RuntimeError(
                f"sandbox-ledger local exited {child.returncode}: " + "".join(self._said[-5:])
            )

    def restart(self) -> None:
        self.stop()
        self.start()
        self.restarts += 1


class PostgresServer:
    """A throwaway PostgreSQL server, restarted in place."""

    def __init__(self) -> None:
        from sandbox_ledger.local.postgres import LocalPostgres

        self._server = LocalPostgres()
        self.dsn = ""
        self.restarts = self.crashes = 0

    def start(self) -> None:
        self.dsn = self._server.start()

    def restart(self, crash: bool) -> None:
        self._server.restart(crash=crash)
        self.restarts += 1
        self.crashes += crash

    def stop(self) -> None:
        self._server.stop()


class SqliteDisk:
    """A small filesystem of its own for the SQLite file (a tmpfs: mounting one needs root;
    without it the run says so and runs without this fault), and a file that fills it."""

    SIZE = "512m"

    def __init__(self, out: Path) -> None:
        self.mount = out / "disk"
        self.mount.mkdir(exist_ok=True)
        self.mounted = False
        self.fills = 0
        self._filler = self.mount / "filler"

    def start(self) -> str | None:
        """Mount the filesystem; None if done, else why it could not be.

        Raises:
            RuntimeError: something is mounted there already (another run on this ``--out``).
        """
        if os.path.ismount(self.mount):
            raise RuntimeError(f"{self.mount} is mounted already: another run uses this --out")
        if os.geteuid() != 0:
            return "not root: a tmpfs cannot be mounted"
        mounted = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={self.SIZE},mode=0700", "tmpfs", str(self.mount)],
            capture_output=True,
            text=True,
            check=False,
        )
        if mounted.returncode != 0:
            return f"mount failed: {mounted.stderr.strip()}"
        self.mounted = True
        return None

    def fill(self) -> None:
        """Fill what is free of the filesystem (a write that meets ENOSPC stops it)."""
        chunk = b"\0" * (1 << 20)
        with self._filler.open("ab") as filler, contextlib.suppress(OSError):
            while True:
                filler.write(chunk)
                filler.flush()
        self.fills += 1

    def free(self) -> None:
        self._filler.unlink(missing_ok=True)

    def stop(self) -> None:
        if self.mounted:
            subprocess.run(["umount", "-l", str(self.mount)], check=False)
            self.mounted = False


def fault_loop(
    history: History,
    rng: random.Random,
    every: float,
    deadline: float,
    fault: Any,
    stop: threading.Event,
    failed: list[str] | None = None,
) -> None:
    """Deal ``fault()`` about every ``every`` seconds (drawn from ``rng``) until ``deadline``
    (monotonic) or ``stop``; each recorded as a ``fault`` event with when it began and ended
    (wall clock, as every history line). A fault that fails (a server that would not stop or
    start again) ends the loop: why goes into ``failed`` and ``stop`` is set, for the run to
    end there rather than go on against a store that is not there."""
    while not stop.wait(rng.expovariate(1 / every)) and time.monotonic() < deadline:
        began = time.time()
        try:
            what = fault()
        except Exception as exc:  # any failure ends the run, said
            if failed is not None:
                failed.append(f"{type(exc).__name__}: {exc}")
            stop.set()
            return
        history.event("fault", what=what, began=began, ended=time.time())

"""``sandbox-ledger local``: the embedded DynamoDB (and, with ``--postgres``, a local
PostgreSQL) served until Ctrl-C or SIGTERM, for the development loop."""

from __future__ import annotations

import contextlib
import functools
import os
import shlex
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path  # noqa: TC003 - typer reads the annotation at run time
from typing import TYPE_CHECKING

import typer

from sandbox_ledger.cli.failures import handled
from sandbox_ledger.cli.interrupt import StopSignals
from sandbox_ledger.cli.local_saves import Saver
from sandbox_ledger.cli.output import CommandError, ExitCode, say
from sandbox_ledger.cli.root import app
from sandbox_ledger.local.streamfile import StreamFile

if TYPE_CHECKING:
    from collections.abc import Iterator

    from sandbox_ledger.cli.local_deployment import Deployment
    from sandbox_ledger.local import LocalPostgres
    from sandbox_ledger.local.strict import StrictProfile

REGION = "us-east-1"
CREDENTIALS = (("AWS_ACCESS_KEY_ID", "local"), ("AWS_SECRET_ACCESS_KEY", "local"))


@app.command("local")
@handled
def local(
    ctx: typer.Context,
    table: str = typer.Option(
        "sandbox-ledger",
        "--table",
        help="The table to create, with a complete descriptor (the resource sweep's bus and "
        "windows: the stack's defaults).",
    ),
    port: int = typer.Option(8000, "--port", min=0, max=65535, help="Port; 0: any free one."),
    host: str = typer.Option("127.0.0.1", "--host", help="Address to listen on."),
    data: Path | None = typer.Option(
        None,
        "--data",
        metavar="FILE",
        help="Keep the ledger and the resource records in FILE across restarts: loaded at "
        "start, saved atomically every --save-every seconds and on exit.",
    ),
    save_every: float = typer.Option(
        5.0, "--save-every", min=0.5, help="Seconds between saves of --data."
    ),
    stale_after: int = typer.Option(
        900,
        "--stale-after",
        min=1,
        help="Seconds without heartbeat before a live resource record expires (the table's "
        "descriptor; as `table create --stale-after`).",
    ),
    retain_failed: int = typer.Option(
        604_800,
        "--retain-failed",
        min=0,
        help="Seconds failed resource records are kept; 0: forever (as `table create`).",
    ),
    stream_records: int = typer.Option(
        1000,
        "--stream-records",
        min=0,
        help="Records the table's stream keeps before the oldest are trimmed (DynamoDB keeps "
        "24 hours of them; a consumer of a busy local server may want more).",
    ),
    postgres: bool = typer.Option(
        False, "--postgres", help="Also serve a local PostgreSQL (the postgres-server extra)."
    ),
    strict: bool = typer.Option(
        False,
        "--strict",
        help="Behave as DynamoDB where moto is lenient: its request limits, throughput per "
        "partition key and table, transaction conflicts, idempotency tokens, and global "
        "secondary indexes that take each write up to 0.1 s after the table.",
    ),
    deployment: bool = typer.Option(
        False,
        "--deployment",
        help="Also run the deployment's scheduled code (implies --strict): the sweeper every "
        "--sweep-every seconds and the TTL reporter on the table's stream, their events to "
        "--events.",
    ),
    events: str = typer.Option(
        "stdout", "--events", help="Where --deployment's events go: stdout, a FILE, or a URL."
    ),
    sweep_every: float = typer.Option(
        300.0, "--sweep-every", min=0.1, help="Seconds between sweeps (the stack: 5 minutes)."
    ),
    strict_options: list[str] | None = typer.Option(
        None,
        "--strict-option",
        metavar="NAME=VALUE",
        help="Set a field of the strict profile (implies --strict); repeat it, or join "
        "fields with commas: --strict-option rate_scale=0.01,index_delay=0:0,ttl_delay=none "
        "(docs/cli.md names every field).",
    ),
) -> None:
    """Serve a local DynamoDB until Ctrl-C or SIGTERM (exit 0), printing the `export` lines a
    shell needs to use it: eval "$(sandbox-ledger local)" in another shell, or paste them."""
    profile = _strict_profile(strict or deployment, strict_options)  # a bad field: nothing
    from sandbox_ledger.cli.local_deployment import Deployment

    services = Deployment(events, sweep_every) if deployment else None
    if data is not None:
        _check_data_file(data)
    _require_free(host, port)  # before the data file's lock: a refused start leaves nothing
    with _held(data), StopSignals() as stop:
        sweep = _Sweep(stale_after, retain_failed, stream_records)
        saver = _serve(
            stop, table, host, port, data, save_every, postgres, profile, sweep, services
        )
    name = signal.Signals(stop.received).name if stop.received else "stop"
    say(f"{name}: stopped{saver.summary()}")
    # Everything is saved and said: skip the interpreter's teardown of moto's state (seconds
    # for a large table, which Ctrl-C would wait for), as ``python -m sandbox_ledger.local``.
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # closed by the reader: nothing to say
            stream.flush()
    os._exit(0)


def _serve(
    stop: StopSignals,
    table: str,
    host: str,
    port: int,
    data: Path | None,
    save_every: float,
    postgres: bool,
    strict: StrictProfile | None = None,
    sweep: _Sweep | None = None,
    deployment: Deployment | None = None,
) -> Saver:
    from sandbox_ledger.deployment import SweepSettings
    from sandbox_ledger.local import LocalDynamoDB, bulk, inprocess

    sweep = sweep or _Sweep()
    server = LocalDynamoDB(
        host,
        port,
        strict=strict if strict is not None else False,
        stream_records=sweep.stream_records,
    )
    log = inprocess.WriteLog()
    server.observe(log.note)  # before it serves: every write a client sends is seen
    # A client that knows the port (a fixed --port, a restart) waits until the table is made
    # and FILE loaded: never a missing table, a session half loaded, a write the load undoes.
    server.hold()
    server.start()
    # The server's own reads and writes (create, load, saves) run in process: no HTTP, and
    # none of them is a client's write to save.
    ledger = inprocess.ledger(server, table, REGION)
    settings = SweepSettings(
        stale_after_seconds=sweep.stale_after, retain_failed_seconds=sweep.retain_failed
    )
    store = inprocess.resource_store(server, table, REGION)
    saver = Saver(data, ledger, store, log)
    saver.bulk = functools.partial(bulk.load_entries, server, ledger, image=saver.image)
    stream = None if data is None else StreamFile(data, server, ledger, say)
    pg = services = None
    try:
        # With --data, the table is FILE's: the identity FILE names (given to it when it
        # named none), so the cursors and change positions handed out before a restart are
        # still this store's, FILE moved is the same store and other data in its place not.
        ledger.create_table(sweep=settings, store_id=saver.read())
        if not saver.load(stop):
            return saver
        if stream is not None:
            stream.restore()  # the stream before the restart, none of the load's records
        pg = _start_postgres() if postgres else None
        server.release()
        _announce(server.endpoint_url, table, pg, data, strict)
        if deployment is not None:
            from sandbox_ledger.cli.local_deployment import start

            services = start(server.endpoint_url, table, data, deployment)
        # Saves start every save_every seconds, however long each takes (one waiting for the
        # end of the last one would stretch the time a write waits to be saved).
        due = time.monotonic() + save_every
        saver.keep_image(stop)
        while not stop.wait(max(0.0, due - time.monotonic())):
            saver.save()
            if stream is not None and saver.saved():
                stream.save()  # after FILE, saved: never a record of a change FILE lacks
            due = max(due + save_every, time.monotonic())
        if services is not None:  # each part between two steps; the bus delivers its events
            services.stop()
            services = None
        # No write is served after the last save reads what changed: every write the server
        # acknowledged is in FILE (the ones after are answered 503, which clients send again).
        server.refuse_clients()
        saver.save(final=True)
        if stream is not None and saver.saved():
            stream.save()
        refused = server.refusals()
        if refused:
            counts = ", ".join(f"{n} {code}" for code, n in sorted(refused.items()))
            say(f"strict profile refused: {counts}")
    finally:
        if services is not None:
            services.stop()
        if pg is not None:
            pg.stop()
        server.stop()
    return saver


@dataclass(frozen=True)
class _Sweep:
    """The table's resource sweep windows (its descriptor's) and its stream's bound."""

    stale_after: int = 900
    retain_failed: int = 604_800
    stream_records: int = 1000


def _strict_profile(strict: bool, options: list[str] | None) -> StrictProfile | None:
    """The profile ``--strict`` and ``--strict-option`` ask for (None: moto's leniency)."""
    from sandbox_ledger.errors import InvalidInputError
    from sandbox_ledger.local.strict import StrictProfile

    if not options:
        return StrictProfile() if strict else None
    try:
        return StrictProfile.parse(",".join(options))
    except InvalidInputError as exc:
        raise CommandError(f"--strict-option: {exc}", ExitCode.USAGE) from exc


def _require_free(host: str, port: int) -> None:
    """One line naming the port when it is taken (werkzeug would print two and exit 1)."""
    import socket

    if port == 0:
        return
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            raise CommandError(
                f"cannot listen on {host}:{port} ({exc.strerror or exc}); choose another "
                "port with --port N (0: any free port)",
                ExitCode.FAILED,
            ) from exc


@contextlib.contextmanager
def _held(data: Path | None) -> Iterator[None]:
    """One ``local`` per data file: two would each save their own tables over the other's
    every few seconds, and all but the last one's writes would be lost. The lock is
    ``.FILE.lock`` beside the data file (the file a link names, for a link), the one place
    every process that can write the data shares whatever its temporary directory. The
    server removes it when it stops, while still holding it; a server that took the lock of a
    file removed meanwhile (it opened the file before the removal) sees that the name no
    longer leads to it and takes the new one. A killed server's lock is free at once (the
    kernel drops it with the process), and its file is taken over by the next server."""
    if data is None:
        yield
        return
    import os
    import stat

    from sandbox_ledger.cli.transfer import _lock

    target = data.resolve()
    lock = target.with_name(f".{target.name}.lock")
    while True:
        try:
            descriptor = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        except OSError as exc:
            raise CommandError(
                f"--data: cannot open the lock file {lock} ({exc.strerror or exc})",
                ExitCode.FAILED,
            ) from exc
        try:
            if not stat.S_ISREG(os.fstat(descriptor).st_mode):
                raise CommandError(
                    f"--data: the lock file {lock} is not a regular file; remove it",
                    ExitCode.FAILED,
                )
            if not _lock(descriptor, wait=False):
                holder = os.pread(descriptor, 20, 0).decode(errors="replace").strip()
                by = f" (pid {holder})" if holder.isdigit() else ""
                raise CommandError(
                    f"--data: {data} is in use by another sandbox-ledger local{by}: stop it, "
                    "or give this one another file",
                    ExitCode.FAILED,
                )
        except BaseException:
            os.close(descriptor)
            raise
        if _names(lock, descriptor):
            break
        os.close(descriptor)  # the server that held it removed it as it stopped: again
    try:
        os.ftruncate(descriptor, 0)
        os.pwrite(descriptor, str(os.getpid()).encode(), 0)
        yield
    finally:
        with contextlib.suppress(OSError):
            if _names(lock, descriptor):
                os.unlink(lock)  # still held: no other server has it
        os.close(descriptor)


def _names(path: Path, descriptor: int) -> bool:
    """Whether ``path`` still leads to the open file ``descriptor``."""
    import os

    try:
        found = os.stat(path, follow_symlinks=False)
    except FileNotFoundError:
        return False
    held = os.fstat(descriptor)
    return (found.st_dev, found.st_ino) == (held.st_dev, held.st_ino)


def _check_data_file(data: Path) -> None:
    """The data file's place is usable before the server starts (a typo fails at once)."""
    if data.is_dir():
        raise CommandError(f"--data: {data} is a directory, not a file", ExitCode.USAGE)
    if data.exists() and not data.is_file():
        raise CommandError(f"--data: {data} is not a regular file", ExitCode.USAGE)
    if not data.parent.resolve().is_dir():
        raise CommandError(f"--data: the directory of {data} does not exist", ExitCode.USAGE)


def _start_postgres() -> LocalPostgres:
    from sandbox_ledger.local import LocalPostgres

    server = LocalPostgres()
    try:
        server.start()
    except RuntimeError as exc:
        raise CommandError(f"--postgres: {exc}", ExitCode.FAILED) from exc
    return server


def _announce(
    endpoint: str,
    table: str,
    pg: LocalPostgres | None,
    data: Path | None,
    strict: StrictProfile | None = None,
) -> None:
    """The shell lines on stdout (flushed at once: a reader may wait on them), the rest on
    stderr."""
    lines = [
        f"export AWS_ENDPOINT_URL={shlex.quote(endpoint)}",
        f"export AWS_REGION={REGION}",
        f"export AWS_DEFAULT_REGION={REGION}",
        *(f"export {k}={v}" for k, v in CREDENTIALS),
        "unset AWS_PROFILE AWS_SESSION_TOKEN SANDBOX_LEDGER_STORE",
        f"export SANDBOX_LEDGER_TABLE={shlex.quote(table)}",
    ]
    if pg is not None:
        lines.append(f"# PostgreSQL: sandbox-ledger --store {shlex.quote(pg.dsn)} ...")
    sys.stdout.write("\n".join(lines) + "\n")
    sys.stdout.flush()
    kept = f"kept in {data}" if data else "gone when it stops (--data FILE keeps it)"
    profile = ""
    if strict is not None:
        from sandbox_ledger.local.strict.parse import profile_text

        changed = profile_text(strict)
        profile = (
            " (strict: DynamoDB's limits, throughput, transaction conflicts, lagging indexes, "
            "TTL deletion and sharded streams, docs/fidelity.md"
            f"{f'; with {changed}' if changed else ''})"
        )
    say(
        f"serving DynamoDB{profile} at {endpoint} with table {table}; its data is {kept}. "
        "Ctrl-C or SIGTERM stops it."
    )

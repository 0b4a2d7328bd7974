"""``sandbox-ledger ui``: the operator's console on 127.0.0.1 over the command's store, or
over an export file (read into memory: nothing is written anywhere), until Ctrl-C."""

from __future__ import annotations

import secrets
import socket
from pathlib import Path  # noqa: TC003 - typer reads the annotation at run time
from typing import TYPE_CHECKING, Any

import typer

from sandbox_ledger.cli import connect
from sandbox_ledger.cli.failures import handled
from sandbox_ledger.cli.output import CommandError, ExitCode, say
from sandbox_ledger.cli.root import app

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

HOST = "127.0.0.1"


@app.command("ui")
@handled
def ui(
    ctx: typer.Context,
    file: Path | None = typer.Argument(
        None, help="An export file (JSON lines) to show instead of a store: read-only."
    ),
    port: int = typer.Option(0, "--port", min=0, max=65535, help="Port; 0: any free one."),
    open_browser: bool = typer.Option(False, "--open", help="Open the URL in a browser."),
    allow_writes: bool = typer.Option(
        False,
        "--allow-writes",
        help="Let the console delete a session and sweep resource records (each asked "
        "first, by a form of its own); without it the console only reads.",
    ),
) -> None:
    """Serve the operator's console on 127.0.0.1 (sessions, a session's timeline, resource
    records, environments, the change feed) over the store (--store, --table) or an export
    FILE, read-only unless --allow-writes; prints its URL (with a token: the console answers
    no one else) and serves until Ctrl-C."""
    if allow_writes and file is not None:
        raise CommandError(
            f"--allow-writes: {file} is an export file, shown read-only (import it into a "
            "store to change it)",
            ExitCode.USAGE,
        )
    reader, source = _reader(ctx, file, writes=allow_writes)
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind((HOST, port))
    except OSError as exc:
        raise CommandError(
            f"--port {port}: cannot listen on {HOST}:{port} ({exc.strerror})", ExitCode.USAGE
        ) from exc
    listener.listen(128)
    bound = listener.getsockname()[1]
    token = secrets.token_urlsafe(24)
    from sandbox_ledger.ui.app import build

    target = None if file is not None else connect.target(ctx)
    resources = None if target is None else _resources(target)
    writes = None
    if allow_writes and target is not None:
        from sandbox_ledger.ui.writes import Writes

        writes = Writes(secrets.token_urlsafe(24), None if resources is None else _sweeper(target))
    # An export file never changes; a memory:// store lives in this process alone (a second
    # one, opened to follow, would be another, empty): their pages are not live.
    lives = target is not None and not (target.store or "").startswith("memory:")
    live = _Follower(target) if lives else None
    application = build(
        reader,
        token=token,
        host=f"{HOST}:{bound}",
        source=source,
        follower=None if live is None else live.follow,
        feed=None if live is None else live.changes,
        on_stop=None if live is None else live.close,
        resources=resources,
        writes=writes,
    )
    url = f"http://{HOST}:{bound}/?token={token}"
    print(url, flush=True)
    mode = "writes allowed: deletes and sweeps, each asked first" if writes else "read-only"
    say(f"serving the console of {source} at {url} ({mode}); Ctrl-C stops it")
    if open_browser:
        import webbrowser

        webbrowser.open(url)
    by = _serve(application, listener)
    say(f"{by}: stopped" if by else "stopped")


def _reader(ctx: typer.Context, file: Path | None, *, writes: bool) -> tuple[Any, str]:
    """The ledger the pages read (synchronously; opened to write with ``writes``) and what
    they name it by."""
    if file is None:
        target = connect.target(ctx, writes="ui --allow-writes" if writes else None)
        return connect.ledger(target, writes=writes), target.store or f"table {target.table}"
    if not file.is_file():
        raise CommandError(f"{file}: no such file", ExitCode.NOT_FOUND)
    from sandbox_ledger.blocking import BlockingAdapter
    from sandbox_ledger.memory import MemoryAdapter
    from sandbox_ledger.transfer import import_lines, read_lines

    memory = BlockingAdapter(MemoryAdapter())
    ctx.call_on_close(memory.close)
    with file.open("rb") as lines:
        report = import_lines(memory, read_lines(lines))
    if report.failed:
        raise CommandError(
            f"{file}: {len(report.failed)} line(s) could not be read (sandbox-ledger import "
            f"{file} names each)",
            ExitCode.FAILED,
        )
    return memory, f"{file.name} (read-only)"


def _resources(target: Any) -> Any:
    """The resources page's view of a DynamoDB table (None for other stores: they hold no
    resource records)."""
    if target.store and not target.table:
        return None
    from sandbox_ledger.ui.resources import Resources

    store = connect.resource_store(target)

    def policy() -> Any:
        from sandbox_ledger.cli.setup_commands import SWEEP_FLAGS
        from sandbox_ledger.resources import resolve_sweep

        described = store.descriptor()
        return resolve_sweep(
            described, store.table_name, require_deployment=True, names=SWEEP_FLAGS
        ).policy

    return Resources(store, policy)


def _sweeper(target: Any) -> Any:
    """A real sweep of the table now, as `resources sweep` runs it (the deployment's bus
    and windows, a missing bus refused before any claim)."""

    def run() -> Any:
        from datetime import UTC, datetime

        from botocore.exceptions import BotoCoreError, ClientError

        from sandbox_ledger.cli.resource_commands import sweep_plan
        from sandbox_ledger.errors import LedgerError, translate_client_error
        from sandbox_ledger.resources import sweep
        from sandbox_ledger.ui.writes import Stopped

        store = connect.resource_store(target)
        try:
            plan, publisher = sweep_plan(target, store)
        except (ClientError, BotoCoreError) as exc:  # the bus's check: denied, throttled
            raise translate_client_error(exc, operation="event bus") from exc
        try:
            return sweep(store, publisher, now=datetime.now(UTC), policy=plan.policy)
        except LedgerError as exc:  # throttled part way: it gave its open claims back
            raise Stopped from exc

    return run


class _Follower:
    """The store's async ``follow()`` for the live pages, opened on the serving loop at the
    first live page (the pages' own reads go through the command's sync ledger)."""

    def __init__(self, target: Any) -> None:
        self.target = target
        self.store: Any = None
        self._opening: Any = None  # an asyncio.Lock, made on the serving loop

    async def follow(self, name: str, sandbox_id: str) -> AsyncIterator[Any]:
        store = await self._store()
        async for followed in store.follow(name, sandbox_id):
            yield followed

    async def changes(self) -> AsyncIterator[Any]:
        store = await self._store()
        async for change in store.changes():
            yield change

    async def _store(self) -> Any:
        """The store, opened once (pages opened at once wait for the same one)."""
        if self._opening is None:
            import asyncio  # here: `--help` loads no asyncio

            self._opening = asyncio.Lock()
        async with self._opening:
            if self.store is None:
                self.store = await self._open()
        return self.store

    async def close(self) -> None:
        """Close what :meth:`follow` opened (on the serving loop, as the server stops)."""
        store, self.store = self.store, None
        if store is not None:
            await store.close()

    async def _open(self) -> Any:
        target = self.target
        if target.store and not target.table:
            from sandbox_ledger.stores import open_store

            store = open_store(target.store, read_only=True)
        else:
            from sandbox_ledger.dynamodb import DynamoDBAdapter

            store = DynamoDBAdapter(
                target.table or "", session=target.aioboto3_session(), **target.kwargs()
            )
        await store.connect()
        return store


def _serve(application: Any, listener: socket.socket) -> str | None:
    """Serve until Ctrl-C or SIGTERM (uvicorn shuts down gracefully, then raises the signal
    again: the way this command is meant to end); the signal's name, or None."""
    import uvicorn

    from sandbox_ledger.cli.interrupt import Terminated

    # Open live pages (server-sent events) are not waited for past a second at Ctrl-C.
    config = uvicorn.Config(
        application, log_level="warning", lifespan="on", timeout_graceful_shutdown=1
    )
    server = uvicorn.Server(config)
    try:
        server.run(sockets=[listener])
    except KeyboardInterrupt:
        return "SIGINT"
    except Terminated:
        return "SIGTERM"
    finally:
        listener.close()
    return None

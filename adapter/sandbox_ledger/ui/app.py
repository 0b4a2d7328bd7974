"""The console's pages over a ledger read synchronously (a sync adapter, or any store behind
``BlockingAdapter``): the sessions, newest first, filtered and paged with the store's own
cursors; a session's timeline and entries. Every value from the ledger is text that the
templates escape (Jinja2's autoescape), the timeline's SVG escapes its own."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from sandbox_ledger.errors import InvalidInputError, LedgerError, ThrottledError
from sandbox_ledger.models import ListSandboxOptions, SandboxStatus
from sandbox_ledger.ui.guard import Guard
from sandbox_ledger.ui.text import visible
from sandbox_ledger.ui.timeline import draw

if TYPE_CHECKING:
    from starlette.requests import Request

    from sandbox_ledger.ui.resources import Resources
    from sandbox_ledger.ui.writes import Writes

HERE = Path(__file__).parent
PAGE = 50
"""Sessions per page."""
FOLD = 120
"""A payload's summary: its first characters."""


def _time(ms: int | None) -> str:
    if ms is None:
        return ""
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def started_before(text: str) -> int:
    """The sessions filter's time: ISO 8601 with a zone (``2026-12-01T12:00:00Z``), or Unix
    milliseconds; Unix milliseconds.

    Raises:
        ValueError: neither, or a time without a zone (naming the field).
    """
    if text.isdigit():
        return int(text)
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"started before: not a time: {text!r}") from None
    if when.tzinfo is None:
        raise ValueError(f"started before: {text!r} has no zone (add Z or +02:00)")
    return int(when.timestamp() * 1000)


def status_of(exc: Exception) -> int:
    """The status of a page that says why a request failed: 400 for a bad request (the
    field named), 503 for a throttled store (try again), 500 for the store's other errors."""
    if isinstance(exc, ThrottledError):
        return 503
    if isinstance(exc, InvalidInputError) or not isinstance(exc, LedgerError):
        return 400
    return 500


def session_link(name: str, sandbox_id: str) -> str:
    """The address of a session's page (names and ids in the query: any text is safe)."""
    return "/session?" + urlencode({"name": name, "id": sandbox_id})


def shown_entry(entry: Any) -> dict[str, Any]:
    """An entry as a row of the session page shows it."""
    payload = (
        json.dumps(entry.payload, indent=2, ensure_ascii=False) if entry.payload is not None else ""
    )
    return {
        "time": _time(entry.ts),
        "event": entry.event,
        "error": entry.error,
        "step": entry.step_index,
        "branch": "" if entry.branch is None else entry.branch,
        "payload": payload,
        "summary": payload.replace("\n", " ")[:FOLD],
    }


Follower = Callable[[str, str], AsyncIterator[Any]]
"""``follower(name, sandbox_id)``: the store's async ``follow()`` on the serving loop."""


def build(
    reader: Any,
    *,
    token: str,
    host: str,
    source: str,
    follower: Follower | None = None,
    feed: Callable[[], AsyncIterator[Any]] | None = None,
    on_stop: Callable[[], Awaitable[None]] | None = None,
    resources: Resources | None = None,
    writes: Writes | None = None,
) -> Any:
    """The ASGI application behind its :class:`Guard`: ``reader`` is the ledger (read
    synchronously, in the server's threads), ``host`` the ``address:port`` it is served at,
    ``source`` what the header names; with ``follower``, a running session's page grows as
    its entries are stored (server-sent events from ``follow()``, on the serving loop: a
    page that goes, or the server's stop, ends its follower at once); with ``feed`` (the
    store's async ``changes()``), the change feed page is live too; ``on_stop`` is awaited
    on the serving loop as the server stops (what the follower opened there closes); with
    ``resources`` (a DynamoDB table's), the resources page; with ``writes``
    (``--allow-writes``), the pages that delete a session and sweep (:mod:`.writes`)."""
    from jinja2 import Environment, FileSystemLoader, select_autoescape
    from markupsafe import Markup
    from starlette.applications import Starlette
    from starlette.concurrency import run_in_threadpool
    from starlette.responses import HTMLResponse, Response, StreamingResponse
    from starlette.routing import Mount, Route
    from starlette.staticfiles import StaticFiles

    templates = Environment(
        loader=FileSystemLoader(HERE / "templates"),
        autoescape=select_autoescape(default=True, default_for_string=True),
        finalize=visible,
    )

    def render(template: str, code: int = 200, /, **values: Any) -> HTMLResponse:
        html = templates.get_template(template).render(
            source=source,
            has_resources=resources is not None,
            writable=writes is not None,
            **values,
        )
        return HTMLResponse(html, status_code=code)

    async def sessions(request: Request) -> Response:
        query = request.query_params
        name = query.get("name") or None
        status = query.get("status") or None
        before = query.get("before") or None
        try:
            opts = ListSandboxOptions(
                limit=PAGE,
                status=SandboxStatus(status) if status else None,
                before=None if before is None else started_before(before),
                cursor=query.get("cursor") or None,
            )
            page = await run_in_threadpool(
                reader.list_sandbox_page if name else reader.list_all_sandbox_page,
                *([name, opts] if name else [opts]),
            )
        except (LedgerError, ValueError) as exc:  # a bad filter or cursor; a store's error
            return render(
                "sessions.html",
                status_of(exc),
                title="Sessions",
                rows=[],
                counts=[],
                statuses=[s.value for s in SandboxStatus],
                name=name,
                status=status,
                before=before,
                next_link=None,
                problem=str(exc),
            )
        rows = [
            {
                "name": d.name,
                "sandbox_id": d.sandbox_id,
                "link": session_link(d.name, d.sandbox_id),
                "status": d.status.value if hasattr(d.status, "value") else d.status,
                "started": _time(d.started_at),
                "execs": d.exec_count,
                "completed": _time(d.completed_at),
            }
            for d in page.sessions
        ]
        counts: dict[str, int] = {}
        for row in rows:
            counts[row["status"]] = counts.get(row["status"], 0) + 1
        next_link = None
        if page.cursor:
            given = (("name", name), ("status", status), ("before", before))
            keep = {k: v for k, v in given if v}
            next_link = "/?" + urlencode({**keep, "cursor": page.cursor})
        return render(
            "sessions.html",
            title="Sessions",
            rows=rows,
            counts=sorted(counts.items()),
            statuses=[s.value for s in SandboxStatus],
            name=name,
            status=status,
            before=before,
            next_link=next_link,
        )

    async def session(request: Request) -> Response:
        name = request.query_params.get("name", "")
        sandbox_id = request.query_params.get("id", "")
        try:
            entries = await run_in_threadpool(reader.read_all, name, sandbox_id)
            details = await run_in_threadpool(reader.get_sandbox_details, name, sandbox_id)
        except (LedgerError, ValueError) as exc:  # a bad filter or cursor; a store's error
            return render(
                "session.html",
                status_of(exc),
                title="Session",
                name=name,
                sandbox_id=sandbox_id,
                details=None,
                svg="",
                entries=[],
                problem=str(exc),
            )
        shown = [shown_entry(entry) for entry in entries]
        about = None
        if details is not None:
            about = {
                "status": details.status.value
                if hasattr(details.status, "value")
                else details.status,
                "started": _time(details.started_at),
                "execs": details.exec_count,
                "completed": _time(details.completed_at),
            }
        return render(
            "session.html",
            200 if entries or details else 404,
            title=f"{name}/{sandbox_id}",
            name=name,
            sandbox_id=sandbox_id,
            details=about,
            svg=Markup(draw(entries)),  # drawn by timeline.draw, which escapes every text
            entries=shown,
            # The session in a query, exactly (the page's text shows hidden characters as
            # escapes, which the live page's follow and the delete link must not send back).
            query=urlencode({"name": name, "id": sandbox_id}),
            live=follower is not None and details is not None and details.completed_at is None,
        )

    async def picture(request: Request) -> Response:
        name = request.query_params.get("name", "")
        sandbox_id = request.query_params.get("id", "")
        entries = await run_in_threadpool(reader.read_all, name, sandbox_id)
        return Response(draw(entries), media_type="image/svg+xml")

    async def events(request: Request) -> Response:
        """Server-sent events: ``entry`` for each entry ``follow()`` hands out (its index in
        follow order and its row, escaped), ``end`` once the session is closed or gone."""
        name = request.query_params.get("name", "")
        sandbox_id = request.query_params.get("id", "")
        row = templates.get_template("row.html")
        if follower is None:
            return Response("this console is not live\n", status_code=404)
        follow = follower

        async def stream() -> AsyncIterator[str]:
            index = 0
            async for followed in follow(name, sandbox_id):
                data = {"index": index, "row": row.render(e=shown_entry(followed.entry))}
                yield f"event: entry\ndata: {json.dumps(data)}\n\n"
                index += 1
            yield "event: end\ndata: {}\n\n"

        return StreamingResponse(stream(), media_type="text/event-stream")

    async def resource_records(request: Request) -> Response:
        from sandbox_ledger.resources.phases import FAILED_PHASES, LIVE_PHASES
        from sandbox_ledger.ui import resources as shown

        if resources is None:
            return Response("this store has no resource records\n", status_code=404)
        query = request.query_params
        phase = query.get("phase") or None
        provider = query.get("provider") or None
        values: dict[str, Any] = {
            "title": "Resources",
            "phases": [*LIVE_PHASES, *FAILED_PHASES],
            "phase": phase,
            "provider": provider,
        }
        try:
            found = await run_in_threadpool(
                shown.page,
                resources,
                phase=phase,
                provider=provider,
                cursor=query.get("cursor") or None,
                now=shown.now(),
            )
        except (LedgerError, ValueError) as exc:  # a bad filter or cursor; a store's error
            return render(
                "resources.html", status_of(exc), rows=[], shown=None, problem=str(exc), **values
            )
        next_link = None
        if found.cursor:
            keep = {k: v for k, v in (("phase", phase), ("provider", provider)) if v}
            next_link = "/resources?" + urlencode({**keep, "cursor": found.cursor})
        return render(
            "resources.html",
            rows=found.rows,
            shown=found,
            next_link=next_link,
            sweep_link="/resources/sweep" if writes is not None and writes.sweep else None,
            **values,
        )

    async def environments(request: Request) -> Response:
        records = await run_in_threadpool(reader.list_environments)
        shown = []
        for record in records:
            wire = record.wire()
            fields = {k: v for k, v in wire.items() if k not in ("name", "builtAt")}
            text = json.dumps(fields, indent=2, ensure_ascii=False) if fields else ""
            shown.append(
                {
                    "name": record.name,
                    "built": _time(record.built_at),
                    "fields": text,
                    "summary": text.replace("\n", " ")[:FOLD],
                }
            )
        return render("environments.html", title="Environments", environments=shown)

    async def changes(request: Request) -> Response:
        return render("changes.html", title="Changes", live=feed is not None)

    async def change_events(request: Request) -> Response:
        """Server-sent events: ``change`` for each change ``changes()`` hands out (repeats
        dropped by id), its row escaped; from the oldest the store keeps."""
        if feed is None:
            return Response("this console has no change feed\n", status_code=404)
        row = templates.get_template("change.html")
        changes_of = feed

        async def stream() -> AsyncIterator[str]:
            seen: set[str] = set()
            async for change in changes_of():
                if change.id in seen:
                    continue
                seen.add(change.id)
                session = change.name is not None and change.sandbox_id is not None
                shown = {
                    "at": _time(change.at),
                    "kind": change.kind.value,
                    "what": f"{change.name}/{change.sandbox_id}" if session else change.record_id,
                    "link": session_link(change.name, change.sandbox_id) if session else None,
                }
                data = {"row": row.render(c=shown)}
                yield f"event: change\ndata: {json.dumps(data)}\n\n"

        return StreamingResponse(stream(), media_type="text/event-stream")

    @contextlib.asynccontextmanager
    async def lifespan(_: Any) -> AsyncIterator[None]:
        try:
            yield
        finally:
            if on_stop is not None:
                await on_stop()

    async def no_icon(_: Request) -> Response:
        return Response(status_code=204)

    from sandbox_ledger.ui import writes as write_pages

    writing = (
        []
        if writes is None
        else write_pages.routes(render, reader, writes, resources, origin=f"http://{host}")
    )
    app = Starlette(
        lifespan=lifespan,
        routes=[
            *writing,
            Route("/resources", resource_records),
            Route("/favicon.ico", no_icon),
            Route("/", sessions),
            Route("/session", session),
            Route("/session/svg", picture),
            Route("/session/events", events),
            Route("/environments", environments),
            Route("/changes", changes),
            Route("/changes/events", change_events),
            Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
        ],
    )
    return Guard(app, token=token, host=host)

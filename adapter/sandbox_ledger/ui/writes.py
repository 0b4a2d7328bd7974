"""The console's writes, only with ``ui --allow-writes``: delete a session (the ``rm``
command's delete) and sweep the resource records now (the ``resources sweep`` command's
sweep). Each is a page that says what will happen and asks (a GET, which changes nothing),
then a POST from that page's form: it carries the server's CSRF token (a POST without it, or
from another origin, is refused with 403 and changes nothing)."""

from __future__ import annotations

import hmac
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, urlencode

if TYPE_CHECKING:
    from collections.abc import Callable

    from starlette.requests import Request
    from starlette.responses import Response

    from sandbox_ledger.resources import SweepResult
    from sandbox_ledger.ui.resources import Resources

MAX_FORM = 64 * 1024
"""The largest form body read (a name and an id: far less)."""


@dataclass
class Writes:
    """What ``--allow-writes`` lets the console do: ``csrf`` is the server's token for its
    forms; ``sweep`` runs a real sweep now (None where the store has no resource records;
    LedgerError or ValueError, saying why, when it cannot run: it then claimed nothing;
    :class:`Stopped` when it failed part way)."""

    csrf: str
    sweep: Callable[[], SweepResult] | None = None


class Refused(Exception):
    """A POST that must change nothing (its text says why; 403)."""


class Stopped(Exception):
    """A sweep that failed part way, for the error it chains (``__cause__``): what it
    expired before is reported and deleted; it left nothing claimed (its claims not yet
    reported given back); the next sweep does the rest."""


async def form(request: Request, writes: Writes, origin: str) -> dict[str, str]:
    """The POST's form fields, once its origin and CSRF token are checked.

    Raises:
        Refused: from another origin (its Origin, or without one its Referer), too large,
            not a form, a field given twice (this console's forms never repeat one), or
            without the right token.
    """
    sent = request.headers.get("origin")
    if sent is not None and sent != origin:
        raise Refused(f"a form from {sent} is not this console's")
    referer = request.headers.get("referer")
    if sent is None and referer is not None and not referer.startswith(origin + "/"):
        raise Refused("a form from another page is not this console's")
    if request.headers.get("content-type", "").split(";")[0].strip() != (
        "application/x-www-form-urlencoded"
    ):
        raise Refused("not a form of this console")
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_FORM:
            raise Refused("form too large")
    try:
        pairs = parse_qsl(body.decode("utf-8"), keep_blank_values=True, strict_parsing=True)
    except (UnicodeDecodeError, ValueError):
        raise Refused("not a form of this console") from None
    fields = dict(pairs)
    if len(fields) != len(pairs):
        raise Refused("a field given twice: not a form of this console")
    if not hmac.compare_digest(fields.get("csrf", "").encode(), writes.csrf.encode()):
        raise Refused("no valid CSRF token: use the console's own form")
    return fields


def routes(
    render: Callable[..., Response],
    reader: Any,
    writes: Writes,
    resources: Resources | None,
    *,
    origin: str,
) -> list[Any]:
    """The write pages' routes (see the module)."""
    from starlette.concurrency import run_in_threadpool
    from starlette.responses import PlainTextResponse
    from starlette.routing import Route

    from sandbox_ledger.errors import LedgerError, ThrottledError
    from sandbox_ledger.ui.app import session_link, status_of
    from sandbox_ledger.ui.resources import forecast

    async def ask_delete(request: Request) -> Response:
        name = request.query_params.get("name", "")
        sandbox_id = request.query_params.get("id", "")
        try:
            entries = await run_in_threadpool(reader.read_all, name, sandbox_id)
            details = await run_in_threadpool(reader.get_sandbox_details, name, sandbox_id)
        except (LedgerError, ValueError) as exc:
            return render(
                "done.html", status_of(exc), title="Delete", lines=[str(exc)], failed=True, back="/"
            )
        if not entries and details is None:
            lines = [f"no session {name}/{sandbox_id}: nothing to delete"]
            return render("done.html", 404, title="Delete", lines=lines, failed=True, back="/")
        return render(
            "confirm.html",
            title="Delete a session",
            question=f"Delete {name}/{sandbox_id} and all its {len(entries)} entries? "
            "This cannot be undone.",
            items=[],
            action="/session/delete",
            csrf=writes.csrf,
            # Percent-encoded: the hidden field carries any name exactly, in ASCII (a page
            # shows hidden characters as escapes, which a form must not send back).
            # The count asked about: a session that grew since is asked about again.
            fields=[
                ("session", urlencode({"name": name, "id": sandbox_id})),
                ("entries", str(len(entries))),
            ],
            button="Delete",
            back=session_link(name, sandbox_id),
        )

    async def delete(request: Request) -> Response:
        try:
            fields = await form(request, writes, origin)
        except Refused as exc:
            return PlainTextResponse(f"refused: {exc}\n", status_code=403)
        session = dict(parse_qsl(fields.get("session", ""), keep_blank_values=True))
        name, sandbox_id = session.get("name", ""), session.get("id", "")
        asked = fields.get("entries")
        try:
            found = await run_in_threadpool(delete_as_asked, name, sandbox_id, asked)
        except (LedgerError, ValueError) as exc:
            lines = [f"nothing deleted: {exc}"]
            return render(
                "done.html", status_of(exc), title="Delete", lines=lines, failed=True, back="/"
            )
        if found is None:
            lines = [f"no session {name}/{sandbox_id}: nothing to delete"]
            return render("done.html", 404, title="Delete", lines=lines, failed=True, back="/")
        if asked is not None and str(found) != asked:
            lines = [
                f"nothing deleted: {name}/{sandbox_id} has {found} entries now, not the "
                f"{asked} asked about: ask again"
            ]
            back = "/session/delete?" + urlencode({"name": name, "id": sandbox_id})
            return render("done.html", 409, title="Delete", lines=lines, failed=True, back=back)
        lines = [f"deleted {name}/{sandbox_id} and all its entries"]
        return render("done.html", title="Deleted", lines=lines, failed=False, back="/")

    deleting = threading.Lock()

    def delete_as_asked(name: str, sandbox_id: str, asked: str | None) -> int | None:
        """Delete the session if it is there with the ``asked`` number of entries (None:
        any); how many entries it had (None: no such session). One delete at a time: of
        two tabs confirming the same delete, the second finds nothing to delete."""
        with deleting:
            entries = reader.read_all(name, sandbox_id)
            if not entries and reader.get_sandbox_details(name, sandbox_id) is None:
                return None
            if asked is None or str(len(entries)) == asked:
                reader.delete_sandbox(name, sandbox_id)
            return len(entries)

    async def ask_sweep(request: Request) -> Response:
        if resources is None or writes.sweep is None:
            return PlainTextResponse("this store has no resource records\n", status_code=404)
        from sandbox_ledger.ui.resources import now

        try:
            policy = await run_in_threadpool(resources.policy)
            result = await run_in_threadpool(forecast, resources.store, policy, now())
        except (LedgerError, ValueError) as exc:
            lines = [f"no sweep: {exc}"]
            return render(
                "done.html",
                status_of(exc),
                title="Sweep",
                lines=lines,
                failed=True,
                back="/resources",
            )
        return render(
            "confirm.html",
            title="Sweep now",
            question=f"A sweep now expires {len(result.expired)} record(s): it publishes "
            "ResourceExpired for each on the deployment's bus, then deletes them.",
            items=[f"{i}: {result.reasons[i]}" for i in result.expired],
            action="/resources/sweep",
            csrf=writes.csrf,
            fields=[],
            button="Sweep",
            back="/resources",
        )

    async def sweep(request: Request) -> Response:
        if writes.sweep is None:
            return PlainTextResponse("this store has no resource records\n", status_code=404)
        try:
            await form(request, writes, origin)
        except Refused as exc:
            return PlainTextResponse(f"refused: {exc}\n", status_code=403)
        try:
            result = await run_in_threadpool(writes.sweep)
        except (LedgerError, ValueError) as exc:  # no bus, no settings: nothing claimed
            lines = [f"the sweep did not run: {exc}"]
            code = 503 if isinstance(exc, ThrottledError) else 500
            return render("done.html", code, title="Sweep", lines=lines, failed=True, back="/")
        except Stopped as exc:
            cause = exc.__cause__
            lines = [
                f"the sweep stopped part way: {cause}; what it expired before is reported and "
                "deleted, nothing is left claimed, the next sweep does the rest"
            ]
            code = 503 if isinstance(cause, ThrottledError) else 500
            return render(
                "done.html", code, title="Sweep", lines=lines, failed=True, back="/resources"
            )
        lines = [f"expired {i}: {result.reasons[i]}" for i in result.expired]
        lines.append(
            f"{len(result.expired)} expired, {len(result.skipped)} skipped, "
            f"{len(result.failed)} failed, {len(result.lost)} claim(s) lost"
            + ("" if result.complete else f"; {result.remaining} left for the next sweep")
        )
        unpublished = "its event not published: released, a later sweep tries again"
        lines += [f"failed {i}: {result.unreadable.get(i, unpublished)}" for i in result.failed]
        return render(
            "done.html", title="Swept", lines=lines, failed=bool(result.failed), back="/resources"
        )

    return [
        Route("/session/delete", ask_delete, methods=["GET"]),
        Route("/session/delete", delete, methods=["POST"]),
        Route("/resources/sweep", ask_sweep, methods=["GET"]),
        Route("/resources/sweep", sweep, methods=["POST"]),
    ]

"""The console keeps to the one user who started it.

- **The Host header** must be the address the server is bound to (``127.0.0.1:PORT``): a page
  on another site that points a name of its own at 127.0.0.1 (DNS rebinding) is refused.
- **A token** in the printed URL is exchanged, once per browser, for an ``HttpOnly``,
  ``SameSite=Strict`` cookie holding a secret of its own (the token then leaves the address
  bar: a redirect to the same page without it); a request without the cookie is refused.
- **Headers** on every answer: a Content-Security-Policy that allows no inline script and
  nothing from elsewhere, no referrer to other sites (``same-origin``: a URL with the token
  is never sent on; the console's own forms keep their ``Origin``, which ``no-referrer``
  would turn into ``null``), no framing,
  no sniffing, no caching.
"""

from __future__ import annotations

import hmac
import secrets
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, urlencode

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, MutableMapping

    Scope = MutableMapping[str, Any]
    Message = MutableMapping[str, Any]
    Receive = Callable[[], Awaitable[Message]]
    Send = Callable[[Message], Awaitable[None]]
    ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

COOKIE = "sandbox_ledger_ui"
CSP = (
    "default-src 'none'; style-src 'self'; img-src 'self' data:; script-src 'self'; "
    "connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
HEADERS = [
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),
    (b"x-frame-options", b"DENY"),
    (b"cache-control", b"no-store"),
]


class Guard:
    """ASGI middleware in front of ``app``: see the module's docstring."""

    def __init__(self, app: ASGIApp, *, token: str, host: str) -> None:
        self.app = app
        self.token = token
        self.host = host.encode()
        self.secret = secrets.token_urlsafe(32)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        if headers.get(b"host") != self.host:
            await _answer(send, 421, b"this console answers only at its own address\n")
            return
        query = parse_qsl(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True)
        given = [value for key, value in query if key == "token"]
        if given:
            if not hmac.compare_digest(given[-1].encode(), self.token.encode()):
                await _answer(send, 401, b"wrong token: open the URL the command printed\n")
                return
            rest = urlencode([(k, v) for k, v in query if k != "token"])
            location = scope.get("path", "/") + (f"?{rest}" if rest else "")
            cookie = f"{COOKIE}={self.secret}; HttpOnly; SameSite=Strict; Path=/"
            await _answer(
                send,
                303,
                b"",
                [(b"location", location.encode()), (b"set-cookie", cookie.encode())],
            )
            return
        if not hmac.compare_digest(_cookie(headers.get(b"cookie", b"")), self.secret.encode()):
            await _answer(send, 401, b"open the URL the command printed (it holds a token)\n")
            return

        async def secured(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *HEADERS]
            await send(message)

        await self.app(scope, receive, secured)


def _cookie(header: bytes) -> bytes:
    for part in header.split(b";"):
        key, _, value = part.strip().partition(b"=")
        if key == COOKIE.encode():
            return value
    return b""


async def _answer(
    send: Send, status: int, body: bytes, extra: list[tuple[bytes, bytes]] | None = None
) -> None:
    headers = [
        (b"content-type", b"text/plain; charset=utf-8"),
        (b"content-length", str(len(body)).encode()),
        *HEADERS,
        *(extra or []),
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})

"""The console at fleet size (issue 48, item 5): its pages' server time beside the raw reads
they make, and what an idle live page costs the store beside a bare idle ``follow()``.

The store is the embedded DynamoDB as a user runs it: ``sandbox-ledger local --data FILE``
in a child process, FILE an export file written here (loading it is the fastest honest
fill: the server builds every session's items from its lines, as an import would write
them). FILE holds ``--sessions`` sessions (50 names; a third only created, a third with an
exec and closed, a third with an exec and still running) and one session of ``--entries``
entries, still running: execs over three branches (some failed, with their error),
checkpoints every tenth step. Once the server has written its image of FILE (its CPU after
the load), this process builds the console as ``sandbox-ledger ui`` does (``build()`` over a
``SyncDynamoDBAdapter`` on that server, the live pages following with the async
``DynamoDBAdapter``), signs in with the token, and calls the ASGI application in process
(no socket, no HTTP client): a page's **server time** is from the call to its last byte.

1. **Pages**: the sessions page (``/``), filtered by status (``/?status=running``), the
   second page through the first's cursor, the big session's page (``/session``) and its
   timeline (``/session/svg``); each beside its **raw reads**, the store calls the page
   makes timed alone (``list_all_sandbox_page`` with a limit of 50; ``read_all`` then
   ``get_sandbox_details``; ``read_all``), with the server process's CPU for them; and its
   **own work**: the same page (checked byte for byte) from a console over the same
   answers replayed without a request (:class:`Replayed`): templating, the SVG. One
   warm-up of each, then ``--runs`` of each, page and raw alternating (which goes first
   alternates too), then ``--runs`` over the replayed answers; median and p95 (nearest
   rank), against the target of 300 ms.
2. **Idle**: a bare ``follow()`` of the big session, then its live page's event stream
   (``/session/events``, as an open page holds it), each on the same async store: the
   catch-up (every stored entry handed out: the stream renders each as a row), then 2 s
   for the poll's backoff to settle, then ``--idle-seconds`` with nothing appended: the
   requests to the server (botocore's ``before-call``, ``RequestCounter``) per minute, this
   process's CPU and the server's.

    .venv/bin/python benchmarks/ui_fleet.py        # 100,000 sessions, a session of 5,000
    .venv/bin/python benchmarks/ui_fleet.py --sessions 2000 --entries 500 --runs 3 --idle-seconds 2
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

sys.path.insert(0, str(Path(__file__).resolve().parent))

from local_data import Server, _cpu_seconds
from sandbox_ledger.dynamodb import DynamoDBAdapter, SyncDynamoDBAdapter
from sandbox_ledger.dynamodb.instrument import RequestCounter
from sandbox_ledger.models import ListSandboxOptions, SandboxStatus
from sandbox_ledger.ui.app import PAGE, build, session_link

TARGET_MS = 300
HOST = "127.0.0.1:8123"
"""The address the console believes it serves at (the Host header every call sends)."""
BASE = 1_780_000_000_000
BIG = ("fleet-big", "big-00000001")
"""The big session's name and id."""


# -- the data --------------------------------------------------------------------------------


def _line(ts: int, name: str, sid: str, step: int, event: str, **more: Any) -> str:
    entry = {"ts": ts, "name": name, "sandboxId": sid, "stepIndex": step, "event": event}
    return json.dumps({**entry, **more}, separators=(",", ":")) + "\n"


def big_session(entries: int, start: int) -> list[str]:
    """``entries`` lines of one running session: execs over branches 0-2, three at a time
    (each started before the previous ones end), one in 17 failed, a checkpoint after
    every tenth step; the last exec may be left open."""
    name, sid = BIG
    lines = [_line(start, name, sid, -1, "sandbox.created")]
    ts, step = start, 0
    while len(lines) < entries:
        batch = range(step, step + 3)
        for s in batch:
            ts += 7
            lines.append(
                _line(ts, name, sid, s, "exec.started", branch=s % 3, payload={"cmd": f"step {s}"})
            )
        for s in batch:
            ts += 40 + s % 11 * 9
            failed = s % 17 == 5
            done = {"exitCode": 1 if failed else 0, "stdout": f"step {s} " + "ok " * 20}
            if failed:
                error = f"exit 1: step {s} failed"
                lines.append(
                    _line(ts, name, sid, s, "exec.failed", branch=s % 3, payload=done, error=error)
                )
            else:
                lines.append(_line(ts, name, sid, s, "exec.complete", branch=s % 3, payload=done))
            if s % 10 == 9:
                snapshot = {"snapshotId": f"snap-{s}", "name": f"after-{s}"}
                event = "sandbox.checkpoint_created"
                lines.append(_line(ts + 1, name, sid, -1, event, payload=snapshot))
        step += 3
    return lines[:entries]


def write_fleet(path: Path, sessions: int, entries: int) -> int:
    """FILE as an export writes it ((name, sandboxId) order): the big session, then
    ``sessions`` sessions of 50 names (session i started at BASE + i s); the lines written."""
    written = 0
    with path.open("w") as out:
        for line in big_session(entries, BASE + sessions * 1000):
            out.write(line)
            written += 1
        for n in range(50):
            for i in range(n, sessions, 50):
                name, sid, t = f"job-{n:02d}", f"sb-{i:08d}", BASE + i * 1000
                lines = [_line(t, name, sid, -1, "sandbox.created")]
                if i % 3:
                    lines.append(_line(t + 10, name, sid, 0, "exec.started"))
                    lines.append(_line(t + 20, name, sid, 0, "exec.complete", payload={"x": 0}))
                if i % 3 == 1:
                    lines.append(_line(t + 30, name, sid, -1, "sandbox.closed"))
                out.writelines(lines)
                written += len(lines)
    return written


# -- the console, called in process ----------------------------------------------------------


class Answer:
    """One response: status, headers, body, and the server's seconds (call to last byte)."""

    def __init__(self) -> None:
        self.status = 0
        self.headers: dict[bytes, bytes] = {}
        self.body = bytearray()
        self.seconds = 0.0


async def call(
    app: Any,
    target: str,
    cookie: bytes = b"",
    *,
    on_body: Callable[[bytes], None] | None = None,
    gone: asyncio.Event | None = None,
) -> Answer:
    """GET ``target`` from the ASGI ``app``, as a browser at HOST would; the client stays
    until ``gone`` is set (a stream's page closed)."""
    path, _, query = target.partition("?")
    headers = [(b"host", HOST.encode())] + ([(b"cookie", cookie)] if cookie else [])
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": query.encode(),
        "headers": headers,
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8123),
    }
    answer = Answer()
    asked = False

    async def receive() -> dict[str, Any]:
        nonlocal asked
        if not asked:
            asked = True
            return {"type": "http.request", "body": b"", "more_body": False}
        await (gone or asyncio.Event()).wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            answer.status = message["status"]
            answer.headers = dict(message.get("headers", []))
        elif message["type"] == "http.response.body":
            chunk = message.get("body", b"")
            answer.body.extend(chunk)
            if on_body is not None:
                on_body(chunk)
            if not message.get("more_body", False):
                answer.seconds = time.perf_counter() - started

    started = time.perf_counter()
    await app(scope, receive, send)
    return answer


async def sign_in(app: Any, token: str) -> bytes:
    """The cookie the token is exchanged for."""
    answer = await call(app, f"/?token={token}")
    assert answer.status == 303, answer.status
    return answer.headers[b"set-cookie"].split(b";")[0]


def ms(samples: list[float]) -> tuple[float, float]:
    """Median and p95 (nearest rank) in ms."""
    ordered = sorted(samples)
    p95 = ordered[max(0, -(-95 * len(ordered) // 100) - 1)]
    return statistics.median(ordered) * 1000, p95 * 1000


class Replayed:
    """The reader's answers handed out again without a request (each asked once of the
    store): a page over it costs only its own work (templating, the SVG)."""

    def __init__(self, reader: Any) -> None:
        self.reader = reader
        self.answers: dict[tuple[str, str], Any] = {}

    def _answer(self, method: str, *args: Any) -> Any:
        key = (method, repr(args))
        if key not in self.answers:
            self.answers[key] = getattr(self.reader, method)(*args)
        return self.answers[key]

    def list_all_sandbox_page(self, opts: ListSandboxOptions) -> Any:
        return self._answer("list_all_sandbox_page", opts)

    def list_sandbox_page(self, name: str, opts: ListSandboxOptions) -> Any:
        return self._answer("list_sandbox_page", name, opts)

    def read_all(self, name: str, sandbox_id: str) -> Any:
        return self._answer("read_all", name, sandbox_id)

    def get_sandbox_details(self, name: str, sandbox_id: str) -> Any:
        return self._answer("get_sandbox_details", name, sandbox_id)


async def pages(
    consoles: tuple[tuple[Any, bytes], tuple[Any, bytes]], reader: Any, runs: int, server_pid: int
) -> list[dict[str, Any]]:
    """Each page beside its raw reads, then over the same answers replayed (see the
    module's docstring); ``consoles``: the console and its cookie, over the store and over
    :class:`Replayed` answers."""
    (app, cookie), (replay, replay_cookie) = consoles
    first = reader.list_all_sandbox_page(ListSandboxOptions(limit=PAGE))
    assert first.cursor, "a fleet of one page"
    name, sid = BIG
    cases: list[tuple[str, str, Callable[[], Any], Callable[[bytes], bool]]] = [
        (
            "sessions, first page",
            "/",
            lambda: reader.list_all_sandbox_page(ListSandboxOptions(limit=PAGE)),
            lambda body: body.count(b'<td class="id">') == PAGE,
        ),
        (
            "sessions, status=running",
            "/?status=running",
            lambda: reader.list_all_sandbox_page(
                ListSandboxOptions(limit=PAGE, status=SandboxStatus.Running)
            ),
            lambda body: (
                body.count(b'<td class="id">') == PAGE and b"<td>completed</td>" not in body
            ),
        ),
        (
            "sessions, second page (cursor)",
            "/?" + urlencode({"cursor": first.cursor}),
            lambda: reader.list_all_sandbox_page(
                ListSandboxOptions(limit=PAGE, cursor=first.cursor)
            ),
            lambda body: body.count(b'<td class="id">') == PAGE,
        ),
        (
            f"session page ({name})",
            session_link(name, sid),
            lambda: (reader.read_all(name, sid), reader.get_sandbox_details(name, sid)),
            lambda body: b'id="live"' in body and b"<svg" in body,
        ),
        (
            "session timeline (/session/svg)",
            "/session/svg?" + urlencode({"name": name, "id": sid}),
            lambda: reader.read_all(name, sid),
            lambda body: body.startswith(b"<svg") and b'class="exec failed"' in body,
        ),
    ]
    rows = []
    for label, target, raw, looks_right in cases:
        answer = await call(app, target, cookie)  # warm-up: templates compiled, connections
        assert answer.status == 200 and looks_right(bytes(answer.body)), (label, answer.status)
        raw()
        page_s: list[float] = []
        raw_s: list[float] = []
        server_s: list[float] = []
        for run in range(runs):
            for which in ("page", "raw") if run % 2 == 0 else ("raw", "page"):
                if which == "page":
                    answer = await call(app, target, cookie)
                    assert answer.status == 200, (label, answer.status)
                    page_s.append(answer.seconds)
                else:
                    started, server = time.perf_counter(), _cpu_seconds(server_pid)
                    raw()
                    raw_s.append(time.perf_counter() - started)
                    server_s.append(_cpu_seconds(server_pid) - server)
        replayed = await call(replay, target, replay_cookie)  # asks the store once
        assert replayed.body == answer.body, label  # the same page
        own_s = []
        for _ in range(runs):
            own_s.append((await call(replay, target, replay_cookie)).seconds)
        row = {
            "page": label,
            "bytes": len(answer.body),
            "page_ms": ms(page_s),
            "raw_ms": ms(raw_s),
            "server_cpu_ms": ms(server_s)[0],
            "own_ms": ms(own_s),
        }
        rows.append(row)
        print(
            f"  {label}: page {row['page_ms'][0]:.0f} ms, raw {row['raw_ms'][0]:.0f} ms, "
            f"own {row['own_ms'][0]:.0f} ms (medians)",
            flush=True,
        )
    return rows


async def idle(
    app: Any, cookie: bytes, store: Any, counter: RequestCounter, server_pid: int, seconds: float
) -> list[dict[str, Any]]:
    """A bare ``follow()`` of the big session, then its live page's event stream: the
    catch-up, then ``seconds`` idle (see the module's docstring)."""
    name, sid = BIG
    stored = len(await store.read_all(name, sid))
    rows = []

    async def watch(label: str, handed_out: Callable[[], int], stop: Callable[[], Any]) -> None:
        started, before = time.perf_counter(), counter.total
        while handed_out() < stored:
            await asyncio.sleep(0.01)
        caught_up = time.perf_counter() - started
        catch_up_requests = counter.total - before
        await asyncio.sleep(2)  # the poll's backoff settles
        before, cpu = counter.total, time.process_time()
        server_cpu, wall = _cpu_seconds(server_pid), time.perf_counter()
        await asyncio.sleep(seconds)
        wall = time.perf_counter() - wall
        rows.append(
            {
                "what": label,
                "catch_up_s": caught_up,
                "catch_up_requests": catch_up_requests,
                "requests_per_minute": (counter.total - before) * 60 / wall,
                "client_cpu": (time.process_time() - cpu) / wall,
                "server_cpu": (_cpu_seconds(server_pid) - server_cpu) / wall,
            }
        )
        await stop()

    followed = 0

    async def bare() -> None:
        nonlocal followed
        async for _ in store.follow(name, sid):
            followed += 1

    task = asyncio.create_task(bare())

    async def end_bare() -> None:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    await watch("bare follow()", lambda: followed, end_bare)

    page = await call(app, session_link(name, sid), cookie)
    assert page.status == 200 and b'id="live"' in page.body
    events = 0

    def count(chunk: bytes) -> None:
        nonlocal events
        events += chunk.count(b"event: entry\n")

    gone = asyncio.Event()
    stream = asyncio.create_task(
        call(
            app,
            "/session/events?" + urlencode({"name": name, "id": sid}),
            cookie,
            on_body=count,
            gone=gone,
        )
    )

    async def close_page() -> None:
        gone.set()
        await asyncio.wait_for(stream, 30)

    await watch("live page (/session/events)", lambda: events, close_page)
    return rows


# -- the run ---------------------------------------------------------------------------------


def report(
    args: argparse.Namespace,
    fill: dict[str, Any],
    rows: list[dict[str, Any]],
    idles: list[dict[str, Any]],
) -> None:
    print(
        f"\n{args.sessions:,} sessions and a session of {args.entries:,} entries "
        f"({fill['lines']:,} lines), the embedded DynamoDB (`local --data`: serving after "
        f"{fill['serves_after_s']:.1f} s, {fill['load_cpu_s']:.1f} s of CPU); {args.runs} runs "
        f"each, ms; load average {os.getloadavg()[0]:.1f}\n"
    )
    print(
        "| page | page p50 | page p95 | raw reads p50 | raw p95 | the server's CPU per raw "
        "read (p50) | own p50 | own p95 | bytes |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for row in rows:
        (pp50, pp95), (rp50, rp95), (op50, op95) = row["page_ms"], row["raw_ms"], row["own_ms"]
        print(
            f"| {row['page']} | {pp50:.0f} | {pp95:.0f} | {rp50:.0f} | {rp95:.0f} "
            f"| {row['server_cpu_ms']:.0f} | {op50:.0f} | {op95:.0f} | {row['bytes']:,} |"
        )
    print(f"\nIdle over {args.idle_seconds:g} s (after the catch-up and 2 s of backoff):\n")
    print(
        "| what | catch-up s | catch-up requests | requests per idle minute "
        "| client CPU | server CPU |"
    )
    print("|---|---:|---:|---:|---:|---:|")
    for row in idles:
        print(
            f"| {row['what']} | {row['catch_up_s']:.2f} | {row['catch_up_requests']} "
            f"| {row['requests_per_minute']:.0f} | {row['client_cpu'] * 100:.1f}% "
            f"| {row['server_cpu'] * 100:.1f}% |"
        )
    print(f"\nVerdict (target: each page under {TARGET_MS} ms of server time, p95):")
    for row in rows:
        pp95, op95 = row["page_ms"][1], row["own_ms"][1]
        print(
            f"- {row['page']}: {'met' if pp95 < TARGET_MS else 'MISSED'} ({pp95:.0f} ms); "
            f"its own work {'met' if op95 < TARGET_MS else 'MISSED'} ({op95:.0f} ms), "
            f"the raw reads {row['raw_ms'][1]:.0f} ms"
        )
    bare, live = idles
    ratio = live["requests_per_minute"] / max(bare["requests_per_minute"], 1e-9)
    print(
        f"- an idle live page: {live['requests_per_minute']:.0f} requests a minute against "
        f"{bare['requests_per_minute']:.0f} for a bare follow() ({ratio:.2f}x), client CPU "
        f"{live['client_cpu'] * 100:.1f}% against {bare['client_cpu'] * 100:.1f}%"
    )


async def measure(args: argparse.Namespace, server: Server) -> tuple[list[Any], list[Any]]:
    endpoint, table = server.env["AWS_ENDPOINT_URL"], server.env["SANDBOX_LEDGER_TABLE"]
    reader = SyncDynamoDBAdapter(table, endpoint_url=endpoint, region_name="us-east-1")
    store = DynamoDBAdapter(table, endpoint_url=endpoint, region_name="us-east-1")
    await store.connect()
    counter = RequestCounter().attach(await store.client())

    async def follower(name: str, sandbox_id: str) -> AsyncIterator[Any]:
        async for followed in store.follow(name, sandbox_id):
            yield followed

    token = secrets.token_urlsafe(24)
    source = f"table {table}"
    app = build(reader, token=token, host=HOST, source=source, follower=follower)
    replay = build(Replayed(reader), token=token, host=HOST, source=source, follower=follower)
    try:
        cookie = await sign_in(app, token)
        consoles = ((app, cookie), (replay, await sign_in(replay, token)))
        print("pages:", flush=True)
        rows = await pages(consoles, reader, args.runs, server.process.pid)
        print("idle:", flush=True)
        idles = await idle(app, cookie, store, counter, server.process.pid, args.idle_seconds)
    finally:
        reader.close()
        await store.close()
    return rows, idles


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=100_000)
    parser.add_argument("--entries", type=int, default=5_000, help="the big session's")
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--idle-seconds", type=float, default=30.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as work:
        data = Path(work) / "fleet.jsonl"
        lines = write_fleet(data, args.sessions, args.entries)
        server = Server(data, 5)
        try:
            image = data.with_name(f".{data.name}.image")
            waited = time.perf_counter()
            while not image.exists() and time.perf_counter() - waited < 300:
                time.sleep(0.2)  # the server writes it once it serves: not during the runs
            fill = {
                "lines": lines,
                "serves_after_s": server.serving_after,
                "load_cpu_s": server.load_cpu,
            }
            for key, value in server.env.items():
                if key.startswith("AWS_"):
                    os.environ[key] = value
            rows, idles = asyncio.run(measure(args, server))
        finally:
            server.interrupt()
    report(args, fill, rows, idles)


if __name__ == "__main__":
    main()

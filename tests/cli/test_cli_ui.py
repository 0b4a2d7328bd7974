"""``sandbox-ledger ui``: the console's guard (token, cookie, Host, headers), its pages over a
store (escaping whatever the ledger holds), the timeline's picture, and the command serving
an export file until Ctrl-C."""

from __future__ import annotations

import re
import signal
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sandbox_ledger import LedgerEntry, LedgerEvent, MemoryAdapter
from sandbox_ledger.blocking import BlockingAdapter
from sandbox_ledger.ui.app import build
from sandbox_ledger.ui.guard import COOKIE, CSP
from sandbox_ledger.ui.timeline import draw, shapes

from .processes import ROOT, popen
from .test_cli_first_day import clean_env

TOKEN = "the-token"
HOST = "testserver"


def entry(sid: str, event: str, ts: int, step: int = -1, **more: Any) -> LedgerEntry:
    return LedgerEntry(
        ts=ts, name=more.pop("name", "build"), sandbox_id=sid, step_index=step, event=event, **more
    )


@pytest.fixture
def ledger() -> Iterator[BlockingAdapter]:
    with BlockingAdapter(MemoryAdapter()) as blocking:
        yield blocking


def client(ledger: Any) -> Any:
    """The console over ``ledger`` (a BlockingAdapter over a MemoryAdapter), live from the
    memory store itself (it holds nothing bound to a loop)."""
    from starlette.testclient import TestClient

    follower = getattr(ledger, "adapter", None)
    application = build(
        ledger,
        token=TOKEN,
        host=HOST,
        source="test",
        follower=None if follower is None else follower.follow,
    )
    return TestClient(application, follow_redirects=False)


def signed_in(ledger: Any) -> Any:
    browser = client(ledger)
    answer = browser.get(f"/?token={TOKEN}")
    assert answer.status_code == 303
    return browser


# -- the guard ----------------------------------------------------------------------------------


def test_a_request_without_the_cookie_or_with_a_wrong_token_is_refused(ledger: Any) -> None:
    browser = client(ledger)
    assert browser.get("/").status_code == 401
    assert browser.get("/session?name=a&id=b").status_code == 401
    assert browser.get("/static/ui.css").status_code == 401
    assert browser.get("/?token=guess").status_code == 401
    browser.cookies.set(COOKIE, TOKEN)  # the token is not the cookie's secret
    assert browser.get("/").status_code == 401


def test_the_token_becomes_an_httponly_strict_cookie_and_leaves_the_url(ledger: Any) -> None:
    browser = client(ledger)
    answer = browser.get(f"/?name=build&token={TOKEN}")
    assert answer.status_code == 303
    assert answer.headers["location"] == "/?name=build"
    cookie = answer.headers["set-cookie"]
    assert cookie.startswith(f"{COOKIE}=") and TOKEN not in cookie
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
    page = browser.get("/")
    assert page.status_code == 200
    for header, value in [
        ("content-security-policy", CSP),
        ("x-content-type-options", "nosniff"),
        ("referrer-policy", "same-origin"),
        ("x-frame-options", "DENY"),
    ]:
        assert page.headers[header] == value
    assert "'unsafe-inline'" not in CSP and "script-src 'self'" in CSP


def test_a_forged_host_is_refused_even_with_the_cookie(ledger: Any) -> None:
    """DNS rebinding: a page of another site whose name resolves to 127.0.0.1."""
    browser = signed_in(ledger)
    assert browser.get("/").status_code == 200
    assert browser.get("/", headers={"host": "evil.example:80"}).status_code == 421
    assert browser.get(f"/?token={TOKEN}", headers={"host": "evil.example"}).status_code == 421


# -- the pages ----------------------------------------------------------------------------------

HOSTILE = [
    "<script>alert(1)</script>",
    '"><img src=x onerror=alert(1)>',
    "javascript:alert(1)",
    "\u202etxt.exe",
]


@pytest.mark.parametrize("text", HOSTILE)
def test_whatever_the_ledger_holds_is_shown_as_text(ledger: Any, text: str) -> None:
    ledger.append(entry(text, LedgerEvent.SandboxCreated, 1, name=text, payload={"x": text}))
    ledger.append(entry(text, LedgerEvent.ExecStarted, 2, 0, name=text))
    ledger.append(entry(text, LedgerEvent.ExecFailed, 3, 0, name=text, error=text))
    ledger.append(
        entry(text, LedgerEvent.CheckpointCreated, 4, name=text, payload={"snapshotId": text})
    )
    browser = signed_in(ledger)
    listing = browser.get("/").text
    session = browser.get("/session", params={"name": text, "id": text}).text
    for page in (listing, session):
        # Shown as text (escaped), never as a tag or an attribute of one; a character that
        # reorders the text around it shown as its escape.
        assert text not in page or text == "javascript:alert(1)"
        assert "<script>alert" not in page and "<img src" not in page
        assert 'href="javascript:' not in page and "\u202e" not in page
    assert re.search(r'href="/session\?name=[^"<>]*&amp;id=[^"<>]*"', listing), listing
    if text.startswith("<script"):
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in session  # the error and payload
    if text.startswith("\u202e"):
        assert "\\u202etxt.exe" in listing and "\\u202etxt.exe" in session
    assert session.count("<svg") == 1 and "<title>" in session


def test_every_hidden_character_is_shown_as_its_escape_and_none_is_printable() -> None:
    """``visible`` passes a printable text untouched without a pass over it: that is exact
    only while every character it escapes is one ``str.isprintable`` refuses."""
    from sandbox_ledger.ui.text import _HIDDEN, visible

    assert [hex(code) for code in _HIDDEN if chr(code).isprintable()] == []
    for code in _HIDDEN:
        assert visible(f"a{chr(code)}b") == f"a\\u{code:04x}b"
    assert visible("tab\tand\nnewline kept") == "tab\tand\nnewline kept"


def test_the_sessions_page_pages_with_the_stores_cursor_and_filters(ledger: Any) -> None:
    for i in range(55):
        ledger.append(entry(f"sb-{i:02d}", LedgerEvent.SandboxCreated, 1000 + i))
        if i % 2:
            ledger.append(entry(f"sb-{i:02d}", LedgerEvent.SandboxClosed, 2000 + i))
    browser = signed_in(ledger)
    first = browser.get("/").text
    assert first.count('class="id"') == 50 and "sb-54" in first and "sb-04" not in first
    nxt = re.search(r'<a href="(/\?cursor=[^"]+)">next page</a>', first)
    assert nxt is not None
    second = browser.get(nxt.group(1).replace("&amp;", "&")).text
    assert second.count('class="id"') == 5 and "sb-04" in second and "next page" not in second
    running = browser.get("/", params={"status": "running"}).text
    assert running.count('class="id"') == 28 and "running: 28" in running
    bad = browser.get("/", params={"status": "sleeping"})
    assert bad.status_code == 400 and "sleeping" in bad.text


def test_a_session_page_shows_its_timeline_and_entries_and_a_missing_one_is_404(
    ledger: Any,
) -> None:
    ledger.append(entry("sb-1", LedgerEvent.SandboxCreated, 1000))
    ledger.append(entry("sb-1", LedgerEvent.ExecStarted, 1100, 0, payload={"cmd": "make"}))
    ledger.append(entry("sb-1", LedgerEvent.ExecComplete, 1500, 0))
    browser = signed_in(ledger)
    page = browser.get("/session", params={"name": "build", "id": "sb-1"})
    assert page.status_code == 200
    assert 'class="exec ok"' in page.text and "step 0: 400 ms" in page.text
    assert "&#34;cmd&#34;: &#34;make&#34;" in page.text or '"cmd": "make"' in page.text
    assert browser.get("/session", params={"name": "build", "id": "none"}).status_code == 404


# -- the timeline -------------------------------------------------------------------------------


def test_the_timeline_draws_a_lane_per_branch_bars_failures_checkpoints_and_bounds() -> None:
    entries = [
        entry("s", LedgerEvent.SandboxCreated, 0),
        entry("s", LedgerEvent.ExecStarted, 10, 0, branch=0),
        entry("s", LedgerEvent.ExecStarted, 12, 0, branch=1),
        entry("s", LedgerEvent.ExecComplete, 50, 0, branch=0),
        entry("s", LedgerEvent.ExecFailed, 60, 0, branch=1, error="exit 2 <oops>"),
        entry("s", LedgerEvent.ExecStarted, 70, 1, branch=0),
        entry("s", LedgerEvent.CheckpointCreated, 80, payload={"snapshotId": "snap-9", "tag": "t"}),
        entry("s", LedgerEvent.SandboxClosed, 100),
    ]
    lanes, bars, markers = shapes(entries)
    assert lanes == ["sandbox", "branch 0", "branch 1"]
    assert [(b.lane, b.start, b.end, b.ended) for b in bars] == [
        ("branch 0", 10, 50, "exec.complete"),
        ("branch 1", 12, 60, "exec.failed"),
        ("branch 0", 70, 100, None),  # never ended: drawn open to the last entry
    ]
    assert [(m.kind, m.label) for m in markers] == [
        ("created", "created"),
        ("checkpoint", "snap-9 t"),
        ("closed", "closed"),
    ]
    svg = draw(entries)
    assert svg.count('class="exec ok"') == 1 and svg.count('class="exec failed"') == 1
    assert svg.count('class="exec open"') == 1
    assert "error: exit 2 &lt;oops&gt;" in svg and "<oops>" not in svg
    assert draw([]).count("no entries") == 1


# -- the command --------------------------------------------------------------------------------


def serving(argv: list[str], home: Path, **env: str) -> tuple[subprocess.Popen[str], str]:
    """``sandbox-ledger argv`` (a ``ui`` command) started in a plain shell (plus ``env``),
    and the URL it printed first."""
    process = popen(
        argv, clean_env(home, **env), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert process.stdout is not None
    return process, process.stdout.readline().strip()


def test_ui_serves_an_export_file_read_only_until_ctrl_c(tmp_path: Path) -> None:
    process, url = serving(["ui", str(ROOT / "examples" / "ledger.jsonl"), "--port", "0"], tmp_path)
    try:
        assert re.fullmatch(r"http://127\.0\.0\.1:\d+/\?token=[\w-]+", url), url
        base = url.split("/?", 1)[0]
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(base + "/", timeout=10)
        assert refused.value.code == 401
        opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor())
        with opener.open(url, timeout=10) as answer:  # the redirect sets the cookie
            page = answer.read().decode()
        assert "sb-1" in page and "ledger.jsonl (read-only)" in page
        with opener.open(base + "/session?name=build&id=sb-1", timeout=10) as answer:
            session = answer.read().decode()
        assert "<svg" in session and "snap-1 after-tests" in session
    finally:
        process.send_signal(signal.SIGINT)
        _, said = process.communicate(timeout=30)
    assert process.returncode == 0, said
    assert said.rstrip().endswith("SIGINT: stopped")


def test_ui_of_a_missing_file_is_not_found(tmp_path: Path) -> None:
    from .processes import run

    done = run(["ui", str(tmp_path / "none.jsonl")], clean_env(tmp_path))
    assert done.returncode == 3 and "no such file" in done.stderr


def test_a_running_sessions_page_is_live_and_its_events_are_each_entry_then_the_end(
    ledger: Any,
) -> None:
    """The page of a session still running loads live.js (a file: no inline script) and
    names what it shows; the events are each entry follow() hands out, with its escaped row,
    then `end` once the session is closed; the SVG alone for the redraw."""
    ledger.append(entry("sb-1", LedgerEvent.SandboxCreated, 1000))
    ledger.append(entry("sb-1", LedgerEvent.ExecStarted, 1100, 0, payload={"cmd": "<b>"}))
    browser = signed_in(ledger)
    page = browser.get("/session", params={"name": "build", "id": "sb-1"}).text
    assert '<script src="/static/live.js"></script>' in page and "<script>" not in page
    assert 'data-count="2"' in page
    ledger.append(entry("sb-1", LedgerEvent.SandboxClosed, 1200))
    closed = browser.get("/session", params={"name": "build", "id": "sb-1"}).text
    assert "live.js" not in closed  # nothing more will come
    events = browser.get("/session/events", params={"name": "build", "id": "sb-1"})
    assert events.headers["content-type"].startswith("text/event-stream")
    blocks = [b for b in events.text.split("\n\n") if b]
    assert [b.split("\n")[0] for b in blocks] == ["event: entry"] * 3 + ["event: end"]
    assert '"index": 1' in blocks[1] and "&lt;b&gt;" in blocks[1] and "<b>" not in blocks[1]
    svg = browser.get("/session/svg", params={"name": "build", "id": "sb-1"})
    assert svg.headers["content-type"].startswith("image/svg+xml") and "<svg" in svg.text
    assert browser.get("/static/live.js").status_code == 200


def test_the_environments_page_shows_each_record_as_text(ledger: Any) -> None:
    from sandbox_ledger import EnvironmentRecord

    ledger.save_environment(
        EnvironmentRecord.model_validate(
            {"name": "<script>x</script>", "builtAt": 5, "image": '"><img onerror=1>'}
        )
    )
    page = signed_in(ledger).get("/environments")
    assert page.status_code == 200
    assert "<script>x" not in page.text and "<img" not in page.text
    assert "&lt;script&gt;x&lt;/script&gt;" in page.text and "1970-01-01T00:00:00.005Z" in page.text


def test_the_change_feed_page_streams_each_change_once_escaped(ledger: Any) -> None:
    """The page loads changes.js (no inline script); its events are each change once
    (a repeat, as changes() may hand one out again, dropped by id), rows escaped, a
    session's linked to its page."""
    from starlette.testclient import TestClient

    from sandbox_ledger.changes import Change, ChangeKind

    hostile = "<b>x</b>"
    given = [
        Change(ChangeKind("session.created"), "1", 1000, name=hostile, sandbox_id="sb-1"),
        Change(ChangeKind("session.created"), "1", 1000, name=hostile, sandbox_id="sb-1"),
        Change(ChangeKind("session.closed"), "2", 2000, name="build", sandbox_id="sb-2"),
    ]

    async def feed() -> Any:
        for change in given:
            yield change

    application = build(ledger, token=TOKEN, host=HOST, source="test", feed=feed)
    browser = TestClient(application, follow_redirects=False)
    assert browser.get(f"/?token={TOKEN}").status_code == 303
    page = browser.get("/changes").text
    assert '<script src="/static/changes.js"></script>' in page
    events = browser.get("/changes/events")
    blocks = [b for b in events.text.split("\n\n") if b]
    assert len(blocks) == 2 and all(b.startswith("event: change") for b in blocks)
    assert "&lt;b&gt;x&lt;/b&gt;/sb-1" in blocks[0] and "<b>" not in blocks[0]
    assert "/session?name=build&amp;id=sb-2" in blocks[1]
    without = signed_in(ledger)  # the fixture's console has no feed: the page says so
    assert "no change feed" in without.get("/changes").text


def test_the_sessions_page_filters_by_start_time_with_a_zone(ledger: Any) -> None:
    for i in range(3):
        ledger.append(entry(f"sb-{i}", LedgerEvent.SandboxCreated, 1_796_126_400_000 + i * 60_000))
    browser = signed_in(ledger)
    page = browser.get("/", params={"before": "2026-12-01T12:01:00Z"}).text
    assert page.count('class="id"') == 1 and "sb-0" in page
    assert browser.get("/", params={"before": "1796126460001"}).text.count('class="id"') == 2
    naive = browser.get("/", params={"before": "2026-12-01T12:01:00"})
    assert naive.status_code == 400 and "has no zone" in naive.text
    assert browser.get("/", params={"before": "soon"}).status_code == 400

"""The console in a real browser: headless Chromium (Debian's ``chromium``, driven by
Playwright) against ``sandbox-ledger ui`` over a SQLite store another process writes: the
sessions page, a session's page, and a new exec bar appearing within a second of its append.
Screenshots of each page are written under the test's folder.

Where no Chromium can be had the tests are skipped, saying so; CI installs it and sets
``SANDBOX_LEDGER_REQUIRE_BROWSER=1``, where a missing one fails instead."""

from __future__ import annotations

import os
import shutil
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import expect

from sandbox_ledger import LedgerEntry, LedgerEvent
from sandbox_ledger.blocking import BlockingAdapter
from sandbox_ledger.sqlite import SQLiteAdapter

from .test_cli_ui import serving

CANDIDATES = ("/usr/lib/chromium/chromium", "chromium", "chromium-browser", "google-chrome")


def chromium() -> str | None:
    """Debian's browser binary (its /usr/bin/chromium is a shell wrapper), or another one on
    PATH."""
    for candidate in CANDIDATES:
        found = candidate if os.path.isfile(candidate) else shutil.which(candidate)
        if found:
            return found
    return None


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    path = chromium()
    if path is None:
        if os.environ.get("SANDBOX_LEDGER_REQUIRE_BROWSER") == "1":
            pytest.fail("no Chromium found (apt-get install chromium), and CI requires one")
        pytest.skip("no Chromium here (apt-get install chromium): the browser tests are skipped")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=path, args=["--no-sandbox"])
        yield launched
        launched.close()


def entry(ts: int, event: str, step: int = -1, **more: Any) -> LedgerEntry:
    return LedgerEntry(ts=ts, name="build", sandbox_id="sb-1", step_index=step, event=event, **more)


def test_the_pages_load_and_a_live_session_grows_a_bar_within_a_second(
    browser: Any, tmp_path: Path
) -> None:
    database = tmp_path / "ledger.db"
    writer = BlockingAdapter(SQLiteAdapter(database))
    writer.append(entry(1_000, LedgerEvent.SandboxCreated))
    writer.append(entry(1_100, LedgerEvent.ExecStarted, 0, payload={"cmd": "make"}))
    writer.append(entry(1_900, LedgerEvent.ExecComplete, 0))
    server, url = serving(["--store", f"sqlite:///{database}", "ui", "--port", "0"], tmp_path)
    try:
        page = browser.new_page()
        problems: list[str] = []
        page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
        page.goto(url)
        assert "token=" not in page.url  # exchanged for the cookie
        assert page.locator("td.id a").all_inner_texts() == ["sb-1"]
        page.screenshot(path=str(tmp_path / "sessions.png"), full_page=True)
        page.click("td.id a")
        page.wait_for_selector("svg.timeline")
        assert page.locator("rect.exec").count() == 1
        expect(page.locator("#live")).to_have_count(1)
        time.sleep(0.3)  # the page's event stream opens
        writer.append(entry(2_000, LedgerEvent.ExecStarted, 1, payload={"cmd": "make test"}))
        appended = time.monotonic()
        writer.append(entry(2_500, LedgerEvent.ExecFailed, 1, error="exit 2"))
        # Locators wait in Playwright's own world: the page's CSP forbids eval, as it should.
        expect(page.locator("rect.exec")).to_have_count(2, timeout=1_000)
        assert time.monotonic() - appended < 1.5  # the wait's own second, and its polling
        assert page.locator("rect.exec.failed").count() == 1
        assert page.locator("#entries tbody tr").count() == 5
        page.screenshot(path=str(tmp_path / "session.png"), full_page=True)
        writer.append(entry(3_000, LedgerEvent.SandboxClosed))
        expect(page.locator("#live")).to_contain_text("closed")
        assert problems == []  # nothing the CSP refused, no script error
    finally:
        server.send_signal(signal.SIGINT)
        _, said = server.communicate(timeout=30)
        writer.close()
    assert server.returncode == 0, said
    assert (tmp_path / "sessions.png").stat().st_size > 0

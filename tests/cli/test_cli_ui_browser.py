"""The console in a real browser: headless Chromium (Debian's ``chromium``, driven by
Playwright) against ``sandbox-ledger ui`` over each kind of source: the embedded DynamoDB
(``sandbox-ledger local``, the console started with the lines it prints, as a user would),
a SQLite store and an export file, all three holding one fleet.

Every page loads on each (sessions, filtered and paged with the store's cursor; a session's
timeline and entries; environments; changes) with no console error (a refusal of the CSP is
one); a live session grows a new exec bar within a second of its append, on SQLite and on
the embedded DynamoDB, and the change feed shows the new changes; hostile text in names,
ids, payloads and errors stays text (no dialog, no script). Screenshots of each page are
written under each test's folder (docs/img/ui-*.png are the embedded DynamoDB's).

Where no Chromium can be had the tests are skipped, saying so; CI installs it and sets
``SANDBOX_LEDGER_REQUIRE_BROWSER=1``, where a missing one fails instead."""

from __future__ import annotations

import functools
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import expect

from sandbox_ledger import EnvironmentRecord, LedgerEntry, LedgerEvent
from sandbox_ledger.blocking import BlockingAdapter
from sandbox_ledger.sqlite import SQLiteAdapter

from .processes import popen, run
from .test_cli_first_day import clean_env
from .test_cli_local import Local

CANDIDATES = ("/usr/lib/chromium/chromium", "chromium", "chromium-browser", "google-chrome")
VIEWPORT = {"width": 1200, "height": 800}
"""The screenshots' size (docs/img shows them): the viewport, never the full page."""
SOURCES = ("dynamodb", "sqlite", "export")


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


# -- the fleet: one data set in each kind of source -------------------------------------------

NOON = 1_796_126_400_000
"""2026-12-01T12:00:00Z."""
MINUTE = 60_000
JOBS = 55
"""Sessions of name "batch" (job-00 started first; odd ones closed): with build/sb-1 and the
two hostile ones, 58 sessions, more than a page of 50."""
PWNED = "window.__pwned=1;alert(1)"
SCRIPT = f"<script>{PWNED}</script>"
IMAGE = f'"><img src=x onerror="{PWNED}">'
LINK = f"javascript:{PWNED}"
BIDI = "\u202etxt.exe"
HOSTILE = [
    # (name, sandbox id): the id is the link text of its row on the sessions page.
    (SCRIPT, LINK),
    (IMAGE, BIDI),
]


def entry(name: str, sid: str, ts: int, event: str, step: int = -1, **more: Any) -> LedgerEntry:
    return LedgerEntry(ts=ts, name=name, sandbox_id=sid, step_index=step, event=event, **more)


def fleet() -> tuple[list[LedgerEntry], list[EnvironmentRecord]]:
    """The entries (in append order) and environment records every source holds."""
    entries: list[LedgerEntry] = []
    for i in range(JOBS):
        started = NOON + i * MINUTE
        entries.append(entry("batch", f"job-{i:02d}", started, LedgerEvent.SandboxCreated))
        if i % 2:
            entries.append(entry("batch", f"job-{i:02d}", started + 500, LedgerEvent.SandboxClosed))
    at = NOON + 60 * MINUTE
    build = [
        (0, LedgerEvent.SandboxCreated, -1, None, {"environment": "python-3.12"}),
        (1_000, LedgerEvent.ExecStarted, 0, None, {"cmd": "pip install -e .", "cwd": "/src"}),
        (9_000, LedgerEvent.ExecComplete, 0, None, {"exitCode": 0}),
        (10_000, LedgerEvent.ExecStarted, 1, 0, {"cmd": "pytest -q tests/unit"}),
        (10_500, LedgerEvent.ExecStarted, 1, 1, {"cmd": "pytest -q tests/e2e"}),
        (21_000, LedgerEvent.ExecComplete, 1, 0, {"exitCode": 0}),
        (26_000, LedgerEvent.ExecFailed, 1, 1, {"exitCode": 2}),
        (27_000, LedgerEvent.CheckpointCreated, -1, None, {"snapshotId": "snap-7", "name": "unit"}),
        (30_000, LedgerEvent.SandboxClosed, -1, None, None),
    ]
    for offset, event, step, branch, payload in build:
        error = "exit 2: 3 failed, 41 passed" if event == LedgerEvent.ExecFailed else None
        more = {"branch": branch, "payload": payload, "error": error}
        entries.append(entry("build", "sb-1", at + offset, event, step, **more))
    for n, (name, sid) in enumerate(HOSTILE):
        at = NOON + (120 + n) * MINUTE
        hostile = {"cmd": SCRIPT, "note": IMAGE, "link": LINK, "file": BIDI}
        entries += [
            entry(name, sid, at, LedgerEvent.SandboxCreated, payload=hostile),
            entry(name, sid, at + 100, LedgerEvent.ExecStarted, 0, payload=hostile),
            entry(name, sid, at + 900, LedgerEvent.ExecFailed, 0, error=f"{IMAGE} {SCRIPT} {BIDI}"),
            entry(name, sid, at + 950, LedgerEvent.CheckpointCreated, payload={"snapshotId": LINK}),
            entry(name, sid, at + 1_000, LedgerEvent.SandboxClosed),
        ]
    environments = [
        EnvironmentRecord.model_validate(
            {"name": "python-3.12", "builtAt": NOON - MINUTE, "image": "python:3.12-slim"}
        ),
        EnvironmentRecord.model_validate(
            {"name": SCRIPT, "builtAt": NOON, "image": IMAGE, "link": LINK, "file": BIDI}
        ),
    ]
    return entries, environments


CHANGES = JOBS + JOBS // 2 + 2 + 2 * len(HOSTILE)
"""The fleet's change feed: each session created, and each closed one closed."""


@dataclass
class Console:
    """``sandbox-ledger ui`` running, and the URL it printed."""

    process: subprocess.Popen[str]
    url: str

    @property
    def base(self) -> str:
        return self.url.split("/?", 1)[0]

    def stop(self) -> None:
        self.process.send_signal(signal.SIGINT)
        _, said = self.process.communicate(timeout=30)
        assert self.process.returncode == 0, said


def start(argv: list[str], env: dict[str, str]) -> Console:
    """``sandbox-ledger argv`` (a ``ui`` command) started with ``env``, and its URL."""
    process = popen(argv, env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert process.stdout is not None
    url = process.stdout.readline().strip()
    assert url.startswith("http://127.0.0.1:"), process.communicate(timeout=30)
    return Console(process, url)


def pasted(server: Local, home: Path) -> dict[str, str]:
    """A shell after pasting the lines ``local`` printed (and this checkout's PYTHONPATH,
    where the tests import the code from one: the console runs the code under test)."""
    env = {**server.env(), "HOME": str(home)}
    if os.environ.get("PYTHONPATH"):
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    return env


@pytest.fixture(scope="module")
def local(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Local, dict[str, str]]]:
    """The embedded DynamoDB (``sandbox-ledger local``) and the shell its lines make."""
    home = tmp_path_factory.mktemp("local")
    server = Local(cwd=home)
    try:
        yield server, pasted(server, home)
    finally:
        code, said = server.stop()
        assert code == 0, said


@pytest.fixture(scope="module")
def sources(
    local: tuple[Local, dict[str, str]], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Console]]:
    """A console over each source, each holding :func:`fleet`: the SQLite store written by
    the library, the export file ``export`` wrote of it, the embedded DynamoDB that file was
    imported into."""
    home = tmp_path_factory.mktemp("fleet")
    database, exported = home / "fleet.db", home / "fleet.jsonl"
    entries, environments = fleet()
    with BlockingAdapter(SQLiteAdapter(database)) as writer:
        for one in entries:
            writer.append(one)
        for record in environments:
            writer.save_environment(record)
    store = ["--store", f"sqlite:///{database}"]
    done = run([*store, "export", "-o", str(exported)], clean_env(home))
    assert done.returncode == 0, done.stderr
    _, shell = local
    done = run(["import", str(exported)], shell)
    assert done.returncode == 0, done.stderr
    consoles: dict[str, Console] = {}
    try:
        consoles["dynamodb"] = start(["ui", "--port", "0"], shell)  # the lines' table
        consoles["sqlite"] = start([*store, "ui", "--port", "0"], clean_env(home))
        consoles["export"] = start(["ui", str(exported), "--port", "0"], clean_env(home))
        yield consoles
    finally:
        for console in consoles.values():
            console.stop()


@dataclass
class Watched:
    """A browser page whose console errors, uncaught errors and dialogs are kept."""

    page: Any
    problems: list[str] = field(default_factory=list)

    @classmethod
    def open(cls, context: Any) -> Watched:
        watched = cls(context.new_page())
        problems = watched.problems

        def console(message: Any) -> None:
            if message.type == "error":
                problems.append(f"console: {message.text}")

        def dialog(opened: Any) -> None:
            problems.append(f"dialog: {opened.message}")
            opened.dismiss()

        watched.page.on("console", console)
        watched.page.on("pageerror", lambda error: problems.append(f"uncaught: {error}"))
        watched.page.on("dialog", dialog)
        return watched

    def shot(self, path: Path) -> None:
        self.page.screenshot(path=str(path))
        assert path.stat().st_size > 0


def signed_in(browser: Any, console: Console) -> tuple[Any, Watched]:
    """A browser context of its own holding the console's cookie, and its first page (on
    the sessions page)."""
    context = browser.new_context(viewport=VIEWPORT)
    watched = Watched.open(context)
    watched.page.goto(console.url)
    assert "token=" not in watched.page.url  # exchanged for the cookie
    return context, watched


# -- every page on every source ------------------------------------------------------------------


@pytest.mark.parametrize("source", SOURCES)
def test_every_page_loads_on_each_source_with_no_console_error(
    browser: Any, sources: dict[str, Console], source: str, tmp_path: Path
) -> None:
    console = sources[source]
    context, watched = signed_in(browser, console)
    page = watched.page
    try:
        # Sessions: newest first, 50 a page, the next through the store's cursor.
        ids = page.locator("td.id a")
        expect(ids).to_have_count(50)
        assert ids.all_inner_texts()[:3] == ["\\u202etxt.exe", LINK, "sb-1"]
        expect(page.locator("header")).to_contain_text(
            {"dynamodb": "table sandbox-ledger", "sqlite": "fleet.db", "export": "(read-only)"}[
                source
            ]
        )
        # The page's counts: three sessions closed and 47 jobs, 23 of them closed.
        expect(page.locator("p.counts span")).to_have_text(["completed: 26", "running: 24"])
        watched.shot(tmp_path / "sessions.png")
        page.click("text=next page")
        expect(page).to_have_url(re.compile(r"/\?cursor="))
        expect(ids).to_have_count(JOBS + 3 - 50)
        assert ids.all_inner_texts() == [f"job-{i:02d}" for i in reversed(range(JOBS + 3 - 50))]
        expect(page.locator("text=next page")).to_have_count(0)
        watched.shot(tmp_path / "sessions-next.png")

        # Filtered by the form: name and status.
        page.fill("input[name=name]", "batch")
        page.select_option("select[name=status]", "running")
        page.click("button[type=submit]")
        expect(page).to_have_url(re.compile(r"/\?name=batch&status=running&before=$"))
        expect(ids).to_have_count((JOBS + 1) // 2)
        assert set(ids.all_inner_texts()) == {f"job-{i:02d}" for i in range(0, JOBS, 2)}
        expect(page.locator("p.counts")).to_have_text(f"running: {(JOBS + 1) // 2} (this page)")
        watched.shot(tmp_path / "sessions-filtered.png")

        # A session: its timeline (lanes, bars, the failure, the checkpoint, the bounds),
        # its entries folded and unfolded.
        page.goto(console.base + "/")
        page.click("td.id a >> text=sb-1")
        expect(page).to_have_url(console.base + "/session?name=build&id=sb-1")
        timeline = page.locator("#timeline svg.timeline")
        expect(timeline).to_have_count(1)
        assert page.locator("svg text.lane").all_text_contents() == [
            "sandbox",
            "main",
            "branch 0",
            "branch 1",
        ]
        expect(page.locator("rect.exec")).to_have_count(3)
        failed = page.locator("rect.exec.failed")
        expect(failed).to_have_count(1)
        assert "error: exit 2: 3 failed, 41 passed" in failed.locator("title").text_content()
        expect(page.locator("circle.checkpoint title")).to_have_text("snap-7 unit")
        expect(page.locator("line.bound.created")).to_have_count(1)
        expect(page.locator("line.bound.closed")).to_have_count(1)
        assert timeline.bounding_box()["height"] > 100
        rows = page.locator("#entries tbody tr")
        expect(rows).to_have_count(9)
        expect(page.locator("#live")).to_have_count(0)  # closed: not live
        folded = rows.nth(1).locator("details")
        expect(folded.locator("pre")).to_be_hidden()
        expect(folded.locator("summary")).to_contain_text('"cmd": "pip install -e .",')
        folded.locator("summary").click()
        expect(folded.locator("pre")).to_be_visible()
        expect(folded.locator("pre")).to_contain_text('"cwd": "/src"')
        watched.shot(tmp_path / "session.png")

        # Environments, each record's fields folded.
        page.click("header >> text=Environments")
        expect(page).to_have_url(console.base + "/environments")
        names = page.locator("td.name")
        expect(names).to_have_count(2)
        assert sorted(names.all_inner_texts()) == sorted(["python-3.12", SCRIPT])
        record = page.locator("tr", has_text="python-3.12").locator("details")
        expect(record.locator("pre")).to_be_hidden()
        record.locator("summary").click()
        expect(record.locator("pre")).to_contain_text('"image": "python:3.12-slim"')
        watched.shot(tmp_path / "environments.png")

        # Changes: live where the store has a feed; an export file says it has none.
        page.click("header >> text=Changes")
        expect(page).to_have_url(console.base + "/changes")
        if source == "export":
            expect(page.locator("main")).to_contain_text("An export file has no change feed.")
            expect(page.locator("#changes")).to_have_count(0)
        else:
            changes = page.locator("#changes tbody tr")
            expect(changes).to_have_count(CHANGES)
            expect(page.locator("#feed")).to_have_text(f"{CHANGES} change(s) so far; live")
            # Newest last, by time: on DynamoDB different sessions' changes come in no
            # promised order (a shard's after another's), the page puts each in its place.
            times = page.locator("#changes tbody tr td:first-child").all_text_contents()
            assert times == sorted(times) and times[0] == "2026-12-01T12:00:00.000Z", times
            expect(changes.first).to_contain_text("batch/job-00")
            link = page.locator("#changes a", has_text="build/sb-1")
            expect(link).to_have_count(2)  # created and closed
            assert link.first.get_attribute("href") == "/session?name=build&id=sb-1"
            page.locator("#feed").scroll_into_view_if_needed()  # the newest, and the count
        watched.shot(tmp_path / "changes.png")
        assert watched.problems == []  # nothing the CSP refused, no script error
    finally:
        context.close()


# -- hostile text ----------------------------------------------------------------------------------


@pytest.mark.parametrize("source", SOURCES)
def test_hostile_text_stays_text_in_the_browser(
    browser: Any, sources: dict[str, Console], source: str, tmp_path: Path
) -> None:
    """Names, ids, payloads, errors and records of ``<script>``, ``"><img onerror>``, a
    ``javascript:`` link text and a bidirectional override: each shown as its text, no
    dialog opens and no script of theirs runs (``window.__pwned`` stays unset)."""
    console = sources[source]
    context, watched = signed_in(browser, console)
    page = watched.page

    def unharmed() -> None:
        assert page.evaluate("typeof window.__pwned") == "undefined"
        assert page.locator("img").count() == 0
        scripts = [script.get_attribute("src") for script in page.locator("script").all()]
        assert set(scripts) <= {"/static/live.js", "/static/changes.js"}, scripts

    try:
        rows = page.locator("tbody tr")
        expect(rows.nth(0).locator("td.name")).to_have_text(IMAGE)
        expect(rows.nth(1).locator("td.name")).to_have_text(SCRIPT)
        expect(rows.nth(0).locator("td.id")).to_have_text("\\u202etxt.exe")  # the escape shown
        unharmed()
        link = rows.nth(1).locator("td.id a")
        expect(link).to_have_text(LINK)
        assert link.get_attribute("href").startswith("/session?name=")
        link.click()
        expect(page).to_have_url(re.compile(r"/session\?name=%3Cscript%3E"))
        expect(page.locator("h1")).to_have_text(f"{SCRIPT} / {LINK}")
        expect(page.locator("#entries .error")).to_have_text(f"{IMAGE} {SCRIPT} \\u202etxt.exe")
        failed = page.locator("rect.exec.failed title")
        assert failed.text_content() == f"step 0: 800 ms; error: {IMAGE} {SCRIPT} \\u202etxt.exe"
        expect(page.locator("circle.checkpoint title")).to_have_text(LINK)
        payload = page.locator("#entries details").first
        payload.locator("summary").click()
        for text in (SCRIPT, IMAGE.replace('"', '\\"'), LINK, "\\u202etxt.exe"):
            expect(payload.locator("pre")).to_contain_text(text)
        unharmed()
        watched.shot(tmp_path / "session.png")
        page.click("header >> text=Environments")
        expect(page).to_have_url(console.base + "/environments")
        expect(page.locator("td.name", has_text="<script>")).to_have_text(SCRIPT)
        unharmed()
        if source != "export":
            page.click("header >> text=Changes")
            expect(page).to_have_url(console.base + "/changes")
            hostile = page.locator("#changes a", has_text=LINK)
            expect(hostile).to_have_count(2)
            expect(hostile.first).to_have_text(f"{SCRIPT}/{LINK}")
            assert hostile.first.get_attribute("href").startswith("/session?name=")
            unharmed()
        assert watched.problems == []  # no dialog, no script error, nothing refused
    finally:
        context.close()


# -- live pages -----------------------------------------------------------------------------------


def live_store(
    store: str, local: tuple[Local, dict[str, str]], home: Path
) -> tuple[Any, list[str], dict[str, str]]:
    """A new store of ``store``'s kind: its writer, and the options and shell a console over
    it is started with (on the embedded DynamoDB: a table of its own, made with the CLI)."""
    if store == "sqlite":
        database = home / "ledger.db"
        argv = ["--store", f"sqlite:///{database}"]
        return BlockingAdapter(SQLiteAdapter(database)), argv, clean_env(home)
    import boto3

    from sandbox_ledger.dynamodb import SyncDynamoDBAdapter

    _, env = local
    table = "ledger-live"
    made = run(["--table", table, "table", "create"], env)
    assert made.returncode == 0, made.stderr
    session = boto3.Session(
        aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
        region_name=env["AWS_REGION"],
    )
    writer = SyncDynamoDBAdapter(table, endpoint_url=env["AWS_ENDPOINT_URL"], session=session)
    return writer, ["--table", table], env


@pytest.mark.parametrize("store", ["sqlite", "dynamodb"])
def test_a_live_session_grows_a_bar_within_a_second_and_the_feed_shows_it(
    browser: Any, local: tuple[Local, dict[str, str]], store: str, tmp_path: Path
) -> None:
    """The test appends to a running session whose page is open: the new exec's bar is
    drawn within a second of its append; the change feed page, open beside it, shows the
    new session and the close as they come."""
    writer, options, env = live_store(store, local, tmp_path)
    build = functools.partial(entry, "build", "sb-1")
    writer.append(build(1_000, LedgerEvent.SandboxCreated))
    writer.append(build(1_100, LedgerEvent.ExecStarted, 0, payload={"cmd": "make"}))
    writer.append(build(1_900, LedgerEvent.ExecComplete, 0))
    console = start([*options, "ui", "--port", "0"], env)
    context = None
    try:
        context, watched = signed_in(browser, console)
        page = watched.page
        assert page.locator("td.id a").all_inner_texts() == ["sb-1"]
        watched.shot(tmp_path / "sessions.png")
        page.click("td.id a")
        expect(page.locator("svg.timeline")).to_have_count(1)
        assert page.locator("rect.exec").count() == 1
        expect(page.locator("#live")).to_have_count(1)
        feed = Watched.open(context)
        feed.page.goto(console.base + "/changes")
        changes = feed.page.locator("#changes tbody tr")
        # The feed's first change shown: the store the live pages follow is open.
        expect(changes).to_have_count(1)
        expect(changes.first).to_contain_text("session.created")
        writer.append(build(2_000, LedgerEvent.ExecStarted, 1, payload={"cmd": "make test"}))
        appended = time.monotonic()
        writer.append(build(2_500, LedgerEvent.ExecFailed, 1, error="exit 2"))
        # Locators wait in Playwright's own world: the page's CSP forbids eval, as it should.
        expect(page.locator("rect.exec")).to_have_count(2, timeout=1_000)
        assert time.monotonic() - appended < 1.5  # the wait's own second, and its polling
        assert page.locator("rect.exec.failed").count() == 1
        assert page.locator("#entries tbody tr").count() == 5
        watched.shot(tmp_path / "session.png")
        writer.append(entry("deploy", "sb-2", 2_600, LedgerEvent.SandboxCreated))
        writer.append(build(3_000, LedgerEvent.SandboxClosed))
        expect(page.locator("#live")).to_contain_text("closed")
        expect(changes).to_have_count(3)
        shown = [changes.nth(i).locator("td").all_inner_texts()[1:] for i in range(3)]
        assert shown == [
            ["session.created", "build/sb-1"],
            ["session.created", "deploy/sb-2"],
            ["session.closed", "build/sb-1"],
        ]
        feed.shot(tmp_path / "changes.png")
        assert watched.problems == [] and feed.problems == []
    finally:
        if context is not None:
            context.close()
        console.stop()
        writer.close()


# -- resources and writes -------------------------------------------------------------------------


def test_the_resources_page_and_the_writes_work_in_the_browser(
    browser: Any, local: tuple[Local, dict[str, str]], tmp_path: Path
) -> None:
    """On the embedded DynamoDB, a console started with --allow-writes: the resources page
    shows each record with the sweeper's forecast; "Sweep now…" asks, then sweeps by the
    form's POST (the browser's own Origin and the CSRF token); "Delete this session…" asks,
    then deletes. No console error on any page (the CSP's form-action allows the console's
    own forms)."""
    from datetime import timedelta

    import boto3

    from resources.resource_fixtures import record
    from sandbox_ledger.dynamodb import SyncDynamoDBAdapter
    from sandbox_ledger.resources import SyncResourceRecordStore

    _, env = local
    table = "ledger-writes"
    made = run(["--table", table, "table", "create", "--stale-after", "60"], env)
    assert made.returncode == 0, made.stderr
    session = boto3.Session(
        aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
        region_name=env["AWS_REGION"],
    )
    endpoint = env["AWS_ENDPOINT_URL"]
    records = SyncResourceRecordStore(table, endpoint_url=endpoint, session=session)
    fresh = records.put(record(age=timedelta(seconds=3))).record
    stale = records.put(record(age=timedelta(hours=1), provider="vercel")).record
    failed = records.put(record(age=timedelta(hours=2), phase="cleanup-failed")).record
    with SyncDynamoDBAdapter(table, endpoint_url=endpoint, session=session) as ledger:
        ledger.append(entry("build", "sb-1", 1_000, LedgerEvent.SandboxCreated))
        ledger.append(entry("build", "sb-1", 1_100, LedgerEvent.ExecStarted, 0))
    console = start(["--table", table, "ui", "--port", "0", "--allow-writes"], env)
    context = None
    try:
        context, watched = signed_in(browser, console)
        page = watched.page
        page.click("header a[href='/resources']")
        rows = page.locator("#resources tbody tr")
        expect(rows).to_have_count(3)
        expect(page.locator("p.forecast")).to_contain_text("1 stale record(s) wait")
        verdict = {
            r.locator("td.id").inner_text(): r.locator("td.verdict").inner_text()
            for r in rows.all()
        }
        assert verdict[stale.id].startswith("stale: the next sweep observes it")
        assert verdict[fresh.id].startswith("fresh: expires no sooner than")
        assert verdict[failed.id].startswith("kept for attention")
        watched.shot(tmp_path / "resources.png")
        page.click("text=Sweep now…")
        expect(page.locator("p.confirm")).to_contain_text("A sweep now expires 0 record(s)")
        page.click("button.danger")
        expect(page.locator("h1")).to_have_text("Swept")
        expect(page.locator("main")).to_contain_text("0 expired, 1 skipped, 0 failed")
        observed = records.get_versioned(stale.id)
        assert observed is not None and observed.observed_at_ms is not None  # a real sweep
        page.goto(console.base + "/")
        page.click("td.id a")
        page.click("text=Delete this session…")
        expect(page.locator("p.confirm")).to_contain_text(
            "Delete build/sb-1 and all its 2 entries?"
        )
        watched.shot(tmp_path / "delete.png")
        page.click("button.danger")
        expect(page.locator("main")).to_contain_text("deleted build/sb-1 and all its entries")
        assert watched.problems == []
    finally:
        if context is not None:
            context.close()
        console.stop()
    with SyncDynamoDBAdapter(table, endpoint_url=endpoint, session=session) as ledger:
        assert ledger.read_all("build", "sb-1") == []

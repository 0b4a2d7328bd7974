"""The console's resources page (a forecast from the sweep's own dry run, writing nothing) and
its writes under ``--allow-writes``: a session's delete and a sweep, each asked first, each a
POST that carries the CSRF token (one without it, or from another origin, changes nothing)."""

from __future__ import annotations

import html
import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest
from typer.testing import CliRunner

from resources.resource_fixtures import Collector, observed_earlier, record
from resources.test_resources_expiry import _raw_item
from sandbox_ledger import LedgerEvent, MemoryAdapter
from sandbox_ledger.blocking import BlockingAdapter
from sandbox_ledger.cli import app
from sandbox_ledger.resources import SyncResourceRecordStore, resolve_sweep, sweep
from sandbox_ledger.ui.app import build
from sandbox_ledger.ui.resources import Resources, age
from sandbox_ledger.ui.writes import Writes

from .test_cli_ui import HOST, HOSTILE, TOKEN, entry

CSRF = "the-csrf-token"


def console(ledger: Any, resources: Resources | None = None, writes: Writes | None = None) -> Any:
    from starlette.testclient import TestClient

    application = build(
        ledger, token=TOKEN, host=HOST, source="test", resources=resources, writes=writes
    )
    browser = TestClient(application, follow_redirects=False)
    assert browser.get(f"/?token={TOKEN}").status_code == 303
    return browser


def row_of(page: str, record_id: str) -> str:
    """The text of the table row of ``record_id`` (tags removed)."""
    found = re.search(
        rf"<tr[^>]*>\s*<td class=\"id\">{re.escape(record_id)}</td>.*?</tr>", page, re.S
    )
    assert found, f"no row for {record_id}"
    return html.unescape(re.sub(r"<[^>]+>", " ", found.group(0)))


def items(client: Any, table: str) -> list[dict[str, Any]]:
    found = client.scan(TableName=table, ConsistentRead=True)["Items"]
    return sorted(found, key=lambda i: (i["PK"]["S"], i["SK"]["S"]))


def test_age_reads_at_a_glance() -> None:
    assert [age(ms) for ms in (0, 42_000, 425_000, 11_520_000, 187_200_000, -5_000)] == [
        "0s",
        "42s",
        "7m05s",
        "3h12m",
        "2d4h",
        "-5s",
    ]


@pytest.fixture
def deployed(moto_endpoint: str, table_name: str) -> tuple[SyncResourceRecordStore, list[str]]:
    """A table made by `table create` (its descriptor holds the sweep's windows: live records
    expire after 60 s unchanged), and the CLI's arguments to reach it."""
    args = ["--table", table_name, "--endpoint-url", moto_endpoint, "--region", "us-east-1"]
    made = CliRunner().invoke(app, [*args, "table", "create", "--stale-after", "60"])
    assert made.exit_code == 0, made.output
    return SyncResourceRecordStore(table_name, endpoint_url=moto_endpoint), args


def resources_of(store: SyncResourceRecordStore) -> Resources:
    return Resources(
        store,
        lambda: resolve_sweep(store.descriptor(), store.table_name, require_deployment=True).policy,
    )


def test_the_resources_page_forecasts_each_record_from_the_sweep_and_writes_nothing(
    deployed: tuple[SyncResourceRecordStore, list[str]],
    moto_endpoint: str,
    wait_for_indexes: Callable[[], None],
) -> None:
    store, _ = deployed
    client = boto3.client("dynamodb", endpoint_url=moto_endpoint, region_name="us-east-1")
    due = store.put(record(age=timedelta(hours=1))).record
    wait_for_indexes()
    # A sweep observed it more than a window (60 s) ago.
    observed_earlier(store, store.get_versioned(due.id), timedelta(seconds=61))
    stale = store.put(record(age=timedelta(hours=1), provider="vercel")).record
    fresh = store.put(record(age=timedelta(seconds=5))).record
    failed = store.put(record(age=timedelta(minutes=2), phase="cleanup-failed")).record
    newer, item = _raw_item(timedelta(hours=2), body={"gpu": "a100"})
    client.put_item(TableName=store.table_name, Item=item)
    wait_for_indexes()
    before = items(client, store.table_name)

    page = console(BlockingAdapter(MemoryAdapter()), resources_of(store)).get("/resources")
    assert page.status_code == 200, page.text
    text = html.unescape(re.sub(r"<[^>]+>", "", page.text))
    assert "A sweep now expires 1 record(s) of the table; 1 stale record(s) wait" in text
    assert "a sweep now expires it: stale: no heartbeat" in row_of(page.text, due.id)
    assert "stale: the next sweep observes it; expires from" in row_of(page.text, stale.id)
    assert "vercel" in row_of(page.text, stale.id)
    assert "fresh: expires no sooner than" in row_of(page.text, fresh.id)
    assert "cleanup-failed" in row_of(page.text, failed.id)
    assert "kept for attention: expires no sooner than" in row_of(page.text, failed.id)
    unreadable = row_of(page.text, newer)
    assert "this version cannot read it" in unreadable and "gpu" in unreadable
    assert "a100" not in unreadable  # the reason names the field, never the payload
    for shown in (due, stale, fresh):
        assert "pid 41235 on builder-7" in row_of(page.text, shown.id)
    assert "exec x2" in row_of(page.text, fresh.id)
    assert "exec: exit status 1" in row_of(page.text, fresh.id)
    # The console wrote nothing: no observation, no claim (items as they were).
    assert items(client, store.table_name) == before
    # The forecast is what a real sweep then does.
    policy = resolve_sweep(store.descriptor(), store.table_name, require_deployment=True).policy
    done = sweep(store, Collector(), now=datetime.now(UTC), policy=policy)
    assert done.expired == [due.id] and done.observed == [stale.id]


def test_the_resources_page_filters_by_phase_and_pages(
    deployed: tuple[SyncResourceRecordStore, list[str]], wait_for_indexes: Callable[[], None]
) -> None:
    store, _ = deployed
    ready = [store.put(record(age=timedelta(seconds=i))).record.id for i in range(53)]
    closing = store.put(record(phase="closing")).record.id
    wait_for_indexes()
    browser = console(BlockingAdapter(MemoryAdapter()), resources_of(store))
    shown: list[str] = []
    page = browser.get("/resources", params={"phase": "ready"})
    pages = 1
    while True:  # the store's pages (a page may end short at a shard's end)
        found = re.findall(r'<td class="id">([^<]+)</td>', page.text)
        assert 0 < len(found) <= 50
        shown += found
        link = re.search(r'<a href="(/resources\?[^"]+)">next page</a>', page.text)
        if link is None:
            break
        assert "phase=ready" in link.group(1)
        page, pages = browser.get(html.unescape(link.group(1))), pages + 1
    assert sorted(shown) == sorted(ready) and closing not in shown and pages >= 2
    assert browser.get("/resources", params={"phase": "asleep"}).status_code == 400


def test_a_table_without_sweep_settings_shows_its_records_without_a_forecast(
    moto_endpoint: str, sync_table: str, wait_for_indexes: Callable[[], None]
) -> None:
    store = SyncResourceRecordStore(sync_table, endpoint_url=moto_endpoint)
    kept = store.put(record()).record
    wait_for_indexes()
    page = console(BlockingAdapter(MemoryAdapter()), resources_of(store)).get("/resources")
    assert page.status_code == 200 and "no forecast:" in page.text
    assert "no forecast" in row_of(page.text, kept.id)


def test_a_store_without_resource_records_has_no_resources_page() -> None:
    browser = console(BlockingAdapter(MemoryAdapter()))
    assert browser.get("/resources").status_code == 404
    assert 'href="/resources"' not in browser.get("/").text


# -- writes ---------------------------------------------------------------------------------------


def session_ledger() -> BlockingAdapter:
    ledger = BlockingAdapter(MemoryAdapter())
    ledger.append(entry("sb-1", LedgerEvent.SandboxCreated, 1_000))
    ledger.append(entry("sb-1", LedgerEvent.ExecStarted, 1_100, 0))
    return ledger


def test_a_read_only_console_has_no_write_page_and_refuses_every_post() -> None:
    ledger = session_ledger()
    browser = console(ledger)
    page = browser.get("/session", params={"name": "build", "id": "sb-1"})
    assert "Delete this session" not in page.text
    assert browser.get("/session/delete", params={"name": "build", "id": "sb-1"}).status_code == 404
    form = {"csrf": CSRF, "name": "build", "id": "sb-1"}
    for path in ("/session/delete", "/resources/sweep", "/", "/session"):
        assert browser.post(path, data=form).status_code in (404, 405)
    assert len(ledger.read_all("build", "sb-1")) == 2


def test_a_delete_is_asked_first_then_needs_the_csrf_token_and_this_origin() -> None:
    ledger = session_ledger()
    browser = console(ledger, writes=Writes(CSRF))
    page = browser.get("/session", params={"name": "build", "id": "sb-1"})
    assert "Delete this session…" in page.text
    asked = browser.get("/session/delete", params={"name": "build", "id": "sb-1"})
    assert asked.status_code == 200
    assert "Delete build/sb-1 and all its 2 entries? This cannot be undone." in asked.text
    assert f'name="csrf" value="{CSRF}"' in asked.text
    assert len(ledger.read_all("build", "sb-1")) == 2  # asking changes nothing
    fields = {"session": "name=build&id=sb-1"}
    refused = [
        browser.post("/session/delete", data=fields),
        browser.post("/session/delete", data={**fields, "csrf": "guessed"}),
        browser.post("/session/delete", data={**fields, "csrf": ""}),
        browser.post(
            "/session/delete",
            data={**fields, "csrf": CSRF},
            headers={"origin": "http://evil.example"},
        ),
        browser.post(  # an opaque origin (a sandboxed frame, a data: page)
            "/session/delete", data={**fields, "csrf": CSRF}, headers={"origin": "null"}
        ),
        browser.post(
            "/session/delete",
            content=f'{{"csrf": "{CSRF}", "session": "name=build&id=sb-1"}}',
            headers={"content-type": "application/json"},
        ),
        browser.post(
            "/session/delete",
            content=b"csrf="
            + CSRF.encode()
            + b"&session=name%3Dbuild%26id%3Dsb-1&pad="
            + b"x" * 70_000,
            headers={"content-type": "application/x-www-form-urlencoded"},
        ),
    ]
    assert [r.status_code for r in refused] == [403] * 7, [r.text for r in refused]
    assert len(ledger.read_all("build", "sb-1")) == 2
    # Without the cookie, even the right token is refused by the guard.
    stranger = build(ledger, token=TOKEN, host=HOST, source="t", writes=Writes(CSRF))
    from starlette.testclient import TestClient

    assert (
        TestClient(stranger).post("/session/delete", data={**fields, "csrf": CSRF}).status_code
        == 401
    )
    done = browser.post(
        "/session/delete", data={**fields, "csrf": CSRF}, headers={"origin": f"http://{HOST}"}
    )
    assert done.status_code == 200 and "deleted build/sb-1 and all its entries" in done.text
    assert (
        ledger.read_all("build", "sb-1") == []
        and ledger.get_sandbox_details("build", "sb-1") is None
    )
    missing = browser.get("/session/delete", params={"name": "build", "id": "sb-1"})
    assert missing.status_code == 404 and "nothing to delete" in missing.text


def test_a_sweep_is_asked_first_with_its_forecast_then_runs_as_resources_sweep(
    deployed: tuple[SyncResourceRecordStore, list[str]],
    moto_endpoint: str,
    wait_for_indexes: Callable[[], None],
) -> None:
    store, _ = deployed
    stale = store.put(record(age=timedelta(hours=1))).record
    wait_for_indexes()
    collected = Collector()
    runs: list[Any] = []

    def real_sweep() -> Any:
        policy = resolve_sweep(store.descriptor(), store.table_name, require_deployment=True).policy
        later = datetime.now(UTC) + timedelta(minutes=2 * len(runs))  # a window apart
        runs.append(sweep(store, collected, now=later, policy=policy))
        return runs[-1]

    browser = console(
        BlockingAdapter(MemoryAdapter()), resources_of(store), Writes(CSRF, real_sweep)
    )
    assert 'href="/resources/sweep">Sweep now…' in browser.get("/resources").text
    asked = browser.get("/resources/sweep")
    assert "A sweep now expires 0 record(s)" in asked.text and f'value="{CSRF}"' in asked.text
    assert browser.post("/resources/sweep", data={"csrf": "no"}).status_code == 403
    assert runs == [] and store.get(stale.id) is not None
    first = browser.post("/resources/sweep", data={"csrf": CSRF})  # observes it
    assert first.status_code == 200 and "0 expired, 1 skipped, 0 failed" in first.text
    second = browser.post("/resources/sweep", data={"csrf": CSRF})
    assert f"expired {stale.id}: stale: no heartbeat" in html.unescape(second.text)
    assert store.get(stale.id) is None and [e.record.id for e in collected.published] == [stale.id]


def test_a_sweep_that_cannot_run_says_why_and_claims_nothing() -> None:
    def refused() -> Any:
        raise ValueError("event bus gone")

    resources = Resources(store=None, policy=lambda: None)  # type: ignore[arg-type]
    browser = console(BlockingAdapter(MemoryAdapter()), resources, Writes(CSRF, refused))
    answer = browser.post("/resources/sweep", data={"csrf": CSRF})
    assert answer.status_code == 500 and "the sweep did not run: event bus gone" in answer.text


def test_ui_refuses_writes_to_an_export_file_and_to_a_store_of_the_command_alone(
    tmp_path: Any,
) -> None:
    data = tmp_path / "ledger.jsonl"
    data.write_text("")
    runner = CliRunner()
    done = runner.invoke(app, ["ui", str(data), "--allow-writes"])
    assert done.exit_code == 2 and "is an export file, shown read-only" in done.output
    memory = runner.invoke(app, ["--store", "memory://", "ui", "--allow-writes"])
    assert memory.exit_code == 2 and "lives only as long as this command" in memory.output


# -- the command ----------------------------------------------------------------------------------


def opened(url: str) -> tuple[Any, str]:
    """A cookie-keeping opener signed in at ``url`` (the printed one), and the base address."""
    import urllib.request

    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor())
    opener.open(url, timeout=10).read()
    return opener, url.split("/?", 1)[0]


def fetch(opener: Any, address: str, form: dict[str, str] | None = None) -> tuple[int, str]:
    import urllib.error
    from urllib.parse import urlencode

    data = None if form is None else urlencode(form).encode()
    try:
        with opener.open(address, data=data, timeout=30) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def csrf_of(page: str) -> str:
    return form_of(page)["csrf"]


def form_of(page: str) -> dict[str, str]:
    """The hidden fields of the page's form, as a browser sends them."""
    found = re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)">', page)
    assert found, page
    return {key: html.unescape(value) for key, value in found}


def test_ui_allow_writes_deletes_a_session_of_a_sqlite_store_only_when_asked(
    tmp_path: Any,
) -> None:
    """The command opens the store to write only with --allow-writes (read-only otherwise: a
    SQL store is then opened read-only and has no write page)."""
    import signal

    from sandbox_ledger.sqlite import SQLiteAdapter

    from .test_cli_ui import serving

    database = tmp_path / "ledger.db"
    with BlockingAdapter(SQLiteAdapter(database)) as writer:
        writer.append(entry("sb-1", LedgerEvent.SandboxCreated, 1_000))
        writer.append(entry("sb-2", LedgerEvent.SandboxCreated, 2_000))
    store = ["--store", f"sqlite:///{database}", "ui", "--port", "0"]
    for argv, writable in ((store, False), ([*store, "--allow-writes"], True)):
        process, url = serving(argv, tmp_path)
        try:
            opener, base = opened(url)
            ask = f"{base}/session/delete?name=build&id=sb-1"
            code, page = fetch(opener, ask)
            if not writable:
                assert code == 404
                assert fetch(opener, f"{base}/session/delete", {"name": "build", "id": "sb-1"})[
                    0
                ] in (404, 405)
                continue
            assert code == 200 and "Delete build/sb-1 and all its 1 entries?" in page
            form = form_of(page)
            assert fetch(opener, f"{base}/session/delete", {**form, "csrf": "x"})[0] == 403
            code, done = fetch(opener, f"{base}/session/delete", form)
            assert code == 200 and "deleted build/sb-1" in done, done
        finally:
            process.send_signal(signal.SIGINT)
            _, said = process.communicate(timeout=30)
        assert process.returncode == 0, said
        assert ("writes allowed" in said) == writable
    with BlockingAdapter(SQLiteAdapter(database)) as reader:
        assert reader.read_all("build", "sb-1") == [] and len(reader.read_all("build", "sb-2")) == 1


def test_ui_over_a_table_shows_its_resources_and_sweeps_through_the_deployment_s_bus(
    deployed: tuple[SyncResourceRecordStore, list[str]],
    moto_endpoint: str,
    wait_for_indexes: Callable[[], None],
    tmp_path: Any,
) -> None:
    import signal

    from .test_cli_ui import serving

    store, args = deployed
    kept = store.put(record(age=timedelta(seconds=1))).record
    stale = store.put(record(age=timedelta(hours=1))).record
    wait_for_indexes()
    keys = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}
    process, url = serving([*args, "ui", "--port", "0", "--allow-writes"], tmp_path, **keys)
    assert url, process.communicate(timeout=30)
    try:
        opener, base = opened(url)
        code, page = fetch(opener, f"{base}/resources")
        assert code == 200, page
        assert "stale: the next sweep observes it" in row_of(page, stale.id)
        assert "fresh: expires no sooner than" in row_of(page, kept.id)
        code, asked = fetch(opener, f"{base}/resources/sweep")
        assert code == 200 and "A sweep now expires 0 record(s)" in asked
        code, done = fetch(opener, f"{base}/resources/sweep", {"csrf": csrf_of(asked)})
        # The deployment's bus ("default") is moto's: the sweep runs and observes the record.
        assert code == 200 and "0 expired, 1 skipped, 0 failed" in done, done
    finally:
        process.send_signal(signal.SIGINT)
        _, said = process.communicate(timeout=30)
    assert process.returncode == 0, said
    observed = store.get_versioned(stale.id)
    assert observed is not None and observed.observed_at_ms is not None


@pytest.mark.parametrize("text", HOSTILE)
def test_whatever_a_resource_record_holds_is_shown_as_text(
    deployed: tuple[SyncResourceRecordStore, list[str]],
    wait_for_indexes: Callable[[], None],
    text: str,
) -> None:
    store, _ = deployed
    hostile = record(
        provider=text,
        workspace=text,
        identity={"host": text, "bootId": "b", "pidNamespace": 1, "startTime": 2},
        operations=[{"kind": text, "count": 1}],
        lastFailure={
            "kind": text,
            "outcome": "failed",
            "at": "2026-11-30T10:04:00.000Z",
            "error": text,
        },
    )
    store.put(hostile)
    wait_for_indexes()
    browser = console(BlockingAdapter(MemoryAdapter()), resources_of(store), Writes(CSRF))
    for page in (
        browser.get("/resources").text,
        browser.get("/resources", params={"provider": text}).text,
    ):
        assert hostile.id in page
        assert text not in page or text == "javascript:alert(1)"
        assert "<script>alert" not in page and "<img src" not in page
        assert 'href="javascript:' not in page and "\u202e" not in page


@pytest.mark.parametrize("text", HOSTILE)
def test_a_hostile_session_is_asked_about_and_deleted_as_text(text: str) -> None:
    ledger = BlockingAdapter(MemoryAdapter())
    ledger.append(entry(text, LedgerEvent.SandboxCreated, 1_000, name=text))
    browser = console(ledger, writes=Writes(CSRF))
    asked = browser.get("/session/delete", params={"name": text, "id": text}).text
    assert "<script>alert" not in asked and "<img src" not in asked and "\u202e" not in asked
    # The form's hidden fields carry the text exactly: posting them deletes that session.
    form = form_of(asked)
    assert form["csrf"] == CSRF
    done = browser.post("/session/delete", data=form)
    assert done.status_code == 200 and ledger.read_all(text, text) == []
    assert "<script>alert" not in done.text and "<img src" not in done.text


def test_a_forecast_past_its_time_budget_says_at_least_and_calls_the_rest_stale(
    deployed: tuple[SyncResourceRecordStore, list[str]],
    wait_for_indexes: Callable[[], None],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A backlog of stale records larger than a page's forecast reads in its budget: the
    counts are lower bounds, and a stale record it did not reach is not called fresh."""
    from sandbox_ledger.ui import resources as shown

    store, _ = deployed
    stale = [store.put(record(age=timedelta(hours=1))).record.id for _ in range(3)]
    wait_for_indexes()
    monkeypatch.setattr(shown, "BUDGET_MS", 0)
    page = console(BlockingAdapter(MemoryAdapter()), resources_of(store)).get("/resources")
    text = html.unescape(re.sub(r"<[^>]+>", "", page.text))
    assert "A sweep now expires at least 0 record(s)" in text and "a backlog" in text
    for record_id in stale:
        assert "stale: past what this page's forecast read" in row_of(page.text, record_id)

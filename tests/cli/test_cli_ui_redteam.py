"""Red team of the console's resources page and its writes (issue 48): what a read-only
console may never write, what a write needs (its confirmation page's own form), what every
page shows of hostile text, and that every bad request is a clear page, never a 500."""

from __future__ import annotations

import hashlib
import html
import re
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
import pytest

from resources.resource_fixtures import Collector, observed_earlier, record, record_in_shard_of
from sandbox_ledger import LedgerEvent, MemoryAdapter
from sandbox_ledger import keys as k
from sandbox_ledger.blocking import BlockingAdapter
from sandbox_ledger.errors import ThrottledError
from sandbox_ledger.resources import SyncResourceRecordStore, resolve_sweep, sweep
from sandbox_ledger.resources import _items as ri
from sandbox_ledger.ui.resources import Resources
from sandbox_ledger.ui.writes import Writes

from .test_cli_ui import HOST, HOSTILE, entry
from .test_cli_ui_browser import browser  # noqa: F401 - a fixture
from .test_cli_ui_resources import (
    CSRF,
    console,
    deployed,  # noqa: F401 - a fixture
    form_of,
    items,
    resources_of,
    row_of,
)

ORIGIN = f"http://{HOST}"
FORM = {"content-type": "application/x-www-form-urlencoded"}
WRITES = {"PutItem", "UpdateItem", "DeleteItem", "BatchWriteItem", "TransactWriteItems"}


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The name of every request this process's boto3 clients make (a write among them is
    a write, whatever it leaves behind)."""
    from botocore.client import BaseClient

    made: list[str] = []
    original = BaseClient._make_api_call

    def counted(self: Any, operation: str, params: Any) -> Any:
        made.append(operation)
        return original(self, operation, params)

    monkeypatch.setattr(BaseClient, "_make_api_call", counted)
    return made


def sessions(*names: tuple[str, str]) -> BlockingAdapter:
    ledger = BlockingAdapter(MemoryAdapter())
    for name, sandbox_id in names:
        ledger.append(entry(sandbox_id, LedgerEvent.SandboxCreated, 1_000, name=name))
        ledger.append(entry(sandbox_id, LedgerEvent.ExecStarted, 1_100, 0, name=name))
    return ledger


def never() -> Any:
    raise AssertionError("no sweep runs here")


def text_of(page: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", " ", page))


# -- 1. a read-only console writes nothing --------------------------------------------------------

CRAFTED = [
    "/",
    "/?cursor=garbage",
    "/?cursor=eyJ2IjoxfQ",
    "/?status=asleep",
    "/?before=yesterday",
    "/?name=%00&cursor=x",
    "/session?name=build&id=sb-1",
    "/session?name=&id=",
    "/session/svg?name=build&id=sb-1",
    "/session/delete?name=build&id=sb-1",
    "/resources",
    "/resources?phase=asleep",
    "/resources?phase=ready&cursor=garbage",
    "/resources?cursor=eyJ2IjoxfQ",
    "/resources?provider=%3Cscript%3E",
    "/resources?phase=cleanup-failed&provider=docker",
    "/resources/sweep",
    "/environments",
    "/changes",
    "/nowhere",
]


@pytest.mark.parametrize("writable", [False, True])
def test_a_console_over_a_table_sends_no_write_whatever_it_is_asked_without_its_form(
    deployed: tuple[SyncResourceRecordStore, list[str]],  # noqa: F811
    moto_endpoint: str,
    wait_for_indexes: Callable[[], None],
    calls: list[str],
    writable: bool,
) -> None:
    """Every route, every method, crafted queries: no write request reaches DynamoDB (a
    stale record no sweep has observed stays unobserved) and no answer is a 500. So too with
    --allow-writes (its confirm pages asked, by GET and HEAD) but for a form without the
    token."""
    from sandbox_ledger.dynamodb.adapter import SyncDynamoDBAdapter

    store, _ = deployed
    client = boto3.client("dynamodb", endpoint_url=moto_endpoint, region_name="us-east-1")
    ledger = SyncDynamoDBAdapter(store.table_name, endpoint_url=moto_endpoint)
    ledger.append(entry("sb-1", LedgerEvent.SandboxCreated, 1_000))
    stale = store.put(record(age=timedelta(hours=1))).record
    store.put(record(age=timedelta(seconds=1)))
    wait_for_indexes()
    before = items(client, store.table_name)
    tab = console(ledger, resources_of(store), Writes(CSRF, never) if writable else None)
    calls.clear()
    answers = []
    form = {"csrf": "forged" if writable else CSRF, "session": "name=build&id=sb-1"}
    for path in CRAFTED:
        for method in ("GET", "HEAD", "POST", "PUT", "DELETE", "PATCH"):
            answer = tab.request(method, path, data=form)
            answers.append((method, path, answer.status_code))
    if writable:
        assert ("GET", "/resources/sweep", 200) in answers
        assert ("HEAD", "/session/delete?name=build&id=sb-1", 200) in answers
        assert ("POST", "/session/delete?name=build&id=sb-1", 403) in answers
        assert ("POST", "/resources/sweep", 403) in answers
    assert [a for a in answers if a[2] >= 500] == []
    assert not WRITES & set(calls), sorted(set(calls))
    assert "Query" in calls or "GetItem" in calls  # it did read
    assert items(client, store.table_name) == before
    unobserved = store.get_versioned(stale.id)
    assert unobserved is not None and unobserved.observed_at_ms is None
    assert len(ledger.read_all("build", "sb-1")) == 1
    ledger.close()


def _digest(folder: Path) -> dict[str, str]:
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in folder.iterdir() if p.is_file()
    }


def test_a_read_only_console_over_sqlite_changes_no_byte_of_its_files(tmp_path: Path) -> None:
    """The command over a SQL store without --allow-writes: every route and method, then
    the database's folder is as it was (no file added, none changed)."""
    import signal
    import urllib.error
    import urllib.request

    from sandbox_ledger.sqlite import SQLiteAdapter

    from .test_cli_ui import serving
    from .test_cli_ui_resources import opened

    folder = tmp_path / "db"
    folder.mkdir()
    database = folder / "ledger.db"
    with BlockingAdapter(SQLiteAdapter(database)) as writer:
        writer.append(entry("sb-1", LedgerEvent.SandboxCreated, 1_000))
    before = _digest(folder)
    process, url = serving(["--store", f"sqlite:///{database}", "ui", "--port", "0"], tmp_path)
    codes = []
    try:
        opener, base = opened(url)
        for path in CRAFTED:
            for method in ("GET", "HEAD", "POST", "PUT", "DELETE"):
                body = b"csrf=x&session=name%3Dbuild%26id%3Dsb-1" if method != "GET" else None
                asked = urllib.request.Request(base + path, data=body, method=method)
                try:
                    with opener.open(asked, timeout=30) as answer:
                        codes.append((method, path, answer.status))
                except urllib.error.HTTPError as exc:
                    codes.append((method, path, exc.code))
    finally:
        process.send_signal(signal.SIGINT)
        _, said = process.communicate(timeout=30)
    assert process.returncode == 0, said
    assert [c for c in codes if c[2] >= 500] == [], codes
    assert _digest(folder) == before
    with BlockingAdapter(SQLiteAdapter(database)) as reader:
        assert len(reader.read_all("build", "sb-1")) == 1


def test_a_store_opened_read_only_refuses_a_delete_even_through_a_write_route(
    tmp_path: Path,
) -> None:
    """Someone adds the write routes to a console whose SQL store is opened read-only: the
    POST fails with a page that says so, and the session is all there."""
    from sandbox_ledger.sqlite import SQLiteAdapter
    from sandbox_ledger.stores import open_store

    database = tmp_path / "ledger.db"
    with BlockingAdapter(SQLiteAdapter(database)) as writer:
        writer.append(entry("sb-1", LedgerEvent.SandboxCreated, 1_000))
    with BlockingAdapter(open_store(f"sqlite:///{database}", read_only=True)) as reader:
        tab = console(reader, writes=Writes(CSRF))
        asked = tab.get("/session/delete", params={"name": "build", "id": "sb-1"})
        done = tab.post("/session/delete", data=form_of(asked.text))
        assert done.status_code == 500, done.text
        said = text_of(done.text)
        assert "nothing deleted:" in said and "read_only, a write is refused" in said, said
        assert len(reader.read_all("build", "sb-1")) == 1
    with BlockingAdapter(SQLiteAdapter(database)) as again:
        assert len(again.read_all("build", "sb-1")) == 1


# -- 2. nothing is deleted without the confirmation page's own form ------------------------------


def asked_form(tab: Any, name: str = "build", sandbox_id: str = "sb-1") -> dict[str, str]:
    page = tab.get("/session/delete", params={"name": name, "id": sandbox_id})
    assert page.status_code == 200, page.text
    return form_of(page.text)


def body(fields: list[tuple[str, str]]) -> bytes:
    from urllib.parse import urlencode

    return urlencode(fields).encode()


def test_every_forged_delete_is_refused_and_deletes_nothing() -> None:
    ledger = sessions(("build", "sb-1"))
    tab = console(ledger, writes=Writes(CSRF))
    form = asked_form(tab)
    session = form["session"]
    good = [("csrf", CSRF), ("session", session)]
    attempts: dict[str, tuple[bytes | Iterator[bytes], dict[str, str]]] = {
        "no csrf": (body([("session", session)]), FORM),
        "empty csrf": (body([("csrf", ""), ("session", session)]), FORM),
        "a csrf of another case": (body([("csrf", CSRF.upper()), ("session", session)]), FORM),
        "a csrf with a space": (body([("csrf", CSRF + " "), ("session", session)]), FORM),
        "the csrf twice, the right one last": (body([("csrf", "x"), *good]), FORM),
        "the csrf twice, the right one first": (body([*good, ("csrf", "x")]), FORM),
        "the session twice": (body([*good, ("session", "name=other&id=sb-9")]), FORM),
        "text/plain": (body(good), {"content-type": "text/plain"}),
        "multipart": (
            b'--b\r\ncontent-disposition: form-data; name="csrf"\r\n\r\n'
            + CSRF.encode()
            + b'\r\n--b\r\ncontent-disposition: form-data; name="session"\r\n\r\n'
            + session.encode()
            + b"\r\n--b--\r\n",
            {"content-type": "multipart/form-data; boundary=b"},
        ),
        "no content type": (body(good), {}),
        "json": (
            f'{{"csrf": "{CSRF}", "session": "{session}"}}'.encode(),
            {"content-type": "application/json"},
        ),
        "utf-16": (
            "&".join(f"{k_}={v}" for k_, v in good).encode("utf-16"),
            {"content-type": "application/x-www-form-urlencoded; charset=utf-16"},
        ),
        "not a form": (b"csrf" + b"=" * 3 + b"&&&", FORM),
        "origin null": (body(good), {**FORM, "origin": "null"}),
        "another origin": (body(good), {**FORM, "origin": "http://127.0.0.1.evil.example"}),
        "another port": (body(good), {**FORM, "origin": "http://testserver:1"}),
        "https of this host": (body(good), {**FORM, "origin": "https://testserver"}),
        "a referer of another site": (
            body(good),
            {**FORM, "referer": "http://evil.example/form.html"},
        ),
        "a huge chunked body": (iter([body(good) + b"&pad="] + [b"x" * 8192] * 1024), FORM),
    }
    refused = {}
    for what, (content, headers) in attempts.items():
        answer = tab.post("/session/delete", content=content, headers=headers)
        refused[what] = answer.status_code
        assert len(ledger.read_all("build", "sb-1")) == 2, what
    assert refused == dict.fromkeys(attempts, 403), refused
    # A GET with the POST's fields only asks.
    got = tab.get("/session/delete", params={"csrf": CSRF, "session": session})
    assert got.status_code in (400, 404) and len(ledger.read_all("build", "sb-1")) == 2
    got = tab.get(
        "/session/delete", params={"csrf": CSRF, "session": session, "name": "build", "id": "sb-1"}
    )
    assert got.status_code == 200 and len(ledger.read_all("build", "sb-1")) == 2
    # The page's own form, chunked, with this origin and a charset: deleted.
    done = tab.post(
        "/session/delete",
        content=iter([body(good)[:5], body(good)[5:]]),
        headers={
            "content-type": "application/x-www-form-urlencoded; charset=UTF-8",
            "origin": ORIGIN,
        },
    )
    assert done.status_code == 200, done.text
    assert ledger.read_all("build", "sb-1") == []


SIBLINGS = [
    ("a&id=b", "c"),
    ("a", "b&id=c"),
    ("a=b", "c"),
    ("a%26id%3Db", "c"),
    ("a+b", "c"),
    ("a b", "c"),
    ("ä\u202e名", "c\u0301"),
    ("a;id=b", "c"),
]


@pytest.mark.parametrize(("name", "sandbox_id"), SIBLINGS)
def test_a_session_named_like_a_form_deletes_that_session_and_no_other(
    name: str, sandbox_id: str
) -> None:
    others = [("a", "b"), ("a", "c"), ("a b", "c"), ("a+b", "c"), ("a", "b&id=c"), ("a&id=b", "c")]
    ledger = sessions((name, sandbox_id), *[o for o in others if o != (name, sandbox_id)])
    tab = console(ledger, writes=Writes(CSRF))
    form = asked_form(tab, name, sandbox_id)
    assert form["session"].isascii()
    done = tab.post("/session/delete", data=form, headers={"origin": ORIGIN})
    assert done.status_code == 200, done.text
    assert ledger.read_all(name, sandbox_id) == []
    for other in others:
        if other != (name, sandbox_id):
            assert len(ledger.read_all(*other)) == 2, other


@pytest.mark.parametrize(
    "session",
    ["", "name=&id=", "name=build", "id=sb-1", "name=build&id=", "%", "name=build&id=sb-1&id="],
)
def test_a_crafted_session_field_is_a_clear_refusal(session: str) -> None:
    ledger = sessions(("build", "sb-1"))
    tab = console(ledger, writes=Writes(CSRF))
    done = tab.post(
        "/session/delete", data={"csrf": CSRF, "session": session}, headers={"origin": ORIGIN}
    )
    assert 400 <= done.status_code < 500, done.text
    assert len(ledger.read_all("build", "sb-1")) == 2


def test_a_double_submit_says_the_second_deleted_nothing() -> None:
    """Two tabs confirm the same delete (or a button pressed twice): the second is told
    there was nothing left to delete, as `rm` says, never "deleted"."""
    ledger = sessions(("build", "sb-1"))
    tab = console(ledger, writes=Writes(CSRF))
    form = asked_form(tab)
    first = tab.post("/session/delete", data=form, headers={"origin": ORIGIN})
    assert first.status_code == 200 and "deleted build/sb-1" in first.text
    second = tab.post("/session/delete", data=form, headers={"origin": ORIGIN})
    assert second.status_code == 404, second.text
    assert "nothing to delete" in second.text and "deleted build" not in second.text


def test_a_session_that_grew_since_it_was_asked_about_is_asked_again() -> None:
    """The confirmation named the entries it would delete ("all its 2 entries"); the session
    grew meanwhile (it runs): the POST deletes nothing and asks again."""
    ledger = sessions(("build", "sb-1"))
    tab = console(ledger, writes=Writes(CSRF))
    form = asked_form(tab)
    ledger.append(entry("sb-1", LedgerEvent.ExecComplete, 1_200, 0))
    done = tab.post("/session/delete", data=form, headers={"origin": ORIGIN})
    assert done.status_code == 409, done.text
    assert "3 entries now" in text_of(done.text)
    assert len(ledger.read_all("build", "sb-1")) == 3
    again = asked_form(tab)
    assert tab.post("/session/delete", data=again).status_code == 200
    assert ledger.read_all("build", "sb-1") == []


# -- 3. hostile text on the new pages -------------------------------------------------------------


def clean(page: str) -> None:
    assert "<script>alert" not in page and "<img src" not in page
    assert 'href="javascript:' not in page
    for hidden in ("\u202e", "\u200b", "\x1b", "\x85", "\ufeff"):
        assert hidden not in page, repr(hidden)


@pytest.mark.parametrize("text", [*HOSTILE, "a\u200bb\x1b[31m\x85\ufeff"])
def test_the_sweep_s_confirm_and_done_pages_show_hostile_records_as_text(
    deployed: tuple[SyncResourceRecordStore, list[str]],  # noqa: F811
    moto_endpoint: str,
    wait_for_indexes: Callable[[], None],
    text: str,
) -> None:
    store, _ = deployed
    hostile = record(
        age=timedelta(hours=1),
        provider=text,
        workspace=text,
        identity={"host": text, "bootId": text, "pidNamespace": 1, "startTime": 2},
        operations=[{"kind": text, "count": 1}],
        lastFailure={"kind": text, "outcome": "failed", "at": "2026-11-30T10:04:00.000Z"},
    )
    store.put(hostile)
    wait_for_indexes()
    store_now = datetime.now(UTC)
    policy = resolve_sweep(store.descriptor(), store.table_name, require_deployment=True).policy
    sweep(store, None, now=store_now - timedelta(minutes=2), policy=policy, dry_run=True)
    collected = Collector()

    def real() -> Any:
        return sweep(store, collected, now=datetime.now(UTC), policy=policy)

    tab = console(BlockingAdapter(MemoryAdapter()), resources_of(store), Writes(CSRF, real))
    for page in (
        tab.get("/resources").text,
        tab.get("/resources", params={"provider": text}).text,
        tab.get("/resources", params={"provider": text, "phase": "ready"}).text,
    ):
        clean(page)
    asked = tab.get("/resources/sweep")
    assert hostile.id in asked.text and "A sweep now expires 1 record(s)" in asked.text
    clean(asked.text)
    done = tab.post("/resources/sweep", data=form_of(asked.text), headers={"origin": ORIGIN})
    assert done.status_code == 200 and f"expired {hostile.id}" in done.text, done.text
    clean(done.text)


@pytest.mark.parametrize("text", [*HOSTILE, "a\u200bb\x1b[31m\x85\ufeff"])
def test_a_hostile_session_s_confirm_and_done_pages_show_it_as_text(text: str) -> None:
    ledger = sessions((text, text))
    tab = console(ledger, writes=Writes(CSRF))
    asked = tab.get("/session/delete", params={"name": text, "id": text})
    clean(asked.text)
    done = tab.post("/session/delete", data=form_of(asked.text), headers={"origin": ORIGIN})
    assert done.status_code == 200
    clean(done.text)
    again = tab.post("/session/delete", data=form_of(asked.text), headers={"origin": ORIGIN})
    clean(again.text)
    problem = tab.post(
        "/session/delete",
        data={"csrf": CSRF, "session": f"name={text}&id="},
        headers={"origin": ORIGIN},
    )
    clean(problem.text)


def test_an_unreadable_record_s_reason_is_shown_as_text(
    deployed: tuple[SyncResourceRecordStore, list[str]],  # noqa: F811
    moto_endpoint: str,
    wait_for_indexes: Callable[[], None],
) -> None:
    from resources.test_resources_expiry import _raw_item

    store, _ = deployed
    client = boto3.client("dynamodb", endpoint_url=moto_endpoint, region_name="us-east-1")
    bad, item = _raw_item(timedelta(hours=2), body={"<script>alert(1)</script>\u202e": "x"})
    client.put_item(TableName=store.table_name, Item=item)
    wait_for_indexes()
    page = console(BlockingAdapter(MemoryAdapter()), resources_of(store)).get("/resources")
    assert page.status_code == 200
    clean(page.text)
    assert "this version cannot read it" in row_of(page.text, bad)


# -- 4. the forecast is the sweep's own; every bad request a clear page --------------------------


def test_the_forecast_of_claimed_and_past_ttl_records_is_what_a_sweep_then_does(
    deployed: tuple[SyncResourceRecordStore, list[str]],  # noqa: F811
    moto_endpoint: str,
    wait_for_indexes: Callable[[], None],
) -> None:
    store, _ = deployed
    client = boto3.client("dynamodb", endpoint_url=moto_endpoint, region_name="us-east-1")
    policy = resolve_sweep(store.descriptor(), store.table_name, require_deployment=True).policy
    held = store.put(record(age=timedelta(hours=1))).record
    lapsed = store.put(record(age=timedelta(hours=1))).record
    past_ttl = store.put(record(age=timedelta(hours=1))).record
    wait_for_indexes()
    now_ms = int(datetime.now(UTC).timestamp() * 1000)
    for claimed, until in ((held, now_ms + 600_000), (lapsed, now_ms - 600_000)):
        versioned = store.get_versioned(claimed.id)
        assert versioned is not None
        store.claim(versioned, "stale: test", owner="another", now_ms=now_ms, until_ms=until)
    client.update_item(
        TableName=store.table_name,
        Key=ri.record_key(past_ttl.id),
        UpdateExpression="SET #ttl = :t",
        ExpressionAttributeNames={"#ttl": k.TTL_ATTRIBUTE},
        ExpressionAttributeValues={":t": {"N": str(now_ms // 1000 - 3600)}},
    )
    wait_for_indexes()
    before = items(client, store.table_name)
    page = console(BlockingAdapter(MemoryAdapter()), resources_of(store)).get("/resources")
    assert page.status_code == 200, page.text
    assert items(client, store.table_name) == before
    assert "claimed by a sweep" in row_of(page.text, held.id)
    assert "claimed by a sweep" in row_of(page.text, lapsed.id)
    forecast = re.search(r"A sweep now expires <strong>(\d+)</strong>", page.text)
    assert forecast, page.text
    done = sweep(store, Collector(), now=datetime.now(UTC), policy=policy)
    assert int(forecast.group(1)) == len(done.expired), (forecast.group(1), done)
    assert held.id not in done.expired and lapsed.id in done.expired


def test_bad_queries_are_400_pages_naming_the_field(
    deployed: tuple[SyncResourceRecordStore, list[str]],  # noqa: F811
    moto_endpoint: str,
    table_name: str,
    wait_for_indexes: Callable[[], None],
) -> None:
    store, args = deployed
    for _ in range(60):
        store.put(record())
    wait_for_indexes()
    tab = console(BlockingAdapter(MemoryAdapter()), resources_of(store))
    first = tab.get("/resources", params={"phase": "ready"})
    link = re.search(r'<a href="/resources\?([^"]+)">next page</a>', first.text)
    assert link, first.text
    from urllib.parse import parse_qsl

    cursor = dict(parse_qsl(html.unescape(link.group(1))))["cursor"]
    cases = {
        "phase": {"phase": "asleep"},
        "phase ": {"phase": "READY"},
        "cursor": {"cursor": "garbage"},
        "cursor ": {"cursor": "%%%"},
        "cursor  ": {"cursor": cursor},  # of the listing of phase ready
        "cursor   ": {"phase": "closing", "cursor": cursor},
        "cursor    ": {"cursor": cursor[:-4] + "AAAA"},
        "cursor     ": {"cursor": "x" * 6_000},
    }
    for field, query in cases.items():
        answer = tab.get("/resources", params=query)
        assert answer.status_code == 400, (query, answer.text[:300])
        assert field.strip() in text_of(answer.text), (field, text_of(answer.text))
    # A cursor of another table.
    other_name = table_name + "-other"
    other = SyncResourceRecordStore(other_name, endpoint_url=moto_endpoint)
    from typer.testing import CliRunner

    from sandbox_ledger.cli import app

    other_args = ["--table", other_name, *args[2:]]
    assert CliRunner().invoke(app, [*other_args, "table", "create"]).exit_code == 0
    try:
        other_browser = console(BlockingAdapter(MemoryAdapter()), resources_of(other))
        answer = other_browser.get("/resources", params={"phase": "ready", "cursor": cursor})
        assert answer.status_code == 400 and "cursor" in text_of(answer.text)
    finally:
        boto3.client("dynamodb", endpoint_url=moto_endpoint, region_name="us-east-1").delete_table(
            TableName=other_name
        )


def test_a_partial_or_unreadable_descriptor_is_a_page_saying_so(
    deployed: tuple[SyncResourceRecordStore, list[str]],  # noqa: F811
    moto_endpoint: str,
    wait_for_indexes: Callable[[], None],
) -> None:
    from sandbox_ledger.deployment import descriptor_key

    store, _ = deployed
    kept = store.put(record()).record
    wait_for_indexes()
    client = boto3.client("dynamodb", endpoint_url=moto_endpoint, region_name="us-east-1")
    tab = console(BlockingAdapter(MemoryAdapter()), resources_of(store), Writes(CSRF, never))
    client.update_item(
        TableName=store.table_name,
        Key=descriptor_key(),
        UpdateExpression="REMOVE #s",
        ExpressionAttributeNames={"#s": k.DESCRIPTOR_STALE_AFTER},
    )
    page = tab.get("/resources")
    assert page.status_code == 200 and "no forecast" in page.text, page.text
    assert "no forecast" in row_of(page.text, kept.id)
    asked = tab.get("/resources/sweep")
    assert asked.status_code == 400 and "no sweep" in asked.text
    client.update_item(
        TableName=store.table_name,
        Key=descriptor_key(),
        UpdateExpression="SET #s = :bad",
        ExpressionAttributeNames={"#s": k.DESCRIPTOR_STALE_AFTER},
        ExpressionAttributeValues={":bad": {"S": "soon"}},
    )
    page = tab.get("/resources")
    assert page.status_code == 200 and "no forecast" in row_of(page.text, kept.id)
    assert "unreadable deployment descriptor" in text_of(page.text), page.text
    asked = tab.get("/resources/sweep")
    assert asked.status_code == 400 and "unreadable deployment descriptor" in text_of(asked.text)


# -- 5. errors of a sweep or a store: said, never a 500 traceback --------------------------------


class Throttled:
    """A record store whose every read is throttled (as DynamoDB's, retries spent)."""

    table_name = "t"

    def __getattr__(self, name: str) -> Any:
        def refused(*_: Any, **__: Any) -> Any:
            raise ThrottledError("throttled: ProvisionedThroughputExceededException")

        return refused


def test_a_throttled_table_is_a_page_saying_so_never_a_500() -> None:
    from sandbox_ledger.resources import ExpiryPolicy

    resources = Resources(Throttled(), ExpiryPolicy)  # type: ignore[arg-type]

    def sweeping() -> Any:
        raise ThrottledError("throttled: ProvisionedThroughputExceededException")

    tab = console(BlockingAdapter(MemoryAdapter()), resources, Writes(CSRF, sweeping))
    for answer in (
        tab.get("/resources"),
        tab.get("/resources", params={"phase": "ready"}),
        tab.get("/resources/sweep"),
        tab.post("/resources/sweep", data={"csrf": CSRF}),
    ):
        assert answer.status_code == 503, answer.text
        assert "throttled" in answer.text


def test_a_sweep_refused_by_aws_says_why_and_claims_nothing(
    deployed: tuple[SyncResourceRecordStore, list[str]],  # noqa: F811
    wait_for_indexes: Callable[[], None],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The deployment's bus cannot be described (access denied, throttled), or there are no
    credentials: the done page says why; no record is claimed."""
    from botocore.exceptions import ClientError, NoCredentialsError

    from sandbox_ledger.cli import resource_commands
    from sandbox_ledger.cli.context import Target
    from sandbox_ledger.cli.ui_command import _sweeper

    store, args = deployed
    stale = store.put(record(age=timedelta(hours=1))).record
    wait_for_indexes()
    target = Target(table=store.table_name, endpoint_url=args[3], region="us-east-1", profile=None)
    errors = {
        "access denied": ClientError(
            {"Error": {"Code": "AccessDeniedException", "Message": "no"}}, "DescribeEventBus"
        ),
        "throttled": ClientError(
            {"Error": {"Code": "ThrottlingException", "Message": "slow"}}, "DescribeEventBus"
        ),
        "Unable to locate credentials": NoCredentialsError(),
    }
    for why, error in errors.items():

        def refuse(*_: Any, error: Exception = error) -> None:
            raise error

        monkeypatch.setattr(resource_commands, "_require_bus", refuse)
        tab = console(
            BlockingAdapter(MemoryAdapter()), resources_of(store), Writes(CSRF, _sweeper(target))
        )
        answer = tab.post("/resources/sweep", data={"csrf": CSRF}, headers={"origin": ORIGIN})
        said = text_of(answer.text)
        assert "the sweep did not run: " in said and why in said, said
        assert answer.status_code == (503 if why == "throttled" else 500), said
        versioned = store.get_versioned(stale.id)
        assert versioned is not None
        assert versioned.expiring is None and versioned.observed_at_ms is None


def test_a_sweep_throttled_part_way_gives_its_claims_back_before_raising() -> None:
    """A store throttled at the third claim of a page (retries spent): the two records the
    run claimed before are released (their owners are not locked out for a lease), nothing
    is published, and the error goes up."""
    from resources.test_resources_sweeper import LATER, NOW, FakePublisher, FakeStore

    class ThrottledThird(FakeStore):
        throttled = False

        def claim(self, judged: Any, reason: str, **kw: Any) -> Any:
            if len(self.claims) == 2 and not self.throttled:
                self.throttled = True
                raise ThrottledError("throttled after retries")
            return super().claim(judged, reason, **kw)

    store = ThrottledThird()
    ids = [store.add(timedelta(hours=1)) for _ in range(3)]
    sweep(store, FakePublisher(), now=NOW)  # observes them
    published = FakePublisher()
    with pytest.raises(ThrottledError):
        sweep(store, published, now=LATER + timedelta(minutes=1))
    assert len(store.claims) == 2 and published.published == []
    assert [store.records[i].expiring for i in ids] == [None, None, None]
    released = sorted(store.claims)
    again = sweep(store, FakePublisher(), now=LATER + timedelta(minutes=2))
    # The one never claimed expires; the released ones (a new revision) are watched anew.
    assert again.expired == sorted(set(ids) - set(released))
    assert sorted(again.observed) == released


def test_the_console_s_sweep_throttled_part_way_says_so_and_leaves_nothing_claimed(
    deployed: tuple[SyncResourceRecordStore, list[str]],  # noqa: F811
    moto_endpoint: str,
    wait_for_indexes: Callable[[], None],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from sandbox_ledger.cli.context import Target
    from sandbox_ledger.cli.ui_command import _sweeper

    store, args = deployed
    boto3.client("dynamodb", endpoint_url=moto_endpoint, region_name="us-east-1")
    first = record(age=timedelta(hours=1))
    second = record_in_shard_of("ready", first.id)  # one page of the sweep: one shard
    second = second.model_copy(
        update={"updated_at": first.updated_at, "created_at": first.created_at}
    )
    stale = [store.put(first).record.id, store.put(second).record.id]
    wait_for_indexes()
    for record_id in stale:  # observed more than a window (60 s) ago
        observed_earlier(store, store.get_versioned(record_id), timedelta(seconds=61))
    wait_for_indexes()
    claim = SyncResourceRecordStore.claim
    made: list[str] = []

    def throttled_second(self: Any, judged: Any, *more: Any, **kw: Any) -> Any:
        if made:
            raise ThrottledError("claim: throttled after retries (ThrottlingException)")
        made.append(judged.record.id)
        return claim(self, judged, *more, **kw)

    monkeypatch.setattr(SyncResourceRecordStore, "claim", throttled_second)
    target = Target(table=store.table_name, endpoint_url=args[3], region="us-east-1", profile=None)
    tab = console(
        BlockingAdapter(MemoryAdapter()), resources_of(store), Writes(CSRF, _sweeper(target))
    )
    answer = tab.post("/resources/sweep", data={"csrf": CSRF}, headers={"origin": ORIGIN})
    said = text_of(answer.text)
    assert answer.status_code == 503, said
    assert "the sweep stopped part way: claim: throttled" in said and "nothing is left" in said
    assert len(made) == 1  # one claimed, then the other throttled: the first given back
    for record_id in stale:
        kept = store.get_versioned(record_id)
        assert kept is not None and kept.expiring is None, record_id


# -- 6. the rest: two tabs, a live page's session, a server stopped during a POST -----------------


def test_two_tabs_confirming_one_delete_at_once_delete_it_once() -> None:
    """Two POSTs of the same confirmation at once (two tabs): one deletes, the other finds
    nothing to delete; neither reports a delete it did not do."""
    import threading
    import time

    ledger = sessions(("build", "sb-1"))
    slow = ledger.delete_sandbox

    def delete_slowly(name: str, sandbox_id: str) -> None:
        time.sleep(0.3)
        slow(name, sandbox_id)

    ledger.delete_sandbox = delete_slowly  # type: ignore[method-assign]
    tab = console(ledger, writes=Writes(CSRF))
    form = asked_form(tab)
    codes: list[int] = []

    def post() -> None:
        codes.append(tab.post("/session/delete", data=form).status_code)

    threads = [threading.Thread(target=post) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert sorted(codes) == [200, 404] and ledger.read_all("build", "sb-1") == []


def test_write_pages_answer_head_and_other_methods_without_writing() -> None:
    ledger = sessions(("build", "sb-1"))
    tab = console(ledger, writes=Writes(CSRF))
    form = asked_form(tab)
    for method in ("HEAD", "PUT", "DELETE", "PATCH", "OPTIONS"):
        answer = tab.request(
            method, "/session/delete", params={"name": "build", "id": "sb-1"}, data=form
        )
        assert answer.status_code in (200, 405), (method, answer.status_code)
    assert tab.head("/resources/sweep").status_code == 404  # no resource records
    assert len(ledger.read_all("build", "sb-1")) == 2


@pytest.mark.parametrize("name", ["a\u200bb", "\u202etxt.exe", "a&id=b", "tab\there", "a+b %"])
def test_a_live_page_follows_the_very_session_it_shows(name: str) -> None:
    """The page shows hidden characters as escapes; the session it follows live (and the
    delete it links to) is the one named, exactly."""
    from urllib.parse import parse_qs

    from starlette.testclient import TestClient

    from sandbox_ledger.ui.app import build

    from .test_cli_ui import TOKEN

    ledger = BlockingAdapter(MemoryAdapter())
    ledger.append(entry("sb\u200b1", LedgerEvent.SandboxCreated, 1_000, name=name))

    async def follower(_: str, __: str) -> Any:
        yield None

    application = build(
        ledger, token=TOKEN, host=HOST, source="t", follower=follower, writes=Writes(CSRF)
    )
    tab = TestClient(application, follow_redirects=False)
    tab.get(f"/?token={TOKEN}")
    page = tab.get("/session", params={"name": name, "id": "sb\u200b1"}).text
    clean(page)
    for found in (
        re.search(r'data-query="([^"]*)"', page),
        re.search(r'href="/session/delete\?([^"]*)"', page),
    ):
        assert found, page
        query = html.unescape(found.group(1))
        assert query.isascii()
        assert parse_qs(query) == {"name": [name], "id": ["sb\u200b1"]}


def test_a_server_stopped_during_a_slow_delete_post_deletes_nothing_and_stops(
    tmp_path: Path,
) -> None:
    """A POST whose body is still coming (a slow client) holds no other page up, and a
    Ctrl-C then stops the server within seconds, the session untouched."""
    import signal
    import socket
    import time
    import urllib.request

    from sandbox_ledger.sqlite import SQLiteAdapter

    from .test_cli_ui import serving
    from .test_cli_ui_resources import fetch, opened

    database = tmp_path / "ledger.db"
    with BlockingAdapter(SQLiteAdapter(database)) as writer:
        writer.append(entry("sb-1", LedgerEvent.SandboxCreated, 1_000))
    argv = ["--store", f"sqlite:///{database}", "ui", "--port", "0", "--allow-writes"]
    process, url = serving(argv, tmp_path)
    try:
        opener, base = opened(url)
        code, asked = fetch(opener, f"{base}/session/delete?name=build&id=sb-1")
        assert code == 200
        data = body(list(form_of(asked).items()))
        jar = [h for h in opener.handlers if isinstance(h, urllib.request.HTTPCookieProcessor)]
        cookies = "; ".join(f"{c.name}={c.value}" for c in jar[0].cookiejar)
        host = base.removeprefix("http://")
        address, port = host.split(":")
        slow = socket.create_connection((address, int(port)), timeout=10)
        slow.sendall(
            (
                f"POST /session/delete HTTP/1.1\r\nHost: {host}\r\nCookie: {cookies}\r\n"
                f"Origin: {base}\r\nContent-Type: application/x-www-form-urlencoded\r\n"
                f"Content-Length: {len(data)}\r\n\r\n"
            ).encode()
            + data[:-3]
        )
        started = time.monotonic()
        assert fetch(opener, f"{base}/")[0] == 200  # other pages are served meanwhile
        assert time.monotonic() - started < 5
        process.send_signal(signal.SIGINT)
        _, said = process.communicate(timeout=15)
        slow.close()
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate(timeout=30)
    assert process.returncode == 0, said
    with BlockingAdapter(SQLiteAdapter(database)) as reader:
        assert len(reader.read_all("build", "sb-1")) == 1


def test_a_live_page_of_a_session_named_with_hidden_characters_grows_in_a_browser(
    browser: Any,  # noqa: F811 - the fixture
    tmp_path: Path,
) -> None:
    """In Chromium: the live page of a session whose name and id hold a zero-width space
    and a bidirectional override follows that session (its new exec bar appears)."""
    import signal
    from urllib.parse import urlencode

    from playwright.sync_api import expect

    from sandbox_ledger.sqlite import SQLiteAdapter

    from .test_cli_ui import serving

    name, sandbox_id = "build\u200b", "sb\u202e1"
    database = tmp_path / "ledger.db"
    writer = BlockingAdapter(SQLiteAdapter(database))
    writer.append(entry(sandbox_id, LedgerEvent.SandboxCreated, 1_000, name=name))
    server, url = serving(["--store", f"sqlite:///{database}", "ui", "--port", "0"], tmp_path)
    try:
        base, token = url.split("/?token=", 1)
        page = browser.new_page()
        page.goto(f"{base}/session?" + urlencode({"name": name, "id": sandbox_id, "token": token}))
        page.wait_for_selector("svg.timeline")
        expect(page.locator("#live")).to_have_count(1)
        assert page.locator("rect.exec").count() == 0
        time.sleep(0.3)  # the page's event stream opens
        writer.append(entry(sandbox_id, LedgerEvent.ExecStarted, 1_100, 0, name=name))
        expect(page.locator("rect.exec")).to_have_count(1, timeout=3_000)
    finally:
        server.send_signal(signal.SIGINT)
        _, said = server.communicate(timeout=30)
        writer.close()
    assert server.returncode == 0, said


def test_the_forecast_of_a_mixed_table_is_what_the_next_real_sweep_does(
    deployed: tuple[SyncResourceRecordStore, list[str]],  # noqa: F811
    moto_endpoint: str,
    wait_for_indexes: Callable[[], None],
) -> None:
    """Stale live records, one dated an hour ahead (its owner's clock), a failed record past
    its retention and one within it, fresh ones: the page's counts and verdicts are what the
    next real sweep then does (the stale ones observed, none expired yet), and the page wrote
    nothing."""
    store, _ = deployed
    client = boto3.client("dynamodb", endpoint_url=moto_endpoint, region_name="us-east-1")
    policy = resolve_sweep(store.descriptor(), store.table_name, require_deployment=True).policy
    ahead = store.put(record(age=-timedelta(hours=1))).record.id
    stale = [store.put(record(age=timedelta(minutes=m), phase="closing")).record.id for m in (5, 9)]
    gone = store.put(record(age=timedelta(days=8), phase="cleanup-failed")).record.id
    kept = store.put(record(age=timedelta(days=1), phase="allocation-uncertain")).record.id
    fresh = store.put(record(age=timedelta(seconds=3))).record.id
    wait_for_indexes()
    before = items(client, store.table_name)
    page = console(BlockingAdapter(MemoryAdapter()), resources_of(store)).get("/resources")
    assert page.status_code == 200, page.text
    assert items(client, store.table_name) == before
    said = " ".join(text_of(page.text).split())
    assert "A sweep now expires 0 record(s) of the table; 4 stale record(s) wait" in said, said
    for record_id in (ahead, *stale, gone):
        assert "stale: the next sweep observes it" in row_of(page.text, record_id), record_id
    assert "kept for attention" in row_of(page.text, kept)
    assert "fresh: expires no sooner than" in row_of(page.text, fresh)
    done = sweep(store, Collector(), now=datetime.now(UTC), policy=policy)
    assert done.expired == [] and sorted(done.observed) == sorted([ahead, *stale, gone])


@pytest.mark.parametrize("made", ["no bus", "no settings"])
def test_the_console_s_sweep_without_a_bus_or_settings_says_why_and_touches_nothing(
    moto_endpoint: str,
    table_name: str,
    wait_for_indexes: Callable[[], None],
    made: str,
) -> None:
    """The real sweep of `ui --allow-writes` over a table whose bus does not exist, or which
    records no sweep settings: the page says why; no record is observed or claimed."""
    from typer.testing import CliRunner

    from sandbox_ledger.cli import app
    from sandbox_ledger.cli.context import Target
    from sandbox_ledger.cli.ui_command import _sweeper

    args = ["--table", table_name, "--endpoint-url", moto_endpoint, "--region", "us-east-1"]
    create = ["table", "create", "--stale-after", "60", "--event-bus", "no-such-bus"]
    if made == "no settings":
        from sandbox_ledger.dynamodb.adapter import SyncDynamoDBAdapter

        with SyncDynamoDBAdapter(table_name, endpoint_url=moto_endpoint) as adapter:
            adapter.create_table()
    else:
        done = CliRunner().invoke(app, [*args, *create])  # type: ignore[arg-type]
        assert done.exit_code == 0, done.output
    store = SyncResourceRecordStore(table_name, endpoint_url=moto_endpoint)
    stale = store.put(record(age=timedelta(hours=1))).record
    wait_for_indexes()
    client = boto3.client("dynamodb", endpoint_url=moto_endpoint, region_name="us-east-1")
    before = items(client, table_name)
    target = Target(table=table_name, endpoint_url=moto_endpoint, region="us-east-1", profile=None)
    tab = console(
        BlockingAdapter(MemoryAdapter()), resources_of(store), Writes(CSRF, _sweeper(target))
    )
    answer = tab.post("/resources/sweep", data={"csrf": CSRF}, headers={"origin": ORIGIN})
    said = " ".join(text_of(answer.text).split())
    assert answer.status_code == 500 and "the sweep did not run:" in said, said
    why = "event bus no-such-bus not found" if made == "no bus" else "does not record its"
    assert why in said, said
    assert items(client, table_name) == before
    unobserved = store.get_versioned(stale.id)
    assert unobserved is not None and unobserved.observed_at_ms is None


@pytest.mark.parametrize("text", [*HOSTILE, "a\u200bb\x1b[31m\x85\ufeff"])
def test_an_unreadable_item_under_a_hostile_key_is_shown_as_text_on_every_page(
    deployed: tuple[SyncResourceRecordStore, list[str]],  # noqa: F811
    moto_endpoint: str,
    wait_for_indexes: Callable[[], None],
    text: str,
) -> None:
    """An item this version cannot read whose key (hence the id shown) and fields hold hostile
    text: the resources page, the sweep's confirm page and its done page show it as text."""
    from resources.test_resources_expiry import _raw_item

    store, _ = deployed
    client = boto3.client("dynamodb", endpoint_url=moto_endpoint, region_name="us-east-1")
    _, item = _raw_item(timedelta(hours=2), body={"phase": text, text: text})
    item[k.PARTITION_KEY] = {"S": k.RESOURCE_PREFIX + text}
    client.put_item(TableName=store.table_name, Item=item)
    wait_for_indexes()
    collected = Collector()
    policy = resolve_sweep(store.descriptor(), store.table_name, require_deployment=True).policy

    def real() -> Any:
        return sweep(store, collected, now=datetime.now(UTC), policy=policy)

    tab = console(BlockingAdapter(MemoryAdapter()), resources_of(store), Writes(CSRF, real))
    page = tab.get("/resources")
    assert page.status_code == 200 and "this version cannot read it" in page.text
    clean(page.text)
    asked = tab.get("/resources/sweep")
    assert asked.status_code == 200
    clean(asked.text)
    done = tab.post("/resources/sweep", data=form_of(asked.text), headers={"origin": ORIGIN})
    assert "0 expired, 0 skipped, 1 failed" in done.text, done.text  # the item, reported
    clean(done.text)


def test_a_delete_confirmed_in_a_browser_deletes_the_session(
    browser: Any,  # noqa: F811 - the fixture
    tmp_path: Path,
) -> None:
    """In Chromium, `ui --allow-writes`: the session's page, "Delete this session…", the
    confirm page's button: the session is deleted (the browser's own POST passes the
    console's origin check, whatever Origin its referrer policy makes it send)."""
    import signal

    from sandbox_ledger.sqlite import SQLiteAdapter

    from .test_cli_ui import serving

    database = tmp_path / "ledger.db"
    with BlockingAdapter(SQLiteAdapter(database)) as writer:
        writer.append(entry("sb-1", LedgerEvent.SandboxCreated, 1_000))
        writer.append(entry("sb-2", LedgerEvent.SandboxCreated, 2_000))
    argv = ["--store", f"sqlite:///{database}", "ui", "--port", "0", "--allow-writes"]
    server, url = serving(argv, tmp_path)
    try:
        page = browser.new_page()
        sent: list[dict[str, str]] = []
        page.on(
            "request",
            lambda r: sent.append(r.headers) if r.method == "POST" else None,
        )
        page.goto(url)
        page.goto(url.split("/?", 1)[0] + "/session?name=build&id=sb-1")
        page.click("text=Delete this session…")
        page.wait_for_selector("button.danger")
        assert "all its 1 entries" in page.content()
        page.click("button.danger")
        page.wait_for_load_state()
        said = page.content()
    finally:
        server.send_signal(signal.SIGINT)
        _, stderr = server.communicate(timeout=30)
    assert server.returncode == 0, stderr
    assert "deleted build/sb-1" in said, (said, sent)
    with BlockingAdapter(SQLiteAdapter(database)) as reader:
        assert reader.read_all("build", "sb-1") == [] and len(reader.read_all("build", "sb-2")) == 1


def test_a_sweep_confirmed_in_a_browser_runs(
    browser: Any,  # noqa: F811 - the fixture
    deployed: tuple[SyncResourceRecordStore, list[str]],  # noqa: F811
    wait_for_indexes: Callable[[], None],
    tmp_path: Path,
) -> None:
    """In Chromium, `ui --allow-writes` over a table: "Sweep now…", then the confirm page's
    button: the sweep runs (it observes the stale record)."""
    import signal

    from .test_cli_ui import serving

    store, args = deployed
    stale = store.put(record(age=timedelta(hours=1))).record
    wait_for_indexes()
    keys = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}
    server, url = serving([*args, "ui", "--port", "0", "--allow-writes"], tmp_path, **keys)
    try:
        page = browser.new_page()
        page.goto(url)
        page.goto(url.split("/?", 1)[0] + "/resources")
        page.click("text=Sweep now…")
        page.wait_for_selector("button.danger")
        page.click("button.danger")
        page.wait_for_load_state()
        said = page.content()
    finally:
        server.send_signal(signal.SIGINT)
        _, stderr = server.communicate(timeout=30)
    assert server.returncode == 0, stderr
    assert "0 expired, 1 skipped, 0 failed" in said, said
    observed = store.get_versioned(stale.id)
    assert observed is not None and observed.observed_at_ms is not None


class ThrottledLedger:
    """A ledger whose every read is throttled (retries spent)."""

    def __getattr__(self, name: str) -> Any:
        def refused(*_: Any, **__: Any) -> Any:
            raise ThrottledError(f"{name}: throttled after retries (ThrottlingException)")

        return refused


def test_a_throttled_ledger_is_a_page_saying_so_never_a_500() -> None:
    tab = console(ThrottledLedger(), writes=Writes(CSRF))
    for answer in (
        tab.get("/"),
        tab.get("/", params={"name": "build"}),
        tab.get("/session", params={"name": "build", "id": "sb-1"}),
        tab.get("/session/delete", params={"name": "build", "id": "sb-1"}),
        tab.post(
            "/session/delete",
            data={"csrf": CSRF, "session": "name=build&id=sb-1"},
            headers={"origin": ORIGIN},
        ),
    ):
        assert answer.status_code == 503, answer.text
        assert "throttled after retries" in answer.text


def test_two_tabs_sweeping_at_once_expire_each_record_once(
    deployed: tuple[SyncResourceRecordStore, list[str]],  # noqa: F811
    moto_endpoint: str,
    wait_for_indexes: Callable[[], None],
) -> None:
    """Two confirmed sweeps at once (two tabs): each due record is expired and published by
    one of them, never both."""
    import threading

    store, _ = deployed
    boto3.client("dynamodb", endpoint_url=moto_endpoint, region_name="us-east-1")
    due = [store.put(record(age=timedelta(hours=1))).record.id for _ in range(8)]
    wait_for_indexes()
    for record_id in due:  # observed more than a window (60 s) ago
        observed_earlier(store, store.get_versioned(record_id), timedelta(seconds=61))
    wait_for_indexes()
    collected = Collector()
    policy = resolve_sweep(store.descriptor(), store.table_name, require_deployment=True).policy

    def real() -> Any:
        return sweep(store, collected, now=datetime.now(UTC), policy=policy)

    tab = console(BlockingAdapter(MemoryAdapter()), resources_of(store), Writes(CSRF, real))
    pages: list[str] = []

    def post() -> None:
        pages.append(tab.post("/resources/sweep", data={"csrf": CSRF}).text)

    threads = [threading.Thread(target=post) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert len(pages) == 2
    expired = [re.findall(r"expired ([0-9a-f-]{36}):", html.unescape(p)) for p in pages]
    assert sorted(expired[0] + expired[1]) == sorted(due), pages
    published = [e.record.id for e in collected.published]
    assert sorted(published) == sorted(due)
    assert all(store.get(record_id) is None for record_id in due)

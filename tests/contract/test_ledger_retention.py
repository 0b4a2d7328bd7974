"""Optional ledger retention: TTL from each entry's own time, reads hide what has expired,
the retention agreed through the table's descriptor, keep forever by default.

The behaviour tests run on every store (memory, DynamoDB, SQLite, PostgreSQL); what is
particular to the SQL stores (the retention recorded in the database, the purge, the
migration of an older schema) is in tests/sql/test_sql_retention.py."""

from __future__ import annotations

import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import timedelta
from typing import Any

import boto3
import pytest

from sandbox_ledger import InvalidInputError, LedgerEntry, LedgerEvent, MemoryAdapter
from sandbox_ledger import keys as k
from sandbox_ledger.deployment import DeploymentMismatchError, TableDescriptor, read_descriptor
from sandbox_ledger.dynamodb import DynamoDBAdapter, SyncDynamoDBAdapter
from sandbox_ledger.dynamodb._items import SUMMARY_SLACK_S
from sandbox_ledger.keys import LedgerAttr as A
from sandbox_ledger.postgres import PostgresAdapter
from sandbox_ledger.sqlite import SQLiteAdapter

DAY = timedelta(days=1)
DAY_MS = 86_400_000


def _e(sid: str, event: str, ts: int, payload: Any = None, name: str = "job") -> LedgerEntry:
    return LedgerEntry(
        ts=ts, name=name, sandbox_id=sid, step_index=-1, event=event, payload=payload
    )


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _raw_items(endpoint: str, table: str, name: str, sid: str) -> list[dict[str, Any]]:
    client = boto3.client("dynamodb", endpoint_url=endpoint)
    items: list[dict[str, Any]] = client.query(
        TableName=table,
        KeyConditionExpression="PK = :pk",
        ExpressionAttributeValues={":pk": {"S": k.session_pk(name, sid)}},
        ConsistentRead=True,
    )["Items"]
    return items


@pytest.fixture(params=["memory", "dynamodb", "sqlite", "postgres"])
async def retained(request: pytest.FixtureRequest, table_name: str) -> AsyncIterator[Any]:
    if request.param == "memory":
        yield MemoryAdapter(retention=DAY)
        return
    if request.param == "sqlite":
        path = request.getfixturevalue("tmp_path") / "retained.db"
        async with SQLiteAdapter(path, retention=DAY) as sqlite:
            yield sqlite
        return
    if request.param == "postgres":
        dsn, schema = request.getfixturevalue("postgres_dsn"), request.getfixturevalue("pg_schema")
        async with PostgresAdapter(dsn, schema=schema, retention=DAY) as postgres:
            yield postgres
        return
    endpoint = request.getfixturevalue("moto_endpoint")
    async with DynamoDBAdapter(table_name, endpoint_url=endpoint, retention=DAY) as adapter:
        await adapter.create_table()
        yield adapter


async def test_expired_entries_and_sessions_are_hidden(
    retained: Any, listings_settled: Callable[[Any], Awaitable[None]]
) -> None:
    now = _now_ms()
    old = now - 3 * DAY_MS  # the entry's own ts decides: three days old, retention one day
    # A session that ran longer than the retention: its early entries have expired.
    long = [
        _e("long", LedgerEvent.SandboxCreated, old),
        _e("long", LedgerEvent.ExecStarted, old + 1, {"step": 0}),
        _e("long", LedgerEvent.ExecComplete, old + 2, {"step": 0}),
        _e("long", LedgerEvent.CheckpointCreated, old + 3, {"snapshotId": "snap-old"}),
        _e("long", LedgerEvent.ExecStarted, now - 2, {"step": 1}),
        _e("long", LedgerEvent.ExecComplete, now - 1, {"step": 1}),
        _e("long", LedgerEvent.CheckpointCreated, now, {"snapshotId": "snap-new"}),
    ]
    # A session wholly older than the retention.
    gone = [
        _e("gone", LedgerEvent.SandboxCreated, old),
        _e("gone", LedgerEvent.CheckpointCreated, old + 1, {"snapshotId": "snap-gone"}),
        _e("gone", LedgerEvent.SandboxClosed, old + 2),
    ]
    fresh = [_e("fresh", LedgerEvent.SandboxCreated, now - 5)]
    # Its last summary-changing entry expired: the summary goes, later entries stay readable.
    quiet = [
        _e("quiet", LedgerEvent.SandboxCreated, old),
        _e("quiet", LedgerEvent.ExecStarted, now, {"step": 9}),
    ]
    for entry in long + gone + fresh + quiet:
        await retained.append(entry)
    await listings_settled(retained)  # settled listings (index lag waited out)

    assert [e.ts for e in await retained.read_all("job", "long")] == [now - 2, now - 1, now]
    assert [e.ts for e in await retained.read_in_append_order("job", "long")] == [
        now - 2,
        now - 1,
        now,
    ]
    assert [c.snapshot_id for c in await retained.list_checkpoints("job", "long")] == ["snap-new"]
    last = await retained.last_checkpoint("job", "long")
    assert last is not None and last.ts == now
    # The summary lives as long as the last entry that changed it; execCount counts every
    # exec.complete ever appended, those whose entries have expired included.
    details = await retained.get_sandbox_details("job", "long")
    assert details is not None
    assert (details.started_at, details.exec_count) == (old, 2)

    assert await retained.read_all("job", "gone") == []
    assert await retained.list_checkpoints("job", "gone") == []
    assert await retained.last_checkpoint("job", "gone") is None
    assert await retained.get_sandbox_details("job", "gone") is None
    listed = {d.sandbox_id for d in await retained.list_sandbox_details("job")}
    assert listed == {"long", "fresh"}
    assert {d.sandbox_id for d in await retained.list_all_sandbox_details()} == listed
    assert await retained.scan_sessions() == [("job", "fresh"), ("job", "long"), ("job", "quiet")]
    assert [e.ts for e in await retained.read_all("job", "quiet")] == [now]
    assert await retained.get_sandbox_details("job", "quiet") is None

    if hasattr(retained, "purge_expired"):
        # The SQL stores reclaim the space: purging changes nothing a read returns. The
        # expired entries go (long 4, gone 3, quiet 1) and the one session row all of whose
        # entries have expired ("gone"); a summary stays as long as any of its entries.
        seen = await _everything(retained)
        assert await retained.purge_expired(batch_size=2) == 9
        assert await _everything(retained) == seen
        assert await retained.purge_expired() == 0


async def test_an_out_of_order_summarizing_append_never_moves_the_expiry_back(
    retained: Any, listings_settled: Callable[[Any], Awaitable[None]]
) -> None:
    """A late exec.complete (or closed) with an old ts (older than the retention) set the
    summary's expiry from its own time: the running session vanished from
    get_sandbox_details and every listing. The summary keeps the later expiry."""
    now = _now_ms()
    old = now - 3 * DAY_MS
    await retained.append(_e("late", LedgerEvent.SandboxCreated, now - 10))
    await retained.append(_e("late", LedgerEvent.ExecComplete, old))
    await retained.append(_e("late", LedgerEvent.SandboxClosed, old + 1))
    details = await retained.get_sandbox_details("job", "late")
    assert details is not None
    assert (details.started_at, details.exec_count, details.completed_at) == (now - 10, 1, old + 1)
    await listings_settled(retained)  # settled listings (index lag waited out)
    assert [d.sandbox_id for d in await retained.list_sandbox_details("job")] == ["late"]
    assert [d.sandbox_id for d in await retained.list_all_sandbox_details()] == ["late"]
    # In ts order the expiry still moves forward: an old created, then a fresh exec.complete.
    await retained.append(_e("on", LedgerEvent.SandboxCreated, old))
    assert await retained.get_sandbox_details("job", "on") is None
    await retained.append(_e("on", LedgerEvent.ExecComplete, now))
    revived = await retained.get_sandbox_details("job", "on")
    assert revived is not None and revived.exec_count == 1


async def _everything(adapter: Any) -> list[Any]:
    """What every read of the test's sessions returns."""
    out: list[Any] = [
        await adapter.list_sandbox_details("job"),
        await adapter.list_all_sandbox_details(),
        await adapter.scan_sessions(),
    ]
    for sid in ("long", "gone", "fresh", "quiet"):
        out += [
            await adapter.read_all("job", sid),
            await adapter.read_in_append_order("job", sid),
            await adapter.list_checkpoints("job", sid),
            await adapter.last_checkpoint("job", sid),
            await adapter.get_sandbox_details("job", sid),
        ]
    return out


def test_items_carry_the_ttl_of_their_own_entry(moto_endpoint: str, table_name: str) -> None:
    with SyncDynamoDBAdapter(table_name, endpoint_url=moto_endpoint, retention=DAY) as adapter:
        adapter.create_table()
        made = read_descriptor(boto3.client("dynamodb", endpoint_url=moto_endpoint), table_name)
        assert made is not None and made.store_id
        assert made == TableDescriptor(ledger_retention_seconds=86_400, store_id=made.store_id)
        # Far in the past: every item below has expired, over five years ago, which DynamoDB's
        # TTL never deletes (nor the strict profile's): the items stay to be read.
        t0 = 1_400_000_000_500
        written = int(time.time())
        adapter.append(_e("s", LedgerEvent.SandboxCreated, t0))
        adapter.append(_e("s", LedgerEvent.CheckpointCreated, t0 + 10_000, {"snapshotId": "x"}))
        # Incompressible and over one item: a head and its parts.
        big = {"blob": os.urandom(400_000).hex()}
        adapter.append(_e("s", LedgerEvent.ExecComplete, t0 + 20_000, big))
        adapter.append_once(_e("s", LedgerEvent.ExecStarted, t0 + 30_000), 1)
        items = _raw_items(moto_endpoint, table_name, "job", "s")
        by_kind: dict[str, list[int]] = {}
        for item in items:
            sk = item["SK"]["S"]
            kind = sk[:2] if sk != k.SUMMARY_SK else "summary"
            if kind == "E#" and sk.count("#") == 3:
                kind = "part"
            by_kind.setdefault(kind, []).append(int(item[k.TTL_ATTRIBUTE]["N"]))
        base = t0 // 1000 + 86_400
        assert sorted(by_kind["E#"]) == [base, base + 10, base + 20, base + 30]
        assert by_kind["part"] and set(by_kind["part"]) == {base + 20}
        assert by_kind["K#"] == [base + 10]
        assert by_kind["I#"] == [base + 30]
        # The summary shows while the last entry that changed it lives (its expiry, eex), and
        # TTL keeps it a day past the later of the session's latest entry and its last write
        # (these entries expired on arrival: a day from now).
        slack = SUMMARY_SLACK_S
        [kept] = by_kind["summary"]
        assert written <= kept - slack <= time.time()

        def summary() -> dict[str, Any]:
            [item] = [
                i
                for i in _raw_items(moto_endpoint, table_name, "job", "s")
                if i["SK"]["S"] == k.SUMMARY_SK
            ]
            return item

        assert summary()[A.ENTRY_EXPIRES] == {"N": str(base + 20)}
        # An exec.complete appended late with an older ts leaves the summary's later expiry
        # (it set the summary's from its own before, hiding a live session), and counts.
        adapter.append(_e("s", LedgerEvent.ExecComplete, t0 + 5_000))
        assert summary()[A.ENTRY_EXPIRES] == {"N": str(base + 20)}
        assert int(summary()[k.TTL_ATTRIBUTE]["N"]) >= kept
        assert summary()["execCount"] == {"N": "2"}
        # A later one moves it forward.
        adapter.append(_e("s", LedgerEvent.SandboxClosed, t0 + 40_000))
        assert summary()[A.ENTRY_EXPIRES] == {"N": str(base + 40)}
        # moto never deletes TTL'd items: the reads hide them.
        assert len(items) >= 6
        assert adapter.read_all("job", "s") == []
        assert adapter.get_sandbox_details("job", "s") is None


def test_default_keeps_forever_and_writes_no_ttl(moto_endpoint: str, table_name: str) -> None:
    with SyncDynamoDBAdapter(table_name, endpoint_url=moto_endpoint) as adapter:
        adapter.create_table()
        assert adapter.retention is None
        old = 1_000  # 1970: with no retention, still readable
        for event, payload in [
            (LedgerEvent.SandboxCreated, None),
            (LedgerEvent.ExecStarted, None),
            (LedgerEvent.ExecComplete, None),
            (LedgerEvent.CheckpointCreated, {"snapshotId": "x"}),
            (LedgerEvent.SandboxClosed, None),
        ]:
            adapter.append(_e("s", event, old, payload))
        items = _raw_items(moto_endpoint, table_name, "job", "s")
        assert len(items) == 12  # five heads and their sequence marks, a marker, the summary
        assert all(k.TTL_ATTRIBUTE not in item for item in items)
        assert len(adapter.read_all("job", "s")) == 5
        details = adapter.get_sandbox_details("job", "s")
        assert details is not None and details.exec_count == 1
    descriptor = read_descriptor(boto3.client("dynamodb", endpoint_url=moto_endpoint), table_name)
    assert descriptor is not None and descriptor.ledger_retention_seconds is None


def test_a_retention_that_disagrees_with_the_table_is_refused(
    moto_endpoint: str, table_name: str, wait_for_indexes: Callable[[], None]
) -> None:
    with SyncDynamoDBAdapter(table_name, endpoint_url=moto_endpoint, retention=DAY) as made:
        made.create_table()
    created = _e("s", LedgerEvent.SandboxCreated, _now_ms())
    forever = SyncDynamoDBAdapter(table_name, endpoint_url=moto_endpoint)
    with pytest.raises(
        DeploymentMismatchError, match=r"retention: 'keep forever' .*'1 day \(86400 s\)'"
    ):
        forever.append(created)
    # A reader need not know the retention (reads hide items by their own TTL attribute):
    # listing every name reads the descriptor for the shard count and is not refused.
    assert forever.list_all_sandbox_details() == []
    with pytest.raises(DeploymentMismatchError, match="retention"):
        forever.append(created)  # still refused after the descriptor was read by a listing
    with pytest.raises(DeploymentMismatchError, match="retention"):
        forever.create_table()
    longer = SyncDynamoDBAdapter(table_name, endpoint_url=moto_endpoint, retention=2 * DAY)
    with pytest.raises(
        DeploymentMismatchError, match=r"'2 days \(172800 s\)'.*'1 day \(86400 s\)'"
    ):
        longer.append(created)
    assert _raw_items(moto_endpoint, table_name, "job", "s") == []  # nothing written
    agreeing = SyncDynamoDBAdapter(table_name, endpoint_url=moto_endpoint, retention=DAY)
    agreeing.append(created)
    assert len(agreeing.read_all("job", "s")) == 1
    wait_for_indexes()  # settled listings (index lag waited out)
    assert [d.sandbox_id for d in forever.list_all_sandbox_details()] == ["s"]
    assert forever.table_shard_count() == 4
    for adapter in (forever, longer, agreeing):
        adapter.close()


@pytest.mark.parametrize(
    "event", [LedgerEvent.ExecStarted, LedgerEvent.ExecComplete, LedgerEvent.CheckpointCreated]
)
def test_a_writer_of_other_events_with_another_retention_writes_nothing(
    moto_endpoint: str, table_name: str, event: LedgerEvent
) -> None:
    """A worker that appends only exec and checkpoint events is held to the table's retention
    too: its first append reads the descriptor and is refused before any item is written (it
    wrote entries with its own TTL, which the summary's then disagreed with)."""
    with SyncDynamoDBAdapter(table_name, endpoint_url=moto_endpoint, retention=30 * DAY) as made:
        made.create_table()
    for retention in (5 * DAY, None):
        with SyncDynamoDBAdapter(
            table_name, endpoint_url=moto_endpoint, retention=retention
        ) as worker:
            with pytest.raises(DeploymentMismatchError, match=r"'30 days \(2592000 s\)'"):
                worker.append(_e("s", event, _now_ms()))
            with pytest.raises(DeploymentMismatchError, match="retention"):
                worker.append(_e("s", event, _now_ms()))  # still refused once cached
    assert _raw_items(moto_endpoint, table_name, "job", "s") == []


def test_an_import_with_another_retention_writes_nothing(
    moto_endpoint: str, table_name: str
) -> None:
    """An import through a client whose retention is not the table's stops at its first write,
    before any entry is stored (it stored the exec entries with the wrong TTL and refused only
    the created lines)."""
    from sandbox_ledger.transfer import entry_line, import_entries, parse_lines

    with SyncDynamoDBAdapter(table_name, endpoint_url=moto_endpoint, retention=30 * DAY) as made:
        made.create_table()
    now = _now_ms()
    entries = [_e("s", LedgerEvent.ExecStarted, now + 1), _e("s", LedgerEvent.SandboxCreated, now)]
    parsed = parse_lines(entry_line(x).encode() for x in entries)
    wrong = SyncDynamoDBAdapter(table_name, endpoint_url=moto_endpoint, retention=5 * DAY)
    with wrong, pytest.raises(DeploymentMismatchError, match="retention"):
        import_entries(wrong, parsed)
    assert _raw_items(moto_endpoint, table_name, "job", "s") == []


@pytest.mark.parametrize(
    "bad",
    [timedelta(0), timedelta(seconds=-1), 86400, "1d"],
    ids=["zero", "negative", "int", "str"],
)
def test_bad_retention_is_refused(bad: Any) -> None:
    with pytest.raises(InvalidInputError, match="retention"):
        SyncDynamoDBAdapter("ledger", retention=bad)
    with pytest.raises(InvalidInputError, match="retention"):
        MemoryAdapter(retention=bad)
    with pytest.raises(InvalidInputError, match="retention"):
        SQLiteAdapter(":memory:", retention=bad)
    with pytest.raises(InvalidInputError, match="retention"):
        PostgresAdapter("postgresql://unused", retention=bad)


def test_the_cli_reads_a_table_deployed_with_a_retention(
    moto_endpoint: str,
    table_name: str,
    monkeypatch: pytest.MonkeyPatch,
    wait_for_indexes: Callable[[], None],
) -> None:
    from typer.testing import CliRunner

    from sandbox_ledger.cli.app import app

    monkeypatch.delenv("SANDBOX_LEDGER_TABLE", raising=False)
    with SyncDynamoDBAdapter(table_name, endpoint_url=moto_endpoint, retention=DAY) as made:
        made.create_table()
        made.append(_e("s", LedgerEvent.SandboxCreated, _now_ms()))
    wait_for_indexes()  # settled listings (index lag waited out)
    args = ["--table", table_name, "--endpoint-url", moto_endpoint, "--region", "us-east-1"]
    runner = CliRunner()
    listed = runner.invoke(app, [*args, "ls", "--json"])
    assert listed.exit_code == 0, listed.output
    assert '"sandboxId": "s"' in listed.output
    shown = runner.invoke(app, [*args, "show", "job", "s"])
    assert shown.exit_code == 0, shown.output


def test_the_cli_imports_into_a_table_with_a_retention_with_the_tables_retention(
    moto_endpoint: str, table_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An operator restoring a backup names the table only: the CLI writes with the retention
    the table records (its items carry that TTL). A dynamodb:// URL may name the retention
    too (retention_days): it must agree, and table create records it."""
    from typer.testing import CliRunner

    from sandbox_ledger.cli.app import app
    from sandbox_ledger.transfer import entry_line

    monkeypatch.delenv("SANDBOX_LEDGER_TABLE", raising=False)
    monkeypatch.delenv("SANDBOX_LEDGER_STORE", raising=False)
    runner = CliRunner()
    endpoint = f"endpoint_url={moto_endpoint}&region=us-east-1"
    created = runner.invoke(
        app, ["--store", f"dynamodb://{table_name}?{endpoint}&retention_days=2", "table", "create"]
    )
    assert created.exit_code == 0, created.output
    ledger = SyncDynamoDBAdapter(table_name, endpoint_url=moto_endpoint, retention=2 * DAY)
    recorded = read_descriptor(ledger.client(), table_name)
    assert recorded is not None and recorded.ledger_retention_seconds == 2 * 86400
    now = _now_ms()
    lines = "".join(
        entry_line(x) + "\n"
        for x in (_e("s", LedgerEvent.SandboxCreated, now), _e("s", LedgerEvent.ExecStarted, now))
    )
    args = ["--table", table_name, "--endpoint-url", moto_endpoint, "--region", "us-east-1"]
    done = runner.invoke(app, [*args, "import", "-"], input=lines)
    assert done.exit_code == 0, done.output
    assert "2 new" in done.stderr
    expected_ttl = now // 1000 + 2 * 86400
    items = _raw_items(moto_endpoint, table_name, "job", "s")
    ttls = {int(i[k.TTL_ATTRIBUTE]["N"]) for i in items if i["SK"]["S"] != k.SUMMARY_SK}
    assert ttls == {expected_ttl}, ttls
    [summary] = [i for i in items if i["SK"]["S"] == k.SUMMARY_SK]
    assert summary[A.ENTRY_EXPIRES] == {"N": str(expected_ttl)}  # it shows as long
    assert summary[k.TTL_ATTRIBUTE] == {"N": str(expected_ttl + SUMMARY_SLACK_S)}
    agreeing = f"dynamodb://{table_name}?{endpoint}&retention_days=2"
    again = runner.invoke(app, ["--store", agreeing, "import", "-"], input=lines)
    assert again.exit_code == 0 and "0 new, 2 already present" in again.stderr, again.output
    other = f"dynamodb://{table_name}?{endpoint}&retention_days=3"
    newer = entry_line(_e("s", LedgerEvent.ExecStarted, now + 1)) + "\n"
    stored = _raw_items(moto_endpoint, table_name, "job", "s")
    refused = runner.invoke(app, ["--store", other, "import", "-"], input=newer)
    assert refused.exit_code == 2 and "retention" in refused.stderr, refused.output
    assert _raw_items(moto_endpoint, table_name, "job", "s") == stored  # nothing written
    ledger.close()


def test_a_reimport_on_dynamodb_finds_expired_entries_appended_live(
    moto_endpoint: str, table_name: str
) -> None:
    """Entries past their TTL stay stored until DynamoDB deletes them (days late). An export
    taken while they were live, imported again, must find them, whether they came from an
    import (a claim) or, as here, from live appends (no claim): they were appended again,
    execCount rose and the summary took an old entry's TTL, hiding the session."""
    from sandbox_ledger.transfer import entry_line, import_entries, parse_lines

    ledger = SyncDynamoDBAdapter(table_name, endpoint_url=moto_endpoint, retention=DAY)
    ledger.create_table()
    now = _now_ms()
    # Older than the one-day retention by half an hour: expired, and not deleted yet (a
    # strict server's TTL deletes an hour after expiry at the soonest in the test session).
    old = now - 49 * 1_800_000
    large = os.urandom(500_000).hex()  # 1 MB, 500 KB compressed: a head and a part
    entries = [
        _e("s", LedgerEvent.SandboxCreated, old),
        _e("s", LedgerEvent.ExecComplete, old + 1, payload=large),
        _e("s", LedgerEvent.ExecComplete, now - 3_600_000),
    ]
    for entry in entries:
        ledger.append(entry)
    details = ledger.get_sandbox_details("job", "s")
    assert details is not None and details.exec_count == 2
    lines = [entry_line(entry).encode() for entry in entries]
    for _ in range(2):
        report = import_entries(ledger, parse_lines(lines))
        assert (report.new, report.present, report.failed) == (0, 3, [])
    assert ledger.get_sandbox_details("job", "s") == details
    items = _raw_items(moto_endpoint, table_name, "job", "s")
    assert len(items) == 1 + 3 + 1 + 3  # the summary, three heads, one part, three marks
    # TTL deletes items one by one: an expired head whose part has gone is simply not there.
    [part] = [item for item in items if item["SK"]["S"].count("#") == 3]
    boto3.client("dynamodb", endpoint_url=moto_endpoint).delete_item(
        TableName=table_name, Key={"PK": part["PK"], "SK": part["SK"]}
    )
    assert [e.ts for e in ledger.read_stored("job", "s")] == [old, now - 3_600_000]


@pytest.fixture(params=["memory", "dynamodb-sync", "dynamodb-async", "sqlite", "postgres"])
def sync_retained(request: pytest.FixtureRequest, table_name: str) -> Any:
    """A synchronous store with a one-day retention (what the importer and the CLI use)."""
    from sandbox_ledger.blocking import BlockingAdapter

    if request.param == "memory":
        return BlockingAdapter(MemoryAdapter(retention=DAY))
    if request.param == "sqlite":
        path = request.getfixturevalue("tmp_path") / "retained.db"
        return BlockingAdapter(SQLiteAdapter(path, retention=DAY))
    if request.param == "postgres":
        dsn, schema = request.getfixturevalue("postgres_dsn"), request.getfixturevalue("pg_schema")
        return BlockingAdapter(PostgresAdapter(dsn, schema=schema, retention=DAY))
    endpoint = request.getfixturevalue("moto_endpoint")
    SyncDynamoDBAdapter(table_name, endpoint_url=endpoint, retention=DAY).create_table()
    if request.param == "dynamodb-sync":
        return SyncDynamoDBAdapter(table_name, endpoint_url=endpoint, retention=DAY)
    return BlockingAdapter(DynamoDBAdapter(table_name, endpoint_url=endpoint, retention=DAY))


def test_an_import_never_writes_an_entry_already_expired(sync_retained: Any) -> None:
    """An export whose old entries TTL or purge_expired has since removed from the store,
    imported again, wrote them again already expired: hidden at once, stored for nothing,
    and the summary took their old expiry. They are counted as expired and not written."""
    from sandbox_ledger.transfer import entry_line, import_entries, parse_lines

    now = _now_ms()
    old = now - 3 * DAY_MS
    entries = [
        _e("s", LedgerEvent.SandboxCreated, now - 10),
        _e("s", LedgerEvent.ExecComplete, old, {"late": True}),
        _e("s", LedgerEvent.ExecStarted, old + 1),
        _e("s", LedgerEvent.ExecStarted, now - 5),
        _e("gone", LedgerEvent.SandboxCreated, old),
    ]
    lines = [entry_line(entry).encode() for entry in entries]
    with sync_retained as store:
        report = import_entries(store, parse_lines(lines))
        assert (report.new, report.present, report.expired, report.failed) == (2, 0, 3, [])
        assert report.summary() == "2 new, 0 already present, 3 expired, 0 failed"
        assert [e.ts for e in store.read_stored("job", "s")] == [now - 10, now - 5]
        assert store.read_stored("job", "gone") == []
        details = store.get_sandbox_details("job", "s")
        assert details is not None and details.exec_count == 0
        assert store.scan_sessions() == [("job", "s")]
        again = import_entries(store, parse_lines(lines))
        assert (again.new, again.present, again.expired) == (0, 2, 3)


def test_the_cli_reports_expired_entries_apart(tmp_path: Any) -> None:
    from typer.testing import CliRunner

    from sandbox_ledger.cli.app import app
    from sandbox_ledger.transfer import entry_line

    now = _now_ms()
    lines = "".join(
        entry_line(x) + "\n"
        for x in (
            _e("s", LedgerEvent.SandboxCreated, now),
            _e("s", LedgerEvent.ExecComplete, now - 3 * DAY_MS),
        )
    )
    store = f"sqlite:///{tmp_path}/ledger.db?retention_days=1"
    done = CliRunner().invoke(app, ["--store", store, "import", "-"], input=lines)
    assert done.exit_code == 0, done.output
    assert "imported <stdin>: 1 new, 0 already present, 1 expired, 0 failed" in done.stderr
    as_json = CliRunner().invoke(app, ["--store", store, "import", "--json", "-"], input=lines)
    assert as_json.exit_code == 0, as_json.output
    assert '"expired": 1' in as_json.stdout

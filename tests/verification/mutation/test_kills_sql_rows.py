"""The SQL stores' rows (``sql/rows.py``) as a caller of SQLite meets them: what ``append_at``
stores once and refuses, what ``save_environment`` refuses by name, and which text a statement
sent to PostgreSQL cannot carry."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, closing
from datetime import timedelta
from pathlib import Path

import pytest

from sandbox_ledger import EnvironmentRecord, LedgerEntry
from sandbox_ledger.errors import InvalidInputError
from sandbox_ledger.sql import rows
from sandbox_ledger.sqlite import SQLiteAdapter


@asynccontextmanager
async def opened(tmp_path: Path) -> AsyncIterator[SQLiteAdapter]:
    async with SQLiteAdapter(tmp_path / "ledger.db") as adapter:
        yield adapter


def entry(ts: int, payload: object = None) -> LedgerEntry:
    return LedgerEntry(ts=ts, name="n", sandbox_id="s", step_index=0, event="e", payload=payload)


async def test_append_at_stores_each_entry_once_per_position(tmp_path: Path) -> None:
    async with opened(tmp_path) as store:
        first, second = entry(1, {"a": 1}), entry(1, {"a": 2})
        for position in (0, 0, 10**20 - 1):
            await store.append_at(first, position)
        await store.append_at(second, 0)  # another entry at a taken position is its own
        await store.append_at(second, 0)
        stored = [e.payload for e in await store.read_all("n", "s")]
        assert sorted(p["a"] for p in stored) == [1, 1, 2]


def test_the_import_key_is_stored_as_earlier_versions_stored_it() -> None:
    # A re-import into a database written by an earlier version finds its lines by this key.
    assert rows.append_key(entry(1, {"a": 1}), 3) == "p00000000000000000003-ce9b9b1a15b3b530"


@pytest.mark.parametrize("position", [-1, 10**20, True, "3", 1.0])
async def test_a_bad_position_is_refused_by_name(tmp_path: Path, position: object) -> None:
    async with opened(tmp_path) as store:
        with pytest.raises(InvalidInputError) as caught:
            await store.append_at(entry(1), position)  # type: ignore[arg-type]
        assert str(caught.value) == "position: must be an integer from 0 to 10**20 - 1"
        assert caught.value.field == "position"
        assert await store.read_all("n", "s") == []


async def test_save_environment_refuses_what_is_not_a_record(tmp_path: Path) -> None:
    async with opened(tmp_path) as store:
        with pytest.raises(InvalidInputError) as caught:
            await store.save_environment({"name": "x", "builtAt": 1})  # type: ignore[arg-type]
        assert str(caught.value) == "record: expected an EnvironmentRecord, got dict"
        assert await store.list_environments() == []


async def test_sqlite_refuses_a_nul_in_an_environment_name_as_every_store(
    tmp_path: Path,
) -> None:
    # NUL in a name is refused by every store alike (PostgreSQL text cannot hold it).
    async with opened(tmp_path) as store:
        record = EnvironmentRecord.model_validate({"name": "a\x00b", "builtAt": 1})
        with pytest.raises(InvalidInputError) as caught:
            await store.save_environment(record)
        assert caught.value.field == "record.name"
        assert await store.list_environments() == []


async def test_an_environment_field_that_is_not_utf8_is_refused(tmp_path: Path) -> None:
    async with opened(tmp_path) as store:
        record = EnvironmentRecord.model_validate({"name": "e", "builtAt": 1, "extra": "a\ud800"})
        with pytest.raises(InvalidInputError) as caught:
            await store.save_environment(record)
        assert caught.value.field.startswith("record")
        assert await store.list_environments() == []


@pytest.mark.parametrize(
    ("params", "held"),
    [
        ({"a": "x\x00y", "b": 1}, True),
        ({"a": "xy", "b": None}, False),
        (["x", "\x00"], True),
        (["x", 2], False),
        ([], False),
    ],
)
def test_text_with_nul_is_found_in_a_statements_parameters(params: object, held: bool) -> None:
    assert rows.holds_nul(params) is held  # type: ignore[arg-type]


async def test_an_empty_name_is_refused_by_listings_and_scans(tmp_path: Path) -> None:
    async with opened(tmp_path) as store:
        for call in (
            store.list_sandbox_details(""),
            store.list_sandbox_page(""),
            store.scan_sessions(""),
        ):
            with pytest.raises(InvalidInputError) as caught:
                await call
            assert str(caught.value) == "name: must be a non-empty string"


async def test_a_page_that_ends_exactly_at_the_limit_has_no_cursor(tmp_path: Path) -> None:
    async with opened(tmp_path) as store:
        for n in range(2):
            await store.append(
                LedgerEntry(
                    ts=n, name="n", sandbox_id=f"s{n}", step_index=0, event="sandbox.created"
                )
            )
        page = await store.list_sandbox_page("n", {"limit": 2})  # type: ignore[arg-type]
        assert [d.sandbox_id for d in page.sessions] == ["s1", "s0"]
        assert page.cursor is None


async def test_a_fresh_entry_is_kept_for_the_retention(tmp_path: Path) -> None:
    now_ms = int(time.time() * 1000)
    async with SQLiteAdapter(tmp_path / "kept.db", retention=timedelta(days=7)) as adapter:
        await adapter.append(
            LedgerEntry(ts=now_ms, name="n", sandbox_id="s", step_index=0, event="sandbox.created")
        )
        assert len(await adapter.read_all("n", "s")) == 1
        assert [d.sandbox_id for d in await adapter.list_sandbox_details("n")] == ["s"]


async def test_sqlite_refuses_a_nul_in_names_as_every_store(tmp_path: Path) -> None:
    async with opened(tmp_path) as store:
        with pytest.raises(InvalidInputError) as caught:
            await store.append(
                LedgerEntry(ts=1, name="a\x00b", sandbox_id="c\x00d", step_index=0, event="e")
            )
        assert caught.value.field == "entry.name"
        assert await store.read_all("a\x00b", "c\x00d") == []


@pytest.mark.parametrize("value", [-(2**63), 2**63 - 1])
async def test_integers_of_64_bits_are_stored(tmp_path: Path, value: int) -> None:
    async with opened(tmp_path) as store:
        await store.append(
            LedgerEntry(ts=1, name="n", sandbox_id="s", step_index=0, branch=value, event="e")
        )
        [stored] = await store.read_all("n", "s")
        assert stored.branch == value


@pytest.mark.parametrize("value", [-(2**63) - 1, 2**63])
async def test_integers_past_64_bits_are_refused_by_name(tmp_path: Path, value: int) -> None:
    async with opened(tmp_path) as store:
        entry = LedgerEntry(ts=1, name="n", sandbox_id="s", step_index=0, branch=value, event="e")
        with pytest.raises(InvalidInputError) as caught:
            await store.append(entry)
        assert str(caught.value) == "branch: must fit in a signed 64-bit integer"
        assert await store.read_all("n", "s") == []


async def test_a_summary_lives_as_long_as_the_latest_entry_that_changed_it(
    tmp_path: Path,
) -> None:
    now_ms = int(time.time() * 1000)
    eight_days_ago = now_ms - 8 * 86_400_000

    def at(ts: int, sid: str, event: str) -> LedgerEntry:
        return LedgerEntry(ts=ts, name="n", sandbox_id=sid, step_index=0, event=event)

    async with SQLiteAdapter(tmp_path / "kept.db", retention=timedelta(days=7)) as adapter:
        await adapter.append(at(eight_days_ago, "old", "sandbox.created"))
        await adapter.append(at(eight_days_ago, "noted", "sandbox.created"))
        await adapter.append(at(now_ms, "noted", "note.added"))  # changes no summary field
        await adapter.append(at(now_ms, "late", "note.added"))  # its created arrives after it
        await adapter.append(at(eight_days_ago, "late", "sandbox.created"))
        await adapter.append(at(eight_days_ago, "ran", "sandbox.created"))
        await adapter.append(at(now_ms, "ran", "exec.complete"))
        # The summaries of "old", "noted" and "late" expired with their sandbox.created; "noted"'s
        # recent entry is kept for the retention, its session's details are not.
        assert [d.sandbox_id for d in await adapter.list_sandbox_details("n")] == ["ran"]
        assert [e.event for e in await adapter.read_all("n", "noted")] == ["note.added"]


async def test_what_sqlite_cannot_store_is_refused_by_name(tmp_path: Path) -> None:
    async with opened(tmp_path) as store:
        refusals = {
            "name: not valid UTF-8 text (surrogates not allowed)": store.scan_sessions(
                name="a\ud800"
            ),
            "entry: expected a LedgerEntry, got str": store.append("nope"),  # type: ignore[arg-type]
            "stepIndex: must fit in a signed 64-bit integer": store.append(
                LedgerEntry(ts=1, name="n", sandbox_id="s", step_index=2**63, event="e")
            ),
        }
        for message, call in refusals.items():
            with pytest.raises(InvalidInputError) as caught:
                await call
            assert str(caught.value) == message
        assert await store.read_all("n", "s") == []


async def test_an_entry_and_its_summary_expire_a_retention_after_its_whole_second(
    tmp_path: Path,
) -> None:
    # Stored as whole seconds, the entry's ts rounded down: an entry at ...999 ms expires with
    # the others of its second, not a fraction of a second later.
    ts = (int(time.time()) - 60) * 1000 + 999
    retention = timedelta(days=7)
    async with SQLiteAdapter(tmp_path / "kept.db", retention=retention) as adapter:
        await adapter.append(
            LedgerEntry(ts=ts, name="n", sandbox_id="s", step_index=0, event="sandbox.created")
        )
    expected = ts // 1000 + int(retention.total_seconds())
    with closing(sqlite3.connect(tmp_path / "kept.db")) as db:
        events = db.execute("SELECT expires_at, typeof(expires_at) FROM ledger_events")
        assert events.fetchall() == [(expected, "integer")]
        sessions = db.execute(
            "SELECT summary_expires_at, typeof(summary_expires_at), expires_at FROM ledger_sessions"
        )
        assert sessions.fetchall() == [(expected, "integer", expected)]


def test_an_entry_with_a_newer_clients_field_reads_back_whole() -> None:
    """A stored entry that carries an unknown field (a newer client's) reads back with its
    branch and error too, from the columns as from the JSON of the unknown fields."""
    entry = LedgerEntry.model_validate(
        {
            "ts": 1_700_000_000_000,
            "name": "job",
            "sandboxId": "sb-1",
            "stepIndex": 3,
            "branch": 2,
            "event": "exec.complete",
            "payload": {"exitCode": 1},
            "error": "exit status 1",
            "gpu": "a100",
        }
    )
    row = rows.encode_entry(entry, key="k")
    back = rows.decode_entry(
        row.name,
        row.sandbox_id,
        row.ts,
        row.step_index,
        row.branch,
        row.event,
        row.payload,
        row.error,
        row.extra,
    )
    assert back.wire() == entry.wire()
    assert (back.branch, back.error) == (2, "exit status 1")


def test_encoding_an_entry_checks_its_session_key_unless_told_it_was() -> None:
    from sandbox_ledger.errors import KeyTooLongError

    long = LedgerEntry(ts=1, name="n" * 2_100, sandbox_id="sb-1", step_index=0, event="x")
    with pytest.raises(KeyTooLongError):
        rows.encode_entry(long, key="k")
    assert rows.encode_entry(long, key="k", session_checked=True).name == long.name


def test_an_import_batchs_column_arrays_carry_what_each_rows_append_carries() -> None:
    """PostgreSQL takes an import batch as one array per column (``EVENT_ARRAYS``): each
    array holds, in the batch's order, what the row's own append would bind to that name."""
    batch = [
        rows.EventRow(
            name="n",
            sandbox_id=f"s{i}",
            ts=1_999 + i,
            step_index=i - 1,
            branch=None if i else 7,
            event="exec.complete" if i else "sandbox.created",
            payload=None if i else '{"a": 1}',
            error="boom" if i else None,
            extra='{"traceId": "t"}' if i else None,
            append_key=f"k{i}",
            started_at=None,
            completed_at=None,
            exec_delta=1 if i else 0,
            checkpoint=False,
            ts_s=(1_999 + i) // 1000,
        )
        for i in range(2)
    ]
    arrays = rows.event_arrays(batch)
    assert list(arrays) == [name for name, _ in rows.EVENT_ARRAYS]
    for name, values in arrays.items():
        assert values == [rows.append_params(row)[name] for row in batch], name
    assert arrays["ts_s"] == [1, 2]  # whole seconds, rounded down

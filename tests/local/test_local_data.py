"""The local server's data file (``sandbox-ledger local --data``): what a save writes, a load
restores, whatever the tables hold (issue 41, items 3 and 4)."""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from resources.resource_fixtures import record
from sandbox_ledger import EnvironmentRecord, LedgerEntry
from sandbox_ledger import keys as k
from sandbox_ledger.dynamodb import SyncDynamoDBAdapter
from sandbox_ledger.errors import InvalidInputError
from sandbox_ledger.local.persist import load, snapshot
from sandbox_ledger.resources import ResourceActivityRecord, SyncResourceRecordStore, Unreadable
from sandbox_ledger.resources import _items as ri
from sandbox_ledger.resources.models import FAILED_PHASES, LIVE_PHASES, to_iso
from verification import strategies
from verification.profiles import PROFILE
from verification.strategies import texts

Stores = tuple[SyncDynamoDBAdapter, SyncResourceRecordStore]


@pytest.fixture
def tables(moto_endpoint: str, fixture_clients: Any) -> Iterator[Callable[[], Stores]]:
    """Fresh tables (a ledger adapter and a resource store on each), dropped afterwards."""
    from sandbox_ledger.dynamodb import _ops
    from sandbox_ledger.sdk.steps import run_sync

    client = fixture_clients(moto_endpoint)
    made: list[tuple[str, Stores]] = []

    def new() -> Stores:
        name = f"data-{uuid.uuid4().hex[:12]}"
        run_sync(client, _ops.create_table(name, k.DEFAULT_SHARD_COUNT))
        pair = (
            SyncDynamoDBAdapter(name, endpoint_url=moto_endpoint, region_name="us-east-1"),
            SyncResourceRecordStore(name, endpoint_url=moto_endpoint, region_name="us-east-1"),
        )
        made.append((name, pair))
        return pair

    yield new
    for name, (ledger, store) in made:
        ledger.close()
        store.close()
        client.delete_table(TableName=name)


def _round_trip(source: Stores, target: Stores, path: Path) -> None:
    path.write_text("".join(snapshot(*source).lines), encoding="utf-8")
    load(path, *target)


def _newer_writers_item(extra: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """A resource record item as a newer writer stores it: a field this version does not
    know in its body, and an attribute of its own."""
    newer = record(age=timedelta(minutes=3))
    item = {**ri.record_key(newer.id), k.REVISION: {"N": "7"}}
    item.update(ri.write_values(newer, expires_at=2**31, shard_count=k.DEFAULT_SHARD_COUNT))
    body = json.loads(item[k.RECORD_BODY]["S"])
    item[k.RECORD_BODY] = {"S": json.dumps({**body, **extra}, ensure_ascii=False)}
    item["newerAttribute"] = {"B": b"\x00\xffbinary"}
    return newer.id, item


def test_a_record_this_version_cannot_read_is_saved_and_loaded_as_stored(
    moto_endpoint: str, fixture_clients: Any, tables: Callable[[], Stores], tmp_path: Path
) -> None:
    """A newer writer's record was left out of the save (the file then lost it for good);
    the save now keeps it as stored, and the load puts it back as it was."""
    source, target = tables(), tables()
    readable = record()
    source[1].put(readable)
    record_id, item = _newer_writers_item({"gpu": "a100", "note": "ünïcode"})
    client = fixture_clients(moto_endpoint)
    client.put_item(TableName=source[0].table_name, Item=item)
    path = tmp_path / "dev.jsonl"

    _round_trip(source, target, path)

    assert target[1].get(readable.id) == readable
    stored = target[1].inspect(record_id)
    assert isinstance(stored, Unreadable) and "gpu" in stored.reason
    assert json.loads(stored.body or "") == json.loads(item[k.RECORD_BODY]["S"])
    again = client.get_item(TableName=target[0].table_name, Key=ri.record_key(record_id))["Item"]
    assert again == item
    # Saved again from the loaded table: the same file.
    second = tmp_path / "again.jsonl"
    _round_trip(target, tables(), second)
    assert second.read_text(encoding="utf-8") == path.read_text(encoding="utf-8")


def test_a_heartbeat_from_a_clock_behind_the_creators_is_saved_and_loaded(
    moto_endpoint: str, tables: Callable[[], Stores], tmp_path: Path
) -> None:
    """The store takes a heartbeat whose updatedAt is before createdAt (an owner's clock
    behind its creator's); the save wrote it and the load refused the whole file (exit 2,
    ``updatedAt ... is before createdAt``): nothing loaded, the ledger included."""
    source, target = tables(), tables()
    created = record()
    source[1].put(created)
    behind = SyncResourceRecordStore(
        source[0].table_name,
        endpoint_url=moto_endpoint,
        region_name="us-east-1",
        clock=lambda: datetime.now(UTC) - timedelta(hours=1),
    )
    touched = behind.touch(created.id).record
    behind.close()
    assert touched.updated_at_ms < int(
        datetime.fromisoformat(created.created_at).timestamp() * 1000
    )
    entry = LedgerEntry(
        ts=1, name="build", sandbox_id="sb-1", step_index=-1, event="sandbox.created"
    )
    source[0].append(entry)

    _round_trip(source, target, tmp_path / "dev.jsonl")

    assert target[1].get(created.id) == touched
    assert target[0].read_all("build", "sb-1") == [entry]


# -- the round trip, over everything the stores accept ----------------------------------------

_ISO = st.datetimes(
    min_value=datetime(2000, 1, 1), max_value=datetime(2100, 1, 1), timezones=st.just(UTC)
).map(to_iso)
_results = st.builds(
    dict,
    kind=st.sampled_from(["exec", "sync", "ünïcode"]),
    outcome=st.sampled_from(["completed", "failed"]),
    at=_ISO,
    error=st.one_of(st.none(), texts),
)


@st.composite
def _records(draw: st.DrawFn) -> ResourceActivityRecord:
    """A record in any phase, its optional fields set or not, its updatedAt before its
    createdAt as often as not (an owner's clock behind the creator's)."""
    wire: dict[str, Any] = {
        "version": 1,
        "id": str(draw(st.uuids())),
        "pid": draw(st.integers(0, 2**40)),
        "sandboxProvider": draw(st.sampled_from(["docker", "firecracker", "名前"])),
        "placement": draw(st.sampled_from(["mounted", "remote", "host"])),
        "workspace": draw(texts),
        "createdAt": draw(_ISO),
        "updatedAt": draw(_ISO),
        "phase": draw(st.sampled_from([*LIVE_PHASES, *FAILED_PHASES])),
        "operations": draw(
            st.lists(
                st.builds(dict, kind=st.sampled_from(["exec", "sync"]), count=st.integers(0, 3)),
                max_size=2,
            )
        ),
    }
    if draw(st.booleans()):
        wire["identity"] = {
            "host": draw(texts),
            "bootId": draw(texts),
            "pidNamespace": draw(st.one_of(st.integers(0, 2**32), texts)),
            "startTime": draw(st.one_of(st.integers(0, 2**40), texts)),
        }
    for field_name in ("lastOperation", "lastFailure"):
        if draw(st.booleans()):
            wire[field_name] = {k: v for k, v in draw(_results).items() if v is not None}
    return ResourceActivityRecord.model_validate(wire, context={"stored": True})


@st.composite
def _unreadable_items(draw: st.DrawFn) -> dict[str, Any]:
    """A record item this version cannot read: a newer writer's field or phase, a damaged
    body, a missing attribute."""
    how = draw(st.sampled_from(["field", "phase", "damaged", "no updatedAt"]))
    _, item = _newer_writers_item({"gpu": draw(texts)} if how == "field" else {})
    item[k.PARTITION_KEY] = {"S": k.resource_pk(str(draw(st.uuids())))}
    body = json.loads(item[k.RECORD_BODY]["S"])
    body["id"] = k.resource_id(item[k.PARTITION_KEY]["S"])
    item[k.RECORD_BODY] = {"S": json.dumps(body)}
    if how == "phase":
        item[k.RECORD_BODY] = {"S": json.dumps({**body, "phase": "paused"})}
        item[k.RECORD_PHASE] = {"S": "paused"}
    elif how == "damaged":
        item[k.RECORD_BODY] = {"S": "{not json " + draw(texts)}
    elif how == "no updatedAt":
        del item[k.RECORD_UPDATED_AT]
    return item


@settings(
    max_examples=8 if PROFILE == "fast" else 60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    entries=st.lists(strategies.entries(), max_size=12),
    environments=st.lists(strategies.environments(), max_size=3),
    records=st.lists(_records(), max_size=4, unique_by=lambda r: r.id),
    unreadable=st.lists(_unreadable_items(), max_size=3),
)
def test_whatever_the_stores_accept_a_save_then_a_load_gives_back(
    moto_endpoint: str,
    fixture_clients: Any,
    tables: Callable[[], Stores],
    tmp_path_factory: pytest.TempPathFactory,
    entries: list[LedgerEntry],
    environments: list[EnvironmentRecord],
    records: list[ResourceActivityRecord],
    unreadable: list[dict[str, Any]],
) -> None:
    """Ledger entries, environment records, resource records in every phase and records
    this version cannot read: whatever the stores took, the file a save writes loads into
    an empty table, and a save of that table writes the same file."""
    source, target = tables(), tables()
    for entry in entries:
        with contextlib.suppress(InvalidInputError):  # what the store refuses is not held
            source[0].append(entry)
    for environment in environments:
        with contextlib.suppress(InvalidInputError):
            source[0].save_environment(environment)
    for resource in records:
        source[1].put(resource)
    client = fixture_clients(moto_endpoint)
    for item in unreadable:
        client.put_item(TableName=source[0].table_name, Item=item)
    saved = snapshot(*source)
    path = tmp_path_factory.mktemp("data") / "dev.jsonl"
    path.write_text("".join(saved.lines), encoding="utf-8")

    loaded = load(path, *target)

    assert (loaded.entries, loaded.environments, loaded.records) == (
        saved.entries,
        saved.environments,
        saved.records,
    )
    assert snapshot(*target).lines == saved.lines
    for name, sandbox_id in source[0].scan_sessions(None):
        assert target[0].read_all(name, sandbox_id) == source[0].read_all(name, sandbox_id)
